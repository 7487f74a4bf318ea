/* base/queue.h — intrusive circular doubly-linked list.
 *
 * Thread: none of its own; the owner of a list decides who may touch it.
 *
 *   pr_queue_t head;  pr_queue_init(&head);
 *   struct item { pr_queue_t node; ... };
 *   pr_queue_push(&head, &it->node);
 *   struct item *x = PR_QUEUE_DATA(pr_queue_head(&head), struct item, node);
 *
 * An empty list is a head whose next and prev point at itself. A node that is
 * not on any list should be initialised with pr_queue_init so pr_queue_remove
 * on it is harmless.
 */
#ifndef PR_QUEUE_H
#define PR_QUEUE_H

#include <stddef.h>

typedef struct pr_queue {
  struct pr_queue *next;
  struct pr_queue *prev;
} pr_queue_t;

#define PR_QUEUE_DATA(ptr, type, field) ((type *)((char *)(ptr)-offsetof(type, field)))

#define PR_QUEUE_FOREACH(q, h) for ((q) = (h)->next; (q) != (h); (q) = (q)->next)

static inline void pr_queue_init(pr_queue_t *q) { q->next = q->prev = q; }

static inline int pr_queue_empty(const pr_queue_t *q) { return q->next == q; }

static inline pr_queue_t *pr_queue_head(const pr_queue_t *q) { return q->next; }

/* Append `n` at the tail of `h`. */
static inline void pr_queue_push(pr_queue_t *h, pr_queue_t *n) {
  n->next = h;
  n->prev = h->prev;
  h->prev->next = n;
  h->prev = n;
}

/* Unlink `n` and leave it as an empty list of its own. */
static inline void pr_queue_remove(pr_queue_t *n) {
  n->prev->next = n->next;
  n->next->prev = n->prev;
  n->next = n->prev = n;
}

/* Move every node of `src` to the tail of `dst`; `src` ends empty. */
static inline void pr_queue_move(pr_queue_t *src, pr_queue_t *dst) {
  if (pr_queue_empty(src)) return;
  src->next->prev = dst->prev;
  dst->prev->next = src->next;
  src->prev->next = dst;
  dst->prev = src->prev;
  pr_queue_init(src);
}

#endif
