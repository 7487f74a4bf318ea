/* base/wire.c — engine/shepherd packets over SOCK_SEQPACKET with SCM_RIGHTS.
 *
 * Thread: whichever thread owns the socket (engine thread / shepherd main).
 */

#include "base/wire.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

int pr_wire_send(int fd, const pr_wire_hdr_t *h, const void *payload, const int *fds, int nfds,
                 int nonblock) {
  struct iovec iov[2] = {{(void *)h, sizeof(*h)}, {(void *)payload, h->len}};
  struct msghdr msg = {0};
  union {
    char buf[CMSG_SPACE(sizeof(int) * PR_WIRE_MAX_FDS)];
    struct cmsghdr align;
  } u;
  msg.msg_iov = iov;
  msg.msg_iovlen = h->len ? 2 : 1;
  if (nfds > 0) {
    memset(&u, 0, sizeof(u));
    msg.msg_control = u.buf;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  ssize_t n;
  do n = sendmsg(fd, &msg, MSG_NOSIGNAL | (nonblock ? MSG_DONTWAIT : 0));
  while (n < 0 && errno == EINTR);
  if (n < 0) return errno == EWOULDBLOCK ? -EAGAIN : -errno;
  return 0;
}

int pr_wire_recv(int fd, pr_wire_hdr_t *h, void *buf, int *fds, int *nfds, int nonblock) {
  struct iovec iov[2] = {{h, sizeof(*h)}, {buf, PR_WIRE_MAX_PAYLOAD}};
  union {
    char buf[CMSG_SPACE(sizeof(int) * PR_WIRE_MAX_FDS)];
    struct cmsghdr align;
  } u;
  struct msghdr msg = {0};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  msg.msg_control = u.buf;
  msg.msg_controllen = sizeof(u.buf);
  *nfds = 0;
  ssize_t n;
  do n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | (nonblock ? MSG_DONTWAIT : 0));
  while (n < 0 && errno == EINTR);
  if (n < 0) return errno == EWOULDBLOCK ? -EAGAIN : -errno;
  if (n == 0) return 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    int k = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    int *in = (int *)CMSG_DATA(c);
    for (int i = 0; i < k; i++) {
      if (*nfds < PR_WIRE_MAX_FDS) fds[(*nfds)++] = in[i];
      else close(in[i]);
    }
  }
  int bad =
      (size_t)n < sizeof(*h) || (msg.msg_flags & MSG_TRUNC) || (size_t)n != sizeof(*h) + h->len;
  if (bad || (msg.msg_flags & MSG_CTRUNC)) { /* a partial set of fds is no use to anyone */
    for (int i = 0; i < *nfds; i++) close(fds[i]);
    *nfds = 0;
    if (bad) return -EPROTO;
    h->flags |= PR_WF_FDS_LOST;
  }
  return 1;
}

const char *pr_stage_name(int64_t stage) {
  switch (stage) {
  case PR_STAGE_SETUP: return "setup";
  case PR_STAGE_PTY: return "pty";
  case PR_STAGE_PIPE: return "pipe";
  case PR_STAGE_FORK: return "fork";
  case PR_STAGE_CHDIR: return "chdir";
  case PR_STAGE_EXEC: return "exec";
  }
  return "spawn";
}
