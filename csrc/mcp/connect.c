/* connect.c — the one connection to a proctor socket, made on first use:
 * the socket named by --socket / PROCTOR_SOCKET, else the running editor's
 * (discover.c), else a private embedded engine (embedded.c). Shared by
 * proctor-mcp (tools.c) and proctor-acp (csrc/acp/).
 *
 * Thread: main.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mcp.h"

static int embedded; /* the connection goes to our own engine */

/* The default shell: the first executable bash on PATH (so agents' bash
 * syntax, [[ ]] and {1..3}, works), else /bin/sh. Static storage. */
static const char *find_bash(void) {
  static char buf[4096];
  const char *path = getenv("PATH");
  if (path == NULL) path = "/usr/local/bin:/usr/bin:/bin";
  for (const char *p = path; *p;) {
    size_t n = strcspn(p, ":");
    if (n > 0 && p[0] == '/' && n + 6 < sizeof(buf)) {
      snprintf(buf, sizeof(buf), "%.*s/bash", (int)n, p);
      if (access(buf, X_OK) == 0) return buf;
    }
    p += n;
    if (*p == ':') p++;
  }
  return "/bin/sh";
}

int mc_opts_finish(void) {
  if (mc_opts.socket == NULL && !mc_opts.embedded) {
    const char *env = getenv("PROCTOR_SOCKET");
    if (env && *env) mc_opts.socket = env;
  }
  char *cwd = realpath(".", NULL);
  if (cwd == NULL) {
    mc_log("cannot resolve the current directory: %s", strerror(errno));
    return -1;
  }
  mc_opts.cwd = cwd;
  if (mc_opts.shell == NULL) mc_opts.shell = find_bash();
  return 0;
}

int mc_connect(const char *name, const char *identity, char *err, size_t errlen) {
  if (mc_rpc_connected()) return 0;
  const char *path = NULL;
  char *found = NULL;
  err[0] = 0;
  embedded = 0;
  if (mc_opts.embedded) {
    if (mc_embedded_start(&path, err, errlen) != 0) goto fail;
    embedded = 1;
  } else if (mc_opts.socket) {
    path = mc_opts.socket;
  } else {
    char why[512];
    if (mc_opts.discover) found = mc_discover(why, sizeof(why));
    if (found) {
      path = found;
    } else {
      if (mc_opts.discover) mc_log("%s: using an embedded engine", why);
      if (mc_embedded_start(&path, err, errlen) != 0) goto fail;
      embedded = 1;
    }
  }
  if (mc_rpc_connect(path, name, identity, err, errlen) != 0) goto fail;
  mc_log("connected to %s as %s", path, name);
  free(found);
  return 0;
fail:
  free(found);
  return -1;
}

const char *mc_connect_mode(void) { return embedded ? "embedded" : "editor"; }
