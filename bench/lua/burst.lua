-- bench/lua/burst.lua — workload 8 under lua5.4: a burst of executions, no cap.
--
--   BENCH_N     how many executions (1000, 5000, 10000)
--   BENCH_MODE  "true": N × `true`; "cancel": N × `true`, each canceled right
--               after its start (a start-then-cancel race: the cancel finds
--               it starting, running or exited, whatever the machine's pace)
--
-- All N are started at once (events are taken every 200 starts). wall_ms runs
-- from the first start to the last terminal event; per_exec_us is wall_ms / N.
-- Then, from the last terminal event, the shepherd is watched every 10 ms:
-- settle_ms is when no zombie is left below it and its descriptors are back to
-- what it had before the burst; zombies_1s and extra_fds_1s are what was left
-- 1 s after the last terminal event (the target is 0 and 0). shepherd_cpu_us:
-- the shepherd's own CPU time per execution over the burst (the scheduler's
-- exact sum, /proc/<pid>/schedstat): the fork of each job's reaper, its
-- reports forwarded, its exit reaped.

local lib = dofile(os.getenv("BENCH_ROOT") .. "/bench/lib.lua")
local core = require("proctor.core")

local N = lib.param("BENCH_N", 1000, true)
local MODE = lib.param("BENCH_MODE", "true")
local terminal = { completed = true, failed = true, canceled = true, timed_out = true }

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end

-- Zombies among the processes below `pid` (by each one's children list).
local function zombies(pid)
  local n, todo = 0, { pid }
  while #todo > 0 do
    local p = table.remove(todo)
    for c in (read("/proc/" .. p .. "/task/" .. p .. "/children") or ""):gmatch("%d+") do
      local st = read("/proc/" .. c .. "/stat")
      if st and st:match("%) (%a)") == "Z" then n = n + 1 end
      todo[#todo + 1] = c
    end
  end
  return n
end

local function nfds(pid)
  local n = 0
  local p = io.popen("ls /proc/" .. pid .. "/fd 2>/dev/null")
  for _ in p:lines() do
    n = n + 1
  end
  p:close()
  return n
end

local eng = assert(core.new({ history_limit = N + 10, max_queued = N + 10 }))
-- The shepherd: the oldest ancestor of a job's leader that runs proctor-shepherd
-- (leader -> its reaper, a fork of the shepherd -> the shepherd).
local probe = eng:start({ cmd = { "sleep", "60" } })
local pid
while not pid do
  for _, ev in ipairs(eng:wait(1000)) do
    if ev.type == "state" and ev.state == "running" then pid = ev.pid end
  end
end
local shep
for _ = 1, 4 do
  pid = lib.ppid(pid)
  if
    not pid
    or pid <= 1
    or not (read("/proc/" .. pid .. "/cmdline") or ""):find("proctor%-shepherd")
  then
    break
  end
  shep = pid
end
assert(shep, "no shepherd above the job")
eng:cancel(probe, true)
local probe_done = false
while not probe_done do
  for _, ev in ipairs(eng:wait(1000)) do
    if ev.type == "state" and terminal[ev.state] then probe_done = true end
  end
end
local fds0 = nfds(shep)
-- The shepherd's own CPU time, µs (the scheduler's sum: exact).
local function cpu(of)
  return tonumber((read("/proc/" .. of .. "/schedstat") or ""):match("^(%d+)") or 0) / 1000
end
local cpu0 = cpu(shep)

local states, done, t_last = {}, 0, nil
local function take(ms)
  for _, ev in ipairs(eng:wait(ms, 65536)) do
    if ev.type == "state" and terminal[ev.state] then
      done = done + 1
      states[ev.state] = (states[ev.state] or 0) + 1
      t_last = lib.now_ms()
    end
  end
end

local answers = {}
local t0 = lib.now_ms()
for i = 1, N do
  local id = eng:start({ cmd = { "true" } })
  if MODE == "cancel" then
    local a = eng:cancel(id)
    answers[a] = (answers[a] or 0) + 1
  end
  if i % 200 == 0 then take(0) end
end
local deadline = t0 + 300000
while done < N and lib.now_ms() < deadline do
  take(1000)
end
local wall = (t_last or lib.now_ms()) - t0

-- After the last terminal event: zombies below the shepherd, its fds.
local settle, z1, f1
local tz = t_last or lib.now_ms()
while lib.now_ms() - tz < 5000 do
  local z, f = zombies(shep), nfds(shep)
  local since = lib.now_ms() - tz
  if since >= 1000 and not z1 then
    z1, f1 = z, f - fds0
  end
  if z == 0 and f <= fds0 and not settle then settle = since end
  if settle and z1 then break end
  lib.uv.sleep(10)
end
local cpu1 = cpu(shep)
eng:close()
lib.result({
  n = N,
  mode = MODE,
  done = done,
  states = states,
  answers = answers,
  shepherd_cpu_us = (cpu1 - cpu0) / N,
  wall_ms = wall,
  per_exec_us = wall * 1000 / N,
  settle_ms = settle or -1,
  zombies_1s = z1,
  extra_fds_1s = f1,
  fds_before = fds0,
  all_terminal = done == N,
})
