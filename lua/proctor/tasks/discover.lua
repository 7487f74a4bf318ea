--- proctor.tasks.discover — what a project can run, found per directory.
---
---   discover.list(dir, { prompt = true }, function(tasks) end) --> tasks known now, complete?
---
--- Providers, in order (the first task of a name wins):
---   project  `.proctor.lua` in dir or a parent: a table of task definitions,
---            read only once trusted (|vim.secure.read()| on 0.9+, else a prompt)
---   user     setup{ tasks = { name = definition | function(dir) } }
---   make     targets from make's own database (`make -pRrq :`), never a regex
---            over the Makefile; special, pattern and "not a target" entries left out;
---            only in a trusted directory (make runs code while it reads a Makefile).
---            The default goal first, then what a user types (phony targets, targets
---            with a `target: ## text` description; in a makefile without .PHONY,
---            plain names that are no file), then file targets, marked `more`
---            (the picker keeps them behind "more").
---            A description is the `## text` of the target's line, never its recipe
---   npm      package.json scripts, with the package manager its lock file names
---            (pnpm, yarn, bun; `packageManager` first)
---   cargo    Cargo.toml: cargo build / test / run / check
---   just     justfile recipes, when `just` is installed; only in a trusted directory
---   go       go.mod: go build / test / vet ./...
---   pytest   pytest.ini, or a pytest section in pyproject.toml, tox.ini, setup.cfg
---   vscode   .vscode/tasks.json (tasks/vscode.lua); only in a trusted directory
---   deno, mise, composer, tox, taskfile: each a file of its own under
---            tasks/sources/ (`{ name, files, needs, evaluates, run }`), silent
---            when its program is not installed
---
--- Each provider's last answer says why it found what it found (M.report:
--- `:checkhealth proctor`): not installed, nothing to read, untrusted, an
--- error (with its file and line), or how many tasks.
--- Every provider but project and user looks for its files in `dir` and then
--- upward, up to the project root: the nearest directory holding a `.git`
--- (never above the home directory, nor into `/`); the nearest directory
--- holding its manifest (Makefile, package.json, Cargo.toml ...) is where its
--- tasks run (their `cwd`) and, for make and just, what must be trusted.
---
--- Reading files is quick and done at once; `make` and `just` run as proctor
--- executions (their records deleted once read) and are parsed as their
--- output arrives, bounded per tick, so the editor never waits on them.
--- Results are cached per directory and provider, keyed by the stat (mtime,
--- size, inode) of every file the provider read or would read: a changed,
--- new or deleted file means a new probe; anything else is a table lookup.
--- An answer given because something was not trusted is never cached: the
--- next use asks the trust databases again (a |:trust| counts at once).
--- Requiring this module has no side effects.

local M = {}
local H = {}

local util = require("proctor.util")
local config = require("proctor.config")
local compat = require("proctor.compat")
local uv = compat.uv
local trust = require("proctor.tasks.trust")
local task_params = require("proctor.tasks.params")

H.cache = {} -- dir -> provider name -> { tasks, stamp, pending, waiters }

---@class proctor.TaskDef
---@field name string what a user types (`make build`, `npm run lint`)
---@field cmd string|string[]
---@field cwd string
---@field source string "project" | "user" | "make" | "npm" | "cargo" | "just" | "go" | "pytest" | "vscode" | "deno" | "mise" | "composer" | "tox" | "taskfile"
---@field desc string|nil
---@field more boolean|nil a file target of make: listed last, behind "more" in the picker

--- The tasks of `dir`: what is known now, and whether that is everything.
--- `cb(tasks)` runs (on the main loop) once every provider answered: at once
--- when nothing had to be probed.
---@param dir string absolute directory
---@param opts {prompt: boolean|nil, ask_dir: boolean|nil}|nil prompt = false: never ask about
--- .proctor.lua (completion); ask_dir = false: never ask whether the directory may be probed (the
--- picker; default: as prompt)
---@param cb fun(tasks: proctor.TaskDef[])|nil
---@return proctor.TaskDef[] tasks, boolean complete
function M.list(dir, opts, cb)
  opts = { prompt = opts and opts.prompt, ask_dir = opts and opts.ask_dir }
  if opts.ask_dir == nil then opts.ask_dir = opts.prompt ~= false end
  dir = vim.fn.fnamemodify(dir, ":p"):gsub("(.)/$", "%1")
  local homes = {} -- provider name -> the directory its tasks come from
  local cfg = H.config()
  local waiting = 0
  local fire
  local function one_done()
    waiting = waiting - 1
    if waiting == 0 and fire then fire() end
  end
  for _, p in ipairs(H.providers) do
    if cfg.discover[p.name] ~= false then
      local home, files = H.where(dir, p)
      homes[p.name] = home
      local per = H.per(home)
      local e = per[p.name]
      local stamp = H.stamp(files, e and e.extra)
      local stale = not e
        or (e.stamp ~= stamp and not e.pending)
        or (p.always and not e.pending)
        or ((e.untrusted or e.partial) and not e.pending)
      if stale then
        e = e or {}
        per[p.name] = e
        e.stamp, e.pending, e.waiters = stamp, true, e.waiters or {}
        H.refresh(home, p, e, files, opts)
      end
      if e.pending then
        waiting = waiting + 1
        table.insert(e.waiters, one_done)
      end
    end
  end
  local function collect()
    local out, seen = {}, {}
    for _, p in ipairs(H.providers) do
      -- the cache may have been dropped (M.invalidate) before a scheduled answer
      local per = homes[p.name] and H.cache[homes[p.name]]
      local e = per and per[p.name]
      for _, t in ipairs(e and e.tasks or {}) do
        if not seen[t.name] then
          seen[t.name] = true
          out[#out + 1] = t
        end
      end
    end
    return out
  end
  if waiting == 0 then
    if cb then vim.schedule(function() cb(collect()) end) end
    return collect(), true
  end
  fire = function()
    if cb then cb(collect()) end
  end
  return collect(), false
end

--- The providers whose last answer for `dir` was empty because something
--- was not trusted (`{ "make" }`), in provider order, and the directory the
--- first of them needs trusted (an upward-found Makefile: its directory).
---@param dir string absolute directory
---@return string[] names, string|nil where
function M.untrusted(dir)
  dir = vim.fn.fnamemodify(dir, ":p"):gsub("(.)/$", "%1")
  local out, where = {}, nil
  for _, p in ipairs(H.providers) do
    local home = H.where(dir, p)
    local e = H.cache[home] and H.cache[home][p.name]
    if e and e.untrusted then
      out[#out + 1] = p.name
      if p.name ~= "project" then where = where or home end
    end
  end
  return out, where
end

--- Make definition `def` runnable: its source's `launch` (prompts, what is
--- known only now) answers cb(def) or cb(nil, err); at once for a source without one.
---@param def proctor.TaskDef
---@param cb fun(def: table|nil, err: string|nil)
function M.launch(def, cb)
  for _, p in ipairs(H.providers) do
    if p.name == def.source and p.launch then return p.launch(def, cb) end
  end
  return cb(def)
end

--- What each source found for `dir` when it was last asked (M.list first):
--- one entry a source, in order: { name, state, count, home, detail }, state
--- "off" (setup{ discover }), "none" (no file of it here or above; detail:
--- the files), "not_installed" (detail: the program), "untrusted" (detail:
--- the directory), "error" (detail: the message, with file and line),
--- "pending" (a probe runs), "found" (count tasks; detail: a note, such as
--- why only a part was read), "unknown" (never asked); `files`: those of
--- its files that exist (relative to `home`).
---@param dir string absolute directory
---@return {name: string, state: string, count: integer, home: string, files: string[], detail: string|nil}[]
function M.report(dir)
  dir = vim.fn.fnamemodify(dir, ":p"):gsub("(.)/$", "%1")
  local cfg = H.config()
  local out = {}
  for _, p in ipairs(H.providers) do
    local home = H.where(dir, p)
    local e = H.cache[home] and H.cache[home][p.name]
    local r = { name = p.name, home = home, count = e and e.tasks and #e.tasks or 0, files = {} }
    for _, f in ipairs(p.name ~= "user" and H.files(home, p) or {}) do
      if H.exists(f) then
        r.files[#r.files + 1] = p.name == "project" and vim.fn.fnamemodify(f, ":~")
          or f:sub(#home + 2)
      end
    end
    if cfg.discover[p.name] == false then
      r.state = "off"
    elseif not e then
      r.state = "unknown"
    elseif e.pending then
      r.state = "pending"
    elseif e.why == "error" then
      r.state, r.detail = "error", e.error
    elseif e.why == "not_installed" then
      r.state, r.detail = "not_installed", p.needs
    elseif e.why == "none" then
      r.state = "none"
      r.detail = p.name == "project" and (cfg.discover.project_file or ".proctor.lua")
        or table.concat(p.manifest or p.files or {}, ", ")
    elseif e.untrusted and r.count == 0 then
      r.state, r.detail = "untrusted", p.name == "project" and H.nearest(dir, p) or home
    else
      r.state, r.detail = "found", e.note
    end
    out[#out + 1] = r
  end
  return out
end

--- Forget what is cached (every directory, or one).
function M.invalidate(dir)
  if dir then
    H.cache[vim.fn.fnamemodify(dir, ":p"):gsub("(.)/$", "%1")] = nil
  else
    H.cache = {}
  end
end

-- Helpers ------------------------------------------------------------------------

function H.config()
  local c = config.get()
  return { discover = c.discover or {}, tasks = c.tasks or {}, defaults = c.task_defaults or {} }
end

-- The cache entries of the providers whose tasks come from `dir`.
function H.per(dir)
  local per = H.cache[dir]
  if not per then
    per = {}
    H.cache[dir] = per
  end
  return per
end

-- The directories from `dir` up to the project root: the first holding a
-- `.git`; never `/` or the home directory unless `dir` is one, never above it.
function H.levels(dir)
  local out, d = { dir }, dir
  local home = uv.os_homedir()
  while not H.exists(d .. "/.git") do
    local parent = vim.fn.fnamemodify(d, ":h")
    if d == home or parent == d or parent == "/" or parent == home then break end
    d = parent
    out[#out + 1] = d
  end
  return out
end

-- Where provider `p` takes its tasks from for `dir`, and its candidate files
-- there: the nearest level holding one of its manifests, else `dir`.
function H.where(dir, p)
  if p.name ~= "project" and p.name ~= "user" then
    for _, d in ipairs(H.levels(dir)) do
      for _, f in ipairs(p.manifest or p.files or {}) do
        if H.exists(d .. "/" .. f) then return d, H.files(d, p) end
      end
    end
  end
  return dir, H.files(dir, p)
end

-- Candidate files of provider `p` in `dir` (every one, present or not).
function H.files(dir, p)
  if p.name == "project" then
    local name = H.config().discover.project_file or ".proctor.lua"
    local out, d = {}, dir
    while true do
      out[#out + 1] = d .. "/" .. name
      local parent = vim.fn.fnamemodify(d, ":h")
      if parent == d then break end
      d = parent
    end
    return out
  end
  local out = {}
  for i, f in ipairs(p.files or {}) do
    out[i] = dir .. "/" .. f
  end
  return out
end

-- The nearest of provider `p`'s files that exists (the project file found upward).
function H.nearest(dir, p)
  for _, f in ipairs(H.files(dir, p)) do
    if H.exists(f) then return f end
  end
  return nil
end

-- One string that changes when any of the files changes, appears or goes.
function H.stamp(files, extra)
  local parts = {}
  local function add(f)
    local st = uv.fs_stat(f)
    parts[#parts + 1] = st
        and ("%d.%d:%d:%d"):format(st.mtime.sec, st.mtime.nsec or 0, st.size, st.ino)
      or "-"
  end
  for _, f in ipairs(files) do
    add(f)
  end
  for _, f in ipairs(extra or {}) do
    add(f)
  end
  return table.concat(parts, "|")
end

function H.exists(f) return uv.fs_stat(f) ~= nil end

function H.read(f)
  local fd = io.open(f, "rb")
  if not fd then return nil end
  local s = fd:read("*a")
  fd:close()
  return s
end

-- Run provider `p` for `dir` and store its answer in cache entry `e`.
function H.refresh(dir, p, e, files, opts)
  local present = {}
  for _, f in ipairs(files) do
    if H.exists(f) then present[#present + 1] = f end
  end
  local function done(tasks, extra)
    e.tasks = tasks or {}
    if extra then
      e.extra = extra
      e.stamp = H.stamp(files, extra)
    end
    e.pending = false
    local w = e.waiters
    e.waiters = {}
    for _, fn in ipairs(w) do
      fn()
    end
  end
  e.name, e.untrusted, e.partial, e.why, e.note, e.error = p.name, false, false, nil, nil, nil
  if #present == 0 and p.name ~= "user" then
    e.why = "none"
    return done({})
  end
  if p.needs and vim.fn.executable(p.needs) == 0 then
    e.why = "not_installed"
    return done({})
  end
  -- a probe that evaluates the project's files runs only in a trusted directory
  if
    p.evaluates
    and not trust.dir(dir, { prompt = opts.ask_dir, why = p.evaluates, intro = p.intro })
  then
    e.untrusted = true
    return done({})
  end
  local ok, err = pcall(p.run, dir, present, done, e, opts, H.kit)
  if not ok then H.kit.fail(e, err, done) end
end

-- What a provider in a file of its own (tasks/sources/*.lua) is given: its
-- run(dir, present, done, e, opts, kit) gets this as `kit`.
H.kit = {
  read = function(f) return H.read(f) end,
  exists = function(f) return H.exists(f) end,
  task = function(...) return H.task(...) end,
  probe = function(...) return H.probe(...) end,
  matcher = function(name) return H.matcher(name) end,
  -- may probes evaluate the files of `dir` (asks as opts.ask_dir says)?
  trusted = function(dir, opts, why) return trust.dir(dir, { prompt = opts.ask_dir, why = why }) end,
  -- a provider failed (a parse error "FILE:LINE: what"): said once, kept for :checkhealth
  fail = function(e, err, done)
    e.why, e.error = "error", tostring(err)
    util.notify(("tasks: %s: %s"):format(e.name, tostring(err)))
    done({})
  end,
  -- where `"name":` first appears in JSON text `src` (to keep a file's order)
  order = function(src, name) return src:find('"' .. vim.pesc(name) .. '"%s*:') or math.huge end,
  -- tasks with `order`, sorted by it (then by name), without it
  sorted = function(list)
    table.sort(list, function(a, b)
      if a.order ~= b.order then return a.order < b.order end
      return a.name < b.name
    end)
    for _, t in ipairs(list) do
      t.order = nil
    end
    return list
  end,
}

-- A task definition from a provider.
function H.task(name, cmd, dir, source, desc, extra)
  local t = { name = name, cmd = cmd, cwd = dir, source = source, desc = desc }
  for k, v in pairs(extra or {}) do
    t[k] = v
  end
  return t
end

-- The matcher a discovered task gets by default (setup{ task_defaults = { diagnostics } }).
function H.matcher(name)
  if H.config().defaults.diagnostics == false then return nil end
  return name
end

-- Run `cmd` in `dir` (a probe: only in a trusted directory, see H.discover)
-- and hand its stdout, line by line, to on_line; on_end(ok) when it ended.
-- A probe is no proctor execution: it takes no id (the user's first run is #1)
-- and leaves no record or history. Bounded: PROBE_TIMEOUT_MS, then it is
-- stopped; past PROBE_MAX_BYTES of stdout it is stopped (what came is kept).
H.PROBE_TIMEOUT_MS = 20000
H.PROBE_MAX_BYTES = 8 * 1024 * 1024
function H.probe(dir, label, cmd, on_line, on_end)
  local partial, bytes, stopped, job = "", 0, false, nil
  local timer = uv.new_timer()
  local function stop()
    stopped = true
    pcall(vim.fn.jobstop, job)
  end
  local function lines(data)
    if stopped then return end
    data[1] = partial .. data[1]
    partial = table.remove(data)
    for _, l in ipairs(data) do
      bytes = bytes + #l + 1
      if bytes > H.PROBE_MAX_BYTES then return stop() end
      on_line(l)
    end
    if #partial > H.PROBE_MAX_BYTES then stop() end
  end
  job = vim.fn.jobstart(cmd, {
    cwd = dir,
    env = { LC_ALL = "C" },
    stdin = "null",
    on_stdout = function(_, data) lines(data) end,
    on_exit = function(_, code)
      timer:stop()
      timer:close()
      on_end(code == 0 and not stopped)
    end,
  })
  if job <= 0 then
    timer:close()
    error(("%s: cannot run %s"):format(label, tostring(cmd[1])), 0)
  end
  timer:start(H.PROBE_TIMEOUT_MS, 0, vim.schedule_wrap(stop))
  return job
end

H.providers = {}

H.providers[#H.providers + 1] = {
  name = "project",
  run = function(dir, present, done, e, opts)
    local file = present[1] -- the nearest
    local src, why = trust.read(file, { prompt = opts.prompt ~= false })
    e.untrusted = src == nil and why ~= "unreadable"
    if not src then return done({}) end
    local chunk, perr = loadstring(src, "@" .. file)
    if not chunk then error(perr, 0) end
    local ok, defs = pcall(chunk)
    if not ok then error(defs, 0) end
    local base = vim.fn.fnamemodify(file, ":h")
    done(H.definitions(defs, base, "project", file))
  end,
}

H.providers[#H.providers + 1] = {
  name = "user",
  always = true, -- setup() may have changed them: no file to stat, and cheap
  run = function(dir, _, done)
    local defs = H.config().tasks
    local out = {}
    for name, def in pairs(defs) do
      if type(def) == "function" then
        local ok, got = pcall(def, dir)
        if not ok then error(("task '%s': %s"):format(tostring(name), tostring(got)), 0) end
        def = got
      end
      if def ~= nil then out[name] = def end
    end
    done(H.definitions(out, dir, "user", "setup{ tasks }"))
  end,
}

-- Task definitions from a table: name = def, or a list of defs with `name`.
function H.definitions(defs, base, source, where)
  if type(defs) ~= "table" then
    error(("%s must return a table of tasks, got %s"):format(where, type(defs)), 0)
  end
  local out = {}
  local names = {}
  for k, def in pairs(defs) do
    if type(def) ~= "table" then
      error(("%s: task %s must be a table"):format(where, tostring(k)), 0)
    end
    local name = type(k) == "string" and k or def.name
    if type(name) ~= "string" or name == "" then
      error(("%s: a task without a name"):format(where), 0)
    end
    local t = vim.deepcopy(def)
    t.name, t.source = name, source
    if t.params ~= nil then
      local perr = task_params.declare(t)
      if perr then error(("%s: task '%s': %s"):format(where, name, perr), 0) end
    end
    if type(t.cwd) == "string" and t.params and t.cwd:find("${param:", 1, true) then
      -- substituted at launch (tasks/params.lua): only made absolute here
      if not t.cwd:find("^[/~]") then t.cwd = base .. "/" .. t.cwd end
    elseif type(t.cwd) == "string" then
      local c = vim.fn.expand(t.cwd)
      if c:sub(1, 1) ~= "/" then c = base .. "/" .. c end
      t.cwd = (vim.fn.fnamemodify(c, ":p"):gsub("(.)/$", "%1"))
    else
      t.cwd = base
    end
    if t.cmd == nil and t.sequence == nil then
      error(("%s: task '%s' has no cmd"):format(where, name), 0)
    end
    out[#out + 1] = t
    names[t] = type(k) == "number" and k or math.huge
  end
  table.sort(out, function(a, b)
    if names[a] ~= names[b] then return names[a] < names[b] end
    return a.name < b.name
  end)
  return out
end

H.providers[#H.providers + 1] = require("proctor.tasks.vscode").provider

H.providers[#H.providers + 1] = {
  name = "make",
  files = { "GNUmakefile", "makefile", "Makefile" },
  needs = "make",
  evaluates = "make -pRrq :",
  run = function(dir, _, done)
    local st = { section = nil, targets = {}, makefiles = nil, goal = nil }
    H.probe(
      dir,
      "proctor: make targets",
      { "sh", "-c", "make -pRrq : 2>/dev/null; exit 0" },
      function(l) H.make_line(st, l) end,
      function()
        local files = {}
        for _, f in ipairs(st.makefiles or {}) do
          files[#files + 1] = f:sub(1, 1) == "/" and f or (dir .. "/" .. f)
        end
        done(H.make_tasks(st, dir), files)
      end
    )
  end,
}

-- One line of make's database (-p), read as a little state machine.
function H.make_line(st, l)
  if l:sub(1, 1) == "#" then
    if l == "# Files" then
      st.section = "files"
    elseif l:find("^# Finished Make data base") or l:find("^# files hash%-table stats") then
      st.section = nil
    elseif st.section == "files" then
      if l == "# Not a target:" then
        st.not_target = true
      elseif st.cur and l:find("^#  Phony target") then
        st.cur.phony = true
      elseif st.cur then
        local file, line = l:match("^#  recipe to execute %(from '(.-)', line (%d+)%):")
        if file then
          st.cur.file, st.cur.line = file, tonumber(line)
        end
      end
    end
    return
  end
  if st.section ~= "files" then
    local v = l:match("^MAKEFILE_LIST :?= (.*)$")
    if v then st.makefiles = vim.split(vim.trim(v), "%s+", { trimempty = true }) end
    local g = l:match("^%.DEFAULT_GOAL :?= (.*)$")
    if g then st.goal = vim.trim(g) end
    return
  end
  if l:sub(1, 1) == "\t" then return end -- a recipe: never shown
  if l == "" then
    st.cur = nil
    st.not_target = false
    return
  end
  local name, rest = l:match("^([^%s#:=][^:=]*):(.*)$")
  if not name or rest:find("^%s*[%w_]+%s*[:+?!]?=") or rest:sub(1, 1) == "=" then return end
  name = vim.trim(name)
  if st.not_target then
    st.not_target = false
    st.cur = nil
    return
  end
  if name:sub(1, 1) == "." or name:find("%", 1, true) or name:find("%s") then
    st.cur = nil
    return
  end
  st.cur = { name = name }
  st.targets[#st.targets + 1] = st.cur
end

-- The default goal first, then what a user types (phony, described, a
-- plain name that is no file), then file targets; each group in the order of
-- the makefiles, then by name.
function H.make_tasks(st, dir)
  local order = {}
  for i, f in ipairs(st.makefiles or {}) do
    order[f] = i
  end
  local docs = H.make_docs(st.makefiles or {}, dir)
  -- A makefile that declares .PHONY says what is no file: the rest is. One
  -- that declares none: a plain name that is no file is what a user types.
  local declares = false
  for _, t in ipairs(st.targets) do
    declares = declares or t.phony == true
  end
  for _, t in ipairs(st.targets) do
    t.desc = docs[t.name]
    t.more = not (
      t.name == st.goal
      or t.phony
      or t.desc
      or (not declares and not t.name:find("[/.]") and not H.exists(dir .. "/" .. t.name))
    )
  end
  table.sort(st.targets, function(a, b)
    if (a.name == st.goal) ~= (b.name == st.goal) then return a.name == st.goal end
    if a.more ~= b.more then return not a.more end
    local fa, fb = a.file and order[a.file] or math.huge, b.file and order[b.file] or math.huge
    if fa ~= fb then return fa < fb end
    if (a.line or math.huge) ~= (b.line or math.huge) then
      return (a.line or math.huge) < (b.line or math.huge)
    end
    return a.name < b.name
  end)
  local out = {}
  for _, t in ipairs(st.targets) do
    out[#out + 1] = H.task(
      "make " .. t.name,
      { "make", t.name },
      dir,
      "make",
      t.desc,
      { diagnostics = H.matcher("gcc"), more = t.more or nil }
    )
  end
  return out
end

--- The `target: ## text` descriptions of the makefiles make read (`files`:
--- MAKEFILE_LIST, relative to `dir`): target name -> text. Only read, never
--- evaluated; a line of several targets describes each.
---@return table<string, string>
function H.make_docs(files, dir)
  local docs = {}
  for _, f in ipairs(files) do
    local text = H.read(f:sub(1, 1) == "/" and f or (dir .. "/" .. f)) or ""
    for line in text:gmatch("[^\n]+") do
      local names, rest = line:match("^([^%s#:=][^#:=]*):([^=].*)$")
      local doc = rest and rest:match("##%s*(.-)%s*$")
      if doc and doc ~= "" then
        for name in names:gmatch("%S+") do
          docs[name] = docs[name] or doc
        end
      end
    end
  end
  return docs
end

H.providers[#H.providers + 1] = {
  name = "npm",
  manifest = { "package.json" },
  files = {
    "package.json",
    "package-lock.json",
    "npm-shrinkwrap.json",
    "pnpm-lock.yaml",
    "yarn.lock",
    "bun.lockb",
    "bun.lock",
  },
  run = function(dir, present, done)
    if not vim.tbl_contains(present, dir .. "/package.json") then return done({}) end
    local text = H.read(dir .. "/package.json") or ""
    local ok, pkg = pcall(vim.json.decode, text)
    if not ok or type(pkg) ~= "table" then error("package.json: not valid JSON", 0) end
    local pm = type(pkg.packageManager) == "string" and pkg.packageManager:match("^(%a+)") or nil
    if not pm then
      for _, l in ipairs({
        { "pnpm-lock.yaml", "pnpm" },
        { "yarn.lock", "yarn" },
        { "bun.lockb", "bun" },
        { "bun.lock", "bun" },
        { "package-lock.json", "npm" },
      }) do
        if not pm and H.exists(dir .. "/" .. l[1]) then pm = l[2] end
      end
    end
    pm = pm or "npm"
    local out = {}
    local scripts = type(pkg.scripts) == "table" and pkg.scripts or {}
    for name, script in pairs(scripts) do
      if type(name) == "string" and type(script) == "string" then
        out[#out + 1] = H.task(pm .. " run " .. name, { pm, "run", name }, dir, "npm", script)
        -- keep package.json's order (JSON objects lose it in Lua)
        out[#out].order = text:find('"' .. vim.pesc(name) .. '"%s*:') or math.huge
      end
    end
    table.sort(out, function(a, b) return a.order < b.order end)
    for _, t in ipairs(out) do
      t.order = nil
    end
    done(out)
  end,
}

H.providers[#H.providers + 1] = {
  name = "cargo",
  files = { "Cargo.toml" },
  run = function(dir, _, done)
    local out = {}
    for _, sub in ipairs({ "build", "test", "run", "check" }) do
      out[#out + 1] = H.task(
        "cargo " .. sub,
        { "cargo", sub },
        dir,
        "cargo",
        nil,
        { diagnostics = H.matcher("cargo") }
      )
    end
    done(out)
  end,
}

H.providers[#H.providers + 1] = {
  name = "just",
  files = { "justfile", "Justfile", "JUSTFILE", ".justfile" },
  needs = "just",
  evaluates = "just --dump",
  run = function(dir, _, done)
    local lines = {}
    H.probe(dir, "proctor: just recipes", {
      "sh",
      "-c",
      'if out=$(just --dump --dump-format json 2>/dev/null); then echo "#json"; printf "%s\\n" "$out"; '
        .. 'else echo "#summary"; just --summary 2>/dev/null; fi; exit 0',
    }, function(l) lines[#lines + 1] = l end, function() done(H.just_tasks(lines, dir)) end)
  end,
}

function H.just_tasks(lines, dir)
  local out = {}
  if lines[1] == "#json" then
    local ok, dump = pcall(vim.json.decode, table.concat(lines, "\n", 2))
    local recipes = ok and type(dump) == "table" and dump.recipes or {}
    for name, r in pairs(recipes) do
      if type(r) == "table" and not r.private and not name:find("^_") then
        local params = {}
        for _, p in ipairs(type(r.parameters) == "table" and r.parameters or {}) do
          params[#params + 1] = p.name
        end
        local desc = type(r.doc) == "string" and r.doc or nil
        if #params > 0 then
          desc = (desc and (desc .. " ") or "") .. "(" .. table.concat(params, " ") .. ")"
        end
        out[#out + 1] = H.task("just " .. name, { "just", name }, dir, "just", desc)
      end
    end
    table.sort(out, function(a, b) return a.name < b.name end)
  else
    for _, l in ipairs(lines) do
      if l ~= "#summary" then
        for name in l:gmatch("%S+") do
          if not name:find("^_") then
            out[#out + 1] = H.task("just " .. name, { "just", name }, dir, "just")
          end
        end
      end
    end
  end
  return out
end

H.providers[#H.providers + 1] = {
  name = "go",
  files = { "go.mod" },
  run = function(dir, _, done)
    local out = {}
    for _, sub in ipairs({ "build", "test", "vet" }) do
      out[#out + 1] = H.task(
        "go " .. sub .. " ./...",
        { "go", sub, "./..." },
        dir,
        "go",
        nil,
        { diagnostics = H.matcher("go") }
      )
    end
    done(out)
  end,
}

H.providers[#H.providers + 1] = {
  name = "pytest",
  files = { "pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg" },
  run = function(dir, present, done)
    local says = false
    for _, f in ipairs(present) do
      local base = vim.fn.fnamemodify(f, ":t")
      local text = base ~= "pytest.ini" and (H.read(f) or "") or ""
      if
        base == "pytest.ini"
        or (base == "pyproject.toml" and text:find("%[tool%.pytest"))
        or (base == "tox.ini" and text:find("%[pytest%]"))
        or (base == "setup.cfg" and text:find("%[tool:pytest%]"))
      then
        says = true
      end
    end
    if not says then return done({}) end
    local cmd = vim.fn.executable("pytest") == 1 and { "pytest" } or { "python3", "-m", "pytest" }
    done({ H.task("pytest", cmd, dir, "pytest", nil, { diagnostics = H.matcher("pytest") }) })
  end,
}

-- The sources in files of their own, after the built-in ones.
-- (named one by one, so the layer check sees each edge)
H.providers[#H.providers + 1] = require("proctor.tasks.sources.deno")
H.providers[#H.providers + 1] = require("proctor.tasks.sources.mise")
H.providers[#H.providers + 1] = require("proctor.tasks.sources.composer")
H.providers[#H.providers + 1] = require("proctor.tasks.sources.tox")
H.providers[#H.providers + 1] = require("proctor.tasks.sources.taskfile")

M._H = H

return M
