/* engine/spec.c — a start spec becomes an execution: validation, argv, the
 * child's environment, the spawn payload, rings, a worker's state.
 *
 * Thread: any. The host builds its starts on its own thread (where the
 * host's environment can be read safely) and hands the execution over whole
 * in a START command; the RPC server builds on the engine thread from the
 * environment snapshot the engine took when it was made. Nothing here
 * touches shared state but the id counter (atomic).
 *
 * Spawn payload (base/wire.h PR_W_SPAWN): cwd\0 argv[0]\0 ... env[0]\0 ...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/clock.h"
#include "engine/control.h"
#include "engine/secrets.h"
#include "engine/vault.h"
#include "engine/worker.h"

#define PR_MAX_SPAWN_BYTES (16u << 20)

/* Is `kv` ("K=V") setting key `k` of length klen? */
static int same_key(const char *kv, const char *k, size_t klen) {
  return strncmp(kv, k, klen) == 0 && kv[klen] == '=';
}

static size_t key_len(const char *kv) {
  const char *eq = strchr(kv, '=');
  return eq ? (size_t)(eq - kv) : strlen(kv);
}

/* Append string + NUL to the spawn payload. */
static void sb_add(pr_buf_t *b, const char *s) { pr_buf_add(b, s, strlen(s) + 1); }

/* Add base env entries not overridden by `extra`, then the extras. */
static void build_env(pr_buf_t *b, const pr_spec_t *s, char *const *base, const char *const *extra,
                      size_t nextra) {
  if (!s->clear_env && base) {
    for (char *const *ep = base; *ep; ep++) {
      size_t kl = key_len(*ep);
      int over =
          !pr_env_inherits(s, *ep, kl) || pr_vault_names(s, *ep, kl); /* env_allow, secret names */
      for (size_t i = 0; i < s->envc && !over; i++) over = same_key(s->env[i], *ep, kl);
      for (size_t i = 0; i < nextra && !over; i++) over = same_key(extra[i], *ep, kl);
      if (!over) sb_add(b, *ep);
    }
  }
  for (size_t i = 0; i < s->envc; i++) {
    size_t kl = key_len(s->env[i]);
    int over = 0;
    for (size_t k = 0; k < nextra && !over; k++) over = same_key(extra[k], s->env[i], kl);
    if (!over) sb_add(b, s->env[i]);
  }
  for (size_t i = 0; i < s->nsecrets; i++) sb_add(b, s->secrets[i]); /* checked: not in env */
  for (size_t i = 0; i < nextra; i++) sb_add(b, extra[i]);
}

/* At least the bytes of the spawn payload (cwd, argv, every environment entry
 * build_env may add): a start allocates its payload once, at about its size.
 * On a host whose heap is still growing each fresh page costs a fault, the
 * larger part of a cold start's time. */
static size_t payload_bound(const pr_exec_t *x, const pr_spec_t *s, char *const *base,
                            const char *const *extra, size_t nextra) {
  size_t n = strlen(x->cwd) + 1;
  for (size_t i = 0; i < x->argc; i++) n += strlen(x->argv[i]) + 1;
  if (!s->clear_env && base)
    for (char *const *ep = base; *ep; ep++) n += strlen(*ep) + 1;
  for (size_t i = 0; i < s->envc; i++) n += strlen(s->env[i]) + 1;
  for (size_t i = 0; i < s->nsecrets; i++) n += strlen(s->secrets[i]) + 1;
  for (size_t i = 0; i < nextra; i++) n += strlen(extra[i]) + 1;
  return n;
}

int pr_exec_build(pr_control_t *c, const pr_spec_t *s, char *const *base_env, pr_exec_t **out) {
  *out = NULL;
  if (s == NULL || (s->shell == NULL && (s->argc == 0 || s->argv == NULL))) return PR_EINVAL;
  for (size_t i = 0; i < s->envc; i++)
    if (s->env[i] == NULL || strchr(s->env[i], '=') == NULL || s->env[i][0] == '=')
      return PR_EINVAL;
  if (pr_secrets_check(s) != 0 || pr_vault_check(s) != 0)
    return PR_EINVAL; /* secrets, env_allow, sources */
  pr_exec_t *x = pr_exec_alloc();
  pr_buf_t b = PR_BUF_INIT(PR_MAX_SPAWN_BYTES);
  b.wipe = 1; /* the payload holds inline secret values: no copy left behind as it grows */
  int rc = PR_ENOMEM;
  if (x == NULL) goto fail;
  x->session = s->session;
  x->pty = s->pty;
  x->stdin_pipe = s->pty ? 1 : s->stdin_pipe;
  x->backpressure = s->backpressure;
  x->held = s->hold;
  x->cols = s->cols ? s->cols : 80;
  x->rows = s->rows ? s->rows : 24;
  x->timeout_ms = s->timeout_ms;
  x->grace_ms = s->kill_grace_ms >= 0 ? (uint32_t)s->kill_grace_ms : c->kill_grace_ms;
  x->created_at = pr_now_ms();
  if (s->worker) { /* a supervised worker: requests go to its stdin */
    if ((rc = pr_worker_new(s->worker, x)) != 0) goto fail;
    rc = PR_ENOMEM;
    x->stdin_pipe = 1;
    if (x->pty) {
      rc = PR_EINVAL;
      goto fail;
    }
  }
  if (s->label && (x->label = strdup(s->label)) == NULL) goto fail;
  if ((x->owner = strdup(s->owner ? s->owner : "host")) == NULL) goto fail;
  char here[4096]; /* not getcwd(NULL, 0): its buffer bypasses ASan's malloc */
  if (s->target && (!s->transport || !*s->target || !*s->transport)) {
    rc = PR_EINVAL; /* a target is reached through its transport */
    goto fail;
  }
  if (s->target &&
      ((x->target = strdup(s->target)) == NULL || (x->transport = strdup(s->transport)) == NULL))
    goto fail;
  if (s->cwd) x->cwd = strdup(s->cwd);
  else if (s->target) x->cwd = strdup(""); /* the far side's home (the relay's cwd) */
  else if (getcwd(here, sizeof(here)) != NULL) x->cwd = strdup(here);
  if (x->cwd == NULL) goto fail;
  if (s->shell) {
    if ((x->shell = strdup(s->shell)) == NULL) goto fail;
    x->argc = 3;
  } else {
    x->argc = s->argc;
  }
  x->argv = calloc(x->argc + 1, sizeof(char *));
  if (x->argv == NULL) goto fail;
  for (size_t i = 0; i < x->argc; i++) {
    const char *a = s->shell ? (i == 0 ? "/bin/sh" : i == 1 ? "-c" : s->shell) : s->argv[i];
    if (a == NULL || (x->argv[i] = strdup(a)) == NULL) {
      rc = a == NULL ? PR_EINVAL : PR_ENOMEM;
      goto fail;
    }
  }
  for (int i = 0; i < PR_NSTREAM; i++) {
    if ((i == PR_PTY) != (x->pty != 0)) continue;
    if ((x->streams[i].ring = pr_ring_new(c->output_limit)) == NULL) goto fail;
    pr_ring_set_spill(x->streams[i].ring, c->spill);
    x->streams[i].exec = x;
  }

  /* The id is handed out here so the caller has it at once; commands are
   * processed in order, so any later call with this id finds it. */
  x->id = pr_control_next_id(c);

  char idvar[48];
  snprintf(idvar, sizeof(idvar), "PROCTOR_EXECUTION_ID=%llu", (unsigned long long)x->id);
  char sockvar[sizeof("PROCTOR_SOCKET=") + PR_LISTEN_MAX]; /* where the RPC socket is */
  const char *extra[3] = {idvar};
  size_t nextra = 1;
  if (c->listen) {
    snprintf(sockvar, sizeof(sockvar), "PROCTOR_SOCKET=%s", c->listen);
    extra[nextra++] = sockvar;
  }
  if (x->pty) {
    int has_term = 0;
    for (size_t i = 0; i < s->envc; i++) has_term |= same_key(s->env[i], "TERM", 4);
    if (!has_term) extra[nextra++] = "TERM=xterm-256color";
  }
  /* A target's environment is the far side's: only what the spec sets goes. */
  char *const *base = s->target ? NULL : base_env;
  pr_buf_presize(&b, payload_bound(x, s, base, extra, nextra));
  sb_add(&b, x->cwd);
  for (size_t i = 0; i < x->argc; i++) sb_add(&b, x->argv[i]);
  build_env(&b, s, base, extra, nextra);
  if (b.err) {
    rc = b.err;
    goto fail;
  }
  if ((rc = pr_env_keys(b.p, b.len, 1 + x->argc, &x->env_keys, &x->env_keys_len)) != 0 ||
      (rc = pr_secrets_new(s, &x->secrets)) != 0 || /* secrets.c: keys for the record, masker */
      (rc = pr_vault_new(s, x->cwd, base_env, &x->vault)) != 0 || /* read at spawn time */
      (rc = pr_vault_keys(x->vault, &x->env_keys, &x->env_keys_len)) != 0)
    goto fail;
  x->spawn_len = b.len;
  x->spawn_msg = pr_buf_release(&b);
  *out = x;
  return 0;
fail:
  pr_buf_free(&b);
  if (x) pr_exec_free(x);
  return rc;
}
