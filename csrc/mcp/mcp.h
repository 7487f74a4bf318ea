/* mcp.h — proctor-mcp, an MCP server (stdio, JSON-RPC 2.0) that runs the
 * agent's commands as proctor executions. Internal declarations shared by the
 * files of csrc/mcp/.
 *
 * Thread: one. Everything runs on the main thread in one poll() loop
 * (loop.c): stdin (MCP messages), the proctor msgpack-rpc socket (rpc.c) and,
 * in embedded mode, the engine's wake fd (embedded.c).
 *
 *   MCP client ──stdin──► main.c (framing, initialize, tools/list, cancel)
 *        ▲                   │ tools/call
 *        └──stdout── send.c ◄┤
 *                            ▼
 *                        tools.c ─► fence.c (arguments, policy, the start spec)
 *                            │  ─► steps.c, progress.c (RPC answers) ─► call.c (answer)
 *                            ▼
 *                         rpc.c ──► proctor socket (the editor's, or the
 *                                   private one of embedded.c)
 *
 * Layers (scripts/check-layers.sh): these files include their own headers,
 * base/ and include/ only. Only rpc.c packs msgpack (base/mpack.h); only
 * embedded.c uses the engine's public API (include/proctor.h).
 */
#ifndef PR_MCP_H
#define PR_MCP_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define MC_VERSION "0.1.0"
#define MC_NAME_MAX 128        /* bytes of a client name passed to `hello` */
#define MC_LINE_MAX (8u << 20) /* bytes of one incoming MCP message */

/* ---- loop.c: fds and timers -------------------------------------------------------- */

typedef struct mc_timer {
  uint64_t due_ms; /* mc_now_ms() value at which cb runs */
  void (*cb)(struct mc_timer *t);
  int active;
  struct mc_timer *next; /* the loop's list of active timers */
} mc_timer_t;

/* Monotonic milliseconds. */
uint64_t mc_now_ms(void);
/* Arm (or re-arm) `t` to run once after `ms`. */
void mc_timer_start(mc_timer_t *t, uint64_t ms);
/* Disarm `t` (no-op when not armed). */
void mc_timer_stop(mc_timer_t *t);
/* 1 while `t` is armed. */
static inline int mc_timer_active(const mc_timer_t *t) { return t->active; }
/* Milliseconds until the next timer is due (0: now), or -1 when none is armed. */
int mc_timers_timeout(void);
/* Run the callbacks of the timers that are due. */
void mc_timers_run(void);

/* ---- text.c: masking, policy ---------------------------------------------------- */

/* Replace every occurrence of every configured secret value in every string
 * of `j` (keys too) with "***". */
void mc_mask_json(cJSON *j);
/* Add a secret value (copied) to mask. Returns 0 or -1 (out of memory). */
int mc_mask_add(const char *value);
/* glob match (fnmatch without FNM_PATHNAME): 1 when `s` matches `pat`. */
int mc_glob(const char *pat, const char *s);
/* 1 when an environment variable `name` may never be set by a tool call
 * while an allow list is in force, not even with --allow-env: PATH, LD_*,
 * BASH_ENV, ENV (they choose which code runs). */
int mc_env_never(const char *name);

/* ---- server options (main.c parses them) ------------------------------------------------------------ */

typedef struct {
  const char *name;  /* the variable the child gets */
  const char *value; /* its value (from our environment) */
} mc_secret_t;

typedef struct {
  const char *socket; /* --socket / PROCTOR_SOCKET; NULL: discover */
  int embedded;       /* --embedded: never use an editor's socket */
  int discover;       /* look for an editor's socket when none is named (default 1) */
  char **allow_cwd;   /* realpath'd directories; n_allow_cwd == 0: anywhere */
  size_t n_allow_cwd;
  const char **deny; /* glob patterns a command must not match */
  size_t n_deny;
  const char **allow; /* glob patterns a command must match one of (when any) */
  size_t n_allow;
  const char **allow_env; /* with an allow list: the only names `env` may set */
  size_t n_allow_env;
  const char **allow_target; /* targets the `target` argument may name; none: no target */
  size_t n_allow_target;
  mc_secret_t *secrets;
  size_t n_secrets;
  int kill_on_exit;      /* socket mode: executions end when proctor-mcp exits */
  const char *shepherd;  /* embedded: proctor-shepherd path; NULL: next to us */
  uint64_t output_limit; /* embedded: bytes kept per stream */
  const char *cwd;       /* our working directory (realpath), the default cwd */
  uint32_t progress_ms;  /* interval of notifications/progress */
  const char *session;   /* --session: the owner identity; NULL: clientInfo.name and the cwd */
  const char *shell;     /* runs a command string with -c: bash on PATH, else /bin/sh; --shell */
} mc_opts_t;

extern mc_opts_t mc_opts;

/* ---- loop.c: stop signals -------------------------------------------------------------------- */

/* Install the handlers of SIGTERM, SIGINT and SIGHUP and make the self-pipe.
 * Returns 0, or -1 with errno. */
int mc_stop_init(void);
/* 1 once SIGTERM, SIGINT or SIGHUP came (the loop ends at its next turn). */
int mc_stop_requested(void);
/* The read end of the self-pipe a stop signal writes to (poll it with POLLIN
 * to wake on a signal that came before the poll). */
int mc_stop_fd(void);

/* ---- send.c: what goes out ------------------------------------------------------------------ */

/* Send one JSON-RPC message (consumes `msg`). Never waits forever: while
 * stdout is full it gives up when a stop signal comes or stdin reaches its
 * end (the client is gone), and from then on drops every message
 * (mc_send_closed). */
void mc_send(cJSON *msg);
/* 1 once stdout was given up (see mc_send): the loop ends at its next turn. */
int mc_send_closed(void);
/* Send a response {id, result} (consumes `result`; `id` is copied). */
void mc_respond(const cJSON *id, cJSON *result);
/* Send an error response (`id` copied; NULL: id null). */
void mc_respond_error(const cJSON *id, int code, const char *message);
/* ---- log.c ---------------------------------------------------------------------------------- */

/* The program name log lines start with ("proctor-mcp"; proctor-acp sets its own). */
extern const char *mc_log_name;
/* Log a line to stderr, prefixed "<mc_log_name>: ". */
void mc_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- send.c (continued) ---------------------------------------------------------------------- */

/* The client's name (clientInfo.name), or "mcp-client". */
const char *mc_client_name(void);
/* Keep `name` (initialize's clientInfo.name) as the client's name: at most
 * MC_NAME_MAX bytes, cut at a character boundary. */
void mc_set_client_name(const char *name);

/* ---- era.c: legacy (initialize) and 2026-07-28 (per-request _meta) ----------------------------- */

#define MC_MODERN_VERSION "2026-07-28"
#define MC_UNSUPPORTED_VERSION (-32022) /* UnsupportedProtocolVersion (2026-07-28) */
#define MC_LIST_TTL_MS 3600000 /* tools/list's ttlMs: the list never changes in a process */

/* The protocol versions proctor-mcp speaks, newest first, NULL-terminated. */
extern const char *const mc_versions[];
/* Before a request `method` with `id` is served: 0 to serve it, or -1 after
 * answering it with an error (an unsupported version, a malformed _meta, or a
 * request without _meta before initialize). A 2026-07-28 request's id is
 * remembered until it is answered (mc_era_decorate) or cancelled. */
int mc_era_check(const cJSON *id, const char *method, const cJSON *params);
/* A legacy initialize was answered: requests without _meta are served from now on. */
void mc_era_initialized(void);
/* 1 when `id` is a 2026-07-28 request not answered yet. */
int mc_era_modern(const cJSON *id);
/* Forget request `id` (it is never answered: cancelled, or answered with an error). */
void mc_era_forget(const cJSON *id);
/* Called for every result: a 2026-07-28 request's gets resultType and
 * _meta serverInfo (and is forgotten). */
void mc_era_decorate(const cJSON *id, cJSON *result);
/* {name, title, version} of proctor-mcp (a new object). */
cJSON *mc_server_info(void);

/* ---- rpc.c: the msgpack-rpc client ------------------------------------------------------- */

/* A reply: `err` (NULL on success) is [name, message] converted to JSON;
 * `result` the result converted to JSON (bin values: UTF-8-cleaned strings).
 * `data`/`data_len`: the raw bytes of a result map's "data" bin (read), else NULL.
 * The callback does not own them. */
typedef struct {
  const cJSON *err;
  const cJSON *result;
  const char *data;
  size_t data_len;
} mc_reply_t;
typedef void (*mc_rpc_cb)(uint64_t tag, const mc_reply_t *r);

/* Connect to the socket at `path` after checking it is safe (ours, 0600 in a
 * 0700 directory; the peer's uid is ours), then say `hello` with `name` and,
 * unless NULL, the owner `identity` (connections of one identity share their
 * executions: |proctor-rpc-session|). Returns 0, or -1 with a message in `err`. */
int mc_rpc_connect(const char *path, const char *name, const char *identity, char *err,
                   size_t errlen);
/* 1 while connected. */
int mc_rpc_connected(void);
/* Why the connection was lost (empty when it was not). */
const char *mc_rpc_lost(void);
/* Send a request; `params` (a JSON array, consumed) becomes msgpack. `cb(tag, reply)`
 * (may be NULL: the answer is dropped) runs once with the answer, or with err = ["ECONNRESET", ...] when the
 * connection is lost first. Returns 0; -1 when not connected; -2 when the
 * request is larger than the server takes in one message (mc_rpc_refused
 * says why; nothing was sent, the connection is untouched). cb is not called
 * when it returns non-zero. */
int mc_rpc_call(const char *method, cJSON *params, mc_rpc_cb cb, uint64_t tag);
/* Why mc_rpc_call last returned -2 ("ETOOBIG: ..."). */
const char *mc_rpc_refused(void);
/* 1 when the server's hello lists the feature "wait_output" (`wait` answers at
 * the first output past given byte counts); 0 for an older one. */
int mc_rpc_wait_output(void);
/* The fd to poll (-1 when not connected) and the events wanted. */
int mc_rpc_fd(short *events);
/* Handle readiness of the fd (revents from poll). */
void mc_rpc_io(short revents);
/* Close the connection (pending callbacks get ECONNRESET). */
void mc_rpc_close(void);

/* ---- discover.c: which socket ----------------------------------------------------------- */

/* Check that `path` is a socket we may talk to: ours, mode 0600 (no group or
 * other bits), in a directory of ours with mode 0700. Returns 0 or -1 with a
 * message in `err`. */
int mc_socket_safe(const char *path, char *err, size_t errlen);
/* Find the running editor's proctor socket: in $XDG_RUNTIME_DIR/proctor/,
 * /run/user/<uid>/proctor/ and /tmp/proctor-<uid>/ (each directory once), the
 * <pid>.sock of a live process, preferring one of our ancestors; else the only one. Returns a malloc'd path, or NULL (with
 * why in `why`: none found, or several and none an ancestor). */
char *mc_discover(char *why, size_t whylen);

/* ---- embedded.c: a private engine ------------------------------------------------------- */

/* Start an engine listening on a socket in a fresh private 0700 directory.
 * Returns 0 and the socket path (static storage), or -1 with `err`. */
int mc_embedded_start(const char **path, char *err, size_t errlen);
/* The engine's wake fd (-1 when none). */
int mc_embedded_fd(void);
/* Take and drop the engine's host events (they are read through the socket). */
void mc_embedded_drain(void);
/* Cancel everything, wait (bounded), remove the directory. */
void mc_embedded_stop(void);

/* ---- connect.c: the connection, made on first use ------------------------------------------ */

/* Connect to proctor unless connected: the socket of mc_opts.socket, else
 * (mc_opts.discover) the running editor's one (mc_discover), else a private
 * embedded engine; `name` and `identity` (NULL: none) go to `hello`.
 * Returns 0, or -1 with why in `err`. */
int mc_connect(const char *name, const char *identity, char *err, size_t errlen);

/* mc_opts_finish: after the options were parsed, fill in what the
 * environment gives: the socket from PROCTOR_SOCKET (unless --socket or
 * --embedded), the current directory (realpath) as mc_opts.cwd. Returns 0, or
 * -1 after logging why. Main thread, once. */
int mc_opts_finish(void);
/* "embedded" when the connection goes to our own engine, else "editor". */
const char *mc_connect_mode(void);

/* ---- tools.c (the tool files share call.h) -------------------------------------------------- */

/* Parse the tool definitions (schemas.h). Returns 0, or -1 (a bug: logged). */
int mc_tools_init(void);
/* The tools/list result (a new object). */
cJSON *mc_tools_list(void);
/* Start tools/call (`id` and `params` borrowed). `progress` is the
 * _meta.progressToken or NULL. Answers now or later via mc_respond. */
void mc_tools_call(const cJSON *id, const cJSON *params);
/* notifications/cancelled for request `id`: stop it and never answer it. */
void mc_tools_cancel(const cJSON *id);

#endif
