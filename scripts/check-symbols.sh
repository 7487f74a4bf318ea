#!/bin/sh
# scripts/check-symbols.sh — a core exports luaopen_proctor_core and nothing else.
#
#   scripts/check-symbols.sh [core.so...]   (default: lua/proctor/core.so build/lua5.4/proctor/core.so)
#
# The core is built with -fvisibility=hidden and msgpack-c's symbols are kept
# inside (--exclude-libs): a name that leaks out would be bound by a host
# (Neovim exports every symbol it has) or bind to one of the host's. Prints
# "PASS symbols <file>" or "FAIL symbols <file>: <what>" per file; exits 1 if
# one failed (`make check-symbols`, the `package` tier of tests/run).
set -u
cd "$(dirname "$0")/.."
[ $# -eq 0 ] && set -- lua/proctor/core.so build/lua5.4/proctor/core.so
rc=0
for so in "$@"; do
  if [ ! -f "$so" ]; then
    echo "FAIL symbols $so: missing (make all builds it)"
    rc=1
    continue
  fi
  # every defined dynamic symbol, whatever its kind (code, data, weak)
  if ! syms=$(nm -D --defined-only "$so" 2>&1); then
    echo "FAIL symbols $so: nm failed: $syms"
    rc=1
    continue
  fi
  extra=$(printf '%s\n' "$syms" | awk 'NF >= 3 && $3 != "luaopen_proctor_core" { print $3 }' | tr '\n' ' ')
  if ! printf '%s\n' "$syms" | awk 'NF >= 3 { print $3 }' | grep -qx luaopen_proctor_core; then
    echo "FAIL symbols $so: luaopen_proctor_core is not exported"
    rc=1
  elif [ -n "$extra" ]; then
    echo "FAIL symbols $so: exports more than luaopen_proctor_core: ${extra% }"
    rc=1
  else
    echo "PASS symbols $so"
  fi
done
exit $rc
