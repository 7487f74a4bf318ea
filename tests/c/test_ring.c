/* test_ring.c — unit tests of the output ring (csrc/base/ring.c) and its spill file. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "include/proctor_test.h"
#include "tap.h"

static void test_write_read_offsets(void) {
  pr_ring_t *r = pr_ring_new(100);
  CHECK(r);
  pr_ring_write(r, "hello ", 6);
  pr_ring_write(r, "world", 5);
  char *d;
  size_t n;
  uint64_t next, missed;
  CHECK_OK(pr_ring_read(r, 0, 100, &d, &n, &next, &missed));
  CHECK(n == 11 && memcmp(d, "hello world", 11) == 0 && next == 11 && missed == 0);
  free(d);
  CHECK_OK(pr_ring_read(r, 6, 3, &d, &n, &next, &missed));
  CHECK(n == 3 && memcmp(d, "wor", 3) == 0 && next == 9);
  free(d);
  CHECK_OK(pr_ring_read(r, 50, 3, &d, &n, &next, &missed));
  CHECK(n == 0 && d == NULL && next == 11);
  pr_ring_unref(r);
}

static void test_drop_head_keep_tail(void) {
  pr_ring_t *r = pr_ring_new(10);
  for (int i = 0; i < 26; i++) {
    char c = (char)('a' + i);
    pr_ring_write(r, &c, 1);
  }
  char *d;
  size_t n;
  uint64_t next, missed, head, tail;
  pr_ring_stats(r, &head, &tail);
  CHECK(head == 16 && tail == 26);
  CHECK_OK(pr_ring_read(r, 0, 100, &d, &n, &next, &missed));
  CHECK(missed == 16 && n == 10 && memcmp(d, "qrstuvwxyz", 10) == 0);
  free(d);
  /* one write larger than the limit keeps only its tail */
  pr_ring_write(r, "0123456789ABCDEF", 16);
  CHECK_OK(pr_ring_read(r, 0, 100, &d, &n, &next, &missed));
  CHECK(n == 10 && memcmp(d, "6789ABCDEF", 10) == 0 && next == 42 && missed == 32);
  free(d);
  pr_ring_unref(r);
}

static void test_wrap_and_grow(void) {
  /* start small, grow past the initial allocation, wrap many times */
  pr_ring_t *r = pr_ring_new(10000);
  char buf[777];
  uint64_t total = 0;
  for (int k = 0; k < 100; k++) {
    for (size_t i = 0; i < sizeof(buf); i++) buf[i] = (char)((total + i) % 251);
    pr_ring_write(r, buf, sizeof(buf));
    total += sizeof(buf);
  }
  char *d;
  size_t n;
  uint64_t next, missed;
  CHECK_OK(pr_ring_read(r, 0, 1 << 20, &d, &n, &next, &missed));
  CHECK(n == 10000 && next == total && missed == total - 10000);
  for (size_t i = 0; i < n; i++) CHECK(d[i] == (char)((total - 10000 + i) % 251));
  free(d);
  pr_ring_shrink(r);
  CHECK_OK(pr_ring_read(r, total - 5, 100, &d, &n, &next, &missed));
  CHECK(n == 5 && d[4] == (char)((total - 1) % 251));
  free(d);
  pr_ring_unref(r);
}

static void test_take_and_marker(void) {
  pr_ring_t *r = pr_ring_new(8);
  CHECK_EQ(pr_ring_mark(r), 1);
  CHECK_EQ(pr_ring_mark(r), 0);
  pr_ring_write(r, "abcdefghijkl", 12);
  char *d;
  size_t n;
  uint64_t from, missed;
  int resume;
  CHECK_OK(pr_ring_take(r, &d, &n, &from, &missed, &resume));
  CHECK(n == 8 && from == 4 && missed == 4 && memcmp(d, "efghijkl", 8) == 0 && !resume);
  free(d);
  CHECK_EQ(pr_ring_mark(r), 1); /* take cleared the marker */
  CHECK_EQ(pr_ring_undelivered(r), 0);
  pr_ring_write(r, "mn", 2);
  CHECK_EQ(pr_ring_undelivered(r), 2);
  CHECK_OK(pr_ring_take(r, &d, &n, &from, &missed, &resume));
  CHECK(n == 2 && from == 12 && missed == 0);
  free(d);
  pr_ring_ref(r);
  pr_ring_unref(r);
  pr_ring_unref(r);
}

/* pr_ring_trim: the newest bytes stay (also across a wrap), the head moves
 * on, readers see the rest as missed, and the ring still takes writes. */
static void test_trim_keeps_tail(void) {
  pr_ring_t *r = pr_ring_new(10);
  CHECK(r);
  pr_ring_write(r, "0123456789abcd", 14); /* keeps 4..d, wrapped */
  CHECK(pr_ring_retained(r) == 10);
  CHECK(pr_ring_trim(r, 20) == 10); /* under the tail already: nothing moves */
  CHECK(pr_ring_trim(r, 3) == 3);
  uint64_t head, tail, next, missed;
  pr_ring_stats(r, &head, &tail);
  CHECK(head == 11 && tail == 14);
  char *d;
  size_t n;
  CHECK(pr_ring_read(r, 0, 100, &d, &n, &next, &missed) == 0);
  CHECK(missed == 11 && n == 3 && memcmp(d, "bcd", 3) == 0 && next == 14);
  free(d);
  pr_ring_write(r, "XY", 2);
  CHECK(pr_ring_read(r, 11, 100, &d, &n, &next, &missed) == 0);
  CHECK(n == 5 && memcmp(d, "bcdXY", 5) == 0 && missed == 0);
  free(d);
  CHECK(pr_ring_trim(r, 0) == 0 && pr_ring_retained(r) == 0);
  pr_ring_stats(r, &head, &tail);
  CHECK(head == 16 && tail == 16);
  pr_ring_unref(r);
}

/* Append `n` bytes of the pattern byte(offset) = offset % 251. */
static void put(pr_ring_t *r, uint64_t *total, size_t n) {
  char buf[8192];
  for (size_t i = 0; i < n; i++) buf[i] = (char)((*total + i) % 251);
  pr_ring_write(r, buf, n);
  *total += n;
}

/* Every retained byte is the pattern's, up to `total`. */
static void check_pattern(pr_ring_t *r, uint64_t total) {
  uint64_t head, tail, next, missed;
  pr_ring_stats(r, &head, &tail);
  CHECK(tail == total);
  char *d;
  size_t n;
  CHECK_OK(pr_ring_read(r, head, 1 << 20, &d, &n, &next, &missed));
  CHECK(n == total - head && next == total && missed == 0);
  int bad = 0;
  for (size_t i = 0; i < n; i++) bad += d[i] != (char)((head + i) % 251);
  CHECK_EQ(bad, 0);
  free(d);
}

/* Growing (in place) keeps every retained byte in order: from the first
 * allocation, after a trim re-laid the ring out, past further doublings and
 * into wrapping at the limit. */
static void test_grow_keeps_bytes(void) {
  uint64_t total = 0;
  pr_ring_t *r = pr_ring_new(1 << 15);
  CHECK(r);
  put(r, &total, 3000); /* a 4 KiB allocation */
  put(r, &total, 4000); /* grows to 8 KiB */
  check_pattern(r, total);
  pr_ring_trim(r, 1000);
  put(r, &total, 500);
  put(r, &total, 4000); /* grows from the trimmed allocation */
  check_pattern(r, total);
  for (int k = 0; k < 10; k++) put(r, &total, 7000); /* up to the limit, then wraps */
  check_pattern(r, total);
  pr_ring_unref(r);
}

/* ---- spilling (pr_ring_set_spill) --------------------------------------------------- */

/* A private directory for spill files: $TMPDIR/proctor-ring.XXXXXX. */
static int spill_tmpdir(char *dir, size_t size) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, size, "%s/proctor-ring.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  return mkdtemp(dir) != NULL;
}

/* Entries in `dir` besides . and .. (-1 when it cannot be read). */
static int dir_entries(const char *dir) {
  DIR *d = opendir(dir);
  if (d == NULL) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
  closedir(d);
  return n;
}

/* A ring of `limit` bytes keeping `memory` of them in memory, spilling under `dir`. */
static pr_ring_t *spill_ring(const char *dir, size_t limit, size_t memory, pr_spill_t **sp) {
  pr_spill_t *s = pr_spill_new(dir, memory);
  pr_ring_t *r = pr_ring_new(limit);
  if (s == NULL || r == NULL) return NULL;
  pr_ring_set_spill(r, s);
  if (sp) *sp = s;
  else pr_spill_unref(s);
  return r;
}

/* Reads across the memory/file boundary: every range of retained bytes, from
 * the file only, memory only and both, comes back as written; the ring keeps
 * only `memory` bytes allocated; the file is unlinked (the directory stays
 * empty), 0600 and close-on-exec. */
static void test_spill_read_across(void) {
  char dir[256];
  CHECK(spill_tmpdir(dir, sizeof(dir)));
  pr_ring_t *r = spill_ring(dir, 1 << 16, 4096, NULL);
  CHECK(r);
  uint64_t total = 0;
  for (int k = 0; k < 30; k++) put(r, &total, 1000);
  CHECK(r->fd >= 0);
  CHECK(r->cap == 4096 && r->tail - r->spilled <= 4096 && r->head == 0 && r->spilled > 20000);
  check_pattern(r, total);
  uint64_t b = r->spilled;
  uint64_t from[] = {0, 100, b - 10, b - 1, b, b + 1, total - 5};
  for (size_t i = 0; i < sizeof(from) / sizeof(from[0]); i++) {
    char *d;
    size_t n;
    uint64_t next, missed;
    CHECK_OK(pr_ring_read(r, from[i], 300, &d, &n, &next, &missed));
    size_t want = total - from[i] < 300 ? (size_t)(total - from[i]) : 300;
    CHECKF(n == want && next == from[i] + n && missed == 0, "from %ju: n %zu", (uintmax_t)from[i],
           n);
    for (size_t j = 0; j < n; j++) CHECK(d[j] == (char)((from[i] + j) % 251));
    free(d);
  }
  struct stat st;
  CHECK(fstat(r->fd, &st) == 0 && (st.st_mode & 0777) == 0600);
  CHECK(fcntl(r->fd, F_GETFD) & FD_CLOEXEC);
  CHECK_EQ(dir_entries(dir), 0);
  pr_ring_unref(r);
  rmdir(dir);
}

/* More than `limit` bytes: the file is a circular region, so the oldest
 * retained bytes sit after the newest in it; reads across that wrap, take and
 * take_tail (whose start lies in the file) give the last `limit` bytes. */
static void test_spill_wrap_and_take(void) {
  char dir[256];
  CHECK(spill_tmpdir(dir, sizeof(dir)));
  pr_ring_t *r = spill_ring(dir, 10000, 1024, NULL);
  CHECK(r);
  uint64_t total = 0;
  for (int k = 0; k < 40; k++) put(r, &total, 777); /* 31080 bytes: wraps the file 3 times */
  check_pattern(r, total);
  uint64_t head, tail;
  pr_ring_stats(r, &head, &tail);
  CHECK(head == total - 10000 && tail == total);
  char *d;
  size_t n;
  uint64_t from, missed;
  int resume;
  CHECK_OK(pr_ring_take_tail(r, 5000, &d, &n, &from, &missed, &resume));
  CHECK(n == 5000 && from == total - 5000 && missed == total - 5000);
  for (size_t j = 0; j < n; j++) CHECK(d[j] == (char)((from + j) % 251));
  free(d);
  put(r, &total, 3000); /* a write larger than memory: most of it straight to the file */
  CHECK_OK(pr_ring_take(r, &d, &n, &from, &missed, &resume));
  CHECK(n == 3000 && from == total - 3000 && missed == 0);
  for (size_t j = 0; j < n; j++) CHECK(d[j] == (char)((from + j) % 251));
  free(d);
  put(r, &total, 8000); /* one write larger than the limit */
  char big[12000];
  for (size_t i = 0; i < sizeof(big); i++) big[i] = (char)((total + i) % 251);
  pr_ring_write(r, big, sizeof(big));
  total += sizeof(big);
  check_pattern(r, total);
  pr_ring_stats(r, &head, &tail);
  CHECK(head == total - 10000);
  pr_ring_unref(r);
  CHECK_EQ(dir_entries(dir), 0);
  rmdir(dir);
}

/* Trim and shrink after exit: a trim that leaves more than the memory part
 * keeps the file; one that leaves no byte in the file closes it;
 * the last unref closes the file (the context counts no open file). */
static void test_spill_trim_shrink(void) {
  char dir[256];
  CHECK(spill_tmpdir(dir, sizeof(dir)));
  pr_spill_t *s;
  pr_ring_t *r = spill_ring(dir, 1 << 15, 2048, &s);
  CHECK(r);
  uint64_t total = 0;
  for (int k = 0; k < 20; k++) put(r, &total, 1500);
  pr_ring_shrink(r);
  check_pattern(r, total);
  CHECK(r->fd >= 0 && s->files == 1);
  CHECK(pr_ring_trim(r, 10000) == 10000);
  CHECK(r->fd >= 0);
  check_pattern(r, total);
  CHECK(pr_ring_trim(r, 1800) == 1800); /* 1800 <= 2048: nothing left in the file */
  CHECK(r->fd < 0 && s->files == 0 && r->spilled == r->head);
  check_pattern(r, total);
  uint64_t head, tail;
  pr_ring_stats(r, &head, &tail);
  CHECK(head == total - 1800);
  for (int k = 0; k < 5; k++) put(r, &total, 1500); /* spills again: a new file */
  CHECK(r->fd >= 0 && s->files == 1);
  check_pattern(r, total);
  CHECK(pr_ring_trim(r, 0) == 0 && r->fd < 0 && s->files == 0);
  for (int k = 0; k < 5; k++) put(r, &total, 1500);
  CHECK(s->files == 1);
  pr_ring_ref(r); /* a queued output marker holds the ring: the file stays */
  pr_ring_unref(r);
  CHECK(s->files == 1);
  pr_ring_unref(r);
  CHECK(s->files == 0);
  CHECK_EQ(dir_entries(dir), 0);
  CHECK_EQ(pr_spill_failure(s), 0);
  pr_spill_unref(s);
  rmdir(dir);
}

/* The spill file is close-on-exec: a child the process starts has no
 * descriptor of it (checked in /proc/<child>/fd). */
static void test_spill_not_inherited(void) {
  char dir[256];
  CHECK(spill_tmpdir(dir, sizeof(dir)));
  pr_ring_t *r = spill_ring(dir, 1 << 16, 4096, NULL);
  CHECK(r);
  uint64_t total = 0;
  for (int k = 0; k < 10; k++) put(r, &total, 1000);
  CHECK(r->fd >= 0);
  int p[2];
  CHECK(pipe2(p, O_CLOEXEC) == 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) { /* wait for the parent to look, reading the pipe's read end (stdin) */
    dup2(p[0], 0);
    execl("/bin/sh", "sh", "-c", "read x", (char *)NULL);
    _exit(127);
  }
  close(p[0]);
  char fds[64], comm[64] = "";
  snprintf(fds, sizeof(fds), "/proc/%d/comm", (int)pid);
  for (int i = 0; i < 10000 && strncmp(comm, "sh", 2) != 0; i++) { /* exec'd: runs sh */
    FILE *f = fopen(fds, "r");
    if (f) {
      if (fgets(comm, sizeof(comm), f) == NULL) comm[0] = 0;
      fclose(f);
    }
    usleep(1000);
  }
  snprintf(fds, sizeof(fds), "/proc/%d/fd", (int)pid);
  int seen = 0, found = 0;
  DIR *d = opendir(fds);
  for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
    char link[512], target[512];
    snprintf(link, sizeof(link), "%s/%s", fds, e->d_name);
    ssize_t n = readlink(link, target, sizeof(target) - 1);
    if (n <= 0) continue;
    target[n] = 0;
    seen++;
    found += strncmp(target, dir, strlen(dir)) == 0;
  }
  if (d) closedir(d);
  close(p[1]);
  int st;
  waitpid(pid, &st, 0);
  pr_ring_unref(r);
  rmdir(dir);
  CHECK(strncmp(comm, "sh", 2) == 0);
  CHECK(seen > 0);
  CHECK_EQ(found, 0);
}

/* A spill directory that cannot be used (under a regular file; a read-only
 * file system): every retained byte stays in memory up to the limit, and the
 * context reports the failure once. */
static void test_spill_dir_unusable(void) {
  char dir[256], bad[300];
  CHECK(spill_tmpdir(dir, sizeof(dir)));
  snprintf(bad, sizeof(bad), "%s/file", dir);
  FILE *f = fopen(bad, "w");
  CHECK(f);
  fclose(f);
  snprintf(bad, sizeof(bad), "%s/file/spill", dir);
  const char *where[] = {bad, "/proc/self"};
  for (int w = 0; w < 2; w++) {
    pr_spill_t *s;
    pr_ring_t *r = spill_ring(where[w], 20000, 1024, &s);
    CHECK(r);
    uint64_t total = 0;
    for (int k = 0; k < 30; k++) put(r, &total, 1000);
    CHECKF(r->fd < 0 && r->nospill && r->cap >= 20000, "in %s", where[w]);
    check_pattern(r, total);
    uint64_t head, tail;
    pr_ring_stats(r, &head, &tail);
    CHECK(head == total - 20000);
    CHECKF(pr_spill_failure(s) > 0, "in %s", where[w]);
    CHECK_EQ(pr_spill_failure(s), 0); /* once */
    pr_ring_unref(r);
    pr_spill_unref(s);
  }
  snprintf(bad, sizeof(bad), "%s/file", dir);
  unlink(bad);
  rmdir(dir);
}

/* A write to the file that fails midway (RLIMIT_FSIZE: EFBIG, like ENOSPC):
 * the file's bytes come back into memory, and nothing retained is lost. */
static void test_spill_write_fails(void) {
  char dir[256];
  CHECK(spill_tmpdir(dir, sizeof(dir)));
  pr_spill_t *s;
  pr_ring_t *r = spill_ring(dir, 1 << 16, 2048, &s);
  CHECK(r);
  struct rlimit old, lim;
  CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
  lim = old;
  lim.rlim_cur = 10000;
  void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
  CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  uint64_t total = 0;
  for (int k = 0; k < 40; k++) put(r, &total, 1000);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, was);
  CHECK(r->fd < 0 && r->nospill && s->files == 0);
  check_pattern(r, total);
  uint64_t head, tail;
  pr_ring_stats(r, &head, &tail);
  CHECK(head == 0 && tail == 40000);
  CHECK_EQ(pr_spill_failure(s), EFBIG);
  pr_ring_unref(r);
  pr_spill_unref(s);
  rmdir(dir);
}

/* PR_SPILL_MAX_FILES: past it a ring keeps its bytes in memory (up to its
 * limit), which is no failure; a file closed frees a place. */
static void test_spill_max_files(void) {
  char dir[256];
  CHECK(spill_tmpdir(dir, sizeof(dir)));
  pr_spill_t *s = pr_spill_new(dir, 10);
  CHECK(s);
  enum { N = PR_SPILL_MAX_FILES + 1 };
  static pr_ring_t *v[N];
  int bad = 0;
  for (int i = 0; i < N; i++) {
    uint64_t total = 0;
    CHECK((v[i] = pr_ring_new(100)) != NULL);
    pr_ring_set_spill(v[i], s);
    put(v[i], &total, 60);
    bad += pr_ring_retained(v[i]) != 60;
  }
  CHECK_EQ(bad, 0);
  CHECK_EQ(s->files, PR_SPILL_MAX_FILES);
  CHECK(v[N - 1]->fd < 0 && v[N - 1]->nospill && v[N - 1]->cap >= 60);
  check_pattern(v[N - 1], 60);
  CHECK_EQ(pr_spill_failure(s), 0);
  pr_ring_unref(v[0]);
  CHECK_EQ(s->files, PR_SPILL_MAX_FILES - 1);
  pr_ring_t *r = pr_ring_new(100);
  CHECK(r);
  pr_ring_set_spill(r, s);
  uint64_t total = 0;
  put(r, &total, 60);
  CHECK(r->fd >= 0 && s->files == PR_SPILL_MAX_FILES);
  pr_ring_unref(r);
  for (int i = 1; i < N; i++) pr_ring_unref(v[i]);
  CHECK_EQ(s->files, 0);
  pr_spill_unref(s);
  CHECK_EQ(dir_entries(dir), 0);
  rmdir(dir);
}

/* A small deterministic generator (tests must not depend on rand's state). */
static uint64_t rng_next(uint64_t *x) {
  *x ^= *x << 13;
  *x ^= *x >> 7;
  *x ^= *x << 17;
  return *x;
}

/* Differential: random writes (some larger than memory or the limit), reads,
 * takes, tail takes, trims and shrinks on a spilling ring and on an in-memory
 * ring of the same limit give the same answers, byte for byte. */
static void test_spill_same_as_memory(void) {
  char dir[256];
  CHECK(spill_tmpdir(dir, sizeof(dir)));
  static char buf[40000];
  for (uint64_t seed = 1; seed <= 6; seed++) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull;
    size_t limit = 1000 + (size_t)(rng_next(&x) % 20000), mem = 1 + (size_t)(rng_next(&x) % 3000);
    pr_ring_t *a = spill_ring(dir, limit, mem, NULL), *b = pr_ring_new(limit);
    CHECK(a && b);
    for (int step = 0; step < 3000; step++) {
      uint64_t op = rng_next(&x) % 100, ha, ta, hb, tb;
      pr_ring_stats(b, &hb, &tb);
      if (op < 55) {
        size_t n = (size_t)(rng_next(&x) % (op < 50 ? 1500 : sizeof(buf)));
        for (size_t i = 0; i < n; i++) buf[i] = (char)rng_next(&x);
        pr_ring_write(a, buf, n);
        pr_ring_write(b, buf, n);
      } else if (op < 80) {
        uint64_t from = tb - (rng_next(&x) % (limit + 500));
        if (from > tb) from = 0;
        size_t max = (size_t)(rng_next(&x) % (limit + 10));
        char *da, *db;
        size_t na, nb;
        uint64_t xa, xb, ma, mb;
        CHECK_OK(pr_ring_read(a, from, max, &da, &na, &xa, &ma));
        CHECK_OK(pr_ring_read(b, from, max, &db, &nb, &xb, &mb));
        CHECKF(na == nb && xa == xb && ma == mb && (na == 0 || memcmp(da, db, na) == 0),
               "seed %ju step %d: read %ju+%zu", (uintmax_t)seed, step, (uintmax_t)from, max);
        free(da);
        free(db);
      } else if (op < 92) {
        size_t max = op < 86 ? 0 : (size_t)(rng_next(&x) % (limit + 10));
        char *da, *db;
        size_t na, nb;
        uint64_t fa, fb, ma, mb;
        int ra, rb;
        CHECK_OK(pr_ring_take_tail(a, max, &da, &na, &fa, &ma, &ra));
        CHECK_OK(pr_ring_take_tail(b, max, &db, &nb, &fb, &mb, &rb));
        CHECKF(na == nb && fa == fb && ma == mb && (na == 0 || memcmp(da, db, na) == 0),
               "seed %ju step %d: take %zu", (uintmax_t)seed, step, max);
        free(da);
        free(db);
      } else if (op < 96) {
        size_t keep = (size_t)(rng_next(&x) % (limit + 100));
        CHECK_EQ(pr_ring_trim(a, keep), pr_ring_trim(b, keep));
      } else {
        pr_ring_shrink(a);
        pr_ring_shrink(b);
      }
      pr_ring_stats(a, &ha, &ta);
      pr_ring_stats(b, &hb, &tb);
      CHECKF(ha == hb && ta == tb && pr_ring_undelivered(a) == pr_ring_undelivered(b),
             "seed %ju step %d: head %ju/%ju tail %ju/%ju", (uintmax_t)seed, step, (uintmax_t)ha,
             (uintmax_t)hb, (uintmax_t)ta, (uintmax_t)tb);
      CHECK(ta - a->spilled <= (mem < limit ? mem : limit));
    }
    pr_ring_unref(a);
    pr_ring_unref(b);
  }
  CHECK_EQ(dir_entries(dir), 0);
  rmdir(dir);
}

/* A backed ring (a record loaded from the history) reads its bytes from its
 * file at their offsets, holds none in memory, reads the same after the
 * file's name points elsewhere (a compaction's rename), skips what a trim
 * dropped, and the last of its rings closes the file. */
static void test_backed_reads_file(void) {
  char dir[256], path[300];
  CHECK(spill_tmpdir(dir, sizeof(dir)));
  snprintf(path, sizeof(path), "%s/h", dir);
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  fputs("HEADERtail-of-the-record", f); /* the tail: 18 bytes at file offset 6 */
  fclose(f);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  CHECK(fd >= 0);
  pr_backing_t *b = pr_backing_new(fd);
  pr_ring_t *r = pr_ring_backed(1 << 20, b, 6, 1018, 18),
            *small = pr_ring_backed(8, b, 6, 1018, 18);
  pr_backing_unref(b); /* the rings hold theirs */
  unlink(path);        /* gone by name: the rings still read it */
  char *out = NULL;
  size_t len = 0;
  uint64_t next = 0, missed = 0, head, tail;
  CHECK_OK(pr_ring_read(r, 0, 100, &out, &len, &next, &missed));
  int whole =
      len == 18 && memcmp(out, "tail-of-the-record", 18) == 0 && missed == 1000 && next == 1018;
  free(out);
  CHECK_OK(pr_ring_read(r, 1005, 4, &out, &len, &next, &missed));
  int part = len == 4 && memcmp(out, "of-t", 4) == 0 && missed == 0 && next == 1009;
  free(out);
  CHECK_OK(pr_ring_read(small, 0, 100, &out, &len, &next, &missed));
  int last8 = len == 8 && memcmp(out, "e-record", 8) == 0 && missed == 1010;
  free(out);
  pr_ring_stats(r, &head, &tail);
  size_t kept = pr_ring_trim(r, 6);
  CHECK_OK(pr_ring_read(r, 0, 100, &out, &len, &next, &missed));
  int trimmed = kept == 6 && len == 6 && memcmp(out, "record", 6) == 0 && missed == 1012;
  free(out);
  pr_ring_unref(small);
  int open_after_one = fcntl(fd, F_GETFD) == 0 || fcntl(fd, F_GETFD) > 0;
  pr_ring_unref(r);
  int closed = fcntl(fd, F_GETFD) < 0;
  rmdir(dir);
  CHECKF(whole, "whole tail: %zu bytes, missed %llu, next %llu", len, (unsigned long long)missed,
         (unsigned long long)next);
  CHECK(part);
  CHECK(last8);
  CHECKF(head == 1000 && tail == 1018, "offsets %llu..%llu", (unsigned long long)head,
         (unsigned long long)tail);
  CHECK(trimmed);
  CHECK(open_after_one);
  CHECK(closed);
}

/* A writer and a reader on two threads (the engine and the host): the reader
 * sees the pattern in order while the writer spills and wraps (ASan here;
 * the TSan build of this file checks the locking). */
typedef struct {
  pr_ring_t *r;
  uint64_t total;
  int finished; /* atomic */
} spill_thread_t;

static void *spill_writer(void *arg) {
  spill_thread_t *t = arg;
  for (int k = 0; k < 3000; k++) put(t->r, &t->total, 1 + (size_t)(k * 7919 % 3000));
  __atomic_store_n(&t->finished, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void test_spill_threads(void) {
  char dir[256];
  CHECK(spill_tmpdir(dir, sizeof(dir)));
  spill_thread_t t = {spill_ring(dir, 50000, 4096, NULL), 0, 0};
  CHECK(t.r);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, spill_writer, &t) == 0);
  int bad = 0, last = 0;
  uint64_t seen = 0;
  while (!last) {
    last = __atomic_load_n(&t.finished, __ATOMIC_ACQUIRE); /* then one more take */
    char *d;
    size_t n;
    uint64_t from, missed;
    int resume;
    if (pr_ring_take(t.r, &d, &n, &from, &missed, &resume) != 0) bad++;
    for (size_t j = 0; j < n; j++) bad += d[j] != (char)((from + j) % 251);
    free(d);
    seen += n;
  }
  pthread_join(th, NULL);
  CHECK_EQ(bad, 0);
  CHECK(seen > 0);
  check_pattern(t.r, t.total);
  pr_ring_unref(t.r);
  CHECK_EQ(dir_entries(dir), 0);
  rmdir(dir);
}

/* The writer writes the spill file without holding the ring's mutex, so a
 * host thread's take never waits on the disk (a pwrite the kernel's
 * writeback stalls): at each spill write the mutex is free; what is read
 * back is still the pattern, also with a reader taking between the writes. */
static int writes_free, writes_locked;

static void probe_write(pr_ring_t *r) {
  if (pthread_mutex_trylock(&r->mu) == 0) {
    writes_free++;
    pthread_mutex_unlock(&r->mu);
  } else {
    writes_locked++;
  }
}

static void test_spill_write_unlocked(void) {
  char dir[256];
  CHECK(spill_tmpdir(dir, sizeof(dir)));
  pr_spill_t *s;
  pr_ring_t *r = spill_ring(dir, 1 << 15, 2048, &s);
  CHECK(r);
  s->test_write = probe_write;
  uint64_t total = 0, seen = 0;
  int bad = 0;
  for (int k = 0; k < 100; k++) {
    put(r, &total, 1 + (size_t)(k * 613 % 5000)); /* some writes alone over the memory part */
    if (k % 3) continue;
    char *d;
    size_t n;
    uint64_t from, missed;
    int resume;
    CHECK_OK(pr_ring_take(r, &d, &n, &from, &missed, &resume));
    for (size_t j = 0; j < n; j++) bad += d[j] != (char)((from + j) % 251);
    seen += n;
    free(d);
  }
  CHECK_EQ(bad, 0);
  CHECK(seen > 0);
  CHECKF(writes_free > 0 && writes_locked == 0, "spill writes: %d with the mutex free, %d held",
         writes_free, writes_locked);
  check_pattern(r, total);
  pr_ring_unref(r);
  pr_spill_unref(s);
  CHECK_EQ(dir_entries(dir), 0);
  rmdir(dir);
}

/* An uncapped host poll takes a ring head first, a chunk at a time: the rest
 * stays undelivered and the marker stays set (its caller queues one more). */
static void test_take_head_chunks(void) {
  pr_ring_t *r = pr_ring_new(1 << 20);
  CHECK(r);
  char src[200];
  for (size_t i = 0; i < sizeof(src); i++) src[i] = (char)(i % 251);
  CHECK_OK(pr_ring_write(r, src, sizeof(src)));
  CHECK_EQ(pr_ring_mark(r), 1);
  uint64_t want = 0;
  for (int k = 0; k < 4; k++) {
    char *d;
    size_t n;
    uint64_t from, missed;
    int resume, more;
    CHECK_OK(pr_ring_take_head(r, 64, &d, &n, &from, &missed, &resume, &more));
    CHECK_EQ(from, want);
    CHECK_EQ(missed, 0);
    CHECK_EQ(n, k < 3 ? 64 : 8);
    CHECK_EQ(more, k < 3);
    CHECK(n && memcmp(d, src + from, n) == 0);
    want += n;
    free(d);
    /* the marker is still set while bytes are left, cleared by the last take */
    CHECK_EQ(pr_ring_mark(r), k == 3);
  }
  CHECK_EQ(pr_ring_undelivered(r), 0);
  pr_ring_unref(r);
}

/* The VmFlags line of the mapping of /proc/self/smaps that holds `p` (out, n). */
static int vm_flags(const void *p, char *out, size_t n) {
  FILE *f = fopen("/proc/self/smaps", "r");
  if (f == NULL) return 0;
  char line[256];
  int in = 0, found = 0;
  while (!found && fgets(line, sizeof(line), f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && strchr(line, '-') < strchr(line, ' '))
      in = (uintptr_t)p >= lo && (uintptr_t)p < hi;
    else if (in && strncmp(line, "VmFlags:", 8) == 0) {
      snprintf(out, n, "%s", line);
      found = 1;
    }
  }
  fclose(f);
  return found;
}

/* A ring's memory part of 2 MiB and more is 2 MiB-aligned and asks for huge
 * pages (VmFlags "hg"): a flood faults an 8 MiB ring in 4 pieces, not 2,048. */
static void test_big_ring_huge_pages(void) {
  pr_ring_t *r = pr_ring_new(8 << 20);
  CHECK(r);
  static char chunk[65536];
  for (int k = 0; k < 48; k++) CHECK_OK(pr_ring_write(r, chunk, sizeof(chunk))); /* 3 MiB */
  CHECKF(r->cap >= ((size_t)2 << 20), "cap %zu", r->cap);
  CHECKF(((uintptr_t)r->buf & (((uintptr_t)2 << 20) - 1)) == 0, "buf %p not 2 MiB-aligned",
         (void *)r->buf);
  char flags[256];
  if (access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0 &&
      vm_flags(r->buf, flags, sizeof(flags)))
    CHECKF(strstr(flags, " hg") != NULL, "no huge-page advice: %s", flags);
  pr_ring_unref(r);
}

/* A host reference read by offset (pr_ring_read, what pr_output_read is)
 * while the writer writes, spills and wraps on its own thread, then drops the
 * execution's reference: every read is the pattern at its offsets, what it
 * skipped is exactly what the ring no longer held, and the ring lives on
 * until the reader's unref, the last one (ASan: no use after free; the TSan
 * build of this file: no race). */
typedef struct {
  pr_ring_t *r;
  uint64_t total;
  int finished; /* atomic */
} release_thread_t;

static void *release_writer(void *arg) {
  release_thread_t *t = arg;
  for (int k = 0; k < 3000; k++) put(t->r, &t->total, 1 + (size_t)(k * 7919 % 3000));
  pr_ring_unref(t->r); /* the execution goes: the host's reference keeps the ring */
  __atomic_store_n(&t->finished, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void test_read_while_written_then_released(void) {
  char dir[256];
  CHECK(spill_tmpdir(dir, sizeof(dir)));
  release_thread_t t = {spill_ring(dir, 50000, 4096, NULL), 0, 0};
  CHECK(t.r);
  pr_ring_ref(t.r); /* the host's */
  pthread_t th;
  CHECK(pthread_create(&th, NULL, release_writer, &t) == 0);
  int bad = 0, done = 0, reads = 0;
  uint64_t at = 0, seen = 0, skipped = 0;
  /* until the writer is done and the reader has caught up with its last byte */
  while (!done || at < t.total) {
    if (!done) done = __atomic_load_n(&t.finished, __ATOMIC_ACQUIRE);
    char *d;
    size_t n;
    uint64_t next, missed, head, tail;
    /* behind the writer: from where the last read ended, or an older offset */
    uint64_t from = reads % 4 == 3 && at > 20000 ? at - 20000 : at;
    pr_ring_stats(t.r, &head, &tail);
    if (pr_ring_read(t.r, from, 6000, &d, &n, &next, &missed) != 0) bad++;
    reads++;
    for (size_t j = 0; j < n; j++) bad += d[j] != (char)((next - n + j) % 251);
    bad += next - n != from + missed;          /* bytes skipped, then the bytes read */
    bad += missed > 0 && from + missed < head; /* skipped no more than had been dropped */
    free(d);
    if (from == at) {
      seen += n;
      skipped += missed;
      at = next;
    }
  }
  pthread_join(th, NULL);
  CHECK_EQ(bad, 0);
  CHECKF(seen > 0 && seen + skipped == t.total, "read %ju + skipped %ju of %ju", (uintmax_t)seen,
         (uintmax_t)skipped, (uintmax_t)t.total);
  check_pattern(t.r, t.total); /* the writer's reference is gone, the bytes are not */
  pr_ring_unref(t.r);          /* the last: frees the ring and closes its file */
  CHECK_EQ(dir_entries(dir), 0);
  rmdir(dir);
}

int main(void) {
  RUN(test_write_read_offsets);
  RUN(test_drop_head_keep_tail);
  RUN(test_wrap_and_grow);
  RUN(test_take_and_marker);
  RUN(test_trim_keeps_tail);
  RUN(test_grow_keeps_bytes);
  RUN(test_spill_read_across);
  RUN(test_spill_wrap_and_take);
  RUN(test_spill_trim_shrink);
  RUN(test_spill_not_inherited);
  RUN(test_spill_dir_unusable);
  RUN(test_spill_write_fails);
  RUN(test_spill_max_files);
  RUN(test_spill_same_as_memory);
  RUN(test_backed_reads_file);
  RUN(test_spill_threads);
  RUN(test_spill_write_unlocked);
  RUN(test_take_head_chunks);
  RUN(test_big_ring_huge_pages);
  RUN(test_read_while_written_then_released);
  return TAP_END();
}
