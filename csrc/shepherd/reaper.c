/* shepherd/reaper.c — the reaper of one job: a fork of the shepherd that is
 * the subreaper of that job only.
 *
 * Thread: the reaper's only thread (its own process, one per job).
 *
 *   shepherd ──fork──► reaper (PR_SET_CHILD_SUBREAPER) ──clone/exec──► leader (own group; own session with a PTY)
 *                         ▲ every orphan of the job comes back here, whatever it shed:
 *                         │ its session, its group, its environment (and with it the tag)
 *   commands: signals from the shepherd (shepherd.h), read from a signalfd,
 *             each batch answered at once (PONG): a reaper that does not answer
 *             (stopped by its job) is SIGKILLed by the shepherd; the probe
 *             (SIGCONT) is only answered
 *   reports:  SPAWNED(pid, pidfd) | FAILED, then EXITED (leader), then EMPTY
 *             on the reapers' socket (header field `from` = our pid)
 *
 * "The job" is every process below the reaper: the leader's group while the
 * leader is unreaped, and by the kernel's children lists the rest, escapees
 * included. The job is empty when the reaper has no child left (ECHILD):
 * nothing can come back after that, so the reaper exits then (after its
 * report), or, once released, as soon as what it killed is gone.
 *
 * Signals are safe from pid reuse: the group only while the leader is
 * unreaped; a child of ours by its pid (we reap only in reap()); any deeper
 * process through a pidfd opened before checking, in /proc, that its parent
 * is the process we walked from and that this parent is still alive.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shepherd/shepherd.h"

static struct {
  uint64_t id;
  pid_t self, shepherd, leader;
  int up;          /* the reapers' socket (write end) */
  int leader_gone; /* the leader is reaped: no more group signals */
  int exit_flags;  /* EXITED: PR_WF_SIGNALED */
  int exit_value;
  int reported;     /* EXITED sent */
  int killing;      /* SIGKILL to every process of the job, also to orphans coming back */
  int released;     /* exit once the job is empty (or at `give_up`) */
  uint64_t give_up; /* ms (monotonic): exit even with processes left (stuck in D state) */
} R;

static void report(uint32_t type, uint32_t flags, int64_t a, int64_t b, int fd) {
  if (R.released) return; /* nobody listens any more */
  pr_wire_hdr_t h = {
      .type = type, .flags = flags, .job = R.id, .a = a, .b = b, .from = (uint32_t)R.self};
  (void)pr_wire_send(R.up, &h, NULL, &fd, fd >= 0 ? 1 : 0, 0);
}

/* The shepherd's PR_W_PONG: our commands up to `read_ns` are read (also once
 * released: the shepherd still waits for it). */
static void answer(uint64_t read_ns) {
  pr_wire_hdr_t h = {
      .type = PR_W_PONG, .job = R.id, .a = (int64_t)read_ns, .from = (uint32_t)R.self};
  (void)pr_wire_send(R.up, &h, NULL, NULL, 0, 0);
}

/* ---- the job's processes ------------------------------------------------------------- */

typedef struct {
  pid_t pid;
  int pidfd; /* -1 for our own children (their pid is safe while unreaped) */
} node_t;

/* /proc/<pid>/stat: parent, group. 0, or -1 when it is gone. */
static int stat_of(pid_t pid, pid_t *ppid, pid_t *pgid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char *rp = strrchr(buf, ')'); /* comm may hold spaces and parens */
  int pp, pg;
  if (rp == NULL || sscanf(rp + 2, "%*c %d %d", &pp, &pg) != 2) return -1;
  *ppid = pp;
  *pgid = pg;
  return 0;
}

/* Append the children of `pid` (every thread's list) to *v. */
static void children_of(pid_t pid, pid_t **v, size_t *n, size_t *cap) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
  DIR *d = opendir(path);
  if (d == NULL) return;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    char cp[320];
    snprintf(cp, sizeof(cp), "/proc/%d/task/%s/children", (int)pid, e->d_name);
    FILE *f = fopen(cp, "re");
    if (f == NULL) continue;
    int c;
    while (fscanf(f, "%d", &c) == 1) {
      if (*n == *cap) {
        size_t ncap = *cap ? *cap * 2 : 64;
        pid_t *nv = realloc(*v, ncap * sizeof(*nv));
        if (nv == NULL) break;
        *v = nv;
        *cap = ncap;
      }
      (*v)[(*n)++] = c;
    }
    fclose(f);
  }
  closedir(d);
}

/* Whether node `p` (a process we walked through) is still alive. */
static int still_there(const node_t *p) {
  if (p->pidfd < 0) return 1; /* our child: its pid stays its own until we reap it */
  return syscall(SYS_pidfd_send_signal, p->pidfd, 0, NULL, 0) == 0;
}

static int push(node_t **v, size_t *n, size_t *cap, node_t x) {
  if (*n == *cap) {
    size_t nc = *cap ? *cap * 2 : 64;
    node_t *m = realloc(*v, nc * sizeof(*m));
    if (m == NULL) return -1;
    *v = m;
    *cap = nc;
  }
  (*v)[(*n)++] = x;
  return 0;
}

/* Send `sig` (and SIGCONT after SIGHUP/SIGTERM, so a stopped process acts on
 * it) to every process of the job. Members of the leader's group get it
 * from one kill() of the group while that is safe, and no second copy. */
static void signal_job(int sig) {
  int cont = sig == SIGHUP || sig == SIGTERM;
  int group = !R.leader_gone; /* the leader is unreaped: its group id is its own */
  if (group) {
    kill(-R.leader, sig);
    if (cont) kill(-R.leader, SIGCONT);
  }
  /* Breadth-first from ourselves: every node is a process of the job. */
  node_t *nodes = NULL;
  size_t nn = 0, capn = 0;
  pid_t *kids = NULL;
  size_t nk = 0, capk = 0;
  children_of(R.self, &kids, &nk, &capk);
  for (size_t i = 0; i < nk; i++) push(&nodes, &nn, &capn, (node_t){kids[i], -1}); /* by pid */
  for (size_t i = 0; i < nn && nn < 100000; i++) {
    pid_t pid = nodes[i].pid, ppid, pgid;
    if (stat_of(pid, &ppid, &pgid) == 0) {
      if (!(group && pgid == R.leader)) {
        if (nodes[i].pidfd < 0) {
          kill(pid, sig);
          if (cont) kill(pid, SIGCONT);
        } else {
          syscall(SYS_pidfd_send_signal, nodes[i].pidfd, sig, NULL, 0);
          if (cont) syscall(SYS_pidfd_send_signal, nodes[i].pidfd, SIGCONT, NULL, 0);
        }
      }
      nk = 0;
      children_of(pid, &kids, &nk, &capk);
      for (size_t k = 0; k < nk; k++) {
        int fd = (int)syscall(SYS_pidfd_open, kids[k], 0);
        if (fd < 0) continue;
        /* The pidfd names whoever had that pid when it was opened; it is
         * ours when, after that, /proc shows `pid` as its parent while `pid`
         * still lives (so that number was not reused meanwhile). */
        pid_t kp, kg;
        if (stat_of(kids[k], &kp, &kg) != 0 || kp != pid || !still_there(&nodes[i]) ||
            push(&nodes, &nn, &capn, (node_t){kids[k], fd}) != 0)
          close(fd);
      }
    }
    if (nodes[i].pidfd >= 0) { /* its children were checked against it: done with it */
      close(nodes[i].pidfd);
      nodes[i].pidfd = -2;
    }
  }
  for (size_t i = 0; i < nn; i++)
    if (nodes[i].pidfd >= 0) close(nodes[i].pidfd);
  free(nodes);
  free(kids);
}

/* Reap every child that ended. Returns 1 when none is left (ECHILD). */
static int reap(void) {
  for (;;) {
    int st;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p == 0) return 0;
    if (p < 0) return errno == ECHILD;
    if (p == R.leader && !R.leader_gone) {
      R.leader_gone = 1;
      if (WIFSIGNALED(st)) {
        R.exit_flags = PR_WF_SIGNALED;
        R.exit_value = WTERMSIG(st);
      } else {
        R.exit_value = WEXITSTATUS(st);
      }
    }
  }
}

/* After every event: report what changed; exit when the job is empty. */
static void settle(void) {
  int empty = reap();
  if (R.leader_gone && !R.reported) {
    R.reported = 1;
    report(PR_W_EXITED, (uint32_t)R.exit_flags | (empty ? PR_WF_EMPTY : 0), 0, R.exit_value, -1);
    if (empty) _exit(0);
  }
  if (empty) {
    if (R.reported) report(PR_W_EMPTY, 0, 0, 0, -1);
    _exit(0);
  }
  if (R.killing) signal_job(SIGKILL); /* orphans that came back since */
}

static void on_command(int sig) {
  switch (sig) {
  case SIGHUP:
  case SIGINT:
  case SIGTERM: signal_job(sig); break;
  case PR_REAPER_RELEASE:
    if (!R.released) R.give_up = pr_shep_now_ms() + 5000;
    R.released = 1;
    /* fall through */
  case PR_REAPER_KILL:
    R.killing = 1;
    signal_job(SIGKILL);
    break;
  default: break;
  }
}

/* ---- life ----------------------------------------------------------------------------- */

/* Close every descriptor but those in keep[] (-1 entries ignored). */
static void close_all_but(const int *keep, int n) {
  int lo = 3;
  for (;;) {
    int next = -1; /* the smallest kept fd >= lo */
    for (int i = 0; i < n; i++)
      if (keep[i] >= lo && (next < 0 || keep[i] < next)) next = keep[i];
    unsigned hi = next < 0 ? ~0U : (unsigned)next - 1;
    if ((unsigned)lo <= hi && syscall(SYS_close_range, (unsigned)lo, hi, 0) < 0) {
      int top = next < 0 ? 65536 : next;
      for (int fd = lo; fd < top; fd++) close(fd);
    }
    if (next < 0) return;
    lo = next + 1;
  }
}

void pr_reaper_main(const pr_spawn_args_t *a) {
  R.id = a->id;
  R.self = getpid();
  R.shepherd = getppid();
  R.up = pr_shep_up[1];
  int keep[] = {R.up, a->slave, a->fin, a->fout, a->ferr};
  close_all_but(keep, 5); /* the engine's socket, other jobs' pipes: not ours */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  prctl(PR_SET_PDEATHSIG, PR_REAPER_RELEASE); /* the shepherd died: kill the job, go */
  /* The shepherd blocks every command signal, so they wait for this signalfd. */
  sigset_t set;
  sigemptyset(&set);
  int sigs[] = {SIGCHLD,           SIGHUP,         SIGINT, SIGTERM, PR_REAPER_KILL,
                PR_REAPER_RELEASE, PR_REAPER_PROBE};
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) sigaddset(&set, sigs[i]);
  sigprocmask(SIG_BLOCK, &set, NULL);
  int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (getppid() != R.shepherd) R.released = 1; /* died before the prctl took */

  int stage = 0;
  pid_t pid = sfd < 0 ? (errno = EMFILE, stage = PR_STAGE_SETUP, -1) : pr_shep_exec_job(a, &stage);
  for (int i = 1; i < 5; i++)
    if (keep[i] >= 0) close(keep[i]);
  explicit_bzero(a->payload, a->len); /* the job has its environment: no copy of a secret here */
  if (pid < 0) {
    report(PR_W_FAILED, 0, errno, stage, -1);
    _exit(0);
  }
  R.leader = pid;
  int pidfd = (int)syscall(SYS_pidfd_open, pid, 0); /* before any reaping: it is the leader's */
  report(PR_W_SPAWNED, 0, pid, 0, pidfd);
  if (pidfd >= 0) close(pidfd);
  if (R.released) on_command(PR_REAPER_RELEASE);

  for (;;) {
    int timeout = -1;
    if (R.released) {
      uint64_t now = pr_shep_now_ms();
      if (now >= R.give_up) _exit(2); /* the shepherd kills what reaches it */
      timeout = (int)(R.give_up - now);
      if (timeout > 100) timeout = 100; /* a process stuck exiting: look again */
    }
    struct pollfd p = {sfd, POLLIN, 0};
    int r = poll(&p, 1, timeout);
    if (r < 0 && errno != EINTR) _exit(3);
    /* Commands are read first and answered at once (the shepherd kills a
     * reaper that does not answer: a stopped one), then carried out in
     * signal order. Taken before the reads: a command the shepherd sent
     * before this instant is pending already, so these reads take it. */
    uint64_t read_ns = pr_shep_now_ns();
    uint32_t cmds = 0;
    struct signalfd_siginfo si;
    while (r > 0 && read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
      if (si.ssi_signo == SIGCHLD || si.ssi_signo >= 32) continue;
      /* Only the shepherd commands us (its death signal comes from it too). */
      if (si.ssi_pid == (uint32_t)R.shepherd || si.ssi_signo == PR_REAPER_RELEASE)
        cmds |= 1u << si.ssi_signo;
    }
    if (cmds) answer(read_ns);
    for (int sig = 1; sig < 32; sig++)
      if (cmds & (1u << sig)) on_command(sig);
    settle();
  }
}
