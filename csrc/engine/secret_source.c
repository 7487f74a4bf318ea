/* engine/secret_source.c — where the secrets of an execution (engine/vault.h)
 * are read from their stores, above the execution: the keyring lookups
 * (engine/keyring.c, a thread each) and the command sources (hidden
 * executions). exec.c reaches it only through its context's reader
 * (pr_exec_ctx_t.source). See secret_source.h.
 *
 * Thread: engine.
 */
#include "engine/secret_source.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/locked.h"
#include "engine/keyring.h"
#include "engine/secrets.h"

#define FETCH_RING 8192 /* a command's stdout kept: more than a value may be */
#define FETCH_GRACE_MS 500

static void stop_reads(pr_exec_t *x, int quiet);
static void reader_read(pr_secret_reader_t *r, pr_exec_t *x);
static void reader_stop(pr_secret_reader_t *r, pr_exec_t *x, int quiet);

static void timer_close(pr_vault_t *v) {
  if (!v->timer_open) return;
  v->timer_open = 0;
  uv_close((uv_handle_t *)&v->timer, pr_exec_handle_closed);
}

/* One entry ended (value set, or `why`). */
static void entry_done(pr_vault_entry_t *en, const char *why) {
  pr_vault_t *v = en->v;
  en->state = PR_VE_DONE;
  v->busy--;
  if (v->busy == 0) timer_close(v); /* no read left to bound */
  if (why && v->why == NULL) {
    size_t n = strlen(en->name) + strlen(why) + 16;
    if ((v->why = malloc(n)) != NULL) snprintf(v->why, n, "secret %s: %s", en->name, why);
  }
  if (why && !v->quiet) stop_reads(v->x, 0); /* one failed: the others are of no use */
  if (v->busy > 0 || v->told) return;
  v->told = 1;
  if (v->quiet) return;
  pr_exec_vault_done(v->x, v->why ? v->why : why ? "cannot be read" : NULL);
}

static void on_keyring(uv_async_t *h) {
  pr_vault_entry_t *en = (pr_vault_entry_t *)((char *)h - offsetof(pr_vault_entry_t, kr.async));
  en->async_open = 0;
  uv_close((uv_handle_t *)h, pr_exec_handle_closed);
  if (en->state != PR_VE_READING) return; /* stopped quietly: already counted */
  pr_keyring_finish(&en->kr);
  if (en->kr.value) {
    en->value = en->kr.value; /* moved: locked, NUL-terminated */
    en->len = en->kr.len;
    en->kr.value = NULL;
    en->kr.len = 0;
  }
  entry_done(en, en->value ? NULL : en->kr.why);
}

static void read_store(pr_vault_entry_t *en) {
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
static const char *take_stdout(pr_vault_entry_t *en, pr_exec_t *f) {
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
  pr_source_t *e = (pr_source_t *)((char *)xc - offsetof(pr_source_t, xc));
  pr_idmap_del(&e->jobs, f->id);
  pr_vault_entry_t *en = f->sub;
  f->sub = NULL;
  if (en && en->state == PR_VE_READING) {
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

void pr_source_init(pr_source_t *e, const pr_exec_ctx_t *main, uint32_t timeout_ms) {
  memset(e, 0, sizeof(*e));
  e->timeout_ms = timeout_ms ? timeout_ms : PR_DEFAULT_SECRET_TIMEOUT;
  pr_listeners_init(&e->none);
  e->xc.loop = main->loop;
  e->xc.sup = main->sup;
  e->xc.ls = &e->none;
  e->xc.drain_ms = 200;
  e->xc.ended = fetch_ended;
  e->reader.read = reader_read;
  e->reader.stop = reader_stop;
}

void pr_source_destroy(pr_source_t *e) { pr_idmap_destroy(&e->jobs); }

pr_exec_t *pr_source_job(pr_source_t *e, uint64_t job) {
  return (job & PR_SOURCE_JOB) ? pr_idmap_get(&e->jobs, job) : NULL;
}

static void read_command(pr_vault_entry_t *en, pr_source_t *e) {
  pr_exec_t *f = pr_exec_alloc();
  const char *why = "out of memory";
  if (f == NULL) goto fail;
  f->id = PR_SOURCE_JOB | ++e->next;
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
  const pr_vault_entry_t *en = NULL;
  for (size_t i = 0; i < v->n && en == NULL; i++)
    if (v->e[i].state == PR_VE_READING) en = &v->e[i];
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
  stop_reads(x, 0);
}

static void read_all(pr_exec_t *x, pr_source_t *e) {
  pr_vault_t *v = x->vault;
  v->x = x;
  v->told = v->quiet = 0;
  for (size_t i = 0; i < v->n; i++)
    if (v->e[i].value == NULL) {
      v->e[i].state = PR_VE_READING;
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
    pr_vault_entry_t *en = &v->e[i];
    if (en->state != PR_VE_READING) continue;
    if (v->why) entry_done(en, NULL); /* one failed already: not started */
    else if (en->store) read_store(en);
    else read_command(en, e);
  }
  if (v->busy == 0 && !v->told) { /* nothing was left to read */
    v->told = 1;
    pr_exec_vault_done(x, v->why);
  }
}

static void stop_reads(pr_exec_t *x, int quiet) {
  pr_vault_t *v = x->vault;
  if (v == NULL) return;
  v->x = x;
  if (quiet) v->quiet = 1;
  for (size_t i = 0; i < v->n; i++) {
    pr_vault_entry_t *en = &v->e[i];
    if (en->state == PR_VE_READING && en->store) {
      pr_keyring_cancel(&en->kr);
      if (quiet) { /* its async callback only closes the handle */
        pr_keyring_finish(&en->kr);
        pr_keyring_clear(&en->kr);
        entry_done(en, "stopped");
      }
    } else if (en->state == PR_VE_READING && en->fetch) {
      pr_exec_t *f = en->fetch;
      if (quiet) pr_exec_abandon(f); /* ends it, and the entry, now */
      else pr_exec_cancel(f, 1, "canceled");
    }
  }
  if (quiet) {
    timer_close(v);
    pr_vault_wipe(v);
  }
}

/* The reader exec.c calls through its context (the first member of the source). */
static void reader_read(pr_secret_reader_t *r, pr_exec_t *x) { read_all(x, (pr_source_t *)r); }

static void reader_stop(pr_secret_reader_t *r, pr_exec_t *x, int quiet) { stop_reads(x, quiet); }
