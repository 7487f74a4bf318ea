/* shepherd/jobs.c — the shepherd's job table and its wire to the engine.
 *
 * Thread: the shepherd's only thread.
 *
 * A job is in `by_id` from its SPAWN until the engine RELEASEs it (or its
 * spawn failed), and in `by_reaper` until its reaper is reaped: a released
 * job's reaper may still be killing what is left. Every lookup is O(1).
 *
 * Reapers owing an answer to a command are on one list in the order they
 * were asked; the deadline is a fixed time after the question, so the head
 * is always the first due: checking it is O(1) too.
 */
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "base/idmap.h"
#include "shepherd/shepherd.h"

static pr_idmap_t by_id, by_reaper; /* job id -> job, reaper pid -> job */
static int njobs;
static job_t *owing_head, *owing_tail; /* reapers owing an answer, first due first */

uint64_t pr_shep_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t last_sent; /* pr_shep_now_ms of the last packet to the engine */

void pr_shep_send(uint32_t type, uint32_t flags, uint64_t job, int64_t a, int64_t b, const int *fds,
                  int nfds) {
  pr_wire_hdr_t h = {.type = type, .flags = flags, .job = job, .a = a, .b = b};
  if (pr_shep_relay) pr_relay_send(type, flags, job, a, b, NULL, 0); /* never with fds */
  else (void)pr_wire_send(pr_shep_sock, &h, NULL, fds, nfds, 0);
  last_sent = pr_shep_now_ms();
}

void pr_shep_heartbeat(void) {
  if (pr_shep_now_ms() - last_sent >= PR_SHEP_HEARTBEAT_MS)
    pr_shep_send(PR_W_PONG, 0, 0, 0, pr_shep_self, NULL, 0);
}

uint64_t pr_shep_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int owing(const job_t *j) { return j->answer_by != 0; }

static void unowe(job_t *j) {
  if (!owing(j)) return;
  if (j->wprev) j->wprev->wnext = j->wnext;
  else owing_head = j->wnext;
  if (j->wnext) j->wnext->wprev = j->wprev;
  else owing_tail = j->wprev;
  j->wprev = j->wnext = NULL;
  j->answer_by = 0;
  j->asked_ns = 0;
}

void pr_shep_ask(job_t *j, int sig) {
  kill(j->reaper, sig);           /* an unreaped child of ours: its pid is its own */
  j->asked_ns = pr_shep_now_ns(); /* after kill(): the signal is pending by now */
  if (owing(j)) return;           /* the first unanswered question sets the deadline */
  j->answer_by = pr_shep_now_ms() + PR_REAPER_ANSWER_MS;
  j->wprev = owing_tail;
  j->wnext = NULL;
  if (owing_tail) owing_tail->wnext = j;
  else owing_head = j;
  owing_tail = j;
}

void pr_shep_answered(job_t *j, uint64_t read_ns) {
  if (owing(j) && read_ns >= j->asked_ns) unowe(j);
}

job_t *pr_shep_overdue(uint64_t now_ms) {
  job_t *j = owing_head;
  if (j == NULL || j->answer_by > now_ms) return NULL;
  unowe(j);
  return j;
}

int pr_shep_answer_wait(uint64_t now_ms) {
  if (owing_head == NULL) return -1;
  return owing_head->answer_by <= now_ms ? 0 : (int)(owing_head->answer_by - now_ms);
}

job_t *pr_shep_find_id(uint64_t id) { return pr_idmap_get(&by_id, id); }

job_t *pr_shep_find_reaper(pid_t pid) { return pr_idmap_get(&by_reaper, (uint64_t)pid); }

int pr_shep_add_job(job_t *j) {
  if (pr_idmap_put(&by_reaper, (uint64_t)j->reaper, j) != 0) return -1;
  if (pr_idmap_put(&by_id, j->id, j) != 0) {
    pr_idmap_del(&by_reaper, (uint64_t)j->reaper);
    return -1;
  }
  njobs++;
  return 0;
}

void pr_shep_release_job(job_t *j) {
  if (j->released) return;
  j->released = 1;
  if (pr_idmap_get(&by_id, j->id) == j) pr_idmap_del(&by_id, j->id);
}

void pr_shep_remove_job(job_t *j) {
  pr_shep_release_job(j);
  unowe(j);
  pr_idmap_del(&by_reaper, (uint64_t)j->reaper);
  for (int i = 0; i < j->nfds; i++) close(j->fds[i]);
  njobs--;
  free(j);
}

job_t *pr_shep_next_job(size_t *at) { return pr_idmap_next(&by_reaper, at, NULL); }

int pr_shep_njobs(void) { return njobs; }
