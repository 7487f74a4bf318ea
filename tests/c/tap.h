/* tap.h — the C test runner's tiny framework.
 *
 * Prints "PASS name" / "FAIL name: file:line: expr" per test, like every
 * other tier (tests/run counts those lines). A CHECK records a failure and
 * returns from the test function. PROCTOR_TEST=word1,word2 runs only the tests
 * whose name contains one of the words (like every other tier).
 *
 * A failure says what it saw:
 *   CHECK(expr)             expr is true                 "file:line: expr"
 *   CHECKF(expr, fmt, ...)  the same, with a message     "file:line: expr: message"
 *   CHECK_EQ(a, b)          a == b, both integers        "file:line: a == b: 3 != 4"
 *   CHECK_OK(rc)            rc == 0, an error code       "file:line: rc: ENOENT (-30001) no such execution"
 *   CHECK_ERR(rc, want)     rc == want, error codes      "file:line: rc == want: 0 (OK), not ENOENT (-30001)"
 * CHECK_OK and CHECK_ERR name the codes with pr_err_name (csrc/base/error.c: link it).
 */
#ifndef PR_TAP_H
#define PR_TAP_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "include/proctor.h"

static int tap_failed_now, tap_passed, tap_failed;
static char tap_why[512];

#define CHECK(expr)                                                               \
  do {                                                                            \
    if (!(expr)) {                                                                \
      snprintf(tap_why, sizeof(tap_why), "%s:%d: %s", __FILE__, __LINE__, #expr); \
      tap_failed_now = 1;                                                         \
      return;                                                                     \
    }                                                                             \
  } while (0)

#define CHECKF(expr, ...)                                                                    \
  do {                                                                                       \
    if (!(expr)) {                                                                           \
      int n_ = snprintf(tap_why, sizeof(tap_why), "%s:%d: %s: ", __FILE__, __LINE__, #expr); \
      snprintf(tap_why + n_, sizeof(tap_why) - (size_t)n_, __VA_ARGS__);                     \
      tap_failed_now = 1;                                                                    \
      return;                                                                                \
    }                                                                                        \
  } while (0)

/* Both sides as intmax_t (an unsigned value past INTMAX_MAX shows negative). */
#define CHECK_EQ(a, b)                                                                          \
  do {                                                                                          \
    intmax_t a_ = (intmax_t)(a), b_ = (intmax_t)(b);                                            \
    if (a_ != b_) {                                                                             \
      snprintf(tap_why, sizeof(tap_why), "%s:%d: %s == %s: %jd != %jd", __FILE__, __LINE__, #a, \
               #b, a_, b_);                                                                     \
      tap_failed_now = 1;                                                                       \
      return;                                                                                   \
    }                                                                                           \
  } while (0)

/* "OK" for 0, else the error's name (pr_err_name: "EUNKNOWN" for a code it does not know). */
static inline const char *tap_err_name(int rc) { return rc == 0 ? "OK" : pr_err_name(rc); }

#define CHECK_OK(rc)                                                                       \
  do {                                                                                     \
    int rc_ = (int)(rc);                                                                   \
    if (rc_ != 0) {                                                                        \
      snprintf(tap_why, sizeof(tap_why), "%s:%d: %s: %s (%d) %s", __FILE__, __LINE__, #rc, \
               tap_err_name(rc_), rc_, pr_strerror(rc_));                                  \
      tap_failed_now = 1;                                                                  \
      return;                                                                              \
    }                                                                                      \
  } while (0)

#define CHECK_ERR(rc, want)                                                                 \
  do {                                                                                      \
    int rc_ = (int)(rc), want_ = (int)(want);                                               \
    if (rc_ != want_) {                                                                     \
      snprintf(tap_why, sizeof(tap_why), "%s:%d: %s == %s: %s (%d), not %s (%d)", __FILE__, \
               __LINE__, #rc, #want, tap_err_name(rc_), rc_, tap_err_name(want_), want_);   \
      tap_failed_now = 1;                                                                   \
      return;                                                                               \
    }                                                                                       \
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

#define RUN(fn)                              \
  do {                                       \
    if (!tap_selected(#fn)) break;           \
    tap_failed_now = 0;                      \
    fn();                                    \
    if (tap_failed_now) {                    \
      tap_failed++;                          \
      printf("FAIL %s: %s\n", #fn, tap_why); \
    } else {                                 \
      tap_passed++;                          \
      printf("PASS %s\n", #fn);              \
    }                                        \
    fflush(stdout);                          \
  } while (0)

#define TAP_END() (printf("# %d passed, %d failed\n", tap_passed, tap_failed), tap_failed ? 1 : 0)

#endif
