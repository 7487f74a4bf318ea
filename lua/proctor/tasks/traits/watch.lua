--- proctor.tasks.traits.watch — `watch = true | { patterns, fs, debounce_ms,
--- root, ignore }`: a change restarts the run (|proctor-watch|).
---
--- A change is a write from this editor (BufWritePost) of a file under the
--- run's directory; with `fs = true` also a change on disk, except one made
--- while a watched run was going (its own outputs: a build's objects, a
--- file a task touches), one git ignores, or one under a build directory.

local M = {}
local H = {}

local files = require("proctor.tasks.watch")
local proctor = require("proctor")
local util = require("proctor.util")
local config = require("proctor.config")
local engine = require("proctor.engine")

M.option = { watch = "boolean,table" }

H.watched = {} -- run -> true while it watches

function M.check(opts)
  local w = opts.watch
  if type(w) ~= "table" then return end
  if w.patterns ~= nil and type(w.patterns) ~= "table" then
    return "'watch.patterns' must be a list of globs"
  end
  if w.debounce_ms ~= nil and (type(w.debounce_ms) ~= "number" or w.debounce_ms < 0) then
    return "'watch.debounce_ms' must be a number >= 0"
  end
  if w.fs ~= nil and type(w.fs) ~= "boolean" then return "'watch.fs' must be a boolean" end
end

function M.on_start(run, _, first)
  if first and run.opts.watch then
    local ok, err = M.set(run, true)
    if not ok then util.notify("watch: " .. tostring(err)) end
  end
end

--- Watch (on = true), stop (false) or toggle (nil) run `run`. Returns the new
--- state, or nil, err.
---@param run proctor.TaskRun
---@param on boolean|nil
---@return boolean|nil watching, string|nil err
function M.set(run, on)
  local s = run.trait.watch or {}
  run.trait.watch = s
  if on == nil then on = s.watcher == nil end
  if not on then
    if s.watcher then s.watcher.stop() end
    s.watcher = nil
    run.watching = false
    H.watched[run] = nil
    return false
  end
  if s.watcher then return true end
  local w = type(run.opts.watch) == "table" and run.opts.watch or {}
  local rec = run.current and proctor.record(run.current)
  local watcher, err = files.start({
    root = w.root or run.spec.cwd or (rec and rec.cwd) or vim.fn.getcwd(),
    patterns = w.patterns,
    debounce_ms = w.debounce_ms or config.get().task_defaults.debounce_ms,
    ignore = w.ignore,
    fs = w.fs,
    busy = M.busy,
  }, function(paths) run:restart(paths) end)
  if not watcher then return nil, err end
  s.watcher = watcher
  run.watching = true
  H.watched[run] = true
  return true
end

--- Stop every watch. Returns how many were stopped.
---@return integer
function M.stop_all()
  local n = 0
  for run in pairs(H.watched) do
    M.set(run, false)
    n = n + 1
  end
  return n
end

--- Was a watched run going at `ms` (wall clock, ms)? A file written then is
--- taken for an output of it.
---@param ms integer
---@return boolean
function M.busy(ms)
  for run in pairs(H.watched) do
    for i = #run.ids, math.max(1, #run.ids - 1), -1 do
      local id = run.ids[i]
      local eng = engine.current()
      local rec = eng and eng:get(id)
      -- from its creation, not its start: the engine stamps started_at when
      -- the shepherd reports the spawn, and the process may have written by
      -- then (a file's mtime is also the kernel's coarse clock, a tick behind)
      local from = rec and (rec.created_at or rec.started_at)
      if from and ms >= from and (rec.ended_at == nil or ms <= rec.ended_at) then return true end
    end
  end
  return false
end

return M
