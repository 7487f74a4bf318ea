-- tests/lua/spec_history_compat.lua — a history file written by an earlier
-- release still loads, field for field.
--
-- fixtures/history-v1.mpk was written by the core as of commit b4cde59 (see
-- fixtures/make_history_v1.lua): a compaction ("n"), end frames of executions
-- that completed, died of a signal, were canceled, had a secret masked, ran on
-- a terminal and failed with an exit code, the tombstone of a deleted one
-- compacted away, and a start frame whose host was SIGKILLed (no end frame).
local U = require("util")
local core = U.core

local E = { "B_KEY", "A_KEY", "PROCTOR_EXECUTION_ID", "PROCTOR_JOB" }
local PIPES0 = { stdout = 0, stderr = 0 }

-- Every field of every record, as the release that wrote the file loaded it.
local expected = {
  [1] = {
    id = 1,
    session = 0,
    label = "done",
    owner = "fixture-owner",
    cwd = "/",
    pty = false,
    cmd = { "sh", "-c", "printf 'hello\\n'; printf 'warn\\n' >&2" },
    state = "completed",
    reason = "exit",
    exit_code = 0,
    created_at = 1795478115818,
    started_at = 1795478115820,
    ended_at = 1795478115821,
    duration_ms = 1,
    bytes = { stdout = 6, stderr = 5 },
    dropped = PIPES0,
    stdin_open = false,
    env_keys = E,
    previous_session = true,
  },
  [2] = {
    id = 2,
    session = 0,
    label = "killed",
    owner = "host",
    cwd = "/",
    pty = false,
    cmd = "printf 'before\\n'; kill -KILL $$",
    state = "failed",
    reason = "signal",
    signal = "SIGKILL",
    created_at = 1795478115821,
    started_at = 1795478115821,
    ended_at = 1795478115822,
    duration_ms = 1,
    bytes = { stdout = 7, stderr = 0 },
    dropped = PIPES0,
    stdin_open = false,
    env_keys = E,
    previous_session = true,
  },
  [3] = {
    id = 3,
    session = 0,
    owner = "host",
    cwd = "/",
    pty = false,
    cmd = { "sleep", "30" },
    state = "canceled",
    reason = "canceled",
    signal = "SIGTERM",
    created_at = 1795478115822,
    started_at = 1795478115822,
    ended_at = 1795478115824,
    duration_ms = 2,
    bytes = PIPES0,
    dropped = PIPES0,
    stdin_open = false,
    env_keys = E,
    previous_session = true,
  },
  [4] = {
    id = 4,
    session = 0,
    label = "secret",
    owner = "host",
    cwd = "/",
    pty = false,
    cmd = "printf 'token=%s\\n' \"$TOKEN\"",
    state = "completed",
    reason = "exit",
    exit_code = 0,
    created_at = 1795478115826,
    started_at = 1795478115827,
    ended_at = 1795478115827,
    duration_ms = 0,
    bytes = { stdout = 10, stderr = 0 },
    dropped = PIPES0,
    stdin_open = false,
    env_keys = { "B_KEY", "A_KEY", "TOKEN", "PROCTOR_EXECUTION_ID", "PROCTOR_JOB" },
    previous_session = true,
  },
  [5] = {
    id = 5,
    session = 0,
    owner = "host",
    cwd = "/",
    pty = true,
    cmd = "printf tty",
    state = "completed",
    reason = "exit",
    exit_code = 0,
    created_at = 1795478115827,
    started_at = 1795478115828,
    ended_at = 1795478115829,
    duration_ms = 0,
    bytes = { pty = 3 },
    dropped = { pty = 0 },
    stdin_open = false,
    env_keys = { "B_KEY", "A_KEY", "PROCTOR_EXECUTION_ID", "TERM", "PROCTOR_JOB" },
    previous_session = true,
  },
  [7] = {
    id = 7,
    session = 0,
    owner = "host",
    cwd = "/tmp",
    pty = false,
    cmd = { "sh", "-c", "exit 3" },
    state = "failed",
    reason = "exit",
    exit_code = 3,
    created_at = 1795478115830,
    started_at = 1795478115831,
    ended_at = 1795478115831,
    duration_ms = 1,
    bytes = PIPES0,
    dropped = PIPES0,
    stdin_open = false,
    env_keys = E,
    previous_session = true,
  },
  -- its host died: failed/host_lost, ended when first loaded (checked apart)
  [8] = {
    id = 8,
    session = 0,
    label = "orphan",
    owner = "host",
    cwd = "/",
    pty = false,
    cmd = { "sleep", "30" },
    state = "failed",
    reason = "host_lost",
    created_at = 1795478115831,
    duration_ms = 0,
    bytes = PIPES0,
    dropped = PIPES0,
    stdin_open = false,
    env_keys = E,
    previous_session = true,
  },
}

local output = {
  [1] = { stdout = "hello\n", stderr = "warn\n" },
  [2] = { stdout = "before\n", stderr = "" },
  [3] = { stdout = "", stderr = "" },
  [4] = { stdout = "token=***\n", stderr = "" },
  [5] = { pty = "tty" },
  [7] = { stdout = "", stderr = "" },
  [8] = { stdout = "", stderr = "" },
}

-- a and b hold the same keys and values, recursively; `where` names the path.
local function same(a, b, where)
  if type(a) ~= "table" or type(b) ~= "table" then
    if a ~= b then error(("%s: expected %s, got %s"):format(where, tostring(b), tostring(a)), 0) end
    return
  end
  for k, v in pairs(b) do
    same(a[k], v, where .. "." .. tostring(k))
  end
  for k in pairs(a) do
    if b[k] == nil then error(("%s.%s: unexpected field"):format(where, tostring(k)), 0) end
  end
end

return function(T)
  local test = T.test
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p " .. dir)
  local fixture = U.root .. "/tests/lua/fixtures/history-v1.mpk"

  test("a history file written by the first release loads with every field", function()
    local h = dir .. "/h.mpk"
    local src = assert(U.read_file(fixture), "fixture missing: " .. fixture)
    local f = assert(io.open(h, "wb"))
    f:write(src)
    f:close()
    local t0 = (os.time() - 1) * 1000
    local lost_end
    for round = 1, 2 do -- the second load reads the end frame the first one appended for id 8
      local eng = assert(core.new { history_file = h })
      T.eq(#eng:warnings(), 0, "warnings")
      local ids = {}
      for _, r in ipairs(eng:list()) do
        ids[#ids + 1] = r.id
      end
      -- 6 was deleted; 9 is the one the first round started
      T.eq(table.concat(ids, ","), round == 1 and "1,2,3,4,5,7,8" or "1,2,3,4,5,7,8,9", "ids")
      for id, want in pairs(expected) do
        local r = assert(eng:get(id))
        if id == 8 then
          T.ok(r.ended_at >= t0, "host_lost: ended when loaded")
          if round == 1 then
            lost_end = r.ended_at
          else
            T.eq(r.ended_at, lost_end, "ended_at kept")
          end
          r.ended_at = nil
        end
        same(r, want, "record " .. id)
        for stream, data in pairs(output[id]) do
          local got, nxt, missed = eng:read(id, stream)
          T.eq(got, data, ("output %d %s"):format(id, stream))
          T.eq(nxt, #data)
          T.eq(missed, 0)
        end
      end
      local id = eng:start { cmd = "true" }
      T.eq(id, 8 + round, "ids continue after the largest written")
      U.collect(eng, { id })
      eng:close()
    end
  end)

  os.execute("rm -rf " .. dir)
end
