/* base/liveness.h — what the kernel says of a process that owes an answer.
 *
 * Thread: any; a pr_liveness_t belongs to whoever asked the question.
 *
 * Two askers wait for a process to answer: the engine's shepherd link (a
 * PING to the shepherd) and the shepherd (a command to a job's reaper).
 * Silence alone does not mean hung: on a loaded machine a live process can
 * wait seconds for a CPU. So when the answer is late, the asker looks at
 * the process as `ps` would (its state letter in /proc/<pid>/stat, its CPU
 * clock) and judges:
 *
 *   stopped (SIGSTOP, traced), gone (or a zombie), asleep without having
 *     used CPU since the last look, or having used `budget_ns` of CPU since
 *     the question without a word (a loop)   → silent: the asker kills it
 *   running, runnable, in the kernel ('D'), or having used CPU since the
 *     last look                              → working: ask again, look later
 */
#ifndef PR_LIVENESS_H
#define PR_LIVENESS_H

#include <stdint.h>

typedef struct {
  uint64_t
      asked_cpu;     /* its CPU time (ns) when the first question of this silence went; 0 unknown */
  uint64_t seen_cpu; /* its CPU time (ns) at the last look (the question, or a judgement) */
} pr_liveness_t;

/* pr_proc_state: the state letter of process `pid` in /proc ('R', 'S', 'D',
 * 'T' stopped, 't' traced, 'Z', ...), or 0 when it is gone or pid <= 0 (a
 * read: a pid reused meanwhile costs nothing but this answer). Any thread. */
char pr_proc_state(int64_t pid);

/* pr_proc_cpu_ns: the CPU time (user and system, ns) process `pid` has
 * used, as its CPU clock counts it; 0 when unknown (pid <= 0, gone). */
uint64_t pr_proc_cpu_ns(int64_t pid);

/* pr_liveness_asked: a question to `pid` goes now (the first of a silence):
 * remember its CPU time. `pid` may be unknown (<= 0): the first judgement
 * then takes its place. */
void pr_liveness_asked(pr_liveness_t *l, int64_t pid);

/* pr_liveness_working: the answer to the question is late. Returns 1 when
 * the kernel says `pid` works (see above: ask again), 0 when it is silent
 * (stopped, traced, gone, asleep without using CPU since the last look, or
 * `budget_ns` of CPU used since pr_liveness_asked). Updates l's last look. */
int pr_liveness_working(pr_liveness_t *l, int64_t pid, uint64_t budget_ns);

#endif
