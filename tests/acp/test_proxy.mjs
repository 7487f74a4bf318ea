// tests/acp/test_proxy.mjs — proctor-acp between two programs written with the
// official ACP SDK: this client (which advertises terminal = false, like
// Neovim's ACP clients) and tests/acp/proxy_agent.mjs (an agent that needs
// terminals). Each run starts `proctor-acp --embedded -- node proxy_agent.mjs`
// ($PROCTOR_ACP, default lua/proctor/proctor-acp under $PROCTOR_ROOT).
//
// Checked here, from the client's side: the agent's scenarios pass (they
// report PASS/FAIL lines), no terminal request ever reaches this client, the
// agent's terminal blocks arrive as text, every request gets exactly one
// answer (counted on the raw lines), a flood both ways, the agent exiting
// mid-run (the prompt is answered with an error, the run is canceled, the
// proxy exits with the agent's status), the client exiting mid-run (the run
// is canceled), and a client that has terminals getting everything untouched.
// Prints "PASS <tier>/<name>" / "FAIL <tier>/<name>: why" ($ACP_TIER, default
// acp-proxy); exits non-zero when anything failed.
import * as acp from "@agentclientprotocol/sdk";
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Readable, Writable } from "node:stream";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = process.env.PROCTOR_ROOT || process.cwd();
const PROXY = process.env.PROCTOR_ACP || path.join(root, "lua/proctor/proctor-acp");
const AGENT = path.join(here, "proxy_agent.mjs");
const TIER = process.env.ACP_TIER || "acp-proxy";
const ONLY = process.env.PROCTOR_TEST || "";
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "proctor-acp-proxy-"));
let failed = 0;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const alive = (pid) => { try { process.kill(pid, 0); return true; } catch { return false; } };
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
function report(name, err) {
  if (err) {
    failed++;
    console.log(`FAIL ${TIER}/${name}: ${String((err && err.message) || err).split("\n")[0]}`);
  } else console.log(`PASS ${TIER}/${name}`);
}
async function t(name, fn, timeoutMs = 90000) {
  if (ONLY && !name.includes(ONLY)) return;
  let timer;
  try {
    await Promise.race([fn(), new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`timed out after ${timeoutMs} ms`)), timeoutMs); })]);
    report(name);
  } catch (e) {
    report(name, e);
  } finally {
    clearTimeout(timer);
  }
}

// One proxy with the agent behind it, and this client connected to it.
function start({ terminal = false, args = ["--embedded"], env = {} } = {}) {
  const child = spawn(PROXY, [...args, "--", process.execPath, AGENT], {
    stdio: ["pipe", "pipe", "inherit"],
    env: { ...process.env, ACP_TMP: tmp, TMPDIR: tmp, ...env },
  });
  const s = { child, lines: {}, updates: [], answers: new Map(), dupes: [], termReqs: [], flood: 0 };
  s.exit = new Promise((r) => child.on("exit", (code, signal) => r({ code, signal })));
  // every answer counted on the raw lines (the SDK would hide a second one)
  let pend = Buffer.alloc(0);
  child.stdout.on("data", (d) => {
    pend = Buffer.concat([pend, d]);
    let i;
    while ((i = pend.indexOf(10)) >= 0) {
      const line = pend.subarray(0, i).toString();
      pend = pend.subarray(i + 1);
      let m;
      try { m = JSON.parse(line); } catch { continue; }
      if (m.id !== undefined && m.method === undefined) {
        const k = JSON.stringify(m.id);
        if (s.answers.has(k)) s.dupes.push(k);
        s.answers.set(k, true);
      }
    }
  });
  let app = acp.client({ name: "proxy-test-client" })
    .onNotification(acp.methods.client.session.update, (ctx) => {
      const u = ctx.params.update;
      s.updates.push(ctx.params);
      if (u.sessionUpdate === "agent_message_chunk" && u.content.type === "text") {
        if (u.content.text.startsWith("FLOOD")) { s.flood++; return; }
        for (const l of u.content.text.split("\n")) if (l) (s.lines[ctx.params.sessionId] ??= []).push(l);
      }
    });
  if (terminal)
    app = app.onRequest(acp.methods.client.terminal.create, (ctx) => { s.termReqs.push(ctx.method); return { terminalId: "client-1" }; });
  app = app.onRequest("*", (ctx) => { s.termReqs.push(ctx.method); throw acp.RequestError.methodNotFound(ctx.method); });
  s.conn = app.connect(acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout)));
  s.cx = s.conn.agent;
  s.init = () => s.cx.request("initialize", {
    protocolVersion: acp.PROTOCOL_VERSION,
    clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal },
    clientInfo: { name: "proxy-test-client", version: "1.0.0" },
  });
  s.session = async () => {
    const dir = fs.mkdtempSync(path.join(tmp, "session-"));
    return (await s.cx.request("session/new", { cwd: dir, mcpServers: [] })).sessionId;
  };
  s.prompt = (sessionId, name) => s.cx.request("session/prompt", { sessionId, prompt: [{ type: "text", text: name }] });
  // run one scenario of the agent and report its PASS/FAIL line as ours
  s.scenario = (sessionId, name, tname = name) => t(tname, async () => {
    const from = (s.lines[sessionId] ??= []).length;
    await s.prompt(sessionId, name);
    const got = s.lines[sessionId].slice(from).find((l) => l.startsWith("PASS ") || l.startsWith("FAIL "));
    assert(got, `no result line from the agent for ${name}`);
    if (got.startsWith("FAIL ")) throw new Error(got.slice(5 + name.length + 2));
  });
  return s;
}

// ---- a client without terminals, an agent that needs them ----
const MAIN = ["initialize_passes_through", "needs_terminals", "create_output_wait_release", "env_cwd_pager",
  "default_cwd_is_the_sessions", "exit_codes_and_signals", "kill_tree_no_survivors", "release_running", "output_byte_limit",
  "bad_params", "terminal_block_as_text", "terminal_block_became_text", "ids_scoped_per_session", "flood_agent_side",
  "message_flood_both_ways", "no_terminal_request_reached_the_client", "every_request_answered_once", "client_closes_proxy_exits_0"];
if (!ONLY || MAIN.some((n) => n.includes(ONLY))) {
  const s = start();
  let A, B;
  await t("initialize_passes_through", async () => {
    const r = await s.init();
    assert(r.agentInfo && r.agentInfo.name === "acp-proxy-test-agent", `the agent's answer: ${JSON.stringify(r)}`);
    A = await s.session();
    B = await s.session();
  });
  for (const name of ["needs_terminals", "create_output_wait_release", "env_cwd_pager", "default_cwd_is_the_sessions",
    "exit_codes_and_signals", "kill_tree_no_survivors", "release_running", "output_byte_limit", "bad_params"])
    await s.scenario(A, name);
  await s.scenario(A, "terminal_block_as_text");
  await t("terminal_block_became_text", async () => {
    const call = s.updates.find((u) => u.update.sessionUpdate === "tool_call" && u.sessionId === A);
    assert(call, "the tool_call update arrived");
    const c = call.update.content;
    assert(c.length === 1 && c[0].type === "content" && c[0].content.type === "text", `a text block: ${JSON.stringify(c)}`);
    assert(/^running in proctor #\d+: echo shown; sleep 30$/.test(c[0].content.text), `the text: ${c[0].content.text}`);
    assert(!JSON.stringify(s.updates).includes('"terminal"'), "no terminal block reached the client");
  });
  await s.scenario(B, "terminal_block_as_text", "terminal_block_as_text_session_b");
  await s.scenario(B, "ids_scoped_per_session");
  await t("message_flood_both_ways", async () => {
    const before = s.flood;
    const prompt = s.scenario(A, "flood", "flood_agent_side");
    const modes = await Promise.all(Array.from({ length: 2000 }, (_, i) => s.cx.request("session/set_mode", { sessionId: A, modeId: `m${i}` })));
    await prompt;
    assert(modes.length === 2000 && modes.every((m) => m && typeof m === "object"), "2,000 requests toward the agent, each answered");
    await until("10,000 updates", () => s.flood - before === 10000, 30000);
  });
  await t("no_terminal_request_reached_the_client", async () => {
    assert(s.termReqs.length === 0, `the client got ${s.termReqs.join(", ")}`);
  });
  await t("every_request_answered_once", async () => {
    assert(s.dupes.length === 0, `answered twice: ${s.dupes.slice(0, 5).join(", ")}`);
  });
  await t("client_closes_proxy_exits_0", async () => {
    s.child.stdin.end();
    const e = await s.exit;
    assert(e.code === 0, `exit ${JSON.stringify(e)}`);
  });
}

// ---- the agent exits while a terminal runs ----
await t("agent_exits_mid_run", async () => {
  const s = start();
  await s.init();
  const sid = await s.session();
  const err = await s.prompt(sid, "agent_exits_mid_run").then(() => null, (e) => e);
  assert(err && /agent exited/.test(err.message), `the prompt is answered with an error: ${err && err.message}`);
  const pidLine = (s.lines[sid] || []).find((l) => l.startsWith("PID "));
  assert(pidLine, "the agent said its run's pid");
  const e = await s.exit;
  assert(e.code === 3, `the proxy exits with the agent's status: ${JSON.stringify(e)}`);
  await until("the run is canceled", () => !alive(Number(pidLine.slice(4))), 10000);
  assert(s.dupes.length === 0, "answered once");
});

// ---- the client exits while a terminal runs ----
await t("client_exits_mid_run", async () => {
  const s = start();
  await s.init();
  const sid = await s.session();
  s.prompt(sid, "client_exits_mid_run").catch(() => {});
  const pidLine = await until("the run's pid", () => (s.lines[sid] || []).find((l) => l.startsWith("PID ")));
  s.child.stdin.end(); // the client is gone (as if it was killed)
  const e = await s.exit;
  assert(e.code !== null, `the proxy exited: ${JSON.stringify(e)}`);
  await until("the run is canceled", () => !alive(Number(pidLine.slice(4))), 10000);
});

// ---- a client with terminals: everything passes through ----
await t("client_with_terminals_gets_everything_untouched", async () => {
  const s = start({ terminal: true });
  const T0 = Date.now(); const lap = (w) => process.env.ACP_DEBUG && console.log(`# ${w} +${Date.now() - T0} ms`);
  await s.init();
  const sid = await s.session();
  lap("session");
  await s.prompt(sid, "terminal_block_as_text");
  lap("prompt");
  assert(s.termReqs.includes("terminal/create"), "the agent's terminal/create reached the client");
  const call = s.updates.find((u) => u.update.sessionUpdate === "tool_call");
  const c = call && call.update.content;
  assert(c && c.length === 1 && c[0].type === "terminal" && c[0].terminalId === "client-1" && Object.keys(c[0]).length === 2, `untouched: ${JSON.stringify(call && call.update.content)}`);
  s.child.stdin.end();
  await s.exit;
  lap("exit");
});

// ---- --always: even a client with terminals gets the agent's runs in proctor ----
await t("always_serves_even_a_client_with_terminals", async () => {
  const s = start({ terminal: true, args: ["--embedded", "--always"] });
  await s.init();
  const sid = await s.session();
  await s.scenario(sid, "needs_terminals", "always_needs_terminals");
  await s.prompt(sid, "terminal_block_as_text");
  assert(s.termReqs.length === 0, `no terminal request reached the client: ${s.termReqs}`);
  const c = s.updates.find((u) => u.update.sessionUpdate === "tool_call").update.content[0];
  assert(c.type === "content" && /^running in proctor #\d+/.test(c.content.text), `as text: ${JSON.stringify(c)}`);
  s.child.stdin.end();
  await s.exit;
});

// ---- the editor's engine: found by discovery, the runs in its list, canceled when the client goes ----
await t("editor_mode_runs_show_in_the_editor", async () => {
  const NVIM = process.env.NVIM || "nvim";
  const run = fs.mkdtempSync(path.join(tmp, "nvrun-"));
  const listen = path.join(run, "nvim.sock");
  const env = { ...process.env, XDG_RUNTIME_DIR: run, XDG_STATE_HOME: path.join(run, "state"), XDG_DATA_HOME: path.join(run, "data") };
  delete env.PROCTOR_SOCKET;
  const lua = `local e = require("proctor.engine"); assert(e.get()); vim.fn.writefile({ e.current():address() }, "${run}/address")`;
  const nvim = spawn(NVIM, ["--headless", "-u", "NONE", "-i", "NONE", "-n", "--listen", listen, "-c", `set rtp^=${root}`, "-c", `lua ${lua}`], { env, stdio: "ignore" });
  const expr = (e) => {
    const r = spawnSync(NVIM, ["--server", listen, "--remote-expr", `luaeval("vim.fn.json_encode(${e.replace(/"/g, '\\"')})")`], { env, timeout: 20000 });
    const out = (r.stdout.toString() + r.stderr.toString()).trim();
    try { return JSON.parse(out); } catch { throw new Error(`--remote-expr answered: ${out}`); }
  };
  try {
    await until("Neovim's proctor socket", () => fs.existsSync(path.join(run, "address")) && fs.readFileSync(path.join(run, "address"), "utf8").trim(), 30000);
    const s = start({ args: [], env });
    await s.init();
    const sid = await s.session();
    await s.prompt(sid, "terminal_block_as_text");
    const text = s.updates.find((u) => u.update.sessionUpdate === "tool_call").update.content[0].content.text;
    const id = Number(/#(\d+)/.exec(text)[1]);
    const list = () => expr(`vim.tbl_map(function(r) return { id = r.id, owner = r.owner, label = r.label, state = r.state } end, require('proctor').list())`);
    const mine = list().find((x) => x.id === id);
    assert(mine && mine.owner === "acp node" && mine.label === `acp ${sid}` && mine.state === "running", `in the editor's list: ${JSON.stringify(mine)}`);
    s.child.stdin.end(); // the client goes: the editor cancels the agent's run
    await s.exit;
    await until("canceled in the editor", () => { const x = list().find((r) => r.id === id); return x && x.state === "canceled"; }, 20000);
  } finally {
    nvim.kill("SIGKILL");
  }
});

fs.rmSync(tmp, { recursive: true, force: true });
console.log(`# ${TIER}: ${failed} failed`);
process.exit(failed ? 1 : 0);
