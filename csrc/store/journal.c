/* store/journal.c — the writer thread shared by the history (history.c) and
 * the audit log (audit.c), and the warnings both report to the host.
 *
 * Thread: see journal.h. The writer thread only runs jobs; the files they
 * write belong to their sinks, which the writer reaches only through jobs.
 */
#include "store/journal.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "include/proctor.h"

struct pr_journal {
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
};

static void *writer_main(void *arg) {
  pr_journal_t *j = arg;
  pthread_mutex_lock(&j->mu);
  for (;;) {
    while (pr_queue_empty(&j->jobs) && !j->stop) pthread_cond_wait(&j->cond, &j->mu);
    if (pr_queue_empty(&j->jobs)) break; /* stop, and everything is written */
    pr_queue_t *q = pr_queue_head(&j->jobs);
    pr_queue_remove(q);
    pr_job_t *job = PR_QUEUE_DATA(q, pr_job_t, node);
    j->queued -= job->len;
    pthread_mutex_unlock(&j->mu);
    job->run(job->sink, job);
    free(job);
    pthread_mutex_lock(&j->mu);
  }
  pthread_mutex_unlock(&j->mu);
  return NULL;
}

int pr_journal_new(pr_journal_t **out) {
  pr_journal_t *j = calloc(1, sizeof(*j));
  *out = j;
  if (j == NULL) return PR_ENOMEM;
  pthread_mutex_init(&j->mu, NULL);
  pthread_cond_init(&j->cond, NULL);
  pr_queue_init(&j->jobs);
  return 0;
}

int pr_journal_start(pr_journal_t *j) {
  sigset_t all, old; /* the writer must not take the host's signals */
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = -pthread_create(&j->thread, NULL, writer_main, j);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  j->thread_started = rc == 0;
  return rc;
}

void pr_journal_stop(pr_journal_t *j) {
  if (j == NULL) return;
  if (j->thread_started) {
    pthread_mutex_lock(&j->mu);
    j->stop = 1;
    pthread_cond_signal(&j->cond);
    pthread_mutex_unlock(&j->mu);
    pthread_join(j->thread, NULL);
    j->thread_started = 0;
  }
  while (!pr_queue_empty(&j->jobs)) { /* only when the thread never started */
    pr_queue_t *q = pr_queue_head(&j->jobs);
    pr_queue_remove(q);
    free(PR_QUEUE_DATA(q, pr_job_t, node));
  }
}

int pr_journal_stopping(pr_journal_t *j) {
  pthread_mutex_lock(&j->mu);
  int stop = j->stop;
  pthread_mutex_unlock(&j->mu);
  return stop;
}

void pr_journal_free(pr_journal_t *j) {
  if (j == NULL) return;
  pr_journal_stop(j);
  for (size_t i = 0; i < j->nwarnings; i++) free(j->warnings[i]);
  free(j->warnings);
  pthread_mutex_destroy(&j->mu);
  pthread_cond_destroy(&j->cond);
  free(j);
}

pr_job_t *pr_journal_job(void (*run)(void *, pr_job_t *), void *sink, size_t len) {
  pr_job_t *job = calloc(1, sizeof(*job) + len);
  if (job == NULL) return NULL;
  job->run = run;
  job->sink = sink;
  job->len = len;
  return job;
}

int pr_journal_push(pr_journal_t *j, pr_job_t *job) {
  pthread_mutex_lock(&j->mu);
  if (j->queued + job->len > PR_JOURNAL_QUEUE_MAX && !pr_queue_empty(&j->jobs)) {
    uint64_t d = ++j->dropped;
    pthread_mutex_unlock(&j->mu);
    free(job);
    if ((d & (d - 1)) == 0) /* 1, 2, 4, 8...: say it, without flooding */
      pr_journal_warn(j, "journal: the disk is behind; %llu writes dropped", (unsigned long long)d);
    return PR_EBUSY;
  }
  j->queued += job->len;
  pr_queue_push(&j->jobs, &job->node);
  pthread_cond_signal(&j->cond);
  pthread_mutex_unlock(&j->mu);
  return 0;
}

void pr_journal_warn(pr_journal_t *j, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  char *s = strdup(buf);
  if (s == NULL) return;
  pthread_mutex_lock(&j->mu);
  char **v = j->nwarnings < 256 ? realloc(j->warnings, (j->nwarnings + 1) * sizeof(char *)) : NULL;
  if (v) {
    j->warnings = v;
    v[j->nwarnings++] = s;
    s = NULL;
  }
  pthread_mutex_unlock(&j->mu);
  free(s);
}

void pr_journal_warnings(pr_journal_t *j, char ***out, size_t *n) {
  *out = NULL;
  *n = 0;
  if (j == NULL) return;
  pthread_mutex_lock(&j->mu);
  *out = j->warnings;
  *n = j->nwarnings;
  j->warnings = NULL;
  j->nwarnings = 0;
  pthread_mutex_unlock(&j->mu);
}

/* ---- opening a configured path (any thread) ------------------------------------ */

static const char *kind(mode_t m) {
  return S_ISFIFO(m)   ? "a FIFO"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISDIR(m)  ? "a directory"
         : S_ISSOCK(m) ? "a socket"
                       : "another kind of file";
}

#define NOT_REGULAR "not a regular file (it is %s)"

int pr_journal_open_file(const char *path, int flags, char *why, size_t cap) {
  struct stat st;
  int fd = open(path, flags | O_NONBLOCK | O_CLOEXEC | O_NOCTTY, 0600);
  if (fd < 0) {
    int err = errno; /* a FIFO with no reader answers a write-only open with ENXIO */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode))
      snprintf(why, cap, NOT_REGULAR, kind(st.st_mode));
    else snprintf(why, cap, "%s", strerror(err));
    return -1;
  }
  if (fstat(fd, &st) != 0) snprintf(why, cap, "%s", strerror(errno));
  else if (!S_ISREG(st.st_mode)) snprintf(why, cap, NOT_REGULAR, kind(st.st_mode));
  else {
    int fl = fcntl(fd, F_GETFL); /* a regular file never blocks: plain writes from here on */
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
  }
  close(fd);
  return -1;
}
