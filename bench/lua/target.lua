-- bench/lua/target.lua — workload 11 under lua5.4: an ssh target (|proctor-targets|) over
-- the loopback sshd of tests/target/run (which runs this file: TARGET_SCRIPT), against
-- plain `ssh host cmd`.
--
--   BENCH_VARIANT  proctor: executions on the target (one shared transport, warmed up by
--                  one run first); ssh: `ssh -F <config> proctor-test cmd`, a connection each
--   BENCH_N        short runs (`true`), one after the other (30)
--   BENCH_BYTES    the flood: `head -c BYTES /dev/zero` on the far side (100 MiB)
--
-- short.p50/p99: ms from the start to the end of one `true`; flood_ms: the flood's wall
-- (proctor: every byte taken from the events, backpressure on; ssh: read by this process).

local lib = dofile(os.getenv("BENCH_ROOT") .. "/bench/lib.lua")
local core = require("proctor.core")

local VARIANT = lib.param("BENCH_VARIANT", "proctor")
local N = lib.param("BENCH_N", 30, true)
local BYTES = lib.param("BENCH_BYTES", 100 * 1024 * 1024, true)
local config = assert(os.getenv("TARGET_SSH_CONFIG"), "run through tests/target/run")
local root = os.getenv("BENCH_ROOT")
local SSH = ("ssh -F %s -T proctor-test %s/build/proctor-shepherd --relay"):format(config, root)
local flood = "head -c " .. BYTES .. " /dev/zero"

local short, got = {}, 0
local flood_ms
if VARIANT == "proctor" then
  local eng = assert(core.new({ drain_ms = 300, history_limit = N + 10 }))
  local function run(cmd, count)
    local id = assert(eng:start({ cmd = cmd, target = "b", transport = SSH, backpressure = true }))
    while true do
      for _, ev in ipairs(eng:wait(1000, 4096)) do
        if ev.id == id and ev.type == "output" and count then got = got + #ev.data end
        if ev.id == id and ev.type == "state" then
          if ev.state == "completed" then return end
          if ev.state == "failed" or ev.state == "canceled" or ev.state == "timed_out" then
            error("the run ended " .. ev.state .. ": " .. tostring(ev.error))
          end
        end
      end
    end
  end
  run({ "true" }) -- the transport is up from here on
  for i = 1, N do
    local t0 = lib.now_ms()
    run({ "true" })
    short[i] = lib.now_ms() - t0
  end
  local t0 = lib.now_ms()
  run({ "sh", "-c", flood }, true)
  flood_ms = lib.now_ms() - t0
  eng:close()
else
  local ssh = "ssh -F " .. config .. " -T proctor-test "
  for i = 1, N do
    local t0 = lib.now_ms()
    assert(os.execute(ssh .. "true"))
    short[i] = lib.now_ms() - t0
  end
  local t0 = lib.now_ms()
  local p = assert(io.popen(ssh .. "'" .. flood .. "'", "r"))
  while true do
    local s = p:read(65536)
    if not s then break end
    got = got + #s
  end
  p:close()
  flood_ms = lib.now_ms() - t0
end
assert(got == BYTES, ("the flood gave %d of %d bytes"):format(got, BYTES))
lib.result({
  short = lib.stats(short),
  flood_ms = flood_ms,
  mib_s = BYTES / 1048576 / (flood_ms / 1000),
  wall_ms = flood_ms,
})
