--- proctor.console — one terminal buffer per execution, `proctor://<id>[/<label>]`.
---
--- A console is a buffer given to `nvim_open_term`; the output of the execution
--- is written into it with `nvim_chan_send`, so the terminal emulator renders
--- colours, `\r` progress bars and cursor movement. Unlike `termopen` nothing is
--- lost: the bytes come from the engine (events, or its ring buffer on replay),
--- not from a pty Neovim owns.
---
---   output event ──► backlog: dedupe by offset, queue ──► render tick
---                                │ > backlog_limit        │ ≤ bytes_per_tick
---                                ▼                        ▼
---                        keep tail_bytes,           nvim_chan_send
---                        count skipped bytes        (pipe: \n → \r\n)
---
--- Only consoles shown in a window are rendered: feeding a terminal emulator
--- is the expensive part, so a hidden console keeps its bounded backlog and
--- renders it when a window shows it again (BufWinEnter).
---
--- Neovim's terminal mirrors its screen into the buffer on a timer (every
--- 10 ms). A resize and new output between two such refreshes garble the
--- buffer (lines lost or repeated, 0.7 to 0.12 alike), so after the windows
--- of a console change size nothing is sent to it until the terminal has
--- refreshed (its changedtick moves) or `SETTLE_MS` passed (a resize that did
--- not change the terminal's size refreshes nothing). A console opened with
--- |proctor.run()|, or opened before its hidden console was made, gets its
--- terminal made inside its window, so it starts at the right size and is
--- not held.
---
--- PTY executions get the text area of the smallest window showing their
--- console (winbar excluded). |proctor.run()| with `open` makes the window
--- first, so the process sees that size from its first byte.
---
--- Opening a console replays what the ring buffer holds and then follows the
--- events; it works for executions started anywhere (the core, an RPC client).
--- Closing the window never stops the process.
---
--- The parts: console/backlog.lua (the bytes waiting: a pure model),
--- console/editor.lua (typing into a pipe console: a pure model),
--- console/window.lua (the windows); this file holds the consoles, their
--- terminals and the render tick. Requiring this module has no side effects.

local M = {}
local H = {}

local api = vim.api
local proctor = require("proctor")
local config = require("proctor.config")
local compat = require("proctor.compat")
local uv = compat.uv
local engine = require("proctor.engine")
local util = require("proctor.util")
local keys = require("proctor.keys")
local Backlog = require("proctor.console.backlog")
local editor = require("proctor.console.editor")
local window = require("proctor.console.window")

---@class proctor.Console
---@field id integer
---@field buf integer
---@field chan integer
---@field pty boolean
---@field backlog proctor.Backlog output waiting to be rendered
---@field ended table|nil terminal record once known
---@field final_done boolean
---@field editor proctor.LineEditor pipe consoles: the line being typed
---@field parked boolean|nil not shown in any window: output waits in the backlog
---@field size_key string sizes of the windows the terminal last took its size from
---@field hold {tick: integer, until_ms: number}|nil no output until the terminal refreshed
---@field cols integer|nil pty size the core accepted last
---@field rows integer|nil

H.consoles = {} ---@type table<integer, proctor.Console>
H.dirty = {} -- ids with something to render, in order
H.is_dirty = {}
H.render_scheduled = false
H.batch_render = false -- a render waits for the end of the batch being dispatched
H.timer = nil
H.tick_timer = nil
H.settle_timer = nil
H.settling = false
H.waiting = {} -- ids of held consoles with something to render
H.hooked = false
H.pending = {} ---@type table<integer, table> runs' consoles not made yet (see M.open_run)
H.pending_order = {} -- their ids, oldest first
H.making = false -- a tick that makes pending consoles is scheduled
H.made = {} -- id -> true: a console buffer of this id was made in this Neovim
H.bars_scheduled = false
-- Time one tick may spend making the consoles of runs (ms); at least one is made per tick.
H.MAKE_MS = 2
H.make_ms = 1 -- what one step of making a console cost lately (ms); see H.make_some
H.make_steps = 0 -- steps of making queued consoles taken (tests count them per tick)
-- Time one render tick may spend feeding terminals (ms); see H.render.
H.RENDER_MS = 4
-- Lines given to the terminals per H.PACE_MS. A terminal costs about 15 us of
-- the main thread per line (libvterm at the send, and Neovim's 10 ms refresh
-- copying each new line into the buffer): 300 lines are about 4.5 ms of each
-- 10 ms, whatever the line length. A flood of short lines skips to the tail
-- (backlog_limit) sooner instead of holding the editor.
H.PACE_MS = 10
H.LINES_PER_PACE = 300
H.pace_start, H.pace_lines = 0, 0
-- What one nvim_chan_send costs is measured, not assumed: libvterm parses the
-- bytes and scrolls each line inside the call, so a send is sized to fit what
-- is left of the tick's H.RENDER_MS. Its cost is counted in units (a line, or
-- H.UNIT_BYTES bytes of one: a long line or a \r update costs by its bytes);
-- H.unit_us follows the measured cost of recent sends (per unit, us), kept
-- within H.UNIT_US_MIN..H.UNIT_US_MAX so sends that were descheduled on a
-- loaded machine cannot stall the console (at the cap, about twice what a unit
-- costs, a tick still gives the terminal 160 units).
-- A tick's sends then stay within H.RENDER_MS, the last send's own unit aside.
H.UNIT_BYTES = 64
H.UNIT_US_MIN, H.UNIT_US_MAX = 1, 25
H.unit_us = 15
-- The clock of the render's time bounds (ns); a test makes sends look slow.
H.clock = uv.hrtime
-- Longest wait for a resized terminal to refresh (Neovim refreshes 10 ms after a change).
H.SETTLE_MS = 100

--- Open (or focus) the console of execution `id`.
---@param id integer
---@param opts proctor.OpenOpts|nil open: "split" | "vsplit" | "tab" | "float" | "current" |
---   "none" (only create the buffer); window: a window from M.window() to show the console in
---   (open, size and enter were applied when it was made)
---@return integer|nil buf, integer|string|nil win_or_err
function M.open(id, opts)
  opts = opts or {}
  local eng, err = engine.get()
  if not eng then return nil, err end
  if type(id) ~= "number" then return nil, "EINVAL: execution id must be a number" end
  local made = opts.window and api.nvim_win_is_valid(opts.window.win) and opts.window or nil
  local c = H.consoles[id]
  if H.pending[id] then
    -- Not made yet: its window first, then its terminal inside it, at the
    -- window's size. Made elsewhere and shown here, the terminal would be
    -- resized while output flows, which garbles it (see the header).
    if not made then made = window.placeholder(opts) end
    c = H.make(id, made and made.win)
  elseif not c or not api.nvim_buf_is_valid(c.buf) then
    local rec, msg = eng:get(id)
    if not rec then return nil, msg end
    H.hook()
    c = H.create(eng, rec, made and made.win)
  elseif made then
    made:cancel()
    made = nil
  end
  local win
  if made then
    -- keepalt: the window's alternate file stays the one the run came from
    -- (`%` typed in the console expands to it, CTRL-^ goes back to it)
    if
      not pcall(api.nvim_win_call, made.win, function() vim.cmd("keepalt buffer " .. c.buf) end)
    then
      api.nvim_win_set_buf(made.win, c.buf)
    end
    made:done()
    win = made.win
    vim.w[win].proctor_window = true
    window.set_bar(win)
    window.follow(win, c.buf)
  else
    local how = opts.open or config.get().console.open
    if how == "none" then return c.buf, nil end
    win = window.show(
      c.buf,
      { how = how, size = opts.size, enter = opts.enter, win = opts.win, reuse = opts.reuse }
    )
  end
  H.last = id
  H.resize_all()
  if win and api.nvim_get_current_win() == win then H.start_insert(c) end
  return c.buf, win
end

--- The console of a run that just started (proctor.run{ open }), made without
--- waiting for the engine thread: `rec` is what the host knows ({ id, label,
--- pty, and a PTY's cols and rows: the size its process starts with, which
--- H.resize_all then does not set again}), and every byte is still to come, so nothing is read back from the
--- ring buffer. Shown in a window (`opts.window`, or an `open` other than
--- "none") it is made now; a hidden one gets its buffer on a later tick, at
--- most `H.MAKE_MS` of them per tick (100 runs in one loop return at once),
--- and its terminal when a window first shows that buffer; its output is kept
--- meanwhile as a hidden console's is. M.get() and M.open() make a queued
--- console at once.
---@param rec {id: integer, label: string|nil, pty: boolean|nil, cols: integer|nil, rows: integer|nil}
---@param opts proctor.OpenOpts
---@return integer|nil buf, integer|string|nil win_or_err
function M.open_run(rec, opts)
  H.hook()
  -- its backlog comes with its first byte (H.on_event): every stream starts at 0
  local c = {
    id = rec.id,
    pty = rec.pty,
    label = rec.label,
    parked = true,
    cols = rec.cols, -- the size the process started with
    rows = rec.rows,
  }
  H.pending[rec.id] = c
  local how = opts.open or config.get().console.open
  if how ~= "none" or opts.window then return M.open(rec.id, opts) end
  H.pending_order[#H.pending_order + 1] = rec.id
  H.schedule_make()
  return nil, nil
end

--- The execution whose console was opened last (what :Proctor toggle shows).
---@return integer|nil
function M.last()
  if H.last and engine.current() and engine.current():get(H.last) then return H.last end
  return nil
end

--- The windows of the current tab that show the console of `id`.
---@param id integer
---@return integer[]
function M.windows(id)
  local c = H.consoles[id]
  local res = {}
  if not c then return res end
  for _, w in ipairs(api.nvim_tabpage_list_wins(0)) do
    if api.nvim_win_get_buf(w) == c.buf then res[#res + 1] = w end
  end
  return res
end

--- Hand the windows of console `id` over to a new execution (a rerun, a
--- task's restart, a chain's next member): returns the `open` of proctor.run()
--- or proctor.open() that shows the new console in the first of them (nil
--- when none shows it), and a function(new_id) that shows it in the others.
--- opts.all_tabs: windows of every tab (default: this tab); opts.enter: enter
--- the window (default: only when it is the current one, else console.enter).
---@param id integer
---@param opts {all_tabs: boolean|nil, enter: boolean|nil}|nil
---@return table|nil open, fun(new_id: integer) rest
function M.handover(id, opts)
  opts = opts or {}
  local c = H.consoles[id]
  local wins = M.windows(id)
  if opts.all_tabs and c and api.nvim_buf_is_valid(c.buf) then wins = vim.fn.win_findbuf(c.buf) end
  if #wins == 0 then
    return nil, function() end
  end
  local open = { win = wins[1], enter = (api.nvim_get_current_win() == wins[1]) or opts.enter }
  return open,
    function(new_id)
      local nc = H.consoles[new_id]
      for i = 2, #wins do
        if nc and api.nvim_win_is_valid(wins[i]) then api.nvim_win_set_buf(wins[i], nc.buf) end
      end
    end
end

--- Make the window a console will be shown in, before its execution starts:
--- see proctor.console.window.placeholder().
---@param opts proctor.OpenOpts|nil
---@return proctor.Window|nil
function M.window(opts) return window.placeholder(opts) end

--- The console of `id`, if one exists.
---@return proctor.Console|nil
function M.get(id)
  if H.pending[id] then return H.make(id) end
  return H.consoles[id]
end

--- The execution id of a console (or text view) buffer, or nil (console/window.lua's).
M.id_of_buf = window.id_of_buf

--- Remove the console of `id` (its buffer is wiped).
---@param id integer
function M.forget(id)
  local stub = H.pending[id]
  H.pending[id] = nil
  if stub and stub.made_buf and api.nvim_buf_is_valid(stub.made_buf) then
    pcall(api.nvim_buf_delete, stub.made_buf, { force = true })
  end
  local c = H.consoles[id]
  if not c then return end
  H.consoles[id] = nil
  if api.nvim_buf_is_valid(c.buf) then pcall(api.nvim_buf_delete, c.buf, { force = true }) end
end

--- True when nothing waits to be rendered into the console of `id`.
---@param id integer
---@return boolean
function M.idle(id)
  local c = H.consoles[id] or H.pending[id]
  return not c or ((not c.backlog or not c.backlog:pending()) and (not c.ended or c.final_done))
end

--- Text for the window bar of a console or text view (console/window.lua's bar()).
M.bar = window.bar

-- Helpers ------------------------------------------------------------------------

function H.hook()
  if H.hooked then return end
  H.hooked = true
  engine.subscribe("console", H.on_event)
  engine.on_batch("console", H.after_batch)
  local g = api.nvim_create_augroup("proctor_console", { clear = true })
  api.nvim_create_autocmd("CmdlineLeave", {
    group = g,
    pattern = ":",
    callback = function()
      if not (vim.v.event and vim.v.event.abort) then H.before_command(vim.fn.getcmdline()) end
    end,
  })
  api.nvim_create_autocmd(compat.resize_events(), {
    group = g,
    callback = function(ev)
      if ev.event == "BufWinEnter" then H.shown_stub(ev.buf) end
      -- A window that shows a console gets its bar before any size is taken:
      -- the bar (a winbar) is part of what the process must not count.
      if ev.event == "BufWinEnter" and H.consoles[M.id_of_buf(ev.buf) or -1] then
        window.set_bar(api.nvim_get_current_win())
      end
      H.resize_all()
    end,
  })
end

-- A window shows buffer `buf`: when it is the buffer of a run's console whose
-- terminal is not made yet (a hidden run's: M.open_run), the terminal is made
-- on the next tick inside that window, at its size (made in this autocmd,
-- nvim_open_term's own TermOpen would not nest).
function H.shown_stub(buf)
  local id = M.id_of_buf(buf)
  local stub = id and H.pending[id]
  if not (stub and stub.made_buf == buf) or stub.showing then return end
  stub.showing = true
  vim.schedule(function()
    stub.showing = nil
    if H.pending[id] ~= stub or not api.nvim_buf_is_valid(buf) then return end
    local win = api.nvim_get_current_win()
    if api.nvim_win_get_buf(win) ~= buf then win = vim.fn.win_findbuf(buf)[1] end
    if not win then return end -- hidden again before the tick: it waits for the next show
    H.make(id, win)
    window.set_bar(win)
  end)
end

-- Create the buffer and terminal for `rec` and queue the replay of its ring
-- buffer. The terminal takes its size from `win` (default: the current window).
-- Consoles are not listed (:ls and :bnext stay clean) and have filetype "proctor".
function H.create(eng, rec, win, stub)
  local id = rec.id
  local old = H.consoles[id]
  if old then M.forget(id) end
  local buf = stub and stub.made_buf
  if not (buf and api.nvim_buf_is_valid(buf)) then buf = H.new_buffer(id, rec.label) end
  local c = {
    id = id,
    buf = buf,
    pty = rec.pty,
    backlog = stub and stub.backlog or Backlog.new(H.reader(id)),
    final_done = false,
    editor = editor.new(),
    ended = stub and stub.ended,
    cols = stub and stub.cols, -- a run's: the size its process started with (H.resize_all)
    rows = stub and stub.rows,
  }
  win = win or api.nvim_get_current_win()
  api.nvim_win_call(win, function()
    c.chan = api.nvim_open_term(buf, { on_input = function(_, _, _, data) H.on_input(c, data) end })
  end)
  c.size_key = H.key_of({ win })
  H.consoles[id] = c
  if vim.bo[buf].filetype ~= "proctor" then vim.bo[buf].filetype = "proctor" end
  H.keymaps(c)
  -- :bd, :bw, :bun (with or without !) close the console, never the process;
  -- :Proctor open makes a new one that replays the ring buffer.
  api.nvim_create_autocmd({ "BufUnload", "BufWipeout" }, {
    buffer = buf,
    once = true,
    callback = function()
      if H.consoles[id] == c then H.consoles[id] = nil end
      vim.schedule(function()
        if api.nvim_buf_is_valid(buf) and not api.nvim_buf_is_loaded(buf) then
          pcall(api.nvim_buf_delete, buf, { force = true })
        end
      end)
    end,
  })
  api.nvim_create_autocmd("BufWinEnter", {
    buffer = buf,
    callback = function()
      if c.parked then -- shown again: render what waited (its tail)
        c.parked = false
        local tail = config.get().console.tail_bytes
        if c.backlog.n > tail then c.backlog:trim(tail) end
        H.mark(c)
      end
    end,
  })
  if stub then -- a run's console: its backlog holds every byte so far
    H.mark(c)
    H.ensure_ticker()
    return c
  end
  -- Replay the ring buffer: at most backlog_limit bytes per stream, the tail.
  local cfg = config.get().console
  local streams = rec.pty and { "pty" } or { "stdout", "stderr" }
  for _, s in ipairs(streams) do
    local total = rec.bytes and rec.bytes[s] or 0
    local from = 0
    if total > cfg.backlog_limit then from = total - cfg.tail_bytes end
    local data, nxt = eng:read(id, s, from, math.max(cfg.backlog_limit, total - from))
    if data then
      local start = nxt - #data
      if start > 0 then c.backlog.skipped = c.backlog.skipped + start end
      c.backlog:start(s, nxt)
      if #data > 0 then H.enqueue(c, data) end
    else
      c.backlog:start(s, 0)
    end
  end
  if engine.TERMINAL[rec.state] then c.ended = rec end
  H.mark(c)
  H.ensure_ticker()
  return c
end

-- The buffer of console `id`, named, without its terminal yet (H.create makes
-- that): the first of the two steps a run's queued console is made in.
function H.new_buffer(id, label)
  local buf = api.nvim_create_buf(false, false)
  local name = "proctor://" .. id
  if label and label ~= "" then name = name .. "/" .. label:gsub("[%s/\\]+", "_") end
  -- a buffer left by an earlier console of this id (its terminal closed): wiped
  for _, b in ipairs(H.made[id] and api.nvim_list_bufs() or {}) do
    if
      b ~= buf
      and vim.b[b].proctor_id == id
      and not vim.b[b].proctor_view
      and api.nvim_buf_get_name(b) == name
    then
      pcall(api.nvim_buf_delete, b, { force = true })
    end
  end
  if not pcall(api.nvim_buf_set_name, buf, name) then
    pcall(api.nvim_buf_set_name, buf, name .. "#" .. buf)
  end
  H.made[id] = true
  api.nvim_buf_set_var(buf, "proctor_id", id)
  vim.bo[buf].bufhidden = "hide"
  vim.bo[buf].filetype = "proctor"
  return buf
end

-- The cursor went into console `c` (the current window): Terminal mode when
-- `console.start_insert` says so and the process can still read what is typed.
function H.start_insert(c)
  local want = config.get().console.start_insert
  if want == nil then want = c.pty end
  local state = engine.state[c.id]
  if not want or c.ended or (state and engine.TERMINAL[state]) then return end
  vim.cmd("startinsert")
end

-- Normal-mode keys of a console (setup{ keymaps = { console } }).
function H.keymaps(c)
  keys.map(c.buf, "console", function() return c.id end)
end

-- What a console's backlog reads the ring with: a poll hands over at most
-- output_max_bytes of a stream (the newest), and the bytes it left in the ring
-- are read by offset when the render comes to them (console/backlog.lua):
-- through the output event's `ring` on this thread (eng:read would wait for
-- the engine thread, busy with the flood), else with eng:read.
function H.reader(id)
  return function(stream, from, max, ring)
    local eng = engine.current()
    if not eng then return nil end
    if ring then return ring:read(from, max) end
    return eng:read(id, stream, from, max)
  end
end

-- Queue `data` for rendering. Past backlog_limit only the tail is kept; a
-- parked console (no window shows it) keeps at most twice tail_bytes: that is
-- all it will render when shown, so 200 hidden consoles cost 200 small tails.
function H.enqueue(c, data)
  local cfg = config.get().console
  local limit = cfg.backlog_limit
  if c.parked then limit = math.min(limit, 2 * cfg.tail_bytes) end
  c.backlog:push(data, limit, cfg.tail_bytes)
  H.mark(c)
end

function H.mark(c)
  if not c.buf then return end -- a run's console not made yet (H.pending)
  if not H.is_dirty[c.id] then
    H.is_dirty[c.id] = true
    H.dirty[#H.dirty + 1] = c.id
  end
  H.schedule_render()
end

-- A render asked for while the engine hands out a batch of events runs when
-- the batch is done, in the same tick (H.after_batch): output reaches the
-- terminal in the tick that polled it, and an exit's final line in the tick
-- that saw the exit. Otherwise, on the next tick.
function H.schedule_render()
  if H.render_scheduled then return end
  H.render_scheduled = true
  if engine.dispatching() then
    H.batch_render = true
    return
  end
  vim.schedule(H.render)
end

-- engine.on_batch: a batch of events was dispatched.
function H.after_batch()
  if not H.batch_render then return end
  H.batch_render = false
  H.render()
end

-- One render tick: hand at most bytes_per_tick bytes to the terminals.
function H.render()
  H.render_scheduled = false
  local budget = config.get().console.bytes_per_tick
  -- Lines are bounded per terminal refresh (H.PACE_MS) and the tick by time:
  -- a flood of short lines costs the terminal per line, not per byte.
  local t0 = H.clock()
  local now = t0 / 1e6
  if now - H.pace_start >= H.PACE_MS or now < H.pace_start then
    H.pace_start, H.pace_lines = now, 0
  end
  if H.pace_lines >= H.LINES_PER_PACE then
    H.render_scheduled = true
    if not H.timer then H.timer = uv.new_timer() end
    local wait = math.min(H.PACE_MS, math.max(1, math.ceil(H.pace_start + H.PACE_MS - now)))
    H.timer:start(wait, 0, function() vim.schedule(H.render) end)
    return
  end
  local list = H.dirty
  local again, rest = {}, {}
  local i = 1
  while i <= #list do
    local id = list[i]
    i = i + 1
    local c = H.consoles[id]
    local wins = c and api.nvim_buf_is_valid(c.buf) and vim.fn.win_findbuf(c.buf)
    if wins and #wins == 0 then
      -- Not shown anywhere: the terminal emulator is the costly part, so a
      -- hidden console only keeps its (bounded) backlog; BufWinEnter resumes it.
      -- What arrived before this tick saw it hidden is bounded here too.
      c.parked = true
      local tail = config.get().console.tail_bytes
      if c.backlog.n > 2 * tail then c.backlog:trim(tail) end
    elseif wins and H.held(c, wins) then
      H.settle(id) -- the terminal is being resized: its refresh first (see the header)
    elseif wins then
      local left_ms = H.RENDER_MS - (H.clock() - t0) / 1e6
      if budget > 0 and H.pace_lines < H.LINES_PER_PACE and left_ms > 0 then
        -- as much as the terminal is expected to take in the time left
        local units = math.max(1, math.floor(left_ms * 1000 / H.unit_us))
        local max_lines = math.min(H.LINES_PER_PACE - H.pace_lines, units)
        -- (cut at a line end only; bytes without one go by bytes_per_tick: small
        -- sends cut inside 200,000 \r updates, with skipped bytes between them,
        -- left a garbled last row in 2 of 8 runs on Neovim 0.12, cause not found)
        local taken, lines = H.render_one(c, budget, max_lines)
        budget = budget - taken
        H.pace_lines = H.pace_lines + (lines or 0)
        if c.backlog:pending() or (c.ended and not c.final_done) then again[#again + 1] = id end
      else
        rest[#rest + 1] = id
      end
    end
  end
  -- Fairness: consoles not reached this tick go first next tick.
  for _, id in ipairs(again) do
    rest[#rest + 1] = id
  end
  H.dirty = rest
  H.is_dirty = {}
  for _, id in ipairs(rest) do
    H.is_dirty[id] = true
  end
  if #rest > 0 then
    H.render_scheduled = true
    if not H.timer then H.timer = uv.new_timer() end
    H.timer:start(0, 0, function() vim.schedule(H.render) end)
  end
end

-- The sizes of windows `wins` as one string (what a terminal is sized from).
function H.key_of(wins)
  local parts = {}
  for i, win in ipairs(wins) do
    local cols, rows = compat.text_size(win)
    parts[i] = cols .. "x" .. rows
  end
  table.sort(parts)
  return table.concat(parts, ",")
end

-- Note a change of the sizes of the windows showing `c` (shown in `wins`):
-- output waits until its terminal refreshed. Returns true while it waits.
function H.held(c, wins)
  local key = H.key_of(wins)
  local tick = api.nvim_buf_get_changedtick(c.buf)
  if key ~= c.size_key then
    c.size_key = key
    c.hold = { tick = tick, until_ms = uv.now() + H.SETTLE_MS }
  end
  local hold = c.hold
  if hold and (tick ~= hold.tick or uv.now() >= hold.until_ms) then
    c.hold = nil
    hold = nil
  end
  return hold ~= nil
end

-- Render console `id`, held now, again in a few ms (one timer for all).
function H.settle(id)
  H.waiting[id] = true
  if H.settling then return end
  H.settling = true
  if not H.settle_timer then H.settle_timer = uv.new_timer() end
  H.settle_timer:start(5, 0, function()
    vim.schedule(function()
      H.settling = false
      local ids = H.waiting
      H.waiting = {}
      for wid in pairs(ids) do
        local c = H.consoles[wid]
        if c then H.mark(c) end
      end
    end)
  end)
end

-- The line a console shows when bytes were skipped.
function H.skip_note(id)
  return function(n)
    return string.format(
      "\27[0m\27[2m[proctor] … skipped %d bytes (:Proctor text %d)\27[0m",
      n,
      id
    )
  end
end

-- Render up to `budget` bytes and `max_lines` units (a line and its bytes, see
-- H.UNIT_BYTES) of `c`; returns the bytes taken from the backlog and the lines sent.
function H.render_one(c, budget, max_lines)
  local data, taken, lines =
    c.backlog:take(budget, not c.pty, H.skip_note(c.id), max_lines, H.UNIT_BYTES, H.width(c))
  local final = false
  if c.backlog.n == 0 and c.ended and not c.final_done then
    c.final_done = true
    final = true
    if c.ended.type == "state" then -- the event: the record has the duration
      local eng = engine.current()
      c.ended = (eng and eng:get(c.id)) or c.ended
    end
    if config.get().console.final_line then
      local color = c.ended.state == "completed" and "32"
        or (c.ended.state == "failed" and "31" or "33")
      data = data
        .. c.backlog:own_line(
          string.format("\27[0m\27[1;%sm[proctor] %s\27[0m", color, util.describe_end(c.ended))
        )
    end
    -- Shown now, not on the terminal's 10 ms refresh: the buffer's last lines
    -- are final once the process is gone (compat.TERMINAL_FLUSH; Neovim 0.12).
    data = data .. compat.TERMINAL_FLUSH
  end
  if data ~= "" then H.send(c, data) end
  -- Everything is shown and the process is gone: leave Terminal mode, as a key
  -- would after :terminal's [Process exited] (nothing typed reaches it now).
  if final and api.nvim_get_current_buf() == c.buf and api.nvim_get_mode().mode == "t" then
    vim.cmd("stopinsert")
  end
  return taken, lines
end

-- The columns of console `c`'s terminal, at least: the narrowest window showing
-- it (the backlog leaves out `\r` redraws that cannot wrap at that width).
function H.width(c)
  local w
  for _, win in ipairs(vim.fn.win_findbuf(c.buf)) do
    local cols = compat.text_size(win)
    if not w or cols < w then w = cols end
  end
  return w
end

function H.send(c, data)
  local t0 = H.clock()
  local ok = pcall(api.nvim_chan_send, c.chan, data)
  if not ok then
    H.consoles[c.id] = nil
    return
  end
  H.measured(data, (H.clock() - t0) / 1e3)
end

-- A send of `data` took `us` microseconds: follow the terminal's cost per unit,
-- within its bounds. A dearer send is believed at once (the next tick must not
-- overrun), a cheaper one slowly (a moving average over the last few sends).
function H.measured(data, us)
  local _, lines = data:gsub("\n", "")
  local units = lines + #data / H.UNIT_BYTES
  if units < 1 then return end
  local per = math.min(H.UNIT_US_MAX, math.max(H.UNIT_US_MIN, us / units))
  H.unit_us = per > H.unit_us and per or 0.5 * (H.unit_us + per)
end

function H.on_event(ev)
  local c = H.consoles[ev.id]
  local stub = not c and H.pending[ev.id]
  if stub then
    if ev.type == "output" then
      if not stub.backlog then stub.backlog = Backlog.new(H.reader(ev.id)) end
      local data = stub.backlog:accept(ev.stream, ev.data, ev.offset, ev.ring)
      if data then H.enqueue(stub, data) end
    elseif engine.TERMINAL[ev.state] then
      stub.ended = ev.record or ev
    end
    return
  end
  if not c then return end
  if ev.type == "output" then
    local data = c.backlog:accept(ev.stream, ev.data, ev.offset, ev.ring)
    if data then H.enqueue(c, data) end
  elseif engine.TERMINAL[ev.state] then
    c.ended = ev.record or ev -- the record comes with the event (else read at the final line)
    H.mark(c)
    H.schedule_bars()
  else
    H.schedule_bars()
  end
end

-- Typing in the console (terminal mode). PTY: raw bytes. Pipe: the line
-- editor (console/editor.lua) echoes and sends whole lines.
function H.on_input(c, data)
  if vim.in_fast_event() then
    vim.schedule(function() H.on_input(c, data) end)
    return
  end
  if c.ended then return end
  if c.pty then
    -- ^C: the tty sends SIGINT; the core records a death by it as the user's
    -- interrupt (canceled, reason "interrupted")
    local ok, msg = proctor.input(c.id, data)
    if not ok then util.notify(tostring(msg)) end
    return
  end
  local echo, ops = editor.feed(c.editor, data)
  for _, op in ipairs(ops) do
    if op[1] == "input" then
      local ok, msg = proctor.input(c.id, op[2])
      if not ok then util.notify(tostring(msg)) end
    elseif op[1] == "close" then
      proctor.close_stdin(c.id)
    elseif op[1] == "cancel" then
      proctor.cancel(c.id)
    end
  end
  if #echo > 0 then
    c.backlog:sent(echo)
    pcall(api.nvim_chan_send, c.chan, echo)
  end
end

-- An Ex command line about to run: `:bd`, `:bw` or `:bun` without ! on a
-- console would refuse with "E89: … will be killed" (Neovim counts the
-- terminal as a running job) though nothing would be killed; :bd! closes the
-- console and the process keeps running. So both do that: the terminal of each
-- console the command names is closed first, and the command goes through.
function H.before_command(line)
  local range, name, bang, args = line:match("^[%s:]*([%d,%%.$]*)%s*(%a+)(!?)%s*(.-)%s*$")
  if not name or bang == "!" then return end
  local full
  for _, cmd in ipairs({ { "bdelete", 2 }, { "bwipeout", 2 }, { "bunload", 3 } }) do
    if #name >= cmd[2] and vim.startswith(cmd[1], name) then full = cmd[1] end
  end
  if not full then return end
  local bufs = {}
  if args ~= "" then
    for word in args:gmatch("%S+") do
      local n = tonumber(word) or vim.fn.bufnr(word)
      if n and n > 0 then bufs[#bufs + 1] = n end
    end
  elseif range == "%" then
    for _, c in pairs(H.consoles) do
      bufs[#bufs + 1] = c.buf
    end
  elseif range ~= "" then
    local a, b = range:match("^(%d+),?(%d*)$")
    if a then
      for n = tonumber(a), tonumber(b ~= "" and b or a) do
        bufs[#bufs + 1] = n
      end
    end
  else
    bufs[1] = api.nvim_get_current_buf()
  end
  for _, buf in ipairs(bufs) do
    local id = M.id_of_buf(buf)
    local c = id and H.consoles[id]
    if c and c.buf == buf then
      H.consoles[id] = nil
      pcall(vim.fn.chanclose, c.chan)
    end
  end
end

-- Make the queued console of run `id` (M.open_run) now, its terminal sized
-- from `win` (default: the current window).
function H.make(id, win)
  local stub = H.pending[id]
  H.pending[id] = nil
  local eng = engine.current()
  if not stub or not eng then return H.consoles[id] end
  -- its buffer, made a tick before, shown meanwhile (:buffer): the terminal
  -- takes that window's size
  local buf = stub.made_buf
  if not win and buf and api.nvim_buf_is_valid(buf) then win = vim.fn.win_findbuf(buf)[1] end
  -- shown now after waiting hidden: its last tail_bytes, as a hidden console shown again
  local tail = config.get().console.tail_bytes
  if win and stub.backlog and stub.backlog.n > tail then stub.backlog:trim(tail) end
  local c = H.create(eng, stub, win, stub)
  c.parked = not win
  return c
end

function H.schedule_make()
  if H.making then return end
  H.making = true
  vim.schedule(H.make_some)
end

-- One tick of making the buffers of hidden runs' consoles: for at most
-- H.MAKE_MS (at least one). Such a console's terminal (nvim_open_term, about
-- half of a console's cost, 0.5-3 ms of the main thread idle and up to 6 ms
-- on a loaded machine) is made only when a window first shows its buffer
-- (H.shown_stub), M.get() or M.open(): until then nothing would be rendered
-- into it (a hidden console renders nothing), and its output waits in its
-- backlog as a hidden console's does. A buffer is not begun when what the
-- last ones cost (H.make_ms: a dearer one believed at once, a cheaper one
-- slowly) would take the tick past the bound.
function H.make_some()
  H.making = false
  local t0 = H.clock()
  local order, i, steps = H.pending_order, 1, 0
  while i <= #order do
    local id = order[i]
    local stub = H.pending[id]
    if stub and not (stub.made_buf and api.nvim_buf_is_valid(stub.made_buf)) then
      local t = H.clock()
      if steps > 0 and (t - t0) / 1e6 + H.make_ms > H.MAKE_MS then break end
      stub.made_buf = H.new_buffer(id, stub.label)
      steps = steps + 1
      H.make_steps = H.make_steps + 1
      local ms = (H.clock() - t) / 1e6
      H.make_ms = ms > H.make_ms and ms or 0.75 * H.make_ms + 0.25 * ms
    end
    i = i + 1
  end
  local rest = {}
  for k = i, #order do
    if H.pending[order[k]] then rest[#rest + 1] = order[k] end
  end
  H.pending_order = rest
  if #rest > 0 then
    H.making = true
    if not H.make_timer then H.make_timer = uv.new_timer() end
    H.make_timer:start(0, 0, function() vim.schedule(H.make_some) end)
  end
end

-- Redraw the bars once this tick's events are handled (not once per event).
function H.schedule_bars()
  if H.bars_scheduled then return end
  H.bars_scheduled = true
  vim.schedule(function()
    H.bars_scheduled = false
    H.redraw_bars()
  end)
end

-- The bars are redrawn when a window shows a console (returns its id). The
-- windows are looked at, not the consoles: a fan-out's hundred hidden
-- consoles cost a win_findbuf each (1-2 ms a redraw, once per tick of
-- state events).
function H.redraw_bars()
  for _, win in ipairs(api.nvim_list_wins()) do
    local buf = api.nvim_win_get_buf(win)
    local id = M.id_of_buf(buf)
    local c = id and H.consoles[id]
    if c and c.buf == buf then
      vim.cmd("redrawstatus!")
      return id
    end
  end
end

-- While a live execution's console is visible, refresh the bars every second.
function H.ensure_ticker()
  if H.tick_timer then return end
  H.tick_timer = uv.new_timer()
  H.tick_timer:start(
    1000,
    1000,
    vim.schedule_wrap(function()
      if not H.tick_timer then return end -- stopped by a tick queued before this one
      local live = false
      for id, c in pairs(H.consoles) do
        if not c.ended and engine.state[id] ~= nil then live = true end
      end
      if not live then
        H.tick_timer:stop()
        H.tick_timer:close()
        H.tick_timer = nil
        H.redraw_bars()
        return
      end
      H.redraw_bars()
    end)
  )
end

-- After windows changed: note new sizes of the consoles' windows now, while
-- their terminals' refresh is still to come (see H.held), and give each PTY
-- process the text area of the smallest window showing its console. A size
-- is remembered only once the core took it, so a refused one is tried again
-- on the next window change.
function H.resize_all()
  local eng = engine.current()
  for id, c in pairs(H.consoles) do
    local wins = api.nvim_buf_is_valid(c.buf) and vim.fn.win_findbuf(c.buf) or {}
    if #wins > 0 then
      H.held(c, wins)
      if eng and c.pty and not c.ended then
        local w, h
        for _, win in ipairs(wins) do
          local ww, wh = compat.text_size(win)
          w = w and math.min(w, ww) or ww
          h = h and math.min(h, wh) or wh
        end
        if w > 0 and h > 0 and (c.cols ~= w or c.rows ~= h) and eng:resize(id, w, h) then
          c.cols, c.rows = w, h
        end
      end
    end
  end
end

M._H = H

-- What run{ open } calls for each run is interpreted, as run()'s own path is
-- (lua/proctor/init.lua, compat.interpreted): a fan-out of runs would
-- otherwise record traces through it.
compat.interpreted(M.open_run, M.window, H.hook, H.schedule_make, window.placeholder, H.reader)
compat.interpreted(Backlog.new, Backlog.start, require("proctor.console.overwrite").new)

-- Consoles leave out overwritten redraws with the core's twin of the model
-- (console/overwrite.lua): the same bytes, a `\r` flood's loop in C.
require("proctor.console.overwrite").core = engine.load_core()

-- proctor.open(), run{ open }; a deleted record's console goes
proctor._extend("console", { api = M, forget = M.forget })

return M
