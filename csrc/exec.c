/* exec.c — execution lifecycle, output streams, stdin, kill ladder, drain.
 *
 * Thread: engine. See exec.h for the state table.
 *
 *   shepherd SPAWNED ─► streams opened (uv_pipe_t on received fds) ─► running
 *   stream read ─► ring (bounded) ─► one output marker queued per ring
 *   cancel/timeout ─► SIGHUP(pty) SIGTERM+SIGCONT ─ grace ─► SIGKILL
 *   shepherd EXITED ─► drain timer ─► every stream at EOF (or timer) ─► terminal
 *   terminal ─► RELEASE (shepherd kills leftovers, reaps leader) ─► next queued
 */

#include "exec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "registry.h"
#include "rpc.h"
#include "journal.h"
#include "secrets.h"
#include "supervisor.h"
#include "worker.h"

#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

static void finish(pr_exec_t *x);
static void stop(pr_exec_t *x, int force);
static void emit_output_marker(pr_exec_t *x, int stream);
static void flush_pending_input(pr_exec_t *x);
static void drop_pending_input(pr_exec_t *x);
static int apply_size(pr_exec_t *x);

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

uint64_t pr_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

/* ---- transitions ----------------------------------------------------------- */

static const unsigned char allowed[PR_NSTATE][PR_NSTATE] = {
    [PR_QUEUED] = {[PR_STARTING] = 1, [PR_CANCELED] = 1, [PR_FAILED] = 1},
    [PR_STARTING] = {[PR_RUNNING] = 1, [PR_CANCELED] = 1, [PR_FAILED] = 1},
    [PR_RUNNING] = {[PR_COMPLETED] = 1, [PR_FAILED] = 1, [PR_CANCELED] = 1, [PR_TIMED_OUT] = 1},
};

static void emit_state(pr_exec_t *x, pr_state_t prev) {
  pr_event_t *ev = calloc(1, sizeof(*ev));
  if (ev == NULL) return;
  ev->type = PR_EV_STATE;
  ev->id = x->id;
  ev->state = x->state;
  ev->prev = prev;
  ev->reason = dup_or_null(x->reason);
  ev->error = dup_or_null(x->error);
  ev->exit_code = x->exit_code;
  ev->signal = x->signal;
  ev->pid = x->pid;
  pr_emit_event(x->eng, ev);
}

/* The one place a state changes. Returns 0, or PR_EINVAL for a transition
 * that is not in the table (a bug; the state is left alone). */
static int transition(pr_exec_t *x, pr_state_t to) {
  pr_state_t from = x->state;
  if (to >= PR_NSTATE || !allowed[from][to]) return PR_EINVAL;
  x->state = to;
  emit_state(x, from);
  if (x->eng->rpc) pr_rpc_on_state(x->eng, x, from); /* RPC subscribers and waiters */
  if (x->eng->journal) pr_journal_on_state(x, from); /* history and audit files */
  return 0;
}

/* Record the verdict (first decision wins). Returns 1 if this call decided. */
static int decide(pr_exec_t *x, pr_state_t verdict, const char *reason) {
  if (x->verdict >= 0) return 0;
  x->verdict = (int)verdict;
  free(x->reason);
  x->reason = dup_or_null(reason);
  return 1;
}

/* ---- handles ----------------------------------------------------------------- */

void pr_exec_handle_closed(uv_handle_t *h) {
  pr_exec_t *x = (pr_exec_t *)h->data;
  if (--x->handles == 0 && x->dead) pr_exec_free(x);
}

static void close_handle(pr_exec_t *x, uv_handle_t *h) {
  (void)x;
  if (!uv_is_closing(h)) uv_close(h, pr_exec_handle_closed);
}

static int all_eof(const pr_exec_t *x) {
  for (int i = 0; i < PR_NSTREAM; i++)
    if (x->streams[i].ring && !x->streams[i].eof) return 0;
  return 1;
}

static int is_pty(const pr_stream_t *s) { return s == &s->exec->streams[PR_PTY]; }

static void got_bytes(pr_stream_t *s, const char *p, size_t n);

static void stream_close(pr_stream_t *s) {
  if (s->exec->secrets && !s->eof) got_bytes(s, NULL, 0); /* secrets.c: release held-back bytes */
  if (s->open) {
    s->open = 0;
    if (is_pty(s)) {
      /* A poll handle does not own its fd: close the pty master ourselves,
       * after uv_close has taken it out of the loop's epoll set. */
      uv_os_fd_t fd = -1;
      uv_fileno((uv_handle_t *)&s->h.poll, &fd);
      uv_poll_stop(&s->h.poll);
      close_handle(s->exec, (uv_handle_t *)&s->h);
      if (fd >= 0) close(fd);
    } else {
      uv_read_stop((uv_stream_t *)&s->h.pipe);
      close_handle(s->exec, (uv_handle_t *)&s->h);
    }
  }
  s->eof = 1;
  if (is_pty(s)) s->exec->in_open = 0; /* the terminal is gone: no more input */
}

static void maybe_finish(pr_exec_t *x) {
  if (x->exited && !x->finished && all_eof(x)) finish(x);
}

/* ---- output -------------------------------------------------------------------- */

/* How many bytes the next read may take (back-pressure: what the ring can
 * hold before the host has taken what is pending). */
static size_t read_room(pr_stream_t *s) {
  size_t n = sizeof(s->exec->eng->readbuf);
  if (s->exec->backpressure) {
    uint64_t pending = pr_ring_undelivered(s->ring);
    size_t room = pending >= s->ring->limit ? 0 : (size_t)(s->ring->limit - pending);
    if (room < n) n = room;
  }
  return n;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  (void)suggested;
  pr_stream_t *s = (pr_stream_t *)h; /* the handle is the first member */
  buf->base = s->exec->eng->readbuf;
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

static void timer_start(pr_exec_t *x, uint64_t ms);

/* Bytes arrived on a stream: keep them and tell the host. */
static void got_bytes(pr_stream_t *s, const char *p, size_t n) {
  pr_exec_t *x = s->exec;
  if (x->secrets && !(p = pr_secrets_mask(x->secrets, (int)(s - x->streams), p, &n))) return; /* *** */
  if (x->exited && !x->finished) { /* draining: an idle timeout, not an absolute one */
    uint64_t now = uv_now(&x->eng->loop), at = now + x->eng->opts.drain_ms;
    if (at > x->drain_deadline) at = x->drain_deadline;
    timer_start(x, at > now ? at - now : 0);
  }
  pr_ring_write(s->ring, p, n);
  emit_output_marker(x, (int)(s - x->streams));
  if (x->worker) pr_worker_on_bytes(x, (int)(s - x->streams), p, n); /* worker protocol */
  if (x->eng->rpc) pr_rpc_on_output(x->eng, x, (int)(s - x->streams)); /* RPC subscribers */
  if (x->backpressure && pr_ring_undelivered(s->ring) >= s->ring->limit) pause_stream(s);
}

/* Output delivery is adaptive. The first bytes after a quiet period are
 * signalled to the host at once (a prompt feels instant); bytes that keep
 * arriving within PR_FLOOD_NS of the last signal wait for the 1 ms flush
 * timer, so under a flood the host wakes about once a millisecond and takes
 * everything that arrived meanwhile in one event, instead of once per read.
 * Every deferred marker is pushed before its execution's terminal event. */
#define PR_FLOOD_NS 1000000

static void push_marker(pr_exec_t *x, int stream) {
  pr_stream_t *s = &x->streams[stream];
  s->last_mark_ns = uv_hrtime();
  if (!pr_ring_mark(s->ring)) return; /* a marker is already queued: coalesce */
  pr_event_t *ev = calloc(1, sizeof(*ev));
  if (ev == NULL) return;
  ev->type = PR_EV_OUTPUT;
  ev->id = x->id;
  ev->stream = stream;
  pr_ring_ref(s->ring);
  ev->ring = s->ring;
  pr_emit_event(x->eng, ev);
}

static void emit_output_marker(pr_exec_t *x, int stream) {
  pr_stream_t *s = &x->streams[stream];
  if (!pr_queue_empty(&s->defer)) return; /* the flush timer will signal it */
  if (s->last_mark_ns && uv_hrtime() - s->last_mark_ns < PR_FLOOD_NS) {
    pr_engine_t *e = x->eng;
    pr_queue_push(&e->deferred, &s->defer);
    if (!uv_is_active((uv_handle_t *)&e->flush_timer))
      uv_timer_start(&e->flush_timer, pr_exec_on_flush, 1, 0);
    return;
  }
  push_marker(x, stream);
}

/* Push the deferred marker of `s` now, if it has one. */
static void flush_stream(pr_stream_t *s) {
  if (pr_queue_empty(&s->defer)) return;
  pr_queue_remove(&s->defer);
  push_marker(s->exec, (int)(s - s->exec->streams));
}

void pr_exec_on_flush(uv_timer_t *t) {
  pr_engine_t *e = (pr_engine_t *)t->data;
  while (!pr_queue_empty(&e->deferred))
    flush_stream(PR_QUEUE_DATA(pr_queue_head(&e->deferred), pr_stream_t, defer));
}

static void on_read(uv_stream_t *h, ssize_t nread, const uv_buf_t *buf) {
  pr_stream_t *s = (pr_stream_t *)h; /* the handle is the first member */
  if (nread > 0) {
    got_bytes(s, buf->base, (size_t)nread);
    return;
  }
  if (nread == 0) return; /* EAGAIN: nothing to do */
  if (nread == UV_ENOBUFS) { /* back-pressure: on_alloc had no room for this stream */
    pause_stream(s);
    return;
  }
  /* UV_EOF (or an error) on a pipe: no writer is left. */
  stream_close(s);
  maybe_finish(s->exec);
}

/* Read what the kernel holds for `s` until EAGAIN, at most 64 reads so one
 * busy terminal cannot starve the loop. Returns the bytes taken; the stream
 * is closed when it ended (EOF, or EIO: a pty whose slave side is closed and
 * drained) and paused when back-pressure leaves no room. */
static size_t read_ready(pr_stream_t *s, uv_os_fd_t fd) {
  size_t got = 0;
  for (int i = 0; i < 64 && s->open; i++) {
    size_t room = read_room(s);
    if (room == 0) {
      pause_stream(s);
      break;
    }
    ssize_t n = read(fd, s->exec->eng->readbuf, room);
    if (n > 0) {
      got_bytes(s, s->exec->eng->readbuf, (size_t)n);
      got += (size_t)n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    stream_close(s);
  }
  return got;
}

/* The pty master is readable (or hung up). epoll is level-triggered: if
 * read_ready stopped at its bound, the loop calls again. */
static void on_pty_poll(uv_poll_t *h, int status, int events) {
  (void)events;
  pr_stream_t *s = (pr_stream_t *)h;
  uv_os_fd_t fd;
  if (status < 0 || uv_fileno((uv_handle_t *)h, &fd) != 0) stream_close(s);
  else read_ready(s, fd);
  if (!s->open) maybe_finish(s->exec);
}

void pr_exec_resume(pr_exec_t *x) {
  for (int i = 0; i < PR_NSTREAM; i++) {
    pr_stream_t *s = &x->streams[i];
    if (s->open && s->paused && pr_ring_undelivered(s->ring) < s->ring->limit) {
      s->paused = 0;
      if (is_pty(s)) uv_poll_start(&s->h.poll, UV_READABLE | UV_DISCONNECT, on_pty_poll);
      else uv_read_start((uv_stream_t *)&s->h.pipe, on_alloc, on_read);
    }
  }
}

/* ---- timer: timeout → kill grace → drain ----------------------------------------- */

static void on_timer(uv_timer_t *t) {
  pr_exec_t *x = (pr_exec_t *)t->data;
  if (x->finished) return;
  if (x->exited) { /* drain deadline: whatever still holds a pipe open is cut off */
    /* ... except a stream paused by back-pressure: the bytes still in its
     * pipe are owed to a consumer that asked to keep everything, so it is
     * the consumer's pace that ends it. Time spent paused does not count
     * against the drain cap (that cap is for grandchildren holding a pipe). */
    uint64_t now = uv_now(&x->eng->loop);
    /* A starved loop runs its timers before it polls: bytes that reached the
     * kernel within the idle window may not have been seen yet. Take them
     * first; if there were any, the idle window starts again, up to the
     * drain cap. */
    size_t late = 0;
    for (int i = 0; i < PR_NSTREAM; i++) {
      pr_stream_t *s = &x->streams[i];
      uv_os_fd_t fd;
      if (s->open && !s->paused && uv_fileno((uv_handle_t *)&s->h, &fd) == 0)
        late += read_ready(s, fd);
    }
    if (all_eof(x)) {
      finish(x);
      return;
    }
    if (late > 0 && now < x->drain_deadline) {
      uint64_t left = x->drain_deadline - now;
      timer_start(x, left < x->eng->opts.drain_ms ? left : x->eng->opts.drain_ms);
      return;
    }
    for (int i = 0; i < PR_NSTREAM; i++) {
      if (x->streams[i].open && x->streams[i].paused) {
        uint64_t cap = (uint64_t)x->eng->opts.drain_ms * 10;
        x->drain_deadline = now + (cap > 5000 ? cap : 5000);
        timer_start(x, x->eng->opts.drain_ms);
        return;
      }
    }
    for (int i = 0; i < PR_NSTREAM; i++)
      if (x->streams[i].ring) stream_close(&x->streams[i]);
    maybe_finish(x);
  } else if (x->stopping) { /* grace over: SIGKILL the whole tree */
    pr_sup_send(x->eng, PR_W_SIGNAL, PR_WF_STOPPING, x->id, SIGKILL, 0, NULL, 0);
  } else if (x->state == PR_RUNNING) { /* timeout */
    if (decide(x, PR_TIMED_OUT, "timeout")) stop(x, 0);
  }
}

static void timer_start(pr_exec_t *x, uint64_t ms) {
  if (!x->timer_open) return;
  uv_timer_start(&x->timer, on_timer, ms, 0);
}

/* ---- kill ladder ---------------------------------------------------------------- */

static void stop(pr_exec_t *x, int force) {
  if (x->state != PR_RUNNING || x->exited) return;
  if (force) {
    x->stopping = 1;
    pr_sup_send(x->eng, PR_W_SIGNAL, PR_WF_STOPPING, x->id, SIGKILL, 0, NULL, 0);
    return;
  }
  if (x->stopping) return;
  x->stopping = 1;
  if (x->pty) pr_sup_send(x->eng, PR_W_SIGNAL, PR_WF_STOPPING, x->id, SIGHUP, 0, NULL, 0);
  pr_sup_send(x->eng, PR_W_SIGNAL, PR_WF_STOPPING, x->id, SIGTERM, 0, NULL, 0);
  timer_start(x, x->grace_ms);
}

pr_cancel_result_t pr_exec_cancel(pr_exec_t *x, int force, const char *reason) {
  if (x->finished) return PR_ALREADY_TERMINAL;
  if (x->verdict == PR_CANCELED || x->verdict == PR_TIMED_OUT) { /* being stopped */
    if (force && x->state == PR_RUNNING) stop(x, 1);
    return PR_ALREADY_CANCELING;
  }
  if (x->worker && x->exited && x->verdict < 0) { /* a worker between two processes */
    decide(x, PR_CANCELED, reason);
    finish(x);
    return PR_CANCELING;
  }
  if (x->exited || x->verdict >= 0) return PR_ALREADY_TERMINAL; /* its exit came first */
  decide(x, PR_CANCELED, reason);
  switch (x->respawning ? PR_STARTING : x->state) {
  case PR_QUEUED:
    pr_queue_remove(&x->runq);
    finish(x);
    break;
  case PR_STARTING: /* stopped as soon as the shepherd reports the spawn */
    x->stopping = force ? 2 : 0;
    break;
  default:
    stop(x, force);
    break;
  }
  return PR_CANCELING;
}

/* ---- begin / spawn results ----------------------------------------------------------- */

void pr_exec_begin(pr_exec_t *x) {
  pr_engine_t *e = x->eng;
  e->running++;
  transition(x, PR_STARTING);
  int rc = pr_sup_ensure(e);
  if (rc == 0)
    rc = pr_sup_send(e, PR_W_SPAWN, (x->pty ? PR_WF_PTY : 0) | (x->stdin_pipe ? PR_WF_STDIN : 0),
                     x->id, ((int64_t)x->cols << 16) | x->rows, (int64_t)x->argc, x->spawn_msg,
                     x->spawn_len);
  if (x->worker == NULL) { /* a worker keeps it for its restarts */
    free(x->spawn_msg);
    x->spawn_msg = NULL;
  }
  if (rc != 0) {
    decide(x, PR_FAILED, "spawn_error");
    free(x->error);
    const char *detail = pr_sup_last_error(e);
    size_t n = strlen(detail) + 64;
    x->error = malloc(n);
    if (x->error) snprintf(x->error, n, "%s: %s", pr_err_name(rc), *detail ? detail : pr_strerror(rc));
    finish(x);
  }
}

void pr_exec_schedule(pr_engine_t *e) {
  while (!pr_queue_empty(&e->queued) && !e->closing &&
         (e->opts.max_running == 0 || e->running < e->opts.max_running)) {
    pr_queue_t *q = pr_queue_head(&e->queued);
    pr_queue_remove(q);
    pr_exec_begin(PR_QUEUE_DATA(q, pr_exec_t, runq));
  }
}

static int open_stream(pr_exec_t *x, int which, int fd) {
  pr_stream_t *s = &x->streams[which];
  s->exec = x;
  int rc = which == PR_PTY ? uv_poll_init(&x->eng->loop, &s->h.poll, fd)
                           : uv_pipe_init(&x->eng->loop, &s->h.pipe, 0);
  if (rc != 0) {
    close(fd);
    return -1;
  }
  s->h.pipe.data = x; /* same offset in every handle type */
  x->handles++;
  s->open = 1;
  if (which == PR_PTY) {
    uv_poll_start(&s->h.poll, UV_READABLE | UV_DISCONNECT, on_pty_poll);
    return 0;
  }
  if (uv_pipe_open(&s->h.pipe, fd) != 0) {
    close(fd);
    stream_close(s);
    return -1;
  }
  uv_read_start((uv_stream_t *)&s->h.pipe, on_alloc, on_read);
  return 0;
}

/* Open x->in on `fd` for writing input. Takes ownership of fd. */
static void open_input(pr_exec_t *x, int fd) {
  if (uv_pipe_init(&x->eng->loop, &x->in, 0) != 0) {
    close(fd);
    return;
  }
  x->in.data = x;
  x->handles++;
  if (uv_pipe_open(&x->in, fd) == 0) {
    x->in_open = 1;
  } else {
    close(fd);
    close_handle(x, (uv_handle_t *)&x->in);
  }
}

void pr_exec_on_spawned(pr_engine_t *e, const pr_wire_hdr_t *h, int *fds, int nfds) {
  pr_exec_t *x = pr_registry_find(e, h->job, 0);
  int k = 0;
  if (x == NULL || (x->state != PR_STARTING && !x->respawning)) { /* cannot happen; do not leak */
    for (int i = 0; i < nfds; i++) close(fds[i]);
    return;
  }
  x->pid = h->a;
  if ((h->flags & PR_WF_PIDFD) && k < nfds) x->pidfd = fds[k++];
  if (x->pty) {
    if (k < nfds) {
      int master = fds[k++];
      int wfd = fcntl(master, F_DUPFD_CLOEXEC, 3); /* input writes on their own fd */
      if (open_stream(x, PR_PTY, master) == 0 && wfd >= 0) open_input(x, wfd);
      else if (wfd >= 0) close(wfd);
      apply_size(x); /* a resize while starting: the child sees it (SIGWINCH) */
    }
  } else {
    if (x->stdin_pipe && k < nfds) open_input(x, fds[k++]);
    if (k < nfds) open_stream(x, PR_STDOUT, fds[k++]);
    if (k < nfds) open_stream(x, PR_STDERR, fds[k++]);
  }
  for (; k < nfds; k++) close(fds[k]);
  for (int i = 0; i < PR_NSTREAM; i++) /* a stream that failed to open counts as ended */
    if (x->streams[i].ring && !x->streams[i].open) x->streams[i].eof = 1;
  int again = x->respawning;
  x->respawning = 0;
  if (!again) {
    x->started_at = pr_now_ms();
    x->started_mono = uv_now(&e->loop);
    transition(x, PR_RUNNING);
  }
  flush_pending_input(x); /* needs state running */
  if (x->worker) pr_worker_on_spawned(x);
  if (x->verdict == PR_CANCELED) stop(x, x->stopping == 2);
  else if (x->timeout_ms && !again) timer_start(x, x->timeout_ms);
}

void pr_exec_on_failed(pr_engine_t *e, const pr_wire_hdr_t *h) {
  pr_exec_t *x = pr_registry_find(e, h->job, 0);
  if (x == NULL || (x->state != PR_STARTING && !x->respawning)) return;
  x->respawning = 0;
  x->exited = 1; /* no process (a worker's restart failed) */
  decide(x, PR_FAILED, "spawn_error");
  const char *cmd = x->argv && x->argv[0] ? x->argv[0] : "?";
  const char *what = h->b == PR_STAGE_CHDIR ? x->cwd : cmd;
  int err = (int)h->a;
  size_t n = strlen(what) + 128;
  free(x->error);
  x->error = malloc(n);
  if (x->error)
    snprintf(x->error, n, "%s: %s: %s", pr_stage_name(h->b), what, strerror(err));
  finish(x);
}

void pr_exec_on_exited(pr_engine_t *e, const pr_wire_hdr_t *h) {
  pr_exec_t *x = pr_registry_find(e, h->job, 0);
  if (x == NULL || x->exited || x->finished) return;
  x->exited = 1;
  if (h->flags & PR_WF_SIGNALED) {
    x->signal = (int)h->b;
    decide(x, PR_FAILED, "signal");
  } else {
    x->exit_code = (int)h->b;
    decide(x, x->exit_code == 0 ? PR_COMPLETED : PR_FAILED, "exit");
  }
  if (x->timer_open) uv_timer_stop(&x->timer);
  /* Output may still be queued (a big pty backlog) or a background process
   * may hold a stream open: wait until drain_ms pass without a byte, and
   * never longer than ten times that (at least 5 s) in all. */
  uint64_t cap = (uint64_t)e->opts.drain_ms * 10;
  x->drain_deadline = uv_now(&e->loop) + (cap > 5000 ? cap : 5000);
  if (all_eof(x)) finish(x);
  else timer_start(x, e->opts.drain_ms);
}

/* The shepherd died: its jobs lost their parent. Kill what we can still
 * reach safely (the leader's group, only while its pidfd says it is alive,
 * i.e. its pid cannot have been reused) and end every live execution. */
void pr_exec_on_supervisor_lost(pr_engine_t *e) {
  pr_queue_t *q;
  PR_QUEUE_FOREACH(q, &e->order) {
    pr_exec_t *x = PR_QUEUE_DATA(q, pr_exec_t, order);
    if (x->finished || x->state == PR_QUEUED) continue;
    if (!x->exited && x->pidfd >= 0) {
      if (syscall(SYS_pidfd_send_signal, x->pidfd, 0, NULL, 0) == 0) {
        kill(-(pid_t)x->pid, SIGKILL);
        syscall(SYS_pidfd_send_signal, x->pidfd, SIGKILL, NULL, 0);
      }
    }
    x->exited = 1;
    x->released = 1; /* nobody to release it to */
    free(x->reason);
    x->reason = strdup("supervisor_lost");
    x->verdict = PR_FAILED;
    for (int i = 0; i < PR_NSTREAM; i++)
      if (x->streams[i].ring) stream_close(&x->streams[i]);
    if (x->state == PR_STARTING) { /* no SPAWNED will come */
      finish(x);
      continue;
    }
    maybe_finish(x);
  }
}

/* ---- workers: one execution, several processes ------------------------------------ */

void pr_exec_park(pr_exec_t *x) {
  if (x->timer_open) uv_timer_stop(&x->timer);
  if (!x->released && pr_sup_alive(x->eng))
    pr_sup_send(x->eng, PR_W_RELEASE, 0, x->id, 0, 0, NULL, 0);
  x->released = 1;
  x->exited = 1;
  x->respawning = 0;
  x->in_open = 0;
  if (x->in.data == x) close_handle(x, (uv_handle_t *)&x->in);
  if (x->pidfd >= 0) {
    close(x->pidfd);
    x->pidfd = -1;
  }
  drop_pending_input(x);
  x->verdict = -1;
  free(x->reason);
  x->reason = NULL;
  x->stopping = 0;
  x->in_closing = 0;
  x->pid = 0;
}

void pr_exec_respawn(pr_exec_t *x) {
  pr_engine_t *e = x->eng;
  for (int i = 0; i < PR_NSTREAM; i++) {
    x->streams[i].eof = 0;
    x->streams[i].paused = 0;
  }
  x->exited = 0;
  x->released = 0;
  x->respawning = 1;
  x->exit_code = -1;
  x->signal = 0;
  int rc = x->spawn_msg ? pr_sup_ensure(e) : PR_ENOMEM;
  if (rc == 0)
    rc = pr_sup_send(e, PR_W_SPAWN, (x->pty ? PR_WF_PTY : 0) | (x->stdin_pipe ? PR_WF_STDIN : 0),
                     x->id, ((int64_t)x->cols << 16) | x->rows, (int64_t)x->argc, x->spawn_msg,
                     x->spawn_len);
  if (rc != 0) {
    x->respawning = 0;
    x->exited = 1;
    x->released = 1;
    for (int i = 0; i < PR_NSTREAM; i++) x->streams[i].eof = 1;
    decide(x, PR_FAILED, "spawn_error");
    finish(x);
  }
}

/* ---- the end ------------------------------------------------------------------------ */

static void finish(pr_exec_t *x) {
  pr_engine_t *e = x->eng;
  if (x->finished) return;
  if (x->worker && pr_worker_on_end(x)) return; /* the worker restarts: still running */
  x->finished = 1;
  int was_active = x->state == PR_STARTING || x->state == PR_RUNNING;
  if (x->state == PR_RUNNING && !x->released && pr_sup_alive(e)) {
    pr_sup_send(e, PR_W_RELEASE, 0, x->id, 0, 0, NULL, 0);
    x->released = 1;
  }
  for (int i = 0; i < PR_NSTREAM; i++) {
    if (x->streams[i].ring) {
      flush_stream(&x->streams[i]); /* every output event precedes the terminal one */
      stream_close(&x->streams[i]);
      pr_ring_shrink(x->streams[i].ring);
    }
  }
  x->in_open = 0;
  if (x->in.data == x) close_handle(x, (uv_handle_t *)&x->in);
  if (x->timer_open) {
    x->timer_open = 0;
    close_handle(x, (uv_handle_t *)&x->timer);
  }
  if (x->pidfd >= 0) {
    close(x->pidfd);
    x->pidfd = -1;
  }
  drop_pending_input(x);
  x->ended_at = pr_now_ms();
  if (x->started_mono) x->duration_ms = uv_now(&e->loop) - x->started_mono;
  int verdict = x->verdict >= 0 ? x->verdict : PR_FAILED;
  x->pid = 0;
  transition(x, (pr_state_t)verdict);
  e->nterminal++;
  if (was_active) e->running--;
  if (!e->closing) {
    pr_registry_prune(e);
    pr_exec_schedule(e);
  } else {
    pr_engine_on_finished(e);
  }
}

void pr_exec_abandon(pr_exec_t *x) {
  if (x->finished) return;
  if (x->state == PR_QUEUED) pr_queue_remove(&x->runq);
  if (x->verdict < 0) decide(x, PR_CANCELED, "engine_closed");
  if (x->state == PR_RUNNING && !x->exited)
    pr_sup_send(x->eng, PR_W_SIGNAL, PR_WF_STOPPING, x->id, SIGKILL, 0, NULL, 0);
  x->exited = 1;
  finish(x);
}

/* ---- stdin ---------------------------------------------------------------------------- */

static void on_write(uv_write_t *req, int status) {
  (void)status; /* EPIPE when the child closed its stdin: nothing to report to anyone */
  free(req);
}

static uv_stream_t *input_stream(pr_exec_t *x) { return (uv_stream_t *)&x->in; }

static void drop_pending_input(pr_exec_t *x) {
  free(x->pending_in);
  x->pending_in = NULL;
  x->pending_len = x->pending_cap = 0;
}

/* Input given before the process existed goes out first, in order. */
static void flush_pending_input(pr_exec_t *x) {
  int close_after = x->in_closing;
  x->in_closing = 0;
  char *p = x->pending_in;
  size_t n = x->pending_len;
  x->pending_in = NULL;
  x->pending_len = x->pending_cap = 0;
  if (n && x->in_open) pr_exec_input(x, p, n);
  free(p);
  if (close_after && x->in_open) pr_exec_close_stdin(x);
  else if (close_after) x->in_closing = 1;
}

/* Keep input given while queued or starting, at most PR_PENDING_INPUT_MAX bytes. */
static int keep_pending_input(pr_exec_t *x, const char *data, size_t len) {
  if (len > PR_PENDING_INPUT_MAX - x->pending_len) return PR_EBUSY;
  if (x->pending_len + len > x->pending_cap) {
    size_t cap = x->pending_cap ? x->pending_cap : 4096;
    while (cap < x->pending_len + len) cap *= 2;
    if (cap > PR_PENDING_INPUT_MAX) cap = PR_PENDING_INPUT_MAX;
    char *p = realloc(x->pending_in, cap);
    if (p == NULL) return PR_ENOMEM;
    x->pending_in = p;
    x->pending_cap = cap;
  }
  memcpy(x->pending_in + x->pending_len, data, len);
  x->pending_len += len;
  return 0;
}

int pr_exec_input(pr_exec_t *x, const char *data, size_t len) {
  if ((x->state == PR_QUEUED || x->state == PR_STARTING) && x->verdict < 0) {
    if (!x->stdin_pipe || x->in_closing) return PR_ESTDINCLOSED;
    return len ? keep_pending_input(x, data, len) : 0;
  }
  if (x->state != PR_RUNNING || x->exited) return PR_ENOTRUNNING;
  if (!x->in_open || x->in_closing) return PR_ESTDINCLOSED;
  if (len == 0) return 0;
  uv_stream_t *s = input_stream(x);
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
  if (x->in.data == x) close_handle(x, (uv_handle_t *)&x->in);
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
    close_handle(x, (uv_handle_t *)&x->in);
    return 0;
  }
  req->data = x;
  return 0;
}

/* Give the pty master the size x->cols x x->rows. 0, PR_ENOTRUNNING (no pty
 * yet, or gone) or -errno. */
static int apply_size(pr_exec_t *x) {
  if (!x->streams[PR_PTY].open) return PR_ENOTRUNNING;
  uv_os_fd_t fd;
  if (uv_fileno((uv_handle_t *)&x->streams[PR_PTY].h.poll, &fd) != 0) return PR_ENOTRUNNING;
  struct winsize ws = {.ws_row = x->rows, .ws_col = x->cols};
  if (ioctl(fd, TIOCSWINSZ, &ws) < 0) return -errno;
  return 0;
}

int pr_exec_resize(pr_exec_t *x, uint16_t cols, uint16_t rows) {
  if (!x->pty) return PR_EINVAL;
  if (x->state != PR_QUEUED && x->state != PR_STARTING && x->state != PR_RUNNING)
    return PR_ENOTRUNNING;
  x->cols = cols;
  x->rows = rows;
  /* Queued: the spawn request carries the size. Starting: the pty is made
   * with the size of the request; pr_exec_on_spawned applies this one. */
  if (x->state != PR_RUNNING) return 0;
  return apply_size(x);
}

/* ---- records ---------------------------------------------------------------------------- */

static pr_record_t *snapshot(const pr_exec_t *x, int brief) {
  pr_record_t *r = calloc(1, sizeof(*r));
  if (r == NULL) return NULL;
  r->id = x->id;
  r->session = x->session;
  r->label = dup_or_null(x->label);
  r->owner = dup_or_null(x->owner);
  r->cwd = dup_or_null(x->cwd);
  r->shell = dup_or_null(x->shell);
  r->argv = calloc(x->argc + 1, sizeof(char *));
  if (r->argv) {
    for (size_t i = 0; i < x->argc; i++) r->argv[i] = strdup(x->argv[i]);
    r->argc = x->argc;
  }
  r->pty = x->pty;
  r->state = x->state;
  r->reason = x->finished ? dup_or_null(x->reason) : NULL;
  r->error = dup_or_null(x->error);
  r->exit_code = x->exit_code;
  r->signal = x->signal;
  r->pid = x->pid;
  r->created_at = x->created_at;
  r->started_at = x->started_at;
  r->ended_at = x->ended_at;
  r->duration_ms = x->finished ? x->duration_ms
                   : x->started_mono ? uv_now(&x->eng->loop) - x->started_mono
                                     : 0;
  for (int i = 0; i < PR_NSTREAM; i++) {
    if (x->streams[i].ring == NULL) continue;
    r->has_stream[i] = 1;
    pr_ring_stats(x->streams[i].ring, &r->dropped[i], &r->bytes[i]);
  }
  r->stdin_open = x->in_open && !x->in_closing;
  r->previous_session = x->previous_session;
  r->brief = brief;
  if (!brief && x->env_keys && (r->env_keys = malloc(x->env_keys_len))) /* keys only (secrets.h) */
    memcpy(r->env_keys, x->env_keys, r->env_keys_len = x->env_keys_len);
  r->worker_state = -1;
  if (x->worker) pr_worker_snapshot(x, r);
  return r;
}

pr_record_t *pr_exec_snapshot(const pr_exec_t *x) { return snapshot(x, 0); }

pr_record_t *pr_exec_snapshot_brief(const pr_exec_t *x) { return snapshot(x, 1); }

void pr_exec_release(pr_exec_t *x) {
  x->dead = 1;
  if (x->handles == 0) pr_exec_free(x);
}

void pr_exec_free(pr_exec_t *x) {
  free(x->env_keys);
  pr_secrets_free(x->secrets);
  for (int i = 0; i < PR_NSTREAM; i++) {
    if (x->streams[i].defer.next) pr_queue_remove(&x->streams[i].defer);
    pr_ring_unref(x->streams[i].ring);
  }
  if (x->argv)
    for (size_t i = 0; i < x->argc; i++) free(x->argv[i]);
  free(x->argv);
  free(x->label);
  free(x->owner);
  free(x->cwd);
  free(x->shell);
  free(x->reason);
  free(x->error);
  free(x->spawn_msg);
  pr_worker_free(x->worker);
  if (x->pidfd >= 0) close(x->pidfd);
  free(x->pending_in);
  free(x);
}
