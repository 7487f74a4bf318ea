--- proctor.acp — the client side of the Agent Client Protocol's terminals
--- (`terminal/create`, `terminal/output`, `terminal/wait_for_exit`,
--- `terminal/kill`, `terminal/release`), backed by proctor executions.
---
---   local terminal = require("proctor.acp").terminal({ owner = "Claude", open = "split" })
---   -- an ACP client that got request {id, method, params} from its agent:
---   if terminal.handles(method) then
---     terminal.handle(method, params, function(result, err) reply(id, result, err) end)
---   end
---
--- Every terminal is a normal proctor execution: owned by `owner`, in the list
--- view, with a console (opened per `open`) the user can type into or cancel.
--- It runs under a pseudo-terminal; `terminal/output` answers the text a
--- terminal would show (escape sequences removed, `\r` applied), truncated
--- from the beginning at a character boundary to `outputByteLimit`.
---
--- Handlers answer `result, nil` or `nil, err` where `err` has ACP's JSON-RPC
--- error shape `{ code, message, data? }`. Given a `respond(result, err)`
--- callback, a handler answers through it instead (`wait_for_exit` then
--- answers when the process has exited, without blocking the editor);
--- without one, `wait_for_exit` blocks (|vim.wait()|). See :help proctor-acp.
---
--- Every request is answered exactly once: an error inside a handler becomes
--- a -32603 answer, and a handler called in a fast event (a libuv callback,
--- where most of the editor's API is off limits) runs again from
--- |vim.schedule()| (given `respond`). Agent terminals get `PAGER=cat` and
--- `GIT_PAGER=cat` unless the agent's env (or `opts.env`) says otherwise: a
--- pager would wait for a key under the pseudo-terminal.
--- Requiring this module has no side effects.

local M = {}
local H = {}

local proctor = require("proctor")
local engine = require("proctor.engine")
local util = require("proctor.util")

--- JSON-RPC error codes used in answers.
M.codes = {
  invalid_params = -32602,
  internal = -32603,
  method_not_found = -32601,
  not_found = -32002, -- ACP "Resource not found": an unknown or released terminal
}

M.methods = {
  "terminal/create",
  "terminal/output",
  "terminal/wait_for_exit",
  "terminal/kill",
  "terminal/release",
}

---@class proctor.AcpTerminalOpts
---@field owner string|nil        owner of the executions (the agent's name); default "acp"
---@field open string|false|nil   "split" | "vsplit" | "tab" | "float" | false: open each console (default false)
---@field enter boolean|nil       move the cursor into an opened console (default false)
---@field cwd string|nil          working directory when the agent gives none (default: the current one)
---@field env table|nil           variables added to every terminal's environment
---@field output_limit integer|nil bytes kept when the agent gives no outputByteLimit (default 1 MiB)

--- Make a set of terminal handlers. Each instance keeps its own terminals,
--- scoped by the request's `sessionId`.
---@param opts proctor.AcpTerminalOpts|nil
---@return table handlers keyed by method name, plus handles(), handle(), release_session(), terminals()
function M.terminal(opts)
  opts = opts or {}
  vim.validate({
    owner = { opts.owner, "string", true },
    enter = { opts.enter, "boolean", true },
    cwd = { opts.cwd, "string", true },
    env = { opts.env, "table", true },
    output_limit = { opts.output_limit, "number", true },
  })
  local open = opts.open
  if open ~= nil and open ~= false and not H.OPEN[open] then
    error(
      "proctor.acp: 'open' must be false or one of split, vsplit, tab, float, current; got "
        .. tostring(open),
      2
    )
  end
  local self = {
    owner = opts.owner or "acp",
    open = open or false,
    enter = opts.enter or false,
    cwd = opts.cwd,
    env = opts.env or {},
    output_limit = opts.output_limit or 1048576,
    sessions = {}, -- sessionId -> { [terminalId] = term }
    released = {}, -- sessionId -> { [terminalId] = true }
  }
  local t = {}
  t["terminal/create"] = H.guarded(
    "terminal/create",
    function(params, respond) return H.answer(respond, H.create(self, params)) end
  )
  t["terminal/output"] = H.guarded(
    "terminal/output",
    function(params, respond) return H.answer(respond, H.with(self, params, H.output)) end
  )
  t["terminal/kill"] = H.guarded(
    "terminal/kill",
    function(params, respond) return H.answer(respond, H.with(self, params, H.kill)) end
  )
  t["terminal/release"] = H.guarded(
    "terminal/release",
    function(params, respond) return H.answer(respond, H.with(self, params, H.release)) end
  )
  t["terminal/wait_for_exit"] = H.guarded("terminal/wait_for_exit", function(params, respond)
    local term, err = H.find(self, params)
    if not term then return H.answer(respond, nil, err) end
    return H.wait(term, respond)
  end)

  --- Is `method` one of the terminal methods?
  function t.handles(method)
    return type(method) == "string" and t[method] ~= nil and method:find("^terminal/") ~= nil
  end

  --- Answer a request of any terminal method through `respond(result, err)`,
  --- exactly once. Returns false (and answers nothing) when `method` is not a
  --- terminal method. Callable in a fast event: it then runs from vim.schedule().
  function t.handle(method, params, respond)
    if not t.handles(method) then return false end
    t[method](params, respond)
    return true
  end

  --- Release every terminal of a session (e.g. when the session ends).
  function t.release_session(session_id)
    for id in pairs(self.sessions[session_id] or {}) do
      H.with(self, { sessionId = session_id, terminalId = id }, H.release)
    end
  end

  --- The live terminals: list of { sessionId, terminalId, id } (for UIs and tests).
  function t.terminals()
    local out = {}
    for sid, terms in pairs(self.sessions) do
      for tid, term in pairs(terms) do
        out[#out + 1] = { sessionId = sid, terminalId = tid, id = term.id }
      end
    end
    table.sort(out, function(a, b) return a.id < b.id end)
    return out
  end

  return t
end

-- Helpers ----------------------------------------------------------------------------

H.OPEN = { split = true, vsplit = true, tab = true, float = true, current = true }

function H.err(code, message, data) return { code = code, message = message, data = data } end

-- A handler `fn(params, respond)` made safe: in a fast event it runs again from
-- vim.schedule() (given respond; without one it cannot wait, and answers
-- -32603); an error it raises becomes a -32603 answer; respond is called at
-- most once (a second call is dropped).
function H.guarded(method, fn)
  local function run(params, respond)
    local answered = false
    local once = respond
      and function(result, err)
        if answered then return end
        answered = true
        respond(result, err)
      end
    local ok, result, e = pcall(fn, params, once)
    if ok then return result, e end
    local err =
      H.err(M.codes.internal, ("proctor.acp: %s failed: %s"):format(method, tostring(result)))
    if not respond then return nil, err end
    if not answered then
      answered = true
      respond(nil, err)
    else
      -- the error came from respond itself: the request was answered; say so once
      util.notify("acp: " .. err.message)
    end
  end
  return function(params, respond)
    if vim.in_fast_event() then
      if respond then
        vim.schedule(function() run(params, respond) end)
        return
      end
      return nil,
        H.err(
          M.codes.internal,
          "proctor.acp: " .. method .. " called in a fast event without respond"
        )
    end
    return run(params, respond)
  end
end

-- Answer through respond when given, else return the pair.
function H.answer(respond, result, err)
  if respond then
    respond(result, err)
    return
  end
  return result, err
end

local function is_str(v) return type(v) == "string" end

function H.create(self, p)
  if type(p) ~= "table" then
    return nil, H.err(M.codes.invalid_params, "params must be an object")
  end
  if not is_str(p.sessionId) then
    return nil, H.err(M.codes.invalid_params, "sessionId (string) is required")
  end
  if not is_str(p.command) or p.command == "" then
    return nil, H.err(M.codes.invalid_params, "command (a non-empty string) is required")
  end
  local args = p.args
  if args == nil or args == vim.NIL then args = {} end
  if type(args) ~= "table" then
    return nil, H.err(M.codes.invalid_params, "args must be a list of strings")
  end
  for i, a in ipairs(args) do
    if not is_str(a) then
      return nil, H.err(M.codes.invalid_params, ("args[%d] must be a string"):format(i - 1))
    end
  end
  -- A pager would wait for a key under the pty: cat, unless told otherwise.
  local env = { PAGER = "cat", GIT_PAGER = "cat" }
  for k, v in pairs(self.env) do
    env[k] = v
  end
  if p.env ~= nil and p.env ~= vim.NIL then
    if type(p.env) ~= "table" then
      return nil, H.err(M.codes.invalid_params, "env must be a list of {name, value}")
    end
    for i, e in ipairs(p.env) do
      if
        type(e) ~= "table"
        or not is_str(e.name)
        or not is_str(e.value)
        or e.name == ""
        or e.name:find("=", 1, true)
      then
        return nil,
          H.err(
            M.codes.invalid_params,
            ("env[%d] must be {name, value} with a valid name"):format(i - 1)
          )
      end
      env[e.name] = e.value
    end
  end
  local cwd = p.cwd
  if cwd == nil or cwd == vim.NIL then
    cwd = self.cwd or vim.fn.getcwd()
  elseif not is_str(cwd) or cwd:sub(1, 1) ~= "/" then
    return nil, H.err(M.codes.invalid_params, "cwd must be an absolute path")
  end
  if vim.fn.isdirectory(cwd) == 0 then
    return nil, H.err(M.codes.invalid_params, "cwd is not a directory: " .. cwd)
  end
  local limit = p.outputByteLimit
  if limit == vim.NIL then limit = nil end
  if limit ~= nil and (type(limit) ~= "number" or limit < 0 or limit ~= math.floor(limit)) then
    return nil, H.err(M.codes.invalid_params, "outputByteLimit must be a non-negative integer")
  end
  -- No args: a command line for the shell (agents send "npm test"); else argv.
  -- (argv built by a loop: unpack() of 8,000 args raises "too many results to unpack")
  local cmd = p.command
  if #args > 0 then
    cmd = { p.command }
    for i = 1, #args do
      cmd[i + 1] = args[i]
    end
  end
  local term = { session = p.sessionId, limit = limit or self.output_limit, waiters = {} }
  local ex, msg = proctor._run({
    cmd = cmd,
    cwd = cwd,
    env = env,
    owner = self.owner,
    pty = true,
    on_exit = function(_, rec) H.exited(term, rec) end,
  })
  if not ex then
    return nil, H.err(M.codes.internal, "proctor could not start it: " .. tostring(msg))
  end
  term.id = ex.id
  local tid = tostring(ex.id)
  self.sessions[p.sessionId] = self.sessions[p.sessionId] or {}
  self.sessions[p.sessionId][tid] = term
  if self.open then
    -- No room for another window (E36): the console is still made, for later.
    local ok = pcall(proctor.open, ex.id, { open = self.open, enter = self.enter })
    if not ok then pcall(proctor.open, ex.id, { open = "none" }) end
  end
  return { terminalId = tid }
end

-- Run fn(self, term, params) for the terminal named by params.
function H.with(self, p, fn)
  local term, err = H.find(self, p)
  if not term then return nil, err end
  return fn(self, term, p)
end

function H.find(self, p)
  if type(p) ~= "table" or not is_str(p.sessionId) or not is_str(p.terminalId) then
    return nil, H.err(M.codes.invalid_params, "sessionId and terminalId (strings) are required")
  end
  local term = (self.sessions[p.sessionId] or {})[p.terminalId]
  if term then return term end
  local data = { sessionId = p.sessionId, terminalId = p.terminalId }
  if (self.released[p.sessionId] or {})[p.terminalId] then
    return nil, H.err(M.codes.not_found, "terminal " .. p.terminalId .. " was released", data)
  end
  return nil,
    H.err(M.codes.not_found, "no terminal " .. p.terminalId .. " in session " .. p.sessionId, data)
end

-- The record now, from the core (nil, err when the execution is gone).
function H.record(term)
  local eng = engine.current()
  if not eng then return nil, H.err(M.codes.internal, "the proctor engine is closed") end
  local rec, msg = eng:get(term.id)
  if not rec then
    return nil,
      H.err(
        M.codes.not_found,
        "execution " .. term.id .. " no longer exists (" .. tostring(msg) .. ")"
      )
  end
  return rec
end

local TERMINAL = { completed = true, failed = true, canceled = true, timed_out = true }

function H.exit_status(rec)
  if rec.reason == "spawn_error" then return { exitCode = 127 } end
  return { exitCode = rec.exit_code, signal = rec.signal }
end

-- The text a terminal shows for `data` (escapes removed, \r applied, \r\n -> \n),
-- as valid UTF-8 (JSON needs it).
function H.render(data)
  if data == "" then return "" end
  local text = table.concat(util.plain_lines(data), "\n")
  if data:find("\n$") then text = text .. "\n" end
  return H.utf8(text)
end

-- `s` with every byte that is not part of a valid UTF-8 sequence replaced by U+FFFD.
function H.utf8(s)
  if not s:find("[\128-\255]") then return s end
  local out, n, run, i, len = {}, 0, 1, 1, #s
  local byte = string.byte
  while i <= len do
    local c = byte(s, i)
    if c < 0x80 then
      i = i + 1
    else
      local k = (c >= 0xC2 and c <= 0xDF) and 2
        or (c >= 0xE0 and c <= 0xEF) and 3
        or (c >= 0xF0 and c <= 0xF4) and 4
        or 0
      local ok = k > 0 and i + k - 1 <= len
      if ok then
        for j = i + 1, i + k - 1 do
          local d = byte(s, j)
          if d < 0x80 or d > 0xBF then ok = false end
        end
      end
      if ok and k >= 3 then
        local d = byte(s, i + 1)
        ok = not (
          (c == 0xE0 and d < 0xA0)
          or (c == 0xED and d > 0x9F)
          or (c == 0xF0 and d < 0x90)
          or (c == 0xF4 and d > 0x8F)
        )
      end
      if ok then
        i = i + k
      else
        out[n + 1], out[n + 2] = s:sub(run, i - 1), "\239\191\189"
        n = n + 2
        i = i + 1
        run = i
      end
    end
  end
  if n == 0 then return s end
  out[n + 1] = s:sub(run)
  return table.concat(out)
end

-- Keep at most `limit` bytes of `s`, cut from the start at a character boundary.
function H.tail(s, limit)
  if #s <= limit then return s, false end
  local i = #s - limit + 1
  while i <= #s do
    local b = s:byte(i)
    if b < 0x80 or b >= 0xC0 then break end -- not a continuation byte
    i = i + 1
  end
  return s:sub(i), true
end

function H.output(self, term)
  local rec, err = H.record(term)
  if not rec then return nil, err end
  local eng = engine.current()
  local total = rec.bytes and rec.bytes.pty or 0
  -- The limit is on the text (escapes removed, \r applied), which can be far
  -- shorter than the bytes: read a window of the newest bytes, and widen it
  -- until its text reaches the limit or it holds everything the ring kept.
  local window = 2 * term.limit + 4096
  local from, data, missed, text
  while true do
    from = math.max(0, total - window)
    local d, _, m = eng:read(term.id, "pty", from, total - from + 1)
    data, missed = d or "", m or 0
    text = H.render(data)
    -- (a margin past the limit: the first line of a window may start mid-sequence)
    if #text > term.limit + 256 or from == 0 or missed > 0 then break end
    window = window * 2
  end
  local cut
  text, cut = H.tail(text, term.limit)
  -- Cut, or older text exists that was not read (a window from > 0 whose text
  -- did not reach the limit ends only when the ring dropped the rest: missed).
  local res = { output = text, truncated = cut or missed > 0 }
  if rec.reason == "spawn_error" then
    res.output =
      H.tail("proctor: " .. tostring(rec.error or "the command did not start") .. "\n", term.limit)
  end
  if TERMINAL[rec.state] then res.exitStatus = H.exit_status(rec) end
  return res
end

function H.kill(self, term)
  local rec = H.record(term)
  if rec and not TERMINAL[rec.state] then proctor.cancel(term.id) end
  return vim.empty_dict()
end

function H.release(self, term, p)
  local rec = H.record(term)
  if rec and not TERMINAL[rec.state] then proctor.cancel(term.id) end
  self.sessions[p.sessionId][p.terminalId] = nil
  if next(self.sessions[p.sessionId]) == nil then self.sessions[p.sessionId] = nil end
  self.released[p.sessionId] = self.released[p.sessionId] or {}
  self.released[p.sessionId][p.terminalId] = true
  return vim.empty_dict()
end

function H.wait_result(rec)
  local s = H.exit_status(rec)
  return { exitCode = s.exitCode, signal = s.signal }
end

function H.wait(term, respond)
  if term.ended then return H.answer(respond, H.wait_result(term.ended)) end
  local rec, err = H.record(term)
  if not rec then return H.answer(respond, nil, err) end
  if TERMINAL[rec.state] then return H.answer(respond, H.wait_result(rec)) end
  if respond then
    term.waiters[#term.waiters + 1] = respond
    return
  end
  -- Synchronous form: process events until it ended (blocks the caller).
  local r, msg = proctor.get(term.id)
  if r then
    r, msg = r:wait()
  end
  if not r then return nil, H.err(M.codes.internal, tostring(msg)) end
  return H.wait_result(r)
end

-- The execution ended (on_exit, main loop): answer the parked waits.
function H.exited(term, rec)
  term.ended = rec
  local waiters = term.waiters
  term.waiters = {}
  for _, respond in ipairs(waiters) do
    local ok, e = pcall(respond, H.wait_result(rec))
    if not ok then util.notify("acp: a wait_for_exit answer failed: " .. tostring(e)) end
  end
end

M._H = H

return M
