-- spec_basic.lua — lifecycle, options, output, records, history.
local U = require("util")
local core = U.core

return function(T, ctx)
  local P = ctx and ctx.nvim and "nvim: " or ""
  local function test(name, fn) T.test(P .. "basic: " .. name, fn) end
  local eng = assert(core.new { drain_ms = 200 })

  test("state events come in table order, output before terminal", function()
    local r = U.run(eng, { cmd = { "sh", "-c", "echo out; echo err >&2; exit 0" } })
    T.eq(table.concat(r.states, ","), "queued,starting,running,completed")
    T.eq(r.out.stdout, "out\n")
    T.eq(r.out.stderr, "err\n")
    local seen_terminal = false
    for _, ev in ipairs(r.events) do
      if ev.type == "state" and U.terminal[ev.state] then seen_terminal = true end
      if ev.type == "output" then T.ok(not seen_terminal, "output after terminal") end
    end
    T.eq(r.final.exit_code, 0)
    T.eq(r.final.reason, "exit")
    T.eq(r.events[1].prev, nil)
    T.eq(r.events[2].prev, "queued")
  end)

  test("a terminal state event carries the record as of the end, the one get gives", function()
    local r = U.run(eng, { cmd = { "sh", "-c", "printf abc; exit 3" }, label = "rec" })
    for _, ev in ipairs(r.events) do
      if ev.type == "state" and not U.terminal[ev.state] then T.eq(ev.record, nil, ev.state) end
    end
    local rec = r.final.record
    T.ok(type(rec) == "table", "the terminal event has no record")
    T.eq(rec.id, r.final.id)
    T.eq(rec.state, "failed")
    T.eq(rec.exit_code, 3)
    T.eq(rec.label, "rec")
    T.eq(rec.bytes.stdout, 3)
    T.ok(rec.ended_at and rec.duration_ms and rec.env_keys, "ended_at, duration_ms, env_keys")
    local now = assert(eng:get(r.final.id))
    for k, v in pairs(now) do
      if type(v) ~= "table" then T.eq(rec[k], v, k) end
    end
  end)

  -- eng:state_records(true): every state event, not only a terminal one,
  -- brings the record as of that event, so a host that shows or tells a
  -- state (a bar, an autocmd) never asks the engine thread for it. Without it
  -- (the test above, and every other spec) the events are as they were.
  test(
    "state_records: each state event carries the record as of it, the one get gives then",
    function()
      local e = assert(core.new { drain_ms = 200, max_running = 1 })
      T.eq(e:state_records(true), false, "off until asked")
      T.eq(e:state_records(true), true, "the previous setting")
      -- a runs until it reads a line; b waits queued behind it (max_running 1)
      local a =
        assert(e:start { cmd = { "sh", "-c", "read x; exit 4" }, label = "first", stdin = true })
      local b = assert(e:start { cmd = { "true" }, label = "second" })
      local running = U.wait_state(e, a, "running", 10000)
      local queued = U.wait_state(e, b, "queued", 10000)
      local function same(ev, what)
        local rec = ev.record
        T.ok(type(rec) == "table", what .. ": the event has no record")
        local now = assert(e:get(ev.id))
        T.eq(rec.state, ev.state, what .. ": the record's state is the event's")
        for k, v in pairs(now) do -- a live record's duration_ms counts on
          if type(v) ~= "table" and k ~= "duration_ms" then T.eq(rec[k], v, what .. ": " .. k) end
        end
        for k in pairs(rec) do
          if k ~= "duration_ms" then T.ok(now[k] ~= nil, what .. ": " .. k .. " not in get's") end
        end
        T.ok(rec.env_keys ~= nil and rec.bytes ~= nil, what .. ": the whole record")
        return rec
      end
      local rr = same(running, "running")
      T.ok(rr.pid and rr.pid > 0 and rr.pid == running.pid, "running: the pid " .. tostring(rr.pid))
      T.ok(rr.started_at ~= nil and rr.ended_at == nil, "running: started, not ended")
      T.eq(rr.label, "first")
      local qr = same(queued, "queued")
      T.ok(qr.pid == nil and qr.started_at == nil, "queued: no pid, not started")
      T.eq(qr.cmd[1], "true")
      T.eq(assert(e:input(a, "x\n")), true)
      local r = U.collect(e, { a, b }, 10000)
      for _, id in ipairs({ a, b }) do
        for _, ev in ipairs(r[id].events) do
          if ev.type == "state" then
            T.ok(ev.record and ev.record.state == ev.state and ev.record.id == id, ev.state)
          end
        end
      end
      T.eq(table.concat(r[a].states, ","), "queued,starting,running,failed")
      T.eq(r[a].final.record.exit_code, 4)
      T.eq(r[a].events[2].record.state, "starting")
      -- off again: a non-terminal event comes without it, a terminal one with it
      T.eq(e:state_records(false), true)
      local r2 = U.run(e, { cmd = { "true" } })
      for _, ev in ipairs(r2.events) do
        if ev.type == "state" and not U.terminal[ev.state] then T.eq(ev.record, nil, ev.state) end
      end
      T.ok(r2.final.record ~= nil, "the terminal event keeps its record")
      e:close()
    end
  )

  test("hold: queued until release, never spawned when canceled first (reason kept)", function()
    local p = io.popen("mktemp -d")
    local dir = p:read("l")
    p:close()
    local mark = dir .. "/ran"
    local held = assert(eng:start { cmd = { "sh", "-c", "echo ran > " .. mark }, hold = true })
    local other = assert(eng:start { cmd = { "true" } })
    U.collect(eng, { other }, 10000) -- a later start is not stuck behind the held one
    T.eq(eng:get(held).state, "queued")
    T.eq(io.open(mark) == nil, true, "a held execution ran")
    T.eq(eng:release(held), true)
    local r = U.collect(eng, { held }, 10000)[held]
    T.eq(table.concat(r.states, ","), "queued,starting,running,completed")
    local f = io.open(mark)
    T.ok(f, "released but never ran")
    if f then f:close() end
    os.remove(mark)
    -- released twice, or after its end: a clear refusal
    local _, msg, name = eng:release(held)
    T.eq(name, "ENOTRUNNING")
    T.match(msg, "^ENOTRUNNING")
    T.eq(select(3, eng:release(other)), "ENOTRUNNING")
    T.eq(select(3, eng:release(999999)), "ENOENT")
    local running = assert(eng:start { cmd = { "sleep", "5" } })
    U.wait_state(eng, running, "running", 10000)
    T.eq(select(3, eng:release(running)), "EINVAL", "not held")
    eng:cancel(running)
    -- canceled while held, with a reason: never spawned, the reason recorded
    local h2 = assert(eng:start { cmd = { "sh", "-c", "echo ran > " .. mark }, hold = true })
    T.eq(eng:cancel(h2, { reason = "dependency_failed" }), "canceling")
    r = U.collect(eng, { h2, running }, 10000)
    T.eq(table.concat(r[h2].states, ","), "queued,canceled")
    T.eq(r[h2].final.reason, "dependency_failed")
    T.eq(eng:get(h2).reason, "dependency_failed")
    T.eq(eng:get(h2).started_at, nil)
    T.eq(r[running].final.reason, "canceled", "the default reason")
    T.eq(io.open(mark) == nil, true, "a held execution canceled before release ran")
    T.eq(select(3, eng:release(h2)), "ENOTRUNNING")
    -- a bad reason or key is a programmer error
    T.eq(pcall(eng.cancel, eng, h2, { reason = "Not Valid!" }), false)
    T.eq(pcall(eng.cancel, eng, h2, { reason = "" }), false)
    T.eq(pcall(eng.cancel, eng, h2, { reason = string.rep("a", 33) }), false)
    T.eq(pcall(eng.cancel, eng, h2, { forse = true }), false)
    os.execute("rm -rf '" .. dir .. "'")
  end)

  test("exit codes 0..255 are exact", function()
    local ids = {}
    for i = 0, 255 do
      ids[#ids + 1] = assert(eng:start { cmd = { U.true_bin, tostring(i) } }) -- exits i
    end
    local res = U.collect(eng, ids, 30000)
    for i = 0, 255 do
      local f = res[ids[i + 1]].final
      T.eq(f.exit_code, i, "exit " .. i)
      T.eq(f.state, i == 0 and "completed" or "failed")
      T.eq(f.signal, nil)
    end
  end)

  test("death by signal is reported as a signal, not 128+n", function()
    local r = U.run(eng, { cmd = { "sh", "-c", "kill -SEGV $$" } })
    T.eq(r.final.state, "failed")
    T.eq(r.final.reason, "signal")
    T.eq(r.final.signal, "SIGSEGV")
    T.eq(r.final.exit_code, nil)
    r = U.run(eng, { cmd = { "sh", "-c", "kill -9 $$" } })
    T.eq(r.final.signal, "SIGKILL")
  end)

  test("spawn errors fail the execution with a clear reason", function()
    local r = U.run(eng, { cmd = { "/nonexistent/program" } })
    T.eq(table.concat(r.states, ","), "queued,starting,failed")
    T.eq(r.final.reason, "spawn_error")
    T.match(r.final.error, "No such file")
    r = U.run(eng, { cmd = { "true" }, cwd = "/nonexistent/dir" })
    T.eq(r.final.state, "failed")
    T.match(r.final.error, "^chdir: /nonexistent/dir")
    local dir = U.tmpdir()
    T.defer(function() U.rmrf(dir) end)
    local noexec = dir .. "/noexec"
    U.write_file(noexec, "x\n")
    os.execute("chmod 644 " .. noexec)
    r = U.run(eng, { cmd = { noexec } })
    T.eq(r.final.error:sub(1, #noexec + 26), "exec: " .. noexec .. ": Permission denied")
  end)

  test("shell string runs under /bin/sh -c; cwd is honoured", function()
    local r = U.run(eng, { cmd = "echo $((6*7)); pwd", cwd = "/tmp" })
    T.eq(r.out.stdout, "42\n/tmp\n")
    local rec = eng:get(r.final.id)
    T.eq(rec.cmd, "echo $((6*7)); pwd")
    T.eq(rec.cwd, "/tmp")
  end)

  test("env, clear_env and PROCTOR_EXECUTION_ID", function()
    local r, id = U.run(eng, {
      cmd = { "sh", "-c", 'echo "$FOO|$PROCTOR_EXECUTION_ID|${HOME:+home}"' },
      env = { FOO = "bar" },
    })
    T.eq(r.out.stdout, "bar|" .. id .. "|home\n")
    r = U.run(eng, { cmd = { "/usr/bin/env" }, clear_env = true, env = { ONLY = "1" } })
    local keys = {}
    for k in r.out.stdout:gmatch("([^=\n]+)=[^\n]*\n") do
      keys[#keys + 1] = k
    end
    table.sort(keys)
    T.eq(table.concat(keys, ","), "ONLY,PROCTOR_EXECUTION_ID,PROCTOR_JOB")
  end)

  test("children see only fds 0, 1, 2", function()
    for _, pty in ipairs({ false, true }) do
      local r = U.run(eng, { cmd = { "sh", "-c", "ls /proc/$$/fd" }, pty = pty, stdin = true })
      local out = (r.out.stdout or r.out.pty):gsub("\r", "")
      local fds = {}
      for fd in out:gmatch("%d+") do
        fds[#fds + 1] = fd
      end
      table.sort(fds)
      T.eq(table.concat(fds, " "), "0 1 2", "pty=" .. tostring(pty))
    end
  end)

  test("stdin pipe: input, close_stdin, and its errors", function()
    -- It outlives its stdin by 0.5 s: input after close_stdin meets a running
    -- process (ESTDINCLOSED); once it has exited that would be ENOTRUNNING.
    local id = assert(eng:start { cmd = { "sh", "-c", "cat; sleep 0.5" }, stdin = true })
    T.eq(eng:input(id, "hello "), true)
    T.eq(eng:input(id, "world\n"), true)
    T.eq(eng:close_stdin(id), true)
    local ok, msg, name = eng:input(id, "late")
    T.eq(ok, nil)
    T.eq(name, "ESTDINCLOSED")
    T.match(msg, "^ESTDINCLOSED: ")
    local r = U.collect(eng, { id })[id]
    T.eq(r.out.stdout, "hello world\n")
    T.eq(r.final.state, "completed")
    ok, msg, name = eng:input(id, "x")
    T.eq(ok, nil)
    T.eq(name, "ENOTRUNNING")
    T.match(msg, "^ENOTRUNNING: ")
    ok, msg, name = eng:input(987654, "x")
    T.eq(ok, nil)
    T.eq(name, "ENOENT")
    T.match(msg, "987654")
    -- stdin defaults to /dev/null: cat ends at once
    r = U.run(eng, { cmd = { "cat" } })
    T.eq(r.final.state, "completed")
  end)

  test(
    "input to an execution started without stdin fails ESTDINCLOSED, queued or running",
    function()
      local e2 = assert(core.new { max_running = 1 })
      T.defer(function() e2:close() end)
      local blocker = assert(e2:start { cmd = { "sleep", "1000" } })
      U.wait_state(e2, blocker, "running")
      local queued = assert(e2:start { cmd = { "sleep", "1000" } })
      T.eq(e2:get(queued).state, "queued")
      local ok, msg, name = e2:input(queued, "x")
      T.eq(ok, nil)
      T.eq(name, "ESTDINCLOSED", "queued")
      T.match(msg, "^ESTDINCLOSED: ")
      T.eq(select(3, e2:close_stdin(queued)), "ESTDINCLOSED", "close_stdin while queued")
      T.eq(e2:cancel(blocker), "canceling")
      U.wait_state(e2, queued, "running")
      ok, msg, name = e2:input(queued, "x")
      T.eq(ok, nil)
      T.eq(name, "ESTDINCLOSED", "running")
      T.match(msg, "^ESTDINCLOSED: ")
      T.eq(select(3, e2:input(queued, "")), "ESTDINCLOSED", "even an empty input")
      T.eq(select(3, e2:close_stdin(queued)), "ESTDINCLOSED", "close_stdin while running")
      T.eq(e2:get(queued).stdin_open, false)
      T.eq(e2:cancel(queued), "canceling")
      U.collect(e2, { blocker, queued })
    end
  )

  test("writing to a job that closed its stdin does not kill the host (no SIGPIPE)", function()
    local id = assert(eng:start { cmd = { "sh", "-c", "exec 0<&-; sleep 0.3" }, stdin = true })
    U.wait_state(eng, id, "running")
    U.sleep(50)
    local big = string.rep("x", 1048576)
    for _ = 1, 4 do
      eng:input(id, big)
    end -- may answer true (queued) or an error; never kill us
    local r = U.collect(eng, { id })[id]
    T.eq(r.final.state, "completed")
  end)

  test("pty: terminal semantics, input, resize", function()
    local id = assert(eng:start {
      cmd = { "sh", "-c", "stty size; read x; echo got:$x; stty size" },
      pty = true,
      cols = 100,
      rows = 30,
    })
    U.wait_output(eng, id, "30 100")
    T.eq(eng:resize(id, 120, 40), true)
    T.eq(eng:input(id, "abc\r"), true)
    local r = U.collect(eng, { id })[id]
    local out = (r.out.pty or ""):gsub("\r", "")
    T.match(out, "got:abc")
    T.match(out, "40 120")
    local rec = eng:get(id)
    T.ok(rec.pty)
    T.ok(rec.bytes.pty > 0)
    T.eq(rec.bytes.stdout, nil)
    local _, _, name = eng:resize(id, 10, 10)
    T.eq(name, "ENOTRUNNING")
    local pid = assert(eng:start { cmd = { "true" } })
    U.collect(eng, { pid })
    _, _, name = eng:resize(pid, 10, 10)
    T.eq(name, "EINVAL")
  end)

  test(
    "pty: a ^C typed into it that ends the program is canceled (interrupted), not failed",
    function()
      -- The tty turns ^C into SIGINT for the foreground group; the user asked
      -- for the end, so every surface (get, events, history, RPC) says canceled.
      local id = assert(eng:start { cmd = { "sh", "-c", "echo ready; exec sleep 30" }, pty = true })
      U.wait_output(eng, id, "ready")
      U.wait_until(function() -- sh has exec'd sleep (it, not sh, holds the tty's foreground)
        local pid = eng:get(id).pid
        return U.read_file("/proc/" .. pid .. "/comm") == "sleep\n"
      end, 10000)
      T.eq(eng:input(id, "\3"), true)
      local r = U.collect(eng, { id })[id]
      T.eq(r.final.state, "canceled")
      T.eq(r.final.reason, "interrupted")
      T.eq(eng:get(id).state, "canceled")
      T.eq(eng:get(id).signal, "SIGINT")
      -- A SIGINT that no ^C asked for (sent from outside) is still a failure.
      local id2 =
        assert(eng:start { cmd = { "sh", "-c", "echo ready; exec sleep 30" }, pty = true })
      U.wait_output(eng, id2, "ready")
      local pid2 = eng:get(id2).pid
      U.wait_until(
        function() return U.read_file("/proc/" .. pid2 .. "/comm") == "sleep\n" end,
        10000
      )
      U.sh("kill -INT " .. pid2)
      local r2 = U.collect(eng, { id2 })[id2]
      T.eq(r2.final.state, "failed")
      T.eq(r2.final.reason, "signal")
      -- A pipe execution reads ^C as a byte: nothing is interrupted.
      local id3 = assert(
        eng:start { cmd = { "sh", "-c", "head -c 1 >/dev/null; kill -INT $$" }, stdin = true }
      )
      U.wait_state(eng, id3, "running")
      T.eq(eng:input(id3, "\3"), true)
      local r3 = U.collect(eng, { id3 })[id3]
      T.eq(r3.final.state, "failed", "a pipe's ^C byte is data, not the user's interrupt")
    end
  )

  test("pty: a size given before the process runs is its size once it runs", function()
    -- A resize right after start meets the execution queued or starting (the
    -- spawn is a round trip to the shepherd); it is kept and applied as soon
    -- as the pty exists, so the child (and a later SIGWINCH) sees the last size.
    for i = 1, 5 do
      local id = assert(eng:start {
        cmd = "while [ \"$(stty size)\" != '33 101' ]; do sleep 0.01; done; stty size",
        pty = true,
        cols = 80,
        rows = 24,
        timeout_ms = 5000,
      })
      T.eq(eng:resize(id, 101, 33), true, "run " .. i .. ": resize before running is taken")
      local r = U.collect(eng, { id })[id]
      T.eq(
        r.final.state,
        "completed",
        "run " .. i .. ": the pty got 33x101 (not the 24x80 of the start spec)"
      )
      T.match((r.out.pty or ""):gsub("\r", ""), "^33 101\n$")
    end
  end)

  test("pty: TERM is xterm-256color and the job has a controlling terminal", function()
    local r = U.run(eng, {
      cmd = {
        "sh",
        "-c",
        "echo TERM=$TERM; echo TTY=$(tty); ps -o pid=,sid=,pgid=,tpgid=,tty=,stat= -p $$ | sed 's/^/PS=/'",
      },
      pty = true,
    })
    local out = r.out.pty:gsub("\r", "")
    T.match(out, "TERM=xterm%-256color\n")
    local tty = out:match("TTY=(/dev/pts/%d+)\n")
    T.ok(tty, "stdin is not a pty: " .. out)
    local pid, sid, pgid, tpgid, ctty, stat =
      out:match("PS=%s*(%d+)%s+(%d+)%s+(%d+)%s+(%-?%d+)%s+(%S+)%s+(%S+)")
    T.ok(pid, "no ps line: " .. out)
    T.eq("/dev/" .. ctty, tty, "the controlling terminal is the pty on stdin")
    T.eq(sid, pid, "session leader")
    T.eq(pgid, pid, "process group leader")
    T.eq(tpgid, pgid, "foreground process group of its terminal")
    T.match(stat, "^%a[^%s]*s", "ps: session leader")
    T.match(stat, "%+", "ps: foreground process group")
  end)

  test(
    "a pipe job leads its own process group in the shepherd's session, not a session of its own",
    function()
      -- So every pipe job shares the shepherd's scheduling autogroup (a session is one with
      -- the kernel's sched_autogroup) instead of weighing as much as the whole editor each:
      -- a fan-out of 100 jobs then takes the editor's CPU share from one group, not 100.
      local show = "ps -o pid=,sid=,pgid= -p $$; cat /proc/self/autogroup 2>/dev/null || echo none"
      local r1 = U.run(eng, { cmd = { "sh", "-c", show } })
      local r2 = U.run(eng, { cmd = { "sh", "-c", show } })
      local function parse(out)
        local pid, sid, pgid, ag = out:match("^%s*(%d+)%s+(%d+)%s+(%d+)%s*\n(%S+)")
        T.ok(pid, "no ps line: " .. out)
        return pid, sid, pgid, ag
      end
      local pid1, sid1, pgid1, ag1 = parse(r1.out.stdout)
      local pid2, sid2, pgid2, ag2 = parse(r2.out.stdout)
      T.eq(pgid1, pid1, "process group leader")
      T.eq(pgid2, pid2, "process group leader")
      T.ok(sid1 ~= pid1, "a pipe job is not a session leader (sid " .. sid1 .. ")")
      T.eq(sid1, sid2, "both jobs in the shepherd's session")
      local host = U.read_file("/proc/self/autogroup")
      if host and ag1 ~= "none" then
        T.eq(ag1, ag2, "both jobs in one autogroup")
        T.ok(ag1 ~= host:match("^(%S+)"), "the jobs' autogroup is not the host's: " .. ag1)
      end
    end
  )

  test("read: absolute offsets, ranges and late attach", function()
    local _, id = U.run(eng, { cmd = { "sh", "-c", "printf 0123456789" } })
    local d, nxt, missed = eng:read(id, "stdout", 0, 4)
    T.eq(d, "0123")
    T.eq(nxt, 4)
    T.eq(missed, 0)
    d, nxt = eng:read(id, "stdout", nxt, 100)
    T.eq(d, "456789")
    T.eq(nxt, 10)
    d, nxt = eng:read(id, "stdout", 50, 10)
    T.eq(d, "")
    T.eq(nxt, 10)
    d = eng:read(id, "stderr", 0, 10)
    T.eq(d, "")
    local ok, _, name = eng:read(id, "pty", 0, 10)
    T.eq(ok, nil)
    T.eq(name, "ENOSTREAM")
  end)

  test(
    "read: an event that skipped bytes carries its ring; ring:read reads them without the engine thread, after delete and close too",
    function()
      local e2 = assert(core.new {})
      local id = assert(e2:start { cmd = { "sh", "-c", "seq 1 20000" } })
      local evs, final, ring = {}, nil, nil
      local deadline = U.now() + 30000
      while not final and U.now() < deadline do
        for _, ev in ipairs(e2:wait(200, 1024, 1000)) do -- 1000-byte polls: bytes skipped
          if ev.id == id then
            evs[#evs + 1] = ev
            if ev.type == "state" and U.terminal[ev.state] then final = ev end
          end
        end
      end
      T.ok(final, "the run ended")
      local skipped, same = 0, true
      for _, ev in ipairs(evs) do
        if ev.type == "output" then
          T.eq(ev.ring ~= nil, ev.missed > 0, "a ring exactly when bytes were skipped")
          if ev.ring then
            skipped = skipped + 1
            ring = ring or ev.ring
            same = same and rawequal(ring, ev.ring)
          end
        end
      end
      T.ok(skipped > 0, "events that skipped bytes")
      T.ok(same, "one ring userdata for the stream's events")
      T.match(tostring(ring), "^proctor.output: ")
      local all, nxt, missed, its = e2:read(id, "stdout", 0)
      T.eq(#all, 108894)
      T.ok(rawequal(its, ring), "eng:read hands over the same ring as the events")
      local d, n2, m2 = ring:read(0)
      T.eq(d, all)
      T.eq(n2, nxt)
      T.eq(m2, missed)
      d, n2, m2 = ring:read(100, 7)
      T.eq(d, all:sub(101, 107))
      T.eq(n2, 107)
      T.eq(m2, 0)
      d, n2 = ring:read(200000, 10)
      T.eq(d, "")
      T.eq(n2, 108894)
      T.raises(function() ring:read(-1) end, "offset")
      T.raises(function() ring:read(0, -1) end, "max")
      T.eq(e2:delete(id), "deleted")
      T.eq(select(3, e2:read(id, "stdout", 0)), "ENOENT")
      T.eq((ring:read(0)), all, "the ring outlives its deleted execution")
      e2:close()
      T.eq((ring:read(108890)), "000\n", "and the engine's close")
    end
  )

  test("ring keeps the tail; missed counts dropped head bytes", function()
    local small = assert(core.new { output_limit = 1000 })
    local id = assert(small:start { cmd = { "sh", "-c", "seq 1 2000" } })
    local r = U.collect(small, { id })[id]
    local rec = small:get(id)
    T.eq(rec.bytes.stdout, 8893)
    T.eq(rec.dropped.stdout, 8893 - 1000)
    local d, nxt, missed = small:read(id, "stdout", 0, 100000)
    T.eq(#d, 1000)
    T.eq(nxt, 8893)
    T.eq(missed, 7893)
    T.ok(d:sub(-5) == "2000\n", "tail kept")
    -- the events delivered everything or reported what was skipped
    local got, miss = 0, 0
    for _, ev in ipairs(r.events) do
      if ev.type == "output" then
        got = got + #ev.data
        miss = miss + ev.missed
      end
    end
    T.eq(got + miss, 8893)
    -- many small writes into a full ring: it still keeps the newest bytes
    local id2 = assert(small:start {
      cmd = { "sh", "-c", 'for i in $(seq 1 50); do printf "%099d\\n" $i; sleep 0.005; done' },
    })
    U.collect(small, { id2 })
    local want = {}
    for i = 41, 50 do
      want[#want + 1] = ("%099d\n"):format(i)
    end
    d, nxt, missed = small:read(id2, "stdout", 0, 100000)
    T.eq(nxt, 5000)
    T.eq(missed, 4000)
    T.ok(
      d == table.concat(want),
      "the ring kept lines " .. (d:sub(1, 99):match("[1-9]%d*$") or "?") .. ".. instead of 41..50"
    )
    small:close()
  end)

  test("get, list, delete, purge", function()
    local e2 = assert(core.new {})
    local a = assert(e2:start { cmd = { "true" }, label = "a" })
    local b = assert(e2:start {
      cmd = { "sh", "-c", "trap '' TERM; echo ready; sleep 10" },
      label = "b",
      kill_grace_ms = 300,
    })
    U.wait_output(e2, b, "ready")
    U.collect(e2, { a })
    T.eq(#e2:list(), 2)
    T.eq(#e2:list { state = "running" }, 1)
    T.eq(e2:list { state = "running" }[1].label, "b")
    T.eq(e2:delete(b), "active_process_conflict")
    T.eq(e2:delete(a), "deleted")
    T.eq(e2:delete(a), "not_found")
    T.eq(e2:cancel(b), "canceling")
    T.eq(e2:cancel(b), "already_canceling")
    U.collect(e2, { b })
    T.eq(e2:cancel(b), "already_terminal")
    T.eq(e2:purge { older_than_ms = 3600000 }, 0)
    T.eq(e2:purge(), 1)
    T.eq(#e2:list(), 0)
    local rec, _, name = e2:get(b)
    T.eq(rec, nil)
    T.eq(name, "ENOENT")
    e2:close()
  end)

  test("record fields", function()
    -- The job ends when the test closes its stdin, 300 ms after the test saw it
    -- running: its duration has a floor the engine must honour (load only
    -- lengthens it) and no ceiling but the record's own wall-clock span.
    local id = assert(eng:start {
      cmd = { "sh", "-c", "read x; exit 3" },
      stdin = true,
      label = "lbl",
      owner = "me",
    })
    U.wait_state(eng, id, "running")
    U.sleep(300)
    T.eq(eng:close_stdin(id), true)
    U.collect(eng, { id })
    local rec = eng:get(id)
    T.eq(rec.id, id)
    T.eq(rec.label, "lbl")
    T.eq(rec.owner, "me")
    T.eq(rec.state, "failed")
    T.eq(rec.reason, "exit")
    T.eq(rec.exit_code, 3)
    T.eq(rec.pid, nil)
    T.ok(
      rec.created_at > 1.6e12
        and rec.started_at >= rec.created_at
        and rec.ended_at >= rec.started_at
    )
    -- milliseconds from the start the engine saw to the end it saw: at least
    -- the 300 ms it ran after the test saw it running, at most the span from
    -- its creation to its end (not seconds, not microseconds)
    T.ok(rec.duration_ms >= 299, "duration " .. rec.duration_ms .. " ms, held 300 ms")
    T.ok(
      rec.duration_ms <= rec.ended_at - rec.created_at + 1,
      ("duration %d ms, created to ended %d ms"):format(
        rec.duration_ms,
        rec.ended_at - rec.created_at
      )
    )
    T.eq(rec.stdin_open, false)
    T.eq(rec.cmd[1], "sh")
  end)

  test("ids are never reused; history_limit prunes the records that ended first", function()
    local e2 = assert(core.new { history_limit = 5 })
    local ids = {}
    -- one after the other, so that they end in id order: started together,
    -- any 5 of the 12 may end last, and those are the ones kept
    for i = 1, 12 do
      ids[i] = assert(e2:start { cmd = { "true" } })
      U.collect(e2, { ids[i] })
    end
    for i = 2, 12 do
      T.ok(ids[i] > ids[i - 1])
    end
    local l = e2:list()
    T.eq(#l, 5)
    T.eq(l[1].id, ids[8])
    T.eq(e2:delete(ids[12]), "deleted")
    local n = assert(e2:start { cmd = { "true" } })
    T.ok(n > ids[12], "id reused after delete")
    U.collect(e2, { n })
    -- the record that ended first goes, not the lowest id: `a` starts first,
    -- ends after five later ones, and is kept; the first of those five is not
    local a = assert(e2:start { cmd = { "sh", "-c", "read x" }, stdin = true })
    local later = {}
    for i = 1, 5 do
      later[i] = assert(e2:start { cmd = { "true" } })
      U.collect(e2, { later[i] })
    end
    T.eq(e2:input(a, "go\n"), true)
    U.collect(e2, { a })
    local kept = {}
    for _, r in ipairs(e2:list()) do
      kept[r.id] = true
    end
    T.ok(kept[a], "the lowest id, which ended last, was pruned")
    T.ok(not kept[later[1]], "the record that ended first was kept")
    T.ok(kept[later[5]], "the newest ended record was pruned")
    e2:close()
  end)

  test("history_age_ms prunes old records", function()
    local e2 = assert(core.new { history_age_ms = 100 })
    local a = assert(e2:start { cmd = { "true" } })
    U.collect(e2, { a })
    U.sleep(150)
    local b = assert(e2:start { cmd = { "true" } })
    U.collect(e2, { b })
    local l = e2:list()
    T.eq(#l, 1)
    T.eq(l[1].id, b)
    e2:close()
  end)

  test("max_running queues in FIFO order", function()
    local e2 = assert(core.new { max_running = 2 })
    local ids = {}
    for i = 1, 6 do
      ids[i] = assert(e2:start { cmd = { "sh", "-c", "sleep 0.05" } })
    end
    local order, running, maxrun = {}, 0, 0
    local done = 0
    while done < 6 do
      for _, ev in ipairs(e2:wait(1000)) do
        if ev.type == "state" then
          if ev.state == "starting" then
            order[#order + 1] = ev.id
            running = running + 1
          end
          if U.terminal[ev.state] then
            running = running - 1
            done = done + 1
          end
          if running > maxrun then maxrun = running end
        end
      end
    end
    T.eq(maxrun, 2)
    for i = 1, 6 do
      T.eq(order[i], ids[i])
    end
    -- canceling a queued one ends it at once, it never starts
    local a = assert(e2:start { cmd = { "sleep", "5" } })
    local b = assert(e2:start { cmd = { "sleep", "5" } })
    local c = assert(e2:start { cmd = { "sleep", "5" } })
    T.eq(e2:cancel(c), "canceling")
    local r = U.collect(e2, { c })[c]
    T.eq(table.concat(r.states, ","), "queued,canceled")
    e2:cancel(a)
    e2:cancel(b)
    U.collect(e2, { a, b })
    e2:close()
  end)

  test("drain: a background process holding the pipe is cut off after drain_ms of quiet", function()
    -- drain 500 ms: the chatty holder below ticks every 50 ms, a tenth of it,
    -- so a loaded machine's slow fork of `sleep` cannot look like quiet
    local e2 = assert(core.new { drain_ms = 500 })
    T.defer(function() e2:close() end)
    local tag = U.tag()
    local t0 = U.now()
    -- The holder stays quiet until 4 s after the leader's exit, then writes a
    -- witness: the quiet window (500 ms) ends the run before it; the cap (5 s
    -- from the exit the engine sees, never sooner) would not.
    local r = U.run(e2, {
      cmd = "(while kill -0 $$ 2>/dev/null; do sleep 0.05; done; sleep 4; echo too-late; sleep 100) & "
        .. "echo leader-done",
      env = { PROCTOR_TEST_TAG = tag },
    }, 20000)
    local dt = U.now() - t0
    T.eq(r.final.state, "completed")
    T.eq(r.out.stdout, "leader-done\n", "the quiet window, not the cap, ended the drain")
    -- a floor the engine promises (drain_ms of quiet); load only lengthens it
    T.ok(dt >= 490, "took " .. dt .. " ms (drain 500 ms)")
    -- and the holder does not outlive its execution
    T.ok(
      U.wait_until(function() return #U.tagged(tag) == 0 end, 10000),
      "background sleep survived"
    )
    -- a chatty one keeps the stream alive only up to the hard cap (10 x drain_ms,
    -- at least 5 s): the run ends while the holder still ticks (its 400 ticks
    -- of 50 ms last 20 s and more; its last line never comes), and it does
    -- not outlive its execution
    tag = U.tag()
    t0 = U.now()
    r = U.run(e2, {
      cmd = "(i=0; while [ $i -lt 400 ]; do echo tick; sleep 0.05; i=$((i+1)); done; echo holder-done) & echo leader-done",
      env = { PROCTOR_TEST_TAG = tag },
    }, 60000)
    dt = U.now() - t0
    T.eq(r.final.state, "completed")
    T.match(r.out.stdout, "tick\ntick\n")
    T.ok(not r.out.stdout:find("holder-done", 1, true), "the drain waited for the holder's end")
    -- a floor the engine promises (the cap is at least 5 s); load only lengthens it
    T.ok(dt >= 4900, "chatty drain took " .. dt .. " ms (the cap is 5 s)")
    T.ok(
      U.wait_until(function() return #U.tagged(tag) == 0 end, 10000),
      "the chatty holder survived"
    )
  end)

  test("several engines work independently", function()
    local e1, e2 = assert(core.new {}), assert(core.new {})
    local a = assert(e1:start { cmd = { "sh", "-c", "echo one" } })
    local b = assert(e2:start { cmd = { "sh", "-c", "echo two" } })
    T.eq(a, 1)
    T.eq(b, 1)
    T.eq(U.collect(e1, { a })[a].out.stdout, "one\n")
    T.eq(U.collect(e2, { b })[b].out.stdout, "two\n")
    e1:close()
    T.eq(select(3, e1:get(a)), "ECLOSED")
    T.eq(e2:get(b).state, "completed")
    e2:close()
  end)

  -- eng:start(spec, { wake = false }), what proctor.run() uses: the start
  -- waits without waking the engine thread; flush(), poll(), wait() or any
  -- other call wakes it, once for every start queued that way (counted).
  test("start{ wake = false }: a loop of starts wakes the engine thread once", function()
    local e2 = assert(core.new {})
    local w0 = e2:wakeups()
    local ids = {}
    for i = 1, 10 do
      ids[i] = assert(e2:start({ cmd = { "true" } }, { wake = false }))
    end
    T.eq(e2:wakeups() - w0, 0, "wake-ups during the loop of starts")
    T.eq(e2:flush(), true)
    T.eq(e2:wakeups() - w0, 1, "wake-ups after flush()")
    e2:flush()
    T.eq(e2:wakeups() - w0, 1, "wake-ups after a flush() with nothing queued")
    local r = U.collect(e2, ids, 10000)
    for i, id in ipairs(ids) do
      T.eq(r[id].final.state, "completed", "start " .. i)
      if i > 1 then T.ok(id > ids[i - 1], "ids in order") end
    end
    -- a call that waits for the engine thread takes the owed wake-up along
    local a = assert(e2:start({ cmd = { "true" } }, { wake = false }))
    T.ok(e2:get(a), "get() after a deferred start")
    -- poll() and wait() flush: a deferred start's events come without flush()
    local b = assert(e2:start({ cmd = { "true" } }, { wake = false }))
    T.eq(U.collect(e2, { a, b }, 10000)[b].final.state, "completed")
    -- without the option, a start wakes the engine thread at once
    local w1 = e2:wakeups()
    assert(e2:start({ cmd = { "true" } }, { wake = true }))
    T.eq(e2:wakeups() - w1, 1, "wake-ups of a plain start")
    e2:close()
  end)

  test("fd() is readable exactly while events are pending", function()
    local e2 = assert(core.new {})
    local fd = e2:fd()
    T.ok(type(fd) == "number" and fd > 2)
    -- The eventfd's counter as the kernel reports it: a poll() finds the fd
    -- readable exactly when it is above zero.
    local function readable()
      local info = U.read_file("/proc/self/fdinfo/" .. fd) or ""
      local n = info:match("eventfd%-count:%s*(%x+)")
      T.ok(n, "fd " .. fd .. " is not an eventfd: " .. info)
      return tonumber(n, 16) > 0
    end
    T.eq(readable(), false, "readable before any event")
    local id = assert(e2:start { cmd = { "true" } }) -- no output: every event is a state event
    T.ok(U.wait_until(readable, 3000), "not readable while events are pending")
    U.sleep(100) -- nobody takes them: it stays readable
    T.eq(readable(), true, "readable went away by itself")
    local evs = e2:poll(1)
    T.eq(#evs, 1)
    T.eq(evs[1].id, id)
    T.eq(evs[1].state, "queued")
    T.eq(readable(), true, "one event taken, others (starting, ...) still pending")
    local final
    local deadline = U.now() + 5000
    while not final and U.now() < deadline do
      for _, ev in ipairs(e2:wait(100)) do
        if ev.type == "state" and U.terminal[ev.state] then final = ev end
      end
    end
    T.ok(final, "no terminal event")
    T.eq(readable(), false, "readable with nothing pending")
    T.eq(#e2:poll(), 0)
    e2:close()
  end)

  eng:close()
end
