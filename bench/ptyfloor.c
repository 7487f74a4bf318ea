/* ptyfloor.c — the kernel's floor for reading a flood through a pty, beside a pipe.
 *
 *   ptyfloor BYTES REPS MODE...
 *
 * For each repetition and each MODE (interleaved, the order rotated per
 * repetition) a child writes BYTES of 80-byte lines (bench/flood's lines, in
 * 64 KiB writes) to a pipe or to a pty slave, and this process reads them all
 * with the MODE's strategy until EOF (pipe) or EIO (pty: slave closed and
 * drained). Prints one JSON line per run and, at the end, one summary line per
 * mode (min and median wall, reads, bytes per read). No Neovim, no proctor.
 *
 * MODE is a source and a reader joined by '-':
 *   source  pipe | pty (cooked: the slave's OPOST/ONLCR, \n -> \r\n)
 *           | raw (cfmakeraw on the slave) | pkt (cooked, TIOCPKT on the master)
 *   reader  poll   poll(2) + up to 64 non-blocking reads of 64 KiB until EAGAIN
 *                  (proctor's engine: pr_stream_read_ready)
 *           block  blocking read(2) of 64 KiB
 *           big    poll(2) + non-blocking reads of 1 MiB
 *           thread a second thread does the poll reads and hands each read's
 *                  bytes to the main thread under a mutex (the engine thread ->
 *                  host queue shape)
 *           uv     libuv: uv_pipe_open on the fd, uv_read_start with 64 KiB
 *                  buffers (what Neovim's :terminal and jobstart use)
 *           uvtty  libuv: uv_tty_init on the fd (readable), uv_read_start
 * e.g. `ptyfloor 104857600 5 pipe-poll pty-poll pty-block raw-poll pty-uv`.
 * Part of `make bench` (bench/run builds it; run by hand); written for this project.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <uv.h>

#define LINE 80
#define BLOCK_LINES 819 /* 65520 bytes per write, as bench/flood */
#define MAXRUNS 4096

typedef struct {
  long long bytes, reads, max_read, wakeups;
} stats_t;

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static double tv_ms(struct timeval tv) { return tv.tv_sec * 1e3 + tv.tv_usec / 1e3; }

static void writer(int fd, long long total) {
  long long lines = total / LINE, i = 0;
  static char buf[BLOCK_LINES * LINE];
  while (i < lines) {
    size_t n = 0;
    for (int k = 0; k < BLOCK_LINES && i < lines; k++, i++) {
      char *p = buf + n;
      int w = snprintf(p, LINE, "%010lld", i);
      memset(p + w, '.', LINE - 1 - w);
      p[LINE - 1] = '\n';
      n += LINE;
    }
    for (size_t off = 0; off < n;) {
      ssize_t r = write(fd, buf + off, n - off);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) _exit(1);
      off += (size_t)r;
    }
  }
  _exit(0);
}

static int pkt_mode;

static void count(stats_t *st, const char *buf, ssize_t n) {
  (void)buf;
  if (pkt_mode) n--; /* the TIOCPKT status byte (0: data follows) */
  st->bytes += n;
  st->reads++;
  if (n > st->max_read) st->max_read = n;
}

/* Returns 1 at the end of the stream (EOF, EIO), 0 on EAGAIN. */
static int drain(int fd, char *buf, size_t len, stats_t *st, int bound) {
  for (int i = 0; i < bound; i++) {
    ssize_t n = read(fd, buf, len);
    if (n > 0) {
      count(st, buf, n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    return 1;
  }
  return 0;
}

static void read_poll(int fd, size_t len, stats_t *st) {
  char *buf = malloc(len);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, -1) < 0 && errno == EINTR) continue;
    st->wakeups++;
    if (drain(fd, buf, len, st, 64)) break;
  }
  free(buf);
}

static void read_block(int fd, stats_t *st) {
  static char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      count(st, buf, n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
}

/* ---- a reader thread handing bytes to the main thread ---- */
typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char *q;
  size_t qlen, qcap;
  int done;
  int fd;
  stats_t st;
} handoff_t;

static void *reader_thread(void *arg) {
  handoff_t *h = arg;
  static char buf[65536];
  fcntl(h->fd, F_SETFL, fcntl(h->fd, F_GETFL) | O_NONBLOCK);
  int end = 0;
  while (!end) {
    struct pollfd p = {.fd = h->fd, .events = POLLIN};
    if (poll(&p, 1, -1) < 0 && errno == EINTR) continue;
    h->st.wakeups++;
    for (int i = 0; i < 64; i++) {
      ssize_t n = read(h->fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) {
        end = 1;
        break;
      }
      count(&h->st, buf, n);
      pthread_mutex_lock(&h->mu);
      while (h->qlen + (size_t)n > h->qcap) pthread_cond_wait(&h->cv, &h->mu);
      memcpy(h->q + h->qlen, buf, (size_t)n);
      h->qlen += (size_t)n;
      pthread_cond_signal(&h->cv);
      pthread_mutex_unlock(&h->mu);
    }
  }
  pthread_mutex_lock(&h->mu);
  h->done = 1;
  pthread_cond_signal(&h->cv);
  pthread_mutex_unlock(&h->mu);
  return NULL;
}

static void read_thread(int fd, stats_t *st) {
  handoff_t h = {.fd = fd, .qcap = 8 << 20};
  pthread_mutex_init(&h.mu, NULL);
  pthread_cond_init(&h.cv, NULL);
  h.q = malloc(h.qcap);
  char *mine = malloc(h.qcap);
  pthread_t t;
  pthread_create(&t, NULL, reader_thread, &h);
  for (;;) {
    pthread_mutex_lock(&h.mu);
    while (h.qlen == 0 && !h.done) pthread_cond_wait(&h.cv, &h.mu);
    size_t n = h.qlen;
    memcpy(mine, h.q, n);
    h.qlen = 0;
    int done = h.done;
    pthread_cond_signal(&h.cv);
    pthread_mutex_unlock(&h.mu);
    if (done && n == 0) break;
  }
  pthread_join(t, NULL);
  *st = h.st;
  free(h.q);
  free(mine);
}

/* ---- libuv ---- */
static char uvbuf[65536];
static void uv_alloc(uv_handle_t *h, size_t s, uv_buf_t *b) {
  (void)h;
  (void)s;
  *b = uv_buf_init(uvbuf, sizeof(uvbuf));
}
static void uv_got(uv_stream_t *s, ssize_t n, const uv_buf_t *b) {
  stats_t *st = s->data;
  if (n > 0) {
    count(st, b->base, n);
    return;
  }
  if (n < 0) uv_close((uv_handle_t *)s, NULL);
}

static void read_uv(int fd, int tty, stats_t *st) {
  uv_loop_t loop;
  uv_loop_init(&loop);
  union {
    uv_pipe_t pipe;
    uv_tty_t tty;
  } h;
  int rc = tty ? uv_tty_init(&loop, &h.tty, fd, 1) : uv_pipe_init(&loop, &h.pipe, 0);
  if (rc == 0 && !tty) rc = uv_pipe_open(&h.pipe, fd);
  if (rc != 0) {
    fprintf(stderr, "ptyfloor: libuv: %s\n", uv_strerror(rc));
    exit(1);
  }
  h.pipe.data = st;
  uv_read_start((uv_stream_t *)&h, uv_alloc, uv_got);
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
}

typedef struct {
  char mode[32];
  double ms, child_cpu_ms;
  stats_t st;
} run_t;

static int run_one(const char *mode, long long total, run_t *out) {
  char src[16] = {0};
  const char *dash = strchr(mode, '-');
  if (!dash || dash - mode >= (long)sizeof(src)) return -1;
  memcpy(src, mode, (size_t)(dash - mode));
  const char *rd = dash + 1;
  int rfd, wfd;
  pkt_mode = 0;
  double t0 = now_ms();
  if (strcmp(src, "pipe") == 0) {
    int p[2];
    if (pipe(p) != 0) return -1;
    rfd = p[0], wfd = p[1];
  } else {
    if (openpty(&rfd, &wfd, NULL, NULL, NULL) != 0) return -1;
    if (strcmp(src, "raw") == 0) {
      struct termios t;
      tcgetattr(wfd, &t);
      cfmakeraw(&t);
      tcsetattr(wfd, TCSANOW, &t);
    } else if (strcmp(src, "pkt") == 0) {
      int one = 1;
      ioctl(rfd, TIOCPKT, &one);
      pkt_mode = 1;
    } else if (strcmp(src, "pty") != 0) {
      return -1;
    }
  }
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    close(rfd);
    if (strcmp(src, "pipe") != 0) {
      setsid();
      ioctl(wfd, TIOCSCTTY, 0);
    }
    writer(wfd, total);
  }
  close(wfd);
  memset(out, 0, sizeof(*out));
  snprintf(out->mode, sizeof(out->mode), "%s", mode);
  stats_t *st = &out->st;
  if (strcmp(rd, "poll") == 0) read_poll(rfd, 65536, st);
  else if (strcmp(rd, "big") == 0) read_poll(rfd, 1 << 20, st);
  else if (strcmp(rd, "block") == 0) read_block(rfd, st);
  else if (strcmp(rd, "thread") == 0) read_thread(rfd, st);
  else if (strcmp(rd, "uv") == 0) read_uv(rfd, 0, st);
  else if (strcmp(rd, "uvtty") == 0) read_uv(rfd, 1, st);
  else {
    kill(pid, SIGKILL);
    return -1;
  }
  out->ms = now_ms() - t0;
  int status;
  struct rusage ru;
  wait4(pid, &status, 0, &ru);
  out->child_cpu_ms = tv_ms(ru.ru_utime) + tv_ms(ru.ru_stime);
  if (rd[0] != 'u') close(rfd); /* libuv closed its own */
  return 0;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double load1(void) {
  double l = -1;
  FILE *f = fopen("/proc/loadavg", "r");
  if (f) {
    if (fscanf(f, "%lf", &l) != 1) l = -1;
    fclose(f);
  }
  return l;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: ptyfloor BYTES REPS MODE...\n");
    return 2;
  }
  long long total = atoll(argv[1]);
  int reps = atoi(argv[2]), nm = argc - 3;
  if (reps < 1 || reps * nm > MAXRUNS) return 2;
  static run_t runs[MAXRUNS];
  int nr = 0;
  for (int r = 0; r < reps; r++) {
    for (int k = 0; k < nm; k++) {
      const char *mode = argv[3 + (k + r) % nm];
      struct rusage a, b;
      getrusage(RUSAGE_SELF, &a);
      double l = load1();
      if (run_one(mode, total, &runs[nr]) != 0) {
        fprintf(stderr, "ptyfloor: bad mode or setup: %s\n", mode);
        return 2;
      }
      getrusage(RUSAGE_SELF, &b);
      run_t *x = &runs[nr++];
      double cpu = tv_ms(b.ru_utime) - tv_ms(a.ru_utime) + tv_ms(b.ru_stime) - tv_ms(a.ru_stime);
      printf("{\"mode\":\"%s\",\"ms\":%.1f,\"bytes\":%lld,\"reads\":%lld,\"per_read\":%.0f,"
             "\"max_read\":%lld,\"wakeups\":%lld,\"reader_cpu_ms\":%.1f,\"writer_cpu_ms\":%.1f,"
             "\"ctx_vol\":%ld,\"ctx_invol\":%ld,\"load1\":%.2f}\n",
             mode, x->ms, x->st.bytes, x->st.reads,
             x->st.reads ? (double)x->st.bytes / x->st.reads : 0.0, x->st.max_read, x->st.wakeups,
             cpu, x->child_cpu_ms, b.ru_nvcsw - a.ru_nvcsw, b.ru_nivcsw - a.ru_nivcsw, l);
      fflush(stdout);
    }
  }
  for (int k = 0; k < nm; k++) {
    double v[MAXRUNS];
    int n = 0;
    long long reads = 0, bytes = 0;
    for (int i = 0; i < nr; i++)
      if (strcmp(runs[i].mode, argv[3 + k]) == 0) {
        v[n++] = runs[i].ms;
        reads += runs[i].st.reads;
        bytes += runs[i].st.bytes;
      }
    qsort(v, (size_t)n, sizeof(double), cmp_d);
    printf("SUMMARY %-12s min %8.1f ms  median %8.1f ms  max %8.1f ms  bytes/read %6.0f\n",
           argv[3 + k], v[0], v[n / 2], v[n - 1], reads ? (double)bytes / reads : 0.0);
  }
  return 0;
}
