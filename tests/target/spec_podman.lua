-- tests/target/spec_podman.lua — executions in a real podman container (|proctor-targets|,
-- `podman = name`) under plain Lua 5.4: the container tests/target/run starts from an image
-- it builds (static busybox, no network, a private storage root). The target is the one a
-- user writes: the transport comes from proctor.targets, which copies the static shepherd
-- into the container through `podman exec` on first use. The container shares this
-- machine's kernel, so its processes are seen in /proc here (PROCTOR_TEST_TAG).
local T = require("harness")
local U = require("util")
local core = U.core

local root = os.getenv("PROCTOR_ROOT") or "."
local name = assert(os.getenv("TARGET_CONTAINER"), "run through tests/target/run")
local opts = {}
for w in assert(os.getenv("TARGET_PODMAN_OPTS")):gmatch("%S+") do
  opts[#opts + 1] = w
end
package.path = root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. package.path
local targets = require("proctor.targets")

local eng = assert(core.new { drain_ms = 300 })
local WEB = assert(targets.transport("web", { podman = name, opts = opts }))

local function test(what, fn) T.test("podman: " .. what, fn) end
local function web(spec)
  spec.target, spec.transport = "web", WEB
  return spec
end

-- Run a command in the container (podman exec, no proctor): its output.
local function inside(cmd)
  return U.sh(
    ("podman exec %s %s sh -c %s 2>&1"):format(table.concat(opts, " "), name, targets.quote(cmd))
  )
end

-- The pids of the podman exec processes that carry a relay of this container (the
-- check and the copy runs have ended by the time a job runs).
local function relay_execs()
  local p = io.popen("pgrep -f -- '^podman exec .* -i " .. name .. " /bin/sh -c exec '")
  local pids = {}
  for l in p:lines() do
    pids[#pids + 1] = tonumber(l)
  end
  p:close()
  return pids
end

test("first use copies the shepherd in; lifecycle, exit codes, streams, env, cwd", function()
  T.eq(inside("ls -A /.cache/proctor 2>/dev/null"), "") -- nothing there yet
  local r, id = U.run(
    eng,
    web { cmd = { "sh", "-c", "echo out $PWD; echo $FOO >&2; exit 3" }, env = { FOO = "bar" } },
    120000 -- the first run checks, copies and starts the relay: three podman execs
  )
  T.eq(table.concat(r.states, ","), "queued,starting,running,failed", r.final.error)
  T.eq(r.final.exit_code, 3)
  T.eq(r.final.reason, "exit")
  T.eq(r.out.stdout, "out /\n") -- the container's working directory
  T.eq(r.out.stderr, "bar\n")
  T.eq(eng:get(id).target, "web")
  -- the job ran in the container: another pid namespace, the image's busybox
  r = U.run(eng, web { cmd = "readlink /proc/self/ns/pid; readlink /bin/sh" }, 60000)
  local here = U.sh("readlink /proc/self/ns/pid")
  T.eq(r.final.state, "completed", r.final.error)
  T.ok(
    r.out.stdout:match("^pid:%[%d+%]\nbusybox\n$") and not r.out.stdout:find(here, 1, true),
    r.out.stdout
  )
  -- the copy: hash-named, 0700, the static shepherd's bytes
  local files = inside("ls -A /.cache/proctor")
  T.match(files, "^proctor%-shepherd%-%x+\n$")
  local file = "/.cache/proctor/" .. files:gsub("%s+$", "")
  T.eq(inside("stat -c %a " .. file), "700\n")
  T.eq(
    inside("sha256sum " .. file):sub(1, 64),
    U.sh("sha256sum " .. root .. "/lua/proctor/proctor-shepherd-static"):sub(1, 64)
  )
  r = U.run(eng, web { cmd = "kill -TERM $$" }, 60000)
  T.eq(r.final.reason, "signal")
  T.eq(r.final.signal, "SIGTERM")
  r = U.run(eng, web { cmd = { "pwd" }, cwd = "/tmp" }, 60000)
  T.eq(r.out.stdout, "/tmp\n")
  r = U.run(eng, web { cmd = { "/nonexistent/prog" } }, 60000)
  T.eq(r.final.reason, "spawn_error")
  T.match(r.final.error or "", "exec: /nonexistent/prog")
  -- :checkhealth's check finds the copy
  local what, why = targets.check_far("web", { podman = name, opts = opts })
  T.match(what or why, "target web: ready")
end)

require("shared").define {
  eng = eng,
  test = test,
  spec = web,
  ms = 60000,
  transports = function() return #relay_execs() end,
  far_survivors = function()
    local n = inside("ps -o pid,args | grep -c '[s]leep 300'")
    return n ~= "0\n" and n or nil
  end,
}

test(
  "podman exec SIGKILLed mid-run: the container's jobs die, executions end target_lost",
  function()
    local tag = U.tag()
    local ids = {}
    for i = 1, 3 do
      ids[i] = assert(eng:start(web {
        cmd = { "sh", "-c", "trap '' TERM; sleep 300 & setsid sleep 300 & wait" },
        env = { PROCTOR_TEST_TAG = tag },
        pty = i == 3,
      }))
    end
    for _, id in ipairs(ids) do
      U.wait_state(eng, id, "running", 60000)
    end
    T.ok(U.wait_until(function() return #U.tagged(tag) >= 9 end, 10000), "the trees never started")
    local pids = relay_execs()
    T.eq(#pids, 1)
    U.sh("kill -9 " .. pids[1])
    local all = U.collect(eng, ids, 60000)
    for _, id in ipairs(ids) do
      T.eq(all[id].final.state, "failed")
      T.eq(all[id].final.reason, "target_lost")
      T.match(all[id].final.error or "", "killed by signal 9")
    end
    T.ok(
      U.wait_until(function() return #U.tagged(tag) == 0 end, 10000),
      "survivors in the container"
    )
    -- the next run on the target opens a new podman exec
    local r = U.run(eng, web { cmd = { "echo", "again" } }, 60000)
    T.eq(r.out.stdout, "again\n", r.final.error)
  end
)

test("shepherd = path: one installed in the image, no copy and no shell needed", function()
  local def = { podman = name, opts = opts, shepherd = "/usr/local/bin/proctor-shepherd" }
  local tr = assert(targets.transport("installed", def))
  T.match(
    tr,
    "^podman exec .* %-i "
      .. name:gsub("%-", "%%-")
      .. " /usr/local/bin/proctor%-shepherd %-%-relay$"
  )
  local r = U.run(eng, { cmd = { "echo", "there" }, target = "installed", transport = tr }, 60000)
  T.eq(r.final.state, "completed", r.final.error)
  T.eq(r.out.stdout, "there\n")
end)

test("a container that is not there: target_lost with podman's message", function()
  local tr = assert(targets.transport("gone", { podman = name .. "-gone", opts = opts }))
  local r = U.run(eng, { cmd = { "true" }, target = "gone", transport = tr }, 60000)
  T.eq(r.final.state .. " " .. tostring(r.final.reason), "failed target_lost")
  T.match(r.final.error or "", "podman failed")
  T.match(r.final.error or "", "no such container")
end)

eng:close()
os.exit(T.finish() and 0 or 1)
