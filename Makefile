# proctor — build, test, bench, demo.  `make help` lists the targets.
#
# Outputs go to build/; the Neovim core and its shepherd are renamed into
# lua/proctor/ atomically (a loaded .so must never be overwritten in place).

CC        ?= cc
MUSL_CC   ?= musl-gcc
CLANG     ?= clang
NVIM      ?= nvim
LUA       ?= lua5.4
PYTHON    ?= /usr/bin/python3
CFLAGS    ?= -O2 -g
WARN      ?= -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers
LUAJIT_INC ?= $(shell pkg-config --cflags luajit 2>/dev/null || echo -I/usr/include/luajit-2.1)
LUA54_INC  ?= $(shell pkg-config --cflags lua5.4 2>/dev/null || echo -I/usr/include/lua5.4)
UV_LIBS    ?= $(shell pkg-config --libs libuv 2>/dev/null || echo -luv)
# msgpack-c is linked statically and its symbols stay hidden inside the core.
MSGPACK_LIBS ?= -l:libmsgpackc.a -Wl,--exclude-libs,ALL
# cJSON: the audit log's lines, JSON <-> msgpack, the jsonl worker protocol, Lua <-> JSON
# (csrc/store/audit.c, csrc/base/mpack.c, csrc/engine/worker_jsonl.c, csrc/lua/json.c).
CJSON_LIBS ?= -lcjson
FUZZ_SECONDS ?= 60
BUILD     ?= build
SETUP     ?= scripts/setup.sh

# The flags every C build shares: the language, the includes, the warnings. The core
# adds position-independent code and hidden symbols; the C tests add -pthread.
C_STD       = -std=c11 -D_GNU_SOURCE -Icsrc $(WARN)
BASE_CFLAGS = $(C_STD) -fPIC -fvisibility=hidden -pthread
TEST_CFLAGS = $(C_STD) -pthread

BASE_SRC   = csrc/base/error.c csrc/base/clock.c csrc/base/names.c csrc/base/spec_fill.c csrc/base/record.c csrc/base/buf.c \
             csrc/base/idmap.c csrc/base/locked.c csrc/base/mpack.c csrc/base/mpscan.c csrc/base/utf8.c \
             csrc/base/ring.c csrc/base/wire.c csrc/base/liveness.c csrc/base/overwrite.c csrc/base/sockname.c
# the engine thread: executions, streams, the shepherd link, commands, workers
ENGINE_SRC = $(BASE_SRC) csrc/engine/exec.c csrc/engine/exec_record.c csrc/engine/stream.c csrc/engine/hostq.c \
             csrc/engine/registry.c csrc/engine/shepherd_link.c csrc/engine/control.c csrc/engine/spec.c \
             csrc/engine/secrets.c csrc/engine/vault.c csrc/engine/secret_source.c csrc/engine/keyring.c csrc/engine/worker.c \
             csrc/engine/worker_jsonl.c csrc/engine/worker_msgpack.c csrc/engine/targets.c
# the msgpack-rpc server, the durable files, and the file that wires them
ENGINE_SRC += csrc/rpc/server.c csrc/rpc/conn.c csrc/rpc/methods.c csrc/rpc/params.c \
              csrc/rpc/pack.c csrc/rpc/ident.c
ENGINE_SRC += csrc/store/journal.c csrc/store/frame.c csrc/store/history.c csrc/store/history_load.c csrc/store/audit.c
ENGINE_SRC += csrc/proctor.c
LUA_SRC    = csrc/lua/binding.c csrc/lua/spec.c csrc/lua/env_policy.c csrc/lua/push.c csrc/lua/json.c \
             csrc/lua/overwrite.c
CORE_SRC   = $(ENGINE_SRC) $(LUA_SRC)
HDRS       = $(wildcard csrc/*/*.h)

# Only csrc/lua/ sees a Lua header: the engine's objects are compiled once, in
# $(BUILD)/obj/, and linked into both cores, proctor-mcp, proctor-acp and the
# rock; each core compiles csrc/lua/ against its own Lua's headers.
ENGINE_OBJ = $(patsubst csrc/%.c,$(BUILD)/obj/%.o,$(ENGINE_SRC))
NVIM_OBJ  = $(ENGINE_OBJ) $(patsubst csrc/%.c,$(BUILD)/nvim/%.o,$(LUA_SRC))
LUA54_OBJ = $(ENGINE_OBJ) $(patsubst csrc/%.c,$(BUILD)/lua5.4/obj/%.o,$(LUA_SRC))

SHEPHERD  = $(BUILD)/proctor-shepherd
SHEPHERD_DYN = $(BUILD)/proctor-shepherd-dyn
NVIM_SO   = lua/proctor/core.so
LUA54_SO  = $(BUILD)/lua5.4/proctor/core.so

.PHONY: all setup test bench demo clean help check-symbols check-layers callgraph rock install-rock fuzz nvim-0.10 \
        nvim-current doc mutate lint format
.DEFAULT_GOAL := all

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | sort

TEST_TRUE = $(BUILD)/test-true
BUILT = $(NVIM_SO) lua/proctor/proctor-shepherd $(SHEPHERD_DYN) $(LUA54_SO) $(BUILD)/lua5.4/proctor/proctor-shepherd doc/tags \
        lua/proctor/proctor-mcp lua/proctor/proctor-acp
ifneq ($(shell command -v $(MUSL_CC) 2>/dev/null),)
BUILT += lua/proctor/proctor-shepherd-static $(BUILD)/lua5.4/proctor/proctor-shepherd-static
endif
all: setup $(BUILT) $(TEST_TRUE) ## build the core for Neovim (LuaJIT) and Lua 5.4, the shepherd, proctor-mcp, proctor-acp and the help tags

# A true with no C library (tests/c/true.c; `test-true N` exits N) for the
# stress tests' thousands of starts: a quarter of the CPU of /bin/true or
# `sh -c "exit N"` per start. Built with `all` (it is one small compile) so that
# tests/run finds it after any build; on an architecture true.c does not know,
# a shell script that does the same.
$(TEST_TRUE): tests/c/true.c | $(BUILD)
	$(CC) -O2 -static -nostdlib -fno-stack-protector -Wl,-z,noexecstack -o $@.tmp $< 2>/dev/null || \
	  { printf '#!/bin/sh\nexit $${1:-0}\n' >$@.tmp && chmod +x $@.tmp; }
	mv -f $@.tmp $@

setup: ## install missing Debian packages (as root) or say which are missing
	@$(SETUP) build

# --- the shepherd: a plain program, shared by both builds -----------------------
# It shares only base/ with the core: the wire protocol, the id map, the buffer, liveness.
# Bound at load (-z now): a lazy binding saves the vector registers on the
# stack, and they hold pieces of the last spawn request (secret values).
SHEPHERD_SRC = $(wildcard csrc/shepherd/*.c) csrc/base/wire.c csrc/base/idmap.c csrc/base/buf.c \
               csrc/base/liveness.c
$(SHEPHERD_DYN): $(SHEPHERD_SRC) csrc/shepherd/shepherd.h $(HDRS) Makefile | $(BUILD)
	$(CC) $(CFLAGS) $(C_STD) -Wl,-z,now,-z,relro -o $@.tmp $(SHEPHERD_SRC)
	mv -f $@.tmp $@

# The shepherd the engine starts is the static one below when musl-gcc is there,
# else the dynamic build above. It forks once per job (the job's reaper) and
# execs once per session: a static image has fewer pages to map at exec and to
# copy or fault in after each fork (bench/spawnhops.c: page faults of the
# shepherd and a reaper per job 34 -> 19, the shepherd's start 30 -> 11).
# The dynamic build stays for the tests that LD_PRELOAD into a shepherd.
ifneq ($(shell command -v $(MUSL_CC) 2>/dev/null),)
$(SHEPHERD): $(BUILD)/proctor-shepherd-static
else
$(SHEPHERD): $(SHEPHERD_DYN)
endif
	cp -f $< $@.tmp && mv -f $@.tmp $@

lua/proctor/proctor-shepherd: $(SHEPHERD)
	cp -f $< $@.tmp && mv -f $@.tmp $@

# The same program linked statically with musl (Debian's musl-tools), for the far
# side of a target (|proctor-targets|): proctor copies it there on first use, and a
# static binary runs whatever libc the far side has. Without musl-gcc it is not
# built, and a target needs `shepherd = path` or a far side whose glibc runs ours.
SHEPHERD_STATIC = $(BUILD)/proctor-shepherd-static
$(SHEPHERD_STATIC): $(SHEPHERD_SRC) csrc/shepherd/shepherd.h $(HDRS) Makefile | $(BUILD)
	$(MUSL_CC) -static -O2 $(C_STD) -o $@.tmp $(SHEPHERD_SRC)
	mv -f $@.tmp $@

lua/proctor/proctor-shepherd-static $(BUILD)/lua5.4/proctor/proctor-shepherd-static: $(SHEPHERD_STATIC)
	@mkdir -p $(dir $@)
	cp -f $< $@.tmp && mv -f $@.tmp $@

$(BUILD)/lua5.4/proctor/proctor-shepherd: $(SHEPHERD)
	@mkdir -p $(dir $@)
	cp -f $< $@.tmp && mv -f $@.tmp $@

# --- the engine's objects, shared (no Lua header) ------------------------------------
$(BUILD)/obj/%.o: csrc/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(BASE_CFLAGS) -c $< -o $@

# --- core for Neovim: LuaJIT headers, links neither liblua nor libuv -------------
$(BUILD)/nvim/%.o: csrc/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(BASE_CFLAGS) $(LUAJIT_INC) -c $< -o $@

$(BUILD)/nvim/core.so: $(NVIM_OBJ)
	$(CC) -shared -pthread -o $@ $(NVIM_OBJ) $(MSGPACK_LIBS) $(CJSON_LIBS) -ldl

$(NVIM_SO): $(BUILD)/nvim/core.so
	cp -f $< $@.tmp && mv -f $@.tmp $@

# --- core for Lua 5.4 scripts: links libuv ----------------------------------------
$(BUILD)/lua5.4/obj/%.o: csrc/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(BASE_CFLAGS) $(LUA54_INC) -c $< -o $@

$(LUA54_SO): $(LUA54_OBJ)
	@mkdir -p $(dir $@)
	$(CC) -shared -pthread -o $@.tmp $(LUA54_OBJ) $(UV_LIBS) $(MSGPACK_LIBS) $(CJSON_LIBS) -ldl
	mv -f $@.tmp $@

$(BUILD):
	@mkdir -p $@

# :help proctor in any install (a pack/*/start checkout, a plugin manager's
# build step, make demo) needs doc/tags next to doc/proctor.txt.
doc/tags: doc/proctor.txt
	$(NVIM) --headless -u NONE -i NONE -n -c 'helptags doc' -c 'qa!'

# --- proctor-mcp: the MCP server (csrc/mcp/), a program installed beside the core ----
# It links the engine (embedded mode) and talks to every engine through the
# msgpack-rpc socket; see :help proctor-mcp.
MCP_SRC        = $(wildcard csrc/mcp/*.c)
MCP_HDRS       = $(wildcard csrc/mcp/*.h)
MCP_OBJ        = $(patsubst csrc/%.c,$(BUILD)/mcp/obj/%.o,$(MCP_SRC)) $(ENGINE_OBJ)
MCP_BIN        = $(BUILD)/proctor-mcp

$(BUILD)/mcp/obj/mcp/%.o: csrc/mcp/%.c $(HDRS) $(MCP_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(BASE_CFLAGS) -c $< -o $@

$(MCP_BIN): $(MCP_OBJ)
	$(CC) -pthread -o $@.tmp $(MCP_OBJ) $(UV_LIBS) $(MSGPACK_LIBS) $(CJSON_LIBS) -ldl -lm
	mv -f $@.tmp $@

lua/proctor/proctor-mcp: $(MCP_BIN)
	cp -f $< $@.tmp && mv -f $@.tmp $@

$(BUILD)/rock/proctor/proctor-mcp: $(MCP_BIN)
	@mkdir -p $(dir $@)
	cp -f $< $@.tmp && mv -f $@.tmp $@

# --- proctor-acp: the ACP proxy (csrc/acp/), on proctor-mcp's RPC client ----------------
# It runs the real agent, relays its messages and serves its terminals as
# proctor executions; see :help proctor-acp-proxy. It shares csrc/mcp/'s RPC
# client, discovery, embedded engine, loop timers and log, not its tools.
ACP_SRC        = $(wildcard csrc/acp/*.c) csrc/mcp/rpc.c csrc/mcp/connect.c csrc/mcp/discover.c \
                 csrc/mcp/embedded.c csrc/mcp/loop.c csrc/mcp/log.c
ACP_HDRS       = $(wildcard csrc/acp/*.h) $(MCP_HDRS)
ACP_OBJ        = $(patsubst csrc/%.c,$(BUILD)/mcp/obj/%.o,$(ACP_SRC)) $(ENGINE_OBJ)
ACP_BIN        = $(BUILD)/proctor-acp

$(BUILD)/mcp/obj/acp/%.o: csrc/acp/%.c $(HDRS) $(ACP_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(BASE_CFLAGS) -c $< -o $@

$(ACP_BIN): $(ACP_OBJ)
	$(CC) -pthread -o $@.tmp $(ACP_OBJ) $(UV_LIBS) $(MSGPACK_LIBS) $(CJSON_LIBS) -ldl -lm
	mv -f $@.tmp $@

lua/proctor/proctor-acp: $(ACP_BIN)
	cp -f $< $@.tmp && mv -f $@.tmp $@

$(BUILD)/rock/proctor/proctor-acp: $(ACP_BIN)
	@mkdir -p $(dir $@)
	cp -f $< $@.tmp && mv -f $@.tmp $@

# --- tests ---------------------------------------------------------------------------
# -DPR_DEBUG: a bug the core survives in release builds (a refused state
# transition) stops a test build at once, loudly.
SAN_FLAGS  = -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined -DPR_DEBUG
# TSan from GCC: clang 14's TSan runtime trips over its own allocator checks
# on this kernel's address-space layout (CHECK failed in sanitizer_allocator).
TSAN_CC    ?= gcc
TSAN_FLAGS = -O1 -g -fsanitize=thread -DPR_DEBUG

# The engine's ASan/UBSan objects (and proctor-mcp's and proctor-acp's), compiled
# once for test_engine_asan and the ASan builds of proctor-mcp and proctor-acp.
ASAN_OBJ = $(patsubst csrc/%.c,$(BUILD)/asan/%.o,$(ENGINE_SRC))
$(BUILD)/asan/%.o: csrc/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CLANG) $(SAN_FLAGS) $(TEST_CFLAGS) -c $< -o $@

# test_engine_asan's engine splits stdin writes into 4 KiB buffers (engine/stream.c
# PR_INPUT_CHUNK, 1 GiB otherwise), so test_input_roundtrip checks the split path
# byte for byte: its stream.c is compiled once more with that.
$(BUILD)/asan/engine/stream-4k.o: csrc/engine/stream.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CLANG) $(SAN_FLAGS) -DPR_INPUT_CHUNK=4096 $(TEST_CFLAGS) -c $< -o $@
ENGINE_ASAN_OBJ = $(filter-out $(BUILD)/asan/engine/stream.o,$(ASAN_OBJ)) $(BUILD)/asan/engine/stream-4k.o

# A shared object the engine tests preload into a shepherd (tests/c/stop_reaper.c): it
# stops a reaper before it reports the spawn, a race a loaded machine makes only sometimes.
STOP_REAPER = $(BUILD)/stop_reaper.so
$(STOP_REAPER): tests/c/stop_reaper.c csrc/base/wire.h | $(BUILD)
	$(CC) -O2 -g -std=c11 -D_GNU_SOURCE -Icsrc -Wall -Wextra -shared -fPIC -o $@ $< -ldl
# Another (tests/c/slow_shepherd.c): it holds the shepherd inside a spawn request, working
# or hung, while the engine's liveness check judges its silence.
SLOW_SHEPHERD = $(BUILD)/slow_shepherd.so
$(SLOW_SHEPHERD): tests/c/slow_shepherd.c csrc/base/wire.h | $(BUILD)
	$(CC) -O2 -g -std=c11 -D_GNU_SOURCE -Icsrc -Wall -Wextra -shared -fPIC -o $@ $< -ldl
# And one more (tests/c/slow_reaper.c): it holds a job's reaper inside the read of a cancel's
# SIGTERM, working or hung, while the shepherd judges its silence.
SLOW_REAPER = $(BUILD)/slow_reaper.so
$(SLOW_REAPER): tests/c/slow_reaper.c | $(BUILD)
	$(CC) -O2 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -shared -fPIC -o $@ $< -ldl

$(BUILD)/test_engine_asan: tests/c/test_engine.c tests/c/tap.h csrc/engine/lctest.c $(ENGINE_ASAN_OBJ) $(HDRS) $(SHEPHERD) $(SHEPHERD_DYN) $(STOP_REAPER) $(SLOW_SHEPHERD) $(SLOW_REAPER)
	$(CLANG) $(SAN_FLAGS) $(TEST_CFLAGS) -o $@ tests/c/test_engine.c csrc/engine/lctest.c $(ENGINE_ASAN_OBJ) $(UV_LIBS) $(MSGPACK_LIBS) $(CJSON_LIBS) -ldl

$(BUILD)/test_engine_tsan: tests/c/test_engine.c tests/c/tap.h csrc/engine/lctest.c $(ENGINE_SRC) $(HDRS) $(SHEPHERD) $(SHEPHERD_DYN) $(STOP_REAPER) $(SLOW_SHEPHERD) $(SLOW_REAPER)
	$(TSAN_CC) $(TSAN_FLAGS) $(TEST_CFLAGS) -o $@ tests/c/test_engine.c csrc/engine/lctest.c $(ENGINE_SRC) $(UV_LIBS) $(MSGPACK_LIBS) $(CJSON_LIBS) -ldl

$(BUILD)/test_ring_asan: tests/c/test_ring.c tests/c/tap.h csrc/base/ring.c csrc/base/error.c $(HDRS)
	$(CLANG) $(SAN_FLAGS) $(TEST_CFLAGS) -o $@ tests/c/test_ring.c csrc/base/ring.c csrc/base/error.c $(UV_LIBS)
# The ring under TSan (its writer/reader test: the engine and the host on one spilling ring).
$(BUILD)/test_ring_tsan: tests/c/test_ring.c tests/c/tap.h csrc/base/ring.c csrc/base/error.c $(HDRS)
	$(TSAN_CC) $(TSAN_FLAGS) $(TEST_CFLAGS) -o $@ tests/c/test_ring.c csrc/base/ring.c csrc/base/error.c $(UV_LIBS)

# The relay shepherd (--relay) under ASan/UBSan, driven through a socketpair.
$(BUILD)/proctor-shepherd-asan: $(SHEPHERD_SRC) csrc/shepherd/shepherd.h $(HDRS) Makefile | $(BUILD)
	$(CLANG) $(SAN_FLAGS) $(C_STD) -o $@ $(SHEPHERD_SRC)
$(BUILD)/test_relay_asan: tests/c/test_relay.c tests/c/tap.h csrc/base/error.c $(HDRS) $(BUILD)/proctor-shepherd-asan
	$(CLANG) $(SAN_FLAGS) $(TEST_CFLAGS) -o $@ tests/c/test_relay.c csrc/base/error.c $(UV_LIBS)

TEST_BASE_SRC = csrc/base/idmap.c csrc/base/buf.c csrc/base/utf8.c csrc/base/mpack.c csrc/base/error.c \
                csrc/base/liveness.c csrc/base/overwrite.c csrc/base/sockname.c
$(BUILD)/test_base_asan: tests/c/test_base.c tests/c/tap.h $(TEST_BASE_SRC) $(HDRS)
	$(CLANG) $(SAN_FLAGS) $(TEST_CFLAGS) -o $@ tests/c/test_base.c $(TEST_BASE_SRC) \
	  -l:libmsgpackc.a $(CJSON_LIBS) $(UV_LIBS)

# The RPC fuzz target: libFuzzer + ASan/UBSan over the decoder and dispatcher
# (no socket, no real spawns). `make fuzz` explores; tests/rpc/run replays
# tests/fuzz/corpus/ with the same binary.
FUZZ_BIN = $(BUILD)/fuzz_rpc
$(FUZZ_BIN): tests/fuzz/fuzz_rpc.c $(ENGINE_SRC) $(HDRS)
	@mkdir -p $(dir $@)
	$(CLANG) -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	  -DPR_RPC_FUZZ -DPR_DEBUG $(TEST_CFLAGS) -o $@ tests/fuzz/fuzz_rpc.c $(ENGINE_SRC) \
	  $(UV_LIBS) $(MSGPACK_LIBS) $(CJSON_LIBS) -ldl

# The worker protocol target: the JSON lines and msgpack-rpc parsers and the
# output masker, with secrets set (no engine). tests/worker/run replays
# tests/fuzz/corpus-worker/.
FUZZ_WORKER_BIN = $(BUILD)/fuzz_worker
FUZZ_WORKER_SRC = tests/fuzz/wparse.c csrc/engine/worker_jsonl.c csrc/engine/worker_msgpack.c csrc/engine/secrets.c \
                  csrc/base/mpack.c csrc/base/mpscan.c csrc/base/utf8.c csrc/base/buf.c csrc/base/locked.c
$(FUZZ_WORKER_BIN): tests/fuzz/fuzz_worker.c $(FUZZ_WORKER_SRC) $(HDRS)
	@mkdir -p $(dir $@)
	$(CLANG) -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	  -DPR_DEBUG $(TEST_CFLAGS) -o $@ tests/fuzz/fuzz_worker.c $(FUZZ_WORKER_SRC) \
	  $(MSGPACK_LIBS) $(CJSON_LIBS)

fuzz: ## fuzz the RPC decoder+dispatcher, then the worker parsers with secrets, with libFuzzer for FUZZ_SECONDS each (default 60)
	@$(SETUP) fuzz
	@$(MAKE) --no-print-directory $(FUZZ_BIN) $(FUZZ_WORKER_BIN)
	@mkdir -p $(BUILD)/fuzz-corpus $(BUILD)/fuzz-corpus-worker
	$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
	  -print_final_stats=1 $(BUILD)/fuzz-corpus tests/fuzz/corpus
	$(FUZZ_WORKER_BIN) -max_total_time=$(FUZZ_SECONDS) -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
	  -print_final_stats=1 $(BUILD)/fuzz-corpus-worker tests/fuzz/corpus-worker

TEST_BINS = $(BUILD)/test_engine_asan $(BUILD)/test_engine_tsan $(BUILD)/test_ring_asan $(BUILD)/test_ring_tsan \
            $(BUILD)/test_base_asan $(FUZZ_BIN) \
            $(BUILD)/test_relay_asan \
            $(FUZZ_WORKER_BIN)

# proctor-mcp under ASan/UBSan (with its shepherd beside it): the mcp tier runs
# the SDK tests against it too and fails on any sanitizer report. Linked
# without --exclude-libs: that would hide ASan's malloc from libcjson.
MCP_ASAN = $(BUILD)/mcp-asan/proctor-mcp
TEST_BINS += $(MCP_ASAN)
MCP_ASAN_OBJ = $(patsubst csrc/%.c,$(BUILD)/asan/%.o,$(MCP_SRC)) $(ASAN_OBJ)
$(MCP_ASAN): $(MCP_ASAN_OBJ) $(SHEPHERD)
	@mkdir -p $(dir $@)
	$(CLANG) $(SAN_FLAGS) $(TEST_CFLAGS) -o $@ $(MCP_ASAN_OBJ) \
	  $(UV_LIBS) -l:libmsgpackc.a $(CJSON_LIBS) -ldl -lm
	cp -f $(SHEPHERD) $(dir $@)proctor-shepherd

# proctor-acp under ASan/UBSan, beside proctor-mcp's: the acp tier runs its proxy tests on it.
ACP_ASAN = $(BUILD)/mcp-asan/proctor-acp
TEST_BINS += $(ACP_ASAN)
ACP_ASAN_OBJ = $(patsubst csrc/%.c,$(BUILD)/asan/%.o,$(ACP_SRC)) $(ASAN_OBJ)
$(ACP_ASAN): $(ACP_ASAN_OBJ) $(SHEPHERD)
	@mkdir -p $(dir $@)
	$(CLANG) $(SAN_FLAGS) $(TEST_CFLAGS) -o $@ $(ACP_ASAN_OBJ) \
	  $(UV_LIBS) -l:libmsgpackc.a $(CJSON_LIBS) -ldl -lm
	cp -f $(SHEPHERD) $(dir $@)proctor-shepherd

# A second Neovim for the tests: Debian 13's 0.10.4 in a private prefix (the
# system is untouched). When it cannot be fetched, tests/run fails its tiers
# with the reason (never skips them).
NVIM_COMPAT = $(BUILD)/nvim-0.10/nvim

nvim-0.10: ## fetch Debian 13's Neovim 0.10.4 into build/nvim-0.10/ (private apt; `make demo NVIM=build/nvim-0.10/nvim`)
	@scripts/nvim-compat.sh $(BUILD)/nvim-0.10

# The current Neovim: Debian unstable's (its Release file may be past its
# Valid-Until on a stale mirror; the signatures are still checked). Cached in
# build/nvim-current/ until `make clean`; one FAIL line when it cannot be had.
NVIM_CURRENT = $(BUILD)/nvim-current/nvim

nvim-current: ## fetch Debian unstable's Neovim (0.11 or newer) into build/nvim-current/ (private apt; cached)
	@NVIM_COMPAT_SUITE=sid NVIM_COMPAT_ALLOW_EXPIRED=1 NVIM_COMPAT_MIN=0.11 \
	  scripts/nvim-compat.sh $(BUILD)/nvim-current 2>/dev/null || \
	  { echo "FAIL nvim-current: $$(cat $(BUILD)/nvim-current.err 2>/dev/null || echo 'scripts/nvim-compat.sh failed')"; exit 1; }

test: ## build everything, lint, check the layers and run every test tier (Neovim tiers on 0.7.2, 0.10.4 and the current one); ends with "N passed, N failed"
	@$(SETUP) test
	@# What comes from the network (the two Neovims, the SDKs of the mcp and acp tiers)
	@# is fetched while the build runs: none needs another. A fetch that fails says so
	@# here, and its tiers fail with the reason (tests/run, tests/sdk.sh). The two
	@# programs that are one long compiler command each start first, beside the rest.
	@mkdir -p $(BUILD); \
	  { scripts/nvim-compat.sh $(BUILD)/nvim-0.10 || true; } >$(BUILD)/.fetch-nvim-0.10.log 2>&1 & \
	  { $(MAKE) --no-print-directory nvim-current || true; } >$(BUILD)/.fetch-nvim-current.log 2>&1 & \
	  { tests/sdk.sh mcp || true; } >$(BUILD)/.fetch-sdk.log 2>&1 & \
	  $(MAKE) --no-print-directory -j2 $(FUZZ_BIN) $(BUILD)/test_engine_tsan all rock $(TEST_BINS); rc=$$?; \
	  wait; cat $(BUILD)/.fetch-nvim-0.10.log $(BUILD)/.fetch-nvim-current.log $(BUILD)/.fetch-sdk.log; exit $$rc
	@NVIM_COMPAT=$(NVIM_COMPAT) NVIM_CURRENT=$(NVIM_CURRENT) tests/run

check-layers: ## every #include and call in csrc/ goes down the layers (ARCHITECTURE.md); no C file over 800 lines
	@scripts/check-layers.sh

callgraph: ## print the file call graph of csrc/, its circles, and the folder graph
	@scripts/callgraph.sh

doc: $(NVIM_SO) ## regenerate the parts of doc/proctor.txt and lua/proctor/types.lua made from the code (scripts/gendoc.lua)
	$(NVIM) --headless -u NONE -i NONE -n --cmd 'set rtp^=.' -c "lua dofile('scripts/gendoc.lua').write()" -c 'qa!'

# Each tests/mutants/*.patch is a deliberate bug; tests/mutate applies each to
# a scratch copy, rebuilds, runs the tests its header names and reports killed
# or survived. Not part of `make test` (it takes longer); MUTANTS=a,b selects.
mutate: ## check the tests catch every deliberate bug in tests/mutants/ (before a release)
	@$(SETUP) test
	@$(MAKE) --no-print-directory all $(BUILD)/test_engine_asan $(BUILD)/test_ring_asan
	@tests/mutate

check-symbols: all ## fail unless luaopen_proctor_core is all that each core exports (also the package tier)
	@scripts/check-symbols.sh $(NVIM_SO) $(LUA54_SO)

lint: ## clang-format, stylua and luacheck: zero changes, zero warnings; every mutant applies exactly (also the lint tier; installs the tools)
	@$(SETUP) lint
	@scripts/lint.sh

format: ## rewrite every C and Lua file in the committed style (.clang-format, .stylua.toml)
	@$(SETUP) lint
	@scripts/format.sh

bench: all ## run the benchmarks and write bench/RESULTS.md
	@$(SETUP) bench
	@bench/run

# make's own variables stay out of the demo (its executions would inherit them
# and a `make` run there would act as a sub-make).
demo: all ## open Neovim with proctor and a live console
	@$(SETUP) demo
	@env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS -u MAKEOVERRIDES $(NVIM) --clean -u scripts/demo.lua

# --- luarocks (proctor-scm-1.rockspec) ----------------------------------------------
# luarocks passes LUA_INCDIR, CFLAGS, LIBFLAG and the install dirs. The rock is
# the standalone build (links libuv), for scripts under the Lua it was built for.
LUA_INCDIR ?= /usr/include/lua5.4
ROCK_OBJ = $(ENGINE_OBJ) $(patsubst csrc/%.c,$(BUILD)/rock/obj/%.o,$(LUA_SRC))

$(BUILD)/rock/obj/%.o: csrc/%.c $(HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(BASE_CFLAGS) -I$(LUA_INCDIR) -c $< -o $@

rock: $(ROCK_OBJ) $(SHEPHERD) $(BUILD)/rock/proctor/proctor-mcp $(BUILD)/rock/proctor/proctor-acp ## build the core, the shepherd, proctor-mcp and proctor-acp for luarocks
	@mkdir -p $(BUILD)/rock/proctor
	$(CC) -shared -pthread -o $(BUILD)/rock/proctor/core.so $(ROCK_OBJ) $(UV_LIBS) $(MSGPACK_LIBS) $(CJSON_LIBS) -ldl
	cp -f $(SHEPHERD) $(BUILD)/rock/proctor/proctor-shepherd

# The shepherd must sit next to core.so (found with dladdr), or be named by
# $$PROCTOR_SHEPHERD or core.new{ shepherd = path }. Every lua/proctor/**.lua is
# installed, found with find (a folder added later cannot be forgotten; the
# package tier checks the installed tree).
install-rock: ## install what `make rock` built and every lua/proctor/**.lua into INST_LIBDIR / INST_LUADIR
	install -d "$(INST_LIBDIR)/proctor" "$(INST_LUADIR)/proctor"
	install -m 0755 $(BUILD)/rock/proctor/core.so "$(INST_LIBDIR)/proctor/core.so"
	install -m 0755 $(BUILD)/rock/proctor/proctor-shepherd "$(INST_LIBDIR)/proctor/proctor-shepherd"
	install -m 0755 $(BUILD)/rock/proctor/proctor-mcp "$(INST_LIBDIR)/proctor/proctor-mcp"
	install -m 0755 $(BUILD)/rock/proctor/proctor-acp "$(INST_LIBDIR)/proctor/proctor-acp"
	cd lua && find proctor -name '*.lua' -type f | while read -r f; do \
	  install -D -m 0644 "$$f" "$(INST_LUADIR)/$$f" || exit 1; done

clean: ## remove build outputs
	rm -rf $(BUILD) lua/proctor/core.so lua/proctor/proctor-shepherd lua/proctor/proctor-shepherd-static lua/proctor/proctor-mcp lua/proctor/proctor-acp doc/tags
