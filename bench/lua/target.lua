-- bench/lua/target.lua — workload 11 under lua5.4: an ssh target (|proctor-targets|) over
-- the loopback sshd of tests/target/run (which runs this file: TARGET_SCRIPT), against
-- plain ssh.
--
--   BENCH_VARIANT  proctor: executions on the target (one shared transport, warmed up by
--                  one run first); ssh: plain `ssh -F <config> proctor-test ...`
--   BENCH_N        short runs (`true`), one after the other (30)
--   BENCH_BYTES    the flood: `head -c BYTES /dev/zero` on the far side (100 MiB)
--   BENCH_ECHO     echo samples through a PTY `cat`, after BENCH_ECHO_WARM (200, 20)
--   BENCH_FAN      `true` runs with BENCH_WINDOW in flight (1000, 50)
--
-- short.p50/p99: ms from the start to the end of one `true` (ssh: a new connection each);
-- flood_ms: the flood's wall (proctor: every byte taken from the events, backpressure on;
-- ssh: `ssh host 'head -c …'` read by this process over a ControlMaster connection opened
-- before timing, so no handshake is timed); xfer_mib_s: the flood's bytes over the time from
-- its first byte to its end (what the far side's shell startup cannot touch); echo.p50/p99: ms from writing a short line to
-- its echo (proctor: `cat` with pty = true on the target; ssh: `ssh -tt host cat` run as a
-- local proctor.core execution, so it includes the local write -> event path);
-- fan_ms: the wall of BENCH_FAN × `true` (ssh: each `ssh host true` over the ControlMaster
-- socket, a local proctor.core execution each, the same windowing).

local lib = dofile(os.getenv("BENCH_ROOT") .. "/bench/lib.lua")
local core = require("proctor.core")

local VARIANT = lib.param("BENCH_VARIANT", "proctor")
local N = lib.param("BENCH_N", 30, true)
local BYTES = lib.param("BENCH_BYTES", 100 * 1024 * 1024, true)
local ECHO = lib.param("BENCH_ECHO", 200, true)
local ECHO_WARM = lib.param("BENCH_ECHO_WARM", 20, true)
local FAN = lib.param("BENCH_FAN", 1000, true)
local WINDOW = lib.param("BENCH_WINDOW", 50, true)
local config = assert(os.getenv("TARGET_SSH_CONFIG"), "run through tests/target/run")
local dir = assert(os.getenv("TARGET_DIR"), "run through tests/target/run")
local root = os.getenv("BENCH_ROOT")
local SSH = ("ssh -F %s -T proctor-test %s/build/proctor-shepherd --relay"):format(config, root)
local flood = "head -c " .. BYTES .. " /dev/zero"
local CM = { "-o", "ControlPath=" .. dir .. "/cm-%C", "-o", "ControlPersist=60" }

local eng = assert(core.new({
  drain_ms = 300,
  history_limit = N + FAN + 20,
  max_running = WINDOW + 10,
  max_queued = FAN + 20,
}))
local remote = VARIANT == "proctor"

-- Starts `cmd` on the target (proctor) or locally (ssh: cmd is an ssh argv).
local function start(cmd, o)
  o = o or {}
  o.cmd = cmd
  if remote then
    o.target, o.transport = "b", SSH
  end
  return assert(eng:start(o))
end

local TERMINAL = { completed = true, failed = true, canceled = true, timed_out = true }

local function failed(ev)
  return ev.type == "state"
    and (ev.state == "failed" or ev.state == "canceled" or ev.state == "timed_out")
end

-- Runs events until done() is true; on_ev(ev) sees each one.
local function pump(on_ev, done)
  while not done() do
    for _, ev in ipairs(eng:wait(1000, 4096)) do
      on_ev(ev)
    end
  end
end

-- One execution to its end; returns the bytes of output it gave when `count`.
local first_ms -- when run(cmd, true) saw its first byte
local function run(cmd, count)
  local id, got, over, err = start(cmd, { backpressure = true }), 0, false, ""
  pump(function(ev)
    if ev.id ~= id then return end
    if ev.type == "output" and ev.stream == "stderr" then
      err = (err .. ev.data):sub(-300)
    elseif ev.type == "output" and count then
      if got == 0 then first_ms = lib.now_ms() end
      got = got + #ev.data
    end
    if
      failed(ev) or ev.type == "state" and ev.state == "completed" and (ev.exit_code or 0) ~= 0
    then
      error(
        ("the run ended %s (%s): %s %s"):format(
          ev.state,
          tostring(ev.exit_code),
          tostring(ev.error),
          err
        )
      )
    end
    if ev.type == "state" and ev.state == "completed" then over = true end
  end, function() return over end)
  return got
end

local function ssh(...)
  local argv = { "ssh", "-F", config }
  for _, a in ipairs({ ... }) do
    argv[#argv + 1] = a
  end
  return argv
end
local function cm(...) return ssh(CM[1], CM[2], CM[3], CM[4], ...) end

local short = {}
local flood_ms, got, t_end
if remote then
  run({ "true" }) -- the transport is up from here on
  for i = 1, N do
    local t0 = lib.now_ms()
    run({ "true" })
    short[i] = lib.now_ms() - t0
  end
  local t0 = lib.now_ms()
  got = run({ "sh", "-c", flood }, true)
  t_end = lib.now_ms()
  flood_ms = t_end - t0
else
  for i = 1, N do
    local t0 = lib.now_ms()
    assert(os.execute("ssh -F " .. config .. " -T proctor-test true"))
    short[i] = lib.now_ms() - t0
  end
  -- The master, opened (and its handshake done) before timing.
  -- (by os.execute: a local proctor execution's tree, the forked master too, ends with it)
  local cmo = table.concat(CM, " ") .. " -F " .. config
  assert(os.execute("ssh " .. cmo .. " -o ControlMaster=yes -f -N proctor-test"))
  assert(os.execute("ssh " .. cmo .. " -O check proctor-test 2>/dev/null"), "no ControlMaster")
  local t0 = lib.now_ms()
  got = run(cm("-o", "ControlMaster=no", "-T", "-n", "proctor-test", flood), true)
  t_end = lib.now_ms()
  flood_ms = t_end - t0
end
assert(got == BYTES, ("the flood gave %d of %d bytes"):format(got, BYTES))

-- Echo: write a short line with a fresh token, time until the token comes back.
local echo = {}
do
  local buf, over = "", false
  local id = remote and start({ "cat" }, { pty = true, stdin = true })
    or start(ssh("-tt", "proctor-test", "cat"), { stdin = true })
  local function on_ev(ev)
    if ev.id ~= id then return end
    if ev.type == "output" then buf = buf .. ev.data end
    if ev.type == "state" and (failed(ev) or ev.state == "completed") then
      error("the echo session ended " .. ev.state .. ": " .. tostring(ev.error))
    end
    if #buf > 65536 then buf = buf:sub(-4096) end
  end
  for i = 1, ECHO_WARM + ECHO do
    local token = ("e%dz"):format(i)
    local t0 = lib.now_ms()
    assert(eng:input(id, token .. "\r"))
    pump(on_ev, function() return buf:find(token, 1, true) ~= nil end)
    if i > ECHO_WARM then echo[#echo + 1] = lib.now_ms() - t0 end
    buf = ""
  end
  eng:cancel(id)
  pump(function(ev)
    if ev.id == id and ev.type == "state" and TERMINAL[ev.state] then over = true end
  end, function() return over end)
end

-- FAN × true, WINDOW in flight, a new one started as each ends.
local fan_ms, fan_failed, fan_stderr, last_err
do
  local cmd = remote and { "true" }
    or cm("-o", "ControlMaster=auto", "-T", "-n", "proctor-test", "true")
  local started, ended, live, bad, said = 0, 0, {}, 0, 0
  local t0 = lib.now_ms()
  local function fill()
    while started < FAN and started - ended < WINDOW do
      live[start(cmd)] = true
      started = started + 1
    end
  end
  fill()
  pump(function(ev)
    if live[ev.id] and ev.type == "output" and ev.stream == "stderr" and live[ev.id] ~= "said" then
      live[ev.id], said = "said", said + 1
      last_err = ev.data
    end
    if live[ev.id] and ev.type == "state" and TERMINAL[ev.state] then
      if ev.state ~= "completed" or (ev.exit_code or 0) ~= 0 then bad = bad + 1 end
      live[ev.id] = nil
      ended = ended + 1
      fill()
    end
  end, function() return ended == FAN end)
  fan_ms, fan_failed, fan_stderr = lib.now_ms() - t0, bad, said
end
if not remote then
  local cmo = table.concat(CM, " ") .. " -F " .. config
  assert(
    os.execute("ssh " .. cmo .. " -O exit proctor-test 2>/dev/null"),
    "the ControlMaster was gone"
  )
end
eng:close()

lib.result({
  short = lib.stats(short),
  flood_ms = flood_ms,
  mib_s = BYTES / 1048576 / (flood_ms / 1000),
  xfer_mib_s = BYTES / 1048576 / ((t_end - first_ms) / 1000),
  echo = lib.stats(echo),
  fan_ms = fan_ms,
  fan_failed = fan_failed,
  fan_stderr = fan_stderr,
  fan_last_stderr = last_err,
  wall_ms = flood_ms,
})
