--- proctor — the public Lua API of the Neovim layer.
---
---   local proctor = require("proctor")
---   proctor.setup({ notify = "always" })          -- optional, may be called again
---   local ex = proctor.run({ cmd = { "make", "-j8" }, label = "build",
---                            on_exit = function(ex, rec) print(rec.state) end })
---   ex:open()                                      -- console (proctor://<id>)
---   ex:wait(60000)                                 -- record, or nil + ETIMEDOUT
---
--- Failures are returned the way the core returns them: `nil, "ENAME: message",
--- "ENAME"`. Callbacks (`on_output`, `on_state`, `on_exit`) always run on the
--- main loop, never in fast context. Requiring this module has no side effects:
--- the engine starts on first use.

local M = {}
local H = {}

local config = require("proctor.config")
local targets = require("proctor.targets")
local compat = require("proctor.compat")
local engine = require("proctor.engine")
local util = require("proctor.util")

---@class proctor.Execution
---@field id integer
local Execution = {}
Execution.__index = Execution

--- Cancel (SIGTERM, SIGKILL after the grace period; `force`: SIGKILL at once).
---@param force boolean|nil
---@return proctor.CancelResult|nil result, string|nil err
function Execution:cancel(force) return M.cancel(self.id, force) end
--- Send bytes to the process (stdin pipe or pty).
---@param data string
---@return boolean|nil ok, string|nil err, string|nil name
function Execution:input(data) return M.input(self.id, data) end
--- Close stdin (pty: send ^D).
---@return boolean|nil ok, string|nil err, string|nil name
function Execution:close_stdin() return M.close_stdin(self.id) end
--- The record now (a copy), or nil, msg, name.
---@return proctor.Record|nil rec, string|nil err, string|nil name
function Execution:record() return M.record(self.id) end
--- Open the console; returns buf, win.
---@param opts proctor.OpenOpts|nil
---@return integer|nil buf, integer|string|nil win_or_err
function Execution:open(opts) return M.open(self.id, opts) end
--- Block (processing events) until the execution ended or `timeout_ms` passed.
--- Returns the final record, or nil, "ETIMEDOUT: …", "ETIMEDOUT"; interrupted
--- with CTRL-C: nil, "EINTR: interrupted …", "EINTR" (the execution runs on).
--- A run with `text = true` gets `code`, `stdout` and `stderr` in the record
--- too (|proctor-ex:wait()|).
---@param timeout_ms integer|nil default: forever
---@return proctor.Record|nil rec, string|nil err, string|nil name
function Execution:wait(timeout_ms)
  local id = self.id
  if timeout_ms ~= nil and (type(timeout_ms) ~= "number" or timeout_ms < 0) then
    error(
      "proctor: wait: timeout_ms must be a number >= 0 (milliseconds), got "
        .. H.describe(timeout_ms),
      2
    )
  end
  local interrupted = false
  local ok, why = vim.wait(timeout_ms or 2 ^ 31 - 1, function()
    engine.pump()
    if engine.is_done(id) then return true end
    interrupted = compat.interrupted()
    return interrupted
  end, 5)
  if interrupted or not ok then
    local state = tostring(engine.state[id] or "unknown")
    if interrupted or why == -2 then
      return nil,
        string.format("EINTR: interrupted while waiting for execution %d (still %s)", id, state),
        "EINTR"
    end
    return nil,
      string.format("ETIMEDOUT: execution %d still %s after %d ms", id, state, timeout_ms or 0),
      "ETIMEDOUT"
  end
  local rec, err, name = M.record(id)
  if not rec then return nil, err, name end
  if H.text[id] then
    rec.code = rec.exit_code
    rec.stdout = self:output(rec.pty and "pty" or "stdout") or ""
    rec.stderr = rec.pty and "" or (self:output("stderr") or "")
    if rec.pty then rec.stdout = rec.stdout:gsub("\r\n", "\n") end
  end
  return rec
end
--- The output the engine keeps of `stream` (the last `engine.output_limit`
--- bytes), and how many bytes before it were dropped.
---@param stream "stdout"|"stderr"|"pty"|nil default: "pty" for a PTY execution, else "stdout"
---@return string|nil text, integer|string|nil missed_or_err, string|nil name
function Execution:output(stream)
  local eng, err = H.engine()
  if not eng then return nil, err, "ENOENGINE" end
  if stream == nil then
    local rec = eng:get(self.id)
    stream = rec and rec.pty and "pty" or "stdout"
  elseif stream ~= "stdout" and stream ~= "stderr" and stream ~= "pty" then
    error(
      'proctor: output: stream must be "stdout", "stderr" or "pty", got ' .. H.describe(stream),
      2
    )
  end
  local data, nxt, missed = eng:read(self.id, stream, 0)
  if not data then return nil, nxt, missed end
  return data, missed
end
function Execution:__tostring() return "proctor.Execution(" .. self.id .. ")" end

H.watch = {} -- id -> { exec, on_output, on_state, on_exit }
H.ended = {} -- terminal records collected during a batch, for notifications
H.hooked = false

--- Configure proctor. May be called again (each call starts from the defaults).
--- A bad key or type is reported as one `(proctor) setup: …` error and the
--- previous configuration stays; unknown keys warn.
---@param opts proctor.SetupOpts|nil
---@return boolean ok, string|nil err
function M.setup(opts)
  local ok, err, warnings = config.apply(opts)
  for _, w in ipairs(warnings) do
    util.notify("setup: " .. w, vim.log.levels.WARN)
  end
  if not ok then
    util.notify("setup: " .. err)
    return false, err
  end
  -- rpc.start = "startup": the engine and its socket now, so that an agent
  -- started later finds this editor (:help proctor-mcp-mode).
  engine.sync_targets() -- an engine made before this setup() learns the new targets
  local c = config.get()
  if c.rpc.enabled and c.rpc.start == "startup" then
    local eng, e = H.engine()
    if not eng then util.notify("setup: rpc.start: " .. tostring(e), vim.log.levels.WARN) end
  end
  H.warm_up()
  return true
end

--- Start an execution. Accepts every field of the core's start spec (cmd, cwd,
--- env, clear_env, pty, cols, rows, stdin, timeout_ms, kill_grace_ms, label,
--- owner, backpressure, secrets, env_allow, hold) plus `on_output(ex, stream,
--- data)`, `on_state(ex, ev)`, `on_exit(ex, record)`, `open` (true or options
--- of |proctor.open()|), `text` (wait() adds code, stdout, stderr) and `notify`.
---
--- Returns the execution. A bad spec (a field of the wrong type, an unknown
--- field, a missing directory) or an engine that cannot start raises an error
--- naming the field, as vim.system() does; a command that cannot be spawned is
--- no error here: the execution ends `failed` with reason "spawn_error".
---@param spec proctor.RunSpec|string
---@return proctor.Execution ex
function M.run(spec)
  local ex, err = H.run(spec)
  if ex then return ex end
  error("proctor.run: " .. util.strip(err), 2)
end

--- run() for proctor's own modules: nil, "ENAME: message", "ENAME" instead of raising.
---@private
---@param spec proctor.RunSpec|string
---@return proctor.Execution|nil ex, string|nil err, string|nil name
function M._run(spec) return H.run(spec) end

--- The engine (started if need be) with this layer's subscribers hooked, so
--- that what RPC clients start is seen (the first agent run's notification).
---@private
---@return proctor.Engine|nil eng, string|nil err
function M._engine() return H.engine() end

--- An execution object for any id the core knows (started here or elsewhere).
---@param id integer
---@return proctor.Execution|nil ex, string|nil err, string|nil name
function M.get(id)
  local rec, msg, name = M.record(id)
  if not rec then return nil, msg, name end
  return setmetatable({ id = rec.id }, Execution)
end

--- The record of an execution (see |proctor-records|), or nil, msg, name.
---@param id integer
---@return proctor.Record|nil rec, string|nil err, string|nil name
function M.record(id)
  local eng, err = H.engine()
  if not eng then return nil, err, "ENOENGINE" end
  if type(id) ~= "number" then return H.fail("EINVAL", "execution id must be a number") end
  local rec, msg, name = eng:get(id)
  if rec then H.extend("record", rec) end
  return rec, msg, name
end

--- Record `rec` (one this editor holds, as console bars do) with what
--- extensions add to a record (task links), as M.record gives it.
---@param rec proctor.Record
---@return proctor.Record
function M._extended(rec)
  H.extend("record", rec)
  return rec
end

--- Records of all executions, in id order. `filter.state` limits to one state.
---@param filter {state: proctor.State}|nil
---@return proctor.Record[]
function M.list(filter)
  local eng = H.engine()
  if not eng then return {} end
  local ok, res = pcall(eng.list, eng, filter)
  if not ok then return {} end
  return res or {}
end

--- Cancel an execution. `force` kills at once (SIGKILL).
---@param id integer
---@param force boolean|nil
---@return proctor.CancelResult|nil result, string|nil err
function M.cancel(id, force)
  local eng, err = H.engine()
  if not eng then return nil, err end
  if type(id) ~= "number" then return H.fail("EINVAL", "execution id must be a number") end
  local res = eng:cancel(id, force and true or false)
  if res == "canceling" or res == "already_canceling" then engine.canceling[id] = true end
  H.extend("cancel", id, res)
  return res
end

--- Extend run() from a higher floor (|proctor-tasks| is one): `ext.run(spec)`
--- returns true, ex, err, name for a spec it runs itself (it calls _run()
--- without its own fields) or false; it takes only specs with a field of its
--- own, never one of run()'s (a spec of run()'s fields alone reaches no
--- `ext.run`, and loads no RUN_EXTENSIONS); `ext.record(rec)` adds fields to a record
--- of record(); `ext.cancel(id, result)` hears a cancel that went through;
--- `ext.forget(id)` a deleted record; `ext.summary(id)` a line for its ending
--- notification, or nil. Each runs under pcall but `run`.
---@private
---@param name string a unique name (extending again replaces)
---@param ext {run: fun(spec: table): (boolean, ...)|nil, record: fun(rec: table)|nil, cancel: fun(id: integer, res: string)|nil, forget: fun(id: integer)|nil, summary: fun(id: integer): string?}
function M._extend(name, ext)
  if not H.ext[name] then H.ext_order[#H.ext_order + 1] = name end
  H.ext[name] = ext
end

--- The extension `name` (one of H.EXTENSIONS), its module loaded on first
--- need: the functions it offers to lower floors are in its `api`.
---@private
---@param name string
---@return table
function M._ext(name)
  if not H.ext_required[name] then
    for _, mod in ipairs(H.EXTENSIONS[name]) do
      require(mod)
    end
    H.ext_required[name] = true
  end
  return H.ext[name]
end

--- Fire `User {pattern}` with `data` (0.7: in proctor.event).
---@private
function M._fire(pattern, data) H.fire(pattern, data) end

--- The tasks of a directory: { { name, cmd, cwd, source, desc? }, ... } (|proctor.tasks()|).
--- opts: cwd, callback(tasks) once every probe answered, prompt.
function M.tasks(opts) return M._ext("tasks").api.list(opts) end

--- Trust directory `dir` (default: the current one): task discovery may
--- evaluate its build files (make, just) and read its .proctor.lua (|proctor.trust()|).
---@param dir string|nil
---@return string|nil dir, string|nil err
function M.trust(dir) return M._ext("tasks").api.trust(dir) end

--- Run task names or definitions one after the other as one chain (|proctor.sequence()|).
function M.sequence(steps, opts) return M._ext("tasks").api.sequence(steps, opts) end

--- Delete a finished execution's record (and its console buffer).
---@param id integer
---@return proctor.DeleteResult|nil result, string|nil err
function M.delete(id)
  local eng, err = H.engine()
  if not eng then return nil, err end
  if type(id) ~= "number" then return H.fail("EINVAL", "execution id must be a number") end
  local res = eng:delete(id)
  if res == "deleted" then H.forget(id) end
  return res
end

--- Delete finished executions (older than `opts.older_than_ms` if given). Returns the count.
---@param opts {older_than_ms: integer}|nil
---@return integer|nil count, string|nil err
function M.purge(opts)
  local eng, err = H.engine()
  if not eng then return nil, err end
  local before = {}
  for _, r in ipairs(eng:list()) do
    before[r.id] = true
  end
  local n = eng:purge(opts or {})
  for _, r in ipairs(eng:list()) do
    before[r.id] = nil
  end
  for id in pairs(before) do
    H.forget(id)
  end
  return n
end

--- Send `data` to the process. Before the process runs (queued, starting)
--- the core keeps the data and writes it when it starts (|proctor-core-input|).
---@param id integer
---@param data string
---@return boolean|nil ok, string|nil err, string|nil name
function M.input(id, data)
  local eng, err = H.engine()
  if not eng then return nil, err, "ENOENGINE" end
  if type(id) ~= "number" then return H.fail("EINVAL", "execution id must be a number") end
  if type(data) ~= "string" then return H.fail("EINVAL", "input data must be a string") end
  return eng:input(id, data)
end

--- Close the process's stdin (pty: send ^D); before it runs, once it runs.
---@param id integer
---@return boolean|nil ok, string|nil err, string|nil name
function M.close_stdin(id)
  local eng, err = H.engine()
  if not eng then return nil, err, "ENOENGINE" end
  return eng:close_stdin(id)
end

--- Open (or focus) the console of an execution. See |proctor.open()|.
---@param id integer
---@param opts proctor.OpenOpts|nil
---@return integer|nil buf, integer|string|nil win_or_err
function M.open(id, opts)
  local eng, err = H.engine()
  if not eng then return nil, err end
  H.hook()
  return M._ext("console").api.open(id, opts)
end

--- Counts per state: { queued, starting, running, completed, failed, canceled, timed_out, total }.
---@return {queued: integer, starting: integer, running: integer, completed: integer, failed: integer, canceled: integer, timed_out: integer, total: integer}
function M.status()
  local c = engine.counts
  local r = { total = 0 }
  for _, s in ipairs({
    "queued",
    "starting",
    "running",
    "completed",
    "failed",
    "canceled",
    "timed_out",
  }) do
    r[s] = math.max(c[s] or 0, 0)
    r.total = r.total + r[s]
  end
  return r
end

--- Start a supervised worker (:help proctor-workers): returns an object with
--- request(payload, opts), cancel(rid), restart(), stop(), record().
---@return proctor.Worker|nil, string|nil
function M.worker(spec) return M._ext("worker").api.start(spec) end

--- A short string for 'statusline': "⏵2 ✓5 ✗1" style, ASCII: "proctor: 2 running, 5 ok, 1 failed".
--- Empty when nothing ran yet.
---@return string
function M.statusline()
  local s = M.status()
  if s.total == 0 then return "" end
  local parts = {}
  local live = s.queued + s.starting + s.running
  if live > 0 then parts[#parts + 1] = live .. " running" end
  if s.completed > 0 then parts[#parts + 1] = s.completed .. " ok" end
  local bad = s.failed + s.timed_out
  if bad > 0 then parts[#parts + 1] = bad .. " failed" end
  if s.canceled > 0 then parts[#parts + 1] = s.canceled .. " canceled" end
  return "proctor: " .. table.concat(parts, ", ")
end

--- The record of the last User event, for Neovim versions whose autocmds have no `data` (0.7).
M.event = nil

-- Helpers ------------------------------------------------------------------------

H.text = {} -- id -> true: run{ text = true }, wait() adds code, stdout, stderr
H.quiet = {} -- id -> notify mode of run{ notify = } when it is not the configured one
H.ext, H.ext_order = {}, {} -- name -> extension of run() (M._extend)
H.ext_required = {} -- name -> true: the modules of H.EXTENSIONS[name] are loaded
-- The extensions: modules of higher floors that register through M._extend,
-- loaded by name on first need (M._ext), so that requiring proctor stays
-- cheap and this floor never requires a higher one. RUN_EXTENSIONS are loaded
-- on the first run() with a field that is not run()'s own: their run filter
-- must see every such spec. Each is loaded
-- with the modules it needs registered: a console's keys dispatch through
-- proctor.keys, which proctor.actions fills when it loads.
H.EXTENSIONS = {
  console = { "proctor.console", "proctor.actions" },
  tasks = { "proctor.tasks" },
  worker = { "proctor.worker" },
}
H.RUN_EXTENSIONS = { "tasks" }

-- Call hook `hook` of every extension (an error is reported, never raised).
function H.extend(hook, ...)
  for _, name in ipairs(H.ext_order) do
    local fn = H.ext[name][hook]
    if fn then
      local ok, e = pcall(fn, ...)
      if not ok then util.notify(string.format("%s (%s): %s", name, hook, tostring(e))) end
    end
  end
end

-- The first summary an extension gives of execution `id` (`ext.summary`), or nil.
function H.summary(id)
  for _, name in ipairs(H.ext_order) do
    local fn = H.ext[name].summary
    if fn then
      local ok, text = pcall(fn, id)
      if ok and text then return text end
    end
  end
  return nil
end

-- The run filter: the first extension whose `run` takes the spec runs it
-- (true, ex, err, name); false when none does.
function H.filter(spec)
  if not H.ext_loaded then
    H.ext_loaded = true
    for _, name in ipairs(H.RUN_EXTENSIONS) do
      M._ext(name)
    end
  end
  for _, name in ipairs(H.ext_order) do
    local run = H.ext[name].run
    if run then
      local mine, ex, err, ename = run(spec)
      if mine then return true, ex, err, ename end
    end
  end
  return false
end

-- What the fields of a run() spec must be: { check(v) -> ok, what it must be }.
-- The core's fields (keys, types, bounds) come from the core's own description
-- of the start spec (core.spec_fields, made from PR_SPEC_FIELDS in the C
-- header), the layer's own fields (callbacks, open, text, notify) are listed
-- here. Checked here, so a wrong field reads like the rest of proctor's
-- messages ("timeout_ms must be an integer (milliseconds), got "5s"").
H.SPEC = nil -- made on first use (H.spec()), once the core is loaded
H.CORE_KEYS = nil -- the core fields run() passes on, in the core's order

-- The core's fields a run() spec does not take: a worker is started by
-- proctor.worker() (|proctor-workers|), cmd is checked apart.
H.NOT_RUN = { worker = true, cmd = true }

do
  -- the checks run on every run(): interpreted, as the rest of run()'s path (H.run)
  local checked = compat.interpreted
  local function is(t)
    return checked(function(v) return type(v) == t end)
  end
  local function int(min, max)
    return checked(
      function(v) return type(v) == "number" and v == math.floor(v) and v >= min and v <= max end
    )
  end
  local function env(v)
    if type(v) ~= "table" then return false end
    for k, x in pairs(v) do
      if type(k) ~= "string" or k == "" or k:find("[=%z]") then return false end
      if type(x) ~= "string" and type(x) ~= "number" then return false end
    end
    return true
  end
  local function names(v)
    if type(v) ~= "table" then return false end
    for _, x in pairs(v) do
      if type(x) ~= "string" or x == "" or x:find("[=%z]") then return false end
    end
    return true
  end
  local function notify(v)
    return type(v) == "boolean" or v == "never" or v == "on_failure" or v == "always"
  end
  checked(env, names, notify)
  -- a core field's check, by the type core.spec_fields gives it
  local BY_TYPE = {
    boolean = function() return { is("boolean"), "a boolean" } end,
    integer = function(f)
      return {
        int(0, f.max),
        f.key:match("_ms$") and "an integer (milliseconds)"
          or string.format("an integer in [0, %d]", f.max),
      }
    end,
    string = function() return { is("string"), "a string" } end,
    env = function() return { env, "a table of NAME = value (strings or numbers)" } end,
    secrets = function() return { is("table"), "a table of NAME = value or source" } end,
    names = function() return { names, "a list of names" } end,
  }
  -- the layer's own fields
  local LAYER = {
    text = { is("boolean"), "a boolean" },
    notify = { notify, 'a boolean or "never", "on_failure", "always"' },
    open = {
      checked(function(v) return type(v) == "boolean" or type(v) == "table" end),
      "a boolean or a table of open options",
    },
    on_output = { is("function"), "a function" },
    on_state = { is("function"), "a function" },
    on_exit = { is("function"), "a function" },
  }

  --- The checks of every field run() takes, or nil and why when the core
  --- cannot be loaded (run() then fails to get an engine, with the same why).
  ---@return table|nil spec, string|nil err
  function H.spec()
    if H.SPEC then return H.SPEC end
    local core, err = engine.load_core()
    if not core then return nil, err end
    local spec, keys = {}, {}
    for k, v in pairs(LAYER) do
      spec[k] = v -- the checks are never changed: shared, not copied
    end
    for _, f in ipairs(core.spec_fields) do
      if f.lua and not H.NOT_RUN[f.key] then
        spec[f.key] = assert(BY_TYPE[f.type], "a core field type run() does not know")(f)
        keys[#keys + 1] = f.key
      end
    end
    H.SPEC, H.CORE_KEYS = spec, keys
    return spec
  end
end

-- Is every field of `spec` one of run()'s own (the core's or the layer's)?
-- Such a spec is no run filter's (M._extend): the first run() of a fan-out
-- then loads no extension.
function H.plain(spec)
  local SPEC = H.spec()
  if not SPEC then return false end
  for k in pairs(spec) do
    if k ~= "cmd" and not SPEC[k] then return false end
  end
  return true
end

-- "5s" -> "\"5s\"", 3 -> "3", {} -> "table"
function H.describe(v)
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) == "number" or type(v) == "boolean" then return tostring(v) end
  return type(v)
end

-- The first problem of `spec` (a table), as a message, or nil.
function H.check_spec(spec)
  local SPEC = H.spec()
  if not SPEC then return nil end -- no core: run() says so when it asks for the engine
  -- A good spec (the usual one) is checked in any order; the first problem,
  -- in the order of the field names, is looked for only once there is one.
  for k, v in pairs(spec) do
    if H.problem(SPEC, k, v) then return H.first_problem(SPEC, spec) end
  end
  if spec.cmd == nil then
    return "cmd is missing (a string run by /bin/sh -c, or a list of strings)"
  end
  return nil
end

-- The problem of the spec's field names in sorted order, the first there is.
function H.first_problem(SPEC, spec)
  local keys = vim.tbl_keys(spec)
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do
    local why = H.problem(SPEC, k, spec[k])
    if why then return why end
  end
  return nil
end

-- The problem of field `k` = `v` of a spec, as a message, or nil.
function H.problem(SPEC, k, v)
  local c = SPEC[k]
  if k == "cmd" then
    if type(v) == "string" then
      if v:match("^%s*$") then return "cmd is empty" end
    elseif type(v) == "table" then
      if #v == 0 then return "cmd list is empty" end
      for i, a in ipairs(v) do
        if type(a) ~= "string" and type(a) ~= "number" then
          return string.format("cmd[%d] must be a string, got %s", i, H.describe(a))
        end
      end
    else
      return "cmd must be a string (run by /bin/sh -c) or a list of strings, got " .. H.describe(v)
    end
  elseif not c then
    return "unknown field " .. H.describe(k) .. " in the spec"
  elseif not c[1](v) then
    return string.format("%s must be %s, got %s", k, c[2], H.describe(v))
  end
  return nil
end

H.CALLBACKS = { "on_output", "on_state", "on_exit" }
H.DEFERRED = { wake = false } -- eng:start's options for run()'s starts

-- The console extension's api (loaded on first need; see H.warm_up). Its loaded
-- case does not call M._ext, nor run() H.hook once hooked: a small function
-- called on every run() would start a LuaJIT trace of its own (spec_api
-- "fan-out after setup" sees one at M._ext).
function H.console()
  if H.ext_required.console then return H.ext.console.api end
  return M._ext("console").api
end

-- The console's window of run{ open } (nil: open = "none"), made before the start.
function H.window(open) return H.console().window(open) end

-- The body of run(): nil, msg, name on failure.
function H.run(spec)
  if type(spec) == "string" then spec = { cmd = spec } end
  if type(spec) ~= "table" then
    return H.fail("EINVAL", "expects a table or a string, got " .. type(spec))
  end
  -- An extension's fields (task options: diagnostics, watch, after, ...): it
  -- runs the spec, calling _run() again without them. A spec made only of
  -- run()'s own fields is no extension's (see M._extend): none is loaded.
  if not H.plain(spec) then
    local mine, fex, ferr, fname = H.filter(spec)
    if mine then return fex, ferr, fname end
  end
  local problem = H.check_spec(spec)
  if problem then return H.fail("EINVAL", problem) end
  local cfg = config.get().run
  local s = { cmd = spec.cmd }
  for _, k in ipairs(H.CORE_KEYS or {}) do
    s[k] = spec[k]
  end
  local cbs -- nil: no callback
  for _, k in ipairs(H.CALLBACKS) do
    if spec[k] ~= nil then
      cbs = cbs or {}
      cbs[k] = spec[k]
    end
  end
  if s.target ~= nil then -- a path on the far side; its default: the target's, or the far home
    local def = config.get().targets[s.target]
    if def == nil and s.transport == nil then
      return H.fail(
        "EINVAL",
        "unknown target " .. string.format("%q", s.target) .. " (setup{ targets })"
      )
    end
    if s.transport == nil then
      local tr, cwd = targets.transport(s.target, def)
      if not tr then return H.fail("EINVAL", cwd) end
      s.transport = tr
      if s.cwd == nil then s.cwd = cwd end
    end
  elseif s.cwd ~= nil then
    s.cwd = vim.fn.fnamemodify(vim.fn.expand(s.cwd), ":p")
    if vim.fn.isdirectory(s.cwd) == 0 then
      return H.fail("ENOENT", "cwd: no such directory " .. s.cwd)
    end
  else
    -- getcwd()'s answer without a call into Vimscript: :cd, :tcd and :lcd
    -- (and entering a window that has one) change the process's own directory
    s.cwd = compat.uv.cwd() or vim.fn.getcwd()
  end
  if s.pty == nil then s.pty = cfg.pty end
  if s.stdin == nil and not s.pty then s.stdin = cfg.stdin end
  if s.pty then
    s.cols = s.cols or cfg.cols
    s.rows = s.rows or cfg.rows
  end
  if s.timeout_ms == nil then s.timeout_ms = cfg.timeout_ms end
  if s.owner == nil then s.owner = cfg.owner end
  local eng, err = engine.get()
  if not eng then return H.fail("ENOENGINE", err) end
  if not H.hooked then H.hook() end
  local open = spec.open and (type(spec.open) == "table" and spec.open or {}) or nil
  -- The console's window is made first: a pty gets its text area from the first byte.
  local made, window = true, nil
  if open then
    made, window = pcall(H.window, open)
  end
  window = made and window or nil -- no room for it now: M.open below says why
  if window and s.pty then
    local cols, rows = compat.text_size(window.win)
    if spec.cols == nil and cols > 0 then s.cols = cols end
    if spec.rows == nil and rows > 0 then s.rows = rows end
  end
  local start = s
  if s.pty then start = H.terminal_env(s) end
  -- queued without waking the engine thread: it is woken once this turn of
  -- the loop is over, for every run() of the turn (engine.flush_later)
  local ok, id, msg, name = pcall(eng.start, eng, start, H.DEFERRED)
  if not (ok and id) and window then window:cancel() end
  if not ok then return H.fail("EINVAL", H.binding_text(id)) end
  if not id then return nil, msg, name end
  engine.flush_later()
  -- A console shown now is dearer than a wake-up (its terminal, 1-10 ms of
  -- this thread): the engine thread starts the process meanwhile. Runs without
  -- a window (a fan-out loop) keep the turn's one wake-up.
  if window then eng:flush() end
  local ex = setmetatable({ id = id }, Execution)
  -- kept for rerun (the core copied what it needs: `s` is this layer's now);
  -- the size from this window is not the next one's
  s.open, s.text, s.notify = spec.open, spec.text, spec.notify
  s.cols, s.rows = spec.cols, spec.rows
  engine.specs[id] = s
  if cbs then H.watch[id] = { exec = ex, cbs = cbs } end
  H.text[id] = spec.text or nil
  if spec.notify ~= nil then H.quiet[id] = spec.notify end
  if open then
    -- no wait for the engine thread: the console is made from what is known here
    local how = open -- the caller's table, read and never changed
    if window ~= nil then
      how = {}
      for k, v in pairs(open) do
        how[k] = v
      end
      how.window = window
    end
    -- the size the process starts with: the console does not ask the engine
    -- thread for it again (eng:resize waits for an answer)
    local rec = { id = id, label = s.label, pty = s.pty and true or false }
    if s.pty then
      rec.cols, rec.rows = start.cols, start.rows
    end
    H.console().open_run(rec, how)
  end
  return ex
end

-- run()'s path is interpreted, never traced (compat.interpreted): 100 run()s in
-- one loop of a fresh editor spent more main-thread time in LuaJIT recording
-- and abandoning traces through it than in running it (bench/RESULTS.md,
-- "Issue 30, round 6"). Its leaves that are called from everywhere
-- (config.get, engine.get) stay traceable.
compat.interpreted(
  M.run,
  M._run,
  H.run,
  H.plain,
  H.spec,
  H.check_spec,
  H.problem,
  H.console,
  H.window
)

-- The start spec of a PTY execution with the environment :terminal gives its
-- jobs (|proctor-console-env|): VIM and VIMRUNTIME left out (a Vim or another
-- Neovim inside would load this Neovim's runtime), NVIM = this Neovim's server.
-- `s` itself is not changed: rerun takes the environment of its own time.
function H.terminal_env(s)
  local t = compat.terminal_env()
  local out = vim.tbl_extend("force", {}, s)
  if not s.clear_env then
    local drop = {}
    for _, k in ipairs(t.drop) do
      drop[k] = true
    end
    local allow = {}
    if s.env_allow then
      for _, k in ipairs(s.env_allow) do
        if not drop[k] then allow[#allow + 1] = k end
      end
    else
      for k in pairs(vim.fn.environ()) do
        if not drop[k] then allow[#allow + 1] = k end
      end
      table.sort(allow)
    end
    out.env_allow = allow
  end
  local env = vim.tbl_extend("force", {}, t.set, s.env or {}) -- the spec's own env wins
  if next(env) then out.env = env end
  return out
end

-- A message of the C binding without its frame: "bad argument #2 to 'start'
-- ('cmd' entries must be strings)" -> "'cmd' entries must be strings".
function H.binding_text(e)
  local text = tostring(e):gsub("^.-bad argument #%d+ to '[^']*' %((.*)%)$", "%1")
  return (text:gsub("^field ", ""))
end

function H.fail(name, msg) return nil, name .. ": " .. msg, name end

function H.engine()
  local eng, err = engine.get()
  if eng then H.hook() end
  return eng, err
end

function H.forget(id)
  engine.forget(id)
  H.extend("forget", id)
  H.watch[id] = nil
  H.text[id], H.quiet[id] = nil, nil
end

-- Once after the first setup(), once the editor is up (VimEnter): load what
-- the first run() would load itself, so that a fan-out's first run() finds it
-- loaded: the field checks (with the core they are read from), then the
-- console extension's modules (the actions its keys dispatch to last), one a
-- tick, so that no tick holds the editor long. Nothing starts: no engine, no
-- process, no file of the project is read. A failure is left for run() to report.
function H.warm_up()
  if H.warming then return end
  H.warming = true
  local mods = H.EXTENSIONS.console
  local steps = { function() H.spec() end }
  for i = 1, #mods - 1 do
    steps[#steps + 1] = function() require(mods[i]) end
  end
  steps[#steps + 1] = function() M._ext("console") end -- the last module, and marked loaded
  local i = 0
  local function step()
    i = i + 1
    if not steps[i] then return end
    pcall(steps[i])
    vim.defer_fn(step, 0)
  end
  local function later() vim.defer_fn(step, 0) end
  if vim.v.vim_did_enter == 1 then
    later()
  else
    vim.api.nvim_create_autocmd("VimEnter", { once = true, callback = later })
  end
end

-- Register the subscribers once.
function H.hook()
  if H.hooked then return end
  H.hooked = true
  engine.subscribe("api", H.on_event)
  engine.on_batch("api", H.on_batch)
end

function H.on_event(ev)
  local id = ev.id
  local w = H.watch[id]
  if ev.type == "output" then
    if w and w.cbs.on_output then
      H.call(w.cbs.on_output, "on_output", id, w.exec, ev.stream, ev.data, ev.missed)
    end
    return
  end
  local terminal = engine.TERMINAL[ev.state]
  if ev.prev == nil and not engine.specs[id] then H.agent_first(id, ev.record) end
  if w and w.cbs.on_state then H.call(w.cbs.on_state, "on_state", id, w.exec, ev) end
  -- Every state event brings the record as of it (engine.lua turns
  -- eng:state_records on): on_exit's, the notification's, the User
  -- autocmds'. Only an event past the bound of events not polled comes
  -- without; its record is then read (a call that waits for the engine
  -- thread), and only when someone wants it.
  local rec = ev.record
  local listen = H.has_autocmd("ProctorStateChanged")
  local eng = engine.current()
  if not rec and eng and (listen or (terminal and H.wants_end(id, w))) then rec = (eng:get(id)) end
  if not rec then -- a copy of the event (plain: vim.tbl_extend validates its arguments)
    rec = {}
    for k, v in pairs(ev) do
      rec[k] = v
    end
  end
  -- The record as of this event (the core may already be further along).
  rec.state, rec.prev = ev.state, ev.prev
  if listen then
    H.fire("ProctorStateChanged", rec)
  else
    M.event = rec
  end
  if terminal then
    if w and w.cbs.on_exit then H.call(w.cbs.on_exit, "on_exit", id, w.exec, rec) end
    H.watch[id] = nil
    H.fire("ProctorExit", rec)
    local mode = config.get().notify
    local own = H.quiet[id] -- run{ notify = } (a task's too)
    H.quiet[id] = nil
    if own == false then
      mode = "never"
    elseif type(own) == "string" then
      mode = own
    end
    if
      mode == "always"
      or (mode == "on_failure" and (rec.state == "failed" or rec.state == "timed_out"))
    then
      H.ended[#H.ended + 1] = rec
    end
  end
end

-- The first execution an agent (an RPC client: another owner than
-- run.owner, not started by this layer) starts here is told once per owner,
-- for at most AGENTS_MAX owners (:help proctor-limits).
H.agents, H.nagents, H.AGENTS_MAX = {}, 0, 64
function H.agent_first(id, rec)
  if H.nagents >= H.AGENTS_MAX then return end
  local eng = engine.current()
  rec = rec or (eng and eng:get(id))
  if not rec or not rec.owner or rec.owner == config.get().run.owner then return end
  if H.agents[rec.owner] then return end
  H.agents[rec.owner], H.nagents = true, H.nagents + 1
  local cmd = type(rec.cmd) == "table" and table.concat(rec.cmd, " ") or tostring(rec.cmd)
  util.notify(
    string.format(
      "%s started #%d in this editor: %s (its runs: :Proctor list owner=%s)",
      rec.owner,
      id,
      cmd,
      rec.owner
    ),
    vim.log.levels.INFO
  )
end

-- Does the end of `id` (watched as `w`) need the whole record?
function H.wants_end(id, w)
  if w and w.cbs.on_exit then return true end
  if H.has_autocmd("ProctorExit") then return true end
  local own = H.quiet[id]
  if own == false then return false end
  return (type(own) == "string" and own or config.get().notify) ~= "never"
end

-- Is there a User autocmd for `pattern`? Asked once per batch of events (a
-- vim.fn call each event was a fair part of a fan-out's drain); an autocmd
-- made during a batch counts from the next one.
H.autocmds = {}
function H.has_autocmd(pattern)
  local v = H.autocmds[pattern]
  if v == nil then
    v = vim.fn.exists("#User#" .. pattern) == 1
    H.autocmds[pattern] = v
  end
  return v
end

function H.call(fn, what, id, ...)
  local ok, e = pcall(fn, ...)
  if not ok then
    util.notify(string.format("%s callback of execution %d failed: %s", what, id, tostring(e)))
  end
end

function H.fire(pattern, rec)
  M.event = rec
  local opts = { pattern = pattern, modeline = false }
  if compat.autocmd_data() then opts.data = rec end
  local ok, e = pcall(vim.api.nvim_exec_autocmds, "User", opts)
  if not ok then util.notify("User " .. pattern .. " autocmd failed: " .. tostring(e)) end
end

-- After a batch of events: endings are told in one notification once none
-- came for NOTIFY_MS (a burst of 40 failures: one message, not 36), at the
-- latest NOTIFY_MAX_MS after the first.
function H.on_batch()
  H.autocmds = {}
  if #H.ended == H.told_upto then return end
  H.told_upto = #H.ended
  local uv = compat.uv
  local now = uv.now()
  if not H.notify_timer then
    H.notify_timer = uv.new_timer()
    H.notify_first = now
  end
  local wait = math.min(H.NOTIFY_MS, math.max(0, H.notify_first + H.NOTIFY_MAX_MS - now))
  H.notify_timer:start(
    wait,
    0,
    vim.schedule_wrap(function()
      if not H.notify_timer then return end
      H.notify_timer:close()
      H.notify_timer = nil
      H.told_upto = 0
      H.notify_ended()
    end)
  )
end

H.told_upto = 0 -- endings in H.ended when the notification timer was last (re)started
H.NOTIFY_MS = 200 -- endings told together when none follows within this long ...
H.NOTIFY_MAX_MS = 2000 -- ... but at the latest this long after the first
H.NOTIFY_LINES = 5 -- executions named one by one in a batched notification

-- One notification for the endings collected so far (config `notify`).
function H.notify_ended()
  local shown = H.ended -- only what `notify` wanted when it ended
  H.ended = {}
  if #shown == 0 then return end
  local worst = vim.log.levels.INFO
  for _, r in ipairs(shown) do
    if r.state == "failed" or r.state == "timed_out" then worst = vim.log.levels.ERROR end
  end
  if #shown == 1 then
    vim.notify("(proctor) " .. H.ended_line(shown[1]), worst)
    return
  end
  local by = {}
  for _, r in ipairs(shown) do
    by[r.state] = (by[r.state] or 0) + 1
  end
  local parts = {}
  for _, st in ipairs({ "failed", "timed_out", "canceled", "completed" }) do
    if by[st] then
      parts[#parts + 1] = by[st] .. " " .. (st == "timed_out" and "timed out" or st)
    end
  end
  local lines =
    { string.format("(proctor) %d executions ended: %s", #shown, table.concat(parts, ", ")) }
  -- failures first, then the rest, newest first
  table.sort(shown, function(a, b)
    local ba = a.state == "failed" or a.state == "timed_out"
    local bb = b.state == "failed" or b.state == "timed_out"
    if ba ~= bb then return ba end
    return a.id > b.id
  end)
  for i = 1, math.min(#shown, H.NOTIFY_LINES) do
    lines[#lines + 1] = "  " .. H.ended_line(shown[i])
  end
  if #shown > H.NOTIFY_LINES then
    lines[#lines + 1] = string.format("  … and %d more: :Proctor list", #shown - H.NOTIFY_LINES)
  end
  vim.notify(table.concat(lines, "\n"), worst)
end

-- "#5 build failed: exit 2 after 3.2 s — last line of output · :Proctor open 5"
function H.ended_line(r)
  local text =
    string.format("#%d %s %s", r.id, util.first_line(util.title(r)), util.describe_end(r))
  -- an extension's word on it first (tasks: the quickfix list it filled, as
  -- :make says it, "(1 of 3): …"), else the last line of output
  local last = H.summary(r.id) or H.last_line(r)
  if last then text = text .. " — " .. last end
  -- no hint when the console is on the screen already
  local console = H.ext.console
  if console and #console.api.windows(r.id) > 0 then return text end
  return text .. " · :Proctor open " .. r.id
end

-- The last non-empty line the execution printed (a failure: stderr first), at most 80 columns.
function H.last_line(r)
  local eng = engine.current()
  if not eng or not r.bytes then return nil end
  local streams = r.pty and { "pty" }
    or (r.state == "completed" and { "stdout", "stderr" } or { "stderr", "stdout" })
  for _, s in ipairs(streams) do
    local n = r.bytes[s] or 0
    if n > 0 then
      local data = eng:read(r.id, s, math.max(0, n - 4096), 4096)
      local lines = data and util.plain_lines(data) or {}
      for i = #lines, 1, -1 do
        local l = vim.trim(lines[i])
        if l ~= "" then
          if vim.fn.strchars(l) > 80 then l = vim.fn.strcharpart(l, 0, 79) .. "…" end
          return l
        end
      end
    end
  end
  return nil
end

M.Execution = Execution

return M
