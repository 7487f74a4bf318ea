/* lua/json.c — Lua values <-> JSON text, for worker payloads, results and
 * chunks.
 *
 * Thread: host (the Lua state's thread).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lua/compat.h"
#include "lua/module.h"

/* Lua value -> JSON text, in two passes over the same value: the first only
 * counts the bytes (and finds what cannot be encoded), the second writes them
 * into one allocation of that size. No Lua stack slots are held by the
 * output, so encoding may push and pop freely; the value cannot change
 * between the passes (raw access only, nothing runs in between). */
typedef struct {
  char *p; /* NULL: counting */
  size_t n;
  const char *err;
} jbuf_t;

static void jb_add(jbuf_t *b, const char *s, size_t n) {
  if (b->err) return;
  if (b->p) memcpy(b->p + b->n, s, n);
  b->n += n;
}

static void jb_str(jbuf_t *b, const char *s, size_t n) {
  jb_add(b, "\"", 1);
  size_t run = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    jb_add(b, s + run, i - run);
    run = i + 1;
    char esc[8];
    switch (c) {
    case '"': jb_add(b, "\\\"", 2); break;
    case '\\': jb_add(b, "\\\\", 2); break;
    case '\n': jb_add(b, "\\n", 2); break;
    case '\r': jb_add(b, "\\r", 2); break;
    case '\t': jb_add(b, "\\t", 2); break;
    default: jb_add(b, esc, (size_t)snprintf(esc, sizeof(esc), "\\u%04x", c)); break;
    }
  }
  jb_add(b, s + run, n - run);
  jb_add(b, "\"", 1);
}

static void jb_num(jbuf_t *b, lua_State *L, int i) {
  char nb[40];
#if LUA_VERSION_NUM >= 503
  if (lua_isinteger(L, i)) {
    jb_add(b, nb, (size_t)snprintf(nb, sizeof(nb), "%lld", (long long)lua_tointeger(L, i)));
    return;
  }
#endif
  double d = (double)lua_tonumber(L, i);
  if (d != d || d > 1.7976931348623157e308 || d < -1.7976931348623157e308) {
    b->err = "cannot encode NaN or infinity";
    return;
  }
  if (d > -9007199254740992.0 && d < 9007199254740992.0 && (double)(long long)d == d)
    jb_add(b, nb, (size_t)snprintf(nb, sizeof(nb), "%lld", (long long)d));
  else jb_add(b, nb, (size_t)snprintf(nb, sizeof(nb), "%.17g", d));
}

static void jb_value(jbuf_t *b, lua_State *L, int i, int depth) {
  if (b->err) return;
  if (depth > 64) {
    b->err = "payload nested too deeply (or a cycle)";
    return;
  }
  if (i < 0) i = lua_gettop(L) + i + 1;
  switch (lua_type(L, i)) {
  case LUA_TNIL: jb_add(b, "null", 4); return;
  case LUA_TBOOLEAN: lua_toboolean(L, i) ? jb_add(b, "true", 4) : jb_add(b, "false", 5); return;
  case LUA_TNUMBER: jb_num(b, L, i); return;
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, i, &n);
    jb_str(b, s, n);
    return;
  }
  case LUA_TLIGHTUSERDATA: /* vim.NIL */
    if (lua_touserdata(L, i) == NULL) jb_add(b, "null", 4);
    else b->err = "cannot encode a userdata value";
    return;
  case LUA_TTABLE: break;
  default: b->err = "payload values must be nil, booleans, numbers, strings or tables"; return;
  }
  if (!lua_checkstack(L, 4)) {
    b->err = "payload nested too deeply";
    return;
  }
  size_t count = 0;
  int array = 1;
  lua_Number max = 0;
  lua_pushnil(L);
  while (lua_next(L, i) != 0) {
    lua_pop(L, 1);
    count++;
    if (array) {
      lua_Number k = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : 0;
      if (k < 1 || k != (lua_Number)(long long)k) array = 0;
      else if (k > max) max = k;
    }
  }
  if (count == 0) {
    jb_add(b, "{}", 2);
    return;
  }
  if (array && max == (lua_Number)count) {
    jb_add(b, "[", 1);
    for (size_t k = 1; k <= count && !b->err; k++) {
      if (k > 1) jb_add(b, ",", 1);
      lua_rawgeti(L, i, (int)k);
      jb_value(b, L, -1, depth + 1);
      lua_pop(L, 1);
    }
    jb_add(b, "]", 1);
    return;
  }
  jb_add(b, "{", 1);
  int first = 1;
  lua_pushnil(L);
  while (!b->err && lua_next(L, i) != 0) {
    if (!first) jb_add(b, ",", 1);
    first = 0;
    int kt = lua_type(L, -2);
    if (kt == LUA_TSTRING) {
      size_t n;
      const char *k = lua_tolstring(L, -2, &n);
      jb_str(b, k, n);
    } else if (kt == LUA_TNUMBER) {
      char num[48];
      jbuf_t kb = {num, 0, NULL};
      jb_num(&kb, L, -2);
      if (kb.err) b->err = kb.err;
      else jb_str(b, num, kb.n);
    } else {
      b->err = "table keys must be strings or numbers";
    }
    jb_add(b, ":", 1);
    jb_value(b, L, -1, depth + 1);
    lua_pop(L, 1);
  }
  if (b->err) lua_pop(L, 1); /* the key left by the interrupted lua_next */
  jb_add(b, "}", 1);
}

/* JSON text -> Lua value (cJSON). null is nil; integers within 2^53 are
 * integers. Text that does not parse is pushed as a string. */
static void push_cjson(lua_State *L, const cJSON *j, int depth) {
  luaL_checkstack(L, 4, "JSON value nested too deeply");
  if (cJSON_IsFalse(j) || cJSON_IsTrue(j)) {
    lua_pushboolean(L, cJSON_IsTrue(j));
  } else if (cJSON_IsNumber(j)) {
    double d = j->valuedouble;
    if (d > -9007199254740992.0 && d < 9007199254740992.0 && (double)(long long)d == d)
      lua_pushinteger(L, (lua_Integer)d);
    else lua_pushnumber(L, (lua_Number)d);
  } else if (cJSON_IsString(j)) {
    lua_pushstring(L, j->valuestring);
  } else if (cJSON_IsArray(j)) {
    lua_createtable(L, cJSON_GetArraySize(j), 0);
    int k = 1;
    for (const cJSON *c = j->child; c; c = c->next, k++) {
      push_cjson(L, c, depth + 1);
      lua_rawseti(L, -2, k);
    }
  } else if (cJSON_IsObject(j)) {
    lua_createtable(L, 0, cJSON_GetArraySize(j));
    for (const cJSON *c = j->child; c; c = c->next) {
      push_cjson(L, c, depth + 1);
      lua_setfield(L, -2, c->string ? c->string : "");
    }
  } else {
    lua_pushnil(L);
  }
}

void pr_lua_push_json(lua_State *L, const char *text, size_t len) {
  cJSON *j = text && len ? cJSON_ParseWithLength(text, len) : NULL;
  if (j == NULL) {
    if (text && len) lua_pushlstring(L, text, len);
    else lua_pushnil(L);
    return;
  }
  push_cjson(L, j, 0);
  cJSON_Delete(j);
}

char *pr_lua_to_json(lua_State *L, int i, size_t *len, const char **err) {
  jbuf_t b = {NULL, 0, NULL};
  *err = NULL;
  jb_value(&b, L, i, 0); /* counts */
  if (b.err) {
    *err = b.err;
    return NULL;
  }
  if ((b.p = malloc(b.n + 1)) == NULL) return NULL;
  *len = b.n;
  b.n = 0;
  jb_value(&b, L, i, 0); /* writes the same bytes */
  b.p[b.n] = 0;
  return b.p;
}
