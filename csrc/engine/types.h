/* types.h — internal types of the engine (types only, no functions).
 *
 * Thread: the structs below belong to the ENGINE thread, except the fields
 * of pr_engine_t marked "host" or "locked". Nothing here is visible to Lua.
 *
 *  host thread                         engine thread (own uv_loop_t)
 *  ───────────                         ─────────────────────────────
 *  pr_engine_*() ─► cmds (mu) ─async─► on_async: run each pr_cmd_t
 *                 ◄── cond (mu) ◄───── done=1 (synchronous commands)
 *  poll()/fd() ◄── events (evmu) ◄──── pr_emit_* (+ eventfd write)
 *                                       registry · executions · streams
 *                                       supervisor (shepherd socket)
 */
#ifndef PR_TYPES_H
#define PR_TYPES_H

#include <pthread.h>
#include <stdint.h>
#include <uv.h>

#include "include/proctor.h"
#include "base/buf.h"
#include "base/idmap.h"
#include "base/queue.h"
#include "base/ring.h"

typedef struct pr_exec pr_exec_t;

/* One output stream of an execution. */
typedef struct {
  /* Pipes are read with libuv's stream reader. A pty master is read with a
   * poll handle and our own read loop: libuv takes POLLHUP after a partial
   * read as EOF, but a pty master returns at most 4095 bytes per read and
   * raises POLLHUP as soon as the slave closes, with output still queued —
   * that is how terminal output loses its tail. Only EIO (or 0) ends it here. */
  union {
    uv_pipe_t pipe;  /* pipe streams, valid while `open` */
    uv_poll_t poll;  /* the pty stream, valid while `open` */
  } h;               /* first member: a handle pointer is a stream pointer */
  pr_exec_t *exec;
  pr_ring_t *ring;   /* NULL when the execution has no such stream */
  int open;          /* handle initialised, uv_close not yet called */
  int eof;           /* EOF/EIO seen or stream closed by the drain timer */
  int paused;        /* back-pressure: reading stopped until the host catches up */
  uint64_t last_mark_ns; /* uv_hrtime of the last output marker queued for the host */
  pr_queue_t defer;  /* on engine->deferred while a marker waits for the flush timer */
} pr_stream_t;

/* Why the engine decided a terminal state (exec->verdict). */
struct pr_exec {
  pr_queue_t order;  /* registry list, id order */
  pr_queue_t runq;   /* engine->queued while queued */
  struct pr_engine *eng;
  uint64_t id, session;
  char *label, *owner, *cwd, *shell;
  char **argv; /* NULL-terminated, argc entries */
  size_t argc;
  char *spawn_msg; /* serialized spawn payload until sent, then NULL */
  size_t spawn_len;
  int pty, stdin_pipe, backpressure;
  uint16_t cols, rows;
  uint64_t timeout_ms;
  uint32_t grace_ms;

  pr_state_t state;
  int verdict;       /* terminal state decided by the first of exit/cancel/timeout; -1 = none */
  int stopping;      /* kill ladder started */
  int exited;        /* shepherd reported the leader's exit */
  int finished;      /* terminal event emitted */
  int released;      /* RELEASE sent to the shepherd */
  char *reason, *error;
  int exit_code, signal;
  int64_t pid;
  int pidfd;         /* -1 when none */
  uint64_t created_at, started_at, ended_at; /* ms since the epoch */
  uint64_t started_mono;                     /* uv_now at running, for duration */
  uint64_t drain_deadline;                   /* uv_now after which draining stops, whatever arrives */
  uint64_t duration_ms;
  struct pr_worker *worker; /* supervised-worker state (worker.c), NULL for plain executions */
  int respawning;    /* worker: a replacement process was asked for; SPAWNED not seen yet */

  pr_stream_t streams[PR_NSTREAM];
  uv_pipe_t in;      /* stdin pipe, or a dup of the pty master used only for writing */
  int in_open;       /* stdin handle usable for writes */
  int in_closing;    /* close_stdin requested */
  pr_buf_t pending_in; /* input given while queued/starting, written once running;
                        * at most PR_PENDING_INPUT_MAX bytes */
  uv_timer_t timer;  /* timeout, then kill grace, then drain: one phase at a time */
  int timer_open;
  char *env_keys;    /* keys the child got, NUL-separated (secrets.c), or NULL */
  size_t env_keys_len;
  int previous_session; /* loaded from history (history.c): no process, no handles */
  struct pr_secrets *secrets; /* values masked in output (secrets.c), or NULL */
  int handles;       /* open libuv handles; the record is freed when 0 and `dead` */
  int dead;          /* removed from the registry */
};

/* A command from the host to the engine thread. Synchronous commands live
 * on the caller's stack and are answered through `done` + engine->cond;
 * asynchronous ones (start) are heap-allocated and freed by the engine. */
typedef enum {
  PR_CMD_START = 1,
  PR_CMD_CANCEL,
  PR_CMD_DELETE,
  PR_CMD_INPUT,
  PR_CMD_CLOSE_STDIN,
  PR_CMD_RESIZE,
  PR_CMD_GET,
  PR_CMD_LIST,
  PR_CMD_PURGE,
  PR_CMD_READ,
  PR_CMD_RESUME,
  PR_CMD_CLOSE,
  PR_CMD_CALL,       /* run fn(engine, out) on the engine thread (tests, fuzzing) */
  PR_CMD_WREQUEST,   /* worker request (async): id = worker, u = rid, a = timeout_ms, data/len owned */
  PR_CMD_WCANCEL,    /* cancel worker request u (sync) */
  PR_CMD_WRESTART,   /* restart worker id now (sync) */
} pr_cmd_type_t;

typedef struct pr_cmd {
  pr_queue_t node;
  pr_cmd_type_t type;
  int sync;
  int done;          /* locked by engine->mu */
  int closed;        /* answered without running: the engine was shutting down */
  uint64_t id, session;
  pr_exec_t *exec;   /* START: the new execution, built on the host thread */
  const char *data;  /* INPUT: borrowed (the caller waits) */
  size_t len;
  int64_t a, b;      /* CANCEL: force; RESIZE: cols, rows; LIST: state; READ: stream, max */
  uint64_t u;        /* READ: from; PURGE: older_than_ms */
  /* results */
  int rc;
  void *out;
  size_t n;
  uint64_t r1, r2;
  void (*fn)(struct pr_engine *, void *); /* CALL */
} pr_cmd_t;

/* Engine-side state of the shepherd connection. */
typedef struct {
  int fd;            /* -1 when no shepherd */
  uv_poll_t poll;
  int poll_open;
  int writable_wait; /* poll also waits for POLLOUT */
  pr_queue_t sendq;  /* packets that could not be sent yet */
  int64_t pid;       /* shepherd pid (after its own fork: unknown, 0) */
  char *path;        /* binary */
  char *recvbuf;     /* PR_WIRE_MAX_PAYLOAD bytes */
  char last_error[256]; /* why the last shepherd start failed ("" after a success); per
                         * engine: each engine starts its shepherd on its own thread */
} pr_supervisor_t;

struct pr_engine {
  pr_engine_opts_t opts;
  /* host: owned by the host thread */
  pthread_t thread;
  int thread_started;
  int closed;
  /* locked by mu */
  pthread_mutex_t mu;
  pthread_cond_t cond;
  pr_queue_t cmds;
  int loop_done;       /* the engine thread has left its loop */
  uint64_t next_id;    /* ids handed out by pr_engine_start */
  uint64_t next_rid;   /* worker request ids (worker.c); atomic, any thread */
  /* locked by evmu */
  pthread_mutex_t evmu;
  pr_queue_t events;
  size_t nevents;
  int wakefd;          /* eventfd: readable while events is non-empty */
  /* engine thread */
  uv_loop_t loop;
  uv_async_t async;
  uv_timer_t close_timer;
  uv_timer_t flush_timer; /* pushes deferred output markers (flood coalescing) */
  pr_queue_t deferred;    /* streams whose marker waits for flush_timer */
  uv_timer_t prune_timer; /* history_age_ms: fires at the oldest terminal record's expiry */
  int closing;         /* CLOSE received: cancel all, then shut down */
  pr_cmd_t *close_cmd;
  pr_idmap_t byid;     /* registry: id -> execution */
  size_t count, nterminal;
  pr_queue_t order;    /* every execution, id order */
  pr_queue_t queued;   /* FIFO of queued executions */
  uint32_t running;    /* starting + running */
  pr_supervisor_t sup;
  struct pr_rpc *rpc;  /* the msgpack-rpc server (rpc_server.c), NULL when not listening */
  char *listen;        /* socket path, immutable after pr_engine_new (host may read it) */
  char **rpc_env;      /* environ snapshot taken by pr_engine_new for RPC starts */
  struct pr_journal *journal; /* durable files (journal.c), NULL when none is configured */
  char readbuf[65536];
};

#endif
