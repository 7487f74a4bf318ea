-- tests/lua/run.lua — run every binding spec under the current Lua (lua5.4).
local T = require("harness")
local specs = { "spec_basic", "spec_args", "spec_kill", "spec_data", "spec_history", "spec_secrets", "spec_spawn", "spec_history_compat", "spec_orphans", "spec_burst", "spec_stop" }
local only = os.getenv("SPEC")
for _, name in ipairs(specs) do
  if not only or only == name then
    local ok, err = pcall(function() require(name)(T) end)
    if not ok then T.failed = T.failed + 1; T.say("FAIL " .. name .. " (loading): " .. tostring(err)) end
  end
end
os.exit(T.finish() and 0 or 1)
