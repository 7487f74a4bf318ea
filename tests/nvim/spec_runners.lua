-- tests/nvim/spec_runners.lua — the task sources in files of their own
-- (lua/proctor/tasks/sources/: deno, mise, composer, tox, taskfile) on the
-- fixtures tests/tasks/<name>, with stand-ins for the programs
-- (tests/tasks/fakebin: they print what each tool documents and log each
-- call), and what `:checkhealth proctor` says about every source.
return function(test, T, H)
  local root = H.root

  local function eq(a, b, msg)
    if type(a) == "table" or type(b) == "table" then return T.eq(T.fmt(a), T.fmt(b), msg) end
    return T.eq(a, b, msg)
  end
  local function p() return require("proctor") end

  -- A private copy of fixture `name`; trusted when `trusted`.
  local function project(name, trusted)
    local dir = vim.fn.tempname()
    vim.fn.mkdir(dir, "p")
    if name then vim.fn.system({ "cp", "-r", root .. "/tests/tasks/" .. name .. "/.", dir }) end
    if trusted then assert(require("proctor.tasks.trust").allow(dir, false)) end
    return dir
  end

  local function write(path, text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
  end

  local function slurp(path)
    local f = io.open(path, "r")
    if not f then return "" end
    local s = f:read("*a")
    f:close()
    return s
  end

  -- A private bin directory with the stand-ins, and the file they log to.
  local function fakebin()
    local bin = vim.fn.tempname()
    vim.fn.mkdir(bin, "p")
    vim.fn.system({ "cp", "-r", root .. "/tests/tasks/fakebin/.", bin })
    return bin, bin .. "/probes.log"
  end

  -- Run fn with `bin` first on PATH and PROCTOR_TEST_PROBES set (both restored after).
  local function with_bin(bin, log, fn)
    local path, probes = vim.env.PATH, vim.env.PROCTOR_TEST_PROBES
    vim.env.PATH = bin .. ":" .. path
    vim.env.PROCTOR_TEST_PROBES = log
    local ok, err = pcall(fn)
    vim.env.PATH, vim.env.PROCTOR_TEST_PROBES = path, probes
    if not ok then error(err, 0) end
  end

  -- The tasks of `dir` once every source answered; never asks about trust.
  local function discover(dir)
    local got
    p().tasks({ cwd = dir, prompt = false, callback = function(t) got = t end })
    H.wait(20000, function() return got ~= nil end, "discovery of " .. dir)
    return got
  end

  local function of(list, source)
    local out = {}
    for _, t in ipairs(list) do
      if t.source == source then out[#out + 1] = t end
    end
    return out
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

  local function setup() eq(p().setup({ notify = "never" }), true) end

  test(
    "runners: deno.json(c) tasks and composer scripts, only when the tool is installed",
    function()
      setup()
      local bin, log = fakebin()
      local deno, composer = project("deno"), project("composer")
      eq(#of(discover(deno), "deno"), 0, "no deno installed: silent")
      eq(#of(discover(composer), "composer"), 0, "no composer installed: silent")
      with_bin(bin, log, function()
        require("proctor.tasks.discover").invalidate()
        local d = of(discover(deno), "deno")
        eq(names(d), { "deno task dev", "deno task check", "deno task all" }, "the file's order")
        eq(d[1].cmd, { "deno", "task", "dev" })
        eq(d[1].desc, "deno run --watch main.ts")
        eq(d[2].desc, "type-check the sources")
        eq(d[1].cwd, deno)
        local c = of(discover(composer), "composer")
        eq(names(c), { "composer test", "composer lint", "composer serve" }, "no event hook")
        eq(c[1].cmd, { "composer", "run-script", "test" })
        eq(c[1].desc, "run the unit tests")
        eq(c[2].desc, "phpcs src; phpstan analyse")
        -- a parse error names the file and line
        write(deno .. "/deno.jsonc", '{\n  "tasks": {\n    "x": oops\n  }\n}\n')
        H.clear_notes()
        eq(#of(discover(deno), "deno"), 0)
        T.match(table.concat(H.note_texts(), "\n"), "tasks: deno: deno%.jsonc:3: not valid JSON")
      end)
      eq(slurp(log), "", "reading deno.jsonc and composer.json runs no program")
    end
  )

  test("runners: mise: `mise tasks ls --json` when trusted, the TOML [tasks] when not", function()
    setup()
    local bin, log = fakebin()
    local untrusted, trusted = project("mise"), project("mise", true)
    with_bin(bin, log, function()
      local u = of(discover(untrusted), "mise")
      eq(names(u), { "mise run build", "mise run fmt", "mise run lint:js" }, "no hidden task")
      eq(u[1].desc, "build it")
      eq(u[3].desc, "eslint .; tsc --noEmit")
      eq(u[1].cmd, { "mise", "run", "build" })
      eq(slurp(log), "", "an untrusted directory: mise never runs")
      local t = of(discover(trusted), "mise")
      eq(
        names(t),
        { "mise run build", "mise run fmt", "mise run lint:js", "mise run release" },
        "mise's own list: a file task too"
      )
      eq(find(t, "mise run release").desc, "cut a release")
      eq(find(t, "mise run fmt").desc, "prettier --write .", "no description: its command")
      T.match(slurp(log), "^mise tasks ls %-%-json\n$")
      -- mise failing: the TOML is read instead
      vim.env.PROCTOR_TEST_FAIL = "1"
      require("proctor.tasks.discover").invalidate()
      local ok, err = pcall(
        function() eq(#of(discover(trusted), "mise"), 3, "mise failed: the TOML's tasks") end
      )
      vim.env.PROCTOR_TEST_FAIL = nil
      if not ok then error(err, 0) end
      -- a TOML error names the file and line
      write(untrusted .. "/mise.toml", '[tasks]\nok = "x"\nbad = \n')
      H.clear_notes()
      eq(#of(discover(untrusted), "mise"), 0)
      T.match(table.concat(H.note_texts(), "\n"), "tasks: mise: mise%.toml:3: a value was expected")
    end)
    eq(#of(discover(trusted), "mise"), 0, "no mise installed: silent")
  end)

  test("runners: tox -l and Taskfile only in a trusted directory; tox.ini read when not", function()
    setup()
    local bin, log = fakebin()
    with_bin(bin, log, function()
      local tox_u, tox_t = project("tox"), project("tox", true)
      local tf_u, tf_t = project("taskfile"), project("taskfile", true)
      local u = of(discover(tox_u), "tox")
      eq(
        names(u),
        { "tox -e py311", "tox -e py312", "tox -e lint", "tox -e docs", "tox -e fmt" },
        "env_list, braces expanded, then [testenv:NAME]"
      )
      eq(#of(discover(tf_u), "taskfile"), 0, "an untrusted Taskfile lists nothing")
      eq(slurp(log), "", "an untrusted directory: no tox, no task")
      T.ok(
        vim.tbl_contains(require("proctor.tasks.discover").untrusted(tf_u), "taskfile"),
        "the picker can say why"
      )
      local t = of(discover(tox_t), "tox")
      eq(#t, 5)
      eq(t[1].cmd, { "tox", "-e", "py311" })
      local tf = of(discover(tf_t), "taskfile")
      eq(names(tf), { "task build", "task test" })
      eq(tf[1].desc, "compile the program")
      eq(tf[1].cmd, { "task", "build" })
      eq(tf[2].desc, nil)
      T.match(slurp(log), "tox %-l\n")
      T.match(slurp(log), "task %-%-list%-all %-%-json\n")
      -- cached: asked again, nothing runs
      local before = slurp(log)
      discover(tf_t)
      eq(slurp(log), before, "a second listing is a table lookup")
      -- a changed Taskfile is a new probe
      write(tf_t .. "/Taskfile.yml", "version: '3'\ntasks:\n  build:\n    cmds: [true]\n")
      discover(tf_t)
      T.ok(#slurp(log) > #before, "the changed Taskfile was probed again")
    end)
  end)

  test("runners: tox -l lines: headings and descriptions", function()
    local tox = require("proctor.tasks.sources.tox")
    eq({ tox.line("default environments:") }, {})
    eq({ tox.line("py311 -> run the tests") }, { "py311", "run the tests" })
    eq({ tox.line("lint -> [no description]") }, { "lint" })
    eq({ tox.line("  docs  ") }, { "docs" })
    eq({ tox.line("") }, {})
  end)

  -- :checkhealth proctor in a child Neovim started in `dir` with `bin` first on PATH.
  local function health(dir, bin, trusted)
    local c = H.child({ env = { PATH = bin .. ":" .. vim.env.PATH } })
    local lines = c.lua(
      [[
      local dir, trusted = ...
      vim.cmd("cd " .. vim.fn.fnameescape(dir))
      if trusted then assert(require("proctor.tasks.trust").allow(dir, false)) end
      require("proctor").setup({ discover = { cargo = false } })
      local out, rep = {}, {}
      for _, k in ipairs({ "start", "ok", "info", "warn", "error" }) do
        rep[k] = function(msg) out[#out + 1] = k .. ": " .. msg end
      end
      require("proctor.compat").health = function() return rep end
      require("proctor.health").check()
      return out
    ]],
      dir,
      trusted or false
    )
    c.stop()
    return table.concat(lines, "\n")
  end

  test("runners: :checkhealth proctor says what each source found here, and why not", function()
    local bin = fakebin()
    os.remove(bin .. "/composer") -- composer: not installed
    local dir = project("deno")
    vim.fn.system({ "cp", "-r", root .. "/tests/tasks/taskfile/.", dir })
    vim.fn.system({ "cp", "-r", root .. "/tests/tasks/composer/.", dir })
    write(dir .. "/mise.toml", '[tasks]\nok = "x"\nbad = \n')
    local out = health(dir, bin)
    T.match(out, "ok: deno: 3 tasks %(deno%.jsonc")
    T.match(out, "info: composer: composer is not installed")
    T.match(out, "warn: taskfile: [^\n]*not trusted")
    T.match(out, "error: mise: mise%.toml:3: a value was expected")
    T.match(out, "info: cargo: off")
    T.match(out, "info: make: no GNUmakefile, makefile, Makefile here or above")
    -- trusted: the Taskfile is probed, and says so
    out = health(dir, bin, true)
    T.match(out, "ok: taskfile: 2 tasks")
  end)
end
