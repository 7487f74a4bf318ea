/* history.c — the history file: load at start, append, forget, compact.
 *
 * Thread: see history.h. Loading (host thread) builds finished executions
 * that have no process and no handles (x->previous_session): every engine
 * path treats them as terminal (cancel → already_terminal, delete, purge,
 * retention, read from their ring). After load the file, its index and its
 * counters belong to the writer thread alone; the engine thread only packs
 * frames and pushes jobs. msgpack.h is included here as well as in the rpc
 * files: the file format is msgpack, and msgpack-c is already linked.
 */
#include "store/history.h"

#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/mpack.h"
#include "engine/exec.h"
#include "engine/registry.h"

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

typedef struct pr_history {
  char *path, *tmp;
  int fd, lockfd;
  size_t tail_bytes;  /* output kept per stream */
  /* writer thread (host thread during load) */
  uint64_t size;      /* bytes in the file */
  uint64_t dead;      /* bytes of dead frames */
  uint64_t max_id;    /* largest id ever written */
  hentry_t *ent;
  size_t nent, cap;
  int broken;         /* a write failed: warned once, nothing more is written */
} pr_history_t;

static uint32_t fnv1a(const char *p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 16777619u;
  return h;
}

/* ---- packing (engine thread) --------------------------------------------------- */

static int kv_str(msgpack_packer *pk, const char *k, const char *v) {
  return v ? pr_mp_kv_str(pk, k, v) : 0;
}

/* The record's fields as the file names them (NULL: not kept). The names
 * are the file format: files written by every release load through them. */
static const char *const hkey[PR_RF_COUNT] = {
    [PR_RF_ID] = "id",         [PR_RF_LABEL] = "label",     [PR_RF_OWNER] = "owner",
    [PR_RF_CWD] = "cwd",       [PR_RF_CMD] = "cmd",         [PR_RF_PTY] = "pty",
    [PR_RF_CREATED_AT] = "created", [PR_RF_ENV_KEYS] = "env",
    /* end frames only: */
    [PR_RF_STATE] = "state",   [PR_RF_REASON] = "reason",   [PR_RF_ERROR] = "error",
    [PR_RF_EXIT_CODE] = "exit", [PR_RF_SIGNAL] = "sig",     [PR_RF_STARTED_AT] = "started",
    [PR_RF_ENDED_AT] = "ended", [PR_RF_DURATION_MS] = "dur"};
static const unsigned char end_only[PR_RF_COUNT] = {
    [PR_RF_STATE] = 1,     [PR_RF_REASON] = 1,     [PR_RF_ERROR] = 1,      [PR_RF_EXIT_CODE] = 1,
    [PR_RF_SIGNAL] = 1,    [PR_RF_STARTED_AT] = 1, [PR_RF_ENDED_AT] = 1,   [PR_RF_DURATION_MS] = 1};

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
  case PR_FT_CMD:
    if (r->shell) return pr_mp_str(pk, r->shell);
    if (msgpack_pack_array(pk, r->argc)) return -1;
    for (size_t i = 0; i < r->argc; i++)
      if (pr_mp_str(pk, r->argv && r->argv[i] ? r->argv[i] : "")) return -1;
    return 0;
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

/* Wrap a payload into a frame job. */
static pr_job_t *frame_job(msgpack_sbuffer *payload, int type, char kind, uint64_t id);

static void run_job(pr_journal_t *j, pr_job_t *job);

static pr_job_t *frame_job(msgpack_sbuffer *payload, int type, char kind, uint64_t id) {
  msgpack_sbuffer f;
  msgpack_packer pk;
  msgpack_sbuffer_init(&f);
  msgpack_packer_init(&pk, &f, msgpack_sbuffer_write);
  pr_job_t *job = NULL;
  if (!(msgpack_pack_array(&pk, 2) ||
        msgpack_pack_uint32(&pk, fnv1a(payload->data ? payload->data : "", payload->size)) ||
        msgpack_pack_bin(&pk, payload->size) ||
        msgpack_pack_bin_body(&pk, payload->data ? payload->data : "", payload->size)) &&
      (job = pr_journal_job(run_job, f.size)) != NULL) {
    memcpy(job->data, f.data, f.size);
    job->kind = type | kind << 8;
    job->id = id;
  }
  msgpack_sbuffer_destroy(&f);
  return job;
}

void pr_history_on_state(pr_journal_t *j, pr_exec_t *x, pr_state_t prev) {
  char kind = prev == PR_NSTATE ? 's' : pr_state_terminal(x->state) ? 'e' : 0;
  if (kind == 0) return;
  msgpack_sbuffer b;
  msgpack_packer pk;
  msgpack_sbuffer_init(&b);
  msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
  pr_job_t *job = NULL;
  pr_record_t r;
  pr_ring_t *rings[PR_NSTREAM];
  pr_exec_view(x, &r, 0);
  for (int i = 0; i < PR_NSTREAM; i++) rings[i] = x->streams[i].ring;
  if (pack_record(&pk, &r, rings, kind, j->history->tail_bytes) == 0)
    job = frame_job(&b, J_APPEND, kind, x->id);
  msgpack_sbuffer_destroy(&b);
  if (job) pr_journal_push(j, job);
  else pr_journal_warn(j, "history: out of memory; execution %llu not recorded",
                       (unsigned long long)x->id);
}

void pr_history_forget(pr_journal_t *j, uint64_t id) {
  msgpack_sbuffer b;
  msgpack_packer pk;
  msgpack_sbuffer_init(&b);
  msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
  pr_job_t *job = NULL;
  if (!(msgpack_pack_map(&pk, 2) || kv_str(&pk, "k", "d") || pr_mp_str(&pk, "ids") ||
        msgpack_pack_array(&pk, 1) || msgpack_pack_uint64(&pk, id)))
    job = frame_job(&b, J_FORGET, 'd', id);
  msgpack_sbuffer_destroy(&b);
  if (job) pr_journal_push(j, job);
}

void pr_history_compact(pr_journal_t *j) {
  pr_job_t *job = pr_journal_job(run_job, 0);
  if (job == NULL) return;
  job->kind = J_COMPACT;
  pr_journal_push(j, job);
}

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

static void broke(pr_journal_t *j, const char *what, int err) {
  pr_history_t *h = j->history;
  if (h->broken) return;
  h->broken = 1;
  pr_journal_warn(j, "history: %s %s failed (%s); nothing more is recorded this session", what,
                  h->path, strerror(-err));
}

static int append(pr_journal_t *j, const char *p, size_t n, uint64_t id, char kind) {
  pr_history_t *h = j->history;
  int rc = write_all(h->fd, p, n);
  if (rc != 0) {
    if (ftruncate(h->fd, (off_t)h->size) != 0) { /* a torn frame: the next load skips it */
    }
    broke(j, "write to", rc);
    return rc;
  }
  add_entry(h, id, h->size, (uint32_t)n, kind);
  h->size += n;
  return 0;
}

static void compact(pr_journal_t *j) {
  pr_history_t *h = j->history;
  int fd = open(h->tmp, O_RDWR | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) {
    broke(j, "compaction of", -errno);
    return;
  }
  /* The next id survives the records it came from: ids are never reused. */
  msgpack_sbuffer b, f;
  msgpack_packer pk;
  msgpack_sbuffer_init(&b);
  msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
  int bad = msgpack_pack_map(&pk, 2) || kv_str(&pk, "k", "n") || pr_mp_kv_u64(&pk, "next", h->max_id + 1);
  msgpack_sbuffer_init(&f);
  msgpack_packer_init(&pk, &f, msgpack_sbuffer_write);
  bad = bad || msgpack_pack_array(&pk, 2) || msgpack_pack_uint32(&pk, fnv1a(b.data, b.size)) ||
        msgpack_pack_bin(&pk, b.size) || msgpack_pack_bin_body(&pk, b.data, b.size);
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
    pr_journal_warn(j, "history: compaction of %s failed (%s)", h->path, strerror(-rc));
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

static void run_job(pr_journal_t *j, pr_job_t *job) {
  pr_history_t *h = j->history;
  if (h == NULL || h->broken) return;
  int type = job->kind & 0xff;
  char kind = (char)(job->kind >> 8);
  if (type == J_COMPACT) {
    compact(j);
    return;
  }
  if (append(j, job->data, job->len, job->id, kind) != 0) return;
  if (kind == 'e') kill_entries(h, job->id, 's'); /* superseded by the end */
  if (type == J_FORGET) kill_entries(h, job->id, 0); /* the record and this tombstone */
  if (h->dead > COMPACT_SLACK && h->dead > h->size / 3) compact(j); /* mostly garbage */
}

/* ---- load (host thread) --------------------------------------------------------- */

typedef struct {
  pr_exec_t **v;
  size_t n, cap;
} execs_t;

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

static ssize_t find(execs_t *xs, uint64_t id) {
  for (size_t i = xs->n; i-- > 0;)
    if (xs->v[i]->id == id) return (ssize_t)i;
  return -1;
}

static void drop_at(execs_t *xs, size_t i) {
  pr_exec_free(xs->v[i]);
  memmove(&xs->v[i], &xs->v[i + 1], (xs->n - i - 1) * sizeof(*xs->v));
  xs->n--;
}

static pr_ring_t *loaded_ring(pr_engine_t *e, uint64_t total, const char *p, size_t n) {
  pr_ring_t *r = pr_ring_new(e->opts.output_limit);
  if (r == NULL) return NULL;
  /* A fresh, unshared ring: start it at the offset of its first kept byte so
   * offsets (and `missed`) read as they did in the session that wrote it. */
  r->head = r->tail = r->delivered = total >= n ? total - n : 0;
  pr_ring_write(r, p, n);
  pr_ring_shrink(r);
  return r;
}

/* Build a finished execution with no process from a record payload. */
static pr_exec_t *loaded_exec(pr_engine_t *e, const msgpack_object *m, char kind) {
  pr_exec_t *x = calloc(1, sizeof(*x));
  if (x == NULL) return NULL;
  x->eng = e;
  x->pidfd = -1;
  x->id = (uint64_t)get_int(m, hkey[PR_RF_ID], 0);
  x->finished = x->exited = x->released = x->previous_session = 1;
  x->label = get_str(m, hkey[PR_RF_LABEL]);
  x->owner = get_str(m, hkey[PR_RF_OWNER]);
  x->cwd = get_str(m, hkey[PR_RF_CWD]);
  x->created_at = (uint64_t)get_int(m, hkey[PR_RF_CREATED_AT], 0);
  const msgpack_object *o = get(m, hkey[PR_RF_PTY]);
  x->pty = o && o->type == MSGPACK_OBJECT_BOOLEAN && o->via.boolean;
  if ((o = get(m, hkey[PR_RF_ENV_KEYS])) && o->type == MSGPACK_OBJECT_BIN && o->via.bin.size &&
      (x->env_keys = malloc(o->via.bin.size))) {
    memcpy(x->env_keys, o->via.bin.ptr, o->via.bin.size);
    x->env_keys_len = o->via.bin.size;
  }
  o = get(m, hkey[PR_RF_CMD]);
  if (o && o->type == MSGPACK_OBJECT_STR) {
    x->shell = strndup(o->via.str.ptr, o->via.str.size);
    x->argc = 3;
    if ((x->argv = calloc(4, sizeof(char *)))) {
      x->argv[0] = strdup("/bin/sh");
      x->argv[1] = strdup("-c");
      x->argv[2] = x->shell ? strdup(x->shell) : NULL;
    }
  } else if (o && o->type == MSGPACK_OBJECT_ARRAY) {
    x->argc = o->via.array.size;
    if ((x->argv = calloc(x->argc + 1, sizeof(char *))))
      for (size_t i = 0; i < x->argc; i++) {
        const msgpack_object *a = &o->via.array.ptr[i];
        x->argv[i] = a->type == MSGPACK_OBJECT_STR ? strndup(a->via.str.ptr, a->via.str.size)
                                                   : strdup("");
      }
  }
  if (x->argv == NULL) x->argc = 0;
  x->exit_code = -1;
  if (kind == 's') { /* its host died while it was live */
    x->state = PR_FAILED;
    x->reason = strdup("host_lost");
    x->ended_at = pr_now_ms();
  } else {
    char *st = get_str(m, hkey[PR_RF_STATE]);
    int s = st ? pr_state_from_name(st) : -1;
    free(st);
    x->state = s >= 0 && pr_state_terminal((pr_state_t)s) ? (pr_state_t)s : PR_FAILED;
    x->reason = get_str(m, hkey[PR_RF_REASON]);
    x->error = get_str(m, hkey[PR_RF_ERROR]);
    x->exit_code = (int)get_int(m, hkey[PR_RF_EXIT_CODE], -1);
    x->signal = (int)get_int(m, hkey[PR_RF_SIGNAL], 0);
    x->started_at = (uint64_t)get_int(m, hkey[PR_RF_STARTED_AT], 0);
    x->ended_at = (uint64_t)get_int(m, hkey[PR_RF_ENDED_AT], 0);
    x->duration_ms = (uint64_t)get_int(m, hkey[PR_RF_DURATION_MS], 0);
  }
  x->verdict = (int)x->state;
  for (int i = 0; i < PR_NSTREAM; i++) {
    if ((i == PR_PTY) != (x->pty != 0)) continue;
    x->streams[i].exec = x;
    x->streams[i].eof = 1;
  }
  if ((o = get(m, "out")) && o->type == MSGPACK_OBJECT_ARRAY) {
    for (uint32_t i = 0; i < o->via.array.size; i++) {
      const msgpack_object *t = &o->via.array.ptr[i];
      if (t->type != MSGPACK_OBJECT_ARRAY || t->via.array.size != 3) continue;
      const msgpack_object *a = t->via.array.ptr;
      if (a[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER || a[0].via.u64 >= PR_NSTREAM ||
          a[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER || a[2].type != MSGPACK_OBJECT_BIN)
        continue;
      pr_stream_t *s = &x->streams[a[0].via.u64];
      if (s->exec == NULL || s->ring) continue;
      s->ring = loaded_ring(e, a[1].via.u64, a[2].via.bin.ptr, a[2].via.bin.size);
    }
  }
  for (int i = 0; i < PR_NSTREAM; i++) /* streams with no output kept still read as empty */
    if (x->streams[i].exec && x->streams[i].ring == NULL)
      x->streams[i].ring = pr_ring_new(e->opts.output_limit);
  return x;
}

static int put(execs_t *xs, pr_exec_t *x) {
  ssize_t at = find(xs, x->id);
  if (at >= 0) drop_at(xs, (size_t)at);
  if (xs->n == xs->cap) {
    size_t cap = xs->cap ? xs->cap * 2 : 64;
    pr_exec_t **v = realloc(xs->v, cap * sizeof(*v));
    if (v == NULL) return PR_ENOMEM;
    xs->v = v;
    xs->cap = cap;
  }
  xs->v[xs->n++] = x;
  return 0;
}

static int by_id(const void *a, const void *b) {
  uint64_t x = (*(pr_exec_t *const *)a)->id, y = (*(pr_exec_t *const *)b)->id;
  return x < y ? -1 : x > y;
}

static char *read_file(int fd, size_t *n) {
  struct stat st;
  if (fstat(fd, &st) != 0) return NULL;
  char *p = malloc((size_t)st.st_size + 1);
  size_t got = 0;
  while (p && got < (size_t)st.st_size) {
    ssize_t r = pread(fd, p + got, (size_t)st.st_size - got, (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  *n = got;
  return p;
}

/* Parse frames from `off`; returns the offset after the last good frame. */
static size_t parse(pr_journal_t *j, const char *p, size_t len, execs_t *xs, uint64_t *next) {
  pr_history_t *h = j->history;
  pr_engine_t *e = j->eng;
  size_t off = HEADER_LEN;
  int bad_sums = 0;
  msgpack_unpacked outer, inner;
  msgpack_unpacked_init(&outer);
  msgpack_unpacked_init(&inner);
  while (off < len) {
    size_t at = off;
    int r = msgpack_unpack_next(&outer, p, len, &at);
    const msgpack_object *o = &outer.data;
    if (r != MSGPACK_UNPACK_SUCCESS || o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != 2 ||
        o->via.array.ptr[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER ||
        o->via.array.ptr[1].type != MSGPACK_OBJECT_BIN) {
      pr_journal_warn(j, "history: %s: %s record at byte %zu skipped (%zu bytes)", h->path,
                      r == MSGPACK_UNPACK_CONTINUE ? "torn" : "corrupt", off, len - off);
      break;
    }
    const char *body = o->via.array.ptr[1].via.bin.ptr;
    size_t blen = o->via.array.ptr[1].via.bin.size;
    size_t boff = 0;
    if (fnv1a(body, blen) != (uint32_t)o->via.array.ptr[0].via.u64 ||
        msgpack_unpack_next(&inner, body, blen, &boff) != MSGPACK_UNPACK_SUCCESS ||
        inner.data.type != MSGPACK_OBJECT_MAP) {
      bad_sums++; /* framing intact: skip just this one */
      add_entry(h, 0, off, (uint32_t)(at - off), 'x');
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
      pr_exec_t *x = id ? loaded_exec(e, m, kind) : NULL;
      if (x && put(xs, x) != 0) pr_exec_free(x);
      if (kind == 'e') kill_entries(h, id, 's');
      add_entry(h, id, off, (uint32_t)(at - off), kind);
    } else if (kind == 'd') {
      const msgpack_object *ids = get(m, "ids");
      for (uint32_t i = 0; ids && ids->type == MSGPACK_OBJECT_ARRAY && i < ids->via.array.size; i++) {
        uint64_t d = ids->via.array.ptr[i].via.u64;
        ssize_t w = find(xs, d);
        if (w >= 0) drop_at(xs, (size_t)w);
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
  msgpack_unpacked_destroy(&outer);
  msgpack_unpacked_destroy(&inner);
  if (bad_sums)
    pr_journal_warn(j, "history: %s: %d corrupt record(s) skipped", h->path, bad_sums);
  return off;
}

static int give_up(pr_journal_t *j, pr_history_t *h, const char *why) {
  pr_journal_warn(j, "history: %s: %s; history is off for this engine", h->path, why);
  pr_history_free(j);
  return 0;
}

int pr_history_open(pr_journal_t *j, const char *path) {
  pr_engine_t *e = j->eng;
  pr_history_t *h = calloc(1, sizeof(*h));
  if (h == NULL) return PR_ENOMEM;
  h->fd = h->lockfd = -1;
  h->tail_bytes = e->opts.history_output_bytes ? e->opts.history_output_bytes
                                               : PR_HISTORY_DEFAULT_OUTPUT;
  j->history = h;
  size_t pl = strlen(path);
  h->path = strdup(path);
  h->tmp = malloc(pl + 6);
  char *lock = malloc(pl + 6);
  if (h->path == NULL || h->tmp == NULL || lock == NULL) {
    free(lock);
    pr_history_free(j);
    return PR_ENOMEM;
  }
  snprintf(h->tmp, pl + 6, "%s.tmp", path);
  snprintf(lock, pl + 6, "%s.lock", path);
  h->lockfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  free(lock);
  if (h->lockfd < 0) return give_up(j, h, strerror(errno));
  if (flock(h->lockfd, LOCK_EX | LOCK_NB) != 0)
    return give_up(j, h, "in use by another proctor engine");
  h->fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (h->fd < 0) return give_up(j, h, strerror(errno));
  size_t len = 0;
  char *p = read_file(h->fd, &len);
  if (p == NULL) return give_up(j, h, "cannot read it");
  if (len >= HEADER_LEN ? memcmp(p, HEADER, HEADER_LEN) != 0 : memcmp(p, HEADER, len) != 0) {
    free(p);
    return give_up(j, h, "not a proctor history file (left alone)");
  }
  execs_t xs = {0};
  uint64_t next = 1;
  size_t good = HEADER_LEN;
  if (len < HEADER_LEN) { /* new, or torn while its header was written */
    if (ftruncate(h->fd, 0) != 0 || write_all(h->fd, HEADER, HEADER_LEN) != 0) {
      free(p);
      return give_up(j, h, "cannot write it");
    }
  } else {
    good = parse(j, p, len, &xs, &next);
    if (good < len && ftruncate(h->fd, (off_t)good) != 0) {
      free(p);
      for (size_t i = 0; i < xs.n; i++) pr_exec_free(xs.v[i]);
      free(xs.v);
      return give_up(j, h, "cannot truncate its torn tail");
    }
  }
  free(p);
  h->size = good;
  if (h->max_id + 1 > next) next = h->max_id + 1;
  /* Retention, oldest first, then registration. */
  qsort(xs.v, xs.n, sizeof(*xs.v), by_id);
  uint64_t now = pr_now_ms();
  size_t limit = e->opts.history_limit, dropped = 0;
  for (size_t i = 0; i < xs.n; i++) {
    pr_exec_t *x = xs.v[i];
    int old = e->opts.history_age_ms && x->ended_at + e->opts.history_age_ms <= now;
    if (old || (limit && xs.n - i > limit)) {
      kill_entries(h, x->id, 0);
      pr_exec_free(x);
      dropped++;
      continue;
    }
    if (x->reason && strcmp(x->reason, "host_lost") == 0 && x->started_at == 0) {
      int lost = 1; /* an "s" only: say in the file how it ended */
      for (size_t k = 0; k < h->nent && lost; k++)
        lost = !(h->ent[k].id == x->id && h->ent[k].kind == 'e');
      if (lost) pr_history_on_state(j, x, PR_RUNNING);
    }
    pr_registry_add(e, x);
    e->nterminal++;
  }
  free(xs.v);
  if (next > e->next_id) e->next_id = next;
  if (dropped || (h->dead > COMPACT_SLACK && h->dead > h->size / 3)) pr_history_compact(j);
  return 0;
}

void pr_history_free(pr_journal_t *j) {
  pr_history_t *h = j->history;
  if (h == NULL) return;
  if (h->fd >= 0) close(h->fd);
  if (h->lockfd >= 0) close(h->lockfd); /* releases the flock */
  free(h->path);
  free(h->tmp);
  free(h->ent);
  free(h);
  j->history = NULL;
}
