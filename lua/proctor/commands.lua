--- proctor.commands — the :Proctor command: parsing and completion only.
---
---   :Proctor run [-cwd={dir}] [-timeout={n}[ms|s|m]] [-pty|-nopty] [-label={name}] [-target={name}]
---                [-bg] [-nodiag] {cmd}
---   :Proctor make [options] [args]   ('makeprg' with args, 'errorformat' as the matcher)
---   :Proctor [list [filter]] | open [id] | input [id] {text} | cancel[!] [id] | delete [id]
---   :Proctor purge | rerun [id] | text [id] | qf [id] | info [id] | toggle [id] | mcp
---   :Proctor task [name] | watch [id]
---
--- An id is `12`, `#12`, a label (the latest execution with that label) or a
--- target of a kind of proctor.actions (a chain: `c3`).
--- {cmd} of run is expanded like the argument of :! (`%`, `#`, `<cword>`,
--- `%:p:h`...; `\%` is a literal %), and a simple command runs without a shell.
--- In a console (or the list, a text view) `%` is the alternate file: a
--- `proctor://` name is never expanded.
---
--- A subcommand is an entry of proctor.actions with a `command` field: this
--- module turns the words after it into the entry's id and options and calls
--- it through actions.call(), which also resolves an omitted id. Every problem
--- is shown as one `(proctor) …` message, never a traceback. Requiring this
--- module has no side effects.

local M = {}
local H = {}

local list = require("proctor.list")
local matchers = require("proctor.tasks.matchers")
local config = require("proctor.config")
local util = require("proctor.util")
local engine = require("proctor.engine")
local actions = require("proctor.actions")
local die = util.die

M.run_options =
  { "-cwd=", "-timeout=", "-pty", "-nopty", "-label=", "-target=", "-bg", "-nodiag", "--" }

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
  if not sub then sub = "list" end -- :Proctor alone opens the list
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
    die(
      string.format(
        "unknown subcommand '%s' (one of: %s)",
        sub,
        table.concat(M.subcommands(), ", ")
      )
    )
  end
  local kind = a.command.args
  if bang and a.command.bang then name = a.command.bang end
  rest = rest or ""
  if kind == "none" then
    if rest ~= "" then die(sub .. " takes no arguments") end
    return name, nil, {}
  elseif kind == "id" then
    return name, H.id(rest), {}
  elseif kind == "text" then
    local first, after = rest:match("^(%S+)%s+(.*)$")
    local id
    if first and (first:match("^#?%d+$") or actions.by_label(first)) then
      id = H.id(first)
      rest = after
    end
    if rest == "" then die(sub .. ": text is needed, e.g. :Proctor input 3 yes") end
    return name, id, { text = rest }
  elseif kind == "cmd" then
    return name, nil, { spec = H.run_spec(rest) }
  elseif kind == "makeprg" then
    return name, nil, { spec = H.make_spec(rest) }
  elseif kind == "filter" then
    return name, nil, { filter = rest ~= "" and H.filter(rest) or nil }
  elseif kind == "words" then
    return name, nil, { text = rest }
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

-- An id argument: a number, #number, a label (the latest execution with it), or
-- what completion offers (`12:make_-j8`: the id and a hint); nil when empty.
function H.id(arg)
  arg = vim.trim(arg or "")
  if arg == "" then return nil end
  local n = arg:match("^#?(%d+)$") or arg:match("^#?(%d+):")
  if n then return tonumber(n) end
  if arg:find("%s") then die(string.format("not an execution id or label: '%s'", arg)) end
  local target = actions.parse_target(arg:match("^([^:]+):") or arg)
  if target then return target end
  local id = actions.by_label(arg)
  if not id then
    actions.engine()
    die(string.format("no execution labelled '%s' (an id is a number or a label)", arg))
  end
  return id
end

-- A filter of :Proctor list: all, running, failed, session, label=NAME, owner=NAME.
function H.filter(arg)
  local f = list.parse_filter(vim.trim(arg))
  if not f then
    die(
      string.format(
        "list: unknown filter '%s' (all, running, failed, session, label=NAME, owner=NAME)",
        arg
      )
    )
  end
  return f
end

-- The proctor.run() spec of `:Proctor run [options] {cmd}`. A build or test
-- tool (make, cc, cargo, go, tsc, eslint, pytest ...) gets its built-in
-- problem matcher, as its task would, unless -nodiag (|proctor-run-matcher|).
function H.run_spec(rest)
  local spec, flags
  spec, rest, flags = H.options(rest, "run")
  -- no command: spec.cmd stays nil and the run action says what to do
  if rest ~= "" then spec.cmd = util.command_of(H.expand(rest)) end
  if spec.cmd ~= nil and not flags.nodiag then spec.diagnostics = matchers.for_run(spec.cmd) end
  return spec
end

-- The proctor.run() spec of `:Proctor make [options] [args]`: 'makeprg' with
-- the arguments where it says `$*` (else after it), expanded as :make expands
-- it, and 'errorformat' as the problem matcher; the quickfix list is always
-- replaced, as :make replaces it (-nodiag: no matcher, no list).
function H.make_spec(rest)
  local spec, args, flags = H.options(rest, "make")
  local prg = vim.api.nvim_eval("&makeprg")
  if prg == "" then die("make: 'makeprg' is empty") end
  local line
  if prg:find("$*", 1, true) then
    line = prg:gsub("%$%*", function() return args end)
  else
    line = args ~= "" and (prg .. " " .. args) or prg
  end
  spec.cmd = util.command_of(H.expand(line, "make"))
  if not flags.nodiag then
    local efm = vim.api.nvim_eval("&errorformat")
    spec.diagnostics = efm ~= "" and efm or matchers.for_command(spec.cmd)
    spec.quickfix = "always"
  end
  return spec
end

-- The options before a command (-cwd=, -timeout=, -pty, -nopty, -label=, -bg,
-- -nodiag, --): the spec they make, the rest of the line, and the flags.
function H.options(rest, sub)
  local spec = { label = nil }
  local flags = {}
  local cfg = config.get().command
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
      if v == "" then die(sub .. ": -cwd= needs a directory") end
      spec.cwd = H.expand(v, sub)
      flags.cwd = v -- as written: a target's cwd is a path on the far side
    elseif k == "target" and v then
      if v == "" then die(sub .. ": -target= needs a target's name") end
      spec.target = v
    elseif k == "timeout" and v then
      spec.timeout_ms = H.parse_duration(v, sub)
    elseif k == "label" and v then
      if v == "" then die(sub .. ": -label= needs a name") end
      spec.label = v
    elseif k == "pty" and not v then
      spec.pty = true
    elseif k == "nopty" and not v then
      spec.pty = false
    elseif k == "bg" and not v then
      open = false
    elseif k == "nodiag" and not v then
      flags.nodiag = true
    elseif sub == "make" then
      break -- the first argument of 'makeprg' (make -k)
    else
      die(
        string.format(
          "%s: unknown option '%s' (options: %s)",
          sub,
          opt,
          table.concat(M.run_options, " ")
        )
      )
    end
    rest = after
  end
  spec.open = open or nil -- run() makes the window before the process starts
  if spec.target and flags.cwd then spec.cwd = flags.cwd end
  return spec, rest, flags
end

-- `text` with the cmdline specials expanded as :! does: %, #, #n, <cword>,
-- <cWORD>, <cfile>, ... each with modifiers (%:p:h, %<); \%, \# and \< stay
-- literal. Nothing else is touched ($VAR, quotes: the shell's business).
function H.expand(text, sub)
  local out, i = {}, 1
  while i <= #text do
    local ch = text:sub(i, i)
    local nxt = text:sub(i + 1, i + 1)
    if ch == "\\" and (nxt == "%" or nxt == "#" or nxt == "<") then
      out[#out + 1] = nxt
      i = i + 2
    else
      local token = (ch == "%" or ch == "#") and text:match("^[%%#]%d*", i)
        or (
          ch == "<"
          and (
            text:match("^<cword>", i)
            or text:match("^<cWORD>", i)
            or text:match("^<cfile>", i)
            or text:match("^<cexpr>", i)
          )
        )
      if token then
        local mods, j = "", i + #token
        while text:match("^:[phtre~.]", j) do
          mods = mods .. text:sub(j, j + 1)
          j = j + 2
        end
        if ch ~= "<" and text:sub(j, j) == "<" then -- %< : the name without its extension
          mods = mods .. "<"
          j = j + 1
        end
        local tok = ch == "<" and token or H.file_token(token)
        local value = vim.fn.expand(tok .. mods)
        if ch ~= "<" and vim.fn.expand(tok):find("^proctor://") then value = "" end -- never a console's name
        if value == "" then
          die(
            string.format(
              "%s: no file name for '%s' (write \\%s for a literal %s)",
              sub or "run",
              token,
              ch,
              ch
            )
          )
        end
        out[#out + 1] = value
        i = j
      else
        out[#out + 1] = ch
        i = i + 1
      end
    end
  end
  return table.concat(out)
end

-- The token to expand for `%` or `#`: in a proctor buffer (a console, the list,
-- a text view) `%` means the file the user came from, the alternate file `#`
-- (|proctor-run-expand|); `#n` and elsewhere the token itself.
function H.file_token(token)
  if token ~= "%" then return token end
  local buf = vim.api.nvim_get_current_buf()
  if vim.b[buf].proctor_id ~= nil or vim.api.nvim_buf_get_name(buf):find("^proctor://") then
    return "#"
  end
  return token
end

-- "30" -> 30 s; "500ms", "2s", "1m", "1.5m"
function H.parse_duration(v, sub)
  local n, unit = v:match("^(%d+%.?%d*)(%a*)$")
  n = tonumber(n)
  local mul = ({ [""] = 1000, s = 1000, ms = 1, m = 60000, min = 60000, h = 3600000 })[unit or ""]
  if not n or not mul or n <= 0 then
    die(
      string.format(
        "%s: bad timeout '%s' (e.g. -timeout=30, -timeout=500ms, -timeout=2m)",
        sub or "run",
        v
      )
    )
  end
  return math.floor(n * mul)
end

-- The executions action `a` applies to, newest first: each as `id:hint` (the
-- hint is its label or the start of its command; :Proctor reads the id before
-- the colon), then each label once, then the targets of kinds that have the
-- action (`c3`).
function H.complete_ids(name, a, arglead)
  local eng = engine.current()
  if not eng then return {} end
  local res, labels = {}, {}
  for _, kind in pairs(actions.kinds) do
    if kind.actions[name] then
      for _, t in ipairs(kind.list()) do
        if (a.want ~= "live" or t.live) and vim.startswith(t.word, arglead) then
          res[#res + 1] = t.word
        end
      end
    end
  end
  local recs = eng:list()
  local lead = arglead:gsub("^#", "")
  for i = #recs, 1, -1 do
    local r = recs[i]
    if actions.fits(a, r) then
      local hint = util.first_line(util.title(r)):gsub("%s+", "_"):gsub("[^%w_.%-/=+]", "")
      local item = tostring(r.id) .. ":" .. hint:sub(1, 24)
      if vim.startswith(item, lead) then res[#res + 1] = item end
      if r.label and r.label ~= "" and not labels[r.label] and not r.label:find("%s") then
        labels[r.label] = true
        if vim.startswith(r.label, arglead) then labels[#labels + 1] = r.label end
      end
    end
  end
  for _, l in ipairs(labels) do
    res[#res + 1] = l
  end
  return res
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
  if sub:sub(-1) == "!" and a.command.bang then
    name = a.command.bang
    a = actions.actions[name]
  end
  if kind == "makeprg" then
    if arglead:match("^%-") then
      return vim.tbl_filter(function(s) return vim.startswith(s, arglead) end, M.run_options)
    end
    return vim.fn.getcompletion(arglead, "file")
  end
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
    return H.complete_ids(name, a, arglead)
  end
  if kind == "words" and a.command.complete then
    -- everything typed after the subcommand (a task name may have spaces: "make build")
    return a.command.complete((cmdline:gsub("^%s*%S+%s+%S+%s*", "", 1)))
  end
  if kind == "filter" and n == 2 then
    return vim.tbl_filter(function(f) return vim.startswith(f, arglead) end, list.filter_names())
  end
  return {}
end

M._H = H

return M
