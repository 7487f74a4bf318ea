--- proctor.views — read-only views of executions: the plain-text view of the
--- output (`proctor://<id>/text`), the quickfix list made from it, and the
--- record and engine summaries :Proctor info shows. Requiring this module has
--- no side effects.

local M = {}

local api = vim.api

local util = require("proctor.util")
local engine = require("proctor.engine")

--- The lines :Proctor info {id} shows: the record, with the environment keys
--- the child got (keys only; values, and secrets, are never shown).
---@param id integer
---@return string[]
function M.execution_lines(id)
  local rec = util.check(require("proctor.actions").engine():get(id))
  local lines = { string.format("proctor #%d%s", rec.id, rec.label and ("  " .. rec.label) or "") }
  local function add(k, v) if v ~= nil then lines[#lines + 1] = string.format("  %-10s %s", k .. ":", tostring(v)) end end
  add("command", util.cmd_string(rec.cmd))
  add("cwd", rec.cwd)
  add("state", rec.state .. (rec.reason and (" (" .. rec.reason .. ")") or ""))
  add("exit", rec.exit_code or rec.signal)
  add("error", rec.error)
  add("pid", rec.pid)
  add("owner", rec.owner .. (rec.session and rec.session > 0 and (" (rpc session " .. rec.session .. ")") or ""))
  add("pty", rec.pty)
  add("duration", util.duration(util.elapsed_ms(rec)))
  local bytes = {}
  for s, n in pairs(rec.bytes or {}) do bytes[#bytes + 1] = string.format("%s %d (dropped %d)", s, n, rec.dropped[s] or 0) end
  table.sort(bytes)
  add("output", table.concat(bytes, ", "))
  if rec.previous_session then add("history", "from an earlier session") end
  if rec.env_keys then
    local keys = vim.deepcopy(rec.env_keys)
    table.sort(keys)
    add("env keys", #keys .. ": " .. table.concat(keys, " "))
  end
  return lines
end

--- The lines :Proctor info shows.
---@return string[]
function M.info_lines()
  local lines = { "proctor" }
  local c = require("proctor.config").get()
  local core, err = engine.load_core()
  lines[#lines + 1] = "  core:      " .. (core and ("proctor.core " .. core.version) or ("not loaded: " .. err))
  lines[#lines + 1] = "  lua layer: needs core " .. engine.core_version
  local eng = engine.current()
  if eng then
    local s = require("proctor").status()
    lines[#lines + 1] = string.format("  engine:    running; %d executions (%d live, %d completed, %d failed, %d canceled, %d timed out)",
      s.total, s.queued + s.starting + s.running, s.completed, s.failed, s.canceled, s.timed_out)
  else
    lines[#lines + 1] = "  engine:    not started (starts on first use)"
  end
  lines[#lines + 1] = "  shepherd:  " .. (c.engine.shepherd or ((engine.root() or "?") .. "/lua/proctor/proctor-shepherd"))
  local addr = eng and eng.address and eng:address()
  if addr then
    lines[#lines + 1] = "  socket:    " .. addr .. "  (PROCTOR_SOCKET of every execution; :help proctor-rpc)"
  elseif engine.rpc_error() then
    lines[#lines + 1] = "  socket:    disabled: " .. engine.rpc_error()
  elseif not c.rpc.enabled then
    lines[#lines + 1] = "  socket:    off (setup{ rpc = { enabled = false } })"
  else
    lines[#lines + 1] = "  socket:    " .. (engine.socket_path() or "?") .. " (when the engine starts)"
  end
  lines[#lines + 1] = string.format("  config:    notify=%s, kill_grace_ms=%d, output_limit=%d, console.open=%s",
    c.notify, c.engine.kill_grace_ms, c.engine.output_limit, c.console.open)
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
      out[#out + 1] = string.format("[proctor] the first %d bytes of %s were dropped from the ring buffer", missed, s)
    end
    vim.list_extend(out, util.plain_lines(data))
  end
  return out
end

--- `:Proctor text`: open a plain-text view of the retained output.
---@param id integer
---@param opts proctor.OpenOpts|nil
---@return integer|nil buf, integer|string|nil win_or_err
function M.text(id, opts)
  local lines, err = M.plain(id)
  if not lines then return nil, err end
  local name = "proctor://" .. id .. "/text"
  local buf = vim.fn.bufnr("^" .. vim.pesc(name) .. "$")
  if buf == -1 or not api.nvim_buf_is_valid(buf) then
    buf = api.nvim_create_buf(true, true)
    pcall(api.nvim_buf_set_name, buf, name)
    vim.bo[buf].bufhidden = "wipe"
    vim.bo[buf].swapfile = false
    api.nvim_buf_set_var(buf, "proctor_id", id)
  end
  vim.bo[buf].modifiable = true
  api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
  local cfg = require("proctor.config").get().console
  opts = opts or {}
  local win = require("proctor.console.window").show(buf, opts.open or cfg.open, opts.size or cfg.size, true)
  return buf, win
end

--- `:Proctor qf`: load the retained output into the quickfix list with 'errorformat'.
--- File names are resolved against the execution's working directory.
---@return integer|nil valid number of valid entries, string|nil err
function M.qf(id, opts)
  local lines, err = M.plain(id)
  if not lines then return nil, err end
  local rec = engine.current():get(id)
  local efm = api.nvim_eval("&errorformat")
  local scope = vim.fn.haslocaldir() == 1 and "lcd" or (vim.fn.haslocaldir(-1, 0) == 1 and "tcd" or "cd")
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

return M
