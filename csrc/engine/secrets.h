/* engine/secrets.h — what a child's environment holds, and hiding secret values.
 *
 * Thread: pr_secrets_check, pr_env_inherits, pr_env_keys and pr_secrets_new
 * run where an execution is built (the host thread, or the engine thread for
 * RPC starts; they touch only their arguments). pr_secrets_mask runs on the
 * ENGINE thread, once per read, from stream.c got_bytes. pr_secrets_scrub is
 * pure and may run anywhere.
 *
 *   read ─► got_bytes ─► pr_secrets_mask ─► (ring, events, RPC, history)
 *            held: the longest tail that may still become a secret
 *            (less than 6 × the longest secret per stream); released by the
 *            next read or at stream end (pr_stream_close calls with p = NULL)
 *
 * Environment of a child, in order (later wins): the base environment
 * (host's, or none with clear_env, only the env_allow keys when given, never
 * a key named by `secrets`), then `env`, then `secrets`, then PROCTOR_*.
 */
#ifndef PR_SECRETS_H
#define PR_SECRETS_H

#include <stddef.h>

#include "include/proctor.h"

typedef struct pr_secrets pr_secrets_t;

/* Longest secret value accepted, in bytes. */
#define PR_SECRET_MAX 4096

/* pr_secrets_check: validate s->secrets ("K=V", non-empty K and V, V at most
 * PR_SECRET_MAX bytes, K not also in s->env) and s->env_allow (non-empty names
 * without '='). Returns 0 or PR_EINVAL. Never copies or prints a value. */
int pr_secrets_check(const pr_spec_t *s);

/* pr_env_inherits: 1 if the base-environment entry `kv` whose key is its first
 * `klen` bytes is passed to the child under s->env_allow and s->secrets. */
int pr_env_inherits(const pr_spec_t *s, const char *kv, size_t klen);

/* pr_env_keys: the keys of the "K=V\0" entries of a spawn payload (`p`, `len`
 * bytes) after its first `skip` strings, as one malloc'd NUL-separated list.
 * Returns 0 with *keys (NULL when there is none) and *klen, or PR_ENOMEM. */
int pr_env_keys(const char *p, size_t len, size_t skip, char **keys, size_t *klen);

/* pr_secrets_new: a masker for the values of s->secrets (copied), or *out =
 * NULL when there are none. Returns 0 or PR_ENOMEM. */
int pr_secrets_new(const pr_spec_t *s, pr_secrets_t **out);

/* pr_secrets_add: add a value of len bytes to the masker *m (created when
 * NULL), in locked memory (base/locked.h) or not at all. Returns 0 or
 * PR_ENOMEM (also when the memory cannot be locked). Values of
 * pr_secrets_new are locked too when the limit allows (else plain). */
int pr_secrets_add(pr_secrets_t **m, const char *val, size_t len);

/* pr_secrets_free: wipe and free the values. NULL is a no-op. */
void pr_secrets_free(pr_secrets_t *m);

/* pr_secrets_mask: mask `*n` bytes at `p` read from `stream`: every
 * occurrence of a secret value becomes "***" (also spelled with JSON escapes,
 * or "\r\n" for "\n": see secrets.c), and a tail that could still be the
 * start of one is held back. p == NULL releases what is held (end of
 * the stream). Returns the bytes to keep (valid until the next call on `m`)
 * with their count in *n, or NULL when there is nothing to keep now. */
const char *pr_secrets_mask(pr_secrets_t *m, int stream, const char *p, size_t *n);

/* pr_secrets_scrub: a malloc'd copy of the NUL-terminated `s` with every
 * secret value replaced by "***" (m may be NULL: a plain copy). NULL on ENOMEM. */
char *pr_secrets_scrub(const pr_secrets_t *m, const char *s);

/* pr_secrets_mask_json: mask a decoded JSON value in place (a worker's reply,
 * chunk or error): strings and keys holding a secret get it replaced by
 * "***"; a number or literal whose text is one becomes that string. Its
 * siblings are left alone. m == NULL: nothing to do. Any thread. */
struct cJSON;
void pr_secrets_mask_json(const pr_secrets_t *m, struct cJSON *j);

#endif
