-- spec_orphans.lua — processes that try to outlive their execution: an
-- escapee that sheds everything it can (its session and its environment,
-- so it carries no PROCTOR_JOB tag) still comes back to its job's reaper.
local U = require("util")
local core = U.core

return function(T, ctx)
  local P = ctx and ctx.nvim and "nvim: " or ""
  local function test(name, fn) T.test(P .. "orphans: " .. name, fn) end

  local function tmpdir()
    return (U.sh("mktemp -d"):gsub("%s+$", ""))
  end

  -- A command that leaves a daemon behind with no session, no group and no
  -- environment of its execution (env -i, then setsid -f: it forks, and the
  -- child leads a new session); its pid lands in `pidfile`, and the command
  -- returns once the daemon runs `sleep`.
  local function escapee_cmd(pidfile)
    return "env -i /usr/bin/setsid -f /bin/sh -c 'echo $$ > \"$1.tmp\"; mv \"$1.tmp\" \"$1\"; " ..
      "exec /usr/bin/env -i /bin/sleep 1000' _ " .. pidfile .. " </dev/null >/dev/null 2>&1; " ..
      "while [ \"$(cat /proc/$(cat " .. pidfile .. " 2>/dev/null)/comm 2>/dev/null)\" != sleep ]; do sleep 0.01; done"
  end

  local function pid_from(file)
    local pid
    U.wait_until(function()
      pid = tonumber(U.read_file(file) or "")
      return pid and U.read_file("/proc/" .. pid .. "/comm") == "sleep\n"
    end, 5000)
    return pid
  end

  test("an escapee with setsid and an empty environment dies with its execution while others run", function()
    local eng = assert(core.new{})
    local dir = tmpdir()
    local pid
    local ok, err = pcall(function()
      local other = assert(eng:start{ cmd = { "sleep", "1000" } }) -- the engine is not idle
      U.wait_state(eng, other, "running")
      local r = U.run(eng, { cmd = { "sh", "-c", escapee_cmd(dir .. "/pid") .. "; echo started" } })
      T.eq(r.final.state, "completed")
      pid = pid_from(dir .. "/pid")
      T.ok(pid, "the escapee did not start")
      T.eq(U.read_file("/proc/" .. pid .. "/environ"), "", "the escapee's environment is empty")
      T.ok(U.wait_until(function() return not U.alive(pid) end, 3000), "the escapee outlived its execution")
      T.eq(eng:get(other).state, "running", "the other execution was not touched")
    end)
    if pid and U.alive(pid) then os.execute("kill -9 " .. pid) end
    os.execute("rm -rf '" .. dir .. "'")
    eng:close()
    assert(ok, err)
  end)

  test("an escapee with an empty environment dies on cancel too, while others run", function()
    local eng = assert(core.new{ kill_grace_ms = 500 })
    local dir = tmpdir()
    local pid
    local ok, err = pcall(function()
      local other = assert(eng:start{ cmd = { "sleep", "1000" } })
      U.wait_state(eng, other, "running")
      local id = assert(eng:start{ cmd = { "sh", "-c", escapee_cmd(dir .. "/pid") .. "; sleep 1000" } })
      pid = pid_from(dir .. "/pid")
      T.ok(pid, "the escapee did not start")
      T.eq(eng:cancel(id), "canceling")
      T.eq(U.collect(eng, { id }, 10000)[id].final.state, "canceled")
      T.ok(U.wait_until(function() return not U.alive(pid) end, 3000), "the escapee outlived its execution")
      T.eq(eng:get(other).state, "running", "the other execution was not touched")
    end)
    if pid and U.alive(pid) then os.execute("kill -9 " .. pid) end
    os.execute("rm -rf '" .. dir .. "'")
    eng:close()
    assert(ok, err)
  end)
end
