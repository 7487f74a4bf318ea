/* base/idmap.c — 64-bit id → pointer map. See idmap.h.
 *
 * Thread: the owner's.
 */
#include "base/idmap.h"

#include <stdlib.h>

#include "include/proctor.h"

#define MIN_CAP 16

static size_t home(const pr_idmap_t *m, uint64_t key) {
  return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & (m->cap - 1); /* Fibonacci hashing */
}

void pr_idmap_init(pr_idmap_t *m) {
  m->slots = NULL;
  m->cap = m->count = 0;
}

void pr_idmap_destroy(pr_idmap_t *m) {
  free(m->slots);
  pr_idmap_init(m);
}

void *pr_idmap_get(const pr_idmap_t *m, uint64_t key) {
  if (m->count == 0) return NULL;
  for (size_t i = home(m, key);; i = (i + 1) & (m->cap - 1)) {
    const pr_idmap_slot_t *s = &m->slots[i];
    if (s->val == NULL) return NULL;
    if (s->key == key) return s->val;
  }
}

/* Insert into a table known to have a free slot and not to hold `key`. */
static void place(pr_idmap_t *m, uint64_t key, void *val) {
  size_t i = home(m, key);
  while (m->slots[i].val != NULL) i = (i + 1) & (m->cap - 1);
  m->slots[i].key = key;
  m->slots[i].val = val;
  m->count++;
}

static int grow(pr_idmap_t *m) {
  size_t cap = m->cap ? m->cap * 2 : MIN_CAP;
  pr_idmap_slot_t *old = m->slots, *slots = calloc(cap, sizeof(*slots));
  if (slots == NULL) return PR_ENOMEM;
  size_t ocap = m->cap;
  m->slots = slots;
  m->cap = cap;
  m->count = 0;
  for (size_t i = 0; i < ocap; i++)
    if (old[i].val) place(m, old[i].key, old[i].val);
  free(old);
  return 0;
}

int pr_idmap_put(pr_idmap_t *m, uint64_t key, void *val) {
  if (m->count) {
    for (size_t i = home(m, key);; i = (i + 1) & (m->cap - 1)) {
      pr_idmap_slot_t *s = &m->slots[i];
      if (s->val == NULL) break;
      if (s->key == key) {
        s->val = val;
        return 0;
      }
    }
  }
  if ((m->count + 1) * 2 > m->cap && grow(m) != 0 && m->count + 1 >= m->cap) return PR_ENOMEM;
  place(m, key, val);
  return 0;
}

void *pr_idmap_del(pr_idmap_t *m, uint64_t key) {
  if (m->count == 0) return NULL;
  size_t mask = m->cap - 1, i = home(m, key);
  while (m->slots[i].val != NULL && m->slots[i].key != key) i = (i + 1) & mask;
  void *val = m->slots[i].val;
  if (val == NULL) return NULL;
  /* Backward shift: pull later entries of the probe run into the hole when
   * their home does not lie (cyclically) after the hole. */
  for (size_t j = (i + 1) & mask; m->slots[j].val != NULL; j = (j + 1) & mask) {
    size_t h = home(m, m->slots[j].key);
    if (((j - h) & mask) >= ((j - i) & mask)) {
      m->slots[i] = m->slots[j];
      i = j;
    }
  }
  m->slots[i].val = NULL;
  m->count--;
  return val;
}

void *pr_idmap_next(const pr_idmap_t *m, size_t *at, uint64_t *key) {
  for (; *at < m->cap; (*at)++) {
    const pr_idmap_slot_t *s = &m->slots[*at];
    if (s->val) {
      (*at)++;
      if (key) *key = s->key;
      return s->val;
    }
  }
  return NULL;
}
