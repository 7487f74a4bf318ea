/* engine/exec_record.c — an execution seen as a record and back: the view
 * every serializer reads (history, RPC, Lua), its owned snapshots, and the
 * finished execution a loaded record becomes.
 *
 * Thread: engine (view, snapshots); the host thread before the engine runs
 * (pr_exec_restore, at history load). The record's fields are described once
 * (PR_RECORD_FIELDS in base/record.h); this file maps them to the execution.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/exec.h"
#include "engine/secrets.h"

void pr_exec_view(const pr_exec_t *x, pr_record_t *r, int brief) {
  memset(r, 0, sizeof(*r));
  r->core = x->rec; /* the fields kept as they are shown; then what the view adds: */
  r->argc = x->argv ? x->argc : 0;
  if (!x->finished) r->reason = NULL; /* a verdict is not told before the end */
  r->duration_ms = x->finished       ? x->duration_ms
                   : x->started_mono ? uv_now(x->ctx->loop) - x->started_mono
                                     : 0;
  for (int i = 0; i < PR_NSTREAM; i++) {
    if (x->streams[i].ring == NULL) continue;
    r->has_stream[i] = 1;
    pr_ring_stats(x->streams[i].ring, &r->dropped[i], &r->bytes[i]);
  }
  r->stdin_open = x->in_open && !x->in_closing;
  r->previous_session = x->previous_session;
  r->brief = brief;
  if (!brief) { /* keys only (secrets.h) */
    r->env_keys = x->env_keys;
    r->env_keys_len = x->env_keys ? x->env_keys_len : 0;
  }
  r->worker_state = -1;
  if (x->ops && x->ops->record) x->ops->record(x, r);
}

pr_record_t *pr_exec_snapshot(const pr_exec_t *x) {
  pr_record_t r;
  pr_exec_view(x, &r, 0);
  return pr_record_dup(&r);
}

pr_record_t *pr_exec_snapshot_brief(const pr_exec_t *x) {
  pr_record_t r;
  pr_exec_view(x, &r, 1);
  return pr_record_dup(&r);
}

pr_ring_t *pr_exec_ring(const pr_exec_t *x, int stream) {
  return stream >= 0 && stream < PR_NSTREAM ? x->streams[stream].ring : NULL;
}

char *pr_exec_scrub(const pr_exec_t *x, const char *s) { return pr_secrets_scrub(x->secrets, s); }

pr_exec_t *pr_exec_restore(pr_exec_ctx_t *c, pr_record_t *r, pr_ring_t *const *rings) {
  pr_exec_t *x = pr_exec_alloc();
  if (x == NULL) {
    for (int i = 0; i < PR_NSTREAM; i++) pr_ring_unref(rings[i]);
    pr_record_free(r);
    return NULL;
  }
  x->ctx = c;
  x->finished = x->exited = x->released = x->previous_session = 1;
  x->rec = r->core; /* then what a restored execution keeps otherwise: */
  x->argc = r->argv ? r->argc : 0;
  x->pid = 0; /* it has no process */
  x->verdict = (int)r->state;
  x->env_keys = r->env_keys;
  x->env_keys_len = r->env_keys ? r->env_keys_len : 0;
  free(r); /* its strings now belong to x */
  for (int i = 0; i < PR_NSTREAM; i++) {
    x->streams[i].exec = x;
    x->streams[i].ring = rings[i];
    x->streams[i].eof = 1;
  }
  return x;
}
