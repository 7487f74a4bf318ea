/* store/frame.c — the history file's frames on disk (see frame.h): the
 * checksum, the frame reader, and reading a whole file.
 *
 * Thread: any (pure functions over bytes).
 */
#include "store/frame.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

uint32_t pr_frame_sum(const char *p, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 16777619u;
  return h;
}

/* One pread of a history file reads at most this much: one read of a whole
 * 15 MB file into fresh memory kept a 2-core machine's other threads (the
 * editor's main thread) off the CPU for 25 ms at a time. */
#define PR_FRAME_READ_STEP (256u << 10)

char *pr_frame_read_file(int fd, size_t *n, const int *stop) {
  struct stat st;
  *n = 0;
  if (fstat(fd, &st) != 0) return NULL;
  char *p = malloc((size_t)st.st_size + 1);
  size_t got = 0;
  while (p && got < (size_t)st.st_size) {
    if (stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
      free(p);
      return NULL;
    }
    size_t want = (size_t)st.st_size - got;
    if (want > PR_FRAME_READ_STEP) want = PR_FRAME_READ_STEP;
    ssize_t r = pread(fd, p + got, want, (off_t)got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += (size_t)r;
  }
  *n = got;
  return p;
}

/* Read a big-endian unsigned of `n` bytes. */
static uint64_t be(const unsigned char *u, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = v << 8 | u[i];
  return v;
}

int pr_frame_at(const char *p, size_t len, size_t off, const char **body, size_t *blen,
                size_t *end) {
  const unsigned char *u = (const unsigned char *)p + off;
  size_t n = len - off, i = 2;
  if (n < 2) return n && u[0] != 0x92 ? PR_FRAME_BAD : PR_FRAME_SHORT;
  if (u[0] != 0x92) return PR_FRAME_BAD;
  uint64_t sum;
  int w = u[1] <= 0x7f   ? 0
          : u[1] == 0xcc ? 1
          : u[1] == 0xcd ? 2
          : u[1] == 0xce ? 4
          : u[1] == 0xcf ? 8
                         : -1;
  if (w < 0) return PR_FRAME_BAD;
  if (n < i + (size_t)w + 1) return PR_FRAME_SHORT;
  sum = w ? be(u + i, w) : u[1];
  i += (size_t)w;
  int lw = u[i] == 0xc4 ? 1 : u[i] == 0xc5 ? 2 : u[i] == 0xc6 ? 4 : -1;
  if (lw < 0 || sum > UINT32_MAX) return PR_FRAME_BAD;
  i++;
  if (n < i + (size_t)lw) return PR_FRAME_SHORT;
  uint64_t bl = be(u + i, lw);
  i += (size_t)lw;
  if (bl > n - i) return PR_FRAME_SHORT;
  *body = p + off + i;
  *blen = (size_t)bl;
  *end = off + i + (size_t)bl;
  return pr_frame_sum(*body, *blen) == (uint32_t)sum ? PR_FRAME_OK : PR_FRAME_BADSUM;
}
