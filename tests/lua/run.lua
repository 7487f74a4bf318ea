-- tests/lua/run.lua — run every binding spec under the current Lua (lua5.4).
-- SPEC and PROCTOR_TEST select specs and tests (tests/lua/specs.lua, harness.lua).
local T = require("harness")
local ok, specs = pcall(function() return require("specs").selected() end)
if not ok then
  T.say("FAIL lua-binding: " .. tostring(specs))
  os.exit(1)
end
for _, name in ipairs(specs) do
  local loaded, err = pcall(function() require(name)(T) end)
  if not loaded then
    T.failed = T.failed + 1
    T.say("FAIL " .. name .. " (loading): " .. tostring(err))
  end
end
os.exit(T.finish() and 0 or 1)
