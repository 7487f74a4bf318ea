/* acp.h — proctor-acp, an ACP proxy: it runs the real agent as its child and
 * relays every JSON-RPC message (newline-delimited JSON over stdio) between
 * the ACP client and the agent, and serves the agent's terminals itself as
 * proctor executions when the client does not. Internal declarations shared
 * by the files of csrc/acp/.
 *
 * Thread: one. Everything runs on the main thread in one poll() loop
 * (main.c): our stdin/stdout (the client), the agent's stdout/stdin, the
 * proctor msgpack-rpc socket (csrc/mcp/rpc.c) and, in embedded mode, the
 * engine's wake fd (csrc/mcp/embedded.c).
 *
 *   client ──stdin──► chan.c ─► relay.c ─(initialize: terminal = true)─► chan.c ──► agent stdin
 *   client ◄─stdout── chan.c ◄─ relay.c ◄─(terminal blocks as text)──── chan.c ◄── agent stdout
 *                                 │ terminal/... requests of the agent
 *                                 ▼
 *                              term.c ─► mcp/rpc.c ─► proctor socket (the editor's, or embedded)
 *                                 └── render.c (pty bytes ─► the text a terminal shows)
 *
 * Layers (scripts/check-layers.sh): these files include their own headers,
 * mcp/mcp.h (the RPC client, discovery, the embedded engine, the loop's
 * timers and stop signals), base/ and include/.
 */
#ifndef PR_ACP_H
#define PR_ACP_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "mcp/mcp.h"

#define AC_VERSION "0.1.0"
/* Bounds (doc/proctor.txt, *proctor-limits*). */
#define AC_LINE_MAX (64u << 20)      /* bytes of one message, either way; longer: dropped */
#define AC_QUEUE_HIGH (8u << 20)     /* bytes queued toward one side: stop reading the other */
#define AC_PENDING_MAX 4096          /* requests in flight, each way */
#define AC_OPS_MAX 1024              /* terminal requests in progress */
#define AC_TERMS_MAX 4096            /* terminals remembered (live and released) */
#define AC_OUTPUT_DEFAULT (1u << 20) /* outputByteLimit when the agent gives none */
#define AC_WINDOW_MAX (4u << 20)     /* most pty bytes one terminal/output reads */
#define AC_AGENT_EXIT_MS 3000        /* after its stdin closed: the agent's time to exit */

/* JSON-RPC error codes. */
#define AC_E_INVALID_PARAMS -32602
#define AC_E_INTERNAL -32603
#define AC_E_NOT_FOUND -32002 /* ACP "Resource not found": unknown or released terminal */
#define AC_E_BUSY -32000      /* a bound was reached (AC_PENDING_MAX, AC_OPS_MAX) */

/* ---- chan.c: the four pipes ------------------------------------------------------------------ */

typedef struct {
  int fd;
  char *buf;
  size_t len, cap;
  int skipping; /* inside a line longer than AC_LINE_MAX: dropped to its end */
  int eof;
} ac_in_t;

typedef struct {
  int fd;
  int kind; /* 0: not looked yet, 1: a socket, 2: a pipe, 3: anything else */
  char *buf;
  size_t off, len, cap; /* bytes [off, len) wait to be written */
  int closed;           /* the reader is gone: everything is dropped */
} ac_out_t;

/* Read what `in` has (poll said so) and call on_line(line, len) for each
 * complete line (without its newline; blank lines skipped). A line longer
 * than AC_LINE_MAX is dropped and on_line gets (NULL, 0) once for it. */
void ac_in_read(ac_in_t *in, void (*on_line)(const char *line, size_t len));
/* Queue `len` bytes of `line` plus a newline toward `out` (dropped when it is closed). */
void ac_out_line(ac_out_t *out, const char *line, size_t len);
/* Queue a JSON message (consumed) as one line. */
void ac_out_json(ac_out_t *out, cJSON *msg);
/* Write what `out` can take now without blocking. A write error closes it. */
void ac_out_flush(ac_out_t *out);
/* Bytes queued toward `out`. */
static inline size_t ac_out_queued(const ac_out_t *out) { return out->len - out->off; }
/* Free the buffers of `in` and `out` (fds are not closed). */
void ac_in_free(ac_in_t *in);
void ac_out_free(ac_out_t *out);

/* The two sides: [0] the client (our stdin/stdout), [1] the agent (its stdout/stdin). */
extern ac_in_t ac_from[2];
extern ac_out_t ac_to[2];
enum { AC_CLIENT = 0, AC_AGENT = 1 };

/* ---- relay.c: what passes ---------------------------------------------------------------------- */

/* A line from the client (on its way to the agent) or from the agent. */
void ac_from_client(const char *line, size_t len);
void ac_from_agent(const char *line, size_t len);
/* The side `gone` (AC_CLIENT or AC_AGENT) ended: every request it has not
 * answered gets an error answer, `why`. */
void ac_relay_gone(int gone, const char *why);
/* 1 once the client's initialize said it has no terminals (we serve them). */
int ac_serving(void);
/* --always: serve the agent's terminals even when the client has its own. */
void ac_relay_always(void);
/* The working directory of ACP session `sid` (session/new, session/load), or NULL. */
const char *ac_session_cwd(const char *sid);
/* Answer a request of side `to` (id copied): a result (consumed) or an error. */
void ac_answer(int to, const cJSON *id, cJSON *result);
void ac_answer_error(int to, const cJSON *id, int code, const char *msg, cJSON *data);
/* Free everything relay.c holds. */
void ac_relay_free(void);

/* ---- term.c: the agent's terminals ------------------------------------------------------------- */

/* Serve the agent's terminal request `method` (a "terminal/..." name; `id` and
 * `params` borrowed). Answers it exactly once, now or later. */
void ac_term_request(const char *method, const cJSON *id, const cJSON *params);
/* The text that stands for terminal `tid` of session `sid` in a client that
 * has no terminals ("running in proctor #12: make test"); malloc'd, or NULL
 * when it is not one of ours. */
char *ac_term_text(const char *sid, const char *tid);
/* Terminal requests in progress. */
size_t ac_term_inflight(void);
/* Free the table (at exit). */
void ac_term_free(void);
/* The name we give proctor in `hello` (the executions' owner). */
extern char ac_owner[MC_NAME_MAX + 1];

/* ---- render.c: pty bytes as text --------------------------------------------------------------- */

/* The text a terminal shows for p[0..n): escape sequences removed, \r\n as
 * \n, a lone \r returning to the start of the line, \b one column back,
 * other control bytes removed, invalid UTF-8 as U+FFFD. malloc'd and
 * NUL-terminated (*out_len bytes), or NULL when out of memory. */
char *ac_render(const char *p, size_t n, size_t *out_len);
/* The offset in s[0..n) where its last `limit` bytes begin, moved forward to a
 * character boundary (0 when n <= limit). */
size_t ac_tail_start(const char *s, size_t n, size_t limit);

#endif
