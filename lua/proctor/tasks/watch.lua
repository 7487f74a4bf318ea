--- proctor.tasks.watch — call back once after a burst of file changes.
---
---   local w = watch.start({ root = "/src/app", patterns = { "*.c", "*.h" },
---                          debounce_ms = 200 }, function(paths) ... end)
---   w.stop()
---
--- Two sources, debounced together:
---   - |BufWritePost| of a buffer under `root` whose path matches (always);
---   - with `fs = true`, libuv fs events: one recursive watch where the
---     platform has them (macOS, Windows); on Linux (inotify is per directory)
---     one watch per directory under `root`, at most `max_dirs`, new
---     directories added as they appear. A change on disk is dropped when the
---     file was written while `busy(mtime_ms)` says a run was going (a
---     build's own outputs), before the last callback (seen already), when
---     git ignores it (`git check-ignore`, where git is present), or when it is
---     an editor's temporary file (4913, *.swp, *~).
--- `ignore`d directory names (".git", "node_modules", "build" …) are skipped
--- by both. A pattern without "/" matches the file's name ("*.c"); one with
--- "/" matches the path relative to `root` ("src/**/*.h"). The callback runs
--- on the main loop `debounce_ms` after the last change of a burst.
--- Requiring this module has no side effects.

local M = {}
local H = {}

local api = vim.api
local util = require("proctor.util")
local compat = require("proctor.compat")
local uv = compat.uv

M.IGNORE = {
  ".git",
  ".hg",
  ".svn",
  "node_modules",
  "__pycache__",
  ".venv",
  "venv",
  "target",
  ".cache",
  "build",
  "_build",
  ".build",
  "dist",
  "out",
  "zig-out",
  ".zig-cache",
  "CMakeFiles",
  ".tox",
  ".mypy_cache",
  ".pytest_cache",
  ".next",
}
M.MAX_DIRS = 2000

H.next_id = 0

---@class proctor.tasks.WatchOpts
---@field root string
---@field patterns string[]|nil default { "*" }
---@field debounce_ms integer|nil default 200
---@field ignore string[]|nil directory names not watched (default M.IGNORE)
---@field max_dirs integer|nil
---@field fs boolean|nil also changes on disk (default: only this editor's writes)
---@field busy (fun(mtime_ms: integer): boolean)|nil was a run going then? (fs changes only)

--- Start watching. Returns { stop = fn, dirs = n } or nil and a message.
---@param opts proctor.tasks.WatchOpts
---@param cb fun(paths: string[])
function M.start(opts, cb)
  local root = vim.fn.fnamemodify(opts.root, ":p"):gsub("(.)/$", "%1")
  if vim.fn.isdirectory(root) == 0 then return nil, "no such directory " .. root end
  local w = {
    root = root,
    cb = cb,
    debounce = opts.debounce_ms or 200,
    pending = {},
    handles = {},
    ignore = {},
    max_dirs = opts.max_dirs or M.MAX_DIRS,
    stopped = false,
    dirs = 0,
    fs = opts.fs == true,
    busy = opts.busy or function() return false end,
    from_fs = {}, -- path -> true: pending because of a change on disk
    flushed_at = 0, -- wall-clock ms of the last callback
  }
  for _, n in ipairs(opts.ignore or M.IGNORE) do
    w.ignore[n] = true
  end
  local err
  w.match, err = H.matcher(opts.patterns or { "*" })
  if not w.match then return nil, err end
  H.next_id = H.next_id + 1
  w.group = api.nvim_create_augroup("proctor_watch_" .. H.next_id, { clear = true })
  api.nvim_create_autocmd("BufWritePost", {
    group = w.group,
    callback = function(ev)
      local path =
        vim.fn.fnamemodify(ev.match ~= "" and ev.match or api.nvim_buf_get_name(ev.buf), ":p")
      H.changed(w, path, false)
    end,
  })
  if w.fs and not H.watch_recursive(w) then H.watch_tree(w, root) end
  return {
    stop = function() H.stop(w) end,
    dirs = function() return w.dirs end,
  }
end

-- Helpers ------------------------------------------------------------------------

-- A function(rel_path) -> boolean for a list of globs.
function H.matcher(patterns)
  local base, full = {}, {}
  for _, p in ipairs(patterns) do
    if type(p) ~= "string" or p == "" then
      return nil, "watch patterns must be non-empty strings"
    end
    local ok, re = pcall(vim.regex, vim.fn.glob2regpat(p))
    if not ok then return nil, ("bad watch pattern '%s'"):format(p) end
    if p:find("/", 1, true) then
      full[#full + 1] = re
    else
      base[#base + 1] = re
    end
  end
  return function(rel)
    local name = rel:match("[^/]+$") or rel
    for _, re in ipairs(base) do
      if re:match_str(name) then return true end
    end
    for _, re in ipairs(full) do
      if re:match_str(rel) then return true end
    end
    return false
  end
end

-- An editor's temporary files: Vim's write test (4913), swap and backup files.
function H.junk(name) return name == "4913" or name:find("%.sw[a-p]$") or name:find("~$") end

-- A change of absolute `path` (main loop or fast context); `fs`: seen on disk.
function H.changed(w, path, fs)
  if w.stopped then return end
  if vim.in_fast_event() then
    return vim.schedule(function() H.changed(w, path, fs) end)
  end
  if path:sub(1, #w.root + 1) ~= w.root .. "/" then return end
  local rel = path:sub(#w.root + 2)
  for part in rel:gmatch("[^/]+") do
    if w.ignore[part] then return end
  end
  if not w.match(rel) then return end
  if fs then
    if H.junk(rel:match("[^/]+$") or rel) then return end
    local st = uv.fs_stat(path)
    local m = st and (st.mtime.sec * 1000 + math.floor((st.mtime.nsec or 0) / 1e6)) or util.now_ms()
    if m <= w.flushed_at or w.busy(m) then return end
    if not w.pending[path] then w.from_fs[path] = true end
  else
    w.from_fs[path] = nil
  end
  w.pending[path] = true
  w.timer = w.timer or uv.new_timer()
  w.timer:stop()
  w.timer:start(
    w.debounce,
    0,
    vim.schedule_wrap(function()
      if w.stopped then return end
      local paths = H.not_ignored(w, vim.tbl_keys(w.pending))
      w.pending, w.from_fs = {}, {}
      w.flushed_at = util.now_ms()
      if #paths == 0 then return end
      table.sort(paths)
      local ok, e = pcall(w.cb, paths)
      if not ok then util.notify("watch: " .. tostring(e)) end
    end)
  )
end

-- `paths` without the changes on disk that git ignores (where git is present).
function H.not_ignored(w, paths)
  local fs = {}
  for _, p in ipairs(paths) do
    if w.from_fs[p] then fs[#fs + 1] = p end
  end
  if #fs == 0 or vim.fn.executable("git") ~= 1 then return paths end
  local out = vim.fn.systemlist({ "git", "-C", w.root, "check-ignore", "--stdin" }, fs)
  if vim.v.shell_error ~= 0 then return paths end -- 1: none ignored; 128: not a repository
  local ignored = {}
  for _, p in ipairs(out) do
    ignored[vim.fn.fnamemodify(p, ":p")] = true
    ignored[p] = true
  end
  return vim.tbl_filter(function(p) return not ignored[p] end, paths)
end

-- One recursive watch (not on Linux: libuv ignores the flag there).
function H.watch_recursive(w)
  if uv.os_uname().sysname == "Linux" then return false end
  local h = uv.new_fs_event()
  local ok = h
    and h:start(w.root, { recursive = true }, function(err, name)
      if not err and name then H.changed(w, w.root .. "/" .. name, true) end
    end)
  if not ok then
    if h then h:close() end
    return false
  end
  w.handles[w.root] = h
  w.dirs = 1
  return true
end

-- A watch on `dir` and every directory below it (within max_dirs).
function H.watch_tree(w, dir)
  local todo = { dir }
  while #todo > 0 and w.dirs < w.max_dirs do
    local d = table.remove(todo)
    if not w.handles[d] then
      H.watch_dir(w, d)
      local fs = uv.fs_scandir(d)
      while fs do
        local name, kind = uv.fs_scandir_next(fs)
        if not name then break end
        if kind == "directory" and not w.ignore[name] then todo[#todo + 1] = d .. "/" .. name end
      end
    end
  end
end

function H.watch_dir(w, dir)
  local h = uv.new_fs_event()
  if not h then return end
  local ok = h:start(dir, {}, function(err, name)
    if err or not name or w.stopped then return end
    local path = dir .. "/" .. name
    vim.schedule(function()
      if w.stopped then return end
      local st = uv.fs_stat(path)
      if st and st.type == "directory" then
        if not w.ignore[name] then H.watch_tree(w, path) end
      else
        H.changed(w, path, true)
      end
    end)
  end)
  if not ok then
    h:close()
    return
  end
  w.handles[dir] = h
  w.dirs = w.dirs + 1
end

function H.stop(w)
  if w.stopped then return end
  w.stopped = true
  pcall(api.nvim_del_augroup_by_id, w.group)
  for _, h in pairs(w.handles) do
    if not h:is_closing() then
      h:stop()
      h:close()
    end
  end
  w.handles = {}
  if w.timer and not w.timer:is_closing() then
    w.timer:stop()
    w.timer:close()
  end
end

M._H = H

return M
