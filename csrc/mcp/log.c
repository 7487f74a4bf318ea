/* log.c — the log lines of proctor-mcp and proctor-acp on stderr, each
 * prefixed with the program's name (mc_log_name).
 *
 * Thread: main.
 */
#include <stdarg.h>
#include <stdio.h>

#include "mcp.h"

const char *mc_log_name = "proctor-mcp";

void mc_log(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s: ", mc_log_name);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}
