-- tests/nvim/spec_stress.lua — flood, coexistence with jobstart/uv.spawn, SIGKILL, :qa.
return function(test, T, H)
  local api = vim.api
  local uv = vim.uv or vim.loop
  local p = require("proctor")
  local engine = require("proctor.engine")

  local function pct(t, q)
    table.sort(t)
    if #t == 0 then return 0 end
    return t[math.max(1, math.ceil(#t * q))]
  end

  test("100 MiB flood into a visible console: true tail shown, skipped bytes reported", function()
    vim.cmd("silent! only!")
    local lat = {}
    local timer = uv.new_timer()
    local expect = H.hrms() + 10
    timer:start(10, 10, function()
      local now = H.hrms()
      lat[#lat + 1] = now - expect
      expect = now + 10
    end)
    local t0 = H.hrms()
    -- 1,310,720 lines of 80 bytes = 100 MiB, then a marker
    local ex = p.run({
      cmd = "yes \"$(printf '%079d' 0)\" | head -c 104857600; echo TAIL-MARK",
      label = "flood",
    })
    local buf = ex:open({ enter = false })
    T.ok(#vim.fn.win_findbuf(buf) > 0, "console visible")
    -- wait without reading the buffer (that would disturb the measurement)
    local done = vim.wait(
      60000,
      function()
        return engine.state[ex.id] == "completed" and require("proctor.console").idle(ex.id)
      end,
      5
    )
    if not done then
      local r = ex:record()
      error(
        string.format(
          "flood did not end in 60 s: lua state %s, core state %s, stdout bytes %s",
          tostring(engine.state[ex.id]),
          r and r.state,
          r and r.bytes and r.bytes.stdout
        )
      )
    end
    local wall = H.hrms() - t0
    local final = H.wait_final(buf, 5000)
    timer:stop()
    timer:close()
    T.match(final, "completed: exit 0")
    local l = H.lines(buf)
    T.eq(l[#l - 1], "TAIL-MARK", "true tail")
    T.eq(l[#l - 2], string.rep("0", 79), "line before the tail")
    local skipped
    for _, s in ipairs(api.nvim_buf_get_lines(buf, 0, -1, false)) do
      skipped = skipped or tonumber(s:match("%[proctor%] … skipped (%d+) bytes"))
    end
    T.ok(skipped and skipped > 0, "skipped-bytes line present")
    local rec = ex:record()
    T.eq(rec.bytes.stdout, 104857600 + #"TAIL-MARK\n", "byte count")
    T.say(
      string.format(
        "# flood: 100 MiB in %.2f s, 10 ms timer lateness p50 %.1f ms p99 %.1f ms max %.1f ms",
        wall / 1000,
        pct(lat, 0.5),
        pct(lat, 0.99),
        pct(lat, 1)
      )
    )
    vim.cmd("silent! only!")
    p.delete(ex.id)
  end)

  test(
    "coexistence: proctor, jobstart and uv.spawn at once, every exit code right, no zombie",
    function()
      -- every exit code twice for proctor and jobstart, all three at once (each
      -- jobstart forks Neovim in its main loop: ~50 ms a fork on a loaded
      -- machine, so 1,000 of each took 113 s at load 15); on a light run
      -- (PROCTOR_TEST_LIGHT=1, every Neovim of tests/run but the first) once.
      -- The program: build/test-true N exits N (tests/c/true.c), a quarter of
      -- the CPU of `sh -c "exit N"` per start.
      local exit_n = H.root .. "/build/test-true"
      local light = os.getenv("PROCTOR_TEST_LIGHT") == "1"
      local N1, N2, N3 = 512, 512, 200
      if light then
        N1, N2, N3 = 256, 256, 100
      end
      local got1, got2, got3 = {}, {}, {}
      local n1, n2, n3 = 0, 0, 0
      local bad = {}
      local t0 = H.hrms()
      for i = 1, N1 do
        local ex, err = p.run({
          cmd = { exit_n, tostring(i % 256) },
          stdin = false,
          on_exit = function(_, rec)
            got1[i] = rec.exit_code
            n1 = n1 + 1
          end,
        })
        if not ex then bad[#bad + 1] = "proctor " .. i .. ": " .. tostring(err) end
      end
      for i = 1, N2 do
        local j = vim.fn.jobstart({ exit_n, tostring(i % 256) }, {
          on_exit = function(_, code)
            got2[i] = code
            n2 = n2 + 1
          end,
        })
        if j <= 0 then bad[#bad + 1] = "jobstart " .. i end
      end
      for i = 1, N3 do
        local h
        h = uv.spawn(exit_n, { args = { tostring(i % 256) } }, function(code)
          got3[i] = code
          n3 = n3 + 1
          h:close()
        end)
        if not h then bad[#bad + 1] = "uv.spawn " .. i end
      end
      T.eq(#bad, 0, table.concat(bad, "; "))
      H.wait(60000, function() return n1 == N1 and n2 == N2 and n3 == N3 end, "all exits")
      local wall = H.hrms() - t0
      for i = 1, N1 do
        if got1[i] ~= i % 256 then bad[#bad + 1] = "proctor " .. i .. "=" .. tostring(got1[i]) end
      end
      for i = 1, N2 do
        if got2[i] ~= i % 256 then bad[#bad + 1] = "jobstart " .. i .. "=" .. tostring(got2[i]) end
      end
      for i = 1, N3 do
        if got3[i] ~= i % 256 then bad[#bad + 1] = "spawn " .. i .. "=" .. tostring(got3[i]) end
      end
      T.eq(#bad, 0, table.concat(vim.list_slice(bad, 1, 10), "; "))
      -- Neovim reaps its own jobs' exits as it processes them: no zombie stays
      local ch
      local clean = vim.wait(10000, function()
        ch = H.children(vim.fn.getpid())
        return ch.Z == 0
      end, 20)
      T.ok(clean, "zombies under Neovim: " .. table.concat(ch.list, " "))
      T.say(string.format("# coexistence: %d processes in %.2f s", N1 + N2 + N3, wall / 1000))
      p.purge()
    end
  )

  test("SIGKILL of a Neovim with live executions: all descendants gone", function()
    local mark = "PROCTOR_TEST_MARK=kill" .. uv.hrtime()
    local k, v = mark:match("^(.-)=(.*)$")
    local c = H.child({ env = { [k] = v } })
    c.lua([[
      local p = require("proctor")
      p.setup({ notify = "never" })
      p.run({ cmd = { "sleep", "300" } })
      p.run({ cmd = { "sleep", "300" }, pty = true })
      p.run({ cmd = "sleep 300 & sleep 300" })
      p.run({ cmd = "setsid -f sleep 300; sleep 300" })
      p.run({ cmd = "sleep 300 & sleep 300", pty = true })
    ]])
    c.wait(5000, "#require('proctor').list({ state = 'running' }) == 5", "5 running")
    H.wait(3000, function() return #H.marked_pids(mark) >= 1 + 1 + 6 + 2 end, "processes up")
    local before = #H.marked_pids(mark)
    uv.kill(c.pid, "sigkill")
    local t0 = H.hrms()
    -- the shepherd sees its host's socket close and kills every job: a
    -- condition, waited for with a deadline for the failure message only
    local ok = vim.wait(30000, function() return #H.marked_pids(mark) == 0 end, 10)
    local took = H.hrms() - t0
    local left = H.marked_pids(mark)
    T.ok(
      ok,
      string.format(
        "%d of %d processes left after 30 s: %s",
        #left,
        before,
        table.concat(left, " ")
      )
    )
    T.say(string.format("# sigkill: %d processes gone in %.0f ms", before, took))
  end)

  test(
    ":qa cancels with SIGTERM and gives the grace: clean exits, and the history says canceled",
    function()
      local dir = vim.fn.tempname()
      vim.fn.mkdir(dir, "p")
      local hist = dir .. "/h.mpk"
      local mark = "PROCTOR_TEST_MARK=qaterm" .. uv.hrtime()
      local k, v = mark:match("^(.-)=(.*)$")
      local c = H.child({ env = { [k] = v } })
      local ok, err = pcall(function()
        -- On TERM each job shuts down cleanly in 300 ms and leaves a mark; a
        -- SIGKILL (or the shepherd's 200 ms when Neovim is gone) leaves none.
        c.lua(string.format(
          [[
        local p = require("proctor")
        p.setup({ notify = "never", engine = { kill_grace_ms = 20000 }, history = { enabled = true, file = %q } })
        for i = 1, 3 do
          p.run({ cmd = "trap 'sleep 0.3; echo clean > %s/done-" .. i .. "; exit 0' TERM; echo ready; sleep 300 & wait",
            pty = false, label = "svc" .. i })
        end
      ]],
          hist,
          dir
        ))
        c.wait(10000, "#require('proctor').list({ state = 'running' }) == 3", "3 running")
        c.wait(
          10000,
          [[(function()
        for _, r in ipairs(require('proctor').list()) do
          local out = require('proctor.engine').current():read(r.id, 'stdout', 0, 100) or ''
          if not out:find('ready') then return false end
        end
        return true
      end)()]],
          "every TERM trap is set"
        )
        vim.rpcnotify(c.job, "nvim_command", "qa")
        H.wait(30000, function() return vim.fn.jobwait({ c.job }, 0)[1] ~= -1 end, "Neovim exits")
      end)
      c.stop()
      if not ok then error(err, 0) end
      for i = 1, 3 do
        T.eq(
          vim.fn.filereadable(dir .. "/done-" .. i),
          1,
          "job " .. i .. " did not get SIGTERM and the grace to finish"
        )
      end
      -- Neovim's own exit path ended them (not the shepherd noticing it gone):
      -- the history it wrote says canceled, by the user's cancel.
      local e = assert(require("proctor.core").new({ history_file = hist }))
      local recs = e:list()
      local warnings = e:warnings()
      e:close()
      T.eq(#warnings, 0, table.concat(warnings, " | "))
      T.eq(#recs, 3, "records in the history")
      for _, r in ipairs(recs) do
        T.eq(r.state, "canceled", "#" .. r.id)
        T.eq(r.reason, "canceled", "#" .. r.id)
        T.eq(r.exit_code, 0, "#" .. r.id .. " ended through its TERM trap")
      end
      T.eq(#H.marked_pids(mark), 0, "processes left")
      vim.fn.delete(dir, "rf")
    end
  )

  test(":qa with 50 live executions returns and leaves nothing", function()
    local mark = "PROCTOR_TEST_MARK=qa" .. uv.hrtime()
    local k, v = mark:match("^(.-)=(.*)$")
    local c = H.child({ env = { [k] = v } })
    c.lua([[
      local p = require("proctor")
      p.setup({ notify = "never", engine = { kill_grace_ms = 500 } })
      for i = 1, 50 do
        if i % 10 == 0 then
          p.run({ cmd = "trap '' TERM; sleep 300", stdin = false })     -- needs SIGKILL
        elseif i % 10 == 1 then
          p.run({ cmd = { "sleep", "300" }, pty = true })
        else
          p.run({ cmd = "sleep 300 & sleep 300" })
        end
      end
      p.open(1)
    ]])
    c.wait(10000, "#require('proctor').list({ state = 'running' }) == 50", "50 running")
    local exited
    local t0 = H.hrms()
    vim.rpcnotify(c.job, "nvim_command", "qa")
    local ok = vim.wait(60000, function()
      if not exited and vim.fn.jobwait({ c.job }, 0)[1] ~= -1 then exited = H.hrms() end
      return exited ~= nil
    end, 2)
    T.ok(ok, "Neovim did not exit")
    local took = exited - t0
    T.say(string.format("# :qa with 50 live executions: %.0f ms (grace 500 ms)", took))
    -- :qa returns (no wall bound: load stretches it; the figure is make
    -- bench's) and leaves nothing
    local left = H.marked_pids(mark)
    T.eq(#left, 0, "processes left: " .. table.concat(left, " "))
  end)
end
