--- proctor.mcp — where proctor-mcp (the MCP server, csrc/mcp/) is, and the
--- snippets that register it in common MCP clients; used by `:Proctor mcp` and
--- `:checkhealth proctor`. See :help proctor-mcp. No side effects on require.

local M = {}

local engine = require("proctor.engine")
local proctor = require("proctor")

--- Path of the proctor-mcp program built by `make` (next to the core).
---@return string
function M.binary()
  local root = engine.root() or "."
  return root .. "/lua/proctor/proctor-mcp"
end

--- The lines `:Proctor mcp` shows: the binary, this editor's socket, and one
--- registration snippet per client. `socket` may be nil (the RPC socket is off).
---@param bin string
---@param socket string|nil
---@return string[]
function M.snippet_lines(bin, socket)
  local q = vim.fn.json_encode(bin)
  local lines = {
    "# proctor-mcp: an MCP server whose commands run in this editor (:help proctor-mcp)",
    "# binary: " .. bin .. (vim.fn.executable(bin) == 1 and "" or "   (missing: run `make`)"),
    "# this editor's socket: " .. (socket or "none (setup{ rpc = { enabled = true } })"),
    "# Started from a terminal of this editor, or as the only editor with a socket, proctor-mcp",
    '# finds this socket by itself; else add "--socket", "<path>" to the arguments.',
    "",
    "## Claude Code (shell):",
    "claude mcp add proctor -- " .. (bin:find("[^%w/%._+-]") and vim.fn.shellescape(bin) or bin),
    "",
    "## Claude Code .mcp.json, Gemini CLI ~/.gemini/settings.json (also Cursor, Windsurf):",
    "{",
    '  "mcpServers": {',
    '    "proctor": { "command": ' .. q .. ', "args": [] }',
    "  }",
    "}",
    "",
    "## Codex CLI ~/.codex/config.toml:",
    "[mcp_servers.proctor]",
    "command = " .. q,
    "args = []",
    "",
    "## opencode opencode.json:",
    "{",
    '  "mcp": {',
    '    "proctor": { "type": "local", "command": [' .. q .. '], "enabled": true }',
    "  }",
    "}",
  }
  return lines
end

--- `:Proctor mcp`: start the engine (so its socket exists) and show the snippets
--- in a scratch buffer `proctor://mcp`.
function M.show()
  local eng = proctor._engine()
  local socket = eng and eng.address and eng:address() or nil
  local lines = M.snippet_lines(M.binary(), socket)
  local name = "proctor://mcp"
  local buf = vim.fn.bufnr("^" .. vim.pesc(name) .. "$")
  if buf == -1 then
    buf = vim.api.nvim_create_buf(true, true)
    pcall(vim.api.nvim_buf_set_name, buf, name)
    vim.bo[buf].bufhidden = "wipe"
    vim.bo[buf].swapfile = false
  end
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
  vim.cmd("sbuffer " .. buf)
  return buf, lines
end

return M
