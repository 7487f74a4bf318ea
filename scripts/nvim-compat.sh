#!/bin/sh
# scripts/nvim-compat.sh — a second Neovim for the tests, from Debian's own
# packages, in a private prefix; the system's apt and packages are untouched.
#
#   scripts/nvim-compat.sh [DEST]        (default: build/nvim-0.10)
#
#   NVIM_COMPAT_SUITE   Debian suite to take neovim from   (default: trixie)
#   NVIM_COMPAT_MIRROR  archive URI  (default: the machine's own apt sources)
#   NVIM_COMPAT_ALLOW_EXPIRED=1  accept a Release file past its Valid-Until (a
#                       stale mirror of sid/forky; signatures are still checked)
#   NVIM_COMPAT_MIN     the oldest Neovim accepted (e.g. 0.11): an older one is
#                       a failure (`make nvim-current` asks for the current one)
#
# Debian 13 ("trixie") ships Neovim 0.10.4 built against a newer glibc than
# Debian 12 has, so it cannot be installed system-wide. Unpacked with its own
# libc it runs through that libc's dynamic loader:
#
#   apt-get update   private sources list (suite $SUITE, the machine's mirror),
#                    private Dir::State, Dir::Cache, Dir::Etc: DEST.apt/
#   apt-cache depends --recurse neovim neovim-runtime   -> the package closure
#   apt-get download <closure>                           -> DEST.apt/debs/
#   dpkg -x each .deb                                    -> DEST/
#   DEST/nvim  wrapper: DEST/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
#              --library-path <DEST's lib dirs> DEST/usr/bin/nvim, VIM=DEST/usr/share/nvim
#
# Trust: the Release files are verified by apt against
# /usr/share/keyrings/debian-archive-keyring.gpg (Debian 12's keyring carries
# the trixie keys). Nothing is ever downloaded unverified; when the keyring
# lacks a key, apt's error is the script's error.
#
# Idempotent: a complete tree (DEST/.complete) is reused without the network;
# the downloaded .debs stay in DEST.apt/debs. On failure the last line on
# stderr says why, the same line is kept in DEST.err, and the exit status is 1.
set -eu

cd "$(dirname "$0")/.."
dest=${1:-build/nvim-0.10}
suite=${NVIM_COMPAT_SUITE:-trixie}
case $dest in /*) ;; *) dest=$PWD/$dest ;; esac
apt=$dest.apt
err=$dest.err
keyring=/usr/share/keyrings/debian-archive-keyring.gpg

die() {
  mkdir -p "$(dirname "$err")"
  echo "nvim-compat: $*" >"$err"
  echo "nvim-compat: $*" >&2
  exit 1
}

# check_min: the Neovim in $dest is at least $NVIM_COMPAT_MIN (when set).
check_min() {
  [ -n "${NVIM_COMPAT_MIN:-}" ] || return 0
  v=$("$dest/nvim" --version 2>/dev/null | head -n1 | sed -n 's/^NVIM v\([0-9][0-9]*\.[0-9][0-9]*\).*/\1/p')
  [ -n "$v" ] || die "$dest/nvim does not run"
  lowest=$(printf '%s\n%s\n' "$v" "$NVIM_COMPAT_MIN" | sort -t. -k1,1n -k2,2n | head -n1)
  [ "$lowest" = "$NVIM_COMPAT_MIN" ] || die "Neovim $v from $suite is older than $NVIM_COMPAT_MIN"
}

if [ -f "$dest/.complete" ] && [ -x "$dest/nvim" ]; then
  check_min
  rm -f "$err"
  exit 0
fi

command -v apt-get >/dev/null || die "apt-get is not available (a Debian machine is needed)"
command -v dpkg >/dev/null || die "dpkg is not available (a Debian machine is needed)"
[ -r "$keyring" ] || die "$keyring is missing (install debian-archive-keyring)"
arch=$(dpkg --print-architecture)
[ "$arch" = amd64 ] || die "only amd64 is supported (this machine is $arch)"

# The mirror: the first Debian archive URI of the machine's own sources (deb822
# .sources files, then one-line sources.list), leaving out the security archive.
mirror=${NVIM_COMPAT_MIRROR:-}
if [ -z "$mirror" ]; then
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    mirror=$(awk '
      /^[ \t]*#/ { next }
      /^URIs:/ { for (i = 2; i <= NF; i++) if ($i !~ /security/ && $i ~ /debian\/?$/) { print $i; exit } }
    ' "$f")
    [ -n "$mirror" ] && break
  done
fi
if [ -z "$mirror" ]; then
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -r "$f" ] || continue
    mirror=$(awk '
      $1 == "deb" {
        i = 2; if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if ($i !~ /security/ && $i ~ /debian\/?$/) { print $i; exit }
      }
    ' "$f")
    [ -n "$mirror" ] && break
  done
fi
[ -n "$mirror" ] || die "no Debian archive URI found in /etc/apt/sources.list{,.d/} (set NVIM_COMPAT_MIRROR)"

mkdir -p "$apt/etc/apt.conf.d" "$apt/etc/preferences.d" "$apt/etc/sources.list.d" \
  "$apt/state/lists/partial" "$apt/cache/archives/partial" "$apt/debs"
: >"$apt/state/status"
echo "deb [signed-by=$keyring] $mirror $suite main" >"$apt/etc/sources.list"

# A private configuration: APT_CONFIG is read first and moves every directory,
# so neither /etc/apt/apt.conf.d nor the system's lists or cache are used.
# A proxy the machine's apt uses is kept.
proxy=$(apt-config dump Acquire::http::Proxy 2>/dev/null | sed -n 's/^Acquire::http::Proxy "\(.*\)";$/\1/p' | head -n1)
cat >"$apt/apt.conf" <<EOF
Dir::Etc "$apt/etc";
Dir::Etc::main "apt.conf";
Dir::Etc::parts "apt.conf.d";
Dir::Etc::preferences "preferences";
Dir::Etc::preferencesparts "preferences.d";
Dir::Etc::sourcelist "sources.list";
Dir::Etc::sourceparts "sources.list.d";
Dir::Etc::trusted "$apt/etc/trusted.gpg";
Dir::Etc::trustedparts "$apt/etc/trusted.gpg.d";
Dir::State "$apt/state";
Dir::State::lists "$apt/state/lists";
Dir::State::status "$apt/state/status";
Dir::Cache "$apt/cache";
Dir::Cache::archives "$apt/cache/archives";
Dir::Log "$apt/log";
APT::Architecture "$arch";
APT::Architectures { "$arch"; };
APT::Get::List-Cleanup "false";
APT::Sandbox::User "$(id -un)";
Acquire::Languages "none";
Acquire::Retries "2";
Acquire::http::Timeout "30";
Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled "false";
EOF
[ -n "$proxy" ] && echo "Acquire::http::Proxy \"$proxy\";" >>"$apt/apt.conf"
[ "${NVIM_COMPAT_ALLOW_EXPIRED:-}" = 1 ] && echo 'Acquire::Check-Valid-Until "false";' >>"$apt/apt.conf"
APT_CONFIG=$apt/apt.conf
export APT_CONFIG

log=$apt/log.txt
if ! apt-get -q update >"$log" 2>&1; then
  die "apt-get update of $mirror $suite failed: $(grep -E '^(E|W):' "$log" | head -n1 | cut -c1-200)"
fi
if grep -q '^[EW]:' "$log"; then
  die "apt-get update of $mirror $suite: $(grep -E '^(E|W):' "$log" | head -n1 | cut -c1-200)"
fi

# The closure of neovim and neovim-runtime, and of patchelf (used below, from
# the same suite, never installed): real packages only ("<virtual>" names are
# provided by one of the real ones listed).
closure() {
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
    --no-replaces --no-enhances "$@" 2>>"$log" | grep -E '^[a-z0-9]' | sort -u
}
want=$(closure neovim neovim-runtime) || true
tools=$(closure patchelf) || true
case " $(echo $want) " in *" neovim "*) ;; *) die "apt-cache depends found no neovim in $mirror $suite" ;; esac
case " $(echo $tools) " in *" patchelf "*) ;; *) die "apt-cache depends found no patchelf in $mirror $suite" ;; esac
# shellcheck disable=SC2046
(cd "$apt/debs" && apt-get -q download $(printf '%s\n' $want $tools | sort -u) >>"$log" 2>&1) ||
  die "apt-get download failed: $(grep -E '^E:' "$log" | tail -n1 | cut -c1-200)"

# unpack LIST DIR: dpkg -x the downloaded .deb of each package into DIR.
unpack() {
  for p in $1; do
    deb=$(ls "$apt/debs/${p}_"*.deb 2>/dev/null | tail -n1)
    [ -n "$deb" ] || die "apt-get download left no .deb for $p"
    dpkg -x "$deb" "$2" || die "dpkg -x $deb failed"
  done
}

# Unpack into a fresh tree; it is renamed into place once complete.
tmp=$dest.new
rm -rf "$tmp" "$apt/tools"
mkdir -p "$tmp" "$apt/tools"
unpack "$want" "$tmp"
unpack "$tools" "$apt/tools"
lib=usr/lib/x86_64-linux-gnu
loader=$lib/ld-linux-x86-64.so.2
[ -x "$tmp/usr/bin/nvim" ] || die "neovim from $suite has no usr/bin/nvim"
[ -e "$tmp/$loader" ] || die "libc6 from $suite has no $loader"
[ -d "$tmp/usr/share/nvim/runtime" ] || die "neovim-runtime from $suite has no usr/share/nvim/runtime"

# Neovim's v:progpath is /proc/self/exe. Started as `ld-linux.so nvim`, that
# names the loader, and a child started with v:progpath (jobstart, tests,
# plugins) would run the loader. So this private copy of usr/bin/nvim gets
# the private loader as its ELF interpreter and the private library dir as
# its RPATH (searched for every library it loads, dlopen included; a library
# found nowhere there comes from the system, e.g. one a plugin's .so needs).
# Then /proc/self/exe is usr/bin/nvim itself, which runs as it is, and nothing
# in the environment leaks the trixie libraries into the children (an
# LD_LIBRARY_PATH would break every system program Neovim starts).
"$tmp/$loader" --library-path "$tmp/$lib:$apt/tools/$lib" "$apt/tools/usr/bin/patchelf" \
  --set-interpreter "$dest/$loader" --force-rpath --set-rpath "$dest/$lib" "$tmp/usr/bin/nvim" \
  >>"$log" 2>&1 || die "patchelf could not set the interpreter of usr/bin/nvim: see $log"

version=$(dpkg-deb -f "$(ls "$apt/debs/neovim_"*.deb | tail -n1)" Version)
cat >"$tmp/nvim" <<EOF
#!/bin/sh
# Neovim $version from Debian $suite with its own libc, written by
# scripts/nvim-compat.sh: usr/bin/nvim has this tree's loader as interpreter
# and its library dir as RPATH. VIM names the runtime, for every child too.
VIM=$dest/usr/share/nvim
export VIM
exec "$dest/usr/bin/nvim" "\$@"
EOF
chmod +x "$tmp/nvim"
printf '%s\n' $want >"$tmp/.complete"
rm -rf "$dest" "$apt/tools"
mv "$tmp" "$dest"
"$dest/nvim" --version >"$apt/version.txt" 2>&1 || die "$dest/nvim does not run: $(head -n1 "$apt/version.txt")"
check_min
rm -f "$err"
head -n1 "$apt/version.txt"
