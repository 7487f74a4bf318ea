-- tests/rpc/same_errors.lua — run inside Neovim by test_rpc.py's
-- both_readers_refuse_alike: every start spec of the JSON list in
-- $PROCTOR_CASES goes to the Lua core's eng:start (the Lua table reader of
-- pr_spec_fill); the text of each refusal (inside "bad argument #2 to
-- 'start' (...)"), or "accepted", is written to $PROCTOR_OUT, one line each.
-- test_rpc.py sends the same specs over RPC (the msgpack map reader).
local core = require("proctor.core")
local cases = vim.json.decode(table.concat(vim.fn.readfile(os.getenv("PROCTOR_CASES")), "\n"))
local eng = assert(core.new())
local out = {}
for _, spec in ipairs(cases) do
  local ok, err = pcall(eng.start, eng, spec)
  out[#out + 1] = ok and "accepted" or (tostring(err):match("%((.*)%)$") or tostring(err))
end
eng:close()
vim.fn.writefile(out, os.getenv("PROCTOR_OUT"))
vim.cmd("qa!")
