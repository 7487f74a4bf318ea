-- tests/lua/util.lua — helpers for the binding specs (lua5.4 and Neovim/LuaJIT).
local core = require("proctor.core")
local U = {}

U.core = core
U.root = os.getenv("PROCTOR_ROOT") or "."
-- PROCTOR_TEST_LIGHT=1 (tests/run sets it on every Neovim but the first of
-- its list): the stress tests repeat their identical work fewer times (races,
-- bursts, pty runs). The full counts run once per runtime: under lua5.4 and
-- on the first Neovim (tests/README.md).
U.light = os.getenv("PROCTOR_TEST_LIGHT") == "1"

-- The count of a stress test: `env` (a variable that overrides it) if set,
-- else `lua` under lua5.4, `nvim` in Neovim, `light` on a light run.
function U.count(ctx, env, lua, nvim, light)
  local n = tonumber(os.getenv(env) or "")
  if n then return n end
  if not (ctx and ctx.nvim) then return lua end
  return U.light and light or nvim
end

-- A true for the tests' thousands of starts: build/test-true (tests/c/true.c,
-- no C library; `test-true N` exits N) costs a quarter of the CPU of /bin/true
-- or `sh -c "exit N"` per start.
U.true_bin = U.root .. "/build/test-true"

local sleeper
-- Sleep ms milliseconds (an idle engine's wait is a poll() with a timeout).
function U.sleep(ms)
  sleeper = sleeper or core.new {}
  sleeper:wait(ms)
end

function U.now() return core.hrtime() / 1e6 end

local terminal = { completed = true, failed = true, canceled = true, timed_out = true }
U.terminal = terminal

-- Every event an engine produced, by id, so helpers never lose each other's
-- events: log[eng][id] = { events = {...}, states = {...}, final = ev }.
local logs = setmetatable({}, { __mode = "k" })

local function entry(eng, id)
  local l = logs[eng]
  if not l then
    l = {}
    logs[eng] = l
  end
  local e = l[id]
  if not e then
    e = { events = {}, states = {} }
    l[id] = e
  end
  return e
end

-- Pull pending events (waiting up to ms) into the log. Returns how many.
function U.pump(eng, ms)
  local evs = eng:wait(ms or 0, 65536)
  for _, ev in ipairs(evs) do
    local e = entry(eng, ev.id)
    e.events[#e.events + 1] = ev
    if ev.type == "state" then
      e.states[#e.states + 1] = ev.state
      if terminal[ev.state] then e.final = ev end
    end
  end
  return #evs
end

local function summary(e)
  local chunks = {}
  for _, ev in ipairs(e.events) do
    if ev.type == "output" then
      local c = chunks[ev.stream] or {}
      c[#c + 1] = ev.data
      chunks[ev.stream] = c
    end
  end
  local out = {}
  for s, c in pairs(chunks) do
    out[s] = table.concat(c)
  end
  return { events = e.events, states = e.states, final = e.final, out = out }
end

-- Wait until every id in `ids` reached a terminal state.
-- Returns a table id -> { states = {...}, events = {...}, out = {stream = data}, final = ev }.
function U.collect(eng, ids, timeout_ms)
  local deadline = U.now() + (timeout_ms or 10000)
  local i = 1
  while true do
    while i <= #ids and entry(eng, ids[i]).final do
      i = i + 1
    end
    if i > #ids then break end
    local rem = deadline - U.now()
    if rem <= 0 then error(("timeout: %d executions not terminal"):format(#ids - i + 1), 2) end
    U.pump(eng, math.floor(math.min(rem, 200)))
  end
  local res = {}
  for _, id in ipairs(ids) do
    res[id] = summary(entry(eng, id))
  end
  return res
end

-- Forget what the log holds for `id` (for long runs).
function U.forget(eng, id)
  if logs[eng] then logs[eng][id] = nil end
end

function U.run(eng, spec, timeout_ms)
  local id = assert(eng:start(spec))
  return U.collect(eng, { id }, timeout_ms)[id], id
end

-- Pids of live (non-zombie) processes whose initial environment has
-- PROCTOR_TEST_TAG=<tag>.
function U.tagged(tag)
  local pids = {}
  local p = io.popen("ls /proc")
  local needle = "PROCTOR_TEST_TAG=" .. tag .. "\0"
  for name in p:lines() do
    if name:match("^%d+$") then
      local f = io.open("/proc/" .. name .. "/environ", "rb")
      if f then
        local env = f:read("a") or ""
        f:close()
        if env:find(needle, 1, true) then
          local st = io.open("/proc/" .. name .. "/stat")
          local stat = st and st:read("l") or ""
          if st then st:close() end
          local state = stat:match("%) (%a)")
          if state and state ~= "Z" then pids[#pids + 1] = tonumber(name) end
        end
      end
    end
  end
  p:close()
  return pids
end

-- Wait until a process carrying `tag` runs program `comm` (exec'd, not a
-- shell's fork on its way to it: a fork still has the shell's signal
-- handlers, and a signal it takes then is lost to the program).
function U.wait_comm(tag, comm, timeout_ms)
  return U.wait_until(function()
    for _, pid in ipairs(U.tagged(tag)) do
      if U.read_file("/proc/" .. pid .. "/comm") == comm .. "\n" then return true end
    end
    return false
  end, timeout_ms or 10000)
end

local seq, self_pid, token = 0, nil, nil
-- A tag no other run on this machine draws: the pid alone repeats across
-- pid namespaces (tests/mutate runs each tier in one of its own, where the
-- first processes get the same small pids every time) and LuaJIT's
-- math.random is never seeded, so two Neovims draw the same numbers. The
-- token is 8 random bytes from /dev/urandom, read once per process.
function U.tag()
  seq = seq + 1
  self_pid = self_pid or (U.read_file("/proc/self/stat") or ""):match("^(%d+)") or "0"
  if not token then
    local f = assert(io.open("/dev/urandom", "rb"))
    local b = f:read(8)
    f:close()
    token = (b:gsub(".", function(c) return ("%02x"):format(c:byte()) end))
  end
  return ("t%s_%s_%d_%d"):format(self_pid, token, os.time(), seq)
end

-- Wait until fn() is true or timeout_ms passes; returns fn()'s last value.
function U.wait_until(fn, timeout_ms, step)
  local deadline = U.now() + timeout_ms
  local v = fn()
  while not v and U.now() < deadline do
    U.sleep(step or 10)
    v = fn()
  end
  return v
end

-- Wait for a state event of `id` equal to `state`.
function U.wait_state(eng, id, state, timeout_ms)
  local deadline = U.now() + (timeout_ms or 5000)
  while true do
    for _, ev in ipairs(entry(eng, id).events) do
      if ev.type == "state" and ev.state == state then return ev end
    end
    if U.now() > deadline then error(("execution %d never reached %s"):format(id, state), 2) end
    U.pump(eng, 20)
  end
end

-- Wait until the output of `id` contains `pat` (plain); returns all output so far.
function U.wait_output(eng, id, pat, timeout_ms)
  local deadline = U.now() + (timeout_ms or 5000)
  while true do
    local buf = {}
    for _, ev in ipairs(entry(eng, id).events) do
      if ev.type == "output" then buf[#buf + 1] = ev.data end
    end
    local s = table.concat(buf)
    if s:find(pat, 1, true) then return s end
    if U.now() > deadline then
      error(("output of %d never contained %q; got %q"):format(id, pat, s), 2)
    end
    U.pump(eng, 20)
  end
end

function U.read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

function U.status_field(pid, field)
  local s = U.read_file("/proc/" .. pid .. "/status")
  return s and tonumber(s:match(field .. ":%s+(%d+)"))
end

function U.alive(pid)
  local s = U.read_file("/proc/" .. pid .. "/stat")
  if not s then return false end
  return s:match("%) (%a)") ~= "Z"
end

function U.ppid(pid)
  local s = U.read_file("/proc/" .. pid .. "/stat")
  return s and tonumber(s:match("%) %a (%d+)"))
end

-- The shepherd above a job's leader: the oldest ancestor that runs
-- proctor-shepherd (leader -> the job's reaper, a fork of it -> the shepherd).
function U.shepherd(pid)
  local found
  for _ = 1, 4 do
    pid = U.ppid(pid)
    if not pid or pid <= 1 then break end
    if not (U.read_file("/proc/" .. pid .. "/cmdline") or ""):find("proctor%-shepherd") then
      break
    end
    found = pid
  end
  return found
end

-- A private directory (mktemp -d under $TMPDIR or /tmp): never a fixed path,
-- so two runs of the suite on one machine cannot touch each other's files.
function U.tmpdir()
  local p = io.popen([[mktemp -d "${TMPDIR:-/tmp}/proctor-test.XXXXXX"]])
  local d = p:read("l")
  p:close()
  assert(d and d:find("proctor%-test%."), "mktemp -d failed")
  return d
end

-- Remove a directory made by U.tmpdir (refuses anything else).
function U.rmrf(d)
  if d and d:find("/proctor%-test%.[%w]+$") then os.execute("rm -rf '" .. d .. "'") end
end

function U.write_file(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

-- SIGKILL a process we started (by pid; nothing when pid is nil).
function U.kill9(pid)
  if pid then os.execute("kill -9 " .. math.floor(pid) .. " 2>/dev/null") end
end

function U.sh(cmd)
  local p = io.popen(cmd)
  local out = p:read("a")
  p:close()
  return out
end

return U
