/* rpc/methods.c — the method table, parameter validation, and packing of
 * records and notifications.
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
#include "rpc/conn.h"

#define PR_RPC_DEFER 1 /* a method result: the response is sent later (wait) */

typedef struct {
  pr_rpc_conn_t *c;
  pr_control_t *ctl;
  msgpack_packer *pk;
  msgpack_zone *zone;
  const msgpack_object *args;
  uint32_t nargs;
  uint64_t msgid;
  int notify;
  char msg[192]; /* error detail; empty: the table message */
} req_t;

typedef struct {
  const char *name;
  int (*fn)(req_t *q);
} method_t;

/* ---- packing ----------------------------------------------------------------------- */

/* One field's value, the way the RPC surface (and the Lua core) shows it. */
static int pack_value(msgpack_packer *pk, const pr_field_t *f) {
  const pr_record_t *r = f->r;
  char sb[32];
  switch (f->type) {
  case PR_FT_U64: return msgpack_pack_int64(pk, (int64_t)f->u);
  case PR_FT_I64: return msgpack_pack_int64(pk, f->i);
  case PR_FT_BOOL: return f->i ? msgpack_pack_true(pk) : msgpack_pack_false(pk);
  case PR_FT_STR: return pr_mp_str(pk, f->s);
  case PR_FT_SIGNAL: return pr_mp_str(pk, pr_signal_name((int)f->i, sb, sizeof(sb)));
  case PR_FT_CMD:
    if (r->shell) return pr_mp_str(pk, r->shell);
    if (msgpack_pack_array(pk, r->argc)) return -1;
    for (size_t i = 0; i < r->argc; i++)
      if (pr_mp_str(pk, r->argv && r->argv[i] ? r->argv[i] : "")) return -1;
    return 0;
  case PR_FT_KEYS: {
    if (msgpack_pack_array(pk, pr_record_nkeys(r))) return -1;
    size_t at = 0;
    for (const char *k; (k = pr_record_key_next(r, &at)) != NULL;)
      if (pr_mp_str(pk, k)) return -1;
    return 0;
  }
  case PR_FT_STREAMS:
    if (msgpack_pack_map(pk, (size_t)pr_record_nstreams(r))) return -1;
    for (int i = 0; i < PR_NSTREAM; i++)
      if (r->has_stream[i] && pr_mp_kv_int(pk, pr_stream_name(i), (int64_t)f->streams[i])) return -1;
    return 0;
  }
  return -1;
}

int pr_rpc_pack_record(msgpack_packer *pk, const pr_record_t *r) {
  pr_field_t f[PR_RF_COUNT];
  size_t n = pr_record_fields(r, f);
  if (msgpack_pack_map(pk, n)) return -1;
  for (size_t i = 0; i < n; i++)
    if (pr_mp_str(pk, f[i].key) || pack_value(pk, &f[i])) return -1;
  return 0;
}

int pr_rpc_pack_state(msgpack_packer *pk, const pr_state_info_t *st) {
  char sb[32];
  int term = pr_state_terminal(st->state);
  int has_exit = term && st->exit_code >= 0, has_sig = term && st->signal > 0;
  int has_pid = !term && st->pid > 0;
  uint32_t n = 2 + (st->prev < PR_NSTATE) + !!st->reason + !!st->error + has_exit + has_sig + has_pid;
  if (msgpack_pack_array(pk, 3) || msgpack_pack_int(pk, 2) || pr_mp_str(pk, "state") ||
      msgpack_pack_array(pk, 1) || msgpack_pack_map(pk, n) || pr_mp_kv_int(pk, "id", (int64_t)st->id) ||
      pr_mp_kv_str(pk, "state", pr_state_name(st->state)) ||
      (st->prev < PR_NSTATE && pr_mp_kv_str(pk, "prev", pr_state_name(st->prev))) ||
      (st->reason && pr_mp_kv_str(pk, "reason", st->reason)) ||
      (st->error && pr_mp_kv_str(pk, "error", st->error)) ||
      (has_exit && pr_mp_kv_int(pk, "exit_code", st->exit_code)) ||
      (has_sig && pr_mp_kv_str(pk, "signal", pr_signal_name(st->signal, sb, sizeof(sb)))) ||
      (has_pid && pr_mp_kv_int(pk, "pid", st->pid)))
    return -1;
  return 0;
}

int pr_rpc_pack_output(msgpack_packer *pk, uint64_t id, int stream, const char *data, size_t len,
                       uint64_t offset, uint64_t missed) {
  if (msgpack_pack_array(pk, 3) || msgpack_pack_int(pk, 2) || pr_mp_str(pk, "output") ||
      msgpack_pack_array(pk, 1) || msgpack_pack_map(pk, 5) || pr_mp_kv_int(pk, "id", (int64_t)id) ||
      pr_mp_kv_str(pk, "stream", pr_stream_name(stream)) || pr_mp_str(pk, "data") ||
      msgpack_pack_bin(pk, len) || msgpack_pack_bin_body(pk, data ? data : "", len) ||
      pr_mp_kv_int(pk, "offset", (int64_t)offset) || pr_mp_kv_int(pk, "missed", (int64_t)missed))
    return -1;
  return 0;
}

int pr_rpc_pack_error_response(msgpack_packer *pk, uint64_t msgid, int err, const char *msg) {
  if (msgpack_pack_array(pk, 4) || msgpack_pack_int(pk, 1) || msgpack_pack_uint64(pk, msgid) ||
      msgpack_pack_array(pk, 2) || pr_mp_str(pk, pr_err_name(err)) ||
      pr_mp_str(pk, msg && *msg ? msg : pr_strerror(err)) || msgpack_pack_nil(pk))
    return -1;
  return 0;
}

static int pack_response_head(msgpack_packer *pk, uint64_t msgid) {
  return msgpack_pack_array(pk, 4) || msgpack_pack_int(pk, 1) || msgpack_pack_uint64(pk, msgid) ||
         msgpack_pack_nil(pk);
}

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
  int rc = r ? pack_response_head(&c->pk, w->msgid) || pr_rpc_pack_record(&c->pk, r)
             : pr_rpc_pack_error_response(&c->pk, w->msgid, PR_ENOENT, m);
  if (rc != 0) {
    c->out.size = mark;
    if (pr_rpc_pack_error_response(&c->pk, w->msgid, PR_ENOMEM, NULL) != 0) c->out.size = mark;
  }
  pr_record_free(snap);
}

/* ---- parameters --------------------------------------------------------------------- */

static int bad(req_t *q, uint32_t i, const char *name, const char *what) {
  snprintf(q->msg, sizeof(q->msg), "bad argument #%u (%s): %s", i + 1, name, what);
  return PR_EINVAL;
}

/* The i-th parameter, or NULL when absent or nil. */
static const msgpack_object *arg(const req_t *q, uint32_t i) {
  return i < q->nargs && q->args[i].type != MSGPACK_OBJECT_NIL ? &q->args[i] : NULL;
}

/* An integral number (floats too, when exact). Returns 1 and *v. */
static int to_int(const msgpack_object *o, int64_t *v) {
  switch (o->type) {
  case MSGPACK_OBJECT_POSITIVE_INTEGER:
    if (o->via.u64 > INT64_MAX) return 0;
    *v = (int64_t)o->via.u64;
    return 1;
  case MSGPACK_OBJECT_NEGATIVE_INTEGER: *v = o->via.i64; return 1;
  case MSGPACK_OBJECT_FLOAT32:
  case MSGPACK_OBJECT_FLOAT64:
    if (!(o->via.f64 >= -9007199254740992.0 && o->via.f64 <= 9007199254740992.0) ||
        (double)(int64_t)o->via.f64 != o->via.f64)
      return 0;
    *v = (int64_t)o->via.f64;
    return 1;
  default: return 0;
  }
}

static int is_bytes(const msgpack_object *o) {
  return o->type == MSGPACK_OBJECT_STR || o->type == MSGPACK_OBJECT_BIN;
}

static const char *bytes_of(const msgpack_object *o, size_t *n) {
  *n = o->via.str.size; /* str and bin share the layout */
  return o->type == MSGPACK_OBJECT_STR ? o->via.str.ptr : o->via.bin.ptr;
}

/* A NUL-terminated copy in the message zone; NULL when not str/bin, when it
 * holds a NUL byte, or out of memory (*err says which). */
static char *zstr(req_t *q, const msgpack_object *o, int *err) {
  size_t n;
  if (!is_bytes(o)) {
    *err = PR_EINVAL;
    return NULL;
  }
  const char *p = bytes_of(o, &n);
  if (memchr(p, 0, n)) {
    *err = PR_EINVAL;
    return NULL;
  }
  char *s = q->zone ? msgpack_zone_malloc(q->zone, n + 1) : NULL;
  if (s == NULL) {
    *err = PR_ENOMEM;
    return NULL;
  }
  memcpy(s, p, n);
  s[n] = 0;
  return s;
}

/* Parameter i as an execution id; ids <= 0 exist nowhere (*id = 0). */
static int arg_id(req_t *q, uint32_t i, uint64_t *id) {
  const msgpack_object *o = arg(q, i);
  int64_t v;
  if (o == NULL || !to_int(o, &v)) return bad(q, i, "id", "execution id (integer) expected");
  *id = v > 0 ? (uint64_t)v : 0;
  return 0;
}

static int arg_bool(req_t *q, uint32_t i, const char *name, int *out) {
  const msgpack_object *o = arg(q, i);
  if (o == NULL) return 0;
  if (o->type != MSGPACK_OBJECT_BOOLEAN) return bad(q, i, name, "boolean expected");
  *out = o->via.boolean;
  return 0;
}

static int arg_range(req_t *q, uint32_t i, const char *name, int64_t lo, int64_t hi, int64_t *out) {
  const msgpack_object *o = arg(q, i);
  if (o == NULL) return 0;
  int64_t v;
  if (!to_int(o, &v) || v < lo || v > hi) {
    char w[96];
    snprintf(w, sizeof(w), "integer in [%lld, %lld] expected", (long long)lo, (long long)hi);
    return bad(q, i, name, w);
  }
  *out = v;
  return 0;
}

/* Copy a map key for an error message. */
static const char *key_text(const msgpack_object *k, char *buf, size_t n) {
  if (!is_bytes(k)) return "(not a string)";
  size_t len;
  const char *p = bytes_of(k, &len);
  snprintf(buf, n, "%.*s", (int)(len > 40 ? 40 : len), p);
  for (char *s = buf; *s; s++)
    if ((unsigned char)*s < 0x20) *s = '?';
  return buf;
}

/* Parameter i as an options map whose keys are all in `known`; NULL when absent. */
static int arg_map(req_t *q, uint32_t i, const char *name, const char *const *known,
                   const msgpack_object **out) {
  const msgpack_object *o = arg(q, i);
  *out = NULL;
  if (o == NULL) return 0;
  if (o->type != MSGPACK_OBJECT_MAP) return bad(q, i, name, "map expected");
  for (uint32_t k = 0; k < o->via.map.size; k++) {
    const msgpack_object *key = &o->via.map.ptr[k].key;
    int ok = 0;
    for (const char *const *p = known; *p && !ok; p++)
      ok = pr_mp_key_is(key, *p);
    if (!ok) {
      char kb[48], w[96];
      snprintf(w, sizeof(w), "unknown key '%s'", key_text(key, kb, sizeof(kb)));
      return bad(q, i, name, w);
    }
  }
  *out = o;
  return 0;
}

static const msgpack_object *map_get(const msgpack_object *m, const char *key) {
  if (m == NULL) return NULL;
  for (uint32_t k = 0; k < m->via.map.size; k++)
    if (pr_mp_key_is(&m->via.map.ptr[k].key, key))
      return m->via.map.ptr[k].val.type == MSGPACK_OBJECT_NIL ? NULL : &m->via.map.ptr[k].val;
  return NULL;
}

static int not_found(req_t *q, uint64_t id) {
  snprintf(q->msg, sizeof(q->msg), "%s %llu", pr_strerror(PR_ENOENT), (unsigned long long)id);
  return PR_ENOENT;
}

/* An error code from the engine, with the id in the message like the Lua core. */
static int fail_id(req_t *q, int rc, uint64_t id) {
  if (rc == PR_ENOENT || rc == PR_ENOTRUNNING || rc == PR_ESTDINCLOSED)
    snprintf(q->msg, sizeof(q->msg), "%s %llu", pr_strerror(rc), (unsigned long long)id);
  return rc;
}

static int run(req_t *q, pr_cmd_t *c) {
  c->session = q->c->session;
  pr_control_run(q->ctl, c);
  return c->rc;
}

static int done_true(req_t *q) { return msgpack_pack_true(q->pk) ? PR_ENOMEM : 0; }

/* ---- methods -------------------------------------------------------------------------- */

static const method_t methods[];

/* hello [client_name?] -> {server, version, session, max_message, methods} */
static int m_hello(req_t *q) {
  const msgpack_object *o = arg(q, 0);
  if (o) {
    int err = 0;
    char *name = zstr(q, o, &err);
    if (name == NULL)
      return err == PR_EINVAL ? bad(q, 0, "name", "string without NUL expected") : err;
    if (strlen(name) == 0 || strlen(name) > PR_RPC_NAME_MAX)
      return bad(q, 0, "name", "1 to 128 bytes expected");
    snprintf(q->c->name, sizeof(q->c->name), "%s", name);
  }
  size_t nm = 0;
  while (methods[nm].name)
    nm++;
  msgpack_packer *pk = q->pk;
  if (msgpack_pack_map(pk, 6) || pr_mp_kv_str(pk, "server", "proctor") ||
      pr_mp_kv_str(pk, "version", PR_VERSION) || pr_mp_kv_int(pk, "session", (int64_t)q->c->session) ||
      pr_mp_kv_str(pk, "name", q->c->name) || pr_mp_kv_int(pk, "max_message", PR_RPC_MAX_MESSAGE) ||
      pr_mp_str(pk, "methods") || msgpack_pack_array(pk, nm))
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

static const char *const start_keys[] = {"cmd",
                                         "cwd",
                                         "env",
                                         "clear_env",
                                         "pty",
                                         "cols",
                                         "rows",
                                         "stdin",
                                         "timeout_ms",
                                         "kill_grace_ms",
                                         "label",
                                         "backpressure",
                                         "kill_on_disconnect",
                                         "secrets",
                                         "env_allow",
                                         "worker",
                                         NULL};

static int spec_bool(req_t *q, const msgpack_object *sp, const char *key, int *out) {
  const msgpack_object *v = map_get(sp, key);
  if (v == NULL) return 0;
  if (v->type != MSGPACK_OBJECT_BOOLEAN) {
    char w[64];
    snprintf(w, sizeof(w), "field '%s' must be a boolean", key);
    return bad(q, 0, "spec", w);
  }
  *out = v->via.boolean;
  return 0;
}

static int spec_int(req_t *q, const msgpack_object *sp, const char *key, int64_t hi, int64_t *out) {
  const msgpack_object *v = map_get(sp, key);
  int64_t n;
  if (v == NULL) return 0;
  if (!to_int(v, &n) || n < 0 || n > hi) {
    char w[96];
    snprintf(w, sizeof(w), "field '%s' must be an integer in [0, %lld]", key, (long long)hi);
    return bad(q, 0, "spec", w);
  }
  *out = n;
  return 0;
}

static int spec_str(req_t *q, const msgpack_object *sp, const char *key, const char **out) {
  const msgpack_object *v = map_get(sp, key);
  if (v == NULL) return 0;
  int err = 0;
  if ((*out = zstr(q, v, &err)) == NULL) {
    if (err != PR_EINVAL) return err;
    char w[96];
    snprintf(w, sizeof(w), "field '%s' must be a string without NUL bytes", key);
    return bad(q, 0, "spec", w);
  }
  return 0;
}

/* A map of NAME = value (strings; numbers are written out) as "NAME=value"
 * strings in the request's zone. Error messages never quote a value: for
 * `secrets` they are secret. */
static int kv_list(req_t *q, const msgpack_object *m, const char *field, const char *const **out,
                   size_t *n_out) {
  if (m == NULL) return 0;
  char w[128];
  snprintf(w, sizeof(w), "'%s' must be a map of NAME = value (names without '=' or NUL)", field);
  if (m->type != MSGPACK_OBJECT_MAP) return bad(q, 0, "spec", w);
  uint32_t n = m->via.map.size;
  const char **kvs = msgpack_zone_malloc(q->zone, (n ? n : 1) * sizeof(char *));
  if (kvs == NULL) return PR_ENOMEM;
  for (uint32_t i = 0; i < n; i++) {
    const msgpack_object *k = &m->via.map.ptr[i].key, *v = &m->via.map.ptr[i].val;
    char num[32];
    int err = 0;
    const char *ks = zstr(q, k, &err), *vs = NULL;
    if (ks == NULL && err == PR_ENOMEM) return err;
    int64_t iv;
    if (is_bytes(v)) {
      vs = zstr(q, v, &err);
      if (vs == NULL && err == PR_ENOMEM) return err;
    } else if (to_int(v, &iv)) {
      snprintf(num, sizeof(num), "%lld", (long long)iv);
      vs = num;
    }
    if (ks == NULL || vs == NULL || ks[0] == 0 || strchr(ks, '=')) return bad(q, 0, "spec", w);
    size_t len = strlen(ks) + strlen(vs) + 2;
    char *kv = msgpack_zone_malloc(q->zone, len);
    if (kv == NULL) return PR_ENOMEM;
    snprintf(kv, len, "%s=%s", ks, vs);
    kvs[i] = kv;
  }
  *out = kvs;
  *n_out = n;
  return 0;
}

/* The `worker` field of a start spec: true (every default) or a map like the
 * Lua core's (doc *proctor-workers*). */
static int worker_spec(req_t *q, const msgpack_object *w, pr_worker_spec_t *ws) {
  static const char *const protos[] = {"jsonl", "msgpack-rpc", NULL};
  static const char *const restarts[] = {"never", "on-failure", "always", NULL};
  static const char *const keys[] = {"protocol",   "restart", "max_restarts", "backoff_ms",
                                     "backoff_max_ms", "healthy_ms", "ready", "max_chunks",
                                     NULL};
  memset(ws, 0, sizeof(*ws));
  ws->max_restarts = -1;
  ws->restart = PR_WR_ON_FAILURE;
  if (w->type == MSGPACK_OBJECT_BOOLEAN) return 0;
  if (w->type != MSGPACK_OBJECT_MAP) return bad(q, 0, "spec", "'worker' must be a map (or true)");
  for (uint32_t i = 0; i < w->via.map.size; i++) {
    int known = 0;
    for (const char *const *k = keys; *k && !known; k++) known = pr_mp_key_is(&w->via.map.ptr[i].key, *k);
    if (!known) return bad(q, 0, "spec", "unknown key in 'worker'");
  }
  const char *p = NULL, *r = NULL;
  int64_t mr = -1, bo = 0, bmax = 0, healthy = 0, chunks = 0;
  int rc;
  if ((rc = spec_str(q, w, "protocol", &p)) || (rc = spec_str(q, w, "restart", &r)) ||
      (rc = spec_int(q, w, "max_restarts", 1000000, &mr)) ||
      (rc = spec_int(q, w, "backoff_ms", 3600000, &bo)) ||
      (rc = spec_int(q, w, "backoff_max_ms", 3600000, &bmax)) ||
      (rc = spec_int(q, w, "healthy_ms", 86400000, &healthy)) ||
      (rc = spec_int(q, w, "max_chunks", 1000000, &chunks)))
    return rc;
  for (int i = 0; p && protos[i]; i++)
    if (strcmp(p, protos[i]) == 0) ws->protocol = (pr_worker_protocol_t)i, p = NULL;
  if (p) return bad(q, 0, "spec", "worker.protocol must be \"jsonl\" or \"msgpack-rpc\"");
  for (int i = 0; r && restarts[i]; i++)
    if (strcmp(r, restarts[i]) == 0) ws->restart = (pr_worker_restart_t)i, r = NULL;
  if (r) return bad(q, 0, "spec", "worker.restart must be \"never\", \"on-failure\" or \"always\"");
  ws->max_restarts = (int32_t)mr;
  ws->backoff_ms = (uint32_t)bo;
  ws->backoff_max_ms = (uint32_t)bmax;
  ws->healthy_ms = (uint32_t)healthy;
  ws->max_chunks = (uint32_t)chunks;
  const msgpack_object *ready = map_get(w, "ready");
  if (ready) {
    if (ready->type != MSGPACK_OBJECT_MAP) return bad(q, 0, "spec", "worker.ready must be a map");
    if ((rc = spec_bool(q, ready, "message", &ws->ready_message)) ||
        (rc = spec_str(q, ready, "stderr_pattern", &ws->ready_stderr)))
      return rc;
  }
  return 0;
}

/* start [spec] -> id */
static int m_start(req_t *q) {
  const msgpack_object *sp;
  int rc, err = 0;
  if ((rc = arg_map(q, 0, "spec", start_keys, &sp)) != 0) return rc;
  if (sp == NULL) return bad(q, 0, "spec", "map expected");
  pr_spec_t s = {0};
  int64_t cols = 0, rows = 0, timeout = 0, grace = -1;
  int kod = 0;
  if ((rc = spec_str(q, sp, "cwd", &s.cwd)) || (rc = spec_str(q, sp, "label", &s.label)) ||
      (rc = spec_bool(q, sp, "clear_env", &s.clear_env)) ||
      (rc = spec_bool(q, sp, "pty", &s.pty)) || (rc = spec_bool(q, sp, "stdin", &s.stdin_pipe)) ||
      (rc = spec_bool(q, sp, "backpressure", &s.backpressure)) ||
      (rc = spec_bool(q, sp, "kill_on_disconnect", &kod)) ||
      (rc = spec_int(q, sp, "cols", 65535, &cols)) ||
      (rc = spec_int(q, sp, "rows", 65535, &rows)) ||
      (rc = spec_int(q, sp, "timeout_ms", (int64_t)1 << 50, &timeout)) ||
      (rc = spec_int(q, sp, "kill_grace_ms", 3600000, &grace)))
    return rc;
  s.cols = (uint16_t)cols;
  s.rows = (uint16_t)rows;
  s.timeout_ms = (uint64_t)timeout;
  s.kill_grace_ms = grace;
  const msgpack_object *cmd = map_get(sp, "cmd");
  if (cmd && is_bytes(cmd)) {
    if ((s.shell = zstr(q, cmd, &err)) == NULL || s.shell[0] == 0)
      return err == PR_ENOMEM ? err
                              : bad(q, 0, "spec", "'cmd' must be a non-empty string without NUL");
  } else if (cmd && cmd->type == MSGPACK_OBJECT_ARRAY && cmd->via.array.size > 0) {
    uint32_t n = cmd->via.array.size;
    const char **argv = q->zone ? msgpack_zone_malloc(q->zone, n * sizeof(char *)) : NULL;
    if (argv == NULL) return PR_ENOMEM;
    for (uint32_t i = 0; i < n; i++)
      if ((argv[i] = zstr(q, &cmd->via.array.ptr[i], &err)) == NULL)
        return err == PR_ENOMEM ? err
                                : bad(q, 0, "spec", "'cmd' entries must be strings without NUL");
    s.argv = argv;
    s.argc = n;
  } else {
    return bad(q, 0, "spec",
               "'cmd' must be a string (run by /bin/sh -c) or a non-empty list of strings");
  }
  if ((rc = kv_list(q, map_get(sp, "env"), "env", &s.env, &s.envc)) != 0 ||
      (rc = kv_list(q, map_get(sp, "secrets"), "secrets", &s.secrets, &s.nsecrets)) != 0)
    return rc;
  const msgpack_object *allow = map_get(sp, "env_allow");
  if (allow) {
    if (allow->type != MSGPACK_OBJECT_ARRAY)
      return bad(q, 0, "spec", "'env_allow' must be a list of variable names");
    uint32_t n = allow->via.array.size;
    const char **names = msgpack_zone_malloc(q->zone, (n ? n : 1) * sizeof(char *));
    if (names == NULL) return PR_ENOMEM;
    for (uint32_t i = 0; i < n; i++)
      if ((names[i] = zstr(q, &allow->via.array.ptr[i], &err)) == NULL || names[i][0] == 0 ||
          strchr(names[i], '='))
        return err == PR_ENOMEM ? err : bad(q, 0, "spec", "'env_allow' entries must be names");
    s.env_allow = names;
    s.nallow = n;
  }
  pr_worker_spec_t ws;
  const msgpack_object *wk = map_get(sp, "worker");
  if (wk && !(wk->type == MSGPACK_OBJECT_BOOLEAN && !wk->via.boolean)) {
    if ((rc = worker_spec(q, wk, &ws)) != 0) return rc;
    s.worker = &ws;
  }
  s.session = q->c->session;
  s.owner = q->c->name;
  pr_exec_t *x;
  if ((rc = pr_exec_build(q->ctl, &s, q->c->srv->env, &x)) != 0) return rc;
  uint64_t id = x->id;
  if (kod && (rc = add_kod(q->c, id)) != 0) {
    pr_exec_free(x);
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
static int m_get(req_t *q) {
  uint64_t id;
  int rc;
  if ((rc = arg_id(q, 0, &id)) != 0) return rc;
  pr_cmd_t c = {.type = PR_CMD_GET, .id = id};
  if (id == 0) return not_found(q, id);
  if ((rc = run(q, &c)) != 0) return fail_id(q, rc, id);
  rc = pr_rpc_pack_record(q->pk, (pr_record_t *)c.out) ? PR_ENOMEM : 0;
  pr_record_free((pr_record_t *)c.out);
  return rc;
}

/* list [{state?}] -> [record...] */
static int m_list(req_t *q) {
  static const char *const keys[] = {"state", NULL};
  const msgpack_object *f;
  int rc, state = -1;
  if ((rc = arg_map(q, 0, "filter", keys, &f)) != 0) return rc;
  const msgpack_object *so = map_get(f, "state");
  if (so) {
    char *name = zstr(q, so, &rc);
    if (name == NULL && rc == PR_ENOMEM) return rc;
    if (name == NULL || (state = pr_state_from_name(name)) < 0)
      return bad(q, 0, "filter", "unknown state name");
  }
  pr_cmd_t c = {.type = PR_CMD_LIST, .a = state};
  if ((rc = run(q, &c)) != 0) return rc;
  pr_record_t **v = (pr_record_t **)c.out;
  rc = msgpack_pack_array(q->pk, c.n) ? PR_ENOMEM : 0;
  for (size_t i = 0; i < c.n && rc == 0; i++)
    rc = pr_rpc_pack_record(q->pk, v[i]) ? PR_ENOMEM : 0;
  pr_records_free(v, c.n);
  return rc;
}

/* read [id, stream, from?, max?] -> {data = bin, next_offset, missed} */
static int m_read(req_t *q) {
  uint64_t id;
  int rc;
  int64_t from = 0, max = PR_RPC_READ_MAX;
  if ((rc = arg_id(q, 0, &id)) != 0) return rc;
  const msgpack_object *so = arg(q, 1);
  int stream = -1;
  if (so && is_bytes(so)) {
    size_t n;
    const char *p = bytes_of(so, &n);
    for (int i = 0; i < PR_NSTREAM; i++)
      if (strlen(pr_stream_name(i)) == n && memcmp(p, pr_stream_name(i), n) == 0) stream = i;
  }
  if (stream < 0) return bad(q, 1, "stream", "\"stdout\", \"stderr\" or \"pty\" expected");
  if ((rc = arg_range(q, 2, "from", 0, INT64_MAX, &from)) != 0 ||
      (rc = arg_range(q, 3, "max", 0, INT64_MAX, &max)) != 0)
    return rc;
  if (max > PR_RPC_READ_MAX) max = PR_RPC_READ_MAX;
  if (id == 0) return not_found(q, id);
  pr_cmd_t c = {.type = PR_CMD_READ, .id = id, .a = stream, .b = max, .u = (uint64_t)from};
  if ((rc = run(q, &c)) != 0) return fail_id(q, rc, id);
  msgpack_packer *pk = q->pk;
  rc = msgpack_pack_map(pk, 3) || pr_mp_str(pk, "data") || msgpack_pack_bin(pk, c.n) ||
               msgpack_pack_bin_body(pk, c.out ? c.out : "", c.n) ||
               pr_mp_kv_int(pk, "next_offset", (int64_t)c.r1) || pr_mp_kv_int(pk, "missed", (int64_t)c.r2)
           ? PR_ENOMEM
           : 0;
  free(c.out);
  return rc;
}

/* input [id, data] -> true */
static int m_input(req_t *q) {
  uint64_t id;
  int rc;
  if ((rc = arg_id(q, 0, &id)) != 0) return rc;
  const msgpack_object *d = arg(q, 1);
  if (d == NULL || !is_bytes(d)) return bad(q, 1, "data", "bin or string expected");
  if (id == 0) return not_found(q, id);
  size_t n;
  pr_cmd_t c = {.type = PR_CMD_INPUT, .id = id};
  c.data = bytes_of(d, &n);
  c.len = n;
  if ((rc = run(q, &c)) != 0) return fail_id(q, rc, id);
  return done_true(q);
}

/* close_stdin [id] -> true */
static int m_close_stdin(req_t *q) {
  uint64_t id;
  int rc;
  if ((rc = arg_id(q, 0, &id)) != 0) return rc;
  if (id == 0) return not_found(q, id);
  pr_cmd_t c = {.type = PR_CMD_CLOSE_STDIN, .id = id};
  if ((rc = run(q, &c)) != 0) return fail_id(q, rc, id);
  return done_true(q);
}

/* resize [id, cols, rows] -> true */
static int m_resize(req_t *q) {
  uint64_t id;
  int rc;
  int64_t cols = -1, rows = -1;
  if ((rc = arg_id(q, 0, &id)) != 0 || (rc = arg_range(q, 1, "cols", 1, 65535, &cols)) != 0 ||
      (rc = arg_range(q, 2, "rows", 1, 65535, &rows)) != 0)
    return rc;
  if (cols < 0) return bad(q, 1, "cols", "integer in [1, 65535] expected");
  if (rows < 0) return bad(q, 2, "rows", "integer in [1, 65535] expected");
  if (id == 0) return not_found(q, id);
  pr_cmd_t c = {.type = PR_CMD_RESIZE, .id = id, .a = cols, .b = rows};
  if ((rc = run(q, &c)) != 0) return fail_id(q, rc, id);
  return done_true(q);
}

/* cancel [id, force? | {force?}] -> "canceling" | "already_canceling" | "already_terminal" |
 * "not_found" */
static int m_cancel(req_t *q) {
  uint64_t id;
  int rc, force = 0;
  if ((rc = arg_id(q, 0, &id)) != 0) return rc;
  const msgpack_object *f = arg(q, 1);
  if (f && f->type == MSGPACK_OBJECT_MAP) {
    static const char *const keys[] = {"force", NULL};
    const msgpack_object *m;
    if ((rc = arg_map(q, 1, "force", keys, &m)) != 0) return rc;
    const msgpack_object *v = map_get(m, "force");
    if (v && v->type != MSGPACK_OBJECT_BOOLEAN) return bad(q, 1, "force", "boolean expected");
    force = v ? v->via.boolean : 0;
  } else if ((rc = arg_bool(q, 1, "force", &force)) != 0) {
    return bad(q, 1, "force", "boolean or {force = boolean} expected");
  }
  pr_cancel_result_t r = PR_CANCEL_NOT_FOUND;
  if (id) {
    pr_cmd_t c = {.type = PR_CMD_CANCEL, .id = id, .a = force};
    r = (pr_cancel_result_t)run(q, &c);
  }
  return pr_mp_str(q->pk, pr_cancel_result_name(r)) ? PR_ENOMEM : 0;
}

/* delete [id] -> "deleted" | "active_process_conflict" | "not_found" */
static int m_delete(req_t *q) {
  uint64_t id;
  int rc;
  if ((rc = arg_id(q, 0, &id)) != 0) return rc;
  pr_delete_result_t r = PR_DELETE_NOT_FOUND;
  if (id) {
    pr_cmd_t c = {.type = PR_CMD_DELETE, .id = id};
    r = (pr_delete_result_t)run(q, &c);
  }
  return pr_mp_str(q->pk, pr_delete_result_name(r)) ? PR_ENOMEM : 0;
}

/* purge [{older_than_ms?}] -> number deleted */
static int m_purge(req_t *q) {
  static const char *const keys[] = {"older_than_ms", NULL};
  const msgpack_object *f;
  int rc;
  int64_t older = 0;
  if ((rc = arg_map(q, 0, "filter", keys, &f)) != 0) return rc;
  const msgpack_object *o = map_get(f, "older_than_ms");
  if (o && (!to_int(o, &older) || older < 0))
    return bad(q, 0, "filter", "'older_than_ms' must be an integer >= 0");
  pr_cmd_t c = {.type = PR_CMD_PURGE, .u = (uint64_t)older};
  if ((rc = run(q, &c)) != 0) return rc;
  return msgpack_pack_uint64(q->pk, c.n) ? PR_ENOMEM : 0;
}

/* Collect the ids of parameter 0: one id, a list, or nil (n = SIZE_MAX). */
static int arg_ids(req_t *q, uint64_t **ids, size_t *n) {
  const msgpack_object *o = arg(q, 0);
  *ids = NULL;
  *n = SIZE_MAX;
  if (o == NULL) return 0;
  uint32_t cnt = o->type == MSGPACK_OBJECT_ARRAY ? o->via.array.size : 1;
  const msgpack_object *v = o->type == MSGPACK_OBJECT_ARRAY ? o->via.array.ptr : o;
  uint64_t *out = q->zone ? msgpack_zone_malloc(q->zone, (cnt ? cnt : 1) * sizeof(uint64_t)) : NULL;
  if (out == NULL) return PR_ENOMEM;
  for (uint32_t i = 0; i < cnt; i++) {
    int64_t id;
    if (!to_int(&v[i], &id)) return bad(q, 0, "ids", "an id, a list of ids, or nil expected");
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
static int m_subscribe(req_t *q) {
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
      return not_found(q, ids[i]);
  if (msgpack_pack_array(pk, n)) return PR_ENOMEM;
  for (size_t i = 0; i < n; i++) {
    if ((rc = subscribe_one(c, pr_registry_find(&q->ctl->reg, ids[i], c->session))) != 0) return rc;
    if (msgpack_pack_uint64(pk, ids[i])) return PR_ENOMEM;
  }
  return 0;
}

/* unsubscribe [id | ids | nil] -> true (nil: every subscription, and no more automatic ones) */
static int m_unsubscribe(req_t *q) {
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

/* wait [id, timeout_ms?] -> record, once terminal (after all of its
 * notifications) or when the timeout passed (then in its current state). */
static int m_wait(req_t *q) {
  uint64_t id;
  int rc;
  int64_t timeout = -1;
  if ((rc = arg_id(q, 0, &id)) != 0 ||
      (rc = arg_range(q, 1, "timeout_ms", 0, (int64_t)1 << 40, &timeout)) != 0)
    return rc;
  if (q->notify) return PR_EINVAL; /* nobody to answer */
  pr_exec_t *x = id ? pr_registry_find(&q->ctl->reg, id, q->c->session) : NULL;
  if (x == NULL) return not_found(q, id);
  int held = pr_rpc_sub_find(q->c->srv, id) != NULL;
  if ((x->finished && !held) || (timeout == 0 && !x->finished)) {
    pr_record_t *r = pr_exec_snapshot(x);
    rc = r == NULL || pr_rpc_pack_record(q->pk, r) ? PR_ENOMEM : 0;
    pr_record_free(r);
    return rc;
  }
  pr_rpc_wait_t *w = pr_rpc_wait_new(q->c, id, q->msgid, timeout);
  if (w == NULL) return PR_ENOMEM;
  if (x->finished) {
    w->rec = pr_exec_snapshot(x);
    q->c->nready_waits++;
  }
  return PR_RPC_DEFER;
}

/* worker_request [id, payload, opts?] -> rid. The answer comes later as one
 * `worker_reply` notification (and `worker_chunk`s before it). */
static int m_worker_request(req_t *q) {
  static const char *const keys[] = {"timeout_ms", NULL};
  uint64_t id;
  int rc;
  if ((rc = arg_id(q, 0, &id)) != 0) return rc;
  const msgpack_object *payload = arg(q, 1), *opts;
  if (payload == NULL) return bad(q, 1, "payload", "a value expected");
  if ((rc = arg_map(q, 2, "opts", keys, &opts)) != 0) return rc;
  int64_t timeout = 0;
  if (opts && (rc = spec_int(q, opts, "timeout_ms", (int64_t)1 << 50, &timeout)) != 0) return rc;
  pr_exec_t *x = pr_registry_find(&q->ctl->reg, id, q->c->session);
  if (x == NULL) return not_found(q, id);
  if (pr_worker_of(x) == NULL) return fail_id(q, PR_ENOTWORKER, id);
  size_t n;
  char *json = pr_mp_to_json(payload, &n);
  if (json == NULL) return bad(q, 1, "payload", "a value JSON can hold (maps need string keys)");
  uint64_t rid = pr_control_next_rid(q->ctl);
  pr_cmd_t c = {.type = PR_CMD_WREQUEST, .id = id, .u = rid, .data = json, .len = n, .a = timeout};
  run(q, &c);
  free(json);
  return msgpack_pack_uint64(q->pk, rid) ? PR_ENOMEM : 0;
}

/* worker_cancel [rid] -> true: the request resolves `canceled` now. */
static int m_worker_cancel(req_t *q) {
  uint64_t rid;
  int rc;
  if ((rc = arg_id(q, 0, &rid)) != 0) return rc;
  pr_cmd_t c = {.type = PR_CMD_WCANCEL, .u = rid};
  if ((rc = run(q, &c)) != 0) return fail_id(q, rc, rid);
  return done_true(q);
}

/* worker_restart [id] -> true: replace the worker's process now. */
static int m_worker_restart(req_t *q) {
  uint64_t id;
  int rc;
  if ((rc = arg_id(q, 0, &id)) != 0) return rc;
  pr_cmd_t c = {.type = PR_CMD_WRESTART, .id = id};
  if ((rc = run(q, &c)) != 0) return fail_id(q, rc, id);
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
  if (n < 3 || !to_int(&a[0], &type)) return PR_EPROTO;
  /* The response is built apart and appended whole: whatever a method
   * queues on this connection meanwhile (a notification from a hook) lands
   * before it, never inside it. */
  c->resp.size = 0;
  req_t q = {.c = c, .ctl = c->srv->ctl, .pk = &c->rpk, .zone = zone};
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
  if (!q.notify && pack_response_head(q.pk, q.msgid) != 0) {
    rc = PR_ENOMEM;
  } else if (!is_bytes(method)) {
    snprintf(q.msg, sizeof(q.msg), "method name must be a string");
    rc = PR_EINVAL;
  } else if (params->type != MSGPACK_OBJECT_ARRAY) {
    snprintf(q.msg, sizeof(q.msg), "params must be an array");
    rc = PR_EINVAL;
  } else {
    size_t len;
    const char *name = bytes_of(method, &len);
    const method_t *m = methods;
    while (m->name && !(strlen(m->name) == len && memcmp(m->name, name, len) == 0))
      m++;
    q.args = params->via.array.ptr;
    q.nargs = params->via.array.size;
    if (m->name == NULL) {
      char kb[48];
      snprintf(q.msg, sizeof(q.msg), "no such method '%s'", key_text(method, kb, sizeof(kb)));
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

/* ---- worker notifications (the server's listener) ------------------------------------- */

/* A JSON text as a msgpack value; text that is not JSON goes as a string. */
static int pk_json(msgpack_packer *pk, const char *text, size_t len) {
  int rc = pr_mp_pack_json(pk, text, len);
  if (rc == PR_EINVAL) return pr_mp_strn(pk, text, len);
  return rc;
}

int pr_rpc_pack_worker(msgpack_packer *pk, int reply, const pr_wmsg_t *m) {
  if (!reply)
    return msgpack_pack_array(pk, 3) || msgpack_pack_int(pk, 2) || pr_mp_str(pk, "worker_chunk") ||
           msgpack_pack_array(pk, 1) || msgpack_pack_map(pk, 3) || pr_mp_kv_int(pk, "id", (int64_t)m->id) ||
           pr_mp_kv_int(pk, "rid", (int64_t)m->rid) || pr_mp_str(pk, "chunk") ||
           pk_json(pk, m->text, m->len);
  int ok = m->status == PR_RS_OK;
  return msgpack_pack_array(pk, 3) || msgpack_pack_int(pk, 2) || pr_mp_str(pk, "worker_reply") ||
         msgpack_pack_array(pk, 1) || msgpack_pack_map(pk, 5) || pr_mp_kv_int(pk, "id", (int64_t)m->id) ||
         pr_mp_kv_int(pk, "rid", (int64_t)m->rid) || pr_mp_kv_bool(pk, "ok", ok) ||
         pr_mp_kv_str(pk, "status", pr_reply_status_name(m->status)) ||
         pr_mp_str(pk, ok ? "result" : "error") ||
         (ok ? pk_json(pk, m->text, m->len) : pr_mp_strn(pk, m->text, m->len));
}
