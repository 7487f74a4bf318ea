--- proctor.tasks.chain — sequences: steps run one after the other as one
--- chain with its own record (|proctor.sequence()|).
---
---   local c = chain.sequence({ "make build", { parallel = { "make lint", "make test" } }, "make deploy" })
---   c:cancel()   -- cancels the running member(s) (normal grace), skips the rest
---   c:record()   -- { id, kind = "chain", name, state, reason, steps = { { ids } }, ... }
---
--- Every member exists from the start as a held execution (queued, visible in
--- the list and over RPC); a step's members are released together and the
--- next step starts when all of them succeeded. A member that fails ends the
--- chain `failed`; the members not run yet end `canceled` with reason
--- "dependency_failed" (or "skipped" when the chain was canceled).
--- Requiring this module has no side effects.

local M = {}
local H = {}

local engine = require("proctor.engine")
local util = require("proctor.util")

H.chains = {} -- id -> chain
H.order = {}
H.next_id = 0

---@class proctor.Chain
local Chain = {}
Chain.__index = Chain

--- Run `steps` in order. A step is a task name, a task definition (a table
--- with `cmd`), or `{ parallel = { step, ... } }`. opts: name, cwd (where
--- names are looked up), open (show each member's console in one window as
--- it starts), on_exit(chain_record).
---@return proctor.Chain|nil chain, string|nil err, string|nil name
function M.sequence(steps, opts)
  opts = opts or {}
  if type(steps) ~= "table" or #steps == 0 then return nil, "EINVAL: a sequence needs a list of steps", "EINVAL" end
  H.next_id = H.next_id + 1
  local c = setmetatable({
    id = H.next_id, kind = "chain", state = "waiting", steps = {}, step = 0, opts = opts, cwd = opts.cwd,
    created_at = util.now_ms(), waiters = {},
  }, Chain)
  local names = {}
  for i, st in ipairs(steps) do
    local items = type(st) == "table" and st.parallel or { st }
    if type(items) ~= "table" or #items == 0 then
      return nil, ("EINVAL: step %d: 'parallel' needs a list of steps"):format(i), "EINVAL"
    end
    local step = { items = items, ids = {} }
    local label = {}
    for _, it in ipairs(items) do
      if type(it) == "string" then
        label[#label + 1] = it
      elseif type(it) == "table" and it.cmd then
        label[#label + 1] = it.name or it.label or util.cmd_string(it.cmd)
      else
        return nil, ("EINVAL: step %d: a task name or a definition with cmd is needed"):format(i), "EINVAL"
      end
    end
    names[#names + 1] = #label > 1 and ("(" .. table.concat(label, " | ") .. ")") or label[1]
    c.steps[i] = step
  end
  c.name = opts.name or table.concat(names, " → ")
  H.chains[c.id] = c
  H.order[#H.order + 1] = c.id
  H.resolve(c)
  H.refresh_list()
  return c
end

--- Every chain record, oldest first.
function M.records()
  local out = {}
  for _, id in ipairs(H.order) do
    if H.chains[id] then out[#out + 1] = H.chains[id]:record() end
  end
  return out
end

--- The chain with this id.
---@return proctor.Chain|nil
function M.get(id) return H.chains[id] end

--- The record: { id, kind = "chain", name, state, reason, step, steps = { { ids } },
--- created_at, ended_at }. state: waiting (members being made), running,
--- completed, failed, canceled.
function Chain:record()
  local steps = {}
  for i, st in ipairs(self.steps) do steps[i] = vim.deepcopy(st.ids) end
  return { id = self.id, kind = "chain", name = self.name, state = self.state, reason = self.reason, step = self.step,
    steps = steps, created_at = self.created_at, ended_at = self.ended_at, failed_id = self.failed_id }
end

--- Cancel: the running member(s) are canceled with the normal grace, the
--- members not started are canceled with reason "skipped".
---@return string "canceling" | "already_terminal"
function Chain:cancel()
  if H.terminal(self) then return "already_terminal" end
  self.canceling = true
  local eng = engine.current()
  for i, st in ipairs(self.steps) do
    for _, id in ipairs(st.ids) do
      if i == self.step then
        require("proctor").cancel(id)
      elseif i > self.step and eng then
        eng:cancel(id, { reason = "skipped" })
      end
    end
  end
  if self.state == "waiting" then H.finish(self, "canceled", "canceled") end
  return "canceling"
end

--- Block (processing events) until the chain ended or timeout_ms passed.
function Chain:wait(timeout_ms)
  local ok = vim.wait(timeout_ms or 2 ^ 31 - 1, function()
    engine.pump()
    return H.terminal(self)
  end, 5)
  if not ok then return nil, "ETIMEDOUT: chain " .. self.id .. " still " .. self.state, "ETIMEDOUT" end
  return self:record()
end

-- Helpers ------------------------------------------------------------------------

function H.terminal(c) return c.state == "completed" or c.state == "failed" or c.state == "canceled" end

-- Look up every step's definitions, then make the members (held) and start.
function H.resolve(c)
  local left = 1 -- until every lookup was asked for (answers may come at once)
  local defs = {}
  local failed
  local function one_done()
    left = left - 1
    if left > 0 then return end
    if failed or c.canceling then
      if not H.terminal(c) then H.finish(c, "failed", failed) end
      return
    end
    H.make_members(c, defs)
  end
  for i, st in ipairs(c.steps) do
    defs[i] = {}
    for k, it in ipairs(st.items) do
      if type(it) == "table" then
        defs[i][k] = it
      else
        left = left + 1
        require("proctor.tasks").find(it, { cwd = c.cwd }, function(def, err)
          if not def then failed = failed or err end
          defs[i][k] = def
          one_done()
        end)
      end
    end
  end
  one_done()
end

function H.make_members(c, defs)
  for i, st in ipairs(c.steps) do
    for k, def in ipairs(defs[i]) do
      local spec = vim.deepcopy(def)
      spec.desc, spec.source = nil, nil
      spec.after, spec.watch = nil, nil -- the chain's order is the dependency; members run once
      spec.hold = true
      spec.open = nil
      spec.cwd = spec.cwd or c.cwd
      local ex, err = require("proctor").run(spec)
      if not ex then
        c.state = "running"
        c.step = i
        return H.fail(c, nil, ("step %d: %s"):format(i, tostring(err)))
      end
      st.ids[k] = ex.id
      H.member_of = H.member_of or {}
      H.member_of[ex.id] = c
    end
  end
  c.state = "running"
  H.next_step(c)
end

function H.next_step(c)
  if c.canceling then return H.finish(c, "canceled", "canceled") end
  c.step = c.step + 1
  local st = c.steps[c.step]
  if not st then return H.finish(c, "completed", nil) end
  local eng = engine.current()
  local left = #st.ids
  local over = false
  for k, id in ipairs(st.ids) do
    if eng then eng:release(id) end
    if k == 1 and c.opts.open then H.show(c, id) end
    require("proctor.tasks").when_settled(id, function(ok, why)
      if over then return end
      if not ok then
        over = true
        return H.fail(c, id, why)
      end
      left = left - 1
      if left == 0 then
        over = true
        H.next_step(c)
      end
    end)
  end
  H.refresh_list()
end

-- A member failed (or was canceled): the rest is not run.
function H.fail(c, id, why)
  local eng = engine.current()
  if c.canceling then
    return H.after_running(c, function() H.finish(c, "canceled", "canceled") end)
  end
  for i = c.step + 1, #c.steps do
    for _, x in ipairs(c.steps[i].ids) do
      if eng then eng:cancel(x, { reason = "dependency_failed" }) end
    end
  end
  c.failed_id = id
  -- parallel members still running are left to finish; the chain waits for them
  H.after_running(c, function() H.finish(c, "failed", why and tostring(why) or "step_failed") end)
end

-- Call fn once no member of the current step is live.
function H.after_running(c, fn)
  local st = c.steps[c.step]
  local live = {}
  for _, id in ipairs(st and st.ids or {}) do
    if not engine.is_done(id) then live[#live + 1] = id end
  end
  if #live == 0 then return fn() end
  local left = #live
  for _, id in ipairs(live) do
    require("proctor.tasks").when_settled(id, function()
      left = left - 1
      if left == 0 then fn() end
    end)
  end
end

function H.finish(c, state, reason)
  if H.terminal(c) then return end
  c.state, c.reason, c.ended_at = state, reason, util.now_ms()
  H.refresh_list()
  if c.opts.on_exit then
    local ok, e = pcall(c.opts.on_exit, c:record())
    if not ok then util.notify("sequence on_exit: " .. tostring(e)) end
  end
  if state == "failed" and require("proctor.config").get().notify ~= "never" then
    util.notify(("chain %d %s failed%s"):format(c.id, c.name, reason and (": " .. reason) or ""), vim.log.levels.ERROR)
  end
end

-- Show the console of `id` where the chain's previous member was shown (or open it).
function H.show(c, id)
  local open, rest
  if c.shown then open, rest = require("proctor.console").handover(c.shown, { all_tabs = true, enter = false }) end
  if open then
    pcall(require("proctor").open, id, open)
    rest(id)
  else
    pcall(require("proctor").open, id, type(c.opts.open) == "table" and c.opts.open or nil)
  end
  c.shown = id
end

function H.refresh_list()
  local ok, list = pcall(require, "proctor.list")
  if ok and list.refresh then pcall(list.refresh) end
end

--- The chain an execution belongs to, if any.
function M.of(id) return H.member_of and H.member_of[id] or nil end

M.Chain = Chain
M._H = H

return M
