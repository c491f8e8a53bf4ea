"""wsclient - a small RFC 6455 WebSocket client for the tests (stdlib only).

    ws = wsclient.connect(srv, "/v1/sandboxes/B/terminals/T")            # Authorization header
    ws = wsclient.connect(srv, path, token=None, protocols=["agentbox.terminal.v1", "bearer." + tok])
    if ws.status != 101: ...                      # ws.head, ws.body hold the HTTP answer
    ws.send_binary(b"echo hi\\n")
    out = ws.read_until(lambda o: b"hi" in o, timeout=10)   # bytes of binary frames so far
    ws.texts                                      # text messages received (decoded JSON when it parses)
    ws.close_code                                 # the server's close code once it sent one

Frames from the client are masked (as RFC 6455 requires); pings are answered.
"""
import base64
import hashlib
import json
import os
import socket
import struct
import time

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class WS:
    def __init__(self, host, port, path, headers=None, protocols=None, timeout=10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.key = base64.b64encode(os.urandom(16)).decode()
        lines = ["GET %s HTTP/1.1" % path, "Host: %s:%d" % (host, port), "Upgrade: websocket",
                 "Connection: Upgrade", "Sec-WebSocket-Key: %s" % self.key, "Sec-WebSocket-Version: 13"]
        if protocols:
            lines.append("Sec-WebSocket-Protocol: %s" % ", ".join(protocols))
        for k, v in (headers or {}).items():
            lines.append("%s: %s" % (k, v))
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        self.buf = bytearray()
        self._off = 0
        self.output = bytearray()  # binary frames, concatenated
        self.texts = []         # text frames
        self.close_code = None  # the server's close frame
        self.close_reason = ""
        self.eof = False
        self.head, self.status, self.headers, self.body = "", -1, {}, b""
        self._read_head(timeout)

    def _read_head(self, timeout):
        end = time.monotonic() + timeout
        while b"\r\n\r\n" not in self.buf and time.monotonic() < end:
            try:
                d = self.sock.recv(65536)
            except socket.timeout:
                break
            if not d:
                break
            self.buf += d
        head, sep, rest = bytes(self.buf).partition(b"\r\n\r\n")
        if not sep:
            return
        self.head = head.decode("latin-1")
        first = self.head.split("\r\n")[0].split(" ")
        self.status = int(first[1]) if len(first) > 1 and first[1].isdigit() else -1
        for line in self.head.split("\r\n")[1:]:
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        self.buf = bytearray(rest)
        if self.status != 101:
            # the body of an error answer (Content-Length)
            n = int(self.headers.get("content-length", "0") or 0)
            while len(self.buf) < n and time.monotonic() < end:
                d = self.sock.recv(65536)
                if not d:
                    break
                self.buf += d
            self.body = bytes(self.buf[:n])

    def accept_ok(self):
        want = base64.b64encode(hashlib.sha1((self.key + GUID).encode()).digest()).decode()
        return self.headers.get("sec-websocket-accept") == want

    def json_body(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    # ---- sending ----
    def send_frame(self, op, data, fin=True, mask=True, rsv=0):
        if isinstance(data, str):
            data = data.encode()
        b0 = (0x80 if fin else 0) | (rsv << 4) | op
        n = len(data)
        mbit = 0x80 if mask else 0
        if n < 126:
            hdr = struct.pack("!BB", b0, mbit | n)
        elif n < 65536:
            hdr = struct.pack("!BBH", b0, mbit | 126, n)
        else:
            hdr = struct.pack("!BBQ", b0, mbit | 127, n)
        if mask:
            key = os.urandom(4)
            data = bytes(c ^ key[i & 3] for i, c in enumerate(data)) if n < 65536 else _mask_big(data, key)
            hdr += key
        self.sock.sendall(hdr + data)

    def send_binary(self, data):
        self.send_frame(2, data)

    def send_text(self, s):
        self.send_frame(1, s)

    def send_json(self, obj):
        self.send_frame(1, json.dumps(obj))

    def close(self, code=1000):
        try:
            self.send_frame(8, struct.pack("!H", code))
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass

    def drop(self):
        """Closes the TCP connection without a close frame."""
        try:
            self.sock.close()
        except OSError:
            pass

    # ---- receiving ----
    def _frame(self):
        """One frame from buf (at self._off), or None."""
        b = self.buf
        o0 = self._off
        if len(b) - o0 < 2:
            return None
        b = memoryview(b)[o0:]
        op = b[0] & 0x0F
        n = b[1] & 0x7F
        off = 2
        if b[1] & 0x80:
            raise ValueError("server frame is masked")
        if n == 126:
            if len(b) < 4:
                return None
            n = struct.unpack("!H", b[2:4])[0]
            off = 4
        elif n == 127:
            if len(b) < 10:
                return None
            n = struct.unpack("!Q", b[2:10])[0]
            off = 10
        if len(b) < off + n:
            return None
        data = bytes(b[off:off + n])
        self._off += off + n
        return op, data

    def pump(self, timeout=0.5):
        """Reads what arrives within timeout; returns False at EOF."""
        if self.eof:
            return False
        self.sock.settimeout(timeout)
        try:
            d = self.sock.recv(65536)
        except socket.timeout:
            d = None
        except OSError:
            d = b""
        if d == b"":
            self.eof = True
        elif d:
            self.buf += d
        self._off = 0
        while True:
            f = self._frame()
            if not f:
                break
            op, data = f
            if op == 2:
                self.output += data
            elif op == 1:
                try:
                    self.texts.append(json.loads(data))
                except ValueError:
                    self.texts.append(data.decode("utf-8", "replace"))
            elif op == 9:
                try:
                    self.send_frame(10, data)
                except OSError:
                    pass
            elif op == 8:
                self.close_code = struct.unpack("!H", data[:2])[0] if len(data) >= 2 else 1005
                self.close_reason = data[2:].decode("utf-8", "replace")
        del self.buf[:self._off]
        self._off = 0
        return not self.eof

    def read_until(self, pred, timeout=10.0):
        end = time.monotonic() + timeout
        while not pred(self.output) and time.monotonic() < end:
            if not self.pump(min(0.5, max(0.01, end - time.monotonic()))) and not self.buf:
                break
        return self.output

    def wait_close(self, timeout=10.0):
        end = time.monotonic() + timeout
        while self.close_code is None and time.monotonic() < end:
            if not self.pump(0.5) and self.close_code is None:
                break
        return self.close_code


def _mask_big(data, key):
    n = len(data)
    k = (key * (n // 4 + 1))[:n]
    return (int.from_bytes(data, "big") ^ int.from_bytes(k, "big")).to_bytes(n, "big")


def connect(srv, path, token="__server__", protocols=None, headers=None, timeout=10.0):
    """A WebSocket to srv (an abserver.Server). token: the server's by default
    (sent as Authorization unless protocols carry it), None for none."""
    hdrs = dict(headers or {})
    tok = srv.token if token == "__server__" else token
    if tok and not protocols:
        hdrs["Authorization"] = "Bearer %s" % tok
    return WS(srv.host, srv.port, path, hdrs, protocols, timeout)
