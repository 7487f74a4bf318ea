-- tests/lua/run_nvim.lua — the same binding specs inside Neovim (LuaJIT),
-- loading lua/proctor/core.so through 'runtimepath'.
--
-- SPEC=spec_kill (or a comma list) runs only those specs; PROCTOR_TEST
-- selects tests by name (tests/lua/harness.lua).
local root = os.getenv("PROCTOR_ROOT") or vim.fn.getcwd()
package.path = root .. "/tests/lua/?.lua;" .. package.path
local T = require("harness")
-- Neovim's stdout is not a terminal here: write results to stdout directly.
T.out = io.stdout
local sok, specs = pcall(function() return require("specs").selected() end)
if not sok then
  T.say("FAIL nvim-binding: " .. tostring(specs))
  vim.cmd("cquit!")
end
for _, name in ipairs(specs) do
  local ok, err = pcall(function() require(name)(T, { nvim = true }) end)
  if not ok then
    T.failed = T.failed + 1
    T.say("FAIL " .. name .. " (loading): " .. tostring(err))
  end
end
local ok_all = T.finish()
vim.cmd(ok_all and "qa!" or "cquit!")
