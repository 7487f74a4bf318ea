--- proctor.actions — everything a person does to executions, in one table.
---
--- Each entry is `{ desc, run(id, opts) }`. The console's keys, the list view's
--- keys and the :Proctor subcommands all go through M.call(), so an action
--- behaves, and fails, the same way wherever it was started:
---
---   :Proctor cancel 3 ──► commands (parse only) ──┐
---   <C-c> in a console ──► keymap ────────────────┼──► M.call("cancel", 3, opts) ──► entry.run(3, opts)
---   c in the list view ──► keymap ────────────────┘     a problem: one "(proctor) …" message
---
--- An entry also says how :Proctor spells it (`command`, see proctor.Action),
--- so a new subcommand is one entry here and nothing else. Requiring this
--- module has no side effects.

local M = {}
local H = {}

local util = require("proctor.util")
local engine = require("proctor.engine")
local die, check, strip = util.die, util.check, util.strip

---@class proctor.Action
---@field desc string what it does, as the keys' help and the key tables of the help file say it
---@field run fun(id: integer|nil, opts: table): any
---@field id "required"|"optional"|nil required: an execution is needed (given, else the one
---   under the cursor, else the fallback below); optional: used when given; nil: takes none
---@field fallback "recent"|nil with no id and none under the cursor: "recent" takes the most
---   recent execution
---@field want "live"|"done"|nil the executions it applies to (completion offers these): live
---   (queued, starting, running), done (ended); nil: any
---@field command proctor.ActionCommand|nil how :Proctor spells it (nil: not a subcommand)

---@class proctor.ActionCommand
---@field args "id"|"text"|"cmd"|"none" what follows the subcommand: [id]; [id] {text};
---   [options] {cmd}; nothing
---@field name string|nil the subcommand (default: the action's name)
---@field bang string|nil the action `:Proctor {name}!` runs instead

--- The actions, by name.
---@type table<string, proctor.Action>
M.actions = {}
local A = M.actions

--- Action names in the order the help and the key lists show them; actions
--- not named here follow, by name.
M.ORDER = { "run", "list", "open", "input", "cancel", "kill", "delete", "purge", "rerun", "text", "qf", "info",
  "mcp", "refresh", "close" }

--- Every action name, in M.ORDER's order.
---@return string[]
function M.names()
  local names = vim.tbl_keys(A)
  table.sort(names, function(a, b)
    local ra, rb = M.rank(a), M.rank(b)
    if ra ~= rb then return ra < rb end
    return a < b
  end)
  return names
end

--- Position of action `name` in M.ORDER (unknown ones after every known one).
---@return integer
function M.rank(name)
  for i, n in ipairs(M.ORDER) do
    if n == name then return i end
  end
  return #M.ORDER + 1
end

--- The bindings of key map `map` ({lhs} = action name | function | false) that
--- are set, in action order: list of { lhs, action, desc }.
---@param map table<string, string|function|false>
---@return {[1]: string, [2]: string|function, [3]: string}[]
function M.bindings(map)
  local list = {}
  for lhs, rhs in pairs(map or {}) do
    if rhs then
      local desc = type(rhs) == "string" and A[rhs] and A[rhs].desc or "(your function)"
      list[#list + 1] = { lhs, rhs, desc }
    end
  end
  table.sort(list, function(a, b)
    local ra = type(a[2]) == "string" and M.rank(a[2]) or math.huge
    local rb = type(b[2]) == "string" and M.rank(b[2]) or math.huge
    if ra ~= rb then return ra < rb end
    return a[1] < b[1]
  end)
  return list
end

--- Map the keys of `map` in buffer `buf` (Normal mode): each calls its action
--- with the execution `get_id()` returns, or, for a function, calls it with that id.
---@param buf integer
---@param map table<string, string|function|false>
---@param get_id fun(): integer|nil
---@param on_done fun(name: string)|nil called after an action ran (the list view refreshes)
function M.map_keys(buf, map, get_id, on_done)
  for _, b in ipairs(M.bindings(map)) do
    local lhs, rhs = b[1], b[2]
    local fn
    if type(rhs) == "function" then
      fn = function() util.protect(rhs, get_id()) end
    else
      fn = function()
        M.call(rhs, get_id())
        if on_done then on_done(rhs) end
      end
    end
    vim.keymap.set("n", lhs, fn, { buffer = buf, nowait = true, silent = true, desc = "proctor: " .. b[3] })
  end
end

--- Run action `name` for execution `id` (nil: the action finds it, see
--- proctor.Action). Returns what the action returned, or nil after showing one
--- `(proctor) …` message.
---@param name string
---@param id integer|nil
---@param opts table|nil
function M.call(name, id, opts)
  return util.protect(M.run, name, id, opts)
end

--- M.call() without the protection: a problem raises (util.die) for the caller to show.
---@param name string
---@param id integer|nil
---@param opts table|nil
function M.run(name, id, opts)
  local a = A[name]
  if not a then die("unknown action '" .. tostring(name) .. "'") end
  opts = opts or {}
  if a.id == "required" then
    if id == nil then
      id = M.default_id(a.fallback == "recent")
      if not id then die("no execution yet: give an id, or start one with :Proctor run {cmd}") end
    end
    H.known(id)
  elseif a.id == "optional" and id ~= nil then
    H.known(id)
  end
  return a.run(id, opts)
end

--- The id of the console or list line under the cursor, else (with
--- `fallback_recent`) the most recent execution.
---@param fallback_recent boolean|nil
---@return integer|nil
function M.default_id(fallback_recent)
  local id = require("proctor.console").id_of_buf(0)
  if id then return id end
  id = require("proctor.list").id_under_cursor()
  if id then return id end
  if not fallback_recent then return nil end
  local eng = engine.current()
  if not eng then return nil end
  local all = eng:list()
  return all[#all] and all[#all].id or nil
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
  run = function(_, opts)
    local ex, err = require("proctor").run(opts.spec)
    if not ex then die("run: " .. strip(err)) end
    return ex
  end,
}

A.list = {
  desc = "open the list view",
  command = { args = "none" },
  run = function()
    M.engine()
    return require("proctor.list").open()
  end,
}

A.open = {
  desc = "open the console",
  id = "required", fallback = "recent",
  command = { args = "id" },
  run = function(id, opts)
    check(require("proctor").open(id, opts.open and opts or nil))
    return id
  end,
}

A.input = {
  want = "live",
  desc = "send a line of input",
  id = "required", fallback = "recent",
  command = { args = "text" },
  run = function(id, opts)
    local text = opts.text
    if text == nil then
      vim.ui.input({ prompt = string.format("input to #%d: ", id) }, function(t)
        if t then M.call("input", id, { text = t }) end
      end)
      return
    end
    local ok, err = require("proctor").input(id, text .. "\n")
    if not ok then die("input: " .. strip(err)) end
    return true
  end,
}

A.cancel = {
  want = "live",
  desc = "cancel (SIGTERM, SIGKILL after the grace period)",
  id = "required", fallback = "recent",
  command = { args = "id", bang = "kill" },
  run = function(id, opts) return H.cancel(id, opts.force) end,
}

A.kill = {
  want = "live",
  desc = "kill (cancel!)",
  id = "required", fallback = "recent",
  run = function(id) return H.cancel(id, true) end,
}

A.delete = {
  want = "done",
  desc = "delete",
  id = "required",
  command = { args = "id" },
  run = function(id)
    local res, err = require("proctor").delete(id)
    if not res then die(strip(err)) end
    if res == "not_found" then die("no such execution " .. id) end
    if res == "active_process_conflict" then
      die(string.format("execution %d is still running: cancel it first (:Proctor cancel %d)", id, id))
    end
    return res
  end,
}

A.purge = {
  desc = "purge finished executions",
  command = { args = "none" },
  run = function()
    M.engine()
    local n, err = require("proctor").purge()
    if not n then die(strip(err)) end
    util.notify(string.format("purged %d finished execution%s", n, n == 1 and "" or "s"), vim.log.levels.INFO)
    return n
  end,
}

A.rerun = {
  desc = "rerun",
  id = "required", fallback = "recent",
  command = { args = "id" },
  run = function(id)
    local spec = engine.specs[id]
    local rec = engine.current():get(id)
    local new = {}
    if spec then
      for k, v in pairs(spec) do
        if k ~= "open" then new[k] = v end
      end
    else
      new = { cmd = rec.cmd, cwd = rec.cwd, label = rec.label, pty = rec.pty, owner = "nvim" }
    end
    new.open = (spec == nil or spec.open or require("proctor.console").get(id) ~= nil) or nil
    local ex, err = require("proctor").run(new)
    if not ex then die("rerun: " .. strip(err)) end
    return ex
  end,
}

A.text = {
  desc = "plain-text view of the output",
  id = "required", fallback = "recent",
  command = { args = "id" },
  run = function(id)
    check(require("proctor.views").text(id))
    return id
  end,
}

A.qf = {
  desc = "output into the quickfix list",
  id = "required", fallback = "recent",
  command = { args = "id" },
  run = function(id)
    return check(require("proctor.views").qf(id))
  end,
}

A.info = {
  desc = "show the record (no id: the engine)",
  id = "optional",
  command = { args = "id" },
  run = function(id)
    local views = require("proctor.views")
    local lines = id and views.execution_lines(id) or views.info_lines()
    vim.api.nvim_echo({ { table.concat(lines, "\n") } }, true, {})
    return lines
  end,
}

A.mcp = {
  desc = "how to register proctor-mcp with agents",
  command = { args = "none" },
  run = function()
    local _, lines = require("proctor.mcp").show()
    return lines
  end,
}

A.close = {
  desc = "close the window (the process keeps running)",
  run = function()
    if #vim.api.nvim_list_wins() > 1 then vim.api.nvim_win_close(0, false) else vim.cmd("bprevious") end
  end,
}

A.refresh = {
  desc = "refresh",
  run = function() return require("proctor.list").refresh() end,
}

-- Helpers --------------------------------------------------------------------------

-- Die unless the engine knows execution `id`.
function H.known(id)
  if type(id) ~= "number" then die(string.format("not an execution id: '%s'", tostring(id))) end
  if not M.engine():get(id) then die("no such execution " .. id) end
end

function H.cancel(id, force)
  local res, err = require("proctor").cancel(id, force)
  if not res then die(strip(err)) end
  if res == "not_found" then die("no such execution " .. id) end
  if res == "already_terminal" then
    util.notify(string.format("execution %d already ended (%s)", id, tostring(engine.state[id] or "done")),
      vim.log.levels.WARN)
  else
    util.notify(string.format("%s execution %d", force and "killing" or "canceling", id), vim.log.levels.INFO)
  end
  return res
end

M._H = H

return M
