--- proctor.quit — asking before quitting Neovim would cancel running
--- executions (`confirm_quit`, |proctor-quit|).
---
--- A stray :q on the last window or a :qa cancels every live execution (the
--- engine's VimLeavePre), a dev server included. So, as Vim does for a
--- terminal's job (E947, E948), the quit asks first:
---
---   :q (last window), :qa, ZZ ... ──► ExitPre ──► live executions? ──► confirm()
---                                                      Yes: quit (they are canceled)
---                                                      No:  the quit is refused
---   :qa!, :q!, :wqa!, ZQ (typed) ─► never asks
---   no UI attached (a script, a test, an embedder) ──► nobody to ask: quits
---
--- ExitPre cannot cancel a quit, but Neovim refuses one whose window an
--- autocommand closed: the window is replaced by a copy of itself (split,
--- close the original), so nothing visible changes. The `!` of the command is
--- read from the command line just typed (CmdlineLeave; cleared once the
--- command ran). Requiring this module has no side effects.
---
--- It stands on the engine's floor and below it (ARCHITECTURE.md, Floors):
--- the engine installs it when it starts and hands it the function that
--- lists the live executions, so this module never requires the engine.

local M = {}
local H = {}

local util = require("proctor.util")
local config = require("proctor.config")

local api = vim.api

H.cmdline = nil -- the Ex command line being executed (typed or from a mapping)
H.live = nil ---@type (fun(): proctor.Record[])? the engine's live executions

--- Register the autocmds (in `group`, the engine's: they live while it does).
---@param group integer
---@param live fun(): proctor.Record[] the executions that quitting now would cancel
function M.hook(group, live)
  H.live = live
  api.nvim_create_autocmd("CmdlineLeave", {
    group = group,
    pattern = ":",
    callback = function()
      H.cmdline = vim.fn.getcmdline()
      vim.schedule(function() H.cmdline = nil end)
    end,
  })
  api.nvim_create_autocmd("ExitPre", { group = group, callback = function() M.on_exit_pre() end })
  -- ZQ is :q! typed as keys: seen here, since it is no command line
  if vim.on_key and not H.on_key then
    H.on_key = api.nvim_create_namespace("proctor_quit")
    local prev
    vim.on_key(function(key)
      if prev == "Z" and key == "Q" then
        H.zq = true
        vim.schedule(function() H.zq = nil end)
      end
      prev = key
    end, H.on_key)
  end
end

--- The executions that quitting now would cancel.
---@return proctor.Record[]
function M.live()
  if not H.live then return {} end
  local ok, recs = pcall(H.live)
  return ok and recs or {}
end

--- ExitPre: ask when live executions would be canceled; refuse the quit on "No".
function M.on_exit_pre()
  if not config.get().confirm_quit then return end
  local live = M.live()
  if #live == 0 or H.forced() or not H.interactive() then return end
  local q = #live == 1 and "1 execution is running: cancel it and quit?"
    or string.format("%d executions are running: cancel them and quit?", #live)
  if vim.fn.confirm(q, "&Yes\n&No", 2, "Question") == 1 then return end
  H.refuse()
end

-- Helpers ------------------------------------------------------------------------

-- Was the quit forced (`:qa!`, `:q!`, `:wqa!`, `:x!` ... just typed)?
function H.forced()
  if H.zq then return true end
  local line = H.cmdline
  if not line then return false end
  line = line:gsub("^[%s:]+", "")
  -- "confirm qa!", "silent qa!": the command after the modifier
  local mod, rest = line:match("^(%a+)%s+(.*)$")
  if mod and (vim.startswith("confirm", mod) or vim.startswith("silent", mod)) and #mod >= 3 then
    line = rest
  end
  local name, bang = line:match("^(%a+)(!?)")
  if bang ~= "!" or not name then return false end
  return name:match("^q") ~= nil
    or name:match("^wq") ~= nil
    or name:match("^x") ~= nil
    or name:match("^exi") ~= nil
end

-- Is someone there to answer? (A UI is attached.)
function H.interactive() return #api.nvim_list_uis() > 0 end

-- Refuse the quit: Neovim gives up a quit whose window an autocommand closed.
function H.refuse()
  local old = api.nvim_get_current_win()
  if api.nvim_win_get_config(old).relative ~= "" then
    api.nvim_win_close(old, true)
  else
    local view = vim.fn.winsaveview()
    vim.cmd("split")
    vim.fn.winrestview(view)
    api.nvim_win_close(old, true)
  end
  vim.cmd("redraw")
  util.notify(
    "not quitting: executions are running (:Proctor list; :qa! cancels them and quits)",
    vim.log.levels.WARN
  )
end

M._H = H

return M
