-- tests/keyring/spec.lua — secrets from the Secret Service (run by tests/keyring/run
-- inside a private D-Bus session where the items below were stored).
local T = require("harness")
local U = require("util")
local core = U.core

local VALUE = 'kr-S3cret "quoted" \\ value'
local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)

-- (locked memory is checked with a command source in tests/lua/spec_secrets.lua:
-- libsecret keeps a locked pool of its own here, which grows and shrinks)
T.test("a secret-service item reaches the child only, masked everywhere", function()
  local hist = dir .. "/h.mpk"
  local eng = assert(core.new { history_file = hist })
  local id = assert(eng:start {
    cmd = { "sh", "-c", 'printf "v=%s\\n" "$TOKEN"; echo "len=${#TOKEN}"; cat >/dev/null' },
    stdin = true,
    secrets = {
      TOKEN = {
        store = "secret-service",
        attributes = { service = "proctor-test", account = "deploy" },
      },
    },
  })
  local out = U.wait_output(eng, id, "len=", 15000)
  T.eq(out, "v=***\nlen=" .. #VALUE .. "\n")
  assert(eng:close_stdin(id))
  local r = U.collect(eng, { id }, 10000)[id]
  T.eq(r.final.state, "completed")
  local rec = eng:get(id)
  local keys = table.concat(rec.env_keys, ",")
  T.ok(keys:find("TOKEN", 1, true), keys)
  T.ok(not eng:read(id, "stdout"):find("kr-S3cret", 1, true))
  eng:close()
  local h = U.read_file(hist)
  T.ok(h and h:find("v=***", 1, true) and not h:find("kr-S3cret", 1, true), "history file")
end)

T.test("several attributes pick the item", function()
  local eng = assert(core.new {})
  local r = U.run(eng, {
    cmd = { "sh", "-c", 'echo "len=${#KEY}"' },
    secrets = {
      KEY = {
        store = "secret-service",
        attributes = { service = "proctor-test", account = "other", kind = "api" },
      },
    },
  }, 15000)
  T.eq(r.final.state, "completed")
  T.eq(r.out.stdout, "len=12\n")
  eng:close()
end)

T.test(
  "a missing item fails the execution with a reason and never falls back to the environment",
  function()
    T.eq(os.getenv("TOKEN"), "from-the-environment", "the host has TOKEN in its environment")
    local eng = assert(core.new {})
    local marker = dir .. "/ran"
    local r = U.run(eng, {
      cmd = { "sh", "-c", "echo $TOKEN > " .. marker },
      secrets = {
        TOKEN = { store = "secret-service", attributes = { service = "no-such-item" } },
      },
    }, 15000)
    T.eq(r.final.state, "failed")
    T.eq(r.final.reason, "secret_unavailable")
    T.ok(r.final.error:find("secret TOKEN: no such item", 1, true), r.final.error)
    T.eq(U.read_file(marker), nil, "the command never ran")
    eng:close()
  end
)

os.execute("rm -rf " .. dir)
os.exit(T.finish() and 0 or 1)
