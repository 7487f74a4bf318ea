-- spec_harness.lua — the test runners themselves: specs are found by glob
-- (harness.lua's T.discover), so a new spec file is run without a list to edit.
-- This file is in no list: that it runs at all is the first check.
local U = require("util")

return function(T, ctx)
  local P = ctx and ctx.nvim and "nvim: " or ""
  local function test(name, fn) T.test(P .. "harness: " .. name, fn) end

  test("discover: every spec_*.lua by name, pinned ones first and last, nothing else", function()
    local d = U.tmpdir()
    T.defer(function() U.rmrf(d) end)
    for _, f in ipairs({
      "spec_b.lua",
      "spec_a.lua",
      "spec_z.lua",
      "spec_c.lua",
      "util.lua",
      "spec_x.txt",
      "myspec_y.lua",
    }) do
      U.write_file(d .. "/" .. f, "return function() end\n")
    end
    T.eq(table.concat(T.discover(d), " "), "spec_a spec_b spec_c spec_z")
    local pinned = T.discover(d, { first = { "spec_z" }, last = { "spec_a" } })
    T.eq(table.concat(pinned, " "), "spec_z spec_b spec_c spec_a")
    local ok, err = pcall(T.discover, d, { last = { "spec_gone" } })
    T.eq(ok, false, "a pinned spec with no file is an error")
    T.match(err, "spec_gone is pinned")
  end)

  test("the binding specs are every tests/lua/spec_*.lua, this one included", function()
    local specs = require("specs")
    local listed = {}
    for _, name in ipairs(specs.all) do
      listed[name] = true
    end
    T.ok(listed.spec_harness, "spec_harness is run")
    local n = 0
    for f in U.sh("ls -1 '" .. specs.dir .. "'"):gmatch("[^\n]+") do
      local name = f:match("^(spec_[%w_]+)%.lua$")
      if name then
        n = n + 1
        T.ok(listed[name], name .. " is run")
      end
    end
    T.eq(#specs.all, n)
  end)
end
