/* embedded.c — proctor-mcp's own engine, for when no editor's socket is used.
 *
 * Thread: main (the engine runs its own thread and its shepherd process).
 *
 * The engine listens on a socket in a fresh private directory (mkdtemp: 0700),
 * and proctor-mcp talks to it through rpc.c exactly as it talks to an
 * editor's socket: one code path, the same sessions, limits and errors. The
 * engine's host events are not needed (everything is read over the socket);
 * they are taken and dropped so they never pile up.
 *
 * This is the only file of proctor-mcp that uses the engine's C API.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/proctor.h"
#include "mcp.h"

static pr_engine_t *eng;
static char dir[4096];
static char sock[4096 + 32];
static char shepherd[4096 + 32];

int mc_embedded_start(const char **path, char *err, size_t errlen) {
  if (eng) {
    *path = sock;
    return 0;
  }
  const char *tmp = getenv("TMPDIR");
  if (tmp == NULL || *tmp == 0 || strlen(tmp) > 60) tmp = "/tmp";
  snprintf(dir, sizeof(dir), "%s/proctor-mcp-XXXXXX", tmp);
  if (mkdtemp(dir) == NULL) {
    snprintf(err, errlen, "cannot create a private directory in %s", tmp);
    dir[0] = 0;
    return -1;
  }
  snprintf(sock, sizeof(sock), "%s/engine.sock", dir);
  pr_engine_opts_t o = {0};
  o.listen = sock;
  o.shepherd_path = mc_opts.shepherd;
  if (o.shepherd_path == NULL) {
    /* next to this program (the core's own lookup would use dladdr, which
     * names a program by how it was invoked, not by its path) */
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
      self[n] = 0;
      char *slash = strrchr(self, '/');
      if (slash) *slash = 0;
      snprintf(shepherd, sizeof(shepherd), "%s/proctor-shepherd", self);
      o.shepherd_path = shepherd;
    }
  }
  o.output_limit = (size_t)mc_opts.output_limit;
  int rc = pr_engine_new(&o, &eng);
  if (rc != 0) {
    snprintf(err, errlen, "the embedded engine did not start: %s: %s", pr_err_name(rc),
             pr_strerror(rc));
    eng = NULL;
    rmdir(dir);
    dir[0] = 0;
    return -1;
  }
  *path = sock;
  return 0;
}

int mc_embedded_fd(void) { return eng ? pr_engine_fd(eng) : -1; }

void mc_embedded_drain(void) {
  if (eng == NULL) return;
  pr_event_t *evs[256];
  size_t n;
  /* max_bytes 1: output events carry at most one byte (the rest is never copied). */
  while ((n = pr_engine_poll(eng, evs, 256, 1)) > 0)
    for (size_t i = 0; i < n; i++) pr_event_free(evs[i]);
}

void mc_embedded_stop(void) {
  if (eng == NULL) return;
  pr_engine_free(eng); /* cancels everything and waits, bounded by the grace period */
  eng = NULL;
  unlink(sock);
  if (dir[0]) rmdir(dir);
}
