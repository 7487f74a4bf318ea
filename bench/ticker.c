/* ticker.c — print an 80-byte line starting with CLOCK_MONOTONIC nanoseconds every PERIOD_MS, COUNT times.
 *
 *   ticker [COUNT=200] [PERIOD_MS=10]
 *
 * Each line is the time taken just before write(2), so a reader that takes
 * CLOCK_MONOTONIC when its callback runs gets the write -> callback latency
 * (Neovim's vim.loop.hrtime() and libuv's uv_hrtime() read the same clock).
 * Sleeps to absolute deadlines so the period does not drift.
 * Part of `make bench` (bench/run); written for this project.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int count = argc > 1 ? atoi(argv[1]) : 200;
  long period_ns = (argc > 2 ? atol(argv[2]) : 10) * 1000000L;
  struct timespec next;
  clock_gettime(CLOCK_MONOTONIC, &next);
  for (int i = 0; i < count; i++) {
    next.tv_nsec += period_ns;
    while (next.tv_nsec >= 1000000000L) {
      next.tv_nsec -= 1000000000L;
      next.tv_sec++;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL) != 0) {
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    char line[81];
    int n = snprintf(line, sizeof(line), "%lld ", (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
    memset(line + n, '.', 79 - n);
    line[79] = '\n';
    if (write(1, line, 80) != 80) return 1;
  }
  return 0;
}
