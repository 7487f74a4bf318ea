/* audit.c — JSON lines for lifecycle events, appended and rotated by size.
 *
 * Thread: see audit.h. The engine thread formats a line (cJSON) and pushes
 * it; the writer thread appends it, rotating first when it would not fit.
 */
#include "store/audit.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "engine/exec.h"
#include "engine/secrets.h"

typedef struct pr_audit {
  char *path;
  int fd;
  uint64_t size;     /* writer thread: bytes in the current file */
  uint64_t max;
  uint32_t keep;
  int broken;        /* writer thread: a write failed (warned once) */
} pr_audit_t;

int pr_audit_open(pr_journal_t *j, const char *path) {
  pr_engine_t *e = j->eng;
  pr_audit_t *a = calloc(1, sizeof(*a));
  if (a == NULL || (a->path = strdup(path)) == NULL) {
    free(a);
    return PR_ENOMEM;
  }
  a->max = e->opts.audit_max_bytes ? e->opts.audit_max_bytes : PR_AUDIT_DEFAULT_MAX;
  a->keep = e->opts.audit_keep ? e->opts.audit_keep : PR_AUDIT_DEFAULT_KEEP;
  a->fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  struct stat st;
  if (a->fd < 0 || fstat(a->fd, &st) != 0) {
    pr_journal_warn(j, "audit: %s: %s; no audit log for this engine", path, strerror(errno));
    if (a->fd >= 0) close(a->fd);
    free(a->path);
    free(a);
    return 0;
  }
  a->size = (uint64_t)st.st_size;
  j->audit = a;
  return 0;
}

void pr_audit_free(pr_journal_t *j) {
  pr_audit_t *a = j->audit;
  if (a == NULL) return;
  if (a->fd >= 0) close(a->fd);
  free(a->path);
  free(a);
  j->audit = NULL;
}

/* ---- writer thread ---------------------------------------------------------------- */

static void rotate(pr_journal_t *j, pr_audit_t *a) {
  size_t n = strlen(a->path) + 16;
  char *from = malloc(n), *to = malloc(n);
  if (from && to) {
    snprintf(to, n, "%s.%u", a->path, a->keep);
    unlink(to);
    for (uint32_t i = a->keep; i > 1; i--) {
      snprintf(from, n, "%s.%u", a->path, i - 1);
      snprintf(to, n, "%s.%u", a->path, i);
      rename(from, to); /* ENOENT for the ones that do not exist yet */
    }
    snprintf(to, n, "%s.1", a->path);
    if (rename(a->path, to) == 0) {
      int fd = open(a->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (fd >= 0) {
        close(a->fd);
        a->fd = fd;
        a->size = 0;
      }
    } else {
      pr_journal_warn(j, "audit: cannot rotate %s (%s)", a->path, strerror(errno));
    }
  }
  free(from);
  free(to);
}

static void run_line(pr_journal_t *j, pr_job_t *job) {
  pr_audit_t *a = j->audit;
  if (a == NULL || a->broken) return;
  if (a->size > 0 && a->size + job->len > a->max) rotate(j, a);
  const char *p = job->data;
  size_t n = job->len;
  while (n > 0) {
    ssize_t w = write(a->fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      a->broken = 1;
      pr_journal_warn(j, "audit: write to %s failed (%s); nothing more is logged", a->path,
                      strerror(w < 0 ? errno : EIO));
      return;
    }
    p += w;
    n -= (size_t)w;
    a->size += (uint64_t)w;
  }
}

/* ---- engine thread ---------------------------------------------------------------- */

static const char *event_name(const pr_exec_t *x) { return pr_state_name(x->state); }

void pr_audit_on_state(pr_journal_t *j, pr_exec_t *x, pr_state_t prev) {
  cJSON *o = cJSON_CreateObject();
  if (o == NULL) return;
  cJSON_AddNumberToObject(o, "ts", (double)pr_now_ms());
  cJSON_AddStringToObject(o, "event", event_name(x));
  if (prev < PR_NSTATE) cJSON_AddStringToObject(o, "prev", pr_state_name(prev));
  else cJSON_AddNullToObject(o, "prev");
  cJSON_AddNumberToObject(o, "id", (double)x->id);
  cJSON_AddStringToObject(o, "owner", x->owner ? x->owner : "");
  cJSON_AddNumberToObject(o, "session", (double)x->session);
  cJSON_AddNumberToObject(o, "host_pid", (double)getpid());
  cJSON_AddNumberToObject(o, "uid", (double)getuid());
  if (x->label) cJSON_AddStringToObject(o, "label", x->label);
  if (x->shell) {
    cJSON_AddStringToObject(o, "cmd", x->shell);
  } else {
    cJSON *argv = cJSON_AddArrayToObject(o, "cmd");
    for (size_t i = 0; argv && i < x->argc; i++)
      cJSON_AddItemToArray(argv, cJSON_CreateString(x->argv[i] ? x->argv[i] : ""));
  }
  cJSON_AddStringToObject(o, "cwd", x->cwd ? x->cwd : "");
  cJSON *keys = cJSON_AddArrayToObject(o, "env_keys");
  for (size_t at = 0; keys && at < x->env_keys_len; at += strlen(x->env_keys + at) + 1)
    cJSON_AddItemToArray(keys, cJSON_CreateString(x->env_keys + at));
  if (x->pid > 0) cJSON_AddNumberToObject(o, "pid", (double)x->pid);
  if (pr_state_terminal(x->state)) {
    if (x->reason) cJSON_AddStringToObject(o, "reason", x->reason);
    if (x->signal > 0) {
      char sb[32];
      cJSON_AddStringToObject(o, "signal", pr_signal_name(x->signal, sb, sizeof(sb)));
    } else if (x->exit_code >= 0) {
      cJSON_AddNumberToObject(o, "exit_code", x->exit_code);
    }
    if (x->error) cJSON_AddStringToObject(o, "error", x->error);
    cJSON_AddNumberToObject(o, "duration_ms", (double)x->duration_ms);
  }
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  char *clean = s ? pr_secrets_scrub(x->secrets, s) : NULL;
  cJSON_free(s);
  size_t n = clean ? strlen(clean) : 0;
  pr_job_t *job = clean ? pr_journal_job(run_line, n + 1) : NULL;
  if (job) {
    memcpy(job->data, clean, n);
    job->data[n] = '\n';
    pr_journal_push(j, job);
  }
  free(clean);
}
