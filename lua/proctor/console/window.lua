--- proctor.console.window — the windows consoles and text views are shown in:
--- opening one the way `console.open` says, taking over this tab's console
--- window (`console.reuse`), falling back to a float (then the current window)
--- when there is no room for a split, the placeholder window a run makes before
--- its process starts, the bar, and keeping the cursor on the output.
---
---   show(buf) ──► a window of this tab shows buf? ──► that one
---        │ no
---        ▼
---   reuse and a split: this tab's proctor window (w:proctor_window, still
---   showing a console or text view) ──► take it over
---        │ none
---        ▼
---   split / vsplit / tab / float / current ── E36 (no room)? ──► float ──► current window
---
--- Requiring this module has no side effects.

local M = {}
local H = {}

local api = vim.api
local proctor = require("proctor")
local config = require("proctor.config")
local compat = require("proctor.compat")
local engine = require("proctor.engine")
local util = require("proctor.util")

--- The bar of a console or text view window: the text of M.bar(), an
--- expression Neovim evaluates when it draws the window (this module's own,
--- so the window never names the console).
M.BAR = "%{%v:lua.require'proctor.console.window'.bar()%}"

--- The execution id of a console (or text view) buffer, or nil.
---@param buf integer|nil default: the current buffer
---@return integer|nil
function M.id_of_buf(buf)
  if buf and buf ~= 0 and not api.nvim_buf_is_valid(buf) then return nil end
  local ok, v = pcall(api.nvim_buf_get_var, buf or 0, "proctor_id")
  if ok and type(v) == "number" then return v end
  local name = api.nvim_buf_get_name(buf or 0)
  local id = name:match("^proctor://(%d+)")
  return id and tonumber(id) or nil
end

--- Text for the window bar (winbar/statusline) of a console or text view:
--- id, label, state, elapsed, exit.
---@param win integer|nil default: the window being drawn
---@return string
function M.bar(win)
  win = win or vim.g.statusline_winid or api.nvim_get_current_win()
  local ok, buf = pcall(api.nvim_win_get_buf, win)
  local id = ok and M.id_of_buf(buf)
  if not id then return compat.has_winbar() and "" or "%<%f %h%m%r%=%-14.(%l,%c%V%) %P" end
  local rec = H.bar_record(id)
  if not rec then return "proctor #" .. id .. " (deleted)" end
  local text
  if vim.b[buf].proctor_view == "text" then
    text = H.text_bar(rec)
  else
    local s
    if engine.TERMINAL[rec.state] then
      s = util.describe_end(rec)
    else
      local el = util.elapsed_ms(rec)
      s = engine.state_text(rec) .. (el and (" " .. util.duration(el)) or "")
    end
    if rec.watching then s = s .. " · watching" end
    text = string.format("proctor #%d %s │ %s", id, util.first_line(util.title(rec)), s)
  end
  return (text:gsub("%%", "%%%%"))
end

--- The option a console's bar goes in: 'winbar', or 'statusline' before it existed.
---@return string
function M.bar_option() return compat.has_winbar() and "winbar" or "statusline" end

--- Give window `win` the bar (when `console.bar` is on and it shows a proctor
--- buffer: a console, a text view, or a run's placeholder).
---@param win integer
function M.set_bar(win)
  if not config.get().console.bar then return end
  if not H.ours(api.nvim_win_get_buf(win)) then return end
  compat.set_win_option(win, M.bar_option(), M.BAR)
end

--- Put the cursor on the last line of `buf` in `win`, so a terminal window follows the output.
---@param win integer
---@param buf integer
function M.follow(win, buf) pcall(api.nvim_win_set_cursor, win, { api.nvim_buf_line_count(buf), 0 }) end

---@class proctor.ShowOpts
---@field how string|nil "split" | "vsplit" | "tab" | "float" | "current" (default: console.open)
---@field size integer|nil split height / vsplit width (default: console.size)
---@field enter boolean|nil leave the cursor in it (default: console.enter, see M.enter_default())
---@field kind "open"|"run"|nil why it is shown: to be looked at ("open", default) or a run starting
---@field win integer|nil show it in this window
---@field reuse boolean|nil take over this tab's proctor window for a split (default: console.reuse)

--- Show `buf` in a window (see the header). Returns the window and, when an
--- existing window was given it, the buffer that window showed before and its bar.
---@param buf integer
---@param opts proctor.ShowOpts|nil
---@return integer win, integer|nil prev_buf, string|nil prev_bar
function M.show(buf, opts)
  opts = opts or {}
  local cfg = config.get().console
  local how = opts.how or cfg.open
  local enter = opts.enter
  if enter == nil then enter = M.enter_default(opts.kind or "open", how) end
  local cur = api.nvim_get_current_win()
  for _, w in ipairs(api.nvim_tabpage_list_wins(0)) do
    if api.nvim_win_get_buf(w) == buf then
      if enter then api.nvim_set_current_win(w) end
      M.follow(w, buf)
      return w
    end
  end
  local win, prev, prev_bar
  local target = opts.win and api.nvim_win_is_valid(opts.win) and opts.win or nil
  if
    not target
    and (how == "split" or how == "vsplit")
    and (opts.reuse ~= false and (opts.reuse or cfg.reuse))
  then
    target = M.slot()
  end
  if not target and how == "current" then target = cur end
  if target then
    prev = api.nvim_win_get_buf(target)
    prev_bar = compat.get_win_option(target, M.bar_option())
    api.nvim_win_set_buf(target, buf)
    win = target
  else
    win = H.open(buf, how, opts.size or cfg.size)
  end
  vim.w[win].proctor_window = true
  M.set_bar(win)
  M.follow(win, buf)
  if enter then
    api.nvim_set_current_win(win)
  elseif api.nvim_win_is_valid(cur) then
    api.nvim_set_current_win(cur)
  end
  return win, prev, prev_bar
end

--- Whether a console shown without an explicit `enter` takes the cursor:
--- `console.enter` when set; else a console opened to be looked at (:Proctor
--- open, toggle, the list) does, and a run's (:Proctor run, rerun, a task) only
--- when it takes the whole view (a tab, a float, the current window): a run in
--- a split leaves the cursor in the source buffer, as vim-dispatch's :Make.
---@param kind "open"|"run"
---@param how string "split" | "vsplit" | "tab" | "float" | "current"
---@return boolean
function M.enter_default(kind, how)
  local cfg = config.get().console.enter
  if cfg ~= nil then return cfg end
  if kind == "open" then return true end
  return how ~= "split" and how ~= "vsplit"
end

--- This tab's proctor window: a window proctor opened (w:proctor_window) that
--- still shows a console or a text view; the current window first.
---@return integer|nil
function M.slot()
  local wins = api.nvim_tabpage_list_wins(0)
  local cur = api.nvim_get_current_win()
  table.sort(wins, function(a, b) return (a == cur and 0 or a) < (b == cur and 0 or b) end)
  for _, w in ipairs(wins) do
    local buf = api.nvim_win_get_buf(w)
    if vim.w[w].proctor_window and H.ours(buf) and api.nvim_win_get_config(w).relative == "" then
      return w
    end
  end
end

--- Close window `win`; when it is the last one, show the alternate buffer (or
--- an empty one) in it instead, as a buffer-closing command would.
---@param win integer
function M.close(win)
  if not api.nvim_win_is_valid(win) then return end
  if #api.nvim_list_wins() > 1 and pcall(api.nvim_win_close, win, false) then return end
  api.nvim_win_call(win, function()
    local alt = vim.fn.bufnr("#")
    if alt > 0 and alt ~= api.nvim_get_current_buf() and vim.fn.buflisted(alt) == 1 then
      vim.cmd("buffer " .. alt)
    else
      vim.cmd("enew")
    end
  end)
end

---@class proctor.Window
---@field win integer
---@field cancel fun(self) close it (or give a taken-over window its buffer back)
---@field done fun(self) the console is in it: drop the placeholder

--- Make the window a console will be shown in, before its execution starts
--- (`opts` as for proctor.open()), showing an empty placeholder with the
--- console's bar, so that its text area (proctor.compat.text_size()) is the
--- size the console will have. Hand it to proctor.console.open{ window = }
--- once started, or cancel it.
---@param opts proctor.OpenOpts|nil
---@return proctor.Window|nil
function M.placeholder(opts)
  opts = opts or {}
  local cfg = config.get().console
  if (opts.open or cfg.open) == "none" then return nil end
  local ph = api.nvim_create_buf(false, true)
  vim.bo[ph].bufhidden = "wipe"
  vim.b[ph].proctor_placeholder = true -- gets the bar, and counts as a proctor window while it waits
  local win, prev, prev_bar = M.show(ph, {
    how = opts.open,
    size = opts.size,
    enter = opts.enter,
    win = opts.win,
    reuse = opts.reuse,
    kind = "run",
  })
  local w = { win = win }
  function w.cancel()
    if api.nvim_win_is_valid(win) then
      if prev then
        if api.nvim_buf_is_valid(prev) then api.nvim_win_set_buf(win, prev) end
        if prev_bar and cfg.bar then compat.set_win_option(win, M.bar_option(), prev_bar) end
      else
        M.close(win)
      end
    end
    if api.nvim_buf_is_valid(ph) then pcall(api.nvim_buf_delete, ph, { force = true }) end
  end
  function w.done()
    if api.nvim_buf_is_valid(ph) then pcall(api.nvim_buf_delete, ph, { force = true }) end
  end
  return w
end

-- Helpers ------------------------------------------------------------------------

-- The records the bars show, by id. A bar is drawn on every redraw of its
-- window, under a flood at each render, and eng:get is a round trip to the
-- engine thread, which the flood keeps busy: each draw waited 8-17 ms (the
-- bench's tick log, a PTY flood on 0.12). Every state event brings its
-- execution's record (engine.lua turns eng:state_records on), so no bar asks
-- for it: a bar drawn before keeps the record of its execution's latest state
-- event (H.bar_recs), and the record of one not drawn yet waits for its first
-- draw in H.fresh. A run of this layer drawn before its first event shows
-- what run() knew (queued). What a bar shows besides the record (the cancel
-- asked, the task links) is read at each draw. Each table keeps at most
-- H.BAR_RECS ids; past that it starts again. A record is read (eng:get) only
-- for a bar drawn first after more than that many other executions changed
-- state, or when its event came without one (past the bound of events not
-- polled, |proctor-limits|).
H.BAR_RECS = 256
H.bar_recs, H.bar_n = {}, 0
H.fresh, H.fresh_n = {}, 0

-- Keep `rec` for `id` in H[name] (H.bar_recs or H.fresh), whose count is
-- H[count]: a table past H.BAR_RECS ids starts again.
function H.keep(name, count, id, rec)
  if H[name][id] == nil then
    H[count] = H[count] + 1
    if H[count] > H.BAR_RECS then
      H[name], H[count] = {}, 1
    end
  end
  H[name][id] = rec
end

engine.subscribe("console.bar", function(ev)
  if ev.type ~= "state" then return end
  if H.bar_recs[ev.id] ~= nil then
    H.bar_recs[ev.id] = ev.record or false
  elseif ev.record then
    H.keep("fresh", "fresh_n", ev.id, ev.record)
  end
end)

-- The record of execution `id` for its bar, with its task links, or nil.
function H.bar_record(id)
  local rec = H.bar_recs[id]
  if rec then return proctor._extended(rec) end
  rec = H.fresh[id]
  H.fresh[id] = nil
  if rec == nil then
    local spec = engine.specs[id]
    if spec and engine.state[id] == nil then -- started here, no event polled yet
      return proctor._extended({ id = id, label = spec.label, cmd = spec.cmd, state = "queued" })
    end
  end
  if not rec then
    local eng = engine.current()
    rec = eng and (proctor.record(id)) -- with its task links
    if not rec then return nil end
  else
    proctor._extended(rec)
  end
  H.keep("bar_recs", "bar_n", id, rec)
  return rec
end

-- The bar of a text view: unlike a console's, it says "text view", whether it
-- follows the output, and its keys.
function H.text_bar(rec)
  local live = not engine.TERMINAL[rec.state]
  local state
  if live then
    local el = util.elapsed_ms(rec)
    state = engine.state_text(rec)
      .. (el and (" " .. util.duration(el)) or "")
      .. " · follows the output"
  else
    state = util.describe_end(rec)
  end
  if rec.watching then state = state .. " · watching" end
  return string.format(
    "proctor #%d %s │ text view │ %s │ R refresh · q close",
    rec.id,
    util.title(rec),
    state
  )
end

-- Is `buf` a console, a text view or a run's placeholder?
function H.ours(buf) return vim.b[buf].proctor_id ~= nil or vim.b[buf].proctor_placeholder == true end

-- A new window for `buf` the way `how` says; with no room for a split (E36),
-- a float, and failing that the current window.
function H.open(buf, how, size)
  local ok = false
  if how == "tab" then
    ok = pcall(vim.cmd, "tab sbuffer " .. buf)
  elseif how == "vsplit" then
    ok = pcall(vim.cmd, "botright vertical sbuffer " .. buf)
    if ok then pcall(api.nvim_win_set_width, 0, size) end
  elseif how ~= "float" then
    ok = pcall(vim.cmd, "botright sbuffer " .. buf)
    if ok then pcall(api.nvim_win_set_height, 0, size) end
  end
  if ok then return api.nvim_get_current_win() end
  local fok, win = pcall(H.float, buf)
  if fok then return win end
  api.nvim_win_set_buf(0, buf)
  return api.nvim_get_current_win()
end

-- A centred floating window, 80% of the editor.
function H.float(buf)
  local w = math.max(1, math.floor(vim.o.columns * 0.8))
  local h = math.max(1, math.floor((vim.o.lines - 2) * 0.8))
  return api.nvim_open_win(buf, true, {
    relative = "editor",
    width = w,
    height = h,
    style = "minimal",
    border = "rounded",
    row = math.floor((vim.o.lines - 2 - h) / 2),
    col = math.floor((vim.o.columns - w) / 2),
  })
end

return M
