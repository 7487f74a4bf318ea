/* rpc/params.c — checking the parameters of a request: shapes, ranges, the
 * start spec, and the error messages that name what was wrong.
 *
 * Thread: engine.
 *
 * Strings borrowed from a message are copied into the message's zone (freed
 * after dispatch): they are not NUL-terminated in the message. A secret's
 * value never appears in an error message.
 */
#include <stdio.h>
#include <string.h>

#include "base/mpack.h"
#include "engine/vault.h"
#include "rpc/params.h"

/* ---- parameters --------------------------------------------------------------------- */

int pr_rpc_bad(pr_rpc_req_t *q, uint32_t i, const char *name, const char *what) {
  snprintf(q->msg, sizeof(q->msg), "bad argument #%u (%s): %s", i + 1, name, what);
  return PR_EINVAL;
}

/* The i-th parameter, or NULL when absent or nil. */
const msgpack_object *pr_rpc_arg(const pr_rpc_req_t *q, uint32_t i) {
  return i < q->nargs && q->args[i].type != MSGPACK_OBJECT_NIL ? &q->args[i] : NULL;
}

/* An integral number (floats too, when exact). Returns 1 and *v. */
int pr_rpc_to_int(const msgpack_object *o, int64_t *v) {
  switch (o->type) {
  case MSGPACK_OBJECT_POSITIVE_INTEGER:
    if (o->via.u64 > INT64_MAX) return 0;
    *v = (int64_t)o->via.u64;
    return 1;
  case MSGPACK_OBJECT_NEGATIVE_INTEGER: *v = o->via.i64; return 1;
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64:
    if (!(o->via.f64 >= -9007199254740992.0 && o->via.f64 <= 9007199254740992.0) ||
        (double)(int64_t)o->via.f64 != o->via.f64)
      return 0;
    *v = (int64_t)o->via.f64;
    return 1;
  default: return 0;
  }
}

int pr_rpc_is_bytes(const msgpack_object *o) {
  return o->type == MSGPACK_OBJECT_STR || o->type == MSGPACK_OBJECT_BIN;
}

const char *pr_rpc_bytes_of(const msgpack_object *o, size_t *n) {
  *n = o->via.str.size; /* str and bin share the layout */
  return o->type == MSGPACK_OBJECT_STR ? o->via.str.ptr : o->via.bin.ptr;
}

/* A NUL-terminated copy in the message zone; NULL when not str/bin, when it
 * holds a NUL byte, or out of memory (*err says which). */
char *pr_rpc_zstr(pr_rpc_req_t *q, const msgpack_object *o, int *err) {
  size_t n;
  if (!pr_rpc_is_bytes(o)) {
    *err = PR_EINVAL;
    return NULL;
  }
  const char *p = pr_rpc_bytes_of(o, &n);
  if (memchr(p, 0, n)) {
    *err = PR_EINVAL;
    return NULL;
  }
  char *s = q->zone ? msgpack_zone_malloc(q->zone, n + 1) : NULL;
  if (s == NULL) {
    *err = PR_ENOMEM;
    return NULL;
  }
  memcpy(s, p, n);
  s[n] = 0;
  return s;
}

/* Parameter i as an execution id; ids <= 0 exist nowhere (*id = 0). */
int pr_rpc_arg_id(pr_rpc_req_t *q, uint32_t i, uint64_t *id) {
  const msgpack_object *o = pr_rpc_arg(q, i);
  int64_t v;
  if (o == NULL || !pr_rpc_to_int(o, &v))
    return pr_rpc_bad(q, i, "id", "execution id (integer) expected");
  *id = v > 0 ? (uint64_t)v : 0;
  return 0;
}

int pr_rpc_arg_bool(pr_rpc_req_t *q, uint32_t i, const char *name, int *out) {
  const msgpack_object *o = pr_rpc_arg(q, i);
  if (o == NULL) return 0;
  if (o->type != MSGPACK_OBJECT_BOOLEAN) return pr_rpc_bad(q, i, name, "boolean expected");
  *out = o->via.boolean;
  return 0;
}

int pr_rpc_arg_range(pr_rpc_req_t *q, uint32_t i, const char *name, int64_t lo, int64_t hi,
                     int64_t *out) {
  const msgpack_object *o = pr_rpc_arg(q, i);
  if (o == NULL) return 0;
  int64_t v;
  if (!pr_rpc_to_int(o, &v) || v < lo || v > hi) {
    char w[96];
    snprintf(w, sizeof(w), "integer in [%lld, %lld] expected", (long long)lo, (long long)hi);
    return pr_rpc_bad(q, i, name, w);
  }
  *out = v;
  return 0;
}

/* Copy a map key for an error message. */
const char *pr_rpc_key_text(const msgpack_object *k, char *buf, size_t n) {
  if (!pr_rpc_is_bytes(k)) return "(not a string)";
  size_t len;
  const char *p = pr_rpc_bytes_of(k, &len);
  snprintf(buf, n, "%.*s", (int)(len > 40 ? 40 : len), p);
  for (char *s = buf; *s; s++)
    if ((unsigned char)*s < 0x20) *s = '?';
  return buf;
}

/* Parameter i as an options map whose keys are all in `known`; NULL when absent. */
int pr_rpc_arg_map(pr_rpc_req_t *q, uint32_t i, const char *name, const char *const *known,
                   const msgpack_object **out) {
  const msgpack_object *o = pr_rpc_arg(q, i);
  *out = NULL;
  if (o == NULL) return 0;
  if (o->type != MSGPACK_OBJECT_MAP) return pr_rpc_bad(q, i, name, "map expected");
  for (uint32_t k = 0; k < o->via.map.size; k++) {
    const msgpack_object *key = &o->via.map.ptr[k].key;
    int ok = 0;
    for (const char *const *p = known; *p && !ok; p++) ok = pr_mp_key_is(key, *p);
    if (!ok) {
      char kb[48], w[96];
      snprintf(w, sizeof(w), "unknown key '%s'", pr_rpc_key_text(key, kb, sizeof(kb)));
      return pr_rpc_bad(q, i, name, w);
    }
  }
  *out = o;
  return 0;
}

const msgpack_object *pr_rpc_map_get(const msgpack_object *m, const char *key) {
  if (m == NULL) return NULL;
  for (uint32_t k = 0; k < m->via.map.size; k++)
    if (pr_mp_key_is(&m->via.map.ptr[k].key, key))
      return m->via.map.ptr[k].val.type == MSGPACK_OBJECT_NIL ? NULL : &m->via.map.ptr[k].val;
  return NULL;
}

int pr_rpc_not_found(pr_rpc_req_t *q, uint64_t id) {
  snprintf(q->msg, sizeof(q->msg), "%s %llu", pr_strerror(PR_ENOENT), (unsigned long long)id);
  return PR_ENOENT;
}

/* An error code from the engine, with the id in the message like the Lua core. */
int pr_rpc_fail_id(pr_rpc_req_t *q, int rc, uint64_t id) {
  if (rc == PR_ENOENT || rc == PR_ENOTRUNNING || rc == PR_ESTDINCLOSED)
    snprintf(q->msg, sizeof(q->msg), "%s %llu", pr_strerror(rc), (unsigned long long)id);
  return rc;
}

const char *const pr_rpc_start_keys[] = {
    "cmd",       "cwd",          "env",   "clear_env",          "pty",
    "cols",      "rows",         "stdin", "timeout_ms",         "kill_grace_ms",
    "label",     "backpressure", "hold",  "kill_on_disconnect", "secrets",
    "env_allow", "worker",       NULL};

static int spec_bool(pr_rpc_req_t *q, const msgpack_object *sp, const char *key, int *out) {
  const msgpack_object *v = pr_rpc_map_get(sp, key);
  if (v == NULL) return 0;
  if (v->type != MSGPACK_OBJECT_BOOLEAN) {
    char w[64];
    snprintf(w, sizeof(w), "field '%s' must be a boolean", key);
    return pr_rpc_bad(q, 0, "spec", w);
  }
  *out = v->via.boolean;
  return 0;
}

int pr_rpc_spec_int(pr_rpc_req_t *q, const msgpack_object *sp, const char *key, int64_t hi,
                    int64_t *out) {
  const msgpack_object *v = pr_rpc_map_get(sp, key);
  int64_t n;
  if (v == NULL) return 0;
  if (!pr_rpc_to_int(v, &n) || n < 0 || n > hi) {
    char w[96];
    snprintf(w, sizeof(w), "field '%s' must be an integer in [0, %lld]", key, (long long)hi);
    return pr_rpc_bad(q, 0, "spec", w);
  }
  *out = n;
  return 0;
}

static int spec_str(pr_rpc_req_t *q, const msgpack_object *sp, const char *key, const char **out) {
  const msgpack_object *v = pr_rpc_map_get(sp, key);
  if (v == NULL) return 0;
  int err = 0;
  if ((*out = pr_rpc_zstr(q, v, &err)) == NULL) {
    if (err != PR_EINVAL) return err;
    char w[96];
    snprintf(w, sizeof(w), "field '%s' must be a string without NUL bytes", key);
    return pr_rpc_bad(q, 0, "spec", w);
  }
  return 0;
}

static const char bad_source[] =
    "'secrets' sources are {store = \"secret-service\", attributes = {key = value, ...}} or "
    "{command = [argv...]}";

/* A list of strings (at least one) in the zone; NULL with *err when not. */
static const char **zstr_list(pr_rpc_req_t *q, const msgpack_object *a, size_t *n, int *err) {
  *err = PR_EINVAL;
  if (a == NULL || a->type != MSGPACK_OBJECT_ARRAY || a->via.array.size == 0) return NULL;
  const char **v = msgpack_zone_malloc(q->zone, a->via.array.size * sizeof(char *));
  if (v == NULL) return *err = PR_ENOMEM, NULL;
  for (uint32_t i = 0; i < a->via.array.size; i++)
    if ((v[i] = pr_rpc_zstr(q, &a->via.array.ptr[i], err)) == NULL) return NULL;
  *n = a->via.array.size;
  return v;
}

/* A secret's source (a map) named `name` into *src. */
static int source(pr_rpc_req_t *q, const char *name, const msgpack_object *m,
                  pr_secret_source_t *src) {
  static const char *const keys[] = {"store", "attributes", "command", NULL};
  *src = (pr_secret_source_t){.name = name};
  for (uint32_t i = 0; i < m->via.map.size; i++) {
    int known = 0;
    for (const char *const *k = keys; *k && !known; k++)
      known = pr_mp_key_is(&m->via.map.ptr[i].key, *k);
    if (!known) return pr_rpc_bad(q, 0, "spec", bad_source);
  }
  int err = 0;
  const msgpack_object *st = pr_rpc_map_get(m, "store"), *at = pr_rpc_map_get(m, "attributes"),
                       *cmd = pr_rpc_map_get(m, "command");
  if (cmd && !st && !at) {
    if ((src->command = zstr_list(q, cmd, &src->ncommand, &err)) == NULL)
      return err == PR_ENOMEM ? err : pr_rpc_bad(q, 0, "spec", bad_source);
    return 0;
  }
  if (cmd || !st || (src->store = pr_rpc_zstr(q, st, &err)) == NULL || at == NULL ||
      at->type != MSGPACK_OBJECT_MAP || at->via.map.size == 0)
    return err == PR_ENOMEM ? err : pr_rpc_bad(q, 0, "spec", bad_source);
  const char **kv = msgpack_zone_malloc(q->zone, at->via.map.size * sizeof(char *));
  if (kv == NULL) return PR_ENOMEM;
  for (uint32_t i = 0; i < at->via.map.size; i++) {
    const char *k = pr_rpc_zstr(q, &at->via.map.ptr[i].key, &err), *v = NULL;
    if (k) v = pr_rpc_zstr(q, &at->via.map.ptr[i].val, &err);
    if (v == NULL) return err == PR_ENOMEM ? err : pr_rpc_bad(q, 0, "spec", bad_source);
    size_t len = strlen(k) + strlen(v) + 2;
    char *p = msgpack_zone_malloc(q->zone, len);
    if (p == NULL) return PR_ENOMEM;
    snprintf(p, len, "%s=%s", k, v);
    kv[i] = p;
  }
  src->attributes = kv;
  src->nattributes = at->via.map.size;
  return 0;
}

/* A map of NAME = value (strings; numbers are written out) as "NAME=value"
 * strings in the request's zone; with `src`, a map value is a secret's
 * source instead (into *src, *nsrc). Error messages never quote a value: for
 * `secrets` they are secret. */
static int kv_list(pr_rpc_req_t *q, const msgpack_object *m, const char *field,
                   const char *const **out, size_t *n_out, const pr_secret_source_t **src_out,
                   size_t *nsrc) {
  if (m == NULL) return 0;
  char w[128];
  snprintf(w, sizeof(w), "'%s' must be a map of NAME = value (names without '=' or NUL)", field);
  if (m->type != MSGPACK_OBJECT_MAP) return pr_rpc_bad(q, 0, "spec", w);
  uint32_t n = m->via.map.size, nkv = 0;
  const char **kvs = msgpack_zone_malloc(q->zone, (n ? n : 1) * sizeof(char *));
  pr_secret_source_t *src =
      src_out ? msgpack_zone_malloc(q->zone, (n ? n : 1) * sizeof(*src)) : NULL;
  if (kvs == NULL || (src_out && src == NULL)) return PR_ENOMEM;
  for (uint32_t i = 0; i < n; i++) {
    const msgpack_object *k = &m->via.map.ptr[i].key, *v = &m->via.map.ptr[i].val;
    char num[32];
    int err = 0;
    const char *ks = pr_rpc_zstr(q, k, &err), *vs = NULL;
    if (ks == NULL && err == PR_ENOMEM) return err;
    int64_t iv;
    if (src && ks && ks[0] && !strchr(ks, '=') && v->type == MSGPACK_OBJECT_MAP) {
      int rc = source(q, ks, v, &src[(*nsrc)++]);
      if (rc != 0) return rc;
      continue;
    }
    if (pr_rpc_is_bytes(v)) {
      vs = pr_rpc_zstr(q, v, &err);
      if (vs == NULL && err == PR_ENOMEM) return err;
    } else if (pr_rpc_to_int(v, &iv)) {
      snprintf(num, sizeof(num), "%lld", (long long)iv);
      vs = num;
    }
    if (ks == NULL || vs == NULL || ks[0] == 0 || strchr(ks, '='))
      return pr_rpc_bad(q, 0, "spec", w);
    size_t len = strlen(ks) + strlen(vs) + 2;
    char *kv = msgpack_zone_malloc(q->zone, len);
    if (kv == NULL) return PR_ENOMEM;
    snprintf(kv, len, "%s=%s", ks, vs);
    kvs[nkv++] = kv;
  }
  *out = kvs;
  *n_out = nkv;
  if (src_out) *src_out = src;
  return 0;
}

/* The `worker` field of a start spec: true (every default) or a map like the
 * Lua core's (doc *proctor-workers*). */
static int worker_spec(pr_rpc_req_t *q, const msgpack_object *w, pr_worker_spec_t *ws) {
  static const char *const protos[] = {"jsonl", "msgpack-rpc", NULL};
  static const char *const restarts[] = {"never", "on-failure", "always", NULL};
  static const char *const keys[] = {"protocol",   "restart",        "max_restarts",
                                     "backoff_ms", "backoff_max_ms", "healthy_ms",
                                     "ready",      "max_chunks",     NULL};
  memset(ws, 0, sizeof(*ws));
  ws->max_restarts = -1;
  ws->restart = PR_WR_ON_FAILURE;
  if (w->type == MSGPACK_OBJECT_BOOLEAN) return 0;
  if (w->type != MSGPACK_OBJECT_MAP)
    return pr_rpc_bad(q, 0, "spec", "'worker' must be a map (or true)");
  for (uint32_t i = 0; i < w->via.map.size; i++) {
    int known = 0;
    for (const char *const *k = keys; *k && !known; k++)
      known = pr_mp_key_is(&w->via.map.ptr[i].key, *k);
    if (!known) return pr_rpc_bad(q, 0, "spec", "unknown key in 'worker'");
  }
  const char *p = NULL, *r = NULL;
  int64_t mr = -1, bo = 0, bmax = 0, healthy = 0, chunks = 0;
  int rc;
  if ((rc = spec_str(q, w, "protocol", &p)) || (rc = spec_str(q, w, "restart", &r)) ||
      (rc = pr_rpc_spec_int(q, w, "max_restarts", 1000000, &mr)) ||
      (rc = pr_rpc_spec_int(q, w, "backoff_ms", 3600000, &bo)) ||
      (rc = pr_rpc_spec_int(q, w, "backoff_max_ms", 3600000, &bmax)) ||
      (rc = pr_rpc_spec_int(q, w, "healthy_ms", 86400000, &healthy)) ||
      (rc = pr_rpc_spec_int(q, w, "max_chunks", 1000000, &chunks)))
    return rc;
  for (int i = 0; p && protos[i]; i++)
    if (strcmp(p, protos[i]) == 0) ws->protocol = (pr_worker_protocol_t)i, p = NULL;
  if (p) return pr_rpc_bad(q, 0, "spec", "worker.protocol must be \"jsonl\" or \"msgpack-rpc\"");
  for (int i = 0; r && restarts[i]; i++)
    if (strcmp(r, restarts[i]) == 0) ws->restart = (pr_worker_restart_t)i, r = NULL;
  if (r)
    return pr_rpc_bad(q, 0, "spec",
                      "worker.restart must be \"never\", \"on-failure\" or \"always\"");
  ws->max_restarts = (int32_t)mr;
  ws->backoff_ms = (uint32_t)bo;
  ws->backoff_max_ms = (uint32_t)bmax;
  ws->healthy_ms = (uint32_t)healthy;
  ws->max_chunks = (uint32_t)chunks;
  const msgpack_object *ready = pr_rpc_map_get(w, "ready");
  if (ready) {
    if (ready->type != MSGPACK_OBJECT_MAP)
      return pr_rpc_bad(q, 0, "spec", "worker.ready must be a map");
    if ((rc = spec_bool(q, ready, "message", &ws->ready_message)) ||
        (rc = spec_str(q, ready, "stderr_pattern", &ws->ready_stderr)))
      return rc;
  }
  return 0;
}

/* The fields of a start spec `sp` into *s (strings in the request's zone;
 * the worker spec, when there is one, in *ws), and kill_on_disconnect. */
int pr_rpc_parse_spec(pr_rpc_req_t *q, const msgpack_object *sp, pr_spec_t *s, pr_worker_spec_t *ws,
                      int *kod) {
  int rc, err = 0;
  memset(s, 0, sizeof(*s));
  int64_t cols = 0, rows = 0, timeout = 0, grace = -1;
  *kod = 0;
  if ((rc = spec_str(q, sp, "cwd", &s->cwd)) || (rc = spec_str(q, sp, "label", &s->label)) ||
      (rc = spec_bool(q, sp, "clear_env", &s->clear_env)) ||
      (rc = spec_bool(q, sp, "pty", &s->pty)) || (rc = spec_bool(q, sp, "stdin", &s->stdin_pipe)) ||
      (rc = spec_bool(q, sp, "backpressure", &s->backpressure)) ||
      (rc = spec_bool(q, sp, "hold", &s->hold)) ||
      (rc = spec_bool(q, sp, "kill_on_disconnect", kod)) ||
      (rc = pr_rpc_spec_int(q, sp, "cols", 65535, &cols)) ||
      (rc = pr_rpc_spec_int(q, sp, "rows", 65535, &rows)) ||
      (rc = pr_rpc_spec_int(q, sp, "timeout_ms", (int64_t)1 << 50, &timeout)) ||
      (rc = pr_rpc_spec_int(q, sp, "kill_grace_ms", 3600000, &grace)))
    return rc;
  s->cols = (uint16_t)cols;
  s->rows = (uint16_t)rows;
  s->timeout_ms = (uint64_t)timeout;
  s->kill_grace_ms = grace;
  const msgpack_object *cmd = pr_rpc_map_get(sp, "cmd");
  if (cmd && pr_rpc_is_bytes(cmd)) {
    if ((s->shell = pr_rpc_zstr(q, cmd, &err)) == NULL || s->shell[0] == 0)
      return err == PR_ENOMEM
                 ? err
                 : pr_rpc_bad(q, 0, "spec", "'cmd' must be a non-empty string without NUL");
  } else if (cmd && cmd->type == MSGPACK_OBJECT_ARRAY && cmd->via.array.size > 0) {
    uint32_t n = cmd->via.array.size;
    const char **argv = q->zone ? msgpack_zone_malloc(q->zone, n * sizeof(char *)) : NULL;
    if (argv == NULL) return PR_ENOMEM;
    for (uint32_t i = 0; i < n; i++)
      if ((argv[i] = pr_rpc_zstr(q, &cmd->via.array.ptr[i], &err)) == NULL)
        return err == PR_ENOMEM
                   ? err
                   : pr_rpc_bad(q, 0, "spec", "'cmd' entries must be strings without NUL");
    s->argv = argv;
    s->argc = n;
  } else {
    return pr_rpc_bad(q, 0, "spec",
                      "'cmd' must be a string (run by /bin/sh -c) or a non-empty list of strings");
  }
  if ((rc = kv_list(q, pr_rpc_map_get(sp, "env"), "env", &s->env, &s->envc, NULL, NULL)) != 0 ||
      (rc = kv_list(q, pr_rpc_map_get(sp, "secrets"), "secrets", &s->secrets, &s->nsecrets,
                    &s->sources, &s->nsources)) != 0)
    return rc;
  if (pr_vault_check(s) != 0) return pr_rpc_bad(q, 0, "spec", bad_source);
  const msgpack_object *allow = pr_rpc_map_get(sp, "env_allow");
  if (allow) {
    if (allow->type != MSGPACK_OBJECT_ARRAY)
      return pr_rpc_bad(q, 0, "spec", "'env_allow' must be a list of variable names");
    uint32_t n = allow->via.array.size;
    const char **names = msgpack_zone_malloc(q->zone, (n ? n : 1) * sizeof(char *));
    if (names == NULL) return PR_ENOMEM;
    for (uint32_t i = 0; i < n; i++)
      if ((names[i] = pr_rpc_zstr(q, &allow->via.array.ptr[i], &err)) == NULL || names[i][0] == 0 ||
          strchr(names[i], '='))
        return err == PR_ENOMEM ? err
                                : pr_rpc_bad(q, 0, "spec", "'env_allow' entries must be names");
    s->env_allow = names;
    s->nallow = n;
  }
  const msgpack_object *wk = pr_rpc_map_get(sp, "worker");
  if (wk && !(wk->type == MSGPACK_OBJECT_BOOLEAN && !wk->via.boolean)) {
    if ((rc = worker_spec(q, wk, ws)) != 0) return rc;
    s->worker = ws;
  }
  return 0;
}
