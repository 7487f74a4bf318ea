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
---
--- A chain is a kind of target of proctor.actions (`c3`: `:Proctor cancel c3`,
--- `:Proctor open c3` shows its running member) and a row provider of the
--- list view (a row `c3` above the executions; members' titles say `[c3]`),
--- both added by the first sequence(). Requiring this module has no side effects.

local M = {}
local H = {}

local console = require("proctor.console")
local list = require("proctor.list")
local kinds = require("proctor.kinds")
local proctor = require("proctor")
local config = require("proctor.config")
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
  if type(steps) ~= "table" or #steps == 0 then
    return nil, "EINVAL: a sequence needs a list of steps", "EINVAL"
  end
  H.next_id = H.next_id + 1
  local c = setmetatable({
    id = H.next_id,
    kind = "chain",
    state = "waiting",
    steps = {},
    step = 0,
    opts = opts,
    cwd = opts.cwd,
    created_at = util.now_ms(),
    waiters = {},
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
        return nil,
          ("EINVAL: step %d: a task name or a definition with cmd is needed"):format(i),
          "EINVAL"
      end
    end
    names[#names + 1] = #label > 1 and ("(" .. table.concat(label, " | ") .. ")") or label[1]
    c.steps[i] = step
  end
  c.name = opts.name or table.concat(names, " → ")
  H.register()
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
  for i, st in ipairs(self.steps) do
    steps[i] = vim.deepcopy(st.ids)
  end
  return {
    id = self.id,
    kind = "chain",
    name = self.name,
    state = self.state,
    reason = self.reason,
    step = self.step,
    steps = steps,
    created_at = self.created_at,
    ended_at = self.ended_at,
    failed_id = self.failed_id,
  }
end

--- Cancel: the running member(s) are canceled with the normal grace (force:
--- SIGKILL at once), the members not started are canceled with reason "skipped".
---@param force boolean|nil
---@return string "canceling" | "already_terminal"
function Chain:cancel(force)
  if H.terminal(self) then return "already_terminal" end
  self.canceling = true
  local eng = engine.current()
  for i, st in ipairs(self.steps) do
    for _, id in ipairs(st.ids) do
      if i == self.step then
        proctor.cancel(id, force)
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
  if not ok then
    return nil, "ETIMEDOUT: chain " .. self.id .. " still " .. self.state, "ETIMEDOUT"
  end
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
      local ex, err = proctor._run(spec)
      if not ex then
        c.state = "running"
        c.step = i
        return H.fail(c, nil, ("step %d: %s"):format(i, tostring(err)))
      end
      st.ids[k] = ex.id
      c.member_names = c.member_names or {}
      c.member_names[ex.id] = def.name or def.label or util.cmd_string(def.cmd)
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
  if state == "failed" and c.failed_id then H.focus_failed(c) end
  if state == "failed" and config.get().notify ~= "never" then
    util.notify(H.failed_text(c), vim.log.levels.ERROR)
  end
end

-- "ci failed at npm run lint: exit 1" (a member failed), or why the chain
-- failed before a member ran ("ci failed: no task named …").
function H.failed_text(c)
  local id = c.failed_id
  local rec = id and proctor.record(id)
  if not rec then return ("%s failed%s"):format(c.name, c.reason and (": " .. c.reason) or "") end
  local what = util.state_text(rec):gsub("^failed: ", "")
  return ("%s failed at %s: %s"):format(c.name, c.member_names[id] or util.title(rec), what)
end

-- A chain shown in a window (`open`) shows the failed member there and moves
-- the cursor to it.
function H.focus_failed(c)
  if not c.shown then return end
  if c.shown ~= c.failed_id then H.show(c, c.failed_id) end
  local wins = console.windows(c.failed_id)
  if wins[1] then pcall(vim.api.nvim_set_current_win, wins[1]) end
end

-- Show the console of `id` where the chain's previous member was shown (or open it).
function H.show(c, id)
  local open, rest
  if c.shown then
    open, rest = console.handover(c.shown, { all_tabs = true, enter = false })
  end
  if open then
    pcall(proctor.open, id, open)
    rest(id)
  else
    pcall(proctor.open, id, type(c.opts.open) == "table" and c.opts.open or nil)
  end
  c.shown = id
end

function H.refresh_list()
  if list.refresh then pcall(list.refresh) end
end

--- The chain an execution belongs to, if any.
function M.of(id) return H.member_of and H.member_of[id] or nil end

-- The chain as a target of proctor.actions.
function H.target(c)
  return { kind = "chain", id = c.id, word = "c" .. c.id, live = not H.terminal(c) }
end

-- The member a person means by the chain: one of the running step, else the
-- one that failed, else the last one that ran.
function H.member(c)
  local st = c.steps[math.max(c.step, 1)]
  if c.failed_id then return c.failed_id end
  for _, id in ipairs(st and st.ids or {}) do
    if not engine.is_done(id) then return id end
  end
  return st and st.ids[1]
end

-- The chain's lines of :Proctor info.
function H.info_lines(c)
  local lines = {
    string.format("proctor chain c%d  %s", c.id, c.name),
    string.format("  state:     %s%s", c.state, c.reason and (" (" .. c.reason .. ")") or ""),
  }
  for i, st in ipairs(c.steps) do
    local ids = {}
    for k, id in ipairs(st.ids) do
      local rec = engine.current() and engine.current():get(id)
      ids[k] = "#" .. id .. (rec and (" " .. engine.state_text(rec)) or "")
    end
    lines[#lines + 1] =
      string.format("  step %d%s %s", i, i == c.step and "*:" or ": ", table.concat(ids, ", "))
  end
  return lines
end

-- Chains become targets of the actions and rows of the list (once).
function H.register()
  if H.registered then return end
  H.registered = true
  local function chain_of(t)
    local c = H.chains[t.id]
    if not c then util.die("no such chain " .. t.word) end
    return c
  end
  kinds.add("chain", {
    desc = "chain",
    parse = function(word)
      local n = tonumber(word:match("^c(%d+)$"))
      return n and H.chains[n] and H.target(H.chains[n]) or nil
    end,
    list = function()
      local out = {}
      for i = #H.order, 1, -1 do
        if H.chains[H.order[i]] then out[#out + 1] = H.target(H.chains[H.order[i]]) end
      end
      return out
    end,
    actions = {
      cancel = function(t, opts) return H.cancel_action(chain_of(t), false, opts) end,
      kill = function(t, opts) return H.cancel_action(chain_of(t), true, opts) end,
      open = function(t, opts, run)
        local id = H.member(chain_of(t))
        if not id then util.die(t.word .. " has no member yet") end
        return run("open", id, opts)
      end,
      info = function(t)
        local lines = H.info_lines(chain_of(t))
        vim.api.nvim_echo({ { table.concat(lines, "\n") } }, true, {})
        return lines
      end,
    },
  })
  list.add_rows("chain", {
    rows = function()
      local rows = {}
      for i = #H.order, 1, -1 do
        local c = H.chains[H.order[i]]
        if c then
          local done = c.state == "completed" and #c.steps or math.max(c.step - 1, 0)
          rows[#rows + 1] = {
            target = H.target(c),
            state = c.state,
            hl = c.state == "waiting" and "queued" or c.state,
            live = not H.terminal(c),
            failed = c.state == "failed",
            exit = done .. "/" .. #c.steps,
            duration_ms = (c.ended_at or util.now_ms()) - c.created_at,
            started_at = c.created_at,
            owner = "tasks",
            label = c.name,
            title = "chain: " .. c.name,
          }
        end
      end
      return rows
    end,
    annotate = function(rec)
      local c = M.of(rec.id)
      return c and ("[c" .. c.id .. "] ") or nil
    end,
  })
end

function H.cancel_action(c, force, opts)
  local res = c:cancel(force)
  if res == "already_terminal" then
    util.notify(
      string.format("chain c%d has already ended (%s)", c.id, c.state),
      vim.log.levels.WARN
    )
  elseif not (opts and opts.quiet) then
    util.notify(
      string.format("%s chain c%d (%s)", force and "killing" or "canceling", c.id, c.name),
      vim.log.levels.INFO
    )
  end
  H.refresh_list()
  return res
end

M.Chain = Chain

return M
