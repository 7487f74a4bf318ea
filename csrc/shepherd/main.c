/* shepherd/main.c — proctor-shepherd: the parent of every job of one engine.
 *
 * Thread: single-threaded program (its own process, exec'd by the engine).
 *
 *   host (engine thread) ══ SOCK_SEQPACKET ══ shepherd ── clone/exec ─► job (own session)
 *                                               │  subreaper: escapees come back here
 *                                               └─ socket EOF ⇒ kill every job, exit
 *
 * Why a separate process (ARCHITECTURE.md, "The shepherd"): only here is it safe to
 * fork, to reap with waitpid(-1), to be a subreaper, and to outlive a host
 * that was SIGKILLed long enough to kill what the host started.
 *
 * Rules that keep signals safe from pid reuse:
 *  - A job leader is never reaped until the engine RELEASEs the job. While it
 *    is unreaped (alive or zombie) its pid — which is also the process group
 *    and session id of the job — cannot be reused, so kill(-pgid) only ever
 *    reaches the job's own group.
 *  - Any other process is signalled through a pidfd opened after checking it
 *    is the process seen in /proc (same start time), never by a bare pid.
 *  - Reaping is done with WNOWAIT peeks, so a held leader is never reaped by
 *    accident while orphans are.
 *
 * Escapees (setsid / double fork) are found two ways: descendants of the
 * job's group and session by parent links in /proc, and orphans reparented
 * to the shepherd (it is a subreaper) by the PROCTOR_JOB tag in their
 * initial environment.
 *
 * Usage (by the engine only): proctor-shepherd --daemon FD
 *   --daemon  fork once and let the first process exit, so the host reaps
 *             its only child at once and never has a long-lived child.
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
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/buf.h"
#include "shepherd/shepherd.h"

int pr_shep_sock = -1;
pid_t pr_shep_self;
char pr_shep_tag_prefix[64];

/* A spawn request being assembled from several packets. */
static struct {
  uint64_t job;
  uint32_t flags;
  int64_t a, b;
  pr_buf_t buf;
} pend;

/* ---- commands from the engine ---------------------------------------------- */

static void on_packet(const pr_wire_hdr_t *h, const char *payload, int *fds, int nfds) {
  for (int i = 0; i < nfds; i++) close(fds[i]); /* the engine never sends fds */
  switch (h->type) {
  case PR_W_SPAWN: {
    if (pend.buf.p == NULL || pend.job != h->job) {
      pend.buf.len = 0;
      pend.job = h->job;
      pend.flags = h->flags;
      pend.a = h->a;
      pend.b = h->b;
    }
    if (pr_buf_add(&pend.buf, payload, h->len) != 0) {
      pr_shep_fail_spawn(h->job, ENOMEM, PR_STAGE_SETUP);
      pend.buf.err = 0;
      pend.buf.len = 0;
      return;
    }
    if (h->flags & PR_WF_MORE) return;
    pr_shep_spawn(pend.job, pend.flags, pend.a, pend.b, pend.buf.p, pend.buf.len);
    pend.buf.len = 0;
    pend.job = 0;
    if (pend.buf.cap > (1u << 20)) pr_buf_free(&pend.buf);
    return;
  }
  case PR_W_SIGNAL: {
    job_t *j = pr_shep_find_id(h->job);
    if (j == NULL || h->a <= 0 || h->a >= NSIG) return;
    if (h->flags & PR_WF_STOPPING) j->stopping = 1;
    pr_shep_kill_job(j, (int)h->a, 1);
    if (j->exited && j->stopping) pr_shep_kill_job(j, SIGKILL, 1);
    return;
  }
  case PR_W_RELEASE: {
    job_t *j = pr_shep_find_id(h->job);
    if (j == NULL || !j->exited) return;
    pr_shep_kill_job(j, SIGKILL, 0);
    pr_shep_hunt(); /* signals still owed to this job's escapees go out while it is known */
    waitpid(j->pid, NULL, 0); /* a zombie already: returns at once */
    pr_shep_remove_job(j);
    pr_shep_sweep_orphans(); /* escapees of this job that were reparented to us */
    return;
  }
  default:
    return;
  }
}

/* ---- shutdown ---------------------------------------------------------------- */

/* Kill every job and every descendant we can find, reap them, and exit. */
static void shutdown_all(int grace_ms) {
  job_t *j;
  for (size_t at = 0; (j = pr_shep_next_job(&at)) != NULL;) {
    if (j->handshake) { /* may not lead its group yet: kill it by pid (unreaped child) */
      kill(j->pid, SIGKILL);
      continue;
    }
    pr_shep_kill_job(j, SIGHUP, 0);
    pr_shep_kill_job(j, SIGTERM, 1);
  }
  pr_shep_hunt();
  uint64_t deadline = pr_shep_now_ms() + (uint64_t)grace_ms;
  while (pr_shep_njobs() > 0 && pr_shep_now_ms() < deadline) {
    pr_shep_reap();
    int all = 1;
    for (size_t at = 0; all && (j = pr_shep_next_job(&at)) != NULL;) all = j->exited;
    if (all) break;
    usleep(5000);
  }
  for (size_t at = 0; (j = pr_shep_next_job(&at)) != NULL;) {
    kill(j->pid, SIGKILL);
    pr_shep_kill_job(j, SIGKILL, 1);
  }
  pr_shep_hunt();
  /* Drop the jobs (their leaders are reaped below), then kill whatever
   * reaches us as an orphan until nothing is left or time runs out. */
  pr_shep_drop_jobs();
  uint64_t end = pr_shep_now_ms() + 3000;
  for (;;) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    pid_t *c;
    size_t n = pr_shep_list_children(&c);
    for (size_t i = 0; i < n; i++) {
      if (getpgid(c[i]) == c[i]) kill(-c[i], SIGKILL);
      kill(c[i], SIGKILL);
    }
    free(c);
    if (n == 0 || pr_shep_now_ms() > end) break;
    usleep(2000);
  }
  _exit(0);
}

/* ---- main ------------------------------------------------------------------- */

int main(int argc, char **argv) {
  int daemon = 0, fdarg = -1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--daemon") == 0) daemon = 1;
    else fdarg = atoi(argv[i]);
  }
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
  setsid(); /* a terminal's ^C or hangup never reaches us: EOF is the signal */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  pr_shep_self = getpid();
  snprintf(pr_shep_tag_prefix, sizeof(pr_shep_tag_prefix), "PROCTOR_JOB=%d:", (int)pr_shep_self);

  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  pr_shep_default_dispositions(); /* then SIGPIPE is the only one a child must reset */
  signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  sigprocmask(SIG_BLOCK, &set, NULL);
  int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sfd < 0) return 1;

  char *buf = malloc(PR_WIRE_MAX_PAYLOAD);
  if (buf == NULL) return 1;
  /* After a release, escapees of that job may still be on their way to us
   * (reparenting happens as their parents die): sweep a few more times. */
  int sweeps_left = 0;
  uint64_t next_sweep = 0;
  struct pollfd *pfd = NULL;
  size_t pcap = 0;
  for (;;) {
    /* socket, signals, then one exec handshake pipe per spawning job */
    size_t nsh = pr_shep_nshaking();
    if (pcap < 2 + nsh) {
      size_t ncap = (2 + nsh) * 2;
      struct pollfd *np = realloc(pfd, ncap * sizeof(*np));
      if (np == NULL) shutdown_all(200);
      pfd = np;
      pcap = ncap;
    }
    pfd[0] = (struct pollfd){pr_shep_sock, POLLIN, 0};
    pfd[1] = (struct pollfd){sfd, POLLIN, 0};
    for (size_t i = 0; i < nsh; i++) pfd[2 + i] = (struct pollfd){pr_shep_shaking_fd(i), POLLIN, 0};
    /* Escapee hunting (a /proc scan) waits until nothing else is ready:
     * exits are reaped and reported first, so a cancel ends as soon as the
     * process group is gone. */
    int timeout = pr_shep_hunt_pending ? 0 : sweeps_left ? 40 : -1;
    int r = poll(pfd, (nfds_t)(2 + nsh), timeout);
    if (r < 0 && errno != EINTR) break;
    if (r == 0 && pr_shep_hunt_pending) {
      pr_shep_hunt(); /* one /proc scan for every signal owed to escapees so far */
      continue;
    }
    /* handshakes first (from the end: finish_handshake moves the last entry) */
    for (size_t i = nsh; i-- > 0;)
      if (pfd[2 + i].revents) pr_shep_finish_handshake(i);
    if (pfd[1].revents & POLLIN) {
      struct signalfd_siginfo si;
      int term = 0;
      while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
        if (si.ssi_signo != SIGCHLD) term = 1;
      if (term) shutdown_all(200);
      pr_shep_reap();
    }
    if (pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      for (;;) {
        pr_wire_hdr_t h;
        int fds[PR_WIRE_MAX_FDS], nfds;
        int rc = pr_wire_recv(pr_shep_sock, &h, buf, fds, &nfds, 1);
        if (rc == -EAGAIN) break;
        if (rc <= 0 && rc != -EPROTO) shutdown_all(200); /* host gone */
        if (rc == -EPROTO) continue;
        if (h.type == PR_W_SHUTDOWN) shutdown_all(h.a > 0 && h.a < 60000 ? (int)h.a : 200);
        on_packet(&h, buf, fds, nfds);
        if (h.type == PR_W_RELEASE) { sweeps_left = 5; next_sweep = pr_shep_now_ms() + 40; }
      }
    }
    if (sweeps_left && pr_shep_now_ms() >= next_sweep) {
      sweeps_left = pr_shep_sweep_orphans() ? 5 : sweeps_left - 1;
      next_sweep = pr_shep_now_ms() + 40;
    }
  }
  shutdown_all(200);
  return 0;
}
