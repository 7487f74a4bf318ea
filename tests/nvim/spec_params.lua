-- tests/nvim/spec_params.lua — parameters of a task (|proctor-params|,
-- lua/proctor/tasks/params.lua) on the fixture tests/tasks/params: asked for
-- at launch, checked, substituted into cmd, env and cwd, remembered, given
-- on the command line as key=value.
return function(test, T, H)
  local root = H.root

  local function eq(a, b, msg)
    if type(a) == "table" or type(b) == "table" then return T.eq(T.fmt(a), T.fmt(b), msg) end
    return T.eq(a, b, msg)
  end
  local function p() return require("proctor") end

  -- A private, trusted copy of the fixture (its .proctor.lua too).
  local function project()
    local dir = vim.fn.tempname()
    vim.fn.mkdir(dir, "p")
    vim.fn.system({ "cp", "-r", root .. "/tests/tasks/params/.", dir })
    assert(require("proctor.tasks.trust").allow(dir))
    return dir
  end

  local function slurp(path)
    local f = io.open(path, "r")
    if not f then return nil end
    local s = f:read("*a")
    f:close()
    return s
  end

  local function wait_end(id)
    H.wait(20000, function()
      require("proctor.engine").pump()
      local r = p().record(id)
      return r and require("proctor.engine").TERMINAL[r.state]
    end, "execution " .. id .. " to end")
    return p().record(id)
  end

  -- Run `:Proctor task {line}` with vim.ui.input/select answering from
  -- `answers` (param name -> text; a missing one: the offered value, nil:
  -- leave the prompt). Returns the prompts seen ({ param, offered, kind,
  -- items }), the new execution's record (nil when none started) and the
  -- messages shown.
  local function launch(dir, line, answers)
    local seen = {}
    local oi, os_ = vim.ui.input, vim.ui.select
    local function param_of(prompt) return prompt:match("^[^:]+: ([%w_]+)") end
    vim.ui.input = function(opts, cb)
      local name = param_of(opts.prompt)
      seen[#seen + 1] = { param = name, offered = opts.default, kind = "input" }
      local a = answers and answers[name]
      if a == false then return cb(nil) end
      cb(a or opts.default)
    end
    vim.ui.select = function(items, opts, cb)
      local name = param_of(opts.prompt)
      seen[#seen + 1] = { param = name, offered = items[1], kind = "select", items = items }
      local a = answers and answers[name]
      if a == false then return cb(nil) end
      cb(a or items[1])
    end
    H.clear_notes()
    local before = #p().list()
    local ok, err = pcall(function()
      vim.cmd("cd " .. vim.fn.fnameescape(dir))
      vim.cmd("Proctor task " .. line)
      H.wait(
        20000,
        function() return #p().list() > before or #H.notes > 0 end,
        "a run or a message"
      )
    end)
    vim.ui.input, vim.ui.select = oi, os_
    vim.cmd("cd " .. vim.fn.fnameescape(root))
    if not ok then error(err, 0) end
    local rec = #p().list() > before and p().list()[#p().list()] or nil
    if rec then rec = wait_end(rec.id) end
    return seen, rec, table.concat(H.note_texts(), "\n")
  end

  local function setup() eq(p().setup({ notify = "never", command = { open = false } }), true) end

  test("params: asked for at launch, checked, and put into cmd, env and cwd", function()
    setup()
    local dir = project()
    local out = dir .. "/greeting"
    local seen, rec = launch(dir, "greet", { who = "Ann", mode = "loud", count = "5", out = out })
    local order = {}
    for _, s in ipairs(seen) do
      order[#order + 1] = s.param .. ":" .. s.kind .. ":" .. tostring(s.offered)
    end
    eq(
      order,
      { "count:input:3", "mode:select:plain", "out:input:nil", "who:input:world" },
      "each parameter asked once, by name, offering its default"
    )
    eq(seen[2].items, { "plain", "loud" }, "an enum offers its choices")
    T.ok(rec, "the task started")
    eq(rec.state, "completed")
    eq(slurp(out), "hello Ann|loud|5", "values in argv and env")
    eq(rec.cmd[5], "loud")
    -- cwd: a relative one with a parameter is taken from the project file's directory
    local _, there = launch(dir, "there", {})
    eq(there.cwd:gsub("/$", ""), dir .. "/sub")
    -- an optional parameter left empty is "", a prompt left is no run
    local _, r2 = launch(dir, "opt", { extra = "" })
    eq(r2.cmd, { "echo", "[]" })
    local _, r3, notes = launch(dir, "greet", { out = false })
    eq(r3, nil, "a prompt left: nothing runs")
    T.match(notes, "task greet: canceled")
  end)

  test("params: the last values are remembered per task and offered first", function()
    setup()
    local dir = project()
    local out = dir .. "/g1"
    launch(dir, "greet", { who = "Ann", mode = "loud", count = "7", out = out })
    local seen = launch(dir, "greet", {})
    local offered = {}
    for _, s in ipairs(seen) do
      offered[s.param] = s.offered
    end
    eq(offered, { count = "7", mode = "loud", out = out, who = "Ann" }, "the last values offered")
    eq(seen[2].items, { "loud", "plain" }, "the last choice first")
    -- kept in the state file: an editor that starts later (no memory) sees them
    local params = require("proctor.tasks.params")
    local memory = params._H.memory
    params._H.memory = {}
    local ok, err = pcall(function()
      local key = params.key({ cwd = dir, name = "greet" })
      eq(params.last(key).who, "Ann", "read back from the state file")
      T.ok(
        (slurp(require("proctor.compat").state_dir() .. "/proctor/params") or ""):find(
          '"Ann"',
          1,
          true
        ),
        "the state file holds the value"
      )
      -- another task of the same project keeps its own values
      eq(params.last(params.key({ cwd = dir, name = "opt" })).who, nil)
      -- the bound: past MAX_TASKS tasks, the oldest go
      local file = require("proctor.compat").state_dir() .. "/proctor/params"
      local saved, max = slurp(file), params.MAX_TASKS
      params.MAX_TASKS = 3
      local ok2, err2 = pcall(function()
        params._H.save({
          a = { at = 1, values = { v = "a" } },
          b = { at = 2, values = { v = "b" } },
          c = { at = 3, values = { v = "c" } },
        })
        params.remember("d", { v = "d" })
        params._H.memory = {}
        eq(
          { params.last("a").v, params.last("b").v, params.last("c").v, params.last("d").v },
          { nil, "b", "c", "d" },
          "the oldest went"
        )
      end)
      params.MAX_TASKS = max
      local f = assert(io.open(file, "w"))
      f:write(saved)
      f:close()
      if not ok2 then error(err2, 0) end
    end)
    params._H.memory = memory
    if not ok then error(err, 0) end
    -- a chain member asks nothing: the last values
    os.remove(out)
    local c = require("proctor.tasks").sequence({ "greet" }, { cwd = dir, open = false })
    T.ok(c, "the chain started")
    H.wait(20000, function() return slurp(out) ~= nil end, "the chain's greet wrote its file")
    H.wait(5000, function() return slurp(out) == "hello Ann|loud|7" end, "the last values")
  end)

  test("params: key=value asks nothing; a bad value is refused with its reason", function()
    setup()
    local dir = project()
    local out = dir .. "/g2"
    local seen, rec = launch(dir, ("greet out=%s who='Bo Li' mode=loud"):format(out), {})
    eq(#seen, 0, "key=value: no prompt at all")
    eq(rec.state, "completed")
    eq(slurp(out), "hello Bo Li|loud|3", "given values, else the defaults")
    local _, r1, n1 = launch(dir, "greet out=x mode=shout", {})
    eq(r1, nil, "an enum value not among its choices starts nothing")
    T.match(n1, "param 'mode' must be one of plain, loud, got 'shout'")
    local _, r2, n2 = launch(dir, "greet out=x count=many", {})
    eq(r2, nil)
    T.match(n2, "param 'count' must be a number, got 'many'")
    local _, r3, n3 = launch(project(), "greet who=x", {}) -- a new project: nothing remembered
    eq(r3, nil, "a required parameter without a value, a last value or a default")
    T.match(n3, "param 'out' needs a value")
    local _, r4, n4 = launch(dir, "greet colour=red", {})
    eq(r4, nil)
    T.match(n4, "task greet has no parameter 'colour'")
    local _, r5, n5 = launch(dir, "plain x=1", {})
    eq(r5, nil)
    T.match(n5, "task plain has no parameters")
    -- the picker names a task's parameters
    local fmt = require("proctor.tasks.picker").format
    eq(
      fmt({ name = "greet", source = "project", cwd = dir, params = { who = {}, out = {} } }, dir),
      "greet {out who}  [project]"
    )
    -- completion offers the parameters after the name
    vim.cmd("cd " .. vim.fn.fnameescape(dir))
    local comp = vim.fn.getcompletion("Proctor task greet who=x m", "cmdline")
    vim.cmd("cd " .. vim.fn.fnameescape(root))
    eq(comp, { "mode=" })
  end)

  test("params: a shell string gets one word per value; bad declarations are refused", function()
    setup()
    local dir = project()
    local _, rec = launch(dir, "shell", {})
    eq(rec.cmd, "echo 'a b; touch x' ${param:msg}", "quoted, and the $$ escape")
    T.ok(vim.fn.filereadable(dir .. "/x") == 0, "the value ran no code")
    -- a declaration problem is found at discovery, naming the task and parameter
    local f = assert(io.open(dir .. "/.proctor.lua", "w"))
    f:write([[return { bad = { cmd = "true", params = { e = { type = "enum" } } },
      worse = { cmd = "true", params = { n = { type = "number", default = "x" } } } }]])
    f:close()
    assert(require("proctor.tasks.trust").allow(dir))
    H.clear_notes()
    local got
    p().tasks({ cwd = dir, callback = function(t) got = t end })
    H.wait(10000, function() return got ~= nil end, "discovery")
    T.match(table.concat(H.note_texts(), "\n"), "param '[en]': ")
    -- an undeclared ${param:…} is an error naming it
    local ex, err = require("proctor.tasks").run_task({
      name = "u",
      cmd = { "echo", "${param:nope}" },
      params = { x = { default = "1" } },
    }, { prompt = false })
    eq(ex, nil)
    T.match(err, "'%${param:nope}' names no parameter %(parameters: x%)")
  end)
end
