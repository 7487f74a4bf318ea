--- proctor.commands — the :Proctor command: parsing and completion only.
---
---   :Proctor run [-cwd={dir}] [-timeout={n}[ms|s|m]] [-pty|-nopty] [-label={name}] [-bg] {cmd}
---   :Proctor list | open [id] | input [id] {text} | cancel[!] [id] | delete [id]
---   :Proctor purge | rerun [id] | text [id] | qf [id] | info [id] | mcp
---
--- A subcommand is an entry of proctor.actions with a `command` field: this
--- module turns the words after it into the entry's id and options and calls
--- it through actions.call(), which also resolves an omitted id. Every problem
--- is shown as one `(proctor) …` message, never a traceback. Requiring this
--- module has no side effects.

local M = {}
local H = {}

local util = require("proctor.util")
local engine = require("proctor.engine")
local actions = require("proctor.actions")
local die = util.die

M.run_options = { "-cwd=", "-timeout=", "-pty", "-nopty", "-label=", "-bg", "--" }


--- Entry point of the user command (`opts` as given by nvim_create_user_command).
---@param opts {args: string, bang: boolean}
function M.dispatch(opts)
  local args = opts.args or ""
  local sub, rest = args:match("^%s*(%S+)%s*(.-)%s*$")
  return M.exec_raw(sub, rest or "", opts.bang)
end

--- Run a subcommand from a list of words (tests, scripts): exec({ "cancel", "3" }).
---@param words string[]
---@param bang boolean|nil
function M.exec(words, bang)
  local sub = words[1]
  local rest = table.concat(words, " ", 2)
  return M.exec_raw(sub, rest, bang)
end

--- Run subcommand `sub` with the raw argument string `rest`. Returns what the
--- action returned, or nil after showing one error message.
---@param sub string|nil
---@param rest string
---@param bang boolean|nil
function M.exec_raw(sub, rest, bang)
  return util.protect(function()
    local name, id, opts = M.parse(sub, rest, bang)
    return actions.run(name, id, opts)
  end)
end

--- The subcommand names (with `cancel!`-like forms), in actions.ORDER's order.
---@return string[]
function M.subcommands()
  local names = {}
  for _, name in ipairs(actions.names()) do
    local a = actions.actions[name]
    if a.command then
      local n = a.command.name or name
      names[#names + 1] = n
      if a.command.bang then names[#names + 1] = n .. "!" end
    end
  end
  return names
end

--- Parse one :Proctor command line: the action to run, its id and options.
--- Dies (util.die) with a message for the user on bad input.
---@return string action, integer|nil id, table opts
function M.parse(sub, rest, bang)
  if not sub then die("a subcommand is needed: " .. table.concat(M.subcommands(), ", ")) end
  if sub:sub(-1) == "!" then
    bang = true
    sub = sub:sub(1, -2)
  end
  local name, a = H.find(sub)
  if not a then
    die(string.format("unknown subcommand '%s' (one of: %s)", sub, table.concat(M.subcommands(), ", ")))
  end
  local kind = a.command.args
  if bang and a.command.bang then name, a = a.command.bang, actions.actions[a.command.bang] end
  rest = rest or ""
  if kind == "none" then
    if rest ~= "" then die(sub .. " takes no arguments") end
    return name, nil, {}
  elseif kind == "id" then
    return name, H.id(rest), {}
  elseif kind == "text" then
    local first, after = rest:match("^(%S+)%s+(.*)$")
    local id
    if first and first:match("^#?%d+$") then
      id = H.id(first)
      rest = after
    end
    if rest == "" then die(sub .. ": text is needed, e.g. :Proctor input 3 yes") end
    return name, id, { text = rest }
  elseif kind == "cmd" then
    return name, nil, { spec = H.run_spec(rest) }
  end
  die("internal: unknown argument kind " .. tostring(kind))
end

--- Completion for :Proctor.
---@param arglead string
---@param cmdline string
---@return string[]
function M.complete(arglead, cmdline, _)
  local ok, res = pcall(H.complete, arglead, cmdline)
  return ok and res or {}
end

-- Helpers --------------------------------------------------------------------------

-- The action a subcommand names: name, entry.
function H.find(sub)
  for name, a in pairs(actions.actions) do
    if a.command and (a.command.name or name) == sub then return name, a end
  end
end

-- An id argument: nil when empty.
function H.id(arg)
  arg = vim.trim(arg or "")
  if arg == "" then return nil end
  local n = arg:match("^#?(%d+)$")
  if not n then die(string.format("not an execution id: '%s'", arg)) end
  return tonumber(n)
end

-- The proctor.run() spec of `:Proctor run [options] {cmd}`.
function H.run_spec(rest)
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
      if v == "" then die("run: -cwd= needs a directory") end
      spec.cwd = v
    elseif k == "timeout" and v then
      spec.timeout_ms = H.parse_duration(v)
    elseif k == "label" and v then
      if v == "" then die("run: -label= needs a name") end
      spec.label = v
    elseif k == "pty" and not v then
      spec.pty = true
    elseif k == "nopty" and not v then
      spec.pty = false
    elseif k == "bg" and not v then
      open = false
    else
      die(string.format("run: unknown option '%s' (options: %s)", opt, table.concat(M.run_options, " ")))
    end
    rest = after
  end
  if rest == "" then die("run: a command is needed, e.g. :Proctor run make -j8") end
  spec.cmd = rest
  spec.open = open or nil -- run() makes the window before the process starts
  return spec
end

-- "30" -> 30 s; "500ms", "2s", "1m", "1.5m"
function H.parse_duration(v)
  local n, unit = v:match("^(%d+%.?%d*)(%a*)$")
  n = tonumber(n)
  local mul = ({ [""] = 1000, s = 1000, ms = 1, m = 60000, min = 60000, h = 3600000 })[unit or ""]
  if not n or not mul or n <= 0 then
    die(string.format("run: bad timeout '%s' (e.g. -timeout=30, -timeout=500ms, -timeout=2m)", v))
  end
  return math.floor(n * mul)
end

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
    return vim.tbl_filter(function(s) return vim.startswith(s, arglead) end, M.subcommands())
  end
  local sub = args[1]
  local name, a = H.find((sub:gsub("!$", "")))
  if not a then return {} end
  local kind = a.command.args
  if sub:sub(-1) == "!" and a.command.bang then a = actions.actions[a.command.bang] end
  if kind == "cmd" then
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
  if a.id and (kind == "id" or kind == "text") and n == 2 then
    local eng = engine.current()
    if not eng then return {} end
    local ids = {}
    local recs = eng:list()
    for i = #recs, 1, -1 do
      local r = recs[i]
      local s = tostring(r.id)
      if actions.fits(a, r) and vim.startswith(s, (arglead:gsub("^#", ""))) then ids[#ids + 1] = s end
    end
    return ids
  end
  return {}
end

M._H = H

return M
