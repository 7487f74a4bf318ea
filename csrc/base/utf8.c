/* base/utf8.c — UTF-8 boundaries and repair. See utf8.h.
 *
 * Thread: any.
 */
#include "base/utf8.h"

#include <stdlib.h>
#include <string.h>

/* Length of the UTF-8 sequence led by byte c (0: not a lead byte). */
static int seq_len(unsigned char c) {
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return 2;
  if (c >= 0xE0 && c <= 0xEF) return 3;
  if (c >= 0xF0 && c <= 0xF4) return 4;
  return 0;
}

static int is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

/* Is p[0..n) (n = seq_len of p[0]) a valid sequence (no overlong, surrogate or > U+10FFFF)? */
static int valid_seq(const unsigned char *p, int n) {
  for (int i = 1; i < n; i++)
    if (!is_cont(p[i])) return 0;
  if (n == 3) {
    if (p[0] == 0xE0 && p[1] < 0xA0) return 0;
    if (p[0] == 0xED && p[1] > 0x9F) return 0;
  } else if (n == 4) {
    if (p[0] == 0xF0 && p[1] < 0x90) return 0;
    if (p[0] == 0xF4 && p[1] > 0x8F) return 0;
  }
  return 1;
}

size_t pr_utf8_head(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  /* Look back over at most 3 continuation bytes for the last lead byte. */
  size_t i = n, back = 0;
  while (i > 0 && back < 3 && is_cont(p[i - 1])) {
    i--;
    back++;
  }
  if (i == 0) return back == n ? n : 0; /* only continuation bytes: nothing to cut at */
  int need = seq_len(p[i - 1]);
  if (need > 1 && (size_t)need > back + 1) return i - 1; /* an incomplete sequence ends p */
  return n;
}

size_t pr_utf8_skip(const char *s, size_t n) {
  const unsigned char *p = (const unsigned char *)s;
  size_t i = 0;
  while (i < n && i < 3 && is_cont(p[i])) i++;
  return i;
}

char *pr_utf8_clean(const char *s, size_t n) {
  if (s == NULL) n = 0; /* msgpack's empty strings may have no bytes at all */
  const unsigned char *p = (const unsigned char *)(s ? s : "");
  /* Worst case: every byte becomes the 3-byte U+FFFD. */
  char *out = malloc(n * 3 + 1);
  if (out == NULL) return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    int k = seq_len(p[i]);
    if (p[i] == 0 || k == 0 || i + (size_t)k > n || !valid_seq(p + i, k)) {
      memcpy(out + o, "\xEF\xBF\xBD", 3);
      o += 3;
      i++;
      continue;
    }
    memcpy(out + o, p + i, (size_t)k);
    o += (size_t)k;
    i += (size_t)k;
  }
  out[o] = 0;
  return out;
}
