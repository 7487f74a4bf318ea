#!/usr/bin/env bash
# scripts/check-layers.sh — the C core keeps its layers (ARCHITECTURE.md).
#
# 1. Every #include "..." in csrc/ (and in the C tests) goes in an allowed
#    direction:
#
#      include/   the public header: includes nothing of the core
#                 (proctor_test.h, the tests' header, may include base/)
#      base/      leaves: include/ only
#      engine/    base/, include/
#      rpc/       engine/, base/, include/
#      store/     engine/events.h (the listener seam) and no other engine
#                 header, base/, include/
#      lua/       include/ only (the binding uses the public API)
#      mcp/       base/, include/ (a program on the public API and the leaves)
#      acp/       mcp/, base/, include/ (proctor-acp, on proctor-mcp's RPC client)
#      shepherd/  base/wire.h, base/idmap.h, base/buf.h, base/pidfd.h, base/liveness.h
#                 (a separate program)
#      csrc/*.c   anything: the top level wires the layers together
#      tests/     include/ (the public and the test header) and their own files;
#                 tests/fuzz/wparse.c, the worker fuzz target's harness, also the
#                 engine's worker and secrets headers (it builds the parsers
#                 without an engine)
#
#    A folder's own headers may be named with the folder ("rpc/conn.h") or,
#    beside the file, without it ("conn.h").
#
# 2. The file call graph has no circle of more than three files, none across
#    folders, the folders form no circle, and no C file is over 800 lines
#    (scripts/callgraph.sh --check).
#
# 3. Every require("proctor…") in lua/proctor/, and every lookup of an
#    extension of init's registry (proctor._ext, an edge like a lazy require),
#    goes down the Lua floors; requires sit at the top of their file unless
#    listed as lazy; and that graph has no cycle over two modules
#    (scripts/lua-layers.lua, MAX_CYCLE).
#
# Prints PASS/FAIL lines like every test tier; exits non-zero on a failure.
#   scripts/check-layers.sh            both checks
#   scripts/check-layers.sh --includes only the include check (no compiler)
set -uo pipefail
cd "$(dirname "$0")/.."

allowed() { # allowed <file> <included path>: 0 when the include is allowed
  local f=$1 inc=$2 dir
  dir=${f#csrc/}
  dir=${dir%%/*}
  case $f in
  tests/fuzz/wparse.c) [[ $inc == include/* || $inc == engine/worker.h || $inc == engine/secrets.h ]]; return ;;
  tests/c/stop_reaper.c) [[ $inc == base/wire.h ]]; return ;; # it reads the reapers' packets
  tests/c/slow_shepherd.c) [[ $inc == base/wire.h ]]; return ;; # it reads the engine's packets
  tests/*) [[ $inc == include/* || $inc != */* ]]; return ;;
  csrc/*/*) ;;
  csrc/*) return 0 ;; # the top level
  esac
  [[ $inc == "$dir"/* || $inc != */* ]] && return 0 # its own folder (or a file beside it)
  case $dir in
  include) [[ $f == csrc/include/proctor_test.h && $inc == base/* ]] ;;
  base) [[ $inc == include/* ]] ;;
  engine) [[ $inc == base/* || $inc == include/* ]] ;;
  rpc) [[ $inc == engine/* || $inc == base/* || $inc == include/* ]] ;;
  store) [[ $inc == engine/events.h || $inc == base/* || $inc == include/* ]] ;;
  lua) [[ $inc == include/* ]] ;;
  mcp) [[ $inc == base/* || $inc == include/* ]] ;;
  acp) [[ $inc == mcp/* || $inc == base/* || $inc == include/* ]] ;;
  shepherd) [[ $inc == base/wire.h || $inc == base/idmap.h || $inc == base/buf.h || $inc == base/pidfd.h || $inc == base/liveness.h ]] ;;
  *) return 1 ;; # a folder nobody placed yet
  esac
}

bad=0
# the included path, by bash's own regex (no process per line)
include_re='^[^:]*:[0-9]+:[[:space:]]*#[[:space:]]*include[[:space:]]*"([^"]+)"'
while IFS= read -r line; do
  f=${line%%:*}
  inc=$line
  [[ $line =~ $include_re ]] && inc=${BASH_REMATCH[1]}
  if ! allowed "$f" "$inc"; then
    echo "   ${line%%#*} includes \"$inc\": against the layers"
    bad=$((bad + 1))
  fi
done < <(grep -rnE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' csrc tests/c tests/fuzz \
  --include='*.c' --include='*.h' | sort)
if [ "$bad" -eq 0 ]; then
  echo "PASS layers: every #include goes down the layers"
else
  echo "FAIL layers: $bad #include(s) against the layers (see ARCHITECTURE.md, Invariants)"
fi

if [ "${1:-}" != "--includes" ]; then
  out=$(scripts/callgraph.sh --check 2>&1)
  if [ $? -eq 0 ]; then
    echo "PASS layers: the file call graph has no circle over three files or across folders, no C file over 800 lines"
  else
    echo "$out" | sed -n '/^# circles of files/,$p' | sed 's/^/   /'
    echo "FAIL layers: scripts/callgraph.sh --check"
    bad=$((bad + 1))
  fi
fi
if [ "${1:-}" != "--includes" ]; then
  lua5.4 scripts/lua-layers.lua || bad=$((bad + 1))
fi
[ "$bad" -eq 0 ]
