--- proctor.engine — the one engine of this Neovim: loading the C core, watching
--- its wake fd, draining events, and shutting down at exit.
---
--- Data flow:
---
---   engine thread ──events──► core queue ──eventfd readable──► uv poll (fast)
---        │                                                      │ stop poll, schedule
---        ▼                                                      ▼
---   eng:poll(max) ◄──────────────── drain() (main loop, not fast) ─► H.queue
---                                     │ bounded per tick: events_per_tick
---                                     ▼
---                          subscribers (state table, callbacks, consoles,
---                          User autocmds, notifications, list view)
---
--- Events are handed to subscribers strictly in core order, through one Lua
--- queue, so a nested pump (exec:wait() inside a callback) never reorders them.
--- Requiring this module has no side effects; the engine starts on first use.

local M = {}
local H = {}

local quit = require("proctor.quit")
local config = require("proctor.config")
local compat = require("proctor.compat")
local uv = compat.uv
local util = require("proctor.util")
local targets = require("proctor.targets")

--- Version of the C core this Lua layer is written for.
M.core_version = "0.1.0"

M.TERMINAL = { completed = true, failed = true, canceled = true, timed_out = true }

H.core = nil -- the loaded proctor.core module
H.load_err = nil
H.eng = nil -- the engine userdata
H.poll = nil -- uv poll handle on eng:fd()
H.prepare = nil -- uv prepare handle: wakes the engine for this turn's starts (M.flush_later)
H.flush_armed = false
H.timer = nil -- uv timer used to continue a drain on the next loop iteration
H.scheduled = false
H.queue, H.qhead, H.qtail = {}, 1, 0
H.subs, H.sub_order = {}, {}
H.tick_subs, H.tick_order = {}, {}
H.closing = false
H.floors, H.floor = {}, 0 -- M.want_output: name -> bytes, and the largest
H.depth = 0 -- batches being dispatched now (a nested pump, ex:wait() in a callback, adds one)
H.in_drain = false -- the drain tick (H.drain) runs

--- Per-id state as seen by the Lua layer (updated when a state event is dispatched).
---@type table<integer, string>
M.state = {}
--- Counts per state of the ids in M.state.
---@type table<string, integer>
M.counts = {}
--- Specs of executions started through this Neovim layer (for rerun).
---@type table<integer, table>
M.specs = {}
--- The most recent execution id seen (started here or elsewhere).
M.last_id = nil
--- Ids whose cancel this layer requested, until they end (the bar says "canceling…").
---@type table<integer, boolean>
M.canceling = {}

--- The state of a record in words (util.state_text), "canceling…" while a
--- cancel this layer requested runs its grace.
---@param rec proctor.Record|proctor.StateEvent
---@return string
function M.state_text(rec)
  return util.state_text(rec, rec.id ~= nil and M.canceling[rec.id] == true)
end

--- Load the C core. Returns the module or nil and a message saying what to do.
---@return table|nil core, string|nil err
function M.load_core()
  if H.core then return H.core end
  if H.load_err then return nil, H.load_err end
  local ok, core = pcall(require, "proctor.core")
  if not ok then
    local root = M.root() or "<proctor directory>"
    local why = tostring(core):gsub("\n.*", "")
    if uv.fs_stat(root .. "/lua/proctor/core.so") == nil then
      H.load_err = "the C core is not built (lua/proctor/core.so is missing): run `make` in "
        .. root
    else
      H.load_err = "the C core failed to load (" .. why .. "): run `make clean all` in " .. root
    end
    return nil, H.load_err
  end
  if core.version ~= M.core_version then
    H.load_err = string.format(
      "the C core is version %s but this Lua layer needs %s: run `make` in %s",
      tostring(core.version),
      M.core_version,
      M.root() or "the proctor directory"
    )
    return nil, H.load_err
  end
  H.core = core
  return core
end

--- Directory of the plugin checkout (the parent of lua/proctor), or nil.
---@return string|nil
function M.root()
  local src = debug.getinfo(1, "S").source
  if src:sub(1, 1) ~= "@" then return nil end
  return vim.fn.fnamemodify(src:sub(2), ":p:h:h:h")
end

--- The engine, created on first use. Returns nil and a message when it cannot start.
---@return proctor.Engine|nil eng, string|nil err
function M.get()
  if H.eng then
    if H.closing then return nil, "ECLOSED: the engine is closed (Neovim is exiting)" end
    return H.eng
  end
  local core, err = M.load_core()
  if not core then return nil, err end
  local c = config.get().engine
  local opts = {
    output_limit = c.output_limit,
    output_memory = c.output_memory or H.poll_bytes(),
    spill_dir = c.spill_dir,
    history_limit = c.history_limit,
    max_running = c.max_running,
    max_queued = c.max_queued,
    ended_output_max = c.ended_output_max,
    kill_grace_ms = c.kill_grace_ms,
    drain_ms = c.drain_ms,
    secret_timeout_ms = c.secret_timeout_ms,
    target_idle_ms = c.target_idle_ms,
    shepherd = c.shepherd,
    shepherd_early = c.shepherd_early,
  }
  opts.listen = M.socket_path()
  local cfg = config.get()
  if cfg.history.enabled then
    local file = cfg.history.file or M.history_file()
    vim.fn.mkdir(vim.fn.fnamemodify(file, ":h"), "p")
    opts.history_file = file
    opts.history_output_bytes = cfg.history.output_bytes
  end
  if cfg.audit.file then
    vim.fn.mkdir(vim.fn.fnamemodify(cfg.audit.file, ":h"), "p")
    opts.audit_file = cfg.audit.file
    opts.audit_max_bytes = cfg.audit.max_bytes
    opts.audit_keep = cfg.audit.keep
  end
  local eng, msg = core.new(opts)
  if not eng and opts.listen then
    -- The socket could not be set up (a refused directory, a path too long):
    -- say so once and run without it rather than without proctor.
    H.rpc_error = tostring(msg)
    util.notify("RPC socket disabled: " .. H.rpc_error, vim.log.levels.WARN)
    opts.listen = nil
    eng, msg = core.new(opts)
  end
  if not eng then return nil, "the engine did not start: " .. tostring(msg) end
  H.eng = eng
  H.warn_when_loaded()
  M.sync_targets()
  H.poll = uv.new_poll(eng:fd())
  H.timer = uv.new_timer()
  H.prepare = uv.new_prepare()
  H.poll:start("r", H.on_readable)
  -- every state event brings its record: the bars and the autocmds never
  -- wait for the engine thread to show a state
  eng:state_records(true)
  local group = vim.api.nvim_create_augroup("proctor_engine", { clear = true })
  vim.api.nvim_create_autocmd(
    "VimLeavePre",
    { group = group, callback = function() M.shutdown() end }
  )
  quit.hook(group, H.live)
  -- Someone may have started executions before we watched (not possible today,
  -- but cheap): drain once.
  H.schedule()
  return eng
end

--- The default history file: stdpath("state")/proctor/history.mpk on every
--- Neovim (on 0.7, which has no stdpath("state"), the same XDG directory). A
--- file an older proctor kept in stdpath("data") is moved there first, so an
--- upgrade of Neovim (or of proctor) keeps the history.
---@return string
function M.history_file()
  local file = compat.state_dir() .. "/proctor/history.mpk"
  local old = vim.fn.stdpath("data") .. "/proctor/history.mpk"
  if old ~= file and not uv.fs_stat(file) and uv.fs_stat(old) then
    vim.fn.mkdir(vim.fn.fnamemodify(file, ":h"), "p")
    local ok, err = uv.fs_rename(old, file)
    if not ok then -- another file system: copy, then remove the old one
      ok, err = uv.fs_copyfile(old, file)
      if ok then uv.fs_unlink(old) end
    end
    if ok then
      pcall(uv.fs_unlink, old .. ".lock")
      util.notify("history moved from " .. old .. " to " .. file, vim.log.levels.INFO)
    else
      util.notify(
        "could not move the history from "
          .. old
          .. ": "
          .. tostring(err)
          .. " (it stays there; setup{ history = { file = ... } } names it)",
        vim.log.levels.WARN
      )
      return old
    end
  end
  return file
end

--- Where the RPC socket goes (nil when disabled): setup{ rpc = { path } }, else
--- $XDG_RUNTIME_DIR/proctor/<pid>.sock, else /tmp/proctor-<uid>/<pid>.sock (the
--- core creates the last directory with mode 0700 and refuses one it does not own).
---@return string|nil
function M.socket_path()
  local r = config.get().rpc
  if not r.enabled then return nil end
  if r.path then return r.path end
  local pid = vim.fn.getpid()
  local xdg = vim.env.XDG_RUNTIME_DIR
  if xdg and xdg ~= "" and vim.fn.isdirectory(xdg) == 1 then
    return string.format("%s/proctor/%d.sock", xdg, pid)
  end
  local uid = (uv.getuid and uv.getuid()) or tonumber(vim.fn.system({ "id", "-u" })) or 0
  return string.format("/tmp/proctor-%d/%d.sock", uid, pid)
end

--- Why the socket is off, when it failed to start (nil otherwise).
---@return string|nil
function M.rpc_error() return H.rpc_error end

--- The engine if it exists, without creating it.
---@return proctor.Engine|nil
function M.current() return not H.closing and H.eng or nil end

--- Tell the engine the targets of setup{ targets } (|proctor-targets|): they, and no
--- others, are what an RPC `start` may name. Called when the engine is made and by
--- setup(); a target whose transport cannot be built (no static shepherd) is left out.
function M.sync_targets()
  local eng = M.current()
  if not eng then return end
  local want = config.get().targets or {}
  for name in pairs(H.targets or {}) do
    if want[name] == nil then eng:target(name, nil) end
  end
  H.targets = {}
  for name, def in pairs(want) do
    local tr, cwd = targets.transport(name, def)
    if tr then
      eng:target(name, tr, cwd)
      H.targets[name] = true
    else
      eng:target(name, nil)
    end
  end
end

--- The engine thread is woken once this turn of the main loop is over (just
--- before the loop waits), for the starts made with `eng:start(spec, { wake =
--- false })`: a loop of run()s costs it one wake-up, not one each, and it
--- spawns nothing while the loop still runs. A poll, a wait or any other call
--- to the engine wakes it earlier.
function M.flush_later()
  if H.flush_armed or not H.prepare then return end
  H.flush_armed = true
  H.prepare:start(H.flush)
end

--- Subscribe to every event. `fn(ev)` runs on the main loop, never in fast context.
---@param name string a unique name (subscribing again replaces)
---@param fn fun(ev: table)
function M.subscribe(name, fn)
  if not H.subs[name] then H.sub_order[#H.sub_order + 1] = name end
  H.subs[name] = fn
end

--- Ask that polls hand over at least `bytes` of one stream per event (nil:
--- withdraw the wish). A consumer that follows every byte (proctor.tasks.reader)
--- registers while it follows executions; the largest wish wins over
--- `output_max_bytes`. A consumer that falls behind pauses the execution it
--- follows, alone (`eng:hold_output`), never the polls: the others keep flowing.
---@param name string a unique name (registering again replaces)
---@param bytes integer|nil
function M.want_output(name, bytes)
  H.floors[name] = bytes
  local floor = 0
  for _, b in pairs(H.floors) do
    if b > floor then floor = b end
  end
  H.floor = floor
end

--- `fn()` runs after each batch of events was dispatched.
---@param name string a unique name (subscribing again replaces)
---@param fn fun()
function M.on_batch(name, fn)
  if not H.tick_subs[name] then H.tick_order[#H.tick_order + 1] = name end
  H.tick_subs[name] = fn
end

--- Is the drain tick handing a batch of events to the subscribers now? Work a
--- subscriber asks for then can be done by its `on_batch` function, after the
--- batch and in the same tick, instead of a `vim.schedule` later. (Not in a
--- pump of ex:wait(), which may run where a render may not.)
---@return boolean
function M.dispatching() return H.in_drain and H.depth > 0 end

--- Handle every event the core has pending now (used by wait()); returns the count.
---@return integer
function M.pump()
  if not H.eng then return 0 end
  return H.drain_once(math.huge)
end

--- Is the execution terminal as far as the Lua layer has seen (or unknown to the core)?
---@param id integer
---@return boolean
function M.is_done(id)
  local s = M.state[id]
  if s then return M.TERMINAL[s] == true end
  local eng = H.eng
  if not eng then return true end
  local rec = eng:get(id)
  return rec == nil or M.TERMINAL[rec.state] == true
end

--- Forget the Lua-side state of ids no longer in the core (after delete/purge).
function M.reconcile()
  if not H.eng then return end
  local present = {}
  for _, r in ipairs(H.eng:list() or {}) do
    present[r.id] = r.state
  end
  for id in pairs(M.state) do
    if not present[id] then M.forget(id) end
  end
end

---@param id integer
function M.forget(id)
  local s = M.state[id]
  if s then M.counts[s] = (M.counts[s] or 1) - 1 end
  M.state[id] = nil
  M.specs[id] = nil
  M.canceling[id] = nil
end

--- Cancel every live execution, wait for them bounded by the grace period, close.
--- Called from VimLeavePre; safe to call twice.
function M.shutdown()
  local eng = H.eng
  if not eng or H.closing then return end
  H.closing = true
  if H.poll then H.poll:stop() end
  local live = {}
  local n = 0
  for _, r in ipairs(H.live_records(eng)) do
    if not M.TERMINAL[r.state] then
      local res = eng:cancel(r.id)
      if res == "canceling" or res == "already_canceling" then
        live[r.id] = true
        n = n + 1
      end
    end
  end
  local grace = config.get().engine.kill_grace_ms
  local deadline = uv.hrtime() + (grace + 100) * 1e6
  while n > 0 do
    local left = math.floor((deadline - uv.hrtime()) / 1e6)
    if left <= 0 then break end
    for _, ev in ipairs(eng:wait(left, 65536) or {}) do
      if ev.type == "state" and M.TERMINAL[ev.state] and live[ev.id] then
        live[ev.id] = nil
        n = n - 1
      end
    end
  end
  eng:close()
end

--- For tests: close the engine and forget everything, so the next use starts afresh.
function M._reset()
  if H.eng then
    M.shutdown()
    if H.poll and not H.poll:is_closing() then H.poll:close() end
    if H.timer and not H.timer:is_closing() then H.timer:close() end
    if H.prepare and not H.prepare:is_closing() then H.prepare:close() end
  end
  H.eng, H.poll, H.timer, H.closing, H.scheduled = nil, nil, nil, false, false
  H.prepare, H.flush_armed = nil, false
  H.queue, H.qhead, H.qtail = {}, 1, 0
  H.rpc_error = nil
  M.state, M.counts, M.specs, M.last_id = {}, {}, {}, nil
  H.floors, H.floor, H.depth, H.in_drain = {}, 0, 0, false
  M.canceling = {}
end

-- Helpers ------------------------------------------------------------------------

-- Fast context: the wake fd is readable. Stop watching until the drain ran.
-- The executions that are not over (quitting now would cancel them).
-- The default of engine.output_memory: output_max_bytes, the bytes one poll
-- hands a console, so that a live console reads every poll from memory, never
-- back from the spill file (256 KiB when that is 0, "every byte": what an
-- uncapped poll hands over at most; the core's own default spills nothing).
function H.poll_bytes()
  local n = config.get().output_max_bytes
  if n and n > 0 then return n end
  return 262144
end

function H.live()
  local eng = M.current()
  if not eng then return {} end
  local ok, recs = pcall(eng.list, eng)
  if not ok then return {} end
  return vim.tbl_filter(function(r) return not M.TERMINAL[r.state] end, recs)
end

-- Fast context (the prepare handle: the loop is about to wait): wake the
-- engine thread for the starts of this turn (M.flush_later).
function H.flush()
  H.flush_armed = false
  H.prepare:stop()
  local eng = M.current()
  if eng then eng:flush() end
end

function H.on_readable(err)
  if err or H.scheduled then return end
  H.scheduled = true
  H.poll:stop()
  vim.schedule(H.drain)
end

function H.schedule()
  if H.scheduled or not H.eng then return end
  H.scheduled = true
  if H.poll then H.poll:stop() end
  vim.schedule(H.drain)
end

-- Main loop: handle at most events_per_tick events; continue on the next loop
-- iteration (a 0 ms timer lets libuv poll input and timers in between).
function H.drain()
  H.scheduled = false
  if not H.eng or H.closing then return end
  local max = config.get().events_per_tick
  H.in_drain = true
  local _, more = H.drain_once(max, H.DRAIN_MS)
  H.in_drain = false
  if more then
    H.scheduled = true
    H.timer:start(0, 0, function() vim.schedule(H.drain) end)
  else
    H.poll:start("r", H.on_readable)
  end
end

-- Time one drain tick may spend dispatching events (ms): the count bound
-- (events_per_tick) alone lets a tick of many small events (short lines to a
-- matcher, state changes of a fan-out) hold the main loop.
H.DRAIN_MS = 4

-- Pull up to `max` events from the core into the Lua queue and dispatch up to
-- `max` queued events, for at most `ms` milliseconds when given (at least one
-- event). Returns the number dispatched and whether more remain.
function H.drain_once(max, ms)
  local eng = H.eng
  local want = max == math.huge and 65536 or max
  local max_bytes = config.get().output_max_bytes
  -- While a problem matcher or ready pattern follows an execution, polls hand
  -- over at least what it asked for (M.want_output) per stream, so it seldom
  -- reads a skipped range back from the ring (a call that waits for an engine
  -- thread busy with the flood).
  if H.floor > 0 and max_bytes > 0 and max_bytes < H.floor then max_bytes = H.floor end
  local got = 0
  local t0 = ms and uv.hrtime() -- the poll counts in the tick's time too
  -- events left from a tick cut short by its time bound go first
  local backlog = max ~= math.huge and H.qtail - H.qhead + 1 >= want
  repeat
    if backlog then break end
    local evs = eng:poll(want, max_bytes) or {}
    got = #evs
    for i = 1, got do
      H.qtail = H.qtail + 1
      H.queue[H.qtail] = evs[i]
    end
  until got < want or max ~= math.huge
  local n = 0
  H.depth = H.depth + 1
  while H.qhead <= H.qtail and n < max do
    local ev = H.queue[H.qhead]
    H.queue[H.qhead] = nil
    H.qhead = H.qhead + 1
    n = n + 1
    H.dispatch(ev)
    if ms and (uv.hrtime() - t0) >= ms * 1e6 then break end
  end
  H.depth = H.depth - 1
  if H.qhead > H.qtail then
    H.queue, H.qhead, H.qtail = {}, 1, 0
  end
  if n > 0 then
    for _, name in ipairs(H.tick_order) do
      local ok, e = pcall(H.tick_subs[name])
      if not ok then H.report(name, e) end
    end
  end
  return n, H.qhead <= H.qtail or got >= want
end

-- The executions not ended yet. While the history loads, a list of every
-- record waits for the load (the history's records are all ended), and a
-- list of one live state does not: closing the editor then asks for those,
-- so it never waits for the load (eng:close() stops it).
function H.live_records(eng)
  if not (eng.history_loading and eng:history_loading()) then return eng:list() or {} end
  local out = {}
  for _, state in ipairs({ "queued", "starting", "running" }) do
    for _, r in ipairs(eng:list({ state = state }) or {}) do
      out[#out + 1] = r
    end
  end
  return out
end

-- What the history/audit files had to say (a torn tail, a refused file, a
-- failed write) and a spill file that could not be made or written: once
-- each, when the engine starts and when an execution ends.
function H.warn()
  local eng = H.eng
  -- eng:warnings() waits for the history load: while it runs (an execution
  -- ended meanwhile), H.warn_when_loaded's timer tells what it found later
  if eng and eng.history_loading and eng:history_loading() then return end
  for _, w in ipairs(eng and eng.warnings and eng:warnings() or {}) do
    util.notify(w, vim.log.levels.WARN)
  end
end

-- The engine thread reads the history after core.new returned, and
-- eng:warnings() waits for that: ask it only once the load is over (checked
-- every 50 ms, never waiting on the main thread).
function H.warn_when_loaded()
  local eng = H.eng
  if not (eng and eng.history_loading and eng:history_loading()) then return H.warn() end
  local t = uv.new_timer()
  t:start(50, 50, function()
    if H.eng == eng and not eng:closed() and eng:history_loading() then return end
    t:stop()
    t:close()
    if H.eng == eng and not eng:closed() then vim.schedule(H.warn) end
  end)
end

function H.dispatch(ev)
  if ev.type == "state" then
    if M.TERMINAL[ev.state] then
      M.canceling[ev.id] = nil
      H.warn()
    end
    local prev = M.state[ev.id]
    if prev then M.counts[prev] = (M.counts[prev] or 1) - 1 end
    M.state[ev.id] = ev.state
    M.counts[ev.state] = (M.counts[ev.state] or 0) + 1
    if not M.last_id or ev.id > M.last_id then M.last_id = ev.id end
  end
  for _, name in ipairs(H.sub_order) do
    local ok, e = pcall(H.subs[name], ev)
    if not ok then H.report(name, e) end
  end
end

H.reported = {}
function H.report(name, e)
  local msg = "(proctor) internal error in " .. name .. ": " .. tostring(e)
  if H.reported[msg] then return end
  H.reported[msg] = true
  vim.notify(msg, vim.log.levels.ERROR)
end

-- Called by every run() (lua/proctor/init.lua keeps its path interpreted).
compat.interpreted(M.flush_later)

M._H = H

return M
