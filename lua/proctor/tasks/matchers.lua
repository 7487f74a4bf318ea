--- proctor.tasks.matchers — problem matchers: output text in, problems out.
---
---   local m = matchers.new("gcc", { cwd = "/src/app" })   -- or an 'errorformat'
---   m:feed("main.c:3:5: error: 'x' undeclared\n")           -- whole lines
---   m:finish()
---   m.items  --> { { filename = "/src/app/main.c", lnum = 3, col = 5,
---                    text = "'x' undeclared", type = "E", code = nil } }
---
--- Built-in matchers find their lines by searching each chunk for a few
--- literal strings (`triggers`) with plain `string.find`, so lines that
--- cannot be a problem cost no Lua work: a 100 MiB log is scanned at the
--- speed of a substring search. Only the lines around a hit are parsed. A
--- matcher may ask for the lines that follow a hit (a Python traceback ends
--- with its message) and read the ones before it (rustc's `-->` line follows
--- its message). An 'errorformat' goes through |getqflist()| with `lines`,
--- one chunk at a time (multi-line formats do not span two chunks).
---
--- Relative file names resolve against the execution's cwd (gcc: the
--- directory make says it entered). `type` is "E", "W", "I" or "N".
---
--- A compiler's `note:` about an error or warning (gcc, clang; an
--- 'errorformat' entry whose text starts with "note:") is folded into the
--- problem it follows: its text is added to the message ("note: …", with
--- its place when that is elsewhere) and it is kept in `related`, so a note
--- never shows as a problem of its own over the error it explains. The
--- changed item is listed in `updated` (the consumer republishes it; it may
--- have taken it already). At most NOTES_MAX notes are folded into one
--- problem; the rest are counted. Requiring this module has no side effects.

local M = {}
local H = {}

local find, sub, byte, match = string.find, string.sub, string.byte, string.match

---@class proctor.tasks.Item
---@field filename string absolute
---@field lnum integer 1-based
---@field col integer|nil 1-based
---@field text string
---@field type string "E" | "W" | "I" | "N"
---@field code string|nil
---@field related proctor.tasks.Related[]|nil the notes folded into it

---@class proctor.tasks.Related
---@field filename string absolute
---@field lnum integer
---@field col integer|nil
---@field text string

--- Notes folded into one problem (|proctor-limits|); further ones are only counted.
M.NOTES_MAX = 10

-- Built-in matchers ----------------------------------------------------------------
--
-- Each: triggers (literal strings), line(st, l, ctx) -> item | nil, and
-- optionally follow(st, l) for the lines after a hit while st.follow is set.
-- ctx.prev(k) is the k-th line before the hit (nil past what is kept).

H.KIND = {
  error = "E",
  ["fatal error"] = "E",
  warning = "W",
  note = "I",
  help = "I",
  info = "I",
  hint = "N",
}

H.defs = {}

-- gcc, clang, and anything printing "file:line:col: error: message"; follows
-- make's "Entering directory" so recursive makes resolve.
H.defs.gcc = {
  triggers = {
    ": error",
    ": warning",
    ": note",
    ": fatal error",
    "Entering directory",
    "Leaving directory",
  },
  line = function(st, l)
    if find(l, "Entering directory", 1, true) then
      local dir = match(l, "Entering directory [`'\"](.-)['\"]%s*$")
      if dir then st.dirs[#st.dirs + 1] = dir end
      return
    end
    if find(l, "Leaving directory", 1, true) and match(l, "^%S*make") then
      if #st.dirs > 0 then st.dirs[#st.dirs] = nil end
      return
    end
    local f, ln, col, kind, msg = match(l, "^([^:]+):(%d+):(%d+): ([%a ]+): (.*)$")
    if not f then
      f, ln, kind, msg = match(l, "^([^:]+):(%d+): ([%a ]+): (.*)$")
    end
    local t = f and H.KIND[kind]
    if not t then return end
    local code = match(msg, " %[(%-W[^%]]+)%]$")
    if code then msg = sub(msg, 1, #msg - #code - 3) end
    return {
      filename = f,
      lnum = ln,
      col = col,
      text = msg,
      type = t,
      code = code,
      base = st.dirs[#st.dirs],
      note = kind == "note" or nil,
    }
  end,
}
H.defs.clang = H.defs.gcc

-- rustc and cargo: "error[E0425]: message" then " --> src/main.rs:3:20".
H.defs.rustc = {
  triggers = { "--> " },
  line = function(_, l, ctx)
    local f, ln, col = match(l, "^%s*%-%-> (.-):(%d+):(%d+)%s*$")
    if not f then return end
    for k = 1, 4 do
      local p = ctx.prev(k)
      if not p then return end
      local kind, code, msg = match(p, "^(%a+)%[(%w+)%]: (.*)$")
      if not kind then
        kind, msg = match(p, "^(%a+): (.*)$")
      end
      if kind and H.KIND[kind] then
        return { filename = f, lnum = ln, col = col, text = msg, type = H.KIND[kind], code = code }
      end
    end
  end,
}
H.defs.cargo = H.defs.rustc

-- go build / vet / test: "./main.go:5:2: undefined: x", "    x_test.go:12: got 1".
H.defs.go = {
  triggers = { ".go:" },
  line = function(_, l)
    local f, ln, col, msg = match(l, "^%s*([^%s:]+%.go):(%d+):(%d+): (.*)$")
    if not f then
      f, ln, msg = match(l, "^%s*([^%s:]+%.go):(%d+): (.*)$")
    end
    if not f then return end
    return { filename = f, lnum = ln, col = col, text = msg, type = "E" }
  end,
}

-- tsc: "src/a.ts(3,5): error TS2322: ..." and --pretty "src/a.ts:3:5 - error TS2322: ...".
H.defs.tsc = {
  triggers = { "): error TS", "): warning TS", " - error TS", " - warning TS" },
  line = function(_, l)
    local f, ln, col, kind, code, msg = match(l, "^(.-)%((%d+),(%d+)%): (%a+) (TS%d+): (.*)$")
    if not f then
      f, ln, col, kind, code, msg = match(l, "^(.-):(%d+):(%d+) %- (%a+) (TS%d+): (.*)$")
    end
    if not f then return end
    return {
      filename = f,
      lnum = ln,
      col = col,
      text = msg,
      type = H.KIND[kind] or "E",
      code = code,
    }
  end,
}

-- eslint --format unix: "/abs/a.js:3:5: message [Error/no-var]".
H.defs.eslint = {
  triggers = { " [Error", " [Warning" },
  line = function(_, l)
    local f, ln, col, msg, kind, rule = match(l, "^(.-):(%d+):(%d+): (.*) %[(%a+)/?([^%]]*)%]%s*$")
    if not f then return end
    return {
      filename = f,
      lnum = ln,
      col = col,
      text = msg,
      type = kind == "Warning" and "W" or "E",
      code = rule ~= "" and rule or nil,
    }
  end,
}

-- Python tracebacks: the frames, then (after indented code lines) the message.
-- The innermost frame gets the message as an error, the callers an info entry.
H.defs.python = {
  triggers = { 'File "' },
  line = function(st, l)
    local f, ln = match(l, '^%s*File "(.-)", line (%d+)')
    if not f or f:sub(1, 1) == "<" then return end
    st.frames = st.frames or {}
    st.frames[#st.frames + 1] = { filename = f, lnum = ln, where = match(l, ", in (.*)$") }
    st.follow = true
  end,
  follow = function(st, l)
    if find(l, '^%s*File "') then return H.defs.python.line(st, l) end
    if l == "" or find(l, "^%s") then return end
    st.follow = false
    local frames = st.frames or {}
    st.frames = nil
    local out = {}
    for i = #frames, 1, -1 do
      local fr = frames[i]
      out[#out + 1] = {
        filename = fr.filename,
        lnum = fr.lnum,
        text = i == #frames and l
          or (l .. " (traceback" .. (fr.where and (", in " .. fr.where) or "") .. ")"),
        type = i == #frames and "E" or "I",
      }
    end
    return out
  end,
}

-- pytest: "tests/test_a.py:5: AssertionError" after its "E   ..." lines
-- (--tb=long), or "tests/test_a.py:5: in test_x" before them (--tb=short).
H.defs.pytest_lines = {
  triggers = { ".py:" },
  line = function(st, l, ctx)
    local f, ln, rest = match(l, "^([^%s:]+%.py):(%d+): (.*)$")
    if not f then return end
    if find(rest, "^in ") then
      st.short = { filename = f, lnum = ln, where = rest }
      st.follow = true
      return
    end
    local msg = {}
    for k = 1, 30 do
      local p = ctx.prev(k)
      if not p or (#msg > 0 and not find(p, "^E ")) then break end
      if find(p, "^E ") then table.insert(msg, 1, (p:gsub("^E%s+", ""))) end
    end
    local text = #msg > 0 and table.concat(msg, " ") or rest
    return { filename = f, lnum = ln, text = text, type = "E" }
  end,
  follow = function(st, l)
    local f, ln, where = match(l, "^([^%s:]+%.py):(%d+): (in .*)$")
    if f then -- an inner frame: the message belongs to the innermost
      st.short = { filename = f, lnum = ln, where = where }
      return
    end
    if find(l, "^E ") then
      st.short.msg = (st.short.msg and (st.short.msg .. " ") or "") .. l:gsub("^E%s+", "")
      return
    end
    if find(l, "^%s") or l == "" then
      if not st.short.msg then return end
    end
    st.follow = false
    local s = st.short
    st.short = nil
    if not s.msg then return end
    return { filename = s.filename, lnum = s.lnum, text = s.msg, type = "E" }
  end,
}

-- Lua: "lua: x.lua:3: message", "E5108: Error executing lua x.lua:3: ...",
-- traceback frames "\tx.lua:3: in function 'f'" (info entries).
H.defs.lua = {
  triggers = { ".lua:" },
  line = function(_, l)
    local f, ln, msg = match(l, "([^%s:'\"%[%]]+%.lua):(%d+): (.*)$")
    if not f then return end
    local frame = find(msg, "^in ") ~= nil
    return { filename = f, lnum = ln, text = msg, type = frame and "I" or "E" }
  end,
}

-- Composites: several matchers over the same text, each with its own state.
H.composite = {
  pytest = { "pytest_lines", "python" },
}

--- Names of the built-in matchers.
M.names = { "gcc", "clang", "rustc", "cargo", "go", "tsc", "eslint", "python", "pytest", "lua" }

--- The built-in matcher for a command (its program name), or nil.
---@param cmd string|string[]
---@return string|nil
function M.for_command(cmd)
  local words = H.words(cmd)
  local i = H.program_index(words)
  local prog = words[i] and words[i]:match("([^/]+)$") or ""
  return H.by_program[prog] or H.by_program[prog:gsub("[%d%.%-]+$", "")]
end

-- The words of a command (a shell string split at blanks).
function H.words(cmd)
  if type(cmd) == "table" then return cmd end
  local words = {}
  if type(cmd) == "string" then
    for w in cmd:gmatch("%S+") do
      words[#words + 1] = w
    end
  end
  return words
end

-- The index of the program among `words`: past VAR=value, env, npx, exec.
function H.program_index(words)
  local i = 1
  while
    words[i]
    and (
      words[i]:find("=", 1, true)
      or words[i] == "env"
      or words[i] == "npx"
      or words[i] == "exec"
    )
  do
    i = i + 1
  end
  return i
end

--- The built-in matcher `:Proctor run {cmd}` gives a command on its own
--- (|proctor-run-matcher|): only build and test tools, whose output is a log
--- of problems (make, cc, cargo, go, tsc, eslint, pytest, `python -m pytest`
--- ...); nil for anything else (a server, an editor, a shell).
---@param cmd string|string[]
---@return string|nil
function M.for_run(cmd)
  local words = H.words(cmd)
  local i = H.program_index(words)
  local prog = words[i] and words[i]:match("([^/]+)$") or ""
  prog = H.by_program[prog] and prog or prog:gsub("[%d%.%-]+$", "")
  if H.run_programs[prog] then return H.by_program[prog] end
  if
    (prog == "python" or prog == "python3")
    and words[i + 1] == "-m"
    and words[i + 2] == "pytest"
  then
    return "pytest"
  end
  return nil
end

-- Programs whose output `:Proctor run` matches without being asked.
H.run_programs = {
  make = true,
  gmake = true,
  cc = true,
  gcc = true,
  ["g++"] = true,
  ["c++"] = true,
  clang = true,
  ["clang++"] = true,
  ninja = true,
  cmake = true,
  cargo = true,
  rustc = true,
  go = true,
  tsc = true,
  eslint = true,
  pytest = true,
}

H.by_program = {
  make = "gcc",
  gmake = "gcc",
  cc = "gcc",
  gcc = "gcc",
  ["g++"] = "gcc",
  ["c++"] = "gcc",
  clang = "gcc",
  ["clang++"] = "gcc",
  ninja = "gcc",
  cmake = "gcc",
  cargo = "cargo",
  rustc = "cargo",
  go = "go",
  tsc = "tsc",
  eslint = "eslint",
  python = "pytest",
  python3 = "pytest",
  pytest = "pytest",
  lua = "lua",
  luajit = "lua",
  nvim = "lua",
  busted = "lua",
}

--- Make a matcher. `spec` is a built-in name, "compiler:NAME" (that
--- compiler plugin's 'errorformat'), or an 'errorformat' (contains '%').
--- opts.cwd: directory relative names resolve against.
---@param spec string
---@param opts {cwd: string}
---@return table|nil matcher, string|nil err
function M.new(spec, opts)
  local cwd = opts.cwd or vim.fn.getcwd()
  local self = { items = {}, cwd = cwd, count = 0, updated = {} }
  if type(spec) ~= "string" or spec == "" then
    return nil, "a matcher must be a name or an 'errorformat'"
  end
  local cname = spec:match("^compiler:(.+)$")
  if cname then
    local efm, err = M.compiler_efm(cname)
    if not efm then return nil, err end
    spec = efm
  end
  if spec:find("%", 1, true) then
    self.efm = spec
    return setmetatable(self, { __index = H.Efm })
  end
  local parts = H.composite[spec] or { spec }
  self.parts = {}
  for _, name in ipairs(parts) do
    local def = H.defs[name]
    if not def then
      return nil,
        ("unknown matcher '%s' (built-in: %s; or an 'errorformat', or \"compiler:NAME\")"):format(
          spec,
          table.concat(M.names, ", ")
        )
    end
    self.parts[#self.parts + 1] = { def = def, st = { dirs = {}, tail = {} } }
  end
  return setmetatable(self, { __index = H.Builtin })
end

--- The 'errorformat' a :compiler plugin sets, read in a scratch buffer so no
--- window or buffer of the user changes. nil and a message when there is none.
---@return string|nil efm, string|nil err
function M.compiler_efm(name)
  if
    #vim.api.nvim_get_runtime_file("compiler/" .. name .. ".vim", false) == 0
    and #vim.api.nvim_get_runtime_file("compiler/" .. name .. ".lua", false) == 0
  then
    return nil, ("no compiler plugin '%s' (:compiler %s)"):format(name, name)
  end
  local buf = vim.api.nvim_create_buf(false, true)
  local ok, err = pcall(
    vim.api.nvim_buf_call,
    buf,
    function() vim.cmd("compiler " .. vim.fn.fnameescape(name)) end
  )
  local efm = vim.bo[buf].errorformat
  vim.api.nvim_buf_delete(buf, { force = true })
  if not ok then return nil, tostring(err) end
  return efm
end

-- Built-in matchers: trigger search -----------------------------------------------

H.Builtin = {}

--- Match whole lines of text; new items are appended to self.items.
function H.Builtin:feed(text)
  for _, p in ipairs(self.parts) do
    H.scan(self, p.def, p.st, text)
  end
end

function H.Builtin:finish()
  for _, p in ipairs(self.parts) do
    if p.st.follow and p.def.follow then H.emit(self, p.st, p.def.follow(p.st, "")) end
  end
end

-- Search `text` for the triggers of `def`, parse each hit line once, in order.
function H.scan(self, def, st, text)
  local pos = 1
  if st.follow then pos = H.follow(self, def, st, text, 1) end
  local starts, ends = {}, {}
  local n = 0
  for _, t in ipairs(def.triggers) do
    local from = pos
    while true do
      local s = find(text, t, from, true)
      if not s then break end
      local ls = s
      while ls > pos and byte(text, ls - 1) ~= 10 do
        ls = ls - 1
      end
      local le = find(text, "\n", s, true) or (#text + 1)
      if not ends[ls] then
        ends[ls] = le
        n = n + 1
        starts[n] = ls
      end
      from = le + 1
    end
  end
  if n > 1 then table.sort(starts) end
  local done = pos
  for i = 1, n do
    local ls = starts[i]
    if ls >= done then
      local le = ends[ls]
      local ctx = H.ctx(text, ls, st)
      H.emit(self, st, def.line(st, sub(text, ls, le - 1), ctx))
      done = le + 1
      if st.follow then done = H.follow(self, def, st, text, done) end
    end
  end
  H.keep_tail(st, text)
end

-- Feed lines from `pos` to def.follow while st.follow holds; returns the position after.
function H.follow(self, def, st, text, pos)
  while st.follow and pos <= #text do
    local le = find(text, "\n", pos, true) or (#text + 1)
    H.emit(self, st, def.follow(st, sub(text, pos, le - 1)))
    pos = le + 1
  end
  return pos
end

-- ctx.prev(k): the k-th line before the one starting at ctx.ls (one ctx
-- table for every hit: hits are parsed one at a time).
H.context = { text = "", ls = 1, st = nil }
function H.context.prev(k)
  local c = H.context
  local text = c.text
  local e = c.ls - 1 -- the "\n" ending the previous line
  local left = k
  while e >= 1 do
    local s = e
    while s > 1 and byte(text, s - 1) ~= 10 do
      s = s - 1
    end
    left = left - 1
    if left == 0 then return sub(text, s, e - 1) end
    e = s - 1
  end
  local t = c.st.tail
  return t[#t - left + 1]
end

function H.ctx(text, ls, st)
  local c = H.context
  c.text, c.ls, c.st = text, ls, st
  return c
end

-- The last few lines of a chunk, for ctx.prev at the start of the next one.
function H.keep_tail(st, text)
  local lines = {}
  local e = byte(text, #text) == 10 and #text or #text + 1 -- where the last line ends
  for _ = 1, 8 do
    if e < 1 then break end
    local s = e
    while s > 1 and byte(text, s - 1) ~= 10 do
      s = s - 1
    end
    table.insert(lines, 1, sub(text, s, e - 1))
    e = s - 1
  end
  if #lines < 8 then
    for i = #st.tail, math.max(1, #st.tail - (8 - #lines) + 1), -1 do
      table.insert(lines, 1, st.tail[i])
    end
  end
  st.tail = lines
end

function H.emit(self, st, got)
  if not got then return end
  if got.filename then got = { got } end
  local seen = self.resolved
  if not seen then
    seen = {}
    self.resolved = seen
  end
  for _, it in ipairs(got) do
    local base = it.base or self.cwd
    local key = base .. "\0" .. it.filename
    local abs = seen[key]
    if not abs then
      abs = H.resolve(it.filename, base)
      seen[key] = abs
    end
    it.filename = abs
    it.base = nil
    it.lnum = tonumber(it.lnum) or 1
    it.col = tonumber(it.col)
    H.add(self, it)
  end
end

-- Append item `it`, or fold it into the problem before it when it is a note about that one.
function H.add(self, it)
  local last = self.last
  if it.note and last and (last.type == "E" or last.type == "W") then
    local rel = last.related
    if not rel then
      rel = {}
      last.related = rel
      last.notes = 0
    end
    last.notes = last.notes + 1
    if #rel < M.NOTES_MAX then
      rel[#rel + 1] = { filename = it.filename, lnum = it.lnum, col = it.col, text = it.text }
      local where = ""
      if it.filename ~= last.filename or it.lnum ~= last.lnum then
        local f = it.filename
        if f:sub(1, #self.cwd + 1) == self.cwd .. "/" then f = f:sub(#self.cwd + 2) end
        where = (" (%s:%d%s)"):format(f, it.lnum, it.col and (":" .. it.col) or "")
      end
      last.text = last.text .. "\nnote: " .. it.text .. where
    elseif last.notes == M.NOTES_MAX + 1 then
      last.text = last.text .. "\n…"
    end
    local up = self.updated
    if not up[#up] or up[#up] ~= last then up[#up + 1] = last end
    return
  end
  it.note = nil
  self.last = it
  self.count = self.count + 1
  self.items[#self.items + 1] = it
end

-- An absolute, simplified path for `f` seen relative to `base`.
function H.resolve(f, base)
  if f:sub(1, 2) == "~/" then
    f = vim.fn.expand("~") .. f:sub(2)
  elseif f:sub(1, 1) ~= "/" then
    if base:sub(1, 1) ~= "/" then base = H.resolve(base, vim.fn.getcwd()) end
    f = base:gsub("/$", "") .. "/" .. f
  end
  if f:find("/%.%.?/") or f:find("//", 1, true) or f:find("/%.$") then f = vim.fn.simplify(f) end
  return f
end

-- 'errorformat' matchers -----------------------------------------------------------

H.Efm = {}

function H.Efm:feed(text)
  local lines = vim.split(text, "\n", { plain = true })
  if lines[#lines] == "" then lines[#lines] = nil end
  if #lines == 0 then return end
  local res = H.in_dir(
    self.cwd,
    function() return vim.fn.getqflist({ lines = lines, efm = self.efm }) end
  )
  for _, it in ipairs(res and res.items or {}) do
    if it.valid == 1 and it.bufnr > 0 then
      local t = it.type ~= "" and it.type:upper() or "E"
      local msg = it.text
      -- no %t: "%f:%l:%c:%m" leaves gcc's " error: ", " warning: ", " note: " in the
      -- message; they say the type (a note is folded like the built-in matcher's)
      local kind, rest = match(msg, "^%s*(%a[%a ]-): (.*)$")
      if it.type == "" and kind and H.KIND[kind] then
        t, msg = H.KIND[kind], rest
      end
      H.add(self, {
        filename = vim.api.nvim_buf_get_name(it.bufnr),
        lnum = math.max(it.lnum, 1),
        col = it.col > 0 and it.col or nil,
        text = msg,
        type = (t == "E" or t == "W" or t == "I" or t == "N") and t or "E",
        code = it.nr > 0 and tostring(it.nr) or nil,
        note = it.type == "" and kind == "note" or nil,
      })
    end
  end
end

function H.Efm:finish() end

--- Run fn() with Vim's directory (window-local when it has one) set to `dir`,
--- so file names that 'errorformat' parsing turns into buffers resolve there.
function H.in_dir(dir, fn)
  local prev = vim.fn.getcwd()
  if dir == prev or vim.fn.isdirectory(dir) == 0 then return fn() end
  local scope = vim.fn.haslocaldir() == 1 and "lcd"
    or (vim.fn.haslocaldir(-1, 0) == 1 and "tcd" or "cd")
  vim.cmd("noautocmd " .. scope .. " " .. vim.fn.fnameescape(dir))
  local ok, res = pcall(fn)
  vim.cmd("noautocmd " .. scope .. " " .. vim.fn.fnameescape(prev))
  if not ok then error(res, 0) end
  return res
end

M._H = H

return M
