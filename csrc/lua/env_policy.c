/* lua/env_policy.c — a start spec's environment policy: `secrets` (values, or
 * sources read at spawn time) and `env_allow` (doc/proctor.txt,
 * *proctor-secrets*).
 *
 * Thread: host (the Lua state's thread).
 */
#include <string.h>

#include "lua/module.h"

/* Keep the value on top of the stack alive in the anchor table (pops it). */
static void anchor_top(lua_State *L, int anchor) {
  lua_rawseti(L, anchor, (int)pr_rawlen(L, anchor) + 1);
}

/* "k=v" as a Lua string kept alive in the anchor table; its bytes stay valid
 * while that table does. */
static const char *anchored_kv(lua_State *L, int anchor, const char *k, const char *v) {
  lua_pushfstring(L, "%s=%s", k, v);
  const char *s = lua_tostring(L, -1);
  anchor_top(L, anchor);
  return s;
}

/* A list of strings at index `at` (at least one), its block anchored. */
static const char **str_list(lua_State *L, int t, int at, int anchor, size_t *n, const char *what) {
  *n = pr_rawlen(L, at);
  if (*n == 0) luaL_argerror(L, t, what);
  const char **v = lua_newuserdata(L, *n * sizeof(char *));
  anchor_top(L, anchor);
  for (size_t i = 0; i < *n; i++) {
    lua_rawgeti(L, at, (int)i + 1);
    size_t l;
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &l) : NULL;
    if (s == NULL || strlen(s) != l) luaL_argerror(L, t, what);
    v[i] = s; /* anchored by the list, itself in the secrets table */
    lua_pop(L, 1);
  }
  return v;
}

/* secrets.NAME = { store = "secret-service", attributes = {k = v, ...} } or
 * { command = {"pass", "show", "x"} }: the table at index `at` into *src;
 * what must outlive the call is anchored in the table at `anchor`. */
static void source(lua_State *L, int t, int at, int anchor, pr_secret_source_t *src) {
  static const char bad[] = /* the RPC reader's text (rpc/params.c) */
      "'secrets' sources are {store = \"secret-service\", attributes = {key = value, ...}} or "
      "{command = [argv...]}";
  lua_pushnil(L);
  while (lua_next(L, at) != 0) {
    lua_pop(L, 1);
    const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
    if (strcmp(k, "store") && strcmp(k, "attributes") && strcmp(k, "command"))
      luaL_argerror(L, t, bad);
  }
  lua_getfield(L, at, "store");
  lua_getfield(L, at, "attributes");
  lua_getfield(L, at, "command");
  int has_store = !lua_isnil(L, -3), has_cmd = !lua_isnil(L, -1);
  if (has_store == has_cmd) luaL_argerror(L, t, bad);
  if (has_cmd) {
    if (!lua_istable(L, -1) || !lua_isnil(L, -2)) luaL_argerror(L, t, bad);
    src->command = str_list(L, t, lua_gettop(L), anchor, &src->ncommand,
                            "'secrets' command must be a non-empty list of strings");
  } else {
    if (lua_type(L, -3) != LUA_TSTRING || strcmp(lua_tostring(L, -3), "secret-service") != 0)
      luaL_argerror(L, t, "'secrets' store must be \"secret-service\"");
    if (!lua_istable(L, -2)) luaL_argerror(L, t, bad);
    src->store = lua_tostring(L, -3); /* anchored by the source table */
    int attrs = lua_gettop(L) - 1;
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, attrs) != 0) {
      lua_pop(L, 1);
      n++;
    }
    if (n == 0) luaL_argerror(L, t, "'secrets' attributes must not be empty");
    const char **v = lua_newuserdata(L, n * sizeof(char *));
    anchor_top(L, anchor);
    size_t i = 0;
    lua_pushnil(L);
    while (lua_next(L, attrs) != 0) {
      size_t kl, vl;
      if (lua_type(L, -2) != LUA_TSTRING || lua_type(L, -1) != LUA_TSTRING)
        luaL_argerror(L, t, "'secrets' attributes must map strings to strings");
      const char *ak = lua_tolstring(L, -2, &kl), *av = lua_tolstring(L, -1, &vl);
      if (kl == 0 || strlen(ak) != kl || strchr(ak, '=') || strlen(av) != vl)
        luaL_argerror(L, t, "'secrets' attribute names must be non-empty without '=' or NUL");
      v[i++] = anchored_kv(L, anchor, ak, av);
      lua_pop(L, 1);
    }
    src->attributes = v;
    src->nattributes = i;
  }
  lua_pop(L, 3);
}

void pr_lua_secrets(lua_State *L, int t, pr_spec_t *s) {
  lua_getfield(L, t, "secrets");
  if (!lua_isnil(L, -1)) {
    if (!lua_istable(L, -1)) luaL_argerror(L, t, "'secrets' must be a table of NAME = value");
    int st = lua_gettop(L);
    size_t n = 0;
    lua_pushnil(L);
    while (lua_next(L, st) != 0) {
      lua_pop(L, 1);
      n++;
    }
    const char **v = lua_newuserdata(L, (n ? n : 1) * sizeof(char *));
    pr_secret_source_t *src = lua_newuserdata(L, (n ? n : 1) * sizeof(*src));
    lua_newtable(L); /* anchors the "K=V" strings */
    int anchor = lua_gettop(L);
    size_t i = 0, ns = 0;
    lua_pushnil(L);
    while (lua_next(L, st) != 0) {
      size_t kl, vl;
      if (lua_type(L, -2) != LUA_TSTRING || (lua_type(L, -1) != LUA_TSTRING && !lua_istable(L, -1)))
        luaL_argerror(L, t, "'secrets' must map string names to string values or sources");
      const char *k = lua_tolstring(L, -2, &kl);
      if (kl == 0 || strlen(k) != kl || strchr(k, '='))
        luaL_argerror(L, t, "'secrets' names must be non-empty without '=' or NUL");
      if (lua_istable(L, -1)) { /* a source: read at spawn time */
        src[ns] = (pr_secret_source_t){.name = k};
        source(L, t, lua_gettop(L), anchor, &src[ns++]);
        lua_pop(L, 1);
        continue;
      }
      const char *val = lua_tolstring(L, -1, &vl);
      if (vl == 0 || strlen(val) != vl || vl > 4096)
        luaL_argerror(L, t, "'secrets' values must be 1 to 4096 bytes without NUL");
      for (size_t e = 0; e < s->envc; e++)
        if (strncmp(s->env[e], k, kl) == 0 && s->env[e][kl] == '=')
          luaL_argerror(L, t, "'secrets' names must not also be in 'env'");
      v[i++] = anchored_kv(L, anchor, k, val);
      lua_pop(L, 1);
    }
    s->secrets = v;
    s->nsecrets = i;
    s->sources = src;
    s->nsources = ns;
  }
}

void pr_lua_env_allow(lua_State *L, int t, pr_spec_t *s) {
  lua_getfield(L, t, "env_allow");
  if (!lua_isnil(L, -1)) {
    if (!lua_istable(L, -1)) luaL_argerror(L, t, "'env_allow' must be a list of names");
    int at = lua_gettop(L);
    size_t n = pr_rawlen(L, at);
    const char **v = lua_newuserdata(L, (n ? n : 1) * sizeof(char *));
    for (size_t i = 0; i < n; i++) {
      lua_rawgeti(L, at, (int)i + 1);
      size_t kl;
      const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &kl) : NULL;
      if (k == NULL || kl == 0 || strlen(k) != kl || strchr(k, '='))
        luaL_argerror(L, t, "'env_allow' entries must be non-empty names without '=' or NUL");
      v[i] = k; /* anchored by the env_allow table, itself on the stack */
      lua_pop(L, 1);
    }
    s->env_allow = v;
    s->nallow = n;
  }
}
