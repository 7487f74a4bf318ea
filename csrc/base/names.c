/* base/names.c — the names every surface uses for states, streams, control
 * outcomes, worker states, the worker options' enums (protocol, restart), reply
 * statuses and signals (include/proctor.h).
 *
 * Thread: any. Pure functions over static tables.
 */
#include <stdio.h>
#include <string.h>

#include "include/proctor.h"

static const char *const state_names[PR_NSTATE] = {"queued", "starting", "running",  "completed",
                                                   "failed", "canceled", "timed_out"};
static const char *const stream_names[PR_NSTREAM] = {"stdout", "stderr", "pty"};
static const char *const cancel_names[] = {"canceling", "already_canceling", "already_terminal",
                                           "not_found"};
static const char *const delete_names[] = {"deleted", "active_process_conflict", "not_found"};
static const char *const ws_names[PR_NWS] = {"starting", "ready",   "busy",
                                             "backoff",  "stopped", "fatal"};
/* indexed by pr_worker_protocol_t and pr_worker_restart_t */
static const char *const protocol_names[] = {"jsonl", "msgpack-rpc"};
static const char *const restart_names[] = {"never", "on-failure", "always"};
static const char *const rs_names[PR_NRS] = {
    "ok", "error", "canceled", "timeout", "worker_exited", "worker_fatal", "rejected"};

const char *pr_state_name(pr_state_t s) { return s < PR_NSTATE ? state_names[s] : "unknown"; }

int pr_state_from_name(const char *name) {
  for (int i = 0; i < PR_NSTATE; i++)
    if (strcmp(name, state_names[i]) == 0) return i;
  return -1;
}

int pr_state_terminal(pr_state_t s) { return s >= PR_COMPLETED && s < PR_NSTATE; }

const char *pr_stream_name(int s) { return s >= 0 && s < PR_NSTREAM ? stream_names[s] : "?"; }

int pr_stream_from_name(const char *name) {
  for (int i = 0; i < PR_NSTREAM; i++)
    if (strcmp(name, stream_names[i]) == 0) return i;
  return -1;
}

const char *pr_cancel_result_name(pr_cancel_result_t r) {
  return (unsigned)r < 4 ? cancel_names[r] : "not_found";
}

const char *pr_delete_result_name(pr_delete_result_t r) {
  return (unsigned)r < 3 ? delete_names[r] : "not_found";
}

int pr_reason_valid(const char *s) {
  size_t n = s ? strlen(s) : 0;
  if (n == 0 || n > PR_REASON_MAX) return 0;
  for (size_t i = 0; i < n; i++)
    if (!((s[i] >= 'a' && s[i] <= 'z') || s[i] == '_')) return 0;
  return 1;
}

const char *pr_worker_state_name(int ws) {
  return ws >= 0 && ws < PR_NWS ? ws_names[ws] : "unknown";
}

static int index_of(const char *const *v, int n, const char *name) {
  for (int i = 0; name && i < n; i++)
    if (strcmp(name, v[i]) == 0) return i;
  return -1;
}

const char *pr_worker_protocol_name(int p) {
  return p >= 0 && p <= PR_WP_MSGPACK ? protocol_names[p] : NULL;
}

int pr_worker_protocol_from_name(const char *name) {
  return index_of(protocol_names, PR_WP_MSGPACK + 1, name);
}

const char *pr_worker_restart_name(int r) {
  return r >= 0 && r <= PR_WR_ALWAYS ? restart_names[r] : NULL;
}

int pr_worker_restart_from_name(const char *name) {
  return index_of(restart_names, PR_WR_ALWAYS + 1, name);
}

const char *pr_reply_status_name(int st) {
  return st >= 0 && st < PR_NRS ? rs_names[st] : "unknown";
}

const char *pr_signal_name(int sig, char *buf, size_t n) {
  const char *abbr = sigabbrev_np(sig);
  if (abbr) snprintf(buf, n, "SIG%s", abbr);
  else snprintf(buf, n, "SIG%d", sig);
  return buf;
}
