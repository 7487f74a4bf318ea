/* era.c — the two eras of MCP proctor-mcp speaks on one stdio process:
 * legacy (2025-11-25, 2025-06-18: an `initialize` handshake, then requests)
 * and modern (2026-07-28: no handshake; every request carries its protocol
 * version and the client's capabilities in `_meta`, every result says its
 * `resultType`).
 *
 * Thread: main.
 *
 *   request ─► mc_era_check: initialize → legacy handshake (main.c)
 *                            _meta protocolVersion → served statelessly in that version
 *                            (2026-07-28: the id is remembered until it is answered)
 *                            neither, before initialize → refused (only ping passes)
 *   answer  ─► mc_era_decorate (send.c): a remembered id's result gets
 *              resultType "complete" and _meta serverInfo
 *
 * A request without the envelope before `initialize` is refused rather than
 * served under legacy semantics: a 2026-07-28 client that skipped the
 * `server/discover` probe then fails at once instead of running a command
 * under rules it did not ask for.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp.h"

#define META_VERSION "io.modelcontextprotocol/protocolVersion"
#define META_CAPS "io.modelcontextprotocol/clientCapabilities"
#define META_CLIENT "io.modelcontextprotocol/clientInfo"
#define META_SERVER "io.modelcontextprotocol/serverInfo"

const char *const mc_versions[] = {MC_MODERN_VERSION, "2025-11-25", "2025-06-18", NULL};

static int initialized; /* a legacy initialize was answered */
static int named;       /* the client's name came from a request */

/* The ids of 2026-07-28 requests not answered yet. */
typedef struct pending {
  cJSON *id;
  struct pending *next;
} pending_t;
static pending_t *pending;

static int same_id(const cJSON *a, const cJSON *b) {
  if (cJSON_IsNumber(a) && cJSON_IsNumber(b)) return a->valuedouble == b->valuedouble;
  if (cJSON_IsString(a) && cJSON_IsString(b)) return strcmp(a->valuestring, b->valuestring) == 0;
  return 0;
}

/* Take `id` out of the pending list: 1 when it was there. */
static int take(const cJSON *id) {
  for (pending_t **p = &pending; id && *p; p = &(*p)->next)
    if (same_id((*p)->id, id)) {
      pending_t *x = *p;
      *p = x->next;
      cJSON_Delete(x->id);
      free(x);
      return 1;
    }
  return 0;
}

void mc_era_initialized(void) { initialized = 1; }

int mc_era_modern(const cJSON *id) {
  for (pending_t *p = pending; id && p; p = p->next)
    if (same_id(p->id, id)) return 1;
  return 0;
}

void mc_era_forget(const cJSON *id) { take(id); }

void mc_era_decorate(const cJSON *id, cJSON *result) {
  if (!take(id) || !cJSON_IsObject(result)) return;
  if (!cJSON_GetObjectItemCaseSensitive(result, "resultType"))
    cJSON_AddStringToObject(result, "resultType", "complete");
  cJSON *meta = cJSON_GetObjectItemCaseSensitive(result, "_meta");
  if (!cJSON_IsObject(meta)) meta = cJSON_AddObjectToObject(result, "_meta");
  if (meta && !cJSON_GetObjectItemCaseSensitive(meta, META_SERVER))
    cJSON_AddItemToObject(meta, META_SERVER, mc_server_info());
}

cJSON *mc_server_info(void) {
  cJSON *si = cJSON_CreateObject();
  cJSON_AddStringToObject(si, "name", "proctor-mcp");
  cJSON_AddStringToObject(si, "title", "proctor");
  cJSON_AddStringToObject(si, "version", MC_VERSION);
  return si;
}

/* -32022 with the versions we speak and the one asked for. */
static void unsupported(const cJSON *id, const char *requested) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "jsonrpc", "2.0");
  cJSON_AddItemToObject(m, "id", cJSON_Duplicate(id, 1));
  cJSON *e = cJSON_AddObjectToObject(m, "error");
  cJSON_AddNumberToObject(e, "code", MC_UNSUPPORTED_VERSION);
  cJSON_AddStringToObject(e, "message", "Unsupported protocol version");
  cJSON *d = cJSON_AddObjectToObject(e, "data");
  cJSON *s = cJSON_AddArrayToObject(d, "supported");
  for (size_t i = 0; mc_versions[i]; i++)
    cJSON_AddItemToArray(s, cJSON_CreateString(mc_versions[i]));
  cJSON_AddStringToObject(d, "requested", requested);
  mc_send(m);
}

int mc_era_check(const cJSON *id, const char *method, const cJSON *params) {
  const cJSON *meta = params ? cJSON_GetObjectItemCaseSensitive(params, "_meta") : NULL;
  const cJSON *pv =
      cJSON_IsObject(meta) ? cJSON_GetObjectItemCaseSensitive(meta, META_VERSION) : NULL;
  if (strcmp(method, "initialize") == 0) return 0; /* always the legacy handshake */
  if (pv == NULL) {
    if (strcmp(method, "server/discover") == 0) {
      mc_respond_error(id, -32602,
                       "invalid params: server/discover needs _meta." META_VERSION
                       " and _meta." META_CAPS " (MCP 2026-07-28)");
      return -1;
    }
    if (!initialized && strcmp(method, "ping") != 0) {
      char msg[512];
      snprintf(msg, sizeof(msg),
               "invalid request: %.100s before initialize: send initialize first (MCP "
               "2025-11-25 and earlier), or give _meta." META_VERSION " and _meta." META_CAPS
               " on every request (MCP " MC_MODERN_VERSION ")",
               method);
      mc_respond_error(id, -32600, msg);
      return -1;
    }
    return 0;
  }
  if (!cJSON_IsString(pv)) {
    mc_respond_error(id, -32602, "invalid params: _meta." META_VERSION " must be a string");
    return -1;
  }
  int known = 0;
  for (size_t i = 0; mc_versions[i]; i++) known |= strcmp(pv->valuestring, mc_versions[i]) == 0;
  if (!known) {
    unsupported(id, pv->valuestring);
    return -1;
  }
  if (!cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(meta, META_CAPS))) {
    mc_respond_error(
        id, -32602, "invalid params: _meta." META_CAPS " (an object) is required on every request");
    return -1;
  }
  /* The first name a request gives is the client's (it names the owner of its runs). */
  const cJSON *ci = cJSON_GetObjectItemCaseSensitive(meta, META_CLIENT);
  const cJSON *name = cJSON_IsObject(ci) ? cJSON_GetObjectItemCaseSensitive(ci, "name") : NULL;
  if (!named && cJSON_IsString(name) && name->valuestring[0]) {
    mc_set_client_name(name->valuestring);
    named = 1;
  }
  if (strcmp(pv->valuestring, MC_MODERN_VERSION) == 0) {
    pending_t *p = calloc(1, sizeof(*p));
    if (p == NULL || (p->id = cJSON_Duplicate(id, 1)) == NULL) {
      free(p);
      mc_respond_error(id, -32603, "out of memory");
      return -1;
    }
    p->next = pending;
    pending = p;
  }
  return 0;
}
