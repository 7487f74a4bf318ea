--- proctor.keys — the keys of proctor's buffers (setup{ keymaps }: a console,
--- the list view, the text view) and the table they dispatch through.
---
--- The buffers that map keys (console/, list, views) stand below the module
--- that says what a key does (proctor.actions): actions registers its table
--- here when it loads (M.register), and a key calls the action it names
--- through that table. So the buffers never name actions, and actions
--- requires them the ordinary way (down the floors):
---
---   console, list, views ──► keys.map(buf, kind, get_id) ──► vim.keymap.set(lhs)
---   actions (at load) ──► keys.register{ actions, call, say_many }
---   a key pressed ──► dispatch.call(action, id, { key = true })
---
--- The key names come from config (`keymaps.console|list|text`, their
--- defaults in the schema); the action names from config.ACTIONS (the order
--- the help and the keys float show). A buffer mapped before actions has
--- registered gets its keys when it does (proctor's own entry points load
--- actions with the console: proctor.H.EXTENSIONS).
---
--- Requiring this module has no side effects.

local M = {}
local H = {}

local config = require("proctor.config")
local util = require("proctor.util")

---@class proctor.KeyDispatch what actions registers (M.register)
---@field actions table<string, proctor.Action> the actions by name: desc, id, range
---@field call fun(name: string, id: integer|nil, opts: table): any runs one, problems shown
---@field say_many fun(name: string, ids: integer[]) one message for a Visual range

--- The dispatch table actions registered (nil until it loads).
---@type proctor.KeyDispatch|nil
M.dispatch = nil

H.waiting = {} -- buffers mapped before the dispatch was registered: { buf, kind, get_id, opts }

--- Register the dispatch table (actions.lua, at load); buffers that asked for
--- their keys before it did get them now.
---@param dispatch proctor.KeyDispatch
function M.register(dispatch)
  M.dispatch = dispatch
  local waiting = H.waiting
  H.waiting = {}
  for _, w in ipairs(waiting) do
    if vim.api.nvim_buf_is_valid(w[1]) then M.map(w[1], w[2], w[3], w[4]) end
  end
end

--- Position of action `name` in config.ACTIONS (unknown ones after every known one).
---@param name string
---@return integer
function M.rank(name)
  for i, n in ipairs(config.ACTIONS) do
    if n == name then return i end
  end
  return #config.ACTIONS + 1
end

-- The action `rhs` names, from the dispatch table (nil: none, or not registered yet).
function H.action(rhs)
  return type(rhs) == "string" and M.dispatch and M.dispatch.actions[rhs] or nil
end

--- The bindings of key map `map` ({lhs} = action name | function | false) that
--- are set, in action order: list of { lhs, action, desc }.
---@param map table<string, string|function|false>
---@return {[1]: string, [2]: string|function, [3]: string}[]
function M.bindings(map)
  local list = {}
  for lhs, rhs in pairs(map or {}) do
    if rhs then
      local a = H.action(rhs)
      list[#list + 1] = { lhs, rhs, a and a.desc or "(your function)" }
    end
  end
  table.sort(list, function(a, b)
    local ra = type(a[2]) == "string" and M.rank(a[2]) or math.huge
    local rb = type(b[2]) == "string" and M.rank(b[2]) or math.huge
    if ra ~= rb then return ra < rb end
    return a[1] < b[1]
  end)
  return list
end

--- The bindings of key map `map` grouped by action, in action order: one row
--- per action with its keys (`lhs`: "<CR> o") and description; and the
--- widest `lhs` (display columns). What the help's key tables and the keys
--- float show.
---@param map table<string, string|function|false>
---@return {keys: string[], lhs: string, desc: string}[] rows, integer width
function M.key_rows(map)
  local rows, by = {}, {}
  for _, b in ipairs(M.bindings(map)) do
    local key = type(b[2]) == "string" and b[2] or b[1]
    if not by[key] then
      by[key] = { keys = {}, desc = b[3] }
      rows[#rows + 1] = by[key]
    end
    table.insert(by[key].keys, b[1])
  end
  local w = 0
  for _, r in ipairs(rows) do
    r.lhs = table.concat(r.keys, " ")
    w = math.max(w, vim.fn.strdisplaywidth(r.lhs))
  end
  return rows, w
end

--- Map the keys of `keymaps[kind]` (setup{ keymaps }) in buffer `buf`: each
--- calls its action (or the function) with the execution `get_id()` returns.
--- With `opts.range`, an action marked `range` also gets the key in Visual
--- mode (a doubled key such as "dd" as its first letter, "d") and runs once
--- for each execution `opts.range(first_line, last_line)` returns.
---@param buf integer
---@param kind "console"|"list"|"text"
---@param get_id fun(): integer|nil
---@param opts {range: (fun(first: integer, last: integer): integer[])|nil, after: fun(name: string)|nil,
---  need_id: string|nil}|nil need_id: the message when an action needs an id and get_id() has none
function M.map(buf, kind, get_id, opts)
  opts = opts or {}
  vim.b[buf].proctor_keymap = kind
  local d = M.dispatch
  if not d then
    H.waiting[#H.waiting + 1] = { buf, kind, get_id, opts }
    return
  end
  local map = config.get().keymaps[kind] or {}
  for _, b in ipairs(M.bindings(map)) do
    local lhs, rhs = b[1], b[2]
    local kopts = {
      buffer = buf,
      nowait = #lhs == 1 or lhs:sub(1, 1) == "<",
      silent = true,
      desc = "proctor: " .. b[3],
    }
    if type(rhs) == "function" then
      vim.keymap.set("n", lhs, function() util.protect(rhs, get_id()) end, kopts)
    else
      vim.keymap.set("n", lhs, function()
        local id = get_id()
        if d.actions[rhs].id == "required" and id == nil and opts.need_id then
          util.notify(opts.need_id, vim.log.levels.WARN)
          return
        end
        d.call(rhs, id, { key = true })
        if opts.after then opts.after(rhs) end
      end, kopts)
      if opts.range and d.actions[rhs].range then
        local vlhs = (#lhs == 2 and lhs:sub(1, 1) == lhs:sub(2, 2)) and lhs:sub(1, 1) or lhs
        vim.keymap.set("x", vlhs, function()
          local first, last = vim.fn.line("v"), vim.fn.line(".")
          if first > last then
            first, last = last, first
          end
          vim.api.nvim_feedkeys(
            vim.api.nvim_replace_termcodes("<Esc>", true, false, true),
            "nx",
            false
          )
          local ids = opts.range(first, last)
          if #ids == 0 and opts.need_id then util.notify(opts.need_id, vim.log.levels.WARN) end
          for _, id in ipairs(ids) do
            d.call(rhs, id, { quiet = #ids > 1, key = true })
          end
          if #ids > 1 then d.say_many(rhs, ids) end
          if opts.after then opts.after(rhs) end
        end, vim.tbl_extend("force", kopts, { nowait = true }))
      end
    end
  end
end

return M
