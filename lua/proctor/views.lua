--- proctor.views — read-only views of executions: the plain-text view of the
--- output (`proctor://<id>/text`, filetype `proctor-text`: it follows a
--- running execution), the quickfix list made from it, the float that lists a
--- buffer's keys, and the record and engine summaries :Proctor info shows.
--- Requiring this module has no side effects.

local M = {}
local H = {}

local api = vim.api

local window = require("proctor.console.window")
local proctor = require("proctor")
local config = require("proctor.config")
local util = require("proctor.util")
local keys = require("proctor.keys")
local engine = require("proctor.engine")
local compat = require("proctor.compat")

--- The lines :Proctor info {id} shows: the record, with the environment keys
--- the child got (keys only; values, and secrets, are never shown).
---@param id integer
---@return string[]
function M.execution_lines(id)
  local eng, err = engine.get() -- started if need be; else why it cannot start
  if not eng then util.die(err) end
  local rec = util.check(proctor.record(id)) -- with its task links
  local lines = { string.format("proctor #%d%s", rec.id, rec.label and ("  " .. rec.label) or "") }
  local function add(k, v)
    if v ~= nil then lines[#lines + 1] = string.format("  %-10s %s", k .. ":", tostring(v)) end
  end
  add("command", util.cmd_string(rec.cmd))
  add("target", rec.target)
  add("cwd", rec.target and rec.cwd == "" and "~ (the target's home)" or rec.cwd)
  add("state", engine.state_text(rec))
  if rec.task then
    add("task", rec.task .. (rec.prev_id and (" (restarted #" .. rec.prev_id .. ")") or ""))
  end
  add("exit", rec.exit_code or rec.signal)
  add("error", rec.error)
  add("pid", rec.pid)
  add(
    "owner",
    rec.owner
      .. (rec.session and rec.session > 0 and (" (rpc session " .. rec.session .. ")") or "")
  )
  add("pty", rec.pty)
  add("duration", util.duration(util.elapsed_ms(rec)))
  local bytes = {}
  for s, n in pairs(rec.bytes or {}) do
    bytes[#bytes + 1] = string.format("%s %d (dropped %d)", s, n, rec.dropped[s] or 0)
  end
  table.sort(bytes)
  add("output", table.concat(bytes, ", "))
  if rec.previous_session then add("history", "from an earlier session") end
  if rec.env_keys then
    local names = vim.deepcopy(rec.env_keys)
    table.sort(names)
    add("env keys", #names .. ": " .. table.concat(names, " "))
  end
  return lines
end

--- The lines :Proctor info shows.
---@return string[]
function M.info_lines()
  local lines = { "proctor" }
  local c = config.get()
  local core, err = engine.load_core()
  lines[#lines + 1] = "  core:      "
    .. (core and ("proctor.core " .. core.version) or ("not loaded: " .. err))
  lines[#lines + 1] = "  lua layer: needs core " .. engine.core_version
  local eng = engine.current()
  if eng then
    local s = proctor.status()
    lines[#lines + 1] = string.format(
      "  engine:    running; %d executions (%d live, %d completed, %d failed, %d canceled, %d timed out)",
      s.total,
      s.queued + s.starting + s.running,
      s.completed,
      s.failed,
      s.canceled,
      s.timed_out
    )
  else
    lines[#lines + 1] = "  engine:    not started (starts on first use)"
  end
  lines[#lines + 1] = "  shepherd:  "
    .. (c.engine.shepherd or ((engine.root() or "?") .. "/lua/proctor/proctor-shepherd"))
  local addr = eng and eng.address and eng:address()
  if addr then
    lines[#lines + 1] = "  socket:    "
      .. addr
      .. "  (PROCTOR_SOCKET of every execution; :help proctor-rpc)"
  elseif engine.rpc_error() then
    lines[#lines + 1] = "  socket:    disabled: " .. engine.rpc_error()
  elseif not c.rpc.enabled then
    lines[#lines + 1] = "  socket:    off (setup{ rpc = { enabled = false } })"
  else
    lines[#lines + 1] = "  socket:    "
      .. (engine.socket_path() or "?")
      .. " (when the engine starts)"
  end
  lines[#lines + 1] = string.format(
    "  config:    notify=%s, kill_grace_ms=%d, output_limit=%d, console.open=%s",
    c.notify,
    c.engine.kill_grace_ms,
    c.engine.output_limit,
    c.console.open
  )
  return lines
end

--- Plain text of everything the ring buffer holds for `id` (ANSI stripped).
---@return string[]|nil lines, string|nil err
function M.plain(id)
  local eng, err = engine.get()
  if not eng then return nil, err end
  local rec, msg = eng:get(id)
  if not rec then return nil, msg end
  local out = {}
  local streams = rec.pty and { "pty" } or { "stdout", "stderr" }
  for _, s in ipairs(streams) do
    local total = rec.bytes and rec.bytes[s] or 0
    local data, _, missed = eng:read(id, s, 0, math.max(total, 1))
    data = data or ""
    if s == "stderr" and data ~= "" and #out > 0 then out[#out + 1] = "── stderr ──" end
    if missed and missed > 0 then
      out[#out + 1] = string.format(
        "[proctor] the first %d bytes of %s were dropped from the ring buffer",
        missed,
        s
      )
    end
    vim.list_extend(out, util.plain_lines(data))
  end
  return out
end

--- `:Proctor text`: open a plain-text view of the retained output. While the
--- execution runs, the view follows it (refreshed at most every
--- `H.FOLLOW_MS`; the cursor stays on the last line when it was there); `R`
--- refreshes, `q` closes. Unlisted, like consoles.
---@param id integer
---@param opts proctor.OpenOpts|nil
---@return integer|nil buf, integer|string|nil win_or_err
function M.text(id, opts)
  local lines, err = M.plain(id)
  if not lines then return nil, err end
  H.hook()
  local buf = H.texts[id]
  if not buf or not api.nvim_buf_is_valid(buf) then
    buf = api.nvim_create_buf(false, true)
    pcall(api.nvim_buf_set_name, buf, "proctor://" .. id .. "/text")
    vim.bo[buf].bufhidden = "wipe"
    vim.bo[buf].swapfile = false
    api.nvim_buf_set_var(buf, "proctor_id", id)
    api.nvim_buf_set_var(buf, "proctor_view", "text")
    vim.bo[buf].filetype = "proctor-text"
    keys.map(buf, "text", function() return id end)
    H.texts[id] = buf
    api.nvim_create_autocmd("BufWipeout", {
      buffer = buf,
      once = true,
      callback = function()
        if H.texts[id] == buf then H.texts[id] = nil end
      end,
    })
  end
  H.fill(buf, lines)
  opts = opts or {}
  local win =
    window.show(buf, { how = opts.open, size = opts.size, enter = true, reuse = opts.reuse })
  window.follow(win, buf)
  return buf, win
end

--- Refresh the text view of `id` (what `R` does in it).
---@param id integer
function M.refresh(id)
  local buf = H.texts[id]
  if not buf or not api.nvim_buf_is_valid(buf) then return end
  local lines = M.plain(id)
  if lines then H.fill(buf, lines) end
  vim.cmd("redrawstatus!")
end

--- Show the keys of the current proctor buffer (`kind`: "console", "list",
--- "text") in a float; q, <Esc> or leaving it closes it.
---@param kind string|nil
---@return integer|nil win
function M.keys(kind)
  local map = kind and config.get().keymaps[kind]
  if not map then
    util.notify("no proctor keys here", vim.log.levels.WARN)
    return nil
  end
  local rows, w = keys.key_rows(map)
  local lines, width = {}, 20
  for _, r in ipairs(rows) do
    local l = " "
      .. r.lhs
      .. string.rep(" ", w - vim.fn.strdisplaywidth(r.lhs))
      .. "  "
      .. r.desc
      .. " "
    lines[#lines + 1] = l
    width = math.max(width, vim.fn.strdisplaywidth(l))
  end
  if kind == "list" then
    lines[#lines + 1] =
      " Visual mode: the keys of cancel, kill, delete (d) and rerun act on each line "
    width = math.max(width, vim.fn.strdisplaywidth(lines[#lines]))
  end
  local buf = api.nvim_create_buf(false, true)
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].filetype = "proctor-keys"
  width = math.max(1, math.min(width, vim.o.columns - 4))
  local height = math.min(#lines, math.max(1, vim.o.lines - 6))
  local win = api.nvim_open_win(buf, true, {
    relative = "editor",
    style = "minimal",
    border = "rounded",
    width = width,
    height = height,
    row = math.max(0, math.floor((vim.o.lines - height) / 2) - 1),
    col = math.floor((vim.o.columns - width) / 2),
  })
  local function close()
    if api.nvim_win_is_valid(win) then api.nvim_win_close(win, true) end
  end
  for _, k in ipairs({ "q", "<Esc>", "?" }) do
    vim.keymap.set(
      "n",
      k,
      close,
      { buffer = buf, nowait = true, silent = true, desc = "proctor: close" }
    )
  end
  api.nvim_create_autocmd(
    { "WinLeave", "BufLeave" },
    { buffer = buf, once = true, callback = close }
  )
  return win
end

--- `:Proctor qf`: load the retained output into the quickfix list with 'errorformat'.
--- File names are resolved against the execution's working directory.
---@return integer|nil valid number of valid entries, string|nil err
function M.qf(id, opts)
  local lines, err = M.plain(id)
  if not lines then return nil, err end
  local rec = engine.current():get(id)
  local efm = api.nvim_eval("&errorformat")
  local scope = vim.fn.haslocaldir() == 1 and "lcd"
    or (vim.fn.haslocaldir(-1, 0) == 1 and "tcd" or "cd")
  local prev = vim.fn.getcwd()
  local moved = rec.cwd and rec.cwd ~= prev and vim.fn.isdirectory(rec.cwd) == 1
  if moved then vim.cmd("noautocmd " .. scope .. " " .. vim.fn.fnameescape(rec.cwd)) end
  local ok, e = pcall(vim.fn.setqflist, {}, " ", {
    title = string.format("proctor #%d %s", id, util.title(rec)),
    lines = lines,
    efm = efm,
  })
  if moved then vim.cmd("noautocmd " .. scope .. " " .. vim.fn.fnameescape(prev)) end
  if not ok then return nil, tostring(e) end
  local valid = 0
  for _, item in ipairs(vim.fn.getqflist()) do
    if item.valid == 1 then valid = valid + 1 end
  end
  if not (opts and opts.open == false) then vim.cmd("botright copen") end
  return valid
end

-- Helpers ------------------------------------------------------------------------

H.texts = {} -- id -> buffer of its text view
H.hooked = false
H.pending = {} -- ids whose text view waits for a refresh
H.timer = nil
-- A followed text view is refreshed at most this often (it reads the whole ring buffer).
H.FOLLOW_MS = 200

function H.hook()
  if H.hooked then return end
  H.hooked = true
  engine.subscribe("views", function(ev)
    local buf = H.texts[ev.id]
    if not buf or not api.nvim_buf_is_valid(buf) then return end
    if ev.type == "output" or engine.TERMINAL[ev.state] then H.soon(ev.id) end
  end)
end

-- Refresh the text view of `id` soon (one timer for every view).
function H.soon(id)
  H.pending[id] = true
  if H.timer then return end
  H.timer = compat.uv.new_timer()
  H.timer:start(
    H.FOLLOW_MS,
    0,
    vim.schedule_wrap(function()
      H.timer:close()
      H.timer = nil
      local ids = H.pending
      H.pending = {}
      for pid in pairs(ids) do
        local buf = H.texts[pid]
        if buf and api.nvim_buf_is_valid(buf) and #vim.fn.win_findbuf(buf) > 0 then
          M.refresh(pid)
        end
      end
    end)
  )
end

-- Put `lines` in text view `buf`; windows whose cursor was on the last line follow.
function H.fill(buf, lines)
  local wins = vim.fn.win_findbuf(buf)
  local last = api.nvim_buf_line_count(buf)
  local following = {}
  for _, w in ipairs(wins) do
    following[w] = api.nvim_win_get_cursor(w)[1] >= last
  end
  vim.bo[buf].modifiable = true
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
  for w, f in pairs(following) do
    if f then pcall(api.nvim_win_set_cursor, w, { #lines > 0 and #lines or 1, 0 }) end
  end
end

M._H = H

return M
