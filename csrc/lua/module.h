/* lua/module.h — what the files of the proctor.core module share.
 *
 * Thread: host (the Lua state's thread).
 */
#ifndef PR_LUA_MODULE_H
#define PR_LUA_MODULE_H

#include <stddef.h>

#include "include/proctor.h"
#include "lua/compat.h"

/* pr_lua_push_record / pr_lua_push_event: push a record / an event as a new
 * table (push.c). */
void pr_lua_push_record(lua_State *L, const pr_record_t *r);
void pr_lua_push_event(lua_State *L, const pr_event_t *ev);

/* pr_lua_output_open: register the metatable of an output event's `ring`
 * (ring:read, push.c) and its registry cache; call once from luaopen. */
void pr_lua_output_open(lua_State *L);

/* pr_lua_overwrite_open: register the console's redraw filter's metatable and
 * set `overwrite_new` and `overwrite_feed` in the module table on the stack's
 * top; call once from luaopen (overwrite.c). */
void pr_lua_overwrite_open(lua_State *L);

/* pr_lua_push_read: what a read of a ring returns to Lua (eng:read,
 * ring:read): data (freed here; NULL is ""), the next offset, the bytes
 * missed before it. Returns 3, the number of values pushed (push.c). */
int pr_lua_push_read(lua_State *L, char *data, size_t len, uint64_t next, uint64_t missed);

/* pr_lua_push_ring: push the one `ring` userdata of output stream o (made on
 * first use, then shared while it lives), taking over the caller's reference
 * (pr_event_output, pr_engine_read); nil when o is NULL. Host thread. */
void pr_lua_push_ring(lua_State *L, pr_output_t *o);

/* pr_lua_to_json: the value at index i as JSON text (malloc'd, NUL-terminated,
 * *len bytes). NULL with *err set when it cannot be encoded (a NaN, a
 * function, a cycle...), NULL with *err NULL when out of memory. Raw access
 * only: no metamethod runs (json.c). */
char *pr_lua_to_json(lua_State *L, int i, size_t *len, const char **err);

/* pr_lua_push_json: JSON text as a Lua value (null is nil; integers within
 * 2^53 are integers); text that does not parse is pushed as a string, none as
 * nil (json.c). */
void pr_lua_push_json(lua_State *L, const char *text, size_t len);

/* pr_lua_read_spec: the start table at index t through pr_spec_fill into
 * *out (what it points to stays anchored in the table or on the stack until
 * the caller returns). Raises on a bad spec (luaL_argerror: the field named,
 * what it must be, what it was); returns 0 or PR_ENOMEM (spec.c). */
int pr_lua_read_spec(lua_State *L, int t, pr_spec_read_t *out);

/* pr_lua_push_fields: PR_SPEC_FIELDS (worker 0) or PR_WORKER_FIELDS (1) as a
 * list of { key, type, default?, max?, values?, lua, rpc, help } (spec.c). */
void pr_lua_push_fields(lua_State *L, int worker);

/* pr_lua_secrets, pr_lua_env_allow: the `secrets` (values and sources; after
 * `env`, which secrets' names must not repeat) and the `env_allow` of the
 * start table at index t into s, for the Lua reader of pr_spec_fill; what s
 * points to stays anchored in values left on the stack. Raise on a malformed
 * value (env_policy.c). */
void pr_lua_secrets(lua_State *L, int t, pr_spec_t *s);
void pr_lua_env_allow(lua_State *L, int t, pr_spec_t *s);

#endif
