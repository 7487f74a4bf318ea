-- spec_kill.lua — cancel, kill ladder, escapees, timeouts, races, host death,
-- shepherd death, pid reuse.
local U = require("util")
local core = U.core

return function(T, ctx)
  local P = ctx and ctx.nvim and "nvim: " or ""
  local function test(name, fn) T.test(P .. "kill: " .. name, fn) end
  local eng = assert(core.new { kill_grace_ms = 400, drain_ms = 200 })

  -- Every process tagged `tag` is gone (a SIGKILLed process can outlive its
  -- execution's end by a moment when the machine is loaded: wait for it).
  local function gone(tag)
    T.ok(
      U.wait_until(function() return #U.tagged(tag) == 0 end, 10000),
      "left: " .. T.fmt(U.tagged(tag))
    )
  end

  -- Start `cmd` tagged, wait until `n` tagged processes are alive, cancel it,
  -- wait for the terminal event; returns the summary and elapsed ms.
  local function cancel_tree(cmd, n, opts)
    local tag = U.tag()
    local spec = { cmd = cmd, env = { PROCTOR_TEST_TAG = tag } }
    for k, v in pairs(opts or {}) do
      spec[k] = v
    end
    local id = assert(eng:start(spec))
    T.ok(U.wait_until(function() return #U.tagged(tag) >= n end, 5000), "tree did not start")
    local t0 = U.now()
    T.eq(eng:cancel(id), "canceling")
    local r = U.collect(eng, { id }, 10000)[id]
    local dt = U.now() - t0
    return r, dt, tag
  end

  test("cancel of sh -c 'sleep 1000 & sleep 1000' leaves no process", function()
    -- The leader dies of the SIGTERM itself, long before a SIGKILL at the grace.
    local r, _, tag = cancel_tree(
      { "sh", "-c", "sleep 1000 & sleep 1000" },
      3,
      { kill_grace_ms = 60000 }
    )
    T.eq(r.final.state, "canceled")
    T.eq(r.final.reason, "canceled")
    -- the SIGTERM ended it, not the grace's SIGKILL
    T.eq(r.final.signal, "SIGTERM")
    gone(tag)
  end)

  test("cancel sends SIGTERM to every member of the group, not only the leader", function()
    -- The leader ignores TERM and waits for its child; the child ends cleanly
    -- on its TERM (its own trap), then the leader ends: only a group signal
    -- gets there. A grace of 60 s: a SIGKILL would come far too late to matter
    -- (and the end waits for the whole job: the child's sleep must exist
    -- before the cancel, so it says ready only after starting it).
    local tag = U.tag()
    local id = assert(eng:start {
      cmd = {
        "sh",
        "-c",
        "(trap 'echo child-got-term; exit 0' TERM; sleep 1000 & echo child-ready; wait) & "
          .. "trap '' TERM; echo leader-ready; wait; echo leader-done; exit 0",
      },
      env = { PROCTOR_TEST_TAG = tag },
      kill_grace_ms = 60000,
    })
    T.defer(function() eng:cancel(id, true) end)
    U.wait_output(eng, id, "child-ready")
    U.wait_output(eng, id, "leader-ready")
    T.ok(U.wait_comm(tag, "sleep"), "the child's sleep runs") -- not still the subshell's fork
    T.eq(eng:cancel(id), "canceling")
    local r = U.collect(eng, { id }, 30000)[id]
    T.eq(r.final.state, "canceled")
    T.match(r.out.stdout, "child%-got%-term\n")
    T.match(r.out.stdout, "leader%-done\n")
    T.eq(r.final.exit_code, 0, "the leader ended by itself, not by a signal")
    T.ok(
      U.wait_until(function() return #U.tagged(tag) == 0 end, 10000),
      "left: " .. T.fmt(U.tagged(tag))
    )
  end)

  test("cancel of a three-stage pipeline leaves no process", function()
    local r, _, tag = cancel_tree({ "sh", "-c", "sleep 1000 | sleep 1000 | sleep 1000" }, 4)
    T.eq(r.final.state, "canceled")
    gone(tag)
  end)

  test("a TERM-ignoring grandchild dies at the grace deadline", function()
    local r, dt, tag = cancel_tree({ "sh", "-c", "trap '' TERM; sleep 1000 & wait" }, 2)
    T.eq(r.final.state, "canceled")
    T.eq(r.final.signal, "SIGKILL")
    gone(tag)
    -- the grace is a floor the engine promises (load only lengthens it); the
    -- SIGKILL above says the grace, not the TERM, ended it
    T.ok(dt >= 380, "took " .. dt .. " ms for a 400 ms grace")
  end)

  test(
    "the leader exits while stopping: the rest of its group keeps the grace, then SIGKILL; the end waits for it",
    function()
      -- This test used to say the opposite ("the rest of its group is killed at
      -- once, not at the grace"). Now the whole group gets the grace, as
      -- systemd's KillMode=control-group does: a TERM-ignoring member outlives
      -- its leader until the grace deadline, and the terminal state comes only
      -- then. drain_ms is longer than the grace: only the SIGKILL at the
      -- deadline ends it.
      local grace = 1000
      local e2 = assert(core.new { drain_ms = 8000 })
      T.defer(function() e2:close() end)
      local tag = U.tag()
      local id = assert(e2:start {
        cmd = {
          "sh",
          "-c",
          "trap 'exit 0' TERM; (trap '' TERM; exec sleep 1000) & "
            .. "(trap 'sleep 5; echo too-late; exit' TERM; sleep 999 & wait) & echo ready; wait",
        },
        env = { PROCTOR_TEST_TAG = tag },
        kill_grace_ms = grace,
      })
      U.wait_output(e2, id, "ready")
      local leader = e2:get(id).pid
      local grandchild
      T.ok(
        U.wait_until(function() -- exec'd: its TERM is ignored
          for _, p in ipairs(U.tagged(tag)) do
            if
              p ~= leader and U.read_file("/proc/" .. p .. "/cmdline") == "sleep\0" .. "1000\0"
            then
              grandchild = p
            end
          end
          return grandchild
        end, 3000),
        "the TERM-ignoring grandchild did not start"
      )
      T.eq(
        U.read_file("/proc/" .. grandchild .. "/stat"):match("%) %a %d+ (%d+)"),
        tostring(leader),
        "in the leader's group"
      )
      local t0 = U.now()
      T.eq(e2:cancel(id), "canceling")
      T.ok(
        U.wait_until(function() return not U.alive(leader) end, 5000),
        "the leader did not end through its trap"
      )
      T.ok(U.alive(grandchild), "the grandchild was killed with its leader, before the grace")
      local r = U.collect(e2, { id }, 10000)[id]
      local dt = U.now() - t0
      T.eq(r.final.state, "canceled")
      T.eq(r.final.exit_code, 0, "the leader ended through its TERM trap")
      T.ok(dt >= grace, ("ended %.0f ms after cancel, before the %d ms grace"):format(dt, grace))
      -- the grace's SIGKILL ended it: a second member takes the cancel's
      -- SIGTERM as its cue to write "too-late" 5 s later, long after the 1 s
      -- grace (the drain, 8 s of quiet, would let it write)
      T.ok(not r.out.stdout:find("too-late", 1, true), "the grace did not end it: " .. r.out.stdout)
      T.ok(
        U.wait_until(function() return not U.alive(grandchild) end, 3000),
        "the grandchild outlived the grace"
      )
      gone(tag)
    end
  )

  test("per-execution kill_grace_ms", function()
    -- The engine's own grace is 60 s: ending within 30 s shows the 100 ms one counts.
    local e2 = assert(core.new { kill_grace_ms = 60000 })
    T.defer(function() e2:close() end)
    local tag = U.tag()
    local id = assert(e2:start {
      cmd = { "sh", "-c", "trap '' TERM; sleep 1000" },
      env = { PROCTOR_TEST_TAG = tag },
      kill_grace_ms = 100,
    })
    T.ok(U.wait_until(function() return #U.tagged(tag) >= 2 end, 5000), "tree did not start")
    local t0 = U.now()
    T.eq(e2:cancel(id), "canceling")
    local r = U.collect(e2, { id }, 40000)[id]
    local dt = U.now() - t0
    T.eq(r.final.signal, "SIGKILL")
    -- a floor the engine promises; the engine's own 60 s grace would outlast
    -- the collect above, so ending SIGKILLed says the 100 ms one counted
    T.ok(dt >= 90, "took " .. dt .. " ms for a 100 ms grace")
  end)

  test("a setsid escapee dies too", function()
    local r, _, tag = cancel_tree({ "sh", "-c", "setsid sleep 1000 & sleep 1000" }, 3)
    T.eq(r.final.state, "canceled")
    T.ok(
      U.wait_until(function() return #U.tagged(tag) == 0 end, 10000),
      "escapee survived: " .. T.fmt(U.tagged(tag))
    )
  end)

  test("an orphaned double-fork escapee dies when its execution ends", function()
    local tag = U.tag()
    local r = U.run(eng, {
      cmd = { "sh", "-c", "(setsid sh -c 'sleep 1000' >/dev/null 2>&1 &); echo started" },
      env = { PROCTOR_TEST_TAG = tag },
    })
    T.eq(r.final.state, "completed")
    T.ok(
      U.wait_until(function() return #U.tagged(tag) == 0 end, 10000),
      "daemon survived: " .. T.fmt(U.tagged(tag))
    )
  end)

  test("a SIGSTOPped job dies on cancel", function()
    local tag = U.tag()
    local id = assert(eng:start {
      cmd = { "sh", "-c", "kill -STOP $$; sleep 1000" },
      env = { PROCTOR_TEST_TAG = tag },
    })
    U.wait_state(eng, id, "running")
    T.ok(
      U.wait_until(function()
        local p = U.tagged(tag)[1]
        local s = p and U.read_file("/proc/" .. p .. "/stat")
        return s and s:match("%) T")
      end, 3000),
      "did not stop"
    )
    T.eq(eng:cancel(id), "canceling")
    local r = U.collect(eng, { id }, 3000)[id]
    T.eq(r.final.state, "canceled")
    gone(tag)
  end)

  test("timeout_ms ends timed_out and kills the tree", function()
    local tag = U.tag()
    local t0 = U.now()
    local r, id = U.run(eng, {
      cmd = { "sh", "-c", "sleep 1000 & sleep 1000" },
      timeout_ms = 200,
      env = { PROCTOR_TEST_TAG = tag },
    })
    local dt = U.now() - t0
    T.eq(r.final.state, "timed_out")
    T.eq(r.final.reason, "timeout")
    T.ok(dt >= 190, "took " .. dt .. " ms for a 200 ms timeout (a floor the engine promises)")
    gone(tag)
    T.eq(eng:cancel(id), "already_terminal")
  end)

  test("force cancel kills at once", function()
    -- A grace of 120 s: an end within 30 s is the force, not the grace.
    local tag = U.tag()
    local id = assert(eng:start {
      cmd = { "sh", "-c", "trap '' TERM; sleep 1000" },
      env = { PROCTOR_TEST_TAG = tag },
      kill_grace_ms = 120000,
    })
    T.defer(function() eng:cancel(id, true) end)
    T.ok(U.wait_until(function() return #U.tagged(tag) >= 2 end, 5000)) -- sh and sleep: the trap is set
    T.eq(eng:cancel(id, true), "canceling")
    local r = U.collect(eng, { id }, 30000)[id]
    T.eq(r.final.signal, "SIGKILL")
    -- escalation of a pending cancel
    local id2 = assert(eng:start {
      cmd = { "sh", "-c", "trap '' TERM; echo ready; sleep 1000" },
      kill_grace_ms = 120000,
    })
    T.defer(function() eng:cancel(id2, true) end)
    U.wait_output(eng, id2, "ready")
    T.eq(eng:cancel(id2), "canceling")
    T.eq(eng:cancel(id2, { force = true }), "already_canceling")
    r = U.collect(eng, { id2 }, 30000)[id2]
    T.eq(r.final.signal, "SIGKILL", "escalation killed it")
  end)

  test("pty jobs get SIGHUP first; a HUP-ignoring pty job still dies", function()
    -- A long grace: on a loaded machine the HUP trap may run late, and a
    -- SIGKILL at the engine's 400 ms would pre-empt what this checks. The
    -- traps are set once "ready" is out.
    local id = assert(eng:start {
      cmd = {
        "sh",
        "-c",
        "trap 'echo HUP; exit 7' HUP; trap '' TERM; echo ready; " .. "while :; do sleep 0.01; done",
      },
      pty = true,
      kill_grace_ms = 30000,
    })
    T.defer(function() eng:cancel(id, true) end)
    U.wait_output(eng, id, "ready", 10000)
    T.eq(eng:cancel(id), "canceling")
    local r = U.collect(eng, { id }, 30000)[id]
    T.eq(r.final.state, "canceled")
    T.match((r.out.pty or ""):gsub("\r", ""), "\nHUP\n") -- the trap ran (dash may say Hangup for its sleep first)
    T.eq(r.final.exit_code, 7)
    local r2, _, tag = cancel_tree(
      { "sh", "-c", "trap '' HUP TERM; sleep 1000" },
      2,
      { pty = true, kill_grace_ms = 100 }
    )
    T.eq(r2.final.state, "canceled")
    gone(tag)
  end)

  test("races of natural exit against cancel: one terminal event each, contract holds", function()
    local e2 = assert(core.new { max_running = 64, history_limit = 100000, drain_ms = 100 })
    local N = U.count(ctx, "RACES", 10000, 2000, 500)
    local answers = {}
    local ids = {}
    -- The first cancel of an execution nobody else cancels: either it decides
    -- the end (canceling) or the exit came first (already_terminal). Never
    -- already_canceling, never not_found.
    local allowed = { canceling = true, already_terminal = true }
    -- A window of 64 executions in flight (as many as run at once), refilled
    -- as each is answered. Each execution is canceled at a point of its own
    -- lifecycle chosen by i % 4: at once (queued), when `starting` is seen,
    -- when `running` is seen (the exit may come any moment), or 2 ms after
    -- `running` — so the exit/cancel race is real whatever the machine's speed.
    local seen = {}
    local function cancel(id)
      local a = e2:cancel(id)
      T.ok(allowed[a], "bad answer " .. tostring(a))
      answers[id] = a
    end
    local WINDOW = 64
    local pending, npending = {}, 0 -- id -> mode, not answered yet
    local i = 0
    local stall = U.now() + 20000 -- no answer for this long: stop waiting for the rest
    while (#ids < N or npending > 0) and U.now() < stall do
      while #ids < N and npending < WINDOW do
        i = i + 1
        local id = assert(e2:start { cmd = { U.true_bin } })
        ids[#ids + 1] = id
        if i % 4 == 0 then
          cancel(id)
        else
          pending[id] = i % 4
          npending = npending + 1
        end
      end
      for _, ev in ipairs(e2:wait(5, 65536)) do
        if ev.type == "state" then
          seen[ev.id] = seen[ev.id] or {}
          seen[ev.id][ev.state] = U.now()
          seen[ev.id].n = (seen[ev.id].n or 0) + (U.terminal[ev.state] and 1 or 0)
          seen[ev.id].last = ev.state
        end
      end
      for id, mode in pairs(pending) do
        local s = seen[id]
        if s then
          local go = (mode == 1 and s.starting)
            or (mode == 2 and s.running)
            or (mode == 3 and s.running and U.now() - s.running >= 2)
            or s.n == 1
          if go then
            cancel(id)
            pending[id] = nil
            npending = npending - 1
            stall = U.now() + 20000
          end
        end
      end
    end
    -- the rest of the events
    local function all_done()
      for _, id in ipairs(ids) do
        if not (seen[id] and seen[id].n >= 1) then return false end
      end
      return true
    end
    local deadline = U.now() + 60000
    while not all_done() and U.now() < deadline do
      for _, ev in ipairs(e2:wait(50, 65536)) do
        if ev.type == "state" then
          seen[ev.id] = seen[ev.id] or {}
          seen[ev.id].n = (seen[ev.id].n or 0) + (U.terminal[ev.state] and 1 or 0)
          seen[ev.id].last = ev.state
        end
      end
    end
    -- A fence: events come out in order, so once a later execution's end is
    -- seen, a second terminal event of any earlier one would have been too.
    local fence = assert(e2:start { cmd = { "true" } })
    local fenced = false
    local fdeadline = U.now() + 30000
    while not fenced and U.now() < fdeadline do
      for _, ev in ipairs(e2:wait(50, 65536)) do
        if ev.type == "state" and U.terminal[ev.state] then
          if ev.id == fence then
            fenced = true
          elseif seen[ev.id] then
            seen[ev.id].n = seen[ev.id].n + 1
          end
        end
      end
    end
    T.ok(fenced, "the fence execution never ended")
    local canceled = 0
    for _, id in ipairs(ids) do
      local s = seen[id]
      T.eq(s and s.n, 1, "terminal events of " .. id)
      T.eq(
        s.last == "canceled",
        answers[id] == "canceling",
        ("id %d answered %s ended %s"):format(id, answers[id], s.last)
      )
      if s.last == "canceled" then canceled = canceled + 1 end
    end
    T.ok(canceled > 0 and canceled < N, "no real race: " .. canceled .. "/" .. N .. " canceled")
    e2:close()
  end)

  test("cancel/delete of an ended execution never signal a process that reuses its pid", function()
    -- tests/lua/pid_reuse.lua, in a pid namespace of its own: its writes of
    -- ns_last_pid are private and nothing else forks there, so the kernel
    -- hands out the pid it is asked for (the machine-wide counter would be
    -- raced by every other process, and writing it disturbs them).
    local script = U.root .. "/tests/lua/pid_reuse.lua"
    local cmd
    if ctx and ctx.nvim then
      cmd = ("'%s' --headless -u NONE -i NONE -n --cmd 'set rtp^=%s' -c 'luafile %s'"):format(
        vim.v.progpath,
        U.root,
        script
      )
    else
      cmd = ("'%s' '%s'"):format(os.getenv("LUA") or "lua5.4", script)
    end
    local out =
      U.sh("timeout -k 5 120 unshare --pid --fork --mount-proc --kill-child " .. cmd .. " 2>&1")
    T.ok(out:find("^ok\n") or out:find("\nok\n"), "in its pid namespace: " .. out)
  end)

  test(
    "the shepherd's death ends live executions as supervisor_lost; the next start works",
    function()
      local e2 = assert(core.new {})
      T.defer(function() e2:close() end)
      local tag = U.tag()
      local id = assert(
        e2:start { cmd = { "sh", "-c", "sleep 1000 & sleep 1000" }, env = { PROCTOR_TEST_TAG = tag } }
      )
      U.wait_state(e2, id, "running")
      local pid = e2:get(id).pid
      local shepherd = U.ppid(U.ppid(pid)) -- the leader's parent is its job's reaper, a child of the shepherd
      T.ok(shepherd and shepherd > 1)
      T.match(U.read_file("/proc/" .. shepherd .. "/cmdline") or "", "proctor%-shepherd")
      os.execute("kill -9 " .. shepherd)
      local r = U.collect(e2, { id }, 10000)[id]
      T.eq(r.final.state, "failed")
      T.eq(r.final.reason, "supervisor_lost")
      T.ok(
        U.wait_until(function() return #U.tagged(tag) == 0 end, 10000),
        "jobs survived the shepherd: " .. T.fmt(U.tagged(tag))
      )
      local r2 = U.run(e2, { cmd = { "sh", "-c", "echo again" } })
      T.eq(r2.out.stdout, "again\n")
    end
  )

  -- Retention removes the oldest terminal record as each one ends: the
  -- executions the shepherd's death ends include the oldest record itself.
  test("the shepherd's death with history_limit = 1 ends every live execution", function()
    local e2 = assert(core.new { history_limit = 1 })
    local tag = U.tag()
    local long = { cmd = { "sleep", "1000" }, env = { PROCTOR_TEST_TAG = tag } }
    local a = assert(e2:start(long))
    U.wait_state(e2, a, "running")
    U.run(e2, { cmd = { "true" } }) -- a terminal record between the live ones
    local c = assert(e2:start(long))
    U.wait_state(e2, c, "running")
    local shepherd = U.ppid(U.ppid(e2:get(a).pid)) -- leader -> its reaper -> the shepherd
    T.match(U.read_file("/proc/" .. shepherd .. "/cmdline") or "", "proctor%-shepherd")
    os.execute("kill -9 " .. shepherd)
    local res = U.collect(e2, { a, c }, 5000)
    for _, id in ipairs({ a, c }) do
      T.eq(res[id].final and res[id].final.reason, "supervisor_lost", "execution " .. id)
    end
    T.ok(
      U.wait_until(function() return #U.tagged(tag) == 0 end, 1000),
      "jobs survived the shepherd"
    )
    local r = U.run(e2, { cmd = { "sh", "-c", "echo again" } })
    T.eq(r.out.stdout, "again\n")
    e2:close()
  end)

  test("close() cancels everything, is bounded, and leaves nothing", function()
    local e2 = assert(core.new { kill_grace_ms = 300 })
    T.defer(function() e2:close() end)
    local tag = U.tag()
    local ids = {}
    for _, pty in ipairs({ false, true }) do
      ids[#ids + 1] = assert(e2:start {
        cmd = { "sh", "-c", "trap '' TERM HUP; sleep 1000 & sleep 1000" },
        pty = pty,
        env = { PROCTOR_TEST_TAG = tag },
      })
      ids[#ids + 1] = assert(e2:start {
        cmd = { "sh", "-c", "setsid sleep 1000 & sleep 1000" },
        pty = pty,
        env = { PROCTOR_TEST_TAG = tag },
      })
    end
    T.ok(U.wait_until(function() return #U.tagged(tag) >= 10 end, 10000))
    -- close() returns (the harness bounds the test) and leaves nothing
    local t0 = U.now()
    e2:close()
    T.say(("# close() with 8 TERM-ignoring or escaping jobs: %.0f ms"):format(U.now() - t0))
    T.ok(
      U.wait_until(function() return #U.tagged(tag) == 0 end, 5000),
      "left: " .. T.fmt(U.tagged(tag))
    )
    -- the events up to the terminal ones are still there
    local r = U.collect(e2, ids, 1000)
    for _, id in ipairs(ids) do
      T.eq(r[id].final.state, "canceled")
    end
    T.eq(r[ids[1]].final.reason, "engine_closed")
    T.eq(select(3, e2:start { cmd = { "true" } }), "ECLOSED")
  end)

  test("garbage collection of an engine shuts it down and leaves nothing", function()
    local tag = U.tag()
    do
      local e2 = assert(core.new { kill_grace_ms = 200 })
      assert(e2:start { cmd = { "sleep", "1000" }, env = { PROCTOR_TEST_TAG = tag } })
      T.ok(U.wait_until(function() return #U.tagged(tag) == 1 end, 5000))
      e2 = nil -- luacheck: no unused (the block's register would keep the engine alive)
    end
    collectgarbage()
    collectgarbage()
    T.ok(U.wait_until(function() return #U.tagged(tag) == 0 end, 10000))
  end)

  test("SIGKILL of a lua5.4 host: every descendant gone", function()
    local tag = U.tag()
    local dir = U.tmpdir()
    T.defer(function() U.rmrf(dir) end)
    local script = dir .. "/host.lua"
    U.write_file(
      script,
      ([[
      package.cpath = %q .. "/build/lua5.4/?.so;" .. package.cpath
      local core = require("proctor.core")
      local eng = assert(core.new{})
      local env = { PROCTOR_TEST_TAG = %q }
      eng:start{ cmd = {"sleep", "1000"}, env = env }
      eng:start{ cmd = "sleep 1000 & sleep 1000", env = env }
      eng:start{ cmd = {"sleep", "1000"}, env = env, pty = true }
      eng:start{ cmd = "trap '' HUP; sleep 1000", env = env, pty = true }
      eng:start{ cmd = "trap '' TERM; sleep 1000", env = env }
      eng:start{ cmd = "setsid sleep 1000 & sleep 1000", env = env }
      io.stdout:write("ready\n"); io.stdout:flush()
      while true do eng:wait(1000) end
    ]]):format(U.root, tag)
    )
    local host = tonumber(U.sh("lua5.4 " .. script .. " >/dev/null 2>&1 & echo $!"))
    T.ok(host)
    T.defer(function() U.kill9(host) end)
    T.ok(
      U.wait_until(function() return #U.tagged(tag) >= 10 end, 10000),
      "jobs did not start: " .. #U.tagged(tag)
    )
    U.kill9(host)
    local t0 = U.now()
    -- The shepherd sees its host's socket close and kills every job: a
    -- condition, waited for with a deadline for the failure message only.
    local cleared = U.wait_until(function() return #U.tagged(tag) == 0 end, 30000, 5)
    local dt = U.now() - t0
    T.ok(cleared, "left after 30 s: " .. T.fmt(U.tagged(tag)))
    T.say(("# SIGKILL of a lua5.4 host: every descendant gone in %.0f ms"):format(dt))
  end)

  eng:close()
end
