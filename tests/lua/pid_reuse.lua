-- tests/lua/pid_reuse.lua — cancel/delete of an ended execution never signal
-- a process that reuses its pid.
--
-- Run by spec_kill inside a pid namespace of its own:
--   unshare --pid --fork --mount-proc --kill-child lua5.4 tests/lua/pid_reuse.lua
-- (or the same under `nvim --headless ... -c "luafile ..."`). Its writes of
-- ns_last_pid stay inside that namespace and nothing else forks there, so the
-- kernel hands out exactly the pid asked for. Prints "ok" or "FAIL: why";
-- everything it started dies with the namespace.
local root = os.getenv("PROCTOR_ROOT") or "."
package.path = root .. "/tests/lua/?.lua;" .. package.path
local U = require("util")

local function check(v, msg)
  if not v then error(msg, 2) end
  return v
end

local function main()
  check(U.read_file("/proc/1/cmdline"), "no /proc of the namespace")
  for _ = 1, 20 do
    os.execute("true")
  end -- pids up from the first few
  local eng = check(U.core.new {})
  local r, id = U.run(eng, { cmd = { "sh", "-c", "echo $$" } })
  local pid = check(tonumber(r.out.stdout), "no pid: " .. tostring(r.out.stdout))
  check(
    io.open("/proc/sys/kernel/ns_last_pid", "w"),
    "needs root to recycle a pid (/proc/sys/kernel/ns_last_pid)"
  ):close()
  -- The job's reaper reaps the ended leader (at once, or at the release):
  -- only then is the pid free for the kernel to reuse.
  check(
    U.wait_until(function() return U.read_file("/proc/" .. pid .. "/stat") == nil end, 10000),
    "the ended leader " .. pid .. " was never reaped"
  )
  local victim, holder
  for _ = 1, 20 do
    -- The next pid the kernel hands out is `pid`: popen's sh gets it and
    -- becomes the victim. It is not a group leader, so setsid(1) calls
    -- setsid() without forking: the victim leads its own process group
    -- (pgid = pid), just as the ended job did, and a stray kill(-pgid) would
    -- reach it.
    local f = io.open("/proc/sys/kernel/ns_last_pid", "w")
    f:write(tostring(pid - 1))
    f:close()
    holder = io.popen("exec setsid sh -c 'echo $$; exec sleep 300 >/dev/null 2>&1'")
    victim = tonumber(holder:read("l"))
    if victim == pid then break end
    os.execute("kill -9 " .. victim)
    holder:close()
  end
  check(
    victim == pid,
    "could not make the kernel reuse pid " .. pid .. " (got " .. tostring(victim) .. ")"
  )
  local function pgrp(p)
    local st = U.read_file("/proc/" .. p .. "/stat")
    return st and tonumber(st:match("%) %a %d+ (%d+)"))
  end
  check(
    U.wait_until(function() return pgrp(victim) == victim end, 10000),
    "the victim does not lead its process group (pgid " .. tostring(pgrp(victim)) .. ")"
  )
  check(eng:cancel(id) == "already_terminal", "cancel")
  check(eng:cancel(id, true) == "already_terminal", "cancel!")
  check(eng:delete(id) == "deleted", "delete")
  -- A fence: the shepherd handles messages in order, so once a later
  -- execution has ended, any signal owed to the earlier one has gone out.
  local fence = U.run(eng, { cmd = { "true" } })
  check(fence.final.state == "completed", "fence")
  check(U.alive(victim), "the process now holding pid " .. victim .. " was signalled")
  os.execute("kill -9 " .. victim)
  holder:close()
  eng:close()
end

local ok, err = pcall(main)
io.stdout:write(ok and "ok\n" or ("FAIL: " .. tostring(err) .. "\n"))
io.stdout:flush()
if vim then
  vim.cmd(ok and "qa!" or "cquit!")
else
  os.exit(ok and 0 or 1)
end
