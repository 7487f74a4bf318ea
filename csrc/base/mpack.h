/* base/mpack.h — the one set of msgpack helpers: strings, key/value pairs,
 * and JSON <-> msgpack values (the engine's worker protocols and RPC
 * payloads, and proctor-mcp's client, csrc/mcp/rpc.c).
 *
 * Thread: any (they touch only their arguments).
 *
 * Every pack helper returns 0, or non-zero when msgpack-c failed to write (out
 * of memory): chain them with || and check once, like msgpack_pack_*.
 */
#ifndef PR_MPACK_H
#define PR_MPACK_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

#include "include/proctor.h"

int pr_mp_str(msgpack_packer *pk, const char *s);
int pr_mp_strn(msgpack_packer *pk, const char *s, size_t n);
int pr_mp_kv_str(msgpack_packer *pk, const char *k, const char *v);
int pr_mp_kv_int(msgpack_packer *pk, const char *k, int64_t v);
int pr_mp_kv_u64(msgpack_packer *pk, const char *k, uint64_t v);
int pr_mp_kv_bool(msgpack_packer *pk, const char *k, int v);

/* pr_mp_cmd: a record's command: r->shell as a str, else its r->argc argv
 * strings as an array (a NULL entry packs ""). */
int pr_mp_cmd(msgpack_packer *pk, const pr_record_t *r);

/* pr_mp_key_is: `o` is a str or bin equal to `name`. */
int pr_mp_key_is(const msgpack_object *o, const char *name);

/* pr_mp_to_cjson: a msgpack value as a new cJSON value (the caller deletes
 * it), or NULL when out of memory. str and bin become strings repaired to
 * valid UTF-8 (pr_utf8_clean: invalid bytes and NUL become U+FFFD); map keys
 * likewise, and keys of other types become their JSON text; nil and ext are
 * null; nesting beyond 64 levels is null.
 * pr_mp_to_json: the same value as JSON text (malloc'd, NUL-terminated,
 * length in *n), or NULL when out of memory. */
struct cJSON;
struct cJSON *pr_mp_to_cjson(const msgpack_object *o);
char *pr_mp_to_json(const msgpack_object *o, size_t *n);

/* pr_mp_to_cjson: the same value as a cJSON tree (cJSON_Delete), or NULL
 * when out of memory. */
struct cJSON;
struct cJSON *pr_mp_to_cjson(const msgpack_object *o);

/* pr_mp_pack_json: pack JSON text (`len` bytes; 0 = null) as a msgpack value.
 * Integral numbers within +-9.2e18 become integers. Returns 0, PR_EINVAL
 * (not JSON: nothing was packed) or PR_ENOMEM. */
int pr_mp_pack_json(msgpack_packer *pk, const char *json, size_t len);

/* pr_mp_pack_cjson: the same for a parsed cJSON value (NULL and invalid
 * values pack nil). Returns 0 or -1. */
int pr_mp_pack_cjson(msgpack_packer *pk, const struct cJSON *j);

#endif
