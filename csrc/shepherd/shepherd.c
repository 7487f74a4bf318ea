/* shepherd.c — proctor-shepherd: the parent of every job of one engine.
 *
 * Thread: single-threaded program (its own process, exec'd by the engine).
 *
 *   host (engine thread) ══ SOCK_SEQPACKET ══ shepherd ── clone/exec ─► job (own session)
 *                                               │  subreaper: escapees come back here
 *                                               └─ socket EOF ⇒ kill every job, exit
 *
 * Why a separate process: see DESIGN.md §2. In short, only here is it safe to
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

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "base/idmap.h"
#include "base/wire.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

extern char **environ;

typedef struct job {
  uint64_t id;
  pid_t pid;      /* leader; also pgid and sid of the job */
  int exited;     /* leader exit seen (leader is a zombie we hold) */
  int stopping;   /* a stop was requested: on leader exit, kill the rest at once */
  /* Exec handshake still open: `ep` gets EOF when exec succeeded (CLOEXEC)
   * or {stage, errno} when it failed. Until then SPAWNED is not sent, the
   * parent ends wait in `fds`, and an exit is held back in `exit_*`. */
  int handshake;
  int ep;
  int fds[PR_WIRE_MAX_FDS], nfds;
  uint32_t rflags;
  int exit_pending;
  uint32_t exit_flags;
  int64_t exit_value;
  uint64_t deep;  /* signals (bit n = signal n) still owed to escapees: see hunt() */
} job_t;

static int hunt_pending; /* some job has `deep` bits set */

/* Jobs whose exec handshake is open (their ep is in the poll set). */
static job_t **shaking;
static size_t nshaking, capshaking;

static pr_idmap_t by_id, by_pid; /* job id -> job, leader pid -> job */
static int njobs;
static int sock = -1;
static pid_t self;
static char tag_prefix[64]; /* "PROCTOR_JOB=<shepherd pid>:" */

/* A spawn request being assembled from several packets. */
static struct {
  uint64_t job;
  uint32_t flags;
  int64_t a, b;
  char *buf;
  size_t len, cap;
} pend;

/* ---- small helpers ------------------------------------------------------ */

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void send_hdr(uint32_t type, uint32_t flags, uint64_t job, int64_t a, int64_t b,
                     const int *fds, int nfds) {
  pr_wire_hdr_t h = {.type = type, .flags = flags, .job = job, .a = a, .b = b};
  /* Blocking send: the engine always drains its socket. Failure means the
   * host is gone; EOF handling on the next poll does the shutdown. */
  (void)pr_wire_send(sock, &h, NULL, fds, nfds, 0);
}

static job_t *find_id(uint64_t id) { return pr_idmap_get(&by_id, id); }

static job_t *find_pid(pid_t pid) { return pr_idmap_get(&by_pid, (uint64_t)pid); }

/* Index `j` by id and by pid. Returns 0, or -1 when out of memory (not indexed). */
static int add_job(job_t *j) {
  if (pr_idmap_put(&by_id, j->id, j) != 0) return -1;
  if (pr_idmap_put(&by_pid, (uint64_t)j->pid, j) != 0) {
    pr_idmap_del(&by_id, j->id);
    return -1;
  }
  njobs++;
  return 0;
}

static void remove_job(job_t *j) {
  pr_idmap_del(&by_id, j->id);
  pr_idmap_del(&by_pid, (uint64_t)j->pid);
  njobs--;
  free(j);
}

/* Walk every job: `at` starts at 0 (the map must not change meanwhile). */
static job_t *next_job(size_t *at) { return pr_idmap_next(&by_id, at, NULL); }

/* ---- /proc scanning ------------------------------------------------------ */

typedef struct {
  pid_t pid, ppid, pgid, sid;
  unsigned long long start; /* start time in clock ticks since boot */
  int mark;
} proc_t;

/* Parse /proc/<pid>/stat. Returns 0 on success. */
static int read_stat(pid_t pid, proc_t *p) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = 0;
  char *rp = strrchr(buf, ')'); /* comm may contain spaces and parens */
  if (rp == NULL) return -1;
  char state;
  int ppid, pgid, sid;
  unsigned long long start;
  /* fields after comm: state ppid pgrp session tty_nr tpgid flags minflt cminflt
   * majflt cmajflt utime stime cutime cstime priority nice num_threads itrealvalue starttime */
  if (sscanf(rp + 2,
             "%c %d %d %d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
             &state, &ppid, &pgid, &sid, &start) != 5)
    return -1;
  p->pid = pid;
  p->ppid = ppid;
  p->pgid = pgid;
  p->sid = sid;
  p->start = start;
  p->mark = 0;
  return 0;
}

/* The job id in a process's PROCTOR_JOB tag when it belongs to this shepherd, else 0. */
static uint64_t read_tag(pid_t pid) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  size_t cap = 65536, len = 0;
  char *buf = malloc(cap + 1);
  if (buf == NULL) { close(fd); return 0; }
  ssize_t n;
  while (len < cap && (n = read(fd, buf + len, cap - len)) > 0) len += (size_t)n;
  close(fd);
  buf[len] = 0;
  uint64_t id = 0;
  size_t plen = strlen(tag_prefix);
  for (size_t i = 0; i < len;) {
    char *s = buf + i;
    size_t sl = strnlen(s, len - i);
    if (sl > plen && memcmp(s, tag_prefix, plen) == 0) id = strtoull(s + plen, NULL, 10);
    i += sl + 1;
  }
  free(buf);
  return id;
}

/* Signal one process through a pidfd, after checking the pid still names the
 * process we saw in /proc (same start time). Returns 0 if signalled. */
static int signal_verified(const proc_t *p, int sig) {
  int pfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
  if (pfd < 0) return -1;
  proc_t now;
  int rc = -1;
  if (read_stat(p->pid, &now) == 0 && now.start == p->start)
    rc = (int)syscall(SYS_pidfd_send_signal, pfd, sig, NULL, 0);
  close(pfd);
  return rc;
}

/* Snapshot every process visible in /proc into *out (malloc'd). */
static size_t scan_proc(proc_t **out) {
  size_t n = 0, cap = 512;
  proc_t *v = malloc(cap * sizeof(*v));
  DIR *d = opendir("/proc");
  if (v == NULL || d == NULL) {
    free(v);
    if (d) closedir(d);
    *out = NULL;
    return 0;
  }
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    pid_t pid = (pid_t)atoi(e->d_name);
    if (pid == self) continue;
    if (n == cap) {
      proc_t *nv = realloc(v, cap * 2 * sizeof(*v));
      if (nv == NULL) break;
      v = nv;
      cap *= 2;
    }
    if (read_stat(pid, &v[n]) == 0) n++;
  }
  closedir(d);
  *out = v;
  return n;
}

/* The job a process belongs to, if any: its group or session is a job's, or
 * it is an orphan of ours tagged with a live job. */
static job_t *direct_owner(const proc_t *p) {
  job_t *j = find_pid(p->pgid);
  if (j == NULL) j = find_pid(p->sid);
  if (j == NULL && p->ppid == self && find_pid(p->pid) == NULL) {
    uint64_t tag = read_tag(p->pid);
    if (tag) j = find_id(tag);
  }
  return j;
}

/* Send every signal owed to escapees (job->deep) with ONE scan of /proc for
 * all jobs: descendants of a job's group and session by parent links, and
 * tagged orphans with theirs. Members of a job's own group were signalled
 * with kill(-pgid) already and are skipped. Cheap when nothing is owed. */
static void hunt(void) {
  if (!hunt_pending) return;
  hunt_pending = 0;
  proc_t *v;
  size_t n = scan_proc(&v);
  pr_idmap_t bypid; /* pid -> its proc_t in v */
  pr_idmap_init(&bypid);
  job_t **own = calloc(n ? n : 1, sizeof(*own));
  if (v == NULL || own == NULL) goto done;
  for (size_t i = 0; i < n; i++) {
    if (pr_idmap_put(&bypid, (uint64_t)v[i].pid, &v[i]) != 0) goto done;
    own[i] = direct_owner(&v[i]);
  }
  /* Inherit owners down parent links; the tree is shallow: a few passes. */
  for (int changed = 1, pass = 0; changed && pass < 64; pass++) {
    changed = 0;
    for (size_t i = 0; i < n; i++) {
      if (own[i]) continue;
      proc_t *parent = pr_idmap_get(&bypid, (uint64_t)v[i].ppid);
      if (parent && own[parent - v]) {
        own[i] = own[parent - v];
        changed = 1;
      }
    }
  }
  for (size_t i = 0; i < n; i++) {
    job_t *j = own[i];
    if (j == NULL || j->deep == 0 || v[i].pgid == j->pid) continue;
    for (int sig = 1; sig < 64; sig++)
      if (j->deep & (1ull << sig)) signal_verified(&v[i], sig);
  }
done:
  for (size_t at = 0;;) {
    job_t *k = next_job(&at);
    if (k == NULL) break;
    k->deep = 0;
  }
  pr_idmap_destroy(&bypid);
  free(v);
  free(own);
}

/* Signal the whole job: its process group now (safe: the leader is
 * unreaped), and with `deep` also its escapees at the next hunt(). */
static void kill_job(job_t *j, int sig, int deep) {
  kill(-j->pid, sig);
  if (sig == SIGTERM || sig == SIGHUP) kill(-j->pid, SIGCONT);
  if (deep && sig > 0 && sig < 64) {
    j->deep |= 1ull << sig;
    if (sig == SIGTERM || sig == SIGHUP) j->deep |= 1ull << SIGCONT;
    hunt_pending = 1;
  }
}

/* Read our direct children from /proc. Returns a malloc'd array. */
static size_t list_children(pid_t **out) {
  char path[64];
  snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)self, (int)self);
  size_t n = 0, cap = 256;
  pid_t *v = malloc(cap * sizeof(*v));
  *out = v;
  if (v == NULL) return 0;
  FILE *f = fopen(path, "re");
  if (f == NULL) return 0;
  int pid;
  while (fscanf(f, "%d", &pid) == 1) {
    if (n == cap) {
      pid_t *nv = realloc(v, cap * 2 * sizeof(*v));
      if (nv == NULL) break;
      v = nv;
      cap *= 2;
      *out = v;
    }
    v[n++] = pid;
  }
  fclose(f);
  return n;
}

/* Kill orphans of ours (non-leader children) whose job is gone: tagged with a
 * job no longer held, or — when no job is left at all — untagged ones too.
 * Returns how many were signalled. */
static int sweep_orphans(void) {
  pid_t *c;
  size_t n = list_children(&c);
  int hit = 0;
  for (size_t i = 0; i < n; i++) {
    if (find_pid(c[i])) continue;
    uint64_t tag = read_tag(c[i]);
    if ((tag != 0 && find_id(tag) == NULL) || (tag == 0 && njobs == 0)) {
      /* An unreaped child of ours: its pid (and group, if it leads one) is safe. */
      if (getpgid(c[i]) == c[i]) kill(-c[i], SIGKILL);
      kill(c[i], SIGKILL);
      hit++;
    }
  }
  free(c);
  return hit;
}

/* ---- reaping -------------------------------------------------------------- */

static void leader_exited(job_t *j, const siginfo_t *si) {
  j->exited = 1;
  uint32_t flags = 0;
  int64_t b = si->si_status;
  if (si->si_code == CLD_KILLED || si->si_code == CLD_DUMPED) flags |= PR_WF_SIGNALED;
  if (j->stopping) kill_job(j, SIGKILL, 1); /* leader gone while stopping: rest dies now */
  if (j->handshake) { /* SPAWNED (or FAILED) must go first */
    j->exit_pending = 1;
    j->exit_flags = flags;
    j->exit_value = b;
    return;
  }
  send_hdr(PR_W_EXITED, flags, j->id, 0, b, NULL, 0);
}

static void reap(void) {
  int blocked = 0;
  for (;;) {
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0) break;
    job_t *j = find_pid(si.si_pid);
    if (j == NULL) { /* orphan or escapee: reap it for real */
      waitpid(si.si_pid, NULL, WNOHANG);
      continue;
    }
    if (!j->exited) leader_exited(j, &si);
    blocked = 1; /* a held zombie sits first in line: look at each child instead */
    break;
  }
  if (!blocked) return;
  pid_t *c;
  size_t n = list_children(&c);
  for (size_t i = 0; i < n; i++) {
    job_t *j = find_pid(c[i]);
    if (j == NULL) {
      waitpid(c[i], NULL, WNOHANG);
    } else if (!j->exited) {
      siginfo_t si;
      memset(&si, 0, sizeof(si));
      if (waitid(P_PID, (id_t)c[i], &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid)
        leader_exited(j, &si);
    }
  }
  free(c);
}

/* ---- spawning -------------------------------------------------------------- */

static int grow_shaking(void);

static void fail_spawn(uint64_t job, int err, int stage) {
  send_hdr(PR_W_FAILED, 0, job, err, stage, NULL, 0);
}

/* In the child: report errno at `stage` through the error pipe and die. */
static void child_fail(int errfd, int stage) {
  int msg[2] = {stage, errno};
  ssize_t w = write(errfd, msg, sizeof(msg));
  (void)w;
  _exit(127);
}

/* Every disposition back to default, with the raw system call: glibc's
 * sigaction refuses its internal signals 32 and 33, and posix_spawn leaves
 * them ignored in the shepherd (an ignored disposition survives exec, so every
 * job would start with them ignored). All fields zero but the handler
 * (SIG_DFL) reads the same in every architecture's kernel_sigaction. */
static void default_dispositions(void) {
  unsigned long ksa[4] = {0, 0, 0, 0};
  for (int s = 1; s <= 64; s++)
    if (s != SIGKILL && s != SIGSTOP) syscall(SYS_rt_sigaction, s, ksa, NULL, 8);
}

/* What the child needs; it lives on the parent's stack during the clone. */
typedef struct {
  uint32_t flags;
  int slave, fin, fout, ferr, ep;
  const char *cwd;
  char **argv, **envp;
} child_args_t;

/* The child, sharing our memory until it execs or exits (CLONE_VM |
 * CLONE_VFORK, as posix_spawn does): no page tables are copied, so a spawn
 * costs a fraction of a fork. Only system calls here; it writes no memory of
 * ours except errno and `environ`, which the parent restores. */
static int child_main(void *arg) {
  const child_args_t *a = arg;
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &dfl, NULL); /* our own copy of the dispositions (no CLONE_SIGHAND) */
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  if (setsid() < 0) child_fail(a->ep, PR_STAGE_SETUP);
  if (a->flags & PR_WF_PTY) {
    if (ioctl(a->slave, TIOCSCTTY, 0) < 0) child_fail(a->ep, PR_STAGE_PTY);
    if (dup2(a->slave, 0) < 0 || dup2(a->slave, 1) < 0 || dup2(a->slave, 2) < 0)
      child_fail(a->ep, PR_STAGE_SETUP);
  } else {
    int fin = a->fin >= 0 ? a->fin : open("/dev/null", O_RDONLY);
    if (fin < 0 || dup2(fin, 0) < 0 || dup2(a->fout, 1) < 0 || dup2(a->ferr, 2) < 0)
      child_fail(a->ep, PR_STAGE_SETUP);
  }
  /* Children see only 0, 1, 2: everything else closes at exec (the error
   * pipe too, which is how the parent learns exec worked). */
  if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
    for (int fd = 3; fd < 65536; fd++)
      if (fd != a->ep) fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  if (a->cwd[0] && chdir(a->cwd) < 0) child_fail(a->ep, PR_STAGE_CHDIR);
  environ = a->envp; /* PATH lookup uses the child's PATH */
  execvp(a->argv[0], a->argv);
  child_fail(a->ep, PR_STAGE_EXEC);
  return 127;
}

/* Start child_main on its own stack; returns its pid (it has exec'd or
 * died by then) or -1 with errno. */
static pid_t spawn_child(child_args_t *a) {
  enum { STACK = 256 * 1024 };
  static char *stack;
  if (stack == NULL) {
    void *m = mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) return -1;
    stack = m;
  }
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old); /* no signal runs in the child before its reset */
  char **env = environ;
  pid_t pid = clone(child_main, stack + STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, a);
  int saved = errno;
  environ = env;
  sigprocmask(SIG_SETMASK, &old, NULL);
  errno = saved;
  return pid;
}

static void do_spawn(void) {
  uint64_t id = pend.job;
  uint32_t flags = pend.flags;
  int cols = (int)((pend.a >> 16) & 0xffff), rows = (int)(pend.a & 0xffff);
  size_t argc = (size_t)pend.b;
  /* Split the payload: cwd, argc args, then env strings up to the end. */
  char *p = pend.buf, *end = pend.buf + pend.len;
  size_t nstr = 0;
  for (char *q = p; q < end; q++)
    if (*q == 0) nstr++;
  if (argc == 0 || nstr < 1 + argc || pend.len == 0 || end[-1] != 0) {
    errno = EINVAL;
    fail_spawn(id, EINVAL, PR_STAGE_SETUP);
    return;
  }
  size_t envc = nstr - 1 - argc;
  char **argv = calloc(argc + 1, sizeof(char *));
  char **envp = calloc(envc + 2, sizeof(char *));
  char tag[96];
  int master = -1, slave = -1, in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  int ep[2] = {-1, -1};
  if (argv == NULL || envp == NULL) {
    fail_spawn(id, ENOMEM, PR_STAGE_SETUP);
    goto done;
  }
  char *cwd = p;
  p += strlen(p) + 1;
  for (size_t i = 0; i < argc; i++) { argv[i] = p; p += strlen(p) + 1; }
  for (size_t i = 0; i < envc; i++) { envp[i] = p; p += strlen(p) + 1; }
  snprintf(tag, sizeof(tag), "%s%llu", tag_prefix, (unsigned long long)id);
  envp[envc] = tag;

  if (flags & PR_WF_PTY) {
    char name[128];
    master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0 ||
        ptsname_r(master, name, sizeof(name)) != 0 ||
        (slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
      fail_spawn(id, errno, PR_STAGE_PTY);
      goto done;
    }
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    ioctl(slave, TIOCSWINSZ, &ws);
  } else {
    if (((flags & PR_WF_STDIN) && pipe2(in, O_CLOEXEC) < 0) || pipe2(out, O_CLOEXEC) < 0 ||
        pipe2(err, O_CLOEXEC) < 0) {
      fail_spawn(id, errno, PR_STAGE_PIPE);
      goto done;
    }
  }
  if (pipe2(ep, O_CLOEXEC) < 0) {
    fail_spawn(id, errno, PR_STAGE_PIPE);
    goto done;
  }

  child_args_t ca = {
      .flags = flags, .slave = slave, .fin = (flags & PR_WF_STDIN) ? in[0] : -1,
      .fout = out[1], .ferr = err[1], .ep = ep[1], .cwd = cwd, .argv = argv, .envp = envp};
  pid_t pid = spawn_child(&ca);
  if (pid < 0) {
    fail_spawn(id, errno, PR_STAGE_FORK);
    goto done;
  }
  close(ep[1]);
  ep[1] = -1;
  /* Register the leader now, so a fast exit is held (never reaped as an
   * orphan), and finish the handshake when `ep` is readable: spawning the
   * next job does not wait for this exec. */
  job_t *j = calloc(1, sizeof(*j));
  if (j) {
    j->id = id;
    j->pid = pid;
  }
  if (j == NULL || (nshaking == capshaking && grow_shaking() != 0) || add_job(j) != 0) {
    free(j); /* kill rather than lose it */
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    fail_spawn(id, ENOMEM, PR_STAGE_SETUP);
    goto done;
  }
  j->handshake = 1;
  j->ep = ep[0];
  ep[0] = -1;
  j->rflags = flags & (PR_WF_PTY | PR_WF_STDIN);
  if (flags & PR_WF_PTY) {
    j->fds[j->nfds++] = master;
    master = -1;
  } else {
    if (flags & PR_WF_STDIN) { j->fds[j->nfds++] = in[1]; in[1] = -1; }
    j->fds[j->nfds++] = out[0];
    out[0] = -1;
    j->fds[j->nfds++] = err[0];
    err[0] = -1;
  }
  shaking[nshaking++] = j;
done:
  if (master >= 0) close(master);
  if (slave >= 0) close(slave);
  for (int i = 0; i < 2; i++) {
    if (in[i] >= 0) close(in[i]);
    if (out[i] >= 0) close(out[i]);
    if (err[i] >= 0) close(err[i]);
    if (ep[i] >= 0) close(ep[i]);
  }
  free(argv);
  free(envp);
}

static int grow_shaking(void) {
  size_t ncap = capshaking ? capshaking * 2 : 64;
  job_t **n = realloc(shaking, ncap * sizeof(*n));
  if (n == NULL) return -1;
  shaking = n;
  capshaking = ncap;
  return 0;
}

/* The exec handshake of shaking[i] is readable: report SPAWNED (then a held
 * exit) or FAILED. Removes it from `shaking`. */
static void finish_handshake(size_t i) {
  job_t *j = shaking[i];
  shaking[i] = shaking[--nshaking];
  int msg[2];
  ssize_t r;
  do r = read(j->ep, msg, sizeof(msg));
  while (r < 0 && errno == EINTR);
  close(j->ep);
  j->ep = -1;
  j->handshake = 0;
  if (r == (ssize_t)sizeof(msg)) { /* exec failed: the child is no job */
    for (int k = 0; k < j->nfds; k++) close(j->fds[k]);
    waitpid(j->pid, NULL, 0);
    uint64_t id = j->id;
    remove_job(j);
    fail_spawn(id, msg[1], msg[0]);
    return;
  }
  int fds[PR_WIRE_MAX_FDS], nfds = 0;
  uint32_t rflags = j->rflags;
  int pidfd = (int)syscall(SYS_pidfd_open, j->pid, 0);
  if (pidfd >= 0) { fds[nfds++] = pidfd; rflags |= PR_WF_PIDFD; }
  for (int k = 0; k < j->nfds && nfds < PR_WIRE_MAX_FDS; k++) fds[nfds++] = j->fds[k];
  send_hdr(PR_W_SPAWNED, rflags, j->id, j->pid, 0, fds, nfds);
  for (int k = 0; k < nfds; k++) close(fds[k]);
  j->nfds = 0;
  if (j->exit_pending) {
    j->exit_pending = 0;
    send_hdr(PR_W_EXITED, j->exit_flags, j->id, 0, j->exit_value, NULL, 0);
  }
}

/* ---- commands from the engine ---------------------------------------------- */

static void on_packet(const pr_wire_hdr_t *h, const char *payload, int *fds, int nfds) {
  for (int i = 0; i < nfds; i++) close(fds[i]); /* the engine never sends fds */
  switch (h->type) {
  case PR_W_SPAWN: {
    if (pend.buf == NULL || pend.job != h->job) {
      pend.len = 0;
      pend.job = h->job;
      pend.flags = h->flags;
      pend.a = h->a;
      pend.b = h->b;
    }
    if (pend.len + h->len > pend.cap) {
      size_t ncap = pend.cap ? pend.cap : 65536;
      while (ncap < pend.len + h->len) ncap *= 2;
      char *nb = realloc(pend.buf, ncap);
      if (nb == NULL) {
        fail_spawn(h->job, ENOMEM, PR_STAGE_SETUP);
        pend.len = 0;
        return;
      }
      pend.buf = nb;
      pend.cap = ncap;
    }
    memcpy(pend.buf + pend.len, payload, h->len);
    pend.len += h->len;
    if (h->flags & PR_WF_MORE) return;
    do_spawn();
    pend.len = 0;
    pend.job = 0;
    if (pend.cap > (1u << 20)) { free(pend.buf); pend.buf = NULL; pend.cap = 0; }
    return;
  }
  case PR_W_SIGNAL: {
    job_t *j = find_id(h->job);
    if (j == NULL || h->a <= 0 || h->a >= NSIG) return;
    if (h->flags & PR_WF_STOPPING) j->stopping = 1;
    kill_job(j, (int)h->a, 1);
    if (j->exited && j->stopping) kill_job(j, SIGKILL, 1);
    return;
  }
  case PR_W_RELEASE: {
    job_t *j = find_id(h->job);
    if (j == NULL || !j->exited) return;
    kill_job(j, SIGKILL, 0);
    hunt(); /* signals still owed to this job's escapees go out while it is known */
    waitpid(j->pid, NULL, 0); /* a zombie already: returns at once */
    remove_job(j);
    sweep_orphans(); /* escapees of this job that were reparented to us */
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
  for (size_t at = 0; (j = next_job(&at)) != NULL;) {
    if (j->handshake) { /* may not lead its group yet: kill it by pid (unreaped child) */
      kill(j->pid, SIGKILL);
      continue;
    }
    kill_job(j, SIGHUP, 0);
    kill_job(j, SIGTERM, 1);
  }
  hunt();
  uint64_t deadline = now_ms() + (uint64_t)grace_ms;
  while (njobs > 0 && now_ms() < deadline) {
    reap();
    int all = 1;
    for (size_t at = 0; all && (j = next_job(&at)) != NULL;) all = j->exited;
    if (all) break;
    usleep(5000);
  }
  for (size_t at = 0; (j = next_job(&at)) != NULL;) {
    kill(j->pid, SIGKILL);
    kill_job(j, SIGKILL, 1);
  }
  hunt();
  /* Drop the jobs (their leaders are reaped below), then kill whatever
   * reaches us as an orphan until nothing is left or time runs out. */
  for (size_t at = 0; (j = next_job(&at)) != NULL;) free(j);
  pr_idmap_destroy(&by_id);
  pr_idmap_destroy(&by_pid);
  njobs = 0;
  uint64_t end = now_ms() + 3000;
  for (;;) {
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    pid_t *c;
    size_t n = list_children(&c);
    for (size_t i = 0; i < n; i++) {
      if (getpgid(c[i]) == c[i]) kill(-c[i], SIGKILL);
      kill(c[i], SIGKILL);
    }
    free(c);
    if (n == 0 || now_ms() > end) break;
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
  sock = fdarg;
  fcntl(sock, F_SETFD, FD_CLOEXEC);
  if (daemon) {
    pid_t p = fork();
    if (p < 0) return 1;
    if (p > 0) _exit(0); /* the host reaps this one at once */
  }
  setsid(); /* a terminal's ^C or hangup never reaches us: EOF is the signal */
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  self = getpid();
  snprintf(tag_prefix, sizeof(tag_prefix), "PROCTOR_JOB=%d:", (int)self);

  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  default_dispositions(); /* then SIGPIPE is the only one a child must reset */
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
    if (pcap < 2 + nshaking) {
      size_t ncap = (2 + nshaking) * 2;
      struct pollfd *np = realloc(pfd, ncap * sizeof(*np));
      if (np == NULL) shutdown_all(200);
      pfd = np;
      pcap = ncap;
    }
    pfd[0] = (struct pollfd){sock, POLLIN, 0};
    pfd[1] = (struct pollfd){sfd, POLLIN, 0};
    size_t nsh = nshaking;
    for (size_t i = 0; i < nsh; i++) pfd[2 + i] = (struct pollfd){shaking[i]->ep, POLLIN, 0};
    /* Escapee hunting (a /proc scan) waits until nothing else is ready:
     * exits are reaped and reported first, so a cancel ends as soon as the
     * process group is gone. */
    int timeout = hunt_pending ? 0 : sweeps_left ? 40 : -1;
    int r = poll(pfd, (nfds_t)(2 + nsh), timeout);
    if (r < 0 && errno != EINTR) break;
    if (r == 0 && hunt_pending) {
      hunt(); /* one /proc scan for every signal owed to escapees so far */
      continue;
    }
    /* handshakes first (from the end: finish_handshake moves the last entry) */
    for (size_t i = nsh; i-- > 0;)
      if (pfd[2 + i].revents) finish_handshake(i);
    if (pfd[1].revents & POLLIN) {
      struct signalfd_siginfo si;
      int term = 0;
      while (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si))
        if (si.ssi_signo != SIGCHLD) term = 1;
      if (term) shutdown_all(200);
      reap();
    }
    if (pfd[0].revents & (POLLIN | POLLHUP | POLLERR)) {
      for (;;) {
        pr_wire_hdr_t h;
        int fds[PR_WIRE_MAX_FDS], nfds;
        int rc = pr_wire_recv(sock, &h, buf, fds, &nfds, 1);
        if (rc == -EAGAIN) break;
        if (rc <= 0 && rc != -EPROTO) shutdown_all(200); /* host gone */
        if (rc == -EPROTO) continue;
        if (h.type == PR_W_SHUTDOWN) shutdown_all(h.a > 0 && h.a < 60000 ? (int)h.a : 200);
        on_packet(&h, buf, fds, nfds);
        if (h.type == PR_W_RELEASE) { sweeps_left = 5; next_sweep = now_ms() + 40; }
      }
    }
    if (sweeps_left && now_ms() >= next_sweep) {
      sweeps_left = sweep_orphans() ? 5 : sweeps_left - 1;
      next_sweep = now_ms() + 40;
    }
  }
  shutdown_all(200);
  return 0;
}
