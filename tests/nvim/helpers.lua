-- tests/nvim/helpers.lua — helpers for the child-Neovim tests of the Neovim layer.
local uv = vim.uv or vim.loop
local M = {}

M.root = os.getenv("PROCTOR_ROOT") or vim.fn.getcwd()
-- Extra runtimepath entry with a core build to use instead of the checkout's
-- (development only; tests/run does not set it).
M.core_rtp = os.getenv("PROCTOR_TEST_CORE_RTP")

-- Every deprecation seen while the tests run, here and in child Neovims:
-- vim.deprecate() calls (Neovim 0.8+) and messages that say "deprecated".
-- spec_deprecation, the last spec, fails when there is any.
M.deprecations = {}
-- Lua code that installs the same watch in a child Neovim (into _G.deprecations).
M.watch_deprecations = [[
  _G.deprecations = {}
  if vim.deprecate then
    local orig = vim.deprecate
    vim.deprecate = function(name, alt, ...)
      table.insert(_G.deprecations, ("vim.deprecate(%s -> %s)"):format(tostring(name), tostring(alt)) .. debug.traceback("", 2))
      return orig(name, alt, ...)
    end
  end
]]
if vim.deprecate then
  local orig = vim.deprecate
  vim.deprecate = function(name, alt, ...)
    M.deprecations[#M.deprecations + 1] = ("vim.deprecate(%s -> %s)"):format(
      tostring(name),
      tostring(alt)
    ) .. debug.traceback("", 2)
    return orig(name, alt, ...)
  end
end

-- Captured vim.notify calls: { {msg=, level=}, ... }
M.notes = {}
vim.notify = function(msg, level)
  M.notes[#M.notes + 1] = { msg = msg, level = level }
  if tostring(msg):lower():find("deprecat") then
    M.deprecations[#M.deprecations + 1] = tostring(msg)
  end
end
function M.clear_notes() M.notes = {} end
function M.note_texts()
  local t = {}
  for _, n in ipairs(M.notes) do
    t[#t + 1] = n.msg
  end
  return t
end

function M.wait(ms, fn, msg)
  local ok = vim.wait(ms, fn, 5)
  if not ok then error((msg or "condition not met") .. " within " .. ms .. " ms", 2) end
end

-- Lines of a buffer without the trailing empty ones (terminal screen rows).
function M.lines(buf)
  local l = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  while #l > 0 and l[#l] == "" do
    l[#l] = nil
  end
  return l
end

-- The last line of the console, once it starts with "[proctor] ".
function M.wait_final(buf, ms)
  local final
  M.wait(ms or 10000, function()
    local l = M.lines(buf)
    if l[#l] and l[#l]:find("^%[proctor%] ") then
      final = l[#l]
      return true
    end
  end, "the final line")
  return final
end

-- Hold the main loop (no event is polled meanwhile) until the engine counted
-- `total` bytes of execution `id`'s stdout, or `ms` passed (default 60 s):
-- the whole burst then waits in the ring before the first poll.
function M.hold_until_written(id, total, ms)
  local eng = require("proctor.engine").current()
  local deadline = uv.now() + (ms or 60000)
  repeat
    uv.sleep(10)
    uv.update_time()
    local rec = eng:get(id)
  until (rec and rec.bytes and rec.bytes.stdout == total) or uv.now() > deadline
end

-- What the console of `id` holds (for a failure message): its backlog and
-- whether it ended and wrote its final line.
function M.console_state(id)
  local CH = require("proctor.console")._H
  local c = CH.consoles[id] or CH.pending[id]
  if not c then return "no console" end
  local b = c.backlog
  return {
    n = b.n,
    chunks = #b.chunks,
    next = b.next,
    skipped = b.skipped,
    ended = c.ended and c.ended.state,
    final_done = c.final_done,
    parked = c.parked,
  }
end

-- How a plain terminal renders `bytes` (the reference).
function M.reference_render(bytes)
  local buf = vim.api.nvim_create_buf(false, true)
  local chan = vim.api.nvim_open_term(buf, {})
  vim.api.nvim_chan_send(chan, bytes)
  local prev, same = nil, 0
  vim.wait(2000, function()
    local cur = table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
    if cur == prev and cur:find("%S") then
      same = same + 1
    else
      same = 0
    end
    prev = cur
    return same >= 5
  end, 10)
  local l = M.lines(buf)
  vim.api.nvim_buf_delete(buf, { force = true })
  return l
end

function M.has_line(buf, pat)
  for _, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
    if l:find(pat) then return true end
  end
  return false
end

-- Is any process alive (not a zombie) whose environment contains `mark`?
function M.marked_pids(mark)
  local pids = {}
  local fs = uv.fs_scandir("/proc")
  while fs do
    local name = uv.fs_scandir_next(fs)
    if not name then break end
    if name:match("^%d+$") then
      local f = io.open("/proc/" .. name .. "/environ", "rb")
      local env = f and f:read("*a") or ""
      if f then f:close() end
      if env:find(mark, 1, true) then
        local sf = io.open("/proc/" .. name .. "/stat", "r")
        local st = sf and sf:read("*l") or ""
        if sf then sf:close() end
        local state = st:match("^%d+ %b() (%S)")
        if state and state ~= "Z" and state ~= "X" then pids[#pids + 1] = tonumber(name) end
      end
    end
  end
  return pids
end

-- Children of `pid` by state: { Z = n, other = n }
function M.children(pid)
  local res = { Z = 0, other = 0, list = {} }
  local fs = uv.fs_scandir("/proc")
  while fs do
    local name = uv.fs_scandir_next(fs)
    if not name then break end
    if name:match("^%d+$") then
      local sf = io.open("/proc/" .. name .. "/stat", "r")
      local st = sf and sf:read("*l") or ""
      if sf then sf:close() end
      local comm, state, ppid = st:match("^%d+ (%b()) (%S) (%d+)")
      if ppid and tonumber(ppid) == pid then
        if state == "Z" then
          res.Z = res.Z + 1
        else
          res.other = res.other + 1
        end
        res.list[#res.list + 1] = name .. comm .. state
      end
    end
  end
  return res
end

-- A child Neovim with proctor on 'runtimepath', driven over msgpack-rpc.
-- `listen`: also listen on this address (for tests that SIGKILL it).
-- `init`: start it as `nvim --clean -u <init>` instead (the init loads proctor).
function M.child(opts)
  opts = opts or {}
  local watch = (M.watch_deprecations:gsub("%s*\n%s*", " "))
  local cmd = {
    vim.v.progpath,
    "--embed",
    "--headless",
    "-u",
    "NONE",
    "-i",
    "NONE",
    "-n",
    "--cmd",
    "lua " .. watch,
    "--cmd",
    "set rtp^=" .. M.root,
  }
  if opts.init then
    cmd = {
      vim.v.progpath,
      "--embed",
      "--headless",
      "--clean",
      "-n",
      "--cmd",
      "lua " .. watch,
      "-u",
      opts.init,
    }
  end
  if M.core_rtp then vim.list_extend(cmd, { "--cmd", "set rtp^=" .. M.core_rtp }) end
  if not opts.init then vim.list_extend(cmd, { "--cmd", "runtime plugin/proctor.lua" }) end
  -- A private state directory unless the test names one: the history (on by
  -- default, shared by every editor of one state directory) of one child
  -- never shows in another's list.
  local env = vim.tbl_extend("force", {}, opts.env or {})
  if env.XDG_STATE_HOME == nil then
    env.XDG_STATE_HOME = vim.fn.tempname()
    local state = env.XDG_STATE_HOME
    require("harness").defer(function() vim.fn.delete(state, "rf") end)
  end
  local job = vim.fn.jobstart(cmd, { rpc = true, env = env })
  assert(job > 0, "could not start a child nvim")
  local c = { job = job, pid = vim.fn.jobpid(job) }
  -- stopped when the test ends, passed or failed (a failing assertion must
  -- not leave a Neovim and its executions behind)
  require("harness").defer(function() pcall(vim.fn.jobstop, job) end)
  function c.lua(code, ...) return vim.rpcrequest(job, "nvim_exec_lua", code, { ... }) end
  function c.input(keys) return vim.rpcrequest(job, "nvim_input", keys) end
  function c.cmd(s) return vim.rpcrequest(job, "nvim_command", s) end
  function c.stop()
    local ok, seen = pcall(
      c.lua,
      [[
      local d = _G.deprecations or {}
      for _, m in ipairs(_G.notes or {}) do
        if tostring(m):lower():find("deprecat") then d[#d + 1] = tostring(m) end
      end
      for l in vim.fn.execute("messages"):gmatch("[^\n]+") do
        if l:lower():find("deprecat") then d[#d + 1] = l end
      end
      return d
    ]]
    )
    for _, m in ipairs(ok and seen or {}) do
      M.deprecations[#M.deprecations + 1] = "child Neovim: " .. m
    end
    pcall(vim.fn.jobstop, job)
  end
  -- Wait until `code` (a Lua expression returning a truthy value) holds in the child.
  function c.wait(ms, code, msg, ...)
    local args = { ... }
    local ok = vim.wait(ms, function()
      local ok2, v = pcall(c.lua, "return " .. code, unpack(args))
      return ok2 and v
    end, 20)
    if not ok then error((msg or code) .. ": not true within " .. ms .. " ms", 2) end
  end
  c.lua([[
    _G.notes = {}
    vim.notify = function(m, l) table.insert(_G.notes, m) end
    _G.lines = function(buf)
      local l = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
      while #l > 0 and l[#l] == "" do l[#l] = nil end
      return l
    end
    _G.has_line = function(buf, pat)
      for _, l in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
        if l:find(pat) then return true end
      end
      return false
    end
  ]])
  return c
end

function M.hrms() return uv.hrtime() / 1e6 end

-- What a test starts, it stops: M.leftovers() notes the executions that
-- exist now and returns a cleanup that force-cancels every execution started
-- since and still live, and waits (bounded) until they ended. tests/nvim/run.lua
-- defers one per test, so a test that fails half-way (its own cancel never
-- ran) stays one FAIL line instead of leaving a `sleep 30` that makes the
-- next tests' counts wrong.
function M.leftovers()
  local engine = require("proctor.engine")
  local before = {}
  local eng = engine.current()
  for _, r in ipairs(eng and eng:list() or {}) do
    before[r.id] = true
  end
  return function()
    local e = engine.current()
    if not e then return end
    local live = {}
    for _, r in ipairs(e:list() or {}) do
      if not before[r.id] and not engine.TERMINAL[r.state] then
        pcall(e.cancel, e, r.id, true)
        live[#live + 1] = r.id
      end
    end
    if #live == 0 then return end
    local done = vim.wait(20000, function()
      for _, id in ipairs(live) do
        if not engine.is_done(id) then return false end
      end
      return true
    end, 10)
    if not done then
      error("executions left running by the test did not end: " .. table.concat(live, ", "))
    end
  end
end

return M
