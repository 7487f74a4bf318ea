/* main.c — proctor-mcp: options, the poll() loop, and the MCP side of the
 * stdio transport: newline-delimited JSON-RPC 2.0 read from stdin and
 * dispatched here (what goes out on stdout, and the logs on stderr: send.c).
 *
 * Thread: main (the only one, besides the embedded engine's own).
 *
 * Lifecycle: initialize (protocol version negotiated: the client's when we
 * speak it, else our latest) → tools/list, tools/call (tools.c), or, MCP
 * 2026-07-28, no handshake: server/discover and requests that carry their
 * version in _meta (era.c) → stdin EOF
 * or SIGTERM/SIGINT: the connection to proctor closes (socket mode: the
 * executions stay in the editor, unless --kill-on-exit) or the embedded
 * engine cancels everything and waits (bounded by its grace period); exit 0.
 * A stop signal wakes the loop through loop.c's self-pipe (one that comes just
 * before poll() is not lost), and it also ends a wait for a full stdout
 * (send.c), so exit stays bounded by the grace period whatever the client
 * does.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mcp.h"

mc_opts_t mc_opts = {.discover = 1, .progress_ms = 1000};

static const char *instructions =
    "Commands run as proctor executions, visible in the user's editor (Neovim) with a live console "
    "the user can type into and stop. Use run_command for commands that finish (it waits up to "
    "wait_ms and returns the exit status and output tail); use start_command for servers, "
    "watchers and REPLs, then read_output, wait_for_command, send_input, interact_with_command "
    "(input, then the output until it waits for input again) and cancel_command with its id. "
    "Cancel kills the whole process tree.";

/* ---- the MCP side ---------------------------------------------------------------------------- */

static cJSON *capabilities(void) {
  cJSON *caps = cJSON_CreateObject();
  cJSON *tools = cJSON_AddObjectToObject(caps, "tools");
  cJSON_AddFalseToObject(tools, "listChanged");
  return caps;
}

/* initialize (legacy): the client's version when we speak it as a legacy one, else our
 * newest legacy one (2026-07-28 has no handshake). */
static void on_initialize(const cJSON *id, const cJSON *params) {
  const cJSON *pv = cJSON_GetObjectItemCaseSensitive(params, "protocolVersion");
  const char *version = NULL;
  for (size_t i = 0; mc_versions[i]; i++) {
    if (strcmp(mc_versions[i], MC_MODERN_VERSION) == 0) continue;
    if (version == NULL) version = mc_versions[i];
    if (cJSON_IsString(pv) && strcmp(pv->valuestring, mc_versions[i]) == 0)
      version = mc_versions[i];
  }
  const cJSON *ci = cJSON_GetObjectItemCaseSensitive(params, "clientInfo");
  const cJSON *name = ci ? cJSON_GetObjectItemCaseSensitive(ci, "name") : NULL;
  if (cJSON_IsString(name) && name->valuestring[0]) mc_set_client_name(name->valuestring);
  cJSON *r = cJSON_CreateObject();
  cJSON_AddStringToObject(r, "protocolVersion", version);
  cJSON_AddItemToObject(r, "capabilities", capabilities());
  cJSON_AddItemToObject(r, "serverInfo", mc_server_info());
  cJSON_AddStringToObject(r, "instructions", instructions);
  mc_era_initialized();
  mc_respond(id, r);
}

/* server/discover (2026-07-28): the versions, capabilities and instructions, cacheable. */
static void on_discover(const cJSON *id) {
  cJSON *r = cJSON_CreateObject();
  cJSON *v = cJSON_AddArrayToObject(r, "supportedVersions");
  for (size_t i = 0; mc_versions[i]; i++)
    cJSON_AddItemToArray(v, cJSON_CreateString(mc_versions[i]));
  cJSON_AddItemToObject(r, "capabilities", capabilities());
  cJSON_AddStringToObject(r, "instructions", instructions);
  cJSON_AddNumberToObject(r, "ttlMs", MC_LIST_TTL_MS);
  cJSON_AddStringToObject(r, "cacheScope", "public");
  mc_respond(id, r);
}

static void on_message(const char *line, size_t len) {
  cJSON *m = cJSON_ParseWithLength(line, len);
  if (m == NULL) {
    mc_respond_error(NULL, -32700, "parse error: not JSON");
    return;
  }
  if (!cJSON_IsObject(m)) {
    mc_respond_error(NULL, -32600,
                     cJSON_IsArray(m) ? "invalid request: batches are not supported"
                                      : "invalid request: an object expected");
    cJSON_Delete(m);
    return;
  }
  const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "id");
  const cJSON *method = cJSON_GetObjectItemCaseSensitive(m, "method");
  const cJSON *params = cJSON_GetObjectItemCaseSensitive(m, "params");
  const cJSON *ver = cJSON_GetObjectItemCaseSensitive(m, "jsonrpc");
  int valid_id = cJSON_IsString(id) ||
                 (cJSON_IsNumber(id) && id->valuedouble == (double)(int64_t)id->valuedouble);
  if (!cJSON_IsString(method)) {
    /* a response to a request of ours (we send none), or garbage */
    if (id && !cJSON_GetObjectItemCaseSensitive(m, "result") &&
        !cJSON_GetObjectItemCaseSensitive(m, "error"))
      mc_respond_error(valid_id ? id : NULL, -32600, "invalid request: no method");
    cJSON_Delete(m);
    return;
  }
  if (!cJSON_IsString(ver) || strcmp(ver->valuestring, "2.0") != 0) {
    if (id)
      mc_respond_error(valid_id ? id : NULL, -32600, "invalid request: jsonrpc must be \"2.0\"");
    cJSON_Delete(m);
    return;
  }
  if (params && !cJSON_IsObject(params)) {
    if (id) mc_respond_error(valid_id ? id : NULL, -32602, "invalid params: an object expected");
    cJSON_Delete(m);
    return;
  }
  const char *meth = method->valuestring;
  if (id == NULL) { /* a notification */
    if (strcmp(meth, "notifications/cancelled") == 0) {
      const cJSON *rid = params ? cJSON_GetObjectItemCaseSensitive(params, "requestId") : NULL;
      if (rid) {
        mc_tools_cancel(rid);
        mc_era_forget(rid); /* never answered */
      }
    }
    /* notifications/initialized and anything else: nothing to do */
    cJSON_Delete(m);
    return;
  }
  if (!valid_id) {
    mc_respond_error(NULL, -32600, "invalid request: id must be a string or an integer");
  } else if (mc_era_check(id, meth, params) != 0) {
    /* answered with an error */
  } else if (strcmp(meth, "initialize") == 0) {
    on_initialize(id, params);
  } else if (strcmp(meth, "server/discover") == 0) {
    on_discover(id);
  } else if (strcmp(meth, "ping") == 0) {
    mc_respond(id, cJSON_CreateObject());
  } else if (strcmp(meth, "tools/list") == 0) {
    cJSON *list = mc_tools_list();
    if (mc_era_modern(id)) { /* 2026-07-28: the list may be cached */
      cJSON_AddNumberToObject(list, "ttlMs", MC_LIST_TTL_MS);
      cJSON_AddStringToObject(list, "cacheScope", "public");
    }
    mc_respond(id, list);
  } else if (strcmp(meth, "tools/call") == 0) {
    if (params == NULL) mc_respond_error(id, -32602, "invalid params: tools/call needs params");
    else mc_tools_call(id, params);
  } else {
    char msg[256];
    snprintf(msg, sizeof(msg), "method not found: %.200s", meth);
    mc_respond_error(id, -32601, msg);
  }
  cJSON_Delete(m);
}

/* ---- stdin ---------------------------------------------------------------------------------- */

static struct {
  char *buf;
  size_t len, cap;
  int skipping; /* inside a line longer than MC_LINE_MAX: drop until its end */
  int eof;
} in;

static void read_stdin(void) {
  if (in.cap - in.len < 65536) {
    size_t cap = in.cap ? in.cap * 2 : 131072;
    char *p = realloc(in.buf, cap);
    if (p == NULL) {
      mc_log("out of memory reading stdin");
      in.eof = 1;
      return;
    }
    in.buf = p;
    in.cap = cap;
  }
  ssize_t n = read(STDIN_FILENO, in.buf + in.len, in.cap - in.len);
  if (n < 0) {
    if (errno != EINTR && errno != EAGAIN) in.eof = 1;
    return;
  }
  if (n == 0) {
    in.eof = 1;
    return;
  }
  in.len += (size_t)n;
  size_t start = 0;
  for (;;) {
    char *nl = memchr(in.buf + start, '\n', in.len - start);
    if (nl == NULL) break;
    size_t end = (size_t)(nl - in.buf);
    if (in.skipping) {
      in.skipping = 0;
    } else {
      size_t e = end;
      if (e > start && in.buf[e - 1] == '\r') e--;
      size_t s = start;
      while (s < e && (in.buf[s] == ' ' || in.buf[s] == '\t')) s++;
      if (e > s) on_message(in.buf + s, e - s);
    }
    start = end + 1;
    /* stopping: dispatch nothing more (the client is not reading, or we were told to stop) */
    if (mc_stop_requested() || mc_send_closed()) {
      in.eof = 1;
      return;
    }
  }
  memmove(in.buf, in.buf + start, in.len - start);
  in.len -= start;
  if (in.len > MC_LINE_MAX) {
    if (!in.skipping) mc_respond_error(NULL, -32700, "parse error: a message larger than 8 MiB");
    in.skipping = 1;
    in.len = 0;
  }
  /* keep the buffer from staying huge after one big message */
  if (in.len < 65536 && in.cap > (1u << 20)) {
    char *p = realloc(in.buf, 131072);
    if (p) {
      in.buf = p;
      in.cap = 131072;
    }
  }
}

/* ---- options -------------------------------------------------------------------------------- */

static void usage(FILE *f) {
  fputs(
      "usage: proctor-mcp [options]\n"
      "An MCP server (stdio) that runs commands as proctor executions.\n"
      "  --socket PATH        use this proctor socket (default: $PROCTOR_SOCKET, else the running\n"
      "                       editor's socket found in $XDG_RUNTIME_DIR/proctor or "
      "/tmp/proctor-UID)\n"
      "  --embedded           never use an editor's socket: run a private engine\n"
      "  --no-discover        do not look for an editor's socket (without a socket: embedded)\n"
      "  --allow-cwd DIR      commands may run only in DIR or below (repeatable)\n"
      "  --deny PATTERN       refuse commands matching this glob, e.g. '*rm -rf*' (repeatable)\n"
      "  --allow PATTERN      run only commands matching one of these globs (repeatable);\n"
      "                       then env may set only --allow-env names and a shell command\n"
      "                       may hold no metacharacter (see :help proctor-mcp-policy)\n"
      "  --allow-env NAME     with --allow: a variable the env argument may set (repeatable;\n"
      "                       never PATH, LD_*, BASH_ENV or ENV)\n"
      "  --allow-target NAME  the target argument may name this target the editor\n"
      "                       configured (repeatable; default: no target)\n"
      "  --secret NAME[=VAR]  give commands NAME with the value of our $VAR (default $NAME),\n"
      "                       masked as *** in all output and results (repeatable)\n"
      "  --kill-on-exit       socket mode: end our executions when proctor-mcp exits\n"
      "  --shell[=PATH]       run command strings with PATH -c (no PATH: $SHELL; default: bash\n"
      "                       from PATH, else /bin/sh)\n"
      "  --session NAME       socket mode: the owner identity; a later proctor-mcp with the same\n"
      "                       one sees and controls our executions (default: the client's name\n"
      "                       and the current directory)\n"
      "  --shepherd PATH      embedded: the proctor-shepherd to use (default: next to "
      "proctor-mcp)\n"
      "  --output-limit N     embedded: bytes of output kept per stream (default 8 MiB)\n"
      "  --progress-ms N      interval of progress notifications (default 1000)\n"
      "  --version, --help\n"
      "See :help proctor-mcp.\n",
      f);
}

static int push(void *vec, size_t *n, size_t size, const void *item) {
  void **v = (void **)vec;
  char *p = realloc(*v, (*n + 1) * size);
  if (p == NULL) return -1;
  memcpy(p + *n * size, item, size);
  *v = p;
  (*n)++;
  return 0;
}

/* The long options (getopt_long): one entry per option of usage(); `val` is
 * what the switch below tells them apart by. */
enum {
  O_SOCKET = 256,
  O_EMBEDDED,
  O_NO_DISCOVER,
  O_ALLOW_CWD,
  O_DENY,
  O_ALLOW,
  O_ALLOW_ENV,
  O_ALLOW_TARGET,
  O_SECRET,
  O_KILL_ON_EXIT,
  O_SESSION,
  O_SHELL,
  O_SHEPHERD,
  O_OUTPUT_LIMIT,
  O_PROGRESS_MS,
  O_VERSION
};
static const struct option longopts[] = {{"socket", required_argument, NULL, O_SOCKET},
                                         {"embedded", no_argument, NULL, O_EMBEDDED},
                                         {"no-discover", no_argument, NULL, O_NO_DISCOVER},
                                         {"allow-cwd", required_argument, NULL, O_ALLOW_CWD},
                                         {"deny", required_argument, NULL, O_DENY},
                                         {"allow", required_argument, NULL, O_ALLOW},
                                         {"allow-env", required_argument, NULL, O_ALLOW_ENV},
                                         {"allow-target", required_argument, NULL, O_ALLOW_TARGET},
                                         {"secret", required_argument, NULL, O_SECRET},
                                         {"kill-on-exit", no_argument, NULL, O_KILL_ON_EXIT},
                                         {"session", required_argument, NULL, O_SESSION},
                                         {"shell", optional_argument, NULL, O_SHELL},
                                         {"shepherd", required_argument, NULL, O_SHEPHERD},
                                         {"output-limit", required_argument, NULL, O_OUTPUT_LIMIT},
                                         {"progress-ms", required_argument, NULL, O_PROGRESS_MS},
                                         {"version", no_argument, NULL, O_VERSION},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};

/* --secret NAME[=VAR]: 0 (also when $VAR is unset: logged, left out) or -1. */
static int add_secret(const char *v) {
  mc_secret_t s;
  char *name = strdup(v);
  char *eq = name ? strchr(name, '=') : NULL;
  if (name == NULL) return -1;
  if (eq) *eq = 0;
  const char *var = eq ? eq + 1 : name;
  if (name[0] == 0 || var[0] == 0) {
    mc_log("--secret %s: NAME or NAME=VAR expected", v);
    free(name);
    return -1;
  }
  s.name = name;
  s.value = getenv(var);
  if (s.value == NULL || s.value[0] == 0) {
    mc_log("--secret %s: $%s is not set (or empty); the secret is left out", v, var);
    free(name);
    return 0;
  }
  if (strlen(s.value) > 4096) {
    mc_log("--secret %s: the value is longer than 4096 bytes", v);
    free(name);
    return -1;
  }
  return push(&mc_opts.secrets, &mc_opts.n_secrets, sizeof(s), &s) || mc_mask_add(s.value) ? -1 : 0;
}

/* A number option's value into *n; -1 (logged) when it is not a number. */
static int number(const char *opt, const char *v, unsigned long long *n) {
  char *end;
  *n = strtoull(v, &end, 10);
  if (*end || end == v) {
    mc_log("--%s %s: a number expected", opt, v);
    return -1;
  }
  return 0;
}

static int parse_args(int argc, char **argv) {
  int c, li = -1;
  unsigned long long n;
  opterr = 0; /* our own messages, through mc_log */
  while ((c = getopt_long(argc, argv, ":h", longopts, &li)) != -1) {
    const char *v = optarg;
    switch (c) {
    case 'h': usage(stdout); exit(0);
    case O_VERSION: printf("proctor-mcp %s\n", MC_VERSION); exit(0);
    case O_EMBEDDED: mc_opts.embedded = 1; break;
    case O_NO_DISCOVER: mc_opts.discover = 0; break;
    case O_KILL_ON_EXIT: mc_opts.kill_on_exit = 1; break;
    case O_SESSION:
      if (v[0] == 0 || strlen(v) > 256) {
        mc_log("--session: 1 to 256 bytes expected");
        return -1;
      }
      mc_opts.session = v;
      break;
    case O_SHELL: /* --shell: $SHELL; --shell=PATH */
      if ((v = v ? v : getenv("SHELL")) == NULL || v[0] != '/' || access(v, X_OK) != 0) {
        mc_log("--shell: %s is not an executable absolute path", v ? v : "$SHELL (unset)");
        return -1;
      }
      mc_opts.shell = v;
      break;
    case O_SOCKET: mc_opts.socket = v; break;
    case O_SHEPHERD: mc_opts.shepherd = v; break;
    case O_ALLOW_CWD: {
      char *real = realpath(v, NULL);
      if (real == NULL) {
        mc_log("--allow-cwd %s: %s", v, strerror(errno));
        return -1;
      }
      if (push(&mc_opts.allow_cwd, &mc_opts.n_allow_cwd, sizeof(char *), &real)) return -1;
      break;
    }
    case O_DENY:
      if (push(&mc_opts.deny, &mc_opts.n_deny, sizeof(char *), &v)) return -1;
      break;
    case O_ALLOW:
      if (push(&mc_opts.allow, &mc_opts.n_allow, sizeof(char *), &v)) return -1;
      break;
    case O_ALLOW_ENV:
      if (mc_env_never(v)) {
        mc_log("--allow-env %s: %s can never be allowed (it chooses which code runs)", v, v);
        return -1;
      }
      if (v[0] == 0 || strchr(v, '=')) {
        mc_log("--allow-env %s: a variable name expected", v);
        return -1;
      }
      if (push(&mc_opts.allow_env, &mc_opts.n_allow_env, sizeof(char *), &v)) return -1;
      break;
    case O_ALLOW_TARGET:
      if (v[0] == 0) {
        mc_log("--allow-target: a target name expected");
        return -1;
      }
      if (push(&mc_opts.allow_target, &mc_opts.n_allow_target, sizeof(char *), &v)) return -1;
      break;
    case O_SECRET:
      if (add_secret(v)) return -1;
      break;
    case O_OUTPUT_LIMIT:
      if (number("output-limit", v, &n)) return -1;
      mc_opts.output_limit = n;
      break;
    case O_PROGRESS_MS:
      if (number("progress-ms", v, &n)) return -1;
      mc_opts.progress_ms = n > 3600000 ? 3600000 : (uint32_t)n;
      break;
    case ':': mc_log("%s needs a value", argv[optind - 1]); return -1;
    default: mc_log("unknown option %s (see --help)", argv[optind - 1]); return -1;
    }
  }
  if (optind < argc) {
    mc_log("unknown option %s (see --help)", argv[optind]);
    return -1;
  }
  if (mc_opts.n_allow_env && !mc_opts.n_allow)
    mc_log("--allow-env has no effect without --allow (env is not restricted)");
  if (mc_opts_finish() != 0) return -1;
  return 0;
}

int main(int argc, char **argv) {
  if (parse_args(argc, argv) != 0) return 2;
  if (mc_tools_init() != 0) return 1;
  signal(SIGPIPE, SIG_IGN);
  if (mc_stop_init() != 0) {
    mc_log("pipe: %s", strerror(errno));
    return 1;
  }

  while (!mc_stop_requested() && !in.eof && !mc_send_closed()) {
    struct pollfd pf[4];
    int n = 0, irpc = -1, ieng = -1;
    pf[n++] = (struct pollfd){.fd = STDIN_FILENO, .events = POLLIN};
    pf[n++] = (struct pollfd){.fd = mc_stop_fd(), .events = POLLIN};
    short ev;
    int rfd = mc_rpc_fd(&ev);
    if (rfd >= 0) {
      irpc = n;
      pf[n++] = (struct pollfd){.fd = rfd, .events = ev};
    }
    int efd = mc_embedded_fd();
    if (efd >= 0) {
      ieng = n;
      pf[n++] = (struct pollfd){.fd = efd, .events = POLLIN};
    }
    int rc = poll(pf, (nfds_t)n, mc_timers_timeout());
    if (rc < 0) {
      if (errno == EINTR) continue;
      mc_log("poll: %s", strerror(errno));
      break;
    }
    if (ieng >= 0 && pf[ieng].revents) mc_embedded_drain();
    if (irpc >= 0 && pf[irpc].revents) mc_rpc_io(pf[irpc].revents);
    if (pf[0].revents) read_stdin();
    mc_timers_run();
  }
  mc_rpc_close();
  mc_embedded_stop();
  return 0;
}
