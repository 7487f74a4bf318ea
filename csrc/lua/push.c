/* lua/push.c — records and events as Lua tables.
 *
 * Thread: host (the Lua state's thread).
 *
 * A record table is made from the record's one description
 * (pr_record_fields, include/proctor.h): the same keys, in the same
 * presence, as the RPC map of rpc/pack.c.
 *
 * An output event that skipped bytes (`missed` > 0) carries its stream as
 * `ring`, a userdata holding a counted reference (pr_output_t): ring:read
 * copies what the ring still holds under the ring's own mutex, on this
 * thread, never waiting for the engine thread (eng:read does: it finds the
 * execution there). One userdata per ring while Lua holds it (a weak table
 * in the registry), so a flood's events share one; the last reference goes
 * with its __gc.
 */
#include <stdlib.h>

#include "include/proctor.h"
#include "lua/compat.h"
#include "lua/module.h"

#define PR_OUTPUT_MT "proctor.core.output"
#define PR_OUTPUTS "proctor.core.outputs" /* registry: lightuserdata ring -> its userdata (weak) */

typedef struct {
  pr_output_t *o; /* NULL once collected */
} loutput_t;

static void set_str(lua_State *L, const char *k, const char *v) {
  if (v == NULL) return;
  lua_pushstring(L, v);
  lua_setfield(L, -2, k);
}

static void set_int(lua_State *L, const char *k, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}

/* One field's value, the way the Lua core shows it (like the RPC map). */
static void push_value(lua_State *L, const pr_field_t *f) {
  const pr_record_t *r = f->r;
  char sb[32];
  switch (f->type) {
  case PR_FT_U64: lua_pushinteger(L, (lua_Integer)f->u); return;
  case PR_FT_I64: lua_pushinteger(L, (lua_Integer)f->i); return;
  case PR_FT_BOOL: lua_pushboolean(L, (int)f->i); return;
  case PR_FT_STR: lua_pushstring(L, f->s); return;
  case PR_FT_SIGNAL: lua_pushstring(L, pr_signal_name((int)f->i, sb, sizeof(sb))); return;
  case PR_FT_CMD:
    if (r->shell) {
      lua_pushstring(L, r->shell);
      return;
    }
    lua_createtable(L, (int)r->argc, 0);
    for (size_t i = 0; i < r->argc; i++) {
      lua_pushstring(L, r->argv && r->argv[i] ? r->argv[i] : "");
      lua_rawseti(L, -2, (int)i + 1);
    }
    return;
  case PR_FT_KEYS: {
    lua_createtable(L, (int)pr_record_nkeys(r), 0);
    size_t at = 0;
    int i = 0;
    for (const char *k; (k = pr_record_key_next(r, &at)) != NULL;) {
      lua_pushstring(L, k);
      lua_rawseti(L, -2, ++i);
    }
    return;
  }
  case PR_FT_STREAMS:
    lua_createtable(L, 0, pr_record_nstreams(r));
    for (int i = 0; i < PR_NSTREAM; i++) {
      if (!r->has_stream[i]) continue;
      lua_pushinteger(L, (lua_Integer)f->streams[i]);
      lua_setfield(L, -2, pr_stream_name(i));
    }
    return;
  }
  lua_pushnil(L);
}

void pr_lua_push_record(lua_State *L, const pr_record_t *r) {
  pr_field_t f[PR_RF_COUNT];
  size_t n = pr_record_fields(r, f);
  lua_createtable(L, 0, (int)n);
  for (size_t i = 0; i < n; i++) {
    push_value(L, &f[i]);
    lua_setfield(L, -2, f[i].key);
  }
}

static void push_worker_event(lua_State *L, const pr_event_t *ev);

/* ---- an output event's stream: ring:read ---------------------------------------------- */

/* ring:read(from[, max]) -> data, next_offset, missed | nil, msg, name */
static int l_output_read(lua_State *L) {
  loutput_t *u = luaL_checkudata(L, 1, PR_OUTPUT_MT);
  lua_Integer from = luaL_checkinteger(L, 2);
  lua_Integer max = luaL_optinteger(L, 3, (lua_Integer)1 << 30);
  luaL_argcheck(L, from >= 0, 2, "offset must be >= 0");
  luaL_argcheck(L, max >= 0, 3, "max must be >= 0");
  luaL_argcheck(L, u->o != NULL, 1, "output handle already released");
  char *data;
  size_t len;
  uint64_t next, missed;
  int rc = pr_output_read(u->o, (uint64_t)from, (size_t)max, &data, &len, &next, &missed);
  if (rc != 0) {
    lua_pushnil(L);
    lua_pushfstring(L, "%s: %s", pr_err_name(rc), pr_strerror(rc));
    lua_pushstring(L, pr_err_name(rc));
    return 3;
  }
  return pr_lua_push_read(L, data, len, next, missed);
}

int pr_lua_push_read(lua_State *L, char *data, size_t len, uint64_t next, uint64_t missed) {
  lua_pushlstring(L, data ? data : "", len);
  free(data);
  lua_pushinteger(L, (lua_Integer)next);
  lua_pushinteger(L, (lua_Integer)missed);
  return 3;
}

static int l_output_gc(lua_State *L) {
  loutput_t *u = luaL_checkudata(L, 1, PR_OUTPUT_MT);
  pr_output_release(u->o);
  u->o = NULL;
  return 0;
}

static int l_output_tostring(lua_State *L) {
  loutput_t *u = luaL_checkudata(L, 1, PR_OUTPUT_MT);
  lua_pushfstring(L, "proctor.output: %p", (void *)u->o);
  return 1;
}

void pr_lua_output_open(lua_State *L) {
  if (luaL_newmetatable(L, PR_OUTPUT_MT)) {
    lua_newtable(L);
    lua_pushcfunction(L, l_output_read);
    lua_setfield(L, -2, "read");
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_output_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, l_output_tostring);
    lua_setfield(L, -2, "__tostring");
  }
  lua_pop(L, 1);
  lua_newtable(L); /* the cache: a collected userdata leaves it before its __gc runs */
  lua_createtable(L, 0, 1);
  lua_pushstring(L, "v");
  lua_setfield(L, -2, "__mode");
  lua_setmetatable(L, -2);
  lua_setfield(L, LUA_REGISTRYINDEX, PR_OUTPUTS);
}

void pr_lua_push_ring(lua_State *L, pr_output_t *o) {
  if (o == NULL) {
    lua_pushnil(L);
    return;
  }
  lua_getfield(L, LUA_REGISTRYINDEX, PR_OUTPUTS);
  if (!lua_istable(L, -1)) { /* luaopen_proctor_core made it: never here */
    lua_pop(L, 1);
    pr_output_release(o);
    lua_pushnil(L);
    return;
  }
  lua_pushlightuserdata(L, o);
  lua_rawget(L, -2);
  if (lua_isuserdata(L, -1)) { /* already one: it holds its own reference */
    pr_output_release(o);
  } else {
    lua_pop(L, 1);
    loutput_t *u = pr_newuserdata(L, sizeof(*u));
    u->o = o;
    luaL_getmetatable(L, PR_OUTPUT_MT);
    lua_setmetatable(L, -2);
    lua_pushlightuserdata(L, o);
    lua_pushvalue(L, -2);
    lua_rawset(L, -4);
  }
  lua_remove(L, -2); /* the registry's table */
}

/* Set field `ring` of the event table on top: the one userdata of ev's ring. */
static void push_output(lua_State *L, const pr_event_t *ev) {
  pr_output_t *o = pr_event_output(ev);
  if (o == NULL) return;
  pr_lua_push_ring(L, o);
  lua_setfield(L, -2, "ring");
}

void pr_lua_push_event(lua_State *L, const pr_event_t *ev) {
  char sb[32];
  lua_createtable(L, 0, 8);
  set_int(L, "id", (lua_Integer)ev->id);
  if (ev->type >= PR_EV_WORKER) {
    push_worker_event(L, ev);
    return;
  }
  if (ev->type == PR_EV_OUTPUT) {
    set_str(L, "type", "output");
    set_str(L, "stream", pr_stream_name(ev->stream));
    lua_pushlstring(L, ev->data ? ev->data : "", ev->len);
    lua_setfield(L, -2, "data");
    set_int(L, "offset", (lua_Integer)ev->offset);
    set_int(L, "missed", (lua_Integer)ev->missed);
    if (ev->missed > 0) push_output(L, ev);
    return;
  }
  set_str(L, "type", "state");
  set_str(L, "state", pr_state_name(ev->state));
  if (ev->prev < PR_NSTATE) set_str(L, "prev", pr_state_name(ev->prev));
  set_str(L, "reason", ev->reason);
  set_str(L, "error", ev->error);
  if (pr_state_terminal(ev->state)) {
    if (ev->exit_code >= 0) set_int(L, "exit_code", ev->exit_code);
    if (ev->signal > 0) set_str(L, "signal", pr_signal_name(ev->signal, sb, sizeof(sb)));
  } else if (ev->pid > 0) {
    set_int(L, "pid", (lua_Integer)ev->pid);
  }
  if (ev->record) { /* a terminal event's, or any one's with eng:state_records(true) */
    pr_lua_push_record(L, ev->record);
    lua_setfield(L, -2, "record");
  }
}

static void push_worker_event(lua_State *L, const pr_event_t *ev) {
  if (ev->type == PR_EV_WORKER) {
    set_str(L, "type", "worker");
    set_str(L, "worker_state", pr_worker_state_name(ev->worker_state));
    set_int(L, "restarts", (lua_Integer)ev->restarts);
    return;
  }
  set_int(L, "rid", (lua_Integer)ev->rid);
  if (ev->missed) set_int(L, "missed", (lua_Integer)ev->missed);
  if (ev->type == PR_EV_CHUNK) {
    set_str(L, "type", "chunk");
    pr_lua_push_json(L, ev->data, ev->len);
    lua_setfield(L, -2, "data");
    return;
  }
  set_str(L, "type", "reply");
  int ok = ev->status == PR_RS_OK;
  lua_pushboolean(L, ok);
  lua_setfield(L, -2, "ok");
  set_str(L, "status", pr_reply_status_name(ev->status));
  if (ok) {
    pr_lua_push_json(L, ev->data, ev->len);
    lua_setfield(L, -2, "result");
  } else {
    lua_pushlstring(L, ev->data ? ev->data : "", ev->len);
    lua_setfield(L, -2, "error");
  }
}
