-- spec_stop.lua — stopping an execution: cancel works in every live state
-- (also while the leader is gone and a background process holds a stream
-- open), the drain ends also with back-pressure, and the whole group gets
-- the grace period (SIGTERM to the group, SIGKILL to what is left at the
-- deadline; the end comes when the group is empty or the deadline passed).
-- See also spec_kill.lua.
local U = require("util")
local core = U.core

return function(T, ctx)
  local P = ctx and ctx.nvim and "nvim: " or ""
  local function test(name, fn) T.test(P .. "stop: " .. name, fn) end

  -- Start `cmd` (which prints "ready" once its background part runs, then
  -- its leader exits) and wait until the engine has seen the leader's exit
  -- while the execution still runs (draining). Returns the id and the tag.
  local function draining(eng, cmd, opts)
    local tag = U.tag()
    local spec = { cmd = cmd, env = { PROCTOR_TEST_TAG = tag } }
    for k, v in pairs(opts or {}) do
      spec[k] = v
    end
    local id = assert(eng:start(spec))
    U.wait_output(eng, id, "ready", 10000)
    T.ok(
      U.wait_until(function() return eng:get(id).exit_code ~= nil end, 10000),
      "the leader's exit was not seen"
    )
    T.eq(eng:get(id).state, "running", "draining: the execution still runs")
    return id, tag
  end

  -- A file the test may create (a private directory, removed by the caller).
  -- After cancel!: the execution ends canceled while its 120 s grace still
  -- runs (the wait for its end gives up at half the grace: a condition wait,
  -- no wall bound), and nothing of its job is left.
  local function killed_at_once(eng, id, tag, why)
    local r = U.collect(eng, { id }, 60000)[id]
    T.eq(r.final.state, "canceled", why)
    T.ok(
      U.wait_until(function() return #U.tagged(tag) == 0 end, 2000),
      "left: " .. T.fmt(U.tagged(tag))
    )
  end

  local function tmpdir() return (U.sh("mktemp -d"):gsub("%s+$", "")) end

  test(
    "cancel while draining kills what holds the pipe; the end is canceled, exit code kept",
    function()
      local eng = assert(core.new { drain_ms = 60000 }) -- the drain alone would wait for minutes
      local ok, err = pcall(function()
        local id, tag = draining(eng, { "sh", "-c", "sleep 1000 & echo ready; exit 3" })
        -- the background part may still be the shell's fork on its way to
        -- exec (two processes with the tag for a moment): count once it runs
        T.ok(U.wait_comm(tag, "sleep"), "the background sleep never ran")
        T.eq(#U.tagged(tag), 1, "the background sleep holds stdout")
        T.eq(eng:cancel(id), "canceling")
        -- the second is never "canceling"; the execution may have ended already
        -- (the sleep dies of its SIGTERM at once) on a loaded machine
        local again = eng:cancel(id)
        T.ok(
          again == "already_canceling" or again == "already_terminal",
          "a second cancel answered " .. tostring(again)
        )
        local r = U.collect(eng, { id }, 20000)[id]
        T.eq(r.final.state, "canceled")
        T.eq(r.final.reason, "canceled")
        T.eq(r.final.exit_code, 3, "the leader's own exit code")
        T.ok(
          U.wait_until(function() return #U.tagged(tag) == 0 end, 2000),
          "left: " .. T.fmt(U.tagged(tag))
        )
        T.eq(eng:cancel(id), "already_terminal")
      end)
      eng:close()
      assert(ok, err)
    end
  )

  test("cancel! while draining kills a TERM-ignoring holder at once", function()
    local eng = assert(core.new { drain_ms = 60000 })
    local ok, err = pcall(function()
      local id, tag = draining(
        eng,
        { "sh", "-c", "(trap '' TERM; exec sleep 1000) & echo ready; exit 0" },
        { kill_grace_ms = 120000 }
      )
      T.eq(eng:cancel(id, true), "canceling")
      killed_at_once(eng, id, tag, "the force did not kill before the grace")
    end)
    eng:close()
    assert(ok, err)
  end)

  -- A consumer that takes what is there every 200 ms: `yes` refills the
  -- ring at once, so its stream is paused nearly all the time.
  local function slow_collect(eng, id, limit_ms)
    local deadline = U.now() + limit_ms
    while U.now() < deadline do
      U.sleep(200)
      U.pump(eng, 0) -- takes every event, so the output too: the stream resumes
      if U.terminal[eng:get(id).state] then return U.collect(eng, { id }, 10000)[id] end
    end
  end

  test(
    "with back-pressure the drain is bounded: sh -c 'yes & exit 0' ends, yes is killed",
    function()
      local eng = assert(core.new { drain_ms = 100, output_limit = 65536 })
      local ok, err = pcall(function()
        local id, tag = draining(
          eng,
          { "sh", "-c", "yes & echo ready; exit 0" },
          { backpressure = true }
        )
        local r = slow_collect(eng, id, 30000)
        T.ok(r, "still " .. eng:get(id).state .. " after 30 s (drain cap 5 s)")
        T.eq(r.final.state, "completed")
        T.ok(
          U.wait_until(function() return #U.tagged(tag) == 0 end, 2000),
          "left: " .. T.fmt(U.tagged(tag))
        )
      end)
      eng:close()
      assert(ok, err)
    end
  )

  test("with back-pressure cancel stops sh -c 'yes & exit 0'", function()
    local eng = assert(core.new { drain_ms = 60000, output_limit = 65536 })
    local ok, err = pcall(function()
      local id, tag = draining(
        eng,
        { "sh", "-c", "yes & echo ready; exit 0" },
        { backpressure = true }
      )
      T.eq(eng:cancel(id), "canceling")
      local r = slow_collect(eng, id, 30000)
      T.ok(r, "still " .. eng:get(id).state .. " 30 s after cancel")
      T.eq(r.final.state, "canceled")
      T.ok(
        U.wait_until(function() return #U.tagged(tag) == 0 end, 2000),
        "left: " .. T.fmt(U.tagged(tag))
      )
    end)
    eng:close()
    assert(ok, err)
  end)

  test(
    "the group gets the grace: a child shutting down cleanly after its leader exited finishes",
    function()
      -- The leader exits at once on SIGTERM; its child takes 300 ms to flush
      -- (it writes a file) before it exits. Killing the rest of the group when
      -- the leader exits would cut that short.
      local eng = assert(core.new { drain_ms = 200 })
      local dir = tmpdir()
      local ok, err = pcall(function()
        local tag = U.tag()
        local flushed = dir .. "/flushed"
        local id = assert(eng:start {
          cmd = {
            "sh",
            "-c",
            "trap 'exit 0' TERM; sh -c 'trap \"sleep 0.3; echo done > $1; exit 0\" TERM; sleep 1000 & wait' _ "
              .. flushed
              .. " & echo ready; wait",
          },
          env = { PROCTOR_TEST_TAG = tag },
          kill_grace_ms = 20000,
        })
        U.wait_output(eng, id, "ready")
        T.ok(
          U.wait_until(function() return #U.tagged(tag) >= 3 end, 5000),
          "the tree did not start"
        )
        -- sleep runs: the inner sh has exec'd and set its trap (a fork on its
        -- way there would lose the TERM to the outer shell's handler)
        T.ok(U.wait_comm(tag, "sleep"), "the inner sleep runs")
        T.eq(eng:cancel(id), "canceling")
        local r = U.collect(eng, { id }, 30000)[id]
        T.eq(r.final.state, "canceled")
        T.eq(U.read_file(flushed), "done\n", "the child was killed before it had flushed")
        T.ok(
          U.wait_until(function() return #U.tagged(tag) == 0 end, 2000),
          "left: " .. T.fmt(U.tagged(tag))
        )
      end)
      os.execute("rm -rf '" .. dir .. "'")
      eng:close()
      assert(ok, err)
    end
  )

  test(
    "cancel! while the rest of the group has its grace (leader gone) kills it at once",
    function()
      local eng = assert(core.new { drain_ms = 200 })
      local ok, err = pcall(function()
        local tag = U.tag()
        local id = assert(eng:start {
          cmd = {
            "sh",
            "-c",
            "trap 'exit 0' TERM; (trap '' TERM; exec sleep 1000) >/dev/null 2>&1 & echo ready; wait",
          },
          env = { PROCTOR_TEST_TAG = tag },
          kill_grace_ms = 120000,
        })
        U.wait_output(eng, id, "ready")
        local leader = eng:get(id).pid
        T.ok(
          U.wait_until(function() return #U.tagged(tag) >= 2 end, 5000),
          "the tree did not start"
        )
        T.eq(eng:cancel(id), "canceling")
        T.ok(
          U.wait_until(function() return not U.alive(leader) end, 10000),
          "the leader ignored its TERM trap"
        )
        T.ok(
          U.wait_until(function() return eng:get(id).exit_code ~= nil end, 10000),
          "the leader's exit was not seen"
        )
        T.eq(#U.tagged(tag), 1, "the TERM-ignoring child has its grace")
        T.eq(eng:cancel(id, true), "already_canceling")
        killed_at_once(eng, id, tag, "the force waited for the grace")
      end)
      eng:close()
      assert(ok, err)
    end
  )
end
