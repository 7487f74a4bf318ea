--- proctor.console.overwrite — leave out the redraws a terminal would overwrite
--- before anyone sees them (a `\r` progress bar), keeping what it shows exact.
---
--- A pure model (no Neovim API): the console runs every byte it gives its
--- terminal through `M.feed()`. Only what the terminal gets is shortened; the
--- ring, `:Proctor text` and the callbacks keep every byte.
---
---   "\r 1%\r 2%\r 3%"  ──►  "\r 3%"        (each update overwrites the last)
---
--- The text is cut into runs: a run ends at a line feed, at any control
--- character but `\r`, and at any escape sequence that is not SGR (colours)
--- or EL (erase in line, `CSI K`, `CSI 0 K`, `CSI 2 K`); cursor moves,
--- tabs, OSC strings, private modes all end a run. Inside a run, `\r` cuts
--- segments; every segment after the first starts at column 0 of one row.
--- Segment i (neither the first, whose column is unknown, nor the last, which
--- leaves the cursor) is left out when
---   - it cannot wrap: its printable bytes (an upper bound of its columns) are
---     fewer than the terminal's width, and
---   - a later segment of the run, with no segment that may wrap between them,
---     writes over every cell it touched: as many columns from the start (ASCII
---     before any other byte counts; a longer byte string may be fewer
---     columns), or the whole row (it erases in line, or may wrap).
--- A segment left out keeps its SGR sequences, so the pen (colours) at every
--- later byte is what it was; its `\r` goes too (the next kept segment has
--- its own). At every byte that is kept the terminal's cells, cursor and pen
--- are then what they would have been.
---
--- Parser state crosses calls (a sequence cut between two sends), and a mode
--- that changes how printing overwrites turns leaving out off for good:
--- insert mode (`CSI 4 h`), left/right margins (`CSI ? 69 h`), double-width
--- lines (`ESC #`).
---
--- Requiring this module has no side effects.

local M = {}

local byte, sub, find = string.byte, string.sub, string.find

-- Parser states.
local GROUND, ESC, CSI, STR, STR_ESC, ESC_INT = 0, 1, 2, 3, 4, 5
local CR, ESCB, CAN, SUB, BEL = 13, 27, 24, 26, 7

---@class proctor.Overwrite
---@field state integer where the escape-sequence parser is (GROUND … ESC_INT)
---@field params string a CSI's parameter bytes so far, when one crosses calls
---@field unsafe boolean a mode that breaks plain overwriting was seen: keep every byte
---@field dropped integer bytes left out so far (for the curious: tests, benches)
---@field native userdata|nil the core's state when its twin feeds this one (M.new)
---@field native_feed function|nil the core's overwrite_feed

--- The core (proctor.core) whose `overwrite_new`/`overwrite_feed` new states
--- use by default: its C twin of this model (csrc/base/overwrite.c) gives the
--- same bytes for the same bytes in, a `\r` flood's loop in C. nil: this
--- model. The console sets it when it loads; this module stays the reference.
---@type table|nil
M.core = nil

--- A fresh state: what a new terminal's parser is in. `core`: the core whose
--- twin feeds it (nil: M.core; false: this model).
---@param core table|false|nil
---@return proctor.Overwrite
function M.new(core)
  if core == nil then core = M.core end
  local st = { state = GROUND, params = "", unsafe = false, dropped = 0 }
  if core and core.overwrite_new then
    st.native, st.native_feed = core.overwrite_new(), core.overwrite_feed
  end
  return st
end

-- Scratch arrays of the run being read (reused: no garbage per call), and the
-- spans left out: drops[3d-2..3d] = from, to, has SGR.
local seg_from, seg_cols, seg_cover, seg_el, seg_sgr, seg_drop = {}, {}, {}, {}, {}, {}
local drops = {}

-- A CSI's class from its parameter/intermediate bytes and its final byte:
-- "sgr", "el", "unsafe" (a mode that breaks overwriting), or nil (a barrier).
local function classify(params, final)
  if final == 109 then -- m
    if find(params, "^[%d;:]*$") then return "sgr" end
    return nil
  end
  if final == 75 then -- K
    if params == "" or params == "0" or params == "2" then return "el" end
    return nil
  end
  if final == 104 then -- h: a mode set
    local private = sub(params, 1, 1) == "?"
    for p in params:gmatch("%d+") do
      if (private and p == "69") or (not private and p == "4") then return "unsafe" end
    end
    if find(params, "[^%d;?]") then return "unsafe" end -- not understood: be careful
  end
  return nil
end

-- A run of segments 1..k ended: note the segments left out (after the `nd`
-- spans noted so far; a span next to the one before joins it). Returns the
-- new count.
local function decide(k, width, nd)
  local best = -1 -- the widest cover of a later segment on the same row
  for j = k, 2, -1 do
    local maywrap = seg_cols[j] >= width
    local touched = seg_el[j] and width or seg_cols[j]
    seg_drop[j] = j < k and not maywrap and touched <= best
    local cover = seg_el[j] and width or seg_cover[j]
    if maywrap or cover > best then best = cover end
  end
  for j = 2, k - 1 do
    if seg_drop[j] then -- from its \r to the byte before the next \r
      local from, to, sgr = seg_from[j] - 1, seg_from[j + 1] - 2, seg_sgr[j]
      if nd > 0 and drops[nd * 3 - 1] == from - 1 and not sgr and not drops[nd * 3] then
        drops[nd * 3 - 1] = to
      else
        nd = nd + 1
        drops[nd * 3 - 2], drops[nd * 3 - 1], drops[nd * 3] = from, to, sgr
      end
    end
  end
  return nd
end

--- Feed `text` (what goes to the terminal next; bytes `first`..`last` of it
--- when given, read in place) through the state `st`; returns the text to
--- send: those bytes, or them with overwritten redraws left out when `width`
--- (the terminal's columns; nil: keep every byte) allows.
---@param st proctor.Overwrite
---@param text string
---@param width integer|nil
---@param first integer|nil default 1
---@param last integer|nil default #text
---@return string
function M.feed(st, text, width, first, last)
  if st.native then
    local out, dropped, unsafe = st.native_feed(st.native, text, width, first, last)
    st.dropped, st.unsafe = dropped, unsafe
    return out
  end
  first = first or 1
  local n = last or #text
  if n < first then return "" end
  if not width or width < 2 then width = nil end
  local state, params = st.state, st.params
  local csi_from = first -- where this call's part of the current CSI's parameters starts
  local esc_at = first -- where the escape sequence being read started (a barrier starts there)
  -- the run's segments so far; segment k's counts are kept in locals until it ends
  local k, cols, cover, ascii, el, sgr = 1, 0, 0, true, false, false
  local nd = 0
  local i = first
  while i <= n do
    if state == GROUND then
      -- The common bytes of the ground state (printable ASCII, `\r`) in a
      -- loop of their own, which LuaJIT compiles to a tight one; the first
      -- other byte goes to the general loop below. What they count is the
      -- same either way; a `\r` progress flood is read several times faster.
      while i <= n do
        local c = byte(text, i)
        if c >= 32 and c < 127 then
          cols = cols + 1
          if ascii then cover = cover + 1 end
        elseif c == CR then
          seg_cols[k], seg_cover[k], seg_el[k], seg_sgr[k] = cols, cover, el, sgr
          k = k + 1
          seg_from[k] = i + 1
          cols, cover, ascii, el, sgr = 0, 0, true, false, false
        else
          break
        end
        i = i + 1
      end
      if i > n then break end
    end
    local b = byte(text, i)
    local stop, unsafe -- a barrier: the run ends before this byte (and turns leaving out off)
    if state == GROUND then
      if b >= 32 and b < 127 then
        cols = cols + 1
        if ascii then cover = cover + 1 end
      elseif b == CR then
        seg_cols[k], seg_cover[k], seg_el[k], seg_sgr[k] = cols, cover, el, sgr
        k = k + 1
        seg_from[k] = i + 1
        cols, cover, ascii, el, sgr = 0, 0, true, false, false
      elseif b == ESCB then
        state, esc_at = ESC, i
      elseif b >= 128 then
        -- UTF-8: a byte is at most one column. U+0080-U+009F (C2 80-9F) are C1 controls.
        if b == 0xC2 and i < n and byte(text, i + 1) < 0xA0 then
          stop = i
        else
          cols = cols + 1
          ascii = false
        end
      else -- LF, TAB, BS, BEL, DEL, other C0: the run ends
        stop = i
      end
    elseif b < 32 and b ~= ESCB and b ~= CAN and b ~= SUB and state ~= STR then
      stop = esc_at -- a C0 control inside an escape sequence runs at once
    elseif state == ESC then
      if b == 91 then -- [
        state, params, csi_from = CSI, "", i + 1
      elseif b == 93 or b == 80 or b == 88 or b == 94 or b == 95 then -- ] P X ^ _
        state, stop = STR, esc_at
      elseif b == ESCB then
        stop, esc_at = esc_at, i
      elseif b >= 32 and b < 48 then
        -- ESC # : line attributes (double width)
        state, stop, unsafe = ESC_INT, esc_at, b == 35
      else -- a final byte, CAN, SUB
        state, stop = GROUND, esc_at
      end
    elseif state == CSI then
      if b >= 64 and b < 127 then
        local kind
        if params == "" and (b == 109 or b == 75) then -- SGR and EL: read in place
          kind = b == 109 and "sgr" or "el"
          if b == 75 then
            local len, c = i - csi_from, byte(text, csi_from)
            if len > 1 or (len == 1 and c ~= 48 and c ~= 50) then kind = nil end
          else
            for j = csi_from, i - 1 do
              local c = byte(text, j)
              if c < 48 or c > 59 then -- not a digit, ':' or ';'
                kind = nil
                break
              end
            end
          end
        else
          kind = classify(params .. sub(text, csi_from, i - 1), b)
        end
        state, params = GROUND, ""
        if kind == "sgr" then
          sgr = true
        elseif kind == "el" then
          el = true
        else
          stop, unsafe = esc_at, kind == "unsafe"
        end
      elseif b == ESCB then
        state, params, stop, esc_at = ESC, "", esc_at, i
      elseif b == CAN or b == SUB then
        state, params, stop = GROUND, "", esc_at
      elseif b >= 127 then
        stop = esc_at
      end
    elseif state == ESC_INT then
      if b >= 48 and b < 127 then
        state = GROUND
      elseif b == ESCB then
        state, esc_at = ESC, i
      elseif b == CAN or b == SUB then
        state = GROUND
      end
    elseif state == STR then
      if b == BEL or b == CAN or b == SUB then
        state = GROUND
      elseif b == ESCB then
        state = STR_ESC
      end
    else -- STR_ESC
      if b == 92 then -- ST (ESC \)
        state = GROUND
      else -- an escape sequence ends the string and starts anew with this byte
        state, esc_at = ESC, i - 1
        i = i - 1
      end
    end
    if stop then
      if k >= 3 and width and not st.unsafe then
        seg_cols[k], seg_cover[k], seg_el[k], seg_sgr[k] = cols, cover, el, sgr
        nd = decide(k, width, nd)
      end
      k, cols, cover, ascii, el, sgr = 1, 0, 0, true, false, false
      if unsafe then st.unsafe = true end
    end
    i = i + 1
  end
  if state == CSI then
    params = params .. sub(text, csi_from, n)
    if #params > 256 then
      params, st.unsafe = "", true
    end -- a runaway sequence: be careful
  end
  st.state, st.params = state, params
  if k >= 3 and width and not st.unsafe then
    seg_cols[k], seg_cover[k], seg_el[k], seg_sgr[k] = cols, cover, el, sgr
    nd = decide(k, width, nd)
  end
  if nd == 0 then return (first == 1 and n == #text) and text or sub(text, first, n) end
  -- The text without the spans (in order), their pen changes kept.
  local parts, np, at = {}, 0, first
  for d = 1, nd do
    local from, to, pens = drops[d * 3 - 2], drops[d * 3 - 1], drops[d * 3]
    np = np + 1
    parts[np] = sub(text, at, from - 1)
    local kept = 0
    if pens then
      local p = from
      while true do
        local e = find(text, "\27", p, true)
        if not e or e > to then break end
        local f = find(text, "[\64-\126]", e + 2)
        np = np + 1
        parts[np] = sub(text, e, f)
        kept = kept + f - e + 1
        p = f + 1
      end
    end
    st.dropped = st.dropped + (to - from + 1) - kept
    at = to + 1
  end
  np = np + 1
  parts[np] = sub(text, at, n)
  return table.concat(parts)
end

return M
