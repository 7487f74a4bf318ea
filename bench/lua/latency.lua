-- bench/lua/latency.lua — workload 4 under lua5.4: write -> Lua event latency.
--
--   BENCH_COUNT, BENCH_PERIOD_MS  what bench/ticker prints (200 lines, 10 ms)
--
-- bench/ticker writes CLOCK_MONOTONIC ns at the start of each line; when
-- eng:wait() returns the output event we take luv's hrtime (same clock) and
-- record the difference for every complete line in it.

local lib = dofile(os.getenv("BENCH_ROOT") .. "/bench/lib.lua")
local core = require("proctor.core")

local COUNT = lib.param("BENCH_COUNT", 200, true)
local PERIOD = lib.param("BENCH_PERIOD_MS", 10, true)

local eng = assert(core.new({}))
eng:start({ cmd = { lib.bin("ticker"), tostring(COUNT), tostring(PERIOD) } })
local lat, partial, state = {}, "", nil
while not state do
  local evs = eng:wait(5000)
  local now = lib.now_ns()
  for _, ev in ipairs(evs) do
    if ev.type == "output" then
      local s = partial .. ev.data
      for ts in s:gmatch("(%d+) [^\n]*\n") do
        lat[#lat + 1] = (now - tonumber(ts)) / 1e6
      end
      partial = s:match("[^\n]*$")
    elseif ev.state == "completed" or ev.state == "failed" then
      state = ev.state
    end
  end
end
eng:close()
local st = lib.stats(lat)
lib.result({ state = state, n = st.n, p50_ms = st.p50, p99_ms = st.p99, max_ms = st.max })
