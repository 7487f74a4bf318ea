--- proctor.commands — the :Proctor command: parsing, dispatch, completion.
---
---   :Proctor run [-cwd={dir}] [-timeout={n}[ms|s|m]] [-pty|-nopty] [-label={name}] [-bg] {cmd}
---   :Proctor list | open [id] | input [id] {text} | cancel[!] [id] | delete [id]
---   :Proctor purge | rerun [id] | text [id] | qf [id] | info [id] | mcp
---
--- Where an id is optional it defaults to the execution of the console (or list
--- line) under the cursor, then to the most recent execution. Every problem is
--- shown as one `(proctor) …` message, never a traceback. Requiring this module
--- has no side effects.

local M = {}
local H = {}

local util = require("proctor.util")
local engine = require("proctor.engine")

M.subcommands = { "run", "list", "open", "input", "cancel", "cancel!", "delete", "purge", "rerun",
  "text", "qf", "info", "mcp" }

M.run_options = { "-cwd=", "-timeout=", "-pty", "-nopty", "-label=", "-bg", "--" }

--- Entry point of the user command (`opts` as given by nvim_create_user_command).
function M.dispatch(opts)
  local args = opts.args or ""
  local sub, rest = args:match("^%s*(%S+)%s*(.-)%s*$")
  return M.exec_raw(sub, rest or "", opts.bang)
end

--- Run a subcommand from a list of words (keymaps, tests): exec({ "cancel", "3" }).
function M.exec(words, bang)
  local sub = words[1]
  local rest = table.concat(words, " ", 2)
  return M.exec_raw(sub, rest, bang)
end

--- Run subcommand `sub` with the raw argument string `rest`. Returns what the
--- subcommand returned, or nil after showing one error message.
function M.exec_raw(sub, rest, bang)
  local ok, res = xpcall(function()
    if not sub then
      H.die("a subcommand is needed: " .. table.concat(M.subcommands, ", "))
    end
    if sub:sub(-1) == "!" then
      bang = true
      sub = sub:sub(1, -2)
    end
    local fn = H.sub[sub]
    if not fn then
      H.die(string.format("unknown subcommand '%s' (one of: %s)", sub, table.concat(M.subcommands, ", ")))
    end
    return fn(rest, bang)
  end, function(e)
    if type(e) == "table" and e.proctor then return e end
    return { internal = tostring(e), trace = debug.traceback(tostring(e), 2) }
  end)
  if ok then return res end
  if res.proctor then
    util.notify(res.proctor)
  else
    M.last_trace = res.trace
    util.notify("internal error: " .. res.internal:gsub("\n.*", ""))
  end
  return nil
end

--- Completion for :Proctor.
function M.complete(arglead, cmdline, _)
  local ok, res = pcall(H.complete, arglead, cmdline)
  return ok and res or {}
end

-- Subcommands ----------------------------------------------------------------------

H.sub = {}

function H.sub.run(rest)
  local spec = { label = nil }
  local cfg = require("proctor.config").get().command
  local open = cfg.open
  spec.pty = cfg.pty
  while true do
    local opt, after = rest:match("^(%-%S*)%s*(.*)$")
    if not opt then break end
    if opt == "--" then
      rest = after
      break
    end
    local k, v = opt:match("^%-(%w+)=(.*)$")
    k = k or opt:sub(2)
    if k == "cwd" and v then
      if v == "" then H.die("run: -cwd= needs a directory") end
      spec.cwd = v
    elseif k == "timeout" and v then
      spec.timeout_ms = H.parse_duration(v)
    elseif k == "label" and v then
      if v == "" then H.die("run: -label= needs a name") end
      spec.label = v
    elseif k == "pty" and not v then
      spec.pty = true
    elseif k == "nopty" and not v then
      spec.pty = false
    elseif k == "bg" and not v then
      open = false
    else
      H.die(string.format("run: unknown option '%s' (options: %s)", opt, table.concat(M.run_options, " ")))
    end
    rest = after
  end
  if rest == "" then H.die("run: a command is needed, e.g. :Proctor run make -j8") end
  spec.cmd = rest
  spec.open = open or nil -- run() makes the window before the process starts
  local ex, err = require("proctor").run(spec)
  if not ex then H.die("run: " .. H.strip(err)) end
  return ex
end

function H.sub.list()
  H.engine()
  return require("proctor.list").open()
end

function H.sub.open(rest)
  local id = H.id(rest, true)
  H.check(require("proctor").open(id))
  return id
end

function H.sub.input(rest)
  local first, after = rest:match("^(%S+)%s+(.*)$")
  local id
  if first and first:match("^#?%d+$") then
    id = H.id(first, true)
    rest = after
  else
    id = H.id("", true)
  end
  if rest == "" then H.die("input: text is needed, e.g. :Proctor input 3 yes") end
  local ok, err = require("proctor").input(id, rest .. "\n")
  if not ok then H.die("input: " .. H.strip(err)) end
  return true
end

function H.sub.cancel(rest, bang)
  local id = H.id(rest, true)
  local res, err = require("proctor").cancel(id, bang)
  if not res then H.die(H.strip(err)) end
  if res == "not_found" then H.die("no such execution " .. id) end
  if res == "already_terminal" then
    util.notify(string.format("execution %d already ended (%s)", id, tostring(engine.state[id] or "done")),
      vim.log.levels.WARN)
  else
    util.notify(string.format("%s execution %d", bang and "killing" or "canceling", id), vim.log.levels.INFO)
  end
  return res
end

function H.sub.delete(rest)
  local id = H.id(rest, false)
  local res, err = require("proctor").delete(id)
  if not res then H.die(H.strip(err)) end
  if res == "not_found" then H.die("no such execution " .. id) end
  if res == "active_process_conflict" then
    H.die(string.format("execution %d is still running: cancel it first (:Proctor cancel %d)", id, id))
  end
  return res
end

function H.sub.purge(rest)
  if rest ~= "" then H.die("purge takes no arguments") end
  H.engine()
  local n, err = require("proctor").purge()
  if not n then H.die(H.strip(err)) end
  util.notify(string.format("purged %d finished execution%s", n, n == 1 and "" or "s"), vim.log.levels.INFO)
  return n
end

function H.sub.rerun(rest)
  local id = H.id(rest, true)
  local spec = engine.specs[id]
  local rec = engine.current():get(id)
  local new = {}
  if spec then
    for k, v in pairs(spec) do
      if k ~= "open" then new[k] = v end
    end
  else
    new = { cmd = rec.cmd, cwd = rec.cwd, label = rec.label, pty = rec.pty, owner = "nvim" }
  end
  new.open = (spec == nil or spec.open or require("proctor.console").get(id) ~= nil) or nil
  local ex, err = require("proctor").run(new)
  if not ex then H.die("rerun: " .. H.strip(err)) end
  return ex
end

function H.sub.text(rest)
  local id = H.id(rest, true)
  H.check(require("proctor.console").text(id))
  return id
end

function H.sub.qf(rest)
  local id = H.id(rest, true)
  local n, err = require("proctor.console").qf(id)
  if not n then H.die(H.strip(err)) end
  return n
end

function H.sub.info(rest)
  local lines
  if rest and rest:match("%S") then
    lines = M.execution_lines(H.id(rest, false))
  else
    lines = M.info_lines()
  end
  vim.api.nvim_echo({ { table.concat(lines, "\n") } }, true, {})
  return lines
end

-- The proctor-mcp registration snippets for this editor's socket (:help proctor-mcp).
function H.sub.mcp()
  local _, lines = require("proctor.mcp").show()
  return lines
end

--- The lines :Proctor info {id} shows: the record, with the environment keys
--- the child got (keys only; values, and secrets, are never shown).
function M.execution_lines(id)
  local rec = H.check(H.engine():get(id))
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

-- Helpers --------------------------------------------------------------------------

function H.die(msg) error({ proctor = msg }, 0) end

-- "ENOENT: no such execution 4" -> "no such execution 4"
function H.strip(err) return (tostring(err):gsub("^E%u+: ", "")) end

function H.check(a, b)
  if a == nil then H.die(H.strip(b)) end
  return a, b
end

function H.engine()
  local eng, err = engine.get()
  if not eng then H.die(err) end
  return eng
end

-- Resolve an id argument. `fallback_recent`: with no argument, use the most recent.
function H.id(arg, fallback_recent)
  local eng = H.engine()
  arg = vim.trim(arg or "")
  local id
  if arg ~= "" then
    local n = arg:match("^#?(%d+)$")
    if not n then H.die(string.format("not an execution id: '%s'", arg)) end
    id = tonumber(n)
  else
    id = M.default_id(fallback_recent)
    if not id then H.die("no execution yet: give an id, or start one with :Proctor run {cmd}") end
  end
  if not eng:get(id) then H.die("no such execution " .. id) end
  return id
end

--- The id of the console or list line under the cursor, else (optionally) the most recent.
function M.default_id(fallback_recent)
  local id = require("proctor.console").id_of_buf(0)
  if id then return id end
  local okl, list = pcall(require, "proctor.list")
  if okl then
    id = list.id_under_cursor()
    if id then return id end
  end
  if fallback_recent == false then return nil end
  local eng = engine.current()
  if not eng then return nil end
  local all = eng:list()
  return all[#all] and all[#all].id or nil
end

-- "30" -> 30 s; "500ms", "2s", "1m", "1.5m"
function H.parse_duration(v)
  local n, unit = v:match("^(%d+%.?%d*)(%a*)$")
  n = tonumber(n)
  local mul = ({ [""] = 1000, s = 1000, ms = 1, m = 60000, min = 60000, h = 3600000 })[unit or ""]
  if not n or not mul or n <= 0 then
    H.die(string.format("run: bad timeout '%s' (e.g. -timeout=30, -timeout=500ms, -timeout=2m)", v))
  end
  return math.floor(n * mul)
end

H.id_subs = { open = true, input = true, cancel = true, ["cancel!"] = true, delete = true, rerun = true,
  text = true, qf = true, info = true }

function H.complete(arglead, cmdline)
  local words = vim.split(cmdline:gsub("^%s*%S+", "", 1), "%s+", { trimempty = false })
  -- words[1] is "" (space after the command name), the last one is being completed
  local args = {}
  for _, w in ipairs(words) do
    if w ~= "" then args[#args + 1] = w end
  end
  local n = #args
  if arglead == "" then n = n + 1 end
  if n <= 1 then
    return vim.tbl_filter(function(s) return vim.startswith(s, arglead) end, M.subcommands)
  end
  local sub = args[1]
  if sub == "run" then
    if arglead:match("^%-cwd=") then
      local dirs = vim.fn.getcompletion(arglead:sub(6), "dir")
      return vim.tbl_map(function(d) return "-cwd=" .. d end, dirs)
    end
    local only_opts = true
    for i = 2, n - 1 do
      if not args[i]:match("^%-") then only_opts = false end
    end
    if only_opts then
      if arglead:match("^%-") then
        return vim.tbl_filter(function(s) return vim.startswith(s, arglead) end, M.run_options)
      end
      return vim.fn.getcompletion(arglead, "shellcmd")
    end
    return vim.fn.getcompletion(arglead, "file")
  end
  if H.id_subs[sub] and n == 2 then
    local eng = engine.current()
    if not eng then return {} end
    local ids = {}
    local recs = eng:list()
    for i = #recs, 1, -1 do
      local r = recs[i]
      local live = not engine.TERMINAL[r.state]
      local want = true
      if sub == "cancel" or sub == "cancel!" or sub == "input" then want = live end
      if sub == "delete" then want = not live end
      local s = tostring(r.id)
      if want and vim.startswith(s, (arglead:gsub("^#", ""))) then ids[#ids + 1] = s end
    end
    return ids
  end
  return {}
end

M._H = H

return M
