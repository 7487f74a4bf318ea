--- proctor.tasks — tasks: discovered or declared commands, run as executions
--- that turn their output into diagnostics, restart on change, wait for each
--- other and stay up as services (:help proctor-tasks).
---
---   local tasks = require("proctor.tasks")
---   tasks.list({ cwd = dir })                  --> { { name = "make build", cmd, cwd, source, desc }, ... }
---   tasks.run_task("make build")               --> proctor.Execution
---   require("proctor").run({ cmd = "make", diagnostics = "gcc", watch = { patterns = { "*.c" } } })
---   tasks.sequence({ "make build", { parallel = { "make lint", "make test" } } })
---
--- A run with task options is a task run (tasks/run.lua, `proctor.TaskRun`):
--- the executions one task run makes over time, each linked to the one before
--- (`prev_id`) and shown in the same console window. What it does besides
--- running are traits (tasks/traits/*.lua: restart, ready, after, diagnostics,
--- watch), each one file.
---
---   proctor.run{} ──► run filter (M.filter) ──► TaskRun:start ──► proctor._run(spec without task options)
---                                                   └─ traits' on_start: diagnostics, ready, after, watch
---   engine event (terminal) ──► TaskRun:on_end ──► traits' on_end: restart (backoff) | settle
---   watch: a change ──► TaskRun:restart ──► cancel (grace) ──► start again, same window
---
--- Requiring this module registers its extension of proctor.run() (task
--- options, the task links of records) and nothing else.

local M = {}
local H = {}

local discover = require("proctor.tasks.discover")
local trust = require("proctor.tasks.trust")
local chain = require("proctor.tasks.chain")
local picker = require("proctor.tasks.picker")
local watch_trait = require("proctor.tasks.traits.watch")
local list = require("proctor.list")
local proctor = require("proctor")
local config = require("proctor.config")
local engine = require("proctor.engine")
local util = require("proctor.util")
local TaskRun = require("proctor.tasks.run")
local params = require("proctor.tasks.params")

--- Fields of a task definition (and of proctor.run()) that this module
--- handles: its own and every trait's (tasks/traits/*.lua `option`); every
--- other field goes to proctor.run() as is.
M.FIELDS =
  { name = "string", desc = "string", source = "string", sequence = "table", params = "table" }
for k, v in pairs(TaskRun.fields()) do
  M.FIELDS[k] = v
end

H.by_name = {} -- task name -> its newest run
H.waiters = {} -- execution id (of no task run) -> { fn(ok) }
H.hooked = false

-- Public API ---------------------------------------------------------------------

--- The tasks of a directory (|proctor.tasks()|). opts.cwd (default: the
--- current directory), opts.callback(tasks) once every probe answered,
--- opts.prompt = false never asks (neither about .proctor.lua nor whether an
--- untrusted directory may be probed); opts.ask_dir = false only the latter.
---@return proctor.TaskDef[] tasks, boolean complete
function M.list(opts)
  opts = opts or {}
  local dir = H.dir(opts.cwd)
  local tasks, complete =
    discover.list(dir, { prompt = opts.prompt, ask_dir = opts.ask_dir }, opts.callback)
  return vim.deepcopy(tasks), complete
end

--- Trust directory `dir` (default: the current one) and its project file:
--- probes may evaluate its build files, its .proctor.lua is read
--- (|proctor.trust()|). The next list sees it. Returns the directory, or nil, err.
---@param dir string|nil
---@return string|nil dir, string|nil err
function M.trust(dir)
  local path = H.dir(dir)
  local name = (config.get().discover or {}).project_file
  local real, err = trust.allow(path, name)
  if not real then return nil, err end
  discover.invalidate(path)
  discover.invalidate(real)
  H.noted[path], H.noted[real] = nil, nil
  return real
end

--- Does `spec` use a task option (so proctor.run() hands it to M.run)?
---@private
function M.wants(spec)
  for k in pairs(spec) do
    if M.FIELDS[k] then return true end
  end
  return false
end

--- The run filter proctor.run() calls first: a spec with task options is
--- run here (true, ex, err, name); any other is left to proctor.run() (false).
---@private
function M.filter(spec)
  if not M.wants(spec) then return false end
  return true, M.run(spec)
end

--- proctor.run() of a spec with task options: validate, then start the task run.
---@private
---@return proctor.Execution|table|nil ex, string|nil err, string|nil name
function M.run(spec)
  if spec.params ~= nil then
    -- no prompt here (a chain's member, proctor.run{ params }): the last values, else the defaults
    local got, perr
    params.launch(spec, { prompt = false }, function(s, e)
      got, perr = s, e
    end)
    if not got then return H.fail(perr) end
    spec = got
  end
  local base, opts, err = H.split(spec)
  if not base then return H.fail(err) end
  if opts.sequence then
    return chain.sequence(opts.sequence, { name = opts.name, cwd = base.cwd, open = base.open })
  end
  H.hook()
  local r = TaskRun.new(base, opts)
  H.by_name[r.name] = r
  return r:start(true)
end

--- Run a task by name (looked up in opts.cwd) or a task definition.
--- opts.set: run{} fields that win over the definition's (open ...);
--- opts.default: fields used where the definition has none (pty ...).
--- A task with `params` (|proctor-params|): opts.params (`{ name = text }`)
--- gives their values and nothing is asked; else each is asked for
--- (|vim.ui.input()|) unless opts.prompt = false (the last values, else the
--- defaults). `cb(ex_or_nil, err)` gets the result, also when the name needed
--- a probe or a prompt first; the return value is the execution when it
--- could start at once.
---@return proctor.Execution|table|nil ex, string|nil err
function M.run_task(task, opts, cb)
  opts = opts or {}
  if type(task) == "table" and task.source then
    -- its source makes it runnable first (a tasks.json: prompts, the current file)
    local result, result_err
    discover.launch(vim.deepcopy(task), function(def, err)
      if not def then
        result_err = "EINVAL: " .. tostring(err)
        if cb then cb(nil, result_err) end
        return
      end
      def.source = nil
      result, result_err = M.run_task(def, opts, cb)
    end)
    return result, result_err
  end
  if type(task) == "table" then
    local spec = vim.deepcopy(task)
    for k, v in pairs(opts.default or {}) do
      if spec[k] == nil then spec[k] = v end
    end
    for k, v in pairs(opts.set or {}) do
      spec[k] = v
    end
    spec.cwd = spec.cwd or opts.cwd
    spec.desc, spec.source, spec.more = nil, nil, nil
    local ex, err
    local function start(s, perr)
      if s then
        ex, err = proctor._run(s)
      else
        ex, err = H.fail(perr)
      end
      if cb then cb(ex, err) end
    end
    if spec.params ~= nil then
      params.launch(spec, { values = opts.params, prompt = opts.prompt ~= false }, start)
    elseif opts.params and next(opts.params) then
      start(nil, ("task %s has no parameters"):format(tostring(spec.name or task.name)))
    else
      start(spec)
    end
    return ex, err
  end
  if type(task) ~= "string" or task == "" then
    local _, err = H.fail("a task name or definition is needed")
    if cb then cb(nil, err) end
    return nil, err
  end
  local result, result_err
  M.find(task, { cwd = opts.cwd }, function(def, err)
    if not def then
      result_err = "ENOENT: " .. err
      if cb then cb(nil, result_err) end
      return
    end
    result, result_err = M.run_task(
      def,
      { set = opts.set, default = opts.default, params = opts.params, prompt = opts.prompt },
      cb
    )
  end)
  return result, result_err
end

--- Find the task called `name` in opts.cwd: cb(def) or cb(nil, "no task named …").
function M.find(name, opts, cb)
  opts = opts or {}
  local answered = false
  local function look(tasks, final)
    if answered then return true end
    for _, t in ipairs(tasks) do
      if t.name == name then
        answered = true
        -- what runs it gets it runnable (a sequence runs what find() answers)
        discover.launch(vim.deepcopy(t), function(def, err)
          if def then def.source = nil end
          cb(def, def == nil and err or nil)
        end)
        return true
      end
    end
    if final then
      answered = true
      local names = {}
      for _, t in ipairs(tasks) do
        names[#names + 1] = t.name
      end
      cb(
        nil,
        ("no task named '%s' in %s%s"):format(
          name,
          opts.cwd or vim.fn.getcwd(),
          #names > 0 and (" (tasks: " .. table.concat(names, ", ") .. ")") or ""
        )
      )
    end
    return answered
  end
  local tasks, complete = M.list({ cwd = opts.cwd, callback = function(t) look(t, true) end })
  if look(tasks, false) then return end
  if complete then look(tasks, true) end
end

--- Run steps one after the other as one chain (|proctor.sequence()|).
function M.sequence(steps, opts) return chain.sequence(steps, opts) end

--- Pick a task with |vim.ui.select()| and run it (`:Proctor run` without a command).
--- opts.cwd, opts.run (options of |M.run_task()| for the chosen task).
function M.pick(opts)
  opts = opts or {}
  M.list({
    cwd = opts.cwd,
    ask_dir = false,
    callback = function(tasks)
      H.note_untrusted(H.dir(opts.cwd))
      picker.select(tasks, H.dir(opts.cwd), function(t)
        M.run_task(t, opts.run, function(ex, err)
          if not ex then
            util.notify("task " .. t.name .. ": " .. tostring(err):gsub("^E%u+: ", ""))
          end
        end)
      end)
    end,
  })
end

--- Run the directory's default task of group `kind` ("build" | "test": a
--- tasks.json `group`, |proctor-vscode|): the one marked default, else the
--- only one, else the user picks among them. opts.cwd, opts.run (options of
--- |M.run_task()|). A warning when the directory has none.
function M.run_group(kind, opts)
  opts = opts or {}
  local dir = H.dir(opts.cwd)
  M.list({
    cwd = opts.cwd,
    ask_dir = false,
    callback = function(tasks)
      local of, default = {}, nil
      for _, t in ipairs(tasks) do
        if t.group == kind then
          of[#of + 1] = t
          default = default or (t.default and t) or nil
        end
      end
      local function go(t)
        M.run_task(t, opts.run, function(ex, err)
          if not ex then
            util.notify("task " .. t.name .. ": " .. tostring(err):gsub("^E%u+: ", ""))
          end
        end)
      end
      if default or #of == 1 then return go(default or of[1]) end
      if #of == 0 then
        H.note_untrusted(dir)
        return util.notify(
          ('no %s task in %s (a task of group "%s", |proctor-vscode|)'):format(kind, dir, kind),
          vim.log.levels.WARN
        )
      end
      picker.select(of, dir, go)
    end,
  })
end

--- How long completion waits for a probe under way (|proctor-limits|).
M.COMPLETE_WAIT_MS = 200

--- Names for completion of `:Proctor task {name}`: what is cached, or what
--- the probes (only of a trusted directory) answer within M.COMPLETE_WAIT_MS;
--- never prompts. `typed` is everything typed after "task ".
function M.complete(typed, cwd)
  local got
  local tasks, complete = M.list({ cwd = cwd, prompt = false, callback = function(t) got = t end })
  if not complete then
    vim.wait(M.COMPLETE_WAIT_MS, function() return got ~= nil end, 10)
    tasks = got and vim.deepcopy(got) or tasks
  end
  local out = {}
  local lead_words = typed:match("^(.*%s)") or ""
  for _, t in ipairs(tasks) do
    if vim.startswith(t.name, typed) then out[#out + 1] = t.name:sub(#lead_words + 1) end
    -- after a task's name: its parameters, as `name=` (those not given yet)
    if type(t.params) == "table" and vim.startswith(typed, t.name .. " ") then
      local rest = typed:sub(#t.name + 2)
      local word = rest:match("(%S*)$")
      local names = vim.tbl_keys(t.params)
      table.sort(names)
      for _, k in ipairs(names) do
        local given = (" " .. rest):find("%s" .. k .. "=")
        if not given and vim.startswith(k .. "=", word) then out[#out + 1] = k .. "=" end
      end
    end
  end
  return out
end

--- Watch (on = true), stop watching (false) or toggle (nil) the task run of
--- execution `id`: changes of matching files restart it (|proctor-watch|).
--- An execution not started as a task becomes one. Returns the new state.
---@return boolean|nil watching, string|nil err
function M.watch(id, on)
  H.hook()
  local r = TaskRun.of(id) or H.adopt(id)
  if not r then return nil, "no such execution " .. tostring(id) end
  return watch_trait.set(r, on)
end

--- Stop every watch (`:Proctor watch!`). Returns how many were stopped.
---@return integer
function M.unwatch_all() return watch_trait.stop_all() end

--- The newest execution of the task run called `name` (a task's name or a
--- label), live or not: what `:Proctor watch {name}` means.
---@return integer|nil
function M.id_of(name)
  local r = H.by_name[name]
  return r and r.current or nil
end

--- Start the task run of execution `id` again (|proctor-watch|).
---@private
function M.restart(id, why)
  local r = TaskRun.of(id)
  if r then r:restart(why) end
end

--- What the task layer knows of execution `id`: { task, prev_id, next_id,
--- ready, restarts, watching, group_ids, state }; nil for a plain execution.
function M.info(id)
  local r = TaskRun.of(id)
  return r and r:info(id) or nil
end

--- Records of chains (|proctor.sequence()|), oldest first.
function M.chains() return chain.records() end

--- Wait until execution `id` (or its task run) succeeded -- completed, or ready
--- when it has a ready pattern -- or failed: fn(ok, why) once.
function M.when_settled(id, fn)
  H.hook()
  local r = TaskRun.of(id)
  if r then return r:on_settle(fn) end
  local rec = proctor.record(id)
  if not rec then return fn(false, "no such execution " .. tostring(id)) end
  if engine.TERMINAL[rec.state] then return fn(rec.state == "completed", rec.state) end
  H.waiters[id] = H.waiters[id] or {}
  table.insert(H.waiters[id], fn)
end

--- The newest task run called `name` that is live or waiting to restart, as its current id.
function M.live_id(name)
  local r = H.by_name[name]
  if r and r:live() and r.current then return r.current end
  return nil
end

-- Helpers --------------------------------------------------------------------------

function H.fail(msg) return nil, "EINVAL: " .. msg, "EINVAL" end

-- The absolute directory opts.cwd names (default: the current one), without a trailing /.
function H.dir(cwd)
  local dir = cwd and vim.fn.fnamemodify(vim.fn.expand(cwd), ":p") or vim.fn.getcwd()
  return (dir:gsub("(.)/$", "%1"))
end

H.noted = {} -- directory -> true: the picker said why its make targets are missing

-- Say once a session per directory which sources were left out because the
-- directory is not trusted, and how to trust it.
function H.note_untrusted(dir)
  local left, where = discover.untrusted(dir)
  dir = where or dir -- an upward-found Makefile: its directory
  local probes = vim.tbl_filter(function(n) return n ~= "project" end, left)
  if #probes == 0 or H.noted[dir] then return end
  H.noted[dir] = true
  util.notify(
    (
      "%s tasks are not listed: %s is not trusted (listing them runs its build files, which can run any "
      .. "command). To trust it: :Proctor trust %s"
    ):format(table.concat(probes, " and "), dir, vim.fn.fnameescape(dir)),
    vim.log.levels.WARN
  )
end

-- Split a spec into run{} fields and task options; validate the options.
function H.split(spec)
  local base, opts = {}, {}
  for k, v in pairs(spec) do
    if M.FIELDS[k] then
      if not (("," .. M.FIELDS[k] .. ","):find("," .. type(v) .. ",", 1, true)) then
        return nil,
          nil,
          ("'%s' must be %s, got %s"):format(k, M.FIELDS[k]:gsub(",", " or "), type(v))
      end
      opts[k] = v
    else
      base[k] = v
    end
  end
  if opts.sequence then return base, opts end
  local err = TaskRun.check(opts, base)
  if err then return nil, nil, err end
  if base.cmd == nil then return nil, nil, "'cmd' is needed" end
  return base, opts
end

--- An extended regular expression (POSIX ERE) as a Vim regex (tasks/traits/ready.lua).
M.ere = require("proctor.tasks.traits.ready").ere

-- Adopt a plain execution as a task run (`:Proctor watch` on it).
function H.adopt(id)
  local eng = engine.current()
  local rec = eng and eng:get(id)
  if not rec then return nil end
  local spec = engine.specs[id] and vim.deepcopy(engine.specs[id])
    or { cmd = rec.cmd, cwd = rec.cwd, label = rec.label, pty = rec.pty }
  spec.open = nil
  local r = TaskRun.new(spec, {})
  H.by_name[r.name] = r
  TaskRun.adopt(r, id)
  if engine.TERMINAL[rec.state] then r.status = "done" end
  return r
end

-- The extension of proctor.run() (|proctor-tasks|): task options, the task
-- links of a record, a user's cancel, a deleted record.
H.extension = {
  api = M, -- proctor.tasks(), trust(), sequence() and the task actions (proctor._ext)
  run = M.filter,
  -- the quickfix list a matcher filled (not loaded: no run had one)
  summary = function(id)
    local d = package.loaded["proctor.tasks.diagnostics"]
    return d and d.summary(id) or nil
  end,
  record = function(rec)
    local r = TaskRun.of(rec.id)
    if not r then return end
    local i = r:info(rec.id)
    rec.task, rec.prev_id, rec.watching = i.task, i.prev_id, i.watching or nil
  end,
  cancel = function(id)
    local r = TaskRun.of(id)
    if r then r:on_cancel(id) end
  end,
  forget = function(id)
    TaskRun.forget(id)
    H.waiters[id] = nil
  end,
}

-- Follow the engine's events (once): endings of task runs, plain waiters.
function H.hook()
  if H.hooked then return end
  H.hooked = true
  engine.subscribe("tasks", function(ev)
    if ev.type ~= "state" or not engine.TERMINAL[ev.state] then return end
    local w = H.waiters[ev.id]
    if w then
      H.waiters[ev.id] = nil
      for _, fn in ipairs(w) do
        pcall(fn, ev.state == "completed", ev.state)
      end
    end
    local r = TaskRun.of(ev.id)
    if r then r:on_end(ev.id, ev) end
  end)
  H.list_rows()
end

-- A watched execution's row in the list says so.
function H.list_rows()
  list.add_rows("tasks", {
    rows = function() return {} end,
    annotate = function(rec)
      local i = M.info(rec.id)
      return i and i.watching and i.next_id == nil and "[watching] " or nil
    end,
  })
end

proctor._extend("tasks", H.extension)

return M
