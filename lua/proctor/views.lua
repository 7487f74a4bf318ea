--- proctor.views — read-only views of executions: the record and engine
--- summaries :Proctor info shows. Requiring this module has no side effects.

local M = {}

local util = require("proctor.util")
local engine = require("proctor.engine")

--- The lines :Proctor info {id} shows: the record, with the environment keys
--- the child got (keys only; values, and secrets, are never shown).
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

return M
