/* tap.h — the C test runner's tiny framework.
 *
 * Prints "PASS name" / "FAIL name: file:line: expr" per test, like every
 * other tier (tests/run counts those lines). CHECK records a failure and
 * returns from the test function. PROCTOR_TEST=word1,word2 runs only the tests
 * whose name contains one of the words (like every other tier).
 */
#ifndef PR_TAP_H
#define PR_TAP_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_failed_now, tap_passed, tap_failed;
static char tap_why[512];

#define CHECK(expr)                                                                      \
  do {                                                                                   \
    if (!(expr)) {                                                                       \
      snprintf(tap_why, sizeof(tap_why), "%s:%d: %s", __FILE__, __LINE__, #expr);        \
      tap_failed_now = 1;                                                                \
      return;                                                                            \
    }                                                                                    \
  } while (0)

#define CHECKF(expr, ...)                                                                \
  do {                                                                                   \
    if (!(expr)) {                                                                       \
      int n_ = snprintf(tap_why, sizeof(tap_why), "%s:%d: %s: ", __FILE__, __LINE__, #expr); \
      snprintf(tap_why + n_, sizeof(tap_why) - (size_t)n_, __VA_ARGS__);                \
      tap_failed_now = 1;                                                                \
      return;                                                                            \
    }                                                                                    \
  } while (0)

/* Is the test `name` selected by PROCTOR_TEST? */
static int tap_selected(const char *name) {
  const char *only = getenv("PROCTOR_TEST");
  if (only == NULL || *only == 0) return 1;
  while (*only) {
    const char *end = strchr(only, ',');
    size_t n = end ? (size_t)(end - only) : strlen(only);
    char word[128];
    if (n > 0 && n < sizeof(word)) {
      memcpy(word, only, n);
      word[n] = 0;
      if (strstr(name, word)) return 1;
    }
    only += n + (end != NULL);
  }
  return 0;
}

#define RUN(fn)                                                                          \
  do {                                                                                   \
    if (!tap_selected(#fn)) break;                                                       \
    tap_failed_now = 0;                                                                  \
    fn();                                                                                \
    if (tap_failed_now) {                                                                \
      tap_failed++;                                                                      \
      printf("FAIL %s: %s\n", #fn, tap_why);                                             \
    } else {                                                                             \
      tap_passed++;                                                                      \
      printf("PASS %s\n", #fn);                                                          \
    }                                                                                    \
    fflush(stdout);                                                                      \
  } while (0)

#define TAP_END() (printf("# %d passed, %d failed\n", tap_passed, tap_failed), tap_failed ? 1 : 0)

#endif
