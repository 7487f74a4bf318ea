-- bench/nvim/fanout_cpu.lua — where the main thread's time goes in a fan-out:
-- N `require("proctor").run{}` calls in one Lua loop, each with a console
-- (`open = { open = "none" }`), as workload 10's fanout row does.
--
-- Main-thread CPU time, not wall time: a loaded machine deschedules the
-- process, which wall time counts and CPU time does not. The clock is
-- CLOCK_THREAD_CPUTIME_ID of the main thread (LuaJIT's ffi); os.clock() and
-- getrusage() would add the engine thread's time.
--
--   nvim --headless -u NONE -i NONE -n --cmd 'set rtp^=.' \
--     -c 'luafile bench/nvim/fanout_cpu.lua'
--
--   BENCH_N      runs per loop (100)
--   BENCH_REPS   loops, each after the previous one's runs all ended (7)
--   BENCH_PARTS  1: also time the parts of run() (wrapping them costs a little)
--   BENCH_COLD   1: start the first loop in the tick of setup(), before its
--                warm-up (H.warm_up in lua/proctor/init.lua) had its tick; by
--                default the first loop waits for it (at most 2 s), as a user's
--                first fan-out comes after the editor is up
--
-- Prints one JSON object: loop_cpu_ms and loop_wall_ms per repetition and
-- their medians, the CPU time of the ticks after the loop until every console
-- is made (after_cpu_ms), and with BENCH_PARTS the median per part (µs per run).

local ffi = require("ffi")
local uv = vim.uv or vim.loop

ffi.cdef([[
  typedef struct { long tv_sec; long tv_nsec; } proctor_bench_ts;
  int clock_gettime(int clk, proctor_bench_ts *ts);
]])
local CLOCK_THREAD_CPUTIME_ID = 3
local ts = ffi.new("proctor_bench_ts")
local function cpu_us()
  ffi.C.clock_gettime(CLOCK_THREAD_CPUTIME_ID, ts)
  return tonumber(ts.tv_sec) * 1e6 + tonumber(ts.tv_nsec) / 1e3
end

local N = tonumber(os.getenv("BENCH_N") or "") or 100
local REPS = tonumber(os.getenv("BENCH_REPS") or "") or 7
local PARTS = os.getenv("BENCH_PARTS") == "1"
local COLD = os.getenv("BENCH_COLD") == "1"

-- its XDG directories private before proctor loads (its runs stay out of the user's history)
dofile((os.getenv("BENCH_ROOT") or ".") .. "/bench/lib.lua")
local p = require("proctor")
p.setup({ notify = "never" })
local eng = require("proctor.engine").get()
local console = require("proctor.console")

-- Per part: total µs and calls during a loop (only while `inside`).
local parts, inside = {}, false
local function wrap(tbl, key, name)
  local f = tbl[key]
  assert(type(f) == "function", name)
  tbl[key] = function(...)
    if not inside then return f(...) end
    local t0 = cpu_us()
    local r = { f(...) }
    local x = parts[name] or { us = 0, n = 0 }
    x.us, x.n = x.us + cpu_us() - t0, x.n + 1
    parts[name] = x
    return unpack(r, 1, table.maxn(r))
  end
end

local function upvalue(fn, want)
  for i = 1, 200 do
    local name, v = debug.getupvalue(fn, i)
    if not name then return nil end
    if name == want then return v end
  end
end

if PARTS then
  local H = assert(upvalue(p.run, "H"), "init.lua's H")
  for _, k in ipairs({ "run", "filter", "plain", "spec", "check_spec", "terminal_env", "hook" }) do
    if H[k] then wrap(H, k, "init." .. k) end
  end
  wrap(getmetatable(eng).__index, "start", "eng:start")
  wrap(console, "open_run", "console.open_run")
  wrap(console, "window", "console.window")
  wrap(require("proctor.config"), "get", "config.get")
  wrap(vim, "tbl_extend", "vim.tbl_extend")
  wrap(vim, "schedule", "vim.schedule")
  for _, k in ipairs({ "getcwd", "fnamemodify", "expand", "isdirectory", "exists" }) do
    wrap(vim.fn, k, "vim.fn." .. k)
  end
end

local function median(t)
  local s = vim.deepcopy(t)
  table.sort(s)
  return s[math.floor((#s + 1) / 2)]
end

local res = { n = N, loop_cpu_ms = {}, loop_wall_ms = {}, after_cpu_ms = {} }
local per_part = {}

local function all_made(exs)
  for _, ex in ipairs(exs) do
    local stub = console._H.pending[ex.id] -- a hidden run's terminal waits for a window
    if not (console._H.consoles[ex.id] or (stub and stub.made_buf)) then return false end
  end
  return true
end

local function all_ended(exs)
  local TERMINAL = require("proctor.engine").TERMINAL
  for _, ex in ipairs(exs) do
    local r = eng:get(ex.id)
    if not (r and TERMINAL[r.state]) then return false end
  end
  return true
end

local rep = 0
local function one()
  rep = rep + 1
  parts = {}
  local exs = {}
  collectgarbage("collect")
  inside = true
  local w0, c0 = uv.hrtime(), cpu_us()
  for i = 1, N do
    exs[i] = p.run({ cmd = "seq 1 200", notify = false, open = { open = "none" } })
  end
  local c1, w1 = cpu_us(), uv.hrtime()
  inside = false
  table.insert(res.loop_cpu_ms, (c1 - c0) / 1e3)
  table.insert(res.loop_wall_ms, (w1 - w0) / 1e6)
  for name, x in pairs(parts) do
    per_part[name] = per_part[name] or {}
    table.insert(per_part[name], x.us / N)
  end
  -- the ticks after the loop, until every console is made: main-thread CPU
  vim.wait(60000, function() return all_made(exs) end, 1)
  table.insert(res.after_cpu_ms, (cpu_us() - c1) / 1e3)
  vim.wait(60000, function() return all_ended(exs) end, 20)
  p.purge()
  if rep < REPS then return vim.schedule(one) end
  res.loop_cpu_ms_median = median(res.loop_cpu_ms)
  res.loop_wall_ms_median = median(res.loop_wall_ms)
  res.after_cpu_ms_median = median(res.after_cpu_ms)
  if PARTS then
    res.parts_us_per_run = {}
    for name, v in pairs(per_part) do
      res.parts_us_per_run[name] = math.floor(median(v) * 10 + 0.5) / 10
    end
  end
  local f = io.open("/proc/loadavg")
  res.loadavg = f and f:read("*l")
  if f then f:close() end
  io.stdout:write(vim.json.encode(res) .. "\n")
  vim.cmd("qall!")
end

-- setup()'s warm-up loads proctor.actions last (with the console extension)
local warm_by = uv.hrtime() + 2e9
local function first()
  if COLD or package.loaded["proctor.actions"] or uv.hrtime() > warm_by then return one() end
  vim.defer_fn(first, 5)
end
vim.schedule(first)
