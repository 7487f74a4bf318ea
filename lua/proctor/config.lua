--- proctor.config — every option, once: its type, default, check and description.
---
--- `M.schema` is the one description of the configuration. From it come the
--- defaults (`M.defaults`), the validation of setup() (`M.validate`), the
--- |proctor-config| block and the key tables of doc/proctor.txt, and the
--- proctor.Config classes of lua/proctor/types.lua (`make doc` writes them
--- with scripts/gendoc.lua; a test fails when they differ from the schema).
--- A new option is one entry here.
---
---   schema entry ──► defaults ──► M.get()          (merged with setup()'s options)
---        │      └──► validate ──► setup() errors    ("option 'console.size' must be …")
---        └──► scripts/gendoc.lua ──► doc/proctor.txt, types.lua
---
--- Requiring this module has no side effects.

local M = {}
local H = {}

local targets = require("proctor.targets")

---@class proctor.ConfigEntry
---@field key string dotted path, e.g. "console.size"; a table's own entry comes before its keys
---@field type string|nil "number", "string", "boolean", "table", "function", or several joined by
---   "|" ("number|nil"); nil: a table of options (a section)
---@field default any the default (nil allowed when the type has "nil")
---@field show string|nil how the help writes the default (default: the value itself)
---@field check (fun(v: any): boolean, string|nil)|nil further check of a value of the right type;
---   returns ok and, when not ok, what the value must be ("a positive integer")
---@field map (fun(k: any, v: any): boolean, string|nil)|nil the table is a map of any keys
---   (merged key by key over the default): check of one key and value
---@field description string what the help says (short; the help wraps it)
---@field luacats string|nil the type lua/proctor/types.lua gives it (default: from `type`)

-- Checks ---------------------------------------------------------------------------

H.what = setmetatable({}, { __mode = "k" }) -- check -> what a value must be ("a positive integer")
H.values = setmetatable({}, { __mode = "k" }) -- check of an enum -> its values

-- An integer of at least `min` (and at most `max`).
function H.int(min, max)
  local what = min == 1 and "a positive integer" or ("an integer >= " .. min)
  local function check(v)
    if v ~= math.floor(v) or v < min then return false, what end
    if max and v > max then return false, "at most " .. max end
    return true
  end
  H.what[check] = what
  return check
end

-- One of `values`.
function H.enum(values)
  local what = "one of " .. table.concat(values, ", ")
  local function check(v)
    for _, x in ipairs(values) do
      if v == x then return true end
    end
    return false, what
  end
  H.what[check] = what
  H.values[check] = values
  return check
end

-- setup{ targets }: name = { ssh = host | podman = container, opts, shepherd, cwd } or
-- { command = argv }.
function H.targets(v) return targets.check(v) end

-- setup{ tasks }: name = definition (a table with cmd or sequence) or
-- function(dir) returning one; the whole table is checked here, its task
-- options when a task runs (proctor.tasks).
function H.tasks(v)
  local what = "a table of name = task definition (a table with cmd) or function(dir)"
  for k, def in pairs(v) do
    local name = type(k) == "string" and string.format("%q", k) or ("[" .. tostring(k) .. "]")
    if type(def) == "table" then
      if type(k) ~= "string" and type(def.name) ~= "string" then
        return false, what .. ": entry " .. name .. " has no name"
      end
      if def.cmd == nil and def.sequence == nil then
        return false, what .. ": " .. name .. " has no cmd"
      end
    elseif type(def) ~= "function" then
      return false, what .. ": " .. name .. " is a " .. type(def)
    end
  end
  return true
end
H.what[H.tasks] = "a table of name = task definition (a table with cmd) or function(dir)"

-- A key map: lhs (a non-empty string) = the name of an action, a function, or false.
function H.keymap(lhs, rhs)
  if type(lhs) ~= "string" or lhs == "" then return false, "a table of key = action" end
  if rhs == false or type(rhs) == "function" then return true end
  if type(rhs) == "string" and H.action_set[rhs] then return true end
  return false, "an action name (" .. table.concat(M.ACTIONS, ", ") .. "), a function or false"
end

--- The name of every action (|proctor-actions|), in the order the help and the
--- key lists show them. Key maps are checked against it here, below the module
--- that defines the actions (actions.lua checks at load that the two agree).
M.ACTIONS = {
  "run",
  "make",
  "task",
  "build",
  "test",
  "pick",
  "trust",
  "watch",
  "list",
  "open",
  "open_split",
  "open_vsplit",
  "open_tab",
  "open_float",
  "toggle",
  "input",
  "cancel",
  "kill",
  "delete",
  "purge",
  "rerun",
  "text",
  "qf",
  "info",
  "mcp",
  "filter",
  "refresh",
  "help",
  "close",
  "unwatch",
}
H.action_set = {}
for _, name in ipairs(M.ACTIONS) do
  H.action_set[name] = true
end

--stylua: ignore start
--- The options, in the order the help shows them.
---@type proctor.ConfigEntry[]
M.schema = {
  { key = "engine", description = "options of the engine, read when it starts (the first use)" },
  { key = "engine.output_limit", type = "number", default = 8 * 1024 * 1024, show = "8 * 1024 * 1024",
    check = H.int(1), description = "bytes kept per execution and stream (ring buffer)" },
  { key = "engine.output_memory", type = "number|nil", default = nil, show = "nil",
    check = H.int(1), description = "of those, the newest bytes kept in memory; older ones go to a "
      .. "spill file in spill_dir (nil: output_max_bytes, what one poll hands a console, or 256 KiB "
      .. "when that is 0; >= output_limit: no file) (|proctor-limits|)" },
  { key = "engine.spill_dir", type = "string|nil", default = nil,
    description = "where spill files are made, on disk (nil: $XDG_CACHE_HOME/proctor, else "
      .. "~/.cache/proctor)" },
  { key = "engine.history_limit", type = "number", default = 1000, check = H.int(0),
    description = "finished executions kept (this editor's and the history's); 0: every one" },
  { key = "engine.max_running", type = "number|nil", default = nil, check = H.int(1),
    description = "at most this many run at once, the rest wait \"queued\" (nil: no cap)" },
  { key = "engine.max_queued", type = "number", default = 10000, check = H.int(1),
    description = "executions of this editor queued or held at once; more starts fail with EBUSY" },
  { key = "engine.ended_output_max", type = "number", default = 64 * 1024 * 1024, show = "64 * 1024 * 1024",
    check = H.int(1), description = "output bytes kept by finished executions together; past it the "
      .. "oldest keep only their last 64 KiB a stream" },
  { key = "engine.kill_grace_ms", type = "number", default = 2000, check = H.int(0),
    description = "cancel: SIGTERM (a PTY: SIGHUP first), SIGKILL after this; also bounds the wait when "
      .. "Neovim exits" },
  { key = "engine.drain_ms", type = "number", default = 500, check = H.int(0),
    description = "after exit, how long output of background grandchildren is awaited" },
  { key = "engine.secret_timeout_ms", type = "number", default = 10000, check = H.int(1),
    description = "secrets read from a store (a keyring, a command) must arrive within this" },
  { key = "engine.target_idle_ms", type = "number", default = 300000, check = H.int(1, 86400000),
    description = "a target's transport (ssh) with no execution on it is closed after this; the next "
      .. "run opens it again (|proctor-targets|)" },
  { key = "engine.shepherd", type = "string|nil", default = nil,
    description = "path of proctor-shepherd (nil: next to core.so)" },
  { key = "engine.shepherd_early", type = "boolean", default = true,
    description = "the shepherd starts with the engine (its first use), not at the first run: "
      .. "that run starts sooner" },

  { key = "run", description = "defaults of proctor.run() (a spec may give each)" },
  { key = "run.pty", type = "boolean", default = false,
    description = "pseudo-terminal (one \"pty\" stream) or pipes" },
  { key = "run.stdin", type = "boolean", default = true, description = "pipe executions get a stdin pipe" },
  { key = "run.cols", type = "number", default = 120, check = H.int(1),
    description = "pty size until a console window sets it" },
  { key = "run.rows", type = "number", default = 30, check = H.int(1), description = "" },
  { key = "run.timeout_ms", type = "number|nil", default = nil, check = H.int(1),
    description = "cancel after this long (nil: never)" },
  { key = "run.owner", type = "string", default = "nvim", description = "" },

  { key = "command", description = "defaults of :Proctor run" },
  { key = "command.pty", type = "boolean", default = true,
    description = "programs see a terminal (colours, prompts)" },
  { key = "command.open", type = "boolean", default = true, description = "open the console at once" },

  { key = "console", description = "consoles (|proctor-console|)" },
  { key = "console.open", type = "string", default = "split",
    check = H.enum({ "split", "vsplit", "tab", "float", "current" }),
    description = "\"split\" | \"vsplit\" | \"tab\" | \"float\" | \"current\"" },
  { key = "console.size", type = "number", default = 15, check = H.int(1),
    description = "split height / vsplit width" },
  { key = "console.enter", type = "boolean|nil", default = nil,
    description = "move the cursor into the console (nil: when it is opened to be looked at, :Proctor open, "
      .. "toggle, the list; a run's only in a tab, a float or the current window: :Proctor run in a split "
      .. "leaves the cursor in the source buffer)" },
  { key = "console.start_insert", type = "boolean|nil", default = nil,
    description = "Terminal mode when the cursor goes into the console of a live execution, so typing "
      .. "reaches it at once (nil: for a PTY console)" },
  { key = "console.reuse", type = "boolean", default = true,
    description = "one console window per tab: a new console (a split) takes over the window of the last one "
      .. "(the old console stays in the list)" },
  { key = "console.bar", type = "boolean", default = true,
    description = "winbar (0.8+) or statusline with id, label, state, elapsed" },
  { key = "console.final_line", type = "boolean", default = true,
    description = "\"[proctor] failed: exit 2 after 3.2 s\" at the end" },
  -- capped: one nvim_chan_send of a few MiB overflows libvterm's stack in Neovim 0.7 (#16040)
  { key = "console.bytes_per_tick", type = "number", default = 16384, check = H.int(1, 1048576),
    description = "bytes given to the terminal per tick (at most 1 MiB: bigger sends crash Neovim "
      .. "0.7's terminal emulator)" },
  { key = "console.backlog_limit", type = "number", default = 262144, check = H.int(1),
    description = "more than this waiting: skip to the tail" },
  { key = "console.tail_bytes", type = "number", default = 65536, check = H.int(1),
    description = "... keeping this many bytes" },

  { key = "history", description = "|proctor-history|" },
  { key = "history.enabled", type = "boolean", default = true,
    description = "keep finished executions (and the last output_bytes of each stream) in a file, "
      .. "loaded again on the next start; shared by every editor (|proctor-history-editors|)" },
  { key = "history.file", type = "string|nil", default = nil,
    description = "nil: stdpath(\"state\")/proctor/history.mpk on every Neovim (0.7: the same "
      .. "$XDG_STATE_HOME/nvim); a file in stdpath(\"data\") is moved there" },
  { key = "history.output_bytes", type = "number", default = 65536, check = H.int(1),
    description = "last bytes of each stream kept per execution" },

  { key = "audit", description = "|proctor-audit|" },
  { key = "audit.file", type = "string|nil", default = nil,
    description = "one JSON line per lifecycle event (nil: no audit log)" },
  { key = "audit.max_bytes", type = "number", default = 10485760, check = H.int(1),
    description = "rotate at this size," },
  { key = "audit.keep", type = "number", default = 3, check = H.int(1),
    description = "keeping file.1 .. file.N" },

  { key = "rpc", description = "the msgpack-rpc socket (|proctor-rpc|)" },
  { key = "rpc.enabled", type = "boolean", default = true,
    description = "listen when the engine starts; children get PROCTOR_SOCKET" },
  { key = "rpc.path", type = "string|nil", default = nil,
    description = "nil: $XDG_RUNTIME_DIR/proctor/<pid>.sock, else /tmp/proctor-<uid>/<pid>.sock" },
  { key = "rpc.start", type = "string", default = "first_use",
    check = H.enum({ "first_use", "startup" }),
    description = "\"first_use\": the socket comes with the engine; \"startup\": setup() starts both "
      .. "at once, so an agent started later finds this editor (|proctor-mcp-mode|)" },

  { key = "list", description = "the list view (|proctor-list|)" },
  { key = "list.refresh_ms", type = "number", default = 1000, check = H.int(1),
    description = "refresh of a visible list view (elapsed times)" },

  { key = "targets", type = "table", default = {}, show = "{}", check = H.targets,
    luacats = "table<string, proctor.TargetDef>",
    description = "where run{ target = name } runs: name = { ssh = \"user@host\", opts = { ... }, "
      .. "shepherd = path?, cwd = path? }, { podman = container, opts?, shepherd?, cwd? } "
      .. "or { command = { ... } } (|proctor-targets|)" },
  { key = "tasks", type = "table", default = {}, show = "{}", check = H.tasks,
    luacats = "table<string|integer, proctor.TaskDef|fun(dir: string): proctor.TaskDef|nil>",
    description = "your tasks: name = definition (run{} fields and task options, |proctor-tasks|), or "
      .. "function(dir) returning one (nil: not a task there)" },
  { key = "task_defaults", description = "task options a task or run{} does not set (|proctor-tasks|)" },
  { key = "task_defaults.quickfix", type = "string", default = "on_failure",
    check = H.enum({ "on_failure", "always", "never" }),
    description = "problems go to the quickfix list: \"on_failure\" | \"always\" | \"never\"" },
  { key = "task_defaults.open_quickfix", type = "boolean", default = false,
    description = "open the quickfix window when it got problems" },
  { key = "task_defaults.diagnostics", type = "boolean", default = true,
    description = "discovered tasks (make, cargo, go, pytest) match their tool's output" },
  { key = "task_defaults.max_problems", type = "number", default = 10000, check = H.int(1),
    description = "problems kept per run" },
  { key = "task_defaults.debounce_ms", type = "number", default = 200, check = H.int(0),
    description = "watch: quiet time after a change before the restart" },
  { key = "task_defaults.max_restarts", type = "number", default = 5, check = H.int(0),
    description = "restart: failures in a row before giving up" },
  { key = "task_defaults.backoff_ms", type = "number", default = 500, check = H.int(0),
    description = "restart: first delay, doubled each failure in a row ..." },
  { key = "task_defaults.backoff_max_ms", type = "number", default = 30000, check = H.int(0),
    description = "... up to this" },
  { key = "task_defaults.healthy_ms", type = "number", default = 10000, check = H.int(0),
    description = "a run that lasted this long is no failure in a row" },
  { key = "discover", description = "task sources (|proctor-tasks-discovery|); false turns one off" },
  { key = "discover.make", type = "boolean", default = true, description = "Makefile targets (make's database)" },
  { key = "discover.npm", type = "boolean", default = true,
    description = "package.json scripts (npm, or pnpm, yarn, bun by the lock file)" },
  { key = "discover.cargo", type = "boolean", default = true, description = "cargo build, test, run" },
  { key = "discover.just", type = "boolean", default = true, description = "justfile recipes (when just is installed)" },
  { key = "discover.go", type = "boolean", default = true, description = "go build ./..., go test ./..." },
  { key = "discover.pytest", type = "boolean", default = true,
    description = "pytest (pyproject.toml, pytest.ini, tox.ini)" },
  { key = "discover.vscode", type = "boolean", default = true,
    description = ".vscode/tasks.json (only in a trusted directory, |proctor-vscode|)" },
  { key = "discover.deno", type = "boolean", default = true,
    description = "deno.json(c) tasks (when deno is installed)" },
  { key = "discover.mise", type = "boolean", default = true,
    description = "mise tasks (when mise is installed; `mise tasks ls` only in a trusted directory)" },
  { key = "discover.composer", type = "boolean", default = true,
    description = "composer.json scripts (when composer is installed)" },
  { key = "discover.tox", type = "boolean", default = true,
    description = "tox environments (when tox is installed; `tox -l` only in a trusted directory)" },
  { key = "discover.taskfile", type = "boolean", default = true,
    description = "Taskfile.yml tasks (when go-task is installed; only in a trusted directory)" },
  { key = "discover.project", type = "boolean", default = true,
    description = "the project file (read once trusted: vim.secure.read on 0.9+, else a prompt)" },
  { key = "discover.project_file", type = "string", default = ".proctor.lua",
    check = function(v) return v ~= "" and not v:find("/"), "a file name" end,
    description = "its name, looked up from the directory upwards" },

  { key = "keymaps", description = "{lhs} = action (|proctor-actions|), a function(id), or false: no key" },
  { key = "keymaps.console", type = "table", map = H.keymap,
    default = { ["q"] = "close", ["<C-c>"] = "cancel", ["R"] = "rerun", ["O"] = "text", ["?"] = "help" },
    description = "Normal mode in a console (|proctor-console-keys|)" },
  { key = "keymaps.list", type = "table", map = H.keymap,
    default = { ["<CR>"] = "open", ["o"] = "open", ["<C-s>"] = "open_split", ["<C-v>"] = "open_vsplit",
      ["<C-t>"] = "open_tab", ["<C-f>"] = "open_float", ["c"] = "cancel", ["C"] = "kill", ["dd"] = "delete",
      ["r"] = "rerun", ["i"] = "input", ["P"] = "purge", ["s"] = "filter", ["R"] = "refresh", ["q"] = "close",
      ["?"] = "help" },
    description = "the list view (|proctor-list-keys|)" },
  { key = "keymaps.text", type = "table", map = H.keymap,
    default = { ["q"] = "close", ["R"] = "refresh", ["<C-c>"] = "cancel", ["?"] = "help" },
    description = "the text view (|proctor-text-keys|)" },

  { key = "notify", type = "string", default = "on_failure", check = H.enum({ "never", "on_failure", "always" }),
    description = "\"never\" | \"on_failure\" | \"always\" (|proctor-notify|)" },
  { key = "confirm_quit", type = "boolean", default = true,
    description = "quitting Neovim while executions run asks first (|proctor-quit|); :qa! never asks" },
  { key = "events_per_tick", type = "number", default = 4096, check = H.int(1),
    description = "engine events handled per loop tick" },
  -- 64 KiB: a bigger Lua string is an allocation of its own (mmap'd, faulted in, unmapped with
  -- a TLB flush across the engine thread's CPU): 256 KiB a poll cost 2-6 ms of a drain tick
  { key = "output_max_bytes", type = "number", default = 65536, check = H.int(0),
    description = "bytes of one stream handed to Lua per poll; under a flood the rest is skipped "
      .. "(never copied) and counted as missed (a console reads it from the ring). 0: every byte "
      .. "reaches Lua" },
}
--stylua: ignore end

H.current = nil

--- The current configuration (the defaults until setup() succeeded).
---@return proctor.Config
function M.get()
  if H.current == nil then H.current = vim.deepcopy(M.defaults) end
  return H.current
end

--- Validate `opts`; return the merged configuration or nil plus one message
--- naming the offending key, and a list of warnings (unknown keys).
---@param opts proctor.SetupOpts|nil
---@return proctor.Config|nil cfg, string|nil err, string[] warnings
function M.validate(opts)
  local warnings = {}
  if opts == nil then return vim.deepcopy(M.defaults), nil, warnings end
  if type(opts) ~= "table" then
    return nil, "setup() expects a table, got " .. type(opts), warnings
  end
  local err = H.check(opts, "", warnings)
  if err then return nil, err, warnings end
  return H.merge(vim.deepcopy(M.defaults), opts, ""), nil, warnings
end

--- Validate and make `opts` current (each call starts from the defaults).
--- Returns true, or false and the message; and the warnings.
---@param opts proctor.SetupOpts|nil
---@return boolean ok, string|nil err, string[] warnings
function M.apply(opts)
  local cfg, err, warnings = M.validate(opts)
  if not cfg then return false, err, warnings end
  H.current = cfg
  return true, nil, warnings
end

--- The values an enum option takes (nil for other options).
---@param e proctor.ConfigEntry
---@return string[]|nil
function M.enum_values(e) return e.check and H.values[e.check] end

-- Helpers -----------------------------------------------------------------------

-- The table that holds key path `key` in `root` (created on the way), and the last name.
function H.parent(root, key)
  local t = root
  local names = vim.split(key, ".", { plain = true })
  for i = 1, #names - 1 do
    t[names[i]] = t[names[i]] or {}
    t = t[names[i]]
  end
  return t, names[#names]
end

function H.describe(v)
  if type(v) == "string" then return string.format("%q", v) end
  if type(v) == "number" or type(v) == "boolean" then return tostring(v) end
  return type(v)
end

-- Check table `t` at path `prefix`; returns the first error, collects warnings.
function H.check(t, prefix, warnings)
  local keys = vim.tbl_keys(t)
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do
    local v = t[k]
    local path = prefix .. tostring(k)
    local e = type(k) == "string" and M.by_key[path]
    if not e then
      warnings[#warnings + 1] = "unknown option '" .. path .. "' (ignored)"
    else
      local types = e.type or "table"
      if not (("|" .. types .. "|"):find("|" .. type(v) .. "|", 1, true)) then
        local what = e.check and H.what[e.check] or types:gsub("|", " or ")
        local got = type(v) == "string" and string.format("%q", v) or type(v)
        return string.format("option '%s' must be %s, got %s", path, what, got)
      end
      if e.check and v ~= nil then
        local ok, hint = e.check(v)
        if not ok then
          return string.format("option '%s' must be %s, got %s", path, hint, H.describe(v))
        end
      end
      if type(v) == "table" then
        if e.map then
          for mk, mv in pairs(v) do
            local ok, hint = e.map(mk, mv)
            if not ok then
              return string.format(
                "option '%s[%s]' must be %s, got %s",
                path,
                H.describe(mk),
                hint,
                H.describe(mv)
              )
            end
          end
        elseif e.type == nil then
          local err = H.check(v, path .. ".", warnings)
          if err then return err end
        end
      end
    end
  end
  return nil
end

-- Merge the (checked) options `over` into `base` at path `prefix`.
function H.merge(base, over, prefix)
  for k, v in pairs(over) do
    local path = prefix .. tostring(k)
    local e = M.by_key[path]
    if e then
      if type(v) == "table" and e.type == nil then
        H.merge(base[k], v, path .. ".")
      elseif type(v) == "table" and e.map then
        base[k] = base[k] or {}
        for mk, mv in pairs(v) do
          base[k][mk] = mv
        end
      else
        base[k] = v
      end
    end
  end
  return base
end

--- The schema entry of each key path.
---@type table<string, proctor.ConfigEntry>
M.by_key = {}
for _, e in ipairs(M.schema) do
  M.by_key[e.key] = e
end

--- The defaults, as one table (built from the schema).
---@type proctor.Config
M.defaults = {}
for _, e in ipairs(M.schema) do
  local parent, name = H.parent(M.defaults, e.key)
  if e.type == nil then
    parent[name] = {}
  elseif type(e.default) == "table" then
    parent[name] = vim.deepcopy(e.default)
  else
    parent[name] = e.default
  end
end

M._H = H

return M
