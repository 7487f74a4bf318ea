/* tools.c — the MCP tools of proctor-mcp: argument checks, the fence (cwd
 * and command policy), and each tool as a few steps of msgpack-rpc calls.
 *
 * Thread: main.
 *
 * A tool call is a call_t. Each step sends one or two RPC requests and
 * returns; the answer (rpc.c) finds the call again by its serial number, so a
 * call that was cancelled (notifications/cancelled) or answered meanwhile is
 * simply not found and the late answer is dropped.
 *
 *   run:    start ─► wait(wait_ms) ─► get ─► read tails ─► result
 *   wait:            wait(timeout) ─► get ─► read tails ─► result
 *   start:  start ─► get ─► result            status: get ─► result
 *   output: get ─► read ─► result             list:   list ─► result
 *   input:  input [─► close_stdin] ─► result  cancel: cancel ─► result
 *
 * While run and wait wait, a client that sent _meta.progressToken gets
 * notifications/progress every mc_opts.progress_ms (elapsed time, output size
 * and last line). Every result is masked (mc_mask_json) before it is sent.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/utf8.h"
#include "mcp.h"
#include "schemas.h"

#define DEFAULT_WAIT_MS 30000
#define DEFAULT_TAIL 16384
#define DEFAULT_READ 65536
#define PROGRESS_TAIL 512

typedef enum { T_RUN, T_START, T_STATUS, T_LIST, T_OUTPUT, T_INPUT, T_CANCEL, T_WAIT } tool_id_t;
static const char *const tool_names[] = {"run", "start", "status", "list", "output", "input", "cancel", "wait"};

typedef struct call {
  uint64_t serial;
  cJSON *req_id;   /* the JSON-RPC id (owned) */
  cJSON *token;    /* _meta.progressToken (owned) or NULL */
  cJSON *args;     /* arguments (owned) */
  tool_id_t tool;
  int cancelled;   /* notifications/cancelled came: answer nothing */
  int inflight;    /* RPC requests not answered yet */
  uint64_t id;     /* execution id, once known */
  cJSON *rec;      /* the record, once known (owned) */
  cJSON *tails[2]; /* run/wait: stdout, stderr tails (owned) */
  int tails_left;
  /* progress */
  mc_timer_t timer;
  uint64_t started_ms;
  int progress_busy;
  double last_progress;
  struct call *next;
} call_t;

static call_t *calls;
static uint64_t next_serial = 1;
static cJSON *tool_defs[MC_NTOOLS];

/* ---- the table ---------------------------------------------------------------------------- */

static call_t *find(uint64_t serial) {
  for (call_t *c = calls; c; c = c->next)
    if (c->serial == serial) return c;
  return NULL;
}

static void call_free(call_t *c) {
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
  free(c);
}

size_t mc_tools_pending(void) {
  size_t n = 0;
  for (call_t *c = calls; c; c = c->next)
    n += !c->cancelled;
  return n;
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

/* Answer with a tool execution error (isError) and free the call. */
static void fail(call_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(call_t *c, const char *fmt, ...) {
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
  call_free(c);
}

/* Answer with structured content (consumed) and its JSON as text; free the call. */
static void done(call_t *c, cJSON *sc) {
  mc_mask_json(sc);
  char *text = cJSON_PrintUnformatted(sc);
  if (text == NULL) {
    cJSON_Delete(sc);
    fail(c, "out of memory");
    return;
  }
  cJSON *res = cJSON_CreateObject();
  cJSON_AddItemToObject(res, "content", text_content(text));
  cJSON_AddItemToObject(res, "structuredContent", sc);
  free(text);
  mc_respond(c->req_id, res);
  call_free(c);
}

/* "ENOENT: no such execution 4" from an RPC error [name, message]. */
static void rpc_fail(call_t *c, const cJSON *err) {
  const cJSON *name = cJSON_GetArrayItem(err, 0), *msg = cJSON_GetArrayItem(err, 1);
  fail(c, "%s: %s", cJSON_IsString(name) ? name->valuestring : "ERROR",
       cJSON_IsString(msg) ? msg->valuestring : "unknown error");
}

/* ---- argument checks (against the tool's own inputSchema) ---------------------------------- */

static int type_ok(const cJSON *v, const char *t) {
  if (strcmp(t, "string") == 0) return cJSON_IsString(v);
  if (strcmp(t, "boolean") == 0) return cJSON_IsBool(v);
  if (strcmp(t, "object") == 0) return cJSON_IsObject(v);
  if (strcmp(t, "array") == 0) return cJSON_IsArray(v);
  if (strcmp(t, "null") == 0) return cJSON_IsNull(v);
  if (strcmp(t, "integer") == 0)
    return cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble) && fabs(v->valuedouble) < 9.007e15;
  if (strcmp(t, "number") == 0) return cJSON_IsNumber(v);
  return 0;
}

/* Check v against the subset of JSON Schema the tool schemas use. Returns 0,
 * or -1 with a message naming `path`. */
static int check(const cJSON *s, const cJSON *v, const char *path, char *err, size_t errlen) {
  const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "type");
  if (cJSON_IsString(t) && !type_ok(v, t->valuestring)) {
    snprintf(err, errlen, "'%s' must be %s %s", path, strchr("aeiou", t->valuestring[0]) ? "an" : "a",
             t->valuestring);
    return -1;
  }
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(s, "enum");
  if (cJSON_IsArray(e)) {
    int hit = 0;
    for (const cJSON *x = e->child; x; x = x->next)
      hit |= cJSON_IsString(x) && cJSON_IsString(v) && strcmp(x->valuestring, v->valuestring) == 0;
    if (!hit) {
      char *opts = cJSON_PrintUnformatted(e);
      snprintf(err, errlen, "'%s' must be one of %s", path, opts ? opts : "the listed values");
      free(opts);
      return -1;
    }
  }
  const cJSON *mn = cJSON_GetObjectItemCaseSensitive(s, "minimum"),
              *mx = cJSON_GetObjectItemCaseSensitive(s, "maximum"),
              *ml = cJSON_GetObjectItemCaseSensitive(s, "minLength");
  if (cJSON_IsNumber(v) && ((mn && v->valuedouble < mn->valuedouble) || (mx && v->valuedouble > mx->valuedouble))) {
    if (mn && mx)
      snprintf(err, errlen, "'%s' must be between %.0f and %.0f", path, mn->valuedouble, mx->valuedouble);
    else
      snprintf(err, errlen, "'%s' must be at least %.0f", path, mn ? mn->valuedouble : 0);
    return -1;
  }
  if (ml && cJSON_IsString(v) && strlen(v->valuestring) < (size_t)ml->valuedouble) {
    snprintf(err, errlen, "'%s' must not be empty", path);
    return -1;
  }
  char sub[256];
  if (cJSON_IsArray(v)) {
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    int i = 0;
    for (const cJSON *x = v->child; items && x; x = x->next, i++) {
      snprintf(sub, sizeof(sub), "%s[%d]", path, i);
      if (check(items, x, sub, err, errlen)) return -1;
    }
  }
  if (cJSON_IsObject(v)) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
      if (!cJSON_GetObjectItemCaseSensitive(v, r->valuestring)) {
        snprintf(err, errlen, "'%s' is required", r->valuestring);
        return -1;
      }
    for (const cJSON *x = v->child; x; x = x->next) {
      const cJSON *ps = props ? cJSON_GetObjectItemCaseSensitive(props, x->string) : NULL;
      snprintf(sub, sizeof(sub), "%s%s%s", path[0] ? path : "", path[0] ? "." : "", x->string);
      if (ps == NULL) ps = cJSON_IsObject(addl) ? addl : NULL;
      if (ps == NULL && cJSON_IsFalse(addl)) {
        snprintf(err, errlen, "unknown argument '%s'", sub);
        return -1;
      }
      if (ps && check(ps, x, sub, err, errlen)) return -1;
    }
  }
  return 0;
}

/* ---- argument access ---------------------------------------------------------------------- */

static const cJSON *arg(const call_t *c, const char *k) { return cJSON_GetObjectItemCaseSensitive(c->args, k); }

static double num(const call_t *c, const char *k, double dflt) {
  const cJSON *v = arg(c, k);
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static int flag(const call_t *c, const char *k, int dflt) {
  const cJSON *v = arg(c, k);
  return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static cJSON *params1(cJSON *a) {
  cJSON *p = cJSON_CreateArray();
  cJSON_AddItemToArray(p, a);
  return p;
}

static cJSON *params2(cJSON *a, cJSON *b) {
  cJSON *p = params1(a);
  cJSON_AddItemToArray(p, b);
  return p;
}

/* Send an RPC request for call c; `slot` (0..3) comes back with the answer.
 * When not connected the call fails (is answered and freed): returns -1. */
static int call_rpc(call_t *c, const char *method, cJSON *params, mc_rpc_cb cb, int slot) {
  if (mc_rpc_call(method, params, cb, c->serial << 2 | (uint64_t)slot) != 0) {
    fail(c, "proctor is not reachable: %s", mc_rpc_lost()[0] ? mc_rpc_lost() : "not connected");
    return -1;
  }
  c->inflight++;
  return 0;
}

/* The call an answer is for: NULL when it is gone or cancelled (then freed once idle). */
static call_t *answered(uint64_t tag) {
  call_t *c = find(tag >> 2);
  if (c == NULL) return NULL;
  c->inflight--;
  if (c->cancelled) {
    if (c->inflight <= 0) call_free(c);
    return NULL;
  }
  return c;
}

/* ---- records ------------------------------------------------------------------------------ */

static int terminal(const char *state) {
  return strcmp(state, "completed") == 0 || strcmp(state, "failed") == 0 || strcmp(state, "canceled") == 0 ||
         strcmp(state, "timed_out") == 0;
}

static const char *rec_str(const cJSON *rec, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double rec_num(const cJSON *rec, const char *k, double dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, k);
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static double stream_bytes(const cJSON *rec, const char *stream) {
  return rec_num(cJSON_GetObjectItemCaseSensitive(rec, "bytes"), stream, 0);
}

static int rec_pty(const cJSON *rec) { return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec, "pty")); }

static void add_str_or_null(cJSON *o, const char *k, const char *v) {
  if (v)
    cJSON_AddStringToObject(o, k, v);
  else
    cJSON_AddNullToObject(o, k);
}

/* The execution as the tools show it (see EXEC_PROPS). */
static cJSON *exec_view(const cJSON *rec) {
  cJSON *o = cJSON_CreateObject();
  const char *state = rec_str(rec, "state");
  if (state == NULL) state = "failed";
  cJSON_AddNumberToObject(o, "id", rec_num(rec, "id", 0));
  cJSON_AddStringToObject(o, "state", state);
  cJSON_AddBoolToObject(o, "running", !terminal(state));
  const cJSON *ec = cJSON_GetObjectItemCaseSensitive(rec, "exit_code");
  if (cJSON_IsNumber(ec))
    cJSON_AddNumberToObject(o, "exit_code", ec->valuedouble);
  else
    cJSON_AddNullToObject(o, "exit_code");
  add_str_or_null(o, "signal", rec_str(rec, "signal"));
  add_str_or_null(o, "reason", rec_str(rec, "reason"));
  add_str_or_null(o, "error", rec_str(rec, "error"));
  add_str_or_null(o, "label", rec_str(rec, "label"));
  cJSON_AddStringToObject(o, "owner", rec_str(rec, "owner") ? rec_str(rec, "owner") : "");
  const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(rec, "cmd");
  if (cJSON_IsString(cmd)) {
    cJSON_AddStringToObject(o, "command", cmd->valuestring);
  } else {
    size_t n = 1;
    for (const cJSON *a = cmd ? cmd->child : NULL; a; a = a->next)
      n += (cJSON_IsString(a) ? strlen(a->valuestring) : 0) + 1;
    char *s = calloc(1, n), *p = s;
    for (const cJSON *a = cmd ? cmd->child : NULL; s && a; a = a->next)
      if (cJSON_IsString(a)) p += sprintf(p, "%s%s", p == s ? "" : " ", a->valuestring);
    cJSON_AddStringToObject(o, "command", s ? s : "");
    free(s);
  }
  cJSON_AddStringToObject(o, "cwd", rec_str(rec, "cwd") ? rec_str(rec, "cwd") : "");
  int pty = rec_pty(rec);
  cJSON_AddBoolToObject(o, "pty", pty);
  const cJSON *pid = cJSON_GetObjectItemCaseSensitive(rec, "pid");
  if (cJSON_IsNumber(pid))
    cJSON_AddNumberToObject(o, "pid", pid->valuedouble);
  else
    cJSON_AddNullToObject(o, "pid");
  cJSON_AddNumberToObject(o, "duration_ms", rec_num(rec, "duration_ms", 0));
  cJSON_AddNumberToObject(o, "stdout_bytes", stream_bytes(rec, pty ? "pty" : "stdout"));
  cJSON_AddNumberToObject(o, "stderr_bytes", pty ? 0 : stream_bytes(rec, "stderr"));
  cJSON_AddBoolToObject(o, "stdin_open", cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec, "stdin_open")));
  return o;
}

/* ---- the fence: cwd and command policy ------------------------------------------------------ */

/* Resolve the requested cwd (relative to ours) and check --allow-cwd. Returns
 * a malloc'd absolute path, or NULL after failing the call. */
static char *resolve_cwd(call_t *c) {
  const cJSON *cw = arg(c, "cwd");
  char want[PATH_MAX * 2];
  if (cJSON_IsString(cw) && cw->valuestring[0] == '/')
    snprintf(want, sizeof(want), "%s", cw->valuestring);
  else if (cJSON_IsString(cw))
    snprintf(want, sizeof(want), "%s/%s", mc_opts.cwd, cw->valuestring);
  else
    snprintf(want, sizeof(want), "%s", mc_opts.cwd);
  char *real = realpath(want, NULL);
  if (real == NULL) {
    fail(c, "cwd %s: %s", want, strerror(errno));
    return NULL;
  }
  if (mc_opts.n_allow_cwd == 0) return real;
  for (size_t i = 0; i < mc_opts.n_allow_cwd; i++) {
    const char *d = mc_opts.allow_cwd[i];
    size_t n = strlen(d);
    if (strncmp(real, d, n) == 0 && (real[n] == 0 || real[n] == '/' || (n == 1 && d[0] == '/'))) return real;
  }
  fail(c, "cwd %s is outside the directories this server allows (--allow-cwd)", real);
  free(real);
  return NULL;
}

/* The command line the policy sees: the shell string, or program and args joined by spaces. */
static char *command_line(const call_t *c) {
  const cJSON *cmd = arg(c, "command"), *args = arg(c, "args");
  size_t n = strlen(cmd->valuestring) + 1;
  for (const cJSON *a = args ? args->child : NULL; a; a = a->next)
    n += strlen(a->valuestring) + 1;
  char *s = malloc(n);
  if (s == NULL) return NULL;
  char *p = s + sprintf(s, "%s", cmd->valuestring);
  for (const cJSON *a = args ? args->child : NULL; a; a = a->next)
    p += sprintf(p, " %s", a->valuestring);
  return s;
}

static int command_allowed(call_t *c) {
  char *line = command_line(c);
  if (line == NULL) {
    fail(c, "out of memory");
    return 0;
  }
  for (size_t i = 0; i < mc_opts.n_deny; i++)
    if (mc_glob(mc_opts.deny[i], line)) {
      fail(c, "refused: the command matches the deny pattern '%s' of this server (--deny)", mc_opts.deny[i]);
      free(line);
      return 0;
    }
  int ok = mc_opts.n_allow == 0;
  for (size_t i = 0; i < mc_opts.n_allow && !ok; i++)
    ok = mc_glob(mc_opts.allow[i], line);
  free(line);
  if (!ok) fail(c, "refused: the command matches none of the allow patterns of this server (--allow)");
  return ok;
}

/* ---- steps ---------------------------------------------------------------------------------- */

static void progress_tick(mc_timer_t *t);

/* The streams of the record's execution, by tails[] slot. */
static const char *tail_stream(const cJSON *rec, int i) {
  if (rec_pty(rec)) return i == 0 ? "pty" : NULL;
  return i == 0 ? "stdout" : "stderr";
}

/* Bytes of a read answer as text: continuation bytes at the start skipped,
 * an incomplete character at the end left out when `cut_end`. *skip and *len
 * say which bytes the text holds. */
static char *answer_text(const mc_reply_t *r, int cut_end, size_t *skip, size_t *len) {
  const char *d = r->data ? r->data : "";
  size_t n = r->data ? r->data_len : 0;
  *skip = pr_utf8_skip(d, n);
  *len = n - *skip;
  if (cut_end) *len = pr_utf8_head(d + *skip, *len);
  return pr_utf8_clean(d + *skip, *len);
}

/* run/wait: every tail is in: answer. */
static void tails_done(call_t *c) {
  cJSON *o = exec_view(c->rec);
  const char *names[2] = {"stdout", "stderr"};
  for (int i = 0; i < 2; i++) {
    const cJSON *t = c->tails[i];
    const cJSON *tx = t ? cJSON_GetObjectItemCaseSensitive(t, "text") : NULL;
    cJSON_AddStringToObject(o, names[i], cJSON_IsString(tx) ? tx->valuestring : "");
    char k[32];
    snprintf(k, sizeof(k), "%s_skipped", names[i]);
    cJSON_AddNumberToObject(o, k, t ? rec_num(t, "skipped", 0) : 0);
  }
  done(c, o);
}

static void on_tail(uint64_t tag, const mc_reply_t *r) {
  call_t *c = answered(tag);
  if (c == NULL) return;
  if (r->err) {
    rpc_fail(c, r->err);
    return;
  }
  size_t skip, len;
  char *text = answer_text(r, !terminal(rec_str(c->rec, "state")), &skip, &len);
  if (text == NULL) {
    fail(c, "out of memory");
    return;
  }
  double next = rec_num(r->result, "next_offset", 0);
  cJSON *t = cJSON_CreateObject();
  cJSON_AddStringToObject(t, "text", text);
  cJSON_AddNumberToObject(t, "skipped", next - (double)(r->data ? r->data_len : 0) + (double)skip);
  free(text);
  c->tails[tag & 3] = t;
  if (--c->tails_left == 0) tails_done(c);
}

/* run/wait, last step: read the tail of each stream, then answer. */
static void read_tails(call_t *c) {
  double tail = num(c, "tail_bytes", DEFAULT_TAIL);
  int n = 0;
  for (int i = 0; i < 2; i++)
    n += tail_stream(c->rec, i) != NULL && tail > 0;
  c->tails_left = n;
  if (n == 0) {
    tails_done(c);
    return;
  }
  uint64_t serial = c->serial;
  for (int i = 0; i < 2; i++) {
    const char *s = tail_stream(c->rec, i);
    if (s == NULL || tail <= 0) continue;
    double total = stream_bytes(c->rec, s);
    cJSON *p = params2(cJSON_CreateNumber((double)c->id), cJSON_CreateString(s));
    cJSON_AddItemToArray(p, cJSON_CreateNumber(total > tail ? total - tail : 0));
    cJSON_AddItemToArray(p, cJSON_CreateNumber(tail));
    if (call_rpc(c, "read", p, on_tail, i)) return;
    if (find(serial) == NULL) return;
  }
}

/* run/wait: the record after the wait. */
static void on_waited(uint64_t tag, const mc_reply_t *r) {
  call_t *c = answered(tag);
  if (c == NULL) return;
  mc_timer_stop(&c->timer);
  if (r->err) {
    rpc_fail(c, r->err);
    return;
  }
  cJSON_Delete(c->rec);
  c->rec = cJSON_Duplicate(r->result, 1);
  read_tails(c);
}

static void send_wait(call_t *c, double ms) {
  cJSON *p = params2(cJSON_CreateNumber((double)c->id), cJSON_CreateNumber(ms));
  if (call_rpc(c, "wait", p, on_waited, 0)) return;
  if (c->token && mc_opts.progress_ms) {
    c->started_ms = mc_now_ms();
    mc_timer_start(&c->timer, mc_opts.progress_ms);
  }
}

static void on_record(uint64_t tag, const mc_reply_t *r);

/* run/start: the id of the new execution. */
static void on_started(uint64_t tag, const mc_reply_t *r) {
  call_t *c = find(tag >> 2);
  if (c == NULL) return;
  if (r->err == NULL && cJSON_IsNumber(r->result)) c->id = (uint64_t)r->result->valuedouble;
  /* A run cancelled before its id was known: stop the execution now. */
  if (c->cancelled && c->tool == T_RUN && c->id) {
    cJSON *p = params1(cJSON_CreateNumber((double)c->id));
    cJSON_AddItemToArray(p, cJSON_CreateFalse());
    mc_rpc_call("cancel", p, NULL, 0);
  }
  if ((c = answered(tag)) == NULL) return;
  if (r->err) {
    rpc_fail(c, r->err);
    return;
  }
  if (c->tool == T_RUN)
    send_wait(c, num(c, "wait_ms", DEFAULT_WAIT_MS));
  else
    call_rpc(c, "get", params1(cJSON_CreateNumber((double)c->id)), on_record, 0);
}

/* output: the bytes read. */
static void on_read(uint64_t tag, const mc_reply_t *r) {
  call_t *c = answered(tag);
  if (c == NULL) return;
  if (r->err) {
    rpc_fail(c, r->err);
    return;
  }
  const char *state = rec_str(c->rec, "state");
  const char *stream = rec_str(c->rec, "__stream");
  double total = stream_bytes(c->rec, stream);
  double from = rec_num(c->rec, "__from", 0);
  double next = rec_num(r->result, "next_offset", from);
  double missed = rec_num(r->result, "missed", 0);
  size_t n = r->data ? r->data_len : 0;
  /* An incomplete character at the end is left for the next read, unless the
   * stream ended there (then it is shown as U+FFFD). */
  int ended = terminal(state) && next >= total;
  size_t skip, len;
  char *text = answer_text(r, !ended, &skip, &len);
  if (text == NULL) {
    fail(c, "out of memory");
    return;
  }
  double start = next - (double)n;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "id", (double)c->id);
  cJSON_AddStringToObject(o, "stream", strcmp(stream, "pty") == 0 ? "stdout" : stream);
  cJSON_AddStringToObject(o, "data", text);
  cJSON_AddNumberToObject(o, "offset", start + (double)skip);
  cJSON_AddNumberToObject(o, "next_offset", start + (double)skip + (double)len);
  cJSON_AddNumberToObject(o, "missed", missed);
  cJSON_AddNumberToObject(o, "total_bytes", total > next ? total : next);
  cJSON_AddBoolToObject(o, "eof", terminal(state) && start + (double)skip + (double)len >= total);
  cJSON_AddStringToObject(o, "state", state ? state : "");
  free(text);
  done(c, o);
}

/* start/status: answer with the record. output: now read. */
static void on_record(uint64_t tag, const mc_reply_t *r) {
  call_t *c = answered(tag);
  if (c == NULL) return;
  if (r->err) {
    rpc_fail(c, r->err);
    return;
  }
  if (c->tool != T_OUTPUT) {
    done(c, exec_view(r->result));
    return;
  }
  cJSON_Delete(c->rec);
  c->rec = cJSON_Duplicate(r->result, 1);
  const cJSON *sv = arg(c, "stream");
  const char *stream = cJSON_IsString(sv) ? sv->valuestring : "stdout";
  if (rec_pty(c->rec)) {
    if (strcmp(stream, "stderr") == 0) {
      fail(c, "execution %llu runs under a pty: its only stream is read as stdout", (unsigned long long)c->id);
      return;
    }
    stream = "pty";
  }
  double total = stream_bytes(c->rec, stream);
  double off = num(c, "offset", 0);
  if (off < 0) off = total + off > 0 ? total + off : 0;
  cJSON_AddStringToObject(c->rec, "__stream", stream);
  cJSON_AddNumberToObject(c->rec, "__from", off);
  cJSON *p = params2(cJSON_CreateNumber((double)c->id), cJSON_CreateString(stream));
  cJSON_AddItemToArray(p, cJSON_CreateNumber(off));
  cJSON_AddItemToArray(p, cJSON_CreateNumber(num(c, "max_bytes", DEFAULT_READ)));
  call_rpc(c, "read", p, on_read, 0);
}

static void on_list(uint64_t tag, const mc_reply_t *r) {
  call_t *c = answered(tag);
  if (c == NULL) return;
  if (r->err) {
    rpc_fail(c, r->err);
    return;
  }
  int total = cJSON_GetArraySize(r->result);
  int limit = (int)num(c, "limit", 50);
  cJSON *o = cJSON_CreateObject();
  cJSON *a = cJSON_AddArrayToObject(o, "executions");
  int i = 0;
  for (const cJSON *rec = r->result->child; rec; rec = rec->next, i++)
    if (i >= total - limit) cJSON_AddItemToArray(a, exec_view(rec));
  cJSON_AddNumberToObject(o, "total", total);
  done(c, o);
}

static void on_cancel(uint64_t tag, const mc_reply_t *r) {
  call_t *c = answered(tag);
  if (c == NULL) return;
  if (r->err) {
    rpc_fail(c, r->err);
    return;
  }
  const char *res = cJSON_IsString(r->result) ? r->result->valuestring : "";
  if (strcmp(res, "not_found") == 0) {
    fail(c, "ENOENT: no such execution %llu", (unsigned long long)c->id);
    return;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "id", (double)c->id);
  cJSON_AddStringToObject(o, "result", res);
  done(c, o);
}

/* input: slot 0 = the data written, slot 1 = stdin closed. */
static void on_input(uint64_t tag, const mc_reply_t *r) {
  call_t *c = answered(tag);
  if (c == NULL) return;
  /* The data was written; a child that read it and ended at once has no
   * stdin left to close: that is not an error of this call. */
  const cJSON *en = r->err ? cJSON_GetArrayItem(r->err, 0) : NULL;
  int gone = (tag & 3) == 1 && cJSON_IsString(en) &&
             (strcmp(en->valuestring, "ENOTRUNNING") == 0 || strcmp(en->valuestring, "ESTDINCLOSED") == 0);
  if (r->err && !gone) {
    rpc_fail(c, r->err);
    return;
  }
  int eof = flag(c, "eof", 0);
  if ((tag & 3) == 0 && eof) {
    call_rpc(c, "close_stdin", params1(cJSON_CreateNumber((double)c->id)), on_input, 1);
    return;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "id", (double)c->id);
  cJSON_AddNumberToObject(o, "bytes", (double)strlen(arg(c, "data")->valuestring));
  cJSON_AddBoolToObject(o, "stdin_closed", eof);
  done(c, o);
}

/* ---- progress ------------------------------------------------------------------------------- */

static void progress_sent(call_t *c, const cJSON *rec, const char *line) {
  double elapsed = (double)(mc_now_ms() - c->started_ms) / 1000.0;
  if (elapsed <= c->last_progress) elapsed = c->last_progress + 0.001; /* must increase */
  c->last_progress = elapsed;
  char msg[256];
  int pty = rec_pty(rec);
  double out = stream_bytes(rec, pty ? "pty" : "stdout") + (pty ? 0 : stream_bytes(rec, "stderr"));
  int k = snprintf(msg, sizeof(msg), "#%llu %s for %.0f s, %.0f bytes of output", (unsigned long long)c->id,
                   rec_str(rec, "state") ? rec_str(rec, "state") : "running", elapsed, out);
  if (line && *line && k > 0 && (size_t)k < sizeof(msg)) snprintf(msg + k, sizeof(msg) - (size_t)k, ": %s", line);
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
  while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
    n--;
  size_t b = n;
  while (b > 0 && s[b - 1] != '\n' && s[b - 1] != '\r')
    b--;
  size_t o = 0;
  for (size_t i = b; i < n && o + 1 < outlen && o < 120; i++)
    if ((unsigned char)s[i] >= 0x20 || s[i] == '\t') out[o++] = s[i];
  while (o > 0 && ((unsigned char)out[o - 1] & 0xC0) == 0x80) /* keep whole characters */
    o--;
  if (o > 0 && ((unsigned char)out[o - 1] & 0xC0) == 0xC0) o--;
  out[o] = 0;
}

static void on_progress_read(uint64_t tag, const mc_reply_t *r) {
  call_t *c = answered(tag);
  if (c == NULL) return;
  c->progress_busy = 0;
  if (r->err || c->rec == NULL) return;
  size_t skip, len;
  char *text = answer_text(r, 1, &skip, &len);
  char line[160] = "";
  if (text) last_line(text, line, sizeof(line));
  free(text);
  if (mc_timer_active(&c->timer)) progress_sent(c, c->rec, line);
}

static void on_progress_get(uint64_t tag, const mc_reply_t *r) {
  call_t *c = answered(tag);
  if (c == NULL) return;
  if (r->err || !mc_timer_active(&c->timer)) {
    c->progress_busy = 0;
    return;
  }
  cJSON_Delete(c->rec);
  c->rec = cJSON_Duplicate(r->result, 1);
  const char *s = rec_pty(c->rec) ? "pty" : "stdout";
  double total = stream_bytes(c->rec, s);
  cJSON *p = params2(cJSON_CreateNumber((double)c->id), cJSON_CreateString(s));
  cJSON_AddItemToArray(p, cJSON_CreateNumber(total > PROGRESS_TAIL ? total - PROGRESS_TAIL : 0));
  cJSON_AddItemToArray(p, cJSON_CreateNumber(PROGRESS_TAIL));
  if (mc_rpc_call("read", p, on_progress_read, c->serial << 2) == 0)
    c->inflight++;
  else
    c->progress_busy = 0;
}

static void progress_tick(mc_timer_t *t) {
  call_t *c = (call_t *)((char *)t - offsetof(call_t, timer));
  mc_timer_start(&c->timer, mc_opts.progress_ms);
  if (c->progress_busy) return; /* the previous one is still being put together */
  if (mc_rpc_call("get", params1(cJSON_CreateNumber((double)c->id)), on_progress_get, c->serial << 2) == 0) {
    c->inflight++;
    c->progress_busy = 1;
  }
}

/* ---- entry points ------------------------------------------------------------------------- */

/* run/start: build the start spec. Returns NULL after failing the call. */
static cJSON *start_spec(call_t *c) {
  if (!command_allowed(c)) return NULL;
  char *cwd = resolve_cwd(c);
  if (cwd == NULL) return NULL;
  cJSON *spec = cJSON_CreateObject();
  const cJSON *cmd = arg(c, "command"), *args = arg(c, "args");
  if (args) {
    cJSON *argv = cJSON_AddArrayToObject(spec, "cmd");
    cJSON_AddItemToArray(argv, cJSON_CreateString(cmd->valuestring));
    for (const cJSON *a = args->child; a; a = a->next)
      cJSON_AddItemToArray(argv, cJSON_CreateString(a->valuestring));
  } else {
    cJSON_AddStringToObject(spec, "cmd", cmd->valuestring);
  }
  cJSON_AddStringToObject(spec, "cwd", cwd);
  free(cwd);
  const cJSON *env = arg(c, "env");
  if (env && env->child) {
    for (const cJSON *e = env->child; e; e = e->next) {
      if (e->string[0] == 0 || strchr(e->string, '=')) {
        fail(c, "env: '%s' is not a variable name", e->string);
        cJSON_Delete(spec);
        return NULL;
      }
      for (size_t i = 0; i < mc_opts.n_secrets; i++)
        if (strcmp(e->string, mc_opts.secrets[i].name) == 0) {
          fail(c, "env: %s is a secret this server sets itself; leave it out", e->string);
          cJSON_Delete(spec);
          return NULL;
        }
    }
    cJSON_AddItemToObject(spec, "env", cJSON_Duplicate(env, 1));
  }
  if (mc_opts.n_secrets) {
    cJSON *sec = cJSON_AddObjectToObject(spec, "secrets");
    for (size_t i = 0; i < mc_opts.n_secrets; i++)
      cJSON_AddStringToObject(sec, mc_opts.secrets[i].name, mc_opts.secrets[i].value);
  }
  int pty = flag(c, "pty", 0);
  cJSON_AddBoolToObject(spec, "pty", pty);
  if (pty) {
    cJSON_AddNumberToObject(spec, "cols", 120);
    cJSON_AddNumberToObject(spec, "rows", 30);
  } else {
    cJSON_AddBoolToObject(spec, "stdin", flag(c, "stdin", c->tool == T_START));
  }
  const cJSON *to = arg(c, "timeout_ms"), *label = arg(c, "label");
  if (to) cJSON_AddNumberToObject(spec, "timeout_ms", to->valuedouble);
  if (label) cJSON_AddStringToObject(spec, "label", label->valuestring);
  if (mc_opts.kill_on_exit) cJSON_AddTrueToObject(spec, "kill_on_disconnect");
  return spec;
}

/* Connect on first use: the named socket, else the editor's, else the embedded engine. */
static int ensure_connected(call_t *c);

void mc_tools_call(const cJSON *id, const cJSON *params) {
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(params, "name");
  int tool = -1;
  for (int i = 0; cJSON_IsString(name) && i < (int)MC_NTOOLS; i++)
    if (strcmp(name->valuestring, tool_names[i]) == 0) tool = i;
  if (tool < 0) {
    char msg[256];
    snprintf(msg, sizeof(msg), "unknown tool %s", cJSON_IsString(name) ? name->valuestring : "(no name)");
    mc_respond_error(id, -32602, msg);
    return;
  }
  call_t *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    mc_respond_error(id, -32603, "out of memory");
    return;
  }
  c->serial = next_serial++;
  c->req_id = cJSON_Duplicate(id, 1);
  c->tool = (tool_id_t)tool;
  c->timer.cb = progress_tick;
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(params, "arguments");
  c->args = args ? cJSON_Duplicate(args, 1) : cJSON_CreateObject();
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(params, "_meta");
  const cJSON *tok = meta ? cJSON_GetObjectItemCaseSensitive(meta, "progressToken") : NULL;
  if (cJSON_IsString(tok) || cJSON_IsNumber(tok)) c->token = cJSON_Duplicate(tok, 1);
  c->next = calls;
  calls = c;

  char err[512];
  const cJSON *schema = cJSON_GetObjectItemCaseSensitive(tool_defs[tool], "inputSchema");
  if (!cJSON_IsObject(c->args)) {
    fail(c, "invalid arguments: an object expected");
    return;
  }
  if (check(schema, c->args, "", err, sizeof(err))) {
    fail(c, "invalid arguments: %s", err);
    return;
  }
  const cJSON *idv = arg(c, "id");
  if (idv) c->id = (uint64_t)idv->valuedouble;
  cJSON *spec = NULL;
  if (c->tool == T_RUN || c->tool == T_START) {
    if ((spec = start_spec(c)) == NULL) return;
  }
  if (ensure_connected(c) != 0) {
    cJSON_Delete(spec);
    return;
  }
  cJSON *idj = cJSON_CreateNumber((double)c->id);
  switch (c->tool) {
  case T_RUN:
  case T_START: cJSON_Delete(idj); call_rpc(c, "start", params1(spec), on_started, 0); break;
  case T_STATUS:
  case T_OUTPUT: call_rpc(c, "get", params1(idj), on_record, 0); break;
  case T_LIST: {
    cJSON_Delete(idj);
    const cJSON *st = arg(c, "state");
    cJSON *p = cJSON_CreateArray();
    if (st) {
      cJSON *f = cJSON_CreateObject();
      cJSON_AddStringToObject(f, "state", st->valuestring);
      cJSON_AddItemToArray(p, f);
    }
    call_rpc(c, "list", p, on_list, 0);
    break;
  }
  case T_INPUT:
    call_rpc(c, "input", params2(idj, cJSON_CreateString(arg(c, "data")->valuestring)), on_input, 0);
    break;
  case T_CANCEL: call_rpc(c, "cancel", params2(idj, cJSON_CreateBool(flag(c, "force", 0))), on_cancel, 0); break;
  case T_WAIT: cJSON_Delete(idj); send_wait(c, num(c, "timeout_ms", DEFAULT_WAIT_MS)); break;
  }
}

static int same_id(const cJSON *a, const cJSON *b) {
  if (cJSON_IsNumber(a) && cJSON_IsNumber(b)) return a->valuedouble == b->valuedouble;
  if (cJSON_IsString(a) && cJSON_IsString(b)) return strcmp(a->valuestring, b->valuestring) == 0;
  return 0;
}

void mc_tools_cancel(const cJSON *id) {
  for (call_t *c = calls; c; c = c->next) {
    if (c->cancelled || !same_id(c->req_id, id)) continue;
    c->cancelled = 1;
    mc_timer_stop(&c->timer);
    /* A run that was cancelled stops its command; a wait only stops waiting. */
    if (c->tool == T_RUN && c->id) {
      cJSON *p = params1(cJSON_CreateNumber((double)c->id));
      cJSON_AddItemToArray(p, cJSON_CreateFalse());
      mc_rpc_call("cancel", p, NULL, 0);
    }
    if (c->inflight <= 0) call_free(c);
    return;
  }
}

cJSON *mc_tools_list(void) {
  cJSON *res = cJSON_CreateObject();
  cJSON *a = cJSON_AddArrayToObject(res, "tools");
  for (size_t i = 0; i < MC_NTOOLS; i++) {
    if (tool_defs[i] == NULL) tool_defs[i] = cJSON_Parse(mc_tool_json[i]);
    cJSON_AddItemToArray(a, cJSON_Duplicate(tool_defs[i], 1));
  }
  return res;
}

int mc_tools_init(void) {
  for (size_t i = 0; i < MC_NTOOLS; i++) {
    if (tool_defs[i] == NULL) tool_defs[i] = cJSON_Parse(mc_tool_json[i]);
    if (tool_defs[i] == NULL) {
      mc_log("internal error: the schema of tool %zu does not parse", i);
      return -1;
    }
  }
  return 0;
}

/* ---- connection ------------------------------------------------------------------------------ */

static int ensure_connected(call_t *c) {
  if (mc_rpc_connected()) return 0;
  char err[1024] = "";
  const char *path = NULL;
  char *found = NULL;
  if (mc_opts.embedded) {
    if (mc_embedded_start(&path, err, sizeof(err)) != 0) goto fail;
  } else if (mc_opts.socket) {
    path = mc_opts.socket;
  } else {
    char why[512];
    if (mc_opts.discover) found = mc_discover(why, sizeof(why));
    if (found) {
      path = found;
    } else {
      if (mc_opts.discover) mc_log("%s: using an embedded engine", why);
      if (mc_embedded_start(&path, err, sizeof(err)) != 0) goto fail;
    }
  }
  if (mc_rpc_connect(path, mc_client_name(), err, sizeof(err)) != 0) goto fail;
  mc_log("connected to %s as %s", path, mc_client_name());
  free(found);
  return 0;
fail:
  free(found);
  fail(c, "proctor is not reachable: %s", err);
  return -1;
}
