/* call.h — one MCP tool call in progress (call_t), shared by the files of
 * the tools: call.c (the table of calls, answers, RPC requests), fence.c
 * (argument checks, the cwd and command policy, the start spec), steps.c
 * (each tool as a few steps of RPC answers), progress.c (notifications/progress)
 * and tools.c (the entry points).
 *
 * Thread: main.
 *
 * A call is answered once: mc_call_fail or mc_call_done answer it and free
 * it. An RPC answer finds its call again by serial number (mc_call_answered):
 * a call that was cancelled or answered meanwhile is not found, and the late
 * answer is dropped.
 */
#ifndef PR_MCP_CALL_H
#define PR_MCP_CALL_H

#include <string.h>

#include "mcp.h"

#define DEFAULT_WAIT_MS 30000
#define DEFAULT_TAIL 16384
#define DEFAULT_READ 65536
#define PROGRESS_TAIL 512

typedef enum {
  T_RUN,
  T_START,
  T_STATUS,
  T_LIST,
  T_OUTPUT,
  T_INPUT,
  T_CANCEL,
  T_WAIT,
  T_INTERACT
} tool_id_t;

struct interact; /* interact.c */

typedef struct call {
  uint64_t serial;
  cJSON *req_id; /* the JSON-RPC id (owned) */
  cJSON *token;  /* _meta.progressToken (owned) or NULL */
  cJSON *args;   /* arguments (owned) */
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
  struct interact *ix; /* interact: its state (interact.c), else NULL */
  struct call *next;
} call_t;

/* ---- call.c ---------------------------------------------------------------------------------- */

/* A new call for the JSON-RPC request `req_id` (copied), in the table.
 * NULL when out of memory. */
call_t *mc_call_new(const cJSON *req_id, tool_id_t tool);
/* The call with this serial number, or NULL. */
call_t *mc_call_find(uint64_t serial);
/* The call (not cancelled) of the JSON-RPC request `id`, or NULL. */
call_t *mc_call_find_request(const cJSON *id);
/* Take c out of the table and free it. */
void mc_call_free(call_t *c);
/* Answer with a tool execution error (isError) and free the call. */
void mc_call_fail(call_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Answer with structured content (consumed) and its JSON as text; free the call. */
void mc_call_done(call_t *c, cJSON *sc);
/* Fail with "ENOENT: no such execution 4" from an RPC error [name, message]. */
void mc_call_rpc_fail(call_t *c, const cJSON *err);
/* Send an RPC request for call c; `slot` (0..3) comes back with the answer.
 * When not connected the call fails (is answered and freed): returns -1. */
int mc_call_rpc(call_t *c, const char *method, cJSON *params, mc_rpc_cb cb, int slot);
/* The call an answer is for: NULL when it is gone or cancelled (then freed once idle). */
call_t *mc_call_answered(uint64_t tag);
/* The call an answer with an execution record is for, the record now its c->rec; NULL when
 * it is gone or cancelled, or when the answer was an error (the call then failed with it). */
call_t *mc_call_record(uint64_t tag, const mc_reply_t *r);

/* ---- arguments and records (cJSON, as the tool and the server gave them) ------------------- */

static inline const cJSON *mc_arg(const call_t *c, const char *k) {
  return cJSON_GetObjectItemCaseSensitive(c->args, k);
}

static inline double mc_num(const call_t *c, const char *k, double dflt) {
  const cJSON *v = mc_arg(c, k);
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static inline int mc_flag(const call_t *c, const char *k, int dflt) {
  const cJSON *v = mc_arg(c, k);
  return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* RPC parameters [a] and [a, b] (the values are consumed). */
static inline cJSON *mc_params1(cJSON *a) {
  cJSON *p = cJSON_CreateArray();
  cJSON_AddItemToArray(p, a);
  return p;
}

static inline cJSON *mc_params2(cJSON *a, cJSON *b) {
  cJSON *p = mc_params1(a);
  cJSON_AddItemToArray(p, b);
  return p;
}

static inline int mc_rec_terminal(const char *state) {
  return state && (strcmp(state, "completed") == 0 || strcmp(state, "failed") == 0 ||
                   strcmp(state, "canceled") == 0 || strcmp(state, "timed_out") == 0);
}

static inline const char *mc_rec_str(const cJSON *rec, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static inline double mc_rec_num(const cJSON *rec, const char *k, double dflt) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(rec, k);
  return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

/* Bytes written so far to `stream` ("stdout", "stderr", "pty") of the record. */
static inline double mc_rec_bytes(const cJSON *rec, const char *stream) {
  return mc_rec_num(cJSON_GetObjectItemCaseSensitive(rec, "bytes"), stream, 0);
}

static inline int mc_rec_pty(const cJSON *rec) {
  return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(rec, "pty"));
}

/* ---- fence.c --------------------------------------------------------------------------------- */

/* Check v against the subset of JSON Schema the tool schemas use. Returns 0,
 * or -1 with a message naming `path`. */
int mc_args_check(const cJSON *schema, const cJSON *v, const char *path, char *err, size_t errlen);
/* run/start: the start spec (command policy, cwd, env, secrets). Returns NULL
 * after failing the call. */
cJSON *mc_start_spec(call_t *c);

/* ---- steps.c: the RPC answers of each tool --------------------------------------------------- */

/* run/wait: wait `ms` for the end (progress notifications meanwhile). */
void mc_send_wait(call_t *c, double ms);
void mc_on_started(uint64_t tag, const mc_reply_t *r); /* start: the id; then wait or get */
void mc_on_record(uint64_t tag, const mc_reply_t *r);  /* get: status answers; output reads */
void mc_on_list(uint64_t tag, const mc_reply_t *r);
void mc_on_cancel(uint64_t tag, const mc_reply_t *r);
void mc_on_input(uint64_t tag, const mc_reply_t *r); /* slot 0: written, slot 1: stdin closed */
/* Bytes of a read answer as text: continuation bytes at the start skipped,
 * an incomplete character at the end left out when `cut_end`, the rest
 * repaired to UTF-8. *skip and *len say which bytes the text holds. */
char *mc_answer_text(const mc_reply_t *r, int cut_end, size_t *skip, size_t *len);

/* ---- interact.c ------------------------------------------------------------------------------ */

/* interact_with_command, once connected: get ─► input ─► watch ─► answer. */
void mc_interact_begin(call_t *c);
/* Free an interact state (NULL: nothing). */
void mc_interact_free(struct interact *ix);

/* ---- progress.c ------------------------------------------------------------------------------ */

/* The timer callback of a call that waits: ask for the record and the last
 * line of output, then send notifications/progress. */
void mc_progress_tick(mc_timer_t *t);

#endif
