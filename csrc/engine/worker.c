/* engine/worker.c — supervised workers: worker state, requests, readiness,
 * restarts with backoff. See worker.h for the flow.
 *
 * Thread: engine, except pr_worker_new and freeing (any thread, while nobody
 * else holds the execution) and chan_done (host, from pr_event_free).
 *
 * Requests live in the worker of their execution: a hash by request id plus
 * one of two FIFO lists, `unsent` (the worker is not ready yet, or restarting)
 * and `inflight` (written to its stdin). Each host request has a `chan`, the
 * only object shared with the host: two atomic counters, references and chunk
 * events not consumed yet. A request whose consumer lags max_chunks events
 * behind has its newer chunks dropped and counted (the pipe is shared by every
 * request, so holding it back would stall the others); the next chunk that is
 * delivered and the final reply say how many were dropped (`missed`).
 */
#include "engine/worker.h"

#include <regex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/idmap.h"
#include "engine/secrets.h"
#include "engine/shepherd_link.h"

/* The defaults of a worker's options are PR_WORKER_DEFAULT_* (PR_WORKER_FIELDS,
 * include/proctor.h): every surface documents and applies the same ones. */
/* Requests pending per worker (written or not): more are rejected, EBUSY. The
 * encoded requests not written yet (the worker is not ready) hold at most
 * PR_PENDING_INPUT_MAX bytes. */
#define MAX_PENDING 65536

typedef struct {
  int refs;    /* atomic: the request + each chunk event not freed yet */
  int pending; /* atomic: chunk events emitted and not freed by the host yet */
} chan_t;

typedef struct wreq {
  pr_queue_t node; /* w->unsent or w->inflight */
  uint64_t rid, session;
  uint64_t deadline; /* uv_now ms; 0 = none */
  uint64_t timeout_ms;
  int sent;
  char *msg; /* the encoded request while unsent */
  size_t len;
  chan_t *chan;                  /* host requests only */
  uint64_t missed, missed_total; /* chunks dropped since the last delivered one / in all */
} wreq_t;

struct pr_worker {
  pr_worker_spec_t spec; /* ready_stderr is not kept (compiled into re) */
  regex_t re;
  int has_re;
  pr_worker_state_t state;
  uint32_t restarts; /* processes started after the first */
  uint32_t streak;   /* restarts since the worker was last healthy */
  int restart_now;   /* pr_worker_restart: the next end restarts at once */
  uint64_t ready_at; /* uv_now when it became ready; 0 = not ready */
  pr_queue_t unsent, inflight;
  size_t ninflight;
  size_t unsent_bytes; /* encoded bytes of the requests in `unsent` */
  pr_idmap_t reqs;     /* rid -> wreq_t, every request of unsent and inflight */
  pr_wparse_cb_t cb;   /* what the protocol parser reports to (arg: the execution) */
  pr_jsonl_t jsonl;    /* jsonl parser state */
  pr_wmp_t *mp;        /* msgpack-rpc parser, or NULL for jsonl */
  char eline[4096];    /* stderr line for the ready pattern */
  size_t elen;
  uv_timer_t backoff, deadline;
  int backoff_open, deadline_open;
  uint64_t stray; /* non-protocol lines/messages, invalid and oversize included */
  uint64_t late;  /* replies/chunks for unknown (canceled, timed out) requests */
};

/* ---- life -------------------------------------------------------------------------- */

static void on_bytes(pr_exec_t *x, int stream, const char *p, size_t n);
static void on_spawned(pr_exec_t *x);
static int on_end(pr_exec_t *x);
static void on_record(const pr_exec_t *x, pr_record_t *r);
static void worker_free(void *sub);
static void on_message(void *arg, pr_worker_msg_t kind, uint64_t rid, char *text, size_t len);
static void on_write(void *arg, const char *p, size_t n);
static void on_mask(void *arg, struct cJSON *j);

static const pr_exec_ops_t worker_ops = {on_bytes, on_spawned, on_end, on_record, worker_free};

#define W(x) ((pr_worker_t *)(x)->sub)

pr_worker_t *pr_worker_of(const pr_exec_t *x) { return x->ops == &worker_ops ? W(x) : NULL; }

int pr_worker_new(const pr_worker_spec_t *s, pr_exec_t *x) {
  if ((unsigned)s->protocol > PR_WP_MSGPACK || (unsigned)s->restart > PR_WR_ALWAYS)
    return PR_EINVAL;
  pr_worker_t *w = calloc(1, sizeof(*w));
  if (w == NULL) return PR_ENOMEM;
  w->spec = *s;
  w->spec.ready_stderr = NULL;
  if (w->spec.max_restarts < 0) w->spec.max_restarts = PR_WORKER_DEFAULT_MAX_RESTARTS;
  if (!w->spec.backoff_ms) w->spec.backoff_ms = PR_WORKER_DEFAULT_BACKOFF_MS;
  if (!w->spec.backoff_max_ms) w->spec.backoff_max_ms = PR_WORKER_DEFAULT_BACKOFF_MAX_MS;
  if (!w->spec.healthy_ms) w->spec.healthy_ms = PR_WORKER_DEFAULT_HEALTHY_MS;
  if (!w->spec.max_chunks) w->spec.max_chunks = PR_WORKER_DEFAULT_MAX_CHUNKS;
  pr_queue_init(&w->unsent);
  pr_queue_init(&w->inflight);
  w->state = PR_WS_STARTING;
  w->cb = (pr_wparse_cb_t){on_message, on_write, on_mask, x};
  pr_jsonl_init(&w->jsonl, &w->cb);
  if (s->ready_stderr) {
    if (regcomp(&w->re, s->ready_stderr, REG_EXTENDED | REG_NOSUB) != 0) {
      free(w);
      return PR_EINVAL;
    }
    w->has_re = 1;
  }
  if (s->protocol == PR_WP_MSGPACK && (w->mp = pr_wmp_new(&w->cb)) == NULL) {
    worker_free(w);
    return PR_ENOMEM;
  }
  x->ops = &worker_ops;
  x->sub = w;
  return 0;
}

static void chan_unref(chan_t *c) {
  if (c && __atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0) free(c);
}

/* A chunk event was consumed (host thread, pr_event_free). */
static void chan_done(void *chan) {
  chan_t *c = chan;
  __atomic_sub_fetch(&c->pending, 1, __ATOMIC_ACQ_REL);
  chan_unref(c);
}

static void req_free(wreq_t *r) {
  free(r->msg);
  chan_unref(r->chan);
  free(r);
}

static void worker_free(void *sub) {
  pr_worker_t *w = sub;
  if (w == NULL) return;
  pr_queue_t *lists[2] = {&w->unsent, &w->inflight};
  for (int i = 0; i < 2; i++)
    while (!pr_queue_empty(lists[i])) {
      pr_queue_t *q = pr_queue_head(lists[i]);
      pr_queue_remove(q);
      req_free(PR_QUEUE_DATA(q, wreq_t, node));
    }
  if (w->has_re) regfree(&w->re);
  pr_wmp_free(w->mp);
  pr_idmap_destroy(&w->reqs);
  pr_jsonl_free(&w->jsonl);
  free(w);
}

/* ---- the request table ------------------------------------------------------------- */

static wreq_t *find(pr_worker_t *w, uint64_t rid) { return pr_idmap_get(&w->reqs, rid); }

static int insert(pr_worker_t *w, wreq_t *r) { return pr_idmap_put(&w->reqs, r->rid, r); }

/* Take `r` out of the table and its list. */
static void unlink_req(pr_worker_t *w, wreq_t *r) {
  pr_idmap_del(&w->reqs, r->rid);
  pr_queue_remove(&r->node);
  if (r->sent) w->ninflight--;
  else w->unsent_bytes -= r->len;
}

/* ---- delivery ---------------------------------------------------------------------- */

static void set_state(pr_exec_t *x, pr_worker_state_t st) {
  pr_worker_t *w = W(x);
  if (w->state == st) return;
  w->state = st;
  pr_notify_worker(x->ctx->ls, x, st, w->restarts);
}

static void update_busy(pr_exec_t *x) {
  pr_worker_t *w = W(x);
  if (w->state == PR_WS_READY || w->state == PR_WS_BUSY)
    set_state(x, w->ninflight ? PR_WS_BUSY : PR_WS_READY);
}

/* Answer one request: the listeners route it (the host queue takes session
 * 0's, the RPC server its sessions'). Takes `text`. */
static void answer(pr_exec_ctx_t *c, uint64_t session, uint64_t id, uint64_t rid, int status,
                   char *text, size_t len, uint64_t missed) {
  pr_wmsg_t m = {.session = session,
                 .id = id,
                 .rid = rid,
                 .status = status,
                 .text = text,
                 .len = len,
                 .missed = missed};
  pr_notify_reply(c->ls, &m);
  free(m.text);
}

static char *fmt(size_t *n, const char *f, ...) __attribute__((format(printf, 2, 3)));
static char *fmt(size_t *n, const char *f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  int k = vsnprintf(buf, sizeof(buf), f, ap);
  va_end(ap);
  if (k < 0) k = 0;
  if ((size_t)k >= sizeof(buf)) k = sizeof(buf) - 1;
  *n = (size_t)k;
  return strndup(buf, (size_t)k);
}

/* Resolve and free request `r` of worker `x`. Takes `text`. */
static void resolve(pr_exec_t *x, wreq_t *r, int status, char *text, size_t len) {
  unlink_req(W(x), r);
  answer(x->ctx, r->session, x->id, r->rid, status, text, len, r->missed_total);
  req_free(r);
}

static void resolve_all(pr_exec_t *x, pr_queue_t *list, int status, const char *why) {
  while (!pr_queue_empty(list)) {
    wreq_t *r = PR_QUEUE_DATA(pr_queue_head(list), wreq_t, node);
    size_t n;
    char *t = fmt(&n, "%s: %s", pr_reply_status_name(status), why);
    resolve(x, r, status, t, n);
  }
}

/* ---- writing to the worker --------------------------------------------------------- */

static int process_up(const pr_exec_t *x) {
  return x->state == PR_RUNNING && !x->exited && !x->respawning && x->verdict < 0;
}

/* Write r to the worker. A request that cannot be written is answered at
 * once (rejected, with why): EBUSY when the worker has not read
 * PR_PENDING_INPUT_MAX bytes of earlier input, or its stdin is gone. Never
 * left in flight unwritten: every request gets exactly one reply. */
static void send_req(pr_exec_t *x, wreq_t *r) {
  pr_worker_t *w = W(x);
  pr_queue_remove(&r->node);
  pr_queue_push(&w->inflight, &r->node);
  r->sent = 1;
  w->ninflight++;
  w->unsent_bytes -= r->len;
  int rc = pr_exec_input(x, r->msg, r->len);
  free(r->msg);
  r->msg = NULL;
  if (rc != 0) {
    size_t n;
    char *m = rc == PR_EBUSY ? fmt(&n, "EBUSY: the worker has not read %zu MiB of earlier requests",
                                   PR_PENDING_INPUT_MAX >> 20)
                             : fmt(&n, "%s: the request could not be written (%s)", pr_err_name(rc),
                                   pr_strerror(rc));
    resolve(x, r, PR_RS_REJECTED, m, n);
  }
}

static void send_cancel(pr_exec_t *x, uint64_t rid) {
  if (!process_up(x)) return;
  size_t n;
  char *m;
  if (W(x)->spec.protocol == PR_WP_MSGPACK) m = pr_wmp_cancel(rid, &n);
  else m = pr_jsonl_cancel(rid, &n);
  if (m) pr_exec_input(x, m, n);
  free(m);
}

static void flush_unsent(pr_exec_t *x) {
  pr_worker_t *w = W(x);
  while (!pr_queue_empty(&w->unsent) && process_up(x))
    send_req(x, PR_QUEUE_DATA(pr_queue_head(&w->unsent), wreq_t, node));
  update_busy(x);
}

static void mark_ready(pr_exec_t *x) {
  W(x)->ready_at = uv_now(x->ctx->loop);
  set_state(x, PR_WS_READY);
  flush_unsent(x);
}

/* ---- timers ------------------------------------------------------------------------- */

static int timer_open(pr_exec_t *x, uv_timer_t *t, int *open) {
  if (*open) return 0;
  if (uv_timer_init(x->ctx->loop, t) != 0) return -1;
  t->data = x; /* closed with pr_exec_handle_closed, like every handle of x */
  x->handles++;
  *open = 1;
  return 0;
}

static void timers_close(pr_exec_t *x) {
  pr_worker_t *w = W(x);
  if (w->backoff_open) {
    w->backoff_open = 0;
    uv_close((uv_handle_t *)&w->backoff, pr_exec_handle_closed);
  }
  if (w->deadline_open) {
    w->deadline_open = 0;
    uv_close((uv_handle_t *)&w->deadline, pr_exec_handle_closed);
  }
}

static void arm_deadline(pr_exec_t *x);

static void on_deadline(uv_timer_t *t) {
  pr_exec_t *x = t->data;
  pr_worker_t *w = W(x);
  uint64_t now = uv_now(x->ctx->loop);
  pr_queue_t *lists[2] = {&w->inflight, &w->unsent};
  for (int i = 0; i < 2; i++) {
    pr_queue_t *q = pr_queue_head(lists[i]);
    while (q != lists[i]) {
      wreq_t *r = PR_QUEUE_DATA(q, wreq_t, node);
      q = q->next;
      if (r->deadline == 0 || r->deadline > now) continue;
      if (r->sent) send_cancel(x, r->rid);
      size_t n;
      char *m = fmt(&n, "timeout: no reply within %llu ms", (unsigned long long)r->timeout_ms);
      resolve(x, r, PR_RS_TIMEOUT, m, n);
    }
  }
  update_busy(x);
  arm_deadline(x);
}

/* Run the deadline timer for the earliest deadline (O(requests), only for
 * workers whose requests have timeouts). */
static void arm_deadline(pr_exec_t *x) {
  pr_worker_t *w = W(x);
  uint64_t min = 0;
  pr_queue_t *q, *lists[2] = {&w->inflight, &w->unsent};
  for (int i = 0; i < 2; i++) PR_QUEUE_FOREACH(q, lists[i]) {
      wreq_t *r = PR_QUEUE_DATA(q, wreq_t, node);
      if (r->deadline && (min == 0 || r->deadline < min)) min = r->deadline;
    }
  if (min == 0) {
    if (w->deadline_open) uv_timer_stop(&w->deadline);
    return;
  }
  if (timer_open(x, &w->deadline, &w->deadline_open) != 0) return;
  uint64_t now = uv_now(x->ctx->loop);
  uv_timer_start(&w->deadline, on_deadline, min > now ? min - now : 0, 0);
}

/* ---- commands ------------------------------------------------------------------------ */

void pr_worker_request(pr_exec_ctx_t *c, pr_exec_t *x, uint64_t session, uint64_t id, uint64_t rid,
                       const char *json, size_t len, uint64_t timeout_ms) {
  size_t n;
  char *m;
  if (x == NULL || pr_worker_of(x) == NULL) {
    int err = x ? PR_ENOTWORKER : PR_ENOENT;
    m = fmt(&n, "%s: %s %llu", pr_err_name(err), pr_strerror(err), (unsigned long long)id);
    answer(c, session, id, rid, PR_RS_REJECTED, m, n, 0);
    return;
  }
  pr_worker_t *w = W(x);
  if (x->finished || x->verdict == PR_CANCELED || x->verdict == PR_TIMED_OUT) {
    int fatal = w->state == PR_WS_FATAL;
    if (fatal)
      m = fmt(&n, "worker_fatal: worker %llu reached its restart limit (%d in a row)",
              (unsigned long long)id, (int)w->spec.max_restarts);
    else
      m = fmt(&n, "worker_stopped: worker %llu has ended (%s)", (unsigned long long)id,
              x->reason ? x->reason : "stopping");
    answer(c, session, id, rid, fatal ? PR_RS_WORKER_FATAL : PR_RS_REJECTED, m, n, 0);
    return;
  }
  wreq_t *r = calloc(1, sizeof(*r));
  int err = PR_ENOMEM;
  if (r == NULL) goto fail;
  if (w->reqs.count >= MAX_PENDING) {
    err = PR_EBUSY;
    goto fail;
  }
  r->rid = rid;
  r->session = session;
  if (w->spec.protocol == PR_WP_MSGPACK) r->msg = pr_wmp_request(rid, json, len, &r->len, &err);
  else r->msg = pr_jsonl_request(rid, json, len, &r->len);
  if (r->msg == NULL) goto fail;
  if (session == 0) {
    if ((r->chan = calloc(1, sizeof(chan_t))) == NULL) goto fail;
    r->chan->refs = 1;
  }
  if (w->unsent_bytes + r->len > PR_PENDING_INPUT_MAX && w->state != PR_WS_READY &&
      w->state != PR_WS_BUSY) {
    err = PR_EBUSY;
    goto fail;
  }
  if (insert(w, r) != 0) goto fail;
  pr_queue_push(&w->unsent, &r->node);
  w->unsent_bytes += r->len;
  if (timeout_ms) {
    r->timeout_ms = timeout_ms;
    r->deadline = uv_now(c->loop) + timeout_ms;
    if (!w->deadline_open || uv_timer_get_due_in(&w->deadline) == 0 ||
        uv_timer_get_due_in(&w->deadline) > timeout_ms)
      arm_deadline(x);
  }
  if (w->state == PR_WS_READY || w->state == PR_WS_BUSY) {
    send_req(x, r);
    update_busy(x);
  }
  return;
fail:
  if (r) req_free(r);
  m = err == PR_EBUSY
          ? fmt(&n,
                "EBUSY: %u requests, or %zu MiB of requests not yet written, wait for worker %llu",
                MAX_PENDING, PR_PENDING_INPUT_MAX >> 20, (unsigned long long)id)
          : fmt(&n, "%s: %s", pr_err_name(err),
                err == PR_EINVAL ? "payload is not valid JSON" : pr_strerror(err));
  answer(c, session, id, rid, PR_RS_REJECTED, m, n, 0);
}

int pr_worker_holds(const pr_exec_t *x, uint64_t rid) {
  return pr_worker_of(x) && !x->finished && find(W(x), rid) != NULL;
}

int pr_worker_cancel_request(pr_exec_t *x, uint64_t session, uint64_t rid) {
  wreq_t *r = pr_worker_holds(x, rid) ? find(W(x), rid) : NULL;
  if (r == NULL || (session && r->session != session)) return PR_ENOENT;
  if (r->sent) send_cancel(x, rid);
  size_t n;
  char *m = fmt(&n, "canceled");
  resolve(x, r, PR_RS_CANCELED, m, n);
  update_busy(x);
  return 0;
}

void pr_worker_session_closed(pr_exec_t *x, uint64_t session) {
  pr_worker_t *w = pr_worker_of(x);
  if (w == NULL || x->finished) return;
  pr_queue_t *lists[2] = {&w->inflight, &w->unsent};
  for (int i = 0; i < 2; i++) {
    pr_queue_t *k = pr_queue_head(lists[i]);
    while (k != lists[i]) {
      wreq_t *r = PR_QUEUE_DATA(k, wreq_t, node);
      k = k->next;
      if (r->session != session) continue;
      if (r->sent) send_cancel(x, r->rid);
      unlink_req(w, r);
      req_free(r);
    }
  }
  update_busy(x);
}

static void respawn(pr_exec_t *x) {
  pr_worker_t *w = W(x);
  w->ready_at = 0;
  set_state(x, PR_WS_STARTING);
  pr_exec_respawn(x); /* may end x at once (no shepherd): on_end runs */
}

static void on_backoff(uv_timer_t *t) {
  pr_exec_t *x = t->data;
  if (x->finished || !x->exited || x->verdict >= 0) return;
  W(x)->restarts++;
  respawn(x);
}

int pr_worker_restart(pr_exec_t *x) {
  pr_worker_t *w = pr_worker_of(x);
  if (w == NULL) return PR_ENOTWORKER;
  if (x->finished || x->state != PR_RUNNING || x->verdict >= 0) return PR_ENOTRUNNING;
  if (x->respawning) return 0; /* a new process is on its way */
  if (x->exited) {             /* in backoff: now */
    if (w->backoff_open) uv_timer_stop(&w->backoff);
    w->restarts++;
    respawn(x);
    return 0;
  }
  w->restart_now = 1;
  set_state(x, PR_WS_STARTING); /* new requests wait for the new process */
  pr_sup_send(x->ctx->sup, PR_W_SIGNAL, 0, x->id, SIGTERM, 0, NULL, 0);
  return 0;
}

/* ---- the execution's ops ------------------------------------------------------------ */

static void on_spawned(pr_exec_t *x) {
  pr_worker_t *w = W(x);
  pr_jsonl_reset(&w->jsonl);
  w->elen = 0;
  if (w->mp) {
    pr_wmp_free(w->mp);
    w->mp = pr_wmp_new(&w->cb);
  }
  w->state = PR_WS_BACKOFF; /* force the event below, also for the first process */
  set_state(x, PR_WS_STARTING);
  if (!w->spec.ready_message && !w->has_re) mark_ready(x);
}

static int on_end(pr_exec_t *x) {
  pr_worker_t *w = W(x);
  pr_exec_ctx_t *c = x->ctx;
  pr_jsonl_reset(&w->jsonl);
  resolve_all(x, &w->inflight, PR_RS_WORKER_EXITED, "the worker process ended");
  int ran = x->state == PR_RUNNING;
  int ended = x->verdict == PR_COMPLETED || x->verdict == PR_FAILED;
  int lost = x->reason && strcmp(x->reason, "supervisor_lost") == 0;
  int restart = 0;
  if (ran && ended && !lost && !c->closing) {
    restart = w->restart_now || w->spec.restart == PR_WR_ALWAYS ||
              (w->spec.restart == PR_WR_ON_FAILURE && x->verdict == PR_FAILED);
  }
  uint64_t now = uv_now(c->loop);
  if (restart && !w->restart_now) {
    /* The restart policy (|proctor-restart-policy|, the same in the task layer): a success, or a
     * process ready for healthy_ms, starts the count again; the limit is count >= max_restarts. */
    if (x->verdict == PR_COMPLETED || (w->ready_at && now - w->ready_at >= w->spec.healthy_ms))
      w->streak = 0;
    if (w->streak >= (uint32_t)w->spec.max_restarts) { /* fatal: the execution ends */
      set_state(x, PR_WS_FATAL);
      resolve_all(x, &w->unsent, PR_RS_WORKER_FATAL, "the worker reached its restart limit");
      x->verdict = PR_FAILED;
      free(x->reason);
      x->reason = strdup("worker_fatal");
      size_t n;
      free(x->error);
      x->error = fmt(&n, "worker_fatal: %u restarts in a row without %u ms of healthy running",
                     w->streak, w->spec.healthy_ms);
      timers_close(x);
      return 0;
    }
  }
  if (!restart) {
    int fatal = !ran && x->verdict == PR_FAILED; /* it never ran (spawn error) */
    set_state(x, fatal ? PR_WS_FATAL : PR_WS_STOPPED);
    resolve_all(x, &w->unsent, fatal ? PR_RS_WORKER_FATAL : PR_RS_REJECTED, "the worker has ended");
    timers_close(x);
    return 0;
  }
  uint64_t delay = 1; /* >= 1 ms: the old stream handles finish closing first */
  if (!w->restart_now) {
    delay = w->spec.backoff_ms;
    for (uint32_t i = 0; i < w->streak && delay < w->spec.backoff_max_ms; i++) delay *= 2;
    if (delay > w->spec.backoff_max_ms) delay = w->spec.backoff_max_ms;
    if (delay == 0) delay = 1;
    w->streak++;
  }
  w->restart_now = 0;
  pr_exec_park(x);
  set_state(x, PR_WS_BACKOFF);
  if (timer_open(x, &w->backoff, &w->backoff_open) == 0)
    uv_timer_start(&w->backoff, on_backoff, delay, 0);
  return 1;
}

static void on_record(const pr_exec_t *x, pr_record_t *r) {
  const pr_worker_t *w = W(x);
  r->worker_state = w->state;
  r->worker_restarts = w->restarts;
  r->worker_pending = w->reqs.count;
  r->worker_stray = w->stray;
}

/* ---- messages ------------------------------------------------------------------------- */

/* What the protocol parser read (arg: the execution). */
static void on_message(void *arg, pr_worker_msg_t kind, uint64_t rid, char *text, size_t len) {
  pr_exec_t *x = arg;
  pr_worker_t *w = W(x);
  if (kind >= PR_WM_STRAY) w->stray++;
  if (w->state == PR_WS_STARTING && w->spec.ready_message && kind <= PR_WM_STRAY && !w->restart_now)
    mark_ready(x);
  if (kind == PR_WM_READY || kind >= PR_WM_STRAY) {
    free(text);
    return;
  }
  wreq_t *r = find(w, rid);
  if (r == NULL || !r->sent) { /* canceled, timed out, or never asked: dropped */
    w->late++;
    free(text);
    return;
  }
  if (kind == PR_WM_CHUNK) {
    pr_wmsg_t m = {.session = r->session, .id = x->id, .rid = rid, .text = text, .len = len};
    if (r->chan) { /* the host's: at most max_chunks undelivered, the newer ones are counted */
      if ((uint32_t)__atomic_load_n(&r->chan->pending, __ATOMIC_ACQUIRE) >= w->spec.max_chunks) {
        r->missed++;
        r->missed_total++;
        free(text);
        return;
      }
      __atomic_add_fetch(&r->chan->pending, 1, __ATOMIC_ACQ_REL);
      __atomic_add_fetch(&r->chan->refs, 1, __ATOMIC_ACQ_REL);
      m.chan = r->chan;
      m.chan_done = chan_done;
      m.missed = r->missed;
      r->missed = 0;
    }
    pr_notify_chunk(x->ctx->ls, &m);
    if (m.chan) chan_done(m.chan); /* nobody took it */
    free(m.text);
    return;
  }
  resolve(x, r, kind == PR_WM_OK ? PR_RS_OK : PR_RS_ERROR, text, len);
  update_busy(x);
}

static void stderr_feed(pr_exec_t *x, const char *p, size_t n) {
  pr_worker_t *w = W(x);
  for (size_t i = 0; i < n && w->state == PR_WS_STARTING; i++) {
    if (p[i] != '\n' && w->elen < sizeof(w->eline) - 1) {
      w->eline[w->elen++] = p[i];
      continue;
    }
    w->eline[w->elen] = 0;
    w->elen = 0;
    if (regexec(&w->re, w->eline, 0, NULL, 0) == 0) mark_ready(x);
  }
}

static void on_write(void *arg, const char *p, size_t n) { pr_exec_input(arg, p, n); }

static void on_mask(void *arg, struct cJSON *j) {
  pr_secrets_mask_json(((pr_exec_t *)arg)->secrets, j);
}

static void on_bytes(pr_exec_t *x, int stream, const char *p, size_t n) {
  pr_worker_t *w = W(x);
  if (stream == PR_STDERR) {
    if (w->has_re && w->state == PR_WS_STARTING) stderr_feed(x, p, n);
    return;
  }
  if (stream != PR_STDOUT) return;
  if (w->mp) pr_wmp_feed(w->mp, p, n);
  else pr_jsonl_feed(&w->jsonl, p, n);
}
