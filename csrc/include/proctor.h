/* include/proctor.h — the public C API of a proctor engine: the one header
 * the Lua binding, the tests and the fuzzer include (test hooks apart, in
 * proctor_test.h). Declarations only; it includes nothing of the core.
 *
 * Thread: every pr_engine_* function is called from the HOST thread (the one
 * that owns the engine: Neovim's main thread, a Lua script, a C test). The
 * engine runs its own thread with its own uv_loop_t; these functions talk to
 * it through a locked command queue + uv_async_send, and read its events from
 * a locked event queue whose eventfd is readable while events are pending.
 * Only integers and owned byte buffers cross between the threads. The name,
 * error and record functions at the end are pure and run on any thread.
 *
 * Errors: 0 or a negative PR_E* / UV_E* code (the table below). Control calls
 * whose outcomes are part of the contract (cancel, delete) return those
 * outcomes as pr_cancel_result_t / pr_delete_result_t values instead.
 *
 * Sessions: every execution belongs to a session (0 = the host itself,
 * >0 = an RPC connection). A call made for session S > 0 sees only S's
 * executions; others answer "not found". Session 0 sees everything.
 *
 * Where the pieces live: ARCHITECTURE.md at the root of the repository.
 */
#ifndef PR_PROCTOR_H
#define PR_PROCTOR_H

#include <stddef.h>
#include <stdint.h>

/* The core's version: core.version in Lua, `hello` over RPC. */
#define PR_VERSION "0.1.0"

/* ---- errors ----------------------------------------------------------------------------- */

/* Every fallible function returns 0 or a negative code: either a libuv code
 * (UV_E*, which are negated errnos) passed through, or a PR_E* code from the
 * table below. The same NAMES appear in C, in Lua (`nil, "ENAME: msg", "ENAME"`)
 * and on the RPC wire (`[name, message]`).
 *
 * X(name, value, message). Values sit far below any errno so they never clash
 * with UV_E* codes. */
#define PR_ERRNO_MAP(X)                                       \
  X(ENOENT, -30001, "no such execution")                      \
  X(ENOTRUNNING, -30002, "execution is not running")          \
  X(ESTDINCLOSED, -30003, "stdin of the execution is closed") \
  X(ECLOSED, -30004, "engine is closed")                      \
  X(EINVAL, -30005, "invalid argument")                       \
  X(ENOMEM, -30006, "out of memory")                          \
  X(ESHEPHERD, -30007, "cannot start the shepherd helper")    \
  X(EPROTO, -30008, "protocol error")                         \
  X(ETOOBIG, -30009, "argument too large")                    \
  X(ENOSTREAM, -30010, "no such stream for this execution")   \
  X(EBUSY, -30011, "resource busy")                           \
  X(ENOMETHOD, -30012, "no such method")                      \
  X(ENOTWORKER, -30013, "execution is not a worker")          \
  X(EPERM, -30014, "execution belongs to another session")

typedef enum {
#define X(name, value, msg) PR_##name = value,
  PR_ERRNO_MAP(X)
#undef X
} pr_errno_t;

/* pr_err_name: the symbolic name of `err` ("ENOENT", "EPIPE", ...): PR_E*
 * and UV_E* codes; never NULL. pr_strerror: its message; never NULL.
 * Any thread (base/error.c). */
const char *pr_err_name(int err);
const char *pr_strerror(int err);

/* ---- engines, executions, events ----------------------------------------------------- */

typedef struct pr_engine pr_engine_t;

typedef enum {
  PR_QUEUED = 0,
  PR_STARTING,
  PR_RUNNING,
  PR_COMPLETED,
  PR_FAILED,
  PR_CANCELED,
  PR_TIMED_OUT,
  PR_NSTATE
} pr_state_t;

enum { PR_STDOUT = 0, PR_STDERR, PR_PTY, PR_NSTREAM };

typedef enum {
  PR_CANCELING = 0,
  PR_ALREADY_CANCELING,
  PR_ALREADY_TERMINAL,
  PR_CANCEL_NOT_FOUND
} pr_cancel_result_t;
typedef enum { PR_DELETED = 0, PR_ACTIVE_PROCESS_CONFLICT, PR_DELETE_NOT_FOUND } pr_delete_result_t;

/* Longest socket path accepted for `listen` (sun_path minus its NUL). */
#define PR_LISTEN_MAX 107

/* history_limit: keep every terminal record (core.new's history_limit = 0). */
#define PR_HISTORY_ALL UINT32_MAX

/* Engine options. Zero means "default" for every field. */
typedef struct {
  size_t output_limit;        /* bytes retained per stream; default 8 MiB */
  size_t output_memory;       /* of those, bytes kept in memory; older ones go to a spill file
                               * (base/ring.h); default (0) or >= output_limit: no file */
  const char *spill_dir;      /* where spill files are made; NULL: $XDG_CACHE_HOME/proctor,
                               * else ~/.cache/proctor */
  uint32_t history_limit;     /* terminal records kept; default 1000; PR_HISTORY_ALL: every one */
  uint64_t history_age_ms;    /* terminal records older than this are pruned; 0 = never */
  uint32_t max_running;       /* executions running at once; 0 = unlimited */
  uint32_t kill_grace_ms;     /* default SIGTERM → SIGKILL grace; default 2000 */
  uint32_t drain_ms;          /* how long output may still arrive after exit; default 500 */
  uint32_t secret_timeout_ms; /* secrets read from a store arrive within this; default 10000 */
  const char *shepherd_path;  /* proctor-shepherd binary; NULL = next to this library */
  int shepherd_early;         /* 1: the engine thread starts the shepherd as it starts, not at
                               * the first spawn (a failure is left for that spawn to report) */
  const char *listen;         /* msgpack-rpc socket path (< PR_LISTEN_MAX bytes); NULL = none */
  /* Durable files (journal.h, history.h, audit.h); NULL = off. */
  const char *history_file;    /* append-only msgpack history, loaded by pr_engine_new */
  size_t history_output_bytes; /* tail bytes kept per stream in the history; default 64 KiB */
  const char *audit_file;      /* JSON lines audit log */
  uint64_t audit_max_bytes;    /* rotate when the log would grow past this; default 10 MiB */
  uint32_t audit_keep;         /* rotated files kept (audit.1 .. audit.K); default 3 */
  /* Memory bounds (doc *proctor-limits*). */
  uint32_t max_queued; /* queued (and held) executions per session; more: PR_EBUSY; default 10000 */
  uint64_t ended_output_max; /* bytes all ended executions' rings keep together; default 64 MiB */
  uint32_t target_idle_ms;   /* a target's transport with no execution closes after this (ms);
                              * default 300000; reopened by the next execution */
} pr_engine_opts_t;

/* A supervised worker (worker.h, doc *proctor-workers*): an execution that
 * stays up and answers requests on stdio. Zero means "default" for numbers. */
typedef enum { PR_WP_JSONL = 0, PR_WP_MSGPACK } pr_worker_protocol_t;
typedef enum { PR_WR_NEVER = 0, PR_WR_ON_FAILURE, PR_WR_ALWAYS } pr_worker_restart_t;
typedef enum {
  PR_WS_STARTING = 0,
  PR_WS_READY,
  PR_WS_BUSY,
  PR_WS_BACKOFF,
  PR_WS_STOPPED,
  PR_WS_FATAL,
  PR_NWS
} pr_worker_state_t;
typedef struct {
  pr_worker_protocol_t protocol;
  pr_worker_restart_t restart;
  int32_t max_restarts;    /* restarts in a row before fatal; <0 = default 5 */
  uint32_t backoff_ms;     /* first restart delay, doubled per restart in a row; default 100 */
  uint32_t backoff_max_ms; /* cap of the delay; default 30000 */
  uint32_t healthy_ms; /* ready this long (or a success): the restart count resets; default 10000 */
  int ready_message;   /* ready at the first protocol message (else at spawn) */
  const char *ready_stderr; /* ready when a stderr line matches this POSIX ERE */
  uint32_t max_chunks;      /* undelivered chunk events per request; default 256 */
} pr_worker_spec_t;

/* How a worker request ended (pr_event_t.status of PR_EV_REPLY). */
typedef enum {
  PR_RS_OK = 0,
  PR_RS_ERROR,
  PR_RS_CANCELED,
  PR_RS_TIMEOUT,
  PR_RS_WORKER_EXITED,
  PR_RS_WORKER_FATAL,
  PR_RS_REJECTED,
  PR_NRS
} pr_reply_status_t;

/* A secret read from a store when the execution is spawned, instead of given
 * (doc *proctor-secrets*): exactly one of `store` and `command`. The value
 * goes to the child's environment as `name` and is masked like any secret;
 * one that cannot be read fails the execution (reason "secret_unavailable"),
 * never falling back to the environment. */
typedef struct {
  const char *name;              /* the environment variable */
  const char *store;             /* "secret-service": the desktop keyring, through libsecret */
  const char *const *attributes; /* store: "key=value" pairs the item has (at least one) */
  size_t nattributes;
  const char *const *command; /* argv of a command whose standard output is the value */
  size_t ncommand;
} pr_secret_source_t;

/* What to run. Strings are copied by pr_engine_start. */
typedef struct {
  const char *const *argv; /* argv[0..argc) */
  size_t argc;
  const char *shell;      /* instead of argv: run with /bin/sh -c */
  const char *cwd;        /* NULL = the host's cwd at start time (a target's: its home) */
  const char *target;     /* NULL = this machine; else the target's name (|proctor-targets|) */
  const char *transport;  /* with target: the command (/bin/sh -c) that reaches its relay */
  const char *const *env; /* "K=V" strings, added over the base environment */
  size_t envc;
  int clear_env;         /* base environment empty instead of the host's */
  int pty;               /* one pseudo-terminal instead of pipes */
  uint16_t cols, rows;   /* pty size; default 80x24 */
  int stdin_pipe;        /* 1 = stdin is a pipe for input(); 0 = /dev/null */
  uint64_t timeout_ms;   /* 0 = none */
  int64_t kill_grace_ms; /* <0 = engine default */
  int backpressure;      /* 1 = pause the child instead of dropping output */
  int hold;              /* 1 = stay queued until pr_engine_release (dependencies) */
  const char *label;
  const char *owner;              /* free-form owner label ("nvim", a client name) */
  uint64_t session;               /* 0 = host */
  const pr_worker_spec_t *worker; /* non-NULL: a supervised worker (stdin becomes a pipe) */
  /* Environment policy and secrets (secrets.h). */
  const char *const *secrets; /* "K=V": in the child's env only; V masked as *** in output */
  size_t nsecrets;
  const char *const *env_allow; /* non-NULL: inherit only these keys from the base env */
  size_t nallow;
  const pr_secret_source_t *sources; /* secrets read from a store at spawn time */
  size_t nsources;
} pr_spec_t;

/* ---- the start spec, described once (base/spec_fill.c; any thread) ----------------------- */

/* The fields of a start spec, in the order the help lists them:
 * X(NAME, key, TYPE, member, default, max, surfaces, help).
 *
 * `member` is where the value goes in a pr_spec_read_t; `default` is what it
 * holds when the key is absent; `max` bounds UINT and GRACE; `surfaces` says
 * which readers take the key (PR_SPEC_LUA: eng:start, PR_SPEC_RPC: the RPC
 * `start`); `help` is the help's text (scripts/gendoc.lua writes
 * *proctor-core-start* from it through core.spec_fields). pr_spec_fill reads
 * every surface through this list; no surface keeps its own key list.
 *
 * Types: BOOL a boolean; UINT an integer in [0, max]; GRACE the same, absent
 * -1 (the engine's default); STR a string without NUL bytes; CMD a non-empty
 * string (/bin/sh -c) or a non-empty list of strings (argv); ENV a map NAME =
 * value; SECRETS a map NAME = value or source; NAMES a list of variable names;
 * WORKER true or a map of PR_WORKER_FIELDS. CMD, ENV, SECRETS and NAMES walk
 * nested values and are read by the reader's own `structured` function. */
#define PR_SPEC_LUA 1u
#define PR_SPEC_RPC 2u
#define PR_SPEC_ANY 3u
#define PR_SPEC_FIELDS(X)                                                                      \
  X(CMD, "cmd", CMD, spec.argv, 0, 0, PR_SPEC_ANY, "argv list, or a string run by /bin/sh -c") \
  X(CWD, "cwd", STR, spec.cwd, 0, 0, PR_SPEC_ANY, "working directory (default: the host's)")   \
  X(TARGET, "target", STR, spec.target, 0, 0, PR_SPEC_ANY,                                     \
    "run on this target (|proctor-targets|): its name; over RPC one the editor configured "    \
    "(eng:target)")                                                                            \
  X(TRANSPORT, "transport", STR, spec.transport, 0, 0, PR_SPEC_LUA,                            \
    "with target: the command (/bin/sh -c) that runs its relay, from its first use; not "      \
    "over RPC: a client names no command for the link to run")                                 \
  X(ENV, "env", ENV, spec.env, 0, 0, PR_SPEC_ANY,                                              \
    "NAME = value (strings or integers) added to the environment")                             \
  X(CLEAR_ENV, "clear_env", BOOL, spec.clear_env, 0, 0, PR_SPEC_ANY,                           \
    "start from an empty environment instead of the host's")                                   \
  X(PTY, "pty", BOOL, spec.pty, 0, 0, PR_SPEC_ANY, "one pseudo-terminal instead of pipes")     \
  X(COLS, "cols", UINT, spec.cols, 0, 65535, PR_SPEC_ANY, "pty columns (0: 80)")               \
  X(ROWS, "rows", UINT, spec.rows, 0, 65535, PR_SPEC_ANY, "pty rows (0: 24)")                  \
  X(STDIN, "stdin", BOOL, spec.stdin_pipe, 0, 0, PR_SPEC_ANY,                                  \
    "a pipe for input() (else /dev/null; a pty always has one)")                               \
  X(TIMEOUT_MS, "timeout_ms", UINT, spec.timeout_ms, 0, (1ll << 50), PR_SPEC_ANY,              \
    "milliseconds from `starting` (reading secrets and the spawn count, "                      \
    "|proctor-limits|) to the kill ladder; 0: none")                                           \
  X(KILL_GRACE_MS, "kill_grace_ms", GRACE, spec.kill_grace_ms, -1, 3600000, PR_SPEC_ANY,       \
    "SIGTERM to SIGKILL, milliseconds (default: the engine's)")                                \
  X(LABEL, "label", STR, spec.label, 0, 0, PR_SPEC_ANY, "a name to show")                      \
  X(OWNER, "owner", STR, spec.owner, 0, 0, PR_SPEC_LUA,                                        \
    "who started it (RPC: the client's name, from hello)")                                     \
  X(BACKPRESSURE, "backpressure", BOOL, spec.backpressure, 0, 0, PR_SPEC_ANY,                  \
    "pause the child instead of dropping output")                                              \
  X(HOLD, "hold", BOOL, spec.hold, 0, 0, PR_SPEC_ANY,                                          \
    "stay `queued` until eng:release() (how |proctor-tasks| dependencies wait)")               \
  X(KILL_ON_DISCONNECT, "kill_on_disconnect", BOOL, kill_on_disconnect, 0, 0, PR_SPEC_RPC,     \
    "cancel it when this RPC connection closes")                                               \
  X(SECRETS, "secrets", SECRETS, spec.secrets, 0, 0, PR_SPEC_ANY,                              \
    "NAME = value or source: in the child's environment only, masked in output")               \
  X(ENV_ALLOW, "env_allow", NAMES, spec.env_allow, 0, 0, PR_SPEC_ANY,                          \
    "inherit only these names from the base environment")                                      \
  X(WORKER, "worker", WORKER, spec.worker, 0, 0, PR_SPEC_ANY,                                  \
    "a supervised worker: true or its options (PR_WORKER_FIELDS)")

/* The fields of a `worker` table, like PR_SPEC_FIELDS; `member` is in
 * pr_worker_spec_t. ENUM: one of the names of base/names.c
 * (pr_worker_protocol_name, pr_worker_restart_name); READY a map
 * {message = boolean, stderr_pattern = string}. The defaults are the ones the
 * engine applies (an absent or zero value, max_restarts < 0). */
#define PR_WORKER_FIELDS(X)                                                                \
  X(PROTOCOL, "protocol", ENUM, protocol, PR_WP_JSONL, 0, PR_SPEC_ANY,                     \
    "\"jsonl\" or \"msgpack-rpc\"")                                                        \
  X(RESTART, "restart", ENUM, restart, PR_WR_ON_FAILURE, 0, PR_SPEC_ANY,                   \
    "\"never\", \"on-failure\" (a non-zero exit, a signal, a failed spawn) or \"always\"") \
  X(MAX_RESTARTS, "max_restarts", UINT, max_restarts, 5, 1000000, PR_SPEC_ANY,             \
    "restarts in a row before the worker is fatal")                                        \
  X(BACKOFF_MS, "backoff_ms", UINT, backoff_ms, 100, 3600000, PR_SPEC_ANY,                 \
    "first restart delay, doubled for each restart in a row")                              \
  X(BACKOFF_MAX_MS, "backoff_max_ms", UINT, backoff_max_ms, 30000, 3600000, PR_SPEC_ANY,   \
    "cap of the restart delay")                                                            \
  X(HEALTHY_MS, "healthy_ms", UINT, healthy_ms, 10000, 86400000, PR_SPEC_ANY,              \
    "ready this long, or a success: the restart count and delay reset "                    \
    "(|proctor-restart-policy|)")                                                          \
  X(READY, "ready", READY, ready_message, 0, 0, PR_SPEC_ANY,                               \
    "{message = true}: ready at the first message; {stderr_pattern = ERE}: at a matching " \
    "stderr line; none: at spawn")                                                         \
  X(MAX_CHUNKS, "max_chunks", UINT, max_chunks, 256, 1000000, PR_SPEC_ANY,                 \
    "undelivered chunk events per request")

typedef enum {
#define X(NAME, key, type, member, def, max, surfaces, help) PR_SF_##NAME,
  PR_SPEC_FIELDS(X)
#undef X
      PR_SF_COUNT
} pr_spec_field_t;

typedef enum {
#define X(NAME, key, type, member, def, max, surfaces, help) PR_WF_##NAME,
  PR_WORKER_FIELDS(X)
#undef X
      PR_WF_COUNT
} pr_worker_field_t;

/* The worker defaults, from PR_WORKER_FIELDS: PR_WORKER_DEFAULT_BACKOFF_MS ... */
enum {
#define X(NAME, key, type, member, def, max, surfaces, help) PR_WORKER_DEFAULT_##NAME = (def),
  PR_WORKER_FIELDS(X)
#undef X
};

typedef enum {
  PR_ST_BOOL,
  PR_ST_UINT,
  PR_ST_GRACE,
  PR_ST_STR,
  PR_ST_CMD,
  PR_ST_ENV,
  PR_ST_SECRETS,
  PR_ST_NAMES,
  PR_ST_WORKER,
  PR_ST_ENUM,
  PR_ST_READY
} pr_spec_type_t;

/* One field of either list, as data (for the binding's core.spec_fields and
 * the help). */
typedef struct {
  const char *key;
  pr_spec_type_t type;
  long long def, max;
  unsigned surfaces;
  const char *help;
} pr_spec_field_info_t;

/* pr_spec_fields / pr_worker_fields: the lists above, in order (*n of them). */
const pr_spec_field_info_t *pr_spec_fields(size_t *n);
const pr_spec_field_info_t *pr_worker_fields(size_t *n);
/* pr_spec_type_name: "boolean", "integer", ... (the type's name in the help). */
const char *pr_spec_type_name(pr_spec_type_t t);

/* What a reader found at a key (pr_spec_reader_t.kind). */
typedef enum {
  PR_SV_NONE = 0, /* absent, or nil */
  PR_SV_BOOL,
  PR_SV_INT,    /* an integral number (a float that is exactly one counts) */
  PR_SV_NUMBER, /* any other number */
  PR_SV_STR,
  PR_SV_LIST,
  PR_SV_MAP,
  PR_SV_OTHER
} pr_spec_kind_t;

/* A start spec being read: one reader per surface (the Lua table of
 * eng:start in lua/binding.c, the msgpack map of RPC `start` in
 * rpc/params.c). A map is whatever the reader says it is (`m`: a stack index,
 * a msgpack_object); pr_spec_fill asks only for what the field lists name.
 * Strings it returns live as long as the spec is used (anchored, or in the
 * message's zone). */
typedef struct pr_spec_reader pr_spec_reader_t;
struct pr_spec_read;
struct pr_spec_reader {
  void *arg;        /* the reader's own state */
  unsigned surface; /* PR_SPEC_LUA or PR_SPEC_RPC: the keys it takes */
  const void *map;  /* the spec itself */
  /* kind: what is at `key` in map m. boolean, integer: its value (kind BOOL,
   * INT). string: a NUL-terminated copy of a STR, or NULL with *err PR_EINVAL
   * (it holds a NUL byte) or PR_ENOMEM. sub: the MAP at `key`, for the same
   * calls. unknown: the first key of m not among known[0..n), printable, in
   * buf (len bytes), or NULL when every key is known. structured: read field
   * `f` (CMD, ENV, SECRETS, NAMES) of the spec map into out->spec; 0, or an
   * error with what was wrong in err (n bytes). A reader may also raise
   * instead (Lua), since pr_spec_fill holds nothing to release. */
  pr_spec_kind_t (*kind)(pr_spec_reader_t *r, const void *m, const char *key);
  int (*boolean)(pr_spec_reader_t *r, const void *m, const char *key);
  int64_t (*integer)(pr_spec_reader_t *r, const void *m, const char *key);
  const char *(*string)(pr_spec_reader_t *r, const void *m, const char *key, int *err);
  const void *(*sub)(pr_spec_reader_t *r, const void *m, const char *key);
  const char *(*unknown)(pr_spec_reader_t *r, const void *m, const char *const *known, size_t n,
                         char *buf, size_t len);
  int (*structured)(pr_spec_reader_t *r, pr_spec_field_t f, struct pr_spec_read *out, char *err,
                    size_t n);
};

/* What pr_spec_fill reads: the spec, its worker (spec.worker points at
 * `worker` when there is one) and kill_on_disconnect (RPC). */
typedef struct pr_spec_read {
  pr_spec_t spec;
  pr_worker_spec_t worker;
  int kill_on_disconnect;
} pr_spec_read_t;

/* pr_spec_fill: read the start spec r->map through `r` into *out, every field
 * of PR_SPEC_FIELDS that r->surface takes (absent: its default). Returns 0, or
 * PR_EINVAL with what was wrong in err (n bytes; the field named, what it must
 * be, what it was: "field 'cols' must be an integer in [0, 65535], got
 * 70000"; never a string's value, which may be a secret), or PR_ENOMEM. The
 * same bad spec gives the same text through every reader. Any thread. */
int pr_spec_fill(pr_spec_reader_t *r, pr_spec_read_t *out, char *err, size_t n);

/* The fields of a record an execution also keeps as they are: listed once,
 * as the members of pr_record_core_t, of the record below and of the
 * execution (engine/exec.h), which copy them in one assignment each way
 * (engine/exec_record.c). */
#define PR_RECORD_CORE                                                                        \
  uint64_t id, session;                                                                       \
  char *label, *owner, *cwd, *shell; /* shell: the string run by /bin/sh -c, or NULL */       \
  char *target;                      /* the target it runs on (|proctor-targets|), or NULL */ \
  char **argv;                       /* argc strings */                                       \
  size_t argc;                                                                                \
  int pty;                                                                                    \
  pr_state_t state;                                                                           \
  char *reason;  /* why it ended (pr_record_t below lists the reasons); NULL while live */    \
  char *error;   /* human message for spawn errors etc., or NULL */                           \
  int exit_code; /* -1 when none */                                                           \
  int signal;    /* 0 when none */                                                            \
  int64_t pid;   /* 0 when not (or no longer) running */                                      \
  uint64_t created_at, started_at, ended_at; /* ms since the epoch; 0 = not yet */            \
  uint64_t duration_ms;

typedef struct pr_record_core {
  PR_RECORD_CORE
} pr_record_core_t;

/* A snapshot of one execution, owned by the caller (pr_record_free). Its
 * reason is one of exit, signal, canceled, timeout, spawn_error,
 * secret_unavailable, supervisor_lost, engine_closed. */
typedef struct {
  union {
    pr_record_core_t core; /* the members of PR_RECORD_CORE, as one struct */
    struct {
      PR_RECORD_CORE
    };
  };
  int has_stream[PR_NSTREAM];
  uint64_t bytes[PR_NSTREAM];   /* bytes read per stream */
  uint64_t dropped[PR_NSTREAM]; /* bytes no longer retained per stream */
  int stdin_open;
  int worker_state;         /* pr_worker_state_t, or -1 when not a worker */
  uint32_t worker_restarts; /* worker processes started after the first one */
  uint64_t worker_pending;  /* requests not answered yet */
  uint64_t worker_stray;    /* stdout lines/messages that were not protocol messages */
  char *env_keys;           /* keys of the child's environment, each NUL-terminated */
  size_t env_keys_len;      /* bytes in env_keys (0: none known) */
  int previous_session;     /* loaded from the history file of an earlier engine */
  int brief;                /* a list entry: env_keys left out (get has them) */
} pr_record_t;

typedef enum {
  PR_EV_STATE = 1,
  PR_EV_OUTPUT,
  PR_EV_WORKER,
  PR_EV_CHUNK,
  PR_EV_REPLY
} pr_event_type_t;

/* An event taken from the engine, owned by the caller (pr_event_free). */
typedef struct pr_event {
  void *priv[2]; /* queue linkage, engine-private */
  pr_event_type_t type;
  uint64_t id;
  /* PR_EV_STATE */
  pr_state_t state, prev; /* prev == PR_NSTATE for the first event */
  char *reason, *error;
  int exit_code, signal;
  int64_t pid;
  /* A terminal state's event: the execution's record as of its end (owned;
   * NULL when out of memory), so the host needs no round trip for it. */
  pr_record_t *record;
  /* PR_EV_OUTPUT */
  int stream;
  char *data; /* owned */
  size_t len;
  uint64_t offset; /* absolute offset of data[0] in the stream */
  uint64_t missed; /* bytes dropped before data[0] since the last output event */
  void *ring;      /* engine-private */
  /* PR_EV_WORKER: worker_state, restarts. PR_EV_CHUNK: rid, data = the chunk as JSON text,
   * missed = chunks dropped before it. PR_EV_REPLY: rid, status, data = the result as JSON
   * text (PR_RS_OK) or the error message, missed = chunks dropped in all. */
  uint64_t rid;
  int status, worker_state;
  uint32_t restarts;
  void *chan;                /* engine-private: a chunk's back-pressure token ... */
  void (*chan_done)(void *); /* ... and what to call once the chunk is consumed */
} pr_event_t;

/* pr_engine_new: start an engine thread (and, lazily, its shepherd).
 * Returns 0 and *out, or a negative error. */
int pr_engine_new(const pr_engine_opts_t *opts, pr_engine_t **out);

/* pr_engine_close: cancel everything, wait for it (bounded by the largest
 * grace + 1 s, whatever the shepherd does: one that does not exit when told
 * is killed), stop the shepherd and the thread. A history load still under
 * way stops at its next frame (the file is left as it is; what this session
 * wrote is appended). Events not yet polled stay available to
 * pr_engine_poll. Idempotent. */
void pr_engine_close(pr_engine_t *e);

/* pr_engine_free: close (if needed) and free. `e` is invalid afterwards. */
void pr_engine_free(pr_engine_t *e);

/* pr_engine_closed: 1 once pr_engine_close ran. */
int pr_engine_closed(const pr_engine_t *e);

/* pr_engine_start: create an execution (queued, then started when a slot is
 * free). Spawn errors arrive as a `failed` state event, never here. A target
 * without a transport is looked up among the configured ones (pr_engine_target).
 * Returns 0 and *id, or PR_EINVAL (also: a target not configured) / PR_ETOOBIG /
 * PR_ECLOSED / PR_ENOMEM, or
 * PR_EBUSY when max_queued executions of the host are already queued or held. */
int pr_engine_start(pr_engine_t *e, const pr_spec_t *spec, uint64_t *id);

/* pr_engine_start_deferred: pr_engine_start without waking the engine thread
 * for it: the start waits until the host's next pr_engine_flush (once per
 * turn of its loop), pr_engine_poll, pr_engine_wait or any other command, so
 * a loop of starts costs one wake-up. Same returns. Host thread. */
int pr_engine_start_deferred(pr_engine_t *e, const pr_spec_t *spec, uint64_t *id);

/* pr_engine_flush: wake the engine thread for the deferred starts queued
 * since its last wake-up; nothing when none wait. Host thread. */
void pr_engine_flush(pr_engine_t *e);

/* pr_engine_wakeups: how many times the host has woken the engine thread (a
 * count for tests and benchmarks: one per flushed loop of deferred starts).
 * Host thread. */
uint64_t pr_engine_wakeups(pr_engine_t *e);

/* pr_engine_target: configure target `name` (|proctor-targets|): the command
 * (/bin/sh -c) that reaches its relay and its default cwd on the far side
 * (NULL: the far home); transport NULL forgets it. A start spec (Lua or RPC)
 * naming the target without a transport gets these; RPC clients can reach no
 * other target. Executions already made keep theirs. Returns 0, PR_EINVAL (an
 * empty name or transport), PR_ECLOSED or PR_ENOMEM. Any thread. */
int pr_engine_target(pr_engine_t *e, const char *name, const char *transport, const char *cwd);

/* pr_engine_cancel: request the end of an execution (force: SIGKILL now).
 * `reason` is recorded as the execution's reason when this call decides its
 * end: NULL means "canceled"; else it must pass pr_reason_valid (the caller
 * checks: PR_CANCEL_NOT_FOUND otherwise). Host thread. */
pr_cancel_result_t pr_engine_cancel(pr_engine_t *e, uint64_t id, uint64_t session, int force,
                                    const char *reason);

/* pr_engine_release: let an execution started with `hold` take its turn (run
 * now, or wait in the queue for a slot under max_running). Returns 0,
 * PR_ENOENT, PR_EINVAL (not held: never was, or already released),
 * PR_ENOTRUNNING (it ended while held) or PR_ECLOSED. Host thread. */
int pr_engine_release(pr_engine_t *e, uint64_t id, uint64_t session);

/* pr_engine_hold_output: consumer back-pressure for one execution. on: the
 * engine stops reading its streams (the child blocks on a full pipe; nothing
 * is dropped, draining waits), 0: it reads again. Other executions are not
 * affected. Asynchronous (an unknown or ended id is ignored). Returns 0,
 * PR_ECLOSED or PR_ENOMEM. Host thread. */
int pr_engine_hold_output(pr_engine_t *e, uint64_t id, int on);

/* pr_engine_delete: forget a terminal execution. */
pr_delete_result_t pr_engine_delete(pr_engine_t *e, uint64_t id, uint64_t session);

/* pr_engine_input: write bytes to the execution's stdin (or pty).
 * Returns 0, PR_ENOENT, PR_ENOTRUNNING, PR_ESTDINCLOSED, PR_ECLOSED. */
int pr_engine_input(pr_engine_t *e, uint64_t id, uint64_t session, const char *data, size_t len);

/* pr_engine_close_stdin: close stdin (pipe) or send EOF (^D, pty).
 * Returns 0, PR_ENOENT, PR_ENOTRUNNING, PR_ESTDINCLOSED, PR_ECLOSED. */
int pr_engine_close_stdin(pr_engine_t *e, uint64_t id, uint64_t session);

/* pr_engine_resize: set the pty size. Returns 0, PR_ENOENT, PR_ENOTRUNNING,
 * PR_EINVAL (not a pty execution), PR_ECLOSED. */
int pr_engine_resize(pr_engine_t *e, uint64_t id, uint64_t session, uint16_t cols, uint16_t rows);

/* pr_engine_get: snapshot one execution. Returns 0, PR_ENOENT, PR_ECLOSED. */
int pr_engine_get(pr_engine_t *e, uint64_t id, uint64_t session, pr_record_t **out);

/* pr_engine_list: snapshot executions in id order, optionally only one state
 * (state < 0: all). *out is an array of *n records (pr_records_free). */
int pr_engine_list(pr_engine_t *e, uint64_t session, int state, pr_record_t ***out, size_t *n);

/* pr_engine_purge: delete terminal executions ended at least `older_than_ms`
 * ago (0: all terminal ones). *n = how many were deleted. */
int pr_engine_purge(pr_engine_t *e, uint64_t session, uint64_t older_than_ms, size_t *n);

/* pr_engine_read: copy retained output of one stream from absolute offset
 * `from`, at most `max` bytes. *missed counts bytes before the oldest
 * retained one. With `ring` not NULL, *ring is also the stream's ring with a
 * new reference (pr_output_read reads it on, without this round trip; the
 * caller drops it with pr_output_release), NULL on an error. Returns 0,
 * PR_ENOENT, PR_ENOSTREAM, PR_ECLOSED, PR_ENOMEM. Host thread. */
typedef struct pr_ring pr_output_t; /* an output stream read on the host (below) */
int pr_engine_read(pr_engine_t *e, uint64_t id, uint64_t session, int stream, uint64_t from,
                   size_t max, char **data, size_t *len, uint64_t *next, uint64_t *missed,
                   pr_output_t **ring);

/* pr_engine_address: the RPC socket path, or NULL when not listening. The
 * string lives as long as the engine. */
const char *pr_engine_address(const pr_engine_t *e);

/* pr_engine_fd: an fd readable while events are pending (never closed before
 * pr_engine_free). */
int pr_engine_fd(const pr_engine_t *e);

/* pr_engine_poll: take up to `max` events without blocking into evs[].
 * Returns how many. With max_bytes == 0 an output event carries the bytes
 * since the previous one of its stream, in order, at most 256 KiB: one
 * event per stream a poll, and what is left comes with the next poll, none
 * skipped. With max_bytes > 0 it carries only the last max_bytes of them
 * (the rest counts in `missed` and is never copied: a console that can only
 * show the tail of a flood pays only for the tail). */
size_t pr_engine_poll(pr_engine_t *e, pr_event_t **evs, size_t max, size_t max_bytes);

/* pr_engine_state_records: `on` 1: every state event made from now on
 * carries the execution's `record` as of that event (built on the engine
 * thread when the event is made), not only a terminal one; 0: only a
 * terminal one does (the default). A host that shows each state (a bar, an
 * autocmd) then never waits for the engine thread to read it. Host thread
 * (any thread is safe). Returns the previous setting. */
int pr_engine_state_records(pr_engine_t *e, int on);

/* The events waiting for the host's poll hold at most this many heap bytes
 * of their own (events, strings, records, a chunk's text; an output event's
 * bytes are its ring's). Past it nothing is lost that cannot be read again:
 * the state events of one execution are coalesced into its latest (with the
 * `prev` of the first), which keeps its `record` (the latest) only where the
 * event it replaced had one, and a first state event past it, a terminal
 * one too, comes without its `record` (pr_engine_get has it). What stays
 * past the bound is one state event per execution the host has not polled,
 * and at most one output event per stream (the bytes are in the ring, with
 * `missed`). */
#define PR_HOST_EVENTS_BYTES ((size_t)4 << 20)

/* pr_engine_wait: block until an event is pending or timeout_ms passes
 * (<0: forever). Returns 1 if events are pending, 0 on timeout. */
int pr_engine_wait(pr_engine_t *e, int timeout_ms);

/* Worker requests (doc *proctor-workers*). One verb set on every surface:
 * request, cancel, restart of a worker — C pr_engine_worker_*, Lua
 * eng:worker_*, RPC worker_*. Like every id call they take the caller's
 * session: a worker or request of another session is "not found".
 *
 * pr_engine_worker_request: send `payload` (JSON text, copied) to worker `id`
 * as a new request. Never blocks on the worker; the answer is one PR_EV_REPLY
 * event for *rid (after any PR_EV_CHUNK events), also for a refusal
 * (PR_RS_REJECTED: no such worker in `session`, not a worker, ended;
 * PR_RS_WORKER_FATAL). timeout_ms 0 = none. Returns 0 and *rid, PR_ECLOSED or
 * PR_ENOMEM. Host thread. */
int pr_engine_worker_request(pr_engine_t *e, uint64_t id, uint64_t session, const char *payload,
                             size_t len, uint64_t timeout_ms, uint64_t *rid);

/* pr_engine_worker_cancel: resolve request `rid` (of `session`; 0 = any) as
 * canceled now (its PR_EV_REPLY is queued before this returns) and tell the
 * worker. Returns 0, PR_ENOENT (unknown, another session's, or already
 * answered) or PR_ECLOSED. Host thread. */
int pr_engine_worker_cancel(pr_engine_t *e, uint64_t rid, uint64_t session);

/* pr_engine_worker_restart: replace the worker process of `id` now (SIGTERM,
 * then a new spawn without backoff; not counted against max_restarts).
 * Returns 0, PR_ENOENT, PR_ENOTWORKER, PR_ENOTRUNNING, PR_ECLOSED. Host thread. */
int pr_engine_worker_restart(pr_engine_t *e, uint64_t id, uint64_t session);

/* pr_engine_warnings: take what the history and audit files reported so far
 * (torn record skipped, file in use, disk behind...), and the first failure
 * to make or write an output spill file (base/ring.h); each warning is
 * returned once. *out is a malloc'd array of *n malloc'd strings (NULL when
 * none); the caller frees both. Waits while the engine thread is still
 * loading the history (pr_engine_history_loading), so what the load found
 * is in the first answer. Host thread. */
void pr_engine_warnings(pr_engine_t *e, char ***out, size_t *n);

/* pr_engine_history_loading: 1 while the history file is still read and
 * decoded (by a loader thread: pr_engine_new returns before that), 0 after,
 * or with no history. Never blocks. Host thread. Meanwhile starts get their
 * ids (after the file's last one) and run at once, and everything about an
 * execution of this session answers at once; what may be about the
 * history's records waits for the load: a lookup (get, read, cancel,
 * delete, ...) of an id not known yet, a purge, and a list that may hold
 * ended records (a list of one live state does not wait). RPC sessions
 * never see the history's records and never wait. */
int pr_engine_history_loading(pr_engine_t *e);

/* pr_event_free: free an event taken by pr_engine_poll (NULL is fine). */
void pr_event_free(pr_event_t *ev);

/* pr_output_t, an output stream read on the host thread without the engine
 * thread: the stream's ring (base/ring.h), shared with the engine under the
 * ring's own mutex and counted, so it outlives its execution (deleted, purged,
 * the engine closed) while a host reference holds it. pr_engine_read is a
 * round trip to the engine thread (it finds the execution by id); this is a
 * read of memory and of the ring's spill file, never waiting for that thread. */

/* pr_event_output: the stream of an output event (PR_EV_OUTPUT), with a new
 * reference the caller drops with pr_output_release; NULL for any other
 * event. Any thread; the event stays the caller's. */
pr_output_t *pr_event_output(const pr_event_t *ev);

/* pr_output_read: copy up to `max` bytes of the stream from absolute offset
 * `from` into a fresh malloc'd buffer (*data, *len; *data is NULL when *len is
 * 0), like pr_engine_read: bytes the ring no longer holds are skipped and
 * counted in *missed, `from` past the end reads nothing, *next is the offset
 * after the last byte copied. Returns 0, PR_ENOMEM, or a negative errno when
 * the spill file could not be read (nothing copied). Any thread: it takes
 * only the ring's mutex, which the engine thread holds for memory copies,
 * never for a disk write. */
int pr_output_read(pr_output_t *o, uint64_t from, size_t max, char **data, size_t *len,
                   uint64_t *next, uint64_t *missed);

/* pr_output_release: drop a reference from pr_event_output; the last one
 * frees the ring (and closes its spill file). NULL is fine. Any thread. */
void pr_output_release(pr_output_t *o);

/* pr_hrtime: monotonic clock in nanoseconds. Any thread (base/clock.c). */
uint64_t pr_hrtime(void);

/* ---- names used in every surface (base/names.c; any thread) ------------------------------- */

const char *pr_state_name(pr_state_t s);
int pr_state_from_name(const char *name); /* -1 if unknown */
int pr_state_terminal(pr_state_t s);
const char *pr_stream_name(int stream);
int pr_stream_from_name(const char *name); /* -1 if unknown */
const char *pr_cancel_result_name(pr_cancel_result_t r);
const char *pr_delete_result_name(pr_delete_result_t r);
const char *pr_worker_state_name(int ws);
/* The worker options' enums: "jsonl", "msgpack-rpc"; "never", "on-failure",
 * "always". name: NULL when out of range; from_name: -1 when unknown. */
const char *pr_worker_protocol_name(int p);
int pr_worker_protocol_from_name(const char *name);
const char *pr_worker_restart_name(int r);
int pr_worker_restart_from_name(const char *name);
const char *pr_reply_status_name(int st);
/* pr_reason_valid: 1 if `s` may be a cancel reason: 1 to PR_REASON_MAX of a-z and '_'. */
#define PR_REASON_MAX 32
int pr_reason_valid(const char *s);

/* pr_signal_name: "SIGTERM" for 15 (or "SIG<n>" for a number without a
 * name), written into buf (n bytes; 16 are enough). Returns buf. */
const char *pr_signal_name(int sig, char *buf, size_t n);

/* ---- the record, described once (base/record.c; any thread) ------------------------------ */

/* The fields of a record, in the order every surface shows them:
 * X(NAME, key, TYPE, present, value). `present` and `value` are expressions
 * of `r` (a const pr_record_t *). The Lua table, the RPC map, the history
 * file (through its own key table) and the audit line are all made from this
 * list by pr_record_fields; none counts or names a field by hand.
 *
 * Types: U64 and I64 integers, BOOL, STR (a string; names are resolved
 * here), SIGNAL (a signal number: a surface writes its name or the number),
 * CMD (r->shell, or the r->argc strings of r->argv), KEYS (r->env_keys:
 * r->env_keys_len bytes of NUL-terminated names), STREAMS (one integer per
 * stream that r->has_stream, from the array `value`). */
#define PR_RECORD_FIELDS(X)                                                            \
  X(ID, "id", U64, 1, r->id)                                                           \
  X(SESSION, "session", U64, 1, r->session)                                            \
  X(LABEL, "label", STR, r->label != NULL, r->label)                                   \
  X(OWNER, "owner", STR, 1, r->owner ? r->owner : "")                                  \
  X(CWD, "cwd", STR, 1, r->cwd ? r->cwd : "")                                          \
  X(TARGET, "target", STR, r->target != NULL, r->target)                               \
  X(CMD, "cmd", CMD, 1, 0)                                                             \
  X(PTY, "pty", BOOL, 1, r->pty)                                                       \
  X(STATE, "state", STR, 1, pr_state_name(r->state))                                   \
  X(REASON, "reason", STR, r->reason != NULL, r->reason)                               \
  X(ERROR, "error", STR, r->error != NULL, r->error)                                   \
  X(EXIT_CODE, "exit_code", I64, r->exit_code >= 0, r->exit_code)                      \
  X(SIGNAL, "signal", SIGNAL, r->signal > 0, r->signal)                                \
  X(PID, "pid", I64, r->pid > 0, r->pid)                                               \
  X(CREATED_AT, "created_at", U64, 1, r->created_at)                                   \
  X(STARTED_AT, "started_at", U64, r->started_at != 0, r->started_at)                  \
  X(ENDED_AT, "ended_at", U64, r->ended_at != 0, r->ended_at)                          \
  X(DURATION_MS, "duration_ms", U64, 1, r->duration_ms)                                \
  X(BYTES, "bytes", STREAMS, 1, r->bytes)                                              \
  X(DROPPED, "dropped", STREAMS, 1, r->dropped)                                        \
  X(STDIN_OPEN, "stdin_open", BOOL, 1, r->stdin_open)                                  \
  X(ENV_KEYS, "env_keys", KEYS, !r->brief, 0)                                          \
  X(PREVIOUS_SESSION, "previous_session", BOOL, 1, r->previous_session)                \
  X(WORKER_STATE, "worker_state", STR, r->worker_state >= 0,                           \
    pr_worker_state_name(r->worker_state))                                             \
  X(WORKER_RESTARTS, "worker_restarts", U64, r->worker_state >= 0, r->worker_restarts) \
  X(WORKER_PENDING, "worker_pending", U64, r->worker_state >= 0, r->worker_pending)    \
  X(WORKER_STRAY, "worker_stray", U64, r->worker_state >= 0, r->worker_stray)

typedef enum {
#define X(NAME, key, type, present, value) PR_RF_##NAME,
  PR_RECORD_FIELDS(X)
#undef X
      PR_RF_COUNT
} pr_record_field_t;

typedef enum {
  PR_FT_U64,
  PR_FT_I64,
  PR_FT_BOOL,
  PR_FT_STR,
  PR_FT_SIGNAL,
  PR_FT_CMD,
  PR_FT_KEYS,
  PR_FT_STREAMS
} pr_field_type_t;

/* One present field of a record. Borrowed from the record: valid while it is. */
typedef struct {
  pr_record_field_t id;
  const char *key; /* its name in Lua, on the RPC wire and in the audit log */
  pr_field_type_t type;
  uint64_t u;              /* U64 */
  int64_t i;               /* I64, BOOL (0/1), SIGNAL */
  const char *s;           /* STR */
  const uint64_t *streams; /* STREAMS: [PR_NSTREAM], shown where r->has_stream */
  const pr_record_t *r;    /* the record (CMD, KEYS and STREAMS read it) */
} pr_field_t;

/* pr_record_fields: the present fields of `r`, in order, into f[0..PR_RF_COUNT).
 * Returns how many. */
size_t pr_record_fields(const pr_record_t *r, pr_field_t *f);

/* KEYS is one string per NUL-terminated name in r->env_keys: pr_record_nkeys
 * counts them, pr_record_key_next steps through them (`at` starts at 0;
 * returns the name, or NULL at the end). CMD is r->shell when set, else the
 * r->argc strings of r->argv (a NULL entry reads ""). */
size_t pr_record_nkeys(const pr_record_t *r);
const char *pr_record_key_next(const pr_record_t *r, size_t *at);

/* pr_record_nstreams: how many streams r->has_stream. */
int pr_record_nstreams(const pr_record_t *r);

/* pr_record_dup: a deep copy (NULL when out of memory). pr_record_free frees
 * one (NULL is fine); pr_records_free frees n of them and the array. */
pr_record_t *pr_record_dup(const pr_record_t *r);
void pr_record_free(pr_record_t *r);
void pr_records_free(pr_record_t **v, size_t n);

/* ---- the consoles' redraw filter (base/overwrite.c) -------------------------------------
 *
 * What a terminal gets, less the `\r` redraws a later one overwrites before
 * they are shown: the C twin of the Lua model lua/proctor/console/overwrite.lua,
 * which stays the reference and says the rules (a run ends at a line feed, at
 * any control character but `\r`, at any escape sequence but SGR and EL;
 * inside a run a redraw that cannot wrap and that a later one writes over is
 * left out, its SGR sequences kept; the parser state crosses calls; insert
 * mode, left/right margins and double-width lines turn leaving out off). The
 * two give the same bytes for the same input, cut anywhere
 * (tests/nvim/spec_model.lua compares them). Thread: any; a state is its
 * caller's. The Lua binding is core.overwrite_new/overwrite_feed. */

#define PR_OW_PARAMS_MAX 256 /* a CSI's parameters kept across calls; more: keep every byte */

typedef struct {
  size_t from;          /* the segment's first byte (after its `\r`) */
  uint32_t cols, cover; /* its columns at most (bytes), its ASCII start; both saturate */
  unsigned char el, sgr, drop;
} pr_ow_seg_t;

typedef struct {
  size_t from, to; /* a span left out (absolute offsets in the text, inclusive) */
  int sgr;         /* it holds SGR sequences (they are kept) */
} pr_ow_drop_t;

typedef struct {
  int state;                         /* the escape-sequence parser's state */
  size_t plen;                       /* bytes in params */
  char params[PR_OW_PARAMS_MAX + 1]; /* a CSI's parameter bytes so far, when one crosses calls */
  int unsafe;                        /* a mode that breaks plain overwriting was seen */
  uint64_t dropped;                  /* bytes left out so far */
  pr_ow_seg_t *seg;                  /* scratch: the run being read (reused) */
  size_t nseg;
  pr_ow_drop_t *drops; /* scratch: the spans left out by the last call */
  size_t ndrops;
} pr_overwrite_t;

/* pr_overwrite_init: a fresh state (what a new terminal's parser is in).
 * pr_overwrite_free: frees its scratch (the struct is the caller's). */
void pr_overwrite_init(pr_overwrite_t *st);
void pr_overwrite_free(pr_overwrite_t *st);

/* What the terminal gets, in pieces (in order): emit(ctx, p, n) for each. */
typedef void (*pr_ow_emit_fn)(void *ctx, const char *p, size_t n);

/* pr_overwrite_feed: feed text[first..last) through st and emit what the
 * terminal should get: those bytes, or them with overwritten redraws left out
 * (in at most 2 x spans + 1 pieces; one piece, the whole range, when nothing
 * is left out). text is text_len bytes: an SGR kept from a span left out is
 * read to its final byte. width: the terminal's columns; < 2 keeps every byte
 * (the parser still reads them). Returns the bytes emitted. Out of memory for
 * its scratch, it keeps every byte from then on (st->unsafe), as the model
 * does for a mode it cannot follow. */
size_t pr_overwrite_feed(pr_overwrite_t *st, const char *text, size_t text_len, size_t first,
                         size_t last, long width, pr_ow_emit_fn emit, void *ctx);

#endif /* PR_PROCTOR_H */
