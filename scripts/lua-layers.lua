-- scripts/lua-layers.lua — the Lua layer keeps its floors (ARCHITECTURE.md,
-- "Floors" under "The Lua layer"). Run by scripts/check-layers.sh with lua5.4:
--
--   lua5.4 scripts/lua-layers.lua [--graph]
--
-- Reads every `require("proctor…")` (and `pcall(require, "proctor…")`) in
-- lua/proctor/, comments left out, and every lookup of an extension of init's
-- registry (`proctor._ext("name")`): such a lookup loads the modules of
-- H.EXTENSIONS[name] (read from init.lua) and calls them, so it is an edge
-- to each of them like a lazy require. It checks:
--   1. no module requires (or looks up) a module on a higher floor, except
--      the edges listed in UPWARD below (an entry that no longer exists is
--      itself a failure, so the list stays true). A higher floor reaches a
--      lower one through a registration instead: proctor._extend,
--      keys.register, engine.subscribe. The one module not held to it is the
--      registry's owner, init.lua: its own _ext lookups are the public API's
--      late loads of the extensions (proctor.tasks(), open(), worker(), the
--      run filter), printed as "facade" and kept out of the graph, since every
--      extension calls proctor back (counted, init would share a cycle with
--      each of them: the figure --graph prints);
--   2. every require is at the top of its file (a line that starts at column
--      0), except the edges listed in LAZY with their reason and the modules
--      of LAZY_MODULES; a require by a computed name only in BY_NAME;
--   3. the graph of every require (top and lazy) and every _ext lookup has no
--      cycle (strongly connected set) larger than MAX_CYCLE modules;
--   4. the requires at the top of the files form no cycle at all (such a
--      cycle fails when a module loads).
-- --graph also prints every edge, marked "top", "lazy", "ext" (an _ext
-- lookup), "facade" (init's own) or "by name".
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
    "proctor.keys", -- the key maps of proctor's buffers; actions registers what a key does
    "proctor.kinds", -- targets that are not executions (a chain); tasks/chain.lua registers one
  },
  { "proctor.engine", "proctor.quit" }, -- quit: the guard the engine installs when it starts
  { "proctor", "proctor.mcp" }, -- mcp: the snippet that registers proctor-mcp (knows the engine only)
  {
    "proctor.console*",
    "proctor.list",
    "proctor.views",
    "proctor.actions",
    "proctor.commands",
  },
  { "proctor.tasks*", "proctor.worker", "proctor.acp" },
  { "proctor.health" }, -- :checkhealth looks at everything, and loads lazily
}

--- Known upward edges, "from -> to" = why it is still there. Remove an entry
--- when the edge goes; never add one without a reason the review accepts.
--- (A higher floor offers what a lower one calls through a registration:
--- proctor._extend/_ext, engine.subscribe, console.on_buffer.)
local UPWARD = {
  ["proctor.actions -> proctor.tasks"] = "the task actions (run alone, task, build, test, pick, trust, watch, unwatch) call the task layer, looked up by name (proctor._ext) when one runs; nothing of tasks/ names actions (the chain kind registers with proctor.kinds)",
}

--- The requires that stay inside a function body, "from -> to" = why. Every
--- other require is at the top of its file (a line that starts at column 0).
local LAZY = {
  ["proctor.engine -> proctor.core"] = "the C core (a shared object) is loaded on first use (engine.get): requiring proctor never loads it",
  ["proctor.tasks.chain -> proctor.tasks"] = "a sequence finds its steps by task name (tasks.find), and tasks/init.lua, which hands it a sequence spec, requires chain at its top",
  ["proctor.tasks.traits.after -> proctor.tasks"] = "after waits on other task runs by name (tasks.live_id), and tasks/init.lua requires run.lua, which loads the traits",
}

--- Modules whose requires are all lazy by design.
local LAZY_MODULES = {
  ["proctor.health"] = ":checkhealth looks at everything, and loads each part only when asked",
}

--- Modules that require a module by a computed name, = why. Such a load is
--- a registration (the loaded module registers itself with the loader) and
--- is no edge of the graph.
local BY_NAME = {
  ["proctor"] = "M._ext(name) loads an extension of a higher floor (H.EXTENSIONS) on first need",
  ["proctor.tasks.run"] = "M.traits() loads the trait files of M.TRAITS",
}

--- The largest require cycle allowed (the count of modules in a strongly
--- connected set of the graph of every require, top and lazy, and every
--- _ext lookup outside init.lua). It was 19 when the floors were first
--- counted, then 8 once the _ext lookups were counted too (console, list and
--- views reached the key maps of actions through them). The key maps moved
--- to proctor.keys, below those buffers, the window bar to console/window.lua,
--- and the kinds of targets (a chain) to proctor.kinds, below actions and
--- tasks/chain.lua: what is left is tasks ↔ tasks.chain (a sequence finds its
--- steps by name, a listed lazy require). A bound that only goes down.
local MAX_CYCLE = 2

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

local function size_of(t)
  local c = 0
  for _ in pairs(t) do
    c = c + 1
  end
  return c
end

-- init.lua's registry: extension name -> the modules _ext(name) loads.
local EXTENSIONS, registry = {}, "lua/proctor/init.lua"
do
  local inside = false
  for line in io.lines(registry) do
    if line:match("^H%.EXTENSIONS = {") then
      inside = true
    elseif inside and line:match("^}") then
      break
    elseif inside then
      local name, list = line:match("^%s*([%w_]+)%s*=%s*{(.-)}")
      if name then
        EXTENSIONS[name] = {}
        for mod in list:gmatch("[\"']([%w_.]+)[\"']") do
          table.insert(EXTENSIONS[name], mod)
        end
      end
    end
  end
end

local files = {}
local p = assert(io.popen("find lua/proctor -name '*.lua' | sort"))
for line in p:lines() do
  files[#files + 1] = line
end
p:close()

local edges, top_edges, facade, mods, bad = {}, {}, {}, {}, 0
local graph = arg[1] == "--graph"
local seen_up, seen_lazy, seen_name = {}, {}, {}
local n_top, n_lazy, n_ext = 0, 0, 0
local function fail(fmt, ...)
  print(string.format("   " .. fmt, ...))
  bad = bad + 1
end
if next(EXTENSIONS) == nil then fail("%s: no H.EXTENSIONS table found (the registry)", registry) end
-- The floor rule for an edge from -> to (`how`: "requires", "looks up … (_ext)").
local function check_floor(from, to, path, n, how)
  local ff, ft = floor_of(from), floor_of(to)
  if ff and ft and ft > ff then
    local key = from .. " -> " .. to
    if UPWARD[key] then
      seen_up[key] = true
    else
      fail("%s:%d %s %s %s, a higher floor", path, n, from, how, to)
    end
  end
end
-- Edge from -> to of kind "ext" (a lookup of extension `name`): the floor rule and the graph.
local function ext_edge(from, to, path, n, name)
  edges[from][to] = true
  if graph then print(string.format("%s -> %s (%s:%d, ext %s)", from, to, path, n, name)) end
  check_floor(from, to, path, n, "looks up (_ext)")
end
for _, path in ipairs(files) do
  local from = module_of(path)
  mods[from] = true
  if not floor_of(from) then fail("%s: module %s has no floor (add it to FLOORS)", path, from) end
  edges[from] = edges[from] or {}
  top_edges[from] = top_edges[from] or {}
  local n = 0
  for line in io.lines(path) do
    n = n + 1
    local code = line:match("^%s*%-%-") and "" or line
    -- require("m"), require'm', pcall(require, "m"); a bar expression's v:lua.require'm'
    for at, to, computed in
      (code:gsub("pcall%(require,%s*", "require(")):gmatch(
        "()require%(?%s*[\"'](proctor[%w_.]*)[\"']%s*(%.?%.?)"
      )
    do
      -- at the top: a statement at column 0, not in a one-line function, not
      -- v:lua.require'…' in a string (an expression Neovim evaluates later)
      local before = code:gsub("pcall%(require,%s*", "require("):sub(1, at - 1)
      local top = not line:match("^%s")
        and not before:match("function")
        and not before:match("v:lua%.$")
      if to:sub(-1) == "." or computed == ".." then
        seen_name[from] = true
        if not BY_NAME[from] then
          fail("%s:%d %s requires a module by a computed name (list it in BY_NAME)", path, n, from)
        end
        if graph then print(string.format("%s -> %s* (%s:%d, by name)", from, to, path, n)) end
      elseif to ~= from then
        edges[from][to] = true
        local key = from .. " -> " .. to
        if top then
          top_edges[from][to] = true
          n_top = n_top + 1
        else
          n_lazy = n_lazy + 1
        end
        if graph then
          print(string.format("%s (%s:%d, %s)", key, path, n, top and "top" or "lazy"))
        end
        check_floor(from, to, path, n, "requires")
        if not top and not LAZY_MODULES[from] then
          if LAZY[key] then
            seen_lazy[key] = true
          else
            fail(
              "%s:%d %s requires %s inside a function (move it to the top, or list it in LAZY)",
              path,
              n,
              from,
              to
            )
          end
        end
      end
    end
    -- proctor._ext("name"), M._ext("name"): the modules the registry loads for it
    for name in code:gmatch("_ext%(%s*[\"']([%w_]+)[\"']%s*%)") do
      local list = EXTENSIONS[name]
      if not list then
        fail("%s:%d _ext(%q): no such extension in %s's H.EXTENSIONS", path, n, name, registry)
      elseif from == "proctor" then
        for _, to in ipairs(list) do
          facade[to] = true
          if graph then print(string.format("%s -> %s (%s:%d, facade)", from, to, path, n)) end
        end
      else
        n_ext = n_ext + 1
        for _, to in ipairs(list) do
          ext_edge(from, to, path, n, name)
        end
      end
    end
    if code:match("_ext%(%s*[^\"'%s)]") and from ~= "proctor" then
      fail("%s:%d %s looks up an extension by a computed name", path, n, from)
    end
    if code:match("require%(%s*[%w_]") and not BY_NAME[from] then
      fail("%s:%d %s requires a module by a computed name (list it in BY_NAME)", path, n, from)
    elseif code:match("require%(%s*[%w_]") then
      seen_name[from] = true
      if graph then print(string.format("%s -> (%s:%d, by name)", from, path, n)) end
    end
  end
end
for key in pairs(UPWARD) do
  if not seen_up[key] then fail("UPWARD lists %s, an edge that is gone: remove the entry", key) end
end
for key in pairs(LAZY) do
  if not seen_lazy[key] then
    fail("LAZY lists %s, a lazy require that is gone: remove the entry", key)
  end
end
for key in pairs(BY_NAME) do
  if not seen_name[key] then
    fail("BY_NAME lists %s, which requires nothing by name: remove the entry", key)
  end
end
if bad == 0 then
  print(
    string.format(
      "PASS layers: every Lua require goes down the floors and sits at the top of its file (%d), but %d listed lazy ones; %d _ext lookups counted as edges (upward edges: %d, listed)",
      n_top,
      n_lazy,
      n_ext,
      size_of(UPWARD)
    )
  )
else
  print("FAIL layers: " .. bad .. " Lua require(s) against the floors (ARCHITECTURE.md)")
end

-- The largest strongly connected set of graph `g` (Tarjan), sorted.
local function largest_cycle(g)
  local index, low, stack, on, n, largest = {}, {}, {}, {}, 0, {}
  local function connect(v)
    n = n + 1
    index[v], low[v] = n, n
    stack[#stack + 1], on[v] = v, true
    for w in pairs(g[v] or {}) do
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
  return #largest > 1 and largest or {}
end

local largest = largest_cycle(edges)
if #largest <= MAX_CYCLE then
  print(
    string.format(
      "PASS layers: the largest Lua require cycle has %d modules (at most %d)%s",
      #largest,
      MAX_CYCLE,
      #largest > 0 and (": " .. table.concat(largest, " ")) or ""
    )
  )
else
  print(
    string.format(
      "FAIL layers: a Lua require cycle of %d modules (at most %d): %s",
      #largest,
      MAX_CYCLE,
      table.concat(largest, " ")
    )
  )
  bad = bad + 1
end

if graph then
  -- what the cycle would be if init's own lookups (the facade) were edges too
  local with = {}
  for from, tos in pairs(edges) do
    with[from] = {}
    for to in pairs(tos) do
      with[from][to] = true
    end
  end
  for to in pairs(facade) do
    with["proctor"][to] = true
  end
  local c = largest_cycle(with)
  print(
    string.format(
      "note: with init's facade lookups counted too, the largest cycle would have %d modules",
      #c
    )
  )
end

-- The requires at the top of the files run when a module loads: a cycle of
-- them fails to load ("loop or previous error loading module").
local top = largest_cycle(top_edges)
if #top == 0 then
  print("PASS layers: the requires at the top of the files form no cycle")
else
  print("FAIL layers: a cycle of requires at the top of the files: " .. table.concat(top, " "))
  bad = bad + 1
end
os.exit(bad == 0 and 0 or 1)
