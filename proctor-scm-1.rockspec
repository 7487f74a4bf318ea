-- proctor-scm-1.rockspec — the core (proctor.core), its shepherd helper and
-- the Lua files, for standalone Lua scripts. Neovim users build with `make`.
rockspec_format = "3.0"
package = "proctor"
version = "scm-1"
source = {
  url = "git+https://example.invalid/proctor.git",
}
description = {
  summary = "Execution control plane: run, stream, cancel and supervise processes from Lua",
  detailed = [[
    Every run is an execution with a stable id and an explicit lifecycle,
    bounded output rings, tree-kill cancel, timeouts, and the guarantee that
    nothing it started outlives it (a shepherd process kills everything when
    its host dies). A C engine thread with its own libuv loop does the work.
  ]],
  license = "MIT",
  labels = { "process", "libuv", "neovim" },
}
dependencies = {
  "lua >= 5.1",
}
external_dependencies = {
  UV = { header = "uv.h" },
  MSGPACK = { header = "msgpack.h" },
  CJSON = { header = "cjson/cJSON.h" },
}
build = {
  type = "make",
  build_target = "rock",
  install_target = "install-rock",
  build_variables = {
    CFLAGS = "$(CFLAGS)",
    LUA_INCDIR = "$(LUA_INCDIR)",
    UV_LIBS = "-L$(UV_LIBDIR) -luv",
  },
  install_variables = {
    INST_LIBDIR = "$(LIBDIR)",
    INST_LUADIR = "$(LUADIR)",
  },
}
