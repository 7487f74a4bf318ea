-- spec_audit_core.lua — branches of the core's promises no other binding spec
-- tried (tests/AUDIT.md lists each promise and its test): a cancel that is
-- graceful is told apart from a forced one by a program that traps SIGTERM
-- and leaves a mark; a ^C that ends a program which exits 130 (a shell's
-- way) is the user's interrupt, while exit 130 nobody asked for is a failure.
local U = require("util")
local core = U.core

return function(T, ctx)
  local P = ctx and ctx.nvim and "nvim: " or ""
  local function test(name, fn) T.test(P .. "audit: " .. name, fn) end

  -- An engine and a private directory, both gone when the test ends.
  local function setup(opts)
    local eng = assert(core.new(opts or {}))
    T.defer(function() eng:close() end)
    local dir = U.tmpdir()
    T.defer(function() U.rmrf(dir) end)
    return eng, dir
  end

  -- A program that, on SIGTERM, writes `mark` and exits 0; it prints ready
  -- once its trap is set. Returns the id, once the trap is in place.
  local function trap_spec(mark, extra)
    local tag = U.tag()
    local spec = {
      cmd = {
        "sh",
        "-c",
        "trap 'echo term > \"$0\"; exit 0' TERM; echo ready; " .. "while :; do sleep 0.05; done",
        mark,
      },
      env = { PROCTOR_TEST_TAG = tag },
    }
    for k, v in pairs(extra or {}) do
      spec[k] = v
    end
    return spec, tag
  end
  local function trapper(eng, mark, extra)
    local spec, tag = trap_spec(mark, extra)
    local id = assert(eng:start(spec))
    U.wait_output(eng, id, "ready", 10000)
    return id, tag
  end

  test(
    "cancel is graceful: SIGTERM first, the program's handler runs (its mark is there)",
    function()
      local eng, dir = setup { kill_grace_ms = 60000 }
      local mark = dir .. "/mark"
      local id = trapper(eng, mark)
      T.eq(eng:cancel(id), "canceling")
      local r = U.collect(eng, { id }, 60000)[id]
      T.eq(r.final.state, "canceled")
      T.eq(U.read_file(mark), "term\n", "the TERM handler did not run")
      T.eq(r.final.exit_code, 0, "the handler's own exit")
    end
  )

  test("cancel! is forced: SIGKILL at once, no handler runs (no mark)", function()
    local eng, dir = setup { kill_grace_ms = 60000 }
    local mark = dir .. "/mark"
    local id = trapper(eng, mark)
    T.eq(eng:cancel(id, true), "canceling")
    local r = U.collect(eng, { id }, 60000)[id]
    T.eq(r.final.state, "canceled")
    T.eq(r.final.signal, "SIGKILL")
    T.eq(U.read_file(mark), nil, "a TERM handler ran: the force was a SIGTERM")
  end)

  test("timeout is graceful too: SIGTERM first, then the end is timed_out", function()
    local eng, dir = setup { kill_grace_ms = 60000 }
    local mark = dir .. "/mark"
    -- The timeout counts from `starting`: on a loaded machine it can fire
    -- before the shell has set its trap (then SIGTERM kills it, "ready" is
    -- never printed, and nothing is shown about the ladder). "ready" in the
    -- output says the trap was in place first; until then, try again with
    -- twice the time.
    local r
    for _, ms in ipairs { 300, 600, 1200, 2400, 4800, 9600 } do
      local id = assert(eng:start((trap_spec(mark, { timeout_ms = ms }))))
      r = U.collect(eng, { id }, 60000)[id]
      if (r.out.stdout or ""):find("ready") then break end
    end
    T.match(r.out.stdout, "ready", "the trap was never set before the timeout fired")
    T.eq(r.final.state, "timed_out")
    T.eq(U.read_file(mark), "term\n", "the TERM handler did not run")
  end)

  test(
    "retention: history_limit counts terminal records only (live ones stay); history_age_ms = 0 never forgets",
    function()
      local eng = setup { history_limit = 1 }
      local ids = {}
      for i = 1, 3 do
        ids[i] = assert(eng:start { cmd = { "sleep", "30" } })
      end
      for i = 1, 3 do
        U.wait_state(eng, ids[i], "running", 20000)
      end
      T.eq(#eng:list(), 3, "a live execution was pruned by history_limit = 1")
      for i = 1, 3 do
        eng:cancel(ids[i])
      end
      U.collect(eng, ids, 20000)
      local l = eng:list()
      T.eq(#l, 1, "history_limit = 1 keeps one terminal record")
      local never = setup { history_age_ms = 0 }
      local a = assert(never:start { cmd = { "true" } })
      U.collect(never, { a })
      local b = assert(never:start { cmd = { "true" } }) -- a later end runs the pruning again
      U.collect(never, { b })
      T.eq(#never:list(), 2, "history_age_ms = 0 forgot a record")
    end
  )

  -- The same C option mapping in every runtime: under lua5.4 only (1001 records).
  -- One run ends for real; the other 1000 are held and canceled while queued:
  -- a record each, without 1000 forks (a fork costs milliseconds on a loaded machine).
  if not (ctx and ctx.nvim) then
    test("retention: history_limit = 0 keeps every record (one past the default 1000)", function()
      local eng = setup { history_limit = 0, max_running = 64 }
      local ids = { assert(eng:start { cmd = { "true" } }) }
      for i = 2, 1001 do
        ids[i] = assert(eng:start { cmd = { "true" }, hold = true })
        T.eq(eng:cancel(ids[i]), "canceling")
      end
      local r = U.collect(eng, ids, 120000)
      local ended = 0
      for _, id in ipairs(ids) do
        if r[id].final then ended = ended + 1 end
      end
      T.eq(ended, 1001, "every run ended")
      T.eq(#eng:list(), 1001, "history_limit = 0 pruned records")
      T.ok(eng:get(ids[1]), "the first record is kept")
    end)
  end

  -- Secret sources (|proctor-secrets|) ------------------------------------------

  test(
    "secrets: a value of 4096 bytes is taken, 4097 and a NUL are refused (inline and from a source)",
    function()
      local eng = setup()
      local max = string.rep("k", 4096)
      local r =
        U.run(eng, { cmd = { "sh", "-c", 'printf %s "$S" | wc -c' }, secrets = { S = max } }, 20000)
      T.eq(r.out.stdout, "4096\n")
      T.raises(function() eng:start { cmd = "true", secrets = { S = max .. "k" } } end, "'secrets'")
      T.raises(function() eng:start { cmd = "true", secrets = { S = "a\0b" } } end, "'secrets'")
      r = U.run(eng, {
        cmd = { "sh", "-c", 'printf %s "$S" | wc -c' },
        secrets = { S = { command = { "head", "-c", "4096", "/dev/zero" } } },
      }, 20000)
      T.eq(r.final.reason, "secret_unavailable", "NUL bytes from a source")
      r = U.run(eng, {
        cmd = { "sh", "-c", 'printf %s "$S" | wc -c' },
        secrets = { S = { command = { "sh", "-c", "head -c 4096 /dev/zero | tr '\\0' k" } } },
      }, 20000)
      T.eq(r.out.stdout, "4096\n", "4096 bytes from a source: " .. tostring(r.final.error))
      r = U.run(eng, {
        cmd = { "true" },
        secrets = { S = { command = { "sh", "-c", "head -c 4097 /dev/zero | tr '\\0' k" } } },
      }, 20000)
      T.eq(r.final.reason, "secret_unavailable", "4097 bytes from a source")
    end
  )

  test(
    "secrets: a source drops one trailing newline only, runs in the cwd with the host's environment",
    function()
      local eng, dir = setup()
      -- the value read is "v\n"; what the child prints is masked: compare its length
      local r = U.run(eng, {
        cmd = { "sh", "-c", 'printf %s "$S" | wc -c' },
        secrets = { S = { command = { "printf", "v\\n\\n" } } },
      }, 20000)
      T.eq(r.out.stdout, "2\n", "a value read as v\\n\\n keeps one newline")
      r = U.run(eng, {
        cmd = { "sh", "-c", '[ "$S" = "$PWD" ] && echo same' },
        cwd = dir,
        secrets = { S = { command = { "pwd" } } },
      }, 20000)
      T.eq(r.out.stdout, "same\n", "the source ran in the execution's cwd")
      local home = assert(os.getenv("HOME"))
      r = U.run(eng, {
        cmd = { "/bin/sh", "-c", 'printf %s "$S" | wc -c' },
        clear_env = true,
        secrets = { S = { command = { "sh", "-c", 'printf %s "$HOME"' } } },
      }, 20000)
      T.eq(r.out.stdout, #home .. "\n", "clear_env applied to the source (it has the host's HOME)")
    end
  )

  test(
    "secrets: a failing source's stderr (its first line) is in the error; a queued one reads at its start",
    function()
      local eng, dir = setup { max_running = 1 }
      local r = U.run(eng, {
        cmd = { "true" },
        secrets = {
          S = {
            command = {
              "sh",
              "-c",
              "echo 'first line' >&2; echo 'second line' >&2; exit 3",
            },
          },
        },
      }, 20000)
      T.eq(r.final.reason, "secret_unavailable")
      T.ok(r.final.error:find("first line", 1, true), r.final.error)
      T.ok(not r.final.error:find("second line", 1, true), r.final.error)
      local mark = dir .. "/read"
      local tag = U.tag()
      local first = assert(eng:start { cmd = { "sleep", "30" }, env = { PROCTOR_TEST_TAG = tag } })
      T.ok(U.wait_comm(tag, "sleep"), "the first never ran")
      local queued = assert(eng:start {
        cmd = { "true" },
        secrets = { S = { command = { "sh", "-c", "touch '" .. mark .. "'; echo v" } } },
      })
      T.eq(eng:get(queued).state, "queued")
      T.eq(U.read_file(mark), nil, "a queued execution's source was read before it started")
      eng:cancel(first, true)
      local rq = U.collect(eng, { queued }, 20000)[queued]
      T.eq(rq.final.state, "completed")
      T.eq(U.read_file(mark), "", "the source was read when it started")
    end
  )

  test(
    "pty: a ^C that makes a program exit 130 (a shell's way) is interrupted; exit 130 alone fails",
    function()
      local eng = setup()
      local cmd = { "sh", "-c", "trap 'exit 130' INT; echo ready; while :; do sleep 0.05; done" }
      local id = assert(eng:start { cmd = cmd, pty = true })
      U.wait_output(eng, id, "ready", 10000)
      T.eq(eng:input(id, "\3"), true)
      local r = U.collect(eng, { id }, 20000)[id]
      T.eq(r.final.state, "canceled")
      T.eq(r.final.reason, "interrupted")
      T.eq(r.final.exit_code, 130)
      -- the same exit code without a ^C
      local id2 = assert(eng:start { cmd = { "sh", "-c", "exit 130" }, pty = true })
      local r2 = U.collect(eng, { id2 }, 20000)[id2]
      T.eq(r2.final.state, "failed")
      T.eq(r2.final.reason, "exit")
      -- a ^C that the program survives ends nothing: its later exit 0 is completed
      local id3 = assert(eng:start {
        cmd = {
          "sh",
          "-c",
          "trap 'echo caught' INT; echo ready; while :; do read x && exit 0; done",
        },
        pty = true,
      })
      U.wait_output(eng, id3, "ready", 10000)
      T.eq(eng:input(id3, "\3"), true)
      U.wait_output(eng, id3, "caught", 10000)
      T.eq(eng:input(id3, "\n"), true)
      local r3 = U.collect(eng, { id3 }, 20000)[id3]
      T.eq(r3.final.state, "completed")
    end
  )
end
