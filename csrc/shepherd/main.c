/* shepherd/main.c — proctor-shepherd: the parent of every job's reaper.
 *
 * Thread: single-threaded program (its own process, exec'd by the engine).
 *
 *   host (engine thread) ══ SOCK_SEQPACKET ══ shepherd ──fork──► reaper N ──clone/exec──► job N
 *                                               ▲  subreaper too: a dead reaper's orphans come here
 *                                               ├─ reapers' socket: SPAWNED, FAILED, EXITED, EMPTY
 *                                               └─ engine socket EOF ⇒ kill every job, exit
 *
 * Why a separate process (ARCHITECTURE.md): only here is it safe to fork, to
 * reap with waitpid(-1), to be a subreaper, and to outlive a host that was
 * SIGKILLed long enough to kill what the host started.
 *
 * Why a reaper per job (reaper.c): an orphan re-parents to its nearest
 * subreaper ancestor, so every orphan of job N — whatever it shed: session,
 * group, environment — comes back to job N's reaper, which can kill it by
 * its pid. The shepherd itself then only forks, forwards and reaps its
 * direct children (the reapers): every packet and every exit costs O(1),
 * however many jobs are alive; nothing here reads /proc on the hot path
 * (only a reaper that owes an answer past PR_REAPER_ANSWER_MS is looked at).
 *
 * Rules that keep signals safe from pid reuse: the shepherd signals only its
 * own children (reapers) that it has not reaped; a reaper follows the rules
 * in reaper.c.
 *
 * Usage (by the engine only): proctor-shepherd --daemon FD [--tag TOKEN] [--link CMD]
 *                            proctor-shepherd --relay   (the far side of a target)
 *                            proctor-shepherd --check   (prints "proctor-shepherd ok")
 *   --daemon  fork once and let the first process exit, so the host reaps
 *             its only child at once and never has a long-lived child.
 *   --tag     every job gets PROCTOR_JOB=TOKEN:<id> in its environment: if
 *             we are SIGKILLed, the engine kills what carries it (and what
 *             our reapers, killing their jobs as we die, could not reach).
 */

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/buf.h"
#include "shepherd/shepherd.h"

int pr_shep_sock = -1;
int pr_shep_up[2] = {-1, -1};
pid_t pr_shep_self;
char pr_shep_tag_prefix[96];

static char *buf;      /* PR_WIRE_MAX_PAYLOAD bytes, for either socket */
static int sigfd = -1; /* our signalfd (for a SHUTDOWN that comes as a frame) */
static void shutdown_all(int sfd, int grace_ms) __attribute__((noreturn));

/* A spawn request being assembled from several packets. */
static struct {
  uint64_t job;
  uint32_t flags;
  int64_t a, b;
  pr_buf_t buf;
} pend;

/* ---- commands from the engine ---------------------------------------------- */

/* The engine's signal as a reaper command (shepherd.h). */
static int command_of(int64_t sig) {
  switch (sig) {
  case SIGHUP:
  case SIGINT:
  case SIGTERM: return (int)sig;
  case SIGKILL: return PR_REAPER_KILL;
  case 0: return PR_REAPER_PROBE;
  default: return 0;
  }
}

/* Send command `cmd` to j's reaper (pr_shep_ask), and when it is the first
 * its reaper owes an answer to, remember the reaper's CPU time for the
 * judgement below. */
static void ask(job_t *j, int cmd) {
  if (j->answer_by == 0) pr_liveness_asked(&j->live, j->reaper);
  pr_shep_ask(j, cmd);
}

static void on_packet(const pr_wire_hdr_t *h, const char *payload, int *fds, int nfds) {
  for (int i = 0; i < nfds; i++) close(fds[i]); /* the engine never sends fds */
  switch (h->type) {
  case PR_W_SPAWN: {
    pend.buf.wipe = 1;
    if (pend.buf.p == NULL || pend.job != h->job) {
      if (pend.buf.p) explicit_bzero(pend.buf.p, pend.buf.len); /* a partial one, abandoned */
      pend.buf.len = 0;
      pend.job = h->job;
      pend.flags = h->flags;
      pend.a = h->a;
      pend.b = h->b;
    }
    /* A spawn request carries secret values: no copy outlives the spawn (the
     * receive buffer, the assembled request; the reaper wipes its own). */
    int rc = pr_buf_add(&pend.buf, payload, h->len);
    explicit_bzero((char *)payload, h->len);
    if (rc != 0) {
      pr_shep_fail_spawn(h->job, ENOMEM, PR_STAGE_SETUP);
      if (pend.buf.p) explicit_bzero(pend.buf.p, pend.buf.len);
      pend.buf.err = 0;
      pend.buf.len = 0;
      return;
    }
    if (h->flags & PR_WF_MORE) return;
    pr_shep_spawn(pend.job, pend.flags, pend.a, pend.b, pend.buf.p, pend.buf.len);
    explicit_bzero(pend.buf.p, pend.buf.len);
    pend.buf.len = 0;
    pend.job = 0;
    if (pend.buf.cap > (1u << 20)) pr_buf_free(&pend.buf);
    return;
  }
  case PR_W_SIGNAL: {
    job_t *j = pr_shep_find_id(h->job);
    int cmd = command_of(h->a);
    if (j == NULL || cmd == 0) return;
    ask(j, cmd);
    return;
  }
  case PR_W_RELEASE: {
    job_t *j = pr_shep_find_id(h->job);
    if (pr_shep_relay) pr_relay_forget(h->job);
    if (j == NULL) return; /* its reaper is gone already: nothing was left */
    pr_shep_release_job(j);
    ask(j, PR_REAPER_RELEASE);
    return;
  }
  case PR_W_SHUTDOWN: /* --relay (the socket's loop takes it before us) */
    shutdown_all(sigfd, h->a > 0 && h->a < 60000 ? (int)h->a : 200);
  case PR_W_PING: /* the engine's liveness check: answered at once */
    pr_shep_send(PR_W_PONG, 0, 0, h->a, pr_shep_self, NULL, 0);
    return;
  default: return;
  }
}

/* ---- reports from the reapers ----------------------------------------------------- */

static void on_report(const pr_wire_hdr_t *h, int *fds, int nfds) {
  job_t *j = pr_shep_find_reaper((pid_t)h->from);
  if (j != NULL && h->type == PR_W_PONG) { /* it read its commands (released or not) */
    pr_shep_answered(j, (uint64_t)h->a);
    for (int i = 0; i < nfds; i++) close(fds[i]);
    return;
  }
  if (j == NULL || j->released || j->id != h->job) { /* nobody waits for it any more */
    for (int i = 0; i < nfds; i++) close(fds[i]);
    return;
  }
  switch (h->type) {
  case PR_W_SPAWNED: {
    int out[PR_WIRE_MAX_FDS], n = 0;
    uint32_t flags = j->rflags;
    if (nfds > 0) {
      out[n++] = fds[0];
      flags |= PR_WF_PIDFD;
    }
    for (int i = 1; i < nfds; i++) close(fds[i]);
    for (int k = 0; k < j->nfds && n < PR_WIRE_MAX_FDS; k++) out[n++] = j->fds[k];
    if (pr_shep_relay) { /* it keeps them: fds cannot cross the transport */
      pr_relay_adopt(j->id, flags, h->a, out, n);
    } else {
      pr_shep_send(PR_W_SPAWNED, flags, j->id, h->a, 0, out, n);
      for (int k = 0; k < n; k++) close(out[k]);
    }
    j->nfds = 0;
    j->spawned = 1;
    return;
  }
  case PR_W_FAILED:
    for (int i = 0; i < nfds; i++) close(fds[i]);
    pr_shep_fail_spawn(j->id, (int)h->a, (int)h->b);
    j->spawned = 1;
    pr_shep_release_job(j); /* no RELEASE follows a failed spawn */
    return;
  case PR_W_EXITED:
  case PR_W_EMPTY:
    for (int i = 0; i < nfds; i++) close(fds[i]);
    if (h->type == PR_W_EXITED) j->exited = 1;
    if (h->type == PR_W_EMPTY || (h->flags & PR_WF_EMPTY)) j->emptied = 1;
    if (pr_shep_relay) pr_relay_report(h->type, h->flags, j->id, h->a, h->b);
    else pr_shep_send(h->type, h->flags, j->id, h->a, h->b, NULL, 0);
    return;
  default:
    for (int i = 0; i < nfds; i++) close(fds[i]);
    return;
  }
}

/* Read every report the reapers have queued. */
static void drain_reports(void) {
  for (;;) {
    pr_wire_hdr_t h;
    int fds[PR_WIRE_MAX_FDS], nfds;
    int rc = pr_wire_recv(pr_shep_up[0], &h, buf, fds, &nfds, 1);
    if (rc == -EPROTO) continue;
    if (rc <= 0) return;
    on_report(&h, fds, nfds);
  }
}

/* Our children that are no reaper are orphans of a reaper that died: kill
 * them (unreaped children of ours, so their pids are safe). One read of our
 * children list; only when a reaper died without finishing its job. */
static void kill_orphans(void) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pr_shep_self, (int)pr_shep_self);
  FILE *f = fopen(path, "re");
  if (f == NULL) return;
  int pid;
  while (fscanf(f, "%d", &pid) == 1) {
    if (pr_shep_find_reaper(pid)) continue;
    if (getpgid(pid) == pid) kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
  }
  fclose(f);
}

/* A reaper ended: its job is over. */
static int reaper_ended(job_t *j, int st) {
  int clean = WIFEXITED(st) && WEXITSTATUS(st) == 0;
  if (!clean && !j->released) { /* it died (killed?) or gave up: its processes came to us */
    if (!j->spawned) pr_shep_fail_spawn(j->id, ECHILD, PR_STAGE_SETUP);
    else if (!j->exited)
      pr_shep_send(PR_W_EXITED, PR_WF_SIGNALED | PR_WF_EMPTY, j->id, 0, SIGKILL, NULL, 0);
    else if (!j->emptied) pr_shep_send(PR_W_EMPTY, 0, j->id, 0, 0, NULL, 0);
  }
  pr_shep_remove_job(j);
  return !clean;
}

/* Reap every child that ended: a reaper (its job is over), or an orphan. */
static void reap(void) {
  int orphans = 0;
  for (;;) {
    struct ended {
      job_t *j;
      int st;
    } done[128];
    int n = 0;
    while (n < 128) {
      int st;
      pid_t p = waitpid(-1, &st, WNOHANG);
      if (p <= 0) break;
      job_t *j = pr_shep_find_reaper(p);
      if (j != NULL) done[n++] = (struct ended){j, st}; /* else an orphan, reaped */
    }
    if (n == 0) break;
    drain_reports(); /* their last reports were queued before they exited: take them first */
    for (int i = 0; i < n; i++) orphans |= reaper_ended(done[i].j, done[i].st);
  }
  if (orphans) kill_orphans();
}

/* Reapers that owe an answer past their deadline: stopped (by their job),
 * traced, gone, asleep without using CPU, or in a loop (base/liveness.h) are
 * SIGKILLed (unreaped children of ours); reap() then sees them end, kills
 * what of their jobs came to us, and reports the jobs' end. One that works
 * (running, runnable: a loaded machine) is probed again: killing it would
 * cut its job's SIGTERM grace short. */
static void kill_silent_reapers(void) {
  job_t *j;
  uint64_t now = pr_shep_now_ms();
  while ((j = pr_shep_overdue(now)) != NULL) {
    if (pr_liveness_working(&j->live, j->reaper, (uint64_t)PR_REAPER_ANSWER_MS * 1000000u))
      pr_shep_ask(j, PR_REAPER_PROBE); /* due again later: this loop ends */
    else kill(j->reaper, SIGKILL);
  }
}

/* ---- shutdown ---------------------------------------------------------------- */

/* Wait (reading reports, reaping) until no reaper is left or `ms` passed. */
static void wait_reapers(int sfd, uint64_t ms) {
  uint64_t deadline = pr_shep_now_ms() + ms;
  while (pr_shep_njobs() > 0) {
    uint64_t now = pr_shep_now_ms();
    if (now >= deadline) return;
    struct pollfd p[2] = {{sfd, POLLIN, 0}, {pr_shep_up[0], POLLIN, 0}};
    int left = (int)(deadline - now);
    if (poll(p, 2, left < 50 ? left : 50) < 0 && errno != EINTR) return;
    struct signalfd_siginfo si;
    while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
    }
    drain_reports(); /* their answers */
    kill_silent_reapers();
    reap();
  }
}

/* Stop every job (its reaper sends SIGHUP and SIGTERM to all of it), give
 * them `grace_ms`, then kill what is left, and exit. */
static void shutdown_all(int sfd, int grace_ms) {
  job_t *j;
  for (size_t at = 0; (j = pr_shep_next_job(&at)) != NULL;) {
    pr_shep_release_job(j); /* the engine is going: report nothing more */
    ask(j, SIGHUP);
    ask(j, SIGTERM);
  }
  wait_reapers(sfd, (uint64_t)grace_ms);
  for (size_t at = 0; (j = pr_shep_next_job(&at)) != NULL;) ask(j, PR_REAPER_RELEASE);
  wait_reapers(sfd, 3000);
  /* A reaper still there is stuck: kill it, then whatever reaches us. */
  for (size_t at = 0; (j = pr_shep_next_job(&at)) != NULL;) kill(j->reaper, SIGKILL);
  uint64_t end = pr_shep_now_ms() + 1000;
  do {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    kill_orphans();
    usleep(2000);
  } while (pr_shep_now_ms() < end && waitpid(-1, NULL, WNOHANG) >= 0);
  _exit(0);
}

/* ---- main ------------------------------------------------------------------- */

/* --relay: stdin and stdout move above 2 (CLOEXEC: no job gets them, and every
 * reaper closes what is above 2), 0, 1 and 2 become /dev/null. 0, or -1. */
static int relay_stdio(void) {
  pr_relay_in = fcntl(0, F_DUPFD_CLOEXEC, 3);
  pr_relay_out = fcntl(1, F_DUPFD_CLOEXEC, 3);
  int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (pr_relay_in < 0 || pr_relay_out < 0 || nul < 0) return -1;
  dup2(nul, 0);
  dup2(nul, 1);
  dup2(nul, 2);
  close(nul);
  return 0;
}

/* What both loops (local and --relay) do after poll() returned r: take the
 * reapers' reports, kill the reapers that owe an answer past its time, and
 * read the signals (SIGCHLD: reap; any other: shut down). */
static void after_poll(int r, short sig_revents, short report_revents, int sfd) {
  if (report_revents & POLLIN) drain_reports();
  if (r == 0 || pr_shep_answer_wait(pr_shep_now_ms()) == 0) {
    drain_reports(); /* an answer may have come meanwhile */
    kill_silent_reapers();
  }
  if (sig_revents & POLLIN) {
    struct signalfd_siginfo si;
    int term = 0;
    while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
      if (si.ssi_signo != SIGCHLD) term = 1;
    if (term) shutdown_all(sfd, 200);
    reap();
  }
}

/* One round of the loop in --relay mode: the link's frames, the jobs' streams. */
static void relay_round(int sfd, int timeout) {
  static struct pollfd *set;
  static int cap;
  if (cap < 3 && (set = malloc(16 * sizeof(*set))) != NULL) cap = 16;
  if (set == NULL) shutdown_all(sfd, 200);
  set[0] = (struct pollfd){pr_relay_in, POLLIN, 0};
  set[1] = (struct pollfd){sfd, POLLIN, 0};
  set[2] = (struct pollfd){pr_shep_up[0], POLLIN, 0};
  int n = pr_relay_pollfds(&set, &cap, 3);
  int hold = pr_relay_wait_ms();
  if (hold >= 0 && (timeout < 0 || hold < timeout)) timeout = hold;
  int r = poll(set, (nfds_t)n, timeout);
  if (r < 0 && errno != EINTR) shutdown_all(sfd, 200);
  after_poll(r, set[1].revents, set[2].revents, sfd);
  if (r > 0) pr_relay_on_poll(set + 3, n - 3);
  else pr_relay_tick();
  if (set[0].revents & (POLLIN | POLLHUP | POLLERR)) {
    if (!pr_relay_read(on_packet)) shutdown_all(sfd, 200); /* the link is gone */
  }
  if (pr_relay_lost()) shutdown_all(sfd, 200);
}

int main(int argc, char **argv) {
  int daemon = 0, fdarg = -1;
  const char *tag = NULL, *link = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--daemon") == 0) daemon = 1;
    else if (strcmp(argv[i], "--tag") == 0 && i + 1 < argc) tag = argv[++i];
    else if (strcmp(argv[i], "--link") == 0 && i + 1 < argc) link = argv[++i];
    else if (strcmp(argv[i], "--relay") == 0) pr_shep_relay = 1;
    else if (strcmp(argv[i], "--check") == 0) { /* a target's probe: it runs here */
      puts("proctor-shepherd ok");
      return 0;
    } else fdarg = atoi(argv[i]);
  }
  if (pr_shep_relay && relay_stdio() == 0) fdarg = pr_relay_in;
  if (fdarg < 3) {
    fprintf(stderr, "proctor-shepherd: internal helper of proctor; not for direct use\n");
    return 2;
  }
  pr_shep_sock = fdarg;
  fcntl(pr_shep_sock, F_SETFD, FD_CLOEXEC);
  if (daemon) {
    pid_t p = fork();
    if (p < 0) return 1;
    if (p > 0) _exit(0); /* the host reaps this one at once */
  }
  if (link != NULL) pr_link_main(pr_shep_sock, link); /* never returns */
  setsid(); /* a terminal's ^C or hangup never reaches us: EOF is the signal */
  prctl(PR_SET_CHILD_SUBREAPER, 1); /* a reaper's orphans, if a reaper dies */
  pr_shep_self = getpid();
  /* The engine's token (it sweeps for it if we die); our pid without one. */
  if (tag != NULL && strlen(tag) < 64 && strspn(tag, "0123456789abcdef") == strlen(tag))
    snprintf(pr_shep_tag_prefix, sizeof(pr_shep_tag_prefix), "PROCTOR_JOB=%s:", tag);
  else
    snprintf(pr_shep_tag_prefix, sizeof(pr_shep_tag_prefix), "PROCTOR_JOB=%d:", (int)pr_shep_self);

  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  pr_shep_default_dispositions(); /* then SIGPIPE is the only one a child must reset */
  signal(SIGPIPE, SIG_IGN);
  /* Blocked here, so a reaper has them blocked from its first instruction:
   * SIGCHLD and our own shutdown signals for our signalfd; a reaper's
   * commands are never ours to take (sent to us, they just stay pending). */
  sigset_t set, cmds;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  cmds = set;
  sigaddset(&cmds, PR_REAPER_KILL);
  sigaddset(&cmds, PR_REAPER_RELEASE);
  sigaddset(&cmds, PR_REAPER_PROBE); /* blocked, it still continues; queued, it is answered */
  sigprocmask(SIG_BLOCK, &cmds, NULL);
  int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) return 1;
  sigfd = sfd;
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pr_shep_up) < 0) return 1;
  fcntl(pr_shep_up[0], F_SETFL, O_NONBLOCK);
  int big = 1 << 20;
  setsockopt(pr_shep_up[0], SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
  setsockopt(pr_shep_up[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));

  /* The receive buffer is its own mapping, left out of every fork
   * (MADV_DONTFORK): a reaper has no copy of it, and the receive after a
   * fork writes pages no reaper shares, so it takes no copy-on-write fault. */
  buf = mmap(NULL, PR_WIRE_MAX_PAYLOAD, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buf == MAP_FAILED) return 1;
  madvise(buf, PR_WIRE_MAX_PAYLOAD, MADV_DONTFORK);
  /* hello: the engine learns our pid; a relay's link checks its byte order and version */
  pr_shep_send(PR_W_PONG, 0, 0, pr_shep_relay ? PR_RELAY_HELLO : 0, pr_shep_self, NULL, 0);
  while (pr_shep_relay) relay_round(sfd, pr_shep_answer_wait(pr_shep_now_ms()));
  for (;;) {
    struct pollfd pfd[3] = {
        {pr_shep_sock, POLLIN, 0}, {sfd, POLLIN, 0}, {pr_shep_up[0], POLLIN, 0}};
    int r = poll(pfd, 3, pr_shep_answer_wait(pr_shep_now_ms())); /* -1: no reaper owes an answer */
    if (r < 0 && errno != EINTR) break;
    after_poll(r, pfd[1].revents, pfd[2].revents, sfd);
    if (pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      /* A bounded batch, so the reapers' reports (and the fds they hold)
       * never wait behind a long queue of spawns. */
      for (int i = 0; i < 64; i++) {
        pr_wire_hdr_t h;
        int fds[PR_WIRE_MAX_FDS], nfds;
        int rc = pr_wire_recv(pr_shep_sock, &h, buf, fds, &nfds, 1);
        if (rc == -EAGAIN) break;
        if (rc <= 0 && rc != -EPROTO) shutdown_all(sfd, 200); /* host gone */
        if (rc == -EPROTO) continue;
        if (h.type == PR_W_SHUTDOWN) shutdown_all(sfd, h.a > 0 && h.a < 60000 ? (int)h.a : 200);
        on_packet(&h, buf, fds, nfds);
        pr_shep_heartbeat(); /* a long batch of spawns: still here */
      }
    }
  }
  shutdown_all(sfd, 200);
  return 0;
}
