--- proctor.tasks.trust — whether a project may run code in the editor's name.
---
--- Two things run a project's code: reading its `.proctor.lua` (Lua), and
--- probes that evaluate its build files (`make -pRrq :` expands `$(shell …)`,
--- `:=` and `include` while it reads the Makefile; `just --dump` is the same).
--- So a project file is read, and a directory probed, only once trusted.
---
---   file       Neovim's trust database through |vim.secure.read()| (0.9+):
---              its prompt, opened by a line saying that proctor asks and
---              why; on 0.12, where a file has no "allow", the user views it
---              and runs |:trust|. Older Neovims: proctor's own prompt.
---   directory  Neovim's database where it keeps directories apart (0.12:
---              vim.secure.read/trust on a directory); else proctor's own.
---   explicit   M.allow(dir) (`:Proctor trust`, proctor.trust()): the
---              directory and its project file, no prompt.
---
--- proctor's own trust file, `stdpath("state")/proctor/trust`, holds
--- "<sha256> <file>" (an edit asks again) and "directory <dir>" lines; it is
--- also the fallback where Neovim's database cannot take an entry. Each file
--- version and directory is asked about at most once a session: afterwards
--- only the databases are read (so a |:trust| counts at the next use, and a
--- "no" does not nag). Requiring this module has no side effects.

local M = {}
local H = {}

local compat = require("proctor.compat")
local util = require("proctor.util")

H.asked = {} -- path .. "\0" .. sha256 (a file), or the directory -> true (this session)

--- The contents of `path` if it is trusted, else nil and why:
--- "denied" (asked this session, not trusted), "not_asked" (opts.prompt is
--- false and it is not trusted), "unreadable".
---@param path string
---@param opts {prompt: boolean}|nil
---@return string|nil contents, string|nil why
function M.read(path, opts)
  local prompt = not opts or opts.prompt ~= false
  local src = H.slurp(path)
  if not src then return nil, "unreadable" end
  local hash = vim.fn.sha256(src)
  if H.trusted()[path] == hash then return src end
  local key = path .. "\0" .. hash
  local ask = prompt and not H.asked[key]
  if compat.secure_read() then
    if ask then H.asked[key] = true end
    local got, answer = compat.secure_ask(path, { ask = ask, intro = H.intro_file(path) })
    if type(got) == "string" then return got end
    if answer == "view" then
      util.notify(
        ("to use the tasks of %s, run :trust in its window; the next :Proctor run " .. "lists them"):format(
          path
        ),
        vim.log.levels.INFO
      )
    end
    return nil, ask and "denied" or (H.asked[key] and "denied" or "not_asked")
  end
  if H.asked[key] then return nil, "denied" end
  if not prompt then return nil, "not_asked" end
  H.asked[key] = true
  local answer = vim.fn.confirm(H.intro_file(path) .. "\nTrust it?", "&Trust\n&No", 2)
  if answer ~= 1 then return nil, "denied" end
  H.remember(path, hash)
  return src
end

--- Is directory `dir` trusted: may proctor run probes that evaluate its
--- project files? opts.prompt asks (once a session per directory) when it
--- is not; opts.why says what the probe would do. Never raises.
---@param dir string absolute
--- opts.intro: the question instead (a format with one %s, the directory).
---@param opts {prompt: boolean|nil, why: string|nil, intro: string|nil}|nil
---@return boolean
function M.dir(dir, opts)
  opts = opts or {}
  local real = H.real(dir)
  if not real then return false end
  if H.dir_known(real) then return true end
  if not opts.prompt or H.asked[real] then return false end
  H.asked[real] = true
  local intro = opts.intro and opts.intro:format(real)
    or (
      "proctor: to list the tasks of %s it would run `%s`, which evaluates the project's build files: "
      .. "they can run any command. Trust this directory?"
    ):format(real, opts.why or "a probe")
  if compat.dir_trust() then
    local got = compat.secure_ask(real, { intro = intro })
    return got == true
  end
  if vim.fn.confirm(intro, "&Trust\n&No", 2) ~= 1 then return false end
  H.remember(real, "directory")
  return true
end

--- Is directory `dir` trusted (never asks)?
---@param dir string
---@return boolean
function M.dir_trusted(dir) return M.dir(dir, { prompt = false }) end

--- Trust directory `dir` and its project file (`name`, when it has one;
--- false: the directory only): the user's explicit act, no prompt. Neovim's database where it takes the
--- entry, else proctor's own. Returns the directory (resolved) or nil, err.
---@param dir string
---@param name string|false|nil the project file's name (default ".proctor.lua")
---@return string|nil dir, string|nil err
function M.allow(dir, name)
  local real = H.real(dir)
  if not real or vim.fn.isdirectory(real) == 0 then
    return nil, "ENOENT: no such directory " .. tostring(dir)
  end
  if not (compat.dir_trust() and compat.secure_trust(real) and H.dir_known(real)) then
    H.remember(real, "directory")
  end
  local file = name ~= false and (real .. "/" .. (name or ".proctor.lua")) or nil
  local src = file and H.slurp(file)
  if src then
    -- Neovim's database where it takes a path (0.12), and proctor's own
    -- either way: an older Neovim's prompt never sees this file again.
    if compat.secure_read() then compat.secure_trust(file) end
    H.remember(file, vim.fn.sha256(src))
  end
  return real
end

-- Helpers ------------------------------------------------------------------------

function H.intro_file(path)
  return (
    "proctor: %s defines this project's tasks; it is Lua code that runs when read, so proctor reads it only "
    .. "once you trust it."
  ):format(path)
end

function H.slurp(path)
  local fd = io.open(path, "rb")
  if not fd then return nil end
  local src = fd:read("*a")
  fd:close()
  return src
end

function H.real(dir) return compat.uv.fs_realpath(dir) end

-- Does either database trust directory `real` (never asks)?
function H.dir_known(real)
  if H.trusted()[real] == "directory" then return true end
  if not compat.dir_trust() then return false end
  return compat.secure_ask(real, { ask = false }) == true
end

function H.file() return compat.state_dir() .. "/proctor/trust" end

-- path -> sha256 of the trusted contents, or "directory"
function H.trusted()
  local t = {}
  local fd = io.open(H.file(), "r")
  if not fd then return t end
  for line in fd:lines() do
    local hash, path = line:match("^(%w+) (.+)$")
    if hash then t[path] = hash end
  end
  fd:close()
  return t
end

function H.remember(path, hash)
  local t = H.trusted()
  t[path] = hash
  local file = H.file()
  vim.fn.mkdir(vim.fn.fnamemodify(file, ":h"), "p")
  -- a name of this editor's own: two editors trusting at once must not
  -- write (and rename away) one shared temporary file
  local tmp = string.format("%s.%d.tmp", file, vim.fn.getpid())
  local fd = assert(io.open(tmp, "w"))
  for p, h in pairs(t) do
    fd:write(h, " ", p, "\n")
  end
  fd:close()
  assert(os.rename(tmp, file))
end

M._H = H

return M
