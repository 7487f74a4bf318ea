/* engine/supervisor.h — the engine's side of the shepherd link.
 *
 * Thread: engine (pr_sup_init/pr_sup_destroy also from the host thread
 * before the engine thread starts / after it ended).
 *
 * The link knows nothing of executions: what the shepherd reports (spawned,
 * failed, exited, the link lost) goes to the pr_sup_ops_t callbacks its
 * owner gave (engine/control.c, which finds the execution by job id).
 */
#ifndef PR_SUPERVISOR_H
#define PR_SUPERVISOR_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/queue.h"
#include "base/wire.h"

/* What the shepherd reports. Engine thread, from the link's poll callback. */
typedef struct {
  void (*spawned)(void *arg, const pr_wire_hdr_t *h, int *fds, int nfds); /* takes the fds */
  void (*failed)(void *arg, const pr_wire_hdr_t *h);
  void (*exited)(void *arg, const pr_wire_hdr_t *h);
  void (*empty)(void *arg, const pr_wire_hdr_t *h); /* the job's last process is gone */
  void (*lost)(void *arg); /* the shepherd died: every job lost its parent */
} pr_sup_ops_t;

typedef struct pr_sup {
  uv_loop_t *loop;
  const pr_sup_ops_t *ops;
  void *arg;
  int fd;            /* -1 when no shepherd */
  struct pr_sup_conn *conn; /* the poll handle on fd (freed in its close callback) */
  pr_queue_t sendq;  /* packets that could not be sent yet */
  char *path;        /* binary */
  char *recvbuf;     /* PR_WIRE_MAX_PAYLOAD bytes */
  unsigned long peer_ino; /* inode of the shepherd's end of the socket (its fd 3), to find it */
  char last_error[256]; /* why the last shepherd start failed ("" after a success); per
                         * engine: each engine starts its shepherd on its own thread */
  char tag[40];      /* the running shepherd's job tag: its jobs carry PROCTOR_JOB=<tag>:<id> */
  char stale[40];    /* the tag of a shepherd that died, until its leftovers are swept ("" none) */
} pr_sup_t;

/* pr_sup_init: resolve the shepherd binary (`path`, $PROCTOR_SHEPHERD, or
 * `proctor-shepherd` next to the shared object) and reset the link. Returns
 * 0 or PR_ENOMEM. Does not start the shepherd. */
int pr_sup_init(pr_sup_t *s, uv_loop_t *loop, const char *path, const pr_sup_ops_t *ops, void *arg);

/* pr_sup_ensure: start a shepherd if none is connected. Returns 0 or
 * PR_ESHEPHERD (with errno-style detail lost; see pr_sup_last_error). */
int pr_sup_ensure(pr_sup_t *s);

/* pr_sup_send: send (or queue, if the socket is full) one request. Payloads
 * larger than one packet are split. Returns 0, PR_ESHEPHERD (no shepherd), or
 * PR_ENOMEM. */
int pr_sup_send(pr_sup_t *s, uint32_t type, uint32_t flags, uint64_t job, int64_t a, int64_t b,
                const char *payload, size_t len);

/* pr_sup_alive: 1 when a shepherd is connected. */
int pr_sup_alive(const pr_sup_t *s);

/* pr_sup_sweep: after a shepherd died (the OOM killer, kill -9), kill what
 * its jobs left behind that its reapers could not: every process of our
 * uid whose environment carries that shepherd's tag (PROCTOR_JOB=<tag>:),
 * a random token no other engine's jobs carry. Done when the loss is seen,
 * again before the next shepherd starts and when the engine closes; a no-op
 * when no shepherd died. Returns how many processes it killed. */
int pr_sup_sweep(pr_sup_t *s);

/* pr_sup_shutdown: tell the shepherd to kill everything and exit (grace_ms
 * for SIGTERM'd jobs), wait at most wait_ms for it to close its end, then
 * drop the connection. Packets still queued are dropped (they are for
 * executions that are all ending). A shepherd that cannot be sent SHUTDOWN
 * or does not exit in time (stopped, hung) is killed (SIGKILL through a
 * pidfd, found by its socket in /proc). Returns 0 when the shepherd exited
 * on its own (or there was none), PR_ESHEPHERD when it had to be killed:
 * its jobs are then still alive, the caller must kill them. Blocks the
 * engine thread for at most wait_ms. */
int pr_sup_shutdown(pr_sup_t *s, int grace_ms, int wait_ms);

/* pr_sup_destroy: free what pr_sup_init allocated (after the loop ended). */
void pr_sup_destroy(pr_sup_t *s);

/* pr_sup_last_error: a message describing the last failed start of this
 * link's shepherd, or "". Engine thread; the string lives in `s` and is
 * overwritten by the next pr_sup_ensure. */
const char *pr_sup_last_error(const pr_sup_t *s);

#endif
