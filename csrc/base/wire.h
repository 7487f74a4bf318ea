/* base/wire.h — the packet protocol between an engine and its shepherd.
 *
 * Thread: engine thread on the host side; the shepherd's only thread on the
 * other. Pure encode/decode plus sendmsg/recvmsg; no state.
 *
 * Transport: an AF_UNIX SOCK_SEQPACKET socketpair, so packet boundaries are
 * kept and file descriptors ride along with SCM_RIGHTS. Every packet is a
 * pr_wire_hdr_t followed by `len` payload bytes (len <= PR_WIRE_MAX_PAYLOAD).
 * A spawn request larger than one packet is split: every packet but the last
 * carries PR_WF_MORE.
 *
 *   engine ──SPAWN(job, argv/env/cwd)──► shepherd ──fork/exec──► job
 *   engine ◄─SPAWNED(job, pid) + fds──── shepherd   (pidfd, stdin, stdout, stderr | pty)
 *   engine ◄─EXITED(job, code|signal)─── shepherd   (the leader; PR_WF_EMPTY: nothing else left)
 *   engine ◄─EMPTY(job)───────────────── shepherd   (the last process of the job is gone)
 *   engine ──SIGNAL(job, sig)──────────► shepherd   (every process of the job; 0: probe its reaper)
 *   engine ──RELEASE(job)──────────────► shepherd   (kill what is left of the job, forget it)
 *   engine ──PING(token)───────────────► shepherd   (liveness, while it holds jobs for us)
 *   engine ◄─PONG(token)──────────────── shepherd
 *
 * Inside the shepherd each job has a reaper (shepherd/reaper.c) that speaks
 * the same packets to it on a socket of their own.
 */
#ifndef PR_WIRE_H
#define PR_WIRE_H

#include <stddef.h>
#include <stdint.h>

enum {
  PR_W_SPAWN = 1, /* e→s  job; a = cols<<16|rows; b = argc; payload cwd\0argv..\0env..\0 */
  PR_W_SIGNAL,    /* e→s  job; a = signal number (SIGHUP, SIGINT, SIGTERM, SIGKILL), or 0:
                    *       the probe of a job canceled before SPAWNED (its reaper is
                    *       continued and must answer, or it is killed) */
  PR_W_RELEASE,   /* e→s  job: drained; kill what is left of its tree and forget it */
  PR_W_SHUTDOWN,  /* e→s  kill everything (a = grace ms) and exit */
  PR_W_SPAWNED,   /* s→e  job; a = pid; fds: pidfd (may be -1 → absent), then streams */
  PR_W_FAILED,    /* s→e  job; a = errno; b = PR_STAGE_* */
  PR_W_EXITED,    /* s→e  job; flags PR_WF_SIGNALED: b = signal, else b = exit code;
                    *       PR_WF_EMPTY: no other process of the job is left */
  PR_W_EMPTY,     /* s→e  job: its last process is gone (after an EXITED without EMPTY) */
  PR_W_PING,      /* e→s  are you there? (a = a token) */
  PR_W_PONG,      /* s→e  the answer to PING (a = its token), or unasked (a = 0): first
                    *       thing at start, and while it works through a long batch;
                    *       b = the shepherd's pid. Inside the shepherd, a
                    *       reaper's answer to its commands: a = CLOCK_MONOTONIC ns
                    *       taken before it read them */
  /* Between a relay shepherd (--relay) and its link (--link), over a byte stream: */
  PR_W_DATA,   /* both  job; a = stream (0 stdin, 1 stdout or the pty, 2 stderr); payload the
                *       bytes; len 0: that stream ended (stdin: close it once written) */
  PR_W_CREDIT, /* both  job; a = stream; b = bytes the receiver took: the sender may send as many
                *       more (PR_WIRE_WINDOW at start, per stream and direction) */
  PR_W_RESIZE, /* e→s  job; a = cols<<16|rows (a pty that is not ours to ioctl) */
  PR_W_LOST,   /* link→e  the transport ended: payload says how (exit status, its stderr) */
};

/* A relay's hello: its first frame is a PONG with a = PR_RELAY_HELLO, "proctr" and the
 * protocol version, in its byte order. The link refuses any other first frame, naming a
 * far side of another byte order or version (frames are raw headers in host order). */
#define PR_RELAY_VERSION 1
#define PR_RELAY_MAGIC ((int64_t)0x70726f6374720000)
#define PR_RELAY_HELLO (PR_RELAY_MAGIC | PR_RELAY_VERSION)

/* Bytes a relay may send of one stream (or a link of one stdin) before the
 * other side gives credit back: what back-pressure lets travel at once. */
#define PR_WIRE_WINDOW ((int64_t)256 * 1024)

/* flags */
#define PR_WF_MORE 0x1      /* SPAWN: more packets of this request follow */
#define PR_WF_PTY 0x2       /* SPAWN/SPAWNED: one pty master instead of pipes */
#define PR_WF_STDIN 0x4     /* SPAWN/SPAWNED: stdin is a pipe (else /dev/null) */
#define PR_WF_SIGNALED 0x10 /* EXITED: b is a signal number */
#define PR_WF_PIDFD 0x20    /* SPAWNED: the first fd is a pidfd */
#define PR_WF_FDS_LOST \
  0x40                   /* set by pr_wire_recv: the packet came whole, but the fds sent
                             * with it could not be received (MSG_CTRUNC: the receiver is
                             * out of descriptors); none are returned */
#define PR_WF_EMPTY 0x80 /* EXITED: the job has no process left */

/* Stages at which a spawn can fail, reported in FAILED.b. */
enum {
  PR_STAGE_SETUP = 1,
  PR_STAGE_PTY,
  PR_STAGE_PIPE,
  PR_STAGE_FORK,
  PR_STAGE_CHDIR,
  PR_STAGE_EXEC
};

#define PR_WIRE_MAX_PAYLOAD (60 * 1024)
#define PR_WIRE_MAX_FDS 4

typedef struct {
  uint32_t type;
  uint32_t flags;
  uint64_t job; /* execution id */
  int64_t a;
  int64_t b;
  uint32_t len;  /* payload bytes after the header */
  uint32_t from; /* inside the shepherd: the pid of the reaper that sent it; else 0 */
} pr_wire_hdr_t;

/* pr_wire_send: send one packet (header + payload + fds) on `fd`.
 * `nonblock` uses MSG_DONTWAIT. Never raises SIGPIPE (MSG_NOSIGNAL).
 * Returns 0, -EAGAIN when it would block (nothing was sent), or -errno. */
int pr_wire_send(int fd, const pr_wire_hdr_t *h, const void *payload, const int *fds, int nfds,
                 int nonblock);

/* pr_wire_recv: receive one packet. `buf` must hold PR_WIRE_MAX_PAYLOAD bytes;
 * received fds land in fds[0..*nfds) with O_CLOEXEC set, and the caller owns
 * them. Returns 1 for a packet, 0 at EOF, -EAGAIN when none is ready
 * (nonblock), or -errno (-EPROTO for a malformed packet; its fds are closed).
 * A whole packet whose fds did not all arrive is returned with no fds and
 * PR_WF_FDS_LOST set in h->flags (never dropped: it may be the only word of
 * a process that now runs). */
int pr_wire_recv(int fd, pr_wire_hdr_t *h, void *buf, int *fds, int *nfds, int nonblock);

/* pr_stage_name: "chdir", "exec", ... for a PR_STAGE_* value. */
const char *pr_stage_name(int64_t stage);

#endif
