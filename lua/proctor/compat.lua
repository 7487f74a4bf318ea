--- proctor.compat — every difference between the Neovim versions proctor runs
--- on (0.7.2 and newer), found by feature detection, never by version number.
--- The rest of the Lua layer calls these and never probes Neovim itself.
---
---   what                     older Neovim                  newer Neovim
---   libuv binding            vim.loop                      vim.uv (0.10)
---   window options           nvim_win_set_option           nvim_set_option_value{win=} (0.8;
---                                                          the old ones are deprecated in 0.10)
---   a bar per window         'statusline'                  'winbar' (0.8)
---   text area of a window    the window                    the window less its winbar (0.8)
---   window size changed      WinScrolled                   WinResized (0.9)
---   User autocmd payload     none (read proctor.event)     `data` (0.8)
---   state directory          $XDG_STATE_HOME/nvim          stdpath("state") (0.8), the same place
---   :checkhealth reporting   health#report_* (0.7),        vim.health.start/ok/... (0.9; report_*
---                            vim.health.report_* (0.8)     warn as deprecated from 0.10)
---   trusting a project file  proctor's own prompt and      vim.secure.read (0.9); only
---                            trust file (tasks/trust.lua)  "view" then :trust (0.12)
---   trusting a directory     proctor's trust file          vim.secure.read/trust on a
---                                                          directory (0.12)
---   :terminal's environment  VIM, VIMRUNTIME passed on;    VIM, VIMRUNTIME left out; a server
---                            NVIM = v:servername           started for NVIM when none (0.9)
---   CTRL-C in vim.wait()     seen when its time is up      ends it at once (-2)
---   a terminal buffer shows  on its 10 ms refresh timer;   on the next turn of the main loop
---   what was sent            the end of a synchronized     after a synchronized update (DEC
---                            update is ignored             mode 2026) ends (0.12)
---   a function kept out of   jit.off (LuaJIT)              the same; nothing without LuaJIT
---   the trace compiler
---
--- Probes are cheap and run once, on first use. Requiring this module has no
--- side effects.

local M = {}
local H = {}

local api = vim.api

--- The libuv binding (luv).
M.uv = vim.uv or vim.loop

--- Keep LuaJIT's trace compiler out of the functions given (each one's own code:
--- a trace that reaches one of them stops there, and none starts inside it); the
--- functions are returned. For code that runs a bounded number of times per user
--- action and mostly calls into C, such as run()'s path: a loop of 100 run()s
--- in a fresh editor spent more of its main-thread time recording and then
--- abandoning traces through it (NYI C calls, closures) than running it. A
--- no-op without LuaJIT. Never for small leaves called from everywhere
--- (config.get): a trace elsewhere that calls one would stop there too.
---@param ... function
---@return ... function
function M.interpreted(...)
  if jit then
    for i = 1, select("#", ...) do
      jit.off((select(i, ...)))
    end
  end
  return ...
end

--- Bytes that end a synchronized update (DEC private mode 2026, set then
--- reset). Sent to a terminal buffer after the last output, they make Neovim
--- 0.12 copy the terminal's screen into the buffer on the next turn of the main
--- loop instead of on its 10 ms refresh timer; older Neovims ignore the mode
--- (nothing is shown, the cursor does not move) and refresh on the timer. No
--- probe is needed: the same bytes are right on every version.
M.TERMINAL_FLUSH = "\27[?2026h\27[?2026l"

--- Does this Neovim have 'winbar'?
---@return boolean
function M.has_winbar()
  if H.winbar == nil then H.winbar = vim.fn.exists("+winbar") == 1 end
  return H.winbar
end

--- Set a window-local option of window `win`.
---@param win integer
---@param name string
---@param value any
function M.set_win_option(win, name, value)
  if H.scoped_options() then
    api.nvim_set_option_value(name, value, { win = win })
  else
    api.nvim_win_set_option(win, name, value)
  end
end

--- A window-local option of window `win`.
---@param win integer
---@param name string
---@return any
function M.get_win_option(win, name)
  if H.scoped_options() then return api.nvim_get_option_value(name, { win = win }) end
  return api.nvim_win_get_option(win, name)
end

--- The text area of window `win`: columns without the number, sign and fold
--- columns, rows without the winbar (and, as always, without the statusline).
--- This is what a terminal shown in the window displays.
---@return integer cols, integer rows
function M.text_size(win)
  local info = vim.fn.getwininfo(win)[1]
  if not info then return 0, 0 end
  -- getwininfo(): `height` leaves the winbar out where there is one; `width`
  -- includes `textoff` columns of number/sign/fold column.
  return info.width - (info.textoff or 0), info.height
end

--- The autocmd events after which the windows may have a new size:
--- WinResized where it exists (0.9), else WinScrolled, which also fires then.
---@return string[]
function M.resize_events()
  local events = { "VimResized", "WinScrolled", "WinEnter", "BufWinEnter" }
  if vim.fn.exists("##WinResized") == 1 then events[#events + 1] = "WinResized" end
  return events
end

--- Can User autocmds carry a `data` payload (nvim_exec_autocmds{data=})?
---@return boolean
function M.autocmd_data()
  if H.data == nil then
    -- An empty group of our own: nothing runs, only the key is checked.
    local g = api.nvim_create_augroup("proctor_compat_probe", { clear = true })
    H.data = pcall(
      api.nvim_exec_autocmds,
      "User",
      { group = g, pattern = "ProctorProbe", modeline = false, data = {} }
    )
    pcall(api.nvim_del_augroup_by_id, g)
  end
  return H.data
end

--- stdpath("state") where Neovim has it; before (0.7) the directory it
--- would be: $XDG_STATE_HOME/nvim, else ~/.local/state/nvim.
---@return string
function M.state_dir()
  local ok, dir = pcall(vim.fn.stdpath, "state")
  if ok then return dir end
  local xdg = vim.env.XDG_STATE_HOME
  if not xdg or xdg == "" then xdg = (vim.env.HOME or vim.fn.expand("~")) .. "/.local/state" end
  return xdg .. "/nvim"
end

--- The :checkhealth reporter: { start, ok, info, warn, error }, each
--- fn(msg, advice?) with advice a list of strings.
---@return {start: function, ok: function, info: function, warn: function, error: function}
function M.health()
  local h = vim.health
  if h and h.start then
    return { start = h.start, ok = h.ok, info = h.info, warn = h.warn, error = h.error }
  elseif h and h.report_start then
    return {
      start = h.report_start,
      ok = h.report_ok,
      info = h.report_info,
      warn = h.report_warn,
      error = h.report_error,
    }
  end
  local function fn(name)
    return function(msg, advice)
      if advice then
        vim.fn["health#report_" .. name](msg, advice)
      else
        vim.fn["health#report_" .. name](msg)
      end
    end
  end
  return {
    start = fn("start"),
    ok = fn("ok"),
    info = fn("info"),
    warn = fn("warn"),
    error = fn("error"),
  }
end

--- |vim.secure.read()| where Neovim has it (0.9), else nil: the caller asks
--- itself (proctor.tasks.trust).
---@return (fun(path: string): string|nil)|nil
function M.secure_read() return vim.secure and vim.secure.read or nil end

--- For a vim.wait() condition: was CTRL-C typed? vim.wait() of Neovim 0.7
--- notices it only when its time is up; peeking at the typeahead (getchar(1))
--- raises "Keyboard interrupt" at once on every version.
---@return boolean
function M.interrupted() return not pcall(vim.fn.getchar, 1) end

--- What a PTY console's job gets in place of this Neovim's own environment,
--- the way :terminal does on current Neovim (on 0.7 too, whose :terminal
--- still passed VIM and VIMRUNTIME on, so a Vim inside loaded this runtime):
--- `drop` lists the keys left out, `set` NVIM = v:servername. With no server
--- yet (nvim --listen was not used and none started), one is started, as
--- :terminal does from 0.9.
---@return {set: table<string, string>, drop: string[]}
function M.terminal_env()
  local name = vim.v.servername or ""
  if name == "" then
    local ok, addr = pcall(vim.fn.serverstart)
    name = ok and type(addr) == "string" and addr or ""
  end
  local set = {}
  if name ~= "" then set.NVIM = name end
  return { set = set, drop = { "VIM", "VIMRUNTIME" } }
end

--- |vim.secure.read()| of `path` (a file, or a directory where Neovim trusts
--- directories), its prompt opened by `intro` (what asked and why: Neovim's
--- own words start with "exrc:"). opts.ask = false never shows the prompt:
--- it is answered "ignore", so only what the trust database already says
--- counts and nothing is written. Returns what vim.secure.read() returned
--- (nil where it raised, e.g. a directory on a Neovim that reads it as a
--- file), and the label of the answer the user chose ("view", "allow" ...).
---@param path string
---@param opts {intro: string|nil, ask: boolean|nil}|nil
---@return string|boolean|nil result, string|nil answer
function M.secure_ask(path, opts)
  opts = opts or {}
  local read = M.secure_read()
  if not read then return nil end
  -- the trust database lives there; a missing directory makes "allow" fail
  pcall(vim.fn.mkdir, M.state_dir(), "p")
  local orig = vim.fn.confirm
  local answer
  vim.fn.confirm = function(msg, choices, ...)
    local labels = vim.split((choices or ""):gsub("&", ""), "\n")
    if opts.ask == false then
      answer = "ignore"
      return 1 -- the first choice, "ignore": nothing is written
    end
    if opts.intro then msg = opts.intro .. "\n" .. msg end
    local n = orig(msg, choices, ...)
    answer = labels[n]
    return n
  end
  local ok, res = pcall(read, path)
  vim.fn.confirm = orig
  if not ok then return nil, answer end
  return res, answer
end

--- Does this Neovim keep directories in its trust database, apart from
--- files (|vim.secure.read()| of a directory asks with an "allow" choice,
--- returns true once trusted, and the file prompt differs)? 0.12 does; 0.10
--- reads a directory as an empty file, 0.11 asks but answers nil. Probed
--- once, on an empty private directory and file, answering "ignore":
--- nothing is written.
---@return boolean
function M.dir_trust()
  if H.dir_trust == nil then
    H.dir_trust = false
    local read, base = M.secure_read(), vim.fn.tempname()
    if
      read
      and vim.fn.mkdir(base .. "/d", "p") == 1
      and vim.fn.writefile({}, base .. "/f") == 0
    then
      local seen = {}
      local orig = vim.fn.confirm
      vim.fn.confirm = function(_, choices)
        seen[#seen + 1] = (choices or ""):gsub("&", "")
        return 1
      end
      pcall(read, base .. "/d")
      pcall(read, base .. "/f")
      vim.fn.confirm = orig
      H.dir_trust = seen[1] ~= nil and seen[1]:find("allow") ~= nil and seen[1] ~= seen[2]
    end
    vim.fn.delete(base, "rf")
  end
  return H.dir_trust
end

--- Trust `path` in Neovim's own database (|vim.secure.trust()| with
--- action "allow" and a path: 0.12 takes a path, older ones only a buffer).
--- Returns true when Neovim took it, else false and why.
---@param path string a file or directory
---@return boolean ok, string|nil err
function M.secure_trust(path)
  if not (vim.secure and vim.secure.trust) then
    return false, "this Neovim has no vim.secure.trust()"
  end
  pcall(vim.fn.mkdir, M.state_dir(), "p")
  local ok, res, msg = pcall(vim.secure.trust, { action = "allow", path = path })
  if not ok then return false, tostring(res) end
  if not res then return false, tostring(msg) end
  return true
end

-- Helpers ------------------------------------------------------------------------

-- Does nvim_get/set_option_value take {win=} and {buf=}? (0.7's takes only scope.)
function H.scoped_options()
  if H.scoped == nil then H.scoped = pcall(api.nvim_get_option_value, "buftype", { buf = 0 }) end
  return H.scoped
end

return M
