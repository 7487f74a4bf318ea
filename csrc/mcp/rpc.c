/* rpc.c — proctor-mcp's msgpack-rpc client: one connection to a proctor
 * socket (the editor's, or the private one of the embedded engine).
 *
 * Thread: main. Non-blocking: requests are packed into an output buffer that
 * the poll loop flushes when the socket is writable; answers are matched to
 * their callbacks by msgid. The server's notifications are ignored (we never
 * subscribe). Parameters and results cross this file as cJSON (converted by
 * base/mpack.c, strings repaired to valid UTF-8), so no other file of
 * proctor-mcp includes msgpack.h.
 *
 *   mc_rpc_call(method, [params]) ─► [0, msgid, method, params] ─► outbuf ─► socket
 *   socket ─► unpacker ─► [1, msgid, err, result] ─► pending[msgid].cb(tag, reply)
 *
 * A request the server would refuse for its size (more bytes than hello's
 * `max_message`, or more entries than MC_RPC_MAX_ENTRIES) is never sent: the
 * server closes a connection that sends one, and with it the session that
 * owns our executions. It is refused here, alone (mc_rpc_refused).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/mpack.h"
#include "mcp.h"

#define MAX_ANSWER (8u << 20) /* the server answers at most 4 MiB of data per read */
/* The server's limits on one incoming message (doc/proctor.txt, *proctor-rpc-limits*):
 * array and map entries (a map's pairs count twice), and the bytes when hello
 * does not say (an older server). */
#define MC_RPC_MAX_ENTRIES 65536
#define MC_RPC_MAX_MESSAGE_DEFAULT (4u << 20)

typedef struct pending {
  uint32_t msgid;
  mc_rpc_cb cb;
  uint64_t tag;
  struct pending *next;
} pending_t;

static struct {
  int fd;
  msgpack_unpacker up;
  int up_init;
  char *out; /* bytes not yet written */
  size_t out_len, out_cap;
  uint32_t next_msgid;
  pending_t *pending; /* oldest first */
  char lost[256];
  uint64_t max_message; /* hello's max_message (0: not known yet) */
  int wait_output;      /* hello's features has "wait_output" (`wait` with `output`) */
  char refused[256];    /* why the last request was not sent (mc_rpc_call -2) */
} C = {.fd = -1};

const char *mc_rpc_refused(void) { return C.refused; }
int mc_rpc_wait_output(void) { return C.wait_output; }

/* Array and map entries in `j`, as the server counts them; stops past `limit`. */
static size_t entries(const cJSON *j, size_t limit) {
  size_t n = 0;
  for (const cJSON *x = j ? j->child : NULL; x && n <= limit; x = x->next) {
    n += cJSON_IsObject(j) ? 2 : 1;
    if (cJSON_IsArray(x) || cJSON_IsObject(x)) n += entries(x, limit - n);
  }
  return n;
}

/* ---- connection ------------------------------------------------------------------------- */

int mc_rpc_connected(void) { return C.fd >= 0; }
const char *mc_rpc_lost(void) { return C.lost; }

static void fail_all(const char *why) {
  cJSON *err = cJSON_CreateArray();
  cJSON_AddItemToArray(err, cJSON_CreateString("ECONNRESET"));
  cJSON_AddItemToArray(err, cJSON_CreateString(why));
  mc_reply_t r = {.err = err};
  while (C.pending) {
    pending_t *p = C.pending;
    C.pending = p->next;
    if (p->cb)
      p->cb(p->tag, &r); /* may call mc_rpc_call: not connected any more, so it fails at once */
    free(p);
  }
  cJSON_Delete(err);
}

static void drop(const char *why) {
  if (C.fd < 0) return;
  snprintf(C.lost, sizeof(C.lost), "%s", why);
  mc_log("proctor socket: %s", why);
  close(C.fd);
  C.fd = -1;
  if (C.up_init) msgpack_unpacker_destroy(&C.up);
  C.up_init = 0;
  free(C.out);
  C.out = NULL;
  C.out_len = C.out_cap = 0;
  fail_all(why);
}

void mc_rpc_close(void) { drop("closed"); }

static int out_write(void *data, const char *buf, size_t len) {
  (void)data;
  if (C.out_len + len > C.out_cap) {
    size_t cap = C.out_cap ? C.out_cap : 4096;
    while (cap < C.out_len + len) cap *= 2;
    char *p = realloc(C.out, cap);
    if (p == NULL) return -1;
    C.out = p;
    C.out_cap = cap;
  }
  memcpy(C.out + C.out_len, buf, len);
  C.out_len += len;
  return 0;
}

static void flush(void) {
  while (C.fd >= 0 && C.out_len > 0) {
    ssize_t n = send(C.fd, C.out, C.out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      char why[128];
      snprintf(why, sizeof(why), "write failed: %s", strerror(errno));
      drop(why);
      return;
    }
    memmove(C.out, C.out + n, C.out_len - (size_t)n);
    C.out_len -= (size_t)n;
  }
}

int mc_rpc_call(const char *method, cJSON *params, mc_rpc_cb cb, uint64_t tag) {
  if (C.fd < 0) {
    cJSON_Delete(params);
    return -1;
  }
  if (4 + entries(params, MC_RPC_MAX_ENTRIES) >
      MC_RPC_MAX_ENTRIES) { /* 4: the envelope [0, msgid, method, params] */
    snprintf(C.refused, sizeof(C.refused),
             "ETOOBIG: the %s request has more than %u array or map entries, the most the proctor "
             "socket takes in "
             "one message",
             method, MC_RPC_MAX_ENTRIES);
    cJSON_Delete(params);
    return -2;
  }
  pending_t *p = calloc(1, sizeof(*p));
  if (p == NULL) {
    cJSON_Delete(params);
    return -1;
  }
  p->msgid = C.next_msgid++;
  p->cb = cb;
  p->tag = tag;
  size_t mark = C.out_len;
  msgpack_packer pk;
  msgpack_packer_init(&pk, NULL, out_write);
  int bad = msgpack_pack_array(&pk, 4) || msgpack_pack_int(&pk, 0) ||
            msgpack_pack_uint32(&pk, p->msgid) || pr_mp_str(&pk, method) ||
            (params ? pr_mp_pack_cjson(&pk, params) : msgpack_pack_array(&pk, 0));
  cJSON_Delete(params);
  if (bad) {
    C.out_len = mark;
    free(p);
    return -1;
  }
  uint64_t max = C.max_message ? C.max_message : MC_RPC_MAX_MESSAGE_DEFAULT;
  if (C.out_len - mark > max) {
    snprintf(C.refused, sizeof(C.refused),
             "ETOOBIG: the %s request is %zu bytes; the proctor socket takes at most %llu bytes in "
             "one message "
             "(send it in smaller parts)",
             method, C.out_len - mark, (unsigned long long)max);
    C.out_len = mark;
    free(p);
    return -2;
  }
  pending_t **tail = &C.pending;
  while (*tail) tail = &(*tail)->next;
  *tail = p;
  flush();
  return 0;
}

static void on_message(const msgpack_object *m) {
  if (m->type != MSGPACK_OBJECT_ARRAY || m->via.array.size < 3) return;
  const msgpack_object *a = m->via.array.ptr;
  if (a[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER || a[0].via.u64 != 1 || m->via.array.size != 4)
    return;
  if (a[1].type != MSGPACK_OBJECT_POSITIVE_INTEGER) return;
  uint32_t msgid = (uint32_t)a[1].via.u64;
  pending_t **pp = &C.pending;
  while (*pp && (*pp)->msgid != msgid) pp = &(*pp)->next;
  if (*pp == NULL) return;
  pending_t *p = *pp;
  *pp = p->next;
  mc_reply_t r = {0};
  cJSON *err = NULL, *res = NULL;
  if (a[2].type != MSGPACK_OBJECT_NIL) {
    err = pr_mp_to_cjson(&a[2]);
  } else {
    res = pr_mp_to_cjson(&a[3]);
    if (a[3].type == MSGPACK_OBJECT_MAP)
      for (uint32_t i = 0; i < a[3].via.map.size; i++) {
        const msgpack_object_kv *kv = &a[3].via.map.ptr[i];
        if (pr_mp_key_is(&kv->key, "data") &&
            (kv->val.type == MSGPACK_OBJECT_BIN || kv->val.type == MSGPACK_OBJECT_STR)) {
          r.data = kv->val.via.bin.ptr;
          r.data_len = kv->val.via.bin.size;
        }
      }
  }
  if (err == NULL && res == NULL) { /* out of memory converting: report it as an error */
    err = cJSON_CreateArray();
    cJSON_AddItemToArray(err, cJSON_CreateString("ENOMEM"));
    cJSON_AddItemToArray(err, cJSON_CreateString("out of memory reading an answer"));
  }
  r.err = err;
  r.result = res;
  if (p->cb) p->cb(p->tag, &r);
  cJSON_Delete(err);
  cJSON_Delete(res);
  free(p);
}

static void read_some(void) {
  for (int rounds = 0; C.fd >= 0 && rounds < 64; rounds++) {
    if (msgpack_unpacker_buffer_capacity(&C.up) < 65536 &&
        !msgpack_unpacker_reserve_buffer(&C.up, 65536)) {
      drop("out of memory");
      return;
    }
    ssize_t n = recv(C.fd, msgpack_unpacker_buffer(&C.up), msgpack_unpacker_buffer_capacity(&C.up),
                     MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      char why[128];
      snprintf(why, sizeof(why), "read failed: %s", strerror(errno));
      drop(why);
      return;
    }
    if (n == 0) {
      drop("the proctor socket closed (did the editor exit?)");
      return;
    }
    msgpack_unpacker_buffer_consumed(&C.up, (size_t)n);
    msgpack_unpacked res;
    msgpack_unpacked_init(&res);
    int rc;
    while (C.fd >= 0 && (rc = msgpack_unpacker_next(&C.up, &res)) == MSGPACK_UNPACK_SUCCESS)
      on_message(&res.data);
    msgpack_unpacked_destroy(&res);
    if (C.fd < 0) return;
    if (rc == MSGPACK_UNPACK_PARSE_ERROR) {
      drop("the server sent bytes that are not msgpack");
      return;
    }
    if (msgpack_unpacker_message_size(&C.up) > MAX_ANSWER) {
      drop("an answer larger than 8 MiB");
      return;
    }
  }
}

int mc_rpc_fd(short *events) {
  *events = POLLIN | (C.out_len ? POLLOUT : 0);
  return C.fd;
}

void mc_rpc_io(short revents) {
  if (C.fd < 0) return;
  if (revents & (POLLIN | POLLHUP | POLLERR)) read_some();
  if (C.fd >= 0 && (revents & POLLOUT)) flush();
}

/* ---- connect + hello --------------------------------------------------------------------- */

static int hello_done;
static char hello_err[256];

static void on_hello(uint64_t tag, const mc_reply_t *r) {
  (void)tag;
  hello_done = 1;
  const cJSON *mm = r->result ? cJSON_GetObjectItemCaseSensitive(r->result, "max_message") : NULL;
  if (cJSON_IsNumber(mm) && mm->valuedouble >= 65536) C.max_message = (uint64_t)mm->valuedouble;
  const cJSON *f, *fs = r->result ? cJSON_GetObjectItemCaseSensitive(r->result, "features") : NULL;
  C.wait_output = 0; /* an older server's `wait` would ignore `output` */
  cJSON_ArrayForEach(f, fs) C.wait_output |=
      cJSON_IsString(f) && !strcmp(f->valuestring, "wait_output");
  if (r->err) {
    const cJSON *m = cJSON_GetArrayItem(r->err, 1);
    snprintf(hello_err, sizeof(hello_err), "hello failed: %s",
             cJSON_IsString(m) ? m->valuestring : "unknown error");
  }
}

int mc_rpc_connect(const char *path, const char *name, const char *identity, char *err,
                   size_t errlen) {
  if (C.fd >= 0) return 0;
  if (mc_socket_safe(path, err, errlen) != 0) return -1;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof(sa.sun_path)) {
    snprintf(err, errlen, "%s: the path is too long for a Unix socket", path);
    return -1;
  }
  strcpy(sa.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    snprintf(err, errlen, "%s: connect: %s", path, strerror(errno));
    if (fd >= 0) close(fd);
    return -1;
  }
  struct ucred cred;
  socklen_t cl = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || cred.uid != getuid()) {
    snprintf(err, errlen, "%s: the process listening there is not of our uid; refused", path);
    close(fd);
    return -1;
  }
  C.fd = fd;
  C.lost[0] = 0;
  if (!msgpack_unpacker_init(&C.up, 65536)) {
    close(fd);
    C.fd = -1;
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  C.up_init = 1;
  /* Say hello and wait for the answer (nothing else is pending yet). */
  hello_done = 0;
  hello_err[0] = 0;
  cJSON *params = cJSON_CreateArray();
  cJSON_AddItemToArray(params, cJSON_CreateString(name));
  if (identity) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "identity", identity);
    cJSON_AddItemToArray(params, o);
  }
  if (mc_rpc_call("hello", params, on_hello, 0) != 0) {
    snprintf(err, errlen, "%s: cannot send hello", path);
    drop("hello not sent");
    return -1;
  }
  uint64_t deadline = mc_now_ms() + 10000;
  while (!hello_done && C.fd >= 0 && mc_now_ms() < deadline) {
    short ev;
    struct pollfd p = {.fd = mc_rpc_fd(&ev)};
    p.events = ev;
    int left = (int)(deadline - mc_now_ms());
    if (poll(&p, 1, left > 0 ? left : 0) > 0) mc_rpc_io(p.revents);
  }
  if (!hello_done || hello_err[0]) {
    snprintf(err, errlen, "%s: %s", path,
             hello_err[0] ? hello_err : "no answer to hello within 10 s");
    drop("hello failed");
    return -1;
  }
  return 0;
}
