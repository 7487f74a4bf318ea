/* shepherd/shepherd.h — what the files of proctor-shepherd share.
 *
 * Thread: the shepherd is a single-threaded program (its own process); so is
 * each of its reapers (a fork of it, one per job).
 *
 *   main.c    the event loop: the engine's socket, signals, the reapers'
 *             socket; packets from the engine; shutting everything down
 *   jobs.c    the job table (by id, by reaper pid) and the wire to the engine
 *   spawn.c   a job's pipes or pty, the fork of its reaper, clone + exec
 *   reaper.c  a job's reaper: the subreaper of that one job, its signals,
 *             its reports
 *   relay.c   --relay: the protocol as frames on stdin/stdout; the job's streams read here
 *   link.c    --link: the engine's end of a relay: runs the transport, turns its frames
 *             back into packets and local descriptors
 *
 *   engine ══ SEQPACKET ══ shepherd ──fork──► reaper N (subreaper) ──clone/exec──► job N
 *                             ▲                  │ every orphan of job N comes back here
 *                             └── reapers' socket (SPAWNED/FAILED/EXITED/EMPTY)
 *
 * It includes only base/ (the wire protocol, the id map, the buffer, the
 * liveness judgement): it shares no code with the engine beyond them.
 */
#ifndef PR_SHEPHERD_H
#define PR_SHEPHERD_H

#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/liveness.h"
#include "base/pidfd.h"
#include "base/wire.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

/* The process-wide facts every file reads (set once by main). */
extern int pr_shep_sock;            /* the socket to the engine */
extern int pr_shep_up[2];           /* the reapers' socket: [0] we read, [1] they write */
extern pid_t pr_shep_self;          /* our pid */
extern char pr_shep_tag_prefix[96]; /* "PROCTOR_JOB=<token>:" (the engine chose the token) */

/* Commands to a reaper are signals (it blocks them and reads a signalfd);
 * the shepherd sends them only to a reaper it has not reaped, so a pid is
 * never reused under it. SIGHUP, SIGINT and SIGTERM mean "send it to the
 * whole job"; these two mean: */
#define PR_REAPER_KILL SIGUSR1    /* SIGKILL the whole job, and every orphan that comes back */
#define PR_REAPER_RELEASE SIGUSR2 /* the same, then exit (also its parent-death signal) */
/* The probe (the engine's SIGNAL 0, sent when it stops waiting for a spawn
 * report: a cancel or timeout while starting): SIGCONT continues a reaper
 * its job stopped before it reported the spawn, and the reaper answers it
 * like any command and does nothing else. One that still does not answer is
 * SIGKILLed as below, and the spawn is reported failed: the execution ends. */
#define PR_REAPER_PROBE SIGCONT

/* A reaper answers every command (PR_W_PONG on the reapers' socket) as soon
 * as it has read it. One that has not answered this long after a command is
 * judged by what the kernel says of it (base/liveness.h): stopped (by its
 * job: SIGSTOP, same uid), traced, gone, asleep without using CPU since the
 * last look, or having used this much CPU since the command without a word,
 * it is SIGKILLed: its processes come to the shepherd, which kills them and
 * reports the job's end. Running, runnable or using CPU (a loaded machine),
 * it is asked again (the probe) and judged again this long after. */
#define PR_REAPER_ANSWER_MS 1000

/* A job, from the shepherd's side: its reaper, until that reaper is reaped. */
typedef struct job {
  uint64_t id;
  pid_t reaper;                   /* our child; also the key of the by-reaper map */
  int spawned;                    /* SPAWNED or FAILED went to the engine */
  int exited;                     /* EXITED went to the engine */
  int emptied;                    /* EMPTY (or EXITED with PR_WF_EMPTY) went to the engine */
  int released;                   /* RELEASE came (or the spawn failed): out of the by-id map */
  int fds[PR_WIRE_MAX_FDS], nfds; /* parent ends of its pipes or pty, until SPAWNED */
  uint32_t rflags;                /* PR_WF_PTY | PR_WF_STDIN of the request */
  /* commands its reaper has not answered yet (jobs.c keeps them in deadline order) */
  uint64_t asked_ns;  /* CLOCK_MONOTONIC ns after the last command was sent; 0: all answered */
  uint64_t answer_by; /* ms (pr_shep_now_ms): SIGKILL the reaper if still unanswered then */
  struct job *wprev, *wnext; /* the list of reapers owing an answer */
  pr_liveness_t live; /* the reaper's CPU time at the first unanswered command, at the last look */
} job_t;

/* While it works through a long batch of engine packets (spawns: a fork
 * each, slow on a loaded machine), the shepherd tells the engine it lives
 * (an unasked PONG, token 0) when it sent nothing for this long: the
 * engine's liveness check must not take a busy shepherd for a stopped one. */
#define PR_SHEP_HEARTBEAT_MS 250

/* ---- jobs.c ---- */
uint64_t pr_shep_now_ms(void);
/* The heartbeat above: a PONG (token 0) if nothing went to the engine for
 * PR_SHEP_HEARTBEAT_MS. */
void pr_shep_heartbeat(void);
/* Send one packet to the engine (blocking: the engine always drains its
 * socket; a failure means the host is gone and EOF ends us next). */
void pr_shep_send(uint32_t type, uint32_t flags, uint64_t job, int64_t a, int64_t b, const int *fds,
                  int nfds);
job_t *pr_shep_find_id(uint64_t id);   /* a job not yet released */
job_t *pr_shep_find_reaper(pid_t pid); /* a job whose reaper we have not reaped */
int pr_shep_add_job(job_t *j);         /* 0, or -1 when out of memory (not indexed) */
void pr_shep_release_job(job_t *j);    /* out of the by-id map (its reaper lives on) */
void pr_shep_remove_job(job_t *j);     /* out of both maps, fds closed, freed */
job_t *pr_shep_next_job(size_t *at);   /* walk every job with a reaper; no change meanwhile */
int pr_shep_njobs(void);               /* jobs with a reaper */
uint64_t pr_shep_now_ns(void);         /* CLOCK_MONOTONIC, ns */
/* Send command `sig` (shepherd.h) to j's reaper, an unreaped child of ours,
 * and expect its answer within PR_REAPER_ANSWER_MS. */
void pr_shep_ask(job_t *j, int sig);
/* j's reaper answered, having read its commands at `read_ns`: the commands
 * sent before that are answered. */
void pr_shep_answered(job_t *j, uint64_t read_ns);
/* The reaper owing an answer longest, if its deadline is at or before
 * `now_ms` (taken off the list); else NULL. */
job_t *pr_shep_overdue(uint64_t now_ms);
/* ms until the first answer deadline (0 when one passed), or -1 for none. */
int pr_shep_answer_wait(uint64_t now_ms);

/* ---- spawn.c ---- */
/* Start job `id` from a complete SPAWN request (flags, a, b and payload as in
 * base/wire.h): its pipes or pty, then its reaper. FAILED goes to the engine
 * at once when that fails; otherwise the reaper reports. */
void pr_shep_spawn(uint64_t id, uint32_t flags, int64_t a, int64_t b, char *payload, size_t len);
void pr_shep_fail_spawn(uint64_t job, int err, int stage);
/* Every signal disposition back to default (the shepherd's own, once). */
void pr_shep_default_dispositions(void);

/* What a reaper needs to start its job; it lives on the shepherd's stack
 * during the fork (the reaper has its own copy). */
typedef struct {
  uint64_t id;
  uint32_t flags;             /* PR_WF_PTY, PR_WF_STDIN */
  int slave, fin, fout, ferr; /* the child's ends (-1: none) */
  const char *cwd;
  char **argv, **envp;
  char *payload; /* the request all of the above points into (secret */
  size_t len;    /* values among its env strings): wiped once the job runs */
} pr_spawn_args_t;

/* In the child: exec the job's program (clone(CLONE_VM|CLONE_VFORK) + exec
 * in a new session). Returns its pid, or -1 with *stage and errno set. */
pid_t pr_shep_exec_job(const pr_spawn_args_t *a, int *stage);

/* ---- reaper.c ---- */
/* The reaper of one job, in the child of the shepherd's fork: becomes the
 * subreaper of the job, starts it, reports on pr_shep_up[1] and follows the
 * commands above until the job's every process is gone. Never returns. */
void pr_reaper_main(const pr_spawn_args_t *a) __attribute__((noreturn));

/* ---- relay.c (--relay) ---- */
extern int pr_shep_relay; /* 1: the engine is a link at the end of stdin/stdout */
/* Our stdin and stdout, moved above 2 (CLOEXEC; 0, 1 and 2 are /dev/null) so that no
 * reaper or job holds the transport open. */
extern int pr_relay_in, pr_relay_out;
/* Send one frame on stdout (blocking: the link always reads). */
void pr_relay_send(uint32_t type, uint32_t flags, uint64_t job, int64_t a, int64_t b,
                   const void *payload, uint32_t len);
int pr_relay_lost(void); /* 1 once stdout failed */
/* Read stdin once: whole frames go to on_packet (a local shepherd's) or to the
 * relay (DATA, CREDIT, RESIZE). Returns 0 at EOF (or garbage), else 1. */
int pr_relay_read(void (*on_packet)(const pr_wire_hdr_t *, const char *, int *, int));
/* Job `id` runs (SPAWNED from its reaper): keep its streams (takes the fds), tell the link. */
void pr_relay_adopt(uint64_t id, uint32_t flags, int64_t pid, int *fds, int nfds);
/* EXITED or EMPTY of a job: sent once its output is (see relay.c). */
void pr_relay_report(uint32_t type, uint32_t flags, uint64_t job, int64_t a, int64_t b);
void pr_relay_forget(uint64_t id); /* RELEASE: its streams closed */
/* The jobs' fds to poll, appended to *set from index `at` (grown as needed); returns
 * the new count. pr_relay_on_poll handles their revents; pr_relay_tick the held reports. */
int pr_relay_pollfds(struct pollfd **set, int *cap, int at);
void pr_relay_on_poll(const struct pollfd *set, int n);
void pr_relay_tick(void);
int pr_relay_wait_ms(void); /* poll timeout the held reports need, or -1 */

/* ---- link.c (--link) ---- */
/* Run the transport `cmd` (/bin/sh -c) and be the engine's shepherd on `sock` (a
 * SEQPACKET socket) through it. Never returns. */
void pr_link_main(int sock, const char *cmd) __attribute__((noreturn));

#endif
