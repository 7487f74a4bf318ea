-- tests/worker/spec_nvim.lua — supervised workers through the Neovim layer
-- (headless nvim, run by tests/worker/run). Quits Neovim itself.
local root = vim.fn.getcwd()
package.path = root .. "/tests/lua/?.lua;" .. package.path
local T = require("harness")
local W = require("proctor.worker")
local PY = { "/usr/bin/python3", root .. "/examples/worker.py" }

T.test("nvim: worker request/chunks/reply, blocking wait, cancel, restart, stop", function()
  local w = assert(W.start { cmd = PY, worker = { protocol = "jsonl", backoff_ms = 50 } })
  local r = assert(w:request({ op = "echo", value = { a = 1 } }, { wait = 5000 }))
  T.eq(r.ok, true)
  T.eq(r.result.a, 1)
  local chunks, reply = {}, nil
  w:request(
    { op = "stream", n = 20 },
    { on_chunk = function(d) chunks[#chunks + 1] = d.i end, on_reply = function(ev) reply = ev end }
  )
  T.ok(vim.wait(5000, function()
    require("proctor.engine").pump()
    return reply ~= nil
  end, 1))
  T.eq(#chunks, 20)
  T.eq(chunks[20], 19)
  local canceled
  local rid = w:request(
    { op = "echo", value = 1, ms = 3000 },
    { on_reply = function(ev) canceled = ev end }
  )
  w:cancel(rid)
  -- resolved by the layer: the worker's own answer (value 1, after 3 s) is
  -- not what ends it
  T.ok(
    vim.wait(30000, function()
      require("proctor.engine").pump()
      return canceled ~= nil
    end, 1),
    "cancel resolved"
  )
  T.eq(canceled.status, "canceled")
  T.eq(canceled.result, nil, "the worker's answer came back instead")
  -- many in flight
  local n = 0
  for i = 1, 1000 do
    w:request({ op = "echo", value = i, ms = i % 3 }, {
      on_reply = function(ev)
        if ev.result == i then n = n + 1 end
      end,
    })
  end
  T.ok(
    vim.wait(20000, function()
      require("proctor.engine").pump()
      return n == 1000
    end, 1),
    "1000 replies: " .. n
  )
  -- crash -> worker_exited -> restarted
  local crashed
  w:request({ op = "crash" }, { on_reply = function(ev) crashed = ev end })
  T.ok(vim.wait(5000, function()
    require("proctor.engine").pump()
    return crashed ~= nil
  end, 1))
  T.eq(crashed.status, "worker_exited")
  local again = assert(w:request({ op = "echo", value = "back" }, { wait = 5000 }))
  T.eq(again.result, "back")
  T.eq(w:record().worker_restarts, 1)
  w:restart()
  local r2 = assert(w:request({ op = "echo", value = "restarted" }, { wait = 5000 }))
  T.eq(r2.result, "restarted")
  T.eq(w:stop(), "canceling")
  T.ok(vim.wait(5000, function()
    require("proctor.engine").pump()
    return w:record().state == "canceled"
  end, 5))
  T.eq(w:record().worker_state, "stopped")
end)

local ok = T.finish()
vim.cmd(ok and "qa!" or "cquit 1")
