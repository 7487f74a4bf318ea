--- proctor.list — the list view (`proctor://list`, filetype `proctor-list`):
--- every execution with id, state, exit, duration, start time, owner and
--- label/command, live ones first, then the newest. The first line says the
--- filter and how to see the keys; the keys (`keymaps.list`, mapped by proctor.keys) run
--- proctor.actions on the line under the cursor, or on each line of a Visual
--- range. It refreshes on state changes and, while a live execution is
--- listed, every `list.refresh_ms`. A refresh for state changes reads no
--- record from the engine thread (eng:list waits for it, and a flood keeps
--- it busy): each state event brings its record (eng:state_records), kept in
--- H.known over the last eng:list. Opening, the keys' actions and the timer
--- read the whole list again (what changed without a state event: a
--- delete, a purge, retention, the history load).
---
--- Other rows come from providers (M.add_rows): a chain of proctor.sequence()
--- is a row `c3` above the executions, and its members' titles say `[c3]`. A
--- provider's row holds a target of a kind of proctor.actions, so the keys run
--- that kind's function for the action (cancel on a chain cancels the chain).
--- Requiring this module has no side effects.

local M = {}
local H = {}

local api = vim.api
local config = require("proctor.config")
local compat = require("proctor.compat")
local uv = compat.uv
local engine = require("proctor.engine")
local util = require("proctor.util")
local keys = require("proctor.keys")

M.name = "proctor://list"
M.header_lines = 2

H.buf = nil
H.rows = {} -- line number -> execution id, or a provider's target
H.providers = {} -- name -> proctor.ListProvider, M.add_rows
H.timer = nil
H.debounce = nil
H.hooked = false
H.filter = { name = "all" } ---@type proctor.ListFilter
H.known = nil -- id -> record: the last eng:list, with the records state events brought since

---@class proctor.ListRow a row of a provider
---@field target proctor.Target what the keys act on (its `word` is the ID column)
---@field state string the state as the STATE column shows it
---@field hl string|nil the state whose highlight the STATE column gets (default: state)
---@field live boolean|nil counts as running (the running filter, the refresh timer)
---@field failed boolean|nil for the failed filter
---@field exit string|nil
---@field duration_ms integer|nil
---@field started_at integer|nil ms since the epoch
---@field owner string|nil
---@field label string|nil for the label filter
---@field title string

---@class proctor.ListProvider
---@field rows fun(): proctor.ListRow[] its rows, in the order shown (above the executions)
---@field annotate (fun(rec: proctor.Record): string|nil)|nil a prefix of an execution's title ("[c3] ")

---@class proctor.ListFilter
---@field name "all"|"running"|"failed"|"session"|"label"|"owner"
---@field value string|nil the label or owner

--- Open (or focus) the list view, with `filter` (default: the one in use).
--- The cursor starts on the first execution. Returns buf, win.
---@param filter proctor.ListFilter|nil
---@return integer buf, integer win
function M.open(filter)
  H.hook()
  if filter then H.filter = filter end
  local buf = H.buf
  if not buf or not api.nvim_buf_is_valid(buf) then buf = H.create() end
  local win
  for _, w in ipairs(api.nvim_tabpage_list_wins(0)) do
    if api.nvim_win_get_buf(w) == buf then win = w end
  end
  if win then
    api.nvim_set_current_win(win)
  else
    if not pcall(vim.cmd, "botright sbuffer " .. buf) then
      api.nvim_win_set_buf(0, buf) -- no room for a split (E36): here
    end
    win = api.nvim_get_current_win()
    pcall(api.nvim_win_set_height, win, math.max(8, math.min(20, math.floor(vim.o.lines / 3))))
  end
  compat.set_win_option(win, "wrap", false)
  M.refresh()
  if H.rows[M.header_lines + 1] then
    pcall(api.nvim_win_set_cursor, win, { M.header_lines + 1, 0 })
  end
  return buf, win
end

--- Add (or replace, or with nil remove) the row provider `name`.
---@param name string
---@param provider proctor.ListProvider|nil
function M.add_rows(name, provider)
  H.providers[name] = provider
  H.schedule_refresh()
end

--- The execution id (or a provider's target) on the cursor line of the list
--- view (when it is the current buffer).
---@return integer|proctor.Target|nil
function M.id_under_cursor()
  if not H.buf or api.nvim_get_current_buf() ~= H.buf then return nil end
  return H.rows[api.nvim_win_get_cursor(0)[1]]
end

--- The ids (and targets) on lines `first` to `last` of the list view.
---@param first integer
---@param last integer
---@return (integer|proctor.Target)[]
function M.ids_of_lines(first, last)
  local ids = {}
  for l = first, last do
    if H.rows[l] then ids[#ids + 1] = H.rows[l] end
  end
  return ids
end

--- The filter in use.
---@return proctor.ListFilter
function M.filter() return H.filter end

--- A filter from its text: "all", "running", "failed", "session", "label=NAME",
--- "owner=NAME" (nil: not one of these).
---@param text string
---@return proctor.ListFilter|nil
function M.parse_filter(text)
  if text == "all" or text == "running" or text == "failed" or text == "session" then
    return { name = text }
  end
  local k, v = text:match("^(%a+)=(.+)$")
  if k == "label" or k == "owner" then return { name = k, value = v } end
  return nil
end

--- The filters there are now, as text, in the order the filter key cycles them.
---@return string[]
function M.filter_names()
  local names = { "all", "running", "failed", "session" }
  local seen = {}
  local recs = H.records()
  for _, kind in ipairs({ "label", "owner" }) do
    for i = #recs, 1, -1 do
      local v = recs[i][kind]
      if v and v ~= "" and not seen[kind .. v] then
        seen[kind .. v] = true
        names[#names + 1] = kind .. "=" .. v
      end
    end
  end
  return names
end

--- Switch to the next filter (all, running, failed, this session, each label,
--- each owner, then all again) and show it.
---@return string the filter now
function M.next_filter()
  local names = M.filter_names()
  local cur = H.filter_text(H.filter)
  local at = 0
  for i, n in ipairs(names) do
    if n == cur then at = i end
  end
  local nxt = names[at % #names + 1]
  H.filter = M.parse_filter(nxt)
  M.refresh()
  local win = H.buf and vim.fn.bufwinid(H.buf) or -1
  if win ~= -1 then pcall(api.nvim_win_set_cursor, win, { M.header_lines + 1, 0 }) end
  return nxt
end

--- Redraw the list (keeps the cursor on the same execution).
function M.refresh() H.refresh(false) end

-- Redraw; `known`: from the records known here, when they are (H.known).
function H.refresh(known)
  local buf = H.buf
  if not buf or not api.nvim_buf_is_valid(buf) then return end
  local keep = nil
  local wins = vim.fn.win_findbuf(buf)
  for _, w in ipairs(wins) do
    keep = keep or H.rows[api.nvim_win_get_cursor(w)[1]]
  end
  local all = H.records(known)
  local recs = vim.tbl_filter(function(r) return H.matches(H.filter, r) end, all)
  local extra, annotate = H.provided()
  local shown_extra = vim.tbl_filter(function(r) return H.matches(H.filter, r) end, extra)
  table.sort(recs, function(a, b)
    local la, lb = not engine.TERMINAL[a.state], not engine.TERMINAL[b.state]
    if la ~= lb then return la end
    return a.id > b.id
  end)
  local cells, live = {}, false
  local width = { id = 2, owner = 5, state = 5, exit = 4 }
  for i, r in ipairs(recs) do
    local c = H.cells(r)
    if not engine.TERMINAL[r.state] then live = true end
    for _, fn in ipairs(annotate) do
      local ok, pre = pcall(fn, r)
      if ok and pre then c.title = pre .. c.title end
    end
    cells[i] = c
    width.id = math.max(width.id, #c.id)
    width.owner = math.max(width.owner, vim.fn.strdisplaywidth(c.owner))
    width.state = math.max(width.state, vim.fn.strdisplaywidth(c.state))
    width.exit = math.max(width.exit, vim.fn.strdisplaywidth(c.exit))
  end
  for _, r in ipairs(shown_extra) do
    if r.live then live = true end
    width.id = math.max(width.id, #r.target.word)
    width.owner = math.max(width.owner, vim.fn.strdisplaywidth(r.owner or "-"))
    width.state = math.max(width.state, vim.fn.strdisplaywidth(r.state))
    width.exit = math.max(width.exit, vim.fn.strdisplaywidth(r.exit or "-"))
  end
  local function pad(s, w) return s .. string.rep(" ", w - vim.fn.strdisplaywidth(s)) end
  local function row(id, state, exit, dur, started, owner, title)
    return table.concat({
      pad(id, width.id),
      pad(state, width.state),
      pad(exit, width.exit),
      pad(dur, 10),
      pad(started, 12),
      pad(owner, width.owner),
      title,
    }, " ")
  end
  local ftext = H.filter_text(H.filter)
  local shown = ftext == "all" and string.format("%d execution%s", #all, #all == 1 and "" or "s")
    or string.format("filter: %s (%d of %d)", ftext, #recs, #all)
  if #extra > 0 then shown = shown .. string.format(" · %d other rows", #shown_extra) end
  local lines = {
    string.format(
      "proctor — %s · %s next filter · %s keys",
      shown,
      H.key_for("filter"),
      H.key_for("help")
    ),
    row("ID", "STATE", "EXIT", "DURATION", "STARTED", "OWNER", "LABEL / COMMAND"),
  }
  local rows, marks = {}, {}
  local today = os.date("%Y%m%d")
  local function started(at)
    if not at then return "-" end
    local t = math.floor(at / 1000)
    return os.date("%Y%m%d", t) == today and os.date("%H:%M:%S", t) or os.date("%b %d %H:%M", t)
  end
  for _, r in ipairs(shown_extra) do
    local dur = r.duration_ms and util.duration(r.duration_ms) or "-"
    lines[#lines + 1] = row(
      r.target.word,
      r.state,
      r.exit or "-",
      dur,
      started(r.started_at),
      r.owner or "-",
      util.first_line(r.title)
    )
    rows[#lines] = r.target
    marks[#lines] = { state = r.hl or r.state, from = width.id + 1, to = width.id + 1 + #r.state }
  end
  for i, r in ipairs(recs) do
    local c = cells[i]
    lines[#lines + 1] = row(
      c.id,
      c.state,
      c.exit,
      util.duration(util.elapsed_ms(r)),
      started(r.started_at),
      c.owner,
      c.title
    )
    rows[#lines] = r.id
    marks[#lines] = {
      state = r.state,
      earlier = r.previous_session,
      from = width.id + 1,
      to = width.id + 1 + #c.state,
    }
  end
  if #all == 0 then
    lines[#lines + 1] = "(no executions yet — :Proctor run {cmd})"
  elseif #recs == 0 then
    lines[#lines + 1] = string.format(
      "(none of %d matches the filter %s — %s: next filter)",
      #all,
      ftext,
      H.key_for("filter")
    )
  end
  H.rows = rows
  vim.bo[buf].modifiable = true
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
  local ns = H.ns()
  api.nvim_buf_clear_namespace(buf, ns, 0, -1)
  -- extmarks: nvim_buf_add_highlight is deprecated from Neovim 0.11
  local function mark(lnum, from, to, group, prio)
    api.nvim_buf_set_extmark(
      buf,
      ns,
      lnum - 1,
      from,
      { end_col = math.min(to, #lines[lnum]), hl_group = group, priority = prio }
    )
  end
  mark(1, 0, #lines[1], "Comment")
  mark(2, 0, #lines[2], "Title")
  for lnum, m in pairs(marks) do
    -- a row from an earlier session (the history file) reads dimmed
    if m.earlier then mark(lnum, 0, #lines[lnum], "ProctorEarlier", 100) end
    mark(lnum, m.from, m.to, H.hl[m.state] or "Normal", 110)
  end
  if keep then
    for lnum, id in pairs(rows) do
      if id == keep or (type(id) == "table" and type(keep) == "table" and id.word == keep.word) then
        for _, w in ipairs(wins) do
          pcall(api.nvim_win_set_cursor, w, { lnum, 0 })
        end
      end
    end
  end
  H.set_timer(live and #wins > 0)
end

-- Helpers --------------------------------------------------------------------------

H.hl = {
  queued = "ProctorQueued",
  starting = "ProctorRunning",
  running = "ProctorRunning",
  completed = "ProctorCompleted",
  failed = "ProctorFailed",
  canceled = "ProctorCanceled",
  timed_out = "ProctorFailed",
}

function H.ns()
  H.nsid = H.nsid or api.nvim_create_namespace("proctor_list")
  return H.nsid
end

-- Every record, in id order: read from the engine (and kept in H.known), or
-- with `known` the ones known here when they are.
function H.records(known)
  if known and H.known then
    local recs = {}
    for _, r in pairs(H.known) do
      recs[#recs + 1] = r
    end
    table.sort(recs, function(a, b) return a.id < b.id end)
    return recs
  end
  H.known = nil
  local eng = engine.current()
  if not eng then return {} end
  local ok, recs = pcall(eng.list, eng)
  if not ok then return {} end
  H.known = {}
  for _, r in ipairs(recs) do
    H.known[r.id] = r
  end
  return recs
end

-- The providers' rows (in provider name order) and their annotate functions.
function H.provided()
  local names = vim.tbl_keys(H.providers)
  table.sort(names)
  local rows, annotate = {}, {}
  for _, n in ipairs(names) do
    local pr = H.providers[n]
    local ok, got = pcall(pr.rows)
    if ok then vim.list_extend(rows, got) end
    if pr.annotate then annotate[#annotate + 1] = pr.annotate end
  end
  return rows, annotate
end

-- The text of a filter ("all", "label=build").
function H.filter_text(f)
  if f.value then return f.name .. "=" .. f.value end
  return f.name
end

function H.matches(f, r)
  if r.target then -- a provider's row
    if f.name == "running" then return r.live == true end
    if f.name == "failed" then return r.failed == true end
    if f.name == "session" then return true end
    if f.name == "label" then return r.label == f.value end
    if f.name == "owner" then return r.owner == f.value end
    return true
  end
  if f.name == "running" then return not engine.TERMINAL[r.state] end
  if f.name == "failed" then return r.state == "failed" or r.state == "timed_out" end
  if f.name == "session" then return not r.previous_session end
  if f.name == "label" then return r.label == f.value end
  if f.name == "owner" then return r.owner == f.value end
  return true
end

-- The cells of a row: id, state, exit, owner, title.
function H.cells(r)
  local exit = r.exit_code and tostring(r.exit_code)
    or (r.signal or (r.reason == "spawn_error" and "spawn" or "-"))
  local state = r.state == "timed_out" and "timed out" or r.state
  if not engine.TERMINAL[r.state] then
    exit = "-"
    if r.worker_state then
      state = "w:" .. r.worker_state -- a supervised worker: its own state (ready, busy, backoff…)
    elseif engine.canceling[r.id] then
      state = "canceling…"
    end
  elseif r.state == "canceled" and r.reason == "interrupted" then
    exit = "^C"
  end
  local title = util.cmd_string(r.cmd)
  -- the label, and the command when it says more ("build: make -j8", not "make all: make all")
  if r.label and r.label ~= "" and r.label ~= title then title = r.label .. ": " .. title end
  if r.target then title = "@" .. r.target .. " " .. title end -- where it runs
  return {
    id = "#" .. r.id,
    state = state,
    exit = exit,
    owner = tostring(r.owner or "-"),
    title = util.first_line(title),
  }
end

-- The first key bound to action `name` in the list's key map (or ":Proctor …").
function H.key_for(name)
  local map = config.get().keymaps.list
  for _, b in ipairs(keys.bindings(map)) do
    if b[2] == name then return b[1] end
  end
  return "(no key)"
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
    hi def link ProctorEarlier Comment
  ]])
  if vim.fn.hlexists("DiagnosticOk") == 0 then vim.cmd("hi def link ProctorCompleted String") end
  engine.subscribe("list", function(ev)
    if ev.type ~= "state" then return end
    if H.known and ev.record then
      H.known[ev.id] = ev.record
    else -- none (past the bound of events not polled): read them all again
      H.known = nil
    end
    H.schedule_refresh()
  end)
end

function H.create()
  local buf = api.nvim_create_buf(false, true)
  pcall(api.nvim_buf_set_name, buf, M.name)
  vim.bo[buf].bufhidden = "hide"
  vim.bo[buf].swapfile = false
  vim.bo[buf].filetype = "proctor-list"
  vim.bo[buf].modifiable = false
  keys.map(buf, "list", M.id_under_cursor, {
    range = M.ids_of_lines,
    need_id = "no execution on this line",
    after = H.after,
  })
  api.nvim_create_autocmd("BufWipeout", {
    buffer = buf,
    once = true,
    callback = function()
      H.buf = nil
      H.set_timer(false)
    end,
  })
  api.nvim_create_autocmd("BufWinEnter", {
    buffer = buf,
    callback = function()
      compat.set_win_option(api.nvim_get_current_win(), "wrap", false)
      M.refresh()
    end,
  })
  H.buf = buf
  return buf
end

-- After action `name` ran from the list: show its effect at once.
function H.after(name)
  if
    name == "cancel"
    or name == "kill"
    or name == "delete"
    or name == "purge"
    or name == "input"
  then
    M.refresh()
  end
end

-- State changes refresh the list at most every 50 ms.
function H.schedule_refresh()
  if not H.buf or H.debounce then return end
  H.debounce = uv.new_timer()
  H.debounce:start(
    50,
    0,
    vim.schedule_wrap(function()
      if H.debounce then
        H.debounce:close()
        H.debounce = nil
      end
      H.refresh(true)
    end)
  )
end

function H.set_timer(on)
  if on and not H.timer then
    local ms = config.get().list.refresh_ms
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
