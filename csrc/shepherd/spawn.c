/* shepherd/spawn.c — starting a job: its pipes or pty, the fork of its
 * reaper (reaper.c), and — in that reaper — clone + exec in a new process group
 * (a new session for a PTY job), with the exec handshake that tells success
 * from failure.
 *
 * Thread: the shepherd's only thread; pr_shep_exec_job runs in a reaper.
 *
 *   SPAWN ─► pipes / pty ─► fork ─► reaper: subreaper, clone(VM|VFORK) ─► exec
 *               │                      └─► SPAWNED(pid, pidfd) | FAILED on the reapers' socket
 *               └─ the parent ends wait in the job until SPAWNED, then go to the engine
 *
 * The fork copies the shepherd, which is small and holds few descriptors (no
 * per-job descriptor outlives a spawn's handshake), so a spawn costs the same
 * with 10 or 10,000 jobs alive.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "shepherd/shepherd.h"

extern char **environ;

void pr_shep_fail_spawn(uint64_t job, int err, int stage) {
  pr_shep_send(PR_W_FAILED, 0, job, err, stage, NULL, 0);
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

/* ---- in the reaper: clone + exec ---------------------------------------------------- */

typedef struct {
  const pr_spawn_args_t *a;
  int ep;         /* the error pipe's write end (CLOEXEC) */
  char **sh_argv; /* "/bin/sh", (the file found), argv[1..]: see exec_as_script; or NULL */
} child_t;

/* In the child: report errno at `stage` through the error pipe and die. */
static void child_fail(int errfd, int stage) {
  int msg[2] = {stage, errno};
  ssize_t w = write(errfd, msg, sizeof(msg));
  (void)w;
  _exit(127);
}

/* After execvp failed with ENOEXEC (a file with no #! line): run it with
 * /bin/sh, as POSIX asks of execvp. glibc's execvp does this itself; musl's,
 * the static shepherd's libc, does not. The file is the one execvp found:
 * the first regular file with execute permission along PATH. Only system
 * calls and the child's stack (it shares the reaper's memory); errno is left
 * at ENOEXEC when there is no such file or /bin/sh cannot run. */
static void exec_as_script(const child_t *c) {
  const char *file = c->a->argv[0];
  char path[4096];
  struct stat st;
  if (c->sh_argv == NULL || file[0] == 0) return;
  if (strchr(file, '/') != NULL) {
    snprintf(path, sizeof(path), "%s", file);
  } else {
    const char *p = getenv("PATH"), *end;
    if (p == NULL) p = "/bin:/usr/bin";
    for (path[0] = 0; path[0] == 0 && *p; p = *end ? end + 1 : end) {
      end = strchrnul(p, ':');
      int n = end > p ? (int)(end - p) : 1;
      if (snprintf(path, sizeof(path), "%.*s/%s", n, end > p ? p : ".", file) >=
              (int)sizeof(path) ||
          stat(path, &st) != 0 || !S_ISREG(st.st_mode) || access(path, X_OK) != 0)
        path[0] = 0;
    }
    if (path[0] == 0) {
      errno = ENOEXEC;
      return;
    }
  }
  c->sh_argv[1] = path;
  execve("/bin/sh", c->sh_argv, environ);
  errno = ENOEXEC;
}

/* The child, sharing the reaper's memory until it execs or exits (CLONE_VM |
 * CLONE_VFORK, as posix_spawn does): no page tables are copied, so a spawn
 * costs a fraction of a fork. Only system calls here; it writes no memory of
 * the reaper's except errno and `environ`, which the reaper restores, and the
 * script fallback's argv, which the reaper made for it. */
static int child_main(void *arg) {
  const child_t *c = arg;
  const pr_spawn_args_t *a = c->a;
  struct sigaction dfl;
  memset(&dfl, 0, sizeof(dfl));
  dfl.sa_handler = SIG_DFL;
  sigaction(SIGPIPE, &dfl, NULL); /* our own copy of the dispositions (no CLONE_SIGHAND) */
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  /* A PTY job needs a session of its own for its controlling terminal. A
   * pipe job leads its own process group (what the reaper signals) but stays
   * in our session: with the kernel's sched_autogroup a session is one
   * scheduling group, so all pipe jobs share one group's CPU share, as what
   * one terminal starts does, instead of each weighing as much as the whole
   * editor (a fan-out of 100 jobs left the editor 1/101 of the CPUs). */
  if ((a->flags & PR_WF_PTY) ? setsid() < 0 : setpgid(0, 0) < 0) child_fail(c->ep, PR_STAGE_SETUP);
  if (a->flags & PR_WF_PTY) {
    if (ioctl(a->slave, TIOCSCTTY, 0) < 0) child_fail(c->ep, PR_STAGE_PTY);
    if (dup2(a->slave, 0) < 0 || dup2(a->slave, 1) < 0 || dup2(a->slave, 2) < 0)
      child_fail(c->ep, PR_STAGE_SETUP);
  } else {
    int fin = a->fin >= 0 ? a->fin : open("/dev/null", O_RDONLY);
    if (fin < 0 || dup2(fin, 0) < 0 || dup2(a->fout, 1) < 0 || dup2(a->ferr, 2) < 0)
      child_fail(c->ep, PR_STAGE_SETUP);
  }
  /* Children see only 0, 1, 2: everything else closes at exec (the error
   * pipe too, which is how the reaper learns exec worked). */
  if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
    for (int fd = 3; fd < 65536; fd++)
      if (fd != c->ep) fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  if (a->cwd[0] && chdir(a->cwd) < 0) child_fail(c->ep, PR_STAGE_CHDIR);
  environ = a->envp; /* PATH lookup uses the child's PATH */
  execvp(a->argv[0], a->argv);
  if (errno == ENOEXEC) exec_as_script(c);
  child_fail(c->ep, PR_STAGE_EXEC);
  return 127;
}

pid_t pr_shep_exec_job(const pr_spawn_args_t *a, int *stage) {
  enum { STACK = 64 * 1024 };
  static char stack[STACK] __attribute__((aligned(16))); /* the reaper's own copy */
  int ep[2];
  if (pipe2(ep, O_CLOEXEC) < 0) {
    *stage = PR_STAGE_PIPE;
    return -1;
  }
  /* The script fallback's argv, made here: the child must not allocate. */
  size_t argc = 0;
  while (a->argv[argc] != NULL) argc++;
  char **sh_argv = calloc(argc + 2, sizeof(char *));
  if (sh_argv != NULL) {
    sh_argv[0] = "/bin/sh";
    for (size_t i = 1; i < argc; i++) sh_argv[i + 1] = a->argv[i];
  }
  child_t c = {a, ep[1], sh_argv};
  sigset_t all, old;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &old); /* no signal runs in the child before its reset */
  char **env = environ;
  pid_t pid = clone(child_main, stack + STACK, CLONE_VM | CLONE_VFORK | SIGCHLD, &c);
  int saved = errno;
  environ = env;
  sigprocmask(SIG_SETMASK, &old, NULL);
  close(ep[1]);
  free(sh_argv); /* the child has exec'd or exited: it no longer reads it */
  if (pid < 0) {
    close(ep[0]);
    errno = saved;
    *stage = PR_STAGE_FORK;
    return -1;
  }
  /* The child has exec'd (EOF: the pipe closed at exec) or failed. */
  int msg[2];
  ssize_t r;
  do r = read(ep[0], msg, sizeof(msg));
  while (r < 0 && errno == EINTR);
  close(ep[0]);
  if (r == (ssize_t)sizeof(msg)) {
    waitpid(pid, NULL, 0);
    *stage = msg[0];
    errno = msg[1];
    return -1;
  }
  return pid;
}

/* ---- in the shepherd: the request, the pipes, the reaper ------------------------------ */

void pr_shep_spawn(uint64_t id, uint32_t flags, int64_t a, int64_t b, char *payload, size_t len) {
  int cols = (int)((a >> 16) & 0xffff), rows = (int)(a & 0xffff);
  size_t argc = (size_t)b;
  /* Split the payload: cwd, argc args, then env strings up to the end. */
  char *p = payload, *end = payload + len;
  size_t nstr = 0;
  for (char *q = p; q < end; q++)
    if (*q == 0) nstr++;
  if (argc == 0 || nstr < 1 + argc || len == 0 || end[-1] != 0) {
    pr_shep_fail_spawn(id, EINVAL, PR_STAGE_SETUP);
    return;
  }
  size_t envc = nstr - 1 - argc, nown = 0;
  if (pr_shep_relay) /* a target's environment is the far side's, under what the request sets */
    for (char **e = environ; *e; e++) nown++;
  char **argv = calloc(argc + 1, sizeof(char *));
  char **envp = calloc(envc + nown + 2, sizeof(char *));
  char tag[128];
  int master = -1, slave = -1, in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
  job_t *j = calloc(1, sizeof(*j));
  if (argv == NULL || envp == NULL || j == NULL) {
    pr_shep_fail_spawn(id, ENOMEM, PR_STAGE_SETUP);
    goto done;
  }
  char *cwd = p;
  p += strlen(p) + 1;
  for (size_t i = 0; i < argc; i++) {
    argv[i] = p;
    p += strlen(p) + 1;
  }
  for (size_t i = 0; i < envc; i++) {
    envp[i] = p;
    p += strlen(p) + 1;
  }
  for (size_t k = 0, given = envc; k < nown; k++) {
    size_t kl = strcspn(environ[k], "=") + 1;
    int over = strncmp(environ[k], "PROCTOR_JOB=", 12) == 0;
    for (size_t i = 0; i < given && !over; i++) over = strncmp(envp[i], environ[k], kl) == 0;
    if (!over) envp[envc++] = environ[k];
  }
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
  job_t *old = pr_shep_find_id(id); /* cannot happen: the engine released it first */
  if (old != NULL) {
    pr_shep_release_job(old);
    kill(old->reaper, PR_REAPER_RELEASE);
  }

  pr_spawn_args_t sa = {.id = id,
                        .flags = flags,
                        .slave = slave,
                        .fin = (flags & PR_WF_STDIN) ? in[0] : -1,
                        .fout = out[1],
                        .ferr = err[1],
                        .cwd = cwd,
                        .argv = argv,
                        .envp = envp,
                        .payload = payload,
                        .len = len};
  pid_t pid = fork();
  if (pid == 0) pr_reaper_main(&sa); /* never returns */
  if (pid < 0) {
    pr_shep_fail_spawn(id, errno, PR_STAGE_FORK);
    goto done;
  }
  j->id = id;
  j->reaper = pid;
  j->rflags = flags & (PR_WF_PTY | PR_WF_STDIN);
  if (flags & PR_WF_PTY) {
    j->fds[j->nfds++] = master;
    master = -1;
  } else {
    if (flags & PR_WF_STDIN) {
      j->fds[j->nfds++] = in[1];
      in[1] = -1;
    }
    j->fds[j->nfds++] = out[0];
    out[0] = -1;
    j->fds[j->nfds++] = err[0];
    err[0] = -1;
  }
  if (pr_shep_add_job(j) != 0) { /* kill rather than lose it */
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    for (int i = 0; i < j->nfds; i++) close(j->fds[i]);
    pr_shep_fail_spawn(id, ENOMEM, PR_STAGE_SETUP);
    goto done;
  }
  j = NULL;
done:
  free(j);
  if (master >= 0) close(master);
  if (slave >= 0) close(slave);
  for (int i = 0; i < 2; i++) {
    if (in[i] >= 0) close(in[i]);
    if (out[i] >= 0) close(out[i]);
    if (err[i] >= 0) close(err[i]);
  }
  free(argv);
  free(envp);
}
