/* tap.h — the C test runner's tiny framework.
 *
 * Prints "PASS name" / "FAIL name: file:line: expr" per test, like every
 * other tier (tests/run counts those lines). CHECK records a failure and
 * returns from the test function.
 */
#ifndef PR_TAP_H
#define PR_TAP_H

#include <stdio.h>
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

#define RUN(fn)                                                                          \
  do {                                                                                   \
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
