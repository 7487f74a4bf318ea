#!/usr/bin/python3
"""tests/rpc/test_limits.py — the boundaries of |proctor-rpc-limits|: each
limit is taken exactly, and one past it is refused (ETOOBIG, then the
connection closes), where tests/rpc/test_rpc.py only tries inputs far past
the limits. python3-msgpack encodes; the server runs in the Lua 5.4 host of
test_rpc.py. Prints "PASS rpc/limits_..." / "FAIL rpc/limits_...: why".

    tests/rpc/test_limits.py            (PROCTOR_TEST=word selects by name)
"""
import os
import socket
import sys
import traceback

import msgpack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_rpc import Host, expect  # noqa: E402

MAX_MESSAGE = 4 << 20  # bytes in one incoming message
MAX_ENTRIES = 65536  # array/map entries in one message
MAX_DEPTH = 16  # levels of nesting in one message


def ask(h, payload, timeout=20):
    """Send one message on a fresh connection: ("answer", error, still_open) or ("closed",)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(h.path)
    s.settimeout(timeout)
    try:
        try:
            s.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused while it was still arriving: its answer may be there to read
        up = msgpack.Unpacker(raw=False)
        while True:
            d = s.recv(1 << 16)
            if not d:
                return ("closed",)
            up.feed(d)
            for m in up:
                # is the connection still there? a request that needs no engine work
                try:
                    s.sendall(msgpack.packb([0, 2, "hello", []]))
                    s.settimeout(5)
                    open_after = bool(s.recv(1 << 16))
                except (OSError, socket.timeout):
                    open_after = False
                return ("answer", m[2][0] if m[2] else None, open_after)
    except (BrokenPipeError, ConnectionResetError):
        return ("closed",)
    finally:
        s.close()


def nested(depth):
    """A request whose message has `depth` levels of arrays (the message itself is one)."""
    inner = 0
    for _ in range(depth - 2):
        inner = [inner]
    return msgpack.packb([0, 1, "get", [inner]])


def limits_nesting(h):
    got = ask(h, nested(MAX_DEPTH))
    expect(got == ("answer", "EINVAL", True), "%d levels: %r (a wrong id: EINVAL, the connection stays)" % (MAX_DEPTH, got))
    got = ask(h, nested(MAX_DEPTH + 1))
    expect(got[:2] == ("answer", "ETOOBIG") and not got[2], "%d levels: %r" % (MAX_DEPTH + 1, got))


def limits_entries(h):
    # the message array holds 4 entries, its params array the rest
    got = ask(h, msgpack.packb([0, 1, "get", [None] * (MAX_ENTRIES - 4)]))
    expect(got == ("answer", "EINVAL", True), "%d entries: %r" % (MAX_ENTRIES, got))
    got = ask(h, msgpack.packb([0, 1, "get", [None] * (MAX_ENTRIES - 3)]))
    expect(got[:2] == ("answer", "ETOOBIG") and not got[2], "%d entries: %r" % (MAX_ENTRIES + 1, got))
    # a map's entries count twice (a key and a value)
    got = ask(h, msgpack.packb([0, 1, "get", [{i: None for i in range((MAX_ENTRIES - 4) // 2 + 1)}]]))
    expect(got[:2] == ("answer", "ETOOBIG"), "a map of %d pairs: %r" % ((MAX_ENTRIES - 4) // 2 + 1, got))


def limits_message_size(h):
    def sized(total):
        probe = len(msgpack.packb([0, 1, "input", [999999, b"x" * 70000]])) - 70000
        msg = msgpack.packb([0, 1, "input", [999999, b"x" * (total - probe)]])
        expect(len(msg) == total, "built %d bytes, wanted %d" % (len(msg), total))
        return msg
    got = ask(h, sized(MAX_MESSAGE))
    expect(got == ("answer", "ENOENT", True), "%d bytes: %r (no such execution: ENOENT)" % (MAX_MESSAGE, got))
    got = ask(h, sized(MAX_MESSAGE + 1))
    expect(got[:2] == ("answer", "ETOOBIG") and not got[2], "%d bytes: %r" % (MAX_MESSAGE + 1, got))


TESTS = [limits_nesting, limits_entries, limits_message_size]


def main():
    only = [w for w in os.environ.get("PROCTOR_TEST", "").split(",") if w] + sys.argv[1:]
    failed = 0
    h = Host()
    try:
        for fn in TESTS:
            name = "rpc/" + fn.__name__
            if only and not any(o in name for o in only):
                continue
            try:
                fn(h)
                print("PASS " + name, flush=True)
            except Exception as e:  # noqa
                failed += 1
                where = [l.strip() for l in traceback.format_exc().splitlines() if "test_limits.py" in l][-1:]
                print("FAIL %s: %s %s" % (name, str(e).replace("\n", " ")[:400], where), flush=True)
        if not h.alive():
            print("FAIL rpc/limits_host_alive: the host died", flush=True)
            failed += 1
    finally:
        h.stop()
    return failed


if __name__ == "__main__":
    sys.exit(1 if main() else 0)
