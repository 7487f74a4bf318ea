/* engine/hostq.c — the host's event queue and the listener that fills it.
 *
 * Thread: see hostq.h. Only plain data crosses: events own their strings; an
 * output event holds a reference to its ring (base/ring.h, locked) and the
 * bytes are copied out on the host thread by pr_hostq_poll.
 */
#include "engine/hostq.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/idmap.h"
#include "engine/exec.h"

/* Output delivery is adaptive. The first bytes after a quiet period are
 * signalled to the host at once (a prompt feels instant); bytes that keep
 * arriving within PR_FLOOD_NS of the last signal wait for the 1 ms flush
 * timer, so under a flood the host wakes about once a millisecond and takes
 * everything that arrived meanwhile in one event, instead of once per read.
 * Every deferred marker is pushed before its execution's terminal event. */
#define PR_FLOOD_NS 1000000

/* An uncapped poll (max_bytes 0) hands a stream's bytes over in order, none
 * skipped, at most PR_TAKE_CHUNK an event, and ends once it handed over that
 * much: the rest comes with the next poll (its marker goes back to the front
 * of the queue, with the events behind it, and the queue stays readable). So
 * a poll still has one output event per stream. One event for everything
 * would be as large as what piled up since the last poll (up to output_limit):
 * a fresh buffer, and a fresh host string, that large each poll, whose pages
 * the kernel faults in one by one (on a paravirtualised machine ~24 us a
 * 4 KiB page, more than copying it): a host that fell behind fell further
 * behind with every poll, and the ring dropped. */
#define PR_TAKE_CHUNK (256u << 10)

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

static size_t str_bytes(const char *s) { return s ? strlen(s) + 1 : 0; }

/* The heap bytes a queued event holds: itself, its strings, its record, a
 * chunk's or reply's text (an output marker's bytes are its ring's). */
static size_t ev_bytes(const pr_event_t *ev) {
  size_t n = sizeof(*ev) + str_bytes(ev->reason) + str_bytes(ev->error) + ev->len;
  const pr_record_t *r = ev->record;
  if (r == NULL) return n;
  n += sizeof(*r) + str_bytes(r->label) + str_bytes(r->owner) + str_bytes(r->cwd) +
       str_bytes(r->target) + str_bytes(r->shell) + str_bytes(r->reason) + str_bytes(r->error) +
       r->env_keys_len;
  if (r->argv) n += (r->argc + 1) * sizeof(char *);
  for (size_t i = 0; r->argv && i < r->argc; i++) n += str_bytes(r->argv[i]);
  return n;
}

/* ---- the queue (engine thread pushes, host pops) ------------------------------------ */

/* Past PR_HOST_EVENTS_BYTES (a host that does not poll), a state event
 * replaces the state event of its execution still queued, if any: at the
 * tail, behind the output pushed meanwhile, with the `prev` the host has not
 * seen yet. A terminal event is never replaced (it is an execution's last).
 * The new event keeps its record (the latest: never the replaced one's) when
 * the replaced event had one, whose place it takes (two records of one
 * execution differ by a few strings), or when it still fits under the bound;
 * else it comes without (the host reads it with pr_engine_get). */
static void bound_state(pr_hostq_t *q, pr_event_t *ev) {
  if (q->bytes + ev_bytes(ev) <= PR_HOST_EVENTS_BYTES) return;
  pr_event_t *old = pr_idmap_get(&q->states, ev->id);
  int had = 0;
  if (old != NULL && !pr_state_terminal(old->state)) {
    had = old->record != NULL;
    ev->prev = old->prev;
    pr_queue_remove((pr_queue_t *)old->priv);
    q->nevents--;
    q->bytes -= ev_bytes(old);
    pr_idmap_del(&q->states, ev->id);
    pr_event_free(old);
  }
  if (had || q->bytes + ev_bytes(ev) <= PR_HOST_EVENTS_BYTES) return;
  pr_record_free(ev->record);
  ev->record = NULL;
}

/* The key of an output marker in q->outputs: its execution and stream. */
static uint64_t out_key(uint64_t id, int stream) { return id * PR_NSTREAM + (uint64_t)stream; }

static void push(pr_hostq_t *q, pr_event_t *ev) {
  pr_queue_t *node = (pr_queue_t *)ev->priv;
  pthread_mutex_lock(&q->mu);
  if (ev->type == PR_EV_STATE) {
    bound_state(q, ev);
    pr_idmap_put(&q->states, ev->id, ev); /* out of memory: no coalescing for it */
  } else if (ev->type == PR_EV_OUTPUT) {
    pr_idmap_put(&q->outputs, out_key(ev->id, ev->stream),
                 ev); /* out of memory: it keeps its ring */
  }
  int was_empty = pr_queue_empty(&q->events);
  pr_queue_push(&q->events, node);
  q->nevents++;
  q->bytes += ev_bytes(ev);
  if (was_empty) {
    uint64_t one = 1;
    ssize_t w = write(q->wakefd, &one, sizeof(one));
    (void)w;
  }
  pthread_mutex_unlock(&q->mu);
}

/* Off the queue (mu held): its bytes, and its execution's newest state event. */
static void taken(pr_hostq_t *q, pr_event_t *ev) {
  q->nevents--;
  q->bytes -= ev_bytes(ev);
  if (ev->type == PR_EV_STATE && pr_idmap_get(&q->states, ev->id) == ev)
    pr_idmap_del(&q->states, ev->id);
  if (ev->type == PR_EV_OUTPUT && pr_idmap_get(&q->outputs, out_key(ev->id, ev->stream)) == ev)
    pr_idmap_del(&q->outputs, out_key(ev->id, ev->stream));
}

/* Back on the queue after a poll (mu held), at `at`'s place. */
static void put_back(pr_hostq_t *q, pr_queue_t *first, pr_event_t *ev) {
  pr_queue_push(first, (pr_queue_t *)ev->priv);
  q->nevents++;
  q->bytes += ev_bytes(ev);
  if (ev->type == PR_EV_STATE && pr_idmap_get(&q->states, ev->id) == NULL)
    pr_idmap_put(&q->states, ev->id, ev);
  if (ev->type == PR_EV_OUTPUT && ev->ring &&
      pr_idmap_get(&q->outputs, out_key(ev->id, ev->stream)) == NULL)
    pr_idmap_put(&q->outputs, out_key(ev->id, ev->stream), ev);
}

/* ---- output markers ---------------------------------------------------------------- */

static void push_marker(pr_hostq_t *q, pr_exec_t *x, int stream) {
  pr_stream_t *s = &x->streams[stream];
  s->last_mark_ns = uv_hrtime();
  if (!pr_ring_mark(s->ring)) return; /* a marker is already queued: coalesce */
  pr_event_t *ev = calloc(1, sizeof(*ev));
  if (ev == NULL) return;
  ev->type = PR_EV_OUTPUT;
  ev->id = x->id;
  ev->stream = stream;
  pr_ring_ref(s->ring);
  ev->ring = s->ring;
  push(q, ev);
}

/* Push the deferred marker of `s` now, if it has one. */
static void flush_stream(pr_hostq_t *q, pr_stream_t *s) {
  if (pr_queue_empty(&s->defer)) return;
  pr_queue_remove(&s->defer);
  push_marker(q, s->exec, (int)(s - s->exec->streams));
}

static void on_flush(uv_timer_t *t) {
  pr_hostq_t *q = (pr_hostq_t *)t->data;
  while (!pr_queue_empty(&q->deferred))
    flush_stream(q, PR_QUEUE_DATA(pr_queue_head(&q->deferred), pr_stream_t, defer));
}

static void on_output(void *arg, pr_exec_t *x, int stream) {
  pr_hostq_t *q = arg;
  pr_stream_t *s = &x->streams[stream];
  if (!pr_queue_empty(&s->defer)) return; /* the flush timer will signal it */
  if (s->last_mark_ns && uv_hrtime() - s->last_mark_ns < PR_FLOOD_NS) {
    pr_queue_push(&q->deferred, &s->defer);
    if (!uv_is_active((uv_handle_t *)&q->flush_timer))
      uv_timer_start(&q->flush_timer, on_flush, 1, 0);
    return;
  }
  push_marker(q, x, stream);
}

/* ---- the other events ----------------------------------------------------------------- */

static void on_state(void *arg, const pr_state_info_t *st) {
  pr_hostq_t *q = arg;
  if (pr_state_terminal(st->state)) /* every output event precedes the terminal one */
    for (int i = 0; i < PR_NSTREAM; i++) flush_stream(q, &st->x->streams[i]);
  pr_event_t *ev = calloc(1, sizeof(*ev));
  if (ev == NULL) return;
  ev->type = PR_EV_STATE;
  ev->id = st->id;
  ev->state = st->state;
  ev->prev = st->prev;
  ev->reason = dup_or_null(st->reason);
  ev->error = dup_or_null(st->error);
  ev->exit_code = st->exit_code;
  ev->signal = st->signal;
  ev->pid = st->pid;
  /* the record an on_exit gets comes with the event: the host's drain never
   * waits for this thread (which may be busy starting a fan-out) to ask for
   * it; and so does any state's, when the host asked (pr_hostq_records) */
  if (pr_state_terminal(st->state) || __atomic_load_n(&q->records, __ATOMIC_ACQUIRE))
    ev->record = pr_exec_snapshot(st->x);
  push(q, ev);
}

static void on_worker(void *arg, const pr_exec_t *x, int wstate, uint32_t restarts) {
  pr_event_t *ev = calloc(1, sizeof(*ev));
  if (ev == NULL) return;
  ev->type = PR_EV_WORKER;
  ev->id = x->id;
  ev->worker_state = wstate;
  ev->restarts = restarts;
  push(arg, ev);
}

/* A worker's chunk or reply for the host (session 0): the event takes the text. */
static void deliver(pr_hostq_t *q, pr_event_type_t type, pr_wmsg_t *m) {
  if (m->session != 0) return;
  pr_event_t *ev = calloc(1, sizeof(*ev));
  if (ev == NULL) return;
  ev->type = type;
  ev->id = m->id;
  ev->rid = m->rid;
  ev->status = m->status;
  ev->data = m->text;
  ev->len = m->len;
  ev->missed = m->missed;
  ev->chan = m->chan;
  ev->chan_done = m->chan_done;
  m->text = NULL;
  m->chan = NULL;
  push(q, ev);
}

/* An execution leaves the registry (retention, delete, purge): a marker still
 * queued for one of its streams gives its ring up, else the ring's bytes
 * (up to output_limit each) would stay alive outside PR_HOST_EVENTS_BYTES
 * for as long as the host does not poll, one ring per execution that ended.
 * The event takes the last bytes that fit under the bound (at least one, at
 * most PR_TAKE_CHUNK) and the rest counts as missed: nothing of the
 * execution can be read again. */
static void on_removed(void *arg, const pr_exec_t *x) {
  pr_hostq_t *q = arg;
  pthread_mutex_lock(&q->mu);
  for (int i = 0; i < PR_NSTREAM; i++) {
    pr_event_t *ev = pr_idmap_del(&q->outputs, out_key(x->id, i));
    if (ev == NULL || ev->ring == NULL) continue;
    pr_ring_t *r = (pr_ring_t *)ev->ring;
    size_t had = ev_bytes(ev), room = 1;
    if (q->bytes < PR_HOST_EVENTS_BYTES && PR_HOST_EVENTS_BYTES - q->bytes > room)
      room = PR_HOST_EVENTS_BYTES - q->bytes;
    if (room > PR_TAKE_CHUNK) room = PR_TAKE_CHUNK; /* an uncapped poll's most per event */
    int resume;
    if (pr_ring_take_tail(r, room, &ev->data, &ev->len, &ev->offset, &ev->missed, &resume) != 0)
      ev->data = NULL, ev->len = 0, ev->missed = 0; /* freed by the poll that finds it */
    ev->ring = NULL;
    pr_ring_unref(r);
    q->bytes += ev_bytes(ev) - had;
  }
  pthread_mutex_unlock(&q->mu);
}

static void on_chunk(void *arg, pr_wmsg_t *m) { deliver(arg, PR_EV_CHUNK, m); }

static void on_reply(void *arg, pr_wmsg_t *m) { deliver(arg, PR_EV_REPLY, m); }

/* ---- life ----------------------------------------------------------------------------- */

int pr_hostq_init(pr_hostq_t *q, uv_loop_t *loop, void (*resume)(void *, uint64_t), void *arg) {
  memset(q, 0, sizeof(*q));
  q->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (q->wakefd < 0) return -errno;
  int rc = uv_timer_init(loop, &q->flush_timer);
  if (rc != 0) {
    close(q->wakefd);
    return rc;
  }
  q->flush_timer.data = q;
  pthread_mutex_init(&q->mu, NULL);
  pr_queue_init(&q->events);
  pr_queue_init(&q->deferred);
  pr_idmap_init(&q->states);
  pr_idmap_init(&q->outputs);
  q->resume = resume;
  q->resume_arg = arg;
  q->listener = (pr_listener_t){.state = on_state,
                                .output = on_output,
                                .worker = on_worker,
                                .chunk = on_chunk,
                                .reply = on_reply,
                                .removed = on_removed,
                                .arg = q};
  return 0;
}

void pr_hostq_close(pr_hostq_t *q) {
  uv_handle_t *h = (uv_handle_t *)&q->flush_timer;
  if (h->loop && !uv_is_closing(h)) uv_close(h, NULL);
}

void pr_hostq_destroy(pr_hostq_t *q) {
  while (!pr_queue_empty(&q->events)) {
    pr_queue_t *n = pr_queue_head(&q->events);
    pr_queue_remove(n);
    pr_event_free((pr_event_t *)(void *)n);
  }
  pr_idmap_destroy(&q->states);
  pr_idmap_destroy(&q->outputs);
  close(q->wakefd);
  pthread_mutex_destroy(&q->mu);
}

/* ---- host thread ---------------------------------------------------------------------- */

int pr_hostq_records(pr_hostq_t *q, int on) {
  return __atomic_exchange_n(&q->records, on ? 1 : 0, __ATOMIC_ACQ_REL);
}

/* The marker for the bytes an uncapped take left in `ev`'s ring (the ring's
 * marker flag is still set), or NULL when out of memory. */
static pr_event_t *marker_after(const pr_event_t *ev) {
  pr_event_t *m = calloc(1, sizeof(*m));
  if (m == NULL) return NULL;
  m->type = PR_EV_OUTPUT;
  m->id = ev->id;
  m->stream = ev->stream;
  pr_ring_ref((pr_ring_t *)ev->ring);
  m->ring = ev->ring;
  return m;
}

/* Copy an output marker's bytes out of its ring (host thread, no lock held).
 * Returns 0 when the event carries something, else -1 (the caller frees it). */
static int take(pr_hostq_t *q, pr_event_t *ev, size_t max_bytes, pr_queue_t *rest) {
  int resume = 0, more = 0, rc;
  pr_ring_t *r = (pr_ring_t *)ev->ring;
  if (max_bytes)
    rc = pr_ring_take_tail(r, max_bytes, &ev->data, &ev->len, &ev->offset, &ev->missed, &resume);
  else
    rc = pr_ring_take_head(r, PR_TAKE_CHUNK, &ev->data, &ev->len, &ev->offset, &ev->missed, &resume,
                           &more);
  if (resume) q->resume(q->resume_arg, ev->id); /* back-pressure: the engine paused it */
  pr_event_t *m = more ? marker_after(ev) : NULL;
  if (m) pr_queue_push(pr_queue_head(rest), (pr_queue_t *)m->priv); /* next in line */
  return rc != 0 || (ev->len == 0 && ev->missed == 0) ? -1 : 0;     /* else: coalesced */
}

/* An output event whose execution left the registry (on_removed) carries its
 * bytes: cut to the last max_bytes (> 0) as take would, the rest missed.
 * Returns 0 when it carries something, else -1 (the caller frees it). */
static int kept(pr_event_t *ev, size_t max_bytes) {
  if (max_bytes && ev->len > max_bytes) {
    size_t cut = ev->len - max_bytes;
    memmove(ev->data, ev->data + cut, max_bytes);
    ev->len = max_bytes;
    ev->offset += cut;
    ev->missed += cut;
  }
  return ev->len == 0 && ev->missed == 0 ? -1 : 0;
}

size_t pr_hostq_poll(pr_hostq_t *q, pr_event_t **evs, size_t max, size_t max_bytes) {
  pr_queue_t got;
  pr_queue_init(&got);
  pthread_mutex_lock(&q->mu);
  for (size_t n = 0; n < max && !pr_queue_empty(&q->events); n++) {
    pr_queue_t *node = pr_queue_head(&q->events);
    pr_queue_remove(node);
    taken(q, (pr_event_t *)(void *)node);
    pr_queue_push(&got, node);
  }
  if (pr_queue_empty(&q->events)) { /* reset readability */
    uint64_t v;
    ssize_t r = read(q->wakefd, &v, sizeof(v));
    (void)r;
  }
  pthread_mutex_unlock(&q->mu);
  /* Output markers become data here, outside the queue lock. */
  size_t out = 0, bytes = 0;
  while (out < max && !pr_queue_empty(&got) && (max_bytes || bytes < PR_TAKE_CHUNK)) {
    pr_queue_t *node = pr_queue_head(&got);
    pr_queue_remove(node);
    pr_event_t *ev = (pr_event_t *)(void *)node;
    if (ev->type == PR_EV_OUTPUT &&
        (ev->ring ? take(q, ev, max_bytes, &got) : kept(ev, max_bytes))) {
      pr_event_free(ev);
      continue;
    }
    bytes += ev->type == PR_EV_OUTPUT ? ev->len : 0;
    evs[out++] = ev;
  }
  if (!pr_queue_empty(&got)) { /* no room or bytes left: back to the front, in order */
    pthread_mutex_lock(&q->mu);
    pr_queue_t *first = pr_queue_head(&q->events);
    while (!pr_queue_empty(&got)) {
      pr_queue_t *node = pr_queue_head(&got);
      pr_queue_remove(node);
      put_back(q, first, (pr_event_t *)(void *)node);
    }
    uint64_t one = 1;
    ssize_t w = write(q->wakefd, &one, sizeof(one));
    (void)w;
    pthread_mutex_unlock(&q->mu);
  }
  return out;
}

int pr_hostq_wait(pr_hostq_t *q, int timeout_ms) {
  struct pollfd p = {q->wakefd, POLLIN, 0};
  int r;
  do r = poll(&p, 1, timeout_ms);
  while (r < 0 && errno == EINTR);
  return r > 0;
}

void pr_hostq_held(pr_hostq_t *q, size_t *n, size_t *bytes) {
  *n = *bytes = 0;
  pthread_mutex_lock(&q->mu);
  for (pr_queue_t *at = pr_queue_head(&q->events); at != &q->events; at = at->next) {
    const pr_event_t *ev = (const pr_event_t *)(const void *)at;
    (*n)++;
    *bytes += ev_bytes(ev);
    if (ev->ring) *bytes += pr_ring_retained((pr_ring_t *)ev->ring);
  }
  pthread_mutex_unlock(&q->mu);
}

void pr_hostq_hold(pr_hostq_t *q) { pthread_mutex_lock(&q->mu); }

void pr_hostq_unhold(pr_hostq_t *q) { pthread_mutex_unlock(&q->mu); }
