--- proctor.tasks.traits.diagnostics — `diagnostics = true | "matcher"`: the
--- run's output goes through a problem matcher into vim.diagnostic and the
--- quickfix list (|proctor-diagnostics|).

local M = {}

local matchers = require("proctor.tasks.matchers")
local vsmatcher = require("proctor.tasks.vsmatcher")
local diagnostics = require("proctor.tasks.diagnostics")
local proctor = require("proctor")
local util = require("proctor.util")
local config = require("proctor.config")

M.option = {
  diagnostics = "boolean,string,table", -- table: VS Code's matchers (tasks/vsmatcher.lua)
  quickfix = "string",
  open_quickfix = "boolean",
  max_problems = "number",
}

M.QUICKFIX = { "on_failure", "always", "never" }

function M.check(opts)
  if opts.quickfix ~= nil and not vim.tbl_contains(M.QUICKFIX, opts.quickfix) then
    return ("'quickfix' must be one of %s, got %q"):format(
      table.concat(M.QUICKFIX, ", "),
      opts.quickfix
    )
  end
  local v = opts.max_problems
  if v ~= nil and (v < 0 or v ~= math.floor(v)) then
    return "'max_problems' must be an integer >= 0"
  end
  if type(opts.diagnostics) == "table" then
    local m, err = vsmatcher.new(opts.diagnostics, { cwd = "/" })
    if not m then return "diagnostics: " .. err end
  elseif type(opts.diagnostics) == "string" then
    local m, err = matchers.new(opts.diagnostics, { cwd = "/" })
    if not m then return "diagnostics: " .. err end
  end
end

-- a problem matcher sees every byte: the child waits for the editor instead
-- of the ring dropping what a flood wrote while the editor was busy
function M.prepare(run, s)
  if run.opts.diagnostics and s.backpressure == nil then s.backpressure = true end
end

function M.on_start(run, id, _, s)
  if not run.opts.diagnostics then return end
  local d = config.get().task_defaults
  local o = run.opts
  local matcher = o.diagnostics
  if matcher == true then
    matcher = matchers.for_command(s.cmd) or vim.api.nvim_eval("&errorformat")
  end
  local rec = proctor.record(id)
  local ok, err = diagnostics.attach(id, {
    name = run.name,
    matcher = matcher,
    cwd = rec and rec.cwd or vim.fn.getcwd(),
    quickfix = o.quickfix or d.quickfix,
    open_quickfix = o.open_quickfix == nil and d.open_quickfix or o.open_quickfix,
    max_items = o.max_problems or d.max_problems,
  })
  if not ok then util.notify(("task %s: diagnostics: %s"):format(run.name, err)) end
end

return M
