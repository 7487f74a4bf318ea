/* lua/binding.c — the `proctor.core` Lua module (LuaJIT/Neovim and Lua 5.4):
 * the engine userdata, its methods, and their argument checking.
 *
 * Thread: host (the Lua state's thread). Only the lua/ files include lua.h,
 * and they include nothing of the core but include/proctor.h.
 *
 *   lua/binding.c  core.new, eng:start ... eng:close: Lua arguments -> pr_engine_*
 *   lua/push.c     records and events -> Lua tables (the record from its one description)
 *   lua/json.c     Lua values <-> JSON text (worker payloads, results, chunks)
 *
 * Conventions: an engine is a userdata holding one pointer, with
 * __gc/__close/__tostring. Programmer errors (wrong types, bad enum names,
 * negative sizes) raise via luaL_argerror; runtime failures return
 * `nil, "ENAME: message", "ENAME"`. Cancel and delete answer their contract
 * strings. The only exported symbol is luaopen_proctor_core.
 */

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/proctor.h"
#include "lua/compat.h"
#include "lua/module.h"

#define PR_ENGINE_MT "proctor.core.engine"
#define PR_MAX_POLL 65536

typedef struct {
  pr_engine_t *e;
} lengine_t;

/* ---- helpers ---------------------------------------------------------------- */

/* Push the failure tuple `nil, "ENAME: message[ detail]", "ENAME"`; returns 3. */
static int fail(lua_State *L, int err, const char *detail) {
  lua_pushnil(L);
  if (detail && *detail)
    lua_pushfstring(L, "%s: %s %s", pr_err_name(err), pr_strerror(err), detail);
  else lua_pushfstring(L, "%s: %s", pr_err_name(err), pr_strerror(err));
  lua_pushstring(L, pr_err_name(err));
  return 3;
}

static int fail_id(lua_State *L, int err, lua_Integer id) {
  char d[32];
  snprintf(d, sizeof(d), "%lld", (long long)id);
  return fail(L, err, err == PR_ENOENT || err == PR_ENOTRUNNING || err == PR_ESTDINCLOSED ? d : "");
}

/* `true`, or the failure tuple for rc. */
static int ok_or_fail(lua_State *L, int rc, lua_Integer id) {
  if (rc != 0) return fail_id(L, rc, id);
  lua_pushboolean(L, 1);
  return 1;
}

static lengine_t *check_engine(lua_State *L) {
  return (lengine_t *)luaL_checkudata(L, 1, PR_ENGINE_MT);
}

/* The engine, or NULL after close (the caller returns ECLOSED). */
static pr_engine_t *open_engine(lua_State *L) {
  lengine_t *le = check_engine(L);
  return le->e && !pr_engine_closed(le->e) ? le->e : NULL;
}

static lua_Integer check_id(lua_State *L, int i) {
  lua_Integer v = 0;
  if (!pr_tointeger(L, i, &v)) luaL_argerror(L, i, "execution id (integer) expected");
  return v;
}

static lua_Integer opt_nonneg(lua_State *L, int t, const char *key, lua_Integer def,
                              lua_Integer max) {
  lua_getfield(L, t, key);
  lua_Integer v = def;
  if (!lua_isnil(L, -1)) {
    if (!pr_tointeger(L, -1, &v) || v < 0 || v > max) {
      lua_pushfstring(L, "field '%s' must be an integer in [0, %f]", key, (double)max);
      luaL_argerror(L, t, lua_tostring(L, -1));
    }
  }
  lua_pop(L, 1);
  return v;
}

static int opt_bool(lua_State *L, int t, const char *key, int def) {
  lua_getfield(L, t, key);
  int v = def;
  if (!lua_isnil(L, -1)) {
    if (!lua_isboolean(L, -1)) {
      lua_pushfstring(L, "field '%s' must be a boolean", key);
      luaL_argerror(L, t, lua_tostring(L, -1));
    }
    v = lua_toboolean(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

/* A string field; the returned pointer stays valid while the table is alive
 * (it is anchored in the table). NULL when absent. */
static const char *opt_str(lua_State *L, int t, const char *key) {
  lua_getfield(L, t, key);
  const char *s = NULL;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING) {
      lua_pushfstring(L, "field '%s' must be a string", key);
      luaL_argerror(L, t, lua_tostring(L, -1));
    }
    size_t n;
    s = lua_tolstring(L, -1, &n);
    if (strlen(s) != n) {
      lua_pushfstring(L, "field '%s' must not contain NUL bytes", key);
      luaL_argerror(L, t, lua_tostring(L, -1));
    }
  }
  lua_pop(L, 1);
  return s;
}

static void check_table_keys(lua_State *L, int t, const char *const *known) {
  lua_pushnil(L);
  while (lua_next(L, t) != 0) {
    lua_pop(L, 1);
    if (lua_type(L, -1) != LUA_TSTRING) luaL_argerror(L, t, "option keys must be strings");
    const char *k = lua_tostring(L, -1);
    int ok = 0;
    for (const char *const *p = known; *p && !ok; p++) ok = strcmp(*p, k) == 0;
    if (!ok) {
      lua_pushfstring(L, "unknown option '%s'", k);
      luaL_argerror(L, t, lua_tostring(L, -1));
    }
  }
}

/* core.new options for the durable files (doc/proctor.txt, *proctor-history*). */
static void opt_files(lua_State *L, pr_engine_opts_t *o) {
  o->history_file = opt_str(L, 1, "history_file");
  o->audit_file = opt_str(L, 1, "audit_file");
  if ((o->history_file && !*o->history_file) || (o->audit_file && !*o->audit_file))
    luaL_argerror(L, 1, "'history_file' and 'audit_file' must be non-empty paths");
  o->history_output_bytes =
      (size_t)opt_nonneg(L, 1, "history_output_bytes", 0, (lua_Integer)1 << 30);
  o->audit_max_bytes = (uint64_t)opt_nonneg(L, 1, "audit_max_bytes", 0, (lua_Integer)1 << 50);
  o->audit_keep = (uint32_t)opt_nonneg(L, 1, "audit_keep", 0, 1000);
}

/* ---- module functions ----------------------------------------------------------- */

static const char *const new_keys[] = {"output_limit",
                                       "history_limit",
                                       "history_age_ms",
                                       "max_running",
                                       "kill_grace_ms",
                                       "drain_ms",
                                       "shepherd",
                                       "listen",
                                       "history_file",
                                       "history_output_bytes",
                                       "audit_file",
                                       "audit_max_bytes",
                                       "audit_keep",
                                       "max_queued",
                                       "ended_output_max",
                                       "secret_timeout_ms",
                                       "target_idle_ms",
                                       "output_memory",
                                       "spill_dir",
                                       "shepherd_early",
                                       NULL};

/* core.new([opts]) -> engine | nil, msg, name */
static int l_new(lua_State *L) {
  pr_engine_opts_t o = {0};
  if (!lua_isnoneornil(L, 1)) {
    luaL_checktype(L, 1, LUA_TTABLE);
    check_table_keys(L, 1, new_keys);
    o.output_limit = (size_t)opt_nonneg(L, 1, "output_limit", 0, (lua_Integer)1 << 40);
    o.output_memory = (size_t)opt_nonneg(L, 1, "output_memory", 0, (lua_Integer)1 << 40);
    o.spill_dir = opt_str(L, 1, "spill_dir");
    /* 0 keeps every record (the help's promise); absent: the default */
    lua_Integer hl = opt_nonneg(L, 1, "history_limit", -1, 100000000);
    o.history_limit = hl < 0 ? 0 : hl == 0 ? PR_HISTORY_ALL : (uint32_t)hl;
    o.history_age_ms = (uint64_t)opt_nonneg(L, 1, "history_age_ms", 0, (lua_Integer)1 << 50);
    o.max_running = (uint32_t)opt_nonneg(L, 1, "max_running", 0, 1000000);
    o.kill_grace_ms = (uint32_t)opt_nonneg(L, 1, "kill_grace_ms", 0, 3600000);
    o.drain_ms = (uint32_t)opt_nonneg(L, 1, "drain_ms", 0, 3600000);
    o.max_queued = (uint32_t)opt_nonneg(L, 1, "max_queued", 0, 100000000);
    o.ended_output_max = (uint64_t)opt_nonneg(L, 1, "ended_output_max", 0, (lua_Integer)1 << 50);
    o.secret_timeout_ms = (uint32_t)opt_nonneg(L, 1, "secret_timeout_ms", 0, 3600000);
    o.target_idle_ms = (uint32_t)opt_nonneg(L, 1, "target_idle_ms", 0, 86400000);
    o.shepherd_path = opt_str(L, 1, "shepherd");
    o.shepherd_early = opt_bool(L, 1, "shepherd_early", 0);
    o.listen = opt_str(L, 1, "listen");
    if (o.listen && (o.listen[0] == 0 || strlen(o.listen) > PR_LISTEN_MAX))
      luaL_argerror(L, 1, "'listen' must be a socket path of 1 to 107 bytes");
    opt_files(L, &o); /* history_file, audit_file and their limits */
  }
  lengine_t *le = (lengine_t *)pr_newuserdata(L, sizeof(*le));
  le->e = NULL;
  luaL_setmetatable(L, PR_ENGINE_MT);
  int rc = pr_engine_new(&o, &le->e);
  if (rc != 0) return fail(L, rc, NULL);
  return 1;
}

/* eng:start(spec[, {wake = false}]) -> id | nil, msg, name
 * wake = false: the engine thread is woken for it by the next eng:flush(),
 * poll(), wait() or other call (pr_engine_start_deferred). */
static int l_start(lua_State *L) {
  lengine_t *le = check_engine(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  int wake = 1;
  if (!lua_isnoneornil(L, 3)) {
    static const char *const keys[] = {"wake", NULL};
    luaL_checktype(L, 3, LUA_TTABLE);
    check_table_keys(L, 3, keys);
    wake = opt_bool(L, 3, "wake", 1);
  }
  pr_spec_read_t sr;
  int rc = pr_lua_read_spec(L, 2, &sr); /* raises on a bad spec */
  if (rc != 0) return fail(L, rc, NULL);
  if (le->e == NULL || pr_engine_closed(le->e)) return fail(L, PR_ECLOSED, NULL);
  uint64_t id;
  rc =
      wake ? pr_engine_start(le->e, &sr.spec, &id) : pr_engine_start_deferred(le->e, &sr.spec, &id);
  if (rc != 0)
    return fail(L, rc, rc == PR_EBUSY ? "(max_queued executions are queued or held)" : NULL);
  lua_pushinteger(L, (lua_Integer)id);
  return 1;
}

/* eng:cancel(id[, force | {force, reason}])
 *   -> "canceling" | "already_canceling" | "already_terminal" | "not_found"
 * `reason` (pr_reason_valid) is recorded instead of "canceled" when this call
 * decides the end (e.g. "dependency_failed"). */
static int l_cancel(lua_State *L) {
  pr_engine_t *e = open_engine(L);
  lua_Integer id = check_id(L, 2);
  int force = 0;
  const char *reason = NULL;
  if (!lua_isnoneornil(L, 3)) {
    if (lua_istable(L, 3)) {
      static const char *const keys[] = {"force", "reason", NULL};
      check_table_keys(L, 3, keys);
      force = opt_bool(L, 3, "force", 0);
      reason = opt_str(L, 3, "reason");
      if (reason && !pr_reason_valid(reason))
        luaL_argerror(L, 3, "'reason' must be 1 to 32 characters of a-z and '_'");
    } else if (lua_isboolean(L, 3)) force = lua_toboolean(L, 3);
    else luaL_argerror(L, 3, "boolean or {force = boolean, reason = string} expected");
  }
  if (e == NULL) return fail(L, PR_ECLOSED, NULL);
  lua_pushstring(L, pr_cancel_result_name(pr_engine_cancel(e, (uint64_t)id, 0, force, reason)));
  return 1;
}

/* eng:release(id) -> true | nil, msg, name: a `hold` execution takes its turn.
 * EINVAL: not held (any more); ENOTRUNNING: it ended while held. */
static int l_release(lua_State *L) {
  pr_engine_t *e = open_engine(L);
  lua_Integer id = check_id(L, 2);
  if (e == NULL) return fail(L, PR_ECLOSED, NULL);
  return ok_or_fail(L, id > 0 ? pr_engine_release(e, (uint64_t)id, 0) : PR_ENOENT, id);
}

/* eng:target(name, transport|nil [, cwd]) -> true | nil, msg, name: configure
 * target `name` (the only ones an RPC `start` may name); nil forgets it. */
static int l_target(lua_State *L) {
  pr_engine_t *e = open_engine(L);
  const char *name = luaL_checkstring(L, 2);
  const char *transport = luaL_optstring(L, 3, NULL);
  const char *cwd = luaL_optstring(L, 4, NULL);
  if (e == NULL) return fail(L, PR_ECLOSED, NULL);
  return ok_or_fail(L, pr_engine_target(e, name, transport, cwd), 0);
}

/* eng:hold_output(id, on) -> true | nil, msg, name: consumer back-pressure for
 * one execution (the engine stops reading it while on). Asynchronous. */
static int l_hold_output(lua_State *L) {
  pr_engine_t *e = open_engine(L);
  lua_Integer id = check_id(L, 2);
  luaL_checktype(L, 3, LUA_TBOOLEAN);
  int on = lua_toboolean(L, 3);
  if (e == NULL) return fail(L, PR_ECLOSED, NULL);
  return ok_or_fail(L, id > 0 ? pr_engine_hold_output(e, (uint64_t)id, on) : 0, id);
}

/* eng:delete(id) -> "deleted" | "active_process_conflict" | "not_found" */
static int l_delete(lua_State *L) {
  pr_engine_t *e = open_engine(L);
  lua_Integer id = check_id(L, 2);
  if (e == NULL) return fail(L, PR_ECLOSED, NULL);
  lua_pushstring(L, pr_delete_result_name(pr_engine_delete(e, (uint64_t)id, 0)));
  return 1;
}

/* eng:input(id, data) -> true | nil, msg, name */
static int l_input(lua_State *L) {
  pr_engine_t *e = open_engine(L);
  lua_Integer id = check_id(L, 2);
  size_t n;
  const char *data = luaL_checklstring(L, 3, &n);
  if (e == NULL) return fail(L, PR_ECLOSED, NULL);
  return ok_or_fail(L, pr_engine_input(e, (uint64_t)id, 0, data, n), id);
}

/* eng:close_stdin(id) -> true | nil, msg, name */
static int l_close_stdin(lua_State *L) {
  pr_engine_t *e = open_engine(L);
  lua_Integer id = check_id(L, 2);
  if (e == NULL) return fail(L, PR_ECLOSED, NULL);
  return ok_or_fail(L, pr_engine_close_stdin(e, (uint64_t)id, 0), id);
}

/* eng:resize(id, cols, rows) -> true | nil, msg, name */
static int l_resize(lua_State *L) {
  pr_engine_t *e = open_engine(L);
  lua_Integer id = check_id(L, 2);
  lua_Integer cols = luaL_checkinteger(L, 3), rows = luaL_checkinteger(L, 4);
  luaL_argcheck(L, cols > 0 && cols <= 65535, 3, "cols must be in [1, 65535]");
  luaL_argcheck(L, rows > 0 && rows <= 65535, 4, "rows must be in [1, 65535]");
  if (e == NULL) return fail(L, PR_ECLOSED, NULL);
  return ok_or_fail(L, pr_engine_resize(e, (uint64_t)id, 0, (uint16_t)cols, (uint16_t)rows), id);
}

/* eng:get(id) -> record | nil, msg, name */
static int l_get(lua_State *L) {
  pr_engine_t *e = open_engine(L);
  lua_Integer id = check_id(L, 2);
  if (e == NULL) return fail(L, PR_ECLOSED, NULL);
  pr_record_t *r;
  int rc = pr_engine_get(e, (uint64_t)id, 0, &r);
  if (rc != 0) return fail_id(L, rc, id);
  pr_lua_push_record(L, r);
  pr_record_free(r);
  return 1;
}

/* eng:list([{state = "running"}]) -> { record... } */
static int l_list(lua_State *L) {
  pr_engine_t *e = open_engine(L);
  int state = -1;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char *const keys[] = {"state", NULL};
    check_table_keys(L, 2, keys);
    const char *s = opt_str(L, 2, "state");
    if (s && (state = pr_state_from_name(s)) < 0) luaL_argerror(L, 2, "unknown state name");
  }
  if (e == NULL) return fail(L, PR_ECLOSED, NULL);
  pr_record_t **v;
  size_t n;
  int rc = pr_engine_list(e, 0, state, &v, &n);
  if (rc != 0) return fail(L, rc, NULL);
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    pr_lua_push_record(L, v[i]);
    lua_rawseti(L, -2, (int)i + 1);
  }
  pr_records_free(v, n);
  return 1;
}

/* eng:purge([{older_than_ms = N}]) -> count */
static int l_purge(lua_State *L) {
  pr_engine_t *e = open_engine(L);
  uint64_t older = 0;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char *const keys[] = {"older_than_ms", NULL};
    check_table_keys(L, 2, keys);
    older = (uint64_t)opt_nonneg(L, 2, "older_than_ms", 0, (lua_Integer)1 << 50);
  }
  if (e == NULL) return fail(L, PR_ECLOSED, NULL);
  size_t n;
  int rc = pr_engine_purge(e, 0, older, &n);
  if (rc != 0) return fail(L, rc, NULL);
  lua_pushinteger(L, (lua_Integer)n);
  return 1;
}

/* eng:read(id, stream[, from[, max]]) -> data, next_offset, missed, ring | nil, msg, name */
static int l_read(lua_State *L) {
  pr_engine_t *e = open_engine(L);
  lua_Integer id = check_id(L, 2);
  const char *sname = luaL_checkstring(L, 3);
  int stream = pr_stream_from_name(sname);
  if (stream < 0) return luaL_argerror(L, 3, "stream must be \"stdout\", \"stderr\" or \"pty\"");
  lua_Integer from = luaL_optinteger(L, 4, 0);
  lua_Integer max = luaL_optinteger(L, 5, (lua_Integer)1 << 30);
  luaL_argcheck(L, from >= 0, 4, "offset must be >= 0");
  luaL_argcheck(L, max >= 0, 5, "max must be >= 0");
  if (e == NULL) return fail(L, PR_ECLOSED, NULL);
  char *data;
  size_t len;
  uint64_t next, missed;
  pr_output_t *ring;
  int rc = pr_engine_read(e, (uint64_t)id, 0, stream, (uint64_t)from, (size_t)max, &data, &len,
                          &next, &missed, &ring);
  if (rc != 0) return fail_id(L, rc, id);
  int n = pr_lua_push_read(L, data, len, next, missed);
  pr_lua_push_ring(L, ring); /* the rest of the stream, read without this round trip */
  return n + 1;
}

/* eng:fd() -> integer (readable while events are pending) */
static int l_fd(lua_State *L) {
  lengine_t *le = check_engine(L);
  if (le->e == NULL) return fail(L, PR_ECLOSED, NULL);
  lua_pushinteger(L, pr_engine_fd(le->e));
  return 1;
}

static int push_events(lua_State *L, pr_engine_t *e, lua_Integer max, lua_Integer max_bytes) {
  size_t cap = max > 256 ? 256 : (size_t)max, got = 0;
  pr_event_t *buf[256];
  lua_newtable(L);
  while (got < (size_t)max) {
    size_t want = (size_t)max - got;
    if (want > cap) want = cap;
    size_t n = pr_engine_poll(e, buf, want, (size_t)max_bytes);
    for (size_t i = 0; i < n; i++) {
      pr_lua_push_event(L, buf[i]);
      pr_event_free(buf[i]);
      lua_rawseti(L, -2, (int)++got);
    }
    if (n < want) break;
  }
  return 1;
}

/* eng:poll([max[, max_bytes]]) -> { event... } (never blocks) */
static int l_poll(lua_State *L) {
  lengine_t *le = check_engine(L);
  lua_Integer max = luaL_optinteger(L, 2, 1024);
  lua_Integer max_bytes = luaL_optinteger(L, 3, 0);
  luaL_argcheck(L, max > 0 && max <= PR_MAX_POLL, 2, "max must be in [1, 65536]");
  luaL_argcheck(L, max_bytes >= 0, 3, "max_bytes must be >= 0 (0: no cap)");
  if (le->e == NULL) return fail(L, PR_ECLOSED, NULL);
  return push_events(L, le->e, max, max_bytes);
}

/* eng:wait([timeout_ms[, max[, max_bytes]]]) -> { event... }
 * (blocks until one is pending or timeout) */
static int l_wait(lua_State *L) {
  lengine_t *le = check_engine(L);
  lua_Integer t = luaL_optinteger(L, 2, -1);
  lua_Integer max = luaL_optinteger(L, 3, 1024);
  lua_Integer max_bytes = luaL_optinteger(L, 4, 0);
  luaL_argcheck(L, t >= -1 && t <= 0x7fffffff, 2, "timeout_ms must be >= 0 (or -1: forever)");
  luaL_argcheck(L, max > 0 && max <= PR_MAX_POLL, 3, "max must be in [1, 65536]");
  luaL_argcheck(L, max_bytes >= 0, 4, "max_bytes must be >= 0 (0: no cap)");
  if (le->e == NULL) return fail(L, PR_ECLOSED, NULL);
  if (!pr_engine_closed(le->e)) pr_engine_wait(le->e, (int)t); /* closed: what is left, no wait */
  return push_events(L, le->e, max, max_bytes);
}

/* eng:flush() -> true: wake the engine thread for the deferred starts
 * (eng:start(spec, {wake = false})) queued since its last wake-up. */
static int l_flush(lua_State *L) {
  lengine_t *le = check_engine(L);
  if (le->e && !pr_engine_closed(le->e)) pr_engine_flush(le->e);
  lua_pushboolean(L, 1);
  return 1;
}

/* eng:wakeups() -> integer: how many times the host woke the engine thread */
static int l_wakeups(lua_State *L) {
  lengine_t *le = check_engine(L);
  lua_pushinteger(L, le->e ? (lua_Integer)pr_engine_wakeups(le->e) : 0);
  return 1;
}

/* eng:state_records(on) -> the previous setting: on, every state event
 * carries its `record`, not only a terminal one (pr_engine_state_records). */
static int l_state_records(lua_State *L) {
  lengine_t *le = check_engine(L);
  luaL_checktype(L, 2, LUA_TBOOLEAN);
  lua_pushboolean(L, le->e ? pr_engine_state_records(le->e, lua_toboolean(L, 2)) : 0);
  return 1;
}

/* eng:address() -> the RPC socket path, or nil when not listening */
static int l_address(lua_State *L) {
  lengine_t *le = check_engine(L);
  const char *a = le->e ? pr_engine_address(le->e) : NULL;
  if (a == NULL || pr_engine_closed(le->e)) lua_pushnil(L);
  else lua_pushstring(L, a);
  return 1;
}

/* eng:close() — cancel everything, wait (bounded), stop. Idempotent. */
static int l_close(lua_State *L) {
  lengine_t *le = check_engine(L);
  if (le->e) pr_engine_close(le->e);
  return 0;
}

static int l_gc(lua_State *L) {
  lengine_t *le = check_engine(L);
  if (le->e) {
    pr_engine_free(le->e);
    le->e = NULL;
  }
  return 0;
}

/* eng:warnings() -> { message... }: what the history and audit files reported
 * (torn record skipped, file in use, disk behind...); each is returned once.
 * Waits while the history is still loading (eng:history_loading()). */
static int l_warnings(lua_State *L) {
  lengine_t *le = check_engine(L);
  char **v = NULL;
  size_t n = 0;
  if (le->e) pr_engine_warnings(le->e, &v, &n);
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_pushstring(L, v[i]);
    lua_rawseti(L, -2, (int)i + 1);
    free(v[i]);
  }
  free(v);
  return 1;
}

/* eng:history_loading() -> true while the engine thread still reads the history */
static int l_history_loading(lua_State *L) {
  lengine_t *le = check_engine(L);
  lua_pushboolean(L, le->e != NULL && pr_engine_history_loading(le->e));
  return 1;
}

static int l_closed(lua_State *L) {
  lengine_t *le = check_engine(L);
  lua_pushboolean(L, le->e == NULL || pr_engine_closed(le->e));
  return 1;
}

static int l_tostring(lua_State *L) {
  lengine_t *le = check_engine(L);
  lua_pushfstring(L, "proctor.engine (%s): %p",
                  le->e == NULL || pr_engine_closed(le->e) ? "closed" : "open", (void *)le);
  return 1;
}

/* core.hrtime() -> monotonic nanoseconds (like uv.hrtime) */
static int l_hrtime(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)pr_hrtime());
  return 1;
}

/* ---- supervised workers (doc/proctor.txt, *proctor-workers*) ----------------------- */

/* Worker requests: one verb set on every surface (request, cancel, restart;
 * RPC worker_request, worker_cancel, worker_restart). The names of before
 * (request, cancel_request, restart) stay as aliases (doc *proctor-workers*). */

/* eng:worker_request(id, payload[, {timeout_ms = N}]) -> rid | nil, msg, name */
static int l_worker_request(lua_State *L) {
  pr_engine_t *e = open_engine(L);
  lua_Integer id = check_id(L, 2);
  luaL_checkany(L, 3);
  uint64_t timeout = 0;
  if (!lua_isnoneornil(L, 4)) {
    static const char *const keys[] = {"timeout_ms", NULL};
    luaL_checktype(L, 4, LUA_TTABLE);
    check_table_keys(L, 4, keys);
    timeout = (uint64_t)opt_nonneg(L, 4, "timeout_ms", 0, (lua_Integer)1 << 40);
  }
  size_t len;
  const char *err = NULL;
  char *json = pr_lua_to_json(L, 3, &len, &err);
  if (json == NULL && err) return luaL_argerror(L, 3, err);
  if (e == NULL || json == NULL) {
    free(json);
    return fail(L, e == NULL ? PR_ECLOSED : PR_ENOMEM, NULL);
  }
  uint64_t rid;
  int rc = pr_engine_worker_request(e, id > 0 ? (uint64_t)id : 0, 0, json, len, timeout, &rid);
  free(json);
  if (rc != 0) return fail(L, rc, NULL);
  lua_pushinteger(L, (lua_Integer)rid);
  return 1;
}

/* eng:worker_cancel(rid) -> true | nil, msg, name */
static int l_worker_cancel(lua_State *L) {
  pr_engine_t *e = open_engine(L);
  lua_Integer rid = check_id(L, 2);
  if (e == NULL) return fail(L, PR_ECLOSED, NULL);
  int rc = rid > 0 ? pr_engine_worker_cancel(e, (uint64_t)rid, 0) : PR_ENOENT;
  if (rc != 0) {
    char d[48];
    snprintf(d, sizeof(d), "(request %lld)", (long long)rid);
    return fail(L, rc, rc == PR_ENOENT ? d : NULL);
  }
  lua_pushboolean(L, 1);
  return 1;
}

/* eng:worker_restart(id) -> true | nil, msg, name */
static int l_worker_restart(lua_State *L) {
  pr_engine_t *e = open_engine(L);
  lua_Integer id = check_id(L, 2);
  if (e == NULL) return fail(L, PR_ECLOSED, NULL);
  int rc = id > 0 ? pr_engine_worker_restart(e, (uint64_t)id, 0) : PR_ENOENT;
  if (rc != 0) return fail_id(L, rc, id);
  lua_pushboolean(L, 1);
  return 1;
}

static const luaL_Reg engine_methods[] = {{"start", l_start},
                                          {"cancel", l_cancel},
                                          {"delete", l_delete},
                                          {"input", l_input},
                                          {"close_stdin", l_close_stdin},
                                          {"resize", l_resize},
                                          {"get", l_get},
                                          {"list", l_list},
                                          {"purge", l_purge},
                                          {"read", l_read},
                                          {"fd", l_fd},
                                          {"poll", l_poll},
                                          {"wait", l_wait},
                                          {"close", l_close},
                                          {"closed", l_closed},
                                          {"address", l_address},
                                          {"warnings", l_warnings},
                                          {"worker_request", l_worker_request},
                                          {"worker_cancel", l_worker_cancel},
                                          {"worker_restart", l_worker_restart},
                                          /* the names of before, kept as aliases */
                                          {"request", l_worker_request},
                                          {"cancel_request", l_worker_cancel},
                                          {"restart", l_worker_restart},
                                          {"release", l_release},
                                          {"hold_output", l_hold_output},
                                          {"target", l_target},
                                          {"flush", l_flush},
                                          {"wakeups", l_wakeups},
                                          {"state_records", l_state_records},
                                          {"history_loading", l_history_loading},
                                          {NULL, NULL}};

__attribute__((visibility("default"))) int luaopen_proctor_core(lua_State *L) {
  if (luaL_newmetatable(L, PR_ENGINE_MT)) {
    lua_newtable(L);
    luaL_setfuncs(L, engine_methods, 0);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, l_gc);
    lua_setfield(L, -2, "__close");
    lua_pushcfunction(L, l_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
  pr_lua_output_open(L);
  lua_newtable(L);
  lua_pushcfunction(L, l_new);
  lua_setfield(L, -2, "new");
  lua_pushcfunction(L, l_hrtime);
  lua_setfield(L, -2, "hrtime");
  lua_pushstring(L, PR_VERSION);
  lua_setfield(L, -2, "version");
  pr_lua_push_fields(L, 0);
  lua_setfield(L, -2, "spec_fields");
  pr_lua_push_fields(L, 1);
  lua_setfield(L, -2, "worker_fields");
  pr_lua_overwrite_open(L);
  return 1;
}
