/* rpc/server.c — the listening socket, sessions and their lifetime, the
 * pump scheduler, and the server's listener (what the engine tells it).
 *
 * Thread: engine (pr_rpc_start also before the engine thread exists).
 *
 *   listener ─accept─► SO_PEERCRED uid == ours? ─no─► close (refused)
 *                         └─yes─► conn (session = next_session++) ─► read
 *   listener / reads / write completions ─► pr_rpc_kick ─► srv->pending ─► uv_idle ─► pump
 *
 * Ownership: the server owns its connections; each connection owns its
 * subscriptions, waits and unsent bytes, and frees itself in the close
 * callback of its last handle. The server frees itself the same way.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/sockname.h"
#include "rpc/conn.h"

/* ---- scheduling -------------------------------------------------------------------- */

static void on_idle(uv_idle_t *h) {
  pr_rpc_t *srv = (pr_rpc_t *)h->data;
  pr_queue_t local;
  pr_queue_init(&local);
  pr_queue_move(&srv->pending, &local);
  while (!pr_queue_empty(&local)) {
    pr_queue_t *q = pr_queue_head(&local);
    pr_queue_remove(q);
    pr_rpc_conn_t *c = PR_QUEUE_DATA(q, pr_rpc_conn_t, pnode);
    c->pending = 0;
    if (pr_rpc_conn_pump(c)) pr_rpc_kick(c); /* more next turn: others get theirs first */
  }
  if (pr_queue_empty(&srv->pending) && srv->idle_on) {
    uv_idle_stop(&srv->idle);
    srv->idle_on = 0;
  }
}

void pr_rpc_kick(pr_rpc_conn_t *c) {
  if (c->pending || c->closing || c->virt) return; /* virtual ones are driven by their feeder */
  pr_rpc_t *srv = c->srv;
  c->pending = 1;
  pr_queue_push(&srv->pending, &c->pnode);
  if (!srv->idle_on) {
    uv_idle_start(&srv->idle, on_idle);
    srv->idle_on = 1;
  }
}

/* ---- connections ------------------------------------------------------------------- */

pr_rpc_conn_t *pr_rpc_conn_new(pr_rpc_t *srv) {
  pr_rpc_conn_t *c = calloc(1, sizeof(*c));
  if (c == NULL) return NULL;
  c->srv = srv;
  pr_queue_init(&c->node);
  pr_queue_init(&c->pnode);
  pr_queue_init(&c->subs);
  pr_queue_init(&c->dirty);
  pr_queue_init(&c->waits);
  c->bad_msgid = -1;
  if (pr_rpc_conn_init(c) != 0) {
    pr_rpc_conn_destroy(c);
    free(c);
    return NULL;
  }
  c->session = srv->next_session++;
  snprintf(c->name, sizeof(c->name), "rpc-%llu", (unsigned long long)c->session);
  pr_queue_push(&srv->conns, &c->node);
  srv->nconns++;
  return c;
}

/* Free once closed, with no handle open and nobody holding it. */
static void conn_maybe_free(pr_rpc_conn_t *c) {
  if (!c->closing || c->handles > 0 || c->held) return;
  pr_rpc_conn_destroy(c);
  free(c);
}

void pr_rpc_conn_unref(pr_rpc_conn_t *c) {
  c->handles--;
  conn_maybe_free(c);
}

static void on_conn_handle_closed(uv_handle_t *h) { pr_rpc_conn_unref((pr_rpc_conn_t *)h->data); }

void pr_rpc_conn_close(pr_rpc_conn_t *c) {
  if (c->closing) return;
  c->closing = 1;
  pr_rpc_t *srv = c->srv;
  if (c->pending) {
    pr_queue_remove(&c->pnode);
    c->pending = 0;
  }
  pr_queue_remove(&c->node);
  srv->nconns--;
  /* Subscriptions and waits first: canceling below may end executions and
   * tell the listener, which must not find anything of this connection. */
  while (!pr_queue_empty(&c->subs))
    pr_rpc_sub_free(PR_QUEUE_DATA(pr_queue_head(&c->subs), pr_rpc_sub_t, cnode));
  while (!pr_queue_empty(&c->waits))
    pr_rpc_wait_drop(PR_QUEUE_DATA(pr_queue_head(&c->waits), pr_rpc_wait_t, cnode));
  for (size_t i = 0; i < c->nkod; i++) {
    pr_exec_t *x = pr_registry_find(&srv->ctl->reg, c->kod[i], c->session);
    if (x) pr_exec_cancel(x, 0, "disconnected");
  }
  /* its worker requests: dropped, workers told (unless another connection of its identity lives) */
  if (!pr_rpc_session_shared(c)) pr_control_session_closed(srv->ctl, c->session);
  if (!c->virt) {
    if (c->reading) uv_read_stop((uv_stream_t *)&c->pipe);
    c->reading = 0;
    uv_close((uv_handle_t *)&c->pipe, on_conn_handle_closed); /* pending writes: ECANCELED */
  } else {
    conn_maybe_free(c);
  }
}

/* The peer's uid (SO_PEERCRED), or -1. */
static int peer_uid(uv_pipe_t *p, uid_t *uid) {
  uv_os_fd_t fd;
  struct ucred cr;
  socklen_t len = sizeof(cr);
  if (uv_fileno((uv_handle_t *)p, &fd) != 0) return -1;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || len != sizeof(cr)) return -1;
  *uid = cr.uid;
  return 0;
}

static void free_handle(uv_handle_t *h) { free(h); }

static void on_connection(uv_stream_t *server, int status) {
  pr_rpc_t *srv = (pr_rpc_t *)server->data;
  if (status < 0) return;
  pr_rpc_conn_t *c = pr_rpc_conn_new(srv);
  if (c == NULL) { /* accept and drop, or the listener stays readable */
    uv_pipe_t *t = malloc(sizeof(*t));
    if (t && uv_pipe_init(srv->ctl->xc.loop, t, 0) == 0) {
      uv_accept(server, (uv_stream_t *)t);
      uv_close((uv_handle_t *)t, free_handle);
    } else {
      free(t);
    }
    srv->refused++;
    return;
  }
  uv_pipe_init(srv->ctl->xc.loop, &c->pipe, 0);
  c->pipe.data = c;
  c->handles = 1;
  uid_t uid;
  if (uv_accept(server, (uv_stream_t *)&c->pipe) != 0 || peer_uid(&c->pipe, &uid) != 0 ||
      uid != geteuid() || srv->nconns > PR_RPC_MAX_CONNS) {
    srv->refused++;
    pr_rpc_conn_close(c);
    return;
  }
  if (pr_rpc_conn_start_read(c) != 0) pr_rpc_conn_close(c);
}

/* ---- server lifetime -------------------------------------------------------------- */

static void on_srv_handle_closed(uv_handle_t *h) {
  pr_rpc_t *srv = (pr_rpc_t *)h->data;
  if (--srv->handles == 0) {
    pr_idmap_destroy(&srv->subs);
    pr_rpc_ident_free(srv);
    free(srv->path);
    free(srv);
  }
}

/* The directory of `path` into dir (dirlen bytes). */
static void dir_of(const char *path, char *dir, size_t dirlen) {
  const char *slash = strrchr(path, '/');
  if (slash == NULL) snprintf(dir, dirlen, ".");
  else if (slash == path) snprintf(dir, dirlen, "/");
  else snprintf(dir, dirlen, "%.*s", (int)(slash - path), path);
}

/* The directory must be ours alone; create it (0700) when missing. */
static int check_dir(const char *dir) {
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) return -errno;
  struct stat st;
  if (lstat(dir, &st) != 0) return -errno;
  if (!S_ISDIR(st.st_mode)) return UV_ENOTDIR;
  if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) return UV_EACCES;
  return 0;
}

/* A socket file already at `path`: remove it when nobody listens (stale). */
static int clear_stale(const char *path) {
  struct stat st;
  if (lstat(path, &st) != 0) return errno == ENOENT ? 0 : -errno;
  if (!S_ISSOCK(st.st_mode)) return UV_EEXIST;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
  int live = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
  close(fd);
  if (live) return UV_EADDRINUSE;
  return unlink(path) == 0 ? 0 : -errno;
}

/* Sockets of editors that are gone: every `<pid>.sock` in our directory
 * (the Neovim layer's naming) whose process no longer exists and where nobody
 * listens. An editor killed with SIGKILL cannot remove its own, and one
 * per killed editor would pile up where proctor-mcp looks for editors. A
 * socket of a live pid is left alone, even when nothing listens on it yet:
 * that editor may be between its bind() and its listen(). At most
 * PR_RPC_SWEEP_MAX entries are looked at per start. */
static void sweep_stale(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) return;
  struct dirent *e;
  for (int seen = 0; seen < PR_RPC_SWEEP_MAX && (e = readdir(d)) != NULL; seen++) {
    long pid = pr_sockname_pid(e->d_name);
    if (pid == 0 || pid == getpid()) continue;
    if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
    char path[PR_LISTEN_MAX + 1];
    if (snprintf(path, sizeof(path), "%s/%s", dir, e->d_name) >= (int)sizeof(path)) continue;
    (void)clear_stale(path); /* a socket nobody listens on; anything else stays */
  }
  closedir(d);
}

static int do_listen(pr_rpc_t *srv, const char *path) {
  int rc;
  if (strlen(path) == 0 || strlen(path) > PR_LISTEN_MAX) return UV_ENAMETOOLONG;
  char dir[PR_LISTEN_MAX + 1];
  dir_of(path, dir, sizeof(dir));
  if ((rc = check_dir(dir)) != 0) return rc;
  sweep_stale(dir);
  if ((rc = clear_stale(path)) != 0) return rc;
  if ((srv->path = strdup(path)) == NULL) return PR_ENOMEM;
  if ((rc = uv_pipe_bind(&srv->listener_pipe, path)) != 0) return rc;
  /* The 0700 directory covers the moment between bind and chmod. */
  struct stat st;
  if (chmod(path, 0600) != 0 || stat(path, &st) != 0) {
    rc = -errno;
    unlink(path);
    return rc;
  }
  srv->dev = st.st_dev;
  srv->ino = st.st_ino;
  if ((rc = uv_listen((uv_stream_t *)&srv->listener_pipe, 128, on_connection)) != 0) {
    unlink(path);
    return rc;
  }
  srv->listening = 1;
  return 0;
}

/* ---- the listener: what the engine tells the server --------------------------------- */

static void on_output(void *arg, pr_exec_t *x, int stream) {
  (void)stream;
  pr_rpc_t *srv = arg;
  if (x->session == 0) return; /* the host's own: no RPC client may see them */
  pr_rpc_sub_t *s = pr_rpc_sub_find(srv, x->id);
  if (s) pr_rpc_sub_dirty(s);
  /* `wait` requests with `output` that these bytes answer; the counts keep
   * a flood from walking waits that only want the end */
  if (srv->nout_waits == 0) return;
  pr_queue_t *q;
  PR_QUEUE_FOREACH(q, &srv->conns) {
    pr_rpc_conn_t *c = PR_QUEUE_DATA(q, pr_rpc_conn_t, node);
    if (c->session != x->session || c->nout_waits == 0) continue;
    int woke = 0;
    pr_queue_t *k;
    PR_QUEUE_FOREACH(k, &c->waits) {
      pr_rpc_wait_t *w = PR_QUEUE_DATA(k, pr_rpc_wait_t, cnode);
      if (w->id == x->id && w->on_output && !w->woke && !w->timed_out && w->rec == NULL &&
          pr_rpc_wait_grew(x, w->after)) {
        w->woke = 1;
        c->nready_waits++;
        woke = 1;
      }
    }
    if (woke) pr_rpc_kick(c);
  }
}

/* A state notification for the subscriber, and, when terminal, the answers
 * of `wait` requests. */
static void on_state(void *arg, const pr_state_info_t *st) {
  pr_rpc_t *srv = arg;
  if (st->session == 0) return;
  pr_rpc_sub_t *s = pr_rpc_sub_find(srv, st->id);
  int terminal = pr_state_terminal(st->state);
  if (s && !s->ended) {
    msgpack_sbuffer *b = terminal ? &s->final : &s->states;
    size_t mark = b->size;
    msgpack_packer pk;
    msgpack_packer_init(&pk, b, msgpack_sbuffer_write);
    if (pr_rpc_pack_state(&pk, st) != 0) b->size = mark; /* ENOMEM: this one is lost */
    if (terminal) pr_rpc_sub_ended(s);
    pr_rpc_sub_dirty(s);
  }
  if (!terminal || srv->nwaits == 0) return;
  pr_queue_t *q;
  PR_QUEUE_FOREACH(q, &srv->conns) {
    pr_rpc_conn_t *c = PR_QUEUE_DATA(q, pr_rpc_conn_t, node);
    if (c->session != st->session) continue;
    pr_queue_t *k;
    PR_QUEUE_FOREACH(k, &c->waits) {
      pr_rpc_wait_t *w = PR_QUEUE_DATA(k, pr_rpc_wait_t, cnode);
      if (w->id == st->id && w->rec == NULL) {
        w->rec = pr_exec_snapshot(st->x);
        c->nready_waits++;
      }
    }
    pr_rpc_kick(c); /* no break: connections of one identity share the session */
  }
}

static pr_rpc_conn_t *session_conn(pr_rpc_t *srv, uint64_t session) {
  pr_queue_t *q;
  PR_QUEUE_FOREACH(q, &srv->conns) {
    pr_rpc_conn_t *c = PR_QUEUE_DATA(q, pr_rpc_conn_t, node);
    if (c->session == session) return c->closing ? NULL : c;
  }
  return NULL;
}

static void on_chunk(void *arg, pr_wmsg_t *m) {
  pr_rpc_conn_t *c = m->session ? session_conn(arg, m->session) : NULL;
  if (c == NULL) return;
  /* A client that does not read must not grow our memory: past the hard send
   * limit its chunks are dropped (the final worker_reply is always sent). */
  if (c->queued + c->out.size >= PR_RPC_SENDQ_HARD) return;
  size_t mark = c->out.size;
  if (pr_rpc_pack_worker(&c->pk, 0, m) != 0) c->out.size = mark;
  pr_rpc_kick(c);
}

/* Every request gets exactly one reply, but its payload obeys the send bound:
 * a reply that would take what is unsent past PR_RPC_SENDQ_HARD goes out as
 * a small `rejected` one with "EBUSY" instead (a client that stops reading
 * while big replies keep coming pins at most the hard bound plus small
 * rejections, one per request it sent). */
static void on_reply(void *arg, pr_wmsg_t *m) {
  pr_rpc_conn_t *c = m->session ? session_conn(arg, m->session) : NULL;
  if (c == NULL) return;
  size_t unsent = c->queued + c->out.size;
  pr_wmsg_t small;
  char why[160];
  if (m->len > PR_RPC_REPLY_SMALL && unsent + m->len > PR_RPC_SENDQ_HARD) {
    small = *m;
    small.status = PR_RS_REJECTED;
    small.len =
        (size_t)snprintf(why, sizeof(why),
                         "EBUSY: a reply of %zu bytes dropped: %zu bytes to this client are "
                         "unsent (at most %u MiB)",
                         m->len, unsent, PR_RPC_SENDQ_HARD >> 20);
    small.text = why;
    m = &small;
  }
  size_t mark = c->out.size;
  if (pr_rpc_pack_worker(&c->pk, 1, m) != 0) c->out.size = mark;
  pr_rpc_kick(c);
}

pr_listener_t *pr_rpc_listener(pr_rpc_t *srv) { return &srv->listener; }

/* ---- server lifetime (continued) ------------------------------------------------------- */

int pr_rpc_start(pr_control_t *ctl, char *const *env, const char *path, pr_rpc_t **out) {
  *out = NULL;
  uv_loop_t *loop = ctl->xc.loop;
  pr_rpc_t *srv = calloc(1, sizeof(*srv));
  if (srv == NULL) return PR_ENOMEM;
  srv->ctl = ctl;
  srv->env = env;
  srv->listener = (pr_listener_t){
      .state = on_state, .output = on_output, .chunk = on_chunk, .reply = on_reply, .arg = srv};
  srv->next_session = 1;
  pr_queue_init(&srv->conns);
  pr_queue_init(&srv->pending);
  uv_idle_init(loop, &srv->idle);
  srv->idle.data = srv;
  srv->handles = 1;
  uv_pipe_init(loop, &srv->listener_pipe, 0);
  srv->listener_pipe.data = srv;
  srv->handles++;
  int rc = path ? do_listen(srv, path) : 0;
  if (rc != 0) {
    free(srv->path);
    srv->path = NULL; /* nothing of ours to unlink */
    pr_rpc_close(srv);
    return rc;
  }
  *out = srv;
  return 0;
}

void pr_rpc_close(pr_rpc_t *srv) {
  if (srv->path) { /* remove the socket file, if it is still the one we bound */
    struct stat st;
    if (lstat(srv->path, &st) == 0 && st.st_dev == srv->dev && st.st_ino == srv->ino)
      unlink(srv->path);
  }
  while (!pr_queue_empty(&srv->conns))
    pr_rpc_conn_close(PR_QUEUE_DATA(pr_queue_head(&srv->conns), pr_rpc_conn_t, node));
  uv_close((uv_handle_t *)&srv->listener_pipe, on_srv_handle_closed);
  uv_close((uv_handle_t *)&srv->idle, on_srv_handle_closed);
}

/* ---- virtual connections ----------------------------------------------------------- */

pr_rpc_conn_t *pr_rpc_virtual_open(pr_rpc_t *srv, void (*sink)(void *, const char *, size_t),
                                   void *arg) {
  pr_rpc_conn_t *c = pr_rpc_conn_new(srv);
  if (c == NULL) return NULL;
  c->virt = 1;
  c->held = 1;
  c->sink = sink;
  c->sink_arg = arg;
  return c;
}

int pr_rpc_virtual_feed(pr_rpc_conn_t *c, const char *data, size_t len) {
  while (len > 0 && !c->closing) {
    if (!msgpack_unpacker_reserve_buffer(&c->up, 4096)) {
      pr_rpc_conn_close(c);
      break;
    }
    size_t n = msgpack_unpacker_buffer_capacity(&c->up);
    if (n > len) n = len;
    memcpy(msgpack_unpacker_buffer(&c->up), data, n);
    msgpack_unpacker_buffer_consumed(&c->up, n);
    data += n;
    len -= n;
    pr_rpc_conn_received(c, n);
    while (!c->closing && pr_rpc_conn_pump(c)) {
    }
  }
  return !c->closing;
}

void pr_rpc_virtual_close(pr_rpc_conn_t *c) {
  c->held = 0;
  if (!c->closing) pr_rpc_conn_close(c);
  else conn_maybe_free(c); /* or once its last wait timer closed */
}
