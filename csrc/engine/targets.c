/* engine/targets.c — an engine's targets: name → link (a pr_sup_t whose process
 * runs the target's transport). See targets.h.
 *
 * Thread: engine (pr_targets_destroy: after the engine thread ended); the
 * configured table (pr_targets_configure, pr_targets_lookup): any thread.
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

int pr_targets_close_idle(pr_target_t *list, uint64_t now, uint64_t idle_ms) {
  int up = 0;
  for (pr_target_t *t = list; t; t = t->next) {
    if (!pr_sup_alive(&t->sup) || t->sup.jobs > 0 || !pr_queue_empty(&t->sup.sendq)) {
      t->idle_since = 0;
      up += pr_sup_alive(&t->sup);
      continue;
    }
    if (t->idle_since == 0) t->idle_since = now ? now : 1;
    if (now - t->idle_since >= idle_ms && pr_sup_close_idle(&t->sup) == 0) {
      t->idle_since = 0;
      continue;
    }
    up++;
  }
  return up;
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

/* ---- the configured targets (any thread) --------------------------------------------------- */

static void conf_free(pr_target_conf_t *c) {
  free(c->name);
  free(c->transport);
  free(c->cwd);
  free(c);
}

void pr_targets_confs_init(pr_target_confs_t *t) {
  pthread_mutex_init(&t->mu, NULL);
  t->list = NULL;
}

void pr_targets_confs_free(pr_target_confs_t *t) {
  while (t->list) {
    pr_target_conf_t *c = t->list;
    t->list = c->next;
    conf_free(c);
  }
  pthread_mutex_destroy(&t->mu);
}

int pr_targets_configure(pr_target_confs_t *t, const char *name, const char *transport,
                         const char *cwd) {
  if (name == NULL || *name == 0 || (transport && *transport == 0)) return PR_EINVAL;
  pr_target_conf_t *n = NULL;
  if (transport) {
    if ((n = calloc(1, sizeof(*n))) == NULL) return PR_ENOMEM;
    n->name = strdup(name);
    n->transport = strdup(transport);
    n->cwd = cwd ? strdup(cwd) : NULL;
    if (n->name == NULL || n->transport == NULL || (cwd && n->cwd == NULL)) {
      conf_free(n);
      return PR_ENOMEM;
    }
  }
  pthread_mutex_lock(&t->mu);
  for (pr_target_conf_t **p = &t->list; *p; p = &(*p)->next)
    if (strcmp((*p)->name, name) == 0) {
      pr_target_conf_t *old = *p;
      *p = old->next;
      conf_free(old);
      break;
    }
  if (n) {
    n->next = t->list;
    t->list = n;
  }
  pthread_mutex_unlock(&t->mu);
  return 0;
}

int pr_targets_lookup(pr_target_confs_t *t, const char *name, char **transport, char **cwd) {
  *transport = *cwd = NULL;
  int rc = PR_ENOENT;
  pthread_mutex_lock(&t->mu);
  for (pr_target_conf_t *c = t->list; c; c = c->next) {
    if (strcmp(c->name, name) != 0) continue;
    *transport = strdup(c->transport);
    *cwd = c->cwd ? strdup(c->cwd) : NULL;
    rc = *transport == NULL || (c->cwd && *cwd == NULL) ? PR_ENOMEM : 0;
    break;
  }
  pthread_mutex_unlock(&t->mu);
  if (rc != 0) {
    free(*transport);
    free(*cwd);
    *transport = *cwd = NULL;
  }
  return rc;
}
