-- tests/lua/spec_hostfiles.lua — nothing core.new() opens on the host thread
-- can block it: a configured path that is a FIFO (or a device) turns its
-- feature off with a warning saying why, and executions still run.
--
-- core.new() runs in a child process (this Lua, or this Neovim) under
-- `timeout`: a regression (an open that waits for a FIFO's reader) then
-- fails the test instead of hanging the suite.
local U = require("util")

-- The child: core.new(opts) with one path, its warnings, one execution.
-- It writes what it saw to OUT, one line each; never prints (Neovim's
-- headless print goes elsewhere).
local CHILD = [=[
local KEY, PATH, OUT = %q, %q, %q
local out = assert(io.open(OUT, "w"))
local function say(s) out:write(s, "\n"); out:flush() end
local core = require("proctor.core")
local eng, err = core.new{ [KEY] = PATH }
if not eng then say("NEWFAIL " .. tostring(err)) else
  say("NEW ok")
  for _, w in ipairs(eng:warnings()) do say("WARN " .. w) end
  local id = assert(eng:start{ cmd = { "sh", "-c", "echo ran" } })
  local final, text = nil, ""
  for _ = 1, 300 do
    for _, ev in ipairs(eng:wait(100)) do
      if ev.id == id and ev.type == "output" then text = text .. ev.data end
      if ev.id == id and ev.type == "state" and (ev.state == "completed" or ev.state == "failed"
          or ev.state == "canceled" or ev.state == "timed_out") then final = ev.state end
    end
    if final then break end
  end
  say("RUN " .. tostring(final) .. " " .. text:gsub("\n", ""))
  eng:close()
end
out:close()
if vim then vim.cmd("qa!") end
]=]

return function(T, opts)
  local test = T.test
  local dir = U.tmpdir()
  local nchild = 0

  -- Run the child with {key = path}; the lines it wrote (nil: it never got there).
  local function child(key, path)
    nchild = nchild + 1
    local script, out =
      ("%s/child-%d.lua"):format(dir, nchild), ("%s/child-%d.out"):format(dir, nchild)
    U.write_file(script, CHILD:format(key, path, out))
    os.remove(out)
    local cmd
    if opts and opts.nvim then
      cmd = ("%q --headless -u NONE -i NONE -n --cmd %q -c %q"):format(
        vim.v.progpath,
        "set rtp^=" .. U.root,
        "luafile " .. script
      )
    else
      cmd = ("%q %q"):format(os.getenv("LUA") or "lua5.4", script)
    end
    -- A generous watchdog: a hang is a failure, not a stuck suite.
    os.execute("timeout -k 5 120 " .. cmd .. " </dev/null >/dev/null 2>&1")
    return U.read_file(out)
  end

  local function check(key, path, feature_off)
    local got = child(key, path)
    T.ok(
      got,
      "core.new{" .. key .. " = <a FIFO>} never returned (the child was killed by its watchdog)"
    )
    T.ok(got:find("NEW ok", 1, true), got)
    local warn = got:match("WARN ([^\n]*)") or ""
    T.ok(warn:find("not a regular file (it is a FIFO)", 1, true), "the warning says why: " .. got)
    T.ok(warn:find(feature_off, 1, true), "the warning says the feature is off: " .. got)
    T.ok(got:find("RUN completed ran", 1, true), "executions still run: " .. got)
  end

  test(
    "a FIFO as audit_file: core.new() returns, the audit log is off with a warning, runs still work",
    function()
      local fifo = dir .. "/audit.fifo"
      assert(os.execute("mkfifo '" .. fifo .. "'"))
      check("audit_file", fifo, "no audit log for this engine")
    end
  )

  test(
    "a FIFO as history_file: core.new() returns, history is off with a warning, runs still work",
    function()
      local fifo = dir .. "/history.fifo"
      assert(os.execute("mkfifo '" .. fifo .. "'"))
      check("history_file", fifo, "history is off for this engine")
    end
  )

  test(
    "a FIFO as the history's lock file: history is off with a warning, runs still work",
    function()
      local hist = dir .. "/locked.mpk"
      assert(os.execute("mkfifo '" .. hist .. ".lock'"))
      check("history_file", hist, "history is off for this engine")
    end
  )

  test("a directory or a character device as audit_file is refused the same way", function()
    local eng = assert(U.core.new { audit_file = "/dev/null" })
    local w = table.concat(eng:warnings(), "\n")
    T.ok(w:find("not a regular file (it is a character device)", 1, true), w)
    eng:close()
    eng = assert(U.core.new { audit_file = dir })
    w = table.concat(eng:warnings(), "\n")
    T.ok(w:find("not a regular file (it is a directory)", 1, true), w)
    eng:close()
  end)

  test("a regular audit_file and history_file still work (no warning)", function()
    local eng = assert(U.core.new { audit_file = dir .. "/a.log", history_file = dir .. "/h.mpk" })
    T.eq(#eng:warnings(), 0)
    local r = U.run(eng, { cmd = { "true" } })
    T.eq(r.final.state, "completed")
    eng:close()
    T.ok((U.read_file(dir .. "/a.log") or ""):find('"event":"completed"', 1, true))
  end)

  U.rmrf(dir)
end
