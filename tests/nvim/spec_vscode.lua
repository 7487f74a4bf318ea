-- tests/nvim/spec_vscode.lua — a `.vscode/tasks.json` as a discovery source
-- (lua/proctor/tasks/vscode.lua, jsonc.lua, jsregex.lua, vsmatcher.lua): read
-- only when trusted, its matchers into the quickfix list and diagnostics as
-- :Proctor make fills them, dependsOn in both orders, a background task as a
-- service, inputs prompted at launch (a password as a secret), variables,
-- and clear errors naming the task. The fixture is tests/tasks/vscode/.
return function(test, T, H)
  local api = vim.api
  local root = H.root

  local function p() return require("proctor") end
  local function tasks() return require("proctor.tasks") end
  local function D() return require("proctor.tasks.diagnostics") end

  local function eq(a, b, msg)
    if type(a) == "table" or type(b) == "table" then return T.eq(T.fmt(a), T.fmt(b), msg) end
    return T.eq(a, b, msg)
  end

  local function read(path)
    local f = io.open(path, "r")
    if not f then return nil end
    local s = f:read("*a")
    f:close()
    return s
  end

  local start_dir = vim.fn.getcwd()
  local function setup()
    eq(p().setup({ notify = "on_failure", engine = { kill_grace_ms = 500 } }), true)
    require("harness").defer(function()
      pcall(vim.cmd, "silent! tabonly!")
      pcall(vim.cmd, "silent! only!")
      vim.cmd("enew!")
      vim.cmd("cd " .. vim.fn.fnameescape(start_dir))
      vim.fn.setqflist({}, "f")
      p().setup({ notify = "never" })
    end)
  end

  -- The fixture in a private directory (tasks write files there); trusted unless told.
  local function project(untrusted)
    local d = vim.fn.tempname()
    vim.fn.mkdir(d, "p")
    d = (vim.uv or vim.loop).fs_realpath(d)
    require("harness").defer(function() vim.fn.delete(d, "rf") end)
    vim.fn.system({ "cp", "-r", root .. "/tests/tasks/vscode/.", d })
    if not untrusted then assert(require("proctor.tasks.trust").allow(d, false)) end
    require("proctor.tasks.discover").invalidate()
    return d
  end

  -- Run task `name` of `dir` as :Proctor task does: the execution (or chain) or the error.
  local function run(name, dir)
    local got, err, answered
    tasks().run_task(name, { cwd = dir }, function(ex, e)
      got, err, answered = ex, e, true
    end)
    H.wait(20000, function() return answered end, "the task " .. name .. " to start")
    return got, err
  end

  local function ended(ex)
    local rec = assert(ex:wait(30000))
    H.wait(10000, function()
      local r = D().result(rec.id)
      return r == nil or r.done
    end, "matching done")
    return rec
  end

  local function qf_items()
    local out = {}
    for _, it in ipairs(vim.fn.getqflist()) do
      if it.valid == 1 then
        out[#out + 1] = { api.nvim_buf_get_name(it.bufnr), it.lnum, it.col, it.type, it.text }
      end
    end
    return out
  end

  -- Replace vim.ui.input/select and inputsecret for one test: answers by prompt.
  local function answer(by_prompt)
    local saved =
      { input = vim.ui.input, select = vim.ui.select, secret = rawget(vim.fn, "inputsecret") }
    local asked = {}
    vim.ui.input = function(o, cb)
      asked[#asked + 1] = o.prompt
      cb(by_prompt[o.prompt] or o.default)
    end
    vim.ui.select = function(items, o, cb)
      asked[#asked + 1] = o.prompt
      local want = by_prompt[o.prompt]
      for i, it in ipairs(items) do
        if want == nil or it.value == want then return cb(it, i) end
      end
      cb(nil)
    end
    rawset(vim.fn, "inputsecret", function(prompt)
      asked[#asked + 1] = prompt
      return by_prompt[prompt]
    end)
    require("harness").defer(function()
      vim.ui.input, vim.ui.select = saved.input, saved.select
      rawset(vim.fn, "inputsecret", saved.secret)
    end)
    return asked
  end

  test("vscode: JSONC (comments, trailing commas) read; a mistake names its line", function()
    local J = require("proctor.tasks.jsonc")
    local v =
      assert(J.decode('// top\n{ "a": [1, 2, ], /* x */ "b": { "c": "\\u00e9\\n", }, "d": null, }'))
    eq({ v.a, v.b.c, v.d == J.null }, { { 1, 2 }, "é\n", true })
    local _, err = J.decode('{\n  "a": 1\n  "b": 2\n}')
    eq(err, "line 3: expected ',' or '}'")
    _, err = J.decode('{ "a": 1 /* open')
    eq(err, "line 1: a /* comment is not closed")
    -- the fixture's tasks, in the file's order, from this source
    setup()
    local dir = project()
    local got = tasks().list({ cwd = dir, prompt = false })
    local names = {}
    for _, t in ipairs(got) do
      if t.source == "vscode" then names[#names + 1] = t.name end
    end
    eq(names, {
      "build",
      "build (pattern)",
      "tsc",
      "lint",
      "tsc watch",
      "serve",
      "one",
      "two",
      "in order",
      "at once",
      "unit",
      "greet",
      "login",
      "here",
      "shown",
      "hidden",
      "bad regexp",
      "bad variable",
    })
  end)

  test("vscode: an untrusted directory: tasks.json is not read", function()
    setup()
    local dir = project(true)
    local opened = {}
    local real_open = io.open
    rawset(io, "open", function(f, ...)
      opened[#opened + 1] = f
      return real_open(f, ...)
    end)
    local ok, got = pcall(tasks().list, { cwd = dir, prompt = false })
    rawset(io, "open", real_open)
    assert(ok, got)
    eq(#vim.tbl_filter(function(t) return t.source == "vscode" end, got), 0, "no vscode task")
    eq(#vim.tbl_filter(function(f) return f:find("tasks.json", 1, true) end, opened), 0, "not read")
    local names = require("proctor.tasks.discover").untrusted(dir)
    eq(vim.tbl_contains(names, "vscode"), true, "said untrusted")
    -- once trusted, the next list reads it
    assert(require("proctor.tasks.trust").allow(dir, false))
    got = tasks().list({ cwd = dir, prompt = false })
    eq(#vim.tbl_filter(function(t) return t.source == "vscode" end, got) > 0, true)
  end)

  test(
    "vscode: a compile error through $gcc lands in quickfix and diagnostics (:Proctor build)",
    function()
      setup()
      local dir = project()
      vim.cmd("cd " .. vim.fn.fnameescape(dir))
      local before = #p().list()
      vim.cmd("Proctor build") -- the default build task: "build", $gcc
      local rec
      H.wait(20000, function()
        require("proctor.engine").pump()
        local l = p().list()
        rec = #l > before and l[#l] or nil
        return rec and require("proctor.engine").TERMINAL[rec.state]
      end, "the build to end")
      H.wait(
        10000,
        function() return D().result(rec.id) and D().result(rec.id).done end,
        "matching"
      )
      eq(rec.state, "failed")
      local items = qf_items()
      eq(#items, 1, "one error: " .. T.fmt(items))
      eq({ items[1][1], items[1][2], items[1][3], items[1][4] }, { dir .. "/main.c", 6, 10, "E" })
      T.match(items[1][5], "undeclared_value")
      local buf = vim.fn.bufnr(dir .. "/main.c")
      local ds = vim.diagnostic.get(buf, { lnum = 5 })
      eq(#ds, 1, "one diagnostic on line 6")
      eq({ ds[1].col, ds[1].severity }, { 9, vim.diagnostic.severity.ERROR })
      -- the same through $gcc's pattern (base inheritance, translated regexp)
      vim.fn.setqflist({}, "f")
      local ex = assert(run("build (pattern)", dir))
      ended(ex)
      items = qf_items()
      eq(#items, 1, "one error: " .. T.fmt(items))
      eq({ items[1][1], items[1][2], items[1][3], items[1][4] }, { dir .. "/main.c", 6, 10, "E" })
    end
  )

  test("vscode: $tsc and an inline multi-line matcher (loop) fill the quickfix list", function()
    setup()
    local dir = project()
    local ex = assert(run("tsc", dir))
    ended(ex)
    local items = qf_items()
    eq(#items, 1, T.fmt(items))
    eq({ items[1][1], items[1][2], items[1][3], items[1][4] }, { dir .. "/src/a.ts", 3, 5, "E" })
    vim.fn.setqflist({}, "f")
    ex = assert(run("lint", dir))
    ended(ex)
    items = qf_items()
    eq(items, {
      { dir .. "/src/a.js", 3, 5, "E", "'x' is not defined" },
      { dir .. "/src/a.js", 7, 1, "W", "Missing semicolon" },
      { dir .. "/src/b.js", 2, 9, "E", "Unexpected var" },
    })
  end)

  test("vscode: $tsc-watch: a new compilation (its beginsPattern) replaces the problems", function()
    setup()
    local dir = project()
    local ex = assert(run("tsc watch", dir))
    ended(ex)
    local items = qf_items()
    eq(#items, 1, T.fmt(items))
    eq({ items[1][1], items[1][2], items[1][3], items[1][4] }, { dir .. "/src/b.ts", 2, 7, "E" })
    -- a.ts's problem, when it was published before the new compilation began, is gone
    local buf = vim.fn.bufnr(dir .. "/src/a.ts")
    if buf > 0 then
      H.wait(10000, function() return #vim.diagnostic.get(buf) == 0 end, "a.ts's problem gone")
    end
    eq(#vim.diagnostic.get(vim.fn.bufnr(dir .. "/src/b.ts")), 1, "b.ts's problem")
  end)

  test("vscode: dependsOn: sequence runs in order, else the task runs after both", function()
    setup()
    local dir = project()
    local c = assert(run("in order", dir))
    local rec = assert(c:wait(30000))
    eq(rec.state, "completed")
    eq(read(dir .. "/order.txt"), "one\ntwo\nthree\n")
    os.remove(dir .. "/order.txt")
    local ex = assert(run("at once", dir))
    eq(ended(ex).state, "completed")
    local lines = vim.split(vim.trim(read(dir .. "/order.txt")), "\n")
    eq(#lines, 3)
    eq(lines[3], "after", "the task after its dependencies")
    table.sort(lines)
    eq(lines, { "after", "one", "two" })
  end)

  test("vscode: a background task is a service, ready at its endsPattern", function()
    setup()
    local dir = project()
    local ex = assert(run("serve", dir))
    H.wait(20000, function()
      require("proctor.engine").pump()
      local i = tasks().info(ex.id)
      return i and i.ready
    end, "ready")
    eq(p().record(ex.id).state, "running", "still running once ready")
    ex:cancel()
    ex:wait(20000)
  end)

  test("vscode: inputs are prompted at launch; a password is passed as a masked secret", function()
    setup()
    local dir = project()
    local asked = answer({ ["Mood: "] = "calm", ["Password: "] = "s3cr3t-pw" })
    local ex = assert(run("greet", dir))
    eq(ended(ex).state, "completed")
    eq(asked, { "Who: ", "Mood: " })
    eq(read(dir .. "/greet.txt"), "world calm\n")
    ex = assert(run("login", dir))
    local rec = ended(ex)
    eq(rec.state, "completed")
    eq(read(dir .. "/secret.txt"), "s3cr3t-pw", "the command got it")
    local shown = vim.inspect(p().record(ex.id))
    eq(shown:find("s3cr3t", 1, true), nil, "not in the record")
    local out = ex:output()
    eq(tostring(out):find("s3cr3t", 1, true), nil, "masked in the output")
    T.match(tostring(out), "token=%*%*%*")
    -- canceled prompt: nothing runs, and it says so
    answer({})
    local none, err = run("login", dir)
    eq(none, nil)
    T.match(err, "task 'login': input 'pw' canceled")
  end)

  test(
    "vscode: variables of the moment, linux wins, :Proctor test; errors name the task",
    function()
      setup()
      local dir = project()
      vim.env.PROCTOR_VSCODE_TEST = "xyz"
      vim.cmd("edit " .. vim.fn.fnameescape(dir .. "/main.c"))
      api.nvim_win_set_cursor(0, { 4, 0 })
      local ex = assert(run("here", dir))
      eq(ended(ex).state, "completed")
      eq(read(dir .. "/here.txt"), "main.c:4/xyz\n")
      vim.cmd("cd " .. vim.fn.fnameescape(dir))
      vim.cmd("Proctor test")
      H.wait(20000, function() return read(dir .. "/tested.txt") ~= nil end, "the test task")
      H.wait(20000, function() return (read(dir .. "/tested.txt") or ""):find("\n") end, "its line")
      eq(read(dir .. "/tested.txt"), "linux top " .. vim.fn.fnamemodify(dir, ":t") .. "\n")
      local none, err = run("bad regexp", dir)
      eq(none, nil)
      T.match(
        err,
        "task 'bad regexp': problemMatcher%.pattern: regexp .*: named groups %(%?<name>%.%.%.%) are not supported"
      )
      none, err = run("bad variable", dir)
      eq(none, nil)
      T.match(err, "task 'bad variable': args%[1%]: unknown variable %${config:editor%.tabSize}")
    end
  )

  test(
    "vscode: presentation: reveal always opens the console (focus false: the cursor stays), never none",
    function()
      setup()
      local dir = project()
      vim.cmd("cd " .. vim.fn.fnameescape(dir))
      local function console_wins(name)
        local n = 0
        for _, w in ipairs(api.nvim_tabpage_list_wins(0)) do
          if
            api.nvim_buf_get_name(api.nvim_win_get_buf(w)):find("^proctor://%d+/" .. name .. "$")
          then
            n = n + 1
          end
        end
        return n
      end
      local here = api.nvim_get_current_win()
      vim.cmd("Proctor task shown")
      H.wait(20000, function() return console_wins("shown") == 1 end, "the console of shown")
      eq(api.nvim_get_current_win(), here, "focus false: the cursor stays")
      vim.cmd("only") -- an open console window shows the next run whatever it asks
      local before = #p().list()
      vim.cmd("Proctor task hidden")
      H.wait(20000, function()
        local l = p().list()
        return #l > before and require("proctor.engine").TERMINAL[l[#l].state] ~= nil
      end, "hidden to end")
      eq(console_wins("hidden"), 0, "reveal never: no window")
    end
  )

  test("vscode: JavaScript regexps translated exactly, the rest refused", function()
    local J = require("proctor.tasks.jsregex")
    local function groups(js, line)
      local re = assert(J.translate(js))
      return vim.list_slice(vim.fn.matchlist(line, re), 1, 5)
    end
    local saved = vim.o.ignorecase
    vim.o.ignorecase = true
    eq(
      groups([[^(.*?):(\d+):(\d+)\s+(\w+)]], "a:b.c:3:5  Err x"),
      { "a:b.c:3:5  Err", "a:b.c", "3", "5", "Err" }
    )
    eq(groups([[^x(?:ab)+?(b*)$]], "xababb"), { "xababb", "b", "", "", "" })
    eq(groups([[(a)(?=b)]], "ab"), { "a", "a", "", "", "" })
    eq(groups([[(a+?)(a*)]], "aaa"), { "aaa", "a", "aa", "", "" }, "lazy")
    eq(#vim.fn.matchlist("ABC", assert(J.translate("abc"))), 0, "case sensitive")
    eq(groups([[\{x}<=>@%~&]], "{x}<=>@%~&"), { "{x}<=>@%~&", "", "", "", "" })
    vim.o.ignorecase = saved
    for js, why in pairs({
      ["\\bx"] = "word boundary",
      ["(?<n>x)"] = "named groups",
      ["\\p{L}"] = "\\p is not supported",
      ["((((((((((x))))))))))"] = "more than 9",
      ["[\\S]"] = "inside a set",
    }) do
      local re, err = J.translate(js)
      eq(re, nil, js)
      T.match(err, why:gsub("%p", "%%%0"))
    end
    local V = require("proctor.tasks.vscode")._H
    eq(V.presentation({ reveal = "always", focus = true }), { enter = true })
    eq(V.presentation({ reveal = "never" }), false)
    eq(V.presentation(nil), nil)
  end)

  test("vscode: a list's answer survives the cache being dropped before it comes", function()
    setup()
    local dir = project()
    local got
    local errs = {}
    local _, complete =
      tasks().list({ cwd = dir, prompt = false, callback = function(t) got = t end })
    eq(complete, true, "answered from what is known: the callback is scheduled")
    require("proctor.tasks.discover").invalidate() -- e.g. a :Proctor trust, or the next test
    local ok, err = pcall(vim.wait, 5000, function() return got ~= nil end, 10)
    errs[#errs + 1] = not ok and err or nil
    eq(errs, {})
    eq(type(got), "table", "the callback ran")
  end)

  test("vscode: the named matchers and inline fields read their tools' output", function()
    local V = require("proctor.tasks.vscode")._H
    local function items(pm, text)
      local ok, m = pcall(V.matchers, { problemMatcher = pm }, { ws = "/ws", static = true })
      if not ok then error(T.fmt(pm) .. ": " .. tostring(type(m) == "table" and m.msg or m), 0) end
      local spec = type(m.diagnostics) == "string" and { matchers = { m.diagnostics } }
        or m.diagnostics
      local vm = assert(require("proctor.tasks.vsmatcher").new(spec, { cwd = "/ws/sub" }))
      vm:feed(text)
      vm:finish()
      local out = {}
      for _, it in ipairs(vm.items) do
        out[#out + 1] = { it.filename, it.lnum, it.col or -1, it.type, it.text, it.code or "" }
      end
      return out
    end
    eq(
      items(
        "$eslint-stylish",
        "/ws/src/a.js\n  3:5  error  'x' is not defined  no-undef\n  4:1  warning  Semi\n"
      ),
      {
        { "/ws/src/a.js", 3, 5, "E", "'x' is not defined", "no-undef" },
        { "/ws/src/a.js", 4, 1, "W", "Semi", "" },
      }
    )
    eq(
      items("$eslint-compact", "/ws/a.js: line 3, col 5, Error - Unexpected var. (no-var)\n"),
      { { "/ws/a.js", 3, 5, "E", "Unexpected var.", "no-var" } }
    )
    eq(
      items("$msCompile", "  2>/ws/a.cs(10,5,10,9): error CS1002: ; expected\n"),
      { { "/ws/a.cs", 10, 5, "E", "; expected", "CS1002" } }
    )
    eq(
      items("$lessc", "ParseError: Unrecognised input in /ws/a.less on line 3, column 5:\n"),
      { { "/ws/a.less", 3, 5, "E", "ParseError: Unrecognised input", "" } }
    )
    eq(
      items("$jshint", "a.js: line 3, col 5, Missing semicolon. (W033)\n"),
      { { "/ws/a.js", 3, 5, "W", "Missing semicolon.", "033" } }
    )
    -- $go as is: proctor's go matcher, relative to where the task runs; its pattern (base): the workspace
    eq(
      items("$go", "./main.go:5:2: undefined: x\n"),
      { { "/ws/sub/main.go", 5, 2, "E", "undefined: x", "" } }
    )
    eq(
      items({ base = "$go" }, "./main.go:5:2: undefined: x\n"),
      { { "/ws/main.go", 5, 2, "E", "undefined: x", "" } }
    )
    -- location with an end, a default severity, a whole-file pattern, fileLocation kinds
    eq(
      items({
        severity = "warning",
        fileLocation = "absolute",
        pattern = { regexp = [[^(\S+) \((.*)\) (.*)$]], location = 2, message = 3 },
      }, "x.c (4,2,6,1) odd\n/abs/y.c (7) odder\n"),
      { { "/ws/sub/x.c", 4, 2, "W", "odd", "" }, { "/abs/y.c", 7, -1, "W", "odder", "" } }
    )
    eq(
      items({
        fileLocation = { "relative", "${workspaceFolder}/lib" },
        pattern = { regexp = [[^BAD FILE (.*): (.*)$]], kind = "file", file = 1, message = 2 },
      }, "BAD FILE m.lua: no module\n"),
      { { "/ws/lib/m.lua", 1, -1, "E", "no module", "" } }
    )
    local ok, err = pcall(
      V.matchers,
      { problemMatcher = { pattern = { regexp = "^(x)$", line = 3 } } },
      {
        ws = "/ws",
        static = true,
      }
    )
    eq(ok, false)
    T.match(err.msg, "'line' is group 3 but the regexp has 1")
    ok, err = pcall(V.matchers, { problemMatcher = "$nope" }, { ws = "/ws", static = true })
    eq(ok, false)
    T.match(err.msg, "unknown problem matcher '%$nope' %(known: %$eslint%-compact")
  end)

  test("vscode: shell, options.shell, options.cwd and quoting make the command", function()
    local defs = assert(require("proctor.tasks.vscode").tasks(
      "/ws",
      [[{ "tasks": [
        { "label": "a", "type": "shell", "command": "echo", "args": ["two words", { "value": "$HOME", "quoting": "weak" }, "plain"],
          "options": { "cwd": "sub/../web", "shell": { "executable": "/bin/dash", "args": ["-e", "-c"] } } },
        { "label": "b", "type": "npm", "script": "lint", "options": { "cwd": "${workspaceFolder}/pkg" } },
        { "label": "c", "type": "gulp" },
      ] }]]
    ))
    eq(defs[1].cmd, { "/bin/dash", "-e", "-c", [[echo 'two words' "\$HOME" plain]] })
    eq(defs[1].cwd, "/ws/web")
    eq({ defs[2].cmd, defs[2].cwd }, { { "npm", "run", "lint" }, "/ws/pkg" })
    eq(defs[3].vscode.error, "type 'gulp' is not supported (shell, process, npm, typescript)")
    local _, err = require("proctor.tasks.vscode").tasks("/ws", '{ "tasks": [ }')
    eq(err, 'line 1: unexpected "}"')
  end)
end
