-- .luacheckrc — luacheck's settings for every Lua file of the repository (`make lint`).
--
-- The plugin runs in Neovim (LuaJIT); the binding specs, the worker's core spec and the
-- Lua benchmarks also run under plain Lua 5.4, so those files may use either.
std = "luajit"
globals = { "vim" }

-- Line length is the formatter's to decide (.stylua.toml, 100 columns); the strings and
-- comments it cannot break may stay longer.
max_line_length = false

-- An unused argument is part of a signature that something else fixed (a callback, a
-- method, a spec's `function(test, T, H)`); unused variables, shadowing and globals are
-- reported.
ignore = { "212" }

-- Run by lua5.4 as well as by Neovim.
files["tests/lua"] = { std = "luajit+lua54" }
files["tests/worker/spec_core.lua"] = { std = "luajit+lua54" }
files["tests/rpc/host.lua"] = { std = "luajit+lua54" }
files["bench/lua"] = { std = "luajit+lua54" }
files["bench/lib.lua"] = { std = "luajit+lua54" }

-- The ---@meta type file: its tables exist only to carry annotations.
files["lua/proctor/types.lua"] = { ignore = { "241" } }
