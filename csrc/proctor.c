/* csrc/proctor.c — an engine: the aggregate of its modules, how they are wired,
 * its lifetime, and the public C API (include/proctor.h).
 *
 * Thread: functions named pr_engine_* run on the HOST thread; thread_main
 * and the shutdown callback on the engine's own thread; loader_main on the
 * loader thread, which reads and decodes the history while the engine thread
 * already runs (on_loaded then makes its records executions).
 *
 *   host thread                            engine thread (own uv_loop_t)
 *   ───────────                            ─────────────────────────────
 *   pr_engine_cancel ─► engine/control.c ─async─► pr_control_run ─► exec, registry, workers
 *   pr_engine_poll   ◄─ engine/hostq.c   ◄──────── listeners (engine/events.h):
 *                                                    host queue · RPC server · history · audit
 *                                          engine/shepherd_link.c ═══ proctor-shepherd
 *   journal writer thread (store/journal.c) ◄── history and audit jobs
 *   loader thread: pr_history_load ─async─► on_loaded: records → registry, writer
 *                                           started, parked host commands run
 *
 * This is the only file that sees struct pr_engine and the only one that
 * names every layer: it registers the listeners, gives the shepherd link its
 * callbacks, turns the records the history loads into executions, and
 * closes things in order. Every other module knows only its own struct and
 * the ones below it (ARCHITECTURE.md).
 */
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "engine/control.h"
#include "engine/hostq.h"
#include "engine/shepherd_link.h"
#include "include/proctor.h"
#include "include/proctor_test.h"
#include "rpc/rpc.h"
#include "store/audit.h"
#include "store/history.h"
#include "store/journal.h"

extern char **environ;

struct pr_engine {
  pthread_t thread;      /* host: the engine thread */
  int thread_started;    /* host */
  int closed;            /* host: pr_engine_close ran */
  uv_loop_t loop;        /* engine thread (set up by the host before it starts) */
  pr_listeners_t ls;     /* told every state change, output, worker event */
  pr_hostq_t hq;         /* events for the host */
  pr_sup_t sup;          /* the shepherd link */
  pr_control_t ctl;      /* commands, registry, scheduler */
  pr_rpc_t *rpc;         /* the msgpack-rpc server, NULL when not listening */
  char *listen;          /* socket path, immutable after pr_engine_new (host may read it) */
  char **rpc_env;        /* environ snapshot taken by pr_engine_new for RPC starts */
  pr_journal_t *journal; /* the writer thread of the durable files, NULL when none */
  pr_history_t *history; /* NULL when off */
  int history_later;     /* the history is loaded by the loader thread (after pr_engine_new) */
  int shepherd_early;    /* opts.shepherd_early: thread_main starts the shepherd */
  pthread_mutex_t mu;    /* guards loading */
  pthread_cond_t cv;     /* signalled when loading ends */
  int loading;           /* 1 until the history is loaded (mu) */
  /* the loader thread (history_later) */
  pthread_t loader;        /* engine thread: started and joined there */
  int loader_started;      /* engine thread: 1 until joined (finish_load) */
  int load_stop;           /* atomic: set by pr_engine_close; the load stops between frames */
  uv_async_t loaded_async; /* the loader is done: on_loaded (engine thread) */
  pr_loaded_t *lv;         /* the loader's result, read after the join */
  size_t ln;
  uint64_t lnext;
  int lrc;
  pr_audit_t *audit; /* NULL when off */
};

/* ---- engine thread ---------------------------------------------------------------------- */

/* Every execution's handles are closing by now; a handle nobody closed (none
 * should be left) is closed rather than keep the loop alive. */
static void close_leftover(uv_handle_t *h, void *arg) {
  (void)arg;
  if (!uv_is_closing(h)) uv_close(h, NULL);
}

static void finish_load(pr_engine_t *e);

/* The control finished closing: close what is not the control's. */
static void shutdown_owner(void *arg) {
  pr_engine_t *e = arg;
  finish_load(e); /* the loader, stopped by pr_engine_close, ends at its next frame */
  if (e->history_later && !uv_is_closing((uv_handle_t *)&e->loaded_async))
    uv_close((uv_handle_t *)&e->loaded_async, NULL);
  if (e->rpc) { /* its handles are not executions': close them first */
    pr_listeners_remove(&e->ls, pr_rpc_listener(e->rpc));
    pr_rpc_close(e->rpc);
    e->rpc = NULL;
  }
  pr_hostq_close(&e->hq);
  pr_control_close_handles(&e->ctl);
  uv_walk(&e->loop, close_leftover, NULL);
}

static void load_history(pr_engine_t *e);
static void adopt(pr_engine_t *e, pr_loaded_t *v, size_t n, uint64_t next);
static void loaded(pr_engine_t *e);
static void *loader_main(void *arg);

static void *thread_main(void *arg) {
  pr_engine_t *e = (pr_engine_t *)arg;
  if (e->history_later) { /* new executions start now; the history comes in on_loaded */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    e->loader_started = pthread_create(&e->loader, NULL, loader_main, e) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!e->loader_started) { /* no thread: load here, before the loop, as a last resort */
      e->lrc = pr_history_load(e->history, &e->lv, &e->ln, &e->lnext, &e->load_stop);
      e->loader_started = 1;
      e->loader = pthread_self();
      finish_load(e);
    }
  } else {
    loaded(e);
  }
  pr_registry_prune(&e->ctl.reg); /* arms the age timer for records loaded from the history */
  /* The first run then finds its shepherd up: while the host makes that run's
   * console, not after. A failure is the first spawn's to report (it tries again). */
  if (e->shepherd_early) pr_sup_ensure(&e->sup);
  uv_run(&e->loop, UV_RUN_DEFAULT);
  /* Every handle is closed: free the registry here, on the thread that owns it. */
  pr_control_free_registry(&e->ctl);
  uv_loop_close(&e->loop);
  return NULL;
}

/* The host took the bytes of a stream the engine paused: read it again. */
static void resume_stream(void *arg, uint64_t id) {
  pr_engine_t *e = arg;
  pr_cmd_t *c = calloc(1, sizeof(*c));
  if (c == NULL) return;
  c->type = PR_CMD_RESUME;
  c->id = id;
  pr_control_submit(&e->ctl, c);
}

/* ---- host thread: lifecycle ---------------------------------------------------------- */

/* A NULL-terminated copy of environ (host thread), or NULL when out of memory. */
static char **env_snapshot(void) {
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

static void env_free(char **v) {
  if (v == NULL) return;
  for (char **p = v; *p; p++) free(*p);
  free(v);
}

/* Test hook (include/proctor_test.h): run before each history load. */
static void (*history_gate)(void);

void pr_test_history_gate(void (*fn)(void)) { history_gate = fn; }

void pr_test_history_frame(void (*fn)(const int *stop)) { pr_history_test_frame(fn); }

size_t pr_test_history_chunk(size_t bytes) { return pr_history_test_chunk(bytes); }

/* The history is loaded: release pr_engine_warnings. Either thread. */
static void loaded(pr_engine_t *e) {
  pthread_mutex_lock(&e->mu);
  e->loading = 0;
  pthread_cond_broadcast(&e->cv);
  pthread_mutex_unlock(&e->mu);
}

/* The history's records become executions (engine thread, or the host in
 * pr_engine_new before the engine thread runs); the next id is raised to
 * what the whole file allows. A record whose id is taken (never, while
 * pr_history_open's look is right) is dropped. */
static void adopt(pr_engine_t *e, pr_loaded_t *v, size_t n, uint64_t next) {
  for (size_t i = 0; i < n; i++) {
    if (pr_registry_find(&e->ctl.reg, v[i].rec->id, 0)) continue;
    pr_exec_t *x = pr_exec_restore(&e->ctl.xc, v[i].rec, v[i].rings);
    v[i].rec = NULL;
    memset(v[i].rings, 0, sizeof(v[i].rings));
    if (x == NULL) continue; /* out of memory: that record is lost */
    pr_registry_add(&e->ctl.reg, x);
    e->ctl.reg.nterminal++;
  }
  pr_history_loaded_free(v, n);
  uint64_t cur = __atomic_load_n(&e->ctl.next_id, __ATOMIC_RELAXED);
  while (next > cur && !__atomic_compare_exchange_n(&e->ctl.next_id, &cur, next, 0,
                                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

/* Read and decode the history on the host inside pr_engine_new (its file
 * could not be stepped through quickly: nothing may get an id before the
 * whole file is read), turn its records into executions, then listen. */
static void load_history(pr_engine_t *e) {
  pr_loaded_t *v;
  size_t n;
  uint64_t next;
  if (history_gate) history_gate();
  int rc = pr_history_load(e->history, &v, &n, &next, NULL);
#ifdef __GLIBC__
  malloc_trim(0); /* the file's copy and the parse's garbage */
#endif
  if (rc == 0) adopt(e, v, n, next);
  pr_listeners_add(&e->ls, pr_history_listener(e->history));
}

/* The loader thread: read and decode the history while the engine thread
 * runs; stopped between frames by pr_engine_close (load_stop). */
static void *loader_main(void *arg) {
  pr_engine_t *e = arg;
  if (history_gate) history_gate();
  e->lrc = pr_history_load(e->history, &e->lv, &e->ln, &e->lnext, &e->load_stop);
#ifdef __GLIBC__
  malloc_trim(0); /* the file's copy and the parse's garbage */
#endif
  uv_async_send(&e->loaded_async); /* the handle closes only after the join (finish_load) */
  return NULL;
}

/* Engine thread, once: join the loader, make its records executions (not
 * when closing: they would only be freed), start the writer thread (frames
 * queued by executions that began during the load are appended now; after a
 * stopped load too), run the host commands that waited for the history. */
static void finish_load(pr_engine_t *e) {
  if (!e->loader_started) return;
  if (!pthread_equal(e->loader, pthread_self())) pthread_join(e->loader, NULL);
  e->loader_started = 0;
  if (e->lrc == 0 && !e->ctl.xc.closing) adopt(e, e->lv, e->ln, e->lnext);
  else if (e->lrc == 0) pr_history_loaded_free(e->lv, e->ln);
  e->lv = NULL;
  e->ln = 0;
  int rc = pr_journal_start(e->journal);
  if (rc != 0) pr_journal_warn(e->journal, "history: no writer thread (%s)", pr_strerror(rc));
  loaded(e);
  pr_control_history_loaded(&e->ctl);
  if (!e->ctl.xc.closing) pr_registry_prune(&e->ctl.reg);
}

static void on_loaded(uv_async_t *h) { finish_load(h->data); }

/* The durable files: the journal's writer, the history (found now, loaded
 * by the engine thread before its loop: load_history) and the audit log,
 * each a listener. */
static int open_files(pr_engine_t *e, const pr_engine_opts_t *o) {
  if (o->history_file == NULL && o->audit_file == NULL) return 0;
  int rc = pr_journal_new(&e->journal);
  if (rc == 0 && o->history_file) {
    pr_history_opts_t ho = {o->history_output_bytes, e->ctl.output_limit, e->ctl.reg.limit,
                            o->history_age_ms};
    uint64_t next = 0;
    rc = pr_history_open(e->journal, o->history_file, &ho, &e->history, &next);
    if (rc == 0 && e->history && next) {
      if ((rc = uv_async_init(&e->loop, &e->loaded_async, on_loaded)) != 0) return rc;
      e->loaded_async.data = e;
      e->history_later = 1;
      if (next > e->ctl.next_id) e->ctl.next_id = next;
      /* listening now: the frames of executions that begin during the load
       * wait in the journal's queue until the writer starts (finish_load) */
      pr_listeners_add(&e->ls, pr_history_listener(e->history));
      pr_control_history_loading(&e->ctl);
    } else if (rc == 0 && e->history) {
      load_history(e); /* not laid out as this release writes it: now, before any id */
    }
  }
  if (rc == 0 && o->audit_file) {
    rc = pr_audit_open(e->journal, o->audit_file, o->audit_max_bytes, o->audit_keep, &e->audit);
    if (e->audit) pr_listeners_add(&e->ls, pr_audit_listener(e->audit));
  }
  if (rc == 0 && !e->history_later) rc = pr_journal_start(e->journal);
  return rc;
}

static void close_files(pr_engine_t *e) {
  pr_journal_stop(e->journal); /* writes what is queued, then stops the writer thread */
  pr_history_free(e->history);
  pr_audit_free(e->audit);
  pr_journal_free(e->journal);
  e->history = NULL;
  e->audit = NULL;
  e->journal = NULL;
}

int pr_engine_new(const pr_engine_opts_t *opts, pr_engine_t **out) {
  *out = NULL;
  pr_engine_opts_t o = {0};
  if (opts) o = *opts;
  pr_engine_t *e = calloc(1, sizeof(*e));
  if (e == NULL) return PR_ENOMEM;
  int rc = PR_ENOMEM, loop_ok = 0, hq_ok = 0, sup_ok = 0, ctl_ok = 0;
  pthread_mutex_init(&e->mu, NULL);
  pthread_cond_init(&e->cv, NULL);
  if (o.listen) {
    /* RPC starts are built on the engine thread, where environ must not be
     * read: they inherit this snapshot of the host environment. */
    if ((e->listen = strdup(o.listen)) == NULL || (e->rpc_env = env_snapshot()) == NULL) goto fail;
  }
  /* Many executions mean many fds (up to 4 each): lift the soft limit to the
   * hard one when it is low. Harmless to a host that uses poll/epoll. */
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max < 65536 ? rl.rlim_max : 65536;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  if ((rc = uv_loop_init(&e->loop)) != 0) goto fail;
  loop_ok = 1;
  e->loop.data = e;
  pr_listeners_init(&e->ls);
  if ((rc = pr_hostq_init(&e->hq, &e->loop, resume_stream, e)) != 0) goto fail;
  hq_ok = 1;
  pr_listeners_add(&e->ls, &e->hq.listener); /* the host hears first */
  if ((rc = pr_sup_init(&e->sup, &e->loop, o.shepherd_path, &pr_control_sup_ops, &e->ctl)) != 0)
    goto fail;
  sup_ok = 1;
  rc = pr_control_init(&e->ctl, &e->loop, &o, &e->sup, &e->ls, shutdown_owner, e);
  ctl_ok = 1;
  if (rc != 0) goto fail;
  e->ctl.listen = e->listen;
  /* The loop is not running yet, so this thread may still set up the server. */
  if (e->listen) {
    if ((rc = pr_rpc_start(&e->ctl, e->rpc_env, e->listen, &e->rpc)) != 0) goto fail;
    pr_listeners_add(&e->ls, pr_rpc_listener(e->rpc));
  }
  if ((rc = open_files(e, &o)) != 0) goto fail; /* history (found; loaded later) and audit */
  e->loading = e->history_later;
  e->shepherd_early = o.shepherd_early;
  /* The engine thread must not take the host's signals. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  rc = -pthread_create(&e->thread, NULL, thread_main, e);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0) goto fail;
  e->thread_started = 1;
  *out = e;
  return 0;
fail:
  close_files(e);
  if (ctl_ok) pr_registry_destroy(&e->ctl.reg); /* records loaded from the history */
  if (e->rpc) pr_rpc_close(e->rpc);
  if (loop_ok) {
    if (hq_ok) pr_hostq_close(&e->hq);
    if (ctl_ok) pr_control_close_handles(&e->ctl);
    uv_walk(&e->loop, close_leftover, NULL);
    uv_run(&e->loop, UV_RUN_DEFAULT);
    uv_loop_close(&e->loop);
  }
  if (ctl_ok) pr_control_destroy(&e->ctl);
  if (sup_ok) pr_sup_destroy(&e->sup);
  if (hq_ok) pr_hostq_destroy(&e->hq);
  free(e->listen);
  env_free(e->rpc_env);
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e);
  return rc;
}

void pr_engine_close(pr_engine_t *e) {
  if (e == NULL || e->closed) return;
  e->closed = 1;
  __atomic_store_n(&e->load_stop, 1, __ATOMIC_RELEASE); /* a history load stops early */
  pr_cmd_t *c = calloc(1, sizeof(*c));
  if (c) {
    c->type = PR_CMD_CLOSE;
    pr_control_submit(&e->ctl, c);
  }
  if (e->thread_started) {
    pthread_join(e->thread, NULL);
    e->thread_started = 0;
  }
  close_files(e);
  pr_sup_destroy(&e->sup);
}

int pr_engine_closed(const pr_engine_t *e) { return e->closed; }

void pr_engine_free(pr_engine_t *e) {
  if (e == NULL) return;
  pr_engine_close(e);
  pr_hostq_destroy(&e->hq);
  pr_control_destroy(&e->ctl);
  free(e->listen);
  env_free(e->rpc_env);
  pthread_mutex_destroy(&e->mu);
  pthread_cond_destroy(&e->cv);
  free(e);
}

/* ---- host thread: commands ------------------------------------------------------------ */

static int start(pr_engine_t *e, const pr_spec_t *s, int deferred, uint64_t *id) {
  if (e->closed) return PR_ECLOSED;
  pr_exec_t *x;
  int rc = pr_control_admit(&e->ctl, 0); /* the host's queued + held bound */
  if (rc != 0) return rc;
  pr_spec_t t = *s;
  char *transport = NULL, *tcwd = NULL;
  if (s->target && !s->transport) { /* a configured target (pr_engine_target) */
    rc = pr_targets_lookup(&e->ctl.confs, s->target, &transport, &tcwd);
    if (rc == PR_ENOENT) rc = PR_EINVAL; /* not configured */
    t.transport = transport;
    if (t.cwd == NULL) t.cwd = tcwd;
  }
  if (rc == 0) rc = pr_exec_build(&e->ctl, &t, environ, &x); /* host thread: environ is safe */
  free(transport);
  free(tcwd);
  if (rc != 0) {
    pr_control_unadmit(&e->ctl, 0);
    return rc;
  }
  pr_cmd_t *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    pr_exec_free(x);
    pr_control_unadmit(&e->ctl, 0);
    return PR_ENOMEM;
  }
  c->type = PR_CMD_START;
  c->a = deferred;
  c->exec = x;
  *id = x->id;
  return pr_control_submit(&e->ctl, c);
}

int pr_engine_start(pr_engine_t *e, const pr_spec_t *s, uint64_t *id) { return start(e, s, 0, id); }

int pr_engine_start_deferred(pr_engine_t *e, const pr_spec_t *s, uint64_t *id) {
  return start(e, s, 1, id);
}

pr_cancel_result_t pr_engine_cancel(pr_engine_t *e, uint64_t id, uint64_t session, int force,
                                    const char *reason) {
  if (reason && !pr_reason_valid(reason)) return PR_CANCEL_NOT_FOUND;
  pr_cmd_t c = {
      .type = PR_CMD_CANCEL, .sync = 1, .id = id, .session = session, .a = force, .data = reason};
  if (e->closed || pr_control_submit(&e->ctl, &c) != 0) return PR_CANCEL_NOT_FOUND;
  return (pr_cancel_result_t)c.rc;
}

pr_delete_result_t pr_engine_delete(pr_engine_t *e, uint64_t id, uint64_t session) {
  pr_cmd_t c = {.type = PR_CMD_DELETE, .sync = 1, .id = id, .session = session};
  if (e->closed || pr_control_submit(&e->ctl, &c) != 0) return PR_DELETE_NOT_FOUND;
  return (pr_delete_result_t)c.rc;
}

/* Run a synchronous command; its result code, or PR_ECLOSED. */
static int simple(pr_engine_t *e, pr_cmd_t *c) {
  if (e->closed) return PR_ECLOSED;
  c->sync = 1;
  int rc = pr_control_submit(&e->ctl, c);
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
                   size_t max, char **data, size_t *len, uint64_t *next, uint64_t *missed,
                   pr_output_t **ring) {
  pr_cmd_t c = {.type = PR_CMD_READ,
                .id = id,
                .session = session,
                .a = stream,
                .b = (int64_t)(max > INT64_MAX ? INT64_MAX : max),
                .u = from,
                .want_ring = ring != NULL};
  int rc = simple(e, &c);
  *data = rc == 0 ? (char *)c.out : NULL;
  *len = rc == 0 ? c.n : 0;
  *next = rc == 0 ? c.r1 : from;
  *missed = rc == 0 ? c.r2 : 0;
  if (ring) *ring = rc == 0 ? (pr_output_t *)c.ring : NULL;
  return rc;
}

int pr_engine_worker_request(pr_engine_t *e, uint64_t id, uint64_t session, const char *payload,
                             size_t len, uint64_t timeout_ms, uint64_t *rid) {
  if (e->closed) return PR_ECLOSED;
  pr_cmd_t *c = malloc(sizeof(*c) + len + 1); /* the payload lives in the command */
  if (c == NULL) return PR_ENOMEM;
  memset(c, 0, sizeof(*c));
  memcpy((char *)(c + 1), payload, len);
  ((char *)(c + 1))[len] = 0;
  c->type = PR_CMD_WREQUEST;
  c->id = id;
  c->session = session;
  c->data = (const char *)(c + 1);
  c->len = len;
  c->a = (int64_t)(timeout_ms > INT64_MAX ? INT64_MAX : timeout_ms);
  c->u = *rid = pr_control_next_rid(&e->ctl);
  return pr_control_submit(&e->ctl, c);
}

int pr_engine_worker_cancel(pr_engine_t *e, uint64_t rid, uint64_t session) {
  pr_cmd_t c = {.type = PR_CMD_WCANCEL, .session = session, .u = rid};
  return simple(e, &c);
}

int pr_engine_worker_restart(pr_engine_t *e, uint64_t id, uint64_t session) {
  pr_cmd_t c = {.type = PR_CMD_WRESTART, .id = id, .session = session};
  return simple(e, &c);
}

int pr_engine_target(pr_engine_t *e, const char *name, const char *transport, const char *cwd) {
  if (e->closed) return PR_ECLOSED;
  return pr_targets_configure(&e->ctl.confs, name, transport, cwd);
}

int pr_engine_release(pr_engine_t *e, uint64_t id, uint64_t session) {
  pr_cmd_t c = {.type = PR_CMD_RELEASE, .id = id, .session = session};
  return simple(e, &c);
}

int pr_engine_hold_output(pr_engine_t *e, uint64_t id, int on) {
  if (e->closed) return PR_ECLOSED;
  pr_cmd_t *c = calloc(1, sizeof(*c));
  if (c == NULL) return PR_ENOMEM;
  c->type = PR_CMD_HOLD_OUTPUT;
  c->id = id;
  c->a = on != 0;
  return pr_control_submit(&e->ctl, c);
}

/* ---- host thread: events and queries ------------------------------------------------- */

int pr_engine_fd(const pr_engine_t *e) { return e->hq.wakefd; }

const char *pr_engine_address(const pr_engine_t *e) { return e->listen; }

/* A host that polls or waits for events gets the ones of its own starts:
 * those still queued without a wake-up (batch_starts) go first. */
size_t pr_engine_poll(pr_engine_t *e, pr_event_t **evs, size_t max, size_t max_bytes) {
  pr_control_flush(&e->ctl);
  return pr_hostq_poll(&e->hq, evs, max, max_bytes);
}

int pr_engine_wait(pr_engine_t *e, int timeout_ms) {
  pr_control_flush(&e->ctl);
  return pr_hostq_wait(&e->hq, timeout_ms);
}

void pr_engine_flush(pr_engine_t *e) { pr_control_flush(&e->ctl); }

int pr_engine_state_records(pr_engine_t *e, int on) { return pr_hostq_records(&e->hq, on); }

uint64_t pr_engine_wakeups(pr_engine_t *e) { return pr_control_wakeups(&e->ctl); }

int pr_engine_history_loading(pr_engine_t *e) {
  pthread_mutex_lock(&e->mu);
  int on = e->loading;
  pthread_mutex_unlock(&e->mu);
  return on;
}

void pr_engine_warnings(pr_engine_t *e, char ***out, size_t *n) {
  pthread_mutex_lock(&e->mu); /* what the load has to say comes with the rest */
  while (e->loading) pthread_cond_wait(&e->cv, &e->mu);
  pthread_mutex_unlock(&e->mu);
  pr_journal_warnings(e->journal, out, n);
  int err = e->ctl.spill ? pr_spill_failure(e->ctl.spill) : 0;
  if (err == 0) return;
  char msg[512];
  snprintf(msg, sizeof(msg),
           "output spill file in %s: %s: output is kept in memory (up to output_limit a stream)",
           e->ctl.spill->dir, strerror(err));
  char *s = strdup(msg);
  char **v = s ? realloc(*out, (*n + 1) * sizeof(char *)) : NULL;
  if (v == NULL) {
    free(s);
    return;
  }
  v[(*n)++] = s;
  *out = v;
}

/* ---- test hooks (include/proctor_test.h) --------------------------------------------- */

typedef struct {
  void (*fn)(pr_engine_t *, void *);
  void *arg;
} call_t;

static void call(void *owner, void *arg) {
  call_t *c = arg;
  c->fn(owner, c->arg);
}

int pr_test_call(pr_engine_t *e, void (*fn)(pr_engine_t *, void *), void *arg) {
  call_t k = {fn, arg};
  pr_cmd_t c = {.type = PR_CMD_CALL, .fn = call, .out = &k};
  return simple(e, &c);
}

void pr_test_hold_events(pr_engine_t *e) { pr_hostq_hold(&e->hq); }

void pr_test_release_events(pr_engine_t *e) { pr_hostq_unhold(&e->hq); }

void pr_test_events_held(pr_engine_t *e, size_t *n, size_t *bytes) {
  pr_hostq_held(&e->hq, n, bytes);
}

/* The writer job of pr_test_hold_journal: busy until close() stops the journal. */
static void hold_until_stop(void *journal, pr_job_t *job) {
  (void)job;
  while (!pr_journal_stopping(journal)) usleep(1000);
}

int pr_test_hold_journal(pr_engine_t *e) {
  if (e->journal == NULL) return -1;
  pr_job_t *job = pr_journal_job(hold_until_stop, e->journal, 0);
  return job ? pr_journal_push(e->journal, job) : PR_ENOMEM;
}

pr_rpc_conn_t *pr_test_rpc_open(pr_engine_t *e, void (*sink)(void *, const char *, size_t),
                                void *arg) {
  if (e->rpc == NULL) {
    if (pr_rpc_start(&e->ctl, e->rpc_env, NULL, &e->rpc) != 0) return NULL;
    pr_listeners_add(&e->ls, pr_rpc_listener(e->rpc));
  }
  return pr_rpc_virtual_open(e->rpc, sink, arg);
}

int pr_test_rpc_feed(pr_rpc_conn_t *c, const char *data, size_t len) {
  return pr_rpc_virtual_feed(c, data, len);
}

void pr_test_rpc_close(pr_rpc_conn_t *c) { pr_rpc_virtual_close(c); }
