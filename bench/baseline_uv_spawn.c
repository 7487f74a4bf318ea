/* baseline_uv_spawn.c — the floor for spawn rate: a bare libuv uv_spawn loop.
 *
 *   baseline_uv_spawn [TOTAL=1000] [CONCURRENT=50] [PROGRAM=true]
 *
 * Keeps CONCURRENT children of PROGRAM running (stdio ignored) until TOTAL
 * have exited, and prints {"n":..,"wall_ms":..,"failed":..}.
 * Part of `make bench` (bench/run); written for this project.
 */
#include <stdio.h>
#include <stdlib.h>
#include <uv.h>

static int total = 1000, concurrent = 50, started, exited, failed;
static char *args[2] = {"true", NULL};

static void on_close(uv_handle_t *h) { free(h); }

static void spawn_one(uv_loop_t *loop);

static void on_exit_cb(uv_process_t *p, int64_t status, int sig) {
  if (status != 0 || sig != 0) failed++;
  exited++;
  uv_close((uv_handle_t *)p, on_close);
  if (started < total) spawn_one(p->loop);
}

static void spawn_one(uv_loop_t *loop) {
  uv_process_t *p = malloc(sizeof(*p));
  uv_process_options_t o = {0};
  o.file = args[0];
  o.args = args;
  o.exit_cb = on_exit_cb;
  started++;
  int rc = uv_spawn(loop, p, &o);
  if (rc != 0) {
    failed++;
    exited++;
    uv_close((uv_handle_t *)p, on_close);
  }
}

int main(int argc, char **argv) {
  if (argc > 1) total = atoi(argv[1]);
  if (argc > 2) concurrent = atoi(argv[2]);
  if (argc > 3) args[0] = argv[3];
  uv_loop_t *loop = uv_default_loop();
  uint64_t t0 = uv_hrtime();
  for (int i = 0; i < concurrent && started < total; i++) spawn_one(loop);
  uv_run(loop, UV_RUN_DEFAULT);
  uint64_t t1 = uv_hrtime();
  printf("{\"n\":%d,\"wall_ms\":%.3f,\"failed\":%d}\n", exited, (t1 - t0) / 1e6, failed);
  uv_loop_close(loop);
  return 0;
}
