/* loop.c — the timers of proctor-mcp's poll() loop (main.c owns the loop),
 * and its stop signals: SIGTERM, SIGINT and SIGHUP set a flag and write a
 * byte to a self-pipe, so a poll() (the loop's, or send.c's wait for room on
 * stdout) wakes even for a signal that came just before it.
 *
 * Thread: main (the signal handler runs on it too: the embedded engine's
 * threads are created after, but may take a signal; the handler only sets a
 * flag and writes). A handful of timers at most (one per waiting tool
 * call), so an unsorted list is enough.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

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

/* ---- stop signals ---------------------------------------------------------------------------- */

static volatile sig_atomic_t stop_signal;
static int stop_pipe[2] = {-1, -1}; /* a stop signal writes a byte to [1] */

static void on_signal(int sig) {
  int saved = errno;
  stop_signal = sig;
  (void)!write(stop_pipe[1], "", 1); /* non-blocking: a full pipe wakes as well */
  errno = saved;
}

int mc_stop_init(void) {
  if (pipe2(stop_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
  struct sigaction sa = {0};
  sa.sa_handler = on_signal; /* no SA_RESTART: poll() returns EINTR */
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGHUP, &sa, NULL);
  return 0;
}

int mc_stop_requested(void) { return stop_signal != 0; }

int mc_stop_fd(void) { return stop_pipe[0]; }
