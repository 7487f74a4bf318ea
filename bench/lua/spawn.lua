-- bench/lua/spawn.lua — workload 3 under lua5.4: TOTAL × `true`, at most 50 running.
--
--   BENCH_TOTAL       how many executions (1000)
--   BENCH_CONCURRENT  core.new{max_running = ...} (50)
--
-- All executions are started at once (the engine queues them); wall_ms runs
-- from the first start to the last terminal event.

local lib = dofile(os.getenv("BENCH_ROOT") .. "/bench/lib.lua")
local core = require("proctor.core")

local TOTAL = lib.param("BENCH_TOTAL", 1000, true)
local CONC = lib.param("BENCH_CONCURRENT", 50, true)

local eng =
  assert(core.new({ max_running = CONC, history_limit = TOTAL + 10, max_queued = TOTAL + 10 }))
local t0 = lib.now_ms()
for _ = 1, TOTAL do
  eng:start({ cmd = { "true" } })
end
local t_started = lib.now_ms() - t0
local done, failed = 0, 0
while done < TOTAL do
  for _, ev in ipairs(eng:wait(5000)) do
    if ev.type == "state" then
      if ev.state == "completed" then
        done = done + 1
      elseif ev.state == "failed" or ev.state == "canceled" or ev.state == "timed_out" then
        done, failed = done + 1, failed + 1
      end
    end
  end
end
local wall = lib.now_ms() - t0
eng:close()
lib.result({
  n = TOTAL,
  failed = failed,
  wall_ms = wall,
  start_calls_ms = t_started,
  per_s = TOTAL / (wall / 1000),
})
