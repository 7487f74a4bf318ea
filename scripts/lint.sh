#!/bin/sh
# scripts/lint.sh — the linters, as `make lint` and the `lint` tier of tests/run run them.
#
# Prints "PASS lint/<check>" or "FAIL lint/<check>: <why>" (then what the tool said) for:
#   format     clang-format (csrc/, tests/c/) and stylua (lua/, plugin/, tests/, scripts/,
#              bench/) would change nothing: scripts/format.sh --check
#   luacheck   the same Lua files, .luacheckrc, zero warnings
#   mutants    every tests/mutants/*.patch still applies to the tree exactly (no
#              fuzz), so code that moved re-points its mutants in the same change
#              and `make mutate` never tries a bug on the wrong line
# Exits 1 when one failed. scripts/setup.sh lint installs the tools.
set -u
cd "$(dirname "$0")/.."
rc=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# report NAME WHY: run the rest of the line; PASS, or the start of what the tool
# said and then FAIL (last, so that a runner showing the tail keeps it), naming
# the files that need a change.
report() {
  name=$1 why=$2
  shift 2
  if "$@" >"$out" 2>&1; then
    echo "PASS lint/$name"
  else
    sed 's/^/   /' "$out" | head -n 60
    files=$(sed -n -e 's/^Diff in \(.*\):$/\1/p' -e 's/^\([^ :]*\.[ch]\):[0-9]*:[0-9]*: .*/\1/p' \
      -e 's/^    \([^ :]*\.lua\):[0-9]*:[0-9]*: .*/\1/p' -e 's/^\(tests\/mutants\/[^:]*\.patch\): .*/\1/p' "$out" | sort -u)
    n=$(printf '%s' "$files" | grep -c .)
    echo "FAIL lint/$name: $why; $n file(s): $(printf '%s' "$files" | head -n 8 | tr '\n' ' ')$([ "$n" -gt 8 ] && echo ...)"
    rc=1
  fi
}

report format "files are not formatted (scripts/format.sh rewrites them)" scripts/format.sh --check
LUACHECK=${LUACHECK:-luacheck}
if command -v "$LUACHECK" >/dev/null 2>&1; then
  report luacheck "warnings (see .luacheckrc)" "$LUACHECK" --no-color --codes -q lua plugin tests scripts bench
else
  echo "FAIL lint/luacheck: $LUACHECK is not installed (run: scripts/setup.sh lint)"
  rc=1
fi
mutants_apply() {
  bad=0
  for p in tests/mutants/*.patch; do
    if ! patch -p1 --dry-run --fuzz=0 -s -f <"$p" >/dev/null 2>&1; then
      echo "$p: does not apply without fuzz (redo its change where the code is now)"
      bad=1
    fi
  done
  return $bad
}
report mutants "patches that no longer apply exactly (tests/mutants/README.md)" mutants_apply
exit $rc
