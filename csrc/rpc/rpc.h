/* rpc/rpc.h — the msgpack-rpc control socket, as its owner (csrc/proctor.c)
 * sees it.
 *
 * Thread: engine. pr_rpc_start may also run on the host thread inside
 * pr_engine_new, before the engine thread exists (the loop is not running).
 *
 *   client ──unix socket──► server.c   accept, SO_PEERCRED, sessions, the listener
 *                           conn.c     reading, the pump, the bounded send queue,
 *                                      subscriptions and waits
 *                           methods.c  the method table ─► pr_control_run (the host's path)
 *                           params.c   parameter and start-spec validation
 *                           pack.c     records and notifications (msgpack)
 *   engine listeners (engine/events.h) ─► state / output / worker replies ─► subscriptions
 *
 * The server is one listener of the engine: the engine never names it.
 * Only the rpc files (and base/mpack.h) include msgpack.h. Limits are in
 * rpc/conn.h and documented in doc/proctor.txt (*proctor-rpc-limits*).
 */
#ifndef PR_RPC_H
#define PR_RPC_H

#include <stddef.h>

#include "engine/control.h"
#include "engine/events.h"

typedef struct pr_rpc pr_rpc_t;
typedef struct pr_rpc_conn pr_rpc_conn_t;

/* pr_rpc_start: create a server over the engine's control `ctl` and, when
 * `path` is not NULL, listen on that Unix socket: its directory is created
 * 0700 when missing and refused when it is not a directory we own without
 * group/other bits; a stale socket file is replaced, a live one is
 * EADDRINUSE; the socket gets mode 0600. RPC starts inherit `env` (a
 * NULL-terminated "K=V" list that outlives the server). Call on the thread
 * that runs the loop, or before that loop runs. Returns 0 and *out, or a
 * negative UV_E* / PR_E* code with *out NULL (handles already closing: the
 * caller must still run the loop to let them close). */
int pr_rpc_start(pr_control_t *ctl, char *const *env, const char *path, pr_rpc_t **out);

/* pr_rpc_listener: the server's listener, to add to the engine's list. */
pr_listener_t *pr_rpc_listener(pr_rpc_t *srv);

/* pr_rpc_close: stop listening, remove the socket file, close every
 * connection (kill_on_disconnect executions are canceled); memory goes in
 * the last close callback. Remove its listener first. Engine thread. */
void pr_rpc_close(pr_rpc_t *srv);

/* ---- connections without a socket (fuzz harness, tests) ---------------- */

/* pr_rpc_virtual_open: a session fed by pr_rpc_virtual_feed whose outgoing
 * bytes go to sink(arg, bytes, n) synchronously. Engine thread. NULL when out
 * of memory. */
pr_rpc_conn_t *pr_rpc_virtual_open(pr_rpc_t *srv, void (*sink)(void *arg, const char *p, size_t n),
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
