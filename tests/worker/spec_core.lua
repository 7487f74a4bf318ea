-- tests/worker/spec_core.lua — supervised workers through the Lua core (lua5.4).
--
-- Run by tests/worker/run with LUA_CPATH=build/lua5.4/?.so;; and
-- LUA_PATH=tests/lua/?.lua;; from the repository root.

local T = require("harness")
local core = require("proctor.core")

local PY = "/usr/bin/python3"
local WORKER = "examples/worker.py"
local MPWORKER = "tests/worker/mp_worker.py"

local function now_ms() return core.hrtime() / 1e6 end

-- Pump events of `eng` into handlers until done() or timeout_ms passes.
local function pump(eng, h, done, timeout_ms)
  local deadline = now_ms() + (timeout_ms or 10000)
  while not done() do
    if now_ms() > deadline then error("timed out waiting", 2) end
    for _, ev in ipairs(eng:wait(50, 4096)) do
      local f = h[ev.type]
      if f then f(ev) end
    end
  end
end

local function start_worker(eng, args, worker)
  local cmd = { PY, WORKER }
  for _, a in ipairs(args or {}) do
    cmd[#cmd + 1] = a
  end
  return assert(eng:start { cmd = cmd, worker = worker or { protocol = "jsonl" } })
end

-- Pump for `ms` milliseconds whatever happens.
local function drain_for(eng, h, ms)
  local deadline = now_ms() + ms
  while now_ms() < deadline do
    for _, ev in ipairs(eng:wait(10, 4096)) do
      local f = h[ev.type]
      if f then f(ev) end
    end
  end
end

local function wait_state(eng, id, ws, timeout_ms)
  local seen
  pump(eng, {
    worker = function(ev)
      if ev.id == id then seen = ev.worker_state end
    end,
  }, function() return seen == ws end, timeout_ms)
end

local function pct(t, p)
  table.sort(t)
  return t[math.max(1, math.ceil(#t * p))]
end

T.test("pipelined 10000 requests answered out of order reach their requests", function()
  local eng = assert(core.new())
  local id = start_worker(eng)
  wait_state(eng, id, "ready")
  local want, order = {}, {}
  local t0 = now_ms()
  for i = 1, 10000 do
    local rid = assert(
      eng:worker_request(id, { op = "echo", value = { n = i, s = "v" .. i }, ms = (i * 7) % 4 })
    )
    want[rid] = i
  end
  local got, bad = 0, 0
  pump(eng, {
    reply = function(ev)
      got = got + 1
      order[#order + 1] = want[ev.rid]
      if
        not ev.ok
        or type(ev.result) ~= "table"
        or ev.result.n ~= want[ev.rid]
        or ev.result.s ~= "v" .. want[ev.rid]
      then
        bad = bad + 1
      end
      want[ev.rid] = nil
    end,
  }, function() return got == 10000 end, 60000)
  local dt = now_ms() - t0
  T.eq(bad, 0, "replies matching their requests")
  T.eq(next(want), nil, "every request answered")
  local inversions = 0
  for i = 2, #order do
    if order[i] < order[i - 1] then inversions = inversions + 1 end
  end
  T.ok(inversions > 100, "answered out of order (" .. inversions .. " inversions)")
  T.say(
    string.format(
      "# pipelined: 10000 requests in %.0f ms (%.0f req/s, %d out of order)",
      dt,
      10000 / dt * 1000,
      inversions
    )
  )
  eng:close()
end)

T.test("round trip of small requests (p50/p99, sequential)", function()
  local eng = assert(core.new())
  local id = start_worker(eng)
  wait_state(eng, id, "ready")
  local lat = {}
  for i = 1, 2000 do
    local t0 = core.hrtime()
    local rid = eng:worker_request(id, { op = "echo", value = i })
    local done = false
    pump(eng, {
      reply = function(ev)
        if ev.rid == rid then done = ev.ok end
      end,
    }, function() return done end)
    lat[#lat + 1] = (core.hrtime() - t0) / 1e3
  end
  local p50, p99 = pct(lat, 0.5), pct(lat, 0.99)
  T.say(
    string.format(
      "# round trip: p50 %.0f us, p99 %.0f us, %.0f req/s sequential",
      p50,
      p99,
      1e6
        / (function()
          local s = 0
          for _, v in ipairs(lat) do
            s = s + v
          end
          return s / #lat
        end)()
    )
  )
  -- the figures are printed, not judged: speed is make bench's
  eng:close()
end)

T.test("chunks arrive in order and before the final reply", function()
  local eng = assert(core.new())
  local id = start_worker(eng)
  local a = eng:worker_request(id, { op = "stream", n = 200, value = "a" })
  local b = eng:worker_request(id, { op = "stream", n = 50, ms = 1, value = "b" })
  local chunks, replies = { [a] = {}, [b] = {} }, {}
  pump(eng, {
    chunk = function(ev)
      T.ok(not replies[ev.rid], "chunk after the reply")
      table.insert(chunks[ev.rid], ev.data.i)
    end,
    reply = function(ev) replies[ev.rid] = ev end,
  }, function() return replies[a] and replies[b] end)
  T.eq(#chunks[a], 200)
  T.eq(#chunks[b], 50)
  for i, v in ipairs(chunks[a]) do
    T.eq(v, i - 1, "order of a")
  end
  for i, v in ipairs(chunks[b]) do
    T.eq(v, i - 1, "order of b")
  end
  T.eq(replies[a].result.chunks, 200)
  eng:close()
end)

T.test("cancel of one in-flight request resolves it canceled, once; the others complete", function()
  local eng = assert(core.new())
  T.defer(function() eng:close() end)
  -- --ignore-cancel: this worker answers the canceled request anyway, later;
  -- proctor must drop that answer (exactly one reply per request).
  local id = start_worker(eng, { "--ignore-cancel" })
  wait_state(eng, id, "ready")
  local rids = {}
  for i = 1, 5 do
    rids[i] = eng:worker_request(id, { op = "echo", value = i, ms = 300 })
  end
  local replies, t_resolved = {}, nil
  local h = {
    reply = function(ev)
      replies[ev.rid] = (replies[ev.rid] or 0) + 1
      if ev.rid == rids[3] then
        T.eq(ev.status, "canceled")
        T.eq(ev.ok, false)
        t_resolved = now_ms()
      elseif ev.rid ~= rids.fence then
        T.eq(ev.ok, true)
        T.eq(
          ev.result,
          (function()
            for k, r in ipairs(rids) do
              if r == ev.rid then return k end
            end
          end)()
        )
      end
    end,
  }
  local t0 = now_ms()
  T.eq(eng:worker_cancel(rids[3]), true)
  pump(eng, h, function() return t_resolved ~= nil end, 10000)
  T.say(string.format("# cancel resolved after %.2f ms", t_resolved - t0))
  local r, _, name = eng:worker_cancel(rids[3])
  T.eq(r, nil)
  T.eq(name, "ENOENT")
  -- A fence due after the canceled request's late answer: once its reply is
  -- here, a second reply for rids[3] would have come too.
  rids.fence = eng:worker_request(id, { op = "echo", value = "fence", ms = 300 })
  pump(eng, h, function() return replies[rids.fence] end, 10000)
  for i = 1, 5 do
    T.eq(replies[rids[i]], 1, "replies for request " .. i)
  end
  T.eq(replies[rids[3]], 1, "one reply for the canceled request")
  -- a canceled stream stops (the worker got the cancel message)
  local id2 = start_worker(eng)
  local s = eng:worker_request(id2, { op = "stream", n = 100000, ms = 1 })
  local nchunks, sreply = 0, nil
  local hs = {
    chunk = function(ev)
      if ev.rid == s then nchunks = nchunks + 1 end
    end,
    reply = function(ev)
      if ev.rid == s then sreply = ev end
    end,
  }
  pump(eng, hs, function() return nchunks >= 5 end)
  eng:worker_cancel(s)
  pump(eng, hs, function() return sreply ~= nil end, 10000)
  T.eq(sreply.status, "canceled")
  -- no chunk of the canceled stream is delivered after its reply (a fence on
  -- the same worker: chunks it wrote before its answer to a later request
  -- have been seen by then)
  local f2 = eng:worker_request(id2, { op = "echo", value = "fence" })
  local fenced, after = false, 0
  pump(eng, {
    chunk = function(ev)
      if ev.rid == s and fenced then after = after + 1 end
    end,
    reply = function(ev)
      if ev.rid == f2 then fenced = true end
    end,
  }, function() return fenced end, 10000)
  T.eq(after, 0, "chunks of the canceled stream after the worker answered a later request")
end)

T.test("request timeout resolves timeout, once: the worker's late answer is dropped", function()
  local eng = assert(core.new())
  T.defer(function() eng:close() end)
  -- --ignore-cancel: the worker answers the timed-out request anyway, late
  local id = start_worker(eng, { "--ignore-cancel" })
  local slow = eng:worker_request(id, { op = "echo", value = 1, ms = 1000 }, { timeout_ms = 50 })
  local fast = eng:worker_request(id, { op = "echo", value = 2 }, { timeout_ms = 30000 })
  -- due after slow's late answer: once its reply is here, a second one for slow would be too
  local fence = eng:worker_request(id, { op = "echo", value = 3, ms = 1000 })
  local rep, n = {}, {}
  pump(eng, {
    reply = function(ev)
      rep[ev.rid] = ev
      n[ev.rid] = (n[ev.rid] or 0) + 1
    end,
  }, function() return rep[fence] end, 30000)
  T.eq(n[slow], 1, "replies for the timed-out request")
  T.eq(rep[slow].status, "timeout")
  T.eq(rep[fast].result, 2)
  T.eq(n[fast], 1)
  T.eq(rep[fence].result, 3)
end)

T.test(
  "worker killed mid-request: pending fail worker_exited, restart with backoff, new requests succeed",
  function()
    local eng = assert(core.new())
    local pidf = os.tmpname()
    T.defer(function() os.remove(pidf) end)
    local id = start_worker(
      eng,
      { "--pid-file", pidf },
      { protocol = "jsonl", restart = "on-failure", backoff_ms = 200, max_restarts = 3 }
    )
    wait_state(eng, id, "ready")
    local p1 = eng:worker_request(id, { op = "echo", value = 1, ms = 5000 })
    local p2 = eng:worker_request(id, { op = "stream", n = 100, ms = 100 })
    local rep, states, t_backoff, t_ready = {}, {}, nil, nil
    local h = {
      reply = function(ev) rep[ev.rid] = ev end,
      worker = function(ev)
        states[#states + 1] = ev.worker_state
        if ev.worker_state == "backoff" then t_backoff = now_ms() end
        if ev.worker_state == "ready" and t_backoff then t_ready = now_ms() end
      end,
    }
    -- Without a ready message a worker is ready once it runs; python3 writes
    -- its pid a little later (more than 100 ms on a loaded machine).
    local pid
    pump(eng, h, function()
      local f = io.open(pidf)
      pid = f:read("a")
      f:close()
      return pid:match("^%d+$") ~= nil
    end, 5000)
    drain_for(eng, h, 50)
    local t_kill = now_ms()
    os.execute("kill -9 " .. pid)
    pump(eng, h, function() return rep[p1] and rep[p2] end, 3000)
    local t_failed = now_ms()
    T.eq(rep[p1].status, "worker_exited")
    T.eq(rep[p2].status, "worker_exited")
    pump(eng, h, function() return t_ready ~= nil end, 5000)
    -- Lower bounds from moments before the crash (the kill, the crash request):
    -- the backoff starts after them, and seeing its event late on a loaded
    -- machine must not shorten what is measured.
    T.ok(
      t_ready - t_kill >= 195,
      string.format("backoff respected (%.0f ms from the kill)", t_ready - t_kill)
    )
    T.say(
      string.format(
        "# kill -9 -> pending failed %.1f ms, -> restarted and ready %.0f ms (backoff 200 ms)",
        t_failed - t_kill,
        t_ready - t_kill
      )
    )
    local r = eng:get(id)
    T.eq(r.state, "running")
    T.eq(r.worker_restarts, 1)
    local q = eng:worker_request(id, { op = "echo", value = "again" })
    pump(eng, h, function() return rep[q] end)
    T.eq(rep[q].result, "again")
    -- a crash through the protocol, backoff doubles (400 ms for the second in a row)
    t_backoff, t_ready = nil, nil
    local t_crash = now_ms()
    local c = eng:worker_request(id, { op = "crash" })
    pump(eng, h, function() return rep[c] and t_ready end, 5000)
    T.eq(rep[c].status, "worker_exited")
    T.ok(
      t_ready - t_crash >= 395,
      string.format("second backoff doubled (%.0f ms from the crash request)", t_ready - t_crash)
    )
    eng:worker_restart(id) -- restart(): no backoff, not counted in the streak
    t_backoff, t_ready = nil, nil
    pump(eng, h, function() return t_ready end, 5000)
    -- immediate: the next backoff in the streak would be 800 ms
    T.ok(
      t_ready - t_backoff < 600,
      string.format("restart() is immediate (%.0f ms)", t_ready - t_backoff)
    )
    T.eq(eng:get(id).worker_restarts, 3)
    os.remove(pidf)
    eng:close()
  end
)

T.test("crash-time restart figure: crash -> ready (backoff 1 ms)", function()
  local eng = assert(core.new())
  local id = start_worker(
    eng,
    {},
    { restart = "always", backoff_ms = 1, max_restarts = 100, healthy_ms = 1 }
  )
  wait_state(eng, id, "ready")
  local times = {}
  for _ = 1, 10 do
    local t0, ready = now_ms(), false
    eng:worker_request(id, { op = "crash" })
    local went = false
    pump(eng, {
      worker = function(ev)
        if ev.worker_state == "backoff" then went = true end
        if went and ev.worker_state == "ready" then ready = true end
      end,
    }, function() return ready end, 5000)
    times[#times + 1] = now_ms() - t0
  end
  T.say(
    string.format(
      "# crash -> restarted worker ready: p50 %.1f ms, max %.1f ms (python3 start included)",
      pct(times, 0.5),
      pct(times, 1)
    )
  )
  eng:close()
end)

T.test(
  "a worker crashing at start reaches fatal after max_restarts; new requests fail at once",
  function()
    local eng = assert(core.new())
    local id = start_worker(eng, { "--crash-at-start" }, {
      protocol = "jsonl",
      restart = "on-failure",
      backoff_ms = 10,
      max_restarts = 3,
      ready = { message = true },
    })
    local early = eng:worker_request(id, { op = "echo", value = 1 })
    local st, rep, ws = nil, {}, {}
    pump(eng, {
      state = function(ev)
        if ev.id == id then st = ev end
      end,
      reply = function(ev) rep[ev.rid] = ev end,
      worker = function(ev) ws[#ws + 1] = ev.worker_state end,
    }, function() return st and st.state == "failed" end, 10000)
    T.eq(st.reason, "worker_fatal")
    T.eq(ws[#ws], "fatal")
    T.eq(rep[early] and rep[early].status, "worker_fatal", "queued request")
    local r = eng:get(id)
    T.eq(r.worker_state, "fatal")
    T.eq(r.worker_restarts, 3)
    local late = eng:worker_request(id, { op = "echo", value = 2 })
    pump(eng, { reply = function(ev) rep[ev.rid] = ev end }, function() return rep[late] end)
    -- failed, not held for a restart: none happened, the worker is still fatal
    T.eq(rep[late].status, "worker_fatal")
    T.eq(eng:get(id).worker_restarts, 3, "no restart to wait for")
    T.eq(eng:get(id).worker_state, "fatal")
    T.ok(rep[late].error:find("restart limit"), rep[late].error)
    eng:close()
  end
)

-- The one restart policy: the same cases as the task layer's services
-- (tests/lua/restart_policy.lua, tests/nvim/spec_tasks.lua).
for _, case in ipairs(require("restart_policy").cases) do
  T.test("restart policy: " .. case.name, function()
    local eng = assert(core.new())
    local worker = { protocol = "jsonl" }
    for k, v in pairs(case.opts) do
      worker[k] = v
    end
    local id = assert(eng:start { cmd = { "sh", "-c", case.script }, worker = worker })
    local st
    local h = {
      state = function(ev)
        if
          ev.id == id
          and ev.state ~= "running"
          and ev.state ~= "starting"
          and ev.state ~= "queued"
        then
          st = ev
        end
      end,
    }
    if case.at_least then
      pump(
        eng,
        h,
        function() return st or eng:get(id).worker_restarts >= case.at_least - 1 end,
        20000
      )
      T.eq(st, nil, "it ended: " .. tostring(st and st.reason))
      eng:cancel(id, true)
    else
      pump(eng, h, function() return st ~= nil end, 20000)
      local r = eng:get(id)
      T.eq(r.worker_restarts + 1, case.runs, "processes")
      if case.gives_up then
        T.eq(st.state .. "/" .. tostring(st.reason), "failed/worker_fatal")
      else
        T.eq(st.state, "completed")
      end
    end
    eng:close()
  end)
end

T.test(
  "garbage, invalid JSON and a 17 MiB line keep the engine alive and show in the console",
  function()
    local eng = assert(core.new { output_limit = 64 << 20 })
    local id = start_worker(eng)
    local g = eng:worker_request(id, { op = "garbage" })
    local rep = {}
    pump(eng, { reply = function(ev) rep[ev.rid] = ev end }, function() return rep[g] end, 20000)
    T.eq(rep[g].result, "after garbage")
    local out = eng:read(id, "stdout", 0, 4096)
    T.ok(out:find("this is not json at all", 1, true), "garbage in the ring")
    T.ok(out:find('{"id": "unterminated"', 1, true), "invalid JSON in the ring")
    local r = eng:get(id)
    T.ok(r.bytes.stdout > 17 << 20, "the huge line was kept")
    T.ok(r.worker_stray >= 5, "stray lines counted: " .. r.worker_stray)
    local q = eng:worker_request(id, { op = "echo", value = "still here" })
    pump(eng, { reply = function(ev) rep[ev.rid] = ev end }, function() return rep[q] end)
    T.eq(rep[q].result, "still here")
    T.eq(r.state, "running")
    eng:close()
  end
)

T.test("readiness: requests are held until the ready message / stderr pattern", function()
  local eng = assert(core.new())
  T.defer(function() eng:close() end)
  -- --early-check: just before saying it is ready, the worker looks whether a
  -- request is already waiting on its stdin (op "early" answers what it saw).
  -- The requests are made at once, before the processes even run.
  local a = start_worker(
    eng,
    { "--start-delay", "200", "--early-check", "--ready" },
    { ready = { message = true } }
  )
  local b = start_worker(
    eng,
    { "--start-delay", "200", "--early-check", "--ready-stderr" },
    { ready = { stderr_pattern = "listen(ing)?$" } }
  )
  -- control: no ready condition, so ready as soon as it runs: its request is
  -- written at once and is waiting when it looks (the check can tell)
  local c = start_worker(eng, { "--start-delay", "200", "--early-check" })
  local ra, rb, rc =
    eng:worker_request(a, { op = "early" }),
    eng:worker_request(b, { op = "early" }),
    eng:worker_request(c, { op = "early" })
  local rep = {}
  pump(
    eng,
    { reply = function(ev) rep[ev.rid] = ev end },
    function() return rep[ra] and rep[rb] and rep[rc] end,
    30000
  )
  T.eq(rep[rc].result.early, true, "control: a request written before the worker looked")
  T.eq(
    rep[ra].result.early,
    false,
    "ready.message: a request reached the worker before its ready message"
  )
  T.eq(
    rep[rb].result.early,
    false,
    "ready.stderr_pattern: a request reached the worker before its ready line"
  )
end)

T.test("payload conversion: nested tables, integers, floats, strings with escapes", function()
  local eng = assert(core.new())
  local id = start_worker(eng)
  local v = {
    list = { 1, 2, 3 },
    map = { a = true, b = false },
    f = 1.5,
    big = 2 ^ 40,
    s = 'q"\\n\n\t\1x',
    empty = {},
  }
  local rid = eng:worker_request(id, { op = "echo", value = v })
  local rep
  pump(eng, {
    reply = function(ev)
      if ev.rid == rid then rep = ev end
    end,
  }, function() return rep end)
  local r = rep.result
  T.eq(r.list[3], 3)
  T.eq(r.map.a, true)
  T.eq(r.map.b, false)
  T.eq(r.f, 1.5)
  T.eq(r.big, 2 ^ 40)
  T.eq(r.s, v.s)
  T.eq(type(r.empty), "table")
  T.ok(not pcall(eng.request, eng, id, { f = print }), "functions are refused")
  local x = eng:worker_request(99999, "x")
  local rx
  pump(eng, {
    reply = function(ev)
      if ev.rid == x then rx = ev end
    end,
  }, function() return rx end)
  T.eq(rx.status, "rejected")
  T.ok(rx.error:find("ENOENT"))
  eng:close()
end)

T.test(
  "one verb set: the names of before are aliases of worker_request, worker_cancel, worker_restart",
  function()
    local eng = assert(core.new())
    T.eq(eng.request, eng.worker_request)
    T.eq(eng.cancel_request, eng.worker_cancel)
    T.eq(eng.restart, eng.worker_restart)
    local id = start_worker(eng, {}, {})
    wait_state(eng, id, "ready")
    local rid = assert(eng:request(id, { op = "echo", value = "old name", ms = 5000 }))
    T.eq(eng:cancel_request(rid), true)
    local _, _, name = eng:worker_cancel(rid)
    T.eq(name, "ENOENT")
    T.eq(eng:restart(id), true)
    eng:close()
  end
)

T.test("cancel stops a worker for good; a plain execution is not a worker", function()
  local eng = assert(core.new())
  local id = start_worker(eng, {}, { restart = "always" })
  wait_state(eng, id, "ready")
  local p = eng:worker_request(id, { op = "echo", value = 1, ms = 5000 })
  T.eq(eng:cancel(id), "canceling")
  local st, rep, ws = nil, {}, nil
  pump(eng, {
    state = function(ev)
      if ev.id == id and ev.state == "canceled" then st = ev end
    end,
    reply = function(ev) rep[ev.rid] = ev end,
    worker = function(ev) ws = ev.worker_state end,
  }, function() return st and rep[p] end, 5000)
  T.eq(rep[p].status, "worker_exited")
  T.eq(ws, "stopped")
  local plain = assert(eng:start { cmd = "sleep 5" })
  local x = eng:worker_request(plain, 1)
  local rx
  pump(eng, {
    reply = function(ev)
      if ev.rid == x then rx = ev end
    end,
  }, function() return rx end)
  T.eq(rx.status, "rejected")
  T.ok(rx.error:find("ENOTWORKER"), rx.error)
  local ok, _, name = eng:worker_restart(plain)
  T.eq(ok, nil)
  T.eq(name, "ENOTWORKER")
  eng:close()
end)

T.test(
  "slow consumer: chunks past max_chunks are dropped for that request only, counted in missed",
  function()
    local eng = assert(core.new())
    local id = start_worker(eng, {}, { max_chunks = 16 })
    local big = eng:worker_request(id, { op = "stream", n = 2000 })
    local rep
    -- do not poll while the worker streams
    local t0 = now_ms()
    while now_ms() - t0 < 800 do
    end
    local nchunks, missed = 0, 0
    eng:worker_request(id, { op = "stream", n = 10, ms = 1 })
    local on = 0
    pump(eng, {
      chunk = function(ev)
        if ev.rid == big then
          nchunks = nchunks + 1
          missed = missed + (ev.missed or 0)
        else
          on = on + 1
        end
      end,
      reply = function(ev)
        if ev.rid == big then rep = ev end
      end,
    }, function() return rep and on == 10 end, 10000)
    T.ok(nchunks >= 16 and nchunks < 2000, "bounded delivery: " .. nchunks)
    T.eq(nchunks + rep.missed, 2000, "delivered + missed")
    T.eq(on, 10, "the other request lost nothing")
    eng:close()
  end
)

T.test("msgpack-rpc worker: requests, chunks as notifications, cancel, errors", function()
  local eng = assert(core.new())
  local id = assert(eng:start {
    cmd = { PY, MPWORKER },
    worker = { protocol = "msgpack-rpc", ready = { message = true } },
  })
  local a = eng:worker_request(id, { method = "add", params = { 2, 40 } })
  local b = eng:worker_request(id, { method = "stream", params = { 5 } })
  local c = eng:worker_request(id, { method = "nope", params = {} })
  local d = eng:worker_request(id, { hello = "world" })
  local slow = eng:worker_request(id, { method = "sleep", params = { 5000 } })
  local rep, chunks = {}, {}
  pump(eng, {
    reply = function(ev) rep[ev.rid] = ev end,
    chunk = function(ev) chunks[#chunks + 1] = ev.data end,
  }, function() return rep[a] and rep[b] and rep[c] and rep[d] end)
  T.eq(rep[a].result, 42)
  T.eq(#chunks, 5)
  T.eq(chunks[5], 4)
  T.eq(rep[b].result, "done")
  T.eq(rep[c].ok, false)
  T.ok(rep[c].error:find("no method"), rep[c].error)
  T.eq(rep[d].result.hello, "world")
  eng:worker_cancel(slow)
  pump(eng, { reply = function(ev) rep[ev.rid] = ev end }, function() return rep[slow] end)
  T.eq(rep[slow].status, "canceled")
  local e2 = eng:worker_request(id, { method = "cancelled_count", params = {} })
  pump(eng, { reply = function(ev) rep[ev.rid] = ev end }, function() return rep[e2] end)
  T.eq(rep[e2].result, 1, "the worker saw the cancel notification")
  eng:close()
end)

T.test(
  "a worker that never reads its stdin: every request still gets exactly one reply, while it runs",
  function()
    local eng = assert(core.new())
    -- ready at spawn; it never reads: the pipe and then the 16 MiB input queue fill up
    local id = assert(eng:start { cmd = { "sleep", "600" }, worker = { protocol = "jsonl" } })
    wait_state(eng, id, "ready")
    local big = string.rep("x", 1 << 20)
    local rids, rep, count = {}, {}, {}
    for i = 1, 24 do
      rids[i] = assert(eng:worker_request(id, { op = "echo", value = big }))
    end
    local function refused()
      local n = 0
      for _ in pairs(rep) do
        n = n + 1
      end
      return n
    end
    -- the ones that could not even be queued are refused now, with a reason
    pump(eng, {
      reply = function(ev)
        count[ev.rid] = (count[ev.rid] or 0) + 1
        rep[ev.rid] = ev
      end,
    }, function() return refused() >= 4 end, 10000)
    T.eq(eng:get(id).state, "running", "the worker still runs")
    for rid, ev in pairs(rep) do
      T.eq(ev.status, "rejected", "rid " .. rid)
      T.ok(ev.error:find("EBUSY", 1, true), ev.error)
    end
    -- the others are answered when it ends: exactly once each
    eng:cancel(id)
    pump(eng, {
      reply = function(ev)
        count[ev.rid] = (count[ev.rid] or 0) + 1
        rep[ev.rid] = ev
      end,
    }, function() return refused() == #rids end, 10000)
    drain_for(eng, { reply = function(ev) count[ev.rid] = (count[ev.rid] or 0) + 1 end }, 200)
    for _, rid in ipairs(rids) do
      T.eq(count[rid], 1, "one reply for " .. rid)
    end
    eng:close()
  end
)

T.test(
  "requests waiting for a worker that never gets ready are bounded (16 MiB), the rest rejected at once",
  function()
    local eng = assert(core.new())
    local id = assert(eng:start {
      cmd = { "sleep", "600" },
      worker = { protocol = "jsonl", ready = { message = true } },
    })
    local big = string.rep("y", 1 << 20)
    local rids, rep = {}, {}
    for i = 1, 20 do
      rids[i] = assert(eng:worker_request(id, { op = "echo", value = big }))
    end
    pump(
      eng,
      { reply = function(ev) rep[ev.rid] = ev end },
      function() return rep[rids[20]] end,
      5000
    )
    local kept = 0
    for i = 1, 20 do
      if rep[rids[i]] then
        T.eq(rep[rids[i]].status, "rejected")
        T.ok(rep[rids[i]].error:find("EBUSY", 1, true), rep[rids[i]].error)
      else
        kept = kept + 1
      end
    end
    T.ok(kept >= 14 and kept <= 16, "kept " .. kept)
    T.eq(eng:get(id).worker_pending, kept)
    eng:cancel(id)
    local n = 0
    pump(eng, {
      reply = function(ev)
        if not rep[ev.rid] then n = n + 1 end
      end,
    }, function() return n == kept end, 5000)
    eng:close()
  end
)

-- A secret JSON must escape: a quote, a backslash, a tab, a newline, an e-acute
-- and an emoji (json.dumps writes \u00e9 and a surrogate pair).
local JSECRET = 'hun"ter\\2\tx\ny-\xc3\xa9-\xf0\x9f\x98\x80-Zq9'

T.test(
  "jsonl worker: a secret JSON escapes is masked in replies, chunks, errors and the console",
  function()
    local eng = assert(core.new())
    local id = assert(eng:start {
      cmd = { PY, WORKER },
      worker = { protocol = "jsonl" },
      secrets = { TOKEN = JSECRET },
    })
    local a = eng:worker_request(
      id,
      { op = "echo", value = { nested = { JSECRET, "x" .. JSECRET .. "y" } } }
    )
    local b = eng:worker_request(id, { op = "stream", n = 2, value = JSECRET })
    local c = eng:worker_request(id, { op = "fail", message = "bad " .. JSECRET })
    local rep, chunks = {}, {}
    pump(eng, {
      reply = function(ev) rep[ev.rid] = ev end,
      chunk = function(ev) chunks[#chunks + 1] = ev.data end,
    }, function() return rep[a] and rep[b] and rep[c] end)
    T.eq(rep[a].result.nested[1], "***")
    T.eq(rep[a].result.nested[2], "x***y")
    T.eq(#chunks, 2)
    T.eq(chunks[1].value, "***")
    T.eq(rep[c].error, "bad ***")
    local out = eng:read(id, "stdout")
    T.ok(out:find('"value": "***"', 1, true) or out:find('"value":"***"', 1, true), out)
    for _, piece in ipairs({ 'hun\\"', "Zq9", "\\u00e9", "\\ud83d" }) do
      T.ok(not out:find(piece, 1, true), "console holds " .. piece .. ": " .. out)
    end
    eng:close()
  end
)

T.test("msgpack worker: a secret in a reply is masked and the stream keeps its framing", function()
  local eng = assert(core.new())
  local id = assert(eng:start {
    cmd = { PY, MPWORKER },
    worker = { protocol = "msgpack-rpc", ready = { message = true } },
    secrets = { TOKEN = JSECRET },
  })
  local a = eng:worker_request(id, { secret = JSECRET, list = { JSECRET } })
  local b = eng:worker_request(id, { method = "nope" .. JSECRET, params = {} })
  local c = eng:worker_request(id, { method = "add", params = { 2, 40 } })
  local rep = {}
  pump(
    eng,
    { reply = function(ev) rep[ev.rid] = ev end },
    function() return rep[a] and rep[b] and rep[c] end
  )
  T.eq(rep[a].result.secret, "***")
  T.eq(rep[a].result.list[1], "***")
  T.eq(rep[b].ok, false)
  T.ok(rep[b].error:find("no method nope***", 1, true), rep[b].error)
  T.eq(rep[c].result, 42, "the request after them is answered")
  local out = eng:read(id, "stdout")
  T.ok(not out:find('hun"', 1, true) and not out:find("Zq9", 1, true), "console")
  eng:close()
end)

os.exit(T.finish() and 0 or 1)
