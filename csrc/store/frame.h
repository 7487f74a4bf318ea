/* store/frame.h — the history file's frames on disk: [uint checksum, bin
 * payload] (msgpack), the checksum FNV-1a of the payload. Pure functions over
 * bytes; no state.
 *
 * Thread: any (the engine thread packs frames, the host thread reads them at
 * load, the writer thread compacts).
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

/* The whole contents of the open file `fd` (read with pread from offset 0,
 * retried on EINTR, stopping at its fstat size or at the first short read).
 * Returns a malloc'd buffer with one spare byte (*n set to the bytes read), or
 * NULL when fstat or malloc failed, or when `stop` (NULL: never) read
 * nonzero between two reads (an engine closing while it loads). */
char *pr_frame_read_file(int fd, size_t *n, const int *stop);

#endif
