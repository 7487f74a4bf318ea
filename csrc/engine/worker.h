/* worker.h — supervised workers: long-lived executions that answer requests
 * on stdio (doc *proctor-workers*).
 *
 * Thread: engine, except where a contract says "any thread" or "host".
 *
 *   host eng:request ─► PR_CMD_WREQUEST ─► pr_worker_request ─► unsent ─ready─► stdin
 *   stdout bytes (exec.c got_bytes) ─► pr_worker_on_bytes ─► jsonl lines / msgpack
 *        messages ─► pr_worker_message ─► chunk/reply events (host) or RPC notifications
 *   process end (exec.c finish) ─► pr_worker_on_end: fail in-flight requests,
 *        then restart (park, backoff timer, pr_exec_respawn) or let the execution end
 *
 * The execution stays `running` while its worker process is replaced; the
 * worker's own state (starting, ready, busy, backoff, stopped, fatal) is a
 * separate field with its own events. Payloads, results, chunks and errors
 * cross threads as owned JSON text (the msgpack-rpc protocol is translated in
 * worker_msgpack.c).
 */
#ifndef PR_WORKER_H
#define PR_WORKER_H

#include "engine/types.h"

typedef struct pr_worker pr_worker_t;

/* Longest stdout line (jsonl) or message (msgpack-rpc) parsed; longer ones are
 * skipped and counted (the bytes still reach the console). */
#define PR_WORKER_MSG_MAX (16u << 20)

/* pr_worker_new: worker state for spec `s` (strings are not kept; the stderr
 * pattern is compiled here). Any thread. Returns 0 and *out, PR_EINVAL (bad
 * pattern or enum) or PR_ENOMEM. */
int pr_worker_new(const pr_worker_spec_t *s, pr_worker_t **out);

/* pr_worker_free: free `w` (NULL is fine). Its timers must be closed (they
 * are, once the execution finished). Any thread. */
void pr_worker_free(pr_worker_t *w);

/* ---- hooks called by exec.c ------------------------------------------------- */

/* pr_worker_on_bytes: bytes of stream `stream` of worker `x` arrived (already
 * kept in the ring). Parses stdout; watches stderr for the ready pattern. */
void pr_worker_on_bytes(pr_exec_t *x, int stream, const char *p, size_t n);

/* pr_worker_on_spawned: a (new) worker process of `x` is running. */
void pr_worker_on_spawned(pr_exec_t *x);

/* pr_worker_on_end: the process of worker `x` is gone (exited and drained, or
 * never spawned) and finish() is about to end the execution. Fails the
 * in-flight requests with worker_exited, then either schedules a restart and
 * returns 1 (finish must return at once: the execution stays running), or
 * returns 0 (the execution ends; reason "worker_fatal" when the restart limit
 * was reached). */
int pr_worker_on_end(pr_exec_t *x);

/* pr_worker_snapshot: fill the worker fields of record `r`. */
void pr_worker_snapshot(const pr_exec_t *x, pr_record_t *r);

/* ---- commands (engine.c run_cmd, rpc_methods.c) ------------------------------ */

/* pr_worker_next_rid: a new request id of engine `e`. Any thread. */
uint64_t pr_worker_next_rid(pr_engine_t *e);

/* pr_worker_request: request `rid` for worker `id` as seen by `session`, with
 * payload `json` (JSON text, copied). Always answered later by exactly one
 * reply (to the host for session 0, else to the RPC session), also when
 * refused. timeout_ms 0 = none. */
void pr_worker_request(pr_engine_t *e, uint64_t session, uint64_t id, uint64_t rid,
                       const char *json, size_t len, uint64_t timeout_ms);

/* pr_worker_cancel_request: resolve `rid` as canceled now and send the
 * worker its cancel message. Returns 0 or PR_ENOENT (unknown to `session`, or
 * already answered). */
int pr_worker_cancel_request(pr_engine_t *e, uint64_t session, uint64_t rid);

/* pr_worker_restart: replace the process of worker `id` now (see
 * pr_engine_worker_restart). Returns 0, PR_ENOENT, PR_ENOTWORKER, PR_ENOTRUNNING. */
int pr_worker_restart(pr_engine_t *e, uint64_t session, uint64_t id);

/* pr_worker_session_closed: RPC session `session` is gone: its requests are
 * dropped without replies (the workers get cancel messages). */
void pr_worker_session_closed(pr_engine_t *e, uint64_t session);

/* pr_worker_chan_done: the host consumed (freed) a chunk event holding `chan`.
 * Host thread (pr_event_free). */
void pr_worker_chan_done(void *chan);

/* ---- between worker.c and the protocol parsers --------------------------------- */

typedef enum {
  PR_WM_READY = 0, /* a readiness message */
  PR_WM_CHUNK,     /* partial result of rid: text = JSON */
  PR_WM_OK,        /* final result of rid: text = JSON */
  PR_WM_ERROR,     /* final error of rid: text = message */
  PR_WM_STRAY,     /* a well-formed message that is not part of the protocol */
  PR_WM_INVALID,   /* not parseable */
  PR_WM_OVERSIZE,  /* longer than PR_WORKER_MSG_MAX */
} pr_worker_msg_t;

/* pr_worker_message: one message parsed from the stdout of worker `x`. Takes
 * ownership of `text` (malloc'd, may be NULL). */
void pr_worker_message(pr_exec_t *x, pr_worker_msg_t kind, uint64_t rid, char *text, size_t len);

/* worker_msgpack.c: the msgpack-rpc protocol (opaque unpacker state). */
void *pr_wmp_new(void);
void pr_wmp_free(void *u);
void pr_wmp_feed(pr_exec_t *x, void *u, const char *p, size_t n);
/* Encoded request / cancel notification for request `rid`, malloc'd, or NULL
 * (*err: PR_EINVAL for a payload that is not JSON, PR_ENOMEM). */
char *pr_wmp_request(uint64_t rid, const char *json, size_t len, size_t *n, int *err);
char *pr_wmp_cancel(uint64_t rid, size_t *n);

#endif
