-- tests/lua/run_nvim.lua — the same binding specs inside Neovim (LuaJIT),
-- loading lua/proctor/core.so through 'runtimepath'.
local root = os.getenv("PROCTOR_ROOT") or vim.fn.getcwd()
package.path = root .. "/tests/lua/?.lua;" .. package.path
local T = require("harness")
-- Neovim's stdout is not a terminal here: write results to stdout directly.
T.out = io.stdout
local ok_all = true
for _, name in ipairs({ "spec_basic", "spec_args", "spec_kill", "spec_data", "spec_history", "spec_secrets", "spec_spawn", "spec_history_compat", "spec_orphans", "spec_burst", "spec_stop" }) do
  local ok, err = pcall(function() require(name)(T, { nvim = true }) end)
  if not ok then T.failed = T.failed + 1; T.say("FAIL " .. name .. " (loading): " .. tostring(err)) end
end
ok_all = T.finish()
vim.cmd(ok_all and "qa!" or "cquit!")
