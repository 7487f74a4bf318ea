/* engine/vault.h — the secrets an execution reads from a store when it is
 * spawned (pr_secret_source_t): their sources as given, the values once
 * read, what they add to the spawn's environment and to the masker, and
 * their wipe. A leaf below the execution: who reads them (the desktop
 * keyring, a command the shepherd runs) is engine/secret_source.c, above it,
 * which exec.c reaches only through its context (pr_exec_ctx_t.source).
 *
 * Thread: pr_vault_new / pr_vault_free where the execution is built / freed
 * (they touch only their arguments); everything else on the ENGINE thread.
 *
 * Values live in locked memory (base/locked.h) and are wiped when the
 * execution ends (pr_vault_wipe from finish) or is freed; the masker gets
 * its own locked copy (secrets.c). Nothing here ever falls back to the
 * environment.
 */
#ifndef PR_VAULT_H
#define PR_VAULT_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "engine/keyring.h"
#include "include/proctor.h"

typedef struct pr_vault pr_vault_t;
struct pr_exec;

/* The read state of an entry (engine/secret_source.c moves it). */
enum { PR_VE_IDLE = 0, PR_VE_READING, PR_VE_DONE };

/* One source. The fields from `state` on belong to engine/secret_source.c
 * (the reads); this file only frees and wipes them. */
typedef struct pr_vault_entry {
  pr_vault_t *v;
  char *name;
  int store;    /* 1: the keyring; 0: a command */
  char **attrs; /* store: key, value, ... (nattrs pairs) */
  size_t nattrs;
  char **argv; /* command: NULL-terminated */
  size_t argc;
  char *payload; /* command: its spawn payload (cwd, argv, environment) */
  size_t plen;
  int state;   /* PR_VE_* */
  char *value; /* locked, NUL-terminated, once read */
  size_t len;
  pr_keyring_t kr; /* store: the lookup (its async handle counts in x->handles) */
  int async_open;
  struct pr_exec *fetch; /* command: the hidden execution while it runs */
} pr_vault_entry_t;

/* The sources of one execution. The fields from `x` on belong to
 * engine/secret_source.c (the reads of x). */
struct pr_vault {
  pr_vault_entry_t *e;
  size_t n;
  struct pr_exec *x;
  int busy; /* entries reading */
  int told, quiet;
  char *why;           /* the first failure */
  uv_timer_t timer;    /* secret_timeout_ms while reads are in flight (data: x) */
  int timer_open;      /* initialised, uv_close not called yet */
  uint32_t timeout_ms; /* the bound it was armed with, for the reason */
};

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

/* pr_vault_wipe: wipe every value read (they are read again if needed).
 * NULL is a no-op. */
void pr_vault_wipe(pr_vault_t *v);

/* pr_vault_ready: every value has been read. */
int pr_vault_ready(const pr_vault_t *v);

/* pr_vault_busy: reads are in flight. */
int pr_vault_busy(const pr_vault_t *v);

/* pr_vault_pending: the name of the first source still being read (for a
 * reason), or NULL. Engine thread. */
const char *pr_vault_pending(const pr_vault_t *v);

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

#endif
