/* base/error.c — names and messages for PR_E* codes (the table in
 * include/proctor.h) and UV_E* codes.
 *
 * Thread: any. Pure functions over static tables.
 */
#include "include/proctor.h"

#include <uv.h>

/* Whether err is one of libuv's own codes (whose names and messages are
 * static strings). */
static int uv_known(int err) {
  switch (err) {
#define X(code, _) case UV_##code:
    UV_ERRNO_MAP(X)
#undef X
    return 1;
  }
  return 0;
}

const char *pr_err_name(int err) {
  switch (err) {
#define X(name, value, msg) \
  case PR_##name: return #name;
    PR_ERRNO_MAP(X)
#undef X
  }
  /* uv_err_name is thread-safe for known codes; unknown ones would leak. */
  return uv_known(err) ? uv_err_name(err) : "EUNKNOWN";
}

const char *pr_strerror(int err) {
  switch (err) {
#define X(name, value, msg) \
  case PR_##name: return msg;
    PR_ERRNO_MAP(X)
#undef X
  }
  return uv_known(err) ? uv_strerror(err) : "unknown error";
}
