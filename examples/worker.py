#!/usr/bin/python3
"""examples/worker.py — a proctor worker speaking JSON lines on stdio.

Protocol (doc *proctor-workers*):
  in   {"id": "7", "type": "request", "payload": {...}}
       {"id": "7", "type": "cancel"}
  out  {"id": "7", "status": "chunk", "chunk": ...}     zero or more, in order
       {"id": "7", "status": "ok", "result": ...}       or
       {"id": "7", "status": "error", "error": "..."}

Payload ops ({"op": ..., ...}):
  echo    {"value": v, "ms": n}       answer v after n ms (default 0): replies come out of order
  stream  {"n": k, "ms": n, "value"}  k chunks {"i": i, "value": v} n ms apart, then ok {"chunks": k}
  fail    {"message": m}              an error reply
  crash   {"code": c}                 exit at once with status c (default 3)
  garbage {}                          print garbage, invalid JSON, a huge line (17 MiB), then ok
  log     {"text": t}                 print t to stderr, ok
  early   {}                          ok {"early": b}: whether a request was already
                                      waiting on stdin before this worker said it was
                                      ready (needs --early-check)
A cancel stops the pending work of that id; nothing is answered for it.

Options: --ready (print {"type": "ready"} first), --ready-stderr (print
"worker listening" on stderr when ready), --start-delay MS, --crash-at-start,
--pid-file PATH (write the pid, for tests that kill it), --ignore-cancel
(answer canceled and timed-out work anyway, for tests of proctor's side),
--early-check (look at stdin just before saying ready, for op "early").

Standard library only; run with /usr/bin/python3.
"""
import heapq
import json
import os
import select
import sys
import time

out = sys.stdout.buffer
pending = {}  # id -> generator state for timed/streamed work
timers = []  # heap of (due, seq, id)
seq = 0
ignore_cancel = False
early = None  # --early-check: was stdin readable before the worker said it was ready?


def now_ms():
    return time.monotonic() * 1000.0


def emit(obj):
    out.write(json.dumps(obj, separators=(",", ":")).encode() + b"\n")


def schedule(rid, due):
    global seq
    seq += 1
    heapq.heappush(timers, (due, seq, rid))


def step(rid):
    """Advance the work of request rid (a timer fired)."""
    w = pending.get(rid)
    if w is None:
        return  # canceled
    if w["op"] == "echo":
        del pending[rid]
        emit({"id": rid, "status": "ok", "result": w["value"]})
    elif w["op"] == "stream":
        if w["i"] < w["n"]:
            emit({"id": rid, "status": "chunk", "chunk": {"i": w["i"], "value": w["value"]}})
            w["i"] += 1
            schedule(rid, now_ms() + w["ms"])
        else:
            del pending[rid]
            emit({"id": rid, "status": "ok", "result": {"chunks": w["n"]}})


def handle(line):
    try:
        msg = json.loads(line)
    except ValueError:
        sys.stderr.write("worker.py: not JSON: %r\n" % line[:80])
        return
    rid = msg.get("id")
    if msg.get("type") == "cancel":
        if not ignore_cancel:
            pending.pop(rid, None)
        return
    if msg.get("type") != "request":
        return
    p = msg.get("payload")
    op = p.get("op", "echo") if isinstance(p, dict) else "echo"
    if op == "echo":
        value = p.get("value") if isinstance(p, dict) else p
        ms = p.get("ms", 0) if isinstance(p, dict) else 0
        if ms <= 0:
            emit({"id": rid, "status": "ok", "result": value})
        else:
            pending[rid] = {"op": "echo", "value": value}
            schedule(rid, now_ms() + ms)
    elif op == "stream":
        pending[rid] = {"op": "stream", "i": 0, "n": int(p.get("n", 3)), "ms": p.get("ms", 0),
                        "value": p.get("value")}
        schedule(rid, now_ms())
    elif op == "fail":
        emit({"id": rid, "status": "error", "error": p.get("message", "failed")})
    elif op == "crash":
        out.flush()
        os._exit(int(p.get("code", 3)))
    elif op == "garbage":
        out.write(b"this is not json at all\n")
        out.write(b"\x00\xff\xfe binary \x1b[31m garbage\n")
        out.write(b'{"id": "unterminated", "status": \n')
        out.write(b"[1, 2, 3]\n")
        out.write(b'{"no": "id"}\n')
        out.write(b"x" * (17 << 20) + b"\n")
        emit({"id": rid, "status": "ok", "result": "after garbage"})
    elif op == "early":
        emit({"id": rid, "status": "ok", "result": {"early": early}})
    elif op == "log":
        sys.stderr.write(str(p.get("text", "")) + "\n")
        sys.stderr.flush()
        emit({"id": rid, "status": "ok", "result": True})
    else:
        emit({"id": rid, "status": "error", "error": "unknown op %s" % op})


def main():
    global ignore_cancel, early
    args = sys.argv[1:]
    ignore_cancel = "--ignore-cancel" in args
    if "--crash-at-start" in args:
        sys.stderr.write("worker.py: crashing at start\n")
        sys.exit(2)
    if "--pid-file" in args:
        with open(args[args.index("--pid-file") + 1], "w") as f:
            f.write(str(os.getpid()))
    if "--start-delay" in args:
        time.sleep(float(args[args.index("--start-delay") + 1]) / 1000.0)
    if "--early-check" in args:
        early = bool(select.select([sys.stdin.fileno()], [], [], 0)[0])
    if "--ready" in args:
        emit({"type": "ready"})
    if "--ready-stderr" in args:
        sys.stderr.write("worker listening\n")
        sys.stderr.flush()
    out.flush()
    fd = sys.stdin.fileno()
    buf = b""
    while True:
        timeout = None
        if timers:
            timeout = max(0.0, (timers[0][0] - now_ms()) / 1000.0)
        r, _, _ = select.select([fd], [], [], timeout)
        if r:
            data = os.read(fd, 1 << 16)
            if not data:
                break
            buf += data
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.strip():
                    handle(line)
        t = now_ms()
        while timers and timers[0][0] <= t:
            _, _, rid = heapq.heappop(timers)
            step(rid)
        out.flush()


if __name__ == "__main__":
    main()
