-- bench/lib.lua — helpers shared by the bench scripts, under Neovim (LuaJIT) and lua5.4.
--
-- A bench script reads its parameters from BENCH_* environment variables,
-- measures one thing once, and writes one JSON object to $BENCH_OUT; bench/run
-- repeats, interleaves and summarises. Times are milliseconds (float) from a
-- monotonic clock: vim.loop.hrtime() in Neovim, luv's hrtime() under lua5.4
-- (both are CLOCK_MONOTONIC, as is bench/ticker.c).

local M = {}

local uv = vim and vim.loop or require("luv")
M.uv = uv

-- A script started by hand, not by bench/run (which gives each case empty XDG
-- directories of its own and marks it with PROCTOR_BENCH_RUN), gets private
-- ones here, before proctor loads: its runs never land in the user's history
-- (XDG_STATE_HOME, an older one in XDG_DATA_HOME), nor its socket among the
-- user's editors (XDG_RUNTIME_DIR). They live in Neovim's temporary directory,
-- removed when it exits. The cache directory (spill files, unlinked at once)
-- stays on disk, as a user's is.
if vim and not os.getenv("PROCTOR_BENCH_RUN") then
  local dir = vim.fn.tempname()
  for _, k in ipairs({ "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_RUNTIME_DIR" }) do
    vim.env[k] = dir .. "/" .. k:lower()
    vim.fn.mkdir(vim.env[k], "p", 448) -- 0700
  end
end

--- Monotonic time in milliseconds (float).
function M.now_ms() return uv.hrtime() / 1e6 end

--- Monotonic time in nanoseconds (same clock as bench/ticker.c).
function M.now_ns() return uv.hrtime() end

--- Environment parameter: string, or number when `num` is true; `def` when unset.
function M.param(name, def, num)
  local v = os.getenv(name)
  if v == nil or v == "" then return def end
  if num then return assert(tonumber(v), name .. " must be a number") end
  return v
end

--- Root of the repository (bench/run exports it).
M.root = M.param("BENCH_ROOT", ".")
--- Path of a bench helper program built by the Makefile (build/bench/NAME).
function M.bin(name) return M.root .. "/build/bench/" .. name end

--- p50/p99/max (and n) of a list of numbers; nil fields when empty.
function M.stats(v)
  local s = {}
  for i = 1, #v do
    s[i] = v[i]
  end
  table.sort(s)
  local n = #s
  if n == 0 then return { n = 0 } end
  local function pct(p) return s[math.floor(p * (n - 1) + 0.5) + 1] end
  return { n = n, p50 = pct(0.5), p99 = pct(0.99), max = s[n] }
end

--- Fields of /proc/<pid>/status in KiB: VmRSS, VmHWM (pid defaults to "self").
function M.mem(pid)
  local f = io.open("/proc/" .. tostring(pid or "self") .. "/status")
  if not f then return {} end
  local t = {}
  for line in f:lines() do
    local k, v = line:match("^(Vm%a+):%s+(%d+) kB")
    if k then t[k] = tonumber(v) end
  end
  f:close()
  return t
end

--- Parent pid of `pid`, or nil.
function M.ppid(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return tonumber(s:match("%) %a (%d+)"))
end

--- True when process `pid` exists and is not a zombie.
function M.alive(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return false end
  local s = f:read("a")
  f:close()
  local st = s:match("%) (%a)")
  return st ~= nil and st ~= "Z" and st ~= "X"
end

--- Pids listed one per line in `path` (the cancel trees write them).
function M.read_pids(path)
  local t = {}
  local f = io.open(path)
  if not f then return t end
  for line in f:lines() do
    local p = tonumber(line)
    if p then t[#t + 1] = p end
  end
  f:close()
  return t
end

--- How many of `pids` are alive (not zombies) right now.
function M.count_alive(pids)
  local n = 0
  for _, p in ipairs(pids) do
    if M.alive(p) then n = n + 1 end
  end
  return n
end

--- Of `pids`, those still alive; they are then killed (SIGKILL, by pid) so
--- nothing outlives the measurement. Returns the count and a description
--- ("pid:state:name:ppid ...") of the survivors.
function M.survivors(pids)
  local n, desc = 0, {}
  for _, p in ipairs(pids) do
    if M.alive(p) then
      n = n + 1
      local f = io.open("/proc/" .. p .. "/stat")
      local s = f and f:read("a") or ""
      if f then f:close() end
      local name, st, pp = s:match("%((.-)%) (%a) (%d+)")
      desc[#desc + 1] = string.format("%d:%s:%s:%s", p, st or "?", name or "?", pp or "?")
      uv.kill(p, "sigkill")
    end
  end
  return n, table.concat(desc, " ")
end

local function encode(v, out)
  local t = type(v)
  if t == "table" then
    if #v > 0 or next(v) == nil then
      out[#out + 1] = "["
      for i = 1, #v do
        if i > 1 then out[#out + 1] = "," end
        encode(v[i], out)
      end
      out[#out + 1] = "]"
    else
      out[#out + 1] = "{"
      local first = true
      local keys = {}
      for k in pairs(v) do
        keys[#keys + 1] = tostring(k)
      end
      table.sort(keys)
      for _, k in ipairs(keys) do
        if not first then out[#out + 1] = "," end
        first = false
        out[#out + 1] = string.format("%q:", k)
        encode(v[k], out)
      end
      out[#out + 1] = "}"
    end
  elseif t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then
      out[#out + 1] = "null"
    elseif math.floor(v) == v and math.abs(v) < 2 ^ 53 then
      out[#out + 1] = string.format("%d", v)
    else
      out[#out + 1] = string.format("%.6g", v)
    end
  elseif t == "boolean" then
    out[#out + 1] = tostring(v)
  elseif t == "string" then
    out[#out + 1] = '"'
      .. v:gsub('[%c"\\]', function(c) return string.format("\\u%04x", c:byte()) end)
      .. '"'
  else
    out[#out + 1] = "null"
  end
end

--- JSON text of a table of numbers, strings, booleans and nested tables.
function M.json(v)
  local out = {}
  encode(v, out)
  return table.concat(out)
end

--- Write the result object to $BENCH_OUT (or stdout).
function M.result(t)
  local path = os.getenv("BENCH_OUT")
  local s = M.json(t) .. "\n"
  if path and path ~= "" then
    local f = assert(io.open(path, "w"))
    f:write(s)
    f:close()
  else
    io.stdout:write(s)
  end
end

-- ---- Neovim only ------------------------------------------------------------------

--- Start the responsiveness probe: a 10 ms one-shot timer re-armed at every
--- fire records its lateness (fire time − arm time − 10 ms), and each fire
--- vim.schedule()s a callback whose delay (run time − schedule time) is what a
--- key press would feel; each fire also reads the Lua heap's size
--- (collectgarbage "count"). `stop()` returns { timer = stats, sched = stats,
--- lua_peak_kib = the largest Lua heap seen }.
function M.probe()
  local timer = uv.new_timer()
  local late, delay = {}, {}
  local running = true
  local armed
  local lua_peak = collectgarbage("count")
  local function arm()
    armed = M.now_ms()
    timer:start(10, 0, function()
      local t = M.now_ms()
      late[#late + 1] = t - armed - 10
      local kib = collectgarbage("count")
      if kib > lua_peak then lua_peak = kib end
      vim.schedule(function() delay[#delay + 1] = M.now_ms() - t end)
      if running then arm() end
    end)
  end
  arm()
  return {
    stop = function()
      running = false
      timer:stop()
      timer:close()
      return { timer = M.stats(late), sched = M.stats(delay), lua_peak_kib = lua_peak }
    end,
  }
end

--- Run `fn(finish)` in Neovim; `finish(result)` writes the result (adding the
--- process's peak RSS as rss_kib, and history_records: what M.proctor_engine()
--- found in the history when it started the engine) and quits. An error is
--- written as { error = msg } instead.
function M.nvim_main(fn)
  local function finish(res)
    res = res or {}
    res.rss_kib = res.rss_kib or M.mem().VmHWM
    res.history_records = res.history_records or M.history_records
    M.result(res)
    vim.schedule(function() vim.cmd("qall!") end)
  end
  local ok, err = xpcall(fn, debug.traceback, finish)
  if not ok then finish({ error = tostring(err) }) end
end

--- Neovim: put plugin `name` from the peers' directory (BENCH_PEERS, see
--- bench/README.md workload 10) on 'runtimepath'; false when it is absent.
function M.peer(name)
  local peers = os.getenv("BENCH_PEERS") or ""
  local dir = peers .. "/" .. name
  if peers == "" or vim.fn.isdirectory(dir) == 0 then return false end
  vim.opt.runtimepath:prepend(dir)
  return true
end

--- The Neovim layer's engine, started now; remembers how many records it held
--- at its start (M.history_records): records loaded from a history file, whose
--- kept output is memory of this process. bench/run gives every case an empty
--- state directory, so this is 0; the report notes any case where it was not.
function M.proctor_engine()
  local eng = assert(require("proctor.engine").get())
  M.history_records = #eng:list()
  return eng
end

--- Call `fn` every `ms` milliseconds in the main loop until it returns true or
--- `limit_ms` passed (then `on_timeout()`).
function M.wait_until(ms, limit_ms, fn, on_timeout)
  local t0 = M.now_ms()
  local t = uv.new_timer()
  t:start(
    0,
    ms,
    vim.schedule_wrap(function()
      if t:is_closing() then return end
      if fn() then
        t:stop()
        t:close()
      elseif M.now_ms() - t0 > limit_ms then
        t:stop()
        t:close()
        on_timeout()
      end
    end)
  )
end

--- The proctor core for Neovim, with its wake fd watched: `on_events(list)`
--- runs in the main loop (vim.schedule) with every pending event. This is the
--- host loop the Neovim layer needs; the bench uses it when it measures the
--- core directly. Returns the engine.
function M.nvim_engine(opts, on_events)
  local core = require("proctor.core")
  local eng = assert(core.new(opts or {}))
  local poll = uv.new_poll(eng:fd())
  local function drain()
    local evs = eng:poll(65536)
    poll:start("r", function()
      poll:stop()
      vim.schedule(drain)
    end)
    if #evs > 0 then on_events(evs) end
  end
  poll:start("r", function()
    poll:stop()
    vim.schedule(drain)
  end)
  return eng
end

return M
