#!/bin/sh
# scripts/setup.sh — make sure the Debian packages proctor needs are present.
#
# Run by every Makefile target that builds or runs something. When a package
# is missing: as root it is installed with apt-get (CI and fresh machines);
# otherwise the exact apt-get line is printed and the script fails.
#
# lint (and test, whose `lint` tier runs the linters) also need stylua, which
# Debian 12 does not package: the pinned npm package that ships its binary is
# installed into build/stylua/ (no root needed; scripts/format.sh finds it there).
#
#   scripts/setup.sh [build|test|bench|demo|fuzz|lint]   (default: build)
set -eu

what=${1:-build}

# the linters (make lint, the lint tier): clang-format 14 and luacheck; stylua is npm's
# (node and npm: see below)
lint_pkgs="clang-format lua-check"
STYLUA_NPM="@johnnymorganz/stylua-bin@2.5.2"
STYLUA_VERSION="stylua 2.5.2"
build_pkgs="build-essential pkg-config libuv1-dev libmsgpack-dev liblua5.4-dev lua5.4 libluajit-5.1-dev luajit libcjson-dev
  musl-tools"
# the keyring tier: a real Secret Service (gnome-keyring) in a private D-Bus session,
# libsecret (dlopen'ed by the core; secret-tool stores the test items); the target tier:
# sshd, and podman with runc and a static busybox (the image it builds, no registry)
test_pkgs="neovim python3 python3-msgpack python3-pynvim clang libclang-rt-dev valgrind procps util-linux
  dbus-daemon dbus-bin gnome-keyring libsecret-1-0 libsecret-tools openssh-server openssh-client
  podman runc busybox-static $lint_pkgs"
bench_pkgs="neovim procps time python3 lua-luv"
demo_pkgs="neovim"

case "$what" in
  build) pkgs="$build_pkgs" ;;
  test) pkgs="$build_pkgs $test_pkgs" ;;
  bench) pkgs="$build_pkgs $bench_pkgs" ;;
  demo) pkgs="$build_pkgs $demo_pkgs" ;;
  fuzz) pkgs="$build_pkgs clang libclang-rt-dev" ;;
  lint) pkgs="$lint_pkgs" ;;
  *) echo "setup.sh: unknown target '$what'" >&2; exit 2 ;;
esac

missing=""
for p in $pkgs; do
  # dpkg-query answers "install ok installed" only for a fully installed package.
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing="$missing $p"
  fi
done

# The SDK test tiers (mcp, acp) and stylua need node >= 18 and npm. A machine that has
# them from elsewhere (e.g. NodeSource's nodejs, which bundles npm) keeps them;
# otherwise Debian's are installed (Debian 12: node 18).
if { [ "$what" = test ] || [ "$what" = lint ]; } && { ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; }; then
  missing="$missing nodejs npm"
fi

if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
    echo "setup: done"
  else
    echo "setup: missing Debian packages:$missing" >&2
    echo "setup: run: sudo apt-get install$missing" >&2
    exit 1
  fi
fi

# stylua, pinned, into build/stylua/ (its npm package carries the binary for this platform).
if [ "$what" = lint ] || [ "$what" = test ]; then
  cd "$(dirname "$0")/.."
  stylua=build/stylua/node_modules/.bin/stylua
  if [ "$("$stylua" --version 2>/dev/null)" != "$STYLUA_VERSION" ]; then
    echo "setup: installing $STYLUA_NPM into build/stylua/"
    mkdir -p build/stylua
    # npm's cache in build/, as tests/sdk.sh's: nothing written in the user's ~/.npm
    if ! npm_config_cache="$PWD/build/npm-cache" npm_config_update_notifier=false \
      npm install --prefix build/stylua --no-save --no-audit --no-fund --loglevel=error "$STYLUA_NPM" >&2 ||
      [ "$("$stylua" --version 2>/dev/null)" != "$STYLUA_VERSION" ]; then
      echo "setup: could not install $STYLUA_NPM with npm (is the npm registry reachable?)" >&2
      exit 1
    fi
  fi
fi
exit 0
