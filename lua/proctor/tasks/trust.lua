--- proctor.tasks.trust — whether a project's `.proctor.lua` may run.
---
--- Running a file found in a project is running its code, so it is read only
--- once trusted. Neovim 0.9+ has |vim.secure.read()|: its prompt, and its
--- trust database, decide. Older Neovims get an explicit prompt here; a
--- "trust" answer is kept as the file's sha256 in
--- `stdpath("data")/proctor/trust` (so an edited file asks again), a "no" for
--- the rest of the session. Requiring this module has no side effects.

local M = {}
local H = {}

local compat = require("proctor.compat")

H.denied = {} -- path .. "\0" .. sha256 -> true (this session)

--- The contents of `path` if it is trusted, else nil and why:
--- "denied" (the user said no), "not_asked" (opts.prompt is false and it is
--- not known to be trusted), "unreadable".
---@param path string
---@param opts {prompt: boolean}|nil
---@return string|nil contents, string|nil why
function M.read(path, opts)
  local prompt = not opts or opts.prompt ~= false
  local secure = compat.secure_read()
  if secure then
    if not prompt then return nil, "not_asked" end
    -- its trust database lives there; a missing directory makes "allow" fail
    pcall(vim.fn.mkdir, compat.state_dir(), "p")
    local ok, src = pcall(secure, path)
    if not ok then return nil, "unreadable" end
    if src == nil then return nil, "denied" end
    return src
  end
  local fd = io.open(path, "rb")
  if not fd then return nil, "unreadable" end
  local src = fd:read("*a")
  fd:close()
  local hash = vim.fn.sha256(src)
  if H.trusted()[path] == hash then return src end
  local key = path .. "\0" .. hash
  if H.denied[key] then return nil, "denied" end
  if not prompt then return nil, "not_asked" end
  local answer = vim.fn.confirm(("proctor: %s defines tasks; it is Lua code that runs when read. Trust it?"):format(path),
    "&Trust\n&No", 2)
  if answer ~= 1 then
    H.denied[key] = true
    return nil, "denied"
  end
  H.remember(path, hash)
  return src
end

-- Helpers ------------------------------------------------------------------------

function H.file() return compat.state_dir() .. "/proctor/trust" end

-- path -> sha256 of the trusted contents
function H.trusted()
  local t = {}
  local fd = io.open(H.file(), "r")
  if not fd then return t end
  for line in fd:lines() do
    local hash, path = line:match("^(%x+) (.+)$")
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
  local tmp = file .. ".tmp"
  local fd = assert(io.open(tmp, "w"))
  for p, h in pairs(t) do fd:write(h, " ", p, "\n") end
  fd:close()
  assert(os.rename(tmp, file))
end

M._H = H

return M
