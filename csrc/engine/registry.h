/* registry.h — the engine's executions by id, in id order.
 *
 * Thread: engine. The registry alone owns executions; everyone else holds
 * an integer id and may find it gone.
 */
#ifndef PR_REGISTRY_H
#define PR_REGISTRY_H

#include "engine/types.h"

/* pr_registry_init: empty registry. Returns 0 or PR_ENOMEM. */
int pr_registry_init(pr_engine_t *e);

/* pr_registry_add: insert `x` (its id must be new). Returns 0 or PR_ENOMEM. */
int pr_registry_add(pr_engine_t *e, pr_exec_t *x);

/* pr_registry_find: the execution `id` if it exists and `session` may see it
 * (session 0 sees all), else NULL. */
pr_exec_t *pr_registry_find(pr_engine_t *e, uint64_t id, uint64_t session);

/* pr_registry_remove: forget a terminal execution and release it. */
void pr_registry_remove(pr_engine_t *e, pr_exec_t *x);

/* pr_registry_prune: apply history_limit and history_age_ms to terminal
 * records (each removed one leaves the history file too, see
 * pr_registry_remove). With history_age_ms it (re)arms e->prune_timer for
 * the earliest expiry of the records kept, so an idle engine forgets old
 * records on time without another execution finishing. Engine thread, after
 * e->prune_timer was initialised; the timer is not armed while closing. */
void pr_registry_prune(pr_engine_t *e);

/* pr_registry_purge: remove terminal records of `session` (0: all) that ended
 * at least older_than_ms ago. Returns how many. */
size_t pr_registry_purge(pr_engine_t *e, uint64_t session, uint64_t older_than_ms);

/* pr_registry_destroy: free every execution (handles must be closed). */
void pr_registry_destroy(pr_engine_t *e);

#endif
