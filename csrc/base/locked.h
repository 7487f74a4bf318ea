/* base/locked.h — memory for secret values: locked in RAM (never swapped),
 * left out of core dumps, wiped before it is given back.
 *
 * Thread: any (each block belongs to whoever allocated it).
 */
#ifndef PR_LOCKED_H
#define PR_LOCKED_H

#include <stddef.h>

/* pr_locked_alloc: a zeroed block of `n` bytes (n > 0) in pages of its own,
 * mlock'ed and MADV_DONTDUMP. NULL (errno set: ENOMEM, or EPERM/ENOMEM from
 * mlock when RLIMIT_MEMLOCK is reached) when it cannot be had. */
void *pr_locked_alloc(size_t n);

/* pr_locked_free: wipe the `n` bytes of a block from pr_locked_alloc, unlock
 * and unmap it. NULL is a no-op. */
void pr_locked_free(void *p, size_t n);

/* pr_wipe: zero n bytes in a way the compiler keeps. */
void pr_wipe(void *p, size_t n);

#endif
