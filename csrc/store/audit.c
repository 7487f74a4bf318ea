/* store/audit.c — JSON lines for lifecycle events, appended and rotated by size.
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

struct pr_audit {
  pr_journal_t *j;
  pr_listener_t listener;
  char *path;
  int fd;
  uint64_t size; /* writer thread: bytes in the current file */
  uint64_t max;
  uint32_t keep;
  int broken; /* writer thread: a write failed (warned once) */
};

static void on_state(void *arg, const pr_state_info_t *st);

int pr_audit_open(pr_journal_t *j, const char *path, uint64_t max_bytes, uint32_t keep,
                  pr_audit_t **out) {
  *out = NULL;
  pr_audit_t *a = calloc(1, sizeof(*a));
  if (a == NULL || (a->path = strdup(path)) == NULL) {
    free(a);
    return PR_ENOMEM;
  }
  a->j = j;
  a->listener = (pr_listener_t){.state = on_state, .arg = a};
  a->max = max_bytes ? max_bytes : PR_AUDIT_DEFAULT_MAX;
  a->keep = keep ? keep : PR_AUDIT_DEFAULT_KEEP;
  char why[128];
  /* never blocks: a FIFO or a device is refused (journal.h) */
  a->fd = pr_journal_open_file(path, O_WRONLY | O_CREAT | O_APPEND, why, sizeof(why));
  struct stat st;
  int bad = a->fd < 0;
  if (!bad && fstat(a->fd, &st) != 0) {
    snprintf(why, sizeof(why), "%s", strerror(errno));
    bad = 1;
  }
  if (bad) {
    pr_journal_warn(j, "audit: %s: %s; no audit log for this engine", path, why);
    if (a->fd >= 0) close(a->fd);
    free(a->path);
    free(a);
    return 0;
  }
  a->size = (uint64_t)st.st_size;
  *out = a;
  return 0;
}

pr_listener_t *pr_audit_listener(pr_audit_t *a) { return &a->listener; }

void pr_audit_free(pr_audit_t *a) {
  if (a == NULL) return;
  if (a->fd >= 0) close(a->fd);
  free(a->path);
  free(a);
}

/* ---- writer thread ---------------------------------------------------------------- */

static void rotate(pr_audit_t *a) {
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
      char why[128]; /* a FIFO put in its place must not hold the writer thread */
      int fd = pr_journal_open_file(a->path, O_WRONLY | O_CREAT | O_APPEND, why, sizeof(why));
      if (fd < 0)
        pr_journal_warn(a->j, "audit: cannot reopen %s after rotating it (%s)", a->path, why);
      if (fd >= 0) {
        close(a->fd);
        a->fd = fd;
        a->size = 0;
      }
    } else {
      pr_journal_warn(a->j, "audit: cannot rotate %s (%s)", a->path, strerror(errno));
    }
  }
  free(from);
  free(to);
}

static void run_line(void *sink, pr_job_t *job) {
  pr_audit_t *a = sink;
  if (a->broken) return;
  if (a->size > 0 && a->size + job->len > a->max) rotate(a);
  const char *p = job->data;
  size_t n = job->len;
  while (n > 0) {
    ssize_t w = write(a->fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      a->broken = 1;
      pr_journal_warn(a->j, "audit: write to %s failed (%s); nothing more is logged", a->path,
                      strerror(w < 0 ? errno : EIO));
      return;
    }
    p += w;
    n -= (size_t)w;
    a->size += (uint64_t)w;
  }
}

/* ---- engine thread ---------------------------------------------------------------- */

/* The record fields an audit line carries (in record order), and those it
 * carries only once the execution has ended. */
static const unsigned char in_line[PR_RF_COUNT] = {
    [PR_RF_ID] = 1,        [PR_RF_SESSION] = 1, [PR_RF_LABEL] = 1,  [PR_RF_OWNER] = 1,
    [PR_RF_CWD] = 1,       [PR_RF_CMD] = 1,     [PR_RF_REASON] = 2, [PR_RF_ERROR] = 2,
    [PR_RF_EXIT_CODE] = 2, [PR_RF_SIGNAL] = 2,  [PR_RF_PID] = 1,    [PR_RF_DURATION_MS] = 2,
    [PR_RF_ENV_KEYS] = 1};

/* One field's value as JSON (NULL when out of memory). */
static cJSON *json_value(const pr_field_t *f) {
  const pr_record_t *r = f->r;
  char sb[32];
  switch (f->type) {
  case PR_FT_U64: return cJSON_CreateNumber((double)f->u);
  case PR_FT_I64: return cJSON_CreateNumber((double)f->i);
  case PR_FT_BOOL: return cJSON_CreateBool((int)f->i);
  case PR_FT_STR: return cJSON_CreateString(f->s);
  case PR_FT_SIGNAL: return cJSON_CreateString(pr_signal_name((int)f->i, sb, sizeof(sb)));
  case PR_FT_CMD: {
    if (r->shell) return cJSON_CreateString(r->shell);
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; a && i < r->argc; i++)
      cJSON_AddItemToArray(a, cJSON_CreateString(r->argv[i] ? r->argv[i] : ""));
    return a;
  }
  case PR_FT_KEYS: {
    cJSON *a = cJSON_CreateArray();
    size_t at = 0;
    for (const char *k; a && (k = pr_record_key_next(r, &at)) != NULL;)
      cJSON_AddItemToArray(a, cJSON_CreateString(k));
    return a;
  }
  case PR_FT_STREAMS: break; /* not in the line */
  }
  return cJSON_CreateNull();
}

/* The listener: the line for an execution entering its state. */
static void on_state(void *arg, const pr_state_info_t *st) {
  pr_audit_t *a = arg;
  pr_state_t prev = st->prev;
  pr_record_t r;
  pr_exec_view(st->x, &r, 0);
  if (r.previous_session) return;
  cJSON *o = cJSON_CreateObject();
  if (o == NULL) return;
  cJSON_AddNumberToObject(o, "ts", (double)pr_now_ms());
  cJSON_AddStringToObject(o, "event", pr_state_name(r.state));
  if (prev < PR_NSTATE) cJSON_AddStringToObject(o, "prev", pr_state_name(prev));
  else cJSON_AddNullToObject(o, "prev");
  cJSON_AddNumberToObject(o, "host_pid", (double)getpid());
  cJSON_AddNumberToObject(o, "uid", (double)getuid());
  int want = pr_state_terminal(r.state) ? 2 : 1;
  pr_field_t f[PR_RF_COUNT];
  size_t n = pr_record_fields(&r, f);
  for (size_t i = 0; i < n; i++)
    if (in_line[f[i].id] && in_line[f[i].id] <= want)
      cJSON_AddItemToObject(o, f[i].key, json_value(&f[i]));
  char *s = cJSON_PrintUnformatted(o);
  cJSON_Delete(o);
  char *clean = s ? pr_exec_scrub(st->x, s) : NULL;
  cJSON_free(s);
  size_t len = clean ? strlen(clean) : 0;
  pr_job_t *job = clean ? pr_journal_job(run_line, a, len + 1) : NULL;
  if (job) {
    memcpy(job->data, clean, len);
    job->data[len] = '\n';
    pr_journal_push(a->j, job);
  }
  free(clean);
}
