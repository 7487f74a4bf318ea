-- bench/nvim/problems.lua — problem matching over a big compile log (issue 17).
--
--   BENCH_VARIANT  make | proctor | proctor_console
--   BENCH_BYTES    how much bench/compile_log writes (a gcc log, a warning every 200 units)
--
-- `make`: what Vim offers -- :make! with 'makeprg' set to the generator and the
-- default 'errorformat' (the shell writes the log to a file, then Vim parses it;
-- the editor is blocked meanwhile). `proctor`: run{ diagnostics = "gcc",
-- quickfix = "always" }, no console; `proctor_console`: the same with its
-- console in the current window. Done when the quickfix list is set (make:
-- when :make returns; proctor: when the diagnostics run is done). Measured:
-- wall time, the 10 ms timer / vim.schedule probe during it, problems found vs
-- the generator's count, bytes the matcher never saw (the ring dropped them
-- before it read them), peak RSS.

local lib = dofile(os.getenv("BENCH_ROOT") .. "/bench/lib.lua")

local VARIANT = lib.param("BENCH_VARIANT", "proctor")
local BYTES = lib.param("BENCH_BYTES", 10 * 2 ^ 20, true)
local GEN = lib.bin("compile_log")

local variants = {}

function variants.make(done)
  vim.o.makeprg = GEN .. " " .. BYTES
  vim.cmd("silent make!")
  local qf = vim.fn.getqflist({ size = 0, items = 0 })
  local valid = 0
  for _, it in ipairs(qf.items) do
    if it.valid == 1 then valid = valid + 1 end
  end
  done({ found = valid })
end

local function proctor(done, console)
  local p = require("proctor")
  p.setup({ notify = "never", task_defaults = { max_problems = 100000 } })
  local D = require("proctor.tasks.diagnostics")
  local ex = assert(p.run({
    cmd = { GEN, tostring(BYTES) },
    pty = false,
    name = "build",
    diagnostics = "gcc",
    quickfix = "always",
  }))
  if console then ex:open({ open = "current" }) end
  lib.wait_until(5, 600000, function()
    local r = D.result(ex.id)
    if not (r and r.done) then return false end
    local eng = require("proctor.engine").current()
    local err = eng:read(ex.id, "stderr", 0, 4096) or ""
    local rec = p.record(ex.id)
    local qf = vim.fn.getqflist({ size = 0, title = 0 })
    done({
      found = r.count,
      expected = tonumber(err:match("warnings=(%d+)")),
      missed_bytes = r.missed,
      qf_size = qf.size,
      record_bytes = rec.bytes.stdout,
    })
    return true
  end, function() done({ error = "diagnostics never finished" }) end)
end

function variants.proctor(done) proctor(done, false) end
function variants.proctor_console(done) proctor(done, true) end

lib.nvim_main(function(finish)
  local v = assert(variants[VARIANT], "unknown variant " .. VARIANT)
  local probe = lib.probe()
  local t0 = lib.now_ms()
  v(function(res)
    res.wall_ms = lib.now_ms() - t0
    res.ms_per_mib = res.wall_ms / (BYTES / 2 ^ 20)
    local pr = probe.stop()
    res.timer, res.sched = pr.timer, pr.sched
    res.variant, res.bytes = VARIANT, BYTES
    if VARIANT == "make" then
      -- the generator's count, for the same comparison
      res.expected = tonumber(
        vim.fn
          .system({ "sh", "-c", GEN .. " " .. BYTES .. " 2>&1 >/dev/null" })
          :match("warnings=(%d+)")
      )
    end
    res.lost = res.expected ~= nil and res.found ~= res.expected
    finish(res)
  end)
end)
