-- bench/nvim/latency.lua — workload 4 in Neovim: child write -> Lua callback.
--
--   BENCH_VARIANT  jobstart | core_fast | core_sched | proctor
--   BENCH_COUNT, BENCH_PERIOD_MS  what bench/ticker prints (200 lines, 10 ms)
--
-- bench/ticker writes CLOCK_MONOTONIC ns at the start of each 80-byte line;
-- the callback takes vim.loop.hrtime() (same clock) and records the difference
-- for every complete line it received.
--   jobstart    on_stdout (main loop)
--   core_fast   proctor.core: eng:poll() right in the wake-fd poll callback
--               (libuv callback, "fast" context: no editor API allowed there)
--   core_sched  proctor.core: wake fd -> vim.schedule -> eng:poll() (main loop,
--               where a console can be updated)
--   proctor     the Neovim layer's on_output callback

local lib = dofile(os.getenv("BENCH_ROOT") .. "/bench/lib.lua")

local VARIANT = lib.param("BENCH_VARIANT", "jobstart")
local COUNT = lib.param("BENCH_COUNT", 200, true)
local PERIOD = lib.param("BENCH_PERIOD_MS", 10, true)
local CMD = { lib.bin("ticker"), tostring(COUNT), tostring(PERIOD) }

local lat, partial = {}, ""
local function record(data, now)
  local s = partial .. data
  for ts in s:gmatch("(%d+) [^\n]*\n") do
    lat[#lat + 1] = (now - tonumber(ts)) / 1e6
  end
  partial = s:match("[^\n]*$")
end

local variants = {}

function variants.jobstart(exited)
  vim.fn.jobstart(CMD, {
    on_stdout = function(_, data) record(table.concat(data, "\n"), lib.now_ns()) end,
    on_exit = exited,
  })
end

function variants.core_fast(exited)
  local core = require("proctor.core")
  local eng = assert(core.new({}))
  local poll = vim.loop.new_poll(eng:fd())
  poll:start("r", function()
    local now = lib.now_ns()
    for _, ev in ipairs(eng:poll()) do
      if ev.type == "output" then
        record(ev.data, now)
      elseif ev.state == "completed" or ev.state == "failed" then
        poll:stop()
        poll:close()
        vim.schedule(function()
          eng:close()
          exited()
        end)
      end
    end
  end)
  eng:start({ cmd = CMD })
end

function variants.core_sched(exited)
  local eng
  eng = lib.nvim_engine({}, function(evs)
    local now = lib.now_ns()
    for _, ev in ipairs(evs) do
      if ev.type == "output" then
        record(ev.data, now)
      elseif ev.state == "completed" or ev.state == "failed" then
        eng:close()
        exited()
      end
    end
  end)
  eng:start({ cmd = CMD })
end

function variants.proctor(exited)
  local proctor = require("proctor")
  proctor.setup({ notify = "never" })
  assert(proctor.run({
    cmd = CMD,
    on_output = function(_, _, data) -- (execution, stream, data)
      record(data, lib.now_ns())
    end,
    on_exit = function() vim.schedule(exited) end,
  }))
end

lib.nvim_main(function(finish)
  assert(variants[VARIANT], "unknown variant " .. VARIANT)(function()
    local st = lib.stats(lat)
    finish({ variant = VARIANT, n = st.n, p50_ms = st.p50, p99_ms = st.p99, max_ms = st.max })
  end)
end)
