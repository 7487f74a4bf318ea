-- tests/lua/specs.lua — the binding specs, one list for tests/lua/run.lua
-- (lua5.4) and tests/lua/run_nvim.lua (Neovim): every tests/lua/spec_*.lua,
-- by name (harness.lua's T.discover), so a new file is run without a list to edit.
--
-- SPEC=spec_kill,spec_data runs only those; a name that is not a spec is an
-- error (a typo must not select nothing and pass).
local M = {}

-- the directory of this file
M.dir = debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or "tests/lua"
-- spec_basic first: when the basics fail, that is the first thing to read.
M.all = require("harness").discover(M.dir, { first = { "spec_basic" } })

function M.selected()
  local only = os.getenv("SPEC")
  if not only or only == "" then return M.all end
  local known, out = {}, {}
  for _, n in ipairs(M.all) do
    known[n] = true
  end
  for n in only:gmatch("[^,]+") do
    if not known[n] then error("SPEC: no binding spec named '" .. n .. "'") end
    out[#out + 1] = n
  end
  return out
end

return M
