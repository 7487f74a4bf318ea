/* engine/lctest.c — the lifecycle table's handlers without an engine or a
 * shepherd, for the C test that walks every cell (tests/c/test_engine.c,
 * test_lifecycle_table). Linked into the test binaries only, never into the
 * core.
 *
 * Thread: the caller's (no engine runs; a private loop).
 *
 * An execution is built directly in a row of engine/lifecycle.h (its fields
 * set as the handlers would leave them), on a shepherd link that is not
 * connected (every request to it fails quietly), then one event goes through
 * its real handler (pr_exec_cancel, pr_exec_on_exited, ..., pr_exec_on_timer).
 */
#include <stdlib.h>
#include <string.h>

#include "engine/exec.h"
#include "engine/shepherd_link.h"
#include "include/proctor_test.h"

static int park_end(pr_exec_t *x) { return 0; } /* a parked worker that may end */
static const pr_exec_ops_t parked_ops = {.end = park_end};

static void ended(pr_exec_ctx_t *c, pr_exec_t *x, int was_active) {}

/* Put x in `row`; 0, or -1 for a row that does not exist. */
static int place(pr_exec_t *x, int row) {
  x->state = PR_RUNNING;
  switch (row) {
  case PR_ROW_QUEUED: x->state = PR_QUEUED; break;
  case PR_ROW_STARTING:
    x->state = PR_STARTING;
    x->phase = PR_PHASE_TIMEOUT;
    break;
  case PR_ROW_RUNNING: x->phase = PR_PHASE_TIMEOUT; break;
  case PR_ROW_STOP_SPAWN:
    x->state = PR_STARTING;
    x->verdict = PR_CANCELED;
    x->phase = PR_PHASE_TIMEOUT;
    break;
  case PR_ROW_GRACE:
    x->verdict = PR_CANCELED;
    x->stop = PR_STOP_TERM;
    x->phase = PR_PHASE_GRACE;
    break;
  case PR_ROW_KILLED:
    x->verdict = PR_TIMED_OUT;
    x->stop = PR_STOP_KILL;
    break;
  case PR_ROW_STOP_DRAIN:
    x->verdict = PR_CANCELED;
    x->stop = PR_STOP_KILL;
    x->exited = 1;
    x->phase = PR_PHASE_DRAIN;
    break;
  case PR_ROW_DRAINING:
    x->verdict = PR_FAILED;
    x->exit_code = 3;
    x->exited = 1;
    x->phase = PR_PHASE_DRAIN;
    break;
  case PR_ROW_PARKED:
    x->ops = &parked_ops;
    x->exited = 1;
    break;
  case PR_ROW_FAILING: /* its descriptors never came: killed, its exit awaited */
    x->verdict = PR_FAILED;
    x->stop = PR_STOP_KILL;
    x->phase = PR_PHASE_TIMEOUT;
    break;
  case PR_ROW_ENDED:
    x->state = PR_COMPLETED;
    x->verdict = PR_COMPLETED;
    x->finished = 1;
    break;
  default: return -1;
  }
  return 0;
}

static void fire(pr_exec_t *x, int ev, int *result) {
  pr_wire_hdr_t h;
  memset(&h, 0, sizeof(h));
  *result = -1;
  switch (ev) {
  case PR_LC_CANCEL: *result = (int)pr_exec_cancel(x, 0, "canceled"); break;
  case PR_LC_FORCE: *result = (int)pr_exec_cancel(x, 1, "canceled"); break;
  case PR_LC_EXIT:
    h.b = 3; /* exit status 3 */
    pr_exec_on_exited(x, &h);
    break;
  case PR_LC_EMPTY: pr_exec_on_empty(x); break;
  case PR_LC_TIMER: pr_exec_on_timer(&x->timer); break;
  case PR_LC_SPAWNED: pr_exec_on_spawned(x, &h, NULL, 0); break;
  case PR_LC_LOST: pr_exec_on_supervisor_lost(x); break;
  }
}

int pr_test_lc_fire(int row, int ev, pr_test_lc_out_t *out) {
  static pr_exec_ctx_t c; /* its read buffer is large: not on the stack */
  pr_sup_t sup;
  pr_listeners_t none;
  uv_loop_t loop;
  memset(out, 0, sizeof(*out));
  if (row < 0 || row >= PR_NROW || ev < 0 || ev >= PR_NLC_EVENT) return -1;
  if (uv_loop_init(&loop) != 0) return -1;
  memset(&sup, 0, sizeof(sup));
  sup.fd = -1; /* not connected: requests fail, nothing is sent */
  sup.lost_reason = "supervisor_lost";
  pr_listeners_init(&none);
  memset(&c, 0, sizeof(c));
  c.loop = &loop;
  c.sup = &sup;
  c.ls = &none;
  c.drain_ms = 10;
  c.ended = ended;
  pr_exec_t *x = pr_exec_alloc();
  int rc = -1;
  if (x == NULL) goto done;
  pr_exec_attach(x, &c);
  x->id = 1;
  x->grace_ms = 10;
  if (place(x, row) != 0 || (int)pr_exec_row(x) != row) goto out;
  out->before = x->verdict;
  fire(x, ev, &out->result);
  out->after = x->verdict;
  out->ended = x->finished;
  rc = 0;
out:
  if (x->finished && x->timer_open) { /* placed as ended: its timer is still open */
    x->timer_open = 0;
    uv_close((uv_handle_t *)&x->timer, pr_exec_handle_closed);
  }
  if (!x->finished) pr_exec_abandon(x);
  pr_exec_release(x); /* freed once its handles are closed */
done:
  uv_run(&loop, UV_RUN_DEFAULT);
  uv_loop_close(&loop);
  return rc;
}

void pr_test_lc_size(int *rows, int *events) {
  *rows = PR_NROW;
  *events = PR_NLC_EVENT;
}
