/* store/history.c — the history file of this engine's slot: append, forget,
 * compact; a listener of the engine. Loading is history_load.c's.
 *
 * Thread: see history.h. After load the file, its index and its counters
 * belong to the writer thread alone; the engine thread only packs frames
 * (from the record of an execution, pr_exec_view) and pushes jobs.
 */
#include "store/history_int.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/mpack.h"
#include "store/frame.h"

enum { J_APPEND = 1, J_FORGET, J_COMPACT };

/* ---- packing (engine thread) --------------------------------------------------- */

static int kv_str(msgpack_packer *pk, const char *k, const char *v) {
  return v ? pr_mp_kv_str(pk, k, v) : 0;
}

/* The record's fields as the file names them (NULL: not kept). The names
 * are the file format: files written by every release load through them. */
const char *const pr_hist_key[PR_RF_COUNT] = {[PR_RF_ID] = "id",
                                              [PR_RF_LABEL] = "label",
                                              [PR_RF_OWNER] = "owner",
                                              [PR_RF_CWD] = "cwd",
                                              [PR_RF_TARGET] = "target",
                                              [PR_RF_CMD] = "cmd",
                                              [PR_RF_PTY] = "pty",
                                              [PR_RF_CREATED_AT] = "created",
                                              [PR_RF_ENV_KEYS] = "env",
                                              /* end frames only: */
                                              [PR_RF_STATE] = "state",
                                              [PR_RF_REASON] = "reason",
                                              [PR_RF_ERROR] = "error",
                                              [PR_RF_EXIT_CODE] = "exit",
                                              [PR_RF_SIGNAL] = "sig",
                                              [PR_RF_STARTED_AT] = "started",
                                              [PR_RF_ENDED_AT] = "ended",
                                              [PR_RF_DURATION_MS] = "dur"};
static const unsigned char end_only[PR_RF_COUNT] = {
    [PR_RF_STATE] = 1,  [PR_RF_REASON] = 1,     [PR_RF_ERROR] = 1,    [PR_RF_EXIT_CODE] = 1,
    [PR_RF_SIGNAL] = 1, [PR_RF_STARTED_AT] = 1, [PR_RF_ENDED_AT] = 1, [PR_RF_DURATION_MS] = 1};

/* One field's value as the file keeps it: a signal as its number, the
 * environment keys as one bin of NUL-terminated names. */
static int pack_value(msgpack_packer *pk, const pr_field_t *f) {
  const pr_record_t *r = f->r;
  switch (f->type) {
  case PR_FT_U64: return msgpack_pack_uint64(pk, f->u);
  case PR_FT_I64:
  case PR_FT_SIGNAL: return msgpack_pack_int64(pk, f->i);
  case PR_FT_BOOL: return f->i ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
  case PR_FT_STR: return pr_mp_str(pk, f->s);
  case PR_FT_CMD: return pr_mp_cmd(pk, r);
  case PR_FT_KEYS:
    return msgpack_pack_bin(pk, r->env_keys_len) ||
           msgpack_pack_bin_body(pk, r->env_keys ? r->env_keys : "", r->env_keys_len);
  case PR_FT_STREAMS: break;
  }
  return -1;
}

/* A record payload: kind 's' (what was started) or 'e' (+ how it ended and
 * the last `tail` bytes of each stream, from `rings`). */
static int pack_record(msgpack_packer *pk, const pr_record_t *r, pr_ring_t *const *rings, char kind,
                       size_t tail) {
  pr_field_t f[PR_RF_COUNT];
  size_t n = pr_record_fields(r, f), keep = 0;
  for (size_t i = 0; i < n; i++)
    if (pr_hist_key[f[i].id] && (kind == 'e' || !end_only[f[i].id])) f[keep++] = f[i];
  int nstreams = 0;
  for (int i = 0; i < PR_NSTREAM; i++) nstreams += rings[i] != NULL;
  char k[2] = {kind, 0};
  if (msgpack_pack_map(pk, 1 + keep + (kind == 'e')) || pr_mp_kv_str(pk, "k", k)) return -1;
  for (size_t i = 0; i < keep; i++)
    if (pr_mp_str(pk, pr_hist_key[f[i].id]) || pack_value(pk, &f[i])) return -1;
  if (kind != 'e') return 0;
  if (pr_mp_str(pk, "out") || msgpack_pack_array(pk, nstreams)) return -1;
  for (int i = 0; i < PR_NSTREAM; i++) {
    pr_ring_t *ring = rings[i];
    if (ring == NULL) continue;
    uint64_t head, total, next, missed;
    pr_ring_stats(ring, &head, &total);
    uint64_t from = total > tail ? total - tail : 0;
    char *data = NULL;
    size_t len = 0;
    if (pr_ring_read(ring, from < head ? head : from, tail, &data, &len, &next, &missed) != 0)
      len = 0;
    int bad = msgpack_pack_array(pk, 3) || msgpack_pack_int(pk, i) ||
              msgpack_pack_uint64(pk, total) || msgpack_pack_bin(pk, len) ||
              msgpack_pack_bin_body(pk, data ? data : "", len);
    free(data);
    if (bad) return -1;
  }
  return 0;
}

static void run_job(void *sink, pr_job_t *job);

/* Wrap a payload into a frame job. */
static pr_job_t *frame_job(pr_history_t *h, msgpack_sbuffer *payload, int type, char kind,
                           uint64_t id) {
  msgpack_sbuffer f;
  msgpack_packer pk;
  msgpack_sbuffer_init(&f);
  msgpack_packer_init(&pk, &f, msgpack_sbuffer_write);
  pr_job_t *job = NULL;
  if (!(msgpack_pack_array(&pk, 2) ||
        msgpack_pack_uint32(&pk, pr_frame_sum(payload->data ? payload->data : "", payload->size)) ||
        msgpack_pack_bin(&pk, payload->size) ||
        msgpack_pack_bin_body(&pk, payload->data ? payload->data : "", payload->size)) &&
      (job = pr_journal_job(run_job, h, f.size)) != NULL) {
    memcpy(job->data, f.data, f.size);
    job->kind = type | kind << 8;
    job->id = id;
  }
  msgpack_sbuffer_destroy(&f);
  return job;
}

/* Append a start ('s') or end ('e') frame of record r. */
void pr_hist_record_frame(pr_history_t *h, const pr_record_t *r, pr_ring_t *const *rings,
                          char kind) {
  msgpack_sbuffer b;
  msgpack_packer pk;
  msgpack_sbuffer_init(&b);
  msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
  pr_job_t *job = NULL;
  if (pack_record(&pk, r, rings, kind, h->o.tail_bytes) == 0)
    job = frame_job(h, &b, J_APPEND, kind, r->id);
  msgpack_sbuffer_destroy(&b);
  if (job) pr_journal_push(h->j, job);
  else
    pr_journal_warn(h->j, "history: out of memory; execution %llu not recorded",
                    (unsigned long long)r->id);
}

/* The listener: a start frame when an execution is queued, its record with
 * output tails when it ends. */
static void on_state(void *arg, const pr_state_info_t *st) {
  char kind = st->prev == PR_NSTATE ? 's' : pr_state_terminal(st->state) ? 'e' : 0;
  if (kind == 0) return;
  pr_record_t r;
  pr_ring_t *rings[PR_NSTREAM];
  pr_exec_view(st->x, &r, 0);
  if (r.previous_session) return;
  for (int i = 0; i < PR_NSTREAM; i++) rings[i] = pr_exec_ring(st->x, i);
  pr_hist_record_frame(arg, &r, rings, kind);
}

/* The listener: a record left the registry: remember that in the file. */
static void on_removed(void *arg, const pr_exec_t *x) {
  pr_history_t *h = arg;
  pr_record_t r;
  pr_exec_view(x, &r, 1);
  msgpack_sbuffer b;
  msgpack_packer pk;
  msgpack_sbuffer_init(&b);
  msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
  pr_job_t *job = NULL;
  if (!(msgpack_pack_map(&pk, 2) || kv_str(&pk, "k", "d") || pr_mp_str(&pk, "ids") ||
        msgpack_pack_array(&pk, 1) || msgpack_pack_uint64(&pk, r.id)))
    job = frame_job(h, &b, J_FORGET, 'd', r.id);
  msgpack_sbuffer_destroy(&b);
  if (job) pr_journal_push(h->j, job);
}

/* Rewrite the file with only what is still remembered (on the writer). */
void pr_hist_compact_soon(pr_history_t *h) {
  pr_job_t *job = pr_journal_job(run_job, h, 0);
  if (job == NULL) return;
  job->kind = J_COMPACT;
  pr_journal_push(h->j, job);
}

/* The listener: a delete or purge removed records: the file shrinks too. */
static void on_purged(void *arg) { pr_hist_compact_soon(arg); }

void pr_hist_listen(pr_history_t *h) {
  h->listener =
      (pr_listener_t){.state = on_state, .removed = on_removed, .purged = on_purged, .arg = h};
}

pr_listener_t *pr_history_listener(pr_history_t *h) { return &h->listener; }

/* ---- writer thread --------------------------------------------------------------- */

int pr_hist_write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? -errno : -EIO;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

int pr_hist_own(const pr_history_t *h, uint64_t id) { return id / PR_HISTORY_SLOT_IDS == h->slot; }

int pr_hist_add_entry(pr_history_t *h, uint64_t id, uint64_t off, uint32_t len, char kind) {
  if (h->nent == h->cap) {
    size_t cap = h->cap ? h->cap * 2 : 64;
    pr_hentry_t *v = realloc(h->ent, cap * sizeof(*v));
    if (v == NULL) return PR_ENOMEM;
    h->ent = v;
    h->cap = cap;
  }
  h->ent[h->nent++] = (pr_hentry_t){.id = id, .off = off, .len = len, .kind = kind};
  if (id > h->max_id && pr_hist_own(h, id)) h->max_id = id;
  return 0;
}

void pr_hist_kill(pr_history_t *h, uint64_t id, char kind) {
  for (size_t i = h->nent; i-- > 0;) {
    pr_hentry_t *x = &h->ent[i];
    if (x->id == id && !x->dead && (kind == 0 || x->kind == kind)) {
      x->dead = 1;
      h->dead += x->len;
    }
  }
}

static void broke(pr_history_t *h, const char *what, int err) {
  if (h->broken) return;
  h->broken = 1;
  pr_journal_warn(h->j, "history: %s %s failed (%s); nothing more is recorded this session", what,
                  h->path, strerror(-err));
}

static int append(pr_history_t *h, const char *p, size_t n, uint64_t id, char kind) {
  int rc = pr_hist_write_all(h->fd, p, n);
  if (rc != 0) {
    if (ftruncate(h->fd, (off_t)h->size) != 0) { /* a torn frame: the next load skips it */
    }
    broke(h, "write to", rc);
    return rc;
  }
  pr_hist_add_entry(h, id, h->size, (uint32_t)n, kind);
  h->size += n;
  return 0;
}

static void compact(pr_history_t *h) {
  char why[128]; /* a FIFO in its place must not hold the writer thread (and close()) */
  int fd = pr_journal_open_file(h->tmp, O_RDWR | O_CREAT | O_TRUNC | O_APPEND, why, sizeof(why));
  if (fd < 0) {
    pr_journal_warn(h->j, "history: compaction of %s failed (%s: %s)", h->path, h->tmp, why);
    return; /* the file stays as it is: appends go on */
  }
  /* The next id survives the records it came from: ids are never reused. */
  msgpack_sbuffer b, f;
  msgpack_packer pk;
  msgpack_sbuffer_init(&b);
  msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
  int bad =
      msgpack_pack_map(&pk, 2) || kv_str(&pk, "k", "n") || pr_mp_kv_u64(&pk, "next", h->max_id + 1);
  msgpack_sbuffer_init(&f);
  msgpack_packer_init(&pk, &f, msgpack_sbuffer_write);
  bad = bad || msgpack_pack_array(&pk, 2) ||
        msgpack_pack_uint32(&pk, pr_frame_sum(b.data, b.size)) || msgpack_pack_bin(&pk, b.size) ||
        msgpack_pack_bin_body(&pk, b.data, b.size);
  int rc = bad ? PR_ENOMEM : pr_hist_write_all(fd, PR_HIST_HEADER, PR_HIST_HEADER_LEN);
  if (rc == 0) rc = pr_hist_write_all(fd, f.data, f.size);
  uint64_t size = PR_HIST_HEADER_LEN + f.size, nlen = f.size;
  msgpack_sbuffer_destroy(&b);
  msgpack_sbuffer_destroy(&f);
  size_t keep = 0;
  char *buf = NULL;
  size_t bcap = 0;
  for (size_t i = 0; i < h->nent && rc == 0; i++) {
    pr_hentry_t *x = &h->ent[i];
    if (x->dead || x->kind == 'n') continue;
    if (x->len > bcap) {
      char *nb = realloc(buf, x->len);
      if (nb == NULL) {
        rc = PR_ENOMEM;
        break;
      }
      buf = nb;
      bcap = x->len;
    }
    if (pread(h->fd, buf, x->len, (off_t)x->off) != (ssize_t)x->len) {
      rc = -EIO;
      break;
    }
    if ((rc = pr_hist_write_all(fd, buf, x->len)) != 0) break;
    h->ent[keep] = *x;
    h->ent[keep++].off = size;
    size += x->len;
  }
  free(buf);
  if (rc == 0 && fdatasync(fd) != 0) rc = -errno;
  if (rc == 0 && rename(h->tmp, h->path) != 0) rc = -errno;
  if (rc != 0) {
    close(fd);
    unlink(h->tmp);
    pr_journal_warn(h->j, "history: compaction of %s failed (%s)", h->path, strerror(-rc));
    return; /* the index may be half rewritten: keep the old file as it is */
  }
  close(h->fd);
  h->fd = fd;
  h->nent = keep;
  pr_hist_add_entry(h, h->max_id, PR_HIST_HEADER_LEN, (uint32_t)nlen, 'n');
  h->ent[h->nent - 1].dead = 1; /* rewritten by every compaction, never copied */
  h->size = size;
  h->dead = nlen;
}

static void run_job(void *sink, pr_job_t *job) {
  pr_history_t *h = sink;
  if (h->broken) return;
  int type = job->kind & 0xff;
  char kind = (char)(job->kind >> 8);
  if (type == J_COMPACT) {
    if (!h->partial) compact(h); /* a stopped load's index misses frames: never rewrite */
    return;
  }
  if (append(h, job->data, job->len, job->id, kind) != 0) return;
  if (kind == 'e') pr_hist_kill(h, job->id, 's'); /* superseded by the end */
  /* Our own record and this tombstone go; a tombstone for another editor's
   * record stays until that editor's file no longer holds it (history_load.c). */
  if (type == J_FORGET && pr_hist_own(h, job->id)) pr_hist_kill(h, job->id, 0);
  if (!h->partial && h->dead > PR_HIST_COMPACT_SLACK && h->dead > h->size / 3)
    compact(h); /* mostly garbage */
}

void pr_history_free(pr_history_t *h) {
  if (h == NULL) return;
  if (h->fd >= 0) close(h->fd);
  if (h->lockfd >= 0) close(h->lockfd); /* releases the flock */
  free(h->path);
  free(h->base);
  free(h->tmp);
  free(h->ent);
  free(h);
}
