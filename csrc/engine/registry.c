/* registry.c — id → execution hash plus an id-ordered list.
 *
 * Thread: engine.
 */
#include "engine/registry.h"

#include <stdlib.h>

#include "base/clock.h"
#include "engine/exec.h"
#include "store/journal.h"

int pr_registry_init(pr_engine_t *e) {
  pr_idmap_init(&e->byid);
  pr_queue_init(&e->order);
  pr_queue_init(&e->queued);
  return 0;
}

int pr_registry_add(pr_engine_t *e, pr_exec_t *x) {
  /* Ids are handed out in increasing order and host commands arrive in
   * order, but an RPC start (built on the engine thread) can overtake a host
   * start still in the command queue: walk back from the tail (almost always
   * zero steps) to keep the list sorted by id. */
  pr_queue_t *at = &e->order;
  while (at->prev != &e->order && PR_QUEUE_DATA(at->prev, pr_exec_t, order)->id > x->id)
    at = at->prev;
  pr_queue_push(at, &x->order);
  e->count++;
  return pr_idmap_put(&e->byid, x->id, x);
}

pr_exec_t *pr_registry_find(pr_engine_t *e, uint64_t id, uint64_t session) {
  pr_exec_t *x = pr_idmap_get(&e->byid, id);
  return x && (session == 0 || x->session == session) ? x : NULL;
}

void pr_registry_remove(pr_engine_t *e, pr_exec_t *x) {
  if (pr_idmap_get(&e->byid, x->id) == x) pr_idmap_del(&e->byid, x->id);
  pr_queue_remove(&x->order);
  e->count--;
  if (x->finished) e->nterminal--;
  if (e->journal) pr_journal_on_remove(e, x); /* the history forgets it too */
  pr_exec_release(x);
}

/* The age timer is armed for the earliest expiry, but ended_at is wall-clock
 * time and the timer is monotonic: never sleep longer than this, so a clock
 * that jumps forward delays pruning by at most this much. */
#define PR_PRUNE_MAX_SLEEP_MS 60000

static void on_prune_timer(uv_timer_t *t) {
  pr_engine_t *e = (pr_engine_t *)t->data;
  if (!e->closing) pr_registry_prune(e);
}

void pr_registry_prune(pr_engine_t *e) {
  uint64_t now = pr_now_ms(), age = e->opts.history_age_ms;
  uint64_t next = UINT64_MAX; /* earliest expiry among the records kept */
  pr_queue_t *q = pr_queue_head(&e->order);
  while (q != &e->order) {
    pr_exec_t *x = PR_QUEUE_DATA(q, pr_exec_t, order);
    q = q->next;
    if (!x->finished) continue;
    int over = e->opts.history_limit && e->nterminal > e->opts.history_limit;
    int old = age && x->ended_at + age <= now;
    if (over || old) pr_registry_remove(e, x);
    else if (!age) break; /* oldest first: nothing more is over the limit */
    else if (x->ended_at + age < next) next = x->ended_at + age;
  }
  if (!age || e->closing) return;
  if (next == UINT64_MAX) {
    uv_timer_stop(&e->prune_timer);
    return;
  }
  uint64_t ms = next - now; /* > 0: every record at or past its expiry is gone */
  uv_timer_start(&e->prune_timer, on_prune_timer, ms < PR_PRUNE_MAX_SLEEP_MS ? ms : PR_PRUNE_MAX_SLEEP_MS, 0);
}

size_t pr_registry_purge(pr_engine_t *e, uint64_t session, uint64_t older_than_ms) {
  uint64_t now = pr_now_ms();
  size_t n = 0;
  pr_queue_t *q = pr_queue_head(&e->order);
  while (q != &e->order) {
    pr_exec_t *x = PR_QUEUE_DATA(q, pr_exec_t, order);
    q = q->next;
    if (!x->finished || (session && x->session != session)) continue;
    if (older_than_ms && x->ended_at + older_than_ms > now) continue;
    pr_registry_remove(e, x);
    n++;
  }
  return n;
}

void pr_registry_destroy(pr_engine_t *e) {
  while (!pr_queue_empty(&e->order)) {
    pr_exec_t *x = PR_QUEUE_DATA(pr_queue_head(&e->order), pr_exec_t, order);
    pr_queue_remove(&x->order);
    pr_exec_free(x);
  }
  pr_idmap_destroy(&e->byid);
  e->count = 0;
}
