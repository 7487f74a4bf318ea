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
  int rc = pr_rpc_not_yours(q, id);
  if (rc) return rc;
  snprintf(q->msg, sizeof(q->msg), "%s %llu", pr_strerror(PR_ENOENT), (unsigned long long)id);
  return PR_ENOENT;
}

/* An error code from the engine, with the id in the message like the Lua core. */
int pr_rpc_fail_id(pr_rpc_req_t *q, int rc, uint64_t id) {
  if (rc == PR_ENOENT) return pr_rpc_not_found(q, id);
  if (rc == PR_ENOENT || rc == PR_ENOTRUNNING || rc == PR_ESTDINCLOSED)
    snprintf(q->msg, sizeof(q->msg), "%s %llu", pr_strerror(rc), (unsigned long long)id);
  return rc;
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

/* ---- the start spec: the msgpack reader of pr_spec_fill ------------------------------- */

/* A map is a msgpack_object of type MAP; the spec's strings are copied into
 * the request's zone. */
#define RQ(r) ((pr_rpc_req_t *)(r)->arg)

static pr_spec_kind_t mkind(pr_spec_reader_t *r, const void *m, const char *key) {
  const msgpack_object *v = pr_rpc_map_get(m, key);
  int64_t i;
  if (v == NULL) return PR_SV_NONE;
  switch (v->type) {
  case MSGPACK_OBJECT_BOOLEAN: return PR_SV_BOOL;
  case MSGPACK_OBJECT_POSITIVE_INTEGER:
  case MSGPACK_OBJECT_NEGATIVE_INTEGER:
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64: return pr_rpc_to_int(v, &i) ? PR_SV_INT : PR_SV_NUMBER;
  case MSGPACK_OBJECT_STR:
  case MSGPACK_OBJECT_BIN: return PR_SV_STR;
  case MSGPACK_OBJECT_ARRAY: return PR_SV_LIST;
  case MSGPACK_OBJECT_MAP: return PR_SV_MAP;
  default: return PR_SV_OTHER;
  }
}

static int mboolean(pr_spec_reader_t *r, const void *m, const char *key) {
  const msgpack_object *v = pr_rpc_map_get(m, key);
  return v && v->type == MSGPACK_OBJECT_BOOLEAN && v->via.boolean;
}

static int64_t minteger(pr_spec_reader_t *r, const void *m, const char *key) {
  int64_t i = 0;
  const msgpack_object *v = pr_rpc_map_get(m, key);
  if (v) pr_rpc_to_int(v, &i);
  return i;
}

static const char *mstring(pr_spec_reader_t *r, const void *m, const char *key, int *err) {
  const msgpack_object *v = pr_rpc_map_get(m, key);
  return v ? pr_rpc_zstr(RQ(r), v, err) : NULL;
}

static const void *msub(pr_spec_reader_t *r, const void *m, const char *key) {
  return pr_rpc_map_get(m, key);
}

static const char *munknown(pr_spec_reader_t *r, const void *m, const char *const *known, size_t nk,
                            char *buf, size_t len) {
  const msgpack_object *o = m;
  for (uint32_t k = 0; k < o->via.map.size; k++) {
    const msgpack_object *key = &o->via.map.ptr[k].key;
    int ok = 0;
    for (size_t i = 0; i < nk && !ok; i++) ok = pr_mp_key_is(key, known[i]);
    if (!ok) return pr_rpc_key_text(key, buf, len);
  }
  return NULL;
}

/* cmd: a string for /bin/sh -c, or a non-empty list of strings. The texts
 * are the Lua reader's (lua/spec.c). */
static int mcmd(pr_rpc_req_t *q, const msgpack_object *sp, pr_spec_t *s, char *e, size_t n) {
  const msgpack_object *cmd = pr_rpc_map_get(sp, "cmd");
  int err = PR_EINVAL;
  if (cmd && pr_rpc_is_bytes(cmd)) {
    if ((s->shell = pr_rpc_zstr(q, cmd, &err)) == NULL || s->shell[0] == 0)
      return err == PR_ENOMEM
                 ? err
                 : (snprintf(e, n, "'cmd' must be a non-empty string without NUL bytes"),
                    PR_EINVAL);
    return 0;
  }
  if (cmd && cmd->type == MSGPACK_OBJECT_ARRAY) {
    uint32_t k = cmd->via.array.size;
    if (k == 0) return snprintf(e, n, "'cmd' list must not be empty"), PR_EINVAL;
    const char **argv = q->zone ? msgpack_zone_malloc(q->zone, k * sizeof(char *)) : NULL;
    if (argv == NULL) return PR_ENOMEM;
    for (uint32_t i = 0; i < k; i++)
      if ((argv[i] = pr_rpc_zstr(q, &cmd->via.array.ptr[i], &err)) == NULL)
        return err == PR_ENOMEM
                   ? err
                   : (snprintf(e, n, "'cmd' entries must be strings without NUL bytes"), PR_EINVAL);
    s->argv = argv;
    s->argc = k;
    return 0;
  }
  snprintf(e, n, "'cmd' must be a string (run by /bin/sh -c) or a non-empty list of strings");
  return PR_EINVAL;
}

/* env_allow: a list of variable names. */
static int mallow(pr_rpc_req_t *q, const msgpack_object *allow, pr_spec_t *s) {
  int err = 0;
  if (allow == NULL) return 0;
  if (allow->type != MSGPACK_OBJECT_ARRAY)
    return pr_rpc_bad(q, 0, "spec", "'env_allow' must be a list of names");
  uint32_t n = allow->via.array.size;
  const char **names = msgpack_zone_malloc(q->zone, (n ? n : 1) * sizeof(char *));
  if (names == NULL) return PR_ENOMEM;
  for (uint32_t i = 0; i < n; i++)
    if ((names[i] = pr_rpc_zstr(q, &allow->via.array.ptr[i], &err)) == NULL || names[i][0] == 0 ||
        strchr(names[i], '='))
      return err == PR_ENOMEM
                 ? err
                 : pr_rpc_bad(q, 0, "spec",
                              "'env_allow' entries must be non-empty names without '=' or NUL");
  s->env_allow = names;
  s->nallow = n;
  return 0;
}

/* The structured fields. Their own checks report through pr_rpc_bad (q->msg);
 * what pr_spec_fill gets is the text after "bad argument #1 (spec): ". */
static int mstructured(pr_spec_reader_t *r, pr_spec_field_t f, struct pr_spec_read *out, char *e,
                       size_t n) {
  pr_rpc_req_t *q = RQ(r);
  const msgpack_object *sp = r->map;
  pr_spec_t *s = &out->spec;
  int rc = 0;
  q->msg[0] = 0;
  switch (f) {
  case PR_SF_CMD: return mcmd(q, sp, s, e, n);
  case PR_SF_ENV:
    rc = kv_list(q, pr_rpc_map_get(sp, "env"), "env", &s->env, &s->envc, NULL, NULL);
    break;
  case PR_SF_SECRETS:
    rc = kv_list(q, pr_rpc_map_get(sp, "secrets"), "secrets", &s->secrets, &s->nsecrets,
                 &s->sources, &s->nsources);
    if (rc == 0 && pr_vault_check(s) != 0) rc = pr_rpc_bad(q, 0, "spec", bad_source);
    break;
  case PR_SF_ENV_ALLOW: rc = mallow(q, pr_rpc_map_get(sp, "env_allow"), s); break;
  default: break;
  }
  if (rc == PR_EINVAL) {
    const char *what = strstr(q->msg, "(spec): ");
    snprintf(e, n, "%s", what ? what + 8 : q->msg);
  }
  return rc;
}

int pr_rpc_read_spec(pr_rpc_req_t *q, const msgpack_object *sp, pr_spec_read_t *out) {
  pr_spec_reader_t r = {.arg = q,
                        .surface = PR_SPEC_RPC,
                        .map = sp,
                        .kind = mkind,
                        .boolean = mboolean,
                        .integer = minteger,
                        .string = mstring,
                        .sub = msub,
                        .unknown = munknown,
                        .structured = mstructured};
  char err[sizeof(q->msg) - 32]; /* room for "bad argument #1 (spec): " */
  int rc = pr_spec_fill(&r, out, err, sizeof(err));
  if (rc == PR_EINVAL) return pr_rpc_bad(q, 0, "spec", err);
  return rc;
}
