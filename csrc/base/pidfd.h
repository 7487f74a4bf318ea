/* base/pidfd.h — the pidfd system call numbers, for C libraries that lack them.
 *
 * Thread: any; constants and one inline helper. Used by the engine (signals through a pidfd,
 * so a reused pid is never hit) and by the shepherd's reapers.
 *
 * glibc 2.36 names SYS_pidfd_open and SYS_pidfd_send_signal; older headers
 * do not, while the kernels proctor needs (5.3+) have both. The numbers are
 * the same on every architecture that has them (the unified syscall table).
 */
#ifndef PR_PIDFD_H
#define PR_PIDFD_H

#include <signal.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

/* pr_pidfd_kill_group: SIGKILL to process group `pid` and to the process
 * itself, only while `pidfd` (its pidfd) says it is unreaped (a zombie
 * counts), so neither its pid nor its group id can have been given to
 * another process. Nothing for pidfd < 0 or pid <= 0. Any thread. */
static inline void pr_pidfd_kill_group(int pidfd, pid_t pid) {
  if (pidfd < 0 || pid <= 0) return;
  if (syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) != 0) return;
  kill(-pid, SIGKILL);
  syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
}

#endif
