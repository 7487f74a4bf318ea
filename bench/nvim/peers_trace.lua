-- bench/nvim/peers_trace.lua — where the wall time of workload 10's `cr` row
-- goes (bench/nvim/peers.lua): one run, with timestamps at each step from the
-- start call to the final value in the buffer. Not run by bench/run:
--
--   BENCH_ROOT=. BENCH_VARIANT=proctor_pty BENCH_PEERS=<dir of toggleterm.nvim> \
--     nvim --headless -u NONE -i NONE -n --cmd 'set rtp^=.' \
--     -c 'luafile bench/nvim/peers_trace.lua'
--
--   BENCH_VARIANT  proctor_pty | toggleterm | terminal
--   BENCH_WRAP     1 (default): the command runs inside `bash -c` that writes
--                  $EPOCHREALTIME before and after awk to a private file (the
--                  job's own start and end, µs); 0: awk alone, as peers.lua
--
-- Prints one JSON object, times in ms from t0 (just before the start call):
--   start_ms       how long the start call held the main thread
--   job_start      the job's shell began (exec done), job_end: awk returned
--   first_out, last_out   (proctor) first / last output event dispatched on
--                  the main thread; out_events, out_bytes
--   rec_started, rec_ended  (proctor) the record's started_at / ended_at
--                  (epoch ms: 1 ms resolution) — the engine saw the start / exit
--   exit_event     (proctor) the terminal state event dispatched on the main thread
--   exited         the variant's exit callback (what peers.lua's exit_ms is)
--   sends          (proctor) nvim_chan_send calls: count, bytes, first, last data, final
--   drains, renders  (proctor) count and the longest (ms)
--   first_lines    the buffer first changed after the start (Neovim's terminal refresh)
--   shown          the final value appeared in the buffer (nvim_buf_attach on_lines)
--   late           the 10 ms timer's late fires (> 2 ms): { at, late }
--   cpu_ms         the main thread's CPU time from t0 to shown

local lib = dofile(os.getenv("BENCH_ROOT") .. "/bench/lib.lua")
local api = vim.api
local uv = vim.uv or vim.loop
local ffi = require("ffi")

ffi.cdef([[
  typedef struct { long s; long ns; } proctor_trace_ts;
  int clock_gettime(int clk, proctor_trace_ts *ts);
]])
local ts = ffi.new("proctor_trace_ts")
local function cpu_ms()
  ffi.C.clock_gettime(3, ts) -- CLOCK_THREAD_CPUTIME_ID
  return tonumber(ts.s) * 1e3 + tonumber(ts.ns) / 1e6
end

-- CPU ns (schedstat) and context switches of each thread of this process, by
-- name and tid: what the engine thread and libuv's threads spent.
local function threads()
  local t = {}
  for _, tid in ipairs(vim.fn.readdir("/proc/self/task")) do
    local dir = "/proc/self/task/" .. tid
    local f = io.open(dir .. "/schedstat")
    local c = io.open(dir .. "/comm")
    local st = io.open(dir .. "/status")
    if f and c then
      local ns = tonumber(f:read("a"):match("^(%d+)"))
      local vol, invol = 0, 0
      if st then
        local txt = st:read("a")
        vol = tonumber(txt:match("\nvoluntary_ctxt_switches:%s*(%d+)")) or 0
        invol = tonumber(txt:match("nonvoluntary_ctxt_switches:%s*(%d+)")) or 0
      end
      t[c:read("l") .. "/" .. tid] = { ns = ns, vol = vol, invol = invol }
    end
    for _, h in ipairs({ f, c, st }) do
      if h then h:close() end
    end
  end
  return t
end

local VARIANT = lib.param("BENCH_VARIANT", "proctor_pty")
local WRAP = lib.param("BENCH_WRAP", "1") ~= "0"
local FINAL = "200000"
local AWK = 'awk \'BEGIN { for (i = 1; i <= 200000; i++) printf "\\r%d", i; print "" }\''
local STAMPS = vim.fn.tempname()
local CMD = AWK
if WRAP then
  CMD = string.format(
    "bash -c %s",
    vim.fn.shellescape(
      string.format("echo $EPOCHREALTIME > %s; %s; echo $EPOCHREALTIME >> %s", STAMPS, AWK, STAMPS)
    )
  )
end

-- Epoch ms of the monotonic clock's zero (to place $EPOCHREALTIME and records).
local function epoch_offset()
  local s, us = uv.gettimeofday()
  return s * 1e3 + us / 1e3 - lib.now_ms()
end

local T = { variant = VARIANT, nvim = tostring(vim.version()) }
local t0
local function rel(ms) return ms and math.floor((ms - t0) * 100 + 0.5) / 100 end
local function now() return rel(lib.now_ms()) end

-- Main-thread hooks of proctor: events, drains, renders, sends.
local function hook_proctor(id_of)
  local engine = require("proctor.engine")
  local EH = engine._H
  local CH = require("proctor.console")._H
  T.out_events, T.out_bytes, T.sends = 0, 0, { n = 0, bytes = 0 }
  T.drains, T.renders = { n = 0, max = 0 }, { n = 0, max = 0 }
  engine.subscribe("trace", function(ev)
    if ev.id ~= id_of() then return end
    if ev.type == "output" then
      T.first_out = T.first_out or now()
      T.last_out = now()
      T.out_events = T.out_events + 1
      T.out_bytes = T.out_bytes + #ev.data
    elseif engine.TERMINAL[ev.state] then
      T.exit_event = now()
    end
  end)
  local function timed(tbl, name, into)
    local f = tbl[name]
    tbl[name] = function(...)
      local a = lib.now_ms()
      local r1, r2 = f(...)
      local d = lib.now_ms() - a
      into.n = into.n + 1
      if d > into.max then
        into.max, into.max_at = d, rel(a)
      end
      return r1, r2
    end
  end
  timed(EH, "drain", T.drains)
  timed(CH, "render", T.renders)
  -- main-thread time by part (ms in all): the poll, the backlog's take (with
  -- the \r coalescing inside it), the overwrite scan alone, the sends
  T.parts = {}
  local function acc(tbl, name, key)
    local f = tbl[name]
    local into = { n = 0, ms = 0 }
    T.parts[key] = into
    tbl[name] = function(...)
      local a = uv.hrtime()
      local r1, r2, r3 = f(...)
      into.n, into.ms = into.n + 1, into.ms + (uv.hrtime() - a) / 1e6
      return r1, r2, r3
    end
  end
  local mt = getmetatable(engine.current())
  local methods = mt and type(mt.__index) == "table" and mt.__index
  if methods and methods.poll then acc(methods, "poll", "poll") end
  acc(require("proctor.console.backlog"), "take", "take")
  acc(require("proctor.console.overwrite"), "feed", "feed")
  acc(CH, "on_event", "console_on_event")
  local send = CH.send
  local sent = { n = 0, ms = 0 }
  T.parts.send = sent
  CH.send = function(c, data)
    local a = uv.hrtime()
    local s = T.sends
    s.n, s.bytes = s.n + 1, s.bytes + #data
    s.first = s.first or now()
    if data:find(FINAL, 1, true) then s.data_last = now() end
    if data:find("[proctor]", 1, true) then s.final = now() end
    send(c, data)
    sent.n, sent.ms = sent.n + 1, sent.ms + (uv.hrtime() - a) / 1e6
  end
end

local peer = lib.peer

local function done()
  T.cpu_ms = cpu_ms() - T.cpu_ms
  local th = threads()
  T.threads = {}
  for k, v in pairs(th) do
    local a = T.threads0[k] or { ns = 0, vol = 0, invol = 0 }
    local ms = (v.ns - a.ns) / 1e6
    if ms > 0.05 then
      T.threads[k:gsub("/%d+$", "") .. (T.threads[k:gsub("/%d+$", "")] and "+" or "")] =
        { ms = ms, vol = v.vol - a.vol, invol = v.invol - a.invol }
    end
  end
  T.threads0 = nil
  if T.record then
    pcall(T.record)
    T.record = nil
  end
  local f = io.open(STAMPS)
  if f then
    local off = epoch_offset()
    local a, b = f:read("n"), f:read("n")
    f:close()
    os.remove(STAMPS)
    if a then T.job_start = rel(a * 1e3 - off) end
    if b then T.job_end = rel(b * 1e3 - off) end
  end
  lib.result(T)
  vim.schedule(function() vim.cmd("qall!") end)
end

local function watch(buf)
  api.nvim_buf_attach(buf, false, {
    on_lines = function(_, b, _, first, _, last_new)
      T.first_lines = T.first_lines or now()
      if T.shown then return true end
      for _, l in ipairs(api.nvim_buf_get_lines(b, first, last_new, false)) do
        if vim.trim(l) == FINAL then
          T.shown = now()
          vim.schedule(done)
          return true
        end
      end
    end,
  })
end

local function workload()
  local late = {}
  T.late = late
  local timer = uv.new_timer()
  local armed
  local function arm()
    armed = lib.now_ms()
    timer:start(10, 0, function()
      local t = lib.now_ms()
      if t - armed - 10 > 2 then late[#late + 1] = { at = rel(armed), late = t - armed - 10 } end
      if not T.shown then arm() end
    end)
  end
  local off = epoch_offset()
  local ex, buf
  T.threads0 = threads()
  T.cpu_ms = cpu_ms()
  t0 = lib.now_ms()
  arm()
  if VARIANT == "proctor_pty" then
    local id
    hook_proctor(function() return id end)
    ex = require("proctor").run({
      cmd = CMD,
      pty = true,
      notify = false,
      open = { open = "current" },
      on_exit = function() T.exited = now() end,
    })
    id = ex.id
    T.start_ms = now()
    buf = require("proctor.console")._H.consoles[id].buf
    watch(buf)
    T.record = function()
      local rec = require("proctor.engine").current():get(id)
      T.rec_created = rel(rec.created_at - off)
      T.rec_started = rec.started_at and rel(rec.started_at - off)
      T.rec_ended = rec.ended_at and rel(rec.ended_at - off)
    end
  elseif VARIANT == "toggleterm" then
    local Terminal = require("toggleterm.terminal").Terminal
    local t = Terminal:new({
      cmd = CMD,
      hidden = true,
      close_on_exit = false,
      direction = "tab",
      on_exit = function() T.exited = now() end,
    })
    t:open()
    T.start_ms = now()
    watch(t.bufnr)
  else
    buf = api.nvim_create_buf(true, false)
    api.nvim_win_set_buf(0, buf)
    vim.fn.termopen(CMD, { on_exit = function() T.exited = now() end })
    T.start_ms = now()
    watch(buf)
  end
  vim.defer_fn(function()
    if not T.shown then
      T.shown = false
      done()
    end
  end, 10000)
end

if VARIANT == "toggleterm" then
  assert(peer("toggleterm.nvim"), "BENCH_PEERS has no toggleterm.nvim")
  require("toggleterm").setup({})
elseif VARIANT == "proctor_pty" then
  require("proctor").setup({ notify = "never" })
  require("proctor.engine").get()
  require("proctor.console")
end
lib.wait_until(5, 10000, function()
  if vim.v.vim_did_enter ~= 1 then return false end
  if VARIANT == "proctor_pty" and not package.loaded["proctor.actions"] then return false end
  vim.defer_fn(workload, 200) -- after the start-up's own ticks
  return true
end, function() error("the editor was not up within 10 s") end)
