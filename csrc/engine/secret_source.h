/* engine/secret_source.h — where the secrets of an execution (engine/vault.h)
 * are read from their stores: the desktop keyring (engine/keyring.c) or a
 * command the shepherd runs. Above the execution: exec.c asks for the reads
 * through its context's reader (pr_exec_ctx_t.source), never by name.
 *
 * Thread: engine.
 *
 *   pr_exec_begin (starting) ─► ctx->source->read(x): every source at once
 *        store:   a keyring lookup thread ─► uv_async ─► the value
 *        command: a hidden execution (job id with PR_SOURCE_JOB set, never in
 *                 the registry, no listeners) ─► its end: its stdout is the value
 *   ─► all read, one failed, or stopped ─► pr_exec_vault_done(x, why) (exec.c)
 *
 * Bounds: the reads of one execution share one timer (secret_timeout_ms,
 * PR_DEFAULT_SECRET_TIMEOUT): when it fires, the first source still being
 * read is named in the reason and every read is stopped (a command's whole
 * job is killed). The execution's own timeout_ms covers them too (exec.c).
 * A quiet stop (the execution ends now) ends every read at once and wipes
 * the values.
 */
#ifndef PR_SECRET_SOURCE_H
#define PR_SECRET_SOURCE_H

#include <stdint.h>

#include "base/idmap.h"
#include "engine/exec.h"
#include "engine/vault.h"

/* Shepherd job ids of command reads: never an execution's id. */
#define PR_SOURCE_JOB ((uint64_t)1 << 62)

/* A secret source's bound when the engine's options give none (ms). */
#define PR_DEFAULT_SECRET_TIMEOUT 10000

/* Per engine: the reader its executions' context points to, and where
 * command reads run (engine/control.h embeds it). */
typedef struct pr_source {
  pr_secret_reader_t reader; /* first member: &source->reader is the source */
  pr_exec_ctx_t xc;          /* of the hidden executions: no listeners, no reader */
  pr_listeners_t none;
  pr_idmap_t jobs; /* job id -> hidden execution */
  uint64_t next;
  uint32_t timeout_ms; /* secret_timeout_ms: bound of the reads of one execution */
} pr_source_t;

/* pr_source_init: command reads on the loop and shepherd link of `main`;
 * the reads of one execution end within timeout_ms (0: the default,
 * PR_DEFAULT_SECRET_TIMEOUT). &e->reader is what main's context points to.
 * Engine thread's loop, before it runs.
 * pr_source_destroy: free the map (after the loop ended). */
void pr_source_init(pr_source_t *e, const pr_exec_ctx_t *main, uint32_t timeout_ms);
void pr_source_destroy(pr_source_t *e);

/* pr_source_job: the hidden execution of shepherd job `job`, or NULL. */
pr_exec_t *pr_source_job(pr_source_t *e, uint64_t job);

#endif
