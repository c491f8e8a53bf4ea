#!/usr/bin/env python3
"""Credentials never reach a box (docs/security.md, "Credentials and box
ports"). A server in a box logs every header of every request it gets; the
test reaches it the ways a client can (by path and by host name, a private
and a public port, plain HTTP and WebSocket, and the endpoints the E2B and
OpenSandbox fronts hand out) while sending agentbox's credentials every way
the server takes them: Authorization (the admin token, a configured API key,
a key made with POST /v1/keys), X-API-Key (E2B's SDK), OPEN-SANDBOX-API-KEY
(OpenSandbox's SDK), X-Access-Token (E2B's envd token) and the WebSocket
subprotocol "bearer.TOKEN". The attack succeeds, and the test fails, when
any of those secrets shows up in the box's log. Headers that are not
agentbox's credentials (a marker, a public port's own Authorization) must
still arrive: that proves the log is read at all."""
import base64
import json
import os
import secrets
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(10)
KEY_A = "key-a-" + secrets.token_hex(10)
DOMAIN = "ports.example.test"
h = abserver.ServerHarness(budget=200)
srv = h.start_server(name="portcreds", token=TOKEN, config={
    "idle_pause": "1h", "idle_stop": "2h", "ports_domain": DOMAIN, "ports_timeout": "5s",
    "api_keys": [{"key": KEY_A, "app_id": "appa"}]})

r = srv.post("/v1/keys", {"app_id": "appa"})
h.eq(r.status, 201, "an API key of app appa made in the store", r.describe())
STORE_KEY = r.get("key") or "none"

# The box's header logger: every request's headers (all of them, as received)
# appended as one JSON line to /tmp/hdrs.log; a WebSocket upgrade is answered
# 101 and closed, so that the upgrade's headers are logged too.
LOGGER = r'''
import base64, hashlib, http.server, json, socketserver, sys

class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def handle_one(self):
        with open("/tmp/hdrs.log", "a") as f:
            f.write(json.dumps({"target": self.path, "headers": self.headers.items()}) + "\n")
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        if self.headers.get("Upgrade", "").lower() == "websocket":
            key = self.headers.get("Sec-WebSocket-Key", "")
            acc = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11")
                                                .encode()).digest()).decode()
            self.send_response(101)
            self.send_header("Upgrade", "websocket")
            self.send_header("Connection", "Upgrade")
            self.send_header("Sec-WebSocket-Accept", acc)
            self.end_headers()
            self.wfile.flush()
            self.close_connection = True
            return
        body = b"logged"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = handle_one

class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
'''

r = srv.post("/v1/sandboxes", {"app_id": "appa", "user_id": "u", "chat_id": "creds"}, token=KEY_A)
h.eq(r.status, 201, "a box of app appa", r.describe())
A = r.get("id") or "none"
r = srv.put(srv.file_path(A, "/workspace/logger.py"), LOGGER.encode())
h.ok(r.status in (200, 201, 204), "the logger script is in the box", r.describe())
for port in (8000, 8001):
    r = srv.exec(A, "setsid nohup python3 /workspace/logger.py %d >/tmp/logger%d.out 2>&1 </dev/null &"
                 % (port, port))
    h.eq(r.get("exit_code"), 0, "the box runs the header logger on %d" % port, r.describe())
PRIV = "/v1/sandboxes/%s/ports/8000" % A
PUB = "/v1/sandboxes/%s/ports/8001" % A
HPRIV = "8000-%s.%s" % (A, DOMAIN)
HPUB = "8001-%s.%s" % (A, DOMAIN)
h.ok(abserver.wait_for(lambda: srv.get(PRIV + "/up", timeout=5).status == 200, timeout=20),
     "the logger answers on 8000", srv.exec(A, "cat /tmp/logger8000.out").get("stdout"))
h.ok(abserver.wait_for(lambda: srv.get(PUB + "/up", timeout=5).status == 200, timeout=20),
     "the logger answers on 8001")
r = srv.put(PUB + "/public")
h.eq(r.status, 200, "port 8001 made public", r.describe())

r = srv.get("/e2b/sandboxes/%s" % A, headers={"X-API-Key": KEY_A}, token=None)
h.eq(r.status, 200, "E2B's view of the box", r.describe())
ACCESS = r.get("envdAccessToken") or ("no-access-token-" + secrets.token_hex(6))

SECRETS = {"admin token": TOKEN, "configured key": KEY_A, "store key": STORE_KEY,
           "E2B access token": ACCESS}
marker_n = [0]


def send(name, path, want, token=None, headers=None, method="GET", body=None):
    """One request that carries credentials; it must be answered by the
    logger (want: the status expected)."""
    marker_n[0] += 1
    hdrs = {"X-Marker": "m%d" % marker_n[0]}
    hdrs.update(headers or {})
    r = srv.request(method, path, body=body, headers=hdrs, token=token)
    h.eq(r.status, want, name, r.describe())


def ws(name, path, protocols, want=101, token=None, headers=None):
    """A WebSocket upgrade through the proxy; the logger answers 101."""
    marker_n[0] += 1
    lines = ["GET %s HTTP/1.1" % path, "Host: %s" % (headers or {}).pop("Host", "127.0.0.1:%d" % srv.port),
             "Upgrade: websocket", "Connection: Upgrade",
             "Sec-WebSocket-Key: %s" % base64.b64encode(os.urandom(16)).decode(),
             "Sec-WebSocket-Version: 13", "X-Marker: m%d" % marker_n[0]]
    if protocols:
        lines.append("Sec-WebSocket-Protocol: %s" % protocols)
    if token:
        lines.append("Authorization: Bearer %s" % token)
    for k, v in (headers or {}).items():
        lines.append("%s: %s" % (k, v))
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    try:
        s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        got = b""
        end = time.monotonic() + 10
        while b"\r\n\r\n" not in got and time.monotonic() < end:
            c = s.recv(4096)
            if not c:
                break
            got += c
    finally:
        s.close()
    status = got.split(b" ", 2)[1].decode() if got.startswith(b"HTTP/1.1 ") else "none"
    h.eq(status, str(want), name, got[:300].decode("latin-1"))


# ---- private port: by path ------------------------------------------------------------------
send("private, by path: Authorization with the admin token and X-API-Key with a key", PRIV + "/a",
     200, token=TOKEN, headers={"X-API-Key": KEY_A})
send("private, by path: X-API-Key alone (it authenticates)", PRIV + "/b", 200,
     headers={"X-API-Key": KEY_A})
send("private, by path: X-API-Key with a store key", PRIV + "/c", 200, headers={"X-API-Key": STORE_KEY})
send("private, by path: the OpenSandbox SDK's header beside Authorization", PRIV + "/d", 200,
     token=KEY_A, headers={"OPEN-SANDBOX-API-KEY": KEY_A})
send("private, by path: E2B's X-Access-Token", PRIV + "/e", 200, token=KEY_A,
     headers={"X-Access-Token": ACCESS})
send("private, by path: a POST with a body", PRIV + "/f", 200, token=TOKEN, method="POST",
     body=b'{"x":1}', headers={"X-API-Key": TOKEN, "Content-Type": "application/json"})
# ---- private port: by host name ---------------------------------------------------------------
send("private, by host: X-API-Key alone", "/g", 200, headers={"Host": HPRIV, "X-API-Key": KEY_A})
send("private, by host: Authorization with a store key", "/h", 200, token=STORE_KEY,
     headers={"Host": HPRIV, "OPEN-SANDBOX-API-KEY": STORE_KEY})
# ---- public port: nobody authenticated, yet a client may send its credentials along ----------
send("public, by path: Authorization with the admin token", PUB + "/i", 200, token=TOKEN)
send("public, by path: X-API-Key with a configured key", PUB + "/j", 200, headers={"X-API-Key": KEY_A})
send("public, by path: OPEN-SANDBOX-API-KEY with a store key", PUB + "/k", 200,
     headers={"OPEN-SANDBOX-API-KEY": STORE_KEY})
send("public, by path: 'bearer' in any case, extra spaces", PUB + "/l", 200,
     headers={"Authorization": "bEaReR   %s" % TOKEN})
send("public, by host: Authorization with a store key", "/m", 200, token=STORE_KEY,
     headers={"Host": HPUB, "X-API-Key": TOKEN})
send("public, by host: E2B's X-Access-Token", "/n", 200, headers={"Host": HPUB, "X-Access-Token": ACCESS})
# ---- WebSocket -----------------------------------------------------------------------------
ws("private WebSocket, by path: token as subprotocol", PRIV + "/ws1",
   "chat, bearer.%s, agentbox.terminal.v1" % TOKEN)
ws("private WebSocket, by path: Authorization and X-API-Key", PRIV + "/ws2", "chat", token=KEY_A,
   headers={"X-API-Key": KEY_A})
ws("private WebSocket, by host: subprotocol with a store key", "/ws3", "bearer.%s, agentbox.terminal.v1" % STORE_KEY,
   headers={"Host": HPRIV})
ws("public WebSocket, by path: Authorization with the admin token", PUB + "/ws4", "chat", token=TOKEN,
   headers={"OPEN-SANDBOX-API-KEY": KEY_A})
ws("public WebSocket, by host: the admin token as subprotocol and X-API-Key", "/ws5",
   "bearer.%s" % TOKEN, headers={"Host": HPUB, "X-API-Key": STORE_KEY})

# ---- the fronts' endpoints, followed as their SDKs do ----------------------------------------
r = srv.get("/opensandbox/v1/sandboxes/%s/endpoints/8000" % A, token=None,
            headers={"OPEN-SANDBOX-API-KEY": KEY_A})
h.eq(r.status, 200, "OpenSandbox: the endpoint of port 8000", r.describe())
ep = r.get("endpoint") or ""
ep_headers = dict(r.get("headers") or {})
path = "/" + ep.split("/", 1)[1] if "/" in ep else "/none"
ep_headers["OPEN-SANDBOX-API-KEY"] = KEY_A  # the SDK's default header goes along
send("OpenSandbox: a request to the endpoint with the headers it names", path + "/o", 200,
     headers=ep_headers)
r = srv.get("/opensandbox/v1/sandboxes/%s/endpoints/8001" % A, token=None,
            headers={"OPEN-SANDBOX-API-KEY": STORE_KEY})
ep = r.get("endpoint") or ""
path = "/" + ep.split("/", 1)[1] if "/" in ep else "/none"
send("OpenSandbox: the public port's endpoint, with the SDK's key", path + "/p", 200,
     headers={"OPEN-SANDBOX-API-KEY": STORE_KEY})
send("E2B: getHost(8000) with the SDK's X-API-Key and X-Access-Token", "/q", 200,
     headers={"Host": HPRIV, "X-API-Key": KEY_A, "X-Access-Token": ACCESS})

# ---- what the box saw -------------------------------------------------------------------------
time.sleep(0.5)
log = ""
for port_log in ("/tmp/hdrs.log",):
    r = srv.exec(A, "cat %s" % port_log)
    log += r.get("stdout") or ""
entries = []
for line in log.splitlines():
    try:
        entries.append(json.loads(line))
    except ValueError:
        pass
seen = {}
for e in entries:
    for k, v in e.get("headers", []):
        if k.lower() == "x-marker":
            seen[v] = e
h.eq(sorted(seen, key=lambda m: int(m[1:])), ["m%d" % i for i in range(1, marker_n[0] + 1)],
     "every request reached the logger (its marker is in the log)", log[-2000:])
for what, secret in SECRETS.items():
    leaks = ["%s: %s" % (e.get("target"), [kv for kv in e.get("headers", []) if secret in kv[1]])
             for e in entries if secret in json.dumps(e)]
    h.eq(leaks, [], "the box never saw the %s" % what)
names = sorted({k for e in entries for k, _ in e.get("headers", [])
                if k.lower() in ("authorization", "x-api-key", "open-sandbox-api-key", "x-access-token")})
h.eq(names, [], "no credential header of agentbox reached the box at all")

# A public port's own Authorization (not agentbox's) still goes to the box.
own = "Bearer app-own-" + secrets.token_hex(4)
send("public: the app's own Authorization", PUB + "/own", 200, headers={"Authorization": own})
r = srv.exec(A, "cat /tmp/hdrs.log")
h.contains(r.get("stdout") or "", own, "... reaches the box (only agentbox's credentials are removed)")
h.done()
