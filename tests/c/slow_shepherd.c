/* slow_shepherd.c — a shared object the C tests preload into a shepherd
 * (LD_PRELOAD, through a wrapper script given as the engine's shepherd) to
 * hold it, every time, in the state a loaded machine puts it in only
 * sometimes: inside the handling of a spawn request, long enough for the
 * engine's liveness check to send a PING and judge the silence after it.
 *
 * Thread: the shepherd's only thread (and its reapers', forks of it, which
 * never receive a marked request).
 *
 * It wraps recvmsg: once a SPAWN packet carrying the marker
 * PROCTOR_TEST_HOLD=1 (in its environment strings) has been received, the
 * last packet of that request is returned only after a hold, whose kind
 * PROCTOR_TEST_SLOW (the shepherd's environment, set by the wrapper) names:
 *
 *   work  alive and working: a loop that sleeps 1 ms and looks at its socket,
 *         using a little CPU, until a second PING waits unread behind the
 *         request (the engine judged the silence after its first PING and
 *         asked again). Then the request is handled as usual.
 *   hang  hung: asleep for good (pause), using no CPU, until killed.
 *   spin  hung in a loop: running for good, using all the CPU it gets, until
 *         killed.
 *
 * A mark file (PROCTOR_TEST_SLOW_MARK, when set) gets one line per step:
 * "held" when the hold starts, "pinged" once two PINGs wait.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/sockios.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/wire.h"

static void mark(const char *line) {
  const char *path = getenv("PROCTOR_TEST_SLOW_MARK");
  if (path == NULL || *path == 0) return;
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  if (write(fd, line, strlen(line)) < 0) { /* a test's mark: nothing to do */
  }
  close(fd);
}

static void hold(int fd) {
  const char *how = getenv("PROCTOR_TEST_SLOW");
  mark("held\n");
  if (how != NULL && strcmp(how, "hang") == 0)
    for (;;) pause();
  if (how != NULL && strcmp(how, "spin") == 0)
    for (volatile unsigned long i = 0;; i++) {
    }
  for (;;) {
    int inq = 0;
    if (ioctl(fd, SIOCINQ, &inq) == 0 && (size_t)inq >= 2 * sizeof(pr_wire_hdr_t)) break;
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  mark("pinged\n");
}

ssize_t recvmsg(int fd, struct msghdr *m, int flags) {
  static ssize_t (*real)(int, struct msghdr *, int);
  static int marked; /* the request being received carries the marker */
  if (real == NULL) real = (ssize_t(*)(int, struct msghdr *, int))dlsym(RTLD_NEXT, "recvmsg");
  ssize_t n = real(fd, m, flags);
  if (n < (ssize_t)sizeof(pr_wire_hdr_t) || m->msg_iovlen < 2) return n;
  const pr_wire_hdr_t *h = m->msg_iov[0].iov_base;
  if (h->type != PR_W_SPAWN || h->from != 0) return n;
  static const char marker[] = "PROCTOR_TEST_HOLD=1";
  if (h->len >= sizeof(marker) && memmem(m->msg_iov[1].iov_base, h->len, marker, sizeof(marker)))
    marked = 1;
  if (marked && !(h->flags & PR_WF_MORE)) {
    marked = 0;
    hold(fd);
  }
  return n;
}
