/* engine/vault.c — the secrets of an execution read from a store at spawn
 * time: their sources, their values, what they give the spawn and the masker,
 * and their wipe. A leaf: the reads are engine/secret_source.c's. See vault.h.
 *
 * Thread: see vault.h.
 */
#include "engine/vault.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/locked.h"
#include "engine/secrets.h"

/* ---- building (any thread) ------------------------------------------------------- */

static int valid_name(const char *k) { return k && *k && strchr(k, '=') == NULL; }

int pr_vault_check(const pr_spec_t *s) {
  for (size_t i = 0; i < s->nsources; i++) {
    const pr_secret_source_t *src = s->sources ? &s->sources[i] : NULL;
    if (src == NULL || !valid_name(src->name)) return PR_EINVAL;
    size_t kl = strlen(src->name);
    for (size_t k = 0; k < s->envc; k++)
      if (s->env[k] && strncmp(s->env[k], src->name, kl) == 0 && s->env[k][kl] == '=')
        return PR_EINVAL;
    for (size_t k = 0; k < s->nsecrets; k++)
      if (s->secrets[k] && strncmp(s->secrets[k], src->name, kl) == 0 && s->secrets[k][kl] == '=')
        return PR_EINVAL;
    for (size_t k = 0; k < i; k++)
      if (strcmp(s->sources[k].name, src->name) == 0) return PR_EINVAL;
    if ((src->store != NULL) == (src->command != NULL)) return PR_EINVAL;
    if (src->store) {
      if (strcmp(src->store, "secret-service") != 0 || src->nattributes == 0) return PR_EINVAL;
      for (size_t k = 0; k < src->nattributes; k++) {
        const char *a = src->attributes[k], *eq = a ? strchr(a, '=') : NULL;
        if (eq == NULL || eq == a) return PR_EINVAL;
      }
    } else {
      if (src->ncommand == 0) return PR_EINVAL;
      for (size_t k = 0; k < src->ncommand; k++)
        if (src->command[k] == NULL) return PR_EINVAL;
    }
  }
  return 0;
}

int pr_vault_names(const pr_spec_t *s, const char *name, size_t klen) {
  for (size_t i = 0; i < s->nsources; i++)
    if (strlen(s->sources[i].name) == klen && strncmp(s->sources[i].name, name, klen) == 0)
      return 1;
  return 0;
}

static void sb_add(pr_buf_t *b, const char *s) { pr_buf_add(b, s, strlen(s) + 1); }

static int copy_entry(pr_vault_entry_t *en, const pr_secret_source_t *src, const char *cwd,
                      char *const *env) {
  if ((en->name = strdup(src->name)) == NULL) return PR_ENOMEM;
  if (src->store) {
    en->store = 1;
    en->nattrs = src->nattributes;
    if ((en->attrs = calloc(2 * en->nattrs + 1, sizeof(char *))) == NULL) return PR_ENOMEM;
    for (size_t k = 0; k < en->nattrs; k++) {
      const char *a = src->attributes[k], *eq = strchr(a, '=');
      if ((en->attrs[2 * k] = strndup(a, (size_t)(eq - a))) == NULL ||
          (en->attrs[2 * k + 1] = strdup(eq + 1)) == NULL)
        return PR_ENOMEM;
    }
    return 0;
  }
  en->argc = src->ncommand;
  if ((en->argv = calloc(en->argc + 1, sizeof(char *))) == NULL) return PR_ENOMEM;
  pr_buf_t b = PR_BUF_INIT(16u << 20);
  sb_add(&b, cwd);
  for (size_t k = 0; k < en->argc; k++) {
    if ((en->argv[k] = strdup(src->command[k])) == NULL) return PR_ENOMEM;
    sb_add(&b, en->argv[k]);
  }
  for (char *const *ep = env; ep && *ep; ep++) sb_add(&b, *ep);
  if (b.err) {
    int rc = b.err;
    pr_buf_free(&b);
    return rc;
  }
  en->plen = b.len;
  en->payload = pr_buf_release(&b);
  return 0;
}

int pr_vault_new(const pr_spec_t *s, const char *cwd, char *const *env, pr_vault_t **out) {
  *out = NULL;
  if (s->nsources == 0) return 0;
  pr_vault_t *v = calloc(1, sizeof(*v));
  if (v == NULL || (v->e = calloc(s->nsources, sizeof(pr_vault_entry_t))) == NULL) {
    free(v);
    return PR_ENOMEM;
  }
  v->n = s->nsources;
  for (size_t i = 0; i < v->n; i++) {
    v->e[i].v = v;
    if (copy_entry(&v->e[i], &s->sources[i], cwd, env) != 0) {
      pr_vault_free(v);
      return PR_ENOMEM;
    }
  }
  *out = v;
  return 0;
}

static void wipe_value(pr_vault_entry_t *en) {
  if (en->value) pr_locked_free(en->value, en->len + 1);
  en->value = NULL;
  en->len = 0;
}

static void free_list(char **l) {
  for (size_t i = 0; l && l[i]; i++) free(l[i]);
  free(l);
}

void pr_vault_free(pr_vault_t *v) {
  if (v == NULL) return;
  for (size_t i = 0; i < v->n; i++) {
    pr_vault_entry_t *en = &v->e[i];
    wipe_value(en);
    pr_keyring_clear(&en->kr);
    free(en->name);
    free_list(en->attrs);
    free_list(en->argv);
    free(en->payload);
  }
  free(v->e);
  free(v->why);
  free(v);
}

int pr_vault_ready(const pr_vault_t *v) {
  for (size_t i = 0; i < v->n; i++)
    if (v->e[i].value == NULL) return 0;
  return 1;
}

int pr_vault_busy(const pr_vault_t *v) { return v->busy > 0; }

const char *pr_vault_pending(const pr_vault_t *v) {
  for (size_t i = 0; v && i < v->n; i++)
    if (v->e[i].state == PR_VE_READING) return v->e[i].name;
  return NULL;
}

size_t pr_vault_env_len(const pr_vault_t *v) {
  size_t n = 0;
  for (size_t i = 0; v && i < v->n; i++)
    if (v->e[i].value) n += strlen(v->e[i].name) + 1 + v->e[i].len + 1;
  return n;
}

void pr_vault_env(const pr_vault_t *v, char *out) {
  for (size_t i = 0; v && i < v->n; i++) {
    const pr_vault_entry_t *en = &v->e[i];
    if (en->value == NULL) continue;
    size_t kl = strlen(en->name);
    memcpy(out, en->name, kl);
    out[kl] = '=';
    memcpy(out + kl + 1, en->value, en->len + 1);
    out += kl + 1 + en->len + 1;
  }
}

int pr_vault_keys(const pr_vault_t *v, char **keys, size_t *klen) {
  size_t add = 0;
  for (size_t i = 0; v && i < v->n; i++) add += strlen(v->e[i].name) + 1;
  if (add == 0) return 0;
  char *k = realloc(*keys, *klen + add);
  if (k == NULL) return PR_ENOMEM;
  for (size_t i = 0; i < v->n; i++) {
    size_t n = strlen(v->e[i].name) + 1;
    memcpy(k + *klen, v->e[i].name, n);
    *klen += n;
  }
  *keys = k;
  return 0;
}

int pr_vault_mask(const pr_vault_t *v, struct pr_secrets **m) {
  for (size_t i = 0; v && i < v->n; i++)
    if (v->e[i].value && pr_secrets_add(m, v->e[i].value, v->e[i].len) != 0) return PR_ENOMEM;
  return 0;
}

void pr_vault_wipe(pr_vault_t *v) {
  for (size_t i = 0; v && i < v->n; i++) wipe_value(&v->e[i]);
}
