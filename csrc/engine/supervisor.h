/* supervisor.h — the engine's side of the shepherd connection.
 *
 * Thread: engine (pr_sup_init/pr_sup_destroy also from the host thread
 * before the engine thread starts / after it ended).
 */
#ifndef PR_SUPERVISOR_H
#define PR_SUPERVISOR_H

#include "engine/types.h"

/* pr_sup_init: resolve the shepherd binary (opts path, $PROCTOR_SHEPHERD, or
 * `proctor-shepherd` next to the shared object) and reset the connection.
 * Returns 0 or PR_ENOMEM. Does not start the shepherd. */
int pr_sup_init(pr_engine_t *e);

/* pr_sup_ensure: start a shepherd if none is connected. Returns 0 or
 * PR_ESHEPHERD (with errno-style detail lost; see pr_sup_last_error). */
int pr_sup_ensure(pr_engine_t *e);

/* pr_sup_send: send (or queue, if the socket is full) one request. Payloads
 * larger than one packet are split. Returns 0, PR_ESHEPHERD (no shepherd), or
 * PR_ENOMEM. */
int pr_sup_send(pr_engine_t *e, uint32_t type, uint32_t flags, uint64_t job, int64_t a,
                int64_t b, const char *payload, size_t len);

/* pr_sup_alive: 1 when a shepherd is connected. */
int pr_sup_alive(const pr_engine_t *e);

/* pr_sup_shutdown: tell the shepherd to kill everything and exit (grace_ms
 * for SIGTERM'd jobs), then drop the connection. */
void pr_sup_shutdown(pr_engine_t *e, int grace_ms);

/* pr_sup_destroy: free what pr_sup_init allocated (after the loop ended). */
void pr_sup_destroy(pr_engine_t *e);

/* pr_sup_last_error: a message describing the last failed start of this
 * engine's shepherd, or "". Engine thread; the string lives in `e` and is
 * overwritten by the next pr_sup_ensure. */
const char *pr_sup_last_error(const pr_engine_t *e);

#endif
