--- proctor.list — the list view (`proctor://list`): every execution with id,
--- state, exit, duration, start time, owner and label/command; keys to open,
--- cancel, kill, delete, rerun, send input, purge, refresh and close, shown in
--- the buffer's first line. It refreshes on state changes and, while a live
--- execution is listed, every `list.refresh_ms`. Requiring this module has no
--- side effects.

local M = {}
local H = {}

local api = vim.api
local uv = require("proctor.compat").uv
local engine = require("proctor.engine")
local util = require("proctor.util")

M.name = "proctor://list"
M.header_lines = 2

H.buf = nil
H.rows = {} -- line number -> id
H.timer = nil
H.debounce = nil
H.hooked = false

--- Open (or focus) the list view. Returns buf, win.
---@return integer buf, integer win
function M.open()
  H.hook()
  local buf = H.buf
  if not buf or not api.nvim_buf_is_valid(buf) then buf = H.create() end
  local win
  for _, w in ipairs(api.nvim_tabpage_list_wins(0)) do
    if api.nvim_win_get_buf(w) == buf then win = w end
  end
  if win then
    api.nvim_set_current_win(win)
  else
    vim.cmd("botright sbuffer " .. buf)
    win = api.nvim_get_current_win()
    pcall(api.nvim_win_set_height, win, math.max(8, math.min(20, vim.o.lines / 3)))
  end
  M.refresh()
  return buf, win
end

--- The execution id on the cursor line of the list view (when it is the current buffer).
---@return integer|nil
function M.id_under_cursor()
  if not H.buf or api.nvim_get_current_buf() ~= H.buf then return nil end
  return H.rows[api.nvim_win_get_cursor(0)[1]]
end

--- Redraw the list (keeps the cursor on the same execution).
function M.refresh()
  local buf = H.buf
  if not buf or not api.nvim_buf_is_valid(buf) then return end
  local keep = nil
  local wins = vim.fn.win_findbuf(buf)
  for _, w in ipairs(wins) do
    keep = keep or H.rows[api.nvim_win_get_cursor(w)[1]]
  end
  local keys = {}
  local actions = require("proctor.actions")
  for _, b in ipairs(actions.bindings(require("proctor.config").get().keymaps.list)) do
    keys[#keys + 1] = b[1] .. " " .. (type(b[2]) == "string" and b[2] or "fn")
  end
  local lines = {
    "proctor — " .. table.concat(keys, "  "),
    string.format("%-6s %-10s %-9s %-10s %-8s %-6s %s", "ID", "STATE", "EXIT", "DURATION", "STARTED", "OWNER",
      "LABEL / COMMAND"),
  }
  local rows, hl = {}, {}
  local eng = engine.current()
  local live = false
  local recs = eng and eng:list() or {}
  for i = #recs, 1, -1 do
    local r = recs[i]
    local exit = r.exit_code and tostring(r.exit_code) or (r.signal or (r.reason == "spawn_error" and "spawn" or "-"))
    if not engine.TERMINAL[r.state] then
      live = true
      exit = "-"
    end
    local started = r.started_at and os.date("%H:%M:%S", math.floor(r.started_at / 1000)) or "-"
    if r.previous_session and r.started_at then -- from the history file: show the day too
      started = os.date("%m-%d", math.floor(r.started_at / 1000)) .. "*"
    end
    local title = util.title(r)
    if r.label and r.label ~= "" then title = r.label .. ": " .. util.cmd_string(r.cmd) end
    if r.previous_session then title = "(earlier session) " .. title end
    local state = r.state
    if r.worker_state and not engine.TERMINAL[r.state] then
      state = "w:" .. r.worker_state -- a supervised worker: its own state (ready, busy, backoff…)
    end
    lines[#lines + 1] = string.format("#%-5d %-10s %-9s %-10s %-8s %-6s %s", r.id, state, exit,
      util.duration(util.elapsed_ms(r)), started, tostring(r.owner or "-"), title:gsub("\n", " "))
    rows[#lines] = r.id
    hl[#lines] = r.state
  end
  if #recs == 0 then lines[#lines + 1] = "(no executions yet — :Proctor run {cmd})" end
  H.rows = rows
  vim.bo[buf].modifiable = true
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
  local ns = H.ns()
  api.nvim_buf_clear_namespace(buf, ns, 0, -1)
  -- extmarks: nvim_buf_add_highlight is deprecated from Neovim 0.11
  local function mark(row, from, to, group)
    api.nvim_buf_set_extmark(buf, ns, row, from, { end_col = math.min(to, #lines[row + 1]), hl_group = group })
  end
  mark(0, 0, #lines[1], "Comment")
  mark(1, 0, #lines[2], "Title")
  for lnum, st in pairs(hl) do mark(lnum - 1, 7, 17, H.hl[st] or "Normal") end
  if keep then
    for lnum, id in pairs(rows) do
      if id == keep then
        for _, w in ipairs(wins) do pcall(api.nvim_win_set_cursor, w, { lnum, 0 }) end
      end
    end
  end
  H.set_timer(live and #wins > 0)
end

--- Run a list-view action (an entry of proctor.actions) on the execution
--- under the cursor: what the keys do.
---@param name string open|cancel|kill|delete|rerun|input|purge|refresh|close
function M.action(name)
  local actions = require("proctor.actions")
  local a = actions.actions[name]
  local id = M.id_under_cursor()
  if a and a.id == "required" and not id then
    util.notify("no execution on this line", vim.log.levels.WARN)
    return
  end
  actions.call(name, id)
  H.after(name)
end

-- Helpers --------------------------------------------------------------------------

H.hl = {
  queued = "ProctorQueued", starting = "ProctorRunning", running = "ProctorRunning",
  completed = "ProctorCompleted", failed = "ProctorFailed", canceled = "ProctorCanceled",
  timed_out = "ProctorFailed",
}

function H.ns()
  H.nsid = H.nsid or api.nvim_create_namespace("proctor_list")
  return H.nsid
end

function H.hook()
  if H.hooked then return end
  H.hooked = true
  vim.cmd([[
    hi def link ProctorQueued Comment
    hi def link ProctorRunning DiagnosticInfo
    hi def link ProctorCompleted DiagnosticOk
    hi def link ProctorFailed DiagnosticError
    hi def link ProctorCanceled DiagnosticWarn
  ]])
  if vim.fn.hlexists("DiagnosticOk") == 0 then vim.cmd("hi def link ProctorCompleted String") end
  engine.subscribe("list", function(ev)
    if ev.type == "state" then H.schedule_refresh() end
  end)
end

function H.create()
  local buf = api.nvim_create_buf(false, true)
  pcall(api.nvim_buf_set_name, buf, M.name)
  vim.bo[buf].bufhidden = "hide"
  vim.bo[buf].swapfile = false
  vim.bo[buf].filetype = "proctor-list"
  vim.bo[buf].modifiable = false
  H.keymaps(buf)
  api.nvim_create_autocmd("BufWipeout", {
    buffer = buf,
    once = true,
    callback = function()
      H.buf = nil
      H.set_timer(false)
    end,
  })
  api.nvim_create_autocmd("BufWinEnter", { buffer = buf, callback = function() M.refresh() end })
  H.buf = buf
  return buf
end

-- The list view's keys (setup{ keymaps = { list } }): each acts on the line under the cursor.
function H.keymaps(buf)
  local map = require("proctor.config").get().keymaps.list
  local actions = require("proctor.actions")
  for _, b in ipairs(actions.bindings(map)) do
    local rhs = b[2]
    local fn
    if type(rhs) == "string" then
      fn = function() M.action(rhs) end
    else
      fn = function() util.protect(rhs, M.id_under_cursor()) end
    end
    vim.keymap.set("n", b[1], fn, { buffer = buf, nowait = true, silent = true, desc = "proctor list: " .. b[3] })
  end
end

-- After action `name` ran from the list: show its effect at once.
function H.after(name)
  if name ~= "open" and name ~= "rerun" and name ~= "close" and name ~= "refresh" then M.refresh() end
end

-- State changes refresh the list at most every 50 ms.
function H.schedule_refresh()
  if not H.buf or H.debounce then return end
  H.debounce = uv.new_timer()
  H.debounce:start(50, 0, vim.schedule_wrap(function()
    if H.debounce then
      H.debounce:close()
      H.debounce = nil
    end
    M.refresh()
  end))
end

function H.set_timer(on)
  if on and not H.timer then
    local ms = require("proctor.config").get().list.refresh_ms
    H.timer = uv.new_timer()
    H.timer:start(ms, ms, vim.schedule_wrap(function() M.refresh() end))
  elseif not on and H.timer then
    H.timer:stop()
    H.timer:close()
    H.timer = nil
  end
end

M._H = H

return M
