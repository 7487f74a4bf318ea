/* call.c — the table of tool calls in progress, their answers, and the RPC
 * requests made for them. See call.h.
 *
 * Thread: main.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"

static call_t *calls;
static uint64_t next_serial = 1;

/* ---- the table ---------------------------------------------------------------------------- */

call_t *mc_call_find(uint64_t serial) {
  for (call_t *c = calls; c; c = c->next)
    if (c->serial == serial) return c;
  return NULL;
}

void mc_call_free(call_t *c) {
  for (call_t **p = &calls; *p; p = &(*p)->next)
    if (*p == c) {
      *p = c->next;
      break;
    }
  mc_timer_stop(&c->timer);
  cJSON_Delete(c->req_id);
  cJSON_Delete(c->token);
  cJSON_Delete(c->args);
  cJSON_Delete(c->rec);
  cJSON_Delete(c->tails[0]);
  cJSON_Delete(c->tails[1]);
  mc_interact_free(c->ix);
  free(c);
}

call_t *mc_call_new(const cJSON *req_id, tool_id_t tool) {
  call_t *c = calloc(1, sizeof(*c));
  if (c == NULL) return NULL;
  c->serial = next_serial++;
  c->req_id = cJSON_Duplicate(req_id, 1);
  c->tool = tool;
  c->next = calls;
  calls = c;
  return c;
}

static int same_id(const cJSON *a, const cJSON *b) {
  if (cJSON_IsNumber(a) && cJSON_IsNumber(b)) return a->valuedouble == b->valuedouble;
  if (cJSON_IsString(a) && cJSON_IsString(b)) return strcmp(a->valuestring, b->valuestring) == 0;
  return 0;
}

call_t *mc_call_find_request(const cJSON *id) {
  for (call_t *c = calls; c; c = c->next)
    if (!c->cancelled && same_id(c->req_id, id)) return c;
  return NULL;
}

/* ---- results ------------------------------------------------------------------------------ */

static cJSON *text_content(const char *text) {
  cJSON *content = cJSON_CreateArray();
  cJSON *t = cJSON_CreateObject();
  cJSON_AddStringToObject(t, "type", "text");
  cJSON_AddStringToObject(t, "text", text);
  cJSON_AddItemToArray(content, t);
  return content;
}

void mc_call_fail(call_t *c, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  cJSON *res = cJSON_CreateObject();
  cJSON_AddItemToObject(res, "content", text_content(msg));
  cJSON_AddBoolToObject(res, "isError", 1);
  mc_mask_json(res);
  mc_respond(c->req_id, res);
  mc_call_free(c);
}

/* The first result of an embedded engine also says, in its text, that the user
 * cannot see the run (the agent can tell them; a line on stderr reaches nobody). */
static const char embedded_note[] =
    "Note: proctor-mcp found no running editor's proctor socket and runs this in its own "
    "embedded engine: the user cannot see this run in their editor. To run commands where the "
    "user sees them, start proctor in Neovim before the agent (any :Proctor command starts its "
    "socket) or name the socket with --socket or $PROCTOR_SOCKET (:help proctor-mcp-mode).";

void mc_call_done(call_t *c, cJSON *sc) {
  static int told; /* the embedded note was given */
  const char *mode = mc_connect_mode();
  int note = !told && strcmp(mode, "embedded") == 0;
  if (cJSON_IsObject(sc) && !cJSON_GetObjectItemCaseSensitive(sc, "mode"))
    cJSON_AddStringToObject(sc, "mode", mode);
  mc_mask_json(sc);
  char *text = cJSON_PrintUnformatted(sc);
  if (text == NULL) {
    cJSON_Delete(sc);
    mc_call_fail(c, "out of memory");
    return;
  }
  cJSON *res = cJSON_CreateObject();
  cJSON *content = text_content(text);
  if (note) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "type", "text");
    cJSON_AddStringToObject(t, "text", embedded_note);
    cJSON_AddItemToArray(content, t);
    told = 1;
  }
  cJSON_AddItemToObject(res, "content", content);
  cJSON_AddItemToObject(res, "structuredContent", sc);
  free(text);
  mc_respond(c->req_id, res);
  mc_call_free(c);
}

void mc_call_rpc_fail(call_t *c, const cJSON *err) {
  const cJSON *name = cJSON_GetArrayItem(err, 0), *msg = cJSON_GetArrayItem(err, 1);
  mc_call_fail(c, "%s: %s", cJSON_IsString(name) ? name->valuestring : "ERROR",
               cJSON_IsString(msg) ? msg->valuestring : "unknown error");
}

call_t *mc_call_record(uint64_t tag, const mc_reply_t *r) {
  call_t *c = mc_call_answered(tag);
  if (c == NULL) return NULL;
  if (r->err) {
    mc_call_rpc_fail(c, r->err);
    return NULL;
  }
  cJSON_Delete(c->rec);
  c->rec = cJSON_Duplicate(r->result, 1);
  return c;
}

int mc_call_rpc(call_t *c, const char *method, cJSON *params, mc_rpc_cb cb, int slot) {
  int rc = mc_rpc_call(method, params, cb, c->serial << 2 | (uint64_t)slot);
  if (rc == -2) {
    mc_call_fail(c, "%s", mc_rpc_refused());
    return -1;
  }
  if (rc != 0) {
    mc_call_fail(c, "proctor is not reachable: %s",
                 mc_rpc_lost()[0] ? mc_rpc_lost() : "not connected");
    return -1;
  }
  c->inflight++;
  return 0;
}

call_t *mc_call_answered(uint64_t tag) {
  call_t *c = mc_call_find(tag >> 2);
  if (c == NULL) return NULL;
  c->inflight--;
  if (c->cancelled) {
    if (c->inflight <= 0) mc_call_free(c);
    return NULL;
  }
  return c;
}
