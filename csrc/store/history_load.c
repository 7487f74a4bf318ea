/* store/history_load.c — loading the history: this engine's slot file
 * (parsed, repaired, retention applied) and the other slots' files (only
 * read), merged into one list; the slot an engine takes.
 *
 * Thread: pr_history_open on the HOST, inside pr_engine_new (a slot and
 * the next id from the frames' heads: peek_next); pr_history_load on the
 * engine's loader thread while the engine thread already runs, before the
 * writer thread runs (on the host when peek_next could not step through the
 * file); it stops between two frames once its stop flag is set. history.h.
 *
 *   slot files ──read 1 MiB at a time (pr_frames_t)──► parse() each
 *        ──► tombstones of every file applied
 *        ──► retention (newest ended kept) ──► records in id order ──► engine
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
#include "store/frame.h"

/* Tests (pr_history_test_frame): called before each frame is decoded. */
static void (*frame_hook)(const int *stop);

void pr_history_test_frame(void (*fn)(const int *stop)) { frame_hook = fn; }

size_t pr_history_test_chunk(size_t bytes) { return pr_frames_test_chunk(bytes); }

/* The engine is closing: the load stops where it is. */
static int stopped(const pr_history_t *h) {
  return h->stop && __atomic_load_n(h->stop, __ATOMIC_ACQUIRE);
}

/* A list of ids (tombstones). */
typedef struct {
  uint64_t *v;
  size_t n, cap;
} ids_t;

static int ids_add(ids_t *s, uint64_t id) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 16;
    uint64_t *v = realloc(s->v, cap * sizeof(*v));
    if (v == NULL) return PR_ENOMEM;
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = id;
  return 0;
}

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
   * offsets (and `missed`) read as they did in the session that wrote it
   * (every offset of ring.h's diagram, `spilled` too: nothing is in a file). */
  r->head = r->spilled = r->tail = r->delivered = total >= n ? total - n : 0;
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
  r->id = (uint64_t)get_int(m, pr_hist_key[PR_RF_ID], 0);
  r->previous_session = 1;
  r->worker_state = -1;
  r->label = get_str(m, pr_hist_key[PR_RF_LABEL]);
  r->owner = get_str(m, pr_hist_key[PR_RF_OWNER]);
  r->cwd = get_str(m, pr_hist_key[PR_RF_CWD]);
  r->target = get_str(m, pr_hist_key[PR_RF_TARGET]);
  r->created_at = (uint64_t)get_int(m, pr_hist_key[PR_RF_CREATED_AT], 0);
  const msgpack_object *o = get(m, pr_hist_key[PR_RF_PTY]);
  r->pty = o && o->type == MSGPACK_OBJECT_BOOLEAN && o->via.boolean;
  if ((o = get(m, pr_hist_key[PR_RF_ENV_KEYS])) && o->type == MSGPACK_OBJECT_BIN &&
      o->via.bin.size && (r->env_keys = malloc(o->via.bin.size))) {
    memcpy(r->env_keys, o->via.bin.ptr, o->via.bin.size);
    r->env_keys_len = o->via.bin.size;
  }
  o = get(m, pr_hist_key[PR_RF_CMD]);
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
    char *st = get_str(m, pr_hist_key[PR_RF_STATE]);
    int s = st ? pr_state_from_name(st) : -1;
    free(st);
    r->state = s >= 0 && pr_state_terminal((pr_state_t)s) ? (pr_state_t)s : PR_FAILED;
    r->reason = get_str(m, pr_hist_key[PR_RF_REASON]);
    r->error = get_str(m, pr_hist_key[PR_RF_ERROR]);
    r->exit_code = (int)get_int(m, pr_hist_key[PR_RF_EXIT_CODE], -1);
    r->signal = (int)get_int(m, pr_hist_key[PR_RF_SIGNAL], 0);
    r->started_at = (uint64_t)get_int(m, pr_hist_key[PR_RF_STARTED_AT], 0);
    r->ended_at = (uint64_t)get_int(m, pr_hist_key[PR_RF_ENDED_AT], 0);
    r->duration_ms = (uint64_t)get_int(m, pr_hist_key[PR_RF_DURATION_MS], 0);
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
      const char *tail = a[2].via.bin.ptr;
      size_t n = a[2].via.bin.size;
      /* the tail stays in the file (read on demand); copied when it cannot */
      l->rings[k] = h->bk && h->fbuf
                        ? pr_ring_backed(h->o.output_limit, h->bk,
                                         h->fbase + (uint64_t)(tail - h->fbuf), a[1].via.u64, n)
                        : loaded_ring(h->o.output_limit, a[1].via.u64, tail, n);
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

/* A whole frame at file offset `off` whose payload is a map (into *m, which
 * points into the reader's buffer until its next read). */
static int good_frame(pr_frames_t *r, uint64_t off, msgpack_unpacked *m, uint64_t *end) {
  const char *body;
  size_t blen, boff = 0;
  return pr_frames_at(r, off, &body, &blen, end) == PR_FRAME_OK &&
         msgpack_unpack_next(m, body, blen, &boff) == MSGPACK_UNPACK_SUCCESS &&
         m->data.type == MSGPACK_OBJECT_MAP;
}

/* What a load found damaged (one warning says it all). */
typedef struct {
  size_t nbad, bad_bytes, first_bad; /* corrupt stretches skipped in the middle */
  size_t torn_at, torn_bytes;        /* a tail with no frame after it (torn_bytes 0: none) */
  int torn_short;                    /* that tail was cut short (a torn write), not garbage */
} damage_t;

/* Parse the frames after the header, read through r (r->size: the file's
 * length); returns the offset after the last good frame (where a damaged
 * tail starts, or the length). A damaged stretch in the middle is skipped up
 * to the next whole frame whose checksum matches: a byte flipped in a frame's
 * header or length never costs the frames after it. Stops early when the
 * reader cannot go on (r->err: out of memory, or the stop flag). */
static uint64_t parse(pr_history_t *h, pr_frames_t *r, loaded_t *ls, uint64_t *next, damage_t *dmg,
                      ids_t *tombs) {
  uint64_t off = PR_HIST_HEADER_LEN;
  msgpack_unpacked inner;
  msgpack_unpacked_init(&inner);
  while (off < r->size) {
    uint64_t at;
    if (frame_hook) frame_hook(h->stop);
    if (stopped(h)) break; /* pr_history_load drops what was parsed */
    if (!good_frame(r, off, &inner, &at)) {
      const char *body;
      size_t blen;
      uint64_t end = 0, probe;
      int fr = r->err ? -1 : pr_frames_at(r, off, &body, &blen, &end);
      /* framing intact, payload damaged: trust it only if a good frame (or the end) follows */
      if ((fr == PR_FRAME_BADSUM || fr == PR_FRAME_OK) &&
          (end == r->size || good_frame(r, end, &inner, &probe)))
        at = end;
      else
        for (at = off + 1; at < r->size && !r->err && !good_frame(r, at, &inner, &probe);) at++;
      if (r->err) break;
      if (at >= r->size) { /* nothing good after it: a damaged tail */
        dmg->torn_at = off;
        dmg->torn_bytes = r->size - off;
        dmg->torn_short = fr == PR_FRAME_SHORT;
        break;
      }
      if (dmg->nbad++ == 0) dmg->first_bad = off;
      dmg->bad_bytes += at - off;
      pr_hist_add_entry(h, 0, off, (uint32_t)(at - off),
                        'x'); /* dead: the next compaction drops it */
      h->ent[h->nent - 1].dead = 1;
      h->dead += at - off;
      off = at;
      continue;
    }
    const msgpack_object *m = &inner.data;
    h->fbuf = r->buf; /* where the tails in m are: loaded_record */
    h->fbase = r->base;
    char *k = get_str(m, "k");
    char kind = k && strlen(k) == 1 ? k[0] : 0;
    free(k);
    uint64_t id = (uint64_t)get_int(m, pr_hist_key[PR_RF_ID], 0);
    if (kind == 's' || kind == 'e') {
      pr_loaded_t l;
      if (id && loaded_record(h, m, kind, &l) == 0 && put(ls, &l) != 0) loaded_free(&l);
      if (kind == 'e') pr_hist_kill(h, id, 's');
      pr_hist_add_entry(h, id, off, (uint32_t)(at - off), kind);
    } else if (kind == 'd') {
      const msgpack_object *ids = get(m, "ids");
      uint64_t other = 0; /* an id of another slot: the tombstone may have to stay */
      for (uint32_t i = 0; ids && ids->type == MSGPACK_OBJECT_ARRAY && i < ids->via.array.size;
           i++) {
        const msgpack_object *o = &ids->via.array.ptr[i];
        if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER) continue;
        uint64_t d = o->via.u64;
        ssize_t w = find(ls, d);
        if (w >= 0) drop_at(ls, (size_t)w);
        pr_hist_kill(h, d, 0);
        if (d > h->max_id && pr_hist_own(h, d)) h->max_id = d;
        if (!pr_hist_own(h, d)) other = d;
        if (tombs) ids_add(tombs, d);
      }
      pr_hist_add_entry(h, other, off, (uint32_t)(at - off), 'd');
      if (other == 0) { /* ours only: applied, the next compaction drops it */
        h->ent[h->nent - 1].dead = 1;
        h->dead += at - off;
      }
    } else if (kind == 'n') {
      uint64_t n = (uint64_t)get_int(m, "next", 0);
      if (n > *next) *next = n;
      pr_hist_add_entry(h, 0, off, (uint32_t)(at - off), 'n');
      h->ent[h->nent - 1].dead = 1;
      h->dead += at - off;
    }
    off = at;
  }
  msgpack_unpacked_destroy(&inner);
  return off;
}

/* Copy the first len bytes of file `from` to `to` (a chunk at a time).
 * Returns 0 or a negative errno. */
static int copy_file(int from, int to, uint64_t len) {
  size_t cap = PR_FRAMES_CHUNK;
  char *b = malloc(cap);
  int rc = b ? 0 : -ENOMEM;
  for (uint64_t off = 0; rc == 0 && off < len;) {
    ssize_t k = pread(from, b, len - off < cap ? (size_t)(len - off) : cap, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) rc = -errno;
    if (k <= 0) break; /* the file is shorter now: what it has is copied */
    rc = pr_hist_write_all(to, b, (size_t)k);
    off += (uint64_t)k;
  }
  free(b);
  return rc;
}

/* Keep the damaged file (its first len bytes: all the load read) as it was
 * in "<path>.damaged-N" (the first free N). Returns the malloc'd name, or
 * NULL (errno set) when no copy could be made. */
static char *keep_copy(const pr_history_t *h, uint64_t len) {
  size_t n = strlen(h->path) + 32;
  char *name = malloc(n);
  if (name == NULL) return NULL;
  for (int i = 1; i < 10000; i++) {
    snprintf(name, n, "%s.damaged-%d", h->path, i);
    int fd = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) continue;
    if (fd < 0) break;
    int rc = copy_file(h->fd, fd, len);
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

/* "<a><b>" (malloc'd, NULL when out of memory). */
static char *cat(const char *a, const char *b) {
  size_t n = strlen(a) + strlen(b) + 1;
  char *s = malloc(n);
  if (s) snprintf(s, n, "%s%s", a, b);
  return s;
}

/* Slot k's file (malloc'd): the configured path for slot 0, "<path>.k" after. */
static char *slot_file(const char *path, unsigned k) {
  char suf[16] = "";
  if (k) snprintf(suf, sizeof(suf), ".%u", k);
  return cat(path, suf);
}

/* Take the first slot whose lock this engine can hold (h->slot, path, tmp,
 * lockfd set). Returns 0, PR_ENOMEM, or 1 with why (cap bytes) set. */
static int take_slot(pr_history_t *h, const char *path, char *why, size_t cap) {
  for (unsigned k = 0; k < PR_HISTORY_SLOTS; k++) {
    char *file = slot_file(path, k), *lock = file ? cat(file, ".lock") : NULL;
    if (lock == NULL) {
      free(file);
      return PR_ENOMEM;
    }
    /* neither open may block the host: pr_journal_open_file */
    int fd = pr_journal_open_file(lock, O_RDWR | O_CREAT, why, cap - 24);
    free(lock);
    if (fd < 0) {
      free(file);
      strcat(why, " (its .lock file)");
      return 1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
      free(h->path);
      h->path = file;
      h->slot = k;
      h->lockfd = fd;
      return (h->tmp = cat(file, ".tmp")) ? 0 : PR_ENOMEM;
    }
    close(fd);
    free(file);
  }
  snprintf(why, cap, "all %d slots are in use by other proctor engines", PR_HISTORY_SLOTS);
  return 1;
}

/* Is the engine of slot file `file` alive (its lock held)? */
static int slot_live(const char *file) {
  char *lock = cat(file, ".lock"), why[64];
  int fd = lock ? pr_journal_open_file(lock, O_RDONLY, why, sizeof(why)) : -1;
  free(lock);
  if (fd < 0) return 0;
  int live = flock(fd, LOCK_SH | LOCK_NB) != 0;
  close(fd); /* releases the shared lock */
  return live;
}

/* Has index o an end frame for id? */
static int has_end(const pr_history_t *o, uint64_t id) {
  for (size_t i = 0; i < o->nent; i++)
    if (o->ent[i].id == id && o->ent[i].kind == 'e') return 1;
  return 0;
}

/* Read slot k's file (another engine's: only read, never repaired) into ls
 * and its tombstones into tombs. A start with no end is dropped while its
 * engine lives (it is running there); once that engine is gone it reads as
 * failed / host_lost, as in our own file. */
static void load_other(pr_history_t *h, unsigned k, const char *path, loaded_t *ls, ids_t *tombs) {
  char *file = slot_file(path, k), why[64];
  struct stat st;
  int fd =
      file && stat(file, &st) == 0 ? pr_journal_open_file(file, O_RDONLY, why, sizeof(why)) : -1;
  int live = fd >= 0 && slot_live(file);
  free(file);
  if (fd < 0) return;
  pr_frames_t r;
  size_t have = 0;
  int opened = pr_frames_open(&r, fd, 0, h->stop) == 0;
  const char *p = opened ? pr_frames_bytes(&r, 0, PR_HIST_HEADER_LEN, &have) : NULL;
  pr_backing_t *bk = pr_backing_new(fd); /* its records' tails are read from it */
  if (p == NULL || have < PR_HIST_HEADER_LEN ||
      memcmp(p, PR_HIST_HEADER, PR_HIST_HEADER_LEN) != 0) {
    if (opened) pr_frames_close(&r);
    pr_backing_unref(bk);
    return;
  }
  pr_history_t o = {.j = h->j, .o = h->o, .slot = k, .stop = h->stop, .bk = bk};
  loaded_t mine = {0};
  damage_t dmg = {0};
  uint64_t next = 0;
  parse(&o, &r, &mine, &next, &dmg, tombs);
  pr_frames_close(&r);
  pr_backing_unref(bk); /* the rings that read it hold their own references */
  for (size_t i = 0; i < mine.n; i++) {
    pr_loaded_t *l = &mine.v[i];
    int running = live && !has_end(&o, l->rec->id);
    if (running || !pr_hist_own(&o, l->rec->id) || put(ls, l) != 0) loaded_free(l);
  }
  free(mine.v);
  free(o.ent);
}

/* Oldest ended first (then by id): the order retention drops in. */
static int by_age(const void *a, const void *b) {
  const pr_record_t *x = ((const pr_loaded_t *)a)->rec, *y = ((const pr_loaded_t *)b)->rec;
  if (x->ended_at != y->ended_at) return x->ended_at < y->ended_at ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* Merge the other slots' records into ls; apply every file's tombstones.
 * Returns how many of our own records another engine's tombstones dropped. */
static size_t merge_others(pr_history_t *h, const char *path, loaded_t *ls, ids_t *tombs) {
  loaded_t other = {0};
  for (unsigned k = 0; k < PR_HISTORY_SLOTS && !stopped(h); k++)
    if (k != h->slot) load_other(h, k, path, &other, tombs);
  if (stopped(h)) {
    pr_history_loaded_free(other.v, other.n);
    return 0;
  }
  /* Our tombstones for other slots' records stay until those files let go. */
  for (size_t i = 0; i < h->nent; i++) {
    pr_hentry_t *x = &h->ent[i];
    if (x->kind == 'd' && !x->dead && x->id && find(&other, x->id) < 0) {
      x->dead = 1;
      h->dead += x->len;
    }
  }
  size_t dropped = 0;
  for (size_t i = 0; i < tombs->n; i++) {
    uint64_t id = tombs->v[i];
    ssize_t w = find(&other, id);
    if (w >= 0) drop_at(&other, (size_t)w);
    if (pr_hist_own(h, id) && (w = find(ls, id)) >= 0) {
      drop_at(ls, (size_t)w);
      pr_hist_kill(h, id, 0);
      dropped++;
    }
  }
  for (size_t i = 0; i < other.n; i++)
    if (put(ls, &other.v[i]) != 0) loaded_free(&other.v[i]);
  free(other.v);
  return dropped;
}

/* An unsigned msgpack integer at p[0..n) (*w: its bytes), or -1 (*w 0). */
static int64_t peek_uint(const unsigned char *p, size_t n, size_t *w) {
  *w = 0;
  if (n < 1) return -1;
  int k = p[0] <= 0x7f   ? 0
          : p[0] == 0xcc ? 1
          : p[0] == 0xcd ? 2
          : p[0] == 0xce ? 4
          : p[0] == 0xcf ? 8
                         : -1;
  if (k < 0 || n < 1 + (size_t)k) return -1;
  uint64_t v = k ? 0 : p[0];
  for (int i = 0; i < k; i++) v = v << 8 | p[1 + i];
  if (v > INT64_MAX) return -1;
  *w = 1 + (size_t)k;
  return (int64_t)v;
}

/* The largest id a frame's payload prefix p[0..n) names, the way parse()
 * counts it toward the next id: "s"/"e" (our slot's id), "n" (next - 1),
 * "d" (our slot's ids). 0: none; -1: not the layout pack_record() and the
 * listener write (the caller then loads the file the slow way). */
static int64_t peek_ids(const pr_history_t *h, const unsigned char *p, size_t n) {
  size_t i = 1, w;
  if (n < 4 || p[0] < 0x81 || p[0] > 0x8f || p[1] != 0xa1 || p[2] != 'k' || p[3] != 0xa1) return -1;
  if (n < 5) return -1;
  char kind = (char)p[4];
  i = 5;
  if (kind == 's' || kind == 'e') {
    if (n < i + 3 || memcmp(p + i, "\xa2id", 3) != 0) return -1;
    int64_t id = peek_uint(p + i + 3, n - i - 3, &w);
    if (id < 0) return -1;
    return pr_hist_own(h, (uint64_t)id) ? id : 0;
  }
  if (kind == 'n') {
    if (n < i + 5 || memcmp(p + i, "\xa4next", 5) != 0) return -1;
    int64_t next = peek_uint(p + i + 5, n - i - 5, &w);
    return next < 0 ? -1 : next > 0 ? next - 1 : 0;
  }
  if (kind != 'd' || n < i + 5 || memcmp(p + i, "\xa3ids", 4) != 0) return -1;
  i += 4;
  if (p[i] < 0x90 || p[i] > 0x9f) return -1;
  size_t cnt = p[i++] - 0x90;
  int64_t max = 0;
  for (size_t c = 0; c < cnt; c++, i += w) {
    int64_t id = peek_uint(p + i, n > i ? n - i : 0, &w);
    if (id < 0) return -1;
    if (pr_hist_own(h, (uint64_t)id) && id > max) max = id;
  }
  return max;
}

/* The next id this slot's file allows, found by reading only each frame's
 * head (one pread a frame, no checksum, no decoding of records or output):
 * what lets pr_engine_new hand out ids before the file is loaded. At least
 * what the full load finds (a frame whose checksum fails still counts).
 * Returns 0, or -1 when the file is not laid out as this release writes it
 * (damage, an older writer): then the file must be loaded before any start. */
static int peek_next(const pr_history_t *h, uint64_t *next) {
  struct stat st;
  unsigned char b[96];
  if (fstat(h->fd, &st) != 0) return -1;
  uint64_t size = (uint64_t)st.st_size, off = PR_HIST_HEADER_LEN, max = 0, nx = 1;
  if (size < PR_HIST_HEADER_LEN) return size == 0 ? (*next = 1, 0) : -1;
  if (pread(h->fd, b, PR_HIST_HEADER_LEN, 0) != PR_HIST_HEADER_LEN ||
      memcmp(b, PR_HIST_HEADER, PR_HIST_HEADER_LEN) != 0)
    return -1;
  while (off < size) {
    size_t want = size - off < sizeof(b) ? (size_t)(size - off) : sizeof(b);
    ssize_t k;
    do k = pread(h->fd, b, want, (off_t)off);
    while (k < 0 && errno == EINTR);
    if (k < 8 || b[0] != 0x92) return -1;
    size_t i = 1, w;
    if (peek_uint(b + i, (size_t)k - i, &w) < 0) return -1;
    i += w;
    int lw = b[i] == 0xc4 ? 1 : b[i] == 0xc5 ? 2 : b[i] == 0xc6 ? 4 : -1;
    if (lw < 0 || (size_t)k < i + 1 + (size_t)lw) return -1;
    uint64_t bl = 0;
    for (int q = 0; q < lw; q++) bl = bl << 8 | b[i + 1 + q];
    i += 1 + (size_t)lw;
    if (bl > size - off - i) return -1; /* a torn tail: the load cuts it */
    int64_t id = peek_ids(h, b + i, (size_t)k - i < bl ? (size_t)k - i : (size_t)bl);
    if (id < 0) return -1;
    if ((uint64_t)id > max) max = (uint64_t)id;
    off += i + bl;
  }
  if (max + 1 > nx) nx = max + 1;
  *next = nx;
  return 0;
}

int pr_history_open(pr_journal_t *j, const char *path, const pr_history_opts_t *o,
                    pr_history_t **out, uint64_t *next_id) {
  *out = NULL;
  *next_id = 0;
  pr_history_t *h = calloc(1, sizeof(*h));
  if (h == NULL) return PR_ENOMEM;
  h->j = j;
  h->o = *o;
  if (!h->o.tail_bytes) h->o.tail_bytes = PR_HISTORY_DEFAULT_OUTPUT;
  pr_hist_listen(h);
  h->fd = h->lockfd = -1;
  if ((h->path = strdup(path)) == NULL || (h->base = strdup(path)) == NULL) {
    pr_history_free(h);
    return PR_ENOMEM;
  }
  char why[160];
  int rc = take_slot(h, path, why, sizeof(why));
  if (rc < 0) {
    pr_history_free(h);
    return rc;
  }
  if (rc) return give_up(h, why);
  h->fd = pr_journal_open_file(h->path, O_RDWR | O_CREAT | O_APPEND, why, sizeof(why));
  if (h->fd < 0) return give_up(h, why);
  uint64_t next;
  if (peek_next(h, &next) == 0) {
    if (next <= (uint64_t)h->slot * PR_HISTORY_SLOT_IDS) next = h->slot * PR_HISTORY_SLOT_IDS + 1;
    *next_id = next;
  }
  *out = h;
  return 0;
}

/* The file cannot be used after all: nothing more is written (h stays: its
 * listener may already be in the engine's list), with a warning. */
static int give_up_load(pr_history_t *h, const char *why) {
  pr_journal_warn(h->j, "history: %s: %s; history is off for this engine", h->path, why);
  h->broken = 1;
  h->stop = NULL;
  return 0;
}

/* The load was stopped (the engine closes): drop what was read; the file is
 * left as it is and only appended to (h->partial) for the rest of the session. */
static int halt(pr_history_t *h, loaded_t *ls, ids_t *tombs) {
  struct stat st;
  free(tombs->v);
  pr_history_loaded_free(ls->v, ls->n);
  if (fstat(h->fd, &st) == 0) h->size = (uint64_t)st.st_size;
  h->partial = 1;
  h->stop = NULL;
  return PR_ECLOSED;
}

int pr_history_load(pr_history_t *h, pr_loaded_t **loaded, size_t *nloaded, uint64_t *next_id,
                    const int *stop) {
  const pr_history_opts_t *o = &h->o;
  *loaded = NULL;
  *nloaded = 0;
  *next_id = 1;
  h->stop = stop;
  loaded_t ls = {0};
  ids_t tombs = {0};
  pr_frames_t r;
  size_t have = 0;
  if (pr_frames_open(&r, h->fd, 0, stop) != 0) return give_up_load(h, "cannot read it");
  const char *p = r.size ? pr_frames_bytes(&r, 0, PR_HIST_HEADER_LEN, &have) : "";
  if (p == NULL) {
    pr_frames_close(&r);
    if (stopped(h)) return halt(h, &ls, &tombs);
    return give_up_load(h, "cannot read it");
  }
  uint64_t len = r.size; /* what the file holds, as far as it could be read */
  if (memcmp(p, PR_HIST_HEADER, len < PR_HIST_HEADER_LEN ? (size_t)len : PR_HIST_HEADER_LEN)) {
    pr_frames_close(&r);
    return give_up_load(h, "not a proctor history file (left alone)");
  }
  uint64_t next = 1, good = PR_HIST_HEADER_LEN;
  int damaged = 0;
  if (len < PR_HIST_HEADER_LEN) { /* new, or torn while its header was written */
    pr_frames_close(&r);
    if (ftruncate(h->fd, 0) != 0 || pr_hist_write_all(h->fd, PR_HIST_HEADER, PR_HIST_HEADER_LEN))
      return give_up_load(h, "cannot write it");
  } else {
    damage_t dmg = {0};
    int fd = fcntl(h->fd, F_DUPFD_CLOEXEC, 0); /* this file as it is now, for the tails */
    h->bk = fd >= 0 ? pr_backing_new(fd) : NULL;
    good = parse(h, &r, &ls, &next, &dmg, &tombs);
    len = r.size;
    int err = r.err;
    pr_frames_close(&r);
    pr_backing_unref(h->bk); /* the rings that read it hold their own references */
    h->bk = NULL;
    h->fbuf = NULL;
    if (stopped(h)) return halt(h, &ls, &tombs); /* nothing repaired, nothing written */
    if (err) { /* out of memory part way: nothing repaired, nothing written */
      free(tombs.v);
      pr_history_loaded_free(ls.v, ls.n);
      return give_up_load(h, "cannot read it (out of memory)");
    }
    if (dmg.nbad || dmg.torn_bytes) { /* never cut or rewrite a damaged file without a copy */
      char *copy = keep_copy(h, len);
      warn_damage(h, &dmg, copy, errno);
      if (copy == NULL) { /* left as it is: the next load skips the same damage again */
        good = len;
      } else if (dmg.nbad) {
        damaged = 1; /* compacted below: the garbage leaves the file */
      }
      free(copy);
    }
    if (good < len && ftruncate(h->fd, (off_t)good) != 0) {
      free(tombs.v);
      pr_history_loaded_free(ls.v, ls.n);
      return give_up_load(h, "cannot truncate its torn tail");
    }
  }
  h->size = good;
  size_t dropped = merge_others(h, h->base, &ls, &tombs);
  if (stopped(h)) return halt(h, &ls, &tombs);
  free(tombs.v);
  h->stop = NULL;
  if (h->max_id + 1 > next) next = h->max_id + 1;
  if (next <= (uint64_t)h->slot * PR_HISTORY_SLOT_IDS) next = h->slot * PR_HISTORY_SLOT_IDS + 1;
  /* Retention over the merged list, oldest ended first. */
  if (ls.n > 1) qsort(ls.v, ls.n, sizeof(*ls.v), by_age); /* ls.v is NULL when empty */
  uint64_t now = pr_now_ms();
  size_t limit = o->limit, keep = 0;
  for (size_t i = 0; i < ls.n; i++) {
    pr_loaded_t *l = &ls.v[i];
    int old = o->age_ms && l->rec->ended_at + o->age_ms <= now;
    if (old || (limit && ls.n - i > limit)) {
      if (pr_hist_own(h, l->rec->id)) {
        pr_hist_kill(h, l->rec->id, 0);
        dropped++;
      }
      loaded_free(l);
      continue;
    }
    if (pr_hist_own(h, l->rec->id) && l->rec->reason && strcmp(l->rec->reason, "host_lost") == 0 &&
        l->rec->started_at == 0 && !has_end(h, l->rec->id))
      pr_hist_record_frame(h, l->rec, l->rings, 'e'); /* an "s" only: say how it ended */
    ls.v[keep++] = *l;
  }
  if (keep > 1) qsort(ls.v, keep, sizeof(*ls.v), by_id);
  if (dropped || damaged || (h->dead > PR_HIST_COMPACT_SLACK && h->dead > h->size / 3))
    pr_hist_compact_soon(h);
  *loaded = ls.v;
  *nloaded = keep;
  *next_id = next;
  return 0;
}
