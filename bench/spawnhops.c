/* bench/spawnhops.c — the starting cost of the shepherd and of its jobs, hop by hop.
 *
 * Thread: a plain program, single-threaded. It speaks the wire protocol
 * (csrc/base/wire.h) to a shepherd it starts the way the engine does
 * (posix_spawn of `SHEPHERD --daemon 3 --tag T`, reap the first process),
 * then asks for N jobs of /bin/true, one at a time, and then N at once.
 *
 *   usage: spawnhops SHEPHERD [N]
 *   prints one JSON object: start_ms (spawn → hello), per-job latency in ms
 *   (SPAWN sent → SPAWNED, → EXITED) as median and p90, the burst's wall,
 *   and the CPU (ms) and minor faults of the shepherd and every process it
 *   reaped (its reapers, and through them the jobs) from /proc/<pid>/stat.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/wire.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int sock;
static char buf[PR_WIRE_MAX_PAYLOAD];

static int recv_one(pr_wire_hdr_t *h) {
  int fds[PR_WIRE_MAX_FDS], n = 0;
  int rc = pr_wire_recv(sock, h, buf, fds, &n, 0);
  for (int i = 0; i < n; i++) close(fds[i]);
  return rc;
}

static void send_spawn(uint64_t id) {
  static const char pl[] = "\0/bin/true\0PATH=/usr/bin:/bin\0";
  pr_wire_hdr_t h = {.type = PR_W_SPAWN, .job = id, .b = 1, .len = sizeof(pl) - 1};
  if (pr_wire_send(sock, &h, pl, NULL, 0, 0) != 0) exit(3);
}

/* utime+stime+cutime+cstime in ms, minflt+cminflt */
static void proc_cost(pid_t pid, double *cpu, long *flt) {
  char path[64], b[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f || !fgets(b, sizeof(b), f)) exit(4);
  fclose(f);
  char *p = strrchr(b, ')') + 2;
  long v[20];
  /* state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime */
  sscanf(p, "%*c %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld %ld", &v[0], &v[1], &v[2],
         &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11], &v[12], &v[13]);
  *flt = v[6] + v[7];
  *cpu = (v[10] + v[11] + v[12] + v[13]) * 1000.0 / sysconf(_SC_CLK_TCK);
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc < 2) return 2;
  int n = argc > 2 ? atoi(argv[2]) : 100;
  int sv[2];
  socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv);
  int child = fcntl(sv[1], F_DUPFD_CLOEXEC, 10);
  close(sv[1]);
  sock = sv[0];
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, child, 3);
  char *av[] = {argv[1], "--daemon", "3", "--tag", "0123456789abcdef", NULL};
  char *envp[] = {NULL};
  double t0 = now_ms();
  pid_t pid;
  if (posix_spawn(&pid, argv[1], &fa, NULL, av, envp) != 0) return 3;
  waitpid(pid, NULL, 0);
  close(child);
  pr_wire_hdr_t h;
  if (recv_one(&h) != 1 || h.type != PR_W_PONG) return 5;
  double start = now_ms() - t0;
  pid_t shep = (pid_t)h.b;
  double cpu0;
  long flt0;
  proc_cost(shep, &cpu0, &flt0);

  double *spawned = calloc(n, sizeof(double)), *exited = calloc(n, sizeof(double));
  double cpu1, cpu2;
  long flt1, flt2;
  for (int i = 0; i < n; i++) { /* one at a time: latency per hop */
    double s = now_ms();
    send_spawn(i + 1);
    int done = 0;
    while (done < 2) {
      if (recv_one(&h) != 1) return 6;
      if (h.type == PR_W_SPAWNED) spawned[i] = now_ms() - s;
      if (h.type == PR_W_FAILED) return 7;
      if (h.type == PR_W_EXITED) {
        exited[i] = now_ms() - s;
        done = (h.flags & PR_WF_EMPTY) ? 2 : 1;
        if (done == 1) continue;
      }
      if (h.type == PR_W_EMPTY) done = 2;
    }
    pr_wire_hdr_t r = {.type = PR_W_RELEASE, .job = i + 1};
    pr_wire_send(sock, &r, NULL, NULL, 0, 0);
  }
  usleep(200000); /* the reapers exit and are reaped */
  proc_cost(shep, &cpu1, &flt1);
  double b0 = now_ms();
  for (int i = 0; i < n; i++) send_spawn(1000 + i + 1);
  for (int left = n; left > 0;) {
    if (recv_one(&h) != 1) return 6;
    if ((h.type == PR_W_EXITED && (h.flags & PR_WF_EMPTY)) || h.type == PR_W_EMPTY) {
      left--;
      pr_wire_hdr_t r = {.type = PR_W_RELEASE, .job = h.job};
      pr_wire_send(sock, &r, NULL, NULL, 0, 0);
    }
  }
  double burst = now_ms() - b0;
  usleep(200000);
  proc_cost(shep, &cpu2, &flt2);
  pr_wire_hdr_t sd = {.type = PR_W_SHUTDOWN, .a = 100};
  pr_wire_send(sock, &sd, NULL, NULL, 0, 0);
  while (recv_one(&h) == 1) {
  }
  qsort(spawned, n, sizeof(double), cmp);
  qsort(exited, n, sizeof(double), cmp);
  printf("{\"start_ms\":%.2f,\"start_cpu_ms\":%.0f,\"start_minflt\":%ld,"
         "\"spawned_ms_med\":%.3f,\"spawned_ms_p90\":%.3f,\"exited_ms_med\":%.3f,"
         "\"exited_ms_p90\":%.3f,\"seq_cpu_ms\":%.0f,\"seq_minflt\":%ld,"
         "\"burst_ms\":%.1f,\"burst_cpu_ms\":%.0f,\"burst_minflt\":%ld}\n",
         start, cpu0, flt0, spawned[n / 2], spawned[n * 9 / 10], exited[n / 2],
         exited[n * 9 / 10], cpu1 - cpu0, flt1 - flt0, burst, cpu2 - cpu1, flt2 - flt1);
  return 0;
}
