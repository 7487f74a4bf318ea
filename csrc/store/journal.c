/* journal.c — the writer thread shared by the history (history.c) and the
 * audit log (audit.c), and the warnings both report to the host.
 *
 * Thread: see journal.h. The writer thread only runs jobs; the files it
 * writes belong to it from pr_journal_open (which loads them on the host
 * thread before any thread exists) until pr_journal_close (which joins it).
 */
#include "store/journal.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/audit.h"
#include "store/history.h"

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
    job->run(j, job);
    free(job);
    pthread_mutex_lock(&j->mu);
  }
  pthread_mutex_unlock(&j->mu);
  return NULL;
}

int pr_journal_open(pr_engine_t *e) {
  if (e->opts.history_file == NULL && e->opts.audit_file == NULL) return 0;
  pr_journal_t *j = calloc(1, sizeof(*j));
  if (j == NULL) return PR_ENOMEM;
  j->eng = e;
  pthread_mutex_init(&j->mu, NULL);
  pthread_cond_init(&j->cond, NULL);
  pr_queue_init(&j->jobs);
  e->journal = j;
  int rc = 0;
  if (e->opts.history_file) rc = pr_history_open(j, e->opts.history_file);
  if (rc == 0 && e->opts.audit_file) rc = pr_audit_open(j, e->opts.audit_file);
  if (rc == 0) {
    sigset_t all, old; /* the writer must not take the host's signals */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    rc = -pthread_create(&j->thread, NULL, writer_main, j);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    j->thread_started = rc == 0;
  }
  if (rc != 0) pr_journal_close(e);
  return rc;
}

void pr_journal_close(pr_engine_t *e) {
  pr_journal_t *j = e->journal;
  if (j == NULL) return;
  if (j->thread_started) {
    pthread_mutex_lock(&j->mu);
    j->stop = 1;
    pthread_cond_signal(&j->cond);
    pthread_mutex_unlock(&j->mu);
    pthread_join(j->thread, NULL);
  }
  while (!pr_queue_empty(&j->jobs)) { /* only when the thread never started */
    pr_queue_t *q = pr_queue_head(&j->jobs);
    pr_queue_remove(q);
    free(PR_QUEUE_DATA(q, pr_job_t, node));
  }
  pr_history_free(j);
  pr_audit_free(j);
  for (size_t i = 0; i < j->nwarnings; i++) free(j->warnings[i]);
  free(j->warnings);
  pthread_mutex_destroy(&j->mu);
  pthread_cond_destroy(&j->cond);
  free(j);
  e->journal = NULL;
}

pr_job_t *pr_journal_job(void (*run)(pr_journal_t *, pr_job_t *), size_t len) {
  pr_job_t *job = calloc(1, sizeof(*job) + len);
  if (job == NULL) return NULL;
  job->run = run;
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

void pr_journal_warnings(pr_engine_t *e, char ***out, size_t *n) {
  *out = NULL;
  *n = 0;
  pr_journal_t *j = e->journal;
  if (j == NULL) return;
  pthread_mutex_lock(&j->mu);
  *out = j->warnings;
  *n = j->nwarnings;
  j->warnings = NULL;
  j->nwarnings = 0;
  pthread_mutex_unlock(&j->mu);
}

void pr_journal_on_state(pr_exec_t *x, pr_state_t prev) {
  pr_journal_t *j = x->eng->journal;
  if (j == NULL || x->previous_session) return;
  if (j->history) pr_history_on_state(j, x, prev);
  if (j->audit) pr_audit_on_state(j, x, prev);
}

void pr_journal_on_remove(pr_engine_t *e, pr_exec_t *x) {
  if (e->journal && e->journal->history) pr_history_forget(e->journal, x->id);
}

void pr_journal_compact(pr_engine_t *e) {
  if (e->journal && e->journal->history) pr_history_compact(e->journal);
}
