/* chan.c — proctor-acp's four pipes: lines read from the client (our stdin)
 * and from the agent (its stdout), and bounded queues of lines written to the
 * client (our stdout) and to the agent (its stdin).
 *
 * Thread: main.
 *
 * Reads happen only when poll() says there are bytes, so one read() never
 * blocks. Writes never block either: on a socket with MSG_DONTWAIT, on a pipe
 * at most PIPE_BUF bytes once poll() says there is room (a pipe we did not
 * create keeps its blocking mode: it may be shared). main.c stops reading a
 * side while the queue toward the other holds more than AC_QUEUE_HIGH bytes,
 * so a queue holds at most that plus one line (AC_LINE_MAX).
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "acp.h"

ac_in_t ac_from[2] = {{.fd = -1}, {.fd = -1}};
ac_out_t ac_to[2] = {{.fd = -1}, {.fd = -1}};

void ac_in_read(ac_in_t *in, void (*on_line)(const char *line, size_t len)) {
  if (in->cap - in->len < 65536) {
    size_t cap = in->cap ? in->cap * 2 : 131072;
    char *p = realloc(in->buf, cap);
    if (p == NULL) {
      mc_log("out of memory reading a message");
      in->eof = 1;
      return;
    }
    in->buf = p;
    in->cap = cap;
  }
  ssize_t n = read(in->fd, in->buf + in->len, in->cap - in->len);
  if (n < 0) {
    if (errno != EINTR && errno != EAGAIN) in->eof = 1;
    return;
  }
  if (n == 0) {
    in->eof = 1;
    return;
  }
  size_t scan = in->len; /* bytes before it hold no newline */
  in->len += (size_t)n;
  size_t start = 0;
  for (;;) {
    char *nl = memchr(in->buf + scan, '\n', in->len - scan);
    if (nl == NULL) break;
    size_t end = (size_t)(nl - in->buf);
    if (in->skipping) {
      in->skipping = 0;
    } else {
      size_t e = end, s = start;
      if (e > s && in->buf[e - 1] == '\r') e--;
      while (s < e && (in->buf[s] == ' ' || in->buf[s] == '\t')) s++;
      if (e > s) on_line(in->buf + s, e - s);
    }
    start = scan = end + 1;
  }
  memmove(in->buf, in->buf + start, in->len - start);
  in->len -= start;
  if (in->len > AC_LINE_MAX) {
    if (!in->skipping) on_line(NULL, 0);
    in->skipping = 1;
    in->len = 0;
  }
  if (in->len < 65536 && in->cap > (1u << 20)) { /* not huge for ever after one big message */
    char *p = realloc(in->buf, 131072);
    if (p) {
      in->buf = p;
      in->cap = 131072;
    }
  }
}

void ac_out_line(ac_out_t *out, const char *line, size_t len) {
  if (out->closed) return;
  if (out->off > 0 && out->off == out->len) out->off = out->len = 0;
  if (out->len + len + 1 > out->cap) {
    if (out->off > 0) { /* reuse the written part first */
      memmove(out->buf, out->buf + out->off, out->len - out->off);
      out->len -= out->off;
      out->off = 0;
    }
    size_t cap = out->cap ? out->cap : 65536;
    while (cap < out->len + len + 1) cap *= 2;
    if (cap > out->cap) {
      char *p = realloc(out->buf, cap);
      if (p == NULL) {
        mc_log("out of memory queueing a message of %zu bytes: dropped", len);
        return;
      }
      out->buf = p;
      out->cap = cap;
    }
  }
  memcpy(out->buf + out->len, line, len);
  out->buf[out->len + len] = '\n';
  out->len += len + 1;
}

void ac_out_json(ac_out_t *out, cJSON *msg) {
  char *s = cJSON_PrintUnformatted(msg);
  cJSON_Delete(msg);
  if (s == NULL) {
    mc_log("out of memory printing a message");
    return;
  }
  ac_out_line(out, s, strlen(s));
  free(s);
}

static ssize_t write_some(ac_out_t *out, const char *p, size_t n) {
  if (out->kind == 0) {
    struct stat st;
    out->kind = fstat(out->fd, &st) != 0 ? 3
                : S_ISSOCK(st.st_mode)   ? 1
                : S_ISFIFO(st.st_mode)   ? 2
                                         : 3;
  }
  if (out->kind == 1) return send(out->fd, p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (out->kind == 2) {
    struct pollfd pf = {.fd = out->fd, .events = POLLOUT};
    if (poll(&pf, 1, 0) <= 0 || !(pf.revents & (POLLOUT | POLLERR))) {
      errno = EAGAIN;
      return -1;
    }
    if (n > PIPE_BUF) n = PIPE_BUF;
  }
  return write(out->fd, p, n);
}

void ac_out_flush(ac_out_t *out) {
  while (!out->closed && out->off < out->len) {
    ssize_t w = write_some(out, out->buf + out->off, out->len - out->off);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) out->closed = 1;
      break;
    }
    out->off += (size_t)w;
  }
  if (out->closed) out->off = out->len = 0;
}

void ac_in_free(ac_in_t *in) {
  free(in->buf);
  in->buf = NULL;
  in->len = in->cap = 0;
}

void ac_out_free(ac_out_t *out) {
  free(out->buf);
  out->buf = NULL;
  out->off = out->len = out->cap = 0;
}
