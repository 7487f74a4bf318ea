-- plugin/proctor.lua — defines :Proctor and nothing else; handlers require lazily.
if vim.g.loaded_proctor then return end
vim.g.loaded_proctor = true

vim.api.nvim_create_user_command(
  "Proctor",
  function(opts) require("proctor.commands").dispatch(opts) end,
  {
    nargs = "*",
    bang = true,
    desc = "proctor: [list]|run|open|toggle|input|cancel[!]|delete|purge|rerun|text|qf|info|mcp",
    complete = function(arglead, cmdline, pos)
      return require("proctor.commands").complete(arglead, cmdline, pos)
    end,
  }
)
