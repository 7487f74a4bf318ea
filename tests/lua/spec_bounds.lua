-- spec_bounds.lua — memory bounds of the engine (doc *proctor-limits*): queued
-- and held executions per session, and the output ended executions keep.
-- Growth is asserted against wide margins (VmRSS, counts), never timings.
local U = require("util")
local core = U.core

return function(T, ctx)
  local P = ctx and ctx.nvim and "nvim: " or ""
  local function test(name, fn) T.test(P .. "bounds: " .. name, fn) end
  local function rss() return U.status_field("self", "VmRSS") end

  test("queued and held executions are bounded per session: past max_queued, EBUSY", function()
    local cap, tries = 1000, 20000
    local eng = assert(core.new { max_queued = cap, history_limit = 10 })
    T.defer(function() eng:close() end)
    collectgarbage()
    local before = rss()
    local ids, refused, msg, name = {}, 0, nil, nil
    for _ = 1, tries do
      local id, m, n = eng:start { cmd = { "true" }, hold = true }
      if id then
        ids[#ids + 1] = id
      else
        refused, msg, name = refused + 1, m, n
      end
    end
    collectgarbage()
    local grown = rss() - before
    T.eq(#ids, cap, "held executions admitted")
    T.eq(refused, tries - cap, "starts refused")
    T.eq(name, "EBUSY")
    T.ok(msg:find("max_queued", 1, true), "the message says why: " .. tostring(msg))
    -- 20000 held starts cost about 150 MB before the bound; 1000 cost a few MB
    T.ok(grown < 48 * 1024, ("host grew %d KiB for %d held starts"):format(grown, tries))
    -- an execution that leaves the queue (canceled while held) frees its place
    T.eq(eng:cancel(ids[1]), "canceling")
    U.collect(eng, { ids[1] }, 10000)
    local again = assert(eng:start { cmd = { "true" }, hold = true })
    T.eq(select(3, eng:start { cmd = { "true" }, hold = true }), "EBUSY")
    -- a released one begins and frees its place too
    T.eq(eng:release(again), true)
    U.collect(eng, { again }, 10000)
    T.ok(eng:start { cmd = { "true" }, hold = true }, "a place after a release")
  end)

  test("the queued bound counts what waits, not what runs", function()
    local eng = assert(core.new { max_queued = 4, max_running = 2 })
    T.defer(function() eng:close() end)
    local ids = {}
    -- a start counts from the moment it is submitted until it begins
    for i = 1, 2 do
      ids[i] = assert(eng:start { cmd = { "sleep", "60" } })
    end
    T.ok(
      U.wait_until(function() return eng:get(ids[2]).state == "running" end, 10000),
      "two running"
    )
    for i = 3, 6 do
      ids[i] = assert(eng:start { cmd = { "sleep", "60" } })
    end -- 4 wait
    local _, _, name = eng:start { cmd = { "true" } }
    T.eq(name, "EBUSY", "a seventh (fifth waiting)")
    T.eq(eng:cancel(ids[1]), "canceling") -- one ends, a waiting one begins: a place frees
    T.ok(
      U.wait_until(function() return eng:get(ids[3]).state == "running" end, 10000),
      "the third began"
    )
    local id = assert(eng:start { cmd = { "true" } })
    for _, x in ipairs(ids) do
      eng:cancel(x)
    end
    ids[#ids + 1] = id
    U.collect(eng, ids, 20000)
  end)

  test(
    "ended executions keep at most ended_output_max of output together (oldest cut to a tail)",
    function()
      local MiB = 1048576
      local budget, n, each = 8 * MiB, 12, 3 * MiB
      local eng =
        assert(core.new { output_limit = 4 * MiB, ended_output_max = budget, history_limit = 100 })
      T.defer(function() eng:close() end)
      collectgarbage()
      local before = rss()
      local ids = {}
      for i = 1, n do
        ids[i] = assert(eng:start { cmd = { "head", "-c", tostring(each), "/dev/zero" } })
        -- one after the other (the oldest ended first); the events' bytes are dropped here
        local deadline = U.now() + 30000
        repeat
          for _, ev in ipairs(eng:wait(200, 1024, 65536)) do
            if ev.type == "state" and ev.id == ids[i] and U.terminal[ev.state] then
              deadline = nil
            end
          end
          T.ok(deadline == nil or U.now() < deadline, "run " .. i .. " did not end")
        until deadline == nil
      end
      collectgarbage()
      local grown = rss() - before
      local kept, cut = 0, 0
      for i, id in ipairs(ids) do
        local rec = eng:get(id)
        T.eq(rec.bytes.stdout, each, "bytes counted")
        kept = kept + rec.bytes.stdout - rec.dropped.stdout
        if rec.dropped.stdout > 0 then
          cut = cut + 1
          T.eq(rec.bytes.stdout - rec.dropped.stdout, 65536, "a cut ring keeps its 64 KiB tail")
          -- reading it reports what was dropped
          local data, nxt, missed = eng:read(id, "stdout", 0, each)
          T.eq(missed, each - 65536)
          T.eq(#data, 65536)
          T.eq(nxt, each)
        end
        if i == n then T.eq(rec.dropped.stdout, 0, "the newest keeps everything") end
      end
      T.ok(kept <= budget + n * 65536, ("ended rings keep %d bytes"):format(kept))
      T.ok(cut >= n - 3, ("only %d of %d rings cut"):format(cut, n))
      -- without the budget 12 × 3 MiB = 36 MiB stay; with it, about 8
      T.say(
        ("# %d ended runs of %d MiB: %d rings cut, %d KiB kept, host grew %d KiB"):format(
          n,
          math.floor(each / MiB),
          cut,
          math.floor(kept / 1024),
          grown
        )
      )
      T.ok(grown < 24 * 1024, ("host grew %d KiB"):format(grown))
    end
  )
end
