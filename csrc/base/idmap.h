/* base/idmap.h — one map from 64-bit ids to pointers (open addressing).
 *
 * Thread: none of its own; the owner of a map decides who may touch it.
 *
 *   pr_idmap_t m;  pr_idmap_init(&m);
 *   pr_idmap_put(&m, id, ptr);  p = pr_idmap_get(&m, id);  pr_idmap_del(&m, id);
 *   pr_idmap_destroy(&m);
 *
 * Keys are any uint64_t, values any non-NULL pointer (NULL marks a free slot).
 * Linear probing with a power-of-two table kept at most half full, and
 * backward-shift deletion (no tombstones), so lookups stay short however many
 * ids come and go. The table starts at 16 slots on the first put.
 */
#ifndef PR_IDMAP_H
#define PR_IDMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  uint64_t key;
  void *val; /* NULL: free slot */
} pr_idmap_slot_t;

typedef struct {
  pr_idmap_slot_t *slots; /* cap entries */
  size_t cap;             /* 0 or a power of two */
  size_t count;           /* slots in use */
} pr_idmap_t;

/* pr_idmap_init: an empty map (allocates nothing). */
void pr_idmap_init(pr_idmap_t *m);

/* pr_idmap_destroy: free the table (not the values); the map is empty again. */
void pr_idmap_destroy(pr_idmap_t *m);

/* pr_idmap_get: the value of `key`, or NULL. */
void *pr_idmap_get(const pr_idmap_t *m, uint64_t key);

/* pr_idmap_put: set `key` to `val` (non-NULL), replacing any value it had.
 * Returns 0, or PR_ENOMEM when the table is full and cannot grow (a table
 * that cannot grow past half full keeps taking ids until it is full). */
int pr_idmap_put(pr_idmap_t *m, uint64_t key, void *val);

/* pr_idmap_del: remove `key`; returns the value it had, or NULL. */
void *pr_idmap_del(pr_idmap_t *m, uint64_t key);

/* pr_idmap_next: iterate: `*at` starts at 0; returns the next value (its key
 * in *key when key is not NULL), or NULL at the end. The map must not change
 * during an iteration, except pr_idmap_del of the key just returned (after
 * which the walk may see an entry twice: callers that delete restart). */
void *pr_idmap_next(const pr_idmap_t *m, size_t *at, uint64_t *key);

#endif
