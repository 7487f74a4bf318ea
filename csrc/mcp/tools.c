/* tools.c — the MCP tools of proctor-mcp: tools/list, and tools/call from
 * the request to its first RPC (arguments and fence: fence.c; the steps
 * after: steps.c; progress: progress.c); cancellation; the connection to a
 * proctor socket, made on first use.
 *
 * Thread: main.
 *
 * A tool call is a call_t (call.h, call.c). Each step (steps.c) sends one
 * or two RPC requests and returns; the answer (rpc.c) finds the call again by
 * its serial number, so a call that was cancelled (notifications/cancelled)
 * or answered meanwhile is simply not found and the late answer is dropped.
 *
 *   run:    start ─► wait(wait_ms) ─► get ─► read tails ─► result
 *   wait:            wait(timeout) ─► get ─► read tails ─► result
 *   start:  start ─► get ─► result            status: get ─► result
 *   output: get ─► read ─► result             list:   list ─► result
 *   input:  input [─► close_stdin] ─► result  cancel: cancel ─► result
 *   interact: get ─► input ─► get every 25 ms until it waits for input ─► read ─► result
 *             (interact.c)
 *
 * While run and wait wait, a client that sent _meta.progressToken gets
 * notifications/progress every mc_opts.progress_ms (elapsed time, output size
 * and last line). Every result is masked (mc_mask_json) before it is sent.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"
#include "call.h"
#include "schemas.h"

/* The names tools/list shows (clear when a client shows them bare), and the
 * names of the first release, still accepted by tools/call (for one more
 * release: :help proctor-mcp-tools; NULL: a later tool, no old name). Same
 * order as tool_id_t. */
static const char *const tool_names[] = {
    "run_command", "start_command",  "command_status",   "list_commands",        "read_output",
    "send_input",  "cancel_command", "wait_for_command", "interact_with_command"};
static const char *const old_names[] = {"run",   "start",  "status", "list", "output",
                                        "input", "cancel", "wait",   NULL};
static cJSON *tool_defs[MC_NTOOLS];

/* The owner identity said in hello: --session, else the client's name and
 * our cwd ("claude-code /home/me/project"; the cwd's head is cut to fit the
 * server's 256 bytes). */
static const char *identity(void) {
  static char buf[257];
  if (mc_opts.session) return mc_opts.session;
  const char *name = mc_client_name(), *cwd = mc_opts.cwd ? mc_opts.cwd : "";
  size_t room = sizeof(buf) - 1 - strlen(name) - 1, n = strlen(cwd);
  if (n > room) cwd += pr_utf8_skip(cwd + (n - room), room) + (n - room);
  snprintf(buf, sizeof(buf), "%s %s", name, cwd);
  return buf;
}

void mc_tools_call(const cJSON *id, const cJSON *params) {
  const cJSON *name = cJSON_GetObjectItemCaseSensitive(params, "name");
  int tool = -1;
  for (int i = 0; cJSON_IsString(name) && i < (int)MC_NTOOLS; i++)
    if (strcmp(name->valuestring, tool_names[i]) == 0 ||
        (old_names[i] && strcmp(name->valuestring, old_names[i]) == 0))
      tool = i;
  if (tool < 0) {
    char msg[256];
    snprintf(msg, sizeof(msg), "unknown tool %s",
             cJSON_IsString(name) ? name->valuestring : "(no name)");
    mc_respond_error(id, -32602, msg);
    return;
  }
  call_t *c = mc_call_new(id, (tool_id_t)tool);
  if (c == NULL) {
    mc_respond_error(id, -32603, "out of memory");
    return;
  }
  c->timer.cb = mc_progress_tick;
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(params, "arguments");
  c->args = args ? cJSON_Duplicate(args, 1) : cJSON_CreateObject();
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(params, "_meta");
  const cJSON *tok = meta ? cJSON_GetObjectItemCaseSensitive(meta, "progressToken") : NULL;
  if (cJSON_IsString(tok) || cJSON_IsNumber(tok)) c->token = cJSON_Duplicate(tok, 1);

  char err[1024];
  const cJSON *schema = cJSON_GetObjectItemCaseSensitive(tool_defs[tool], "inputSchema");
  if (!cJSON_IsObject(c->args)) {
    mc_call_fail(c, "invalid arguments: an object expected");
    return;
  }
  if (mc_args_check(schema, c->args, "", err, sizeof(err))) {
    mc_call_fail(c, "invalid arguments: %s", err);
    return;
  }
  const cJSON *idv = mc_arg(c, "id");
  if (idv) c->id = (uint64_t)idv->valuedouble;
  cJSON *spec = NULL;
  if (c->tool == T_RUN || c->tool == T_START) {
    if ((spec = mc_start_spec(c)) == NULL) return;
  }
  if (mc_connect(mc_client_name(), identity(), err, sizeof(err)) != 0) {
    cJSON_Delete(spec);
    mc_call_fail(c, "proctor is not reachable: %s", err);
    return;
  }
  cJSON *idj = cJSON_CreateNumber((double)c->id);
  switch (c->tool) {
  case T_RUN:
  case T_START:
    cJSON_Delete(idj);
    mc_call_rpc(c, "start", mc_params1(spec), mc_on_started, 0);
    break;
  case T_STATUS:
  case T_OUTPUT: mc_call_rpc(c, "get", mc_params1(idj), mc_on_record, 0); break;
  case T_LIST: {
    cJSON_Delete(idj);
    const cJSON *st = mc_arg(c, "state");
    cJSON *p = cJSON_CreateArray();
    if (st) {
      cJSON *f = cJSON_CreateObject();
      cJSON_AddStringToObject(f, "state", st->valuestring);
      cJSON_AddItemToArray(p, f);
    }
    mc_call_rpc(c, "list", p, mc_on_list, 0);
    break;
  }
  case T_INPUT:
    mc_call_rpc(c, "input", mc_params2(idj, cJSON_CreateString(mc_arg(c, "data")->valuestring)),
                mc_on_input, 0);
    break;
  case T_CANCEL:
    mc_call_rpc(c, "cancel", mc_params2(idj, cJSON_CreateBool(mc_flag(c, "force", 0))),
                mc_on_cancel, 0);
    break;
  case T_WAIT:
    cJSON_Delete(idj);
    mc_send_wait(c, mc_num(c, "timeout_ms", DEFAULT_WAIT_MS));
    break;
  case T_INTERACT:
    cJSON_Delete(idj);
    mc_interact_begin(c);
    break;
  }
}

void mc_tools_cancel(const cJSON *id) {
  call_t *c = mc_call_find_request(id);
  if (c == NULL) return;
  c->cancelled = 1;
  mc_timer_stop(&c->timer);
  /* A run that was cancelled stops its command; a wait only stops waiting. */
  if (c->tool == T_RUN && c->id) {
    cJSON *p = mc_params1(cJSON_CreateNumber((double)c->id));
    cJSON_AddItemToArray(p, cJSON_CreateFalse());
    mc_rpc_call("cancel", p, NULL, 0);
  }
  if (c->inflight <= 0) mc_call_free(c);
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
