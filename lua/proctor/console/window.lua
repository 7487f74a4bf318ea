--- proctor.console.window — the windows consoles (and text views) are shown in:
--- opening one the way `console.open` says, the placeholder window a run makes
--- before its process starts, the bar, and keeping the cursor on the output.
--- Requiring this module has no side effects.

local M = {}
local H = {}

local api = vim.api
local compat = require("proctor.compat")

--- The bar of a console window: the text of proctor.console.bar().
M.BAR = "%{%v:lua.require'proctor.console'.bar()%}"

--- The option a console's bar goes in: 'winbar', or 'statusline' before it existed.
---@return string
function M.bar_option() return compat.has_winbar() and "winbar" or "statusline" end

--- Give window `win` the bar (when `console.bar` is on and it shows a proctor buffer).
---@param win integer
function M.set_bar(win)
  if not require("proctor.config").get().console.bar then return end
  local buf = api.nvim_win_get_buf(win)
  if not vim.b[buf].proctor_id then return end
  compat.set_win_option(win, M.bar_option(), M.BAR)
end

--- Put the cursor on the last line of `buf` in `win`, so a terminal window follows the output.
---@param win integer
---@param buf integer
function M.follow(win, buf)
  pcall(api.nvim_win_set_cursor, win, { api.nvim_buf_line_count(buf), 0 })
end

--- Show `buf` in a window the way `how` says ("split", "vsplit", "tab",
--- "float", "current"); a window of this tab that already shows it is reused.
--- `size`: split height / vsplit width. `enter`: leave the cursor in it.
--- Returns the window.
---@param buf integer
---@param how string
---@param size integer
---@param enter boolean
---@return integer win
function M.show(buf, how, size, enter)
  local cur = api.nvim_get_current_win()
  for _, w in ipairs(api.nvim_tabpage_list_wins(0)) do
    if api.nvim_win_get_buf(w) == buf then
      if enter then api.nvim_set_current_win(w) end
      M.follow(w, buf)
      return w
    end
  end
  local win
  if how == "current" then
    api.nvim_win_set_buf(cur, buf)
    win = cur
  elseif how == "tab" then
    vim.cmd("tab sbuffer " .. buf)
    win = api.nvim_get_current_win()
  elseif how == "float" then
    win = H.float(buf)
  elseif how == "vsplit" then
    vim.cmd("botright vertical sbuffer " .. buf)
    win = api.nvim_get_current_win()
    pcall(api.nvim_win_set_width, win, size)
  else
    vim.cmd("botright sbuffer " .. buf)
    win = api.nvim_get_current_win()
    pcall(api.nvim_win_set_height, win, size)
  end
  M.set_bar(win)
  M.follow(win, buf)
  if not enter and api.nvim_win_is_valid(cur) then api.nvim_set_current_win(cur) end
  return win
end

---@class proctor.Window
---@field win integer
---@field cancel fun(self) close it (or give "current" its buffer back)
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
  local cfg = require("proctor.config").get().console
  local how = opts.open or cfg.open
  if how == "none" then return nil end
  local enter = opts.enter
  if enter == nil then enter = cfg.enter end
  local ph = api.nvim_create_buf(false, true)
  vim.bo[ph].bufhidden = "wipe"
  local prev_win = api.nvim_get_current_win()
  local prev_buf = api.nvim_win_get_buf(prev_win)
  local prev_bar = cfg.bar and compat.get_win_option(prev_win, M.bar_option())
  local win = M.show(ph, how, opts.size or cfg.size, enter)
  if cfg.bar then compat.set_win_option(win, M.bar_option(), M.BAR) end
  local w = { win = win }
  function w.cancel()
    if not api.nvim_win_is_valid(win) then return end
    if win == prev_win then
      if api.nvim_buf_is_valid(prev_buf) then api.nvim_win_set_buf(win, prev_buf) end
      if prev_bar then compat.set_win_option(win, M.bar_option(), prev_bar) end
    elseif #api.nvim_list_wins() > 1 then
      api.nvim_win_close(win, true)
    end
    if api.nvim_buf_is_valid(ph) then pcall(api.nvim_buf_delete, ph, { force = true }) end
  end
  function w.done()
    if api.nvim_buf_is_valid(ph) then pcall(api.nvim_buf_delete, ph, { force = true }) end
  end
  return w
end

-- Helpers ------------------------------------------------------------------------

-- A centred floating window, 80% of the editor.
function H.float(buf)
  local w = math.floor(vim.o.columns * 0.8)
  local h = math.floor((vim.o.lines - 2) * 0.8)
  return api.nvim_open_win(buf, true, {
    relative = "editor", width = w, height = h, style = "minimal", border = "rounded",
    row = math.floor((vim.o.lines - 2 - h) / 2), col = math.floor((vim.o.columns - w) / 2),
  })
end

return M
