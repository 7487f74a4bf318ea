--- proctor.tasks.vscode — the tasks of a `.vscode/tasks.json` (|proctor-vscode|):
--- a discovery source (tasks/discover.lua lists `M.provider`) whose tasks
--- become proctor task definitions.
---
---   tasks.json (JSONC, trusted dir) ──► M.tasks(ws, text) ──► definitions
---       static ones: cmd, cwd, env, diagnostics, ready, after | sequence, open
---       launch-time ones (${file}, ${input:x}, ...): resolved by M.launch
---   run (picker, :Proctor task/build/test, after, sequence) ──► M.launch(def, cb)
---       ──► prompts (vim.ui.input / vim.ui.select, inputsecret for a password)
---       ──► the definition proctor.run() takes (a password as a secret)
---
--- A task that cannot be run as written (an unknown variable, a regexp
--- proctor cannot translate, an unknown matcher or type) is listed and its
--- run fails with a message naming the task and what is wrong.
--- Requiring this module has no side effects.

local M = {}
local H = {}

local jsonc = require("proctor.tasks.jsonc")
local jsregex = require("proctor.tasks.jsregex")
local util = require("proctor.util")
local uv = require("proctor.compat").uv

M.FILE = ".vscode/tasks.json"

--- The discovery source (tasks/discover.lua): only in a trusted directory.
M.provider = {
  name = "vscode",
  files = { M.FILE },
  evaluates = "read " .. M.FILE,
  intro = "proctor: %s has a "
    .. M.FILE
    .. ": its tasks run any command they name. Trust this directory to list them?",
  run = function(dir, present, done)
    local text = H.read(present[1] or (dir .. "/" .. M.FILE))
    local defs, err = M.tasks(dir, text or "")
    if not defs then error(M.FILE .. ": " .. err, 0) end
    done(defs)
  end,
  launch = function(def, cb) return M.launch(def, cb) end,
}

--- The task definitions of a tasks.json whose workspace folder is `ws`.
---@param ws string absolute
---@param text string
---@return table[]|nil defs, string|nil err
function M.tasks(ws, text)
  local doc, err = jsonc.decode(text)
  if not doc then return nil, err end
  if type(doc) ~= "table" then return nil, "not an object" end
  local top = H.platform(doc)
  local inputs = {}
  for _, inp in ipairs(H.list(doc.inputs)) do
    if type(inp) == "table" and type(inp.id) == "string" then inputs[inp.id] = inp end
  end
  local out, seen = {}, {}
  for i, raw in ipairs(H.list(doc.tasks)) do
    if type(raw) == "table" then
      local t = H.platform(raw)
      for _, k in ipairs({ "options", "presentation" }) do -- top-level defaults
        if type(top[k]) == "table" then t[k] = H.merge(top[k], t[k]) end
      end
      local name = H.label(t)
      if name and not seen[name] then
        seen[name] = true
        out[#out + 1] = H.definition(ws, t, name, inputs, i)
      end
    end
  end
  return out
end

--- Make definition `def` (of this source) runnable: prompt for its inputs,
--- resolve the variables of the moment (${file}, ${lineNumber} ...), and
--- answer cb(def) with a definition proctor.run() takes, or cb(nil, err).
---@param def table
---@param cb fun(def: table|nil, err: string|nil)
function M.launch(def, cb)
  local v = def.vscode
  if not v then return cb(def) end
  if v.error then return cb(nil, ("task '%s': %s"):format(def.name, v.error)) end
  if not v.raw then return cb(H.clean(def)) end
  H.ask(def.name, v.raw, v.inputs, function(answers, err)
    if not answers then return cb(nil, err) end
    local ok, res = pcall(H.build, v.ws, v.raw, def.name, { answers = answers, inputs = v.inputs })
    if not ok then
      return cb(nil, ("task '%s': %s"):format(def.name, type(res) == "table" and res.msg or res))
    end
    cb(H.clean(res))
  end)
end

-- Helpers ------------------------------------------------------------------------

function H.read(f)
  local fd = io.open(f, "rb")
  if not fd then return nil end
  local s = fd:read("*a")
  fd:close()
  return s
end

function H.list(v) return type(v) == "table" and v or {} end

function H.fail(msg) error({ msg = msg }, 0) end

-- A shallow copy of `a` with `b`'s fields over it (env and options merged a level deeper).
function H.merge(a, b)
  local out = {}
  for k, v in pairs(type(a) == "table" and a or {}) do
    out[k] = v
  end
  for k, v in pairs(type(b) == "table" and b or {}) do
    if (k == "env" or k == "options" or k == "shell") and type(out[k]) == "table" then
      out[k] = H.merge(out[k], v)
    else
      out[k] = v
    end
  end
  return out
end

-- The task (or the file's top level) with its `linux` properties over it.
function H.platform(t)
  if type(t.linux) ~= "table" then return t end
  return H.merge(t, t.linux)
end

-- A task's name: its label, or what VS Code calls a labelless npm or typescript task.
function H.label(t)
  if type(t.label) == "string" and t.label ~= "" then return t.label end
  if type(t.taskName) == "string" and t.taskName ~= "" then return t.taskName end
  if t.type == "npm" and type(t.script) == "string" then return "npm: " .. t.script end
  if t.type == "typescript" and type(t.tsconfig) == "string" then
    return ("tsc: %s - %s"):format(t.option == "watch" and "watch" or "build", t.tsconfig)
  end
  return nil
end

-- The definition of one task: built now when nothing in it waits for the
-- launch, else a definition M.launch builds; an error is kept for the run.
function H.definition(ws, t, name, inputs, index)
  local group, default = H.group(t.group)
  local base = {
    name = name,
    source = "vscode",
    cwd = ws,
    desc = type(t.detail) == "string" and t.detail or H.describe(t),
    group = group,
    default = default,
    order = index,
  }
  local ok, res = pcall(H.build, ws, t, name, { static = true, inputs = inputs })
  if ok then
    res.group, res.default, res.desc, res.source = group, default, base.desc, "vscode"
    res.vscode = { ws = ws }
    return res
  end
  base.vscode = { ws = ws, raw = t, inputs = inputs }
  if type(res) == "table" and res.launch then return base end
  base.vscode.error = type(res) == "table" and res.msg or tostring(res)
  return base
end

-- group: "build" | { kind = "build", isDefault = true } -> kind, default.
function H.group(g)
  if type(g) == "string" then return (g == "build" or g == "test") and g or nil, nil end
  if type(g) == "table" and (g.kind == "build" or g.kind == "test") then
    return g.kind, (g.isDefault == true or type(g.isDefault) == "string") or nil
  end
  return nil, nil
end

function H.describe(t)
  local parts = { H.text(t.command) or (t.script and ("npm run " .. t.script)) or "" }
  for _, a in ipairs(H.list(t.args)) do
    parts[#parts + 1] = H.text(a) or ""
  end
  local s = vim.trim(table.concat(parts, " "))
  if s == "" and t.dependsOn then
    s = "after " .. table.concat(vim.tbl_map(H.dep_name, H.deps(t.dependsOn)), ", ")
  end
  return s ~= "" and s or nil
end

-- The text of a command or argument: a string, { value, quoting }, or a list (joined).
function H.text(v)
  if type(v) == "string" then return v end
  if type(v) == "table" and v.value ~= nil then return H.text(v.value) end
  if type(v) == "table" and #v > 0 then return table.concat(vim.tbl_map(H.text, v), " ") end
  return nil
end

function H.deps(d)
  if type(d) == "string" or (type(d) == "table" and d.label ~= nil) then return { d } end
  return H.list(d)
end

function H.dep_name(d)
  if type(d) == "string" then return d end
  if type(d) == "table" then return H.label(d) or tostring(d.label) end
  return tostring(d)
end

-- Build the definition proctor.run() takes from task `t`. ctx.static: the
-- discovery (a launch-time variable raises { launch = true }); ctx.answers:
-- the inputs' values at launch. Raises { msg } for what cannot be run.
function H.build(ws, t, name, ctx)
  ctx.ws, ctx.secrets, ctx.task = ws, {}, name
  local opts = type(t.options) == "table" and t.options or {}
  local def = { name = name }
  local cwd = ws
  if type(opts.cwd) == "string" then
    cwd = H.subst(opts.cwd, ctx, "options.cwd")
    if cwd:sub(1, 1) ~= "/" then cwd = ws .. "/" .. cwd end
    cwd = vim.fn.simplify(cwd)
  end
  def.cwd = cwd
  local env, secrets = {}, {}
  for k, v in pairs(type(opts.env) == "table" and opts.env or {}) do
    local s = H.subst(tostring(v), ctx, "options.env." .. k)
    if s:find(H.MARK, 1, true) then
      secrets[k] = H.unmark(s, ctx)
    else
      env[k] = s
    end
  end
  def.cmd = H.command(t, ctx, cwd, ws)
  for k, v in pairs(ctx.secrets) do
    secrets[k] = v
  end
  if next(env) then def.env = env end
  if next(secrets) then def.secrets = secrets end
  local deps = vim.tbl_map(H.dep_name, H.deps(t.dependsOn))
  local m = H.matchers(t, ctx)
  if m then def.diagnostics = m.diagnostics end
  if t.isBackground then def.ready = { regex = m and m.ends or [[\v.]] } end
  def.open = H.presentation(t.presentation)
  if #deps > 0 then
    if t.dependsOrder == "sequence" then
      local steps = vim.deepcopy(deps)
      if def.cmd then steps[#steps + 1] = vim.deepcopy(def) end
      return { name = name, cwd = ws, sequence = steps, open = def.open }
    end
    if not def.cmd then
      return { name = name, cwd = ws, sequence = { { parallel = deps } }, open = def.open }
    end
    def.after = deps
  end
  if not def.cmd then H.fail("no command and no dependsOn") end
  return def
end

-- presentation { reveal, focus } -> open: a console, and whether it takes the cursor.
function H.presentation(p)
  if type(p) ~= "table" then return nil end
  if p.reveal == "never" or p.reveal == "silent" then return false end
  if p.reveal == "always" or p.focus ~= nil then return { enter = p.focus == true } end
  return nil
end

-- The command of task `t`: an argv (process, a password's shell line) or a shell line.
function H.command(t, ctx, cwd, ws)
  local typ = t.type or "process"
  if typ == "npm" then
    if type(t.script) ~= "string" then H.fail("an npm task needs 'script'") end
    return { "npm", "run", t.script }
  elseif typ == "typescript" then
    local tsc = ws .. "/node_modules/.bin/tsc"
    if vim.fn.executable(tsc) ~= 1 then tsc = "tsc" end
    local cmd = { tsc, "-p", H.subst(t.tsconfig or "tsconfig.json", ctx, "tsconfig") }
    if t.option == "watch" then cmd[#cmd + 1] = "--watch" end
    return cmd
  elseif typ ~= "shell" and typ ~= "process" then
    H.fail(("type '%s' is not supported (shell, process, npm, typescript)"):format(tostring(typ)))
  end
  if t.command == nil then return nil end
  local cmd = H.text(t.command)
  if not cmd then H.fail("'command' must be a string") end
  cmd = H.subst(cmd, ctx, "command")
  local args = {}
  for i, a in ipairs(H.list(t.args)) do
    local s = H.text(a)
    if not s then H.fail(("args[%d] must be a string"):format(i)) end
    args[i] = {
      value = H.subst(s, ctx, ("args[%d]"):format(i)),
      quoting = type(a) == "table" and a.quoting or nil,
    }
  end
  if typ == "process" then
    local argv = { cmd }
    for _, a in ipairs(args) do
      argv[#argv + 1] = a.value
    end
    for _, a in ipairs(argv) do
      if a:find(H.MARK, 1, true) then return H.secret_argv(argv, ctx) end
    end
    return argv
  end
  local line = { H.shell_marks(cmd, ctx) }
  for _, a in ipairs(args) do
    line[#line + 1] = H.shell_marks(H.quote(a.value, a.quoting), ctx)
  end
  local sh = type(t.options) == "table" and type(t.options.shell) == "table" and t.options.shell
    or nil
  local argv
  if sh and type(sh.executable) == "string" then
    argv = { H.subst(sh.executable, ctx, "options.shell.executable") }
    for _, a in ipairs(H.list(sh.args)) do
      argv[#argv + 1] = H.subst(tostring(a), ctx, "options.shell.args")
    end
    if #argv == 1 then argv[2] = "-c" end
  else
    argv = vim.split(vim.o.shell, " ", { trimempty = true })
    vim.list_extend(argv, vim.split(vim.o.shellcmdflag, " ", { trimempty = true }))
  end
  argv[#argv + 1] = table.concat(line, " ")
  return argv
end

-- An argument of a shell task as the shell should read it: as is when it
-- needs no quotes, else quoted as `quoting` says (default: strong).
function H.quote(s, quoting)
  if quoting == nil and not s:find("[%s'\"\\$`|&;<>()*?%[%]#~{}!]") then return s end
  if quoting == "escape" then return (s:gsub("([%s'\"\\$`|&;<>()*?%[%]#~{}!])", "\\%1")) end
  if quoting == "weak" then return '"' .. s:gsub('(["\\$`])', "\\%1") .. '"' end
  return "'" .. s:gsub("'", [['\'']]) .. "'"
end

-- Variables ------------------------------------------------------------------------

-- A password's value stands in a resolved string as MARK id MARK until it
-- is taken out (into `secrets`): it never reaches a command or a record.
H.MARK = "\1secret\1" -- no magic character: it is used in patterns

-- The environment variable a password input's value is passed in.
function H.secret_name(id) return "PROCTOR_INPUT_" .. id:upper():gsub("[^%w]", "_") end

-- A shell line with each password as a reference to its variable.
function H.shell_marks(s, ctx)
  return (
    s:gsub(H.MARK .. "(.-)" .. H.MARK, function(id)
      local var = H.secret_name(id)
      ctx.secrets[var] = ctx.answers[id]
      return "${" .. var .. "}"
    end)
  )
end

-- The value of a string with its passwords put in (for `secrets`).
function H.unmark(s, ctx)
  return (s:gsub(H.MARK .. "(.-)" .. H.MARK, function(id) return ctx.answers[id] end))
end

-- A process task holding a password: run through sh, each word quoted and
-- the password expanded from its variable, so no argv holds it.
function H.secret_argv(argv, ctx)
  local words = {}
  for i, a in ipairs(argv) do
    local parts = {}
    local pos = 1
    while true do
      local s, e, id = a:find(H.MARK .. "(.-)" .. H.MARK, pos)
      if not s then break end
      if s > pos then parts[#parts + 1] = H.quote(a:sub(pos, s - 1), "strong") end
      local var = H.secret_name(id)
      ctx.secrets[var] = ctx.answers[id]
      parts[#parts + 1] = '"${' .. var .. '}"'
      pos = e + 1
    end
    if pos <= #a then parts[#parts + 1] = H.quote(a:sub(pos), "strong") end
    words[i] = #parts > 0 and table.concat(parts) or "''"
  end
  return { "/bin/sh", "-c", "exec " .. table.concat(words, " ") }
end

-- Variables known only at launch: a static resolve stops at them.
H.AT_LAUNCH = {
  file = true,
  fileDirname = true,
  fileBasename = true,
  fileBasenameNoExtension = true,
  fileExtname = true,
  relativeFile = true,
  relativeFileDirname = true,
  lineNumber = true,
  selectedText = true,
  cwd = true,
}

--- Replace the ${...} variables of `s`; `where` names the field in errors.
function H.subst(s, ctx, where)
  return (s:gsub("%${([^}]*)}", function(var) return H.var(var, ctx, where) end))
end

function H.var(var, ctx, where)
  local ws = ctx.ws
  if var == "workspaceFolder" or var == "workspaceRoot" or var == "fileWorkspaceFolder" then
    return ws
  end
  if var == "workspaceFolderBasename" then return vim.fn.fnamemodify(ws, ":t") end
  if var == "pathSeparator" or var == "/" then return "/" end
  if var == "userHome" then return uv.os_homedir() end
  local env = var:match("^env:(.+)$")
  if env then return os.getenv(env) or "" end
  local id = var:match("^input:(.+)$")
  if id then
    local inp = ctx.inputs and ctx.inputs[id]
    if not inp then H.fail(("%s: unknown input '%s' (not in \"inputs\")"):format(where, id)) end
    if ctx.static then error({ launch = true }, 0) end
    if inp.password then return H.MARK .. id .. H.MARK end
    return ctx.answers[id]
  end
  if H.AT_LAUNCH[var] then
    if ctx.static then error({ launch = true }, 0) end
    return H.at_launch(var, ws, where)
  end
  H.fail(("%s: unknown variable ${%s}"):format(where, var))
end

-- The buffer a task launched now is about: the current one, or (from a
-- console, the list, a help window) the alternate one when that is a file.
function H.file_buf()
  local b = vim.api.nvim_get_current_buf()
  if vim.bo[b].buftype == "" and vim.api.nvim_buf_get_name(b) ~= "" then return b end
  local alt = vim.fn.bufnr("#")
  if alt > 0 and vim.bo[alt].buftype == "" and vim.api.nvim_buf_get_name(alt) ~= "" then
    return alt
  end
  return nil
end

function H.at_launch(var, ws, where)
  if var == "cwd" then return vim.fn.getcwd() end
  local b = H.file_buf()
  if not b then H.fail(("%s: ${%s}: no file is open"):format(where, var)) end
  local file = vim.api.nvim_buf_get_name(b)
  if var == "file" then return file end
  if var == "fileDirname" then return vim.fn.fnamemodify(file, ":h") end
  if var == "fileBasename" then return vim.fn.fnamemodify(file, ":t") end
  if var == "fileBasenameNoExtension" then return vim.fn.fnamemodify(file, ":t:r") end
  if var == "fileExtname" then
    local e = vim.fn.fnamemodify(file, ":e")
    return e ~= "" and ("." .. e) or ""
  end
  if var == "relativeFile" or var == "relativeFileDirname" then
    local f = var == "relativeFile" and file or vim.fn.fnamemodify(file, ":h")
    if f:sub(1, #ws + 1) == ws .. "/" then return f:sub(#ws + 2) end
    return f
  end
  local cur = b == vim.api.nvim_get_current_buf()
  if var == "lineNumber" then
    return tostring(cur and vim.fn.line(".") or vim.api.nvim_buf_get_mark(b, '"')[1])
  end
  -- selectedText: the last visual selection in that buffer, charwise
  local s, e = vim.api.nvim_buf_get_mark(b, "<"), vim.api.nvim_buf_get_mark(b, ">")
  if s[1] == 0 or e[1] == 0 then return "" end
  local last = vim.api.nvim_buf_get_lines(b, e[1] - 1, e[1], false)[1] or ""
  local ec = math.min(e[2] + 1, #last)
  if ec < #last then -- the whole last character (a multibyte one)
    ec = ec + #(vim.fn.strcharpart(last:sub(ec + 1), 0, 1)) - 1
    ec = math.max(ec, e[2] + 1)
  end
  local text = vim.api.nvim_buf_get_text(b, s[1] - 1, s[2], e[1] - 1, ec, {})
  return table.concat(text, "\n")
end

-- Inputs ---------------------------------------------------------------------------

-- The inputs `raw` uses (${input:id}), in order of appearance, each asked once.
function H.used_inputs(raw)
  local out, seen = {}, {}
  local function walk(v)
    if type(v) == "string" then
      for id in v:gmatch("%${input:([^}]+)}") do
        if not seen[id] then
          seen[id] = true
          out[#out + 1] = id
        end
      end
    elseif type(v) == "table" then
      local keys = vim.tbl_keys(v)
      table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
      for _, k in ipairs(keys) do
        if k ~= "inputs" then walk(v[k]) end
      end
    end
  end
  -- the command line first, so the prompts come in the order it reads
  walk(raw.command)
  walk(raw.args)
  walk(raw)
  return out
end

-- Ask every input `raw` uses, one after the other: cb(answers) or cb(nil, err).
function H.ask(name, raw, inputs, cb)
  local ids = H.used_inputs(raw)
  local answers = {}
  local i = 0
  local function next_one()
    i = i + 1
    local id = ids[i]
    if not id then return cb(answers) end
    local inp = inputs[id]
    if not inp then
      return cb(nil, ("task '%s': unknown input '%s' (not in \"inputs\")"):format(name, id))
    end
    H.ask_one(inp, function(value)
      if value == nil then return cb(nil, ("task '%s': input '%s' canceled"):format(name, id)) end
      answers[id] = value
      next_one()
    end, name)
  end
  next_one()
end

function H.ask_one(inp, done, name)
  local prompt = (type(inp.description) == "string" and inp.description or inp.id) .. ": "
  local default = inp.default ~= nil and tostring(inp.default) or nil
  if inp.type == "promptString" then
    if inp.password then
      -- never echoed; goes to `secrets` only
      local ok, v = pcall(vim.fn.inputsecret, prompt, default or "")
      return done(ok and v or nil)
    end
    return vim.ui.input({ prompt = prompt, default = default }, function(v) done(v) end)
  elseif inp.type == "pickString" then
    local items = {}
    for _, o in ipairs(H.list(inp.options)) do
      local value = type(o) == "table" and o.value or o
      local label = type(o) == "table" and o.label or nil
      if value ~= nil then
        local item = { value = tostring(value), label = label and tostring(label) or nil }
        if item.value == default then
          table.insert(items, 1, item)
        else
          items[#items + 1] = item
        end
      end
    end
    return vim.ui.select(items, {
      prompt = prompt,
      kind = "proctor_input",
      format_item = function(it)
        return it.label and (it.label .. " (" .. it.value .. ")") or it.value
      end,
    }, function(it) done(it and it.value or nil) end)
  end
  vim.schedule(function() done(nil) end)
  util.notify(
    ("task '%s': input '%s': type '%s' is not supported (promptString, pickString)"):format(
      name,
      tostring(inp.id),
      tostring(inp.type)
    )
  )
end

-- What only discovery needs is left out of what runs.
function H.clean(def)
  local d = vim.deepcopy(def)
  d.vscode, d.group, d.default, d.desc, d.source, d.order, d.more =
    nil, nil, nil, nil, nil, nil, nil
  return d
end

-- Problem matchers -------------------------------------------------------------------

-- The named matchers proctor knows. `builtin`: proctor's own matcher of the
-- same output (tasks/matchers.lua), used when the name is given as is.
-- Patterns are written here for proctor, as JavaScript regexps read by
-- tasks/jsregex.lua, for the output each tool prints.
H.NAMED = {
  ["$gcc"] = {
    builtin = "gcc",
    owner = "cpp",
    pattern = {
      regexp = [[^(.*?):(\d+):(\d*):?\s+(?:fatal\s+)?(error|warning):\s+(.*)$]],
      file = 1,
      line = 2,
      column = 3,
      severity = 4,
      message = 5,
    },
  },
  ["$tsc"] = {
    builtin = "tsc",
    owner = "typescript",
    pattern = {
      regexp = [[^([^\s].*?)[(:](\d+)[,:](\d+)(?:\):|\s+-)\s+(error|warning|info)\s+(TS\d+)\s*:\s*(.*)$]],
      file = 1,
      line = 2,
      column = 3,
      severity = 4,
      code = 5,
      message = 6,
    },
  },
  ["$tsc-watch"] = {
    builtin = "tsc",
    owner = "typescript",
    base = "$tsc",
    background = {
      beginsPattern = [[(?:Starting compilation in watch mode|File change detected\. Starting incremental compilation)]],
      endsPattern = [[(?:Found \d+ errors?\.|Compilation complete\.) Watching for file changes]],
    },
  },
  ["$go"] = {
    builtin = "go",
    owner = "go",
    pattern = {
      regexp = [[^\s*([^\s:]+\.go):(\d+):(?:(\d+):)?\s*(.*)$]],
      file = 1,
      line = 2,
      column = 3,
      message = 4,
    },
  },
  ["$eslint-compact"] = {
    owner = "eslint",
    fileLocation = "autoDetect",
    pattern = {
      regexp = [[^(.+):\sline\s(\d+),\scol\s(\d+),\s(Error|Warning|Info)\s-\s(.+?)(?:\s\((.+)\))?$]],
      file = 1,
      line = 2,
      column = 3,
      severity = 4,
      message = 5,
      code = 6,
    },
  },
  ["$eslint-stylish"] = {
    owner = "eslint",
    fileLocation = "autoDetect",
    pattern = {
      { regexp = [[^(\S.*)$]], file = 1 },
      {
        regexp = [[^\s+(\d+):(\d+)\s+(error|warning|info)\s+(.+?)(?:\s\s+(\S+))?$]],
        line = 1,
        column = 2,
        severity = 3,
        message = 4,
        code = 5,
        loop = true,
      },
    },
  },
  ["$msCompile"] = {
    owner = "msCompile",
    fileLocation = "absolute",
    pattern = {
      regexp = [[^(?:\s*\d+>)?(\S.*?)\((\d+|\d+,\d+|\d+,\d+,\d+,\d+)\)\s*:\s+((?:fatal +)?error|warning|info)\s+(\w+\d+)\s*:\s*(.*)$]],
      file = 1,
      location = 2,
      severity = 3,
      code = 4,
      message = 5,
    },
  },
  ["$lessc"] = {
    owner = "lessc",
    fileLocation = "absolute",
    pattern = {
      regexp = [[^\s*(.+?)\s+in\s+(.+?)\s+on\s+line\s+(\d+),\s+column\s+(\d+):?\s*$]],
      message = 1,
      file = 2,
      line = 3,
      column = 4,
    },
  },
  ["$jshint"] = {
    owner = "jshint",
    severity = "warning",
    pattern = {
      regexp = [[^(.+):\s+line\s+(\d+),\s+col\s+(\d+),\s+(.+?)(?:\s+\(([EWI])(\d+)\))?$]],
      file = 1,
      line = 2,
      column = 3,
      message = 4,
      severity = 5,
      code = 6,
    },
  },
}

-- A named matcher with its `base` filled in.
function H.named(name)
  local m = H.NAMED[name]
  if not m then
    local names = vim.tbl_keys(H.NAMED)
    table.sort(names)
    H.fail(("unknown problem matcher '%s' (known: %s)"):format(name, table.concat(names, ", ")))
  end
  if m.base then
    local out = vim.deepcopy(H.named(m.base))
    out.builtin = m.builtin
    for k, v in pairs(m) do
      if k ~= "base" then out[k] = v end
    end
    return out
  end
  return m
end

H.SEVERITY = { error = "E", warning = "W", info = "I", hint = "N" }

-- The matchers of task `t`: { diagnostics = name | { matchers }, ends = regex|nil }, or nil.
function H.matchers(t, ctx)
  local pm = t.problemMatcher
  if pm == nil then return nil end
  if type(pm) ~= "table" or pm.pattern ~= nil or pm.base ~= nil or pm.owner ~= nil then
    pm = { pm }
  end
  local list, ends, begins = {}, nil, nil
  for i, m in ipairs(pm) do
    local where = #pm > 1 and ("problemMatcher[%d]"):format(i) or "problemMatcher"
    local def, bg
    if type(m) == "string" then
      local named = H.named(m)
      bg = named.background
      def = named.builtin or H.compile(named, ctx, where)
    elseif type(m) == "table" then
      local base = {}
      if m.base ~= nil then
        if type(m.base) ~= "string" then H.fail(where .. ": 'base' must be a matcher name") end
        base = vim.deepcopy(H.named(m.base))
        base.builtin = nil
      end
      for k, v in pairs(m) do
        if k ~= "base" then base[k] = v end
      end
      if type(base.pattern) == "string" then
        base.pattern = vim.deepcopy(H.named(base.pattern).pattern)
      end
      bg = base.background
      def = H.compile(base, ctx, where)
    else
      H.fail(where .. " must be a name or an object")
    end
    list[#list + 1] = def
    if type(bg) == "table" and bg.endsPattern ~= nil and not ends then
      local re, why = jsregex.translate(bg.endsPattern)
      if not re then H.fail(("%s: background.endsPattern: %s"):format(where, why)) end
      ends = re
    end
    if type(bg) == "table" and bg.beginsPattern ~= nil then
      local re, why = jsregex.translate(bg.beginsPattern)
      if not re then H.fail(("%s: background.beginsPattern: %s"):format(where, why)) end
      begins = begins or re
    end
  end
  if #list == 0 then return nil end
  if #list == 1 and type(list[1]) == "string" and not begins then
    return { diagnostics = list[1], ends = ends }
  end
  return { diagnostics = { matchers = list, begins = begins }, ends = ends }
end

H.PATTERN_FIELDS = {
  file = "file",
  location = "location",
  line = "line",
  column = "column",
  endLine = "end_line",
  endColumn = "end_column",
  severity = "severity",
  code = "code",
  message = "message",
}

-- An inline matcher (or a named one's description) as tasks/vsmatcher.lua takes it.
function H.compile(m, ctx, where)
  local pats = m.pattern
  if type(pats) ~= "table" then H.fail(where .. ": 'pattern' is missing") end
  local single = pats.regexp ~= nil
  if single then pats = { pats } end
  local out = { patterns = {}, owner = type(m.owner) == "string" and m.owner or nil }
  if m.severity ~= nil then
    out.severity = H.SEVERITY[tostring(m.severity)]
    if not out.severity then
      H.fail(("%s: unknown severity '%s'"):format(where, tostring(m.severity)))
    end
  end
  out.file_location = H.file_location(m.fileLocation, ctx, where)
  local has = {}
  for i, p in ipairs(pats) do
    local pw = single and (where .. ".pattern") or ("%s.pattern[%d]"):format(where, i)
    if type(p) ~= "table" or type(p.regexp) ~= "string" then
      H.fail(pw .. ": 'regexp' is missing")
    end
    local re, groups = jsregex.translate(p.regexp)
    if not re then H.fail(("%s: regexp %s: %s"):format(pw, p.regexp, groups)) end
    local c = { re = re, loop = p.loop == true or nil, kind = p.kind == "file" and "file" or nil }
    if single then -- VS Code's defaults for a pattern of one line
      local d = p.location ~= nil and { file = 1, message = 0 }
        or { file = 1, line = 2, column = 3, message = 0 }
      for k, v in pairs(d) do
        if p[k] == nil then c[k] = v end
      end
    end
    for js, f in pairs(H.PATTERN_FIELDS) do
      if p[js] ~= nil then
        if type(p[js]) ~= "number" or p[js] < 0 or p[js] ~= math.floor(p[js]) then
          H.fail(("%s: '%s' must be a group number"):format(pw, js))
        end
        c[f] = p[js]
      end
      if c[f] and c[f] > groups then
        if p[js] ~= nil then
          H.fail(("%s: '%s' is group %d but the regexp has %d"):format(pw, js, c[f], groups))
        end
        c[f] = nil -- a default the regexp has no group for: VS Code leaves it empty
      end
      if c[f] then has[f] = true end
    end
    if c.loop and i ~= #pats then H.fail(pw .. ": only the last pattern may loop") end
    out.patterns[i] = c
  end
  if not has.file or not has.message then
    H.fail(where .. ": a pattern must give 'file' and 'message'")
  end
  return out
end

-- fileLocation: "absolute" | "relative" | "autoDetect" | [kind, base] -> { kind, base }.
function H.file_location(fl, ctx, where)
  local kind, base = "relative", nil
  if type(fl) == "string" then
    kind = fl
  elseif type(fl) == "table" then
    kind, base = fl[1], fl[2]
  elseif fl ~= nil then
    H.fail(where .. ": 'fileLocation' must be a string or a list")
  end
  kind = type(kind) == "string" and kind:lower() or kind
  if kind ~= "absolute" and kind ~= "relative" and kind ~= "autodetect" then
    H.fail(
      ("%s: fileLocation '%s' is not supported (absolute, relative, autoDetect)"):format(
        where,
        tostring(kind)
      )
    )
  end
  if base ~= nil and type(base) ~= "string" then
    H.fail(where .. ": the fileLocation base must be a string")
  end
  base = H.subst(base or "${workspaceFolder}", ctx, where .. ".fileLocation")
  if base:sub(1, 1) ~= "/" then base = ctx.ws .. "/" .. base end
  return { kind = kind, base = base }
end

M._H = H

return M
