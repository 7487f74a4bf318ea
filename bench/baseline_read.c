/* baseline_read.c — the floor for write -> callback latency: a plain C read loop.
 *
 *   baseline_read TICKER [COUNT] [PERIOD_MS]
 *
 * Runs TICKER with its stdout on a pipe, blocks in read(2), and for every
 * complete line takes CLOCK_MONOTONIC and subtracts the timestamp the ticker
 * wrote. Prints one JSON object: {"n":..,"p50_ms":..,"p99_ms":..,"max_ms":..}.
 * Part of `make bench` (bench/run); written for this project.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
  long long x = *(const long long *)a, y = *(const long long *)b;
  return (x > y) - (x < y);
}

static double pct(const long long *v, int n, double p) {
  if (n == 0) return -1;
  int i = (int)(p * (n - 1) + 0.5);
  return v[i] / 1e6;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: baseline_read TICKER [COUNT] [PERIOD_MS]\n");
    return 2;
  }
  int fds[2];
  if (pipe(fds) != 0) return 1;
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    execv(argv[1], argv + 1);
    _exit(127);
  }
  close(fds[1]);
  static long long lat[100000];
  int n = 0;
  char buf[65536];
  size_t have = 0;
  for (;;) {
    ssize_t r = read(fds[0], buf + have, sizeof(buf) - have);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    long long t = now_ns();
    have += (size_t)r;
    size_t start = 0;
    for (size_t i = 0; i < have; i++) {
      if (buf[i] != '\n') continue;
      if (n < (int)(sizeof(lat) / sizeof(lat[0]))) lat[n++] = t - atoll(buf + start);
      start = i + 1;
    }
    memmove(buf, buf + start, have - start);
    have -= start;
  }
  waitpid(pid, NULL, 0);
  qsort(lat, (size_t)n, sizeof(lat[0]), cmp);
  printf("{\"n\":%d,\"p50_ms\":%.4f,\"p99_ms\":%.4f,\"max_ms\":%.4f}\n", n, pct(lat, n, 0.5),
         pct(lat, n, 0.99), n ? lat[n - 1] / 1e6 : -1.0);
  return 0;
}
