-- tests/nvim/spec_console.lua — console rendering, input, close/reopen, late attach.
return function(test, T, H)
  local api = vim.api
  local p = require("proctor")
  local engine = require("proctor.engine")

  -- One window, showing no console: a test that failed half way may leave its
  -- console current, and the next test's open() must not land in it.
  local function close_others()
    vim.cmd("silent! only!")
    if vim.api.nvim_buf_get_name(0):find("^proctor://") then vim.cmd("enew") end
  end

  -- n hidden runs of `true` (labels label1..labeln), once each console's buffer
  -- is made (its terminal waits for a window).
  local function hidden_runs(n, label)
    local CH = require("proctor.console")._H
    local exs = {}
    for i = 1, n do
      exs[i] = p.run({ cmd = "true", label = label .. i, open = { open = "none" } })
    end
    H.wait(30000, function()
      for _, ex in ipairs(exs) do
        if not (CH.pending[ex.id] and CH.pending[ex.id].made_buf) then return false end
      end
      return true
    end, "every console's buffer made")
    return exs
  end

  -- Lines of the console minus the final "[proctor] …" line.
  local function body(buf)
    local l = H.lines(buf)
    if l[#l] and l[#l]:find("^%[proctor%] ") then l[#l] = nil end
    return l
  end

  test("console renders coloured output like a terminal", function()
    close_others()
    local script = [[printf '\033[31mred\033[0m plain \033[1;32mbold green\033[0m\n'; ]]
      .. [[printf '\033[44m  blue bg  \033[0m|\033[4munder\033[24m\n'; printf 'tab\there\n'; exit 2]]
    local ex = p.run({ cmd = script, label = "colours" })
    local buf = ex:open()
    T.eq(api.nvim_buf_get_name(buf), "proctor://" .. ex.id .. "/colours")
    T.eq(vim.bo[buf].buftype, "terminal")
    local final = H.wait_final(buf)
    T.match(final, "^%[proctor%] failed: exit 2 after [%d.]+ m?s$")
    local expected = H.reference_render(
      "\27[31mred\27[0m plain \27[1;32mbold green\27[0m\r\n"
        .. "\27[44m  blue bg  \27[0m|\27[4munder\27[24m\r\ntab\there\r\n"
    )
    T.eq(table.concat(body(buf), "\n"), table.concat(expected, "\n"))
    T.eq(body(buf)[1], "red plain bold green", "no escape sequences in the text")
    -- the terminal coloured the text: on the screen, the cells of "red",
    -- "plain" and "bold green" have three different attributes
    local win = vim.fn.bufwinid(buf)
    vim.fn.win_execute(win, "normal! gg0")
    vim.cmd("redraw")
    local pos = vim.fn.screenpos(win, 1, 1)
    T.ok(pos.row > 0, "line 1 is on the screen")
    T.eq(vim.fn.screenchar(pos.row, pos.col), ("r"):byte())
    T.eq(vim.fn.screenchar(pos.row, pos.col + 10), ("b"):byte())
    local red, plain, green =
      vim.fn.screenattr(pos.row, pos.col),
      vim.fn.screenattr(pos.row, pos.col + 4),
      vim.fn.screenattr(pos.row, pos.col + 10)
    T.ok(
      red ~= plain and green ~= plain and red ~= green,
      ("coloured cells: red %d, plain %d, bold green %d"):format(red, plain, green)
    )
    T.eq(vim.fn.screenattr(pos.row, pos.col + 1), red, "the whole word is red")
  end)

  test("console: \\r progress updates redraw one line", function()
    close_others()
    local ex = p.run({
      -- the bar grows by one # a step: no subshell per step (100 forks took
      -- more than the final line's wait on a loaded machine)
      cmd = [[printf 'start\n'; b=; for i in $(seq 1 50); do b="$b#"; printf '\rprogress %3d%% [%-50s]' $((i*2)) "$b"; done; printf '\ndone\n']],
      pty = true,
    })
    local buf = ex:open()
    local final = H.wait_final(buf)
    T.match(final, "completed: exit 0")
    local want = "start\nprogress 100% [" .. string.rep("#", 50) .. "]\ndone"
    local got = table.concat(body(buf), "\n")
    if got ~= want then
      -- Where the tail was lost: in the engine (its record lacks it) or on
      -- the way to the terminal (the record has it, the console does not).
      local kept = ex:output("pty") or ""
      error(
        ("console %q; the engine kept %d bytes ending %q; backlog %s"):format(
          got,
          #kept,
          kept:sub(-80),
          vim.inspect(H.console_state(ex.id))
        )
      )
    end
  end)

  -- The bytes each console's terminal got (nvim_chan_send wrapped for one test).
  local function count_sends()
    local sent, orig = {}, api.nvim_chan_send
    api.nvim_chan_send = function(chan, data)
      sent[chan] = (sent[chan] or 0) + #data
      return orig(chan, data)
    end
    T.defer(function() api.nvim_chan_send = orig end)
    return sent
  end

  test("console: 10,000 \\r updates show the last; the terminal gets fewer bytes", function()
    close_others()
    local sent = count_sends()
    local ex = p.run({
      cmd = [[awk 'BEGIN { for (i = 1; i <= 10000; i++) printf "\rcount %d", i; print "" }']],
      pty = true,
    })
    local buf = ex:open()
    T.match(H.wait_final(buf), "completed: exit 0")
    T.eq(table.concat(body(buf), "\n"), "count 10000")
    local out = ex:output("pty") or ""
    -- "\rcount " and the digits (38,894 of them) 10,000 times, then \r\n
    T.eq(#out, 10000 * 7 + 38894 + 2, "the ring kept every byte")
    local chan = require("proctor.console")._H.consoles[ex.id].chan
    T.ok(
      sent[chan] and sent[chan] < #out / 4,
      ("the terminal got %s bytes of %d"):format(tostring(sent[chan]), #out)
    )
    T.ok(not H.has_line(buf, "skipped"), "nothing skipped")
  end)

  -- A poll hands over at most output_max_bytes of a stream, the newest; the
  -- bytes before them stay in the ring, and the console reads them from there
  -- when its render comes to them. The whole burst is in the ring before the
  -- first poll (the main loop does not run meanwhile), so the first poll cuts.
  test(
    "console: polls cut to 4 KiB: what a poll left in the ring is read from it, nothing skipped",
    function()
      close_others()
      local cfg = require("proctor.config").get()
      local saved = cfg.output_max_bytes
      cfg.output_max_bytes = 4096
      T.defer(function() cfg.output_max_bytes = saved end)
      local n, total = 5000, 0
      for i = 1, n do
        total = total + #tostring(i) + 1
      end
      local ex = p.run({ cmd = "seq 1 " .. n, open = { open = "current" } })
      local buf = api.nvim_get_current_buf()
      H.hold_until_written(ex.id, total)
      T.match(H.wait_final(buf, 60000), "completed: exit 0")
      T.ok(not H.has_line(buf, "skipped"), "nothing skipped")
      local l = body(buf)
      T.eq(#l, n, "lines shown")
      for i = 1, n do
        T.eq(l[i], tostring(i), "line " .. i)
      end
    end
  )

  -- The same holes, read on the main thread through the output event's handle
  -- on its ring (ring:read, under the ring's own mutex): never eng:read, which
  -- waits for the engine thread (busy with the flood, under load 16-100 ms).
  test(
    "console: a hole is read through the event's ring, never with eng:read (a round trip)",
    function()
      close_others()
      local cfg = require("proctor.config").get()
      local saved = cfg.output_max_bytes
      cfg.output_max_bytes = 4096
      T.defer(function() cfg.output_max_bytes = saved end)
      local methods = getmetatable(engine.get()).__index -- the core loaded
      local mt = debug.getregistry()["proctor.core.output"]
      T.ok(mt and mt.__index and mt.__index.read, "the core has an output handle with read()")
      local eread, rread, round_trips, ring_reads = methods.read, mt.__index.read, 0, 0
      methods.read = function(...)
        round_trips = round_trips + 1
        return eread(...)
      end
      mt.__index.read = function(...)
        ring_reads = ring_reads + 1
        return rread(...)
      end
      T.defer(function()
        methods.read = eread
        mt.__index.read = rread
      end)
      local n, total = 5000, 0
      for i = 1, n do
        total = total + #tostring(i) + 1
      end
      local ex = p.run({ cmd = "seq 1 " .. n, open = { open = "current" } })
      local buf = api.nvim_get_current_buf()
      H.hold_until_written(ex.id, total)
      T.match(H.wait_final(buf, 60000), "completed: exit 0")
      T.ok(
        ring_reads > 0,
        ("holes read through the ring: %d (eng:read: %d)"):format(ring_reads, round_trips)
      )
      T.eq(round_trips, 0, "eng:read calls (round trips to the engine thread)")
      T.ok(not H.has_line(buf, "skipped"), "nothing skipped")
      local l = body(buf)
      T.eq(#l, n, "lines shown")
      for i = 1, n do
        T.eq(l[i], tostring(i), "line " .. i)
      end
    end
  )

  test(
    "console: run{ pty, open } does not ask the engine thread again for the size its process started with",
    function()
      close_others()
      -- eng:resize waits for the engine thread's answer (which is busy starting
      -- the job): run() must not call it for the size the spec already had
      local methods = getmetatable(engine.get()).__index
      local resize, calls = methods.resize, 0
      methods.resize = function(...)
        calls = calls + 1
        return resize(...)
      end
      T.defer(function() methods.resize = resize end)
      local ex = p.run({ cmd = "stty size", pty = true, open = { open = "current" } })
      T.eq(calls, 0, "eng:resize calls in run()")
      local buf = require("proctor.console")._H.consoles[ex.id].buf
      T.match(H.wait_final(buf), "completed: exit 0")
      local cols, rows = require("proctor.compat").text_size(vim.fn.bufwinid(buf))
      T.eq(body(buf)[1], rows .. " " .. cols, "the process got the window's size")
    end
  )

  test(
    "console: output reaches the terminal in the drain tick that polled it, the exit's final line in the tick that saw the exit",
    function()
      close_others()
      -- Number the drain ticks (engine._H.drain, scheduled by the wake fd) and
      -- note which one dispatched the run's first output and its end, and in
      -- which one each send to its terminal happened.
      local EH = engine._H
      local drain, n, cur = EH.drain, 0, nil
      EH.drain = function(...)
        n = n + 1
        cur = n
        drain(...)
        cur = nil
      end
      T.defer(function() EH.drain = drain end)
      local id, first_out, end_tick
      engine.subscribe("test_ticks", function(ev)
        if ev.id ~= id then return end
        if ev.type == "output" and not first_out then first_out = cur or "a later tick" end
        if ev.type == "state" and engine.TERMINAL[ev.state] then
          end_tick = cur or "a later tick"
        end
      end)
      T.defer(function()
        engine.subscribe("test_ticks", function() end)
      end)
      local sends, orig = {}, api.nvim_chan_send
      api.nvim_chan_send = function(chan, data)
        sends[#sends + 1] = { tick = cur or "a later tick", data = data }
        return orig(chan, data)
      end
      T.defer(function() api.nvim_chan_send = orig end)
      local ex = p.run({ cmd = "printf 'hello\\n'", pty = true, open = { open = "current" } })
      id = ex.id
      local buf = require("proctor.console")._H.consoles[id].buf
      T.match(H.wait_final(buf), "completed: exit 0")
      local hello, final
      for _, s in ipairs(sends) do
        if not hello and s.data:find("hello", 1, true) then hello = s end
        if s.data:find("[proctor]", 1, true) then final = s end
      end
      T.ok(hello and final, "both were sent")
      T.eq(type(first_out), "number", "the first output came in a drain tick")
      T.eq(type(end_tick), "number", "the end came in a drain tick")
      T.eq(hello.tick, first_out, "the tick of the first output's send")
      T.eq(final.tick, end_tick, "the tick of the final line's send")
    end
  )

  test(
    "console: run{ open } of a console shown now wakes the engine before making its terminal; hidden ones keep the turn's one wake-up",
    function()
      close_others()
      local eng = engine.get()
      local orig = api.nvim_open_term
      local at_term -- wake-ups of the engine thread when the terminal was made
      local w0
      api.nvim_open_term = function(...)
        if w0 and at_term == nil then at_term = eng:wakeups() - w0 end
        return orig(...)
      end
      T.defer(function() api.nvim_open_term = orig end)
      w0 = eng:wakeups()
      local ex = p.run({ cmd = "printf 'up\\n'", pty = true, open = { open = "current" } })
      local woken = eng:wakeups() - w0
      T.eq(at_term, 1, "the engine thread was woken before the terminal was made")
      T.eq(woken, 1, "one wake-up")
      local buf = require("proctor.console")._H.consoles[ex.id].buf
      T.match(H.wait_final(buf), "completed: exit 0")
      -- runs without a window: still no wake-up inside the loop
      w0 = eng:wakeups()
      local ids = {}
      for i = 1, 3 do
        ids[i] = p.run({ cmd = "true", open = { open = "none" }, notify = false }).id
      end
      T.eq(eng:wakeups() - w0, 0, "no wake-up inside a loop of runs without a window")
      for _, id in ipairs(ids) do
        T.ok(p.get(id):wait(30000))
      end
    end
  )

  test(
    "console: the final value and line are in the buffer's lines on the main loop's next turn after their send, not on the terminal's 10 ms refresh",
    function()
      close_others()
      -- The last send to a console ends a synchronized update (mode 2026): Neovim
      -- 0.12 then refreshes the buffer on the next turn of its loop (an event
      -- queued before anything scheduled after the send); older ones ignore it
      -- and refresh on their 10 ms timer, which queues its event later.
      local sends, orig, id = {}, api.nvim_chan_send, nil
      local after -- the buffer's lines on the turn after the final send
      api.nvim_chan_send = function(chan, data)
        local c = id and require("proctor.console")._H.consoles[id]
        if c and chan == c.chan then sends[#sends + 1] = data end
        local r = orig(chan, data)
        if c and chan == c.chan and data:find("[proctor]", 1, true) then
          vim.schedule(function() after = H.lines(c.buf) end)
        end
        return r
      end
      T.defer(function() api.nvim_chan_send = orig end)
      local ex = p.run({
        cmd = "printf '\\r1\\r2\\r3'",
        pty = true,
        open = { open = "current" },
      })
      id = ex.id
      local buf = require("proctor.console")._H.consoles[id].buf
      T.match(H.wait_final(buf), "completed: exit 0")
      H.wait(5000, function() return after ~= nil end, "the turn after the final send")
      T.ok(#sends > 0, "sends seen")
      if vim.fn.has("nvim-0.12") == 1 then
        local text = table.concat(after, "\n")
        T.match(text, "3%s*\n%[proctor%] completed", "the final value and line, shown at once")
      end
      T.eq(
        sends[#sends]:sub(-16),
        "\27[?2026h\27[?2026l",
        "the last send ends a synchronized update"
      )
    end
  )

  test("console: a coloured \\r progress bar renders as :terminal renders its bytes", function()
    close_others()
    -- a bar in two colours, erased and redrawn in place, percent after it; a
    -- second bar on the next line; then a plain line
    -- (no subshell per step: forks are slow on a loaded machine)
    local script = [[b=; for i in $(seq 1 25); do b="$b#"; d=; j=$i; ]]
      .. [[while [ $j -lt 25 ]; do d="$d-"; j=$((j + 1)); done; ]]
      .. [[printf '\r\033[K\033[32m%s\033[2m%s\033[0m %3d%%' "$b" "$d" $((i * 4)); done; ]]
      .. [[printf '\n'; for i in 1 2 3 4 5 6 7 8 9; do printf '\r\033[1;3%dmstep %d\033[0m' $i $i; ]]
      .. [[done; printf '\ndone\n']]
    local ex = p.run({ cmd = script, pty = true })
    local buf = ex:open()
    T.match(H.wait_final(buf), "completed: exit 0")
    local win = vim.fn.bufwinid(buf)
    local function screen(b)
      api.nvim_win_set_buf(win, b)
      vim.fn.win_execute(win, "normal! gg0")
      vim.cmd("redraw")
      local pos = vim.fn.screenpos(win, 1, 1)
      local rows = {}
      for r = 0, 2 do
        local cells = {}
        for col = 0, 40 do
          local row, c = pos.row + r, pos.col + col
          cells[#cells + 1] = vim.fn.screenchar(row, c) .. ":" .. vim.fn.screenattr(row, c)
        end
        rows[#rows + 1] = table.concat(cells, " ")
      end
      return rows
    end
    -- :terminal's rendering of the same bytes (the ring keeps every one), in
    -- the same window (the same width)
    local ref = api.nvim_create_buf(false, true)
    T.defer(function() pcall(api.nvim_buf_delete, ref, { force = true }) end)
    api.nvim_win_set_buf(win, ref)
    local chan = api.nvim_open_term(ref, {})
    api.nvim_chan_send(chan, (ex:output("pty")))
    H.wait(5000, function() return H.has_line(ref, "^done") end, "the reference terminal")
    T.eq(table.concat(body(buf), "\n"), table.concat(H.lines(ref), "\n"))
    T.eq(body(buf)[1], "######################### 100%")
    T.eq(table.concat(screen(buf), "\n"), table.concat(screen(ref), "\n"), "the cells' attributes")
  end)

  test("console: 10,000 lines, nothing lost, last line present", function()
    close_others()
    local old = vim.o.scrollback
    vim.o.scrollback = 100000
    local ex = p.run({ cmd = "seq 1 10000; echo last-line" })
    local buf = ex:open()
    vim.o.scrollback = old
    H.wait_final(buf, 20000)
    local l = body(buf)
    T.eq(l[#l], "last-line")
    T.eq(#l, 10001, "line count")
    for i = 1, 10000 do
      if l[i] ~= tostring(i) then error("line " .. i .. " is " .. tostring(l[i])) end
    end
    T.ok(not H.has_line(buf, "skipped"), "nothing skipped")
  end)

  -- Short lines in a flood: the render is bounded per tick by lines and time,
  -- not only by bytes. The engine gets every byte; the console shows the tail.
  for _, pty in ipairs({ false, true }) do
    test(
      "console: a flood of short lines (seq), "
        .. (pty and "PTY" or "pipe")
        .. ": nothing lost, tail shown",
      function()
        close_others()
        local prev = vim.api.nvim_get_current_buf()
        T.defer(function() pcall(vim.api.nvim_win_set_buf, 0, prev) end)

        local n = 300000
        local total = 0
        for d = 1, 6 do -- bytes of `seq 1 n`: each number and its \n
          local lo, hi = 10 ^ (d - 1), math.min(n, 10 ^ d - 1)
          if lo <= n then total = total + (hi - lo + 1) * (d + 1) end
        end
        local ex = p.run({ cmd = "seq 1 " .. n, pty = pty, open = { open = "current" } })
        local buf = vim.api.nvim_get_current_buf()
        local rec = T.ok(ex:wait(60000))
        T.eq(rec.state, "completed")
        local stream = pty and "pty" or "stdout"
        -- a PTY turns each \n into \r\n
        T.eq(rec.bytes[stream], pty and total + n or total, "bytes the engine got")
        H.wait(30000, function()
          local l = body(buf)
          for i = #l, math.max(1, #l - 5), -1 do
            if l[i] == tostring(n) then return true end
          end
        end, "the last number shown")
      end
    )
  end

  -- The terminal's cost is measured, not assumed: a render tick gives the
  -- terminal what fits in the time left of its bound at the cost recent sends
  -- had. Sends are made to look slow (the render's clock moves 25 us per unit:
  -- a line, or UNIT_BYTES bytes of one); every tick after the first send stays
  -- within the bound, counted in that cost (the old 300 lines a tick: 8 ms).
  test(
    "console: a tick's terminal writes fit its time bound at their measured cost (slow sends)",
    function()
      close_others()
      local prev = api.nvim_get_current_buf()
      local CH = require("proctor.console")._H
      local uv = vim.uv or vim.loop
      local COST_NS = 25000 -- the cap of the measured cost (UNIT_US_MAX)
      local extra, tick_cost, ticks, watching = 0, 0, {}, true
      local saved =
        { clock = CH.clock, render = CH.render, send = api.nvim_chan_send, unit = CH.unit_us }
      T.defer(function()
        CH.clock, CH.render, CH.unit_us = saved.clock, saved.render, saved.unit
        api.nvim_chan_send = saved.send
        pcall(api.nvim_win_set_buf, 0, prev)
      end)
      CH.unit_us = 15
      CH.clock = function() return uv.hrtime() + extra end
      api.nvim_chan_send = function(ch, data)
        saved.send(ch, data)
        if not watching then return end
        local _, lines = data:gsub("\n", "")
        local cost = COST_NS * (lines + #data / CH.UNIT_BYTES)
        extra, tick_cost = extra + cost, tick_cost + cost
      end
      CH.render = function(...)
        tick_cost = 0
        saved.render(...)
        if tick_cost > 0 then ticks[#ticks + 1] = tick_cost end
      end
      local n = 20000 -- 108,894 bytes: under backlog_limit, every line is rendered
      local ex = p.run({ cmd = "seq 1 " .. n, open = { open = "current" } })
      local buf = api.nvim_get_current_buf()
      T.eq(T.ok(ex:wait(60000)).state, "completed")
      H.wait(60000, function()
        local l = body(buf)
        return l[#l] == tostring(n)
      end, "the last number shown")
      watching = false
      local l = body(buf)
      for i = 0, 999 do -- the tail, every line in order
        T.eq(l[#l - i], tostring(n - i), "line " .. (#l - i))
      end
      T.ok(#ticks > 20, "render ticks: " .. #ticks)
      -- the last send's own unit aside, and the \r a pipe's \n gets
      local bound = CH.RENDER_MS * 1e6 + 2 * COST_NS
      for i = 2, #ticks do
        T.ok(
          ticks[i] <= bound,
          string.format("tick %d: %.2f ms of sends (bound %.2f)", i, ticks[i] / 1e6, bound / 1e6)
        )
      end
    end
  )

  -- Making the consoles of runs started together: a tick does not begin one
  -- that the cost of the last ones says would take it past its bound. Makes
  -- are made to look slow (the clock moves 1.5 ms per console): one a tick.
  test("console making: a tick begins no console its bound has no room for (slow makes)", function()
    close_others()
    local CH = require("proctor.console")._H
    local COST_NS = 1.5e6
    local extra, tick_cost, tick_n, ticks = 0, 0, 0, {}
    local saved = { clock = CH.clock, make = CH.new_buffer, some = CH.make_some, ms = CH.make_ms }
    T.defer(function()
      CH.clock, CH.new_buffer, CH.make_some, CH.make_ms =
        saved.clock, saved.make, saved.some, saved.ms
    end)
    CH.make_ms = 1
    CH.clock = function() return extra end -- only the makes move it: counted, not timed
    CH.new_buffer = function(...)
      local b = saved.make(...)
      extra, tick_cost, tick_n = extra + COST_NS, tick_cost + COST_NS, tick_n + 1
      return b
    end
    CH.make_some = function(...)
      tick_cost, tick_n = 0, 0
      saved.some(...)
      if tick_n > 0 then ticks[#ticks + 1] = { tick_n, tick_cost } end
    end
    local exs = hidden_runs(12, "mk")
    local n = 0
    for i, t in ipairs(ticks) do
      n = n + t[1]
      T.ok(
        t[1] == 1 or t[2] <= CH.MAKE_MS * 1e6,
        string.format(
          "tick %d: %d consoles, %.1f ms (bound %d ms)",
          i,
          t[1],
          t[2] / 1e6,
          CH.MAKE_MS
        )
      )
    end
    T.eq(n, 12, "consoles made in the ticks")
    for _, ex in ipairs(exs) do
      ex:wait(10000)
      p.delete(ex.id)
    end
  end)

  -- A hidden run's console is made in two steps: its buffer on a making tick
  -- (at most one a tick when they are dear: each is made to look like 1.5 ms,
  -- the clock moving only when nvim_create_buf is called: counted, not timed),
  -- and its terminal (nvim_open_term, the dearer half) only when a window
  -- first shows it: a fan-out's hundred hidden consoles make no terminal.
  test(
    "console making: a hidden run's console gets its buffer on a making tick and its terminal only when first shown",
    function()
      close_others()
      local CH = require("proctor.console")._H
      local COST_NS = 1.5e6
      local fake, in_make, ticks, terms = 0, false, {}, 0
      local cur
      local saved = {
        clock = CH.clock,
        some = CH.make_some,
        ms = CH.make_ms,
        buf = api.nvim_create_buf,
        term = api.nvim_open_term,
      }
      T.defer(function()
        CH.clock, CH.make_some, CH.make_ms = saved.clock, saved.some, saved.ms
        api.nvim_create_buf, api.nvim_open_term = saved.buf, saved.term
        close_others()
      end)
      CH.make_ms = 1
      CH.clock = function() return in_make and fake or saved.clock() end
      api.nvim_create_buf = function(...)
        if in_make then
          fake, cur.bufs, cur.ns = fake + COST_NS, cur.bufs + 1, cur.ns + COST_NS
        end
        return saved.buf(...)
      end
      api.nvim_open_term = function(...)
        terms = terms + 1
        return saved.term(...)
      end
      CH.make_some = function(...)
        cur, in_make = { bufs = 0, ns = 0 }, true
        saved.some(...)
        in_make = false
        if cur.bufs > 0 then ticks[#ticks + 1] = cur end
      end
      local exs = {}
      for i = 1, 10 do
        exs[i] = p.run({ cmd = "echo made" .. i, label = "two" .. i, open = { open = "none" } })
      end
      local function made(ex) return CH.pending[ex.id] and CH.pending[ex.id].made_buf end
      H.wait(30000, function()
        for _, ex in ipairs(exs) do
          if not (made(ex) or CH.consoles[ex.id]) then return false end
        end
        return #CH.pending_order == 0
      end, "every console's buffer made")
      for _, ex in ipairs(exs) do
        ex:wait(10000)
      end
      engine.pump()
      local bufs = 0
      for i, t in ipairs(ticks) do
        bufs = bufs + t.bufs
        T.ok(
          t.bufs == 1,
          string.format(
            "tick %d: %d buffers (%.1f ms, bound %d ms)",
            i,
            t.bufs,
            t.ns / 1e6,
            CH.MAKE_MS
          )
        )
      end
      T.eq(bufs, 10, "buffers made in the making ticks")
      T.eq(terms, 0, "terminals made for hidden consoles")
      -- the buffer is a console's already: named, typed, its id
      local ex = exs[3]
      local buf = made(ex)
      T.ok(buf, "the buffer of a hidden run's console")
      T.eq(api.nvim_buf_get_name(buf), "proctor://" .. ex.id .. "/two3")
      T.eq(vim.bo[buf].filetype, "proctor")
      T.eq(vim.b[buf].proctor_id, ex.id)
      -- shown (:buffer), it gets its terminal at that window's size, and its output
      vim.cmd("vsplit")
      vim.cmd("buffer " .. buf)
      local win = api.nvim_get_current_win()
      H.wait(10000, function() return CH.consoles[ex.id] ~= nil end, "its terminal made")
      local c = CH.consoles[ex.id]
      T.eq(c.buf, buf, "the same buffer")
      T.eq(terms, 1, "terminals made")
      T.eq(c.parked, false, "shown: not parked")
      T.eq(c.size_key, CH.key_of({ win }), "the terminal took the window's size")
      T.eq(vim.bo[buf].buftype, "terminal")
      T.match(H.wait_final(buf), "completed: exit 0")
      T.ok(H.has_line(buf, "made3"), "its output")
      -- opened through the API, another gets its terminal at once
      local b5 = made(exs[5])
      T.eq(exs[5]:open({ open = "current" }), b5, "its buffer")
      T.eq(terms, 2, "terminals made")
      close_others()
      for _, e in ipairs(exs) do
        p.delete(e.id)
      end
    end
  )

  -- Between its two steps a console's buffer exists without its terminal; a
  -- window that shows it then (:buffer) gets the terminal at its own size.
  test(
    "console making: a buffer shown before its terminal is made gets it at that window's size",
    function()
      close_others()
      local CH = require("proctor.console")._H
      local saved =
        { clock = CH.clock, some = CH.make_some, ms = CH.make_ms, buf = api.nvim_create_buf }
      local fake, in_make, shown = 0, false, nil
      T.defer(function()
        CH.clock, CH.make_some, CH.make_ms = saved.clock, saved.some, saved.ms
        api.nvim_create_buf = saved.buf
        close_others()
      end)
      CH.make_ms = 1
      CH.clock = function() return in_make and fake or saved.clock() end
      api.nvim_create_buf = function(...)
        if in_make then fake = fake + 1.5e6 end -- a dear buffer: its terminal waits for a later tick
        return saved.buf(...)
      end
      local ex
      CH.make_some = function(...)
        in_make = true
        saved.some(...)
        in_make = false
        local stub = ex and CH.pending[ex.id]
        if stub and stub.made_buf and not shown then
          vim.cmd("vsplit")
          api.nvim_win_set_buf(0, stub.made_buf)
          shown = api.nvim_get_current_win()
        end
      end
      ex = p.run({ cmd = "echo between", label = "between", open = { open = "none" } })
      H.wait(30000, function() return CH.consoles[ex.id] ~= nil end, "the console made")
      T.ok(shown, "its buffer was shown before its terminal was made")
      local c = CH.consoles[ex.id]
      T.eq(api.nvim_win_get_buf(shown), c.buf, "the window shows the console")
      T.eq(c.parked, false, "shown: not parked")
      T.eq(c.size_key, CH.key_of({ shown }), "the terminal took the window's size")
      H.wait(
        10000,
        function() return table.concat(H.lines(c.buf), "\n"):find("between", 1, true) ~= nil end,
        "its output"
      )
      ex:wait(10000)
      close_others()
      p.delete(ex.id)
    end
  )

  -- The bars are redrawn once per tick of state events: with a fan-out's
  -- hidden consoles, asking each console for its windows (vim.fn.win_findbuf)
  -- cost 1-2 ms a tick; the windows are few.
  test("bars: a redraw looks at the windows, not at every hidden console", function()
    close_others()
    local CH = require("proctor.console")._H
    local exs = hidden_runs(20, "bar")
    local calls, orig = 0, vim.fn.win_findbuf
    vim.fn.win_findbuf = function(...)
      calls = calls + 1
      return orig(...)
    end
    local ok, err = pcall(function()
      T.eq(CH.redraw_bars(), nil, "no window shows a console")
      T.eq(calls, 0, "vim.fn.win_findbuf calls in a redraw with 20 hidden consoles")
      local buf = exs[7]:open({ open = "current" })
      T.eq(buf, CH.consoles[exs[7].id].buf)
      T.eq(CH.redraw_bars(), exs[7].id, "the console a window shows")
    end)
    vim.fn.win_findbuf = orig
    close_others()
    for _, ex in ipairs(exs) do
      ex:wait(10000)
      p.delete(ex.id)
    end
    if not ok then error(err, 0) end
  end)

  test("a hidden console parks a bounded tail and shows the true end when opened", function()
    close_others()
    local console = require("proctor.console")
    local cfg = require("proctor.config").get().console
    -- A visible console would keep up to 8 MiB; a parked one at most twice the
    -- 16 KiB tail. About 1.3 MB are printed.
    local saved = { cfg.backlog_limit, cfg.tail_bytes }
    cfg.backlog_limit, cfg.tail_bytes = 8 * 2 ^ 20, 16384
    local ok, err = pcall(function()
      local ex = p.run({
        cmd = "read go; seq 1 200000; echo last-line",
        stdin = true,
        open = { open = "none" },
      })
      T.defer(function() ex:cancel() end)
      local c = console.get(ex.id)
      T.ok(c, "run{} with open = none still creates the console")
      -- Shown, then hidden before any output: the console is not parked until
      -- a render tick sees that no window shows it.
      local buf = ex:open()
      T.eq(buf, c.buf, "same buffer")
      vim.cmd("close")
      T.eq(#vim.fn.win_findbuf(c.buf), 0, "hidden")
      T.eq(ex:input("go\n"), true)
      -- The main loop is held (no render tick runs) until the execution ended
      -- in the core, then every event is handled at once: the whole output
      -- reached the console before any tick parked it. Parking must bound
      -- what arrived before it too, not only what arrives after.
      local core_eng = engine.current()
      local deadline = H.hrms() + 60000
      while H.hrms() < deadline do
        local r = core_eng:get(ex.id)
        if r and engine.TERMINAL[r.state] then break end
        (vim.uv or vim.loop).sleep(5)
      end
      while engine.pump() > 0 do
      end
      T.ok((c.backlog.next.stdout or 0) >= 1288895 + 10, "all output handed over in one go")
      ex:wait(10000)
      H.wait(3000, function() return c.ended ~= nil and c.parked end, "the hidden console parked")
      T.eq(#vim.fn.win_findbuf(c.buf), 0, "hidden")
      T.ok(c.backlog.n <= 2 * cfg.tail_bytes, "parked backlog is bounded: " .. c.backlog.n)
      T.ok(not H.has_line(c.buf, "last%-line"), "nothing rendered while hidden")
      T.eq(ex:open(), c.buf, "same buffer")
      local final = H.wait_final(buf, 5000)
      T.match(final, "completed: exit 0")
      local l = body(buf)
      T.eq(l[#l], "last-line")
      -- a skipped line, then a contiguous tail of the numbers up to 200000
      local skip
      for i, line in ipairs(l) do
        if line:find("^%[proctor%] … skipped %d+ bytes") then skip = i end
      end
      T.ok(skip, "the skipped-bytes line is shown")
      local first = tonumber(l[skip + 1])
      T.ok(first and first > 100000, "the tail starts late: " .. tostring(l[skip + 1]))
      for i = skip + 1, #l - 1 do
        if tonumber(l[i]) ~= first + (i - skip - 1) then error("line " .. i .. " is " .. l[i]) end
      end
      T.eq(tonumber(l[#l - 1]), 200000)
      -- at most tail_bytes (plus the line it starts on) were rendered
      T.ok((#l - skip - 1) * 7 <= cfg.tail_bytes + 4096, "rendered lines: " .. (#l - skip - 1))
    end)
    cfg.backlog_limit, cfg.tail_bytes = saved[1], saved[2]
    if not ok then error(err, 0) end
  end)

  -- A hidden run's console has no terminal until a window shows it; its
  -- output waits as a hidden console's (at most twice tail_bytes) and, shown,
  -- it renders its last tail_bytes, as a hidden console shown again does.
  test(
    "a hidden run's console shown for the first time renders its last tail_bytes, as a hidden console does",
    function()
      close_others()
      local CH = require("proctor.console")._H
      local cfg = require("proctor.config").get().console
      local saved = { cfg.backlog_limit, cfg.tail_bytes }
      cfg.backlog_limit, cfg.tail_bytes = 8 * 2 ^ 20, 16384
      local ok, err = pcall(function()
        -- 23,893 bytes: more than tail_bytes, less than the twice it may keep
        local ex = p.run({ cmd = "seq 1 5000", open = { open = "none" } })
        T.ok(ex:wait(30000))
        local buf
        H.wait(30000, function()
          engine.pump()
          local stub = CH.pending[ex.id]
          buf = stub and stub.made_buf
          return buf ~= nil and stub.ended ~= nil
        end, "its buffer made and its end seen")
        T.eq(CH.consoles[ex.id], nil, "no terminal before it is shown")
        T.ok(CH.pending[ex.id].backlog.n <= 2 * cfg.tail_bytes, "its backlog is bounded")
        vim.cmd("buffer " .. buf) -- the whole width: the skip note is one line
        T.match(H.wait_final(buf), "completed: exit 0")
        local l = body(buf)
        local skip
        for i, line in ipairs(l) do
          if line:find("^%[proctor%] … skipped %d+ bytes") then skip = i end
        end
        T.ok(skip, "the skipped-bytes line is shown")
        local first = tonumber(l[skip + 1])
        T.ok(first and first > 1000, "the tail starts late: " .. tostring(l[skip + 1]))
        for i = skip + 1, #l do
          if tonumber(l[i]) ~= first + (i - skip - 1) then error("line " .. i .. " is " .. l[i]) end
        end
        T.eq(tonumber(l[#l]), 5000)
        -- at most tail_bytes (plus the line it starts on) were rendered
        T.ok((#l - skip) * 5 <= cfg.tail_bytes + 4096, "rendered lines: " .. (#l - skip))
        p.delete(ex.id)
      end)
      cfg.backlog_limit, cfg.tail_bytes = saved[1], saved[2]
      close_others()
      if not ok then error(err, 0) end
    end
  )

  test("console: winbar/statusline shows id, label, state, elapsed, exit", function()
    close_others()
    -- it runs until the test has read the running bar (a fixed sleep could
    -- end first on a loaded machine), then exits 2
    local ex = p.run({ cmd = "read go; exit 2", label = "barred" })
    local buf, win = ex:open()
    H.wait(3000, function() return engine.state[ex.id] == "running" end)
    local bar = require("proctor.console").bar(win)
    T.match(bar, "^proctor #" .. ex.id .. " barred │ running [%d.]+ m?s$")
    local opt = vim.fn.exists("+winbar") == 1 and "winbar" or "statusline"
    T.match(
      require("proctor.compat").get_win_option(win, opt),
      "proctor%.console%.window'%.bar%(%)"
    )
    T.eq(ex:input("go\n"), true)
    H.wait_final(buf)
    T.match(
      require("proctor.console").bar(win),
      "^proctor #" .. ex.id .. " barred │ failed: exit 2 after [%d.]+ m?s$"
    )
    -- a window showing another buffer gets no proctor text
    vim.cmd("enew")
    T.ok(not require("proctor.console").bar(api.nvim_get_current_win()):find("proctor #"))
  end)

  -- Count eng:get calls (gets.n) until gets.restore().
  local function count_gets()
    local methods = getmetatable(assert(engine.get())).__index
    local get = methods.get
    local c = { n = 0 }
    methods.get = function(...)
      c.n = c.n + 1
      return get(...)
    end
    function c.restore() methods.get = get end
    return c
  end

  -- A bar is drawn at each redraw of its window (under a flood, each render):
  -- it must not ask the engine thread (eng:get waits for it) at every draw.
  test("console: the bar asks the engine for a record once per state, not at each draw", function()
    close_others()
    local ex = p.run({ cmd = "read go; exit 3", label = "drawn" })
    local buf, win = ex:open()
    H.wait(3000, function() return engine.state[ex.id] == "running" end)
    local bar = require("proctor.console").bar
    local gets = count_gets()
    local ok, err = pcall(function()
      for _ = 1, 50 do
        T.match(bar(win), "^proctor #" .. ex.id .. " drawn │ running ")
      end
      T.ok(gets.n <= 1, "eng:get calls for 50 draws of a running console's bar: " .. gets.n)
      T.eq(ex:input("go\n"), true)
      H.wait_final(buf)
      gets.n = 0
      for _ = 1, 50 do
        T.match(bar(win), "│ failed: exit 3 after ")
      end
      T.eq(
        gets.n,
        0,
        "eng:get calls for the bar of an ended one (its state event brought the record)"
      )
    end)
    gets.restore()
    if not ok then error(err, 0) end
  end)

  -- A run's console shown at once is drawn before its first state event is
  -- polled: its bar shows what run() knew (queued), without eng:get.
  test("console: a bar drawn before the run's first event shows it queued, no eng:get", function()
    close_others()
    local gets = count_gets()
    local ok, err = pcall(function()
      local ex = p.run({ cmd = "exit 0", label = "early", open = { open = "current" } })
      T.eq(engine.state[ex.id], nil, "no event polled yet")
      local win = require("proctor.console").windows(ex.id)[1]
      T.match(require("proctor.console").bar(win), "^proctor #" .. ex.id .. " early │ queued")
      T.eq(gets.n, 0, "eng:get calls for the bar's first draw")
      H.wait(10000, function() return engine.TERMINAL[engine.state[ex.id]] end)
      T.match(require("proctor.console").bar(win), "│ completed")
      T.eq(gets.n, 0, "eng:get calls for the bar once the run ended")
    end)
    gets.restore()
    close_others()
    if not ok then error(err, 0) end
  end)

  test("close and reopen a console; wiped buffers replay the ring buffer", function()
    close_others()
    local ex =
      p.run({ cmd = "for i in $(seq 1 30); do echo tick$i; sleep 0.02; done", label = "reopen" })
    local buf, win = ex:open()
    H.wait(3000, function() return H.has_line(buf, "^tick3$") end, "first output")
    api.nvim_win_close(win, true)
    T.eq(engine.state[ex.id], "running", "closing the window does not stop the process")
    local buf2 = ex:open()
    T.eq(buf2, buf, "same buffer")
    H.wait_final(buf, 5000)
    -- wipe it: the next open replays everything from the ring
    vim.cmd("bwipeout! " .. buf)
    local buf3 = ex:open()
    T.ok(buf3 ~= buf)
    H.wait_final(buf3)
    local l = body(buf3)
    T.eq(#l, 30)
    T.eq(l[1], "tick1")
    T.eq(l[30], "tick30")
  end)

  test("output right after the console's window changed size keeps every line in order", function()
    -- Neovim's terminal garbles its buffer when a resize and new output come
    -- between two of its refreshes; the console holds output until then.
    close_others()
    local old = vim.o.scrollback
    vim.o.scrollback = 100000
    local ok, err = pcall(function()
      for round, size in ipairs({ 6, 11, 4 }) do
        local ex = p.run({ cmd = "seq 1 40; read go; seq 41 80", label = "resized" .. round })
        local buf, win = ex:open({ size = 9, reuse = false }) -- a split of its own, resized below
        H.wait(5000, function() return H.has_line(buf, "^40$") end, "first lines")
        vim.wait(50) -- the terminal refreshed after them
        api.nvim_win_set_height(win, size)
        T.eq(ex:input("go\n"), true)
        H.wait_final(buf)
        local l = body(buf)
        T.eq(#l, 80, "round " .. round .. ": line count: " .. table.concat(l, ","))
        for i = 1, 80 do
          if l[i] ~= tostring(i) then
            error("round " .. round .. ": line " .. i .. " is " .. tostring(l[i]))
          end
        end
        close_others()
      end
    end)
    vim.o.scrollback = old
    if not ok then error(err, 0) end
  end)

  test("open mid-run the console of an execution started through the core", function()
    close_others()
    local eng = engine.get()
    -- "late" is printed once the test says so (the file `go` exists)
    local go = vim.fn.tempname()
    local id = eng:start({
      cmd = "echo early-1; echo early-2; while [ ! -e '"
        .. go
        .. "' ]; do sleep 0.02; done; "
        .. "echo late-1; exit 3",
      label = "ext",
      owner = "agent",
    })
    H.wait(3000, function()
      local r = eng:get(id)
      return r and r.bytes and (r.bytes.stdout or 0) >= 16
    end, "early output")
    local buf = p.open(id)
    T.ok(buf, "console opened")
    H.wait(3000, function() return H.has_line(buf, "^early%-2$") end, "replayed output")
    T.ok(not H.has_line(buf, "late"), "late output before it was printed")
    vim.fn.writefile({}, go)
    local final = H.wait_final(buf)
    T.match(final, "failed: exit 3")
    T.eq(table.concat(body(buf), ","), "early-1,early-2,late-1")
  end)

  test("plain-text view and quickfix", function()
    close_others()
    local dir = vim.fn.tempname()
    vim.fn.mkdir(dir, "p")
    vim.fn.writefile({ "int x;", "int y;", "int z;" }, dir .. "/foo.c")
    local ex = p.run({
      cmd = [[printf '\033[1mbuilding\033[0m 10%%\rbuilding 100%%\n'; printf 'foo.c:2:5: error: bad thing\n' >&2; exit 1]],
      cwd = dir,
    })
    ex:wait(5000)
    local lines = require("proctor.views").plain(ex.id)
    T.eq(lines[1], "building 100%")
    T.eq(lines[2], "── stderr ──")
    T.eq(lines[3], "foo.c:2:5: error: bad thing")
    vim.cmd("Proctor text " .. ex.id)
    T.eq(api.nvim_buf_get_name(0), "proctor://" .. ex.id .. "/text")
    T.eq(api.nvim_buf_get_lines(0, 0, 1, false)[1], "building 100%")
    vim.o.errorformat = "%f:%l:%c: %m"
    vim.cmd("Proctor qf " .. ex.id)
    local qf = vim.fn.getqflist()
    local valid
    for _, it in ipairs(qf) do
      if it.valid == 1 then valid = it end
    end
    T.ok(valid, "a valid quickfix entry")
    T.eq(valid.lnum, 2)
    T.eq(valid.col, 5)
    T.eq(vim.fn.fnamemodify(vim.fn.bufname(valid.bufnr), ":p"), dir .. "/foo.c")
    T.match(vim.fn.getqflist({ title = 1 }).title, "proctor #" .. ex.id)
    vim.cmd("cclose")
  end)

  -- Typing into consoles needs a real input loop: drive a child Neovim.
  test("typing reaches cat, a shell read prompt, and a PTY program", function()
    local c = H.child()
    local ok, err = pcall(function()
      c.lua([[require("proctor").setup({ notify = "never" })]])
      -- 1. cat on pipes: a line on <CR> (local echo), ^D closes stdin
      local id, buf = unpack(c.lua([[
        local ex = require("proctor").run({ cmd = "cat" })
        local buf = ex:open()
        return { ex.id, buf }
      ]]))
      c.wait(3000, "require('proctor.engine').state[...] == 'running'", "cat running", id)
      c.input("ihello cat<CR>")
      c.wait(
        3000,
        "#vim.tbl_filter(function(l) return l == 'hello cat' end, lines(...)) == 2",
        "echo + cat output",
        buf
      )
      c.input("<C-d>")
      c.wait(3000, "require('proctor.engine').state[...] == 'completed'", "cat ended on ^D", id)
      c.input("<C-\\><C-n>")
      -- 2. a shell read prompt on pipes
      id, buf = unpack(c.lua([[
        local ex = require("proctor").run({ cmd = "printf 'name? '; read n; echo \"hello $n\"" })
        local buf = ex:open({ open = "current" })
        return { ex.id, buf }
      ]]))
      c.wait(3000, "has_line(..., '^name%?')", "prompt", buf)
      c.input("ibob<BS><BS>ob<CR>")
      c.wait(3000, "has_line(..., '^hello bob$')", "answer", buf)
      c.wait(3000, "require('proctor.engine').state[...] == 'completed'", "read ended", id)
      c.input("<C-\\><C-n>")
      -- 3. an interactive program under a PTY (echo and line editing by the tty)
      id, buf = unpack(c.lua([[
        local ex = require("proctor").run({ cmd = { "/usr/bin/python3", "-c",
          "import sys\nx = input('py> ')\nprint('got', x[::-1])\ny = input('again> ')\nprint('len', len(y))" },
          pty = true })
        local buf = ex:open({ open = "current" })
        return { ex.id, buf }
      ]]))
      c.wait(5000, "has_line(..., '^py>')", "python prompt", buf)
      -- opening a live PTY console starts Terminal mode (console.start_insert): no `i`
      T.eq(c.lua("return vim.api.nvim_get_mode().mode"), "t")
      c.input("abc<CR>")
      c.wait(3000, "has_line(..., '^got cba$')", "python answer", buf)
      c.wait(3000, "has_line(..., '^again>')", "second prompt", buf)
      c.input("xyzw<CR>")
      c.wait(3000, "has_line(..., '^len 4$')", "second answer", buf)
      c.wait(3000, "require('proctor.engine').state[...] == 'completed'", "python ended", id)
      T.ok(c.lua("return has_line(..., '^py> abc$')", buf), "the pty echoed the typed text")
    end)
    c.stop()
    if not ok then error(err, 0) end
  end)
end
