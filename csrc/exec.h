/* exec.h — one execution's lifecycle on the engine thread.
 *
 * Thread: engine, every function.
 *
 *   queued ─► starting ─► running ─► completed | failed | canceled | timed_out
 *      └────────┴──► canceled | failed
 *
 * pr_exec_transition is the only place a state changes; it rejects anything
 * not in that table. The terminal state is decided by the first of {exit,
 * cancel, timeout} (x->verdict) but only entered once the leader has exited
 * AND every stream reached EOF (or the drain timer gave up).
 */
#ifndef PR_EXEC_H
#define PR_EXEC_H

#include "types.h"
#include "wire.h"

/* pr_exec_begin: take a queued execution to `starting` and ask the shepherd
 * to spawn it (starting the shepherd if needed). */
void pr_exec_begin(pr_exec_t *x);

/* pr_exec_schedule: begin queued executions while running < max_running. */
void pr_exec_schedule(pr_engine_t *e);

/* Shepherd packet handlers (supervisor.c calls them). They take ownership
 * of the fds. */
void pr_exec_on_spawned(pr_engine_t *e, const pr_wire_hdr_t *h, int *fds, int nfds);
void pr_exec_on_failed(pr_engine_t *e, const pr_wire_hdr_t *h);
void pr_exec_on_exited(pr_engine_t *e, const pr_wire_hdr_t *h);
void pr_exec_on_supervisor_lost(pr_engine_t *e);

/* pr_exec_cancel: request the end; `reason` is recorded when this call decides
 * the verdict ("canceled", "engine_closed"). */
pr_cancel_result_t pr_exec_cancel(pr_exec_t *x, int force, const char *reason);

/* Input given while an execution is queued or starting is kept (and written
 * once it runs) up to this many bytes in all; more is refused with PR_EBUSY.
 * While it runs, a new input is refused with PR_EBUSY once this many bytes of
 * earlier input wait for the child to read them (one input of any size is
 * taken while less waits): a child that never reads cannot make the host
 * hold unbounded memory. */
#define PR_PENDING_INPUT_MAX ((size_t)16 << 20)

/* pr_exec_input: write `len` bytes (any size: a write is split into buffers
 * libuv can describe) or keep them while queued/starting. Returns 0,
 * PR_ENOTRUNNING, PR_ESTDINCLOSED, PR_EBUSY (more than PR_PENDING_INPUT_MAX
 * bytes would wait for the process to start, or already wait for it to read),
 * PR_ENOMEM, or a UV_E* code.
 * close_stdin / resize: 0 or PR_ENOTRUNNING / PR_ESTDINCLOSED / PR_EINVAL.
 * resize while queued or starting keeps the size: it is the pty's size from
 * the moment the pty exists (0 is returned); once ended, PR_ENOTRUNNING. */
int pr_exec_input(pr_exec_t *x, const char *data, size_t len);
int pr_exec_close_stdin(pr_exec_t *x);
int pr_exec_resize(pr_exec_t *x, uint16_t cols, uint16_t rows);

/* pr_exec_resume: the host consumed output of a paused stream; read again. */
void pr_exec_resume(pr_exec_t *x);

/* pr_exec_abandon: end a live execution at once during engine shutdown:
 * close its streams and emit its terminal event (state from the verdict). */
void pr_exec_abandon(pr_exec_t *x);

/* pr_exec_park: the process of worker `x` ended (exited, streams at EOF) and
 * will be replaced: release its shepherd job and forget its verdict; `x`
 * stays running without a process (exited = 1, verdict = -1) until
 * pr_exec_respawn. Only from pr_worker_on_end. */
void pr_exec_park(pr_exec_t *x);

/* pr_exec_respawn: spawn a new process for parked worker `x` with the same
 * spawn payload; its SPAWNED opens new streams into the same rings. A failure
 * ends it like an exit (finish, so pr_worker_on_end decides again). */
void pr_exec_respawn(pr_exec_t *x);

/* pr_exec_snapshot: a host-owned copy of the record (NULL on ENOMEM).
 * pr_exec_snapshot_brief: the same for a list, without env_keys (`brief` set):
 * listing 1000 executions must not copy and push 1000 environments. */
pr_record_t *pr_exec_snapshot(const pr_exec_t *x);
pr_record_t *pr_exec_snapshot_brief(const pr_exec_t *x);

/* pr_exec_release: drop a dead execution once its handles are closed. Called
 * by the registry when it forgets `x`. */
void pr_exec_release(pr_exec_t *x);

/* pr_exec_free: free the memory of `x` (no handle may be open). */
void pr_exec_free(pr_exec_t *x);

/* pr_exec_on_flush: the engine's flush timer fired: push every deferred
 * output marker (see emit_output_marker in exec.c). */
void pr_exec_on_flush(uv_timer_t *t);

/* pr_exec_handle_closed: uv_close callback of every handle an execution owns. */
void pr_exec_handle_closed(uv_handle_t *h);

/* pr_engine_run_cmd (engine.c): run one command on the engine thread and
 * leave its results in `c` (rc, out, n, r1, r2) without answering anyone: the
 * host's on_async path and the RPC handlers share it. `c->session` scopes
 * lookups (0: every execution). START takes c->exec (built by
 * pr_engine_build_exec) and sets it to NULL. Engine thread only. */
void pr_engine_run_cmd(pr_engine_t *e, pr_cmd_t *c);

/* pr_engine_build_exec (engine.c): validate `s` and build a new execution
 * with its id, rings and spawn payload; `base_env` is the environment it
 * inherits unless s->clear_env (the host passes environ, the engine thread
 * e->rpc_env). Strings are copied. Any thread. Returns 0 and *out, or
 * PR_EINVAL / PR_ETOOBIG / PR_ENOMEM. */
int pr_engine_build_exec(pr_engine_t *e, const pr_spec_t *s, char *const *base_env,
                         pr_exec_t **out);

/* Emitting events into the host queue (engine.c). */
void pr_emit_event(pr_engine_t *e, pr_event_t *ev);

/* pr_engine_on_finished: an execution ended while the engine is closing
 * (engine.c; shuts down once nothing is live). */
void pr_engine_on_finished(pr_engine_t *e);

/* Wall clock in ms since the epoch. */
uint64_t pr_now_ms(void);

#endif
