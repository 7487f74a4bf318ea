/* rpc/conn.c — one connection's bytes: framing, the unpacker, the pump,
 * the bounded send queue, subscriptions and waits.
 *
 * Thread: engine.
 *
 *   on_read ─► unpacker buffer ─► pr_mp_scan (base/mpscan.c: limits; counts framed messages) ─► kick
 *   pump turn:  ≤ PR_RPC_BATCH × (msgpack_unpacker_next ─► pr_rpc_dispatch)
 *               dirty subscriptions: states, then ring bytes from sub->off, then the
 *                 terminal state — while queued + unsent < PR_RPC_SENDQ
 *               ready waits ─► responses, while queued + unsent < PR_RPC_SENDQ
 *               flush: one uv_write owning its bytes; on_write ─► kick
 *
 * Back-pressure: a client that does not read makes `queued` grow; output is
 * then no longer pulled (its subscriptions lag, the rings drop the oldest
 * bytes and the next notification reports them as `missed`), and past
 * PR_RPC_SENDQ_HARD its requests are no longer read. Nothing it does stalls
 * the loop, other connections or the host.
 */
#include <stdlib.h>
#include <string.h>

#include "rpc/conn.h"

/* ---- connection state --------------------------------------------------------------- */

int pr_rpc_conn_init(pr_rpc_conn_t *c) {
  msgpack_sbuffer_init(&c->out);
  msgpack_packer_init(&c->pk, &c->out, msgpack_sbuffer_write);
  msgpack_sbuffer_init(&c->resp);
  msgpack_packer_init(&c->rpk, &c->resp, msgpack_sbuffer_write);
  pr_mp_scan_init(&c->scan, PR_RPC_MAX_MESSAGE, PR_RPC_MAX_OBJECTS, PR_RPC_MAX_DEPTH);
  if (!msgpack_unpacker_init(&c->up, 64u << 10)) return PR_ENOMEM;
  c->up_init = 1;
  return 0;
}

void pr_rpc_conn_destroy(pr_rpc_conn_t *c) {
  if (c->up_init) msgpack_unpacker_destroy(&c->up);
  c->up_init = 0;
  msgpack_sbuffer_destroy(&c->out);
  msgpack_sbuffer_destroy(&c->resp);
  free(c->kod);
  c->kod = NULL;
}

/* ---- reading ------------------------------------------------------------------------ */

static void on_read(uv_stream_t *h, ssize_t nread, const uv_buf_t *buf);

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  pr_rpc_conn_t *c = (pr_rpc_conn_t *)h->data;
  if (!msgpack_unpacker_reserve_buffer(&c->up, 64u << 10)) { /* read gets UV_ENOBUFS */
    buf->base = NULL;
    buf->len = 0;
    return;
  }
  buf->base = msgpack_unpacker_buffer(&c->up);
  buf->len = msgpack_unpacker_buffer_capacity(&c->up);
}

/* Read while nothing holds us back: a backlog of framed requests, a full
 * send queue, EOF or a protocol error. */
static void update_reading(pr_rpc_conn_t *c) {
  if (c->virt) return;
  int want = !c->closing && !c->eof && !c->bad && c->queued < PR_RPC_SENDQ_HARD &&
             !(c->ready > 0 && c->scan_lead > PR_RPC_BACKLOG);
  if (want && !c->reading) {
    if (uv_read_start((uv_stream_t *)&c->pipe, on_alloc, on_read) == 0) c->reading = 1;
  } else if (!want && c->reading) {
    uv_read_stop((uv_stream_t *)&c->pipe);
    c->reading = 0;
  }
}

int pr_rpc_conn_start_read(pr_rpc_conn_t *c) {
  update_reading(c);
  return c->reading ? 0 : PR_ENOMEM;
}

void pr_rpc_conn_received(pr_rpc_conn_t *c, size_t n) {
  (void)n;
  if (c->bad || c->closing) return; /* nothing after a protocol error is looked at */
  const unsigned char *p = (const unsigned char *)c->up.buffer + c->up.off + c->scan_lead;
  size_t avail = c->up.used - c->up.off - c->scan_lead, used = 0;
  unsigned done = 0;
  int rc = pr_mp_scan(&c->scan, p, avail, &used, &done);
  c->scan_lead += used;
  c->ready += done;
  if (rc != 0) {
    c->bad = rc;
    c->bad_msgid = c->scan.msgid;
  }
  update_reading(c);
  pr_rpc_kick(c);
}

static void on_read(uv_stream_t *h, ssize_t nread, const uv_buf_t *buf) {
  (void)buf;
  pr_rpc_conn_t *c = (pr_rpc_conn_t *)h->data;
  if (nread > 0) {
    msgpack_unpacker_buffer_consumed(&c->up, (size_t)nread);
    pr_rpc_conn_received(c, (size_t)nread);
  } else if (nread < 0) { /* EOF or error: answer what is framed, then close */
    c->eof = 1;
    update_reading(c);
    pr_rpc_kick(c);
  }
}

/* ---- writing ------------------------------------------------------------------------ */

typedef struct {
  uv_write_t req;
  char *data;
  size_t len;
} wreq_t;

static void on_write(uv_write_t *req, int status) {
  wreq_t *w = (wreq_t *)req;
  pr_rpc_conn_t *c = (pr_rpc_conn_t *)req->data;
  c->queued -= w->len;
  free(w->data);
  free(w);
  if (c->closing) return; /* ECANCELED from uv_close: the conn is still alive until its close cb */
  if (status < 0 || (c->close_when_flushed && c->queued == 0)) {
    pr_rpc_conn_close(c);
    return;
  }
  update_reading(c);
  pr_rpc_kick(c);
}

void pr_rpc_conn_flush(pr_rpc_conn_t *c) {
  if (c->out.size == 0 || c->closing) return;
  if (c->virt) {
    if (c->sink) c->sink(c->sink_arg, c->out.data, c->out.size);
    c->out.size = 0;
    return;
  }
  size_t len = c->out.size;
  char *data = msgpack_sbuffer_release(&c->out);
  wreq_t *w = malloc(sizeof(*w));
  if (w == NULL) {
    free(data);
    pr_rpc_conn_close(c);
    return;
  }
  w->data = data;
  w->len = len;
  w->req.data = c;
  uv_buf_t b = uv_buf_init(data, (unsigned)len);
  if (uv_write(&w->req, (uv_stream_t *)&c->pipe, &b, 1, on_write) != 0) {
    free(data);
    free(w);
    pr_rpc_conn_close(c);
    return;
  }
  c->queued += len;
}

/* A protocol error: answer an oversized request if we know its msgid, try
 * once to write what is unsent, and close without waiting for the client. */
static void close_bad(pr_rpc_conn_t *c) {
  if (c->bad == PR_ETOOBIG && c->bad_msgid >= 0) {
    char m[96];
    snprintf(m, sizeof(m), "message larger than %u bytes, or more than %u entries or %u levels",
             PR_RPC_MAX_MESSAGE, PR_RPC_MAX_OBJECTS, PR_RPC_MAX_DEPTH);
    size_t mark = c->out.size;
    if (pr_rpc_pack_error_response(&c->pk, (uint64_t)c->bad_msgid, PR_ETOOBIG, m) != 0)
      c->out.size = mark;
  }
  if (c->virt) {
    pr_rpc_conn_flush(c);
  } else if (c->queued == 0 && c->out.size > 0) {
    uv_buf_t b = uv_buf_init(c->out.data, (unsigned)c->out.size);
    uv_try_write((uv_stream_t *)&c->pipe, &b, 1);
  }
  pr_rpc_conn_close(c);
}

/* ---- subscriptions ------------------------------------------------------------------ */

pr_rpc_sub_t *pr_rpc_sub_find(pr_rpc_t *srv, uint64_t id) { return pr_idmap_get(&srv->subs, id); }

pr_rpc_sub_t *pr_rpc_sub_new(pr_rpc_conn_t *c, pr_exec_t *x) {
  pr_rpc_sub_t *s = calloc(1, sizeof(*s));
  if (s == NULL) return NULL;
  s->conn = c;
  s->id = x->id;
  msgpack_sbuffer_init(&s->states);
  msgpack_sbuffer_init(&s->final);
  pr_queue_init(&s->dnode);
  for (int i = 0; i < PR_NSTREAM; i++) {
    if ((s->ring[i] = x->streams[i].ring) != NULL) pr_ring_ref(s->ring[i]);
  }
  if (pr_idmap_put(&c->srv->subs, s->id, s) != 0) {
    for (int i = 0; i < PR_NSTREAM; i++) pr_ring_unref(s->ring[i]);
    msgpack_sbuffer_destroy(&s->states);
    msgpack_sbuffer_destroy(&s->final);
    free(s);
    return NULL;
  }
  pr_queue_push(&c->subs, &s->cnode);
  return s;
}

void pr_rpc_sub_ended(pr_rpc_sub_t *s) {
  if (s->ended) return;
  s->ended = 1;
  if (++s->conn->nended <= PR_RPC_MAX_ENDED) return;
  for (int i = 0; i < PR_NSTREAM; i++) {
    if (s->ring[i] == NULL) continue;
    uint64_t head;
    pr_ring_stats(s->ring[i], &head, &s->end[i]);
    pr_ring_unref(s->ring[i]);
    s->ring[i] = NULL;
  }
}

void pr_rpc_sub_free(pr_rpc_sub_t *s) {
  if (s->ended) s->conn->nended--;
  if (pr_idmap_get(&s->conn->srv->subs, s->id) == s) pr_idmap_del(&s->conn->srv->subs, s->id);
  pr_queue_remove(&s->cnode);
  pr_queue_remove(&s->dnode);
  for (int i = 0; i < PR_NSTREAM; i++) pr_ring_unref(s->ring[i]);
  msgpack_sbuffer_destroy(&s->states);
  msgpack_sbuffer_destroy(&s->final);
  free(s);
}

void pr_rpc_sub_dirty(pr_rpc_sub_t *s) {
  if (s->dnode.next == &s->dnode) pr_queue_push(&s->conn->dirty, &s->dnode);
  pr_rpc_kick(s->conn);
}

static int append(pr_rpc_conn_t *c, msgpack_sbuffer *b) {
  if (b->size == 0) return 0;
  if (msgpack_sbuffer_write(&c->out, b->data, b->size) != 0) return -1;
  b->size = 0;
  return 0;
}

static size_t room(const pr_rpc_conn_t *c) {
  size_t used = c->queued + c->out.size;
  return used >= PR_RPC_SENDQ ? 0 : PR_RPC_SENDQ - used;
}

/* Send what `s` has, within the budget. Returns 1 when it is caught up (and
 * no longer dirty; freed when its execution ended), 0 when out of budget. */
static int pump_sub(pr_rpc_conn_t *c, pr_rpc_sub_t *s) {
  if (append(c, &s->states) != 0) return 0;
  for (int i = 0; i < PR_NSTREAM; i++) {
    if (s->ring[i] == NULL && s->end[i] > s->off[i]) { /* released: account for it */
      if (room(c) == 0) return 0;
      size_t mark = c->out.size;
      if (pr_rpc_pack_output(&c->pk, s->id, i, NULL, 0, s->end[i], s->end[i] - s->off[i]) != 0) {
        c->out.size = mark;
        return 0;
      }
      s->off[i] = s->end[i];
    }
    if (s->ring[i] == NULL) continue;
    for (;;) {
      size_t max = room(c);
      if (max == 0) return 0;
      if (max > PR_RPC_CHUNK) max = PR_RPC_CHUNK;
      char *data;
      size_t len;
      uint64_t next, missed;
      if (pr_ring_read(s->ring[i], s->off[i], max, &data, &len, &next, &missed) != 0) return 0;
      if (len == 0 && missed == 0) {
        free(data);
        break;
      }
      size_t mark = c->out.size;
      int rc = pr_rpc_pack_output(&c->pk, s->id, i, data, len, next - len, missed);
      free(data);
      if (rc != 0) {
        c->out.size = mark;
        return 0;
      }
      s->off[i] = next;
      if (len < max) break; /* caught up with the ring */
    }
  }
  if (s->ended) {
    if (append(c, &s->final) != 0) return 0;
    pr_rpc_sub_free(s);
    c->nready_waits++; /* waits on this id may go now */
    return 1;
  }
  pr_queue_remove(&s->dnode);
  return 1;
}

/* ---- waits -------------------------------------------------------------------------- */

static void on_wait_timer(uv_timer_t *t) {
  pr_rpc_wait_t *w = (pr_rpc_wait_t *)t->data;
  w->timed_out = 1;
  w->conn->nready_waits++;
  pr_rpc_kick(w->conn);
}

static void on_wait_timer_closed(uv_handle_t *h) {
  pr_rpc_wait_t *w = (pr_rpc_wait_t *)h->data;
  pr_rpc_conn_t *c = w->conn;
  pr_record_free(w->rec);
  free(w);
  pr_rpc_conn_unref(c);
}

pr_rpc_wait_t *pr_rpc_wait_new(pr_rpc_conn_t *c, uint64_t id, uint64_t msgid, int64_t timeout_ms,
                               const int64_t *after) {
  pr_rpc_wait_t *w = calloc(1, sizeof(*w));
  if (w == NULL) return NULL;
  w->conn = c;
  w->id = id;
  w->msgid = msgid;
  if (after) {
    w->on_output = 1;
    memcpy(w->after, after, sizeof(w->after));
  }
  if (timeout_ms >= 0) {
    if (uv_timer_init(c->srv->ctl->xc.loop, &w->timer) != 0) {
      free(w);
      return NULL;
    }
    w->timer.data = w;
    w->timer_open = 1;
    c->handles++;
    uv_timer_start(&w->timer, on_wait_timer, (uint64_t)timeout_ms, 0);
  }
  pr_queue_push(&c->waits, &w->cnode);
  c->srv->nwaits++;
  c->nwaits++;
  c->srv->nout_waits += (size_t)w->on_output;
  c->nout_waits += (unsigned)w->on_output;
  return w;
}

/* The counts drive on_output's walk (rpc/server.c): one that drifts would
 * skip a wait that wants output, or walk for nothing. Test builds stop. */
static void check_counts(const pr_rpc_conn_t *c) {
#ifdef PR_DEBUG
  if (c->nout_waits > c->nwaits || c->srv->nout_waits > c->srv->nwaits ||
      (c->nwaits == 0 && c->nout_waits != 0) || (c->srv->nwaits == 0 && c->srv->nout_waits != 0))
    abort();
#else
  (void)c;
#endif
}

void pr_rpc_wait_drop(pr_rpc_wait_t *w) {
  pr_queue_remove(&w->cnode);
  w->conn->srv->nwaits--;
  w->conn->nwaits--;
  w->conn->srv->nout_waits -= (size_t)w->on_output;
  w->conn->nout_waits -= (unsigned)w->on_output;
  check_counts(w->conn);
  if (w->timer_open) {
    w->timer_open = 0;
    uv_timer_stop(&w->timer);
    uv_close((uv_handle_t *)&w->timer, on_wait_timer_closed);
    return;
  }
  pr_record_free(w->rec);
  free(w);
}

/* Answer the waits that can go: timed out, or ended with every notification
 * of their execution already queued — while the send queue is under
 * PR_RPC_SENDQ (the rest go once the client has read: on_write kicks). */
static void pump_waits(pr_rpc_conn_t *c) {
  unsigned left = 0;
  pr_queue_t *q = pr_queue_head(&c->waits);
  while (q != &c->waits) {
    pr_rpc_wait_t *w = PR_QUEUE_DATA(q, pr_rpc_wait_t, cnode);
    q = q->next;
    if (!w->timed_out && !w->woke && (w->rec == NULL || pr_rpc_sub_find(c->srv, w->id) != NULL)) {
      if (w->rec) left++;
      continue;
    }
    if (room(c) == 0) {
      left++; /* another turn */
      break;
    }
    pr_rpc_answer_wait(c, w);
    pr_rpc_wait_drop(w);
  }
  c->nready_waits = left;
}

/* ---- the pump ----------------------------------------------------------------------- */

int pr_rpc_conn_pump(pr_rpc_conn_t *c) {
  if (c->closing) return 0;
  for (unsigned n = 0; n < PR_RPC_BATCH && c->ready > 0 && !c->closing &&
                       c->queued + c->out.size < PR_RPC_SENDQ_HARD;
       n++) {
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t bytes = 0;
    int r = msgpack_unpacker_next_with_size(&c->up, &u, &bytes);
    if (r != MSGPACK_UNPACK_SUCCESS ||
        bytes > c->scan_lead) { /* framing disagreed: never expected */
#ifdef PR_RPC_FUZZ
      abort(); /* the fuzz harness wants to know */
#endif
      msgpack_unpacked_destroy(&u);
      c->bad = PR_EPROTO;
      c->ready = 0;
      break;
    }
    c->ready--;
    c->scan_lead -= bytes;
    int rc = pr_rpc_dispatch(c, &u.data, u.zone);
    msgpack_unpacked_destroy(&u);
    if (rc != 0) {
      c->bad = rc;
      c->bad_msgid = -1;
      c->ready = 0;
      break;
    }
  }
  if (c->closing) return 0;
  if (c->bad && c->ready == 0) {
    close_bad(c);
    return 0;
  }
  /* A large message grew the buffer: give it back once nothing is pending. */
  if (c->ready == 0 && c->scan_lead == 0 && c->up.used == c->up.off &&
      c->up.used + c->up.free > (1u << 20)) {
    msgpack_unpacker_destroy(&c->up);
    c->up_init = msgpack_unpacker_init(&c->up, 64u << 10);
    if (!c->up_init) {
      pr_rpc_conn_close(c);
      return 0;
    }
  }
  while (!pr_queue_empty(&c->dirty) && room(c) > 0) {
    pr_rpc_sub_t *s = PR_QUEUE_DATA(pr_queue_head(&c->dirty), pr_rpc_sub_t, dnode);
    if (!pump_sub(c, s)) break;
  }
  if (c->nready_waits) pump_waits(c);
  pr_rpc_conn_flush(c);
  if (c->closing) return 0;
  if (c->eof && c->ready == 0) { /* the client is gone or half-closed: finish and close */
    if (c->virt || c->queued == 0) pr_rpc_conn_close(c);
    else c->close_when_flushed = 1;
    return 0;
  }
  update_reading(c);
  return (c->ready > 0 && c->queued < PR_RPC_SENDQ_HARD) ||
         ((!pr_queue_empty(&c->dirty) || c->nready_waits) && room(c) > 0);
}
