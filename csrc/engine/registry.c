/* engine/registry.c — id → execution map plus an id-ordered list.
 *
 * Thread: engine.
 */
#include "engine/registry.h"

#include <stdlib.h>

#include "base/clock.h"

int pr_registry_init(pr_registry_t *r, pr_exec_ctx_t *xc, uint32_t limit, uint64_t age_ms) {
  pr_idmap_init(&r->byid);
  pr_queue_init(&r->order);
  r->count = r->nterminal = 0;
  r->ended_max = r->ended_bytes = r->trimmed = 0;
  r->limit = limit;
  r->age_ms = age_ms;
  r->xc = xc;
  int rc = uv_timer_init(xc->loop, &r->prune_timer);
  r->prune_timer.data = r;
  return rc;
}

int pr_registry_add(pr_registry_t *r, pr_exec_t *x) {
  /* Ids are handed out in increasing order and host commands arrive in
   * order, but an RPC start (built on the engine thread) can overtake a host
   * start still in the command queue: walk back from the tail (almost always
   * zero steps) to keep the list sorted by id. */
  pr_queue_t *at = &r->order;
  while (at->prev != &r->order && PR_QUEUE_DATA(at->prev, pr_exec_t, order)->id > x->id)
    at = at->prev;
  pr_queue_push(at, &x->order);
  r->count++;
  return pr_idmap_put(&r->byid, x->id, x);
}

pr_exec_t *pr_registry_find(const pr_registry_t *r, uint64_t id, uint64_t session) {
  pr_exec_t *x = pr_idmap_get(&r->byid, id);
  return x && (session == 0 || x->session == session) ? x : NULL;
}

void pr_registry_remove(pr_registry_t *r, pr_exec_t *x) {
  if (pr_idmap_get(&r->byid, x->id) == x) pr_idmap_del(&r->byid, x->id);
  pr_queue_remove(&x->order);
  r->count--;
  if (x->finished) r->nterminal--;
  r->ended_bytes -= x->kept;
  x->kept = 0;
  pr_notify_removed(r->xc->ls, x); /* the history forgets it too */
  pr_exec_release(x);
}

/* The age timer is armed for the earliest expiry, but ended_at is wall-clock
 * time and the timer is monotonic: never sleep longer than this, so a clock
 * that jumps forward delays pruning by at most this much. */
#define PR_PRUNE_MAX_SLEEP_MS 60000

static void on_prune_timer(uv_timer_t *t) {
  pr_registry_t *r = (pr_registry_t *)t->data;
  if (!r->xc->closing) pr_registry_prune(r);
}

void pr_registry_ended(pr_registry_t *r, pr_exec_t *x) {
  size_t n = 0;
  for (int i = 0; i < PR_NSTREAM; i++)
    if (x->streams[i].ring) n += pr_ring_retained(x->streams[i].ring);
  r->ended_bytes += n - x->kept;
  x->kept = n;
}

/* The budget: while the ended rings keep more than ended_max, cut the oldest
 * ones to their tail. Rings at or under their tail already are passed over
 * without taking a lock; the walk happens only while over the budget. */
static void trim(pr_registry_t *r) {
  pr_queue_t *q;
  PR_QUEUE_FOREACH(q, &r->order) {
    if (r->ended_bytes <= r->ended_max) return;
    pr_exec_t *x = PR_QUEUE_DATA(q, pr_exec_t, order);
    if (!x->finished || x->kept <= PR_ENDED_TAIL) continue;
    size_t n = 0;
    for (int i = 0; i < PR_NSTREAM; i++)
      if (x->streams[i].ring) n += pr_ring_trim(x->streams[i].ring, PR_ENDED_TAIL);
    r->ended_bytes -= x->kept - n;
    x->kept = n;
    r->trimmed++;
  }
}

/* The terminal record that ended first (ties: the lower id), NULL when none.
 * Not the lowest id: records loaded from other editors' history slots have
 * ids of their own ranges (store/history.h), and the limit keeps the newest. */
static pr_exec_t *oldest_ended(pr_registry_t *r) {
  pr_exec_t *best = NULL;
  pr_queue_t *q;
  PR_QUEUE_FOREACH(q, &r->order) {
    pr_exec_t *x = PR_QUEUE_DATA(q, pr_exec_t, order);
    if (x->finished && (best == NULL || x->ended_at < best->ended_at)) best = x;
  }
  return best;
}

void pr_registry_prune(pr_registry_t *r) {
  if (r->ended_max && r->ended_bytes > r->ended_max) trim(r);
  while (r->limit && r->nterminal > r->limit) {
    pr_exec_t *x = oldest_ended(r);
    if (x == NULL) break;
    pr_registry_remove(r, x);
  }
  uint64_t now = pr_now_ms(), age = r->age_ms;
  if (!age) return;
  uint64_t next = UINT64_MAX; /* earliest expiry among the records kept */
  pr_queue_t *q = pr_queue_head(&r->order);
  while (q != &r->order) {
    pr_exec_t *x = PR_QUEUE_DATA(q, pr_exec_t, order);
    q = q->next;
    if (!x->finished) continue;
    if (x->ended_at + age <= now) pr_registry_remove(r, x);
    else if (x->ended_at + age < next) next = x->ended_at + age;
  }
  if (r->xc->closing) return;
  if (next == UINT64_MAX) {
    uv_timer_stop(&r->prune_timer);
    return;
  }
  uint64_t ms = next - now; /* > 0: every record at or past its expiry is gone */
  uv_timer_start(&r->prune_timer, on_prune_timer,
                 ms < PR_PRUNE_MAX_SLEEP_MS ? ms : PR_PRUNE_MAX_SLEEP_MS, 0);
}

size_t pr_registry_purge(pr_registry_t *r, uint64_t session, uint64_t older_than_ms) {
  uint64_t now = pr_now_ms();
  size_t n = 0;
  pr_queue_t *q = pr_queue_head(&r->order);
  while (q != &r->order) {
    pr_exec_t *x = PR_QUEUE_DATA(q, pr_exec_t, order);
    q = q->next;
    if (!x->finished || (session && x->session != session)) continue;
    if (older_than_ms && x->ended_at + older_than_ms > now) continue;
    pr_registry_remove(r, x);
    n++;
  }
  return n;
}

void pr_registry_close(pr_registry_t *r) {
  uv_handle_t *h = (uv_handle_t *)&r->prune_timer;
  if (h->loop && !uv_is_closing(h)) uv_close(h, NULL);
}

void pr_registry_destroy(pr_registry_t *r) {
  while (!pr_queue_empty(&r->order)) {
    pr_exec_t *x = PR_QUEUE_DATA(pr_queue_head(&r->order), pr_exec_t, order);
    pr_queue_remove(&x->order);
    pr_exec_free(x);
  }
  pr_idmap_destroy(&r->byid);
  r->count = 0;
}
