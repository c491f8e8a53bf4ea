"""boxhttp.py PORT - the small HTTP server the port tests run inside a box
(stdlib only). Routes:
  /echo...      JSON: method, target, headers (list of pairs), body length and sha256
  /mirror       the request body back, byte for byte (Content-Length);
                ?delay=S: the body is read only after S seconds
  /stream       chunked: "first\\n", a pause of 3 s, "second\\n"
  /big?n=N      chunked: N bytes of a known pattern, in 64 KiB pieces
  /slow?s=S     the head after S seconds
  /ws           a WebSocket echo (text and binary), closes on a close frame; its
                first message (text) is {"headers": [...]} of the upgrade request
  /raw?kind=K   a hand-made answer (RAW below), then the connection closes
Every request's target is appended to /tmp/targets.log.
Request bodies may be chunked or Content-Length."""
import base64
import hashlib
import http.server
import json
import socketserver
import struct
import sys
import time
import urllib.parse


def pattern(n):
    block = bytes(range(256)) * 256
    out = bytearray()
    while len(out) < n:
        out += block
    return bytes(out[:n])


RAW = {
    # a bare CR in a header value: a second header if anything passed it on as is
    "cr": b"HTTP/1.1 200 OK\r\nX-A: a\rSet-Cookie: evil=1\r\nContent-Length: 2\r\n\r\nok",
    # more bytes than Content-Length: the rest must not reach the client as an answer
    "overlong": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirstHTTP/1.1 200 OK\r\nX-Smuggled: 1\r\n"
                b"Content-Length: 4\r\n\r\nevil",
    # both framings: chunked wins (RFC 9112 6.3)
    "both": b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n0\r\n\r\n",
    "garbage": b"SSH-2.0-OpenSSH_9.0\r\n\r\n",
}


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def body(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def send(self, status, data, ctype="application/json", extra=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in extra:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def route(self):
        u = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(u.query))
        with open("/tmp/targets.log", "a") as f:
            f.write(self.path + "\n")
        if u.path == "/raw":
            self.body()
            self.wfile.write(RAW[q.get("kind", "garbage")])
            self.wfile.flush()
            self.close_connection = True
            return
        if u.path == "/ws" and self.headers.get("Upgrade", "").lower() == "websocket":
            return self.ws()
        if u.path == "/mirror" and "delay" in q:  # a server slow to take the body
            time.sleep(float(q["delay"]))
        b = self.body()
        if u.path == "/mirror":
            return self.send(200, b, "application/octet-stream")
        if u.path == "/slow":
            time.sleep(float(q.get("s", "5")))
            return self.send(200, b"slow done\n", "text/plain")
        if u.path in ("/stream", "/big"):
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            if u.path == "/stream":
                self.chunk(b"first\n")
                time.sleep(3)
                self.chunk(b"second\n")
            else:
                data = pattern(int(q.get("n", "1000000")))
                for i in range(0, len(data), 65536):
                    self.chunk(data[i:i + 65536])
            self.wfile.write(b"0\r\n\r\n")
            return
        j = {"method": self.command, "target": self.path, "headers": [[k, v] for k, v in self.headers.items()],
             "body_len": len(b), "body_sha256": hashlib.sha256(b).hexdigest()}
        self.send(200, json.dumps(j).encode(), extra=[("X-Box-Echo", "yes")])

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = route

    def ws(self):
        key = self.headers["Sec-WebSocket-Key"]
        acc = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
        self.wfile.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                         b"Sec-WebSocket-Accept: " + acc + b"\r\n\r\n")
        # first, a text frame: the request's headers as the box got them
        hj = json.dumps({"headers": [[k, v] for k, v in self.headers.items()]}).encode()
        self.wfile.write(struct.pack("!BBH", 0x81, 126, len(hj)) + hj)
        self.wfile.flush()
        r = self.rfile
        while True:
            h = r.read(2)
            if len(h) < 2:
                break
            op, n = h[0] & 0x0F, h[1] & 0x7F
            if n == 126:
                n = struct.unpack("!H", r.read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", r.read(8))[0]
            mask = r.read(4) if h[1] & 0x80 else b"\0\0\0\0"
            data = bytes(c ^ mask[i & 3] for i, c in enumerate(r.read(n)))
            if n < 126:
                hdr = struct.pack("!BB", 0x80 | op, n)
            elif n < 65536:
                hdr = struct.pack("!BBH", 0x80 | op, 126, n)
            else:
                hdr = struct.pack("!BBQ", 0x80 | op, 127, n)
            self.wfile.write(hdr + data)
            self.wfile.flush()
            if op == 8:
                break
        self.close_connection = True


class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
