--- proctor.tasks.vsmatcher — VS Code's problem matchers (|proctor-vscode|):
--- one or several, each a list of line patterns, over an execution's output.
---
---   local m = vsmatcher.new({ matchers = { "gcc", {               -- a built-in name, or:
---     owner = "lint", severity = "W",                              -- the default severity
---     file_location = { kind = "relative", base = "/src/app" },    -- "absolute" | "autodetect"
---     patterns = { { re = [[\v\C^(\S.*)$]], file = 1 },            -- Vim regexes (tasks/jsregex.lua)
---                  { re = [[\v\C^\s+(\d+):(\d+)\s+(.*)$]], line = 1, column = 2, message = 3, loop = true } },
---   } } }, { cwd = "/src/app" })
---   m:feed("src/a.js\n  3:5  error  'x' is not defined\n")   -- whole lines
---   m.items  --> { { filename = "/src/app/src/a.js", lnum = 3, col = 5, text = ..., type = "W" } }
---
--- `spec.begins` (a Vim regex, a background task's beginsPattern): a line
--- that matches starts a new cycle (tsc --watch compiling again): the items
--- found before it are dropped and `cleared` is set for the consumer, which
--- replaces what it published.
---
--- The object has what tasks/diagnostics.lua reads of a matcher (`feed`,
--- `finish`, `items`, `count`, `updated`). A built-in name is
--- proctor.tasks.matchers' own matcher, its items moved into this list.
---
--- A pattern's fields are capture group numbers (0: the whole match): file,
--- location ("l", "l,c" or "l,c,el,ec"), line, column, end_line, end_column,
--- severity, code, message; `kind = "file"` makes a problem of the whole
--- file (line 1). Several patterns match consecutive lines, each filling
--- what is not filled yet (the messages are joined); the last one with
--- `loop` makes a problem of every line it matches after the others
--- matched. A line that breaks a sequence is tried as its start again.
--- Requiring this module has no side effects.

local M = {}
local H = {}

local matchers = require("proctor.tasks.matchers")
local uv = require("proctor.compat").uv

H.FIELDS = { "file", "location", "line", "column", "end_line", "end_column", "severity", "code" }

--- Make the matcher.
---@param spec {matchers: (string|table)[]}
---@param opts {cwd: string}
---@return table|nil matcher, string|nil err
function M.new(spec, opts)
  local cwd = opts.cwd or vim.fn.getcwd()
  local self = setmetatable({ items = {}, count = 0, updated = {}, cwd = cwd, parts = {} }, {
    __index = H.Matcher,
  })
  if type(spec) ~= "table" or type(spec.matchers) ~= "table" then
    return nil, "a VS Code matcher needs { matchers = { ... } }"
  end
  if spec.begins ~= nil then
    local ok, re = pcall(vim.regex, spec.begins)
    if not ok then return nil, ("begins %s: %s"):format(tostring(spec.begins), tostring(re)) end
    self.begins = re
  end
  for _, m in ipairs(spec.matchers) do
    if type(m) == "string" then
      local sub, err = matchers.new(m, { cwd = cwd })
      if not sub then return nil, err end
      self.parts[#self.parts + 1] = { builtin = sub, taken = 0 }
    elseif type(m) == "table" and type(m.patterns) == "table" and #m.patterns > 0 then
      for _, p in ipairs(m.patterns) do
        local ok, re = pcall(vim.regex, p.re)
        if not ok then return nil, ("pattern %s: %s"):format(tostring(p.re), tostring(re)) end
      end
      self.parts[#self.parts + 1] = { def = m, pos = 1, data = nil }
    else
      return nil, "a matcher is a built-in name or { patterns = { ... } }"
    end
  end
  return self
end

H.Matcher = {}

function H.Matcher:feed(text)
  if not self.begins then return H.feed(self, text) end
  -- a line matching `begins` starts a new cycle: what was found before it is old
  local from, pos, n = 1, 1, #text
  while pos <= n do
    local nl = text:find("\n", pos, true) or (n + 1)
    if self.begins:match_str(text:sub(pos, nl - 1)) then
      if pos > from then H.feed(self, text:sub(from, pos - 1)) end
      from = pos
      self.items, self.count, self.cleared = {}, 0, true
    end
    pos = nl + 1
  end
  if from <= n then H.feed(self, text:sub(from)) end
end

function H.feed(self, text)
  for _, p in ipairs(self.parts) do
    if p.builtin then
      p.builtin:feed(text)
      H.move(self, p)
    end
  end
  local inline = false
  for _, p in ipairs(self.parts) do
    inline = inline or p.def ~= nil
  end
  if not inline then return end
  for line in text:gmatch("([^\n]*)\n?") do
    if line ~= "" then
      line = line:gsub("\r$", "")
      for _, p in ipairs(self.parts) do
        if p.def then H.line(self, p, line) end
      end
    end
  end
end

function H.Matcher:finish()
  for _, p in ipairs(self.parts) do
    if p.builtin then
      p.builtin:finish()
      H.move(self, p)
    end
  end
end

-- Items a built-in matcher found since the last move: into this list.
function H.move(self, p)
  local items = p.builtin.items
  for i = p.taken + 1, #items do
    self.items[#self.items + 1] = items[i]
    self.count = self.count + 1
  end
  p.taken = #items
  for _, it in ipairs(p.builtin.updated) do
    self.updated[#self.updated + 1] = it
  end
  p.builtin.updated = {}
end

-- One line through the patterns of matcher part `p`.
function H.line(self, p, line)
  local pats = p.def.patterns
  if p.pos > 1 then
    local pat = pats[p.pos]
    local got = H.match(pat, line)
    if got then
      if pat.loop then return H.emit(self, p.def, H.fill(vim.deepcopy(p.data), pat, got)) end
      H.fill(p.data, pat, got)
      if p.pos == #pats then
        H.emit(self, p.def, p.data)
        p.pos, p.data = 1, nil
      else
        p.pos = p.pos + 1
      end
      return
    end
    p.pos, p.data = 1, nil -- the sequence broke: this line may start the next
  end
  local got = H.match(pats[1], line)
  if not got then return end
  local data = H.fill({}, pats[1], got)
  if #pats == 1 then return H.emit(self, p.def, data) end
  p.pos, p.data = 2, data
end

function H.match(pat, line)
  local m = vim.fn.matchlist(line, pat.re)
  if #m == 0 then return nil end
  return m
end

-- Fill what `data` has not yet from the groups of one match; messages are joined.
function H.fill(data, pat, got)
  for _, f in ipairs(H.FIELDS) do
    local g = pat[f]
    local v = g and got[g + 1]
    if v and v ~= "" and data[f] == nil then data[f] = v end
  end
  local g = pat.message
  local v = g and got[g + 1]
  if v and v ~= "" then data.message = data.message and (data.message .. "\n" .. v) or v end
  if pat.kind == "file" then data.whole_file = true end
  return data
end

H.SEVERITY = {
  error = "E",
  e = "E",
  fatal = "E",
  ["fatal error"] = "E",
  warning = "W",
  warn = "W",
  w = "W",
  info = "I",
  information = "I",
  i = "I",
  note = "I",
  hint = "N",
  h = "N",
  n = "N",
}

function H.emit(self, def, data)
  if not data.file or not data.message then return end
  local lnum, col, end_lnum, end_col
  if data.location then
    local n = {}
    for d in data.location:gmatch("%d+") do
      n[#n + 1] = tonumber(d)
    end
    lnum, col = n[1], n[2]
    if #n >= 4 then
      end_lnum, end_col = n[3], n[4]
    end
  else
    lnum, col = tonumber(data.line), tonumber(data.column)
    end_lnum, end_col = tonumber(data.end_line), tonumber(data.end_column)
  end
  if data.whole_file then
    lnum, col = 1, nil
  end
  if not lnum then return end
  local sev = data.severity and H.SEVERITY[vim.trim(data.severity):lower()]
  local it = {
    filename = H.resolve(self, def.file_location, vim.trim(data.file)),
    lnum = lnum,
    col = col,
    end_lnum = end_lnum,
    end_col = end_col,
    text = vim.trim(data.message),
    type = sev or def.severity or "E",
    code = data.code,
    owner = def.owner,
  }
  self.count = self.count + 1
  self.items[#self.items + 1] = it
end

-- The absolute name of `file` as `loc` says (kind absolute | relative | autodetect, base).
function H.resolve(self, loc, file)
  loc = loc or {}
  local base = loc.base or self.cwd
  local abs = file:sub(1, 1) == "/"
  local out
  if not abs then
    -- absolute: a relative name can only be read against the directory the task ran in
    out = (loc.kind == "absolute" and self.cwd or base):gsub("/$", "") .. "/" .. file
  else
    out = file
    if loc.kind == "autodetect" then -- relative first, as VS Code tries it
      local rel = base:gsub("/$", "") .. file
      if uv.fs_stat(rel) then out = rel end
    end
  end
  if out:find("/%.%.?/") or out:find("//", 1, true) then out = vim.fn.simplify(out) end
  return out
end

M._H = H

return M
