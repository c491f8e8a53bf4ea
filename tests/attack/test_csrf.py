#!/usr/bin/env python3
"""A web page cannot drive a server without a token (docs/security.md,
"Browsers and a server without a token"). Such a server takes every
loopback client for the admin, and a page the user opens in a browser on
the same machine is one. The test plays the browser: it sends what a page
of another site makes the browser send, to the REST routes, the E2B and
OpenSandbox fronts, MCP, a terminal's WebSocket and a box's port:
- DNS rebinding: a Host of the attacker's name (resolved to 127.0.0.1);
- CSRF: an Origin of another site (also "null" and another local port),
  Sec-Fetch-Site: cross-site / same-site without an Origin;
- the content types a page posts without a preflight (text/plain, a form,
  multipart) on JSON routes.
Each must be refused (403 / 415) and must have no effect (no box made, no
exec run, nothing reaches the box's port). The server's own pages still
work: loopback names, an allowed_hosts entry, the same Origin,
Sec-Fetch-Site: same-origin or none, application/json, the console."""
import os
import secrets
import socket
import sys
import base64

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=200)
CONFIG = {"idle_pause": "1h", "idle_stop": "2h"}
srv = h.server(name="csrf", token=None, config=dict(CONFIG, allowed_hosts=["agentbox.lan", "devbox.lan:9999"]))
why = srv.start()
h.ok(not why, "the server takes allowed_hosts", why)
if why:  # an older server: still show what the attacks do to it
    srv = h.start_server(name="csrf-old", token=None, config=CONFIG)
HOST = "127.0.0.1:%d" % srv.port
SELF = "http://" + HOST
EVIL_HOST = "rebind.evil.test:%d" % srv.port
EVIL = "http://evil.test"
MARK = secrets.token_hex(4)


def boxes():
    return sorted(b["id"] for b in (srv.list() or []))


def refused(r, status, name):
    h.eq(r.status, status, name, r.describe())


# ---- a box with a server on port 8000 that counts what it gets --------------------------------
r = srv.post("/v1/sandboxes", {"app_id": "app", "user_id": "u", "chat_id": "c-" + MARK})
h.eq(r.status, 201, "a box (the server's own client, loopback, no Origin)", r.describe())
A = r.get("id") or "none"
r = srv.exec(A, "mkdir -p /tmp/www && echo hi > /tmp/www/index.html && cd /tmp/www && "
                "setsid nohup python3 -m http.server 8000 --bind 127.0.0.1 >/tmp/www.log 2>&1 </dev/null &")
h.eq(r.get("exit_code"), 0, "the box serves /tmp/www on 8000", r.describe())
PORT = "/v1/sandboxes/%s/ports/8000" % A
h.ok(abserver.wait_for(lambda: srv.get(PORT + "/index.html", timeout=5).status == 200, timeout=20),
     "the box's port answers its own client")
before = boxes()

# ---- DNS rebinding: the attacker's name resolving to 127.0.0.1 ------------------------------
body = {"app_id": "app", "user_id": "u", "chat_id": "evil-" + MARK}
refused(srv.post("/v1/sandboxes", body, headers={"Host": EVIL_HOST}), 403,
        "rebinding: POST /v1/sandboxes with Host of another name")
refused(srv.get("/v1/sandboxes", headers={"Host": EVIL_HOST}), 403, "rebinding: GET /v1/sandboxes")
refused(srv.post("/v1/sandboxes/%s/exec" % A, {"command": "touch /tmp/pwned-host"},
                 headers={"Host": EVIL_HOST}), 403, "rebinding: exec in a box")
refused(srv.get("/v1/sandboxes/%s/files?path=/etc/hostname" % A, headers={"Host": "evil.test"}), 403,
        "rebinding: a box's file (Host without a port)")
refused(srv.post("/e2b/sandboxes", {"templateID": "base"}, headers={"Host": EVIL_HOST}), 403,
        "rebinding: E2B create")
refused(srv.get("/opensandbox/v1/sandboxes", headers={"Host": EVIL_HOST}), 403,
        "rebinding: OpenSandbox list")
refused(srv.get(PORT + "/index.html", headers={"Host": EVIL_HOST}), 403, "rebinding: a box's port")
refused(srv.post("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers={"Host": EVIL_HOST}),
        403, "rebinding: MCP")
refused(srv.get("/", headers={"Host": EVIL_HOST}), 403, "rebinding: the console")
refused(srv.get("/v1/sandboxes", headers={"Host": "127.0.0.1.evil.test"}), 403,
        "rebinding: a name that starts like a loopback address")
refused(srv.get("/v1/sandboxes", headers={"Host": "localhost.evil.test:%d" % srv.port}), 403,
        "rebinding: a name that starts with localhost")
refused(srv.get("/v1/sandboxes", headers={"Host": "devbox.lan:%d" % srv.port}), 403,
        "an allowed_hosts entry with another port")

# ---- CSRF: another site's page ------------------------------------------------------------------
for origin in (EVIL, "null", "http://localhost:3000", "http://127.0.0.1:%d" % (srv.port + 1),
               "https://127.0.0.1:%d" % srv.port + ".evil.test"):
    refused(srv.post("/v1/sandboxes", body, headers={"Origin": origin}), 403,
            "CSRF: POST /v1/sandboxes from Origin %s" % origin)
refused(srv.post("/v1/sandboxes/%s/exec" % A, {"command": "touch /tmp/pwned-origin"},
                 headers={"Origin": EVIL}), 403, "CSRF: exec")
refused(srv.delete("/v1/sandboxes/%s" % A, headers={"Origin": EVIL}), 403, "CSRF: delete a box")
refused(srv.post("/v1/keys", {"app_id": "evil"}, headers={"Origin": EVIL}), 403, "CSRF: make an API key")
refused(srv.post("/e2b/sandboxes", {"templateID": "base"}, headers={"Origin": EVIL}), 403, "CSRF: E2B create")
refused(srv.delete("/e2b/sandboxes/%s" % A, headers={"Origin": EVIL}), 403, "CSRF: E2B kill")
refused(srv.post("/opensandbox/v1/sandboxes", {"image": {"uri": "x"}}, headers={"Origin": EVIL}), 403,
        "CSRF: OpenSandbox create")
refused(srv.delete("/opensandbox/v1/sandboxes/%s" % A, headers={"Origin": EVIL}), 403,
        "CSRF: OpenSandbox delete")
refused(srv.post("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers={"Origin": EVIL}),
        403, "CSRF: MCP")
refused(srv.post(PORT + "/x", b"a=1", headers={"Origin": EVIL}), 403, "CSRF: POST to a box's port")
refused(srv.get(PORT + "/index.html", headers={"Sec-Fetch-Site": "cross-site"}), 403,
        "CSRF: a box's port from another site (Sec-Fetch-Site, no Origin)")
refused(srv.post("/v1/sandboxes", body, headers={"Sec-Fetch-Site": "cross-site"}), 403,
        "CSRF: Sec-Fetch-Site: cross-site without an Origin")
refused(srv.get("/v1/sandboxes", headers={"Sec-Fetch-Site": "same-site"}), 403,
        "CSRF: Sec-Fetch-Site: same-site (another port of localhost)")

# ---- no-preflight content types on JSON routes (a page without an Origin header) -----------
import json  # noqa: E402
js = json.dumps(body).encode()
for ct in ("text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
           "multipart/form-data; boundary=x", "TEXT/PLAIN"):
    refused(srv.post("/v1/sandboxes", js, headers={"Content-Type": ct}), 415,
            "POST /v1/sandboxes as %s" % ct)
refused(srv.post("/v1/sandboxes/%s/exec" % A, json.dumps({"command": "touch /tmp/pwned-ct"}).encode(),
                 headers={"Content-Type": "text/plain"}), 415, "exec as text/plain")
refused(srv.post("/e2b/sandboxes", b'{"templateID":"base"}', headers={"Content-Type": "text/plain"}), 415,
        "E2B create as text/plain")
refused(srv.post("/opensandbox/v1/sandboxes", b'{"image":{"uri":"x"}}',
                 headers={"Content-Type": "application/x-www-form-urlencoded"}), 415,
        "OpenSandbox create as a form")
refused(srv.post("/mcp", b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
                 headers={"Content-Type": "text/plain"}), 415, "MCP as text/plain")

# ---- a terminal's WebSocket from another site --------------------------------------------------
def ws_status(path, origin, host=HOST):
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    try:
        s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
                   "Sec-WebSocket-Protocol: agentbox.terminal.v1\r\nOrigin: %s\r\n\r\n"
                   % (path, host, base64.b64encode(os.urandom(16)).decode(), origin)).encode())
        got = s.recv(4096)
    finally:
        s.close()
    return got.split(b" ", 2)[1].decode() if got.startswith(b"HTTP/1.1 ") else "none"


r = srv.post("/v1/sandboxes/%s/terminals" % A, {"argv": ["sleep", "600"]})
h.ok(r.status in (200, 201), "a terminal in the box (own client)", r.describe())
TERM = r.get("id") or "none"
h.eq(ws_status("/v1/sandboxes/%s/terminals/%s" % (A, TERM), EVIL), "403",
     "CSRF: a terminal's WebSocket from another site")

# ---- no effect -----------------------------------------------------------------------------
h.eq(boxes(), before, "no box was made or deleted by any refused request")
r = srv.exec(A, "ls /tmp/pwned-* 2>/dev/null | wc -l")
h.eq((r.get("stdout") or "").strip(), "0", "no refused exec ran", r.describe())
r = srv.exec(A, "grep -c 'GET /index.html\\|POST /x' /tmp/www.log")
h.eq((r.get("stdout") or "").strip(), "1", "the box's port saw only its own client's request",
     srv.exec(A, "cat /tmp/www.log").get("stdout"))
r = srv.get("/v1/keys")
h.eq([k for k in (r.get("keys") or []) if k.get("app_id") == "evil"], [], "no API key was made")

# ---- the server's own pages and clients still work ------------------------------------------
for host in ("localhost:%d" % srv.port, "LOCALHOST.:%d" % srv.port, "app.localhost:%d" % srv.port,
             "127.0.0.2:%d" % srv.port, "[::1]:%d" % srv.port, "agentbox.lan", "agentbox.lan:%d" % srv.port,
             "devbox.lan:9999"):
    r = srv.get("/v1/sandboxes", headers={"Host": host})
    h.eq(r.status, 200, "Host %s is answered" % host, r.describe())
r = srv.post("/v1/sandboxes", {"app_id": "app", "user_id": "u", "chat_id": "own-" + MARK},
             headers={"Origin": SELF, "Sec-Fetch-Site": "same-origin"})
h.eq(r.status, 201, "the console's own POST (same Origin, same-origin) makes a box", r.describe())
r = srv.get("/v1/sandboxes", headers={"Origin": "http://agentbox.lan", "Host": "agentbox.lan"})
h.eq(r.status, 200, "an allowed host's own page (Origin and Host agree)", r.describe())
r = srv.get("/", headers={"Sec-Fetch-Site": "none", "Sec-Fetch-Mode": "navigate"})
h.eq(r.status, 200, "the console page, typed in the address bar", r.describe())
r = srv.post("/v1/sandboxes/%s/exec" % A, json.dumps({"command": "true"}).encode(),
             headers={"Content-Type": "application/json; charset=utf-8"})
h.eq(r.status, 200, "exec as application/json; charset=utf-8", r.describe())
r = srv.post("/v1/sandboxes/%s/exec" % A, json.dumps({"command": "true"}).encode())
h.eq(r.status, 200, "exec with no Content-Type (curl --data-binary, scripts)", r.describe())
h.eq(ws_status("/v1/sandboxes/%s/terminals/%s" % (A, TERM), SELF), "101",
     "the console's terminal WebSocket (same Origin)")
r = srv.put("/v1/sandboxes/%s/files?path=/tmp/up.txt" % A, b"plain upload",
            headers={"Content-Type": "text/plain"})
h.ok(r.status in (200, 201, 204), "a file upload as text/plain is not a JSON route", r.describe())
h.done()
