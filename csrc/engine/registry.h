/* engine/registry.h — the engine's executions by id, in id order, and their
 * retention (history_limit, history_age_ms).
 *
 * Thread: engine (init before the engine thread starts, on the thread that
 * will run its loop; destroy after the loop ended, on the engine thread).
 *
 * The registry alone owns executions; everyone else holds an integer id and
 * may find it gone. Removing one tells the listeners (removed) and releases
 * it: its memory goes once its last handle closed.
 */
#ifndef PR_REGISTRY_H
#define PR_REGISTRY_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "base/idmap.h"
#include "base/queue.h"
#include "engine/exec.h"

typedef struct pr_registry {
  pr_idmap_t byid;        /* id -> execution */
  pr_queue_t order;       /* every execution, id order (pr_exec_t.order) */
  size_t count;           /* executions registered */
  size_t nterminal;       /* of which terminal (x->finished) */
  uint32_t limit;         /* terminal records kept; 0 = no limit */
  uint64_t age_ms;        /* terminal records older than this are removed; 0 = never */
  uv_timer_t prune_timer; /* history_age_ms: fires at the oldest terminal record's expiry */
  uint64_t ended_max;     /* bytes the rings of ended executions keep together (ended_output_max) */
  uint64_t ended_bytes;   /* bytes they keep now: the sum of x->kept */
  uint64_t trimmed;       /* rings cut to their tail by the budget (tests, figures) */
  pr_exec_ctx_t *xc;      /* the loop, the listeners, `closing` */
} pr_registry_t;

/* pr_registry_init: empty registry. Returns 0 or a UV_E* code. */
int pr_registry_init(pr_registry_t *r, pr_exec_ctx_t *xc, uint32_t limit, uint64_t age_ms);

/* pr_registry_add: insert `x` (its id must be new), keeping id order. Returns
 * 0, or PR_ENOMEM: x is in the list but cannot be found by id (the caller
 * ends it). */
int pr_registry_add(pr_registry_t *r, pr_exec_t *x);

/* pr_registry_find: the execution `id` if it exists and `session` may see it
 * (session 0 sees all), else NULL. */
pr_exec_t *pr_registry_find(const pr_registry_t *r, uint64_t id, uint64_t session);

/* pr_registry_remove: forget a terminal execution, tell the listeners, and
 * release it. */
void pr_registry_remove(pr_registry_t *r, pr_exec_t *x);

/* pr_registry_prune: apply `limit` and `age_ms` to terminal records, and the
 * ended-output budget to their rings (oldest first, each cut to PR_ENDED_TAIL). With
 * age_ms it (re)arms the prune timer for the earliest expiry of the records
 * kept, so an idle engine forgets old records on time without another
 * execution finishing. The timer is not armed while closing. */
void pr_registry_prune(pr_registry_t *r);

/* PR_ENDED_TAIL: what the ended-output budget leaves of a ring it trims (the
 * history file keeps as much by default): the newest bytes, where the error is. */
#define PR_ENDED_TAIL (64u << 10)

/* pr_registry_ended: `x` just ended: count what its rings keep against
 * ended_max (pr_registry_prune trims the oldest to PR_ENDED_TAIL while the
 * total is over it). */
void pr_registry_ended(pr_registry_t *r, pr_exec_t *x);

/* pr_registry_purge: remove terminal records of `session` (0: all) that ended
 * at least older_than_ms ago. Returns how many. */
size_t pr_registry_purge(pr_registry_t *r, uint64_t session, uint64_t older_than_ms);

/* pr_registry_close: close the prune timer (engine thread, shutting down). */
void pr_registry_close(pr_registry_t *r);

/* pr_registry_destroy: free every execution (their handles must be closed). */
void pr_registry_destroy(pr_registry_t *r);

#endif
