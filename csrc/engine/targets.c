/* engine/targets.c — an engine's targets: name → link (a pr_sup_t whose process
 * runs the target's transport). See targets.h.
 *
 * Thread: engine (pr_targets_destroy: after the engine thread ended).
 */
#include "engine/targets.h"

#include <stdlib.h>
#include <string.h>

#include "include/proctor.h"

pr_sup_t *pr_targets_link(pr_target_t **list, const pr_sup_t *local, const char *name,
                          const char *transport, const pr_sup_ops_t *ops, void *arg) {
  for (pr_target_t *t = *list; t; t = t->next)
    if (strcmp(t->name, name) == 0) return &t->sup;
  pr_target_t *t = calloc(1, sizeof(*t));
  if (t == NULL) return NULL;
  if ((t->name = strdup(name)) == NULL ||
      pr_sup_init(&t->sup, local->loop, local->path, ops, arg) != 0 ||
      (t->sup.link_cmd = strdup(transport)) == NULL) {
    pr_sup_destroy(&t->sup);
    free(t->name);
    free(t);
    return NULL;
  }
  t->sup.lost_reason = "target_lost";
  t->next = *list;
  *list = t;
  return &t->sup;
}

void pr_targets_shutdown(pr_target_t *list, int grace_ms, int wait_ms) {
  for (pr_target_t *t = list; t; t = t->next) pr_sup_shutdown(&t->sup, grace_ms, wait_ms);
}

void pr_targets_destroy(pr_target_t **list) {
  while (*list) {
    pr_target_t *t = *list;
    *list = t->next;
    pr_sup_destroy(&t->sup);
    free(t->name);
    free(t);
  }
}
