#!/usr/bin/python3
"""tests/worker/mp_worker.py — a msgpack-rpc worker for the worker tier.

Requests [0, msgid, method, params]; answers [1, msgid, err, result];
partial results as notifications ["proctor_chunk", [msgid, value]];
interruption: notification ["proctor_cancel", [msgid]]. Sends
["proctor_ready", []] first. Methods: add(a, b), stream(n), sleep(ms),
request(payload) (echo), cancelled_count().
"""
import heapq
import os
import select
import sys
import time

import msgpack

out = sys.stdout.buffer
timers, sleeping, canceled = [], {}, [0]


def send(obj):
    out.write(msgpack.packb(obj, use_bin_type=True))


def main():
    send([2, "proctor_ready", []])
    out.flush()
    up = msgpack.Unpacker(raw=False)
    fd = sys.stdin.fileno()
    while True:
        timeout = max(0.0, timers[0][0] - time.monotonic()) if timers else None
        r, _, _ = select.select([fd], [], [], timeout)
        if r:
            data = os.read(fd, 65536)
            if not data:
                return
            up.feed(data)
            for msg in up:
                if msg[0] == 2 and msg[1] == "proctor_cancel":
                    if sleeping.pop(msg[2][0], None) is not None:
                        canceled[0] += 1
                    continue
                if msg[0] != 0:
                    continue
                _, mid, method, params = msg
                if method == "add":
                    send([1, mid, None, params[0] + params[1]])
                elif method == "stream":
                    for i in range(params[0]):
                        send([2, "proctor_chunk", [mid, i]])
                    send([1, mid, None, "done"])
                elif method == "sleep":
                    sleeping[mid] = True
                    heapq.heappush(timers, (time.monotonic() + params[0] / 1000.0, mid))
                elif method == "request":
                    send([1, mid, None, params[0]])
                elif method == "cancelled_count":
                    send([1, mid, None, canceled[0]])
                else:
                    send([1, mid, "no method " + str(method), None])
        now = time.monotonic()
        while timers and timers[0][0] <= now:
            _, mid = heapq.heappop(timers)
            if sleeping.pop(mid, None):
                send([1, mid, None, "slept"])
        out.flush()


if __name__ == "__main__":
    main()
