/* render.c — the text a terminal shows for the bytes a command wrote to its
 * pty, as ACP's terminal/output returns it: escape sequences (CSI, OSC, DCS,
 * SOS, PM, APC, charset designations, two-byte escapes) removed, \r\n as \n,
 * a lone \r back to the start of the line (what follows overwrites it), \b
 * one column back, the other control bytes (not \t, \n) removed, and the
 * result repaired to valid UTF-8.
 *
 * Thread: main (touches only its arguments).
 */
#include <stdlib.h>
#include <string.h>

#include "acp.h"
#include "base/utf8.h"

/* The length of the escape sequence at p[0] == ESC (at most n bytes: an
 * unfinished one runs to the end). */
static size_t escape_len(const unsigned char *p, size_t n) {
  if (n < 2) return n;
  unsigned char c = p[1];
  size_t i;
  if (c == '[') { /* CSI: parameters 0x30-0x3F, intermediates 0x20-0x2F, a final 0x40-0x7E */
    for (i = 2; i < n && p[i] >= 0x30 && p[i] <= 0x3F; i++) {
    }
    for (; i < n && p[i] >= 0x20 && p[i] <= 0x2F; i++) {
    }
    return i < n ? i + 1 : n;
  }
  if (c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_') { /* strings: to BEL (OSC) or ST */
    for (i = 2; i < n; i++) {
      if (c == ']' && p[i] == 7) return i + 1;
      if (p[i] == 0x1b) return i + 1 < n && p[i + 1] == '\\' ? i + 2 : i;
    }
    return n;
  }
  if ((c == '(' || c == ')' || c == '*' || c == '+') && n >= 3) return 3;
  return 2;
}

char *ac_render(const char *src, size_t n, size_t *out_len) {
  const unsigned char *p = (const unsigned char *)src;
  char *out = malloc(n + 1);
  if (out == NULL) return NULL;
  size_t len = 0, line = 0, cur = 0; /* out[line..len) is the current line; cur: the column */
  for (size_t i = 0; i < n;) {
    unsigned char c = p[i];
    if (c == 0x1b) {
      size_t k = escape_len(p + i, n - i);
      i += k ? k : 1;
      continue;
    }
    i++;
    if (c == '\n') {
      out[len++] = '\n';
      line = cur = len;
    } else if (c == '\r') {
      if (i < n && p[i] == '\n') continue; /* \r\n: the \n ends the line */
      cur = line;
    } else if (c == '\b') {
      if (cur > line) cur--;
    } else if (c < 0x20 && c != '\t') {
      /* other control bytes: nothing */
    } else if (c == 0x7f) {
    } else {
      if (cur < len) out[cur++] = (char)c;
      else out[len++] = (char)c, cur = len;
    }
  }
  char *clean = pr_utf8_clean(out, len);
  free(out);
  if (clean) *out_len = strlen(clean);
  return clean;
}

size_t ac_tail_start(const char *s, size_t n, size_t limit) {
  if (n <= limit) return 0;
  size_t i = n - limit;
  while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80) i++; /* not inside a character */
  return i;
}
