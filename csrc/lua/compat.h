/* lua/compat.h — the few Lua C API differences between LuaJIT/5.1 and 5.4.
 *
 * Thread: host (only the lua/ files include it).
 */
#ifndef PR_COMPAT_H
#define PR_COMPAT_H

#include <lauxlib.h>
#include <lua.h>

#if LUA_VERSION_NUM < 502
#define pr_rawlen(L, i) lua_objlen((L), (i))
#else
#define pr_rawlen(L, i) lua_rawlen((L), (i))
#endif

#if LUA_VERSION_NUM >= 504
#define pr_newuserdata(L, n) lua_newuserdatauv((L), (n), 0)
#else
#define pr_newuserdata(L, n) lua_newuserdata((L), (n))
#endif

/* An integer-valued number (LuaJIT has only doubles). Returns 1 and *out. */
static inline int pr_tointeger(lua_State *L, int i, lua_Integer *out) {
  if (lua_type(L, i) != LUA_TNUMBER) return 0; /* no string coercion */
#if LUA_VERSION_NUM >= 503
  int ok = 0;
  *out = lua_tointegerx(L, i, &ok);
  return ok;
#else
  lua_Number n = lua_tonumber(L, i);
  if (n != n || n < -9007199254740992.0 || n > 9007199254740992.0 ||
      (lua_Number)(lua_Integer)n != n)
    return 0;
  *out = (lua_Integer)n;
  return 1;
#endif
}

#endif
