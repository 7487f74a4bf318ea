/* base/mpscan.h — framing a stream of msgpack values, one header at a time,
 * before msgpack-c allocates anything for them.
 *
 * Thread: any (a pure function of the scanner's state and the bytes).
 *
 * msgpack-c's unpacker allocates for an array or map as soon as it sees its
 * header: 5 bytes declaring 2^32 entries ask for 64 GiB. A scanner sees
 * every header first, so what a message declares is bounded by the bytes it
 * may still have (max_message), by the entries it may declare (max_objects)
 * and by its nesting (max_depth). Used by the RPC server (rpc/conn.c) and the
 * msgpack-rpc worker parser (engine/worker_msgpack.c). The msgid of a
 * msgpack-rpc request ([0, msgid, ...]) is noted on the way.
 */
#ifndef PR_MPSCAN_H
#define PR_MPSCAN_H

#include <stddef.h>
#include <stdint.h>

#define PR_MP_SCAN_DEPTH 64 /* the deepest nesting a scanner can track */

/* Incremental framing of one msgpack value at a time. Every header is seen
 * here before msgpack-c may allocate for it, so declared sizes are bounded by
 * the bytes a message may still have. */
typedef struct {
  uint64_t max_message; /* limits, set by pr_mp_scan_init */
  uint32_t max_objects;
  int max_depth;                   /* at most PR_MP_SCAN_DEPTH */
  uint64_t msg_bytes;              /* bytes of the current message so far */
  uint32_t objects;                /* entries declared so far by the current message */
  uint32_t skip;                   /* str/bin/ext payload bytes still to pass */
  int depth;                       /* open containers */
  uint32_t left[PR_MP_SCAN_DEPTH]; /* entries still expected per open container */
  uint32_t top_n;                  /* entries of the top-level array (0: not an array) */
  int64_t msgid;                   /* msgid of the message being framed, -1 unknown */
} pr_mp_scan_t;

/* pr_mp_scan_init: a scanner with these limits, ready for a first message. */
void pr_mp_scan_init(pr_mp_scan_t *s, uint64_t max_message, uint32_t max_objects, int max_depth);

/* pr_mp_scan_reset: ready for the next message (the limits stay). */
void pr_mp_scan_reset(pr_mp_scan_t *s);

/* pr_mp_scan: frame bytes p[0..n): *used = bytes consumed (a header cut by
 * the end of the data is left for next time), *complete += messages ended.
 * Returns 0, PR_ETOOBIG (size, entry or nesting limit) or PR_EPROTO (a byte
 * that is never valid msgpack). */
int pr_mp_scan(pr_mp_scan_t *s, const unsigned char *p, size_t n, size_t *used, unsigned *complete);

#endif
