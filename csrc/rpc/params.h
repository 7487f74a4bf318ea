/* rpc/params.h — one request being handled, and checking its parameters
 * (rpc/params.c); shared by rpc/methods.c and rpc/params.c only.
 *
 * Thread: engine.
 *
 * Every check returns 0, or an error code with q->msg saying what was wrong
 * ("bad argument #2 (cols): integer in [1, 65535] expected"). An absent or
 * nil optional parameter leaves its output untouched.
 */
#ifndef PR_RPC_PARAMS_H
#define PR_RPC_PARAMS_H

#include "rpc/conn.h"

/* A request (or client notification) being dispatched. */
typedef struct pr_rpc_req {
  pr_rpc_conn_t *c;
  pr_control_t *ctl;
  msgpack_packer *pk;         /* packs the result */
  msgpack_zone *zone;         /* the message's zone: copies of its strings live here */
  const msgpack_object *args; /* params[0..nargs) */
  uint32_t nargs;
  uint64_t msgid;
  int notify;    /* a notification: nobody is answered */
  char msg[192]; /* error detail; empty: the table message */
} pr_rpc_req_t;

/* pr_rpc_bad: PR_EINVAL with "bad argument #i+1 (name): what". */
int pr_rpc_bad(pr_rpc_req_t *q, uint32_t i, const char *name, const char *what);
/* pr_rpc_not_found: PR_ENOENT naming `id`. pr_rpc_fail_id: `rc`, naming `id`
 * when rc is ENOENT, ENOTRUNNING or ESTDINCLOSED (like the Lua core). */
int pr_rpc_not_found(pr_rpc_req_t *q, uint64_t id);
/* pr_rpc_not_yours: for a connection that said an identity (rpc/ident.c),
 * PR_EPERM with "execution N belongs to another agent (owner X)" when `id`
 * is another RPC session's execution; else 0 (the caller answers as it
 * would). The editor's own executions stay hidden. Engine thread. */
int pr_rpc_not_yours(pr_rpc_req_t *q, uint64_t id);
int pr_rpc_fail_id(pr_rpc_req_t *q, int rc, uint64_t id);

/* pr_rpc_arg: the i-th parameter, or NULL when absent or nil. */
const msgpack_object *pr_rpc_arg(const pr_rpc_req_t *q, uint32_t i);
/* pr_rpc_to_int: an integral number (floats too, when exact). 1 and *v, or 0. */
int pr_rpc_to_int(const msgpack_object *o, int64_t *v);
/* str and bin: pr_rpc_is_bytes says it is one, pr_rpc_bytes_of borrows it. */
int pr_rpc_is_bytes(const msgpack_object *o);
const char *pr_rpc_bytes_of(const msgpack_object *o, size_t *n);
/* pr_rpc_zstr: a NUL-terminated copy in the zone; NULL (and *err: PR_EINVAL,
 * PR_ENOMEM) when not str/bin, when it holds a NUL byte, or out of memory. */
char *pr_rpc_zstr(pr_rpc_req_t *q, const msgpack_object *o, int *err);
/* Parameter i as an execution id (ids <= 0 exist nowhere: *id = 0), a
 * boolean, an integer in [lo, hi], or an options map whose keys are all in
 * the NULL-terminated `known` (*out NULL when absent). */
int pr_rpc_arg_id(pr_rpc_req_t *q, uint32_t i, uint64_t *id);
int pr_rpc_arg_bool(pr_rpc_req_t *q, uint32_t i, const char *name, int *out);
int pr_rpc_arg_range(pr_rpc_req_t *q, uint32_t i, const char *name, int64_t lo, int64_t hi,
                     int64_t *out);
int pr_rpc_arg_map(pr_rpc_req_t *q, uint32_t i, const char *name, const char *const *known,
                   const msgpack_object **out);
/* pr_rpc_map_get: the value of `key` in map m (NULL m, absent or nil: NULL). */
const msgpack_object *pr_rpc_map_get(const msgpack_object *m, const char *key);
/* pr_rpc_spec_int: field `key` of map sp as an integer in [0, hi] (parameter 0). */
int pr_rpc_spec_int(pr_rpc_req_t *q, const msgpack_object *sp, const char *key, int64_t hi,
                    int64_t *out);
/* pr_rpc_key_text: a map key, printable, for an error message. */
const char *pr_rpc_key_text(const msgpack_object *k, char *buf, size_t n);

/* pr_rpc_read_spec: the start spec map `sp` through pr_spec_fill into *out
 * (strings in the request's zone). 0, PR_EINVAL with "bad argument #1 (spec):
 * ..." in q->msg (the text the Lua core gives for the same spec), or
 * PR_ENOMEM. */
int pr_rpc_read_spec(pr_rpc_req_t *q, const msgpack_object *sp, pr_spec_read_t *out);

#endif
