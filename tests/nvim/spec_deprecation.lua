-- tests/nvim/spec_deprecation.lua — runs last: no deprecation was seen while
-- every other spec ran (tests/nvim/helpers.lua watches vim.deprecate and
-- messages, here and in the child Neovims), nor in :checkhealth proctor.
return function(test, T, H)
  test("no deprecation warning: vim.deprecate, messages, :checkhealth, child Neovims", function()
    -- the watch works: a deprecation of our own is seen
    local n0 = #H.deprecations
    if vim.deprecate then
      pcall(vim.deprecate, "proctor.selfcheck()", "nothing", "99.0", "proctor", false)
    else
      vim.notify("proctor.selfcheck() is deprecated")
    end
    T.ok(#H.deprecations > n0, "the watch saw the self-check")
    for i = #H.deprecations, n0 + 1, -1 do
      H.deprecations[i] = nil
    end
    -- :checkhealth proctor: vim.health is where Neovim 0.10 deprecated the most
    vim.cmd("silent checkhealth proctor")
    local text = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), "\n")
    T.ok(not text:lower():find("deprecat"), text)
    vim.cmd("bwipeout!")
    for l in vim.fn.execute("messages"):gmatch("[^\n]+") do
      if l:lower():find("deprecat") then
        H.deprecations[#H.deprecations + 1] = ":messages: " .. l
      end
    end
    T.eq(#H.deprecations, 0, table.concat(H.deprecations, "\n"))
  end)
end
