/* store/history.c — the history file: load at start, append, forget,
 * compact; a listener of the engine.
 *
 * Thread: see history.h. Loading (host thread) returns records with their
 * output tails; the engine turns them into finished executions that have no
 * process and no handles. After load the file, its index and its counters
 * belong to the writer thread alone; the engine thread only packs frames
 * (from the record of an execution, pr_exec_view) and pushes jobs.
 */
#include "store/history.h"

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

#define HEADER "\xb1proctor-history/1"
#define HEADER_LEN 18
#define COMPACT_SLACK (1u << 20) /* dead bytes that make the writer compact on its own */

enum { J_APPEND = 1, J_FORGET, J_COMPACT };

typedef struct {
  uint64_t id, off;
  uint32_t len;
  char kind; /* 's', 'e', 'd', 'n' */
  char dead; /* superseded or forgotten: dropped by the next compaction */
} hentry_t;

struct pr_history {
  pr_journal_t *j; /* the writer thread, and where warnings go */
  pr_listener_t listener;
  char *path, *tmp;
  int fd, lockfd;
  pr_history_opts_t o;
  /* writer thread (host thread during load) */
  uint64_t size;   /* bytes in the file */
  uint64_t dead;   /* bytes of dead frames */
  uint64_t max_id; /* largest id ever written */
  hentry_t *ent;
  size_t nent, cap;
  int broken; /* a write failed: warned once, nothing more is written */
};

/* ---- packing (engine thread) --------------------------------------------------- */

static int kv_str(msgpack_packer *pk, const char *k, const char *v) {
  return v ? pr_mp_kv_str(pk, k, v) : 0;
}

/* The record's fields as the file names them (NULL: not kept). The names
 * are the file format: files written by every release load through them. */
static const char *const hkey[PR_RF_COUNT] = {[PR_RF_ID] = "id",
                                              [PR_RF_LABEL] = "label",
                                              [PR_RF_OWNER] = "owner",
                                              [PR_RF_CWD] = "cwd",
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
    if (hkey[f[i].id] && (kind == 'e' || !end_only[f[i].id])) f[keep++] = f[i];
  int nstreams = 0;
  for (int i = 0; i < PR_NSTREAM; i++) nstreams += rings[i] != NULL;
  char k[2] = {kind, 0};
  if (msgpack_pack_map(pk, 1 + keep + (kind == 'e')) || pr_mp_kv_str(pk, "k", k)) return -1;
  for (size_t i = 0; i < keep; i++)
    if (pr_mp_str(pk, hkey[f[i].id]) || pack_value(pk, &f[i])) return -1;
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
static void record_frame(pr_history_t *h, const pr_record_t *r, pr_ring_t *const *rings,
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
  record_frame(arg, &r, rings, kind);
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
static void compact_soon(pr_history_t *h) {
  pr_job_t *job = pr_journal_job(run_job, h, 0);
  if (job == NULL) return;
  job->kind = J_COMPACT;
  pr_journal_push(h->j, job);
}

/* The listener: a delete or purge removed records: the file shrinks too. */
static void on_purged(void *arg) { compact_soon(arg); }

pr_listener_t *pr_history_listener(pr_history_t *h) { return &h->listener; }

/* ---- writer thread --------------------------------------------------------------- */

static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return w < 0 ? -errno : -EIO;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int add_entry(pr_history_t *h, uint64_t id, uint64_t off, uint32_t len, char kind) {
  if (h->nent == h->cap) {
    size_t cap = h->cap ? h->cap * 2 : 64;
    hentry_t *v = realloc(h->ent, cap * sizeof(*v));
    if (v == NULL) return PR_ENOMEM;
    h->ent = v;
    h->cap = cap;
  }
  h->ent[h->nent++] = (hentry_t){.id = id, .off = off, .len = len, .kind = kind};
  if (id > h->max_id) h->max_id = id;
  return 0;
}

/* Mark the live entries of `id` of kind `kind` (0: any) dead. */
static void kill_entries(pr_history_t *h, uint64_t id, char kind) {
  for (size_t i = h->nent; i-- > 0;) {
    hentry_t *x = &h->ent[i];
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
  int rc = write_all(h->fd, p, n);
  if (rc != 0) {
    if (ftruncate(h->fd, (off_t)h->size) != 0) { /* a torn frame: the next load skips it */
    }
    broke(h, "write to", rc);
    return rc;
  }
  add_entry(h, id, h->size, (uint32_t)n, kind);
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
  int rc = bad ? PR_ENOMEM : write_all(fd, HEADER, HEADER_LEN);
  if (rc == 0) rc = write_all(fd, f.data, f.size);
  uint64_t size = HEADER_LEN + f.size, nlen = f.size;
  msgpack_sbuffer_destroy(&b);
  msgpack_sbuffer_destroy(&f);
  size_t keep = 0;
  char *buf = NULL;
  size_t bcap = 0;
  for (size_t i = 0; i < h->nent && rc == 0; i++) {
    hentry_t *x = &h->ent[i];
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
    if ((rc = write_all(fd, buf, x->len)) != 0) break;
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
  add_entry(h, h->max_id, HEADER_LEN, (uint32_t)nlen, 'n');
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
    compact(h);
    return;
  }
  if (append(h, job->data, job->len, job->id, kind) != 0) return;
  if (kind == 'e') kill_entries(h, job->id, 's');    /* superseded by the end */
  if (type == J_FORGET) kill_entries(h, job->id, 0); /* the record and this tombstone */
  if (h->dead > COMPACT_SLACK && h->dead > h->size / 3) compact(h); /* mostly garbage */
}

/* ---- load (host thread) --------------------------------------------------------- */

typedef struct {
  pr_loaded_t *v;
  size_t n, cap;
} loaded_t;

static const msgpack_object *get(const msgpack_object *m, const char *key) {
  size_t kl = strlen(key);
  for (uint32_t i = 0; i < m->via.map.size; i++) {
    const msgpack_object *k = &m->via.map.ptr[i].key;
    if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == kl &&
        memcmp(k->via.str.ptr, key, kl) == 0)
      return &m->via.map.ptr[i].val;
  }
  return NULL;
}

static char *get_str(const msgpack_object *m, const char *key) {
  const msgpack_object *o = get(m, key);
  if (o == NULL || o->type != MSGPACK_OBJECT_STR) return NULL;
  return strndup(o->via.str.ptr, o->via.str.size);
}

static int64_t get_int(const msgpack_object *m, const char *key, int64_t def) {
  const msgpack_object *o = get(m, key);
  if (o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER) return (int64_t)o->via.u64;
  if (o && o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) return o->via.i64;
  return def;
}

static void loaded_free(pr_loaded_t *l) {
  pr_record_free(l->rec);
  for (int i = 0; i < PR_NSTREAM; i++) pr_ring_unref(l->rings[i]);
}

void pr_history_loaded_free(pr_loaded_t *v, size_t n) {
  for (size_t i = 0; i < n; i++) loaded_free(&v[i]);
  free(v);
}

static ssize_t find(loaded_t *ls, uint64_t id) {
  for (size_t i = ls->n; i-- > 0;)
    if (ls->v[i].rec->id == id) return (ssize_t)i;
  return -1;
}

static void drop_at(loaded_t *ls, size_t i) {
  loaded_free(&ls->v[i]);
  memmove(&ls->v[i], &ls->v[i + 1], (ls->n - i - 1) * sizeof(*ls->v));
  ls->n--;
}

static pr_ring_t *loaded_ring(size_t limit, uint64_t total, const char *p, size_t n) {
  pr_ring_t *r = pr_ring_new(limit);
  if (r == NULL) return NULL;
  /* A fresh, unshared ring: start it at the offset of its first kept byte so
   * offsets (and `missed`) read as they did in the session that wrote it. */
  r->head = r->tail = r->delivered = total >= n ? total - n : 0;
  pr_ring_write(r, p, n);
  pr_ring_shrink(r);
  return r;
}

/* The record of a frame payload, and its output tails. Returns 0, or -1 when
 * out of memory (nothing to free then). */
static int loaded_record(pr_history_t *h, const msgpack_object *m, char kind, pr_loaded_t *l) {
  memset(l, 0, sizeof(*l));
  pr_record_t *r = calloc(1, sizeof(*r));
  if (r == NULL) return -1;
  l->rec = r;
  r->id = (uint64_t)get_int(m, hkey[PR_RF_ID], 0);
  r->previous_session = 1;
  r->worker_state = -1;
  r->label = get_str(m, hkey[PR_RF_LABEL]);
  r->owner = get_str(m, hkey[PR_RF_OWNER]);
  r->cwd = get_str(m, hkey[PR_RF_CWD]);
  r->created_at = (uint64_t)get_int(m, hkey[PR_RF_CREATED_AT], 0);
  const msgpack_object *o = get(m, hkey[PR_RF_PTY]);
  r->pty = o && o->type == MSGPACK_OBJECT_BOOLEAN && o->via.boolean;
  if ((o = get(m, hkey[PR_RF_ENV_KEYS])) && o->type == MSGPACK_OBJECT_BIN && o->via.bin.size &&
      (r->env_keys = malloc(o->via.bin.size))) {
    memcpy(r->env_keys, o->via.bin.ptr, o->via.bin.size);
    r->env_keys_len = o->via.bin.size;
  }
  o = get(m, hkey[PR_RF_CMD]);
  if (o && o->type == MSGPACK_OBJECT_STR) {
    r->shell = strndup(o->via.str.ptr, o->via.str.size);
    r->argc = 3;
    if ((r->argv = calloc(4, sizeof(char *)))) {
      r->argv[0] = strdup("/bin/sh");
      r->argv[1] = strdup("-c");
      r->argv[2] = r->shell ? strdup(r->shell) : NULL;
    }
  } else if (o && o->type == MSGPACK_OBJECT_ARRAY) {
    r->argc = o->via.array.size;
    if ((r->argv = calloc(r->argc + 1, sizeof(char *))))
      for (size_t i = 0; i < r->argc; i++) {
        const msgpack_object *a = &o->via.array.ptr[i];
        r->argv[i] =
            a->type == MSGPACK_OBJECT_STR ? strndup(a->via.str.ptr, a->via.str.size) : strdup("");
      }
  }
  if (r->argv == NULL) r->argc = 0;
  r->exit_code = -1;
  if (kind == 's') { /* its host died while it was live */
    r->state = PR_FAILED;
    r->reason = strdup("host_lost");
    r->ended_at = pr_now_ms();
  } else {
    char *st = get_str(m, hkey[PR_RF_STATE]);
    int s = st ? pr_state_from_name(st) : -1;
    free(st);
    r->state = s >= 0 && pr_state_terminal((pr_state_t)s) ? (pr_state_t)s : PR_FAILED;
    r->reason = get_str(m, hkey[PR_RF_REASON]);
    r->error = get_str(m, hkey[PR_RF_ERROR]);
    r->exit_code = (int)get_int(m, hkey[PR_RF_EXIT_CODE], -1);
    r->signal = (int)get_int(m, hkey[PR_RF_SIGNAL], 0);
    r->started_at = (uint64_t)get_int(m, hkey[PR_RF_STARTED_AT], 0);
    r->ended_at = (uint64_t)get_int(m, hkey[PR_RF_ENDED_AT], 0);
    r->duration_ms = (uint64_t)get_int(m, hkey[PR_RF_DURATION_MS], 0);
  }
  int has[PR_NSTREAM];
  for (int i = 0; i < PR_NSTREAM; i++) has[i] = (i == PR_PTY) == (r->pty != 0);
  if ((o = get(m, "out")) && o->type == MSGPACK_OBJECT_ARRAY) {
    for (uint32_t i = 0; i < o->via.array.size; i++) {
      const msgpack_object *t = &o->via.array.ptr[i];
      if (t->type != MSGPACK_OBJECT_ARRAY || t->via.array.size != 3) continue;
      const msgpack_object *a = t->via.array.ptr;
      if (a[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER || a[0].via.u64 >= PR_NSTREAM ||
          a[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER || a[2].type != MSGPACK_OBJECT_BIN)
        continue;
      int k = (int)a[0].via.u64;
      if (!has[k] || l->rings[k]) continue;
      l->rings[k] =
          loaded_ring(h->o.output_limit, a[1].via.u64, a[2].via.bin.ptr, a[2].via.bin.size);
    }
  }
  for (int i = 0; i < PR_NSTREAM; i++) /* streams with no output kept still read as empty */
    if (has[i] && l->rings[i] == NULL) l->rings[i] = pr_ring_new(h->o.output_limit);
  return 0;
}

static int put(loaded_t *ls, pr_loaded_t *l) {
  ssize_t at = find(ls, l->rec->id);
  if (at >= 0) drop_at(ls, (size_t)at);
  if (ls->n == ls->cap) {
    size_t cap = ls->cap ? ls->cap * 2 : 64;
    pr_loaded_t *v = realloc(ls->v, cap * sizeof(*v));
    if (v == NULL) return PR_ENOMEM;
    ls->v = v;
    ls->cap = cap;
  }
  ls->v[ls->n++] = *l;
  return 0;
}

static int by_id(const void *a, const void *b) {
  uint64_t x = ((const pr_loaded_t *)a)->rec->id, y = ((const pr_loaded_t *)b)->rec->id;
  return x < y ? -1 : x > y;
}

/* A whole frame at `off` whose payload is a map (into *m). */
static int good_frame(const char *p, size_t len, size_t off, msgpack_unpacked *m, size_t *end) {
  const char *body;
  size_t blen, boff = 0;
  return pr_frame_at(p, len, off, &body, &blen, end) == PR_FRAME_OK &&
         msgpack_unpack_next(m, body, blen, &boff) == MSGPACK_UNPACK_SUCCESS &&
         m->data.type == MSGPACK_OBJECT_MAP;
}

/* What a load found damaged (one warning says it all). */
typedef struct {
  size_t nbad, bad_bytes, first_bad; /* corrupt stretches skipped in the middle */
  size_t torn_at, torn_bytes;        /* a tail with no frame after it (torn_bytes 0: none) */
  int torn_short;                    /* that tail was cut short (a torn write), not garbage */
} damage_t;

/* Parse frames after the header; returns the offset after the last good
 * frame (where a damaged tail starts, or len). A damaged stretch in the
 * middle is skipped up to the next whole frame whose checksum matches: a
 * byte flipped in a frame's header or length never costs the frames after it. */
static size_t parse(pr_history_t *h, const char *p, size_t len, loaded_t *ls, uint64_t *next,
                    damage_t *dmg) {
  size_t off = HEADER_LEN;
  msgpack_unpacked inner;
  msgpack_unpacked_init(&inner);
  while (off < len) {
    size_t at;
    if (!good_frame(p, len, off, &inner, &at)) {
      const char *body;
      size_t blen, end = 0, probe;
      int r = pr_frame_at(p, len, off, &body, &blen, &end);
      /* framing intact, payload damaged: trust it only if a good frame (or the end) follows */
      if ((r == PR_FRAME_BADSUM || r == PR_FRAME_OK) &&
          (end == len || good_frame(p, len, end, &inner, &probe)))
        at = end;
      else
        for (at = off + 1; at < len && !good_frame(p, len, at, &inner, &probe);) at++;
      if (at >= len) { /* nothing good after it: a damaged tail */
        dmg->torn_at = off;
        dmg->torn_bytes = len - off;
        dmg->torn_short = r == PR_FRAME_SHORT;
        break;
      }
      if (dmg->nbad++ == 0) dmg->first_bad = off;
      dmg->bad_bytes += at - off;
      add_entry(h, 0, off, (uint32_t)(at - off), 'x'); /* dead: the next compaction drops it */
      h->ent[h->nent - 1].dead = 1;
      h->dead += at - off;
      off = at;
      continue;
    }
    const msgpack_object *m = &inner.data;
    char *k = get_str(m, "k");
    char kind = k && strlen(k) == 1 ? k[0] : 0;
    free(k);
    uint64_t id = (uint64_t)get_int(m, hkey[PR_RF_ID], 0);
    if (kind == 's' || kind == 'e') {
      pr_loaded_t l;
      if (id && loaded_record(h, m, kind, &l) == 0 && put(ls, &l) != 0) loaded_free(&l);
      if (kind == 'e') kill_entries(h, id, 's');
      add_entry(h, id, off, (uint32_t)(at - off), kind);
    } else if (kind == 'd') {
      const msgpack_object *ids = get(m, "ids");
      for (uint32_t i = 0; ids && ids->type == MSGPACK_OBJECT_ARRAY && i < ids->via.array.size;
           i++) {
        uint64_t d = ids->via.array.ptr[i].via.u64;
        ssize_t w = find(ls, d);
        if (w >= 0) drop_at(ls, (size_t)w);
        kill_entries(h, d, 0);
        if (d > h->max_id) h->max_id = d;
      }
      add_entry(h, 0, off, (uint32_t)(at - off), 'd');
      h->ent[h->nent - 1].dead = 1;
      h->dead += at - off;
    } else if (kind == 'n') {
      uint64_t n = (uint64_t)get_int(m, "next", 0);
      if (n > *next) *next = n;
      add_entry(h, 0, off, (uint32_t)(at - off), 'n');
      h->ent[h->nent - 1].dead = 1;
      h->dead += at - off;
    }
    off = at;
  }
  msgpack_unpacked_destroy(&inner);
  return off;
}

/* Keep the damaged file as it was in "<path>.damaged-N" (the first free N).
 * Returns the malloc'd name, or NULL (errno set) when no copy could be made. */
static char *keep_copy(const pr_history_t *h, const char *p, size_t len) {
  size_t n = strlen(h->path) + 32;
  char *name = malloc(n);
  if (name == NULL) return NULL;
  for (int i = 1; i < 10000; i++) {
    snprintf(name, n, "%s.damaged-%d", h->path, i);
    int fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) break;
    int rc = write_all(fd, p, len);
    if (rc == 0 && fsync(fd) != 0) rc = -errno;
    close(fd);
    if (rc == 0) return name;
    unlink(name);
    errno = -rc;
    break;
  }
  free(name);
  return NULL;
}

/* Say what was damaged, once. `copy`: where the file as it was is kept. */
static void warn_damage(pr_history_t *h, const damage_t *d, const char *copy, int err) {
  char what[256] = "", where[PATH_MAX + 96];
  if (d->nbad)
    snprintf(what, sizeof(what),
             "%zu corrupt stretch(es) skipped (%zu bytes, the first at byte %zu)%s", d->nbad,
             d->bad_bytes, d->first_bad, d->torn_bytes ? "; " : "");
  if (d->torn_bytes)
    snprintf(what + strlen(what), sizeof(what) - strlen(what),
             "%s record at byte %zu cut off (%zu bytes)", d->torn_short ? "torn" : "corrupt",
             d->torn_at, d->torn_bytes);
  if (copy) snprintf(where, sizeof(where), "the file as it was is kept in %s", copy);
  else
    snprintf(where, sizeof(where), "no copy could be kept (%s), so the file is left as it is",
             strerror(err));
  pr_journal_warn(h->j, "history: %s: %s; every good record was loaded; %s", h->path, what, where);
}

/* The file cannot be used: history is off (0, *out NULL), with a warning. */
static int give_up(pr_history_t *h, const char *why) {
  pr_journal_warn(h->j, "history: %s: %s; history is off for this engine", h->path, why);
  pr_history_free(h);
  return 0;
}

int pr_history_open(pr_journal_t *j, const char *path, const pr_history_opts_t *o,
                    pr_history_t **out, pr_loaded_t **loaded, size_t *nloaded, uint64_t *next_id) {
  *out = NULL;
  *loaded = NULL;
  *nloaded = 0;
  *next_id = 1;
  pr_history_t *h = calloc(1, sizeof(*h));
  if (h == NULL) return PR_ENOMEM;
  h->j = j;
  h->o = *o;
  if (!h->o.tail_bytes) h->o.tail_bytes = PR_HISTORY_DEFAULT_OUTPUT;
  h->listener =
      (pr_listener_t){.state = on_state, .removed = on_removed, .purged = on_purged, .arg = h};
  h->fd = h->lockfd = -1;
  size_t pl = strlen(path);
  h->path = strdup(path);
  h->tmp = malloc(pl + 6);
  char *lock = malloc(pl + 6);
  if (h->path == NULL || h->tmp == NULL || lock == NULL) {
    free(lock);
    pr_history_free(h);
    return PR_ENOMEM;
  }
  snprintf(h->tmp, pl + 6, "%s.tmp", path);
  snprintf(lock, pl + 6, "%s.lock", path);
  char why[160]; /* neither open may block the host: pr_journal_open_file */
  h->lockfd = pr_journal_open_file(lock, O_RDWR | O_CREAT, why, sizeof(why) - 24);
  free(lock);
  if (h->lockfd < 0) return give_up(h, strcat(why, " (its .lock file)"));
  if (flock(h->lockfd, LOCK_EX | LOCK_NB) != 0)
    return give_up(h, "in use by another proctor engine");
  h->fd = pr_journal_open_file(path, O_RDWR | O_CREAT | O_APPEND, why, sizeof(why));
  if (h->fd < 0) return give_up(h, why);
  size_t len = 0;
  char *p = pr_frame_read_file(h->fd, &len);
  if (p == NULL) return give_up(h, "cannot read it");
  if (len >= HEADER_LEN ? memcmp(p, HEADER, HEADER_LEN) != 0 : memcmp(p, HEADER, len) != 0) {
    free(p);
    return give_up(h, "not a proctor history file (left alone)");
  }
  loaded_t ls = {0};
  uint64_t next = 1;
  size_t good = HEADER_LEN;
  int damaged = 0;
  if (len < HEADER_LEN) { /* new, or torn while its header was written */
    if (ftruncate(h->fd, 0) != 0 || write_all(h->fd, HEADER, HEADER_LEN) != 0) {
      free(p);
      return give_up(h, "cannot write it");
    }
  } else {
    damage_t dmg = {0};
    good = parse(h, p, len, &ls, &next, &dmg);
    if (dmg.nbad || dmg.torn_bytes) { /* never cut or rewrite a damaged file without a copy */
      char *copy = keep_copy(h, p, len);
      warn_damage(h, &dmg, copy, errno);
      if (copy == NULL) { /* left as it is: the next load skips the same damage again */
        good = len;
      } else if (dmg.nbad) {
        damaged = 1; /* compacted below: the garbage leaves the file */
      }
      free(copy);
    }
    if (good < len && ftruncate(h->fd, (off_t)good) != 0) {
      free(p);
      pr_history_loaded_free(ls.v, ls.n);
      return give_up(h, "cannot truncate its torn tail");
    }
  }
  free(p);
  h->size = good;
  if (h->max_id + 1 > next) next = h->max_id + 1;
  /* Retention, oldest first. */
  if (ls.n > 1) qsort(ls.v, ls.n, sizeof(*ls.v), by_id); /* ls.v is NULL when the file is empty */
  uint64_t now = pr_now_ms();
  size_t limit = o->limit, dropped = 0, keep = 0;
  for (size_t i = 0; i < ls.n; i++) {
    pr_loaded_t *l = &ls.v[i];
    int old = o->age_ms && l->rec->ended_at + o->age_ms <= now;
    if (old || (limit && ls.n - i > limit)) {
      kill_entries(h, l->rec->id, 0);
      loaded_free(l);
      dropped++;
      continue;
    }
    if (l->rec->reason && strcmp(l->rec->reason, "host_lost") == 0 && l->rec->started_at == 0) {
      int lost = 1; /* an "s" only: say in the file how it ended */
      for (size_t k = 0; k < h->nent && lost; k++)
        lost = !(h->ent[k].id == l->rec->id && h->ent[k].kind == 'e');
      if (lost) record_frame(h, l->rec, l->rings, 'e');
    }
    ls.v[keep++] = *l;
  }
  if (dropped || damaged || (h->dead > COMPACT_SLACK && h->dead > h->size / 3)) compact_soon(h);
  *out = h;
  *loaded = ls.v;
  *nloaded = keep;
  *next_id = next;
  return 0;
}

void pr_history_free(pr_history_t *h) {
  if (h == NULL) return;
  if (h->fd >= 0) close(h->fd);
  if (h->lockfd >= 0) close(h->lockfd); /* releases the flock */
  free(h->path);
  free(h->tmp);
  free(h->ent);
  free(h);
}
