/* engine/worker.h — supervised workers: long-lived executions that answer
 * requests on stdio (doc/proctor.txt, *proctor-workers*), and the two
 * protocols they speak.
 *
 * Thread: engine, except where a contract says "any thread".
 *
 *   host eng:request / RPC worker_request ─► PR_CMD_WREQUEST ─► pr_worker_request
 *        ─► unsent ─ready─► the worker's stdin (pr_exec_input)
 *   stdout bytes (ops->bytes) ─► worker_jsonl.c lines / worker_msgpack.c messages
 *        ─► callback ─► request table ─► pr_notify_chunk / pr_notify_reply (listeners:
 *        the host queue takes session 0's, the RPC server the others')
 *   process end (ops->end, from finish()) ─► fail in-flight requests, then restart
 *        (park, backoff timer, pr_exec_respawn) or let the execution end
 *
 * A worker plugs into its execution through an ops table (x->ops, x->sub):
 * exec.c never names it. The execution stays `running` while its worker
 * process is replaced; the worker's own state (starting, ready, busy,
 * backoff, stopped, fatal) is a separate field with its own events. Payloads,
 * results, chunks and errors cross threads as owned JSON text.
 */
#ifndef PR_WORKER_H
#define PR_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "engine/exec.h"

typedef struct pr_worker pr_worker_t;

/* Longest stdout line (jsonl) or message (msgpack-rpc) parsed; longer ones are
 * skipped and counted (the bytes still reach the console). A msgpack-rpc
 * message may also declare at most 2^20 entries, nested 64 deep. */
#define PR_WORKER_MSG_MAX (16u << 20)

/* pr_worker_new: make x a worker for spec `s` (x->ops, x->sub; strings are
 * not kept; the stderr pattern is compiled here). Any thread, while x is
 * built. Returns 0, PR_EINVAL (bad pattern or enum) or PR_ENOMEM. */
int pr_worker_new(const pr_worker_spec_t *s, pr_exec_t *x);

/* pr_worker_of: x's worker, or NULL when x is not a worker. */
pr_worker_t *pr_worker_of(const pr_exec_t *x);

/* pr_worker_request: request `rid` for worker `id` (x: the execution found
 * for it, or NULL) as seen by `session`, with payload `json` (JSON text,
 * copied). Always answered later by exactly one reply to the listeners, also
 * when refused. timeout_ms 0 = none. */
void pr_worker_request(pr_exec_ctx_t *c, pr_exec_t *x, uint64_t session, uint64_t id, uint64_t rid,
                       const char *json, size_t len, uint64_t timeout_ms);

/* pr_worker_holds: x is a live worker with request `rid` pending. */
int pr_worker_holds(const pr_exec_t *x, uint64_t rid);

/* pr_worker_cancel_request: resolve `rid` (held by x) as canceled now and
 * send the worker its cancel message. Returns 0 or PR_ENOENT (not held, or not
 * `session`'s when session > 0). */
int pr_worker_cancel_request(pr_exec_t *x, uint64_t session, uint64_t rid);

/* pr_worker_restart: replace the process of worker x now (see
 * pr_engine_worker_restart). Returns 0, PR_ENOTWORKER, PR_ENOTRUNNING. */
int pr_worker_restart(pr_exec_t *x);

/* pr_worker_session_closed: RPC session `session` is gone: its requests to x
 * are dropped without replies (the worker gets cancel messages). */
void pr_worker_session_closed(pr_exec_t *x, uint64_t session);

/* ---- the protocols (worker_jsonl.c, worker_msgpack.c) ---------------------------- */

typedef enum {
  PR_WM_READY = 0, /* a readiness message */
  PR_WM_CHUNK,     /* partial result of rid: text = JSON */
  PR_WM_OK,        /* final result of rid: text = JSON */
  PR_WM_ERROR,     /* final error of rid: text = message */
  PR_WM_STRAY,     /* a well-formed message that is not part of the protocol */
  PR_WM_INVALID,   /* not parseable */
  PR_WM_OVERSIZE,  /* longer than PR_WORKER_MSG_MAX */
} pr_worker_msg_t;

/* How a parser reports what it parsed, and answers the worker itself. A
 * parser reads the worker's stdout as written (unmasked: masking protocol
 * bytes would break their framing) and masks what it decodes. */
struct cJSON;
typedef struct {
  /* one message; takes `text` (malloc'd, may be NULL), already masked */
  void (*message)(void *arg, pr_worker_msg_t kind, uint64_t rid, char *text, size_t len);
  /* bytes for the worker's stdin */
  void (*write)(void *arg, const char *p, size_t n);
  /* mask the secret values in a decoded value, in place (NULL: none) */
  void (*mask)(void *arg, struct cJSON *j);
  void *arg;
} pr_wparse_cb_t;

/* JSON lines: {"id","type","payload"} out, {"id","status","result"|"chunk"|"error"} in. */
typedef struct {
  pr_buf_t line; /* the incomplete stdout line */
  int skipping;  /* inside an oversize line */
  pr_wparse_cb_t cb;
} pr_jsonl_t;

void pr_jsonl_init(pr_jsonl_t *p, const pr_wparse_cb_t *cb);
void pr_jsonl_reset(pr_jsonl_t *p); /* a new process: forget the partial line */
void pr_jsonl_free(pr_jsonl_t *p);
void pr_jsonl_feed(pr_jsonl_t *p, const char *data, size_t n);
/* Encoded request / cancel for request `rid`, malloc'd (NULL: out of memory). */
char *pr_jsonl_request(uint64_t rid, const char *json, size_t len, size_t *n);
char *pr_jsonl_cancel(uint64_t rid, size_t *n);

/* msgpack-rpc (the protocol of `nvim --embed`). */
typedef struct pr_wmp pr_wmp_t;

pr_wmp_t *pr_wmp_new(const pr_wparse_cb_t *cb); /* NULL: out of memory */
void pr_wmp_free(pr_wmp_t *u);
void pr_wmp_feed(pr_wmp_t *u, const char *p, size_t n);
/* Encoded request / cancel notification for request `rid`, malloc'd, or NULL
 * (*err: PR_EINVAL for a payload that is not JSON, PR_ENOMEM). */
char *pr_wmp_request(uint64_t rid, const char *json, size_t len, size_t *n, int *err);
char *pr_wmp_cancel(uint64_t rid, size_t *n);

#endif
