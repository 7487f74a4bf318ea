-- tests/nvim/spec_commands.lua — :Proctor subcommands, completion, bad arguments, list view.
return function(test, T, H)
  local api = vim.api
  local p = require("proctor")
  local engine = require("proctor.engine")
  local cmds = require("proctor.commands")

  -- Run an Ex command; errors from vim.notify are captured by the helpers.
  local function ex(s)
    H.clear_notes()
    local ok, err = pcall(vim.cmd, s)
    if not ok then error("command raised: " .. tostring(err), 2) end
    return H.note_texts()
  end
  local function last_id() return p.list()[#p.list()].id end

  test(
    ":Proctor run with options, open, input, cancel, cancel!, rerun, delete, purge, info",
    function()
      p.setup({ notify = "never", engine = { kill_grace_ms = 500 } }) -- console.enter: its default
      vim.cmd("silent! only!")
      local dir = vim.fn.tempname()
      vim.fn.mkdir(dir, "p")
      ex("Proctor run -cwd=" .. dir .. " -label=pwd -nopty pwd; exit 0")
      local id = last_id()
      local rec = p.record(id)
      T.eq(rec.label, "pwd")
      T.eq(rec.pty, false)
      T.eq(rec.cwd, dir .. "/")
      -- the console opens in a split; the cursor stays where it was (console.enter)
      T.ok(
        not api.nvim_buf_get_name(0):find("^proctor://"),
        "the cursor stayed in the source buffer"
      )
      local pbuf = require("proctor.console").get(id).buf
      T.match(api.nvim_buf_get_name(pbuf), "^proctor://" .. id .. "/pwd$")
      T.eq(#vim.fn.win_findbuf(pbuf), 1, "shown")
      H.wait_final(pbuf)
      T.ok(
        H.has_line(pbuf, "^" .. vim.pesc(dir) .. "$"),
        "pwd printed the cwd: " .. table.concat(H.lines(pbuf), "|")
      )
      -- default: pty; -timeout
      ex("Proctor run -timeout=200ms -bg sleep 5")
      id = last_id()
      T.eq(p.record(id).pty, true)
      T.ok(not api.nvim_buf_get_name(0):find("proctor://" .. id), "-bg opens no console")
      T.eq(T.ok(p.get(id)):wait(3000).state, "timed_out")
      -- input with and without an id (the most recent execution)
      vim.cmd("enew")
      ex('Proctor run -bg -nopty read a; read b; echo "[$a][$b]"')
      id = last_id()
      ex("Proctor input " .. id .. " first words")
      -- no id and no console under the cursor: a picker of the live executions
      local offered
      local orig_select = vim.ui.select
      vim.ui.select = function(items, o, choose)
        offered = items
        choose(items[1])
      end
      ex("Proctor input second")
      vim.ui.select = orig_select
      T.eq(offered and offered[1].id, id, "the picker offered the live execution")
      T.eq(p.get(id):wait(3000).state, "completed")
      T.eq(vim.trim((engine.current():read(id, "stdout", 0, 100))), "[first words][second]")
      -- open: the console under the cursor is the default id
      ex("Proctor open " .. id)
      T.eq(require("proctor.console").id_of_buf(0), id)
      -- cancel / cancel! (default id from the console under the cursor); a
      -- grace of 120 s: ending within 30 s is the kill, not the grace
      local live = p.run({
        cmd = "trap '' TERM; echo ready; sleep 30",
        pty = false,
        kill_grace_ms = 120000,
      }).id
      p.open(live)
      T.eq(require("proctor.console").id_of_buf(0), live)
      H.wait(
        10000,
        function() return (engine.current():read(live, "stdout", 0, 100) or ""):find("ready") ~= nil end,
        "the TERM trap is set"
      )
      local n = ex("Proctor cancel")
      T.match(n[1], "canceling execution " .. live)
      ex("Proctor cancel! " .. live)
      local rec_live = p.get(live):wait(30000)
      T.eq(rec_live.state, "canceled")
      T.eq(rec_live.signal, "SIGKILL", "cancel! kills at once")
      n = ex("Proctor cancel " .. live)
      T.match(n[1], "already ended")
      -- rerun: same command, new id, console opened
      ex("Proctor rerun " .. id)
      local new = last_id()
      T.ok(new > live)
      T.eq(p.record(new).cmd, p.record(id).cmd)
      T.eq(require("proctor.console").id_of_buf(0), new)
      p.input(new, "x\ny\n")
      p.get(new):wait(3000)
      -- delete: running -> clear message; finished -> gone, console wiped
      ex("Proctor run -bg sleep 30")
      local busy = last_id()
      n = ex("Proctor delete " .. busy)
      T.match(n[1], "^%(proctor%) execution " .. busy .. " is still running")
      p.cancel(busy, true)
      p.get(busy):wait(3000)
      local cbuf = require("proctor.console").get(new).buf
      ex("Proctor delete " .. new)
      T.eq(p.record(new), nil)
      T.eq(api.nvim_buf_is_valid(cbuf), false, "console buffer wiped")
      -- purge
      n = ex("Proctor purge")
      T.match(n[1], "purged %d+ finished executions")
      T.eq(#p.list(), 0)
      -- info
      local out = vim.fn.execute("Proctor info")
      T.match(out, "core:%s+proctor%.core %d+%.%d+")
      T.match(out, "engine:%s+running")
      T.match(out, "socket:")
    end
  )

  test(":Proctor completion of subcommands, ids and run options", function()
    local comp = function(line) return cmds.complete(line:match("(%S*)$"), line, #line) end
    T.eq(table.concat(comp("Proctor "), ","), table.concat(cmds.subcommands(), ","))
    T.eq(table.concat(comp("Proctor ca"), ","), "cancel,cancel!")
    T.eq(table.concat(comp("Proctor r"), ","), "run,rerun")
    local done = p.run({ cmd = "true" })
    done:wait(3000)
    local live = p.run({ cmd = { "sleep", "30" } })
    H.wait(3000, function() return engine.state[live.id] == "running" end)
    local ids = comp("Proctor open ")
    T.eq(ids[1], live.id .. ":sleep_30", "most recent first, with a hint of its command")
    T.ok(vim.tbl_contains(ids, done.id .. ":true"))
    T.eq(
      table.concat(comp("Proctor cancel "), ","),
      live.id .. ":sleep_30",
      "cancel completes live ids"
    )
    T.ok(
      not vim.tbl_contains(comp("Proctor delete "), live.id .. ":sleep_30"),
      "delete completes finished ids"
    )
    T.ok(vim.tbl_contains(comp("Proctor delete "), done.id .. ":true"))
    T.eq(table.concat(comp("Proctor run -l"), ","), "-label=")
    T.ok(vim.tbl_contains(comp("Proctor run -"), "-nopty"))
    T.ok(vim.tbl_contains(comp("Proctor run -bg ech"), "echo"), "shell commands")
    T.eq(#comp("Proctor purge "), 0)
    -- through Neovim's own completion machinery
    T.ok(vim.tbl_contains(vim.fn.getcompletion("Proctor li", "cmdline"), "list"))
    live:cancel(true)
    live:wait(3000)
  end)

  test("bad arguments and unknown ids: one (proctor) message, no traceback", function()
    local cases = {
      { "Proctor bogus", "unknown subcommand 'bogus'" },
      { "Proctor open 99999", "no such execution 99999" },
      { "Proctor open abc", "no execution labelled 'abc'" },
      { "Proctor cancel #99999", "no such execution 99999" },
      { "Proctor cancel! 1x", "no execution labelled '1x'" },
      { "Proctor open a b", "not an execution id or label: 'a b'" },
      { "Proctor delete 424242", "no such execution 424242" },
      { "Proctor input 424242 hi", "no such execution 424242" },
      { "Proctor run -cwd=/nonexistent/x", "no such directory" }, -- no command: a task picker (spec_tasks)
      { "Proctor run -bogus ls", "unknown option '%-bogus'" },
      { "Proctor run -timeout=soon ls", "bad timeout 'soon'" },
      { "Proctor run -cwd=/nonexistent/x ls", "no such directory" },
      { "Proctor text 424242", "no such execution" },
      { "Proctor qf 424242", "no such execution" },
      { "Proctor rerun 424242", "no such execution" },
      { "Proctor purge now", "purge takes no arguments" },
    }
    for _, c in ipairs(cases) do
      local n = ex(c[1])
      T.eq(#n, 1, c[1] .. ": messages " .. table.concat(n, " | "))
      T.match(n[1], "^%(proctor%) ", c[1])
      T.match(n[1], c[2], c[1])
      T.ok(not n[1]:find("traceback") and not n[1]:find("%.lua:%d+"), c[1] .. ": " .. n[1])
      T.eq(H.notes[1].level, vim.log.levels.ERROR, c[1])
    end
    -- an internal error is still one message (simulated)
    local info = require("proctor.actions").actions.info
    local orig = info.run
    info.run = function() error("boom") end
    local n = ex("Proctor info")
    info.run = orig
    T.eq(#n, 1)
    T.match(n[1], "^%(proctor%) internal error: .*boom")
    T.ok(not n[1]:find("\n"), "one line")
  end)

  test("list view shows keys and executions, refreshes, and its keys act", function()
    vim.cmd("silent! only!")
    p.purge()
    local a = p.run({ cmd = { "sleep", "30" }, label = "sleeper", kill_grace_ms = 120000 })
    local b = p.run({ cmd = "exit 7", label = "seven" })
    b:wait(3000)
    H.wait(3000, function() return engine.state[a.id] == "running" end)
    local buf = select(1, require("proctor.list").open())
    T.eq(api.nvim_buf_get_name(buf), "proctor://list")
    local head = api.nvim_buf_get_lines(buf, 0, 1, false)[1]
    T.match(head, "^proctor — %d+ executions · s next filter · %? keys$")
    local function line_of(id)
      for i, l in ipairs(api.nvim_buf_get_lines(buf, 0, -1, false)) do
        if l:find("^#" .. id .. " ") then return i, l end
      end
    end
    local _, la = line_of(a.id)
    T.match(la, "running")
    T.match(la, "sleeper")
    T.match(la, "nvim")
    local _, lb = line_of(b.id)
    T.match(lb, "failed%s+7 ")
    local function press(id, key)
      api.nvim_win_set_cursor(0, { line_of(id), 0 })
      api.nvim_feedkeys(api.nvim_replace_termcodes(key, true, false, true), "x", false)
    end
    -- i: input through vim.ui.input
    local c = p.run({ cmd = 'read x; echo "got $x"', label = "asker" })
    H.wait(3000, function() return line_of(c.id) ~= nil end, "list refreshed on a new execution")
    local orig = vim.ui.input
    vim.ui.input = function(_, on_confirm) on_confirm("yes") end
    press(c.id, "i")
    vim.ui.input = orig
    T.eq(c:wait(3000).state, "completed")
    T.match(engine.current():read(c.id, "stdout", 0, 100), "got yes")
    -- c: cancel (SIGTERM: `sleep` dies of it)
    press(a.id, "c")
    local ra = a:wait(30000)
    T.eq(ra.state, "canceled")
    T.eq(ra.signal, "SIGTERM", "c cancels, it does not kill")
    H.wait(
      3000,
      function() return (select(2, line_of(a.id)) or ""):find("canceled") end,
      "refresh after cancel"
    )
    -- r: rerun (a new execution appears)
    local before = #p.list()
    press(b.id, "r")
    H.wait(3000, function() return #p.list() == before + 1 end)
    vim.cmd("silent! only!")
    require("proctor.list").open()
    -- dd: delete
    press(b.id, "dd")
    T.eq(p.record(b.id), nil)
    H.wait(3000, function() return line_of(b.id) == nil end)
    -- <CR>: open the console
    press(c.id, "<CR>")
    T.eq(require("proctor.console").id_of_buf(0), c.id)
    vim.cmd("silent! only!")
    require("proctor.list").open()
    -- C: kill. It ignores TERM and its grace is 120 s: only a kill ends it within 30 s.
    local d =
      p.run({ cmd = "trap '' TERM; echo ready; sleep 30", pty = false, kill_grace_ms = 120000 })
    H.wait(
      10000,
      function()
        return line_of(d.id)
          and (engine.current():read(d.id, "stdout", 0, 100) or ""):find("ready") ~= nil
      end,
      "the TERM trap is set"
    )
    press(d.id, "C")
    local rd = d:wait(30000)
    T.eq(
      rd and rd.state,
      "canceled",
      "C did not end it within 30 s (a cancel waits for the 120 s grace)"
    )
    T.eq(rd.signal, "SIGKILL")
    -- P: purge; q: close
    for _, r in ipairs(p.list()) do
      if not engine.TERMINAL[r.state] then p.get(r.id):wait(3000) end
    end
    local orig_confirm = vim.fn.confirm
    local asked
    vim.fn.confirm = function(q)
      asked = q
      return 1
    end
    press(c.id, "P")
    vim.fn.confirm = orig_confirm
    T.match(asked, "^Delete %d+ finished executions%?$")
    T.eq(#p.list(), 0)
    H.wait(
      3000,
      function() return api.nvim_buf_get_lines(buf, 2, 3, false)[1]:find("no executions") end
    )
    vim.cmd("split")
    api.nvim_set_current_buf(buf)
    local wins = #api.nvim_list_wins()
    api.nvim_feedkeys("q", "x", false)
    T.eq(#api.nvim_list_wins(), wins - 1, "q closed the window")
  end)

  test(":checkhealth proctor reports OK", function()
    vim.cmd("silent checkhealth proctor")
    local text = table.concat(api.nvim_buf_get_lines(0, 0, -1, false), "\n")
    T.ok(not text:find("ERROR"), text)
    T.match(text, "OK.*proctor%.core")
    T.match(text, "shepherd starts")
    T.match(text, "socket directory usable")
    vim.cmd("bwipeout!")
  end)

  test(
    "the generated help (config block, key tables, actions, start spec fields) and types.lua match the code",
    function()
      local G = dofile(H.root .. "/scripts/gendoc.lua")
      local diffs = G.check()
      local msg = {}
      for _, d in ipairs(diffs) do
        msg[#msg + 1] = ("%s:%d: want %q, have %q (run make doc)"):format(
          d.path,
          d.line,
          tostring(d.want),
          tostring(d.have)
        )
      end
      T.eq(#diffs, 0, table.concat(msg, "\n"))
      -- the check sees a change of the schema, of a key map and of an action
      local config = require("proctor.config")
      local e = config.by_key["console.size"]
      local saved = e.description
      e.description = "changed"
      local changed = G.check()
      e.description = saved
      T.eq(#changed, 2, "doc and types differ from a changed schema")
      config.defaults.keymaps.list["x"] = "kill"
      changed = G.check()
      config.defaults.keymaps.list["x"] = nil
      T.eq(#changed, 1, "the list's key table differs")
      local cancel = require("proctor.actions").actions.cancel
      saved = cancel.desc
      cancel.desc = "changed"
      changed = G.check()
      cancel.desc = saved
      T.eq(#changed, 1, "the key tables differ")
      -- the start spec's table is the core's own description (PR_SPEC_FIELDS)
      local f = require("proctor.core").spec_fields[2]
      saved = f.help
      f.help = "changed"
      changed = G.check()
      f.help = saved
      T.eq(#changed, 1, "the start spec's fields differ")
      T.eq(#G.check(), 0)
    end
  )

  test("helptags doc runs clean", function()
    local tmp = vim.fn.tempname()
    vim.fn.mkdir(tmp, "p")
    vim.fn.writefile(vim.fn.readfile(H.root .. "/doc/proctor.txt"), tmp .. "/proctor.txt")
    local out = vim.fn.execute("helptags " .. vim.fn.fnameescape(tmp))
    T.eq(out, "")
    local tags = table.concat(vim.fn.readfile(tmp .. "/tags"), "\n")
    for _, tag in ipairs({
      "proctor-core",
      "proctor-rpc",
      "proctor-config",
      ":Proctor",
      "proctor.run()",
    }) do
      T.ok(tags:find(vim.pesc(tag) .. "\t"), "tag " .. tag)
    end
  end)

  test(
    "make demo: scripts/demo.lua runs the build, takes a typed answer, opens the list view",
    function()
      local c = H.child({ init = H.root .. "/scripts/demo.lua" })
      local ok, err = pcall(function()
        c.lua([[
        _G.buf_named = function(pat)
          for _, b in ipairs(vim.api.nvim_list_bufs()) do
            if vim.api.nvim_buf_get_name(b):find(pat) then return b end
          end
        end
        _G.last_line = function(pat)
          local b = buf_named(pat)
          local l = b and lines(b) or {}
          return l[#l] or ""
        end
      ]])
        -- The build is 63 redraws of a 30 ms step: about 2 s on an idle machine, much
        -- more when the machine is loaded; the bound only catches a build that never ends.
        c.wait(
          60000,
          "last_line('proctor://%d+/build$'):find('^%[proctor%] completed') ~= nil",
          "the build console ends completed"
        )
        c.wait(
          3000,
          "has_line(buf_named('proctor://%d+/build$'), 'all steps passed')",
          "the build's last line"
        )
        c.wait(
          5000,
          "buf_named('proctor://%d+/prompt$') and has_line(buf_named('proctor://%d+/prompt$'), 'What is your name%?')",
          "the prompt"
        )
        c.wait(3000, "vim.api.nvim_get_mode().mode == 't'", "Terminal mode in the prompt's console")
        c.input("Ada<CR>")
        c.wait(
          5000,
          "has_line(buf_named('proctor://%d+/prompt$'), 'Hello, Ada!')",
          "the answer reached the process"
        )
        c.wait(5000, "vim.bo.filetype == 'proctor-list'", "the list view opens")
        c.wait(3000, "has_line(0, 'build') and has_line(0, 'prompt')", "both executions are listed")
        T.eq(
          c.lua(
            "return _G.notes and #vim.tbl_filter(function(n) return tostring(n):find('internal error') "
              .. "or tostring(n):find('E%d+:') or tostring(n):find('failed') end, _G.notes) or 0"
          ),
          0,
          "no error notifications"
        )
      end)
      c.stop()
      if not ok then error(err, 0) end
    end
  )
end
