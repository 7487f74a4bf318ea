/* engine/control.h — commands: what the host (and the RPC server) asks the
 * engine thread to do, the scheduler, and shutting down.
 *
 * Thread: pr_control_init/destroy and pr_control_submit run on the HOST
 * thread; pr_control_run and everything it calls on the ENGINE thread;
 * pr_control_next_id / next_rid and pr_exec_build on any thread.
 *
 *  host thread                          engine thread (its own uv_loop_t)
 *  ───────────                          ─────────────────────────────────
 *  pr_control_submit ─► cmds (mu) ─async─► on_async: pr_control_run(cmd)
 *                     ◄── cond (mu) ◄──── done = 1 (synchronous commands)
 *  RPC methods (engine thread) ─────────► pr_control_run(cmd), the same path
 *
 * The control owns the registry, the scheduler (queued FIFO, running count,
 * max_running) and the executions' shared context; the shepherd link and the
 * listener list it only points at. It finds the execution a shepherd packet
 * is about (pr_control_sup_ops) and hears every end through ctx.ended.
 */
#ifndef PR_CONTROL_H
#define PR_CONTROL_H

#include <pthread.h>
#include <stdint.h>
#include <uv.h>

#include "base/queue.h"
#include "engine/exec.h"
#include "engine/registry.h"
#include "engine/secret_source.h"
#include "engine/shepherd_link.h"
#include "engine/targets.h"
#include "include/proctor.h"

/* A command. Synchronous commands live on the caller's stack and are
 * answered through `done` + the control's cond; asynchronous ones (start,
 * worker requests, resume, close) are heap-allocated and freed by the engine. */
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
  PR_CMD_CALL,     /* run fn(owner, out) on the engine thread (tests, fuzzing) */
  PR_CMD_WREQUEST, /* worker request (async): id = worker, u = rid, a = timeout_ms, data/len owned */
  PR_CMD_WCANCEL,  /* cancel worker request u (sync) */
  PR_CMD_WRESTART,    /* restart worker id now (sync) */
  PR_CMD_RELEASE,     /* let held execution id take its turn (sync) */
  PR_CMD_HOLD_OUTPUT, /* a = 1: stop reading execution id's output, 0: read again (async) */
} pr_cmd_type_t;

typedef struct pr_cmd {
  pr_queue_t node;
  pr_cmd_type_t type;
  int sync;
  int done;   /* locked by the control's mu */
  int closed; /* answered without running: the engine was shutting down */
  uint64_t id, session;
  pr_exec_t *exec;  /* START: the new execution (pr_exec_build) */
  const char *data; /* INPUT: borrowed (the caller waits); CANCEL: reason or NULL */
  size_t len;
  int64_t a, b;  /* CANCEL: force; RESIZE: cols, rows; LIST: state; READ: stream, max;
                 * START: a = 1, deferred (no wake-up: pr_control_flush) */
  uint64_t u;    /* READ: from; PURGE: older_than_ms */
  int want_ring; /* READ: also hand back a new reference on the stream's ring (ring) */
  /* results */
  int rc;
  void *out;
  size_t n;
  uint64_t r1, r2;
  void *ring; /* READ with want_ring, rc 0: the ring (pr_ring_t, referenced), the asker's */
  void (*fn)(void *owner, void *arg); /* CALL */
} pr_cmd_t;

typedef struct pr_control {
  pr_exec_ctx_t xc;        /* what every execution sees */
  pr_registry_t reg;       /* every execution (engine/registry.h) */
  pr_source_t source;      /* reads secrets from their stores (engine/secret_source.h) */
  pr_queue_t queued;       /* FIFO of queued executions (pr_exec_t.runq) */
  pr_target_t *targets;    /* the links to targets, made on first use (engine/targets.h) */
  pr_target_confs_t confs; /* the targets the host configured: all an RPC client may name */
  uint32_t running;        /* starting + running */
  uint32_t max_running;    /* 0 = unlimited */
  uint32_t kill_grace_ms;  /* default grace of a start spec */
  size_t output_limit;     /* bytes per ring */
  pr_spill_t *spill;       /* where rings keep their older bytes (base/ring.h), or NULL */
  uint32_t max_queued;     /* queued + held executions per session (pr_control_admit) */
  uint32_t host_waiting;   /* session 0's queued + held, admitted (atomic: the host admits) */
  pr_idmap_t waiting;      /* engine: session (> 0) -> its queued + held count, as a pointer */
  const char *listen;      /* the RPC socket path children get as PROCTOR_SOCKET, or NULL */
  uint64_t next_id;        /* ids handed out (atomic) */
  uint64_t next_rid;       /* worker request ids handed out (atomic) */
  /* commands from the host */
  pthread_mutex_t mu;
  pthread_cond_t cond;
  pr_queue_t cmds;  /* locked by mu */
  int loop_done;    /* locked by mu: the engine has left its loop */
  int wake_owed;    /* locked by mu: cmds holds deferred starts no wake-up was sent for */
  uint64_t wakeups; /* locked by mu: wake-ups the host sent (uv_async_send), a count */
  uv_async_t async;
  uv_timer_t close_timer;  /* bounds the wait of CLOSE */
  uv_timer_t idle_timer;   /* while a target's link is up: closes the idle ones */
  uint32_t target_idle_ms; /* a link with no execution for this long is closed */
  int batch; /* > 0: a walk over the registry is ending executions, or on_async runs a batch of
              * commands: no retention, no scheduling until it is done (batch_settle) */
  int ended_in_batch; /* an execution ended during the batch: retention is owed */
  /* engine thread: the history loads (pr_control_history_loading) */
  int history_loading; /* 1 until pr_control_history_loaded */
  pr_queue_t parked;   /* the host's commands that wait for the history, in order */
  /* the owner (csrc/proctor.c) */
  void *owner;                   /* passed to CALL functions */
  void (*shutdown)(void *owner); /* closing is over: close the owner's handles */
} pr_control_t;

/* pr_control_init: set up the control of one engine over `loop` (not running
 * yet), the shepherd link `sup` and the listener list `ls`. Returns 0 or a
 * negative error (pr_control_destroy is still safe). Host thread. */
int pr_control_init(pr_control_t *c, uv_loop_t *loop, const pr_engine_opts_t *o, pr_sup_t *sup,
                    pr_listeners_t *ls, void (*shutdown)(void *), void *owner);

/* pr_control_sup_ops: what the shepherd link tells (arg: the control). */
extern const pr_sup_ops_t pr_control_sup_ops;

/* pr_control_submit: push a command. Synchronous ones wait for the answer.
 * Returns 0 or PR_ECLOSED (the command was not run; an async one is freed).
 * Host thread. */
int pr_control_submit(pr_control_t *c, pr_cmd_t *cmd);

/* pr_control_flush: send the wake-up that deferred starts (a START with
 * cmd.a = 1, pr_engine_start_deferred) left owed, if one is. Returns 1 when it sent one, else 0. Host thread. */
int pr_control_flush(pr_control_t *c);

/* pr_control_wakeups: how many wake-ups the host has sent the engine thread
 * so far. Host thread. */
uint64_t pr_control_wakeups(pr_control_t *c);

/* pr_control_run: run one command on the engine thread and leave its results
 * in `cmd` (rc, out, n, r1, r2) without answering anyone: the host's path and
 * the RPC methods share it. cmd->session scopes lookups (0: every
 * execution). START takes cmd->exec and sets it to NULL. */
void pr_control_run(pr_control_t *c, pr_cmd_t *cmd);

/* pr_control_history_loading: the history is still loading (set before the
 * engine thread runs). Until pr_control_history_loaded, a host command that
 * may be about a record of the history waits (parked, in order; the host
 * stays blocked in pr_control_submit): a lookup of an id not in the registry,
 * a purge, a list that may hold terminal records. Everything else, and every
 * RPC command (its session never sees the history's records), runs at once.
 * pr_control_history_loaded: the records are in the registry: run the
 * parked commands. Engine thread. */
void pr_control_history_loading(pr_control_t *c);
void pr_control_history_loaded(pr_control_t *c);

/* pr_control_session_closed: RPC session `session` is gone: its requests to
 * workers are dropped (the workers get cancel messages). Engine thread. */
void pr_control_session_closed(pr_control_t *c, uint64_t session);

/* pr_control_close_handles: close the async handle and the close timer
 * (engine thread, from the owner's shutdown). */
void pr_control_close_handles(pr_control_t *c);

/* pr_control_destroy: free the registry (engine thread, after the loop ran
 * dry) — then, on the host thread once that thread ended, the lock. Two calls:
 * pr_control_free_registry on the engine thread, pr_control_destroy on the host. */
void pr_control_free_registry(pr_control_t *c);
void pr_control_destroy(pr_control_t *c);

/* pr_control_admit: count one more queued execution of `session` before its
 * START is submitted: 0, or PR_EBUSY when max_queued of that session are
 * already queued or held (they count until they begin or end; the ids of
 * both are in the registry). Session 0 (the host) on the host thread, any
 * other session on the engine thread. A START that runs takes the count
 * over; one never submitted gives it back with pr_control_unadmit. */
int pr_control_admit(pr_control_t *c, uint64_t session);
void pr_control_unadmit(pr_control_t *c, uint64_t session);

/* pr_control_next_id / pr_control_next_rid: a new execution / worker request
 * id. Any thread. */
uint64_t pr_control_next_id(pr_control_t *c);
uint64_t pr_control_next_rid(pr_control_t *c);

/* pr_exec_build (engine/spec.c): validate `s` and build a new execution
 * with its id, rings and spawn payload; `base_env` is the environment it
 * inherits unless s->clear_env (the host passes environ, the RPC server its
 * snapshot). Strings are copied. Any thread. Returns 0 and *out, or
 * PR_EINVAL / PR_ETOOBIG / PR_ENOMEM. */
int pr_exec_build(pr_control_t *c, const pr_spec_t *s, char *const *base_env, pr_exec_t **out);

#endif
