#!/usr/bin/env bash
# scripts/callgraph.sh — the file call graph of csrc/ and its cycles.
#
# Every csrc/**/*.c is compiled on its own at -O0 (nothing inlined across a
# call, nothing dropped) into a private temp dir. nm then gives, per object,
# the global functions it defines (T) and the symbols it uses but does not
# define (U). An arrow A -> B means: A uses a non-static function that B
# defines (pr_* of the core, mc_* of proctor-mcp in csrc/mcp/). Static
# functions, static inline helpers in headers and variables make no arrows.
# The same arrows between folders (csrc/base, csrc/engine, ...; the top-level
# csrc/*.c count as the folder ".") make the folder graph.
#
# Printed: every arrow with the functions it stands for, the strongly
# connected components (circles) of files and of folders, and the C files
# over 800 lines.
#
#   scripts/callgraph.sh           print
#   scripts/callgraph.sh --check   print, and fail when a circle has more than
#                                  three files or spans two folders, when the
#                                  folders form a circle, or a C file is over
#                                  800 lines
#
# Environment: CC (default cc), PYTHON (default /usr/bin/python3),
# CALLGRAPH_CFLAGS (include flags, with absolute paths: the compiler runs in a
# temp dir; default: the checkout's csrc and LuaJIT's headers).
set -euo pipefail
cd "$(dirname "$0")/.."
CC=${CC:-cc}
PYTHON=${PYTHON:-/usr/bin/python3}
LUA_INC=$(pkg-config --cflags luajit 2>/dev/null || echo -I/usr/include/luajit-2.1)
CFLAGS_CG=${CALLGRAPH_CFLAGS:--I$PWD/csrc $LUA_INC}
check=0
[ "${1:-}" = "--check" ] && check=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

mapfile -t files < <(find csrc -name '*.c' | sort)
# One compiler run per folder (its files' names are unique there), two
# folders at a time, each into a directory of its own (csrc@engine for
# csrc/engine); then one nm for the definitions and one for the uses of all
# the objects. A compiler, two nm, two awk and a tr for each file cost more
# than the compiling itself on a loaded machine.
# shellcheck disable=SC2016,SC2086
printf '%s\n' "${files[@]%/*}" | sort -u | tr / @ | xargs -P 2 -I{} sh -c '
  root=$1 d=$2; shift 2; mkdir "$0/$d" && cd "$0/$d" || exit 1
  exec "$@" $(find "$root/$(echo "$d" | tr @ /)" -maxdepth 1 -name "*.c")' \
  "$tmp" "$PWD" "{}" "$CC" -O0 -std=c11 -D_GNU_SOURCE -pthread -w $CFLAGS_CG -c
[ "$(find "$tmp" -name '*.o' | wc -l)" -eq "${#files[@]}" ] || { echo "callgraph: compiling failed" >&2; exit 1; }
# nm -A: "<tmp>/csrc@engine/spec.o:<address> T name" -> "D csrc/engine/spec.c name"
{
  nm -A --defined-only -g "$tmp"/*/*.o | awk '$2 == "T" { print "D", $1, $3 }'
  nm -A -u "$tmp"/*/*.o | awk '{ print "U", $1, $NF }'
} | awk -v t="$tmp/" '{ f = substr($2, length(t) + 1); sub(/\.o:.*/, ".c", f); gsub(/@/, "/", f); print $1, f, $3 }' >"$tmp/syms"
wc -l "${files[@]}" | awk '$2 != "total" { print "L", $2, $1 }' >>"$tmp/syms"

"$PYTHON" - "$tmp/syms" "$check" <<'EOF'
import sys, collections, os

syms_path, check = sys.argv[1], sys.argv[2] == "1"
defined, used, lines = {}, collections.defaultdict(set), {}
for line in open(syms_path):
    kind, f, s = line.split()
    if kind == "D":
        defined[s] = f
    elif kind == "U":
        used[f].add(s)
    else:
        lines[f] = int(s)

files = sorted(lines)
edges = collections.defaultdict(lambda: collections.defaultdict(set))
for f in files:
    for s in used[f]:
        g = defined.get(s)
        if g and g != f and s.startswith(("pr_", "mc_")):
            edges[f][g].add(s)

def folder(f):
    d = os.path.dirname(f)
    return "." if d == "csrc" else d[len("csrc/"):]

def sccs(nodes, succ):
    """Tarjan's algorithm; components in reverse topological order."""
    index, low, on, stack, out, n = {}, {}, set(), [], [], [0]
    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1
        stack.append(v); on.add(v)
        for w in sorted(succ.get(v, ())):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            out.append(sorted(comp))
    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index: visit(v)
    return out

print("# file graph: A -> B when A uses a non-static pr_*/mc_* function defined in B")
for f in files:
    for g in sorted(edges[f]):
        print(f"{f} -> {g}: {' '.join(sorted(edges[f][g]))}")

bad = []
print("\n# circles of files (strongly connected components with more than one file)")
comps = [c for c in sccs(files, edges) if len(c) > 1]
for c in sorted(comps, key=lambda c: (-len(c), c)):
    print(f"{len(c)} files: {' '.join(c)}")
    if len(c) > 3:
        bad.append(f"a circle of {len(c)} files")
    if len({folder(f) for f in c}) > 1:
        bad.append(f"a circle across folders: {' '.join(c)}")
if not comps:
    print("none")

fedges = collections.defaultdict(set)
for f in files:
    for g in edges[f]:
        if folder(f) != folder(g):
            fedges[folder(f)].add(folder(g))
folders = sorted({folder(f) for f in files})
print("\n# folder graph (. = csrc/*.c)")
for d in folders:
    print(f"{d} -> {' '.join(sorted(fedges[d])) or '(nothing)'}")
print("\n# circles of folders")
fcomps = [c for c in sccs(folders, fedges) if len(c) > 1]
for c in fcomps:
    print(f"{len(c)} folders: {' '.join(c)}")
    bad.append(f"a circle of folders: {' '.join(c)}")
if not fcomps:
    print("none")

print("\n# C files over 800 lines")
big = [f for f in files if lines[f] > 800]
for f in big:
    print(f"{lines[f]} {f}")
    bad.append(f"{f} has {lines[f]} lines")
if not big:
    print("none")

if check and bad:
    print("\ncallgraph: " + "; ".join(bad), file=sys.stderr)
    sys.exit(1)
EOF
