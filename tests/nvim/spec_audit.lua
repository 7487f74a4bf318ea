-- tests/nvim/spec_audit.lua — the branches, boundaries and negatives of the
-- help's promises that no other spec tried (tests/AUDIT.md lists each promise
-- and its test): sequences, dependencies, services, watch, the task output
-- reader, problem matchers, configuration checks, :Proctor parsing, the list
-- view's filters and :checkhealth. Each test names its area first
-- ("audit: chain: ..."), so PROCTOR_TEST=audit: selects them all.
return function(test, T, H)
  local function eq(a, b, msg)
    if type(a) == "table" or type(b) == "table" then return T.eq(T.fmt(a), T.fmt(b), msg) end
    return T.eq(a, b, msg)
  end
  local function p() return require("proctor") end
  local function tasks() return require("proctor.tasks") end

  local function tmpdir()
    local dir = vim.fn.tempname()
    vim.fn.mkdir(dir, "p")
    T.defer(function() vim.fn.delete(dir, "rf") end)
    return dir
  end

  local function write(path, text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
  end

  local function wait_state(id, states, ms)
    local want = {}
    for s in states:gmatch("[%w_]+") do
      want[s] = true
    end
    H.wait(ms or 20000, function()
      require("proctor.engine").pump()
      local r = p().record(id)
      return r and want[r.state]
    end, "execution " .. id .. " to be " .. states)
    return p().record(id)
  end

  local function setup(extra)
    eq(
      p().setup(
        vim.tbl_deep_extend(
          "force",
          { notify = "never", engine = { kill_grace_ms = 500 } },
          extra or {}
        )
      ),
      true
    )
    T.defer(function() p().setup({}) end)
  end

  -- The message of what fn(...) raised (proctor's own errors are { proctor = msg }).
  local function raised(fn, ...)
    local ok, e = pcall(fn, ...)
    T.ok(not ok, "expected a refusal")
    return type(e) == "table" and e.proctor or tostring(e)
  end

  -- Sequences (|proctor.sequence()|) -----------------------------------------------

  test(
    "audit: chain: a sequence refuses an empty list, an empty parallel step and a step that is neither",
    function()
      local seq = p().sequence
      local c, msg, name = seq({})
      eq({ c, name }, { nil, "EINVAL" })
      T.match(msg, "needs a list of steps")
      c, msg, name = seq({ { parallel = {} } })
      eq({ c, name }, { nil, "EINVAL" })
      T.match(msg, "step 1: 'parallel' needs a list")
      c, msg, name = seq({ { cmd = "true" }, 42 })
      eq({ c, name }, { nil, "EINVAL" })
      T.match(msg, "step 2: a task name or a definition with cmd")
      c, msg = seq({ { label = "no cmd" } })
      eq(c, nil)
      T.match(msg, "step 1: a task name or a definition with cmd")
    end
  )

  test(
    "audit: chain: the default name joins steps with arrows and parallels with bars; opts.name wins",
    function()
      setup()
      local dir = tmpdir()
      local c = assert(p().sequence({
        { cmd = "true", name = "a" },
        { parallel = { { cmd = "true", name = "b" }, { cmd = "true", name = "c" } } },
      }, { cwd = dir }))
      eq(c:record().name, "a → (b | c)")
      local rec = assert(c:wait(20000))
      eq({ rec.state, #rec.steps, #rec.steps[2] }, { "completed", 2, 2 })
      local named = assert(p().sequence({ { cmd = "true" } }, { cwd = dir, name = "mine" }))
      eq(named:record().name, "mine")
      assert(named:wait(20000))
      -- a chain that ended answers already_terminal to cancel
      eq(c:cancel(), "already_terminal")
    end
  )

  test(
    "audit: chain: a failing member fails the chain; later members end dependency_failed, never run",
    function()
      setup()
      local dir = tmpdir()
      local got
      local c = assert(
        p().sequence(
          { { cmd = "exit 4", name = "bad" }, { cmd = "touch ran", name = "later" } },
          { cwd = dir, on_exit = function(r) got = r end }
        )
      )
      local rec = assert(c:wait(20000))
      eq(rec.state, "failed")
      local bad, later = rec.steps[1][1], rec.steps[2][1]
      eq(rec.failed_id, bad, "the chain names the member that failed")
      local lr = p().record(later)
      eq({ lr.state, lr.reason, lr.started_at }, { "canceled", "dependency_failed", nil })
      eq(vim.fn.filereadable(dir .. "/ran"), 0, "the later member ran")
      H.wait(5000, function() return got ~= nil end, "on_exit")
      eq({ got.id, got.state }, { c.id, "failed" })
    end
  )

  test(
    "audit: chain: a parallel step waits for all its members before the next step starts",
    function()
      setup()
      local dir = tmpdir()
      local c = assert(p().sequence({
        {
          parallel = {
            { cmd = "sleep 0.5; touch slow", name = "slow" },
            { cmd = "true", name = "quick" },
          },
        },
        { cmd = "test -e slow", name = "check" },
      }, { cwd = dir }))
      local rec = assert(c:wait(20000))
      eq(rec.state, "completed", "the next step ran before every parallel member ended")
      local slow, check = p().record(rec.steps[1][1]), p().record(rec.steps[2][1])
      T.ok(check.started_at >= slow.ended_at, "started before the slow member ended")
    end
  )

  test(
    "audit: chain: a member's own after and watch are left out (the chain's order is its dependency)",
    function()
      setup()
      local dir = tmpdir()
      local c = assert(
        p().sequence(
          { { cmd = "true", name = "m", after = { "no-such-task" }, watch = true } },
          { cwd = dir }
        )
      )
      local rec = assert(c:wait(20000))
      eq(rec.state, "completed", "the member waited for its own after")
      eq((tasks().info(rec.steps[1][1]) or {}).watching or false, false, "the member watches")
    end
  )

  -- Dependencies (|proctor-after|) ------------------------------------------------

  test("audit: after: a dependency that was canceled or timed out releases nothing", function()
    setup()
    local dir = tmpdir()
    local dep = assert(p().run({ cmd = { "sleep", "30" }, cwd = dir }))
    local ex = assert(p().run({ cmd = "touch ran1", cwd = dir, after = { dep.id } }))
    wait_state(dep.id, "running")
    dep:cancel()
    local rec = wait_state(ex.id, "canceled completed failed")
    eq({ rec.state, rec.reason, rec.started_at }, { "canceled", "dependency_failed", nil })
    local slow = assert(p().run({ cmd = { "sleep", "30" }, cwd = dir, timeout_ms = 100 }))
    local ex2 = assert(p().run({ cmd = "touch ran2", cwd = dir, after = { slow.id } }))
    eq(wait_state(slow.id, "timed_out canceled completed failed").state, "timed_out")
    rec = wait_state(ex2.id, "canceled completed failed")
    eq({ rec.state, rec.reason }, { "canceled", "dependency_failed" })
    eq(
      vim.fn.filereadable(dir .. "/ran1") + vim.fn.filereadable(dir .. "/ran2"),
      0,
      "a dependent ran"
    )
  end)

  -- Services (|proctor-services|) --------------------------------------------------

  test("audit: services: the backoff is capped at backoff_max_ms", function()
    setup()
    local dir = tmpdir()
    -- uncapped, the restarts would wait 60, 120 and 240 s; capped at 1 ms they come at once
    local ex = assert(p().run({
      cmd = "exit 1",
      cwd = dir,
      pty = false,
      restart = "on-failure",
      max_restarts = 3,
      backoff_ms = 60000,
      backoff_max_ms = 1,
    }))
    H.wait(30000, function()
      local i = tasks().info(ex.id)
      return i and #i.group_ids == 4 and i.state == "done"
    end, "three capped restarts, then giving up")
  end)

  test(
    'audit: services: restart = "on-failure" does not restart a success; a timeout is a failure',
    function()
      setup()
      local dir = tmpdir()
      local ok = assert(
        p().run({ cmd = "true", cwd = dir, pty = false, restart = "on-failure", backoff_ms = 1 })
      )
      wait_state(ok.id, "completed")
      H.wait(5000, function() return (tasks().info(ok.id) or {}).state == "done" end, "settled")
      eq(#tasks().info(ok.id).group_ids, 1, "a success restarted")
      local slow = assert(p().run({
        cmd = { "sleep", "30" },
        cwd = dir,
        pty = false,
        restart = "on-failure",
        timeout_ms = 100,
        max_restarts = 1,
        backoff_ms = 1,
      }))
      H.wait(20000, function()
        local i = tasks().info(slow.id)
        return i and #i.group_ids == 2 and i.state == "done"
      end, "one restart after a timeout, then giving up")
      eq(p().record(tasks().info(slow.id).group_ids[2]).state, "timed_out")
    end
  )

  test("audit: services: max_restarts = 0 never restarts", function()
    setup()
    local dir = tmpdir()
    local ex = assert(p().run({
      cmd = "exit 1",
      cwd = dir,
      pty = false,
      restart = "always",
      max_restarts = 0,
      backoff_ms = 1,
    }))
    H.wait(10000, function() return (tasks().info(ex.id) or {}).state == "done" end, "gave up")
    eq(#tasks().info(ex.id).group_ids, 1)
  end)

  -- Watch (|proctor-watch|) -------------------------------------------------------

  test(
    "audit: watch: a name pattern matches the file name, a pattern with / the path under the root",
    function()
      local W = require("proctor.tasks.watch")._H
      local m = assert(W.matcher({ "*.c", "src/*.h" }))
      eq(
        { m("a.c"), m("deep/er/b.c"), m("src/x.h"), m("x.h"), m("other/x.h"), m("a.cc") },
        { true, true, true, false, false, false }
      )
      eq(select(2, W.matcher({ "" })), "watch patterns must be non-empty strings")
      eq(select(2, W.matcher({ 3 })), "watch patterns must be non-empty strings")
    end
  )

  test(
    "audit: watch: at most max_dirs directories, ignored names skipped, changes there unseen",
    function()
      local watch = require("proctor.tasks.watch")
      local dir = tmpdir()
      for _, d in ipairs({ "a", "b", "c", "a/x", "node_modules", "node_modules/pkg" }) do
        vim.fn.mkdir(dir .. "/" .. d, "p")
      end
      local w = assert(
        watch.start({ root = dir, patterns = { "*.c" }, max_dirs = 3, fs = true }, function() end)
      )
      eq(w.dirs(), 3, "the bound")
      w.stop()
      local calls = {}
      w = assert(
        watch.start(
          { root = dir, patterns = { "*.c" }, debounce_ms = 20, fs = true },
          function(paths) calls[#calls + 1] = paths end
        )
      )
      T.defer(w.stop)
      eq(w.dirs(), 5, "every directory but node_modules and what is below it")
      write(dir .. "/node_modules/pkg/dep.c", "x")
      write(dir .. "/a/x/kept.h", "x")
      write(dir .. "/a/x/seen.c", "x")
      H.wait(10000, function() return #calls > 0 end, "the change")
      for _, paths in ipairs(calls) do
        for _, path in ipairs(paths) do
          T.ok(not path:find("node_modules") and not path:find("kept"), "saw " .. path)
        end
      end
      eq(calls[1][#calls[1]], vim.fn.resolve(dir) .. "/a/x/seen.c")
    end
  )

  test("audit: watch: a buffer written outside the root is not a change of it", function()
    local watch = require("proctor.tasks.watch")
    local dir, out = tmpdir(), tmpdir()
    local calls = {}
    local w = assert(
      watch.start(
        { root = dir, patterns = { "*.txt" }, debounce_ms = 20 },
        function(paths) calls[#calls + 1] = table.concat(paths, ",") end
      )
    )
    T.defer(w.stop)
    -- written with Neovim (BufWritePost): outside first, then inside
    for _, f in ipairs({ out .. "/o.txt", dir .. "/i.txt" }) do
      vim.cmd("silent noautocmd edit " .. vim.fn.fnameescape(f))
      vim.api.nvim_buf_set_lines(0, 0, -1, false, { "x" })
      vim.cmd("silent write")
      vim.cmd("bwipeout!")
    end
    H.wait(10000, function() return #calls > 0 end, "the change")
    for _, c in ipairs(calls) do
      T.ok(not c:find(out, 1, true), "saw a file outside the root: " .. c)
    end
  end)

  -- The task output reader ---------------------------------------------------------

  test(
    "audit: reader: escape sequences go, \\r is a line end, a last line without \\n still counts",
    function()
      local reader = require("proctor.tasks.reader")
      eq(
        reader.clean("\27[1;31merror\27[0m: x\r\n50%\r100%\n\27]0;title\7ok\n"),
        "error: x\n50%\n100%\nok\n"
      )
      setup()
      local ex = assert(p().run({ cmd = "printf 'one\\ntwo'", pty = false }))
      local text, fin = {}, false
      reader.attach(
        ex.id,
        { chunk = function(t) text[#text + 1] = t end, finish = function() fin = true end }
      )
      H.wait(20000, function() return fin end, "the reader's finish")
      eq(table.concat(text), "one\ntwo\n")
    end
  )

  test(
    "audit: reader: a line longer than the bound is handed over cut, before the program ends",
    function()
      local reader = require("proctor.tasks.reader")
      local saved = reader.LINE_MAX
      reader.LINE_MAX = 100
      T.defer(function() reader.LINE_MAX = saved end)
      setup()
      local ex =
        assert(p().run({ cmd = "head -c 300 /dev/zero | tr '\\0' x; exec sleep 30", pty = false }))
      local got = {}
      reader.attach(ex.id, { chunk = function(t) got[#got + 1] = t end })
      H.wait(
        20000,
        function() return #table.concat(got) >= 300 end,
        "the long line while the program runs"
      )
      T.ok(not require("proctor.engine").is_done(ex.id), "only the end handed it over")
      ex:cancel(true)
    end
  )

  -- Problem matchers ----------------------------------------------------------------

  local function match(name, chunks, cwd)
    local x = assert(require("proctor.tasks.matchers").new(name, { cwd = cwd or "/src" }))
    for _, c in ipairs(chunks) do
      x:feed(c)
    end
    x:finish()
    return x.items
  end

  test(
    "audit: matchers: a program's matcher past env, VAR=, npx and a version suffix; unknown is none",
    function()
      local f = require("proctor.tasks.matchers").for_command
      eq({
        f("env CC=clang make -j8"),
        f({ "/usr/bin/gcc-12", "a.c" }),
        f("npx tsc -p ."),
        f("exec cargo test"),
        f("ls -l"),
        f(""),
        f({}),
      }, { "gcc", "gcc", "tsc", "cargo", nil, nil, nil })
    end
  )

  test(
    "audit: matchers: a matcher is a name or an 'errorformat': empty and non-strings are refused",
    function()
      local m = require("proctor.tasks.matchers")
      T.match(select(2, m.new("", { cwd = "/" })), "must be a name or an 'errorformat'")
      T.match(select(2, m.new(7, { cwd = "/" })), "must be a name or an 'errorformat'")
    end
  )

  test("audit: matchers: rustc's message in one chunk and its --> line in the next", function()
    local it = match("rustc", { "error[E0308]: mismatched types\n", " --> src/lib.rs:4:9\n" })
    eq(
      { #it, it[1] and it[1].filename, it[1] and it[1].code, it[1] and it[1].text },
      { 1, "/src/src/lib.rs", "E0308", "mismatched types" }
    )
  end)

  test("audit: matchers: gcc pops a directory only on make's own Leaving line", function()
    local it = match("gcc", {
      "make: Entering directory '/w/sub'\n",
      "echo Leaving directory '/w/sub'\n",
      "a.c:1:2: error: e\n",
      "make: Leaving directory '/w/sub'\n",
      "b.c:3:4: warning: n\n",
    })
    eq({ it[1].filename, it[2].filename, it[2].type }, { "/w/sub/a.c", "/src/b.c", "W" })
  end)

  test(
    "audit: matchers: tsc warnings are W, eslint without a rule has no code, <string> frames are none",
    function()
      local it = match("tsc", { "a.ts(1,2): warning TS6133: unused\n" })
      eq({ it[1].type, it[1].code }, { "W", "TS6133" })
      it = match("eslint", { "/w/a.js:1:1: Parsing error: x [Error]\n" })
      eq({ #it, it[1].code, it[1].type }, { 1, nil, "E" })
      it = match("python", {
        'Traceback (most recent call last):\n  File "<string>", line 1, in <module>\n'
          .. '  File "m.py", line 2, in f\nKeyError: 1\n',
      })
      eq({ #it, it[1].filename, it[1].text }, { 1, "/src/m.py", "KeyError: 1" })
    end
  )

  test(
    "audit: matchers: ~/ and ./ names resolve; an errorformat's w is W, col 0 none, lnum 0 is 1",
    function()
      local it = match("gcc", { "~/x.c:1:1: error: e\n", "./d/../y.c:2:1: warning: w\n" }, "/w")
      eq({ it[1].filename, it[2].filename }, { vim.fn.expand("~") .. "/x.c", "/w/y.c" })
      it = match("%f:%l:%c:%t:%m", { "a.txt:0:0:w:careful\n", "b.txt:3:2:q:odd\n" }, "/tmp")
      eq({ it[1].lnum, it[1].col, it[1].type, it[2].type, it[2].col }, { 1, nil, "W", "E", 2 })
    end
  )

  -- Configuration (|proctor-config|) ------------------------------------------------

  test("audit: config: integers, their lower bound, their upper bound", function()
    local cfg = require("proctor.config")
    T.match(
      select(2, cfg.validate({ console = { size = 2.5 } })),
      "'console%.size' must be a positive integer, got 2%.5"
    )
    T.match(
      select(2, cfg.validate({ console = { size = 0 } })),
      "'console%.size' must be a positive integer, got 0"
    )
    T.ok(cfg.validate({ console = { size = 1 } }), "the lowest size")
    T.ok(
      cfg.validate({ engine = { kill_grace_ms = 0, history_limit = 0 } }),
      "0 where 0 is allowed"
    )
    T.ok(cfg.validate({ console = { bytes_per_tick = 1048576 } }), "the largest bytes_per_tick")
    T.match(
      select(2, cfg.validate({ console = { bytes_per_tick = 1048577 } })),
      "'console%.bytes_per_tick' must be at most 1048576, got 1048577"
    )
  end)

  test(
    "audit: config: tasks entries need a name and a cmd (or sequence); functions are taken",
    function()
      local cfg = require("proctor.config")
      T.ok(cfg.validate({
        tasks = {
          a = { cmd = "x" },
          b = function() end,
          c = { sequence = { "a" } },
          { name = "d", cmd = "y" },
        },
      }))
      T.match(select(2, cfg.validate({ tasks = { { cmd = "y" } } })), "entry %[1%] has no name")
      T.match(select(2, cfg.validate({ tasks = { a = { desc = "x" } } })), '"a" has no cmd')
      T.match(select(2, cfg.validate({ tasks = { a = "make" } })), '"a" is a string')
    end
  )

  test(
    "audit: config: keymaps take an action name, a function or false; merged into the defaults",
    function()
      local cfg = require("proctor.config")
      T.match(
        select(2, cfg.validate({ keymaps = { list = { x = "no_such_action" } } })),
        "option 'keymaps%.list%[\"x\"%]' must be an action name"
      )
      T.match(
        select(2, cfg.validate({ keymaps = { list = { [""] = "open" } } })),
        "must be a table of key = action"
      )
      local c =
        assert(cfg.validate({ keymaps = { list = { x = "open", c = false, y = function() end } } }))
      eq(
        { c.keymaps.list.x, c.keymaps.list.c, type(c.keymaps.list.y), c.keymaps.list.C },
        { "open", false, "function", "kill" }
      )
    end
  )

  test("audit: config: discover.project_file is a file name, not a path", function()
    local cfg = require("proctor.config")
    T.match(select(2, cfg.validate({ discover = { project_file = "" } })), "must be a file name")
    T.match(
      select(2, cfg.validate({ discover = { project_file = "sub/x.lua" } })),
      "must be a file name"
    )
    T.ok(cfg.validate({ discover = { project_file = ".tasks.lua" } }))
  end)

  -- :Proctor parsing (|proctor-commands|) -------------------------------------------

  test("audit: commands: -timeout= takes seconds, ms, m, h and refuses 0 and words", function()
    local C = require("proctor.commands")._H
    eq({
      C.parse_duration("30"),
      C.parse_duration("500ms"),
      C.parse_duration("2s"),
      C.parse_duration("1.5m"),
      C.parse_duration("1h"),
    }, { 30000, 500, 2000, 90000, 3600000 })
    for _, bad in ipairs({ "0", "0ms", "x", "5y", "-3", "" }) do
      T.match(raised(C.parse_duration, bad), "bad timeout", bad)
    end
  end)

  test(
    "audit: commands: run options: -cwd= and -label= need a value, -bg does not open, -- ends options",
    function()
      local C = require("proctor.commands")._H
      T.match(raised(C.run_spec, "-cwd= ls"), "%-cwd= needs a directory")
      T.match(raised(C.run_spec, "-label= ls"), "%-label= needs a name")
      T.match(raised(C.run_spec, "-nosuch ls"), "unknown option '%-nosuch'")
      local s = C.run_spec("-bg -nopty -label=b -timeout=2s -- -x")
      eq({ s.open, s.pty, s.label, s.timeout_ms }, { nil, false, "b", 2000 })
      T.ok(
        s.cmd ~= nil
          and tostring(type(s.cmd) == "table" and table.concat(s.cmd, " ") or s.cmd):find(
            "-x",
            1,
            true
          ),
        "the command after --"
      )
      s = C.run_spec("-pty ls")
      eq({ s.open, s.pty }, { true, true })
    end
  )

  test(
    "audit: commands: ids are n, #n or n:hint; a label with spaces is refused; \\% stays literal",
    function()
      local C = require("proctor.commands")._H
      eq({ C.id("12"), C.id("#7"), C.id("5:make_-j8"), C.id("  ") }, { 12, 7, 5, nil })
      T.match(raised(C.id, "two words"), "not an execution id or label")
      eq(C.expand([[echo \% \# \<cword>]]), "echo % # <cword>")
    end
  )

  -- The list view (|proctor-list|) --------------------------------------------------

  test(
    "audit: list: filters: the four names, label= and owner= with a value; failed includes timed_out",
    function()
      local list = require("proctor.list")
      local L = list._H
      eq({
        list.parse_filter("running"),
        list.parse_filter("label=b"),
        list.parse_filter("label="),
        list.parse_filter("size=3"),
        list.parse_filter(""),
      }, { { name = "running" }, { name = "label", value = "b" } })
      local failed = { name = "failed" }
      eq({
        L.matches(failed, { state = "timed_out" }),
        L.matches(failed, { state = "failed" }),
        L.matches(failed, { state = "canceled" }),
        L.matches(failed, { state = "completed" }),
      }, { true, true, false, false })
      local running = { name = "running" }
      eq({
        L.matches(running, { state = "queued" }),
        L.matches(running, { state = "completed" }),
        L.matches(running, { target = {}, live = true }),
        L.matches(running, { target = {}, live = false }),
      }, { true, false, true, false })
      eq({
        L.matches({ name = "session" }, { state = "failed", previous_session = true }),
        L.matches({ name = "owner", value = "x" }, { owner = "x" }),
      }, { false, true })
    end
  )

  test("audit: list: the filter key cycles through each label once and wraps to all", function()
    setup()
    local list = require("proctor.list")
    local a = assert(p().run({ cmd = "true", label = "audit-lbl" }))
    local b = assert(p().run({ cmd = "true", label = "audit-lbl" }))
    a:wait(20000)
    b:wait(20000)
    local names = list.filter_names()
    local n = 0
    for _, x in ipairs(names) do
      if x == "label=audit-lbl" then n = n + 1 end
    end
    eq(n, 1, "label=audit-lbl in " .. table.concat(names, " "))
    list.open()
    T.defer(function() pcall(vim.cmd, "silent! bwipeout! proctor://list") end)
    local seen = {}
    for _ = 1, #names do
      seen[#seen + 1] = list.next_filter()
    end
    eq(seen[#seen], "all", "after the last filter comes all")
    eq(seen[1], names[2])
  end)

  -- Notifications (|proctor-notify|) -------------------------------------------------

  test("audit: notify: on_failure tells a timeout and not a cancel or a ^C", function()
    setup({ notify = "on_failure" })
    H.clear_notes()
    local c = assert(p().run({ cmd = { "sleep", "30" }, label = "audit-canceled" }))
    wait_state(c.id, "running")
    c:cancel(true)
    wait_state(c.id, "canceled")
    local i = assert(
      p().run({ cmd = "echo ready; exec sleep 30", pty = true, label = "audit-interrupted" })
    )
    H.wait(20000, function()
      local pid = (p().record(i.id) or {}).pid
      local f = pid and io.open("/proc/" .. pid .. "/comm")
      local comm = f and f:read("*l")
      if f then f:close() end
      return comm == "sleep"
    end, "the pty program runs")
    i:input("\3")
    eq(wait_state(i.id, "canceled failed completed").reason, "interrupted")
    local t =
      assert(p().run({ cmd = { "sleep", "30" }, label = "audit-timeout", timeout_ms = 100 }))
    wait_state(t.id, "timed_out")
    H.wait(20000, function() return #H.notes > 0 end, "the notification of the timeout")
    local all = table.concat(H.note_texts(), "\n")
    T.match(all, "#" .. t.id .. " audit%-timeout timed out")
    T.ok(not all:find("audit-canceled", 1, true), "a cancel was told: " .. all)
    T.ok(not all:find("audit-interrupted", 1, true), "a ^C was told: " .. all)
  end)

  -- :checkhealth proctor (|proctor-health|) -----------------------------------------

  -- Run health.check() in a child Neovim after setup(opts); the reports as "kind: text" lines.
  local function health(opts, env)
    local c = H.child({ env = env })
    local lines = c.lua(
      [[
      local opts = ...
      require("proctor").setup(opts)
      local out = {}
      local rep = {}
      for _, k in ipairs({ "start", "ok", "info", "warn", "error" }) do
        rep[k] = function(msg) out[#out + 1] = k .. ": " .. msg end
      end
      require("proctor.compat").health = function() return rep end
      require("proctor.health").check()
      return out
    ]],
      opts
    )
    c.stop()
    return table.concat(lines, "\n")
  end

  test(
    "audit: health: the socket path: too long, a directory that is not 0700, missing, a file",
    function()
      local dir = tmpdir()
      local long = dir .. "/" .. string.rep("d", 120) .. "/x.sock"
      T.match(health({ rpc = { path = long } }), "error: socket path is longer than 107 bytes")
      vim.fn.mkdir(dir .. "/open", "p", tonumber("755", 8))
      T.match(
        health({ rpc = { path = dir .. "/open/s.sock" } }),
        "error: [^\n]*must be a directory of yours with mode 0700"
      )
      vim.fn.mkdir(dir .. "/closed", "p", tonumber("700", 8))
      T.match(health({ rpc = { path = dir .. "/closed/s.sock" } }), "ok: socket directory usable")
      T.match(
        health({ rpc = { path = dir .. "/new/s.sock" } }),
        "ok: socket directory [^\n]* will be created"
      )
      T.match(
        health({ rpc = { path = dir .. "/no/such/s.sock" } }),
        "error: the socket directory's parent does not exist"
      )
      write(dir .. "/file", "x")
      T.match(
        health({ rpc = { path = dir .. "/file/s.sock" } }),
        "error: [^\n]*exists and is not a directory"
      )
    end
  )

  test(
    "audit: health: rpc off warns for proctor-mcp; a task source turned off is said so; a bad shepherd",
    function()
      local out = health({ rpc = { enabled = false }, discover = { make = false } })
      T.match(out, "info: the RPC socket is off")
      T.match(out, "warn: the RPC socket is off: proctor%-mcp runs its own embedded engine")
      T.match(out, "info: make: off %(setup{ discover = { make = false } }%)")
      out = health({ engine = { shepherd = "/nonexistent/proctor-shepherd" } })
      T.match(out, "error: shepherd not found or not executable: /nonexistent/proctor%-shepherd")
      T.match(out, "error: a test job ended unexpectedly: failed: ESHEPHERD")
    end
  )
end
