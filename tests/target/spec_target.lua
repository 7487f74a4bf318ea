-- tests/target/spec_target.lua — executions on targets (|proctor-targets|) under plain Lua 5.4:
-- an ssh host (the sshd that tests/target/run starts on a loopback port, with its own keys)
-- and a `command` target (the relay started by a plain command, as podman/kubectl exec would).
-- The far side is this machine, so what runs there is seen in /proc (PROCTOR_TEST_TAG).
local T = require("harness")
local U = require("util")
local core = U.core

local root = os.getenv("PROCTOR_ROOT") or "."
local shepherd = root .. "/build/proctor-shepherd"
local config = assert(os.getenv("TARGET_SSH_CONFIG"), "run through tests/target/run")
local SSH = ("ssh -F %s -T proctor-test %s --relay"):format(config, shepherd)
local CMD = shepherd .. " --relay"

local eng = assert(core.new { drain_ms = 300 })

local function test(name, fn) T.test("target: " .. name, fn) end
local function ssh_spec(spec)
  spec.target, spec.transport = "devbox", SSH
  return spec
end

-- The pids of the transports this engine's ssh target runs (ssh -F <our config>).
local function ssh_pids()
  local p = io.popen("pgrep -f -- '^ssh -F " .. config .. "'")
  local pids = {}
  for l in p:lines() do
    pids[#pids + 1] = tonumber(l)
  end
  p:close()
  return pids
end

test("lifecycle, exit codes, streams, the far side's environment and home", function()
  local r, id = U.run(
    eng,
    ssh_spec {
      cmd = { "sh", "-c", "echo out $PWD; echo $FOO >&2; exit 3" },
      env = { FOO = "bar" },
    },
    30000
  )
  T.eq(table.concat(r.states, ","), "queued,starting,running,failed")
  T.eq(r.final.exit_code, 3)
  T.eq(r.final.reason, "exit")
  local home = U.sh("getent passwd $(id -un) | cut -d: -f6"):gsub("%s+$", "")
  T.eq(r.out.stdout, "out " .. home .. "\n")
  T.eq(r.out.stderr, "bar\n")
  T.eq(eng:get(id).target, "devbox")
  r = U.run(eng, ssh_spec { cmd = "kill -TERM $$" }, 30000)
  T.eq(r.final.state, "failed")
  T.eq(r.final.reason, "signal")
  T.eq(r.final.signal, "SIGTERM")
  r = U.run(eng, ssh_spec { cmd = { "pwd" }, cwd = "/tmp" }, 30000)
  T.eq(r.final.state, "completed")
  T.eq(r.out.stdout, "/tmp\n")
  r = U.run(eng, ssh_spec { cmd = { "/nonexistent/prog" } }, 30000)
  T.eq(r.final.reason, "spawn_error")
  T.match(r.final.error or "", "exec: /nonexistent/prog")
end)

require("shared").define {
  eng = eng,
  test = test,
  spec = ssh_spec,
  ms = 30000,
  transports = function() return #ssh_pids() end,
}

test("ssh SIGKILLed mid-run: the far side's jobs die, the executions end target_lost", function()
  local tag = U.tag()
  local ids = {}
  for i = 1, 3 do
    ids[i] = assert(eng:start(ssh_spec {
      cmd = { "sh", "-c", "trap '' TERM; sleep 300 & setsid sleep 300 & wait" },
      env = { PROCTOR_TEST_TAG = tag },
    }))
  end
  for _, id in ipairs(ids) do
    U.wait_state(eng, id, "running", 30000)
  end
  T.ok(U.wait_until(function() return #U.tagged(tag) >= 9 end, 10000), "the trees never started")
  local here = assert(eng:start { cmd = { "sleep", "300" } }) -- on this machine: not lost
  U.wait_state(eng, here, "running", 30000)
  local pids = ssh_pids()
  T.eq(#pids, 1)
  U.sh("kill -9 " .. pids[1])
  local all = U.collect(eng, ids, 30000)
  for _, id in ipairs(ids) do
    T.eq(all[id].final.state, "failed")
    T.eq(all[id].final.reason, "target_lost")
    T.match(all[id].final.error or "", "killed by signal 9")
  end
  T.ok(U.wait_until(function() return #U.tagged(tag) == 0 end, 10000), "survivors on the far side")
  T.eq(eng:get(here).state, "running", "a local execution ended with the target's link")
  eng:cancel(here, true)
  U.collect(eng, { here }, 30000)
  -- the next run on the target makes a new connection
  local r = U.run(eng, ssh_spec { cmd = { "echo", "again" } }, 30000)
  T.eq(r.out.stdout, "again\n")
end)

test("the editor SIGKILLed: the far side's jobs all die", function()
  local tag = U.tag()
  local dir = U.tmpdir()
  T.defer(function() U.rmrf(dir) end)
  local script = dir .. "/host.lua"
  U.write_file(
    script,
    ([[
    package.cpath = %q .. "/build/lua5.4/?.so;" .. package.cpath
    local core = require("proctor.core")
    local eng = assert(core.new{})
    local t = { target = "devbox", transport = %q, env = { PROCTOR_TEST_TAG = %q } }
    local function spec(s) for k, v in pairs(t) do s[k] = v end return s end
    eng:start(spec{ cmd = {"sleep", "1000"} })
    eng:start(spec{ cmd = "trap '' TERM HUP; sleep 1000", pty = true })
    eng:start(spec{ cmd = "setsid sleep 1000 & sleep 1000" })
    while true do eng:wait(1000) end
  ]]):format(root, SSH, tag)
  )
  local host = tonumber(U.sh("lua5.4 " .. script .. " >/dev/null 2>&1 & echo $!"))
  T.ok(host)
  T.defer(function() U.kill9(host) end)
  T.ok(U.wait_until(function() return #U.tagged(tag) >= 4 end, 30000), "jobs did not start")
  U.kill9(host)
  T.ok(
    U.wait_until(function() return #U.tagged(tag) == 0 end, 10000),
    "left on the far side: " .. #U.tagged(tag)
  )
end)

test("a transport that cannot connect: target_lost with its status and stderr", function()
  local r = U.run(eng, {
    cmd = { "true" },
    target = "nowhere",
    transport = ("ssh -F %s -T -o Port=1 proctor-test %s --relay"):format(config, shepherd),
  }, 30000)
  T.eq(r.final.state, "failed")
  T.eq(r.final.reason, "target_lost")
  T.match(r.final.error or "", "exited with status 255")
  T.match(r.final.error or "", "[Cc]onnection refused")
end)

test("a command target (the relay under a plain command): run, lose it", function()
  local r = U.run(eng, { cmd = { "echo", "hi" }, target = "local", transport = CMD }, 30000)
  T.eq(r.final.state, "completed")
  T.eq(r.out.stdout, "hi\n")
  local tag = U.tag()
  local id = assert(eng:start {
    cmd = { "sleep", "300" },
    target = "local",
    transport = CMD,
    env = { PROCTOR_TEST_TAG = tag },
  })
  U.wait_state(eng, id, "running", 30000)
  -- the relay is the parent of the job's reaper: kill it
  local pid = U.tagged(tag)[1]
  local relay = U.ppid(U.ppid(pid))
  U.sh("kill -9 " .. relay)
  r = U.collect(eng, { id }, 30000)[id]
  T.eq(r.final.reason, "target_lost")
  T.match(r.final.error or "", "killed by signal 9")
  T.ok(U.wait_until(function() return #U.tagged(tag) == 0 end, 10000), "the job outlived its relay")
end)

test("history keeps the target and the output of a target's execution", function()
  local file = os.getenv("TARGET_DIR") .. "/history"
  local e1 = assert(core.new { drain_ms = 300, history_file = file })
  local r, id = U.run(e1, ssh_spec { cmd = { "echo", "kept" } }, 30000)
  T.eq(r.final.state, "completed")
  e1:close()
  local e2 = assert(core.new { drain_ms = 300, history_file = file })
  local rec = e2:get(id)
  T.eq(rec.target, "devbox")
  T.eq(rec.previous_session, true)
  T.eq(e2:read(id, "stdout"), "kept\n")
  e2:close()
end)

test("a 100 MiB flood over ssh arrives whole, with back-pressure, in bounded memory", function()
  local N = 100 * 1024 * 1024
  local e3 = assert(core.new({ drain_ms = 300 }))
  local tag = U.tag()
  local id = assert(e3:start(ssh_spec({
    cmd = { "sh", "-c", "head -c " .. N .. " /dev/zero" },
    backpressure = true,
    env = { PROCTOR_TEST_TAG = tag },
  })))
  local got, final, relay = 0, nil, nil
  local t0 = U.now()
  local deadline = t0 + 600000
  while not final and U.now() < deadline do
    for _, ev in ipairs(e3:wait(100, 4096)) do -- counted, never kept
      if ev.id == id and ev.type == "output" then got = got + #ev.data end
      if ev.id == id and ev.type == "state" and U.terminal[ev.state] then final = ev end
    end
    if not relay then -- the far side: job <- its reaper <- the relay
      local job = U.tagged(tag)[1]
      relay = job and U.ppid(U.ppid(job) or 0)
    end
  end
  local secs = (U.now() - t0) / 1000
  T.ok(final, "the flood ended")
  T.eq(final.state, "completed", final.error)
  T.eq(got, N, "every byte arrived")
  T.ok(relay, "found the relay")
  local peak = U.status_field(relay, "VmHWM") or 0 -- the relay stays up (the link is idle)
  T.ok(peak > 0 and peak < 64 * 1024, ("the relay's peak RSS is %d KiB"):format(peak))
  print(
    ("# flood: 100 MiB over ssh in %.1f s (%.1f MiB/s), relay peak RSS %d KiB"):format(
      secs,
      100 / secs,
      peak
    )
  )
  e3:close()
end)

test(
  "a 10 MiB pty flood over ssh: every byte arrives, resized on the way, the marker last",
  function()
    local N = 10 * 1024 * 1024
    local e5 = assert(core.new({ drain_ms = 300 }))
    -- no newline in the flood (the pty would make each one \r\n); the job waits until it
    -- sees the new size, so the resize lands while it runs
    local id = assert(e5:start(ssh_spec({
      cmd = "head -c "
        .. N
        .. " /dev/zero | tr '\\0' x; while [ \"$(stty size)\" != '50 132' ]; do sleep 0.05; done;"
        .. " echo; echo END-OF-FLOOD",
      pty = true,
      cols = 80,
      rows = 24,
    })))
    local got, final, resized = 0, nil, false
    local t0 = U.now()
    local deadline = t0 + 300000
    while not final and U.now() < deadline do
      for _, ev in ipairs(e5:wait(100, 4096)) do -- counted, never kept
        if ev.id == id and ev.type == "output" then got = got + #ev.data end
        if ev.id == id and ev.type == "state" and U.terminal[ev.state] then final = ev end
      end
      if not resized and got >= N / 2 then resized = e5:resize(id, 132, 50) end
    end
    T.ok(final, "the flood ended")
    T.eq(final.state, "completed", final.error)
    T.eq(resized, true, "resized while it ran")
    local tail = "\r\nEND-OF-FLOOD\r\n"
    T.eq(got, N + #tail, "every byte arrived")
    local last = e5:read(id, "pty", got - #tail - 4, 64)
    T.eq(last, "xxxx" .. tail, "the ring ends with the marker")
    print(("# pty flood: 10 MiB over ssh in %.1f s"):format((U.now() - t0) / 1000))
    e5:close()
  end
)

test("the link refuses a relay of another byte order or version, saying which", function()
  local dir = os.getenv("TARGET_DIR") .. "/forged"
  U.sh("mkdir -p " .. dir)
  local PONG, magic = 10, 0x70726f6374720000 -- PR_W_PONG, PR_RELAY_MAGIC (base/wire.h)
  local pack = rawget(string, "pack") -- Lua 5.4 (this tier's Lua)
  local other = pack("<I1", 1) == "\1" and ">" or "<" -- the other byte order
  local native = other == ">" and "<" or ">"
  local cases = {
    { pack(other .. "I4I4I8i8i8I4I4", PONG, 0, 0, magic | 1, 42, 0, 0), "other byte order" },
    {
      pack(native .. "I4I4I8i8i8I4I4", PONG, 0, 0, magic | 99, 42, 0, 0),
      "version 99, this one 1",
    },
    { pack(native .. "I4I4I8i8i8I4I4", PONG, 0, 0, 0, 42, 0, 0), "version 0, this one 1" },
    { ("%-40s"):format("Welcome to the far side"), "not a proctor relay" },
  }
  for i, c in ipairs(cases) do
    local f = dir .. "/hello" .. i
    U.write_file(f, c[1])
    local r = U.run(eng, {
      cmd = { "true" },
      target = "forged" .. i,
      transport = "cat " .. f .. "; exec sleep 60",
    }, 30000)
    T.eq(r.final.state .. " " .. tostring(r.final.reason), "failed target_lost")
    T.match(r.final.error or "", c[2])
  end
end)

test("a supervised worker on the target answers requests", function()
  local e4 = assert(core.new({ drain_ms = 300 }))
  local id = assert(e4:start(ssh_spec({
    cmd = { "/usr/bin/python3", root .. "/examples/worker.py" },
    worker = { protocol = "jsonl" },
  })))
  local ready, replies, want = false, 0, {}
  local deadline = U.now() + 60000
  while not ready and U.now() < deadline do
    for _, ev in ipairs(e4:wait(50, 4096)) do
      if ev.type == "worker" and ev.id == id and ev.worker_state == "ready" then ready = true end
    end
  end
  T.ok(ready, "the worker became ready")
  for i = 1, 100 do
    want[assert(e4:worker_request(id, { op = "echo", value = i }))] = i
  end
  while replies < 100 and U.now() < deadline do
    for _, ev in ipairs(e4:wait(50, 4096)) do
      if ev.type == "reply" and want[ev.rid] then
        T.ok(ev.ok and ev.result == want[ev.rid], "reply " .. tostring(ev.rid))
        want[ev.rid] = nil
        replies = replies + 1
      end
    end
  end
  T.eq(replies, 100)
  T.eq(e4:get(id).target, "devbox")
  e4:close()
end)

test("an idle transport closes after target_idle_ms; the next run opens it again", function()
  local e2 = assert(core.new({ drain_ms = 300, target_idle_ms = 300 }))
  local dir = os.getenv("TARGET_DIR") .. "/idle"
  U.sh("mkdir -p " .. dir)
  local pidf = dir .. "/relay.pid"
  local tr = ("sh -c 'echo $$ > %s; exec %s --relay'"):format(pidf, shepherd)
  -- a run longer than the idle time holds its transport: it completes
  local r = U.run(e2, { cmd = { "sleep", "1" }, target = "idle", transport = tr }, 30000)
  T.eq(r.final.state, "completed", r.final.error)
  local pid = tonumber(U.read_file(pidf))
  T.ok(pid, "the relay wrote its pid")
  T.ok(U.wait_until(function() return not U.alive(pid) end, 30000), "the idle relay exited")
  local r2 = U.run(e2, { cmd = { "echo", "again" }, target = "idle", transport = tr }, 30000)
  T.eq(r2.final.state, "completed", r2.final.error)
  T.eq(r2.out.stdout, "again\n")
  T.ok(tonumber(U.read_file(pidf)) ~= pid, "a new relay")
  e2:close()
end)

-- proctor.targets (the Lua layer's half): the far side checked, the static shepherd copied
-- into the cache dir (XDG_CACHE_HOME, passed through ssh's SetEnv: nothing in a real home).
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
local targets = require("proctor.targets")

test("first use copies the static shepherd (hash-named, 0700), later uses find it", function()
  local cache = os.getenv("TARGET_DIR") .. "/farcache"
  local def = {
    ssh = "proctor-test",
    opts = { "-F", config, "-o", "SetEnv=XDG_CACHE_HOME=" .. cache },
  }
  local tr, err = targets.transport("copied", def)
  T.ok(tr, err)
  T.eq(U.sh("ls -A " .. cache .. "/proctor 2>/dev/null"), "") -- building it ran nothing
  local r = U.run(eng, { cmd = { "echo", "far" }, target = "copied", transport = tr }, 120000)
  T.eq(r.final.state, "completed", r.final.error)
  T.eq(r.out.stdout, "far\n")
  local files = U.sh("ls -A " .. cache .. "/proctor")
  T.match(files, "^proctor%-shepherd%-%x+\n$")
  local file = cache .. "/proctor/" .. files:gsub("%s+$", "")
  T.eq(U.sh("stat -c %a " .. file), "700\n")
  T.eq(
    U.sh("cmp " .. file .. " " .. root .. "/lua/proctor/proctor-shepherd-static && echo same"),
    "same\n"
  )
  -- checked again (:checkhealth's way): present, not copied again (same inode)
  local ino = U.sh("stat -c %i " .. file)
  local what, why = targets.check_far("copied", def)
  T.match(what or why, "target copied: ready")
  T.eq(U.sh("stat -c %i " .. file), ino)
  -- a cache dir that cannot be written: a clear error, in the record and in the check
  local ro = os.getenv("TARGET_DIR") .. "/rocache"
  U.sh("mkdir -p " .. ro .. " && touch " .. ro .. "/proctor") -- a file where the dir goes
  local bad =
    { ssh = "proctor-test", opts = { "-F", config, "-o", "SetEnv=XDG_CACHE_HOME=" .. ro } }
  local btr = assert(targets.transport("readonly", bad))
  local f = U.run(eng, { cmd = { "true" }, target = "readonly", transport = btr }, 120000)
  T.eq(f.final.state .. " " .. tostring(f.final.reason), "failed target_lost")
  T.match(f.final.error or "", "cannot install the shepherd")
  local none, no = targets.check_far("readonly", bad)
  T.eq(none, nil)
  T.match(no or "", "cannot install the shepherd")
end)

test("the far side is prepared off the host: it answers while a slow ssh connects", function()
  -- ssh reaches the sshd through a ProxyCommand that waits for a gate file (at most 60 s):
  -- building the transport must not run it, and the host answers while it waits.
  local dir = os.getenv("TARGET_DIR") .. "/gated"
  U.sh("mkdir -p " .. dir)
  local gate, reached = dir .. "/gate", dir .. "/reached"
  local proxy = (
    "ProxyCommand=sh -c 'touch %s; i=0; while [ ! -e %s ] && [ $i -lt 1200 ]; "
    .. "do sleep 0.05; i=$((i+1)); done; exec ssh -F %s -W %%h:%%p proctor-test'"
  ):format(reached, gate, config)
  local def = {
    ssh = "proctor-test",
    opts = { "-F", config, "-o", proxy, "-o", "SetEnv=XDG_CACHE_HOME=" .. dir .. "/cache" },
  }
  local tr, err = targets.transport("gated", def)
  T.ok(tr, err)
  T.eq(U.read_file(reached), nil, "building the transport ran ssh")
  local id = assert(eng:start({ cmd = { "echo", "through" }, target = "gated", transport = tr }))
  T.ok(U.wait_until(function() return U.read_file(reached) ~= nil end, 30000), "ssh started")
  -- ssh waits at the gate: the host is not blocked, the execution waits in starting
  U.pump(eng, 50)
  T.eq(eng:get(id).state, "starting")
  U.write_file(gate, "")
  local r = U.wait_state(eng, id, "completed", 60000)
  T.ok(r, "completed after the gate opened")
  T.eq(select(1, eng:read(id, "stdout", 0, 100)), "through\n")
end)

eng:close()
os.exit(T.finish() and 0 or 1)
