-- tests/nvim/spec_targets.lua — targets in the Neovim layer (|proctor-targets|): setup{ targets },
-- run{ target }, :Proctor run -target=, the record and the list. The target is a `command`
-- target that starts the relay here (the ssh transport itself is the `target` tier's).
return function(test, T, H)
  local p = require("proctor")
  local shepherd = H.root .. "/lua/proctor/proctor-shepherd"

  test(
    "setup checks targets; run{ target } runs there with its cwd; the record says where",
    function()
      T.match(select(2, p.setup({ targets = { box = { ssh = 1 } } })), "'targets' must be")
      T.match(
        select(2, p.setup({ targets = { box = { command = {} } } })),
        "command must be a list"
      )
      T.match(select(2, p.setup({ targets = { box = {} } })), "needs one of ssh, command")
      T.eq(
        p.setup({ notify = "never", targets = { box = { command = { shepherd }, cwd = "/tmp" } } }),
        true
      )
      local ex = p.run({ cmd = "echo $PWD; echo $FROM", target = "box", env = { FROM = "here" } })
      T.eq(ex:wait(20000).state, "completed")
      local rec = p.record(ex.id)
      T.eq(rec.target, "box")
      T.eq(rec.cwd, "/tmp")
      T.eq(ex:output(), "/tmp\nhere\n")
      -- a cwd of its own: a path on the far side, taken as written
      ex = p.run({ cmd = "pwd", target = "box", cwd = "/" })
      T.eq(ex:wait(20000).state, "completed")
      T.eq(ex:output(), "/\n")
      -- an unknown target is an error of run()
      local ok, err = pcall(p.run, { cmd = "true", target = "nowhere" })
      T.eq(ok, false)
      T.match(err, 'unknown target "nowhere"')
    end
  )

  test("setup() tells the running engine its targets: RPC clients can name only those", function()
    p.setup({ notify = "never", targets = { late = { command = { shepherd }, cwd = "/" } } })
    local eng = assert(require("proctor.engine").get())
    local id = assert(eng:start({ cmd = { "pwd" }, target = "late" })) -- no transport: the engine's
    H.wait(20000, function() return p.record(id) and p.record(id).state == "completed" end)
    T.eq(p.record(id).target, "late")
    T.eq(select(1, eng:read(id, "stdout", 0, 100)), "/\n")
    p.setup({ notify = "never", targets = {} }) -- forgotten
    local none, _, name = eng:start({ cmd = { "pwd" }, target = "late" })
    T.eq(none, nil)
    T.eq(name, "EINVAL")
  end)

  test("a task on a target: its output is matched (diagnostics) like a local one", function()
    p.setup({ notify = "never", targets = { box = { command = { shepherd }, cwd = "/tmp" } } })
    local ex = assert(p.run({
      cmd = "echo 'src/far.c:3:5: warning: unused variable x [-Wunused-variable]'",
      target = "box",
      name = "far-build",
      diagnostics = "gcc",
      quickfix = "never",
    }))
    local D = require("proctor.tasks.diagnostics")
    H.wait(20000, function()
      local r = D.result(ex.id)
      return r and r.done
    end)
    T.eq(p.record(ex.id).state, "completed")
    T.eq(p.record(ex.id).target, "box")
    T.eq(D.result(ex.id).count, 1)
  end)

  test(":Proctor run -target= and the list show the target", function()
    p.setup({ notify = "never", targets = { box = { command = { shepherd } } } })
    vim.cmd("silent! only!")
    vim.cmd("Proctor run -target=box -nopty -bg echo far")
    local list = p.list()
    local rec = list[#list]
    T.eq(rec.target, "box")
    H.wait(20000, function() return p.record(rec.id).state == "completed" end)
    local buf = select(1, require("proctor.list").open())
    local found
    for _, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
      if l:find("^#" .. rec.id .. " ") then found = l end
    end
    T.ok(found and found:find("@box echo far", 1, true), tostring(found))
    vim.cmd("silent! only!")
  end)

  test(":checkhealth proctor tries every target", function()
    p.setup({
      targets = {
        box = { command = { shepherd } },
        far = { ssh = "nobody@127.0.0.1", opts = { "-o", "Port=1", "-o", "ConnectTimeout=5" } },
      },
    })
    vim.cmd("silent checkhealth proctor")
    local text = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n")
    vim.cmd("bwipeout!")
    T.match(text, "OK:? box: ")
    T.match(text, "ERROR:? target far: ssh failed")
    p.setup({ targets = {} })
  end)
end
