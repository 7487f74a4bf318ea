-- bench/lua/cancel.lua — workload 5 under lua5.4: cancel a process tree.
--
--   BENCH_TREE      "term" (honours SIGTERM), "ignore" (ignores it) or "leader"
--                   (the leader exits on it, the rest of its group ignores it)
--   BENCH_GRACE_MS  kill_grace_ms of the engine (500)
--   BENCH_PIDFILE   where bench/tree.sh lists its pids
--
-- Starts bench/tree.sh, waits until its 4 pids are listed, then measures
-- eng:cancel() -> terminal state event, and counts the tree's processes alive
-- right at that event and still alive 100 ms later ("survived"; then they are
-- killed by pid).

local lib = dofile(os.getenv("BENCH_ROOT") .. "/bench/lib.lua")
local core = require("proctor.core")

local TREE = lib.param("BENCH_TREE", "term")
local GRACE = lib.param("BENCH_GRACE_MS", 500, true)
local PIDFILE = assert(lib.param("BENCH_PIDFILE"), "BENCH_PIDFILE")

local eng = assert(core.new({ kill_grace_ms = GRACE }))
local id = eng:start({ cmd = { lib.root .. "/bench/tree.sh", TREE, PIDFILE } })
local deadline = lib.now_ms() + 5000
while #lib.read_pids(PIDFILE) < 4 and lib.now_ms() < deadline do
  eng:wait(2)
end
local t0 = lib.now_ms()
local answer = eng:cancel(id)
local state, reason, t1
while not state do
  for _, ev in ipairs(eng:wait(5000)) do
    if
      ev.type == "state"
      and (ev.state == "canceled" or ev.state == "failed" or ev.state == "completed")
    then
      t1, state, reason = lib.now_ms(), ev.state, ev.reason
    end
  end
end
-- A process SIGKILLed a moment ago may still be on its way out (state R);
-- it counts as surviving only if it is still there 100 ms later.
local pids = lib.read_pids(PIDFILE)
local alive_at_end = lib.count_alive(pids)
lib.uv.sleep(100)
local survived, who = lib.survivors(pids)
eng:close()
lib.result({
  tree = TREE,
  answer = answer,
  state = state,
  reason = reason,
  cancel_ms = t1 - t0,
  grace_ms = GRACE,
  survived = survived,
  survivors = who,
  alive_at_end = alive_at_end,
  over_grace_ms = TREE ~= "term" and t1 - t0 - GRACE or nil,
})
