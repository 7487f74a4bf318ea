--- proctor.tasks.sources.composer — composer.json `scripts`, run by
--- `composer run-script NAME`, when composer is installed. `desc` is the
--- script's entry in `scripts-descriptions`, else its command(s). Composer's
--- event hooks (pre-install-cmd, post-autoload-dump ...) are left out: they
--- run by themselves. Reading the file runs nothing: no trust needed. A task
--- source (tasks/discover.lua); requiring it has no side effects.

local text = require("proctor.tasks.sources.text")

local M = {}

--- Composer's events: a script of one of these names is a hook.
M.EVENTS = {}
for _, e in ipairs({
  "pre-install-cmd",
  "post-install-cmd",
  "pre-update-cmd",
  "post-update-cmd",
  "pre-status-cmd",
  "post-status-cmd",
  "pre-archive-cmd",
  "post-archive-cmd",
  "pre-autoload-dump",
  "post-autoload-dump",
  "post-root-package-install",
  "post-create-project-cmd",
  "pre-operations-exec",
  "pre-package-install",
  "post-package-install",
  "pre-package-update",
  "post-package-update",
  "pre-package-uninstall",
  "post-package-uninstall",
  "init",
  "command",
  "pre-file-download",
  "post-file-download",
  "pre-command-run",
  "pre-pool-create",
}) do
  M.EVENTS[e] = true
end

M.name = "composer"
M.files = { "composer.json" }
M.needs = "composer"

function M.run(dir, _, done, _, _, kit)
  local src = kit.read(dir .. "/composer.json") or ""
  local conf = text.json(src, "composer.json")
  local out = {}
  local scripts = type(conf) == "table" and conf.scripts or nil
  local descs = type(conf) == "table" and conf["scripts-descriptions"] or nil
  descs = type(descs) == "table" and descs or {}
  for name, s in pairs(type(scripts) == "table" and scripts or {}) do
    if type(name) == "string" and not M.EVENTS[name] then
      local desc = type(descs[name]) == "string" and descs[name] or nil
      if not desc and type(s) == "string" then
        desc = s
      elseif not desc and type(s) == "table" then
        desc = table.concat(vim.tbl_filter(function(x) return type(x) == "string" end, s), "; ")
      end
      local t =
        kit.task("composer " .. name, { "composer", "run-script", name }, dir, "composer", desc)
      t.order = kit.order(src, name)
      out[#out + 1] = t
    end
  end
  done(kit.sorted(out))
end

return M
