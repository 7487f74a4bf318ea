/* send.c — what proctor-mcp writes: MCP messages on stdout (one line of
 * JSON each), log lines on stderr; and the client's name it introduces
 * itself with (clientInfo.name, given to every proctor socket in `hello`).
 *
 * Thread: main.
 *
 * A write to stdout that fails (the client went away) ends proctor-mcp: the
 * embedded engine is stopped first, so no command outlives it.
 *
 * Writes never block: stdout is written without waiting (MSG_DONTWAIT on a
 * socket; on a pipe at most PIPE_BUF bytes once poll() says there is room),
 * and while it is full we wait in poll() for room, a stop signal (loop.c's
 * self-pipe) or the end of stdin (POLLRDHUP/POLLHUP). A stop signal gives
 * stdout up at once; after the end of stdin, MC_EOF_WRITE_MS without room
 * does. Given up, every later message is dropped and main.c's loop ends, so
 * a client that stopped reading cannot hold proctor-mcp (or its executions)
 * past SIGTERM or its own exit: exit stays within the grace period + 1 s.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/utf8.h"
#include "mcp.h"

static char client_name[MC_NAME_MAX + 1] = "mcp-client";

const char *mc_client_name(void) { return client_name; }

void mc_set_client_name(const char *name) {
  /* at most MC_NAME_MAX bytes, cut at a character boundary */
  size_t n = strlen(name);
  if (n > MC_NAME_MAX) n = pr_utf8_head(name, MC_NAME_MAX);
  memcpy(client_name, name, n);
  client_name[n] = 0;
}

/* ---- messages ------------------------------------------------------------------------------ */

#define MC_EOF_WRITE_MS 1000 /* after stdin's end: how long stdout may stay full */

static int closed;      /* stdout given up: drop everything */
static int stdin_ended; /* seen while waiting for room (stdin is not polled again) */
static int kind;        /* 0: not looked yet, 1: a socket, 2: a pipe, 3: anything else */

int mc_send_closed(void) { return closed; }

/* Write some of p without blocking: bytes written, or -1 with errno (EAGAIN: full). */
static ssize_t write_some(const char *p, size_t n) {
  if (kind == 0) {
    struct stat st;
    kind = fstat(STDOUT_FILENO, &st) != 0 ? 3
           : S_ISSOCK(st.st_mode)         ? 1
           : S_ISFIFO(st.st_mode)         ? 2
                                          : 3;
  }
  if (kind == 1) return send(STDOUT_FILENO, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (kind == 2) {
    /* a pipe with room takes PIPE_BUF bytes without blocking */
    struct pollfd pf = {.fd = STDOUT_FILENO, .events = POLLOUT};
    if (poll(&pf, 1, 0) <= 0 || !(pf.revents & (POLLOUT | POLLERR))) {
      errno = EAGAIN;
      return -1;
    }
    if (n > PIPE_BUF) n = PIPE_BUF;
  }
  return write(STDOUT_FILENO, p, n);
}

static void give_up(const char *why) {
  mc_log("stdout is full and %s: dropping what is left to send, exiting", why);
  closed = 1;
}

static void write_all(const char *p, size_t n) {
  uint64_t since = mc_now_ms(); /* the last time bytes went out */
  while (n > 0 && !closed) {
    ssize_t w = write_some(p, n);
    if (w >= 0) {
      p += w;
      n -= (size_t)w;
      since = mc_now_ms();
      continue;
    }
    if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) {
      mc_log("stdout: %s; exiting", strerror(errno));
      mc_embedded_stop();
      _exit(1);
    }
    if (mc_stop_requested()) {
      give_up("a stop signal came");
      return;
    }
    int wait = 1000;
    if (stdin_ended) {
      uint64_t idle = mc_now_ms() - since;
      if (idle >= MC_EOF_WRITE_MS) {
        give_up("stdin reached its end");
        return;
      }
      wait = (int)(MC_EOF_WRITE_MS - idle);
    }
    struct pollfd pf[3] = {{.fd = STDOUT_FILENO, .events = POLLOUT},
                           {.fd = stdin_ended ? -1 : STDIN_FILENO, .events = POLLRDHUP},
                           {.fd = mc_stop_fd(), .events = POLLIN}};
    if (poll(pf, 3, wait) < 0) continue;
    if (pf[1].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
      stdin_ended = 1;
      since = mc_now_ms(); /* a full window from the end */
    }
  }
}

void mc_send(cJSON *msg) {
  if (closed) {
    cJSON_Delete(msg);
    return;
  }
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
  mc_era_decorate(id, result);
  cJSON *m = envelope(id);
  cJSON_AddItemToObject(m, "result", result);
  mc_send(m);
}

void mc_respond_error(const cJSON *id, int code, const char *message) {
  mc_era_forget(id);
  cJSON *m = envelope(id);
  cJSON *e = cJSON_AddObjectToObject(m, "error");
  cJSON_AddNumberToObject(e, "code", code);
  cJSON_AddStringToObject(e, "message", message);
  mc_send(m);
}
