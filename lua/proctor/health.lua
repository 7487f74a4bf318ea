--- proctor.health — `:checkhealth proctor`.
---
--- Checks: the C core loads (and if not, why and what to run), its version
--- matches this Lua layer, the shepherd starts (a real execution runs), the
--- Neovim version is supported, the RPC socket and its directory are usable, and
--- proctor-mcp is built (`:Proctor mcp` shows how to register it), and, for
--- the current directory, what each task source found and why a source found
--- nothing (turned off, no file, not installed, not trusted, a parse error
--- with its line); how .proctor.lua is trusted.
--- Reports through proctor.compat.health(): vim.health.start/ok/... where they
--- exist (no deprecation warning on 0.10+), else the older reporters.

local M = {}

local compat = require("proctor.compat")
local uv = compat.uv

--- How long `:checkhealth proctor` waits for the task probes of the
--- current directory (|proctor-limits|).
M.TASKS_WAIT_MS = 10000

--- `:checkhealth proctor`.
function M.check()
  local r = compat.health()
  r.start("proctor: Neovim")
  if vim.fn.has("nvim-0.7.2") == 1 then
    local v = vim.version()
    r.ok(string.format("Neovim %d.%d.%d is supported (0.7.2 or newer)", v.major, v.minor, v.patch))
  else
    r.error("Neovim 0.7.2 or newer is needed", { "upgrade Neovim (Debian 12 ships 0.7.2)" })
  end
  if not compat.has_winbar() then
    r.info("no 'winbar' in this Neovim: consoles show their bar in the statusline")
  end
  if not compat.autocmd_data() then
    r.info("User autocmds carry no `data` in this Neovim: use require('proctor').event")
  end

  r.start("proctor: C core")
  local engine = require("proctor.engine")
  local core, err = engine.load_core()
  if not core then
    r.error("the C core does not load: " .. tostring(err), {
      "run `make` in " .. (engine.root() or "the plugin directory"),
      "Debian packages needed to build: build-essential pkg-config libuv1-dev libmsgpack-dev libluajit-5.1-dev",
    })
    return
  end
  r.ok(
    "proctor.core "
      .. core.version
      .. " loaded ("
      .. (package.searchpath and package.searchpath("proctor.core", package.cpath) or "core.so")
      .. ")"
  )
  r.ok("version matches the Lua layer (" .. engine.core_version .. ")")

  r.start("proctor: shepherd")
  local cfg = require("proctor.config").get().engine
  local shepherd = cfg.shepherd
    or vim.env.PROCTOR_SHEPHERD
    or ((engine.root() or "") .. "/lua/proctor/proctor-shepherd")
  if vim.fn.executable(shepherd) == 1 then
    r.ok("shepherd found: " .. shepherd)
  else
    r.error(
      "shepherd not found or not executable: " .. shepherd,
      { "run `make` in " .. (engine.root() or "the plugin directory") }
    )
  end
  local probe, eerr = core.new({ shepherd = cfg.shepherd })
  if not probe then
    r.error("an engine does not start: " .. tostring(eerr))
  else
    local id = probe:start({ cmd = { "sh", "-c", "exit 7" } })
    local rec
    local deadline = uv.hrtime() + 5e9
    while uv.hrtime() < deadline do
      for _, ev in ipairs(probe:wait(200) or {}) do
        if ev.id == id and engine.TERMINAL[ev.state] then rec = ev end
      end
      if rec then break end
    end
    if rec and rec.exit_code == 7 then
      r.ok("the shepherd starts and runs a job (sh -c 'exit 7' ended with exit 7)")
    elseif rec then
      r.error("a test job ended unexpectedly: " .. require("proctor.util").describe_end(rec))
    else
      r.error("a test job did not end within 5 s: the shepherd does not work")
    end
    probe:close()
  end

  r.start("proctor: RPC socket")
  local path = engine.socket_path()
  local eng = engine.current()
  if not path then
    r.info("the RPC socket is off (setup{ rpc = { enabled = false } })")
  elseif engine.rpc_error() then
    r.error(
      "the RPC socket did not start: " .. engine.rpc_error(),
      { "fix the directory below, or set setup{ rpc = { path = ... } }" }
    )
  elseif eng and eng.address and eng:address() then
    r.ok("listening on " .. eng:address() .. " (PROCTOR_SOCKET of every execution)")
  end
  if path then
    local dir = vim.fn.fnamemodify(path, ":h")
    local st = uv.fs_stat(dir)
    local uid = uv.getuid and uv.getuid() or nil
    if #path > 107 then
      r.error(
        "socket path is longer than 107 bytes: " .. path,
        { "set setup{ rpc = { path = <shorter> } }" }
      )
    elseif st then
      local mode = st.mode % 512
      if st.type ~= "directory" then
        r.error(dir .. " exists and is not a directory")
      elseif (uid and st.uid ~= uid) or mode ~= 448 then
        r.error(
          string.format(
            "%s must be a directory of yours with mode 0700 (it has uid %d, mode %o); the core refuses it",
            dir,
            st.uid,
            mode
          ),
          { "run: chmod 700 " .. dir .. "  (or remove it: it is created on start)" }
        )
      else
        r.ok("socket directory usable: " .. dir .. " (yours, mode 0700)")
      end
    else
      local parent = vim.fn.fnamemodify(dir, ":h")
      if vim.fn.isdirectory(parent) == 0 then
        r.error("the socket directory's parent does not exist: " .. parent)
      elseif vim.fn.filewritable(parent) ~= 2 then
        r.error(
          "cannot create the socket directory " .. dir .. ": " .. parent .. " is not writable"
        )
      else
        r.ok("socket directory " .. dir .. " will be created (mode 0700) when the engine starts")
      end
    end
  end
  if vim.env.PROCTOR_SOCKET then
    r.info("this Neovim runs under proctor: PROCTOR_SOCKET=" .. vim.env.PROCTOR_SOCKET)
  end

  r.start("proctor: MCP server (proctor-mcp)")
  local bin = require("proctor.mcp").binary()
  if vim.fn.executable(bin) == 1 then
    local v = vim.fn.system({ bin, "--version" })
    if vim.v.shell_error == 0 then
      r.ok(vim.trim(v) .. ": " .. bin)
    else
      r.error(
        bin .. " --version failed: " .. vim.trim(v),
        { "run `make` in " .. (engine.root() or "the plugin directory") }
      )
    end
  else
    r.error(
      "proctor-mcp not found or not executable: " .. bin,
      { "run `make` in " .. (engine.root() or "the plugin directory") }
    )
  end
  if path then
    r.info(
      "MCP clients reach this editor through "
        .. path
        .. " (found by proctor-mcp, or PROCTOR_SOCKET / --socket); "
        .. "`:Proctor mcp` shows the snippets that register it (:help proctor-mcp)"
    )
  else
    r.warn(
      "the RPC socket is off: proctor-mcp runs its own embedded engine, commands do not show here",
      { "setup{ rpc = { enabled = true } }" }
    )
  end
  r.info(
    "ACP clients: require('proctor.acp').terminal({ owner = ..., open = ... }) (:help proctor-acp)"
  )

  M.tasks(r, vim.fn.getcwd())
  if compat.secure_read() then
    r.ok(".proctor.lua is read once trusted through vim.secure.read()")
  else
    r.ok(
      ".proctor.lua is read once trusted through proctor's prompt (this Neovim has no vim.secure)"
    )
  end

  -- every configured target, reached for real (the shepherd copied if needed)
  r.start("proctor: targets")
  local targets = require("proctor.config").get().targets or {}
  if next(targets) == nil then r.info("none configured (:help proctor-targets)") end
  for name, def in pairs(targets) do
    local what, why = require("proctor.targets").check_far(name, def)
    if what then
      r.ok(name .. ": " .. what)
    else
      r.error(why, { ":help proctor-targets" })
    end
  end
end

--- The task sources of `dir`, one line each (discovery runs first, never
--- asking: probes only where trusted, waited for up to M.TASKS_WAIT_MS).
---@private
function M.tasks(r, dir)
  r.start("proctor: tasks of " .. vim.fn.fnamemodify(dir, ":~"))
  local discover = require("proctor.tasks.discover")
  local done = false
  local ok, err = pcall(
    discover.list,
    dir,
    { prompt = false, ask_dir = false },
    function() done = true end
  )
  if not ok then return r.error("task discovery failed: " .. tostring(err)) end
  vim.wait(M.TASKS_WAIT_MS, function() return done end, 20)
  for _, s in ipairs(discover.report(dir)) do
    local n = s.name
    local from = s.home ~= dir and (" in " .. vim.fn.fnamemodify(s.home, ":~")) or ""
    if s.state == "off" then
      r.info(("%s: off (setup{ discover = { %s = false } })"):format(n, n))
    elseif s.state == "none" then
      r.info(("%s: no %s here or above"):format(n, s.detail))
    elseif s.state == "not_installed" then
      r.info(("%s: %s is not installed (its tasks are not listed)"):format(n, s.detail))
    elseif s.state == "untrusted" then
      r.warn(
        ("%s: %s is not trusted: its tasks are not listed"):format(n, s.detail),
        { ":Proctor trust " .. vim.fn.fnameescape(s.home) .. " (|proctor-trust|)" }
      )
    elseif s.state == "error" then
      r.error(("%s: %s"):format(n, s.detail))
    elseif s.state == "unknown" then
      r.info(("%s: not asked (no answer yet)"):format(n))
    elseif s.state == "pending" then
      r.info(("%s: still probing after %d ms"):format(n, M.TASKS_WAIT_MS))
    elseif s.count > 0 then
      local files = #s.files > 0 and (" (" .. table.concat(s.files, ", ") .. from .. ")") or ""
      r.ok(
        ("%s: %d task%s%s%s"):format(
          n,
          s.count,
          s.count == 1 and "" or "s",
          files,
          s.detail and ("; " .. s.detail) or ""
        )
      )
    elseif n == "user" then
      r.info("user: no tasks (setup{ tasks })")
    else
      r.info(
        ("%s: no tasks in %s%s%s"):format(
          n,
          #s.files > 0 and table.concat(s.files, ", ") or "its files",
          from,
          s.detail and ("; " .. s.detail) or ""
        )
      )
    end
  end
end

return M
