/* engine/shepherd_link.c — start the shepherd and speak the wire protocol with it.
 *
 * Thread: engine. The host never has a long-lived child: the shepherd is
 * started with posix_spawn (vfork-like, safe in a threaded host) and forks
 * once more at once; the host reaps that first process by its pid — never
 * waitpid(-1) — and the real shepherd is adopted by init.
 *
 *   engine ── socketpair(SEQPACKET) ──► proctor-shepherd --daemon 3 --tag <random token>
 *   uv_poll_t on our end: readable → pr_wire_recv → the owner's pr_sup_ops_t
 *                          writable → flush sendq (only while it is non-empty)
 *   EOF (the shepherd died) → the owner's lost() → sweep: kill what carries its tag
 *   liveness: while it holds jobs, PING after PR_SUP_PING_MS of silence; nothing back
 *             for PR_SUP_ANSWER_MS → ask the kernel: stopped, or asleep without using
 *             any CPU → SIGKILL it, then as after EOF; running, runnable or using CPU
 *             (a loaded machine, a large request) → PING again (shepherd_link.h)
 *   sendq: bounded for spawns to a stopped shepherd (PR_SUP_SENDQ_MAX bytes; past it PR_EBUSY)
 *   shutdown: SHUTDOWN, wait for EOF (bounded); no EOF → SIGKILL it, then the sweep
 */

#include "engine/shepherd_link.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/liveness.h"
#include "base/locked.h"
#include "base/pidfd.h"
#include "include/proctor.h"

extern char **environ;

typedef struct {
  pr_queue_t node;
  pr_wire_hdr_t h;
  char payload[];
} packet_t;

typedef struct pr_sup_conn {
  uv_poll_t poll;   /* data: the pr_sup_t; first member */
  uv_timer_t timer; /* the liveness check (data: the pr_sup_t); runs only while busy */
  int handles;      /* open handles; the fd is closed and the conn freed at 0 */
  int fd;
} conn_t;

const char *pr_sup_last_error(const pr_sup_t *s) { return s->last_error; }

/* A spawn payload may hold secret values: wipe it before it goes back. */
static void packet_free(packet_t *p) {
  pr_wipe(p->payload, p->h.len);
  free(p);
}

static size_t packet_bytes(const packet_t *p) { return sizeof(p->h) + p->h.len; }

/* Take the head of the send queue off and free it. */
static void drop_head(pr_sup_t *s) {
  packet_t *p = PR_QUEUE_DATA(pr_queue_head(&s->sendq), packet_t, node);
  pr_queue_remove(&p->node);
  s->queued -= packet_bytes(p);
  packet_free(p);
}

static void drop_all(pr_sup_t *s) {
  while (!pr_queue_empty(&s->sendq)) drop_head(s);
}

/* The directory of the shared object (or program) that contains this code. */
static char *self_dir(void) {
  Dl_info info;
  if (dladdr((void *)&pr_sup_init, &info) == 0 || info.dli_fname == NULL) return NULL;
  char *p = realpath(info.dli_fname, NULL);
  if (p == NULL) return NULL;
  char *slash = strrchr(p, '/');
  if (slash) *slash = 0;
  return p;
}

int pr_sup_init(pr_sup_t *s, uv_loop_t *loop, const char *p, const pr_sup_ops_t *ops, void *arg) {
  memset(s, 0, sizeof(*s));
  s->loop = loop;
  s->ops = ops;
  s->arg = arg;
  s->fd = -1;
  s->last_error[0] = 0;
  s->lost_reason = "supervisor_lost";
  pr_queue_init(&s->sendq);
  s->recvbuf = malloc(PR_WIRE_MAX_PAYLOAD);
  if (s->recvbuf == NULL) return PR_ENOMEM;
  if (p == NULL || *p == 0) p = getenv("PROCTOR_SHEPHERD");
  if (p != NULL && *p) {
    s->path = strdup(p);
  } else {
    char *dir = self_dir();
    if (dir != NULL) {
      size_t n = strlen(dir) + sizeof("/proctor-shepherd");
      s->path = malloc(n);
      if (s->path) snprintf(s->path, n, "%s/proctor-shepherd", dir);
      free(dir);
    } else {
      s->path = strdup("proctor-shepherd");
    }
  }
  return s->path ? 0 : PR_ENOMEM;
}

void pr_sup_destroy(pr_sup_t *s) {
  drop_all(s);
  free(s->recvbuf);
  free(s->path);
  free(s->link_cmd);
  s->link_cmd = NULL;
  s->recvbuf = NULL;
  s->path = NULL;
}

int pr_sup_alive(const pr_sup_t *s) { return s->fd >= 0; }

static void conn_unref(conn_t *c) {
  if (--c->handles > 0) return;
  close(c->fd);
  free(c);
}

static void on_poll_closed(uv_handle_t *h) { conn_unref((conn_t *)h); }

static void on_timer_closed(uv_handle_t *h) {
  conn_unref((conn_t *)((char *)h - offsetof(conn_t, timer)));
}

/* Drop the connection (handles closed, fd closed in their last callback). */
static void drop(pr_sup_t *s) {
  if (s->fd < 0) return;
  conn_t *c = s->conn;
  s->fd = -1;
  if (c != NULL) {
    uv_close((uv_handle_t *)&c->poll, on_poll_closed);
    uv_close((uv_handle_t *)&c->timer, on_timer_closed);
  }
  s->conn = NULL;
  drop_all(s);
  s->jobs = 0;
  s->ping_at = 0;
}

static void on_poll(uv_poll_t *h, int status, int events);

int pr_sup_close_idle(pr_sup_t *s) {
  if (s->jobs > 0 || !pr_queue_empty(&s->sendq)) return PR_EBUSY;
  drop(s);
  return 0;
}

static void update_poll(pr_sup_t *s) {
  conn_t *c = s->conn;
  if (c == NULL) return;
  int want = UV_READABLE | (pr_queue_empty(&s->sendq) ? 0 : UV_WRITABLE);
  uv_poll_start(&c->poll, want, on_poll);
}

static int flush(pr_sup_t *s) {
  while (!pr_queue_empty(&s->sendq)) {
    packet_t *p = PR_QUEUE_DATA(pr_queue_head(&s->sendq), packet_t, node);
    int rc = pr_wire_send(s->fd, &p->h, p->payload, NULL, 0, 1);
    if (rc == -EAGAIN) break;
    drop_head(s);
    if (rc < 0) return rc;
    s->last_rx = uv_now(s->loop); /* its full socket took more: it reads, so it lives */
  }
  update_poll(s);
  return 0;
}

/* ---- a dead shepherd's leftovers --------------------------------------------------- */

/* Whether process `pid`'s initial environment (`what` "environ") or command
 * line ("cmdline") holds a string starting with `needle` (n bytes; a needle
 * whose last byte is its NUL matches that whole string only). */
static int env_has(pid_t pid, const char *what, const char *needle, size_t n) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, what);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[16384];
  size_t keep = 0; /* bytes of a string cut by the previous read */
  int found = 0;
  for (;;) {
    ssize_t r = read(fd, buf + keep, sizeof(buf) - keep);
    if (r <= 0) break;
    size_t len = keep + (size_t)r, at = 0;
    while (at < len) {
      char *z = memchr(buf + at, 0, len - at);
      if (z == NULL) break;
      if ((size_t)(z - (buf + at)) + 1 >= n && memcmp(buf + at, needle, n) == 0) found = 1;
      at = (size_t)(z - buf) + 1;
    }
    if (found) break;
    keep = len - at;
    if (keep == sizeof(buf)) keep = 0; /* a string longer than the buffer: not ours */
    memmove(buf, buf + at, keep);
  }
  close(fd);
  return found;
}

/* One pass over /proc: SIGKILL every process of our uid that carries the
 * tag, through a pidfd opened before its environment is read (so a pid
 * reused meanwhile is never hit: the pidfd names the process that had it,
 * and a process that is still alive has not given its pid away). A process
 * whose command line carries the bare tag is a reaper of that shepherd (a
 * fork of it): SIGCONT, not SIGKILL, so that one its job stopped takes the
 * shepherd's death signal and kills the rest of its job, escapees included
 * (it alone can find those); not counted, it exits on its own. */
static int sweep_once(const char *needle, size_t n, const char *tag) {
  DIR *d = opendir("/proc");
  if (d == NULL) return 0;
  uid_t me = geteuid();
  pid_t self = getpid();
  int hit = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    pid_t pid = (pid_t)atoi(e->d_name);
    struct stat st;
    if (pid == self || fstatat(dirfd(d), e->d_name, &st, 0) != 0 || st.st_uid != me) continue;
    int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pfd < 0) continue;
    if (env_has(pid, "environ", needle, n)) {
      if (syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0) == 0) hit++;
    } else if (env_has(pid, "cmdline", tag, strlen(tag) + 1)) {
      syscall(SYS_pidfd_send_signal, pfd, SIGCONT, NULL, 0);
    }
    close(pfd);
  }
  closedir(d);
  return hit;
}

int pr_sup_sweep(pr_sup_t *s) {
  if (s->stale[0] == 0) return 0;
  char needle[64];
  int n = snprintf(needle, sizeof(needle), "PROCTOR_JOB=%s:", s->stale);
  int total = 0;
  /* A process being killed may still fork (its children carry the tag too):
   * look again until a pass finds nobody, a few times at most. */
  for (int pass = 0; pass < 5; pass++) {
    int hit = sweep_once(needle, (size_t)n, s->stale);
    total += hit;
    if (hit == 0) break;
  }
  return total;
}

static void lost(pr_sup_t *s) {
  drop(s);
  memcpy(s->stale, s->tag,
         sizeof(s->stale)); /* its reapers kill their jobs; this is for the rest */
  s->tag[0] = 0;
  s->ops->lost(s->arg, s);
  pr_sup_sweep(s);
}

/* Read what the shepherd sent, a bounded batch so one busy shepherd cannot
 * starve the loop. Returns 1 when the shepherd is gone (lost() was called). */
static int read_batch(pr_sup_t *s) {
  for (int i = 0; i < 256 && s->fd >= 0; i++) {
    pr_wire_hdr_t ph;
    int fds[PR_WIRE_MAX_FDS], nfds = 0;
    int rc = pr_wire_recv(s->fd, &ph, s->recvbuf, fds, &nfds, 1);
    if (rc == -EAGAIN) return 0;
    if (rc == -EPROTO) continue;
    if (rc <= 0) {
      lost(s);
      return 1;
    }
    s->last_rx = uv_now(s->loop); /* any packet shows it alive */
    switch (ph.type) {
    case PR_W_SPAWNED: s->ops->spawned(s->arg, &ph, fds, nfds); break;
    case PR_W_FAILED:
      if (s->jobs > 0) s->jobs--; /* no RELEASE follows a failed spawn */
      s->ops->failed(s->arg, &ph);
      break;
    case PR_W_EXITED: s->ops->exited(s->arg, &ph); break;
    case PR_W_EMPTY: s->ops->empty(s->arg, &ph); break;
    case PR_W_LOST: /* a link: how its transport ended; EOF follows */
      snprintf(s->lost_msg, sizeof(s->lost_msg), "%.*s", (int)ph.len, s->recvbuf);
      for (int k = 0; k < nfds; k++) close(fds[k]);
      break;
    case PR_W_PONG:
      if (ph.a == s->ping_token) s->ping_at = 0;
      if (ph.b > 0) s->shep_pid = ph.b;
      break;
    default:
      for (int k = 0; k < nfds; k++) close(fds[k]);
      break;
    }
  }
  return 0;
}

static void on_poll(uv_poll_t *h, int status, int events) {
  pr_sup_t *s = (pr_sup_t *)h->data;
  if (status < 0) {
    lost(s);
    return;
  }
  if (events & UV_WRITABLE) {
    if (flush(s) < 0) { /* gone: what it said before its EOF first (a link's LOST) */
      if (!read_batch(s)) lost(s);
      return;
    }
  }
  if (events & UV_READABLE) read_batch(s);
}

/* ---- liveness -------------------------------------------------------------------- */

/* Whether the shepherd is stopped (SIGSTOP, or traced). */
static int stopped(const pr_sup_t *s) {
  char st = pr_proc_state(s->shep_pid);
  return st == 'T' || st == 't';
}

static int64_t peer_pid(const pr_sup_t *s);

static int busy(const pr_sup_t *s) { return s->jobs > 0 || !pr_queue_empty(&s->sendq); }

static void on_tick(uv_timer_t *t);

/* Start the liveness check if it is not running (the link just got busy). */
static void arm(pr_sup_t *s) {
  conn_t *c = s->conn;
  if (c == NULL || uv_is_active((uv_handle_t *)&c->timer)) return;
  uv_timer_start(&c->timer, on_tick, PR_SUP_TICK_MS, PR_SUP_TICK_MS);
}

static void kill_shepherd(const pr_sup_t *s);

/* The shepherd's pid: from its PONGs, else the process holding the other end
 * of the socket (a shepherd too starved to have said hello); 0 if none. */
static int64_t shepherd_pid(pr_sup_t *s) {
  if (s->shep_pid <= 0) s->shep_pid = peer_pid(s);
  return s->shep_pid;
}

static void ping(pr_sup_t *s, uint64_t now) {
  s->ping_at = now;
  pr_sup_send(s, PR_W_PING, 0, 0, ++s->ping_token, 0, NULL, 0);
}

/* Nothing came for PR_SUP_ANSWER_MS after a PING: 1 when the kernel says
 * the shepherd works, 0 when it is lost (base/liveness.h; the CPU budget of
 * a loop: PR_SUP_ANSWER_MS since the first PING of this silence). */
static int working(pr_sup_t *s) {
  return pr_liveness_working(&s->live, shepherd_pid(s), (uint64_t)PR_SUP_ANSWER_MS * 1000000u);
}

static void on_tick(uv_timer_t *t) {
  pr_sup_t *s = (pr_sup_t *)t->data;
  if (!busy(s)) { /* idle: no check, no timer, no cost */
    uv_timer_stop(t);
    s->ping_at = 0;
    return;
  }
  uint64_t now = uv_now(s->loop);
  /* It spoke (or read) after the PING: the answer waits behind its work. */
  if (s->ping_at != 0 && s->last_rx > s->ping_at) s->ping_at = 0;
  if (s->ping_at == 0) {
    if (now - s->last_rx < PR_SUP_PING_MS) return; /* it spoke lately */
    pr_liveness_asked(&s->live, shepherd_pid(s));
    ping(s, now);
    return;
  }
  if (now - s->ping_at < PR_SUP_ANSWER_MS) return;
  /* A starved loop runs its timers before it polls: give it what waits for
   * it and take what came first. */
  if (!pr_queue_empty(&s->sendq) && flush(s) < 0) {
    if (!read_batch(s)) lost(s);
    return;
  }
  if (read_batch(s) || s->ping_at == 0 || s->last_rx > s->ping_at) return;
  if (working(s)) { /* alive on a loaded machine: ask again */
    ping(s, now);
    return;
  }
  /* Stopped (SIGSTOP), gone or hung: killed and handled as a dead one:
   * lost(), the sweep, a new one later. */
  kill_shepherd(s);
  lost(s);
}

int pr_sup_ensure(pr_sup_t *s) {
  if (s->fd >= 0) return 0;
  pr_sup_sweep(s); /* what a dead shepherd left, before a new one starts */
  s->stale[0] = 0;
  int sv[2] = {-1, -1}, child = -1, rc = PR_ESHEPHERD;
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  int fa_ok = 0, attr_ok = 0;
  conn_t *c = NULL;
  if (access(s->path, X_OK) != 0) {
    snprintf(s->last_error, sizeof(s->last_error), "%s: %s", s->path, strerror(errno));
    return PR_ESHEPHERD;
  }
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) goto fail_errno;
  /* The child end must not already be fd 3 (dup2 onto itself would keep
   * FD_CLOEXEC): move it high first. */
  child = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
  if (child < 0) goto fail_errno;
  close(sv[1]);
  sv[1] = -1;
  struct stat cst;
  s->peer_ino = fstat(child, &cst) == 0 ? (unsigned long)cst.st_ino : 0;
  int big = 1 << 20;
  setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
  setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
  if (posix_spawn_file_actions_init(&fa) != 0) goto fail_errno;
  fa_ok = 1;
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, child, 3);
  if (posix_spawnattr_init(&attr) != 0) goto fail_errno;
  attr_ok = 1;
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  /* A tag no other shepherd's jobs carry, so a sweep after this one's death
   * can only ever hit what it started. */
  uint64_t rnd[2] = {0, 0};
  if (getrandom(rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd)) {
    rnd[0] ^= pr_hrtime();
    rnd[1] ^= (uint64_t)getpid() << 32 ^ (uint64_t)(uintptr_t)s;
  }
  snprintf(s->tag, sizeof(s->tag), "%016llx%016llx", (unsigned long long)rnd[0],
           (unsigned long long)rnd[1]);
  char *argv[] = {s->path, "--daemon", "3", "--tag", s->tag, "--link", s->link_cmd, NULL};
  if (s->link_cmd == NULL) argv[5] = NULL;
  char *envp[] = {NULL};
  pid_t pid;
  s->lost_msg[0] = 0;
  /* A link's transport (ssh) needs the host's environment: HOME, SSH_AUTH_SOCK, PATH. */
  int err = posix_spawn(&pid, s->path, &fa, &attr, argv, s->link_cmd ? environ : envp);
  if (err != 0) {
    errno = err;
    goto fail_errno;
  }
  /* Reap the first process (it forks the real shepherd and exits at once).
   * ECHILD: another thread of the host reaped it; that is fine. */
  int st;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  close(child);
  child = -1;
  c = calloc(1, sizeof(*c));
  if (c == NULL) goto fail_errno;
  c->fd = sv[0];
  if (uv_poll_init(s->loop, &c->poll, sv[0]) != 0) goto fail_errno;
  uv_timer_init(s->loop, &c->timer); /* cannot fail */
  c->poll.data = s;
  c->timer.data = s;
  c->handles = 2;
  s->fd = sv[0];
  s->last_rx = uv_now(s->loop);
  s->ping_at = 0;
  s->jobs = 0;
  s->shep_pid = 0;
  s->conn = c;
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  update_poll(s);
  s->last_error[0] = 0;
  return 0;

fail_errno:
  snprintf(s->last_error, sizeof(s->last_error), "%s: %s", s->path, strerror(errno));
  if (fa_ok) posix_spawn_file_actions_destroy(&fa);
  if (attr_ok) posix_spawnattr_destroy(&attr);
  if (sv[0] >= 0) close(sv[0]);
  if (sv[1] >= 0) close(sv[1]);
  if (child >= 0) close(child);
  free(c);
  return rc;
}

static int enqueue(pr_sup_t *s, const pr_wire_hdr_t *h, const char *payload) {
  packet_t *p = malloc(sizeof(*p) + h->len);
  if (p == NULL) return PR_ENOMEM;
  p->h = *h;
  if (h->len) memcpy(p->payload, payload, h->len);
  pr_queue_push(&s->sendq, &p->node);
  s->queued += packet_bytes(p);
  return 0;
}

int pr_sup_send(pr_sup_t *s, uint32_t type, uint32_t flags, uint64_t job, int64_t a, int64_t b,
                const char *payload, size_t len) {
  if (s->fd < 0) return PR_ESHEPHERD;
  if (type == PR_W_SPAWN) {
    s->last_error[0] = 0;
    /* A shepherd that does not read (stopped, until the liveness check
     * kills it) must not make the host hold every spawn asked meanwhile. */
    if (s->queued >= PR_SUP_SENDQ_MAX && stopped(s)) {
      snprintf(
          s->last_error, sizeof(s->last_error),
          "the shepherd is stopped: %zu bytes of spawn requests wait for it (the bound is %zu)",
          s->queued, PR_SUP_SENDQ_MAX);
      return PR_EBUSY;
    }
  }
  int queued = 0;
  size_t off = 0;
  do {
    size_t n = len - off;
    if (n > PR_WIRE_MAX_PAYLOAD) n = PR_WIRE_MAX_PAYLOAD;
    pr_wire_hdr_t h = {
        .type = type, .flags = flags, .job = job, .a = a, .b = b, .len = (uint32_t)n};
    if (off + n < len) h.flags |= PR_WF_MORE;
    const char *p = payload ? payload + off : NULL; /* no arithmetic on NULL */
    int rc = -EAGAIN;
    if (pr_queue_empty(&s->sendq)) rc = pr_wire_send(s->fd, &h, p, NULL, 0, 1);
    if (rc == -EAGAIN) {
      if (enqueue(s, &h, p) != 0) return PR_ENOMEM;
      queued = 1;
    } else if (rc == -EPIPE || rc == -ECONNRESET) {
      /* It is gone already (a target's link that refused its transport
       * exits at once), its last words and EOF not read yet: the packet is
       * sent as far as anyone can send it, and the poll's EOF (lost())
       * ends what it was for with the loss's reason and message. */
    } else if (rc < 0) {
      return PR_ESHEPHERD;
    }
    off += n;
  } while (off < len);
  if (queued) update_poll(s);
  if (type == PR_W_SPAWN) s->jobs++;
  if (type == PR_W_RELEASE && s->jobs > 0) s->jobs--;
  if (busy(s)) arm(s);
  return 0;
}

/* Is `pid` the process whose fd 3 is the shepherd's end of our socket? */
static int holds_peer(const pr_sup_t *s, long pid) {
  char path[64], link[64], want[64];
  snprintf(path, sizeof(path), "/proc/%ld/fd/3", pid);
  snprintf(want, sizeof(want), "socket:[%lu]", s->peer_ino);
  ssize_t n = readlink(path, link, sizeof(link) - 1);
  if (n <= 0) return 0;
  link[n] = 0;
  return strcmp(link, want) == 0;
}

/* Call fn(s, pid) for each process (of any uid we may read) whose fd 3 is
 * the shepherd's end of our socket, until fn returns nonzero; returns that
 * pid, or 0. */
static int64_t each_peer(const pr_sup_t *s, int (*fn)(const pr_sup_t *s, long pid)) {
  DIR *d = s->peer_ino ? opendir("/proc") : NULL;
  if (d == NULL) return 0;
  struct dirent *de;
  long found = 0;
  while (found == 0 && (de = readdir(d)) != NULL) {
    char *end;
    long pid = strtol(de->d_name, &end, 10);
    if (*end || pid <= 1 || pid == (long)getpid() || !holds_peer(s, pid)) continue;
    if (fn(s, pid)) found = pid;
  }
  closedir(d);
  return found;
}

static int first(const pr_sup_t *s, long pid) { return 1; }

static int64_t peer_pid(const pr_sup_t *s) { return each_peer(s, first); }

/* SIGKILL it by a pidfd opened and checked again before the signal (never a bare pid). */
static int kill_peer(const pr_sup_t *s, long pid) {
  int pfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
  if (pfd < 0) return 0;
  if (holds_peer(s, pid)) syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
  close(pfd);
  return 0;
}

/* SIGKILL the shepherd: every process holding the other end of the socket. */
static void kill_shepherd(const pr_sup_t *s) { each_peer(s, kill_peer); }

int pr_sup_shutdown(pr_sup_t *s, int grace_ms, int wait_ms) {
  pr_sup_sweep(s); /* a shepherd that died earlier left these: nobody else will kill them */
  s->stale[0] = 0;
  if (s->fd < 0) return 0;
  drop_all(s); /* SHUTDOWN kills what they were for */
  pr_wire_hdr_t h = {.type = PR_W_SHUTDOWN, .a = grace_ms};
  uint64_t deadline = uv_hrtime() / 1000000 + (uint64_t)wait_ms;
  int sent = 0, gone = 0;
  while (!gone) {
    if (!sent) {
      int rc = pr_wire_send(s->fd, &h, NULL, NULL, 0, 1);
      if (rc == 0) sent = 1;
      else if (rc != -EAGAIN) gone = 1; /* EPIPE: it is gone already */
    }
    uint64_t now = uv_hrtime() / 1000000;
    if (gone || now >= deadline) break;
    struct pollfd p = {s->fd, (short)(POLLIN | (sent ? 0 : POLLOUT)), 0};
    if (poll(&p, 1, (int)(deadline - now)) < 0 && errno != EINTR) break;
    if (!(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
    for (;;) { /* its last reports are of no interest now: wait for EOF */
      pr_wire_hdr_t ph;
      int fds[PR_WIRE_MAX_FDS], nfds = 0;
      int rc = pr_wire_recv(s->fd, &ph, s->recvbuf, fds, &nfds, 1);
      for (int k = 0; k < nfds; k++) close(fds[k]);
      if (rc == -EAGAIN) break;
      if (rc == 0 || (rc < 0 && rc != -EPROTO)) {
        gone = 1;
        break;
      }
    }
  }
  if (!gone) { /* its reapers kill their jobs as it dies; the sweep is for the rest */
    kill_shepherd(s);
    memcpy(s->stale, s->tag, sizeof(s->stale));
    pr_sup_sweep(s);
    s->stale[0] = 0;
  }
  drop(s);
  return gone ? 0 : PR_ESHEPHERD;
}
