-- tests/nvim/spec_make.lua — what a user coming from :make sees: `:Proctor run make -k`
-- and `:Proctor make` fill the quickfix list and diagnostics from a real compiler, gcc's
-- notes never cover the error, the task picker shows what a user types, and tasks are
-- found from any directory of a project.
return function(test, T, H)
  local api = vim.api
  local root = H.root

  local function p() return require("proctor") end
  local function D() return require("proctor.tasks.diagnostics") end

  local function eq(a, b, msg)
    if type(a) == "table" or type(b) == "table" then return T.eq(T.fmt(a), T.fmt(b), msg) end
    return T.eq(a, b, msg)
  end

  local function write(path, text)
    vim.fn.mkdir(vim.fn.fnamemodify(path, ":h"), "p")
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
  end

  -- A private directory, removed when the test ends; resolved (tempname may sit under a link).
  local function tmpdir()
    local d = vim.fn.tempname()
    vim.fn.mkdir(d, "p")
    d = (vim.uv or vim.loop).fs_realpath(d)
    require("harness").defer(function() vim.fn.delete(d, "rf") end)
    return d
  end

  -- Back to one empty window in the directory the test run started in, the
  -- quickfix list and proctor's settings as they were.
  local start_dir = vim.fn.getcwd()
  local function reset()
    pcall(vim.cmd, "silent! tabonly!")
    pcall(vim.cmd, "silent! only!")
    vim.cmd("enew!")
    vim.cmd("cd " .. vim.fn.fnameescape(start_dir))
    vim.fn.setqflist({}, "f")
  end
  local function setup(extra)
    eq(
      p().setup(
        vim.tbl_deep_extend(
          "force",
          { notify = "on_failure", engine = { kill_grace_ms = 500 } },
          extra or {}
        )
      ),
      true
    )
    require("harness").defer(function()
      reset()
      p().setup({ notify = "never" })
    end)
  end

  -- The newest execution once it ended, and its matching once done.
  local function last_ended(before)
    local rec
    H.wait(20000, function()
      require("proctor.engine").pump()
      local l = p().list()
      rec = #l > before and l[#l] or nil
      return rec and require("proctor.engine").TERMINAL[rec.state]
    end, "the run to end")
    H.wait(10000, function()
      local r = D().result(rec.id)
      return r and r.done
    end, "matching done")
    return p().record(rec.id)
  end

  local function qf_items()
    local out = {}
    for _, it in ipairs(vim.fn.getqflist()) do
      if it.valid == 1 then
        out[#out + 1] = {
          file = api.nvim_buf_get_name(it.bufnr),
          lnum = it.lnum,
          col = it.col,
          type = it.type,
          text = it.text,
        }
      end
    end
    return out
  end

  -- Every diagnostic of every proctor task namespace on buffer `buf`'s line `lnum` (1-based).
  local function on_line(buf, lnum)
    local out = {}
    for _, d in ipairs(vim.diagnostic.get(buf, { lnum = lnum - 1 })) do
      if vim.diagnostic.get_namespace(d.namespace).name:find("^proctor%.task%.") then
        out[#out + 1] = d
      end
    end
    return out
  end

  local function notes_with(pat)
    return vim.tbl_filter(function(n) return tostring(n.msg):find(pat) ~= nil end, H.notes)
  end

  -- A C file with an error that gcc follows with a note on the same line (the
  -- README's example), and a Makefile whose default goal compiles it.
  local function c_project()
    local dir = tmpdir()
    vim.fn.system({ "cp", "-r", root .. "/tests/tasks/cbuild/.", dir })
    return dir
  end

  -- 2. :Proctor run make, :Proctor make -------------------------------------------------

  test("make: `:Proctor run make -k` (README) puts gcc's error in the quickfix list", function()
    setup()
    local dir = c_project()
    vim.cmd("cd " .. vim.fn.fnameescape(dir))
    local before = #p().list()
    H.clear_notes()
    vim.cmd("Proctor run make -k")
    local rec = last_ended(before)
    eq(rec.state, "failed")
    eq(rec.cmd, { "make", "-k" })
    local qf = vim.fn.getqflist({ title = 0 })
    eq(qf.title, ("proctor #%d make -k"):format(rec.id))
    local items = qf_items()
    eq(#items, 1, "one error (its note folded in)")
    eq(
      { items[1].file, items[1].lnum, items[1].col, items[1].type },
      { dir .. "/main.c", 6, 10, "E" }
    )
    T.match(items[1].text, "undeclared_value")
    -- diagnostics: on main.c line 6, col 10, an error and nothing less
    local buf = vim.fn.bufnr(dir .. "/main.c")
    local ds = on_line(buf, 6)
    eq(#ds, 1, "one diagnostic on the error's line")
    eq({ ds[1].col, ds[1].severity }, { 9, vim.diagnostic.severity.ERROR })
    -- said as :make says it, in the ending's notification
    H.wait(10000, function() return #notes_with("%(1 of 1%)") > 0 end, "the ending's message")
    T.match(
      notes_with("%(1 of 1%)")[1].msg,
      "#%d+ make %-k failed: exit 2 after .* — %(1 of 1%): main%.c:6:10: error: .*undeclared_value"
    )
    -- :cc goes to it (the README's next line)
    vim.cmd("silent cc")
    eq(api.nvim_buf_get_name(0), dir .. "/main.c")
    eq(api.nvim_win_get_cursor(0), { 6, 9 })
    -- -nodiag: no matcher, the quickfix list left alone
    vim.fn.setqflist({}, "f")
    before = #p().list()
    vim.cmd("Proctor run -nodiag make -k")
    H.wait(20000, function()
      local l = p().list()
      return #l > before and require("proctor.engine").is_done(l[#l].id)
    end, "the -nodiag run")
    eq(D().result(p().list()[#p().list()].id), nil, "-nodiag: no matching")
    eq(#vim.fn.getqflist(), 0)
  end)

  test("make: `:Proctor run` matches build and test tools only", function()
    local m = require("proctor.tasks.matchers")
    eq(m.for_run({ "make", "-k" }), "gcc")
    eq(m.for_run("CC=clang gcc -c x.c"), "gcc")
    eq(m.for_run({ "/usr/bin/cargo", "build" }), "cargo")
    eq(m.for_run({ "go", "vet", "./..." }), "go")
    eq(m.for_run({ "npx", "tsc", "-p", "." }), "tsc")
    eq(m.for_run({ "eslint", "." }), "eslint")
    eq(m.for_run({ "pytest", "-x" }), "pytest")
    eq(m.for_run({ "python3", "-m", "pytest" }), "pytest")
    eq(m.for_run({ "python3", "-m", "http.server" }), nil, "a server gets none")
    eq(m.for_run({ "nvim" }), nil)
    eq(m.for_run("echo main.c:1:1: error: x"), nil)
    local spec = require("proctor.commands")._H.run_spec("-bg make -j8")
    eq({ spec.cmd, spec.diagnostics }, { { "make", "-j8" }, "gcc" })
    spec = require("proctor.commands")._H.run_spec("-nodiag make -j8")
    eq(spec.diagnostics, nil)
    spec = require("proctor.commands")._H.run_spec("ls -l")
    eq(spec.diagnostics, nil)
  end)

  test("make: `:Proctor make` runs 'makeprg' ($*) with 'errorformat'; :cnext walks it", function()
    setup()
    local dir = tmpdir()
    write(
      dir .. "/two.c",
      "int f(int a, int b);\nint main(void) {\n  int y = f(1);\n  return y + nope;\n}\n"
    )
    write(dir .. "/Makefile", "two.o: two.c\n\tcc -Wall -c two.c -o two.o\n")
    vim.cmd("cd " .. vim.fn.fnameescape(dir))
    local saved = vim.o.makeprg
    require("harness").defer(function() vim.o.makeprg = saved end)
    vim.o.makeprg = "make $* -k"
    local before = #p().list()
    vim.cmd("Proctor make -bg two.o")
    local rec = last_ended(before)
    eq(rec.cmd, { "make", "two.o", "-k" }, "$* replaced by the arguments")
    local items = qf_items()
    eq(#items >= 2, true, "two errors: " .. T.fmt(items))
    eq({ items[1].file, items[1].lnum, items[1].type }, { dir .. "/two.c", 3, "E" })
    T.match(items[1].text, "^too few arguments")
    T.match(items[1].text, "\nnote: declared here %(two%.c:1:5%)")
    eq({ items[2].lnum, items[2].type }, { 4, "E" })
    -- no quickfix entry and no diagnostic is a note of its own
    for _, it in ipairs(items) do
      T.ok(not it.text:find("^%s*note:"), "a note as an entry: " .. it.text)
    end
    local buf = vim.fn.bufnr(dir .. "/two.c")
    for _, d in ipairs(on_line(buf, 1)) do
      T.ok(d.severity ~= vim.diagnostic.severity.INFO, "the note's line got an info entry")
    end
    vim.cmd("silent cfirst")
    vim.cmd("silent cnext")
    eq({ api.nvim_buf_get_name(0), api.nvim_win_get_cursor(0)[1] }, { dir .. "/two.c", 4 })
    -- without $*: the arguments go after 'makeprg'; a buffer's own 'makeprg' wins
    vim.cmd("setlocal makeprg=make\\ -k")
    before = #p().list()
    vim.cmd("Proctor make -bg two.o")
    eq(last_ended(before).cmd, { "make", "-k", "two.o" })
    -- an empty quickfix list after a clean build (always replaced, as :make does)
    write(dir .. "/two.c", "int main(void) { return 0; }\n")
    before = #p().list()
    vim.cmd("Proctor make -bg two.o")
    eq(last_ended(before).state, "completed")
    H.wait(10000, function() return #vim.fn.getqflist() == 0 end, "the list emptied")
    -- a build that passes with a warning: the list has it, and since the ending is not
    -- announced (notify = "on_failure") the list is told on its own
    write(dir .. "/two.c", "int main(void) { int unused; return 0; }\n")
    H.clear_notes()
    before = #p().list()
    vim.cmd("Proctor make -bg two.o")
    rec = last_ended(before)
    eq(rec.state, "completed")
    H.wait(10000, function() return #notes_with("%(1 of 1%)") > 0 end, "the list's message")
    T.match(
      notes_with("%(1 of 1%)")[1].msg,
      ("^%%(proctor%%) #%d make %%-k two%%.o: %%(1 of 1%%): two%%.c:1:22: warning: unused variable"):format(
        rec.id
      )
    )
    eq(qf_items()[1].type, "W")
  end)

  -- 4. Notes never hide the error -------------------------------------------------------

  test("make: gcc notes fold into the error they follow, also across two output chunks", function()
    local m = require("proctor.tasks.matchers").new("gcc", { cwd = "/src" })
    m:feed("a.c:4:11: error: too few arguments to function 'f'\n")
    eq(#m.items, 1)
    m:feed("a.c:1:5: note: declared here\na.c:4:11: note: another\n")
    m:feed("a.c:9:2: warning: unused [-Wunused]\n")
    eq(#m.items, 2, "notes are no items")
    eq(m.items[1].type, "E")
    eq(
      m.items[1].text,
      "too few arguments to function 'f'\nnote: declared here (a.c:1:5)\nnote: another"
    )
    eq(m.items[1].related, {
      { filename = "/src/a.c", lnum = 1, col = 5, text = "declared here" },
      { filename = "/src/a.c", lnum = 4, col = 11, text = "another" },
    })
    eq(m.updated[1], m.items[1], "the consumer is told it changed")
    -- a note with no problem before it stays an info entry
    local m2 = require("proctor.tasks.matchers").new("gcc", { cwd = "/src" })
    m2:feed("a.c:1:5: note: alone\n")
    eq({ #m2.items, m2.items[1].type }, { 1, "I" })
    -- at most NOTES_MAX notes into one problem
    local m3 = require("proctor.tasks.matchers").new("gcc", { cwd = "/src" })
    local lines = { "a.c:1:1: error: e\n" }
    for i = 1, require("proctor.tasks.matchers").NOTES_MAX + 5 do
      lines[#lines + 1] = ("a.c:%d:1: note: n%d\n"):format(i + 1, i)
    end
    m3:feed(table.concat(lines))
    eq(#m3.items[1].related, require("proctor.tasks.matchers").NOTES_MAX)
    T.match(m3.items[1].text, "\n…$")

    -- a published error gets the note that came in a later chunk
    setup()
    local dir = tmpdir()
    local ex = p().run({
      cmd = {
        "sh",
        "-c",
        "printf 'x.c:1:1: error: boom\\n'; sleep 0.3; printf 'x.c:1:1: note: why\\n'; exit 1",
      },
      cwd = dir,
      diagnostics = "gcc",
      name = "notes later",
      quickfix = "never",
    })
    H.wait(20000, function()
      local r = D().result(ex.id)
      return r and r.done
    end, "matching done")
    local buf = vim.fn.bufnr(dir .. "/x.c")
    local ds = vim.diagnostic.get(buf, { namespace = D().namespace("notes later") })
    eq(#ds, 1)
    eq(ds[1].severity, vim.diagnostic.severity.ERROR)
    eq(ds[1].message, "boom\nnote: why")
    eq(ds[1].user_data.related[1].text, "why")
  end)

  test("make: `make` never shows I on an error's line (real gcc output)", function()
    setup()
    local dir = tmpdir()
    write(
      dir .. "/n.c",
      "int f(int a, int b);\nstruct s { int x; };\nint main(void) {\n  int y = f(1);\n"
        .. "  struct s v; v.z = 2;\n  return y + undeclared_value;\n}\n"
    )
    write(dir .. "/Makefile", "n.o: n.c\n\tcc -Wall -c n.c -o n.o\n")
    -- as the discovered task `make n.o` runs it (the gcc matcher), in a directory not trusted
    local ex =
      p().run({ cmd = { "make", "n.o" }, cwd = dir, diagnostics = "gcc", name = "make n.o" })
    H.wait(20000, function()
      local r = D().result(ex.id)
      return r and r.done
    end, "matching done")
    local buf = vim.fn.bufnr(dir .. "/n.c")
    local errors = 0
    for _, d in ipairs(vim.diagnostic.get(buf)) do
      if d.severity == vim.diagnostic.severity.ERROR then
        errors = errors + 1
        for _, o in ipairs(on_line(buf, d.lnum + 1)) do
          T.ok(
            o.severity ~= vim.diagnostic.severity.INFO,
            ("an info entry on error line %d: %s"):format(d.lnum + 1, o.message)
          )
        end
      end
    end
    eq(errors >= 3, true, "gcc's three errors")
    T.ok(
      vim.diagnostic.config(nil, D().namespace("make n.o")).severity_sort,
      "proctor's namespaces sort by severity"
    )
  end)

  -- 9. The picker -------------------------------------------------------------------------

  -- The picker's items for `dir` (through :Proctor run -cwd=), and its options.
  local function picker(dir, choose)
    local orig = vim.ui.select
    local shown = {}
    vim.ui.select = function(items, opts, on_choice)
      shown[#shown + 1] = { items = items, opts = opts }
      on_choice(choose and choose(items, #shown) or nil)
    end
    local ok, err = pcall(function()
      vim.cmd("Proctor run -bg -cwd=" .. vim.fn.fnameescape(dir))
      H.wait(30000, function() return #shown > 0 end, "the picker")
      if choose then H.wait(10000, function() return #shown > 1 end, "the second picker") end
    end)
    vim.ui.select = orig
    if not ok then error(err, 0) end
    return shown
  end
  local function lines_of(s)
    local out = {}
    for _, it in ipairs(s.items) do
      out[#out + 1] = s.opts.format_item(it)
    end
    return out
  end

  test(
    "make: the picker shows phony and described targets first, file targets behind more",
    function()
      setup()
      local dir = tmpdir()
      vim.fn.system({ "cp", "-r", root .. "/tests/tasks/make/.", dir })
      assert(require("proctor.tasks.trust").allow(dir, false))
      local before = #p().list()
      local shown = picker(dir, function(items, n)
        if n == 1 then return items[#items] end -- "more"
        return items[1] -- make app
      end)
      local first = lines_of(shown[1])
      eq(first[1], "make all  [make]", "the default goal first")
      T.ok(vim.tbl_contains(first, "make test  — run the self-test  [make]"), T.fmt(first))
      T.ok(vim.tbl_contains(first, "make docs  — build the docs  [make]"), T.fmt(first))
      T.ok(not vim.tbl_contains(first, "make app  [make]"), "a file target among the first")
      eq(first[#first], "more: 1 file targets of make …")
      eq(lines_of(shown[2]), { "make app  [make]" })
      -- a file target picked there runs (it fails: the fixture has no main.c)
      H.wait(20000, function()
        local l = p().list()
        return #l > before and require("proctor.engine").is_done(l[#l].id)
      end, "make app to run")
      eq(p().list()[#p().list()].cmd, { "make", "app" })
    end
  )

  test("make: the picker on this repository: no recipe text, file targets behind more", function()
    setup()
    assert(require("proctor.tasks.trust").allow(root, false))
    local shown = picker(root)
    local first = lines_of(shown[1])
    local items = shown[1].items
    T.match(first[1], "^make all  — build the core")
    local more = items[#items]
    T.ok(more.count and more.count > 0, "a more entry")
    local names, all = {}, require("proctor").tasks({ cwd = root })
    for _, t in ipairs(items) do
      if t.name then names[#names + 1] = t.name end
    end
    T.ok(not vim.tbl_contains(names, "make build"), "make build (a directory) among the first")
    T.ok(not vim.tbl_contains(names, "make doc/tags"), "a file target among the first")
    T.ok(vim.tbl_contains(names, "make test"), "make test")
    eq(#names + more.count, #vim.tbl_filter(function(t) return t.source == "make" end, all))
    for _, t in ipairs(all) do
      local d = t.desc or ""
      T.ok(not d:find("%$[(@<]") and not d:find("^@"), "recipe text as a description: " .. d)
    end
    for _, l in ipairs(first) do
      T.ok(not l:find("%$[(@<]"), "recipe text shown: " .. l)
    end
    T.ok(#first < 37, ("%d entries"):format(#first))
  end)

  -- 10. Tasks from any directory of a project --------------------------------------------

  test("make: tasks are found from a subdirectory and run at the project's root", function()
    setup()
    local top = tmpdir()
    local proj = top .. "/proj"
    vim.fn.mkdir(proj .. "/.git", "p")
    vim.fn.system({ "cp", "-r", root .. "/tests/tasks/make/.", proj })
    vim.fn.mkdir(proj .. "/src/deep", "p")
    write(proj .. "/web/package.json", '{ "scripts": { "lint": "true" } }\n')
    vim.fn.mkdir(proj .. "/web/src", "p")
    -- above the .git: never looked at (proj has a Makefile, no package.json)
    write(top .. "/Makefile", "outside:\n\t@true\n")
    write(top .. "/package.json", '{ "scripts": { "outside": "true" } }\n')
    assert(require("proctor.tasks.trust").allow(proj, false))
    vim.cmd("cd " .. vim.fn.fnameescape(proj .. "/src/deep"))
    local got
    p().tasks({ callback = function(t) got = t end })
    H.wait(30000, function() return got ~= nil end, "discovery")
    local by = {}
    for _, t in ipairs(got) do
      by[t.name] = t
    end
    T.ok(by["make test"], "make test from src/deep: " .. T.fmt(vim.tbl_keys(by)))
    eq(by["make test"].cwd, proj)
    eq(by["make outside"], nil, "a Makefile above the project root")
    eq(by["npm run outside"], nil, "a package.json above the project root")
    eq(by["npm run lint"], nil, "web/package.json is not above src/deep")
    -- the picker says where they come from
    local shown = picker(vim.fn.getcwd())
    T.match(shown[1].opts.prompt, "in " .. vim.pesc(vim.fn.fnamemodify(proj, ":~")))
    -- and the task runs there
    local before = #p().list()
    vim.cmd("Proctor task make lint")
    H.wait(20000, function()
      local l = p().list()
      return #l > before and require("proctor.engine").is_done(l[#l].id)
    end, "make lint")
    local rec = p().list()[#p().list()]
    eq({ rec.cwd:gsub("/$", ""), rec.state }, { proj, "completed" })
    -- from web/src: npm from web, make from the root, each shown where it runs
    vim.cmd("cd " .. vim.fn.fnameescape(proj .. "/web/src"))
    shown = picker(vim.fn.getcwd())
    local text = table.concat(lines_of(shown[1]), "\n")
    T.match(
      text,
      "npm run lint  — true  %[npm · " .. vim.pesc(vim.fn.fnamemodify(proj, ":~")) .. "/web%]"
    )
    T.match(
      text,
      "make test  — run the self%-test  %[make · "
        .. vim.pesc(vim.fn.fnamemodify(proj, ":~"))
        .. "%]"
    )
  end)

  test("make: an upward-found Makefile needs the trust of its own directory", function()
    setup()
    local proj = tmpdir()
    vim.fn.mkdir(proj .. "/.git", "p")
    vim.fn.system({ "cp", "-r", root .. "/tests/tasks/make/.", proj })
    vim.fn.mkdir(proj .. "/sub", "p")
    -- the subdirectory trusted, the project not: no make probe
    assert(require("proctor.tasks.trust").allow(proj .. "/sub", false))
    vim.cmd("cd " .. vim.fn.fnameescape(proj .. "/sub"))
    H.clear_notes()
    local got
    p().tasks({ prompt = false, callback = function(t) got = t end })
    H.wait(20000, function() return got ~= nil end, "discovery")
    eq(#vim.tbl_filter(function(t) return t.source == "make" end, got), 0, "probed untrusted")
    local names, where = require("proctor.tasks.discover").untrusted(vim.fn.getcwd())
    eq({ names, where }, { { "make" }, proj })
    -- the picker's note names the project's directory (and there is nothing to pick)
    vim.cmd("Proctor run -bg")
    H.wait(10000, function() return #notes_with("not trusted") > 0 end, "the note")
    T.match(
      notes_with("not trusted")[1].msg,
      ":Proctor trust " .. vim.pesc(vim.fn.fnameescape(proj))
    )
    -- trusting it lists them
    vim.cmd("Proctor trust " .. vim.fn.fnameescape(proj))
    got = nil
    p().tasks({ prompt = false, callback = function(t) got = t end })
    H.wait(20000, function() return got ~= nil end, "discovery")
    T.ok(#vim.tbl_filter(function(t) return t.source == "make" end, got) > 0, "make tasks")
  end)
end
