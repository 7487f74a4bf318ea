/* engine/secrets.c — environment policy (env_allow, secrets) and output masking.
 *
 * Thread: see secrets.h (masking on the engine thread, building where the
 * execution is built). A masker belongs to one execution and is touched by
 * one thread at a time: built, handed over whole in START, then used only by
 * the engine thread.
 *
 * Masking scans the held-back tail plus the new bytes once. At each position
 * whose byte starts some secret, the secrets are tried longest first: a
 * whole match is replaced by "***"; a match cut off by the end of the data
 * holds everything from there back until more bytes (or the end) arrive.
 */
#include "engine/secrets.h"

#include <stdlib.h>
#include <string.h>

#include "include/proctor.h"

#define MASK "***"
#define MASK_LEN 3

typedef struct {
  char *p;
  size_t len;
} value_t;

struct pr_secrets {
  value_t *v;            /* longest first */
  size_t nv, maxlen;
  unsigned char first[256]; /* 1 when some value starts with that byte */
  char *hold[PR_NSTREAM];   /* maxlen bytes each, allocated on first use */
  size_t nhold[PR_NSTREAM];
  char *work, *out;         /* scratch: held + new bytes, and the masked result */
  size_t cap;               /* bytes allocated for work and out each */
};

static int name_eq(const char *kv, const char *k, size_t klen) {
  return strncmp(kv, k, klen) == 0 && kv[klen] == '=';
}

static size_t key_len(const char *kv) {
  const char *eq = strchr(kv, '=');
  return eq ? (size_t)(eq - kv) : strlen(kv);
}

int pr_secrets_check(const pr_spec_t *s) {
  for (size_t i = 0; i < s->nsecrets; i++) {
    const char *kv = s->secrets ? s->secrets[i] : NULL;
    if (kv == NULL) return PR_EINVAL;
    const char *eq = strchr(kv, '=');
    if (eq == NULL || eq == kv || eq[1] == 0 || strlen(eq + 1) > PR_SECRET_MAX) return PR_EINVAL;
    size_t kl = (size_t)(eq - kv);
    for (size_t k = 0; k < s->envc; k++)
      if (s->env[k] && name_eq(s->env[k], kv, kl)) return PR_EINVAL;
  }
  for (size_t i = 0; i < s->nallow; i++) {
    const char *k = s->env_allow[i];
    if (k == NULL || k[0] == 0 || strchr(k, '=')) return PR_EINVAL;
  }
  return 0;
}

int pr_env_inherits(const pr_spec_t *s, const char *kv, size_t klen) {
  for (size_t i = 0; i < s->nsecrets; i++)
    if (name_eq(s->secrets[i], kv, klen)) return 0; /* the secret replaces it */
  if (s->env_allow == NULL) return 1;
  for (size_t i = 0; i < s->nallow; i++)
    if (strlen(s->env_allow[i]) == klen && strncmp(s->env_allow[i], kv, klen) == 0) return 1;
  return 0;
}

int pr_env_keys(const char *p, size_t len, size_t skip, char **keys, size_t *klen) {
  *keys = NULL;
  *klen = 0;
  size_t at = 0;
  for (size_t i = 0; i < skip && at < len; i++) at += strnlen(p + at, len - at) + 1;
  static const char tag[] = "PROCTOR_JOB"; /* the shepherd tags every child with it */
  char *k = malloc(len - (at < len ? at : len) + sizeof(tag));
  if (k == NULL) return PR_ENOMEM;
  size_t n = 0;
  while (at < len) {
    size_t l = strnlen(p + at, len - at);
    size_t kl = key_len(p + at);
    if (kl > l) kl = l;
    memcpy(k + n, p + at, kl);
    n += kl;
    k[n++] = 0;
    at += l + 1;
  }
  memcpy(k + n, tag, sizeof(tag));
  n += sizeof(tag);
  *keys = k;
  *klen = n;
  return 0;
}

static int by_len_desc(const void *a, const void *b) {
  size_t x = ((const value_t *)a)->len, y = ((const value_t *)b)->len;
  return x < y ? 1 : x > y ? -1 : 0;
}

int pr_secrets_new(const pr_spec_t *s, pr_secrets_t **out) {
  *out = NULL;
  if (s->nsecrets == 0) return 0;
  pr_secrets_t *m = calloc(1, sizeof(*m));
  if (m == NULL || (m->v = calloc(s->nsecrets, sizeof(value_t))) == NULL) goto fail;
  for (size_t i = 0; i < s->nsecrets; i++) {
    const char *val = strchr(s->secrets[i], '=') + 1;
    value_t *v = &m->v[m->nv];
    v->len = strlen(val);
    int dup = 0; /* two names with one value: mask it once */
    for (size_t k = 0; k < m->nv && !dup; k++)
      dup = m->v[k].len == v->len && memcmp(m->v[k].p, val, v->len) == 0;
    if (dup) continue;
    if ((v->p = malloc(v->len)) == NULL) goto fail;
    memcpy(v->p, val, v->len);
    m->nv++;
    m->first[(unsigned char)val[0]] = 1;
    if (v->len > m->maxlen) m->maxlen = v->len;
  }
  qsort(m->v, m->nv, sizeof(value_t), by_len_desc);
  *out = m;
  return 0;
fail:
  pr_secrets_free(m);
  return PR_ENOMEM;
}

static void wipe_free(void *p, size_t n) {
  if (p == NULL) return;
  volatile char *v = p;
  while (n--) *v++ = 0;
  free(p);
}

void pr_secrets_free(pr_secrets_t *m) {
  if (m == NULL) return;
  for (size_t i = 0; i < m->nv; i++) wipe_free(m->v[i].p, m->v[i].len);
  free(m->v);
  for (int i = 0; i < PR_NSTREAM; i++) wipe_free(m->hold[i], m->maxlen);
  wipe_free(m->work, m->cap);
  wipe_free(m->out, m->cap);
  free(m);
}

/* Scan w[0..n): write the masked bytes to out (room for n bytes + n/1 masks:
 * "***" never outgrows a value of 3+ bytes, and shorter values are bounded
 * by 3 bytes out per byte in). Returns the bytes written; *held = where the
 * held-back tail starts (n when nothing is held). `final`: hold nothing. */
static size_t scan(const pr_secrets_t *m, const char *w, size_t n, char *out, int final,
                   size_t *held) {
  size_t i = 0, o = 0;
  *held = n;
  while (i < n) {
    if (!m->first[(unsigned char)w[i]]) { /* copy the run of bytes no secret starts with */
      size_t j = i + 1;
      while (j < n && !m->first[(unsigned char)w[j]]) j++;
      memcpy(out + o, w + i, j - i);
      o += j - i;
      i = j;
      continue;
    }
    size_t full = 0;
    int partial = 0;
    for (size_t k = 0; k < m->nv && !full && !partial; k++) {
      const value_t *v = &m->v[k];
      if (n - i >= v->len) full = memcmp(w + i, v->p, v->len) == 0 ? v->len : 0;
      else partial = !final && memcmp(w + i, v->p, n - i) == 0;
    }
    if (partial) {
      *held = i;
      return o;
    }
    if (full) {
      memcpy(out + o, MASK, MASK_LEN);
      o += MASK_LEN;
      i += full;
    } else {
      out[o++] = w[i++];
    }
  }
  return o;
}

static int reserve(pr_secrets_t *m, size_t n) {
  size_t need = n * MASK_LEN + 16;
  if (need <= m->cap) return 0;
  size_t cap = m->cap ? m->cap : 4096;
  while (cap < need) cap *= 2;
  char *w = malloc(cap), *o = malloc(cap);
  if (w == NULL || o == NULL) {
    free(w);
    free(o);
    return PR_ENOMEM;
  }
  wipe_free(m->work, m->cap);
  wipe_free(m->out, m->cap);
  m->work = w;
  m->out = o;
  m->cap = cap;
  return 0;
}

const char *pr_secrets_mask(pr_secrets_t *m, int stream, const char *p, size_t *n) {
  size_t nh = m->nhold[stream];
  size_t total = nh + (p ? *n : 0);
  if (total == 0 || (p == NULL && nh == 0)) {
    *n = 0;
    return NULL;
  }
  if (m->hold[stream] == NULL && (m->hold[stream] = malloc(m->maxlen)) == NULL) {
    *n = 0; /* out of memory: losing output beats leaking a secret */
    return NULL;
  }
  if (reserve(m, total) != 0) {
    *n = 0;
    return NULL;
  }
  memcpy(m->work, m->hold[stream], nh);
  if (p) memcpy(m->work + nh, p, *n);
  size_t held;
  size_t o = scan(m, m->work, total, m->out, p == NULL, &held);
  m->nhold[stream] = total - held; /* < maxlen: a partial match is shorter than its value */
  memcpy(m->hold[stream], m->work + held, total - held);
  *n = o;
  return o ? m->out : NULL;
}

char *pr_secrets_scrub(const pr_secrets_t *m, const char *s) {
  size_t n = strlen(s);
  char *out = malloc(n * MASK_LEN + 1);
  if (out == NULL) return NULL;
  size_t held, o = m ? scan(m, s, n, out, 1, &held) : n;
  if (m == NULL) memcpy(out, s, n);
  out[o] = 0;
  return out;
}
