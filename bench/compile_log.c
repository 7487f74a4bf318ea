/* compile_log.c — write about BYTES of a gcc build log to stdout, as fast as
 * the pipe takes it: a compile command per translation unit and, every
 * EVERY-th unit, a warning with gcc's context lines (In function, the source
 * line, the caret). Units cycle over 500 files src/modNNN.c.
 *
 *   compile_log BYTES [EVERY]      (EVERY default 200)
 *
 * At the end it prints "warnings=N" on stderr: what a problem matcher must
 * find. Part of `make bench` (bench/run); written for this project.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char buf[1 << 16];
static size_t used;

static int flush(void) {
  for (size_t off = 0; off < used;) {
    ssize_t r = write(1, buf + off, used - off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    off += (size_t)r;
  }
  used = 0;
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3) {
    fprintf(stderr, "usage: compile_log BYTES [EVERY]\n");
    return 2;
  }
  long long bytes = atoll(argv[1]), every = argc > 2 ? atoll(argv[2]) : 200, total = 0, warnings = 0;
  if (every < 1) every = 1;
  for (long long unit = 1; total < bytes; unit++) {
    char one[1024];
    int m = (int)(unit % 500), line = (int)(unit % 900) + 1, col = (int)(unit % 40) + 5;
    int n = snprintf(one, sizeof(one), "gcc -O2 -g -Wall -Wextra -Isrc/include -c src/mod%03d.c -o build/mod%03d.o\n", m, m);
    if (unit % every == 0) {
      n += snprintf(one + n, sizeof(one) - (size_t)n,
                    "src/mod%03d.c: In function 'f%lld':\n"
                    "src/mod%03d.c:%d:%d: warning: unused variable 'x%lld' [-Wunused-variable]\n"
                    "  %d |   int x%lld = 3;\n"
                    "      |       ^~~\n",
                    m, unit, m, line, col, unit, line, unit);
      warnings++;
    }
    if (used + (size_t)n > sizeof(buf) && flush() != 0) return 1;
    memcpy(buf + used, one, (size_t)n);
    used += (size_t)n;
    total += n;
  }
  if (flush() != 0) return 1;
  fprintf(stderr, "warnings=%lld\n", warnings);
  return 0;
}
