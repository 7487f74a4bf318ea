// tests/mcp/test_mcp.mjs — proctor-mcp driven by the official MCP TypeScript
// SDK (Client + StdioClientTransport), first with its embedded engine, then
// against a headless Neovim running proctor (socket mode, found by discovery).
//
// The SDK validates every structuredContent against the tool's outputSchema
// (after listTools); the schemas themselves are compiled with Ajv (JSON
// Schema 2020-12, the MCP default dialect). Prints "PASS mcp/<name>" or
// "FAIL mcp/<name>: why"; figures as "# ..." lines. Run by tests/mcp/run
// from build/sdk-tests/mcp/ (so the SDKs resolve from build/node_modules).
//
//   env: PROCTOR_ROOT (the checkout), NVIM (default nvim), MCP_ONLY (substring
//   filter), PROCTOR_MCP (another proctor-mcp binary to test, e.g. an ASan build),
//   TEST_TIMES=1 (a line "TIME <ms> <name>" after each test, as the Lua harness prints),
//   MCP_EDITOR_ONLY=1 (only the tests that start $NVIM, declared with editorTest: tests/run
//   runs the whole file on the first Neovim and these on the others, as the rpc tier does)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { LATEST_PROTOCOL_VERSION } from "@modelcontextprotocol/sdk/types.js";
import { DEFAULT_REQUEST_TIMEOUT_MSEC } from "@modelcontextprotocol/sdk/shared/protocol.js";
// The SDK v2 client (2026-07-28 and the 2025 era), beside v1 above: both official.
import { Client as ClientV2 } from "@modelcontextprotocol/client";
import { StdioClientTransport as StdioClientTransportV2 } from "@modelcontextprotocol/client/stdio";
import Ajv2020 from "ajv/dist/2020.js";
import { execFileSync, spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";

const ROOT = process.env.PROCTOR_ROOT;
const INSTALLED = path.join(ROOT, "lua/proctor/proctor-mcp");
const MCP = process.env.PROCTOR_MCP || INSTALLED; // e.g. a sanitizer build
const NVIM = process.env.NVIM || "nvim";
const ONLY = process.env.MCP_ONLY || "";
const TIER = process.env.MCP_TIER || "mcp"; // the prefix of the PASS/FAIL names
const TIMES = !["", "0", undefined].includes(process.env.TEST_TIMES);
const EDITOR_ONLY = !["", "0", undefined].includes(process.env.MCP_EDITOR_ONLY);
const TOOLS = ["run_command", "start_command", "command_status", "list_commands", "read_output", "send_input", "cancel_command", "wait_for_command", "interact_with_command"];
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "proctor-mcp-test-"));
let failed = 0;
const cleanups = [];

// ---- harness -------------------------------------------------------------------------

// The test running now, and whether it was declared to start Neovim (editorTest).
let current = { name: "", editor: false };

async function test(name, fn, timeoutMs = 90000, editor = false) {
  if (ONLY && !name.includes(ONLY)) return;
  if (EDITOR_ONLY && !editor) return;
  let timer;
  const t0 = Date.now();
  current = { name, editor };
  try {
    await Promise.race([
      fn(),
      new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs); }),
    ]);
    console.log(`PASS ${TIER}/${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${TIER}/${name}: ${String(e && e.stack || e).split("\n").slice(0, 3).join(" | ")}`);
  } finally {
    clearTimeout(timer);
    if (TIMES) console.log(`TIME ${Date.now() - t0} ${TIER}/${name}`);
    current = { name: "", editor: false };
  }
}

// A test that starts the editor ($NVIM): the only kind MCP_EDITOR_ONLY runs.
const editorTest = (name, fn, timeoutMs) => test(name, fn, timeoutMs, true);

// $NVIM, for a test declared with editorTest only: a test that starts Neovim
// unannounced would be left out on the other Neovims (MCP_EDITOR_ONLY).
function nvimForThisTest() {
  if (!current.editor) throw new Error(`${current.name} starts $NVIM: declare it with editorTest`);
  return NVIM;
}

function assert(cond, msg) { if (!cond) throw new Error(msg); }
function eq(a, b, what) {
  if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${what}: expected ${JSON.stringify(b)}, got ${JSON.stringify(a)}`);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, fn, timeoutMs = 30000, every = 50) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(every);
  }
}
const alive = (pid) => { try { process.kill(pid, 0); return true; } catch { return false; } };
const groupAlive = (pgid) => { try { process.kill(-pgid, 0); return true; } catch { return false; } };
function pct(v, p) { const s = [...v].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p * s.length))]; }

// An environment without an inherited proctor socket, with a private runtime dir.
function baseEnv(extra = {}) {
  // PROCTOR_DISCOVER_ROOT: the fixed places discovery scans (/run/user/<uid>/proctor,
  // /tmp/proctor-<uid>) moved under a private empty "/": other editors on this machine stay out.
  // A state and a data directory of its own: an editor started with this environment keeps
  // its history (on by default) there, never in the user's.
  const env = { ...process.env, XDG_RUNTIME_DIR: fs.mkdtempSync(path.join(tmp, "run-")),
    XDG_STATE_HOME: fs.mkdtempSync(path.join(tmp, "state-")), XDG_DATA_HOME: fs.mkdtempSync(path.join(tmp, "data-")),
    PROCTOR_DISCOVER_ROOT: fs.mkdtempSync(path.join(tmp, "root-")), ...extra };
  delete env.PROCTOR_SOCKET;
  return env;
}

async function connect({ args = ["--embedded"], env = baseEnv(), cwd = tmp, name = "proctor-sdk-test" } = {}) {
  const transport = new StdioClientTransport({ command: MCP, args, env, cwd, stderr: "pipe" });
  let stderr = "";
  transport.stderr.on("data", (d) => { stderr += d; });
  const client = new Client({ name, version: "1.0.0" }, { capabilities: {} });
  await client.connect(transport);
  const { tools } = await client.listTools(); // caches the output validators
  const s = { client, transport, tools, stderr: () => stderr };
  cleanups.push(() => client.close().catch(() => {}));
  return s;
}

// callTool through the SDK; a tool error (isError) throws unless allowError.
async function call(s, name, args = {}, opts = {}) {
  const r = await s.client.callTool({ name, arguments: args }, undefined, opts);
  if (r.isError && !opts.allowError) throw new Error(`${name} failed: ${r.content?.[0]?.text}`);
  if (!r.isError) {
    assert(r.structuredContent, `${name}: no structuredContent`);
    eq(JSON.parse(r.content[0].text), r.structuredContent, `${name}: text content is the structured content`);
  }
  return opts.allowError ? r : r.structuredContent;
}

// ---- embedded ------------------------------------------------------------------------------

const E = await connect();

// A run_command with the default wait_ms, under the SDK's default request timeout (60 s),
// for a command that does not end by itself: started here (on its own server), checked
// last of all, so its wait overlaps every other test.
const DEFAULT_WAIT_TEST = "run_with_the_default_wait_answers_before_the_client_times_out";
const defaultWaitRun = EDITOR_ONLY || (ONLY && !DEFAULT_WAIT_TEST.includes(ONLY)) ? null : (async () => {
  const W = await connect({ name: "default-wait" });
  const dir = fs.mkdtempSync(path.join(tmp, "dw-"));
  const r = await W.client.callTool({ name: "run_command", arguments: { command: `echo up; while [ ! -e ${dir}/go ]; do sleep 0.1; done` } });
  return { W, dir, r };
})();
defaultWaitRun?.catch(() => {}); // the test reports it

await test("initialize_negotiates_the_latest_version", async () => {
  eq(E.client.getServerVersion().name, "proctor-mcp", "server name");
  assert(E.client.getServerCapabilities().tools, "tools capability");
  // The SDK asked for its latest; check what was answered with a raw exchange.
  for (const [asked, want] of [["2025-06-18", "2025-06-18"], [LATEST_PROTOCOL_VERSION, LATEST_PROTOCOL_VERSION], ["1999-01-01", "2025-11-25"]]) {
    const out = execFileSync(MCP, ["--embedded"], {
      input: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: asked, capabilities: {}, clientInfo: { name: "raw", version: "0" } } }) + "\n",
      env: baseEnv(), cwd: tmp, timeout: 20000,
    }).toString();
    eq(JSON.parse(out.split("\n")[0]).result.protocolVersion, want, `version answered to ${asked}`);
  }
});

await test("every_result_says_its_mode_and_the_first_embedded_one_warns", async () => {
  const M = await connect({ name: "mode-client" });
  const r = await M.client.callTool({ name: "run_command", arguments: { command: "echo one" } });
  eq(r.structuredContent.mode, "embedded", "mode of the first result");
  assert(r.content.length === 2 && /the user cannot see this run/.test(r.content[1].text) && /proctor-mcp-mode/.test(r.content[1].text),
    `the first embedded result says so in its text: ${JSON.stringify(r.content.slice(1))}`);
  const l = await M.client.callTool({ name: "list_commands", arguments: {} });
  eq([l.structuredContent.mode, l.content.length], ["embedded", 1], "later results: the mode, no second note");
  await M.client.close();
});

await test("tools_list_schemas_compile_and_annotations_are_honest", async () => {
  eq(E.tools.map((t) => t.name).sort(), [...TOOLS].sort(), "tool names");
  const ajv = new Ajv2020({ strict: true, allowUnionTypes: true });
  for (const t of E.tools) {
    assert(t.description && t.title, `${t.name}: title and description`);
    eq(t.inputSchema.type, "object", `${t.name}: inputSchema type`);
    eq(t.outputSchema.type, "object", `${t.name}: outputSchema type`);
    ajv.compile(t.inputSchema); // throws on an invalid schema
    ajv.compile(t.outputSchema);
  }
  const a = Object.fromEntries(E.tools.map((t) => [t.name, t.annotations]));
  for (const n of ["command_status", "list_commands", "read_output", "wait_for_command"]) eq(a[n].readOnlyHint, true, `${n} readOnlyHint`);
  for (const n of ["run_command", "start_command", "cancel_command", "send_input"]) {
    eq(a[n].readOnlyHint, false, `${n} readOnlyHint`);
    eq(a[n].destructiveHint, true, `${n} destructiveHint`);
  }
  eq(a.cancel_command.idempotentHint, true, "cancel idempotentHint");
  eq(a.run_command.idempotentHint, false, "run idempotentHint");
  eq(a.run_command.openWorldHint, true, "run openWorldHint");
});

await test("run_returns_exit_status_and_tails", async () => {
  const r = await call(E, "run_command", { command: "echo hello; echo oops >&2; exit 3" });
  eq([r.state, r.running, r.exit_code, r.signal, r.reason], ["failed", false, 3, null, "exit"], "end");
  eq([r.stdout, r.stderr, r.stdout_skipped], ["hello\n", "oops\n", 0], "tails");
  eq(r.owner, "proctor-sdk-test", "owner is the client's name");
  const ok = await call(E, "run_command", { command: "printf", args: ["%s|", "a b", "c"] });
  eq([ok.state, ok.exit_code, ok.stdout], ["completed", 0, "a b|c|"], "argv without a shell");
  const sig = await call(E, "run_command", { command: "kill -9 $$" });
  eq([sig.state, sig.exit_code, sig.signal], ["failed", null, "SIGKILL"], "a signal is reported as a signal");
});

await test("run_uses_cwd_and_env", async () => {
  const sub = fs.mkdtempSync(path.join(tmp, "cwd-"));
  const r = await call(E, "run_command", { command: "pwd; echo \"$FOO\"", cwd: path.basename(sub), env: { FOO: "bar baz" } });
  eq(r.stdout, `${fs.realpathSync(sub)}\nbar baz\n`, "relative cwd and env");
  const bad = await call(E, "run_command", { command: "true", cwd: "/nonexistent-dir" }, { allowError: true });
  assert(bad.isError && /nonexistent-dir/.test(bad.content[0].text), "a missing cwd is a tool error");
});

await test("run_tail_is_cut_at_a_character_boundary", async () => {
  // 3 bytes per character: a tail of 100 bytes starts inside one.
  const r = await call(E, "run_command", { command: "for i in $(seq 60); do printf '€'; done", tail_bytes: 100 });
  eq(r.stdout_bytes, 180, "bytes");
  assert(/^€+$/.test(r.stdout) && !r.stdout.includes("\uFFFD"), "whole characters only");
  eq(r.stdout.length * 3 + r.stdout_skipped, 180, "skipped + kept = all");
});

await test("long_run_streams_progress", async () => {
  const P = await connect({ args: ["--embedded", "--progress-ms", "150"] });
  const seen = [];
  const r = await call(P, "run_command", { command: "for i in 1 2 3 4 5 6; do echo step $i; sleep 0.25; done" }, {
    onprogress: (p) => seen.push(p), resetTimeoutOnProgress: true,
  });
  eq(r.state, "completed", "state");
  assert(seen.length >= 3, `at least 3 progress notifications, got ${seen.length}`);
  for (let i = 1; i < seen.length; i++) assert(seen[i].progress > seen[i - 1].progress, "progress increases");
  assert(seen.some((p) => /step \d/.test(p.message || "")), `a message shows the last line: ${JSON.stringify(seen.map((p) => p.message))}`);
  const w = await call(P, "start_command", { command: "sleep 0.8; echo done" });
  const seen2 = [];
  const done = await call(P, "wait_for_command", { id: w.id, timeout_ms: 20000 }, { onprogress: (p) => seen2.push(p) });
  eq([done.state, done.stdout], ["completed", "done\n"], "wait result");
  assert(seen2.length >= 2, `wait sends progress too (${seen2.length})`);
});

await test("run_returns_the_id_when_still_running_then_wait", async () => {
  // It runs until told to end (no race with wait_ms on a loaded machine).
  const go = path.join(fs.mkdtempSync(path.join(tmp, "go-")), "go");
  const r = await call(E, "run_command", { command: `echo started; while [ ! -e ${go} ]; do sleep 0.05; done; echo finished`, wait_ms: 100 });
  eq([r.running, r.state], [true, "running"], "still running");
  assert(/call wait_for_command \{id: \d+\}/.test(r.next) && r.next.includes(`read_output {id: ${r.id}}`), `says how to go on: ${r.next}`);
  assert(["", "started\n"].includes(r.stdout), `the tail so far: ${JSON.stringify(r.stdout)}`);
  await until("started", async () => (await call(E, "read_output", { id: r.id })).data === "started\n");
  fs.writeFileSync(go, "");
  const w = await call(E, "wait_for_command", { id: r.id, timeout_ms: 30000 });
  eq([w.running, w.exit_code, w.stdout, w.next], [false, 0, "started\nfinished\n", undefined], "after wait");
});

await test("cancel_tool_kills_the_tree", async () => {
  const s = await call(E, "start_command", { command: "sleep 300 & sleep 300 & trap '' TERM; wait" });
  const st = await until("running", async () => { const x = await call(E, "command_status", { id: s.id }); return x.pid && x; });
  const c = await call(E, "cancel_command", { id: s.id });
  eq(c.result, "canceling", "cancel result");
  const w = await call(E, "wait_for_command", { id: s.id, timeout_ms: 30000 });
  eq([w.state, w.running], ["canceled", false], "state");
  await until("the process group is gone", () => !groupAlive(st.pid), 10000);
  eq((await call(E, "cancel_command", { id: s.id })).result, "already_terminal", "second cancel");
  const nf = await call(E, "cancel_command", { id: 99999 }, { allowError: true });
  assert(nf.isError && /ENOENT/.test(nf.content[0].text), "unknown id is a tool error");
});

await test("request_cancellation_stops_the_run", async () => {
  const ac = new AbortController();
  const p = call(E, "run_command", { command: "echo $$ > pid; exec sleep 300", cwd: tmp, wait_ms: 60000 }, { signal: ac.signal });
  const pidFile = path.join(tmp, "pid");
  const pid = await until("the command started", () => fs.existsSync(pidFile) && Number(fs.readFileSync(pidFile, "utf8")));
  ac.abort("test cancels");
  await p.then(() => { throw new Error("the call resolved"); }, () => {});
  await until("the command ended after notifications/cancelled", () => !alive(pid), 10000);
  // The process is gone before its run has ended: the engine still takes the
  // exit, drains the output and only then records the end. Wait for that end
  // (the wait tool), not for the process, before reading the list.
  const mine = (x) => x.command.includes("echo $$ > pid; exec sleep 300");
  const run = (await call(E, "list_commands", {})).executions.find(mine);
  assert(run, "the run is listed");
  eq((await call(E, "wait_for_command", { id: run.id, timeout_ms: 30000 })).state, "canceled", "the run's end");
  const l = await call(E, "list_commands", { state: "canceled" });
  assert(l.executions.some(mine), "listed as canceled");
  fs.unlinkSync(pidFile);
  // The server still answers afterwards.
  eq((await call(E, "run_command", { command: "echo alive" })).stdout, "alive\n", "still serving");
});

await test("flood_is_read_with_a_byte_limit", async () => {
  const total = 24 * 1024 * 1024;
  const s = await call(E, "start_command", { command: `yes 'héllo wörld ✓' | head -c ${total}` });
  const w = await call(E, "wait_for_command", { id: s.id, timeout_ms: 60000, tail_bytes: 1000 });
  eq([w.state, w.stdout_bytes], ["completed", total], "flood ended");
  assert(w.stdout.length > 0 && !w.stdout.includes("\uFFFD"), "tail is whole characters");
  const t0 = performance.now();
  const r = await call(E, "read_output", { id: s.id, offset: 0, max_bytes: 65536 });
  const ms = performance.now() - t0;
  assert(r.missed > 0, "the ring dropped the head: missed > 0");
  const len = Buffer.byteLength(r.data);
  assert(len <= 65536 && len > 65000, `at most the limit: ${len}`);
  eq(r.next_offset - r.offset, len, "next_offset - offset = bytes of data");
  eq(r.total_bytes, total, "total_bytes");
  assert(!r.data.includes("\uFFFD"), "no broken character at either end");
  const r2 = await call(E, "read_output", { id: s.id, offset: r.next_offset, max_bytes: 1000 });
  eq([r2.offset, r2.missed], [r.next_offset, 0], "continues where the last read stopped");
  const end = await call(E, "read_output", { id: s.id, offset: -64, max_bytes: 1000 });
  eq([end.next_offset, end.eof], [total, true], "negative offset reads the end");
  // Figures: a 1 MiB read, and the wall time of the 64 KiB one.
  const t1 = performance.now();
  const big = await call(E, "read_output", { id: s.id, offset: r.next_offset, max_bytes: 1048576 });
  console.log(`# flood: 64 KiB read ${ms.toFixed(1)} ms, 1 MiB read ${(performance.now() - t1).toFixed(1)} ms (${Buffer.byteLength(big.data)} bytes)`);
});

await test("tool_names_are_clear_and_the_old_ones_still_work", async () => {
  eq(E.tools.map((t) => t.name), TOOLS, "tools/list shows the clear names");
  // The first release's names are accepted by tools/call (not listed: the SDK cannot check
  // their output schema, so the raw result is checked here).
  const r = await E.client.callTool({ name: "run", arguments: { command: "echo old" } });
  eq([r.isError, r.structuredContent.stdout], [undefined, "old\n"], "run is run_command");
  const s = await E.client.callTool({ name: "start", arguments: { command: "sleep 60" } });
  const id = s.structuredContent.id;
  for (const old of ["status", "output"]) {
    const x = await E.client.callTool({ name: old, arguments: { id } });
    assert(!x.isError && x.structuredContent.id === id, `${old}: ${JSON.stringify(x)}`);
  }
  eq((await E.client.callTool({ name: "list", arguments: {} })).isError, undefined, "list");
  eq((await E.client.callTool({ name: "cancel", arguments: { id } })).structuredContent.result, "canceling", "cancel");
  eq((await E.client.callTool({ name: "wait", arguments: { id } })).structuredContent.state, "canceled", "wait");
  const u = await E.client.callTool({ name: "runn", arguments: {} }).catch((e) => e);
  assert(/unknown tool runn/.test(String(u.message || JSON.stringify(u))), `an unknown name: ${u}`);
});

await test("bash_syntax_runs_by_default_and_shell_chooses", async () => {
  const line = "[[ 1 -lt 2 ]] && echo {1..3}";
  const r = await call(E, "run_command", { command: line });
  eq([r.stdout, r.command, r.exit_code], ["1 2 3\n", line, 0], "bash runs [[ ]] and {1..3}; command is the line as given");
  assert(/\/bash$/.test(r.shell), `the shell is bash: ${r.shell}`);
  const st = await call(E, "start_command", { command: "echo $0" });
  eq((await call(E, "wait_for_command", { id: st.id })).command, "echo $0", "start and wait report the line too");
  const a = await call(E, "run_command", { command: "echo", args: ["-c", "x"] });
  eq([a.stdout, a.shell], ["-c x\n", null], "args form: no shell");
  const S = await connect({ args: ["--embedded", "--shell=/bin/sh"] });
  const s = await call(S, "run_command", { command: "echo {1..3}" });
  eq([s.stdout, s.shell, s.command], ["{1..3}\n", "/bin/sh", "echo {1..3}"], "--shell=/bin/sh");
  const bash = r.shell;
  const D = await connect({ args: ["--embedded", "--shell"], env: baseEnv({ SHELL: bash }) });
  eq((await call(D, "run_command", { command: "echo $BASH_VERSION" })).stdout.trim().length > 0, true, "--shell takes $SHELL");
});

await test("input_reaches_stdin", async () => {
  const s = await call(E, "start_command", { command: "printf 'name? '; read a; echo \"hi $a\"" });
  await until("the prompt", async () => (await call(E, "read_output", { id: s.id })).data === "name? ");
  const i = await call(E, "send_input", { id: s.id, data: "Ada\n", eof: true });
  eq([i.bytes, i.stdin_closed], [4, true], "input result");
  eq((await call(E, "wait_for_command", { id: s.id })).stdout, "name? hi Ada\n", "answer");
  const late = await call(E, "send_input", { id: s.id, data: "x" }, { allowError: true });
  assert(late.isError && /ENOTRUNNING|ESTDINCLOSED/.test(late.content[0].text), `input after the end: ${late.content[0].text}`);
});

// A REPL: a prompt, then one answer per line. `gate` answers in two parts and waits for a
// file between them; `block` waits for a file; `big` writes 200,000 bytes.
function repl(dir) {
  return `while printf 'calc> '; IFS= read -r line; do case $line in ` +
    `quit) echo bye; exit 0;; ` +
    `gate) echo part1; while [ ! -e ${dir}/gate ]; do sleep 0.02; done; echo part2;; ` +
    `block) while [ ! -e ${dir}/block ]; do sleep 0.02; done;; ` +
    `big) head -c 200000 /dev/zero | tr '\\0' x; echo;; ` +
    `*) echo "got $line";; esac; done`;
}

await test("interact_answers_until_the_prompt_idle_timeout_or_exit", async () => {
  const dir = fs.mkdtempSync(path.join(tmp, "repl-"));
  const s = await call(E, "start_command", { command: repl(dir) });
  const P = "calc> $";
  // The first call returns everything so far (the first prompt).
  const a = await call(E, "interact_with_command", { id: s.id, prompt: P });
  eq([a.stdout, a.ended_by, a.running, a.truncated, a.stdout_offset], ["calc> ", "prompt", true, false, 0], "first prompt");
  const b = await call(E, "interact_with_command", { id: s.id, input: "hello\n", prompt: P });
  eq([b.stdout, b.stderr, b.ended_by, b.input_bytes, b.stdout_offset], ["got hello\ncalc> ", "", "prompt", 6, 6], "an answer up to the prompt");
  // Idle: the answer pauses (until the gate file exists); what came is returned at idle,
  // the rest by the next call: nothing is lost between calls.
  const c = await call(E, "interact_with_command", { id: s.id, input: "gate\n", idle_ms: 200 });
  eq(c.ended_by, "idle", "the pause ends the call");
  assert(["", "part1\n"].includes(c.stdout), `the part before the pause: ${JSON.stringify(c.stdout)}`);
  fs.writeFileSync(path.join(dir, "gate"), "");
  const d = await call(E, "interact_with_command", { id: s.id, prompt: P });
  eq([c.stdout + d.stdout, d.ended_by], ["part1\npart2\ncalc> ", "prompt"], "the rest, with no input");
  // Timeout: the prompt cannot come while it blocks.
  const t = await call(E, "interact_with_command", { id: s.id, input: "block\n", prompt: P, timeout_ms: 300 });
  eq([t.ended_by, t.stdout, t.running], ["timeout", "", true], "timeout");
  // A call the client cancels (notifications/cancelled) gets no answer and stops watching;
  // the execution keeps running and the next call still answers.
  const ac = new AbortController();
  const gone = call(E, "interact_with_command", { id: s.id, prompt: P }, { signal: ac.signal });
  ac.abort("test cancels");
  await gone.then(() => { throw new Error("the cancelled call resolved"); }, () => {});
  fs.writeFileSync(path.join(dir, "block"), "");
  eq((await call(E, "interact_with_command", { id: s.id, prompt: P })).stdout, "calc> ", "after the block");
  // Bounded: the newest max_bytes, said so.
  const g = await call(E, "interact_with_command", { id: s.id, input: "big\n", prompt: P, max_bytes: 1000 });
  eq([g.ended_by, g.truncated, Buffer.byteLength(g.stdout), g.stdout_skipped], ["prompt", true, 1000, 200007 - 1000], "truncated");
  assert(/^x+\ncalc> $/.test(g.stdout), "the newest bytes are kept");
  const rest = await call(E, "read_output", { id: s.id, offset: g.stdout_offset - g.stdout_skipped, max_bytes: 16 });
  eq(rest.data, "x".repeat(16), "read_output reads what was left out");
  // The end: it exits after its answer.
  const q = await call(E, "interact_with_command", { id: s.id, input: "quit\n", prompt: P });
  eq([q.ended_by, q.stdout, q.running, q.exit_code, q.state], ["exit", "bye\n", false, 0, "completed"], "exit");
  // Errors: a finished run, an unknown id, a closed stdin, a bad pattern.
  const f = await call(E, "interact_with_command", { id: s.id, input: "x\n" }, { allowError: true });
  assert(f.isError && /ENOTRUNNING: execution \d+ has ended \(completed\)/.test(f.content[0].text), `finished: ${f.content[0].text}`);
  const u = await call(E, "interact_with_command", { id: 987654, input: "x\n" }, { allowError: true });
  assert(u.isError && /ENOENT/.test(u.content[0].text), `unknown: ${u.content[0].text}`);
  const r = await call(E, "run_command", { command: "sleep 120", wait_ms: 0 });
  const ci = await call(E, "interact_with_command", { id: r.id, input: "x\n" }, { allowError: true });
  assert(ci.isError && /ESTDINCLOSED: .*stdin: true/.test(ci.content[0].text), `closed stdin: ${ci.content[0].text}`);
  await call(E, "cancel_command", { id: r.id });
  const bad = await call(E, "interact_with_command", { id: r.id, prompt: "(" }, { allowError: true });
  assert(bad.isError && /'prompt' is not a POSIX extended regular expression/.test(bad.content[0].text), `bad pattern: ${bad.content[0].text}`);
});

await test("interact_under_a_pty", async () => {
  const dir = fs.mkdtempSync(path.join(tmp, "repl-"));
  const s = await call(E, "start_command", { command: repl(dir), pty: true });
  const a = await call(E, "interact_with_command", { id: s.id, prompt: "calc> $" });
  eq([a.stdout, a.stderr], ["calc> ", ""], "the first prompt");
  const b = await call(E, "interact_with_command", { id: s.id, input: "hi\n", prompt: "calc> $" });
  eq([b.stdout, b.ended_by], ["hi\r\ngot hi\r\ncalc> ", "prompt"], "the terminal: the echo, the answer, the prompt");
  const q = await call(E, "interact_with_command", { id: s.id, input: "quit\n", prompt: "calc> $" });
  eq([q.ended_by, q.exit_code], ["exit", 0], "exit");
});

await test("errors_are_tool_errors_or_protocol_errors", async () => {
  let e;
  await E.client.callTool({ name: "nope", arguments: {} }).catch((x) => { e = x; });
  assert(e && e.code === -32602, `unknown tool: JSON-RPC error -32602, got ${e && e.code}`);
  for (const [name, args, re] of [
    ["command_status", { id: "x" }, /'id' must be an integer/],
    ["command_status", {}, /'id' is required/],
    ["run_command", { command: "true", bogus: 1 }, /unknown argument 'bogus'/],
    ["read_output", { id: 1, stream: "pty" }, /one of/],
    ["command_status", { id: 424242 }, /ENOENT/],
  ]) {
    const r = await call(E, name, args, { allowError: true });
    assert(r.isError && re.test(r.content[0].text), `${name} ${JSON.stringify(args)}: ${r.content?.[0]?.text}`);
  }
});

await test("fence_and_secrets", async () => {
  const inside = fs.mkdtempSync(path.join(tmp, "fence-"));
  const F = await connect({
    args: ["--embedded", "--allow-cwd", inside, "--deny", "*rm -rf*", "--secret", "TOKEN=MY_TEST_SECRET"],
    env: baseEnv({ MY_TEST_SECRET: "s3cr3t-v4lue" }), cwd: inside,
  });
  const r = await call(F, "run_command", { command: "echo \"token=$TOKEN\"; echo s3cr3t-v4lue >&2" });
  eq([r.stdout, r.stderr], ["token=***\n", "***\n"], "secret masked in output");
  const c = await call(F, "run_command", { command: "echo s3cr3t-v4lue" });
  assert(!JSON.stringify(c).includes("s3cr3t"), "the value appears nowhere in a result");
  eq(c.command, "echo ***", "masked in the command");
  const deny = await call(F, "run_command", { command: "rm -rf /tmp/nothing-here" }, { allowError: true });
  assert(deny.isError && /deny/.test(deny.content[0].text), "deny pattern refuses");
  const out = await call(F, "run_command", { command: "true", cwd: "/" }, { allowError: true });
  assert(out.isError && /outside/.test(out.content[0].text), "cwd outside --allow-cwd refused");
  const sub = fs.mkdtempSync(path.join(inside, "sub-"));
  eq((await call(F, "run_command", { command: "pwd", cwd: sub })).stdout, fs.realpathSync(sub) + "\n", "a subdirectory is allowed");
  const env = await call(F, "run_command", { command: "true", env: { TOKEN: "x" } }, { allowError: true });
  assert(env.isError && /secret/.test(env.content[0].text), "env may not override a secret");
});

// ---- protocol eras: 2026-07-28 (per-request _meta, no handshake) and the legacy ones -------------

// A raw JSON-RPC client over stdio (the SDK knows versions up to 2025-11-25 only).
function rawServer(args = ["--embedded"]) {
  const child = spawn(MCP, args, { env: baseEnv(), cwd: tmp, stdio: ["pipe", "pipe", "pipe"] });
  cleanups.push(() => { try { child.kill("SIGTERM"); } catch {} });
  const answers = new Map(), waiting = new Map(), notes = [];
  let buf = "";
  child.stdout.on("data", (d) => {
    buf += d;
    for (let i; (i = buf.indexOf("\n")) >= 0;) {
      const m = JSON.parse(buf.slice(0, i));
      buf = buf.slice(i + 1);
      if (m.id === undefined) { notes.push(m); continue; }
      answers.set(m.id, m);
      waiting.get(m.id)?.(m);
    }
  });
  child.stderr.on("data", () => {});
  let next = 1;
  const send = (m) => child.stdin.write(JSON.stringify({ jsonrpc: "2.0", ...m }) + "\n");
  const request = (method, params) => {
    const id = next++;
    const p = new Promise((res) => waiting.set(id, res));
    send({ id, method, params });
    return { id, answer: p };
  };
  const ask = async (method, params) => (await request(method, params).answer);
  return { child, send, request, ask, answers, notes, close: () => child.stdin.end() };
}
const MODERN = "2026-07-28";
const meta = (extra = {}) => ({ "io.modelcontextprotocol/protocolVersion": MODERN, "io.modelcontextprotocol/clientCapabilities": {},
  "io.modelcontextprotocol/clientInfo": { name: "modern-client", version: "1" }, ...extra });

await test("mcp_2026_07_28_discover_and_stateless_requests", async () => {
  const R = rawServer();
  const d = (await R.ask("server/discover", { _meta: meta() })).result;
  eq(d.supportedVersions, [MODERN, "2025-11-25", "2025-06-18"], "supportedVersions");
  eq([d.resultType, typeof d.ttlMs, ["public", "private"].includes(d.cacheScope)], ["complete", "number", true], "a cacheable complete result");
  eq([d._meta["io.modelcontextprotocol/serverInfo"].name, typeof d.capabilities.tools, typeof d.instructions], ["proctor-mcp", "object", "string"], "identity, capabilities, instructions");
  // No initialize: every request carries its version and capabilities.
  const l = (await R.ask("tools/list", { _meta: meta() })).result;
  eq(l.tools.map((t) => t.name), TOOLS, "tools");
  assert(l.resultType === "complete" && l.ttlMs >= 0 && ["public", "private"].includes(l.cacheScope), `tools/list is cacheable: ${JSON.stringify({ ...l, tools: undefined })}`);
  const ajv = new Ajv2020({ strict: false, allowUnionTypes: true });
  const check = ajv.compile(l.tools.find((t) => t.name === "run_command").outputSchema);
  const r = (await R.ask("tools/call", { name: "run_command", arguments: { command: "echo hi" }, _meta: meta() })).result;
  eq([r.resultType, r.structuredContent.stdout, r.structuredContent.owner], ["complete", "hi\n", "modern-client"], "a call, owned by the clientInfo name");
  assert(check(r.structuredContent), `valid against the output schema: ${JSON.stringify(check.errors)}`);
  eq(r._meta["io.modelcontextprotocol/serverInfo"].name, "proctor-mcp", "serverInfo on every result");
  const e = (await R.ask("tools/call", { name: "command_status", arguments: { id: 424242 }, _meta: meta() })).result;
  eq([e.isError, e.resultType], [true, "complete"], "a tool error is a complete result");
  // The server-minted handle (the execution id) is all the state a later request needs.
  const s = (await R.ask("tools/call", { name: "start_command", arguments: { command: "cat" }, _meta: meta() })).result.structuredContent;
  const ix = (await R.ask("tools/call", { name: "interact_with_command", arguments: { id: s.id, input: "ping\n", eof: true, idle_ms: 0 }, _meta: meta() })).result;
  eq([ix.resultType, ix.structuredContent.stdout, ix.structuredContent.ended_by], ["complete", "ping\n", "exit"], "interact by handle");
  // Cancellation: no answer, the run's command is stopped.
  const pidFile = path.join(fs.mkdtempSync(path.join(tmp, "mpid-")), "pid");
  const run = R.request("tools/call", { name: "run_command", arguments: { command: `echo $$ > ${pidFile}; exec sleep 300`, wait_ms: 60000 }, _meta: meta() });
  const pid = await until("the command started", () => fs.existsSync(pidFile) && Number(fs.readFileSync(pidFile, "utf8")));
  R.send({ method: "notifications/cancelled", params: { requestId: run.id, reason: "test" } });
  await until("the command ended after notifications/cancelled", () => !alive(pid), 10000);
  eq((await R.ask("tools/list", { _meta: meta() })).result.resultType, "complete", "still serving");
  assert(!R.answers.has(run.id), "the cancelled request got no answer");
  // Errors: an unknown version, a request without the capabilities, discover without _meta.
  const u = await R.ask("tools/list", { _meta: meta({ "io.modelcontextprotocol/protocolVersion": "1900-01-01" }) });
  eq([u.error.code, u.error.data.requested, u.error.data.supported.includes(MODERN)], [-32022, "1900-01-01", true], "UnsupportedProtocolVersion");
  const nc = await R.ask("tools/call", { name: "run_command", arguments: { command: "true" }, _meta: { "io.modelcontextprotocol/protocolVersion": MODERN } });
  eq(nc.error.code, -32602, "clientCapabilities is required");
  eq((await R.ask("server/discover", {})).error.code, -32602, "server/discover without _meta");
  R.close();
});

await test("legacy_requests_before_initialize_are_refused", async () => {
  const R = rawServer();
  const dir = fs.mkdtempSync(path.join(tmp, "pre-"));
  // An era-ambiguous method with neither a handshake nor _meta is not run under legacy rules.
  const c = await R.ask("tools/call", { name: "run_command", arguments: { command: `touch ${dir}/ran` } });
  eq(c.error.code, -32600, "tools/call before initialize");
  assert(/initialize/.test(c.error.message) && c.error.message.includes(MODERN), `says both ways: ${c.error.message}`);
  eq((await R.ask("tools/list", {})).error.code, -32600, "tools/list before initialize");
  eq((await R.ask("ping", {})).result, {}, "ping is answered");
  // initialize selects the legacy semantics; asking for 2026-07-28 there gets the newest legacy one.
  eq((await R.ask("initialize", { protocolVersion: MODERN, capabilities: {}, clientInfo: { name: "x", version: "0" } })).result.protocolVersion, "2025-11-25", "no 2026-07-28 handshake");
  R.send({ method: "notifications/initialized" });
  const l = (await R.ask("tools/list", {})).result;
  eq([l.tools.length, l.resultType, l.ttlMs], [TOOLS.length, undefined, undefined], "legacy results unchanged");
  const r = (await R.ask("tools/call", { name: "run_command", arguments: { command: "echo ok" } })).result;
  eq([r.structuredContent.stdout, r.resultType], ["ok\n", undefined], "served after initialize");
  assert(!fs.existsSync(path.join(dir, "ran")), "the refused call ran nothing");
  R.close();
});

await test("sdk_client_on_2025_06_18", async () => {
  // The pinned SDK asks for 2025-11-25 (E above); this client's initialize asks for 2025-06-18.
  const transport = new StdioClientTransport({ command: MCP, args: ["--embedded"], env: baseEnv(), cwd: tmp, stderr: "pipe" });
  const send = transport.send.bind(transport);
  transport.send = (m, o) => send(m.method === "initialize" ? { ...m, params: { ...m.params, protocolVersion: "2025-06-18" } } : m, o);
  let negotiated;
  transport.setProtocolVersion = (v) => { negotiated = v; };
  const client = new Client({ name: "old-sdk", version: "1" }, { capabilities: {} });
  await client.connect(transport);
  cleanups.push(() => client.close().catch(() => {}));
  eq(negotiated, "2025-06-18", "negotiated version");
  const { tools } = await client.listTools();
  eq(tools.map((t) => t.name), TOOLS, "tools");
  const r = await client.callTool({ name: "run_command", arguments: { command: "echo old" } }); // validated by the SDK
  eq([r.structuredContent.stdout, r.resultType], ["old\n", undefined], "a call");
  await client.close();
});

await test("sdk_v2_client_negotiates_2026_07_28_and_falls_back", async () => {
  // The official v2 client probes with server/discover ("auto"), pins the modern
  // era, or stays with initialize ("legacy"): each gets its era, and the tools work.
  for (const [mode, want] of [[{ pin: "2026-07-28" }, "2026-07-28"], ["auto", "2026-07-28"], ["legacy", "2025-11-25"]]) {
    const transport = new StdioClientTransportV2({ command: MCP, args: ["--embedded"], env: baseEnv(), cwd: tmp, stderr: "pipe" });
    const client = new ClientV2({ name: "sdk-v2", version: "1" }, { capabilities: {}, versionNegotiation: { mode } });
    await client.connect(transport);
    cleanups.push(() => client.close().catch(() => {}));
    const era = JSON.stringify(mode);
    eq(client.getNegotiatedProtocolVersion(), want, `${era}: negotiated version`);
    eq((await client.listTools()).tools.map((t) => t.name), TOOLS, `${era}: tools`);
    const r = await client.callTool({ name: "run_command", arguments: { command: "echo v2; [[ -n $BASH_VERSION ]] && echo bash" } });
    eq([r.isError ?? false, r.structuredContent.stdout, r.structuredContent.owner], [false, "v2\nbash\n", "sdk-v2"], `${era}: a call`);
    // The execution id is the server-minted handle later calls carry.
    const s = (await client.callTool({ name: "start_command", arguments: { command: "cat" } })).structuredContent;
    const ix = (await client.callTool({ name: "interact_with_command", arguments: { id: s.id, input: "ping\n", eof: true, idle_ms: 0 } })).structuredContent;
    eq([ix.stdout, ix.ended_by], ["ping\n", "exit"], `${era}: interact by handle`);
    await client.close();
  }
});

// ---- the allow list cannot be bypassed (:help proctor-mcp-policy) ----------------------------

await test("allow_list_env_bypasses_are_refused", async () => {
  const dir = fs.mkdtempSync(path.join(tmp, "allow-"));
  execFileSync("git", ["init", "-q", dir]);
  const marker = path.join(dir, "slipped-through");
  // A fake git early on a PATH the agent would choose: it reports the secret it got.
  const bin = fs.mkdtempSync(path.join(tmp, "bin-"));
  fs.writeFileSync(path.join(bin, "git"), `#!/bin/sh\necho "$TOKEN" > ${marker}\n`, { mode: 0o755 });
  const A = await connect({
    args: ["--embedded", "--allow", "git status", "--allow", "ls", "--secret", "TOKEN=MY_TEST_SECRET"],
    env: baseEnv({ MY_TEST_SECRET: "s3cr3t-v4lue" }), cwd: dir,
  });
  const sh = `sh -c 'echo "$TOKEN" > ${marker}'`;
  const bypasses = [
    ["PATH", `${bin}:/usr/bin:/bin`],
    ["GIT_CONFIG_COUNT", "1"], ["GIT_CONFIG_KEY_0", "core.fsmonitor"], ["GIT_CONFIG_VALUE_0", sh],
    ["GIT_CONFIG_PARAMETERS", `'core.fsmonitor'='${sh}'`],
    ["LD_PRELOAD", path.join(bin, "evil.so")], ["LD_LIBRARY_PATH", bin],
    ["GIT_SSH_COMMAND", sh], ["PAGER", sh], ["GIT_PAGER", sh], ["MAKEFLAGS", `SHELL=${sh}`],
    ["BASH_ENV", path.join(bin, "rc")], ["ENV", path.join(bin, "rc")],
  ];
  for (const [name, value] of bypasses) {
    for (const form of [{ command: "git status" }, { command: "git", args: ["status"] }]) {
      const r = await call(A, "run_command", { ...form, env: { [name]: value } }, { allowError: true });
      assert(r.isError, `env ${name} with ${JSON.stringify(form)} ran: ${JSON.stringify(r.structuredContent || r.content)}`);
      assert(new RegExp(`env: refused: ${name} `).test(r.content[0].text), `${name}: a clear error: ${r.content[0].text}`);
    }
  }
  assert(!fs.existsSync(marker), "no code of the agent's choosing ran, and no secret reached one");
  // The legit commands still run, both forms.
  eq((await call(A, "run_command", { command: "git status" })).state, "completed", "git status (shell form)");
  eq((await call(A, "run_command", { command: "git", args: ["status"] })).state, "completed", "git status (args form)");
  eq((await call(A, "run_command", { command: "ls" })).state, "completed", "ls");
});

await test("allow_env_admits_exactly_the_named_names", async () => {
  const A = await connect({ args: ["--embedded", "--allow", "env", "--allow-env", "FOO", "--allow-env", "LANG"] });
  const r = await call(A, "run_command", { command: "env", env: { FOO: "foo value", LANG: "C" } });
  assert(r.stdout.split("\n").includes("FOO=foo value") && r.stdout.split("\n").includes("LANG=C"), `the named names reach the command: ${r.stdout}`);
  const bar = await call(A, "run_command", { command: "env", env: { FOO: "x", BAR: "y" } }, { allowError: true });
  assert(bar.isError && /env: refused: BAR is not among the names this server lets env set \(--allow-env\)/.test(bar.content[0].text), `BAR: ${bar.content[0].text}`);
  const none = await connect({ args: ["--embedded", "--allow", "env"] });
  const n = await call(none, "run_command", { command: "env", env: { FOO: "x" } }, { allowError: true });
  assert(n.isError && /it allows none/.test(n.content[0].text), `no --allow-env: ${n.content[0].text}`);
  // PATH, LD_*, BASH_ENV and ENV can never be allowed: the server refuses to start.
  for (const name of ["PATH", "LD_PRELOAD", "BASH_ENV", "ENV"]) {
    const x = spawnSync(MCP, ["--embedded", "--allow", "env", "--allow-env", name], { env: baseEnv(), input: "", timeout: 20000 });
    eq(x.status, 2, `--allow-env ${name}: exit status`);
    assert(x.stderr.toString().includes(`--allow-env ${name}: ${name} can never be allowed`), `--allow-env ${name}: ${x.stderr}`);
  }
  // Without an allow list env is not restricted (the fence is the allow list).
  eq((await call(E, "run_command", { command: "echo \"$PAGER\"", env: { PAGER: "cat" } })).stdout, "cat\n", "no --allow: env is free");
});

await test("options_are_parsed_by_getopt_long", async () => {
  // --name=value and --name value are the same option; a refused option is one line and exit 2.
  const eqForm = spawnSync(MCP, ["--embedded", "--output-limit=abc"], { env: baseEnv(), input: "", timeout: 20000 });
  eq(eqForm.status, 2, "--output-limit=abc: exit status");
  assert(eqForm.stderr.toString().includes("--output-limit abc: a number expected"), `--output-limit=abc: ${eqForm.stderr}`);
  for (const [args, want] of [[["--embedded", "--progress-ms"], "--progress-ms needs a value"],
    [["--embedded", "--no-such-option"], "unknown option --no-such-option (see --help)"],
    [["--embedded", "stray"], "unknown option stray (see --help)"]]) {
    const x = spawnSync(MCP, args, { env: baseEnv(), input: "", timeout: 20000 });
    eq(x.status, 2, `${args.join(" ")}: exit status`);
    assert(x.stderr.toString().includes(want), `${args.join(" ")}: ${x.stderr}`);
  }
  const help = spawnSync(MCP, ["--help"], { env: baseEnv(), input: "", timeout: 20000 });
  eq(help.status, 0, "--help: exit status");
  assert(help.stdout.toString().startsWith("usage: proctor-mcp"), "--help prints the usage");
  const fine = spawnSync(MCP, ["--embedded", "--progress-ms=250", "--allow-cwd=" + tmp], { env: baseEnv(), input: "", cwd: tmp, timeout: 20000 });
  eq(fine.status, 0, `--progress-ms=250 --allow-cwd=DIR: exit status (${fine.stderr})`);
});

await test("allow_patterns_match_the_argv_of_the_args_form", async () => {
  const dir = fs.mkdtempSync(path.join(tmp, "argv-"));
  execFileSync("git", ["init", "-q", dir]);
  const A = await connect({ args: ["--embedded", "--allow", "git status", "--allow", "ls", "--allow", "printf *"], cwd: dir });
  eq((await call(A, "run_command", { command: "printf", args: ["%s|", "a b", "it's"] })).stdout, "a b|it's|", "printf * admits any args");
  eq((await call(A, "run_command", { command: "git", args: ["status", "--short"] }, { allowError: true })).isError, true, "git status --short is not git status");
  for (const [form, what] of [
    [{ command: "ls", args: ["-la"] }, "ls with an argument"],
    [{ command: "git status", args: [] }, "a program named 'git status'"],
    [{ command: "git", args: ["status --short"] }, "one argument 'status --short'"],
    [{ command: "git", args: ["stat", "us"] }, "two arguments"],
  ]) {
    const r = await call(A, "run_command", form, { allowError: true });
    assert(r.isError && /matches none of the allow patterns/.test(r.content[0].text), `${what}: ${JSON.stringify(r.content)}`);
  }
  const q = await call(A, "run_command", { command: "git status", args: [] }, { allowError: true });
  assert(q.content[0].text.includes("('git status')"), `the error shows the argv as it was matched: ${q.content[0].text}`);
});

await test("deny_patterns_apply_to_the_args_form", async () => {
  const victim = fs.mkdtempSync(path.join(tmp, "victim-"));
  const D = await connect({ args: ["--embedded", "--deny", "*rm -rf*"] });
  for (const args of [["-rf", victim], ["-rf", `${victim}/a b`]]) {
    const r = await call(D, "run_command", { command: "rm", args }, { allowError: true });
    assert(r.isError && /deny pattern '\*rm -rf\*'/.test(r.content[0].text), `rm ${args.join(" ")}: ${JSON.stringify(r.content)}`);
  }
  assert(fs.existsSync(victim), "nothing was removed");
  eq((await call(D, "run_command", { command: "rm", args: ["-r", "--", path.join(victim, "none")] }, { allowError: true })).isError, undefined, "other rm calls run");
});

await test("allow_list_refuses_shell_metacharacters", async () => {
  const dir = fs.mkdtempSync(path.join(tmp, "meta-"));
  const A = await connect({ args: ["--embedded", "--allow", "printf *", "--allow", "npm test*"], cwd: dir });
  const p = path.join(dir, "pwned");
  for (const [cmd, shown] of [
    [`printf x; touch ${p}`, "';'"], [`npm test; touch ${p}`, "';'"], [`printf x | sh`, "'|'"], [`printf x && touch ${p}`, "'&'"],
    [`printf $(touch ${p})`, "'$'"], ["printf `touch " + p + "`", "'`'"], [`printf x > ${p}`, "'>'"], [`printf x < /etc/passwd`, "'<'"],
    [`printf (x)`, "'('"], [`printf x\ntouch ${p}`, "a newline"], [`printf "$HOME"`, "'$'"],
  ]) {
    const r = await call(A, "run_command", { command: cmd }, { allowError: true });
    assert(r.isError && r.content[0].text.includes(`may not hold ${shown}`), `${JSON.stringify(cmd)}: ${JSON.stringify(r.content)}`);
  }
  assert(!fs.existsSync(p), "nothing ran");
  eq((await call(A, "run_command", { command: "printf 'hello world'" })).stdout, "hello world", "a legit allowed command runs");
  eq((await call(A, "run_command", { command: "printf", args: ["a;b|c$d"] })).stdout, "a;b|c$d", "the args form has no shell: metacharacters are plain bytes");
});

// ---- a tool call too large for the proctor socket fails alone --------------------------------------

await test("oversized_input_fails_alone", async () => {
  const before = await call(E, "run_command", { command: "echo before" });
  const s = await call(E, "start_command", { command: "wc -c" });
  const big = await call(E, "send_input", { id: s.id, data: "x".repeat(5 * 1024 * 1024) }, { allowError: true });
  assert(big.isError && /ETOOBIG: the input request is \d+ bytes; the proctor socket takes at most 4194304 bytes/.test(big.content[0].text),
    `a clear error: ${big.content?.[0]?.text}`);
  const ok = await call(E, "send_input", { id: s.id, data: "hello\n", eof: true });
  eq(ok.bytes, 6, "a later input on the same session works");
  eq((await call(E, "wait_for_command", { id: s.id, timeout_ms: 30000 })).stdout.trim(), "6", "only the later input reached it");
  eq((await call(E, "command_status", { id: before.id })).state, "completed", "the earlier execution is still found");
  const many = await call(E, "run_command", { command: "true", args: Array(70000).fill("a") }, { allowError: true });
  assert(many.isError && /ETOOBIG: the start request has more than 65536/.test(many.content[0].text), `too many entries: ${many.content?.[0]?.text}`);
  eq((await call(E, "command_status", { id: s.id })).state, "completed", "still the same session");
});

// ---- stdout full: SIGTERM and stdin EOF still end proctor-mcp ------------------------------------

// A raw client that starts a command, then stops reading stdout while asking
// for large answers; `stop(child)` ends it (SIGTERM, or closing stdin: EOF).
async function stuckClient(stop) {
  const dir = fs.mkdtempSync(path.join(tmp, "stuck-"));
  const child = spawn(MCP, ["--embedded"], { env: baseEnv(), cwd: dir, stdio: ["pipe", "pipe", "pipe"] });
  cleanups.push(() => { try { child.kill("SIGKILL"); } catch {} });
  let stderr = "";
  let stderrEnded = false;
  child.stderr.on("data", (d) => { stderr += d; });
  child.stderr.on("end", () => { stderrEnded = true; });
  child.stdin.on("error", () => {}); // EPIPE once it exited
  const answered = new Set();
  let buf = "";
  const onData = (d) => {
    buf += d;
    for (let i; (i = buf.indexOf("\n")) >= 0; buf = buf.slice(i + 1)) {
      try { const m = JSON.parse(buf.slice(0, i)); if (m.id != null) answered.add(m.id); } catch {}
    }
  };
  child.stdout.on("data", onData);
  const send = (m) => child.stdin.write(JSON.stringify({ jsonrpc: "2.0", ...m }) + "\n");
  send({ id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "stuck", version: "0" } } });
  send({ method: "notifications/initialized" });
  const pidFile = path.join(dir, "pid");
  send({ id: 2, method: "tools/call", params: { name: "start_command", arguments: { command: `echo $$ > ${pidFile}.tmp; mv ${pidFile}.tmp ${pidFile}; exec sleep 300` } } });
  await until("start answered", () => answered.has(2));
  const pid = await until("the command runs", () => fs.existsSync(pidFile) && Number(fs.readFileSync(pidFile, "utf8")));
  // Stop reading, then ask for far more than the sockets hold (tools/list answers 14 KiB).
  child.stdout.removeListener("data", onData);
  child.stdout.pause();
  for (let i = 0; i < 20000; i++) send({ id: 100 + i, method: "tools/list" });
  // Its stdout is full once it stops reading its stdin while requests still wait there
  // (rchar: the bytes it read; a writev in flight keeps writableLength still, so it is no sign).
  let last = "", same = 0;
  await until("proctor-mcp's stdout is full", () => {
    const rchar = fs.readFileSync(`/proc/${child.pid}/io`, "utf8").match(/rchar: (\d+)/)[1];
    same = rchar === last && child.stdin.writableLength > 0 ? same + 1 : 0;
    last = rchar;
    return same >= 10;
  }, 60000, 100);
  const t0 = performance.now();
  stop(child);
  // The bound is generous (grace 2 s + 1 s on a loaded machine); before the fix it never exited.
  await until("proctor-mcp exited", () => child.exitCode !== null || child.signalCode !== null, 20000);
  const ms = performance.now() - t0;
  await until("its execution is gone", () => !alive(pid), 10000);
  await until("its stderr is read", () => stderrEnded, 10000);
  child.stdout.destroy();
  return { stderr, status: child.exitCode, ms };
}

await test("sigterm_ends_it_while_stdout_is_full", async () => {
  const r = await stuckClient((child) => child.kill("SIGTERM"));
  console.log(`# stdout full: SIGTERM to exit ${r.ms.toFixed(0)} ms (a running execution canceled)`);
  assert(/stdout is full and a stop signal came/.test(r.stderr), `says why: ${JSON.stringify(r.stderr)}`);
});

await test("stdin_eof_ends_it_while_stdout_is_full", async () => {
  const r = await stuckClient((child) => child.stdin.destroy()); // end() would wait for the unsent requests
  console.log(`# stdout full: stdin EOF to exit ${r.ms.toFixed(0)} ms (1 s for room, then a running execution canceled)`);
  assert(/stdout is full and stdin reached its end/.test(r.stderr), `says why: ${JSON.stringify(r.stderr)}`);
});

await test("latency", async () => {
  const st = [];
  for (let i = 0; i < 100; i++) {
    const t = performance.now();
    const l = await call(E, "list_commands", { limit: 5 });
    st.push(performance.now() - t);
    assert(l.executions.length === 5 && l.total > 5, "list limit");
  }
  const runs = [];
  for (let i = 0; i < 30; i++) {
    const t = performance.now();
    const r = await call(E, "run_command", { command: "true" });
    runs.push(performance.now() - t);
    eq([r.state, r.exit_code], ["completed", 0], "run true");
  }
  console.log(`# latency: list p50 ${pct(st, 0.5).toFixed(2)} ms p95 ${pct(st, 0.95).toFixed(2)} ms; run true p50 ${pct(runs, 0.5).toFixed(2)} ms p95 ${pct(runs, 0.95).toFixed(2)} ms`);
});

// ---- socket mode: a headless Neovim running proctor ---------------------------------------------

function startNvim(setup = "") {
  const run = fs.mkdtempSync(path.join(tmp, "nvrun-"));
  const listen = path.join(run, "nvim.sock");
  const env = { ...baseEnv(), XDG_RUNTIME_DIR: run };
  const lua = `${setup} local e = require("proctor.engine"); assert(e.get()); vim.fn.writefile({ e.current():address() }, "${run}/address")`;
  const child = spawn(nvimForThisTest(), ["--headless", "-u", "NONE", "-i", "NONE", "-n", "--listen", listen,
    "-c", `set rtp^=${ROOT}`, "-c", `lua ${lua}`], { env, stdio: "ignore" });
  cleanups.push(() => { try { child.kill("SIGKILL"); } catch {} });
  const nv = {
    run, env, child, listen,
    expr(luaExpr) {
      // Neovim 0.7 prints the value on stderr, later versions on stdout.
      const r = spawnSync(NVIM, ["--server", listen, "--remote-expr", `luaeval("vim.fn.json_encode(${luaExpr.replace(/"/g, '\\"')})")`],
        { env, timeout: 20000 });
      const out = (r.stdout.toString() + r.stderr.toString()).trim();
      try { return JSON.parse(out); } catch { throw new Error(`--remote-expr answered: ${out}`); }
    },
  };
  return nv;
}

await editorTest("socket_mode_executions_live_in_the_editor", async () => {
  const nv = startNvim();
  const addrFile = path.join(nv.run, "address");
  // (writefile() is not atomic: wait for the address itself, not the file)
  await until("Neovim's proctor socket", () => fs.existsSync(addrFile) && fs.readFileSync(addrFile, "utf8").trim(), 30000);
  const sock = fs.readFileSync(addrFile, "utf8").trim();
  eq(path.dirname(sock), path.join(nv.run, "proctor"), "the editor's socket is in XDG_RUNTIME_DIR/proctor");
  // The editor is the Neovim named by $NVIM (tests/run runs the tier on each).
  const [major, minor, patch] = nv.expr(`{ vim.version().major, vim.version().minor, vim.version().patch }`);
  const named = execFileSync(NVIM, ["--version"]).toString().split("\n")[0];
  assert(named.startsWith(`NVIM v${major}.${minor}.${patch}`), `the editor runs ${major}.${minor}.${patch}, $NVIM is ${named}`);
  console.log(`# socket mode: the editor is ${named} (${NVIM})`);
  // Discovery: no PROCTOR_SOCKET, the same XDG_RUNTIME_DIR.
  const S = await connect({ args: [], env: { ...nv.env }, name: "socket-client" });
  const r = await call(S, "run_command", { command: "echo from-mcp", label: "mcp-run" });
  eq([r.state, r.stdout, r.owner, r.mode], ["completed", "from-mcp\n", "socket-client", "editor"], "ran, in the editor");
  assert(/connected to .*proctor\/\d+\.sock/.test(S.stderr()), `discovered the editor's socket: ${S.stderr()}`);
  const listed = nv.expr(`vim.tbl_map(function(r) return { id = r.id, owner = r.owner, label = r.label, state = r.state } end, require('proctor').list())`);
  const mine = listed.find((x) => x.id === r.id);
  assert(mine, `execution ${r.id} is in the editor's list: ${JSON.stringify(listed)}`);
  eq([mine.owner, mine.label, mine.state], ["socket-client", "mcp-run", "completed"], "owned by the client's name");
  // The user can open its console in the editor.
  const buf = nv.expr(`(function() local b = require('proctor').open(${r.id}, { open = 'none' }); return vim.api.nvim_buf_get_name(b) end)()`);
  assert(/proctor:\/\/\d+/.test(buf), `console buffer ${buf}`);
  // The editor can stop what the agent started; the agent sees it.
  const s = await call(S, "start_command", { command: "sleep 300" });
  await until("running", async () => (await call(S, "command_status", { id: s.id })).state === "running");
  eq(nv.expr(`require('proctor').cancel(${s.id})`), "canceling", "editor cancels");
  const w = await call(S, "wait_for_command", { id: s.id, timeout_ms: 30000 });
  eq(w.state, "canceled", "the agent sees the user's cancel");
  // :Proctor mcp shows this editor's socket and the binary in every snippet.
  const lines = nv.expr(`require('proctor.commands').exec({ 'mcp' })`);
  const text = lines.join("\n");
  assert(text.includes(sock) && text.includes(`claude mcp add proctor -- ${INSTALLED}`) && text.includes("[mcp_servers.proctor]")
    && text.includes('"type": "local"'), `:Proctor mcp snippets: ${text}`);
  // PROCTOR_SOCKET names it explicitly too.
  const X = await connect({ args: [], env: { ...baseEnv(), PROCTOR_SOCKET: sock }, name: "explicit" });
  eq((await call(X, "run_command", { command: "echo x" })).owner, "explicit", "PROCTOR_SOCKET");
  // The editor exits: the next call fails clearly.
  nv.child.kill("SIGTERM");
  await until("Neovim exited", () => nv.child.exitCode !== null || nv.child.signalCode !== null, 20000);
  const gone = await until("a clear error", async () => {
    const g = await call(X, "command_status", { id: s.id }, { allowError: true });
    return g.isError && g;
  }, 10000);
  assert(/proctor|ENOENT|socket/.test(gone.content[0].text), `after the editor exited: ${gone.content[0].text}`);
});

await editorTest("reconnect_keeps_control_of_the_runs", async () => {
  const nv = startNvim();
  const addrFile = path.join(nv.run, "address");
  await until("Neovim's proctor socket", () => fs.existsSync(addrFile) && fs.readFileSync(addrFile, "utf8").trim(), 30000);
  // An agent starts a dev server, then its client restarts (a new proctor-mcp).
  const A = await connect({ args: [], env: { ...nv.env }, name: "agent-x" });
  const s = await call(A, "start_command", { command: "sleep 300" });
  await until("running", async () => (await call(A, "command_status", { id: s.id })).state === "running");
  await A.client.close();
  const B = await connect({ args: [], env: { ...nv.env }, name: "agent-x" });
  eq([(await call(B, "command_status", { id: s.id })).state, (await call(B, "list_commands", {})).executions.map((x) => x.id)],
    ["running", [s.id]], "the same client name in the same directory sees its run after the reconnect");
  // Another agent gets EPERM naming the owner, not ENOENT.
  const O = await connect({ args: [], env: { ...nv.env }, name: "other-agent" });
  for (const [tool, args] of [["command_status", { id: s.id }], ["cancel_command", { id: s.id }], ["read_output", { id: s.id }], ["wait_for_command", { id: s.id, timeout_ms: 10 }]]) {
    const r = await call(O, tool, args, { allowError: true });
    assert(r.isError && r.content[0].text.includes(`EPERM: execution ${s.id} belongs to another agent (owner agent-x)`),
      `${tool} by another agent: ${r.content[0].text}`);
  }
  eq((await call(O, "list_commands", {})).executions.length, 0, "another agent lists none of it");
  // --session names the identity whatever the client's name.
  const D = await connect({ args: ["--session", "proj-1"], env: { ...nv.env }, name: "client-d" });
  const d = await call(D, "start_command", { command: "sleep 300" });
  const E = await connect({ args: ["--session", "proj-1"], env: { ...nv.env }, name: "client-e" });
  eq((await call(E, "cancel_command", { id: d.id })).result, "canceling", "the same --session controls it");
  eq((await call(B, "cancel_command", { id: s.id })).result, "canceling", "the reconnected agent stops its run");
  eq((await call(B, "wait_for_command", { id: s.id, timeout_ms: 30000 })).state, "canceled", "and sees it end");
  nv.child.kill("SIGTERM");
});

await editorTest("discovery_finds_the_editor_with_the_sdk_default_environment", async () => {
  // The editor keeps its socket under its XDG_RUNTIME_DIR, a login's
  // /run/user/<uid>; it starts its engine at start-up (rpc.start) and nothing
  // else. The agent's MCP client passes only the SDK's default environment (no
  // XDG_RUNTIME_DIR); PROCTOR_DISCOVER_ROOT moves the fixed places under a
  // private "/" (the real ones are shared by every editor on the machine).
  const root = fs.mkdtempSync(path.join(tmp, "root-"));
  const uid = process.getuid();
  const xdg = path.join(root, "run/user", String(uid));
  fs.mkdirSync(xdg, { recursive: true, mode: 0o700 });
  fs.chmodSync(xdg, 0o700);
  const listen = path.join(root, "nvim.sock");
  const env = { ...baseEnv(), XDG_RUNTIME_DIR: xdg, XDG_STATE_HOME: path.join(root, "state") };
  const lua = `_G.notes = {}; vim.notify = function(m) table.insert(_G.notes, m) end; `
    + `require("proctor").setup({ rpc = { start = "startup" } })`;
  const child = spawn(nvimForThisTest(), ["--headless", "-u", "NONE", "-i", "NONE", "-n", "--listen", listen,
    "-c", `set rtp^=${ROOT}`, "-c", `lua ${lua}`], { env, stdio: "ignore" });
  cleanups.push(() => { try { child.kill("SIGKILL"); } catch {} });
  const sock = path.join(xdg, "proctor", `${child.pid}.sock`);
  await until("the editor's socket, made at start-up", () => fs.existsSync(sock), 30000);
  const expr = (e) => {
    const r = spawnSync(NVIM, ["--server", listen, "--remote-expr", `luaeval("vim.fn.json_encode(${e.replace(/"/g, '\\"')})")`],
      { env, timeout: 20000 });
    return JSON.parse((r.stdout.toString() + r.stderr.toString()).trim());
  };
  const transport = new StdioClientTransport({ command: MCP, args: [], env: { PROCTOR_DISCOVER_ROOT: root }, cwd: tmp, stderr: "pipe" });
  let stderr = "";
  transport.stderr.on("data", (d) => { stderr += d; });
  const client = new Client({ name: "default-env-agent", version: "1.0.0" }, { capabilities: {} });
  await client.connect(transport);
  cleanups.push(() => client.close().catch(() => {}));
  const r = await client.callTool({ name: "run_command", arguments: { command: "echo found" } });
  eq([r.structuredContent.mode, r.structuredContent.stdout], ["editor", "found\n"], `ran in the editor (stderr: ${stderr})`);
  const r2 = await client.callTool({ name: "run_command", arguments: { command: "echo again" } });
  const ids = expr(`vim.tbl_map(function(x) return x.id end, require('proctor').list())`);
  assert(ids.includes(r.structuredContent.id) && ids.includes(r2.structuredContent.id), `both runs are in the editor's list: ${JSON.stringify(ids)}`);
  // The first run of an agent is told once; the second is quiet.
  const notes = await until("the notification", () => {
    const n = expr(`_G.notes`);
    return n.length > 0 && n;
  }, 20000);
  await sleep(300);
  const all = expr(`_G.notes`).filter((m) => /default-env-agent/.test(m));
  eq(all.length, 1, `one notification for the agent: ${JSON.stringify(expr("_G.notes"))}`);
  assert(/default-env-agent started #\d+ in this editor: .*echo found/.test(all[0]), `the notification: ${all[0]} (all: ${JSON.stringify(notes)})`);
  await client.close();
  child.kill("SIGTERM");
});

await test("examples_mcp_json_entries_work", async () => {
  const ex = JSON.parse(fs.readFileSync(path.join(ROOT, "examples/mcp.json"), "utf8"));
  const proj = fs.mkdtempSync(path.join(tmp, "proj-"));
  for (const [name, entry] of Object.entries(ex.mcpServers)) {
    assert(entry.command.endsWith("lua/proctor/proctor-mcp"), `${name}: command`);
    const args = entry.args.map((a) => (a === "/path/to/project" ? proj : a));
    const X = await connect({ args: [...args, "--no-discover"], env: baseEnv(entry.env), cwd: proj, name });
    const r = await call(X, "run_command", { command: "echo ok; echo \"$GITHUB_TOKEN\"" });
    eq(r.stdout.split("\n")[0], "ok", `${name} runs a command`);
    if (entry.env.GITHUB_TOKEN) eq(r.stdout, "ok\n***\n", `${name} masks the secret`);
  }
});

await editorTest("targets_only_where_the_operator_allows", async () => {
  // A `command` target of the editor (the relay under a plain command, as podman or kubectl
  // exec would start it; the ssh transport itself is the target tier's).
  const far = fs.mkdtempSync(path.join(tmp, "far-"));
  const relay = path.join(ROOT, "lua/proctor/proctor-shepherd");
  const nv = startNvim(`require("proctor").setup({ targets = { far = { command = { "${relay}", "--relay" }, cwd = "${far}" } } });`);
  const addrFile = path.join(nv.run, "address");
  await until("Neovim's proctor socket", () => fs.existsSync(addrFile) && fs.readFileSync(addrFile, "utf8").trim(), 30000);
  const D = await connect({ args: [], env: { ...nv.env }, name: "no-target-agent" });
  const no = await call(D, "run_command", { command: "echo x", target: "far" }, { allowError: true });
  assert(no.isError && /allows no target \(--allow-target\)/.test(no.content[0].text), `by default: ${no.content[0].text}`);
  const A = await connect({ args: ["--allow-target", "far"], env: { ...nv.env }, name: "target-agent" });
  const r = await call(A, "run_command", { command: "pwd; echo on-far", target: "far" });
  eq([r.state, r.stdout, r.cwd], ["completed", `${far}\non-far\n`, far], "ran on the allowed target, in its cwd");
  const t = nv.expr(`require('proctor.engine').current():get(${r.id}).target`);
  eq(t, "far", "the editor's record names the target");
  const other = await call(A, "run_command", { command: "true", target: "elsewhere" }, { allowError: true });
  assert(other.isError && /allows other targets/.test(other.content[0].text), `another target: ${other.content[0].text}`);
  const rel = await call(A, "run_command", { command: "true", target: "far", cwd: "/tmp/../etc" }, { allowError: true });
  assert(rel.isError && /absolute path without \.\./.test(rel.content[0].text), `cwd with ..: ${rel.content[0].text}`);
  // Allowed here but not configured by the editor: the engine refuses it.
  const B = await connect({ args: ["--allow-target", "nowhere"], env: { ...nv.env }, name: "target-agent-2" });
  const un = await call(B, "run_command", { command: "true", target: "nowhere" }, { allowError: true });
  assert(un.isError && /unknown target/.test(un.content[0].text), `not configured: ${un.content[0].text}`);
  nv.child.kill("SIGTERM");
});

await test("unsafe_sockets_are_refused", async () => {
  const dir = fs.mkdtempSync(path.join(tmp, "open-"));
  fs.chmodSync(dir, 0o755);
  const p = path.join(dir, "x.sock");
  const srv = net.createServer(() => {});
  await new Promise((res) => srv.listen(p, res));
  cleanups.push(() => srv.close());
  fs.chmodSync(p, 0o666);
  const U = await connect({ args: ["--socket", p], env: baseEnv() });
  const r = await call(U, "run_command", { command: "true" }, { allowError: true });
  assert(r.isError && /refused/.test(r.content[0].text), `refused: ${r.content[0].text}`);
});

// Last: its 30 s wait began at the top of the file and ran beside every other test.
await test(DEFAULT_WAIT_TEST, async () => {
  assert(DEFAULT_REQUEST_TIMEOUT_MSEC >= 60000, `the SDK's default request timeout: ${DEFAULT_REQUEST_TIMEOUT_MSEC}`);
  // No wait_ms and no request options: the SDK would give up (and cancel the run, killing
  // the command) after its default timeout; the run answers first, the command still running.
  const { W, dir, r } = await defaultWaitRun;
  assert(!r.isError, `run answered: ${JSON.stringify(r.content)}`);
  const x = r.structuredContent;
  eq([x.running, x.state, x.stdout], [true, "running", "up\n"], "still running, with the tail so far");
  assert(x.next.includes(`wait_for_command {id: ${x.id}}`), `says how to go on: ${x.next}`);
  eq((await call(W, "command_status", { id: x.id })).running, true, "the command keeps running");
  fs.writeFileSync(path.join(dir, "go"), "");
  eq((await call(W, "wait_for_command", { id: x.id })).exit_code, 0, "and ends when told to");
}, 120000);

for (const c of cleanups.reverse()) await c();
fs.rmSync(tmp, { recursive: true, force: true });
process.exit(failed ? 1 : 0);
