#!/bin/sh
# scripts/format.sh — format every C and Lua file of the repository in place, or check it.
#
#   scripts/format.sh            rewrite: clang-format -i (.clang-format), stylua (.stylua.toml)
#   scripts/format.sh --check    change nothing; list what is not formatted, exit 1 if any
#
# C: csrc/ and tests/c/. Lua: lua/, plugin/, tests/, scripts/, bench/.
# The tools: clang-format and stylua, found as $CLANG_FORMAT and $STYLUA, else on PATH,
# else stylua in build/stylua/ (scripts/setup.sh lint installs them).
set -eu
cd "$(dirname "$0")/.."

check=0
case ${1:-} in
--check) check=1 ;;
"") ;;
*) echo "usage: scripts/format.sh [--check]" >&2; exit 2 ;;
esac

CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
if [ -z "${STYLUA:-}" ]; then
  STYLUA=stylua
  command -v stylua >/dev/null 2>&1 || STYLUA=build/stylua/node_modules/.bin/stylua
fi
for t in "$CLANG_FORMAT" "$STYLUA"; do
  if ! command -v "$t" >/dev/null 2>&1; then
    echo "format: $t is not installed (run: scripts/setup.sh lint)" >&2
    exit 2
  fi
done

c_files() { find csrc tests/c -type f \( -name '*.c' -o -name '*.h' \) | LC_ALL=C sort; }
lua_files() { find lua plugin tests scripts bench -type f -name '*.lua' | LC_ALL=C sort; }

if [ "$check" = 0 ]; then
  # A second pass can still change a few lines (stylua rejoins some calls it broke
  # around a long string): run each tool until its own check passes, at most 3 times.
  for _ in 1 2 3; do
    c_files | xargs "$CLANG_FORMAT" -i
    c_files | xargs "$CLANG_FORMAT" --dry-run -Werror 2>/dev/null && break
  done
  for _ in 1 2 3; do
    lua_files | xargs "$STYLUA" --config-path .stylua.toml
    lua_files | xargs "$STYLUA" --config-path .stylua.toml --check >/dev/null 2>&1 && break
  done
  exit 0
fi

rc=0
c_files | xargs "$CLANG_FORMAT" --dry-run -Werror || rc=1
lua_files | xargs "$STYLUA" --config-path .stylua.toml --check || rc=1
exit $rc
