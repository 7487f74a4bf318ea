--- proctor.console.backlog — the bytes of one console waiting to be rendered.
---
--- A pure model (no Neovim API, no windows): the console feeds it output
--- events and takes at most a budget of bytes per render tick.
---
---   output event ──► accept(): drop what was seen; a gap before it (bytes a
---        │           poll left in the ring: output_max_bytes) is queued as a
---        │           hole when the backlog can read the ring, else skipped
---        ▼
---   push(): append ── more than `limit` waiting (holes count)? keep about
---        │           `keep` bytes of the tail (from a line start when one is
---        │           near), count the rest
---        ▼
---   take(budget): "[proctor] … skipped N bytes" first when something was
---                 skipped, then at most `budget` bytes (pipes: \n -> \r\n);
---                 a hole is read from the ring (one read a take, at most
---                 READ_MAX bytes): only what the ring no longer holds is
---                 skipped; given the terminal's width, `\r` redraws that a
---                 later one overwrites are left out (console/overwrite.lua)
---                 and, while that keeps the text under the budget, more of
---                 the backlog is taken, up to SCAN × budget bytes of it
---
--- Requiring this module has no side effects.

---@class proctor.Backlog
---@field next table<string, integer> next expected byte offset per stream
---@field chunks (string|proctor.BacklogHole)[] waiting to be rendered, oldest first
---@field off integer bytes of chunks[1] already taken (a string then)
---@field n integer bytes in chunks, holes included
---@field read fun(stream: string, from: integer, max: integer, ring: any): string|nil, integer|nil|nil
---   reads the ring by offset (data, next offset; nil when gone): through `ring`, the
---   output event's handle on it (ring:read, on this thread), when the hole has one
---@field skipped integer bytes skipped since the last take (reported by it)
---@field at_bol boolean what the terminal got last ended a line
---@field ow proctor.Overwrite what the terminal's parser has seen (console/overwrite.lua)
local B = {}
B.__index = B

---@class proctor.BacklogHole bytes the ring holds that no output event brought
---@field stream string
---@field from integer absolute offset of the first byte
---@field to integer one past the last
---@field align boolean|nil cut by trim(): start after the next line end when one is near
---@field ring any|nil the output event's handle on the stream's ring (its `ring`), passed to read

local overwrite = require("proctor.console.overwrite")

-- One take reads at most SCAN × budget bytes of the backlog: leaving out
-- overwritten redraws costs the main thread a pass over every byte (about as
-- much as the terminal's parse of the bytes it saves).
B.SCAN = 8
-- A hole is read from the ring at most this many bytes at a time (one read a
-- take): a bigger Lua string is an allocation of its own (mmap'd, faulted in,
-- unmapped).
B.READ_MAX = 65536

-- Bytes a chunk stands for.
local function size(ch) return type(ch) == "string" and #ch or ch.to - ch.from end

--- A new, empty backlog. With `read` (a function(stream, from, max, ring)
--- that reads the ring by offset and returns data and the next offset, or nil
--- when the execution is gone; `ring` is what accept() was given with the
--- event that opened the hole) a gap between output events waits as a hole
--- and is read when its turn comes; without it a gap counts as skipped.
---@param read fun(stream: string, from: integer, max: integer, ring: any): string|nil, integer|nil|nil
---@return proctor.Backlog
function B.new(read)
  return setmetatable({
    next = {},
    chunks = {},
    off = 0,
    n = 0,
    skipped = 0,
    at_bol = true,
    ow = overwrite.new(),
    read = read,
  }, B)
end

--- Note that stream `stream` continues at absolute offset `offset` (a replay
--- read from the ring buffer; bytes before it were dropped there: `skipped`).
---@param stream string
---@param offset integer
function B:start(stream, offset) self.next[stream] = offset end

--- Output `data` of `stream` whose first byte is at absolute offset `offset`.
--- The part already seen is dropped; a gap before it (a poll hands over at
--- most output_max_bytes, the newest) is queued as a hole to read from the
--- ring (with `read`, see B.new) or counted as skipped; `ring` (the event's
--- handle on the ring, when it has one) goes with the hole to `read`. Returns
--- the new bytes (nil when there are none), to push() after the hole.
---@param stream string
---@param data string
---@param offset integer
---@param ring any|nil
---@return string|nil
function B:accept(stream, data, offset, ring)
  local nxt = self.next[stream] or 0
  if offset + #data <= nxt then return nil end
  if offset < nxt then
    data = data:sub(nxt - offset + 1)
    offset = nxt
  elseif offset > nxt then
    if self.read then
      self.chunks[#self.chunks + 1] = { stream = stream, from = nxt, to = offset, ring = ring }
      self.n = self.n + (offset - nxt)
    else
      self.skipped = self.skipped + (offset - nxt)
    end
  end
  self.next[stream] = offset + #data
  return data
end

--- Append `data`; when more than `limit` bytes wait, keep about `keep`.
---@param data string
---@param limit integer
---@param keep integer
function B:push(data, limit, keep)
  self.chunks[#self.chunks + 1] = data
  self.n = self.n + #data
  if self.n > limit then self:trim(keep) end
end

--- Drop the head so that about `keep` bytes remain, counting the dropped bytes
--- as skipped. The cut moves to the next line start when one is within 4 KiB,
--- so no escape sequence or UTF-8 character is cut in half (in a hole: when it
--- is read).
---@param keep integer
function B:trim(keep)
  if self.off > 0 then -- what take() left of the first chunk
    self.chunks[1] = self.chunks[1]:sub(self.off + 1)
    self.off = 0
  end
  local chunks = self.chunks
  local drop = self.n - keep
  if drop <= 0 then return end
  local i = 1
  while i <= #chunks and size(chunks[i]) <= drop do
    local z = size(chunks[i])
    drop = drop - z
    self.skipped = self.skipped + z
    self.n = self.n - z
    i = i + 1
  end
  local rest = {}
  for j = i, #chunks do
    rest[#rest + 1] = chunks[j]
  end
  local head = rest[1]
  if drop > 0 and head then
    if type(head) == "string" then
      local nl = head:find("\n", drop + 1, true)
      if nl and nl - drop <= 4096 then drop = nl end
      rest[1] = head:sub(drop + 1)
    else
      rest[1] = {
        stream = head.stream,
        from = head.from + drop,
        to = head.to,
        align = true,
        ring = head.ring,
      }
    end
    self.skipped = self.skipped + drop
    self.n = self.n - drop
  end
  self.chunks = rest
end

--- Read the hole chunks[k] from the ring, at most `max` bytes of it: what was
--- read takes its place, before what is left of the hole. Bytes the ring no
--- longer holds (it keeps the newest output_limit) count as skipped, and so
--- does the cut of a hole trim() cut (to the next line end within 4 KiB).
--- Returns the bytes counted as skipped.
---@param k integer
---@param max integer
---@return integer
function B:fill(k, max)
  local chunks, h = self.chunks, self.chunks[k]
  local data, nxt = self.read(h.stream, h.from, math.max(1, math.min(h.to - h.from, max)), h.ring)
  if type(data) ~= "string" or not nxt or (#data == 0 and nxt <= h.from) then
    data, nxt = "", h.to -- gone (deleted), or nothing readable: all of it
  end
  if nxt > h.to then
    data = data:sub(1, math.max(0, #data - (nxt - h.to)))
    nxt = h.to
  end
  local lost = (nxt - #data) - h.from -- before the ring's oldest byte
  if h.align and #data > 0 and lost == 0 then
    local nl = data:find("\n", 1, true)
    if nl and nl <= 4096 then
      lost, data = nl, data:sub(nl + 1)
    end
  end
  local rest = nxt < h.to and { stream = h.stream, from = nxt, to = h.to, ring = h.ring } or nil
  self.n = self.n - lost
  self.skipped = self.skipped + lost
  if #data > 0 then
    chunks[k] = data
    if rest then table.insert(chunks, k + 1, rest) end
  elseif rest then
    chunks[k] = rest
  else
    table.remove(chunks, k)
  end
  return lost
end

--- Is there anything to render (bytes, or a skip to report)?
---@return boolean
function B:pending() return self.n > 0 or self.skipped > 0 end

--- Take what the terminal gets next: a line reporting skipped bytes (when
--- any; `note(skipped)` makes its text), then at most `budget` bytes of the
--- backlog and, when `max_lines` is given, at most that many lines (a
--- terminal's cost is per line as much as per byte: 16 KiB of `seq` is 2,300
--- lines to scroll). With `unit_bytes` a line counts 1 + its bytes /
--- unit_bytes toward `max_lines` (the bytes counted from the start of this
--- take; the first line always goes). With `crlf` a \n becomes \r\n (pipes:
--- the terminal needs both). With `width` (the terminal's columns, at most: the narrowest
--- window showing it) the redraws a later one overwrites are left out of the
--- text (never out of the ring), and while that keeps the text under the
--- budget more is taken, up to B.SCAN × `budget` bytes of the backlog. A
--- hole is read from the ring when the take reaches it (B:fill, one read a
--- take); when the ring no longer held part of it the take stops there, so
--- the next one reports the skip in its place. Returns the text, the bytes of
--- the backlog it used and (with `max_lines`) the lines in it.
---@param budget integer
---@param crlf boolean
---@param note fun(skipped: integer): string
---@param max_lines integer|nil
---@param unit_bytes integer|nil
---@param width integer|nil
---@return string text, integer taken, integer|nil lines
function B:take(budget, crlf, note, max_lines, unit_bytes, width)
  local chunks, k = self.chunks, 1
  local taken, out, lines, off = 0, 0, max_lines and 0, self.off
  local scan = math.min(B.READ_MAX, B.SCAN * budget) -- what one read of a hole may bring
  -- a hole first: read now, so that what the ring lost is in this take's note
  local filled = type(chunks[1]) == "table"
  if filled then self:fill(1, scan) end
  local parts = {}
  if self.skipped > 0 then
    local head = (self.at_bol and "" or "\r\n") .. note(self.skipped) .. "\r\n"
    parts[1] = overwrite.feed(self.ow, head, nil)
    self.skipped = 0
  end
  local full = false -- max_lines reached
  -- Read the chunks in place (an output event can be MiBs; a take copies what
  -- it sends, not the rest), from `off` in the first one.
  while chunks[k] and out < budget do
    local ch = chunks[k]
    if type(ch) == "table" then
      -- a hole: read it from the ring; what the ring lost is noted first (next take)
      if filled or taken >= scan or self:fill(k, scan - taken) > 0 then break end
      filled, ch = true, chunks[k]
      if type(ch) ~= "string" then break end
    end
    local last = math.min(#ch, off + budget - out)
    if lines then -- cut after the last line end that max_lines has room for
      local pos = off
      while true do
        if lines >= max_lines then
          last, full = pos, true
          break
        end
        local nl = ch:find("\n", pos + 1, true)
        if not nl or nl > last then
          -- the rest of this piece has no line end: with unit_bytes its bytes count too
          if unit_bytes and lines > 0 and lines + (taken + last - off) / unit_bytes > max_lines then
            last, full = pos, true
          end
          break
        end
        if unit_bytes and lines > 0 and lines + 1 + (taken + nl - off) / unit_bytes > max_lines then
          last, full = pos, true
          break
        end
        lines, pos = lines + 1, nl
      end
    end
    local text = overwrite.feed(self.ow, ch, width, off + 1, last)
    parts[#parts + 1] = text
    out = out + #text
    taken = taken + last - off
    if last == #ch then
      k, off = k + 1, 0
    else
      off = last
    end
    if taken >= B.SCAN * budget or full then break end
  end
  if k > 1 then -- the chunks read whole go
    local rest = {}
    for j = k, #chunks do
      rest[#rest + 1] = chunks[j]
    end
    self.chunks = rest
  end
  self.off = off
  self.n = self.n - taken
  local text = table.concat(parts)
  if crlf then text = text:gsub("\n", "\r\n") end
  if text ~= "" then self.at_bol = text:sub(-1) == "\n" end
  return text, taken, lines
end

--- Note that `text` went to the terminal other than through take() (typed
--- echo, the final line): where a line starts, and the parser's state.
---@param text string
function B:sent(text)
  if text ~= "" then
    overwrite.feed(self.ow, text, nil)
    self.at_bol = text:sub(-1) == "\n"
  end
end

--- `text` on a line of its own (a line break first unless one just ended).
---@param text string
---@return string
function B:own_line(text)
  local s = (self.at_bol and "" or "\r\n") .. text
  self:sent(s)
  return s
end

return B
