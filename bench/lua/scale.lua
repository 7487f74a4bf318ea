-- bench/lua/scale.lua — workload 7 under lua5.4: many idle executions, big history.
--
--   BENCH_IDLE     how many `sleep 60` run at once (1000)
--   BENCH_HISTORY  how many terminal records to purge (100000)
--
-- Memory per idle execution: VmRSS growth of this process (the host) and of
-- the shepherd from 1 to IDLE running executions, divided by IDLE - 1; and
-- what each job's reaper (a fork of the shepherd, one per live job) costs:
-- its proportional set size (Pss: its private pages plus its share of the
-- pages it shares with the shepherd and the other reapers) and its page
-- tables (VmPTE), averaged over the reapers. Then the time of eng:list()
-- over them (median of 5).
-- History: with max_running = 1 and one blocker running, HISTORY executions
-- are started (they queue) and canceled while queued, which makes terminal
-- records without spawning; then eng:purge{older_than_ms = 0} is timed.

local lib = dofile(os.getenv("BENCH_ROOT") .. "/bench/lib.lua")
local core = require("proctor.core")

local IDLE = lib.param("BENCH_IDLE", 1000, true)
local HISTORY = lib.param("BENCH_HISTORY", 100000, true)

local function wait_running(eng, want, limit_ms)
  local running, deadline = 0, lib.now_ms() + limit_ms
  local pid
  while running < want and lib.now_ms() < deadline do
    for _, ev in ipairs(eng:wait(1000)) do
      if ev.type == "state" and ev.state == "running" then
        running = running + 1
        pid = pid or ev.pid
      end
    end
  end
  return running, pid
end

local res = {}
local eng = assert(core.new({ history_limit = IDLE + 10 }))
local first = eng:start({ cmd = { "sleep", "60" } })
local _, pid = wait_running(eng, 1, 10000)
pid = pid or eng:get(first).pid
local shep = lib.ppid(lib.ppid(pid)) -- leader -> its reaper -> the shepherd
collectgarbage()
local host0, shep0 = lib.mem().VmRSS, lib.mem(shep).VmRSS
local t0 = lib.now_ms()
for _ = 2, IDLE do
  eng:start({ cmd = { "sleep", "60" } })
end
local running = wait_running(eng, IDLE - 1, 120000) + 1
res.start_ms = lib.now_ms() - t0
collectgarbage()
local host1, shep1 = lib.mem().VmRSS, lib.mem(shep).VmRSS
res.running = running
res.host_kib_per_exec = (host1 - host0) / (IDLE - 1)
res.shepherd_kib_per_exec = (shep1 - shep0) / (IDLE - 1)
-- The reapers: the shepherd's children.
local function field(path, key)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return tonumber(s:match(key .. ":%s+(%d+) kB"))
end
local f = io.open("/proc/" .. shep .. "/task/" .. shep .. "/children")
local kids = f and f:read("a") or ""
if f then f:close() end
local nr, pss, pte = 0, 0, 0
for r in kids:gmatch("%d+") do
  local a, b =
    field("/proc/" .. r .. "/smaps_rollup", "Pss"), field("/proc/" .. r .. "/status", "VmPTE")
  if a and b then
    nr, pss, pte = nr + 1, pss + a, pte + b
  end
end
res.reapers = nr
res.reaper_pss_kib = nr > 0 and pss / nr or nil
res.reaper_pte_kib = nr > 0 and pte / nr or nil
local lt = {}
for i = 1, 5 do
  local t = lib.now_ms()
  local l = eng:list()
  lt[i] = lib.now_ms() - t
  res.listed = #l
end
res.list_ms = lib.stats(lt).p50
local tc = lib.now_ms()
eng:close()
res.close_ms = lib.now_ms() - tc

-- History records.
-- (all of them wait at once: max_queued is raised past its default 10000)
local eng2 =
  assert(core.new({ max_running = 1, history_limit = HISTORY + 10, max_queued = HISTORY + 10 }))
eng2:start({ cmd = { "sleep", "60" } })
local th = lib.now_ms()
local ids = {}
for i = 1, HISTORY do
  ids[i] = eng2:start({ cmd = { "true" } })
  if i % 1000 == 0 then eng2:poll(65536) end
end
for i = 1, HISTORY do
  eng2:cancel(ids[i])
  if i % 1000 == 0 then eng2:poll(65536) end
end
while #eng2:poll(65536) > 0 do
end
res.history_make_ms = lib.now_ms() - th
local tp = lib.now_ms()
res.purged = eng2:purge({ older_than_ms = 0 })
res.purge_ms = lib.now_ms() - tp
eng2:close()
res.rss_kib = lib.mem().VmHWM
lib.result(res)
