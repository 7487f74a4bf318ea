--- proctor.tasks.traits.restart — the restart policy of a task run
--- (|proctor-restart-policy|): after an end the policy restarts, the next
--- execution starts after a backoff; too many restarts in a row and it gives up.
---
--- The policy is the one the core's supervised workers follow (csrc/engine/worker.c):
---   healthy   a success, or a run that was ready (its ready pattern matched;
---             without one: started) for healthy_ms, resets the count
---   limit     count >= max_restarts: give up (max_restarts = 0: never restart)
---   delay     min(backoff_ms * 2^count, backoff_max_ms); then count + 1
--- M.decide holds it as a pure function, tested against the worker's cases.

local M = {}

local proctor = require("proctor")
local config = require("proctor.config")
local compat = require("proctor.compat")
local util = require("proctor.util")
local uv = compat.uv

M.option = {
  restart = "string",
  max_restarts = "number",
  backoff_ms = "number",
  backoff_max_ms = "number",
  healthy_ms = "number",
}

M.POLICIES = { "never", "on-failure", "always" }

--- The policy in one function. p: { restart, max_restarts, backoff_ms,
--- backoff_max_ms }; streak: restarts in a row so far; ended: { ok = the run
--- succeeded, healthy = it was ready for healthy_ms }. Returns what to do and
--- the new streak: "stop" (the policy does not restart), "give_up" (the limit
--- was reached), or "restart" with the delay in ms.
---@return "stop"|"give_up"|"restart" verdict, integer streak, integer|nil delay_ms
function M.decide(p, streak, ended)
  local again = p.restart == "always" or (p.restart == "on-failure" and not ended.ok)
  if not again then return "stop", streak end
  if ended.ok or ended.healthy then streak = 0 end
  if streak >= p.max_restarts then return "give_up", streak end
  local delay = math.min(p.backoff_ms * 2 ^ streak, p.backoff_max_ms)
  return "restart", streak + 1, math.floor(delay)
end

function M.check(opts)
  if opts.restart ~= nil and not vim.tbl_contains(M.POLICIES, opts.restart) then
    return ("'restart' must be one of %s, got %q"):format(
      table.concat(M.POLICIES, ", "),
      opts.restart
    )
  end
  for _, k in ipairs({ "max_restarts", "backoff_ms", "backoff_max_ms", "healthy_ms" }) do
    local v = opts[k]
    if v ~= nil and (v < 0 or v ~= math.floor(v)) then
      return ("'%s' must be an integer >= 0"):format(k)
    end
  end
end

function M.on_start(run) run.trait.restart = run.trait.restart or { streak = 0 } end

-- A restart on change (or :Proctor restart) ends a backoff.
function M.on_restart(run)
  local s = run.trait.restart
  if s and s.timer then s.timer:stop() end
end

M.on_stop = M.on_restart

function M.on_end(run, id, ev)
  if run.status == "stopped" then return end
  local s = run.trait.restart
  local d = config.get().task_defaults
  local o = run.opts
  local p = {
    restart = o.restart or "never",
    max_restarts = o.max_restarts or d.max_restarts,
    backoff_ms = o.backoff_ms or d.backoff_ms,
    backoff_max_ms = o.backoff_max_ms or d.backoff_max_ms,
  }
  local healthy_ms = o.healthy_ms or d.healthy_ms
  -- healthy from the moment it was ready; a run without a ready pattern is ready when it starts
  local rec = proctor.record(id)
  local healthy
  if o.ready then
    local since = run.ready_at[id]
    healthy = since ~= nil and ((rec and rec.ended_at) or util.now_ms()) - since >= healthy_ms
  else
    healthy = rec ~= nil and (rec.duration_ms or 0) >= healthy_ms
  end
  local verdict, streak, delay =
    M.decide(p, s.streak, { ok = ev.state == "completed", healthy = healthy })
  s.streak = streak
  if verdict == "stop" then return end
  if verdict == "give_up" then
    util.notify(
      ("task %s: gave up after %d restarts in a row (#%d %s)"):format(
        run.name,
        p.max_restarts,
        id,
        util.describe_end(ev)
      )
    )
    return run:settle(false, "max_restarts")
  end
  run.status = "backoff"
  run.restarts = run.restarts + 1
  s.timer = s.timer or uv.new_timer()
  -- A timer counts from the loop's cached time, taken when this iteration of
  -- the loop began: on a busy editor that is many ms before the end was seen,
  -- and the restart came that much early (131 ms after a 150 ms backoff).
  uv.update_time()
  s.timer:start(
    delay,
    0,
    vim.schedule_wrap(function()
      if run.status ~= "backoff" then return end
      run:start(false)
    end)
  )
end

return M
