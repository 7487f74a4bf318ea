-- scripts/demo.lua — `make demo`: Neovim with proctor from this checkout and nothing
-- of the user's configuration (run as `nvim --clean -u scripts/demo.lua`).
--
-- Shows: live coloured output, a progress bar redrawn with \r, an interactive
-- prompt answered in the console, and the list view.
local root = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h:h")
-- The demo's runs stay out of the user's history (XDG_STATE_HOME; an older one in
-- XDG_DATA_HOME) and its socket out of the user's editors' place (XDG_RUNTIME_DIR):
-- private directories in Neovim's temporary one, removed when it exits.
do
  local dir = vim.fn.tempname()
  for _, k in ipairs({ "XDG_STATE_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR" }) do
    vim.env[k] = dir .. "/" .. k:lower()
    vim.fn.mkdir(vim.env[k], "p", 448) -- 0700
  end
end
vim.opt.runtimepath:prepend(root)
vim.cmd("runtime plugin/proctor.lua")
vim.o.termguicolors = true
vim.o.laststatus = 2
vim.o.statusline = "%f %= %{v:lua.require'proctor'.statusline()} "

local proctor = require("proctor")
if not proctor.setup({ notify = "always", console = { size = 12 } }) then return end
local core, err = require("proctor.engine").load_core()
if not core then
  vim.api.nvim_echo({ { "proctor demo: " .. err, "ErrorMsg" } }, true, {})
  return
end

local intro = {
  "proctor demo",
  "",
  "  1. a build with coloured output and a progress bar redrawn with \\r (top console)",
  "  2. a prompt that waits for you: the cursor is in its console in Terminal mode;",
  "     type your name and press <Enter>",
  "  3. then the list view opens (:Proctor list) — <CR> opens, c cancels, r reruns, q closes",
  "",
  "Try also:  :Proctor run ls --color=always -l   :Proctor text   :Proctor info   :help proctor",
  "Quit with :qa — running executions are canceled and nothing is left behind.",
}
local buf = vim.api.nvim_get_current_buf()
vim.api.nvim_buf_set_lines(buf, 0, -1, false, intro)
vim.bo[buf].modified = false

local build = [[
for step in compile link test; do
  printf '\033[1;34m==>\033[0m \033[1m%s\033[0m\n' "$step"
  bar=''
  for i in $(seq 0 5 100); do
    printf '\r  \033[36m[%-20s]\033[0m %3d%%' "$bar" "$i"; bar="$bar#"; sleep 0.03
  done
  printf '\n'
done
printf '\033[32m✔ all steps passed\033[0m  \033[33mwarnings: 2\033[0m  \033[31merrors: 0\033[0m\n'
]]
local ex = proctor.run({ cmd = build, pty = true, label = "build" })
ex:open({ enter = false })

vim.defer_fn(function()
  local ask = proctor.run({
    cmd = [[printf '\033[1mWhat is your name?\033[0m '; read name; printf 'Hello, \033[35m%s\033[0m! Opening the list view...\n' "$name"; sleep 1]],
    pty = true,
    label = "prompt",
    on_exit = function()
      vim.schedule(function()
        vim.cmd("stopinsert")
        vim.cmd("Proctor list")
      end)
    end,
  })
  ask:open({ open = "split", size = 8, enter = true, reuse = false })
  vim.cmd("startinsert")
end, 1500)
