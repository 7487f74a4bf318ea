/* base/error.c — names and messages for PR_E* codes (the table in
 * include/proctor.h) and UV_E* codes.
 *
 * Thread: any. Pure functions over static tables.
 */
#include "include/proctor.h"

#include <uv.h>

const char *pr_err_name(int err) {
  switch (err) {
#define X(name, value, msg)                                                      \
  case PR_##name:                                                                \
    return #name;
    PR_ERRNO_MAP(X)
#undef X
  }
  if (err < 0) {
    /* uv_err_name is thread-safe for known codes; unknown ones would leak. */
    switch (err) {
#define X(code, _) case UV_##code:
      UV_ERRNO_MAP(X)
#undef X
      return uv_err_name(err);
    }
  }
  return "EUNKNOWN";
}

const char *pr_strerror(int err) {
  switch (err) {
#define X(name, value, msg)                                                      \
  case PR_##name:                                                                \
    return msg;
    PR_ERRNO_MAP(X)
#undef X
  }
  if (err < 0) {
    switch (err) {
#define X(code, _) case UV_##code:
      UV_ERRNO_MAP(X)
#undef X
      return uv_strerror(err);
    }
  }
  return "unknown error";
}
