/* engine/worker_jsonl.c — the JSON lines worker protocol.
 *
 * Thread: engine (the encoders touch only their arguments: any thread).
 *
 *   proctor → worker  {"id":"<rid>","type":"request","payload":<json>}\n
 *                     {"id":"<rid>","type":"cancel"}\n
 *   worker → proctor  {"id":"<rid>","status":"ok","result":<json>}
 *                     {"id":"<rid>","status":"chunk","chunk":<json>}
 *                     {"id":"<rid>","status":"error","error":"message" | <json>}
 *                     {"type":"ready"}
 *
 * The parser cuts stdout into lines (one growable buffer for a line split
 * across reads, at most PR_WORKER_MSG_MAX bytes) and reports each message
 * through its callback; it knows nothing of requests.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/worker.h"

void pr_jsonl_init(pr_jsonl_t *p, const pr_wparse_cb_t *cb) {
  memset(p, 0, sizeof(*p));
  p->cb = *cb;
}

void pr_jsonl_reset(pr_jsonl_t *p) {
  p->line.len = 0;
  p->skipping = 0;
}

void pr_jsonl_free(pr_jsonl_t *p) { pr_buf_free(&p->line); }

char *pr_jsonl_request(uint64_t rid, const char *json, size_t len, size_t *n) {
  char *m = malloc(len + 64);
  if (m == NULL) return NULL;
  int k = snprintf(m, 64,
                   "{\"id\":\"%llu\",\"type\":\"request\",\"payload\":", (unsigned long long)rid);
  memcpy(m + k, len ? json : "null", len ? len : 4);
  k += (int)(len ? len : 4);
  memcpy(m + k, "}\n", 2);
  *n = (size_t)k + 2;
  return m;
}

char *pr_jsonl_cancel(uint64_t rid, size_t *n) {
  char buf[64];
  int k = snprintf(buf, sizeof(buf), "{\"id\":\"%llu\",\"type\":\"cancel\"}\n",
                   (unsigned long long)rid);
  *n = (size_t)k;
  return strndup(buf, (size_t)k);
}

/* One complete stdout line of a jsonl worker. */
static void jsonl_line(pr_jsonl_t *jp, const char *p, size_t n) {
  while (n && (p[n - 1] == '\r' || p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
  size_t i = 0;
  while (i < n && (p[i] == ' ' || p[i] == '\t')) i++;
  if (i == n) return; /* blank */
  cJSON *j = cJSON_ParseWithLength(p + i, n - i);
  if (j == NULL) {
    jp->cb.message(jp->cb.arg, PR_WM_INVALID, 0, NULL, 0);
    return;
  }
  pr_worker_msg_t kind = PR_WM_STRAY;
  uint64_t rid = 0;
  char *text = NULL;
  size_t len = 0;
  if (cJSON_IsObject(j)) {
    cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
    cJSON *st = cJSON_GetObjectItemCaseSensitive(j, "status");
    cJSON *ty = cJSON_GetObjectItemCaseSensitive(j, "type");
    int has_id = 0;
    if (cJSON_IsString(id)) {
      char *end;
      rid = strtoull(id->valuestring, &end, 10);
      has_id = *id->valuestring && *end == 0;
    } else if (cJSON_IsNumber(id) && id->valuedouble >= 0) {
      rid = (uint64_t)id->valuedouble;
      has_id = 1;
    }
    if (cJSON_IsString(ty) && strcmp(ty->valuestring, "ready") == 0 && !st) {
      kind = PR_WM_READY;
    } else if (has_id && cJSON_IsString(st)) {
      const char *s = st->valuestring;
      cJSON *v = NULL;
      if (strcmp(s, "ok") == 0) kind = PR_WM_OK, v = cJSON_GetObjectItemCaseSensitive(j, "result");
      else if (strcmp(s, "chunk") == 0)
        kind = PR_WM_CHUNK, v = cJSON_GetObjectItemCaseSensitive(j, "chunk");
      else if (strcmp(s, "error") == 0)
        kind = PR_WM_ERROR, v = cJSON_GetObjectItemCaseSensitive(j, "error");
      if (v && jp->cb.mask) jp->cb.mask(jp->cb.arg, v); /* the decoded value, never the line */
      if (kind == PR_WM_ERROR && cJSON_IsString(v)) text = strdup(v->valuestring);
      else if (kind != PR_WM_STRAY)
        text = v ? cJSON_PrintUnformatted(v) : strdup(kind == PR_WM_ERROR ? "error" : "null");
      if (kind != PR_WM_STRAY && text == NULL) kind = PR_WM_STRAY; /* out of memory */
      len = text ? strlen(text) : 0;
    }
  }
  cJSON_Delete(j);
  jp->cb.message(jp->cb.arg, kind, rid, text, len);
}

void pr_jsonl_feed(pr_jsonl_t *w, const char *p, size_t n) {
  while (n) {
    const char *nl = memchr(p, '\n', n);
    size_t take = nl ? (size_t)(nl - p) : n;
    if (w->skipping) {
      if (nl) w->skipping = 0;
    } else if (w->line.len + take > PR_WORKER_MSG_MAX) {
      w->line.len = 0;
      w->skipping = nl == NULL;
      w->cb.message(w->cb.arg, PR_WM_OVERSIZE, 0, NULL, 0);
    } else if (nl && w->line.len == 0) {
      jsonl_line(w, p, take); /* the common case: a whole line in this read */
    } else {
      if (pr_buf_add(&w->line, p, take) != 0) { /* out of memory: drop the line */
        w->line.err = 0;
        w->line.len = 0;
        w->skipping = nl == NULL;
        w->cb.message(w->cb.arg, PR_WM_OVERSIZE, 0, NULL, 0);
        goto next;
      }
      if (nl) {
        size_t total = w->line.len;
        w->line.len = 0;
        jsonl_line(w, w->line.p, total);
      }
    }
  next:
    if (!nl) break;
    n -= take + 1;
    p = nl + 1;
  }
  if (w->line.cap > (1u << 20) && w->line.len == 0)
    pr_buf_free(&w->line); /* a huge line's memory back */
}
