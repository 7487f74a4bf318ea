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

  -- POSIX execvp runs a file with no #! line with /bin/sh; musl's (the static shepherd's
  -- libc) does not, so the shepherd does it (csrc/shepherd/spawn.c, exec_as_script).
  test("a program file with no #! line runs with /bin/sh, found by path and along PATH", function()
    local eng = assert(core.new {})
    T.defer(function() eng:close() end)
    local dir = U.tmpdir()
    T.defer(function() U.rmrf(dir) end)
    U.write_file(dir .. "/no-shebang", 'echo "ran by sh: $# [$1] [$2]"\n')
    assert(os.execute("chmod 755 " .. dir .. "/no-shebang"))
    local r = U.run(eng, { cmd = { dir .. "/no-shebang", "a b", "c" } })
    T.eq(r.final.state, "completed", tostring(r.final.error))
    T.eq(r.out.stdout, "ran by sh: 2 [a b] [c]\n")
    r = U.run(eng, { cmd = { "no-shebang", "x" }, env = { PATH = "/nonexistent::" .. dir } })
    T.eq(r.final.state, "completed", tostring(r.final.error))
    T.eq(r.out.stdout, "ran by sh: 1 [x] []\n")
    -- what is not a file to run still fails as before
    U.write_file(dir .. "/not-executable", "echo no\n")
    r = U.run(eng, { cmd = { dir .. "/not-executable" } })
    T.eq(r.final.reason, "spawn_error")
    T.match(r.final.error, "Permission denied")
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

  test(
    "a burst of children of every kind: each gets its own descriptors, group and (a PTY) session",
    function()
      local eng = assert(core.new { max_running = 40 })
      local ids, want = {}, {}
      -- 300 (100 of each kind); 99 on a light run (tests/README.md)
      local N = U.count(ctx, "SPAWN_BURST", 300, 300, 99)
      -- the shell's process group and session, fields 5 and 6 of /proc/$$/stat, read by
      -- a builtin: every fork costs milliseconds on a loaded machine (ps | tr were two)
      local SID = "read -r _ _ _ _ g s _ < /proc/$$/stat; "
      for i = 1, N do
        local kind = i % 3
        local spec
        if kind == 0 then
          spec = {
            cmd = {
              "sh",
              "-c",
              SID .. "echo n" .. i .. " $(ls /proc/self/fd | wc -l) $g:$s=$$",
            },
          }
        elseif kind == 1 then
          spec = {
            cmd = { "sh", "-c", "read x; " .. SID .. "echo $x $g:$s=$$" },
            stdin = true,
          }
        else
          spec = {
            cmd = {
              "sh",
              "-c",
              SID .. "echo n" .. i .. " $(tty) $g:$s=$$",
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
        local pgid, sid, pid = out:match("(%d+):(%d+)=(%d+)\n$")
        T.ok(pgid and pgid == pid, "#" .. w.i .. " leads its own process group: " .. out)
        if w.kind == 2 then
          T.ok(sid == pid, "#" .. w.i .. " (a PTY) leads its own session: " .. out)
        else
          T.ok(sid ~= pid, "#" .. w.i .. " (pipes) stays in the shepherd's session: " .. out)
        end
        T.eq(out:match("^(n%d+)"), "n" .. w.i, "its own output")
        -- ls itself opens its directory: 0, 1, 2 and that one (plus the pipe of $(...))
        if w.kind == 0 then T.match(out, "^n%d+ [45] ", "only 0, 1, 2 inherited: " .. out) end
        if w.kind == 2 then
          T.match(out, "^n%d+ /dev/pts/%d+ ", "the pty is its terminal: " .. out)
        end
      end
      eng:close()
    end
  )

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

  -- Where musl-gcc built the static image, it is the shepherd next to core.so (Makefile):
  -- its exec runs no loader and maps no shared library, and each job's fork of it
  -- (the job's reaper) has fewer pages to copy and to fault in again.
  test("the shepherd next to core.so is the static image where musl-gcc built one", function()
    local so = package.searchpath("proctor.core", package.cpath)
    if not so and vim then so = vim.api.nvim_get_runtime_file("lua/proctor/core.so", false)[1] end
    local dir = assert(so, "core.so not found"):match("^(.*)/[^/]+$")
    local static = io.open(dir .. "/proctor-shepherd-static", "rb")
    if not static then
      T.say("# no proctor-shepherd-static beside core.so (no musl-gcc): nothing to check")
      return
    end
    static:close()
    local eng = assert(core.new {})
    T.defer(function() eng:close() end)
    local id = assert(eng:start { cmd = { "sleep", "1000" } })
    U.wait_state(eng, id, "running")
    local shep = assert(U.shepherd(eng:get(id).pid), "no shepherd above the job")
    local maps = U.read_file("/proc/" .. shep .. "/maps") or ""
    T.eq(eng:cancel(id, true), "canceling")
    U.collect(eng, { id }, 10000)
    T.ok(#maps > 0, "the shepherd's maps were read")
    T.ok(not maps:find("%.so[%.%d]*\n"), "the shepherd maps a shared library:\n" .. maps)
  end)
end
