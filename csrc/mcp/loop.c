/* loop.c — the timers of proctor-mcp's poll() loop (main.c owns the loop).
 *
 * Thread: main. A handful of timers at most (one per waiting tool call), so
 * an unsorted list is enough.
 */
#include <time.h>

#include "mcp.h"

static mc_timer_t *timers; /* active timers */

uint64_t mc_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

void mc_timer_start(mc_timer_t *t, uint64_t ms) {
  mc_timer_stop(t);
  t->due_ms = mc_now_ms() + ms;
  t->active = 1;
  t->next = timers;
  timers = t;
}

void mc_timer_stop(mc_timer_t *t) {
  if (!t->active) return;
  for (mc_timer_t **p = &timers; *p; p = &(*p)->next)
    if (*p == t) {
      *p = t->next;
      break;
    }
  t->active = 0;
  t->next = NULL;
}

int mc_timers_timeout(void) {
  if (timers == NULL) return -1;
  uint64_t now = mc_now_ms(), best = UINT64_MAX;
  for (mc_timer_t *t = timers; t; t = t->next)
    if (t->due_ms < best) best = t->due_ms;
  if (best <= now) return 0;
  uint64_t d = best - now;
  return d > 60000 ? 60000 : (int)d;
}

void mc_timers_run(void) {
  uint64_t now = mc_now_ms();
  /* A callback may start or stop any timer: rescan after each one. */
  for (;;) {
    mc_timer_t *due = NULL;
    for (mc_timer_t *t = timers; t; t = t->next)
      if (t->due_ms <= now) {
        due = t;
        break;
      }
    if (due == NULL) return;
    mc_timer_stop(due);
    due->cb(due);
  }
}
