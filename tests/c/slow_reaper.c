/* slow_reaper.c — a shared object the C tests preload into a shepherd
 * (LD_PRELOAD, through a wrapper script given as the engine's shepherd) to
 * hold a job's reaper, every time, in the state a loaded machine puts it in
 * only sometimes: it has a command from the shepherd (the cancel's SIGTERM)
 * and has not answered it past the shepherd's answer window.
 *
 * Thread: a reaper's only thread (the shepherd itself never reads a SIGTERM
 * sent by its parent: its parent is not the engine, it daemonized).
 *
 * It wraps read: once a reaper has read a SIGTERM from its parent (the
 * shepherd) off its signalfd, the read returns only after a hold, whose kind
 * PROCTOR_TEST_REAPER (the shepherd's environment, set by the wrapper, and
 * so its reapers') names:
 *
 *   work  alive and working: a loop that sleeps 1 ms, using a little CPU,
 *         until a SIGCONT is pending (the shepherd's probe: it judged the
 *         silence after the answer window and asked again). Then the
 *         command is carried out as usual: the job gets its SIGTERM.
 *   hang  hung: asleep for good (pause), using no CPU, until killed.
 *
 * A mark file (PROCTOR_TEST_REAPER_MARK, when set) gets one line per step:
 * "held" when the hold starts, "probed" once the probe is pending.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

static void mark(const char *line) {
  const char *path = getenv("PROCTOR_TEST_REAPER_MARK");
  if (path == NULL || *path == 0) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  if (write(fd, line, strlen(line)) < 0) { /* a test's mark: nothing to do */
  }
  close(fd);
}

static void hold(void) {
  const char *how = getenv("PROCTOR_TEST_REAPER");
  mark("held\n");
  if (how != NULL && strcmp(how, "hang") == 0)
    for (;;) pause();
  for (;;) {
    sigset_t pending;
    if (sigpending(&pending) == 0 && sigismember(&pending, SIGCONT)) break;
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  mark("probed\n");
}

ssize_t read(int fd, void *buf, size_t len) {
  static ssize_t (*real)(int, void *, size_t);
  if (real == NULL) real = (ssize_t(*)(int, void *, size_t))dlsym(RTLD_NEXT, "read");
  ssize_t n = real(fd, buf, len);
  if (n != (ssize_t)sizeof(struct signalfd_siginfo) || getenv("PROCTOR_TEST_REAPER") == NULL)
    return n;
  const struct signalfd_siginfo *si = buf;
  if (si->ssi_signo == SIGTERM && si->ssi_pid == (uint32_t)getppid()) hold();
  return n;
}
