/* discover.c — which proctor socket proctor-mcp may talk to, and finding the
 * running editor's one.
 *
 * Thread: main.
 *
 * The Neovim layer listens on $XDG_RUNTIME_DIR/proctor/<pid>.sock, or
 * /tmp/proctor-<uid>/<pid>.sock without XDG_RUNTIME_DIR (<pid>: the editor's),
 * in a 0700 directory, the socket 0600 (lua/proctor/engine.lua, the core's
 * rpc server). A socket is used only when that holds and it is ours; after
 * connecting, the peer's uid is checked again (rpc.c, SO_PEERCRED).
 *
 * The agent that starts us often does not pass XDG_RUNTIME_DIR on (the MCP
 * SDKs' default environment has only HOME, LOGNAME, PATH, SHELL, TERM and
 * USER), so besides $XDG_RUNTIME_DIR/proctor the fixed places are scanned
 * whatever the environment: /run/user/<uid>/proctor (where a login's
 * XDG_RUNTIME_DIR usually is) and /tmp/proctor-<uid>. The tests move those
 * two under a private directory with PROCTOR_DISCOVER_ROOT (tests/README.md).
 * It stays in the shipped program, documented (|proctor-mcp-mode|), because it
 * grants nothing: a socket found under it passes the same checks as one found
 * in the real places, and PROCTOR_SOCKET already names any socket. Compiling
 * it into a test build only would leave the shipped program's discovery
 * untested: the mcp and acp-proxy tiers run it and the editors of everyone on
 * the machine share the real places.
 */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/sockname.h"
#include "mcp.h"

int mc_socket_safe(const char *path, char *err, size_t errlen) {
  struct stat st;
  uid_t uid = getuid();
  if (lstat(path, &st) != 0) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
  }
  if (!S_ISSOCK(st.st_mode)) {
    snprintf(err, errlen, "%s is not a socket", path);
    return -1;
  }
  if (st.st_uid != uid || (st.st_mode & 077)) {
    snprintf(err, errlen,
             "%s must be a socket of uid %u with mode 0600 (it has uid %u, mode %03o); refused",
             path, (unsigned)uid, (unsigned)st.st_uid, (unsigned)(st.st_mode & 0777));
    return -1;
  }
  char dir[4096];
  snprintf(dir, sizeof(dir), "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == NULL) {
    snprintf(dir, sizeof(dir), ".");
  } else if (slash == dir) {
    dir[1] = 0;
  } else {
    *slash = 0;
  }
  if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != uid || (st.st_mode & 077)) {
    snprintf(err, errlen,
             "%s: its directory %s must be a directory of uid %u with mode 0700; refused", path,
             dir, (unsigned)uid);
    return -1;
  }
  return 0;
}

/* Is something listening at path? (a stale file of a crashed editor is not) */
static int listening(const char *path) {
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof(sa.sun_path)) return 0;
  strcpy(sa.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  int ok = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
  close(fd);
  return ok;
}

/* The parent of pid (from /proc), or 0. */
static long parent_of(long pid) {
  char p[64], buf[512];
  snprintf(p, sizeof(p), "/proc/%ld/stat", pid);
  FILE *f = fopen(p, "r");
  if (f == NULL) return 0;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  char *rp = strrchr(buf, ')'); /* the command name may hold spaces and parens */
  long ppid = 0;
  if (rp == NULL || sscanf(rp + 1, " %*c %ld", &ppid) != 1) return 0;
  return ppid;
}

typedef struct {
  char path[4096 + 260];
  long pid;
} cand_t;

static void scan(const char *dir, cand_t *v, size_t *n, size_t cap) {
  DIR *d = opendir(dir);
  if (d == NULL) return;
  struct dirent *e;
  char err[512];
  while ((e = readdir(d)) != NULL && *n < cap) {
    long pid = pr_sockname_pid(e->d_name); /* <pid>.sock, the editor's naming */
    if (pid == 0) continue;
    if (kill((pid_t)pid, 0) != 0) continue; /* gone, or not ours */
    cand_t *c = &v[*n];
    snprintf(c->path, sizeof(c->path), "%s/%s", dir, e->d_name);
    c->pid = pid;
    if (mc_socket_safe(c->path, err, sizeof(err)) != 0) {
      mc_log("discovery: skipping %s", err);
      continue;
    }
    if (!listening(c->path)) continue;
    (*n)++;
  }
  closedir(d);
}

/* Add `dir` to the `nd` directories to scan unless one of them is the same
 * directory (the same device and inode, or the same path). */
static void add_dir(char (*dirs)[4096], struct stat *ids, size_t *nd, const char *dir) {
  struct stat st;
  int have = stat(dir, &st) == 0;
  for (size_t i = 0; i < *nd; i++)
    if (strcmp(dirs[i], dir) == 0 ||
        (have && ids[i].st_ino == st.st_ino && ids[i].st_dev == st.st_dev && ids[i].st_ino))
      return;
  snprintf(dirs[*nd], sizeof(dirs[*nd]), "%s", dir);
  if (have) ids[*nd] = st;
  else memset(&ids[*nd], 0, sizeof(ids[*nd]));
  (*nd)++;
}

char *mc_discover(char *why, size_t whylen) {
  cand_t v[64];
  size_t n = 0;
  char dirs[3][4096], dir[4096];
  struct stat ids[3], st;
  size_t nd = 0;
  unsigned uid = (unsigned)getuid();
  /* Where the editor puts it (lua/proctor/engine.lua): under XDG_RUNTIME_DIR
   * when that is a directory, else under /tmp/proctor-<uid>; and the fixed
   * places, whatever our environment says. */
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  int xdg_first = 0; /* dirs[0] is $XDG_RUNTIME_DIR/proctor */
  if (xdg && *xdg && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode)) {
    snprintf(dir, sizeof(dir), "%s/proctor", xdg);
    add_dir(dirs, ids, &nd, dir);
    xdg_first = 1;
  }
  const char *root = getenv("PROCTOR_DISCOVER_ROOT"); /* the tests' private "/" */
  if (root == NULL) root = "";
  snprintf(dir, sizeof(dir), "%s/run/user/%u/proctor", root, uid);
  add_dir(dirs, ids, &nd, dir);
  snprintf(dir, sizeof(dir), "%s/tmp/proctor-%u", root, uid);
  add_dir(dirs, ids, &nd, dir);
  /* An editor in the directory our environment names wins: the fixed places
   * count only when it has none. */
  if (xdg_first) scan(dirs[0], v, &n, 64);
  if (n == 0)
    for (size_t i = (size_t)xdg_first; i < nd; i++) scan(dirs[i], v, &n, 64);
  if (n == 0) {
    snprintf(why, whylen, "no running editor's proctor socket was found (looked in %s%s%s%s%s)",
             dirs[0], nd > 1 ? ", " : "", nd > 1 ? dirs[1] : "", nd > 2 ? ", " : "",
             nd > 2 ? dirs[2] : "");
    return NULL;
  }
  /* Prefer the nearest ancestor: proctor-mcp started from that editor's terminal. */
  for (long pid = getppid(), depth = 0; pid > 1 && depth < 64; pid = parent_of(pid), depth++)
    for (size_t i = 0; i < n; i++)
      if (v[i].pid == pid) return strdup(v[i].path);
  if (n == 1) return strdup(v[0].path);
  snprintf(why, whylen,
           "%zu editors have a proctor socket and none is an ancestor of proctor-mcp: name one "
           "with --socket "
           "or PROCTOR_SOCKET",
           n);
  return NULL;
}
