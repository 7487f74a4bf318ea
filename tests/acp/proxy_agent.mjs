// tests/acp/proxy_agent.mjs — an agent written with the official ACP SDK's
// agent side that NEEDS terminals: it refuses to run when the client does not
// advertise them. It runs behind proctor-acp (started by tests/acp/test_proxy.mjs
// as `proctor-acp --embedded -- node proxy_agent.mjs`), so the terminals it
// asks for are proctor executions served by the proxy.
//
// Each session/prompt names a scenario in its text; the agent runs it and
// reports "PASS <name>" / "FAIL <name>: why" lines as agent_message_chunk
// updates (and "PID <n>" lines the client needs). Every terminal answer is
// validated against the SDK's own JSON Schema.
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
const RESPONSE = {
  "terminal/create": "CreateTerminalResponse",
  "terminal/output": "TerminalOutputResponse",
  "terminal/wait_for_exit": "WaitForTerminalExitResponse",
  "terminal/kill": "KillTerminalResponse",
  "terminal/release": "ReleaseTerminalResponse",
};
function validate(method, value) {
  const v = ajv.getSchema(`acp#/$defs/${RESPONSE[method]}`);
  if (!v(value)) throw new Error(`${method} answer ${JSON.stringify(value)} fails ${RESPONSE[method]}: ${ajv.errorsText(v.errors)}`);
  return value;
}

const tmp = fs.mkdtempSync(path.join(process.env.ACP_TMP || os.tmpdir(), "agent-"));
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
const cwdOf = {}; // sessionId -> the cwd of session/new
const terminalsOf = {}; // sessionId -> a terminal kept for the scope check

const scenarios = {
  async needs_terminals() {
    eq(clientCaps && clientCaps.terminal, true, "clientCapabilities.terminal seen by the agent");
  },

  async create_output_wait_release({ client, sessionId, req }) {
    const h = await client.createTerminal({ sessionId, command: "sleep 1; echo done", outputByteLimit: 4096 });
    assert(/^\d+$/.test(h.id), `terminalId is the execution id: ${h.id}`);
    const running = validate("terminal/output", await h.currentOutput());
    assert(running.exitStatus == null, "no exitStatus while running");
    eq(validate("terminal/wait_for_exit", await h.waitForExit()), { exitCode: 0 }, "exit");
    const out = validate("terminal/output", await h.currentOutput());
    eq([out.output, out.truncated, out.exitStatus], ["done\n", false, { exitCode: 0 }], "output after exit");
    eq(validate("terminal/release", await h.release()), {}, "release");
    const e = await req("terminal/output", { terminalId: h.id }).then(() => null, (x) => x);
    assert(e && e.code === -32002 && /released/.test(e.message), `after release: ${e && e.code} ${e && e.message}`);
  },

  async env_cwd_pager({ req }) {
    const dir = fs.mkdtempSync(path.join(tmp, "cwd-"));
    const { terminalId } = await req("terminal/create", {
      command: "sh", args: ["-c", "pwd; printf '%s|%s|%s\\n' \"$FOO\" \"$PAGER\" \"$GIT_PAGER\""], cwd: dir,
      env: [{ name: "FOO", value: "foo é" }, { name: "PAGER", value: "more" }],
    });
    eq(await req("terminal/wait_for_exit", { terminalId }), { exitCode: 0 }, "exit");
    eq((await req("terminal/output", { terminalId })).output, `${fs.realpathSync(dir)}\nfoo é|more|cat\n`, "cwd, env, pagers");
    await req("terminal/release", { terminalId });
  },

  async default_cwd_is_the_sessions({ req, sessionId }) {
    const t = await req("terminal/create", { command: "pwd" });
    await req("terminal/wait_for_exit", t);
    eq((await req("terminal/output", t)).output, `${fs.realpathSync(cwdOf[sessionId])}\n`, "cwd");
    await req("terminal/release", t);
  },

  async exit_codes_and_signals({ req }) {
    const a = await req("terminal/create", { command: "exit 3" });
    eq(await req("terminal/wait_for_exit", a), { exitCode: 3 }, "exit 3");
    const b = await req("terminal/create", { command: "kill -KILL $$" });
    const w = await req("terminal/wait_for_exit", b);
    eq([w.exitCode ?? null, w.signal], [null, "SIGKILL"], "a signal");
    const c = await req("terminal/create", { command: "/nonexistent/program", args: ["x"] });
    eq((await req("terminal/wait_for_exit", c)).exitCode, 127, "a command that cannot start");
    assert(/nonexistent/.test((await req("terminal/output", c)).output), "the output says why");
    for (const x of [a, b, c]) await req("terminal/release", x);
  },

  async kill_tree_no_survivors({ req }) {
    const pids = path.join(tmp, "tree.pids");
    const { terminalId } = await req("terminal/create", {
      command: `trap '' TERM HUP INT; (trap '' TERM HUP INT; sleep 300) & sh -c "trap '' TERM HUP INT; sleep 300" & echo $$ $! > ${pids}.tmp; mv ${pids}.tmp ${pids}; echo tree up; wait`,
    });
    await until("the tree", () => fs.existsSync(pids));
    const all = fs.readFileSync(pids, "utf8").trim().split(/\s+/).map(Number);
    await until("its output", async () => (await req("terminal/output", { terminalId })).output.includes("tree up"));
    const waiting = req("terminal/wait_for_exit", { terminalId });
    eq(await req("terminal/kill", { terminalId }), {}, "kill answers {}");
    eq((await waiting).signal, "SIGKILL", "the TERM-ignoring leader ended by SIGKILL after the grace");
    await until("nothing of the tree survives", () => all.every((p) => !alive(p)) && !groupAlive(all[0]), 10000);
    const out = await req("terminal/output", { terminalId });
    assert(out.output.includes("tree up") && out.exitStatus.signal === "SIGKILL", "readable after kill");
    await req("terminal/release", { terminalId });
  },

  async release_running({ req }) {
    const pidFile = path.join(tmp, "rel.pid");
    const { terminalId } = await req("terminal/create", { command: `echo $$ > ${pidFile}; exec sleep 300` });
    const pid = Number(await until("pid", () => fs.existsSync(pidFile) && fs.readFileSync(pidFile, "utf8").trim()));
    const waiting = req("terminal/wait_for_exit", { terminalId });
    eq(await req("terminal/release", { terminalId }), {}, "release answers {}");
    await until("the released command is gone", () => !alive(pid), 10000);
    const w = await waiting;
    assert(w.signal || w.exitCode != null, `a parked wait is answered: ${JSON.stringify(w)}`);
  },

  async output_byte_limit({ req }) {
    const a = await req("terminal/create", { command: "printf", args: ["%s\\n", "é".repeat(100)], outputByteLimit: 50 });
    await req("terminal/wait_for_exit", a);
    const o = await req("terminal/output", a);
    eq([o.output, o.truncated], ["é".repeat(24) + "\n", true], "cut from the start at a character boundary");
    const b = await req("terminal/create", { command: "yes 'αβγ δ' | head -c 3000000", outputByteLimit: 1000 });
    await req("terminal/wait_for_exit", b);
    const ob = await req("terminal/output", b);
    const n = Buffer.byteLength(ob.output);
    assert(n <= 1000 && n > 980 && ob.truncated && !ob.output.includes("\uFFFD"), `3 MB under 1000: ${n} bytes`);
    // 9,000 visible bytes in ~89 KB of colour escapes: the limit is on the text
    const script = "let s='';for(let l=0;l<100;l++){for(let c=0;c<89;c++)s+=`\\x1b[3${c%8}m${String.fromCharCode(97+c%26)}\\x1b[0m`;s+='\\n'}process.stdout.write(s)";
    const c = await req("terminal/create", { command: process.execPath, args: ["-e", script], outputByteLimit: 10000 });
    eq(await req("terminal/wait_for_exit", c), { exitCode: 0 }, "exit");
    const oc = await req("terminal/output", c);
    const line = Array.from({ length: 89 }, (_, i) => String.fromCharCode(97 + (i % 26))).join("");
    eq([oc.output, oc.truncated], [(line + "\n").repeat(100), false], "the text, whole");
    for (const x of [a, b, c]) await req("terminal/release", x);
  },

  async bad_params({ req }) {
    const code = (p) => p.then(() => "ok", (e) => e.code);
    eq(await code(req("terminal/create", { command: "true", cwd: "relative" })), -32602, "relative cwd");
    eq(await code(req("terminal/create", { command: "" })), -32602, "empty command");
    eq(await code(req("terminal/output", { terminalId: "999999" })), -32002, "unknown terminal");
  },

  async terminal_block_as_text({ client, sessionId, req }) {
    const { terminalId } = await req("terminal/create", { command: "echo shown; sleep 30" });
    terminalsOf[sessionId] = terminalId;
    await client.notify("session/update", {
      sessionId,
      update: { sessionUpdate: "tool_call", toolCallId: "t1", title: "run", kind: "execute", status: "in_progress", content: [{ type: "terminal", terminalId }] },
    });
  },

  async ids_scoped_per_session({ req, sessionId }) {
    const other = Object.keys(terminalsOf).find((s) => s !== sessionId);
    assert(other, "another session kept a terminal");
    const e = await req("terminal/output", { terminalId: terminalsOf[other] }).then(() => null, (x) => x);
    assert(e && e.code === -32002, `another session's terminal is not found: ${e && e.code}`);
  },

  async flood({ client, sessionId, req }) {
    // 10,000 updates of 1 KiB toward the client, and 200 terminal requests at once
    const text = "x".repeat(1000);
    const sends = [];
    for (let i = 0; i < 10000; i++)
      sends.push(client.notify("session/update", { sessionId, update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: `FLOOD${i} ${text}` } } }));
    const { terminalId } = await req("terminal/create", { command: "echo flood" });
    await req("terminal/wait_for_exit", { terminalId });
    const outs = await Promise.all(Array.from({ length: 200 }, () => req("terminal/output", { terminalId })));
    assert(outs.every((o) => o.output === "flood\n"), "200 answers, each right");
    await Promise.all(sends);
  },

  async agent_exits_mid_run({ client, sessionId, say }) {
    const pidFile = path.join(tmp, "mid.pid");
    await client.request("terminal/create", { sessionId, command: `echo $$ > ${pidFile}; exec sleep 300` });
    const pid = await until("pid", () => fs.existsSync(pidFile) && fs.readFileSync(pidFile, "utf8").trim());
    await say(`PID ${pid}`);
    await sleep(100);
    process.exit(3); // the prompt is never answered by us
  },

  async client_exits_mid_run({ client, sessionId, say }) {
    const pidFile = path.join(tmp, "cmid.pid");
    await client.request("terminal/create", { sessionId, command: `echo $$ > ${pidFile}; exec sleep 300` });
    const pid = await until("pid", () => fs.existsSync(pidFile) && fs.readFileSync(pidFile, "utf8").trim());
    await say(`PID ${pid}`);
    await new Promise(() => {}); // until the client goes
  },
};

const app = acp.agent({ name: "acp-proxy-test-agent" })
  .onRequest(acp.methods.agent.initialize, async (ctx) => {
    clientCaps = ctx.params.clientCapabilities;
    return { protocolVersion: acp.PROTOCOL_VERSION, agentCapabilities: {}, authMethods: [], agentInfo: { name: "acp-proxy-test-agent", version: "1.0.0" } };
  })
  .onRequest(acp.methods.agent.session.new, async (ctx) => {
    const sessionId = `s-${Math.random().toString(36).slice(2)}`;
    cwdOf[sessionId] = ctx.params.cwd;
    return { sessionId };
  })
  .onRequest(acp.methods.agent.session.setMode, async () => ({}))
  .onRequest(acp.methods.agent.session.prompt, async (ctx) => {
    const sessionId = ctx.params.sessionId;
    const name = ctx.params.prompt.map((b) => b.text || "").join("").trim();
    const client = ctx.client;
    const say = (text) => client.notify("session/update", { sessionId, update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: text + "\n" } } });
    const req = async (method, params) => validate(method, await client.request(method, { sessionId, ...params }));
    if (!clientCaps || clientCaps.terminal !== true) {
      await say(`FAIL ${name}: this agent needs terminals and the client has none`);
      return { stopReason: "refusal" };
    }
    try {
      await scenarios[name]({ client, sessionId, req, say });
      await say(`PASS ${name}`);
    } catch (e) {
      await say(`FAIL ${name}: ${String((e && e.message) || e).split("\n")[0]}`);
    }
    return { stopReason: "end_turn" };
  });

const conn = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
await conn.closed;
fs.rmSync(tmp, { recursive: true, force: true });
