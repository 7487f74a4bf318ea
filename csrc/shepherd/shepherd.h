/* shepherd/shepherd.h — what the files of proctor-shepherd share.
 *
 * Thread: the shepherd is a single-threaded program (its own process).
 *
 *   main.c   the event loop: the engine's socket, signals, exec handshakes;
 *            packets from the engine; shutting everything down
 *   jobs.c   the job table (by id, by leader pid) and the wire to the engine
 *   procs.c  /proc: escapees, orphans, killing a job's tree, reaping
 *   spawn.c  clone + exec of a job, and the exec handshake
 *
 * It includes only base/ (the wire protocol, the id map, the buffer): it
 * shares no code with the engine beyond them.
 */
#ifndef PR_SHEPHERD_H
#define PR_SHEPHERD_H

#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/wire.h"

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* The process-wide facts every file reads (set once by main). */
extern int pr_shep_sock;             /* the socket to the engine */
extern pid_t pr_shep_self;           /* our pid */
extern char pr_shep_tag_prefix[64];  /* "PROCTOR_JOB=<shepherd pid>:" */

typedef struct job {
  uint64_t id;
  pid_t pid;      /* leader; also pgid and sid of the job */
  int exited;     /* leader exit seen (leader is a zombie we hold) */
  int stopping;   /* a stop was requested: on leader exit, kill the rest at once */
  /* Exec handshake still open: `ep` gets EOF when exec succeeded (CLOEXEC)
   * or {stage, errno} when it failed. Until then SPAWNED is not sent, the
   * parent ends wait in `fds`, and an exit is held back in `exit_*`. */
  int handshake;
  int ep;
  int fds[PR_WIRE_MAX_FDS], nfds;
  uint32_t rflags;
  int exit_pending;
  uint32_t exit_flags;
  int64_t exit_value;
  uint64_t deep;  /* signals (bit n = signal n) still owed to escapees: see hunt() */
} job_t;

/* ---- jobs.c ---- */
uint64_t pr_shep_now_ms(void);
/* Send one packet to the engine (blocking: the engine always drains its
 * socket; a failure means the host is gone and EOF ends us next). */
void pr_shep_send(uint32_t type, uint32_t flags, uint64_t job, int64_t a, int64_t b, const int *fds, int nfds);
job_t *pr_shep_find_id(uint64_t id);
job_t *pr_shep_find_pid(pid_t pid);
int pr_shep_add_job(job_t *j);     /* 0, or -1 when out of memory (not indexed) */
void pr_shep_remove_job(job_t *j); /* and free it */
job_t *pr_shep_next_job(size_t *at); /* walk: `at` starts at 0; the table must not change */
int pr_shep_njobs(void);
void pr_shep_drop_jobs(void);      /* forget (and free) every job */

/* ---- procs.c ---- */
extern int pr_shep_hunt_pending;   /* some job has `deep` bits set */
void pr_shep_kill_job(job_t *j, int sig, int deep);
void pr_shep_hunt(void);
size_t pr_shep_list_children(pid_t **out);
int pr_shep_sweep_orphans(void);
void pr_shep_reap(void);

/* ---- spawn.c ---- */
/* Start job `id` from a complete SPAWN request (flags, a, b and payload as in
 * base/wire.h); SPAWNED or FAILED follows once its exec handshake ends. */
void pr_shep_spawn(uint64_t id, uint32_t flags, int64_t a, int64_t b, char *payload, size_t len);
void pr_shep_fail_spawn(uint64_t job, int err, int stage);
size_t pr_shep_nshaking(void);     /* jobs whose exec handshake is open */
int pr_shep_shaking_fd(size_t i);  /* the handshake pipe of the i-th */
void pr_shep_finish_handshake(size_t i); /* it is readable (moves the last entry to i) */
/* Every signal disposition back to default (the shepherd's own, once). */
void pr_shep_default_dispositions(void);

#endif
