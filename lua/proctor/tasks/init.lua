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
--- A run with task options is a *group*: the executions one task run makes
--- over time (a restart after a crash, a restart on change), each linked to
--- the one before (`prev_id`) and shown in the same console window.
---
---   run{} ──► group ──► proctor.run(spec without task options, hold = `after` given)
---               │          ├─ diagnostics.attach   problems → vim.diagnostic, quickfix
---               │          ├─ ready pattern         reader → "ready" → waiters
---               │          └─ after                 dependencies settle → release | cancel
---               ├─ terminal state ──► restart policy (backoff) | pending change restart | settle
---               └─ watch ──► burst of changes ──► cancel (grace) ──► start again, same window
---
--- Requiring this module has no side effects.

local M = {}
local H = {}

local api = vim.api
local engine = require("proctor.engine")
local util = require("proctor.util")
local uv = require("proctor.compat").uv

--- Fields of a task definition (and of proctor.run()) that this module handles;
--- every other field goes to proctor.run() as is.
M.FIELDS = {
  name = "string",
  desc = "string",
  source = "string",
  diagnostics = "boolean,string",
  quickfix = "string",
  open_quickfix = "boolean",
  watch = "boolean,table",
  after = "table,string,number",
  restart = "string",
  max_restarts = "number",
  backoff_ms = "number",
  backoff_max_ms = "number",
  healthy_ms = "number",
  ready = "table,string",
  sequence = "table",
  max_problems = "number",
}

H.by_id = {} -- execution id -> group
H.by_name = {} -- task name -> its newest group
H.prev = {} -- execution id -> the execution it replaced
H.ready = {} -- execution id -> true once its ready pattern matched
H.waiters = {} -- execution id (not in a group) -> { fn(ok) }
H.next_gid = 0
H.hooked = false

-- Public API ---------------------------------------------------------------------

--- The tasks of a directory (|proctor.tasks()|). opts.cwd (default: the
--- current directory), opts.callback(tasks) once every probe answered,
--- opts.prompt = false never asks (neither about .proctor.lua nor whether an
--- untrusted directory may be probed); opts.ask_dir = false only the latter.
---@return proctor.Task[] tasks, boolean complete
function M.list(opts)
  opts = opts or {}
  local dir = H.dir(opts.cwd)
  local tasks, complete = require("proctor.tasks.discover").list(
    dir,
    { prompt = opts.prompt, ask_dir = opts.ask_dir },
    opts.callback
  )
  return vim.deepcopy(tasks), complete
end

--- Trust directory `dir` (default: the current one) and its project file:
--- probes may evaluate its build files, its .proctor.lua is read
--- (|proctor.trust()|). The next list sees it. Returns the directory, or nil, err.
---@param dir string|nil
---@return string|nil dir, string|nil err
function M.trust(dir)
  local path = H.dir(dir)
  local name = (require("proctor.config").get().discover or {}).project_file
  local real, err = require("proctor.tasks.trust").allow(path, name)
  if not real then return nil, err end
  local discover = require("proctor.tasks.discover")
  discover.invalidate(path)
  discover.invalidate(real)
  H.noted[path], H.noted[real] = nil, nil
  return real
end

--- Does `spec` use a task option (so proctor.run() hands it to M.run)?
function M.wants(spec)
  for k in pairs(spec) do
    if M.FIELDS[k] then return true end
  end
  return false
end

--- proctor.run() of a spec with task options: validate, then start the group.
---@return proctor.Execution|table|nil ex, string|nil err, string|nil name
function M.run(spec)
  local base, opts, err = H.split(spec)
  if not base then return H.fail(err) end
  if opts.sequence then
    return require("proctor.tasks.chain").sequence(
      opts.sequence,
      { name = opts.name, cwd = base.cwd, open = base.open }
    )
  end
  -- a problem matcher (and a ready pattern) sees every byte: the child waits
  -- for the editor instead of the ring dropping what a flood wrote while the
  -- editor was busy, so a flood cannot lose the ready line
  if (opts.diagnostics or opts.ready) and base.backpressure == nil then base.backpressure = true end
  H.hook()
  local g = H.group(base, opts)
  local ex, msg, ename = H.start(g, true)
  if not ex then return nil, msg, ename end
  if opts.watch then
    local ok, werr = M.watch(ex.id, true)
    if not ok then util.notify("watch: " .. tostring(werr)) end
  end
  return ex
end

--- Run a task by name (looked up in opts.cwd) or a task definition.
--- opts.set: run{} fields that win over the definition's (open ...);
--- opts.default: fields used where the definition has none (pty ...).
--- `cb(ex_or_nil, err)` gets the result, also when the name needed a probe
--- first; the return value is the execution when it could start at once.
---@return proctor.Execution|table|nil ex, string|nil err
function M.run_task(task, opts, cb)
  opts = opts or {}
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
    local ex, err = require("proctor")._run(spec)
    if cb then cb(ex, err) end
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
    result, result_err = M.run_task(def, { set = opts.set, default = opts.default }, cb)
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
        cb(vim.deepcopy(t))
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
function M.sequence(steps, opts) return require("proctor.tasks.chain").sequence(steps, opts) end

--- Pick a task with |vim.ui.select()| and run it (`:Proctor run` without a command).
--- opts.cwd, opts.run (options of |M.run_task()| for the chosen task).
function M.pick(opts)
  opts = opts or {}
  M.list({
    cwd = opts.cwd,
    ask_dir = false,
    callback = function(tasks)
      H.note_untrusted(H.dir(opts.cwd))
      require("proctor.tasks.picker").select(tasks, H.dir(opts.cwd), function(t)
        local ex, err = M.run_task(t, opts.run)
        if not ex then
          util.notify("task " .. t.name .. ": " .. tostring(err):gsub("^E%u+: ", ""))
        end
      end)
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
  end
  return out
end

--- Watch (on = true), stop watching (false) or toggle (nil) the task run of
--- execution `id`: changes of matching files restart it (|proctor-watch|).
--- An execution not started as a task becomes one. Returns the new state.
---@return boolean|nil watching, string|nil err
function M.watch(id, on)
  H.hook()
  local g = H.by_id[id] or H.adopt(id)
  if not g then return nil, "no such execution " .. tostring(id) end
  if on == nil then on = g.watcher == nil end
  if not on then
    if g.watcher then g.watcher.stop() end
    g.watcher = nil
    return false
  end
  if g.watcher then return true end
  local w = type(g.opts.watch) == "table" and g.opts.watch or {}
  local defaults = H.defaults()
  local watcher, err = require("proctor.tasks.watch").start({
    root = w.root or g.spec.cwd or H.record_cwd(g.current) or vim.fn.getcwd(),
    patterns = w.patterns,
    debounce_ms = w.debounce_ms or defaults.debounce_ms,
    ignore = w.ignore,
  }, function(paths) M.restart(g, paths) end)
  if not watcher then return nil, err end
  g.watcher = watcher
  return true
end

--- Start the task run of group `g` again: cancel the live execution (normal
--- grace) and start a new one in the same console window once it ended.
function M.restart(g, why)
  if g.timer then g.timer:stop() end
  g.changes = why
  if g.current and not engine.is_done(g.current) then
    if g.pending then return end -- a burst: one restart
    g.pending = true
    require("proctor").cancel(g.current)
    return
  end
  g.settled = nil
  H.start(g, false)
end

--- What the task layer knows of execution `id`: { task, prev_id, next_id,
--- ready, restarts, watching, group_ids }; nil for a plain execution.
function M.info(id)
  local g = H.by_id[id]
  local out = { prev_id = H.prev[id], ready = H.ready[id] or nil }
  if not g then return out.prev_id and out or nil end
  out.task, out.restarts, out.watching = g.name, g.restarts, g.watcher ~= nil
  for i, x in ipairs(g.ids) do
    if x == id then out.next_id = g.ids[i + 1] end
  end
  out.group_ids = vim.deepcopy(g.ids)
  out.state = g.state
  return out
end

--- Records of chains (|proctor.sequence()|), oldest first.
function M.chains() return require("proctor.tasks.chain").records() end

--- proctor.cancel() of `id` went through: a task run waiting to restart stops.
function M.on_cancel(id)
  local g = H.by_id[id]
  if g and g.current == id and g.state == "backoff" then
    g.timer:stop()
    g.stopped = true
    g.state = "stopped"
    H.settle(g, false, "canceled")
  elseif g and g.current == id then
    g.stopped = not g.pending -- a user's cancel: no restart policy after it
  end
end

--- Execution `id` was deleted: forget what links it (not the task run it leads).
function M.forget(id)
  local g = H.by_id[id]
  if g and g.current ~= id then H.by_id[id] = nil end
  H.prev[id], H.ready[id], H.waiters[id] = nil, nil, nil
end

--- Wait until execution `id` (or its task run) succeeded -- completed, or ready
--- when it has a ready pattern -- or failed: fn(ok, why) once.
function M.when_settled(id, fn)
  H.hook()
  local g = H.by_id[id]
  if g then return H.on_settle(g, fn) end
  local rec = require("proctor").record(id)
  if not rec then return fn(false, "no such execution " .. tostring(id)) end
  if engine.TERMINAL[rec.state] then return fn(rec.state == "completed", rec.state) end
  H.waiters[id] = H.waiters[id] or {}
  table.insert(H.waiters[id], fn)
end

--- The newest task run called `name` that is live or waiting to restart, as its current id.
function M.live_id(name)
  local g = H.by_name[name]
  if g and g.state ~= "done" and g.state ~= "stopped" and g.current then return g.current end
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
  local left, where = require("proctor.tasks.discover").untrusted(dir)
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

-- The task options nobody set come from the config (its schema holds their
-- defaults; config.get() always has them merged in). Read-only.
function H.defaults() return require("proctor.config").get().task_defaults end

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
  local enum = {
    quickfix = { "on_failure", "always", "never" },
    restart = { "never", "on-failure", "always" },
  }
  for k, allowed in pairs(enum) do
    if opts[k] ~= nil and not vim.tbl_contains(allowed, opts[k]) then
      return nil,
        nil,
        ("'%s' must be one of %s, got %q"):format(k, table.concat(allowed, ", "), opts[k])
    end
  end
  for _, k in ipairs({
    "max_restarts",
    "backoff_ms",
    "backoff_max_ms",
    "healthy_ms",
    "max_problems",
  }) do
    local v = opts[k]
    if v ~= nil and (v < 0 or v ~= math.floor(v)) then
      return nil, nil, ("'%s' must be an integer >= 0"):format(k)
    end
  end
  if type(opts.watch) == "table" then
    local w = opts.watch
    if w.patterns ~= nil and type(w.patterns) ~= "table" then
      return nil, nil, "'watch.patterns' must be a list of globs"
    end
    if w.debounce_ms ~= nil and (type(w.debounce_ms) ~= "number" or w.debounce_ms < 0) then
      return nil, nil, "'watch.debounce_ms' must be a number >= 0"
    end
  end
  if opts.after ~= nil and type(opts.after) ~= "table" then opts.after = { opts.after } end
  for _, a in ipairs(opts.after or {}) do
    if type(a) ~= "string" and type(a) ~= "number" then
      return nil, nil, "'after' entries must be task names or ids"
    end
  end
  if type(opts.ready) == "string" then opts.ready = { pattern = opts.ready } end
  if opts.ready then
    if type(opts.ready.pattern) ~= "string" then
      return nil, nil, "'ready' must be { pattern = \"ERE\" }"
    end
    local ok, re = pcall(vim.regex, M.ere(opts.ready.pattern))
    if not ok then
      return nil, nil, ("'ready.pattern' is not a valid pattern: %s"):format(tostring(re))
    end
  end
  if opts.diagnostics and type(opts.diagnostics) == "string" then
    local m, err = require("proctor.tasks.matchers").new(opts.diagnostics, { cwd = "/" })
    if not m then return nil, nil, "diagnostics: " .. err end
  end
  if base.cmd == nil then return nil, nil, "'cmd' is needed" end
  return base, opts
end

--- An extended regular expression (POSIX ERE, as the core's patterns) as a
--- Vim regex: very magic, with the characters that are special only there escaped.
function M.ere(pat)
  local out, i, n, bracket = { "\\v" }, 1, #pat, false
  while i <= n do
    local c = pat:sub(i, i)
    if c == "\\" then
      out[#out + 1] = pat:sub(i, i + 1)
      i = i + 1
    elseif bracket then
      out[#out + 1] = c
      if c == "]" then bracket = false end
    elseif c == "[" then
      bracket = true
      out[#out + 1] = c
      if pat:sub(i + 1, i + 1) == "^" then
        out[#out + 1] = "^"
        i = i + 1
      end
      if pat:sub(i + 1, i + 1) == "]" then
        out[#out + 1] = "]"
        i = i + 1
      end
    elseif c:find("[<>=@%%~&]") then
      out[#out + 1] = "\\" .. c
    else
      out[#out + 1] = c
    end
    i = i + 1
  end
  return table.concat(out)
end

function H.group(base, opts)
  H.next_gid = H.next_gid + 1
  local name = opts.name or base.label or util.cmd_string(base.cmd)
  if base.label == nil and opts.name then base.label = opts.name end
  local g = {
    gid = H.next_gid,
    name = name,
    spec = base,
    opts = opts,
    ids = {},
    restarts = 0,
    streak = 0,
    state = "running",
    waiters = {},
  }
  H.by_name[name] = g
  return g
end

-- Adopt a plain execution as a task run (`:Proctor watch` on it).
function H.adopt(id)
  local eng = engine.current()
  local rec = eng and eng:get(id)
  if not rec then return nil end
  local spec = engine.specs[id] and vim.deepcopy(engine.specs[id])
    or { cmd = rec.cmd, cwd = rec.cwd, label = rec.label, pty = rec.pty }
  spec.open = nil
  local g = H.group(spec, {})
  g.current = id
  g.ids = { id }
  H.by_id[id] = g
  if engine.TERMINAL[rec.state] then g.state = "done" end
  return g
end

-- Start the next execution of group `g` (first: the group's first one).
function H.start(g, first)
  local proctor = require("proctor")
  local s = {}
  for k, v in pairs(g.spec) do
    s[k] = v
  end
  if first and g.opts.after then s.hold = true end
  -- a restart: shown where the one before was (the pty sized from that window), else not opened
  local rest = function() end
  if not first then
    s.open = nil
    if g.current then
      s.open, rest =
        require("proctor.console").handover(g.current, { all_tabs = true, enter = false })
    end
  end
  local ex, err, ename = proctor._run(s)
  if not ex then
    if not first then
      util.notify(("task %s: could not start again: %s"):format(g.name, tostring(err)))
      g.state = "done"
      H.settle(g, false, "start failed")
    end
    return nil, err, ename
  end
  local id = ex.id
  if g.current then H.prev[id] = g.current end
  g.current = id
  g.ids[#g.ids + 1] = id
  g.pending = false
  g.stopped = false
  g.state = "running"
  H.by_id[id] = g
  rest(id)
  if g.opts.diagnostics then H.diagnostics(g, id, s) end
  if g.opts.ready then H.watch_ready(g, id) end
  if first and g.opts.after then H.wait_deps(g, id, g.opts.after) end
  return ex
end

function H.record_cwd(id)
  local rec = id and require("proctor").record(id)
  return rec and rec.cwd or nil
end

function H.diagnostics(g, id, s)
  local d = H.defaults()
  local matcher = g.opts.diagnostics
  if matcher == true then
    matcher = require("proctor.tasks.matchers").for_command(s.cmd) or api.nvim_eval("&errorformat")
  end
  local ok, err = require("proctor.tasks.diagnostics").attach(id, {
    name = g.name,
    matcher = matcher,
    cwd = H.record_cwd(id) or vim.fn.getcwd(),
    quickfix = g.opts.quickfix or d.quickfix,
    open_quickfix = g.opts.open_quickfix == nil and d.open_quickfix or g.opts.open_quickfix,
    max_items = g.opts.max_problems or d.max_problems,
  })
  if not ok then util.notify(("task %s: diagnostics: %s"):format(g.name, err)) end
end

-- Mark the execution ready when a line of its output matches the pattern.
function H.watch_ready(g, id)
  local re = vim.regex(M.ere(g.opts.ready.pattern))
  local handle
  handle = require("proctor.tasks.reader").attach(id, {
    chunk = function(text)
      if H.ready[id] then return end
      for line in text:gmatch("([^\n]*)\n") do
        if re:match_str(line) then
          H.ready[id] = true
          vim.schedule(function() handle.detach() end)
          H.fire("ProctorTaskReady", { id = id, task = g.name })
          if g.current == id then H.settle(g, true, "ready") end
          return
        end
      end
    end,
  })
end

-- Dependencies: release the held execution when all succeeded, else cancel it.
function H.wait_deps(g, id, after)
  local left = #after
  local failed = false
  local function one(dep, ok, why)
    if failed then return end
    if not ok then
      failed = true
      local eng = engine.current()
      if eng then eng:cancel(id, { reason = "dependency_failed" }) end
      util.notify(
        ("#%d %s: dependency %s %s"):format(id, g.name, tostring(dep), why or "failed"),
        vim.log.levels.WARN
      )
      return
    end
    left = left - 1
    if left == 0 then
      local eng = engine.current()
      if eng then eng:release(id) end
    end
  end
  if left == 0 then return one(nil, true) end
  for _, dep in ipairs(after) do
    if type(dep) == "number" then
      M.when_settled(dep, function(ok, why) one("#" .. dep, ok, ok and nil or why) end)
    else
      local live = M.live_id(dep)
      if live then
        M.when_settled(live, function(ok, why) one(dep, ok, ok and nil or why) end)
      else
        M.run_task(dep, { cwd = g.spec.cwd, set = { open = false } }, function(ex, err)
          if not ex then
            return one(dep, false, "could not start: " .. tostring(err):gsub("^E%u+: ", ""))
          end
          M.when_settled(ex.id, function(ok, why) one(dep, ok, ok and nil or why) end)
        end)
      end
    end
  end
end

function H.on_settle(g, fn)
  if g.settled ~= nil then return fn(g.settled, g.settled_why) end
  table.insert(g.waiters, fn)
end

function H.settle(g, ok, why)
  if g.settled ~= nil then return end
  g.settled, g.settled_why = ok, why
  local w = g.waiters
  g.waiters = {}
  for _, fn in ipairs(w) do
    local okc, e = pcall(fn, ok, why)
    if not okc then util.notify("task " .. g.name .. ": " .. tostring(e)) end
  end
end

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
    local g = H.by_id[ev.id]
    if g then H.ended(g, ev.id, ev) end
  end)
end

-- An execution of group `g` ended.
function H.ended(g, id, ev)
  if id ~= g.current then return end
  if g.pending then -- a change restart: start again in the same window
    g.settled = nil
    return H.start(g, false)
  end
  local policy = g.opts.restart or "never"
  local ok = ev.state == "completed"
  if ev.state == "canceled" then -- by the user, or its dependency failed: no restart policy
    g.state = "stopped"
    return H.settle(g, false, ev.reason or "canceled")
  end
  if ok then H.settle(g, true, "completed") end
  local again = (policy == "always") or (policy == "on-failure" and not ok)
  if not again or g.stopped then
    g.state = "done"
    if not ok then H.settle(g, false, ev.state) end
    return
  end
  local d = H.defaults()
  local rec = require("proctor").record(id)
  local healthy = g.opts.healthy_ms or d.healthy_ms
  -- A success, or a run that lasted healthy_ms, is not a failure in a row.
  if ok or (rec and (rec.duration_ms or 0) >= healthy) then g.streak = 0 end
  g.streak = g.streak + 1
  local max = g.opts.max_restarts or d.max_restarts
  if g.streak > max then
    g.state = "done"
    util.notify(
      ("task %s: gave up after %d restarts in a row (#%d %s)"):format(
        g.name,
        max,
        id,
        util.describe_end(ev)
      )
    )
    return H.settle(g, false, "max_restarts")
  end
  local delay = math.min(
    (g.opts.backoff_ms or d.backoff_ms) * 2 ^ (g.streak - 1),
    g.opts.backoff_max_ms or d.backoff_max_ms
  )
  g.state = "backoff"
  g.restarts = g.restarts + 1
  g.timer = g.timer or uv.new_timer()
  g.timer:start(
    math.floor(delay),
    0,
    vim.schedule_wrap(function()
      if g.state ~= "backoff" or g.stopped then return end
      H.start(g, false)
    end)
  )
end

function H.fire(pattern, data)
  local opts = { pattern = pattern, modeline = false }
  if require("proctor.compat").autocmd_data() then opts.data = data end
  require("proctor").event = data
  pcall(api.nvim_exec_autocmds, "User", opts)
end

M._H = H

return M
