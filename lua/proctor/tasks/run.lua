--- proctor.tasks.run — the task run: the executions one task run makes over
--- time (a restart after a crash, a restart on change), each linked to the one
--- before and shown in the same console window (|proctor-tasks|).
---
---   local r = TaskRun.new(spec, opts)   -- spec: run{} fields; opts: task options
---   r:start(true)                       -- its first execution (proctor.Execution)
---   r:restart({ "a.c" })                -- cancel the live one, start again
---   r:on_end(id, ev)                    -- an execution of it reached a terminal state
---   r:settle(ok, why)                   -- succeeded (completed, or ready) or failed: waiters run
---   r:info(id)                          -- { task, prev_id, next_id, ready, restarts, watching, ... }
---
--- Status (one field; ARCHITECTURE.md has the table of its moves):
---
---   running          its current execution is live (or about to start)
---   restart_pending  a restart canceled the current one; the next starts when it ended
---   backoff          the current one ended; the restart trait starts the next after a delay
---   stopped          a user (or a failed dependency) canceled it: nothing restarts it on its own
---   done             its current one ended and nothing will start another on its own
---
--- What a run does besides this (restart policy, ready pattern, dependencies,
--- diagnostics, watch) are traits: small files in tasks/traits/, each
--- `{ option, check, prepare, on_start, on_restart, on_stop, on_end }` (each
--- optional), called in `M.TRAITS` order under pcall.
--- This file names none of them. Requiring it has no side effects.

local M = {}
local H = {}

local console = require("proctor.console")
local proctor = require("proctor")
local engine = require("proctor.engine")
local util = require("proctor.util")

--- The traits, in the order their hooks run. A new behaviour is one file
--- under tasks/traits/ and one name here.
M.TRAITS = { "after", "diagnostics", "ready", "restart", "watch" }

---@alias proctor.TaskRunStatus "running"|"backoff"|"restart_pending"|"stopped"|"done"

---@class proctor.TaskRun
---@field gid integer
---@field name string the task's name (or label, or command)
---@field spec table the run{} fields each execution starts with
---@field opts table the task options (checked by the traits)
---@field ids integer[] its executions, oldest first
---@field current integer|nil the newest one
---@field status proctor.TaskRunStatus
---@field restarts integer executions the restart policy started
---@field ready table<integer, true> executions whose ready condition was met
---@field ready_at table<integer, integer> when (wall clock, ms) each became ready
---@field watching boolean a change restarts it (set by the watch trait)
---@field settled boolean|nil nil until it succeeded (true) or failed (false)
---@field settled_why string|nil
---@field waiters fun(ok: boolean, why: string|nil)[] called once when it settles
---@field changes string[]|nil the paths that made the last restart
---@field trait table<string, table> each trait's own state
local TaskRun = {}
TaskRun.__index = TaskRun

H.next_gid = 0
H.traits = nil -- the loaded traits: { { name, mod } }

--- The loaded traits, in M.TRAITS order (loaded again when the list grew).
---@return { name: string, mod: table }[]
function M.traits()
  if not H.traits or #H.traits ~= #M.TRAITS then
    H.traits = {}
    for _, name in ipairs(M.TRAITS) do
      H.traits[#H.traits + 1] = { name = name, mod = require("proctor.tasks.traits." .. name) }
    end
  end
  return H.traits
end

--- The task options every trait owns: { field = "type,type" }.
---@return table<string, string>
function M.fields()
  local out = {}
  for _, t in ipairs(M.traits()) do
    for k, v in pairs(t.mod.option or {}) do
      out[k] = v
    end
  end
  return out
end

--- Check (and normalise in place) the task options: each trait's `check`.
--- Returns nil or the first problem.
---@param opts table
---@param spec table the run{} fields
---@return string|nil err
function M.check(opts, spec)
  for _, t in ipairs(M.traits()) do
    if t.mod.check then
      local err = t.mod.check(opts, spec)
      if err then return err end
    end
  end
  return nil
end

--- A new task run (not started).
---@param spec table run{} fields
---@param opts table task options (checked)
---@return proctor.TaskRun
function M.new(spec, opts)
  H.next_gid = H.next_gid + 1
  local name = opts.name or spec.label or util.cmd_string(spec.cmd)
  if spec.label == nil and opts.name then spec.label = opts.name end
  return setmetatable({
    gid = H.next_gid,
    name = name,
    spec = spec,
    opts = opts,
    ids = {},
    restarts = 0,
    status = "running",
    ready = {},
    ready_at = {},
    watching = false,
    waiters = {},
    trait = {},
  }, TaskRun)
end

--- Start the next execution (first: the run's first one). A restart is shown
--- where the one before was (its pty sized from that window). Returns the
--- execution, or nil, err, name.
---@param first boolean
---@return proctor.Execution|nil ex, string|nil err, string|nil name
function TaskRun:start(first)
  local s = {}
  for k, v in pairs(self.spec) do
    s[k] = v
  end
  local rest = function() end
  if not first then
    s.open = nil
    if self.current then
      s.open, rest = console.handover(self.current, { all_tabs = true, enter = false })
    end
  end
  self:each("prepare", s, first)
  local ex, err, ename = proctor._run(s)
  if not ex then
    if not first then
      util.notify(("task %s: could not start again: %s"):format(self.name, tostring(err)))
      self.status = "done"
      self:settle(false, "start failed")
    end
    return nil, err, ename
  end
  local id = ex.id
  self.current = id
  self.ids[#self.ids + 1] = id
  self.status = "running"
  self.settled = nil
  H.index(self, id)
  rest(id)
  self:each("on_start", id, first, s)
  return ex
end

--- Start again: cancel the live execution (normal grace) and start a new one
--- in the same console window once it ended; at once when none is live.
---@param why string[]|nil the changed paths
function TaskRun:restart(why)
  self:each("on_restart")
  self.changes = why
  if self.current and not engine.is_done(self.current) then
    if self.status == "restart_pending" then return end -- a burst: one restart
    self.status = "restart_pending"
    proctor.cancel(self.current)
    return
  end
  self:start(false)
end

--- Execution `id` of this run reached a terminal state (event `ev`).
---@param id integer
---@param ev table the state event
function TaskRun:on_end(id, ev)
  if id ~= self.current then return end
  if self.status == "restart_pending" then
    self:start(false)
    return
  end
  if ev.state == "canceled" then -- by the user, or its dependency failed: no trait restarts it
    self.status = "stopped"
    return self:settle(false, ev.reason or "canceled")
  end
  local ok = ev.state == "completed"
  if ok then self:settle(true, "completed") end
  if self.status ~= "stopped" then self.status = "done" end
  self:each("on_end", id, ev)
  if self.status ~= "backoff" and not ok then self:settle(false, ev.state) end
end

--- A user canceled execution `id` (the cancel went through): a run waiting to
--- restart stops; a live one ends without its restart policy.
---@param id integer
function TaskRun:on_cancel(id)
  if self.current ~= id then return end
  if self.status == "backoff" then
    self.status = "stopped"
    self:each("on_stop")
    self:settle(false, "canceled")
  elseif self.status == "running" then
    self.status = "stopped"
  end
end

--- Succeeded (completed, or ready) or failed: call the waiters once.
---@param ok boolean
---@param why string|nil
function TaskRun:settle(ok, why)
  if self.settled ~= nil then return end
  self.settled, self.settled_why = ok, why
  local w = self.waiters
  self.waiters = {}
  for _, fn in ipairs(w) do
    local okc, e = pcall(fn, ok, why)
    if not okc then util.notify("task " .. self.name .. ": " .. tostring(e)) end
  end
end

--- fn(ok, why) once it settled (now, if it has).
---@param fn fun(ok: boolean, why: string|nil)
function TaskRun:on_settle(fn)
  if self.settled ~= nil then return fn(self.settled, self.settled_why) end
  table.insert(self.waiters, fn)
end

--- Is it live or waiting to start again?
---@return boolean
function TaskRun:live() return self.status ~= "done" and self.status ~= "stopped" end

--- What the run knows of its execution `id`: { task, prev_id, next_id, ready,
--- restarts, watching, group_ids, state }.
---@param id integer
---@return table
function TaskRun:info(id)
  local out = {
    task = self.name,
    restarts = self.restarts,
    ready = self.ready[id] or nil,
    group_ids = vim.deepcopy(self.ids),
    state = self.status,
    watching = self.watching,
  }
  for i, x in ipairs(self.ids) do
    if x == id then
      out.prev_id, out.next_id = self.ids[i - 1], self.ids[i + 1]
    end
  end
  return out
end

--- Call hook `hook` of every trait (under pcall: a trait's error is reported
--- once and never breaks the run).
---@param hook string
function TaskRun:each(hook, ...)
  for _, t in ipairs(M.traits()) do
    local fn = t.mod[hook]
    if fn then
      local ok, e = pcall(fn, self, ...)
      if not ok then H.report(t.name, hook, e) end
    end
  end
end

-- Helpers --------------------------------------------------------------------------

H.by_id = {} -- execution id -> its run (set by M.index)
H.reported = {}

--- The run execution `id` belongs to.
---@param id integer
---@return proctor.TaskRun|nil
function M.of(id) return H.by_id[id] end

--- Forget execution `id` (deleted): its run keeps its other ids.
---@param id integer
function M.forget(id)
  local r = H.by_id[id]
  if r and r.current ~= id then H.by_id[id] = nil end
end

function H.index(r, id) H.by_id[id] = r end

--- Make `r` the run of `id` (an execution adopted as a task run).
---@param r proctor.TaskRun
---@param id integer
function M.adopt(r, id)
  r.current = id
  r.ids = { id }
  H.index(r, id)
end

function H.report(name, hook, e)
  local msg = ("task trait %s (%s): %s"):format(name, hook, tostring(e))
  if H.reported[msg] then return end
  H.reported[msg] = true
  util.notify(msg)
end

M.TaskRun = TaskRun

return M
