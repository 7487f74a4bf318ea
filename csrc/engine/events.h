/* engine/events.h — the seam between the state machine and its observers.
 *
 * Thread: engine. Listeners are added before the engine thread starts (or on
 * it) and called on it, in the order they were added.
 *
 *   exec.c transition() ─► pr_notify_state ─┬─► host queue (engine/hostq.c): state events
 *   stream.c got_bytes ─► pr_notify_output ─┤   RPC server (rpc/server.c): subscriptions, waits
 *   worker.c ─► pr_notify_worker/chunk/reply┤   history (store/history.c): start and end frames
 *   registry.c ─► pr_notify_removed/purged ─┘   audit log (store/audit.c): one line per state
 *
 * The engine tells this list and never a subsystem by name; a listener that
 * does not care about an event leaves its slot NULL. A callback must not add
 * or remove listeners, and must not free the execution it is told about; it
 * may read it through the accessors at the end (or engine/exec.h inside the
 * engine folder) while the call lasts.
 */
#ifndef PR_EVENTS_H
#define PR_EVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "base/ring.h"
#include "include/proctor.h"

typedef struct pr_exec pr_exec_t;

/* A state change: what the state events of every surface carry. Borrowed:
 * valid during the call. prev == PR_NSTATE: the execution was just queued
 * (its first event). */
typedef struct {
  pr_exec_t *x;
  uint64_t id, session;
  pr_state_t state, prev;
  const char *reason, *error; /* NULL when none */
  int exit_code, signal;      /* -1 / 0 when none */
  int64_t pid;                /* 0 when no process */
} pr_state_info_t;

/* A worker's partial (chunk) or final (reply) answer to request `rid` of
 * session `session` (0: the host, else an RPC session). `text` is JSON text
 * (a chunk, an ok result) or the error message; the notifier owns it, a
 * listener may take it (and then sets it to NULL). `chan` (host requests
 * only) is the request's back-pressure token: whoever delivers the chunk
 * calls chan_done(chan) once it was consumed, and sets chan to NULL. */
typedef struct {
  uint64_t session, id, rid;
  int status; /* replies: pr_reply_status_t */
  char *text;
  size_t len;
  uint64_t missed; /* chunks dropped: before this one (chunk), in all (reply) */
  void *chan;
  void (*chan_done)(void *chan);
} pr_wmsg_t;

typedef struct pr_listener {
  void (*state)(void *arg, const pr_state_info_t *st);
  void (*output)(void *arg, pr_exec_t *x, int stream); /* bytes were appended to that ring */
  void (*worker)(void *arg, const pr_exec_t *x, int wstate, uint32_t restarts);
  void (*chunk)(void *arg, pr_wmsg_t *m);
  void (*reply)(void *arg, pr_wmsg_t *m);
  void (*removed)(void *arg,
                  const pr_exec_t *x); /* leaving the registry (delete, purge, retention) */
  void (*purged)(void *arg);           /* a delete or purge command removed records */
  void *arg;
  struct pr_listener *next; /* the list's */
} pr_listener_t;

typedef struct {
  pr_listener_t *head;
} pr_listeners_t;

static inline void pr_listeners_init(pr_listeners_t *ls) { ls->head = NULL; }

/* Add `l` at the end (listeners are told in the order they were added). */
static inline void pr_listeners_add(pr_listeners_t *ls, pr_listener_t *l) {
  pr_listener_t **p = &ls->head;
  while (*p) p = &(*p)->next;
  l->next = NULL;
  *p = l;
}

static inline void pr_listeners_remove(pr_listeners_t *ls, pr_listener_t *l) {
  for (pr_listener_t **p = &ls->head; *p; p = &(*p)->next)
    if (*p == l) {
      *p = l->next;
      return;
    }
}

#define PR_NOTIFY_(ls, op, ...)                           \
  for (pr_listener_t *l_ = (ls)->head; l_; l_ = l_->next) \
    if (l_->op) l_->op(l_->arg, __VA_ARGS__)

static inline void pr_notify_state(const pr_listeners_t *ls, const pr_state_info_t *st) {
  PR_NOTIFY_(ls, state, st);
}
static inline void pr_notify_output(const pr_listeners_t *ls, pr_exec_t *x, int stream) {
  PR_NOTIFY_(ls, output, x, stream);
}
static inline void pr_notify_worker(const pr_listeners_t *ls, const pr_exec_t *x, int wstate,
                                    uint32_t restarts) {
  PR_NOTIFY_(ls, worker, x, wstate, restarts);
}
static inline void pr_notify_chunk(const pr_listeners_t *ls, pr_wmsg_t *m) {
  PR_NOTIFY_(ls, chunk, m);
}
static inline void pr_notify_reply(const pr_listeners_t *ls, pr_wmsg_t *m) {
  PR_NOTIFY_(ls, reply, m);
}
static inline void pr_notify_removed(const pr_listeners_t *ls, const pr_exec_t *x) {
  PR_NOTIFY_(ls, removed, x);
}
static inline void pr_notify_purged(const pr_listeners_t *ls) {
  for (pr_listener_t *l = ls->head; l; l = l->next)
    if (l->purged) l->purged(l->arg);
}

/* ---- what a listener may ask of an execution (engine/exec.c) ------------------------ */

/* pr_exec_view: the record of `x` as it is now, borrowing x's strings (use it
 * at once). `brief`: without env_keys. */
void pr_exec_view(const pr_exec_t *x, pr_record_t *r, int brief);

/* pr_exec_ring: the output ring of `stream`, or NULL when x has no such stream. */
pr_ring_t *pr_exec_ring(const pr_exec_t *x, int stream);

/* pr_exec_scrub: a malloc'd copy of `s` with x's secret values masked (NULL
 * when out of memory). */
char *pr_exec_scrub(const pr_exec_t *x, const char *s);

/* pr_exec_state_info: what a state event of x says now, `prev` being the
 * state it left (PR_NSTATE: none). */
void pr_exec_state_info(pr_exec_t *x, pr_state_t prev, pr_state_info_t *st);

#endif
