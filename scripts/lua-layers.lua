-- scripts/lua-layers.lua — the Lua layer keeps its floors (ARCHITECTURE.md,
-- "The Lua layer's floors"). Run by scripts/check-layers.sh with lua5.4:
--
--   lua5.4 scripts/lua-layers.lua [--graph]
--
-- Reads every `require("proctor…")` in lua/proctor/ and checks:
--   1. no module requires a module on a higher floor, except the edges listed
--      in UPWARD below (each one a known debt with its reason; the list only
--      shrinks, and an entry that no longer exists is itself a failure, so
--      the list stays true);
--   2. the require graph has no cycle (strongly connected set) larger than
--      MAX_CYCLE modules.
-- --graph also prints every edge, marked "top" (a require at the top of the
-- file) or "lazy" (inside a function body).
-- Prints PASS/FAIL lines like every test tier; exits non-zero on a failure.

--- The floors, lowest first. A module may require its own floor and below.
local FLOORS = {
  -- tasks.matchers: the built-in problem matchers, a pure table (no require)
  -- targets: what a setup{ targets } entry becomes (io.popen only; no require)
  {
    "proctor.compat",
    "proctor.util",
    "proctor.config",
    "proctor.types",
    "proctor.tasks.matchers",
    "proctor.targets",
  },
  { "proctor.engine", "proctor.quit" }, -- quit: the guard the engine installs when it starts
  { "proctor" },
  {
    "proctor.console*",
    "proctor.list",
    "proctor.views",
    "proctor.actions",
    "proctor.commands",
  },
  { "proctor.tasks*", "proctor.worker", "proctor.acp", "proctor.mcp" },
  { "proctor.health" }, -- :checkhealth looks at everything, and loads lazily
}

--- Known upward edges, "from -> to" = why it is still there. Remove an entry
--- when the edge goes; never add one without a reason the review accepts.
local UPWARD = {
  ["proctor -> proctor.tasks"] = "run()/cancel()/rerun() call the task layer's hooks (issue 25: one extension point)",
  ["proctor -> proctor.console"] = "run() opens the console (issue 25: a registration list)",
  ["proctor -> proctor.worker"] = "run{ worker } is answered by the worker module",
  ["proctor.actions -> proctor.tasks"] = "the task actions (pick, task, trust, watch) live in actions.lua",
  ["proctor.actions -> proctor.mcp"] = "the mcp action lives in actions.lua",
  ["proctor.config -> proctor.actions"] = "a key map's value is validated against the action names",
}

--- The largest require cycle allowed (the count of modules in it); the
--- target is 3. It goes down as the upward edges above are cut (cutting
--- util -> engine and engine -> quit took it from 19 to 16; splitting tasks/
--- into run.lua and traits put three new files into the same cycle: 18).
local MAX_CYCLE = 18

local function floor_of(mod)
  for i, names in ipairs(FLOORS) do
    for _, n in ipairs(names) do
      if n == mod or (n:sub(-1) == "*" and mod:sub(1, #n - 1) == n:sub(1, -2)) then return i end
    end
  end
  return nil
end

local function module_of(path)
  local m = path:gsub("^lua/", ""):gsub("%.lua$", ""):gsub("/", ".")
  return (m:gsub("%.init$", ""))
end

local files = {}
local p = assert(io.popen("find lua/proctor -name '*.lua' | sort"))
for line in p:lines() do
  files[#files + 1] = line
end
p:close()

local edges, mods, bad = {}, {}, 0
local graph = arg[1] == "--graph"
local seen_up = {}
for _, path in ipairs(files) do
  local from = module_of(path)
  mods[from] = true
  edges[from] = edges[from] or {}
  local n = 0
  for line in io.lines(path) do
    n = n + 1
    for to in line:gmatch("require%(?%s*[\"'](proctor[%w_.]*)[\"']") do
      if to ~= from then
        edges[from][to] = true
        if graph then
          print(
            string.format(
              "%s -> %s (%s:%d, %s)",
              from,
              to,
              path,
              n,
              line:match("^local ") and "top" or "lazy"
            )
          )
        end
        local ff, ft = floor_of(from), floor_of(to)
        if not ff then
          print(string.format("   %s: module %s has no floor (add it to FLOORS)", path, from))
          bad = bad + 1
        elseif ft and ft > ff then
          local key = from .. " -> " .. to
          if UPWARD[key] then
            seen_up[key] = true
          else
            print(string.format("   %s:%d %s requires %s, a higher floor", path, n, from, to))
            bad = bad + 1
          end
        end
      end
    end
  end
end
for key in pairs(UPWARD) do
  if not seen_up[key] then
    print("   UPWARD lists " .. key .. ", an edge that is gone: remove the entry")
    bad = bad + 1
  end
end
if bad == 0 then
  print("PASS layers: every Lua require goes down the floors (known upward edges: " .. (function()
    local c = 0
    for _ in pairs(UPWARD) do
      c = c + 1
    end
    return c
  end)() .. ")")
else
  print("FAIL layers: " .. bad .. " Lua require(s) against the floors (ARCHITECTURE.md)")
end

-- Tarjan's strongly connected sets over the modules.
local index, low, stack, on, count, largest = {}, {}, {}, {}, 0, {}
local function connect(v)
  count = count + 1
  index[v], low[v] = count, count
  stack[#stack + 1], on[v] = v, true
  for w in pairs(edges[v] or {}) do
    if mods[w] then
      if not index[w] then
        connect(w)
        low[v] = math.min(low[v], low[w])
      elseif on[w] then
        low[v] = math.min(low[v], index[w])
      end
    end
  end
  if low[v] == index[v] then
    local set = {}
    repeat
      local w = table.remove(stack)
      on[w] = nil
      set[#set + 1] = w
    until w == v
    if #set > #largest then largest = set end
  end
end
local names = {}
for m in pairs(mods) do
  names[#names + 1] = m
end
table.sort(names)
for _, m in ipairs(names) do
  if not index[m] then connect(m) end
end
table.sort(largest)
local size = #largest > 1 and #largest or 0
if size <= MAX_CYCLE then
  print(
    string.format(
      "PASS layers: the largest Lua require cycle has %d modules (at most %d)",
      size,
      MAX_CYCLE
    )
  )
else
  print(
    string.format(
      "FAIL layers: a Lua require cycle of %d modules (at most %d): %s",
      size,
      MAX_CYCLE,
      table.concat(largest, " ")
    )
  )
  bad = bad + 1
end
os.exit(bad == 0 and 0 or 1)
