#!/usr/bin/python3
"""tests/fuzz/make_corpus.py — write the seed corpus for build/fuzz_rpc.

Each file is: one control byte (low 6 bits: feed chunk size - 1; bit 6: feed
all at once) followed by a stream of msgpack-rpc messages, encoded by
python3-msgpack. Run from the repository root; rewrites tests/fuzz/corpus/seed-*.
"""
import os
import msgpack

P = lambda o: msgpack.packb(o, use_bin_type=True)
req = lambda i, m, *a: P([0, i, m, list(a)])
note = lambda m, *a: P([2, m, list(a)])

seeds = {
    "hello": req(1, "hello", "fuzz") + req(2, "hello") + req(3, "hello", b"bin-name"),
    "flow": req(1, "start", {"cmd": ["echo", "hi"], "stdin": True, "label": "x"})
    + req(2, "subscribe", 1) + req(3, "input", 1, b"yes\n") + req(4, "close_stdin", 1)
    + req(5, "wait", 1, 0) + req(6, "get", 1) + req(7, "read", 1, "stdout", 0, 10)
    + req(8, "cancel", 1) + req(9, "delete", 1) + req(10, "list") + req(11, "purge"),
    "start-shell": req(1, "start", {"cmd": "echo $HOME", "env": {"A": "1", "B": 2}, "cwd": "/",
                                    "pty": True, "cols": 100, "rows": 30, "timeout_ms": 10,
                                    "kill_grace_ms": 5, "clear_env": True, "backpressure": True,
                                    "kill_on_disconnect": True}) + req(2, "resize", 1, 80, 24),
    "subscribe-all": req(1, "subscribe") + req(2, "start", {"cmd": ["true"]}) + req(3, "wait", 1, 5)
    + req(4, "unsubscribe", [1, 2]) + req(5, "unsubscribe"),
    "wait-timeout": req(1, "start", {"cmd": ["sleep", "1"]}) + req(2, "wait", 1, 1) + req(3, "wait", 1),
    "notify": note("start", {"cmd": ["x"]}) + note("wait", 1) + note("nosuch") + req(1, "get", 1),
    "wrong-types": req(1, "get", "x") + req(2, "read", 1, 5) + req(3, "input", 1, 7)
    + req(4, "cancel", 1, "yes") + req(5, "list", {"state": "nope"}) + req(6, "start", {"cmd": []})
    + req(7, "start", {"bogus": 1}) + req(8, "resize", 1, 0, 99999) + req(9, "subscribe", ["a"])
    + req(10, "purge", {"older_than_ms": -1}) + req(11, "start", {"cmd": ["a\x00b"]})
    + req(12, "hello", "") + req(13, "wait", -5) + req(14, "read", 1, "pty", -1, 2.5),
    "unknown": req(1, "nosuch") + req(2, 17, []) + P([0, 3, "get", {"id": 1}]) + req(4, "list", 1),
    "bad-shape": P([1, 2, None, None]) + P([0, -1, "get", [1]]) + P({"a": 1}) + P([9, 9, 9]),
    "garbage": b"\xc1\x00\x01",
    "truncated": req(1, "start", {"cmd": ["echo", "hello world"]})[:-5],
    "oversized-array": b"\x94\x00\x05\xa3get\xdd\xff\xff\xff\xff",
    "oversized-bin": b"\x94\x00\x06\xa5input\x92\x01\xc6\x7f\xff\xff\xff",
    "deep": b"\x94\x00\x07\xa3get" + b"\x91" * 40 + b"\xc0",
    "ext": P([0, 1, "get", [msgpack.ExtType(5, b"abc")]]) + b"\xd4\x01\x02" + b"\xc7\x02\x03ab",
    "floats": req(1, "get", 1.0) + req(2, "wait", 1, 2.5) + req(3, "get", 1e300),
}

os.makedirs("tests/fuzz/corpus", exist_ok=True)
for name, body in seeds.items():
    for ctl in (0x40, 0x00, 0x06):  # all at once, byte by byte, 7-byte chunks
        with open("tests/fuzz/corpus/seed-%s-%02x" % (name, ctl), "wb") as f:
            f.write(bytes([ctl]) + body)
