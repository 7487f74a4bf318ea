-- tests/target/shared.lua — the promises every kind of target keeps, whatever carries the
-- relay (spec_target's ssh host, spec_podman's container): input, a PTY console, the tree
-- kill, timeout_ms, secrets, and many executions over one transport. Each spec defines them
-- once with its own target.
local T = require("harness")
local U = require("util")

local M = {}

--- Define the shared tests.
---@param o table { eng = engine, test = fun(name, fn), spec = fun(spec): spec (points a spec
---   at the target), ms = integer (bound of each wait), transports = fun(): integer (how many
---   transport processes carry this target's relays now), far_survivors = fun(): string|nil
---   (optional: a second look on the far side after a cancel, nil when none is left) }
function M.define(o)
  local eng, test, spec, ms = o.eng, o.test, o.spec, o.ms

  test("input and close_stdin", function()
    local id = assert(eng:start(spec { cmd = { "sh", "-c", "cat; echo done" }, stdin = true }))
    U.wait_state(eng, id, "running", ms)
    T.eq(eng:input(id, "abc\n"), true)
    T.eq(eng:close_stdin(id), true)
    local r = U.collect(eng, { id }, ms)[id]
    T.eq(r.final.state, "completed")
    T.eq(r.out.stdout, "abc\ndone\n")
  end)

  test("pty console: size, resize, colours, input", function()
    local id = assert(eng:start(spec {
      cmd = {
        "sh",
        "-c",
        "stty size; printf '\\033[31mred\\033[0m\\n'; read x; echo got $x; stty size",
      },
      pty = true,
      cols = 100,
      rows = 30,
    }))
    U.wait_output(eng, id, "red", ms)
    T.eq(eng:resize(id, 120, 40), true)
    T.eq(eng:input(id, "hi\r"), true)
    local r = U.collect(eng, { id }, ms)[id]
    T.eq(r.final.state, "completed")
    T.ok(r.out.pty:find("30 100", 1, true), r.out.pty)
    T.ok(r.out.pty:find("\27[31mred\27[0m", 1, true), r.out.pty)
    T.ok(r.out.pty:find("got hi", 1, true), r.out.pty)
    T.ok(r.out.pty:find("40 120", 1, true), r.out.pty)
  end)

  test("cancel: a TERM-ignoring tree with a setsid escapee leaves 0 survivors", function()
    local tag = U.tag()
    local id = assert(eng:start(spec {
      cmd = {
        "sh",
        "-c",
        "trap '' TERM; sleep 300 & setsid sh -c 'trap \"\" TERM; sleep 300; :' & wait",
      },
      env = { PROCTOR_TEST_TAG = tag },
      kill_grace_ms = 300,
    }))
    U.wait_state(eng, id, "running", ms)
    T.ok(U.wait_until(function() return #U.tagged(tag) >= 4 end, 10000), "the tree never started")
    T.eq(eng:cancel(id), "canceling")
    local r = U.collect(eng, { id }, ms)[id]
    T.eq(r.final.state, "canceled")
    T.ok(
      U.wait_until(function() return #U.tagged(tag) == 0 end, 10000),
      "survivors on the far side"
    )
    if o.far_survivors then T.eq(o.far_survivors(), nil, "survivors seen from the far side") end
  end)

  test("timeout_ms", function()
    local r = U.run(eng, spec { cmd = { "sleep", "30" }, timeout_ms = 300 }, ms)
    T.eq(r.final.state, "timed_out")
    T.eq(r.final.reason, "timeout")
  end)

  test("secrets travel in the spawn and are masked here", function()
    local secret = "s3cr3t-" .. U.tag()
    local r = U.run(eng, spec { cmd = 'printf "a $TOKEN b"', secrets = { TOKEN = secret } }, ms)
    T.eq(r.final.state, "completed")
    T.eq(r.out.stdout, "a *** b")
  end)

  test("200 executions over one transport", function()
    local ids = {}
    for i = 1, 200 do
      ids[i] = assert(eng:start(spec { cmd = { "sh", "-c", 'echo "${PROCTOR_JOB%%:*}"' } }))
    end
    local all = U.collect(eng, ids, 4 * ms)
    local relays, n = {}, 0
    for _, id in ipairs(ids) do
      T.eq(all[id].final.state, "completed")
      T.match(all[id].out.stdout or "(none)", "^%d+\n$")
      relays[all[id].out.stdout or "(none)"] = true
    end
    for _ in pairs(relays) do
      n = n + 1
    end
    T.eq(n, 1, "every job under one relay")
    T.eq(o.transports(), 1, "one transport process")
  end)
end

return M
