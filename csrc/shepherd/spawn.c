/* shepherd/spawn.c — starting a job: a pty or pipes, clone + exec in a new
 * session, and the exec handshake that tells SPAWNED from FAILED.
 *
 * Thread: the shepherd's only thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "shepherd/shepherd.h"

extern char **environ;

/* Jobs whose exec handshake is open (their ep is in the poll set). */
static job_t **shaking;
static size_t nshaking, capshaking;

/* ---- spawning -------------------------------------------------------------- */

size_t pr_shep_nshaking(void) { return nshaking; }

int pr_shep_shaking_fd(size_t i) { return shaking[i]->ep; }

static int grow_shaking(void);

void pr_shep_fail_spawn(uint64_t job, int err, int stage) {
  pr_shep_send(PR_W_FAILED, 0, job, err, stage, NULL, 0);
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
void pr_shep_default_dispositions(void) {
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

void pr_shep_spawn(uint64_t id, uint32_t flags, int64_t a, int64_t b, char *payload, size_t len) {
  int cols = (int)((a >> 16) & 0xffff), rows = (int)(a & 0xffff);
  size_t argc = (size_t)b;
  /* Split the payload: cwd, argc args, then env strings up to the end. */
  char *p = payload, *end = payload + len;
  size_t nstr = 0;
  for (char *q = p; q < end; q++)
    if (*q == 0) nstr++;
  if (argc == 0 || nstr < 1 + argc || len == 0 || end[-1] != 0) {
    errno = EINVAL;
    pr_shep_fail_spawn(id, EINVAL, PR_STAGE_SETUP);
    return;
  }
  size_t envc = nstr - 1 - argc;
  char **argv = calloc(argc + 1, sizeof(char *));
  char **envp = calloc(envc + 2, sizeof(char *));
  char tag[96];
  int master = -1, slave = -1, in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  int ep[2] = {-1, -1};
  if (argv == NULL || envp == NULL) {
    pr_shep_fail_spawn(id, ENOMEM, PR_STAGE_SETUP);
    goto done;
  }
  char *cwd = p;
  p += strlen(p) + 1;
  for (size_t i = 0; i < argc; i++) { argv[i] = p; p += strlen(p) + 1; }
  for (size_t i = 0; i < envc; i++) { envp[i] = p; p += strlen(p) + 1; }
  snprintf(tag, sizeof(tag), "%s%llu", pr_shep_tag_prefix, (unsigned long long)id);
  envp[envc] = tag;

  if (flags & PR_WF_PTY) {
    char name[128];
    master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0 ||
        ptsname_r(master, name, sizeof(name)) != 0 ||
        (slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
      pr_shep_fail_spawn(id, errno, PR_STAGE_PTY);
      goto done;
    }
    struct winsize ws = {.ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols};
    ioctl(slave, TIOCSWINSZ, &ws);
  } else {
    if (((flags & PR_WF_STDIN) && pipe2(in, O_CLOEXEC) < 0) || pipe2(out, O_CLOEXEC) < 0 ||
        pipe2(err, O_CLOEXEC) < 0) {
      pr_shep_fail_spawn(id, errno, PR_STAGE_PIPE);
      goto done;
    }
  }
  if (pipe2(ep, O_CLOEXEC) < 0) {
    pr_shep_fail_spawn(id, errno, PR_STAGE_PIPE);
    goto done;
  }

  child_args_t ca = {
      .flags = flags, .slave = slave, .fin = (flags & PR_WF_STDIN) ? in[0] : -1,
      .fout = out[1], .ferr = err[1], .ep = ep[1], .cwd = cwd, .argv = argv, .envp = envp};
  pid_t pid = spawn_child(&ca);
  if (pid < 0) {
    pr_shep_fail_spawn(id, errno, PR_STAGE_FORK);
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
  if (j == NULL || (nshaking == capshaking && grow_shaking() != 0) || pr_shep_add_job(j) != 0) {
    free(j); /* kill rather than lose it */
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    pr_shep_fail_spawn(id, ENOMEM, PR_STAGE_SETUP);
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
void pr_shep_finish_handshake(size_t i) {
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
    pr_shep_remove_job(j);
    pr_shep_fail_spawn(id, msg[1], msg[0]);
    return;
  }
  int fds[PR_WIRE_MAX_FDS], nfds = 0;
  uint32_t rflags = j->rflags;
  int pidfd = (int)syscall(SYS_pidfd_open, j->pid, 0);
  if (pidfd >= 0) { fds[nfds++] = pidfd; rflags |= PR_WF_PIDFD; }
  for (int k = 0; k < j->nfds && nfds < PR_WIRE_MAX_FDS; k++) fds[nfds++] = j->fds[k];
  pr_shep_send(PR_W_SPAWNED, rflags, j->id, j->pid, 0, fds, nfds);
  for (int k = 0; k < nfds; k++) close(fds[k]);
  j->nfds = 0;
  if (j->exit_pending) {
    j->exit_pending = 0;
    pr_shep_send(PR_W_EXITED, j->exit_flags, j->id, 0, j->exit_value, NULL, 0);
  }
}

