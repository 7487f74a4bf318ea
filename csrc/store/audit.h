/* store/audit.h — the audit log: one JSON line per lifecycle event; a
 * listener of the engine.
 *
 * Thread: pr_audit_open runs on the HOST thread inside pr_engine_new (before
 * the engine and writer threads exist); the listener on the ENGINE thread
 * (it builds the line and pushes a job); the line is appended by the
 * journal's WRITER thread; pr_audit_free on the host after both ended.
 *
 * Line fields: ts (ms since the epoch), event ("queued", "starting",
 * "running" or the terminal state), prev, host_pid, uid, then the record's
 * (include/proctor.h PR_RECORD_FIELDS, in its order) id, session, label,
 * owner, cwd, cmd (argv list or shell string), pid, env_keys (keys only),
 * and at the end: reason, error, exit_code | signal, duration_ms. Secret
 * values never reach it (they are only in the child's environment, and the
 * line is scrubbed with the execution's masker before it is queued).
 *
 * The file is opened with O_APPEND and never shortened by purge or delete.
 * When a line would take it past audit_max_bytes it is rotated: file.K is
 * removed, file.(i) becomes file.(i+1), file becomes file.1 — audit_keep
 * rotated files are kept.
 */
#ifndef PR_AUDIT_H
#define PR_AUDIT_H

#include "engine/events.h"
#include "store/journal.h"

#define PR_AUDIT_DEFAULT_MAX (10u << 20)
#define PR_AUDIT_DEFAULT_KEEP 3

typedef struct pr_audit pr_audit_t;

/* pr_audit_open: open `path` for appending. Returns 0 with *out (NULL when
 * the file cannot be opened: a warning says so), or PR_ENOMEM. max_bytes /
 * keep: 0 = the defaults. Host thread; warnings and jobs go to `j`. */
int pr_audit_open(pr_journal_t *j, const char *path, uint64_t max_bytes, uint32_t keep,
                  pr_audit_t **out);

/* pr_audit_listener: the audit log's listener (state), to add to the engine's list. */
pr_listener_t *pr_audit_listener(pr_audit_t *a);

/* pr_audit_free: close and free `a` (NULL is fine). Host thread, writer ended. */
void pr_audit_free(pr_audit_t *a);

#endif
