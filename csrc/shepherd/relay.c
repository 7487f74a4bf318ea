/* shepherd/relay.c — proctor-shepherd --relay: the shepherd protocol as frames on
 * stdin/stdout, for a shepherd on the far side of a transport (ssh, podman exec,
 * kubectl exec) that cannot carry file descriptors.
 *
 * Thread: the shepherd's only thread (main.c's poll loop calls in here).
 *
 *   link (--link, on the editor's machine) ══ transport (bytes) ══ stdin/stdout: relay
 *      SPAWN SIGNAL RELEASE SHUTDOWN PING ──────────────────────► as a local shepherd's
 *      DATA(stdin) CREDIT(out) RESIZE ─────────────────────────► this file
 *      ◄── SPAWNED FAILED EXITED EMPTY PONG, DATA(out) CREDIT(stdin)
 *
 * A frame is a pr_wire_hdr_t followed by its payload, in this machine's byte
 * order (the link checks the relay's hello). Where a local shepherd hands its
 * job's pipe and pty fds to the engine, the relay keeps them: it reads a job's
 * output and sends it as DATA frames, at most PR_WIRE_WINDOW bytes of a stream
 * beyond what the link has given back as CREDIT (it gives credit once the bytes
 * are in the engine's pipe): a consumer that stops reading stops the job's
 * writes on the far side. It writes DATA(stdin) to the job and gives credit back
 * once written.
 *
 * A job's EXITED (and EMPTY) wait here until its output streams ended, or
 * PR_RELAY_HOLD_MS passed without output, or a stream has no credit left; and
 * what the pipes hold is read and sent first: the engine's drain window then
 * counts from the end of the output, not from a report that overtook it (on a
 * slow link, or while the relay forked a burst of spawns).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "base/buf.h"
#include "base/idmap.h"
#include "shepherd/shepherd.h"

#define PR_RELAY_HOLD_MS 300

int pr_shep_relay;
int pr_relay_in = -1, pr_relay_out = -1;

typedef struct {
  uint64_t id;
  int pty;
  int in;     /* stdin write end, or the pty master (-1: none or closed) */
  int out[3]; /* [1] stdout or the pty master, [2] stderr; -1: none or ended */
  int64_t credit[3];
  pr_buf_t inbuf;        /* stdin bytes not yet written to the job */
  int in_close;          /* close stdin once inbuf is written */
  pr_wire_hdr_t held[2]; /* EXITED / EMPTY not yet sent */
  int nheld;
  uint64_t quiet_since; /* pr_shep_now_ms of the last output (or of the exit) */
} rjob_t;

static pr_idmap_t rjobs;
static pr_buf_t inq; /* bytes read from stdin, not yet a whole frame */
static int lost;     /* stdout is gone: nobody hears us any more */

/* ---- frames out ---------------------------------------------------------------------- */

static void write_all(const char *p, size_t n) {
  while (n > 0 && !lost) {
    ssize_t w = write(pr_relay_out, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      struct pollfd pf = {pr_relay_out, POLLOUT, 0};
      poll(&pf, 1, 100);
      continue;
    }
    if (w <= 0) {
      lost = 1;
      return;
    }
    p += w;
    n -= (size_t)w;
  }
}

void pr_relay_send(uint32_t type, uint32_t flags, uint64_t job, int64_t a, int64_t b,
                   const void *payload, uint32_t len) {
  pr_wire_hdr_t h = {.type = type, .flags = flags, .job = job, .a = a, .b = b, .len = len};
  char hb[sizeof(h)];
  memcpy(hb, &h, sizeof(h));
  write_all(hb, sizeof(hb));
  if (len) write_all(payload, len);
}

int pr_relay_lost(void) { return lost; }

/* ---- jobs ------------------------------------------------------------------------------ */

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

static void rjob_free(rjob_t *r) {
  if (r->in != r->out[1]) close_fd(&r->in);
  close_fd(&r->out[1]);
  close_fd(&r->out[2]);
  r->in = -1;
  pr_buf_free(&r->inbuf);
  free(r);
}

void pr_relay_adopt(uint64_t id, uint32_t flags, int64_t pid, int *fds, int nfds) {
  int k = 0;
  if ((flags & PR_WF_PIDFD) && k < nfds) close(fds[k++]); /* the engine's; not needed here */
  rjob_t *r = calloc(1, sizeof(*r));
  rjob_t *old = pr_idmap_get(&rjobs, id);
  if (old != NULL) {
    pr_idmap_del(&rjobs, id);
    rjob_free(old);
  }
  if (r == NULL || pr_idmap_put(&rjobs, id, r) != 0) {
    for (; k < nfds; k++) close(fds[k]);
    free(r);
    pr_relay_send(PR_W_SPAWNED, flags & ~PR_WF_PIDFD, id, pid, 0, NULL, 0);
    return;
  }
  r->id = id;
  r->in = r->out[0] = r->out[1] = r->out[2] = -1;
  r->inbuf.max = (size_t)PR_WIRE_WINDOW * 2;
  if (flags & PR_WF_PTY) {
    r->pty = 1;
    if (k < nfds) r->in = r->out[1] = fds[k++];
  } else {
    if ((flags & PR_WF_STDIN) && k < nfds) r->in = fds[k++];
    if (k < nfds) r->out[1] = fds[k++];
    if (k < nfds) r->out[2] = fds[k++];
  }
  for (; k < nfds; k++) close(fds[k]);
  for (int s = 1; s < 3; s++) r->credit[s] = PR_WIRE_WINDOW;
  int mine[2] = {r->in, r->out[2]}; /* out[1] is the pty master when in is */
  for (int i = 0; i < 2; i++)
    if (mine[i] >= 0) fcntl(mine[i], F_SETFL, fcntl(mine[i], F_GETFL) | O_NONBLOCK);
  if (r->out[1] >= 0) fcntl(r->out[1], F_SETFL, fcntl(r->out[1], F_GETFL) | O_NONBLOCK);
  pr_relay_send(PR_W_SPAWNED, flags & ~PR_WF_PIDFD, id, pid, 0, NULL, 0);
}

void pr_relay_forget(uint64_t id) {
  rjob_t *r = pr_idmap_get(&rjobs, id);
  if (r == NULL) return;
  pr_idmap_del(&rjobs, id);
  rjob_free(r);
}

static void send_held(rjob_t *r) {
  for (int i = 0; i < r->nheld; i++) {
    pr_wire_hdr_t *h = &r->held[i];
    pr_relay_send(h->type, h->flags, h->job, h->a, h->b, NULL, 0);
  }
  r->nheld = 0;
}

/* Whether r's held reports may go now (see the header). */
static int may_report(const rjob_t *r, uint64_t now) {
  int open = 0;
  for (int s = 1; s < 3; s++) {
    if (r->out[s] < 0) continue;
    if (r->credit[s] <= 0) return 1; /* the engine's drain handles a paused stream */
    open = 1;
  }
  return !open || now - r->quiet_since >= PR_RELAY_HOLD_MS;
}

static void read_out(rjob_t *r, int s);

/* What the job's pipes hold now goes out before a report: a relay busy with a
 * burst of spawns must not send the exit ahead of output that was already there. */
static void take_output(rjob_t *r) {
  for (int s = 1; s < 3; s++) read_out(r, s);
}

void pr_relay_report(uint32_t type, uint32_t flags, uint64_t job, int64_t a, int64_t b) {
  rjob_t *r = pr_idmap_get(&rjobs, job);
  if (r != NULL) take_output(r);
  if (r == NULL || (r->nheld == 0 && may_report(r, pr_shep_now_ms()))) {
    pr_relay_send(type, flags, job, a, b, NULL, 0);
    return;
  }
  if (r->nheld == 0) r->quiet_since = pr_shep_now_ms();
  if (r->nheld < 2)
    r->held[r->nheld++] = (pr_wire_hdr_t){.type = type, .flags = flags, .job = job, .a = a, .b = b};
}

/* ---- frames in ------------------------------------------------------------------------ */

static void write_input(rjob_t *r) {
  while (r->inbuf.len > 0 && r->in >= 0) {
    ssize_t w = write(r->in, r->inbuf.p, r->inbuf.len);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) return;
    if (w <= 0) { /* the job closed its stdin: what is left is dropped, credit given back */
      pr_relay_send(PR_W_CREDIT, 0, r->id, 0, (int64_t)r->inbuf.len, NULL, 0);
      r->inbuf.len = 0;
      break;
    }
    memmove(r->inbuf.p, r->inbuf.p + w, r->inbuf.len - (size_t)w);
    r->inbuf.len -= (size_t)w;
    pr_relay_send(PR_W_CREDIT, 0, r->id, 0, w, NULL, 0);
  }
  if (r->inbuf.len == 0 && r->in_close && !r->pty) close_fd(&r->in);
}

/* A frame that is not a local shepherd's: input, credit, resize. */
static void on_frame(const pr_wire_hdr_t *h, const char *payload) {
  rjob_t *r = pr_idmap_get(&rjobs, h->job);
  if (r == NULL) return;
  switch (h->type) {
  case PR_W_DATA:
    if (h->a != 0) return;
    if (h->len == 0) r->in_close = 1;
    else if (r->in >= 0 && pr_buf_add(&r->inbuf, payload, h->len) != 0) r->inbuf.err = 0;
    write_input(r);
    return;
  case PR_W_CREDIT:
    if (h->a == 1 || h->a == 2) r->credit[h->a] += h->b;
    return;
  case PR_W_RESIZE: {
    if (!r->pty || r->out[1] < 0) return;
    struct winsize ws = {.ws_row = (unsigned short)(h->a & 0xffff),
                         .ws_col = (unsigned short)((h->a >> 16) & 0xffff)};
    ioctl(r->out[1], TIOCSWINSZ, &ws);
    return;
  }
  default: return;
  }
}

int pr_relay_read(void (*on_packet)(const pr_wire_hdr_t *, const char *, int *, int)) {
  char tmp[65536];
  ssize_t n;
  do n = read(pr_relay_in, tmp, sizeof(tmp));
  while (n < 0 && errno == EINTR);
  if (n < 0 && errno == EAGAIN) return 1;
  if (n <= 0) return 0;
  if (pr_buf_add(&inq, tmp, (size_t)n) != 0) return 0;
  size_t at = 0;
  while (inq.len - at >= sizeof(pr_wire_hdr_t)) {
    pr_wire_hdr_t h;
    memcpy(&h, inq.p + at, sizeof(h));
    if (h.len > PR_WIRE_MAX_PAYLOAD) return 0; /* not our protocol: as if the link were gone */
    if (inq.len - at < sizeof(h) + h.len) break;
    char *payload = inq.p + at + sizeof(h);
    if (h.type >= PR_W_DATA) on_frame(&h, payload);
    else on_packet(&h, payload, NULL, 0);
    at += sizeof(h) + h.len;
  }
  explicit_bzero(inq.p, at); /* spawn requests carry secret values */
  memmove(inq.p, inq.p + at, inq.len - at);
  inq.len -= at;
  return 1;
}

/* ---- the poll set --------------------------------------------------------------------- */

/* What each entry of the poll set is for, in the order pr_relay_pollfds wrote them: the
 * job's id (found again in rjobs, O(1): a job may have gone meanwhile) and its stream
 * (0: input to write, 1 and 2: output to read). */
typedef struct {
  uint64_t id;
  int s;
} slot_t;
static slot_t *slots;
static int nslots;

int pr_relay_pollfds(struct pollfd **set, int *cap, int at) {
  size_t it = 0;
  rjob_t *r;
  int first = at;
  while ((r = pr_idmap_next(&rjobs, &it, NULL)) != NULL) {
    if (at + 3 > *cap) {
      int ncap = (*cap + 3) * 2;
      struct pollfd *p = realloc(*set, (size_t)ncap * sizeof(*p));
      if (p == NULL) return at;
      *set = p;
      *cap = ncap;
    }
    if (at - first + 3 > nslots) {
      int n = (at - first + 3) * 2;
      slot_t *p = realloc(slots, (size_t)n * sizeof(*p));
      if (p == NULL) return at;
      slots = p;
      nslots = n;
    }
    for (int s = 1; s < 3; s++)
      if (r->out[s] >= 0 && r->credit[s] > 0) {
        slots[at - first] = (slot_t){r->id, s};
        (*set)[at++] = (struct pollfd){r->out[s], POLLIN, 0};
      }
    if (r->in >= 0 && r->inbuf.len > 0) {
      slots[at - first] = (slot_t){r->id, 0};
      (*set)[at++] = (struct pollfd){r->in, POLLOUT, 0};
    }
  }
  return at;
}

/* Read what stream s of r holds now, within its credit. */
static void read_out(rjob_t *r, int s) {
  char buf[PR_WIRE_MAX_PAYLOAD];
  for (int i = 0; i < 16 && r->out[s] >= 0 && r->credit[s] > 0; i++) {
    size_t room = r->credit[s] < (int64_t)sizeof(buf) ? (size_t)r->credit[s] : sizeof(buf);
    ssize_t n = read(r->out[s], buf, room);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    if (n <= 0) { /* EOF, or EIO: a pty whose every slave is closed */
      if (r->pty) r->in = -1;
      close_fd(&r->out[s]);
      pr_relay_send(PR_W_DATA, 0, r->id, s, 0, NULL, 0);
      return;
    }
    r->credit[s] -= n;
    r->quiet_since = pr_shep_now_ms();
    pr_relay_send(PR_W_DATA, 0, r->id, s, 0, buf, (uint32_t)n);
    if ((size_t)n < room) return;
  }
}

void pr_relay_on_poll(const struct pollfd *set, int n) {
  for (int i = 0; i < n && i < nslots; i++) {
    if (set[i].revents == 0) continue;
    rjob_t *r = pr_idmap_get(&rjobs, slots[i].id); /* still there, with that fd? */
    int s = slots[i].s;
    if (r == NULL) continue;
    if (s == 0 && set[i].events == POLLOUT && r->in == set[i].fd) write_input(r);
    if (s > 0 && set[i].events == POLLIN && r->out[s] == set[i].fd) read_out(r, s);
  }
  pr_relay_tick();
}

void pr_relay_tick(void) {
  uint64_t now = pr_shep_now_ms();
  size_t it = 0;
  rjob_t *r;
  while ((r = pr_idmap_next(&rjobs, &it, NULL)) != NULL) {
    if (r->nheld == 0) continue;
    take_output(r);
    if (may_report(r, now)) send_held(r);
  }
}

int pr_relay_wait_ms(void) {
  size_t it = 0;
  rjob_t *r;
  while ((r = pr_idmap_next(&rjobs, &it, NULL)) != NULL)
    if (r->nheld) return 50;
  return -1;
}
