/* lua/overwrite.c — the core's `overwrite_new` / `overwrite_feed`: the
 * console's redraw filter (include/proctor.h, base/overwrite.c) for the Lua layer.
 *
 * Thread: host (the Lua state's thread).
 *
 * lua/proctor/console/overwrite.lua is the model and the default; a console
 * state made with `overwrite_new()` is fed here instead when the core has it,
 * so a `\r` flood costs the main thread a C loop.
 */
#include "lua/compat.h"
#include "lua/module.h"

#define PR_OVERWRITE_MT "proctor.core.overwrite"

static int l_ow_gc(lua_State *L) {
  pr_overwrite_t *st = luaL_checkudata(L, 1, PR_OVERWRITE_MT);
  pr_overwrite_free(st);
  return 0;
}

/* core.overwrite_new() -> state: what a new terminal's parser is in. */
static int l_ow_new(lua_State *L) {
  pr_overwrite_t *st = lua_newuserdata(L, sizeof(*st));
  pr_overwrite_init(st);
  luaL_setmetatable(L, PR_OVERWRITE_MT);
  return 1;
}

/* core.overwrite_feed(state, text[, width[, first[, last]]]) -> kept, dropped, unsafe
 * The model's feed(): bytes first..last of text (1-based, inclusive; default
 * all of it) through state; kept: what the terminal gets (those bytes, or
 * them with overwritten redraws left out when width, the terminal's columns,
 * allows; nil or < 2: every byte); dropped: bytes left out so far by this
 * state; unsafe: leaving out is off for good. */
typedef struct {
  luaL_Buffer b;
  const char *text;
  size_t len;
  int whole; /* the one piece is the whole string: pushed as it is, not copied */
} feed_ctx_t;

static void emit(void *arg, const char *p, size_t n) {
  feed_ctx_t *c = arg;
  if (p == c->text && n == c->len) {
    c->whole = 1;
    return;
  }
  luaL_addlstring(&c->b, p, n);
}

static int l_ow_feed(lua_State *L) {
  pr_overwrite_t *st = luaL_checkudata(L, 1, PR_OVERWRITE_MT);
  size_t len;
  const char *text = luaL_checklstring(L, 2, &len);
  lua_Integer width = luaL_optinteger(L, 3, 0);
  lua_Integer first = luaL_optinteger(L, 4, 1), last = luaL_optinteger(L, 5, (lua_Integer)len);
  if (first < 1) first = 1;
  if (last > (lua_Integer)len) last = (lua_Integer)len;
  if (last < first) {
    lua_pushliteral(L, "");
  } else {
    feed_ctx_t c = {.text = text, .len = len};
    luaL_buffinit(L, &c.b);
    pr_overwrite_feed(st, text, len, (size_t)first - 1, (size_t)last, (long)width, emit, &c);
    if (c.whole) lua_pushvalue(L, 2); /* nothing left out of all of it: the same string */
    else luaL_pushresult(&c.b);
  }
  lua_pushnumber(L, (lua_Number)st->dropped);
  lua_pushboolean(L, st->unsafe);
  return 3;
}

void pr_lua_overwrite_open(lua_State *L) {
  if (luaL_newmetatable(L, PR_OVERWRITE_MT)) {
    lua_pushcfunction(L, l_ow_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  lua_pushcfunction(L, l_ow_new);
  lua_setfield(L, -2, "overwrite_new");
  lua_pushcfunction(L, l_ow_feed);
  lua_setfield(L, -2, "overwrite_feed");
}
