--- proctor.tasks.sources.mise — mise tasks, run by `mise run NAME`, when
--- mise is installed:
---   trusted directory  `mise tasks ls --json` (mise evaluates its config's
---                      templates, so only there): every task mise knows,
---                      file tasks (.mise/tasks/ ...) and included configs too
---   else, or when it fails: the `[tasks]` of the config files read as TOML
---                      (nothing runs): `name = "cmd"`, `name = ["a", "b"]`,
---                      `[tasks.name]` with run, description, hide
--- Hidden tasks are left out. An answer from the files alone is not cached
--- (`partial`): a trust given later counts at the next use. A task source
--- (tasks/discover.lua); requiring it has no side effects.

local text = require("proctor.tasks.sources.text")

local M = {}

M.name = "mise"
M.files = {
  "mise.toml",
  ".mise.toml",
  "mise.local.toml",
  ".mise.local.toml",
  ".config/mise.toml",
  "mise/config.toml",
  ".config/mise/config.toml",
}
M.needs = "mise"
--- Directories of file tasks: their change (a task added) is a new probe.
M.TASK_DIRS = { "mise-tasks", ".mise-tasks", ".mise/tasks", "mise/tasks", ".config/mise/tasks" }

function M.run(dir, present, done, e, opts, kit)
  local extra = {}
  for _, d in ipairs(M.TASK_DIRS) do
    extra[#extra + 1] = dir .. "/" .. d
  end
  local function from_files(why)
    e.partial = true
    e.note = why
    local ok, got = pcall(M.from_toml, present, dir, kit)
    if not ok then return kit.fail(e, got, done) end
    done(got, extra)
  end
  if not kit.trusted(dir, opts, "mise tasks ls --json") then
    return from_files("not trusted: the [tasks] of its config files only (no file tasks)")
  end
  local lines = {}
  kit.probe(
    dir,
    "proctor: mise tasks",
    { "mise", "tasks", "ls", "--json" },
    function(l) lines[#lines + 1] = l end,
    function(ok)
      local got = ok and M.from_json(table.concat(lines, "\n"), dir, kit)
      if not got then return from_files("`mise tasks ls --json` failed: its config files read") end
      done(got, extra)
    end
  )
end

--- Tasks from the output of `mise tasks ls --json` (an array of tasks), or
--- nil when it is not that.
function M.from_json(s, dir, kit)
  local ok, list = pcall(vim.json.decode, s)
  if not ok or type(list) ~= "table" then return nil end
  local out = {}
  for _, t in ipairs(list) do
    if type(t) == "table" and type(t.name) == "string" and t.hide ~= true then
      out[#out + 1] = M.task(t.name, t, dir, kit)
    end
  end
  return out
end

--- Tasks from the `[tasks]` of the config files (the first file naming a task wins).
function M.from_toml(files, dir, kit)
  local seen, out = {}, {}
  for _, f in ipairs(files) do
    local conf = text.toml(kit.read(f) or "", vim.fn.fnamemodify(f, ":t"))
    local tasks = type(conf.tasks) == "table" and conf.tasks or {}
    local names = vim.tbl_keys(tasks)
    table.sort(names)
    for _, name in ipairs(names) do
      local t = tasks[name]
      if type(t) == "string" or (type(t) == "table" and t[1] ~= nil) then t = { run = t } end
      if not seen[name] and type(t) == "table" and t.hide ~= true then
        seen[name] = true
        out[#out + 1] = M.task(name, t, dir, kit)
      end
    end
  end
  return out
end

function M.task(name, t, dir, kit)
  local desc = type(t.description) == "string" and t.description ~= "" and t.description or nil
  if not desc and type(t.run) == "string" then desc = t.run end
  if not desc and type(t.run) == "table" then
    desc = table.concat(vim.tbl_filter(function(x) return type(x) == "string" end, t.run), "; ")
  end
  if desc == "" then desc = nil end
  return kit.task("mise run " .. name, { "mise", "run", name }, dir, "mise", desc)
end

return M
