/* engine/worker_msgpack.c — the msgpack-rpc worker protocol (the protocol of
 * `nvim --embed`).
 *
 * Thread: engine (the encoders touch only their arguments: any thread).
 * worker.h keeps msgpack types opaque; JSON text <-> msgpack is base/mpack.c.
 *
 *   proctor → worker  [0, rid, method, params]        a request (msgid = request id)
 *                     [2, "proctor_cancel", [rid]]     interrupt request rid
 *   worker → proctor  [1, rid, nil, result]            final result
 *                     [1, rid, error, nil]             final error (a string, or any value: JSON)
 *                     [2, "proctor_chunk", [rid, v]]   partial result of rid
 *                     [2, "proctor_ready", []]         readiness (any message counts, see doc)
 *
 * A payload {method = "m", params = [...]} is sent as method m with those
 * params; any other payload as method "request" with params [payload]. The
 * parser reports each message through its callback; it knows nothing of
 * requests.
 */
#include <cjson/cJSON.h>
#include <msgpack.h>
#include <stdlib.h>
#include <string.h>

#include "base/mpack.h"
#include "base/mpscan.h"
#include "engine/worker.h"

/* Entries and nesting one message may declare (its bytes: PR_WORKER_MSG_MAX). */
#define WMP_MAX_OBJECTS (1u << 20)
#define WMP_MAX_DEPTH 64

struct pr_wmp {
  msgpack_unpacker *up;
  pr_mp_scan_t scan; /* frames stdout before msgpack-c allocates for it */
  size_t lead;       /* bytes after up->off already framed */
  pr_wparse_cb_t cb;
};

pr_wmp_t *pr_wmp_new(const pr_wparse_cb_t *cb) {
  pr_wmp_t *u = malloc(sizeof(*u));
  if (u == NULL) return NULL;
  if ((u->up = msgpack_unpacker_new(65536)) == NULL) {
    free(u);
    return NULL;
  }
  u->cb = *cb;
  u->lead = 0;
  pr_mp_scan_init(&u->scan, PR_WORKER_MSG_MAX, WMP_MAX_OBJECTS, WMP_MAX_DEPTH);
  return u;
}

void pr_wmp_free(pr_wmp_t *u) {
  if (u == NULL) return;
  msgpack_unpacker_free(u->up);
  free(u);
}

/* ---- encoding ------------------------------------------------------------------------ */

char *pr_wmp_request(uint64_t rid, const char *json, size_t len, size_t *n, int *err) {
  cJSON *j = len ? cJSON_ParseWithLength(json, len) : cJSON_CreateNull();
  if (j == NULL) {
    *err = PR_EINVAL;
    return NULL;
  }
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  cJSON *m = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "method") : NULL;
  cJSON *p = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "params") : NULL;
  int bad = msgpack_pack_array(&pk, 4) || msgpack_pack_int(&pk, 0) || msgpack_pack_uint64(&pk, rid);
  if (cJSON_IsObject(p) && p->child == NULL) p = NULL; /* {} is an empty Lua table: no params */
  if (!bad && cJSON_IsString(m) && (p == NULL || cJSON_IsArray(p)))
    bad = pr_mp_str(&pk, m->valuestring) ||
          (p ? pr_mp_pack_cjson(&pk, p) : msgpack_pack_array(&pk, 0));
  else if (!bad)
    bad = pr_mp_str(&pk, "request") || msgpack_pack_array(&pk, 1) || pr_mp_pack_cjson(&pk, j);
  cJSON_Delete(j);
  if (bad) {
    msgpack_sbuffer_destroy(&sb);
    *err = PR_ENOMEM;
    return NULL;
  }
  *n = sb.size;
  return msgpack_sbuffer_release(&sb);
}

char *pr_wmp_cancel(uint64_t rid, size_t *n) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  if (msgpack_pack_array(&pk, 3) || msgpack_pack_int(&pk, 2) || pr_mp_str(&pk, "proctor_cancel") ||
      msgpack_pack_array(&pk, 1) || msgpack_pack_uint64(&pk, rid)) {
    msgpack_sbuffer_destroy(&sb);
    return NULL;
  }
  *n = sb.size;
  return msgpack_sbuffer_release(&sb);
}

/* ---- decoding ------------------------------------------------------------------------ */

static int str_is(const msgpack_object *o, const char *s) {
  return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
         memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

static int get_u64(const msgpack_object *o, uint64_t *v) {
  if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER) return 0;
  *v = o->via.u64;
  return 1;
}

/* The worker asked us something: we serve nothing, say so. */
static void refuse(pr_wmp_t *u, const msgpack_object *msgid) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
  if (!(msgpack_pack_array(&pk, 4) || msgpack_pack_int(&pk, 1) ||
        msgpack_pack_object(&pk, *msgid) ||
        pr_mp_str(&pk, "proctor: requests from a worker are not supported") ||
        msgpack_pack_nil(&pk)))
    u->cb.write(u->cb.arg, sb.data, sb.size);
  msgpack_sbuffer_destroy(&sb);
}

/* A decoded value as JSON text, masked (NULL when out of memory). `as_text`:
 * a str is the message itself (an error), not its JSON. */
static char *decode(pr_wmp_t *u, const msgpack_object *o, int as_text, size_t *len) {
  cJSON *j = pr_mp_to_cjson(o);
  if (j == NULL) return NULL;
  if (u->cb.mask) u->cb.mask(u->cb.arg, j);
  char *t = NULL;
  if (as_text && cJSON_IsString(j)) t = strdup(j->valuestring);
  else t = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  *len = t ? strlen(t) : 0;
  return t;
}

static void handle(pr_wmp_t *u, const msgpack_object *o) {
  void (*message)(void *, pr_worker_msg_t, uint64_t, char *, size_t) = u->cb.message;
  void *x = u->cb.arg;
  const msgpack_object *a = o->type == MSGPACK_OBJECT_ARRAY ? o->via.array.ptr : NULL;
  uint32_t n = a ? o->via.array.size : 0;
  uint64_t type, rid;
  size_t len;
  char *text;
  if (n == 4 && get_u64(&a[0], &type) && type == 1 && get_u64(&a[1], &rid)) {
    if (a[2].type == MSGPACK_OBJECT_NIL) {
      text = decode(u, &a[3], 0, &len);
      message(x, text ? PR_WM_OK : PR_WM_STRAY, rid, text, len);
    } else {
      text = decode(u, &a[2], a[2].type == MSGPACK_OBJECT_STR, &len);
      message(x, text ? PR_WM_ERROR : PR_WM_STRAY, rid, text, len);
    }
    return;
  }
  if (n == 3 && get_u64(&a[0], &type) && type == 2) {
    const msgpack_object *p = &a[2];
    if (str_is(&a[1], "proctor_chunk") && p->type == MSGPACK_OBJECT_ARRAY &&
        p->via.array.size == 2 && get_u64(&p->via.array.ptr[0], &rid)) {
      text = decode(u, &p->via.array.ptr[1], 0, &len);
      message(x, text ? PR_WM_CHUNK : PR_WM_STRAY, rid, text, len);
      return;
    }
    message(x, str_is(&a[1], "proctor_ready") ? PR_WM_READY : PR_WM_STRAY, 0, NULL, 0);
    return;
  }
  if (n == 4 && get_u64(&a[0], &type) && type == 0) refuse(u, &a[1]);
  message(x, PR_WM_STRAY, 0, NULL, 0);
}

/* Garbage or a message over the limits: nothing to resync on, drop what is
 * buffered and start over. */
static void drop_all(pr_wmp_t *w, pr_worker_msg_t why) {
  w->cb.message(w->cb.arg, why, 0, NULL, 0);
  msgpack_unpacker_reset(w->up);
  w->up->off = w->up->used;
  w->lead = 0;
  pr_mp_scan_init(&w->scan, PR_WORKER_MSG_MAX, WMP_MAX_OBJECTS, WMP_MAX_DEPTH);
}

void pr_wmp_feed(pr_wmp_t *w, const char *p, size_t n) {
  msgpack_unpacker *u = w->up;
  if (!msgpack_unpacker_reserve_buffer(u, n)) {
    w->cb.message(w->cb.arg, PR_WM_OVERSIZE, 0, NULL, 0);
    return;
  }
  memcpy(msgpack_unpacker_buffer(u), p, n);
  msgpack_unpacker_buffer_consumed(u, n);
  /* Frame the new bytes first: msgpack-c only ever sees whole messages whose
   * declared sizes the scanner bounded. */
  size_t used = 0;
  unsigned done = 0;
  int rc = pr_mp_scan(&w->scan, (const unsigned char *)u->buffer + u->off + w->lead,
                      u->used - u->off - w->lead, &used, &done);
  w->lead += used;
  msgpack_unpacked r;
  msgpack_unpacked_init(&r);
  for (; done > 0; done--) {
    size_t bytes = 0;
    if (msgpack_unpacker_next_with_size(u, &r, &bytes) != MSGPACK_UNPACK_SUCCESS ||
        bytes > w->lead) {
      rc = PR_EPROTO; /* the framing disagreed: never expected */
      break;
    }
    w->lead -= bytes;
    handle(w, &r.data);
  }
  msgpack_unpacked_destroy(&r);
  if (rc != 0) drop_all(w, rc == PR_ETOOBIG ? PR_WM_OVERSIZE : PR_WM_INVALID);
}
