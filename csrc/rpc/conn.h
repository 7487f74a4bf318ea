/* rpc/conn.h — internal types and limits shared by the files of rpc/.
 *
 * Thread: engine. Only the rpc files include this header (and msgpack.h).
 *
 *   socket bytes ─► unpacker buffer ─► scan (framing + limits, in on_read)
 *        ─► pump (uv_idle, one turn per loop iteration while work is pending):
 *             dispatch ≤ PR_RPC_BATCH framed requests (rpc/methods.c)
 *             pull subscribed output from the rings while < PR_RPC_SENDQ unsent
 *             answer ready waits ─► one uv_write per turn (the request owns its bytes)
 */
#ifndef PR_RPC_CONN_H
#define PR_RPC_CONN_H

#include <msgpack.h>
#include <sys/types.h>

#include "base/idmap.h"
#include "base/mpscan.h"
#include "rpc/rpc.h"

/* Limits (doc/proctor.txt, *proctor-rpc-limits*). */
#define PR_RPC_MAX_MESSAGE (4u << 20) /* bytes in one incoming message */
#define PR_RPC_MAX_OBJECTS 65536      /* array/map entries declared by one message */
#define PR_RPC_MAX_DEPTH 16           /* nesting of arrays/maps in one message */
#define PR_RPC_MAX_CONNS 1024         /* connections at once; more are refused */
#define PR_RPC_CHUNK (256u << 10)     /* most output bytes in one notification */
#define PR_RPC_SENDQ (1u << 20)       /* stop pulling output while this much is unsent */
#define PR_RPC_SENDQ_HARD (8u << 20)  /* stop reading requests while this much is unsent */
#define PR_RPC_BACKLOG (256u << 10)   /* stop reading while this many framed bytes wait */
#define PR_RPC_BATCH 64               /* requests dispatched per connection per pump turn */
#define PR_RPC_READ_MAX (4u << 20)    /* most bytes one `read` answers with */
#define PR_RPC_NAME_MAX 128           /* bytes of a client name (hello) */
#define PR_RPC_MAX_ENDED 64           /* ended subscriptions holding their rings, per connection */
#define PR_RPC_MAX_WAITS 1024         /* pending `wait` requests per connection; more are EBUSY */
#define PR_RPC_REPLY_SMALL 4096       /* a worker reply this small is sent whatever is unsent */
#define PR_RPC_IDENT_MAX 256          /* bytes of an owner identity (hello) */
#define PR_RPC_MAX_IDENTS 256         /* identities the server remembers (rpc/ident.c) */
#define PR_RPC_SWEEP_MAX 4096 /* directory entries a start looks at for dead editors' sockets */

typedef struct pr_rpc_ident pr_rpc_ident_t; /* rpc/ident.c */

/* A connection's subscription to one execution (at most one per id: only its
 * owner session may subscribe). Holds ring references, so output can still
 * be sent after the execution was deleted. */
typedef struct pr_rpc_sub {
  pr_queue_t cnode; /* conn->subs */
  pr_queue_t dnode; /* conn->dirty while there is something to send */
  pr_rpc_conn_t *conn;
  uint64_t id;
  pr_ring_t *ring[PR_NSTREAM]; /* NULL for streams the execution does not have */
  uint64_t off[PR_NSTREAM];    /* next absolute offset to send, per stream */
  uint64_t end[PR_NSTREAM];    /* rings released early (see pr_rpc_sub_release): their tail */
  msgpack_sbuffer states;      /* packed non-terminal state notifications, unsent */
  msgpack_sbuffer final;       /* packed terminal state notification, once ended */
  int ended;                   /* `final` is filled: send after the output, then drop */
} pr_rpc_sub_t;

/* A pending `wait` request. */
typedef struct pr_rpc_wait {
  pr_queue_t cnode; /* conn->waits */
  uv_timer_t timer; /* valid while timer_open */
  int timer_open;
  pr_rpc_conn_t *conn;
  uint64_t id, msgid;
  pr_record_t *rec; /* the terminal record, once the execution ended */
  int timed_out;
  int on_output;             /* wait's `output`: also answer at the first output past `after` */
  int64_t after[PR_NSTREAM]; /* per stream: bytes the client has seen (-1: not watched) */
  int woke;                  /* output past `after` arrived: answer with the record as it is */
} pr_rpc_wait_t;

struct pr_rpc_conn {
  uv_pipe_t pipe;   /* unused by virtual connections */
  pr_queue_t node;  /* srv->conns */
  pr_queue_t pnode; /* srv->pending while `pending` */
  pr_rpc_t *srv;
  uint64_t session;                 /* > 0, never reused by an engine */
  char name[PR_RPC_NAME_MAX + 1];   /* owner label of its executions */
  char ident[PR_RPC_IDENT_MAX + 1]; /* the identity said in hello ("": none) */
  int started;                      /* it started an execution (its session is fixed) */
  int handles;                      /* open libuv handles (pipe, wait timers); freed at 0 */
  int virt;                         /* no socket: output goes to sink */
  int held;                         /* a virtual connection's feeder still holds it */
  void (*sink)(void *, const char *, size_t);
  void *sink_arg;
  int pending, reading, closing, eof, sub_all;
  int bad;           /* PR_E*: close after answering what is framed */
  int64_t bad_msgid; /* the msgid an ETOOBIG answer goes to, -1 none */
  msgpack_unpacker up;
  int up_init;
  pr_mp_scan_t scan;
  size_t scan_lead;       /* bytes from up.off already framed */
  unsigned ready;         /* complete messages framed, not yet dispatched */
  int close_when_flushed; /* EOF seen and everything answered: close once written */
  msgpack_sbuffer out;    /* packed, not yet handed to uv_write */
  msgpack_packer pk;      /* packs into `out` */
  msgpack_sbuffer resp;   /* the response being built by a method (rpc/methods.c) */
  msgpack_packer rpk;     /* packs into `resp` */
  size_t queued;          /* bytes in uv_write requests not yet completed */
  pr_queue_t subs, dirty, waits;
  unsigned nready_waits; /* waits that may be answerable */
  unsigned nwaits;       /* waits pending on this connection (at most PR_RPC_MAX_WAITS) */
  unsigned nout_waits;   /* of them, those with `output` (<= nwaits): output walks only then */
  unsigned nended;       /* subscriptions whose execution ended, not yet flushed */
  uint64_t *kod;         /* kill_on_disconnect ids */
  size_t nkod, capkod;
};

struct pr_rpc {
  pr_control_t *ctl;       /* the engine's commands, registry and loop */
  char *const *env;        /* the environment RPC starts inherit */
  pr_listener_t listener;  /* what the engine tells the server */
  uv_pipe_t listener_pipe; /* the listening socket */
  int listening;
  uv_idle_t idle; /* runs the pump while `pending` is not empty */
  int idle_on;
  int handles; /* open libuv handles of the server; freed at 0 */
  pr_queue_t conns, pending;
  size_t nconns;
  uint64_t next_session;
  size_t nwaits;     /* pending waits over all connections */
  size_t nout_waits; /* of them, those with `output` (<= nwaits) */
  pr_idmap_t subs; /* execution id -> its subscription (one per id: only its session subscribes) */
  char *path;      /* socket path (NULL: no socket) */
  dev_t dev;       /* identity of the socket file we bound */
  ino_t ino;
  uint64_t refused;       /* connections refused (other uid, too many) */
  pr_rpc_ident_t *idents; /* identity -> session (at most PR_RPC_MAX_IDENTS) */
  size_t nidents, capidents;
};

/* ---- rpc/ident.c ------------------------------------------------------------------------ */

/* pr_rpc_ident_join: `c` says owner identity `ident` (1 to PR_RPC_IDENT_MAX
 * bytes): it takes the session of the connections that said it before, or
 * its own session becomes the identity's. Returns 0; PR_EINVAL when `c`
 * already started an execution in another session; PR_EBUSY when
 * PR_RPC_MAX_IDENTS identities are in use; PR_ENOMEM. `msg` says why. Engine thread. */
int pr_rpc_ident_join(pr_rpc_conn_t *c, const char *ident, char *msg, size_t msglen);
/* pr_rpc_session_shared: 1 when another live connection has c's session. */
int pr_rpc_session_shared(pr_rpc_conn_t *c);
/* pr_rpc_ident_free: forget every identity (the server is freed). */
void pr_rpc_ident_free(pr_rpc_t *srv);

/* ---- rpc/server.c -------------------------------------------------------------------- */

/* pr_rpc_kick: schedule a pump turn for `c` (no-op while closing). */
void pr_rpc_kick(pr_rpc_conn_t *c);

/* pr_rpc_conn_new: a connection object in its "closed but valid" state with
 * a fresh session; linked into srv->conns. NULL when out of memory. */
pr_rpc_conn_t *pr_rpc_conn_new(pr_rpc_t *srv);

/* pr_rpc_conn_unref: one of its handles closed (frees when it was the last). */
void pr_rpc_conn_unref(pr_rpc_conn_t *c);

/* pr_rpc_conn_close: disconnect: drop subscriptions and waits, cancel
 * kill_on_disconnect executions, close handles; freed when the last closes. */
void pr_rpc_conn_close(pr_rpc_conn_t *c);

/* ---- rpc/conn.c (framing: base/mpscan.c) ---------------------------------------------------- */

/* pr_rpc_conn_init: unpacker and buffers. Returns 0 or PR_ENOMEM. */
int pr_rpc_conn_init(pr_rpc_conn_t *c);

/* pr_rpc_conn_destroy: free what pr_rpc_conn_init and the pump allocated
 * (subscriptions must be gone). */
void pr_rpc_conn_destroy(pr_rpc_conn_t *c);

/* pr_rpc_conn_start_read: begin reading the socket (accepted connections). */
int pr_rpc_conn_start_read(pr_rpc_conn_t *c);

/* pr_rpc_conn_received: `n` bytes were appended to the unpacker buffer:
 * frame them, flag protocol errors, apply read back-pressure, kick. */
void pr_rpc_conn_received(pr_rpc_conn_t *c, size_t n);

/* pr_rpc_conn_pump: one turn of work for `c` (see the diagram above).
 * Returns 1 when more work is ready for another turn. */
int pr_rpc_conn_pump(pr_rpc_conn_t *c);

/* pr_rpc_conn_flush: hand `out` to the socket (or the sink). */
void pr_rpc_conn_flush(pr_rpc_conn_t *c);

/* Subscriptions (rpc/conn.c). */
pr_rpc_sub_t *pr_rpc_sub_find(pr_rpc_t *srv, uint64_t id);
pr_rpc_sub_t *pr_rpc_sub_new(pr_rpc_conn_t *c, pr_exec_t *x);
void pr_rpc_sub_free(pr_rpc_sub_t *s);
void pr_rpc_sub_dirty(pr_rpc_sub_t *s);

/* pr_rpc_sub_ended: the execution of `s` ended (its terminal notification is
 * in s->final). Past PR_RPC_MAX_ENDED such subscriptions on one connection
 * (a client that does not read while its executions end), this one lets go
 * of its rings: what it had not sent yet is reported as `missed`. Bounds
 * what a stalled client pins beyond the engine's own history. */
void pr_rpc_sub_ended(pr_rpc_sub_t *s);

/* Waits (rpc/conn.c). pr_rpc_wait_new: a wait on `id` answered to `msgid`,
 * timing out after timeout_ms (< 0: never), and, when `after` is not NULL,
 * also at the first output past after[] (PR_NSTREAM counts, -1: a stream not
 * watched; copied); linked into c->waits and counted in nwaits, and in
 * nout_waits when it watches output. NULL when out of memory.
 * pr_rpc_wait_drop: unlink, uncount and free it. Engine thread. */
pr_rpc_wait_t *pr_rpc_wait_new(pr_rpc_conn_t *c, uint64_t id, uint64_t msgid, int64_t timeout_ms,
                               const int64_t *after);
void pr_rpc_wait_drop(pr_rpc_wait_t *w);

/* ---- rpc/methods.c and rpc/pack.c ---------------------------------------------------- */

/* pr_rpc_dispatch: handle one decoded message on `c`: a request gets exactly
 * one response (now, or later for `wait`), a notification none. Returns 0, or
 * PR_EPROTO when the message is not msgpack-rpc at all (the caller closes). */
int pr_rpc_dispatch(pr_rpc_conn_t *c, const msgpack_object *msg, msgpack_zone *zone);

/* pr_rpc_pack_state: a `state` notification (st->prev PR_NSTATE: none).
 * Returns 0 or -1 (out of memory; the buffer may hold a partial message). */
int pr_rpc_pack_state(msgpack_packer *pk, const pr_state_info_t *st);

/* pr_rpc_pack_worker: a `worker_chunk` (reply 0) or `worker_reply` (reply 1)
 * notification. Returns 0 or -1. */
int pr_rpc_pack_worker(msgpack_packer *pk, int reply, const pr_wmsg_t *m);

/* pr_rpc_pack_output: an `output` notification. Returns 0 or -1. */
int pr_rpc_pack_output(msgpack_packer *pk, uint64_t id, int stream, const char *data, size_t len,
                       uint64_t offset, uint64_t missed);

/* pr_rpc_pack_record: a record map like the Lua core's. Returns 0 or -1. */
int pr_rpc_pack_record(msgpack_packer *pk, const pr_record_t *r);

/* pr_rpc_pack_response_head: [1, msgid, nil, ...] (the result follows). */
int pr_rpc_pack_response_head(msgpack_packer *pk, uint64_t msgid);

/* pr_rpc_pack_error_response: [1, msgid, [name, message], nil]. Returns 0 or -1. */
int pr_rpc_pack_error_response(msgpack_packer *pk, uint64_t msgid, int err, const char *msg);

/* pr_rpc_wait_grew: 1 when a stream of x that after[] watches (>= 0) holds
 * more bytes in all than after[] says, else 0 (methods.c). Engine thread. */
int pr_rpc_wait_grew(const pr_exec_t *x, const int64_t after[PR_NSTREAM]);

/* pr_rpc_answer_wait: pack the response of a finished, timed-out or woken wait. */
void pr_rpc_answer_wait(pr_rpc_conn_t *c, pr_rpc_wait_t *w);

#endif
