-- tests/nvim/run.lua — child-Neovim tests of the Neovim layer (tier "nvim").
--
-- Run by tests/run as:
--   nvim --headless -u NONE -i NONE -n -c "set rtp^=$ROOT" -c "luafile tests/nvim/run.lua"
-- Prints "PASS name" / "FAIL name: why" per test and quits Neovim itself
-- (exit status 1 when something failed).
local root = os.getenv("PROCTOR_ROOT") or vim.fn.getcwd()
package.path = root .. "/tests/lua/?.lua;" .. root .. "/tests/nvim/?.lua;" .. package.path
if os.getenv("PROCTOR_TEST_CORE_RTP") then
  vim.opt.rtp:prepend(os.getenv("PROCTOR_TEST_CORE_RTP"))
end
-- Headless Neovim writes its mode message ("-- (insert) --") and error
-- messages ("E211: …") to stdout with no newline: a PASS line printed after
-- one would not start a line, and tests/run, which counts lines that start
-- with PASS, would miss it. No mode message, and every result line starts
-- a line of its own (T.fresh_line; tests/run drops the empty lines).
vim.o.showmode = false

-- -u NONE loads no plugins: source ours the way a plugin manager would.
vim.cmd("runtime plugin/proctor.lua")

local T = require("harness")
T.fresh_line = true
local H = require("helpers")

-- PROCTOR_TEST=word1,word2 runs only tests whose name contains one (the
-- harness filters); SPEC=spec_api,spec_stress runs only those specs.
local function test(name, fn)
  if not T.selected(name) then return end
  local t0 = H.hrms()
  T.test(name, function()
    T.defer(H.leftovers()) -- runs last: whatever the test left running is canceled
    return fn()
  end)
  if os.getenv("PROCTOR_TEST_TIMES") then
    io.stdout:write(string.format("  (%s: %.0f ms)\n", name, H.hrms() - t0))
  end
end

-- Every tests/nvim/spec_*.lua, by name, so a new file cannot be forgotten. Pinned last:
-- spec_tasks and the specs that run tasks or change global settings (the task runs
-- they leave behind, chains and services, would be rows in the other specs' list
-- views) and spec_deprecation (it checks that no other spec met a deprecation). SPEC
-- selects specs; they still run in this order.
local specs = T.discover(root .. "/tests/nvim", {
  last = {
    "spec_tasks",
    "spec_make",
    "spec_vscode",
    "spec_params",
    "spec_runners",
    "spec_audit",
    "spec_everyday",
    "spec_trust",
    "spec_limits",
    "spec_deprecation",
  },
})
local only = os.getenv("SPEC")
if only and only ~= "" then
  local wanted = {}
  for s in only:gmatch("[^,]+") do
    wanted[s] = true
  end
  local picked = {}
  for _, s in ipairs(specs) do
    if wanted[s] then
      picked[#picked + 1] = s
      wanted[s] = nil
    end
  end
  local unknown = next(wanted)
  if unknown then
    T.say("FAIL nvim-layer: SPEC: no spec named '" .. unknown .. "'")
    vim.cmd("cquit 1")
  end
  specs = picked
end
for _, s in ipairs(specs) do
  local ok, err = xpcall(function() require(s)(test, T, H) end, debug.traceback)
  if not ok then
    T.say("FAIL " .. s .. " (loading): " .. tostring(err):gsub("\n", "\n    "))
    T.failed = T.failed + 1
  end
end

local ok = T.finish()
pcall(function() require("proctor.engine")._reset() end)
if ok then
  vim.cmd("qa!")
else
  vim.cmd("cquit 1")
end
