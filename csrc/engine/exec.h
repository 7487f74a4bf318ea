/* engine/exec.h — one execution: its record, its streams, its lifecycle.
 *
 * Thread: engine, every function, except pr_exec_alloc and pr_exec_free of
 * an execution no thread has seen yet (the host builds one, engine/spec.c).
 *
 *   queued ─► starting ─► running ─► completed | failed | canceled | timed_out
 *      └────────┴──► canceled | failed          starting ─► timed_out: timeout_ms
 *                                                  counts from starting (secrets, spawn)
 *
 * transition() in exec.c is the only place a state changes; it rejects
 * anything not in that table and tells the listeners (engine/events.h). What
 * each event does in each state and timer phase is the table of
 * engine/lifecycle.h, which exec.c's handlers read. The
 * terminal state is decided by the first of {exit, cancel, timeout}
 * (x->verdict; a cancel while it drains after the leader's exit still wins,
 * since the execution has not ended) but only entered once the leader has exited AND every stream
 * reached EOF (or the drain timer gave up) AND, while it is being stopped,
 * the whole job is gone or its grace has ended (SIGKILL went to the rest).
 *
 *   exec.c    transitions, verdict, timer (timeout → kill grace → drain), kill
 *             ladder, spawn results, worker park/respawn, the end, records
 *   stream.c  output streams (pipes, pty master), stdin writes, pending input
 *
 * An execution knows its surroundings only through its pr_exec_ctx_t (the
 * loop, the shepherd link, the listeners, and one callback when it ends) and
 * a subtype (a supervised worker) only through its pr_exec_ops_t.
 */
#ifndef PR_EXEC_H
#define PR_EXEC_H

#include <stdint.h>
#include <uv.h>

#include "base/buf.h"
#include "base/queue.h"
#include "base/ring.h"
#include "base/wire.h"
#include "engine/events.h"
#include "engine/lifecycle.h"
#include "include/proctor.h"

typedef struct pr_sup pr_sup_t;
typedef struct pr_exec_ctx pr_exec_ctx_t;

/* One output stream of an execution. */
typedef struct {
  /* Pipes are read with libuv's stream reader. A pty master is read with a
   * poll handle and our own read loop: libuv takes POLLHUP after a partial
   * read as EOF, but a pty master returns at most 4095 bytes per read and
   * raises POLLHUP as soon as the slave closes, with output still queued —
   * that is how terminal output loses its tail. Only EIO (or 0) ends it here. */
  union {
    uv_pipe_t pipe; /* pipe streams, valid while `open` */
    uv_poll_t poll; /* the pty stream, valid while `open` */
  } h;              /* first member: a handle pointer is a stream pointer */
  pr_exec_t *exec;
  pr_ring_t *ring; /* NULL when the execution has no such stream */
  int open;        /* handle initialised, uv_close not yet called */
  int eof;         /* EOF/EIO seen or stream closed by the drain timer */
  int paused;      /* back-pressure: reading stopped until the host catches up */
  /* the host queue's (engine/hostq.c), per stream: */
  uint64_t last_mark_ns; /* uv_hrtime of the last output marker queued for the host */
  pr_queue_t defer;      /* on the host queue's deferred list while a marker waits */
} pr_stream_t;

/* A subtype of execution (a supervised worker, engine/worker.c) plugs in
 * here, like Neovim's proc->type or Redis's ConnectionType. Every slot may be
 * NULL. x->sub is its state. */
typedef struct pr_exec_ops {
  /* bytes of `stream` arrived, as the process wrote them (not masked: a
   * subtype masks what it decodes), before they are masked into the ring */
  void (*bytes)(pr_exec_t *x, int stream, const char *p, size_t n);
  /* a (new) process of x is running */
  void (*spawned)(pr_exec_t *x);
  /* the process of x is gone and finish() is about to end x: return 1 to keep
   * x running without a process (it restarts), 0 to let it end */
  int (*end)(pr_exec_t *x);
  /* fill the subtype's fields of record r */
  void (*record)(const pr_exec_t *x, pr_record_t *r);
  /* free x->sub (any thread; its handles are closed) */
  void (*free)(void *sub);
} pr_exec_ops_t;

/* Who reads the secrets of x->vault (engine/vault.h) from their stores:
 * engine/secret_source.c, above the execution, plugs in here. */
typedef struct pr_secret_reader {
  /* read every value of x->vault now (x is starting); the end is told once
   * through pr_exec_vault_done, perhaps before this returns */
  void (*read)(struct pr_secret_reader *r, pr_exec_t *x);
  /* stop the reads of x. quiet = 0 (a cancel, a timeout): they end soon and
   * pr_exec_vault_done follows; quiet = 1 (x ends now): at once, nothing is
   * told, the values are wiped */
  void (*stop)(struct pr_secret_reader *r, pr_exec_t *x, int quiet);
} pr_secret_reader_t;

/* What the streams (stream.c, below the lifecycle) tell the lifecycle
 * (exec.c): stream.c reaches exec.c only through these, which pr_exec_alloc
 * sets (x->up). */
typedef struct pr_stream_up {
  void (*closed)(uv_handle_t *h); /* uv_close callback of a handle x owns (h->data is x) */
  void (*more)(pr_exec_t *x);     /* bytes arrived (after the exit: the idle window restarts) */
  void (*ended)(pr_exec_t *x);    /* a stream reached EOF: perhaps the end */
} pr_stream_up_t;

/* What every execution of an engine shares. Owned by engine/control.c. */
struct pr_exec_ctx {
  uv_loop_t *loop;
  pr_sup_t *sup;              /* the shepherd link (engine/shepherd_link.h) */
  pr_listeners_t *ls;         /* told every state change, output, worker event */
  pr_secret_reader_t *source; /* reads the secrets of x->vault (engine/secret_source.h), or NULL */
  uint32_t drain_ms;          /* how long output may still arrive after exit */
  /* the link of target `name` (engine/targets.c), started on first use through
   * `transport`; NULL when out of memory */
  pr_sup_t *(*link)(pr_exec_ctx_t *c, const char *name, const char *transport);
  int closing; /* the engine shuts down: no scheduling, no restarts */
  /* x entered its terminal state; was_active: it was starting or running */
  void (*ended)(pr_exec_ctx_t *c, pr_exec_t *x, int was_active);
  char readbuf[65536]; /* every read lands here first */
};

struct pr_exec {
  pr_queue_t order; /* registry list, id order */
  pr_queue_t runq;  /* the scheduler's queue while queued */
  pr_exec_ctx_t *ctx;
  /* id, session, label, owner, cwd, shell, argv (NULL-terminated, argc
   * entries), pty, state, reason, error, exit_code, signal, pid, created_at,
   * started_at, ended_at, duration_ms: what its record shows as it is
   * (include/proctor.h PR_RECORD_CORE), copied as one struct, `rec`, by
   * pr_exec_view and pr_exec_restore. */
  union {
    pr_record_core_t rec;
    struct {
      PR_RECORD_CORE
    };
  };
  char *transport; /* a target's: the command that reaches its relay (rec.target names it) */
  pr_sup_t *sup;   /* its shepherd: ctx->sup, or its target's link (from pr_exec_begin) */
  char *spawn_msg; /* serialized spawn payload until sent (a worker keeps it), then NULL */
  size_t spawn_len;
  int stdin_pipe, backpressure;
  int held;     /* queued but off the run queue until PR_CMD_RELEASE (spec.hold) */
  int out_held; /* the host's consumer is behind: its streams stay paused (pr_exec_hold_output) */
  int waiting; /* counted in its session's queued bound (engine/control.c) until it begins or ends */
  size_t kept; /* ended: ring bytes counted in the registry's ended-output budget */
  uint16_t cols, rows;
  uint64_t timeout_ms; /* 0 = none; armed when it enters starting: the start-up counts */
  uint32_t grace_ms;

  /* The lifecycle (engine/lifecycle.h: its row is a function of these and
   * of `state`, in rec): */
  int verdict;      /* terminal state decided by the first of exit/cancel/timeout; -1 = none */
  pr_phase_t phase; /* what `timer` is armed for: timeout, kill grace, drain, or nothing */
  pr_stop_t stop;   /* how far the kill ladder went */
  /* ... and the facts it reads that are independent of them: */
  int exited;              /* the shepherd reported the leader's exit (or there is no process) */
  int empty;               /* the shepherd reported no process of the job left (or it is lost) */
  int released;            /* RELEASE sent to the shepherd: the job is no longer ours to signal */
  int respawning;          /* subtype: a replacement process was asked for; SPAWNED not seen yet */
  int interrupted;         /* a ^C was written to its pty (the tty's SIGINT is the user's): an exit
                    * by SIGINT is a cancel */
  int finished;            /* the terminal event was emitted: state is terminal from then on. Set by
                    * finish() before it closes the handles, which is why it is a field and
                    * not pr_state_terminal(state); the registry and the RPC read it */
  int pidfd;               /* -1 when none */
  uint64_t started_mono;   /* uv_now at running, for duration */
  uint64_t drain_deadline; /* uv_now after which draining stops, whatever arrives */
  uint64_t kill_deadline;  /* uv_now at which the grace ends (while stopping) */
  const pr_stream_up_t *up; /* the lifecycle, as the streams see it (pr_exec_alloc) */
  const pr_exec_ops_t *ops; /* a subtype (a worker), or NULL */
  void *sub;                /* the subtype's state */

  pr_stream_t streams[PR_NSTREAM];
  uv_pipe_t in;        /* stdin pipe, or a dup of the pty master used only for writing */
  int in_open;         /* stdin handle usable for writes */
  int in_closing;      /* close_stdin requested */
  pr_buf_t pending_in; /* input given while queued/starting, written once running;
                        * at most PR_PENDING_INPUT_MAX bytes */
  uv_timer_t timer;    /* timeout, then kill grace, then drain: one phase at a time (phase) */
  int timer_open;
  char *env_keys; /* keys the child got, NUL-separated (secrets.c), or NULL */
  size_t env_keys_len;
  int previous_session;       /* restored from a history file: no process, no handles */
  struct pr_secrets *secrets; /* values masked in output (secrets.c), or NULL; wiped at the end */
  struct pr_vault *vault;     /* secrets read from a store at spawn time (vault.c), or NULL */
  int handles;                /* open libuv handles; the record is freed when 0 and `dead` */
  int dead;                   /* removed from the registry */
};

/* Input given while an execution is queued or starting is kept (and written
 * once it runs) up to this many bytes in all; more is refused with PR_EBUSY.
 * While it runs, a new input is refused with PR_EBUSY once this many bytes of
 * earlier input wait for the child to read them (one input of any size is
 * taken while less waits): a child that never reads cannot make the host
 * hold unbounded memory. */
#define PR_PENDING_INPUT_MAX ((size_t)16 << 20)

/* ---- life (exec.c) -------------------------------------------------------------------- */

/* pr_exec_alloc: a new execution in its "closed" state (no ids, no strings,
 * no handles), valid for pr_exec_free. NULL when out of memory. Any thread. */
pr_exec_t *pr_exec_alloc(void);

/* pr_exec_attach: x joins the engine of `c` (its timer is created). */
void pr_exec_attach(pr_exec_t *x, pr_exec_ctx_t *c);

/* pr_exec_enqueued: x is queued: tell the listeners its first state (prev
 * PR_NSTATE) — the one announcement of `queued`, for every surface. */
void pr_exec_enqueued(pr_exec_t *x);

/* pr_exec_begin: take a queued execution to `starting` and ask the shepherd
 * to spawn it (starting the shepherd if needed). A failure ends it at once. */
void pr_exec_begin(pr_exec_t *x);

/* pr_exec_refuse: end queued x at once as failed/spawn_error, `err` being
 * why (it could not be registered). */
void pr_exec_refuse(pr_exec_t *x, int err);

/* pr_exec_restore: a finished execution with no process and no handles from a
 * record of an earlier engine (store/history.c load). Takes the record's
 * strings (and frees `r`) and the rings (NULL: no such stream). NULL when out
 * of memory (the record and rings are freed). */
pr_exec_t *pr_exec_restore(pr_exec_ctx_t *c, pr_record_t *r, pr_ring_t *const *rings);

/* Shepherd packet results, dispatched by the owner of the shepherd link
 * (engine/control.c) to the execution named in the packet. on_spawned takes
 * ownership of the fds. */
void pr_exec_on_spawned(pr_exec_t *x, const pr_wire_hdr_t *h, int *fds, int nfds);
void pr_exec_on_failed(pr_exec_t *x, const pr_wire_hdr_t *h);
void pr_exec_on_exited(pr_exec_t *x, const pr_wire_hdr_t *h);
/* The last process of x's job is gone (after its leader's exit). */
void pr_exec_on_empty(pr_exec_t *x);
/* The shepherd died: kill what can still be reached safely, end x. */
void pr_exec_on_supervisor_lost(pr_exec_t *x);

/* pr_exec_vault_done: the reads of x's secrets ended; why = NULL when every
 * value was read, else "secret NAME: ..." (never a value). From the reader. */
void pr_exec_vault_done(pr_exec_t *x, const char *why);

/* pr_exec_row: where x is in the lifecycle table (engine/lifecycle.h), from
 * its state, phase, verdict and facts. Every handler below reads its cell. */
pr_row_t pr_exec_row(const pr_exec_t *x);

/* pr_exec_on_timer: the callback of x's timer (t->data is x): a switch on
 * x->phase, then the timer column of its row. */
void pr_exec_on_timer(uv_timer_t *t);

/* pr_exec_cancel: request the end, in any state before the terminal one
 * (draining included: the rest of the job gets the kill ladder); `reason`
 * is recorded when this call decides the verdict ("canceled",
 * "engine_closed", "disconnected"). */
pr_cancel_result_t pr_exec_cancel(pr_exec_t *x, int force, const char *reason);

/* pr_exec_resize: set the pty size. 0, PR_ENOTRUNNING or PR_EINVAL (no pty).
 * While queued or starting the size is kept: it is the pty's size from the
 * moment the pty exists (0 is returned); once ended, PR_ENOTRUNNING. */
int pr_exec_resize(pr_exec_t *x, uint16_t cols, uint16_t rows);

/* pr_exec_abandon: end a live execution at once during engine shutdown:
 * close its streams and emit its terminal event (state from the verdict). */
void pr_exec_abandon(pr_exec_t *x);

/* pr_exec_park: the process of a subtype execution ended (exited, streams at
 * EOF) and will be replaced: release its shepherd job and forget its verdict;
 * x stays running without a process (exited = 1, verdict = -1) until
 * pr_exec_respawn. Only from ops->end. */
void pr_exec_park(pr_exec_t *x);

/* pr_exec_respawn: spawn a new process for parked x with the same spawn
 * payload; its SPAWNED opens new streams into the same rings. A failure ends
 * it like an exit (finish, so ops->end decides again). */
void pr_exec_respawn(pr_exec_t *x);

/* pr_exec_snapshot: a host-owned copy of the record (NULL on ENOMEM).
 * pr_exec_snapshot_brief: the same for a list, without env_keys (`brief` set):
 * listing 1000 executions must not copy and push 1000 environments. */
pr_record_t *pr_exec_snapshot(const pr_exec_t *x);
pr_record_t *pr_exec_snapshot_brief(const pr_exec_t *x);

/* pr_exec_release: x left the registry: free it once its handles are closed. */
void pr_exec_release(pr_exec_t *x);

/* pr_exec_free: free the memory of x (no handle may be open). */
void pr_exec_free(pr_exec_t *x);

/* pr_exec_handle_closed: uv_close callback of every handle an execution owns
 * (handle->data is the execution). */
void pr_exec_handle_closed(uv_handle_t *h);

/* ---- streams and stdin (stream.c) ----------------------------------------------------- */

/* pr_exec_input: write `len` bytes (any size: a write is split into buffers
 * libuv can describe) or keep them while queued/starting. Returns 0,
 * PR_ENOTRUNNING, PR_ESTDINCLOSED, PR_EBUSY (more than PR_PENDING_INPUT_MAX
 * bytes would wait for the process to start, or already wait for it to read),
 * PR_ENOMEM, or a UV_E* code.
 * close_stdin: 0 or PR_ENOTRUNNING / PR_ESTDINCLOSED. */
int pr_exec_input(pr_exec_t *x, const char *data, size_t len);
int pr_exec_close_stdin(pr_exec_t *x);

/* pr_exec_resume: the host consumed output of a paused stream; read again
 * (not while the host holds its output). */
void pr_exec_resume(pr_exec_t *x);

/* pr_exec_hold_output: on: stop reading every stream of `x` (the child
 * blocks on a full pipe; nothing is dropped; draining waits as for
 * back-pressure) until called with off, which reads again. Per execution:
 * the others keep flowing. */
void pr_exec_hold_output(pr_exec_t *x, int on);

/* Between exec.c and stream.c. */
int pr_stream_open(pr_exec_t *x, int which, int fd); /* takes fd; 0 or -1 */
void pr_stream_close(pr_stream_t *s);
size_t pr_stream_read_ready(pr_stream_t *s, uv_os_fd_t fd); /* bytes taken */
void pr_exec_open_input(pr_exec_t *x, int fd);              /* takes fd */
void pr_exec_close_input(pr_exec_t *x);
void pr_exec_flush_pending_input(pr_exec_t *x); /* needs state running */
void pr_exec_drop_pending_input(pr_exec_t *x);
void pr_exec_drain_more(pr_exec_t *x);   /* bytes came while draining (x->up->more) */
void pr_exec_maybe_finish(pr_exec_t *x); /* exited and every stream at EOF: end (x->up->ended) */
int pr_exec_all_eof(const pr_exec_t *x);

#endif
