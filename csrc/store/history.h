/* store/history.h — durable execution history: an append-only msgpack file.
 *
 * Thread: pr_history_open runs on the HOST thread inside pr_engine_new: it
 * takes a slot and finds the next id from the frames' heads only (no record
 * is decoded), so the host can hand out ids at once. pr_history_load reads
 * and decodes the file; it runs on the engine's LOADER thread while the
 * engine thread already starts new executions (on the host inside
 * pr_engine_new only when the quick look failed), and always before the
 * writer thread starts: frames of executions that begin meanwhile wait in
 * the journal's queue and are appended after the load. The listener runs on the ENGINE
 * thread and only packs frames and pushes jobs; the file itself is written
 * by the journal's WRITER thread. pr_history_free runs on the host after
 * both threads ended.
 *
 * File layout (every value is msgpack):
 *
 *   "proctor-history/1"                       header (a str)
 *   [fnv1a32(payload), bin payload] ...       frames; payload is a map with
 *       k = "s"  an execution was queued      (id, cmd, cwd, label, owner, env keys, ...)
 *       k = "e"  it ended                     (+ state, reason, exit, signal, times,
 *                                              out = [[stream, total bytes, tail], ...])
 *       k = "d"  ids were deleted             (ids = [...])
 *       k = "n"  the next id to hand out      (written first by a compaction)
 *
 * The record's keys in a frame come from one key table (hkey in history.c):
 * files written by every release load through it.
 *
 * Slots: several editors share one history. Each engine takes the first
 * free slot k (0 .. PR_HISTORY_SLOTS-1), the one whose "<slot file>.lock" it
 * can flock: slot 0's file is the configured path (files of every earlier
 * release are slot 0's), slot k's is "<path>.k". An engine writes only its
 * own slot file, so no two writers ever share a file; the ids it hands out
 * are k * PR_HISTORY_SLOT_IDS + n (slot 0: 1, 2, ...; slot 1: 1000000001,
 * ...), so ids never collide. At load the other slots' files are read (never
 * written, never repaired): their finished records are merged into the list
 * (a start with no end is shown only when its editor is gone: host_lost; a
 * live editor's running jobs are its own). Deleting another editor's record
 * writes a tombstone ("d") in our own file; every engine applies every
 * file's tombstones at load, drops the record from its own file, and a
 * tombstone is kept (compaction copies it) until the file it points into no
 * longer holds the record.
 *
 * Load: each file is read a chunk at a time (store/frame.h: pr_frames_t,
 * PR_FRAMES_CHUNK), never whole. An "s" with no "e" is an execution whose host died: it comes back
 * failed/host_lost (and an "e" saying so is appended). Damage in the middle
 * (a wrong checksum, or bytes that are no frame) is skipped up to the next
 * whole frame whose checksum matches; a damaged tail with no good frame
 * after it is cut off. Either way the file as it was is first copied to
 * "<file>.damaged-N", one warning is recorded, and the damaged stretches are
 * compacted away (no copy possible: the file is left as it is, the next load
 * skips the same damage). Another slot's file is only read: its damage is
 * skipped the same way and left for its owner to repair. Retention
 * (history_limit, history_age_ms) is applied to the merged records, newest
 * ended kept; forgotten records of our slot are dropped by a compaction (a
 * rewrite to "<file>.tmp", fdatasync, rename). When every slot is taken the
 * engine runs without history, with a warning.
 */
#ifndef PR_HISTORY_H
#define PR_HISTORY_H

#include "base/ring.h"
#include "engine/events.h"
#include "include/proctor.h"
#include "store/journal.h"

#define PR_HISTORY_DEFAULT_OUTPUT (64u << 10)
#define PR_HISTORY_SLOTS 16               /* editors sharing one history at once */
#define PR_HISTORY_SLOT_IDS 1000000000ull /* ids of one slot: k * this + 1 ... */

typedef struct pr_history pr_history_t;

typedef struct {
  size_t tail_bytes;   /* output kept per stream; 0 = PR_HISTORY_DEFAULT_OUTPUT */
  size_t output_limit; /* ring size of a loaded stream */
  uint32_t limit;      /* history_limit: records kept at load (0 = all) */
  uint64_t age_ms;     /* history_age_ms: older records are dropped at load (0 = none) */
} pr_history_opts_t;

/* A record loaded from the file, with its output: rings[i] for each stream it
 * had (NULL otherwise), starting at the offsets the writer saw. */
typedef struct {
  pr_record_t *rec;
  pr_ring_t *rings[PR_NSTREAM];
} pr_loaded_t;

/* pr_history_open: take the first free slot of the history at `path` and
 * open its file. Returns 0 with *out (NULL when no slot can be used: every
 * slot locked, unreadable — a warning says so) and *next_id, the next id to
 * hand out in our slot's range, found by reading each frame's head only; 0
 * when the file is not laid out as this release writes it (damage, an older
 * writer): then pr_history_load must run before any id is handed out.
 * Returns PR_ENOMEM (nothing to free). Host thread, before the engine and
 * writer threads start. */
int pr_history_open(pr_journal_t *j, const char *path, const pr_history_opts_t *o,
                    pr_history_t **out, uint64_t *next_id);

/* pr_history_load: read and decode h's file, repair it, merge the other
 * slots' records. Returns 0 with the records kept after retention in id
 * order (*loaded, *nloaded: take what you keep, then pr_history_loaded_free)
 * and the next id the full file allows (>= what pr_history_open found); when
 * the file cannot be used after all, 0 with no record and h left to write
 * nothing (a warning says why). Returns PR_ECLOSED, nothing loaded, when
 * `stop` (NULL: never; read between reads and between frames) became
 * nonzero: the file is left as it was and from then on only appended to,
 * never compacted. Returns PR_ENOMEM (nothing to free). Any one thread,
 * before the writer thread starts; the listener may already be in the
 * engine's list (it only packs frames and queues them for the writer).
 * Warnings and jobs go to the journal. */
int pr_history_load(pr_history_t *h, pr_loaded_t **loaded, size_t *nloaded, uint64_t *next_id,
                    const int *stop);

/* pr_history_test_frame: tests only: fn (NULL: none) is called before each
 * frame a load decodes, on the loading thread, with the load's stop flag
 * (NULL when it has none). Set it before the engine is made. */
void pr_history_test_frame(void (*fn)(const int *stop));

/* pr_history_test_chunk: tests only: loads that start after it read their
 * files in steps of `bytes` (0: PR_FRAMES_CHUNK, store/frame.h). Returns the
 * largest read buffer a load held since the previous call. Any thread,
 * while no load runs. */
size_t pr_history_test_chunk(size_t bytes);

/* pr_history_loaded_free: free n loaded records (entries whose rec was set
 * to NULL and rings to NULL were taken) and the array. */
void pr_history_loaded_free(pr_loaded_t *v, size_t n);

/* pr_history_listener: the history's listener (state: start and end frames;
 * removed: a tombstone; purged: a compaction), to add to the engine's list. */
pr_listener_t *pr_history_listener(pr_history_t *h);

/* pr_history_free: close the file and free h (NULL is fine). Host thread,
 * after the writer thread ended. */
void pr_history_free(pr_history_t *h);

#endif
