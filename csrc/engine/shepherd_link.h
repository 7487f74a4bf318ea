/* engine/shepherd_link.h — the engine's side of the shepherd link.
 *
 * Thread: engine (pr_sup_init/pr_sup_destroy also from the host thread
 * before the engine thread starts / after it ended).
 *
 * The link knows nothing of executions: what the shepherd reports (spawned,
 * failed, exited, the link lost) goes to the pr_sup_ops_t callbacks its
 * owner gave (engine/control.c, which finds the execution by job id).
 */
#ifndef PR_SHEPHERD_LINK_H
#define PR_SHEPHERD_LINK_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/liveness.h"
#include "base/queue.h"
#include "base/wire.h"

struct pr_sup;

/* What the shepherd reports. Engine thread, from the link's poll callback. */
typedef struct {
  void (*spawned)(void *arg, const pr_wire_hdr_t *h, int *fds, int nfds); /* takes the fds */
  void (*failed)(void *arg, const pr_wire_hdr_t *h);
  void (*exited)(void *arg, const pr_wire_hdr_t *h);
  void (*empty)(void *arg, const pr_wire_hdr_t *h); /* the job's last process is gone */
  /* the shepherd (or a target's link) `s` died: every job it held lost its parent */
  void (*lost)(void *arg, struct pr_sup *s);
} pr_sup_ops_t;

/* Liveness (systemd's WatchdogSec=): while the shepherd holds jobs for us or
 * packets wait to be sent, the link sends a PING when nothing came from the
 * shepherd for PR_SUP_PING_MS. When nothing at all comes (no PONG, no
 * report, no heartbeat while it works through a long batch, and its full
 * socket takes nothing) for PR_SUP_ANSWER_MS after that PING, the kernel is
 * asked what the shepherd does (its state and CPU time, as `ps` shows them):
 *   stopped (SIGSTOP, traced), gone, or asleep without having used any CPU
 *     since the last look: lost. It is SIGKILLed and handled as a dead one
 *     (lost(), the sweep, a new shepherd on the next start);
 *   running, waiting for a CPU or in the kernel, or having used CPU since the
 *     last look: alive and working (a loaded machine, a large request): a
 *     new PING, and the same question after PR_SUP_ANSWER_MS more;
 *   having used PR_SUP_ANSWER_MS of CPU since the first PING of this silence
 *     without a word: hung in a loop, lost.
 * Idle (no job), nothing is sent and no timer runs. */
#define PR_SUP_PING_MS 1000
#define PR_SUP_ANSWER_MS 2000
#define PR_SUP_TICK_MS 250
/* Past this many bytes of queued packets (the shepherd's socket is full), a
 * spawn is refused with PR_EBUSY while the shepherd is stopped (its state in
 * /proc: the liveness check kills it within PR_SUP_PING_MS + PR_SUP_ANSWER_MS):
 * at most this plus one request (PR_MAX_SPAWN_BYTES) then wait. A shepherd
 * that works, however far behind a burst of thousands of starts, is never refused. Other packets (signals, releases,
 * pings) are small and always queued. */
#define PR_SUP_SENDQ_MAX ((size_t)4 << 20)

typedef struct pr_sup {
  uv_loop_t *loop;
  const pr_sup_ops_t *ops;
  void *arg;
  int fd;                   /* -1 when no shepherd */
  struct pr_sup_conn *conn; /* the poll handle on fd and the liveness timer (freed in
                             * their last close callback) */
  pr_queue_t sendq;         /* packets that could not be sent yet */
  size_t queued;      /* bytes (headers and payloads) in sendq; spawns stop at PR_SUP_SENDQ_MAX */
  size_t jobs;        /* jobs the shepherd holds for us: SPAWNs sent, less FAILEDs and RELEASEs */
  uint64_t last_rx;   /* uv_now (ms) of the last sign of life: a packet from the shepherd,
                      * or a queued packet its full socket took */
  uint64_t ping_at;   /* uv_now (ms) when the unanswered PING was sent; 0 when none */
  int64_t ping_token; /* the token of the last PING */
  int64_t shep_pid;   /* the shepherd's pid, from its PONGs (0 until the first) */
  pr_liveness_t live; /* its CPU time at the first PING of this silence and at the last look */
  char *path;         /* binary */
  char *recvbuf;      /* PR_WIRE_MAX_PAYLOAD bytes */
  unsigned long peer_ino; /* inode of the shepherd's end of the socket (its fd 3), to find it */
  char last_error[256];   /* why the last shepherd start failed ("" after a success); per
                         * engine: each engine starts its shepherd on its own thread */
  char tag[40];   /* the running shepherd's job tag: its jobs carry PROCTOR_JOB=<tag>:<id> */
  char stale[40]; /* the tag of a shepherd that died, until its leftovers are swept ("" none) */
  /* A target's link (proctor-shepherd --link CMD, shepherd/link.c) instead of a local
   * shepherd: NULL for the local one. Set by the owner after pr_sup_init. */
  char *link_cmd;
  const char *lost_reason; /* the reason of the executions it loses: "supervisor_lost" (init),
                            * "target_lost" for a link */
  char lost_msg[1280];     /* a link's LOST: how its transport ended ("" none) */
} pr_sup_t;

/* pr_sup_init: resolve the shepherd binary (`path`, $PROCTOR_SHEPHERD, or
 * `proctor-shepherd` next to the shared object) and reset the link. Returns
 * 0 or PR_ENOMEM. Does not start the shepherd. */
int pr_sup_init(pr_sup_t *s, uv_loop_t *loop, const char *path, const pr_sup_ops_t *ops, void *arg);

/* pr_sup_ensure: start a shepherd if none is connected. Returns 0 or
 * PR_ESHEPHERD (with errno-style detail lost; see pr_sup_last_error). */
int pr_sup_ensure(pr_sup_t *s);

/* pr_sup_send: send (or queue, if the socket is full) one request. Payloads
 * larger than one packet are split. A shepherd that exited but whose EOF is
 * not read yet takes it too (0): the loss, with what it said last (a link's
 * LOST), ends its executions once the poll reads that EOF, never a refused
 * send before it. Returns 0, PR_ESHEPHERD (no shepherd),
 * PR_ENOMEM, or PR_EBUSY for a SPAWN while PR_SUP_SENDQ_MAX bytes or more
 * wait for a stopped shepherd (pr_sup_last_error says so). A SPAWN starts
 * the liveness check. */
int pr_sup_send(pr_sup_t *s, uint32_t type, uint32_t flags, uint64_t job, int64_t a, int64_t b,
                const char *payload, size_t len);

/* pr_sup_alive: 1 when a shepherd is connected. */
int pr_sup_alive(const pr_sup_t *s);

/* pr_sup_sweep: after a shepherd died (the OOM killer, kill -9, the liveness
 * check), kill what its jobs left behind that its reapers could not: every
 * process of our uid whose environment carries that shepherd's tag
 * (PROCTOR_JOB=<tag>:), a random token no other engine's jobs carry; and
 * continue (SIGCONT) its reapers (forks of it: their command line carries
 * the tag), so a reaper its job stopped acts on the shepherd's death (it
 * kills the rest of its job and exits). Done when the loss is seen, again
 * before the next shepherd starts and when the engine closes; a no-op when
 * no shepherd died. Returns how many processes it killed. */
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

/* pr_sup_close_idle: drop the connection of a link that holds no job and has
 * nothing queued, without a loss (no lost() call, no sweep): the link sees
 * EOF and ends its transport, whose relay has nothing to kill. The next
 * pr_sup_ensure starts a new one. Returns 0, or PR_EBUSY (jobs or packets). */
int pr_sup_close_idle(pr_sup_t *s);

/* pr_sup_destroy: free what pr_sup_init allocated (after the loop ended). */
void pr_sup_destroy(pr_sup_t *s);

/* pr_sup_last_error: a message describing the last failed start of this
 * link's shepherd or the last refused spawn (PR_EBUSY), or "". Engine thread;
 * the string lives in `s` and is overwritten by the next pr_sup_ensure that
 * starts a shepherd or the next SPAWN sent. */
const char *pr_sup_last_error(const pr_sup_t *s);

#endif
