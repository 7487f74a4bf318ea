/* engine.c — the engine thread, its command and event queues, the C API.
 *
 * Thread: functions named pr_engine_* run on the HOST thread; everything
 * static below "engine thread" runs on the engine's own thread.
 *
 *   host: pr_engine_cancel(...) ── push cmd, uv_async_send ──► on_async
 *         waits on cond ◄──────────────── done = 1, broadcast ──┘
 *   host: pr_engine_poll ◄── events (evmu) ◄── pr_emit_event (eventfd write when it was empty)
 *
 * An execution is built on the host thread (argv, env and the spawn payload
 * are prepared there, where the host's environment can be read safely) and
 * handed over whole in a START command; from then on only the engine
 * thread touches it. RPC starts (rpc_methods.c) use the same builder,
 * pr_engine_build_exec, on the engine thread with e->rpc_env, the snapshot
 * of the environment pr_engine_new took, and run the same pr_engine_run_cmd.
 */

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/clock.h"
#include "engine/exec.h"
#include "engine/registry.h"
#include "rpc/rpc.h"
#include "store/journal.h"
#include "engine/secrets.h"
#include "engine/supervisor.h"
#include "engine/worker.h"

extern char **environ;

#define PR_DEFAULT_OUTPUT_LIMIT (8u << 20)
#define PR_DEFAULT_HISTORY 1000
#define PR_DEFAULT_GRACE 2000
#define PR_DEFAULT_DRAIN 500
#define PR_MAX_SPAWN_BYTES (16u << 20)

/* ---- events (engine thread pushes, host pops) ------------------------------------ */

void pr_emit_event(pr_engine_t *e, pr_event_t *ev) {
  pr_queue_t *node = (pr_queue_t *)ev->priv;
  pthread_mutex_lock(&e->evmu);
  int was_empty = pr_queue_empty(&e->events);
  pr_queue_push(&e->events, node);
  e->nevents++;
  if (was_empty) {
    uint64_t one = 1;
    ssize_t w = write(e->wakefd, &one, sizeof(one));
    (void)w;
  }
  pthread_mutex_unlock(&e->evmu);
}

void pr_event_free(pr_event_t *ev) {
  if (ev == NULL) return;
  free(ev->reason);
  free(ev->error);
  free(ev->data);
  pr_ring_unref((pr_ring_t *)ev->ring);
  if (ev->chan) pr_worker_chan_done(ev->chan); /* a chunk consumed: back-pressure count */
  free(ev);
}

/* ---- engine thread ------------------------------------------------------------------- */

static void finish_close(pr_engine_t *e);
static void on_close_timer(uv_timer_t *t);

static pr_exec_t *find_cmd_exec(pr_engine_t *e, pr_cmd_t *c) {
  return pr_registry_find(e, c->id, c->session);
}

static void run_start(pr_engine_t *e, pr_cmd_t *c) {
  pr_exec_t *x = c->exec;
  c->exec = NULL;
  x->eng = e;
  if (uv_timer_init(&e->loop, &x->timer) == 0) {
    x->timer.data = x;
    x->timer_open = 1;
    x->handles++;
  }
  pr_registry_add(e, x);
  x->state = PR_QUEUED;
  pr_event_t *ev = calloc(1, sizeof(*ev));
  if (ev) { /* the first event of every execution: queued, no previous state */
    ev->type = PR_EV_STATE;
    ev->id = x->id;
    ev->state = PR_QUEUED;
    ev->prev = PR_NSTATE;
    ev->exit_code = -1;
    pr_emit_event(e, ev);
  }
  if (e->journal) pr_journal_on_state(x, PR_NSTATE); /* history and audit: queued */
  if (e->closing) {
    pr_exec_cancel(x, 1, "engine_closed");
    return;
  }
  pr_queue_push(&e->queued, &x->runq);
  pr_exec_schedule(e);
}

static void run_list(pr_engine_t *e, pr_cmd_t *c) {
  size_t cap = e->count ? e->count : 1, n = 0;
  pr_record_t **v = malloc(cap * sizeof(*v));
  if (v == NULL) {
    c->rc = PR_ENOMEM;
    return;
  }
  pr_queue_t *q;
  PR_QUEUE_FOREACH(q, &e->order) {
    pr_exec_t *x = PR_QUEUE_DATA(q, pr_exec_t, order);
    if (c->session && x->session != c->session) continue;
    if (c->a >= 0 && (int64_t)x->state != c->a) continue;
    pr_record_t *r = pr_exec_snapshot_brief(x);
    if (r == NULL) {
      pr_records_free(v, n);
      c->rc = PR_ENOMEM;
      return;
    }
    v[n++] = r;
  }
  c->out = v;
  c->n = n;
}

void pr_engine_run_cmd(pr_engine_t *e, pr_cmd_t *c) {
  pr_exec_t *x;
  c->rc = 0;
  switch (c->type) {
  case PR_CMD_START: run_start(e, c); break;
  case PR_CMD_CANCEL:
    x = find_cmd_exec(e, c);
    c->rc = x ? (int)pr_exec_cancel(x, (int)c->a, "canceled") : (int)PR_CANCEL_NOT_FOUND;
    break;
  case PR_CMD_DELETE:
    x = find_cmd_exec(e, c);
    if (x == NULL) c->rc = PR_DELETE_NOT_FOUND;
    else if (!x->finished) c->rc = PR_ACTIVE_PROCESS_CONFLICT;
    else {
      pr_registry_remove(e, x);
      c->rc = PR_DELETED;
      pr_journal_compact(e); /* the history file shrinks too */
    }
    break;
  case PR_CMD_INPUT:
    x = find_cmd_exec(e, c);
    c->rc = x ? pr_exec_input(x, c->data, c->len) : PR_ENOENT;
    break;
  case PR_CMD_CLOSE_STDIN:
    x = find_cmd_exec(e, c);
    c->rc = x ? pr_exec_close_stdin(x) : PR_ENOENT;
    break;
  case PR_CMD_RESIZE:
    x = find_cmd_exec(e, c);
    c->rc = x ? pr_exec_resize(x, (uint16_t)c->a, (uint16_t)c->b) : PR_ENOENT;
    break;
  case PR_CMD_GET:
    x = find_cmd_exec(e, c);
    if (x == NULL) c->rc = PR_ENOENT;
    else if ((c->out = pr_exec_snapshot(x)) == NULL) c->rc = PR_ENOMEM;
    break;
  case PR_CMD_LIST: run_list(e, c); break;
  case PR_CMD_PURGE:
    c->n = pr_registry_purge(e, c->session, c->u);
    if (c->n) pr_journal_compact(e); /* the history file shrinks too */
    break;
  case PR_CMD_READ: {
    x = find_cmd_exec(e, c);
    if (x == NULL) {
      c->rc = PR_ENOENT;
      break;
    }
    if (c->a < 0 || c->a >= PR_NSTREAM || x->streams[c->a].ring == NULL) {
      c->rc = PR_ENOSTREAM;
      break;
    }
    char *data;
    size_t len;
    c->rc = pr_ring_read(x->streams[c->a].ring, c->u, (size_t)c->b, &data, &len, &c->r1, &c->r2);
    c->out = data;
    c->n = len;
    break;
  }
  case PR_CMD_RESUME:
    x = pr_registry_find(e, c->id, 0);
    if (x) pr_exec_resume(x);
    break;
  case PR_CMD_CALL: c->fn(e, c->out); break;
  case PR_CMD_WREQUEST:
    pr_worker_request(e, c->session, c->id, c->u, c->data, c->len, (uint64_t)c->a);
    break;
  case PR_CMD_WCANCEL: c->rc = pr_worker_cancel_request(e, c->session, c->u); break;
  case PR_CMD_WRESTART: c->rc = pr_worker_restart(e, c->session, c->id); break;
  case PR_CMD_CLOSE: {
    e->closing = 1;
    pr_queue_t *q = pr_queue_head(&e->order);
    while (q != &e->order) {
      x = PR_QUEUE_DATA(q, pr_exec_t, order);
      q = q->next;
      if (!x->finished) pr_exec_cancel(x, 0, "engine_closed");
    }
    /* Bounded: the largest grace plus a second for draining. */
    uint64_t bound = e->opts.kill_grace_ms;
    PR_QUEUE_FOREACH(q, &e->order) {
      x = PR_QUEUE_DATA(q, pr_exec_t, order);
      if (!x->finished && x->grace_ms > bound) bound = x->grace_ms;
    }
    uv_timer_start(&e->close_timer, on_close_timer, bound + 1000, 0);
    pr_engine_on_finished(e);
    break;
  }
  }
}

/* Answer a synchronous command (done = 1) or free an asynchronous one. A sync
 * command's memory belongs to the waiting host thread: once done is set the
 * engine must not touch it again. */
static void answer(pr_engine_t *e, pr_cmd_t *c, int closed) {
  if (c->sync) {
    pthread_mutex_lock(&e->mu);
    c->closed = closed;
    c->done = 1;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->mu);
  } else {
    if (c->exec) pr_exec_free(c->exec);
    free(c);
  }
}

static void on_async(uv_async_t *h) {
  pr_engine_t *e = (pr_engine_t *)h->data;
  pr_queue_t local;
  pr_queue_init(&local);
  pthread_mutex_lock(&e->mu);
  pr_queue_move(&e->cmds, &local);
  pthread_mutex_unlock(&e->mu);
  while (!pr_queue_empty(&local)) {
    pr_queue_t *q = pr_queue_head(&local);
    pr_queue_remove(q);
    pr_cmd_t *c = PR_QUEUE_DATA(q, pr_cmd_t, node);
    if (e->closing == 2) { /* shut down while this batch ran */
      answer(e, c, 1);
      continue;
    }
    pr_engine_run_cmd(e, c);
    answer(e, c, 0);
  }
}

void pr_engine_on_finished(pr_engine_t *e) {
  if (!e->closing) return;
  pr_queue_t *q;
  PR_QUEUE_FOREACH(q, &e->order) {
    if (!PR_QUEUE_DATA(q, pr_exec_t, order)->finished) return;
  }
  finish_close(e);
}

static void close_any(uv_handle_t *h, void *arg) {
  if (uv_is_closing(h)) return;
  /* Execution handles carry their execution in data; engine handles carry
   * the engine (or nothing). */
  uv_close(h, h->data && h->data != arg ? pr_exec_handle_closed : NULL);
}

/* Everything is over (or the bound passed): end what is left, stop the
 * shepherd, close every handle; the loop then runs dry and the thread ends. */
static void finish_close(pr_engine_t *e) {
  if (e->closing == 2) return;
  e->closing = 2;
  pr_queue_t *q;
  PR_QUEUE_FOREACH(q, &e->order) pr_exec_abandon(PR_QUEUE_DATA(q, pr_exec_t, order));
  pr_sup_shutdown(e, 200);
  /* Refuse further commands before the async handle goes away, and answer
   * the ones already queued. */
  pr_queue_t local;
  pr_queue_init(&local);
  pthread_mutex_lock(&e->mu);
  e->loop_done = 1;
  pr_queue_move(&e->cmds, &local);
  pthread_mutex_unlock(&e->mu);
  while (!pr_queue_empty(&local)) {
    pr_queue_t *k = pr_queue_head(&local);
    pr_queue_remove(k);
    answer(e, PR_QUEUE_DATA(k, pr_cmd_t, node), 1);
  }
  if (e->rpc) pr_rpc_close(e); /* its handles are not executions': close them first */
  uv_walk(&e->loop, close_any, e);
}

static void on_close_timer(uv_timer_t *t) { finish_close((pr_engine_t *)t->data); }

static void *thread_main(void *arg) {
  pr_engine_t *e = (pr_engine_t *)arg;
  pr_registry_prune(e); /* arms the age timer for records loaded from the history */
  uv_run(&e->loop, UV_RUN_DEFAULT);
  /* Every execution's handles are closed: free the registry here, on the
   * thread that owns it. */
  pr_registry_destroy(e);
  uv_loop_close(&e->loop);
  return NULL;
}

/* ---- host thread: lifecycle ---------------------------------------------------------- */

/* A NULL-terminated copy of environ (host thread), or NULL when out of memory. */
static char **pr_env_snapshot(void) {
  size_t n = 0;
  while (environ && environ[n]) n++;
  char **v = calloc(n + 1, sizeof(char *));
  if (v == NULL) return NULL;
  for (size_t i = 0; i < n; i++) {
    if ((v[i] = strdup(environ[i])) == NULL) {
      for (size_t k = 0; k < i; k++) free(v[k]);
      free(v);
      return NULL;
    }
  }
  return v;
}

static void pr_env_free(char **v) {
  if (v == NULL) return;
  for (char **p = v; *p; p++) free(*p);
  free(v);
}

int pr_engine_new(const pr_engine_opts_t *opts, pr_engine_t **out) {
  *out = NULL;
  pr_engine_t *e = calloc(1, sizeof(*e));
  if (e == NULL) return PR_ENOMEM;
  if (opts) e->opts = *opts;
  e->opts.listen = NULL; /* copied into e->listen below */
  if (!e->opts.output_limit) e->opts.output_limit = PR_DEFAULT_OUTPUT_LIMIT;
  if (!e->opts.history_limit) e->opts.history_limit = PR_DEFAULT_HISTORY;
  if (!e->opts.kill_grace_ms) e->opts.kill_grace_ms = PR_DEFAULT_GRACE;
  if (!e->opts.drain_ms) e->opts.drain_ms = PR_DEFAULT_DRAIN;
  e->wakefd = -1;
  pthread_mutex_init(&e->mu, NULL);
  pthread_mutex_init(&e->evmu, NULL);
  pthread_cond_init(&e->cond, NULL);
  pr_queue_init(&e->cmds);
  pr_queue_init(&e->events);
  e->next_id = 1;
  int rc;
  if (opts && opts->listen) {
    /* RPC starts are built on the engine thread, where environ must not be
     * read: they inherit this snapshot of the host environment. */
    rc = PR_ENOMEM;
    if ((e->listen = strdup(opts->listen)) == NULL || (e->rpc_env = pr_env_snapshot()) == NULL)
      goto fail;
  }
  if ((rc = pr_sup_init(e)) != 0) goto fail; /* copies shepherd_path */
  e->opts.shepherd_path = NULL;
  if ((rc = pr_registry_init(e)) != 0) goto fail;
  e->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (e->wakefd < 0) {
    rc = -errno;
    goto fail;
  }
  /* Many executions mean many fds (up to 4 each): lift the soft limit to the
   * hard one when it is low. Harmless to a host that uses poll/epoll. */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max < 65536 ? rl.rlim_max : 65536;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if ((rc = uv_loop_init(&e->loop)) != 0) goto fail;
  e->loop.data = e;
  uv_async_init(&e->loop, &e->async, on_async);
  e->async.data = e;
  uv_timer_init(&e->loop, &e->close_timer);
  e->close_timer.data = e;
  uv_timer_init(&e->loop, &e->flush_timer);
  e->flush_timer.data = e;
  uv_timer_init(&e->loop, &e->prune_timer);
  e->prune_timer.data = e;
  pr_queue_init(&e->deferred);
  /* The loop is not running yet, so this thread may still set up the server. */
  rc = e->listen ? pr_rpc_start(e, e->listen) : 0;
  if (rc == 0) rc = pr_journal_open(e); /* history (loaded into the registry) and audit files */
  if (rc == 0) {
    /* The engine thread must not take the host's signals. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = -pthread_create(&e->thread, NULL, thread_main, e);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
  }
  if (rc != 0) {
    pr_journal_close(e);
    pr_registry_destroy(e); /* records loaded from the history */
    if (e->rpc) pr_rpc_close(e);
    uv_close((uv_handle_t *)&e->async, NULL);
    uv_close((uv_handle_t *)&e->close_timer, NULL);
    uv_close((uv_handle_t *)&e->flush_timer, NULL);
    uv_close((uv_handle_t *)&e->prune_timer, NULL);
    uv_run(&e->loop, UV_RUN_DEFAULT);
    uv_loop_close(&e->loop);
    goto fail;
  }
  e->thread_started = 1;
  *out = e;
  return 0;
fail:
  pr_sup_destroy(e);
  pr_idmap_destroy(&e->byid);
  free(e->listen);
  pr_env_free(e->rpc_env);
  if (e->wakefd >= 0) close(e->wakefd);
  pthread_mutex_destroy(&e->mu);
  pthread_mutex_destroy(&e->evmu);
  pthread_cond_destroy(&e->cond);
  free(e);
  return rc;
}

/* Push a command. Synchronous ones wait for the answer. Returns 0 or
 * PR_ECLOSED (the command was not run; an async one is freed). */
static int submit(pr_engine_t *e, pr_cmd_t *c) {
  pthread_mutex_lock(&e->mu);
  if (e->loop_done) {
    pthread_mutex_unlock(&e->mu);
    if (!c->sync) {
      if (c->exec) pr_exec_free(c->exec);
      free(c);
    }
    return PR_ECLOSED;
  }
  pr_queue_push(&e->cmds, &c->node);
  uv_async_send(&e->async); /* under mu: the handle cannot be closing yet */
  int rc = 0;
  if (c->sync) {
    /* The engine answers every command it dequeues, also while shutting down. */
    while (!c->done) pthread_cond_wait(&e->cond, &e->mu);
    rc = c->closed ? PR_ECLOSED : 0;
  }
  pthread_mutex_unlock(&e->mu);
  return rc;
}

void pr_engine_close(pr_engine_t *e) {
  if (e == NULL || e->closed) return;
  e->closed = 1;
  pr_cmd_t *c = calloc(1, sizeof(*c));
  if (c) {
    c->type = PR_CMD_CLOSE;
    submit(e, c);
  }
  if (e->thread_started) {
    pthread_join(e->thread, NULL);
    e->thread_started = 0;
  }
  pr_journal_close(e); /* writes what is queued, then stops the writer thread */
  pr_sup_destroy(e);
}

int pr_engine_closed(const pr_engine_t *e) { return e->closed; }

void pr_engine_free(pr_engine_t *e) {
  if (e == NULL) return;
  pr_engine_close(e);
  while (!pr_queue_empty(&e->events)) {
    pr_queue_t *q = pr_queue_head(&e->events);
    pr_queue_remove(q);
    pr_event_free((pr_event_t *)(void *)q);
  }
  close(e->wakefd);
  free(e->listen);
  pr_env_free(e->rpc_env);
  pthread_mutex_destroy(&e->mu);
  pthread_mutex_destroy(&e->evmu);
  pthread_cond_destroy(&e->cond);
  free(e);
}

/* ---- host thread: start ------------------------------------------------------------- */

/* Is `kv` ("K=V") setting key `k` of length klen? */
static int same_key(const char *kv, const char *k, size_t klen) {
  return strncmp(kv, k, klen) == 0 && kv[klen] == '=';
}

static size_t key_len(const char *kv) {
  const char *eq = strchr(kv, '=');
  return eq ? (size_t)(eq - kv) : strlen(kv);
}

/* Append string + NUL to the spawn payload. */
static void sb_add(pr_buf_t *b, const char *s) { pr_buf_add(b, s, strlen(s) + 1); }

/* Add base env entries not overridden by `extra`, then the extras. */
static void build_env(pr_buf_t *b, const pr_spec_t *s, char *const *base, const char *const *extra,
                      size_t nextra) {
  if (!s->clear_env && base) {
    for (char *const *ep = base; *ep; ep++) {
      size_t kl = key_len(*ep);
      int over = !pr_env_inherits(s, *ep, kl); /* secrets.c: env_allow, secret names */
      for (size_t i = 0; i < s->envc && !over; i++) over = same_key(s->env[i], *ep, kl);
      for (size_t i = 0; i < nextra && !over; i++) over = same_key(extra[i], *ep, kl);
      if (!over) sb_add(b, *ep);
    }
  }
  for (size_t i = 0; i < s->envc; i++) {
    size_t kl = key_len(s->env[i]);
    int over = 0;
    for (size_t k = 0; k < nextra && !over; k++) over = same_key(extra[k], s->env[i], kl);
    if (!over) sb_add(b, s->env[i]);
  }
  for (size_t i = 0; i < s->nsecrets; i++) sb_add(b, s->secrets[i]); /* checked: not in env */
  for (size_t i = 0; i < nextra; i++) sb_add(b, extra[i]);
}

int pr_engine_build_exec(pr_engine_t *e, const pr_spec_t *s, char *const *base_env,
                         pr_exec_t **out) {
  *out = NULL;
  if (s == NULL || (s->shell == NULL && (s->argc == 0 || s->argv == NULL))) return PR_EINVAL;
  for (size_t i = 0; i < s->envc; i++)
    if (s->env[i] == NULL || strchr(s->env[i], '=') == NULL || s->env[i][0] == '=')
      return PR_EINVAL;
  if (pr_secrets_check(s) != 0) return PR_EINVAL; /* secrets.c: secrets, env_allow */
  pr_exec_t *x = calloc(1, sizeof(*x));
  pr_buf_t b = PR_BUF_INIT(PR_MAX_SPAWN_BYTES);
  int rc = PR_ENOMEM;
  if (x == NULL) goto fail;
  x->pidfd = -1;
  x->verdict = -1;
  x->pending_in.max = PR_PENDING_INPUT_MAX;
  for (int i = 0; i < PR_NSTREAM; i++) pr_queue_init(&x->streams[i].defer);
  x->exit_code = -1;
  x->session = s->session;
  x->pty = s->pty;
  x->stdin_pipe = s->pty ? 1 : s->stdin_pipe;
  x->backpressure = s->backpressure;
  x->cols = s->cols ? s->cols : 80;
  x->rows = s->rows ? s->rows : 24;
  x->timeout_ms = s->timeout_ms;
  x->grace_ms = s->kill_grace_ms >= 0 ? (uint32_t)s->kill_grace_ms : e->opts.kill_grace_ms;
  x->created_at = pr_now_ms();
  if (s->worker) { /* a supervised worker: requests go to its stdin */
    if ((rc = pr_worker_new(s->worker, &x->worker)) != 0) goto fail;
    rc = PR_ENOMEM;
    x->stdin_pipe = 1;
    if (x->pty) {
      rc = PR_EINVAL;
      goto fail;
    }
  }
  if (s->label && (x->label = strdup(s->label)) == NULL) goto fail;
  if ((x->owner = strdup(s->owner ? s->owner : "host")) == NULL) goto fail;
  char here[4096]; /* not getcwd(NULL, 0): its buffer bypasses ASan's malloc */
  if (s->cwd) x->cwd = strdup(s->cwd);
  else if (getcwd(here, sizeof(here)) != NULL) x->cwd = strdup(here);
  if (x->cwd == NULL) goto fail;
  if (s->shell) {
    if ((x->shell = strdup(s->shell)) == NULL) goto fail;
    x->argc = 3;
  } else {
    x->argc = s->argc;
  }
  x->argv = calloc(x->argc + 1, sizeof(char *));
  if (x->argv == NULL) goto fail;
  for (size_t i = 0; i < x->argc; i++) {
    const char *a = s->shell ? (i == 0 ? "/bin/sh" : i == 1 ? "-c" : s->shell) : s->argv[i];
    if (a == NULL || (x->argv[i] = strdup(a)) == NULL) {
      rc = a == NULL ? PR_EINVAL : PR_ENOMEM;
      goto fail;
    }
  }
  for (int i = 0; i < PR_NSTREAM; i++) {
    if ((i == PR_PTY) != (x->pty != 0)) continue;
    if ((x->streams[i].ring = pr_ring_new(e->opts.output_limit)) == NULL) goto fail;
    x->streams[i].exec = x;
  }

  /* The id is handed out here so the caller has it at once; commands are
   * processed in order, so any later call with this id finds it. */
  pthread_mutex_lock(&e->mu);
  x->id = e->next_id++;
  pthread_mutex_unlock(&e->mu);

  char idvar[48];
  snprintf(idvar, sizeof(idvar), "PROCTOR_EXECUTION_ID=%llu", (unsigned long long)x->id);
  char sockvar[sizeof("PROCTOR_SOCKET=") + PR_LISTEN_MAX]; /* where the RPC socket is */
  const char *extra[3] = {idvar};
  size_t nextra = 1;
  if (e->listen) {
    snprintf(sockvar, sizeof(sockvar), "PROCTOR_SOCKET=%s", e->listen);
    extra[nextra++] = sockvar;
  }
  if (x->pty) {
    int has_term = 0;
    for (size_t i = 0; i < s->envc; i++) has_term |= same_key(s->env[i], "TERM", 4);
    if (!has_term) extra[nextra++] = "TERM=xterm-256color";
  }
  sb_add(&b, x->cwd);
  for (size_t i = 0; i < x->argc; i++) sb_add(&b, x->argv[i]);
  build_env(&b, s, base_env, extra, nextra);
  if (b.err) {
    rc = b.err;
    goto fail;
  }
  if ((rc = pr_env_keys(b.p, b.len, 1 + x->argc, &x->env_keys, &x->env_keys_len)) != 0 ||
      (rc = pr_secrets_new(s, &x->secrets)) != 0) /* secrets.c: keys for the record, masker */
    goto fail;
  x->spawn_len = b.len;
  x->spawn_msg = pr_buf_release(&b);
  *out = x;
  return 0;
fail:
  pr_buf_free(&b);
  if (x) pr_exec_free(x);
  return rc;
}

int pr_engine_start(pr_engine_t *e, const pr_spec_t *s, uint64_t *id) {
  if (e->closed) return PR_ECLOSED;
  pr_exec_t *x;
  int rc = pr_engine_build_exec(e, s, environ, &x); /* host thread: environ is safe here */
  if (rc != 0) return rc;
  pr_cmd_t *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    pr_exec_free(x);
    return PR_ENOMEM;
  }
  c->type = PR_CMD_START;
  c->exec = x;
  *id = x->id;
  return submit(e, c);
}

/* ---- host thread: control and queries ---------------------------------------------- */

pr_cancel_result_t pr_engine_cancel(pr_engine_t *e, uint64_t id, uint64_t session, int force) {
  pr_cmd_t c = {.type = PR_CMD_CANCEL, .sync = 1, .id = id, .session = session, .a = force};
  if (e->closed || submit(e, &c) != 0) return PR_CANCEL_NOT_FOUND;
  return (pr_cancel_result_t)c.rc;
}

pr_delete_result_t pr_engine_delete(pr_engine_t *e, uint64_t id, uint64_t session) {
  pr_cmd_t c = {.type = PR_CMD_DELETE, .sync = 1, .id = id, .session = session};
  if (e->closed || submit(e, &c) != 0) return PR_DELETE_NOT_FOUND;
  return (pr_delete_result_t)c.rc;
}

static int simple(pr_engine_t *e, pr_cmd_t *c) {
  if (e->closed) return PR_ECLOSED;
  c->sync = 1;
  int rc = submit(e, c);
  return rc ? rc : c->rc;
}

int pr_engine_input(pr_engine_t *e, uint64_t id, uint64_t session, const char *data, size_t len) {
  pr_cmd_t c = {.type = PR_CMD_INPUT, .id = id, .session = session, .data = data, .len = len};
  return simple(e, &c);
}

int pr_engine_close_stdin(pr_engine_t *e, uint64_t id, uint64_t session) {
  pr_cmd_t c = {.type = PR_CMD_CLOSE_STDIN, .id = id, .session = session};
  return simple(e, &c);
}

int pr_engine_resize(pr_engine_t *e, uint64_t id, uint64_t session, uint16_t cols, uint16_t rows) {
  if (cols == 0 || rows == 0) return PR_EINVAL;
  pr_cmd_t c = {.type = PR_CMD_RESIZE, .id = id, .session = session, .a = cols, .b = rows};
  return simple(e, &c);
}

int pr_engine_get(pr_engine_t *e, uint64_t id, uint64_t session, pr_record_t **out) {
  pr_cmd_t c = {.type = PR_CMD_GET, .id = id, .session = session};
  int rc = simple(e, &c);
  *out = rc == 0 ? (pr_record_t *)c.out : NULL;
  return rc;
}

int pr_engine_list(pr_engine_t *e, uint64_t session, int state, pr_record_t ***out, size_t *n) {
  pr_cmd_t c = {.type = PR_CMD_LIST, .session = session, .a = state};
  int rc = simple(e, &c);
  *out = rc == 0 ? (pr_record_t **)c.out : NULL;
  *n = rc == 0 ? c.n : 0;
  return rc;
}

int pr_engine_purge(pr_engine_t *e, uint64_t session, uint64_t older_than_ms, size_t *n) {
  pr_cmd_t c = {.type = PR_CMD_PURGE, .session = session, .u = older_than_ms};
  int rc = simple(e, &c);
  *n = rc == 0 ? c.n : 0;
  return rc;
}

int pr_engine_read(pr_engine_t *e, uint64_t id, uint64_t session, int stream, uint64_t from,
                   size_t max, char **data, size_t *len, uint64_t *next, uint64_t *missed) {
  pr_cmd_t c = {.type = PR_CMD_READ, .id = id, .session = session, .a = stream,
                .b = (int64_t)(max > INT64_MAX ? INT64_MAX : max), .u = from};
  int rc = simple(e, &c);
  *data = rc == 0 ? (char *)c.out : NULL;
  *len = rc == 0 ? c.n : 0;
  *next = rc == 0 ? c.r1 : from;
  *missed = rc == 0 ? c.r2 : 0;
  return rc;
}

int pr_engine_request(pr_engine_t *e, uint64_t id, const char *payload, size_t len,
                      uint64_t timeout_ms, uint64_t *rid) {
  if (e->closed) return PR_ECLOSED;
  pr_cmd_t *c = malloc(sizeof(*c) + len + 1); /* the payload lives in the command */
  if (c == NULL) return PR_ENOMEM;
  memset(c, 0, sizeof(*c));
  memcpy((char *)(c + 1), payload, len);
  ((char *)(c + 1))[len] = 0;
  c->type = PR_CMD_WREQUEST;
  c->id = id;
  c->data = (const char *)(c + 1);
  c->len = len;
  c->a = (int64_t)(timeout_ms > INT64_MAX ? INT64_MAX : timeout_ms);
  c->u = *rid = pr_worker_next_rid(e);
  return submit(e, c);
}

int pr_engine_cancel_request(pr_engine_t *e, uint64_t rid) {
  pr_cmd_t c = {.type = PR_CMD_WCANCEL, .u = rid};
  return simple(e, &c);
}

int pr_engine_worker_restart(pr_engine_t *e, uint64_t id, uint64_t session) {
  pr_cmd_t c = {.type = PR_CMD_WRESTART, .id = id, .session = session};
  return simple(e, &c);
}

int pr_engine_fd(const pr_engine_t *e) { return e->wakefd; }

void pr_engine_warnings(pr_engine_t *e, char ***out, size_t *n) { pr_journal_warnings(e, out, n); }

const char *pr_engine_address(const pr_engine_t *e) { return e->listen; }

int pr_engine_call(pr_engine_t *e, void (*fn)(pr_engine_t *, void *), void *arg) {
  pr_cmd_t c = {.type = PR_CMD_CALL, .fn = fn, .out = arg};
  return simple(e, &c);
}

size_t pr_engine_poll(pr_engine_t *e, pr_event_t **evs, size_t max, size_t max_bytes) {
  size_t n = 0;
  pthread_mutex_lock(&e->evmu);
  while (n < max && !pr_queue_empty(&e->events)) {
    pr_queue_t *q = pr_queue_head(&e->events);
    pr_queue_remove(q);
    e->nevents--;
    evs[n++] = (pr_event_t *)(void *)q;
  }
  if (pr_queue_empty(&e->events)) { /* reset readability */
    uint64_t v;
    ssize_t r = read(e->wakefd, &v, sizeof(v));
    (void)r;
  }
  pthread_mutex_unlock(&e->evmu);
  /* Output markers become data here, outside the queue lock. */
  size_t out = 0;
  for (size_t i = 0; i < n; i++) {
    pr_event_t *ev = evs[i];
    if (ev->type == PR_EV_OUTPUT) {
      int resume = 0;
      int rc = pr_ring_take_tail((pr_ring_t *)ev->ring, max_bytes, &ev->data, &ev->len,
                                 &ev->offset, &ev->missed, &resume);
      if (resume) { /* back-pressure: the engine paused this stream; read again */
        pr_cmd_t *c = calloc(1, sizeof(*c));
        if (c) {
          c->type = PR_CMD_RESUME;
          c->id = ev->id;
          submit(e, c);
        }
      }
      if (rc != 0 || (ev->len == 0 && ev->missed == 0)) { /* coalesced into an earlier take */
        pr_event_free(ev);
        continue;
      }
    }
    evs[out++] = ev;
  }
  return out;
}

int pr_engine_wait(pr_engine_t *e, int timeout_ms) {
  struct pollfd p = {e->wakefd, POLLIN, 0};
  int r;
  do r = poll(&p, 1, timeout_ms);
  while (r < 0 && errno == EINTR);
  return r > 0;
}
