-- tests/nvim/spec_history.lua — the Neovim layer's durable history and audit
-- log: setup{ history, audit } reaches the core, a restarted engine lists the
-- earlier session's executions (marked), :Proctor info shows env keys only.
return function(test, T, H)
  local p = require("proctor")
  local engine = require("proctor.engine")

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
end
