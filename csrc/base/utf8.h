/* base/utf8.h — bytes made fit for JSON: UTF-8 character boundaries and
 * repair of invalid bytes.
 *
 * Thread: any (they touch only their arguments).
 *
 * Used wherever bytes become JSON text: msgpack -> JSON (base/mpack.c, for
 * the worker protocols and proctor-mcp's answers) and the output proctor-mcp
 * hands to an MCP client in pieces (csrc/mcp/).
 */
#ifndef PR_UTF8_H
#define PR_UTF8_H

#include <stddef.h>

/* pr_utf8_head: the length of the longest prefix of p[0..n) that does not end
 * inside a character (a trailing incomplete sequence is left out). */
size_t pr_utf8_head(const char *p, size_t n);

/* pr_utf8_skip: how many bytes at the start of p[0..n) continue a character
 * begun before p (at most 3). */
size_t pr_utf8_skip(const char *p, size_t n);

/* pr_utf8_clean: a NUL-terminated copy of p[0..n) that is valid UTF-8: each
 * invalid byte (a stray continuation, an overlong form, a surrogate, beyond
 * U+10FFFF, a truncated sequence) and each NUL becomes U+FFFD; valid text is
 * copied as is. NULL only when out of memory. */
char *pr_utf8_clean(const char *p, size_t n);

#endif
