-- bench/nvim/spawn.lua — workload 3 in Neovim: TOTAL × `true`, at most 50 running.
--
--   BENCH_VARIANT     jobstart | luv_spawn | core
--   BENCH_TOTAL       how many (1000)
--   BENCH_CONCURRENT  the cap (50)
--
-- jobstart and vim.loop.spawn keep CONCURRENT children running and start the
-- next one from each exit callback; the core gets all TOTAL at once with
-- core.new{max_running = CONCURRENT}. wall_ms: first start to last exit seen
-- in the main loop.

local lib = dofile(os.getenv("BENCH_ROOT") .. "/bench/lib.lua")

local VARIANT = lib.param("BENCH_VARIANT", "jobstart")
local TOTAL = lib.param("BENCH_TOTAL", 1000, true)
local CONC = lib.param("BENCH_CONCURRENT", 50, true)

local variants = {}

function variants.jobstart(done)
  local started = 0
  local function one()
    started = started + 1
    vim.fn.jobstart({ "true" }, {
      on_exit = function(_, code)
        done(code ~= 0)
        if started < TOTAL then one() end
      end,
    })
  end
  for _ = 1, math.min(CONC, TOTAL) do
    one()
  end
end

function variants.luv_spawn(done)
  local uv = vim.loop
  local started = 0
  local function one()
    started = started + 1
    local h
    h = uv.spawn("true", { args = {} }, function(code)
      h:close()
      vim.schedule(function() done(code ~= 0) end)
      if started < TOTAL then one() end
    end)
  end
  for _ = 1, math.min(CONC, TOTAL) do
    one()
  end
end

function variants.core(done)
  local eng
  eng = lib.nvim_engine(
    { max_running = CONC, history_limit = TOTAL + 10, max_queued = TOTAL + 10 },
    function(evs)
      for _, ev in ipairs(evs) do
        if ev.type == "state" and (ev.state == "completed" or ev.state == "failed") then
          done(ev.state ~= "completed")
        end
      end
    end
  )
  for _ = 1, TOTAL do
    eng:start({ cmd = { "true" } })
  end
end

lib.nvim_main(function(finish)
  local n, failed = 0, 0
  local t0 = lib.now_ms()
  local function done(fail)
    n = n + 1
    if fail then failed = failed + 1 end
    if n == TOTAL then
      local wall = lib.now_ms() - t0
      finish({
        variant = VARIANT,
        n = n,
        failed = failed,
        wall_ms = wall,
        per_s = n / (wall / 1000),
      })
    end
  end
  assert(variants[VARIANT], "unknown variant " .. VARIANT)(done)
end)
