-- tests/lua/spec_history.lua — durable history (history_file) and audit log (audit_file).
local U = require("util")
local core = U.core

return function(T, opts)
  local test = T.test
  local dir = U.tmpdir()
  local n = 0
  local function path(ext)
    n = n + 1
    return ("%s/f%d.%s"):format(dir, n, ext or "mpk")
  end
  local function size(p)
    local s = U.read_file(p)
    return s and #s or -1
  end
  local function write(p, s)
    local f = assert(io.open(p, "wb"))
    f:write(s)
    f:close()
  end
  local function ids(list)
    local v = {}
    for _, r in ipairs(list) do
      v[#v + 1] = r.id
    end
    return table.concat(v, ",")
  end

  test("history survives a restart: records, output tails, ids continuing", function()
    local h = path()
    local eng = assert(core.new { history_file = h, history_output_bytes = 1000 })
    local r1, id1 = U.run(eng, { cmd = "seq 1 2000", label = "count" })
    local _, id2 = U.run(eng, { cmd = { "sh", "-c", "echo oops >&2; exit 3" }, cwd = "/tmp" })
    local _, id3 = U.run(eng, { cmd = "sleep 0.2; echo tty", pty = true })
    T.eq(r1.final.state, "completed")
    eng:close()
    local e2 = assert(core.new { history_file = h })
    T.eq(#e2:warnings(), 0)
    local list = e2:list()
    T.eq(ids(list), table.concat({ id1, id2, id3 }, ","))
    for _, r in ipairs(list) do
      T.eq(r.previous_session, true)
      T.ok(U.terminal[r.state], r.state)
      T.eq(r.pid, nil)
    end
    local a, b, c = e2:get(id1), e2:get(id2), e2:get(id3)
    T.eq(a.state, "completed")
    T.eq(a.label, "count")
    T.eq(a.cmd, "seq 1 2000")
    T.eq(a.exit_code, 0)
    T.eq(a.bytes.stdout, #r1.out.stdout)
    T.eq(b.state, "failed")
    T.eq(b.exit_code, 3)
    T.eq(b.cwd, "/tmp")
    T.eq(b.cmd[3], "echo oops >&2; exit 3")
    T.eq(c.pty, true)
    -- the output tail, at its original offsets
    local data, nxt, missed = e2:read(id1, "stdout")
    T.eq(#data, 1000)
    T.eq(data, r1.out.stdout:sub(-1000))
    T.eq(nxt, #r1.out.stdout)
    T.eq(missed, #r1.out.stdout - 1000)
    T.eq((e2:read(id2, "stderr")), "oops\n")
    T.eq((e2:read(id3, "pty")), "tty\r\n")
    T.eq(e2:list { state = "running" }[1], nil)
    -- loaded records are terminal everywhere
    T.eq(e2:cancel(id1), "already_terminal")
    T.eq(e2:cancel(id1, true), "already_terminal")
    local ok, _, name = e2:input(id1, "x")
    T.eq(ok, nil)
    T.eq(name, "ENOTRUNNING")
    -- ids continue
    local id4 = assert(e2:start { cmd = "echo new" })
    T.eq(id4, id3 + 1)
    U.collect(e2, { id4 })
    T.eq(e2:get(id4).previous_session, false)
    T.eq(e2:delete(id2), "deleted")
    e2:close()
    local e3 = assert(core.new { history_file = h })
    T.eq(ids(e3:list()), table.concat({ id1, id3, id4 }, ","))
    T.eq(e3:purge(), 3)
    T.eq(#e3:list(), 0)
    e3:close()
    local e4 = assert(core.new { history_file = h })
    T.eq(#e4:list(), 0)
    T.eq(assert(e4:start { cmd = "true" }), id4 + 1, "ids are not reused after a purge")
    e4:close()
  end)

  test("purge and delete shrink the file", function()
    local h = path()
    local eng = assert(core.new { history_file = h })
    local list = {}
    for i = 1, 6 do
      list[i] = select(2, U.run(eng, { cmd = "seq 1 3000" }))
    end
    eng:close()
    local s0 = size(h)
    eng = assert(core.new { history_file = h })
    T.eq(eng:delete(list[1]), "deleted")
    eng:close()
    local s1 = size(h)
    T.ok(s1 < s0, ("delete: %d -> %d"):format(s0, s1))
    eng = assert(core.new { history_file = h })
    T.eq(#eng:list(), 5)
    T.eq(eng:purge(), 5)
    eng:close()
    local s2 = size(h)
    T.ok(s2 < s1 and s2 < 100, ("purge: %d -> %d"):format(s1, s2))
  end)

  test("retention limits hold across restarts", function()
    local h = path()
    local eng = assert(core.new { history_file = h })
    local all = {}
    for i = 1, 5 do
      all[i] = select(2, U.run(eng, { cmd = "echo " .. i }))
    end
    eng:close()
    local s0 = size(h)
    eng = assert(core.new { history_file = h, history_limit = 2 })
    T.eq(ids(eng:list()), all[4] .. "," .. all[5])
    local id = select(2, U.run(eng, { cmd = "echo 6" }))
    T.eq(ids(eng:list()), all[5] .. "," .. id)
    eng:close()
    T.ok(size(h) < s0, "the file was compacted")
    eng = assert(core.new { history_file = h })
    T.eq(ids(eng:list()), all[5] .. "," .. id, "what was pruned stays pruned")
    eng:close()
    U.sleep(30)
    eng = assert(core.new { history_file = h, history_age_ms = 20 })
    T.eq(#eng:list(), 0, "older than history_age_ms")
    eng:close()
  end)

  test(
    "history_age_ms: an idle engine forgets records on time, in memory and in the file",
    function()
      local h = path()
      local age, gap = 2000, 1000
      local eng = assert(core.new { history_file = h, history_age_ms = age })
      T.defer(function() eng:close() end)
      local t_a0 = U.now() -- a ends after this
      local _, a = U.run(eng, { cmd = "echo a", clear_env = true })
      U.sleep(gap) -- b ends at least gap ms after a
      local t_b0 = U.now()
      local _, b = U.run(eng, { cmd = "echo b", clear_env = true })
      T.eq(ids(eng:list()), a .. "," .. b)
      -- nothing finishes on this engine from here on
      -- b is gap ms younger: the poll that first finds a gone still finds b
      -- (a pass over the records that took b along too would be a bug). The
      -- order is the promise; the 1 s gap only keeps a stalled host from
      -- missing it.
      local b_then, t_gone
      T.ok(
        U.wait_until(function()
          if eng:get(a) ~= nil then return false end
          t_gone, b_then = U.now(), eng:get(b) ~= nil
          return true
        end, 10000, 5),
        "a outlived history_age_ms"
      )
      -- a floor the engine promises (load only lengthens it)
      T.ok(
        t_gone - t_a0 >= age - 20,
        "a was forgotten " .. (t_gone - t_a0) .. " ms after it started"
      )
      T.ok(
        b_then,
        ("b is gone %.0f ms after it started (history_age_ms %d)"):format(t_gone - t_b0, age)
      )
      T.ok(
        U.wait_until(function() return eng:get(b) == nil end, 10000),
        "b outlived history_age_ms"
      )
      T.eq(#eng:list(), 0)
      -- expiry without any call on the engine; the history file forgets it too
      U.run(eng, { cmd = "echo c", clear_env = true })
      U.sleep(age + 300)
      eng:close()
      eng = assert(core.new { history_file = h })
      T.eq(ids(eng:list()), "", "the history file still has them")
      -- records loaded from the history expire on time as well
      local _, d = U.run(eng, { cmd = "echo d", clear_env = true })
      eng:close()
      eng = assert(core.new { history_file = h, history_age_ms = age })
      T.eq(ids(eng:list()), tostring(d))
      U.sleep(age + 300)
      eng:close()
      eng = assert(core.new { history_file = h })
      T.eq(ids(eng:list()), "", "a loaded record outlived history_age_ms")
      eng:close()
    end
  )

  test(
    "a history file truncated at every byte offset of its last record loads what is before it and warns once",
    function()
      local h = path()
      local eng = assert(core.new { history_file = h })
      local a = select(2, U.run(eng, { cmd = "echo one", clear_env = true }))
      local b = select(2, U.run(eng, { cmd = "echo two", clear_env = true }))
      eng:close()
      local base = size(h)
      eng = assert(core.new { history_file = h })
      local c = select(2, U.run(eng, { cmd = "echo three", clear_env = true }))
      eng:close()
      local full = U.read_file(h)
      T.ok(#full > base + 20)
      local t = path()
      local quiet, lost = 0, 0
      for off = base + 1, #full - 1 do
        write(t, full:sub(1, off))
        local e = assert(core.new { history_file = t })
        local w = e:warnings()
        local list = e:list()
        if #w == 0 then -- the boundary between the "started" and the "ended" frame
          quiet = quiet + 1
          T.eq(ids(list), table.concat({ a, b, c }, ","), "at " .. off)
          T.eq(list[3].reason, "host_lost")
        else
          T.eq(#w, 1, "one warning at " .. off)
          T.match(w[1], "torn")
          T.ok(
            ids(list) == a .. "," .. b or ids(list) == table.concat({ a, b, c }, ","),
            "at " .. off .. ": " .. ids(list)
          )
          if #list == 3 then
            lost = lost + 1
            T.eq(list[3].reason, "host_lost")
          end
        end
        T.eq(#e:warnings(), 0, "warnings are returned once")
        T.eq((e:read(a, "stdout")), "one\n")
        e:close()
        -- the torn tail is gone for good: a second load is quiet
        local e2 = assert(core.new { history_file = t })
        T.eq(#e2:warnings(), 0, "second load at " .. off)
        T.eq(#e2:list(), #list)
        e2:close()
      end
      T.eq(quiet, 1, "exactly one clean cut")
      T.ok(lost > 0)
      -- the untouched file loads all three, quietly
      write(t, full)
      local e = assert(core.new { history_file = t })
      T.eq(#e:warnings(), 0)
      T.eq(ids(e:list()), table.concat({ a, b, c }, ","))
      T.eq(e:get(c).state, "completed")
      e:close()
    end
  )

  test("a corrupt record in the middle is skipped with a warning; the rest is kept", function()
    local h = path()
    local eng = assert(core.new { history_file = h })
    U.run(eng, { cmd = "echo AAAAAAAA", clear_env = true })
    local b = select(2, U.run(eng, { cmd = "echo BBBBBBBB", clear_env = true }))
    eng:close()
    local s = U.read_file(h)
    local at = s:find("AAAAAAAA", 1, true)
    write(h, s:sub(1, at - 1) .. "X" .. s:sub(at + 1))
    eng = assert(core.new { history_file = h })
    local w = eng:warnings()
    T.eq(#w, 1)
    T.match(w[1], "corrupt")
    T.ok(eng:get(b), "the later record survives")
    eng:close()
  end)

  -- The frames of a history file, walked as the loader reads them: each is a
  -- msgpack [checksum, bin] (0x92, the checksum as msgpack packs a uint32 --
  -- in 1, 2, 3 or 5 bytes: a checksum below 2^16 is not 0xce -- then
  -- 0xc4/c5/c6 and the body's length). { at = offset, len = offset of the
  -- bin's first length byte } per frame.
  local function frames(s)
    local at, v = 19, {}
    local function be(i, width)
      local x = 0
      for k = 0, width - 1 do
        x = x * 256 + s:byte(i + k)
      end
      return x
    end
    while at <= #s do
      assert(s:byte(at) == 0x92, "no frame at offset " .. at)
      local p, t = at + 1, s:byte(at + 1)
      p = p
        + (
          t <= 0x7f and 1
          or t == 0xcc and 2
          or t == 0xcd and 3
          or t == 0xce and 5
          or error("checksum type " .. t)
        )
      local b = s:byte(p)
      local width = b == 0xc4 and 1
        or b == 0xc5 and 2
        or b == 0xc6 and 4
        or error("bin type " .. tostring(b))
      v[#v + 1] = { at = at, len = p + 1 }
      at = p + 1 + width + be(p + 1, width)
    end
    return v
  end

  for _, how in ipairs({ "header", "length" }) do
    test(
      "one corrupt byte in the middle ("
        .. how
        .. "): the loader resynchronises, keeps every later record and a copy",
      function()
        local h = path()
        local eng = assert(core.new { history_file = h })
        local want = {}
        for i = 1, 10 do
          want[i] = select(2, U.run(eng, { cmd = "echo r" .. i, clear_env = true }))
        end
        eng:close()
        local s = U.read_file(h)
        local f = frames(s)
        T.eq(#f, 20, "frames (a start and an end per run)")
        -- frame 6 is the end frame of the third execution: its 0x92, or the
        -- first byte of its body's length
        local at = how == "header" and f[6].at or f[6].len
        local bad = s:sub(1, at - 1) .. (how == "header" and "X" or "\xff") .. s:sub(at + 1)
        write(h, bad)
        eng = assert(core.new { history_file = h })
        local w = eng:warnings()
        T.eq(#w, 1, "one warning: " .. table.concat(w, " | "))
        T.match(w[1], "corrupt")
        local copy = w[1]:match("kept in (%S+%.damaged%-%d+)")
        T.ok(copy, "the warning names the copy: " .. w[1])
        T.eq(U.read_file(copy), bad, "the copy is the damaged file as it was")
        local list = eng:list()
        T.eq(
          ids(list),
          table.concat(want, ","),
          "every record survives (the third one without its end)"
        )
        T.eq(eng:get(want[3]).reason, "host_lost")
        T.eq(eng:get(want[10]).state, "completed")
        T.eq((eng:read(want[10], "stdout")), "r10\n")
        local more = select(2, U.run(eng, { cmd = "echo r11", clear_env = true }))
        eng:close()
        -- the damage is gone from the file: the next load is quiet and has everything
        eng = assert(core.new { history_file = h })
        T.eq(#eng:warnings(), 0, "second load")
        T.eq(ids(eng:list()), table.concat(want, ",") .. "," .. more)
        T.eq((eng:read(more, "stdout")), "r11\n")
        eng:close()
      end
    )
  end

  test("a live execution at a SIGKILL of its host comes back failed / host_lost", function()
    local h = path()
    local tag = U.tag()
    local script = path("lua")
    write(
      script,
      ([[
      package.cpath = %q .. "/build/lua5.4/?.so;" .. package.cpath
      local core = require("proctor.core")
      local eng = assert(core.new{ history_file = %q })
      eng:start{ cmd = "echo done" }
      eng:start{ cmd = {"sleep", "1000"}, env = { PROCTOR_TEST_TAG = %q }, label = "victim" }
      while true do eng:wait(1000) end
    ]]):format(U.root, h, tag)
    )
    local host = tonumber(U.sh("lua5.4 " .. script .. " >/dev/null 2>&1 & echo $!"))
    T.ok(host)
    T.defer(function() U.kill9(host) end)
    T.ok(U.wait_until(function() return #U.tagged(tag) == 1 end, 10000), "the job did not start")
    -- the writer thread has appended the victim's "started" frame and the
    -- first execution's end (its output tail "done\n")
    T.ok(
      U.wait_until(function()
        local f = U.read_file(h) or ""
        return f:find("victim", 1, true) and f:find("done\n", 1, true)
      end, 10000),
      "the history file never got both frames"
    )
    U.kill9(host)
    T.ok(
      U.wait_until(function() return #U.tagged(tag) == 0 end, 10000),
      "the job outlived its host"
    )
    local eng
    U.wait_until(function()
      eng = core.new { history_file = h }
      local w = eng:warnings()
      if #w > 0 then eng:close() end
      return #w == 0
    end, 10000) -- the dead host's lock goes with it
    local list = eng:list()
    T.eq(#list, 2)
    T.eq(list[1].state, "completed")
    T.eq(list[2].state, "failed")
    T.eq(list[2].reason, "host_lost")
    T.eq(list[2].label, "victim")
    T.eq(list[2].previous_session, true)
    eng:close()
    eng = assert(core.new { history_file = h })
    T.eq(eng:list()[2].reason, "host_lost", "still host_lost after another restart")
    eng:close()
  end)

  test(
    "close() writes every frame still queued: each execution that ended is in the file",
    function()
      -- 200 short executions end, then close() at once: the frames of the last
      -- ones are still queued for the writer thread (it syncs each write), and
      -- close must write them before it returns.
      local h = path()
      local eng = assert(core.new { history_file = h, max_running = 50 })
      T.defer(function() eng:close() end)
      local all = {}
      for i = 1, 200 do
        all[i] = assert(eng:start { cmd = { "true" }, clear_env = true, label = "f" .. i })
      end
      U.collect(eng, all, 60000)
      eng:close()
      local e2 = assert(core.new { history_file = h })
      T.defer(function() e2:close() end)
      T.eq(#e2:warnings(), 0)
      local list = e2:list()
      T.eq(#list, 200, "records in the file")
      local ended = 0
      for _, r in ipairs(list) do
        if r.state == "completed" then ended = ended + 1 end
      end
      T.eq(ended, 200, "records that came back completed (host_lost: the end frame was lost)")
    end
  )

  -- Several editors share one history: each engine takes a slot (its own
  -- file), hands out ids of its own range, and reads the other slots at load.
  local SLOT = 1000000000
  local function has(list, id)
    for _, r in ipairs(list) do
      if r.id == id then return r end
    end
  end

  test(
    "two engines on one history: both record, ids never collide, each reads the other",
    function()
      local h = path()
      local e1 = assert(core.new { history_file = h })
      T.defer(function() e1:close() end)
      local a1 = select(2, U.run(e1, { cmd = "echo one", label = "from-e1" }))
      -- the writer thread appends the end frame (with the output tail) after the end
      T.ok(
        U.wait_until(function() return (U.read_file(h) or ""):find("one\n", 1, true) end, 10000),
        "the end frame never reached the file"
      )
      local e2 = assert(core.new { history_file = h })
      T.defer(function() e2:close() end)
      T.eq(#e2:warnings(), 0, "the second engine has history too")
      T.ok(has(e2:list(), a1), "the second engine lists the first one's run")
      local b1 = select(2, U.run(e2, { cmd = "echo two", label = "from-e2" }))
      T.eq(b1, SLOT + 1, "the second engine's first id")
      local a2 = select(2, U.run(e1, { cmd = "echo three" }))
      T.eq(a2, a1 + 1, "the first engine's ids go on in its own range")
      for file, text in pairs({ [h] = "three\n", [h .. ".1"] = "two\n" }) do
        T.ok(
          U.wait_until(function() return (U.read_file(file) or ""):find(text, 1, true) end, 10000),
          "an end frame never reached " .. file
        )
      end
      -- a job still running in e1 is e1's: a third engine does not list it
      local live = assert(e1:start { cmd = { "sleep", "100" }, label = "still-running" })
      T.defer(function() e1:cancel(live, true) end)
      U.wait_state(e1, live, "running")
      T.ok(
        U.wait_until(
          function() return (U.read_file(h) or ""):find("still-running", 1, true) end,
          10000
        ),
        "the running job's start frame never reached the file"
      )
      local e3 = assert(core.new { history_file = h })
      T.eq(#e3:warnings(), 0)
      local l3 = e3:list()
      T.eq(ids(l3), table.concat({ a1, a2, b1 }, ","), "the third engine's list")
      T.eq(has(l3, b1).label, "from-e2")
      T.eq((e3:read(b1, "stdout")), "two\n")
      T.eq(assert(e3:start { cmd = "true" }), 2 * SLOT + 1, "the third engine's first id")
      e3:close()
      T.ok(U.read_file(h .. ".1"), "slot 1's file")
      T.ok(U.read_file(h .. ".2"), "slot 2's file")
    end
  )

  test(
    "a delete in one engine is seen by the others after a reload, and the file lets go",
    function()
      local h = path()
      local e1 = assert(core.new { history_file = h })
      T.defer(function() e1:close() end)
      local e2 = assert(core.new { history_file = h })
      local b1 = select(2, U.run(e2, { cmd = "echo two-kept-in-slot-one" }))
      local b2 = select(2, U.run(e2, { cmd = "echo two-b" }))
      e2:close()
      -- e1 only holds slot 0 (its load may end before or after e2's runs: what e1
      -- lists is never asserted); a new engine (slot 1 is free again) loads both
      local e3 = assert(core.new { history_file = h })
      T.ok(has(e3:list(), b1) and has(e3:list(), b2), "e3 lists slot 1's runs")
      local own = select(2, U.run(e3, { cmd = "echo mine" }))
      T.eq(own, b2 + 1, "slot 1's ids go on after a restart")
      e3:close()
      -- a third engine (slot 1 again) deletes... its own; a slot-2 engine deletes another's
      local e4 = assert(core.new { history_file = h }) -- slot 1
      -- its history loads after new() returns: list() waits for the load, so e4 has
      -- loaded b1 before e5's delete (else it would load the tombstone too)
      T.ok(has(e4:list(), b1), "e4 loaded slot 1's runs")
      local e5 = assert(core.new { history_file = h }) -- slot 2
      T.eq(e5:delete(b1), "deleted")
      e5:close()
      local e6 = assert(core.new { history_file = h }) -- slot 2: the tombstone holds
      T.eq(has(e6:list(), b1), nil, "a deleted record came back")
      T.ok(has(e6:list(), b2), "only the deleted record is gone")
      e6:close()
      T.ok(has(e4:list(), b1), "a live engine keeps what it loaded")
      e4:close()
      local e7 = assert(core.new { history_file = h }) -- slot 1: applies slot 2's tombstone
      T.eq(has(e7:list(), b1), nil, "the owner of the record sees the delete")
      e7:close()
      T.ok(
        not U.read_file(h .. ".1"):find("two-kept-in-slot-one", 1, true),
        "the owner's file still holds the deleted record"
      )
      T.ok(U.read_file(h .. ".1"):find("two-b", 1, true), "the owner's other record")
      -- purge in one engine: every editor's ended records go
      local e8 = assert(core.new { history_file = h })
      T.ok(e8:purge() >= 2)
      e8:close()
      local e9 = assert(core.new { history_file = h })
      T.eq(#e9:list(), 0, "after a purge: " .. ids(e9:list()))
      e9:close()
    end
  )

  test(
    "another engine's torn file is read, never repaired, until its slot is taken again",
    function()
      local h = path()
      local e1 = assert(core.new { history_file = h })
      local e2 = assert(core.new { history_file = h })
      local b1 = select(2, U.run(e2, { cmd = "echo before-the-tear" }))
      e2:close()
      e1:close()
      -- a write cut short by a SIGKILL: half a frame at the end of slot 1's file
      local torn = U.read_file(h .. ".1") .. "\x92\xce\x01\x02"
      write(h .. ".1", torn)
      local e3 = assert(core.new { history_file = h }) -- slot 0
      T.eq(#e3:warnings(), 0, "another slot's damage is its owner's to report")
      T.ok(has(e3:list(), b1), "the good records of a torn file are read")
      T.eq(U.read_file(h .. ".1"), torn, "another engine's file was written to")
      local e4 = assert(core.new { history_file = h }) -- slot 1: its owner repairs it
      T.match(e4:warnings()[1] or "", "torn")
      T.ok(has(e4:list(), b1))
      e4:close()
      e3:close()
    end
  )

  test("a file that is no history is left alone", function()
    write(path("txt"), "")
    local other = dir .. "/not-history"
    write(other, "hello, world\n")
    local e3 = assert(core.new { history_file = other })
    T.match(e3:warnings()[1], "not a proctor history file")
    e3:close()
    T.eq(U.read_file(other), "hello, world\n", "left alone")
    T.raises(function() core.new { history_file = 1 } end, "history_file")
    T.raises(function() core.new { history_file = "" } end, "history_file")
    T.raises(function() core.new { history_output_bytes = -1 } end, "history_output_bytes")
    T.raises(function() core.new { audit_keep = "x" } end, "audit_keep")
    T.raises(function() core.new { audit_max_bytes = 1.5 } end, "audit_max_bytes")
  end)

  test(
    "the audit log has one line per lifecycle event with the documented fields, untouched by purge",
    function()
      local a = path("log")
      local eng = assert(core.new { audit_file = a })
      local _, id1 = U.run(
        eng,
        { cmd = { "sh", "-c", "exit 2" }, label = "two", owner = "agent-x", env = { K1 = "v" } }
      )
      local id2 = assert(eng:start { cmd = "sleep 10" })
      U.wait_state(eng, id2, "running")
      T.eq(eng:cancel(id2), "canceling")
      U.collect(eng, { id2 })
      U.run(eng, { cmd = { "/nonexistent/cmd" } })
      eng:close()
      local text = U.read_file(a)
      local lines = {}
      for l in text:gmatch("[^\n]+") do
        lines[#lines + 1] = l
      end
      -- queued, starting, running, terminal for two; queued, starting, failed for the spawn error
      T.eq(#lines, 4 + 4 + 3, text)
      local function field(l, k) return l:match('"' .. k .. '":("?[^,"}]*"?)') end
      T.eq(field(lines[1], "event"), '"queued"')
      T.eq(field(lines[1], "prev"), "null")
      T.eq(field(lines[2], "event"), '"starting"')
      T.eq(field(lines[3], "event"), '"running"')
      T.ok(tonumber(field(lines[3], "pid")))
      T.eq(field(lines[4], "event"), '"failed"')
      T.eq(field(lines[4], "exit_code"), "2")
      T.eq(field(lines[4], "owner"), '"agent-x"')
      T.eq(field(lines[4], "label"), '"two"')
      T.eq(field(lines[4], "id"), tostring(id1))
      T.eq(field(lines[4], "reason"), '"exit"')
      T.ok(tonumber(field(lines[4], "duration_ms")) and tonumber(field(lines[4], "ts")))
      T.ok(lines[4]:find('"cmd":["sh","-c","exit 2"]', 1, true), lines[4])
      T.ok(lines[4]:find('"K1"', 1, true) and not lines[4]:find('"v"', 1, true), "env keys only")
      T.ok(lines[4]:find('"cwd":"', 1, true) and lines[4]:find('"session":0', 1, true))
      T.eq(field(lines[8], "event"), '"canceled"')
      T.eq(field(lines[8], "signal"), '"SIGTERM"')
      T.eq(field(lines[8], "reason"), '"canceled"')
      T.eq(field(lines[11], "event"), '"failed"')
      T.eq(field(lines[11], "reason"), '"spawn_error"')
      T.ok(field(lines[11], "error"))
      -- purge and delete never touch it
      local h = path()
      eng = assert(core.new { audit_file = a, history_file = h })
      local id4 = select(2, U.run(eng, { cmd = "true" }))
      U.run(eng, { cmd = "true" })
      eng:close()
      local before = U.read_file(a)
      T.ok(#before > #text)
      eng = assert(core.new { audit_file = a, history_file = h })
      T.eq(eng:delete(id4), "deleted")
      T.eq(eng:purge(), 1)
      eng:close()
      T.eq(U.read_file(a), before)
    end
  )

  test("the audit log rotates by size and keeps audit_keep files", function()
    local a = path("log")
    local eng = assert(core.new { audit_file = a, audit_max_bytes = 2000, audit_keep = 2 })
    local ids_ = {}
    -- one after another, with a small fixed environment: the newest line is
    -- id 12's and line sizes do not depend on the host's environment
    for i = 1, 12 do
      ids_[i] = assert(eng:start { cmd = "true", clear_env = true })
      U.collect(eng, { ids_[i] })
    end
    eng:close()
    T.ok(size(a) > 0 and size(a) <= 2000, "current " .. size(a))
    T.ok(size(a .. ".1") > 0 and size(a .. ".1") <= 2000)
    T.ok(size(a .. ".2") > 0)
    T.eq(size(a .. ".3"), -1, "only audit_keep rotated files")
    local all = (U.read_file(a .. ".2") or "") .. U.read_file(a .. ".1") .. U.read_file(a)
    T.ok(all:find('"id":' .. ids_[12] .. ",", 1, true))
    for l in all:gmatch("[^\n]+") do
      T.ok(l:sub(1, 1) == "{" and l:sub(-1) == "}", l)
    end
  end)

  U.rmrf(dir)
end
