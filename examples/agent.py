#!/usr/bin/python3
"""examples/agent.py — drive proctor from outside the editor, the way an AI
coding agent would. Needs only Debian's python3 and python3-msgpack: run it
directly, its first line names /usr/bin/python3 (a `python3` earlier on PATH,
a virtualenv's, may lack msgpack).

    examples/agent.py [SOCKET]      (default: $PROCTOR_SOCKET)

Inside a proctor execution PROCTOR_SOCKET is already set, so
`:Proctor run examples/agent.py` works as is.

It runs a command and streams its output, answers an interactive prompt,
cancels a long-running command, and prints the final records. Everything it
starts is visible (and stoppable) in the editor's list view, owned by
"agent.py".
"""
import os
import socket
import sys
import time

import msgpack


class Proctor:
    """A minimal msgpack-rpc client: requests get responses by msgid; the
    server's notifications (`output`, `state`) are handed to on_note."""

    def __init__(self, path, on_note):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.unpacker = msgpack.Unpacker(raw=False)
        self.on_note = on_note
        self.msgid = 0
        self.answers = {}

    def call(self, method, *params):
        self.msgid += 1
        msgid = self.msgid
        self.sock.sendall(msgpack.packb([0, msgid, method, list(params)], use_bin_type=True))
        while msgid not in self.answers:
            self.pump()
        err, result = self.answers.pop(msgid)
        if err is not None:  # errors are [name, message], e.g. ["ENOENT", "no such execution 9"]
            raise RuntimeError("%s: %s" % (err[0], err[1]))
        return result

    def pump(self, timeout=None):
        """Read what is there (waiting at most `timeout` seconds; None: block)."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return
        if not data:
            raise EOFError("proctor closed the connection")
        self.unpacker.feed(data)
        for msg in self.unpacker:
            if msg[0] == 1:  # [1, msgid, error, result]
                self.answers[msg[1]] = (msg[2], msg[3])
            elif msg[0] == 2:  # [2, method, [event]]
                self.on_note(msg[1], msg[2][0])


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("PROCTOR_SOCKET")
    if not path:
        sys.exit("agent.py: no socket (pass it, or run inside proctor where PROCTOR_SOCKET is set)")

    output = {}  # id -> bytes seen so far
    ended = {}   # id -> terminal state event

    def on_note(kind, ev):
        if kind == "output":
            if ev["missed"]:
                print("[%d] ... %d bytes missed ..." % (ev["id"], ev["missed"]))
            output[ev["id"]] = output.get(ev["id"], b"") + ev["data"]
            for line in ev["data"].decode(errors="replace").splitlines():
                print("[%d %s] %s" % (ev["id"], ev["stream"], line))
        elif ev["state"] in ("completed", "failed", "canceled", "timed_out"):
            ended[ev["id"]] = ev

    p = Proctor(path, on_note)
    info = p.call("hello", "agent.py")
    print("connected to %s %s as session %d" % (info["server"], info["version"], info["session"]))
    p.call("subscribe")  # nil: every execution of this session, including later ones

    # 1. run a command and stream its output
    build = p.call("start", {"cmd": ["sh", "-c", "echo building; for i in 1 2 3; do echo step $i; sleep 0.1; done"],
                             "label": "build"})
    while build not in ended:
        p.pump()

    # 2. a command that asks a question: answer it when the prompt shows up
    ask = p.call("start", {"cmd": ["sh", "-c", 'printf "Continue? [y/N] "; read a; echo "you said: $a"'],
                           "stdin": True, "label": "question"})
    while b"Continue?" not in output.get(ask, b""):
        p.pump()
    p.call("input", ask, b"y\n")
    print("answered the prompt")
    while ask not in ended:
        p.pump()

    # 3. a long one: give it half a second, then cancel it (the kill reaches its whole tree)
    long_id = p.call("start", {"cmd": ["sh", "-c", "echo working for a minute; sleep 60"], "label": "long"})
    deadline = time.time() + 0.5
    while time.time() < deadline:
        p.pump(0.05)
    print("cancel ->", p.call("cancel", long_id))
    record = p.call("wait", long_id, 10000)  # answers once it ended, after all its notifications

    # 4. the final records
    for r in p.call("list"):
        print("id=%d label=%s state=%s reason=%s exit_code=%s signal=%s duration_ms=%d stdout_bytes=%d"
              % (r["id"], r.get("label"), r["state"], r.get("reason"), r.get("exit_code"),
                 r.get("signal"), r["duration_ms"], r["bytes"].get("stdout", 0)))
    ok = (ended[build]["state"] == "completed" and ended[ask]["state"] == "completed"
          and b"you said: y" in output[ask] and record["state"] == "canceled")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
