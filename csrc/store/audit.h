/* audit.h — the audit log: one JSON line per lifecycle event.
 *
 * Thread: pr_audit_open runs on the HOST thread inside pr_engine_new (before
 * the engine and writer threads exist); pr_audit_on_state on the ENGINE
 * thread (it builds the line and pushes a job); the line is appended by the
 * journal's WRITER thread; pr_audit_free on the host after both ended.
 *
 * Line fields: ts (ms since the epoch), event ("queued", "starting",
 * "running" or the terminal state), prev, id, owner, session, host_pid, uid,
 * label, cmd (argv list or shell string), cwd, env_keys (keys only), pid,
 * and at the end: reason, exit_code | signal, error, duration_ms. Secret
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

#include "store/journal.h"

#define PR_AUDIT_DEFAULT_MAX (10u << 20)
#define PR_AUDIT_DEFAULT_KEEP 3

/* pr_audit_open: open `path` for appending and set j->audit. A file that
 * cannot be opened leaves j->audit NULL with a warning. Returns 0 or
 * PR_ENOMEM. Host thread. */
int pr_audit_open(pr_journal_t *j, const char *path);

/* pr_audit_free: close and free j->audit. Host thread, writer ended. */
void pr_audit_free(pr_journal_t *j);

/* pr_audit_on_state: queue the line for x entering its state (prev ==
 * PR_NSTATE: it was just queued). Engine thread. */
void pr_audit_on_state(pr_journal_t *j, pr_exec_t *x, pr_state_t prev);

#endif
