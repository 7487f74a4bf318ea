-- tests/lua/spec_liveness.lua — a job that stops (SIGSTOP) a process proctor
-- relies on: the shepherd (the engine's liveness check kills and replaces
-- it, and its send queue stays bounded meanwhile) or its own reaper (cancel,
-- timeout and close still end it, and nothing survives).
--
-- Every wait is a condition wait with a generous bound; no test asserts a
-- duration.
local U = require("util")
local core = U.core

return function(T, ctx)
  local P = ctx and ctx.nvim and "nvim: " or ""
  local function test(name, fn) T.test(P .. "liveness: " .. name, fn) end

  -- The one-letter state of process `pid` ("S", "T", "Z", ...), or nil when gone.
  local function state_of(pid)
    local s = U.read_file("/proc/" .. pid .. "/stat")
    return s and s:match("%) (%a)")
  end

  local function gone(pids)
    for _, pid in ipairs(pids) do
      if pid and U.alive(pid) then return false end
    end
    return true
  end

  local function cont(pid) -- never leave a stopped process behind a failed test
    if pid and U.alive(pid) then os.execute("kill -CONT " .. math.floor(pid) .. " 2>/dev/null") end
  end

  local function is_shepherd(pid) -- proctor-shepherd, or a job's reaper (a fork of it)
    return (U.read_file("/proc/" .. pid .. "/cmdline") or ""):find("proctor%-shepherd") ~= nil
  end

  -- The reapers of the run tagged `tag`: the parents of its processes that
  -- are forks of the shepherd (found by the tag, so also when a test failed
  -- before it learnt them another way).
  local function reapers_of(tag)
    local found = {}
    for _, pid in ipairs(U.tagged(tag)) do
      local pp = U.ppid(pid)
      if pp and pp > 1 and is_shepherd(pp) then found[#found + 1] = pp end
    end
    return found
  end

  -- A test's cleanup, passed or failed: every reaper it saw (rec.reapers)
  -- or can still find by its tag is continued; one still there after that
  -- (its shepherd gone, or the test's engine is) is killed. Nothing stopped
  -- stays behind a failed test.
  local function settle(tag, rec)
    local pids = reapers_of(tag)
    for _, pid in ipairs(rec.reapers) do
      pids[#pids + 1] = pid
    end
    for _, pid in ipairs(pids) do
      cont(pid)
    end
    for _, pid in ipairs(pids) do
      if not U.wait_until(function() return not U.alive(pid) end, 3000) and is_shepherd(pid) then
        U.kill9(pid)
      end
    end
  end

  -- A running execution carrying PROCTOR_TEST_TAG=tag whose leader is `sleep`;
  -- returns its id, the leader's pid, its reaper's and the shepherd's.
  local function sleeper(eng, tag, spec)
    spec = spec or {}
    spec.cmd = spec.cmd or { "sh", "-c", "echo up; exec sleep 1000" }
    spec.env = { PROCTOR_TEST_TAG = tag }
    local id = assert(eng:start(spec))
    U.wait_output(eng, id, "up", 10000)
    T.ok(U.wait_comm(tag, "sleep"), "the job runs sleep")
    local leader = eng:get(id).pid
    local reaper = U.ppid(leader)
    return id, leader, reaper, U.shepherd(leader)
  end

  -- A job that stops its own reaper (the leader's parent) with SIGSTOP and
  -- then runs sleep; returns id, leader, reaper once the reaper is stopped.
  -- It stops it only once its first output was seen (and the test said
  -- "go"), so the reaper has reported the spawn: always the same race. (A
  -- reaper stopped before that report is tests/c/test_engine.c's
  -- test_reaper_stopped_before_spawned.) The reaper goes into rec.reapers as
  -- soon as it is seen, for settle().
  local function stops_its_reaper(eng, tag, rec, spec)
    spec = spec or {}
    spec.cmd = { "sh", "-c", "echo up; read go; kill -STOP $PPID; exec sleep 1000" }
    spec.env = { PROCTOR_TEST_TAG = tag }
    spec.stdin = true
    local id = assert(eng:start(spec))
    local reaper = U.wait_until(function() return reapers_of(tag)[1] end, 10000)
    rec.reapers[#rec.reapers + 1] = reaper
    T.ok(reaper, "the job's reaper is seen")
    U.wait_output(eng, id, "up", 10000)
    T.eq(eng:input(id, "go\n"), true)
    T.ok(U.wait_comm(tag, "sleep"), "the job runs sleep")
    T.ok(
      U.wait_until(function() return state_of(reaper) == "T" end, 10000),
      "the reaper is stopped"
    )
    local leader = eng:get(id).pid
    T.eq(U.ppid(leader), reaper, "the reaper is the leader's parent")
    return id, leader, reaper
  end

  test(
    "a shepherd stopped by a job is killed and replaced: its executions end failed/supervisor_lost, a stopped reaper is continued and ends, a new start runs",
    function()
      local eng = assert(core.new {})
      local tag = U.tag()
      local shep
      local rec = { reapers = {} }
      local ok, err = pcall(function()
        -- a job that stopped its own reaper first: only the sweep's SIGCONT
        -- lets that reaper take its shepherd's death and end
        local a, leader, reaper = stops_its_reaper(eng, tag, rec)
        shep = U.shepherd(leader)
        T.ok(shep, "the shepherd above the job")
        -- a job stops the shepherd (its grandparent: leader -> reaper -> shepherd)
        local b = assert(eng:start {
          cmd = { "sh", "-c", "kill -STOP " .. shep .. "; echo stopped; exec sleep 1000" },
          env = { PROCTOR_TEST_TAG = tag },
        })
        T.ok(
          U.wait_until(function() return state_of(shep) == "T" end, 10000),
          "the shepherd is stopped"
        )
        -- a start while it is stopped: old code left it `starting` for ever
        local c = assert(eng:start { cmd = { "true" } })
        local r = U.collect(eng, { a, b, c }, 20000)
        for _, id in ipairs({ a, b }) do
          T.eq(r[id].final and r[id].final.state, "failed", "execution " .. id)
          T.eq(r[id].final and r[id].final.reason, "supervisor_lost", "execution " .. id)
        end
        -- c went to the stopped shepherd (lost with it) or, if it came late, to the next one
        local fc = r[c].final or {}
        T.ok(
          (fc.state == "failed" and fc.reason == "supervisor_lost") or fc.state == "completed",
          "the start made while it was stopped: "
            .. tostring(fc.state)
            .. "/"
            .. tostring(fc.reason)
        )
        T.ok(
          U.wait_until(function() return not U.alive(shep) end, 10000),
          "the stopped shepherd was killed"
        )
        T.ok(
          U.wait_until(
            function() return gone({ leader, reaper }) and #U.tagged(tag) == 0 end,
            10000
          ),
          "its jobs were killed: "
            .. table.concat(U.tagged(tag), ",")
            .. "; the stopped reaper "
            .. tostring(state_of(reaper))
        )
        -- and the engine goes on with a new shepherd
        local d = U.run(eng, { cmd = { "sh", "-c", "echo fine" } }, 20000)
        T.eq(d.final and d.final.state, "completed")
        T.eq(d.out.stdout, "fine\n")
      end)
      cont(shep)
      eng:close()
      settle(tag, rec)
      assert(ok, err)
    end
  )

  test(
    "a burst of starts against a stopped shepherd: the send queue is bounded, starts past it fail EBUSY",
    function()
      local eng = assert(core.new {})
      local tag = U.tag()
      local shep
      local ok, err = pcall(function()
        local a, _, _, sh = sleeper(eng, tag)
        shep = sh
        os.execute("kill -STOP " .. shep)
        T.ok(
          U.wait_until(function() return state_of(shep) == "T" end, 10000),
          "the shepherd is stopped"
        )
        -- 300 spawn requests of ~60 KB each (18 MB) cannot all be held
        local big = string.rep("x", 60000)
        local ids = { a }
        for _ = 1, 300 do
          ids[#ids + 1] = assert(eng:start { cmd = { "true" }, env = { BIG = big } })
        end
        local r = U.collect(eng, ids, 60000)
        local busy, lost, done, other = 0, 0, 0, {}
        for i = 2, #ids do
          local f = r[ids[i]].final or {}
          if
            f.state == "failed"
            and f.reason == "spawn_error"
            and (f.error or ""):find("^EBUSY: ")
          then
            busy = busy + 1
          elseif f.state == "failed" and f.reason == "supervisor_lost" then
            lost = lost + 1
          elseif f.state == "completed" then
            done = done + 1 -- only if the shepherd was replaced before the burst ended
          else
            other[#other + 1] = tostring(f.state)
              .. "/"
              .. tostring(f.reason)
              .. "/"
              .. tostring(f.error)
          end
        end
        T.eq(#other, 0, "every start ended: " .. table.concat(other, "; ", 1, math.min(#other, 3)))
        T.ok(
          busy > 0,
          ("starts past the bound fail EBUSY (busy %d, lost %d, completed %d)"):format(
            busy,
            lost,
            done
          )
        )
        -- what was held for the stopped shepherd is bounded: at most the queue's
        -- 4 MiB plus what its socket took, far below the 300 asked for
        T.ok(lost <= 150, ("held for the stopped shepherd: %d spawn requests"):format(lost))
        T.eq(r[a].final and r[a].final.reason, "supervisor_lost")
        T.ok(
          U.wait_until(function() return not U.alive(shep) end, 10000),
          "the stopped shepherd was killed"
        )
        local d = U.run(eng, { cmd = { "true" } }, 20000)
        T.eq(d.final and d.final.state, "completed", "a start after that runs")
      end)
      cont(shep)
      eng:close()
      assert(ok, err)
    end
  )

  test("a job that stops its reaper is still canceled, and nothing of it survives", function()
    local eng = assert(core.new { kill_grace_ms = 300 })
    local tag = U.tag()
    local rec = { reapers = {} }
    local ok, err = pcall(function()
      local id, leader, reaper = stops_its_reaper(eng, tag, rec)
      T.eq(eng:cancel(id), "canceling")
      local r = U.collect(eng, { id }, 20000)[id]
      T.eq(r.final and r.final.state, "canceled")
      T.ok(
        U.wait_until(function() return gone({ leader, reaper }) and #U.tagged(tag) == 0 end, 10000),
        "the stopped reaper and the job are gone"
      )
      -- the engine and its shepherd go on
      T.eq(U.run(eng, { cmd = { "true" } }, 20000).final.state, "completed")
    end)
    eng:close()
    settle(tag, rec)
    assert(ok, err)
  end)

  test("a job that stops its reaper still times out, and nothing of it survives", function()
    local eng = assert(core.new { kill_grace_ms = 300 })
    local tag = U.tag()
    local rec = { reapers = {} }
    local ok, err = pcall(function()
      -- the timeout must fire after the stop: long enough for the steps
      -- before it, which wait for conditions, on a loaded machine
      local id, leader, reaper = stops_its_reaper(eng, tag, rec, { timeout_ms = 5000 })
      local r = U.collect(eng, { id }, 20000)[id]
      T.eq(r.final and r.final.state, "timed_out")
      T.ok(
        U.wait_until(function() return gone({ leader, reaper }) and #U.tagged(tag) == 0 end, 10000),
        "the stopped reaper and the job are gone"
      )
    end)
    eng:close()
    settle(tag, rec)
    assert(ok, err)
  end)

  test("closing the engine kills a stopped reaper and its job", function()
    local eng = assert(core.new {})
    local tag = U.tag()
    local reaper, leader
    local rec = { reapers = {} }
    local ok, err = pcall(function()
      local _
      _, leader, reaper = stops_its_reaper(eng, tag, rec)
    end)
    eng:close()
    T.ok(
      ok
        and U.wait_until(
          function() return gone({ leader, reaper }) and #U.tagged(tag) == 0 end,
          10000
        ),
      "after close: " .. tostring(err) .. " reaper " .. tostring(reaper and state_of(reaper))
    )
    settle(tag, rec)
  end)
end
