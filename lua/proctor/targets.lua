--- proctor.targets — what a target of setup{ targets } becomes: the transport command
--- the engine runs for it (|proctor-targets|), and the shepherd on the far side.
---
---   { ssh = "me@devbox", opts = { "-p", "2222" } }  ─► ssh -T -o BatchMode=yes … me@devbox
---        '"$HOME"/.cache/proctor/proctor-shepherd-<hash> --relay'
---   { command = { "podman", "exec", "-i", "web-1" } } ─► podman exec -i web-1 proctor-shepherd --relay
---
--- On the first use of an ssh target without `shepherd = path`, the far side is
--- checked once (one ssh run: `uname -m`, and whether ${XDG_CACHE_HOME:-~/.cache}/proctor/ holds a
--- proctor-shepherd-<content hash> that runs); when it does not, the static
--- proctor-shepherd built beside this file (`make`, with musl-gcc) is copied
--- there through ssh: into a temporary name, mode 0700, renamed at once. A far
--- side of another architecture, or where it cannot run, is an error naming why.
---
--- Pure Lua with io.popen: the same under Neovim and under Lua 5.4 (the target
--- tier). Requiring this module has no side effects.

local M = {}
local H = {}

H.cache = {} -- name -> { transport, cwd } once checked (this process)

--- One word for /bin/sh.
---@param s string
---@return string
function M.quote(s)
  if s:match("^[%w%-_./=:@,+]+$") then return s end
  return "'" .. s:gsub("'", "'\\''") .. "'"
end

local function join(argv)
  local out = {}
  for i, a in ipairs(argv) do
    out[i] = M.quote(a)
  end
  return table.concat(out, " ")
end

-- Run a /bin/sh command line; its output (stdout and stderr) and whether it succeeded
-- (the status is printed last: LuaJIT's close() does not return it).
function H.sh(line, input)
  if input then line = line .. " < " .. M.quote(input) end
  local p = io.popen("{ " .. line .. '; } 2>&1; echo "proctor-rc=$?"', "r")
  if not p then return "", false end
  local out = p:read("*a") or ""
  p:close()
  local rc = tonumber(out:match("proctor%-rc=(%d+)%s*$"))
  return (out:gsub("proctor%-rc=%d+%s*$", "")), rc == 0
end

-- The directory of this file (lua/proctor), where `make` puts the static shepherd.
function H.here()
  local src = debug.getinfo(1, "S").source:gsub("^@", "")
  return src:match("^(.*)/[^/]*$") or "."
end

-- The static shepherd to copy: its path, its hash (16 hex digits), the arch it runs on.
function H.local_shepherd()
  if H.shepherd then return H.shepherd end
  local path = H.here() .. "/proctor-shepherd-static"
  local f = io.open(path, "rb")
  if not f then
    return nil,
      path
        .. " is missing: build it with `make` (needs musl-gcc, Debian's musl-tools), "
        .. "or give the target `shepherd = path` of one installed on the far side"
  end
  f:close()
  local sum = H.sh("sha256sum " .. M.quote(path)):match("^(%x+)")
  local arch = H.sh("uname -m"):match("^(%S+)")
  if not sum or not arch then return nil, "cannot hash " .. path end
  H.shepherd = { path = path, hash = sum:sub(1, 16), arch = arch }
  return H.shepherd
end

--- The ssh command line of a target (without the remote command).
function H.ssh_argv(def)
  local argv = { "ssh", "-T", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=15" }
  for _, o in ipairs(def.opts or {}) do
    argv[#argv + 1] = o
  end
  argv[#argv + 1] = def.ssh
  return argv
end

-- The remote command that runs the relay: a configured shepherd, or our copy
-- (checked, and copied when missing).
function H.remote_shepherd(name, def)
  if def.shepherd then return M.quote(def.shepherd) .. " --relay" end
  local sh, err = H.local_shepherd()
  if not sh then return nil, err end
  local ssh = join(H.ssh_argv(def))
  local file = '"${XDG_CACHE_HOME:-$HOME/.cache}/proctor/proctor-shepherd-' .. sh.hash .. '"'
  local probe = "uname -m; f=" .. file .. '; test -x "$f" && "$f" --check'
  local out, ok = H.sh(ssh .. " " .. M.quote(probe))
  if not ok and not out:match("^%S+\n") then
    return nil, ("target %s: ssh failed: %s"):format(name, (out:gsub("%s+$", "")))
  end
  local arch = out:match("^(%S+)")
  if arch ~= sh.arch then
    return nil,
      (
        "target %s: the far side is %s, proctor-shepherd-static is %s: give the target "
        .. "`shepherd = path` of one built for it"
      ):format(name, tostring(arch), sh.arch)
  end
  if not out:find("proctor-shepherd ok", 1, true) then
    local copy = 'set -e; umask 077; d="${XDG_CACHE_HOME:-$HOME/.cache}/proctor"; mkdir -p "$d"; '
      .. 't="$d/.proctor-shepherd.$$"; cat > "$t"; chmod 700 "$t"; mv -f "$t" '
      .. file
      .. "; "
      .. file
      .. " --check"
    local cout, cok = H.sh(ssh .. " " .. M.quote(copy), sh.path)
    if not cok or not cout:find("proctor-shepherd ok", 1, true) then
      return nil,
        (
          "target %s: cannot install the shepherd in ~/.cache/proctor on the far side "
          .. "(no writable home, or a noexec mount?): %s"
        ):format(name, (cout:gsub("%s+$", "")))
    end
  end
  return file .. " --relay"
end

--- What target `name` runs through: its transport command (for /bin/sh -c) and its
--- default cwd (nil: the far side's home). Checked (and the shepherd copied) once per
--- process; `force` checks again.
---@param name string
---@param def table a setup{ targets } entry
---@return string|nil transport, string|nil cwd_or_err
function M.transport(name, def, force)
  local c = H.cache[name]
  if c and c.def == def and not force then return c.transport, c.cwd end
  local tr, err
  if def.command then
    local argv = {}
    for i, a in ipairs(def.command) do
      argv[i] = a
    end
    local last = argv[#argv]
    if not (last == "--relay" or (last or ""):match("proctor%-shepherd$")) then
      argv[#argv + 1] = def.shepherd or "proctor-shepherd"
    end
    if argv[#argv] ~= "--relay" then argv[#argv + 1] = "--relay" end
    tr = join(argv)
  elseif def.ssh then
    local remote
    remote, err = H.remote_shepherd(name, def)
    if remote then tr = join(H.ssh_argv(def)) .. " " .. M.quote(remote) end
  else
    err = ("target %s: needs ssh = host or command = { … }"):format(name)
  end
  if not tr then return nil, err end
  H.cache[name] = { def = def, transport = tr, cwd = def.cwd }
  return tr, def.cwd
end

--- Check a setup{ targets } table: ok, or false and what is wrong.
---@param v table
---@return boolean ok, string|nil what
function M.check(v)
  local what = "a table of name = { ssh = host, opts = { … } } or { command = { … } }"
  for k, def in pairs(v) do
    if type(k) ~= "string" or type(def) ~= "table" then return false, what end
    local n = (def.ssh and 1 or 0) + (def.command and 1 or 0)
    if n ~= 1 then return false, what .. ": " .. k .. " needs one of ssh, command" end
    if def.ssh and type(def.ssh) ~= "string" then return false, what .. ": " .. k .. ".ssh" end
    if def.command and (type(def.command) ~= "table" or #def.command == 0) then
      return false, what .. ": " .. k .. ".command must be a list of strings"
    end
    for _, f in ipairs({ "shepherd", "cwd" }) do
      if def[f] ~= nil and type(def[f]) ~= "string" then
        return false, what .. ": " .. k .. "." .. f .. " must be a string"
      end
    end
    if def.opts ~= nil and type(def.opts) ~= "table" then
      return false, what .. ": " .. k .. ".opts must be a list of strings"
    end
  end
  return true
end

return M
