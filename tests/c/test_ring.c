/* test_ring.c — unit tests of the output ring (csrc/base/ring.c). */
#include <stdlib.h>

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

int main(void) {
  RUN(test_write_read_offsets);
  RUN(test_drop_head_keep_tail);
  RUN(test_wrap_and_grow);
  RUN(test_take_and_marker);
  RUN(test_trim_keeps_tail);
  RUN(test_grow_keeps_bytes);
  return TAP_END();
}
