#!/usr/bin/env python3
"""Attacks on tenancy through the OpenSandbox front's endpoint route,
/opensandbox/v1/sandboxes/{id}/proxy/{port}/... (execd at 44772, the egress
sidecar at 18080: the endpoints the lifecycle API hands out). App B, with
its own valid key, goes for app A's box through every execd call and the
egress policy there, in both of the SDK's key headers, through B's own box
(A's command and session ids), with no key and a wrong one, and with a
1 GiB upload head that must be refused before any body is read. Each
attack passes only when it fails: 404 for another app's box (existence not
told), 401 without a valid key, and A's box unchanged afterwards (no
marker file of B's, A's command, session, files and policy as A left
them). A's own calls through the same route work, so the refusals are not
those of a route that is missing."""
import json
import os
import secrets
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import attacklib  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
KEY_A = "key-a-" + secrets.token_hex(8)
KEY_B = "key-b-" + secrets.token_hex(8)
PWN = "/tmp/pwned-" + secrets.token_hex(4)
h = abserver.ServerHarness(budget=120)
srv = h.start_server(name="osbproxy", token=TOKEN, config={
    "idle_pause": "1h", "idle_stop": "2h",
    "api_keys": [{"key": KEY_A, "app_id": "appa"}, {"key": KEY_B, "app_id": "appb"}]})
OSB_A = {"OPEN-SANDBOX-API-KEY": KEY_A}
OSB_B = {"OPEN-SANDBOX-API-KEY": KEY_B}


def call(method, path, body=None, headers=None):
    return srv.request(method, path, body=body, headers=headers, token=None)


def make_box(hdr):
    r = call("POST", "/opensandbox/v1/sandboxes", {"image": {"uri": "base"}, "entrypoint": ["tail", "-f", "/dev/null"],
                                                   "timeout": 600,
                                                   "networkPolicy": {"defaultAction": "deny",
                                                                     "egress": [{"action": "allow",
                                                                                 "target": "example.com"}]}}, hdr)
    h.eq(r.status, 202, "an OpenSandbox sandbox", r.describe())
    return r.get("id") or "none"


OA = make_box(OSB_A)
OB = make_box(OSB_B)

# ---- A's endpoints point at the route, and A's calls work through it --------------------
for port in (44772, 18080):
    r = call("GET", "/opensandbox/v1/sandboxes/%s/endpoints/%d" % (OA, port), None, OSB_A)
    h.ok(r.status == 200 and (r.get("endpoint") or "").endswith("/opensandbox/v1/sandboxes/%s/proxy/%d" % (OA, port)),
         "app A: its endpoint for port %d is the proxy route" % port, r.describe())
PA = "/opensandbox/v1/sandboxes/%s/proxy/44772" % OA
r = call("POST", PA + "/command", {"command": "echo a-secret-output; sleep 300", "background": True}, OSB_A)
CID = ""
for line in r.text.splitlines():
    if line.startswith("data:") and line[5:].strip().startswith("{"):
        CID = json.loads(line[5:]).get("text") or CID
h.ok(r.status == 200 and CID.startswith("cmd-"), "app A: a background command through the route", r.describe())
r = call("POST", PA + "/session", {}, OSB_A)
SID = r.get("session_id") or "none"
h.ok(r.status == 200 and SID != "none", "app A: a session through the route", r.describe())
r = call("POST", PA + "/directories", {"/workspace/keep": {"mode": 755}}, OSB_A)
h.eq(r.status, 200, "app A: a directory through the route", r.describe())
r = call("GET", "/opensandbox/v1/sandboxes/%s/proxy/18080/policy" % OA, None, OSB_A)
h.ok(r.status == 200 and "example.com" in r.text, "app A: its egress policy through the route", r.describe())


def refused(r, what, ok=(404,)):
    h.ok(r.status in ok, "%s -> %s (got %d)" % (what, "/".join(map(str, ok)), r.status), r.describe())
    h.ok("a-secret-output" not in r.text, "no output of A's command in the answer to: " + what, r.describe())


MP = "multipart/form-data; boundary=XyZ"
EXECD = attacklib.osb_execd_calls(CID, SID, PWN)
EGRESS = [("GET", "/policy", None, None),
          ("PATCH", "/policy", [{"action": "allow", "target": "evil.example"}], None),
          ("DELETE", "/policy", ["example.com"], None)]

# ---- B's key on A's box, in both headers the front takes ----------------------------------
for port, calls in ((44772, EXECD), (18080, EGRESS)):
    for method, sub, body, ctype in calls:
        for hdr, how in ((OSB_B, "OPEN-SANDBOX-API-KEY"), ({"Authorization": "Bearer " + KEY_B}, "Bearer")):
            hdr = dict(hdr)
            if ctype:
                hdr["Content-Type"] = ctype
            r = call(method, "/opensandbox/v1/sandboxes/%s/proxy/%d%s" % (OA, port, sub), body, hdr)
            refused(r, "app B (%s): %d %s %s of A's box" % (how, port, method, sub.split("?")[0]))
        # no key, a wrong key
        for hdr, how in (({}, "no key"), ({"OPEN-SANDBOX-API-KEY": "wrong-" + KEY_A}, "a wrong key")):
            hdr = dict(hdr)
            if ctype:
                hdr["Content-Type"] = ctype
            r = call(method, "/opensandbox/v1/sandboxes/%s/proxy/%d%s" % (OA, port, sub), body, hdr)
            refused(r, "%s: %d %s %s of A's box" % (how, port, method, sub.split("?")[0]), ok=(401,))

# ---- B's own box does not reach A's command or session ----------------------------------
PB = "/opensandbox/v1/sandboxes/%s/proxy/44772" % OB
for method, sub, body in (("GET", "/command/status/" + CID, None), ("GET", "/command/%s/logs" % CID, None),
                          ("DELETE", "/command?id=" + CID, None),
                          ("POST", "/session/%s/run" % SID, {"command": "touch " + PWN}),
                          ("DELETE", "/session/" + SID, None)):
    r = call(method, PB + sub, body, OSB_B)
    refused(r, "app B: %s %s of A's command or session through B's own box" % (method, sub.split("?")[0]))


# ---- an upload's head: refused before the body is read -----------------------------------
def head_only(path, headers):
    """Sends a 1 GiB upload's head with Expect: 100-continue; the final
    status, or 100 when the server would read the body."""
    s = socket.create_connection((srv.host, srv.port), timeout=5)
    head = "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\nExpect: 100-continue\r\n" % (path, 1 << 30)
    head += "".join("%s: %s\r\n" % kv for kv in headers.items())
    s.sendall((head + "\r\n").encode())
    got = b""
    end = time.monotonic() + 4
    s.settimeout(0.2)
    while time.monotonic() < end and b"\r\n\r\n" not in got:
        try:
            c = s.recv(65536)
        except socket.timeout:
            continue
        if not c:
            break
        got += c
    s.close()
    return int(got.split(b" ")[1]) if got.startswith(b"HTTP/1.1 ") else 0


for hdr, how, want in ((dict(OSB_B), "app B's key", (404,)), ({}, "no key", (401,))):
    hdr["Content-Type"] = MP
    st = head_only(PA + "/files/upload", hdr)
    h.ok(st in want, "a 1 GiB upload to A's box with %s: refused from its head (%s, got %d)"
         % (how, "/".join(map(str, want)), st))

# ---- A's box is unchanged -------------------------------------------------------------------
r = srv.get("/v1/sandboxes/" + OA)
h.ok(r.status == 200 and r.get("status") == "running" and r.get("app_id") == "appa",
     "A's box still runs and is still app A's", r.describe())
r = srv.post("/v1/sandboxes/%s/exec" % OA, {"command": "ls -d /workspace/keep; ls %s 2>&1" % PWN})
h.ok(r.status == 200 and "/workspace/keep" in (r.get("stdout") or "") and "No such file" in (r.get("stdout") or ""),
     "A's files are intact and nothing of B made %s" % PWN, r.describe())
r = call("GET", PA + "/command/status/" + CID, None, OSB_A)
h.ok(r.status == 200 and r.get("running") is True, "A's background command still runs", r.describe())
r = call("POST", PA + "/session/%s/run" % SID, {"command": "echo still-mine"}, OSB_A)
h.ok(r.status == 200 and "still-mine" in r.text, "A's session still runs A's commands", r.describe())
r = call("GET", "/opensandbox/v1/sandboxes/%s/proxy/18080/policy" % OA, None, OSB_A)
h.ok(r.status == 200 and "example.com" in r.text and "evil.example" not in r.text,
     "A's egress policy is as A left it", r.describe())
h.done()
