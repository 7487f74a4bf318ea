/* engine/exec.c — execution lifecycle: transitions, verdict, timer, kill
 * ladder, spawn results, worker park/respawn, the end, records.
 *
 * Thread: engine. See exec.h for the state table.
 *
 *   shepherd SPAWNED ─► streams opened (stream.c) ─► running
 *   cancel/timeout ─► SIGHUP(pty) SIGTERM+SIGCONT to the whole job ─ grace ─► SIGKILL to what is left
 *     (the grace is the job's, not the leader's: its exit does not cut it short;
 *      EMPTY, the job's last process gone, does)
 *   shepherd EXITED ─► drain timer ─► every stream at EOF (or timer) ─► terminal
 *   terminal ─► RELEASE (shepherd kills leftovers, reaps leader) ─► ctx->ended
 *               (the registry counts it, the scheduler starts the next one)
 *
 * Every state change goes through transition(), which tells the listeners
 * (engine/events.h) — the host queue, the RPC server, the history, the audit
 * log — without naming any of them.
 */
#include "engine/exec.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <termios.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/locked.h"
#include "base/pidfd.h"
#include "engine/secrets.h"
#include "engine/shepherd_link.h"
#include "engine/vault.h"

static void finish(pr_exec_t *x);
static void stop(pr_exec_t *x, int force);
static void timer_start(pr_exec_t *x, pr_phase_t phase, uint64_t ms);
static void timer_stop(pr_exec_t *x);
static int apply_size(pr_exec_t *x);
static void start_drain(pr_exec_t *x);
static void start_timeout(pr_exec_t *x);

/* Being stopped, and the job still has its grace: SIGTERM went to all of
 * it, the grace deadline has not passed, and some process of it is left.
 * The end waits (the timer is the grace timer meanwhile). */
static int in_grace(const pr_exec_t *x) { return x->phase == PR_PHASE_GRACE; }

pr_row_t pr_exec_row(const pr_exec_t *x) {
  if (x->finished) return PR_ROW_ENDED;
  int starting = x->state == PR_STARTING || x->respawning;
  if (x->verdict == PR_CANCELED || x->verdict == PR_TIMED_OUT) { /* being stopped */
    if (x->phase == PR_PHASE_GRACE) return PR_ROW_GRACE;
    if (x->exited) return PR_ROW_STOP_DRAIN;
    return starting ? PR_ROW_STOP_SPAWN : PR_ROW_KILLED;
  }
  if (x->ops && x->exited && x->verdict < 0) return PR_ROW_PARKED;
  if (x->exited && x->state == PR_RUNNING) return PR_ROW_DRAINING;
  if (x->exited || x->verdict >= 0) return PR_ROW_FAILING;
  if (x->state == PR_QUEUED) return PR_ROW_QUEUED;
  return starting ? PR_ROW_STARTING : PR_ROW_RUNNING;
}

static const pr_lc_rule_t *rule(const pr_exec_t *x, pr_lc_event_t ev) {
  return &pr_lifecycle[pr_exec_row(x)][ev];
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

/* Stop the reads of x's secrets (engine/secret_source.c, through the reader). */
static void stop_reads(pr_exec_t *x, int quiet) {
  pr_secret_reader_t *r = x->ctx->source;
  if (r) r->stop(r, x, quiet);
}

/* ---- transitions ----------------------------------------------------------- */

static const unsigned char allowed[PR_NSTATE][PR_NSTATE] = {
    [PR_QUEUED] = {[PR_STARTING] = 1, [PR_CANCELED] = 1, [PR_FAILED] = 1},
    [PR_STARTING] = {[PR_RUNNING] = 1, [PR_CANCELED] = 1, [PR_FAILED] = 1, [PR_TIMED_OUT] = 1},
    [PR_RUNNING] = {[PR_COMPLETED] = 1, [PR_FAILED] = 1, [PR_CANCELED] = 1, [PR_TIMED_OUT] = 1},
};

void pr_exec_state_info(pr_exec_t *x, pr_state_t prev, pr_state_info_t *st) {
  st->x = x;
  st->id = x->id;
  st->session = x->session;
  st->state = x->state;
  st->prev = prev;
  st->reason = x->reason;
  st->error = x->error;
  st->exit_code = x->exit_code;
  st->signal = x->signal;
  st->pid = x->pid;
}

static void tell_state(pr_exec_t *x, pr_state_t prev) {
  pr_state_info_t st;
  pr_exec_state_info(x, prev, &st);
  pr_notify_state(x->ctx->ls, &st);
}

/* A transition not in the table is a bug: test builds (-DPR_DEBUG) stop at
 * once; a release build never aborts the host (finish() falls back to
 * `failed`, which every live state allows). */
static void refused(const pr_exec_t *x, pr_state_t to) {
#ifdef PR_DEBUG
  fprintf(stderr, "proctor: execution %llu: transition %s -> %s refused\n",
          (unsigned long long)x->id, pr_state_name(x->state),
          to < PR_NSTATE ? pr_state_name(to) : "?");
  abort();
#else
  (void)x;
  (void)to;
#endif
}

/* The one place a state changes. Returns 0, or PR_EINVAL for a transition
 * that is not in the table (a bug; the state is left alone). */
static int transition(pr_exec_t *x, pr_state_t to) {
  pr_state_t from = x->state;
  if (to >= PR_NSTATE || !allowed[from][to]) {
    refused(x, to);
    return PR_EINVAL;
  }
  x->state = to;
  tell_state(x, from);
  return 0;
}

void pr_exec_enqueued(pr_exec_t *x) {
  x->state = PR_QUEUED;
  tell_state(x, PR_NSTATE);
}

/* Record the verdict (first decision wins). Returns 1 if this call decided. */
static int decide(pr_exec_t *x, pr_state_t verdict, const char *reason) {
  if (x->verdict >= 0) return 0;
  x->verdict = (int)verdict;
  free(x->reason);
  x->reason = dup_or_null(reason);
  return 1;
}

/* ---- life -------------------------------------------------------------------- */

/* The lifecycle as stream.c sees it (it never names exec.c). */
static const pr_stream_up_t stream_up = {
    .closed = pr_exec_handle_closed,
    .more = pr_exec_drain_more,
    .ended = pr_exec_maybe_finish,
};

pr_exec_t *pr_exec_alloc(void) {
  pr_exec_t *x = calloc(1, sizeof(*x));
  if (x == NULL) return NULL;
  x->up = &stream_up;
  x->pidfd = -1;
  x->verdict = -1;
  x->exit_code = -1;
  x->pending_in.max = PR_PENDING_INPUT_MAX;
  pr_queue_init(&x->runq); /* a held one is canceled off no list */
  for (int i = 0; i < PR_NSTREAM; i++) pr_queue_init(&x->streams[i].defer);
  return x;
}

void pr_exec_attach(pr_exec_t *x, pr_exec_ctx_t *c) {
  x->ctx = c;
  x->sup = c->sup;
  if (uv_timer_init(c->loop, &x->timer) == 0) {
    x->timer.data = x;
    x->timer_open = 1;
    x->handles++;
  }
}

void pr_exec_handle_closed(uv_handle_t *h) {
  pr_exec_t *x = (pr_exec_t *)h->data;
  if (--x->handles == 0 && x->dead) pr_exec_free(x);
}

static void close_handle(uv_handle_t *h) {
  if (!uv_is_closing(h)) uv_close(h, pr_exec_handle_closed);
}

int pr_exec_all_eof(const pr_exec_t *x) {
  for (int i = 0; i < PR_NSTREAM; i++)
    if (x->streams[i].ring && !x->streams[i].eof) return 0;
  return 1;
}

void pr_exec_maybe_finish(pr_exec_t *x) {
  if (x->exited && !x->finished && pr_exec_all_eof(x) && !in_grace(x)) finish(x);
}

/* Bytes arrived after the exit: the drain window is an idle timeout, not an
 * absolute one (never past the drain deadline). */
void pr_exec_drain_more(pr_exec_t *x) {
  if (!x->exited || x->finished || in_grace(x)) return;
  uint64_t now = uv_now(x->ctx->loop), at = now + x->ctx->drain_ms;
  if (at > x->drain_deadline) at = x->drain_deadline;
  timer_start(x, PR_PHASE_DRAIN, at > now ? at - now : 0);
}

/* ---- timer: timeout → kill grace → drain ----------------------------------------- */

/* The job is done with: its reaper kills what is left of it and goes. */
static void release(pr_exec_t *x) {
  if (!x->released && pr_sup_alive(x->sup))
    pr_sup_send(x->sup, PR_W_RELEASE, 0, x->id, 0, 0, NULL, 0);
  x->released = 1;
}

/* SIGKILL to every process of the job (its reaper keeps killing what comes
 * back). A grace it cuts short is over: its timer stops (the caller drains
 * if the leader has exited). */
static void kill_job(pr_exec_t *x) {
  x->stop = PR_STOP_KILL;
  if (in_grace(x)) timer_stop(x);
  pr_sup_send(x->sup, PR_W_SIGNAL, 0, x->id, SIGKILL, 0, NULL, 0);
}

/* Canceled or timed out while starting: the job's reaper may be one its job
 * stopped (SIGSTOP) before it reported the spawn, and would hold x in
 * `starting` for ever. The probe continues it (its report comes, and x is
 * stopped as the cell says); a reaper that still does not answer is killed
 * by the shepherd, which reports the spawn failed, and x ends. Nothing for
 * a spawn not sent yet (the shepherd knows no such job). */
static void probe_reaper(pr_exec_t *x) {
  if (x->sup) pr_sup_send(x->sup, PR_W_SIGNAL, 0, x->id, 0, 0, NULL, 0); /* its job's link */
}

/* The drain window passed (phase drain): read what came, end, or wait on. */
static void drain_step(pr_exec_t *x) {
  uint32_t drain_ms = x->ctx->drain_ms;
  /* Whatever still holds a pipe open is cut off ... except a stream paused by
   * back-pressure: the bytes still in its pipe are owed to a consumer that
   * asked to keep everything, so it is the consumer's pace that ends it. Not
   * for ever, though: at the drain cap every process of the job is killed
   * (RELEASE), so what is left in the pipe is finite and EOF comes once the
   * consumer has taken it. */
  uint64_t now = uv_now(x->ctx->loop);
  /* A starved loop runs its timers before it polls: bytes that reached the
   * kernel within the idle window may not have been seen yet. Take them
   * first; if there were any, the idle window starts again, up to the
   * drain cap. */
  size_t late = 0;
  for (int i = 0; i < PR_NSTREAM; i++) {
    pr_stream_t *s = &x->streams[i];
    uv_os_fd_t fd;
    if (s->open && !s->paused && uv_fileno((uv_handle_t *)&s->h, &fd) == 0)
      late += pr_stream_read_ready(s, fd);
  }
  if (pr_exec_all_eof(x)) {
    finish(x);
    return;
  }
  if (late > 0 && now < x->drain_deadline) {
    uint64_t left = x->drain_deadline - now;
    timer_start(x, PR_PHASE_DRAIN, left < drain_ms ? left : drain_ms);
    return;
  }
  for (int i = 0; i < PR_NSTREAM; i++) {
    if (x->streams[i].open && x->streams[i].paused) {
      if (now >= x->drain_deadline) release(x); /* no writer is left after this */
      timer_start(x, PR_PHASE_DRAIN, drain_ms);
      return;
    }
  }
  for (int i = 0; i < PR_NSTREAM; i++)
    if (x->streams[i].ring) pr_stream_close(&x->streams[i]);
  pr_exec_maybe_finish(x);
}

/* Decide what cell `r` says (engine/lifecycle.h); reason names the cause. */
static void decide_by(pr_exec_t *x, const pr_lc_rule_t *r, const char *reason) {
  switch ((pr_lc_verdict_t)r->verdict) {
  case PR_V_CANCEL_OVER: /* the exit's verdict gives way */
  case PR_V_CANCELED:
    if (r->verdict == PR_V_CANCEL_OVER) x->verdict = -1;
    decide(x, PR_CANCELED, reason);
    break;
  case PR_V_TIMED_OUT: decide(x, PR_TIMED_OUT, "timeout"); break;
  case PR_V_KEEP:
  case PR_V_EXIT:        /* pr_exec_on_exited decides from the status */
  case PR_V_LOST: break; /* pr_exec_on_supervisor_lost */
  }
}

void pr_exec_on_timer(uv_timer_t *t) {
  pr_exec_t *x = (pr_exec_t *)t->data;
  if (x->finished) return;
  const pr_lc_rule_t *r = rule(x, PR_LC_TIMER); /* the row, with the phase that fired */
  pr_phase_t phase = x->phase;
  x->phase = PR_PHASE_NONE; /* one shot: a phase that goes on arms it again */
  switch (phase) {
  case PR_PHASE_GRACE: /* KILL_GRACE: SIGKILL to what is left of the job */
    kill_job(x);
    /* The job's reaper does that, unless the job stopped it (SIGSTOP: same
     * uid): without EXITED the leader is not reaped, so its pid and group id
     * are still its own. Kill both from here too, through the pidfd; the
     * shepherd kills a reaper that does not answer, and reports the exit. */
    if (!x->exited) pr_pidfd_kill_group(x->pidfd, (pid_t)x->pid);
    if (x->exited) start_drain(x);
    break;
  case PR_PHASE_DRAIN: drain_step(x); break; /* DRAIN_STEP */
  case PR_PHASE_TIMEOUT:
    decide_by(x, r, "timeout");
    if (r->action == PR_A_TERM) stop(x, 0);
    else if (r->action == PR_A_T_START) {
      start_timeout(x);
      probe_reaper(x);
    }
    break;
  case PR_PHASE_NONE: break;
  }
}

/* timeout_ms covers the whole start-up, counted from `starting`: secrets
 * read from a store (a source that waits for a prompt or the network) and
 * the spawn. Secrets still being read: their reads are stopped (a command
 * source's job is killed) and x ends timed_out once they have ended. No
 * SPAWNED yet: it is stopped as soon as SPAWNED comes (or FAILED ends it).
 * The verdict is decided (timed_out). */
static void start_timeout(pr_exec_t *x) {
  const char *src = x->vault && pr_vault_busy(x->vault) ? pr_vault_pending(x->vault) : NULL;
  size_t n = (src ? strlen(src) : 0) + 96;
  free(x->error);
  if ((x->error = malloc(n)) != NULL) {
    if (src)
      snprintf(x->error, n, "timeout_ms (%llu ms) ran out while secret %s was being read",
               (unsigned long long)x->timeout_ms, src);
    else
      snprintf(x->error, n, "timeout_ms (%llu ms) ran out before the process started",
               (unsigned long long)x->timeout_ms);
  }
  if (src) stop_reads(x, 0); /* pr_exec_vault_done follows and ends it */
}

static void timer_start(pr_exec_t *x, pr_phase_t phase, uint64_t ms) {
  if (!x->timer_open) return;
  x->phase = phase;
  uv_timer_start(&x->timer, pr_exec_on_timer, ms, 0);
}

static void timer_stop(pr_exec_t *x) {
  x->phase = PR_PHASE_NONE;
  if (x->timer_open) uv_timer_stop(&x->timer);
}

/* ---- kill ladder ---------------------------------------------------------------- */

/* The kill ladder, systemd's KillMode=control-group: SIGTERM (after SIGHUP
 * for a pty) to every process of the job, then the grace, then SIGKILL to
 * what is left. The leader's exit does not end the grace: the rest of the
 * job keeps it until it is gone (EMPTY) or the deadline passes. */
static void stop(pr_exec_t *x, int force) {
  pr_sup_t *sup = x->sup;
  if (x->state != PR_RUNNING || x->empty || x->stop == PR_STOP_KILL || x->released)
    return; /* nothing to stop */
  if (force) {
    int was = in_grace(x);
    kill_job(x);
    if (was && x->exited) start_drain(x); /* the grace timer was running: drain instead */
    return;
  }
  if (x->stop != PR_STOP_NONE) return;
  x->stop = PR_STOP_TERM;
  if (x->pty) pr_sup_send(sup, PR_W_SIGNAL, 0, x->id, SIGHUP, 0, NULL, 0);
  pr_sup_send(sup, PR_W_SIGNAL, 0, x->id, SIGTERM, 0, NULL, 0);
  x->kill_deadline = uv_now(x->ctx->loop) + x->grace_ms;
  timer_start(x, PR_PHASE_GRACE, x->grace_ms);
}

/* Each case is a cell of the cancel and force columns (engine/lifecycle.h). */
pr_cancel_result_t pr_exec_cancel(pr_exec_t *x, int force, const char *reason) {
  const pr_lc_rule_t *r = rule(x, force ? PR_LC_FORCE : PR_LC_CANCEL);
  decide_by(x, r, reason);
  switch ((pr_lc_action_t)r->action) {
  case PR_A_END: /* queued, or a worker between two processes */
    if (x->state == PR_QUEUED) pr_queue_remove(&x->runq);
    finish(x);
    break;
  case PR_A_KILL_ON_SPAWN: /* stopped as soon as the shepherd reports the spawn */
  case PR_A_ON_SPAWN:
    if (r->action == PR_A_KILL_ON_SPAWN) x->stop = PR_STOP_KILL_ON_SPAWN;
    if (x->vault && pr_vault_busy(x->vault)) stop_reads(x, 0); /* or its secrets are read */
    else probe_reaper(x);
    break;
  case PR_A_TERM: stop(x, 0); break; /* draining: the rest of the job gets the ladder */
  case PR_A_KILL:
    if (x->state == PR_RUNNING) stop(x, 1);
    break;
  default: break;
  }
  return (pr_cancel_result_t)r->result;
}

/* ---- begin / spawn results ----------------------------------------------------------- */

/* The spawn payload, with the secrets read from a store appended (built in
 * locked memory and wiped once sent). */
static int send_spawn(pr_exec_t *x) {
  pr_sup_t *sup = x->sup;
  int rc = x->spawn_msg && sup ? pr_sup_ensure(sup) : PR_ENOMEM;
  size_t extra = pr_vault_env_len(x->vault), len = x->spawn_len + extra;
  char *p = extra && rc == 0 ? pr_locked_alloc(len) : NULL;
  if (extra && rc == 0 && p == NULL) rc = PR_ENOMEM;
  if (p) {
    memcpy(p, x->spawn_msg, x->spawn_len);
    pr_vault_env(x->vault, p + x->spawn_len);
  }
  if (rc == 0)
    rc = pr_sup_send(sup, PR_W_SPAWN, (x->pty ? PR_WF_PTY : 0) | (x->stdin_pipe ? PR_WF_STDIN : 0),
                     x->id, ((int64_t)x->cols << 16) | x->rows, (int64_t)x->argc,
                     p ? p : x->spawn_msg, p ? len : x->spawn_len);
  pr_locked_free(p, len);
  return rc;
}

static void spawn_now(pr_exec_t *x);

void pr_exec_begin(pr_exec_t *x) {
  transition(x, PR_STARTING);
  if (x->target) x->sup = x->ctx->link(x->ctx, x->target, x->transport); /* NULL: ENOMEM */
  if (x->timeout_ms) timer_start(x, PR_PHASE_TIMEOUT, x->timeout_ms);    /* the start-up counts */
  if (x->vault && !pr_vault_ready(x->vault) && x->ctx->source) { /* secrets from a store first */
    x->ctx->source->read(x->ctx->source, x);
    return;
  }
  spawn_now(x);
}

void pr_exec_vault_done(pr_exec_t *x, const char *why) {
  if (x->finished) return;
  if (x->verdict < 0 && (why || pr_vault_mask(x->vault, &x->secrets) != 0)) {
    decide(x, PR_FAILED, "secret_unavailable");
    free(x->error);
    x->error = strdup(why ? why : "ENOMEM: cannot lock memory to mask the secrets read");
  }
  if (x->verdict >= 0) { /* failed, or canceled while reading */
    finish(x);
    return;
  }
  spawn_now(x);
}

/* The spawn payload holds the inline secret values (NAME=value): wiped, not
 * just freed, once it is no longer needed. */
static void drop_spawn_msg(pr_exec_t *x) {
  if (x->spawn_msg) pr_wipe(x->spawn_msg, x->spawn_len);
  free(x->spawn_msg);
  x->spawn_msg = NULL;
}

static void spawn_now(pr_exec_t *x) {
  int rc = send_spawn(x);
  if (x->ops == NULL) { /* a worker keeps it for its restarts */
    drop_spawn_msg(x);
  }
  if (rc != 0) {
    decide(x, PR_FAILED, "spawn_error");
    free(x->error);
    const char *detail = x->sup ? pr_sup_last_error(x->sup) : "";
    size_t n = strlen(detail) + 64;
    x->error = malloc(n);
    if (x->error)
      snprintf(x->error, n, "%s: %s", pr_err_name(rc), *detail ? detail : pr_strerror(rc));
    finish(x);
  }
}

/* The process runs but its descriptors never reached us (the host is out of
 * them): it fails with a reason, is killed, and ends when its exit comes. */
static void spawned_blind(pr_exec_t *x) {
  x->respawning = 0;
  decide(x, PR_FAILED, "spawn_error");
  free(x->error);
  x->error = strdup(
      "EMFILE: the host had too few free file descriptors to take the process's "
      "streams; the process was killed");
  for (int i = 0; i < PR_NSTREAM; i++) x->streams[i].eof = 1;
  kill_job(x);
}

/* The spawned column: RUN, RUN_STOP (canceled or timed out while starting),
 * or DROP (it cannot take a process: its descriptors are closed). */
void pr_exec_on_spawned(pr_exec_t *x, const pr_wire_hdr_t *h, int *fds, int nfds) {
  int k = 0;
  int act = x ? rule(x, PR_LC_SPAWNED)->action : PR_A_DROP;
  if (act == PR_A_DROP) { /* cannot happen; do not leak */
    for (int i = 0; i < nfds; i++) close(fds[i]);
    return;
  }
  x->pid = h->a;
  if (h->flags & PR_WF_FDS_LOST) { /* no streams, no pidfd: it cannot run for us */
    spawned_blind(x);
    return;
  }
  if ((h->flags & PR_WF_PIDFD) && k < nfds) x->pidfd = fds[k++];
  if (x->pty) {
    if (k < nfds) {
      int master = fds[k++];
      int wfd = fcntl(master, F_DUPFD_CLOEXEC, 3); /* input writes on their own fd */
      if (pr_stream_open(x, PR_PTY, master) == 0 && wfd >= 0) pr_exec_open_input(x, wfd);
      else if (wfd >= 0) close(wfd);
      apply_size(x); /* a resize while starting: the child sees it (SIGWINCH) */
    }
  } else {
    if (x->stdin_pipe && k < nfds) pr_exec_open_input(x, fds[k++]);
    if (k < nfds) pr_stream_open(x, PR_STDOUT, fds[k++]);
    if (k < nfds) pr_stream_open(x, PR_STDERR, fds[k++]);
  }
  for (; k < nfds; k++) close(fds[k]);
  for (int i = 0; i < PR_NSTREAM; i++) /* a stream that failed to open counts as ended */
    if (x->streams[i].ring && !x->streams[i].open) x->streams[i].eof = 1;
  int again = x->respawning;
  x->respawning = 0;
  if (!again) {
    x->started_at = pr_now_ms();
    x->started_mono = uv_now(x->ctx->loop);
    transition(x, PR_RUNNING);
  }
  pr_exec_flush_pending_input(x); /* needs state running */
  if (x->ops && x->ops->spawned) x->ops->spawned(x);
  /* RUN_STOP: canceled, or timed out, while starting: stopped now. RUN: the
   * timeout timer runs on from pr_exec_begin. */
  if (act == PR_A_RUN_STOP) stop(x, x->stop == PR_STOP_KILL_ON_SPAWN);
}

void pr_exec_on_failed(pr_exec_t *x, const pr_wire_hdr_t *h) {
  if (x == NULL || (x->state != PR_STARTING && !x->respawning)) return;
  x->respawning = 0;
  x->exited = 1;         /* no process (a worker's restart failed) */
  if (x->verdict >= 0) { /* canceled or timed out first: that is the end, with its own words */
    finish(x);
    return;
  }
  decide(x, PR_FAILED, "spawn_error");
  const char *cmd = x->argv && x->argv[0] ? x->argv[0] : "?";
  const char *what = h->b == PR_STAGE_CHDIR ? x->cwd : cmd;
  int err = (int)h->a;
  size_t n = strlen(what) + 128;
  free(x->error);
  x->error = malloc(n);
  if (x->error) {
    snprintf(x->error, n, "%s: %s: %s", pr_stage_name(h->b), what, strerror(err));
    if (x->secrets) { /* the path may hold a secret value (out of memory: no message at all) */
      char *masked = pr_secrets_scrub(x->secrets, x->error);
      free(x->error);
      x->error = masked;
    }
  }
  finish(x);
}

/* The exit column: the exit decides (EXIT) unless a verdict was decided;
 * then WAIT (the grace runs on) or DRAIN. */
void pr_exec_on_exited(pr_exec_t *x, const pr_wire_hdr_t *h) {
  if (x == NULL || x->exited) return; /* a repeated report */
  const pr_lc_rule_t *r = rule(x, PR_LC_EXIT);
  if (r->action == PR_A_NONE) return;
  x->exited = 1;
  if (h->flags & PR_WF_SIGNALED) {
    x->signal = (int)h->b;
    if (x->interrupted && x->signal == SIGINT) decide(x, PR_CANCELED, "interrupted");
    decide(x, PR_FAILED, "signal");
  } else {
    x->exit_code = (int)h->b;
    if (x->interrupted && x->exit_code == 128 + SIGINT)
      decide(x, PR_CANCELED, "interrupted"); /* a shell's way */
    decide(x, x->exit_code == 0 ? PR_COMPLETED : PR_FAILED, "exit");
  }
  if (h->flags & PR_WF_EMPTY) x->empty = 1; /* and nothing of the job is left: no grace to wait */
  if (r->action == PR_A_WAIT && !x->empty) return; /* the rest of the job keeps its grace */
  timer_stop(x);
  start_drain(x);
}

/* The empty column: NOTE, or END_GRACE (the job ended within its grace: its
 * timer stops, and the drain starts if the leader has exited). */
void pr_exec_on_empty(pr_exec_t *x) {
  if (x == NULL || x->empty) return; /* a repeated report */
  const pr_lc_rule_t *r = rule(x, PR_LC_EMPTY);
  if (r->action == PR_A_NONE) return;
  x->empty = 1;
  if (r->action == PR_A_END_GRACE) {
    timer_stop(x);
    if (x->exited) start_drain(x);
  }
}

/* The leader has exited (and the job's grace, if it is being stopped, is
 * over). Output may still be queued (a big pty backlog) or a background
 * process may hold a stream open: wait until drain_ms pass without a byte,
 * and never longer than ten times that (at least 5 s) in all. */
static void start_drain(pr_exec_t *x) {
  uint32_t drain_ms = x->ctx->drain_ms;
  uint64_t cap = (uint64_t)drain_ms * 10;
  x->drain_deadline = uv_now(x->ctx->loop) + (cap > 5000 ? cap : 5000);
  if (pr_exec_all_eof(x)) finish(x);
  else timer_start(x, PR_PHASE_DRAIN, drain_ms);
}

/* The shepherd died: its jobs lost their parent. Kill what we can still
 * reach safely (the leader's group, only while its pidfd says it is alive,
 * i.e. its pid cannot have been reused) and end x (the lost column: LOST,
 * or nothing for a queued or ended one). */
void pr_exec_on_supervisor_lost(pr_exec_t *x) {
  if (rule(x, PR_LC_LOST)->action != PR_A_LOST) return;
  if (!x->exited) pr_pidfd_kill_group(x->pidfd, (pid_t)x->pid);
  timer_stop(x); /* no grace is left to wait for */
  x->exited = 1;
  x->empty = 1;    /* nobody will say more */
  x->released = 1; /* nobody to release it to */
  free(x->reason);
  x->reason = strdup(x->sup->lost_reason); /* supervisor_lost, or a target's target_lost */
  if (x->sup->lost_msg[0]) {
    free(x->error);
    x->error =
        x->secrets ? pr_secrets_scrub(x->secrets, x->sup->lost_msg) : strdup(x->sup->lost_msg);
  }
  x->verdict = PR_FAILED;
  for (int i = 0; i < PR_NSTREAM; i++)
    if (x->streams[i].ring) pr_stream_close(&x->streams[i]);
  if (x->state == PR_STARTING) { /* no SPAWNED will come */
    finish(x);
    return;
  }
  pr_exec_maybe_finish(x);
}

/* Give the pty master the size x->cols x x->rows. 0, PR_ENOTRUNNING (no pty
 * yet, or gone) or -errno. */
static int apply_size(pr_exec_t *x) {
  if (!x->streams[PR_PTY].open) return PR_ENOTRUNNING;
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)&x->streams[PR_PTY].h.poll, &fd) != 0) return PR_ENOTRUNNING;
  struct winsize ws = {.ws_row = x->rows, .ws_col = x->cols};
  if (ioctl(fd, TIOCSWINSZ, &ws) == 0) return 0;
  if (errno != ENOTTY) return -errno;
  /* A target's pty is on the far side (the link gave us a socket): tell it there. */
  return pr_sup_send(x->sup, PR_W_RESIZE, 0, x->id, ((int64_t)x->cols << 16) | x->rows, 0, NULL, 0);
}

int pr_exec_resize(pr_exec_t *x, uint16_t cols, uint16_t rows) {
  if (!x->pty) return PR_EINVAL;
  if (x->state != PR_QUEUED && x->state != PR_STARTING && x->state != PR_RUNNING)
    return PR_ENOTRUNNING;
  x->cols = cols;
  x->rows = rows;
  /* Queued: the spawn request carries the size. Starting: the pty is made
   * with the size of the request; pr_exec_on_spawned applies this one. */
  if (x->state != PR_RUNNING) return 0;
  return apply_size(x);
}

/* ---- workers: one execution, several processes ------------------------------------ */

void pr_exec_park(pr_exec_t *x) {
  timer_stop(x);
  release(x);
  x->exited = 1;
  x->respawning = 0;
  pr_exec_close_input(x);
  if (x->pidfd >= 0) {
    close(x->pidfd);
    x->pidfd = -1;
  }
  pr_exec_drop_pending_input(x);
  x->verdict = -1;
  free(x->reason);
  x->reason = NULL;
  x->stop = PR_STOP_NONE;
  x->in_closing = 0;
  x->pid = 0;
}

void pr_exec_respawn(pr_exec_t *x) {
  for (int i = 0; i < PR_NSTREAM; i++) {
    x->streams[i].eof = 0;
    x->streams[i].paused = 0;
  }
  x->exited = 0;
  x->empty = 0;
  x->released = 0;
  x->respawning = 1;
  x->exit_code = -1;
  x->signal = 0;
  if (send_spawn(x) != 0) {
    x->respawning = 0;
    x->exited = 1;
    x->released = 1;
    for (int i = 0; i < PR_NSTREAM; i++) x->streams[i].eof = 1;
    decide(x, PR_FAILED, "spawn_error");
    finish(x);
  }
}

/* ---- the end ------------------------------------------------------------------------ */

static void finish(pr_exec_t *x) {
  pr_exec_ctx_t *c = x->ctx;
  if (x->finished) return;
  if (x->ops && x->ops->end && x->ops->end(x)) return; /* the worker restarts: still running */
  if (x->vault) {                                      /* reads end now; the values are wiped */
    stop_reads(x, 1);
    pr_vault_wipe(x->vault);
  }
  x->finished = 1;
  int was_active = x->state == PR_STARTING || x->state == PR_RUNNING;
  if (x->state == PR_RUNNING || x->pid > 0) release(x); /* a SPAWNED that lost its fds has a pid */
  for (int i = 0; i < PR_NSTREAM; i++) {
    if (x->streams[i].ring) {
      pr_stream_close(&x->streams[i]);
      pr_ring_shrink(x->streams[i].ring);
    }
  }
  x->in_open = 0;
  pr_exec_close_input(x);
  if (x->timer_open) {
    x->timer_open = 0;
    close_handle((uv_handle_t *)&x->timer);
  }
  if (x->pidfd >= 0) {
    close(x->pidfd);
    x->pidfd = -1;
  }
  pr_exec_drop_pending_input(x);
  x->ended_at = pr_now_ms();
  if (x->started_mono) x->duration_ms = uv_now(c->loop) - x->started_mono;
  int verdict = x->verdict >= 0 ? x->verdict : PR_FAILED;
  if (!allowed[x->state][verdict]) { /* e.g. an exit of a process never seen running */
    refused(x, (pr_state_t)verdict);
    verdict = PR_FAILED;
  }
  x->pid = 0;
  transition(x, (pr_state_t)verdict); /* listeners: every output event precedes this one */
  pr_secrets_free(x->secrets); /* no output follows (the audit line is written): wipe the values */
  x->secrets = NULL;
  c->ended(c, x, was_active);
}

void pr_exec_refuse(pr_exec_t *x, int err) {
  if (x->finished) return;
  decide(x, PR_FAILED, "spawn_error");
  free(x->error);
  size_t n = 128;
  if ((x->error = malloc(n)) != NULL)
    snprintf(x->error, n, "%s: %s", pr_err_name(err), pr_strerror(err));
  finish(x);
}

void pr_exec_abandon(pr_exec_t *x) {
  if (x->finished) return;
  if (x->state == PR_QUEUED) pr_queue_remove(&x->runq);
  if (x->verdict < 0) decide(x, PR_CANCELED, "engine_closed");
  if (x->state == PR_RUNNING && !x->exited)
    pr_sup_send(x->sup, PR_W_SIGNAL, 0, x->id, SIGKILL, 0, NULL, 0);
  x->exited = 1;
  finish(x);
}

void pr_exec_release(pr_exec_t *x) {
  x->dead = 1;
  if (x->handles == 0) pr_exec_free(x);
}

void pr_exec_free(pr_exec_t *x) {
  free(x->env_keys);
  pr_secrets_free(x->secrets);
  pr_vault_free(x->vault);
  for (int i = 0; i < PR_NSTREAM; i++) {
    if (x->streams[i].defer.next) pr_queue_remove(&x->streams[i].defer);
    pr_ring_unref(x->streams[i].ring);
  }
  if (x->argv)
    for (size_t i = 0; i < x->argc; i++) free(x->argv[i]);
  free(x->argv);
  free(x->label);
  free(x->owner);
  free(x->cwd);
  free(x->target);
  free(x->transport);
  free(x->shell);
  free(x->reason);
  free(x->error);
  drop_spawn_msg(x);
  if (x->ops && x->ops->free) x->ops->free(x->sub);
  if (x->pidfd >= 0) close(x->pidfd);
  pr_buf_free(&x->pending_in);
  free(x);
}
