/* base/overwrite.c — the consoles' redraw filter (include/proctor.h): the Lua model
 * lua/proctor/console/overwrite.lua, byte for byte, in C.
 *
 * Thread: any (a state belongs to its caller). The contract is in
 * include/proctor.h ("the consoles' redraw filter").
 *
 * Offsets are absolute in the text (0-based); a segment's `from` is the byte
 * after its `\r`, so the span of segment j is [seg[j].from - 1, seg[j+1].from - 2].
 * Segment 1 (index 1; index 0 is unused, as in the model) starts the call or
 * the run: its column is unknown and it is never left out.
 */
#include <stdlib.h>
#include <string.h>

#include "include/proctor.h"

enum { GROUND, ESC, CSI, STR, STR_ESC, ESC_INT };
enum { B_BEL = 7, B_CR = 13, B_CAN = 24, B_SUB = 26, B_ESC = 27 };
enum { K_NONE, K_SGR, K_EL, K_UNSAFE };

void pr_overwrite_init(pr_overwrite_t *st) { memset(st, 0, sizeof(*st)); }

void pr_overwrite_free(pr_overwrite_t *st) {
  free(st->seg);
  free(st->drops);
  st->seg = NULL;
  st->drops = NULL;
  st->nseg = st->ndrops = 0;
}

/* Room for entry k of the array *v of *cap entries of `size` bytes (doubled
 * as needed, from 64); 0 when out of memory (*v unchanged). */
static int room(void **v, size_t *cap, size_t k, size_t size) {
  if (k < *cap) return 1;
  size_t n = *cap ? *cap * 2 : 64;
  while (n <= k) n *= 2;
  void *p = realloc(*v, n * size);
  if (p == NULL) return 0;
  *v = p;
  *cap = n;
  return 1;
}

static int seg_room(pr_overwrite_t *st, size_t k) {
  return room((void **)&st->seg, &st->nseg, k, sizeof(*st->seg));
}

static int drop_room(pr_overwrite_t *st, size_t d) {
  return room((void **)&st->drops, &st->ndrops, d, sizeof(*st->drops));
}

static uint32_t sat32(size_t n) { return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n; }

/* A CSI's class from its parameter/intermediate bytes (a then b, either may be
 * empty) and its final byte: the model's classify(). */
static int classify(const char *a, size_t na, const char *b, size_t nb, int final) {
  size_t n = na + nb;
#define AT(i) ((i) < na ? (unsigned char)a[i] : (unsigned char)b[(i)-na])
  if (final == 'm') {
    for (size_t i = 0; i < n; i++) {
      int c = AT(i);
      if (!((c >= '0' && c <= '9') || c == ';' || c == ':')) return K_NONE;
    }
    return K_SGR;
  }
  if (final == 'K') {
    if (n == 0 || (n == 1 && (AT(0) == '0' || AT(0) == '2'))) return K_EL;
    return K_NONE;
  }
  if (final == 'h') {
    int private = n > 0 && AT(0) == '?';
    for (size_t i = 0; i < n;) { /* each run of digits, compared as text */
      if (AT(i) < '0' || AT(i) > '9') {
        i++;
        continue;
      }
      size_t j = i;
      while (j < n && AT(j) >= '0' && AT(j) <= '9') j++;
      size_t len = j - i;
      if (private && len == 2 && AT(i) == '6' && AT(i + 1) == '9') return K_UNSAFE;
      if (!private && len == 1 && AT(i) == '4') return K_UNSAFE;
      i = j;
    }
    for (size_t i = 0; i < n; i++) {
      int c = AT(i);
      if (!((c >= '0' && c <= '9') || c == ';' || c == '?')) return K_UNSAFE;
    }
  }
#undef AT
  return K_NONE;
}

/* A run of segments 1..k ended: note the segments left out after the nd spans
 * noted so far (a span next to the one before joins it); returns the new
 * count, or (size_t)-1 when out of memory. */
static size_t decide(pr_overwrite_t *st, size_t k, size_t width, size_t nd) {
  pr_ow_seg_t *s = st->seg;
  long best = -1; /* the widest cover of a later segment on the same row */
  for (size_t j = k; j >= 2; j--) {
    int maywrap = s[j].cols >= width;
    size_t touched = s[j].el ? width : s[j].cols;
    s[j].drop = j < k && !maywrap && (long)touched <= best;
    size_t cover = s[j].el ? width : s[j].cover;
    if (maywrap || (long)cover > best) best = (long)cover;
  }
  for (size_t j = 2; j + 1 <= k; j++) {
    if (!s[j].drop) continue;
    size_t from = s[j].from - 1, to = s[j + 1].from - 2;
    int sgr = s[j].sgr;
    pr_ow_drop_t *d = nd > 0 ? &st->drops[nd - 1] : NULL;
    if (d && d->to + 1 == from && !sgr && !d->sgr) {
      d->to = to;
    } else {
      if (!drop_room(st, nd)) return (size_t)-1;
      st->drops[nd++] = (pr_ow_drop_t){from, to, sgr};
    }
  }
  return nd;
}

size_t pr_overwrite_feed(pr_overwrite_t *st, const char *text, size_t text_len, size_t first,
                         size_t last, long width_in, pr_ow_emit_fn emit, void *ctx) {
  if (last <= first) return 0;
  const unsigned char *t = (const unsigned char *)text;
  size_t width = width_in >= 2 ? (size_t)width_in : 0; /* 0: keep every byte */
  int state = st->state;
  size_t csi_from = first; /* where this call's part of the current CSI's parameters starts */
  size_t k = 1, cols = 0, cover = 0, nd = 0;
  int ascii = 1, el = 0, sgr = 0, oom = 0;
  if (!seg_room(st, 1)) oom = 1;
  else st->seg[1].from = first;
#define END_SEG()                                                                     \
  do {                                                                                \
    if (!oom)                                                                         \
      st->seg[k] = (pr_ow_seg_t){st->seg[k].from,   sat32(cols),        sat32(cover), \
                                 (unsigned char)el, (unsigned char)sgr, 0};           \
  } while (0)
#define NEW_SEG(at)                        \
  do {                                     \
    END_SEG();                             \
    k++;                                   \
    if (!oom && !seg_room(st, k)) oom = 1; \
    if (!oom) st->seg[k].from = (at);      \
    cols = cover = 0;                      \
    ascii = 1;                             \
    el = sgr = 0;                          \
  } while (0)
  size_t i = first;
  while (i < last) {
    if (state == GROUND) { /* the common bytes in a loop of their own */
      while (i < last) {
        unsigned c = t[i];
        if (c >= 32 && c < 127) {
          cols++;
          cover += ascii;
        } else if (c == B_CR) {
          NEW_SEG(i + 1);
        } else {
          break;
        }
        i++;
      }
      if (i >= last) break;
    }
    unsigned b = t[i];
    int stop = 0,
        unsafe = 0; /* a barrier: the run ends before this byte (and leaving out is off) */
    if (state == GROUND) {
      if (b == B_ESC) {
        state = ESC;
      } else if (b >= 128) {
        /* UTF-8: a byte is at most one column; U+0080-U+009F (C2 80-9F) are C1 controls */
        if (b == 0xC2 && i + 1 < last && t[i + 1] < 0xA0) {
          stop = 1;
        } else {
          cols++;
          ascii = 0;
        }
      } else { /* LF, TAB, BS, BEL, DEL, other C0: the run ends */
        stop = 1;
      }
    } else if (b < 32 && b != B_ESC && b != B_CAN && b != B_SUB && state != STR) {
      stop = 1; /* a C0 control inside an escape sequence runs at once */
    } else if (state == ESC) {
      if (b == '[') {
        state = CSI;
        st->plen = 0;
        csi_from = i + 1;
      } else if (b == ']' || b == 'P' || b == 'X' || b == '^' || b == '_') {
        state = STR;
        stop = 1;
      } else if (b == B_ESC) {
        stop = 1;                     /* a new sequence starts here */
      } else if (b >= 32 && b < 48) { /* ESC # : line attributes (double width) */
        state = ESC_INT;
        stop = 1;
        unsafe = b == '#';
      } else { /* a final byte, CAN, SUB */
        state = GROUND;
        stop = 1;
      }
    } else if (state == CSI) {
      if (b >= 64 && b < 127) {
        int kind = classify(st->params, st->plen, text + csi_from, i - csi_from, (int)b);
        state = GROUND;
        st->plen = 0;
        if (kind == K_SGR) {
          sgr = 1;
        } else if (kind == K_EL) {
          el = 1;
        } else {
          stop = 1;
          unsafe = kind == K_UNSAFE;
        }
      } else if (b == B_ESC) {
        state = ESC;
        st->plen = 0;
        stop = 1;
      } else if (b == B_CAN || b == B_SUB) {
        state = GROUND;
        st->plen = 0;
        stop = 1;
      } else if (b >= 127) {
        stop = 1;
      }
    } else if (state == ESC_INT) {
      if (b >= 48 && b < 127) {
        state = GROUND;
      } else if (b == B_ESC) {
        state = ESC;
      } else if (b == B_CAN || b == B_SUB) {
        state = GROUND;
      }
    } else if (state == STR) {
      if (b == B_BEL || b == B_CAN || b == B_SUB) {
        state = GROUND;
      } else if (b == B_ESC) {
        state = STR_ESC;
      }
    } else {           /* STR_ESC */
      if (b == '\\') { /* ST (ESC \) */
        state = GROUND;
      } else { /* an escape sequence ends the string and starts anew with this byte */
        state = ESC;
        continue; /* this byte again, in ESC */
      }
    }
    if (stop) {
      if (k >= 3 && width && !st->unsafe && !oom) {
        END_SEG();
        size_t r = decide(st, k, width, nd);
        if (r == (size_t)-1) oom = 1;
        else nd = r;
      }
      k = 1;
      cols = cover = 0;
      ascii = 1;
      el = sgr = 0;
      if (unsafe) st->unsafe = 1;
    }
    i++;
  }
  if (state == CSI) { /* the parameters so far, for the next call */
    size_t n = last - csi_from;
    if (st->plen + n > PR_OW_PARAMS_MAX) {
      st->plen = 0; /* a runaway sequence: be careful */
      st->unsafe = 1;
    } else {
      memcpy(st->params + st->plen, text + csi_from, n);
      st->plen += n;
    }
  }
  st->state = state;
  if (k >= 3 && width && !st->unsafe && !oom) {
    END_SEG();
    size_t r = decide(st, k, width, nd);
    if (r == (size_t)-1) oom = 1;
    else nd = r;
  }
#undef NEW_SEG
#undef END_SEG
  if (oom) st->unsafe = 1; /* from now on every byte goes: safe, if not lean */
  if (oom || nd == 0) {
    emit(ctx, text + first, last - first);
    return last - first;
  }
  /* The text without the spans (in order), their pen changes kept. */
  size_t o = 0, at = first;
  uint64_t dropped = 0;
  for (size_t d = 0; d < nd; d++) {
    size_t from = st->drops[d].from, to = st->drops[d].to, kept = 0;
    if (from > at) emit(ctx, text + at, from - at);
    o += from - at;
    if (st->drops[d].sgr) {
      size_t p = from;
      while (p <= to) {
        const unsigned char *e = memchr(t + p, B_ESC, to + 1 - p);
        if (e == NULL) break;
        size_t ei = (size_t)(e - t), f = ei + 2;
        while (f < text_len && !(t[f] >= 64 && t[f] <= 126)) f++;
        if (f >= text_len) f = text_len - 1; /* cannot happen: a kept SGR ends in its span */
        emit(ctx, text + ei, f - ei + 1);
        o += f - ei + 1;
        kept += f - ei + 1;
        p = f + 1;
      }
    }
    dropped += (to - from + 1) - kept;
    at = to + 1;
  }
  if (last > at) emit(ctx, text + at, last - at);
  o += last - at;
  st->dropped += dropped;
  return o;
}
