/* store/frame.c — the history file's frames on disk (see frame.h): the
 * checksum, the frame reader, and the file reader that holds a bounded
 * window of a file (a chunk, or one frame bigger than a chunk), never the
 * whole file.
 *
 *   file  [hdr|frame|frame|fr·ame|frame ....... big frame ....... |frame]
 *   buf          [·····chunk·····]      a frame cut by the chunk's end: its
 *   buf                 [fr·ame····chunk····]  bytes move to buf[0], the rest is read
 *   buf                              [········ the big frame ········]
 *
 * Thread: any (pure functions over bytes; a reader is one thread's).
 */
#include "store/frame.h"

#include <errno.h>
#include <string.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "include/proctor.h" /* PR_ENOMEM, PR_ECLOSED */

/* FNV-1a over n more bytes, from the sum so far h. */
static uint32_t fnv(uint32_t h, const char *p, size_t n) {
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 16777619u;
  return h;
}

uint32_t pr_frame_sum(const char *p, size_t n) { return fnv(2166136261u, p, n); }

/* Read a big-endian unsigned of `n` bytes. */
static uint64_t be(const unsigned char *u, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = v << 8 | u[i];
  return v;
}

/* The head of the frame at u[0..n): *hl its bytes, *bl the payload's
 * length, *sum the checksum. Returns PR_FRAME_OK, PR_FRAME_SHORT (the bytes
 * end inside the head) or PR_FRAME_BAD. */
static int head(const unsigned char *u, size_t n, size_t *hl, uint64_t *bl, uint64_t *sum) {
  size_t i = 2;
  if (n < 2) return n && u[0] != 0x92 ? PR_FRAME_BAD : PR_FRAME_SHORT;
  if (u[0] != 0x92) return PR_FRAME_BAD;
  int w = u[1] <= 0x7f   ? 0
          : u[1] == 0xcc ? 1
          : u[1] == 0xcd ? 2
          : u[1] == 0xce ? 4
          : u[1] == 0xcf ? 8
                         : -1;
  if (w < 0) return PR_FRAME_BAD;
  if (n < i + (size_t)w + 1) return PR_FRAME_SHORT;
  *sum = w ? be(u + i, w) : u[1];
  i += (size_t)w;
  int lw = u[i] == 0xc4 ? 1 : u[i] == 0xc5 ? 2 : u[i] == 0xc6 ? 4 : -1;
  if (lw < 0 || *sum > UINT32_MAX) return PR_FRAME_BAD;
  i++;
  if (n < i + (size_t)lw) return PR_FRAME_SHORT;
  *bl = be(u + i, lw);
  *hl = i + (size_t)lw;
  return PR_FRAME_OK;
}

/* The longest head: 0x92, a uint64 checksum (9 bytes), a bin32 length (5). */
#define HEAD_MAX 15

int pr_frame_at(const char *p, size_t len, size_t off, const char **body, size_t *blen,
                size_t *end) {
  const unsigned char *u = (const unsigned char *)p + off;
  size_t n = len - off, i;
  uint64_t sum, bl;
  int rc = head(u, n, &i, &bl, &sum);
  if (rc != PR_FRAME_OK) return rc;
  if (bl > n - i) return PR_FRAME_SHORT;
  *body = p + off + i;
  *blen = (size_t)bl;
  *end = off + i + (size_t)bl;
  return pr_frame_sum(*body, *blen) == (uint32_t)sum ? PR_FRAME_OK : PR_FRAME_BADSUM;
}

/* One pread of a history file reads at most this much: one read of a whole
 * 15 MB file into fresh memory kept a 2-core machine's other threads (the
 * editor's main thread) off the CPU for 25 ms at a time. */
#define READ_STEP (256u << 10)

/* Tests (pr_frames_test_chunk): the step of readers opened with chunk 0
 * (0: PR_FRAMES_CHUNK), and the largest buffer a reader held. */
static size_t test_chunk, peak_bytes;

size_t pr_frames_test_chunk(size_t bytes) {
  __atomic_store_n(&test_chunk, bytes, __ATOMIC_SEQ_CST);
  return __atomic_exchange_n(&peak_bytes, 0, __ATOMIC_SEQ_CST);
}

int pr_frames_open(pr_frames_t *r, int fd, size_t chunk, const int *stop) {
  struct stat st;
  memset(r, 0, sizeof(*r));
  r->fd = fd;
  if (chunk == 0) chunk = __atomic_load_n(&test_chunk, __ATOMIC_SEQ_CST);
  r->chunk = chunk ? chunk : PR_FRAMES_CHUNK;
  r->stop = stop;
  return fstat(fd, &st) != 0 ? -errno : (r->size = (uint64_t)st.st_size, 0);
}

const char *pr_frames_bytes(pr_frames_t *r, uint64_t off, size_t want, size_t *have) {
  *have = 0;
  if (r->err) return NULL;
  if (off >= r->size) return ""; /* the file ends before it (it may have shrunk meanwhile) */
  if (want > r->size - off) want = (size_t)(r->size - off);
  if (off < r->base || off + want > r->base + r->n) { /* refill from off */
    size_t keep = off >= r->base && off < r->base + r->n ? (size_t)(r->base + r->n - off) : 0;
    size_t cap = want > r->chunk ? want : r->chunk;
    if (cap > r->size - off) cap = (size_t)(r->size - off);
    if (cap < HEAD_MAX) cap = HEAD_MAX;
    if (keep > cap) keep = cap;
    if (keep) memmove(r->buf, r->buf + (off - r->base), keep);
    if (cap != r->cap) { /* a frame bigger than a chunk grows it; the next chunk shrinks it */
      char *b = realloc(r->buf, cap);
      if (b == NULL) {
        r->err = PR_ENOMEM;
        return NULL;
      }
      r->buf = b;
      r->cap = cap;
      if (cap > r->peak) r->peak = cap;
    }
    r->base = off;
    r->n = keep;
    while (r->n < cap && r->base + r->n < r->size) {
      if (r->stop && __atomic_load_n(r->stop, __ATOMIC_ACQUIRE)) {
        r->err = PR_ECLOSED;
        return NULL;
      }
      size_t step = cap - r->n;
      if (step > READ_STEP) step = READ_STEP;
      ssize_t k = pread(r->fd, r->buf + r->n, step, (off_t)(r->base + r->n));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) { /* the file ends here after all: what was read is the file */
        r->size = r->base + r->n;
        break;
      }
      r->n += (size_t)k;
    }
  }
  *have = (size_t)(r->base + r->n - off);
  return r->buf + (off - r->base);
}

/* The checksum of the n bytes at `off`, read a chunk at a time (the buffer
 * does not grow). Of fewer bytes when the file ended first or the reader
 * stopped (r->err): the caller looks. */
static uint32_t sum_of(pr_frames_t *r, uint64_t off, uint64_t n) {
  uint32_t h = 2166136261u;
  for (size_t have; n && !r->err; off += have, n -= have) {
    const char *p = pr_frames_bytes(r, off, n < r->chunk ? (size_t)n : r->chunk, &have);
    if (have > n) have = (size_t)n;
    if (p == NULL || have == 0) break;
    h = fnv(h, p, have);
  }
  return h;
}

int pr_frames_at(pr_frames_t *r, uint64_t off, const char **body, size_t *blen, uint64_t *end) {
  size_t have, hl, e = 0;
  uint64_t bl, sum;
  const char *p = pr_frames_bytes(r, off, HEAD_MAX, &have);
  if (p == NULL) return -1;
  if (head((const unsigned char *)p, have, &hl, &bl, &sum) == PR_FRAME_OK && bl > have - hl) {
    if (bl > r->size - off - hl) return PR_FRAME_SHORT; /* more than the file has: never read */
    /* bigger than a chunk: held whole only once its checksum is known good (a
     * damaged length that claims the rest of the file never grows the buffer) */
    if (hl + bl > r->chunk && sum_of(r, off + hl, bl) != (uint32_t)sum) {
      *body = NULL;
      *blen = (size_t)bl;
      *end = off + hl + bl;
      return r->err ? -1 : bl > r->size - off - hl ? PR_FRAME_SHORT : PR_FRAME_BADSUM;
    }
    if ((p = pr_frames_bytes(r, off, hl + (size_t)bl, &have)) == NULL) return -1;
  }
  int rc = pr_frame_at(p, have, 0, body, blen, &e);
  *end = off + e;
  return rc;
}

void pr_frames_close(pr_frames_t *r) {
  size_t p = __atomic_load_n(&peak_bytes, __ATOMIC_RELAXED); /* readers may run at once */
  while (r->peak > p && !__atomic_compare_exchange_n(&peak_bytes, &p, r->peak, 0, __ATOMIC_SEQ_CST,
                                                     __ATOMIC_RELAXED)) {
  }
  free(r->buf);
  r->buf = NULL;
  r->n = r->cap = 0;
}
