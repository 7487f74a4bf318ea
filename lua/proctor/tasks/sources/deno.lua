--- proctor.tasks.sources.deno — `deno task` tasks from deno.json or
--- deno.jsonc (comments and trailing commas allowed), when deno is
--- installed. A task is a command string, or `{ command, description,
--- dependencies }`; one with neither command nor dependencies is left out.
--- Reading the file runs nothing: no trust needed. A task source
--- (tasks/discover.lua: `{ name, files, needs, run }`); requiring it has no
--- side effects.

local text = require("proctor.tasks.sources.text")

return {
  name = "deno",
  files = { "deno.json", "deno.jsonc" },
  needs = "deno",
  run = function(dir, present, done, _, _, kit)
    local file = present[1] -- deno.json before deno.jsonc, as deno looks
    local src = kit.read(file) or ""
    local conf = text.json(src, vim.fn.fnamemodify(file, ":t"))
    local out = {}
    local tasks = type(conf) == "table" and conf.tasks or nil
    if type(tasks) ~= "table" then return done(out) end
    for name, t in pairs(tasks) do
      local cmd = type(t) == "string" and t
        or (type(t) == "table" and type(t.command) == "string" and t.command)
        or nil
      local deps = type(t) == "table" and type(t.dependencies) == "table" and #t.dependencies > 0
      if type(name) == "string" and (cmd or deps) then
        local desc = type(t) == "table" and type(t.description) == "string" and t.description or cmd
        local task = kit.task("deno task " .. name, { "deno", "task", name }, dir, "deno", desc)
        task.order = kit.order(src, name)
        out[#out + 1] = task
      end
    end
    done(kit.sorted(out))
  end,
}
