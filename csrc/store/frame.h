/* store/frame.h — the history file's frames on disk: [uint checksum, bin
 * payload] (msgpack), the checksum FNV-1a of the payload: pure functions over
 * bytes, and a reader (pr_frames_t) that walks a file's frames holding a
 * bounded window of it, never the whole file.
 *
 * Thread: any (the engine thread packs frames, the loader thread reads them
 * in bounded steps, the writer thread compacts).
 */
#ifndef PR_STORE_FRAME_H
#define PR_STORE_FRAME_H

#include <stddef.h>
#include <stdint.h>

/* What pr_frame_at() found. */
enum { PR_FRAME_OK, PR_FRAME_SHORT, PR_FRAME_BAD, PR_FRAME_BADSUM };

/* The checksum of a payload: FNV-1a (32 bits) of its `n` bytes at `p`. */
uint32_t pr_frame_sum(const char *p, size_t n);

/* The frame at p[off..len) (off < len). Returns PR_FRAME_OK (*body, *blen,
 * *end set) when its checksum matches; PR_FRAME_BADSUM when the framing holds
 * but the checksum does not (*body, *blen, *end set); PR_FRAME_SHORT when the
 * data ends inside it; PR_FRAME_BAD when these bytes are no frame. */
int pr_frame_at(const char *p, size_t len, size_t off, const char **body, size_t *blen,
                size_t *end);

/* A file of frames read in bounded steps: the bytes [base, base + n) of the
 * file are in buf. A caller asks for bytes at ever larger offsets (a smaller
 * one is read again); what it is handed stays valid until its next call. */
typedef struct {
  int fd;
  uint64_t size;   /* the file's bytes: its size at open, less when a read came short */
  char *buf;       /* cap bytes: max(chunk, the frame asked for), at most the rest of the file */
  uint64_t base;   /* the file offset of buf[0] */
  size_t n, cap;   /* bytes in buf; its size */
  size_t chunk;    /* one refill reads this much (or to the end of the file) */
  size_t peak;     /* the largest cap held (tests, benches) */
  int err;         /* PR_ENOMEM or PR_ECLOSED (the stop flag): nothing more is read */
  const int *stop; /* NULL: never; nonzero between two reads stops the reader */
} pr_frames_t;

/* A reader's step: what one refill reads (or to the end of the file). */
#define PR_FRAMES_CHUNK (1u << 20)

/* pr_frames_open: read the open file `fd` (not owned) in steps of `chunk`
 * bytes (0: PR_FRAMES_CHUNK, or what pr_frames_test_chunk set); `stop` as in
 * pr_frames_t. Returns 0, or a negative errno when fstat failed (*r then
 * needs no close). A reader is used by one thread; the thread that opened it. */
int pr_frames_open(pr_frames_t *r, int fd, size_t chunk, const int *stop);

/* pr_frames_bytes: the file's bytes from `off`: at least `want` of them, or
 * all up to the end of the file when fewer are left (*have says how many are
 * in memory from off; 0 at or past the end). Returns a pointer into the
 * reader's buffer, or NULL (*have 0) when r->err is set. */
const char *pr_frames_bytes(pr_frames_t *r, uint64_t off, size_t want, size_t *have);

/* pr_frames_at: pr_frame_at() over the file (off < r->size, *end a file
 * offset), reading what the frame needs: a frame longer than the chunk has
 * its checksum computed a chunk at a time first and is read whole only when
 * it matches (else PR_FRAME_BADSUM with *body NULL); one that claims more
 * bytes than the file has left is PR_FRAME_SHORT without reading them.
 * *body stays valid until the next call. Returns what pr_frame_at returns,
 * or -1 when r->err is set. */
int pr_frames_at(pr_frames_t *r, uint64_t off, const char **body, size_t *blen, uint64_t *end);

/* pr_frames_close: free the buffer (the file stays open). */
void pr_frames_close(pr_frames_t *r);

/* pr_frames_test_chunk: tests only: readers opened after it with chunk 0
 * step `bytes` (0: PR_FRAMES_CHUNK). Returns the largest buffer a reader
 * held (at its close) since the previous call. Any thread. */
size_t pr_frames_test_chunk(size_t bytes);

#endif
