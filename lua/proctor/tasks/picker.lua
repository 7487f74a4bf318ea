--- proctor.tasks.picker — the task picker of `:Proctor run` without a command:
--- what a user would type first, and where it runs.
---
---   picker.select(tasks, dir, function(task) end)
---
---   make all — build everything  [make]          the default goal, phony and
---   make test — run the tests  [make]            described targets, scripts ...
---   npm run lint — eslint .  [npm · ~/src/app/web]   (where it runs, when not dir)
---   more: 18 file targets of make …              a second picker with the rest
---
--- Tasks marked `more` (make's file targets) are left for the "more" entry.
--- The prompt names the directory the tasks come from when they all come from
--- one that is not `dir` (found upward: |proctor-tasks|). Nothing runs here:
--- the choice goes to `on_choice`. Requiring this module has no side effects.

local M = {}
local H = {}

local util = require("proctor.util")

--- Let the user pick one of `tasks` (|vim.ui.select()|); on_choice(task) when
--- one was picked (not when the picker was left). No tasks: a warning saying
--- where proctor looked.
---@param tasks proctor.TaskDef[]
---@param dir string the directory the tasks were listed for
---@param on_choice fun(task: proctor.TaskDef)
function M.select(tasks, dir, on_choice)
  if #tasks == 0 then
    util.notify(
      ("no tasks found in %s or above it, up to the project root (:help proctor-tasks)"):format(
        vim.fn.fnamemodify(dir, ":~")
      ),
      vim.log.levels.WARN
    )
    return
  end
  local first, more = {}, {}
  for _, t in ipairs(tasks) do
    if t.more then
      more[#more + 1] = t
    else
      first[#first + 1] = t
    end
  end
  local items = first
  if #more > 0 then
    items = vim.list_extend({}, first)
    items[#items + 1] = { more = true, count = #more }
  end
  local from = H.from(tasks, dir)
  vim.ui.select(items, {
    prompt = "proctor task" .. (from and (" (in " .. from .. ")") or ""),
    kind = "proctor_task",
    format_item = function(t) return M.format(t, dir, from) end,
  }, function(t)
    if not t then return end
    if t.count then
      return vim.ui.select(more, {
        prompt = "proctor task: file targets",
        kind = "proctor_task",
        format_item = function(x) return M.format(x, dir, from) end,
      }, function(x)
        if x then on_choice(x) end
      end)
    end
    on_choice(t)
  end)
end

--- One line of the picker: "make test — run the tests  [make]", with where
--- it runs when that is neither `dir` nor the prompt's `from`, and the
--- names of a task's parameters after its name ("deploy {env tag}").
---@param t proctor.TaskDef|{count: integer}
---@param dir string
---@param from string|nil
---@return string
function M.format(t, dir, from)
  if t.count then return ("more: %d file targets of make …"):format(t.count) end
  local where = ""
  if t.cwd and t.cwd ~= dir then
    local shown = vim.fn.fnamemodify(t.cwd, ":~")
    if shown ~= from then where = " · " .. shown end
  end
  local params = type(t.params) == "table" and vim.tbl_keys(t.params) or {}
  table.sort(params)
  return t.name
    .. (#params > 0 and (" {" .. table.concat(params, " ") .. "}") or "")
    .. (t.desc and ("  — " .. t.desc:gsub("\n", " ")) or "")
    .. "  ["
    .. t.source
    .. where
    .. "]"
end

-- Helpers --------------------------------------------------------------------------

-- The directory every task runs in (as shown), when that is one and not `dir`.
function H.from(tasks, dir)
  local cwd
  for _, t in ipairs(tasks) do
    if cwd and t.cwd ~= cwd then return nil end
    cwd = t.cwd
  end
  if not cwd or cwd == dir then return nil end
  return vim.fn.fnamemodify(cwd, ":~")
end

M._H = H

return M
