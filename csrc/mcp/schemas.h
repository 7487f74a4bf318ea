/* schemas.h — the tools of proctor-mcp as data: name, title, description,
 * annotations, input schema and output schema (JSON text, parsed once by
 * tools.c). doc/proctor.txt *proctor-mcp-tools* describes the same tools for
 * people; the schemas here are what clients validate against.
 *
 * Thread: none (constant data). Included by tools.c only.
 */
#ifndef PR_MCP_SCHEMAS_H
#define PR_MCP_SCHEMAS_H

/* Fields of an execution, shared by every output schema that carries one. */
#define EXEC_PROPS                                                                                 \
  "\"id\":{\"type\":\"integer\",\"description\":\"execution id\"},"                                \
  "\"state\":{\"type\":\"string\",\"enum\":[\"queued\",\"starting\",\"running\",\"completed\","    \
  "\"failed\","                                                                                    \
  "\"canceled\",\"timed_out\"]},"                                                                  \
  "\"running\":{\"type\":\"boolean\",\"description\":\"not ended yet\"},"                          \
  "\"exit_code\":{\"type\":[\"integer\",\"null\"]},"                                               \
  "\"signal\":{\"type\":[\"string\",\"null\"],\"description\":\"e.g. SIGTERM when a signal ended " \
  "it\"},"                                                                                         \
  "\"reason\":{\"type\":[\"string\",\"null\"],\"description\":\"why it ended: exit, signal, "      \
  "canceled, "                                                                                     \
  "timeout, spawn_error, ...\"},"                                                                  \
  "\"error\":{\"type\":[\"string\",\"null\"]},"                                                    \
  "\"label\":{\"type\":[\"string\",\"null\"]},"                                                    \
  "\"owner\":{\"type\":\"string\"},"                                                               \
  "\"command\":{\"type\":\"string\",\"description\":\"the command line as given\"},"               \
  "\"shell\":{\"type\":[\"string\",\"null\"],\"description\":\"the shell that ran command (null: " \
  "args form)\"},"                                                                                 \
  "\"cwd\":{\"type\":\"string\"},"                                                                 \
  "\"pty\":{\"type\":\"boolean\"},"                                                                \
  "\"pid\":{\"type\":[\"integer\",\"null\"]},"                                                     \
  "\"duration_ms\":{\"type\":\"integer\"},"                                                        \
  "\"stdout_bytes\":{\"type\":\"integer\",\"description\":\"bytes written to stdout (pty: the "    \
  "terminal)\"},"                                                                                  \
  "\"stderr_bytes\":{\"type\":\"integer\"},"                                                       \
  "\"stdin_open\":{\"type\":\"boolean\"},"                                                         \
  "\"mode\":{\"type\":\"string\",\"enum\":[\"editor\",\"embedded\"],\"description\":\"editor: "    \
  "the run is in the user's editor; embedded: in proctor-mcp's own engine, not seen by the "       \
  "user\"}"
#define EXEC_REQUIRED "\"id\",\"state\",\"running\",\"exit_code\",\"signal\",\"command\",\"cwd\""

/* Output tails of run and wait. */
#define TAIL_PROPS                                                                                 \
  "\"stdout\":{\"type\":\"string\",\"description\":\"the last tail_bytes of stdout (pty: the "     \
  "terminal)\"},"                                                                                  \
  "\"stderr\":{\"type\":\"string\"},"                                                              \
  "\"stdout_skipped\":{\"type\":\"integer\",\"description\":\"bytes before the stdout tail (read " \
  "them "                                                                                          \
  "with output)\"},"                                                                               \
  "\"stderr_skipped\":{\"type\":\"integer\"},"                                                     \
  "\"next\":{\"type\":\"string\",\"description\":\"while it runs: how to go on "                   \
  "(wait_for_command, read_output, "                                                               \
  "cancel with its id)\"}"

#define ID_PROP                                                                                  \
  "\"id\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"execution id (from run_command " \
  "or "                                                                                          \
  "start)\"}"

/* Input fields of run and start. */
#define SPEC_PROPS                                                                                 \
  "\"command\":{\"type\":\"string\",\"minLength\":1,\"description\":\"a shell command line, run "  \
  "with bash -c where bash exists (else /bin/sh -c; the server's shell is in every result); "      \
  "with args: the program\"},"                                                                     \
  "\"args\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"description\":\"arguments: run " \
  "command "                                                                                       \
  "with these, without a shell\"},"                                                                \
  "\"cwd\":{\"type\":\"string\",\"description\":\"working directory (default: proctor-mcp's "      \
  "own); "                                                                                         \
  "relative paths start there\"},"                                                                 \
  "\"env\":{\"type\":\"object\",\"additionalProperties\":{\"type\":\"string\"},\"description\":"   \
  "\"variables "                                                                                   \
  "added to the environment\"},"                                                                   \
  "\"timeout_ms\":{\"type\":\"integer\",\"minimum\":1,\"description\":\"end it after this long "   \
  "(SIGTERM to "                                                                                   \
  "its process group, SIGKILL after the grace period); default: no timeout\"},"                    \
  "\"pty\":{\"type\":\"boolean\",\"description\":\"run under a pseudo-terminal (one stream, "      \
  "reported as "                                                                                   \
  "stdout); default false\"},"                                                                     \
  "\"label\":{\"type\":\"string\",\"description\":\"a short name shown in the editor\"},"          \
  "\"target\":{\"type\":\"string\",\"description\":\"run on this target of the editor (a "         \
  "remote host or container) where this server allows it; cwd is then a path there "               \
  "(default: the target's)\"}"

static const char *const mc_tool_json[] = {
    /* run */
    "{\"name\":\"run_command\",\"title\":\"Run a command\","
    "\"description\":\"Run a command where the user can see and stop it, wait up to wait_ms for it "
    "to end, "
    "and return its exit status and the tail of its output. If it is still running then, the "
    "result has "
    "running=true and its id: continue with wait_for_command, read_output, send_input or "
    "cancel_command. The whole process tree "
    "is "
    "killed on cancel or timeout.\","
    "\"annotations\":{\"title\":\"Run a command\",\"readOnlyHint\":false,\"destructiveHint\":true,"
    "\"idempotentHint\":false,\"openWorldHint\":true},"
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{" SPEC_PROPS
    ","
    "\"stdin\":{\"type\":\"boolean\",\"description\":\"keep stdin open for send_input; default "
    "false "
    "(stdin is /dev/null)\"},"
    "\"wait_ms\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":3600000,\"description\":\"how "
    "long to wait "
    "for the end; default 30000\"},"
    "\"tail_bytes\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":1048576,\"description\":"
    "\"bytes of "
    "output tail per stream; default 16384\"}"
    "},\"required\":[\"command\"],\"additionalProperties\":false},"
    "\"outputSchema\":{\"type\":\"object\",\"properties\":{" EXEC_PROPS "," TAIL_PROPS
    "},"
    "\"required\":[" EXEC_REQUIRED ",\"stdout\",\"stderr\"]}}",

    /* start */
    "{\"name\":\"start_command\",\"title\":\"Start a command\","
    "\"description\":\"Start a command (a server, a watcher, a long build) and return its id at "
    "once. It "
    "runs where the user can see and stop it; read it with read_output, wait for it with "
    "wait_for_command, answer "
    "prompts "
    "with send_input, stop it with cancel_command.\","
    "\"annotations\":{\"title\":\"Start a "
    "command\",\"readOnlyHint\":false,\"destructiveHint\":true,"
    "\"idempotentHint\":false,\"openWorldHint\":true},"
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{" SPEC_PROPS
    ","
    "\"stdin\":{\"type\":\"boolean\",\"description\":\"a stdin pipe for send_input; default "
    "true\"}"
    "},\"required\":[\"command\"],\"additionalProperties\":false},"
    "\"outputSchema\":{\"type\":\"object\",\"properties\":{" EXEC_PROPS
    "},\"required\":[" EXEC_REQUIRED "]}}",

    /* status */
    "{\"name\":\"command_status\",\"title\":\"Execution status\","
    "\"description\":\"The state of an execution: running or how it ended (exit code or signal), "
    "its "
    "command, cwd, pid, duration and output sizes.\","
    "\"annotations\":{\"title\":\"Execution "
    "status\",\"readOnlyHint\":true,\"destructiveHint\":false,"
    "\"idempotentHint\":true,\"openWorldHint\":false},"
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{" ID_PROP
    "},\"required\":[\"id\"],"
    "\"additionalProperties\":false},"
    "\"outputSchema\":{\"type\":\"object\",\"properties\":{" EXEC_PROPS
    "},\"required\":[" EXEC_REQUIRED "]}}",

    /* list */
    "{\"name\":\"list_commands\",\"title\":\"List executions\","
    "\"description\":\"The executions this server started (newest last), optionally only those in "
    "one "
    "state.\","
    "\"annotations\":{\"title\":\"List "
    "executions\",\"readOnlyHint\":true,\"destructiveHint\":false,"
    "\"idempotentHint\":true,\"openWorldHint\":false},"
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{"
    "\"state\":{\"type\":\"string\",\"enum\":[\"queued\",\"starting\",\"running\",\"completed\","
    "\"failed\","
    "\"canceled\",\"timed_out\"]},"
    "\"limit\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000,\"description\":\"at most this "
    "many, the "
    "newest; default 50\"}"
    "},\"additionalProperties\":false},"
    "\"outputSchema\":{\"type\":\"object\",\"properties\":{"
    "\"executions\":{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{" EXEC_PROPS
    "},"
    "\"required\":[" EXEC_REQUIRED
    "]}},"
    "\"total\":{\"type\":\"integer\",\"description\":\"how many there are (before limit)\"}"
    "},\"required\":[\"executions\",\"total\"]}}",

    /* output */
    "{\"name\":\"read_output\",\"title\":\"Read output\","
    "\"description\":\"Read an execution's output from a byte offset, at most max_bytes, cut at "
    "UTF-8 "
    "character boundaries. Pass next_offset back to continue; a negative offset reads that many "
    "bytes "
    "before the end. missed counts bytes no longer kept (only the newest output is retained).\","
    "\"annotations\":{\"title\":\"Read output\",\"readOnlyHint\":true,\"destructiveHint\":false,"
    "\"idempotentHint\":true,\"openWorldHint\":false},"
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{" ID_PROP
    ","
    "\"stream\":{\"type\":\"string\",\"enum\":[\"stdout\",\"stderr\"],\"description\":\"default "
    "stdout (a "
    "pty execution has only stdout)\"},"
    "\"offset\":{\"type\":\"integer\",\"description\":\"byte offset in the stream; default 0; "
    "negative: "
    "from the end\"},"
    "\"max_bytes\":{\"type\":\"integer\",\"minimum\":16,\"maximum\":1048576,\"description\":"
    "\"default "
    "65536\"}"
    "},\"required\":[\"id\"],\"additionalProperties\":false},"
    "\"outputSchema\":{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"integer\"},\"stream\":{\"type\":\"string\"},"
    "\"data\":{\"type\":\"string\",\"description\":\"the bytes read (invalid UTF-8 shown as "
    "U+FFFD)\"},"
    "\"offset\":{\"type\":\"integer\",\"description\":\"stream offset of data's first byte\"},"
    "\"next_offset\":{\"type\":\"integer\",\"description\":\"where to continue\"},"
    "\"missed\":{\"type\":\"integer\",\"description\":\"bytes from the requested offset on that "
    "are no "
    "longer kept\"},"
    "\"total_bytes\":{\"type\":\"integer\",\"description\":\"bytes written to the stream so far\"},"
    "\"eof\":{\"type\":\"boolean\",\"description\":\"the execution ended and everything was "
    "read\"},"
    "\"state\":{\"type\":\"string\"}"
    "},\"required\":[\"id\",\"stream\",\"data\",\"offset\",\"next_offset\",\"missed\",\"total_"
    "bytes\","
    "\"eof\",\"state\"]}}",

    /* input */
    "{\"name\":\"send_input\",\"title\":\"Send input\","
    "\"description\":\"Write text to a running execution's stdin (or its terminal), e.g. an answer "
    "to a "
    "prompt; include the newline. eof=true closes stdin afterwards (a pty execution gets ^D).\","
    "\"annotations\":{\"title\":\"Send input\",\"readOnlyHint\":false,\"destructiveHint\":true,"
    "\"idempotentHint\":false,\"openWorldHint\":false},"
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{" ID_PROP
    ","
    "\"data\":{\"type\":\"string\",\"description\":\"the text to write\"},"
    "\"eof\":{\"type\":\"boolean\",\"description\":\"close stdin afterwards; default false\"}"
    "},\"required\":[\"id\",\"data\"],\"additionalProperties\":false},"
    "\"outputSchema\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},"
    "\"bytes\":{\"type\":\"integer\",\"description\":\"bytes written\"},"
    "\"stdin_closed\":{\"type\":\"boolean\"}},\"required\":[\"id\",\"bytes\",\"stdin_closed\"]}}",

    /* cancel */
    "{\"name\":\"cancel_command\",\"title\":\"Cancel an execution\","
    "\"description\":\"Stop an execution and its whole process tree: SIGTERM to its process group, "
    "SIGKILL after the grace period (force: SIGKILL at once). Its output stays readable.\","
    "\"annotations\":{\"title\":\"Cancel an "
    "execution\",\"readOnlyHint\":false,\"destructiveHint\":true,"
    "\"idempotentHint\":true,\"openWorldHint\":false},"
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{" ID_PROP
    ","
    "\"force\":{\"type\":\"boolean\",\"description\":\"SIGKILL at once; default false\"}"
    "},\"required\":[\"id\"],\"additionalProperties\":false},"
    "\"outputSchema\":{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"integer\"},"
    "\"result\":{\"type\":\"string\",\"enum\":[\"canceling\",\"already_canceling\",\"already_"
    "terminal\"],"
    "\"description\":\"canceling: it will end as canceled; already_terminal: it had ended\"}},"
    "\"required\":[\"id\",\"result\"]}}",

    /* wait */
    "{\"name\":\"wait_for_command\",\"title\":\"Wait for an execution\","
    "\"description\":\"Wait up to timeout_ms for an execution to end; return its status and the "
    "tail of "
    "its output (running=true if it has not ended yet).\","
    "\"annotations\":{\"title\":\"Wait for an "
    "execution\",\"readOnlyHint\":true,\"destructiveHint\":false,"
    "\"idempotentHint\":true,\"openWorldHint\":false},"
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{" ID_PROP
    ","
    "\"timeout_ms\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":3600000,\"description\":"
    "\"default "
    "30000\"},"
    "\"tail_bytes\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":1048576,\"description\":"
    "\"bytes of "
    "output tail per stream; default 16384\"}"
    "},\"required\":[\"id\"],\"additionalProperties\":false},"
    "\"outputSchema\":{\"type\":\"object\",\"properties\":{" EXEC_PROPS "," TAIL_PROPS
    "},"
    "\"required\":[" EXEC_REQUIRED ",\"stdout\",\"stderr\"]}}",
    /* interact */
    "{\"name\":\"interact_with_command\",\"title\":\"Interact with a command\","
    "\"description\":\"Send input to a running execution (a REPL, a shell, a prompt) and return "
    "the output that came back once it waits for input again: the prompt pattern matches the "
    "end of the new output, or no new output came for idle_ms (default 1000 without a prompt), "
    "or it ended, or timeout_ms passed (ended_by says which). Each call returns the output since "
    "the previous interact with the same execution (from its start the first time), at most "
    "max_bytes per stream, the newest (truncated says when some were left out). Empty input "
    "just reads what came; after start_command, call it once without input to wait for the "
    "first prompt, so that it is not taken for the answer to your first input.\","
    "\"annotations\":{\"title\":\"Interact with a command\",\"readOnlyHint\":false,"
    "\"destructiveHint\":true,\"idempotentHint\":false,\"openWorldHint\":false},"
    "\"inputSchema\":{\"type\":\"object\",\"properties\":{" ID_PROP
    ","
    "\"input\":{\"type\":\"string\",\"description\":\"text to write to stdin (or the terminal); "
    "include the newline; default: none\"},"
    "\"eof\":{\"type\":\"boolean\",\"description\":\"close stdin after the input; default "
    "false\"},"
    "\"prompt\":{\"type\":\"string\",\"minLength\":1,\"description\":\"a POSIX extended regular "
    "expression that must match the end of the new output, e.g. '>>> $' or '\\\\$ $'; then idle_ms "
    "applies only when given\"},"
    "\"idle_ms\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":3600000,\"description\":\"return "
    "after this long without new output; 0: never; default 1000 without a prompt, 0 with "
    "one\"},"
    "\"timeout_ms\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":3600000,\"description\":"
    "\"return after this long in any case; default 30000\"},"
    "\"max_bytes\":{\"type\":\"integer\",\"minimum\":16,\"maximum\":1048576,\"description\":"
    "\"bytes of output returned per stream, the newest; default 65536\"}"
    "},\"required\":[\"id\"],\"additionalProperties\":false},"
    "\"outputSchema\":{\"type\":\"object\",\"properties\":{"
    "\"id\":{\"type\":\"integer\"},"
    "\"state\":{\"type\":\"string\"},\"running\":{\"type\":\"boolean\"},"
    "\"exit_code\":{\"type\":[\"integer\",\"null\"]},"
    "\"ended_by\":{\"type\":\"string\",\"enum\":[\"prompt\",\"idle\",\"exit\",\"timeout\"],"
    "\"description\":\"why it returned\"},"
    "\"stdout\":{\"type\":\"string\",\"description\":\"output since the last interact (pty: the "
    "terminal)\"},"
    "\"stderr\":{\"type\":\"string\"},"
    "\"stdout_offset\":{\"type\":\"integer\",\"description\":\"stream offset of stdout's first "
    "byte\"},"
    "\"stderr_offset\":{\"type\":\"integer\"},"
    "\"stdout_skipped\":{\"type\":\"integer\",\"description\":\"bytes of the answer left out "
    "before stdout (read_output reads them)\"},"
    "\"stderr_skipped\":{\"type\":\"integer\"},"
    "\"truncated\":{\"type\":\"boolean\",\"description\":\"more came than max_bytes: the oldest "
    "part was left out\"},"
    "\"input_bytes\":{\"type\":\"integer\"},"
    "\"elapsed_ms\":{\"type\":\"integer\"},"
    "\"stdin_open\":{\"type\":\"boolean\"},"
    "\"mode\":{\"type\":\"string\",\"enum\":[\"editor\",\"embedded\"]}"
    "},\"required\":[\"id\",\"state\",\"running\",\"ended_by\",\"stdout\",\"stderr\","
    "\"truncated\"]}}",
};

#define MC_NTOOLS (sizeof(mc_tool_json) / sizeof(mc_tool_json[0]))

#endif
