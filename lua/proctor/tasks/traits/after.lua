--- proctor.tasks.traits.after — `after = { "task name" | id, ... }`: the run's
--- first execution is held until every dependency succeeded (completed, or
--- ready), and canceled ("dependency_failed") when one failed (|proctor-after|).
--- A dependency named and not running is started.

local M = {}

local engine = require("proctor.engine")
local util = require("proctor.util")

M.option = { after = "table,string,number" }

function M.check(opts)
  if opts.after ~= nil and type(opts.after) ~= "table" then opts.after = { opts.after } end
  for _, a in ipairs(opts.after or {}) do
    if type(a) ~= "string" and type(a) ~= "number" then
      return "'after' entries must be task names or ids"
    end
  end
end

function M.prepare(run, s, first)
  if first and run.opts.after then s.hold = true end
end

function M.on_start(run, id, first)
  if not (first and run.opts.after) then return end
  local tasks = require("proctor.tasks")
  local after = run.opts.after
  local left = #after
  local failed = false
  local function one(dep, ok, why)
    if failed then return end
    if not ok then
      failed = true
      local eng = engine.current()
      if eng then eng:cancel(id, { reason = "dependency_failed" }) end
      util.notify(
        ("#%d %s: dependency %s %s"):format(id, run.name, tostring(dep), why or "failed"),
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
      tasks.when_settled(dep, function(ok, why) one("#" .. dep, ok, ok and nil or why) end)
    else
      local live = tasks.live_id(dep)
      if live then
        tasks.when_settled(live, function(ok, why) one(dep, ok, ok and nil or why) end)
      else
        -- a dependency asks nothing: its parameters' last values, else their defaults
        local o = { cwd = run.spec.cwd, set = { open = false }, prompt = false }
        tasks.run_task(dep, o, function(ex, err)
          if not ex then
            return one(dep, false, "could not start: " .. tostring(err):gsub("^E%u+: ", ""))
          end
          tasks.when_settled(ex.id, function(ok, why) one(dep, ok, ok and nil or why) end)
        end)
      end
    end
  end
end

return M
