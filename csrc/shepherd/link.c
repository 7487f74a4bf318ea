/* shepherd/link.c — proctor-shepherd --link CMD: the engine's shepherd for a target.
 *
 * Thread: its own single-threaded process (started by the engine like a local
 * shepherd: --daemon, the socket on fd 3).
 *
 *   engine ══ SEQPACKET ══ link ──/bin/sh -c CMD──► transport (ssh …) ══► relay (relay.c)
 *     packets, fds ◄──────┘  │ frames on the transport's stdin/stdout (base/wire.h)
 *                            └ per job: local pipes (or a socketpair for a pty), whose
 *                              engine ends go with SPAWNED as a local shepherd's would
 *
 * To the engine the link is a shepherd: its streams are local descriptors, so rings,
 * back-pressure, masking and consoles see no difference. Output frames are written
 * into the job's local pipe; CREDIT goes back to the relay once they are in it, so
 * a paused stream in the engine stops the relay reading the job (PR_WIRE_WINDOW in
 * flight at most). Input read from the local stdin pipe goes out within the relay's
 * credit. A resize comes as a RESIZE packet (a socketpair takes no TIOCSWINSZ).
 *
 * The transport ends (its stdout closes): LOST with its exit status and the tail
 * of its stderr, then exit; the engine ends the target's executions target_lost.
 * The engine goes (EOF on the socket): the transport's stdin is closed, so the relay
 * kills every job within its grace; the transport gets PR_LINK_EXIT_MS to exit and
 * is then SIGKILLed.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/idmap.h"
#include "shepherd/shepherd.h"

#define PR_LINK_EXIT_MS 5000
#define ERR_TAIL 1024

typedef struct {
  uint64_t id;
  int pty;
  int in;            /* we read the engine's input here (-1: none or ended) */
  int out[3];        /* we write stream 1 and 2 here (pty: out[1] == in) */
  pr_buf_t ob[3];    /* output not yet taken by the pipe */
  int oeof[3];       /* the relay said the stream ended: close once ob is empty */
  int64_t in_credit; /* input bytes the relay still takes */
} ljob_t;

static pr_idmap_t ljobs;
static int sock, tin = -1, tout = -1, terr = -1;
static pid_t tpid;
static pr_buf_t outq; /* frames for the transport's stdin */
static pr_buf_t inq;  /* bytes from its stdout, not yet a whole frame */
static char errtail[ERR_TAIL];
static size_t errlen;
static char pbuf[PR_WIRE_MAX_PAYLOAD];

static void to_engine(uint32_t type, uint32_t flags, uint64_t job, int64_t a, int64_t b,
                      const void *payload, uint32_t len, const int *fds, int nfds) {
  pr_wire_hdr_t h = {.type = type, .flags = flags, .job = job, .a = a, .b = b, .len = len};
  (void)pr_wire_send(sock, &h, payload, fds, nfds, 0); /* the engine always drains */
}

static void to_relay(uint32_t type, uint32_t flags, uint64_t job, int64_t a, int64_t b,
                     const void *payload, uint32_t len) {
  pr_wire_hdr_t h = {.type = type, .flags = flags, .job = job, .a = a, .b = b, .len = len};
  pr_buf_add(&outq, &h, sizeof(h));
  if (len) pr_buf_add(&outq, payload, len);
}

static void nonblock(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

static void ljob_free(ljob_t *j) {
  if (j->in != j->out[1]) close_fd(&j->in);
  close_fd(&j->out[1]);
  close_fd(&j->out[2]);
  for (int s = 1; s < 3; s++) pr_buf_free(&j->ob[s]);
  free(j);
}

/* ---- the transport ------------------------------------------------------------------- */

static void start_transport(const char *cmd) {
  int in[2], out[2], err[2];
  if (pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) _exit(1);
  tpid = fork();
  if (tpid < 0) _exit(1);
  if (tpid == 0) {
    setpgid(0, 0); /* killed as a group if it does not go */
    dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    signal(SIGPIPE, SIG_DFL);
    /* exec: the transport itself is our child, its status the one we report */
    size_t n = strlen(cmd) + 6;
    char *line = malloc(n);
    if (line) snprintf(line, n, "exec %s", cmd);
    execl("/bin/sh", "sh", "-c", line ? line : cmd, (char *)NULL);
    _exit(127);
  }
  setpgid(tpid, tpid);
  close(in[0]);
  close(out[1]);
  close(err[1]);
  tin = in[1];
  tout = out[0];
  terr = err[0];
  nonblock(tin);
  nonblock(tout);
  nonblock(terr);
}

static void read_err(void) {
  char b[1024];
  ssize_t n;
  while ((n = read(terr, b, sizeof(b))) > 0) {
    if ((size_t)n >= ERR_TAIL) {
      memcpy(errtail, b + n - ERR_TAIL, ERR_TAIL);
      errlen = ERR_TAIL;
      continue;
    }
    if (errlen + (size_t)n > ERR_TAIL) {
      size_t drop = errlen + (size_t)n - ERR_TAIL;
      memmove(errtail, errtail + drop, errlen - drop);
      errlen -= drop;
    }
    memcpy(errtail + errlen, b, (size_t)n);
    errlen += (size_t)n;
  }
  if (n == 0) close_fd(&terr);
}

/* Wait for the transport to exit, at most ms; then SIGKILL its group. Its status. */
static int reap_transport(int ms) {
  int st = 0;
  for (int waited = 0;; waited += 10) {
    pid_t p = waitpid(tpid, &st, WNOHANG);
    if (p == tpid || (p < 0 && errno != EINTR)) return st;
    if (waited >= ms) {
      kill(-tpid, SIGKILL);
      waitpid(tpid, &st, 0);
      return st;
    }
    usleep(10000);
  }
}

/* The transport's stdout closed: tell the engine how it ended, and go. */
static void __attribute__((noreturn)) transport_gone(int shutting) {
  close_fd(&tin);
  int st = reap_transport(shutting ? PR_LINK_EXIT_MS : 2000);
  if (terr >= 0) read_err();
  if (!shutting) {
    char msg[ERR_TAIL + 128];
    int n = WIFEXITED(st)
                ? snprintf(msg, sizeof(msg), "the transport exited with status %d", WEXITSTATUS(st))
                : snprintf(msg, sizeof(msg), "the transport was killed by signal %d", WTERMSIG(st));
    while (errlen > 0 && (errtail[errlen - 1] == '\n' || errtail[errlen - 1] == '\r')) errlen--;
    if (errlen > 0) n += snprintf(msg + n, sizeof(msg) - (size_t)n, ": %.*s", (int)errlen, errtail);
    else n += snprintf(msg + n, sizeof(msg) - (size_t)n, " (nothing on its stderr)");
    to_engine(PR_W_LOST, 0, 0, 0, 0, msg, (uint32_t)strlen(msg), NULL, 0);
  }
  _exit(0);
}

/* ---- frames from the relay ------------------------------------------------------------ */

static void write_out(ljob_t *j, int s) {
  pr_buf_t *b = &j->ob[s];
  while (b->len > 0 && j->out[s] >= 0) {
    ssize_t w = write(j->out[s], b->p, b->len);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) return;
    if (w <= 0) w = (ssize_t)b->len; /* the engine closed it: dropped, credit given back */
    memmove(b->p, b->p + w, b->len - (size_t)w);
    b->len -= (size_t)w;
    to_relay(PR_W_CREDIT, 0, j->id, s, w, NULL, 0);
  }
  if (b->len == 0 && j->oeof[s]) {
    if (j->pty) j->in = -1;
    close_fd(&j->out[s]);
  }
}

/* SPAWNED from the relay: the job's local descriptors, the engine's ends to it. */
static void spawned(const pr_wire_hdr_t *h) {
  ljob_t *j = calloc(1, sizeof(*j));
  int give[3], n = 0, ok = j != NULL;
  j && (j->in = j->out[0] = j->out[1] = j->out[2] = -1);
  if (ok && (h->flags & PR_WF_PTY)) {
    int sv[2];
    ok = socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0;
    if (ok) {
      j->pty = 1;
      j->in = j->out[1] = sv[0];
      give[n++] = sv[1];
    }
  } else if (ok) {
    int p[2];
    if ((h->flags & PR_WF_STDIN) && (ok = pipe2(p, O_CLOEXEC) == 0)) {
      j->in = p[0];
      give[n++] = p[1];
    }
    for (int s = 1; s < 3 && ok; s++)
      if ((ok = pipe2(p, O_CLOEXEC) == 0)) {
        j->out[s] = p[1];
        give[n++] = p[0];
      }
  }
  if (ok) {
    j->id = h->job;
    j->in_credit = PR_WIRE_WINDOW;
    for (int s = 1; s < 3; s++) j->ob[s].max = (size_t)PR_WIRE_WINDOW * 2;
    if (j->in >= 0) nonblock(j->in);
    for (int s = 1; s < 3; s++)
      if (j->out[s] >= 0) nonblock(j->out[s]);
    ljob_t *old = pr_idmap_get(&ljobs, j->id);
    if (old) ljob_free(old);
    ok = pr_idmap_put(&ljobs, j->id, j) == 0;
  }
  if (!ok) { /* it runs but cannot be heard: the engine kills it (PR_WF_FDS_LOST) */
    for (int i = 0; i < n; i++) close(give[i]);
    n = 0;
    if (j) ljob_free(j);
    to_engine(PR_W_SPAWNED, h->flags | PR_WF_FDS_LOST, h->job, h->a, 0, NULL, 0, NULL, 0);
    return;
  }
  to_engine(PR_W_SPAWNED, h->flags & (PR_WF_PTY | PR_WF_STDIN), h->job, h->a, 0, NULL, 0, give, n);
  for (int i = 0; i < n; i++) close(give[i]);
}

static void on_frame(const pr_wire_hdr_t *h, const char *payload) {
  ljob_t *j = pr_idmap_get(&ljobs, h->job);
  switch (h->type) {
  case PR_W_SPAWNED: spawned(h); return;
  case PR_W_FAILED:
  case PR_W_EXITED:
  case PR_W_EMPTY: to_engine(h->type, h->flags, h->job, h->a, h->b, NULL, 0, NULL, 0); return;
  case PR_W_DATA:
    if (j == NULL || (h->a != 1 && h->a != 2)) return;
    if (h->len == 0) j->oeof[h->a] = 1;
    else if (pr_buf_add(&j->ob[h->a], payload, h->len) != 0) j->ob[h->a].err = 0;
    write_out(j, (int)h->a);
    return;
  case PR_W_CREDIT:
    if (j != NULL && h->a == 0) j->in_credit += h->b;
    return;
  default: return; /* PONG: the relay's hello and heartbeats */
  }
}

/* The relay's first frame: its hello (PR_RELAY_HELLO), or the transport is killed
 * with a message naming what speaks there instead. */
static int hello_seen;
static void check_hello(const pr_wire_hdr_t *h) {
  if (h->type == PR_W_PONG && h->a == PR_RELAY_HELLO) {
    hello_seen = 1;
    return;
  }
  uint64_t a = (uint64_t)h->a, sa = __builtin_bswap64(a);
  uint64_t magic = (uint64_t)PR_RELAY_MAGIC, mask = ~(uint64_t)0xffff;
  if (__builtin_bswap32(h->type) == PR_W_PONG && (sa & mask) == magic)
    errlen = (size_t)snprintf(errtail, sizeof(errtail),
                              "the far side's proctor-shepherd has the other byte order (its "
                              "hello is byte-swapped): use a target of this machine's byte order");
  else if (h->type == PR_W_PONG && ((a & mask) == magic || a == 0))
    errlen = (size_t)snprintf(errtail, sizeof(errtail),
                              "the far side's proctor-shepherd speaks relay protocol version %d, "
                              "this one %d: install the same version there (or let proctor copy "
                              "its own: leave out `shepherd`)",
                              (int)(a & 0xffff), PR_RELAY_VERSION);
  else errlen = (size_t)snprintf(errtail, sizeof(errtail), "not a proctor relay on the far side");
  if (errlen >= sizeof(errtail)) errlen = sizeof(errtail) - 1;
  kill(-tpid, SIGKILL);
  transport_gone(0);
}

static void read_transport(void) {
  char tmp[65536];
  ssize_t n = read(tout, tmp, sizeof(tmp));
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0 || pr_buf_add(&inq, tmp, (size_t)n) != 0) transport_gone(0);
  size_t at = 0;
  while (inq.len - at >= sizeof(pr_wire_hdr_t)) {
    pr_wire_hdr_t h;
    memcpy(&h, inq.p + at, sizeof(h));
    if (!hello_seen) check_hello(&h);
    if (h.len > PR_WIRE_MAX_PAYLOAD) { /* not a relay speaking: a shell's noise? */
      kill(-tpid, SIGKILL);
      errlen = (size_t)snprintf(errtail, sizeof(errtail), "not a proctor relay on the far side");
      transport_gone(0);
    }
    if (inq.len - at < sizeof(h) + h.len) break;
    on_frame(&h, inq.p + at + sizeof(h));
    at += sizeof(h) + h.len;
  }
  memmove(inq.p, inq.p + at, inq.len - at);
  inq.len -= at;
}

static void flush_transport(void) {
  while (outq.len > 0 && tin >= 0) {
    ssize_t w = write(tin, outq.p, outq.len);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) return;
    if (w <= 0) { /* its stdin closed: its stdout says the rest */
      explicit_bzero(outq.p, outq.len);
      outq.len = 0;
      return;
    }
    explicit_bzero(outq.p, (size_t)w); /* spawn requests carry secret values */
    memmove(outq.p, outq.p + w, outq.len - (size_t)w);
    outq.len -= (size_t)w;
  }
}

/* ---- packets from the engine ------------------------------------------------------------ */

static void on_engine(int *shutting) {
  for (int i = 0; i < 64; i++) {
    pr_wire_hdr_t h;
    int fds[PR_WIRE_MAX_FDS], nfds;
    int rc = pr_wire_recv(sock, &h, pbuf, fds, &nfds, 1);
    if (rc == -EAGAIN) return;
    if (rc == -EPROTO) continue;
    for (int k = 0; k < nfds; k++) close(fds[k]);
    if (rc <= 0) { /* the engine is gone: the relay's EOF kills every job */
      close_fd(&tin);
      for (;;) {
        struct pollfd p = {tout, POLLIN, 0};
        if (poll(&p, 1, PR_LINK_EXIT_MS) <= 0) transport_gone(1);
        char b[65536];
        ssize_t n = read(tout, b, sizeof(b));
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) transport_gone(1);
      }
    }
    switch (h.type) {
    case PR_W_PING: to_engine(PR_W_PONG, 0, 0, h.a, getpid(), NULL, 0, NULL, 0); break;
    case PR_W_RELEASE: {
      ljob_t *j = pr_idmap_get(&ljobs, h.job);
      if (j) {
        pr_idmap_del(&ljobs, h.job);
        ljob_free(j);
      }
      to_relay(h.type, h.flags, h.job, h.a, h.b, NULL, 0);
      break;
    }
    case PR_W_SHUTDOWN:
      *shutting = 1; /* the relay kills, then exits */
      __attribute__((fallthrough));
    default:
      to_relay(h.type, h.flags, h.job, h.a, h.b, pbuf, h.len);
      explicit_bzero(pbuf, h.len);
      break;
    }
  }
}

/* The engine's input for job j, within the relay's credit. */
static void read_input(ljob_t *j) {
  char b[PR_WIRE_MAX_PAYLOAD];
  size_t room = j->in_credit < (int64_t)sizeof(b) ? (size_t)j->in_credit : sizeof(b);
  ssize_t n = read(j->in, b, room);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) { /* the engine closed stdin (a pty's end: the execution ended) */
    if (!j->pty) close_fd(&j->in);
    else j->in = -1;
    to_relay(PR_W_DATA, 0, j->id, 0, 0, NULL, 0);
    return;
  }
  j->in_credit -= n;
  to_relay(PR_W_DATA, 0, j->id, 0, 0, b, (uint32_t)n);
}

void pr_link_main(int s, const char *cmd) {
  sock = s;
  setsid();
  signal(SIGPIPE, SIG_IGN);
  outq.wipe = 1;
  start_transport(cmd);
  to_engine(PR_W_PONG, 0, 0, 0, getpid(), NULL, 0, NULL, 0); /* hello */
  int shutting = 0, cap = 16, n;
  struct pollfd *set = malloc((size_t)cap * sizeof(*set));
  for (;;) {
    if (set == NULL) _exit(1);
    n = 0;
    set[n++] = (struct pollfd){shutting ? -1 : sock, POLLIN, 0};
    set[n++] = (struct pollfd){tout, POLLIN, 0};
    set[n++] = (struct pollfd){terr, POLLIN, 0};
    set[n++] = (struct pollfd){outq.len ? tin : -1, POLLOUT, 0};
    size_t it = 0;
    ljob_t *j;
    while ((j = pr_idmap_next(&ljobs, &it, NULL)) != NULL) {
      if (n + 3 > cap) {
        struct pollfd *p = realloc(set, (size_t)(cap *= 2) * sizeof(*p));
        if (p == NULL) _exit(1);
        set = p;
      }
      if (j->in >= 0 && j->in_credit > 0) set[n++] = (struct pollfd){j->in, POLLIN, 0};
      for (int k = 1; k < 3; k++)
        if (j->out[k] >= 0 && j->ob[k].len > 0) set[n++] = (struct pollfd){j->out[k], POLLOUT, 0};
    }
    if (poll(set, (nfds_t)n, -1) < 0 && errno != EINTR) _exit(1);
    if (set[2].revents) read_err();
    for (int i = 4; i < n; i++) {
      if (set[i].revents == 0) continue;
      it = 0;
      while ((j = pr_idmap_next(&ljobs, &it, NULL)) != NULL) {
        if (set[i].events == POLLIN && j->in == set[i].fd) read_input(j);
        for (int k = 1; k < 3; k++)
          if (set[i].events == POLLOUT && j->out[k] == set[i].fd) write_out(j, k);
      }
    }
    if (set[0].revents) on_engine(&shutting);
    if (set[1].revents) read_transport();
    flush_transport();
  }
}
