/* lua/spec.c — the Lua reader of a start spec: eng:start's table read by
 * pr_spec_fill (include/proctor.h, PR_SPEC_FIELDS), and the field lists
 * exported as core.spec_fields / core.worker_fields (lua/proctor/init.lua
 * checks run() specs against them; scripts/gendoc.lua writes the help's
 * table from them).
 *
 * Thread: host (the Lua state's thread).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "include/proctor.h"
#include "lua/module.h"

/* A map is a stack index (the spec table, or a table pushed by lmap). Strings
 * are anchored in their tables; what the structured fields build stays on the
 * stack until l_start returns. A structured field raises at once (luaL_argerror):
 * pr_spec_fill holds nothing to release. */
#define LIDX(m) ((int)(intptr_t)(m))

static pr_spec_kind_t lkind(pr_spec_reader_t *r, const void *m, const char *key) {
  lua_State *L = r->arg;
  luaL_checkstack(L, 4, "spec");
  lua_getfield(L, LIDX(m), key);
  pr_spec_kind_t k;
  lua_Integer v;
  switch (lua_type(L, -1)) {
  case LUA_TNIL: k = PR_SV_NONE; break;
  case LUA_TBOOLEAN: k = PR_SV_BOOL; break;
  case LUA_TNUMBER: k = pr_tointeger(L, -1, &v) ? PR_SV_INT : PR_SV_NUMBER; break;
  case LUA_TSTRING: k = PR_SV_STR; break;
  case LUA_TTABLE: k = pr_rawlen(L, -1) > 0 ? PR_SV_LIST : PR_SV_MAP; break;
  default: k = PR_SV_OTHER;
  }
  lua_pop(L, 1);
  return k;
}

static int lboolean(pr_spec_reader_t *r, const void *m, const char *key) {
  lua_State *L = r->arg;
  lua_getfield(L, LIDX(m), key);
  int b = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return b;
}

static int64_t linteger(pr_spec_reader_t *r, const void *m, const char *key) {
  lua_State *L = r->arg;
  lua_Integer v = 0;
  lua_getfield(L, LIDX(m), key);
  pr_tointeger(L, -1, &v);
  lua_pop(L, 1);
  return (int64_t)v;
}

/* The string stays valid while its table does (it is anchored there). */
static const char *lstring(pr_spec_reader_t *r, const void *m, const char *key, int *err) {
  lua_State *L = r->arg;
  size_t n;
  lua_getfield(L, LIDX(m), key);
  const char *s = lua_tolstring(L, -1, &n);
  lua_pop(L, 1);
  if (s && strlen(s) == n) return s;
  *err = PR_EINVAL;
  return NULL;
}

static const void *lmap(pr_spec_reader_t *r, const void *m, const char *key) {
  lua_State *L = r->arg;
  lua_getfield(L, LIDX(m), key); /* stays on the stack while the spec is read */
  return (const void *)(intptr_t)lua_gettop(L);
}

static const char *lunknown(pr_spec_reader_t *r, const void *m, const char *const *known, size_t nk,
                            char *buf, size_t len) {
  lua_State *L = r->arg;
  lua_pushnil(L);
  while (lua_next(L, LIDX(m)) != 0) {
    lua_pop(L, 1);
    const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    int ok = 0;
    for (size_t i = 0; k && i < nk && !ok; i++) ok = strcmp(known[i], k) == 0;
    if (!ok) {
      snprintf(buf, len, "%s", k ? k : "(not a string)");
      for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20) *p = '?';
      lua_pop(L, 1);
      return buf;
    }
  }
  return NULL;
}

/* cmd: a string for /bin/sh -c, or a list of strings (numbers are written out). */
static void lcmd(lua_State *L, int t, pr_spec_t *s) {
  lua_getfield(L, t, "cmd");
  int ct = lua_type(L, -1);
  if (ct == LUA_TSTRING) {
    size_t n;
    s->shell = lua_tolstring(L, -1, &n);
    if (n == 0 || strlen(s->shell) != n)
      luaL_argerror(L, t, "'cmd' must be a non-empty string without NUL bytes");
  } else if (ct == LUA_TTABLE) {
    size_t n = pr_rawlen(L, -1);
    if (n == 0) luaL_argerror(L, t, "'cmd' list must not be empty");
    if (n > 100000) luaL_argerror(L, t, "'cmd' list is too long");
    const char **argv = lua_newuserdata(L, n * sizeof(char *)); /* anchored on the stack */
    for (size_t i = 0; i < n; i++) {
      lua_rawgeti(L, -2, (int)i + 1);
      size_t len;
      if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
        luaL_argerror(L, t, "'cmd' entries must be strings without NUL bytes");
      argv[i] = lua_tolstring(L, -1, &len);
      if (strlen(argv[i]) != len)
        luaL_argerror(L, t, "'cmd' entries must be strings without NUL bytes");
      lua_rawseti(L, -3, (int)i + 1); /* keep the (possibly converted) string anchored */
    }
    s->argv = argv;
    s->argc = n;
  } else {
    luaL_argerror(L, t,
                  "'cmd' must be a string (run by /bin/sh -c) or a non-empty list of strings");
  }
  /* stack: ... cmd [argv ud] — stays until l_start returns */
}

/* env: NAME = value (strings or numbers) as "NAME=value" strings. The text is
 * the RPC reader's (rpc/params.c kv_list). */
#define PR_LUA_BAD_ENV "'env' must be a map of NAME = value (names without '=' or NUL)"

static void lenv(lua_State *L, int t, pr_spec_t *s) {
  lua_getfield(L, t, "env");
  if (lua_isnil(L, -1)) return;
  if (!lua_istable(L, -1)) luaL_argerror(L, t, PR_LUA_BAD_ENV);
  int et = lua_gettop(L);
  size_t n = 0;
  lua_pushnil(L);
  while (lua_next(L, et) != 0) {
    lua_pop(L, 1);
    n++;
  }
  const char **env = lua_newuserdata(L, (n ? n : 1) * sizeof(char *));
  lua_newtable(L); /* anchors the "K=V" strings */
  int anchor = lua_gettop(L);
  size_t i = 0;
  lua_pushnil(L);
  while (lua_next(L, et) != 0) {
    size_t kl, vl;
    if (lua_type(L, -2) != LUA_TSTRING) luaL_argerror(L, t, PR_LUA_BAD_ENV);
    if (lua_type(L, -1) != LUA_TSTRING && lua_type(L, -1) != LUA_TNUMBER)
      luaL_argerror(L, t, PR_LUA_BAD_ENV);
    const char *k = lua_tolstring(L, -2, &kl);
    lua_pushvalue(L, -1);
    const char *v = lua_tolstring(L, -1, &vl);
    lua_pop(L, 1);
    if (kl == 0 || strlen(k) != kl || strchr(k, '=') || strlen(v) != vl)
      luaL_argerror(L, t, PR_LUA_BAD_ENV);
    lua_pushfstring(L, "%s=%s", k, v);
    env[i] = lua_tostring(L, -1);
    lua_rawseti(L, anchor, (int)i + 1);
    i++;
    lua_pop(L, 1);
  }
  s->env = env;
  s->envc = i;
}

static int lstructured(pr_spec_reader_t *r, pr_spec_field_t f, struct pr_spec_read *out, char *err,
                       size_t n) {
  lua_State *L = r->arg;
  int t = LIDX(r->map);
  luaL_checkstack(L, 8, "spec");
  switch (f) {
  case PR_SF_CMD: lcmd(L, t, &out->spec); break;
  case PR_SF_ENV: lenv(L, t, &out->spec); break;
  case PR_SF_SECRETS: pr_lua_secrets(L, t, &out->spec); break;
  case PR_SF_ENV_ALLOW: pr_lua_env_allow(L, t, &out->spec); break;
  default: break;
  }
  return 0;
}

int pr_lua_read_spec(lua_State *L, int t, pr_spec_read_t *out) {
  pr_spec_reader_t r = {.arg = L,
                        .surface = PR_SPEC_LUA,
                        .map = (const void *)(intptr_t)t,
                        .kind = lkind,
                        .boolean = lboolean,
                        .integer = linteger,
                        .string = lstring,
                        .sub = lmap,
                        .unknown = lunknown,
                        .structured = lstructured};
  char err[256];
  int rc = pr_spec_fill(&r, out, err, sizeof(err));
  if (rc == PR_EINVAL) return luaL_argerror(L, t, err);
  return rc;
}

void pr_lua_push_fields(lua_State *L, int worker) {
  size_t n;
  const pr_spec_field_info_t *f = worker ? pr_worker_fields(&n) : pr_spec_fields(&n);
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_createtable(L, 0, 7);
    lua_pushstring(L, f[i].key);
    lua_setfield(L, -2, "key");
    lua_pushstring(L, pr_spec_type_name(f[i].type));
    lua_setfield(L, -2, "type");
    if (f[i].type == PR_ST_UINT || f[i].type == PR_ST_GRACE) {
      lua_pushinteger(L, (lua_Integer)f[i].max);
      lua_setfield(L, -2, "max");
    }
    if (f[i].type == PR_ST_ENUM) { /* the default and the values by name */
      const char *(*name)(int) =
          strcmp(f[i].key, "protocol") == 0 ? pr_worker_protocol_name : pr_worker_restart_name;
      lua_pushstring(L, name((int)f[i].def));
      lua_setfield(L, -2, "default");
      lua_newtable(L);
      for (int j = 0; name(j); j++) {
        lua_pushstring(L, name(j));
        lua_rawseti(L, -2, j + 1);
      }
      lua_setfield(L, -2, "values");
    } else if (f[i].type == PR_ST_BOOL) {
      lua_pushboolean(L, f[i].def != 0);
      lua_setfield(L, -2, "default");
    } else if (f[i].type == PR_ST_UINT || f[i].type == PR_ST_GRACE) {
      lua_pushinteger(L, (lua_Integer)f[i].def);
      lua_setfield(L, -2, "default");
    }
    lua_pushboolean(L, (f[i].surfaces & PR_SPEC_LUA) != 0);
    lua_setfield(L, -2, "lua");
    lua_pushboolean(L, (f[i].surfaces & PR_SPEC_RPC) != 0);
    lua_setfield(L, -2, "rpc");
    lua_pushstring(L, f[i].help);
    lua_setfield(L, -2, "help");
    lua_rawseti(L, -2, (int)i + 1);
  }
}
