-- bench/nvim/peers.lua — workload 10: proctor beside the plugins a user would
-- pick instead, each through its own user path (never a re-implementation).
--
--   BENCH_WORKLOAD  fanout | seq | cr | big
--   BENCH_VARIANT   proctor | proctor_pty | toggleterm | overseer | terminal
--   BENCH_PEERS     the directory holding overseer.nvim/ and toggleterm.nvim/
--                   (PROCTOR_BENCH_PEERS of bench/run)
--   BENCH_N         fanout: runs started in one loop (100)
--   BENCH_BYTES     big: bytes of 80-byte lines (100 MiB)
--
-- fanout  N short runs (`seq 1 200`) started in one Lua loop, each with a
--         console/terminal buffer not shown: loop_ms is the time the loop held
--         the main thread (wall), loop_cpu_ms the main thread's CPU time in it;
--         the 10 ms timer probe runs until every one exited.
-- Every workload starts once the editor is up (VimEnter) and, for proctor,
-- setup()'s warm-up ran (it loads proctor.actions last), as a user's first
-- run comes after startup; each plugin's setup() is called before that.
-- seq     `seq 1 3000000` shown in the current window.
-- cr      200,000 `\r` updates (awk) shown in the current window.
-- big     `flood` BYTES shown in the current window.
-- tick_cpu: the main thread's CPU time per loop tick (see tick_meter), which
-- a loaded machine's descheduling does not inflate as it does the timer's.
-- The shown ones are done when the exit is seen and the buffer shows the final
-- value (the last number, the last line) within 10 s of it ("final shown").
--   proctor      require("proctor").run{ open = ... } (a pipe; `big`, `seq`)
--   proctor_pty  the same with pty = true
--   toggleterm   require("toggleterm.terminal").Terminal:new{ cmd }:open()/spawn()
--   overseer     require("overseer").new_task{ cmd }:start(), its buffer shown
--   terminal     :terminal (termopen in a new buffer)

local lib = dofile(os.getenv("BENCH_ROOT") .. "/bench/lib.lua")
local api = vim.api

local WORKLOAD = lib.param("BENCH_WORKLOAD", "seq")
local VARIANT = lib.param("BENCH_VARIANT", "proctor")
local N = lib.param("BENCH_N", 100, true)
local BYTES = lib.param("BENCH_BYTES", 100 * 2 ^ 20, true)

local CMD, FINAL
if WORKLOAD == "seq" then
  CMD, FINAL = "seq 1 3000000", "3000000"
elseif WORKLOAD == "cr" then
  CMD = 'awk \'BEGIN { for (i = 1; i <= 200000; i++) printf "\\r%d", i; print "" }\''
  FINAL = "200000"
elseif WORKLOAD == "big" then
  local lines = math.floor(BYTES / 80)
  CMD = lib.bin("flood") .. " " .. tostring(lines * 80)
  FINAL = string.format("%010d", lines - 1) .. string.rep(".", 69)
else
  CMD = "seq 1 200"
  FINAL = "200"
end

-- CPU time of this (the main) thread in ms, or nil without LuaJIT's ffi: the
-- fan-out loop's cost that a loaded machine's descheduling does not inflate.
local thread_cpu_ms
do
  local ok, ffi = pcall(require, "ffi")
  if ok then
    ffi.cdef(
      "typedef struct { long s; long ns; } proctor_peers_ts;"
        .. " int clock_gettime(int clk, proctor_peers_ts *ts);"
    )
    local ts = ffi.new("proctor_peers_ts")
    thread_cpu_ms = function()
      ffi.C.clock_gettime(3, ts) -- CLOCK_THREAD_CPUTIME_ID
      return tonumber(ts.s) * 1e3 + tonumber(ts.ns) / 1e6
    end
  end
end

-- Main-thread CPU time of each loop tick (ms): from a check handle (the end of
-- an iteration's I/O poll) to the next prepare (before the next poll), which
-- spans the events Neovim handles between polls (vim.schedule callbacks, the
-- terminal's refresh, timers). On a loaded machine the wall time of a tick is
-- mostly waiting for a CPU; its CPU time is what the editor itself spent.
-- Ticks under 0.1 ms are left out (most of an idle loop's).
local function tick_meter()
  if not thread_cpu_ms then return { stop = function() return nil end } end
  local uv = vim.uv or vim.loop
  local chk, prep = uv.new_check(), uv.new_prepare()
  local cpus, c0 = {}, nil
  chk:start(function() c0 = thread_cpu_ms() end)
  prep:start(function()
    if c0 then
      local d = thread_cpu_ms() - c0
      if d >= 0.1 then cpus[#cpus + 1] = d end
      c0 = nil
    end
  end)
  return {
    stop = function()
      chk:stop()
      prep:stop()
      chk:close()
      prep:close()
      return lib.stats(cpus)
    end,
  }
end

-- BENCH_TICK_LOG=ms (proctor variants): every loop tick whose main-thread CPU
-- or wall time reaches ms is listed in the result (`long_ticks`) with what ran
-- in it: drain ticks and the events they handed out by kind, consoles made,
-- renders, the engine round trips (get, read, list) and vim.fn calls (exists),
-- and the CPU of the drain, console making and rendering; `t`, when the tick
-- began (ms after `long_ticks.t0_mono_ms`, CLOCK_MONOTONIC as text), so
-- bench/schedwhere.py can say what else ran meanwhile. Wrapping the
-- functions costs a little; the figures of a logged run are not the bench's.
local TICK_LOG = tonumber(os.getenv("BENCH_TICK_LOG") or "")
local function tick_log()
  if not (TICK_LOG and thread_cpu_ms) then return { stop = function() return nil end } end
  local uv = vim.uv or vim.loop
  local engine = require("proctor.engine")
  local console = require("proctor.console")
  local E, C = engine._H, console._H
  local cur, long, nticks = {}, {}, 0
  local function bump(k, n) cur[k] = (cur[k] or 0) + (n or 1) end
  local function timed(tbl, name, key)
    local f = tbl[name]
    tbl[name] = function(...)
      local c0 = thread_cpu_ms()
      bump(key)
      local r = { f(...) }
      bump(key .. "_cpu", thread_cpu_ms() - c0)
      return unpack(r)
    end
  end
  timed(E, "drain", "drain")
  timed(C, "make", "console_made")
  timed(C, "render", "render")
  timed(C, "keymaps", "keymaps")
  timed(C, "redraw_bars", "bars")
  timed(C, "make_some", "make_some")
  for _, f in ipairs({
    "nvim_open_term",
    "nvim_create_buf",
    "nvim_buf_set_name",
    "nvim_create_autocmd",
  }) do
    timed(vim.api, f, f:sub(6))
  end
  local wrapped = {}
  local function wrap_subs(subs, what)
    for name, fn in pairs(subs) do
      if not wrapped[fn] then
        local w = function(...)
          local c0 = thread_cpu_ms()
          fn(...)
          bump(what .. name .. "_cpu", thread_cpu_ms() - c0)
        end
        wrapped[w] = true
        subs[name] = w
      end
    end
  end
  local dispatch = E.dispatch
  E.dispatch = function(ev)
    bump(ev.type == "state" and ("ev_" .. ev.state) or ("ev_" .. ev.type))
    wrap_subs(E.subs, "sub_")
    wrap_subs(E.tick_subs, "batch_")
    return dispatch(ev)
  end
  local eng = engine.current()
  local idx = getmetatable(eng).__index
  local poll = idx.poll
  idx.poll = function(...)
    local c0 = thread_cpu_ms()
    local r = poll(...)
    bump("poll_cpu", thread_cpu_ms() - c0)
    return r
  end
  for _, m in ipairs({ "get", "read", "list" }) do
    local f = idx[m]
    idx[m] = function(...)
      bump("rt_" .. m)
      return f(...)
    end
  end
  local exists = vim.fn.exists
  vim.fn.exists = function(...)
    bump("fn_exists")
    return exists(...)
  end
  -- The main thread's time spent runnable but waiting for a CPU (ms): the
  -- second field of its schedstat, so a tick's wall time past its CPU time
  -- can be told apart from a wait on something else (a lock, a syscall).
  local function run_delay_ms()
    local f = io.open("/proc/thread-self/schedstat")
    if not f then return 0 end
    local _, delay = f:read("*l"):match("^(%d+) (%d+)")
    f:close()
    return tonumber(delay) / 1e6
  end
  local chk, prep = uv.new_check(), uv.new_prepare()
  local c0, w0, d0
  local T0 = lib.now_ms()
  chk:start(function()
    c0, w0, cur = thread_cpu_ms(), uv.hrtime(), { kib0 = collectgarbage("count") }
    d0 = run_delay_ms()
  end)
  prep:start(function()
    if not c0 then return end
    nticks = nticks + 1
    local cpu, wall = thread_cpu_ms() - c0, (uv.hrtime() - w0) / 1e6
    if cpu >= TICK_LOG or wall >= TICK_LOG then
      cur.cpu, cur.wall, cur.tick, cur.t = cpu, wall, nticks, w0 / 1e6 - T0
      cur.run_delay = run_delay_ms() - d0
      cur.kib = collectgarbage("count")
      long[#long + 1] = cur
    end
    c0 = nil
  end)
  return {
    stop = function()
      chk:stop()
      prep:stop()
      return { ticks = nticks, long = long, t0_mono_ms = string.format("%.3f", T0) }
    end,
  }
end

local peer = lib.peer

local function shows_final(buf)
  if not api.nvim_buf_is_valid(buf) then return false end
  for _, l in ipairs(api.nvim_buf_get_lines(buf, -200, -1, false)) do
    if vim.trim(l) == FINAL then return true end
  end
  return false
end

-- A terminal of termopen() (toggleterm, :terminal) that printed its
-- "[Process exited N]" line is done: nothing more will reach it. Neovim 0.10
-- drops the pty's last bytes at the exit now and then (the screen then shows
-- an earlier value, e.g. 198285 of 200,000, above that line): such a run is
-- "final shown: no" at once, with the value it showed, instead of waiting out
-- the 10 s grace (which made its wall time the grace, not the terminal's).
-- proctor's console never prints that line: what counts for it is unchanged.
local function closed_without_final(buf)
  if not api.nvim_buf_is_valid(buf) then return nil end
  local lines = api.nvim_buf_get_lines(buf, -200, -1, false)
  for i = #lines, 1, -1 do
    if lines[i]:find("^%[Process exited %-?%d+%]") then
      for j = i - 1, 1, -1 do
        if vim.trim(lines[j]) ~= "" then return vim.trim(lines[j]) end
      end
      return ""
    end
  end
  return nil
end

-- Start one run of CMD; shown: in the current window. Calls exited() once.
-- Returns a function giving its buffer (nil until there is one).
local starters = {}

function starters.proctor(shown, exited, pty)
  local p = require("proctor")
  local ex = p.run({
    cmd = CMD,
    pty = pty or nil,
    notify = false,
    open = { open = shown and "current" or "none" },
    on_exit = function() exited() end,
  })
  return function()
    local c = require("proctor.console")._H.consoles[ex.id]
    return c and c.buf
  end
end

function starters.proctor_pty(shown, exited) return starters.proctor(shown, exited, true) end

function starters.toggleterm(shown, exited)
  local Terminal = require("toggleterm.terminal").Terminal
  local t = Terminal:new({
    cmd = CMD,
    hidden = true,
    close_on_exit = false,
    direction = "tab",
    on_exit = function() exited() end,
  })
  if shown then
    t:open()
  else
    t:spawn()
  end
  return function() return t.bufnr end
end

function starters.overseer(shown, exited)
  local task = require("overseer").new_task({ cmd = CMD, components = { "default" } })
  task:subscribe("on_complete", function()
    exited()
    return true
  end)
  task:start()
  local buf = task:get_bufnr()
  if shown and buf then api.nvim_win_set_buf(0, buf) end
  return function() return task:get_bufnr() end
end

function starters.terminal(shown, exited)
  local buf = api.nvim_create_buf(true, false)
  local function go()
    vim.fn.termopen(CMD, { on_exit = function() exited() end })
  end
  if shown then
    api.nvim_win_set_buf(0, buf)
    go()
  else
    api.nvim_buf_call(buf, go)
  end
  return function() return buf end
end

local M = {}

lib.nvim_main(function(finish)
  if VARIANT == "toggleterm" then
    if not peer("toggleterm.nvim") then return finish({ error = "absent: toggleterm.nvim" }) end
    require("toggleterm").setup({})
  elseif VARIANT == "overseer" then
    if vim.fn.has("nvim-0.11") == 0 then return finish({ error = "overseer needs Neovim 0.11" }) end
    if not peer("overseer.nvim") then return finish({ error = "absent: overseer.nvim" }) end
    require("overseer").setup({})
  elseif VARIANT:find("^proctor") then
    require("proctor").setup({ notify = "never" })
    lib.proctor_engine() -- the engine starts before the clock
    require("proctor.console") -- and its modules are loaded, as the peers' are by setup()
  end
  local function ready()
    if vim.v.vim_did_enter ~= 1 then return false end
    return not VARIANT:find("^proctor") or package.loaded["proctor.actions"] ~= nil
  end
  lib.wait_until(5, 10000, function()
    if not ready() then return false end
    vim.schedule(function()
      local ok, err = xpcall(M.workload, debug.traceback, finish)
      if not ok then finish({ error = tostring(err) }) end
    end)
    return true
  end, function() finish({ error = "the editor was not up within 10 s" }) end)
end)

-- The workload, from a tick of its own once the editor is up.
function M.workload(finish)
  local start = starters[VARIANT]
  local probe = lib.probe()
  local ticks = tick_meter()
  local tlog = VARIANT:find("^proctor") and tick_log() or { stop = function() return nil end }
  local t0 = lib.now_ms()
  if WORKLOAD == "fanout" then
    local left = N
    local function exited() left = left - 1 end
    local c0 = thread_cpu_ms and thread_cpu_ms()
    for _ = 1, N do
      start(false, exited)
    end
    local loop_ms = lib.now_ms() - t0
    local loop_cpu_ms = c0 and thread_cpu_ms() - c0
    lib.wait_until(5, 120000, function()
      if left > 0 then return false end
      local p = probe.stop()
      finish({
        tick_cpu = ticks.stop(),
        long_ticks = tlog.stop(),
        loop_ms = loop_ms,
        loop_cpu_ms = loop_cpu_ms,
        main_cpu_ms = c0 and thread_cpu_ms() - c0,
        t0_mono_ms = string.format("%.3f", t0),
        t1_mono_ms = string.format("%.3f", lib.now_ms()),
        wall_ms = lib.now_ms() - t0,
        timer = p.timer,
        sched = p.sched,
        lua_peak_kib = p.lua_peak_kib,
      })
      return true
    end, function() finish({ error = "not every run exited" }) end)
    return
  end
  local ended
  local buf_of = start(true, function() ended = ended or lib.now_ms() end)
  lib.wait_until(5, 180000, function()
    if not ended then return false end
    local buf = buf_of()
    local shown = buf and shows_final(buf)
    local instead = not shown and buf and closed_without_final(buf)
    if not shown and not instead and lib.now_ms() - ended < 10000 then return false end
    local wall = lib.now_ms() - t0
    local p = probe.stop()
    finish({
      tick_cpu = ticks.stop(),
      long_ticks = tlog.stop(),
      wall_ms = wall,
      exit_ms = ended - t0,
      timer = p.timer,
      sched = p.sched,
      lua_peak_kib = p.lua_peak_kib,
      final_shown = shown and true or false,
      lost = not shown,
      shown_instead = instead or nil,
    })
    return true
  end, function() finish({ error = "no exit within 180 s" }) end)
end
