#!/usr/bin/env python3
"""No work before auth (docs/security.md, "Auth before the body"): every
route decides from the request's head whether the caller may send a body.
Each probe sends only a head with `Expect: 100-continue` and a large
Content-Length (1 GiB for uploads; under max_body for JSON routes, so that
a size check cannot answer first) and no credentials, wrong ones, or another
app's. The attack succeeds when the server says `100 Continue` (it would
read, and for an upload spool to DATA/tmp, what the client sends) or holds
a spool file open for it; each check passes only when the answer is
401/403 (404 for another app's box) at once, with no spool file.
Routes tried: agentbox's own (uploads, JSON, MCP, the admin's uploads), the
code runner's, E2B's control plane and envd (/files, process and filesystem
RPCs), OpenSandbox's (API and execd upload) and a box's port proxy."""
import os
import secrets
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
KEY_A = "key-a-" + secrets.token_hex(8)
KEY_B = "key-b-" + secrets.token_hex(8)
GIB = 1 << 30
JSON_LEN = 200000  # under max_body (1 MiB)
h = abserver.ServerHarness(budget=150)
srv = h.start_server(name="preauth", token=TOKEN, config={
    "idle_pause": "1h", "idle_stop": "2h",
    "api_keys": [{"key": KEY_A, "app_id": "appa"}, {"key": KEY_B, "app_id": "appb"}]})
TMP = os.path.realpath(os.path.join(srv.data, "tmp"))


def spool_fds():
    """The server's open files in DATA/tmp (an upload's spool is one)."""
    out = []
    d = "/proc/%d/fd" % srv.proc.pid
    for fd in os.listdir(d):
        try:
            t = os.readlink(os.path.join(d, fd))
        except OSError:
            continue
        if t.startswith(TMP + "/"):
            out.append(t)
    return out


def probe(method, path, headers, length):
    """Sends the head only; returns (first status line, final status,
    spool files seen while the connection was open)."""
    s = socket.create_connection((srv.host, srv.port), timeout=5)
    head = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\nExpect: 100-continue\r\n" % (
        method, path, length)
    head += "".join("%s: %s\r\n" % kv for kv in headers.items())
    s.sendall((head + "\r\n").encode())
    got = b""
    end = time.monotonic() + 4
    s.settimeout(0.2)
    while time.monotonic() < end:
        try:
            c = s.recv(65536)
        except socket.timeout:
            if got.startswith(b"HTTP/1.1 100"):
                break  # the server waits for the body
            continue
        if not c:
            break
        got += c
        if b"\r\n\r\n" in got and not got.startswith(b"HTTP/1.1 100"):
            break
    time.sleep(0.1)
    fds = spool_fds()
    s.close()
    lines = got.split(b"\r\n")
    first = lines[0].decode(errors="replace") if got else "(nothing)"
    final = None
    for ln in lines:
        if ln.startswith(b"HTTP/1.1 ") and not ln.startswith(b"HTTP/1.1 100"):
            final = int(ln.split()[1])
            break
    return first, final, fds


def refused(name, method, path, headers, length, want=(401, 403)):
    first, final, fds = probe(method, path, headers, length)
    h.ok(final in want and not first.startswith("HTTP/1.1 100") and not fds,
         "%s: %s at once, no 100 Continue, nothing spooled" % (name, "/".join(map(str, want))),
         "first line %r, final status %r, spool files %r" % (first, final, fds))


def bearer(k):
    return {"Authorization": "Bearer " + k}


BAD = "bad-" + secrets.token_hex(8)

r = srv.post("/v1/sandboxes", {"thread_id": "preauth-" + secrets.token_hex(4)}, token=KEY_A)
h.eq(r.status, 201, "app A has a box", r.describe())
A = r.get("id") or "none"
r = srv.post("/e2b/sandboxes", {"templateID": "base", "timeout": 600}, token=KEY_A)
h.eq(r.status, 201, "app A has an E2B sandbox", r.describe())
SA, TA = r.get("sandboxID") or "none", r.get("envdAccessToken") or "none"
r = srv.post("/e2b/sandboxes", {"templateID": "base", "timeout": 600}, token=KEY_B)
h.eq(r.status, 201, "app B has an E2B sandbox", r.describe())
SB, TB = r.get("sandboxID") or "none", r.get("envdAccessToken") or "none"

# The probe sees what it looks for: a caller who may upload gets 100 Continue and a spool.
first, final, fds = probe("PUT", "/v1/sandboxes/%s/files?path=/workspace/x" % A, bearer(KEY_A), GIB)
h.ok(first.startswith("HTTP/1.1 100") and fds, "the probe's control: app A's own upload is invited and spooled",
     "first line %r, spool files %r" % (first, fds))
first, final, fds = probe("POST", "/e2b/envd/files?path=/workspace/x",
                          {"E2b-Sandbox-Id": SA, "X-Access-Token": TA}, GIB)
h.ok(first.startswith("HTTP/1.1 100") and fds, "... and so is an envd upload with the box's token",
     "first line %r, spool files %r" % (first, fds))
h.ok(abserver.wait_for(lambda: not spool_fds(), timeout=10), "the control uploads' spools are closed")

# ---- E2B envd: the access token is checked from the head ---------------------------------------

ENVD_BAD = {"E2b-Sandbox-Id": SA, "X-Access-Token": "0" * 64}
ENVD_OTHER = {"E2b-Sandbox-Id": SA, "X-Access-Token": TB}
ENVD_NONE = {"E2b-Sandbox-Id": SA}
refused("envd POST /files, a wrong token", "POST", "/e2b/envd/files?path=/workspace/x", ENVD_BAD, GIB)
refused("envd POST /files, another box's token", "POST", "/e2b/envd/files?path=/workspace/x", ENVD_OTHER, GIB)
refused("envd POST /files, no token", "POST", "/e2b/envd/files?path=/workspace/x", ENVD_NONE, GIB)
refused("envd POST /files, no sandbox id", "POST", "/e2b/envd/files?path=/workspace/x",
        {"X-Access-Token": TA}, GIB, want=(400, 401))
for m in ("process.Process/Start", "process.Process/StreamInput", "filesystem.Filesystem/ListDir",
          "filesystem.Filesystem/WatchDir"):
    refused("envd %s, a wrong token" % m, "POST", "/e2b/envd/" + m,
            dict(ENVD_BAD, **{"Content-Type": "application/json"}), JSON_LEN)
refused("envd process.Process/Start, another box's token", "POST", "/e2b/envd/process.Process/Start",
        dict(ENVD_OTHER, **{"Content-Type": "application/json"}), JSON_LEN)

# ---- the code runner's routes -----------------------------------------------------------------

refused("POST /sandbox/js, no token", "POST", "/sandbox/js", {"Content-Type": "application/json"}, JSON_LEN)
refused("POST /sandbox/python, a wrong token", "POST", "/sandbox/python",
        dict(bearer(BAD), **{"Content-Type": "application/json"}), JSON_LEN)

# ---- agentbox's own routes --------------------------------------------------------------------

refused("PUT files, no token", "PUT", "/v1/sandboxes/%s/files?path=/workspace/x" % A, {}, GIB)
refused("PUT files, a wrong key", "PUT", "/v1/sandboxes/%s/files?path=/workspace/x" % A, bearer(BAD), GIB)
refused("PUT files, another app's key", "PUT", "/v1/sandboxes/%s/files?path=/workspace/x" % A, bearer(KEY_B),
        GIB, want=(401, 403, 404))
refused("PUT files (extract), another app's key", "PUT",
        "/v1/sandboxes/%s/files?path=/workspace&extract=1" % A, bearer(KEY_B), GIB, want=(401, 403, 404))
refused("POST exec, no token", "POST", "/v1/sandboxes/%s/exec" % A, {"Content-Type": "application/json"},
        JSON_LEN)
refused("POST /v1/sandboxes, a wrong key", "POST", "/v1/sandboxes", bearer(BAD), JSON_LEN)
refused("POST /mcp, no token", "POST", "/mcp", {"Content-Type": "application/json"}, JSON_LEN)
refused("PUT a skill (admin's upload), an app's key", "PUT", "/v1/skills/evil", bearer(KEY_A), GIB)
refused("POST images/import (admin's upload), an app's key", "POST", "/v1/images/import", bearer(KEY_A), GIB)
refused("POST a skill to validate, no token", "POST", "/v1/skills/x/validate", {}, GIB)

# ---- E2B's control plane and OpenSandbox --------------------------------------------------------

refused("E2B POST /sandboxes, no key", "POST", "/e2b/sandboxes", {"Content-Type": "application/json"}, JSON_LEN)
refused("E2B POST /sandboxes, a wrong X-API-Key", "POST", "/e2b/sandboxes",
        {"X-API-Key": BAD, "Content-Type": "application/json"}, JSON_LEN)
refused("OpenSandbox POST /sandboxes, a wrong key", "POST", "/opensandbox/v1/sandboxes",
        {"OPEN-SANDBOX-API-KEY": BAD, "Content-Type": "application/json"}, JSON_LEN)
refused("OpenSandbox execd upload, no key", "POST", "/opensandbox/execd/%s/files/upload" % A,
        {"Content-Type": "multipart/form-data; boundary=x"}, GIB)
refused("OpenSandbox execd upload, another app's key", "POST", "/opensandbox/execd/%s/files/upload" % A,
        {"OPEN-SANDBOX-API-KEY": KEY_B, "Content-Type": "multipart/form-data; boundary=x"}, GIB,
        want=(401, 403, 404))

# ---- a box's port -------------------------------------------------------------------------------

refused("POST to a box's port, no token", "POST", "/v1/sandboxes/%s/ports/8000/x" % A, {}, GIB)
refused("POST to a box's port, a wrong key", "POST", "/v1/sandboxes/%s/ports/8000/x" % A, bearer(BAD), GIB)
refused("POST to a box's port, another app's key", "POST", "/v1/sandboxes/%s/ports/8000/x" % A, bearer(KEY_B),
        GIB, want=(401, 403, 404))

h.ok(not spool_fds(), "no spool file is left open", repr(spool_fds()))
h.ok(srv.get("/health", token=None).status == 200, "the server is still up")
srv.delete("/v1/sandboxes/" + A, token=KEY_A)
srv.delete("/e2b/sandboxes/" + SA, token=KEY_A)
srv.delete("/e2b/sandboxes/" + SB, token=KEY_B)
h.done()
