#!/usr/bin/env bash
# tests/sdk.sh TIER — make the official SDKs pinned in tests/package.json (and
# tests/package-lock.json) available in build/node_modules, and copy the tier's
# test scripts (tests/TIER/*.mjs) to build/sdk-tests/TIER/ so that Node
# resolves the SDKs from there. Used by tests/mcp/run and tests/acp/run.
#
# The install runs once per lock file (`npm ci --prefix build`; a stamp records
# which lock it installed). npm's cache (downloaded tarballs, its logs) is
# build/npm-cache, not the user's ~/.npm: a test writes nothing in the home
# directory. If node/npm are missing or the registry cannot be
# reached, it prints ONE line "FAIL TIER/sdk-install: ..." and exits 1: the
# SDK tests then fail, they are never skipped.
set -u
cd "$(dirname "$0")/.."
tier=${1:?tier}
fail() { echo "FAIL $tier/sdk-install: $*"; exit 1; }

command -v node >/dev/null || fail "node is not installed (scripts/setup.sh test installs Debian's nodejs)"
command -v npm >/dev/null || fail "npm is not installed (scripts/setup.sh test installs Debian's npm)"
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
[ "$major" -ge 18 ] || fail "node $(node --version) is too old: the SDKs need 18 or newer"

# tests/run runs tiers side by side (mcp and acp, each on several Neovims):
# one install at a time (flock), and the scripts replaced file by file with a
# rename, never a directory removed under a tier that is running them.
mkdir -p build
export npm_config_cache="$PWD/build/npm-cache" npm_config_update_notifier=false
exec 9>build/.sdk.lock
flock 9 || fail "cannot lock build/.sdk.lock"
stamp=build/node_modules/.proctor-package-lock.json
if ! { [ -f "$stamp" ] && cmp -s "$stamp" tests/package-lock.json; }; then
  cp tests/package.json tests/package-lock.json build/
  log=$(mktemp)
  if ! timeout 600 npm ci --prefix build --no-audit --no-fund --loglevel=error >"$log" 2>&1; then
    why=$(grep -m1 -E 'ERR|error|Error' "$log" | cut -c1-200)
    rm -f "$log"
    fail "npm ci could not install the pinned SDKs (is the npm registry reachable?): ${why:-npm failed}"
  fi
  rm -f "$log"
  cp tests/package-lock.json "$stamp"
fi

mkdir -p "build/sdk-tests/$tier"
for f in tests/"$tier"/*.mjs; do
  cp "$f" "build/sdk-tests/$tier/.$(basename "$f").$$" && mv -f "build/sdk-tests/$tier/.$(basename "$f").$$" "build/sdk-tests/$tier/$(basename "$f")"
done
