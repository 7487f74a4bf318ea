--- proctor.tasks.jsonc — JSON with comments, as VS Code writes its settings
--- and `tasks.json`: `//` and `/* */` comments, a trailing comma before `]`
--- or `}`. Pure Lua, no Neovim API.
---
---   local value, err = jsonc.decode(text)   -- err: "line 3: expected ',' or '}'"
---
--- Objects become Lua tables keyed by name, arrays lists (1-based), `null`
--- `jsonc.null` (a unique table: a key set to null is not a missing key).
--- Numbers are Lua numbers; strings are UTF-8 (a `\uXXXX` escape, surrogate
--- pairs too, is encoded). A mistake is an error message naming its line.
--- Requiring this module has no side effects.

local M = {}
local H = {}

--- The value a JSON `null` reads as.
M.null = setmetatable({}, { __tostring = function() return "null" end })

--- Decode `text`: the value, or nil and "line N: what is wrong".
---@param text string
---@return any|nil value, string|nil err
function M.decode(text)
  if type(text) ~= "string" then return nil, "line 1: not a text" end
  local st = { s = text, i = 1 }
  if text:sub(1, 3) == "\239\187\191" then st.i = 4 end -- a UTF-8 byte order mark
  local ok, res = pcall(function()
    local v = H.value(st)
    H.space(st)
    if st.i <= #st.s then H.fail(st, "text after the end of the value") end
    return v
  end)
  if not ok then
    if type(res) == "table" and res.jsonc then return nil, res.msg end
    error(res, 0)
  end
  return res
end

-- Helpers ------------------------------------------------------------------------

function H.fail(st, what)
  local line = 1
  for _ in st.s:sub(1, st.i - 1):gmatch("\n") do
    line = line + 1
  end
  error({ jsonc = true, msg = ("line %d: %s"):format(line, what) }, 0)
end

-- Skip blanks and comments.
function H.space(st)
  local s = st.s
  while true do
    local i = s:find("[^ \t\r\n]", st.i)
    if not i then
      st.i = #s + 1
      return
    end
    st.i = i
    local two = s:sub(i, i + 1)
    if two == "//" then
      local e = s:find("\n", i, true)
      st.i = e and e + 1 or #s + 1
    elseif two == "/*" then
      local e = s:find("*/", i + 2, true)
      if not e then H.fail(st, "a /* comment is not closed") end
      st.i = e + 2
    else
      return
    end
  end
end

function H.value(st)
  H.space(st)
  local c = st.s:sub(st.i, st.i)
  if c == "{" then return H.object(st) end
  if c == "[" then return H.array(st) end
  if c == '"' then return H.string(st) end
  if c == "" then H.fail(st, "a value is missing at the end of the text") end
  for word, v in pairs({ ["true"] = true, ["false"] = false, null = M.null }) do
    if st.s:sub(st.i, st.i + #word - 1) == word then
      st.i = st.i + #word
      return v
    end
  end
  local num = st.s:match("^-?%d+%.?%d*[eE]?[-+]?%d*", st.i)
  if num and num ~= "" and num ~= "-" then
    local n = tonumber(num)
    if n then
      st.i = st.i + #num
      return n
    end
  end
  H.fail(st, ("unexpected %q"):format(st.s:sub(st.i, st.i + 9)))
end

function H.object(st)
  st.i = st.i + 1
  local out = {}
  while true do
    H.space(st)
    local c = st.s:sub(st.i, st.i)
    if c == "}" then
      st.i = st.i + 1
      return out
    end
    if c ~= '"' then H.fail(st, "expected a name in quotes or '}'") end
    local key = H.string(st)
    H.space(st)
    if st.s:sub(st.i, st.i) ~= ":" then H.fail(st, ("expected ':' after %q"):format(key)) end
    st.i = st.i + 1
    out[key] = H.value(st)
    H.space(st)
    c = st.s:sub(st.i, st.i)
    if c == "," then
      st.i = st.i + 1
    elseif c ~= "}" then
      H.fail(st, "expected ',' or '}'")
    end
  end
end

function H.array(st)
  st.i = st.i + 1
  local out, n = {}, 0
  while true do
    H.space(st)
    if st.s:sub(st.i, st.i) == "]" then
      st.i = st.i + 1
      return out
    end
    n = n + 1
    out[n] = H.value(st)
    H.space(st)
    local c = st.s:sub(st.i, st.i)
    if c == "," then
      st.i = st.i + 1
    elseif c ~= "]" then
      H.fail(st, "expected ',' or ']'")
    end
  end
end

H.ESC =
  { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }

function H.string(st)
  local s, i, parts = st.s, st.i + 1, {}
  while true do
    local j = s:find('["\\%c]', i)
    if not j then H.fail(st, "a string is not closed") end
    parts[#parts + 1] = s:sub(i, j - 1)
    local c = s:sub(j, j)
    if c == '"' then
      st.i = j + 1
      return table.concat(parts)
    elseif c == "\\" then
      local e = s:sub(j + 1, j + 1)
      if H.ESC[e] then
        parts[#parts + 1] = H.ESC[e]
        i = j + 2
      elseif e == "u" then
        local cp, after = H.unicode(st, j)
        parts[#parts + 1] = H.utf8(cp)
        i = after
      else
        st.i = j
        H.fail(st, ("bad escape \\%s in a string"):format(e))
      end
    else
      st.i = j
      H.fail(st, "a control character in a string (a line break?)")
    end
  end
end

-- The code point of the \u escape at j (a surrogate pair: both), and where the text goes on.
function H.unicode(st, j)
  local hex = st.s:match("^%x%x%x%x", j + 2)
  if not hex then
    st.i = j
    H.fail(st, "bad \\u escape in a string")
  end
  local cp = tonumber(hex, 16)
  local after = j + 6
  if cp >= 0xD800 and cp <= 0xDBFF then
    local lo = st.s:match("^\\u(%x%x%x%x)", after)
    local l = lo and tonumber(lo, 16)
    if l and l >= 0xDC00 and l <= 0xDFFF then
      cp = 0x10000 + (cp - 0xD800) * 0x400 + (l - 0xDC00)
      after = after + 6
    end
  end
  return cp, after
end

function H.utf8(cp)
  if cp < 0x80 then return string.char(cp) end
  if cp < 0x800 then return string.char(0xC0 + math.floor(cp / 0x40), 0x80 + cp % 0x40) end
  if cp < 0x10000 then
    return string.char(
      0xE0 + math.floor(cp / 0x1000),
      0x80 + math.floor(cp / 0x40) % 0x40,
      0x80 + cp % 0x40
    )
  end
  return string.char(
    0xF0 + math.floor(cp / 0x40000),
    0x80 + math.floor(cp / 0x1000) % 0x40,
    0x80 + math.floor(cp / 0x40) % 0x40,
    0x80 + cp % 0x40
  )
end

return M
