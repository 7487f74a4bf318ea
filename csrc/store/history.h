/* history.h — durable execution history: an append-only msgpack file.
 *
 * Thread: pr_history_open runs on the HOST thread inside pr_engine_new,
 * before the engine and writer threads exist (it loads the file into the
 * registry). pr_history_on_state/forget/compact run on the ENGINE thread and
 * only build and push jobs; the file itself is written by the journal's
 * WRITER thread. pr_history_free runs on the host after both threads ended.
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
 * Load: an "s" with no "e" is an execution whose host died: it comes back
 * failed/host_lost (and an "e" saying so is appended). A frame cut short or
 * unparsable ends the load there: the file is truncated to the last good
 * frame and one warning is recorded; a frame whose checksum is wrong is
 * skipped with a warning. Retention (history_limit, history_age_ms) is
 * applied; forgotten records are dropped by a compaction (a rewrite to
 * "<file>.tmp", fdatasync, rename). A "<file>.lock" flock keeps a second
 * engine away from the same file (it runs without history, with a warning).
 */
#ifndef PR_HISTORY_H
#define PR_HISTORY_H

#include "store/journal.h"

#define PR_HISTORY_DEFAULT_OUTPUT (64u << 10)

/* pr_history_open: lock and load `path` into the registry of j->eng, set its
 * next id, and set j->history. A file that cannot be used (locked, not a
 * history file, unreadable) leaves j->history NULL and records a warning.
 * Returns 0 or PR_ENOMEM. Host thread, before the engine thread starts. */
int pr_history_open(pr_journal_t *j, const char *path);

/* pr_history_free: close the file and free j->history. Host thread, after
 * the writer thread ended. */
void pr_history_free(pr_journal_t *j);

/* pr_history_on_state: append a start entry when x is queued (prev ==
 * PR_NSTATE) and its record with output tails when it ends. Engine thread. */
void pr_history_on_state(pr_journal_t *j, pr_exec_t *x, pr_state_t prev);

/* pr_history_forget: the record `id` was removed; remember that in the file.
 * Engine thread. */
void pr_history_forget(pr_journal_t *j, uint64_t id);

/* pr_history_compact: rewrite the file with only what is still remembered.
 * Engine thread (the rewrite runs on the writer thread). */
void pr_history_compact(pr_journal_t *j);

#endif
