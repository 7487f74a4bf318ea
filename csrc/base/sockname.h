/* base/sockname.h — the name an editor gives its RPC socket: `<pid>.sock`.
 *
 * Thread: any (a pure function).
 *
 * The Neovim layer listens on <dir>/<pid>.sock, <pid> its own process id in
 * decimal (lua/proctor/engine.lua). Two readers look for such names in that
 * directory: the RPC server's sweep of sockets of editors that are gone
 * (rpc/server.c) and proctor-mcp's discovery of the running editor
 * (mcp/discover.c). Both read a name with the one parser below, so a name
 * one of them takes for an editor's the other does too.
 */
#ifndef PR_SOCKNAME_H
#define PR_SOCKNAME_H

/* The highest pid the kernel can hand out whatever pid_max says
 * (PID_MAX_LIMIT on 64-bit Linux: pid_max cannot be set above it). The
 * current pid_max is not the bound: it may have been lowered after an
 * editor with a higher pid started, and that editor still runs. */
#define PR_SOCKNAME_PID_MAX 4194304L

/* pr_sockname_pid: the pid in an editor's socket name `name` (a file name,
 * not a path), or 0 when `name` is not one. Taken: exactly the decimal form
 * the Neovim layer writes, then ".sock": "123.sock" gives 123. Refused (0):
 * anything else around the digits ("12a.sock", "123.sock.tmp", ".sock",
 * " 12.sock", "+12.sock", "-12.sock"), a leading zero ("0123.sock", "0.sock":
 * no editor writes it, so one pid has one name), and a pid above
 * PR_SOCKNAME_PID_MAX (no process has it; it would not fit a pid_t either).
 * `name` must be NUL-terminated; NULL gives 0. */
long pr_sockname_pid(const char *name);

#endif
