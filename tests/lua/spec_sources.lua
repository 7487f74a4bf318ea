-- tests/lua/spec_sources.lua — a secret source that never answers cannot
-- hold an execution in `starting`: timeout_ms covers the whole start-up, and
-- every source has its own bound (secret_timeout_ms). Either way the
-- source's whole process tree is killed.
local U = require("util")
local core = U.core

return function(T)
  local test = T.test

  -- Live processes whose command line holds `needle`.
  local function running(needle)
    local n = 0
    for pid in U.sh("ls /proc"):gmatch("%d+") do
      local c = U.read_file("/proc/" .. pid .. "/cmdline")
      if c and c:find(needle, 1, true) and U.alive(tonumber(pid)) then n = n + 1 end
    end
    return n
  end

  -- A sleep nobody else runs: its argument is its name in /proc.
  local seq = 0
  local function unique_sleep()
    seq = seq + 1
    local pid = (U.read_file("/proc/self/stat") or ""):match("^(%d+)") or "0"
    return ("1000.%s%d%d"):format(pid, math.random(1, 99999), seq)
  end

  -- A source that hangs as a tree: a background sleep and a foreground one.
  local function hanging(arg) return { "sh", "-c", ("sleep %s & sleep %s; wait"):format(arg, arg) } end

  -- Whether the execution's source ran at all, and is gone at the end.
  local function watch(eng, id, arg)
    local seen = 0
    local r
    U.wait_until(function()
      seen = math.max(seen, running(arg))
      U.pump(eng, 20)
      local ok, res = pcall(U.collect, eng, { id }, 0) -- raises while it is not terminal
      r = ok and res[id] or nil
      return r ~= nil
    end, 30000)
    return r, seen
  end

  test(
    "timeout_ms bounds the start-up: a command source that hangs ends the execution timed_out, its tree killed",
    function()
      local eng = assert(core.new {})
      T.defer(function() eng:close() end)
      local arg = unique_sleep()
      local marker = U.tmpdir()
      T.defer(function() U.rmrf(marker) end)
      local id = assert(eng:start {
        cmd = { "touch", marker .. "/ran" },
        timeout_ms = 500,
        secrets = { TOKEN = { command = hanging(arg) } },
      })
      local r = watch(eng, id, arg)
      T.ok(r and r.final, "the execution ended")
      T.eq(r.final.state, "timed_out")
      T.eq(r.final.reason, "timeout")
      T.ok(
        tostring(r.final.error):find("secret TOKEN", 1, true)
          or tostring(r.final.error):find("before the process started", 1, true),
        tostring(r.final.error)
      )
      T.eq(r.final.prev, "starting")
      T.ok(
        U.wait_until(function() return running(arg) == 0 end, 10000),
        "every process of the source is gone: " .. running(arg) .. " left"
      )
      T.eq(U.read_file(marker .. "/ran"), nil, "the command never ran")
    end
  )

  test(
    "secret_timeout_ms bounds a source on its own: failed / secret_unavailable naming it, its tree killed",
    function()
      local eng = assert(core.new { secret_timeout_ms = 300 })
      T.defer(function() eng:close() end)
      local arg = unique_sleep()
      local id =
        assert(eng:start { cmd = { "true" }, secrets = { API_KEY = { command = hanging(arg) } } })
      local r = watch(eng, id, arg)
      T.ok(r and r.final, "the execution ended")
      T.eq(r.final.state, "failed")
      T.eq(r.final.reason, "secret_unavailable")
      T.ok(
        tostring(r.final.error):find(
          "secret API_KEY: `sh` gave no value within secret_timeout_ms (300 ms)",
          1,
          true
        ),
        tostring(r.final.error)
      )
      T.ok(
        U.wait_until(function() return running(arg) == 0 end, 10000),
        "every process of the source is gone: " .. running(arg) .. " left"
      )
      -- the engine is fine afterwards: a source that answers still works
      local r2 = U.run(
        eng,
        { cmd = { "sh", "-c", 'echo "$V"' }, secrets = { V = { command = { "printf", "ok-1" } } } }
      )
      T.eq(r2.final.state, "completed")
      T.eq(r2.out.stdout, "***\n")
    end
  )

  test(
    "the bound that fires first decides: timeout_ms before secret_timeout_ms, and the reverse",
    function()
      local eng = assert(core.new { secret_timeout_ms = 600000 })
      T.defer(function() eng:close() end)
      local arg = unique_sleep()
      local r = watch(
        eng,
        assert(eng:start {
          cmd = { "true" },
          timeout_ms = 300,
          secrets = { A = { command = { "sleep", arg } } },
        }),
        arg
      )
      T.eq(r.final.state, "timed_out")
      local e2 = assert(core.new { secret_timeout_ms = 300 })
      T.defer(function() e2:close() end)
      arg = unique_sleep()
      r = watch(
        e2,
        assert(e2:start {
          cmd = { "true" },
          timeout_ms = 600000,
          secrets = { B = { command = { "sleep", arg } } },
        }),
        arg
      )
      T.eq(r.final.state, "failed")
      T.eq(r.final.reason, "secret_unavailable")
      T.ok(tostring(r.final.error):find("secret B:", 1, true), tostring(r.final.error))
      T.ok(U.wait_until(function() return running(arg) == 0 end, 10000), "the sleep is gone")
    end
  )

  test(
    "timeout_ms counts from starting: a run whose secrets arrive at once keeps the rest of it",
    function()
      local eng = assert(core.new {})
      T.defer(function() eng:close() end)
      local r = U.run(eng, {
        cmd = { "sleep", "30" },
        -- long enough for printf and the spawn on a loaded machine (300 ms
        -- ran out while still starting in a fresh-clone run): what is under
        -- test is that it then runs, and times out from running
        timeout_ms = 3000,
        secrets = { V = { command = { "printf", "v" } } },
      })
      T.eq(r.final.state, "timed_out")
      T.eq(r.final.prev, "running")
      r = U.run(
        eng,
        { cmd = { "true" }, timeout_ms = 60000, secrets = { V = { command = { "printf", "v" } } } }
      )
      T.eq(r.final.state, "completed")
    end
  )

  test("secret_timeout_ms is checked like every engine option", function()
    T.raises(function() core.new { secret_timeout_ms = -1 } end, "secret_timeout_ms")
    T.raises(function() core.new { secret_timeout_ms = "x" } end, "secret_timeout_ms")
  end)
end
