/* include/proctor_test.h — what the C tests and the fuzzer may reach beyond
 * the public API: the leaf modules they unit-test (base/) and a few hooks
 * into a running engine. Never included by the core itself or the binding.
 *
 * Thread: as each declaration says.
 */
#ifndef PR_PROCTOR_TEST_H
#define PR_PROCTOR_TEST_H

#include "base/buf.h"
#include "base/idmap.h"
#include "base/liveness.h"
#include "base/mpack.h"
#include "base/ring.h"
#include "base/sockname.h"
#include "base/utf8.h"
#include "base/wire.h" /* tests/c/test_relay.c speaks the relay's frames */
#include "include/proctor.h"

/* pr_test_call: run fn(e, arg) on the engine thread and wait until it
 * returned (the C tests and the RPC fuzz harness drive engine-thread code
 * with it). Returns 0, or PR_ECLOSED (fn did not run). Host thread. */
int pr_test_call(pr_engine_t *e, void (*fn)(pr_engine_t *e, void *arg), void *arg);

/* pr_test_hold_events / pr_test_release_events: take and give back the lock
 * of the engine's event queue, so its thread blocks at its next event (a
 * stalled engine). Host thread. */
void pr_test_hold_events(pr_engine_t *e);
void pr_test_release_events(pr_engine_t *e);

/* pr_test_events_held: the events waiting for the host's poll (*n) and the
 * bytes they hold (*bytes: events, strings, records, text, and the bytes the
 * ring of a queued output marker retains). Host thread. */
void pr_test_events_held(pr_engine_t *e, size_t *n, size_t *bytes);

/* A session of the RPC server without a socket: its outgoing bytes go to
 * sink(arg, bytes, n) synchronously. pr_test_rpc_open creates a server
 * without a socket when the engine has none. All three on the engine thread
 * (inside pr_test_call). open: NULL when out of memory; feed: 1 while the
 * connection is open, 0 once the server closed it (close it still). */
/* pr_test_hold_journal: keep the history writer thread busy until the engine
 * is closed, so every frame pushed meanwhile is still queued when close()
 * starts. 0, or -1 when the engine has no durable file, or the push error.
 * Host thread. */
int pr_test_hold_journal(pr_engine_t *e);

/* pr_test_history_gate: fn (NULL: none) runs at the start of every engine's
 * history load, on the thread that loads (the loader thread, or the host
 * inside pr_engine_new when the file had to be loaded first). Set it before
 * pr_engine_new. */
void pr_test_history_gate(void (*fn)(void));

/* pr_test_history_frame: fn (NULL: none) runs before each frame a history
 * load decodes (every slot's file), on the loading thread, with the load's
 * stop flag (set by pr_engine_close; NULL when the load has none). Set it
 * before pr_engine_new. */
void pr_test_history_frame(void (*fn)(const int *stop));

/* pr_test_history_chunk: history loads that start after it read their files
 * in steps of `bytes` (0: the default, 1 MiB). Returns the largest
 * read buffer a load held since the previous call (bytes of a file in memory
 * at once). Host thread, while no load runs. */
size_t pr_test_history_chunk(size_t bytes);

typedef struct pr_rpc_conn pr_rpc_conn_t;
pr_rpc_conn_t *pr_test_rpc_open(pr_engine_t *e, void (*sink)(void *arg, const char *p, size_t n),
                                void *arg);
int pr_test_rpc_feed(pr_rpc_conn_t *c, const char *data, size_t len);
void pr_test_rpc_close(pr_rpc_conn_t *c);

/* The worker protocol parsers with the output masker, without an engine
 * (tests/fuzz/wparse.c), for the worker fuzz target. pr_test_wparse_new: a JSON
 * lines (msgpack 0) or msgpack-rpc parser whose values are masked with
 * `secrets` ("K=V", as pr_spec_t.secrets); NULL when out of memory or when
 * the secrets are invalid. message() gets each message as the worker code
 * does (kind: a pr_worker_msg_t of engine/worker.h; ready, chunk, ok, error,
 * stray, invalid, oversize) and takes `text`. pr_test_wparse_feed: *n bytes
 * of stdout go to the parser and through the masker; returns the masked
 * bytes to keep (*n of them, valid until the next call) or NULL; p == NULL
 * ends the stream (releases what the masker held back). Any thread. */
typedef struct pr_test_wparse pr_test_wparse_t;
enum {
  PR_TEST_WM_READY = 0,
  PR_TEST_WM_CHUNK,
  PR_TEST_WM_OK,
  PR_TEST_WM_ERROR
}; /* the rest: no text */
pr_test_wparse_t *pr_test_wparse_new(int msgpack, const char *const *secrets, size_t n,
                                     void (*message)(void *arg, int kind, uint64_t rid, char *text,
                                                     size_t len),
                                     void *arg);
const char *pr_test_wparse_feed(pr_test_wparse_t *t, const char *p, size_t *n);
void pr_test_wparse_free(pr_test_wparse_t *t);

/* The execution lifecycle table (engine/lifecycle.h) through its real
 * handlers, without an engine or a shepherd (engine/lctest.c, linked into the
 * test binaries only). Rows and events are numbered as there (rows QUEUED,
 * STARTING, RUNNING, STOP_SPAWN, GRACE, KILLED, STOP_DRAIN, DRAINING, PARKED,
 * FAILING, ENDED; events cancel, force, exit, empty, timer, spawned, lost);
 * pr_test_lc_size tells how many of each. pr_test_lc_fire builds an execution
 * in `row` on a private loop, gives it event `ev` (an exit is status 3) and
 * fills *out: the cancel result (-1 for other events), the verdict before and
 * after (a pr_state_t, -1: none) and whether it ended. Returns 0, or -1 when
 * the row could not be built (or out of memory). Any thread without an engine. */
typedef struct {
  int result, before, after, ended;
} pr_test_lc_out_t;
void pr_test_lc_size(int *rows, int *events);
int pr_test_lc_fire(int row, int ev, pr_test_lc_out_t *out);

#endif /* PR_PROCTOR_TEST_H */
