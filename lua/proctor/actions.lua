--- proctor.actions — everything a person does to executions, in one table.
---
--- Each entry is `{ desc, run(id, opts) }`. The console's keys, the list view's
--- keys and the :Proctor subcommands all go through M.call(), so an action
--- behaves, and fails, the same way wherever it was started:
---
---   :Proctor cancel 3 ──► commands (parse only) ──┐
---   <C-c> in a console ──► proctor.keys ──────────┼──► M.call("cancel", 3, opts) ──► entry.run(3, opts)
---   c in the list view ──► proctor.keys ──────────┘     a problem: one "(proctor) …" message
---
--- An entry also says how :Proctor spells it (`command`, see proctor.Action),
--- so a new subcommand is one entry here and nothing else.
---
--- Not every target is an execution: a *kind* (proctor.kinds) adds targets of its
--- own -- a chain of proctor.sequence() is `c3` -- that :Proctor parses and
--- completes and the list view shows. M.run() of a target calls the kind's
--- own function for the action, or says the action is not for it:
---
---   :Proctor cancel c3 ──┐                            ┌─ number: entry.run(id, opts)
---   c on a chain's row ──┴──► M.call("cancel", t) ────┤
---                                                     └─ {kind="chain", id=3}: kinds.chain.actions.cancel(t, opts)
---
--- Requiring this module registers its table with proctor.keys, the key maps
--- of consoles, the list view and the text view (which stand below it and
--- never name it); nothing else.

local M = {}
local H = {}

local console = require("proctor.console")
local list_view = require("proctor.list")
local views = require("proctor.views")
local window = require("proctor.console.window")
local mcp = require("proctor.mcp")
local proctor = require("proctor")
local config = require("proctor.config")
local util = require("proctor.util")
local keys = require("proctor.keys")
local kinds = require("proctor.kinds")
local engine = require("proctor.engine")
local die, check, strip = util.die, util.check, util.strip

---@class proctor.Action
---@field desc string what it does, as the keys' help and the key tables of the help file say it
---@field run fun(id: integer|nil, opts: table): any
---@field id "required"|"optional"|nil required: an execution is needed (given, else the one
---   of the console or list line under the cursor, else the user picks one with vim.ui.select);
---   optional: used when given; nil: takes none
---@field want "live"|"done"|nil the executions it applies to (the picker and completion offer
---   these): live (queued, starting, running), done (ended); nil: any
---@field range boolean|nil in the list view its key also works on a Visual range
---@field command proctor.ActionCommand|nil how :Proctor spells it (nil: not a subcommand)

---@class proctor.ActionCommand
---@field args "id"|"text"|"cmd"|"makeprg"|"filter"|"words"|"none" what follows the subcommand: [id];
---   [id] {text}; [options] {cmd}; [options] [args of 'makeprg']; [filter]; [words] (as typed, opts.text,
---   may be empty); nothing. An id may be a
---   number, #number, a label (the latest execution with that label) or a target of a kind (c3)
---@field name string|nil the subcommand (default: the action's name)
---@field bang string|nil the action `:Proctor {name}!` runs instead
---@field complete (fun(typed: string): string[])|nil args "words": completion of everything typed after
---   the subcommand; returns what replaces the word being typed

--- The actions, by name.
---@type table<string, proctor.Action>
M.actions = {}
local A = M.actions

--- Kinds of targets that are not executions, by name (proctor.kinds, where
--- they register): the functions below are that module's.
---@type table<string, proctor.Kind>
M.kinds = kinds.kinds
M.add_kind = kinds.add
M.parse_target = kinds.parse
M.is_target = kinds.is_target
M.word = kinds.word

--- Action names in the order the help and the key lists show them: config.ACTIONS,
--- which config checks key maps against and which names every action.
M.ORDER = config.ACTIONS

--- Every action name, in M.ORDER's order.
---@return string[]
function M.names()
  local names = vim.tbl_keys(A)
  table.sort(names, function(a, b)
    local ra, rb = keys.rank(a), keys.rank(b)
    if ra ~= rb then return ra < rb end
    return a < b
  end)
  return names
end

--- One message for an action run on several executions (a Visual range).
---@param name string
---@param ids integer[]
function M.say_many(name, ids)
  local words = { cancel = "canceling", kill = "killing", delete = "deleted", rerun = "rerun" }
  if not words[name] then return end
  local list = {}
  for i, id in ipairs(ids) do
    list[i] = M.word(id)
  end
  util.notify(
    string.format("%s %d executions: %s", words[name], #ids, table.concat(list, " ")),
    vim.log.levels.INFO
  )
end

--- Run action `name` for execution `id` (nil: the action finds it, see
--- proctor.Action). Returns what the action returned, or nil after showing one
--- `(proctor) …` message.
---@param name string
---@param id integer|nil
---@param opts table|nil
function M.call(name, id, opts) return util.protect(M.run, name, id, opts) end

--- M.call() without the protection: a problem raises (util.die) for the caller to show.
---@param name string
---@param id integer|nil
---@param opts table|nil
function M.run(name, id, opts)
  local a = A[name]
  if not a then die("unknown action '" .. tostring(name) .. "'") end
  opts = opts or {}
  if a.id ~= nil and id == nil then
    local under = M.cursor_id()
    local kind = M.is_target(under) and M.kinds[under.kind]
    if a.id == "required" or (kind and kind.actions[name]) then id = under end
  end
  if M.is_target(id) then return H.run_target(name, id, opts) end
  if a.id == "required" then
    if id == nil then return H.pick(name, a, opts) end
    H.known(id)
  elseif a.id == "optional" and id ~= nil then
    H.known(id)
  end
  return a.run(id, opts)
end

--- The execution of the console, text view or list line under the cursor (a
--- list line may hold a target of a kind instead).
---@return integer|proctor.Target|nil
function M.cursor_id() return console.id_of_buf(0) or list_view.id_under_cursor() end

--- The latest execution labelled `label` (nil: none).
---@param label string
---@return integer|nil
function M.by_label(label)
  local eng = engine.current()
  if not eng then return nil end
  local recs = eng:list()
  for i = #recs, 1, -1 do
    if recs[i].label == label then return recs[i].id end
  end
end

--- Does action `a` apply to the execution of record `rec` (its `want`)?
---@param a proctor.Action
---@param rec table
---@return boolean
function M.fits(a, rec)
  local live = not engine.TERMINAL[rec.state]
  if a.want == "live" then return live end
  if a.want == "done" then return not live end
  return true
end

-- The task layer (a higher floor), through the extension it registers with proctor.
function H.tasks() return proctor._ext("tasks").api end

--- The engine, or die with why it cannot start.
---@return proctor.Engine
function M.engine()
  local eng, err = engine.get()
  if not eng then die(err) end
  return eng
end

-- The actions --------------------------------------------------------------------

A.run = {
  desc = "run a command",
  command = { args = "cmd" },
  -- opts.spec: a proctor.run() spec; `cmd` is nil for `:Proctor run` alone: pick a task
  run = function(_, opts)
    if opts.spec.cmd == nil then return A.pick.run(nil, opts) end
    local ex, err = proctor._run(opts.spec)
    if not ex then die("run: " .. strip(err)) end
    return ex
  end,
}

A.make = {
  desc = "run 'makeprg' with 'errorformat' as the problem matcher: the drop-in for :make",
  command = { args = "makeprg" },
  -- opts.spec: the proctor.run() spec :Proctor make built ('makeprg', its matcher)
  run = function(_, opts)
    if vim.o.autowrite or vim.o.autowriteall then vim.cmd("silent! wall") end -- as :make
    return A.run.run(nil, opts)
  end,
}

A.pick = {
  desc = "pick one of the directory's tasks (vim.ui.select) and run it (|proctor-tasks|)",
  -- opts.spec: the options of :Proctor run (cwd, pty, label, timeout_ms, open) for the task
  run = function(_, opts)
    local spec = opts.spec or H.task_spec()
    if spec.cwd and vim.fn.isdirectory(spec.cwd) == 0 then
      die("run: no such directory " .. spec.cwd)
    end
    M.engine()
    H.tasks().pick({ cwd = spec.cwd, run = H.task_run_opts(spec) })
    return nil
  end,
}

A.task = {
  desc = "run a task by name (no name: pick one)",
  command = {
    args = "words",
    complete = function(typed) return H.tasks().complete(typed) end,
  },
  -- opts.text: the task's name, then `key=value` words: its parameters (nothing is asked)
  run = function(_, opts)
    local name, values = H.task_words(opts.text or "")
    if name == "" then return A.pick.run(nil, {}) end
    M.engine()
    local o = H.task_run_opts(H.task_spec(), true)
    o.params = values
    -- the execution, or nil while discovery still probes (the task starts when it answers)
    return H.tasks().run_task(name, o, function(ex, err)
      if not ex then util.notify("task: " .. strip(err)) end
    end)
  end,
}

A.build = {
  desc = "run the project's default build task (a tasks.json group, |proctor-vscode|)",
  command = { args = "none" },
  run = function()
    M.engine()
    H.tasks().run_group("build", { run = H.task_run_opts(H.task_spec(), true) })
  end,
}

A.test = {
  desc = "run the project's default test task (a tasks.json group, |proctor-vscode|)",
  command = { args = "none" },
  run = function()
    M.engine()
    H.tasks().run_group("test", { run = H.task_run_opts(H.task_spec(), true) })
  end,
}

A.trust = {
  desc = "trust a directory: its build files may be evaluated to list tasks, its .proctor.lua read",
  command = {
    args = "words",
    complete = function(typed) return vim.fn.getcompletion(typed, "dir") end,
  },
  -- opts.text: the directory (default: the current one)
  run = function(_, opts)
    local text = vim.trim(opts.text or "")
    local dir, err = H.tasks().trust(text ~= "" and text or nil)
    if not dir then die("trust: " .. strip(err)) end
    util.notify("trusted " .. dir .. ": :Proctor run lists its tasks", vim.log.levels.INFO)
    return dir
  end,
}

A.watch = {
  desc = "restart on change: turn watching on or off (|proctor-watch|); watch!: stop every watch",
  id = "optional",
  command = {
    args = "words",
    bang = "unwatch",
    complete = function(typed) return H.tasks().complete(typed) end,
  },
  -- opts.text: an id, a task's name or a label (default: the execution under the cursor)
  run = function(id, opts)
    local text = vim.trim(opts and opts.text or "")
    if text ~= "" then id = H.watch_target(text) end
    if id == nil and type(M.cursor_id()) == "number" then id = M.cursor_id() end
    if id == nil then return H.pick("watch", A.watch, opts) end
    H.known(id)
    local on, err = H.tasks().watch(id)
    if on == nil then die("watch: " .. tostring(err)) end
    util.notify(
      on and string.format("watching: changes restart #%d", id)
        or string.format("#%d: watch off", id),
      vim.log.levels.INFO
    )
    return on
  end,
}

A.unwatch = {
  desc = "stop every watch (:Proctor watch!)",
  run = function()
    local n = H.tasks().unwatch_all()
    util.notify(
      n == 0 and "no watch to stop" or string.format("stopped %d watch%s", n, n == 1 and "" or "es"),
      vim.log.levels.INFO
    )
    return n
  end,
}

A.list = {
  desc = "open the list view (a filter: running, failed, session, label=NAME, owner=NAME)",
  command = { args = "filter" },
  run = function(_, opts)
    M.engine()
    return list_view.open(opts.filter)
  end,
}

A.open = {
  desc = "open the console",
  id = "required",
  command = { args = "id" },
  run = function(id, opts)
    check(proctor.open(id, opts.open and { open = opts.open, reuse = opts.reuse } or nil))
    return id
  end,
}

for how, desc in pairs({
  split = "a split",
  vsplit = "a vertical split",
  tab = "a new tab",
  float = "a float",
}) do
  A["open_" .. how] = {
    desc = "open the console in " .. desc,
    id = "required",
    run = function(id) return A.open.run(id, { open = how, reuse = false }) end,
  }
end

A.toggle = {
  desc = "show or hide the console opened last (or of [id])",
  id = "optional",
  command = { args = "id" },
  run = function(id)
    id = id or console.last()
    if not id then die("no console yet: :Proctor run {cmd} opens one") end
    local wins = console.windows(id)
    if #wins == 0 then return A.open.run(id, {}) end
    for _, w in ipairs(wins) do
      window.close(w)
    end
    return id
  end,
}

A.input = {
  desc = "send a line of input",
  id = "required",
  want = "live",
  command = { args = "text" },
  run = function(id, opts)
    local rec = M.engine():get(id)
    if engine.TERMINAL[rec.state] then
      die(
        string.format("execution %d has ended (%s): it takes no input", id, engine.state_text(rec))
      )
    end
    local text = opts.text
    if text == nil then
      vim.ui.input({ prompt = string.format("input to #%d: ", id) }, function(t)
        if t then M.call("input", id, { text = t }) end
      end)
      return
    end
    local ok, err, name = proctor.input(id, text .. "\n")
    if not ok then die("input: " .. H.input_error(id, err, name)) end
    return true
  end,
}

A.cancel = {
  desc = "cancel (SIGTERM, a PTY SIGHUP first; SIGKILL after the grace period)",
  id = "required",
  want = "live",
  range = true,
  command = { args = "id", bang = "kill" },
  run = function(id, opts) return H.cancel(id, false, opts) end,
}

A.kill = {
  desc = "kill at once (SIGKILL; :Proctor cancel!)",
  id = "required",
  want = "live",
  range = true,
  run = function(id, opts) return H.cancel(id, true, opts) end,
}

A.delete = {
  desc = "delete the record (and its console) of a finished execution",
  id = "required",
  want = "done",
  range = true,
  command = { args = "id" },
  run = function(id)
    local res, err = proctor.delete(id)
    if not res then die(strip(err)) end
    if res == "not_found" then die("no such execution " .. id) end
    if res == "active_process_conflict" then
      die(
        string.format("execution %d is still running: cancel it first (:Proctor cancel %d)", id, id)
      )
    end
    return res
  end,
}

A.purge = {
  desc = "delete every finished execution (the key asks first)",
  command = { args = "none" },
  run = function(_, opts)
    M.engine()
    if opts.key then
      local n = 0
      for _, r in ipairs(proctor.list()) do
        if engine.TERMINAL[r.state] then n = n + 1 end
      end
      if n == 0 then
        util.notify("nothing to purge: no finished execution", vim.log.levels.INFO)
        return 0
      end
      local q = string.format("Delete %d finished execution%s?", n, n == 1 and "" or "s")
      if vim.fn.confirm(q, "&Yes\n&No", 2) ~= 1 then return nil end
    end
    local n, err = proctor.purge()
    if not n then die(strip(err)) end
    util.notify(
      string.format("purged %d finished execution%s", n, n == 1 and "" or "s"),
      vim.log.levels.INFO
    )
    return n
  end,
}

A.rerun = {
  desc = "run the same command again (its console takes the old one's windows)",
  id = "required",
  range = true,
  command = { args = "id" },
  run = function(id)
    local spec = engine.specs[id]
    local rec = M.engine():get(id)
    local new = {}
    if spec then
      for k, v in pairs(spec) do
        if k ~= "open" then new[k] = v end
      end
    else
      new = { cmd = rec.cmd, cwd = rec.cwd, label = rec.label, pty = rec.pty, owner = "nvim" }
    end
    -- the old console's windows show the new one
    local open, rest = console.handover(id)
    new.open = open or (spec == nil or spec.open or console.get(id) ~= nil) or nil
    local ex, err = proctor._run(new)
    if not ex then die("rerun: " .. strip(err)) end
    rest(ex.id)
    return ex
  end,
}

A.text = {
  desc = "plain-text view of the output (follows a running execution)",
  id = "required",
  command = { args = "id" },
  run = function(id)
    check(views.text(id))
    return id
  end,
}

A.qf = {
  desc = "load the output into the quickfix list ('errorformat')",
  id = "required",
  command = { args = "id" },
  run = function(id) return check(views.qf(id)) end,
}

A.info = {
  desc = "show the record (no id: the engine, socket and counts)",
  id = "optional",
  command = { args = "id" },
  run = function(id)
    local lines = id and views.execution_lines(id) or views.info_lines()
    vim.api.nvim_echo({ { table.concat(lines, "\n") } }, true, {})
    return lines
  end,
}

A.mcp = {
  desc = "how to register proctor-mcp with agents",
  command = { args = "none" },
  run = function()
    local _, lines = mcp.show()
    return lines
  end,
}

A.filter = {
  desc = "next filter: all, running, failed, this session, each label, each owner",
  run = function() return list_view.next_filter() end,
}

A.refresh = {
  desc = "refresh",
  run = function()
    local id = vim.b.proctor_view == "text" and vim.b.proctor_id
    if id then return views.refresh(id) end
    return list_view.refresh()
  end,
}

A.help = {
  desc = "show these keys",
  run = function() return views.keys(vim.b.proctor_keymap) end,
}

A.close = {
  desc = "close the window (the process keeps running)",
  run = function() window.close(vim.api.nvim_get_current_win()) end,
}

-- Helpers --------------------------------------------------------------------------

-- Action `name` on target `t` of a kind: the kind's own function, or a clear no.
function H.run_target(name, t, opts)
  local kind = M.kinds[t.kind]
  local fn = kind and kind.actions[name]
  if not fn then
    local what = kind and kind.desc or t.kind
    local can = kind and vim.tbl_keys(kind.actions) or {}
    table.sort(can)
    die(
      string.format(
        "%s is for executions, not for a %s (%s: %s)",
        name,
        what,
        t.word,
        table.concat(can, ", ")
      )
    )
  end
  return fn(t, opts, M.run)
end

-- `:Proctor task {name} [key=value ...]`: the name, and the trailing
-- `key=value` words as { key = value } (nil when none). A value may be
-- quoted ('a b' or "a b"); a name keeps its single spaces ("make build").
function H.task_words(text)
  local words, i = {}, 1
  text = vim.trim(text)
  while i <= #text do
    local s = text:find("%S", i)
    if not s then break end
    local w, j = {}, s
    while j <= #text and not text:sub(j, j):find("%s") do
      local q = text:sub(j, j)
      if q == "'" or q == '"' then
        local e = text:find(q, j + 1, true)
        if not e then die("task: an unclosed " .. q .. " in: " .. text) end
        w[#w + 1] = text:sub(j + 1, e - 1)
        j = e + 1
      else
        w[#w + 1] = q
        j = j + 1
      end
    end
    words[#words + 1] = { text = table.concat(w), raw = text:sub(s, j - 1) }
    i = j
  end
  local values, n = nil, #words
  while n > 1 and words[n].raw:find("^[%a_][%w_]*=") do
    local k, v = words[n].text:match("^([%a_][%w_]*)=(.*)$")
    values = values or {}
    if values[k] == nil then values[k] = v end
    n = n - 1
  end
  local name = {}
  for k = 1, n do
    name[k] = words[k].raw
  end
  return table.concat(name, " "), values
end

-- The spec :Proctor task runs a task with: the defaults of :Proctor run.
function H.task_spec()
  local cfg = config.get().command
  return { pty = cfg.pty, open = cfg.open or nil }
end

-- How :Proctor run/task run a task (proctor.tasks.run_task's opts): the
-- window, label and timeout asked for win; the pty of the command line only
-- where the task says none; names are looked up in -cwd. `configured`: the
-- window is only `command.open`'s default (:Proctor task, build, test), so a
-- definition's `open` (a tasks.json's `presentation`) wins over it.
function H.task_run_opts(spec, configured)
  local open = spec.open or false
  return {
    cwd = spec.cwd,
    set = {
      open = not configured and open or nil,
      label = spec.label,
      timeout_ms = spec.timeout_ms,
    },
    default = { pty = spec.pty, open = configured and open or nil },
  }
end

-- The execution `:Proctor watch {text}` means: an id, the newest run of a
-- task of that name, or the newest execution with that label.
function H.watch_target(text)
  local n = text:match("^#?(%d+)$")
  if n then return tonumber(n) end
  M.engine()
  local id = H.tasks().id_of(text) or M.by_label(text)
  if not id then die(string.format("watch: no task or execution named '%s'", text)) end
  return id
end

-- Die unless the engine knows execution `id`.
function H.known(id)
  if type(id) ~= "number" then die(string.format("not an execution id: '%s'", tostring(id))) end
  if not M.engine():get(id) then die("no such execution " .. id) end
end

-- No id given and none under the cursor: the user picks one of the executions
-- the action applies to (live ones first, then the newest).
function H.pick(name, a, opts)
  local eng = M.engine()
  local recs = {}
  for _, r in ipairs(eng:list()) do
    if M.fits(a, r) then recs[#recs + 1] = r end
  end
  if #recs == 0 then
    local what = ({ live = "running execution", done = "finished execution" })[a.want]
      or "execution"
    die(
      string.format("no %s to %s: :Proctor list shows them all", what, (a.desc:gsub(" %(.*", "")))
    )
  end
  table.sort(recs, function(x, y)
    local lx, ly = not engine.TERMINAL[x.state], not engine.TERMINAL[y.state]
    if lx ~= ly then return lx end
    return x.id > y.id
  end)
  vim.ui.select(recs, {
    prompt = "proctor: " .. a.desc:gsub(" %(.*", "") .. ":",
    format_item = function(r)
      return string.format(
        "#%d  %s  %s",
        r.id,
        engine.state_text(r),
        util.first_line(util.title(r))
      )
    end,
  }, function(r)
    if r then M.call(name, r.id, opts) end
  end)
  return nil
end

function H.cancel(id, force, opts)
  local res, err = proctor.cancel(id, force)
  if not res then die(strip(err)) end
  if res == "not_found" then die("no such execution " .. id) end
  if res == "already_terminal" then
    local rec = M.engine():get(id)
    util.notify(
      string.format(
        "execution %d has already ended (%s)",
        id,
        rec and engine.state_text(rec) or "ended"
      ),
      vim.log.levels.WARN
    )
  elseif not opts.quiet then
    util.notify(
      string.format("%s execution %d", force and "killing" or "canceling", id),
      vim.log.levels.INFO
    )
  end
  return res
end

-- The message of a failed input: the core's reason said the layer's way.
function H.input_error(id, err, name)
  if name == "ENOTRUNNING" then
    local rec = M.engine():get(id)
    return string.format(
      "execution %d is not running (%s)",
      id,
      rec and engine.state_text(rec) or "ended"
    )
  elseif name == "ESTDINCLOSED" then
    return string.format("the input of execution %d is closed", id)
  elseif name == "ENOENT" then
    return "no such execution " .. id
  end
  return strip(err)
end

M._H = H

-- config.ACTIONS (which key maps are checked against) names every action and no other.
for _, name in ipairs(config.ACTIONS) do
  assert(A[name], "config.ACTIONS names " .. name .. ", which is no action")
end
for name in pairs(A) do
  assert(
    vim.tbl_contains(config.ACTIONS, name),
    "action " .. name .. " is missing from config.ACTIONS"
  )
end

-- The keys of consoles, the list and the text view dispatch through this table.
keys.register({
  actions = A,
  call = function(name, id, opts) return M.call(name, id, opts) end,
  say_many = function(name, ids) return M.say_many(name, ids) end,
})

return M
