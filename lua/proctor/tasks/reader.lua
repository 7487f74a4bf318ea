--- proctor.tasks.reader — follows the output of executions and hands whole
--- lines to consumers (problem matchers, ready patterns, probes), in bounded
--- work per event-loop tick.
---
---   output event ──► queue its bytes ─────────────────┐  (no call into the engine)
---   output before attach ──► queue a range of the ring ┤
---                                                      ▼
---   tick, until BUDGET_MS of main-loop time is used: bytes → cut at the last "\n",
---   strip ANSI, "\r\n" → "\n" → consumer.chunk(text, stream); a range → ring:read
---   of the stream's ring (the first one of a stream: eng:read, which hands the
---   ring over too); the terminal state → consumer.finish(record)
---
--- The bytes of output events cost nothing to get: while a reader exists the
--- engine's polls hand over everything the ring holds (engine.want_output),
--- so ranges are output from before attach, or bytes an event skipped. The
--- reader keeps the last `ring` it got per stream (an event that skipped bytes
--- brings one, eng:read returns one) and reads ranges from it on this thread:
--- eng:read, a call that waits for the engine thread (a few ms while it is
--- busy with a flood), runs at most once per stream. Bytes
--- are lost only when the ring dropped them before a poll (more than
--- `engine.output_limit` between two polls) or past QUEUE_MAX waiting here;
--- consumer.missed(n, stream) counts them. Neither happens to a
--- `backpressure` execution (a run with diagnostics or a ready pattern): the
--- child waits while its bytes are not polled.
---
--- Back-pressure is per execution: a reader more than QUEUE_HIGH behind asks
--- the core to stop reading that execution (eng:hold_output), and to read it
--- again once it is down to QUEUE_LOW; every other execution, and the events
--- of this one, keep flowing. Requiring this module has no side effects.

local M = {}
local H = {}

local util = require("proctor.util")
local config = require("proctor.config")
local compat = require("proctor.compat")
local engine = require("proctor.engine")
local uv = compat.uv

--- Bytes handed to the consumers at a time.
M.SLICE = 65536
--- Bytes read from the ring at a time (a gap).
M.GAP_SLICE = 1048576
--- While readers follow executions, the engine's polls hand over what the
--- ring holds (engine.want_output(engine.output_limit)), so a gap only
--- comes from a range the ring no longer has anyway.
--- Main-loop time all readers may use per tick, in milliseconds.
M.BUDGET_MS = 3
--- Queued event bytes per execution past which the oldest are dropped.
M.QUEUE_MAX = 64 * 1024 * 1024
--- Queued bytes of one execution past which the core stops reading it
--- (eng:hold_output): its child waits, losing nothing; what its rings still
--- hold (at most output_limit a stream) arrives on top, under QUEUE_MAX.
M.QUEUE_HIGH = 16 * 1024 * 1024
--- Queued bytes of a held execution at which the core reads it again.
M.QUEUE_LOW = 4 * 1024 * 1024
--- A line longer than this is handed over in pieces of this size.
M.LINE_MAX = 1048576

H.readers = {} -- id -> reader
H.count = 0
H.queue = {} -- ids with something to read, in order
H.queued = {}
H.scheduled = false
H.timer = nil
H.hooked = false

---@class proctor.tasks.Consumer
---@field chunk fun(text: string, stream: string)|nil whole lines ("\n"-terminated), ANSI stripped
---@field finish fun(rec: table)|nil once, after the last byte, with the final record
---@field missed fun(bytes: integer, stream: string)|nil the ring dropped bytes before they were read

--- Follow the output of execution `id` from its first byte. Attach before
--- the events of its first output were handled (right after starting it)
--- or its earlier bytes are read from the ring. Returns a handle with `detach()`.
---@param id integer
---@param consumer proctor.tasks.Consumer
function M.attach(id, consumer)
  H.hook()
  local r = H.readers[id]
  if not r then
    r =
      { id = id, off = {}, partial = {}, consumers = {}, items = {}, head = 1, tail = 0, bytes = 0 }
    r.rings = {} -- stream -> the last `ring` got (an event's, eng:read's): ranges read from it
    H.readers[id] = r
    H.count = H.count + 1
    engine.want_output("tasks.reader", config.get().engine.output_limit)
    -- An execution that already ended (or has output): its ring from offset 0.
    if engine.state[id] and engine.state[id] ~= "queued" and engine.state[id] ~= "starting" then
      H.catch_up(r)
    end
  end
  local entry = { consumer = consumer }
  r.consumers[#r.consumers + 1] = entry
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
      H.on_output(r, ev.stream, ev.offset, ev.data, ev.ring)
    elseif ev.type == "state" and engine.TERMINAL[ev.state] then
      H.push(r, { finish = true, record = ev.record }) -- the record as of the end
    end
  end)
end

-- Queue the bytes of an output event. While a reader exists the polls hand
-- over all the ring holds (output_floor), so bytes an event skipped are
-- seldom still in the ring; the event's `ring` says which are: the skipped
-- range is read from it in its turn (what it no longer holds counts as missed).
function H.on_output(r, s, offset, data, ring)
  if ring then r.rings[s] = ring end
  local have = r.off[s] or 0
  if offset + #data <= have then return end
  if offset > have then
    H.push(
      r,
      ring and { stream = s, from = have, to = offset } or { stream = s, lost = offset - have }
    )
  end
  if offset < have then data = data:sub(have - offset + 1) end
  r.off[s] = math.max(offset, have) + #data
  if #data > 0 then H.push(r, { stream = s, data = data }) end
end

-- An execution already under way: everything it wrote so far is a gap.
function H.catch_up(r)
  local eng = engine.current()
  local rec = eng and eng:get(r.id)
  if not rec then return end
  for s, n in pairs(rec.bytes or {}) do
    if n > 0 then
      H.push(r, { stream = s, from = 0, to = n })
      r.off[s] = n
    end
  end
  if engine.TERMINAL[rec.state] then H.push(r, { finish = true, record = rec }) end
end

-- Bounded memory: past QUEUE_MAX queued bytes the oldest bytes become a gap
-- again (read from the ring when their turn comes, if it still has them).
function H.push(r, item)
  r.tail = r.tail + 1
  r.items[r.tail] = item
  if item.data then
    r.bytes = r.bytes + #item.data
    H.pace(r)
    local i = r.head
    while r.bytes > M.QUEUE_MAX and i < r.tail do
      local it = r.items[i]
      if it.data then
        r.bytes = r.bytes - #it.data
        r.items[i] = { stream = it.stream, lost = #it.data }
      end
      i = i + 1
    end
  end
  H.mark(r.id)
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
  if #keep == 0 then H.forget(r) end
end

function H.forget(r)
  if H.readers[r.id] ~= r then return end
  H.readers[r.id] = nil
  H.count = H.count - 1
  if r.held then H.hold(r, false) end
  if H.count == 0 then engine.want_output("tasks.reader", nil) end
end

-- Per-execution back-pressure: hold the execution's output past QUEUE_HIGH
-- queued bytes, read it again at QUEUE_LOW.
function H.pace(r)
  if not r.held and r.bytes > M.QUEUE_HIGH then
    H.hold(r, true)
  elseif r.held and r.bytes <= M.QUEUE_LOW then
    H.hold(r, false)
  end
end

function H.hold(r, on)
  r.held = on
  local eng = engine.current()
  if eng then eng:hold_output(r.id, on) end
end

--- Is the core holding the output of `id` for its reader (tests)?
function M.holding(id)
  local r = H.readers[id]
  return r ~= nil and r.held == true
end

-- One tick: work on the readers round-robin until the budget is used.
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

-- Handle the next queued item of `r` (at most SLICE bytes of it). Returns
-- true when more is queued.
function H.step(eng, r)
  local it = r.items[r.head]
  if not it and not r.pre then return false end
  if r.pre then return H.slice(r, r.pre) end
  if it.finish then
    r.items[r.head] = nil
    r.head = r.head + 1
    -- the record its terminal event brought: no eng:get, which would wait for
    -- the engine thread (busy with the next flood)
    return H.finish(r, it.record or eng:get(r.id))
  end
  if it.lost then -- dropped from the queue (QUEUE_MAX): counted, not read
    H.each(r, "missed", it.lost, it.stream)
    r.items[r.head] = nil
    r.head = r.head + 1
    return r.head <= r.tail
  end
  if not it.data then
    -- A gap: one read of up to GAP_SLICE from the stream's ring, then handled
    -- SLICE by SLICE as data. The ring kept from an event or an earlier read
    -- is read on this thread; without one, eng:read waits for the engine
    -- thread once and hands the ring over for the rest.
    local want = math.min(it.to - it.from, M.GAP_SLICE)
    local data, nxt = H.read_range(eng, r, it.stream, it.from, want)
    if data == nil then return H.finish(r, nil) end -- deleted meanwhile
    if data == false then
      data, nxt = "", it.to
    end -- the spill file failed: missed
    local first = nxt - #data -- the ring may no longer hold the gap's start
    if first > it.from then
      H.each(r, "missed", math.min(first, it.to) - it.from, it.stream)
      if first >= it.to then
        data, nxt = "", it.to
      end
    end
    if nxt > it.to then
      data = data:sub(1, #data - (nxt - it.to))
      nxt = it.to
    end
    if nxt >= it.to or #data == 0 then
      it.data, it.from, it.to = data, nil, nil
    else
      it.from = nxt
      r.pre = { stream = it.stream, data = data } -- before the rest of the gap
    end
    r.bytes = r.bytes + #data
    return true
  end
  return H.slice(r, it)
end

-- Up to `want` bytes of stream `s` of r from offset `from`: data, next offset
-- (eng:read's results). Through the ring kept for the stream, on this thread;
-- without one, eng:read, which hands the ring over for the next reads. nil:
-- the execution is gone (eng:read); false: the ring's spill file failed.
function H.read_range(eng, r, s, from, want)
  local ring = r.rings[s]
  if ring then
    local data, nxt = ring:read(from, want)
    if data == nil then return false end
    return data, nxt
  end
  local data, nxt, _, got = eng:read(r.id, s, from, want)
  r.rings[s] = got
  return data, nxt
end

-- Hand SLICE bytes of queued item `cur` (the current item, or r.pre) over.
function H.slice(r, cur)
  local pos = cur.pos or 1
  local stop = math.min(#cur.data, pos + M.SLICE - 1)
  local data = (pos == 1 and stop == #cur.data) and cur.data or cur.data:sub(pos, stop)
  if stop < #cur.data then
    cur.pos = stop + 1
  elseif cur == r.pre then
    r.pre = nil
  else
    r.items[r.head] = nil
    r.head = r.head + 1
  end
  r.bytes = r.bytes - #data
  if r.held then H.pace(r) end
  H.deliver(r, cur.stream, data)
  if #r.consumers == 0 then return false end
  return r.pre ~= nil or r.head <= r.tail
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
  for s, p in pairs(r.partial) do
    if p ~= "" then H.each(r, "chunk", M.clean(p .. "\n"), s) end
  end
  r.partial = {}
  H.forget(r)
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
        util.notify(("task output consumer of execution %d failed: %s"):format(r.id, tostring(err)))
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
    text = text
      :gsub("\27%[[0-?]*[ -/]*[@-~]", "") -- CSI
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
