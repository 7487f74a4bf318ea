-- bench/nvim/cancel.lua — workload 5 in Neovim: stop a process tree.
--
--   BENCH_VARIANT   core | jobstop | luv_kill
--   BENCH_TREE      "term" (honours SIGTERM), "ignore" (ignores it) or "leader"
--                   (the leader exits on it, the rest of its group ignores it)
--   BENCH_GRACE_MS  grace before SIGKILL for core and luv_kill (500);
--                   jobstop's is Neovim's own (KILL_TIMEOUT_MS, 2 s)
--   BENCH_PIDFILE   where bench/tree.sh lists its pids
--
-- Starts bench/tree.sh, waits until its 4 pids are listed, then measures stop
-- request -> exit/terminal callback in the main loop, and counts the tree's
-- processes alive at that moment and still alive 100 ms later ("survived";
-- then they are killed by pid).
--   core      proctor.core in Neovim: eng:cancel(id); SIGTERM to the group, SIGKILL at grace
--   jobstop   jobstart + jobstop()
--   luv_kill  vim.loop.spawn + handle:kill("sigterm"), "sigkill" after the grace

local lib = dofile(os.getenv("BENCH_ROOT") .. "/bench/lib.lua")
local uv = vim.loop

local VARIANT = lib.param("BENCH_VARIANT", "core")
local TREE = lib.param("BENCH_TREE", "term")
local GRACE = lib.param("BENCH_GRACE_MS", 500, true)
local PIDFILE = assert(lib.param("BENCH_PIDFILE"), "BENCH_PIDFILE")
local CMD = { lib.root .. "/bench/tree.sh", TREE, PIDFILE }

-- Each variant starts the tree and returns stop(); it calls ended(extra) once.
local variants = {}

function variants.core(ended)
  local eng, id
  eng = lib.nvim_engine({ kill_grace_ms = GRACE }, function(evs)
    for _, ev in ipairs(evs) do
      if
        ev.type == "state"
        and (ev.state == "canceled" or ev.state == "failed" or ev.state == "completed")
      then
        ended(
          { state = ev.state, reason = ev.reason, grace_ms = GRACE },
          function() eng:close() end
        )
      end
    end
  end)
  id = eng:start({ cmd = CMD })
  return function() return eng:cancel(id) end
end

function variants.jobstop(ended)
  local job = vim.fn.jobstart(CMD, {
    on_exit = function(_, code) ended({ exit_code = code, grace_ms = 2000 }) end,
  })
  return function() return vim.fn.jobstop(job) end
end

function variants.luv_kill(ended)
  local h
  local killer = uv.new_timer()
  h = uv.spawn(CMD[1], { args = { CMD[2], CMD[3] } }, function(code, sig)
    killer:stop()
    killer:close()
    h:close()
    vim.schedule(function() ended({ exit_code = code, signal = sig, grace_ms = GRACE }) end)
  end)
  return function()
    h:kill("sigterm")
    killer:start(GRACE, 0, function()
      if not h:is_closing() then h:kill("sigkill") end
    end)
    return true
  end
end

lib.nvim_main(function(finish)
  local t0
  local function ended(res, cleanup)
    local t1 = lib.now_ms()
    -- A process SIGKILLed a moment ago may still be on its way out (state R);
    -- it counts as surviving only if it is still there 100 ms later.
    local pids = lib.read_pids(PIDFILE)
    res.alive_at_end = lib.count_alive(pids)
    uv.sleep(100)
    res.survived, res.survivors = lib.survivors(pids)
    if cleanup then cleanup() end
    res.variant, res.tree = VARIANT, TREE
    res.cancel_ms = t1 - t0
    res.over_grace_ms = TREE ~= "term" and res.cancel_ms - res.grace_ms or nil
    finish(res)
  end
  local stop = assert(variants[VARIANT], "unknown variant " .. VARIANT)(ended)
  lib.wait_until(2, 5000, function()
    if #lib.read_pids(PIDFILE) < 4 then return false end
    t0 = lib.now_ms()
    stop()
    return true
  end, function() finish({ error = "the tree did not start" }) end)
end)
