--- proctor.tasks.traits.ready — `ready = { pattern = "ERE" }` (or `{ regex =
--- "Vim regex" }`, what a tasks.json's endsPattern becomes): the run is
--- ready (it settles, `after` releases its dependents, User ProctorTaskReady
--- fires) when a line of its output matches (|proctor-services|).

local M = {}

local reader = require("proctor.tasks.reader")
local proctor = require("proctor")
local util = require("proctor.util")

M.option = { ready = "table,string" }

--- An extended regular expression (POSIX ERE, as the core's patterns) as a
--- Vim regex: very magic, with the characters that are special only there escaped.
---@param pat string
---@return string
function M.ere(pat)
  local out, i, n, bracket = { "\\v" }, 1, #pat, false
  while i <= n do
    local c = pat:sub(i, i)
    if c == "\\" then
      out[#out + 1] = pat:sub(i, i + 1)
      i = i + 1
    elseif bracket then
      out[#out + 1] = c
      if c == "]" then bracket = false end
    elseif c == "[" then
      bracket = true
      out[#out + 1] = c
      if pat:sub(i + 1, i + 1) == "^" then
        out[#out + 1] = "^"
        i = i + 1
      end
      if pat:sub(i + 1, i + 1) == "]" then
        out[#out + 1] = "]"
        i = i + 1
      end
    elseif c:find("[<>=@%%~&]") then
      out[#out + 1] = "\\" .. c
    else
      out[#out + 1] = c
    end
    i = i + 1
  end
  return table.concat(out)
end

function M.check(opts)
  if type(opts.ready) == "string" then opts.ready = { pattern = opts.ready } end
  if not opts.ready then return end
  local vre = opts.ready.regex
  if type(vre) ~= "string" and type(opts.ready.pattern) ~= "string" then
    return "'ready' must be { pattern = \"ERE\" }"
  end
  local ok, re = pcall(vim.regex, type(vre) == "string" and vre or M.ere(opts.ready.pattern))
  if not ok then return ("'ready.pattern' is not a valid pattern: %s"):format(tostring(re)) end
end

-- a ready pattern sees every byte: the child waits for the editor instead of
-- the ring dropping what a flood wrote while the editor was busy
function M.prepare(run, s)
  if run.opts.ready and s.backpressure == nil then s.backpressure = true end
end

function M.on_start(run, id)
  if not run.opts.ready then return end
  local r = run.opts.ready
  local re = vim.regex(type(r.regex) == "string" and r.regex or M.ere(r.pattern))
  local handle
  handle = reader.attach(id, {
    chunk = function(text)
      if run.ready[id] then return end
      for line in text:gmatch("([^\n]*)\n") do
        if re:match_str(line) then
          run.ready[id] = true
          run.ready_at[id] = util.now_ms()
          vim.schedule(function() handle.detach() end)
          proctor._fire("ProctorTaskReady", { id = id, task = run.name })
          if run.current == id then run:settle(true, "ready") end
          return
        end
      end
    end,
  })
end

return M
