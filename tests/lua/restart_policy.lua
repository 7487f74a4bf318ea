-- tests/lua/restart_policy.lua — the cases of the one restart policy
-- (doc/proctor.txt |proctor-restart-policy|), run against the task layer's
-- services (tests/nvim/spec_tasks.lua) and the core's supervised workers
-- (tests/worker/spec_core.lua): both must give the same answer for each.
--
-- A case runs `sh -c script` with the policy's options. `runs`: exactly that
-- many processes, then `gives_up` (true: the run fails, the restart limit was
-- reached; false: it ended and the policy did not restart it). `at_least`:
-- it keeps restarting past max_restarts (the count was reset).
local M = {}

M.cases = {
  {
    name = "on-failure: max_restarts failures in a row, then it gives up",
    script = "exit 1",
    opts = { restart = "on-failure", max_restarts = 2, backoff_ms = 1 },
    runs = 3,
    gives_up = true,
  },
  {
    name = "max_restarts = 0 never restarts",
    script = "exit 1",
    opts = { restart = "always", max_restarts = 0, backoff_ms = 1 },
    runs = 1,
    gives_up = true,
  },
  {
    name = "the delay is capped at backoff_max_ms (uncapped: a minute)",
    script = "exit 1",
    opts = { restart = "on-failure", max_restarts = 2, backoff_ms = 60000, backoff_max_ms = 1 },
    runs = 3,
    gives_up = true,
  },
  {
    name = "on-failure does not restart a success",
    script = "exit 0",
    opts = { restart = "on-failure", max_restarts = 3, backoff_ms = 1 },
    runs = 1,
    gives_up = false,
  },
  {
    name = "always: a success starts the count again (it runs past max_restarts)",
    script = "exit 0",
    opts = { restart = "always", max_restarts = 1, backoff_ms = 1 },
    at_least = 4,
  },
  {
    name = "a run healthy for healthy_ms starts the count again",
    script = "sleep 0.05; exit 1",
    opts = { restart = "on-failure", max_restarts = 1, backoff_ms = 1, healthy_ms = 1 },
    at_least = 4,
  },
}

-- The policy as a function (tasks/traits/restart.lua M.decide):
-- { opts, streak, ended } -> verdict, streak, delay.
M.decisions = {
  { { restart = "never" }, 0, { ok = false }, "stop", 0 },
  { { restart = "on-failure" }, 0, { ok = true }, "stop", 0 },
  { { restart = "on-failure" }, 0, { ok = false }, "restart", 1, 100 },
  { { restart = "on-failure" }, 1, { ok = false }, "restart", 2, 200 },
  { { restart = "on-failure" }, 3, { ok = false }, "restart", 4, 800 },
  { { restart = "on-failure" }, 5, { ok = false }, "give_up", 5 },
  { { restart = "on-failure" }, 5, { ok = false, healthy = true }, "restart", 1, 100 },
  { { restart = "always" }, 5, { ok = true }, "restart", 1, 100 },
  { { restart = "on-failure", backoff_max_ms = 300 }, 4, { ok = false }, "restart", 5, 300 },
  { { restart = "always", max_restarts = 0 }, 0, { ok = false }, "give_up", 0 },
}
M.DEFAULTS = { max_restarts = 5, backoff_ms = 100, backoff_max_ms = 30000 }

return M
