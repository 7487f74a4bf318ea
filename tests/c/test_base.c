/* test_base.c — unit tests of the leaf modules: the id map, the growable
 * buffer, UTF-8 boundaries and repair, msgpack -> JSON, the liveness
 * judgement, the console's redraw filter, an editor's socket name
 * (csrc/base/idmap.c, buf.c, utf8.c, mpack.c, liveness.c, overwrite.c,
 * sockname.c), and of tap.h's checks themselves. The filter's bytes are
 * compared with its Lua model in tests/nvim/spec_model.lua; here it runs
 * under ASan/UBSan on random bytes. */
#include <cjson/cJSON.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "include/proctor_test.h"
#include "tap.h"

/* Random puts and deletes against a plain array that knows the truth. */
static void test_idmap_matches_a_reference(void) {
  enum { N = 5000 };
  static int truth[N]; /* 0 absent, else the value's tag */
  static int vals[N];
  pr_idmap_t m;
  pr_idmap_init(&m);
  CHECK(pr_idmap_get(&m, 1) == NULL && pr_idmap_del(&m, 1) == NULL);
  srand(7);
  size_t count = 0;
  for (int step = 0; step < 200000; step++) {
    int k = rand() % N, op = rand() % 3;
    uint64_t key = (uint64_t)k * 4096; /* keys that collide in low bits */
    if (op < 2) {
      vals[k] = step + 1;
      CHECK_OK(pr_idmap_put(&m, key, &vals[k]));
      if (!truth[k]) count++;
      truth[k] = 1;
    } else {
      void *v = pr_idmap_del(&m, key);
      CHECK((v != NULL) == (truth[k] != 0));
      CHECK(v == NULL || v == &vals[k]);
      if (truth[k]) count--;
      truth[k] = 0;
    }
    if (step % 1000 == 0) {
      for (int i = 0; i < N; i++) {
        void *v = pr_idmap_get(&m, (uint64_t)i * 4096);
        CHECKF((v != NULL) == (truth[i] != 0), "step %d key %d", step, i);
      }
      CHECK(m.count == count && m.count * 2 <= m.cap);
    }
  }
  size_t at = 0, seen = 0;
  uint64_t key;
  while (pr_idmap_next(&m, &at, &key)) {
    CHECK(key % 4096 == 0 && truth[key / 4096]);
    seen++;
  }
  CHECK_EQ(seen, count);
  pr_idmap_destroy(&m);
  CHECK(m.count == 0 && pr_idmap_get(&m, 0) == NULL);
}

static void test_idmap_any_key(void) {
  pr_idmap_t m;
  pr_idmap_init(&m);
  int a, b, c;
  CHECK(pr_idmap_put(&m, 0, &a) == 0 && pr_idmap_put(&m, UINT64_MAX, &b) == 0);
  CHECK(pr_idmap_get(&m, 0) == &a && pr_idmap_get(&m, UINT64_MAX) == &b);
  CHECK(pr_idmap_put(&m, 0, &c) == 0 && pr_idmap_get(&m, 0) == &c && m.count == 2);
  CHECK(pr_idmap_del(&m, UINT64_MAX) == &b && pr_idmap_get(&m, UINT64_MAX) == NULL);
  pr_idmap_destroy(&m);
}

static void test_buf_grows_caps_and_keeps_its_error(void) {
  pr_buf_t b = PR_BUF_INIT(10000);
  char chunk[3000];
  memset(chunk, 'x', sizeof(chunk));
  CHECK(pr_buf_add(&b, chunk, sizeof(chunk)) == 0 && b.len == 3000 && b.cap >= 3000);
  CHECK(pr_buf_add(&b, chunk, sizeof(chunk)) == 0 && b.len == 6000);
  CHECK(pr_buf_add(&b, chunk, sizeof(chunk)) == 0 && b.len == 9000 && b.cap <= 10000);
  CHECK(pr_buf_add(&b, chunk, sizeof(chunk)) == PR_ETOOBIG && b.len == 9000);
  CHECK(pr_buf_add(&b, "y", 1) == PR_ETOOBIG && b.len == 9000); /* sticky */
  size_t n = b.len;
  char *p = pr_buf_release(&b);
  CHECK(p && n == 9000 && p[8999] == 'x' && b.len == 0 && b.err == 0);
  free(p);
  CHECK(pr_buf_add(&b, "ok", 2) == 0 && b.len == 2 && memcmp(b.p, "ok", 2) == 0);
  pr_buf_free(&b);
  CHECK(b.p == NULL && b.len == 0);
}

#define FFFD "\xEF\xBF\xBD"

/* clean(s, n) == want (a NUL-terminated expectation). */
static int cleans_to(const char *s, size_t n, const char *want) {
  char *got = pr_utf8_clean(s, n);
  int ok = got && strcmp(got, want) == 0;
  if (!ok)
    fprintf(stderr, "# pr_utf8_clean: got \"%s\", want \"%s\"\n", got ? got : "(null)", want);
  free(got);
  return ok;
}

static void test_utf8_clean_keeps_text_and_repairs_the_rest(void) {
  const char *text = "plain h\xC3\xA9llo \xE2\x9C\x93 \xF0\x9D\x84\x9E";
  CHECK(cleans_to(text, strlen(text), text));
  CHECK(cleans_to("", 0, "") && cleans_to(NULL, 0, ""));
  CHECK(cleans_to("a\xFFz", 3, "a" FFFD "z"));                  /* never a lead byte */
  CHECK(cleans_to("\x80x", 2, FFFD "x"));                       /* a stray continuation */
  CHECK(cleans_to("\xC0\xAF", 2, FFFD FFFD));                   /* an overlong '/' */
  CHECK(cleans_to("\xE0\x80\xAF", 3, FFFD FFFD FFFD));          /* an overlong, 3 bytes */
  CHECK(cleans_to("\xED\xA0\x80", 3, FFFD FFFD FFFD));          /* a surrogate */
  CHECK(cleans_to("\xF4\x90\x80\x80", 4, FFFD FFFD FFFD FFFD)); /* beyond U+10FFFF */
  CHECK(cleans_to("ok\xE2\x82", 4, "ok" FFFD FFFD));            /* cut short at the end */
  CHECK(cleans_to("\xE2\x82(", 3, FFFD FFFD "("));              /* cut short inside */
  CHECK(cleans_to("a\0b", 3, "a" FFFD "b"));                    /* NUL is not kept */
}

static void test_utf8_boundaries(void) {
  const char *s = "a\xE2\x9C\x93"; /* a, then one 3-byte character */
  CHECK(pr_utf8_head(s, 4) == 4 && pr_utf8_head(s, 3) == 1 && pr_utf8_head(s, 2) == 1 &&
        pr_utf8_head(s, 1) == 1);
  CHECK(pr_utf8_head("\xF0\x9D\x84", 3) == 0 && pr_utf8_head("abc", 3) == 3 &&
        pr_utf8_head("", 0) == 0);
  CHECK(pr_utf8_skip(s + 1, 3) == 0 && pr_utf8_skip(s + 2, 2) == 2 && pr_utf8_skip(s + 3, 1) == 1);
  CHECK_EQ(pr_utf8_skip("\x80\x80\x80\x80", 4), 3); /* at most 3: a 4th is not a character's */
}

typedef struct {
  char b[512];
  size_t n;
} sink_t;

static int sink_write(void *data, const char *p, size_t n) {
  sink_t *s = data;
  if (s->n + n > sizeof(s->b)) return -1;
  memcpy(s->b + s->n, p, n);
  s->n += n;
  return 0;
}

/* Bytes that are not UTF-8 (a worker's reply, a read answer) still become
 * valid JSON, in keys and values, str and bin alike. */
static void test_mp_to_json_repairs_utf8(void) {
  sink_t s = {.n = 0};
  msgpack_packer pk;
  msgpack_packer_init(&pk, &s, sink_write);
  CHECK_EQ(msgpack_pack_map(&pk, 3), 0);
  CHECK(msgpack_pack_bin(&pk, 2) == 0 && msgpack_pack_bin_body(&pk, "k\xFF", 2) == 0);
  CHECK(msgpack_pack_str(&pk, 5) == 0 && msgpack_pack_str_body(&pk,
                                                               "a\xFF"
                                                               "b\0c",
                                                               5) == 0);
  CHECK(pr_mp_str(&pk, "ok") == 0 && pr_mp_str(&pk, "\xC3\xA9t\xC3\xA9") == 0);
  CHECK(msgpack_pack_int(&pk, 7) == 0 && msgpack_pack_bin(&pk, 3) == 0 &&
        msgpack_pack_bin_body(&pk, "\x80z\xC3", 3) == 0);
  msgpack_unpacked u;
  msgpack_unpacked_init(&u);
  CHECK(msgpack_unpack_next(&u, s.b, s.n, NULL) == MSGPACK_UNPACK_SUCCESS);
  size_t n = 0;
  char *json = pr_mp_to_json(&u.data, &n);
  const char *want = "{\"k" FFFD "\":\"a" FFFD "b" FFFD
                     "c\",\"ok\":\"\xC3\xA9t\xC3\xA9\",\"7\":\"" FFFD "z" FFFD "\"}";
  int same = json && n == strlen(want) && strcmp(json, want) == 0;
  if (!same) fprintf(stderr, "# pr_mp_to_json: %s\n", json ? json : "(null)");
  cJSON *j = pr_mp_to_cjson(&u.data);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "k" FFFD);
  int obj = cJSON_IsString(v) && strcmp(v->valuestring, "a" FFFD "b" FFFD "c") == 0;
  cJSON_Delete(j);
  free(json);
  msgpack_unpacked_destroy(&u);
  CHECK(same && obj);
}

/* tap.h: a failing CHECK_EQ, CHECK_OK or CHECK_ERR says both values and the
 * errors' names; a passing one lets the test go on. */
static char tap_seen[sizeof(tap_why)];
static void fails_eq(void) { CHECK_EQ(1 + 1, 3); }
static void fails_ok(void) { CHECK_OK(PR_ENOENT); }
static void fails_err(void) { CHECK_ERR(0, PR_EBUSY); }
static void passes(void) {
  CHECK_EQ(2, 1 + 1);
  CHECK_OK(0);
  CHECK_ERR(PR_EBUSY, PR_EBUSY);
  snprintf(tap_why, sizeof(tap_why), "went on");
}
/* Run `fn` as a test would; 1 when it failed (or went on) with `want` in its message. */
static int says(void (*fn)(void), const char *want) {
  tap_why[0] = 0;
  fn();
  snprintf(tap_seen, sizeof(tap_seen), "%s", tap_why);
  int failed = tap_failed_now;
  tap_failed_now = 0;
  return (failed == (fn != passes)) && strstr(tap_seen, want) != NULL;
}
static void test_tap_checks_say_what_they_saw(void) {
  CHECKF(says(fails_eq, "1 + 1 == 3: 2 != 3"), "%s", tap_seen);
  CHECKF(says(fails_ok, "PR_ENOENT: ENOENT (-30001) no such execution"), "%s", tap_seen);
  CHECKF(says(fails_err, "0 == PR_EBUSY: OK (0), not EBUSY (-30011)"), "%s", tap_seen);
  CHECKF(says(passes, "went on"), "%s", tap_seen);
}

/* Wait (condition, at most 30 s) until child `pid` is in state `st` and,
 * when cpu_above is not 0, has used more CPU than that. 1 when it is. */
static int settle(pid_t pid, char st, uint64_t cpu_above) {
  for (int i = 0; i < 30000; i++) {
    if (pr_proc_state(pid) == st && (cpu_above == 0 || pr_proc_cpu_ns(pid) > cpu_above)) return 1;
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  return 0;
}

/* The kernel's word on a process that owes an answer (base/liveness.h), on
 * children in each state: asleep without using CPU since the question or the
 * last look: silent; asleep but it ran since the last look: working (and
 * silent at the next look if it did not run again); runnable: working, until
 * it used the CPU budget since the question (a loop): silent; stopped:
 * silent; gone: silent. Each step waits for the state it judges. */
typedef struct {
  char *p;
  size_t n, cap;
} collect_t;

static void collect(void *arg, const char *p, size_t n) {
  collect_t *c = arg;
  if (c->n + n <= c->cap) memcpy(c->p + c->n, p, n);
  c->n += n;
}

/* The redraw filter on random bytes (escape sequences, `\r`, UTF-8 and C1
 * pieces, cut anywhere, fed at random widths), every read inside the text
 * (ASan), and what it emits: never more than it was given, every byte when
 * the width is < 2, and a `\r` flood cut to its last redraw. */
static void test_overwrite_random_bytes(void) {
  static const char *tok[] = {
      "\r",       "\r",     "12",       "abc",          "\n",      "\t",        "\x1b",   "\x1b[",
      "\x1b[31m", "\x1b[K", "\x1b[2K",  "\x1b[4h",      "\x1b]0;", "\x07",      "\x1b\\", "\x1b#",
      "\x18",     "\xc2",   "\xc2\x85", "\xe2\x96\x88", "\xff",    "\x1b[?69h", ";",      "m"};
  enum { NT = sizeof(tok) / sizeof(tok[0]) };
  char text[4096], out[4096];
  size_t grew = 0, kept_all = 0, left_out = 0;
  srand(11);
  for (int round = 0; round < 3000; round++) {
    size_t n = 0;
    while (n < 2000) {
      const char *t = tok[rand() % NT];
      size_t l = strlen(t);
      memcpy(text + n, t, l);
      n += l;
    }
    /* the text alone in its own allocation: a read past its end is ASan's */
    char *heap = malloc(n);
    memcpy(heap, text, n);
    long width = rand() % 5 == 0 ? 0 : 1 + rand() % 100;
    pr_overwrite_t st;
    pr_overwrite_init(&st);
    collect_t c = {out, 0, sizeof(out)};
    for (size_t i = 0; i < n;) {
      size_t j = i + 1 + (size_t)(rand() % 300);
      if (j > n) j = n;
      size_t before = c.n;
      size_t got = pr_overwrite_feed(&st, heap, n, i, j, width, collect, &c);
      if (got != c.n - before || got > j - i) grew++;
      if (width < 2 && (got != j - i || memcmp(out + before, heap + i, got) != 0)) kept_all++;
      i = j;
    }
    left_out += st.dropped;
    pr_overwrite_free(&st);
    free(heap);
  }
  CHECKF(grew == 0, "%zu feeds emitted more than they were given (or not what they said)", grew);
  CHECKF(kept_all == 0, "%zu feeds at width < 2 did not emit their bytes as they were", kept_all);
  CHECKF(left_out > 0, "nothing was left out of 3000 random texts");
  /* a flood of redraws: only the first segment and the last redraw stay */
  size_t n = 0;
  for (int i = 1; i <= 300; i++) n += (size_t)snprintf(text + n, sizeof(text) - n, "\r%d", i);
  pr_overwrite_t st;
  pr_overwrite_init(&st);
  collect_t c = {out, 0, sizeof(out)};
  pr_overwrite_feed(&st, text, n, 0, n, 80, collect, &c);
  CHECKF(c.n == 4 && memcmp(out, "\r300", 4) == 0, "a flood of 300 redraws gave %zu bytes", c.n);
  CHECKF(st.dropped == n - 4, "%llu bytes left out of %zu", (unsigned long long)st.dropped, n);
  pr_overwrite_free(&st);
}

static void test_liveness_judges_by_the_kernel(void) {
  int p[2];
  CHECK(pipe(p) == 0);
  pid_t sleeper = fork();
  if (sleeper == 0) { /* sleeps; a byte on the pipe wakes it for a little work */
    close(p[1]);
    char c;
    while (read(p[0], &c, 1) == 1)
      for (volatile int i = 0; i < 2000000; i++) {
      }
    _exit(0);
  }
  close(p[0]);
  pid_t spinner = fork();
  if (spinner == 0)
    for (volatile unsigned long i = 0;; i++) {
    }
  pr_liveness_t l = {0};
  int asleep = settle(sleeper, 'S', 0);
  pr_liveness_asked(&l, sleeper);
  int idle = pr_liveness_working(&l, sleeper, UINT64_MAX);
  uint64_t before = pr_proc_cpu_ns(sleeper);
  int woke = write(p[1], "x", 1) == 1 && settle(sleeper, 'S', before);
  int ran = pr_liveness_working(&l, sleeper, UINT64_MAX);
  int again = pr_liveness_working(&l, sleeper, UINT64_MAX);
  kill(sleeper, SIGSTOP);
  int stopped = settle(sleeper, 'T', 0);
  int judged_stopped = pr_liveness_working(&l, sleeper, UINT64_MAX);
  kill(sleeper, SIGKILL);
  waitpid(sleeper, NULL, 0);
  int gone = pr_liveness_working(&l, sleeper, UINT64_MAX);

  pr_liveness_t s = {0};
  pr_liveness_asked(&s, spinner);
  uint64_t asked = s.asked_cpu;
  int spins = pr_liveness_working(&s, spinner, UINT64_MAX);
  int used = settle(spinner, 'R', asked + 20000000) || pr_proc_cpu_ns(spinner) > asked + 20000000;
  int loop = pr_liveness_working(&s, spinner, 20000000);
  kill(spinner, SIGKILL);
  waitpid(spinner, NULL, 0);
  close(p[1]);
  CHECK(asleep && woke && stopped && used);
  CHECKF(idle == 0, "asleep without CPU since the question: judged working");
  CHECKF(ran == 1, "asleep, but it ran since the last look: judged silent");
  CHECKF(again == 0, "asleep without CPU since the last look: judged working");
  CHECKF(judged_stopped == 0, "stopped: judged working");
  CHECKF(gone == 0, "gone: judged working");
  CHECKF(spins == 1, "runnable: judged silent");
  CHECKF(loop == 0, "20 ms of CPU since the question against a 20 ms budget: judged working");
  CHECK_EQ(pr_proc_state(0), 0);
}

/* `<pid>.sock` (base/sockname.h): the Neovim layer's own form only. */
static void test_sockname_takes_the_editors_form_only(void) {
  static const struct {
    const char *name;
    long pid;
  } cases[] = {
      {"123.sock", 123},
      {"1.sock", 1},
      {"4194304.sock", PR_SOCKNAME_PID_MAX}, /* the highest pid there can be */
      {"0123.sock", 0},                      /* a leading zero: no editor writes it */
      {"0.sock", 0},
      {"12a.sock", 0},
      {".sock", 0},
      {"123.sock.tmp", 0},
      {"123.socket", 0},
      {"123.sock/", 0},
      {"123", 0},
      {"sock", 0},
      {"", 0},
      {"-12.sock", 0},
      {"+12.sock", 0},
      {" 12.sock", 0},
      {"4194305.sock", 0},             /* past PID_MAX_LIMIT */
      {"4294967297.sock", 0},          /* 2^32 + 1: (pid_t) would make it 1 */
      {"99999999999999999999.sock", 0} /* past LONG_MAX */
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    CHECKF(pr_sockname_pid(cases[i].name) == cases[i].pid, "\"%s\": %ld, expected %ld",
           cases[i].name, pr_sockname_pid(cases[i].name), cases[i].pid);
  CHECK_EQ(pr_sockname_pid(NULL), 0);
}

int main(void) {
  RUN(test_tap_checks_say_what_they_saw);
  RUN(test_idmap_matches_a_reference);
  RUN(test_idmap_any_key);
  RUN(test_buf_grows_caps_and_keeps_its_error);
  RUN(test_utf8_clean_keeps_text_and_repairs_the_rest);
  RUN(test_utf8_boundaries);
  RUN(test_mp_to_json_repairs_utf8);
  RUN(test_liveness_judges_by_the_kernel);
  RUN(test_overwrite_random_bytes);
  RUN(test_sockname_takes_the_editors_form_only);
  return TAP_END();
}
