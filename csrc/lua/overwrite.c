/* lua/overwrite.c — the core's `overwrite_new` / `overwrite_feed`: the
 * console's redraw filter (include/proctor.h, base/overwrite.c) for the Lua layer.
 *
 * Thread: host (the Lua state's thread).
 *
 * lua/proctor/console/overwrite.lua is the model and the default; a console
 * state made with `overwrite_new()` is fed here instead when the core has it,
 * so a `\r` flood costs the main thread a C loop.
 */
#include <string.h>

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
/* The pieces the filter emits (parts of the text: none is copied until the
 * end). Not a luaL_Buffer: LuaJIT's adds a string a byte at a time, which
 * cost a 20 MB `seq` flood more than the filter saves. */
typedef struct {
  const char *p;
  size_t n;
} piece_t;

typedef struct {
  lua_State *L;
  piece_t fixed[16];
  piece_t *v; /* fixed, or a userdata on the stack when more came */
  size_t n, cap, total;
} feed_ctx_t;

static void emit(void *arg, const char *p, size_t n) {
  feed_ctx_t *c = arg;
  if (c->n == c->cap) { /* more room: a userdata (the collector frees it, a raise leaks nothing) */
    piece_t *v = lua_newuserdata(c->L, 2 * c->cap * sizeof(*v));
    memcpy(v, c->v, c->n * sizeof(*v));
    c->v = v;
    c->cap *= 2;
  }
  c->v[c->n++] = (piece_t){p, n};
  c->total += n;
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
    feed_ctx_t c = {.L = L, .cap = 16};
    c.v = c.fixed;
    pr_overwrite_feed(st, text, len, (size_t)first - 1, (size_t)last, (long)width, emit, &c);
    if (c.n == 1 && c.v[0].p == text && c.v[0].n == len) {
      lua_pushvalue(L, 2); /* nothing left out of all of it: the same string */
    } else if (c.n == 1) {
      lua_pushlstring(L, c.v[0].p, c.v[0].n);
    } else {
      char *out = lua_newuserdata(L, c.total ? c.total : 1);
      size_t o = 0;
      for (size_t k = 0; k < c.n; k++) {
        memcpy(out + o, c.v[k].p, c.v[k].n);
        o += c.v[k].n;
      }
      lua_pushlstring(L, out, o);
    }
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
