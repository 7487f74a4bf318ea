-- tests/nvim/spec_rpc.lua — the Neovim layer's RPC socket: on by default,
-- exported to children, shown by :Proctor info, driven by Neovim itself as a
-- client, off on request, and a refused directory never costs proctor itself.
return function(test, T, H)
  local p = require("proctor")
  local engine = require("proctor.engine")
  local uv = vim.uv or vim.loop

  local function fresh(opts)
    engine._reset()
    H.clear_notes()
    assert(p.setup(vim.tbl_deep_extend("force", { notify = "never" }, opts or {})))
  end

  test(
    "rpc: the socket is on by default, private, in every child's env and in :Proctor info",
    function()
      fresh()
      local ex = p.run({ cmd = { "sh", "-c", 'printf %s "$PROCTOR_SOCKET"' } })
      T.ok(ex:wait(5000), "run did not end")
      local eng = engine.current()
      local addr = eng:address()
      T.ok(addr, "no address")
      T.eq(addr, engine.socket_path())
      T.eq((eng:read(ex.id, "stdout", 0, 4096)), addr)
      local st = uv.fs_stat(addr)
      T.ok(st and st.type == "socket", "no socket file")
      T.eq(st.mode % 512, 384, "socket mode") -- 0600
      T.eq(uv.fs_stat(vim.fn.fnamemodify(addr, ":h")).mode % 512, 448, "directory mode") -- 0700
      local info = table.concat(require("proctor.views").info_lines(), "\n")
      T.ok(info:find(addr, 1, true), "info does not show the socket: " .. info)
      -- Neovim itself as a client: its executions show up in the editor's list with its name
      local ch = vim.fn.sockconnect("pipe", addr, { rpc = true })
      T.ok(ch > 0, "sockconnect failed")
      vim.rpcrequest(ch, "hello", "nvim-client")
      local id = vim.rpcrequest(ch, "start", { cmd = { "sh", "-c", "echo from-client" } })
      local rec = vim.rpcrequest(ch, "wait", id, 5000)
      T.eq(rec.state, "completed")
      local seen = p.record(id)
      T.ok(seen, "the editor does not see the client's execution")
      T.eq(seen.owner, "nvim-client")
      T.ok(seen.session > 0, "a client's execution belongs to its session")
      vim.fn.chanclose(ch)
      engine._reset()
      T.eq(uv.fs_stat(addr), nil, "socket file left after the engine closed")
    end
  )

  test("rpc: setup{ rpc = { enabled = false } } starts no socket", function()
    fresh({ rpc = { enabled = false } })
    local ex = p.run({ cmd = { "true" } })
    T.ok(ex:wait(5000))
    T.eq(engine.current():address(), nil)
    T.ok(table.concat(require("proctor.views").info_lines(), "\n"):find("socket:    off", 1, true))
    engine._reset()
  end)

  test("rpc: a refused socket directory is reported once and proctor still runs", function()
    local dir = vim.fn.tempname()
    uv.fs_mkdir(dir, 493) -- 0755: not private, the core refuses it
    fresh({ rpc = { path = dir .. "/p.sock" } })
    local ex = p.run({ cmd = { "sh", "-c", "echo still-works" } })
    T.ok(ex:wait(5000), "run did not end")
    T.eq(ex:record().state, "completed")
    T.eq(engine.current():address(), nil)
    local texts = table.concat(H.note_texts(), "\n")
    T.match(texts, "RPC socket disabled")
    T.match(texts, "EACCES")
    T.ok(table.concat(require("proctor.views").info_lines(), "\n"):find("disabled", 1, true))
    engine._reset()
    uv.fs_rmdir(dir)
    fresh()
  end)
end
