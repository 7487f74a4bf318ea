/* tests/fuzz/wparse.c — the worker protocol parsers and the output masker, set up
 * without an engine, for the worker fuzz target (tests/fuzz/fuzz_worker.c).
 * Declared in include/proctor_test.h; not part of any surface.
 *
 * Thread: whichever calls it (nothing here is shared).
 */
#include <stdlib.h>

#include "engine/secrets.h"
#include "engine/worker.h"
#include "include/proctor_test.h"

_Static_assert(PR_TEST_WM_CHUNK == PR_WM_CHUNK && PR_TEST_WM_OK == PR_WM_OK &&
                   PR_TEST_WM_ERROR == PR_WM_ERROR,
               "proctor_test.h names the kinds of engine/worker.h");

struct pr_test_wparse {
  int msgpack;
  pr_jsonl_t jsonl;
  pr_wmp_t *mp;
  pr_secrets_t *m;
  pr_wparse_cb_t cb;
  void (*message)(void *arg, int kind, uint64_t rid, char *text, size_t len);
  void *arg;
};

static void on_message(void *arg, pr_worker_msg_t kind, uint64_t rid, char *text, size_t len) {
  pr_test_wparse_t *t = arg;
  t->message(t->arg, (int)kind, rid, text, len);
}

static void on_write(void *arg, const char *p, size_t n) {
  (void)arg;
  (void)p;
  (void)n;
}

static void on_mask(void *arg, struct cJSON *j) {
  pr_secrets_mask_json(((pr_test_wparse_t *)arg)->m, j);
}

pr_test_wparse_t *pr_test_wparse_new(int msgpack, const char *const *secrets, size_t n,
                                     void (*message)(void *arg, int kind, uint64_t rid, char *text,
                                                     size_t len),
                                     void *arg) {
  pr_spec_t s = {.secrets = secrets, .nsecrets = n};
  pr_test_wparse_t *t = calloc(1, sizeof(*t));
  if (t == NULL) return NULL;
  t->msgpack = msgpack;
  t->message = message;
  t->arg = arg;
  t->cb = (pr_wparse_cb_t){on_message, on_write, on_mask, t};
  pr_jsonl_init(&t->jsonl, &t->cb);
  if (pr_secrets_check(&s) != 0 || pr_secrets_new(&s, &t->m) != 0 ||
      (msgpack && (t->mp = pr_wmp_new(&t->cb)) == NULL)) {
    pr_test_wparse_free(t);
    return NULL;
  }
  return t;
}

const char *pr_test_wparse_feed(pr_test_wparse_t *t, const char *p, size_t *n) {
  if (p && t->msgpack) pr_wmp_feed(t->mp, p, *n);
  else if (p) pr_jsonl_feed(&t->jsonl, p, *n);
  if (t->m == NULL) return p;
  return pr_secrets_mask(t->m, PR_STDOUT, p, n);
}

void pr_test_wparse_free(pr_test_wparse_t *t) {
  if (t == NULL) return;
  pr_wmp_free(t->mp);
  pr_jsonl_free(&t->jsonl);
  pr_secrets_free(t->m);
  free(t);
}
