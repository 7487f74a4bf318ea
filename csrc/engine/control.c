/* engine/control.c — the command queue, running a command, the scheduler,
 * the shepherd's reports, and the engine's way to shut down.
 *
 * Thread: see control.h. A synchronous command's memory belongs to the
 * waiting host thread: once `done` is set the engine must not touch it again.
 *
 *   CLOSE ─► cancel every live execution ─► (all ended | close_timer) ─► finish_close:
 *        abandon the rest, stop the shepherd, refuse further commands,
 *        owner->shutdown (RPC server, timers, async) ─► the loop runs dry
 */
#include "engine/control.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/worker.h"

#define PR_DEFAULT_OUTPUT_LIMIT (8u << 20)
#define PR_DEFAULT_HISTORY 1000
#define PR_DEFAULT_GRACE 2000
#define PR_DEFAULT_DRAIN 500
#define PR_DEFAULT_TARGET_IDLE 300000
#define PR_DEFAULT_MAX_QUEUED 10000
#define PR_DEFAULT_ENDED_OUTPUT ((uint64_t)64 << 20)
#define CLOSE_SHEPHERD_MS 400 /* how long close() waits for the shepherd to exit */
#define CLOSE_TARGET_MS 2000  /* ... and for each target's link (its relay kills, then exits) */

#define CONTROL_OF(xcp) ((pr_control_t *)((char *)(xcp)-offsetof(pr_control_t, xc)))

static void finish_close(pr_control_t *c);
static void on_async(uv_async_t *h);

uint64_t pr_control_next_id(pr_control_t *c) {
  return __atomic_fetch_add(&c->next_id, 1, __ATOMIC_RELAXED);
}

uint64_t pr_control_next_rid(pr_control_t *c) {
  return __atomic_add_fetch(&c->next_rid, 1, __ATOMIC_RELAXED);
}

/* ---- the queued bound (per session) ------------------------------------------------------ */

int pr_control_admit(pr_control_t *c, uint64_t session) {
  if (session == 0) {
    uint32_t n = __atomic_load_n(&c->host_waiting, __ATOMIC_RELAXED);
    do {
      if (n >= c->max_queued) return PR_EBUSY;
    } while (!__atomic_compare_exchange_n(&c->host_waiting, &n, n + 1, 1, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    return 0;
  }
  uintptr_t n = (uintptr_t)pr_idmap_get(&c->waiting, session);
  if (n >= c->max_queued) return PR_EBUSY;
  return pr_idmap_put(&c->waiting, session, (void *)(n + 1));
}

void pr_control_unadmit(pr_control_t *c, uint64_t session) {
  if (session == 0) {
    __atomic_sub_fetch(&c->host_waiting, 1, __ATOMIC_RELAXED);
    return;
  }
  uintptr_t n = (uintptr_t)pr_idmap_get(&c->waiting, session);
  if (n > 1) pr_idmap_put(&c->waiting, session, (void *)(n - 1)); /* replaces: cannot fail */
  else pr_idmap_del(&c->waiting, session);
}

/* `x` begins or ends: it no longer counts against its session's bound. */
static void unwait(pr_control_t *c, pr_exec_t *x) {
  if (!x->waiting) return;
  x->waiting = 0;
  pr_control_unadmit(c, x->session);
}

/* ---- the scheduler --------------------------------------------------------------------- */

/* Begin queued executions while running < max_running; not during a batch
 * (on_async, sup_lost), which schedules once it is done. */
static void schedule(pr_control_t *c) {
  if (c->batch) return;
  while (!pr_queue_empty(&c->queued) && !c->xc.closing &&
         (c->max_running == 0 || c->running < c->max_running)) {
    pr_queue_t *q = pr_queue_head(&c->queued);
    pr_queue_remove(q);
    c->running++;
    pr_exec_t *x = PR_QUEUE_DATA(q, pr_exec_t, runq);
    unwait(c, x);
    pr_exec_begin(x);
  }
}

/* The end of a batch (or of a run of starts and cancels inside on_async's):
 * apply retention and begin what is queued. */
static void batch_settle(pr_control_t *c) {
  if (c->xc.closing) return;
  if (c->ended_in_batch) pr_registry_prune(&c->reg);
  c->ended_in_batch = 0;
  schedule(c);
}

/* Closing, and nothing is live any more: shut down. */
static void maybe_closed(pr_control_t *c) {
  if (!c->xc.closing) return;
  pr_queue_t *q;
  PR_QUEUE_FOREACH(q, &c->reg.order) {
    if (!PR_QUEUE_DATA(q, pr_exec_t, order)->finished) return;
  }
  finish_close(c);
}

/* ctx.ended: an execution entered its terminal state. */
static void ended(pr_exec_ctx_t *xc, pr_exec_t *x, int was_active) {
  pr_control_t *c = CONTROL_OF(xc);
  unwait(c, x); /* ended while queued or held */
  c->reg.nterminal++;
  pr_registry_ended(&c->reg, x); /* the ended-output budget */
  if (was_active) c->running--;
  if (!xc->closing) {
    if (c->batch) { /* the batch that ended it prunes and schedules once done */
      c->ended_in_batch = 1;
      return;
    }
    pr_registry_prune(&c->reg);
    schedule(c);
  } else {
    maybe_closed(c);
  }
}

/* ---- the shepherd's reports --------------------------------------------------------- */

/* The execution of a shepherd job: one of the registry, or a hidden one
 * reading a secret (engine/secret_source.h). */
static pr_exec_t *job(pr_control_t *c, uint64_t id) {
  pr_exec_t *x = pr_source_job(&c->source, id);
  return x ? x : pr_registry_find(&c->reg, id, 0);
}

static void sup_spawned(void *arg, const pr_wire_hdr_t *h, int *fds, int nfds) {
  pr_exec_on_spawned(job(arg, h->job), h, fds, nfds);
}

static void sup_failed(void *arg, const pr_wire_hdr_t *h) {
  pr_exec_on_failed(job(arg, h->job), h);
}

static void sup_exited(void *arg, const pr_wire_hdr_t *h) {
  pr_exec_on_exited(job(arg, h->job), h);
}

static void sup_empty(void *arg, const pr_wire_hdr_t *h) {
  pr_control_t *c = arg;
  pr_exec_on_empty(pr_registry_find(&c->reg, h->job, 0));
}

/* Ending an execution applies retention, which may remove records from the
 * list being walked here (the one just ended, when it is the oldest): hold
 * retention and scheduling until every execution has been told. */
static void sup_lost(void *arg, pr_sup_t *s) {
  pr_control_t *c = arg;
  pr_queue_t *q;
  c->batch++;
  PR_QUEUE_FOREACH(q, &c->reg.order) {
    pr_exec_t *x = PR_QUEUE_DATA(q, pr_exec_t, order);
    if (x->sup == s) pr_exec_on_supervisor_lost(x); /* a target's link loses only its own */
  }
  c->batch--;
  batch_settle(c);
}

const pr_sup_ops_t pr_control_sup_ops = {sup_spawned, sup_failed, sup_exited, sup_empty, sup_lost};

/* ---- running a command ------------------------------------------------------------------ */

static void on_close_timer(uv_timer_t *t) { finish_close((pr_control_t *)t->data); }

static void run_start(pr_control_t *c, pr_cmd_t *cmd) {
  pr_exec_t *x = cmd->exec;
  cmd->exec = NULL;
  x->waiting = 1; /* admitted by whoever submitted it (pr_control_admit) */
  pr_exec_attach(x, &c->xc);
  int rc = pr_registry_add(&c->reg, x);
  pr_exec_enqueued(x); /* the first event of every execution, for every listener */
  if (rc != 0) {
    pr_exec_refuse(x, rc);
    return;
  }
  if (c->xc.closing) {
    pr_exec_cancel(x, 1, "engine_closed");
    return;
  }
  if (x->held) return; /* queued, off the run queue until PR_CMD_RELEASE */
  pr_queue_push(&c->queued, &x->runq);
  schedule(c);
}

/* A held execution takes its turn at the queue's tail. */
static int run_release(pr_control_t *c, pr_exec_t *x) {
  if (x == NULL) return PR_ENOENT;
  if (x->finished || x->verdict >= 0) return PR_ENOTRUNNING;
  if (!x->held) return PR_EINVAL;
  x->held = 0;
  pr_queue_push(&c->queued, &x->runq);
  schedule(c);
  return 0;
}

static void run_list(pr_control_t *c, pr_cmd_t *cmd) {
  size_t cap = c->reg.count ? c->reg.count : 1, n = 0;
  pr_record_t **v = malloc(cap * sizeof(*v));
  if (v == NULL) {
    cmd->rc = PR_ENOMEM;
    return;
  }
  pr_queue_t *q;
  PR_QUEUE_FOREACH(q, &c->reg.order) {
    pr_exec_t *x = PR_QUEUE_DATA(q, pr_exec_t, order);
    if (cmd->session && x->session != cmd->session) continue;
    if (cmd->a >= 0 && (int64_t)x->state != cmd->a) continue;
    pr_record_t *r = pr_exec_snapshot_brief(x);
    if (r == NULL) {
      pr_records_free(v, n);
      cmd->rc = PR_ENOMEM;
      return;
    }
    v[n++] = r;
  }
  cmd->out = v;
  cmd->n = n;
}

static void run_read(pr_exec_t *x, pr_cmd_t *cmd) {
  if (x == NULL) {
    cmd->rc = PR_ENOENT;
    return;
  }
  if (cmd->a < 0 || cmd->a >= PR_NSTREAM || x->streams[cmd->a].ring == NULL) {
    cmd->rc = PR_ENOSTREAM;
    return;
  }
  char *data;
  size_t len;
  cmd->rc = pr_ring_read(x->streams[cmd->a].ring, cmd->u, (size_t)cmd->b, &data, &len, &cmd->r1,
                         &cmd->r2);
  cmd->out = data;
  cmd->n = len;
  if (cmd->rc == 0 && cmd->want_ring) {
    pr_ring_ref(x->streams[cmd->a].ring);
    cmd->ring = x->streams[cmd->a].ring;
  }
}

static int cancel_request(pr_control_t *c, uint64_t session, uint64_t rid) {
  pr_queue_t *q;
  PR_QUEUE_FOREACH(q, &c->reg.order) {
    pr_exec_t *x = PR_QUEUE_DATA(q, pr_exec_t, order);
    if (pr_worker_holds(x, rid)) return pr_worker_cancel_request(x, session, rid);
  }
  return PR_ENOENT;
}

static void run_close(pr_control_t *c) {
  c->xc.closing = 1;
  pr_queue_t *q = pr_queue_head(&c->reg.order);
  while (q != &c->reg.order) {
    pr_exec_t *x = PR_QUEUE_DATA(q, pr_exec_t, order);
    q = q->next;
    if (!x->finished) pr_exec_cancel(x, 0, "engine_closed");
  }
  /* Bounded: the largest grace, half a second for draining, and at most
   * CLOSE_SHEPHERD_MS for the shepherd to exit (finish_close). */
  uint64_t bound = c->kill_grace_ms;
  PR_QUEUE_FOREACH(q, &c->reg.order) {
    pr_exec_t *x = PR_QUEUE_DATA(q, pr_exec_t, order);
    if (!x->finished && x->grace_ms > bound) bound = x->grace_ms;
  }
  uv_timer_start(&c->close_timer, on_close_timer, bound + 500, 0);
  maybe_closed(c);
}

/* The commands about one execution, found by cmd->id. */
static int about_one_id(pr_cmd_type_t t) {
  switch (t) {
  case PR_CMD_CANCEL:
  case PR_CMD_DELETE:
  case PR_CMD_INPUT:
  case PR_CMD_CLOSE_STDIN:
  case PR_CMD_RESIZE:
  case PR_CMD_GET:
  case PR_CMD_READ:
  case PR_CMD_WREQUEST:
  case PR_CMD_RELEASE:
  case PR_CMD_WRESTART: return 1;
  default: return 0;
  }
}

void pr_control_run(pr_control_t *c, pr_cmd_t *cmd) {
  pr_exec_t *x = NULL;
  pr_registry_t *reg = &c->reg;
  cmd->rc = 0;
  if (about_one_id(cmd->type)) x = pr_registry_find(reg, cmd->id, cmd->session);
  switch (cmd->type) {
  case PR_CMD_START: run_start(c, cmd); break;
  case PR_CMD_CANCEL:
    cmd->rc = x ? (int)pr_exec_cancel(x, (int)cmd->a, cmd->data ? cmd->data : "canceled")
                : (int)PR_CANCEL_NOT_FOUND;
    break;
  case PR_CMD_RELEASE: cmd->rc = run_release(c, x); break;
  case PR_CMD_DELETE:
    if (x == NULL) cmd->rc = PR_DELETE_NOT_FOUND;
    else if (!x->finished) cmd->rc = PR_ACTIVE_PROCESS_CONFLICT;
    else {
      pr_registry_remove(reg, x);
      cmd->rc = PR_DELETED;
      pr_notify_purged(c->xc.ls); /* the history file shrinks too */
    }
    break;
  case PR_CMD_INPUT:
    cmd->rc = x ? pr_exec_input(x, cmd->data, cmd->len) : PR_ENOENT;
    /* A ^C the user types into a pty becomes the tty's SIGINT: a death by it
     * is then the user's interrupt, not a failure (pr_exec_on_exited). */
    if (cmd->rc == 0 && x->pty && memchr(cmd->data, 3, cmd->len) != NULL) x->interrupted = 1;
    break;
  case PR_CMD_CLOSE_STDIN: cmd->rc = x ? pr_exec_close_stdin(x) : PR_ENOENT; break;
  case PR_CMD_RESIZE:
    cmd->rc = x ? pr_exec_resize(x, (uint16_t)cmd->a, (uint16_t)cmd->b) : PR_ENOENT;
    break;
  case PR_CMD_GET:
    if (x == NULL) cmd->rc = PR_ENOENT;
    else if ((cmd->out = pr_exec_snapshot(x)) == NULL) cmd->rc = PR_ENOMEM;
    break;
  case PR_CMD_LIST: run_list(c, cmd); break;
  case PR_CMD_PURGE:
    cmd->n = pr_registry_purge(reg, cmd->session, cmd->u);
    if (cmd->n) pr_notify_purged(c->xc.ls); /* the history file shrinks too */
    break;
  case PR_CMD_READ: run_read(x, cmd); break;
  case PR_CMD_RESUME:
    if ((x = pr_registry_find(reg, cmd->id, 0)) != NULL) pr_exec_resume(x);
    break;
  case PR_CMD_HOLD_OUTPUT:
    if ((x = pr_registry_find(reg, cmd->id, cmd->session)) != NULL && !x->finished)
      pr_exec_hold_output(x, cmd->a != 0);
    break;
  case PR_CMD_CALL: cmd->fn(c->owner, cmd->out); break;
  case PR_CMD_WREQUEST:
    pr_worker_request(&c->xc, x, cmd->session, cmd->id, cmd->u, cmd->data, cmd->len,
                      (uint64_t)cmd->a);
    break;
  case PR_CMD_WCANCEL: cmd->rc = cancel_request(c, cmd->session, cmd->u); break;
  case PR_CMD_WRESTART: cmd->rc = x ? pr_worker_restart(x) : PR_ENOENT; break;
  case PR_CMD_CLOSE: run_close(c); break;
  }
}

void pr_control_session_closed(pr_control_t *c, uint64_t session) {
  pr_queue_t *q;
  PR_QUEUE_FOREACH(q, &c->reg.order)
  pr_worker_session_closed(PR_QUEUE_DATA(q, pr_exec_t, order), session);
}

/* ---- the command queue ------------------------------------------------------------------ */

/* Answer a synchronous command (done = 1) or free an asynchronous one. */
static void answer(pr_control_t *c, pr_cmd_t *cmd, int closed) {
  if (cmd->sync) {
    pthread_mutex_lock(&c->mu);
    cmd->closed = closed;
    cmd->done = 1;
    pthread_cond_broadcast(&c->cond);
    pthread_mutex_unlock(&c->mu);
  } else {
    if (cmd->exec) pr_exec_free(cmd->exec);
    free(cmd);
  }
}

/* Does this host command have to wait for the history (control.h)? The
 * history's records are all terminal, of no session, and not yet in the
 * registry. */
static int needs_history(pr_control_t *c, const pr_cmd_t *cmd) {
  if (!c->history_loading || cmd->session) return 0;
  switch (cmd->type) {
  case PR_CMD_LIST: return cmd->a < 0 || pr_state_terminal((pr_state_t)cmd->a);
  case PR_CMD_PURGE: return 1;
  default: return about_one_id(cmd->type) && pr_registry_find(&c->reg, cmd->id, 0) == NULL;
  }
}

void pr_control_history_loading(pr_control_t *c) { c->history_loading = 1; }

void pr_control_history_loaded(pr_control_t *c) {
  c->history_loading = 0;
  while (!pr_queue_empty(&c->parked)) {
    pr_queue_t *q = pr_queue_head(&c->parked);
    pr_queue_remove(q);
    pr_cmd_t *cmd = PR_QUEUE_DATA(q, pr_cmd_t, node);
    pr_control_run(c, cmd);
    answer(c, cmd, 0);
  }
}

/* A batch of commands. The starts in it stay queued (no SPAWN goes out)
 * until a command other than a start or a cancel comes, or the batch ends:
 * a cancel in the same batch as its start ends it `canceled` from `queued`
 * (engine/lifecycle.h, row QUEUED), and no process is ever started. Every
 * other command sees the starts before it begun, as it did one at a time. */
static void on_async(uv_async_t *h) {
  pr_control_t *c = (pr_control_t *)h->data;
  pr_queue_t local;
  pr_queue_init(&local);
  pthread_mutex_lock(&c->mu);
  pr_queue_move(&c->cmds, &local);
  c->wake_owed = 0; /* whatever waited is taken now */
  pthread_mutex_unlock(&c->mu);
  c->batch++;
  while (!pr_queue_empty(&local)) {
    pr_queue_t *q = pr_queue_head(&local);
    pr_queue_remove(q);
    pr_cmd_t *cmd = PR_QUEUE_DATA(q, pr_cmd_t, node);
    if (c->xc.closing == 2) { /* shut down while this batch ran */
      answer(c, cmd, 1);
      continue;
    }
    if (needs_history(c, cmd)) {
      pr_queue_push(&c->parked, &cmd->node);
      continue;
    }
    if (cmd->type != PR_CMD_START && cmd->type != PR_CMD_CANCEL) {
      c->batch--;
      batch_settle(c);
      c->batch++;
    }
    pr_control_run(c, cmd);
    answer(c, cmd, 0);
  }
  c->batch--;
  batch_settle(c);
}

/* Wake the engine thread for what cmds holds (under mu: the handle cannot be
 * closing yet). */
static void wake(pr_control_t *c) {
  uv_async_send(&c->async);
  c->wakeups++;
  c->wake_owed = 0;
}

int pr_control_flush(pr_control_t *c) {
  pthread_mutex_lock(&c->mu);
  int owed = c->wake_owed && !c->loop_done;
  if (owed) wake(c);
  pthread_mutex_unlock(&c->mu);
  return owed;
}

uint64_t pr_control_wakeups(pr_control_t *c) {
  pthread_mutex_lock(&c->mu);
  uint64_t n = c->wakeups;
  pthread_mutex_unlock(&c->mu);
  return n;
}

int pr_control_submit(pr_control_t *c, pr_cmd_t *cmd) {
  pthread_mutex_lock(&c->mu);
  if (c->loop_done) {
    pthread_mutex_unlock(&c->mu);
    if (!cmd->sync) {
      if (cmd->exec) pr_exec_free(cmd->exec);
      free(cmd);
    }
    return PR_ECLOSED;
  }
  /* A queue that already holds commands has a wake-up on its way (sent when
   * the first of them came, and the engine moves the whole queue under mu):
   * a burst of starts costs one wake-up of the engine thread, not one each.
   * A deferred START sends none: the host flushes once per turn of its loop
   * (pr_control_flush), and any other command takes the wake-up along. */
  int was_empty = pr_queue_empty(&c->cmds);
  pr_queue_push(&c->cmds, &cmd->node);
  if (cmd->type == PR_CMD_START && cmd->a == 1) {
    if (was_empty) c->wake_owed = 1;
  } else if (was_empty || c->wake_owed) {
    wake(c);
  }
  int rc = 0;
  if (cmd->sync) {
    /* The engine answers every command it dequeues, also while shutting down. */
    while (!cmd->done) pthread_cond_wait(&c->cond, &c->mu);
    rc = cmd->closed ? PR_ECLOSED : 0;
  }
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* Everything is over (or the bound passed): end what is left, stop the
 * shepherd, refuse further commands, and let the owner close its handles;
 * the loop then runs dry and the thread ends. */
static void finish_close(pr_control_t *c) {
  if (c->xc.closing == 2) return;
  c->xc.closing = 2;
  /* The shepherd kills every job and exits; one that does not (stopped, hung)
   * is killed, and the jobs it held are killed here through their pidfds. */
  int lost = pr_sup_shutdown(c->xc.sup, 1, CLOSE_SHEPHERD_MS) != 0; /* grace was given */
  pr_targets_shutdown(c->targets, 1, CLOSE_TARGET_MS);
  pr_queue_t *q;
  PR_QUEUE_FOREACH(q, &c->reg.order) {
    pr_exec_t *x = PR_QUEUE_DATA(q, pr_exec_t, order);
    if (lost && x->sup == c->xc.sup) pr_exec_on_supervisor_lost(x);
    pr_exec_abandon(x);
  }
  /* Refuse further commands before the async handle goes away, and answer
   * the ones already queued. */
  pr_queue_t local;
  pr_queue_init(&local);
  pthread_mutex_lock(&c->mu);
  c->loop_done = 1;
  pr_queue_move(&c->cmds, &local);
  pthread_mutex_unlock(&c->mu);
  while (!pr_queue_empty(&local)) {
    pr_queue_t *k = pr_queue_head(&local);
    pr_queue_remove(k);
    answer(c, PR_QUEUE_DATA(k, pr_cmd_t, node), 1);
  }
  c->shutdown(c->owner);
}

/* Every so often while a target's link is up: close the ones idle for target_idle_ms;
 * the timer stops once none is up (the next execution on a target starts it again). */
static void on_idle_tick(uv_timer_t *t) {
  pr_control_t *c = t->data;
  if (pr_targets_close_idle(c->targets, uv_now(t->loop), c->target_idle_ms) == 0) uv_timer_stop(t);
}

/* ctx.link: the link of a target, made on first use. */
static pr_sup_t *target_link(pr_exec_ctx_t *xc, const char *name, const char *transport) {
  pr_control_t *c = CONTROL_OF(xc);
  pr_sup_t *s = pr_targets_link(&c->targets, xc->sup, name, transport, &pr_control_sup_ops, c);
  if (s && !uv_is_active((uv_handle_t *)&c->idle_timer)) {
    uint64_t every = c->target_idle_ms / 4 < 1000 ? c->target_idle_ms / 4 + 1 : 1000;
    uv_timer_start(&c->idle_timer, on_idle_tick, every, every);
  }
  return s;
}

/* ---- life -------------------------------------------------------------------------------- */

int pr_control_init(pr_control_t *c, uv_loop_t *loop, const pr_engine_opts_t *o, pr_sup_t *sup,
                    pr_listeners_t *ls, void (*shutdown)(void *), void *owner) {
  memset(c, 0, sizeof(*c));
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cond, NULL);
  pr_queue_init(&c->cmds);
  pr_queue_init(&c->parked);
  pr_queue_init(&c->queued);
  pr_targets_confs_init(&c->confs);
  pr_queue_init(&c->reg.order);
  c->xc.loop = loop;
  c->xc.sup = sup;
  c->xc.ls = ls;
  c->xc.drain_ms = o->drain_ms ? o->drain_ms : PR_DEFAULT_DRAIN;
  c->xc.ended = ended;
  c->xc.link = target_link;
  c->xc.source = &c->source.reader;
  pr_source_init(&c->source, &c->xc, o->secret_timeout_ms);
  c->max_running = o->max_running;
  c->kill_grace_ms = o->kill_grace_ms ? o->kill_grace_ms : PR_DEFAULT_GRACE;
  c->output_limit = o->output_limit ? o->output_limit : PR_DEFAULT_OUTPUT_LIMIT;
  /* No output_memory asked: the whole output_limit stays in memory, no spill
   * file (a bare host's back-pressure window is then the whole ring, and a
   * flood is never written out and read back). NULL also when out of memory
   * or with no HOME to name the default directory. */
  c->spill = o->output_memory ? pr_spill_new(o->spill_dir, o->output_memory) : NULL;
  c->max_queued = o->max_queued ? o->max_queued : PR_DEFAULT_MAX_QUEUED;
  pr_idmap_init(&c->waiting);
  c->next_id = 1;
  c->owner = owner;
  c->shutdown = shutdown;
  int rc = pr_registry_init(
      &c->reg, &c->xc, o->history_limit ? o->history_limit : PR_DEFAULT_HISTORY, o->history_age_ms);
  c->reg.ended_max = o->ended_output_max ? o->ended_output_max : PR_DEFAULT_ENDED_OUTPUT;
  if (rc == 0) rc = uv_async_init(loop, &c->async, on_async);
  c->async.data = c;
  if (rc == 0) rc = uv_timer_init(loop, &c->close_timer);
  c->close_timer.data = c;
  if (rc == 0) rc = uv_timer_init(loop, &c->idle_timer);
  c->idle_timer.data = c;
  c->target_idle_ms = o->target_idle_ms ? o->target_idle_ms : PR_DEFAULT_TARGET_IDLE;
  return rc;
}

void pr_control_close_handles(pr_control_t *c) {
  uv_handle_t *h[] = {(uv_handle_t *)&c->async, (uv_handle_t *)&c->close_timer,
                      (uv_handle_t *)&c->idle_timer};
  for (int i = 0; i < 3; i++)
    if (h[i]->loop && !uv_is_closing(h[i])) uv_close(h[i], NULL);
  pr_registry_close(&c->reg);
}

void pr_control_free_registry(pr_control_t *c) {
  pr_registry_destroy(&c->reg);
  pr_source_destroy(&c->source);
  pr_idmap_destroy(&c->waiting);
  pr_targets_destroy(&c->targets);
}

void pr_control_destroy(pr_control_t *c) {
  pr_targets_confs_free(&c->confs);
  pr_spill_unref(c->spill); /* rings still held elsewhere keep their own reference */
  c->spill = NULL;
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cond);
}
