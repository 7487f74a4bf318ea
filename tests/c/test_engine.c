/* test_engine.c — engine tests in C, run under ASan/UBSan and under TSan.
 *
 * Real child processes through the real shepherd (build/proctor-shepherd,
 * found next to this binary: the static image where musl-gcc built one; the
 * tests that LD_PRELOAD into a shepherd use its dynamic twin,
 * build/proctor-shepherd-dyn). Covers what the Lua specs cannot see well:
 * the host's signal state, a host thread reaping with waitpid(-1), the
 * cross-thread queues under a race detector, and clean shutdown (no leaks:
 * LeakSanitizer runs at exit under ASan).
 *
 *   test_engine_asan            full run
 *   test_engine_tsan --tsan     same tests, smaller counts (TSan is slow)
 */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <dirent.h>

#include <msgpack.h>

#include "include/proctor_test.h" /* pr_test_hold_events: stall the engine's thread */
#include "tap.h"

static int scale = 1; /* divisor for counts under TSan */

/* Per-id outcome collected from events. */
typedef struct {
  int terminal;     /* number of terminal events seen */
  pr_state_t state; /* last state */
  int exit_code, signal;
  int out_after_end; /* output event after the terminal one */
  size_t bytes;
  size_t missed; /* bytes reported dropped before delivered ones */
  char *data;    /* stdout/pty bytes, when collecting */
  size_t cap;
} outcome_t;

static uint64_t now_ms(void) { return pr_hrtime() / 1000000; }

/* Poll until every id in [1, n] of `o` is terminal or timeout. Returns 1 if all ended. */
static int drain(pr_engine_t *e, outcome_t *o, size_t n, int keep, int timeout_ms) {
  uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
  size_t left = 0;
  for (size_t i = 1; i <= n; i++) left += o[i].terminal == 0;
  pr_event_t *evs[256];
  while (left > 0 && now_ms() < deadline) {
    pr_engine_wait(e, 100);
    size_t k = pr_engine_poll(e, evs, 256, 0);
    for (size_t i = 0; i < k; i++) {
      pr_event_t *ev = evs[i];
      if (ev->id >= 1 && ev->id <= n) {
        outcome_t *x = &o[ev->id];
        if (ev->type == PR_EV_STATE) {
          x->state = ev->state;
          if (pr_state_terminal(ev->state)) {
            x->terminal++;
            x->exit_code = ev->exit_code;
            x->signal = ev->signal;
            left--;
          }
        } else {
          if (x->terminal) x->out_after_end = 1;
          x->bytes += ev->len;
          x->missed += ev->missed;
          if (keep) {
            if (x->cap < x->bytes + 1) {
              x->cap = (x->bytes + 1) * 2;
              x->data = realloc(x->data, x->cap);
            }
            memcpy(x->data + x->bytes - ev->len, ev->data, ev->len);
            x->data[x->bytes] = 0;
          }
        }
      }
      pr_event_free(ev);
    }
  }
  return left == 0;
}

static void free_outcomes(outcome_t *o, size_t n) {
  for (size_t i = 0; i <= n; i++) free(o[i].data);
  free(o);
}

static uint64_t start_sh(pr_engine_t *e, const char *script) {
  pr_spec_t s = {.shell = script, .kill_grace_ms = -1};
  uint64_t id = 0;
  if (pr_engine_start(e, &s, &id) != 0) return 0;
  return id;
}

static void test_lifecycle_and_output(void) {
  pr_engine_t *e;
  CHECK(pr_engine_new(NULL, &e) == 0);
  uint64_t id = start_sh(e, "echo hello; exit 4");
  CHECK_EQ(id, 1);
  outcome_t *o = calloc(2, sizeof(*o));
  int ok = drain(e, o, 1, 1, 5000);
  int good = ok && o[1].terminal == 1 && o[1].state == PR_FAILED && o[1].exit_code == 4 &&
             o[1].data && strcmp(o[1].data, "hello\n") == 0 && !o[1].out_after_end;
  free_outcomes(o, 1);
  pr_record_t *r;
  CHECK_OK(pr_engine_get(e, id, 0, &r));
  int rec_ok = r->state == PR_FAILED && r->exit_code == 4 && strcmp(r->reason, "exit") == 0 &&
               r->bytes[PR_STDOUT] == 6;
  pr_record_free(r);
  pr_engine_free(e);
  CHECK(good);
  CHECK(rec_ok);
}

/* hold/release and cancel with a reason. A held execution takes no
 * max_running slot; released, it waits its turn; canceled while held it ends
 * without a spawn; one still held at close is canceled off no list (ASan: no
 * use of an unlinked queue node, no leak). */
static void test_hold_release(void) {
  pr_engine_t *e;
  pr_engine_opts_t eo = {.max_running = 1};
  CHECK_OK(pr_engine_new(&eo, &e));
  pr_spec_t s = {.shell = "exit 3", .kill_grace_ms = -1, .hold = 1};
  uint64_t a = 0, b = 0, c = 0, d = 0;
  CHECK_OK(pr_engine_start(e, &s, &a));
  CHECK_OK(pr_engine_start(e, &s, &b));
  CHECK_OK(pr_engine_start(e, &s, &c)); /* stays held until close */
  d = start_sh(e, "exit 0");            /* not behind the held ones: they take no slot */
  outcome_t *o = calloc(5, sizeof(*o));
  for (uint64_t t0 = now_ms(); o[4].terminal == 0 && now_ms() - t0 < 30000;) drain(e, o, 4, 0, 100);
  CHECK(o[4].state == PR_COMPLETED && o[1].terminal == 0 && o[2].terminal == 0);
  pr_record_t *r;
  CHECK_OK(pr_engine_get(e, a, 0, &r));
  CHECK(r->state == PR_QUEUED && r->started_at == 0);
  pr_record_free(r);
  CHECK_OK(pr_engine_release(e, a, 0));
  int again = pr_engine_release(e, a, 0); /* not held any more, or already ended */
  CHECK(again == PR_EINVAL || again == PR_ENOTRUNNING);
  CHECK_EQ(pr_engine_cancel(e, b, 0, 0, "Bad Reason"), PR_CANCEL_NOT_FOUND);
  CHECK_EQ(pr_engine_cancel(e, b, 0, 0, "dependency_failed"), PR_CANCELING);
  CHECK_ERR(pr_engine_release(e, b, 0), PR_ENOTRUNNING);
  CHECK_ERR(pr_engine_release(e, 999, 0), PR_ENOENT);
  CHECK_ERR(pr_engine_release(e, d, 0), PR_ENOTRUNNING);
  int ok = drain(e, o, 2, 0, 10000);
  int good = ok && o[1].state == PR_FAILED && o[1].exit_code == 3 && o[2].state == PR_CANCELED;
  free_outcomes(o, 4);
  CHECK(good);
  CHECK_OK(pr_engine_get(e, b, 0, &r));
  CHECK(r->reason && strcmp(r->reason, "dependency_failed") == 0 && r->started_at == 0);
  pr_record_free(r);
  CHECK_OK(pr_engine_get(e, c, 0, &r));
  CHECK(r->state == PR_QUEUED);
  pr_record_free(r);
  pr_engine_free(e);
}

static int same_sigaction(const struct sigaction *a, const struct sigaction *b) {
  return a->sa_handler == b->sa_handler && a->sa_flags == b->sa_flags;
}

static void test_sigchld_disposition_unchanged(void) {
  struct sigaction before, after, pipe_before, pipe_after;
  sigaction(SIGCHLD, NULL, &before);
  sigaction(SIGPIPE, NULL, &pipe_before);
  sigset_t mask_before, mask_after;
  sigemptyset(&mask_before);
  sigemptyset(&mask_after);
  pthread_sigmask(SIG_SETMASK, NULL, &mask_before);
  pr_engine_opts_t opts = {.max_running = 50};
  pr_engine_t *e;
  CHECK_OK(pr_engine_new(&opts, &e));
  size_t n = 1000 / (size_t)scale;
  for (size_t i = 0; i < n; i++) CHECK(start_sh(e, "exit 0") != 0);
  outcome_t *o = calloc(n + 1, sizeof(*o));
  int ok = drain(e, o, n, 0, 60000);
  size_t good = 0;
  for (size_t i = 1; i <= n; i++) good += o[i].terminal == 1 && o[i].state == PR_COMPLETED;
  free_outcomes(o, n);
  pr_engine_free(e);
  sigaction(SIGCHLD, NULL, &after);
  sigaction(SIGPIPE, NULL, &pipe_after);
  pthread_sigmask(SIG_SETMASK, NULL, &mask_after);
  CHECK(ok);
  CHECKF(good == n, "%zu of %zu completed", good, n);
  CHECK(same_sigaction(&before, &after));
  CHECK(same_sigaction(&pipe_before, &pipe_after));
  for (int s = 1; s < NSIG; s++) CHECK(sigismember(&mask_before, s) == sigismember(&mask_after, s));
  /* and the host never got a child of its own that outlived the call */
  CHECK(waitpid(-1, NULL, WNOHANG) == -1);
}

static int reaper_stop; /* atomic */
static long reaped;

static void *reaper(void *arg) {
  (void)arg;
  while (!__atomic_load_n(&reaper_stop, __ATOMIC_RELAXED)) {
    if (waitpid(-1, NULL, WNOHANG) > 0) __atomic_add_fetch(&reaped, 1, __ATOMIC_RELAXED);
    usleep(100);
  }
  return NULL;
}

/* A host thread looping waitpid(-1, WNOHANG) neither loses nor hangs any exit. */
static void test_host_waitpid_thread(void) {
  pthread_t t;
  __atomic_store_n(&reaper_stop, 0, __ATOMIC_RELAXED);
  CHECK(pthread_create(&t, NULL, reaper, NULL) == 0);
  pr_engine_opts_t opts = {.max_running = 40};
  pr_engine_t *e;
  CHECK_OK(pr_engine_new(&opts, &e));
  size_t n = 300 / (size_t)scale;
  for (size_t i = 1; i <= n; i++) {
    char cmd[32];
    snprintf(cmd, sizeof(cmd), "exit %zu", i % 256);
    CHECK_EQ(start_sh(e, cmd), i);
  }
  outcome_t *o = calloc(n + 1, sizeof(*o));
  int ok = drain(e, o, n, 0, 60000);
  size_t good = 0;
  for (size_t i = 1; i <= n; i++) good += o[i].terminal == 1 && o[i].exit_code == (int)(i % 256);
  free_outcomes(o, n);
  pr_engine_free(e); /* stops its shepherd: a second shepherd start also works */
  __atomic_store_n(&reaper_stop, 1, __ATOMIC_RELAXED);
  pthread_join(t, NULL);
  CHECK(ok);
  CHECKF(good == n, "%zu of %zu exits right", good, n);
}

/* Bulk input and output across the threads, checked byte for byte. */
static void test_input_roundtrip(void) {
  pr_engine_t *e;
  CHECK(pr_engine_new(NULL, &e) == 0);
  const char *argv[] = {"cat"};
  pr_spec_t s = {.argv = argv, .argc = 1, .stdin_pipe = 1, .kill_grace_ms = -1};
  uint64_t id;
  CHECK_OK(pr_engine_start(e, &s, &id));
  size_t chunk = 65536, total = chunk * (64 / (size_t)scale);
  char *buf = malloc(chunk);
  for (size_t off = 0; off < total; off += chunk) {
    for (size_t i = 0; i < chunk; i++) buf[i] = (char)(((off + i) * 7) % 253);
    CHECK_OK(pr_engine_input(e, id, 0, buf, chunk));
  }
  free(buf);
  CHECK_OK(pr_engine_close_stdin(e, id, 0));
  int again = pr_engine_close_stdin(e, id, 0); /* ENOTRUNNING once cat already ended */
  CHECK(again == PR_ESTDINCLOSED || again == PR_ENOTRUNNING);
  outcome_t *o = calloc(2, sizeof(*o));
  int ok = drain(e, o, 1, 1, 30000);
  size_t bad = 0;
  if (ok && o[1].bytes == total)
    for (size_t i = 0; i < total; i++) bad += o[1].data[i] != (char)((i * 7) % 253);
  size_t got = o[1].bytes;
  free_outcomes(o, 1);
  pr_engine_free(e);
  CHECK(ok);
  CHECKF(got == total, "got %zu of %zu bytes", got, total);
  CHECK_EQ(bad, 0);
}

/* Start/cancel races under the sanitizers: one terminal event each, contract holds. */
static void test_cancel_races(void) {
  pr_engine_opts_t opts = {.max_running = 32, .history_limit = 100000};
  pr_engine_t *e;
  CHECK_OK(pr_engine_new(&opts, &e));
  size_t n = 1000 / (size_t)scale;
  pr_cancel_result_t *ans = calloc(n + 1, sizeof(*ans));
  for (size_t i = 1; i <= n; i++) {
    CHECK_EQ(start_sh(e, "exit 0"), i);
    if (i % 2 == 0) usleep((useconds_t)(i % 7) * 100);
    ans[i] = pr_engine_cancel(e, i, 0, 0, NULL);
  }
  outcome_t *o = calloc(n + 1, sizeof(*o));
  int ok = drain(e, o, n, 0, 60000);
  size_t bad = 0, canceled = 0;
  for (size_t i = 1; i <= n; i++) {
    if (o[i].terminal != 1) bad++;
    /* the first cancel either decides the end or finds the exit came first */
    if (ans[i] != PR_CANCELING && ans[i] != PR_ALREADY_TERMINAL) bad++;
    if ((o[i].state == PR_CANCELED) != (ans[i] == PR_CANCELING)) bad++;
    canceled += o[i].state == PR_CANCELED;
  }
  free(ans);
  free_outcomes(o, n);
  pr_engine_free(e);
  CHECK(ok);
  CHECKF(bad == 0, "%zu contract violations", bad);
  CHECKF(canceled > 0, "nothing was canceled");
}

/* A burst of starts submitted faster than the engine takes them (one wake-up
 * for a queue that already holds commands): every one runs and ends, and a
 * sync command after the burst is answered. */
static void test_start_burst(void) {
  pr_engine_opts_t opts = {.max_running = 16, .history_limit = 100000};
  pr_engine_t *e;
  CHECK_OK(pr_engine_new(&opts, &e));
  size_t n = 400 / (size_t)scale;
  for (size_t i = 1; i <= n; i++) CHECK_EQ(start_sh(e, "exit 3"), i);
  CHECK(pr_engine_cancel(e, n + 1, 0, 0, NULL) == PR_CANCEL_NOT_FOUND);
  outcome_t *o = calloc(n + 1, sizeof(*o));
  int ok = drain(e, o, n, 0, 60000);
  size_t bad = 0;
  for (size_t i = 1; i <= n; i++) bad += o[i].terminal != 1 || o[i].exit_code != 3;
  free_outcomes(o, n);
  pr_engine_free(e);
  CHECK(ok);
  CHECKF(bad == 0, "%zu of %zu did not end with their exit code", bad, n);
}

/* Closing with live executions (plain, pty, TERM-ignoring) is bounded and
 * emits their terminal events; queued ones end canceled. */
static void test_close_with_live_jobs(void) {
  pr_engine_opts_t opts = {.kill_grace_ms = 200, .max_running = 3};
  pr_engine_t *e;
  CHECK_OK(pr_engine_new(&opts, &e));
  CHECK_EQ(start_sh(e, "sleep 100"), 1);
  pr_spec_t s = {.shell = "trap '' TERM HUP; sleep 100", .pty = 1, .kill_grace_ms = -1};
  uint64_t id;
  CHECK_OK(pr_engine_start(e, &s, &id));
  CHECK(start_sh(e, "trap '' TERM; sleep 100") == 3);
  CHECK_EQ(start_sh(e, "sleep 100"), 4); /* queued */
  usleep(200000);
  uint64_t t0 = now_ms();
  pr_engine_close(e);
  uint64_t dt = now_ms() - t0;
  outcome_t *o = calloc(5, sizeof(*o));
  int ok = drain(e, o, 4, 0, 100);
  int all_canceled = 1;
  for (int i = 1; i <= 4; i++) all_canceled &= o[i].state == PR_CANCELED && o[i].terminal == 1;
  free_outcomes(o, 4);
  uint64_t x;
  int rc = pr_engine_start(e, &s, &x);
  pr_engine_free(e);
  CHECK(ok);
  CHECK(all_canceled);
  /* close returned (the tier's timeout bounds it); no wall bound: load stretches it */
  printf("# close with a TERM-ignoring pty job: %llu ms\n", (unsigned long long)dt);
  CHECK_ERR(rc, PR_ECLOSED);
}

/* Many pollers of nothing while the engine floods: the queue handoff under TSan. */
static void test_flood_coalesced(void) {
  pr_engine_t *e;
  CHECK(pr_engine_new(NULL, &e) == 0);
  char cmd[64];
  size_t total = (size_t)(32 << 20) / (size_t)scale;
  snprintf(cmd, sizeof(cmd), "head -c %zu /dev/zero", total);
  CHECK_EQ(start_sh(e, cmd), 1);
  CHECK_EQ(start_sh(e, cmd), 2);
  outcome_t *o = calloc(3, sizeof(*o));
  int ok = drain(e, o, 2, 0, 60000);
  /* an 8 MiB ring and a sanitizer-slowed poller: what was dropped is reported */
  size_t b1 = o[1].bytes + o[1].missed, b2 = o[2].bytes + o[2].missed;
  int late = o[1].out_after_end || o[2].out_after_end;
  free_outcomes(o, 2);
  pr_engine_free(e);
  CHECK(ok);
  CHECKF(b1 == total && b2 == total, "%zu / %zu of %zu", b1, b2, total);
  CHECK(!late);
}

/* The engine thread stalls past an execution's drain deadline while the
 * last bytes of a grandchild (written well inside the drain window) wait in
 * the pipe. When the loop goes on, its timers run before it polls again: the
 * drain timer must take those bytes, not cut the stream off without them.
 * The stall is real: this thread holds the event queue lock, so the engine
 * blocks as soon as another execution has output to signal. */
static void test_drain_after_stall(void) {
  pr_engine_opts_t opts = {.drain_ms = 1500};
  pr_engine_t *e;
  CHECK_OK(pr_engine_new(&opts, &e));
  uint64_t t0 = now_ms();
  /* 1: exits at once; a background subshell holds stdout and writes at +1 s */
  CHECK_EQ(start_sh(e, "(sleep 1; printf tail-bytes) & exit 0"), 1);
  /* 2: its output at +0.5 s is what stalls the engine thread */
  CHECK_EQ(start_sh(e, "sleep 0.5; echo stall"), 2);
  /* 3: as 1, on a terminal (the subshell outlives the leader's hangup) */
  pr_spec_t s = {
      .shell = "trap '' HUP; (sleep 1; printf tail-bytes) & exit 0", .pty = 1, .kill_grace_ms = -1};
  uint64_t id3 = 0;
  CHECK(pr_engine_start(e, &s, &id3) == 0 && id3 == 3);
  usleep(200000); /* 1 has exited and its drain timer runs (deadline ~ +1.5 s) */
  pr_test_hold_events(e);
  usleep(3000000); /* past the deadline; the tail has been in the pipe since +1 s */
  pr_test_release_events(e);
  outcome_t *o = calloc(4, sizeof(*o));
  int ok = drain(e, o, 3, 1, 10000);
  uint64_t dt = now_ms() - t0;
  int got = o[1].data && strcmp(o[1].data, "tail-bytes") == 0;
  int got_pty = o[3].data && strcmp(o[3].data, "tail-bytes") == 0;
  int state = o[1].state, state_pty = o[3].state;
  free_outcomes(o, 3);
  pr_engine_free(e);
  CHECK(ok);
  CHECKF(state == PR_COMPLETED && state_pty == PR_COMPLETED, "states %d %d", state, state_pty);
  CHECKF(got, "pipe: the tail written inside the drain window was cut off");
  CHECKF(got_pty, "pty: the tail written inside the drain window was cut off");
  printf("# drain after a stall ended after %llu ms\n", (unsigned long long)dt);
}

/* Two engines whose shepherd cannot start, failing at the same time on their
 * own threads: each spawn error names its own engine's shepherd path (the
 * message buffer is per engine; under TSan a shared one is a reported race). */
static void test_spawn_error_per_engine(void) {
  enum { NE = 2 };
  size_t rounds = 20 / (size_t)scale;
  size_t wrong = 0, unanswered = 0;
  for (size_t r = 0; r < rounds; r++) {
    pr_engine_t *e[NE];
    char path[NE][64];
    for (int k = 0; k < NE; k++) {
      snprintf(path[k], sizeof(path[k]), "/nonexistent/proctor-shepherd-%d-%zu", k, r);
      pr_engine_opts_t opts = {.shepherd_path = path[k]};
      CHECK_OK(pr_engine_new(&opts, &e[k]));
    }
    /* start on every engine before polling any: nothing orders their threads */
    for (int k = 0; k < NE; k++)
      for (int i = 0; i < 4; i++) CHECK(start_sh(e[k], "true") != 0);
    for (int k = 0; k < NE; k++) {
      int seen = 0;
      uint64_t deadline = now_ms() + 5000;
      pr_event_t *evs[64];
      while (seen < 4 && now_ms() < deadline) {
        pr_engine_wait(e[k], 100);
        size_t n = pr_engine_poll(e[k], evs, 64, 0);
        for (size_t i = 0; i < n; i++) {
          if (evs[i]->type == PR_EV_STATE && pr_state_terminal(evs[i]->state)) {
            seen++;
            if (evs[i]->state != PR_FAILED || evs[i]->error == NULL ||
                strstr(evs[i]->error, path[k]) == NULL)
              wrong++;
          }
          pr_event_free(evs[i]);
        }
      }
      unanswered += (size_t)(4 - seen);
    }
    for (int k = 0; k < NE; k++) pr_engine_free(e[k]);
  }
  CHECKF(unanswered == 0, "%zu executions never ended", unanswered);
  CHECKF(wrong == 0, "%zu spawn errors name another engine's shepherd", wrong);
}

/* Live processes whose environment holds `needle` ("KEY=value"). */
static int count_tagged(const char *needle, pid_t *first) {
  int n = 0;
  DIR *d = opendir("/proc");
  if (d == NULL) return -1;
  struct dirent *de;
  while ((de = readdir(d)) != NULL) {
    if (de->d_name[0] < '1' || de->d_name[0] > '9') continue;
    char path[300], buf[8192], st[512];
    snprintf(path, sizeof(path), "/proc/%s/environ", de->d_name);
    FILE *f = fopen(path, "rb");
    if (f == NULL) continue;
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    int found = 0;
    for (size_t at = 0; at < len && !found; at += strnlen(buf + at, len - at) + 1)
      found = strncmp(buf + at, needle, len - at) == 0;
    snprintf(path, sizeof(path), "/proc/%s/stat", de->d_name);
    if (found && (f = fopen(path, "r")) != NULL) {
      size_t k = fread(st, 1, sizeof(st) - 1, f);
      fclose(f);
      st[k] = 0;
      char *rp = strrchr(st, ')');
      if (rp && rp[1] == ' ' && rp[2] != 'Z' && n++ == 0 && first) *first = atoi(de->d_name);
    }
  }
  closedir(d);
  return n;
}

/* The host is out of descriptors when SPAWNED arrives (recvmsg: MSG_CTRUNC):
 * the execution still ends, failed with a reason; its process is killed;
 * the engine works again once descriptors are free. */
static void test_spawned_without_fds(void) {
  pr_engine_t *e;
  CHECK(pr_engine_new(NULL, &e) == 0);
  outcome_t *o = calloc(4, sizeof(*o));
  CHECK_EQ(start_sh(e, "true"), 1); /* the shepherd runs (with its own limit) */
  CHECK(drain(e, o, 1, 0, 5000));
  char tag[64], needle[96];
  snprintf(tag, sizeof(tag), "fdx-%d-%llu", (int)getpid(), (unsigned long long)now_ms());
  snprintf(needle, sizeof(needle), "PROCTOR_TEST_TAG=%s", tag);
  struct rlimit old, low;
  CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  int top = open("/dev/null", O_RDONLY); /* the lowest free descriptor, more or less */
  CHECK(top >= 0);
  close(top);
  low = old;
  low.rlim_cur = (rlim_t)top + 64;
  CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  int fill[128], nfill = 0;
  while (nfill < 128 && (fill[nfill] = open("/dev/null", O_RDONLY)) >= 0) nfill++;
  const char *env[] = {needle};
  pr_spec_t s = {.argv = (const char *[]){"sleep", "600"},
                 .argc = 2,
                 .env = env,
                 .envc = 1,
                 .kill_grace_ms = -1};
  uint64_t id = 0;
  int rc = pr_engine_start(e, &s, &id);
  int ended = rc == 0 && drain(e, o, 2, 0, 10000);
  for (int i = 0; i < nfill; i++) close(fill[i]);
  setrlimit(RLIMIT_NOFILE, &old);
  CHECK(rc == 0 && id == 2);
  CHECKF(ended, "execution %llu never ended (state %s)", (unsigned long long)id,
         pr_state_name(o[2].state));
  pr_record_t *r = NULL;
  CHECK_OK(pr_engine_get(e, id, 0, &r));
  int good = r->state == PR_FAILED && r->reason && strcmp(r->reason, "spawn_error") == 0 &&
             r->error && strstr(r->error, "EMFILE") != NULL;
  char why[256];
  snprintf(why, sizeof(why), "%s / %s / %s", pr_state_name(r->state), r->reason ? r->reason : "-",
           r->error ? r->error : "-");
  pr_record_free(r);
  CHECKF(good, "%s", why);
  int left = 1;
  for (uint64_t t = now_ms() + 5000; (left = count_tagged(needle, NULL)) > 0 && now_ms() < t;)
    usleep(10000);
  CHECKF(left == 0, "%d process(es) of the failed execution still alive", left);
  CHECK_EQ(start_sh(e, "echo ok"), 3);
  CHECK(drain(e, o, 3, 0, 5000) && o[3].state == PR_COMPLETED);
  free_outcomes(o, 3);
  pr_engine_free(e);
}

/* The state letter of process `pid` in /proc ('S', 'T', 'Z', ...), its parent in *ppid;
 * 0 when it is gone. */
static char proc_state(pid_t pid, pid_t *ppid) {
  char path[64], st[512];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  size_t k = fread(st, 1, sizeof(st) - 1, f);
  fclose(f);
  st[k] = 0;
  char *rp = strrchr(st, ')');
  char c = 0;
  int pp = 0;
  if (rp == NULL || sscanf(rp + 2, "%c %d", &c, &pp) != 2) return 0;
  if (ppid) *ppid = pp;
  return c;
}

/* build/, where this test binary, the shepherds and the test preloads are,
 * into self. */
static int build_dir(char *self, size_t len) {
  ssize_t n = readlink("/proc/self/exe", self, len - 1);
  if (n <= 0) return 0;
  self[n] = 0;
  *strrchr(self, '/') = 0;
  return 1;
}

/* A new private directory under $TMPDIR (or /tmp) into dir. */
static int private_dir(char *dir, size_t len) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, len, "%s/proctor-test.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  return mkdtemp(dir) != NULL;
}

/* An executable script at path that runs the dynamic shepherd of build/ (self)
 * with the preload build/<so> and the variable assignments env ("" or
 * "NAME=value ... "). */
static int shepherd_wrapper(const char *path, const char *env, const char *self, const char *so) {
  FILE *f = fopen(path, "w");
  if (f == NULL) return 0;
  fprintf(f, "#!/bin/sh\n%sLD_PRELOAD='%s/%s' exec '%s/proctor-shepherd-dyn' \"$@\"\n", env, self,
          so, self);
  fclose(f);
  return chmod(path, 0755) == 0;
}

/* A job's reaper stopped after its job was exec'd but before it reported the
 * spawn (tests/c/stop_reaper.c, preloaded into the shepherd, makes that race
 * certain; a job that runs `kill -STOP $PPID` at once makes it only under
 * load). A cancel, a timeout and close must still end the execution (a
 * cancel or timeout with what the job wrote before; close is bounded, so
 * on a loaded machine it may end it first) and leave nothing behind: no
 * process with its tag, no stopped reaper. Whatever happens, the reaper is continued and
 * killed before the checks (a failed check must not leave it stopped). */
static void test_reaper_stopped_before_spawned(void) {
  static const char *modes[] = {"cancel", "timeout", "close"};
  char self[512], dir[300], wrapper[320];
  CHECK(build_dir(self, sizeof(self))); /* the shepherd and stop_reaper.so are here */
  CHECK(private_dir(dir, sizeof(dir)));
  snprintf(wrapper, sizeof(wrapper), "%s/shepherd", dir);
  CHECK(shepherd_wrapper(wrapper, "", self, "stop_reaper.so"));
  char why[3][400] = {{0}};
  for (int m = 0; m < 3; m++) {
    pr_engine_opts_t opts = {.shepherd_path = wrapper, .kill_grace_ms = 300};
    pr_engine_t *e;
    if (pr_engine_new(&opts, &e) != 0) {
      snprintf(why[m], sizeof(why[m]), "no engine");
      continue;
    }
    char needle[96];
    snprintf(needle, sizeof(needle), "PROCTOR_TEST_TAG=stopped-%d-%llu-%d", (int)getpid(),
             (unsigned long long)now_ms(), m);
    const char *env[] = {needle};
    /* The job says "up" and then leaves a mark: the cancel waits for the mark,
     * so the job's output is in its pipe whatever the machine's load (a job
     * not yet scheduled would be stopped before it wrote anything). */
    char mark[sizeof(dir) + 16], shell[sizeof(mark) + 64];
    snprintf(mark, sizeof(mark), "%s/up-%d", dir, m);
    snprintf(shell, sizeof(shell), "echo up; : > '%s'; exec sleep 600", mark);
    pr_spec_t s = {.shell = shell,
                   .env = env,
                   .envc = 1,
                   .kill_grace_ms = -1,
                   .timeout_ms = m == 1 ? 2000 : 0};
    uint64_t id = 0;
    int rc = pr_engine_start(e, &s, &id);
    pid_t leader = 0, reaper = 0;
    char rstate = 0;
    for (uint64_t t = now_ms() + 10000; rc == 0 && now_ms() < t; usleep(5000)) {
      if (leader <= 0) count_tagged(needle, &leader);
      if (leader > 0 && reaper <= 0 && proc_state(leader, &reaper) == 0) reaper = 0;
      if (reaper > 0 && (rstate = proc_state(reaper, NULL)) == 'T' && access(mark, F_OK) == 0)
        break;
    }
    if (m == 0) pr_engine_cancel(e, id, 0, 0, "test");
    if (m == 2) pr_engine_close(e);
    outcome_t *o = calloc(2, sizeof(*o));
    int ended = rc == 0 && drain(e, o, 1, 1, 15000);
    int left = 1, reaper_left = 1;
    for (uint64_t t = now_ms() + 5000; now_ms() < t; usleep(10000)) {
      left = count_tagged(needle, NULL);
      reaper_left = reaper > 0 && proc_state(reaper, NULL) != 0 && proc_state(reaper, NULL) != 'Z';
      if (left == 0 && !reaper_left) break;
    }
    pr_state_t want = m == 1 ? PR_TIMED_OUT : PR_CANCELED;
    if (rc != 0 || id != 1) snprintf(why[m], sizeof(why[m]), "start: %s", pr_err_name(rc));
    else if (rstate != 'T')
      snprintf(why[m], sizeof(why[m]), "the reaper (%d) never stopped: '%c'", (int)reaper, rstate);
    else if (!ended) snprintf(why[m], sizeof(why[m]), "never ended: %s", pr_state_name(o[1].state));
    else if (m != 2 && o[1].state != want)
      snprintf(why[m], sizeof(why[m]), "ended %s, not %s", pr_state_name(o[1].state),
               pr_state_name(want));
    else if (m != 2 && (o[1].data == NULL || strcmp(o[1].data, "up\n") != 0))
      snprintf(why[m], sizeof(why[m]), "its output %s lost", o[1].data ? o[1].data : "(none)");
    else if (left != 0 || reaper_left)
      snprintf(why[m], sizeof(why[m]), "left behind: %d tagged, the reaper %s", left,
               reaper_left ? "lives" : "is gone");
    if (reaper > 0 && proc_state(reaper, NULL) == 'T') { /* never leave it stopped */
      kill(reaper, SIGCONT);
      kill(reaper, SIGKILL);
    }
    free_outcomes(o, 1);
    pr_engine_free(e);
  }
  unlink(wrapper);
  for (int m = 0; m < 3; m++) {
    char mark[sizeof(dir) + 16];
    snprintf(mark, sizeof(mark), "%s/up-%d", dir, m);
    unlink(mark);
  }
  rmdir(dir);
  for (int m = 0; m < 3; m++) CHECKF(why[m][0] == 0, "%s: %s", modes[m], why[m]);
}

/* A shepherd silent past the liveness check's PING and answer window
 * (tests/c/slow_shepherd.c, preloaded into it, holds it inside a spawn
 * request: on a loaded machine a large request or a starved CPU does that).
 * "work": it is alive and uses CPU (a loop of 1 ms sleeps) until a second
 * PING waits for it, proof that the engine judged the first silence: the
 * execution must complete, not end supervisor_lost (the old check killed
 * every shepherd silent that long). "hang": asleep for good, using no CPU,
 * and "spin": running for good without a word (it is killed once it used
 * the answer window's worth of CPU, however long a loaded machine takes to
 * give it that): it must still be killed and its execution end
 * failed/supervisor_lost, and the next start gets a new shepherd. No
 * duration is asserted: each step waits for a condition. */
static void test_shepherd_slow_or_hung(void) {
  static const char *modes[] = {"work", "hang", "spin"};
  char self[512], dir[300], wrapper[320], mark[320];
  CHECK(build_dir(self, sizeof(self))); /* the shepherd and slow_shepherd.so are here */
  CHECK(private_dir(dir, sizeof(dir)));
  char why[3][400] = {{0}};
  for (int m = 0; m < 3; m++) {
    snprintf(wrapper, sizeof(wrapper), "%s/shepherd-%s", dir, modes[m]);
    snprintf(mark, sizeof(mark), "%s/mark-%s", dir, modes[m]);
    char wenv[400];
    snprintf(wenv, sizeof(wenv), "PROCTOR_TEST_SLOW=%s PROCTOR_TEST_SLOW_MARK='%s' ", modes[m],
             mark);
    CHECK(shepherd_wrapper(wrapper, wenv, self, "slow_shepherd.so"));
    pr_engine_opts_t opts = {.shepherd_path = wrapper};
    pr_engine_t *e;
    if (pr_engine_new(&opts, &e) != 0) {
      snprintf(why[m], sizeof(why[m]), "no engine");
      continue;
    }
    const char *env[] = {"PROCTOR_TEST_HOLD=1"};
    pr_spec_t s = {.shell = "echo fine", .env = env, .envc = 1, .kill_grace_ms = -1};
    uint64_t id = 0;
    int rc = pr_engine_start(e, &s, &id);
    outcome_t *o = calloc(3, sizeof(*o));
    int ended = rc == 0 && drain(e, o, 1, 1, 120000);
    pr_record_t *r = NULL;
    const char *reason = ended && pr_engine_get(e, id, 0, &r) == 0 ? r->reason : "?";
    char marks[64] = {0};
    int mfd = open(mark, O_RDONLY);
    if (mfd >= 0) {
      if (read(mfd, marks, sizeof(marks) - 1) < 0) marks[0] = 0;
      close(mfd);
    }
    uint64_t next = ended ? start_sh(e, "echo next") : 0;
    int next_ok = next == 2 && drain(e, o, 2, 1, 30000) && o[2].state == PR_COMPLETED;
    if (rc != 0 || id != 1) snprintf(why[m], sizeof(why[m]), "start: %s", pr_err_name(rc));
    else if (!ended) snprintf(why[m], sizeof(why[m]), "never ended: %s", pr_state_name(o[1].state));
    else if (m == 0 && (o[1].state != PR_COMPLETED || strcmp(marks, "held\npinged\n") != 0))
      snprintf(why[m], sizeof(why[m]), "a working shepherd: %s (%s), its marks '%s'",
               pr_state_name(o[1].state), reason, marks);
    else if (m == 0 && (o[1].data == NULL || strcmp(o[1].data, "fine\n") != 0))
      snprintf(why[m], sizeof(why[m]), "its output: %s", o[1].data ? o[1].data : "(none)");
    else if (m > 0 && (o[1].state != PR_FAILED || strcmp(reason, "supervisor_lost") != 0 ||
                       strcmp(marks, "held\n") != 0))
      snprintf(why[m], sizeof(why[m]), "a shepherd hung (%s): %s (%s), its marks '%s'", modes[m],
               pr_state_name(o[1].state), reason, marks);
    else if (!next_ok)
      snprintf(why[m], sizeof(why[m]), "the next start: %s", pr_state_name(o[2].state));
    if (r) pr_record_free(r);
    free_outcomes(o, 2);
    pr_engine_free(e);
    unlink(wrapper);
    unlink(mark);
  }
  rmdir(dir);
  for (int m = 0; m < 3; m++) CHECKF(why[m][0] == 0, "%s: %s", modes[m], why[m]);
}

/* A job's reaper silent past the shepherd's answer window after a cancel's
 * SIGTERM (tests/c/slow_reaper.c, preloaded into the shepherd and so into
 * its reapers, holds it inside the read of that command: on a loaded machine
 * a reaper runnable without a CPU does that). "work": it is alive and uses
 * CPU (a loop of 1 ms sleeps) until the shepherd's probe (SIGCONT) is
 * pending, proof that the shepherd judged the silence and asked again: the
 * job must then get its SIGTERM and end by its own trap within its grace
 * ("graceful"), not by the SIGKILL the old check gave every reaper silent
 * that long. "hang": asleep for good, using no CPU: it must still be killed,
 * and with it its job (the execution ends canceled, no process left). A
 * reaper stopped by its job is test_reaper_stopped_before_spawned's. No
 * duration is asserted: each step waits for a condition. */
static void test_reaper_slow_or_hung(void) {
  static const char *modes[] = {"work", "hang"};
  char self[512], dir[300], wrapper[320], mark[320], up[320], shell[800];
  CHECK(build_dir(self, sizeof(self))); /* the shepherd and slow_reaper.so are here */
  CHECK(private_dir(dir, sizeof(dir)));
  char why[2][400] = {{0}};
  for (int m = 0; m < 2; m++) {
    snprintf(wrapper, sizeof(wrapper), "%s/shepherd-%s", dir, modes[m]);
    snprintf(mark, sizeof(mark), "%s/mark-%s", dir, modes[m]);
    snprintf(up, sizeof(up), "%s/up-%s", dir, modes[m]);
    char wenv[400];
    snprintf(wenv, sizeof(wenv), "PROCTOR_TEST_REAPER=%s PROCTOR_TEST_REAPER_MARK='%s' ", modes[m],
             mark);
    CHECK(shepherd_wrapper(wrapper, wenv, self, "slow_reaper.so"));
    pr_engine_opts_t opts = {.shepherd_path = wrapper};
    pr_engine_t *e;
    if (pr_engine_new(&opts, &e) != 0) {
      snprintf(why[m], sizeof(why[m]), "no engine");
      continue;
    }
    char needle[96];
    snprintf(needle, sizeof(needle), "PROCTOR_TEST_TAG=reaper-%d-%llu-%d", (int)getpid(),
             (unsigned long long)now_ms(), m);
    const char *env[] = {needle};
    /* The trap is set before the mark: the cancel waits for the mark. */
    snprintf(shell, sizeof(shell),
             "trap 'echo graceful; exit 0' TERM; echo up; : > '%s'; while :; do sleep 0.05; done",
             up);
    pr_spec_t s = {.shell = shell, .env = env, .envc = 1, .kill_grace_ms = 600000};
    uint64_t id = 0;
    int rc = pr_engine_start(e, &s, &id);
    for (uint64_t t = now_ms() + 30000; rc == 0 && now_ms() < t && access(up, F_OK) != 0;)
      usleep(5000);
    pr_cancel_result_t cr = pr_engine_cancel(e, id, 0, 0, NULL);
    outcome_t *o = calloc(2, sizeof(*o));
    int ended = rc == 0 && drain(e, o, 1, 1, 120000);
    int left = 1;
    for (uint64_t t = now_ms() + 10000; now_ms() < t; usleep(10000))
      if ((left = count_tagged(needle, NULL)) == 0) break;
    char marks[64] = {0};
    int mfd = open(mark, O_RDONLY);
    if (mfd >= 0) {
      if (read(mfd, marks, sizeof(marks) - 1) < 0) marks[0] = 0;
      close(mfd);
    }
    const char *out = o[1].data ? o[1].data : "(none)";
    if (rc != 0 || id != 1) snprintf(why[m], sizeof(why[m]), "start: %s", pr_err_name(rc));
    else if (cr != PR_CANCELING) snprintf(why[m], sizeof(why[m]), "cancel: %d", (int)cr);
    else if (!ended) snprintf(why[m], sizeof(why[m]), "never ended: %s", pr_state_name(o[1].state));
    else if (o[1].state != PR_CANCELED)
      snprintf(why[m], sizeof(why[m]), "ended %s", pr_state_name(o[1].state));
    else if (m == 0 && (strncmp(out, "up\n", 3) != 0 || strstr(out, "graceful\n") == NULL ||
                        strcmp(marks, "held\nprobed\n") != 0))
      snprintf(why[m], sizeof(why[m]),
               "a working reaper: the job's output '%s' (signal %d), the reaper's marks '%s'", out,
               o[1].signal, marks);
    else if (m == 1 && (strncmp(out, "up\n", 3) != 0 || strstr(out, "graceful") != NULL ||
                        strcmp(marks, "held\n") != 0))
      snprintf(why[m], sizeof(why[m]), "a hung reaper: the job's output '%s', the marks '%s'", out,
               marks);
    else if (left != 0) snprintf(why[m], sizeof(why[m]), "left behind: %d tagged", left);
    free_outcomes(o, 1);
    pr_engine_free(e);
    unlink(wrapper);
    unlink(mark);
    unlink(up);
  }
  rmdir(dir);
  for (int m = 0; m < 2; m++) CHECKF(why[m][0] == 0, "%s: %s", modes[m], why[m]);
}

/* A host that never polls while N executions end (held, then canceled: no
 * process, so the count costs no fork): the events waiting for it stay
 * within PR_HOST_EVENTS_BYTES plus one compact state event per execution
 * (the old queue kept two events and a full record for each: 13.5 MB for
 * 10,000), and a poll then still sees every execution's end, exactly once,
 * with its record or without (get has it). */
static void test_host_queue_bounded(void) {
  size_t n = 10000, held = 0, bytes = 0, ends = 0, twice = 0, records = 0;
  pr_engine_t *e;
  CHECK_OK(pr_engine_new(NULL, &e));
  pr_spec_t s = {.shell = "true", .kill_grace_ms = -1, .hold = 1};
  uint64_t id = 0;
  for (size_t i = 1; i <= n; i++) {
    CHECK_OK(pr_engine_start(e, &s, &id));
    CHECK_EQ(pr_engine_cancel(e, id, 0, 0, NULL), PR_CANCELING);
  }
  pr_record_t *r = NULL; /* commands run in order: the last one ended, they all did */
  for (uint64_t t = now_ms() + 60000; now_ms() < t; usleep(10000)) {
    int rc = pr_engine_get(e, id, 0, &r);
    int done = rc == PR_ENOENT || (rc == 0 && pr_state_terminal(r->state));
    pr_record_free(r);
    r = NULL;
    if (done) break;
  }
  pr_test_events_held(e, &held, &bytes);
  char *seen = calloc(n + 1, 1);
  pr_event_t *evs[256];
  for (size_t k; (k = pr_engine_poll(e, evs, 256, 0)) > 0;) {
    for (size_t i = 0; i < k; i++) {
      pr_event_t *ev = evs[i];
      if (ev->type == PR_EV_STATE && pr_state_terminal(ev->state) && ev->id >= 1 && ev->id <= n) {
        twice += seen[ev->id]++ != 0;
        ends += ev->state == PR_CANCELED && ev->prev != PR_CANCELED;
        records += ev->record != NULL;
      }
      pr_event_free(ev);
    }
  }
  free(seen);
  pr_engine_free(e);
  printf("# host queue unpolled: %zu events, %zu bytes for %zu ended executions (%zu records)\n",
         held, bytes, n, records);
  CHECKF(bytes <= PR_HOST_EVENTS_BYTES + n * 256,
         "%zu events hold %zu bytes for %zu ended executions (bound %zu + 256 each)", held, bytes,
         n, PR_HOST_EVENTS_BYTES);
  /* one event each, and a second (the first state) only for those whose end kept its record */
  CHECKF(held <= n + records, "%zu events for %zu executions, %zu records", held, n, records);
  CHECKF(ends == n && twice == 0, "%zu of %zu ends seen, %zu twice", ends, n, twice);
  CHECKF(records > 0, "no terminal event kept its record (they do until the bound)");
}

/* The state of `id` as pr_engine_get gives it, waiting up to 60 s for one
 * where `until` is true; PR_NSTATE when it never was. */
static pr_state_t state_when(pr_engine_t *e, uint64_t id, int (*until)(pr_state_t)) {
  for (uint64_t t = now_ms() + 60000; now_ms() < t; usleep(5000)) {
    pr_record_t *r = NULL;
    if (pr_engine_get(e, id, 0, &r) != 0) return PR_NSTATE;
    pr_state_t st = r->state;
    pr_record_free(r);
    if (until(st)) return st;
  }
  return PR_NSTATE;
}

static int is_running(pr_state_t st) { return st == PR_RUNNING; }

/* With every state event's record asked for (pr_engine_state_records), a
 * host that does not poll while the queue goes past its bound: the state
 * event that replaces an execution's queued one carries the latest record
 * (its end), never the replaced one's, and the queue stays within
 * PR_HOST_EVENTS_BYTES plus a small event per execution. Held executions
 * fill it (a record each, no process). */
static void test_host_queue_records_coalesced(void) {
  pr_engine_opts_t o = {.max_queued = 100000};
  pr_engine_t *e;
  CHECK_OK(pr_engine_new(&o, &e));
  CHECK_EQ(pr_engine_state_records(e, 1), 0);
  uint64_t x = start_sh(e, "exec sleep 60");
  CHECK_EQ(state_when(e, x, is_running), PR_RUNNING);
  pr_spec_t s = {.shell = "true", .hold = 1};
  size_t held = 0, bytes = 0, n = 0;
  uint64_t id = 0;
  while (bytes <= PR_HOST_EVENTS_BYTES && n < 90000) {
    for (int i = 0; i < 256; i++, n++) CHECK_OK(pr_engine_start(e, &s, &id));
    pr_record_t *r = NULL; /* a round trip: every start before it made its event */
    CHECK_OK(pr_engine_get(e, id, 0, &r));
    pr_record_free(r);
    pr_test_events_held(e, &held, &bytes);
  }
  CHECKF(bytes > PR_HOST_EVENTS_BYTES, "%zu executions queued only %zu bytes", n, bytes);
  CHECK_EQ(pr_engine_cancel(e, x, 0, 1, NULL), PR_CANCELING);
  CHECK(pr_state_terminal(state_when(e, x, pr_state_terminal)));
  pr_test_events_held(e, &held, &bytes);
  char seen[64] = "";
  int last_ok = 0, filler_records = 0;
  pr_event_t *evs[256];
  for (size_t k; (k = pr_engine_poll(e, evs, 256, 0)) > 0;) {
    for (size_t i = 0; i < k; i++) {
      pr_event_t *ev = evs[i];
      if (ev->type == PR_EV_STATE && ev->id == x) {
        snprintf(seen + strlen(seen), sizeof(seen) - strlen(seen), "%s%s", *seen ? "," : "",
                 pr_state_name(ev->state));
        if (pr_state_terminal(ev->state))
          last_ok = ev->record && ev->record->state == ev->state && ev->record->ended_at != 0 &&
                    ev->prev == PR_STARTING;
      } else if (ev->type == PR_EV_STATE) {
        filler_records += ev->record != NULL;
      }
      pr_event_free(ev);
    }
  }
  pr_engine_free(e);
  printf("# records past the bound: %zu executions, %zu events, %zu bytes; %d records\n", n + 1,
         held, bytes, filler_records);
  CHECKF(strcmp(seen, "queued,starting,canceled") == 0, "events of the live one: %s", seen);
  CHECKF(last_ok, "its end did not carry the latest record (state, ended_at, prev starting)");
  CHECKF(bytes <= PR_HOST_EVENTS_BYTES + (n + 1) * 256, "%zu bytes queued for %zu executions",
         bytes, n + 1);
}

/* A host that does not poll while executions with output end and the
 * registry drops them (history_limit 5): a queued output marker held its
 * ring, the bytes outside the bound of events not polled (300 x 64 KiB, 19
 * MiB, with no end). A marker gives its ring up when its execution leaves,
 * keeping what fits under PR_HOST_EVENTS_BYTES (at least one byte; the rest
 * counts as missed), and a poll still accounts for every byte of each
 * execution once, delivered or missed. */
static void test_host_queue_output_of_removed(void) {
  enum { N = 300, B = 65536, KEEP = 5 };
  pr_engine_opts_t o = {.history_limit = KEEP};
  pr_engine_t *e;
  CHECK_OK(pr_engine_new(&o, &e));
  const char *argv[] = {"head", "-c", "65536", "/dev/zero"};
  pr_spec_t s = {.argv = argv, .argc = 4, .kill_grace_ms = -1};
  uint64_t first = 0, id = 0;
  for (int i = 0; i < N; i++) {
    CHECK_OK(pr_engine_start(e, &s, &id));
    if (first == 0) first = id;
    if (i % 50 == 49) state_when(e, id, pr_state_terminal); /* at most 50 processes at once */
  }
  /* every one ended (a removed one ended before it was removed): the last
   * batch's others may still run when its last one ended */
  for (uint64_t k = first; k < first + N; k++) state_when(e, k, pr_state_terminal);
  size_t held = 0, bytes = 0;
  pr_test_events_held(e, &held, &bytes);
  uint64_t got[N] = {0};
  size_t delivered = 0;
  pr_event_t *evs[256];
  for (size_t k; (k = pr_engine_poll(e, evs, 256, 0)) > 0;) {
    for (size_t i = 0; i < k; i++) {
      pr_event_t *ev = evs[i];
      if (ev->type == PR_EV_OUTPUT && ev->id >= first && ev->id < first + N) {
        got[ev->id - first] += ev->len + ev->missed;
        delivered += ev->len;
      }
      pr_event_free(ev);
    }
  }
  pr_engine_free(e);
  int whole = 0;
  for (int i = 0; i < N; i++) whole += got[i] == B;
  printf(
      "# output of removed executions, not polled: %zu events hold %zu bytes (rings included) "
      "for %d x %d bytes; %zu delivered\n",
      held, bytes, N, B, delivered);
  CHECKF(bytes <= PR_HOST_EVENTS_BYTES + (size_t)KEEP * B + (size_t)N * 1024,
         "%zu events hold %zu bytes with their rings (bound %zu, %d records kept)", held, bytes,
         PR_HOST_EVENTS_BYTES, KEEP);
  CHECKF(whole == N, "%d of %d executions' bytes all accounted for (delivered or missed)", whole,
         N);
}

/* The engine's sendmsg (base/wire.c), interposed for one test: while
 * hold_spawn_send is set, a SPAWN from the engine waits until the far end of
 * its socket is gone (POLLHUP: the link or shepherd exited), as a loaded
 * machine does when it holds the engine thread between starting a target's
 * link and sending it the spawn, while the link refuses its transport and
 * exits. Every other send (and every send of the other tests) goes through
 * at once. */
static int hold_spawn_send; /* atomic */
ssize_t sendmsg(int fd, const struct msghdr *m, int flags) {
  static ssize_t (*real)(int, const struct msghdr *, int);
  if (real == NULL) real = (ssize_t(*)(int, const struct msghdr *, int))dlsym(RTLD_NEXT, "sendmsg");
  if (__atomic_load_n(&hold_spawn_send, __ATOMIC_ACQUIRE) && m->msg_iovlen > 0 &&
      m->msg_iov[0].iov_len >= sizeof(pr_wire_hdr_t)) {
    const pr_wire_hdr_t *h = m->msg_iov[0].iov_base;
    struct pollfd p = {fd, POLLRDHUP, 0};
    if (h->type == PR_W_SPAWN && h->from == 0)
      for (int i = 0; i < 60000 && !(p.revents & (POLLHUP | POLLRDHUP)); i++) poll(&p, 1, 1);
  }
  return real(fd, m, flags);
}

/* A target's link that refuses its transport (not a proctor relay there:
 * it sends LOST with why, and exits) before the engine thread sent it the
 * first spawn (held by the sendmsg above until the link is gone): the
 * execution ends failed/target_lost with the link's words, as when the
 * spawn was sent first, not failed/spawn_error "ESHEPHERD" (the old send
 * failed on the closed socket and ended it before the link's LOST and EOF
 * were read: the target tier's "the link refuses a relay of another byte
 * order" failed that way once in CI). */
static void test_link_gone_before_first_send(void) {
  char dir[300], hello[320], tr[700];
  CHECK(private_dir(dir, sizeof(dir)));
  snprintf(hello, sizeof(hello), "%s/hello", dir);
  FILE *f = fopen(hello, "w");
  CHECK(f != NULL);
  fprintf(f, "%-40s", "Welcome to the far side");
  fclose(f);
  snprintf(tr, sizeof(tr), "cat '%s'; exec sleep 60", hello);
  pr_engine_t *e;
  CHECK_OK(pr_engine_new(NULL, &e));
  __atomic_store_n(&hold_spawn_send, 1, __ATOMIC_RELEASE);
  pr_spec_t s = {.shell = "true", .target = "forged", .transport = tr, .kill_grace_ms = -1};
  uint64_t id = 0;
  int rc = pr_engine_start(e, &s, &id);
  outcome_t *o = calloc(2, sizeof(*o));
  int ended = rc == 0 && drain(e, o, 1, 0, 90000);
  __atomic_store_n(&hold_spawn_send, 0, __ATOMIC_RELEASE);
  pr_record_t *r = NULL;
  int got = ended && pr_engine_get(e, id, 0, &r) == 0;
  char why[400]; /* fits CHECKF's message (tap_why) */
  snprintf(why, sizeof(why), "%s %s: %s", pr_state_name(o[1].state),
           got && r->reason ? r->reason : "?", got && r->error ? r->error : "");
  int ok = got && r->state == PR_FAILED && strcmp(r->reason, "target_lost") == 0 && r->error &&
           strstr(r->error, "not a proctor relay") != NULL;
  pr_record_free(r);
  free_outcomes(o, 1);
  pr_engine_free(e);
  unlink(hello);
  rmdir(dir);
  CHECK_OK(rc);
  CHECKF(ok, "ended %s", why);
}

/* Remove a private test directory and the files in it. */
static void rm_dir(const char *dir) {
  DIR *d = opendir(dir);
  struct dirent *de;
  char p[512];
  while (d && (de = readdir(d)) != NULL) {
    if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
    snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
    unlink(p);
  }
  if (d) closedir(d);
  rmdir(dir);
}

/* close() writes every history frame still queued before it returns: the
 * ends of executions that finished while the writer was busy are on disk. */
static void test_close_writes_queued_history(void) {
  char dir[256], path[300];
  CHECK(private_dir(dir, sizeof(dir)));
  snprintf(path, sizeof(path), "%s/history.mpk", dir);
  pr_engine_opts_t opts = {.history_file = path};
  pr_engine_t *e;
  size_t n = 20, nrec = 0, completed = 0;
  int ok = 0, held = -1;
  if (pr_engine_new(&opts, &e) == 0) {
    held = pr_test_hold_journal(e);
    for (size_t i = 1; i <= n; i++) start_sh(e, "exit 0");
    outcome_t *o = calloc(n + 1, sizeof(*o));
    ok = drain(e, o, n, 0, 30000);
    free_outcomes(o, n);
    pr_engine_free(e); /* the queued frames: 20 starts and 20 ends */
    if (pr_engine_new(&opts, &e) == 0) {
      pr_record_t **v;
      if (pr_engine_list(e, 0, -1, &v, &nrec) == 0) {
        for (size_t i = 0; i < nrec; i++) completed += v[i]->state == PR_COMPLETED;
        pr_records_free(v, nrec);
      }
      pr_engine_free(e);
    }
  }
  rm_dir(dir);
  CHECK_EQ(held, 0);
  CHECK(ok);
  CHECKF(nrec == n, "%zu of %zu records in the history file", nrec, n);
  CHECKF(completed == n, "%zu of %zu came back completed", completed, n);
}

/* Wait until ids first .. first+n-1 of e are terminal (events are dropped).
 * Returns 1 when they all ended within timeout_ms. */
static int ended_all(pr_engine_t *e, uint64_t first, size_t n, int timeout_ms) {
  uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
  pr_event_t *evs[256];
  for (;;) {
    size_t done = 0;
    for (size_t i = 0; i < n; i++) {
      pr_record_t *r = NULL;
      if (pr_engine_get(e, first + i, 0, &r) == 0) done += pr_state_terminal(r->state);
      pr_record_free(r);
    }
    if (done == n) return 1;
    if (now_ms() >= deadline) return 0;
    pr_engine_wait(e, 100);
    size_t k = pr_engine_poll(e, evs, 256, 0);
    for (size_t i = 0; i < k; i++) pr_event_free(evs[i]);
  }
}

/* Two engines on one history at once: each takes a slot (its own file, its
 * own id range), and a third engine loads the runs of both, merged, with no
 * id twice (ASan: the merge frees what it drops; TSan: two writer threads). */
static void test_two_engines_share_history(void) {
  char dir[256], path[300];
  CHECK(private_dir(dir, sizeof(dir)));
  snprintf(path, sizeof(path), "%s/history.mpk", dir);
  pr_engine_opts_t opts = {.history_file = path};
  pr_engine_t *a = NULL, *b = NULL, *c = NULL;
  size_t n = 5, nrec = 0, low = 0, high = 0;
  int ok = 0;
  /* Both engines are open at once; their jobs run one engine after the
   * other: two shepherd links receiving at the same moment make TSan report
   * recvmsg in csrc/base/wire.c (two engines in one process; not the store's). */
  if (pr_engine_new(&opts, &a) == 0) {
    for (size_t i = 0; i < n; i++) start_sh(a, "exit 0");
    outcome_t *o = calloc(n + 1, sizeof(*o));
    ok = drain(a, o, n, 0, 30000);
    free_outcomes(o, n);
    if (ok && pr_engine_new(&opts, &b) == 0) {
      for (size_t i = 0; i < n; i++) start_sh(b, "exit 0");
      ok = ended_all(b, 1000000001u, n, 30000);
    }
  }
  pr_engine_free(a);
  pr_engine_free(b);
  if (pr_engine_new(&opts, &c) == 0) {
    pr_record_t **v;
    if (pr_engine_list(c, 0, -1, &v, &nrec) == 0) {
      for (size_t i = 0; i < nrec; i++) {
        low += v[i]->id >= 1 && v[i]->id <= n;
        high += v[i]->id >= 1000000001u && v[i]->id <= 1000000000u + n;
      }
      pr_records_free(v, nrec);
    }
    pr_engine_free(c);
  }
  snprintf(path, sizeof(path), "%s/history.mpk.1", dir);
  int second = access(path, F_OK) == 0;
  rm_dir(dir);
  CHECK(ok);
  CHECKF(second, "the second engine's slot file %s", path);
  CHECKF(nrec == 2 * n, "%zu of %zu records loaded", nrec, 2 * n);
  CHECKF(low == n && high == n, "ids: %zu in slot 0's range, %zu in slot 1's", low, high);
}

/* The history gate (pr_test_history_gate): the load waits until the test
 * releases it (at most 20 s, so an engine that loads inside pr_engine_new
 * still returns and the test says so instead of hanging). */
static int gate_entered, gate_released, gate_passed;

static void history_gate(void) {
  __atomic_store_n(&gate_entered, 1, __ATOMIC_SEQ_CST);
  for (int i = 0; i < 20000 && !__atomic_load_n(&gate_released, __ATOMIC_SEQ_CST); i++)
    usleep(1000);
  __atomic_store_n(&gate_passed, 1, __ATOMIC_SEQ_CST);
}

/* A delete asked from another host thread while the load is held. */
typedef struct {
  pr_engine_t *e;
  uint64_t id;
  int rc, answered;
} del_t;

static void *delete_thread(void *arg) {
  del_t *d = arg;
  d->rc = (int)pr_engine_delete(d->e, d->id, 0);
  __atomic_store_n(&d->answered, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

/* Wait (bounded, for a failure message) until executions a and b (0: none)
 * are terminal, polling the engine; *running is set once a was seen running. */
static int wait_terminal2(pr_engine_t *e, uint64_t a, uint64_t b, int *running, int timeout_ms) {
  uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
  pr_event_t *evs[64];
  int done_a = 0, done_b = b == 0;
  while (!(done_a && done_b) && now_ms() < deadline) {
    pr_engine_wait(e, 100);
    size_t k = pr_engine_poll(e, evs, 64, 0);
    for (size_t i = 0; i < k; i++) {
      if (evs[i]->type == PR_EV_STATE && evs[i]->id == a) {
        if (evs[i]->state == PR_RUNNING) *running = 1;
        if (pr_state_terminal(evs[i]->state)) done_a = 1;
      }
      if (evs[i]->type == PR_EV_STATE && evs[i]->id == b && pr_state_terminal(evs[i]->state))
        done_b = 1;
      pr_event_free(evs[i]);
    }
  }
  return done_a && done_b;
}

static int wait_terminal(pr_engine_t *e, uint64_t id, int *running, int timeout_ms) {
  return wait_terminal2(e, id, 0, running, timeout_ms);
}

/* Lines in `path` (0 when it does not exist). */
static int count_lines(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  int n = 0, ch;
  while ((ch = fgetc(f)) != EOF) n += ch == '\n';
  fclose(f);
  return n;
}

/* shepherd_early: the engine thread starts the shepherd before it takes its
 * first command, so once a synchronous call returned it is up with no start
 * asked; the first start then runs on it (no second one). Without the
 * option nothing starts until the first spawn. A shepherd that cannot start
 * is the first start's spawn error, as without it. A wrapper around the
 * shepherd notes each start in a file; the engine waits for the wrapper (the
 * shepherd's first process) to exit, so the note is there when ensure returns. */
static void test_shepherd_early(void) {
  char self[512], dir[300], wrapper[320], starts[320], script[1200];
  CHECK(build_dir(self, sizeof(self)));
  CHECK(private_dir(dir, sizeof(dir)));
  snprintf(wrapper, sizeof(wrapper), "%s/shepherd", dir);
  snprintf(starts, sizeof(starts), "%s/starts", dir);
  snprintf(script, sizeof(script),
           "#!/bin/sh\necho up >> '%s'\nexec '%s/proctor-shepherd' \"$@\"\n", starts, self);
  FILE *f = fopen(wrapper, "w");
  CHECK(f != NULL);
  if (f == NULL) return;
  fputs(script, f);
  fclose(f);
  CHECK(chmod(wrapper, 0755) == 0);
  for (int early = 0; early <= 1; early++) {
    unlink(starts);
    pr_engine_opts_t opts = {.shepherd_path = wrapper, .shepherd_early = early};
    pr_engine_t *e;
    CHECK_OK(pr_engine_new(&opts, &e));
    pr_record_t **recs = NULL;
    size_t n = 0;
    CHECK_OK(pr_engine_list(e, 0, -1, &recs, &n)); /* a command: the thread is past its start */
    pr_records_free(recs, n);
    CHECKF(count_lines(starts) == early, "shepherd_early=%d: %d shepherd(s) before any start",
           early, count_lines(starts));
    uint64_t id = start_sh(e, "exit 0");
    int running = 0;
    CHECK(id != 0 && wait_terminal(e, id, &running, 10000));
    pr_record_t *r = NULL;
    CHECK_OK(pr_engine_get(e, id, 0, &r));
    CHECKF(r && r->state == PR_COMPLETED, "shepherd_early=%d: the first run ended %s", early,
           r ? pr_state_name(r->state) : "unknown");
    pr_record_free(r);
    CHECKF(count_lines(starts) == 1, "shepherd_early=%d: %d shepherd(s) after the first run", early,
           count_lines(starts));
    pr_engine_free(e);
  }
  /* no shepherd to start: the engine starts, the first run says why */
  pr_engine_opts_t bad = {.shepherd_path = "/nonexistent/proctor-shepherd", .shepherd_early = 1};
  pr_engine_t *e;
  CHECK_OK(pr_engine_new(&bad, &e));
  uint64_t id = start_sh(e, "exit 0");
  int running = 0;
  CHECK(id != 0 && wait_terminal(e, id, &running, 10000));
  pr_record_t *r = NULL;
  CHECK_OK(pr_engine_get(e, id, 0, &r));
  CHECKF(
      r && r->state == PR_FAILED && r->error && strstr(r->error, "/nonexistent/proctor-shepherd"),
      "a missing shepherd: the first run ended %s (%s)", r ? pr_state_name(r->state) : "unknown",
      r && r->error ? r->error : "no error");
  pr_record_free(r);
  pr_engine_free(e);
}

/* pr_engine_new returns before the history is read (the engine thread reads
 * it): a start meanwhile gets the id after the file's last one at once, and
 * once the load is let go every record and output tail is there. */
static void test_history_loads_after_new(void) {
  char dir[256], path[300];
  CHECK(private_dir(dir, sizeof(dir)));
  snprintf(path, sizeof(path), "%s/history.mpk", dir);
  pr_engine_opts_t opts = {.history_file = path};
  pr_engine_t *e;
  size_t n = 8, nrec = 0, prev = 0;
  int ok = 0, passed_at_new = -1, loading = -1;
  uint64_t id = 0;
  char *data = NULL;
  size_t len = 0;
  if (pr_engine_new(&opts, &e) == 0) {
    for (size_t i = 1; i <= n; i++) start_sh(e, "echo tail-$$-of-a-run");
    outcome_t *o = calloc(n + 1, sizeof(*o));
    ok = drain(e, o, n, 0, 30000);
    free_outcomes(o, n);
    pr_engine_free(e);
  }
  gate_entered = gate_released = gate_passed = 0;
  pr_test_history_gate(history_gate);
  if (ok && pr_engine_new(&opts, &e) == 0) {
    passed_at_new = __atomic_load_n(&gate_passed, __ATOMIC_SEQ_CST);
    loading = pr_engine_history_loading(e);
    id = start_sh(e, "exit 0");
    __atomic_store_n(&gate_released, 1, __ATOMIC_SEQ_CST);
    pr_record_t **v;
    if (pr_engine_list(e, 0, -1, &v, &nrec) == 0) {
      for (size_t i = 0; i < nrec; i++) prev += v[i]->previous_session;
      pr_records_free(v, nrec);
    }
    uint64_t next, missed;
    pr_engine_read(e, 1, 0, PR_STDOUT, 0, 1 << 20, &data, &len, &next, &missed, NULL);
    wait_terminal(e, id, &(int){0}, 30000); /* the loaded records send no event */
    pr_engine_free(e);
  }
  pr_test_history_gate(NULL);
  rm_dir(dir);
  CHECK(ok);
  CHECKF(passed_at_new == 0, "the history was read before pr_engine_new returned (gate %d)",
         passed_at_new);
  CHECKF(loading == 1, "pr_engine_history_loading said %d while the load waited", loading);
  CHECKF(id == n + 1, "a start during the load got id %llu, want %zu", (unsigned long long)id,
         n + 1);
  CHECKF(nrec == n + 1 && prev == n, "%zu records (%zu from the history), want %zu (%zu)", nrec,
         prev, n + 1, n);
  CHECKF(len > 0 && memcmp(data, "tail-", 5) == 0, "record 1's tail: %.*s", (int)len,
         data ? data : "");
  free(data);
}

/* A run started while the history loads runs at once (its id is already
 * reserved): it reaches running and ends, and get, delete and a list of one
 * live state answer for it, while the load is held. A delete of a history
 * record asked meanwhile (from another thread) waits for the load, commands
 * behind it do not, and then it deletes the record. The file stays
 * consistent: the next engine finds the old records (less the deleted one)
 * and the run kept, with ids unique and in order. */
static void test_history_start_during_load(void) {
  char dir[256], path[300];
  CHECK(private_dir(dir, sizeof(dir)));
  snprintf(path, sizeof(path), "%s/history.mpk", dir);
  pr_engine_opts_t opts = {.history_file = path};
  pr_engine_t *e;
  size_t n = 6, nlive = 9, nrec = 0, nprev = 0;
  int ok = 0, ran = 0, ended = 0, got = -1, got2 = -1, del = -1, gate_at = -1, started = 0;
  int ordered = 1, parked = 0;
  uint64_t a = 0, b = 0, last = 0;
  if (pr_engine_new(&opts, &e) == 0) {
    for (size_t i = 1; i <= n; i++) start_sh(e, "echo tail-$$-of-a-run");
    outcome_t *o = calloc(n + 1, sizeof(*o));
    ok = drain(e, o, n, 0, 30000);
    free_outcomes(o, n);
    pr_engine_free(e);
  }
  gate_entered = gate_released = gate_passed = 0;
  pr_test_history_gate(history_gate);
  del_t d = {.id = 1, .rc = -1};
  pthread_t t;
  if (ok && pr_engine_new(&opts, &e) == 0) {
    a = start_sh(e, "echo kept");
    b = start_sh(e, "echo deleted");
    ended = wait_terminal2(e, a, b, &ran, 20000);
    pr_record_t *r = NULL, **v = NULL;
    got = pr_engine_get(e, a, 0, &r);
    pr_record_free(r);
    del = (int)pr_engine_delete(e, b, 0);
    if (pr_engine_list(e, 0, PR_RUNNING, &v, &nlive) == 0) pr_records_free(v, nlive);
    d.e = e;
    uint64_t w = pr_engine_wakeups(e), deadline = now_ms() + 20000;
    started = pthread_create(&t, NULL, delete_thread, &d) == 0;
    while (started && pr_engine_wakeups(e) == w && now_ms() < deadline) usleep(1000);
    got2 = pr_engine_get(e, a, 0, &r); /* answered after the delete in the queue was handled */
    pr_record_free(r);
    parked = !__atomic_load_n(&d.answered, __ATOMIC_SEQ_CST);
    gate_at = __atomic_load_n(&gate_passed, __ATOMIC_SEQ_CST);
    __atomic_store_n(&gate_released, 1, __ATOMIC_SEQ_CST);
    if (started) pthread_join(t, NULL);
    pr_engine_free(e);
  }
  pr_test_history_gate(NULL);
  if (ok && pr_engine_new(&opts, &e) == 0) {
    pr_record_t **v;
    if (pr_engine_list(e, 0, -1, &v, &nrec) == 0) {
      for (size_t i = 0; i < nrec; i++) {
        nprev += v[i]->previous_session;
        ordered = ordered && v[i]->id > last && v[i]->id != 1 && v[i]->id != b;
        last = v[i]->id;
      }
      pr_records_free(v, nrec);
    }
    pr_engine_free(e);
  }
  rm_dir(dir);
  CHECK(ok);
  CHECKF(a == n + 1 && b == n + 2, "ids during the load: %llu, %llu; want %zu, %zu",
         (unsigned long long)a, (unsigned long long)b, n + 1, n + 2);
  CHECKF(ended && ran, "the run started during the load: ended %d, seen running %d", ended, ran);
  CHECKF(gate_at == 0, "the new runs ran, were got and deleted only after the load (gate %d)",
         gate_at);
  CHECKF(got == 0, "get of the new run during the load: %d", got);
  CHECKF(del == PR_DELETED, "delete of the new run during the load: %d", del);
  CHECKF(nlive == 0, "list of running executions during the load: %zu", nlive);
  CHECKF(got2 == 0 && started && parked && d.rc == PR_DELETED,
         "delete of record 1 asked during the load: waited %d, then %d (get %d)", parked, d.rc,
         got2);
  CHECKF(nrec == n && nprev == n && ordered,
         "the next engine: %zu records (%zu previous), ids in order without 1 and %llu: %d", nrec,
         nprev, (unsigned long long)b, ordered);
}

/* The fifth frame of a load waits here until the engine closes (its stop
 * flag; at most 20 s): a load stopped between frames decodes no more. */
static int frames_seen;

static void slow_frame(const int *stop) {
  if (__atomic_add_fetch(&frames_seen, 1, __ATOMIC_SEQ_CST) != 5) return;
  for (int i = 0; i < 20000 && !(stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE)); i++)
    usleep(1000);
}

/* Closing an engine whose history still loads stops the load at its next
 * frame: close does not wait for the rest of the file. The file is left
 * whole (the compaction a delete asked for is not run on a partial index),
 * and a run of the closed session is appended to it. */
static void test_close_stops_history_load(void) {
  char dir[256], path[300];
  CHECK(private_dir(dir, sizeof(dir)));
  snprintf(path, sizeof(path), "%s/history.mpk", dir);
  pr_engine_opts_t opts = {.history_file = path};
  pr_engine_t *e;
  size_t n = 200, nrec = 0, nprev = 0;
  int ok = 0, seen = -1, del = -1;
  uint64_t id = 0, gone = 0;
  if (pr_engine_new(&opts, &e) == 0) { /* records without a process: held, then canceled */
    const char *argv[] = {"true"};
    pr_spec_t s = {.argv = argv, .argc = 1, .kill_grace_ms = -1, .hold = 1};
    uint64_t x;
    ok = 1;
    for (size_t i = 0; i < n && ok; i++)
      ok = pr_engine_start(e, &s, &x) == 0 &&
           pr_engine_cancel(e, x, 0, 1, NULL) != PR_CANCEL_NOT_FOUND;
    pr_engine_free(e);
  }
  frames_seen = 0;
  pr_test_history_frame(slow_frame);
  if (ok && pr_engine_new(&opts, &e) == 0) {
    id = start_sh(e, "exit 0");
    gone = start_sh(e, "exit 0");
    wait_terminal2(e, id, gone, &(int){0}, 20000);
    del = (int)pr_engine_delete(e, gone, 0); /* a tombstone and a compaction, queued */
    for (int i = 0; i < 20000 && __atomic_load_n(&frames_seen, __ATOMIC_SEQ_CST) < 5; i++)
      usleep(1000);
    pr_engine_free(e); /* while the load waits at its fifth frame */
    seen = __atomic_load_n(&frames_seen, __ATOMIC_SEQ_CST);
  }
  pr_test_history_frame(NULL);
  if (ok && pr_engine_new(&opts, &e) == 0) {
    pr_record_t **v;
    if (pr_engine_list(e, 0, -1, &v, &nrec) == 0) {
      for (size_t i = 0; i < nrec; i++) nprev += v[i]->previous_session;
      pr_records_free(v, nrec);
    }
    pr_engine_free(e);
  }
  rm_dir(dir);
  CHECK(ok);
  CHECKF(seen == 5, "frames decoded before close returned: %d of %zu (it waits at the fifth)", seen,
         2 * n);
  CHECKF(del == PR_DELETED, "delete of a run during the load: %d", del);
  CHECKF(id == n + 1 && nrec == n + 1 && nprev == n + 1,
         "after the stopped load: %zu records (%zu previous), want %zu; the run's id %llu", nrec,
         nprev, n + 1, (unsigned long long)id);
}

/* A loaded record's output tail stays in the history file and is read from
 * it (no copy in memory): after a delete made the writer compact the file (a
 * new file renamed over it), the other records' tails still read whole. */
static void test_loaded_tails_read_from_file(void) {
  char dir[256], path[300];
  CHECK(private_dir(dir, sizeof(dir)));
  snprintf(path, sizeof(path), "%s/history.mpk", dir);
  pr_engine_opts_t opts = {.history_file = path};
  pr_engine_t *e;
  size_t n = 3;
  int ok = 0, renamed = 0, good = 0;
  if (pr_engine_new(&opts, &e) == 0) {
    for (size_t i = 1; i <= n; i++) start_sh(e, "printf tail-of-a-run");
    outcome_t *o = calloc(n + 1, sizeof(*o));
    ok = drain(e, o, n, 0, 30000);
    free_outcomes(o, n);
    pr_engine_free(e);
  }
  struct stat st0, st;
  if (ok && stat(path, &st0) == 0 && pr_engine_new(&opts, &e) == 0) {
    pr_record_t **v;
    size_t nrec = 0;
    if (pr_engine_list(e, 0, -1, &v, &nrec) == 0) pr_records_free(v, nrec); /* the load is over */
    ok = pr_engine_delete(e, 1, 0) == PR_DELETED;
    for (int i = 0; i < 20000 && !renamed; i++) {
      renamed = stat(path, &st) == 0 && st.st_ino != st0.st_ino;
      if (!renamed) usleep(1000);
    }
    for (uint64_t id = 2; id <= n; id++) {
      char *data = NULL;
      size_t len = 0;
      uint64_t next, missed;
      good +=
          pr_engine_read(e, id, 0, PR_STDOUT, 0, 1 << 20, &data, &len, &next, &missed, NULL) == 0 &&
          len == 13 && memcmp(data, "tail-of-a-run", 13) == 0 && next == 13 && missed == 0;
      free(data);
    }
    pr_engine_free(e);
  }
  rm_dir(dir);
  CHECK(ok);
  CHECKF(renamed, "the delete's compaction did not replace %s", path);
  CHECKF(good == (int)n - 1, "%d of %zu tails read whole after the compaction", good, n - 1);
}

/* Secret sources that never answer: secret_timeout_ms ends the execution
 * failed/secret_unavailable, timeout_ms (from starting) ends it timed_out,
 * and an engine closed while one is read ends it too. Each path closes the
 * reads' timer and frees the hidden execution (ASan: no leak; TSan: no race). */
static void test_secret_source_bounds(void) {
  pr_engine_opts_t opts = {.secret_timeout_ms = 200};
  pr_engine_t *e;
  CHECK(pr_engine_new(&opts, &e) == 0);
  const char *cmd[] = {"sleep", "600"};
  pr_secret_source_t src = {.name = "T", .command = cmd, .ncommand = 2};
  const char *argv[] = {"true"};
  pr_spec_t s = {.argv = argv, .argc = 1, .kill_grace_ms = -1, .sources = &src, .nsources = 1};
  uint64_t a = 0, b = 0, c = 0;
  CHECK(pr_engine_start(e, &s, &a) == 0);
  s.timeout_ms = 100; /* before the 200 ms of the source's own bound */
  CHECK(pr_engine_start(e, &s, &b) == 0);
  outcome_t *o = calloc(3, sizeof(*o));
  int ok = drain(e, o, 2, 0, 30000);
  pr_state_t sa = o[1].state, sb = o[2].state;
  free_outcomes(o, 2);
  pr_record_t *r = NULL;
  CHECK(pr_engine_get(e, a, 0, &r) == 0);
  int named = r->reason && strcmp(r->reason, "secret_unavailable") == 0 && r->error &&
              strstr(r->error, "secret T: `sleep` gave no value within secret_timeout_ms (200 ms)");
  pr_record_free(r);
  s.timeout_ms = 0;
  opts.secret_timeout_ms = 600000;
  pr_engine_free(e);
  CHECK(pr_engine_new(&opts, &e) == 0);
  CHECK(pr_engine_start(e, &s, &c) == 0);
  pr_engine_free(e); /* closed while its source is read */
  CHECK(ok);
  CHECKF(sa == PR_FAILED, "bounded by secret_timeout_ms: %s", pr_state_name(sa));
  CHECK(named);
  CHECKF(sb == PR_TIMED_OUT, "bounded by timeout_ms: %s", pr_state_name(sb));
}

/* Every cell of the lifecycle table (engine/lifecycle.h): an execution
 * built in each row gets each event through its real handler, and ends with
 * the verdict, cancel answer and end this table (written from the header's)
 * says. The verdict is a pr_state_t (-1: none); an exit is status 3. */
static void test_lifecycle_table(void) {
  enum { N = -1, C = PR_CANCELED, T = PR_TIMED_OUT, F = PR_FAILED, K = PR_COMPLETED };
  enum { G = PR_CANCELING, AC = PR_ALREADY_CANCELING, AT = PR_ALREADY_TERMINAL, X = -1 };
  static const char *rows[] = {"QUEUED",     "STARTING", "RUNNING", "STOP_SPAWN", "GRACE", "KILLED",
                               "STOP_DRAIN", "DRAINING", "PARKED",  "FAILING",    "ENDED"};
  static const char *events[] = {"cancel", "force", "exit", "empty", "timer", "spawned", "lost"};
  /* {cancel result, verdict after, ended} for cancel, force, exit, empty, timer, spawned, lost */
  static const int want[11][7][3] = {
      {{G, C, 1}, {G, C, 1}, {X, N, 0}, {X, N, 0}, {X, N, 0}, {X, N, 0}, {X, N, 0}},
      {{G, C, 0}, {G, C, 0}, {X, F, 1}, {X, N, 0}, {X, T, 0}, {X, N, 0}, {X, F, 1}},
      {{G, C, 0}, {G, C, 0}, {X, F, 1}, {X, N, 0}, {X, T, 0}, {X, N, 0}, {X, F, 1}},
      {{AC, C, 0}, {AC, C, 0}, {X, C, 1}, {X, C, 0}, {X, C, 0}, {X, C, 0}, {X, F, 1}},
      {{AC, C, 0}, {AC, C, 0}, {X, C, 0}, {X, C, 0}, {X, C, 0}, {X, C, 0}, {X, F, 1}},
      {{AC, T, 0}, {AC, T, 0}, {X, T, 1}, {X, T, 0}, {X, T, 0}, {X, T, 0}, {X, F, 1}},
      {{AC, C, 0}, {AC, C, 0}, {X, C, 0}, {X, C, 0}, {X, C, 1}, {X, C, 0}, {X, F, 1}},
      {{G, C, 0}, {G, C, 0}, {X, F, 0}, {X, F, 0}, {X, F, 1}, {X, F, 0}, {X, F, 1}},
      {{G, C, 1}, {G, C, 1}, {X, N, 0}, {X, N, 0}, {X, N, 0}, {X, N, 0}, {X, F, 1}},
      {{AT, F, 0}, {AT, F, 0}, {X, F, 1}, {X, F, 0}, {X, F, 0}, {X, F, 0}, {X, F, 1}},
      {{AT, K, 1}, {AT, K, 1}, {X, K, 1}, {X, K, 1}, {X, K, 1}, {X, K, 1}, {X, K, 1}},
  };
  int nrow, nev;
  pr_test_lc_size(&nrow, &nev);
  CHECK_EQ(nrow, 11); /* a new row or event needs its line here */
  CHECK_EQ(nev, 7);
  for (int r = 0; r < nrow; r++) {
    for (int ev = 0; ev < nev; ev++) {
      pr_test_lc_out_t o;
      CHECKF(pr_test_lc_fire(r, ev, &o) == 0, "row %s cannot be built", rows[r]);
      const int *w = want[r][ev];
      CHECKF(o.result == w[0] && o.after == w[1] && o.ended == w[2],
             "%s x %s: result %d verdict %d ended %d, want %d %d %d", rows[r], events[ev], o.result,
             o.after, o.ended, w[0], w[1], w[2]);
    }
  }
}

/* Whether `pid` runs (exists and is not a zombie). */
static int running(pid_t pid) {
  char path[64], buf[256];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  return p && p[1] == ' ' && p[2] != 'Z';
}

/* The pid a target's transport wrote into `file` (0: none yet). */
static pid_t pid_in(const char *file) {
  FILE *f = fopen(file, "r");
  int pid = 0;
  if (f && fscanf(f, "%d", &pid) != 1) pid = 0;
  if (f) fclose(f);
  return (pid_t)pid;
}

/* engine.target_idle_ms: a target's link that holds no execution closes after the
 * idle time (its relay exits; the execution stays completed, not lost) and the next
 * run on the target opens a new one. The idle timer and the link's teardown run on
 * the engine thread while this thread polls (TSan). Condition waits only. */
static void test_target_idle_close(void) {
  char self[512], dir[300], pidf[320], tr[1200];
  CHECK(build_dir(self, sizeof(self))); /* the shepherd is here */
  CHECK(private_dir(dir, sizeof(dir)));
  snprintf(pidf, sizeof(pidf), "%s/relay.pid", dir);
  /* the link runs "exec TRANSPORT": one command, which writes its pid and becomes the relay */
  snprintf(tr, sizeof(tr), "sh -c 'echo $$ > \"%s\"; exec \"%s/proctor-shepherd\" --relay'", pidf,
           self);
  pr_engine_opts_t opts = {.target_idle_ms = 100};
  pr_engine_t *e;
  CHECK_OK(pr_engine_new(&opts, &e));
  outcome_t *o = calloc(3, sizeof(*o));
  pr_spec_t s = {.shell = "echo one", .target = "idle", .transport = tr, .kill_grace_ms = -1};
  uint64_t id = 0;
  CHECK_OK(pr_engine_start(e, &s, &id));
  CHECK(drain(e, o, 1, 1, 60000));
  pr_record_t *r = NULL;
  CHECK_OK(pr_engine_get(e, id, 0, &r));
  CHECKF(r->state == PR_COMPLETED, "%s: %s", r->reason, r->error ? r->error : "");
  pr_record_free(r);
  pid_t first = pid_in(pidf);
  CHECK(first > 0);
  /* the link closes once idle: its relay exits (events still polled meanwhile) */
  uint64_t deadline = now_ms() + 60000;
  pr_event_t *evs[64];
  while (running(first) && now_ms() < deadline) {
    pr_engine_wait(e, 50);
    size_t k = pr_engine_poll(e, evs, 64, 0);
    for (size_t i = 0; i < k; i++) {
      if (evs[i]->id == id && evs[i]->type == PR_EV_STATE) o[1].terminal++;
      pr_event_free(evs[i]);
    }
  }
  CHECKF(!running(first), "the idle relay %d still runs", (int)first);
  s.shell = "echo two";
  CHECK_OK(pr_engine_start(e, &s, &id));
  CHECK_EQ(id, 2);
  CHECK(drain(e, o, 2, 1, 60000));
  CHECK_EQ(o[1].state, PR_COMPLETED);
  CHECK_EQ(o[1].terminal, 1); /* closing an idle link loses nothing */
  CHECK_EQ(o[2].state, PR_COMPLETED);
  CHECK(o[2].data && strcmp(o[2].data, "two\n") == 0);
  pid_t second = pid_in(pidf);
  CHECKF(second > 0 && second != first, "a new relay: %d after %d", (int)second, (int)first);
  free_outcomes(o, 2);
  pr_engine_close(e);
  pr_engine_free(e);
  unlink(pidf);
  rmdir(dir);
}

/* The host reads what a poll skipped from the output event's ring itself
 * (pr_event_output, pr_output_read: the ring's own mutex, never the engine
 * thread), while the engine writes and spills that ring: 1 KiB polls of a
 * `seq` flood, each gap before an event read from the handle, give back the
 * whole stream in order. The handle outlives its execution (deleted) and its
 * engine (freed): the bytes are still there, and ASan/TSan see no use after
 * free when the last reference goes. */
static void test_output_read_on_host(void) {
  char dir[256];
  CHECK(private_dir(dir, sizeof(dir)));
  unsigned n = 200000 / (unsigned)scale;
  size_t total = 0; /* bytes of `seq 1 n` */
  for (unsigned i = 1; i <= n; i++) {
    char b[16];
    total += (size_t)snprintf(b, sizeof(b), "%u\n", i);
  }
  pr_engine_opts_t opts = {.output_limit = 4 << 20, .output_memory = 4096, .spill_dir = dir};
  pr_engine_t *e;
  CHECK(pr_engine_new(&opts, &e) == 0);
  char cmd[64];
  snprintf(cmd, sizeof(cmd), "seq 1 %u", n);
  uint64_t id = start_sh(e, cmd);
  CHECK_EQ(id, 1);
  char *got = malloc(total + 1);
  CHECK(got != NULL);
  size_t have = 0;
  int ended = 0, holes = 0, bad = 0;
  pr_output_t *o = NULL;
  uint64_t deadline = now_ms() + 60000;
  pr_event_t *evs[64];
  while (!ended && now_ms() < deadline) {
    pr_engine_wait(e, 100);
    size_t k = pr_engine_poll(e, evs, 64, 1024);
    for (size_t i = 0; i < k; i++) {
      pr_event_t *ev = evs[i];
      if (ev->type == PR_EV_STATE && pr_state_terminal(ev->state)) ended = 1;
      if (ev->type == PR_EV_OUTPUT) {
        if (o == NULL) o = pr_event_output(ev);
        if (ev->offset > have) holes++;
        while (o && ev->offset > have) { /* the gap: from the ring, on this thread */
          char *d;
          size_t len;
          uint64_t next, missed;
          size_t want = ev->offset - have < 700 ? (size_t)(ev->offset - have) : 700;
          if (pr_output_read(o, have, want, &d, &len, &next, &missed) != 0 || missed != 0 ||
              len == 0 || have + len > total) {
            bad++;
            free(d);
            break;
          }
          memcpy(got + have, d, len);
          have += len;
          free(d);
        }
        if (ev->offset == have && have + ev->len <= total) {
          memcpy(got + have, ev->data, ev->len);
          have += ev->len;
        } else {
          bad++;
        }
      }
      pr_event_free(ev);
    }
  }
  char *want = malloc(total + 1);
  CHECK(want != NULL);
  size_t w = 0;
  for (unsigned i = 1; i <= n; i++) w += (size_t)snprintf(want + w, total + 1 - w, "%u\n", i);
  CHECK(ended);
  CHECK(o != NULL);
  CHECKF(bad == 0 && have == total && memcmp(got, want, total) == 0,
         "%d bad events, %zu of %zu bytes, %d holes", bad, have, total, holes);
  CHECKF(holes > 0, "%d holes (1 KiB polls of %zu bytes)", holes, total);
  char *d;
  size_t len;
  uint64_t next, missed;
  /* pr_engine_read hands over the same ring, with a reference of its own */
  pr_output_t *r2 = NULL;
  CHECK_EQ(pr_engine_read(e, id, 0, PR_STDOUT, 0, 10, &d, &len, &next, &missed, &r2), 0);
  CHECKF(r2 == o && len == 10 && memcmp(d, want, 10) == 0, "read's ring %p, the events' %p",
         (void *)r2, (void *)o);
  free(d);
  pr_output_release(r2);
  /* the execution deleted, then the engine freed: the handle still reads the ring */
  CHECK_EQ(pr_engine_delete(e, id, 0), PR_DELETED);
  r2 = o;
  CHECK_EQ(pr_engine_read(e, id, 0, PR_STDOUT, 0, 10, &d, &len, &next, &missed, &r2), PR_ENOENT);
  CHECK(r2 == NULL);
  pr_engine_free(e);
  int rc = o ? pr_output_read(o, 0, total + 10, &d, &len, &next, &missed) : -1;
  CHECKF(rc == 0 && len == total && next == total && missed == 0 && memcmp(d, want, total) == 0,
         "after delete and free: rc %d, %zu bytes, next %ju", rc, len, (uintmax_t)next);
  if (rc == 0) free(d);
  pr_output_release(o);
  pr_output_release(NULL);
  free(got);
  free(want);
  rm_dir(dir);
}

/* ---- the history load in bounded chunks --------------------------------------------- */

/* A history frame ([fnv1a32(payload), bin payload], store/history.h) of the
 * map packed in b, appended to f. */
static void hist_frame(msgpack_sbuffer *f, const msgpack_sbuffer *b) {
  msgpack_packer pk;
  msgpack_packer_init(&pk, f, msgpack_sbuffer_write);
  uint32_t sum = 2166136261u;
  for (size_t i = 0; i < b->size; i++) sum = (sum ^ (unsigned char)b->data[i]) * 16777619u;
  msgpack_pack_array(&pk, 2);
  msgpack_pack_uint32(&pk, sum);
  msgpack_pack_bin(&pk, b->size);
  msgpack_pack_bin_body(&pk, b->data, b->size);
}

static void mp_str(msgpack_packer *pk, const char *s) {
  msgpack_pack_str(pk, strlen(s));
  msgpack_pack_str_body(pk, s, strlen(s));
}

/* Record id's stdout tail as the test writes it: n bytes, "id-<id>:" then letters. */
static char *hist_tail(uint64_t id, size_t n) {
  char *t = malloc(n + 1), head[32];
  int k = snprintf(head, sizeof(head), "id-%llu:", (unsigned long long)id);
  for (size_t i = 0; i < n; i++) t[i] = i < (size_t)k ? head[i] : (char)('a' + (i * 7 + id) % 26);
  return t;
}

/* A start ('s') or end ('e', completed with exit id % 7 and `tail` bytes of
 * stdout) frame of record id, laid out as the engine writes it (k, id first). */
static void hist_record(msgpack_sbuffer *f, uint64_t id, char kind, size_t tail) {
  msgpack_sbuffer b;
  msgpack_packer pk;
  msgpack_sbuffer_init(&b);
  msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
  char arg[32];
  snprintf(arg, sizeof(arg), "run-%llu", (unsigned long long)id);
  uint64_t t = now_ms() - 100000 + id;
  msgpack_pack_map(&pk, kind == 'e' ? 10 : 4);
  mp_str(&pk, "k");
  mp_str(&pk, kind == 'e' ? "e" : "s");
  mp_str(&pk, "id");
  msgpack_pack_uint64(&pk, id);
  mp_str(&pk, "cmd");
  msgpack_pack_array(&pk, 2);
  mp_str(&pk, "echo");
  mp_str(&pk, arg);
  mp_str(&pk, "cwd");
  mp_str(&pk, "/");
  if (kind == 'e') {
    char *data = hist_tail(id, tail);
    mp_str(&pk, "state");
    mp_str(&pk, "completed");
    mp_str(&pk, "reason");
    mp_str(&pk, "exit");
    mp_str(&pk, "exit");
    msgpack_pack_uint64(&pk, id % 7);
    mp_str(&pk, "started");
    msgpack_pack_uint64(&pk, t);
    mp_str(&pk, "ended");
    msgpack_pack_uint64(&pk, t + 1);
    mp_str(&pk, "out");
    msgpack_pack_array(&pk, 1);
    msgpack_pack_array(&pk, 3);
    msgpack_pack_uint64(&pk, PR_STDOUT);
    msgpack_pack_uint64(&pk, 2 * tail);
    msgpack_pack_bin(&pk, tail);
    msgpack_pack_bin_body(&pk, data, tail);
    free(data);
  }
  hist_frame(f, &b);
  msgpack_sbuffer_destroy(&b);
}

/* A tombstone ('d') of one id, or the next id ('n', id = next). */
static void hist_mark(msgpack_sbuffer *f, char kind, uint64_t id) {
  msgpack_sbuffer b;
  msgpack_packer pk;
  msgpack_sbuffer_init(&b);
  msgpack_packer_init(&pk, &b, msgpack_sbuffer_write);
  msgpack_pack_map(&pk, 2);
  mp_str(&pk, "k");
  mp_str(&pk, kind == 'd' ? "d" : "n");
  if (kind == 'd') {
    mp_str(&pk, "ids");
    msgpack_pack_array(&pk, 1);
  } else {
    mp_str(&pk, "next");
  }
  msgpack_pack_uint64(&pk, id);
  hist_frame(f, &b);
  msgpack_sbuffer_destroy(&b);
}

static int put_file(const char *path, const char *p, size_t n) {
  FILE *f = fopen(path, "wb");
  int ok = f && fwrite(p, 1, n, f) == n;
  return f && fclose(f) == 0 && ok;
}

static char *get_file(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  char *p = NULL;
  *n = 0;
  if (f && fseek(f, 0, SEEK_END) == 0) {
    long k = ftell(f);
    p = k >= 0 ? malloc((size_t)k + 1) : NULL;
    rewind(f);
    if (p) *n = fread(p, 1, (size_t)k, f);
  }
  if (f) fclose(f);
  return p;
}

/* Our slot's file: records 1 (a 5,000-byte tail), 2 (a start only: host_lost),
 * 3 (deleted by the tombstone after it), 4 (one byte of its tail flipped: a
 * checksum that fails, a good frame after it), 5 (a 20,000-byte tail), 37
 * bytes that are no frame, 6 (deleted by the other slot's tombstone), 20..39
 * (1,500 bytes each), the next id 50, and record 7 cut in half (a torn
 * tail). Slot 1's file: record 1000000001 and a tombstone of our 6. */
static char *damaged_history(size_t *n, char **other, size_t *nother) {
  msgpack_sbuffer f;
  msgpack_sbuffer_init(&f);
  msgpack_sbuffer_write(&f, "\xb1proctor-history/1", 18);
  hist_record(&f, 1, 'e', 5000);
  hist_record(&f, 2, 's', 0);
  hist_record(&f, 3, 'e', 10);
  hist_mark(&f, 'd', 3);
  hist_record(&f, 4, 'e', 3000);
  f.data[f.size - 1] ^= 0x20; /* the last byte of its tail */
  hist_record(&f, 5, 'e', 20000);
  msgpack_sbuffer_write(&f, "this is no frame at all, 37 bytes....", 37);
  hist_record(&f, 6, 'e', 100);
  for (uint64_t id = 20; id < 40; id++) hist_record(&f, id, 'e', 1500);
  hist_mark(&f, 'n', 50);
  size_t cut = f.size;
  hist_record(&f, 7, 'e', 500);
  f.size = cut + (f.size - cut) / 2;
  msgpack_sbuffer o;
  msgpack_sbuffer_init(&o);
  msgpack_sbuffer_write(&o, "\xb1proctor-history/1", 18);
  hist_record(&o, 1000000001, 'e', 4000);
  hist_mark(&o, 'd', 6);
  *other = o.data;
  *nother = o.size;
  *n = f.size;
  return f.data;
}

/* What one load of the damaged history gave, as text: every record (id,
 * state, reason, exit code, argument, its stdout tail's length and first
 * bytes), whether each tail is the bytes written, the warnings, the id of a
 * start after the load, and whether "<file>.damaged-1" is the file as it was.
 * *peak: the largest read buffer the load held. NULL when an engine could
 * not be made. */
static char *load_damaged(const char *path, const char *orig, size_t n, size_t chunk,
                          size_t *peak) {
  char copy[400];
  snprintf(copy, sizeof(copy), "%s.damaged-1", path);
  unlink(copy);
  if (!put_file(path, orig, n)) return NULL;
  pr_engine_opts_t opts = {.history_file = path};
  pr_engine_t *e;
  pr_test_history_chunk(chunk);
  if (pr_engine_new(&opts, &e) != 0) return NULL;
  size_t cap = 1 << 16, len = 0, nrec = 0;
  char *s = malloc(cap);
  s[0] = 0;
  pr_record_t **v;
  if (pr_engine_list(e, 0, -1, &v, &nrec) == 0) {
    for (size_t i = 0; i < nrec; i++) {
      pr_record_t *r = v[i];
      char *data = NULL;
      size_t dl = 0;
      uint64_t next, missed;
      pr_engine_read(e, r->id, 0, PR_STDOUT, 0, 1 << 20, &data, &dl, &next, &missed, NULL);
      char *want = hist_tail(r->id, dl);
      len += (size_t)snprintf(s + len, cap - len, "%llu %s %s %d %s tail %zu %.12s %s\n",
                              (unsigned long long)r->id, pr_state_name(r->state),
                              r->reason ? r->reason : "-", r->exit_code,
                              r->argc > 1 ? r->argv[1] : "-", dl, data ? data : "",
                              dl == 0 || memcmp(data, want, dl) == 0 ? "same" : "DIFFERENT");
      free(want);
      free(data);
    }
    pr_records_free(v, nrec);
  }
  char **w = NULL;
  size_t nw = 0;
  pr_engine_warnings(e, &w, &nw);
  for (size_t i = 0; i < nw; i++) {
    len += (size_t)snprintf(s + len, cap - len, "warning: %s\n", w[i]);
    free(w[i]);
  }
  free(w);
  const char *argv[] = {"true"};
  pr_spec_t sp = {.argv = argv, .argc = 1, .kill_grace_ms = -1, .hold = 1};
  uint64_t id = 0;
  pr_engine_start(e, &sp, &id);
  pr_engine_cancel(e, id, 0, 1, NULL);
  pr_engine_free(e);
  *peak = pr_test_history_chunk(0);
  size_t cl = 0;
  char *c = get_file(copy, &cl);
  snprintf(s + len, cap - len, "next id %llu; the copy %s\n", (unsigned long long)id,
           c && cl == n && memcmp(c, orig, n) == 0 ? "is the file as it was" : "DIFFERS");
  free(c);
  return s;
}

/* The load reads its files in chunks (pr_test_history_chunk): with chunks
 * of 1, 15, 100 and 4096 bytes (frames that cross a chunk's end, frames
 * bigger than a chunk: 5,000 and 20,000 bytes of tail, a corrupt frame and
 * garbage in the middle, a torn last frame, tombstones of both slots, the
 * next id, another slot's file) it loads exactly what one read of the whole
 * file loads, and that is the records written, less the deleted and the
 * damaged ones. */
static void test_history_load_in_chunks(void) {
  char dir[256], path[300], other_path[310];
  CHECK(private_dir(dir, sizeof(dir)));
  snprintf(path, sizeof(path), "%s/history.mpk", dir);
  snprintf(other_path, sizeof(other_path), "%s.1", path);
  size_t n, no, peak;
  char *other, *orig = damaged_history(&n, &other, &no);
  int ok = put_file(other_path, other, no);
  char *whole = ok ? load_damaged(path, orig, n, 0, &peak) : NULL;
  size_t chunks[] = {1, 15, 100, 4096}, bad = 0;
  char *got = NULL;
  for (size_t i = 0; i < sizeof(chunks) / sizeof(*chunks) && whole && bad == 0; i++) {
    free(got);
    got = load_damaged(path, orig, n, chunks[i], &peak);
    if (got == NULL || strcmp(got, whole) != 0) bad = chunks[i];
  }
  size_t nrec = 0;
  for (const char *p = whole; p && (p = strstr(p, " tail ")); p++) nrec++;
  free(orig);
  free(other);
  rm_dir(dir);
  int known = whole && strstr(whole, "1 completed exit 1 run-1 tail 5000 id-1:") &&
              strstr(whole, "\n2 failed host_lost") &&
              strstr(whole, "\n5 completed exit 5 run-5 tail 20000") &&
              strstr(whole, "\n39 completed exit 4 run-39 tail 1500") &&
              strstr(whole, "\n1000000001 completed exit 0 run-1000000001 tail 4000") &&
              !strstr(whole, "DIFFERENT") && nrec == 24 &&
              strstr(whole, "2 corrupt stretch(es) skipped") && strstr(whole, "torn record at") &&
              strstr(whole, "next id 50; the copy is the file as it was");
  char why[400] = "";
  size_t d = 0; /* where the two first differ */
  while (got && whole && got[d] && got[d] == whole[d]) d++;
  if (!known) snprintf(why, sizeof(why), "(%zu records) %.300s", nrec, whole ? whole : "");
  else if (bad)
    snprintf(why, sizeof(why), "...%.150s, one read ...%.150s", got ? got + d : "(no engine)",
             whole + d);
  free(got);
  free(whole);
  CHECK(ok && nrec);
  CHECKF(known, "one read of the whole file loaded %s", why);
  CHECKF(bad == 0, "in chunks of %zu bytes the load gave %s", bad, why);
}

/* The load holds at most a chunk of a file, or one good frame bigger than a
 * chunk, in memory at once, however big the file: in chunks of 4 KiB the
 * ~61 KB damaged history is read with no buffer over its biggest frame
 * (~20,100 bytes). So is the same file where that frame's length was
 * damaged to claim most of the rest of the file: its checksum is found
 * wrong without holding the bytes it claims, and the load finds what one
 * read of the whole file finds. */
static void test_history_load_memory_bounded(void) {
  char dir[256], path[300], other_path[310];
  CHECK(private_dir(dir, sizeof(dir)));
  snprintf(path, sizeof(path), "%s/history.mpk", dir);
  snprintf(other_path, sizeof(other_path), "%s.1", path);
  size_t n, no, peak = 0, peak2 = 0, at = 0;
  char *other, *orig = damaged_history(&n, &other, &no);
  int ok = put_file(other_path, other, no);
  char *got = ok ? load_damaged(path, orig, n, 4096, &peak) : NULL;
  /* record 5's frame: 0x92, 0xce + 4 bytes of checksum, 0xc5 + 2 bytes of length */
  for (size_t i = 0; i + 8 < n && !at; i++)
    if (memcmp(orig + i, "\x92\xce", 2) == 0 && orig[i + 6] == (char)0xc5 &&
        memcmp(orig + i + 9 + 5, "\xa2id\x05", 4) == 0)
      at = i;
  size_t claim = at ? (n - at - 9 - 100) & 0xffff : 0;
  if (at) {
    orig[at + 7] = (char)(claim >> 8);
    orig[at + 8] = (char)claim;
  }
  char *whole = at && ok ? load_damaged(path, orig, n, 0, &(size_t){0}) : NULL;
  char *got2 = at && ok ? load_damaged(path, orig, n, 4096, &peak2) : NULL;
  int same = whole && got2 && strcmp(whole, got2) == 0 && !strstr(whole, "\n5 completed");
  free(orig);
  free(other);
  free(got);
  free(got2);
  free(whole);
  rm_dir(dir);
  CHECK(ok && got);
  CHECKF(peak > 0 && peak <= 20000 + 256,
         "the load held %zu bytes of a %zu-byte file at once (its biggest frame: ~20,100)", peak,
         n);
  CHECKF(at && claim > 40000, "record 5's frame at %zu, its length made to claim %zu", at, claim);
  CHECKF(same, "the damaged length: chunks and one read loaded the same %d", same);
  CHECKF(peak2 > 0 && peak2 <= 20000 + 256,
         "with a length claiming %zu bytes the load held %zu bytes at once", claim, peak2);
}

/* A start the engine has not begun yet (deferred: no wake-up), canceled:
 * the cancel reaches the engine in the same batch as its start, which ends
 * `canceled` from `queued` with no SPAWN sent. Its command never ran and its
 * record was never started; a second cancel finds it ended. The witness that
 * the engine had its time: a later start ran and ended. A start and its
 * cancel in two batches (the start flushed, then seen begun) are as before:
 * the process is started, then stopped. */
static void test_cancel_before_spawn(void) {
  char dir[256], ran[300], script[400];
  CHECK(private_dir(dir, sizeof dir));
  snprintf(ran, sizeof ran, "%s/ran", dir);
  snprintf(script, sizeof script, "touch '%s'", ran);
  pr_engine_t *e;
  CHECK_OK(pr_engine_new(NULL, &e));
  /* a sync command answered: the engine took everything queued before */
  CHECK(pr_engine_cancel(e, 999, 0, 0, NULL) == PR_CANCEL_NOT_FOUND);
  pr_spec_t s = {.shell = script, .kill_grace_ms = -1};
  uint64_t a = 0, b = 0;
  CHECK_OK(pr_engine_start_deferred(e, &s, &a));
  pr_cancel_result_t first = pr_engine_cancel(e, a, 0, 0, NULL);
  pr_cancel_result_t again = pr_engine_cancel(e, a, 0, 0, NULL);
  b = start_sh(e, "exit 0");
  CHECK(a == 1 && b == 2);
  pr_spec_t held = {.shell = "exec sleep 30", .kill_grace_ms = -1};
  uint64_t c = 0;
  CHECK_OK(pr_engine_start_deferred(e, &held, &c));
  pr_engine_flush(e);
  pr_record_t *r = NULL;
  CHECK_OK(pr_engine_get(e, c, 0, &r)); /* a command after the flush: its batch began c */
  pr_state_t begun = r->state;
  pr_record_free(r);
  pr_cancel_result_t later_cancel = pr_engine_cancel(e, c, 0, 0, NULL);
  outcome_t *o = calloc(4, sizeof(*o));
  int ok = drain(e, o, 3, 0, 30000);
  CHECK_OK(pr_engine_get(e, c, 0, &r));
  int c_started = r->state == PR_CANCELED && r->started_at != 0;
  pr_record_free(r);
  CHECK_OK(pr_engine_get(e, a, 0, &r));
  int good = r->state == PR_CANCELED && strcmp(r->reason, "canceled") == 0 && r->started_at == 0;
  char seen[160];
  snprintf(seen, sizeof seen, "state %s, reason %s, started_at %ju", pr_state_name(r->state),
           r->reason ? r->reason : "-", (uintmax_t)r->started_at);
  pr_record_free(r);
  int terminal = o[1].terminal, later = o[2].state;
  free_outcomes(o, 3);
  pr_engine_free(e);
  int marker = access(ran, F_OK) == 0;
  unlink(ran);
  rmdir(dir);
  CHECK(ok);
  CHECKF(first == PR_CANCELING && again == PR_ALREADY_TERMINAL, "answers %d then %d", first, again);
  CHECKF(good, "the canceled start: %s", seen);
  CHECKF(terminal == 1, "%d terminal events", terminal);
  CHECKF(later == PR_COMPLETED, "the later start: %s", pr_state_name((pr_state_t)later));
  CHECKF(!marker, "the canceled start's command ran (%s exists)", ran);
  CHECKF(begun == PR_STARTING || begun == PR_RUNNING, "after a flush: %s", pr_state_name(begun));
  CHECKF(later_cancel == PR_CANCELING && c_started, "canceled once begun: %d, started %d",
         later_cancel, c_started);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--tsan") == 0) scale = 5;
  RUN(test_lifecycle_table);
  RUN(test_lifecycle_and_output);
  RUN(test_sigchld_disposition_unchanged);
  RUN(test_host_waitpid_thread);
  RUN(test_input_roundtrip);
  RUN(test_cancel_races);
  RUN(test_cancel_before_spawn);
  RUN(test_close_with_live_jobs);
  RUN(test_flood_coalesced);
  RUN(test_spawn_error_per_engine);
  RUN(test_drain_after_stall);
  RUN(test_spawned_without_fds);
  RUN(test_reaper_stopped_before_spawned);
  RUN(test_shepherd_slow_or_hung);
  RUN(test_reaper_slow_or_hung);
  RUN(test_host_queue_bounded);
  RUN(test_host_queue_records_coalesced);
  RUN(test_host_queue_output_of_removed);
  RUN(test_hold_release);
  RUN(test_start_burst);
  RUN(test_close_writes_queued_history);
  RUN(test_two_engines_share_history);
  RUN(test_history_loads_after_new);
  RUN(test_history_start_during_load);
  RUN(test_close_stops_history_load);
  RUN(test_loaded_tails_read_from_file);
  RUN(test_history_load_in_chunks);
  RUN(test_history_load_memory_bounded);
  RUN(test_secret_source_bounds);
  RUN(test_target_idle_close);
  RUN(test_link_gone_before_first_send);
  RUN(test_output_read_on_host);
  RUN(test_shepherd_early);
  return TAP_END();
}
