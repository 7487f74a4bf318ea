--- proctor.util — small shared helpers: messages, durations, result lines, ANSI stripping.
--- Requiring this module has no side effects.

local M = {}

local compat = require("proctor.compat")

--- Show one `(proctor) …` message. `level` defaults to ERROR.
---@param msg string
---@param level integer|nil a vim.log.levels value
function M.notify(msg, level) vim.notify("(proctor) " .. msg, level or vim.log.levels.ERROR) end

--- Stop the current action with a message for the user: M.protect() shows it
--- as one `(proctor) …` error (no traceback).
---@param msg string
function M.die(msg) error({ proctor = msg }, 0) end

--- "ENOENT: no such execution 4" -> "no such execution 4"
---@param err any
---@return string
function M.strip(err) return (tostring(err):gsub("^E%u+: ", "")) end

--- `a, b` when `a` is not nil, else M.die() with the message `b` (a failure tuple's).
---@generic T
---@param a T|nil
---@param b any
---@return T, any
function M.check(a, b)
  if a == nil then M.die(M.strip(b)) end
  return a, b
end

--- `{ n = select("#", ...), ... }`: every value, nils included.
---@return table
function M.pack(...) return { n = select("#", ...), ... } end

--- The last internal error's traceback (for bug reports: `:lua print(require("proctor.util").last_trace)`).
M.last_trace = nil

--- Run `fn(...)`; return what it returns, or nil after showing one message:
--- M.die()'s text, or "internal error: …" for anything else (never a traceback).
---@param fn function
function M.protect(fn, ...)
  local args = { n = select("#", ...), ... }
  local res = M.pack(xpcall(function() return fn(unpack(args, 1, args.n)) end, function(e)
    if type(e) == "table" and e.proctor then return e end
    return { internal = tostring(e), trace = debug.traceback(tostring(e), 2) }
  end))
  if res[1] then return unpack(res, 2, res.n) end
  local e = res[2]
  if e.proctor then
    M.notify(e.proctor)
  else
    M.last_trace = e.trace
    M.notify("internal error: " .. e.internal:gsub("\n.*", ""))
  end
  return nil
end

--- "3.2 s", "450 ms", "2 min 05 s", "1 h 02 min".
---@param ms number|nil
function M.duration(ms)
  if not ms or ms < 0 then return "-" end
  if ms < 1000 then return string.format("%d ms", ms) end
  if ms < 60000 then return string.format("%.1f s", ms / 1000) end
  local s = math.floor(ms / 1000)
  if s < 3600 then return string.format("%d min %02d s", math.floor(s / 60), s % 60) end
  return string.format("%d h %02d min", math.floor(s / 3600), math.floor(s / 60) % 60)
end

--- Milliseconds since the epoch, like the core's timestamps.
---@return integer
function M.now_ms()
  local sec, usec = compat.uv.gettimeofday()
  return sec * 1000 + math.floor(usec / 1000)
end

--- Elapsed time of a record: duration for a finished one, so far for a live one.
---@param rec proctor.Record
---@return integer|nil
function M.elapsed_ms(rec)
  if rec.duration_ms and rec.ended_at then return rec.duration_ms end
  if rec.started_at then return M.now_ms() - rec.started_at end
  return nil
end

--- How an execution ended, as shown on the console's final line and in notifications:
--- "completed: exit 0 after 1.2 s", "failed: exit 2 after 3.2 s",
--- "failed: killed by SIGKILL after 1.0 s", "canceled after 2.0 s",
--- "canceled: interrupted (^C) after 2.0 s", "timed out after 10.0 s",
--- "failed: exec: foo: No such file or directory".
---@param rec proctor.Record|proctor.StateEvent a terminal record or state event
---@return string
function M.describe_end(rec)
  local after = rec.duration_ms and (" after " .. M.duration(rec.duration_ms)) or ""
  if rec.state == "failed" and rec.reason == "spawn_error" then
    return "failed: " .. tostring(rec.error or "the program could not start")
  end
  return M.state_text(rec) .. after
end

--- The state of a record in words: "running", "canceling…" (cancel requested,
--- the grace period runs), "completed", "failed: exit 2", "failed: killed by
--- SIGKILL", "canceled", "canceled: interrupted (^C)", "timed out".
--- `canceling`: a cancel was requested (the engine knows: engine.state_text).
---@param rec proctor.Record|proctor.StateEvent
---@param canceling boolean?
---@return string
function M.state_text(rec, canceling)
  local s = rec.state
  if s == "completed" then return "completed: exit 0" end
  if s == "failed" then
    if rec.reason == "spawn_error" then return "failed: could not start" end
    if rec.signal then return "failed: killed by " .. rec.signal end
    if rec.exit_code then return "failed: exit " .. rec.exit_code end
    return "failed: " .. (M.REASONS[rec.reason] or tostring(rec.reason or "?"))
  end
  if s == "canceled" then
    return rec.reason == "interrupted" and "canceled: interrupted (^C)" or "canceled"
  end
  if s == "timed_out" then return "timed out" end
  if canceling and (s == "running" or s == "starting") then return "canceling…" end
  return tostring(s)
end

--- Why an execution ended, in words, for the reasons that are not an exit or a signal.
M.REASONS = {
  supervisor_lost = "its supervisor (the shepherd) was lost",
  engine_closed = "the engine was closed",
  host_lost = "the editor that started it went away",
  timeout = "timed out",
  canceled = "canceled",
}

--- The first line of `text` ("…" marks a cut).
---@param text string
---@return string
function M.first_line(text)
  local nl = text:find("\n", 1, true)
  if not nl then return text end
  return text:sub(1, nl - 1) .. " …"
end

-- Shell words that make a command line more than one program with arguments.
M.SHELL_WORDS = {}
for w in
  ([=[if then else elif fi case esac for while until do done function select time ! { } [[ ]]
  cd export exit source . alias set unset read eval exec ulimit umask wait trap shift return break continue
  command type hash local readonly times jobs fg bg getopts]=]):gmatch("%S+")
do
  M.SHELL_WORDS[w] = true
end

--- How :Proctor run runs a command line, so that the program itself (not a
--- wrapping shell) gets the terminal's signals (^C):
---   a program and plain or quoted arguments -> an argv list (no shell);
---   one command with expansions ($VAR, globs, ~, redirections) -> "exec " .. text (the shell
---     expands, then becomes the program);
---   anything else (;, |, &&, a loop, a builtin, VAR=x ...) -> text as is (/bin/sh -c).
---@param text string
---@return string|string[]
function M.command_of(text)
  local words, expands = M.shell_words(text)
  if words == nil then return text end
  if #words == 0 or M.SHELL_WORDS[words[1]] or words[1]:find("=", 1, true) then return text end
  if expands then return "exec " .. text end
  return words
end

--- Split `text` into shell words. Returns the words and whether the shell
--- would expand something; nil when it is more than one simple command.
---@param text string
---@return string[]|nil words, boolean expands
function M.shell_words(text)
  local words, cur, inword, expands = {}, {}, false, false
  -- a redirection of one descriptor into another (2>&1) is not a background &
  local t = text:gsub("%d*>&%d*%-?", function(r)
    expands = true
    return (" "):rep(#r)
  end)
  local i = 1
  while i <= #t do
    local ch = t:sub(i, i)
    if ch:match("%s") then
      if ch == "\n" then return nil, false end
      if inword then
        words[#words + 1] = table.concat(cur)
        cur, inword = {}, false
      end
    elseif ch == "'" then
      local j = t:find("'", i + 1, true)
      if not j then return nil, false end
      cur[#cur + 1] = t:sub(i + 1, j - 1)
      inword = true
      i = j
    elseif ch == '"' then
      local j = t:find('"', i + 1, true)
      if not j then return nil, false end
      local inner = t:sub(i + 1, j - 1)
      if inner:find("[`]") or inner:find("%$%(") then return nil, false end
      if inner:find("[$\\]") then expands = true end
      cur[#cur + 1] = inner
      inword = true
      i = j
    elseif ch:find("[;|&()`{}]") then
      return nil, false
    elseif ch == "$" and t:sub(i + 1, i + 1) == "(" then
      return nil, false
    elseif ch:find("[$*?%[\\<>]") or ((ch == "~" or ch == "#") and not inword) then
      expands = true
      cur[#cur + 1] = ch
      inword = true
    else
      cur[#cur + 1] = ch
      inword = true
    end
    i = i + 1
  end
  if inword then words[#words + 1] = table.concat(cur) end
  return words, expands
end

--- The command of a record as one line, as typed (without the "exec " of M.command_of()).
---@param cmd string|string[]|nil
---@return string
function M.cmd_string(cmd)
  if type(cmd) == "table" then
    local parts = {}
    for i, a in ipairs(cmd) do
      a = tostring(a)
      parts[i] = a:find("[%s'\"$`\\]") and vim.fn.shellescape(a) or a
    end
    return table.concat(parts, " ")
  end
  -- the "exec " M.command_of() put before a command with expansions is no part of what was typed
  return (tostring(cmd or ""):gsub("^exec%s+(%S)", "%1", 1))
end

--- Label if set, else the command.
---@param rec proctor.Record
---@return string
function M.title(rec)
  if rec.label and rec.label ~= "" then return rec.label end
  return M.cmd_string(rec.cmd)
end

--- Strip terminal escape sequences and apply \r and \b the way a terminal would
--- show a finished line. Returns a list of lines.
---@param data string
---@return string[]
function M.plain_lines(data)
  data = data:gsub("\27%][^\7\27]*\7", "") -- OSC ... BEL
  data = data:gsub("\27%][^\27]*\27\\", "") -- OSC ... ST
  data = data:gsub("\27%[[0-?]*[ -/]*[@-~]", "") -- CSI
  data = data:gsub("\27[PX^_][^\27]*\27\\", "") -- DCS, SOS, PM, APC
  data = data:gsub("\27[%(%)%*%+][%w]", "") -- charset designation
  data = data:gsub("\27.", "") -- any other two-byte escape
  data = data:gsub("\r\n", "\n")
  local lines = vim.split(data, "\n", { plain = true })
  if lines[#lines] == "" then lines[#lines] = nil end
  for i, l in ipairs(lines) do
    if l:find("\r", 1, true) then
      local last = ""
      for part in (l .. "\r"):gmatch("([^\r]*)\r") do
        if part ~= "" then last = part .. last:sub(#part + 1) end
      end
      l = last
    end
    if l:find("\b", 1, true) then
      local n
      repeat
        l, n = l:gsub("[^\b]\b", "", 1)
      until n == 0
      l = l:gsub("\b", "")
    end
    lines[i] = l:gsub("[%z\1-\8\11-\31\127]", "")
  end
  return lines
end

return M
