/* send.c — what proctor-mcp writes: MCP messages on stdout (one line of
 * JSON each), log lines on stderr; and the client's name it introduces
 * itself with (clientInfo.name, given to every proctor socket in `hello`).
 *
 * Thread: main.
 *
 * A write to stdout that fails (the client went away) ends proctor-mcp: the
 * embedded engine is stopped first, so no command outlives it.
 */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/utf8.h"
#include "mcp.h"

static char client_name[MC_NAME_MAX + 1] = "mcp-client";

void mc_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("proctor-mcp: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

const char *mc_client_name(void) { return client_name; }

void mc_set_client_name(const char *name) {
  /* at most MC_NAME_MAX bytes, cut at a character boundary */
  size_t n = strlen(name);
  if (n > MC_NAME_MAX) n = pr_utf8_head(name, MC_NAME_MAX);
  memcpy(client_name, name, n);
  client_name[n] = 0;
}

/* ---- messages ------------------------------------------------------------------------------ */

static void write_all(const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(STDOUT_FILENO, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        struct pollfd pf = {.fd = STDOUT_FILENO, .events = POLLOUT};
        poll(&pf, 1, 1000);
        continue;
      }
      mc_log("stdout: %s; exiting", strerror(errno));
      mc_embedded_stop();
      _exit(1);
    }
    p += w;
    n -= (size_t)w;
  }
}

void mc_send(cJSON *msg) {
  char *s = cJSON_PrintUnformatted(msg);
  cJSON_Delete(msg);
  if (s == NULL) {
    mc_log("out of memory printing a message");
    return;
  }
  size_t n = strlen(s);
  s[n] = '\n'; /* replaces the NUL; write n + 1 bytes */
  write_all(s, n + 1);
  free(s);
}

static cJSON *envelope(const cJSON *id) {
  cJSON *m = cJSON_CreateObject();
  cJSON_AddStringToObject(m, "jsonrpc", "2.0");
  cJSON_AddItemToObject(m, "id", id ? cJSON_Duplicate(id, 1) : cJSON_CreateNull());
  return m;
}

void mc_respond(const cJSON *id, cJSON *result) {
  cJSON *m = envelope(id);
  cJSON_AddItemToObject(m, "result", result);
  mc_send(m);
}

void mc_respond_error(const cJSON *id, int code, const char *message) {
  cJSON *m = envelope(id);
  cJSON *e = cJSON_AddObjectToObject(m, "error");
  cJSON_AddNumberToObject(e, "code", code);
  cJSON_AddStringToObject(e, "message", message);
  mc_send(m);
}
