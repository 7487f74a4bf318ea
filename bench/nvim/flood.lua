-- bench/nvim/flood.lua — workload 1: a flood of 80-byte lines into a visible buffer.
--
--   BENCH_VARIANT  which consumer (see `variants` below)
--   BENCH_BYTES    how much bench/flood writes (a multiple of 80)
--
-- Each variant starts `flood BYTES`, shows its buffer in the current window
-- and calls `exited()` once the exit is seen; the harness then waits until the
-- last line is in the buffer. Measured: wall time from just before the spawn
-- to "last line shown", the 10 ms timer / vim.schedule probe during that time,
-- and Neovim's peak RSS. `lost` is true when the last line never showed up
-- (within 3 s of the exit for termopen, 15 s for the others) or the lines before it are not consecutive.

local lib = dofile(os.getenv("BENCH_ROOT") .. "/bench/lib.lua")
local api = vim.api

local VARIANT = lib.param("BENCH_VARIANT", "jobstart_lines")
local BYTES = lib.param("BENCH_BYTES", 10 * 2 ^ 20, true)
local LINES = math.floor(BYTES / 80)
local CMD = { lib.bin("flood"), tostring(LINES * 80) }

local function line_text(i) return string.format("%010d", i) .. string.rep(".", 69) end
local LAST = line_text(LINES - 1)

local function show(buf) api.nvim_win_set_buf(0, buf) end

-- Feed a terminal channel in pieces of at most 64 KiB: one nvim_chan_send of a
-- few MiB overflows libvterm's stack in Neovim 0.7 (neovim/neovim#16040: its
-- on_text keeps one uint32 per input byte on the stack) and Neovim crashes.
local function term_send(chan, s)
  local n = #s
  if n <= 65536 then return api.nvim_chan_send(chan, s) end
  for i = 1, n, 65536 do
    api.nvim_chan_send(chan, s:sub(i, i + 65535))
  end
end

-- Append a list of lines whose first element continues the buffer's last line
-- (the shape of jobstart's on_stdout data).
local function append_chunk(buf, data)
  local n = api.nvim_buf_line_count(buf)
  local last = api.nvim_buf_get_lines(buf, n - 1, n, false)[1]
  data[1] = last .. data[1]
  api.nvim_buf_set_lines(buf, n - 1, n, false, data)
end

local variants = {}

-- jobstart, every on_stdout chunk appended with nvim_buf_set_lines.
function variants.jobstart_lines(exited)
  local buf = api.nvim_create_buf(true, true)
  show(buf)
  vim.fn.jobstart(CMD, {
    on_stdout = function(_, data) append_chunk(buf, data) end,
    on_exit = function() exited(buf) end,
  })
end

-- jobstart, chunks collected and appended every 100 ms by a timer.
function variants.jobstart_batch(exited)
  local buf = api.nvim_create_buf(true, true)
  show(buf)
  local pending = {}
  local function flush()
    if #pending == 0 then return end
    local lines = pending[1]
    for i = 2, #pending do
      local d = pending[i]
      lines[#lines] = lines[#lines] .. d[1]
      for k = 2, #d do
        lines[#lines + 1] = d[k]
      end
    end
    pending = {}
    append_chunk(buf, lines)
  end
  local timer = vim.fn.timer_start(100, flush, { ["repeat"] = -1 })
  vim.fn.jobstart(CMD, {
    on_stdout = function(_, data) pending[#pending + 1] = data end,
    on_exit = function()
      vim.fn.timer_stop(timer)
      flush()
      exited(buf)
    end,
  })
end

-- vim.loop.spawn, one vim.schedule per read that splits and appends the chunk.
function variants.luv_schedule(exited)
  local uv = vim.loop
  local buf = api.nvim_create_buf(true, true)
  show(buf)
  local out = uv.new_pipe(false)
  local eof, code = false, nil
  local function maybe_done()
    if eof and code then exited(buf) end
  end
  local handle
  handle = uv.spawn(CMD[1], { args = { CMD[2] }, stdio = { nil, out, nil } }, function(c)
    handle:close()
    vim.schedule(function()
      code = c
      maybe_done()
    end)
  end)
  out:read_start(function(err, data)
    assert(not err, err)
    if data then
      vim.schedule(function() append_chunk(buf, vim.split(data, "\n", { plain = true })) end)
    else
      out:close()
      vim.schedule(function()
        eof = true
        maybe_done()
      end)
    end
  end)
end

-- nvim_open_term fed by jobstart (LF made CRLF, as a pty would; see term_send).
function variants.open_term(exited)
  local buf = api.nvim_create_buf(true, true)
  show(buf)
  local chan = api.nvim_open_term(buf, {})
  vim.fn.jobstart(CMD, {
    on_stdout = function(_, data) term_send(chan, table.concat(data, "\r\n")) end,
    on_exit = function() exited(buf) end,
  })
end

-- termopen: the job runs on a pty and Neovim's terminal renders it.
function variants.termopen(exited)
  local buf = api.nvim_create_buf(true, true)
  show(buf)
  vim.fn.termopen(CMD, {
    on_exit = function() exited(buf) end,
  })
end

-- INTERIM, not the proctor layer: proctor.core events (wake fd watched by
-- vim.loop.new_poll, drained in vim.schedule) fed straight into nvim_open_term.
function variants.core_open_term(exited)
  local buf = api.nvim_create_buf(true, true)
  show(buf)
  local chan = api.nvim_open_term(buf, {})
  local missed = 0
  local eng
  eng = lib.nvim_engine({}, function(evs)
    for _, ev in ipairs(evs) do
      if ev.type == "output" then
        missed = missed + ev.missed
        term_send(chan, (ev.data:gsub("\n", "\r\n")))
      elseif ev.state == "completed" or ev.state == "failed" then
        exited(buf, { missed_bytes = missed })
        eng:close()
      end
    end
  end)
  eng:start({ cmd = CMD })
end

-- The proctor Neovim layer: run{} and its console shown in the current window.
-- The console renders at most console.bytes_per_tick per tick and, when more
-- than backlog_limit waits, skips to the tail and says so in the console
-- (visible in `gaps`); the engine still got every byte (`record_bytes`).
-- Its setup() and engine start come before the clock (see `prepare` below).
function variants.proctor(exited)
  local proctor = require("proctor")
  local console = require("proctor.console")
  local ex
  ex = assert(proctor.run({
    cmd = CMD,
    on_exit = function(_, rec)
      exited(console.get(ex.id).buf, {
        record_bytes = rec.bytes and rec.bytes.stdout,
        missed_bytes = rec.dropped and rec.dropped.stdout or 0,
      })
    end,
  }))
  ex:open({ open = "current" })
end

-- Is the last line shown, and are the lines before it consecutive?
local function check(buf)
  local n = api.nvim_buf_line_count(buf)
  local from = math.max(0, n - 64)
  local tail = api.nvim_buf_get_lines(buf, from, n, false)
  for i = #tail, 1, -1 do
    if tail[i] == LAST then
      local idx = from + i - 1 -- 0-based buffer line of LAST
      local back = math.min(idx, 2000)
      local prev = api.nvim_buf_get_lines(buf, idx - back, idx, false)
      local gaps = 0
      for k = 1, #prev do
        if tonumber(prev[k]:sub(1, 10)) ~= LINES - 1 - (back - k + 1) then gaps = gaps + 1 end
      end
      return true, gaps, n
    end
  end
  return false
end

lib.nvim_main(function(finish)
  local t0
  local probe
  local exit_ms
  local function exited(buf, extra)
    exit_ms = exit_ms or lib.now_ms() - t0
    local function done(shown, gaps, nlines, short)
      -- When the last line never shows, the run ended at the exit.
      local wall = shown and lib.now_ms() - t0 or exit_ms
      local p = probe.stop()
      local res = extra or {}
      res.variant, res.bytes, res.lines = VARIANT, LINES * 80, LINES
      res.wall_ms, res.exit_ms = wall, exit_ms
      res.lines_per_s = LINES / (wall / 1000)
      -- Lost: the last line never showed, the engine did not get every byte, or
      -- (variants that render every byte) the lines before the last one are not
      -- consecutive. Not counted as lost, reported apart: the proctor console
      -- skips to the tail on purpose under a flood and says so (`gaps`), and the
      -- engine's ring keeps only the newest output_limit bytes for late readers
      -- (`missed_bytes`: the head dropped while the host was behind).
      res.lost = not shown
        or (res.record_bytes ~= nil and res.record_bytes ~= LINES * 80)
        or (VARIANT ~= "proctor" and ((gaps or 0) > 0 or (res.missed_bytes or 0) > 0))
      res.gaps, res.buf_lines, res.short_bytes = gaps, nlines, short
      res.timer, res.sched, res.lua_peak_kib = p.timer, p.sched, p.lua_peak_kib
      if VARIANT == "proctor" then -- records beside this run's: loaded from a history
        res.history_records = #require("proctor.engine").get():list() - 1
      end
      finish(res)
    end
    local shown, gaps, n = check(buf)
    if shown then return done(shown, gaps, n) end
    -- termopen is known to drop its tail: give it 3 s; the others 15 s.
    lib.wait_until(2, VARIANT == "termopen" and 3000 or 15000, function()
      local s, g, nn = check(buf)
      if s then done(s, g, nn) end
      return s
    end, function()
      -- Report how far it got: the highest line number in the buffer's tail.
      local seen = -1
      for _, l in ipairs(api.nvim_buf_get_lines(buf, -64, -1, false)) do
        seen = math.max(seen, tonumber(l:sub(1, 10)) or -1)
      end
      done(false, nil, api.nvim_buf_line_count(buf), (LINES - 1 - seen) * 80)
    end)
  end
  local v = assert(variants[VARIANT], "unknown variant " .. VARIANT)
  local function go()
    probe = lib.probe()
    t0 = lib.now_ms()
    v(exited)
  end
  if VARIANT ~= "proctor" then return go() end
  -- As in workload 10 (bench/nvim/peers.lua): proctor's setup(), its engine
  -- start and its console's modules come before the clock, and the run once
  -- the editor is up and setup()'s warm-up ran (it loads proctor.actions
  -- last), as a user's first run comes after startup. Started in the same
  -- chunk as the clock, that one-time start-up was the run's one long tick
  -- (20-40 ms: modules read and compiled, core.so loaded, the engine thread
  -- and the shepherd started), and with ~40 probe fires a run, the p99.
  require("proctor").setup({ notify = "never" })
  lib.proctor_engine()
  require("proctor.console")
  lib.wait_until(5, 10000, function()
    if vim.v.vim_did_enter ~= 1 or not package.loaded["proctor.actions"] then return false end
    vim.schedule(go)
    return true
  end, function() finish({ error = "the editor was not up within 10 s" }) end)
end)
