/* progress.c — notifications/progress while run and wait wait: every
 * mc_opts.progress_ms, for a client that sent _meta.progressToken, the
 * elapsed time, the output so far and its last line.
 *
 * Thread: main.
 *
 *   timer ─► get ─► read the last PROGRESS_TAIL bytes ─► notifications/progress
 *
 * One round at a time (progress_busy); a round whose call stopped waiting
 * meanwhile sends nothing.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"

static void progress_sent(call_t *c, const cJSON *rec, const char *line) {
  double elapsed = (double)(mc_now_ms() - c->started_ms) / 1000.0;
  if (elapsed <= c->last_progress) elapsed = c->last_progress + 0.001; /* must increase */
  c->last_progress = elapsed;
  char msg[256];
  int pty = mc_rec_pty(rec);
  double out = mc_rec_bytes(rec, pty ? "pty" : "stdout") + (pty ? 0 : mc_rec_bytes(rec, "stderr"));
  int k = snprintf(msg, sizeof(msg), "#%llu %s for %.0f s, %.0f bytes of output",
                   (unsigned long long)c->id,
                   mc_rec_str(rec, "state") ? mc_rec_str(rec, "state") : "running", elapsed, out);
  if (line && *line && k > 0 && (size_t)k < sizeof(msg))
    snprintf(msg + k, sizeof(msg) - (size_t)k, ": %s", line);
  cJSON *n = cJSON_CreateObject();
  cJSON_AddStringToObject(n, "jsonrpc", "2.0");
  cJSON_AddStringToObject(n, "method", "notifications/progress");
  cJSON *p = cJSON_AddObjectToObject(n, "params");
  cJSON_AddItemToObject(p, "progressToken", cJSON_Duplicate(c->token, 1));
  cJSON_AddNumberToObject(p, "progress", elapsed);
  cJSON_AddStringToObject(p, "message", msg);
  mc_mask_json(n);
  mc_send(n);
}

/* The last non-empty line of a tail (at most 120 bytes, control bytes dropped). */
static void last_line(const char *s, char *out, size_t outlen) {
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ')) n--;
  size_t b = n;
  while (b > 0 && s[b - 1] != '\n' && s[b - 1] != '\r') b--;
  size_t o = 0;
  for (size_t i = b; i < n && o + 1 < outlen && o < 120; i++)
    if ((unsigned char)s[i] >= 0x20 || s[i] == '\t') out[o++] = s[i];
  while (o > 0 && ((unsigned char)out[o - 1] & 0xC0) == 0x80) /* keep whole characters */
    o--;
  if (o > 0 && ((unsigned char)out[o - 1] & 0xC0) == 0xC0) o--;
  out[o] = 0;
}

static void on_progress_read(uint64_t tag, const mc_reply_t *r) {
  call_t *c = mc_call_answered(tag);
  if (c == NULL) return;
  c->progress_busy = 0;
  if (r->err || c->rec == NULL) return;
  size_t skip, len;
  char *text = mc_answer_text(r, 1, &skip, &len);
  char line[160] = "";
  if (text) last_line(text, line, sizeof(line));
  free(text);
  if (mc_timer_active(&c->timer)) progress_sent(c, c->rec, line);
}

static void on_progress_get(uint64_t tag, const mc_reply_t *r) {
  call_t *c = mc_call_answered(tag);
  if (c == NULL) return;
  if (r->err || !mc_timer_active(&c->timer)) {
    c->progress_busy = 0;
    return;
  }
  cJSON_Delete(c->rec);
  c->rec = cJSON_Duplicate(r->result, 1);
  const char *s = mc_rec_pty(c->rec) ? "pty" : "stdout";
  double total = mc_rec_bytes(c->rec, s);
  cJSON *p = mc_params2(cJSON_CreateNumber((double)c->id), cJSON_CreateString(s));
  cJSON_AddItemToArray(p, cJSON_CreateNumber(total > PROGRESS_TAIL ? total - PROGRESS_TAIL : 0));
  cJSON_AddItemToArray(p, cJSON_CreateNumber(PROGRESS_TAIL));
  if (mc_rpc_call("read", p, on_progress_read, c->serial << 2) == 0) c->inflight++;
  else c->progress_busy = 0;
}

void mc_progress_tick(mc_timer_t *t) {
  call_t *c = (call_t *)((char *)t - offsetof(call_t, timer));
  mc_timer_start(&c->timer, mc_opts.progress_ms);
  if (c->progress_busy) return; /* the previous one is still being put together */
  if (mc_rpc_call("get", mc_params1(cJSON_CreateNumber((double)c->id)), on_progress_get,
                  c->serial << 2) == 0) {
    c->inflight++;
    c->progress_busy = 1;
  }
}
