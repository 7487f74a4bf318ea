/* base/liveness.c — what the kernel says of a process that owes an answer
 * (base/liveness.h): its state in /proc and its CPU clock.
 *
 * Thread: any (nothing shared: each pr_liveness_t is its asker's).
 */
#include "base/liveness.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

char pr_proc_state(int64_t pid) {
  if (pid <= 0) return 0;
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%lld/stat", (long long)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  char *rp = strrchr(buf, ')'); /* the name in parentheses may hold anything */
  return rp && rp[1] == ' ' ? rp[2] : 0;
}

uint64_t pr_proc_cpu_ns(int64_t pid) {
  clockid_t id;
  struct timespec ts;
  if (pid <= 0 || clock_getcpuclockid((pid_t)pid, &id) != 0 || clock_gettime(id, &ts) != 0)
    return 0;
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void pr_liveness_asked(pr_liveness_t *l, int64_t pid) {
  l->asked_cpu = l->seen_cpu = pr_proc_cpu_ns(pid);
}

int pr_liveness_working(pr_liveness_t *l, int64_t pid, uint64_t budget_ns) {
  char st = pr_proc_state(pid);
  if (st == 0 || st == 'T' || st == 't' || st == 'Z' || st == 'X') return 0;
  uint64_t cpu = pr_proc_cpu_ns(pid);
  if (l->asked_cpu == 0) l->asked_cpu = cpu; /* not known at the question */
  if (cpu != 0 && cpu - l->asked_cpu >= budget_ns) return 0;
  int ran = cpu > l->seen_cpu;
  l->seen_cpu = cpu;
  return ran || st == 'R' || st == 'D';
}
