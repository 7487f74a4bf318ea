-- spec_spawn.lua — what a child starts with. The shepherd starts children with
-- clone(CLONE_VM | CLONE_VFORK) on a stack of its own (csrc/shepherd/spawn.c): these
-- show the child gets its own PATH, signal state and descriptors, and that
-- nothing it does leaks back into the shepherd or the next child.
local U = require("util")
local core = U.core

return function(T, ctx)
  local P = ctx and ctx.nvim and "nvim: " or ""
  local function test(name, fn) T.test(P .. "spawn: " .. name, fn) end

  test("the child's PATH finds its program; the next child uses the host's PATH again", function()
    local eng = assert(core.new {})
    T.defer(function() eng:close() end)
    local dir = U.tmpdir()
    T.defer(function() U.rmrf(dir) end)
    local f = assert(io.open(dir .. "/proctor-only-here", "w"))
    f:write("#!/bin/sh\necho found-in-child-path\n")
    f:close()
    assert(os.execute("chmod 755 " .. dir .. "/proctor-only-here"))
    local r =
      U.run(eng, { cmd = { "proctor-only-here" }, env = { PATH = dir .. ":/usr/bin:/bin" } })
    T.eq(r.final.state, "completed", tostring(r.final.error))
    T.eq(r.out.stdout, "found-in-child-path\n")
    r = U.run(eng, { cmd = { "proctor-only-here" } })
    T.eq(r.final.reason, "spawn_error", "the shepherd's own environment was not changed")
    T.match(r.final.error, "No such file")
    r = U.run(eng, { cmd = { "sh", "-c", "echo $PATH" } })
    T.eq(r.out.stdout, os.getenv("PATH") .. "\n")
  end)

  test("children start with default signal dispositions and an empty signal mask", function()
    local eng = assert(core.new {})
    for _, pty in ipairs({ false, true }) do
      local r = U.run(eng, { cmd = { "sh", "-c", "exec cat /proc/self/status" }, pty = pty })
      local out = r.out.stdout or r.out.pty
      T.match(out, "SigBlk:%s+0000000000000000", "mask, pty=" .. tostring(pty))
      -- SIGPIPE, and glibc's internal 32 and 33 that posix_spawn leaves ignored
      T.match(out, "SigIgn:%s+0000000000000000", "ignored, pty=" .. tostring(pty))
      T.match(out, "SigCgt:%s+0000000000000000", "caught, pty=" .. tostring(pty))
    end
    eng:close()
  end)

  test("a burst of children of every kind: each gets its own descriptors and session", function()
    local eng = assert(core.new { max_running = 40 })
    local ids, want = {}, {}
    -- 300 (100 of each kind); 99 on a light run (tests/README.md)
    local N = U.count(ctx, "SPAWN_BURST", 300, 300, 99)
    -- the shell's session id, field 6 of /proc/$$/stat, read by a builtin:
    -- every fork costs milliseconds on a loaded machine (ps | tr were two)
    local SID = "read -r _ _ _ _ _ s _ < /proc/$$/stat; "
    for i = 1, N do
      local kind = i % 3
      local spec
      if kind == 0 then
        spec = {
          cmd = {
            "sh",
            "-c",
            SID .. "echo n" .. i .. " $(ls /proc/self/fd | wc -l) $s=$$",
          },
        }
      elseif kind == 1 then
        spec = {
          cmd = { "sh", "-c", "read x; " .. SID .. "echo $x $s=$$" },
          stdin = true,
        }
      else
        spec = {
          cmd = {
            "sh",
            "-c",
            SID .. "echo n" .. i .. " $(tty) $s=$$",
          },
          pty = true,
        }
      end
      ids[i] = assert(eng:start(spec))
      if kind == 1 then assert(eng:input(ids[i], "n" .. i .. "\n")) end
      want[ids[i]] = { i = i, kind = kind }
    end
    local res = U.collect(eng, ids, 60000)
    for _, id in ipairs(ids) do
      local w, r = want[id], res[id]
      T.eq(r.final.state, "completed", "#" .. w.i .. ": " .. tostring(r.final.error))
      local out = (r.out.stdout or r.out.pty or ""):gsub("\r", "")
      local sid, pid = out:match("(%d+)=(%d+)\n$")
      T.ok(sid and sid == pid, "#" .. w.i .. " leads its own session: " .. out)
      T.eq(out:match("^(n%d+)"), "n" .. w.i, "its own output")
      -- ls itself opens its directory: 0, 1, 2 and that one (plus the pipe of $(...))
      if w.kind == 0 then T.match(out, "^n%d+ [45] ", "only 0, 1, 2 inherited: " .. out) end
      if w.kind == 2 then
        T.match(out, "^n%d+ /dev/pts/%d+ ", "the pty is its terminal: " .. out)
      end
    end
    eng:close()
  end)

  test("finished executions of every kind leave no descriptor open in the host", function()
    local pid = io.open("/proc/self/stat"):read("l"):match("^(%d+)")
    local list = os.tmpname()
    local function fds()
      collectgarbage() -- engines of earlier tests that nothing references close now
      collectgarbage()
      -- Not io.popen: the write end of its own pipe may still be open here
      -- while ls lists this process (it is closed after the spawn returns).
      os.execute("ls /proc/" .. pid .. "/fd > " .. list)
      local n = 0
      for _ in io.lines(list) do
        n = n + 1
      end
      return n
    end
    local eng = assert(core.new { max_running = 20 })
    T.defer(function() eng:close() end)
    U.run(eng, { cmd = { "true" }, pty = true }) -- the shepherd and its socket exist now
    -- Settled: two readings agree (engines of earlier tests are gone by now).
    local before = fds()
    T.ok(
      U.wait_until(function()
        local again = fds()
        local same = again == before
        before = again
        return same
      end, 10000, 100),
      "the host's descriptors never settled"
    )
    local ids = {}
    for i = 1, 60 do
      local kind = i % 3
      ids[i] =
        assert(eng:start { cmd = { "sh", "-c", "echo x" }, pty = kind == 0, stdin = kind == 1 })
    end
    U.collect(eng, ids, 30000)
    -- No growth: one leaked descriptor is a failure (a pty master per pty
    -- execution was, before the fix). Closing a handle can lag its
    -- execution's end by a loop turn: wait for it, bounded. An earlier test's
    -- engine may still let go of one meanwhile, so fewer is fine.
    local after
    U.wait_until(function()
      after = fds()
      return after <= before
    end, 5000, 20)
    T.ok(
      after <= before,
      string.format(
        "descriptors in the host: %d before, %d after 60 executions (20 of them pty)",
        before,
        after
      )
    )
  end)
  test(
    "close() with a shepherd that does not read returns; the shepherd and its jobs are killed",
    function()
      local eng = assert(core.new { kill_grace_ms = 500 })
      local tag = U.tag()
      local id = assert(eng:start { cmd = { "sleep", "600" }, env = { PROCTOR_TEST_TAG = tag } })
      local pid = U.wait_state(eng, id, "running").pid
      local shep = U.shepherd(pid)
      T.ok(shep and shep > 1, "the shepherd is above the job (its reaper between)")
      os.execute("kill -STOP " .. shep)
      -- starts pile up: the shepherd's socket fills (60 KiB of environment each),
      -- the rest waits in the engine
      local pad = string.rep("x", 60000)
      for _ = 1, 60 do
        assert(eng:start { cmd = { "true" }, env = { PAD = pad } })
      end
      U.sleep(100)
      local t0 = U.now()
      eng:close()
      local dt = U.now() - t0
      T.say(
        ("# close() with a stopped shepherd and 60 queued starts of 60 KiB: %.0f ms"):format(dt)
      )
      local gone = U.wait_until(function() return not U.alive(shep) end, 3000)
      if not gone then os.execute("kill -CONT " .. shep) end
      T.ok(gone, "the shepherd that did not answer was killed")
      T.ok(
        U.wait_until(function() return #U.tagged(tag) == 0 end, 3000),
        "its job was killed: " .. T.fmt(U.tagged(tag))
      )
    end
  )
end
