/* test_relay.c — proctor-shepherd --relay driven through a socketpair, as a link
 * would drive it over ssh: frames in on its stdin, frames out on its stdout.
 *
 * Thread: the test's only thread (the relay is a child process).
 *
 *   test ══ socketpair (its stdin and stdout) ══ proctor-shepherd --relay ──► jobs
 *
 * Usage: test_relay_asan PATH-OF-SHEPHERD (default build/proctor-shepherd-asan).
 * Checks: the hello; a spawn's SPAWNED, output and its end before EXITED; input and
 * its credit; credit-based flow control (no more than PR_WIRE_WINDOW unacknowledged);
 * resize of a pty; a tree kill through SIGNAL; EOF on stdin kills every job.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "include/proctor_test.h"
#include "tap.h"

static const char *shepherd = "build/proctor-shepherd-asan";

typedef struct {
  int fd;
  pid_t pid;
  char buf[1 << 18];
  size_t len;
} relay_t;

static relay_t R;

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int start(void) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) return -1;
  R.len = 0;
  R.pid = fork();
  if (R.pid == 0) {
    dup2(sv[1], 0);
    dup2(sv[1], 1);
    execl(shepherd, shepherd, "--relay", (char *)NULL);
    _exit(127);
  }
  close(sv[1]);
  R.fd = sv[0];
  return R.pid > 0 ? 0 : -1;
}

static void send_frame(uint32_t type, uint32_t flags, uint64_t job, int64_t a, int64_t b,
                       const void *p, uint32_t len) {
  pr_wire_hdr_t h = {.type = type, .flags = flags, .job = job, .a = a, .b = b, .len = len};
  if (write(R.fd, &h, sizeof(h)) != (ssize_t)sizeof(h)) return;
  if (len && write(R.fd, p, len) != (ssize_t)len) return;
}

/* A spawn request: cwd "", argv, env "T=1". */
static void spawn(uint64_t job, uint32_t flags, const char *const *argv) {
  char p[4096];
  size_t n = 0, argc = 0;
  p[n++] = 0; /* cwd: the relay's */
  for (; argv[argc]; argc++) {
    size_t l = strlen(argv[argc]) + 1;
    memcpy(p + n, argv[argc], l);
    n += l;
  }
  memcpy(p + n, "T=1", 4);
  n += 4;
  send_frame(PR_W_SPAWN, flags, job, (80 << 16) | 24, (int64_t)argc, p, (uint32_t)n);
}

/* The next frame (payload copied into out, NUL-terminated, at most cap-1 bytes), or 0
 * at EOF / after ms. */
static int next_frame(pr_wire_hdr_t *h, char *out, size_t cap, int ms) {
  uint64_t end = now_ms() + (uint64_t)ms;
  for (;;) {
    if (R.len >= sizeof(*h)) {
      memcpy(h, R.buf, sizeof(*h));
      if (R.len >= sizeof(*h) + h->len) {
        size_t k = h->len < cap - 1 ? h->len : cap - 1;
        if (out) {
          memcpy(out, R.buf + sizeof(*h), k);
          out[k] = 0;
        }
        memmove(R.buf, R.buf + sizeof(*h) + h->len, R.len - sizeof(*h) - h->len);
        R.len -= sizeof(*h) + h->len;
        return 1;
      }
    }
    uint64_t t = now_ms();
    if (t >= end) return 0;
    struct pollfd p = {R.fd, POLLIN, 0};
    if (poll(&p, 1, (int)(end - t)) <= 0) return 0;
    ssize_t n = read(R.fd, R.buf + R.len, sizeof(R.buf) - R.len);
    if (n <= 0) return 0;
    R.len += (size_t)n;
  }
}

/* Frames until one of `type` for `job` (the others skipped, output appended to
 * `acc` when given). */
static int wait_for(uint32_t type, uint64_t job, pr_wire_hdr_t *h, char *acc, size_t cap, int ms) {
  char p[PR_WIRE_MAX_PAYLOAD + 1];
  uint64_t end = now_ms() + (uint64_t)ms;
  while (now_ms() < end) {
    if (!next_frame(h, p, sizeof(p), (int)(end - now_ms()))) return 0;
    if (acc && h->type == PR_W_DATA && h->job == job && h->len)
      strncat(acc, p, cap - strlen(acc) - 1);
    if (h->type == type && h->job == job) return 1;
  }
  return 0;
}

/* After each test, passed or failed: a relay still there is killed (its reapers
 * take its death as the link's end and kill their jobs). */
static void reap_leftover(void) {
  if (R.pid <= 0) return;
  if (waitpid(R.pid, NULL, WNOHANG) == 0) {
    kill(R.pid, SIGKILL);
    waitpid(R.pid, NULL, 0);
  }
  R.pid = 0;
}

#undef RUN
#define RUN(fn)                              \
  do {                                       \
    if (!tap_selected(#fn)) break;           \
    tap_failed_now = 0;                      \
    fn();                                    \
    reap_leftover();                         \
    if (tap_failed_now) {                    \
      tap_failed++;                          \
      printf("FAIL %s: %s\n", #fn, tap_why); \
    } else {                                 \
      tap_passed++;                          \
      printf("PASS %s\n", #fn);              \
    }                                        \
    fflush(stdout);                          \
  } while (0)

static int stop(void) {
  close(R.fd);
  int st = 0;
  waitpid(R.pid, &st, 0);
  R.pid = 0;
  return st;
}

static void test_relay_run_output_exit(void) {
  CHECK(start() == 0);
  pr_wire_hdr_t h;
  CHECK(next_frame(&h, NULL, 1, 10000));
  CHECK_EQ(h.type, PR_W_PONG);   /* the hello */
  CHECK_EQ(h.a, PR_RELAY_HELLO); /* its byte order and version */
  spawn(7, 0, (const char *const[]){"sh", "-c", "echo out; echo err >&2; echo $T; exit 3", NULL});
  CHECK(wait_for(PR_W_SPAWNED, 7, &h, NULL, 0, 10000));
  CHECK(h.a > 0);
  char out[256] = "";
  int eof1 = 0, exited = 0;
  char p[PR_WIRE_MAX_PAYLOAD + 1];
  while (!exited && next_frame(&h, p, sizeof(p), 10000)) {
    if (h.type == PR_W_DATA && h.a == 1 && h.len) strcat(out, p);
    if (h.type == PR_W_DATA && h.a == 1 && !h.len) eof1 = 1;
    if (h.type == PR_W_EXITED) exited = 1;
  }
  CHECK(exited);
  CHECKF(eof1, "the output's end came after the exit");
  CHECK(strcmp(out, "out\n1\n") == 0);
  CHECK_EQ(h.b, 3);
  send_frame(PR_W_RELEASE, 0, 7, 0, 0, NULL, 0);
  int st = stop();
  CHECK(WIFEXITED(st));
}

static void test_relay_input_and_credit(void) {
  CHECK(start() == 0);
  pr_wire_hdr_t h;
  spawn(1, PR_WF_STDIN, (const char *const[]){"cat", NULL});
  CHECK(wait_for(PR_W_SPAWNED, 1, &h, NULL, 0, 10000));
  send_frame(PR_W_DATA, 0, 1, 0, 0, "abc\n", 4);
  char out[64] = "";
  CHECK(wait_for(PR_W_CREDIT, 1, &h, out, sizeof(out), 10000));
  CHECK_EQ(h.a, 0);
  CHECK_EQ(h.b, 4);
  send_frame(PR_W_DATA, 0, 1, 0, 0, NULL, 0); /* close its stdin */
  CHECK(wait_for(PR_W_EXITED, 1, &h, out, sizeof(out), 10000));
  CHECK(strcmp(out, "abc\n") == 0);
  stop();
}

static void test_relay_flow_control(void) {
  CHECK(start() == 0);
  pr_wire_hdr_t h;
  spawn(2, 0, (const char *const[]){"head", "-c", "2000000", "/dev/zero", NULL});
  CHECK(wait_for(PR_W_SPAWNED, 2, &h, NULL, 0, 10000));
  /* No credit given: at most the window comes, then nothing. */
  int64_t got = 0;
  char p[PR_WIRE_MAX_PAYLOAD + 1];
  while (next_frame(&h, p, sizeof(p), 500))
    if (h.type == PR_W_DATA && h.job == 2) got += h.len;
  CHECKF(got == PR_WIRE_WINDOW, "%lld bytes without credit", (long long)got);
  /* Credit as we go: all of it, then the end. */
  int64_t total = got, owed = got;
  int ended = 0;
  uint64_t end = now_ms() + 30000;
  while (!ended && now_ms() < end) {
    if (owed > 0) {
      send_frame(PR_W_CREDIT, 0, 2, 1, owed, NULL, 0);
      owed = 0;
    }
    if (!next_frame(&h, p, sizeof(p), 5000)) break;
    if (h.type == PR_W_DATA && h.job == 2 && h.a == 1) {
      if (h.len == 0) ended = 1;
      total += h.len;
      owed += h.len;
    }
  }
  CHECK(ended);
  CHECK_EQ(total, 2000000);
  stop();
}

static void test_relay_pty_resize(void) {
  CHECK(start() == 0);
  pr_wire_hdr_t h;
  spawn(3, PR_WF_PTY, (const char *const[]){"sh", "-c", "stty size; read x; stty size", NULL});
  CHECK(wait_for(PR_W_SPAWNED, 3, &h, NULL, 0, 10000));
  char out[512] = "";
  uint64_t end = now_ms() + 10000;
  char p[PR_WIRE_MAX_PAYLOAD + 1];
  while (!strstr(out, "24 80") && now_ms() < end && next_frame(&h, p, sizeof(p), 10000))
    if (h.type == PR_W_DATA && h.len) strncat(out, p, sizeof(out) - strlen(out) - 1);
  CHECK(strstr(out, "24 80"));
  send_frame(PR_W_RESIZE, 0, 3, (132 << 16) | 50, 0, NULL, 0);
  send_frame(PR_W_DATA, 0, 3, 0, 0, "\n", 1);
  CHECK(wait_for(PR_W_EXITED, 3, &h, out, sizeof(out), 10000));
  CHECKF(strstr(out, "50 132"), "%s", out);
  stop();
}

/* A job that ignores TERM, with a setsid escapee: SIGNAL TERM then KILL leaves none. */
static void test_relay_tree_kill(void) {
  CHECK(start() == 0);
  pr_wire_hdr_t h;
  spawn(4, 0,
        (const char *const[]){"sh", "-c", "trap '' TERM; setsid sleep 300 & echo $!; wait", NULL});
  CHECK(wait_for(PR_W_SPAWNED, 4, &h, NULL, 0, 10000));
  char out[64] = "";
  char p[PR_WIRE_MAX_PAYLOAD + 1];
  while (!strchr(out, '\n') && next_frame(&h, p, sizeof(p), 10000))
    if (h.type == PR_W_DATA && h.len) strncat(out, p, sizeof(out) - strlen(out) - 1);
  pid_t escapee = (pid_t)atoi(out);
  CHECK(escapee > 0);
  send_frame(PR_W_SIGNAL, 0, 4, SIGTERM, 0, NULL, 0);
  send_frame(PR_W_SIGNAL, 0, 4, SIGKILL, 0, NULL, 0);
  CHECK(wait_for(PR_W_EXITED, 4, &h, NULL, 0, 10000));
  uint64_t end = now_ms() + 10000;
  while (kill(escapee, 0) == 0 && now_ms() < end) usleep(10000);
  CHECKF(kill(escapee, 0) != 0, "the escapee %d lives", (int)escapee);
  stop();
}

/* The link is gone (EOF on stdin): every job dies, the relay exits. */
static void test_relay_eof_kills_all(void) {
  CHECK(start() == 0);
  pr_wire_hdr_t h;
  pid_t pids[3];
  for (int i = 0; i < 3; i++) {
    spawn(10 + (uint64_t)i, 0,
          (const char *const[]){"sh", "-c", "trap '' TERM HUP; setsid sleep 300 & echo $!; wait",
                                NULL});
    char out[64] = "";
    CHECK(wait_for(PR_W_SPAWNED, 10 + (uint64_t)i, &h, NULL, 0, 10000));
    char p[PR_WIRE_MAX_PAYLOAD + 1];
    while (!strchr(out, '\n') && next_frame(&h, p, sizeof(p), 10000))
      if (h.type == PR_W_DATA && h.job == 10 + (uint64_t)i && h.len)
        strncat(out, p, sizeof(out) - strlen(out) - 1);
    pids[i] = (pid_t)atoi(out);
    CHECK(pids[i] > 0);
  }
  shutdown(R.fd, SHUT_WR); /* EOF on its stdin */
  int st = 0;
  uint64_t end = now_ms() + 20000;
  while (waitpid(R.pid, &st, WNOHANG) == 0 && now_ms() < end) usleep(10000);
  if (now_ms() < end) R.pid = 0; /* reaped */
  for (int i = 0; i < 3; i++) {
    while (kill(pids[i], 0) == 0 && now_ms() < end) usleep(10000);
    CHECKF(kill(pids[i], 0) != 0, "job %d's escapee %d outlived the link", i, (int)pids[i]);
  }
  close(R.fd);
}

/* The relay's stderr is /dev/null (nothing it holds may keep a transport open):
 * its sanitizer reports go to files in a private directory, which must stay empty. */
static char logdir[64] = "/tmp/proctor-relay-XXXXXX";

static void test_relay_no_sanitizer_reports(void) {
  char cmd[160];
  snprintf(cmd, sizeof(cmd), "ls -A %s | grep -c . ", logdir);
  FILE *p = popen(cmd, "r");
  CHECK(p != NULL);
  int n = -1;
  if (fscanf(p, "%d", &n) != 1) n = -1;
  pclose(p);
  snprintf(cmd, sizeof(cmd), "cat %s/* 2>/dev/null | head -c 300", logdir);
  char what[320] = "";
  p = popen(cmd, "r");
  if (p) {
    size_t k = fread(what, 1, sizeof(what) - 1, p);
    what[k] = 0;
    pclose(p);
  }
  CHECKF(n == 0, "%d report(s): %s", n, what);
}

int main(int argc, char **argv) {
  if (argc > 1) shepherd = argv[1];
  signal(SIGPIPE, SIG_IGN);
  if (mkdtemp(logdir) == NULL) return 2;
  char opt[160];
  snprintf(opt, sizeof(opt), "log_path=%s/asan", logdir);
  setenv("ASAN_OPTIONS", opt, 1);
  snprintf(opt, sizeof(opt), "log_path=%s/ubsan:print_stacktrace=1", logdir);
  setenv("UBSAN_OPTIONS", opt, 1);
  RUN(test_relay_run_output_exit);
  RUN(test_relay_input_and_credit);
  RUN(test_relay_flow_control);
  RUN(test_relay_pty_resize);
  RUN(test_relay_tree_kill);
  RUN(test_relay_eof_kills_all);
  RUN(test_relay_no_sanitizer_reports);
  char rm[96];
  snprintf(rm, sizeof(rm), "rm -rf %s", logdir);
  if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", logdir);
  return TAP_END();
}
