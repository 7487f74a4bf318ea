/* base/buf.h — one growable byte buffer.
 *
 * Thread: none of its own; the owner of a buffer decides who may touch it.
 *
 *   pr_buf_t b = PR_BUF_INIT(max);      max: most bytes it may hold (0 = no cap)
 *   pr_buf_add(&b, p, n);               ... errors are sticky: check b.err once
 *   if (b.err) ...; use b.p[0..b.len); pr_buf_free(&b);
 *
 * A buffer grows by doubling from 4 KiB (never past `max`). Once an add fails
 * (PR_ENOMEM, or PR_ETOOBIG past `max`) every later add is a no-op and b.err
 * keeps the first error, so a builder checks once at the end.
 */
#ifndef PR_BUF_H
#define PR_BUF_H

#include <stddef.h>

typedef struct {
  char *p;    /* len bytes, malloc'd (NULL while empty) */
  size_t len; /* bytes held */
  size_t cap; /* bytes allocated */
  size_t max; /* most bytes it may hold; 0 = no cap */
  int err;    /* 0, or the first error: PR_ENOMEM, PR_ETOOBIG */
  int wipe;   /* set by the owner: growth and pr_buf_free zero the bytes they
               * leave behind (a buffer that holds secret values) */
} pr_buf_t;

#define PR_BUF_INIT(maxbytes) \
  { NULL, 0, 0, (maxbytes), 0 }

/* pr_buf_reserve: room for `n` more bytes. Returns 0 or the (sticky) error. */
int pr_buf_reserve(pr_buf_t *b, size_t n);

/* pr_buf_presize: give an empty buffer exactly `n` bytes of room (not the
 * first 4 KiB), for a builder that knows its size: it then touches no more
 * fresh memory than it fills (at most `max`). Later growth doubles from
 * there. A buffer that holds bytes is left as it is. Returns 0 or the
 * (sticky) error. */
int pr_buf_presize(pr_buf_t *b, size_t n);

/* pr_buf_add: append `n` bytes. Returns 0 or the (sticky) error. */
int pr_buf_add(pr_buf_t *b, const void *p, size_t n);

/* pr_buf_release: take the bytes (the caller frees them); b is empty again. */
char *pr_buf_release(pr_buf_t *b);

/* pr_buf_free: free the bytes; b is empty again (err cleared). */
void pr_buf_free(pr_buf_t *b);

#endif
