/* base/ring.h — bounded byte ring with absolute offsets, one per output stream.
 *
 * Thread: shared. The engine thread appends (pr_ring_write); the host thread
 * copies out (pr_ring_read, pr_ring_take). Every function takes the ring's own
 * mutex, so a ring is the one object both threads touch; it is reference
 * counted (the execution holds one ref, each queued output marker one more,
 * each host handle of include/proctor.h, pr_output_t, one more)
 * and freed on the last unref. It holds only bytes and counters.
 *
 *   absolute offsets:   0 ........ head ............... tail
 *                        dropped  |   retained bytes   |
 *                                 ^ oldest kept        ^ next byte written
 *
 * When more than `limit` bytes are retained the head moves forward: the
 * newest bytes (where the error is) are always kept. The allocation grows
 * by doubling from a small start up to `limit`, so an idle stream costs
 * little.
 *
 * Spilling (pr_ring_set_spill): a ring given a spill context keeps only its
 * newest `memory` bytes in memory; older retained bytes go to a spill file,
 * each at its absolute offset modulo `limit` (a circular region of at most
 * `limit` bytes), written with pwrite by the writer (the engine thread, the
 * only one that changes a ring's bytes and offsets: it writes the file
 * without the mutex, so a reader never waits on the disk) and read back with
 * pread by readers under the mutex:
 *
 *   absolute offsets:   head ............ spilled ............ tail
 *                        | in the file    | in memory (buf)    |
 *                        (at offset % limit)  (<= memory bytes)
 *
 * The file is made on the first spill, unlinked at once (O_TMPFILE, else
 * mkostemp + unlink), mode 0600, close-on-exec, and closed by the last unref
 * (or by a trim that leaves no byte in it). When it cannot be made or
 * written, the ring keeps its bytes in memory up to `limit`, as without a
 * spill context, and the context records the failure (pr_spill_failure).
 *
 * Backed rings (pr_ring_backed): a record loaded from the history keeps its
 * output tail where the history file has it: [head, spilled = tail) are
 * bytes of a shared file (pr_backing_t) at a fixed file offset, read with
 * pread like a spill file's, never written; no memory part.
 */
#ifndef PR_RING_H
#define PR_RING_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef struct pr_ring pr_ring_t;
struct pr_backing;

/* pr_spill_t: where an engine's rings put their older bytes; shared by the
 * rings (each holds a reference), any thread. */
typedef struct pr_spill {
  int refs;         /* atomic */
  size_t memory;    /* bytes of each ring kept in memory */
  char *dir;        /* the spill directory (made 0700 on first use) */
  uint32_t files;   /* atomic: spill files open now (at most PR_SPILL_MAX_FILES) */
  int failed;       /* atomic: errno (> 0) of the first failure to make or use a file */
  int reported;     /* atomic: pr_spill_failure has returned `failed` */
  uint64_t nfailed; /* atomic: rings that fell back to memory after a failure */
  /* Tests only (NULL in the engine): called by a ring's writer before it
   * writes a spill file, in the same state as that write (the ring's mutex
   * not held). Set before the first ring uses the context. */
  void (*test_write)(pr_ring_t *r);
} pr_spill_t;

/* PR_SPILL_MAX_FILES: spill files one context keeps open at once; a ring
 * that outgrows its memory part past it keeps its bytes in memory. */
#define PR_SPILL_MAX_FILES 256

struct pr_ring {
  pthread_mutex_t mu;
  int refs;                /* guarded by mu */
  char *buf;               /* cap bytes; the bytes [spilled, tail) start at buf[start] and wrap */
  size_t cap;              /* allocated bytes, <= limit (except limit < PR_RING_MIN) */
  size_t start;            /* index in buf of the byte at offset spilled */
  size_t limit;            /* most bytes ever retained */
  uint64_t head;           /* absolute offset of the oldest retained byte */
  uint64_t spilled;        /* head <= spilled <= tail: [head, spilled) are in the spill file */
  uint64_t tail;           /* absolute offset one past the newest byte = bytes written */
  uint64_t delivered;      /* offset up to which the host poller has taken bytes */
  int marker;              /* 1 while an output marker for this ring sits in the event queue */
  int paused;              /* the engine stopped reading (back-pressure) until the host takes */
  pr_spill_t *spill;       /* NULL: every byte in memory */
  int fd;                  /* the spill file (or the backing's descriptor), or -1 */
  int nospill;             /* 1 after a failure or past PR_SPILL_MAX_FILES: memory up to limit */
  struct pr_backing *back; /* a loaded ring's file (pr_ring_backed), or NULL */
  uint64_t bstart, bat;    /* the byte at offset bstart is at file offset bat */
};

/* pr_backing_t: an open file whose bytes loaded rings read in place, with
 * pread (the history file as it was loaded: a compaction that renames a new
 * file over it leaves this descriptor on the old one). Counted: each backed
 * ring holds a reference; the last unref closes the file. Any thread. */
typedef struct pr_backing {
  int refs; /* atomic */
  int fd;
} pr_backing_t;

/* pr_backing_new: take `fd` (it is closed by the last unref, or now when out
 * of memory: NULL). One reference. */
pr_backing_t *pr_backing_new(int fd);

/* pr_backing_unref: drop a reference (NULL is fine). */
void pr_backing_unref(pr_backing_t *b);

/* pr_ring_backed: a ring of `limit` bytes whose retained bytes are the `n`
 * bytes at file offset `at` of `b`, at absolute offsets [total - n, total)
 * (the last `limit` of them when n > limit): nothing is in memory; reads
 * pread them (an error reading is returned as by a spill file's). For a
 * record that ended: it is never written. Takes a reference on b. Returns
 * the ring with one reference, or NULL when out of memory. */
pr_ring_t *pr_ring_backed(size_t limit, pr_backing_t *b, uint64_t at, uint64_t total, size_t n);

/* pr_spill_new: a spill context keeping `memory` bytes of each ring in memory
 * (memory >= 1) and the rest in files under `dir` (copied; NULL or "" means
 * $XDG_CACHE_HOME/proctor, else $HOME/.cache/proctor). The directory is made
 * (0700, with its missing parents) only when a ring first spills. Returns the
 * context with one reference, or NULL when out of memory or when no default
 * directory can be named (no XDG_CACHE_HOME nor HOME). Any thread. */
pr_spill_t *pr_spill_new(const char *dir, size_t memory);

/* pr_spill_unref: drop a reference; the last frees. NULL is fine. Any thread. */
void pr_spill_unref(pr_spill_t *s);

/* pr_spill_failure: the errno of the first failure to make or write a spill
 * file, returned once (0 afterwards, and when nothing failed). Any thread. */
int pr_spill_failure(pr_spill_t *s);

/* pr_ring_set_spill: give the ring a spill context (it takes a reference).
 * Call before the first write, from the thread that made the ring. A ring
 * whose limit is not above the context's memory never spills. */
void pr_ring_set_spill(pr_ring_t *r, pr_spill_t *s);

/* pr_ring_new: a ring that retains at most `limit` bytes (limit >= 1).
 * Returns the ring with one reference, or NULL when out of memory. */
pr_ring_t *pr_ring_new(size_t limit);

/* pr_ring_ref / pr_ring_unref: take or drop a reference; the last unref frees.
 * Safe from any thread. unref(NULL) is a no-op. */
void pr_ring_ref(pr_ring_t *r);
void pr_ring_unref(pr_ring_t *r);

/* pr_ring_write: append `n` bytes. Drops from the head when over the limit.
 * Returns 0, or PR_ENOMEM when growing failed (then the oldest bytes are
 * dropped to make room in the allocation that exists, so nothing fails). */
int pr_ring_write(pr_ring_t *r, const char *data, size_t n);

/* pr_ring_read: copy up to `max` bytes starting at absolute offset `from`
 * into a fresh malloc'd buffer (*out, *len; *out is NULL when *len is 0).
 * Bytes before the head are reported in *missed and skipped; `from` past the
 * tail reads nothing. *next is the offset after the last byte copied.
 * Returns 0, PR_ENOMEM, or a negative errno when the spill file could not be
 * read (then nothing is copied). */
int pr_ring_read(pr_ring_t *r, uint64_t from, size_t max, char **out, size_t *len, uint64_t *next,
                 uint64_t *missed);

/* pr_ring_take: like pr_ring_read from the `delivered` offset with no size cap,
 * then advance `delivered` and clear `marker`. Used by the host poller.
 * *from is the offset of the first byte returned. *resume is set to 1 when
 * the engine had paused reading for this ring (the flag is cleared): the
 * caller must ask the engine to read again. */
int pr_ring_take(pr_ring_t *r, char **out, size_t *len, uint64_t *from, uint64_t *missed,
                 int *resume);

/* pr_ring_take_tail: like pr_ring_take but copies at most the last `max`
 * undelivered bytes; the bytes skipped over (never copied) count as missed.
 * max == 0 means no cap. */
int pr_ring_take_tail(pr_ring_t *r, size_t max, char **out, size_t *len, uint64_t *from,
                      uint64_t *missed, int *resume);

/* pr_ring_take_head: like pr_ring_take but copies at most the first `max`
 * undelivered bytes (max > 0) and leaves the rest undelivered: *more is set
 * to 1 when bytes are left, and then `marker` stays set (the caller queues a
 * marker for them). *resume is set once no more than half the back-pressure
 * window is left undelivered (or on an error), so a paused child is not
 * restarted for one chunk at a time. */
int pr_ring_take_head(pr_ring_t *r, size_t max, char **out, size_t *len, uint64_t *from,
                      uint64_t *missed, int *resume, int *more);

/* pr_ring_mark: set the marker flag; returns 1 when it was clear (the caller
 * must queue a marker), 0 when a marker is already queued. */
int pr_ring_mark(pr_ring_t *r);

/* pr_ring_undelivered: tail - delivered (bytes written the poller has not taken). */
uint64_t pr_ring_undelivered(pr_ring_t *r);

/* pr_ring_window: the most undelivered bytes a back-pressured reader lets the
 * ring hold: its memory part while it may spill (so a paused stream's bytes
 * are handed over from memory, never read back from the file), else its
 * limit. It only grows (a ring that stops spilling keeps its bytes in memory
 * up to the limit). Any thread. */
size_t pr_ring_window(pr_ring_t *r);

/* pr_ring_stats: snapshot of head and tail. */
void pr_ring_stats(pr_ring_t *r, uint64_t *head, uint64_t *tail);

/* pr_ring_shrink: release the allocation beyond the retained bytes in memory
 * (used when an execution ends: history keeps what it needs, nothing more). */
void pr_ring_shrink(pr_ring_t *r);

/* pr_ring_trim: keep at most the newest `keep` bytes (the head moves on: the
 * bytes before it count as dropped, readers see them as missed) and release
 * the allocation beyond them. When no kept byte is left in the spill file
 * (keep <= the memory part), the file is closed. Returns the bytes retained
 * afterwards. */
size_t pr_ring_trim(pr_ring_t *r, size_t keep);

/* pr_ring_retained: tail - head (bytes the ring holds now). */
size_t pr_ring_retained(pr_ring_t *r);

#endif
