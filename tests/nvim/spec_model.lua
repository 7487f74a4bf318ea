-- tests/nvim/spec_model.lua — the console's pure models, without windows or an
-- engine: the backlog (dedupe, trim, take) and the pipe line editor.
return function(test, T, H)
  local Backlog = require("proctor.console.backlog")
  local editor = require("proctor.console.editor")
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
