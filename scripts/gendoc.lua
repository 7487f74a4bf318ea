-- scripts/gendoc.lua — the parts of the docs that are generated from the code:
--
--   proctor.config schema ──► doc/proctor.txt  |proctor-config| "Defaults: >lua" block
--                         └─► lua/proctor/types.lua  the proctor.Config / proctor.SetupOpts classes
--   keymaps defaults + proctor.actions descriptions (through proctor.keys)
--                         ──► doc/proctor.txt  key tables (*proctor-console-keys*,
--                                              *proctor-list-keys*, *proctor-text-keys*)
--                         ──► doc/proctor.txt  the table of actions (*proctor-actions*)
--   core.spec_fields, core.worker_fields (PR_SPEC_FIELDS, PR_WORKER_FIELDS in
--   csrc/include/proctor.h, the one description every reader of a start spec uses)
--                         ──► doc/proctor.txt  the fields of a start spec
--                                              (*proctor-core-start*) and of a
--                                              worker (*proctor-workers*)
--
-- `make doc` writes them:
--   nvim --headless -u NONE -i NONE -n --cmd 'set rtp^=.' -c "lua dofile('scripts/gendoc.lua').write()" -c 'qa!'
-- The nvim test tier calls check() and fails when a file differs from what
-- the code generates. Loading this file has no side effects: it returns the module.

local G = {}

G.root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")
G.WIDTH = 78

-- Lines of `path` (relative to the root).
local function read(path) return vim.fn.readfile(G.root .. "/" .. path) end

-- Word-wrap `text` into lines of at most `width` characters.
local function wrap(text, width)
  local lines, cur = {}, ""
  for word in text:gmatch("%S+") do
    if cur == "" then
      cur = word
    elseif #cur + 1 + #word <= width then
      cur = cur .. " " .. word
    else
      lines[#lines + 1] = cur
      cur = word
    end
  end
  if cur ~= "" then lines[#lines + 1] = cur end
  return lines
end

-- `prefix` followed by "-- comment", the comment wrapped at column `col` (0-based),
-- continuation lines indented to `col`.
local function commented(prefix, comment, col)
  if not comment or comment == "" then return { prefix } end
  col = math.max(col, #prefix + 1)
  local width = G.WIDTH - col - 3
  local parts = wrap(comment, math.max(width, 20))
  local out = { prefix .. string.rep(" ", col - #prefix) .. "-- " .. parts[1] }
  for i = 2, #parts do
    out[#out + 1] = string.rep(" ", col) .. "-- " .. parts[i]
  end
  return out
end

-- How the help writes the value `v`.
local function lua_value(v)
  if v == nil then return "nil" end
  if type(v) == "string" then return string.format("%q", v) end
  return tostring(v)
end

-- A key as a table key: plain name, or ["<C-c>"].
local function lua_key(k)
  if type(k) == "string" and k:match("^[%a_][%w_]*$") then return k end
  return "[" .. string.format("%q", k) .. "]"
end

--- The |proctor-config| block: the lines between "Defaults: >lua" and "<".
---@return string[]
function G.config_block()
  local config = require("proctor.config")
  require("proctor.actions") -- registers the descriptions proctor.keys shows
  local keys = require("proctor.keys")
  local out = { "    {" }
  -- Entries below a section (or the top level) as rows { prefix, comment }, then
  -- rendered with one comment column per group.
  local function name(key) return key:match("([^.]+)$") end
  local function emit_group(rows)
    local col = 0
    for _, r in ipairs(rows) do
      if not r.close then col = math.max(col, #r.prefix + 1) end
    end
    col = math.min(col, 44)
    for _, r in ipairs(rows) do
      vim.list_extend(out, commented(r.prefix, r.comment, col))
    end
  end
  local function render(parent, level)
    local rows, width = {}, 0
    local children = {}
    for _, e in ipairs(config.schema) do
      local p = e.key:match("^(.*)%.[^.]+$") or ""
      if p == parent then children[#children + 1] = e end
    end
    for _, e in ipairs(children) do
      if e.type ~= nil and not e.map then width = math.max(width, #name(e.key)) end
    end
    local indent = string.rep("  ", level + 3)
    for _, e in ipairs(children) do
      if e.type == nil or e.map then
        -- a section or a key map: flush what came before, then its own lines
        emit_group(rows)
        rows = {}
        emit_group({ { prefix = indent .. name(e.key) .. " = {", comment = e.description } })
        if e.map then
          local binds = keys.bindings(e.default)
          local kw = 0
          for _, b in ipairs(binds) do
            kw = math.max(kw, #lua_key(b[1]))
          end
          local inner = {}
          for _, b in ipairs(binds) do
            local k = lua_key(b[1])
            inner[#inner + 1] =
              {
                prefix = indent .. "  " .. k .. string.rep(" ", kw - #k) .. " = " .. lua_value(
                  b[2]
                ) .. ",",
              }
          end
          emit_group(inner)
        else
          render(e.key, level + 1)
        end
        out[#out + 1] = indent .. "},"
      else
        local n = name(e.key)
        local value = e.show or lua_value(e.default)
        rows[#rows + 1] = {
          prefix = indent .. n .. string.rep(" ", width - #n) .. " = " .. value .. ",",
          comment = e.description,
        }
      end
    end
    emit_group(rows)
  end
  render("", 0)
  out[#out + 1] = "    }"
  return out
end

--- A key table of the help: one line per action bound in `map`, its keys
--- first (`<CR> o`), then the action's description.
---@param map table<string, string|false>
---@return string[]
function G.key_table(map)
  require("proctor.actions") -- registers the descriptions proctor.keys shows
  local rows = require("proctor.keys").key_rows(map)
  return G.two_columns(vim.tbl_map(function(r) return { r.lhs, r.desc } end, rows))
end

--- Lines "    {left}  {right}" with the left column as wide as its widest
--- cell and the right one wrapped under itself.
---@param rows {[1]: string, [2]: string}[]
---@return string[]
function G.two_columns(rows)
  local w = 0
  for _, r in ipairs(rows) do
    w = math.max(w, #r[1])
  end
  local out = {}
  for _, r in ipairs(rows) do
    local prefix = "    " .. r[1] .. string.rep(" ", w - #r[1]) .. "  "
    local parts = wrap(r[2], G.WIDTH - #prefix)
    out[#out + 1] = prefix .. parts[1]
    for i = 2, #parts do
      out[#out + 1] = string.rep(" ", #prefix) .. parts[i]
    end
  end
  return out
end

--- The table of actions (*proctor-actions*): name, what it does, and the
--- :Proctor subcommand that runs it.
---@return string[]
function G.actions_table()
  local actions = require("proctor.actions")
  return G.two_columns(vim.tbl_map(function(n)
    local a = actions.actions[n]
    return { n, a.desc .. (a.command and (" (|:Proctor-" .. (a.command.name or n) .. "|)") or "") }
  end, actions.names()))
end

--- What a field of the core's start spec (or worker table) is, for the help.
---@param f table an entry of core.spec_fields / core.worker_fields
---@return string
local function field_text(f)
  local what = {
    boolean = "boolean",
    integer = f.max and string.format("integer, at most %d", f.max) or "integer",
    string = "string",
    command = "string or list of strings",
    env = "map NAME = value",
    secrets = "map NAME = value or source, |proctor-secrets|",
    names = "list of names",
    worker = "true or map, |proctor-workers|",
    enum = "string",
    ready = "map",
  }
  local t = what[f.type] or f.type
  if type(f.default) == "string" or (type(f.default) == "number" and f.default > 0) then
    t = t
      .. string.format(
        "; default %s",
        type(f.default) == "string" and ('"' .. f.default .. '"') or tostring(f.default)
      )
  end
  local only = (f.lua and not f.rpc) and "; eng:start only"
    or (f.rpc and not f.lua) and "; RPC only"
    or ""
  return f.help .. " (" .. t .. only .. ")"
end

--- The fields of a start spec (worker false) or of a worker table (true), as
--- the help lists them: made from the core's own description.
---@param worker boolean
---@return string[]
function G.spec_table(worker)
  local core = require("proctor.core")
  local fields = worker and core.worker_fields or core.spec_fields
  return G.two_columns(vim.tbl_map(function(f) return { f.key, field_text(f) } end, fields))
end

--- The LuaCATS classes of the configuration, for lua/proctor/types.lua.
---@return string[]
function G.types_block()
  local config = require("proctor.config")
  local out = {}
  local function luacats(e)
    if e.map then return "table<string, string|fun(id: integer|nil)|false>" end
    if e.luacats then return e.luacats end
    local values = config.enum_values(e)
    if values then
      return table.concat(vim.tbl_map(function(v) return string.format("%q", v) end, values), "|")
    end
    local t = e.type:gsub("number", e.check and "integer" or "number")
    t = t:gsub("|nil$", "")
    return t
  end
  local function class(name, parent, optional)
    out[#out + 1] = "---@class " .. name
    for _, e in ipairs(config.schema) do
      local p = e.key:match("^(.*)%.[^.]+$") or ""
      if p == parent then
        local n = e.key:match("([^.]+)$")
        local t
        if e.type == nil then
          t = name .. "." .. n
        else
          t = luacats(e)
          if e.type:match("|nil$") then t = t .. "|nil" end
        end
        -- help links |tag| read as tag; an enum's description is its type
        local desc = (config.enum_values(e) or e.description == "") and ""
          or (" " .. e.description:gsub("|([^|%s]+)|", "%1"))
        out[#out + 1] = "---@field " .. n .. (optional and "?" or "") .. " " .. t .. desc
      end
    end
    for _, e in ipairs(config.schema) do
      local p = e.key:match("^(.*)%.[^.]+$") or ""
      if p == parent and e.type == nil then
        out[#out + 1] = ""
        class(name .. "." .. e.key:match("([^.]+)$"), e.key, optional)
      end
    end
  end
  out[#out + 1] =
    '--- The configuration in effect (require("proctor.config").get()): every key set.'
  class("proctor.Config", "", false)
  out[#out + 1] = ""
  out[#out + 1] = "--- What setup() takes: any subset of proctor.Config."
  class("proctor.SetupOpts", "", true)
  return out
end

-- Replace the lines after the line matching `start` up to (not including) the
-- first line matching `stop` with `body`. Errors when the anchors are missing.
local function splice(lines, start, stop, body, what)
  local a
  for i, l in ipairs(lines) do
    if l:find(start) then
      a = i
      break
    end
  end
  assert(a, what .. ": no line matches " .. start)
  local b
  for i = a + 1, #lines do
    if lines[i]:find(stop) then
      b = i
      break
    end
  end
  assert(b, what .. ": no line matches " .. stop .. " after " .. start)
  local res = {}
  for i = 1, a do
    res[#res + 1] = lines[i]
  end
  vim.list_extend(res, body)
  for i = b, #lines do
    res[#res + 1] = lines[i]
  end
  return res
end

--- What the generated files should hold: { [path] = lines }.
---@return table<string, string[]>
function G.generate()
  local cfg = require("proctor.config").defaults
  local doc = read("doc/proctor.txt")
  local config_at
  for i, l in ipairs(doc) do
    if l:find("%*proctor%-config%*") then config_at = i end
  end
  assert(config_at, "doc/proctor.txt: no *proctor-config* tag")
  -- the Defaults block after *proctor-config*
  local head = vim.list_slice(doc, 1, config_at)
  local tail = vim.list_slice(doc, config_at + 1)
  tail = splice(tail, "^Defaults: >lua$", "^<$", G.config_block(), "proctor-config")
  doc = vim.list_extend(head, tail)
  doc = splice(
    doc,
    "%*proctor%-console%-keys%*$",
    "^$",
    G.key_table(cfg.keymaps.console),
    "console keys"
  )
  doc = splice(doc, "%*proctor%-list%-keys%*$", "^$", G.key_table(cfg.keymaps.list), "list keys")
  doc = splice(doc, "binds keys to these names:$", "^$", G.actions_table(), "actions")
  doc = splice(
    doc,
    "The fields %(from PR_SPEC_FIELDS%):$",
    "^    Returns the id at once",
    G.spec_table(false),
    "start spec"
  )
  doc = splice(
    doc,
    "The fields %(from PR_WORKER_FIELDS%):$",
    "^stdin is always a pipe",
    G.spec_table(true),
    "worker fields"
  )
  if cfg.keymaps.text then
    doc =
      splice(doc, "%*proctor%-text%-keys%*$", "^$", G.key_table(cfg.keymaps.text), "text view keys")
  end
  local types = read("lua/proctor/types.lua")
  types = splice(
    types,
    "^%-%- BEGIN generated by scripts/gendoc%.lua",
    "^%-%- END generated",
    G.types_block(),
    "types.lua"
  )
  return { ["doc/proctor.txt"] = doc, ["lua/proctor/types.lua"] = types }
end

--- The generated files that differ from what the code generates: list of
--- { path, line, want, have } (the first differing line of each).
function G.check()
  local diffs = {}
  for path, want in pairs(G.generate()) do
    local have = read(path)
    for i = 1, math.max(#want, #have) do
      if want[i] ~= have[i] then
        diffs[#diffs + 1] = { path = path, line = i, want = want[i], have = have[i] }
        break
      end
    end
  end
  table.sort(diffs, function(a, b) return a.path < b.path end)
  return diffs
end

--- Write the generated parts into the files.
function G.write()
  for path, lines in pairs(G.generate()) do
    vim.fn.writefile(lines, G.root .. "/" .. path)
  end
end

return G
