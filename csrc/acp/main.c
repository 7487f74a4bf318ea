/* main.c — proctor-acp: options, the agent's process, the poll() loop, and
 * the end.
 *
 * Thread: main (the only one, besides the embedded engine's own).
 *
 *   proctor-acp [--socket PATH | --embedded] [--always] [--] AGENT ARGS...
 *
 * Lifecycle: the agent starts as our child, in its own process group, its
 * stdin and stdout pipes to us, its stderr ours. Lines are relayed both ways
 * (relay.c) until one side ends:
 *   - the client (our stdin ends, or SIGTERM/SIGINT/SIGHUP): the agent's
 *     requests still waiting on the client are answered with an error, the
 *     agent's stdin is closed once its queue is written, and it has
 *     AC_AGENT_EXIT_MS to exit before its process group gets SIGTERM, then
 *     SIGKILL;
 *   - the agent (its stdout ends): the client's requests still waiting on the
 *     agent are answered with an error and written out (at most 1 s when the
 *     client does not read).
 * Then the connection to proctor closes: the engine cancels every terminal
 * the agent started (kill_on_disconnect: SIGTERM, SIGKILL after the grace
 * period, the whole tree), or the embedded engine cancels everything and
 * waits. The exit status is the agent's (128 + signal when a signal ended it).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "acp.h"

mc_opts_t mc_opts = {.discover = 1};

static pid_t agent = -1;
static int agent_status = -1; /* waitpid status once reaped */

static void usage(FILE *f) {
  fputs(
      "usage: proctor-acp [options] [--] AGENT [ARGS...]\n"
      "An ACP proxy: runs AGENT (an ACP agent on stdio), relays every message between it and\n"
      "the ACP client, and serves the agent's terminals as proctor executions when the client\n"
      "has none (shown in the running editor's console).\n"
      "  --socket PATH   use this proctor socket (default: $PROCTOR_SOCKET, else the running\n"
      "                  editor's socket, else a private embedded engine)\n"
      "  --embedded      never use an editor's socket: run a private engine\n"
      "  --always        serve the agent's terminals even when the client has its own\n"
      "  --shepherd PATH embedded: the proctor-shepherd to use (default: next to proctor-acp)\n"
      "  --version, --help\n"
      "See :help proctor-acp-proxy.\n",
      f);
}

static int parse_args(int argc, char **argv) {
  int i = 1;
  for (; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--") == 0) {
      i++;
      break;
    }
    if (a[0] != '-') break;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      usage(stdout);
      exit(0);
    } else if (strcmp(a, "--version") == 0) {
      printf("proctor-acp %s\n", AC_VERSION);
      exit(0);
    } else if (strcmp(a, "--embedded") == 0) {
      mc_opts.embedded = 1;
    } else if (strcmp(a, "--always") == 0) {
      ac_relay_always();
    } else if ((strcmp(a, "--socket") == 0 || strcmp(a, "--shepherd") == 0) && i + 1 < argc) {
      if (a[2] == 's' && a[3] == 'o') mc_opts.socket = argv[++i];
      else mc_opts.shepherd = argv[++i];
    } else {
      mc_log("unknown option %s (see --help)", a);
      return -1;
    }
  }
  if (i >= argc) {
    mc_log("no agent command (see --help)");
    return -1;
  }
  if (mc_opts_finish() != 0) return -1;
  /* the owner proctor shows for the agent's runs: "acp <agent's program name>" */
  const char *base = strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i];
  snprintf(ac_owner, sizeof(ac_owner), "acp %.100s", base);
  return i;
}

/* Start the agent: its stdin and stdout are pipes to us, its stderr ours. */
static int spawn_agent(char **argv) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0) return -1;
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(in[0]);
    close(in[1]);
    return -1;
  }
  agent = fork();
  if (agent < 0) return -1;
  if (agent == 0) {
    setpgid(0, 0);
    signal(SIGPIPE, SIG_DFL);
    dup2(in[0], STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    execvp(argv[0], argv);
    fprintf(stderr, "proctor-acp: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  setpgid(agent, agent);
  close(in[0]);
  close(out[1]);
  ac_to[AC_AGENT].fd = in[1];
  ac_from[AC_AGENT].fd = out[0];
  fcntl(in[1], F_SETFL, fcntl(in[1], F_GETFL) | O_NONBLOCK);
  fcntl(out[0], F_SETFL, fcntl(out[0], F_GETFL) | O_NONBLOCK);
  return 0;
}

/* Reap the agent: wait up to `ms` for it to exit, then SIGTERM its process
 * group, and SIGKILL 2 s later. */
static void reap(int ms) {
  if (agent < 0 || agent_status >= 0) return;
  uint64_t start = mc_now_ms();
  int sent = 0;
  for (;;) {
    int st;
    pid_t r = waitpid(agent, &st, WNOHANG);
    if (r == agent) {
      agent_status = st;
      return;
    }
    if (r < 0 && errno != EINTR) {
      agent_status = 0;
      return;
    }
    uint64_t waited = mc_now_ms() - start;
    if (waited >= (uint64_t)ms && sent == 0) {
      kill(-agent, SIGTERM);
      sent = 1;
    } else if (waited >= (uint64_t)ms + 2000 && sent == 1) {
      kill(-agent, SIGKILL);
      sent = 2;
    }
    char sink[4096]; /* what it still writes: read and dropped, so a full pipe holds nothing up */
    while (ac_from[AC_AGENT].fd >= 0 && read(ac_from[AC_AGENT].fd, sink, sizeof(sink)) > 0) {
    }
    usleep(10000);
  }
}

int main(int argc, char **argv) {
  mc_log_name = "proctor-acp";
  int first = parse_args(argc, argv);
  if (first < 0) return 2;
  signal(SIGPIPE, SIG_IGN);
  if (mc_stop_init() != 0 || spawn_agent(argv + first) != 0) {
    mc_log("cannot start %s: %s", argv[first], strerror(errno));
    return 1;
  }
  ac_from[AC_CLIENT].fd = STDIN_FILENO;
  ac_to[AC_CLIENT].fd = STDOUT_FILENO;

  int client_gone = 0, agent_gone = 0;
  uint64_t agent_gone_at = 0, client_gone_at = 0;
  while (!agent_gone || (ac_out_queued(&ac_to[AC_CLIENT]) && !ac_to[AC_CLIENT].closed &&
                         mc_now_ms() - agent_gone_at < 1000)) {
    if (!client_gone &&
        (ac_from[AC_CLIENT].eof || mc_stop_requested() || ac_to[AC_CLIENT].closed)) {
      client_gone = 1;
      ac_relay_gone(AC_CLIENT, "proctor-acp: the client exited");
    }
    if (!agent_gone && (ac_from[AC_AGENT].eof || ac_to[AC_AGENT].closed)) {
      agent_gone = 1;
      agent_gone_at = mc_now_ms();
      ac_relay_gone(AC_AGENT, "proctor-acp: the agent exited");
    }
    /* the client gone: close the agent's stdin once our answers to it are written */
    if (client_gone && !client_gone_at) client_gone_at = mc_now_ms();
    if (client_gone && ac_to[AC_AGENT].fd >= 0 &&
        (!ac_out_queued(&ac_to[AC_AGENT]) || mc_now_ms() - client_gone_at >= 1000)) {
      close(ac_to[AC_AGENT].fd);
      ac_to[AC_AGENT].fd = -1;
      ac_to[AC_AGENT].closed = 1;
      reap(AC_AGENT_EXIT_MS);
      break;
    }
    ac_out_flush(&ac_to[AC_CLIENT]);
    ac_out_flush(&ac_to[AC_AGENT]);

    struct pollfd pf[7];
    int n = 0, ic = -1, ia = -1, ico = -1, iao = -1, irpc = -1, ieng = -1;
    pf[n++] = (struct pollfd){.fd = mc_stop_fd(), .events = POLLIN};
    /* read a side only while the queue toward the other is below its bound */
    if (!client_gone && ac_out_queued(&ac_to[AC_AGENT]) < AC_QUEUE_HIGH) {
      ic = n;
      pf[n++] = (struct pollfd){.fd = ac_from[AC_CLIENT].fd, .events = POLLIN};
    }
    if (!agent_gone && ac_out_queued(&ac_to[AC_CLIENT]) < AC_QUEUE_HIGH) {
      ia = n;
      pf[n++] = (struct pollfd){.fd = ac_from[AC_AGENT].fd, .events = POLLIN};
    }
    if (ac_out_queued(&ac_to[AC_CLIENT]) && !ac_to[AC_CLIENT].closed) {
      ico = n;
      pf[n++] = (struct pollfd){.fd = ac_to[AC_CLIENT].fd, .events = POLLOUT};
    }
    if (ac_out_queued(&ac_to[AC_AGENT]) && !ac_to[AC_AGENT].closed) {
      iao = n;
      pf[n++] = (struct pollfd){.fd = ac_to[AC_AGENT].fd, .events = POLLOUT};
    }
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
    int timeout = mc_timers_timeout();
    if (agent_gone || client_gone) timeout = 50; /* bounded ends: look again soon */
    int rc = poll(pf, (nfds_t)n, timeout);
    if (rc < 0) {
      if (errno == EINTR) continue;
      mc_log("poll: %s", strerror(errno));
      break;
    }
    if (ieng >= 0 && pf[ieng].revents) mc_embedded_drain();
    if (irpc >= 0 && pf[irpc].revents) mc_rpc_io(pf[irpc].revents);
    if (ic >= 0 && pf[ic].revents) ac_in_read(&ac_from[AC_CLIENT], ac_from_client);
    if (ia >= 0 && pf[ia].revents) ac_in_read(&ac_from[AC_AGENT], ac_from_agent);
    if (ico >= 0 && (pf[ico].revents & (POLLERR | POLLHUP)) && !(pf[ico].revents & POLLOUT))
      ac_to[AC_CLIENT].closed = 1;
    if (iao >= 0 && (pf[iao].revents & (POLLERR | POLLHUP)) && !(pf[iao].revents & POLLOUT))
      ac_to[AC_AGENT].closed = 1;
    mc_timers_run();
  }
  if (ac_to[AC_AGENT].fd >= 0) close(ac_to[AC_AGENT].fd);
  reap(AC_AGENT_EXIT_MS);
  mc_rpc_close();     /* the engine cancels the agent's terminals (kill_on_disconnect) */
  mc_embedded_stop(); /* embedded: cancels everything and waits */
  ac_term_free();
  ac_relay_free();
  for (int s = 0; s < 2; s++) {
    ac_in_free(&ac_from[s]);
    ac_out_free(&ac_to[s]);
  }
  if (ac_from[AC_AGENT].fd >= 0) close(ac_from[AC_AGENT].fd);
  free((char *)mc_opts.cwd);
  if (agent_status < 0) return 1;
  return WIFEXITED(agent_status) ? WEXITSTATUS(agent_status) : 128 + WTERMSIG(agent_status);
}
