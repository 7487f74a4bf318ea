-- spec_stop.lua — stopping an execution: the whole group gets the grace
-- period (SIGTERM to the group, SIGKILL to what is left at the deadline; the
-- end comes when the group is empty or the deadline passed). See also
-- spec_kill.lua.
local U = require("util")
local core = U.core

return function(T, ctx)
  local P = ctx and ctx.nvim and "nvim: " or ""
  local function test(name, fn) T.test(P .. "stop: " .. name, fn) end

  -- A file the test may create (a private directory, removed by the caller).
  local function tmpdir()
    return (U.sh("mktemp -d"):gsub("%s+$", ""))
  end

  test("the group gets the grace: a child shutting down cleanly after its leader exited finishes", function()
    -- The leader exits at once on SIGTERM; its child takes 300 ms to flush
    -- (it writes a file) before it exits. Killing the rest of the group when
    -- the leader exits would cut that short.
    local eng = assert(core.new{ drain_ms = 200 })
    local dir = tmpdir()
    local ok, err = pcall(function()
      local tag = U.tag()
      local flushed = dir .. "/flushed"
      local id = assert(eng:start{ cmd = { "sh", "-c",
        "trap 'exit 0' TERM; sh -c 'trap \"sleep 0.3; echo done > $1; exit 0\" TERM; sleep 1000 & wait' _ " .. flushed ..
        " & echo ready; wait" },
        env = { PROCTOR_TEST_TAG = tag }, kill_grace_ms = 20000 })
      U.wait_output(eng, id, "ready")
      T.ok(U.wait_until(function() return #U.tagged(tag) >= 3 end, 5000), "the tree did not start")
      T.eq(eng:cancel(id), "canceling")
      local r = U.collect(eng, { id }, 30000)[id]
      T.eq(r.final.state, "canceled")
      T.eq(U.read_file(flushed), "done\n", "the child was killed before it had flushed")
      T.ok(U.wait_until(function() return #U.tagged(tag) == 0 end, 2000), "left: " .. T.fmt(U.tagged(tag)))
    end)
    os.execute("rm -rf '" .. dir .. "'")
    eng:close()
    assert(ok, err)
  end)

  test("cancel! while the rest of the group has its grace (leader gone) kills it at once", function()
    local eng = assert(core.new{ drain_ms = 200 })
    local ok, err = pcall(function()
      local tag = U.tag()
      local id = assert(eng:start{ cmd = { "sh", "-c",
        "trap 'exit 0' TERM; (trap '' TERM; exec sleep 1000) >/dev/null 2>&1 & echo ready; wait" },
        env = { PROCTOR_TEST_TAG = tag }, kill_grace_ms = 120000 })
      U.wait_output(eng, id, "ready")
      local leader = eng:get(id).pid
      T.ok(U.wait_until(function() return #U.tagged(tag) >= 2 end, 5000), "the tree did not start")
      T.eq(eng:cancel(id), "canceling")
      T.ok(U.wait_until(function() return not U.alive(leader) end, 10000), "the leader ignored its TERM trap")
      T.ok(U.wait_until(function() return eng:get(id).exit_code ~= nil end, 10000), "the leader's exit was not seen")
      T.eq(#U.tagged(tag), 1, "the TERM-ignoring child has its grace")
      local t0 = U.now()
      T.eq(eng:cancel(id, true), "already_canceling")
      local r = U.collect(eng, { id }, 60000)[id]
      T.eq(r.final.state, "canceled")
      T.ok(U.now() - t0 < 60000, "the force waited for the grace")
      T.ok(U.wait_until(function() return #U.tagged(tag) == 0 end, 2000), "left: " .. T.fmt(U.tagged(tag)))
    end)
    eng:close()
    assert(ok, err)
  end)
end
