---@meta
--- proctor.types — LuaCATS types of proctor's data: records, specs, events, the
--- configuration and the `proctor.core` engine (for lua-language-server; never
--- required at run time). The proctor.Config classes are generated from the
--- schema in lua/proctor/config.lua by `make doc` (scripts/gendoc.lua); edit the
--- schema, not them.

---@alias proctor.State "queued"|"starting"|"running"|"completed"|"failed"|"canceled"|"timed_out"
---@alias proctor.Stream "stdout"|"stderr"|"pty"
---@alias proctor.Reason "exit"|"signal"|"canceled"|"timeout"|"spawn_error"|"supervisor_lost"|"engine_closed"|"host_lost"|"interrupted"
---@alias proctor.CancelResult "canceling"|"already_canceling"|"already_terminal"|"not_found"
---@alias proctor.DeleteResult "deleted"|"active_process_conflict"|"not_found"

--- An execution's record (|proctor-records|): what eng:get(), proctor.record()
--- and the User events carry.
---@class proctor.Record
---@field id integer positive, never reused by an engine
---@field session integer 0: the editor; else the RPC session that started it
---@field label string|nil
---@field owner string|nil
---@field cwd string
---@field cmd string|string[] a string runs with /bin/sh -c; a list is the argv
---@field pty boolean
---@field state proctor.State
---@field prev proctor.State|nil the state before (User events only)
---@field reason proctor.Reason|nil why it ended (terminal states)
---@field error string|nil spawn error text
---@field exit_code integer|nil
---@field signal string|nil "SIGTERM": a death by signal, never folded into 128+n
---@field pid integer|nil while alive
---@field created_at integer ms since the epoch
---@field started_at integer|nil
---@field ended_at integer|nil
---@field duration_ms integer
---@field bytes table<proctor.Stream, integer> bytes written per stream
---@field dropped table<proctor.Stream, integer> bytes no longer in the ring buffer
---@field stdin_open boolean
---@field env_keys string[]|nil names of the child's environment (get only; never values)
---@field previous_session boolean|nil loaded from the history file
---@field worker_state string|nil supervised workers: "ready", "busy", "backoff", ...
---@field task string|nil the task run it belongs to (proctor.record() only, |proctor-tasks|)
---@field prev_id integer|nil the execution of the same task run it replaced (a restart)
---@field code integer|nil wait() of a run with `text = true`: the exit code (nil for a signal death)
---@field stdout string|nil wait() of a run with `text = true`: the kept stdout (a PTY: its stream)
---@field stderr string|nil wait() of a run with `text = true`: the kept stderr ("" for a PTY)

--- What proctor.run() takes (|proctor.run()|); eng:start() takes the fields
--- down to `env_allow`.
---@class proctor.RunSpec
---@field cmd string|string[]
---@field cwd string|nil default: the current directory
---@field env table<string, string>|nil
---@field clear_env boolean|nil
---@field pty boolean|nil
---@field cols integer|nil
---@field rows integer|nil
---@field stdin boolean|nil
---@field timeout_ms integer|nil
---@field kill_grace_ms integer|nil
---@field label string|nil
---@field owner string|nil
---@field backpressure boolean|nil pause the child instead of dropping output
---@field secrets table<string, string>|nil masked as *** in every output (|proctor-secrets|)
---@field env_allow string[]|nil
---@field hold boolean|nil stay queued until eng:release(id) (how dependencies wait)
---@field on_output fun(ex: proctor.Execution, stream: proctor.Stream, data: string, missed: integer)|nil
---@field on_state fun(ex: proctor.Execution, ev: proctor.StateEvent)|nil
---@field on_exit fun(ex: proctor.Execution, rec: proctor.Record)|nil
---@field open boolean|proctor.OpenOpts|nil open the console (its window is made before the start)
---@field text boolean|nil wait() adds code, stdout and stderr to the record (|proctor-ex:wait()|)
---@field notify boolean|"never"|"on_failure"|"always"|nil false: no notification when it ends
---@field name string|nil task options (|proctor-tasks|): a spec with any of them is a task run
---@field diagnostics boolean|string|nil true, an 'errorformat', a matcher name or "compiler:NAME"
---@field quickfix "on_failure"|"always"|"never"|nil
---@field open_quickfix boolean|nil
---@field max_problems integer|nil
---@field watch boolean|{patterns: string[]|nil, debounce_ms: integer|nil, root: string|nil, ignore: string[]|nil}|nil
---@field after (string|integer)[]|string|integer|nil task names or ids that must succeed first
---@field restart "never"|"on-failure"|"always"|nil
---@field max_restarts integer|nil
---@field backoff_ms integer|nil
---@field backoff_max_ms integer|nil
---@field healthy_ms integer|nil
---@field ready string|{pattern: string}|nil an ERE: a matching output line makes it ready
---@field sequence (string|proctor.TaskDef|{parallel: (string|proctor.TaskDef)[]})[]|nil

--- A task definition (setup{ tasks }, .proctor.lua): run{} fields and task
--- options. One that proctor.tasks() lists also has its name and source.
---@class proctor.TaskDef: proctor.RunSpec
---@field desc string|nil shown by the picker
---@field source string|nil "make", "npm", "cargo", "just", "go", "pytest", "project", "user"
---@field name string|nil what a user types (:Proctor task make build)
---@field cwd string|nil where it runs: the directory its source found its file in (maybe a parent)
---@field more boolean|nil a file target of make: listed last, behind "more" in the picker

--- Options of proctor.open() (|proctor.open()|).
---@class proctor.OpenOpts
---@field open "split"|"vsplit"|"tab"|"float"|"current"|"none"|nil
---@field size integer|nil split height / vsplit width
---@field enter boolean|nil move the cursor into it
---@field window proctor.Window|nil a window made by console.window() before the start
---@field win integer|nil show it in this window

--- An engine event (|proctor-core-events|).
---@alias proctor.Event proctor.StateEvent|proctor.OutputEvent

---@class proctor.StateEvent
---@field type "state"
---@field id integer
---@field state proctor.State
---@field prev proctor.State|nil
---@field reason proctor.Reason|nil
---@field error string|nil
---@field exit_code integer|nil
---@field signal string|nil
---@field pid integer|nil
---@field record proctor.Record|nil the record as of this event: terminal states, and every state after eng:state_records(true)

---@class proctor.OutputEvent
---@field type "output"
---@field id integer
---@field stream proctor.Stream
---@field data string
---@field offset integer absolute offset of data's first byte in the stream
---@field missed integer bytes skipped before data
---@field ring proctor.OutputRing|nil with missed > 0: reads the skipped bytes on this thread (none once the execution left the registry)

--- An output event's (or eng:read's) handle on its stream's ring buffer (|proctor-core-ring|).
---@class proctor.OutputRing
local OutputRing = {}
---@param from integer
---@param max integer|nil
---@return string|nil data, integer|string next_offset_or_err, integer|nil missed
function OutputRing:read(from, max) end

--- The `proctor.core` module (|proctor-core|).
---@class proctor.core
---@field version string
---@field new fun(opts: proctor.CoreOpts|nil): proctor.Engine|nil, string|nil, string|nil
---@field hrtime fun(): integer monotonic nanoseconds

---@class proctor.CoreOpts
---@field output_limit integer|nil
---@field output_memory integer|nil bytes of each ring kept in memory, the older ones in a spill file (default: all of output_limit, no spill file)
---@field spill_dir string|nil directory of the spill files (default $XDG_CACHE_HOME/proctor, else ~/.cache/proctor)
---@field history_limit integer|nil
---@field history_age_ms integer|nil
---@field max_running integer|nil
---@field kill_grace_ms integer|nil
---@field drain_ms integer|nil
---@field secret_timeout_ms integer|nil secrets read from a store must arrive within this (default 10000)
---@field shepherd string|nil
---@field listen string|nil socket path
---@field history_file string|nil
---@field history_output_bytes integer|nil
---@field audit_file string|nil
---@field audit_max_bytes integer|nil
---@field audit_keep integer|nil
---@field max_queued integer|nil queued or held executions per session (10000); more: EBUSY
---@field ended_output_max integer|nil bytes finished executions' rings keep together (64 MiB)

--- An engine of proctor.core: every method returns `nil, "ENAME: message",
--- "ENAME"` on a runtime failure (|proctor-core-errors|) and raises on a wrong
--- argument type.
---@class proctor.Engine
local Engine = {}
---@param spec proctor.RunSpec
---@param opts {wake: boolean|nil}|nil wake = false: the engine thread is woken by the next flush(), poll(), wait() or other call
---@return integer|nil id, string|nil err, string|nil name
function Engine:start(spec, opts) end
--- Wake the engine thread for the starts made with { wake = false } since its last wake-up.
---@return true
function Engine:flush() end
--- How many times this host has woken the engine thread (tests, benchmarks).
---@return integer
function Engine:wakeups() end
--- true: every state event made from now on carries `record` (the record as of that
--- event), not only a terminal one; false: only a terminal one (the default).
---@param on boolean
---@return boolean previous
function Engine:state_records(on) end
--- True while the engine thread still reads the history file (core.new returned before it).
---@return boolean
function Engine:history_loading() end
---@param id integer
---@param force boolean|{force: boolean|nil, reason: string|nil}|nil reason: 1 to 32 of a-z and _
---@return proctor.CancelResult
function Engine:cancel(id, force) end
---@return true|nil ok, string|nil err, string|nil name
function Engine:release(id) end
--- Consumer back-pressure for one execution: stop (true) or resume (false) reading it.
---@param id integer
---@param on boolean
---@return boolean|nil ok, string|nil err, string|nil name
function Engine:hold_output(id, on) end
--- Configure a target (|proctor-targets|): its transport and default cwd; nil forgets it.
---@param name string
---@param transport string|nil
---@param cwd string|nil
---@return boolean|nil ok, string|nil err, string|nil name
function Engine:target(name, transport, cwd) end
---@return proctor.DeleteResult
function Engine:delete(id) end
---@return true|nil ok, string|nil err, string|nil name
function Engine:input(id, data) end
---@return true|nil ok, string|nil err, string|nil name
function Engine:close_stdin(id) end
---@return true|nil ok, string|nil err, string|nil name
function Engine:resize(id, cols, rows) end
---@return proctor.Record|nil rec, string|nil err, string|nil name
function Engine:get(id) end
---@param filter {state: proctor.State}|nil
---@return proctor.Record[]
function Engine:list(filter) end
---@param opts {older_than_ms: integer}|nil
---@return integer deleted
function Engine:purge(opts) end
---@param stream proctor.Stream
---@return string|nil data, integer|string next_offset_or_err, integer|nil missed, proctor.OutputRing|nil ring
function Engine:read(id, stream, from, max) end
---@return integer fd readable while events are pending
function Engine:fd() end
---@return proctor.Event[]
function Engine:poll(max, max_bytes) end
---@return proctor.Event[]
function Engine:wait(timeout_ms, max, max_bytes) end
---@return string|nil path of the RPC socket
function Engine:address() end
---@return string[] what the history and audit files had to say
function Engine:warnings() end
function Engine:close() end
---@return boolean
function Engine:closed() end

-- BEGIN generated by scripts/gendoc.lua from lua/proctor/config.lua (make doc)
--- The configuration in effect (require("proctor.config").get()): every key set.
---@class proctor.Config
---@field engine proctor.Config.engine options of the engine, read when it starts (the first use)
---@field run proctor.Config.run defaults of proctor.run() (a spec may give each)
---@field command proctor.Config.command defaults of :Proctor run
---@field console proctor.Config.console consoles (proctor-console)
---@field history proctor.Config.history proctor-history
---@field audit proctor.Config.audit proctor-audit
---@field rpc proctor.Config.rpc the msgpack-rpc socket (proctor-rpc)
---@field list proctor.Config.list the list view (proctor-list)
---@field targets table<string, proctor.TargetDef> where run{ target = name } runs: name = { ssh = "user@host", opts = { ... }, shepherd = path?, cwd = path? }, { podman = container, opts?, shepherd?, cwd? } or { command = { ... } } (proctor-targets)
---@field tasks table<string|integer, proctor.TaskDef|fun(dir: string): proctor.TaskDef|nil> your tasks: name = definition (run{} fields and task options, proctor-tasks), or function(dir) returning one (nil: not a task there)
---@field task_defaults proctor.Config.task_defaults task options a task or run{} does not set (proctor-tasks)
---@field discover proctor.Config.discover task sources (proctor-tasks-discovery); false turns one off
---@field keymaps proctor.Config.keymaps {lhs} = action (proctor-actions), a function(id), or false: no key
---@field notify "never"|"on_failure"|"always"
---@field confirm_quit boolean quitting Neovim while executions run asks first (proctor-quit); :qa! never asks
---@field events_per_tick integer engine events handled per loop tick
---@field output_max_bytes integer bytes of one stream handed to Lua per poll; under a flood the rest is skipped (never copied) and counted as missed (a console reads it from the ring). 0: every byte reaches Lua

---@class proctor.Config.engine
---@field output_limit integer bytes kept per execution and stream (ring buffer)
---@field output_memory integer|nil of those, the newest bytes kept in memory; older ones go to a spill file in spill_dir (nil: output_max_bytes, what one poll hands a console, or 256 KiB when that is 0; >= output_limit: no file) (proctor-limits)
---@field spill_dir string|nil where spill files are made, on disk (nil: $XDG_CACHE_HOME/proctor, else ~/.cache/proctor)
---@field history_limit integer finished executions kept (this editor's and the history's); 0: every one
---@field max_running integer|nil at most this many run at once, the rest wait "queued" (nil: no cap)
---@field max_queued integer executions of this editor queued or held at once; more starts fail with EBUSY
---@field ended_output_max integer output bytes kept by finished executions together; past it the oldest keep only their last 64 KiB a stream
---@field kill_grace_ms integer cancel: SIGTERM (a PTY: SIGHUP first), SIGKILL after this; also bounds the wait when Neovim exits
---@field drain_ms integer after exit, how long output of background grandchildren is awaited
---@field secret_timeout_ms integer secrets read from a store (a keyring, a command) must arrive within this
---@field target_idle_ms integer a target's transport (ssh) with no execution on it is closed after this; the next run opens it again (proctor-targets)
---@field shepherd string|nil path of proctor-shepherd (nil: next to core.so)
---@field shepherd_early boolean the shepherd starts with the engine (its first use), not at the first run: that run starts sooner

---@class proctor.Config.run
---@field pty boolean pseudo-terminal (one "pty" stream) or pipes
---@field stdin boolean pipe executions get a stdin pipe
---@field cols integer pty size until a console window sets it
---@field rows integer
---@field timeout_ms integer|nil cancel after this long (nil: never)
---@field owner string

---@class proctor.Config.command
---@field pty boolean programs see a terminal (colours, prompts)
---@field open boolean open the console at once

---@class proctor.Config.console
---@field open "split"|"vsplit"|"tab"|"float"|"current"
---@field size integer split height / vsplit width
---@field enter boolean|nil move the cursor into the console (nil: when it is opened to be looked at, :Proctor open, toggle, the list; a run's only in a tab, a float or the current window: :Proctor run in a split leaves the cursor in the source buffer)
---@field start_insert boolean|nil Terminal mode when the cursor goes into the console of a live execution, so typing reaches it at once (nil: for a PTY console)
---@field reuse boolean one console window per tab: a new console (a split) takes over the window of the last one (the old console stays in the list)
---@field bar boolean winbar (0.8+) or statusline with id, label, state, elapsed
---@field final_line boolean "[proctor] failed: exit 2 after 3.2 s" at the end
---@field bytes_per_tick integer bytes given to the terminal per tick (at most 1 MiB: bigger sends crash Neovim 0.7's terminal emulator)
---@field backlog_limit integer more than this waiting: skip to the tail
---@field tail_bytes integer ... keeping this many bytes

---@class proctor.Config.history
---@field enabled boolean keep finished executions (and the last output_bytes of each stream) in a file, loaded again on the next start; shared by every editor (proctor-history-editors)
---@field file string|nil nil: stdpath("state")/proctor/history.mpk on every Neovim (0.7: the same $XDG_STATE_HOME/nvim); a file in stdpath("data") is moved there
---@field output_bytes integer last bytes of each stream kept per execution

---@class proctor.Config.audit
---@field file string|nil one JSON line per lifecycle event (nil: no audit log)
---@field max_bytes integer rotate at this size,
---@field keep integer keeping file.1 .. file.N

---@class proctor.Config.rpc
---@field enabled boolean listen when the engine starts; children get PROCTOR_SOCKET
---@field path string|nil nil: $XDG_RUNTIME_DIR/proctor/<pid>.sock, else /tmp/proctor-<uid>/<pid>.sock
---@field start "first_use"|"startup"

---@class proctor.Config.list
---@field refresh_ms integer refresh of a visible list view (elapsed times)

---@class proctor.Config.task_defaults
---@field quickfix "on_failure"|"always"|"never"
---@field open_quickfix boolean open the quickfix window when it got problems
---@field diagnostics boolean discovered tasks (make, cargo, go, pytest) match their tool's output
---@field max_problems integer problems kept per run
---@field debounce_ms integer watch: quiet time after a change before the restart
---@field max_restarts integer restart: failures in a row before giving up
---@field backoff_ms integer restart: first delay, doubled each failure in a row ...
---@field backoff_max_ms integer ... up to this
---@field healthy_ms integer a run that lasted this long is no failure in a row

---@class proctor.Config.discover
---@field make boolean Makefile targets (make's database)
---@field npm boolean package.json scripts (npm, or pnpm, yarn, bun by the lock file)
---@field cargo boolean cargo build, test, run
---@field just boolean justfile recipes (when just is installed)
---@field go boolean go build ./..., go test ./...
---@field pytest boolean pytest (pyproject.toml, pytest.ini, tox.ini)
---@field vscode boolean .vscode/tasks.json (only in a trusted directory, proctor-vscode)
---@field deno boolean deno.json(c) tasks (when deno is installed)
---@field mise boolean mise tasks (when mise is installed; `mise tasks ls` only in a trusted directory)
---@field composer boolean composer.json scripts (when composer is installed)
---@field tox boolean tox environments (when tox is installed; `tox -l` only in a trusted directory)
---@field taskfile boolean Taskfile.yml tasks (when go-task is installed; only in a trusted directory)
---@field project boolean the project file (read once trusted: vim.secure.read on 0.9+, else a prompt)
---@field project_file string its name, looked up from the directory upwards

---@class proctor.Config.keymaps
---@field console table<string, string|fun(id: integer|nil)|false> Normal mode in a console (proctor-console-keys)
---@field list table<string, string|fun(id: integer|nil)|false> the list view (proctor-list-keys)
---@field text table<string, string|fun(id: integer|nil)|false> the text view (proctor-text-keys)

--- What setup() takes: any subset of proctor.Config.
---@class proctor.SetupOpts
---@field engine? proctor.SetupOpts.engine options of the engine, read when it starts (the first use)
---@field run? proctor.SetupOpts.run defaults of proctor.run() (a spec may give each)
---@field command? proctor.SetupOpts.command defaults of :Proctor run
---@field console? proctor.SetupOpts.console consoles (proctor-console)
---@field history? proctor.SetupOpts.history proctor-history
---@field audit? proctor.SetupOpts.audit proctor-audit
---@field rpc? proctor.SetupOpts.rpc the msgpack-rpc socket (proctor-rpc)
---@field list? proctor.SetupOpts.list the list view (proctor-list)
---@field targets? table<string, proctor.TargetDef> where run{ target = name } runs: name = { ssh = "user@host", opts = { ... }, shepherd = path?, cwd = path? }, { podman = container, opts?, shepherd?, cwd? } or { command = { ... } } (proctor-targets)
---@field tasks? table<string|integer, proctor.TaskDef|fun(dir: string): proctor.TaskDef|nil> your tasks: name = definition (run{} fields and task options, proctor-tasks), or function(dir) returning one (nil: not a task there)
---@field task_defaults? proctor.SetupOpts.task_defaults task options a task or run{} does not set (proctor-tasks)
---@field discover? proctor.SetupOpts.discover task sources (proctor-tasks-discovery); false turns one off
---@field keymaps? proctor.SetupOpts.keymaps {lhs} = action (proctor-actions), a function(id), or false: no key
---@field notify? "never"|"on_failure"|"always"
---@field confirm_quit? boolean quitting Neovim while executions run asks first (proctor-quit); :qa! never asks
---@field events_per_tick? integer engine events handled per loop tick
---@field output_max_bytes? integer bytes of one stream handed to Lua per poll; under a flood the rest is skipped (never copied) and counted as missed (a console reads it from the ring). 0: every byte reaches Lua

---@class proctor.SetupOpts.engine
---@field output_limit? integer bytes kept per execution and stream (ring buffer)
---@field output_memory? integer|nil of those, the newest bytes kept in memory; older ones go to a spill file in spill_dir (nil: output_max_bytes, what one poll hands a console, or 256 KiB when that is 0; >= output_limit: no file) (proctor-limits)
---@field spill_dir? string|nil where spill files are made, on disk (nil: $XDG_CACHE_HOME/proctor, else ~/.cache/proctor)
---@field history_limit? integer finished executions kept (this editor's and the history's); 0: every one
---@field max_running? integer|nil at most this many run at once, the rest wait "queued" (nil: no cap)
---@field max_queued? integer executions of this editor queued or held at once; more starts fail with EBUSY
---@field ended_output_max? integer output bytes kept by finished executions together; past it the oldest keep only their last 64 KiB a stream
---@field kill_grace_ms? integer cancel: SIGTERM (a PTY: SIGHUP first), SIGKILL after this; also bounds the wait when Neovim exits
---@field drain_ms? integer after exit, how long output of background grandchildren is awaited
---@field secret_timeout_ms? integer secrets read from a store (a keyring, a command) must arrive within this
---@field target_idle_ms? integer a target's transport (ssh) with no execution on it is closed after this; the next run opens it again (proctor-targets)
---@field shepherd? string|nil path of proctor-shepherd (nil: next to core.so)
---@field shepherd_early? boolean the shepherd starts with the engine (its first use), not at the first run: that run starts sooner

---@class proctor.SetupOpts.run
---@field pty? boolean pseudo-terminal (one "pty" stream) or pipes
---@field stdin? boolean pipe executions get a stdin pipe
---@field cols? integer pty size until a console window sets it
---@field rows? integer
---@field timeout_ms? integer|nil cancel after this long (nil: never)
---@field owner? string

---@class proctor.SetupOpts.command
---@field pty? boolean programs see a terminal (colours, prompts)
---@field open? boolean open the console at once

---@class proctor.SetupOpts.console
---@field open? "split"|"vsplit"|"tab"|"float"|"current"
---@field size? integer split height / vsplit width
---@field enter? boolean|nil move the cursor into the console (nil: when it is opened to be looked at, :Proctor open, toggle, the list; a run's only in a tab, a float or the current window: :Proctor run in a split leaves the cursor in the source buffer)
---@field start_insert? boolean|nil Terminal mode when the cursor goes into the console of a live execution, so typing reaches it at once (nil: for a PTY console)
---@field reuse? boolean one console window per tab: a new console (a split) takes over the window of the last one (the old console stays in the list)
---@field bar? boolean winbar (0.8+) or statusline with id, label, state, elapsed
---@field final_line? boolean "[proctor] failed: exit 2 after 3.2 s" at the end
---@field bytes_per_tick? integer bytes given to the terminal per tick (at most 1 MiB: bigger sends crash Neovim 0.7's terminal emulator)
---@field backlog_limit? integer more than this waiting: skip to the tail
---@field tail_bytes? integer ... keeping this many bytes

---@class proctor.SetupOpts.history
---@field enabled? boolean keep finished executions (and the last output_bytes of each stream) in a file, loaded again on the next start; shared by every editor (proctor-history-editors)
---@field file? string|nil nil: stdpath("state")/proctor/history.mpk on every Neovim (0.7: the same $XDG_STATE_HOME/nvim); a file in stdpath("data") is moved there
---@field output_bytes? integer last bytes of each stream kept per execution

---@class proctor.SetupOpts.audit
---@field file? string|nil one JSON line per lifecycle event (nil: no audit log)
---@field max_bytes? integer rotate at this size,
---@field keep? integer keeping file.1 .. file.N

---@class proctor.SetupOpts.rpc
---@field enabled? boolean listen when the engine starts; children get PROCTOR_SOCKET
---@field path? string|nil nil: $XDG_RUNTIME_DIR/proctor/<pid>.sock, else /tmp/proctor-<uid>/<pid>.sock
---@field start? "first_use"|"startup"

---@class proctor.SetupOpts.list
---@field refresh_ms? integer refresh of a visible list view (elapsed times)

---@class proctor.SetupOpts.task_defaults
---@field quickfix? "on_failure"|"always"|"never"
---@field open_quickfix? boolean open the quickfix window when it got problems
---@field diagnostics? boolean discovered tasks (make, cargo, go, pytest) match their tool's output
---@field max_problems? integer problems kept per run
---@field debounce_ms? integer watch: quiet time after a change before the restart
---@field max_restarts? integer restart: failures in a row before giving up
---@field backoff_ms? integer restart: first delay, doubled each failure in a row ...
---@field backoff_max_ms? integer ... up to this
---@field healthy_ms? integer a run that lasted this long is no failure in a row

---@class proctor.SetupOpts.discover
---@field make? boolean Makefile targets (make's database)
---@field npm? boolean package.json scripts (npm, or pnpm, yarn, bun by the lock file)
---@field cargo? boolean cargo build, test, run
---@field just? boolean justfile recipes (when just is installed)
---@field go? boolean go build ./..., go test ./...
---@field pytest? boolean pytest (pyproject.toml, pytest.ini, tox.ini)
---@field vscode? boolean .vscode/tasks.json (only in a trusted directory, proctor-vscode)
---@field deno? boolean deno.json(c) tasks (when deno is installed)
---@field mise? boolean mise tasks (when mise is installed; `mise tasks ls` only in a trusted directory)
---@field composer? boolean composer.json scripts (when composer is installed)
---@field tox? boolean tox environments (when tox is installed; `tox -l` only in a trusted directory)
---@field taskfile? boolean Taskfile.yml tasks (when go-task is installed; only in a trusted directory)
---@field project? boolean the project file (read once trusted: vim.secure.read on 0.9+, else a prompt)
---@field project_file? string its name, looked up from the directory upwards

---@class proctor.SetupOpts.keymaps
---@field console? table<string, string|fun(id: integer|nil)|false> Normal mode in a console (proctor-console-keys)
---@field list? table<string, string|fun(id: integer|nil)|false> the list view (proctor-list-keys)
---@field text? table<string, string|fun(id: integer|nil)|false> the text view (proctor-text-keys)
-- END generated
