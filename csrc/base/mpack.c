/* base/mpack.c — msgpack helpers and JSON text <-> msgpack. See mpack.h.
 *
 * Thread: any.
 */
#include "base/mpack.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "include/proctor.h"

#define MAX_DEPTH 64

int pr_mp_str(msgpack_packer *pk, const char *s) { return pr_mp_strn(pk, s, strlen(s)); }

int pr_mp_strn(msgpack_packer *pk, const char *s, size_t n) {
  return msgpack_pack_str(pk, n) || msgpack_pack_str_body(pk, s ? s : "", n);
}

int pr_mp_kv_str(msgpack_packer *pk, const char *k, const char *v) {
  return pr_mp_str(pk, k) || pr_mp_str(pk, v);
}

int pr_mp_kv_int(msgpack_packer *pk, const char *k, int64_t v) {
  return pr_mp_str(pk, k) || msgpack_pack_int64(pk, v);
}

int pr_mp_kv_u64(msgpack_packer *pk, const char *k, uint64_t v) {
  return pr_mp_str(pk, k) || msgpack_pack_uint64(pk, v);
}

int pr_mp_kv_bool(msgpack_packer *pk, const char *k, int v) {
  return pr_mp_str(pk, k) || (v ? msgpack_pack_true(pk) : msgpack_pack_false(pk));
}

int pr_mp_cmd(msgpack_packer *pk, const pr_record_t *r) {
  if (r->shell) return pr_mp_str(pk, r->shell);
  if (msgpack_pack_array(pk, r->argc)) return -1;
  for (size_t i = 0; i < r->argc; i++)
    if (pr_mp_str(pk, r->argv && r->argv[i] ? r->argv[i] : "")) return -1;
  return 0;
}

int pr_mp_key_is(const msgpack_object *o, const char *name) {
  size_t n = strlen(name);
  if (o->type == MSGPACK_OBJECT_STR)
    return o->via.str.size == n && memcmp(o->via.str.ptr, name, n) == 0;
  if (o->type == MSGPACK_OBJECT_BIN)
    return o->via.bin.size == n && memcmp(o->via.bin.ptr, name, n) == 0;
  return 0;
}

/* ---- msgpack -> cJSON -> text --------------------------------------------------------- */

/* A str or bin as a cJSON string, repaired to valid UTF-8. */
static cJSON *string(const char *p, uint32_t n) {
  char *s = pr_utf8_clean(p, n); /* borrowed bytes are not NUL-terminated */
  cJSON *j = s ? cJSON_CreateString(s) : NULL;
  free(s);
  return j;
}

static cJSON *to_cjson(const msgpack_object *o, int depth) {
  if (depth > MAX_DEPTH) return cJSON_CreateNull();
  switch (o->type) {
  case MSGPACK_OBJECT_BOOLEAN: return cJSON_CreateBool(o->via.boolean);
  case MSGPACK_OBJECT_POSITIVE_INTEGER: return cJSON_CreateNumber((double)o->via.u64);
  case MSGPACK_OBJECT_NEGATIVE_INTEGER: return cJSON_CreateNumber((double)o->via.i64);
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64: return cJSON_CreateNumber(o->via.f64);
  case MSGPACK_OBJECT_STR: return string(o->via.str.ptr, o->via.str.size);
  case MSGPACK_OBJECT_BIN: return string(o->via.bin.ptr, o->via.bin.size);
  case MSGPACK_OBJECT_ARRAY: {
    cJSON *a = cJSON_CreateArray();
    for (uint32_t i = 0; a && i < o->via.array.size; i++) {
      cJSON *v = to_cjson(&o->via.array.ptr[i], depth + 1);
      if (v == NULL) {
        cJSON_Delete(a);
        return NULL;
      }
      cJSON_AddItemToArray(a, v);
    }
    return a;
  }
  case MSGPACK_OBJECT_MAP: {
    cJSON *m = cJSON_CreateObject();
    for (uint32_t i = 0; m && i < o->via.map.size; i++) {
      const msgpack_object *k = &o->via.map.ptr[i].key;
      char *key;
      if (k->type == MSGPACK_OBJECT_STR) key = pr_utf8_clean(k->via.str.ptr, k->via.str.size);
      else if (k->type == MSGPACK_OBJECT_BIN) key = pr_utf8_clean(k->via.bin.ptr, k->via.bin.size);
      else {
        size_t n;
        key = pr_mp_to_json(k, &n); /* a non-string key: its JSON text */
      }
      cJSON *v = key ? to_cjson(&o->via.map.ptr[i].val, depth + 1) : NULL;
      if (v == NULL) {
        free(key);
        cJSON_Delete(m);
        return NULL;
      }
      cJSON_AddItemToObject(m, key, v);
      free(key);
    }
    return m;
  }
  default: return cJSON_CreateNull(); /* nil, ext */
  }
}

cJSON *pr_mp_to_cjson(const msgpack_object *o) { return to_cjson(o, 0); }

char *pr_mp_to_json(const msgpack_object *o, size_t *n) {
  cJSON *j = to_cjson(o, 0);
  char *s = j ? cJSON_PrintUnformatted(j) : NULL;
  cJSON_Delete(j);
  *n = s ? strlen(s) : 0;
  return s;
}

/* ---- JSON text -> msgpack ------------------------------------------------------------ */

static int pack_cjson(msgpack_packer *pk, const cJSON *j, int depth) {
  if (depth > MAX_DEPTH || j == NULL || cJSON_IsNull(j)) return msgpack_pack_nil(pk);
  if (cJSON_IsFalse(j)) return msgpack_pack_false(pk);
  if (cJSON_IsTrue(j)) return msgpack_pack_true(pk);
  if (cJSON_IsNumber(j)) {
    double d = j->valuedouble;
    if (d > -9.2e18 && d < 9.2e18 && (double)(int64_t)d == d)
      return d >= 0 ? msgpack_pack_uint64(pk, (uint64_t)d) : msgpack_pack_int64(pk, (int64_t)d);
    return msgpack_pack_double(pk, d);
  }
  if (cJSON_IsString(j)) return pr_mp_str(pk, j->valuestring);
  if (cJSON_IsArray(j)) {
    if (msgpack_pack_array(pk, (size_t)cJSON_GetArraySize(j))) return -1;
    for (const cJSON *c = j->child; c; c = c->next)
      if (pack_cjson(pk, c, depth + 1)) return -1;
    return 0;
  }
  if (cJSON_IsObject(j)) {
    if (msgpack_pack_map(pk, (size_t)cJSON_GetArraySize(j))) return -1;
    for (const cJSON *c = j->child; c; c = c->next)
      if (pr_mp_str(pk, c->string ? c->string : "") || pack_cjson(pk, c, depth + 1)) return -1;
    return 0;
  }
  return msgpack_pack_nil(pk);
}

int pr_mp_pack_cjson(msgpack_packer *pk, const cJSON *j) { return pack_cjson(pk, j, 0); }

int pr_mp_pack_json(msgpack_packer *pk, const char *json, size_t len) {
  cJSON *j = len ? cJSON_ParseWithLength(json, len) : cJSON_CreateNull();
  if (j == NULL) return PR_EINVAL;
  int rc = pack_cjson(pk, j, 0) ? PR_ENOMEM : 0;
  cJSON_Delete(j);
  return rc;
}
