--- proctor.tasks.params — parameters of a task definition (|proctor-params|):
--- declared, asked for at launch, checked, remembered, substituted.
---
---   deploy = {
---     cmd = "./deploy.sh ${param:env} ${param:tag}",
---     params = {
---       env = { type = "enum", choices = { "staging", "prod" }, default = "staging" },
---       tag = { type = "string", desc = "image tag" },
---       jobs = { type = "number", default = 4, optional = true },
---     },
---   }
---
---   params.declare(def)                      --> nil | err   (discovery: the declaration)
---   params.launch(spec, { values, prompt }, function(spec2, err) end)
---
--- `${param:NAME}` is replaced in `cmd`, `env` values, `cwd` and `label`; a
--- task without `params` is never touched. In a shell string `cmd` a value
--- that holds anything but `[%w-_./=:,+@%]` goes in single-quoted: one word,
--- never code. `$${param:NAME}` is a literal `${param:NAME}`. A NAME that is
--- not declared is an error naming it.
---
--- The values of the last launch are remembered per task and directory: in
--- memory, and in `stdpath("state")/proctor/params` (JSON, shared by every
--- editor, at most M.MAX_TASKS tasks: the oldest go). Requiring this module has
--- no side effects.

local M = {}
local H = {}

local compat = require("proctor.compat")

--- Tasks whose last values are kept (|proctor-limits|); the oldest go first.
M.MAX_TASKS = 500
--- Bytes of one value (|proctor-limits|): a longer one is refused.
M.MAX_VALUE_BYTES = 4096

H.KEYS = { type = true, default = true, choices = true, desc = true, optional = true }
H.TYPES = { string = true, enum = true, number = true }
H.memory = {} -- key -> { at, values }

--- Check the `params` of definition `def` (in place: a number default or
--- choice becomes its text). Returns nil, or what is wrong.
---@param def table a task definition with `params`
---@return string|nil err
function M.declare(def)
  local params = def.params
  if type(params) ~= "table" then return "'params' must be a table, got " .. type(params) end
  for name, p in pairs(params) do
    if type(name) ~= "string" or not name:find("^[%a_][%w_]*$") then
      return ("a parameter's name must be a word (letters, digits, _), got '%s'"):format(
        tostring(name)
      )
    end
    local err = H.declare_one(p)
    if err then return ("param '%s': %s"):format(name, err) end
  end
  return nil
end

--- Launch `spec` (a definition with `params`): its values from `opts.values`
--- (`{ name = text }`: nothing is asked), else asked for one by one when
--- opts.prompt (|vim.ui.input()|, |vim.ui.select()|; each offers the last
--- value, else the default), else the last values and defaults. Every value
--- is checked, remembered, and substituted; `cb(spec2)` gets the spec
--- without `params`, or cb(nil, err): a refused value, a required one
--- missing, or "canceled". Synchronous unless it prompts.
---@param spec table
---@param opts {values: table<string, string>|nil, prompt: boolean|nil}
---@param cb fun(spec: table|nil, err: string|nil)
function M.launch(spec, opts, cb)
  local name = spec.name or spec.label or "task"
  local err = M.declare(spec)
  if err then return cb(nil, ("task %s: %s"):format(name, err)) end
  local key = H.key(spec)
  local last = M.last(key)
  local given = opts.values
  if given then
    for k in pairs(given) do
      if not spec.params[k] then
        return cb(
          nil,
          ("task %s has no parameter '%s' (%s)"):format(name, tostring(k), H.names(spec.params))
        )
      end
    end
  end
  local order = H.order(spec.params)
  local values = {}
  local function finish()
    for _, p in ipairs(order) do
      local v, verr = M.check(spec.params[p], values[p])
      if verr then return cb(nil, ("task %s: param '%s' %s"):format(name, p, verr)) end
      values[p] = v
    end
    local out, serr = M.apply(spec, values)
    if not out then return cb(nil, ("task %s: %s"):format(name, serr)) end
    M.remember(key, values)
    cb(out)
  end
  local function start_value(p)
    local v = last[p]
    if v == nil then v = spec.params[p].default end
    return v ~= nil and tostring(v) or nil
  end
  if given or not opts.prompt then
    for _, p in ipairs(order) do
      if given and given[p] ~= nil then
        values[p] = tostring(given[p])
      else
        values[p] = start_value(p)
      end
    end
    return finish()
  end
  local i = 0
  local function ask_next()
    i = i + 1
    local p = order[i]
    if not p then return finish() end
    H.ask(name, p, spec.params[p], start_value(p), function(v)
      if v == nil then return cb(nil, ("task %s: canceled"):format(name)) end
      values[p] = v
      ask_next()
    end)
  end
  ask_next()
end

--- Check one value against its declaration: the value (text), or nil and
--- what is wrong. An empty or missing value of an optional one is "".
---@param p table the declaration
---@param v string|nil
---@return string|nil value, string|nil err
function M.check(p, v)
  if v == nil or v == "" then
    if p.optional then return "" end
    return nil, "needs a value" .. (p.type == "enum" and (" (one of " .. H.choices(p) .. ")") or "")
  end
  if #v > M.MAX_VALUE_BYTES then
    return nil, ("is longer than %d bytes"):format(M.MAX_VALUE_BYTES)
  end
  if p.type == "number" and not tonumber(v) then
    return nil, ("must be a number, got '%s'"):format(v)
  end
  if p.type == "enum" and not vim.tbl_contains(p.choices, v) then
    return nil, ("must be one of %s, got '%s'"):format(H.choices(p), v)
  end
  return v
end

--- `spec` with every `${param:NAME}` replaced by its value and without
--- `params`; nil, err when one names no parameter.
---@param spec table
---@param values table<string, string>
---@return table|nil spec, string|nil err
function M.apply(spec, values)
  local out = vim.deepcopy(spec)
  out.params = nil
  local err
  local function sub(s, shell)
    if type(s) ~= "string" then return s end
    return (
      s:gsub("(%$?)%${param:([^}]*)}", function(escape, name)
        if escape == "$" then return "${param:" .. name .. "}" end
        local v = values[name]
        if v == nil then
          err = err or ("'${param:%s}' names no parameter (%s)"):format(name, H.names(spec.params))
          return ""
        end
        return shell and H.quote(v) or v
      end)
    )
  end
  if type(out.cmd) == "string" then
    out.cmd = sub(out.cmd, true)
  elseif type(out.cmd) == "table" then
    for i, a in ipairs(out.cmd) do
      out.cmd[i] = sub(a)
    end
  end
  if type(out.env) == "table" then
    for k, v in pairs(out.env) do
      out.env[k] = sub(v)
    end
  end
  out.label = sub(out.label)
  if type(out.cwd) == "string" and out.cwd:find("${param:", 1, true) then
    local c = sub(out.cwd)
    if c:sub(1, 2) == "~/" then c = compat.uv.os_homedir() .. c:sub(2) end
    out.cwd = (vim.fn.fnamemodify(c, ":p"):gsub("(.)/$", "%1"))
  end
  if err then return nil, err end
  return out
end

--- The values last launched for the task `key` names (H.key), else {}.
---@param key string
---@return table<string, string>
function M.last(key)
  local all = H.load()
  local e = all[key] or H.memory[key]
  return e and vim.deepcopy(e.values) or {}
end

--- Remember `values` for the task `key` names: in memory and in the state file.
---@param key string
---@param values table<string, string>
function M.remember(key, values)
  local e = { at = os.time(), values = vim.deepcopy(values) }
  H.memory[key] = e
  local all = H.load()
  all[key] = e
  local keys = vim.tbl_keys(all)
  if #keys > M.MAX_TASKS then
    table.sort(keys, function(a, b) return (all[a].at or 0) > (all[b].at or 0) end)
    for i = M.MAX_TASKS + 1, #keys do
      all[keys[i]] = nil
    end
  end
  pcall(H.save, all)
end

--- The key a task's values are remembered under: its directory and name.
---@param spec table
---@return string
function M.key(spec) return H.key(spec) end

-- Helpers --------------------------------------------------------------------------

function H.declare_one(p)
  if type(p) ~= "table" then return "must be a table, got " .. type(p) end
  for k in pairs(p) do
    if not H.KEYS[k] then
      return ("unknown field '%s' (type, default, choices, desc, optional)"):format(tostring(k))
    end
  end
  p.type = p.type or (p.choices and "enum" or "string")
  if not H.TYPES[p.type] then
    return ('type must be "string", "enum" or "number", got \'%s\''):format(tostring(p.type))
  end
  if p.desc ~= nil and type(p.desc) ~= "string" then return "desc must be a string" end
  if p.optional ~= nil and type(p.optional) ~= "boolean" then
    return "optional must be a boolean"
  end
  if p.type == "enum" then
    if type(p.choices) ~= "table" or #p.choices == 0 then
      return "an enum needs choices = { ... }"
    end
    for i, c in ipairs(p.choices) do
      if type(c) ~= "string" and type(c) ~= "number" then return "choices must be strings" end
      p.choices[i] = tostring(c)
    end
  elseif p.choices ~= nil then
    return "choices belong to an enum"
  end
  if p.default ~= nil then
    if type(p.default) ~= "string" and type(p.default) ~= "number" then
      return "default must be a string or a number"
    end
    p.default = tostring(p.default)
    local _, err = M.check(p, p.default)
    if err then return "default " .. err end
  end
  return nil
end

-- The parameters in the order they are asked: by name (a Lua table keeps none).
function H.order(params)
  local out = vim.tbl_keys(params)
  table.sort(out)
  return out
end

function H.names(params)
  local n = H.order(params)
  return #n > 0 and ("parameters: " .. table.concat(n, ", ")) or "it has none"
end

function H.choices(p) return table.concat(p.choices or {}, ", ") end

function H.key(spec)
  return (type(spec.cwd) == "string" and spec.cwd or vim.fn.getcwd())
    .. "\t"
    .. tostring(spec.name or spec.label or "")
end

-- A value as one word of a shell command line, never code.
function H.quote(v)
  if v ~= "" and not v:find("[^%w%-_%./=:,+@%%]") then return v end
  return "'" .. v:gsub("'", "'\\''") .. "'"
end

-- Ask for one value: a choice of an enum (the start value first), else a line.
-- on_value(text) or on_value(nil) when the user left the prompt.
function H.ask(task, name, p, start, on_value)
  local what = ("%s: %s%s"):format(task, name, p.desc and (" — " .. p.desc) or "")
  if p.type == "enum" then
    local items = {}
    if start and vim.tbl_contains(p.choices, start) then items[1] = start end
    for _, c in ipairs(p.choices) do
      if c ~= start then items[#items + 1] = c end
    end
    if p.optional then items[#items + 1] = "" end
    vim.ui.select(items, {
      prompt = what,
      kind = "proctor_param",
      format_item = function(c)
        if c == "" then return "(none)" end
        return c == start and (c .. "  (last)") or c
      end,
    }, on_value)
    return
  end
  vim.ui.input({
    prompt = what .. (p.type == "number" and " (a number)" or "") .. ": ",
    default = start,
  }, on_value)
end

function H.file() return compat.state_dir() .. "/proctor/params" end

-- Every task's remembered values: key -> { at, values } (a missing or bad file: {}).
function H.load()
  local fd = io.open(H.file(), "r")
  if not fd then return {} end
  local text = fd:read("*a")
  fd:close()
  local ok, t = pcall(vim.json.decode, text)
  if not ok or type(t) ~= "table" then return {} end
  local out = {}
  for _, e in ipairs(t) do
    if type(e) == "table" and type(e.key) == "string" and type(e.values) == "table" then
      out[e.key] = { at = tonumber(e.at) or 0, values = e.values }
    end
  end
  return out
end

function H.save(all)
  local list = {}
  for k, e in pairs(all) do
    list[#list + 1] = { key = k, at = e.at, values = e.values }
  end
  local file = H.file()
  vim.fn.mkdir(vim.fn.fnamemodify(file, ":h"), "p")
  -- a name of this editor's own: two editors writing at once never share a temporary file
  local tmp = string.format("%s.%d.tmp", file, vim.fn.getpid())
  local fd = assert(io.open(tmp, "w"))
  fd:write(vim.json.encode(list))
  fd:close()
  assert(os.rename(tmp, file))
end

M._H = H

return M
