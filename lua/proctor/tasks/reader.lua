--- proctor.tasks.reader — follows the output of executions through the
--- engine's ring buffers, in bounded slices per event-loop tick, and hands
--- whole lines to consumers (problem matchers, ready patterns, probes).
---
---   output / state event ──► mark the reader ──► tick: eng:read(id, stream, offset, SLICE)
---                                                  │ until BUDGET_MS of main-loop time is used
---                                                  ▼
---                  cut at the last "\n", strip ANSI, "\r\n" → "\n" ──► consumer.chunk(text, stream)
---                  terminal state and every byte read ──► consumer.finish(record)
---
--- Reading from the ring (not the output events) sees every byte the engine
--- kept, also under a flood where the events carry only a tail
--- (`output_max_bytes`). A reader that falls more than `engine.output_limit`
--- behind loses the head; consumer.missed(n, stream) says how many bytes.
--- Requiring this module has no side effects.

local M = {}
local H = {}

local engine = require("proctor.engine")
local uv = require("proctor.compat").uv

--- Bytes read from one stream at a time.
M.SLICE = 65536
--- Main-loop time all readers may use per tick, in milliseconds.
M.BUDGET_MS = 4
--- A line longer than this is handed over in pieces of this size.
M.LINE_MAX = 1048576

H.readers = {} -- id -> reader
H.queue = {} -- ids with something to read, in order
H.queued = {}
H.scheduled = false
H.timer = nil
H.hooked = false

---@class proctor.tasks.Consumer
---@field chunk fun(text: string, stream: string)|nil whole lines ("\n"-terminated), ANSI stripped
---@field finish fun(rec: table)|nil once, after the last byte, with the final record
---@field missed fun(bytes: integer, stream: string)|nil the ring dropped bytes before they were read

--- Follow the output of execution `id` from its first byte.
--- Returns a handle with `detach()`.
---@param id integer
---@param consumer proctor.tasks.Consumer
function M.attach(id, consumer)
  H.hook()
  local r = H.readers[id]
  if not r then
    r = { id = id, off = {}, partial = {}, consumers = {}, ended = nil }
    H.readers[id] = r
  end
  local entry = { consumer = consumer }
  r.consumers[#r.consumers + 1] = entry
  H.mark(id)
  return {
    detach = function()
      entry.gone = true
      H.prune(r)
    end,
  }
end

--- True while a reader follows `id` (tests).
function M.following(id) return H.readers[id] ~= nil end

-- Helpers ------------------------------------------------------------------------

function H.hook()
  if H.hooked then return end
  H.hooked = true
  engine.subscribe("tasks.reader", function(ev)
    local r = H.readers[ev.id]
    if not r then return end
    if ev.type == "output" then
      H.mark(ev.id)
    elseif ev.type == "state" and engine.TERMINAL[ev.state] then
      r.ended = true
      H.mark(ev.id)
    end
  end)
end

function H.mark(id)
  if not H.queued[id] then
    H.queued[id] = true
    H.queue[#H.queue + 1] = id
  end
  if not H.scheduled then
    H.scheduled = true
    vim.schedule(H.tick)
  end
end

function H.prune(r)
  local keep = {}
  for _, e in ipairs(r.consumers) do
    if not e.gone then keep[#keep + 1] = e end
  end
  r.consumers = keep
  if #keep == 0 then H.readers[r.id] = nil end
end

-- One tick: read slices round-robin until the budget is used.
function H.tick()
  H.scheduled = false
  local eng = engine.current()
  if not eng then
    H.queue, H.queued = {}, {}
    return
  end
  local t0 = uv.hrtime()
  local budget = M.BUDGET_MS * 1e6
  local i = 1
  while #H.queue > 0 and uv.hrtime() - t0 < budget do
    if i > #H.queue then i = 1 end
    local id = H.queue[i]
    local r = H.readers[id]
    local more = r ~= nil and H.step(eng, r)
    if more then
      i = i + 1
    else
      table.remove(H.queue, i)
      H.queued[id] = nil
    end
  end
  if #H.queue > 0 then
    -- Yield to the loop (input, timers), then continue.
    H.scheduled = true
    H.timer = H.timer or uv.new_timer()
    H.timer:start(0, 0, function() vim.schedule(H.tick) end)
  end
end

-- Read one slice of each stream of `r`. Returns true when more may be waiting.
function H.step(eng, r)
  if not r.streams then
    local rec = eng:get(r.id)
    if not rec then return H.finish(r, nil) end
    r.streams = rec.pty and { "pty" } or { "stdout", "stderr" }
    r.pty = rec.pty
  end
  local more = false
  for _, s in ipairs(r.streams) do
    local from = r.off[s] or 0
    local data, nxt, missed = eng:read(r.id, s, from, M.SLICE)
    if data == nil then return H.finish(r, nil) end -- deleted meanwhile
    if missed and missed > 0 then H.each(r, "missed", missed, s) end
    r.off[s] = nxt
    if #data > 0 then
      if #data >= M.SLICE then more = true end
      H.deliver(r, s, data)
    end
    if #r.consumers == 0 then return false end
  end
  if not more and r.ended then
    local rec = eng:get(r.id)
    -- The terminal event follows the last byte; anything past the offsets
    -- now is still to be read (a slice ended exactly at its end).
    if rec then
      for _, s in ipairs(r.streams) do
        if (rec.bytes and rec.bytes[s] or 0) > (r.off[s] or 0) then return true end
      end
    end
    return H.finish(r, rec)
  end
  return more
end

-- Whole lines of `data` (with the partial line kept from before) to the consumers.
function H.deliver(r, s, data)
  local text = (r.partial[s] or "") .. data
  local last = H.last_newline(text)
  if not last and #text <= M.LINE_MAX then
    r.partial[s] = text
    return
  end
  if not last then -- a line this long is cut: memory stays bounded
    r.partial[s] = nil
    return H.each(r, "chunk", M.clean(text .. "\n"), s)
  end
  r.partial[s] = last < #text and text:sub(last + 1) or nil
  H.each(r, "chunk", M.clean(text:sub(1, last)), s)
end

function H.last_newline(text)
  for i = #text, 1, -1 do
    if text:byte(i) == 10 then return i end
  end
  return nil
end

function H.finish(r, rec)
  for _, s in ipairs(r.streams or {}) do
    local p = r.partial[s]
    if p and p ~= "" then H.each(r, "chunk", M.clean(p .. "\n"), s) end
    r.partial[s] = nil
  end
  H.readers[r.id] = nil
  H.each(r, "finish", rec or { id = r.id })
  return false
end

function H.each(r, what, a, b)
  for _, e in ipairs(r.consumers) do
    local fn = not e.gone and e.consumer[what]
    if fn then
      local ok, err = pcall(fn, a, b)
      if not ok then
        e.gone = true
        require("proctor.util").notify(("task output consumer of execution %d failed: %s"):format(r.id, tostring(err)))
      end
    end
  end
end

--- Text as a matcher wants it: escape sequences removed, "\r\n" and lone "\r"
--- made "\n" (each progress update becomes a line of its own).
---@param text string
---@return string
function M.clean(text)
  if text:find("\27", 1, true) then
    text = text:gsub("\27%[[0-?]*[ -/]*[@-~]", "") -- CSI
      :gsub("\27%][^\7\27]*\7", "") -- OSC ... BEL
      :gsub("\27%][^\27]*\27\\", "") -- OSC ... ST
      :gsub("\27[%(%)][%w]", "")
      :gsub("\27.", "")
  end
  if text:find("\r", 1, true) then text = text:gsub("\r\n", "\n"):gsub("\r", "\n") end
  return text
end

M._H = H

return M
