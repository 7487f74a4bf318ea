/* base/buf.c — one growable byte buffer. See buf.h.
 *
 * Thread: the owner's.
 */
#include "base/buf.h"

#include <stdlib.h>
#include <string.h>

#include "include/proctor.h"

int pr_buf_reserve(pr_buf_t *b, size_t n) {
  if (b->err) return b->err;
  if (n <= b->cap - b->len) return 0;
  if ((b->max && n > b->max - b->len) || n > ((size_t)-1 >> 1) - b->len) return b->err = PR_ETOOBIG;
  size_t cap = b->cap ? b->cap : 4096;
  while (cap < b->len + n) cap *= 2;
  if (b->max && cap > b->max) cap = b->max;
  char *p;
  if (b->wipe && b->p) { /* realloc could leave the old bytes in freed memory */
    if ((p = malloc(cap)) == NULL) return b->err = PR_ENOMEM;
    memcpy(p, b->p, b->len);
    explicit_bzero(b->p, b->cap);
    free(b->p);
  } else if ((p = realloc(b->p, cap)) == NULL) {
    return b->err = PR_ENOMEM;
  }
  b->p = p;
  b->cap = cap;
  return 0;
}

int pr_buf_presize(pr_buf_t *b, size_t n) {
  if (b->err || b->p || n == 0) return b->err;
  if (b->max && n > b->max) n = b->max; /* an add past max fails, not this */
  if ((b->p = malloc(n)) == NULL) return b->err = PR_ENOMEM;
  b->cap = n;
  return 0;
}

int pr_buf_add(pr_buf_t *b, const void *p, size_t n) {
  if (pr_buf_reserve(b, n) != 0) return b->err;
  if (n) memcpy(b->p + b->len, p, n);
  b->len += n;
  return 0;
}

char *pr_buf_release(pr_buf_t *b) {
  char *p = b->p;
  b->p = NULL;
  b->len = b->cap = 0;
  b->err = 0;
  return p;
}

void pr_buf_free(pr_buf_t *b) {
  if (b->wipe && b->p) explicit_bzero(b->p, b->cap);
  free(pr_buf_release(b));
}
