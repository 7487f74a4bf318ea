/* base/spec_fill.c — a start spec read through a reader, once for every
 * surface: the keys, types, bounds, defaults and error messages of
 * PR_SPEC_FIELDS and PR_WORKER_FIELDS (include/proctor.h). The Lua table of
 * eng:start (lua/binding.c) and the msgpack map of RPC `start` (rpc/params.c)
 * are its two readers; each reads only values, never decides a rule.
 *
 *   reader (Lua table | msgpack map) ──kind/boolean/integer/string/sub──► pr_spec_fill
 *                                    ◄──structured (cmd, env, secrets, env_allow)──┘
 *
 * Thread: any (the caller's). Nothing here is shared.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "include/proctor.h"

static const pr_spec_field_info_t spec_info[] = {
#define X(NAME, key, type, member, def, max, surfaces, help) \
  {key, PR_ST_##type, (long long)(def), (long long)(max), surfaces, help},
    PR_SPEC_FIELDS(X)
#undef X
};

static const pr_spec_field_info_t worker_info[] = {
#define X(NAME, key, type, member, def, max, surfaces, help) \
  {key, PR_ST_##type, (long long)(def), (long long)(max), surfaces, help},
    PR_WORKER_FIELDS(X)
#undef X
};

static const char *const worker_keys[] = {
#define X(NAME, key, type, member, def, max, surfaces, help) key,
    PR_WORKER_FIELDS(X)
#undef X
};

static const char *const ready_keys[] = {"message", "stderr_pattern"};

const pr_spec_field_info_t *pr_spec_fields(size_t *n) {
  *n = PR_SF_COUNT;
  return spec_info;
}

const pr_spec_field_info_t *pr_worker_fields(size_t *n) {
  *n = PR_WF_COUNT;
  return worker_info;
}

const char *pr_spec_type_name(pr_spec_type_t t) {
  switch (t) {
  case PR_ST_BOOL: return "boolean";
  case PR_ST_UINT:
  case PR_ST_GRACE: return "integer";
  case PR_ST_STR: return "string";
  case PR_ST_CMD: return "command";
  case PR_ST_ENV: return "env";
  case PR_ST_SECRETS: return "secrets";
  case PR_ST_NAMES: return "names";
  case PR_ST_WORKER: return "worker";
  case PR_ST_ENUM: return "enum";
  case PR_ST_READY: return "ready";
  }
  return "?";
}

/* What a value was, for "got ...": never its text (a string may be a secret). */
static const char *kind_name(pr_spec_kind_t k) {
  switch (k) {
  case PR_SV_NONE: return "nothing";
  case PR_SV_BOOL: return "a boolean";
  case PR_SV_INT: return "an integer";
  case PR_SV_NUMBER: return "a number";
  case PR_SV_STR: return "a string";
  case PR_SV_LIST: return "a list";
  case PR_SV_MAP: return "a map";
  case PR_SV_OTHER: break;
  }
  return "another type";
}

static int bad(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return PR_EINVAL;
}

/* The readers of one value each: absent leaves *out as it is. `at` prefixes
 * the key in messages ("worker."). */
static int read_bool(pr_spec_reader_t *r, const void *m, const char *at, const char *key, int *out,
                     char *err, size_t n) {
  pr_spec_kind_t k = r->kind(r, m, key);
  if (k == PR_SV_NONE) return 0;
  if (k != PR_SV_BOOL)
    return bad(err, n, "field '%s%s' must be a boolean, got %s", at, key, kind_name(k));
  *out = r->boolean(r, m, key) != 0;
  return 0;
}

static int read_uint(pr_spec_reader_t *r, const void *m, const char *at, const char *key,
                     long long max, int64_t *out, char *err, size_t n) {
  pr_spec_kind_t k = r->kind(r, m, key);
  if (k == PR_SV_NONE) return 0;
  int64_t v = k == PR_SV_INT ? r->integer(r, m, key) : -1;
  if (k == PR_SV_INT && v >= 0 && v <= max) {
    *out = v;
    return 0;
  }
  if (k == PR_SV_INT)
    return bad(err, n, "field '%s%s' must be an integer in [0, %lld], got %lld", at, key, max,
               (long long)v);
  return bad(err, n, "field '%s%s' must be an integer in [0, %lld], got %s", at, key, max,
             kind_name(k));
}

static int read_str(pr_spec_reader_t *r, const void *m, const char *at, const char *key,
                    const char **out, char *err, size_t n) {
  pr_spec_kind_t k = r->kind(r, m, key);
  if (k == PR_SV_NONE) return 0;
  if (k != PR_SV_STR)
    return bad(err, n, "field '%s%s' must be a string without NUL bytes, got %s", at, key,
               kind_name(k));
  int e = PR_EINVAL;
  if ((*out = r->string(r, m, key, &e)) != NULL) return 0;
  if (e != PR_EINVAL) return e;
  return bad(err, n, "field '%s%s' must be a string without NUL bytes, got one with a NUL byte", at,
             key);
}

/* An ENUM of the worker table: its index among the names of base/names.c. */
static int read_enum(pr_spec_reader_t *r, const void *m, pr_worker_field_t f, int *out, char *err,
                     size_t n) {
  const char *key = worker_info[f].key, *s = NULL;
  const char *(*name)(int) = f == PR_WF_PROTOCOL ? pr_worker_protocol_name : pr_worker_restart_name;
  int (*from)(const char *) =
      f == PR_WF_PROTOCOL ? pr_worker_protocol_from_name : pr_worker_restart_from_name;
  int rc = read_str(r, m, "worker.", key, &s, err, n);
  if (rc != 0 || s == NULL) return rc;
  int i = from(s);
  if (i >= 0) {
    *out = i;
    return 0;
  }
  char names[96] = "";
  for (int j = 0; name(j); j++) {
    size_t len = strlen(names);
    snprintf(names + len, sizeof(names) - len, "%s\"%s\"",
             j == 0        ? ""
             : name(j + 1) ? ", "
                           : " or ",
             name(j));
  }
  return bad(err, n, "field 'worker.%s' must be %s", key, names);
}

/* The first key of map m that is not among the `nk` keys in known, as an error. */
static int unknown(pr_spec_reader_t *r, const void *m, const char *at, const char *const *known,
                   size_t nk, char *err, size_t n) {
  char kb[48];
  const char *k = r->unknown(r, m, known, nk, kb, sizeof(kb));
  return k ? bad(err, n, "unknown option '%s%s'", at, k) : 0;
}

static int read_ready(pr_spec_reader_t *r, const void *w, pr_worker_spec_t *ws, char *err,
                      size_t n) {
  pr_spec_kind_t k = r->kind(r, w, "ready");
  if (k == PR_SV_NONE) return 0;
  if (k != PR_SV_MAP)
    return bad(err, n, "field 'worker.ready' must be a map {message, stderr_pattern}, got %s",
               kind_name(k));
  const void *rd = r->sub(r, w, "ready");
  int rc;
  if ((rc = unknown(r, rd, "worker.ready.", ready_keys, 2, err, n)) ||
      (rc = read_bool(r, rd, "worker.ready.", "message", &ws->ready_message, err, n)) ||
      (rc = read_str(r, rd, "worker.ready.", "stderr_pattern", &ws->ready_stderr, err, n)))
    return rc;
  return 0;
}

/* The `worker` field: absent or false: none; true: every default; a map. */
static int read_worker(pr_spec_reader_t *r, pr_spec_read_t *out, char *err, size_t n) {
  const void *m = r->map;
  pr_spec_kind_t k = r->kind(r, m, "worker");
  if (k == PR_SV_NONE || (k == PR_SV_BOOL && !r->boolean(r, m, "worker"))) return 0;
  pr_worker_spec_t *ws = &out->worker;
  memset(ws, 0, sizeof(*ws));
#define X(NAME, key, type, member, def, max, surfaces, help) ws->member = (def);
  PR_WORKER_FIELDS(X)
#undef X
  out->spec.worker = ws;
  if (k == PR_SV_BOOL) return 0;
  if (k != PR_SV_MAP)
    return bad(err, n, "field 'worker' must be true or a map of worker options, got %s",
               kind_name(k));
  const void *w = r->sub(r, m, "worker");
  int rc, e;
  int64_t v;
  if ((rc = unknown(r, w, "worker.", worker_keys, PR_WF_COUNT, err, n)) != 0) return rc;
#define WFILL_ENUM(NAME, key, member, max)                              \
  e = (int)ws->member;                                                  \
  if ((rc = read_enum(r, w, PR_WF_##NAME, &e, err, n)) != 0) return rc; \
  ws->member = e;
#define WFILL_UINT(NAME, key, member, max)                                     \
  v = ws->member;                                                              \
  if ((rc = read_uint(r, w, "worker.", key, max, &v, err, n)) != 0) return rc; \
  ws->member = v;
#define WFILL_READY(NAME, key, member, max) \
  if ((rc = read_ready(r, w, ws, err, n)) != 0) return rc;
#define X(NAME, key, type, member, def, max, surfaces, help) WFILL_##type(NAME, key, member, max)
  PR_WORKER_FIELDS(X)
#undef X
#undef WFILL_ENUM
#undef WFILL_UINT
#undef WFILL_READY
  return 0;
}

int pr_spec_fill(pr_spec_reader_t *r, pr_spec_read_t *out, char *err, size_t n) {
  const void *m = r->map;
  const char *known[PR_SF_COUNT];
  size_t nk = 0;
  int rc, b;
  int64_t v;
  const char *s;
  memset(out, 0, sizeof(*out));
  if (n) err[0] = 0;
  for (size_t i = 0; i < PR_SF_COUNT; i++)
    if (spec_info[i].surfaces & r->surface) known[nk++] = spec_info[i].key;
  if ((rc = unknown(r, m, "", known, nk, err, n)) != 0) return rc;
#define FILL_BOOL(NAME, key, member, def, max)                     \
  b = (def);                                                       \
  if ((rc = read_bool(r, m, "", key, &b, err, n)) != 0) return rc; \
  out->member = b;
#define FILL_UINT(NAME, key, member, def, max)                          \
  v = (def);                                                            \
  if ((rc = read_uint(r, m, "", key, max, &v, err, n)) != 0) return rc; \
  out->member = v;
#define FILL_GRACE FILL_UINT
#define FILL_STR(NAME, key, member, def, max)                     \
  s = NULL;                                                       \
  if ((rc = read_str(r, m, "", key, &s, err, n)) != 0) return rc; \
  out->member = s;
#define FILL_STRUCTURED(NAME, key, member, def, max) \
  if ((rc = r->structured(r, PR_SF_##NAME, out, err, n)) != 0) return rc;
#define FILL_CMD FILL_STRUCTURED
#define FILL_ENV FILL_STRUCTURED
#define FILL_SECRETS FILL_STRUCTURED
#define FILL_NAMES FILL_STRUCTURED
#define FILL_WORKER(NAME, key, member, def, max) \
  if ((rc = read_worker(r, out, err, n)) != 0) return rc;
#define X(NAME, key, type, member, def, max, surfaces, help) \
  if ((surfaces)&r->surface) {                               \
    FILL_##type(NAME, key, member, def, max)                 \
  }
  PR_SPEC_FIELDS(X)
#undef X
  return 0;
}
