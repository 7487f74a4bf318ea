/* base/record.c — the record's fields, listed once (PR_RECORD_FIELDS in
 * include/proctor.h), copying and freeing records, freeing events, and the
 * host's handle on an output event's stream (pr_output_t: its ring, read
 * under the ring's own mutex, base/ring.h).
 *
 * Thread: any. A record is plain data owned by whoever holds it.
 *
 *   pr_record_t ─► pr_record_fields ─► [pr_field_t ...] ─► lua/record.c   (a Lua table)
 *                                                        ├► rpc/pack.c     (an RPC map)
 *                                                        ├► store/history.c (a history frame)
 *                                                        └► store/audit.c  (an audit line)
 */
#include <stdlib.h>
#include <string.h>

#include "base/ring.h"
#include "include/proctor.h"

#define SET_U64(f, v) (f)->u = (uint64_t)(v)
#define SET_I64(f, v) (f)->i = (int64_t)(v)
#define SET_BOOL(f, v) (f)->i = (v) ? 1 : 0
#define SET_STR(f, v) (f)->s = (v)
#define SET_SIGNAL(f, v) (f)->i = (int64_t)(v)
#define SET_CMD(f, v) (void)(v)
#define SET_KEYS(f, v) (void)(v)
#define SET_STREAMS(f, v) (f)->streams = (v)

size_t pr_record_fields(const pr_record_t *r, pr_field_t *f) {
  size_t n = 0;
#define X(NAME, k, TYPE, present, value) \
  if (present) {                         \
    pr_field_t *p = &f[n++];             \
    memset(p, 0, sizeof(*p));            \
    p->id = PR_RF_##NAME;                \
    p->key = k;                          \
    p->type = PR_FT_##TYPE;              \
    p->r = r;                            \
    SET_##TYPE(p, value);                \
  }
  PR_RECORD_FIELDS(X)
#undef X
  return n;
}

size_t pr_record_nkeys(const pr_record_t *r) {
  size_t n = 0, at = 0;
  while (pr_record_key_next(r, &at)) n++;
  return n;
}

const char *pr_record_key_next(const pr_record_t *r, size_t *at) {
  if (r->env_keys == NULL || *at >= r->env_keys_len) return NULL;
  const char *k = r->env_keys + *at;
  *at += strnlen(k, r->env_keys_len - *at) + 1;
  return k;
}

int pr_record_nstreams(const pr_record_t *r) {
  int n = 0;
  for (int i = 0; i < PR_NSTREAM; i++) n += r->has_stream[i] != 0;
  return n;
}

static int dup_str(char **dst, const char *src) {
  *dst = NULL;
  return src == NULL || (*dst = strdup(src)) != NULL;
}

pr_record_t *pr_record_dup(const pr_record_t *r) {
  pr_record_t *c = malloc(sizeof(*c));
  if (c == NULL) return NULL;
  *c = *r;
  c->argv = NULL;
  c->argc = 0;
  c->env_keys = NULL;
  c->env_keys_len = 0;
  int ok = dup_str(&c->label, r->label) & dup_str(&c->owner, r->owner) & dup_str(&c->cwd, r->cwd) &
           dup_str(&c->target, r->target) & dup_str(&c->shell, r->shell) &
           dup_str(&c->reason, r->reason) & dup_str(&c->error, r->error);
  if (ok && r->argv && (c->argv = calloc(r->argc + 1, sizeof(char *))) != NULL) {
    c->argc = r->argc;
    for (size_t i = 0; i < r->argc && ok; i++) ok = dup_str(&c->argv[i], r->argv[i]);
  } else if (r->argv) {
    ok = 0;
  }
  if (ok && r->env_keys && r->env_keys_len) {
    if ((c->env_keys = malloc(r->env_keys_len)) != NULL) {
      memcpy(c->env_keys, r->env_keys, r->env_keys_len);
      c->env_keys_len = r->env_keys_len;
    } else {
      ok = 0;
    }
  }
  if (!ok) {
    pr_record_free(c);
    return NULL;
  }
  return c;
}

void pr_record_free(pr_record_t *r) {
  if (r == NULL) return;
  if (r->argv)
    for (size_t i = 0; i < r->argc; i++) free(r->argv[i]);
  free(r->argv);
  free(r->label);
  free(r->owner);
  free(r->cwd);
  free(r->target);
  free(r->shell);
  free(r->reason);
  free(r->error);
  free(r->env_keys);
  free(r);
}

void pr_records_free(pr_record_t **v, size_t n) {
  if (v == NULL) return;
  for (size_t i = 0; i < n; i++) pr_record_free(v[i]);
  free(v);
}

void pr_event_free(pr_event_t *ev) {
  if (ev == NULL) return;
  free(ev->reason);
  free(ev->error);
  free(ev->data);
  pr_record_free(ev->record);
  pr_ring_unref((pr_ring_t *)ev->ring);
  if (ev->chan) ev->chan_done(ev->chan); /* a chunk consumed: its request's back-pressure count */
  free(ev);
}

pr_output_t *pr_event_output(const pr_event_t *ev) {
  if (ev == NULL || ev->type != PR_EV_OUTPUT || ev->ring == NULL) return NULL;
  pr_ring_ref((pr_ring_t *)ev->ring);
  return (pr_output_t *)ev->ring;
}

int pr_output_read(pr_output_t *o, uint64_t from, size_t max, char **data, size_t *len,
                   uint64_t *next, uint64_t *missed) {
  return pr_ring_read(o, from, max, data, len, next, missed);
}

void pr_output_release(pr_output_t *o) { pr_ring_unref(o); }
