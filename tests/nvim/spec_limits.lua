-- tests/nvim/spec_limits.lua — memory bounds seen from the Neovim layer: one
-- execution's slow output consumer pauses that execution alone (per-execution
-- back-pressure in the core), a ready line survives a flood, and the output
-- older runs dropped under the ended-output budget is said so.
-- Condition waits only; no timing is asserted.
return function(test, T, H)
  local uv = vim.uv or vim.loop

  local function p() return require("proctor") end
  local function setup(extra)
    local opts = vim.tbl_deep_extend(
      "force",
      { notify = "never", engine = { kill_grace_ms = 500 } },
      extra or {}
    )
    T.eq(p().setup(opts), true)
  end

  test(
    "bounds: a stalled output consumer holds its execution alone; the others flow, nothing is lost",
    function()
      setup()
      local reader = require("proctor.tasks.reader")
      local nlines = 1636800 -- 41-byte lines: 64 MiB less 64 bytes
      local total = 41 * nlines
      local flood = assert(p().run({
        cmd = ("yes 0123456789012345678901234567890123456789 | head -n %d"):format(nlines),
        backpressure = true,
        open = false,
      }))
      local got, missed, finished = 0, 0, false
      local budget = reader.BUDGET_MS
      reader.BUDGET_MS = 0 -- the consumer is stalled: nothing is handed over
      local ok, err = pcall(function()
        reader.attach(flood.id, {
          chunk = function(text) got = got + #text end,
          missed = function(n) missed = missed + n end,
          finish = function() finished = true end,
        })
        H.wait(
          60000,
          function() return reader.holding(flood.id) end,
          "the reader asks the core to hold the flood"
        )
        -- a quiet execution started now: its output and its end arrive although
        -- the flood's consumer is more than 16 MiB behind
        local out, done = {}, false
        local quiet = assert(p().run({
          cmd = { "sh", "-c", "echo quiet; echo err >&2" },
          open = false,
          on_output = function(_, _, data) out[#out + 1] = data end,
          on_exit = function() done = true end,
        }))
        H.wait(30000, function() return done end, "the quiet execution's end")
        local text = table.concat(out):gsub("\r", "")
        T.eq(text:find("quiet\n", 1, true) ~= nil, true, "quiet output: " .. text)
        T.eq(p().record(quiet.id).state, "completed")
        T.eq(p().record(flood.id).state, "running", "the flood waits for its consumer")
        T.ok(
          p().record(flood.id).bytes.stdout < total,
          "the flood was held: " .. p().record(flood.id).bytes.stdout
        )
      end)
      reader.BUDGET_MS = budget
      if not ok then error(err, 0) end
      H.wait(180000, function() return finished end, "the flood's consumer finished")
      T.eq(missed, 0, "bytes the consumer never saw")
      T.eq(got, total, "bytes the consumer saw")
      T.eq(p().record(flood.id).state, "completed")
      T.eq(reader.holding(flood.id), false)
    end
  )

  -- A consumer's finish gets the record the terminal state event brought:
  -- the reader asks the engine thread (eng:get waits for it) for nothing.
  test("reader: a consumer's finish has the end's record without a call to the engine", function()
    setup()
    local reader = require("proctor.tasks.reader")
    local ex = assert(p().run({ cmd = { "sh", "-c", "read go; echo out; exit 4" }, open = false }))
    local got, rec = {}, nil
    reader.attach(ex.id, {
      chunk = function(text) got[#got + 1] = text end,
      finish = function(r) rec = r end,
    })
    local methods = getmetatable(require("proctor.engine").current()).__index
    local get, gets = methods.get, 0
    methods.get = function(...)
      if debug.getinfo(2, "S").source:find("tasks/reader.lua", 1, true) then gets = gets + 1 end
      return get(...)
    end
    local ok, err = pcall(function()
      T.eq(ex:input("go\n"), true)
      H.wait(30000, function() return rec ~= nil end, "the consumer's finish")
    end)
    methods.get = get
    if not ok then error(err, 0) end
    T.eq(rec.state, "failed")
    T.eq(rec.exit_code, 4)
    T.eq(table.concat(got), "out\n")
    T.eq(gets, 0, "eng:get calls from the reader")
  end)

  -- A reader attached after the output was written reads it back from the
  -- ring: eng:read (a round trip to the engine thread) once per stream, which
  -- hands over the ring; the rest of the range through ring:read on this thread.
  test("reader: a late reader reads the output before it with one eng:read per stream", function()
    setup()
    local reader = require("proctor.tasks.reader")
    local total = 31458 * 100 -- 100-byte lines, a little over 3 MiB: four slices of the ring
    T.ok(total > 3 * reader.GAP_SLICE)
    local ex = assert(p().run({
      cmd = ("yes %s | head -c %d; echo err >&2"):format(string.rep("0", 99), total),
      open = false,
    }))
    H.wait(60000, function() return p().record(ex.id).state == "completed" end, "the run's end")
    local methods = getmetatable(require("proctor.engine").current()).__index
    local read, reads = methods.read, 0
    methods.read = function(...)
      if debug.getinfo(2, "S").source:find("tasks/reader.lua", 1, true) then reads = reads + 1 end
      return read(...)
    end
    local got, missed, rec = { stdout = 0, stderr = 0 }, 0, nil
    local ok, err = pcall(function()
      reader.attach(ex.id, {
        chunk = function(text, stream) got[stream] = got[stream] + #text end,
        missed = function(n) missed = missed + n end,
        finish = function(r) rec = r end,
      })
      H.wait(60000, function() return rec ~= nil end, "the late reader's finish")
    end)
    methods.read = read
    if not ok then error(err, 0) end
    T.eq(got.stdout, total, "stdout bytes handed over")
    T.eq(got.stderr, 4, "stderr bytes handed over")
    T.eq(missed, 0)
    T.eq(reads, 2, "eng:read calls from the reader (one per stream)")
  end)

  test("bounds: a ready line in a flood while the editor is blocked is not lost", function()
    require("proctor.engine")._reset() -- a fresh engine (1 MiB rings): nothing else is polled meanwhile
    setup({ engine = { output_limit = 1048576 } })
    -- 2 MiB, the ready line, then 40 MiB more (40x the ring) at once
    local gen = [[head -c 2097152 /dev/zero | tr '\0' 'a' | fold -w 99; echo 'server listening on :4242'; ]]
      .. [[head -c 41943040 /dev/zero | tr '\0' 'b' | fold -w 99]]
    local ex = assert(p().run({
      cmd = gen,
      name = "server",
      ready = { pattern = "listening on :[0-9]+" },
      open = false,
    }))
    -- the editor is busy for a while: the child writes past the ring meanwhile
    local t0 = uv.hrtime()
    while uv.hrtime() - t0 < 1.5e9 do
    end
    H.wait(120000, function() return p().record(ex.id).state == "completed" end, "the flood's end")
    H.wait(30000, function() return require("proctor.tasks").info(ex.id).ready == true end, "ready")
    require("proctor.engine")._reset()
  end)

  -- A console reads what a poll left in the ring (output_max_bytes) from the
  -- ring; only what the ring itself dropped (output_limit) is skipped, and its
  -- note says exactly how much. The ring drops before the first poll: the main
  -- loop does not run until the child wrote everything.
  test(
    "bounds: a console skips what its ring dropped before a poll, exactly, and shows the rest",
    function()
      local engine = require("proctor.engine")
      engine._reset() -- engine options apply when it starts
      setup({ output_max_bytes = 4096, engine = { output_limit = 16384 } })
      T.defer(function()
        engine._reset()
        setup()
      end)
      vim.cmd("silent! only!")
      vim.cmd("enew")
      local n = 25000 -- 8-byte lines, 200,000 bytes: under console.backlog_limit
      local total, kept = 8 * n, 16384
      local ex = assert(p().run({ cmd = "seq -f %07g 1 " .. n, open = { open = "current" } }))
      local buf = vim.api.nvim_get_current_buf()
      H.hold_until_written(ex.id, total)
      T.match(H.wait_final(buf, 60000), "completed: exit 0")
      local l = H.lines(buf)
      l[#l] = nil -- the final line
      T.eq(
        tonumber((l[1] or ""):match("^%[proctor%] … skipped (%d+) bytes")),
        total - kept,
        "the note: " .. tostring(l[1])
      )
      T.eq(#l, 1 + kept / 8, "the note and the lines the ring kept")
      for i = 2, #l do
        T.eq(l[i], ("%07d"):format((total - kept) / 8 + i - 1), "line " .. i)
      end
    end
  )

  test(
    "bounds: output dropped under the ended-output budget shows in the record, console and text view",
    function()
      local engine = require("proctor.engine")
      engine._reset() -- engine options apply when it starts
      setup({ engine = { output_limit = 4 * 1048576, ended_output_max = 4 * 1048576 } })
      local ids = {}
      for i = 1, 3 do
        local ex = assert(
          p().run({ cmd = "head -c 3145728 /dev/zero | tr '\\0' 'x' | fold -w 79", open = false })
        )
        H.wait(60000, function() return p().record(ex.id).state == "completed" end, "run " .. i)
        ids[i] = ex.id
      end
      local rec = p().record(ids[1])
      T.ok(
        rec.dropped.stdout > 0,
        "the oldest run's record says what was dropped: " .. vim.inspect(rec.dropped)
      )
      T.eq(p().record(ids[3]).dropped.stdout, 0, "the newest keeps everything")
      -- the text view says so
      local lines = require("proctor.views").plain(ids[1])
      T.match(lines[1], "the first %d+ bytes of stdout were dropped")
      -- and the console, replaying the ring
      p().open(ids[1])
      local buf = vim.api.nvim_get_current_buf()
      H.wait(
        20000,
        function() return H.has_line(buf, "skipped %d+ bytes") end,
        "the console says older output was dropped"
      )
      vim.cmd("silent! bwipeout! " .. buf)
      engine._reset()
    end
  )
end
