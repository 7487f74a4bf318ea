-- spec_args.lua — every binding function given bad arguments answers with a
-- clear error and never crashes.
local U = require("util")
local core = U.core

return function(T, ctx)
  local P = ctx and ctx.nvim and "nvim: " or ""
  local function test(name, fn) T.test(P .. "args: " .. name, fn) end

  test("core.new validates its options", function()
    T.raises(function() core.new(42) end, "table expected")
    T.raises(function() core.new { bogus = 1 } end, "unknown option 'bogus'")
    T.raises(function() core.new { output_limit = -1 } end, "output_limit")
    T.raises(function() core.new { output_limit = "big" } end, "output_limit")
    T.raises(function() core.new { max_running = 1.5 } end, "max_running")
    T.raises(function() core.new { shepherd = 7 } end, "shepherd")
    local e = core.new { shepherd = "/nonexistent/shepherd" }
    T.ok(e, "engine creation does not need the shepherd yet")
    local r = U.run(e, { cmd = { "true" } })
    T.eq(r.final.state, "failed")
    T.eq(r.final.reason, "spawn_error")
    T.match(r.final.error, "ESHEPHERD")
    T.match(r.final.error, "/nonexistent/shepherd")
    e:close()
  end)

  test("start validates its spec", function()
    local e = assert(core.new {})
    T.raises(function() e:start() end, "table expected")
    T.raises(function() e:start {} end, "'cmd' must be")
    T.raises(function() e:start({ cmd = { "true" } }, 1) end, "table expected")
    T.raises(function() e:start({ cmd = { "true" } }, { wake = 1 }) end, "'wake' must be a boolean")
    T.raises(
      function() e:start({ cmd = { "true" } }, { later = true }) end,
      "unknown option 'later'"
    )
    T.raises(function() e:start { cmd = {} } end, "must not be empty")
    T.raises(function() e:start { cmd = "" } end, "non%-empty")
    T.raises(function() e:start { cmd = { "a", {} } } end, "entries must be strings")
    T.raises(function() e:start { cmd = { "a\0b" } } end, "NUL")
    T.raises(function() e:start { cmd = { "true" }, cwd = 1 } end, "cwd")
    T.raises(function() e:start { cmd = { "true" }, env = "x" } end, "env")
    T.raises(function() e:start { cmd = { "true" }, env = { [1] = "x" } } end, "env")
    T.raises(function() e:start { cmd = { "true" }, env = { ["A=B"] = "x" } } end, "env")
    T.raises(function() e:start { cmd = { "true" }, env = { A = {} } } end, "env")
    T.raises(function() e:start { cmd = { "true" }, pty = "yes" } end, "pty")
    T.raises(function() e:start { cmd = { "true" }, cols = -1 } end, "cols")
    T.raises(function() e:start { cmd = { "true" }, cols = 70000 } end, "cols")
    T.raises(function() e:start { cmd = { "true" }, timeout_ms = -5 } end, "timeout_ms")
    T.raises(function() e:start { cmd = { "true" }, kill_grace_ms = "soon" } end, "kill_grace_ms")
    T.raises(function() e:start { cmd = { "true" }, label = {} } end, "label")
    T.raises(function() e:start { cmd = { "true" }, stdn = true } end, "unknown option 'stdn'")
    T.raises(function() core.new {}.start(nil, { cmd = "x" }) end, "engine")
    -- large but valid: 120 KiB strings (Linux caps one string at 128 KiB), 1.2 MiB in all
    local big = string.rep("y", 122880)
    local args = { "sh", "-c", 'printf %s "$1" | wc -c; printf %s "$BIG" | wc -c; echo $#', "sh" }
    for _ = 1, 10 do
      args[#args + 1] = big
    end
    local r = U.run(e, { cmd = args, env = { BIG = big } })
    T.eq(r.out.stdout, "122880\n122880\n10\n")
    -- too big for exec: a clear spawn error, not a crash
    local huge = string.rep("z", 8388608)
    r = U.run(e, { cmd = { "true", huge } })
    local why = ("%s (%s)"):format(tostring(r.final.state), tostring(r.final.reason))
    T.eq(r.final.state, "failed", why)
    T.match(r.final.error, "Argument list too long", why)
    local id, msg, name = e:start { cmd = { "true", string.rep("w", 20971520) } }
    T.eq(id, nil)
    T.eq(name, "ETOOBIG")
    T.match(msg, "^ETOOBIG: ")
    e:close()
  end)

  test("control calls validate ids and arguments", function()
    local e = assert(core.new {})
    for _, f in ipairs({ "cancel", "delete", "get", "close_stdin" }) do
      T.raises(function() e[f](e) end, "execution id")
      T.raises(function() e[f](e, "1") end, "execution id")
      T.raises(function() e[f](e, 1.5) end, "execution id")
    end
    T.eq(e:cancel(-1), "not_found")
    T.eq(e:cancel(0), "not_found")
    T.eq(e:cancel(2 ^ 52), "not_found")
    T.eq(e:delete(99), "not_found")
    T.raises(function() e:cancel(1, "hard") end, "boolean")
    T.eq(select(3, e:get(-7)), "ENOENT")
    T.eq(select(3, e:input(5, "x")), "ENOENT")
    T.raises(function() e:input(5) end, "string expected")
    T.raises(function() e:resize(5, 0, 10) end, "cols")
    T.raises(function() e:resize(5, 10, 70000) end, "rows")
    T.eq(select(3, e:resize(5, 10, 10)), "ENOENT")
    T.raises(function() e:read(5) end, "string expected")
    T.raises(function() e:read(5, "stdin") end, "stream must be")
    T.raises(function() e:read(5, "stdout", -1) end, "offset")
    T.raises(function() e:read(5, "stdout", 0, -1) end, "max")
    T.eq(select(3, e:read(5, "stdout")), "ENOENT")
    T.raises(function() e:list { state = "sleeping" } end, "unknown state")
    T.raises(function() e:list { bogus = 1 } end, "unknown option")
    T.raises(function() e:purge { older_than_ms = -1 } end, "older_than_ms")
    T.raises(function() e:poll(0) end, "max")
    T.raises(function() e:poll(1e9) end, "max")
    T.raises(function() e:wait(-5) end, "timeout_ms")
    T.eq(#e:wait(0), 0)
    e:close()
  end)

  test("a closed engine answers ECLOSED everywhere and close is idempotent", function()
    local e = assert(core.new {})
    e:close()
    e:close()
    T.ok(e:closed())
    T.match(tostring(e), "closed")
    for _, call in ipairs({
      function() return e:start { cmd = "true" } end,
      function() return e:cancel(1) end,
      function() return e:delete(1) end,
      function() return e:input(1, "x") end,
      function() return e:close_stdin(1) end,
      function() return e:resize(1, 1, 1) end,
      function() return e:get(1) end,
      function() return e:list() end,
      function() return e:purge() end,
      function() return e:read(1, "stdout") end,
    }) do
      local v, msg, name = call()
      T.eq(v, nil)
      T.eq(name, "ECLOSED")
      T.eq(msg, "ECLOSED: engine is closed")
    end
    T.eq(#e:poll(), 0)
    T.eq(#e:wait(10), 0)
  end)

  test("the module exports only luaopen_proctor_core", function()
    local so = ctx and ctx.nvim and (U.root .. "/lua/proctor/core.so")
      or (U.root .. "/build/lua5.4/proctor/core.so")
    local out =
      U.sh("nm -D --defined-only " .. so .. " | awk '$2 ~ /[TtDdBb]/ {print $3}' | grep -v '^_' ")
    local names = {}
    for n in out:gmatch("%S+") do
      names[#names + 1] = n
    end
    T.eq(table.concat(names, ","), "luaopen_proctor_core")
  end)
end
