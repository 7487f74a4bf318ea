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

#include <pthread.h>

#include "engine/shepherd_link.h"

typedef struct pr_target {
  struct pr_target *next;
  char *name;
  pr_sup_t sup;        /* its link (sup.link_cmd: the transport of its first use) */
  uint64_t idle_since; /* uv_now (ms) since its link is up with no job; 0: busy or down */
} pr_target_t;

/* The targets the host configured (setup{ targets }): name -> transport and
 * default cwd. The only way an RPC client reaches a target: it names one of
 * these, never a transport of its own. Any thread (locked by mu). */
typedef struct pr_target_conf {
  struct pr_target_conf *next;
  char *name;
  char *transport; /* the command (/bin/sh -c) that reaches its relay */
  char *cwd;       /* default cwd on the far side, or NULL: the far home */
} pr_target_conf_t;

typedef struct {
  pthread_mutex_t mu;
  pr_target_conf_t *list; /* locked by mu */
} pr_target_confs_t;

/* pr_targets_confs_init / _free: an empty table / free it (no other thread may
 * use it any more). */
void pr_targets_confs_init(pr_target_confs_t *t);
void pr_targets_confs_free(pr_target_confs_t *t);

/* pr_targets_configure: set target `name` to `transport` and `cwd` (NULL: the
 * far home), replacing what it had; transport NULL removes it. Executions
 * already made keep the transport they were made with. Any thread. Returns 0,
 * PR_EINVAL (an empty name or transport) or PR_ENOMEM. */
int pr_targets_configure(pr_target_confs_t *t, const char *name, const char *transport,
                         const char *cwd);

/* pr_targets_lookup: copies of the transport and default cwd of configured
 * target `name` (*cwd NULL when it has none; the caller frees both). Any
 * thread. Returns 0, PR_ENOENT (not configured) or PR_ENOMEM. */
int pr_targets_lookup(pr_target_confs_t *t, const char *name, char **transport, char **cwd);

/* pr_targets_link: the link of target `name`, made on first use with
 * `transport` as its command and the local shepherd's binary, loop, ops and arg
 * (`local`, `ops`, `arg`). Returns NULL when out of memory. */
pr_sup_t *pr_targets_link(pr_target_t **list, const pr_sup_t *local, const char *name,
                          const char *transport, const pr_sup_ops_t *ops, void *arg);

/* pr_targets_close_idle: close the link of every target that has held no job
 * for idle_ms as of `now` (uv_now, ms; pr_sup_close_idle: its transport ends,
 * the next execution starts it again). Returns how many links are still up. */
int pr_targets_close_idle(pr_target_t *list, uint64_t now, uint64_t idle_ms);

/* pr_targets_shutdown: tell every connected link to kill its jobs (grace_ms)
 * and wait at most wait_ms each (pr_sup_shutdown). */
void pr_targets_shutdown(pr_target_t *list, int grace_ms, int wait_ms);

/* pr_targets_destroy: free every target (after the loop ended). */
void pr_targets_destroy(pr_target_t **list);

#endif
