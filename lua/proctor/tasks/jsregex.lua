--- proctor.tasks.jsregex — a JavaScript regular expression (as VS Code's
--- problem matchers write them) as a Vim regex that matches the same text
--- and captures the same groups, or a message saying what is not supported.
---
---   local vre, groups = jsregex.translate("^(.*):(\\d+): (error|warning): (.*)$")
---   vim.fn.matchlist(line, vre)     --> { whole, group 1, group 2, ... }
---
--- Translated exactly: literals and escapes (`\.` `\/` `\t` `\xHH` `\uHHHH`),
--- `.`, `^`, `$`, classes `\d \D \w \W \s \S`, sets `[...]` and `[^...]`
--- (with `\d \w \s` and escapes inside), groups `(...)`, `(?:...)`,
--- lookahead `(?=...)` `(?!...)`, lookbehind `(?<=...)` `(?<!...)`,
--- alternation, quantifiers `* + ? {n} {n,} {n,m}` and their lazy forms,
--- back references `\1`..`\9`. The result is very magic (`\v`) and case
--- sensitive (`\C`), whatever 'ignorecase' says.
--- Refused (nil, why): named groups, `\b` `\B` (Vim's word boundary follows
--- 'iskeyword'), `\p{...}`, `\k<...>`, `\cX`, more than 9 capturing groups,
--- `[^]`, `[]`, a POSIX class inside a set, a class like `\S` inside a set.
--- Requiring this module has no side effects.

local M = {}
local H = {}

--- Vim can capture 9 groups (\1 .. \9).
M.MAX_GROUPS = 9

--- Translate JavaScript regexp `js`.
---@param js string
---@return string|nil vim_regex, integer|string groups_or_err the count of capturing groups, or why not
function M.translate(js)
  if type(js) ~= "string" then return nil, "a regexp must be a string" end
  local ok, out, groups = pcall(H.translate, js)
  if not ok then
    if type(out) == "table" then return nil, out.msg end
    error(out, 0)
  end
  return out, groups
end

-- Helpers ------------------------------------------------------------------------

function H.refuse(msg) error({ msg = msg }, 0) end

-- Characters with a meaning of their own in a very magic Vim regex that are
-- plain in JavaScript: written escaped.
H.VIM_SPECIAL = "[<>=@%%~&{}]"

-- JavaScript class escapes, outside a set.
H.CLASS = {
  d = "[0-9]",
  D = "[^0-9]",
  w = "[0-9A-Za-z_]",
  W = "[^0-9A-Za-z_]",
  s = "[ \\t\\r\\n\\x0b\\x0c\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]",
  S = "[^ \\t\\r\\n\\x0b\\x0c\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff]",
}
-- The same inside a set (without the brackets); \D \W \S cannot be.
H.IN_SET = {
  d = "0-9",
  w = "0-9A-Za-z_",
  s = " \\t\\r\\n\\x0b\\x0c\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff",
}
-- Single-character escapes: JavaScript -> Vim (outside a set).
H.CHAR = { t = "\\t", n = "\\n", r = "\\r", f = "\\%x0c", v = "\\%x0b", ["0"] = "\\%x00" }
H.CHAR_IN_SET = { t = "\\t", n = "\\n", r = "\\r", f = "\\x0c", v = "\\x0b", ["0"] = "\\x00" }

function H.translate(js)
  local out, i, n, groups = { "\\v\\C" }, 1, #js, 0
  local function put(s) out[#out + 1] = s end
  while i <= n do
    local c = js:sub(i, i)
    if c == "\\" then
      local e = js:sub(i + 1, i + 1)
      if e == "" then H.refuse("a regexp cannot end with \\") end
      if H.CLASS[e] then
        put(H.CLASS[e])
        i = i + 2
      elseif H.CHAR[e] and not (e == "0" and js:sub(i + 2, i + 2):find("%d")) then
        put(H.CHAR[e])
        i = i + 2
      elseif e == "x" then
        local hex = js:match("^%x%x", i + 2)
        if not hex then H.refuse("\\x needs two hex digits") end
        put("\\%x" .. hex)
        i = i + 4
      elseif e == "u" then
        local hex = js:match("^%x%x%x%x", i + 2)
        if not hex then H.refuse("\\u needs four hex digits (\\u{...} is not supported)") end
        put("\\%u" .. hex)
        i = i + 6
      elseif e:find("%d") then
        local d = js:match("^%d+", i + 1)
        if tonumber(d) < 1 or tonumber(d) > M.MAX_GROUPS then
          H.refuse(("back reference \\%s is not supported"):format(d))
        end
        put("\\" .. d)
        i = i + 1 + #d
      elseif e == "b" or e == "B" then
        H.refuse(("\\%s (word boundary) is not supported"):format(e))
      elseif e:find("%a") then
        H.refuse(("\\%s is not supported"):format(e))
      else
        put(H.literal(e))
        i = i + 2
      end
    elseif c == "[" then
      local set
      set, i = H.set(js, i)
      put(set)
    elseif c == "(" then
      if js:sub(i + 1, i + 1) == "?" then
        local kind = js:sub(i + 2, i + 2)
        local look = js:sub(i + 2, i + 3)
        if kind == ":" then
          put("%(")
          i = i + 3
        elseif kind == "=" or kind == "!" or look == "<=" or look == "<!" then
          -- Vim writes the lookaround after its group: (?=x) -> %(x)@=
          local close = H.close(js, i)
          local behind = kind == "<"
          local inner, g = H.translate(js:sub(i + (behind and 4 or 3), close - 1))
          if g > 0 then H.refuse("a capturing group inside a lookaround is not supported") end
          local op = ({ ["="] = "@=", ["!"] = "@!", ["<="] = "@<=", ["<!"] = "@<!" })[behind and look or kind]
          inner = inner:sub(5) -- without its \v\C
          put("%(" .. inner .. ")" .. op)
          i = close + 1
        elseif kind == "<" then
          H.refuse("named groups (?<name>...) are not supported")
        else
          H.refuse(("(?%s is not supported"):format(kind))
        end
      else
        groups = groups + 1
        if groups > M.MAX_GROUPS then
          H.refuse(("more than %d capturing groups"):format(M.MAX_GROUPS))
        end
        put("(")
        i = i + 1
      end
    elseif c == ")" or c == "|" or c == "." or c == "^" or c == "$" then
      put(c)
      i = i + 1
    elseif c == "*" or c == "+" or c == "?" then
      local lazy = js:sub(i + 1, i + 1) == "?"
      if lazy then
        put(({ ["*"] = "{-}", ["+"] = "{-1,}", ["?"] = "{-0,1}" })[c])
        i = i + 2
      else
        put(c)
        i = i + 1
      end
    elseif c == "{" then
      local q = js:match("^{%d+,?%d*}", i)
      if q then
        local lazy = js:sub(i + #q, i + #q) == "?"
        local a, comma, b = q:match("^{(%d+)(,?)(%d*)}$")
        put("{" .. (lazy and "-" or "") .. a .. comma .. b .. "}")
        i = i + #q + (lazy and 1 or 0)
      else
        put("\\{") -- not a quantifier: a plain brace, as JavaScript reads it
        i = i + 1
      end
    else
      put(H.literal(c))
      i = i + 1
    end
  end
  return table.concat(out), groups
end

-- A plain character, escaped when Vim's very magic mode gives it a meaning.
function H.literal(c)
  if c:find("^[%p]$") and c ~= "_" and c ~= "-" and c ~= "," and c ~= ":" and c ~= ";" then
    if c == "'" or c == '"' or c == "!" or c == "#" or c == "`" then return c end
    return "\\" .. c
  end
  return c
end

-- The index of the ")" closing the group opened at i.
function H.close(js, i)
  local depth, j = 0, i
  while j <= #js do
    local c = js:sub(j, j)
    if c == "\\" then
      j = j + 1
    elseif c == "[" then
      local _, after = H.set(js, j)
      j = after - 1
    elseif c == "(" then
      depth = depth + 1
    elseif c == ")" then
      depth = depth - 1
      if depth == 0 then return j end
    end
    j = j + 1
  end
  H.refuse("a group is not closed")
end

-- The set starting at i: its Vim form and the index after it.
function H.set(js, i)
  local out, j = { "[" }, i + 1
  if js:sub(j, j) == "^" then
    out[#out + 1] = "^"
    j = j + 1
  end
  if js:sub(j, j) == "]" then H.refuse("an empty set [] or [^] is not supported") end
  while true do
    local c = js:sub(j, j)
    if c == "" then H.refuse("a set [...] is not closed") end
    if c == "]" then break end
    if c == "\\" then
      local e = js:sub(j + 1, j + 1)
      if H.IN_SET[e] then
        out[#out + 1] = H.IN_SET[e]
      elseif H.CHAR_IN_SET[e] then
        out[#out + 1] = H.CHAR_IN_SET[e]
      elseif e == "x" and js:match("^%x%x", j + 2) then
        out[#out + 1] = "\\x" .. js:sub(j + 2, j + 3)
        j = j + 2
      elseif e == "u" and js:match("^%x%x%x%x", j + 2) then
        out[#out + 1] = "\\u" .. js:sub(j + 2, j + 5)
        j = j + 4
      elseif e == "b" then
        out[#out + 1] = "\\x08"
      elseif e:find("%w") then
        H.refuse(("\\%s inside a set [...] is not supported"):format(e))
      elseif e == "]" or e == "\\" or e == "^" or e == "-" then
        out[#out + 1] = "\\" .. e
      else
        out[#out + 1] = e
      end
      j = j + 2
    else
      if c == "[" and js:sub(j + 1, j + 1):find("[:=.]") then
        H.refuse("a POSIX class [:...:] inside a set is not supported")
      end
      out[#out + 1] = c
      j = j + 1
    end
  end
  out[#out + 1] = "]"
  return table.concat(out), j + 1
end

return M
