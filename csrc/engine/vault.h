/* engine/vault.h — secrets read from a store when an execution is spawned
 * (pr_secret_source_t): the desktop keyring (engine/keyring.c) or a command
 * the shepherd runs.
 *
 * Thread: pr_vault_new / pr_vault_free where the execution is built / freed
 * (they touch only their arguments); everything else on the ENGINE thread.
 *
 *   pr_exec_begin (starting) ─► pr_vault_read(x): every source at once
 *        store:   a keyring lookup thread ─► uv_async ─► the value
 *        command: a hidden execution (job id with PR_VAULT_JOB set, never in
 *                 the registry, no listeners) ─► its end: its stdout is the value
 *   ─► all read, one failed, or stopped ─► pr_exec_vault_done(x, why) (exec.c)
 *
 * Bounds: the reads of one execution share one timer (secret_timeout_ms,
 * PR_DEFAULT_SECRET_TIMEOUT): when it fires, the first source still being
 * read is named in the reason and every read is stopped (a command's whole
 * job is killed). The execution's own timeout_ms covers them too (exec.c).
 *
 * Values live in locked memory (base/locked.h) and are wiped when the
 * execution ends (pr_vault_stop from finish) or is freed; the masker gets
 * its own locked copy (secrets.c). Nothing here ever falls back to the
 * environment.
 */
#ifndef PR_VAULT_H
#define PR_VAULT_H

#include <stddef.h>
#include <stdint.h>

#include "base/idmap.h"
#include "engine/exec.h"

typedef struct pr_vault pr_vault_t;

/* Shepherd job ids of command reads: never an execution's id. */
#define PR_VAULT_JOB ((uint64_t)1 << 62)

/* Per engine: where command reads run (engine/control.h embeds it). */
typedef struct pr_vault_eng {
  pr_exec_ctx_t xc; /* of the hidden executions: no listeners; ended: the vault */
  pr_listeners_t none;
  pr_idmap_t jobs; /* job id -> hidden execution */
  uint64_t next;
  uint32_t timeout_ms; /* secret_timeout_ms: bound of the reads of one execution */
} pr_vault_eng_t;

/* A secret source's bound when the engine's options give none (ms). */
#define PR_DEFAULT_SECRET_TIMEOUT 10000

/* pr_vault_eng_init: command reads on the loop and shepherd link of `main`;
 * the reads of one execution end within timeout_ms (0: the default,
 * PR_DEFAULT_SECRET_TIMEOUT). Engine thread's loop, before it runs.
 * pr_vault_eng_destroy: free the map (after the loop ended). */
void pr_vault_eng_init(pr_vault_eng_t *e, const pr_exec_ctx_t *main, uint32_t timeout_ms);
void pr_vault_eng_destroy(pr_vault_eng_t *e);

/* pr_vault_job: the hidden execution of shepherd job `job`, or NULL. */
pr_exec_t *pr_vault_job(pr_vault_eng_t *e, uint64_t job);

/* pr_vault_check: the sources of s are well formed (names, one kind each,
 * attributes "k=v", a command). 0 or PR_EINVAL. Any thread. */
int pr_vault_check(const pr_spec_t *s);

/* pr_vault_new: copy the sources of s (*out NULL when there are none); a
 * command runs in `cwd` with the environment `env` (NULL-terminated "K=V").
 * Returns 0 or PR_ENOMEM. Any thread. */
int pr_vault_new(const pr_spec_t *s, const char *cwd, char *const *env, pr_vault_t **out);

/* pr_vault_free: wipe the values and free (no read may be in flight: an
 * execution's handles are all closed when it is freed). NULL is a no-op. */
void pr_vault_free(pr_vault_t *v);

/* pr_vault_ready: every value has been read. */
int pr_vault_ready(const pr_vault_t *v);

/* pr_vault_busy: reads are in flight. */
int pr_vault_busy(const pr_vault_t *v);

/* pr_vault_pending: the name of the first source still being read (for a
 * reason), or NULL. Engine thread. */
const char *pr_vault_pending(const pr_vault_t *v);

/* pr_vault_read: read every value of x->vault now (x is starting), within
 * the engine's secret_timeout_ms (a timer whose handle counts in
 * x->handles); the end is told once through pr_exec_vault_done, perhaps
 * before this returns. */
void pr_vault_read(pr_exec_t *x, pr_vault_eng_t *e);

/* pr_vault_stop: stop the reads of x. quiet = 0 (a cancel): the reads end
 * soon and pr_exec_vault_done follows; quiet = 1 (x ends now): they end at
 * once, nothing is told, and every value is wiped. */
void pr_vault_stop(pr_exec_t *x, int quiet);

/* pr_vault_env: the "NAME=value\0" entries of the values read: their bytes
 * (pr_vault_env_len), written to out. */
size_t pr_vault_env_len(const pr_vault_t *v);
void pr_vault_env(const pr_vault_t *v, char *out);

/* pr_vault_mask: give the masker *m (created if NULL) a locked copy of
 * every value read. 0 or PR_ENOMEM. */
struct pr_secrets;
int pr_vault_mask(const pr_vault_t *v, struct pr_secrets **m);

/* pr_vault_keys: the names, each NUL-terminated, appended to the malloc'd
 * list *keys of *klen bytes (an execution's env_keys). 0 or PR_ENOMEM. */
int pr_vault_keys(const pr_vault_t *v, char **keys, size_t *klen);

/* pr_vault_names: 1 when `name` (klen bytes) is one of s's sources. */
int pr_vault_names(const pr_spec_t *s, const char *name, size_t klen);

/* pr_exec_vault_done (exec.c): the reads of x ended; why = NULL when every
 * value was read, else "secret NAME: ..." (never a value). */
void pr_exec_vault_done(pr_exec_t *x, const char *why);

#endif
