/* store/journal.h — a writer thread for the durable files, and the warnings
 * their owners report to the host.
 *
 * Thread: pr_journal_new/start/stop/free and pr_journal_warnings run on the
 * HOST thread; pr_journal_push on the ENGINE thread (and the host's, before
 * the engine thread starts); pr_journal_warn on any. Jobs run on the
 * journal's own WRITER thread, in the order they were pushed.
 *
 *   engine thread ── pr_journal_push(job) ──► jobs (mu, bounded) ──► writer: job->run(job->sink, job)
 *   host: pr_journal_warnings() ◄── warnings (mu) ◄── load, write errors, drops
 *
 * The journal knows no sink: a job carries the function that runs it and
 * the object it writes to (store/history.c, store/audit.c). The engine
 * thread never waits for the disk: a push only links a job in. When more
 * than PR_JOURNAL_QUEUE_MAX bytes are waiting (the disk is far behind) a job
 * is dropped and counted, and a warning says so.
 */
#ifndef PR_JOURNAL_H
#define PR_JOURNAL_H

#include <stddef.h>
#include <stdint.h>

#include "base/queue.h"

#define PR_JOURNAL_QUEUE_MAX (64u << 20)

typedef struct pr_journal pr_journal_t;
typedef struct pr_job pr_job_t;

/* A unit of writer work. `run(sink, job)` is called on the writer thread,
 * then the job is freed with free() (it owns its inline bytes). */
struct pr_job {
  pr_queue_t node;
  void (*run)(void *sink, pr_job_t *job);
  void *sink;  /* what run writes to; outlives the writer thread */
  uint64_t id; /* free for the job's owner */
  int kind;    /* free for the job's owner */
  size_t len;  /* bytes in data */
  char data[];
};

/* pr_journal_new: a journal whose writer is not started yet. Returns 0 or
 * PR_ENOMEM. */
int pr_journal_new(pr_journal_t **out);

/* pr_journal_start: start the writer thread (it takes no signals). Returns 0
 * or a negative errno. */
int pr_journal_start(pr_journal_t *j);

/* pr_journal_stop: run every queued job, stop the writer thread. Idempotent. */
void pr_journal_stop(pr_journal_t *j);

/* pr_journal_stopping: 1 once pr_journal_stop has been called (a job may
 * poll it; the test hook that holds the writer does). Any thread. */
int pr_journal_stopping(pr_journal_t *j);

/* pr_journal_free: stop, then free the journal and its warnings. NULL is fine. */
void pr_journal_free(pr_journal_t *j);

/* pr_journal_job: a job with `len` bytes of inline data (NULL on ENOMEM). */
pr_job_t *pr_journal_job(void (*run)(void *, pr_job_t *), void *sink, size_t len);

/* pr_journal_push: queue `job` (ownership passes) for the writer thread.
 * Never blocks on the disk. Returns 0, or PR_EBUSY when the queue is full
 * (the job is freed, counted and reported as a warning). */
int pr_journal_push(pr_journal_t *j, pr_job_t *job);

/* pr_journal_warn: record a warning for the host (printf format). Any thread. */
void pr_journal_warn(pr_journal_t *j, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* pr_journal_open_file: open a configured path (a history file, its lock,
 * its compaction file, an audit log) for the durable files, without ever
 * blocking the thread that opens it: open(2) with `flags` | O_NONBLOCK |
 * O_CLOEXEC | O_NOCTTY, mode 0600 (a FIFO with no reader would otherwise
 * hold a write-only open for ever, and Neovim with it), then only a regular
 * file is kept and O_NONBLOCK is cleared. Returns the fd, or -1 with why
 * (cap bytes) saying what the path is ("not a regular file (it is a FIFO)")
 * or the error. Any thread. */
int pr_journal_open_file(const char *path, int flags, char *why, size_t cap);

/* pr_journal_warnings: take the warnings recorded so far (each is returned
 * once). *out is a malloc'd array of *n malloc'd strings (NULL when none). */
void pr_journal_warnings(pr_journal_t *j, char ***out, size_t *n);

#endif
