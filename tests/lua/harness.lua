-- tests/lua/harness.lua — a small test harness shared by every Lua test tier.
--
-- Works under lua5.4 and under Neovim's LuaJIT. Prints "PASS <name>" or
-- "FAIL <name>: <why>" per test; tests/run counts those lines.
--
--   local T = require("harness")
--   T.test("name", function() T.eq(1, 1) end)
--   T.finish()   -- exits non-zero when something failed (lua5.4)
--
-- PROCTOR_TEST=word1,word2 runs only the tests whose name contains one of the
-- words (plain text). Inside a test, T.defer(fn) registers a cleanup that runs
-- when the test ends, passed or failed (last registered first): processes,
-- engines and directories a failing assertion would otherwise leave behind.
-- TEST_TIMES=1 adds a line "TIME <ms> <name>" after each test (to find where
-- a tier's time goes; tests/run shows it in the tier's block), and " (CPU
-- <ms>)" after the name when the tier runs in a cgroup of its own (tests/run
-- makes one with TEST_TIMES=1, as root): the CPU of everything in it during
-- the test, shepherds, jobs and child Neovims included.

local T = { passed = 0, failed = 0, out = io.stdout }

local times = os.getenv("TEST_TIMES")
if times == "" or times == "0" then times = nil end

-- Milliseconds for TEST_TIMES: the core's monotonic clock once a spec has
-- loaded it, Neovim's otherwise, seconds at worst.
local function clock_ms()
  local core = package.loaded["proctor.core"]
  if type(core) == "table" and core.hrtime then return core.hrtime() / 1e6 end
  local uv = rawget(_G, "vim") and (vim.uv or vim.loop)
  if uv then return uv.hrtime() / 1e6 end
  return os.time() * 1000
end

-- The cgroup v2 CPU counter of this process's cgroup (its cpu.stat), when it
-- has one that counts: tests/run's tier cgroup under TEST_TIMES=1.
local cpu_stat
if times then
  local f = io.open("/proc/self/cgroup")
  local path = f and f:read("*a"):match("0::(%S+)")
  if f then f:close() end
  for _, mnt in
    ipairs(path and path ~= "/" and { "/sys/fs/cgroup/unified", "/sys/fs/cgroup" } or {})
  do
    local c = io.open(mnt .. path .. "/cpu.stat")
    if c then
      c:close()
      cpu_stat = mnt .. path .. "/cpu.stat"
      break
    end
  end
end

-- Milliseconds of CPU used in this cgroup so far (nil: no counter).
local function cpu_ms()
  local f = cpu_stat and io.open(cpu_stat)
  if not f then return nil end
  local usec = f:read("*a"):match("usage_usec (%d+)")
  f:close()
  return usec and tonumber(usec) / 1000
end

local only = os.getenv("PROCTOR_TEST")
if only == "" then only = nil end

--- The specs of a directory, found by glob so that a new one cannot be forgotten:
--- every `spec_*.lua` in `dir`, as module names ("spec_basic") sorted by name, except
--- that `order.first` come first and `order.last` come last, in the order given (for
--- a spec whose place matters). A pinned name with no file is an error.
---@param dir string
---@param order? { first?: string[], last?: string[] }
---@return string[]
function T.discover(dir, order)
  order = order or {}
  local found, pinned, out = {}, {}, {}
  local ls = assert(io.popen("ls -1 '" .. dir:gsub("'", "'\\''") .. "' 2>/dev/null"))
  for f in ls:lines() do
    local name = f:match("^(spec_[%w_]+)%.lua$")
    if name then found[name] = true end
  end
  ls:close()
  for _, list in ipairs({ order.first or {}, order.last or {} }) do
    for _, name in ipairs(list) do
      if not found[name] then
        error("specs: " .. name .. " is pinned but " .. dir .. " has no " .. name .. ".lua")
      end
      pinned[name] = true
    end
  end
  for _, name in ipairs(order.first or {}) do
    out[#out + 1] = name
  end
  local rest = {}
  for name in pairs(found) do
    if not pinned[name] then rest[#rest + 1] = name end
  end
  table.sort(rest)
  for _, name in ipairs(rest) do
    out[#out + 1] = name
  end
  for _, name in ipairs(order.last or {}) do
    out[#out + 1] = name
  end
  return out
end

--- Is a test of this name selected by PROCTOR_TEST?
function T.selected(name)
  if not only then return true end
  for w in only:gmatch("[^,]+") do
    if name:find(w, 1, true) then return true end
  end
  return false
end

local cleanups -- the running test's T.defer list

local function fmt(v)
  if type(v) == "string" then
    return string.format("%q", #v > 200 and v:sub(1, 200) .. "..." or v)
  end
  if type(v) ~= "table" then return tostring(v) end
  local parts = {}
  for k, x in pairs(v) do
    parts[#parts + 1] = tostring(k) .. "=" .. fmt(x)
  end
  table.sort(parts)
  return "{" .. table.concat(parts, ", ") .. "}"
end
T.fmt = fmt

--- Set by a runner whose output Neovim shares: its messages ("E211: …",
--- "-- (insert) --") end with no newline, so every line starts a new one.
T.fresh_line = false

function T.say(s)
  T.out:write(T.fresh_line and "\n" or "", s, "\n")
  T.out:flush()
end

function T.defer(fn)
  assert(cleanups, "T.defer outside a test")
  cleanups[#cleanups + 1] = fn
end

function T.test(name, fn)
  if not T.selected(name) then return end
  local outer = cleanups
  cleanups = {}
  local t0, c0 = times and clock_ms(), times and cpu_ms()
  local ok, err = xpcall(fn, debug.traceback)
  for i = #cleanups, 1, -1 do
    local cok, cerr = xpcall(cleanups[i], debug.traceback)
    if not cok and ok then
      ok, err = false, "cleanup: " .. tostring(cerr)
    end
  end
  cleanups = outer
  if times then
    local c1 = c0 and cpu_ms()
    T.say(
      ("TIME %d %s%s"):format(
        math.floor(clock_ms() - t0),
        name,
        c1 and (" (CPU %d)"):format(math.floor(c1 - c0)) or ""
      )
    )
  end
  if ok then
    T.passed = T.passed + 1
    T.say("PASS " .. name)
  else
    T.failed = T.failed + 1
    T.say("FAIL " .. name .. ": " .. tostring(err):gsub("\n", "\n    "))
  end
end

function T.eq(a, b, msg)
  if a ~= b then
    error((msg and msg .. ": " or "") .. "expected " .. fmt(b) .. ", got " .. fmt(a), 2)
  end
end

function T.ok(v, msg)
  if not v then error(msg or "expected a true value", 2) end
  return v
end

function T.match(s, pat, msg)
  if type(s) ~= "string" or not s:find(pat) then
    error((msg and msg .. ": " or "") .. "expected " .. fmt(s) .. " to match " .. pat, 2)
  end
end

-- T.raises(fn, pattern): fn must raise an error whose message matches.
function T.raises(fn, pat)
  local ok, err = pcall(fn)
  if ok then error("expected an error matching " .. tostring(pat), 2) end
  if pat and not tostring(err):find(pat) then
    error("error " .. fmt(tostring(err)) .. " does not match " .. pat, 2)
  end
end

function T.finish()
  T.say(string.format("# %d passed, %d failed", T.passed, T.failed))
  return T.failed == 0
end

return T
