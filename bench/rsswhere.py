#!/usr/bin/python3
"""bench/rsswhere.py — where a process's resident memory is at its peak.

Run by hand (not by bench/run):

    bench/rsswhere.py [--every MS] [--json FILE] -- COMMAND ARGS...

starts COMMAND, reads /proc/PID/smaps every MS milliseconds (default 10)
while it runs, and prints, for the sample with the most resident memory, the
resident KiB by kind of mapping, beside VmHWM read at the last sample. Kinds:

  [heap]            the main thread's malloc heap (brk)
  arena             a glibc malloc arena of another thread (an anonymous rw
                    mapping at a 64 MiB boundary, the rest of its 64 MiB
                    reserved ---p): the engine thread's, a writer thread's...
  thread stack      an anonymous rw mapping just above a small ---p guard
  jit code          anonymous r-x mappings (LuaJIT's machine code)
  anon other        every other anonymous mapping: malloc's mmap'd blocks (at
                    or over its mmap threshold) and LuaJIT's own heap
  <file name>       pages of a mapped file (the executable, each .so)
  [stack] ...       the kernel's named mappings

A sampler reads smaps between the process's own steps, so a peak shorter
than MS may be missed; VmHWM is the true peak. Prints JSON with --json.
"""
import json
import os
import subprocess
import sys
import time

ARENA = 64 << 20


def parse(pid):
    maps = []
    cur = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if "-" in parts[0] and len(parts) >= 5 and not parts[0].endswith(":"):
                lo, hi = (int(x, 16) for x in parts[0].split("-"))
                cur = {"lo": lo, "hi": hi, "perm": parts[1],
                       "name": parts[5] if len(parts) > 5 else "", "rss": 0}
                maps.append(cur)
            elif parts[0] == "Rss:" and cur is not None:
                cur["rss"] = int(parts[1])
    return maps


def kinds(maps):
    out = {}
    for i, m in enumerate(maps):
        if m["rss"] == 0:
            continue
        name = m["name"]
        prev = maps[i - 1] if i > 0 else None
        nxt = maps[i + 1] if i + 1 < len(maps) else None
        if name.startswith("["):
            k = name
        elif name:
            k = os.path.basename(name)
        elif "x" in m["perm"]:
            k = "jit code"
        elif m["lo"] % ARENA == 0 and nxt and nxt["lo"] == m["hi"] and nxt["perm"].startswith("---") \
                and nxt["hi"] - m["lo"] <= ARENA:
            k = "arena"
        elif prev and prev["hi"] == m["lo"] and prev["perm"].startswith("---") \
                and prev["hi"] - prev["lo"] <= 64 << 10 and not prev["name"]:
            k = "thread stack"
        else:
            k = "anon other"
        out[k] = out.get(k, 0) + m["rss"]
    return out


def status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return None


def main():
    args = sys.argv[1:]
    every, jpath = 0.010, None
    while args and args[0] != "--":
        if args[0] == "--every":
            every = float(args[1]) / 1000
            args = args[2:]
        elif args[0] == "--json":
            jpath = args[1]
            args = args[2:]
        else:
            sys.exit(__doc__)
    cmd = args[1:]
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL)
    best, best_total, hwm, n = {}, -1, None, 0
    while p.poll() is None:
        try:
            k = kinds(parse(p.pid))
            h = status(p.pid, "VmHWM")
        except (OSError, ValueError, IndexError):
            break
        n += 1
        hwm = h or hwm
        total = sum(k.values())
        if total > best_total:
            best, best_total = k, total
        time.sleep(every)
    p.wait()
    res = {"samples": n, "peak_sample_kib": best_total, "vmhwm_kib": hwm, "kinds": best,
           "exit": p.returncode}
    if jpath:
        with open(jpath, "w") as f:
            json.dump(res, f)
    print(f"samples {n}, VmHWM {hwm} KiB, largest sample {best_total} KiB:")
    for k, v in sorted(best.items(), key=lambda kv: -kv[1]):
        if v >= 64:
            print(f"  {v / 1024:8.1f} MiB  {k}")


if __name__ == "__main__":
    main()
