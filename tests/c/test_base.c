/* test_base.c — unit tests of the leaf modules: the id map and the growable
 * buffer (csrc/base/idmap.c, csrc/base/buf.c). */
#include <stdlib.h>

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
      CHECK(pr_idmap_put(&m, key, &vals[k]) == 0);
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
  CHECK(seen == count);
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

int main(void) {
  RUN(test_idmap_matches_a_reference);
  RUN(test_idmap_any_key);
  RUN(test_buf_grows_caps_and_keeps_its_error);
  return TAP_END();
}
