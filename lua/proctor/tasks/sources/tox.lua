--- proctor.tasks.sources.tox — tox environments, run by `tox -e ENV`, when
--- tox is installed and the project configures tox (tox.ini, tox.toml, a
--- `[tool.tox]` of pyproject.toml, a `[tox:tox]` of setup.cfg):
---   trusted directory  `tox -l` (tox 4 loads plugins and a toxfile.py, and
---                      may provision itself, while it lists: so only there)
---   else               tox.ini read as text (nothing runs): its `envlist` /
---                      `env_list`, braces expanded (`py{311,312}-lint`), then
---                      its `[testenv:NAME]` sections; not cached (`partial`)
--- A task source (tasks/discover.lua); requiring it has no side effects.

local M = {}

M.name = "tox"
M.files = { "tox.ini", "tox.toml", "pyproject.toml", "setup.cfg" }
M.needs = "tox"

function M.run(dir, present, done, e, opts, kit)
  local configured = false
  for _, f in ipairs(present) do
    local base = vim.fn.fnamemodify(f, ":t")
    local s = (base == "pyproject.toml" or base == "setup.cfg") and (kit.read(f) or "") or ""
    if
      base == "tox.ini"
      or base == "tox.toml"
      or (base == "pyproject.toml" and s:find("%[tool%.tox[%]%.]"))
      or (base == "setup.cfg" and s:find("%[tox:tox%]"))
    then
      configured = true
    end
  end
  if not configured then
    e.note = "no tox configuration (tox.ini, tox.toml, [tool.tox], [tox:tox])"
    return done({})
  end
  local function from_ini(why)
    e.partial = true
    e.note = why
    local envs = M.from_ini(kit.read(dir .. "/tox.ini") or "")
    done(M.tasks(envs, dir, kit))
  end
  if not kit.trusted(dir, opts, "tox -l") then
    return from_ini("not trusted: the environments tox.ini names")
  end
  local envs = {}
  kit.probe(dir, "proctor: tox environments", { "tox", "-l" }, function(l)
    local name, desc = M.line(l)
    if name then envs[#envs + 1] = { name = name, desc = desc } end
  end, function(ok)
    if not ok then return from_ini("`tox -l` failed: the environments tox.ini names") end
    done(M.tasks(envs, dir, kit))
  end)
end

--- One line of `tox -l`: an environment's name (and the text after ` -> `,
--- tox's description), or nil for a heading ("default environments:") or a
--- blank line.
---@return string|nil name, string|nil desc
function M.line(l)
  l = vim.trim(l)
  if l == "" or l:find(":$") then return nil end
  local name, desc = l:match("^(%S+)%s+%->%s+(.*)$")
  name = name or l
  if not name:find("^[%w_.%-]+$") then return nil end
  if desc == "[no description]" or desc == "" then desc = nil end
  return name, desc
end

--- The environments tox.ini names: its envlist (braces expanded), then its
--- [testenv:NAME] sections, each once.
---@param s string
---@return {name: string}[]
function M.from_ini(s)
  local out, seen = {}, {}
  local function add(n)
    n = vim.trim(n)
    if n ~= "" and not seen[n] and n:find("^[%w_.%-]+$") then
      seen[n] = true
      out[#out + 1] = { name = n }
    end
  end
  local section, list, parts = nil, false, {}
  for line in (s .. "\n"):gmatch("([^\n]*)\n") do
    local sec = line:match("^%s*%[([^%]]+)%]")
    if sec then
      section, list = vim.trim(sec), false
    elseif section == "tox" then
      local k, v = line:match("^([%w_]+)%s*=%s*(.*)$")
      if k then
        list = k == "envlist" or k == "env_list"
        if list then parts[#parts + 1] = v end
      elseif list and line:find("^%s+%S") then
        parts[#parts + 1] = line -- a continuation line
      end
    end
  end
  for _, part in ipairs(parts) do
    for item in M.split(part) do
      for _, n in ipairs(M.expand(item)) do
        add(n)
      end
    end
  end
  for line in s:gmatch("%[testenv:([^%]]+)%]") do
    add(line)
  end
  return out
end

-- The comma-separated items of an envlist line (commas inside braces stay).
function M.split(s)
  local items, depth, cur = {}, 0, {}
  for c in s:gmatch(".") do
    if c == "{" then depth = depth + 1 end
    if c == "}" then depth = depth - 1 end
    if (c == "," or c:find("%s")) and depth == 0 then
      items[#items + 1] = table.concat(cur)
      cur = {}
    else
      cur[#cur + 1] = c
    end
  end
  items[#items + 1] = table.concat(cur)
  local i = 0
  return function()
    repeat
      i = i + 1
    until not items[i] or vim.trim(items[i]) ~= ""
    return items[i]
  end
end

--- `py{311,312}-{lint,test}` -> every combination, in order.
---@return string[]
function M.expand(item)
  local pre, body, post = item:match("^([^{]*){([^{}]*)}(.*)$")
  if not pre then return { item } end
  local out = {}
  for alt in (body .. ","):gmatch("([^,]*),") do
    for _, rest in ipairs(M.expand(post)) do
      out[#out + 1] = pre .. vim.trim(alt) .. rest
    end
  end
  return out
end

function M.tasks(envs, dir, kit)
  local out = {}
  for _, env in ipairs(envs) do
    out[#out + 1] = kit.task("tox -e " .. env.name, { "tox", "-e", env.name }, dir, "tox", env.desc)
  end
  return out
end

return M
