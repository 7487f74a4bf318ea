/* rpc/pack.c — records and notifications as msgpack-rpc messages.
 *
 * Thread: engine (pure functions of their arguments).
 *
 * A record map comes from the record's one description (pr_record_fields,
 * include/proctor.h): its size is counted, never written by hand. Every pack
 * call is checked; a caller that gets -1 rewinds its buffer to where the
 * message began.
 */
#include <string.h>

#include "base/mpack.h"
#include "rpc/conn.h"

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
  case PR_FT_CMD: return pr_mp_cmd(pk, r);
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
      if (r->has_stream[i] && pr_mp_kv_int(pk, pr_stream_name(i), (int64_t)f->streams[i]))
        return -1;
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
  /* The entries present, listed first: the map's size is their count. */
  struct {
    const char *key, *str; /* str NULL: the integer */
    int64_t num;
  } e[8];
  size_t n = 0;
  char sb[32];
  int term = pr_state_terminal(st->state);
#define ENTRY(k, s, i) e[n].key = (k), e[n].str = (s), e[n++].num = (i)
  ENTRY("id", NULL, (int64_t)st->id);
  ENTRY("state", pr_state_name(st->state), 0);
  if (st->prev < PR_NSTATE) ENTRY("prev", pr_state_name(st->prev), 0);
  if (st->reason) ENTRY("reason", st->reason, 0);
  if (st->error) ENTRY("error", st->error, 0);
  if (term && st->exit_code >= 0) ENTRY("exit_code", NULL, st->exit_code);
  if (term && st->signal > 0) ENTRY("signal", pr_signal_name(st->signal, sb, sizeof(sb)), 0);
  if (!term && st->pid > 0) ENTRY("pid", NULL, st->pid);
#undef ENTRY
  if (msgpack_pack_array(pk, 3) || msgpack_pack_int(pk, 2) || pr_mp_str(pk, "state") ||
      msgpack_pack_array(pk, 1) || msgpack_pack_map(pk, n))
    return -1;
  for (size_t i = 0; i < n; i++)
    if (e[i].str ? pr_mp_kv_str(pk, e[i].key, e[i].str) : pr_mp_kv_int(pk, e[i].key, e[i].num))
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

int pr_rpc_pack_response_head(msgpack_packer *pk, uint64_t msgid) {
  return msgpack_pack_array(pk, 4) || msgpack_pack_int(pk, 1) || msgpack_pack_uint64(pk, msgid) ||
         msgpack_pack_nil(pk);
}

/* ---- worker notifications ------------------------------------------------------------- */

/* A JSON text as a msgpack value; text that is not JSON goes as a string. */
static int pk_json(msgpack_packer *pk, const char *text, size_t len) {
  int rc = pr_mp_pack_json(pk, text, len);
  if (rc == PR_EINVAL) return pr_mp_strn(pk, text, len);
  return rc;
}

int pr_rpc_pack_worker(msgpack_packer *pk, int reply, const pr_wmsg_t *m) {
  if (!reply)
    return msgpack_pack_array(pk, 3) || msgpack_pack_int(pk, 2) || pr_mp_str(pk, "worker_chunk") ||
           msgpack_pack_array(pk, 1) || msgpack_pack_map(pk, 3) ||
           pr_mp_kv_int(pk, "id", (int64_t)m->id) || pr_mp_kv_int(pk, "rid", (int64_t)m->rid) ||
           pr_mp_str(pk, "chunk") || pk_json(pk, m->text, m->len);
  int ok = m->status == PR_RS_OK;
  return msgpack_pack_array(pk, 3) || msgpack_pack_int(pk, 2) || pr_mp_str(pk, "worker_reply") ||
         msgpack_pack_array(pk, 1) || msgpack_pack_map(pk, 5) ||
         pr_mp_kv_int(pk, "id", (int64_t)m->id) || pr_mp_kv_int(pk, "rid", (int64_t)m->rid) ||
         pr_mp_kv_bool(pk, "ok", ok) ||
         pr_mp_kv_str(pk, "status", pr_reply_status_name(m->status)) ||
         pr_mp_str(pk, ok ? "result" : "error") ||
         (ok ? pk_json(pk, m->text, m->len) : pr_mp_strn(pk, m->text, m->len));
}
