/* base/ring.c — bounded byte ring with absolute offsets, and its spill file.
 * See ring.h.
 *
 * Thread: shared, every ring entry point holds r->mu; a spill context is
 * touched with atomics only.
 */
#include "base/ring.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "include/proctor.h"

#define PR_RING_MIN 4096
#define PR_RING_HUGE ((size_t)2 << 20) /* a transparent huge page */

/* ---- the spill context ------------------------------------------------------------ */

pr_spill_t *pr_spill_new(const char *dir, size_t memory) {
  pr_spill_t *s = calloc(1, sizeof(*s));
  if (s == NULL) return NULL;
  if (dir && *dir) {
    s->dir = strdup(dir);
  } else {
    const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    size_t n = x && *x == '/' ? strlen(x) + sizeof("/proctor")
               : h && *h      ? strlen(h) + sizeof("/.cache/proctor")
                              : 0;
    if (n && (s->dir = malloc(n)) != NULL)
      snprintf(s->dir, n, "%s%s", x && *x == '/' ? x : h,
               x && *x == '/' ? "/proctor" : "/.cache/proctor");
  }
  if (s->dir == NULL) {
    free(s);
    return NULL;
  }
  s->memory = memory ? memory : 1;
  s->refs = 1;
  return s;
}

static void spill_ref(pr_spill_t *s) { __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED); }

void pr_spill_unref(pr_spill_t *s) {
  if (s == NULL || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  free(s->dir);
  free(s);
}

int pr_spill_failure(pr_spill_t *s) {
  int err = __atomic_load_n(&s->failed, __ATOMIC_ACQUIRE);
  if (err == 0 || __atomic_exchange_n(&s->reported, 1, __ATOMIC_ACQ_REL)) return 0;
  return err;
}

static void spill_failed(pr_spill_t *s, int err) {
  int zero = 0;
  __atomic_compare_exchange_n(&s->failed, &zero, err ? err : EIO, 0, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
  __atomic_add_fetch(&s->nfailed, 1, __ATOMIC_RELAXED);
}

/* mkdir -p with 0700 for every directory made. Returns 0 or an errno. */
static int make_dir(const char *dir) {
  char p[4096];
  size_t n = strlen(dir);
  if (n == 0 || n >= sizeof(p)) return ENAMETOOLONG;
  memcpy(p, dir, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (p[i] != '/' && p[i] != '\0') continue;
    char c = p[i];
    p[i] = '\0';
    if (mkdir(p, 0700) != 0 && errno != EEXIST) return errno;
    p[i] = c;
  }
  return 0;
}

/* A new unlinked file in s->dir (0600, close-on-exec). Returns the fd or -errno. */
static int spill_open(pr_spill_t *s) {
  int err = make_dir(s->dir);
  if (err) return -err;
  int fd = -1;
#ifdef O_TMPFILE
  fd = open(s->dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  if (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL) return -errno;
#endif
  char path[4200];
  if (snprintf(path, sizeof(path), "%s/spill-XXXXXX", s->dir) >= (int)sizeof(path))
    return -ENAMETOOLONG;
  fd = mkostemp(path, O_CLOEXEC); /* mode 0600 */
  if (fd < 0) return -errno;
  if (unlink(path) != 0) {
    err = errno;
    close(fd);
    return -err;
  }
  return fd;
}

/* ---- the spill file of one ring (caller holds r->mu) -------------------------------- */

/* pwrite/pread all of `n` bytes of absolute offset `off` at off % limit,
 * wrapping at limit. Returns 0 or an errno. */
static int file_io(pr_ring_t *r, int write, uint64_t off, char *p, size_t n) {
  if (r->back) { /* a backed ring: one stretch of its file, read only */
    uint64_t pos = r->bat + (off - r->bstart);
    while (n > 0 && !write) {
      ssize_t got = pread(r->fd, p, n, (off_t)pos);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return got < 0 ? errno : EIO;
      pos += (uint64_t)got;
      p += got;
      n -= (size_t)got;
    }
    return write ? EIO : 0;
  }
  while (n > 0) {
    size_t pos = (size_t)(off % r->limit), k = r->limit - pos;
    if (k > n) k = n;
    ssize_t got = write ? pwrite(r->fd, p, k, (off_t)pos) : pread(r->fd, p, k, (off_t)pos);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno;
    if (got == 0) return write ? ENOSPC : EIO;
    off += (uint64_t)got;
    p += got;
    n -= (size_t)got;
  }
  return 0;
}

static void file_close(pr_ring_t *r) {
  if (r->back) { /* not ours to close: the backing's */
    pr_backing_unref(r->back);
    r->back = NULL;
    r->fd = -1;
    return;
  }
  if (r->fd < 0) return;
  close(r->fd);
  r->fd = -1;
  __atomic_sub_fetch(&r->spill->files, 1, __ATOMIC_RELAXED);
}

/* Whether the ring may use a spill file now (it has one, or may make one). */
static int may_spill(pr_ring_t *r) {
  return r->spill && !r->nospill && r->spill->memory < r->limit;
}

/* The most bytes the memory part may allocate. */
static size_t mem_limit(const pr_ring_t *r) {
  return r->spill && !r->nospill && r->spill->memory < r->limit ? r->spill->memory : r->limit;
}

/* Make the file on the first spill. Returns 0 or an errno; past
 * PR_SPILL_MAX_FILES returns -1 (not a failure: this ring stays in memory). */
static int file_ensure(pr_ring_t *r) {
  if (r->fd >= 0) return 0;
  if (__atomic_add_fetch(&r->spill->files, 1, __ATOMIC_RELAXED) > PR_SPILL_MAX_FILES) {
    __atomic_sub_fetch(&r->spill->files, 1, __ATOMIC_RELAXED);
    r->nospill = 1;
    return -1;
  }
  int fd = spill_open(r->spill);
  if (fd < 0) {
    __atomic_sub_fetch(&r->spill->files, 1, __ATOMIC_RELAXED);
    return -fd;
  }
  r->fd = fd;
  return 0;
}

/* ---- memory part ------------------------------------------------------------------ */

static size_t used(const pr_ring_t *r) { return (size_t)(r->tail - r->head); }
static size_t in_mem(const pr_ring_t *r) { return (size_t)(r->tail - r->spilled); }

/* Copy `n` bytes of memory starting `skip` bytes after `spilled` into dst. */
static void mem_out(const pr_ring_t *r, size_t skip, char *dst, size_t n) {
  if (n == 0) return;
  size_t pos = (r->start + skip) % r->cap;
  size_t first = r->cap - pos;
  if (first > n) first = n;
  memcpy(dst, r->buf + pos, first);
  if (n > first) memcpy(dst + first, r->buf, n - first);
}

/* Copy the retained bytes [off, off + n) into dst, from the file and memory.
 * Returns 0 or an errno. */
static int copy_range(pr_ring_t *r, uint64_t off, char *dst, size_t n) {
  if (off < r->spilled) {
    size_t k = r->spilled - off < n ? (size_t)(r->spilled - off) : n;
    int err = file_io(r, 0, off, dst, k);
    if (err) return err;
    off += k;
    dst += k;
    n -= k;
  }
  mem_out(r, (size_t)(off - r->spilled), dst, n);
  return 0;
}

/* The memory part's allocation, freed with buf_free(p, the same n). From
 * PR_RING_HUGE up it is a mapping of its own, aligned to PR_RING_HUGE and
 * asking for transparent huge pages: a flood fills an 8 MiB ring page by
 * page, and 2,048 faults of 4 KiB were the largest cost left of a bare host's
 * flood on a paravirtualised machine (~24 us each: about 50 ms a ring,
 * against ~5 ms with huge pages). A mapping, not malloc: freed, it goes back
 * to the system at once, and the advice stays off the heap. */
static char *buf_alloc(size_t n) {
  if (n < PR_RING_HUGE) return malloc(n ? n : 1);
  size_t len = (n + 4095) & ~(size_t)4095;
  char *m =
      mmap(NULL, len + PR_RING_HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return NULL;
  size_t lead = (PR_RING_HUGE - (uintptr_t)m % PR_RING_HUGE) % PR_RING_HUGE;
  if (lead) munmap(m, lead);
  if (PR_RING_HUGE - lead) munmap(m + lead + len, PR_RING_HUGE - lead);
  (void)madvise(m + lead, len, MADV_HUGEPAGE); /* a hint: without THP, plain pages */
  return m + lead;
}

static void buf_free(char *p, size_t n) {
  if (p && n >= PR_RING_HUGE) munmap(p, (n + 4095) & ~(size_t)4095);
  else free(p);
}

/* Re-layout the memory part into a linear allocation of `ncap` bytes (ncap >= in_mem). */
static int relayout(pr_ring_t *r, size_t ncap) {
  char *nb = buf_alloc(ncap);
  if (nb == NULL) return PR_ENOMEM;
  mem_out(r, 0, nb, in_mem(r));
  buf_free(r->buf, r->cap);
  r->buf = nb;
  r->cap = ncap;
  r->start = 0;
  return 0;
}

/* Forget the oldest `n` bytes of memory (they are dropped or already in the file). */
static void mem_forget(pr_ring_t *r, size_t n) {
  r->spilled += n;
  r->start = r->cap ? (r->start + n) % r->cap : 0;
  if (r->head < r->spilled && r->fd < 0) r->head = r->spilled;
}

static void mem_free(pr_ring_t *r) {
  buf_free(r->buf, r->cap);
  r->buf = NULL;
  r->cap = 0;
  r->start = 0;
}

/* Drop the retained bytes before `h` (h <= tail). */
static void drop_before(pr_ring_t *r, uint64_t h) {
  if (h <= r->head) return;
  r->head = h;
  if (h > r->spilled) mem_forget(r, (size_t)(h - r->spilled));
}

/* Bring the file's bytes back into memory (an allocation of `ncap` >= used
 * bytes) and close the file. Returns 0 or an errno (nothing changed). */
static int unspill(pr_ring_t *r, size_t ncap) {
  char *nb = buf_alloc(ncap);
  if (nb == NULL) return ENOMEM;
  int err = copy_range(r, r->head, nb, used(r));
  if (err) {
    buf_free(nb, ncap);
    return err;
  }
  buf_free(r->buf, r->cap);
  r->buf = nb;
  r->cap = ncap;
  r->start = 0;
  r->spilled = r->head;
  file_close(r);
  return 0;
}

/* The file failed: from now on memory up to limit. `h` is where the head is
 * going (bytes before it are dropped anyway). Bytes that cannot come back
 * from the file are dropped (readers see them as missed). */
static void fall_back(pr_ring_t *r, int err, uint64_t h) {
  spill_failed(r->spill, err);
  r->nospill = 1;
  if (h > r->tail) h = r->tail;
  drop_before(r, h);
  if (r->fd < 0) return;
  size_t ncap = r->cap > PR_RING_MIN ? r->cap : PR_RING_MIN;
  while (ncap < used(r)) ncap *= 2;
  if (ncap > r->limit) ncap = r->limit < used(r) ? used(r) : r->limit;
  if (unspill(r, ncap) != 0) { /* the file's bytes are lost: say so as missed bytes */
    r->head = r->spilled;
    file_close(r);
  }
}

/* Move the oldest bytes of (memory ++ data) to the file, so that memory ++
 * data fits in cap; bytes before `h` (the head after this write) are dropped
 * first, not written. Called and returns with r->mu held, but the file is
 * written without it: the engine thread is the ring's only writer (of buf,
 * the file and the offsets), readers read memory, which this does not change,
 * and the file's [head, spilled), whose positions this does not touch (a byte
 * written here lands where a byte before the new head was). So a host
 * thread's take never waits on the disk (a pwrite stalled by the kernel's
 * writeback held the main thread for as long). On success the memory part
 * lost its oldest bytes and, when data alone is over cap, its first n - cap
 * bytes count as written (tail moved past them). Returns 0, -1 past
 * PR_SPILL_MAX_FILES, or an errno. */
static int evict(pr_ring_t *r, const char *data, size_t n, uint64_t h) {
  int err = file_ensure(r);
  if (err) return err;
  drop_before(r, h);
  size_t e = in_mem(r) + n > r->cap ? in_mem(r) + n - r->cap : 0;
  size_t em = e < in_mem(r) ? e : in_mem(r), ed = e - em;
  uint64_t o = r->spilled;
  size_t start = r->start;
  void (*hook)(pr_ring_t *) = r->spill->test_write;
  pthread_mutex_unlock(&r->mu);
  if (hook && e > 0) hook(r);
  for (size_t done = 0; done < em && !err;) { /* memory, in up to two pieces */
    size_t pos = (start + done) % r->cap, k = r->cap - pos;
    if (k > em - done) k = em - done;
    err = file_io(r, 1, o + done, r->buf + pos, k);
    done += k;
  }
  /* then the start of data (memory was all written: it began at tail) */
  if (ed > 0 && !err) err = file_io(r, 1, o + em, (char *)data, ed);
  pthread_mutex_lock(&r->mu);
  if (err) return err;
  mem_forget(r, em);
  if (ed > 0) { /* memory is empty now; these data bytes went straight to the file */
    r->tail += ed;
    r->spilled = r->tail;
    r->start = 0;
  }
  return 0;
}

/* ---- the ring --------------------------------------------------------------------- */

pr_ring_t *pr_ring_new(size_t limit) {
  pr_ring_t *r = calloc(1, sizeof(*r));
  if (r == NULL) return NULL;
  if (limit == 0) limit = 1;
  r->limit = limit;
  r->refs = 1;
  r->fd = -1;
  pthread_mutex_init(&r->mu, NULL);
  return r;
}

pr_backing_t *pr_backing_new(int fd) {
  pr_backing_t *b = malloc(sizeof(*b));
  if (b == NULL) {
    close(fd);
    return NULL;
  }
  b->refs = 1;
  b->fd = fd;
  return b;
}

void pr_backing_unref(pr_backing_t *b) {
  if (b == NULL || __atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) > 0) return;
  close(b->fd);
  free(b);
}

pr_ring_t *pr_ring_backed(size_t limit, pr_backing_t *b, uint64_t at, uint64_t total, size_t n) {
  pr_ring_t *r = pr_ring_new(limit);
  if (r == NULL) return NULL;
  if (total < n) total = n; /* a damaged count: the bytes still read as they are */
  if (n > r->limit) {       /* only the last `limit` bytes are ever retained */
    at += n - r->limit;
    n = r->limit;
  }
  r->head = r->bstart = total - n;
  r->spilled = r->tail = r->delivered = total;
  r->bat = at;
  if (n > 0) {
    __atomic_add_fetch(&b->refs, 1, __ATOMIC_RELAXED);
    r->back = b;
    r->fd = b->fd;
  }
  return r;
}

void pr_ring_set_spill(pr_ring_t *r, pr_spill_t *s) {
  pthread_mutex_lock(&r->mu);
  if (r->spill == NULL && s) {
    spill_ref(s);
    r->spill = s;
  }
  pthread_mutex_unlock(&r->mu);
}

void pr_ring_ref(pr_ring_t *r) {
  pthread_mutex_lock(&r->mu);
  r->refs++;
  pthread_mutex_unlock(&r->mu);
}

void pr_ring_unref(pr_ring_t *r) {
  if (r == NULL) return;
  pthread_mutex_lock(&r->mu);
  int left = --r->refs;
  pthread_mutex_unlock(&r->mu);
  if (left > 0) return;
  file_close(r);
  pr_spill_unref(r->spill);
  pthread_mutex_destroy(&r->mu);
  buf_free(r->buf, r->cap);
  free(r);
}

int pr_ring_write(pr_ring_t *r, const char *data, size_t n) {
  int rc = 0;
  if (n == 0) return 0;
  pthread_mutex_lock(&r->mu);
  if (n > r->limit) { /* only the last `limit` bytes can ever be kept */
    size_t skip = n - r->limit;
    drop_before(r, r->tail); /* everything retained goes */
    r->tail += skip;
    r->head = r->spilled = r->tail;
    data += skip;
    n = r->limit;
  }
  uint64_t h = r->tail + n > r->limit ? r->tail + n - r->limit : 0; /* the head afterwards */
  size_t ml = mem_limit(r);
  size_t want = in_mem(r) + n < ml ? in_mem(r) + n : ml;
  if (want > r->cap && r->cap < ml) {
    size_t ncap = r->cap ? r->cap : PR_RING_MIN;
    while (ncap < want && ncap < ml) ncap *= 2;
    if (ncap > ml) ncap = ml;
    if (relayout(r, ncap) != 0) rc = PR_ENOMEM; /* keep going with what we have */
  }
  if (in_mem(r) + n > r->cap && r->cap > 0 && may_spill(r)) {
    int err = evict(r, data, n, h);
    if (err == 0) {
      size_t ed = n > r->cap ? n - r->cap : 0;
      data += ed;
      n -= ed;
    } else if (err > 0) {
      fall_back(r, err, h);
    }                 /* else too many files open: this ring stays in memory (nospill is set) */
    if (r->nospill) { /* memory up to limit now: grow as without a spill context */
      pthread_mutex_unlock(&r->mu);
      int rc2 = pr_ring_write(r, data, n);
      return rc ? rc : rc2;
    }
  }
  if (r->cap == 0) { /* nothing allocated and allocation failed: count as dropped */
    drop_before(r, r->tail);
    r->tail += n;
    r->head = r->spilled = r->tail;
    file_close(r);
    pthread_mutex_unlock(&r->mu);
    return rc;
  }
  if (n > r->cap) { /* allocation smaller than the write after a failed grow */
    size_t skip = n - r->cap;
    drop_before(r, r->tail);
    file_close(r);
    r->tail += skip;
    r->head = r->spilled = r->tail;
    data += skip;
    n = r->cap;
  }
  if (in_mem(r) + n > r->cap) /* no spilling (then head == spilled): the oldest bytes go */
    drop_before(r, r->spilled + (in_mem(r) + n - r->cap));
  size_t pos = (r->start + in_mem(r)) % r->cap;
  size_t first = r->cap - pos;
  if (first > n) first = n;
  memcpy(r->buf + pos, data, first);
  if (n > first) memcpy(r->buf, data + first, n - first);
  r->tail += n;
  if (r->tail - r->head > r->limit) r->head = r->tail - r->limit; /* inside the file region */
  pthread_mutex_unlock(&r->mu);
  return rc;
}

/* Caller holds r->mu. */
static int read_locked(pr_ring_t *r, uint64_t from, size_t max, char **out, size_t *len,
                       uint64_t *next, uint64_t *missed) {
  *out = NULL;
  *len = 0;
  *missed = 0;
  if (from < r->head) {
    *missed = r->head - from;
    from = r->head;
  }
  if (from > r->tail) from = r->tail;
  size_t n = (size_t)(r->tail - from);
  if (n > max) n = max;
  if (n > 0) {
    char *b = malloc(n);
    if (b == NULL) return PR_ENOMEM;
    int err = copy_range(r, from, b, n);
    if (err) {
      free(b);
      return -err;
    }
    *out = b;
    *len = n;
  }
  *next = from + n;
  return 0;
}

int pr_ring_read(pr_ring_t *r, uint64_t from, size_t max, char **out, size_t *len, uint64_t *next,
                 uint64_t *missed) {
  pthread_mutex_lock(&r->mu);
  int rc = read_locked(r, from, max, out, len, next, missed);
  pthread_mutex_unlock(&r->mu);
  return rc;
}

int pr_ring_take_tail(pr_ring_t *r, size_t max, char **out, size_t *len, uint64_t *from,
                      uint64_t *missed, int *resume) {
  pthread_mutex_lock(&r->mu);
  r->marker = 0;
  *resume = r->paused;
  r->paused = 0;
  /* First byte handed out: not before the oldest retained one, and not more
   * than `max` before the tail. Everything in between is reported missed. */
  uint64_t start = r->delivered < r->head ? r->head : r->delivered;
  if (max && r->tail - start > max) start = r->tail - max;
  uint64_t next, dropped;
  int rc = read_locked(r, start, SIZE_MAX, out, len, &next, &dropped);
  if (rc == 0) {
    *missed = start - r->delivered;
    *from = start;
    r->delivered = next;
  }
  pthread_mutex_unlock(&r->mu);
  return rc;
}

int pr_ring_take(pr_ring_t *r, char **out, size_t *len, uint64_t *from, uint64_t *missed,
                 int *resume) {
  return pr_ring_take_tail(r, 0, out, len, from, missed, resume);
}

int pr_ring_take_head(pr_ring_t *r, size_t max, char **out, size_t *len, uint64_t *from,
                      uint64_t *missed, int *resume, int *more) {
  pthread_mutex_lock(&r->mu);
  uint64_t start = r->delivered < r->head ? r->head : r->delivered;
  uint64_t next, dropped;
  int rc = read_locked(r, start, max, out, len, &next, &dropped);
  *more = 0;
  if (rc == 0) {
    *missed = start - r->delivered;
    *from = start;
    r->delivered = next;
    *more = r->tail > next;
  }
  if (!*more) r->marker = 0;
  *resume = r->paused && (rc != 0 || r->tail - r->delivered <= mem_limit(r) / 2);
  if (*resume) r->paused = 0;
  pthread_mutex_unlock(&r->mu);
  return rc;
}

int pr_ring_mark(pr_ring_t *r) {
  pthread_mutex_lock(&r->mu);
  int was = r->marker;
  r->marker = 1;
  pthread_mutex_unlock(&r->mu);
  return !was;
}

uint64_t pr_ring_undelivered(pr_ring_t *r) {
  pthread_mutex_lock(&r->mu);
  uint64_t n = r->tail - r->delivered;
  pthread_mutex_unlock(&r->mu);
  return n;
}

size_t pr_ring_window(pr_ring_t *r) {
  pthread_mutex_lock(&r->mu);
  size_t n = mem_limit(r);
  pthread_mutex_unlock(&r->mu);
  return n;
}

void pr_ring_stats(pr_ring_t *r, uint64_t *head, uint64_t *tail) {
  pthread_mutex_lock(&r->mu);
  *head = r->head;
  *tail = r->tail;
  pthread_mutex_unlock(&r->mu);
}

/* Caller holds r->mu: release the memory beyond the bytes in memory. */
static void shrink_locked(pr_ring_t *r) {
  size_t n = in_mem(r);
  if (n == 0) mem_free(r);
  else if (n < r->cap) (void)relayout(r, n); /* on failure the larger buffer simply stays */
}

void pr_ring_shrink(pr_ring_t *r) {
  pthread_mutex_lock(&r->mu);
  shrink_locked(r);
  pthread_mutex_unlock(&r->mu);
}

size_t pr_ring_trim(pr_ring_t *r, size_t keep) {
  pthread_mutex_lock(&r->mu);
  size_t n = used(r);
  if (n > keep) {
    drop_before(r, r->tail - keep);
    n = keep;
    if (r->fd >= 0 && r->head == r->spilled) file_close(r); /* nothing left in the file */
    shrink_locked(r);
  }
  pthread_mutex_unlock(&r->mu);
  return n;
}

size_t pr_ring_retained(pr_ring_t *r) {
  pthread_mutex_lock(&r->mu);
  size_t n = used(r);
  pthread_mutex_unlock(&r->mu);
  return n;
}
