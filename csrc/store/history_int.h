/* store/history_int.h — what the two halves of the history share: the
 * history object, its index of frames, the on-disk key table and the writer
 * helpers load needs. Private to csrc/store/history.c (packing, listener,
 * writer) and csrc/store/history_load.c (load, slots, merging the other
 * editors' files).
 *
 * Thread: as history.h says: load on one thread (the engine's loader, or the
 * host inside pr_engine_new) before the writer thread starts, everything else
 * on the writer thread (packing on the engine thread).
 */
#ifndef PR_HISTORY_INT_H
#define PR_HISTORY_INT_H

#include <stdint.h>

#include "store/history.h"

#define PR_HIST_HEADER "\xb1proctor-history/1"
#define PR_HIST_HEADER_LEN 18
#define PR_HIST_COMPACT_SLACK (1u << 20) /* dead bytes that make the writer compact on its own */

/* One frame of the file as the writer knows it. */
typedef struct {
  uint64_t id, off;
  uint32_t len;
  char kind; /* 's', 'e', 'd' (a tombstone), 'n', 'x' (damage) */
  char dead; /* superseded or forgotten: dropped by the next compaction */
} pr_hentry_t;

struct pr_history {
  pr_journal_t *j; /* the writer thread, and where warnings go */
  pr_listener_t listener;
  char *path, *tmp; /* this engine's slot file (history.h: slots) and its compaction file */
  char *base;       /* the configured path (slot 0's file): where the other slots are */
  int fd, lockfd;
  unsigned slot; /* 0 .. PR_HISTORY_SLOTS-1: ids slot*PR_HISTORY_SLOT_IDS + n are ours */
  pr_history_opts_t o;
  /* writer thread (host thread during load) */
  uint64_t size;   /* bytes in the file */
  uint64_t dead;   /* bytes of dead frames */
  uint64_t max_id; /* largest id of our slot ever written */
  pr_hentry_t *ent;
  size_t nent, cap;
  int broken;      /* a write failed, or the load gave up: warned once, nothing more is written */
  int partial;     /* the load was stopped (the engine closed): the index misses the frames
                    * not read, so the file is only appended to, never compacted */
  const int *stop; /* during pr_history_load: read between frames; nonzero stops it */
  /* during the parse of one file: the reader's bytes of the frame being
   * decoded (fbuf[0] is the file's byte fbase), and the same file open for
   * the rings of its records' tails, which stay there (NULL: copy them) */
  const char *fbuf;
  uint64_t fbase;
  pr_backing_t *bk;
};

/* The record's fields as the file names them (NULL: not kept). */
extern const char *const pr_hist_key[];

/* pr_hist_own: 1 when `id` is one of the ids of h's slot. Any thread. */
int pr_hist_own(const pr_history_t *h, uint64_t id);

/* pr_hist_add_entry: index a frame (kind, id, where); raises max_id for an id
 * of our slot. Returns 0 or PR_ENOMEM. Host thread at load, then writer. */
int pr_hist_add_entry(pr_history_t *h, uint64_t id, uint64_t off, uint32_t len, char kind);

/* pr_hist_kill: mark the live entries of `id` of kind `kind` (0: any) dead.
 * Host thread at load, then writer. */
void pr_hist_kill(pr_history_t *h, uint64_t id, char kind);

/* pr_hist_write_all: write n bytes at p to fd (EINTR retried). Returns 0 or a
 * negative errno. Any thread. */
int pr_hist_write_all(int fd, const char *p, size_t n);

/* pr_hist_record_frame: queue a start ('s') or end ('e') frame of record r
 * with its output tails from rings. Engine thread (or host before it starts). */
void pr_hist_record_frame(pr_history_t *h, const pr_record_t *r, pr_ring_t *const *rings,
                          char kind);

/* pr_hist_listen: set h's listener (state, removed, purged). Host, at load. */
void pr_hist_listen(pr_history_t *h);

/* pr_hist_compact_soon: queue a compaction for the writer thread. */
void pr_hist_compact_soon(pr_history_t *h);

#endif
