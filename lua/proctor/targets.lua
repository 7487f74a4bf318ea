--- proctor.targets — what a target of setup{ targets } becomes: the transport command
--- the engine's link runs for it (|proctor-targets|), and the shepherd on the far side.
---
---   { ssh = "me@devbox", opts = { "-p", "2222" } }  ─► /bin/sh -c '<prepare>; exec ssh -T …
---        me@devbox "…/proctor-shepherd-<hash> --relay"' (the copy check, then the relay)
---   { command = { "podman", "exec", "-i", "web-1" } } ─► podman exec -i web-1 proctor-shepherd --relay
---
--- An ssh target without `shepherd = path` gets a transport that first checks the far
--- side (one ssh run: `uname -m`, and whether ${XDG_CACHE_HOME:-~/.cache}/proctor/
--- holds a proctor-shepherd-<content hash> that runs); when it does not, the static
--- proctor-shepherd built beside this file (`make`, with musl-gcc) is copied there
--- through ssh: into a temporary name, mode 0700, renamed at once. A far side of
--- another architecture, or where it cannot run, ends the transport with a message
--- naming why (the executions end `target_lost` with it). That check runs in the
--- link's transport, a process of its own, each time the link starts: the editor
--- never waits for ssh (the first execution waits in `starting`).
---
--- Pure Lua: building a transport runs nothing; M.check_far (:checkhealth) runs the
--- check and waits for it. The same under Neovim and under Lua 5.4 (the target tier).
--- Requiring this module has no side effects.

local M = {}
local H = {}

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

-- Run a /bin/sh command line and wait: its output (stdout and stderr) and whether it
-- succeeded (the status is printed last: LuaJIT's close() does not return it).
function H.sh(line)
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

-- The static shepherd to copy (its path), or nil and why.
function H.local_shepherd()
  local path = H.here() .. "/proctor-shepherd-static"
  local f = io.open(path, "rb")
  if not f then
    return nil,
      path
        .. " is missing: build it with `make` (needs musl-gcc, Debian's musl-tools), "
        .. "or give the target `shepherd = path` of one installed on the far side"
  end
  f:close()
  return path
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

--- The podman command line of a target, up to the command run in the container
--- (`opts` go after `exec`: podman's own options and exec's, such as --user).
function H.podman_argv(def)
  local argv = { "podman", "exec" }
  for _, o in ipairs(def.opts or {}) do
    argv[#argv + 1] = o
  end
  argv[#argv + 1] = "-i"
  argv[#argv + 1] = def.podman
  return argv
end

-- The far side's shell of a target with a transport of its own: the argv that runs
-- one /bin/sh command line there (the line is the next word), and the tool's name.
function H.far_shell(def)
  if def.ssh then return H.ssh_argv(def), "ssh" end
  local argv = H.podman_argv(def)
  argv[#argv + 1] = "/bin/sh"
  argv[#argv + 1] = "-c"
  return argv, "podman"
end

-- The local script of an ssh or podman target with our copy of the shepherd, run by
-- /bin/sh in the link's transport (its stdin and stdout are the frames: every far run
-- but the last reads another stdin and writes into a variable). $1 = "check": stop
-- before the relay. @FAR@ (the far shell's argv, its command line follows), @TOOL@,
-- @NAME@ and @STATIC@ are replaced by quoted words; \$ is expanded far away.
H.PREPARE = [=[
n=@NAME@ s=@STATIC@
h=$(sha256sum "$s" 2>&1) || { echo "target $n: cannot hash $s: $h" >&2; exit 1; }
h=$(printf %s "$h" | cut -c1-16) a=$(uname -m)
f="\${XDG_CACHE_HOME:-\$HOME/.cache}/proctor/proctor-shepherd-$h"
o=$(@FAR@ "uname -m; f=\"$f\"; test -x \"\$f\" && \"\$f\" --check; true" </dev/null 2>&1) ||
  { echo "target $n: @TOOL@ failed: $o" >&2; exit 1; }
r=$(printf '%s\n' "$o" | head -n 1)
[ "$r" = "$a" ] || { echo "target $n: the far side is $r, proctor-shepherd-static is $a:\
 give the target \`shepherd = path\` of one built for it" >&2; exit 1; }
case $o in *"proctor-shepherd ok"*) ;; *)
  c=$(@FAR@ "set -e; umask 077; d=\"\${XDG_CACHE_HOME:-\$HOME/.cache}/proctor\"; mkdir -p \"\$d\";\
 t=\"\$d/.proctor-shepherd.\$\$\"; cat > \"\$t\"; chmod 700 \"\$t\"; mv -f \"\$t\" \"$f\"; \"$f\" --check" \
    <"$s" 2>&1)
  case $c in *"proctor-shepherd ok"*) ;; *)
    echo "target $n: cannot install the shepherd in ~/.cache/proctor on the far side\
 (no writable home, or a noexec mount?): $c" >&2; exit 1 ;;
  esac ;;
esac
[ "${1-}" = check ] && { echo "target $n: ready ($f)"; exit 0; }
exec @FAR@ "exec \"$f\" --relay"]=]

-- The transport of an ssh or podman target without `shepherd`: the check, the copy,
-- the relay.
function H.prepared(name, def)
  local static, err = H.local_shepherd()
  if not static then return nil, err end
  local far, tool = H.far_shell(def)
  local subst = { FAR = join(far), TOOL = tool, NAME = M.quote(name), STATIC = M.quote(static) }
  local script = H.PREPARE:gsub("@(%u+)@", subst)
  return "/bin/sh -c " .. M.quote(script) .. " proctor-target"
end

--- What target `name` runs through: its transport command (for /bin/sh -c) and its
--- default cwd (nil: the far side's home). Runs nothing (the far side is checked by
--- the transport itself when the link starts it).
---@param name string
---@param def table a setup{ targets } entry
---@return string|nil transport, string|nil cwd_or_err
function M.transport(name, def)
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
  elseif def.ssh and def.shepherd then
    tr = join(H.ssh_argv(def)) .. " " .. M.quote(M.quote(def.shepherd) .. " --relay")
  elseif def.podman and def.shepherd then
    local argv = H.podman_argv(def)
    argv[#argv + 1] = def.shepherd
    argv[#argv + 1] = "--relay"
    tr = join(argv)
  elseif def.ssh or def.podman then
    tr, err = H.prepared(name, def)
  else
    err = ("target %s: needs ssh = host, podman = container or command = { … }"):format(name)
  end
  if not tr then return nil, err end
  return tr, def.cwd
end

--- Check target `name` now and wait (:checkhealth): for an ssh or podman target with
--- our shepherd, the far side's architecture and the copy (made when missing). Returns
--- a line saying what is there, or nil and why.
---@param name string
---@param def table
---@return string|nil ok, string|nil err
function M.check_far(name, def)
  local tr, err = M.transport(name, def)
  if not tr then return nil, err end
  if not ((def.ssh or def.podman) and not def.shepherd) then return tr end
  local out, ok = H.sh(tr .. " check </dev/null")
  out = out:gsub("%s+$", "")
  if not ok then return nil, out end
  return out
end

--- Check a setup{ targets } table: ok, or false and what is wrong.
---@param v table
---@return boolean ok, string|nil what
function M.check(v)
  local what = "a table of name = { ssh = host, opts = { … } }, { podman = container }"
    .. " or { command = { … } }"
  for k, def in pairs(v) do
    if type(k) ~= "string" or type(def) ~= "table" then return false, what end
    local n = (def.ssh and 1 or 0) + (def.podman and 1 or 0) + (def.command and 1 or 0)
    if n ~= 1 then return false, what .. ": " .. k .. " needs one of ssh, command, podman" end
    for _, f in ipairs({ "ssh", "podman" }) do
      if def[f] ~= nil and type(def[f]) ~= "string" then
        return false, what .. ": " .. k .. "." .. f
      end
    end
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
