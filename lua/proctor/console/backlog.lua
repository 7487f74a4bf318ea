--- proctor.console.backlog — the bytes of one console waiting to be rendered.
---
--- A pure model (no Neovim API, no windows): the console feeds it output
--- events and takes at most a budget of bytes per render tick.
---
---   output event ──► accept(): drop what was seen, count a gap as skipped
---        │
---        ▼
---   push(): append ── more than `limit` waiting? keep about `keep` bytes of the
---        │           tail (from a line start when one is near), count the rest
---        ▼
---   take(budget): "[proctor] … skipped N bytes" first when something was
---                 skipped, then at most `budget` bytes (pipes: \n -> \r\n)
---
--- Requiring this module has no side effects.

---@class proctor.Backlog
---@field next table<string, integer> next expected byte offset per stream
---@field chunks string[] waiting to be rendered, oldest first
---@field n integer bytes in chunks
---@field skipped integer bytes skipped since the last take (reported by it)
---@field at_bol boolean what the terminal got last ended a line
local B = {}
B.__index = B

--- A new, empty backlog.
---@return proctor.Backlog
function B.new()
  return setmetatable({ next = {}, chunks = {}, n = 0, skipped = 0, at_bol = true }, B)
end

--- Note that stream `stream` continues at absolute offset `offset` (a replay
--- read from the ring buffer; bytes before it were dropped there: `skipped`).
---@param stream string
---@param offset integer
function B:start(stream, offset) self.next[stream] = offset end

--- Output `data` of `stream` whose first byte is at absolute offset `offset`.
--- The part already seen is dropped; a gap before it counts as skipped.
--- Returns the new bytes (nil when there are none).
---@param stream string
---@param data string
---@param offset integer
---@return string|nil
function B:accept(stream, data, offset)
  local nxt = self.next[stream] or 0
  if offset + #data <= nxt then return nil end
  if offset < nxt then
    data = data:sub(nxt - offset + 1)
    offset = nxt
  elseif offset > nxt then
    self.skipped = self.skipped + (offset - nxt)
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
--- so no escape sequence or UTF-8 character is cut in half.
---@param keep integer
function B:trim(keep)
  local chunks = self.chunks
  local drop = self.n - keep
  if drop <= 0 then return end
  local i = 1
  while i <= #chunks and #chunks[i] <= drop do
    drop = drop - #chunks[i]
    self.skipped = self.skipped + #chunks[i]
    self.n = self.n - #chunks[i]
    i = i + 1
  end
  local rest = {}
  for j = i, #chunks do
    rest[#rest + 1] = chunks[j]
  end
  if drop > 0 and rest[1] then
    local head = rest[1]
    local nl = head:find("\n", drop + 1, true)
    if nl and nl - drop <= 4096 then drop = nl end
    rest[1] = head:sub(drop + 1)
    self.skipped = self.skipped + drop
    self.n = self.n - drop
  end
  self.chunks = rest
end

--- Is there anything to render (bytes, or a skip to report)?
---@return boolean
function B:pending() return self.n > 0 or self.skipped > 0 end

--- Take what the terminal gets next: a line reporting skipped bytes (when
--- any; `note(skipped)` makes its text), then at most `budget` bytes of the
--- backlog and, when `max_lines` is given, at most that many lines (a
--- terminal's cost is per line as much as per byte: 16 KiB of `seq` is 2,300
--- lines to scroll). With `unit_bytes` a line counts 1 + its bytes /
--- unit_bytes toward `max_lines` (the first line is always taken). With
--- `crlf` a \n becomes \r\n (pipes: the terminal needs both). Returns the
--- text, the bytes of the backlog it used and (with `max_lines`) the lines in it.
---@param budget integer
---@param crlf boolean
---@param note fun(skipped: integer): string
---@param max_lines integer|nil
---@param unit_bytes integer|nil
---@return string text, integer taken, integer|nil lines
function B:take(budget, crlf, note, max_lines, unit_bytes)
  local parts = {}
  local note_len = 0
  if self.skipped > 0 then
    parts[1] = (self.at_bol and "" or "\r\n") .. note(self.skipped) .. "\r\n"
    note_len = #parts[1]
    self.skipped = 0
  end
  local taken, chunks, k = 0, self.chunks, 1
  while k <= #chunks and taken < budget do
    local ch = chunks[k]
    if taken + #ch > budget then
      local cut = budget - taken
      parts[#parts + 1] = ch:sub(1, cut)
      chunks[k] = ch:sub(cut + 1)
      taken = budget
      break
    end
    parts[#parts + 1] = ch
    taken = taken + #ch
    k = k + 1
  end
  if k > 1 then
    local rest = {}
    for j = k, #chunks do
      rest[#rest + 1] = chunks[j]
    end
    self.chunks = rest
  end
  local text = table.concat(parts)
  local n
  if max_lines then
    -- cut after the max_lines-th line end of the backlog's bytes (the note excluded)
    local pos = note_len
    n = 0
    while n < max_lines do
      local nl = text:find("\n", pos + 1, true)
      local over = unit_bytes
        and n > 0
        and n + (nl and 1 or 0) + ((nl or #text) - note_len) / unit_bytes > max_lines
      if over then break end
      if not nl then -- the rest has no line end: it goes too
        pos = nil
        break
      end
      pos, n = nl, n + 1
    end
    if pos and pos < #text then
      local back = text:sub(pos + 1)
      table.insert(self.chunks, 1, back)
      taken = taken - #back
      text = text:sub(1, pos)
    end
  end
  self.n = self.n - taken
  if crlf then text = text:gsub("\n", "\r\n") end
  self:sent(text)
  return text, taken, n
end

--- Note that `text` went to the terminal (typed echo too): where a line starts.
---@param text string
function B:sent(text)
  if text ~= "" then self.at_bol = text:sub(-1) == "\n" end
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
