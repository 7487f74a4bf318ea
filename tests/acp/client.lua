-- tests/acp/client.lua — a minimal ACP client in a headless Neovim that plugs
-- in require("proctor.acp") for its terminals, and runs the SDK-written test
-- agent (tests/acp/agent.mjs, path in $ACP_AGENT) over stdio.
--
-- It speaks newline-delimited JSON-RPC: initialize (advertising terminal =
-- true), session/new twice, one session/prompt each. The agent's requests for
-- terminal/* are answered by the proctor.acp handlers (callback form, so
-- wait_for_exit never blocks this editor); its agent_message_chunk lines are
-- printed ("PASS acp/..." / "FAIL acp/..." / "# figures"), and "TYPE id text" /
-- "CANCEL id" lines are done the way a user would in the console. Then it
-- checks from the editor's side: every terminal is an execution owned by the
-- agent's name, with a console. Exits 0 when nothing failed.
local uv = vim.uv or vim.loop
local out = io.stdout
local failed = 0
local function say(line)
  if line:match("^FAIL ") then failed = failed + 1 end
  out:write(line, "\n")
  out:flush()
end

require("proctor").setup({ notify = "never" })
local agent_cmd = assert(os.getenv("ACP_AGENT"), "ACP_AGENT is not set")
local stdin, stdout, stderr = uv.new_pipe(false), uv.new_pipe(false), uv.new_pipe(false)
local handle, pid = uv.spawn(
  "node",
  { args = { agent_cmd }, stdio = { stdin, stdout, stderr } },
  function(code, sig)
    vim.schedule(function()
      if not _G.acp_done then
        say(
          ("FAIL acp/agent_process: the agent exited early (code %s, signal %s)"):format(code, sig)
        )
      end
    end)
  end
)
assert(handle, "cannot start the agent: " .. tostring(pid))

local next_id, pending, buf, errbuf = 0, {}, "", ""
local function send(msg)
  msg.jsonrpc = "2.0"
  stdin:write(vim.json.encode(msg) .. "\n")
end
local function request(method, params, cb)
  next_id = next_id + 1
  pending[next_id] = cb
  send({ id = next_id, method = method, params = params })
end

local terminal -- the proctor.acp handlers, made once the agent's name is known
local created = {} -- execution ids the agent's terminals got

local function on_message(m)
  if m.method and m.id ~= nil then -- a request from the agent
    if terminal and terminal.handles(m.method) then
      terminal.handle(m.method, m.params, function(result, err)
        if m.method == "terminal/create" and result then
          created[#created + 1] = tonumber(result.terminalId)
        end
        if err then
          send({ id = m.id, error = err })
        else
          send({ id = m.id, result = result })
        end
      end)
    else
      send({ id = m.id, error = { code = -32601, message = "method not found: " .. m.method } })
    end
  elseif m.method == "session/update" then
    local u = m.params.update
    if u.sessionUpdate == "agent_message_chunk" and u.content.type == "text" then
      for line in u.content.text:gmatch("[^\n]+") do
        local tid, text = line:match("^TYPE (%d+) (.*)$")
        local cid = line:match("^CANCEL (%d+)$")
        if tid then
          -- What the console's line editor sends on <CR> (a pty gets the keys as typed).
          assert(require("proctor").input(tonumber(tid), text .. "\r"))
        elseif cid then
          require("proctor").cancel(tonumber(cid))
        else
          say(line)
        end
      end
    end
  elseif m.id ~= nil and pending[m.id] then
    local cb = pending[m.id]
    pending[m.id] = nil
    cb(m.result, m.error)
  end
end

stdout:read_start(function(err, data)
  if not data then return end
  vim.schedule(function()
    buf = buf .. data
    while true do
      local nl = buf:find("\n", 1, true)
      if not nl then break end
      local line = buf:sub(1, nl - 1)
      buf = buf:sub(nl + 1)
      if line:match("%S") then
        local ok, m = pcall(vim.json.decode, line)
        if ok and type(m) == "table" then
          local fine, e = pcall(on_message, m)
          if not fine then
            say("FAIL acp/client_error: " .. tostring(e):gsub("\n.*", ""))
            vim.cmd("cquit 1")
          end
        else
          say("FAIL acp/agent_json: not JSON: " .. line:sub(1, 200))
        end
      end
    end
  end)
end)
stderr:read_start(function(_, data)
  if data then errbuf = errbuf .. data end
end)

-- A client that answers straight from its pipe's read callback calls handle() in a
-- fast event (most of the editor's API raises there): it must still be answered.
local function fast_event_check()
  local got
  local timer = uv.new_timer()
  timer:start(0, 0, function()
    timer:close()
    local ok, e = pcall(
      terminal.handle,
      "terminal/create",
      { sessionId = "fast", command = "echo fast" },
      function(result, err) got = { result = result, err = err } end
    )
    if not ok then got = { err = { message = "handle raised: " .. tostring(e) } } end
  end)
  vim.wait(20000, function() return got ~= nil end, 20)
  if got and got.result and got.result.terminalId then
    say("PASS acp/handle_in_a_fast_event")
  else
    say(
      "FAIL acp/handle_in_a_fast_event: "
        .. (got and vim.inspect(got.err):gsub("\n", " ") or "never answered")
    )
  end
  terminal.release_session("fast")
end

local function finish()
  _G.acp_done = true
  fast_event_check()
  -- The editor's side: each terminal is an execution of the agent, with a console.
  local proctor = require("proctor")
  local ok, why = #created >= 8, "the agent created " .. #created .. " terminals"
  for _, id in ipairs(created) do
    local rec = proctor.record(id)
    if not rec then
      ok, why = false, "execution " .. id .. " is not in the list"
      break
    end
    if rec.owner ~= "acp-test-agent" then
      ok, why = false, ("execution %d is owned by %s"):format(id, tostring(rec.owner))
      break
    end
    if
      vim.fn.bufnr("^proctor://" .. id .. "[/]*") == -1 and vim.fn.bufnr("proctor://" .. id) == -1
    then
      ok, why = false, "execution " .. id .. " has no console buffer"
      break
    end
  end
  say(
    ok and "PASS acp/terminals_are_executions_of_the_agent_with_consoles"
      or ("FAIL acp/terminals_are_executions_of_the_agent_with_consoles: " .. why)
  )
  -- A terminal left running by an ending session is released with it.
  local left = terminal.terminals()
  terminal.release_session("session-1")
  say(
    #terminal.terminals() == 0 and "PASS acp/release_session"
      or "FAIL acp/release_session: terminals are left"
  )
  if #left == 0 then say("FAIL acp/release_session_had_terminals: the scope test left none") end
  stdin:close()
  if failed > 0 and errbuf ~= "" then out:write("agent stderr:\n", errbuf, "\n") end
  vim.cmd((failed > 0 and "cquit 1" or "qall!"))
end

local timeout = uv.new_timer()
timeout:start(240000, 0, function()
  vim.schedule(function()
    say("FAIL acp/timeout: the test agent did not finish within 240 s")
    if errbuf ~= "" then out:write("agent stderr:\n", errbuf, "\n") end
    vim.cmd("cquit 1")
  end)
end)

local function prompt(session, cb)
  request(
    "session/prompt",
    { sessionId = session, prompt = { { type = "text", text = "exercise the terminals" } } },
    function(res, err)
      if err or not res or res.stopReason ~= "end_turn" then
        say("FAIL acp/prompt: " .. vim.inspect(err or res))
      end
      cb()
    end
  )
end

request("initialize", {
  protocolVersion = 1,
  clientCapabilities = { terminal = true, fs = { readTextFile = false, writeTextFile = false } },
  clientInfo = { name = "proctor-acp-test-client", version = "1.0.0" },
}, function(res, err)
  if err then return say("FAIL acp/initialize: " .. vim.inspect(err)) end
  -- One line gives the client a terminal backend, owned by the agent's name.
  terminal = require("proctor.acp").terminal({
    owner = res.agentInfo and res.agentInfo.name or "agent",
    open = "split",
  })
  request("session/new", { cwd = vim.fn.getcwd(), mcpServers = {} }, function(a)
    prompt(a.sessionId, function()
      request(
        "session/new",
        { cwd = vim.fn.getcwd(), mcpServers = {} },
        function(b) prompt(b.sessionId, finish) end
      )
    end)
  end)
end)
