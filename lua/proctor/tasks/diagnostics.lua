--- proctor.tasks.diagnostics — problems found in an execution's output, as
--- |vim.diagnostic| entries and a quickfix list.
---
---   reader chunk ──► matcher:feed ──► items ──► every PUBLISH_MS: vim.diagnostic.set
---                                                 (namespace per task name; files
---                                                  until BUDGET_MS per tick is used)
---   end of output ──► last publish ──► quickfix ("on_failure" | "always" | "never"),
---                                      in batches of QF_BATCH items per tick
---
--- A new run of the same task name clears that name's diagnostics when it
--- starts: they are replaced, never mixed with the previous run's. The
--- quickfix list is titled "proctor #<id> <name>"; a new run replaces the list
--- of an earlier run of the same task when it is the current one, instead of
--- stacking another. At most `max_items` problems are kept per run.
---
--- A note folded into a problem (proctor.tasks.matchers) is in its message
--- and in `user_data.related`; a problem already published gets them at the
--- next publish. proctor's namespaces sort signs and virtual text by
--- severity (an error's sign is never hidden by a hint on its line). Once
--- the quickfix list is filled the user is told as by |:make|: "(1 of 3):
--- main.c:6:10: …", in the ending's notification (M.summary) or, when the
--- ending is not announced, on its own. Requiring this module has no side effects.

local M = {}
local H = {}

local api = vim.api
local matchers = require("proctor.tasks.matchers")
local vsmatcher = require("proctor.tasks.vsmatcher")
local reader = require("proctor.tasks.reader")
local config = require("proctor.config")
local compat = require("proctor.compat")
local uv = compat.uv
local util = require("proctor.util")

M.PUBLISH_MS = 150
M.BUDGET_MS = 2 -- main-loop time per tick for setting diagnostics
M.QF_BATCH = 250
M.SUMMARY_MAX = 100 -- characters of the "(1 of 3): …" line

H.runs = {} -- id -> run state, until its quickfix list is set
H.latest = {} -- task name -> its newest run: only that one publishes
H.done = {} -- id -> finished run (the last DONE_KEEP of them), for M.result
H.done_order = {}
H.DONE_KEEP = 64
H.ns = {} -- task name -> namespace id

H.SEVERITY = { E = 1, W = 2, I = 3, N = 4 } -- vim.diagnostic.severity.ERROR .. HINT

--- The namespace of a task name's diagnostics.
---@param name string
---@return integer
function M.namespace(name)
  local ns = H.ns[name]
  if not ns then
    ns = api.nvim_create_namespace("proctor.task." .. name)
    H.ns[name] = ns
    vim.diagnostic.config({ severity_sort = true }, ns)
  end
  return ns
end

--- What :make would say of the quickfix list execution `id` filled:
--- "(1 of 3): main.c:6:10: error: 'x' undeclared" (its first line); nil when
--- it filled none (yet).
---@param id integer
---@return string|nil
function M.summary(id)
  local run = H.runs[id] or H.done[id]
  return run and run.summary or nil
end

--- Match the output of execution `id` and publish what is found.
---@param id integer
---@param opts {name: string, matcher: string, cwd: string, quickfix: string, open_quickfix: boolean, max_items: integer, on_done: function|nil}
---@return boolean|nil ok, string|nil err
function M.attach(id, opts)
  local kind = type(opts.matcher) == "table" and vsmatcher or matchers
  local matcher, err = kind.new(opts.matcher, { cwd = opts.cwd })
  if not matcher then return nil, err end
  local ns = M.namespace(opts.name)
  local old = H.latest[opts.name]
  if old and not old.done then -- still reading: it stops here
    old.superseded = true
    old.reader.detach()
    H.close(old)
  end
  vim.diagnostic.reset(ns) -- a new run replaces the previous one's
  local run = {
    id = id,
    name = opts.name,
    ns = ns,
    matcher = matcher,
    taken = 0,
    by_file = {},
    entry = {}, -- item -> its diagnostic (a note folded in later updates it)
    dirty = {},
    ndirty = 0,
    bufs = {},
    dropped = 0,
    missed = 0,
    opts = opts,
    max = opts.max_items or 10000,
  }
  H.runs[id] = run
  H.latest[opts.name] = run
  run.reader = reader.attach(id, {
    chunk = function(text) H.feed(run, text) end,
    missed = function(n) run.missed = run.missed + n end,
    finish = function(rec) H.finish(run, rec) end,
  })
  return true
end

--- What was found for execution `id` so far (tests, :Proctor info).
---@return table|nil { items, count, dropped, missed, done }
function M.result(id)
  local run = H.runs[id] or H.done[id]
  if not run then return nil end
  return {
    items = run.matcher.items,
    count = run.taken + run.dropped,
    dropped = run.dropped,
    missed = run.missed,
    done = run.done == true,
    ns = run.ns,
    qf_id = run.qf_id,
  }
end

-- Helpers ------------------------------------------------------------------------

function H.feed(run, text)
  local m = run.matcher
  local before = #m.items
  m:feed(text)
  if m.cleared then -- a new cycle of a background task (tasks/vsmatcher.lua): replace
    m.cleared = nil
    H.restart(run)
    before = 0
  end
  H.take(run, before)
  H.refold(run)
end

-- Forget what was taken: every file published so far gets its problems again (none yet).
function H.restart(run)
  for file in pairs(run.by_file) do
    run.by_file[file] = {}
    if not run.dirty[file] then
      run.dirty[file] = true
      run.ndirty = run.ndirty + 1
    end
  end
  run.entry, run.taken, run.dropped = {}, 0, 0
  H.schedule(run, M.PUBLISH_MS)
end

-- Problems taken before that got notes since: their entries follow.
function H.refold(run)
  local up = run.matcher.updated
  if #up == 0 then return end
  run.matcher.updated = {}
  for _, it in ipairs(up) do
    local d = run.entry[it]
    if d then
      d.message = it.text
      d.user_data = { related = it.related }
      if not run.dirty[it.filename] then
        run.dirty[it.filename] = true
        run.ndirty = run.ndirty + 1
      end
    end
  end
  H.schedule(run, M.PUBLISH_MS)
end

-- Items from `before` on: keep up to run.max, index by file, mark dirty.
function H.take(run, before)
  local items = run.matcher.items
  local n = #items
  if n == before then return end
  local room = run.max - run.taken
  if n - before > room then
    run.dropped = run.dropped + (n - before - room)
    for i = n, before + room + 1, -1 do
      items[i] = nil
    end
    n = #items
  end
  for i = before + 1, n do
    local it = items[i]
    local list = run.by_file[it.filename]
    if not list then
      list = {}
      run.by_file[it.filename] = list
    end
    local d = {
      lnum = it.lnum - 1,
      col = it.col and it.col - 1 or 0,
      end_lnum = it.end_lnum and it.end_lnum - 1 or nil,
      end_col = it.end_col and it.end_col - 1 or nil,
      message = it.text,
      severity = H.SEVERITY[it.type] or 1,
      source = run.name,
      code = it.code,
      user_data = it.related and { related = it.related } or nil,
    }
    list[#list + 1] = d
    run.entry[it] = d
    if not run.dirty[it.filename] then
      run.dirty[it.filename] = true
      run.ndirty = run.ndirty + 1
    end
  end
  run.taken = n
  H.schedule(run, M.PUBLISH_MS)
end

function H.schedule(run, ms)
  if run.timer_on then return end
  run.timer_on = true
  run.timer = run.timer or uv.new_timer()
  run.timer:start(ms, 0, function()
    vim.schedule(function()
      run.timer_on = false
      H.publish(run)
    end)
  end)
end

-- Set the diagnostics of dirty files until BUDGET_MS is used; the rest next tick.
function H.publish(run)
  if H.latest[run.name] ~= run then return H.close(run) end -- a newer run of the name took over
  local t0 = uv.hrtime()
  for file in pairs(run.dirty) do
    if uv.hrtime() - t0 > M.BUDGET_MS * 1e6 then break end
    run.dirty[file] = nil
    run.ndirty = run.ndirty - 1
    local buf = run.bufs[file]
    if not buf then
      buf = vim.fn.bufadd(file)
      run.bufs[file] = buf
    end
    vim.diagnostic.set(run.ns, buf, run.by_file[file])
  end
  if run.ndirty > 0 then
    H.schedule(run, 0)
  elseif run.ended then
    H.quickfix(run)
  end
end

function H.finish(run, rec)
  run.matcher:finish()
  H.take(run, run.taken)
  H.refold(run)
  run.ended = rec
  if run.timer_on then run.timer:stop() end
  run.timer_on = false
  H.schedule(run, 0) -- the last publish and the quickfix list: a tick of their own
end

-- The quickfix list once everything was published, per `quickfix`.
function H.quickfix(run)
  local rec = run.ended
  local mode = run.opts.quickfix or "on_failure"
  local failed = rec.state == "failed" or rec.state == "timed_out"
  local items = run.matcher.items
  local ours = H.current_is(run.name)
  local want = mode == "always" or (mode == "on_failure" and failed)
  if
    mode == "never"
    or (not want and not ours)
    or (mode == "on_failure" and #items == 0 and not ours)
  then
    return H.close(run)
  end
  local title = ("proctor #%d %s"):format(run.id, run.name)
  if run.dropped > 0 then
    title = title .. (" (first %d of %d problems)"):format(run.taken, run.taken + run.dropped)
  end
  local what =
    { title = title, context = { proctor = { task = run.name, id = run.id } }, items = {} }
  -- Not wanted but the current list is this task's (a rerun that now passes):
  -- emptied, so it never shows problems that are gone.
  if not want then items = {} end
  vim.fn.setqflist({}, ours and "r" or " ", what)
  run.qf_id = vim.fn.getqflist({ id = 0 }).id
  run.qf_items, run.qf_pos = items, 1
  H.qf_batch(run)
end

function H.qf_batch(run)
  local items = run.qf_items
  local from = run.qf_pos
  local to = math.min(#items, from + M.QF_BATCH - 1)
  if from <= to then
    local batch = {}
    for i = from, to do
      local it = items[i]
      -- a buffer number, not a name: setqflist() looks a name up among all buffers
      local buf = run.bufs[it.filename]
      if not buf then
        buf = vim.fn.bufadd(it.filename)
        run.bufs[it.filename] = buf
      end
      batch[#batch + 1] = {
        bufnr = buf,
        lnum = it.lnum,
        col = it.col or 0,
        text = it.text,
        type = it.type,
        nr = tonumber(it.code and it.code:match("%d+$")) or 0,
      }
    end
    vim.fn.setqflist({}, "a", { id = run.qf_id, items = batch })
    run.qf_pos = to + 1
  end
  if from == 1 and #items > 0 and run.opts.open_quickfix then
    local win = api.nvim_get_current_win()
    vim.cmd("botright copen")
    if api.nvim_win_is_valid(win) then api.nvim_set_current_win(win) end
  end
  if run.qf_pos <= #items then
    vim.defer_fn(function() H.qf_batch(run) end, 0)
  else
    if #items > 0 then H.tell(run, items) end
    H.close(run)
  end
end

-- The quickfix list is filled: "(1 of 3): main.c:6:10: error: …", kept for
-- the ending's notification, said here when the ending is not announced.
function H.tell(run, items)
  local it = items[1]
  local file = vim.fn.fnamemodify(it.filename, ":~:.")
  local kind = ({ E = "error", W = "warning", I = "info", N = "hint" })[it.type] or "error"
  run.summary = ("(1 of %d): %s:%d%s: %s: %s"):format(
    #items,
    file,
    it.lnum,
    it.col and (":" .. it.col) or "",
    kind,
    (it.text:gsub("\n.*", ""))
  )
  if vim.fn.strchars(run.summary) > M.SUMMARY_MAX then
    run.summary = vim.fn.strcharpart(run.summary, 0, M.SUMMARY_MAX - 1) .. "…"
  end
  local rec = run.ended
  local mode = config.get().notify
  local failed = rec.state == "failed" or rec.state == "timed_out"
  if mode == "never" or mode == "always" or (mode == "on_failure" and failed) then return end
  vim.notify(("(proctor) #%d %s: %s"):format(run.id, run.name, run.summary), vim.log.levels.INFO)
end

-- Is the current quickfix list one of `name`'s runs?
function H.current_is(name)
  local ok, ctx = pcall(vim.fn.getqflist, { context = 0 })
  ctx = ok and ctx.context
  return type(ctx) == "table" and type(ctx.proctor) == "table" and ctx.proctor.task == name
end

function H.close(run)
  if run.done then return end
  run.done = true
  if run.timer and not run.timer:is_closing() then run.timer:close() end
  run.timer = nil
  if H.runs[run.id] == run then H.runs[run.id] = nil end
  H.done[run.id] = run
  H.done_order[#H.done_order + 1] = run.id
  if #H.done_order > H.DONE_KEEP then H.done[table.remove(H.done_order, 1)] = nil end
  if run.opts.on_done then
    local ok, e = pcall(run.opts.on_done, run)
    if not ok then util.notify("diagnostics: " .. tostring(e)) end
  end
end

M._H = H

return M
