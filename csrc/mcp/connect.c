/* connect.c — the one connection to a proctor socket, made on first use:
 * the socket named by --socket / PROCTOR_SOCKET, else the running editor's
 * (discover.c), else a private embedded engine (embedded.c). Shared by
 * proctor-mcp (tools.c) and proctor-acp (csrc/acp/).
 *
 * Thread: main.
 */
#include <stdio.h>
#include <stdlib.h>

#include "mcp.h"

static int embedded; /* the connection goes to our own engine */

int mc_connect(const char *name, char *err, size_t errlen) {
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
  if (mc_rpc_connect(path, name, err, errlen) != 0) goto fail;
  mc_log("connected to %s as %s", path, name);
  free(found);
  return 0;
fail:
  free(found);
  return -1;
}

const char *mc_connect_mode(void) { return embedded ? "embedded" : "editor"; }
