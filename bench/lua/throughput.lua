-- bench/lua/throughput.lua — workload 2: engine throughput under lua5.4.
--
--   BENCH_BYTES         how much bench/flood writes
--   BENCH_BACKPRESSURE  "1": start with backpressure = true (lossless: the
--                       engine pauses the pipe when the ring is full)
--
-- Loops eng:wait() until the terminal event, counting delivered and missed
-- bytes. wall_ms runs from eng:start to the terminal event.

local lib = dofile(os.getenv("BENCH_ROOT") .. "/bench/lib.lua")
local core = require("proctor.core")

local BYTES = lib.param("BENCH_BYTES", 100 * 2 ^ 20, true)
local BP = lib.param("BENCH_BACKPRESSURE", "0") == "1"

local eng = assert(core.new({}))
local t0 = lib.now_ms()
eng:start({ cmd = { lib.bin("flood"), string.format("%d", BYTES) }, backpressure = BP })
local got, missed, events, state = 0, 0, 0, nil
while not state do
  for _, ev in ipairs(eng:wait(5000)) do
    events = events + 1
    if ev.type == "output" then
      got = got + #ev.data
      missed = missed + ev.missed
    elseif ev.state == "completed" or ev.state == "failed" then
      state = ev.state
    end
  end
end
local wall = lib.now_ms() - t0
local cpu = os.clock()
eng:close()
lib.result({
  state = state,
  bytes = BYTES,
  delivered = got,
  missed = missed,
  lost = got ~= BYTES,
  events = events,
  wall_ms = wall,
  mib_per_s = got / 2 ^ 20 / (wall / 1000),
  host_cpu_ms = cpu * 1000,
  rss_kib = lib.mem().VmHWM,
})
