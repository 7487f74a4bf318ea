--- proctor.tasks.sources.taskfile — go-task's Taskfile.yml, through
--- `task --list-all --json`, when `task` is installed and the directory is
--- trusted (task evaluates the file's `sh:` variables and includes while it
--- lists). Run by `task NAME`. An output that is not go-task's JSON (another
--- program called `task`, such as Taskwarrior) lists nothing and says so. A
--- task source (tasks/discover.lua); requiring it has no side effects.

local M = {}

M.name = "taskfile"
M.files = {
  "Taskfile.yml",
  "taskfile.yml",
  "Taskfile.yaml",
  "taskfile.yaml",
  "Taskfile.dist.yml",
  "taskfile.dist.yml",
  "Taskfile.dist.yaml",
  "taskfile.dist.yaml",
}
M.needs = "task"
M.evaluates = "task --list-all --json"

function M.run(dir, _, done, e, _, kit)
  local lines = {}
  kit.probe(
    dir,
    "proctor: Taskfile tasks",
    { "task", "--list-all", "--json" },
    function(l) lines[#lines + 1] = l end,
    function()
      local out, files = M.parse(table.concat(lines, "\n"), dir, kit)
      if not out then
        e.note = "`task --list-all --json` gave no go-task JSON (is `task` go-task?)"
        return done({})
      end
      done(out, files)
    end
  )
end

--- The tasks of `task --list-all --json` output (`{ tasks = { { name, desc,
--- aliases, location = { line, column, taskfile } } } }`), in its order, and
--- the Taskfiles they come from; nil when it is not that.
function M.parse(s, dir, kit)
  local ok, doc = pcall(vim.json.decode, s)
  if not ok or type(doc) ~= "table" or type(doc.tasks) ~= "table" then return nil end
  local out, files, seen = {}, {}, {}
  for _, t in ipairs(doc.tasks) do
    local name = type(t) == "table" and (t.name or t.task)
    if type(name) == "string" and name ~= "" then
      local desc = type(t.desc) == "string" and t.desc ~= "" and t.desc or nil
      out[#out + 1] = kit.task("task " .. name, { "task", name }, dir, "taskfile", desc)
      local f = type(t.location) == "table" and t.location.taskfile
      if type(f) == "string" and f ~= "" and not seen[f] then
        seen[f] = true
        files[#files + 1] = f
      end
    end
  end
  return out, files
end

return M
