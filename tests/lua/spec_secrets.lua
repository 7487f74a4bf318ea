-- tests/lua/spec_secrets.lua — secrets are masked everywhere; env_allow and
-- clear_env give the child exactly the documented environment.
local U = require("util")
local core = U.core

return function(T, opts)
  local test = T.test
  local dir = U.tmpdir()
  local SECRET = "hunter2-Zq9"

  -- Everything a file, list or record could leak, as one string.
  local function dump(v, seen)
    seen = seen or {}
    if type(v) ~= "table" then return tostring(v) end
    if seen[v] then return "" end
    seen[v] = true
    local parts = {}
    for k, x in pairs(v) do
      parts[#parts + 1] = tostring(k) .. "=" .. dump(x, seen)
    end
    return table.concat(parts, ",")
  end

  -- A terminal state event as dump() sees it, less its record's `cmd` and
  -- `cwd`: a record keeps the command and directory as given (the help,
  -- |proctor-secrets|: secrets go in `secrets`, not in `cmd`); everything
  -- else in it, its error first, must be masked.
  local function dump_final(ev)
    local rec = ev.record
    local cmd, cwd = rec and rec.cmd, rec and rec.cwd
    if rec then
      rec.cmd, rec.cwd = nil, nil
    end
    local s = dump(ev)
    if rec then
      rec.cmd, rec.cwd = cmd, cwd
    end
    return s
  end

  test("a secret is masked whole, split across two writes, repeated and at the very end", function()
    local hist, audit = dir .. "/h1.mpk", dir .. "/a1.log"
    local eng = assert(core.new { history_file = hist, audit_file = audit })
    -- split: "hunter" then (pause) "2-Zq9"; repeated; adjacent; the last bytes of the output
    local script = [[printf "a %s b\n"; printf 'split hunter'; sleep 0.3; printf '2-Zq9 c\n'; ]]
      .. [[printf "%s%s|%s\n"; printf "err %s\n" >&2; sleep 0.1; printf "%s"]]
    script = script:gsub("%%s", "$TOKEN")
    for _, pty in ipairs({ false, true }) do
      local r, id = U.run(eng, { cmd = script, secrets = { TOKEN = SECRET }, pty = pty })
      T.eq(r.final.state, "completed")
      local out = (r.out.stdout or "") .. (r.out.stderr or "") .. (r.out.pty or "")
      T.ok(not out:find("hunter", 1, true), "secret in events: " .. out)
      T.ok(not out:find("Zq9", 1, true), "secret tail in events: " .. out)
      local crlf = pty and "\r\n" or "\n"
      T.ok(out:find("a *** b" .. crlf, 1, true), out)
      T.ok(out:find("split *** c" .. crlf, 1, true), out)
      T.ok(out:find("******|***" .. crlf, 1, true), out)
      T.ok(out:find("err ***" .. crlf, 1, true), out)
      T.eq((r.out.stdout or r.out.pty):sub(-4), "\n***", "the very end of the output")
      for _, s in ipairs(pty and { "pty" } or { "stdout", "stderr" }) do
        local data = eng:read(id, s)
        T.ok(not data:find("hunter", 1, true) and not data:find("Zq9", 1, true), "read: " .. data)
      end
      local rec = eng:get(id)
      T.ok(not dump(rec):find(SECRET, 1, true), "record")
      T.ok(dump(rec.env_keys):find("TOKEN", 1, true), "the key is listed")
      T.ok(not dump(eng:list()):find(SECRET, 1, true), "list")
    end
    eng:close()
    local h, a = U.read_file(hist), U.read_file(audit)
    T.ok(#h > 0 and #a > 0)
    T.ok(not h:find(SECRET, 1, true) and not h:find("hunter2", 1, true), "history file")
    T.ok(not a:find(SECRET, 1, true), "audit file")
    T.ok(h:find("a *** b", 1, true), "masked output is in the history")
    -- and after a reload
    local e2 = assert(core.new { history_file = hist })
    T.ok(not dump(e2:list()):find(SECRET, 1, true))
    e2:close()
  end)

  test("the child receives the secret's real value; only what it prints is masked", function()
    local eng = assert(core.new {})
    T.defer(function() eng:close() end)
    for _, pty in ipairs({ false, true }) do
      -- The child prints a digest of the value, which is not the secret: the
      -- output is not masked, and only the real value gives this digest.
      local r = U.run(eng, {
        cmd = [[printf %s "$TOKEN" | sha256sum | cut -c1-16]],
        secrets = { TOKEN = SECRET },
        pty = pty,
      })
      local out = (r.out.stdout or r.out.pty or ""):gsub("\r", "")
      local digest = U.sh("printf %s '" .. SECRET .. "' | sha256sum | cut -c1-16")
      T.eq(out, digest, "pty=" .. tostring(pty))
    end
  end)

  test("the masking is what makes the difference (control: no secrets)", function()
    local eng = assert(core.new {})
    local r = U.run(eng, { cmd = 'printf "a $TOKEN b"', env = { TOKEN = SECRET } })
    T.eq(r.out.stdout, "a " .. SECRET .. " b")
    r = U.run(eng, { cmd = 'printf "a $TOKEN b"', secrets = { TOKEN = SECRET } })
    T.eq(r.out.stdout, "a *** b")
    eng:close()
  end)

  test("a prefix of a secret at the end of the output is released, not swallowed", function()
    local eng = assert(core.new {})
    local r = U.run(eng, { cmd = "printf 'x hunt'", secrets = { TOKEN = SECRET } })
    T.eq(r.out.stdout, "x hunt")
    eng:close()
  end)

  test("secrets never reach error messages; bad secrets raise naming the option", function()
    local eng = assert(core.new {})
    T.raises(function() eng:start { cmd = "true", secrets = "x" } end, "'secrets'")
    T.raises(function() eng:start { cmd = "true", secrets = { A = "" } } end, "'secrets'")
    T.raises(function() eng:start { cmd = "true", secrets = { A = 1 } } end, "'secrets'")
    T.raises(function() eng:start { cmd = "true", secrets = { [1] = "v" } } end, "'secrets'")
    local ok, err =
      pcall(eng.start, eng, { cmd = "true", env = { A = "1" }, secrets = { A = SECRET } })
    T.ok(not ok and not tostring(err):find(SECRET, 1, true), tostring(err))
    T.raises(function() eng:start { cmd = "true", env_allow = "PATH" } end, "'env_allow'")
    T.raises(function() eng:start { cmd = "true", env_allow = { "A=B" } } end, "'env_allow'")
    -- a spawn error mentions the command, never the environment
    local r = U.run(eng, { cmd = { "/nonexistent/x" }, secrets = { TOKEN = SECRET } })
    T.eq(r.final.state, "failed")
    T.ok(not dump(r.final):find(SECRET, 1, true))
    eng:close()
  end)

  test(
    "a multi-line secret (a PEM key) through a pty, whose ONLCR turns \\n into \\r\\n, is masked everywhere",
    function()
      local hist = dir .. "/pem.mpk"
      local eng = assert(core.new { history_file = hist })
      local PEM =
        "-----BEGIN KEY-----\nMIIEvQIBADANBgkqhkiG9w0B\nAQEFAASCBKcwggSjAgEAAoIB\n-----END KEY-----"
      local r, id = U.run(eng, {
        cmd = [[printf 'key=%s;\n' "$TOKEN"; printf '%s' "$TOKEN"]],
        pty = true,
        secrets = { TOKEN = PEM },
      })
      T.eq(r.final.state, "completed")
      local out = r.out.pty or ""
      T.ok(out:find("key=***;\r\n", 1, true), "masked: " .. out)
      T.eq(out:sub(-4), "\n***")
      for _, piece in ipairs({ "MIIE", "AQEF", "BEGIN KEY" }) do
        T.ok(not out:find(piece, 1, true), "events: " .. out)
        T.ok(not eng:read(id, "pty"):find(piece, 1, true), "read")
      end
      eng:close()
      local h = U.read_file(hist)
      T.ok(h:find("key=***;", 1, true), "history has the masked output")
      T.ok(not h:find("MIIE", 1, true) and not h:find("BEGIN KEY", 1, true), "history file")
    end
  )

  test("spawn and chdir errors never show a secret value (the path carries it)", function()
    local eng = assert(core.new {})
    local r = U.run(eng, { cmd = { "/nonexistent/" .. SECRET }, secrets = { TOKEN = SECRET } })
    T.eq(r.final.state, "failed")
    T.eq(r.final.reason, "spawn_error")
    T.ok(r.final.error and r.final.error:find("/nonexistent/***", 1, true), tostring(r.final.error))
    T.ok(
      r.final.record and r.final.record.error == r.final.error,
      "the event's record and its error"
    )
    T.ok(not dump_final(r.final):find(SECRET, 1, true), "exec error: " .. tostring(r.final.error))
    local id
    r, id = U.run(
      eng,
      { cmd = { "true" }, cwd = "/nonexistent/" .. SECRET .. "/d", secrets = { TOKEN = SECRET } }
    )
    T.eq(r.final.state, "failed")
    T.ok(not dump_final(r.final):find(SECRET, 1, true), "chdir error: " .. tostring(r.final.error))
    T.ok(not tostring(eng:get(id).error):find(SECRET, 1, true), "the record's error")
    eng:close()
  end)

  -- Live processes whose command line holds `needle`.
  local function running(needle)
    local n = 0
    for pid in U.sh("ls /proc"):gmatch("%d+") do
      local c = U.read_file("/proc/" .. pid .. "/cmdline")
      if c and c:find(needle, 1, true) and U.alive(tonumber(pid)) then n = n + 1 end
    end
    return n
  end

  test(
    "a secret from a command source is read at spawn time, masked, and never falls back to the environment",
    function()
      local eng = assert(core.new {})
      local r, id = U.run(eng, {
        cmd = { "sh", "-c", 'echo "v=$HOME len=${#HOME}"' },
        secrets = { HOME = { command = { "sh", "-c", "printf 'from-a-store-9\\n'" } } },
      })
      T.eq(r.final.state, "completed")
      T.eq(
        r.out.stdout,
        "v=*** len=14\n",
        "the value read (without its newline) replaces the host's HOME"
      )
      T.ok(table.concat(eng:get(id).env_keys, ","):find("HOME", 1, true))
      -- a source that fails: the execution fails with a reason and never runs
      local marker = dir .. "/ran"
      for _, src in ipairs({
        { "sh", "-c", "echo 'no such entry' >&2; exit 1" },
        { "/nonexistent/pass" },
        { "printf", "" },
        { "head", "-c", "5000", "/dev/zero" },
      }) do
        r = U.run(
          eng,
          { cmd = { "sh", "-c", "touch " .. marker }, secrets = { HOME = { command = src } } }
        )
        T.eq(r.final.state, "failed")
        T.eq(r.final.reason, "secret_unavailable")
        T.ok(r.final.error:find("secret HOME: ", 1, true), r.final.error)
        T.eq(U.read_file(marker), nil, "the command never ran: " .. r.final.error)
      end
      T.ok(r.final.error:find("NUL", 1, true) or r.final.error:find("4096", 1, true), r.final.error)
      T.raises(
        function() eng:start { cmd = "true", secrets = { A = { command = {} } } } end,
        "'secrets'"
      )
      T.raises(
        function()
          eng:start {
            cmd = "true",
            secrets = { A = { store = "kwallet", attributes = { a = "b" } } },
          }
        end,
        "'secrets'"
      )
      T.raises(
        function() eng:start { cmd = "true", secrets = { A = { command = { "x" }, bogus = 1 } } } end,
        "'secrets'"
      )
      eng:close()
    end
  )

  test(
    "a value read from a source sits in locked memory while the execution runs, and is wiped at its end",
    function()
      local eng = assert(core.new {})
      local function locked() return U.status_field("self", "VmLck") or 0 end
      local before = locked()
      local id = assert(eng:start {
        cmd = { "sh", "-c", "echo up; cat >/dev/null" },
        stdin = true,
        secrets = { T = { command = { "printf", "locked-V4lue" } } },
      })
      U.wait_output(eng, id, "up", 5000)
      local during = locked()
      T.ok(
        during >= before + 8,
        ("VmLck %d kB while it runs (the value, the masker's copy), %d kB before"):format(
          during,
          before
        )
      )
      assert(eng:close_stdin(id))
      T.eq(U.collect(eng, { id }, 5000)[id].final.state, "completed")
      -- (the engine thread lets go of the masker's copy right after the terminal event)
      T.ok(
        U.wait_until(function() return locked() == before end, 2000),
        "wiped and unlocked at the end: " .. locked()
      )
      eng:close()
    end
  )

  test("cancel while a secret is being read ends the execution and the reading command", function()
    local eng = assert(core.new {})
    local needle = "proctor-test-slow-secret-" .. U.tag()
    local id = assert(eng:start {
      cmd = { "true" },
      secrets = { T = { command = { "sh", "-c", "sleep 30; : " .. needle } } },
    })
    T.ok(U.wait_until(function() return running(needle) > 0 end, 5000), "the reading command runs")
    U.wait_state(eng, id, "starting")
    T.eq(eng:cancel(id), "canceling")
    local r = U.collect(eng, { id }, 5000)[id]
    T.eq(r.final.state, "canceled")
    T.ok(
      U.wait_until(function() return running(needle) == 0 end, 5000),
      "the reading command was killed"
    )
    eng:close()
  end)

  local function child_env(eng, spec)
    spec.cmd = { "env", "-0" }
    local r = U.run(eng, spec)
    T.eq(r.final.state, "completed")
    local env = {}
    for kv in (r.out.stdout or r.out.pty):gmatch("([^%z]*)%z") do
      local k, v = kv:match("^([^=]*)=(.*)$")
      env[k] = v
    end
    return env
  end

  local function keys(t)
    local v = {}
    for k in pairs(t) do
      v[#v + 1] = k
    end
    table.sort(v)
    return table.concat(v, ",")
  end

  -- Whether process `pid`'s writable memory holds `needle` anywhere.
  local function memory_holds(pid, needle)
    local maps = assert(io.open("/proc/" .. pid .. "/maps", "r"))
    local mem = assert(io.open("/proc/" .. pid .. "/mem", "rb"))
    local found = false
    for line in maps:lines() do
      local a, b, perm = line:match("^(%x+)%-(%x+) (....)")
      if perm and perm:sub(1, 2) == "rw" and not line:find("%[vvar") then
        local lo, hi = tonumber(a, 16), tonumber(b, 16)
        local tail = ""
        while lo < hi and not found do
          local n = math.min(hi - lo, 1048576)
          local chunk = mem:seek("set", lo) and mem:read(n)
          if not chunk then break end
          found = (tail .. chunk):find(needle, 1, true) ~= nil
          tail = chunk:sub(-#needle)
          lo = lo + n
        end
      end
      if found then break end
    end
    maps:close()
    mem:close()
    return found
  end

  test("the shepherd and the job's reaper keep no copy of a secret once the job runs", function()
    local eng = assert(core.new {})
    T.defer(function() eng:close() end)
    local tag = U.tag()
    local value = "sheep-" .. tag .. "-Zx7"
    local id = assert(eng:start {
      cmd = { "sh", "-c", "echo ready; exec sleep 30" },
      secrets = { S = value },
      env = { PROCTOR_TEST_TAG = tag },
    })
    U.wait_output(eng, id, "ready")
    -- scan the leader once it is sleep: a shell still exec'ing has no
    -- stable memory to read
    T.ok(U.wait_comm(tag, "sleep"), "the leader never exec'd sleep")
    local leader = eng:get(id).pid
    local reaper, shepherd = U.ppid(leader), U.shepherd(leader)
    T.ok(reaper and shepherd and reaper ~= shepherd, "the job's reaper and the shepherd")
    -- Lazy binding would save every vector register (pieces of the last spawn
    -- request among them) on the stack at a function's first call: the
    -- shepherd resolves all of them at start. Whether a spill happens depends
    -- on which call comes first, so the scans below cannot show its absence.
    -- A static image (musl-gcc's, Makefile) has no dynamic section and binds
    -- nothing lazily; its dynamic twin, the shepherd where musl-gcc is absent, is
    -- checked too when it is in the build tree.
    local function bind_now(exe)
      local d = U.sh("readelf -d '" .. exe .. "' 2>&1")
      return d:find("BIND_NOW") ~= nil or d:find("no dynamic section") ~= nil, d
    end
    local exe = U.sh("readlink /proc/" .. shepherd .. "/exe"):gsub("%s+$", "")
    local now, dyn = bind_now(exe)
    T.ok(now, "the shepherd is linked with -z now: " .. dyn)
    local so = package.searchpath("proctor.core", package.cpath)
    if not so and vim then so = vim.api.nvim_get_runtime_file("lua/proctor/core.so", false)[1] end
    local sodir = (so or ""):match("^(.*)/[^/]+$") or "."
    for _, twin in ipairs({
      sodir .. "/../../proctor-shepherd-dyn",
      sodir .. "/../../build/proctor-shepherd-dyn",
    }) do
      local f = io.open(twin, "rb")
      if f then
        f:close()
        now, dyn = bind_now(twin)
        T.ok(now, "the dynamic shepherd is linked with -z now: " .. dyn)
      end
    end
    -- the probe itself works: the job's own environment holds the value
    T.ok(memory_holds(leader, value), "the scan finds the value where it must be (the child)")
    T.ok(not memory_holds(shepherd, value), "the shepherd's memory holds the secret value")
    T.ok(not memory_holds(reaper, value), "the job's reaper's memory holds the secret value")
    eng:cancel(id, true)
    U.collect(eng, { id })
  end)

  -- How many times process `pid`'s writable memory holds a + b (the two
  -- halves joined). The scan runs in a separate process: the halves are all
  -- this Lua state ever holds, so neither the test nor its reads of memory
  -- leave a whole copy in the process scanned.
  local scanner = [[
import re, sys
pid, needle = sys.argv[1], (sys.argv[2] + sys.argv[3]).encode()
n = 0
with open("/proc/%s/maps" % pid) as maps, open("/proc/%s/mem" % pid, "rb", 0) as mem:
    for line in maps:
        f = line.split()
        if not f[1].startswith("rw") or "[vvar" in line:
            continue
        lo, hi = (int(x, 16) for x in f[0].split("-"))
        tail = b""
        while lo < hi:
            k = min(hi - lo, 1 << 20)
            try:
                mem.seek(lo)
                chunk = mem.read(k)
            except OSError:
                break
            buf = tail + chunk
            n += buf.count(needle)
            tail = chunk[-(len(needle) - 1):]
            lo += k
print(n)
]]
  local function copies(pid, a, b)
    local path = dir .. "/scan.py"
    if not U.read_file(path) then U.write_file(path, scanner) end
    return tonumber(U.sh(("/usr/bin/python3 %s %d '%s' '%s'"):format(path, pid, a, b)):match("%d+"))
  end

  test(
    "no copy of a value read from a source is left in the host's memory after its execution",
    function()
      local eng = assert(core.new {})
      local self_pid = tonumber(U.read_file("/proc/self/stat"):match("^(%d+)"))
      -- the value is printed by the source as two halves: no whole copy in Lua
      local a, b = "srcv-" .. U.tag(), "-Wq3"
      -- (later reads land at the start of the read buffer: keep the value clear of them)
      local pad = string.rep("p", 64)
      local id = assert(eng:start {
        cmd = { "sh", "-c", 'echo "' .. pad .. 'v=$S"; echo up; exec cat >/dev/null' },
        stdin = true,
        secrets = { S = { command = { "printf", "%s%s", a, b } } },
      })
      U.wait_output(eng, id, "up", 5000)
      -- the probe works: while it runs the value is in the host (the masker's
      -- locked copy, and the raw output it masked)
      local during = copies(self_pid, a, b)
      T.ok(
        during and during > 0,
        "the scan finds the value while the job runs: " .. tostring(during)
      )
      assert(eng:close_stdin(id))
      local r = U.collect(eng, { id }, 10000)[id]
      T.eq(r.final.state, "completed")
      T.eq(r.out.stdout, pad .. "v=***\nup\n")
      T.eq(eng:delete(id), "deleted")
      -- (the engine thread frees the execution right after its terminal event)
      local left
      T.ok(
        U.wait_until(function()
          left = copies(self_pid, a, b)
          return left == 0
        end, 5000, 200),
        "copies of the value left in the host's memory: " .. tostring(left)
      )
      eng:close()
    end
  )

  test("env_allow inherits only the listed keys; env, secrets and PROCTOR_* are added", function()
    local eng = assert(core.new {})
    local env = child_env(
      eng,
      { env_allow = { "PATH", "HOME", "NO_SUCH_VAR_X" }, env = { A = "1" }, secrets = { S = "sv" } }
    )
    T.eq(keys(env), "A,HOME,PATH,PROCTOR_EXECUTION_ID,PROCTOR_JOB,S")
    T.eq(env.PATH, os.getenv("PATH"))
    T.eq(env.S, "***", "the child has it; its output is masked")
    local id = eng:list()[#eng:list()].id
    local rk = eng:get(id).env_keys
    table.sort(rk)
    T.eq(
      table.concat(rk, ","),
      "A,HOME,PATH,PROCTOR_EXECUTION_ID,PROCTOR_JOB,S",
      "the record lists the keys"
    )
    local entry = eng:list()[#eng:list()]
    T.eq(entry.id, id)
    T.eq(entry.env_keys, nil, "list entries leave env_keys out (get has them)")
    T.eq(entry.previous_session, false, "the rest of the record is there")
    -- an empty list inherits nothing
    env = child_env(eng, { env_allow = {} })
    T.eq(keys(env), "PROCTOR_EXECUTION_ID,PROCTOR_JOB")
    -- clear_env wins over env_allow; pty adds TERM
    env = child_env(eng, { clear_env = true, env_allow = { "PATH" }, env = { B = "2" } })
    T.eq(keys(env), "B,PROCTOR_EXECUTION_ID,PROCTOR_JOB")
    env = child_env(eng, { clear_env = true, pty = true })
    T.eq(keys(env), "PROCTOR_EXECUTION_ID,PROCTOR_JOB,TERM")
    -- without a policy the host's environment is inherited, and a secret
    -- replaces a host variable of the same name
    env = child_env(eng, { secrets = { HOME = "elsewhere" } })
    T.eq(env.PATH, os.getenv("PATH"))
    T.eq(env.HOME, "***")
    eng:close()
  end)

  U.rmrf(dir)
end
