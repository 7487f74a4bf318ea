/* engine/lifecycle.h — the execution lifecycle as one table: where an
 * execution is (its row: state, timer phase, verdict), what each event does
 * there (the verdict it decides, the action it takes). exec.c's handlers
 * look their row up here and do what the cell says; the C test walks every
 * cell (tests/c/test_engine.c, test_lifecycle_table, through engine/lctest.c).
 *
 * Thread: none (types and constant data).
 *
 * The row of an execution (pr_exec_row in exec.c), first match wins:
 *
 *   ENDED       its terminal event was emitted
 *   GRACE       verdict canceled|timed_out, phase grace: SIGTERM went, the job keeps its grace
 *   STOP_DRAIN  verdict canceled|timed_out, the leader exited: output drains (phase drain)
 *   STOP_SPAWN  verdict canceled|timed_out, starting (or a worker's respawn): stopped at SPAWNED
 *   KILLED      verdict canceled|timed_out, running: SIGKILL went, the leader's exit awaited
 *   PARKED      a worker between two processes (exited, no verdict)
 *   DRAINING    running, the leader exited: the exit decided, output drains (phase drain)
 *   FAILING     a verdict completed|failed, not running-and-exited: it only waits for its end
 *   QUEUED      queued (also a start taken in the engine's current batch of commands: the
 *               batch begins its starts after the cancels in it, engine/control.c on_async)
 *   STARTING    starting, or a worker's respawn (phase timeout or none)
 *   RUNNING     running, no verdict (phase timeout or none)
 *
 * The table (verdict / action; "-" keeps the verdict and does nothing).
 * cancel/force also answer a pr_cancel_result_t: CANCELING unless the cell
 * says ALREADY_CANCELING (AC) or ALREADY_TERMINAL (AT).
 *
 *   row        | cancel          | force           | exit         | empty      | timer             | spawned   | lost
 *   -----------+-----------------+-----------------+--------------+------------+-------------------+-----------+----------
 *   QUEUED     | canceled/END    | canceled/END    | -            | -          | -                 | DROP      | -
 *   STARTING   | canceled/ON_SPN | canceled/KL_SPN | exit/DRAIN   | NOTE       | timed_out/T_START | RUN       | LOST
 *   RUNNING    | canceled/TERM   | canceled/KILL   | exit/DRAIN   | NOTE       | timed_out/TERM    | DROP      | LOST
 *   STOP_SPAWN | AC -            | AC KILL         | DRAIN        | NOTE       | -                 | RUN_STOP  | LOST
 *   GRACE      | AC -            | AC KILL         | WAIT         | END_GRACE  | KILL_GRACE        | DROP      | LOST
 *   KILLED     | AC -            | AC KILL         | DRAIN        | NOTE       | -                 | DROP      | LOST
 *   STOP_DRAIN | AC -            | AC KILL         | -            | NOTE       | DRAIN_STEP        | DROP      | LOST
 *   DRAINING   | canceled!/TERM  | canceled!/KILL  | -            | NOTE       | DRAIN_STEP        | DROP      | LOST
 *   PARKED     | canceled/END    | canceled/END    | -            | NOTE       | -                 | DROP      | LOST
 *   FAILING    | AT -            | AT -            | DRAIN        | NOTE       | -                 | DROP      | LOST
 *   ENDED      | AT -            | AT -            | -            | -          | -                 | DROP      | -
 *
 *   canceled    the verdict is canceled, unless one was decided already (the first decision wins)
 *   canceled!   the verdict is canceled: the exit's verdict gives way (it had not ended yet; the
 *               exit code stays in the record), and the rest of the job gets the kill ladder
 *   exit        the verdict from the status (completed | failed; canceled after a ^C the pty got)
 *   timed_out   the verdict is timed_out (reason "timeout")
 *   LOST        the verdict is failed (reason supervisor_lost), whatever was decided
 * A repeated report (a second exit or empty) is ignored before the table is read; the exit
 * code, signal and the `empty` fact are recorded in every row that takes the event.
 */
#ifndef PR_LIFECYCLE_H
#define PR_LIFECYCLE_H

#include "include/proctor.h"

/* What the execution's one timer is armed for: one phase at a time. */
typedef enum {
  PR_PHASE_NONE = 0, /* not armed */
  PR_PHASE_TIMEOUT,  /* timeout_ms, armed when it enters `starting` */
  PR_PHASE_GRACE,    /* the job's kill grace: SIGTERM went, SIGKILL when it ends */
  PR_PHASE_DRAIN,    /* the leader exited: output may still arrive (an idle window) */
} pr_phase_t;

/* How far the kill ladder went. */
typedef enum {
  PR_STOP_NONE = 0,      /* not being stopped */
  PR_STOP_TERM,          /* SIGTERM (after SIGHUP for a pty) went to the whole job */
  PR_STOP_KILL,          /* SIGKILL went to every process of the job */
  PR_STOP_KILL_ON_SPAWN, /* force-canceled while starting: SIGKILL as soon as SPAWNED comes */
} pr_stop_t;

typedef enum {
  PR_ROW_QUEUED = 0,
  PR_ROW_STARTING,
  PR_ROW_RUNNING,
  PR_ROW_STOP_SPAWN,
  PR_ROW_GRACE,
  PR_ROW_KILLED,
  PR_ROW_STOP_DRAIN,
  PR_ROW_DRAINING,
  PR_ROW_PARKED,
  PR_ROW_FAILING,
  PR_ROW_ENDED,
  PR_NROW
} pr_row_t;

typedef enum {
  PR_LC_CANCEL = 0, /* pr_exec_cancel, force 0 */
  PR_LC_FORCE,      /* pr_exec_cancel, force 1 */
  PR_LC_EXIT,       /* the shepherd reports the leader's exit */
  PR_LC_EMPTY,      /* ... that no process of the job is left */
  PR_LC_TIMER,      /* the execution's timer fired (its phase says which) */
  PR_LC_SPAWNED,    /* ... that the process runs (its descriptors come with it) */
  PR_LC_LOST,       /* the shepherd died */
  PR_NLC_EVENT
} pr_lc_event_t;

/* The verdict a cell decides. */
typedef enum {
  PR_V_KEEP = 0,    /* unchanged */
  PR_V_CANCELED,    /* canceled, if none was decided */
  PR_V_CANCEL_OVER, /* canceled, in place of the exit's verdict */
  PR_V_EXIT,        /* from the exit status, if none was decided */
  PR_V_TIMED_OUT,   /* timed_out, if none was decided */
  PR_V_LOST,        /* failed (supervisor_lost), in place of any */
} pr_lc_verdict_t;

/* The action a cell takes. */
typedef enum {
  PR_A_NONE = 0,
  PR_A_END,           /* end now (a queued one leaves the run queue) */
  PR_A_ON_SPAWN,      /* stopped when SPAWNED comes (SIGTERM); secret reads stop now, or
                       * its reaper is probed (continued if its job stopped it) */
  PR_A_KILL_ON_SPAWN, /* the same with SIGKILL */
  PR_A_TERM,          /* the kill ladder: SIGTERM to the job, the grace timer */
  PR_A_KILL,          /* SIGKILL to the job, only while running (a starting one has none yet);
                       * a grace it cuts short is followed by the drain */
  PR_A_DRAIN,         /* drain the output (the timer's drain phase), or end at once */
  PR_A_WAIT,          /* the grace runs on: its timer is the deadline */
  PR_A_NOTE,          /* only the fact is recorded */
  PR_A_END_GRACE,     /* the job ended within its grace: drain if the leader exited */
  PR_A_KILL_GRACE,    /* the grace ended: SIGKILL to what is left, drain if the leader exited */
  PR_A_T_START,       /* timeout while starting: secret reads stop, the reaper is probed;
                       * stopped at SPAWNED */
  PR_A_DRAIN_STEP,    /* the drain window passed: read what came, end or wait */
  PR_A_RUN,           /* streams open, running */
  PR_A_RUN_STOP,      /* streams open, running, then stopped (TERM, or KILL after a force) */
  PR_A_DROP,          /* its descriptors are closed: it cannot take a process */
  PR_A_LOST,          /* kill what can be reached safely, close the streams, end */
} pr_lc_action_t;

typedef struct {
  unsigned char verdict; /* pr_lc_verdict_t */
  unsigned char action;  /* pr_lc_action_t */
  signed char result;    /* cancel and force: the pr_cancel_result_t; -1 for other events */
} pr_lc_rule_t;

#define PR_LC_(v, a) \
  { PR_V_##v, PR_A_##a, -1 }
#define PR_LC_C(r, v, a) \
  { PR_V_##v, PR_A_##a, PR_##r }

/* The table above, as data: pr_lifecycle[row][event]. */
static const pr_lc_rule_t pr_lifecycle[PR_NROW][PR_NLC_EVENT] = {
    /* cancel, force, exit, empty, timer, spawned, lost */
    [PR_ROW_QUEUED] = {PR_LC_C(CANCELING, CANCELED, END), PR_LC_C(CANCELING, CANCELED, END),
                       PR_LC_(KEEP, NONE), PR_LC_(KEEP, NONE), PR_LC_(KEEP, NONE),
                       PR_LC_(KEEP, DROP), PR_LC_(KEEP, NONE)},
    [PR_ROW_STARTING] = {PR_LC_C(CANCELING, CANCELED, ON_SPAWN),
                         PR_LC_C(CANCELING, CANCELED, KILL_ON_SPAWN), PR_LC_(EXIT, DRAIN),
                         PR_LC_(KEEP, NOTE), PR_LC_(TIMED_OUT, T_START), PR_LC_(KEEP, RUN),
                         PR_LC_(LOST, LOST)},
    [PR_ROW_RUNNING] = {PR_LC_C(CANCELING, CANCELED, TERM), PR_LC_C(CANCELING, CANCELED, KILL),
                        PR_LC_(EXIT, DRAIN), PR_LC_(KEEP, NOTE), PR_LC_(TIMED_OUT, TERM),
                        PR_LC_(KEEP, DROP), PR_LC_(LOST, LOST)},
    [PR_ROW_STOP_SPAWN] = {PR_LC_C(ALREADY_CANCELING, KEEP, NONE),
                           PR_LC_C(ALREADY_CANCELING, KEEP, KILL), PR_LC_(KEEP, DRAIN),
                           PR_LC_(KEEP, NOTE), PR_LC_(KEEP, NONE), PR_LC_(KEEP, RUN_STOP),
                           PR_LC_(LOST, LOST)},
    [PR_ROW_GRACE] = {PR_LC_C(ALREADY_CANCELING, KEEP, NONE),
                      PR_LC_C(ALREADY_CANCELING, KEEP, KILL), PR_LC_(KEEP, WAIT),
                      PR_LC_(KEEP, END_GRACE), PR_LC_(KEEP, KILL_GRACE), PR_LC_(KEEP, DROP),
                      PR_LC_(LOST, LOST)},
    [PR_ROW_KILLED] = {PR_LC_C(ALREADY_CANCELING, KEEP, NONE),
                       PR_LC_C(ALREADY_CANCELING, KEEP, KILL), PR_LC_(KEEP, DRAIN),
                       PR_LC_(KEEP, NOTE), PR_LC_(KEEP, NONE), PR_LC_(KEEP, DROP),
                       PR_LC_(LOST, LOST)},
    [PR_ROW_STOP_DRAIN] = {PR_LC_C(ALREADY_CANCELING, KEEP, NONE),
                           PR_LC_C(ALREADY_CANCELING, KEEP, KILL), PR_LC_(KEEP, NONE),
                           PR_LC_(KEEP, NOTE), PR_LC_(KEEP, DRAIN_STEP), PR_LC_(KEEP, DROP),
                           PR_LC_(LOST, LOST)},
    [PR_ROW_DRAINING] = {PR_LC_C(CANCELING, CANCEL_OVER, TERM),
                         PR_LC_C(CANCELING, CANCEL_OVER, KILL), PR_LC_(KEEP, NONE),
                         PR_LC_(KEEP, NOTE), PR_LC_(KEEP, DRAIN_STEP), PR_LC_(KEEP, DROP),
                         PR_LC_(LOST, LOST)},
    [PR_ROW_PARKED] = {PR_LC_C(CANCELING, CANCELED, END), PR_LC_C(CANCELING, CANCELED, END),
                       PR_LC_(KEEP, NONE), PR_LC_(KEEP, NOTE), PR_LC_(KEEP, NONE),
                       PR_LC_(KEEP, DROP), PR_LC_(LOST, LOST)},
    [PR_ROW_FAILING] = {PR_LC_C(ALREADY_TERMINAL, KEEP, NONE),
                        PR_LC_C(ALREADY_TERMINAL, KEEP, NONE), PR_LC_(KEEP, DRAIN),
                        PR_LC_(KEEP, NOTE), PR_LC_(KEEP, NONE), PR_LC_(KEEP, DROP),
                        PR_LC_(LOST, LOST)},
    [PR_ROW_ENDED] = {PR_LC_C(ALREADY_TERMINAL, KEEP, NONE), PR_LC_C(ALREADY_TERMINAL, KEEP, NONE),
                      PR_LC_(KEEP, NONE), PR_LC_(KEEP, NONE), PR_LC_(KEEP, NONE),
                      PR_LC_(KEEP, DROP), PR_LC_(KEEP, NONE)},
};

#undef PR_LC_
#undef PR_LC_C

#endif
