/* stop_reaper.c — a shared object the C tests preload into a shepherd
 * (LD_PRELOAD, through a wrapper script given as the engine's shepherd) to
 * make one race happen every time: a job's reaper stopped (SIGSTOP) after
 * its job was exec'd but before it reported the spawn. A job that runs
 * `kill -STOP $PPID` at once does that only when the reaper is slow to be
 * scheduled (a loaded machine).
 *
 * Thread: whichever thread of the shepherd or a reaper calls sendmsg (each
 * is single-threaded).
 *
 * It wraps sendmsg: a reaper's SPAWNED report (a header whose `from` is the
 * reaper's pid; the shepherd's own packets have from = 0) stops the reaper
 * first. Once continued (SIGCONT), the report goes out as usual.
 */
#include <dlfcn.h>
#include <signal.h>
#include <sys/socket.h>

#include "base/wire.h"

ssize_t sendmsg(int fd, const struct msghdr *m, int flags) {
  static ssize_t (*real)(int, const struct msghdr *, int);
  if (real == NULL) real = (ssize_t(*)(int, const struct msghdr *, int))dlsym(RTLD_NEXT, "sendmsg");
  if (m->msg_iovlen > 0 && m->msg_iov[0].iov_len >= sizeof(pr_wire_hdr_t)) {
    const pr_wire_hdr_t *h = m->msg_iov[0].iov_base;
    if (h->type == PR_W_SPAWNED && h->from != 0) raise(SIGSTOP);
  }
  return real(fd, m, flags);
}
