#!/usr/bin/env python3
"""Ports of boxes (docs/api.md "Ports"), with real boxes in network mode
none: a small HTTP server (tests/lib/boxhttp.py) runs in a box and is
reached through the server at /v1/sandboxes/{id}/ports/{port}/... and by
host name PORT-ID.DOMAIN: methods, targets and query strings, headers
passed on (X-Forwarded-*, hop-by-hop ones dropped, the server's token
never), a 5 MB body round trip byte for byte (Content-Length and chunked),
a streamed answer arriving before the box's server finishes it, a large
chunked answer, HEAD, a WebSocket echo, auth (no token, another app's key,
public ports and private again), errors (no listener 502, bad ports 400,
unknown box 404, a slow server 504), and a paused box resumed by a request
to its port."""
import hashlib
import http.client
import json
import os
import secrets
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import wsclient  # noqa: E402

LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib")
TOKEN = "tok-" + secrets.token_hex(8)
KEY_A = "key-a-" + secrets.token_hex(8)
KEY_B = "key-b-" + secrets.token_hex(8)
DOMAIN = "boxes.example.test"
h = abserver.ServerHarness(budget=240)
srv = h.start_server(name="ports", token=TOKEN, config={
    "idle_pause": "1h", "idle_stop": "2h", "reaper_interval": "200ms",
    "ports_domain": DOMAIN, "ports_timeout": "2s", "max_requests": 4,
    "api_keys": [{"key": KEY_A, "app_id": "appa"}, {"key": KEY_B, "app_id": "appb"}]})

r = srv.post("/v1/sandboxes", {"app_id": "appa", "user_id": "u1", "chat_id": "c1"})
h.eq(r.status, 201, "create a box of app appa (network mode none)", r.describe())
B = r.get("id") or "none"
h.eq((r.get("network") or {}).get("mode"), "none", "the box has no network", r.describe())
# The stand-in cluster's pods share the host's loopback: ports nothing else holds there.
PORT = abserver.free_port() if h.backend == "kubernetes" else 8000
OTHER = abserver.free_port() if h.backend == "kubernetes" else 8001
P = "/v1/sandboxes/%s/ports/%d" % (B, PORT)

with open(os.path.join(LIB, "boxhttp.py"), "rb") as f:
    r = srv.put(srv.file_path(B, "/workspace/boxhttp.py"), f.read())
h.ok(r.status in (200, 201, 204), "the box's server script is written", r.describe())
r = srv.exec(B, "setsid nohup python3 /workspace/boxhttp.py %d >/tmp/srv.log 2>&1 </dev/null &" % PORT)
h.eq(r.get("exit_code"), 0, "the box's server starts in the background", r.describe())
up = abserver.wait_for(lambda: srv.get(P + "/echo", timeout=5).status == 200, timeout=20)
h.ok(up, "the box's server answers through the port route",
     srv.exec(B, "cat /tmp/srv.log").get("stdout"))


def raw_conn():
    return http.client.HTTPConnection(srv.host, srv.port, timeout=30)


# ---- requests: method, target, headers ------------------------------------------------------

r = srv.get(P + "/echo/a%20b/c?x=1&y=%2F&z", headers={"X-Custom": "v1", "Connection": "close, X-Drop",
                                                     "X-Drop": "gone", "X-Forwarded-For": "1.2.3.4"})
h.eq(r.status, 200, "GET through the port route", r.describe())
j = r.json or {}
hd = {k.lower(): v for k, v in j.get("headers") or []}
h.eq(j.get("target"), "/echo/a%20b/c?x=1&y=%2F&z", "the rest of the path and the query arrive as sent", repr(j))
h.eq(j.get("method"), "GET", "the method arrives")
h.eq(hd.get("x-custom"), "v1", "an end-to-end header arrives", repr(hd))
h.ok("x-drop" not in hd, "a header named in Connection is dropped (hop-by-hop)", repr(hd))
h.ok("authorization" not in hd, "the server's token is not passed to the box", repr(hd))
h.eq(hd.get("x-forwarded-for"), "1.2.3.4, 127.0.0.1", "X-Forwarded-For gets the client's address appended", repr(hd))
h.eq(hd.get("x-forwarded-proto"), "http", "X-Forwarded-Proto", repr(hd))
h.eq(hd.get("x-forwarded-host"), "%s:%d" % (srv.host, srv.port), "X-Forwarded-Host is the client's Host", repr(hd))
h.eq(r.header("X-Box-Echo"), "yes", "the box's answer headers come back", r.describe())
r = srv.get(P, headers={})
h.eq((r.status, (r.json or {}).get("target")), (200, "/"), "no rest of the path: the target is /", r.describe())
r = srv.get(P + "?q=1")
h.eq((r.json or {}).get("target"), "/?q=1", "only a query: /?q=1", r.describe())
for m in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
    r = srv.request(m, P + "/echo", body=b"abc")
    h.eq((r.status, (r.json or {}).get("method"), (r.json or {}).get("body_len")), (200, m, 3),
         "%s with a body arrives" % m, r.describe())
r = srv.request("HEAD", P + "/echo")
h.eq((r.status, r.body), (200, b""), "HEAD: the head, no body", r.describe())
h.ok(int(r.header("Content-Length") or 0) > 0, "HEAD keeps the box's Content-Length", r.describe())

# ---- bodies ------------------------------------------------------------------------------------

big = os.urandom(5 * 1024 * 1024)
t0 = time.monotonic()
r = srv.post(P + "/mirror", big, timeout=60)
h.eq(r.status, 200, "POST 5 MB", r.describe())
h.ok(r.body == big, "5 MB round trip byte for byte (Content-Length)",
     "%d bytes back, in %.1fs" % (len(r.body or b""), time.monotonic() - t0))

r = srv.post(P + "/mirror?delay=1", big, timeout=60)
h.ok(r.status == 200 and r.body == big, "5 MB to a server that takes the body only after 1 s (the proxy waits, "
     "holding no more than its buffer)", r.describe())
t0 = time.monotonic()
r = srv.post(P + "/mirror?delay=8", big * 4, timeout=60)
h.eq((r.status, r.err_code), (504, "timeout"), "a server that takes no body within ports_timeout: 504", r.describe())


def gen():
    for i in range(0, len(big), 100000):
        yield big[i:i + 100000]


c = raw_conn()
c.request("POST", P + "/mirror", body=gen(), headers={"Authorization": "Bearer " + TOKEN,
                                                       "Transfer-Encoding": "chunked"}, encode_chunked=True)
resp = c.getresponse()
data = resp.read()
h.eq(resp.status, 200, "POST 5 MB chunked")
h.ok(data == big, "chunked request body round trip byte for byte", "%d bytes back" % len(data))
c.close()

# curl sends large bodies with "Expect: 100-continue"
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
if shutil.which("curl"):
    with tempfile.NamedTemporaryFile(dir=h.root, delete=False) as tf:
        tf.write(big[:3 * 1024 * 1024])
    out = subprocess.run(["curl", "-sS", "--max-time", "60", "-H", "Authorization: Bearer " + TOKEN,
                          "-H", "Expect: 100-continue", "--data-binary", "@" + tf.name,
                          "http://%s:%d%s/mirror" % (srv.host, srv.port, P)], capture_output=True)
    h.ok(out.returncode == 0 and out.stdout == big[:3 * 1024 * 1024],
         "curl with Expect: 100-continue: 3 MB round trip",
         "rc %d, %d bytes, %r" % (out.returncode, len(out.stdout), out.stderr[-300:]))
else:
    h.skip("curl with Expect: 100-continue", "curl is not installed")

r = srv.get(P + "/big?n=20000000", timeout=60)
pat = (bytes(range(256)) * 256)
h.eq(r.status, 200, "a 20 MB chunked answer", r.describe())
h.ok(r.body is not None and len(r.body) == 20000000 and r.body[:65536] == pat and r.body[-100:] == (pat * 306)[20000000 - 100:20000000],
     "a 20 MB chunked answer arrives whole", "%d bytes" % len(r.body or b""))

c = raw_conn()
t0 = time.monotonic()
c.request("GET", P + "/stream", headers={"Authorization": "Bearer " + TOKEN})
resp = c.getresponse()
first = resp.fp.readline()
t_first = time.monotonic() - t0
if first.strip() and not first.startswith(b"first"):  # a chunk-size line
    first = resp.fp.readline()
h.ok(first.startswith(b"first") and t_first < 2.5,
     "a streamed answer: the first part arrives before the box's server finishes",
     "got %r after %.2fs" % (first, t_first))
c.close()

# ---- host-name routing --------------------------------------------------------------------------

hostname = "%d-%s.%s" % (PORT, B, DOMAIN)
r = srv.get("/echo/by-host?h=1", headers={"Host": hostname})
j = r.json or {}
h.eq((r.status, j.get("target")), (200, "/echo/by-host?h=1"),
     "Host PORT-ID.DOMAIN: the whole target goes to the port", r.describe())
r = srv.get("/v1/sandboxes", headers={"Host": hostname})
h.eq((r.status, (r.json or {}).get("target")), (200, "/v1/sandboxes"),
     "by host name even /v1 paths go to the box", r.describe())
r = srv.get("/echo", headers={"Host": hostname.upper() + ":%d" % srv.port})
h.eq(r.status, 200, "host names match in any case and with a port", r.describe())
r = srv.get("/echo", headers={"Host": hostname}, token=None)
h.eq(r.status, 401, "by host name without a token: 401", r.describe())
r = srv.get("/v1/sandboxes", headers={"Host": "%d-%s.other.test" % (PORT, B)})
h.eq((r.status, "sandboxes" in (r.json or {})), (200, True), "another domain: the API as usual", r.describe())

# ---- WebSocket -------------------------------------------------------------------------------

ws = wsclient.connect(srv, P + "/ws")
h.eq(ws.status, 101, "WebSocket through the port: 101 relayed", ws.head)
h.ok(ws.accept_ok(), "the box's Sec-WebSocket-Accept comes back", ws.head)
ws.send_binary(b"hello-port")
out = ws.read_until(lambda o: b"hello-port" in o)
h.ok(b"hello-port" in out, "binary echo through the relay", repr(out))
ws.send_binary(b"x" * 200000)
out = ws.read_until(lambda o: len(o) >= 10 + 200000, timeout=20)
h.eq(len(out), 10 + 200000, "a 200 KB message echoed whole")
ws.send_text("text-msg")
h.ok(abserver.wait_for(lambda: (ws.pump(0.2) or True) and "text-msg" in ws.texts, timeout=10),
     "text echo", repr(ws.texts))
ws.close()
wsp = wsclient.connect(srv, P + "/ws", token=None,
                       protocols=["agentbox.terminal.v1", "bearer." + TOKEN, "app.v2"])
h.eq(wsp.status, 101, "WebSocket with the token as a subprotocol (the browser form): 101", wsp.head)
got = abserver.wait_for(lambda: (wsp.pump(0.2) or True) and [t for t in wsp.texts if isinstance(t, dict)], timeout=10)
seen = dict((k.lower(), v) for k, v in (got[0].get("headers") if got else []))
h.eq(seen.get("sec-websocket-protocol"), "app.v2",
     "the box gets the client's own subprotocols, never the token or the terminal protocol", repr(seen))
h.ok(TOKEN not in repr(seen), "the token is nowhere in what the box got", repr(seen))
wsp.close()
wsn = wsclient.connect(srv, P + "/ws", token=None)
h.eq(wsn.status, 401, "WebSocket to a port without a token: 401", wsn.head)
wsn.drop()

# ---- auth ----------------------------------------------------------------------------------------

r = srv.get(P + "/echo", token=None)
h.eq(r.status, 401, "no token: 401", r.describe())
r = srv.get(P + "/echo", token=KEY_A)
h.eq(r.status, 200, "the key of the box's app: 200", r.describe())
h.ok("authorization" not in {k.lower() for k, _ in (r.json or {}).get("headers") or []},
     "an API key is not passed to the box either", r.describe())
r = srv.get(P + "/echo", token=KEY_B)
h.eq(r.status, 404, "another app's key: 404", r.describe())
r = srv.put(P + "/public", token=KEY_B)
h.eq(r.status, 404, "another app's key cannot make the port public", r.describe())
r = srv.put(P + "/public", token=KEY_A)
h.eq((r.status, r.get("public"), r.get("public_ports")), (200, True, [PORT]), "PUT .../public", r.describe())
h.eq((srv.box(B) or {}).get("public_ports"), [PORT], "the box shows its public ports")
r = srv.get(P + "/echo?pub=1", token=None)
h.eq(r.status, 200, "a public port needs no token", r.describe())
r = srv.get("/echo", headers={"Host": hostname}, token=None)
h.eq(r.status, 200, "... by host name too", r.describe())
r = srv.get("/v1/sandboxes/%s/ports/%d/echo" % (B, OTHER), token=None)
h.eq(r.status, 401, "another port of the box stays private", r.describe())
r = srv.get("/v1/sandboxes/%s" % B, token=None)
h.eq(r.status, 401, "the box's API stays private", r.describe())
r = srv.delete(P + "/public")
h.eq((r.status, r.get("public"), r.get("public_ports")), (200, False, []), "DELETE .../public", r.describe())
r = srv.get(P + "/echo", token=None)
h.eq(r.status, 401, "private again: 401", r.describe())
r = srv.get(P + "/public")
h.eq((r.status, (r.json or {}).get("target")), (200, "/public"), "GET .../public goes to the box", r.describe())

# ---- errors ----------------------------------------------------------------------------------------

r = srv.get("/v1/sandboxes/%s/ports/%d/x" % (B, OTHER))
h.eq((r.status, r.err_code), (502, "unavailable"), "nothing listens: 502", r.describe())
h.eq(r.err_message, "nothing listens on port %d in box %s" % (OTHER, B), "... saying so", r.describe())
for bad in ("0", "70000", "80a", "-1", "65536"):
    r = srv.get("/v1/sandboxes/%s/ports/%s/x" % (B, bad))
    h.eq(r.status, 400, "port %s: 400" % bad, r.describe())
r = srv.put("/v1/sandboxes/%s/ports/0/public" % B)
h.eq(r.status, 400, "PUT .../ports/0/public: 400", r.describe())
r = srv.get("/v1/sandboxes/no-such-box/ports/8000/x")
h.eq(r.status, 404, "unknown box: 404", r.describe())
r = srv.get("/v1/sandboxes/no-such-box/ports/8000/x", token=None)
h.eq(r.status, 401, "unknown box without a token: 401 (existence is not told)", r.describe())
t0 = time.monotonic()
r = srv.get(P + "/slow?s=5", timeout=30)
h.eq((r.status, r.err_code), (504, "timeout"), "a box server slower than ports_timeout: 504", r.describe())
h.ok(time.monotonic() - t0 < 4.5, "... after ports_timeout (2 s)", "%.1fs" % (time.monotonic() - t0))
r = srv.get(P + "/slow?s=0.5", timeout=30)
h.eq(r.status, 200, "a server within the timeout answers", r.describe())

# a slow box server holds no worker: 10 slow requests at once on a server of max_requests 4
import threading  # noqa: E402
res = []
ths = [threading.Thread(target=lambda: res.append(srv.get(P + "/slow?s=1.5", timeout=30).status)) for _ in range(10)]
t0 = time.monotonic()
for t in ths:  # staggered: opening one takes a worker for a moment; the waits overlap
    t.start()
    time.sleep(0.06)
for t in ths:
    t.join()
h.eq(sorted(res), [200] * 10, "10 requests waiting for a slow box server at once, with max_requests 4: all answered",
     "%r in %.1fs" % (res, time.monotonic() - t0))

# ---- a WebSocket is a use of the box for its whole life ------------------------------------------

ws = wsclient.connect(srv, P + "/ws")
h.eq(ws.status, 101, "a second WebSocket", ws.head)
time.sleep(0.3)
r = srv.post("/v1/sandboxes/%s/pause" % B)
h.eq(r.status, 409, "the box cannot be paused while a WebSocket to its port is open", r.describe())
ws.send_binary(b"still-here")
h.ok(b"still-here" in ws.read_until(lambda o: b"still-here" in o), "the WebSocket still works")
ws.close()
ok = abserver.wait_for(lambda: srv.post("/v1/sandboxes/%s/pause" % B).status == 200, timeout=10)
h.ok(ok, "once it is closed the use ends: the box can be paused")
srv.post("/v1/sandboxes/%s/resume" % B)

# ---- a paused box ----------------------------------------------------------------------------------

r = srv.post("/v1/sandboxes/%s/pause" % B)
h.eq((r.status, r.get("status")), (200, "paused"), "pause the box", r.describe())
r = srv.get(P + "/echo?after=pause")
if h.backend == "kubernetes":
    # pause is a stop on this backend (docs/kubernetes.md): the request starts a new pod, without
    # the box's server, which the resume above also ended
    h.eq((r.status, r.err_code), (502, "unavailable"),
         "a request to a paused (stopped) box's port starts it; its server is gone: 502", r.describe())
else:
    h.eq(r.status, 200, "a request to a paused box's port resumes it", r.describe())
h.eq(srv.status_of(B), "running", "the box runs again")

# ---- a stopped box -----------------------------------------------------------------------------------

r = srv.post("/v1/sandboxes/%s/stop" % B)
h.eq((r.status, r.get("status")), (200, "stopped"), "stop the box", r.describe())
r = srv.get(P + "/echo")
h.eq((r.status, r.err_code), (502, "unavailable"), "a request to a stopped box's port starts it (its server is gone: 502)",
     r.describe())
h.eq(srv.status_of(B), "running", "the box was started")

# ---- nothing leaked ------------------------------------------------------------------------------

m = srv.metrics() or []
h.ok(abserver.wait_for(lambda: abserver.metric_sum(srv.metrics() or [], "agentbox_http_streams") == 0, timeout=10),
     "no stream slot left taken")
h.done()
