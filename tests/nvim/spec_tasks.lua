-- tests/nvim/spec_tasks.lua — tasks: discovery on fixture projects (tests/tasks/),
-- problem matchers, diagnostics and quickfix, watch, dependencies, sequences, services.
return function(test, T, H)
  local api = vim.api
  local uv = vim.uv or vim.loop
  local root = H.root

  -- T.eq, comparing tables by their contents.
  local function eq(a, b, msg)
    if type(a) == "table" or type(b) == "table" then return T.eq(T.fmt(a), T.fmt(b), msg) end
    return T.eq(a, b, msg)
  end

  local function p() return require("proctor") end
  local function tasks() return require("proctor.tasks") end

  -- A private copy of fixture project `name` (tests/tasks/<name>), trusted
  -- (make may read its Makefile: tests/nvim/spec_trust.lua tests the rest).
  -- tests/run keeps the trust databases private to the run (XDG_STATE_HOME).
  local function project(name)
    local dir = vim.fn.tempname()
    vim.fn.mkdir(dir, "p")
    if name then vim.fn.system({ "cp", "-r", root .. "/tests/tasks/" .. name .. "/.", dir }) end
    assert(require("proctor.tasks.trust").allow(dir, false))
    return dir
  end

  local function write(path, text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
  end

  -- The tasks of `dir` once every probe answered.
  local function discover(dir, opts)
    local got
    local o = vim.tbl_extend("force", opts or {}, { cwd = dir, callback = function(t) got = t end })
    p().tasks(o)
    H.wait(20000, function() return got ~= nil end, "discovery of " .. dir)
    return got
  end

  local function names(list)
    local out = {}
    for _, t in ipairs(list) do
      out[#out + 1] = t.name
    end
    return out
  end

  local function find(list, name)
    for _, t in ipairs(list) do
      if t.name == name then return t end
    end
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
  end

  test("tasks: make targets come from make's database; probes leave no record", function()
    setup()
    local dir = project("make")
    local before = #p().list()
    local list = discover(dir)
    local n = names(list)
    for _, want in ipairs({
      "make all",
      "make build",
      "make app",
      "make test",
      "make lint",
      "make clean",
      "make docs",
    }) do
      T.ok(vim.tbl_contains(n, want), want .. " missing from " .. table.concat(n, ", "))
    end
    for _, name in ipairs(n) do
      T.ok(
        not name:find("%%")
          and not name:find("^make %.")
          and name ~= "make Makefile"
          and name ~= "make extra.mk"
          and name ~= "make main.o",
        "not a task: " .. name
      )
    end
    eq(n[1], "make all", "the default goal first")
    local t = find(list, "make test")
    eq(t.source, "make")
    eq(t.cwd, dir)
    eq(t.cmd, { "make", "test" })
    eq(t.desc, "run the self-test", "its `## text`, never its recipe")
    eq(find(list, "make docs").desc, "build the docs", "a target of an included makefile")
    eq(find(list, "make lint").desc, nil, "no `## text`: no description")
    H.wait(5000, function() return #p().list() == before end, "the probe's record deleted")
    -- cached: nothing probed again, complete at once
    local again, complete = p().tasks({ cwd = dir })
    eq(complete, true)
    eq(#again, #list)
    -- a change of an included makefile is a new probe
    write(dir .. "/extra.mk", "docs:\n\t@echo docs\nrelease:\n\t@echo release\n")
    local _, complete2 = p().tasks({ cwd = dir })
    eq(complete2, false, "a changed source was not noticed")
    T.ok(find(discover(dir), "make release"), "the new target")
  end)

  test("tasks: package.json scripts with the lock file's package manager", function()
    setup()
    local dir = project("npm")
    local list = discover(dir)
    eq(names(list), { "npm run build", "npm run test", "npm run lint" }, "package.json's order")
    eq(list[1].cmd, { "npm", "run", "build" })
    eq(list[1].desc, "tsc -p .")
    eq(list[1].source, "npm")
    os.remove(dir .. "/package-lock.json")
    write(dir .. "/pnpm-lock.yaml", "lockfileVersion: '9.0'\n")
    eq(discover(dir)[1].cmd, { "pnpm", "run", "build" })
    os.remove(dir .. "/pnpm-lock.yaml")
    write(dir .. "/yarn.lock", "# yarn\n")
    eq(discover(dir)[2].name, "yarn run test")
    write(dir .. "/package.json", '{"packageManager": "bun@1.1.0", "scripts": {"dev": "vite"}}')
    eq(names(discover(dir)), { "bun run dev" }, "packageManager wins over the lock file")
    write(dir .. "/package.json", "{ not json")
    H.clear_notes()
    eq(#discover(dir), 0)
    T.match(table.concat(H.note_texts(), "\n"), "package%.json: not valid JSON")
  end)

  test("tasks: cargo, go, pytest, just (when installed) and user tasks", function()
    setup({
      tasks = {
        deploy = { cmd = "echo deploy", desc = "ship it" },
        here = function(dir) return dir:find("nothere") and nil or { cmd = { "pwd" } } end,
      },
    })
    local dir = project()
    write(dir .. "/Cargo.toml", "[package]\nname = 'x'\n")
    write(dir .. "/go.mod", "module example.com/x\n")
    write(dir .. "/pyproject.toml", "[tool.pytest.ini_options]\naddopts = '-q'\n")
    local list = discover(dir)
    local n = names(list)
    for _, want in ipairs({
      "deploy",
      "here",
      "cargo build",
      "cargo test",
      "cargo run",
      "go test ./...",
      "go build ./...",
      "pytest",
    }) do
      T.ok(vim.tbl_contains(n, want), want .. " missing from " .. table.concat(n, ", "))
    end
    eq(find(list, "deploy").source, "user")
    eq(find(list, "deploy").cwd, dir, "a user task runs in the directory asked about")
    eq(find(list, "cargo test").diagnostics, "cargo")
    eq(find(list, "go test ./...").cmd, { "go", "test", "./..." })
    -- just: only when the program exists (a stand-in here, speaking --summary)
    write(dir .. "/justfile", "deploy:\n  echo hi\n")
    eq(find(discover(dir), "just deploy"), nil, "no just installed, no just tasks")
    local bin = project()
    write(
      bin .. "/just",
      "#!/bin/sh\ncase \"$1\" in --summary) echo 'deploy fmt _hidden';; *) exit 1;; esac\n"
    )
    vim.fn.setfperm(bin .. "/just", "rwxr-xr-x")
    local path = vim.env.PATH
    vim.env.PATH = bin .. ":" .. path
    write(dir .. "/justfile", "deploy:\n  echo hi\nfmt:\n  echo fmt\n") -- changed: probed again
    local ok, err = pcall(function()
      local l2 = discover(dir)
      T.ok(
        find(l2, "just deploy") and find(l2, "just fmt"),
        "just recipes: " .. table.concat(names(l2), ", ")
      )
      eq(find(l2, "just _hidden"), nil)
    end)
    vim.env.PATH = path
    if not ok then error(err, 0) end
    setup()
  end)

  test("tasks: .proctor.lua runs only once trusted (and asks again when it changes)", function()
    local state = vim.fn.tempname()
    local dir = project("project")
    local mark = vim.fn.tempname()
    local c =
      H.child({ env = { XDG_STATE_HOME = state, XDG_DATA_HOME = state, PROCTOR_TEST_MARK = mark } })
    local ok, err = pcall(function()
      -- an answer the prompt does not offer is "view" where it is offered
      -- (0.12 has no "allow" for a file): the test then runs :trust, as a user would
      c.lua(
        [[
        _G.asked = 0
        _G.answer = ...
        vim.fn.confirm = function(msg, choices)
          _G.asked = _G.asked + 1
          _G.last_prompt = msg
          local view
          for i, ch in ipairs(vim.split(choices, "\n")) do
            if ch:lower():gsub("&", ""):find("^" .. _G.answer) then return i end
            if ch:lower():gsub("&", "") == "view" then view = i end
          end
          if view and _G.answer ~= "no" then _G.viewed = true return view end
          return 0
        end
        require("proctor").setup({ notify = "never" })
      ]],
        "no"
      )
      local function list(prompt)
        c.lua(
          [[_G.got = nil; require("proctor").tasks({ cwd = ..., prompt = select(2, ...), callback = function(t) _G.got = t end })]],
          dir,
          prompt
        )
        c.wait(10000, "_G.got ~= nil")
        return c.lua(
          [[local n = {} for _, t in ipairs(_G.got) do n[#n + 1] = t.name .. ":" .. t.source end return n]]
        )
      end
      -- completion never asks
      eq(list(false), {})
      eq(c.lua("return _G.asked"), 0)
      -- asked, refused: nothing of it ran
      eq(list(true), {})
      eq(c.lua("return _G.asked"), 1)
      eq(vim.fn.filereadable(mark), 0, "the untrusted file ran")
      -- refusing is remembered: not asked again on every use
      list(true)
      eq(c.lua("return _G.asked"), 1)
      -- trusted (after an edit, so it is a new question)
      c.lua("_G.answer = ...", vim.fn.has("nvim-0.9") == 1 and "a" or "t")
      write(
        dir .. "/.proctor.lua",
        vim.fn.readfile(dir .. "/.proctor.lua", "b")[1]
          and table.concat(vim.fn.readfile(dir .. "/.proctor.lua"), "\n") .. "\n-- edited\n"
      )
      local first = list(true)
      if c.lua("return _G.viewed == true") then
        eq(first, {})
        c.cmd("trust")
        first = list(true)
      end
      eq(first, { "count:project", "hello:project" })
      eq(c.lua("return _G.asked"), 2)
      eq(vim.fn.readfile(mark), { "ran" })
      eq(c.lua([[return _G.got[2].cwd]]), (dir:gsub("/$", "")))
      -- trusted content: a fresh Neovim reads it without asking
      c.stop()
      c = H.child({
        env = { XDG_STATE_HOME = state, XDG_DATA_HOME = state, PROCTOR_TEST_MARK = mark },
      })
      c.lua([[_G.asked = 0; vim.fn.confirm = function() _G.asked = _G.asked + 1 return 0 end]])
      eq(list(true), { "count:project", "hello:project" })
      eq(c.lua("return _G.asked"), 0, "asked again about trusted content")
    end)
    c.stop()
    vim.fn.delete(state, "rf")
    if not ok then error(err, 0) end
  end)

  test(
    "tasks: :Proctor task completes names and runs one; :Proctor run picks with vim.ui.select",
    function()
      setup({ tasks = { ["say hi"] = { cmd = { "echo", "hi there" }, pty = false } } })
      local dir = project("make")
      vim.cmd("cd " .. vim.fn.fnameescape(dir))
      discover(dir)
      local comp = vim.fn.getcompletion("Proctor task make t", "cmdline")
      T.ok(vim.tbl_contains(comp, "test"), "completion: " .. table.concat(comp, ","))
      T.ok(vim.tbl_contains(vim.fn.getcompletion("Proctor task sa", "cmdline"), "say hi"))
      local before = #p().list()
      vim.cmd("Proctor task say hi")
      H.wait(10000, function() return #p().list() > before end, "the task started")
      local rec = p().list()[#p().list()]
      eq(rec.label, "say hi")
      eq(rec.cwd:gsub("/$", ""), dir)
      rec = wait_state(rec.id, "completed")
      eq(rec.pty, false, "the task's own pty = false")
      pcall(vim.cmd, "close")
      -- an unknown name: one clear message
      H.clear_notes()
      vim.cmd("Proctor task nope")
      H.wait(10000, function() return #H.notes > 0 end, "a message")
      T.match(H.notes[1].msg, "no task named 'nope'")
      -- the picker
      local orig = vim.ui.select
      local shown
      vim.ui.select = function(items, opts, on_choice)
        shown = { items = items, opts = opts }
        on_choice(find(items, "make lint"))
      end
      before = #p().list()
      local ok, err = pcall(function()
        vim.cmd("Proctor run -bg")
        H.wait(10000, function() return shown ~= nil end, "the picker")
        T.ok(#shown.items >= 7)
        eq(shown.opts.format_item(find(shown.items, "make lint")), "make lint  [make]")
        eq(
          shown.opts.format_item(find(shown.items, "make test")),
          "make test  — run the self-test  [make]"
        )
        H.wait(10000, function() return #p().list() > before end, "the picked task started")
        local r = wait_state(p().list()[#p().list()].id, "completed failed")
        eq(r.state, "completed")
        eq(r.cmd, { "make", "lint" })
      end)
      -- -cwd: the tasks of that directory; a missing one is an error before any picker
      local npm = project("npm")
      discover(npm)
      shown = nil
      local ok2, err2 = pcall(function()
        vim.ui.select = function(items, opts) shown = { items = items, opts = opts } end
        vim.cmd("Proctor run -bg -cwd=" .. vim.fn.fnameescape(npm))
        H.wait(10000, function() return shown ~= nil end, "the picker of -cwd")
        T.ok(
          find(shown.items, "npm run lint") ~= nil,
          "npm's scripts: " .. table.concat(names(shown.items), ",")
        )
        eq(find(shown.items, "make lint"), nil, "not the current directory's tasks")
        H.clear_notes()
        shown = nil
        vim.cmd("Proctor run -cwd=" .. vim.fn.fnameescape(npm) .. "/nope")
        T.match(H.notes[#H.notes].msg, "no such directory")
        eq(shown, nil)
      end)
      vim.ui.select = orig
      vim.cmd("cd " .. vim.fn.fnameescape(root))
      if not ok then error(err, 0) end
      if not ok2 then error(err2, 0) end
    end
  )

  test(
    "tasks: setup{ tasks } is checked whole; task_defaults and discover by the schema",
    function()
      local cfg = require("proctor.config")
      local _, okv, err
      okv, err = cfg.validate({ tasks = { build = { cmd = "make" }, here = function() end } })
      T.ok(okv, err)
      _, err = cfg.validate({ tasks = { build = { desc = "no cmd" } } })
      T.match(err, "option 'tasks' must be .*\"build\" has no cmd")
      _, err = cfg.validate({ tasks = { build = "make" } })
      T.match(err, '"build" is a string')
      _, err = cfg.validate({ tasks = { { cmd = "make" } } })
      T.match(err, "entry %[1%] has no name")
      _, err = cfg.validate({ task_defaults = { quickfix = "sometimes" } })
      T.match(err, "option 'task_defaults.quickfix' must be one of on_failure, always, never")
      _, err = cfg.validate({ discover = { project_file = "a/b.lua" } })
      T.match(err, "option 'discover.project_file' must be a file name")
      local merged =
        assert(cfg.validate({ tasks = { a = { cmd = "x" } }, discover = { make = false } }))
      eq(merged.discover.npm, true, "the other sources stay on")
      eq(vim.tbl_keys(merged.tasks), { "a" })
    end
  )

  test("matchers: built-in matchers find file, line, column, message", function()
    local m = require("proctor.tasks.matchers")
    local function run(name, text, cwd)
      local x = assert(m.new(name, { cwd = cwd or "/src" }))
      -- fed in two chunks cut at a line boundary, as the reader does
      local cut = text:find("\n", math.floor(#text / 2), true) or #text
      x:feed(text:sub(1, cut))
      if cut < #text then x:feed(text:sub(cut + 1)) end
      x:finish()
      return x.items
    end
    local it = run(
      "gcc",
      table.concat({
        "make[1]: Entering directory '/src/lib'",
        "util.c: In function 'f':",
        "util.c:12:7: warning: unused variable 'x' [-Wunused-variable]",
        "   12 |   int x;",
        "make[1]: Leaving directory '/src/lib'",
        "main.c:3:10: fatal error: nope.h: No such file or directory",
        "/abs/other.c:7: error: old style",
        "",
      }, "\n")
    )
    eq(#it, 3)
    eq(
      { it[1].filename, it[1].lnum, it[1].col, it[1].type, it[1].code, it[1].text },
      { "/src/lib/util.c", 12, 7, "W", "-Wunused-variable", "unused variable 'x'" }
    )
    eq(
      { it[2].filename, it[2].lnum, it[2].type, it[2].text },
      { "/src/main.c", 3, "E", "nope.h: No such file or directory" }
    )
    eq({ it[3].filename, it[3].lnum, it[3].col }, { "/abs/other.c", 7, nil })
    it = run(
      "cargo",
      "   Compiling x v0.1.0\nerror[E0425]: cannot find value `y` in this scope\n --> src/main.rs:3:20\n  |\n"
        .. "warning: unused variable: `x`\n --> src/../src/lib.rs:2:9\n"
    )
    eq(#it, 2)
    eq(
      { it[1].filename, it[1].lnum, it[1].col, it[1].code, it[1].type },
      { "/src/src/main.rs", 3, 20, "E0425", "E" }
    )
    eq(
      { it[2].filename, it[2].type, it[2].text },
      { "/src/src/lib.rs", "W", "unused variable: `x`" }
    )
    it = run(
      "go",
      "# example.com/x\n./main.go:5:2: undefined: y\n--- FAIL: TestA (0.00s)\n    a_test.go:12: got 1, want 2\n"
    )
    eq(
      { it[1].filename, it[1].lnum, it[1].col, it[1].text },
      { "/src/main.go", 5, 2, "undefined: y" }
    )
    eq({ it[2].filename, it[2].lnum, it[2].text }, { "/src/a_test.go", 12, "got 1, want 2" })
    it = run(
      "tsc",
      "src/a.ts(3,5): error TS2322: Type 'string' is not assignable to type 'number'.\n"
        .. "src/b.ts:7:1 - error TS1005: ';' expected.\n"
    )
    eq({ it[1].filename, it[1].lnum, it[1].col, it[1].code }, { "/src/src/a.ts", 3, 5, "TS2322" })
    eq({ it[2].filename, it[2].lnum, it[2].text }, { "/src/src/b.ts", 7, "';' expected." })
    it = run(
      "eslint",
      "/w/a.js:1:5: 'x' is assigned a value but never used. [Error/no-unused-vars]\n"
        .. "/w/a.js:2:1: Unexpected var. [Warning/no-var]\n\n2 problems\n"
    )
    eq(
      { it[1].filename, it[1].col, it[1].type, it[1].code },
      { "/w/a.js", 5, "E", "no-unused-vars" }
    )
    eq({ it[2].type, it[2].text }, { "W", "Unexpected var." })
    it = run(
      "python",
      table.concat({
        "Traceback (most recent call last):",
        '  File "app.py", line 9, in <module>',
        "    main()",
        '  File "/lib/util.py", line 3, in main',
        "    raise ValueError('bad')",
        "ValueError: bad",
        "",
      }, "\n")
    )
    eq(#it, 2)
    eq(
      { it[1].filename, it[1].lnum, it[1].type, it[1].text },
      { "/lib/util.py", 3, "E", "ValueError: bad" }
    )
    eq({ it[2].filename, it[2].lnum, it[2].type }, { "/src/app.py", 9, "I" })
    it = run(
      "pytest",
      table.concat({
        "    def test_add():",
        ">       assert add(1, 2) == 4",
        "E       assert 3 == 4",
        "E        +  where 3 = add(1, 2)",
        "",
        "tests/test_calc.py:5: AssertionError",
        "___ test_b ___",
        "tests/test_b.py:8: in test_b",
        "    helper()",
        "tests/helpers.py:2: in helper",
        "    assert False",
        "E   AssertionError",
        "=== short test summary info ===",
        "",
      }, "\n")
    )
    eq(#it, 2)
    eq(
      { it[1].filename, it[1].lnum, it[1].text },
      { "/src/tests/test_calc.py", 5, "assert 3 == 4 +  where 3 = add(1, 2)" }
    )
    eq({ it[2].filename, it[2].lnum, it[2].text }, { "/src/tests/helpers.py", 2, "AssertionError" })
    it = run(
      "lua",
      "lua: init.lua:3: attempt to call a nil value (global 'f')\nstack traceback:\n\t[C]: in ?\n"
        .. "\tinit.lua:3: in main chunk\nE5108: Error executing lua /x/y.lua:9: boom\n"
    )
    eq({ it[1].filename, it[1].lnum, it[1].type }, { "/src/init.lua", 3, "E" })
    eq({ it[2].type, it[3].filename, it[3].lnum, it[3].text }, { "I", "/x/y.lua", 9, "boom" })
    -- an 'errorformat', resolved against the given cwd
    it = run("%f:%l:%m", "a/b.txt:4:problem here\nnoise\n", "/tmp")
    eq({ #it, it[1].filename, it[1].lnum, it[1].text }, { 1, "/tmp/a/b.txt", 4, "problem here" })
    -- a :compiler plugin's 'errorformat' (Vim's own compiler/gcc.vim), read without touching any buffer
    local efm_before = vim.bo.errorformat
    it = run("compiler:gcc", "src/x.c:9:3: error: boom\n", "/tmp")
    eq({ #it, it[1].filename, it[1].lnum, it[1].col }, { 1, "/tmp/src/x.c", 9, 3 })
    eq(vim.bo.errorformat, efm_before)
    eq(
      select(2, m.new("compiler:nosuch", { cwd = "/" })):find("no compiler plugin 'nosuch'") ~= nil,
      true
    )
    eq(select(2, m.new("nosuch", { cwd = "/" })):find("unknown matcher 'nosuch'") ~= nil, true)
    eq(m.for_command({ "make", "-j8" }), "gcc")
    eq(m.for_command("CC=clang cargo build"), "cargo")
    eq(m.for_command("python3 -m pytest"), "pytest")
  end)

  test(
    "diagnostics: a C compile error lands on its line, in quickfix too, and a rerun replaces it",
    function()
      setup()
      local dir = project("cbuild")
      local ex
      local wins = #api.nvim_list_wins()
      tasks().run_task(
        "make build",
        { cwd = dir, set = { open_quickfix = true } },
        function(e, err) ex = e or error(err) end
      )
      H.wait(20000, function() return ex ~= nil end, "the task started")
      eq(wait_state(ex.id, "failed completed").state, "failed")
      local D = require("proctor.tasks.diagnostics")
      H.wait(10000, function()
        local r = D.result(ex.id)
        return r and r.done
      end, "matching done")
      local buf = vim.fn.bufnr(dir .. "/main.c")
      T.ok(buf > 0, "a buffer for main.c")
      local ds = vim.diagnostic.get(buf, { namespace = D.namespace("make build") })
      T.ok(#ds >= 1, "diagnostics on main.c")
      eq(ds[1].lnum, 5, "line 6 (0-based 5): return undeclared_value")
      eq(ds[1].col, 9)
      eq(ds[1].severity, vim.diagnostic.severity.ERROR)
      T.match(ds[1].message, "undeclared_value")
      eq(ds[1].source, "make build")
      local qf = vim.fn.getqflist({ title = 0, items = 0, context = 0 })
      eq(qf.title, ("proctor #%d make build"):format(ex.id))
      eq(vim.fn.bufname(qf.items[1].bufnr) ~= "" and qf.items[1].lnum, 6)
      eq(vim.fn.getqflist({ winid = 0 }).winid ~= 0, true, "open_quickfix: the quickfix window")
      eq(#api.nvim_list_wins(), wins + 1)
      vim.cmd("cclose")
      -- fix it, but add a warning two lines up: a rerun replaces the diagnostics
      write(
        dir .. "/main.c",
        '#include <stdio.h>\n\nint main(void) {\n  int unused;\n  printf("hi\\n");\n  return 0;\n}\n'
      )
      local ex2
      tasks().run_task("make build", { cwd = dir }, function(e, err) ex2 = e or error(err) end)
      H.wait(20000, function() return ex2 ~= nil end, "the rerun started")
      eq(wait_state(ex2.id, "failed completed").state, "completed")
      H.wait(10000, function()
        local r = D.result(ex2.id)
        return r and r.done
      end, "matching done")
      ds = vim.diagnostic.get(buf, { namespace = D.namespace("make build") })
      eq(#ds, 1, "only the rerun's diagnostics")
      eq({ ds[1].lnum, ds[1].severity }, { 3, vim.diagnostic.severity.WARN })
      -- on_failure: a passing rerun empties this task's quickfix list, titled by the rerun
      qf = vim.fn.getqflist({ title = 0, size = 0 })
      eq({ qf.title, qf.size }, { ("proctor #%d make build"):format(ex2.id), 0 })
    end
  )

  test(
    "diagnostics: a flood while the editor is blocked loses no problem (the child waits for the matcher)",
    function()
      setup()
      local dir = project()
      -- 40 MiB of compile lines (5x the ring) with a warning every 100 lines
      local gen = [[awk 'BEGIN { for (i = 1; i <= 400000; i++) {
      printf "gcc -O2 -g -Wall -Wextra -Isrc/include -c src/mod%d.c -o build/mod%d.o -DPAD=....................\n", i, i
      if (i % 100 == 0) printf "src/mod%d.c:%d:5: warning: unused variable x [-Wunused-variable]\n", i, i % 50 + 1 } }']]
      local ex = assert(p().run({
        cmd = gen,
        cwd = dir,
        pty = false,
        name = "flood",
        diagnostics = "gcc",
        quickfix = "never",
      }))
      -- the editor is busy for a while: the child fills the ring and more meanwhile
      local t0 = uv.hrtime()
      while uv.hrtime() - t0 < 1.5e9 do
      end
      local D = require("proctor.tasks.diagnostics")
      H.wait(120000, function()
        local r = D.result(ex.id)
        return r and r.done
      end, "matching done")
      local r = D.result(ex.id)
      eq(p().record(ex.id).state, "completed")
      eq(r.missed, 0, "bytes the matcher never saw")
      eq(r.count, 4000, "problems found")
      T.ok(
        p().record(ex.id).bytes.stdout > 40 * 2 ^ 20,
        "a flood: " .. p().record(ex.id).bytes.stdout
      )
    end
  )

  -- Write `path` from this editor (a buffer in no window: consoles keep theirs).
  local function edit(path, text)
    local buf = vim.fn.bufadd(path)
    vim.fn.bufload(buf)
    api.nvim_buf_set_lines(buf, 0, -1, false, { text })
    api.nvim_buf_call(buf, function() vim.cmd("silent write") end)
    return buf
  end

  -- The execution that replaced `id` in its task run.
  local function successor(id)
    H.wait(15000, function()
      local i = tasks().info(id)
      return i and i.next_id ~= nil
    end, "a restart of #" .. id)
    return tasks().info(id).next_id
  end

  test(
    "watch: an editor write and a burst of them each make one restart in the same window; "
      .. "a write outside the editor does not; the bar and the list say watching",
    function()
      setup()
      local dir = project()
      write(dir .. "/a.c", "int a;\n")
      write(dir .. "/notes.txt", "x\n")
      local ex = assert(p().run({
        cmd = { "sleep", "60" },
        cwd = dir,
        label = "watched",
        open = { open = "split" },
        watch = { patterns = { "*.c", "*.h" }, debounce_ms = 100 },
      }))
      wait_state(ex.id, "running")
      local win = require("proctor.console").windows(ex.id)[1]
      T.ok(
        require("proctor.console").bar(win):find("watching", 1, true),
        "the bar: " .. require("proctor.console").bar(win)
      )
      local lbuf = require("proctor.list").open()
      H.wait(
        5000,
        function() return H.has_line(lbuf, "^#" .. ex.id .. " .*%[watching%] watched") end,
        "the list row says watching"
      )
      vim.cmd("close")
      local src = edit(dir .. "/a.c", "int a = 1;")
      local id2 = successor(ex.id)
      eq(wait_state(ex.id, "canceled").reason, "canceled", "the old one canceled")
      eq(p().record(id2).prev_id, ex.id)
      eq(p().record(id2).task, "watched")
      wait_state(id2, "running")
      eq(
        require("proctor.console").id_of_buf(api.nvim_win_get_buf(win)),
        id2,
        "the same window shows the new run"
      )
      -- not matching, and a write outside the editor: no restart
      local other = edit(dir .. "/notes.txt", "y")
      write(dir .. "/b.h", "int b;\n")
      vim.wait(400)
      eq(tasks().info(id2).next_id, nil, "notes.txt or an outside write restarted it")
      -- a burst: five writes, one restart
      for i = 1, 5 do
        edit(dir .. "/a.c", "int a = " .. i .. ";")
      end
      local id3 = successor(id2)
      wait_state(id3, "running")
      vim.wait(600)
      eq(tasks().info(id3).next_id, nil, "a burst made more than one restart")
      eq(#tasks().info(id3).group_ids, 3)
      -- :Proctor watch {label} toggles it off: a change does nothing now
      vim.cmd("Proctor watch watched")
      eq(tasks().info(id3).watching, false)
      -- in its console, :Proctor watch toggles the console's run
      api.nvim_set_current_win(win)
      vim.cmd("Proctor watch")
      eq(tasks().info(id3).watching, true, "the console's run")
      vim.cmd("Proctor watch")
      eq(tasks().info(id3).watching, false)
      T.ok(
        not require("proctor.console").bar(win):find("watching", 1, true),
        "the bar still says it"
      )
      edit(dir .. "/a.c", "int a = 9;")
      vim.wait(500)
      eq(tasks().info(id3).next_id, nil)
      p().cancel(id3)
      wait_state(id3, "canceled")
      vim.cmd("silent! only")
      pcall(api.nvim_buf_delete, src, { force = true })
      pcall(api.nvim_buf_delete, other, { force = true })
    end
  )

  test(
    "watch: a run never restarts on its own writes (fs = true too); two watched runs do not "
      .. "restart each other; make all runs once per :w",
    function()
      setup()
      local dir = project()
      write(dir .. "/main.c", "int main(void) { return 0; }\n")
      local git = vim.fn.executable("git") == 1
      if git then
        vim.fn.system({ "git", "-C", dir, "init", "-q" })
        write(dir .. "/.gitignore", "*.log\n")
      end
      vim.fn.mkdir(dir .. "/build", "p")
      -- two tasks that touch a file in the cwd and sleep: the bug restarted each in a loop
      local a = assert(p().run({
        cmd = "touch a.out; sleep 0.5; touch a.out; sleep 30",
        cwd = dir,
        pty = false,
        name = "slow-a",
        watch = { fs = true, debounce_ms = 50 },
      }))
      local b = assert(p().run({
        cmd = "touch b.out; sleep 0.5; touch b.out; sleep 30",
        cwd = dir,
        pty = false,
        name = "slow-b",
        watch = { fs = true, debounce_ms = 50 },
      }))
      H.wait(
        15000,
        function()
          return vim.fn.filereadable(dir .. "/a.out") == 1
            and vim.fn.filereadable(dir .. "/b.out") == 1
        end,
        "both touched their files"
      )
      vim.wait(1500) -- the second touches, and the debounce after them
      eq(#tasks().info(a.id).group_ids, 1, "slow-a restarted on a write made while it ran")
      eq(#tasks().info(b.id).group_ids, 1, "slow-b restarted on a write made while it ran")
      -- fs = true: a write outside the editor once nothing runs restarts it; a build
      -- directory's or a git-ignored file's does not
      p().cancel(a.id)
      p().cancel(b.id)
      wait_state(a.id, "canceled")
      wait_state(b.id, "canceled")
      write(dir .. "/build/x.c", "int x;\n")
      if git then write(dir .. "/run.log", "x\n") end
      vim.wait(500)
      eq(
        #tasks().info(a.id).group_ids,
        1,
        "a build directory's or an ignored file's write restarted it"
      )
      write(dir .. "/main.c", "int main(void) { return 1; }\n")
      local a2 = successor(a.id)
      wait_state(a2, "running")
      -- :Proctor watch! stops every watch
      vim.cmd("Proctor watch!")
      eq(tasks().info(a2).watching, false)
      eq(tasks().info(b.id).watching, false)
      p().cancel(a2)
      wait_state(a2, "canceled")
      -- make all: one run per :w (its main.o is no change of the project)
      write(dir .. "/Makefile", "all: main.o\nmain.o: main.c\n\tcp main.c main.o\n")
      for _, w in ipairs({ true, { fs = true, debounce_ms = 50 } }) do
        vim.fn.delete(dir .. "/main.o")
        local m = assert(p().run({ cmd = "make all", cwd = dir, pty = false, watch = w }))
        wait_state(m.id, "completed")
        local src = edit(dir .. "/main.c", "int main(void) { return 2; }")
        local m2 = successor(m.id)
        wait_state(m2, "completed")
        vim.wait(600)
        eq(#tasks().info(m2).group_ids, 2, "make all ran more than once for one :w")
        tasks().watch(m2, false)
        pcall(api.nvim_buf_delete, src, { force = true })
      end
    end
  )

  test(
    "after: a failing dependency cancels the dependent (dependency_failed) without running it",
    function()
      setup({
        tasks = {
          fails = { cmd = "exit 3", pty = false },
          works = { cmd = "sleep 0.3", pty = false },
        },
      })
      local dir = project()
      local mark = dir .. "/ran"
      local ex = assert(
        p().run({ cmd = "touch " .. mark, cwd = dir, after = { "fails" }, name = "needs-fails" })
      )
      eq(p().record(ex.id).state, "queued", "held while its dependency runs")
      local rec = wait_state(ex.id, "canceled completed failed")
      eq({ rec.state, rec.reason }, { "canceled", "dependency_failed" })
      eq(rec.started_at, nil, "never started")
      eq(vim.fn.filereadable(mark), 0, "the dependent ran")
      -- a dependency that succeeds releases it; an id works as well as a name
      local dep = assert(p().run({ cmd = "sleep 0.3", cwd = dir }))
      local ex2 =
        assert(p().run({ cmd = "touch " .. mark, cwd = dir, after = { "works", dep.id } }))
      rec = wait_state(ex2.id, "canceled completed failed")
      eq(rec.state, "completed")
      eq(vim.fn.filereadable(mark), 1)
      T.ok(rec.started_at >= p().record(dep.id).ended_at, "started before its dependency ended")
      -- an unknown dependency
      local ex3 = assert(p().run({ cmd = "true", cwd = dir, after = { "no-such-task" } }))
      eq(wait_state(ex3.id, "canceled completed").reason, "dependency_failed")
    end
  )

  test(
    "sequence: one chain record; canceled midway it cancels the running member and skips the rest",
    function()
      setup({
        tasks = {
          one = { cmd = "true", pty = false },
          two = { cmd = "sleep 30", pty = false },
          three = { cmd = "true", pty = false },
          four = { cmd = "true", pty = false },
        },
      })
      local c = assert(
        p().sequence({ "one", { parallel = { "two", "three" } }, "four" }, { cwd = project() })
      )
      eq(c:record().kind, "chain")
      eq(c:record().name, "one → (two | three) → four")
      H.wait(15000, function() return c:record().step == 2 end, "the second step")
      local steps = c:record().steps
      local two, four = steps[2][1], steps[3][1]
      wait_state(two, "running")
      eq(p().record(steps[1][1]).state, "completed")
      eq(p().record(four).state, "queued", "the last step exists, held")
      -- the list view shows the chain as such, its members marked
      local lbuf = require("proctor.list").open()
      H.wait(
        5000,
        function() return H.has_line(lbuf, "^c" .. c.id .. "%s+running%s+1/3") end,
        "the chain's line"
      )
      T.ok(
        H.has_line(lbuf, ("^#%d .*%%[c%d%%]"):format(two, c.id)),
        "a member's line names its chain"
      )
      eq(c:cancel(), "canceling")
      local rec = assert(c:wait(15000))
      eq(rec.state, "canceled")
      eq(p().record(two).state, "canceled")
      eq(p().record(two).reason, "canceled")
      local four_rec = p().record(four)
      eq({ four_rec.state, four_rec.reason, four_rec.started_at }, { "canceled", "skipped", nil })
      eq(c:cancel(), "already_terminal")
      H.wait(
        5000,
        function() return H.has_line(lbuf, "^c" .. c.id .. "%s+canceled") end,
        "the list shows it canceled"
      )
      pcall(vim.cmd, "close")
      -- a failing step fails the chain; the rest never runs
      local c2 =
        assert(p().sequence({ { cmd = "exit 4", name = "bad" }, "one" }, { cwd = project() }))
      rec = assert(c2:wait(15000))
      eq(rec.state, "failed")
      eq(p().record(rec.steps[2][1]).reason, "dependency_failed")
    end
  )

  test(
    "sequence: a failed sequence shows and focuses the failed step's console and names it",
    function()
      setup({
        notify = "on_failure",
        tasks = {
          ci = { sequence = { "build", { parallel = { "test", "npm run lint" } }, "deploy" } },
          build = { cmd = "true", pty = false },
          ["npm run lint"] = { cmd = "echo lint error; exit 1", pty = false },
          test = { cmd = "sleep 0.2", pty = false },
          deploy = { cmd = "true", pty = false },
        },
      })
      local dir = project()
      H.clear_notes()
      vim.cmd("silent! only")
      vim.cmd("enew")
      local src = api.nvim_get_current_win()
      local c = assert(tasks().run_task("ci", { cwd = dir, set = { open = { open = "split" } } }))
      local rec = assert(c:wait(20000))
      eq(rec.state, "failed")
      local lint = rec.steps[2][2]
      eq(rec.failed_id, lint)
      local cur = api.nvim_get_current_win()
      T.ok(cur ~= src, "the cursor stayed where it was")
      eq(
        require("proctor.console").id_of_buf(api.nvim_win_get_buf(cur)),
        lint,
        "the current window shows the failed step"
      )
      H.wait(5000, function()
        for _, t in ipairs(H.note_texts()) do
          if t:find("ci failed at npm run lint: exit 1", 1, true) then return true end
        end
      end, "the message names the step: " .. table.concat(H.note_texts(), " | "))
      vim.cmd("silent! only")
    end
  )

  test(
    "sequence: a chain is a target: list keys act on its row, :Proctor cancel c<id>, completion",
    function()
      setup({
        tasks = { slow = { cmd = "sleep 30", pty = false }, after = { cmd = "true", pty = false } },
      })
      local function feed(keys)
        api.nvim_feedkeys(api.nvim_replace_termcodes(keys, true, false, true), "x", false)
      end
      local c = assert(p().sequence({ "slow", "after" }, { cwd = project() }))
      H.wait(
        15000,
        function() return c:record().step == 1 and c:record().state == "running" end,
        "the first step"
      )
      local slow, later = c:record().steps[1][1], c:record().steps[2][1]
      wait_state(slow, "running")
      -- completion offers the live chain to cancel, not to delete
      T.ok(
        vim.tbl_contains(vim.fn.getcompletion("Proctor cancel c", "cmdline"), "c" .. c.id),
        "cancel completes c<id>"
      )
      T.ok(
        not vim.tbl_contains(vim.fn.getcompletion("Proctor delete c", "cmdline"), "c" .. c.id),
        "delete does not"
      )
      -- in the list: <CR> on the chain's row opens its running member; dd says it is no execution
      local lbuf = require("proctor.list").open()
      H.wait(
        5000,
        function() return H.has_line(lbuf, "^c" .. c.id .. "%s+running") end,
        "the chain's row"
      )
      local lnum
      for i, l in ipairs(api.nvim_buf_get_lines(lbuf, 0, -1, false)) do
        if l:match("^c" .. c.id .. "%s") then lnum = i end
      end
      api.nvim_win_set_cursor(0, { lnum, 0 })
      H.clear_notes()
      feed("dd")
      H.wait(5000, function() return #H.notes > 0 end, "a message for dd")
      T.match(H.notes[1].msg, "delete is for executions, not for a chain")
      eq(p().record(slow).state, "running", "dd did nothing to the member")
      feed("<CR>")
      H.wait(5000, function() return vim.b.proctor_id == slow end, "the running member's console")
      pcall(vim.cmd, "close")
      -- c on the row cancels the chain: the member gets the normal cancel, the rest is skipped
      require("proctor.list").open()
      api.nvim_win_set_cursor(0, { lnum, 0 })
      feed("c")
      local rec = assert(c:wait(15000))
      eq(rec.state, "canceled")
      eq(p().record(slow).reason, "canceled")
      eq(p().record(later).reason, "skipped")
      pcall(vim.cmd, "close")
      -- :Proctor cancel c<id> on a live chain; on an ended one, a warning; c<n> unknown: an error
      local c2 = assert(p().sequence({ "slow" }, { cwd = project() }))
      H.wait(15000, function() return c2:record().state == "running" end, "the second chain runs")
      local m2 = c2:record().steps[1][1]
      wait_state(m2, "running")
      vim.cmd("Proctor cancel c" .. c2.id)
      eq(assert(c2:wait(15000)).state, "canceled")
      eq(p().record(m2).state, "canceled")
      H.clear_notes()
      vim.cmd("Proctor cancel c" .. c2.id)
      T.match(H.notes[#H.notes].msg, "has already ended")
      -- :Proctor info c<id>: the chain, its state and each step's members
      local info = vim.fn.execute("Proctor info c" .. c2.id)
      T.match(info, "proctor chain c" .. c2.id .. "%s+slow")
      T.match(info, "state:%s+canceled")
      T.match(info, "step 1%*?: #" .. m2 .. " canceled")
      H.clear_notes()
      vim.cmd("Proctor cancel c999")
      T.match(H.notes[#H.notes].msg, "no execution labelled 'c999'")
    end
  )

  test("traits: a trait that raises is reported once and the run goes on", function()
    setup({ notify = "never" })
    local run = require("proctor.tasks.run")
    package.loaded["proctor.tasks.traits.boom"] = {
      on_start = function() error("boom on start") end,
      on_end = function() error("boom on end") end,
    }
    table.insert(run.TRAITS, "boom")
    T.defer(function()
      table.remove(run.TRAITS)
      package.loaded["proctor.tasks.traits.boom"] = nil
    end)
    H.clear_notes()
    local dir = project()
    for _ = 1, 2 do
      local ex = assert(p().run({
        cmd = "exit 1",
        cwd = dir,
        pty = false,
        restart = "on-failure",
        max_restarts = 1,
        backoff_ms = 1,
      }))
      H.wait(10000, function()
        local i = tasks().info(ex.id)
        return i and #i.group_ids == 2 and i.state == "done"
      end, "one restart, then giving up, despite the trait")
    end
    local n = 0
    for _, t in ipairs(H.note_texts()) do
      if t:find("boom on start", 1, true) then n = n + 1 end
    end
    eq(n, 1, "reports of the trait's error: " .. table.concat(H.note_texts(), " | "))
  end)

  -- The one restart policy: the same cases as the core's workers
  -- (tests/lua/restart_policy.lua, tests/worker/spec_core.lua).
  test("restart policy: the task layer gives the workers' answers", function()
    setup()
    local policy = require("restart_policy")
    local decide = require("proctor.tasks.traits.restart").decide
    for i, d in ipairs(policy.decisions) do
      local o = vim.tbl_extend("force", policy.DEFAULTS, d[1])
      local verdict, streak, delay = decide(o, d[2], d[3])
      eq({ verdict, streak, delay }, { d[4], d[5], d[6] }, "decision " .. i)
    end
    local dir = project()
    for _, case in ipairs(policy.cases) do
      local spec = { cmd = case.script, cwd = dir, pty = false }
      for k, v in pairs(case.opts) do
        spec[k] = v
      end
      local ex = assert(p().run(spec))
      local i
      if case.at_least then
        H.wait(20000, function()
          i = tasks().info(ex.id)
          return #i.group_ids >= case.at_least or i.state == "done"
        end, case.name)
        eq(i.state ~= "done", true, case.name .. ": it gave up")
        p().cancel(i.group_ids[#i.group_ids])
      else
        local settled
        tasks().when_settled(ex.id, function(ok, why) settled = { ok, why } end)
        H.wait(20000, function()
          i = tasks().info(ex.id)
          return i.state == "done" and settled ~= nil
        end, case.name)
        eq(#i.group_ids, case.runs, case.name .. ": runs")
        eq(settled[2] == "max_restarts", case.gives_up, case.name .. ": gave up")
      end
    end
  end)

  test(
    "services: a crashing service restarts with backoff, each run linked to the one before",
    function()
      setup()
      local dir = project()
      local ex = assert(p().run({
        cmd = "echo starting; exit 1",
        cwd = dir,
        pty = false,
        name = "crashy",
        restart = "on-failure",
        max_restarts = 3,
        backoff_ms = 150,
      }))
      H.wait(20000, function()
        local i = tasks().info(ex.id)
        return i and #i.group_ids == 4 and i.state == "done"
      end, "three restarts, then giving up")
      local ids = tasks().info(ex.id).group_ids
      for k = 2, 4 do
        local r, prev = p().record(ids[k]), p().record(ids[k - 1])
        eq(r.prev_id, ids[k - 1])
        eq(r.state, "failed")
        local gap = r.created_at - prev.ended_at
        local want = 150 * 2 ^ (k - 2)
        T.ok(gap >= want - 5, ("restart %d after %d ms, backoff %d"):format(k - 1, gap, want))
      end
      vim.wait(600)
      eq(#tasks().info(ex.id).group_ids, 4, "more restarts than max_restarts")
      -- ready: `after` waits for the ready line of a service that keeps running
      local svc = assert(p().run({
        cmd = "sleep 0.3; echo 'listening on :8080'; sleep 30",
        cwd = dir,
        pty = false,
        name = "server",
        ready = { pattern = "listening on :[0-9]+" },
      }))
      local client = assert(p().run({ cmd = "true", cwd = dir, after = { "server" } }))
      local rec = wait_state(client.id, "completed canceled failed")
      eq(rec.state, "completed")
      eq(p().record(svc.id).state, "running", "the service is still up")
      eq(tasks().info(svc.id).ready, true)
      -- "always": a command that succeeds starts again, past max_restarts (those count failures);
      -- a cancel while it waits to restart stops it
      local tick = assert(p().run({
        cmd = "true",
        cwd = dir,
        pty = false,
        restart = "always",
        max_restarts = 1,
        backoff_ms = 30,
      }))
      H.wait(
        20000,
        function() return #tasks().info(tick.id).group_ids >= 4 end,
        "four runs of an always-service"
      )
      H.wait(
        5000,
        function() return tasks().info(tick.id).state == "backoff" end,
        "waiting to restart"
      )
      local last = tasks().info(tick.id).group_ids
      last = last[#last]
      p().cancel(last)
      H.wait(
        5000,
        function() return tasks().info(tick.id).state == "stopped" end,
        "stopped by the cancel in its backoff"
      )
      local n = #tasks().info(tick.id).group_ids
      vim.wait(200)
      eq(#tasks().info(tick.id).group_ids, n, "restarted after a cancel in its backoff")
      -- canceling a service stops it for good (no restart)
      local svc2 = assert(
        p().run({ cmd = "sleep 30", cwd = dir, pty = false, restart = "always", backoff_ms = 50 })
      )
      wait_state(svc2.id, "running")
      p().cancel(svc.id)
      p().cancel(svc2.id)
      wait_state(svc2.id, "canceled")
      vim.wait(300)
      eq(tasks().info(svc2.id).next_id, nil, "a canceled service came back")
    end
  )

  test("tasks: bad task options are one clear error", function()
    -- run() raises on a bad spec (|proctor-run-errors|); _run() gives the failure tuple
    T.raises(
      function() p().run({ cmd = "true", restart = "sometimes" }) end,
      "'restart' must be one of never, on%-failure, always"
    )
    local _, err, name = p()._run({ cmd = "true", restart = "sometimes" })
    eq(name, "EINVAL")
    T.match(err, "'restart' must be one of never, on%-failure, always")
    T.raises(
      function() p().run({ cmd = "true", diagnostics = "nosuch" }) end,
      "unknown matcher 'nosuch'"
    )
    T.raises(
      function() p().run({ cmd = "true", ready = { pattern = "(" } }) end,
      "'ready%.pattern'"
    )
    T.raises(function() p().run({ cmd = "true", after = { {} } }) end, "'after' entries")
    T.raises(
      function() p().run({ cmd = "true", watch = { patterns = "*.c" } }) end,
      "watch%.patterns"
    )
    eq(tasks().ere("a<b>=@%c~&[<>]"), "\\va\\<b\\>\\=\\@\\%c\\~\\&[<>]")
  end)
end
