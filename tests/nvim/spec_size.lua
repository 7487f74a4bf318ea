-- tests/nvim/spec_size.lua — a PTY's size is the text area of its console's
-- window (winbar, statusline and number column left out), from the first
-- byte, and follows :resize and :vertical resize.
return function(test, T, H)
  local p = require("proctor")

  -- The text area of `win` as Neovim reports it: winheight() leaves a winbar
  -- out (0.8+), winwidth() includes the number/sign/fold columns.
  local function area(win)
    return vim.fn.winheight(win), vim.fn.winwidth(win) - vim.fn.getwininfo(win)[1].textoff
  end

  local function reset_layout() vim.cmd("silent! tabonly! | silent! only! | enew") end

  for _, bar in ipairs({ true, false }) do
    local with = bar and "with the bar (winbar on 0.8+)" or "without the bar"
    test(
      "size: `stty size` at once in a new console prints its window's text area, 20 times, " .. with,
      function()
        assert(p.setup({ notify = "never", console = { bar = bar } }))
        local ok, err = pcall(function()
          local modes = { "split", "vsplit", "float", "tab", "current" }
          vim.wo.number = true -- a number column: the width loses textoff columns
          for i = 1, 20 do
            reset_layout()
            local how = modes[(i - 1) % #modes + 1]
            local ex =
              T.ok(p.run({ cmd = "stty size", pty = true, open = { open = how, size = 8 + i } }))
            local win = vim.fn.bufwinid(require("proctor.console").get(ex.id).buf)
            T.ok(win > 0, how .. ": a window shows the console")
            local rows, cols = area(win)
            local winbar = vim.fn.exists("+winbar") == 1 and vim.wo[win].winbar or ""
            T.eq(winbar ~= "", bar and vim.fn.exists("+winbar") == 1, how .. ": winbar set")
            T.eq(T.ok(ex:wait(5000)).state, "completed")
            local out = (require("proctor.engine").current():read(ex.id, "pty", 0, 100) or ""):gsub(
              "\r",
              ""
            )
            T.eq(out, rows .. " " .. cols .. "\n", ("run %d (%s): stty size"):format(i, how))
          end
        end)
        vim.wo.number = false
        reset_layout()
        assert(p.setup({ notify = "never" }))
        if not ok then error(err, 0) end
      end
    )
  end

  -- WinResized/WinScrolled fire from Neovim's main loop: drive a child Neovim.
  test(
    "size: :resize and :vertical resize reach a running program (SIGWINCH), with and without the bar",
    function()
      local c = H.child()
      local ok, err = pcall(function()
        for _, bar in ipairs({ true, false }) do
          -- Normal mode: the window commands below are typed there
          c.lua(
            "require('proctor').setup({ notify = 'never', console = { bar = ..., start_insert = false } })",
            bar
          )
          -- a window with neighbours on both sides, so both resizes take effect
          c.cmd("silent! only! | enew | vsplit | split")
          local id, buf = unpack(c.lua([[
          local ex = require("proctor").run({ pty = true, open = { open = "current" },
            cmd = "trap 'stty size' WINCH; stty size; while :; do sleep 0.02; done" })
          return { ex.id, require("proctor.console").get(ex.id).buf }
        ]]))
          local area_code = [[
          local win = vim.fn.bufwinid(...)
          return vim.fn.winheight(win) .. " " .. (vim.fn.winwidth(win) - vim.fn.getwininfo(win)[1].textoff)
        ]]
          local first = c.lua(area_code, buf)
          c.wait(5000, "has_line(" .. buf .. ", '^" .. first .. "$')", "initial size " .. first)
          for _, cmd in ipairs({
            "resize 7",
            "vertical resize 33",
            "resize 12",
            "vertical resize 41",
          }) do
            c.cmd(cmd)
            local want = c.lua(area_code, buf)
            c.wait(
              5000,
              "has_line(" .. buf .. ", '^" .. want .. "$')",
              cmd .. ": the program prints " .. want
            )
          end
          T.eq(c.lua("return require('proctor').cancel(...)", id), "canceling")
          c.wait(5000, "require('proctor.engine').is_done(...)", "canceled", id)
        end
      end)
      c.stop()
      if not ok then error(err, 0) end
    end
  )
end
