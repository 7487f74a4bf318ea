#!/usr/bin/python3
"""tests/fuzz/make_corpus_worker.py — write the seed corpus for build/fuzz_worker.

Each file is one control byte (bit 0: 0 = JSON lines, 1 = msgpack-rpc;
bits 1-6: feed chunk size - 1; bit 7: all at once) followed by what a worker
writes on stdout, with the secrets of tests/fuzz/fuzz_worker.c in it, as
Python's json and msgpack modules write them. Run from the repository root;
rewrites tests/fuzz/corpus-worker/seed-*.
"""
import json
import os

import msgpack

S = ["hunter2-Zq9", 'q"u\\o\te', "multi\nline\nkey", "\u00e9t\u00e9-\U0001F600", "1234567", "a/b</c>"]
J = lambda o, **kw: (json.dumps(o, **kw) + "\n").encode()
P = lambda o: msgpack.packb(o, use_bin_type=True)

jsonl = {
    "ok": b"".join(J({"id": str(i), "status": "ok", "result": {"v": s, s: [s, "x" + s]}}) for i, s in enumerate(S)),
    "raw-utf8": b"".join(J({"id": "1", "status": "ok", "result": s}, ensure_ascii=False) for s in S),
    "chunks": b"".join(J({"id": "2", "status": "chunk", "chunk": {"i": i, "value": s}}) for i, s in enumerate(S)),
    "errors": b"".join(J({"id": "3", "status": "error", "error": "bad " + s}) for s in S)
    + J({"id": "4", "status": "error", "error": {"detail": S[1]}}),
    "numbers": J({"id": "5", "status": "ok", "result": [1234567, 12345678, 0.1234567, -1234567e3]}),
    "ready-stray": J({"type": "ready"}) + b"not json " + S[0].encode() + b"\n" + J([S[2]]) + b"{\"id\": \n",
    "escaped-slash": b'{"id":"6","status":"ok","result":"a\\/b<\\/c>"}\n{"id":"7","status":"ok","result":"\\u0068unter2-Zq9"}\n',
    "crlf": b'{"id":"8","status":"ok","result":"x"}\r\n' + S[2].replace("\n", "\r\n").encode() + b"\r\n",
}
mp = {
    "replies": b"".join(P([1, i, None, {"v": s, s: [s]}]) for i, s in enumerate(S)),
    "errors": b"".join(P([1, i, "bad " + s, None]) for i, s in enumerate(S)) + P([1, 9, {"e": S[3]}, None]),
    "chunks": b"".join(P([2, "proctor_chunk", [i, s]]) for i, s in enumerate(S)) + P([2, "proctor_ready", []]),
    "bin-and-ints": P([1, 1, None, [S[0].encode(), 1234567, 12345678, -1234567]]),
    "request-from-worker": P([0, 77, "nvim_get_api_info", [S[0]]]) + P([1, 2, None, "after"]),
    "garbage": b"\xc1\xc1" + P([1, 3, None, S[1]]),
    "truncated": P([1, 4, None, S[0] * 3])[:-4],
}
os.makedirs("tests/fuzz/corpus-worker", exist_ok=True)
for proto, seeds in ((0, jsonl), (1, mp)):
    for name, body in seeds.items():
        for ctl in (0x80, 0x00, 0x0c):  # all at once, byte by byte, 7-byte chunks
            with open("tests/fuzz/corpus-worker/seed-%s-%s-%02x" % ("mp" if proto else "jsonl", name, ctl | proto), "wb") as f:
                f.write(bytes([ctl | proto]) + body)
