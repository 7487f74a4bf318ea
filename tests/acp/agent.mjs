// tests/acp/agent.mjs — a test agent written with the official ACP SDK's agent
// side (@agentclientprotocol/sdk). It talks ndjson over stdio to the minimal
// Lua ACP client of tests/acp/client.lua (in a headless Neovim that plugs in
// require("proctor.acp")), and exercises the client's terminals.
//
// Every answer of the client is validated against the SDK's own JSON Schema
// (schema/v1/schema.json: CreateTerminalResponse, TerminalOutputResponse, ...).
// Results go back as session/update agent_message_chunk lines "PASS acp/<name>"
// or "FAIL acp/<name>: why", which the client prints. Lines "TYPE <terminalId>
// <text>" and "CANCEL <terminalId>" ask the client to act as the user would in
// the console (type into it, cancel it). $ACP_ONLY (substrings split by "|") runs
// only the tests whose name holds one.
import * as acp from "@agentclientprotocol/sdk";
import Ajv2020 from "ajv/dist/2020.js";
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Readable, Writable } from "node:stream";

const require = createRequire(import.meta.url);
const schema = JSON.parse(fs.readFileSync(require.resolve("@agentclientprotocol/sdk/schema/v1/schema.json"), "utf8"));
const ajv = new Ajv2020({ strict: false, validateFormats: false, allowUnionTypes: true });
ajv.addSchema(schema, "acp");
const validators = {};
const RESPONSE = {
  "terminal/create": "CreateTerminalResponse",
  "terminal/output": "TerminalOutputResponse",
  "terminal/wait_for_exit": "WaitForTerminalExitResponse",
  "terminal/kill": "KillTerminalResponse",
  "terminal/release": "ReleaseTerminalResponse",
};
function validate(method, value) {
  const name = RESPONSE[method];
  validators[name] ??= ajv.getSchema(`acp#/$defs/${name}`);
  const v = validators[name];
  if (!v(value)) throw new Error(`${method} answer ${JSON.stringify(value)} fails ${name}: ${ajv.errorsText(v.errors)}`);
  return value;
}

const ONLY = process.env.ACP_ONLY || ""; // run only the tests whose name holds one of these (a|b)
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "proctor-acp-agent-"));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const alive = (pid) => { try { process.kill(pid, 0); return true; } catch { return false; } };
const groupAlive = (pgid) => { try { process.kill(-pgid, 0); return true; } catch { return false; } };
async function until(what, fn, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}
function assert(c, m) { if (!c) throw new Error(m); }
function eq(a, b, what) { if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${what}: expected ${JSON.stringify(b)}, got ${JSON.stringify(a)}`); }

let clientCaps = null;
let sessionA = null;
let termOfA = null;

async function runTests(ctx, sessionId) {
  const client = ctx.client;
  const say = (text) => client.notify("session/update", {
    sessionId, update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: text + "\n" } },
  });
  // Every request goes through here: the answer is validated by the schema.
  const req = async (method, params) => validate(method, await client.request(method, { sessionId, ...params }));
  // A request expected to fail: returns the JSON-RPC error.
  const reqErr = async (method, params) => {
    try { await client.request(method, { sessionId, ...params }); } catch (e) { return e; }
    throw new Error(`${method} succeeded but should have failed`);
  };
  const t = async (name, fn, timeoutMs = 40000) => {
    if (ONLY && !ONLY.split("|").some((x) => name.includes(x))) return;
    let timer;
    try {
      await Promise.race([fn(), new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs); })]);
      await say(`PASS acp/${name}`);
    } catch (e) {
      await say(`FAIL acp/${name}: ${String(e && e.message || e).split("\n")[0]}`);
    } finally {
      clearTimeout(timer);
    }
  };
  const pidOf = async (file) => Number(await until(`${file}`, () => fs.existsSync(file) && fs.readFileSync(file, "utf8").trim()));

  await t("client_advertises_terminals", async () => eq(clientCaps.terminal, true, "clientCapabilities.terminal"));

  await t("create_answers_at_once_then_output_and_exit_via_sdk_handle", async () => {
    const h = await client.createTerminal({ sessionId, command: "sleep 2; echo done", outputByteLimit: 4096 });
    assert(typeof h.id === "string" && /^\d+$/.test(h.id), `terminalId is the execution id as a string: ${h.id}`);
    // create answered at once: the command is still running afterwards
    const running = validate("terminal/output", await h.currentOutput());
    assert(running.exitStatus == null, "no exitStatus while running");
    const exit = validate("terminal/wait_for_exit", await h.waitForExit());
    eq(exit.exitCode, 0, "exitCode");
    const out = validate("terminal/output", await h.currentOutput());
    eq([out.output, out.truncated, out.exitStatus.exitCode], ["done\n", false, 0], "output after exit");
    validate("terminal/release", await h.release());
  });

  await t("env_and_cwd", async () => {
    const dir = fs.mkdtempSync(path.join(tmp, "cwd-"));
    const { terminalId } = await req("terminal/create", {
      command: "sh", args: ["-c", "pwd; printf '%s|%s\\n' \"$FOO\" \"$BAR\""], cwd: dir,
      env: [{ name: "FOO", value: "foo value" }, { name: "BAR", value: "é" }],
    });
    eq(await req("terminal/wait_for_exit", { terminalId }), { exitCode: 0 }, "exit");
    const out = await req("terminal/output", { terminalId });
    eq(out.output, `${fs.realpathSync(dir)}\nfoo value|é\n`, "cwd and env reached the command");
    await req("terminal/release", { terminalId });
  });

  await t("multibyte_character_at_the_truncation_boundary", async () => {
    // 100 x "é" (2 bytes) + "\n" = 201 bytes; a 50-byte limit starts inside a character.
    const { terminalId } = await req("terminal/create", {
      command: "printf", args: ["%s\\n", "é".repeat(100)], outputByteLimit: 50,
    });
    await req("terminal/wait_for_exit", { terminalId });
    const out = await req("terminal/output", { terminalId });
    assert(Buffer.byteLength(out.output) <= 50, `within the limit: ${Buffer.byteLength(out.output)} bytes`);
    eq(out.output, "é".repeat(24) + "\n", "cut from the beginning at a character boundary");
    eq(out.truncated, true, "truncated");
    await req("terminal/release", { terminalId });
  });

  await t("exit_codes_and_signals", async () => {
    const a = await req("terminal/create", { command: "exit 3" });
    eq(await req("terminal/wait_for_exit", { terminalId: a.terminalId }), { exitCode: 3 }, "exit 3");
    const b = await req("terminal/create", { command: "kill -KILL $$" });
    const w = await req("terminal/wait_for_exit", { terminalId: b.terminalId });
    eq([w.exitCode ?? null, w.signal], [null, "SIGKILL"], "a signal");
    const c = await req("terminal/create", { command: "/nonexistent/program", args: ["x"] });
    const wc = await req("terminal/wait_for_exit", { terminalId: c.terminalId });
    eq(wc.exitCode, 127, "a command that cannot start ends with 127");
    const oc = await req("terminal/output", { terminalId: c.terminalId });
    assert(/nonexistent/.test(oc.output), `the output says why: ${oc.output}`);
    for (const x of [a, b, c]) await req("terminal/release", { terminalId: x.terminalId });
  });

  await t("kill_ends_a_term_ignoring_tree_and_keeps_it_readable", async () => {
    const pids = path.join(tmp, "tree.pids");
    const { terminalId } = await req("terminal/create", {
      command: `trap '' TERM HUP INT; (trap '' TERM HUP INT; sleep 300) & sh -c "trap '' TERM HUP INT; sleep 300" & echo $$ $! > ${pids}.tmp; mv ${pids}.tmp ${pids}; echo tree up; wait`,
    });
    await until("the tree", () => fs.existsSync(pids));
    const all = fs.readFileSync(pids, "utf8").trim().split(/\s+/).map(Number);
    await until("its output", async () => (await req("terminal/output", { terminalId })).output.includes("tree up"));
    const waiting = req("terminal/wait_for_exit", { terminalId }); // parked until it ends
    const k = await req("terminal/kill", { terminalId });
    eq(k, {}, "kill answers {}");
    const w = await waiting;
    eq(w.signal, "SIGKILL", "the TERM-ignoring leader ended by SIGKILL after the grace period");
    await until("nothing of the tree survives", () => all.every((p) => !alive(p)) && !groupAlive(all[0]), 5000);
    const out = await req("terminal/output", { terminalId });
    assert(out.output.includes("tree up") && out.exitStatus && out.exitStatus.signal === "SIGKILL", "still readable after kill");
    await req("terminal/release", { terminalId });
  });

  await t("release_of_a_running_terminal", async () => {
    const pidFile = path.join(tmp, "rel.pid");
    const { terminalId } = await req("terminal/create", { command: `echo $$ > ${pidFile}; exec sleep 300` });
    const pid = await pidOf(pidFile);
    const waiting = req("terminal/wait_for_exit", { terminalId });
    eq(await req("terminal/release", { terminalId }), {}, "release answers {}");
    await until("the released command is gone", () => !alive(pid), 10000);
    const w = await waiting;
    assert(w.signal || w.exitCode != null, `a parked wait is answered: ${JSON.stringify(w)}`);
    for (const m of ["terminal/output", "terminal/wait_for_exit", "terminal/kill", "terminal/release"]) {
      const e = await reqErr(m, { terminalId });
      eq(e.code, -32002, `${m} after release: code`);
      assert(/released/.test(e.message), `${m} after release says so: ${e.message}`);
    }
  });

  await t("user_types_into_and_cancels_the_console", async () => {
    const { terminalId } = await req("terminal/create", { command: "printf 'name? '; read n; echo \"hello $n\"" });
    await until("the prompt", async () => (await req("terminal/output", { terminalId })).output.includes("name?"));
    await say(`TYPE ${terminalId} Ada`);
    eq(await req("terminal/wait_for_exit", { terminalId }), { exitCode: 0 }, "the user's answer ended it");
    assert((await req("terminal/output", { terminalId })).output.includes("hello Ada"), "the agent sees what the user typed");
    const s = await req("terminal/create", { command: "echo waiting; sleep 300" });
    await until("running", async () => (await req("terminal/output", { terminalId: s.terminalId })).output.includes("waiting"));
    await say(`CANCEL ${s.terminalId}`);
    const w = await req("terminal/wait_for_exit", { terminalId: s.terminalId });
    assert(w.signal || w.exitCode != null, `the user's cancel ends it: ${JSON.stringify(w)}`);
    termOfA = s.terminalId; // kept (not released) for the session-scope check
  });

  await t("flood_with_output_byte_limit", async () => {
    const { terminalId } = await req("terminal/create", { command: "yes 'αβγ δ' | head -c 3000000", outputByteLimit: 1000 });
    await req("terminal/wait_for_exit", { terminalId });
    const t0 = performance.now();
    const out = await req("terminal/output", { terminalId });
    const ms = performance.now() - t0;
    assert(Buffer.byteLength(out.output) <= 1000 && Buffer.byteLength(out.output) > 980, `${Buffer.byteLength(out.output)} bytes`);
    assert(!out.output.includes("\uFFFD") && out.truncated, "whole characters, truncated");
    await say(`# acp flood: terminal/output of a 3 MB terminal with outputByteLimit 1000: ${ms.toFixed(1)} ms`);
    await req("terminal/release", { terminalId });
  });

  await t("create_with_8000_args_is_answered", async () => {
    const { terminalId } = await req("terminal/create", { command: "printf", args: ["%s", ...Array(8000).fill("a")] });
    eq(await req("terminal/wait_for_exit", { terminalId }), { exitCode: 0 }, "exit");
    const out = await req("terminal/output", { terminalId });
    eq(out.output.replace(/\n/g, ""), "a".repeat(8000), "all 8,000 args reached the command");
    await req("terminal/release", { terminalId });
  });

  await t("an_internal_error_is_a_32603_answer", async () => {
    // A NUL in cwd passes the checks and makes the editor's API raise inside the handler.
    const e = await reqErr("terminal/create", { command: "true", cwd: "/tmp\u0000x" });
    eq(e.code, -32603, "code");
    assert(/terminal\/create failed/.test(e.message), `says which handler failed: ${e.message}`);
    const { terminalId } = await req("terminal/create", { command: "true" }); // the client still serves
    eq(await req("terminal/wait_for_exit", { terminalId }), { exitCode: 0 }, "a later request");
    await req("terminal/release", { terminalId });
  });

  await t("pager_is_cat_unless_the_agent_says_otherwise", async () => {
    const a = await req("terminal/create", { command: 'echo "[$PAGER|$GIT_PAGER]"' });
    await req("terminal/wait_for_exit", a);
    eq((await req("terminal/output", a)).output, "[cat|cat]\n", "the default");
    const b = await req("terminal/create", { command: 'echo "[$PAGER|$GIT_PAGER]"', env: [{ name: "PAGER", value: "more" }] });
    await req("terminal/wait_for_exit", b);
    eq((await req("terminal/output", b)).output, "[more|cat]\n", "the agent's env wins");
    // git log of more lines than the pty shows: it would wait in less for a key.
    const repo = fs.mkdtempSync(path.join(tmp, "repo-"));
    const git = (...a) => execFileSync("git", ["-C", repo, "-c", "user.name=t", "-c", "user.email=t@example.org", ...a], { env: { ...process.env, PAGER: "less", GIT_PAGER: "less" } });
    git("init", "-q");
    for (let i = 0; i < 40; i++) git("commit", "-q", "--allow-empty", "-m", `commit ${i}`);
    const g = await req("terminal/create", { command: "git", args: ["log"], cwd: repo });
    eq(await req("terminal/wait_for_exit", g), { exitCode: 0 }, "git log ended by itself");
    assert((await req("terminal/output", g)).output.includes("commit 0"), "the whole log is in the output");
    for (const x of [a, b, g]) await req("terminal/release", x);
  }, 30000);

  await t("output_byte_limit_applies_to_the_text", async () => {
    // 9,000 visible bytes (100 lines of 89 characters), each character in its own colour: ~89 KB on the pty.
    const script = "let s='';for(let l=0;l<100;l++){for(let c=0;c<89;c++)s+=`\\x1b[3${c%8}m${String.fromCharCode(97+c%26)}\\x1b[0m`;s+='\\n'}process.stdout.write(s)";
    const { terminalId } = await req("terminal/create", { command: process.execPath, args: ["-e", script], outputByteLimit: 10000 });
    eq(await req("terminal/wait_for_exit", { terminalId }), { exitCode: 0 }, "exit");
    const out = await req("terminal/output", { terminalId });
    const line = Array.from({ length: 89 }, (_, c) => String.fromCharCode(97 + (c % 26))).join("");
    eq([Buffer.byteLength(out.output), out.truncated], [9000, false], "bytes and truncated");
    eq(out.output, (line + "\n").repeat(100), "the text, whole");
    await req("terminal/release", { terminalId });
  });

  await t("bad_params_are_invalid_params", async () => {
    eq((await reqErr("terminal/create", { command: "true", cwd: "relative/dir" })).code, -32602, "relative cwd");
    eq((await reqErr("terminal/create", { command: "" })).code, -32602, "empty command");
    eq((await reqErr("terminal/output", { terminalId: "999999" })).code, -32002, "unknown terminal");
  });
}

async function scopeTests(ctx, sessionId) {
  const say = (text) => ctx.client.notify("session/update", {
    sessionId, update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: text + "\n" } },
  });
  try {
    assert(termOfA, "session A kept a terminal");
    let err;
    try { await ctx.client.request("terminal/output", { sessionId, terminalId: termOfA }); } catch (e) { err = e; }
    assert(err && err.code === -32002, `another session's terminal is not found: ${err && err.code}`);
    validate("terminal/output", await ctx.client.request("terminal/output", { sessionId: sessionA, terminalId: termOfA }));
    await say("PASS acp/ids_are_scoped_per_session");
  } catch (e) {
    await say(`FAIL acp/ids_are_scoped_per_session: ${e.message}`);
  }
}

let sessions = 0;
const app = acp.agent({ name: "acp-test-agent" })
  .onRequest(acp.methods.agent.initialize, async (ctx) => {
    clientCaps = ctx.params.clientCapabilities;
    return { protocolVersion: acp.PROTOCOL_VERSION, agentCapabilities: {}, authMethods: [], agentInfo: { name: "acp-test-agent", version: "1.0.0" } };
  })
  .onRequest(acp.methods.agent.session.new, async () => ({ sessionId: `session-${++sessions}` }))
  .onRequest(acp.methods.agent.session.prompt, async (ctx) => {
    const sid = ctx.params.sessionId;
    if (!sessionA) {
      sessionA = sid;
      await runTests(ctx, sid);
    } else {
      await scopeTests(ctx, sid);
    }
    return { stopReason: "end_turn" };
  });

const conn = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
await conn.closed;
fs.rmSync(tmp, { recursive: true, force: true });
