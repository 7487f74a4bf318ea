/* error.h — the one table of proctor error codes.
 *
 * Thread: any (pure data).
 *
 * Every fallible function returns 0 or a negative code: either a libuv code
 * (UV_E*, which are negated errnos) passed through, or a PR_E* code from the
 * table below. The same NAMES appear in C, in Lua (`nil, "ENAME: msg", "ENAME"`)
 * and on the RPC wire (`[name, message]`).
 */
#ifndef PR_ERROR_H
#define PR_ERROR_H

/* X(name, value, message). Values sit far below any errno so they never clash
 * with UV_E* codes. */
#define PR_ERRNO_MAP(X)                                                          \
  X(ENOENT, -30001, "no such execution")                                         \
  X(ENOTRUNNING, -30002, "execution is not running")                             \
  X(ESTDINCLOSED, -30003, "stdin of the execution is closed")                    \
  X(ECLOSED, -30004, "engine is closed")                                         \
  X(EINVAL, -30005, "invalid argument")                                          \
  X(ENOMEM, -30006, "out of memory")                                             \
  X(ESHEPHERD, -30007, "cannot start the shepherd helper")                       \
  X(EPROTO, -30008, "protocol error")                                            \
  X(ETOOBIG, -30009, "argument too large")                                       \
  X(ENOSTREAM, -30010, "no such stream for this execution")                      \
  X(EBUSY, -30011, "resource busy")                                              \
  X(ENOMETHOD, -30012, "no such method")                                        \
  X(ENOTWORKER, -30013, "execution is not a worker")

typedef enum {
#define X(name, value, msg) PR_##name = value,
  PR_ERRNO_MAP(X)
#undef X
} pr_errno_t;

/* pr_strerror_name: the symbolic name of `err` ("ENOENT", "EPIPE", ...).
 * Works for PR_E* codes and UV_E* codes; never returns NULL. Thread-safe. */
const char *pr_err_name(int err);

/* pr_strerror: a human-readable message for `err`. Never NULL. Thread-safe. */
const char *pr_strerror(int err);

#endif
