/* base/pidfd.h — the pidfd system call numbers, for C libraries that lack them.
 *
 * Thread: none; constants only. Used by the engine (signals through a pidfd,
 * so a reused pid is never hit) and by the shepherd's reapers.
 *
 * glibc 2.36 names SYS_pidfd_open and SYS_pidfd_send_signal; older headers
 * do not, while the kernels proctor needs (5.3+) have both. The numbers are
 * the same on every architecture that has them (the unified syscall table).
 */
#ifndef PR_PIDFD_H
#define PR_PIDFD_H

#include <sys/syscall.h>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

#endif
