/* engine/stream.c — an execution's byte streams: output read from pipes and
 * the pty master, input written to stdin, input kept until the process runs.
 *
 * Thread: engine. Below the lifecycle: it tells exec.c (bytes, EOF, a
 * closed handle) through x->up, never by name.
 *
 *   pipe / pty readable ─► read into ctx->readbuf ─► secrets mask ─► ring (bounded)
 *        ─► pr_notify_output (host queue marker, RPC subscriptions)
 *        ─► ops->bytes (a worker parses its stdout)
 *   back-pressure: a ring the host has not taken pauses its stream (pr_exec_resume)
 *   input ─► uv_try_write, the rest queued in write requests that own their bytes
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/locked.h"
#include "engine/exec.h"
#include "engine/secrets.h"

/* A write request owns its bytes. */
typedef struct {
  uv_write_t req;
  char data[];
} write_t;

/* One uv_buf_t holds at most this many bytes (its length is an unsigned int,
 * uv_try_write answers an int): a larger input is written as several. */
#ifndef PR_INPUT_CHUNK
#define PR_INPUT_CHUNK ((size_t)1 << 30)
#endif

static void got_bytes(pr_stream_t *s, const char *p, size_t n);
static void on_pty_poll(uv_poll_t *h, int status, int events);
static void on_read(uv_stream_t *h, ssize_t nread, const uv_buf_t *buf);

static int is_pty(const pr_stream_t *s) { return s == &s->exec->streams[PR_PTY]; }

static void close_handle(uv_handle_t *h) {
  if (!uv_is_closing(h)) uv_close(h, ((pr_exec_t *)h->data)->up->closed);
}

void pr_stream_close(pr_stream_t *s) {
  if (s->exec->secrets && !s->eof) got_bytes(s, NULL, 0); /* secrets.c: release held-back bytes */
  if (s->open) {
    s->open = 0;
    if (is_pty(s)) {
      /* A poll handle does not own its fd: close the pty master ourselves,
       * after uv_close has taken it out of the loop's epoll set. */
      uv_os_fd_t fd = -1;
      uv_fileno((uv_handle_t *)&s->h.poll, &fd);
      uv_poll_stop(&s->h.poll);
      close_handle((uv_handle_t *)&s->h);
      if (fd >= 0) close(fd);
    } else {
      uv_read_stop((uv_stream_t *)&s->h.pipe);
      close_handle((uv_handle_t *)&s->h);
    }
  }
  s->eof = 1;
  if (is_pty(s)) s->exec->in_open = 0; /* the terminal is gone: no more input */
}

/* ---- output -------------------------------------------------------------------- */

/* Back-pressure keeps at most pr_ring_window bytes undelivered: the ring's
 * memory part while it spills (a flood is then handed over from memory, not
 * written to the spill file and read back), else its limit. Reads stop at
 * the window (read_room, got_bytes) and restart below it (pr_exec_resume). */
static int over_window(pr_stream_t *s) {
  return pr_ring_undelivered(s->ring) >= pr_ring_window(s->ring);
}

/* How many bytes the next read may take (back-pressure: what the window
 * leaves before the host has taken what is pending). */
static size_t read_room(pr_stream_t *s) {
  size_t n = sizeof(s->exec->ctx->readbuf);
  if (s->exec->backpressure) {
    uint64_t pending = pr_ring_undelivered(s->ring);
    size_t window = pr_ring_window(s->ring);
    size_t room = pending >= window ? 0 : (size_t)(window - pending);
    if (room < n) n = room;
  }
  return n;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  pr_stream_t *s = (pr_stream_t *)h; /* the handle is the first member */
  buf->base = s->exec->ctx->readbuf;
  buf->len = read_room(s);
}

static void pause_stream(pr_stream_t *s) {
  if (is_pty(s)) uv_poll_stop(&s->h.poll);
  else uv_read_stop((uv_stream_t *)&s->h.pipe);
  s->paused = 1;
  pthread_mutex_lock(&s->ring->mu);
  s->ring->paused = 1;
  pthread_mutex_unlock(&s->ring->mu);
}

/* Bytes arrived on a stream (p == NULL: it ended): keep them and tell
 * whoever listens. A worker's parser gets them as written (it masks what it
 * decodes: masking protocol bytes would break their framing); the ring, and
 * every surface after it, gets them masked. */
static void got_bytes(pr_stream_t *s, const char *p, size_t n) {
  pr_exec_t *x = s->exec;
  int stream = (int)(s - x->streams);
  if (p && x->ops && x->ops->bytes) x->ops->bytes(x, stream, p, n); /* a worker's protocol */
  if (x->secrets) {
    /* p is ctx->readbuf (both readers read there): once masked, the raw
     * bytes, which may spell a secret value, are wiped rather than left for
     * the next read to (partly) overwrite. */
    const char *raw = p;
    size_t nraw = p ? n : 0;
    p = pr_secrets_mask(x->secrets, stream, p, &n);
    if (nraw) pr_wipe((char *)raw, nraw);
    if (p == NULL) return; /* all held back (a possible start of a secret) */
  }
  x->up->more(x);
  pr_ring_write(s->ring, p, n);
  pr_notify_output(x->ctx->ls, x, stream);
  if (x->backpressure && over_window(s)) pause_stream(s);
}

static void on_read(uv_stream_t *h, ssize_t nread, const uv_buf_t *buf) {
  pr_stream_t *s = (pr_stream_t *)h; /* the handle is the first member */
  if (nread > 0) {
    got_bytes(s, buf->base, (size_t)nread);
    return;
  }
  if (nread == 0) return;    /* EAGAIN: nothing to do */
  if (nread == UV_ENOBUFS) { /* back-pressure: on_alloc had no room for this stream */
    pause_stream(s);
    return;
  }
  /* UV_EOF (or an error) on a pipe: no writer is left. */
  pr_stream_close(s);
  s->exec->up->ended(s->exec);
}

/* Read what the kernel holds for `s` until EAGAIN, at most 64 reads so one
 * busy terminal cannot starve the loop. Returns the bytes taken; the stream
 * is closed when it ended (EOF, or EIO: a pty whose slave side is closed and
 * drained) and paused when back-pressure leaves no room. */
size_t pr_stream_read_ready(pr_stream_t *s, uv_os_fd_t fd) {
  size_t got = 0;
  char *buf = s->exec->ctx->readbuf;
  for (int i = 0; i < 64 && s->open; i++) {
    size_t room = read_room(s);
    if (room == 0) {
      pause_stream(s);
      break;
    }
    ssize_t n = read(fd, buf, room);
    if (n > 0) {
      got_bytes(s, buf, (size_t)n);
      got += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    pr_stream_close(s);
  }
  return got;
}

/* The pty master is readable (or hung up). epoll is level-triggered: if
 * read_ready stopped at its bound, the loop calls again. */
static void on_pty_poll(uv_poll_t *h, int status, int events) {
  (void)events;
  pr_stream_t *s = (pr_stream_t *)h;
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)h, &fd) != 0) {
    pr_stream_close(s);
  } else {
    /* An error status too (libuv reports POLLERR so, e.g. a tty poll that
     * met its line discipline mid-change): what the kernel still holds is
     * read first; the read's own EIO or error then closes the stream. */
    pr_stream_read_ready(s, fd);
    if (status < 0 && s->open) pr_stream_close(s);
  }
  if (!s->open) s->exec->up->ended(s->exec);
}

void pr_exec_resume(pr_exec_t *x) {
  for (int i = 0; i < PR_NSTREAM; i++) {
    pr_stream_t *s = &x->streams[i];
    if (!s->open || !s->paused) continue;
    if (!x->out_held && !over_window(s)) {
      s->paused = 0;
      if (is_pty(s)) uv_poll_start(&s->h.poll, UV_READABLE | UV_DISCONNECT, on_pty_poll);
      else uv_read_start((uv_stream_t *)&s->h.pipe, on_alloc, on_read);
    } else { /* still paused: the host's next take asks again */
      pthread_mutex_lock(&s->ring->mu);
      s->ring->paused = 1;
      pthread_mutex_unlock(&s->ring->mu);
    }
  }
}

void pr_exec_hold_output(pr_exec_t *x, int on) {
  if (!on) {
    x->out_held = 0;
    pr_exec_resume(x);
    return;
  }
  x->out_held = 1;
  for (int i = 0; i < PR_NSTREAM; i++)
    if (x->streams[i].open && !x->streams[i].paused) pause_stream(&x->streams[i]);
}

int pr_stream_open(pr_exec_t *x, int which, int fd) {
  pr_stream_t *s = &x->streams[which];
  uv_loop_t *loop = x->ctx->loop;
  s->exec = x;
  int rc = which == PR_PTY ? uv_poll_init(loop, &s->h.poll, fd) : uv_pipe_init(loop, &s->h.pipe, 0);
  if (rc != 0) {
    close(fd);
    return -1;
  }
  s->h.pipe.data = x; /* same offset in every handle type */
  x->handles++;
  s->open = 1;
  if (which == PR_PTY) {
    uv_poll_start(&s->h.poll, UV_READABLE | UV_DISCONNECT, on_pty_poll);
    if (x->out_held) pause_stream(s);
    return 0;
  }
  if (uv_pipe_open(&s->h.pipe, fd) != 0) {
    close(fd);
    pr_stream_close(s);
    return -1;
  }
  uv_read_start((uv_stream_t *)&s->h.pipe, on_alloc, on_read);
  if (x->out_held) pause_stream(s);
  return 0;
}

/* ---- stdin ---------------------------------------------------------------------------- */

void pr_exec_open_input(pr_exec_t *x, int fd) {
  if (uv_pipe_init(x->ctx->loop, &x->in, 0) != 0) {
    close(fd);
    return;
  }
  x->in.data = x;
  x->handles++;
  if (uv_pipe_open(&x->in, fd) == 0) {
    x->in_open = 1;
  } else {
    close(fd);
    close_handle((uv_handle_t *)&x->in);
  }
}

void pr_exec_close_input(pr_exec_t *x) {
  x->in_open = 0;
  if (x->in.data == x) close_handle((uv_handle_t *)&x->in);
}

static void on_write(uv_write_t *req, int status) {
  (void)status; /* EPIPE when the child closed its stdin: nothing to report to anyone */
  free(req);
}

void pr_exec_drop_pending_input(pr_exec_t *x) { pr_buf_free(&x->pending_in); }

/* Input given before the process existed goes out first, in order. */
void pr_exec_flush_pending_input(pr_exec_t *x) {
  int close_after = x->in_closing;
  x->in_closing = 0;
  size_t n = x->pending_in.len;
  char *p = pr_buf_release(&x->pending_in);
  if (n && x->in_open) pr_exec_input(x, p, n);
  free(p);
  if (close_after && x->in_open) pr_exec_close_stdin(x);
  else if (close_after) x->in_closing = 1;
}

/* Keep input given while queued or starting, at most PR_PENDING_INPUT_MAX bytes. */
static int keep_pending_input(pr_exec_t *x, const char *data, size_t len) {
  if (len > PR_PENDING_INPUT_MAX - x->pending_in.len) return PR_EBUSY;
  int rc = pr_buf_add(&x->pending_in, data, len);
  x->pending_in.err = 0; /* refused, nothing kept: the next input may try again */
  return rc;
}

int pr_exec_input(pr_exec_t *x, const char *data, size_t len) {
  if ((x->state == PR_QUEUED || x->state == PR_STARTING) && x->verdict < 0) {
    if (!x->stdin_pipe || x->in_closing) return PR_ESTDINCLOSED;
    return len ? keep_pending_input(x, data, len) : 0;
  }
  if (x->state != PR_RUNNING || x->exited) return PR_ENOTRUNNING;
  if (!x->in_open || x->in_closing) return PR_ESTDINCLOSED;
  if (len == 0) return 0;
  uv_stream_t *s = (uv_stream_t *)&x->in;
  if (s->write_queue_size >= PR_PENDING_INPUT_MAX) return PR_EBUSY; /* it does not read */
  /* Try the fast path first (one buffer; libuv refuses it while writes are
   * queued, so order holds); queue what the pipe would not take now. */
  size_t first = len < PR_INPUT_CHUNK ? len : PR_INPUT_CHUNK;
  uv_buf_t b = uv_buf_init((char *)data, (unsigned)first);
  int n = uv_try_write(s, &b, 1);
  if (n < 0 && n != UV_EAGAIN) return n == UV_EPIPE ? PR_ESTDINCLOSED : n;
  size_t done = n > 0 ? (size_t)n : 0;
  if (done == len) return 0;
  size_t rest = len - done, nbufs = (rest + PR_INPUT_CHUNK - 1) / PR_INPUT_CHUNK;
  write_t *w = malloc(sizeof(*w) + rest);
  uv_buf_t small[4], *bufs = nbufs <= 4 ? small : malloc(nbufs * sizeof(*bufs));
  if (w == NULL || bufs == NULL || nbufs > UINT_MAX) {
    free(w);
    if (bufs != small) free(bufs);
    return PR_ENOMEM;
  }
  memcpy(w->data, data + done, rest);
  for (size_t i = 0; i < nbufs; i++) {
    size_t off = i * PR_INPUT_CHUNK, k = rest - off < PR_INPUT_CHUNK ? rest - off : PR_INPUT_CHUNK;
    bufs[i] = uv_buf_init(w->data + off, (unsigned)k);
  }
  int rc = uv_write(&w->req, s, bufs, (unsigned)nbufs, on_write); /* copies bufs[] */
  if (bufs != small) free(bufs);
  if (rc != 0) {
    free(w);
    return rc == UV_EPIPE ? PR_ESTDINCLOSED : rc;
  }
  return 0;
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  (void)status;
  pr_exec_t *x = (pr_exec_t *)req->data;
  free(req);
  if (x->in.data == x) close_handle((uv_handle_t *)&x->in);
}

int pr_exec_close_stdin(pr_exec_t *x) {
  if ((x->state == PR_QUEUED || x->state == PR_STARTING) && x->verdict < 0) {
    if (!x->stdin_pipe || x->in_closing) return PR_ESTDINCLOSED;
    x->in_closing = 1; /* applied after the pending input once running */
    return 0;
  }
  if (x->state != PR_RUNNING || x->exited) return PR_ENOTRUNNING;
  if (!x->in_open || x->in_closing) return PR_ESTDINCLOSED;
  if (x->pty) { /* a terminal has no stdin to close: send the EOF character */
    return pr_exec_input(x, "\x04", 1);
  }
  x->in_closing = 1;
  x->in_open = 0;
  uv_shutdown_t *req = malloc(sizeof(*req));
  if (req == NULL || uv_shutdown(req, (uv_stream_t *)&x->in, on_shutdown) != 0) {
    free(req);
    close_handle((uv_handle_t *)&x->in);
    return 0;
  }
  req->data = x;
  return 0;
}
