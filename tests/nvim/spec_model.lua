-- tests/nvim/spec_model.lua — the console's pure models, without windows or an
-- engine: the backlog (dedupe, trim, take), the overwritten-redraw filter and
-- the pipe line editor.
return function(test, T, H)
  local Backlog = require("proctor.console.backlog")
  local editor = require("proctor.console.editor")
  local overwrite = require("proctor.console.overwrite")
  local function note(n) return "<skipped " .. n .. ">" end

  test("backlog: accept drops what was seen, counts a gap as skipped", function()
    local b = Backlog.new()
    T.eq(b:accept("stdout", "abc", 0), "abc")
    T.eq(b:accept("stdout", "abc", 0), nil, "the same bytes again")
    T.eq(b:accept("stdout", "bcde", 1), "de", "an overlap keeps the new part")
    T.eq(b.next.stdout, 5)
    T.eq(b:accept("stdout", "xy", 8), "xy", "a gap")
    T.eq(b.skipped, 3)
    T.eq(b:accept("stderr", "e", 0), "e", "streams are apart")
    b:start("pty", 100)
    T.eq(b:accept("pty", "old", 97), nil)
    T.eq(b:accept("pty", "z", 100), "z")
  end)

  -- A ring of `text` whose oldest `lost` bytes are gone, read as eng:read reads
  -- it (data from max(from, head), the next offset); counts the reads.
  local function ring(text, lost)
    local r = { reads = 0, head = lost or 0 }
    function r.read(_, from, max)
      r.reads = r.reads + 1
      local first = math.max(from, r.head)
      local last = math.min(#text, first + max)
      return text:sub(first + 1, last), last
    end
    return r
  end
  local function lines(n)
    local t = {}
    for i = 1, n do
      t[i] = ("%04d\n"):format(i)
    end
    return table.concat(t)
  end

  test("backlog: a gap the poll left in the ring waits as a hole and is read from it", function()
    local text = lines(100) -- 500 bytes
    local r = ring(text)
    local b = Backlog.new(r.read)
    b:push(b:accept("stdout", text:sub(1, 10), 0), 10000, 5000)
    -- a poll handed over only the newest 10 bytes
    b:push(b:accept("stdout", text:sub(491), 490), 10000, 5000)
    T.eq(b.n, 500, "the hole counts as waiting")
    T.eq(b.skipped, 0, "nothing skipped")
    T.eq(r.reads, 0, "read when its turn comes")
    local got = {}
    while b:pending() do
      got[#got + 1] = b:take(100, false, note)
    end
    T.eq(table.concat(got), text, "every byte, in order, no note")
    T.ok(
      r.reads >= 1 and r.reads <= #got,
      ("one read a take at most: %d reads, %d takes"):format(r.reads, #got)
    )
  end)

  test(
    "backlog: a hole the ring no longer holds in full: only the lost part is skipped, in place",
    function()
      local text = lines(100)
      local r = ring(text)
      local b = Backlog.new(r.read)
      b:push(b:accept("stdout", text:sub(1, 10), 0), 10000, 5000)
      b:push(b:accept("stdout", text:sub(491), 490), 10000, 5000)
      r.head = 250 -- the ring dropped 0..249 meanwhile: 10..249 of the hole are gone
      local out = {}
      while b:pending() do
        out[#out + 1] = b:take(1000, false, note)
      end
      T.eq(table.concat(out), text:sub(1, 10) .. "<skipped 240>\r\n" .. text:sub(251))
      -- gone altogether (the execution was deleted): the whole hole
      local b2 = Backlog.new(function() return nil end)
      b2:push(b2:accept("stdout", "ab", 0), 100, 50)
      b2:push(b2:accept("stdout", "yz", 10), 100, 50)
      T.eq(b2:take(100, false, note), "ab")
      T.eq(b2:take(100, false, note), "\r\n<skipped 8>\r\nyz")
      T.eq(b2:pending(), false)
    end
  )

  test("backlog: trimming cuts into a hole; its read starts after a line end", function()
    local text = lines(100)
    local r = ring(text)
    local b = Backlog.new(r.read)
    b:push(b:accept("stdout", text:sub(1, 5), 0), 10000, 5000)
    b:push(b:accept("stdout", text:sub(496), 495), 100, 52) -- keep about 52 of 500
    T.eq(b.n, 52)
    T.eq(r.reads, 0, "a trim reads nothing")
    local t = b:take(1000, false, note)
    -- 448 trimmed, then 0090's rest and its line end (2 bytes) when read
    T.eq(t, "<skipped 450>\r\n" .. text:sub(451))
    T.eq(b:pending(), false)
  end)

  test(
    "backlog: push keeps the tail past the limit, from a line start; take reports the skip",
    function()
      local b = Backlog.new()
      b:push("line1\nline2\n", 100, 10)
      T.eq(b.n, 12)
      T.eq(b.skipped, 0)
      b:push(string.rep("x", 5) .. "\nline3\nline4\n", 20, 10)
      -- 30 bytes > 20: keep about 10, starting after the next newline
      T.eq(b.n, 6, "kept")
      T.eq(b.skipped, 24)
      local text, taken = b:take(1000, false, note)
      T.eq(taken, 6)
      T.eq(text, "<skipped 24>\r\nline4\n")
      T.eq(b.n, 0)
      T.eq(b.skipped, 0)
      T.eq(b.at_bol, true)
      T.eq(b:pending(), false)
    end
  )

  test("backlog: take honours a line bound too; what is left keeps its order", function()
    local b = Backlog.new()
    b:push("1\n2\n", 1000, 500)
    b:push("3\n4\n5", 1000, 500)
    b.skipped = 9 -- the note's own line break does not count
    local t1, n1, l1 = b:take(100, false, note, 2)
    T.eq(t1, "<skipped 9>\r\n1\n2\n")
    T.eq(n1, 4)
    T.eq(l1, 2)
    local t2, n2, l2 = b:take(100, true, note, 2)
    T.eq(t2, "3\r\n4\r\n")
    T.eq(n2, 4)
    T.eq(l2, 2)
    local t3, n3, l3 = b:take(100, false, note, 2)
    T.eq(t3, "5")
    T.eq(n3, 1)
    T.eq(l3, 0)
    T.eq(b.n, 0)
    T.eq(b:pending(), false)
  end)

  test(
    "backlog: with unit_bytes a line counts by its bytes too; the first line always goes",
    function()
      local b = Backlog.new()
      -- 5 units: "a\nbbbbbb\n" is 2 lines + 9/4; with "c\n" it would be 3 + 11/4
      b:push("a\nbbbbbb\nc\nd", 1000, 500)
      local t1, n1, l1 = b:take(100, false, note, 5, 4)
      T.eq(t1, "a\nbbbbbb\n")
      T.eq(n1, 9)
      T.eq(l1, 2)
      -- the rest, "c\nd": 1 + 2/4, then the unended "d" adds 3/4 (in all 1.75, under 2)
      local t2, _, l2 = b:take(100, false, note, 2, 4)
      T.eq(t2, "c\nd")
      T.eq(l2, 1)
      -- one long line is taken whole though it alone exceeds the units
      b:push("0123456789\nx\n", 1000, 500)
      local t3, _, l3 = b:take(100, false, note, 2, 4)
      T.eq(t3, "0123456789\n")
      T.eq(l3, 1)
      -- a line end, then an unended rest that would overrun: cut after the line end
      b:take(100, false, note)
      b:push("x\nyyyyyyyyyyyy", 1000, 500)
      local t4, _, l4 = b:take(100, false, note, 3, 4)
      T.eq(t4, "x\n")
      T.eq(l4, 1)
      T.eq(b.n, 12)
    end
  )

  test("backlog: take honours the budget, cuts a chunk, converts \\n for pipes", function()
    local b = Backlog.new()
    b:push("aaaa\n", 1000, 500)
    b:push("bbbb", 1000, 500)
    local t1, n1 = b:take(7, true, note)
    T.eq(t1, "aaaa\r\nbb")
    T.eq(n1, 7)
    T.eq(b.at_bol, false)
    local t2, n2 = b:take(100, true, note)
    T.eq(t2, "bb")
    T.eq(n2, 2)
    -- a final line after a partial line starts on a line of its own
    T.eq(b:own_line("[done]"), "\r\n[done]")
    b:sent("\n")
    T.eq(b:own_line("x"), "x")
    -- a skip note after a partial line starts a new line too
    b = Backlog.new()
    b:push("partial", 1000, 500)
    b:take(100, false, note)
    b.skipped = 4
    T.eq((b:take(100, false, note)), "\r\n<skipped 4>\r\n")
  end)

  -- Each test of the filter runs on the model (console/overwrite.lua) and on
  -- the core's twin of it (csrc/base/overwrite.c), which the consoles use.
  local core = assert(require("proctor.engine").load_core())
  for _, impl in ipairs({ { name = "model", core = false }, { name = "core", core = core } }) do
    local function new() return overwrite.new(impl.core) end
    test(
      impl.name .. ": overwrite: the implementation under test",
      function() T.eq(new().native ~= nil, impl.core ~= false) end
    )
    -- feed `text` in one call (or in `pieces`) at `width` columns
    local function ow(text, width, st)
      st = st or new()
      return overwrite.feed(st, text, width or 80), st
    end

    test(
      impl.name .. ": overwrite: a redraw overwritten by a later one is left out, the last stays",
      function()
        T.eq(ow("\rab\rabc\rabcd"), "\rabcd")
        T.eq(ow("start\r1\r2\r3"), "start\r3", "the first segment's column is unknown: kept")
        -- a shorter redraw leaves the end of a longer one on the screen: both stay
        T.eq(ow("\rabcdef\rxy"), "\rabcdef\rxy")
        T.eq(ow("\r10\r9\r11"), "\r11")
        T.eq(ow("\rabcdef\rxy\rz"), "\rabcdef\rxy\rz", "z covers only the x of xy")
        T.eq(ow("\rabcdef\rx\ryz"), "\rabcdef\ryz")
        T.eq(ow("a\r\r\rb"), "a\rb", "empty redraws")
        T.eq(ow("\r1\r2\r\n"), "\r2\r\n", "a line feed ends the run: its empty last segment stays")
        T.eq(ow("\r1\r2\r3\n\r4\r5\r6"), "\r3\n\r6")
        T.eq(overwrite.feed(new(), "\rx\ry", nil), "\rx\ry", "no width: every byte")
        local text, st = ow("\r1\r2\r3")
        T.eq(text, "\r3")
        T.eq(st.dropped, 4)
      end
    )

    test(
      impl.name
        .. ": overwrite: colours stay, erase-in-line covers the row, other sequences end a run",
      function()
        -- the pen changes of a left-out redraw stay (the next redraw is drawn in them)
        T.eq(ow("\r\27[31m10%\r20%"), "\27[31m\r20%")
        T.eq(ow("\r\27[1;38;5;200m10%\27[0m\r20%"), "\27[1;38;5;200m\27[0m\r20%")
        -- erase in line: the later redraw covers any width; the erasing one is left out too
        T.eq(ow("\ra long line of text\r\27[Kab"), "\r\27[Kab")
        T.eq(ow("\rlong long\27[K\rab\27[2K\rcd\27[0K"), "\rcd\27[0K")
        T.eq(ow("\rlong long\r\27[1Kab\rcd"), "\rlong long\r\27[1Kab\rcd", "CSI 1 K ends the run")
        -- a cursor move, a tab, an OSC string end the run: nothing crosses them
        T.eq(ow("\r1\r2\27[A\r3\r4"), "\r2\27[A\r4")
        T.eq(ow("\r1\t\r2\r3"), "\r1\t\r3")
        T.eq(ow("\r1\r2\27]0;t\r\7\r3\r4"), "\r2\27]0;t\r\7\r4")
        T.eq(ow("\r1\r2\27]0;t\27\\\r3\r4"), "\r2\27]0;t\27\\\r4", "ST ends the string")
        -- a C0 control inside a CSI runs at once: the run ends there
        T.eq(ow("\r1\r2\27[3\r2m\r3\r4"), "\r2\27[3\r2m\r4")
      end
    )

    test(
      impl.name .. ": overwrite: no redraw that may wrap or may not be covered is left out",
      function()
        -- width 4: "abcde" wraps to the next row; what follows it is on that row
        T.eq(ow("\rabcde\rx\ry", 4), "\rabcde\ry")
        T.eq(ow("\rabcde\rabcdefgh\rx", 4), "\rabcde\rabcdefgh\rx", "abcde wraps: a row more")
        T.eq(ow("\rabc\rabcdefgh\rx", 4), "\rabcdefgh\rx", "its first row covers abc")
        T.eq(ow("\rabc\rabcdefgh\rx\rab", 4), "\rabcdefgh\rab", "x and ab are on its next row")
        T.eq(ow("\rab\rééééé\rabc", 4), "\rab\rééééé\rabc", "abc may be a row below ab")
        -- UTF-8: a byte is at most a column, and a later redraw covers only its ASCII start
        T.eq(ow("\ré\réé"), "\ré\réé")
        T.eq(ow("\r██\r█\rab"), "\r██\r█\rab", "6 and 3 bytes: maybe wider than ab")
        T.eq(ow("\r█\r██\rabc"), "\r██\rabc")
        T.eq(ow("\r█\r██\rabcdefg"), "\rabcdefg")
        T.eq(ow("\r\194\133x\r1\r2"), "\r\194\133x\r2", "a C1 control (U+0085) ends the run")
      end
    )

    test(
      impl.name .. ": overwrite: a sequence cut between two sends, modes that break overwriting",
      function()
        local st = new()
        T.eq(overwrite.feed(st, "\r1\27[3", 80), "\r1\27[3")
        T.eq(overwrite.feed(st, "1m\r2\r3", 80), "1m\r3", "the SGR's end")
        T.eq(overwrite.feed(st, "\27]0;ti", 80), "\27]0;ti")
        T.eq(overwrite.feed(st, "t\rle\rx\7\r1\r2\r3", 80), "t\rle\rx\7\r3", "inside an OSC")
        -- insert mode, left/right margins, double-width lines: every byte from then on
        for _, mode in ipairs({ "\27[4h", "\27[?69h", "\27#6", "\27[1;4h" }) do
          local s2 = new()
          T.eq(overwrite.feed(s2, "\r1\r2\r3" .. mode, 80), "\r3" .. mode)
          T.eq(overwrite.feed(s2, "\r1\r2\r3", 80), "\r1\r2\r3", mode)
        end
        local s3 = new()
        overwrite.feed(s3, "\27[?25h\27[?1049h", 80)
        T.eq(overwrite.feed(s3, "\r1\r2\r3", 80), "\r3", "other modes do not matter")
      end
    )

    test(
      impl.name .. ": overwrite: a terminal shows what it shows without (a random progress bar zoo)",
      function()
        -- Two terminals of the same width, one fed the bytes, one fed them filtered
        -- (in pieces): the same lines, the same cell attributes on the screen, and
        -- the cursor and pen where they were ("@@" written after, in the pen).
        local seed = 12345
        local function rnd(n) -- a small LCG: LuaJIT's math.random is never seeded
          seed = (seed * 1103515245 + 12345) % 2147483648
          return seed % n + 1
        end
        local function pick(t) return t[rnd(#t)] end
        local function bar()
          local t, w = {}, rnd(60)
          for i = 1, rnd(40) do
            w = math.max(0, w + rnd(13) - 7)
            t[i] = "\r"
              .. (rnd(3) == 1 and pick({ "\27[K", "\27[2K", "\27[0K" }) or "")
              .. (rnd(2) == 1 and pick({ "\27[32m", "\27[0m", "\27[1;31m", "\27[m", "\27[7m" }) or "")
              .. string.rep(pick({ "#", "=", "█", "-", "é" }), rnd(w + 1) - 1)
              .. (rnd(2) == 1 and "\27[0m" or "")
              .. rnd(10 ^ rnd(4))
              .. (rnd(4) == 1 and "\27[K" or "")
          end
          return table.concat(t)
        end
        local other =
          { "\n", "\r\n", "\27[2D", "\27[A", "\t", "\b", "\27]0;title\7", "\27[?25l", "abc", "漢" }
        local api = vim.api
        local width = 50
        local function screen(pieces)
          -- a window exactly `width` columns wide: the terminal's width
          vim.cmd("silent! only!")
          vim.cmd("vsplit")
          vim.cmd("vertical resize " .. width)
          T.eq(api.nvim_win_get_width(0), width, "the window's width")
          local buf = api.nvim_create_buf(false, true)
          api.nvim_win_set_buf(0, buf)
          local chan = api.nvim_open_term(buf, {})
          for _, p in ipairs(pieces) do
            api.nvim_chan_send(chan, p)
          end
          api.nvim_chan_send(chan, "@@")
          local prev, same = nil, 0
          vim.wait(5000, function()
            local cur = table.concat(api.nvim_buf_get_lines(buf, 0, -1, false), "\n")
            same = (cur == prev and cur:find("@@", 1, true)) and same + 1 or 0
            prev = cur
            return same >= 3
          end, 10)
          vim.cmd("normal! G")
          vim.cmd("redraw")
          local rows = { table.concat(api.nvim_buf_get_lines(buf, 0, -1, false), "\n") }
          local pos = vim.fn.win_screenpos(0)
          for r = pos[1], pos[1] + api.nvim_win_get_height(0) - 1 do
            local cells = {}
            for col = pos[2], pos[2] + width - 1 do
              cells[#cells + 1] = vim.fn.screenchar(r, col) .. ":" .. vim.fn.screenattr(r, col)
            end
            rows[#rows + 1] = table.concat(cells, " ")
          end
          api.nvim_buf_delete(buf, { force = true })
          vim.cmd("silent! only!")
          return rows
        end
        local left = 0
        for case = 1, 12 do
          local t = {}
          for i = 1, rnd(12) do
            t[i] = rnd(2) == 1 and bar() or pick(other)
          end
          local text = table.concat(t)
          local pieces, filtered, st = {}, {}, new()
          local i = 1
          while i <= #text do
            local j = math.min(#text, i + rnd(300))
            pieces[#pieces + 1] = text:sub(i, j)
            filtered[#filtered + 1] = overwrite.feed(st, pieces[#pieces], width)
            i = j + 1
          end
          left = left + st.dropped
          local a, b = screen(pieces), screen(filtered)
          for r = 1, math.max(#a, #b) do
            if a[r] ~= b[r] then
              error(
                ("case %d, %s %d differs for %q"):format(case, r == 1 and "lines" or "row", r, text)
              )
            end
          end
        end
        T.ok(left > 1000, "redraws were left out: " .. left .. " bytes")
      end
    )
  end

  -- The twin gives the model's bytes for any input, cut anywhere, at any
  -- width, read in place (first, last) or not: every piece's output, the
  -- bytes left out and leaving out turned off are compared after each piece.
  test(
    "overwrite: the core's twin gives the model's bytes (random streams, random cuts)",
    function()
      local seed = 4242
      local function rnd(n)
        seed = (seed * 1103515245 + 12345) % 2147483648
        return math.floor(seed / 65536) % n + 1 -- the high bits: the low ones of an LCG cycle
      end
      local tokens = {
        "a",
        "7",
        "42",
        "hello",
        " ",
        "\r",
        "\r",
        "\r",
        "\n",
        "\r\n",
        "\t",
        "\b",
        "\7",
        "\24",
        "\26",
        "\27",
        "\27[",
        "\27[31m",
        "\27[1;38;5;200m",
        "\27[m",
        "\27[38:2:1:2:3m",
        "\27[K",
        "\27[0K",
        "\27[2K",
        "\27[1K",
        "\27[4h",
        "\27[?69h",
        "\27[?25h",
        "\27[1;4h",
        "\27[04h",
        "\27[?069h",
        "\27[?1049h",
        "\27[4;h",
        "\27[4 h",
        "\27[ q",
        "\27[>c",
        "\27[3\r2m",
        "\27[1\27[2m",
        "\27]0;t\7",
        "\27]0;t\27\\",
        "\27]0;t\27[1m",
        "\27P1$r\27\\",
        "\27X\24",
        "\27#6",
        "\27#",
        "\27(B",
        "\27%G",
        "é",
        "█",
        "漢",
        "\194\133",
        "\194",
        "\194\160",
        "\127",
        "\255",
        "\27[" .. string.rep("1;", 140) .. "m",
        "\27[" .. string.rep("9", 300) .. "K",
      }
      local widths = { 1, 2, 3, 4, 10, 80 }
      local left, pieces_n = 0, 0
      for case = 1, 400 do
        local t = {}
        for i = 1, rnd(60) do
          local tok = tokens[rnd(#tokens)]
          if rnd(10) <= 8 then -- mostly redraws, some with colours or an erase
            tok = "\r"
              .. (rnd(4) == 1 and tokens[17 + rnd(7)] or "")
              .. string.rep(tokens[rnd(4)], rnd(12) - 1)
          end
          t[i] = tok
        end
        local text = table.concat(t)
        local width = rnd(7) > 1 and widths[rnd(#widths)] or nil -- nil now and then
        local a, b = overwrite.new(false), overwrite.new(core)
        local i = 1
        while i <= #text do
          local j = math.min(#text, i + (rnd(4) == 1 and #text or rnd(40)) - 1)
          pieces_n = pieces_n + 1
          local x, y
          if rnd(2) == 1 then -- read in place
            x, y = overwrite.feed(a, text, width, i, j), overwrite.feed(b, text, width, i, j)
          else
            local piece = text:sub(i, j)
            x, y = overwrite.feed(a, piece, width), overwrite.feed(b, piece, width)
          end
          if x ~= y or a.dropped ~= b.dropped or a.unsafe ~= b.unsafe then
            error(
              ("case %d (width %s), bytes %d..%d of %q: model %q (%d left out, unsafe %s), core %q (%d, %s)"):format(
                case,
                tostring(width),
                i,
                j,
                text,
                x,
                a.dropped,
                tostring(a.unsafe),
                y,
                b.dropped,
                tostring(b.unsafe)
              )
            )
          end
          i = j + 1
        end
        left = left + a.dropped
      end
      T.ok(left > 1000, "redraws were left out: " .. left .. " bytes")
      T.ok(pieces_n > 1000, "pieces fed: " .. pieces_n)
      -- out of range: nothing, and the state does not move
      local st = overwrite.new(core)
      T.eq(overwrite.feed(st, "abc", 80, 3, 2), "")
      T.eq(overwrite.feed(st, "", 80), "")
      T.eq(overwrite.feed(st, "\r1\r2", 80, 1, 99), "\r2", "last past the end: to the end")
    end
  )

  test(
    "line editor: echo, <CR> sends, <BS>/^U edit (UTF-8), ^D closes, ^C cancels, arrows ignored",
    function()
      local ed = editor.new()
      local echo, ops = editor.feed(ed, "héllo")
      T.eq(echo, "héllo")
      T.eq(#ops, 0)
      echo, ops = editor.feed(ed, "\127\127x\r")
      T.eq(echo, "\b \b\b \bx\r\n")
      T.eq(ops[1][1], "input")
      T.eq(ops[1][2], "hélx\n")
      echo, ops = editor.feed(ed, "ab\27[Dc\21")
      T.eq(echo, "abc" .. string.rep("\b \b", 3))
      T.eq(#ops, 0)
      T.eq(ed.line, "")
      echo, ops = editor.feed(ed, "tail\4")
      T.eq(echo, "tail^D")
      T.eq(ops[1][1] .. ":" .. ops[1][2], "input:tail")
      T.eq(ops[2][1], "close")
      echo, ops = editor.feed(ed, "\3")
      T.eq(echo, "^C")
      T.eq(ops[1][1], "cancel")
      echo, ops = editor.feed(ed, "\1\2")
      T.eq(echo, "")
      T.eq(#ops, 0, "other control keys do nothing")
    end
  )
end
