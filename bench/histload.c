/* bench/histload.c — what a full history costs an engine: over a private
 * copy of a history file (bench/histgen.py makes a synthetic one), the time
 * pr_engine_new takes, when a run started at once is seen running, when the
 * load ends, the host thread's CPU, RSS after the load and its peak
 * (VmHWM); `close-now`: how long closing takes right after pr_engine_new and
 * a start (the load still under way); `close-early`: closing once that run
 * runs; `get-old`: how long pr_engine_get of record 1 (only in the file),
 * asked right after pr_engine_new, waits. One line a run. Run by hand, after
 * `make all`:
 *
 *   bench/histgen.py /tmp/full.mpk 1000 65536
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Icsrc -pthread -o build/histload bench/histload.c \
 *     $(find build/obj -name '[a-z]*.o' | grep -v -e stream-4k -e lctest) \
 *     -luv -ldl -lrt -l:libmsgpackc.a -lcjson -lm
 *   PROCTOR_SHEPHERD=build/proctor-shepherd build/histload /tmp/full.mpk \
 *     [close-now|close-early|get-old]
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "include/proctor.h"
static double ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static double cpu(void) { struct timespec t; clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static long kb(const char *key) { FILE *f = fopen("/proc/self/status", "r"); char l[256]; long v = -1; size_t k = strlen(key);
  while (fgets(l, sizeof l, f)) if (!strncmp(l, key, k)) v = atol(l + k + 1); fclose(f); return v; }
int main(int argc, char **argv) {
  char cmd[1024], dir[256], path[300];
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/proctor-histload.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (argc < 2 || !mkdtemp(dir)) return 1;
  snprintf(path, sizeof path, "%s/h.mpk", dir);
  snprintf(cmd, sizeof cmd, "cp %s %s", argv[1], path);
  if (system(cmd)) return 1;
  long rss0 = kb("VmRSS:");
  pr_engine_opts_t o = {.history_file = path, .history_limit = 100000};
  pr_engine_t *e;
  double t0 = ms(), c0 = cpu();
  if (pr_engine_new(&o, &e)) return 1;
  double t_new = ms() - t0;
  const char *av[] = {"true"};
  pr_spec_t s = {.argv = av, .argc = 1, .kill_grace_ms = -1};
  uint64_t id;
  pr_engine_start(e, &s, &id);
  double t_run = -1, t_loaded = -1;
  pr_event_t *evs[64];
  int early = argc > 2 && !strcmp(argv[2], "close-early");
  if (argc > 2 && !strcmp(argv[2], "get-old")) { /* the host asks for record 1 during the load */
    pr_record_t *r = NULL;
    char *data = NULL;
    size_t len = 0;
    uint64_t next, missed;
    double tg = ms(), c = cpu();
    int loading = pr_engine_history_loading(e), rc = pr_engine_get(e, 1, 0, &r);
    double t_get = ms() - tg, c_get = cpu() - c;
    tg = ms();
    int rc2 = pr_engine_read(e, 1, 0, PR_STDOUT, 0, 1 << 20, &data, &len, &next, &missed, NULL);
    printf("loading %d | get of record 1 %.1f ms (host cpu %.1f ms, rc %d) | read after it %.1f ms "
           "(rc %d, %zu bytes) | new %.1f ms\n",
           loading, t_get, c_get, rc, ms() - tg, rc2, len, t_new);
    pr_record_free(r);
    free(data);
    pr_engine_free(e);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
  }
  if (argc > 2 && !strcmp(argv[2], "close-now")) {
    double tc = ms();
    pr_engine_free(e);
    printf("close right after new and a start %.1f ms\n", ms() - tc);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
  }
  while (t_run < 0 || (t_loaded < 0 && !early)) {
    pr_engine_wait(e, 5);
    size_t k = pr_engine_poll(e, evs, 64, 0);
    for (size_t i = 0; i < k; i++) {
      if (evs[i]->id == id && evs[i]->type == PR_EV_STATE && (evs[i]->state == PR_RUNNING || pr_state_terminal(evs[i]->state)) && t_run < 0) t_run = ms() - t0;
      pr_event_free(evs[i]);
    }
    if (t_loaded < 0 && !pr_engine_history_loading(e)) t_loaded = ms() - t0;
  }
  if (early) {
    double tc = ms();
    pr_engine_free(e);
    printf("first run running %.1f ms | close during the load %.1f ms | loading when closed %d\n", t_run, ms() - tc, t_loaded < 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    return system(cmd);
  }
  double c1 = cpu() - c0;
  pr_record_t **v; size_t n = 0;
  pr_engine_list(e, 0, -1, &v, &n); pr_records_free(v, n);
  usleep(200000);
  long rss1 = kb("VmRSS:"), hwm = kb("VmHWM:");
  malloc_trim(0);
  long rss2 = kb("VmRSS:");
  double tc0 = ms();
  pr_engine_free(e);
  double t_close = ms() - tc0;
  printf("new %.1f ms | first run running %.1f ms | loaded %.1f ms | host cpu %.1f ms | records %zu | RSS before %ld KiB, after load %ld, after trim %ld, HWM %ld | close %.1f ms\n",
         t_new, t_run, t_loaded, c1, n, rss0, rss1, rss2, hwm, t_close);
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  return system(cmd);
}
