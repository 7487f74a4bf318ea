-- tests/nvim/spec_everyday.lua — everyday use of the Neovim layer: the
-- environment of a PTY console, where the cursor and Terminal mode go, the
-- Lua API as easy as vim.system (errors raised, wait interrupted, output,
-- text, notify), `%` typed in a console, notifications and the list's text.
-- Where a real input loop matters (Terminal mode, CTRL-C) a child Neovim is
-- driven with nvim_input.
return function(test, T, H)
  local api = vim.api
  local p = require("proctor")
  local engine = require("proctor.engine")
  local console = require("proctor.console")
  local list = require("proctor.list")

  local function with_child(fn, opts)
    local c = H.child(opts)
    local ok, err = pcall(fn, c)
    c.stop()
    if not ok then error(err, 0) end
  end
  local function reset_layout()
    pcall(vim.cmd, "silent! tabonly!")
    pcall(vim.cmd, "silent! only!")
    for _, w in ipairs(api.nvim_list_wins()) do
      if api.nvim_win_get_config(w).relative ~= "" then pcall(api.nvim_win_close, w, true) end
    end
    vim.cmd("enew")
  end
  -- Everything the engine keeps of a stream (read through the core, so these
  -- tests do not depend on the API they check).
  local function kept(id, stream) return (engine.current():read(id, stream, 0)) or "" end
  local function tmpdir()
    local d = vim.fn.tempname()
    vim.fn.mkdir(d, "p")
    require("harness").defer(function() vim.fn.delete(d, "rf") end)
    return d
  end
  local function notes_with(pat)
    return vim.tbl_filter(function(n) return tostring(n.msg):find(pat) ~= nil end, H.notes)
  end

  -- 3. The environment of a PTY console ----------------------------------------------------

  test(
    "everyday: a PTY console gets :terminal's environment (no VIM, VIMRUNTIME; NVIM = v:servername)",
    function()
      local saved = vim.env.VIM
      vim.env.VIM = vim.env.VIM or "/usr/share/nvim"
      require("harness").defer(function() vim.env.VIM = saved end)
      T.ok(
        vim.env.VIMRUNTIME and vim.env.VIMRUNTIME ~= "",
        "Neovim sets VIMRUNTIME in its own environment"
      )
      local env_of = function(spec)
        local ex = p.run(spec)
        T.ok(ex:wait(10000), "ended")
        local seen = {}
        local rec = p.record(ex.id)
        for line in kept(ex.id, rec.pty and "pty" or "stdout"):gmatch("[^\r\n]+") do
          local k, v = line:match("^([%w_]+)=(.*)$")
          if k then seen[k] = v end
        end
        return seen
      end
      local env = env_of({ cmd = { "env" }, pty = true })
      T.eq(env.VIM, nil, "VIM left out")
      T.eq(env.VIMRUNTIME, nil, "VIMRUNTIME left out")
      T.ok(vim.v.servername ~= "", "a server")
      T.eq(env.NVIM, vim.v.servername, "NVIM is this Neovim's server")
      T.eq(env.TERM, "xterm-256color")
      T.ok(env.PATH and env.PATH ~= "", "the rest is inherited")
      -- env_allow naming them: still left out; the spec's own env wins
      env = env_of({
        cmd = { "env" },
        pty = true,
        env_allow = { "PATH", "VIMRUNTIME" },
        env = { NVIM = "mine" },
      })
      T.eq(env.VIMRUNTIME, nil, "VIMRUNTIME left out under env_allow")
      T.eq(env.NVIM, "mine", "the spec's env wins")
      T.eq(env.HOME, nil, "env_allow still applies")
      -- a pipe execution is no console a program treats as a terminal: unchanged
      env = env_of({ cmd = { "env" }, pty = false })
      T.eq(env.VIMRUNTIME, vim.env.VIMRUNTIME, "a pipe execution inherits VIMRUNTIME")
    end
  )

  test(
    "everyday: with no server, a PTY console starts one for NVIM, as :terminal does (0.9+)",
    function()
      with_child(function(c)
        c.lua([[
        for _, addr in ipairs(vim.fn.serverlist()) do vim.fn.serverstop(addr) end
        require("proctor").setup({ notify = "never" })
      ]])
        T.eq(c.lua("return vim.v.servername"), "", "no server left")
        local out = c.lua([[
        local ex = require("proctor").run({ cmd = { "sh", "-c", "echo NVIM=$NVIM" }, pty = true })
        ex:wait(10000)
        return (require("proctor.engine").current():read(ex.id, "pty", 0))
      ]])
        local addr = c.lua("return vim.v.servername")
        T.ok(addr ~= "", "a server was started")
        T.match(out, "NVIM=" .. vim.pesc(addr))
      end)
    end
  )

  -- 6. Focus and Terminal mode ------------------------------------------------------------

  test(
    "everyday: a PTY console opened with focus starts in Terminal mode: Alice<CR> reaches read",
    function()
      with_child(function(c)
        c.lua([[
        local p = require("proctor")
        p.setup({ notify = "never" })
        _G.ex = p.run({ cmd = { "sh", "-c", "printf 'name? '; read x; echo got=$x" }, pty = true,
          open = { enter = true } })
      ]])
        c.wait(5000, "has_line(0, 'name%?')", "the prompt")
        T.eq(c.lua("return vim.api.nvim_get_mode().mode"), "t", "Terminal mode")
        c.input("Alice<CR>")
        c.wait(5000, "require('proctor.engine').is_done(_G.ex.id)", "ended")
        local out = c.lua("return (require('proctor.engine').current():read(_G.ex.id, 'pty', 0))")
        T.match(out, "got=Alice", "every letter reached the process")
      end)
    end
  )

  test(
    "everyday: :Proctor run leaves the cursor in the source buffer; :Proctor open enters (Terminal mode)",
    function()
      local dir = tmpdir()
      with_child(function(c)
        c.lua("require('proctor').setup({ notify = 'never' })")
        c.cmd("edit " .. dir .. "/main.c")
        local src = c.lua("return vim.api.nvim_get_current_buf()")
        c.cmd("Proctor run sleep 30")
        local id = c.lua("return require('proctor').list()[#require('proctor').list()].id")
        c.wait(5000, "require('proctor.engine').state[...] == 'running'", "running", id)
        T.eq(
          c.lua("return vim.api.nvim_get_current_buf()"),
          src,
          "the cursor stayed in the source buffer"
        )
        T.eq(
          c.lua("return #require('proctor.console').windows(...)", id),
          1,
          "the console is shown"
        )
        T.eq(c.lua("return vim.api.nvim_get_mode().mode"), "n")
        c.cmd("Proctor open " .. id)
        T.eq(
          c.lua("return require('proctor.console').id_of_buf(0)"),
          id,
          ":Proctor open enters the console"
        )
        c.wait(3000, "vim.api.nvim_get_mode().mode == 't'", "Terminal mode in a live PTY console")
        c.input("<C-\\><C-n>")
        c.lua("require('proctor').cancel(...)", id)
        c.wait(5000, "require('proctor.engine').is_done(...)", "canceled", id)
        -- console.enter = true: a run takes the cursor; start_insert = false: Normal mode
        c.lua(
          "require('proctor').setup({ notify = 'never', console = { enter = true, start_insert = false } })"
        )
        c.cmd("wincmd p")
        c.cmd("Proctor run sleep 30")
        local id2 = c.lua("return require('proctor').list()[#require('proctor').list()].id")
        T.eq(c.lua("return require('proctor.console').id_of_buf(0)"), id2, "console.enter = true")
        T.match(c.lua("return vim.api.nvim_get_mode().mode"), "^n", "start_insert = false")
        c.lua("require('proctor').cancel(...)", id2)
        c.wait(5000, "require('proctor.engine').is_done(...)", "canceled", id2)
      end)
    end
  )

  -- 7. The Lua API ----------------------------------------------------------------------

  test(
    "everyday: run() raises on a bad spec naming the field, without the C binding's words",
    function()
      local cases = {
        {
          { cmd = "true", timeout_ms = "5s" },
          'timeout_ms must be an integer %(milliseconds%), got "5s"',
        },
        { { cmd = 42 }, "cmd must be a string" },
        { { cmd = {} }, "cmd list is empty" },
        { { cmd = "true", pty = "yes" }, 'pty must be a boolean, got "yes"' },
        { { cmd = "true", cols = 1.5, pty = true }, "cols must be an integer" },
        { { cmd = "true", env = { A = true } }, "env must be a table of NAME = value" },
        { { cmd = "true", colour = 1 }, 'unknown field "colour"' },
        { { cmd = "true", cwd = "/nonexistent/everyday" }, "cwd: no such directory" },
        { { cwd = "/" }, "cmd is missing" },
        { 7, "expects a table or a string" },
      }
      for _, case in ipairs(cases) do
        local ok, err = pcall(p.run, case[1])
        T.eq(ok, false, "raises: " .. case[2])
        T.match(tostring(err), case[2])
        T.eq(
          tostring(err):find("bad argument", 1, true),
          nil,
          "no C binding text: " .. tostring(err)
        )
        T.match(tostring(err), "proctor%.run: ")
      end
      -- a command that cannot be spawned is an execution that failed, not an error
      local ex = p.run({ cmd = { "/nonexistent/everyday-program" } })
      T.ok(ex and ex.id, "an execution")
      local rec = ex:wait(10000)
      T.eq(rec.state, "failed")
    end
  )

  test("everyday: ex:wait() interrupted with CTRL-C says interrupted", function()
    with_child(function(c)
      c.lua("require('proctor').setup({ notify = 'never' })")
      c.input(
        ":lua local ex = require('proctor').run('sleep 30'); _G.ID = ex.id; "
          .. "local r, e, n = ex:wait(); _G.R = { rec = r, err = e, name = n }<CR>"
      )
      c.wait(
        5000,
        "_G.ID and require('proctor.engine').state[_G.ID] == 'running'",
        "waiting on a running one"
      )
      c.input("<C-c>")
      c.wait(5000, "_G.R ~= nil", "wait() returned")
      local r = c.lua("return _G.R")
      T.eq(r.name, "EINTR")
      T.match(r.err, "interrupted")
      T.eq(c.lua("return require('proctor.engine').is_done(_G.ID)"), false, "the execution runs on")
      c.lua("require('proctor').cancel(_G.ID)")
    end)
  end)

  test(
    "everyday: ex:output() and run{ text = true }:wait() give code, stdout, stderr in one line",
    function()
      local r = p.run({ cmd = { "sh", "-c", "echo out; echo err >&2; exit 3" }, text = true })
        :wait(10000)
      T.eq(r.code, 3)
      T.eq(r.stdout, "out\n")
      T.eq(r.stderr, "err\n")
      local ex = p.run({ cmd = { "sh", "-c", "echo one; echo two >&2" } })
      local plain = ex:wait(10000)
      T.eq(plain.stdout, nil, "without text: the record only")
      T.eq(ex:output(), "one\n")
      T.eq(ex:output("stderr"), "two\n")
      T.eq(select(2, ex:output("stdout")), 0, "nothing dropped")
      r = p.run({ cmd = { "sh", "-c", "echo hi" }, pty = true, text = true }):wait(10000)
      T.eq(r.code, 0)
      T.eq(r.stdout, "hi\n", "a PTY: its one stream, CRLF as LF")
      T.eq(r.stderr, "")
      T.eq(pcall(ex.output, ex, "bogus"), false, "a bad stream raises")
    end
  )

  test(
    "everyday: run{ notify = false } and notify in a task definition keep an ending quiet",
    function()
      p.setup({ notify = "always" })
      require("harness").defer(function() p.setup({ notify = "never" }) end)
      H.clear_notes()
      local quiet = p.run({ cmd = "exit 5", label = "everyday-quiet", notify = false })
      quiet:wait(10000)
      local loud = p.run({ cmd = "exit 6", label = "everyday-loud" })
      loud:wait(10000)
      H.wait(5000, function() return #notes_with("everyday%-loud") > 0 end, "the loud one is told")
      T.eq(#notes_with("everyday%-quiet"), 0, table.concat(H.note_texts(), " | "))
      -- a task definition's notify
      p.setup({
        notify = "always",
        tasks = { ["everyday-task"] = { cmd = "exit 7", notify = false } },
      })
      H.clear_notes()
      local got
      require("proctor.tasks").run_task(
        "everyday-task",
        { cwd = tmpdir() },
        function(ex) got = ex end
      )
      H.wait(5000, function() return got ~= nil end, "the task started")
      got:wait(10000)
      local loud2 = p.run({ cmd = "exit 8", label = "everyday-loud2" })
      loud2:wait(10000)
      H.wait(5000, function() return #notes_with("everyday%-loud2") > 0 end, "the loud one is told")
      T.eq(#notes_with("everyday%-task"), 0, table.concat(H.note_texts(), " | "))
    end
  )

  -- 13. `%` in a console --------------------------------------------------------------------

  test("everyday: % typed in a console is the alternate file, never proctor://N", function()
    reset_layout()
    local dir = tmpdir()
    local file = dir .. "/hello.c"
    vim.fn.writefile({ "int main;" }, file)
    vim.cmd("edit " .. vim.fn.fnameescape(file))
    p.setup({ notify = "never" })
    local ex = p.run({ cmd = "true", open = { enter = true } })
    ex:wait(10000)
    T.eq(console.id_of_buf(0), ex.id, "in the console")
    vim.cmd("Proctor run -bg echo %")
    local recs = p.list()
    local cmd = recs[#recs].cmd
    T.eq(type(cmd), "table", vim.inspect(cmd))
    T.eq(
      vim.fn.fnamemodify(cmd[2], ":p"),
      vim.fn.fnamemodify(file, ":p"),
      "% is the file the user came from"
    )
    vim.cmd("Proctor run -bg echo %:t:r")
    recs = p.list()
    T.eq(recs[#recs].cmd[2], "hello")
    for _, r in ipairs(p.list()) do
      if not engine.TERMINAL[r.state] then p.get(r.id):wait(5000) end
    end
    reset_layout()
  end)

  -- 14. Notifications ----------------------------------------------------------------------

  test("everyday: no ':Proctor open N' hint when that console is on the screen", function()
    reset_layout()
    p.setup({ notify = "always" })
    require("harness").defer(function() p.setup({ notify = "never" }) end)
    H.clear_notes()
    local shown = p.run({ cmd = "echo shown", label = "everyday-shown", open = true })
    shown:wait(10000)
    H.wait(5000, function() return #notes_with("everyday%-shown") > 0 end, "told")
    T.eq(#notes_with(":Proctor open " .. shown.id), 0, table.concat(H.note_texts(), " | "))
    H.clear_notes()
    local hidden = p.run({ cmd = "echo hidden", label = "everyday-hidden" })
    hidden:wait(10000)
    H.wait(5000, function() return #notes_with("everyday%-hidden") > 0 end, "told")
    T.eq(#notes_with(":Proctor open " .. hidden.id), 1, "the hint when it is not shown")
    reset_layout()
  end)

  -- 15. Display details ---------------------------------------------------------------------

  test(
    "everyday: the list says 1 execution, no 'label: label', no internal exec, EXIT fits SIGTERM",
    function()
      reset_layout()
      p.setup({ notify = "never" })
      for _, r in ipairs(p.list()) do
        if not engine.TERMINAL[r.state] then
          p.cancel(r.id, true)
          p.get(r.id):wait(10000)
        end
      end
      p.purge()
      T.eq(#p.list(), 0, "an empty list to start from")
      local one = p.run({ cmd = { "echo", "all" }, label = "echo all" })
      one:wait(10000)
      local buf = list.open()
      local lines = api.nvim_buf_get_lines(buf, 0, -1, false)
      T.match(lines[1], "proctor — 1 execution ·", "singular")
      local row = vim.tbl_filter(function(l) return l:find("^#" .. one.id .. " ") end, lines)[1]
      T.ok(row, "a row")
      T.eq(row:find("echo all: echo all", 1, true), nil, "the label is not repeated: " .. row)
      T.ok(row:find("echo all", 1, true), row)
      -- a command with expansions runs as sh -c 'exec …'; the exec is not shown
      vim.cmd("Proctor run -bg echo $HOME")
      local recs = p.list()
      local ex = recs[#recs]
      T.eq(ex.cmd, "exec echo $HOME", "the record runs it with exec")
      p.get(ex.id):wait(10000)
      -- a canceled one: SIGTERM in the EXIT column, the columns after it still aligned
      local long = p.run({ cmd = { "sleep", "30" } })
      H.wait(5000, function() return engine.state[long.id] == "running" end, "running")
      p.cancel(long.id)
      T.eq(long:wait(10000).signal, "SIGTERM")
      list.refresh()
      lines = api.nvim_buf_get_lines(buf, 0, -1, false)
      local header = lines[2]
      local dcol = header:find("DURATION", 1, true)
      for _, l in ipairs(lines) do
        if l:find("^#" .. ex.id .. " ") then
          T.eq(l:find("exec ", 1, true), nil, "no internal exec: " .. l)
          T.ok(l:find("echo $HOME", 1, true), l)
        elseif l:find("^#" .. long.id .. " ") then
          T.ok(l:find("SIGTERM", 1, true), l)
          T.eq(l:sub(dcol - 1, dcol - 1), " ", "a space before DURATION: " .. l)
          T.ok(l:sub(dcol, dcol) ~= " ", "the duration starts under DURATION: " .. l)
        end
      end
      T.match(lines[1], "proctor — 3 executions", "plural")
      -- the text view (:Proctor info) shows the command as typed too
      T.eq(require("proctor.util").cmd_string(ex.cmd), "echo $HOME")
      reset_layout()
    end
  )

  test("everyday: help: `\\r` in proctor-acp, q in consoles documented as taken", function()
    local help = vim.fn.readfile(H.root .. "/doc/proctor.txt")
    local text = table.concat(help, "\n")
    for i, l in ipairs(help) do
      T.eq(
        l:find("^` applied"),
        nil,
        "line " .. i .. " starts in the middle of a code span (a literal newline)"
      )
    end
    T.ok(text:find("`\\r` applied", 1, true), "\\r written as such")
    local keys = text:match("%*proctor%-console%-keys%*(.-)\n=====")
    T.ok(keys and keys:find("macro", 1, true), "the console keys say q shadows macro recording")
  end)
end
