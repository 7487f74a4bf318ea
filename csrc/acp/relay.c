/* relay.c — what passes between the ACP client and the agent, and what
 * proctor-acp changes on the way.
 *
 * Thread: main.
 *
 * Every line is forwarded as it came (its bytes untouched) except:
 *   - the client's `initialize`: clientCapabilities.terminal is set to true
 *     toward the agent. When the client had not set it, we serve terminals:
 *   - the agent's terminal/... requests are answered here (term.c), never
 *     forwarded;
 *   - in the agent's session/update notifications, each {type:"terminal"}
 *     block becomes a text block ("running in proctor #12: make test"), as the
 *     client could not show it.
 * A client that advertised terminals gets everything untouched (we serve none),
 * unless --always (ac_relay_always) says to serve them anyway.
 *
 * Every request gets exactly one answer: the requests each side sent and the
 * other has not answered are remembered (by id, at most AC_PENDING_MAX each
 * way; one more is answered "busy" at once), and when a side ends, each of
 * the other's requests still waiting on it is answered with an error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "acp.h"

typedef struct pend {
  char *key;    /* the id printed as JSON */
  cJSON *id;    /* the id (owned) */
  int new_sess; /* a session/new: its answer names the session of `cwd` */
  char *cwd;
  struct pend *next;
} pend_t;

typedef struct sess {
  char *sid, *cwd;
  struct sess *next;
} sess_t;

static pend_t *pending[2]; /* [s]: requests side s sent, not answered yet */
static size_t npending[2];
static sess_t *sessions;
static size_t nsessions;
static int serving;  /* the client has no terminals: we serve them */
static int ended[2]; /* [s]: side s ended (its new requests are answered here, at once) */

static int always; /* --always: serve terminals whatever the client has */

int ac_serving(void) { return serving; }
void ac_relay_always(void) { always = 1; }

/* ---- answers ------------------------------------------------------------------------------------ */

static cJSON *envelope(const cJSON *id) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "jsonrpc", "2.0");
  cJSON_AddItemToObject(m, "id", id ? cJSON_Duplicate(id, 1) : cJSON_CreateNull());
  return m;
}

void ac_answer(int to, const cJSON *id, cJSON *result) {
  cJSON *m = envelope(id);
  cJSON_AddItemToObject(m, "result", result);
  ac_out_json(&ac_to[to], m);
}

void ac_answer_error(int to, const cJSON *id, int code, const char *msg, cJSON *data) {
  cJSON *m = envelope(id);
  cJSON *e = cJSON_AddObjectToObject(m, "error");
  cJSON_AddNumberToObject(e, "code", code);
  cJSON_AddStringToObject(e, "message", msg);
  if (data) cJSON_AddItemToObject(e, "data", data);
  ac_out_json(&ac_to[to], m);
}

/* ---- requests in flight --------------------------------------------------------------------------- */

static int valid_id(const cJSON *id) {
  return cJSON_IsString(id) ||
         (cJSON_IsNumber(id) && id->valuedouble == (double)(int64_t)id->valuedouble);
}

/* Remember the request `id` of side s. Returns 0, or -1 when AC_PENDING_MAX are in flight. */
static int pend_add(int s, const cJSON *id, pend_t **out) {
  if (npending[s] >= AC_PENDING_MAX) return -1;
  pend_t *p = calloc(1, sizeof(*p));
  if (p == NULL || (p->key = cJSON_PrintUnformatted(id)) == NULL) {
    free(p);
    return -1;
  }
  p->id = cJSON_Duplicate(id, 1);
  p->next = pending[s];
  pending[s] = p;
  npending[s]++;
  if (out) *out = p;
  return 0;
}

static void pend_free(pend_t *p) {
  free(p->key);
  free(p->cwd);
  cJSON_Delete(p->id);
  free(p);
}

/* Take the request `id` of side s out of the table (NULL when not there). */
static pend_t *pend_take(int s, const cJSON *id) {
  char *key = cJSON_PrintUnformatted(id);
  if (key == NULL) return NULL;
  pend_t *found = NULL;
  for (pend_t **pp = &pending[s]; *pp; pp = &(*pp)->next)
    if (strcmp((*pp)->key, key) == 0) {
      found = *pp;
      *pp = found->next;
      npending[s]--;
      break;
    }
  free(key);
  return found;
}

void ac_relay_gone(int gone, const char *why) {
  int asker = !gone; /* the side whose requests `gone` will never answer */
  ended[gone] = 1;
  while (pending[asker]) {
    pend_t *p = pending[asker];
    pending[asker] = p->next;
    ac_answer_error(asker, p->id, AC_E_INTERNAL, why, NULL);
    pend_free(p);
  }
  npending[asker] = 0;
}

/* ---- sessions ----------------------------------------------------------------------------------- */

static void session_set(const char *sid, const char *cwd) {
  for (sess_t *s = sessions; s; s = s->next)
    if (strcmp(s->sid, sid) == 0) {
      char *c = strdup(cwd);
      if (c) {
        free(s->cwd);
        s->cwd = c;
      }
      return;
    }
  if (nsessions >= AC_TERMS_MAX) return; /* the default cwd then */
  sess_t *s = calloc(1, sizeof(*s));
  if (s == NULL || (s->sid = strdup(sid)) == NULL || (s->cwd = strdup(cwd)) == NULL) {
    if (s) free(s->sid);
    free(s);
    return;
  }
  s->next = sessions;
  sessions = s;
  nsessions++;
}

const char *ac_session_cwd(const char *sid) {
  for (sess_t *s = sessions; s; s = s->next)
    if (strcmp(s->sid, sid) == 0) return s->cwd;
  return NULL;
}

/* ---- client -> agent ---------------------------------------------------------------------------- */

static const cJSON *get(const cJSON *o, const char *k) {
  return cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

static const char *get_str(const cJSON *o, const char *k) {
  const cJSON *v = get(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* initialize: note whether the client has terminals, and tell the agent it has. */
static void on_initialize(cJSON *m, cJSON *params) {
  cJSON *caps = cJSON_GetObjectItemCaseSensitive(params, "clientCapabilities");
  if (!cJSON_IsObject(caps)) {
    cJSON_DeleteItemFromObjectCaseSensitive(params, "clientCapabilities");
    caps = cJSON_AddObjectToObject(params, "clientCapabilities");
  }
  int has = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(caps, "terminal"));
  serving = always || !has;
  if (serving) {
    cJSON_DeleteItemFromObjectCaseSensitive(caps, "terminal");
    cJSON_AddTrueToObject(caps, "terminal");
  }
  mc_log("the client %s terminals: %s", has ? "has its own" : "has no",
         serving ? "proctor serves the agent's" : "passing everything through");
  (void)m;
}

void ac_from_client(const char *line, size_t len) {
  if (line == NULL) {
    mc_log("dropped a message from the client larger than %u bytes", AC_LINE_MAX);
    ac_answer_error(AC_CLIENT, NULL, -32700, "parse error: a message larger than 64 MiB", NULL);
    return;
  }
  cJSON *m = cJSON_ParseWithLength(line, len);
  const cJSON *id = get(m, "id"), *method = get(m, "method");
  int changed = 0;
  if (cJSON_IsString(method) && id) { /* a request */
    const char *meth = method->valuestring;
    cJSON *params = cJSON_GetObjectItemCaseSensitive(m, "params");
    pend_t *p = NULL;
    if (ended[AC_AGENT]) {
      ac_answer_error(AC_CLIENT, id, AC_E_INTERNAL, "proctor-acp: the agent exited", NULL);
      cJSON_Delete(m);
      return;
    }
    if (valid_id(id) && pend_add(AC_CLIENT, id, &p) != 0) {
      ac_answer_error(AC_CLIENT, id, AC_E_BUSY,
                      "proctor-acp: too many requests in flight to the agent", NULL);
      cJSON_Delete(m);
      return;
    }
    if (strcmp(meth, "initialize") == 0 && cJSON_IsObject(params)) {
      on_initialize(m, params);
      changed = serving;
    } else if (strcmp(meth, "session/new") == 0 && p && get_str(params, "cwd")) {
      p->new_sess = 1;
      p->cwd = strdup(get_str(params, "cwd"));
    } else if (strcmp(meth, "session/load") == 0 && get_str(params, "sessionId") &&
               get_str(params, "cwd")) {
      session_set(get_str(params, "sessionId"), get_str(params, "cwd"));
    }
  } else if (id && !method) { /* the client's answer to a request of the agent */
    pend_t *p = pend_take(AC_AGENT, id);
    if (p) pend_free(p);
  }
  if (changed) ac_out_json(&ac_to[AC_AGENT], m);
  else {
    ac_out_line(&ac_to[AC_AGENT], line, len);
    cJSON_Delete(m);
  }
}

/* ---- agent -> client ---------------------------------------------------------------------------- */

/* Replace each {type:"terminal", terminalId} inside `j` by a text block.
 * Returns the number replaced. */
static int terminals_as_text(cJSON *j, const char *sid) {
  int n = 0;
  for (cJSON *x = j ? j->child : NULL; x; x = x->next) {
    const char *type = get_str(x, "type"), *tid = get_str(x, "terminalId");
    if (type && tid && strcmp(type, "terminal") == 0) {
      char *text = ac_term_text(sid, tid);
      char buf[160];
      if (text == NULL) snprintf(buf, sizeof(buf), "terminal %.100s", tid);
      cJSON *block = cJSON_CreateObject();
      cJSON_AddStringToObject(block, "type", "content");
      cJSON *c = cJSON_AddObjectToObject(block, "content");
      cJSON_AddStringToObject(c, "type", "text");
      cJSON_AddStringToObject(c, "text", text ? text : buf);
      free(text);
      cJSON_ReplaceItemViaPointer(j, x, block);
      x = block;
      n++;
    } else if (cJSON_IsArray(x) || cJSON_IsObject(x)) {
      n += terminals_as_text(x, sid);
    }
  }
  return n;
}

void ac_from_agent(const char *line, size_t len) {
  if (line == NULL) {
    mc_log("dropped a message from the agent larger than %u bytes", AC_LINE_MAX);
    return;
  }
  cJSON *m = cJSON_ParseWithLength(line, len);
  const cJSON *id = get(m, "id"), *method = get(m, "method");
  int changed = 0;
  if (cJSON_IsString(method) && id) { /* a request of the agent */
    const char *meth = method->valuestring;
    if (serving && strncmp(meth, "terminal/", 9) == 0) {
      ac_term_request(meth, id, get(m, "params"));
      cJSON_Delete(m);
      return;
    }
    if (ended[AC_CLIENT]) {
      ac_answer_error(AC_AGENT, id, AC_E_INTERNAL, "proctor-acp: the client exited", NULL);
      cJSON_Delete(m);
      return;
    }
    if (valid_id(id) && pend_add(AC_AGENT, id, NULL) != 0) {
      ac_answer_error(AC_AGENT, id, AC_E_BUSY,
                      "proctor-acp: too many requests in flight to the client", NULL);
      cJSON_Delete(m);
      return;
    }
  } else if (cJSON_IsString(method)) { /* a notification */
    if (serving && strcmp(method->valuestring, "session/update") == 0) {
      cJSON *params = cJSON_GetObjectItemCaseSensitive(m, "params");
      const char *sid = get_str(params, "sessionId");
      changed =
          terminals_as_text(cJSON_GetObjectItemCaseSensitive(params, "update"), sid ? sid : "") > 0;
    }
  } else if (id) { /* the agent's answer to a request of the client */
    pend_t *p = pend_take(AC_CLIENT, id);
    const cJSON *res = get(m, "result");
    if (p && p->new_sess && p->cwd && get_str(res, "sessionId"))
      session_set(get_str(res, "sessionId"), p->cwd);
    if (p) pend_free(p);
  }
  if (changed) ac_out_json(&ac_to[AC_CLIENT], m);
  else {
    ac_out_line(&ac_to[AC_CLIENT], line, len);
    cJSON_Delete(m);
  }
}

void ac_relay_free(void) {
  for (int s = 0; s < 2; s++)
    while (pending[s]) {
      pend_t *p = pending[s];
      pending[s] = p->next;
      pend_free(p);
    }
  while (sessions) {
    sess_t *s = sessions;
    sessions = s->next;
    free(s->sid);
    free(s->cwd);
    free(s);
  }
}
