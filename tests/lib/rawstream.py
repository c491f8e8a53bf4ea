"""Long-lived HTTP answers on raw sockets, for tests that need to see the
server end a stream (an event stream, an exec stream, a relayed request):
"ended" is the server closing the connection, whatever the stream's format.
Stdlib only."""
import json
import socket
import struct
import time


def open_stream(srv, method, path, token, body=None, headers=None, timeout=10.0):
    """Sends one request to srv (an abserver.Server) on a socket of its own
    and reads the answer's head. Returns (socket, status); status -1 when no
    head came within timeout."""
    s = socket.create_connection((srv.host, srv.port), timeout=timeout)
    data = json.dumps(body).encode() if body is not None else b""
    lines = ["%s %s HTTP/1.1" % (method, path), "Host: %s:%d" % (srv.host, srv.port)]
    if token:
        lines.append("Authorization: Bearer %s" % token)
    if body is not None:
        lines += ["Content-Type: application/json", "Content-Length: %d" % len(data)]
    for k, v in (headers or {}).items():
        lines.append("%s: %s" % (k, v))
    s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
    return s, _read_status(s, timeout)


def open_envd_stream(srv, box, access_token, method, msg, timeout=10.0):
    """An E2B envd server-streaming call (Connect, application/connect+json:
    one enveloped message) for box with its X-Access-Token, on a socket of
    its own. method: e.g. "process.Process/Start". Returns (socket, status)
    as open_stream does."""
    data = json.dumps(msg).encode()
    body = struct.pack(">BI", 0, len(data)) + data
    s = socket.create_connection((srv.host, srv.port), timeout=timeout)
    lines = ["POST /e2b/envd/%s HTTP/1.1" % method, "Host: %s:%d" % (srv.host, srv.port),
             "E2b-Sandbox-Id: %s" % box, "X-Access-Token: %s" % access_token,
             "Content-Type: application/connect+json", "Connect-Protocol-Version: 1",
             "Content-Length: %d" % len(body)]
    s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    return s, _read_status(s, timeout)


def _read_status(s, timeout):
    buf = b""
    end = time.monotonic() + timeout
    while b"\r\n\r\n" not in buf and time.monotonic() < end:
        try:
            d = s.recv(4096)
        except socket.timeout:
            break
        if not d:
            break
        buf += d
    first = buf.split(b"\r\n", 1)[0].split(b" ")
    return int(first[1]) if len(first) > 1 and first[1].isdigit() else -1


def closed_by_server(s, timeout):
    """True when the peer closes s (EOF or reset) within timeout seconds;
    data on the way is read and dropped."""
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return False
        s.settimeout(min(left, 0.5))
        try:
            if not s.recv(65536):
                return True
        except socket.timeout:
            continue
        except OSError:
            return True
