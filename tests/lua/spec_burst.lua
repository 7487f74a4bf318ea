-- spec_burst.lua — bursts of executions with no cap: every one ends, and the
-- shepherd is left with no zombie and no descriptor more than it had before.
-- How fast is for bench/ (the burst workload); these check that nothing is
-- left behind, with margins a loaded machine keeps.
local U = require("util")
local core = U.core

return function(T, ctx)
  local P = ctx and ctx.nvim and "nvim: " or ""
  local function test(name, fn) T.test(P .. "burst: " .. name, fn) end
  -- 2,000 under lua5.4: before the per-job reapers the shepherd's work was
  -- quadratic in its live children, and 5,000 left 4,500-4,900 zombies 5 s
  -- after the last terminal event (about a tenth of the work done); 2,000 is
  -- 16 % of that work, still more than got done, so the old code still fails.
  -- Whether the cost per execution stays flat is make bench's (1k/5k/10k);
  -- here every execution is 2-3 forks, ~15 ms each on a loaded 2-core machine.
  local N = U.count(ctx, "BURST", 2000, 1000, 300)

  -- The shepherd of an engine, found above one of its jobs.
  local function shepherd_of(eng)
    local id = assert(eng:start { cmd = { "sleep", "1000" } })
    U.wait_state(eng, id, "running")
    local found = U.shepherd(eng:get(id).pid)
    T.eq(eng:cancel(id, true), "canceling")
    U.collect(eng, { id }, 10000)
    return assert(found, "no shepherd above the job")
  end

  -- Every process below `pid` ({pid, state}), by the kernel's children lists
  -- (of each process's main thread).
  local function below(pid)
    local out, todo = {}, { pid }
    while #todo > 0 do
      local p = table.remove(todo)
      -- the shepherd and its helpers are single-threaded: one children list each
      for c in (U.read_file("/proc/" .. p .. "/task/" .. p .. "/children") or ""):gmatch("%d+") do
        local st = U.read_file("/proc/" .. c .. "/stat")
        out[#out + 1] = { pid = tonumber(c), state = st and st:match("%) (%a)") or "?" }
        todo[#todo + 1] = c
      end
    end
    return out
  end

  local function zombies(pid)
    local n = 0
    for _, p in ipairs(below(pid)) do
      if p.state == "Z" then n = n + 1 end
    end
    return n
  end

  local function nfds(pid)
    local n = 0
    for _ in U.sh("ls /proc/" .. pid .. "/fd"):gmatch("%d+") do
      n = n + 1
    end
    return n
  end

  -- Start `n` executions at once, `cancel` each right after its start when
  -- set, and wait for every terminal event. Returns the terminal states.
  local function burst(eng, n, cancel, cmd)
    local ids, answers = {}, {}
    for i = 1, n do
      ids[i] = assert(eng:start { cmd = cmd })
      if cancel then answers[ids[i]] = eng:cancel(ids[i]) end
      if i % 200 == 0 then U.pump(eng, 0) end
    end
    local res = U.collect(eng, ids, 240000)
    for _, id in ipairs(ids) do
      U.forget(eng, id)
    end
    return res, ids, answers
  end

  -- After the last terminal event the shepherd must get back to where it
  -- was: no zombie anywhere below it, its descriptors as before.
  local function settles(shep, fds0)
    local z, f
    local ok = U.wait_until(function()
      z, f = zombies(shep), nfds(shep)
      return z == 0 and f <= fds0
    end, 5000, 50)
    T.ok(
      ok,
      ("5 s after the last terminal event: %d zombies below the shepherd, %d fds (%d before)"):format(
        z,
        f,
        fds0
      )
    )
  end

  test(
    N .. " x true at once, no cap: all complete, no zombie, the shepherd's fds as before",
    function()
      local eng = assert(core.new { history_limit = 100000 })
      local shep = shepherd_of(eng)
      local fds0 = nfds(shep)
      local res, ids = burst(eng, N, false, { U.true_bin })
      local done = 0
      for _, id in ipairs(ids) do
        if res[id].final.state == "completed" then done = done + 1 end
      end
      T.eq(done, N, "completed")
      settles(shep, fds0)
      eng:close()
    end
  )

  test(N .. " starts each canceled at once, no cap: each ends once, as its answer says", function()
    local eng = assert(core.new { history_limit = 100000 })
    local shep = shepherd_of(eng)
    local fds0 = nfds(shep)
    local res, ids, answers = burst(eng, N, true, { U.true_bin })
    local begun = 0
    for _, id in ipairs(ids) do
      T.eq(answers[id], "canceling", "answer for " .. id)
      T.eq(res[id].final.state, "canceled", "state of " .. id)
      if res[id].final.record.started_at then begun = begun + 1 end
    end
    -- a cancel in the engine's batch of its start ends it from queued, with
    -- no process; one that came later finds its process started (a figure)
    T.say(("# %d of %d canceled starts had their process started"):format(begun, N))
    settles(shep, fds0)
    eng:close()
  end)
end
