"""tests/rpc/mpclient.py — a minimal msgpack-rpc client over a raw Unix socket.

Only python3-msgpack does the encoding and decoding; this file just keeps
msgids and separates responses from notifications.
"""
import socket
import time

import msgpack


class RpcError(Exception):
    def __init__(self, err):
        self.err = err
        name = err[0] if isinstance(err, (list, tuple)) and err else err
        super().__init__(repr(err))
        self.name = name


class Client:
    def __init__(self, path, timeout=30):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.unpacker = msgpack.Unpacker(raw=False, max_buffer_size=64 << 20)
        self.msgid = 0
        self.responses = {}
        self.notes = []

    def close(self):
        self.sock.close()

    def send_raw(self, data):
        self.sock.sendall(data)

    def _pump(self, timeout=None):
        """Read once; return False on EOF."""
        if timeout is not None:
            self.sock.settimeout(timeout)
        data = self.sock.recv(1 << 20)
        if not data:
            return False
        self.unpacker.feed(data)
        for msg in self.unpacker:
            if msg[0] == 1:
                self.responses[msg[1]] = msg
            elif msg[0] == 2:
                self.notes.append(msg)
        return True

    def request_async(self, method, *params):
        self.msgid += 1
        self.sock.sendall(msgpack.packb([0, self.msgid, method, list(params)], use_bin_type=True))
        return self.msgid

    def result(self, msgid, timeout=30):
        deadline = time.time() + timeout
        while msgid not in self.responses:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError("no response to %d" % msgid)
            if not self._pump(left):
                raise EOFError("connection closed")
        _, _, err, res = self.responses.pop(msgid)
        if err is not None:
            raise RpcError(err)
        return res

    def request(self, method, *params, timeout=30):
        return self.result(self.request_async(method, *params), timeout)

    def notify(self, method, *params):
        self.sock.sendall(msgpack.packb([2, method, list(params)], use_bin_type=True))

    def next_note(self, timeout=30):
        deadline = time.time() + timeout
        while not self.notes:
            left = deadline - time.time()
            if left <= 0:
                raise TimeoutError("no notification")
            if not self._pump(left):
                raise EOFError("connection closed")
        return self.notes.pop(0)
