/* engine/targets.h — the links to an engine's targets (|proctor-targets|).
 *
 * Thread: engine (pr_targets_destroy also on the host thread once the engine
 * thread ended).
 *
 * A target is a name and a transport, a command run by /bin/sh -c that starts
 * `proctor-shepherd --relay` on the far side (ssh, podman exec, kubectl exec).
 * Each target has one link, a pr_sup_t whose process is `proctor-shepherd
 * --link CMD` (shepherd/link.c) instead of a local shepherd: every execution of
 * the target goes through it, so a spawn is a frame, not a new ssh handshake.
 * It is made on the first execution that names the target and started by that
 * execution's spawn (pr_sup_ensure); a link that died is started again by the
 * next one.
 */
#ifndef PR_TARGETS_H
#define PR_TARGETS_H

#include "engine/shepherd_link.h"

typedef struct pr_target {
  struct pr_target *next;
  char *name;
  pr_sup_t sup; /* its link (sup.link_cmd: the transport of its first use) */
} pr_target_t;

/* pr_targets_link: the link of target `name`, made on first use with
 * `transport` as its command and the local shepherd's binary, loop, ops and arg
 * (`local`, `ops`, `arg`). Returns NULL when out of memory. */
pr_sup_t *pr_targets_link(pr_target_t **list, const pr_sup_t *local, const char *name,
                          const char *transport, const pr_sup_ops_t *ops, void *arg);

/* pr_targets_shutdown: tell every connected link to kill its jobs (grace_ms)
 * and wait at most wait_ms each (pr_sup_shutdown). */
void pr_targets_shutdown(pr_target_t *list, int grace_ms, int wait_ms);

/* pr_targets_destroy: free every target (after the loop ended). */
void pr_targets_destroy(pr_target_t **list);

#endif
