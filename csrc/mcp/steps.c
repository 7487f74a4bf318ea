/* steps.c — each tool as a few steps of msgpack-rpc answers. See tools.c
 * for the steps of every tool.
 *
 * Thread: main.
 *
 * Every answer first finds its call (mc_call_answered): a call cancelled or
 * answered meanwhile is gone and the answer is dropped. Each step answers
 * the call (mc_call_done / mc_call_fail) or sends the next request.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "call.h"

/* ---- records ------------------------------------------------------------------------------------- */

static void add_str_or_null(cJSON *o, const char *k, const char *v) {
  if (v) cJSON_AddStringToObject(o, k, v);
  else cJSON_AddNullToObject(o, k);
}

/* The execution as the tools show it (see EXEC_PROPS). */
static cJSON *exec_view(const cJSON *rec) {
  cJSON *o = cJSON_CreateObject();
  const char *state = mc_rec_str(rec, "state");
  if (state == NULL) state = "failed";
  cJSON_AddNumberToObject(o, "id", mc_rec_num(rec, "id", 0));
  cJSON_AddStringToObject(o, "state", state);
  cJSON_AddBoolToObject(o, "running", !mc_rec_terminal(state));
  const cJSON *ec = cJSON_GetObjectItemCaseSensitive(rec, "exit_code");
  if (cJSON_IsNumber(ec)) cJSON_AddNumberToObject(o, "exit_code", ec->valuedouble);
  else cJSON_AddNullToObject(o, "exit_code");
  add_str_or_null(o, "signal", mc_rec_str(rec, "signal"));
  add_str_or_null(o, "reason", mc_rec_str(rec, "reason"));
  add_str_or_null(o, "error", mc_rec_str(rec, "error"));
  add_str_or_null(o, "label", mc_rec_str(rec, "label"));
  cJSON_AddStringToObject(o, "owner", mc_rec_str(rec, "owner") ? mc_rec_str(rec, "owner") : "");
  const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(rec, "cmd");
  const cJSON *c1 = cJSON_GetArrayItem(cmd, 1), *c2 = cJSON_GetArrayItem(cmd, 2);
  if (cJSON_IsString(cmd)) {
    cJSON_AddStringToObject(o, "command", cmd->valuestring);
    cJSON_AddStringToObject(o, "shell", "/bin/sh");
  } else if (cJSON_GetArraySize(cmd) == 3 && cJSON_IsString(cmd->child) &&
             strcmp(cmd->child->valuestring, mc_opts.shell) == 0 && cJSON_IsString(c1) &&
             strcmp(c1->valuestring, "-c") == 0 && cJSON_IsString(c2)) {
    /* [our shell, "-c", line]: a command string run by the shell (fence.c) */
    cJSON_AddStringToObject(o, "command", c2->valuestring);
    cJSON_AddStringToObject(o, "shell", cmd->child->valuestring);
  } else {
    cJSON_AddNullToObject(o, "shell");
    size_t n = 1;
    for (const cJSON *a = cmd ? cmd->child : NULL; a; a = a->next)
      n += (cJSON_IsString(a) ? strlen(a->valuestring) : 0) + 1;
    char *s = calloc(1, n), *p = s;
    for (const cJSON *a = cmd ? cmd->child : NULL; s && a; a = a->next)
      if (cJSON_IsString(a)) p += sprintf(p, "%s%s", p == s ? "" : " ", a->valuestring);
    cJSON_AddStringToObject(o, "command", s ? s : "");
    free(s);
  }
  cJSON_AddStringToObject(o, "cwd", mc_rec_str(rec, "cwd") ? mc_rec_str(rec, "cwd") : "");
  int pty = mc_rec_pty(rec);
  cJSON_AddBoolToObject(o, "pty", pty);
  const cJSON *pid = cJSON_GetObjectItemCaseSensitive(rec, "pid");
  if (cJSON_IsNumber(pid)) cJSON_AddNumberToObject(o, "pid", pid->valuedouble);
  else cJSON_AddNullToObject(o, "pid");
  cJSON_AddNumberToObject(o, "duration_ms", mc_rec_num(rec, "duration_ms", 0));
  cJSON_AddNumberToObject(o, "stdout_bytes", mc_rec_bytes(rec, pty ? "pty" : "stdout"));
  cJSON_AddNumberToObject(o, "stderr_bytes", pty ? 0 : mc_rec_bytes(rec, "stderr"));
  cJSON_AddBoolToObject(o, "stdin_open",
                        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec, "stdin_open")));
  return o;
}

/* ---- steps --------------------------------------------------------------------------------------- */

static const char *tail_stream(const cJSON *rec, int i) {
  if (mc_rec_pty(rec)) return i == 0 ? "pty" : NULL;
  return i == 0 ? "stdout" : "stderr";
}

/* Bytes of a read answer as text: continuation bytes at the start skipped,
 * an incomplete character at the end left out when `cut_end`. *skip and *len
 * say which bytes the text holds. */
char *mc_answer_text(const mc_reply_t *r, int cut_end, size_t *skip, size_t *len) {
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
    cJSON_AddNumberToObject(o, k, t ? mc_rec_num(t, "skipped", 0) : 0);
  }
  if (!mc_rec_terminal(mc_rec_str(c->rec, "state"))) { /* the wait ended first: say how to go on */
    char next[256];
    snprintf(next, sizeof(next),
             "still running (the wait ended, the command did not): call wait_for_command {id: "
             "%llu} to wait more, read_output {id: %llu} to read it, cancel_command {id: %llu} "
             "to stop it",
             (unsigned long long)c->id, (unsigned long long)c->id, (unsigned long long)c->id);
    cJSON_AddStringToObject(o, "next", next);
  }
  mc_call_done(c, o);
}

static void on_tail(uint64_t tag, const mc_reply_t *r) {
  call_t *c = mc_call_answered(tag);
  if (c == NULL) return;
  if (r->err) {
    mc_call_rpc_fail(c, r->err);
    return;
  }
  size_t skip, len;
  char *text = mc_answer_text(r, !mc_rec_terminal(mc_rec_str(c->rec, "state")), &skip, &len);
  if (text == NULL) {
    mc_call_fail(c, "out of memory");
    return;
  }
  double next = mc_rec_num(r->result, "next_offset", 0);
  cJSON *t = cJSON_CreateObject();
  cJSON_AddStringToObject(t, "text", text);
  cJSON_AddNumberToObject(t, "skipped", next - (double)(r->data ? r->data_len : 0) + (double)skip);
  free(text);
  c->tails[tag & 3] = t;
  if (--c->tails_left == 0) tails_done(c);
}

/* run/wait, last step: read the tail of each stream, then answer. */
static void read_tails(call_t *c) {
  double tail = mc_num(c, "tail_bytes", DEFAULT_TAIL);
  int n = 0;
  for (int i = 0; i < 2; i++) n += tail_stream(c->rec, i) != NULL && tail > 0;
  c->tails_left = n;
  if (n == 0) {
    tails_done(c);
    return;
  }
  uint64_t serial = c->serial;
  for (int i = 0; i < 2; i++) {
    const char *s = tail_stream(c->rec, i);
    if (s == NULL || tail <= 0) continue;
    double total = mc_rec_bytes(c->rec, s);
    cJSON *p = mc_params2(cJSON_CreateNumber((double)c->id), cJSON_CreateString(s));
    cJSON_AddItemToArray(p, cJSON_CreateNumber(total > tail ? total - tail : 0));
    cJSON_AddItemToArray(p, cJSON_CreateNumber(tail));
    if (mc_call_rpc(c, "read", p, on_tail, i)) return;
    if (mc_call_find(serial) == NULL) return;
  }
}

/* run/wait: the record after the wait. */
static void on_waited(uint64_t tag, const mc_reply_t *r) {
  call_t *c = mc_call_answered(tag);
  if (c == NULL) return;
  mc_timer_stop(&c->timer);
  if (r->err) {
    mc_call_rpc_fail(c, r->err);
    return;
  }
  cJSON_Delete(c->rec);
  c->rec = cJSON_Duplicate(r->result, 1);
  read_tails(c);
}

void mc_send_wait(call_t *c, double ms) {
  cJSON *p = mc_params2(cJSON_CreateNumber((double)c->id), cJSON_CreateNumber(ms));
  if (mc_call_rpc(c, "wait", p, on_waited, 0)) return;
  if (c->token && mc_opts.progress_ms) {
    c->started_ms = mc_now_ms();
    mc_timer_start(&c->timer, mc_opts.progress_ms);
  }
}

/* run/start: the id of the new execution. */
void mc_on_started(uint64_t tag, const mc_reply_t *r) {
  call_t *c = mc_call_find(tag >> 2);
  if (c == NULL) return;
  if (r->err == NULL && cJSON_IsNumber(r->result)) c->id = (uint64_t)r->result->valuedouble;
  /* A run cancelled before its id was known: stop the execution now. */
  if (c->cancelled && c->tool == T_RUN && c->id) {
    cJSON *p = mc_params1(cJSON_CreateNumber((double)c->id));
    cJSON_AddItemToArray(p, cJSON_CreateFalse());
    mc_rpc_call("cancel", p, NULL, 0);
  }
  if ((c = mc_call_answered(tag)) == NULL) return;
  if (r->err) {
    mc_call_rpc_fail(c, r->err);
    return;
  }
  if (c->tool == T_RUN) mc_send_wait(c, mc_num(c, "wait_ms", DEFAULT_WAIT_MS));
  else mc_call_rpc(c, "get", mc_params1(cJSON_CreateNumber((double)c->id)), mc_on_record, 0);
}

/* output: the bytes read. */
static void on_read(uint64_t tag, const mc_reply_t *r) {
  call_t *c = mc_call_answered(tag);
  if (c == NULL) return;
  if (r->err) {
    mc_call_rpc_fail(c, r->err);
    return;
  }
  const char *state = mc_rec_str(c->rec, "state");
  const char *stream = mc_rec_str(c->rec, "__stream");
  double total = mc_rec_bytes(c->rec, stream);
  double from = mc_rec_num(c->rec, "__from", 0);
  double next = mc_rec_num(r->result, "next_offset", from);
  double missed = mc_rec_num(r->result, "missed", 0);
  size_t n = r->data ? r->data_len : 0;
  /* An incomplete character at the end is left for the next read, unless the
   * stream ended there (then it is shown as U+FFFD). */
  int ended = mc_rec_terminal(state) && next >= total;
  size_t skip, len;
  char *text = mc_answer_text(r, !ended, &skip, &len);
  if (text == NULL) {
    mc_call_fail(c, "out of memory");
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
  cJSON_AddBoolToObject(o, "eof",
                        mc_rec_terminal(state) && start + (double)skip + (double)len >= total);
  cJSON_AddStringToObject(o, "state", state ? state : "");
  free(text);
  mc_call_done(c, o);
}

/* start/status: answer with the record. output: now read. */
void mc_on_record(uint64_t tag, const mc_reply_t *r) {
  call_t *c = mc_call_answered(tag);
  if (c == NULL) return;
  if (r->err) {
    mc_call_rpc_fail(c, r->err);
    return;
  }
  if (c->tool != T_OUTPUT) {
    mc_call_done(c, exec_view(r->result));
    return;
  }
  cJSON_Delete(c->rec);
  c->rec = cJSON_Duplicate(r->result, 1);
  const cJSON *sv = mc_arg(c, "stream");
  const char *stream = cJSON_IsString(sv) ? sv->valuestring : "stdout";
  if (mc_rec_pty(c->rec)) {
    if (strcmp(stream, "stderr") == 0) {
      mc_call_fail(c, "execution %llu runs under a pty: its only stream is read as stdout",
                   (unsigned long long)c->id);
      return;
    }
    stream = "pty";
  }
  double total = mc_rec_bytes(c->rec, stream);
  double off = mc_num(c, "offset", 0);
  if (off < 0) off = total + off > 0 ? total + off : 0;
  cJSON_AddStringToObject(c->rec, "__stream", stream);
  cJSON_AddNumberToObject(c->rec, "__from", off);
  cJSON *p = mc_params2(cJSON_CreateNumber((double)c->id), cJSON_CreateString(stream));
  cJSON_AddItemToArray(p, cJSON_CreateNumber(off));
  cJSON_AddItemToArray(p, cJSON_CreateNumber(mc_num(c, "max_bytes", DEFAULT_READ)));
  mc_call_rpc(c, "read", p, on_read, 0);
}

void mc_on_list(uint64_t tag, const mc_reply_t *r) {
  call_t *c = mc_call_answered(tag);
  if (c == NULL) return;
  if (r->err) {
    mc_call_rpc_fail(c, r->err);
    return;
  }
  int total = cJSON_GetArraySize(r->result);
  int limit = (int)mc_num(c, "limit", 50);
  cJSON *o = cJSON_CreateObject();
  cJSON *a = cJSON_AddArrayToObject(o, "executions");
  int i = 0;
  for (const cJSON *rec = r->result->child; rec; rec = rec->next, i++)
    if (i >= total - limit) cJSON_AddItemToArray(a, exec_view(rec));
  cJSON_AddNumberToObject(o, "total", total);
  mc_call_done(c, o);
}

void mc_on_cancel(uint64_t tag, const mc_reply_t *r) {
  call_t *c = mc_call_answered(tag);
  if (c == NULL) return;
  if (r->err) {
    mc_call_rpc_fail(c, r->err);
    return;
  }
  const char *res = cJSON_IsString(r->result) ? r->result->valuestring : "";
  if (strcmp(res, "not_found") == 0) {
    mc_call_fail(c, "ENOENT: no such execution %llu", (unsigned long long)c->id);
    return;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "id", (double)c->id);
  cJSON_AddStringToObject(o, "result", res);
  mc_call_done(c, o);
}

/* input: slot 0 = the data written, slot 1 = stdin closed. */
void mc_on_input(uint64_t tag, const mc_reply_t *r) {
  call_t *c = mc_call_answered(tag);
  if (c == NULL) return;
  /* The data was written; a child that read it and ended at once has no
   * stdin left to close: that is not an error of this call. */
  const cJSON *en = r->err ? cJSON_GetArrayItem(r->err, 0) : NULL;
  int gone =
      (tag & 3) == 1 && cJSON_IsString(en) &&
      (strcmp(en->valuestring, "ENOTRUNNING") == 0 || strcmp(en->valuestring, "ESTDINCLOSED") == 0);
  if (r->err && !gone) {
    mc_call_rpc_fail(c, r->err);
    return;
  }
  int eof = mc_flag(c, "eof", 0);
  if ((tag & 3) == 0 && eof) {
    mc_call_rpc(c, "close_stdin", mc_params1(cJSON_CreateNumber((double)c->id)), mc_on_input, 1);
    return;
  }
  cJSON *o = cJSON_CreateObject();
  cJSON_AddNumberToObject(o, "id", (double)c->id);
  cJSON_AddNumberToObject(o, "bytes", (double)strlen(mc_arg(c, "data")->valuestring));
  cJSON_AddBoolToObject(o, "stdin_closed", eof);
  mc_call_done(c, o);
}
