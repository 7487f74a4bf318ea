-- tests/nvim/spec_history.lua — the Neovim layer's durable history and audit
-- log: setup{ history, audit } reaches the core, a restarted engine lists the
-- earlier session's executions (marked), :Proctor info shows env keys only.
return function(test, T, H)
  local p = require("proctor")
  local engine = require("proctor.engine")
  local uv = vim.uv or vim.loop

  -- A fresh engine whose history is a file of a private directory; returns that
  -- file and the setup() options that name it.
  local function private_history()
    local dir = vim.fn.tempname()
    vim.fn.mkdir(dir, "p")
    local file = dir .. "/h.mpk"
    local opts = { notify = "never", history = { enabled = true, file = file } }
    engine._reset()
    assert(p.setup(opts))
    return file, opts
  end

  test(
    "history: a restarted engine lists the earlier session, marked; info shows env keys, not values",
    function()
      local dir = vim.fn.tempname()
      vim.fn.mkdir(dir, "p")
      local opts = {
        notify = "never",
        history = { enabled = true, file = dir .. "/h.mpk" },
        audit = { file = dir .. "/audit.jsonl" },
      }
      engine._reset()
      H.clear_notes()
      assert(p.setup(opts))
      local ex = p.run({
        cmd = { "sh", "-c", "echo kept-$FOO" },
        env = { FOO = "value-not-shown" },
        label = "h1",
      })
      T.ok(ex:wait(5000), "run did not end")
      local info = table.concat(require("proctor.views").execution_lines(ex.id), "\n")
      T.match(info, "env keys:.* FOO")
      T.ok(not info:find("value-not-shown", 1, true), "an env value is shown")
      engine._reset()
      assert(p.setup(opts))
      local rec = p.record(ex.id)
      T.ok(rec, "the earlier session's execution is gone")
      T.eq(rec.state, "completed")
      T.eq(rec.previous_session, true)
      T.eq((engine.current():read(ex.id, "stdout", 0, 100)), "kept-value-not-shown\n")
      local id2 = p.run({ cmd = { "true" } }).id
      T.ok(id2 > ex.id, "ids continue after the loaded ones")
      require("proctor.list").open()
      local lines = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n")
      T.match(lines, "#" .. ex.id .. " .- h1: sh %-c")
      T.ok(
        not lines:find("earlier session", 1, true) and not lines:find("%d%d%-%d%d%*"),
        "rows read plainly: " .. lines
      )
      vim.cmd("bwipeout!")
      local audit = vim.fn.readfile(dir .. "/audit.jsonl")
      T.ok(#audit >= 4, "audit lines: " .. #audit)
      T.ok(
        not table.concat(audit, "\n"):find("value-not-shown", 1, true),
        "an env value in the audit log"
      )
      T.eq(#H.notes, 0, "warnings: " .. table.concat(H.note_texts(), " | "))
      engine._reset()
      assert(p.setup({ notify = "never" }))
    end
  )

  test(
    "history: the engine's start asks for no warning while the history loads; what the load found is still told",
    function()
      local file, opts = private_history()
      local first = p.run({ cmd = { "sh", "-c", "echo spoilt-marker" } })
      T.ok(first:wait(5000), "run did not end")
      T.ok(p.run({ cmd = { "true" } }):wait(5000), "run did not end")
      engine._reset()
      -- one byte of the first record's output changed: its checksum fails, the
      -- framing holds (the quick look at the file accepts it; the load warns)
      local f = assert(io.open(file, "rb"))
      local data = f:read("*a")
      f:close()
      local at = assert(data:find("spoilt-marker", 1, true), "the output is in the file")
      f = assert(io.open(file, "wb"))
      f:write(data:sub(1, at - 1) .. "S" .. data:sub(at + 1))
      f:close()
      -- a load that lasts: history_loading() says true for its first 3 calls
      local core = assert(engine.load_core())
      local probe = assert(core.new({}))
      local methods = getmetatable(probe).__index
      probe:close()
      local real_warnings, real_loading = methods.warnings, methods.history_loading
      local left, early, calls = 3, 0, 0
      methods.history_loading = function(self)
        if left > 0 then
          left = left - 1
          return true
        end
        return real_loading(self)
      end
      methods.warnings = function(self)
        calls = calls + 1
        if left > 0 then early = early + 1 end
        return real_warnings(self)
      end
      H.clear_notes()
      local ok, err = pcall(function()
        assert(p.setup(opts))
        T.ok(engine.get(), "no engine")
        H.wait(5000, function() return #H.notes > 0 end, "the load's warning told")
      end)
      methods.warnings, methods.history_loading = real_warnings, real_loading
      if not ok then error(err, 0) end
      T.eq(early, 0, "eng:warnings() called while the history loaded")
      T.ok(calls >= 1, "eng:warnings() never called")
      T.match(table.concat(H.note_texts(), " | "), "corrupt stretch")
      engine._reset()
      assert(p.setup({ notify = "never" }))
    end
  )

  test(
    "history: closing while the history loads lists only the live states (a whole list would wait for the load); live runs are still canceled",
    function()
      private_history()
      local ex = p.run({ cmd = { "sleep", "30" } })
      H.wait(5000, function() return engine.state[ex.id] == "running" end, "the run runs")
      -- a load that lasts: history_loading() says true until the engine closes
      local eng = engine.current()
      local methods = getmetatable(eng).__index
      local real_list, real_loading, real_cancel =
        methods.list, methods.history_loading, methods.cancel
      local whole, filtered, canceled = 0, 0, {}
      methods.history_loading = function() return true end
      methods.list = function(self, filter)
        if filter and filter.state then
          filtered = filtered + 1
        else
          whole = whole + 1
        end
        return real_list(self, filter)
      end
      methods.cancel = function(self, id, ...)
        canceled[#canceled + 1] = id
        return real_cancel(self, id, ...)
      end
      local ok, err = pcall(engine.shutdown)
      methods.list, methods.history_loading, methods.cancel = real_list, real_loading, real_cancel
      if not ok then error(err, 0) end
      T.eq(whole, 0, "lists of every record asked while the history loaded")
      T.ok(filtered >= 1, "no list of a live state")
      T.eq(canceled[1], ex.id, "the live run was not canceled")
      engine._reset()
      assert(p.setup({ notify = "never" }))
    end
  )

  test(
    "history: the Lua layer holds no loaded record's output until asked; the core has it",
    function()
      local _, opts = private_history()
      local n, size, ids = 16, 60000, {}
      for i = 1, n do
        local ex =
          p.run({ cmd = { "sh", "-c", ("head -c %d /dev/zero | tr '\\0' y"):format(size) } })
        ids[i] = ex.id
      end
      for i = 1, n do
        T.ok(p.get(ids[i]):wait(10000), "run " .. i .. " did not end")
      end
      engine._reset()
      collectgarbage()
      collectgarbage()
      local before = collectgarbage("count")
      assert(p.setup(opts))
      local eng = assert(engine.get())
      H.wait(10000, function() return not eng:history_loading() end, "the history loaded")
      require("proctor.list").open()
      vim.cmd("bwipeout!")
      collectgarbage()
      collectgarbage()
      local held = (collectgarbage("count") - before) * 1024
      T.ok(
        held < n * size / 4,
        ("the Lua heap grew by %d bytes for %d tails of %d"):format(held, n, size)
      )
      local data = eng:read(ids[n], "stdout", 0, size)
      T.eq(#data, size)
      T.eq(p.record(ids[1]).previous_session, true)
      engine._reset()
      assert(p.setup({ notify = "never" }))
    end
  )

  test("history: survives a restart of Neovim itself; secrets show as *** in a console", function()
    local dir = vim.fn.tempname()
    vim.fn.mkdir(dir, "p")
    local setup = string.format(
      [[require("proctor").setup({ notify = "never",
      history = { enabled = true, file = %q } })]],
      dir .. "/h.mpk"
    )
    local a = H.child()
    a.lua(setup)
    local id = a.lua([[
      local ex = require("proctor").run({ cmd = "printf 'token=%s\n' \"$TOKEN\"; printf 'done\n'",
        secrets = { TOKEN = "hunter2-very-secret" }, label = "first-nvim" })
      ex:open()
      _G.ex = ex
      return ex.id
    ]])
    a.wait(
      10000,
      "_G.has_line(vim.api.nvim_get_current_buf(), '^%[proctor%] completed')",
      "console final line"
    )
    local console = table.concat(a.lua("return _G.lines(vim.api.nvim_get_current_buf())"), "\n")
    T.match(console, "token=%*%*%*")
    T.ok(not console:find("hunter2", 1, true), "the secret is in the console: " .. console)
    vim.rpcnotify(a.job, "nvim_command", "qa!") -- the child exits: no answer comes
    vim.wait(5000, function() return vim.fn.jobwait({ a.job }, 0)[1] ~= -1 end, 20)
    local b = H.child()
    b.lua(setup)
    local rec = b.lua("return require('proctor').record(...)", id)
    T.ok(rec, "the first Neovim's execution is not in the second's history")
    T.eq(rec.label, "first-nvim")
    T.eq(rec.previous_session, true)
    local out =
      b.lua("return (require('proctor.engine').current():read(...))", id, "stdout", 0, 4096)
    T.eq(out, "token=***\ndone\n")
    b.stop()
  end)

  -- Two editors at once on one state directory, with the defaults: history is
  -- on, each editor takes a slot of it (ids 1, 2 ... and 1000000001 ...).
  local SLOT = 1000000000
  local function editors_env()
    local state = vim.fn.tempname()
    vim.fn.mkdir(state, "p")
    return { XDG_STATE_HOME = state }
  end
  local function run_in(c, cmd, label)
    local id = c.lua(
      [[local ex = require("proctor").run({ cmd = ..., label = select(2, ...) })
        assert(ex:wait(20000), "did not end")
        return ex.id]],
      cmd,
      label
    )
    return id
  end
  local function file_has(file, text)
    local f = io.open(file, "rb")
    local s = f and f:read("*a") or ""
    if f then f:close() end
    return s:find(text, 1, true) ~= nil
  end
  local function ids_of(c)
    return c.lua([[local v = {}
      for _, r in ipairs(require("proctor").list()) do v[#v + 1] = r.id end
      table.sort(v)
      return v]])
  end
  local function has(v, id) return vim.tbl_contains(v, id) end

  test("history: two editors at once both record, read each other, never share an id", function()
    local env = editors_env()
    local a = H.child({ env = env })
    local b = H.child({ env = env })
    a.lua([[require("proctor").setup({ notify = "never" })]])
    b.lua([[require("proctor").setup({ notify = "never" })]])
    local file = a.lua([[return require("proctor.engine").history_file()]])
    local a1 = run_in(a, "echo from-a", "a-run")
    T.eq(a1, 1, "the first editor's first run")
    H.wait(10000, function() return file_has(file, "from-a\n") end, "a's end frame on disk")
    local b1 = run_in(b, "echo from-b", "b-run")
    T.eq(b1, SLOT + 1, "the second editor's first run")
    T.ok(has(ids_of(b), a1), "b lists a's finished run at its start")
    T.eq(table.concat(b.lua("return _G.notes"), " | "), "", "b was told")
    local a2 = run_in(a, "echo from-a-again")
    T.eq(a2, 2)
    H.wait(10000, function() return file_has(file .. ".1", "from-b\n") end, "b's end frame")
    -- a reload of a (a new Neovim: slot 0 again) lists both editors' runs
    a.stop()
    vim.wait(5000, function() return vim.fn.jobwait({ a.job }, 0)[1] ~= -1 end, 20)
    local a_again = H.child({ env = env })
    a_again.lua([[require("proctor").setup({ notify = "never" })]])
    local v = ids_of(a_again)
    T.eq(table.concat(v, ","), table.concat({ a1, a2, b1 }, ","), "the reloaded editor's list")
    T.eq(
      a_again.lua("return (require('proctor.engine').get():read(...))", b1, "stdout", 0, 100),
      "from-b\n"
    )
    T.eq(run_in(a_again, "true"), a2 + 1, "ids go on in a's range")
    -- delete from b: seen by a after a reload
    T.eq(b.lua("return require('proctor').delete(...)", a1), "deleted")
    H.wait(
      10000,
      function() return file_has(file .. ".1", "\xa1k\xa1d\xa3ids") end,
      "b's tombstone"
    )
    a_again.stop()
    vim.wait(5000, function() return vim.fn.jobwait({ a_again.job }, 0)[1] ~= -1 end, 20)
    local a3 = H.child({ env = env })
    a3.lua([[require("proctor").setup({ notify = "never" })]])
    local v3 = ids_of(a3)
    T.ok(not has(v3, a1), "a deleted run came back: " .. table.concat(v3, ","))
    T.ok(has(v3, a2) and has(v3, b1), "the others stay: " .. table.concat(v3, ","))
    a3.stop()
    b.stop()
  end)

  test("history: a SIGKILLed editor's file (a torn write) is still read by the other", function()
    local env = editors_env()
    local a = H.child({ env = env })
    local b = H.child({ env = env })
    a.lua([[require("proctor").setup({ notify = "never" })]])
    b.lua([[require("proctor").setup({ notify = "never" })]])
    run_in(a, "true")
    local file = a.lua([[return require("proctor.engine").history_file()]])
    local b1 = run_in(b, "echo done-before-the-kill", "b-done")
    local tag = "proctor-hist-" .. vim.fn.getpid() .. "-" .. tostring(uv.hrtime())
    local live = b.lua(
      [[return require("proctor").run({ cmd = { "sleep", "1000" }, label = "victim",
        env = { PROCTOR_TEST_TAG = ... } }).id]],
      tag
    )
    H.wait(
      10000,
      function()
        return file_has(file .. ".1", "done-before-the-kill\n") and file_has(file .. ".1", "victim")
      end,
      "b's frames on disk"
    )
    uv.kill(b.pid, "sigkill")
    vim.wait(5000, function() return vim.fn.jobwait({ b.job }, 0)[1] ~= -1 end, 20)
    -- the write the kill cut short: half a frame at the end of b's file
    local f = assert(io.open(file .. ".1", "ab"))
    f:write("\x92\xce\x00\x01")
    f:close()
    a.stop() -- a again (slot 0): it reads b's slot, b's own repairs it
    vim.wait(5000, function() return vim.fn.jobwait({ a.job }, 0)[1] ~= -1 end, 20)
    local a2 = H.child({ env = env })
    a2.lua([[require("proctor").setup({ notify = "never" })]])
    local rec = a2.lua("return require('proctor').record(...)", b1)
    T.ok(rec, "the killed editor's finished run is not listed")
    T.eq(rec.state, "completed")
    local lost = a2.lua("return require('proctor').record(...)", live)
    T.ok(lost, "the killed editor's running job is not listed")
    T.eq(lost.state, "failed")
    T.eq(lost.reason, "host_lost")
    T.eq(table.concat(a2.lua("return _G.notes"), " | "), "", "a was told about b's file")
    -- b again: its slot, its file repaired, ids after the ones it had
    local b2 = H.child({ env = env })
    b2.lua([[require("proctor").setup({ notify = "never" })]])
    T.eq(run_in(b2, "true"), live + 1, "ids after the killed editor's")
    a2.stop()
    b2.stop()
  end)

  test("history: a probe takes no id: after make's probe the first run is #1", function()
    local dir = vim.fn.tempname()
    vim.fn.mkdir(dir, "p")
    vim.fn.system({ "cp", "-r", H.root .. "/tests/tasks/make/.", dir })
    local c = H.child()
    c.lua(
      [[local dir = ...
      require("proctor").setup({ notify = "never" })
      assert(require("proctor.tasks.trust").allow(dir, false))
      vim.cmd("cd " .. vim.fn.fnameescape(dir))
      _G.got = nil
      require("proctor").tasks({ cwd = dir, callback = function(t) _G.got = t end })]],
      dir
    )
    c.wait(20000, "_G.got ~= nil", "the make probe")
    T.ok(
      c.lua([[for _, t in ipairs(_G.got) do if t.name == "make all" then return true end end]]),
      "the probe found no make targets"
    )
    c.cmd("Proctor run true")
    T.eq(table.concat(ids_of(c), ","), "1", "the list after the first run")
    c.stop()
  end)
end
