-- tests/nvim/spec_trust.lua — task discovery never evaluates an untrusted
-- project: make's probe (which expands $(shell …) while reading a Makefile)
-- waits for the directory to be trusted, .proctor.lua for the file; trust
-- given through Neovim's own prompt, :trust or :Proctor trust counts at the
-- next use. Each test drives a child Neovim whose trust databases
-- (XDG_STATE_HOME, XDG_DATA_HOME) are private to it.
return function(test, T, H)
  local root = H.root

  local function eq(a, b, msg)
    if type(a) == "table" or type(b) == "table" then return T.eq(T.fmt(a), T.fmt(b), msg) end
    return T.eq(a, b, msg)
  end

  local function write(path, text)
    local f = assert(io.open(path, "w"))
    f:write(text)
    f:close()
  end

  local function exists(path) return (vim.uv or vim.loop).fs_stat(path) ~= nil end

  -- A project whose Makefile leaves `marker` when make reads it, with a
  -- package.json (a safe source: read, never run).
  local function evil_project()
    local dir = vim.fn.tempname()
    vim.fn.mkdir(dir, "p")
    dir = (vim.uv or vim.loop).fs_realpath(dir)
    local marker = dir .. "/marker"
    write(
      dir .. "/Makefile",
      "X := $(shell touch " .. marker .. ")\nall:\n\t@echo all\nbuild:\n\t@echo build\n"
    )
    write(dir .. "/package.json", '{"scripts": {"lint": "echo lint"}}')
    return dir, marker
  end

  -- A child Neovim with private trust databases, in `dir`; its prompts
  -- (vim.fn.confirm) are recorded and answered with the choice starting with
  -- _G.answer (none: cancelled), its picker (vim.ui.select) records the names.
  local function child(dir, env)
    local state = vim.fn.tempname()
    local c = H.child({
      env = vim.tbl_extend("force", { XDG_STATE_HOME = state, XDG_DATA_HOME = state }, env or {}),
    })
    require("harness").defer(function() vim.fn.delete(state, "rf") end)
    c.lua(
      [[
      _G.prompts = {}
      vim.fn.confirm = function(msg, choices)
        local labels = vim.split((choices or ""):gsub("&", ""), "\n")
        table.insert(_G.prompts, { msg = msg, choices = labels })
        for i, l in ipairs(labels) do
          if _G.answer and l:lower():find("^" .. _G.answer) then return i end
        end
        return 0
      end
      _G.picked = nil
      vim.ui.select = function(items, opts, on_choice)
        local n = {}
        for _, t in ipairs(items) do n[#n + 1] = t.name end
        table.sort(n)
        _G.picked = n
        on_choice(nil)
      end
      require("proctor").setup({ notify = "never" })
      vim.cmd("cd " .. vim.fn.fnameescape(...))
    ]],
      dir
    )
    return c
  end

  -- :Proctor run without a command (the picker): the task names it offered
  -- ({} when it said there are none).
  local function picker(c)
    c.lua("_G.picked = nil; _G.notes_before = #_G.notes")
    c.cmd("Proctor run")
    c.wait(
      20000,
      [[_G.picked ~= nil or (#_G.notes > _G.notes_before
      and tostring(_G.notes[#_G.notes]):find("no tasks found") ~= nil)]],
      "the picker"
    )
    return c.lua("return _G.picked or {}")
  end

  local function notes_matching(c, pat)
    return c.lua(
      [[
      local n = 0
      for _, m in ipairs(_G.notes) do if tostring(m):find(...) then n = n + 1 end end
      return n
    ]],
      pat
    )
  end

  test(
    "trust: an untrusted Makefile is never evaluated: <Tab>, the picker and proctor.tasks{} (then :Proctor trust)",
    function()
      local dir, marker = evil_project()
      local c = child(dir)
      -- <Tab>: what the safe sources know, no prompt, no probe
      local comp = c.lua([[return vim.fn.getcompletion("Proctor task ", "cmdline")]])
      T.ok(vim.tbl_contains(comp, "npm run lint"), "completion: " .. table.concat(comp, ","))
      for _, w in ipairs(comp) do
        T.ok(not w:find("^make"), "completion offered " .. w)
      end
      eq(c.lua("return #_G.prompts"), 0, "completion asked")
      -- the picker: no make targets, no prompt, one note saying why and how
      eq(picker(c), { "npm run lint" })
      eq(picker(c), { "npm run lint" })
      eq(c.lua("return #_G.prompts"), 0, "the picker asked")
      eq(
        notes_matching(c, "make tasks are not listed: .* is not trusted.*:Proctor trust"),
        1,
        "one note on why: " .. table.concat(c.lua("return _G.notes"), " | ")
      )
      -- proctor.tasks{}: asks (saying that proctor asks, and why); refused
      local n = c.lua(
        [[
        local got
        require("proctor").tasks({ cwd = ..., callback = function(t) got = t end })
        vim.wait(20000, function() return got ~= nil end)
        local n = {}
        for _, t in ipairs(got) do n[#n + 1] = t.name end
        return n
      ]],
        dir
      )
      eq(n, { "npm run lint" })
      eq(c.lua("return #_G.prompts"), 1, "proctor.tasks{} asks once")
      T.match(c.lua("return _G.prompts[1].msg"), "^proctor: to list the tasks of .*`make %-pRrq :`")
      eq(exists(marker), false, "make read the untrusted Makefile")
      -- the user trusts the directory: the next <Tab> and the picker have its targets
      c.cmd("Proctor trust")
      c.lua([[require("proctor.tasks").COMPLETE_WAIT_MS = 20000]])
      comp = c.lua([[return vim.fn.getcompletion("Proctor task make ", "cmdline")]])
      T.ok(vim.tbl_contains(comp, "build"), "completion once trusted: " .. table.concat(comp, ","))
      eq(exists(marker), true, "make ran once trusted")
      eq(picker(c), { "make all", "make build", "npm run lint" })
      eq(c.lua("return #_G.prompts"), 1, "asked again after :Proctor trust")
      c.stop()
    end
  )

  test(
    "trust: :Proctor trust keeps the directory in Neovim's own database where it has directory trust",
    function()
      local dir, marker = evil_project()
      local c = child(dir)
      local has_dir_trust = c.lua([[return require("proctor.compat").dir_trust()]])
      eq(has_dir_trust, vim.fn.has("nvim-0.12") == 1, "directory trust detected on this Neovim")
      eq(c.lua("return (require('proctor').trust(...))", dir), dir)
      if has_dir_trust then
        eq(
          c.lua(
            [[
        local orig = vim.fn.confirm
        vim.fn.confirm = function() return 1 end
        local r = vim.secure.read(...)
        vim.fn.confirm = orig
        return r
      ]],
            dir
          ),
          true,
          "vim.secure.read() of the directory"
        )
        -- a directory the user trusted through Neovim (not proctor) counts too
        local other, marker2 = evil_project()
        c.lua([[vim.secure.trust({ action = "allow", path = ... })]], other)
        c.lua(
          [[_G.got = nil; require("proctor").tasks({ cwd = ..., prompt = false, callback = function(t) _G.got = t end })]],
          other
        )
        c.wait(20000, "_G.got ~= nil")
        eq(exists(marker2), true, "a directory trusted with vim.secure.trust() was not probed")
      else
        T.ok(
          vim.tbl_contains(
            vim.fn.readfile(
              c.lua([[return require("proctor.compat").state_dir()]]) .. "/proctor/trust"
            ),
            "directory " .. dir
          ),
          "proctor's own trust file"
        )
      end
      eq(c.lua("return #_G.prompts"), 0)
      c.lua(
        [[_G.got = nil; require("proctor").tasks({ cwd = ..., prompt = false, callback = function(t) _G.got = t end })]],
        dir
      )
      c.wait(20000, "_G.got ~= nil")
      eq(exists(marker), true)
      c.stop()
    end
  )

  test("trust: the first <Tab> after start-up waits for the make probe it started", function()
    local dir = evil_project()
    local c = child(dir)
    c.lua("require('proctor').trust(...)", dir)
    -- the bound is 200 ms; a loaded machine may need longer for the first probe
    c.lua([[require("proctor.tasks").COMPLETE_WAIT_MS = 20000]])
    local comp = c.lua([[return vim.fn.getcompletion("Proctor task make ", "cmdline")]])
    T.ok(vim.tbl_contains(comp, "build"), "the first <Tab>: " .. table.concat(comp, ","))
    -- an untrusted directory: nothing to wait for, at once
    local other = evil_project()
    c.cmd("cd " .. vim.fn.fnameescape(other))
    comp = c.lua([[return vim.fn.getcompletion("Proctor task ", "cmdline")]])
    eq(comp, { "npm run lint" })
    c.stop()
  end)

  test(
    "trust: .proctor.lua: the prompt says proctor asks; view, :trust, and the next :Proctor run lists its tasks",
    function()
      local dir = vim.fn.tempname()
      vim.fn.mkdir(dir, "p")
      dir = (vim.uv or vim.loop).fs_realpath(dir)
      vim.fn.system({ "cp", "-r", root .. "/tests/tasks/project/.", dir })
      local mark = vim.fn.tempname()
      local c = child(dir, { PROCTOR_TEST_MARK = mark })
      c.lua("_G.answer = 'view'")
      eq(picker(c), {}, "nothing of the untrusted file")
      eq(c.lua("return #_G.prompts"), 1)
      local prompt = c.lua("return _G.prompts[1]")
      T.match(
        prompt.msg,
        "^proctor: " .. vim.pesc(dir .. "/.proctor.lua") .. " defines this project's tasks"
      )
      eq(exists(mark), false, "the untrusted file ran")
      if vim.tbl_contains(prompt.choices, "view") then
        -- Neovim's prompt (0.9+): view the file, then :trust it
        eq(
          c.lua("return vim.api.nvim_buf_get_name(0)"),
          dir .. "/.proctor.lua",
          "the file is shown"
        )
        c.cmd("trust")
      else
        -- proctor's own prompt (0.7): the user says no, then trusts the project
        c.cmd("Proctor trust")
      end
      eq(picker(c), { "count", "hello" }, "the tasks at the next :Proctor run")
      eq(c.lua("return #_G.prompts"), 1, "asked again")
      eq(vim.fn.readfile(mark), { "ran" })
      c.stop()
    end
  )
end
