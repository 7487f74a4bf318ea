/* interact.c — the interact_with_command tool: write input to a running
 * execution, then watch its output until it waits for input again, and
 * answer with the output that came back. One answer per call.
 *
 * Thread: main.
 *
 *   get ─► input [─► close_stdin] ─► watch: wait [─► read the prompt window]
 *       ─► (prompt matched | idle | ended | timeout) ─► read the answer ─► result
 *
 * Watching is event-driven: each check is a `wait` with `output` (the bytes
 * seen so far), which the server answers at the first new byte, at the end,
 * or at the next deadline (idle or timeout): a quiet execution costs one
 * request per deadline, and the first byte after a quiet spell is seen at
 * once. Checks are at least IX_MIN_GAP_MS apart, so a flood costs at most one
 * a gap. A server without the feature (hello's `features`) is polled with a
 * `get` every IX_POLL_MS instead.
 *
 * The end: the execution ended ("exit"); `prompt` (a POSIX ERE) matches the
 * end of the new output ("prompt"); no new output for `idle_ms` ("idle");
 * `timeout_ms` passed ("timeout"). Only output that came after the input
 * was written counts for the prompt and the idle clock (with no input: any
 * output not yet returned).
 *
 * The answer starts where the last interact of the same execution stopped
 * (a cursor per execution, IX_CURSORS of them, least recently used ones
 * forgotten; an execution seen for the first time starts at offset 0), so
 * output that came between two calls (a prompt printed after an idle
 * return) is not lost. At most max_bytes per stream are returned: the
 * newest; `truncated` and `<stream>_skipped` say how much was left out
 * (read_output reads it from `<stream>_offset` minus the skipped bytes).
 */
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"

#define IX_CURSORS 256       /* executions whose interact cursor is remembered */
#define IX_WINDOW 4096       /* bytes at the end of a stream the prompt is matched against */
#define IX_POLL_MS 25        /* how often the record is read, from a server without wait_output */
#define IX_MIN_GAP_MS 10     /* at least this long between two checks (a flood) */
#define IX_DEFAULT_IDLE 1000 /* idle_ms when no prompt is given */

struct interact {
  regex_t re;
  int has_re;
  int n;                /* streams: 1 (pty) or 2 */
  const char *names[2]; /* "pty" | "stdout", "stderr" */
  double from[2];       /* where the answer starts (the cursor) */
  double mark[2];       /* where new output starts (the totals when the input was written) */
  double seen[2];       /* the totals at the last poll */
  uint64_t t0, changed; /* when watching started; when output last grew */
  uint64_t checked;     /* when the last check was asked for */
  double idle_ms, timeout_ms, max_bytes;
  const char *ended_by;
  int ended;   /* the execution ended */
  int pending; /* reads in flight (prompt windows or the answer) */
  int matched;
  cJSON *text[2]; /* the answer per stream (owned) */
  double off[2], skipped[2], next[2];
};

/* ---- cursors ------------------------------------------------------------------------------ */

static struct {
  uint64_t id, used;
  double off[2];
} cursors[IX_CURSORS];
static uint64_t cursor_clock;

static int cursor_find(uint64_t id) {
  for (int i = 0; i < IX_CURSORS; i++)
    if (cursors[i].id == id) return i;
  return -1;
}

static void cursor_set(uint64_t id, const double off[2]) {
  int k = cursor_find(id);
  for (int i = 0; k < 0 && i < IX_CURSORS; i++) /* a free slot, else the least recently used */
    if (k < 0 || cursors[i].id == 0 || cursors[i].used < cursors[k].used) k = i;
  cursors[k].id = id;
  cursors[k].used = ++cursor_clock;
  cursors[k].off[0] = off[0];
  cursors[k].off[1] = off[1];
}

/* ---- the call ----------------------------------------------------------------------------- */

void mc_interact_free(struct interact *ix) {
  if (ix == NULL) return;
  if (ix->has_re) regfree(&ix->re);
  cJSON_Delete(ix->text[0]);
  cJSON_Delete(ix->text[1]);
  free(ix);
}

static call_t *from_timer(mc_timer_t *t) { return (call_t *)((char *)t - offsetof(call_t, timer)); }

static const char *input_arg(const call_t *c) {
  const cJSON *v = mc_arg(c, "input");
  return cJSON_IsString(v) ? v->valuestring : "";
}

static void answered(call_t *c) {
  struct interact *ix = c->ix;
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "id", (double)c->id);
  const char *state = mc_rec_str(c->rec, "state");
  cJSON_AddStringToObject(o, "state", state ? state : "failed");
  cJSON_AddBoolToObject(o, "running", !mc_rec_terminal(state));
  const cJSON *ec = cJSON_GetObjectItemCaseSensitive(c->rec, "exit_code");
  if (cJSON_IsNumber(ec)) cJSON_AddNumberToObject(o, "exit_code", ec->valuedouble);
  else cJSON_AddNullToObject(o, "exit_code");
  cJSON_AddStringToObject(o, "ended_by", ix->ended_by);
  const char *out[2] = {"stdout", "stderr"};
  int truncated = 0;
  double next[2] = {ix->seen[0], ix->seen[1]};
  for (int i = 0; i < 2; i++) {
    const cJSON *t = i < ix->n ? ix->text[i] : NULL;
    char k[32];
    cJSON_AddStringToObject(o, out[i], cJSON_IsString(t) ? t->valuestring : "");
    snprintf(k, sizeof(k), "%s_offset", out[i]);
    cJSON_AddNumberToObject(o, k, i < ix->n ? ix->off[i] : 0);
    snprintf(k, sizeof(k), "%s_skipped", out[i]);
    cJSON_AddNumberToObject(o, k, i < ix->n ? ix->skipped[i] : 0);
    truncated |= i < ix->n && ix->skipped[i] > 0;
    if (i < ix->n) next[i] = ix->next[i];
  }
  cJSON_AddBoolToObject(o, "truncated", truncated);
  cJSON_AddNumberToObject(o, "input_bytes", (double)strlen(input_arg(c)));
  cJSON_AddNumberToObject(o, "elapsed_ms", (double)(mc_now_ms() - ix->t0));
  cJSON_AddBoolToObject(o, "stdin_open",
                        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c->rec, "stdin_open")));
  cursor_set(c->id, next);
  mc_call_done(c, o);
}

static void on_answer_read(uint64_t tag, const mc_reply_t *r) {
  call_t *c = mc_call_answered(tag);
  if (c == NULL) return;
  if (r->err) {
    mc_call_rpc_fail(c, r->err);
    return;
  }
  struct interact *ix = c->ix;
  int i = (int)(tag & 3);
  size_t skip, len;
  char *text = mc_answer_text(r, !ix->ended, &skip, &len);
  if (text == NULL) {
    mc_call_fail(c, "out of memory");
    return;
  }
  double start = mc_rec_num(r->result, "next_offset", 0) - (double)(r->data ? r->data_len : 0);
  ix->text[i] = cJSON_CreateString(text);
  free(text);
  ix->off[i] = start + (double)skip;
  ix->skipped[i] = ix->off[i] - ix->from[i];
  ix->next[i] = ix->off[i] + (double)len;
  if (--ix->pending == 0) answered(c);
}

/* Ask the engine for stream i's bytes from `from` up to the last poll's
 * count; 1 when the call is gone meanwhile (answered, canceled or failed). */
static int read_to_seen(call_t *c, int i, double from, mc_rpc_cb cb, uint64_t serial) {
  cJSON *p = mc_params2(cJSON_CreateNumber((double)c->id), cJSON_CreateString(c->ix->names[i]));
  cJSON_AddItemToArray(p, cJSON_CreateNumber(from));
  cJSON_AddItemToArray(p, cJSON_CreateNumber(c->ix->seen[i] - from));
  return mc_call_rpc(c, "read", p, cb, i) || mc_call_find(serial) == NULL;
}

/* Read the answer: the newest max_bytes of each stream from the cursor to the last poll. */
static void finish(call_t *c, const char *why) {
  struct interact *ix = c->ix;
  mc_timer_stop(&c->timer);
  ix->ended_by = why;
  ix->pending = ix->n;
  uint64_t serial = c->serial;
  for (int i = 0; i < ix->n; i++) {
    double n = ix->seen[i] - ix->from[i];
    double at = n > ix->max_bytes ? ix->seen[i] - ix->max_bytes : ix->from[i];
    if (n <= 0) { /* nothing came: no read */
      ix->text[i] = cJSON_CreateString("");
      ix->off[i] = ix->next[i] = ix->from[i];
      if (--ix->pending == 0) {
        answered(c); /* frees c */
        return;
      }
      continue;
    }
    if (read_to_seen(c, i, at, on_answer_read, serial)) return;
  }
}

/* After a poll (and its prompt reads): decide whether the answer is complete. */
static void decide(call_t *c) {
  struct interact *ix = c->ix;
  uint64_t now = mc_now_ms();
  if (ix->ended) finish(c, "exit");
  else if (ix->matched) finish(c, "prompt");
  else if (ix->idle_ms > 0 && (double)(now - ix->changed) >= ix->idle_ms) finish(c, "idle");
  else if ((double)(now - ix->t0) >= ix->timeout_ms) finish(c, "timeout");
  else if (!mc_rpc_wait_output()) mc_timer_start(&c->timer, IX_POLL_MS);
  else
    mc_timer_start(&c->timer,
                   now - ix->checked >= IX_MIN_GAP_MS ? 0 : ix->checked + IX_MIN_GAP_MS - now);
}

static void on_window(uint64_t tag, const mc_reply_t *r) {
  call_t *c = mc_call_answered(tag);
  if (c == NULL) return;
  struct interact *ix = c->ix;
  if (r->err == NULL) {
    size_t skip, len;
    char *text = mc_answer_text(r, 0, &skip, &len);
    if (text && regexec(&ix->re, text, 0, NULL, 0) == 0) ix->matched = 1;
    free(text);
  }
  if (--ix->pending == 0) decide(c);
}

static void on_poll(uint64_t tag, const mc_reply_t *r) {
  call_t *c = mc_call_record(tag, r);
  if (c == NULL) return;
  struct interact *ix = c->ix;
  ix->ended = mc_rec_terminal(mc_rec_str(c->rec, "state"));
  int grew[2] = {0, 0};
  for (int i = 0; i < ix->n; i++) {
    double total = mc_rec_bytes(c->rec, ix->names[i]);
    if (total != ix->seen[i]) {
      grew[i] = 1;
      ix->changed = mc_now_ms();
    }
    ix->seen[i] = total;
  }
  if (ix->ended || !ix->has_re || !(grew[0] || grew[1])) {
    decide(c);
    return;
  }
  /* A stream that grew: does the prompt match the end of its new output? */
  uint64_t serial = c->serial;
  ix->pending = grew[0] + grew[1];
  for (int i = 0; i < ix->n; i++) {
    if (!grew[i]) continue;
    double lo = ix->seen[i] > IX_WINDOW ? ix->seen[i] - IX_WINDOW : 0;
    if (lo < ix->mark[i]) lo = ix->mark[i];
    if (read_to_seen(c, i, lo, on_window, serial)) return;
  }
}

/* A check: `wait` until a stream grows past what was seen, the execution
 * ends, or the next deadline (idle, timeout); the record it answers with
 * goes to on_poll as a `get`'s would. */
static void tick(mc_timer_t *t) {
  call_t *c = from_timer(t);
  struct interact *ix = c->ix;
  ix->checked = mc_now_ms();
  if (!mc_rpc_wait_output()) {
    mc_call_rpc(c, "get", mc_params1(cJSON_CreateNumber((double)c->id)), on_poll, 0);
    return;
  }
  double due = (double)ix->t0 + ix->timeout_ms;
  if (ix->idle_ms > 0 && (double)ix->changed + ix->idle_ms < due)
    due = (double)ix->changed + ix->idle_ms;
  double ms = due - (double)ix->checked;
  cJSON *seen = cJSON_CreateObject(), *opts = cJSON_CreateObject();
  for (int i = 0; i < ix->n; i++) cJSON_AddNumberToObject(seen, ix->names[i], ix->seen[i]);
  cJSON_AddItemToObject(opts, "output", seen);
  /* whole milliseconds (the server takes integers), rounded up: not before the deadline */
  cJSON *p = mc_params2(cJSON_CreateNumber((double)c->id),
                        cJSON_CreateNumber(ms > 0 ? (double)(uint64_t)(ms + 0.999) : 0));
  cJSON_AddItemToArray(p, opts);
  mc_call_rpc(c, "wait", p, on_poll, 0);
}

/* The input is written (slot 0) and stdin closed (slot 1, with eof): watch. */
static void on_input(uint64_t tag, const mc_reply_t *r) {
  call_t *c = mc_call_answered(tag);
  if (c == NULL) return;
  const cJSON *en = r->err ? cJSON_GetArrayItem(r->err, 0) : NULL;
  if (cJSON_IsString(en) && strcmp(en->valuestring, "ESTDINCLOSED") == 0) {
    mc_call_fail(c,
                 "ESTDINCLOSED: execution %llu has no open stdin (it was closed, or the command "
                 "was started without one: start_command, or run_command with stdin: true, "
                 "keeps it open)",
                 (unsigned long long)c->id);
    return;
  }
  if (r->err) {
    mc_call_rpc_fail(c, r->err);
    return;
  }
  if ((tag & 3) == 0 && mc_flag(c, "eof", 0)) {
    mc_call_rpc(c, "close_stdin", mc_params1(cJSON_CreateNumber((double)c->id)), on_input, 1);
    return;
  }
  struct interact *ix = c->ix;
  ix->t0 = ix->changed = mc_now_ms();
  mc_timer_start(&c->timer, mc_rpc_wait_output()
                                ? 0
                                : IX_POLL_MS); /* a wait from the totals before the input */
}

/* The record before the input: the streams and where the answer starts. */
static void on_first_get(uint64_t tag, const mc_reply_t *r) {
  call_t *c = mc_call_record(tag, r);
  if (c == NULL) return;
  struct interact *ix = c->ix;
  const char *state = mc_rec_str(c->rec, "state");
  const char *input = input_arg(c);
  int pty = mc_rec_pty(c->rec);
  if (mc_rec_terminal(state)) {
    mc_call_fail(c,
                 "ENOTRUNNING: execution %llu has ended (%s): nothing waits for input; "
                 "read_output reads what it wrote",
                 (unsigned long long)c->id, state);
    return;
  }
  ix->n = pty ? 1 : 2;
  ix->names[0] = pty ? "pty" : "stdout";
  ix->names[1] = "stderr";
  int k = cursor_find(c->id);
  for (int i = 0; i < ix->n; i++) {
    ix->seen[i] = mc_rec_bytes(c->rec, ix->names[i]);
    ix->from[i] = k >= 0 ? cursors[k].off[i] : 0;
    if (ix->from[i] > ix->seen[i]) ix->from[i] = ix->seen[i];
    /* with input, only what comes after it counts; without, whatever was not returned yet */
    ix->mark[i] = input[0] ? ix->seen[i] : ix->from[i];
  }
  if (input[0]) {
    mc_call_rpc(c, "input",
                mc_params2(cJSON_CreateNumber((double)c->id), cJSON_CreateString(input)), on_input,
                0);
  } else if (mc_flag(c, "eof", 0)) {
    mc_call_rpc(c, "close_stdin", mc_params1(cJSON_CreateNumber((double)c->id)), on_input, 1);
  } else {
    ix->t0 = ix->changed = mc_now_ms();
    /* output not returned yet counts as new: check it at once */
    ix->seen[0] = ix->mark[0];
    ix->seen[1] = ix->mark[1];
    tick(&c->timer);
  }
}

void mc_interact_begin(call_t *c) {
  struct interact *ix = calloc(1, sizeof(*ix));
  if (ix == NULL) {
    mc_call_fail(c, "out of memory");
    return;
  }
  c->ix = ix;
  c->timer.cb = tick;
  const cJSON *pv = mc_arg(c, "prompt");
  if (cJSON_IsString(pv)) {
    size_t n = strlen(pv->valuestring);
    char *pat = malloc(n + 4);
    if (pat == NULL) {
      mc_call_fail(c, "out of memory");
      return;
    }
    snprintf(pat, n + 4, "(%s)$", pv->valuestring); /* it must match at the end */
    int rc = regcomp(&ix->re, pat, REG_EXTENDED | REG_NOSUB);
    free(pat);
    if (rc != 0) {
      char msg[256];
      regerror(rc, &ix->re, msg, sizeof(msg));
      mc_call_fail(c, "invalid arguments: 'prompt' is not a POSIX extended regular expression: %s",
                   msg);
      return;
    }
    ix->has_re = 1;
  }
  ix->idle_ms = mc_num(c, "idle_ms", ix->has_re ? 0 : IX_DEFAULT_IDLE);
  ix->timeout_ms = mc_num(c, "timeout_ms", DEFAULT_WAIT_MS);
  ix->max_bytes = mc_num(c, "max_bytes", DEFAULT_READ);
  mc_call_rpc(c, "get", mc_params1(cJSON_CreateNumber((double)c->id)), on_first_get, 0);
}
