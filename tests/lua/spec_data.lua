-- spec_data.lua — output fidelity under pty, bulk input, memory bounds,
-- back-pressure.
local U = require("util")
local core = U.core

return function(T, ctx)
  local P = ctx and ctx.nvim and "nvim: " or ""
  local function test(name, fn) T.test(P .. "data: " .. name, fn) end

  test(
    "500 runs of a 20 KiB printf under a pty deliver every byte before the exit event",
    function()
      local eng = assert(core.new { max_running = 16 })
      T.defer(function() eng:close() end)
      local dir = U.tmpdir()
      T.defer(function() U.rmrf(dir) end)
      -- 20 KiB of distinct lines, no CR/LF translation surprises: compare after removing \r
      local lines = {}
      for i = 1, 320 do
        lines[i] = ("%063d"):format(i)
      end
      local payload = table.concat(lines, "\n") .. "\n"
      local file = dir .. "/20k"
      U.write_file(file, payload)
      local N = U.count(ctx, "PTY_RUNS", 500, 100, 30)
      local ids = {}
      for i = 1, N do
        ids[i] = assert(eng:start { cmd = { "cat", file }, pty = true })
      end
      local res = U.collect(eng, ids, 120000)
      local bad, first_bad = 0, nil
      for _, id in ipairs(ids) do
        local r = res[id]
        local seen_terminal = false
        for _, ev in ipairs(r.events) do
          if ev.type == "state" and U.terminal[ev.state] then seen_terminal = true end
          if ev.type == "output" then T.ok(not seen_terminal, "output after the terminal event") end
        end
        local got = (r.out.pty or ""):gsub("\r\n", "\n")
        if got ~= payload or r.final.state ~= "completed" then
          bad = bad + 1
          local rec = eng:get(id)
          first_bad = first_bad
            or string.format(
              "#%d %s (%s%s), %d of %d bytes, ends %q; the core counted %s bytes, %s dropped",
              id,
              r.final.state,
              tostring(r.final.reason),
              r.final.error and (": " .. r.final.error) or "",
              #got,
              #payload,
              got:sub(-40),
              tostring(rec and rec.bytes.pty),
              tostring(rec and rec.dropped.pty)
            )
        end
      end
      T.eq(bad, 0, "runs with missing bytes; the first: " .. tostring(first_bad))
    end
  )

  test("100 MiB through input into sha256sum gives the right hash", function()
    local eng = assert(core.new {})
    T.defer(function() eng:close() end)
    local dir = U.tmpdir()
    T.defer(function() U.rmrf(dir) end)
    local chunk = {}
    for i = 1, 16384 do
      chunk[i] = string.char(i % 251)
    end
    chunk = table.concat(chunk) -- 16 KiB, not periodic with the pipe size
    local block = chunk:rep(64) -- 1 MiB
    U.write_file(dir .. "/1m", block)
    -- one cat of the file named 100 times (not 100 cats: each fork costs on a loaded machine)
    local expect = U.sh("cat" .. (" " .. dir .. "/1m"):rep(100) .. " | sha256sum"):match("^(%x+)")
    local id = assert(eng:start { cmd = { "sha256sum" }, stdin = true })
    for _ = 1, 100 do
      local ok, _, name = eng:input(id, block)
      while not ok and name == "EBUSY" do -- 16 MiB wait for sha256sum: let it read
        U.pump(eng, 5)
        ok, _, name = eng:input(id, block)
      end
      T.eq(ok, true, tostring(name))
      U.pump(eng, 0)
    end
    T.eq(eng:close_stdin(id), true)
    local r = U.collect(eng, { id }, 60000)[id]
    T.eq(r.out.stdout:match("^(%x+)"), expect)
  end)

  test(
    "a running child that does not read: at most 16 MiB of input wait in the host (EBUSY), then it catches up",
    function()
      local eng = assert(core.new {})
      T.defer(function() eng:close() end)
      local dir = U.tmpdir()
      T.defer(function() U.rmrf(dir) end)
      local MiB = 1024 * 1024
      local block = ("b"):rep(MiB)
      -- wc starts reading once the test says so (the file `go` exists)
      local id = assert(eng:start {
        cmd = { "sh", "-c", "while [ ! -e " .. dir .. "/go ]; do sleep 0.02; done; exec wc -c" },
        stdin = true,
      })
      U.wait_state(eng, id, "running")
      local accepted, name = 0, nil
      for _ = 1, 40 do
        local ok, msg, n = eng:input(id, block)
        if not ok then
          name = n
          T.match(msg, "^EBUSY: ")
          break
        end
        accepted = accepted + 1
      end
      T.eq(name, "EBUSY", "refused once 16 MiB wait")
      -- 16 MiB queued in the host, the pipe's 64 KiB, and the input that crossed the line
      T.ok(accepted >= 16 and accepted <= 18, "accepted " .. accepted .. " MiB before EBUSY")
      U.write_file(dir .. "/go", "")
      local t0 = U.now()
      local ok
      repeat -- once wc reads, input is taken again
        U.pump(eng, 20)
        ok = eng:input(id, block)
      until ok or U.now() - t0 > 30000
      T.eq(ok, true, "taken again once the child reads")
      accepted = accepted + 1
      T.eq(eng:close_stdin(id), true)
      local r = U.collect(eng, { id }, 30000)[id]
      T.eq(
        tonumber(r.out.stdout),
        accepted * MiB,
        "every accepted byte arrived, nothing refused did"
      )
    end
  )

  test(
    "input kept while queued is capped at 16 MiB (EBUSY); once running, any size is taken",
    function()
      local eng = assert(core.new { max_running = 1 })
      local blocker = assert(eng:start { cmd = { "sleep", "1000" } })
      U.wait_state(eng, blocker, "running")
      local id = assert(eng:start { cmd = { "sh", "-c", "wc -c" }, stdin = true })
      T.eq(eng:get(id).state, "queued")
      local MiB = 1024 * 1024
      local big = ("x"):rep(16 * MiB - 10)
      T.eq(eng:input(id, big), true)
      local ok, msg, name = eng:input(id, ("y"):rep(20))
      T.eq(ok, nil)
      T.eq(name, "EBUSY")
      T.match(msg, "^EBUSY: ")
      T.eq(eng:input(id, ("z"):rep(10)), true, "exactly 16 MiB may wait")
      ok, msg, name = eng:input(id, "!")
      T.eq(ok, nil)
      T.eq(name, "EBUSY")
      T.match(msg, "^EBUSY: ")
      T.eq(eng:input(id, ""), true, "an empty input always fits")
      T.eq(eng:close_stdin(id), true)
      T.eq(eng:cancel(blocker), "canceling")
      local r = U.collect(eng, { id }, 20000)[id]
      T.eq(r.final.state, "completed")
      T.eq(tonumber(r.out.stdout), 16 * MiB, "what was kept is written, what was refused is not")
      -- a single input over the cap while queued is refused; the same input while running is written
      local b2 = assert(eng:start { cmd = { "sleep", "1000" } })
      U.wait_state(eng, b2, "running")
      local id2 = assert(eng:start { cmd = { "sh", "-c", "wc -c" }, stdin = true })
      local huge = ("h"):rep(17 * MiB)
      ok, msg, name = eng:input(id2, huge)
      T.eq(ok, nil)
      T.eq(name, "EBUSY")
      T.match(msg, "^EBUSY: ")
      T.eq(eng:cancel(b2), "canceling")
      U.wait_state(eng, id2, "running")
      T.eq(eng:input(id2, huge), true)
      T.eq(eng:close_stdin(id2), true)
      r = U.collect(eng, { id2 }, 20000)[id2]
      T.eq(tonumber(r.out.stdout), 17 * MiB)
      eng:close()
    end
  )

  test(
    "nobody polling while yes runs: host memory stays within the ring cap plus a few MiB",
    function()
      local eng = assert(core.new { output_limit = 4194304 })
      local function rss() return U.status_field("self", "VmRSS") end
      local before = rss()
      -- until yes has written `enough` (128 rings' worth under lua5.4, 64 in
      -- Neovim; far past the 64 MiB asserted below), or for at most `secs`
      local secs = tonumber(os.getenv("YES_SECONDS") or "") or (ctx and ctx.nvim and 5 or 30)
      local enough = (ctx and ctx.nvim and 256 or 512) * 2 ^ 20
      local id = assert(eng:start { cmd = { "yes" } })
      local t0 = U.now()
      local peak = before
      while U.now() - t0 < secs * 1000 do
        os.execute("sleep 0.5") -- the host is busy elsewhere: no poll, no wait
        local r = rss()
        if r > peak then peak = r end
        if eng:get(id).bytes.stdout >= enough then break end -- a record read takes no event
      end
      local rec = eng:get(id)
      T.ok(rec.bytes.stdout > 64 * 2 ^ 20, "yes produced only " .. rec.bytes.stdout .. " bytes")
      T.eq(eng:cancel(id), "canceling")
      local r = U.collect(eng, { id }, 5000)[id]
      local first
      for _, ev in ipairs(r.events) do
        if ev.type == "output" then
          first = ev
          break
        end
      end
      T.ok(first and #first.data <= 4194304, "one event carried more than the ring holds")
      T.ok(
        first.missed > 0 and first.missed == first.offset,
        "the dropped head is reported as missed"
      )
      T.ok((peak - before) < 4096 + 8 * 1024, ("host grew %d KiB"):format(peak - before))
      eng:close()
    end
  )

  test("back-pressure pauses the child instead of dropping", function()
    local eng = assert(core.new { output_limit = 65536 })
    T.defer(function() eng:close() end)
    local id = assert(eng:start { cmd = { "sh", "-c", "seq 1 300000" }, backpressure = true })
    -- the ring is full (nobody polls) ...
    T.ok(
      U.wait_until(function() return eng:get(id).bytes.stdout >= 65536 end, 10000),
      "the child never filled the ring"
    )
    U.sleep(300) -- ... and stays so: seq would be done in far less without back-pressure
    local rec = eng:get(id)
    T.eq(rec.state, "running", "the child should be paused, not done")
    T.ok(rec.bytes.stdout <= 65536 + 65536, "read past the cap: " .. rec.bytes.stdout)
    local r = U.collect(eng, { id }, 30000)[id]
    local expect = U.sh("seq 1 300000")
    T.eq(#r.out.stdout, #expect)
    T.ok(r.out.stdout == expect, "content differs")
    for _, ev in ipairs(r.events) do
      if ev.type == "output" then T.eq(ev.missed, 0) end
    end
  end)

  -- A spilling ring's back-pressure window is its memory part: a slow reader
  -- never leaves more than output_memory bytes undelivered (else a flood goes
  -- to the spill file and back), and nothing is lost.
  test("back-pressure on a spilling ring holds at most output_memory undelivered", function()
    local dir = U.tmpdir()
    T.defer(function() U.rmrf(dir) end)
    local memory = 16384
    local eng = assert(core.new { output_limit = 262144, output_memory = memory, spill_dir = dir })
    T.defer(function() eng:close() end)
    local id = assert(eng:start { cmd = { "sh", "-c", "seq 1 100000" }, backpressure = true })
    local got, taken, final = {}, 0, nil
    while not final do
      U.sleep(10) -- a slow reader: the child outruns it
      for _, ev in ipairs(eng:wait(200, 65536)) do
        if ev.id == id and ev.type == "output" then
          T.eq(ev.missed, 0, "missed")
          got[#got + 1] = ev.data
          taken = taken + #ev.data
        elseif ev.id == id and ev.type == "state" and U.terminal[ev.state] then
          final = ev
        end
      end
      -- only this loop takes from the ring: what it has not taken is undelivered
      local pending = eng:get(id).bytes.stdout - taken
      T.ok(pending <= memory, ("%d bytes undelivered, window %d"):format(pending, memory))
    end
    local out = table.concat(got)
    T.eq(#out, 588895, "bytes delivered")
    T.ok(out == U.sh("seq 1 100000"), "content differs")
  end)

  -- A host that asks for no output_memory (a bare core.new) keeps each ring's
  -- output_limit in memory: no spill file, and the back-pressure window is the
  -- whole ring (the Neovim layer asks for its own, engine.output_memory).
  test("a bare host's rings do not spill unless output_memory is asked", function()
    local dir = U.tmpdir()
    T.defer(function() U.rmrf(dir) end)
    local pid = (U.read_file("/proc/self/stat") or ""):match("^(%d+)")
    local function spill_files()
      local n = 0
      for line in U.sh("ls -l /proc/" .. pid .. "/fd 2>/dev/null"):gmatch("[^\n]+") do
        if line:find(dir .. "/", 1, true) then n = n + 1 end
      end
      return n
    end
    local counts = {}
    for _, memory in ipairs { false, 65536 } do
      local eng = assert(core.new { spill_dir = dir, output_memory = memory or nil })
      local id = assert(eng:start { cmd = { "head", "-c", "1000000", "/dev/zero" } })
      T.ok(
        U.wait_until(function()
          local r = eng:get(id)
          return r and U.terminal[r.state]
        end, 30000, 20),
        "the run ended"
      )
      counts[#counts + 1] = spill_files()
      eng:close()
    end
    T.eq(counts[1], 0, "spill files without output_memory")
    T.eq(counts[2], 1, "spill files with output_memory = 65536 (the probe sees one)")
  end)

  test(
    "back-pressure keeps what is still in the pipe after the exit, however late the consumer",
    function()
      -- The leader exits with bytes still in its (paused) pipe; nobody polls for
      -- longer than the drain time. Those bytes must still all arrive.
      local eng = assert(core.new { output_limit = 65536, drain_ms = 200 })
      local id =
        assert(eng:start { cmd = { "head", "-c", "120000", "/dev/zero" }, backpressure = true })
      U.sleep(1500)
      local r = U.collect(eng, { id }, 30000)[id]
      T.eq(#r.out.stdout, 120000, "bytes delivered")
      for _, ev in ipairs(r.events) do
        if ev.type == "output" then T.eq(ev.missed, 0) end
      end
      local rec = eng:get(id)
      T.eq(rec.state, "completed")
      T.eq(rec.bytes.stdout, 120000, "bytes counted in the record")
      eng:close()
    end
  )

  test("poll with max_bytes delivers only the tail and counts the rest as missed", function()
    local eng = assert(core.new {})
    assert(eng:start { cmd = { "sh", "-c", "seq 1 100000" } })
    U.sleep(300)
    local data, missed, last = {}, 0, nil
    local done = false
    while not done do
      for _, ev in ipairs(eng:wait(1000, 1024, 1000)) do
        if ev.type == "output" then
          T.ok(#ev.data <= 1000, "event larger than max_bytes")
          data[#data + 1] = ev.data
          missed = missed + ev.missed
          last = ev
        elseif U.terminal[ev.state] then
          done = true
        end
      end
    end
    local all = table.concat(data)
    T.eq(#all + missed, 588895)
    T.eq(all:sub(-7), "100000\n")
    T.eq(last.offset + #last.data, 588895)
    eng:close()
  end)

  -- The promise (|proctor-core-poll|): one output event per execution and
  -- stream per poll, with the bytes since the last one in order, at most
  -- 256 KiB of them (the rest comes with the next poll, none skipped). How
  -- many polls a flood takes depends on the machine's pace, so that is not
  -- counted; what one poll returns is.
  test("a flood is coalesced: one output event per stream per poll, at most 256 KiB", function()
    local eng = assert(core.new {})
    T.defer(function() eng:close() end)
    local flood = { "sh", "-c", "head -c 20000000 /dev/zero" }
    -- nobody polls until the engine saw the end: what the 8 MiB ring kept
    -- comes in 256 KiB events, one a poll however many the poll may return
    -- (then max = 1: the rest of the queue waits behind it), the dropped
    -- head counted in the first one's `missed`
    local id = assert(eng:start { cmd = flood })
    T.ok(
      U.wait_until(function()
        local r = eng:get(id)
        return r and U.terminal[r.state]
      end, 60000, 20),
      "the flood ended"
    )
    local outs, final, after = {}, nil, 0
    local first, in_first = eng:wait(0, 65536), {}
    for _, ev in ipairs(first) do
      if ev.type == "output" then in_first[#in_first + 1] = #ev.data end
    end
    T.eq(table.concat(in_first, ","), "262144", "output events of the first poll")
    for n = 1, 1000 do
      local evs = n == 1 and first or eng:wait(0, 1)
      if #evs == 0 then break end
      for _, ev in ipairs(evs) do
        if ev.id == id and ev.type == "output" then
          outs[#outs + 1] = ev
          if final then after = after + 1 end
        end
        if ev.id == id and ev.type == "state" and U.terminal[ev.state] then final = ev end
      end
    end
    T.ok(#outs > 1, "the retained 8 MiB came in several events: " .. #outs)
    local data, missed, offset = 0, 0, nil
    for k, ev in ipairs(outs) do
      T.eq(ev.stream, "stdout")
      T.ok(#ev.data <= 262144, ("event %d carries %d bytes"):format(k, #ev.data))
      if k < #outs then T.eq(#ev.data, 262144, "a full chunk before the last") end
      if offset then T.eq(ev.offset, offset, "contiguous") end
      if k > 1 then T.eq(ev.missed, 0, "missed after the first") end
      offset = ev.offset + #ev.data
      data, missed = data + #ev.data, missed + ev.missed
    end
    T.eq(data + missed, 20000000, "delivered + reported missing")
    T.ok(data >= 8388608, "the retained tail (8 MiB ring) was delivered")
    T.ok(final, "the terminal state came")
    T.eq(after, 0, "output events after the terminal state")
    -- polled all along: never two output events of one stream in one poll
    id = assert(eng:start { cmd = flood })
    local bytes, polls, done = 0, 0, false
    missed = 0
    local deadline = U.now() + 60000
    while not done and U.now() < deadline do
      local per = {}
      polls = polls + 1
      for _, ev in ipairs(eng:wait(200, 65536)) do
        if ev.id == id and ev.type == "output" then
          T.ok(not per[ev.stream], "two " .. ev.stream .. " events in poll " .. polls)
          T.ok(#ev.data <= 262144, ("%d bytes in one event"):format(#ev.data))
          per[ev.stream] = true
          bytes, missed = bytes + #ev.data, missed + ev.missed
        elseif ev.id == id and ev.type == "state" and U.terminal[ev.state] then
          done = true
        end
      end
    end
    T.ok(done, "the second flood ended")
    T.eq(bytes + missed, 20000000, "delivered + reported missing, polled all along")
    eng:close()
  end)
end
