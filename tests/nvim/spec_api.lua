-- tests/nvim/spec_api.lua — the Lua API: require, setup, run, callbacks, control, events.
return function(test, T, H)
  local api = vim.api

  test("require has no side effects", function()
    for _, m in ipairs({
      "proctor",
      "proctor.config",
      "proctor.engine",
      "proctor.console",
      "proctor.commands",
      "proctor.list",
      "proctor.util",
      "proctor.health",
      "proctor.actions",
      "proctor.views",
      "proctor.compat",
      "proctor.console.backlog",
      "proctor.console.editor",
      "proctor.console.window",
    }) do
      require(m)
    end
    T.eq(require("proctor.engine").current(), nil, "engine created by require")
    T.eq(
      pcall(api.nvim_get_autocmds, { group = "proctor_engine" }),
      false,
      "autocmd group created by require"
    )
    T.eq(#H.notes, 0, "messages on require")
    T.ok(vim.fn.exists(":Proctor") == 2, ":Proctor is defined by plugin/proctor.lua")
  end)

  test("setup validates options and can be called again", function()
    local p = require("proctor")
    local cfg = require("proctor.config")
    H.clear_notes()
    T.eq(p.setup({ console = { size = 20 }, notify = "always" }), true)
    T.eq(cfg.get().console.size, 20)
    T.eq(cfg.get().console.open, "split", "defaults kept beside a given key")
    -- bad type: names the key, keeps the previous configuration, no traceback
    H.clear_notes()
    local ok, err = p.setup({ console = { size = "big" } })
    T.eq(ok, false)
    T.match(err, "option 'console%.size' must be")
    T.eq(#H.notes, 1)
    T.match(H.notes[1].msg, "^%(proctor%) setup: option 'console%.size'")
    T.ok(not H.notes[1].msg:find("traceback"), "traceback in message")
    T.eq(cfg.get().console.size, 20, "previous configuration kept after a bad setup")
    -- bad enum, bad number, bad top-level type
    T.match(
      select(2, p.setup({ notify = "sometimes" })),
      "'notify' must be one of never, on_failure, always"
    )
    T.match(select(2, p.setup({ engine = { kill_grace_ms = -1 } })), "'engine%.kill_grace_ms'")
    T.match(select(2, p.setup({ console = 3 })), "'console' must be table")
    T.match(select(2, p.setup("x")), "expects a table")
    -- unknown keys warn but do not fail
    H.clear_notes()
    T.eq(p.setup({ consol = {}, console = { sise = 1 } }), true)
    local texts = table.concat(H.note_texts(), "\n")
    T.match(texts, "unknown option 'consol'")
    T.match(texts, "unknown option 'console%.sise'")
    T.eq(H.notes[1].level, vim.log.levels.WARN)
    -- called again: starts from the defaults
    T.eq(p.setup({}), true)
    T.eq(cfg.get().console.size, 15)
    T.eq(cfg.get().notify, "on_failure")
    p.setup({ notify = "never", engine = { kill_grace_ms = 500 } })
  end)

  test("engine is created lazily, once, and its wake fd is watched", function()
    local engine = require("proctor.engine")
    T.eq(engine.current(), nil)
    local p = require("proctor")
    local ex = T.ok(p.run({ cmd = { "true" } }))
    local eng = engine.current()
    T.ok(eng ~= nil)
    local ex2 = T.ok(p.run({ cmd = "exit 3" }))
    T.ok(engine.current() == eng, "one engine")
    -- no wait(): the events arrive through the watched fd alone
    H.wait(
      5000,
      function() return engine.state[ex2.id] == "failed" and engine.state[ex.id] == "completed" end,
      "events through the wake fd"
    )
    T.eq(#api.nvim_get_autocmds({ group = "proctor_engine", event = "VimLeavePre" }), 1)
  end)

  -- engine.shepherd_early (default on): the shepherd starts with the engine,
  -- so the first run finds it up; off: it starts at the first run. A wrapper
  -- notes each start of the shepherd in a file (the engine waits for the
  -- wrapper to exit, so the note is there once the engine thread took a command).
  test(
    "the shepherd starts with the engine (engine.shepherd_early), or at the first run",
    function()
      local p = require("proctor")
      T.match(
        select(2, p.setup({ engine = { shepherd_early = "yes" } })),
        "'engine%.shepherd_early' must be boolean"
      )
      p.setup({ notify = "never", engine = { kill_grace_ms = 500 } })
      local dir = vim.fn.tempname()
      vim.fn.mkdir(dir, "p")
      local real = H.root .. "/lua/proctor/proctor-shepherd"
      for _, early in ipairs({ "nil", "false" }) do
        local starts = dir .. "/starts-" .. early
        local wrapper = dir .. "/shepherd-" .. early
        vim.fn.writefile({
          "#!/bin/sh",
          "echo up >> " .. vim.fn.shellescape(starts),
          "exec " .. vim.fn.shellescape(real) .. ' "$@"',
        }, wrapper)
        vim.fn.setfperm(wrapper, "rwx------")
        local c = H.child()
        local got = c.lua([[
        local p = require("proctor")
        p.setup({ notify = "never", engine = { shepherd = ..., shepherd_early = ]] .. early .. [[ } })
        local eng = assert(require("proctor.engine").get())
        eng:list() -- a command: the engine thread is past its start
        local function lines(f) return vim.fn.filereadable(f) == 1 and #vim.fn.readfile(f) or 0 end
        local before = lines(select(2, ...))
        _G.ex = p.run({ cmd = "exit 0" })
        return before
      ]], wrapper, starts)
        T.eq(
          got,
          early == "nil" and 1 or 0,
          "shepherds started before any run (shepherd_early = " .. early .. ")"
        )
        c.wait(
          10000,
          [[require("proctor.engine").state[_G.ex.id] == "completed"]],
          "the first run completed"
        )
        T.eq(
          #vim.fn.readfile(starts),
          1,
          "shepherds started after the first run (shepherd_early = " .. early .. ")"
        )
        c.stop()
      end
      vim.fn.delete(dir, "rf")
    end
  )

  test("run returns an execution object; callbacks run outside fast context", function()
    local p = require("proctor")
    local got, fast = {}, false
    local states = {}
    local ex = p.run({
      cmd = "printf 'out1\\n'; printf 'err1\\n' >&2; exit 4",
      label = "cb",
      on_output = function(e, stream, data)
        fast = fast or vim.in_fast_event()
        got[stream] = (got[stream] or "") .. data
        T.eq(getmetatable(e), p.Execution)
      end,
      on_state = function(_, ev)
        fast = fast or vim.in_fast_event()
        states[#states + 1] = ev.state
      end,
      on_exit = function(_, rec)
        fast = fast or vim.in_fast_event()
        states[#states + 1] = "exit:" .. rec.state .. ":" .. tostring(rec.exit_code)
        api.nvim_buf_get_lines(0, 0, 1, false) -- an API call that fails in fast context
      end,
    })
    T.eq(type(ex.id), "number")
    for _, m in ipairs({ "cancel", "input", "wait", "open", "record" }) do
      T.eq(type(ex[m]), "function", m)
    end
    local rec = T.ok(ex:wait(5000))
    T.eq(rec.state, "failed")
    T.eq(rec.exit_code, 4)
    T.eq(got.stdout, "out1\n")
    T.eq(got.stderr, "err1\n")
    T.eq(fast, false, "a callback ran in fast context")
    T.eq(table.concat(states, ","), "queued,starting,running,failed,exit:failed:4")
    T.eq(ex:record().label, "cb")
    T.eq(ex:record().owner, "nvim")
  end)

  -- A poll's bytes are the main thread's cost (a big string is an mmap'd
  -- allocation, and its page faults and unmapping): one output event carries at
  -- most output_max_bytes, 64 KiB by default; what it skipped is counted.
  test(
    "on_output: an event carries at most output_max_bytes (64 KiB by default), the rest counted as missed",
    function()
      local p = require("proctor")
      local cfg = require("proctor.config").get()
      T.eq(cfg.output_max_bytes, 65536, "the default")
      local total, seen, biggest, missed = 1048576, 0, 0, 0
      local ex = p.run({
        cmd = "head -c " .. total .. " /dev/zero",
        on_output = function(_, _, data, m)
          seen = seen + #data + (m or 0)
          missed = missed + (m or 0)
          biggest = math.max(biggest, #data)
        end,
      })
      -- no poll until every byte is in the ring: the main loop does not run
      local eng = require("proctor.engine").current()
      local deadline = vim.loop.now() + 30000
      repeat
        vim.loop.sleep(10)
        vim.loop.update_time()
        local rec = eng:get(ex.id)
      until (rec and rec.bytes and rec.bytes.stdout == total) or vim.loop.now() > deadline
      T.eq(T.ok(ex:wait(30000)).state, "completed")
      T.ok(biggest <= 65536, "largest event: " .. biggest)
      T.ok(missed > 0, "bytes skipped under the flood")
      T.eq(seen, total, "bytes given or counted missed")
    end
  )

  test("wait times out with ETIMEDOUT; cancel, force and the contract strings", function()
    local p = require("proctor")
    local ex = p.run({ cmd = { "sleep", "30" } })
    -- it returns while the job still runs: ETIMEDOUT, not the 30 s job's end
    local r, msg, name = ex:wait(100)
    T.eq(r, nil)
    T.eq(name, "ETIMEDOUT")
    T.match(msg, "^ETIMEDOUT: execution %d+ still")
    T.eq(ex:record().state, "running", "wait(100) returned at the job's end")
    T.eq(ex:cancel(), "canceling")
    local rec = T.ok(ex:wait(5000))
    T.eq(rec.state, "canceled")
    T.eq(ex:cancel(), "already_terminal")
    T.eq(p.cancel(987654), "not_found")
    -- a grace of 120 s: ending within 30 s is the force, not the grace
    local ex2 = p.run({ cmd = "trap '' TERM; echo ready; sleep 30", kill_grace_ms = 120000 })
    H.wait(
      10000,
      function()
        return (require("proctor.engine").current():read(ex2.id, "stdout", 0, 100) or ""):find(
          "ready"
        ) ~= nil
      end,
      "the TERM trap is set"
    )
    T.eq(ex2:cancel(), "canceling")
    T.eq(ex2:cancel(), "already_canceling")
    T.eq(ex2:cancel(true), "already_canceling")
    local rec2 = T.ok(ex2:wait(30000))
    T.eq(rec2.state, "canceled")
    T.eq(rec2.signal, "SIGKILL", "the force escalated the pending cancel")
  end)

  test("run() takes a secret from a source: read at spawn time, masked in the output", function()
    local p = require("proctor")
    local out = {}
    local ex = p.run({
      cmd = { "sh", "-c", 'echo "t=$TOKEN"' },
      secrets = { TOKEN = { command = { "printf", "layer-S3cret" } } },
      on_output = function(_, _, data) out[#out + 1] = data end,
    })
    local rec = T.ok(ex:wait(5000))
    T.eq(rec.state, "completed")
    H.wait(2000, function() return table.concat(out):find("\n", 1, true) ~= nil end)
    T.eq(table.concat(out), "t=***\n")
    local bad = p.run({ cmd = { "true" }, secrets = { TOKEN = { command = { "false" } } } })
    rec = T.ok(bad:wait(5000))
    T.eq(rec.state, "failed")
    T.eq(rec.reason, "secret_unavailable")
  end)

  test("input reaches cat; input before the process runs is kept", function()
    local p = require("proctor")
    local out = ""
    local ex = p.run({ cmd = { "cat" }, on_output = function(_, _, d) out = out .. d end })
    -- right after run() the execution is queued/starting: the input waits
    T.eq(ex:input("early\n"), true)
    T.eq(p.input(ex.id, "second\n"), true)
    T.eq(ex:close_stdin(), true)
    local rec = T.ok(ex:wait(5000))
    T.eq(rec.state, "completed")
    T.eq(out, "early\nsecond\n")
    local ok, msg, name = p.input(ex.id, "late\n")
    T.eq(ok, nil)
    T.eq(name, "ENOTRUNNING")
    T.match(msg, "^ENOTRUNNING")
    T.eq(select(3, p.input(424242, "x")), "ENOENT")
  end)

  test(
    "input and close_stdin given while queued reach the process when it runs: the core keeps them",
    function()
      local p = require("proctor")
      local engine = require("proctor.engine")
      engine._reset()
      p.setup({ notify = "never", engine = { max_running = 1, kill_grace_ms = 500 } })
      local ok, err = pcall(function()
        local blocker = p.run({ cmd = { "sleep", "30" } })
        H.wait(3000, function() return engine.state[blocker.id] == "running" end)
        local eng = engine.current()
        -- straight to the core: it keeps input for a queued execution
        local raw = eng:start({ cmd = { "cat" }, stdin = true })
        T.eq(eng:get(raw).state, "queued")
        T.eq(eng:input(raw, "core-1\n"), true)
        T.eq(eng:close_stdin(raw), true)
        -- and through the layer, which hands it to the core as is
        local out = ""
        local ex = p.run({ cmd = { "cat" }, on_output = function(_, _, d) out = out .. d end })
        T.eq(eng:get(ex.id).state, "queued")
        T.eq(ex:input("one\n"), true)
        T.eq(p.input(ex.id, "two\n"), true)
        T.eq(ex:close_stdin(), true)
        T.eq(
          p.input(ex.id, string.rep("x", 16 * 1024 * 1024 + 1)) == nil,
          true,
          "over the core's bound: EBUSY"
        )
        blocker:cancel(true)
        T.eq(T.ok(p.get(raw):wait(5000)).state, "completed")
        T.eq((eng:read(raw, "stdout", 0, 100)), "core-1\n")
        T.eq(T.ok(ex:wait(5000)).state, "completed")
        T.eq(out, "one\ntwo\n")
      end)
      engine._reset()
      p.setup({ notify = "never", engine = { kill_grace_ms = 500 } })
      if not ok then error(err, 0) end
    end
  )

  test("get, list, record, delete, purge and unknown ids", function()
    local p = require("proctor")
    local ex = p.run({ cmd = "exit 0", label = "g" })
    ex:wait(5000)
    local ex2 = T.ok(p.get(ex.id))
    T.eq(ex2.id, ex.id)
    T.eq(ex2:record().state, "completed")
    local r, msg, name = p.get(99999)
    T.eq(r, nil)
    T.eq(name, "ENOENT")
    T.match(msg, "no such execution 99999")
    local all = p.list()
    T.ok(#all >= 1)
    T.eq(all[#all].id, ex.id)
    T.eq(#p.list({ state = "running" }), 0)
    local live = p.run({ cmd = { "sleep", "30" } })
    T.defer(function() live:cancel(true) end) -- also when a wait below fails
    H.wait(10000, function() return #p.list({ state = "running" }) == 1 end)
    T.eq(p.delete(live.id), "active_process_conflict")
    live:cancel(true)
    live:wait(3000)
    T.eq(p.delete(ex.id), "deleted")
    T.eq(p.delete(ex.id), "not_found")
    local n = p.purge()
    T.ok(n >= 1, "purged " .. tostring(n))
    T.eq(#p.list(), 0)
    T.eq(p.status().total, 0, "status after purge")
    -- bad spec: an error naming the field, as vim.system() raises (|proctor-run-errors|)
    local okr, m = pcall(p.run, { cmd = 5 })
    T.eq(okr, false)
    T.match(m, "cmd must be")
    T.raises(function() p.run({ cmd = "ls", bogus = 1 }) end, 'unknown field "bogus"')
    -- several problems: the first in the order of the field names, a missing cmd last
    T.raises(
      function() p.run({ zzz = 1, label = 2, timeout_ms = "x", cmd = "ls" }) end,
      "label must be a string"
    )
    T.raises(function() p.run({ zzz = 1, cwd = 2 }) end, "cwd must be a string")
    T.raises(function() p.run({ zzz = 1 }) end, 'unknown field "zzz"')
    T.raises(
      function() p.run({ cmd = "ls", cwd = "/nonexistent/dir" }) end,
      "cwd: no such directory"
    )
    T.raises(
      function() p.run({ cmd = "ls", cols = "x", pty = true }) end,
      "cols must be an integer"
    )
    T.raises(function() p.run({ cmd = "ls", on_exit = 3 }) end, "on_exit must be a function")
    -- spawn error arrives as failed with the reason
    local bad = p.run({ cmd = { "/nonexistent/program" } })
    local rec = T.ok(bad:wait(5000))
    T.eq(rec.state, "failed")
    T.eq(rec.reason, "spawn_error")
  end)

  test("User autocmds carry the record; statusline counts", function()
    local p = require("proctor")
    p.purge()
    local seen = {}
    local g = api.nvim_create_augroup("proctor_test_events", { clear = true })
    api.nvim_create_autocmd("User", {
      group = g,
      pattern = { "ProctorStateChanged", "ProctorExit" },
      callback = function(a)
        local rec = a.data or p.event
        seen[#seen + 1] = { pat = a.match, id = rec.id, state = rec.state, exit = rec.exit_code }
      end,
    })
    local ok = p.run({ cmd = "exit 0" })
    local bad = p.run({ cmd = "exit 5" })
    local live = p.run({ cmd = { "sleep", "30" } })
    ok:wait(5000)
    bad:wait(5000)
    H.wait(3000, function() return require("proctor.engine").state[live.id] == "running" end)
    local seq = {}
    for _, s in ipairs(seen) do
      if s.id == bad.id then seq[#seq + 1] = s.pat:sub(8) .. ":" .. s.state end
    end
    T.eq(
      table.concat(seq, ","),
      "StateChanged:queued,StateChanged:starting,StateChanged:running,StateChanged:failed,Exit:failed"
    )
    local last
    for _, s in ipairs(seen) do
      if s.id == bad.id and s.pat == "ProctorExit" then last = s end
    end
    T.eq(last.exit, 5, "record in the event has the exit code")
    T.eq(p.statusline(), "proctor: 1 running, 1 ok, 1 failed")
    local st = p.status()
    T.eq(st.running, 1)
    T.eq(st.completed, 1)
    T.eq(st.failed, 1)
    live:cancel()
    live:wait(5000)
    T.eq(p.statusline(), "proctor: 1 ok, 1 failed, 1 canceled")
    api.nvim_del_augroup_by_name("proctor_test_events")
  end)

  test("notifications: never, on_failure, always; endings batched into one message", function()
    local p = require("proctor")
    local function run_two()
      H.clear_notes()
      local a = p.run({ cmd = "echo fine; exit 0", label = "good" })
      local b = p.run({ cmd = "echo boom >&2; sleep 0.05; exit 3", label = "bad" })
      -- Hold the main loop (no event is taken) until both ended in the core,
      -- so their ends reach the layer together: on a loaded machine "bad"
      -- could end more than the 200 ms quiet time after "good" was told.
      local core_eng, TERMINAL =
        require("proctor.engine").current(), require("proctor.engine").TERMINAL
      local function ended(x)
        local r = core_eng:get(x.id)
        return r and TERMINAL[r.state]
      end
      local deadline = H.hrms() + 30000
      while not (ended(a) and ended(b)) and H.hrms() < deadline do
        (vim.uv or vim.loop).sleep(5)
      end
      T.ok(ended(a) and ended(b), "two short executions did not end within 30 s")
      a:wait(5000)
      b:wait(5000)
      vim.wait(600, function() return #H.notes > 0 end, 10)
      vim.wait(300) -- nothing more comes
      return H.note_texts()
    end
    p.setup({ notify = "never", engine = { kill_grace_ms = 500 } })
    T.eq(#run_two(), 0)
    p.setup({ notify = "on_failure", engine = { kill_grace_ms = 500 } })
    local n = run_two()
    T.eq(#n, 1, table.concat(n, " | "))
    T.match(
      n[1],
      "^%(proctor%) #%d+ bad failed: exit 3 after [%d.]+ m?s — boom · :Proctor open %d+$"
    )
    T.eq(H.notes[1].level, vim.log.levels.ERROR)
    p.setup({ notify = "always", engine = { kill_grace_ms = 500 } })
    n = run_two()
    T.eq(#n, 1, "both endings in one message: " .. table.concat(n, " | "))
    T.match(n[1], "^%(proctor%) 2 executions ended: 1 failed, 1 completed\n")
    T.match(n[1], "\n  #%d+ bad failed: exit 3 after [^\n]* — boom · :Proctor open %d+\n")
    T.match(n[1], "\n  #%d+ good completed: exit 0 after [^\n]* — fine · :Proctor open %d+$")
    -- many ending in one batch: one summary. The main loop is held (no event
    -- is taken) until all 20 have ended in the core: their ends reach the
    -- layer together.
    H.clear_notes()
    local exs = {}
    for i = 1, 20 do
      exs[i] = p.run({ cmd = { "true" } })
    end
    local core_eng = require("proctor.engine").current()
    local function all_ended()
      for i = 1, 20 do
        local r = core_eng:get(exs[i].id)
        if not (r and require("proctor.engine").TERMINAL[r.state]) then return false end
      end
      return true
    end
    local deadline = H.hrms() + 30000
    while not all_ended() and H.hrms() < deadline do
      (vim.uv or vim.loop).sleep(5)
    end
    T.ok(all_ended(), "20 executions of true did not end within 30 s")
    for i = 1, 20 do
      exs[i]:wait(5000)
    end
    H.wait(10000, function() return #H.notes > 0 end, "the summary")
    -- the first notification counts all 20: they were told together
    T.match(H.notes[1].msg, "^%(proctor%) 20 executions ended: 20 completed\n")
    T.match(H.notes[1].msg, "\n  … and 15 more: :Proctor list$")
    p.setup({ notify = "never", engine = { kill_grace_ms = 500 } })
  end)
  -- run() returns at once: nothing in it waits for the engine thread (eng:get,
  -- eng:read and eng:list are calls that do); the consoles of runs started in
  -- one loop are made on later ticks, and every byte still reaches them.
  test(
    "fan-out: run() in a loop waits for no engine answer; ids in order; consoles get every byte",
    function()
      local p = require("proctor")
      local console = require("proctor.console")
      local eng = require("proctor.engine").get()
      local prev = api.nvim_get_current_buf() -- the consoles shown here leave the window as it was
      T.defer(function() pcall(api.nvim_win_set_buf, 0, prev) end)
      local methods = getmetatable(eng).__index
      local calls, saved = {}, {}
      for _, m in ipairs({ "get", "read", "list" }) do
        saved[m] = methods[m]
        methods[m] = function(...)
          calls[#calls + 1] = m
          return saved[m](...)
        end
      end
      local exs = {}
      local ok, err = pcall(function()
        for i = 1, 100 do
          exs[i] = p.run({
            cmd = { "printf", "line-%s\\n", tostring(i) },
            open = { open = "none" },
            notify = false,
          })
        end
      end)
      for m, f in pairs(saved) do
        methods[m] = f
      end
      T.ok(ok, tostring(err))
      T.eq(table.concat(calls, ","), "", "calls that wait for the engine thread during the loop")
      for i = 2, #exs do
        T.ok(exs[i].id > exs[i - 1].id, "ids in order: " .. exs[i - 1].id .. ", " .. exs[i].id)
      end
      for i, ex in ipairs(exs) do
        local rec = T.ok(ex:wait(30000))
        T.eq(rec.state, "completed", "execution " .. i)
      end
      -- every console's buffer is made (on later ticks; its terminal when
      -- first shown, or at once when asked for) and renders its line when shown
      H.wait(60000, function()
        for _, ex in ipairs(exs) do
          local stub = console._H.pending[ex.id]
          if not (console._H.consoles[ex.id] or (stub and stub.made_buf)) then return false end
        end
        return true
      end, "every console's buffer made")
      for _, i in ipairs({ 1, 50, 100 }) do
        local buf = p.open(exs[i].id, { open = "current" })
        H.wait(10000, function()
          for _, l in ipairs(H.lines(buf)) do
            if l == "line-" .. i then return true end
          end
        end, "console " .. i .. " shows its line")
      end
      p.purge()
    end
  )

  -- The work a fan-out loop does on the main thread, counted (never timed), in
  -- a fresh editor where the loop's run() is the first: a spec made only of
  -- run()'s own fields loads no extension (the tasks layer and what it
  -- pulls in), the loop makes no buffer or terminal and schedules the
  -- consoles' making once, not once per run (the engine, started by the
  -- loop's first run, schedules its first drain).
  test(
    "fan-out in a fresh editor: no extension loaded, no buffer made, consoles made later",
    function()
      local c = H.child()
      local got = c.lua([[
      local p = require("proctor")
      p.setup({ notify = "never" })
      local api = vim.api
      local counts = { schedule = 0, create_buf = 0, open_term = 0 }
      local saved = { schedule = vim.schedule, create_buf = api.nvim_create_buf,
                      open_term = api.nvim_open_term }
      vim.schedule = function(...) counts.schedule = counts.schedule + 1; return saved.schedule(...) end
      api.nvim_create_buf = function(...) counts.create_buf = counts.create_buf + 1; return saved.create_buf(...) end
      api.nvim_open_term = function(...) counts.open_term = counts.open_term + 1; return saved.open_term(...) end
      local bufs = #api.nvim_list_bufs()
      local ids = {}
      local ok, err = pcall(function()
        for i = 1, 100 do
          ids[i] = p.run({ cmd = { "printf", "x%s\\n", tostring(i) }, open = { open = "none" },
                           notify = false }).id
        end
      end)
      vim.schedule, api.nvim_create_buf, api.nvim_open_term = saved.schedule, saved.create_buf, saved.open_term
      local loaded = {}
      for name in pairs(package.loaded) do
        if name:find("^proctor%.tasks") then
          loaded[#loaded + 1] = name
        end
      end
      table.sort(loaded)
      _G.ids = ids
      return { ok = ok, err = tostring(err), counts = counts, bufs = #api.nvim_list_bufs() - bufs,
               loaded = table.concat(loaded, ","), first = ids[1], last = ids[100] }
    ]])
      T.ok(got.ok, got.err)
      T.eq(got.loaded, "", "modules of the tasks layer loaded by plain runs")
      T.eq(got.bufs, 0, "buffers made during the loop")
      T.eq(got.counts.create_buf, 0, "nvim_create_buf calls during the loop")
      T.eq(got.counts.open_term, 0, "nvim_open_term calls during the loop")
      -- the engine's first drain (it starts in the loop) and the consoles' making
      T.ok(got.counts.schedule <= 2, "vim.schedule calls during the loop: " .. got.counts.schedule)
      T.eq(got.last - got.first, 99, "ids in order")
      -- and the consoles are still made, later, each with its line
      c.wait(
        30000,
        [[(function()
      local CH = require("proctor.console")._H
      local cs, pe = CH.consoles, CH.pending
      for _, id in ipairs(_G.ids) do
        if not (cs[id] or (pe[id] and pe[id].made_buf)) then return false end
      end
      return true
    end)()]],
        "every console's buffer made"
      )
      c.wait(
        30000,
        [[(function()
      local e = require("proctor.engine")
      for _, id in ipairs(_G.ids) do if e.state[id] ~= "completed" then return false end end
      return true
    end)()]],
        "every run completed"
      )
      -- a spec with a task option still goes to the tasks layer
      local task = c.lua([[
      local ex = require("proctor").run({ cmd = "true", name = "a-task", open = { open = "none" } })
      return { loaded = package.loaded["proctor.tasks"] ~= nil, id = ex.id }
    ]])
      T.ok(task.loaded, "a spec with a task field loads the tasks layer")
      -- which holds because no task field is one of run()'s own
      local shared = c.lua([[
      local own = { text = true, notify = true, open = true, on_output = true, on_state = true,
                    on_exit = true }
      for _, f in ipairs(require("proctor.engine").load_core().spec_fields) do own[f.key] = true end
      local both = {}
      for k in pairs(require("proctor.tasks").FIELDS) do
        if own[k] then both[#both + 1] = k end
      end
      return table.concat(both, ",")
    ]])
      T.eq(shared, "", "task fields that are run()'s own too")
      c.stop()
    end
  )

  -- After setup(), once the editor is up, the modules a run with a console
  -- needs are loaded (setup()'s warm-up), so a fan-out's first run() loads
  -- none; and LuaJIT records no trace through run()'s path (compat.interpreted):
  -- a loop of runs in a fresh editor spent most of its time recording traces.
  -- The loop's starts wake the engine thread once, after the loop: none
  -- during it (each would set it spawning beside the loop), one in all.
  test(
    "fan-out after setup: the loop loads no module, records no trace in run()'s path, wakes the engine once",
    function()
      local c = H.child()
      T.eq(
        c.lua([[
      require("proctor").setup({ notify = "never" })
      return package.loaded["proctor.actions"] ~= nil
    ]]),
        false,
        "setup() itself loaded the console's modules"
      )
      c.wait(
        30000,
        [[package.loaded["proctor.actions"] ~= nil and package.loaded["proctor.console"] ~= nil
        and package.loaded["proctor.core"] ~= nil]],
        "setup()'s warm-up: the console extension and the core loaded"
      )
      local got = c.lua([[
      local p = require("proctor")
      local eng = require("proctor.engine").get()
      _G.w0 = eng:wakeups()
      local ju = jit and require("jit.util")
      local before = {}
      for name in pairs(package.loaded) do before[name] = true end
      local traced = {}
      local function on_trace(what, _, func, pc)
        if what ~= "start" then return end
        local info = ju.funcinfo(func, pc)
        local src = info.source or ""
        if src:find("/lua/proctor/init%.lua$") or src:find("/lua/proctor/console/") then
          traced[#traced + 1] = src:gsub("^.*/lua/", "") .. ":" .. tostring(info.currentline)
        end
      end
      if jit then jit.attach(on_trace, "trace") end
      local ids = {}
      local ok, err = pcall(function()
        for i = 1, 100 do
          ids[i] = p.run({ cmd = { "printf", "y%s\\n", tostring(i) }, open = { open = "none" },
                           notify = false }).id
        end
      end)
      if jit then jit.attach(on_trace) end
      local woken = eng:wakeups() - _G.w0
      local loaded = {}
      for name in pairs(package.loaded) do
        if not before[name] then loaded[#loaded + 1] = name end
      end
      table.sort(loaded)
      _G.ids = ids
      return { ok = ok, err = tostring(err), loaded = table.concat(loaded, ","),
               traced = table.concat(traced, ","), n = #ids, woken = woken }
    ]])
      T.ok(got.ok, got.err)
      T.eq(got.n, 100, "runs started")
      T.eq(got.loaded, "", "modules loaded during the loop")
      T.eq(got.traced, "", "traces started in run()'s path (init.lua, console/)")
      T.eq(got.woken, 0, "wake-ups of the engine thread during the loop")
      c.wait(
        30000,
        [[(function()
      local CH = require("proctor.console")._H
      local cs, pe = CH.consoles, CH.pending
      local e = require("proctor.engine")
      for _, id in ipairs(_G.ids) do
        if not (cs[id] or (pe[id] and pe[id].made_buf)) or e.state[id] ~= "completed" then
          return false
        end
      end
      return true
    end)()]],
        "every console's buffer made and every run completed"
      )
      -- nothing in the drain, the consoles or the endings called the engine:
      -- the one wake-up is the loop's, for its 100 starts
      T.eq(
        c.lua([[return require("proctor.engine").get():wakeups() - _G.w0]]),
        1,
        "wake-ups of the engine thread for the fan-out"
      )
      c.stop()
    end
  )

  test(
    "fan-out with on_exit: each gets the whole record without a call to the engine thread; User autocmds looked up once a batch",
    function()
      local c = H.child()
      c.lua([[
      require("proctor").setup({ notify = "never" })
      require("proctor.engine").get()
      require("proctor.console")
    ]])
      local got = c.lua([[
      local p = require("proctor")
      local engine = require("proctor.engine")
      local eng = engine.get()
      _G.exits, _G.autocmd_exits, _G.batch_max, _G.n_state = {}, 0, 0, 0
      local exists, in_batch = vim.fn.exists, 0
      vim.fn.exists = function(...)
        in_batch = in_batch + 1
        return exists(...)
      end
      engine.subscribe("test", function(ev)
        if ev.type == "state" then _G.n_state = _G.n_state + 1 end
      end)
      engine.on_batch("test", function()
        if in_batch > _G.batch_max then _G.batch_max = in_batch end
        in_batch = 0
      end)
      vim.api.nvim_create_autocmd("User", { pattern = "ProctorExit", callback = function()
        _G.autocmd_exits = _G.autocmd_exits + 1
      end })
      _G.w0 = eng:wakeups()
      _G.ids = {}
      for i = 1, 100 do
        _G.ids[i] = p.run({ cmd = { "printf", "y%s\\n", tostring(i) }, open = { open = "none" },
                            notify = false,
                            on_exit = function(_, rec) _G.exits[#_G.exits + 1] = rec end }).id
      end
      return #_G.ids
    ]])
      T.eq(got, 100, "runs started")
      c.wait(
        30000,
        [[#_G.exits == 100 and _G.autocmd_exits == 100]],
        "every on_exit and ProctorExit"
      )
      local r = c.lua([[
      local eng = require("proctor.engine").get()
      local woken = eng:wakeups() - _G.w0
      local bad = {}
      for _, rec in ipairs(_G.exits) do
        local now = eng:get(rec.id)
        rec.prev, now.prev = nil, nil
        if not vim.deep_equal(rec, now) then bad[#bad + 1] = vim.inspect(rec) .. " ~= " .. vim.inspect(now) end
      end
      return { woken = woken, bad = table.concat(bad, "\n"), batch_max = _G.batch_max,
               n_state = _G.n_state, sample = _G.exits[1] }
    ]])
      -- the one wake-up is the loop's, for its 100 starts: no on_exit asked
      -- the engine thread for its record
      T.eq(
        r.woken,
        1,
        "wake-ups (round trips) of the engine thread for the fan-out and its 100 on_exit"
      )
      T.eq(r.bad, "", "on_exit's record is the one eng:get gives")
      T.eq(r.sample.state, "completed")
      T.ok(
        r.sample.duration_ms and r.sample.ended_at and r.sample.bytes.stdout > 0,
        vim.inspect(r.sample)
      )
      T.ok(r.sample.env_keys ~= nil, "the whole record (env_keys too)")
      T.ok(r.n_state >= 400, "state events seen: " .. r.n_state)
      T.ok(r.batch_max <= 2, "vim.fn.exists calls in one batch of events: " .. r.batch_max)
      c.stop()
    end
  )

  -- A non-terminal state event brings its record too (the layer turns
  -- eng:state_records on): runs that start, run and end with consoles shown
  -- (their bars drawn after each batch, as a redraw does), hidden ones, the
  -- list open and a ProctorStateChanged autocmd make no eng:get on the main
  -- thread (each one waits for the engine thread, which a flood keeps busy),
  -- and the list's refreshes for them no eng:list (its timer, which reads the
  -- whole list again, does not fire within the test).
  test(
    "state events bring their record: consoles, bars, the list and ProctorStateChanged ask eng:get nothing",
    function()
      local c = H.child()
      c.lua([[
      require("proctor").setup({ notify = "never", list = { refresh_ms = 3600000 } })
      require("proctor.engine").get()
      require("proctor.console")
    ]])
      local n = c.lua([[
      local p = require("proctor")
      local engine = require("proctor.engine")
      local window = require("proctor.console.window")
      local methods = getmetatable(engine.get()).__index
      local get, list = methods.get, methods.list
      _G.gets, _G.lists, _G.where = 0, 0, {}
      methods.get = function(...)
        _G.gets = _G.gets + 1
        if #_G.where < 3 then _G.where[#_G.where + 1] = debug.traceback("", 2) end
        return get(...)
      end
      methods.list = function(...)
        _G.lists = _G.lists + 1
        return list(...)
      end
      _G.seen, _G.drawn = {}, {}
      vim.api.nvim_create_autocmd("User", { pattern = "ProctorStateChanged", callback = function(a)
        local r = a.data or p.event
        _G.seen[#_G.seen + 1] = { id = r.id, state = r.state, pid = r.pid, cmd = r.cmd,
          label = r.label, started_at = r.started_at, env = r.env_keys ~= nil }
      end })
      engine.on_batch("test-bars", function()
        for _, w in ipairs(vim.api.nvim_list_wins()) do
          local b = window.bar(w)
          if b:find("^proctor #") then _G.drawn[#_G.drawn + 1] = b end
        end
      end)
      vim.cmd("Proctor list")
      _G.lists_open = _G.lists
      _G.ids = {}
      for i = 1, 12 do
        _G.ids[i] = p.run({ cmd = "read x; exit " .. (i % 2), label = "rec" .. i,
                            open = { open = i <= 3 and "split" or "none" } }).id
      end
      return #_G.ids
    ]])
      T.eq(n, 12, "runs started")
      c.wait(
        30000,
        [[(function()
      for _, id in ipairs(_G.ids) do
        if require("proctor.engine").state[id] ~= "running" then return false end
      end
      return true
    end)()]],
        "every run running"
      )
      c.lua([[
      local eng = require("proctor.engine").current()
      for _, id in ipairs(_G.ids) do assert(eng:input(id, "x\n")) end
    ]])
      c.wait(
        30000,
        [=[(function()
      local engine = require("proctor.engine")
      for _, id in ipairs(_G.ids) do
        if not engine.TERMINAL[engine.state[id]] then return false end
      end
      return true
    end)()]=],
        "every run ended"
      )
      -- the list shows every end (its refresh after the last state event)
      c.wait(
        10000,
        [=[(function()
        local n = 0
        for _, l in ipairs(vim.api.nvim_buf_get_lines(vim.fn.bufnr("proctor://list"), 0, -1, false)) do
          if l:find(" completed ") or l:find(" failed ") then n = n + 1 end
        end
        return n == 12
      end)()]=],
        "the list shows the 12 ends"
      )
      local r = c.lua([[
      return { gets = _G.gets, lists = _G.lists - _G.lists_open, where = table.concat(_G.where, "\n---"),
               seen = _G.seen, ids = _G.ids, drawn = _G.drawn }
    ]])
      c.stop()
      T.eq(r.gets, 0, r.gets .. " eng:get calls on the main thread, the first ones at:" .. r.where)
      T.eq(r.lists, 0, "eng:list calls of the list's refreshes for state events")
      local by = {}
      for _, s in ipairs(r.seen) do
        by[s.id] = by[s.id] or {}
        table.insert(by[s.id], s)
      end
      for i, id in ipairs(r.ids) do
        local states = {}
        for _, s in ipairs(by[id] or {}) do
          states[#states + 1] = s.state
          T.eq(s.cmd, "read x; exit " .. (i % 2), "the record's cmd in " .. s.state)
          T.eq(s.label, "rec" .. i)
          T.ok(s.env, "the whole record (env_keys) in " .. s.state)
          if s.state == "running" then
            T.ok(s.pid and s.pid > 0 and s.started_at, "running: pid and started_at")
          elseif s.state == "queued" then
            T.ok(s.pid == nil and s.started_at == nil, "queued: no pid")
          end
        end
        T.eq(
          table.concat(states, ","),
          "queued,starting,running," .. (i % 2 == 0 and "completed" or "failed"),
          "#" .. id
        )
      end
      local ran, ended = false, false
      for _, b in ipairs(r.drawn) do
        ran = ran or b:find("│ running") ~= nil
        ended = ended or b:find("│ completed") ~= nil or b:find("│ failed") ~= nil
      end
      T.ok(ran and ended, "bars drawn running and ended: " .. #r.drawn)
    end
  )

  test("run(): a spawn error is the execution's end (failed, spawn_error, the message)", function()
    local p = require("proctor")
    local prev = api.nvim_get_current_buf()
    T.defer(function() pcall(api.nvim_win_set_buf, 0, prev) end)
    local states = {}
    local ex = p.run({
      cmd = { "/nonexistent/proctor-test-program" },
      open = { open = "none" },
      on_state = function(_, ev) states[#states + 1] = ev.state end,
    })
    T.ok(type(ex.id) == "number" and ex.id > 0, "an execution with its id at once")
    local rec = T.ok(ex:wait(10000))
    T.eq(rec.state, "failed")
    T.eq(rec.reason, "spawn_error")
    T.match(tostring(rec.error), "proctor%-test%-program")
    T.eq(states[#states], "failed")
    T.ok(not vim.tbl_contains(states, "running"), "never running: " .. table.concat(states, ","))
    local buf = p.open(ex.id, { open = "current" })
    H.wait(
      10000,
      function() return table.concat(H.lines(buf)):find("[proctor] failed: exec:", 1, true) ~= nil end,
      "the console's final line"
    )
  end)

  test("run() then cancel at once: canceled from queued or starting", function()
    local p = require("proctor")
    local exs = {}
    for i = 1, 20 do
      exs[i] = p.run({ cmd = { "sleep", "30" }, open = { open = "none" }, notify = false })
      T.eq(exs[i]:cancel(), "canceling")
    end
    for i, ex in ipairs(exs) do
      local rec = T.ok(ex:wait(20000))
      T.eq(rec.state, "canceled", "execution " .. i)
    end
  end)

  -- run() queues its start without waking the engine; a cancel in the same
  -- tick reaches the engine in the same batch, before the SPAWN would go out.
  test("run() then cancel() in the same tick: canceled, its command never ran", function()
    local p = require("proctor")
    local dir = vim.fn.tempname()
    vim.fn.mkdir(dir, "p")
    T.defer(function() vim.fn.delete(dir, "rf") end)
    local marker = dir .. "/ran"
    local ex = p.run({ cmd = { "touch", marker }, open = { open = "none" }, notify = false })
    T.eq(ex:cancel(), "canceling")
    local rec = T.ok(ex:wait(20000))
    T.eq(rec.state, "canceled")
    T.eq(rec.reason, "canceled")
    T.eq(rec.started_at, nil, "the canceled run was started")
    T.eq(ex:cancel(), "already_terminal")
    -- the engine had its time: a run started after it ran and ended
    local later = p.run({ cmd = { "true" }, open = { open = "none" }, notify = false })
    T.eq(T.ok(later:wait(20000)).state, "completed")
    T.eq((vim.uv or vim.loop).fs_stat(marker), nil, "the canceled run's command ran")
  end)

  -- engine.output_memory: a ring keeps its newest bytes in memory and the
  -- older ones of its output_limit in a spill file (csrc/base/ring.c). What
  -- the API reads back is the same: the last output_limit bytes, exactly.
  test(
    "ex:output() of a 10 MiB run gives its last 8 MiB exactly (older bytes read from the spill file)",
    function()
      local p = require("proctor")
      local limit = require("proctor.config").get().engine.output_limit
      local cfg = require("proctor.config").get()
      local mem = cfg.engine.output_memory or cfg.output_max_bytes
      T.eq(limit, 8 * 1024 * 1024)
      T.ok(mem < limit, "the default keeps part of the ring in memory")
      local n = 1500000 -- `seq 1 1500000`: 10,888,896 bytes
      local ex = p.run({ cmd = { "seq", "1", tostring(n) } })
      local rec = T.ok(ex:wait(60000))
      T.eq(rec.state, "completed")
      local parts = {}
      for i = 1, n do
        parts[i] = tostring(i)
      end
      local all = table.concat(parts, "\n") .. "\n"
      T.ok(#all > 10 * 1024 * 1024)
      local out, missed = ex:output()
      T.eq(#out, limit, "bytes kept")
      T.eq(missed, #all - limit, "bytes dropped")
      T.ok(out == all:sub(-limit), "the last 8 MiB, byte for byte")
      -- The file is this editor's (unlinked, in the spill directory) and no
      -- process it starts afterwards has it: not a job of proctor, not a job
      -- of Neovim's own (jobstart does not close descriptors, close-on-exec does).
      local cache = vim.env.XDG_CACHE_HOME
      local dir = (cache and cache:sub(1, 1) == "/" and cache or (vim.env.HOME .. "/.cache"))
        .. "/proctor"
      local function spill_fds(lines)
        local k = 0
        for _, l in ipairs(lines) do
          if l:find(dir, 1, true) then k = k + 1 end
        end
        return k
      end
      local own = {}
      for _, fd in ipairs(vim.fn.readdir("/proc/self/fd")) do
        own[#own + 1] = vim.fn.resolve("/proc/self/fd/" .. fd)
      end
      T.ok(spill_fds(own) >= 1, "a spill file open in " .. dir)
      local job = p.run({ cmd = { "sh", "-c", "ls -l /proc/$$/fd" }, text = true }):wait(20000)
      T.eq(job.code, 0)
      T.eq(spill_fds(vim.split(job.stdout, "\n")), 0, "a proctor job has no spill file")
      local sys = vim.fn.systemlist({ "sh", "-c", "ls -l /proc/$$/fd" })
      T.eq(spill_fds(sys), 0, "a child of Neovim has no spill file")
    end
  )

  -- engine.output_memory defaults to output_max_bytes, by name: polls of
  -- 64 KiB keep 64 KiB of a ring in memory (a console reads every poll from
  -- memory), so a run of 150,000 bytes spills (with 256 KiB it would not).
  test("output_memory follows output_max_bytes: 64 KiB polls, a 150,000-byte run spills", function()
    local c = H.child()
    c.lua([[
      require("proctor").setup({ notify = "never", output_max_bytes = 65536 })
      _G.ex = require("proctor").run({ cmd = { "head", "-c", "150000", "/dev/zero" },
                                       open = { open = "none" }, notify = false })
    ]])
    c.wait(30000, [[require("proctor.engine").state[_G.ex.id] == "completed"]], "the run completed")
    local got = c.lua([[
      local cache = vim.env.XDG_CACHE_HOME
      local dir = (cache and cache:sub(1, 1) == "/" and cache or (vim.env.HOME .. "/.cache"))
        .. "/proctor/"
      local n = 0
      for _, fd in ipairs(vim.fn.readdir("/proc/self/fd")) do
        if vim.fn.resolve("/proc/self/fd/" .. fd):find(dir, 1, true) then n = n + 1 end
      end
      local out, missed = _G.ex:output()
      return { fds = n, bytes = #out, missed = missed }
    ]])
    T.eq(got.bytes, 150000, "every byte read back")
    T.eq(got.missed, 0)
    T.ok(got.fds >= 1, "a spill file open: the ring kept 64 KiB in memory")
    c.stop()
  end)
end
