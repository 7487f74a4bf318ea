-- spec_orphans.lua — processes that try to outlive their execution: an
-- escapee that sheds everything it can (its session and its environment,
-- so it carries no PROCTOR_JOB tag), and whatever a SIGKILLed shepherd
-- leaves behind. Nothing that is not ours is ever hit.
local U = require("util")
local core = U.core

return function(T, ctx)
  local P = ctx and ctx.nvim and "nvim: " or ""
  local function test(name, fn) T.test(P .. "orphans: " .. name, fn) end

  local function tmpdir() return (U.sh("mktemp -d"):gsub("%s+$", "")) end

  -- A command that leaves a daemon behind with no session, no group and no
  -- environment of its execution (env -i, then setsid -f: it forks, and the
  -- child leads a new session); its pid lands in `pidfile`, and the command
  -- goes on once the daemon runs `sleep`, after copying the daemon's
  -- environment to `pidfile`.env (it dies as soon as its execution ends).
  local function escapee_cmd(pidfile)
    return 'env -i /usr/bin/setsid -f /bin/sh -c \'echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; '
      .. "exec /usr/bin/env -i /bin/sleep 1000' _ "
      .. pidfile
      .. " </dev/null >/dev/null 2>&1; "
      .. 'while [ "$(cat /proc/$(cat '
      .. pidfile
      .. ' 2>/dev/null)/comm 2>/dev/null)" != sleep ]; do sleep 0.01; done; '
      .. "cat /proc/$(cat "
      .. pidfile
      .. ")/environ > "
      .. pidfile
      .. ".env"
  end

  local function pid_from(file)
    local pid
    U.wait_until(function()
      pid = tonumber(U.read_file(file) or "")
      return pid and U.read_file(file .. ".env")
    end, 5000)
    return pid
  end

  -- Run `body(eng, dir)` beside another running execution (the engine is
  -- never idle, so "no job left" never explains a kill); body returns the
  -- escapee's pid, which must then die while the other execution runs on.
  local function beside_another(opts, body)
    local eng = assert(core.new(opts))
    local dir = tmpdir()
    local pid
    local ok, err = pcall(function()
      local other = assert(eng:start { cmd = { "sleep", "1000" } })
      U.wait_state(eng, other, "running")
      pid = body(eng, dir)
      T.ok(pid, "the escapee did not start")
      T.ok(
        U.wait_until(function() return not U.alive(pid) end, 3000),
        "the escapee outlived its execution"
      )
      T.eq(eng:get(other).state, "running", "the other execution was not touched")
    end)
    if pid and U.alive(pid) then os.execute("kill -9 " .. pid) end
    os.execute("rm -rf '" .. dir .. "'")
    eng:close()
    assert(ok, err)
  end

  test(
    "an escapee with setsid and an empty environment dies with its execution while others run",
    function()
      beside_another({}, function(eng, dir)
        local r =
          U.run(eng, { cmd = { "sh", "-c", escapee_cmd(dir .. "/pid") .. "; echo started" } })
        T.eq(r.final.state, "completed")
        T.eq(U.read_file(dir .. "/pid.env"), "", "the escapee's environment is empty")
        return pid_from(dir .. "/pid")
      end)
    end
  )

  test("an escapee with an empty environment dies on cancel too, while others run", function()
    beside_another({ kill_grace_ms = 500 }, function(eng, dir)
      local id =
        assert(eng:start { cmd = { "sh", "-c", escapee_cmd(dir .. "/pid") .. "; sleep 1000" } })
      local pid = pid_from(dir .. "/pid")
      T.eq(eng:cancel(id), "canceling")
      T.eq(U.collect(eng, { id }, 10000)[id].final.state, "canceled")
      return pid
    end)
  end)

  -- Start the executions a SIGKILLed shepherd leaves behind: a setsid
  -- escapee beside a live leader, a background child of a leader that has
  -- exited (the execution drains), and an untagged escapee. Returns the ids,
  -- the tag, the untagged pid and the shepherd's pid.
  local function leftovers(eng, dir)
    local tag = U.tag()
    local env = { PROCTOR_TEST_TAG = tag }
    local a =
      assert(eng:start { cmd = { "sh", "-c", "setsid sleep 1000 & sleep 1000" }, env = env })
    local b =
      assert(eng:start { cmd = { "sh", "-c", "sleep 1000 & echo ready; exit 0" }, env = env })
    local c = assert(
      eng:start { cmd = { "sh", "-c", escapee_cmd(dir .. "/pid") .. "; sleep 1000" }, env = env }
    )
    U.wait_output(eng, b, "ready")
    T.ok(
      U.wait_until(function() return eng:get(b).exit_code ~= nil end, 5000),
      "b's leader did not exit"
    )
    local untagged = pid_from(dir .. "/pid")
    T.ok(untagged, "the untagged escapee did not start")
    T.ok(U.wait_until(function() return #U.tagged(tag) >= 5 end, 5000), "the jobs did not start")
    U.wait_state(eng, a, "running")
    local shep = U.shepherd(eng:get(a).pid)
    T.ok(shep, "no shepherd")
    T.eq(eng:get(b).state, "running", "b drains (its background sleep holds stdout)")
    return { a, b, c }, tag, untagged, shep
  end

  -- A process that is not ours but carries a tag of the same form.
  local function foreigner()
    local p = io.popen("PROCTOR_JOB=0123456789abcdef:1 setsid sleep 1000 >/dev/null 2>&1 & echo $!")
    local pid = tonumber(p:read("a"))
    p:close()
    return pid
  end

  local function after_loss(eng, ids, tag, untagged)
    local res = U.collect(eng, ids, 10000)
    for _, id in ipairs(ids) do
      T.eq(res[id].final.reason, "supervisor_lost", "execution " .. id)
    end
    T.ok(
      U.wait_until(function() return #U.tagged(tag) == 0 end, 3000),
      "left: " .. T.fmt(U.tagged(tag))
    )
    if untagged then
      T.ok(
        U.wait_until(function() return not U.alive(untagged) end, 3000),
        "the untagged escapee survived"
      )
    end
    local r = U.run(eng, { cmd = { "sh", "-c", "echo again" } })
    T.eq(r.out.stdout, "again\n", "the next start works")
  end

  -- b's leader exits at once and b drains while its background sleep holds
  -- stdout: a drain window longer than any test keeps it live until the
  -- shepherd dies (with the default 500 ms, a loaded machine ended it first,
  -- reason "exit", before the kill).
  local DRAINING = { drain_ms = 600000 }

  test(
    "the shepherd SIGKILLed: its setsid escapees and leftover background children die too",
    function()
      local eng = assert(core.new(DRAINING))
      local dir = tmpdir()
      local tag, untagged
      local ok, err = pcall(function()
        local ids, shep
        ids, tag, untagged, shep = leftovers(eng, dir)
        os.execute("kill -9 " .. shep)
        after_loss(eng, ids, tag, untagged)
      end)
      if tag then
        for _, p in ipairs(U.tagged(tag)) do
          os.execute("kill -9 " .. p)
        end
      end
      if untagged and U.alive(untagged) then os.execute("kill -9 " .. untagged) end
      os.execute("rm -rf '" .. dir .. "'")
      eng:close()
      assert(ok, err)
    end
  )

  test(
    "the shepherd and its helpers SIGKILLed at once: the engine sweeps what carries its tag, nothing else",
    function()
      local eng = assert(core.new(DRAINING))
      local dir = tmpdir()
      local tag, untagged, other
      local ok, err = pcall(function()
        local ids, shep
        ids, tag, untagged, shep = leftovers(eng, dir)
        other = foreigner()
        T.ok(other and U.alive(other), "the foreign process did not start")
        os.execute("kill -9 -" .. shep) -- its process group: the shepherd and any helper of its own
        after_loss(eng, ids, tag, nil)
        T.ok(U.alive(other), "a process that is not ours was killed")
      end)
      if tag then
        for _, p in ipairs(U.tagged(tag)) do
          os.execute("kill -9 " .. p)
        end
      end
      for _, p in ipairs({ untagged or 0, other or 0 }) do
        if p > 0 and U.alive(p) then os.execute("kill -9 " .. p) end
      end
      os.execute("rm -rf '" .. dir .. "'")
      eng:close()
      assert(ok, err)
    end
  )
end
