/* base/sockname.c — reading `<pid>.sock`, an editor's RPC socket name
 * (base/sockname.h).
 *
 * Thread: any.
 */
#include "base/sockname.h"

#include <string.h>

long pr_sockname_pid(const char *name) {
  if (name == NULL || name[0] < '1' || name[0] > '9') return 0; /* no sign, space or leading 0 */
  long pid = 0;
  const char *p = name;
  for (; *p >= '0' && *p <= '9'; p++) {
    pid = pid * 10 + (*p - '0');
    if (pid > PR_SOCKNAME_PID_MAX) return 0; /* before it could overflow */
  }
  return strcmp(p, ".sock") == 0 ? pid : 0;
}
