/* engine/vault.c — secrets read from a store at spawn time. See vault.h.
 *
 * Thread: see vault.h.
 */
#include "engine/vault.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/locked.h"
#include "engine/keyring.h"
#include "engine/secrets.h"

#define FETCH_RING 8192 /* a command's stdout kept: more than a value may be */
#define FETCH_GRACE_MS 500

enum { E_IDLE = 0, E_READING, E_DONE };

typedef struct entry {
  pr_vault_t *v;
  char *name;
  int store;    /* 1: the keyring; 0: a command */
  char **attrs; /* store: key, value, ... (nattrs pairs) */
  size_t nattrs;
  char **argv; /* command: NULL-terminated */
  size_t argc;
  char *payload; /* command: its spawn payload (cwd, argv, environment) */
  size_t plen;
  int state;
  char *value; /* locked, NUL-terminated, once read */
  size_t len;
  pr_keyring_t kr; /* store: the lookup (its async handle counts in x->handles) */
  int async_open;
  pr_exec_t *fetch; /* command: the hidden execution while it runs */
} entry_t;

struct pr_vault {
  pr_exec_t *x;
  entry_t *e;
  size_t n;
  int busy; /* entries reading */
  int told, quiet;
  char *why;           /* the first failure */
  uv_timer_t timer;    /* secret_timeout_ms while reads are in flight (data: x) */
  int timer_open;      /* initialised, uv_close not called yet */
  uint32_t timeout_ms; /* the bound it was armed with, for the reason */
};

/* ---- building (any thread) ------------------------------------------------------- */

static int valid_name(const char *k) { return k && *k && strchr(k, '=') == NULL; }

int pr_vault_check(const pr_spec_t *s) {
  for (size_t i = 0; i < s->nsources; i++) {
    const pr_secret_source_t *src = s->sources ? &s->sources[i] : NULL;
    if (src == NULL || !valid_name(src->name)) return PR_EINVAL;
    size_t kl = strlen(src->name);
    for (size_t k = 0; k < s->envc; k++)
      if (s->env[k] && strncmp(s->env[k], src->name, kl) == 0 && s->env[k][kl] == '=')
        return PR_EINVAL;
    for (size_t k = 0; k < s->nsecrets; k++)
      if (s->secrets[k] && strncmp(s->secrets[k], src->name, kl) == 0 && s->secrets[k][kl] == '=')
        return PR_EINVAL;
    for (size_t k = 0; k < i; k++)
      if (strcmp(s->sources[k].name, src->name) == 0) return PR_EINVAL;
    if ((src->store != NULL) == (src->command != NULL)) return PR_EINVAL;
    if (src->store) {
      if (strcmp(src->store, "secret-service") != 0 || src->nattributes == 0) return PR_EINVAL;
      for (size_t k = 0; k < src->nattributes; k++) {
        const char *a = src->attributes[k], *eq = a ? strchr(a, '=') : NULL;
        if (eq == NULL || eq == a) return PR_EINVAL;
      }
    } else {
      if (src->ncommand == 0) return PR_EINVAL;
      for (size_t k = 0; k < src->ncommand; k++)
        if (src->command[k] == NULL) return PR_EINVAL;
    }
  }
  return 0;
}

int pr_vault_names(const pr_spec_t *s, const char *name, size_t klen) {
  for (size_t i = 0; i < s->nsources; i++)
    if (strlen(s->sources[i].name) == klen && strncmp(s->sources[i].name, name, klen) == 0)
      return 1;
  return 0;
}

static void sb_add(pr_buf_t *b, const char *s) { pr_buf_add(b, s, strlen(s) + 1); }

static int copy_entry(entry_t *en, const pr_secret_source_t *src, const char *cwd,
                      char *const *env) {
  if ((en->name = strdup(src->name)) == NULL) return PR_ENOMEM;
  if (src->store) {
    en->store = 1;
    en->nattrs = src->nattributes;
    if ((en->attrs = calloc(2 * en->nattrs + 1, sizeof(char *))) == NULL) return PR_ENOMEM;
    for (size_t k = 0; k < en->nattrs; k++) {
      const char *a = src->attributes[k], *eq = strchr(a, '=');
      if ((en->attrs[2 * k] = strndup(a, (size_t)(eq - a))) == NULL ||
          (en->attrs[2 * k + 1] = strdup(eq + 1)) == NULL)
        return PR_ENOMEM;
    }
    return 0;
  }
  en->argc = src->ncommand;
  if ((en->argv = calloc(en->argc + 1, sizeof(char *))) == NULL) return PR_ENOMEM;
  pr_buf_t b = PR_BUF_INIT(16u << 20);
  sb_add(&b, cwd);
  for (size_t k = 0; k < en->argc; k++) {
    if ((en->argv[k] = strdup(src->command[k])) == NULL) return PR_ENOMEM;
    sb_add(&b, en->argv[k]);
  }
  for (char *const *ep = env; ep && *ep; ep++) sb_add(&b, *ep);
  if (b.err) {
    int rc = b.err;
    pr_buf_free(&b);
    return rc;
  }
  en->plen = b.len;
  en->payload = pr_buf_release(&b);
  return 0;
}

int pr_vault_new(const pr_spec_t *s, const char *cwd, char *const *env, pr_vault_t **out) {
  *out = NULL;
  if (s->nsources == 0) return 0;
  pr_vault_t *v = calloc(1, sizeof(*v));
  if (v == NULL || (v->e = calloc(s->nsources, sizeof(entry_t))) == NULL) {
    free(v);
    return PR_ENOMEM;
  }
  v->n = s->nsources;
  for (size_t i = 0; i < v->n; i++) {
    v->e[i].v = v;
    if (copy_entry(&v->e[i], &s->sources[i], cwd, env) != 0) {
      pr_vault_free(v);
      return PR_ENOMEM;
    }
  }
  *out = v;
  return 0;
}

static void wipe_value(entry_t *en) {
  if (en->value) pr_locked_free(en->value, en->len + 1);
  en->value = NULL;
  en->len = 0;
}

static void free_list(char **l) {
  for (size_t i = 0; l && l[i]; i++) free(l[i]);
  free(l);
}

void pr_vault_free(pr_vault_t *v) {
  if (v == NULL) return;
  for (size_t i = 0; i < v->n; i++) {
    entry_t *en = &v->e[i];
    wipe_value(en);
    pr_keyring_clear(&en->kr);
    free(en->name);
    free_list(en->attrs);
    free_list(en->argv);
    free(en->payload);
  }
  free(v->e);
  free(v->why);
  free(v);
}

int pr_vault_ready(const pr_vault_t *v) {
  for (size_t i = 0; i < v->n; i++)
    if (v->e[i].value == NULL) return 0;
  return 1;
}

int pr_vault_busy(const pr_vault_t *v) { return v->busy > 0; }

const char *pr_vault_pending(const pr_vault_t *v) {
  for (size_t i = 0; v && i < v->n; i++)
    if (v->e[i].state == E_READING) return v->e[i].name;
  return NULL;
}

size_t pr_vault_env_len(const pr_vault_t *v) {
  size_t n = 0;
  for (size_t i = 0; v && i < v->n; i++)
    if (v->e[i].value) n += strlen(v->e[i].name) + 1 + v->e[i].len + 1;
  return n;
}

void pr_vault_env(const pr_vault_t *v, char *out) {
  for (size_t i = 0; v && i < v->n; i++) {
    const entry_t *en = &v->e[i];
    if (en->value == NULL) continue;
    size_t kl = strlen(en->name);
    memcpy(out, en->name, kl);
    out[kl] = '=';
    memcpy(out + kl + 1, en->value, en->len + 1);
    out += kl + 1 + en->len + 1;
  }
}

int pr_vault_keys(const pr_vault_t *v, char **keys, size_t *klen) {
  size_t add = 0;
  for (size_t i = 0; v && i < v->n; i++) add += strlen(v->e[i].name) + 1;
  if (add == 0) return 0;
  char *k = realloc(*keys, *klen + add);
  if (k == NULL) return PR_ENOMEM;
  for (size_t i = 0; i < v->n; i++) {
    size_t n = strlen(v->e[i].name) + 1;
    memcpy(k + *klen, v->e[i].name, n);
    *klen += n;
  }
  *keys = k;
  return 0;
}

int pr_vault_mask(const pr_vault_t *v, struct pr_secrets **m) {
  for (size_t i = 0; v && i < v->n; i++)
    if (v->e[i].value && pr_secrets_add(m, v->e[i].value, v->e[i].len) != 0) return PR_ENOMEM;
  return 0;
}

/* ---- reading (engine thread) ------------------------------------------------------- */

static void timer_close(pr_vault_t *v) {
  if (!v->timer_open) return;
  v->timer_open = 0;
  uv_close((uv_handle_t *)&v->timer, pr_exec_handle_closed);
}

/* One entry ended (value set, or `why`). */
static void entry_done(entry_t *en, const char *why) {
  pr_vault_t *v = en->v;
  en->state = E_DONE;
  v->busy--;
  if (v->busy == 0) timer_close(v); /* no read left to bound */
  if (why && v->why == NULL) {
    size_t n = strlen(en->name) + strlen(why) + 16;
    if ((v->why = malloc(n)) != NULL) snprintf(v->why, n, "secret %s: %s", en->name, why);
  }
  if (why && !v->quiet) pr_vault_stop(v->x, 0); /* one failed: the others are of no use */
  if (v->busy > 0 || v->told) return;
  v->told = 1;
  if (v->quiet) return;
  pr_exec_vault_done(v->x, v->why ? v->why : why ? "cannot be read" : NULL);
}

static void on_keyring(uv_async_t *h) {
  entry_t *en = (entry_t *)((char *)h - offsetof(entry_t, kr.async));
  en->async_open = 0;
  uv_close((uv_handle_t *)h, pr_exec_handle_closed);
  if (en->state != E_READING) return; /* stopped quietly: already counted */
  pr_keyring_finish(&en->kr);
  if (en->kr.value) {
    en->value = en->kr.value; /* moved: locked, NUL-terminated */
    en->len = en->kr.len;
    en->kr.value = NULL;
    en->kr.len = 0;
  }
  entry_done(en, en->value ? NULL : en->kr.why);
}

static void read_store(entry_t *en) {
  pr_exec_t *x = en->v->x;
  if (uv_async_init(x->ctx->loop, &en->kr.async, on_keyring) != 0) {
    entry_done(en, "cannot start the lookup");
    return;
  }
  en->kr.async.data = x;
  x->handles++;
  en->async_open = 1;
  if (pr_keyring_start(&en->kr, en->attrs, en->nattrs) != 0) {
    en->async_open = 0;
    uv_close((uv_handle_t *)&en->kr.async, pr_exec_handle_closed);
    entry_done(en, en->kr.why);
  }
}

/* First line of a command's stderr, for the reason (at most 160 bytes). */
static void first_line(pr_ring_t *r, char *out, size_t cap) {
  char *d = NULL;
  size_t len = 0;
  uint64_t next, missed;
  out[0] = 0;
  if (r == NULL || pr_ring_read(r, 0, cap - 1, &d, &len, &next, &missed) != 0) return;
  size_t k = 0;
  while (k < len && d[k] != '\n' && d[k] != '\r') k++;
  if (k) memcpy(out, d, k); /* an empty ring gives d = NULL */
  out[k] = 0;
  free(d);
}

static void wipe_ring(pr_ring_t *r) {
  if (r == NULL) return;
  pthread_mutex_lock(&r->mu);
  pr_wipe(r->buf, r->cap);
  pthread_mutex_unlock(&r->mu);
}

/* A command's value: its whole stdout without one trailing newline. */
static const char *take_stdout(entry_t *en, pr_exec_t *f) {
  pr_ring_t *r = f->streams[PR_STDOUT].ring;
  char *d = NULL;
  size_t len = 0;
  uint64_t next, missed;
  const char *why = NULL;
  if (pr_ring_read(r, 0, FETCH_RING, &d, &len, &next, &missed) != 0) return "out of memory";
  if (len && d[len - 1] == '\n') len--;
  if (len && d[len - 1] == '\r') len--;
  if (missed || len > PR_SECRET_MAX) why = "its output is longer than 4096 bytes";
  else if (len == 0) why = "the command printed nothing";
  else if (memchr(d, 0, len)) why = "its output holds a NUL byte";
  else if ((en->value = pr_locked_alloc(len + 1)) == NULL)
    why = "cannot lock memory for it (RLIMIT_MEMLOCK)";
  else {
    memcpy(en->value, d, len);
    en->len = len;
  }
  pr_wipe(d, len);
  free(d);
  return why;
}

/* ctx.ended of the hidden executions. */
static void fetch_ended(pr_exec_ctx_t *xc, pr_exec_t *f, int was_active) {
  (void)was_active;
  pr_vault_eng_t *e = (pr_vault_eng_t *)((char *)xc - offsetof(pr_vault_eng_t, xc));
  pr_idmap_del(&e->jobs, f->id);
  entry_t *en = f->sub;
  f->sub = NULL;
  if (en && en->state == E_READING) {
    en->fetch = NULL;
    char why[256], err[168];
    const char *w = NULL;
    if (f->state == PR_COMPLETED) {
      w = take_stdout(en, f);
    } else {
      first_line(f->streams[PR_STDERR].ring, err, sizeof(err));
      if (f->error) snprintf(why, sizeof(why), "`%s` could not run (%s)", en->argv[0], f->error);
      else if (f->signal)
        snprintf(why, sizeof(why), "`%s` was killed by signal %d%s%s", en->argv[0], f->signal,
                 *err ? ": " : "", err);
      else if (f->exit_code >= 0)
        snprintf(why, sizeof(why), "`%s` exited with status %d%s%s", en->argv[0], f->exit_code,
                 *err ? ": " : "", err);
      else
        snprintf(why, sizeof(why), "`%s` did not finish (%s)", en->argv[0],
                 f->reason ? f->reason : "stopped");
      w = why;
    }
    wipe_ring(f->streams[PR_STDOUT].ring);
    pr_wipe(xc->readbuf, sizeof(xc->readbuf));
    entry_done(en, w);
  }
  pr_exec_release(f);
}

void pr_vault_eng_init(pr_vault_eng_t *e, const pr_exec_ctx_t *main, uint32_t timeout_ms) {
  memset(e, 0, sizeof(*e));
  e->timeout_ms = timeout_ms ? timeout_ms : PR_DEFAULT_SECRET_TIMEOUT;
  pr_listeners_init(&e->none);
  e->xc.loop = main->loop;
  e->xc.sup = main->sup;
  e->xc.ls = &e->none;
  e->xc.drain_ms = 200;
  e->xc.ended = fetch_ended;
}

void pr_vault_eng_destroy(pr_vault_eng_t *e) { pr_idmap_destroy(&e->jobs); }

pr_exec_t *pr_vault_job(pr_vault_eng_t *e, uint64_t job) {
  return (job & PR_VAULT_JOB) ? pr_idmap_get(&e->jobs, job) : NULL;
}

static void read_command(entry_t *en, pr_vault_eng_t *e) {
  pr_exec_t *f = pr_exec_alloc();
  const char *why = "out of memory";
  if (f == NULL) goto fail;
  f->id = PR_VAULT_JOB | ++e->next;
  f->argc = en->argc;
  f->grace_ms = FETCH_GRACE_MS;
  f->cols = 80;
  f->rows = 24;
  if ((f->owner = strdup("proctor")) == NULL ||
      (f->argv = calloc(en->argc + 1, sizeof(char *))) == NULL ||
      (f->spawn_msg = malloc(en->plen)) == NULL)
    goto fail;
  for (size_t i = 0; i < en->argc; i++)
    if ((f->argv[i] = strdup(en->argv[i])) == NULL) goto fail;
  memcpy(f->spawn_msg, en->payload, en->plen);
  f->spawn_len = en->plen;
  for (int i = PR_STDOUT; i <= PR_STDERR; i++) {
    if ((f->streams[i].ring = pr_ring_new(FETCH_RING)) == NULL) goto fail;
    f->streams[i].exec = f;
  }
  if (pr_idmap_put(&e->jobs, f->id, f) != 0) goto fail;
  pr_exec_attach(f, &e->xc);
  f->sub = en;
  en->fetch = f;
  pr_exec_enqueued(f);
  pr_exec_begin(f); /* a spawn that fails at once ends it (and this entry) here */
  return;
fail:
  if (f) pr_exec_free(f);
  entry_done(en, why);
}

/* secret_timeout_ms passed with reads in flight: the first one still read
 * is named, and every read is stopped (pr_exec_vault_done follows). */
static void on_timeout(uv_timer_t *t) {
  pr_exec_t *x = t->data;
  pr_vault_t *v = x->vault;
  const char *name = pr_vault_pending(v);
  if (name == NULL || v->why) return;
  const entry_t *en = NULL;
  for (size_t i = 0; i < v->n && en == NULL; i++)
    if (v->e[i].state == E_READING) en = &v->e[i];
  size_t n = strlen(name) + (en->argv ? strlen(en->argv[0]) : 0) + 128;
  if ((v->why = malloc(n)) != NULL) {
    if (en->store)
      snprintf(v->why, n, "secret %s: the keyring gave no answer within secret_timeout_ms (%u ms)",
               name, v->timeout_ms);
    else
      snprintf(v->why, n,
               "secret %s: `%s` gave no value within secret_timeout_ms (%u ms); it was killed",
               name, en->argv[0], v->timeout_ms);
  }
  pr_vault_stop(x, 0);
}

void pr_vault_read(pr_exec_t *x, pr_vault_eng_t *e) {
  pr_vault_t *v = x->vault;
  v->x = x;
  v->told = v->quiet = 0;
  for (size_t i = 0; i < v->n; i++)
    if (v->e[i].value == NULL) {
      v->e[i].state = E_READING;
      v->busy++;
    }
  if (v->busy > 0 && !v->timer_open && uv_timer_init(x->ctx->loop, &v->timer) == 0) {
    v->timer.data = x;
    v->timer_open = 1;
    x->handles++;
    v->timeout_ms = e->timeout_ms;
    uv_timer_start(&v->timer, on_timeout, e->timeout_ms, 0);
  }
  for (size_t i = 0; i < v->n; i++) {
    entry_t *en = &v->e[i];
    if (en->state != E_READING) continue;
    if (v->why) entry_done(en, NULL); /* one failed already: not started */
    else if (en->store) read_store(en);
    else read_command(en, e);
  }
  if (v->busy == 0 && !v->told) { /* nothing was left to read */
    v->told = 1;
    pr_exec_vault_done(x, v->why);
  }
}

void pr_vault_stop(pr_exec_t *x, int quiet) {
  pr_vault_t *v = x->vault;
  if (v == NULL) return;
  v->x = x;
  if (quiet) v->quiet = 1;
  for (size_t i = 0; i < v->n; i++) {
    entry_t *en = &v->e[i];
    if (en->state == E_READING && en->store) {
      pr_keyring_cancel(&en->kr);
      if (quiet) { /* its async callback only closes the handle */
        pr_keyring_finish(&en->kr);
        pr_keyring_clear(&en->kr);
        entry_done(en, "stopped");
      }
    } else if (en->state == E_READING && en->fetch) {
      pr_exec_t *f = en->fetch;
      if (quiet) pr_exec_abandon(f); /* ends it, and the entry, now */
      else pr_exec_cancel(f, 1, "canceled");
    }
  }
  if (quiet) {
    timer_close(v);
    for (size_t i = 0; i < v->n; i++) wipe_value(&v->e[i]);
  }
}
