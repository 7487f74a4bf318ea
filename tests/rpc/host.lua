-- tests/rpc/host.lua — a plain Lua 5.4 host for the RPC tests.
--
--   LUA_CPATH='build/lua5.4/?.so;;' lua5.4 tests/rpc/host.lua SOCKET CTLDIR [output_limit]
--
-- Starts an engine listening on SOCKET and loops on eng:wait(50), consuming
-- events like an editor would. Control through files in CTLDIR:
--   ready        written by the host once it listens (holds eng:address())
--   dump         when present: eng:list() is written to dump.out (one
--                "id session owner state" line each) and `dump` removed
--   start        when present: its content is run as a host execution
--                (session 0); the id goes to start.out
--   stop         when present: eng:close(), then exit 0
-- PROCTOR_RPC_RELAY (a transport) and PROCTOR_RPC_FAR_CWD configure target "far".
local core = require("proctor.core")
local sock, ctl, limit = arg[1], arg[2], tonumber(arg[3])

local eng, err = core.new({ listen = sock, output_limit = limit })
if not eng then
  io.stderr:write("host: core.new failed: " .. tostring(err) .. "\n")
  os.exit(2)
end

local function exists(p)
  local f = io.open(p, "r")
  if f then
    f:close()
    return true
  end
  return false
end

local function write(p, s)
  local f = assert(io.open(p .. ".tmp", "w"))
  f:write(s)
  f:close()
  assert(os.rename(p .. ".tmp", p))
end

-- A configured target (|proctor-targets|), as the editor's setup{ targets } makes one: a
-- `command` target whose relay runs here, in a directory of its own (its default cwd).
if os.getenv("PROCTOR_RPC_RELAY") then
  assert(eng:target("far", os.getenv("PROCTOR_RPC_RELAY"), os.getenv("PROCTOR_RPC_FAR_CWD")))
end

write(ctl .. "/ready", eng:address() or "")
local events = 0
while true do
  local evs = eng:wait(50, 4096)
  events = events + #evs
  if exists(ctl .. "/dump") then
    local out = {}
    for _, r in ipairs(eng:list()) do
      out[#out + 1] = string.format("%d %d %s %s", r.id, r.session, r.owner, r.state)
    end
    write(ctl .. "/dump.out", table.concat(out, "\n") .. "\n")
    os.remove(ctl .. "/dump")
  end
  if exists(ctl .. "/start") then
    local f = io.open(ctl .. "/start")
    local cmd = f:read("a")
    f:close()
    os.remove(ctl .. "/start")
    write(ctl .. "/start.out", tostring(eng:start({ cmd = cmd, owner = "editor" })))
  end
  if exists(ctl .. "/stop") then
    eng:close()
    os.exit(0)
  end
end
