-- bench/nvim/fanout.lua — workload 6: N concurrent floods of BYTES each, one buffer each.
--
--   BENCH_VARIANT  jobstart_bufs | core_open_term | proctor
--   BENCH_N        how many at once (200)
--   BENCH_BYTES    per execution (1 MiB)
--
-- wall_ms runs from the first start until every exit is seen and every
-- buffer shows its last line ("lost" if that takes more than 30 s after the
-- last exit); rss_kib is Neovim's peak RSS.
-- A proctor console renders only while a window shows it (hidden consoles
-- park their bounded backlog), so for the proctor variant each console is
-- shown in the window in turn after the exits, and the time it takes until
-- each one displays its true last line is part of wall_ms.
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

function variants.jobstart_bufs(exited)
  for _ = 1, N do
    local buf = api.nvim_create_buf(true, true)
    vim.fn.jobstart(CMD, {
      on_stdout = function(_, data)
        local n = api.nvim_buf_line_count(buf)
        data[1] = api.nvim_buf_get_lines(buf, n - 1, n, false)[1] .. data[1]
        api.nvim_buf_set_lines(buf, n - 1, n, false, data)
      end,
      on_exit = function()
        exited(buf)
      end,
    })
  end
end

function variants.core_open_term(exited)
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
  end
end

function variants.proctor(exited)
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
  end
end

lib.nvim_main(function(finish)
  local t0 = lib.now_ms()
  local pending, n_exited, missed_total = {}, 0, 0
  local function exited(buf, missed)
    n_exited = n_exited + 1
    missed_total = math.max(missed_total, missed or 0)
    pending[#pending + 1] = buf
    if n_exited < N then return end
    local exit_ms = lib.now_ms() - t0
    local function all_shown()
      -- Proctor consoles: show the first pending one that no window shows yet.
      if VARIANT == "proctor" and pending[1] and api.nvim_buf_is_valid(pending[1])
          and #vim.fn.win_findbuf(pending[1]) == 0 then
        api.nvim_win_set_buf(0, pending[1])
      end
      for i = #pending, 1, -1 do
        if pending[i] and api.nvim_buf_is_valid(pending[i]) and shows_last(pending[i]) then
          table.remove(pending, i)
        end
      end
      return #pending == 0
    end
    local function done(lost)
      finish({ variant = VARIANT, n = N, bytes = LINES * 80, exit_ms = exit_ms,
        wall_ms = lib.now_ms() - t0, not_shown = lost, missed_bytes = missed_total,
        lost = lost > 0 or missed_total > 0 })
    end
    lib.wait_until(5, 30000, function()
      if all_shown() then done(0) return true end
      return false
    end, function()
      done(#pending)
    end)
  end
  assert(variants[VARIANT], "unknown variant " .. VARIANT)(exited)
end)
