/* base/locked.c — locked, undumpable, wiped memory for secret values.
 *
 * Thread: any.
 */
#include "base/locked.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static size_t span(size_t n) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  return (n + page - 1) / page * page;
}

void pr_wipe(void *p, size_t n) {
  if (p && n) explicit_bzero(p, n);
}

void *pr_locked_alloc(size_t n) {
  if (n == 0) {
    errno = EINVAL;
    return NULL;
  }
  size_t len = span(n);
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  if (mlock(p, len) != 0) {
    int err = errno;
    munmap(p, len);
    errno = err;
    return NULL;
  }
  madvise(p, len, MADV_DONTDUMP); /* best effort: older kernels lack it */
  return p;
}

void pr_locked_free(void *p, size_t n) {
  if (p == NULL) return;
  size_t len = span(n ? n : 1);
  explicit_bzero(p, len);
  munlock(p, len);
  munmap(p, len);
}
