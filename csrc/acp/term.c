/* term.c — the agent's terminals, served as proctor executions: ACP's
 * terminal/create, terminal/output, terminal/wait_for_exit, terminal/kill and
 * terminal/release, each answered exactly once.
 *
 * Thread: main.
 *
 * A terminal is an execution under a pty, started through the RPC client
 * (csrc/mcp/rpc.c) on the connection made on first use (mc_connect: the
 * editor's socket, so its console shows the run, else an embedded engine).
 * Its terminalId is the execution id ("12"); it belongs to the ACP session
 * that created it (another session's lookup is "not found"), is labelled
 * "acp <sessionId>", and is started with kill_on_disconnect: when
 * proctor-acp ends (the agent or the client exited), the engine cancels it
 * (SIGTERM, SIGKILL after the grace period, the whole tree).
 *
 *   create:  [check params] ─► start ─► {terminalId}
 *   output:  get ─► read the newest pty bytes ─► render ─► (too little text: read more) ─► answer
 *   wait:    wait (no timeout) ─► {exitCode, signal}
 *   kill:    cancel ─► {}            release: cancel ─► {} (the id is "released" from then on)
 *
 * A request in progress is an op_t; its RPC answers find it by serial number.
 * At most AC_OPS_MAX are in progress (one more is answered "busy").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "acp.h"

#define TEXT_MAX 200 /* bytes of the command in the text standing for a terminal */

char ac_owner[MC_NAME_MAX + 1] = "proctor-acp";

typedef struct term {
  char *sid;    /* the ACP session */
  uint64_t id;  /* the execution (terminalId) */
  char *text;   /* the command, for ac_term_text */
  size_t limit; /* outputByteLimit */
  int released; /* terminal/release came: the id answers "released" */
  struct term *next;
} term_t;

typedef enum { OP_CREATE, OP_OUTPUT, OP_WAIT, OP_KILL, OP_RELEASE } op_kind_t;

typedef struct op {
  uint64_t serial;
  op_kind_t kind;
  cJSON *req_id; /* the agent's request id (owned) */
  char *sid;     /* create: the session; else that of the terminal */
  uint64_t id;   /* the execution */
  size_t limit;
  char *text; /* create: the command */
  cJSON *rec; /* output: the record (owned) */
  uint64_t window;
  struct op *next;
} op_t;

static term_t *terms;
static size_t nterms;
static op_t *ops;
static size_t nops;
static uint64_t next_serial = 1;

size_t ac_term_inflight(void) { return nops; }

/* ---- the tables ------------------------------------------------------------------------------ */

static term_t *term_find(const char *sid, const char *tid) {
  char *end;
  unsigned long long id = strtoull(tid, &end, 10);
  if (*tid == 0 || *end || id == 0) return NULL;
  for (term_t *t = terms; t; t = t->next)
    if (t->id == id && strcmp(t->sid, sid) == 0) return t;
  return NULL;
}

static void term_free(term_t *t) {
  free(t->sid);
  free(t->text);
  free(t);
}

/* Forget the oldest released terminal when the table is full. */
static void terms_trim(void) {
  while (nterms >= AC_TERMS_MAX) {
    term_t **last = NULL;
    for (term_t **pp = &terms; *pp; pp = &(*pp)->next)
      if ((*pp)->released) last = pp;
    if (last == NULL) return;
    term_t *t = *last;
    *last = t->next;
    term_free(t);
    nterms--;
  }
}

static op_t *op_new(op_kind_t kind, const cJSON *req_id) {
  op_t *o = calloc(1, sizeof(*o));
  if (o == NULL) return NULL;
  o->serial = next_serial++;
  o->kind = kind;
  o->req_id = cJSON_Duplicate(req_id, 1);
  o->next = ops;
  ops = o;
  nops++;
  return o;
}

static op_t *op_find(uint64_t serial) {
  for (op_t *o = ops; o; o = o->next)
    if (o->serial == serial) return o;
  return NULL;
}

static void op_free(op_t *o) {
  for (op_t **pp = &ops; *pp; pp = &(*pp)->next)
    if (*pp == o) {
      *pp = o->next;
      nops--;
      break;
    }
  cJSON_Delete(o->req_id);
  cJSON_Delete(o->rec);
  free(o->sid);
  free(o->text);
  free(o);
}

static void op_done(op_t *o, cJSON *result) {
  ac_answer(AC_AGENT, o->req_id, result);
  op_free(o);
}

static void op_fail(op_t *o, int code, const char *msg) {
  ac_answer_error(AC_AGENT, o->req_id, code, msg, NULL);
  op_free(o);
}

/* An RPC error [name, message] as the answer. */
static void op_rpc_fail(op_t *o, const cJSON *err) {
  const cJSON *name = cJSON_GetArrayItem(err, 0), *msg = cJSON_GetArrayItem(err, 1);
  char buf[512];
  snprintf(buf, sizeof(buf), "proctor: %s: %s", cJSON_IsString(name) ? name->valuestring : "ERROR",
           cJSON_IsString(msg) ? msg->valuestring : "unknown error");
  int gone = cJSON_IsString(name) && strcmp(name->valuestring, "ENOENT") == 0;
  op_fail(o, gone ? AC_E_NOT_FOUND : AC_E_INTERNAL, buf);
}

static int rpc(op_t *o, const char *method, cJSON *params, mc_rpc_cb cb) {
  int rc = mc_rpc_call(method, params, cb, o->serial);
  if (rc == 0) return 0;
  char buf[512];
  snprintf(buf, sizeof(buf), "proctor is not reachable: %s",
           rc == -2           ? mc_rpc_refused()
           : mc_rpc_lost()[0] ? mc_rpc_lost()
                              : "not connected");
  op_fail(o, AC_E_INTERNAL, buf);
  return -1;
}

static cJSON *id_params(uint64_t id) {
  cJSON *p = cJSON_CreateArray();
  cJSON_AddItemToArray(p, cJSON_CreateNumber((double)id));
  return p;
}

/* ---- records ------------------------------------------------------------------------------------ */

static const char *rec_str(const cJSON *rec, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static int rec_ended(const cJSON *rec) {
  const char *s = rec_str(rec, "state");
  return s && (strcmp(s, "completed") == 0 || strcmp(s, "failed") == 0 ||
               strcmp(s, "canceled") == 0 || strcmp(s, "timed_out") == 0);
}

static int rec_spawn_error(const cJSON *rec) {
  const char *r = rec_str(rec, "reason");
  return r && strcmp(r, "spawn_error") == 0;
}

/* {exitCode, signal} of an ended record (a command that could not start: 127). */
static cJSON *exit_status(const cJSON *rec) {
  cJSON *o = cJSON_CreateObject();
  const cJSON *code = cJSON_GetObjectItemCaseSensitive(rec, "exit_code");
  const cJSON *sig = cJSON_GetObjectItemCaseSensitive(rec, "signal");
  if (rec_spawn_error(rec)) cJSON_AddNumberToObject(o, "exitCode", 127);
  else if (cJSON_IsNumber(code)) cJSON_AddNumberToObject(o, "exitCode", code->valuedouble);
  if (!rec_spawn_error(rec) && cJSON_IsString(sig))
    cJSON_AddStringToObject(o, "signal", sig->valuestring);
  else if (!rec_spawn_error(rec) && cJSON_IsNumber(sig)) {
    char b[32];
    snprintf(b, sizeof(b), "%d", (int)sig->valuedouble);
    cJSON_AddStringToObject(o, "signal", b);
  }
  return o;
}

/* ---- terminal/create ----------------------------------------------------------------------------- */

static void on_started(uint64_t tag, const mc_reply_t *r) {
  op_t *o = op_find(tag);
  if (o == NULL) return;
  if (r->err) {
    op_rpc_fail(o, r->err);
    return;
  }
  if (!cJSON_IsNumber(r->result)) {
    op_fail(o, AC_E_INTERNAL, "proctor: start answered without an id");
    return;
  }
  term_t *t = calloc(1, sizeof(*t));
  uint64_t id = (uint64_t)r->result->valuedouble;
  if (t == NULL || (t->sid = strdup(o->sid)) == NULL) {
    free(t);
    cJSON *p = id_params(id);
    cJSON_AddItemToArray(p, cJSON_CreateFalse());
    mc_rpc_call("cancel", p, NULL, 0);
    op_fail(o, AC_E_INTERNAL, "out of memory");
    return;
  }
  terms_trim();
  t->id = id;
  t->limit = o->limit;
  t->text = o->text;
  o->text = NULL;
  t->next = terms;
  terms = t;
  nterms++;
  char tid[32];
  snprintf(tid, sizeof(tid), "%llu", (unsigned long long)id);
  cJSON *res = cJSON_CreateObject();
  cJSON_AddStringToObject(res, "terminalId", tid);
  op_done(o, res);
}

static int bad(const cJSON *id, const char *msg) {
  ac_answer_error(AC_AGENT, id, AC_E_INVALID_PARAMS, msg, NULL);
  return -1;
}

/* The start spec of terminal/create's params, or NULL after answering. */
static cJSON *create_spec(const cJSON *id, const cJSON *p, const char *sid, char **text,
                          size_t *limit) {
  const cJSON *command = cJSON_GetObjectItemCaseSensitive(p, "command");
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(p, "args");
  const cJSON *env = cJSON_GetObjectItemCaseSensitive(p, "env");
  const cJSON *cwd = cJSON_GetObjectItemCaseSensitive(p, "cwd");
  const cJSON *lim = cJSON_GetObjectItemCaseSensitive(p, "outputByteLimit");
  if (!cJSON_IsString(command) || command->valuestring[0] == 0)
    return bad(id, "command (a non-empty string) is required"), NULL;
  if (args && !cJSON_IsNull(args) && !cJSON_IsArray(args))
    return bad(id, "args must be a list of strings"), NULL;
  const cJSON *a;
  cJSON_ArrayForEach(a, (cJSON_IsArray(args) ? args : NULL)) {
    if (!cJSON_IsString(a)) return bad(id, "args must be a list of strings"), NULL;
  }
  if (env && !cJSON_IsNull(env) && !cJSON_IsArray(env))
    return bad(id, "env must be a list of {name, value}"), NULL;
  cJSON_ArrayForEach(a, (cJSON_IsArray(env) ? env : NULL)) {
    const char *n = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(a, "name"))
                        ? cJSON_GetObjectItemCaseSensitive(a, "name")->valuestring
                        : NULL;
    if (n == NULL || n[0] == 0 || strchr(n, '=') ||
        !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(a, "value")))
      return bad(id, "env must be a list of {name, value} with valid names"), NULL;
  }
  const char *dir = NULL;
  if (cwd && !cJSON_IsNull(cwd)) {
    if (!cJSON_IsString(cwd) || cwd->valuestring[0] != '/')
      return bad(id, "cwd must be an absolute path"), NULL;
    dir = cwd->valuestring;
  } else {
    dir = ac_session_cwd(sid);
    if (dir == NULL) dir = mc_opts.cwd;
  }
  struct stat st;
  if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
    char m[512];
    snprintf(m, sizeof(m), "cwd is not a directory: %.400s", dir);
    return bad(id, m), NULL;
  }
  *limit = AC_OUTPUT_DEFAULT;
  if (lim && !cJSON_IsNull(lim)) {
    if (!cJSON_IsNumber(lim) || lim->valuedouble < 0 || lim->valuedouble > (double)(1ull << 40) ||
        lim->valuedouble != (double)(uint64_t)lim->valuedouble)
      return bad(id, "outputByteLimit must be a non-negative integer"), NULL;
    *limit = (size_t)lim->valuedouble;
  }

  cJSON *spec = cJSON_CreateObject();
  size_t tl = strlen(command->valuestring);
  if (cJSON_GetArraySize(args) > 0) {
    cJSON *cmd = cJSON_AddArrayToObject(spec, "cmd");
    cJSON_AddItemToArray(cmd, cJSON_CreateString(command->valuestring));
    cJSON_ArrayForEach(a, args) {
      cJSON_AddItemToArray(cmd, cJSON_CreateString(a->valuestring));
      if (tl < TEXT_MAX) tl += 1 + strlen(a->valuestring);
    }
  } else {
    cJSON_AddStringToObject(spec, "cmd", command->valuestring); /* a line for /bin/sh -c */
  }
  /* the command as one line of at most TEXT_MAX bytes, for ac_term_text */
  char *t = malloc(TEXT_MAX + 8);
  if (t) {
    size_t n = snprintf(t, TEXT_MAX + 1, "%s", command->valuestring);
    cJSON_ArrayForEach(a, (cJSON_IsArray(args) ? args : NULL)) {
      if (n >= TEXT_MAX) break;
      n += snprintf(t + n, TEXT_MAX + 1 - n, " %s", a->valuestring);
    }
    if (n > TEXT_MAX) strcpy(t + TEXT_MAX - 3, "...");
    for (char *c = t; *c; c++)
      if (*c == '\n' || *c == '\r') *c = ' ';
  }
  *text = t;
  cJSON_AddStringToObject(spec, "cwd", dir);
  /* A pager would wait for a key under the pty: cat, unless the agent says otherwise. */
  cJSON *e = cJSON_AddObjectToObject(spec, "env");
  cJSON_AddStringToObject(e, "PAGER", "cat");
  cJSON_AddStringToObject(e, "GIT_PAGER", "cat");
  cJSON_ArrayForEach(a, (cJSON_IsArray(env) ? env : NULL)) {
    const char *n = cJSON_GetObjectItemCaseSensitive(a, "name")->valuestring;
    cJSON_DeleteItemFromObjectCaseSensitive(e, n);
    cJSON_AddStringToObject(e, n, cJSON_GetObjectItemCaseSensitive(a, "value")->valuestring);
  }
  cJSON_AddTrueToObject(spec, "pty");
  char label[160];
  snprintf(label, sizeof(label), "acp %.100s", sid);
  cJSON_AddStringToObject(spec, "label", label);
  cJSON_AddTrueToObject(spec, "kill_on_disconnect");
  return spec;
}

static void create(const cJSON *id, const cJSON *p, const char *sid) {
  char *text = NULL;
  size_t limit;
  cJSON *spec = create_spec(id, p, sid, &text, &limit);
  if (spec == NULL) return;
  char err[1024];
  if (mc_connect(ac_owner, NULL, err, sizeof(err)) != 0) {
    char m[1100];
    snprintf(m, sizeof(m), "proctor is not reachable: %s", err);
    ac_answer_error(AC_AGENT, id, AC_E_INTERNAL, m, NULL);
    cJSON_Delete(spec);
    free(text);
    return;
  }
  op_t *o = op_new(OP_CREATE, id);
  if (o == NULL || (o->sid = strdup(sid)) == NULL) {
    if (o) op_free(o);
    ac_answer_error(AC_AGENT, id, AC_E_INTERNAL, "out of memory", NULL);
    cJSON_Delete(spec);
    free(text);
    return;
  }
  o->limit = limit;
  o->text = text;
  cJSON *params = cJSON_CreateArray();
  cJSON_AddItemToArray(params, spec);
  rpc(o, "start", params, on_started);
}

/* ---- terminal/output ------------------------------------------------------------------------------ */

static void read_window(op_t *o);

static void on_read(uint64_t tag, const mc_reply_t *r) {
  op_t *o = op_find(tag);
  if (o == NULL) return;
  if (r->err) {
    op_rpc_fail(o, r->err);
    return;
  }
  const cJSON *missed = cJSON_GetObjectItemCaseSensitive(r->result, "missed");
  int lost = cJSON_IsNumber(missed) && missed->valuedouble > 0;
  uint64_t total = (uint64_t)cJSON_GetObjectItemCaseSensitive(
                       cJSON_GetObjectItemCaseSensitive(o->rec, "bytes"), "pty")
                       ->valuedouble;
  size_t n = 0;
  char *text = ac_render(r->data ? r->data : "", r->data ? r->data_len : 0, &n);
  if (text == NULL) {
    op_fail(o, AC_E_INTERNAL, "out of memory");
    return;
  }
  /* too little text for the limit, and older bytes not read yet: read a wider window
   * (a margin past the limit: the window's first line may start inside a sequence) */
  int whole = o->window >= total || lost || o->window >= AC_WINDOW_MAX;
  if (n <= o->limit + 256 && !whole) {
    free(text);
    o->window *= 2;
    read_window(o);
    return;
  }
  size_t start = ac_tail_start(text, n, o->limit);
  cJSON *res = cJSON_CreateObject();
  if (rec_spawn_error(o->rec)) {
    const char *why = rec_str(o->rec, "error");
    char m[1024];
    snprintf(m, sizeof(m), "proctor: %s\n", why ? why : "the command did not start");
    cJSON_AddStringToObject(res, "output", m + ac_tail_start(m, strlen(m), o->limit));
    cJSON_AddFalseToObject(res, "truncated");
  } else {
    cJSON_AddStringToObject(res, "output", text + start);
    cJSON_AddBoolToObject(res, "truncated", start > 0 || lost || o->window < total);
  }
  free(text);
  if (rec_ended(o->rec)) cJSON_AddItemToObject(res, "exitStatus", exit_status(o->rec));
  op_done(o, res);
}

static void read_window(op_t *o) {
  const cJSON *b = cJSON_GetObjectItemCaseSensitive(o->rec, "bytes");
  const cJSON *pty = cJSON_GetObjectItemCaseSensitive(b, "pty");
  uint64_t total = cJSON_IsNumber(pty) ? (uint64_t)pty->valuedouble : 0;
  if (o->window > AC_WINDOW_MAX) o->window = AC_WINDOW_MAX;
  uint64_t from = total > o->window ? total - o->window : 0;
  cJSON *p = id_params(o->id);
  cJSON_AddItemToArray(p, cJSON_CreateString("pty"));
  cJSON_AddItemToArray(p, cJSON_CreateNumber((double)from));
  cJSON_AddItemToArray(p, cJSON_CreateNumber((double)(total - from)));
  rpc(o, "read", p, on_read);
}

static void on_record(uint64_t tag, const mc_reply_t *r) {
  op_t *o = op_find(tag);
  if (o == NULL) return;
  if (r->err) {
    op_rpc_fail(o, r->err);
    return;
  }
  o->rec = cJSON_Duplicate(r->result, 1);
  if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(
          cJSON_GetObjectItemCaseSensitive(o->rec, "bytes"), "pty"))) {
    cJSON *b = cJSON_GetObjectItemCaseSensitive(o->rec, "bytes");
    if (!cJSON_IsObject(b)) b = cJSON_AddObjectToObject(o->rec, "bytes");
    cJSON_AddNumberToObject(b, "pty", 0);
  }
  o->window = 2 * (uint64_t)o->limit + 4096;
  read_window(o);
}

/* ---- terminal/wait_for_exit, kill, release ------------------------------------------------------------ */

static void on_waited(uint64_t tag, const mc_reply_t *r) {
  op_t *o = op_find(tag);
  if (o == NULL) return;
  if (r->err) {
    op_rpc_fail(o, r->err);
    return;
  }
  if (!rec_ended(r->result)) { /* not ended (a bounded wait): wait again */
    rpc(o, "wait", id_params(o->id), on_waited);
    return;
  }
  op_done(o, exit_status(r->result));
}

static void on_canceled(uint64_t tag, const mc_reply_t *r) {
  op_t *o = op_find(tag);
  if (o == NULL) return;
  if (r->err) {
    op_rpc_fail(o, r->err);
    return;
  }
  op_done(o, cJSON_CreateObject());
}

static void cancel(op_t *o) {
  cJSON *p = id_params(o->id);
  cJSON_AddItemToArray(p, cJSON_CreateFalse());
  rpc(o, "cancel", p, on_canceled);
}

/* ---- requests ------------------------------------------------------------------------------------ */

void ac_term_request(const char *method, const cJSON *id, const cJSON *params) {
  static const char *const names[] = {"terminal/create", "terminal/output",
                                      "terminal/wait_for_exit", "terminal/kill",
                                      "terminal/release"};
  int kind = -1;
  for (int i = 0; i < 5; i++)
    if (strcmp(method, names[i]) == 0) kind = i;
  if (kind < 0) {
    char m[256];
    snprintf(m, sizeof(m), "method not found: %.200s", method);
    ac_answer_error(AC_AGENT, id, -32601, m, NULL);
    return;
  }
  if (nops >= AC_OPS_MAX) {
    ac_answer_error(AC_AGENT, id, AC_E_BUSY, "proctor-acp: too many terminal requests in progress",
                    NULL);
    return;
  }
  const cJSON *s = cJSON_GetObjectItemCaseSensitive(params, "sessionId");
  if (!cJSON_IsObject(params) || !cJSON_IsString(s)) {
    bad(id, "sessionId (a string) is required");
    return;
  }
  const char *sid = s->valuestring;
  if (kind == OP_CREATE) {
    create(id, params, sid);
    return;
  }
  const cJSON *tj = cJSON_GetObjectItemCaseSensitive(params, "terminalId");
  if (!cJSON_IsString(tj)) {
    bad(id, "terminalId (a string) is required");
    return;
  }
  term_t *t = term_find(sid, tj->valuestring);
  if (t == NULL || t->released) {
    char m[400];
    if (t) snprintf(m, sizeof(m), "terminal %.100s was released", tj->valuestring);
    else snprintf(m, sizeof(m), "no terminal %.100s in session %.200s", tj->valuestring, sid);
    cJSON *data = cJSON_CreateObject();
    cJSON_AddStringToObject(data, "sessionId", sid);
    cJSON_AddStringToObject(data, "terminalId", tj->valuestring);
    ac_answer_error(AC_AGENT, id, AC_E_NOT_FOUND, m, data);
    return;
  }
  op_t *o = op_new((op_kind_t)kind, id);
  if (o == NULL) {
    ac_answer_error(AC_AGENT, id, AC_E_INTERNAL, "out of memory", NULL);
    return;
  }
  o->id = t->id;
  o->limit = t->limit;
  switch (o->kind) {
  case OP_OUTPUT: rpc(o, "get", id_params(o->id), on_record); break;
  case OP_WAIT: rpc(o, "wait", id_params(o->id), on_waited); break;
  case OP_RELEASE:
    t->released = 1; /* and a running command is canceled, like kill */
    cancel(o);
    break;
  case OP_KILL: cancel(o); break;
  case OP_CREATE: break;
  }
}

char *ac_term_text(const char *sid, const char *tid) {
  term_t *t = term_find(sid, tid);
  if (t == NULL) return NULL;
  char *s = malloc(TEXT_MAX + 64);
  if (s)
    snprintf(s, TEXT_MAX + 64, "running in proctor #%llu: %s", (unsigned long long)t->id,
             t->text ? t->text : "");
  return s;
}

void ac_term_free(void) {
  while (ops) op_free(ops);
  while (terms) {
    term_t *t = terms;
    terms = t->next;
    term_free(t);
  }
  nterms = 0;
}
