--- proctor.kinds — kinds of targets that are not executions: a chain of
--- proctor.sequence() is `c3`. A kind's targets are ids of :Proctor and rows
--- of the list view; proctor.actions runs the kind's own function for an
--- action on one (or says the action is not for it).
---
--- The module that makes such targets (tasks/chain.lua) stands above
--- proctor.actions and registers here, below both, so it never names actions:
--- a kind's action gets the action runner as an argument when it needs to run
--- an action on an execution (a chain's `open` opens its member's console).
---
---   tasks/chain.lua (at load) ──► kinds.add("chain", kind)
---   :Proctor cancel c3, c on a chain's row ──► actions ──► kinds.parse/kinds.kinds
---
--- Requiring this module has no side effects.

local M = {}

---@class proctor.Target a target of a kind that is not an execution (M.add)
---@field kind string
---@field id integer
---@field word string how :Proctor and the list write it ("c3")
---@field live boolean|nil

---@class proctor.Kind
---@field desc string what one is ("chain")
---@field parse fun(word: string): proctor.Target|nil the target a word of :Proctor names (nil: not one of these)
---@field list fun(): proctor.Target[] every target, newest first (completion)
---@field actions table<string, fun(t: proctor.Target, opts: table, run: fun(name: string, id: integer, opts: table): any): any>
---   what each action does to one; `run` is proctor.actions.run, for an action on an execution

--- The kinds, by name (M.add).
---@type table<string, proctor.Kind>
M.kinds = {}

--- Add (or replace) kind `name`: its targets become ids of :Proctor and rows
--- of the list view that the actions of `kind.actions` apply to.
---@param name string
---@param kind proctor.Kind
function M.add(name, kind) M.kinds[name] = kind end

--- The target `word` names in one of the kinds ("c3"), or nil.
---@param word string
---@return proctor.Target|nil
function M.parse(word)
  for _, k in pairs(M.kinds) do
    local t = k.parse(word)
    if t then return t end
  end
end

--- Is `id` a target of a kind (not an execution id)?
---@return boolean
function M.is_target(id) return type(id) == "table" and id.kind ~= nil end

--- How messages write an execution id or a target: "#12", "c3".
---@param id integer|proctor.Target
---@return string
function M.word(id) return M.is_target(id) and id.word or ("#" .. tostring(id)) end

return M
