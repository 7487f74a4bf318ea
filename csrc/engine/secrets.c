/* engine/secrets.c — environment policy (env_allow, secrets) and output masking.
 *
 * Thread: see secrets.h (masking on the engine thread, building where the
 * execution is built). A masker belongs to one execution and is touched by
 * one thread at a time: built, handed over whole in START, then used only by
 * the engine thread.
 *
 * Masking scans the held-back tail plus the new bytes once. At each position
 * whose byte may start some secret, the secrets are tried longest first: a
 * whole match is replaced by "***"; a match cut off by the end of the data
 * holds everything from there back until more bytes (or the end) arrive.
 *
 * A secret is matched as it may be spelled, not only byte for byte: any of
 * its characters may appear as a JSON escape (\" \\ \/ \n \t ..., \u00e9,
 * a surrogate pair: what a JSON encoder writes), and "\n" as "\r\n" (a
 * terminal's ONLCR turns every newline of a pty's output into that). So a
 * spelled secret is up to 6 bytes per byte long: the hold is 6 × the longest.
 *
 * Decoded protocol values (a worker's replies) are masked apart, value by
 * value (pr_secrets_mask_json): masking a protocol's raw bytes would break
 * its framing.
 */
#include "engine/secrets.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/locked.h"
#include "include/proctor.h"

#define MASK "***"
#define MASK_LEN 3
#define SPELL_MAX 6 /* bytes a secret's byte may take in the output (\u00XX) */
#define PARTIAL SIZE_MAX

typedef struct {
  char *p;
  size_t len;
  int locked; /* p is pr_locked_alloc'ed (else malloc'ed: locking failed for a given value) */
} value_t;

struct pr_secrets {
  value_t *v; /* longest first */
  size_t nv, maxlen;
  unsigned char first[256]; /* 1 when a spelled value may start with that byte */
  size_t holdcap;           /* SPELL_MAX × maxlen + 16 */
  char *hold[PR_NSTREAM];   /* holdcap bytes each, allocated on first use */
  size_t nhold[PR_NSTREAM];
  char *work, *out; /* scratch: held + new bytes, and the masked result */
  size_t cap;       /* bytes allocated for work and out each */
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

static void wipe_free(void *p, size_t n);

/* Add one value of len bytes (a second name with the same value adds
 * nothing): a locked copy, or with need_lock = 0 a plain one when locking
 * fails. 0 or PR_ENOMEM. */
static int add_value(pr_secrets_t *m, const char *val, size_t len, int need_lock) {
  for (size_t k = 0; k < m->nv; k++)
    if (m->v[k].len == len && memcmp(m->v[k].p, val, len) == 0) return 0;
  value_t *nv = realloc(m->v, (m->nv + 1) * sizeof(*nv));
  if (nv == NULL) return PR_ENOMEM;
  m->v = nv;
  value_t *v = &m->v[m->nv];
  v->len = len;
  v->locked = (v->p = pr_locked_alloc(len)) != NULL;
  if (!v->locked && (need_lock || (v->p = malloc(len)) == NULL)) return PR_ENOMEM;
  memcpy(v->p, val, len);
  m->nv++;
  m->first[(unsigned char)val[0]] = 1;
  if (val[0] == '\n') m->first['\r'] = 1;
  m->first['\\'] = 1; /* any character may be written as a JSON escape */
  if (len > m->maxlen) m->maxlen = len;
  size_t cap = SPELL_MAX * m->maxlen + 16;
  for (int i = 0; i < PR_NSTREAM && cap > m->holdcap; i++) { /* held bytes move to a larger hold */
    if (m->hold[i] == NULL) continue;
    char *h = malloc(cap);
    if (h == NULL) return PR_ENOMEM;
    memcpy(h, m->hold[i], m->nhold[i]);
    wipe_free(m->hold[i], m->holdcap);
    m->hold[i] = h;
  }
  if (cap > m->holdcap) m->holdcap = cap;
  qsort(m->v, m->nv, sizeof(value_t), by_len_desc);
  return 0;
}

int pr_secrets_new(const pr_spec_t *s, pr_secrets_t **out) {
  *out = NULL;
  if (s->nsecrets == 0) return 0;
  pr_secrets_t *m = calloc(1, sizeof(*m));
  if (m == NULL) return PR_ENOMEM;
  for (size_t i = 0; i < s->nsecrets; i++) {
    const char *val = strchr(s->secrets[i], '=') + 1;
    if (add_value(m, val, strlen(val), 0) != 0) {
      pr_secrets_free(m);
      return PR_ENOMEM;
    }
  }
  *out = m;
  return 0;
}

int pr_secrets_add(pr_secrets_t **mp, const char *val, size_t len) {
  if (*mp == NULL && (*mp = calloc(1, sizeof(**mp))) == NULL) return PR_ENOMEM;
  return len ? add_value(*mp, val, len, 1) : 0;
}

static void wipe_free(void *p, size_t n) {
  if (p == NULL) return;
  volatile char *v = p;
  while (n--) *v++ = 0;
  free(p);
}

void pr_secrets_free(pr_secrets_t *m) {
  if (m == NULL) return;
  for (size_t i = 0; i < m->nv; i++) {
    if (m->v[i].locked) pr_locked_free(m->v[i].p, m->v[i].len);
    else wipe_free(m->v[i].p, m->v[i].len);
  }
  free(m->v);
  for (int i = 0; i < PR_NSTREAM; i++) wipe_free(m->hold[i], m->holdcap);
  wipe_free(m->work, m->cap);
  wipe_free(m->out, m->cap);
  free(m);
}

static int hexval(unsigned char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* The 4 hex digits at w[0..n): the code unit, -1 when not hex, -2 when the
 * data ends first. */
static long hex4(const unsigned char *w, size_t n) {
  long v = 0;
  for (size_t i = 0; i < 4; i++) {
    if (i >= n) return -2;
    int h = hexval(w[i]);
    if (h < 0) return -1;
    v = v << 4 | h;
  }
  return v;
}

/* The JSON escape at w[0..n) (w[0] is a backslash): its character as UTF-8
 * in out, its length in *used. Returns the bytes decoded (1 to 4), 0 when it
 * is no escape, -1 when the data ends inside it. */
static int unescape(const unsigned char *w, size_t n, unsigned char out[4], size_t *used) {
  static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
  if (n < 2) return -1;
  const char *e = w[1] ? strchr(from, w[1]) : NULL;
  if (e) {
    out[0] = (unsigned char)to[e - from];
    *used = 2;
    return 1;
  }
  if (w[1] != 'u') return 0;
  long cp = hex4(w + 2, n - 2);
  if (cp < 0) return cp == -2 ? -1 : 0;
  *used = 6;
  if (cp >= 0xDC00 && cp <= 0xDFFF) return 0;
  if (cp >= 0xD800 && cp <= 0xDBFF) { /* a surrogate pair */
    if (n < 8) return -1;
    if (w[6] != '\\' || w[7] != 'u') return 0;
    long lo = hex4(w + 8, n - 8);
    if (lo < 0) return lo == -2 ? -1 : 0;
    if (lo < 0xDC00 || lo > 0xDFFF) return 0;
    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    *used = 12;
  }
  if (cp < 0x80) return out[0] = (unsigned char)cp, 1;
  if (cp < 0x800)
    return out[0] = (unsigned char)(0xC0 | cp >> 6), out[1] = (unsigned char)(0x80 | (cp & 0x3F)),
           2;
  if (cp < 0x10000) {
    out[0] = (unsigned char)(0xE0 | cp >> 12);
    out[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    out[2] = (unsigned char)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (unsigned char)(0xF0 | cp >> 18);
  out[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
  out[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
  out[3] = (unsigned char)(0x80 | (cp & 0x3F));
  return 4;
}

/* How many bytes at w[0..n) spell value v (literally, with JSON escapes, or
 * with "\r\n" for "\n"); 0 when they do not; PARTIAL when the data ends
 * before that can be told. */
static size_t spelled(const value_t *v, const unsigned char *w, size_t n) {
  const unsigned char *s = (const unsigned char *)v->p;
  size_t k = 0, j = 0;
  while (k < v->len) {
    if (j >= n) return PARTIAL;
    if (w[j] == '\\') {
      unsigned char dec[4];
      size_t used;
      int d = unescape(w + j, n - j, dec, &used);
      if (d < 0) return PARTIAL;
      if (d > 0 && v->len - k >= (size_t)d && memcmp(s + k, dec, (size_t)d) == 0) {
        k += (size_t)d;
        j += used;
        continue;
      }
    }
    if (w[j] == s[k]) {
      k++;
      j++;
    } else if (s[k] == '\n' && w[j] == '\r') {
      if (j + 1 >= n) return PARTIAL;
      if (w[j + 1] != '\n') return 0;
      k++;
      j += 2;
    } else {
      return 0;
    }
  }
  return j;
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
      size_t r = spelled(&m->v[k], (const unsigned char *)w + i, n - i);
      if (r == PARTIAL) partial = !final;
      else full = r;
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
  if (m->hold[stream] == NULL && (m->hold[stream] = malloc(m->holdcap)) == NULL) {
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
  m->nhold[stream] = total - held; /* < holdcap: a partial match is shorter than its spelling */
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

/* `s` (malloc'd, may be NULL: "***") moved to cJSON's allocator, which is what
 * cJSON_Delete frees with. NULL when out of memory. */
static char *cj_take(char *s) {
  const char *from = s ? s : MASK;
  size_t n = strlen(from) + 1;
  char *c = cJSON_malloc(n);
  if (c) memcpy(c, from, n);
  free(s);
  return c;
}

/* Mask one decoded value in place: a string (or a key) with a secret gets the
 * secret replaced; a number or literal whose text is one becomes the string. */
static void mask_node(const pr_secrets_t *m, cJSON *j, int depth) {
  for (; j; j = j->next) {
    if (j->string && !(j->type & cJSON_StringIsConst)) {
      char *k = pr_secrets_scrub(m, j->string);
      if (k == NULL || strcmp(k, j->string) != 0) {
        char *c = cj_take(k);
        if (c) {
          cJSON_free(j->string);
          j->string = c;
        } else { /* out of memory: mask the key whole, in place */
          memcpy(j->string, MASK, strlen(j->string) < MASK_LEN ? strlen(j->string) : MASK_LEN + 1);
        }
      } else {
        free(k);
      }
    }
    char num[64];
    const char *text = cJSON_IsString(j) ? j->valuestring : NULL;
    if (cJSON_IsNumber(j)) {
      snprintf(num, sizeof(num), "%.17g", j->valuedouble);
      text = num;
    }
    if (cJSON_IsTrue(j) || cJSON_IsFalse(j) || cJSON_IsNull(j))
      text = cJSON_IsTrue(j) ? "true" : cJSON_IsFalse(j) ? "false" : "null";
    if (text) {
      char *t = pr_secrets_scrub(m, text);
      if (t == NULL || strcmp(t, text) != 0) {
        char *c = cj_take(t); /* out of memory: "***" for all of it */
        if (cJSON_IsString(j) && !(j->type & cJSON_IsReference)) cJSON_free(j->valuestring);
        j->type = cJSON_String | (j->type & cJSON_StringIsConst);
        j->valuestring = c ? c : (char *)"";
        if (c == NULL) j->type |= cJSON_IsReference; /* a constant: never freed */
        continue;
      }
      free(t);
    }
    if (cJSON_IsArray(j) || cJSON_IsObject(j))
      mask_node(m, j->child, depth + 1); /* the parsers bound the nesting */
  }
}

void pr_secrets_mask_json(const pr_secrets_t *m, struct cJSON *j) {
  if (m == NULL || j == NULL) return;
  cJSON *next = j->next; /* the value alone, not its siblings */
  j->next = NULL;
  mask_node(m, j, 0);
  j->next = next;
}
