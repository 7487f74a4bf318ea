/* fuzz_rpc.c — libFuzzer target over the RPC decoder and dispatcher.
 *
 * Thread: the fuzzer's thread submits each input to the engine thread with
 * pr_test_call; there it is fed to a virtual connection (no socket) in
 * chunks whose sizes come from the input, so framing resumes at every
 * possible cut. Every byte the server answers with must decode as complete
 * msgpack-rpc responses or notifications, or the run aborts.
 *
 * The engine's shepherd path does not exist: `start` requests are accepted,
 * validated and registered, and fail to spawn — nothing is ever executed.
 *
 *   make fuzz                      libFuzzer for FUZZ_SECONDS
 *   build/fuzz_rpc FILE...         replay inputs (make test does this over the saved corpus)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "include/proctor_test.h"

static pr_engine_t *eng;

typedef struct {
  const uint8_t *d;
  size_t n;
} input_t;

/* What pending_waits learns from the answers: the id its start got (the
 * response to msgid 1), and how many other responses came. */
typedef struct {
  uint64_t id;
  int others;
} seen_t;

/* The output oracle: whole, well-formed [1, msgid, err, res] / [2, name, params].
 * With arg (a seen_t *): what pending_waits learns. */
static void sink(void *arg, const char *p, size_t n) {
  size_t off = 0;
  while (off < n) {
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    if (msgpack_unpack_next(&u, p, n, &off) != MSGPACK_UNPACK_SUCCESS) abort();
    const msgpack_object *o = &u.data;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size < 3) abort();
    uint64_t t = o->via.array.ptr[0].via.u64;
    if (!((t == 1 && o->via.array.size == 4) || (t == 2 && o->via.array.size == 3))) abort();
    seen_t *seen = arg;
    if (seen && t == 1 && o->via.array.ptr[1].via.u64 != 1) seen->others++;
    else if (seen && t == 1 && o->via.array.ptr[3].type == MSGPACK_OBJECT_POSITIVE_INTEGER)
      seen->id = o->via.array.ptr[3].via.u64;
    msgpack_unpacked_destroy(&u);
  }
}

static void run_one(pr_engine_t *e, void *arg) {
  input_t *in = (input_t *)arg;
  pr_rpc_conn_t *c = pr_test_rpc_open(e, sink, NULL);
  if (c == NULL) return;
  size_t chunk = in->n ? (size_t)(in->d[0] & 0x3f) + 1 : 1;
  size_t big = in->n ? (in->d[0] & 0x40 ? in->n : chunk) : 1; /* sometimes all at once */
  for (size_t off = 1; off < in->n;) {
    size_t k = in->n - off < big ? in->n - off : big;
    if (!pr_test_rpc_feed(c, (const char *)in->d + off, k)) break;
    off += k;
  }
  pr_test_rpc_close(c);
}

/* A fixed session no saved input can hold, since it needs the id the server
 * gives: a start, then waits with and without `output` left pending when the
 * connection closes. The server's counts of waits (rpc/conn.c) are checked as
 * each is dropped (-DPR_DEBUG stops on a drift). */
static void pending_waits(pr_engine_t *e, void *arg) {
  (void)arg;
  seen_t seen = {0, 0};
  pr_rpc_conn_t *c = pr_test_rpc_open(e, sink, &seen);
  if (c == NULL) abort();
  msgpack_sbuffer b;
  msgpack_sbuffer_init(&b);
  msgpack_packer pk;
  msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
  /* [0, 1, "start", [{"cmd": ["true"], "hold": true, "kill_on_disconnect": true}]] */
  msgpack_pack_array(&pk, 4), msgpack_pack_uint64(&pk, 0), msgpack_pack_uint64(&pk, 1);
  msgpack_pack_str_with_body(&pk, "start", 5), msgpack_pack_array(&pk, 1);
  msgpack_pack_map(&pk, 3), msgpack_pack_str_with_body(&pk, "cmd", 3);
  msgpack_pack_array(&pk, 1), msgpack_pack_str_with_body(&pk, "true", 4);
  msgpack_pack_str_with_body(&pk, "hold", 4), msgpack_pack_true(&pk);
  msgpack_pack_str_with_body(&pk, "kill_on_disconnect", 18), msgpack_pack_true(&pk);
  if (!pr_test_rpc_feed(c, b.data, b.size) || seen.id == 0) abort(); /* the start was taken */
  b.size = 0;
  for (uint64_t k = 0; k < 4; k++) { /* [0, 2+k, "wait", [id, 60000, {output = {stdout = 0}}?]] */
    msgpack_pack_array(&pk, 4), msgpack_pack_uint64(&pk, 0), msgpack_pack_uint64(&pk, 2 + k);
    msgpack_pack_str_with_body(&pk, "wait", 4), msgpack_pack_array(&pk, k % 2 ? 3 : 2);
    msgpack_pack_uint64(&pk, seen.id), msgpack_pack_uint64(&pk, 60000);
    if (k % 2) {
      msgpack_pack_map(&pk, 1), msgpack_pack_str_with_body(&pk, "output", 6);
      msgpack_pack_map(&pk, 1), msgpack_pack_str_with_body(&pk, "stdout", 6);
      msgpack_pack_uint64(&pk, 0);
    }
  }
  if (!pr_test_rpc_feed(c, b.data, b.size) || seen.others != 0) abort(); /* all four pending */
  msgpack_sbuffer_destroy(&b);
  pr_test_rpc_close(c); /* drops the pending waits, then cancels the held start */
}

int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) {
  if (eng == NULL) {
    pr_engine_opts_t o = {.shepherd_path = "/nonexistent/proctor-shepherd",
                          .history_limit = 64,
                          .output_limit = 4096};
    if (pr_engine_new(&o, &eng) != 0) abort();
    if (pr_test_call(eng, pending_waits, NULL) != 0) abort();
  }
  input_t in = {d, n};
  if (pr_test_call(eng, run_one, &in) != 0) abort();
  /* The host's event queue would grow forever: drain it like a host does. */
  pr_event_t *evs[256];
  size_t k;
  while ((k = pr_engine_poll(eng, evs, 256, 1)) > 0) /* 1: copy nothing big */
    for (size_t i = 0; i < k; i++)
      pr_event_free(evs[i]);
  return 0;
}
