/* base/mpscan.c — framing: find where each msgpack value of a stream ends,
 * before msgpack-c allocates anything for it. See base/mpscan.h.
 *
 * Thread: any (a pure function of the scanner's state and the bytes).
 */
#include "base/mpscan.h"

#include "include/proctor.h"

/* ---- framing ---------------------------------------------------------------------- */

static uint64_t be(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v = v << 8 | p[i];
  return v;
}

void pr_mp_scan_init(pr_mp_scan_t *s, uint64_t max_message, uint32_t max_objects, int max_depth) {
  *s = (pr_mp_scan_t){.max_message = max_message,
                      .max_objects = max_objects,
                      .max_depth = max_depth < PR_MP_SCAN_DEPTH ? max_depth : PR_MP_SCAN_DEPTH};
  pr_mp_scan_reset(s);
}

void pr_mp_scan_reset(pr_mp_scan_t *s) {
  s->msg_bytes = 0;
  s->objects = 0;
  s->top_n = 0;
  s->msgid = -1;
}

/* One value ended: close the containers it completes; at depth 0 the
 * message is complete. */
static void item_done(pr_mp_scan_t *s, unsigned *complete) {
  for (;;) {
    if (s->depth == 0) {
      (*complete)++;
      pr_mp_scan_reset(s);
      return;
    }
    if (--s->left[s->depth - 1] > 0) return;
    s->depth--;
  }
}

enum { K_SCALAR, K_PAYLOAD, K_ARRAY, K_MAP };

int pr_mp_scan(pr_mp_scan_t *s, const unsigned char *p, size_t n, size_t *used,
               unsigned *complete) {
  size_t i = 0;
  int rc = 0;
  while (i < n) {
    if (s->skip) {
      size_t take = n - i < s->skip ? n - i : s->skip;
      i += take;
      s->msg_bytes += take;
      s->skip -= (uint32_t)take;
      if (s->skip == 0) item_done(s, complete);
      continue;
    }
    unsigned b = p[i];
    size_t hl = 1;    /* header bytes (whole value for scalars) */
    int lb = 0;       /* bytes of the big-endian length/count after the type byte */
    uint64_t len = 0; /* payload bytes or entries */
    int kind = K_SCALAR, is_uint = 0;
    if (b <= 0x7f) {
      is_uint = 1;
    } else if (b <= 0x8f) {
      kind = K_MAP;
      len = b & 0x0f;
    } else if (b <= 0x9f) {
      kind = K_ARRAY;
      len = b & 0x0f;
    } else if (b <= 0xbf) {
      kind = K_PAYLOAD;
      len = b & 0x1f;
    } else if (b >= 0xe0) {
      /* negative fixint */
    } else {
      switch (b) {
      case 0xc0:
      case 0xc2:
      case 0xc3: break;
      case 0xc1: rc = PR_EPROTO; goto out;
      case 0xc4:
      case 0xd9:
        kind = K_PAYLOAD;
        lb = 1;
        break;
      case 0xc5:
      case 0xda:
        kind = K_PAYLOAD;
        lb = 2;
        break;
      case 0xc6:
      case 0xdb:
        kind = K_PAYLOAD;
        lb = 4;
        break;
      case 0xc7:
        kind = K_PAYLOAD;
        lb = 1;
        hl = 1;
        break; /* + type byte below */
      case 0xc8:
        kind = K_PAYLOAD;
        lb = 2;
        break;
      case 0xc9:
        kind = K_PAYLOAD;
        lb = 4;
        break;
      case 0xca: hl = 5; break;
      case 0xcb: hl = 9; break;
      case 0xcc:
        hl = 2;
        is_uint = 1;
        break;
      case 0xcd:
        hl = 3;
        is_uint = 1;
        break;
      case 0xce:
        hl = 5;
        is_uint = 1;
        break;
      case 0xcf:
        hl = 9;
        is_uint = 1;
        break;
      case 0xd0: hl = 2; break;
      case 0xd1: hl = 3; break;
      case 0xd2: hl = 5; break;
      case 0xd3: hl = 9; break;
      case 0xd4: hl = 3; break;
      case 0xd5: hl = 4; break;
      case 0xd6: hl = 6; break;
      case 0xd7: hl = 10; break;
      case 0xd8: hl = 18; break;
      case 0xdc:
        kind = K_ARRAY;
        lb = 2;
        break;
      case 0xdd:
        kind = K_ARRAY;
        lb = 4;
        break;
      case 0xde:
        kind = K_MAP;
        lb = 2;
        break;
      case 0xdf:
        kind = K_MAP;
        lb = 4;
        break;
      }
      if (lb) {
        hl = 1 + (size_t)lb + (b >= 0xc7 && b <= 0xc9 ? 1 : 0); /* ext: its type byte */
        if (n - i < hl) break;
        len = be(p + i + 1, lb);
      }
    }
    if (n - i < hl) break; /* the header is cut: wait for the rest */
    if (is_uint && s->depth == 1 && s->top_n == 4 && s->left[0] == 3)
      s->msgid = (int64_t)(b <= 0x7f ? b : be(p + i + 1, (int)hl - 1) & INT64_MAX);
    i += hl;
    s->msg_bytes += hl;
    if (s->msg_bytes > s->max_message) {
      rc = PR_ETOOBIG;
      goto out;
    }
    uint64_t budget = s->max_message - s->msg_bytes;
    if (kind == K_SCALAR) {
      item_done(s, complete);
    } else if (kind == K_PAYLOAD) {
      if (len > budget) {
        rc = PR_ETOOBIG;
        goto out;
      }
      if (len == 0) item_done(s, complete);
      else s->skip = (uint32_t)len;
    } else {
      uint64_t cnt = kind == K_MAP ? 2 * len : len;
      if (cnt > budget || s->objects + cnt > s->max_objects) {
        rc = PR_ETOOBIG;
        goto out;
      }
      s->objects += (uint32_t)cnt;
      if (s->depth == 0 && kind == K_ARRAY) s->top_n = (uint32_t)len;
      if (cnt == 0) {
        item_done(s, complete);
      } else {
        if (s->depth >= s->max_depth) {
          rc = PR_ETOOBIG;
          goto out;
        }
        s->left[s->depth++] = (uint32_t)cnt;
      }
    }
  }
out:
  *used = i;
  return rc;
}
