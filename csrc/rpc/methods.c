/* rpc/methods.c — the method table and what each method does (parameters
 * are checked in rpc/params.c, records packed in rpc/pack.c).
 *
 * Thread: engine.
 *
 *   [0, msgid, method, params] ─► shape check ─► methods[] (like luaL_Reg)
 *        ─► validate params ─► pr_cmd_t ─► pr_control_run (the host's path)
 *        ─► [1, msgid, nil, result] | [1, msgid, [name, message], nil]
 *   [2, method, params] (from a client) runs the same way; nothing is answered.
 *
 * Every execution an RPC connection starts belongs to its session; every
 * lookup is made with that session, so other sessions' ids are "not found".
 * Strings borrowed from a message are copied into the message's zone (freed
 * after dispatch) or by pr_exec_build.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mpack.h"
#include "engine/worker.h"
#include "rpc/params.h"

#define PR_RPC_DEFER 1 /* a method result: the response is sent later (wait) */

typedef struct {
  const char *name;
  int (*fn)(pr_rpc_req_t *q);
} method_t;

void pr_rpc_answer_wait(pr_rpc_conn_t *c, pr_rpc_wait_t *w) {
  size_t mark = c->out.size;
  pr_record_t *snap = NULL;
  const pr_record_t *r = w->rec;
  if (r == NULL) { /* timed out: the record as it is now */
    pr_exec_t *x = pr_registry_find(&c->srv->ctl->reg, w->id, c->session);
    if (x) r = snap = pr_exec_snapshot(x);
  }
  char m[64];
  snprintf(m, sizeof(m), "no such execution %llu", (unsigned long long)w->id);
  int rc = r ? pr_rpc_pack_response_head(&c->pk, w->msgid) || pr_rpc_pack_record(&c->pk, r)
             : pr_rpc_pack_error_response(&c->pk, w->msgid, PR_ENOENT, m);
  if (rc != 0) {
    c->out.size = mark;
    if (pr_rpc_pack_error_response(&c->pk, w->msgid, PR_ENOMEM, NULL) != 0) c->out.size = mark;
  }
  pr_record_free(snap);
}

static int run(pr_rpc_req_t *q, pr_cmd_t *c) {
  c->session = q->c->session;
  pr_control_run(q->ctl, c);
  return c->rc;
}

static int done_true(pr_rpc_req_t *q) { return msgpack_pack_true(q->pk) ? PR_ENOMEM : 0; }

/* ---- methods -------------------------------------------------------------------------- */

static const method_t methods[];

/* hello [client_name?, {identity?}] -> {server, version, session, name, identity?,
 * max_message, methods} */
static int m_hello(pr_rpc_req_t *q) {
  const msgpack_object *o = pr_rpc_arg(q, 0);
  const msgpack_object *opts = pr_rpc_arg(q, 1);
  if (opts) {
    static const char *const keys[] = {"identity", NULL};
    const msgpack_object *m;
    int rc, err = 0;
    if ((rc = pr_rpc_arg_map(q, 1, "options", keys, &m)) != 0) return rc;
    const msgpack_object *v = pr_rpc_map_get(m, "identity");
    if (v) {
      char *id = pr_rpc_is_bytes(v) ? pr_rpc_zstr(q, v, &err) : NULL;
      if (id == NULL && err == PR_ENOMEM) return err;
      if (id == NULL || strlen(id) == 0 || strlen(id) > PR_RPC_IDENT_MAX)
        return pr_rpc_bad(q, 1, "identity", "1 to 256 bytes expected");
      if ((rc = pr_rpc_ident_join(q->c, id, q->msg, sizeof(q->msg))) != 0) return rc;
    }
  }
  if (o) {
    int err = 0;
    char *name = pr_rpc_zstr(q, o, &err);
    if (name == NULL)
      return err == PR_EINVAL ? pr_rpc_bad(q, 0, "name", "string without NUL expected") : err;
    if (strlen(name) == 0 || strlen(name) > PR_RPC_NAME_MAX)
      return pr_rpc_bad(q, 0, "name", "1 to 128 bytes expected");
    snprintf(q->c->name, sizeof(q->c->name), "%s", name);
  }
  size_t nm = 0;
  while (methods[nm].name) nm++;
  msgpack_packer *pk = q->pk;
  int ident = q->c->ident[0] != 0;
  /* features: what a method's name does not tell (`wait` with `output`) */
  if (msgpack_pack_map(pk, 7 + ident) || pr_mp_kv_str(pk, "server", "proctor") ||
      (ident && pr_mp_kv_str(pk, "identity", q->c->ident)) ||
      pr_mp_kv_str(pk, "version", PR_VERSION) ||
      pr_mp_kv_int(pk, "session", (int64_t)q->c->session) || pr_mp_kv_str(pk, "name", q->c->name) ||
      pr_mp_kv_int(pk, "max_message", PR_RPC_MAX_MESSAGE) || pr_mp_str(pk, "features") ||
      msgpack_pack_array(pk, 1) || pr_mp_str(pk, "wait_output") || pr_mp_str(pk, "methods") ||
      msgpack_pack_array(pk, nm))
    return PR_ENOMEM;
  for (size_t i = 0; i < nm; i++)
    if (pr_mp_str(pk, methods[i].name)) return PR_ENOMEM;
  return 0;
}

static int add_kod(pr_rpc_conn_t *c, uint64_t id) {
  if (c->nkod == c->capkod) {
    size_t cap = c->capkod ? c->capkod * 2 : 8;
    uint64_t *v = realloc(c->kod, cap * sizeof(*v));
    if (v == NULL) return PR_ENOMEM;
    c->kod = v;
    c->capkod = cap;
  }
  c->kod[c->nkod++] = id;
  return 0;
}

/* start [spec] -> id */
static int m_start(pr_rpc_req_t *q) {
  const msgpack_object *sp = pr_rpc_arg(q, 0);
  int rc;
  if (sp == NULL || sp->type != MSGPACK_OBJECT_MAP) return pr_rpc_bad(q, 0, "spec", "map expected");
  pr_spec_read_t sr;
  if ((rc = pr_rpc_read_spec(q, sp, &sr)) != 0) return rc;
  pr_spec_t s = sr.spec; /* s.worker points into sr */
  int kod = sr.kill_on_disconnect;
  s.session = q->c->session;
  s.owner = q->c->name;
  pr_exec_t *x;
  /* A target is one the host configured, reached through its transport: a
   * client names the target, never a command for the link to run. */
  char *transport = NULL, *tcwd = NULL;
  if (s.target && (rc = pr_targets_lookup(&q->ctl->confs, s.target, &transport, &tcwd)) != 0) {
    if (rc == PR_ENOENT)
      snprintf(q->msg, sizeof(q->msg),
               "unknown target \"%.64s\": the editor configures none by that name "
               "(setup{ targets })",
               s.target);
    return rc == PR_ENOENT ? PR_EINVAL : rc;
  }
  s.transport = transport;
  if (s.target && s.cwd == NULL) s.cwd = tcwd; /* the target's cwd, or the far home */
  if (pr_control_admit(q->ctl, s.session) != 0) {
    free(transport);
    free(tcwd);
    snprintf(q->msg, sizeof(q->msg), "%u executions of this session are already queued or held",
             q->ctl->max_queued);
    return PR_EBUSY;
  }
  rc = pr_exec_build(q->ctl, &s, q->c->srv->env, &x); /* copies transport and cwd */
  free(transport);
  free(tcwd);
  if (rc != 0) {
    pr_control_unadmit(q->ctl, s.session);
    return rc;
  }
  uint64_t id = x->id;
  q->c->started = 1;
  if (kod && (rc = add_kod(q->c, id)) != 0) {
    pr_exec_free(x);
    pr_control_unadmit(q->ctl, s.session);
    return rc;
  }
  /* Subscribed to all of its own: this one too, from its `queued` (which the
   * listener packs when START announces it). */
  if (q->c->sub_all && !q->notify) pr_rpc_sub_new(q->c, x);
  pr_cmd_t c = {.type = PR_CMD_START, .exec = x};
  run(q, &c); /* takes x */
  return msgpack_pack_uint64(q->pk, id) ? PR_ENOMEM : 0;
}

/* get [id] -> record */
static int m_get(pr_rpc_req_t *q) {
  uint64_t id;
  int rc;
  if ((rc = pr_rpc_arg_id(q, 0, &id)) != 0) return rc;
  pr_cmd_t c = {.type = PR_CMD_GET, .id = id};
  if (id == 0) return pr_rpc_not_found(q, id);
  if ((rc = run(q, &c)) != 0) return pr_rpc_fail_id(q, rc, id);
  rc = pr_rpc_pack_record(q->pk, (pr_record_t *)c.out) ? PR_ENOMEM : 0;
  pr_record_free((pr_record_t *)c.out);
  return rc;
}

/* list [{state?}] -> [record...] */
static int m_list(pr_rpc_req_t *q) {
  static const char *const keys[] = {"state", NULL};
  const msgpack_object *f;
  int rc, state = -1;
  if ((rc = pr_rpc_arg_map(q, 0, "filter", keys, &f)) != 0) return rc;
  const msgpack_object *so = pr_rpc_map_get(f, "state");
  if (so) {
    char *name = pr_rpc_zstr(q, so, &rc);
    if (name == NULL && rc == PR_ENOMEM) return rc;
    if (name == NULL || (state = pr_state_from_name(name)) < 0)
      return pr_rpc_bad(q, 0, "filter", "unknown state name");
  }
  pr_cmd_t c = {.type = PR_CMD_LIST, .a = state};
  if ((rc = run(q, &c)) != 0) return rc;
  pr_record_t **v = (pr_record_t **)c.out;
  rc = msgpack_pack_array(q->pk, c.n) ? PR_ENOMEM : 0;
  for (size_t i = 0; i < c.n && rc == 0; i++) rc = pr_rpc_pack_record(q->pk, v[i]) ? PR_ENOMEM : 0;
  pr_records_free(v, c.n);
  return rc;
}

/* read [id, stream, from?, max?] -> {data = bin, next_offset, missed} */
static int m_read(pr_rpc_req_t *q) {
  uint64_t id;
  int rc;
  int64_t from = 0, max = PR_RPC_READ_MAX;
  if ((rc = pr_rpc_arg_id(q, 0, &id)) != 0) return rc;
  const msgpack_object *so = pr_rpc_arg(q, 1);
  int stream = -1;
  if (so && pr_rpc_is_bytes(so)) {
    size_t n;
    const char *p = pr_rpc_bytes_of(so, &n);
    for (int i = 0; i < PR_NSTREAM; i++)
      if (strlen(pr_stream_name(i)) == n && memcmp(p, pr_stream_name(i), n) == 0) stream = i;
  }
  if (stream < 0) return pr_rpc_bad(q, 1, "stream", "\"stdout\", \"stderr\" or \"pty\" expected");
  if ((rc = pr_rpc_arg_range(q, 2, "from", 0, INT64_MAX, &from)) != 0 ||
      (rc = pr_rpc_arg_range(q, 3, "max", 0, INT64_MAX, &max)) != 0)
    return rc;
  if (max > PR_RPC_READ_MAX) max = PR_RPC_READ_MAX;
  if (id == 0) return pr_rpc_not_found(q, id);
  pr_cmd_t c = {.type = PR_CMD_READ, .id = id, .a = stream, .b = max, .u = (uint64_t)from};
  if ((rc = run(q, &c)) != 0) return pr_rpc_fail_id(q, rc, id);
  msgpack_packer *pk = q->pk;
  rc = msgpack_pack_map(pk, 3) || pr_mp_str(pk, "data") || msgpack_pack_bin(pk, c.n) ||
               msgpack_pack_bin_body(pk, c.out ? c.out : "", c.n) ||
               pr_mp_kv_int(pk, "next_offset", (int64_t)c.r1) ||
               pr_mp_kv_int(pk, "missed", (int64_t)c.r2)
           ? PR_ENOMEM
           : 0;
  free(c.out);
  return rc;
}

/* input [id, data] -> true */
static int m_input(pr_rpc_req_t *q) {
  uint64_t id;
  int rc;
  if ((rc = pr_rpc_arg_id(q, 0, &id)) != 0) return rc;
  const msgpack_object *d = pr_rpc_arg(q, 1);
  if (d == NULL || !pr_rpc_is_bytes(d)) return pr_rpc_bad(q, 1, "data", "bin or string expected");
  if (id == 0) return pr_rpc_not_found(q, id);
  size_t n;
  pr_cmd_t c = {.type = PR_CMD_INPUT, .id = id};
  c.data = pr_rpc_bytes_of(d, &n);
  c.len = n;
  if ((rc = run(q, &c)) != 0) return pr_rpc_fail_id(q, rc, id);
  return done_true(q);
}

/* close_stdin [id] -> true */
static int m_close_stdin(pr_rpc_req_t *q) {
  uint64_t id;
  int rc;
  if ((rc = pr_rpc_arg_id(q, 0, &id)) != 0) return rc;
  if (id == 0) return pr_rpc_not_found(q, id);
  pr_cmd_t c = {.type = PR_CMD_CLOSE_STDIN, .id = id};
  if ((rc = run(q, &c)) != 0) return pr_rpc_fail_id(q, rc, id);
  return done_true(q);
}

/* resize [id, cols, rows] -> true */
static int m_resize(pr_rpc_req_t *q) {
  uint64_t id;
  int rc;
  int64_t cols = -1, rows = -1;
  if ((rc = pr_rpc_arg_id(q, 0, &id)) != 0 ||
      (rc = pr_rpc_arg_range(q, 1, "cols", 1, 65535, &cols)) != 0 ||
      (rc = pr_rpc_arg_range(q, 2, "rows", 1, 65535, &rows)) != 0)
    return rc;
  if (cols < 0) return pr_rpc_bad(q, 1, "cols", "integer in [1, 65535] expected");
  if (rows < 0) return pr_rpc_bad(q, 2, "rows", "integer in [1, 65535] expected");
  if (id == 0) return pr_rpc_not_found(q, id);
  pr_cmd_t c = {.type = PR_CMD_RESIZE, .id = id, .a = cols, .b = rows};
  if ((rc = run(q, &c)) != 0) return pr_rpc_fail_id(q, rc, id);
  return done_true(q);
}

/* cancel [id, force? | {force?, reason?}] -> "canceling" | "already_canceling" |
 * "already_terminal" | "not_found"; `reason` (1 to 32 of a-z and _) is recorded
 * instead of "canceled" when this call decides the end. */
static int m_cancel(pr_rpc_req_t *q) {
  uint64_t id;
  int rc, force = 0, err = 0;
  const char *reason = NULL;
  if ((rc = pr_rpc_arg_id(q, 0, &id)) != 0) return rc;
  const msgpack_object *f = pr_rpc_arg(q, 1);
  if (f && f->type == MSGPACK_OBJECT_MAP) {
    static const char *const keys[] = {"force", "reason", NULL};
    const msgpack_object *m;
    if ((rc = pr_rpc_arg_map(q, 1, "force", keys, &m)) != 0) return rc;
    const msgpack_object *v = pr_rpc_map_get(m, "force");
    if (v && v->type != MSGPACK_OBJECT_BOOLEAN)
      return pr_rpc_bad(q, 1, "force", "boolean expected");
    force = v ? v->via.boolean : 0;
    if ((v = pr_rpc_map_get(m, "reason")) != NULL &&
        (!pr_rpc_is_bytes(v) || (reason = pr_rpc_zstr(q, v, &err)) == NULL ||
         !pr_reason_valid(reason)))
      return err == PR_ENOMEM
                 ? err
                 : pr_rpc_bad(q, 1, "reason", "1 to 32 characters of a-z and '_' expected");
  } else if ((rc = pr_rpc_arg_bool(q, 1, "force", &force)) != 0) {
    return pr_rpc_bad(q, 1, "force", "boolean or {force = boolean} expected");
  }
  pr_cancel_result_t r = PR_CANCEL_NOT_FOUND;
  if (id) {
    pr_cmd_t c = {.type = PR_CMD_CANCEL, .id = id, .a = force, .data = reason};
    r = (pr_cancel_result_t)run(q, &c);
  }
  if (r == PR_CANCEL_NOT_FOUND && (rc = pr_rpc_not_yours(q, id)) != 0) return rc;
  return pr_mp_str(q->pk, pr_cancel_result_name(r)) ? PR_ENOMEM : 0;
}

/* delete [id] -> "deleted" | "active_process_conflict" | "not_found" */
static int m_delete(pr_rpc_req_t *q) {
  uint64_t id;
  int rc;
  if ((rc = pr_rpc_arg_id(q, 0, &id)) != 0) return rc;
  pr_delete_result_t r = PR_DELETE_NOT_FOUND;
  if (id) {
    pr_cmd_t c = {.type = PR_CMD_DELETE, .id = id};
    r = (pr_delete_result_t)run(q, &c);
  }
  if (r == PR_DELETE_NOT_FOUND && (rc = pr_rpc_not_yours(q, id)) != 0) return rc;
  return pr_mp_str(q->pk, pr_delete_result_name(r)) ? PR_ENOMEM : 0;
}

/* purge [{older_than_ms?}] -> number deleted */
static int m_purge(pr_rpc_req_t *q) {
  static const char *const keys[] = {"older_than_ms", NULL};
  const msgpack_object *f;
  int rc;
  int64_t older = 0;
  if ((rc = pr_rpc_arg_map(q, 0, "filter", keys, &f)) != 0) return rc;
  const msgpack_object *o = pr_rpc_map_get(f, "older_than_ms");
  if (o && (!pr_rpc_to_int(o, &older) || older < 0))
    return pr_rpc_bad(q, 0, "filter", "'older_than_ms' must be an integer >= 0");
  pr_cmd_t c = {.type = PR_CMD_PURGE, .u = (uint64_t)older};
  if ((rc = run(q, &c)) != 0) return rc;
  return msgpack_pack_uint64(q->pk, c.n) ? PR_ENOMEM : 0;
}

/* Collect the ids of parameter 0: one id, a list, or nil (n = SIZE_MAX). */
static int arg_ids(pr_rpc_req_t *q, uint64_t **ids, size_t *n) {
  const msgpack_object *o = pr_rpc_arg(q, 0);
  *ids = NULL;
  *n = SIZE_MAX;
  if (o == NULL) return 0;
  uint32_t cnt = o->type == MSGPACK_OBJECT_ARRAY ? o->via.array.size : 1;
  const msgpack_object *v = o->type == MSGPACK_OBJECT_ARRAY ? o->via.array.ptr : o;
  uint64_t *out = q->zone ? msgpack_zone_malloc(q->zone, (cnt ? cnt : 1) * sizeof(uint64_t)) : NULL;
  if (out == NULL) return PR_ENOMEM;
  for (uint32_t i = 0; i < cnt; i++) {
    int64_t id;
    if (!pr_rpc_to_int(&v[i], &id))
      return pr_rpc_bad(q, 0, "ids", "an id, a list of ids, or nil expected");
    out[i] = id > 0 ? (uint64_t)id : 0;
  }
  *ids = out;
  *n = cnt;
  return 0;
}

/* Subscribe `c` to `x`: its current state now, its retained output from
 * offset 0, then every change. Returns 0 or PR_ENOMEM. */
static int subscribe_one(pr_rpc_conn_t *c, pr_exec_t *x) {
  if (pr_rpc_sub_find(c->srv, x->id)) return 0; /* already */
  pr_rpc_sub_t *s = pr_rpc_sub_new(c, x);
  if (s == NULL) return PR_ENOMEM;
  int term = x->finished;
  msgpack_sbuffer *b = term ? &s->final : &s->states;
  msgpack_packer pk;
  msgpack_packer_init(&pk, b, msgpack_sbuffer_write);
  pr_state_info_t st;
  pr_exec_state_info(x, PR_NSTATE, &st);
  if (pr_rpc_pack_state(&pk, &st) != 0) {
    pr_rpc_sub_free(s);
    return PR_ENOMEM;
  }
  if (term) pr_rpc_sub_ended(s);
  pr_rpc_sub_dirty(s);
  return 0;
}

/* subscribe [id | ids | nil] -> [ids subscribed] (nil: all of mine, and those started later) */
static int m_subscribe(pr_rpc_req_t *q) {
  uint64_t *ids;
  size_t n;
  int rc;
  if ((rc = arg_ids(q, &ids, &n)) != 0) return rc;
  pr_rpc_conn_t *c = q->c;
  msgpack_packer *pk = q->pk;
  if (n == SIZE_MAX) {
    size_t cnt = 0;
    pr_queue_t *k;
    PR_QUEUE_FOREACH(k, &q->ctl->reg.order)
    cnt += PR_QUEUE_DATA(k, pr_exec_t, order)->session == c->session;
    if (msgpack_pack_array(pk, cnt)) return PR_ENOMEM;
    PR_QUEUE_FOREACH(k, &q->ctl->reg.order) {
      pr_exec_t *x = PR_QUEUE_DATA(k, pr_exec_t, order);
      if (x->session != c->session) continue;
      if ((rc = subscribe_one(c, x)) != 0 || msgpack_pack_uint64(pk, x->id))
        return rc ? rc : PR_ENOMEM;
    }
    c->sub_all = 1;
    return 0;
  }
  for (size_t i = 0; i < n; i++) /* all or nothing */
    if (ids[i] == 0 || pr_registry_find(&q->ctl->reg, ids[i], c->session) == NULL)
      return pr_rpc_not_found(q, ids[i]);
  if (msgpack_pack_array(pk, n)) return PR_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    if ((rc = subscribe_one(c, pr_registry_find(&q->ctl->reg, ids[i], c->session))) != 0) return rc;
    if (msgpack_pack_uint64(pk, ids[i])) return PR_ENOMEM;
  }
  return 0;
}

/* unsubscribe [id | ids | nil] -> true (nil: every subscription, and no more automatic ones) */
static int m_unsubscribe(pr_rpc_req_t *q) {
  uint64_t *ids;
  size_t n;
  int rc;
  if ((rc = arg_ids(q, &ids, &n)) != 0) return rc;
  pr_rpc_conn_t *c = q->c;
  if (n == SIZE_MAX) {
    c->sub_all = 0;
    while (!pr_queue_empty(&c->subs))
      pr_rpc_sub_free(PR_QUEUE_DATA(pr_queue_head(&c->subs), pr_rpc_sub_t, cnode));
  } else {
    for (size_t i = 0; i < n; i++) {
      pr_rpc_sub_t *s = ids[i] ? pr_rpc_sub_find(c->srv, ids[i]) : NULL;
      if (s && s->conn == c) pr_rpc_sub_free(s);
    }
  }
  c->nready_waits++; /* waits held back by a subscription may go now */
  return done_true(q);
}

/* wait's {output = {stream = bytes, ...}}: after[] per stream (-1: not watched). */
static int wait_output(pr_rpc_req_t *q, int64_t after[PR_NSTREAM], int *watch) {
  static const char *const known[] = {"output", NULL};
  const msgpack_object *opts, *o;
  int rc;
  for (int i = 0; i < PR_NSTREAM; i++) after[i] = -1;
  *watch = 0;
  if ((rc = pr_rpc_arg_map(q, 2, "opts", known, &opts)) != 0) return rc;
  if ((o = pr_rpc_map_get(opts, "output")) == NULL) return 0;
  const char *what = "output: a map of \"stdout\", \"stderr\" or \"pty\" to a byte count >= 0";
  if (o->type != MSGPACK_OBJECT_MAP) return pr_rpc_bad(q, 2, "opts", what);
  for (uint32_t k = 0; k < o->via.map.size; k++) {
    const msgpack_object *key = &o->via.map.ptr[k].key;
    int64_t n, stream = -1;
    for (int i = 0; i < PR_NSTREAM; i++)
      if (pr_mp_key_is(key, pr_stream_name(i))) stream = i;
    if (stream < 0 || !pr_rpc_to_int(&o->via.map.ptr[k].val, &n) || n < 0)
      return pr_rpc_bad(q, 2, "opts", what);
    after[stream] = n;
    *watch = 1;
  }
  return 0;
}

/* Has a watched stream of x more bytes than after[] says? */
int pr_rpc_wait_grew(const pr_exec_t *x, const int64_t after[PR_NSTREAM]) {
  for (int i = 0; i < PR_NSTREAM; i++) {
    uint64_t head, tail;
    if (after[i] < 0 || x->streams[i].ring == NULL) continue;
    pr_ring_stats(x->streams[i].ring, &head, &tail);
    if (tail > (uint64_t)after[i]) return 1;
  }
  return 0;
}

/* wait [id, timeout_ms?, opts?] -> record, once terminal (after all of its
 * notifications) or when the timeout passed (then in its current state);
 * with opts.output, also as soon as a stream named there has more bytes
 * than it says (then in its current state). */
static int m_wait(pr_rpc_req_t *q) {
  uint64_t id;
  int rc, watch;
  int64_t timeout = -1, after[PR_NSTREAM];
  if ((rc = pr_rpc_arg_id(q, 0, &id)) != 0 ||
      (rc = pr_rpc_arg_range(q, 1, "timeout_ms", 0, (int64_t)1 << 40, &timeout)) != 0 ||
      (rc = wait_output(q, after, &watch)) != 0)
    return rc;
  if (q->notify) return PR_EINVAL; /* nobody to answer */
  pr_exec_t *x = id ? pr_registry_find(&q->ctl->reg, id, q->c->session) : NULL;
  if (x == NULL) return pr_rpc_not_found(q, id);
  int held = pr_rpc_sub_find(q->c->srv, id) != NULL;
  if ((x->finished && !held) || (timeout == 0 && !x->finished) ||
      (watch && !x->finished && pr_rpc_wait_grew(x, after))) {
    pr_record_t *r = pr_exec_snapshot(x);
    rc = r == NULL || pr_rpc_pack_record(q->pk, r) ? PR_ENOMEM : 0;
    pr_record_free(r);
    return rc;
  }
  if (q->c->nwaits >= PR_RPC_MAX_WAITS) {
    snprintf(q->msg, sizeof(q->msg), "too many pending waits on this connection (at most %u)",
             PR_RPC_MAX_WAITS);
    return PR_EBUSY;
  }
  pr_rpc_wait_t *w = pr_rpc_wait_new(q->c, id, q->msgid, timeout, watch ? after : NULL);
  if (w == NULL) return PR_ENOMEM;
  if (x->finished) {
    w->rec = pr_exec_snapshot(x);
    q->c->nready_waits++;
  }
  return PR_RPC_DEFER;
}

/* worker_request [id, payload, opts?] -> rid. The answer comes later as one
 * `worker_reply` notification (and `worker_chunk`s before it). */
static int m_worker_request(pr_rpc_req_t *q) {
  static const char *const keys[] = {"timeout_ms", NULL};
  uint64_t id;
  int rc;
  if ((rc = pr_rpc_arg_id(q, 0, &id)) != 0) return rc;
  const msgpack_object *payload = pr_rpc_arg(q, 1), *opts;
  if (payload == NULL) return pr_rpc_bad(q, 1, "payload", "a value expected");
  if ((rc = pr_rpc_arg_map(q, 2, "opts", keys, &opts)) != 0) return rc;
  int64_t timeout = 0;
  if (opts && (rc = pr_rpc_spec_int(q, opts, "timeout_ms", (int64_t)1 << 50, &timeout)) != 0)
    return rc;
  pr_exec_t *x = pr_registry_find(&q->ctl->reg, id, q->c->session);
  if (x == NULL) return pr_rpc_not_found(q, id);
  if (pr_rpc_session_shared(q->c)) { /* its replies go to the session's first connection */
    snprintf(q->msg, sizeof(q->msg),
             "another connection of this identity is connected: worker requests need the only one");
    return PR_EBUSY;
  }
  if (pr_worker_of(x) == NULL) return pr_rpc_fail_id(q, PR_ENOTWORKER, id);
  size_t n;
  char *json = pr_mp_to_json(payload, &n);
  if (json == NULL)
    return pr_rpc_bad(q, 1, "payload", "a value JSON can hold (maps need string keys)");
  uint64_t rid = pr_control_next_rid(q->ctl);
  pr_cmd_t c = {.type = PR_CMD_WREQUEST, .id = id, .u = rid, .data = json, .len = n, .a = timeout};
  run(q, &c);
  free(json);
  return msgpack_pack_uint64(q->pk, rid) ? PR_ENOMEM : 0;
}

/* worker_cancel [rid] -> true: the request resolves `canceled` now. */
static int m_worker_cancel(pr_rpc_req_t *q) {
  uint64_t rid;
  int rc;
  if ((rc = pr_rpc_arg_id(q, 0, &rid)) != 0) return rc;
  pr_cmd_t c = {.type = PR_CMD_WCANCEL, .u = rid};
  if ((rc = run(q, &c)) != 0) return pr_rpc_fail_id(q, rc, rid);
  return done_true(q);
}

/* release [id] -> true: an execution started with `hold` takes its turn. */
static int m_release(pr_rpc_req_t *q) {
  uint64_t id;
  int rc;
  if ((rc = pr_rpc_arg_id(q, 0, &id)) != 0) return rc;
  if (id == 0) return pr_rpc_not_found(q, id);
  pr_cmd_t c = {.type = PR_CMD_RELEASE, .id = id};
  if ((rc = run(q, &c)) != 0) return pr_rpc_fail_id(q, rc, id);
  return done_true(q);
}

/* worker_restart [id] -> true: replace the worker's process now. */
static int m_worker_restart(pr_rpc_req_t *q) {
  uint64_t id;
  int rc;
  if ((rc = pr_rpc_arg_id(q, 0, &id)) != 0) return rc;
  pr_cmd_t c = {.type = PR_CMD_WRESTART, .id = id};
  if ((rc = run(q, &c)) != 0) return pr_rpc_fail_id(q, rc, id);
  return done_true(q);
}

static const method_t methods[] = {{"hello", m_hello},
                                   {"start", m_start},
                                   {"get", m_get},
                                   {"list", m_list},
                                   {"read", m_read},
                                   {"input", m_input},
                                   {"close_stdin", m_close_stdin},
                                   {"resize", m_resize},
                                   {"cancel", m_cancel},
                                   {"release", m_release},
                                   {"delete", m_delete},
                                   {"purge", m_purge},
                                   {"subscribe", m_subscribe},
                                   {"unsubscribe", m_unsubscribe},
                                   {"wait", m_wait},
                                   {"worker_request", m_worker_request},
                                   {"worker_cancel", m_worker_cancel},
                                   {"worker_restart", m_worker_restart},
                                   {NULL, NULL}};

/* ---- dispatch ----------------------------------------------------------------------- */

int pr_rpc_dispatch(pr_rpc_conn_t *c, const msgpack_object *msg, msgpack_zone *zone) {
  if (msg->type != MSGPACK_OBJECT_ARRAY) return PR_EPROTO;
  const msgpack_object *a = msg->via.array.ptr;
  uint32_t n = msg->via.array.size;
  int64_t type;
  if (n < 3 || !pr_rpc_to_int(&a[0], &type)) return PR_EPROTO;
  /* The response is built apart and appended whole: whatever a method
   * queues on this connection meanwhile (a notification from a hook) lands
   * before it, never inside it. */
  c->resp.size = 0;
  pr_rpc_req_t q = {.c = c, .ctl = c->srv->ctl, .pk = &c->rpk, .zone = zone};
  const msgpack_object *method, *params;
  if (type == 0 && n == 4 && a[1].type == MSGPACK_OBJECT_POSITIVE_INTEGER) {
    q.msgid = a[1].via.u64;
    method = &a[2];
    params = &a[3];
  } else if (type == 2 && n == 3) {
    q.notify = 1;
    method = &a[1];
    params = &a[2];
  } else {
    return PR_EPROTO; /* not a request or notification we could answer */
  }
  int rc;
  if (!q.notify && pr_rpc_pack_response_head(q.pk, q.msgid) != 0) {
    rc = PR_ENOMEM;
  } else if (!pr_rpc_is_bytes(method)) {
    snprintf(q.msg, sizeof(q.msg), "method name must be a string");
    rc = PR_EINVAL;
  } else if (params->type != MSGPACK_OBJECT_ARRAY) {
    snprintf(q.msg, sizeof(q.msg), "params must be an array");
    rc = PR_EINVAL;
  } else {
    size_t len;
    const char *name = pr_rpc_bytes_of(method, &len);
    const method_t *m = methods;
    while (m->name && !(strlen(m->name) == len && memcmp(m->name, name, len) == 0)) m++;
    q.args = params->via.array.ptr;
    q.nargs = params->via.array.size;
    if (m->name == NULL) {
      char kb[48];
      snprintf(q.msg, sizeof(q.msg), "no such method '%s'",
               pr_rpc_key_text(method, kb, sizeof(kb)));
      rc = PR_ENOMETHOD;
    } else {
      rc = m->fn(&q);
    }
  }
  if (rc == PR_RPC_DEFER || q.notify) return 0; /* nothing to answer (now) */
  if (rc != 0) {
    c->resp.size = 0;
    if (pr_rpc_pack_error_response(q.pk, q.msgid, rc, q.msg) != 0) return PR_ENOMEM;
  }
  if (msgpack_sbuffer_write(&c->out, c->resp.data, c->resp.size) != 0) return PR_ENOMEM;
  if (c->resp.alloc > (64u << 10)) { /* do not keep a big response's buffer around */
    msgpack_sbuffer_destroy(&c->resp);
    msgpack_sbuffer_init(&c->resp);
  }
  c->resp.size = 0;
  return 0;
}
