/* journal.h — the engine's durable files: one writer thread, warnings.
 *
 * Thread: pr_journal_open/close and pr_journal_warnings run on the HOST
 * thread; pr_journal_push, pr_journal_warn and pr_journal_on_state run on
 * the ENGINE thread (pr_journal_warn also on the writer thread, and on the
 * host thread during open). Jobs run on the journal's own WRITER thread, in
 * the order they were pushed.
 *
 *   engine thread ── pr_journal_push(job) ──► jobs (mu, bounded) ──► writer thread
 *     transition() ─► pr_journal_on_state ─► history.c / audit.c build a job
 *   host: pr_journal_warnings() ◄── warnings (mu) ◄── load, write errors, drops
 *
 * The engine thread never waits for the disk: a push only links a job in.
 * When more than PR_JOURNAL_QUEUE_MAX bytes are waiting (the disk is far
 * behind) a job is dropped and counted, and a warning says so.
 */
#ifndef PR_JOURNAL_H
#define PR_JOURNAL_H

#include <stdarg.h>

#include "base/queue.h"
#include "engine/types.h"

#define PR_JOURNAL_QUEUE_MAX (64u << 20)

typedef struct pr_journal pr_journal_t;
typedef struct pr_job pr_job_t;

/* A unit of writer work. `run` is called on the writer thread, then the job
 * is freed with free() (it owns its inline bytes). */
struct pr_job {
  pr_queue_t node;
  void (*run)(pr_journal_t *j, pr_job_t *job);
  uint64_t id;      /* free for the job's owner */
  int kind;         /* free for the job's owner */
  size_t len;       /* bytes in data */
  char data[];
};

struct pr_journal {
  pr_engine_t *eng;
  pthread_t thread;
  int thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cond;
  pr_queue_t jobs;  /* locked by mu */
  size_t queued;    /* bytes in jobs, locked by mu */
  int stop;         /* locked by mu */
  uint64_t dropped; /* jobs dropped because the queue was full, locked by mu */
  char **warnings;  /* locked by mu; taken by pr_journal_warnings */
  size_t nwarnings;
  struct pr_history *history; /* history.c, NULL when off */
  struct pr_audit *audit;     /* audit.c, NULL when off */
};

/* pr_journal_open: when e->opts names a history or audit file, create
 * e->journal, open those files (loading the history into the registry) and
 * start the writer thread. Host thread, inside pr_engine_new before the
 * engine thread starts. Returns 0 or a negative error (the files are closed
 * again and e->journal is NULL). */
int pr_journal_open(pr_engine_t *e);

/* pr_journal_close: run every queued job, stop the writer thread, close the
 * files, free e->journal. Host thread, after the engine thread has ended (or
 * never started). NULL journal: no-op. */
void pr_journal_close(pr_engine_t *e);

/* pr_journal_job: a job with `len` bytes of inline data (NULL on ENOMEM). */
pr_job_t *pr_journal_job(void (*run)(pr_journal_t *, pr_job_t *), size_t len);

/* pr_journal_push: queue `job` (ownership passes) for the writer thread.
 * Never blocks on the disk. Returns 0, or PR_EBUSY when the queue is full
 * (the job is freed, counted and reported as a warning). Any thread. */
int pr_journal_push(pr_journal_t *j, pr_job_t *job);

/* pr_journal_warn: record a warning for the host (printf format). Any thread. */
void pr_journal_warn(pr_journal_t *j, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* pr_journal_warnings: take the warnings recorded so far (each is returned
 * once). *out is a malloc'd array of *n malloc'd strings (NULL when none).
 * Host thread (any thread, in fact: it only takes mu). */
void pr_journal_warnings(pr_engine_t *e, char ***out, size_t *n);

/* pr_journal_on_state: x changed state from `prev` (PR_NSTATE: it was just
 * queued). Feeds the history and the audit log. Engine thread. */
void pr_journal_on_state(pr_exec_t *x, pr_state_t prev);

/* pr_journal_on_remove: x is leaving the registry (delete, purge, retention).
 * Engine thread. */
void pr_journal_on_remove(pr_engine_t *e, pr_exec_t *x);

/* pr_journal_compact: rewrite the history file without forgotten records
 * (after delete and purge). Engine thread; the work happens on the writer. */
void pr_journal_compact(pr_engine_t *e);

#endif
