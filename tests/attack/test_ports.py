#!/usr/bin/env python3
"""Attacks through the port proxy (docs/api.md "Ports"). Each check passes
only when the attack fails:
- the host's own loopback services are not reached: a server the test runs
  on the host's 127.0.0.1:PORT is not what /v1/sandboxes/{id}/ports/PORT
  answers (the connection is made inside the box's network namespace), and
  it sees no connection;
- another box's port is not reachable through this box's id; an API key of
  another app reaches neither the port nor its public switch;
- a Host header of another box's form does not bypass auth, and a public
  port's host name does not open the API of another box;
- request smuggling: conflicting Content-Length / Transfer-Encoding (and
  two Content-Lengths) are refused before the box sees anything, and the
  smuggled request never reaches the box; an answer longer than its
  Content-Length does not leak into the next answer of a kept-alive
  connection; an answer with both framings is read as chunked;
- header injection: CR/LF cannot be put into what the box receives (an
  escaped CR/LF in the target is refused, 400, before the box sees it; a bare CR in a header is not
  passed on as a line break), and a box cannot inject a header into the
  answer with a bare CR."""
import http.server
import os
import secrets
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib")
TOKEN = "tok-" + secrets.token_hex(8)
KEY_A = "key-a-" + secrets.token_hex(8)
KEY_B = "key-b-" + secrets.token_hex(8)
DOMAIN = "ports.example.test"
h = abserver.ServerHarness(budget=200)
srv = h.start_server(name="portattack", token=TOKEN, config={
    "idle_pause": "1h", "idle_stop": "2h", "ports_domain": DOMAIN, "ports_timeout": "3s",
    "api_keys": [{"key": KEY_A, "app_id": "appa"}, {"key": KEY_B, "app_id": "appb"}]})

# ---- a host service on loopback ---------------------------------------------------------------

SECRET = "HOST-SECRET-" + secrets.token_hex(6)
hits = []


class HostH(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        hits.append(self.path)
        body = SECRET.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


host_srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HostH)
HOST_PORT = host_srv.server_address[1]
threading.Thread(target=host_srv.serve_forever, daemon=True).start()


def make_box(app, chat):
    r = srv.post("/v1/sandboxes", {"app_id": app, "user_id": "u", "chat_id": chat})
    h.eq(r.status, 201, "create a box of %s" % app, r.describe())
    return r.get("id") or "none"


A = make_box("appa", "a")
A2 = make_box("appa", "a2")
BB = make_box("appb", "b")
with open(os.path.join(LIB, "boxhttp.py"), "rb") as f:
    script = f.read()
r = srv.put(srv.file_path(A, "/workspace/boxhttp.py"), script)
h.ok(r.status in (200, 201, 204), "the server script is in box A", r.describe())
r = srv.exec(A, "setsid nohup python3 /workspace/boxhttp.py 8000 >/tmp/srv.log 2>&1 </dev/null &")
h.eq(r.get("exit_code"), 0, "box A runs an HTTP server on 8000", r.describe())
PA = "/v1/sandboxes/%s/ports/8000" % A
h.ok(abserver.wait_for(lambda: srv.get(PA + "/echo", timeout=5).status == 200, timeout=20),
     "box A's server answers", srv.exec(A, "cat /tmp/srv.log").get("stdout"))

r = srv.get("/v1/sandboxes/%s/ports/%d/" % (A, HOST_PORT))
h.eq(r.status, 502, "the host's 127.0.0.1:%d is not reached through box A's port" % HOST_PORT, r.describe())
h.ok(SECRET.encode() not in (r.body or b""), "the host service's answer never comes back", r.describe())
r = srv.get("/", headers={"Host": "%d-%s.%s" % (HOST_PORT, A, DOMAIN)})
h.eq(r.status, 502, "... nor by host name", r.describe())
h.eq(hits, [], "the host service saw no request at all")

# ---- other boxes ------------------------------------------------------------------------------

r = srv.get("/v1/sandboxes/%s/ports/8000/echo" % A2)
h.eq(r.status, 502, "box A's port is not reachable through box A2's id (same app)", r.describe())
r = srv.get("/v1/sandboxes/%s/ports/8000/echo" % BB)
h.eq(r.status, 502, "... nor through box BB's id", r.describe())
r = srv.get(PA + "/echo", token=KEY_B)
h.eq(r.status, 404, "another app's key: box A's port is not found", r.describe())
r = srv.put(PA + "/public", token=KEY_B)
h.eq(r.status, 404, "another app's key cannot make it public", r.describe())
r = srv.get("/echo", headers={"Host": "8000-%s.%s" % (A, DOMAIN)}, token=KEY_B)
h.eq(r.status, 404, "a Host of box A's form with another app's key: 404", r.describe())
r = srv.get("/v1/sandboxes/%s/ports/8000/echo" % BB, headers={"Host": "8000-%s.%s" % (A, DOMAIN)}, token=KEY_B)
h.eq(r.status, 404, "BB's path with A's host name and BB's key: the host name decides, A is not found",
     r.describe())
r = srv.get("/echo", headers={"Host": "8000-%s.%s" % (A, DOMAIN)}, token=None)
h.eq(r.status, 401, "a Host of box A's form without a token: 401", r.describe())
r = srv.get("/v1/sandboxes", headers={"Host": "8000-%s.%s.evil.test" % (A, DOMAIN)}, token=None)
h.eq(r.status, 401, "a Host that only contains the domain is the API (auth as ever)", r.describe())

r = srv.put(PA + "/public", token=KEY_A)
h.eq(r.status, 200, "box A's port 8000 made public", r.describe())
r = srv.get("/v1/sandboxes/%s/files?path=/etc/hostname" % BB, headers={"Host": "8000-%s.%s" % (A, DOMAIN)},
            token=None)
h.eq((r.status, (r.json or {}).get("target")), (200, "/v1/sandboxes/%s/files?path=/etc/hostname" % BB),
     "a public port's host name with an API path goes to that port, never to the API", r.describe())
r = srv.get("/v1/sandboxes/%s/ports/8000/echo" % BB, token=None)
h.eq(r.status, 401, "A's public port opens no port of BB", r.describe())
r = srv.get("/v1/sandboxes/%s/ports/8001/echo" % A, token=None)
h.eq(r.status, 401, "nor another port of A", r.describe())
r = srv.delete(PA + "/public", token=KEY_A)
h.eq(r.status, 200, "private again", r.describe())


# the code runner's system box, running (a port of it would answer 502, "nothing listens")
r = srv.post("/sandbox/python", {"code": "def main():\n    return 1\n"}, timeout=120)
if r.status == 200 and r.get("success") is True:
    r = srv.get("/v1/sandboxes/sys-runner/ports/8000/")
    h.eq(r.status, 404, "the code runner's system box has no ports to reach, even for the admin", r.describe())
    r = srv.get("/", headers={"Host": "8000-sys-runner.%s" % DOMAIN})
    h.eq(r.status, 404, "... nor by host name", r.describe())
else:
    h.skip("the system box has no ports", "the code runner does not run here: %s" % r.describe()[:200])

# ---- smuggling ---------------------------------------------------------------------------------

def targets():
    return srv.exec(A, "cat /tmp/targets.log").get("stdout") or ""


AUTH = "Authorization: Bearer %s\r\n" % TOKEN
smuggled = "GET /echo/smuggled-%s HTTP/1.1\r\nHost: x\r\n\r\n" % secrets.token_hex(3)
body = "0\r\n\r\n" + smuggled
for what, hdrs in (
        ("Content-Length and Transfer-Encoding", "Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % len(body)),
        ("Transfer-Encoding and Content-Length", "Transfer-Encoding: chunked\r\nContent-Length: %d\r\n" % len(body)),
        ("two Content-Lengths", "Content-Length: 5\r\nContent-Length: %d\r\n" % len(body)),
        ("Transfer-Encoding: chunked, identity", "Transfer-Encoding: chunked, identity\r\n"),
        ("an obfuscated Transfer-Encoding", "Transfer-Encoding: xchunked\r\nContent-Length: %d\r\n" % len(body))):
    st, head, _, err = srv.raw(("POST %s/echo/te-cl HTTP/1.1\r\nHost: x\r\n%s%s\r\n%s" % (PA, AUTH, hdrs, body)).encode())
    h.ok(st in (400, 411, 413, 501), "%s: refused (%s)" % (what, st), head[:300])
time.sleep(0.5)
t = targets()
h.ok("smuggled" not in t and "te-cl" not in t, "the box saw neither the request nor the smuggled one", t[-500:])

# a kept-alive client connection: an overlong answer does not spill into the next one
s = socket.create_connection((srv.host, srv.port), timeout=10)
s.sendall(("GET %s/raw?kind=overlong HTTP/1.1\r\nHost: x\r\n%s\r\n" % (PA, AUTH)).encode())
s.sendall(("GET %s/echo/second HTTP/1.1\r\nHost: x\r\n%s\r\n" % (PA, AUTH)).encode())
got = b""
end = time.monotonic() + 10
while time.monotonic() < end and b"/echo/second" not in got:
    try:
        d = s.recv(65536)
    except socket.timeout:
        break
    if not d:
        break
    got += d
s.close()
h.ok(b"X-Smuggled" not in got and b"evil" not in got, "bytes past the box's Content-Length never reach the client",
     got[:600])
h.ok(got.count(b"HTTP/1.1 200") == 2 and got.index(b"/echo/second") > got.index(b"first"),
     "two answers: the first cut at its Content-Length, then the second request's", got[:600])
r = srv.get(PA + "/raw?kind=both")
h.eq((r.status, r.body), (200, b"hello"), "an answer with both framings is read as chunked", r.describe())
r = srv.get(PA + "/raw?kind=garbage")
h.eq(r.status, 502, "a box answering something else than HTTP: 502", r.describe())

# ---- header injection ------------------------------------------------------------------------------

r = srv.get(PA + "/echo/%0d%0aInjected:%20yes?x=%0d%0aAlso:%20yes")
j = r.json or {}
names = [k.lower() for k, _ in j.get("headers") or []]
h.eq(r.status, 400, "escaped CR/LF in the target: refused before routing", r.describe())
h.ok("injected" not in names and "also" not in names, "escaped CR/LF in the target make no header", repr(j))
st, head, body, err = srv.raw(("GET %s/echo/bare-cr HTTP/1.1\r\nHost: x\r\n%sX-A: a\rInjected: yes\r\n"
                               "Connection: close\r\n\r\n" % (PA, AUTH)).encode())
h.ok(st != 200 or b'"injected"' not in body.lower(), "a bare CR in a request header is no line break for the box",
     (head + "\n" + body.decode("latin-1"))[:600])
r = srv.get(PA + "/raw?kind=cr")
h.ok(r.header("Set-Cookie") is None, "a bare CR in the box's header injects no header into the answer", r.describe())
h.eq(r.status, 502, "... the answer is refused as malformed", r.describe())
for what, v in (("a folded line", "X-A: a\r\n Injected: yes"), ("a NUL", "X-A: a\0Injected: yes"),
                ("a bare LF in a folded line", "X-Forwarded-For: 1.2.3.4\n\tInjected: yes")):
    st, head, body, err = srv.raw(("GET %s/echo/fold HTTP/1.1\r\nHost: x\r\n%s%s\r\n"
                                   "Connection: close\r\n\r\n" % (PA, AUTH, v)).encode())
    j = {}
    try:
        import json
        j = json.loads(body)
    except ValueError:
        pass
    names = [k.lower() for k, _ in j.get("headers") or []]
    vals = [x for _, x in j.get("headers") or []]
    h.ok(st != 200 or ("injected" not in names and not any("\n" in x or "\r" in x for x in vals)),
         "%s: no header of the client's making and no line break reach the box (%s)" % (what, st),
         body[:400])
host_srv.shutdown()
h.done()
