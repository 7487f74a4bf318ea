/* flood.c — write BYTES of 80-byte numbered lines to stdout, as fast as the pipe takes them.
 *
 *   flood BYTES
 *
 * Line i (from 0) is "%010d" then '.' padding to 79 bytes then '\n', so a
 * consumer can check the last line number it shows (BYTES/80 - 1) and count
 * lines. BYTES is rounded down to a multiple of 80. Writes in 64 KiB blocks.
 * Part of `make bench` (bench/run); written for this project.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LINE 80
#define BLOCK_LINES 819 /* 819 * 80 = 65520 bytes per write */

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: flood BYTES\n");
    return 2;
  }
  long long lines = atoll(argv[1]) / LINE;
  static char buf[BLOCK_LINES * LINE];
  long long i = 0;
  while (i < lines) {
    size_t n = 0;
    for (int k = 0; k < BLOCK_LINES && i < lines; k++, i++) {
      char *p = buf + n;
      int w = snprintf(p, LINE, "%010lld", i);
      memset(p + w, '.', LINE - 1 - w);
      p[LINE - 1] = '\n';
      n += LINE;
    }
    for (size_t off = 0; off < n;) {
      ssize_t r = write(1, buf + off, n - off);
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return 1;
      off += (size_t)r;
    }
  }
  return 0;
}
