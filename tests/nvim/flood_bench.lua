-- tests/nvim/flood_bench.lua — not part of the tier: 100 MiB into a visible proctor
-- console vs nvim_open_term fed by jobstart vs jobstart appending to a plain buffer.
-- Reports wall time, 10 ms timer lateness p50/p99 and peak RSS (VmHWM, per fresh nvim).
--   nvim --headless -u NONE -i NONE -n -c "set rtp^=$PWD" -c "luafile tests/nvim/flood_bench.lua" -- MODE
-- MODE: proctor | open_term | plain
local uv = vim.uv or vim.loop
local mode = vim.v.argv[#vim.v.argv]
local cmd = "yes \"$(printf '%079d' 0)\" | head -c 104857600; echo TAIL-MARK"
local function ms() return uv.hrtime() / 1e6 end
local lat, expect = {}, ms() + 10
local timer = uv.new_timer()
timer:start(10, 10, function()
  local now = ms()
  lat[#lat + 1] = now - expect
  expect = now + 10
end)
local t0 = ms()
local done = false
local buf
if mode == "proctor" then
  local p = require("proctor")
  p.setup({ notify = "never" })
  local ex = p.run({ cmd = cmd })
  ex:open({ enter = false })
  vim.wait(
    120000,
    function()
      return require("proctor.engine").state[ex.id] == "completed"
        and require("proctor.console").idle(ex.id)
    end,
    5
  )
elseif mode == "open_term" then
  buf = vim.api.nvim_create_buf(true, false)
  vim.cmd("botright sbuffer " .. buf)
  local chan = vim.api.nvim_open_term(buf, {})
  vim.fn.jobstart({ "sh", "-c", cmd }, {
    on_stdout = function(_, data) vim.api.nvim_chan_send(chan, table.concat(data, "\r\n")) end,
    on_exit = function() done = true end,
  })
  vim.wait(300000, function() return done end, 5)
else
  buf = vim.api.nvim_create_buf(true, true)
  vim.cmd("botright sbuffer " .. buf)
  local partial = ""
  vim.fn.jobstart({ "sh", "-c", cmd }, {
    on_stdout = function(_, data)
      data[1] = partial .. data[1]
      partial = table.remove(data)
      vim.api.nvim_buf_set_lines(buf, -1, -1, false, data)
    end,
    on_exit = function() done = true end,
  })
  vim.wait(300000, function() return done end, 5)
end
local wall = ms() - t0
timer:stop()
table.sort(lat)
local function pct(q) return lat[math.max(1, math.ceil(#lat * q))] or 0 end
local hwm = "?"
for l in io.lines("/proc/self/status") do
  hwm = l:match("^VmHWM:%s*(%d+)") or hwm
end
io.stdout:write(
  string.format(
    "%-10s wall %.2f s  timer lateness p50 %.1f ms p99 %.1f ms  peak RSS %.0f MiB\n",
    mode,
    wall / 1000,
    pct(0.5),
    pct(0.99),
    tonumber(hwm) / 1024
  )
)
vim.cmd("qa!")
