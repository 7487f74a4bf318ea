/* engine/hostq.h — the host's event queue: how the host thread learns what
 * happened, and the listener that fills it.
 *
 * Thread: the listener and pr_hostq_start/close run on the ENGINE thread;
 * poll, wait and fd on the HOST thread; the queue itself is locked by `mu`.
 *
 *   engine thread ─► listener: state/worker/reply/chunk events, output markers
 *        ─► events (mu) + eventfd written when it was empty ─► host: poll/wait
 *
 * An output event is queued as a marker that holds a ring reference; the
 * host copies the bytes out at poll time, outside the lock. Under a flood the
 * markers of one stream are coalesced (see on_output in hostq.c), and every
 * deferred marker of an execution is pushed before its terminal state.
 *
 * A terminal state event carries the execution's record, made on the engine
 * thread when the event is; so does every state event once the host asked
 * for it (pr_hostq_records): the host then never waits for this thread to
 * learn what a state change looks like.
 *
 * Bounded for a host that does not poll (PR_HOST_EVENTS_BYTES, proctor.h):
 * past it, state events coalesce per execution, and keep a record only in
 * the place of the one they replace (bound_state in hostq.c); output
 * markers are one per stream anyway, and the marker of an execution that
 * leaves the registry gives its ring up for the bytes that fit under the
 * bound (on_removed).
 */
#ifndef PR_HOSTQ_H
#define PR_HOSTQ_H

#include <pthread.h>
#include <uv.h>

#include "base/idmap.h"
#include "base/queue.h"
#include "engine/events.h"
#include "include/proctor.h"

typedef struct pr_hostq {
  pthread_mutex_t mu;
  pr_queue_t events;      /* pr_event_t, locked by mu */
  size_t nevents;         /* locked by mu */
  size_t bytes;           /* heap bytes the queued events hold (ev_bytes); locked by mu */
  pr_idmap_t states;      /* id -> its newest queued state event; locked by mu */
  pr_idmap_t outputs;     /* id * PR_NSTREAM + stream -> its queued output marker; mu */
  int wakefd;             /* eventfd: readable while events is non-empty */
  uv_timer_t flush_timer; /* engine: pushes deferred output markers */
  pr_queue_t deferred;    /* engine: streams whose marker waits for flush_timer */
  pr_listener_t listener; /* added to the engine's listeners by its owner */
  int records;            /* 1: every state event carries its record; host writes,
                           * engine reads (atomic) */
  /* host: the engine paused a stream whose bytes poll just took: read it again */
  void (*resume)(void *arg, uint64_t id);
  void *resume_arg;
} pr_hostq_t;

/* pr_hostq_init: an empty queue and its eventfd (host thread, before the
 * engine thread starts; `loop` is not running). Returns 0 or a negative error
 * (nothing to destroy then). */
int pr_hostq_init(pr_hostq_t *q, uv_loop_t *loop, void (*resume)(void *, uint64_t), void *arg);

/* pr_hostq_close: close the flush timer (engine thread, shutting down). */
void pr_hostq_close(pr_hostq_t *q);

/* pr_hostq_destroy: free the events not taken, the eventfd, the lock (host
 * thread, after the engine thread ended). */
void pr_hostq_destroy(pr_hostq_t *q);

/* pr_hostq_records: `on` 1: every state event made from now on carries the
 * execution's record as of that event; 0: only a terminal one does (the
 * default). Any thread (the engine thread reads it at its next event).
 * Returns the previous setting. */
int pr_hostq_records(pr_hostq_t *q, int on);

/* pr_hostq_poll: take up to `max` events without blocking (see pr_engine_poll). */
size_t pr_hostq_poll(pr_hostq_t *q, pr_event_t **evs, size_t max, size_t max_bytes);

/* pr_hostq_wait: block until an event is pending or timeout_ms passes (<0:
 * forever). Returns 1 if events are pending, 0 on timeout. */
int pr_hostq_wait(pr_hostq_t *q, int timeout_ms);

/* pr_hostq_held: count the queued events (*n) and the bytes they hold
 * (*bytes: each event, its strings and record, a chunk's text, and the bytes
 * an output marker's ring retains), walking the queue under its lock. Any
 * thread; O(events): for tests. */
void pr_hostq_held(pr_hostq_t *q, size_t *n, size_t *bytes);

/* pr_hostq_hold / pr_hostq_unhold: take and give back the queue's lock, so
 * the engine thread blocks at its next event (tests stall it this way). */
void pr_hostq_hold(pr_hostq_t *q);
void pr_hostq_unhold(pr_hostq_t *q);

#endif
