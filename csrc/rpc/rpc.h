/* rpc.h — the msgpack-rpc control socket, as the rest of the engine sees it.
 *
 * Thread: engine. pr_rpc_start may also run on the host thread inside
 * pr_engine_new, before the engine thread exists (the loop is not running).
 *
 *   client ──unix socket──► rpc_server.c  accept, SO_PEERCRED, sessions
 *                            rpc_conn.c   framing, one unpacker, bounded send queue,
 *                                         subscriptions and waits (the pump)
 *                            rpc_methods.c method table → pr_engine_run_cmd
 *   exec.c ──pr_rpc_on_output / pr_rpc_on_state──► subscriptions (mark + kick only)
 *
 * Nothing here includes msgpack.h; only the rpc_*.c files and rpc_conn.h do.
 * Limits (documented in doc/rpc.txt-part) live in rpc_conn.h.
 */
#ifndef PR_RPC_H
#define PR_RPC_H

#include "engine/types.h"

typedef struct pr_rpc pr_rpc_t;
typedef struct pr_rpc_conn pr_rpc_conn_t;

/* pr_rpc_start: create e->rpc and, when `path` is not NULL, listen on that
 * Unix socket: its directory is created 0700 when missing and refused when
 * it is not a directory we own without group/other bits; a stale socket file
 * is replaced, a live one is EADDRINUSE; the socket gets mode 0600.
 * Call on the thread that runs e->loop, or before that loop runs.
 * Returns 0, or a negative UV_E* / PR_E* code with e->rpc left NULL (handles
 * already closing: the caller must still run the loop to let them close). */
int pr_rpc_start(pr_engine_t *e, const char *path);

/* pr_rpc_close: stop listening, remove the socket file, close every
 * connection (kill_on_disconnect executions are canceled) and set e->rpc to
 * NULL; memory goes in the last close callback. Engine thread. Idempotent
 * through e->rpc. */
void pr_rpc_close(pr_engine_t *e);

/* pr_rpc_on_output: bytes were appended to stream `stream` of `x` (exec.c,
 * on_read). Marks that execution's subscription and schedules the pump.
 * Never sends anything itself. Engine thread, only when e->rpc. */
void pr_rpc_on_output(pr_engine_t *e, pr_exec_t *x, int stream);

/* pr_rpc_on_state: `x` moved from `prev` to x->state (exec.c, transition).
 * Queues a state notification for its subscriber and, when terminal, readies
 * the answers of `wait` requests. Engine thread, only when e->rpc. */
void pr_rpc_on_state(pr_engine_t *e, pr_exec_t *x, pr_state_t prev);

/* pr_rpc_on_worker_chunk / pr_rpc_on_worker_reply: a chunk of, or the answer
 * to, worker request `rid` made by RPC session `session` (worker.c). Queued
 * as a worker_chunk / worker_reply notification to that session (dropped
 * when it is gone). `text`: JSON text (chunk, ok result) or the error message;
 * borrowed. Engine thread, only when e->rpc (rpc_methods.c). */
void pr_rpc_on_worker_chunk(pr_engine_t *e, uint64_t session, uint64_t id, uint64_t rid,
                            const char *text, size_t len);
void pr_rpc_on_worker_reply(pr_engine_t *e, uint64_t session, uint64_t id, uint64_t rid,
                            int status, const char *text, size_t len);

/* ---- connections without a socket (fuzz harness, tests) ---------------- */

/* pr_rpc_virtual_open: a session fed by pr_rpc_virtual_feed whose outgoing
 * bytes go to sink(arg, bytes, n) synchronously. Needs e->rpc (create it
 * with pr_rpc_start(e, NULL)). Engine thread. NULL when out of memory. */
pr_rpc_conn_t *pr_rpc_virtual_open(pr_engine_t *e, void (*sink)(void *arg, const char *p, size_t n),
                                   void *arg);

/* pr_rpc_virtual_feed: hand `len` bytes to the connection as if read from
 * its socket, then run its pump until it has nothing more to do now.
 * Returns 1 while the connection is open, 0 once the server closed it (the
 * caller must still call pr_rpc_virtual_close). Engine thread. */
int pr_rpc_virtual_feed(pr_rpc_conn_t *c, const char *data, size_t len);

/* pr_rpc_virtual_close: end the session like a disconnect and free it.
 * Engine thread. */
void pr_rpc_virtual_close(pr_rpc_conn_t *c);

#endif
