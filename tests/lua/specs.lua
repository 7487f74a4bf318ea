-- tests/lua/specs.lua — the binding specs, one list for tests/lua/run.lua
-- (lua5.4) and tests/lua/run_nvim.lua (Neovim).
--
-- SPEC=spec_kill,spec_data runs only those; a name that is not a spec is an
-- error (a typo must not select nothing and pass).
local M = {}

M.all = { "spec_basic", "spec_args", "spec_kill", "spec_data", "spec_history", "spec_secrets", "spec_spawn", "spec_history_compat", "spec_orphans", "spec_burst", "spec_stop", "spec_liveness" }

function M.selected()
  local only = os.getenv("SPEC")
  if not only or only == "" then return M.all end
  local known, out = {}, {}
  for _, n in ipairs(M.all) do known[n] = true end
  for n in only:gmatch("[^,]+") do
    if not known[n] then error("SPEC: no binding spec named '" .. n .. "'") end
    out[#out + 1] = n
  end
  return out
end

return M
