--- proctor.tasks.sources.text — reading the files task sources read: JSON
--- with comments (deno.jsonc) and the part of TOML a mise.toml uses. A
--- problem is an error "FILE:LINE: what", raised with level 0, which
--- discovery shows (and `:checkhealth proctor` repeats).
---
---   text.json(s, "deno.jsonc")   --> table   (// and /* */ comments, trailing commas)
---   text.toml(s, "mise.toml")    --> table   (tables, dotted and quoted keys, strings of the
---                                             four kinds, numbers, booleans, arrays, inline
---                                             tables, arrays of tables; dates are kept as text)
---
--- Pure functions. Requiring this module has no side effects.

local M = {}
local H = {}

local jsonc = require("proctor.tasks.jsonc")

--- Decode JSON that may hold comments and trailing commas (the reader of
--- tasks.json, proctor.tasks.jsonc).
---@param s string
---@param file string the name errors give
---@return table|any
function M.json(s, file)
  local v, err = jsonc.decode(s)
  if err then
    local line, what = err:match("^line (%d+): (.*)$")
    error(("%s:%s: not valid JSON (%s)"):format(file, line or "1", what or err), 0)
  end
  return v
end

--- Decode the TOML a tool's config file uses (see the header).
---@param s string
---@param file string the name errors give
---@return table
function M.toml(s, file)
  local p = { s = s, i = 1, line = 1, file = file }
  local root = {}
  local cur = root
  local defined = {} -- tables opened by a header
  while true do
    H.skip(p, true)
    if p.i > #s then break end
    local c = s:sub(p.i, p.i)
    if c == "[" then
      local array = s:sub(p.i, p.i + 1) == "[["
      p.i = p.i + (array and 2 or 1)
      H.blank(p)
      local keys = H.keys(p)
      H.blank(p)
      if s:sub(p.i, p.i + (array and 1 or 0)) ~= (array and "]]" or "]") then
        H.fail(p, "a table header without its " .. (array and "]]" or "]"))
      end
      p.i = p.i + (array and 2 or 1)
      local t = root
      for k = 1, #keys - 1 do
        t = H.sub(p, t, keys[k])
      end
      local last = keys[#keys]
      if array then
        t[last] = t[last] or {}
        if type(t[last]) ~= "table" then H.fail(p, "'" .. last .. "' is not an array of tables") end
        local item = {}
        table.insert(t[last], item)
        cur = item
      else
        local id = table.concat(keys, "\0")
        if defined[id] then H.fail(p, "table [" .. table.concat(keys, ".") .. "] defined twice") end
        defined[id] = true
        cur = H.sub(p, t, last)
      end
      H.eol(p)
    else
      H.pair(p, cur)
      H.eol(p)
    end
  end
  return root
end

-- Helpers ------------------------------------------------------------------------

function H.short(e) return (tostring(e):gsub("^.-:%d+: ", "")) end

function H.fail(p, what) error(("%s:%d: %s"):format(p.file, p.line, what), 0) end

-- Skip blanks (and, when `lines`, line breaks and comments).
function H.skip(p, lines)
  local s = p.s
  while p.i <= #s do
    local c = s:sub(p.i, p.i)
    if c == " " or c == "\t" or c == "\r" then
      p.i = p.i + 1
    elseif c == "\n" and lines then
      p.line = p.line + 1
      p.i = p.i + 1
    elseif c == "#" and lines then
      p.i = (s:find("\n", p.i, true) or (#s + 1))
    else
      break
    end
  end
end

function H.blank(p) H.skip(p, false) end

-- The end of a line: blanks, a comment, then a line break or the end.
function H.eol(p)
  H.blank(p)
  local c = p.s:sub(p.i, p.i)
  if c == "#" then
    p.i = p.s:find("\n", p.i, true) or (#p.s + 1)
    c = p.s:sub(p.i, p.i)
  end
  if c ~= "\n" and c ~= "" then H.fail(p, "more text after a value: '" .. c .. "'") end
end

-- The table under key `k` of `t` (made when missing).
function H.sub(p, t, k)
  if t[k] == nil then t[k] = {} end
  local v = t[k]
  if type(v) ~= "table" then H.fail(p, "'" .. k .. "' is a value, not a table") end
  if v[1] ~= nil then return v[#v] end -- [[a]] then [a.b]: the last item
  return v
end

-- A dotted key: { "a", "b" }.
function H.keys(p)
  local out = {}
  while true do
    H.blank(p)
    local s, c = p.s, p.s:sub(p.i, p.i)
    if c == '"' then
      out[#out + 1] = H.basic(p)
    elseif c == "'" then
      out[#out + 1] = H.literal(p)
    else
      local k = s:match("^[%w_%-]+", p.i)
      if not k then H.fail(p, "a key was expected") end
      out[#out + 1] = k
      p.i = p.i + #k
    end
    H.blank(p)
    if s:sub(p.i, p.i) ~= "." then return out end
    p.i = p.i + 1
  end
end

-- key = value into table `t`.
function H.pair(p, t)
  local keys = H.keys(p)
  if p.s:sub(p.i, p.i) ~= "=" then H.fail(p, "'=' was expected after a key") end
  p.i = p.i + 1
  H.blank(p)
  for k = 1, #keys - 1 do
    t = H.sub(p, t, keys[k])
  end
  local last = keys[#keys]
  if t[last] ~= nil then H.fail(p, "key '" .. last .. "' defined twice") end
  t[last] = H.value(p)
end

function H.value(p)
  local s = p.s
  local c = s:sub(p.i, p.i)
  if s:sub(p.i, p.i + 2) == '"""' then return H.multi(p, '"""') end
  if s:sub(p.i, p.i + 2) == "'''" then return H.multi(p, "'''") end
  if c == '"' then return H.basic(p) end
  if c == "'" then return H.literal(p) end
  if c == "[" then
    p.i = p.i + 1
    local out = {}
    while true do
      H.skip(p, true)
      if s:sub(p.i, p.i) == "]" then
        p.i = p.i + 1
        return out
      end
      out[#out + 1] = H.value(p)
      H.skip(p, true)
      local d = s:sub(p.i, p.i)
      if d == "," then
        p.i = p.i + 1
      elseif d ~= "]" then
        H.fail(p, "',' or ']' was expected in an array")
      end
    end
  end
  if c == "{" then
    p.i = p.i + 1
    local out = {}
    H.blank(p)
    if s:sub(p.i, p.i) == "}" then
      p.i = p.i + 1
      return out
    end
    while true do
      H.blank(p)
      H.pair(p, out)
      H.blank(p)
      local d = s:sub(p.i, p.i)
      p.i = p.i + 1
      if d == "}" then return out end
      if d ~= "," then H.fail(p, "',' or '}' was expected in an inline table") end
    end
  end
  local word = s:match("^[^%s,%]}#]+", p.i)
  if not word then H.fail(p, "a value was expected") end
  p.i = p.i + #word
  if word == "true" then return true end
  if word == "false" then return false end
  local num = word:gsub("_", "")
  if num:find("^[+-]?%d") or num:find("^[+-]?inf$") or num:find("^[+-]?nan$") then
    if word:find("^%d%d%d%d%-%d%d%-%d%d") or word:find("^%d%d:%d%d") then
      -- a date or time: kept as its text (a date-time with a space: its second half too)
      local rest = s:match("^ %d%d:%d%d[^%s,%]}#]*", p.i)
      if rest then
        p.i = p.i + #rest
        word = word .. rest
      end
      return word
    end
    local n = tonumber(num) or tonumber((num:gsub("^0o", ""):gsub("^0b", "")))
    if num:find("^0o") then n = tonumber(num:sub(3), 8) end
    if num:find("^0b") then n = tonumber(num:sub(3), 2) end
    if n then return n end
  end
  H.fail(p, "not a value: '" .. word .. "'")
end

H.ESC = { b = "\b", t = "\t", n = "\n", f = "\f", r = "\r", ['"'] = '"', ["\\"] = "\\" }

-- A basic string "..." with its escapes.
function H.basic(p)
  local s, out, i = p.s, {}, p.i + 1
  while true do
    local c = s:sub(i, i)
    if c == "" or c == "\n" then H.fail(p, "a string without its closing quote") end
    if c == '"' then break end
    if c == "\\" then
      local e = s:sub(i + 1, i + 1)
      if H.ESC[e] then
        out[#out + 1] = H.ESC[e]
        i = i + 2
      elseif e == "u" or e == "U" then
        local len = e == "u" and 4 or 8
        local hex = s:sub(i + 2, i + 1 + len)
        local cp = #hex == len and tonumber(hex, 16)
        if not cp then H.fail(p, "a bad \\" .. e .. " escape") end
        out[#out + 1] = vim.fn.nr2char(cp)
        i = i + 2 + len
      else
        H.fail(p, "an unknown escape \\" .. e)
      end
    else
      out[#out + 1] = c
      i = i + 1
    end
  end
  p.i = i + 1
  return table.concat(out)
end

function H.literal(p)
  local e = p.s:find("'", p.i + 1, true)
  local nl = p.s:find("\n", p.i + 1, true)
  if not e or (nl and nl < e) then H.fail(p, "a string without its closing quote") end
  local v = p.s:sub(p.i + 1, e - 1)
  p.i = e + 1
  return v
end

-- A multi-line string ("""...""" with escapes, '''...''' without); a line
-- break right after the opening quotes is dropped; `\` at a line's end
-- joins it with the next (basic only).
function H.multi(p, q)
  local s = p.s
  local start = p.i + 3
  local e = s:find(q, start, true)
  while e and s:sub(e + 3, e + 3) == q:sub(1, 1) do -- up to two quotes may end the text
    e = e + 1
  end
  if not e then H.fail(p, "a multi-line string without its closing " .. q) end
  local raw = s:sub(start, e - 1)
  local _, breaks = raw:gsub("\n", "")
  p.line = p.line + breaks
  p.i = e + 3
  raw = raw:gsub("^\r?\n", "")
  if q == "'''" then return raw end
  raw = raw:gsub("\\%s*\n%s*", "")
  local out = raw:gsub("\\(.)", function(c) return H.ESC[c] or ("\\" .. c) end)
  return out
end

M._H = H

return M
