-- A project's task file (tests/nvim/spec_tasks.lua): running it leaves a mark,
-- so a test can tell whether it ran before it was trusted.
local mark = os.getenv("PROCTOR_TEST_MARK")
if mark then
  local f = io.open(mark, "a")
  f:write("ran\n")
  f:close()
end
return {
  hello = { cmd = { "echo", "hello from the project" }, desc = "say hello" },
  { name = "count", cmd = "seq 3", pty = false },
}
