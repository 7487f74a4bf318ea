/* text.c — masking of secret values, glob matching for the command
 * policy, and the names the environment policy never admits. (UTF-8
 * boundaries and repair are base/utf8.c.)
 *
 * Thread: main. Leaves: know nothing of the protocol.
 */
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "mcp.h"

/* ---- secrets ------------------------------------------------------------------------- */

static char **secrets;
static size_t nsecrets;

int mc_mask_add(const char *value) {
  if (value == NULL || *value == 0) return 0;
  char **v = realloc(secrets, (nsecrets + 1) * sizeof(*v));
  if (v == NULL) return -1;
  secrets = v;
  char *copy = strdup(value);
  if (copy == NULL) return -1;
  /* Longest first, so a value that contains another is masked whole. */
  size_t at = nsecrets;
  while (at > 0 && strlen(secrets[at - 1]) < strlen(copy)) {
    secrets[at] = secrets[at - 1];
    at--;
  }
  secrets[at] = copy;
  nsecrets++;
  return 0;
}

/* A copy of s with every secret value replaced by ***, or NULL when s has none. */
static char *mask_str(const char *s) {
  char *cur = NULL;
  for (size_t k = 0; k < nsecrets; k++) {
    const char *src = cur ? cur : s;
    const char *hit = strstr(src, secrets[k]);
    if (hit == NULL) continue;
    size_t vlen = strlen(secrets[k]), count = 0;
    for (const char *h = hit; h; h = strstr(h + vlen, secrets[k])) count++;
    size_t len = strlen(src);
    char *out = malloc(len - count * vlen + count * 3 + 1);
    if (out == NULL) continue; /* out of memory: the value stays; callers drop the result */
    char *o = out;
    const char *at = src;
    for (const char *h = hit; h; h = strstr(at, secrets[k])) {
      memcpy(o, at, (size_t)(h - at));
      o += h - at;
      memcpy(o, "***", 3);
      o += 3;
      at = h + vlen;
    }
    strcpy(o, at);
    free(cur);
    cur = out;
  }
  return cur;
}

void mc_mask_json(cJSON *c) {
  if (nsecrets == 0 || c == NULL) return;
  if (c->string) {
    char *m = mask_str(c->string);
    if (m) {
      if (!(c->type & cJSON_StringIsConst)) free(c->string);
      c->type &= ~cJSON_StringIsConst;
      c->string = m;
    }
  }
  if (cJSON_IsString(c) && c->valuestring) {
    char *m = mask_str(c->valuestring);
    if (m) {
      if (!(c->type & cJSON_IsReference)) free(c->valuestring);
      c->type &= ~cJSON_IsReference;
      c->valuestring = m;
    }
  }
  for (cJSON *k = c->child; k; k = k->next) mc_mask_json(k);
}

int mc_glob(const char *pat, const char *s) { return fnmatch(pat, s, 0) == 0; }

/* ---- environment policy ---------------------------------------------------------------------- */

int mc_env_never(const char *name) {
  return strcmp(name, "PATH") == 0 || strncmp(name, "LD_", 3) == 0 ||
         strcmp(name, "BASH_ENV") == 0 || strcmp(name, "ENV") == 0;
}
