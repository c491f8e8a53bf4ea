#!/usr/bin/env python3
"""URLs are exact (docs/security.md, "Exact request targets"). A decoder
that turns "%00" into a NUL ends the path there: "DELETE /v1/sandboxes/ID%00/files"
would delete the box ID. The test sends NUL and other control characters,
escaped, in the path and in the query to the REST routes, the E2B and
OpenSandbox fronts and a box's port: each must be 400, and the box must be
untouched (still there, its file still there, its port's server never
asked). Then a body framed twice (Content-Length with Transfer-Encoding,
and either twice: request smuggling) must be 400 on every kind of route,
with no effect and the smuggled request never run."""
import os
import secrets
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import abserver  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
h = abserver.ServerHarness(budget=200)
srv = h.start_server(name="exacturls", token=TOKEN, config={"idle_pause": "1h", "idle_stop": "2h"})
MARK = secrets.token_hex(4)

r = srv.post("/v1/sandboxes", {"app_id": "app", "user_id": "u", "chat_id": "x-" + MARK})
h.eq(r.status, 201, "box X", r.describe())
X = r.get("id") or "none"
r = srv.exec(X, "echo keep > /tmp/keep && mkdir -p /tmp/www && cd /tmp/www && "
                "setsid nohup python3 -m http.server 8000 --bind 127.0.0.1 >/tmp/www.log 2>&1 </dev/null &")
h.eq(r.get("exit_code"), 0, "box X has /tmp/keep and a server on 8000", r.describe())
PORT = "/v1/sandboxes/%s/ports/8000" % X
h.ok(abserver.wait_for(lambda: srv.get(PORT + "/", timeout=5).status == 200, timeout=20),
     "box X's port answers")


def www_hits():
    r = srv.exec(X, "wc -l < /tmp/www.log")
    return (r.get("stdout") or "").strip()


hits0 = www_hits()

# ---- control characters, escaped, in the path -------------------------------------------------
for esc in ("%00", "%0a", "%0D", "%09", "%1f", "%7F"):
    for method, path in (("DELETE", "/v1/sandboxes/%s%s/files?path=/tmp/nothing" % (X, esc)),
                         ("GET", "/v1/sandboxes/%s%s/execs" % (X, esc)),
                         ("DELETE", "/v1/sandboxes/%s%s/terminals/t_1" % (X, esc)),
                         ("DELETE", "/e2b/sandboxes/%s%s/x" % (X, esc)),
                         ("DELETE", "/opensandbox/v1/sandboxes/%s%s/x" % (X, esc)),
                         ("GET", PORT + "/a%sb" % esc)):
        r = srv.request(method, path)
        h.eq(r.status, 400, "%s %s" % (method, path), r.describe())
r = srv.request("DELETE", "/v1/sandboxes/%s%%00" % X)
h.eq(r.status, 400, "DELETE /v1/sandboxes/X%00", r.describe())
r = srv.request("GET", "/v1/sandboxes/%s%%00/files" % X)
h.eq(r.status, 400, "GET /v1/sandboxes/X%00/files is not the box record", r.describe())

# ---- ... and in the query -------------------------------------------------------------------
for esc in ("%00", "%0a", "%0d%0aX-Injected:%201", "%1b"):
    for method, path in (("GET", "/v1/sandboxes/%s/files?path=/tmp/keep%s.txt" % (X, esc)),
                         ("DELETE", "/v1/sandboxes/%s/files?path=/tmp/keep%s" % (X, esc)),
                         ("GET", "/v1/sandboxes?app_id=app%s" % esc),
                         ("GET", "/e2b/sandboxes?metadata=a%s" % esc),
                         ("GET", PORT + "/?q=%s" % esc)):
        r = srv.request(method, path)
        h.eq(r.status, 400, "%s %s" % (method, path), r.describe())

# A "%" that escapes nothing harmful is still fine; an escaped "%00" as text too.
r = srv.get("/v1/sandboxes/%s/files?path=/tmp/%%6beep" % X)
h.eq((r.status, r.body), (200, b"keep\n"), "an escaped letter in the query is decoded as ever", r.describe())
r = srv.get("/v1/sandboxes?app_id=%2500")
h.eq(r.status, 200, "an escaped '%' followed by 00 is text, not a NUL", r.describe())

h.eq(srv.status_of(X), "running", "box X is still there and running")
r = srv.exec(X, "cat /tmp/keep")
h.eq((r.get("stdout") or "").strip(), "keep", "box X's file is still there", r.describe())
h.eq(www_hits(), hits0, "box X's port was not asked by any refused request")

# ---- two framings of one body (request smuggling) --------------------------------------------
before = sorted(b["id"] for b in (srv.list() or []))
AUTH = "Authorization: Bearer %s\r\n" % TOKEN
smuggled = ("GET /v1/sandboxes/%s/ports/8000/smuggled-%s HTTP/1.1\r\nHost: x\r\n%s\r\n"
            % (X, MARK, AUTH))
chunked_then = "0\r\n\r\n" + smuggled


def framed(method, path, heads, body):
    data = ("%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s\r\n" % (method, path, AUTH, heads)
            + body).encode()
    status, head, rbody, err = srv.raw(data, timeout=5)
    return status, rbody


bodies = {
    "Content-Length with Transfer-Encoding": "Content-Length: %d\r\nTransfer-Encoding: chunked\r\n"
                                             % len(chunked_then),
    "Transfer-Encoding with Content-Length": "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
    "two Content-Lengths": "Content-Length: %d\r\nContent-Length: 5\r\n" % len(chunked_then),
}
for what, heads in bodies.items():
    for method, path in (("POST", "/v1/sandboxes"), ("POST", "/v1/sandboxes/%s/exec" % X),
                         ("POST", "/e2b/sandboxes"), ("POST", "/opensandbox/v1/sandboxes"),
                         ("POST", "/mcp"), ("GET", "/health"), ("POST", PORT + "/")):
        status, rbody = framed(method, path, heads, chunked_then)
        h.eq(status, 400, "%s: %s %s" % (what, method, path), (rbody or b"")[:300].decode("latin-1"))
h.eq(sorted(b["id"] for b in (srv.list() or [])), before, "no box was made by a request framed twice")
r = srv.exec(X, "grep -c smuggled /tmp/www.log")
h.eq((r.get("stdout") or "").strip(), "0", "the smuggled request never reached the box",
     srv.exec(X, "cat /tmp/www.log").get("stdout"))

# ---- ... and through the egress proxy of an allowlist box --------------------------------------
# The proxy reads a box's request head, then relays bytes: two framings would let the
# origin server read a second request the proxy never checked. The host is unlisted
# (and .invalid): the proxy must refuse the head as malformed (400) before its policy
# (403) or any lookup; nothing leaves the machine either way.
r = srv.post("/v1/sandboxes", {"app_id": "app", "user_id": "u", "chat_id": "egress-" + MARK,
                               "network": {"mode": "allowlist", "allow": ["allowed.invalid"]}})
h.eq(r.status, 201, "an allowlist box", r.describe())
E = r.get("id") or "none"
PROBE = r"""
import base64, os, socket, sys
p = os.environ.get("HTTP_PROXY", "http://127.0.0.1:3128").rsplit(":", 1)
s = socket.create_connection((p[0].split("//")[-1], int(p[1])), timeout=10)
s.sendall(base64.b64decode(sys.argv[1]))
print(s.recv(4096).split(b"\r\n")[0].decode("latin-1"))
"""
import attacklib  # noqa: E402
import base64  # noqa: E402


def via_proxy(req):
    return srv.exec(E, attacklib.py_cmd(PROBE, base64.b64encode(req.encode()).decode()))


for what, heads in bodies.items():
    r = via_proxy("POST http://blocked.invalid/ HTTP/1.1\r\nHost: blocked.invalid\r\n%s\r\n0\r\n\r\n" % heads)
    h.contains(r.get("stdout") or "", " 400 ", "egress proxy, %s: 400 before its policy" % what, r.describe())
r = via_proxy("GET http://blocked.invalid/ HTTP/1.1\r\nHost: blocked.invalid\r\n\r\n")
h.contains(r.get("stdout") or "", " 403 ", "egress proxy: a plain request to the unlisted host is 403 (the probe works)",
           r.describe())
h.done()
