#!/usr/bin/python3
# bench/histgen.py FILE N TAIL — a synthetic full history for bench/histload.c:
# N ended records (ids 1..N, ended in the last 100 s), each with TAIL bytes of
# printable stdout kept, in this release's file layout (history.h).
import sys, msgpack, os, time
path, n, tail = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def fnv(b):
    h = 2166136261
    for c in b:
        h = ((h ^ c) * 16777619) & 0xffffffff
    return h
out = bytearray(b"\xb1proctor-history/1")
rnd = os.urandom(tail)
body = bytes((c % 94) + 33 for c in rnd)  # printable
for i in range(1, n + 1):
    t = int(time.time() * 1000) - 100000 + i
    pay = msgpack.packb({"k": "e", "id": i, "cmd": ["sh", "-c", "synthetic"], "cwd": "/tmp", "created": t,
                         "state": "completed", "reason": "exit", "exit": 0, "started": t, "ended": t + 1,
                         "dur": 1, "out": [[0, tail * 3, body]]}, use_bin_type=True)
    out += msgpack.packb([fnv(pay), pay], use_bin_type=True)
open(path, "wb").write(out)
