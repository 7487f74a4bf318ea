--- proctor.worker — supervised workers in Neovim (:help proctor-workers).
---
---   local w = require("proctor").worker{ cmd = { "python3", "worker.py" },
---     worker = { protocol = "jsonl", restart = "on-failure" } }
---   w:request({ op = "echo" }, { on_chunk = function(c) end, on_reply = function(r) end })
---   local reply = w:request({ op = "echo" }, { wait = 5000 })  -- blocking (vim.wait)
---   w:cancel(rid); w:restart(); w:stop()
---
--- Chunk and reply events are routed by request id from the engine's event
--- dispatch (proctor.engine subscriber "worker"), in core order, outside fast
--- callbacks. Requiring this module has no side effects.

local M = {}
local H = {}

local proctor = require("proctor")
local engine = require("proctor.engine")

H.pending = {} -- rid -> { on_chunk, on_reply, reply }
H.subscribed = false

---@class proctor.Worker
---@field id integer execution id
local Worker = {}
Worker.__index = Worker

function H.subscribe()
  if H.subscribed then return end
  H.subscribed = true
  engine.subscribe("worker", function(ev)
    if ev.type ~= "chunk" and ev.type ~= "reply" then return end
    local p = H.pending[ev.rid]
    if not p then return end
    if ev.type == "chunk" then
      if p.on_chunk then p.on_chunk(ev.data, ev) end
      return
    end
    H.pending[ev.rid] = nil
    p.reply = ev
    if p.on_reply then p.on_reply(ev) end
  end)
end

--- Start a worker. `spec` is a proctor.run()-style spec with a `worker` table
--- (the defaults are the core's, core.worker_fields: protocol "jsonl", restart "on-failure").
---@return proctor.Worker|nil worker, string|nil err
function M.start(spec)
  local eng, err = engine.get()
  if not eng then return nil, err end
  H.subscribe()
  local s = vim.deepcopy(spec)
  s.worker = s.worker or true -- every default: PR_WORKER_FIELDS (core.worker_fields)
  s.owner = s.owner or "nvim"
  local id, msg = eng:start(s)
  if not id then return nil, msg end
  return setmetatable({ id = id }, Worker)
end

--- Send a request. opts: on_chunk(data, ev), on_reply(ev), timeout_ms, and
--- wait = ms to block until the reply (returns the reply event then).
---@return integer|table|nil rid_or_reply, string|nil err
function Worker:request(payload, opts)
  opts = opts or {}
  local eng, err = engine.get()
  if not eng then return nil, err end
  local rid, msg = eng:worker_request(self.id, payload, { timeout_ms = opts.timeout_ms })
  if not rid then return nil, msg end
  local p = { on_chunk = opts.on_chunk, on_reply = opts.on_reply }
  H.pending[rid] = p
  if not opts.wait then return rid end
  local ok = vim.wait(opts.wait, function()
    engine.pump()
    return p.reply ~= nil
  end, 1)
  if not ok then
    eng:worker_cancel(rid)
    return nil, "timeout: no reply within " .. opts.wait .. " ms"
  end
  return p.reply
end

--- Cancel request `rid`: its reply (status "canceled") is dispatched at once.
function Worker:cancel(rid)
  local eng, err = engine.get()
  if not eng then return nil, err end
  return eng:worker_cancel(rid)
end

--- Replace the worker process now (no backoff, not counted against max_restarts).
function Worker:restart()
  local eng, err = engine.get()
  if not eng then return nil, err end
  return eng:worker_restart(self.id)
end

--- Stop the worker for good (cancels the execution).
function Worker:stop()
  local eng, err = engine.get()
  if not eng then return nil, err end
  return eng:cancel(self.id)
end

--- The execution record (worker_state, worker_restarts, ...).
function Worker:record()
  local eng, err = engine.get()
  if not eng then return nil, err end
  return eng:get(self.id)
end

proctor._extend("worker", { api = M }) -- proctor.worker()

return M
