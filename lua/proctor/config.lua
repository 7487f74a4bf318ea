--- proctor.config — the defaults, their schema, and validation of setup() options.
---
--- `M.defaults` is the one documented table of defaults (doc/proctor.txt
--- |proctor-config| shows the same table). `M.apply(opts)` validates a user
--- table against the schema and, if it is valid, makes it the current
--- configuration (merged over the defaults); `M.get()` returns the current one.
--- Requiring this module has no side effects.

local M = {}
local H = {}

--stylua: ignore start
---@class proctor.Config
M.defaults = {
  -- Options of the engine; read once, when the engine is first needed.
  engine = {
    output_limit  = 8 * 1024 * 1024, -- bytes of output kept per execution and stream (ring buffer)
    history_limit = 1000,            -- finished executions kept in the registry
    max_running   = nil,             -- at most this many run at once, the rest wait "queued" (nil: no cap)
    kill_grace_ms = 2000,            -- cancel: SIGTERM, then SIGKILL after this; also bounds the wait at exit
    drain_ms      = 500,             -- after exit, how long output of background grandchildren is awaited
    shepherd      = nil,             -- path of proctor-shepherd (nil: next to core.so)
  },
  -- Durable history of finished executions across sessions (:help proctor-history).
  history = {
    enabled      = false, -- keep records (and output tails) in a file, loaded on the next start
    file         = nil,   -- nil: stdpath("state") .. "/proctor/history.mpk" ("data" on Neovim 0.7)
    output_bytes = 65536, -- last bytes of each stream kept per execution
  },
  -- Audit log: one JSON line per lifecycle event, never shortened by purge (:help proctor-audit).
  audit = {
    file      = nil,      -- path; nil: no audit log
    max_bytes = 10485760, -- rotate at this size ...
    keep      = 3,        -- ... keeping this many old files (file.1 .. file.N)
  },
  -- The msgpack-rpc socket agents and scripts drive executions through (:help proctor-rpc).
  rpc = {
    enabled = true, -- listen when the engine starts; children get PROCTOR_SOCKET
    path    = nil,  -- nil: $XDG_RUNTIME_DIR/proctor/<pid>.sock, else /tmp/proctor-<uid>/<pid>.sock
  },
  -- Defaults of proctor.run(spec) (every field can be given in the spec).
  run = {
    pty        = false, -- run under a pseudo-terminal (one "pty" stream) instead of pipes
    stdin      = true,  -- pipe executions get a stdin pipe, so input() and typing work
    cols       = 120,   -- pty size until a console window gives the real one
    rows       = 30,
    timeout_ms = nil,   -- cancel after this long (nil: never)
    owner      = "nvim",
  },
  -- Defaults of :Proctor run (the command is for people: colours, prompts, a console).
  command = {
    pty  = true,  -- programs see a terminal: colours, progress bars, prompts
    open = true,  -- open the console at once
  },
  console = {
    open          = "split", -- how a console is shown: "split" | "vsplit" | "tab" | "float" | "current"
    size          = 15,      -- height of a split (width of a vsplit), in lines/columns
    enter         = true,    -- move the cursor into the console window when opening it
    bar           = true,    -- winbar (Neovim 0.8+) or statusline with id, label, state, elapsed, exit
    final_line    = true,    -- print "[proctor] failed: exit 2 after 3.2 s" at the end
    bytes_per_tick = 16384,  -- bytes handed to the terminal per event-loop tick (all consoles)
    backlog_limit  = 262144, -- when more than this waits to be rendered, skip to the tail ...
    tail_bytes     = 65536,  -- ... keeping this many bytes, and say how many were skipped
  },
  list = {
    refresh_ms = 1000, -- refresh interval of a visible list view (elapsed times)
  },
  notify = "on_failure", -- notify when an execution ends: "never" | "on_failure" | "always"
  events_per_tick = 4096, -- engine events handled per event-loop tick
  output_max_bytes = 262144, -- bytes of one stream handed to Lua per poll; under a flood the
                             -- rest is skipped (never copied) and reported as missed. 0: all
}
--stylua: ignore end

-- Schema: path -> { types (comma list), check(value) -> ok, hint }.
H.schema = {
  ["engine"] = { "table" },
  ["engine.output_limit"] = { "number", "positive integer" },
  ["engine.history_limit"] = { "number", "integer >= 0" },
  ["engine.max_running"] = { "number,nil", "positive integer or nil" },
  ["engine.kill_grace_ms"] = { "number", "integer >= 0" },
  ["engine.drain_ms"] = { "number", "integer >= 0" },
  ["engine.shepherd"] = { "string,nil" },
  ["run"] = { "table" },
  ["run.pty"] = { "boolean" },
  ["run.stdin"] = { "boolean" },
  ["run.cols"] = { "number", "positive integer" },
  ["run.rows"] = { "number", "positive integer" },
  ["run.timeout_ms"] = { "number,nil", "positive integer or nil" },
  ["run.owner"] = { "string" },
  ["command"] = { "table" },
  ["command.pty"] = { "boolean" },
  ["command.open"] = { "boolean" },
  ["console"] = { "table" },
  ["console.open"] = { "string", "enum", { "split", "vsplit", "tab", "float", "current" } },
  ["console.size"] = { "number", "positive integer" },
  ["console.enter"] = { "boolean" },
  ["console.bar"] = { "boolean" },
  ["console.final_line"] = { "boolean" },
  -- capped: one nvim_chan_send of a few MiB overflows libvterm's stack in Neovim 0.7 (#16040)
  ["console.bytes_per_tick"] = { "number", "positive integer", 1048576 },
  ["console.backlog_limit"] = { "number", "positive integer" },
  ["console.tail_bytes"] = { "number", "positive integer" },
  ["history"] = { "table" },
  ["history.enabled"] = { "boolean" },
  ["history.file"] = { "string,nil" },
  ["history.output_bytes"] = { "number", "positive integer" },
  ["audit"] = { "table" },
  ["audit.file"] = { "string,nil" },
  ["audit.max_bytes"] = { "number", "positive integer" },
  ["audit.keep"] = { "number", "positive integer" },
  ["rpc"] = { "table" },
  ["rpc.enabled"] = { "boolean" },
  ["rpc.path"] = { "string,nil" },
  ["list"] = { "table" },
  ["list.refresh_ms"] = { "number", "positive integer" },
  ["notify"] = { "string", "enum", { "never", "on_failure", "always" } },
  ["events_per_tick"] = { "number", "positive integer" },
  ["output_max_bytes"] = { "number", "integer >= 0" },
}

H.current = nil

--- The current configuration (the defaults until setup() succeeded).
---@return proctor.Config
function M.get()
  if H.current == nil then H.current = vim.deepcopy(M.defaults) end
  return H.current
end

--- Validate `opts`; return the merged configuration or nil plus one message
--- naming the offending key, and a list of warnings (unknown keys).
---@param opts table|nil
---@return proctor.Config|nil cfg, string|nil err, string[] warnings
function M.validate(opts)
  local warnings = {}
  if opts == nil then return vim.deepcopy(M.defaults), nil, warnings end
  if type(opts) ~= "table" then return nil, "setup() expects a table, got " .. type(opts), warnings end
  local err = H.check(opts, "", warnings)
  if err then return nil, err, warnings end
  return H.merge(vim.deepcopy(M.defaults), opts), nil, warnings
end

--- Validate and make `opts` current. Returns true, or false and the message.
---@return boolean ok, string|nil err, string[] warnings
function M.apply(opts)
  local cfg, err, warnings = M.validate(opts)
  if not cfg then return false, err, warnings end
  H.current = cfg
  return true, nil, warnings
end

-- Helpers -----------------------------------------------------------------------

function H.check(t, prefix, warnings)
  local keys = vim.tbl_keys(t)
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for _, k in ipairs(keys) do
    local v = t[k]
    local path = prefix .. tostring(k)
    local rule = type(k) == "string" and H.schema[path]
    if not rule then
      warnings[#warnings + 1] = "unknown option '" .. path .. "' (ignored)"
    else
      local types, hint, enum = rule[1], rule[2], rule[3]
      if not (("," .. types .. ","):find("," .. type(v) .. ",", 1, true)) then
        return string.format("option '%s' must be %s, got %s", path,
          hint and hint ~= "enum" and hint or types:gsub(",", " or "), type(v) == "string" and
          string.format("%q", v) or type(v))
      end
      if hint == "enum" and not vim.tbl_contains(enum, v) then
        return string.format("option '%s' must be one of %s, got %q", path,
          table.concat(enum, ", "), v)
      elseif type(v) == "number" and hint then
        local int = v == math.floor(v)
        local okv = int and ((hint:find("positive") and v > 0) or (hint:find(">= 0") and v >= 0))
        if not okv then return string.format("option '%s' must be a %s, got %s", path, hint, tostring(v)) end
        if type(enum) == "number" and v > enum then
          return string.format("option '%s' must be at most %d, got %s", path, enum, tostring(v))
        end
      elseif type(v) == "table" then
        local e = H.check(v, path .. ".", warnings)
        if e then return e end
      end
    end
  end
  return nil
end

function H.merge(base, over, prefix)
  prefix = prefix or ""
  for k, v in pairs(over) do
    local path = prefix .. tostring(k)
    if H.schema[path] then
      if type(v) == "table" and type(base[k]) == "table" then
        H.merge(base[k], v, path .. ".")
      else
        base[k] = v
      end
    end
  end
  return base
end

return M
