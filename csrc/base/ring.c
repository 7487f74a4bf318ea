/* base/ring.c — bounded byte ring with absolute offsets. See ring.h.
 *
 * Thread: shared, every entry point holds r->mu.
 */
#include "base/ring.h"

#include <stdlib.h>
#include <string.h>

#include "include/proctor.h"

#define PR_RING_MIN 4096

pr_ring_t *pr_ring_new(size_t limit) {
  pr_ring_t *r = calloc(1, sizeof(*r));
  if (r == NULL) return NULL;
  if (limit == 0) limit = 1;
  r->limit = limit;
  r->refs = 1;
  pthread_mutex_init(&r->mu, NULL);
  return r;
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
  pthread_mutex_destroy(&r->mu);
  free(r->buf);
  free(r);
}

static size_t used(const pr_ring_t *r) { return (size_t)(r->tail - r->head); }

/* Copy `n` retained bytes starting `skip` bytes after the head into dst. */
static void copy_out(const pr_ring_t *r, size_t skip, char *dst, size_t n) {
  size_t pos = (r->start + skip) % (r->cap ? r->cap : 1);
  size_t first = r->cap - pos;
  if (first > n) first = n;
  memcpy(dst, r->buf + pos, first);
  if (n > first) memcpy(dst + first, r->buf, n - first);
}

/* Re-layout into a linear allocation of `ncap` bytes (ncap >= used). */
static int relayout(pr_ring_t *r, size_t ncap) {
  char *nb = malloc(ncap ? ncap : 1);
  if (nb == NULL) return PR_ENOMEM;
  size_t n = used(r);
  if (n) copy_out(r, 0, nb, n);
  free(r->buf);
  r->buf = nb;
  r->cap = ncap;
  r->start = 0;
  return 0;
}

static void drop_head(pr_ring_t *r, size_t n) {
  r->head += n;
  r->start = r->cap ? (r->start + n) % r->cap : 0;
}

int pr_ring_write(pr_ring_t *r, const char *data, size_t n) {
  int rc = 0;
  if (n == 0) return 0;
  pthread_mutex_lock(&r->mu);
  if (n > r->limit) { /* only the last `limit` bytes can ever be kept */
    size_t skip = n - r->limit;
    drop_head(r, used(r)); /* everything retained goes */
    r->head += skip;
    r->tail += skip;
    data += skip;
    n = r->limit;
  }
  size_t want = used(r) + n;
  if (want > r->cap && r->cap < r->limit) {
    size_t ncap = r->cap ? r->cap : PR_RING_MIN;
    while (ncap < want && ncap < r->limit) ncap *= 2;
    if (ncap > r->limit) ncap = r->limit;
    if (relayout(r, ncap) != 0) rc = PR_ENOMEM; /* keep going with what we have */
  }
  if (r->cap == 0) { /* nothing allocated and allocation failed: count as dropped */
    r->head += n;
    r->tail += n;
    pthread_mutex_unlock(&r->mu);
    return rc;
  }
  if (n > r->cap) { /* allocation smaller than the write after a failed grow */
    size_t skip = n - r->cap;
    drop_head(r, used(r));
    r->head += skip;
    r->tail += skip;
    data += skip;
    n = r->cap;
  }
  if (used(r) + n > r->cap) drop_head(r, used(r) + n - r->cap);
  size_t pos = (r->start + used(r)) % r->cap;
  size_t first = r->cap - pos;
  if (first > n) first = n;
  memcpy(r->buf + pos, data, first);
  if (n > first) memcpy(r->buf, data + first, n - first);
  r->tail += n;
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
    copy_out(r, (size_t)(from - r->head), b, n);
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

void pr_ring_stats(pr_ring_t *r, uint64_t *head, uint64_t *tail) {
  pthread_mutex_lock(&r->mu);
  *head = r->head;
  *tail = r->tail;
  pthread_mutex_unlock(&r->mu);
}

void pr_ring_shrink(pr_ring_t *r) {
  pthread_mutex_lock(&r->mu);
  size_t n = used(r);
  if (n == 0) {
    free(r->buf);
    r->buf = NULL;
    r->cap = 0;
    r->start = 0;
  } else if (n < r->cap) {
    (void)relayout(r, n); /* on failure the larger buffer simply stays */
  }
  pthread_mutex_unlock(&r->mu);
}

size_t pr_ring_trim(pr_ring_t *r, size_t keep) {
  pthread_mutex_lock(&r->mu);
  size_t n = used(r);
  if (n > keep) {
    size_t d = n - keep;
    r->head += d;
    r->start = r->cap ? (r->start + d) % r->cap : 0;
    n = keep;
    if (n == 0) {
      free(r->buf);
      r->buf = NULL;
      r->cap = 0;
      r->start = 0;
    } else {
      (void)relayout(r, n); /* on failure the larger buffer simply stays */
    }
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
