-- bench/nvim/fanout.lua — workload 6: N concurrent floods of BYTES each, one buffer each.
--
--   BENCH_VARIANT  jobstart_bufs | core_open_term | proctor
--   BENCH_N        how many at once (200)
--   BENCH_BYTES    per execution (1 MiB)
--
-- Two phases, each timed:
--   1. fan-out (the target): from the first start until every exit is seen and
--      every buffer is ready to show its true last line. wall_ms ends there and
--      rss_kib is Neovim's peak RSS at that moment. During the run the window
--      shows the first buffer (a user watching one of them).
--      A plain buffer is ready when it holds the last line. A proctor console
--      renders only while a window shows it (a hidden one parks the bounded
--      tail it will render when shown), so it is ready when the execution's end
--      is known and its backlog (or, for the shown one, its buffer) ends with
--      the true last line.
--   2. show each in turn (a check, and its cost): every buffer is put in the
--      window one after another until it displays its true last line; show_ms
--      is that phase's time, show_rss_kib the peak RSS at the end. A buffer
--      that does not display its last line within 30 s counts as lost.
--   jobstart_bufs   jobstart, each on_stdout chunk appended to its own buffer
--   core_open_term  INTERIM, not the proctor layer: proctor.core events fed
--                   into one nvim_open_term buffer per execution
--   proctor         the Neovim layer: run{} per execution (each has a console)

local lib = dofile(os.getenv("BENCH_ROOT") .. "/bench/lib.lua")
local api = vim.api

local VARIANT = lib.param("BENCH_VARIANT", "jobstart_bufs")
local N = lib.param("BENCH_N", 200, true)
local BYTES = lib.param("BENCH_BYTES", 2 ^ 20, true)
local LINES = math.floor(BYTES / 80)
local CMD = { lib.bin("flood"), tostring(LINES * 80) }
local LAST = string.format("%010d", LINES - 1) .. string.rep(".", 69)

local function shows_last(buf)
  for _, l in ipairs(api.nvim_buf_get_lines(buf, -64, -1, false)) do
    if l == LAST then return true end
  end
  return false
end

-- See bench/nvim/flood.lua: bigger chan_send calls crash Neovim 0.7.
local function term_send(chan, s)
  for i = 1, #s, 65536 do
    api.nvim_chan_send(chan, s:sub(i, i + 65535))
  end
end

local variants = {}

function variants.jobstart_bufs(exited, started)
  for _ = 1, N do
    local buf = api.nvim_create_buf(true, true)
    started(buf)
    vim.fn.jobstart(CMD, {
      on_stdout = function(_, data)
        local n = api.nvim_buf_line_count(buf)
        data[1] = api.nvim_buf_get_lines(buf, n - 1, n, false)[1] .. data[1]
        api.nvim_buf_set_lines(buf, n - 1, n, false, data)
      end,
      on_exit = function() exited(buf) end,
    })
  end
end

function variants.core_open_term(exited, started)
  local chans, bufs, missed = {}, {}, 0
  local eng
  eng = lib.nvim_engine({}, function(evs)
    for _, ev in ipairs(evs) do
      if ev.type == "output" then
        missed = missed + ev.missed
        term_send(chans[ev.id], (ev.data:gsub("\n", "\r\n")))
      elseif ev.state == "completed" or ev.state == "failed" then
        exited(bufs[ev.id], missed)
      end
    end
  end)
  for _ = 1, N do
    local buf = api.nvim_create_buf(true, true)
    local id = eng:start({ cmd = CMD })
    bufs[id], chans[id] = buf, api.nvim_open_term(buf, {})
    started(buf)
  end
end

function variants.proctor(exited, started)
  local proctor = require("proctor")
  proctor.setup({ notify = "never" })
  local console = require("proctor.console")
  for _ = 1, N do
    local ex
    ex = assert(proctor.run({
      cmd = CMD,
      open = { open = "none" },
      on_exit = function(_, rec)
        exited(console.get(ex.id).buf, rec.dropped and rec.dropped.stdout or 0)
      end,
    }))
    started(console.get(ex.id).buf)
  end
end

-- The proctor console of the execution shown in `buf` holds its true tail.
local function console_ready(buf)
  local console = require("proctor.console")
  local c = console.get(console.id_of_buf(buf))
  local b = c and c.backlog
  if not c or not c.ended or (b.next.stdout or 0) < LINES * 80 then return false end
  if b.n == 0 then return shows_last(buf) end
  local tail, k = "", #b.chunks
  while #tail < #LAST + 1 and k >= 1 do
    tail = b.chunks[k] .. tail
    k = k - 1
  end
  return tail:sub(-(#LAST + 1)) == LAST .. "\n"
end

lib.nvim_main(function(finish)
  local t0 = lib.now_ms()
  local bufs, n_exited, missed_total, first = {}, 0, 0, true
  local function exited(buf, missed)
    n_exited = n_exited + 1
    missed_total = math.max(missed_total, missed or 0)
    bufs[#bufs + 1] = buf
    if n_exited < N then return end
    local exit_ms = lib.now_ms() - t0
    local ready = VARIANT == "proctor" and console_ready or shows_last
    local wall_ms, rss_kib
    -- Phase 2: show each buffer in the window in turn.
    local function show_all()
      local t1 = lib.now_ms()
      local pending = vim.list_extend({}, bufs)
      local function done(lost)
        finish({
          variant = VARIANT,
          n = N,
          bytes = LINES * 80,
          exit_ms = exit_ms,
          wall_ms = wall_ms,
          rss_kib = rss_kib,
          show_ms = lib.now_ms() - t1,
          total_ms = lib.now_ms() - t0,
          show_rss_kib = lib.mem().VmHWM,
          not_shown = lost,
          missed_bytes = missed_total,
          lost = lost > 0 or missed_total > 0,
        })
      end
      lib.wait_until(1, 30000, function()
        while pending[1] and api.nvim_buf_is_valid(pending[1]) and shows_last(pending[1]) do
          table.remove(pending, 1)
        end
        if not pending[1] then
          done(0)
          return true
        end
        if api.nvim_win_get_buf(0) ~= pending[1] then api.nvim_win_set_buf(0, pending[1]) end
        return false
      end, function() done(#pending) end)
    end
    -- Phase 1 ends when every buffer is ready.
    lib.wait_until(1, 30000, function()
      for _, b in ipairs(bufs) do
        if not (api.nvim_buf_is_valid(b) and ready(b)) then return false end
      end
      wall_ms, rss_kib = lib.now_ms() - t0, lib.mem().VmHWM
      show_all()
      return true
    end, function()
      wall_ms, rss_kib = lib.now_ms() - t0, lib.mem().VmHWM
      show_all()
    end)
  end
  local function started(buf)
    if first then
      api.nvim_win_set_buf(0, buf)
      first = false
    end
  end
  assert(variants[VARIANT], "unknown variant " .. VARIANT)(exited, started)
end)
