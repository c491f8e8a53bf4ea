#!/usr/bin/env python3
"""Attacks on the E2B front's envd on per-sandbox host names
(49983-ID.ports_domain) and its signed /files URLs (the SDK's uploadUrl and
downloadUrl: ?path=&username=&signature=v1_...&signature_expiration=,
docs/compat-e2b.md). Each attack must fail: a signed URL of box A used on
box B's host; a read signature used to write; an expired signature; a
signature for another path or another user; a tampered path; a signature
made with another box's token; a host naming an unknown box, or another
app's box, with app A's key or token; a host and an E2b-Sandbox-Id naming
two boxes. What a caller may do works: the signed URLs of the box's own
token (key-less and key-bound), with and without an expiration, on the
host name and with E2b-Sandbox-Id on /e2b/envd; the access token on the
host name; a key-bound signature stops working when its key is deleted."""
import base64
import hashlib
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

DOMAIN = "sbx.e2burl.test"
h = abserver.ServerHarness(budget=120)
TOKEN = "e2b-signed-token-%d-0123456789abcdef" % os.getpid()
srv = h.start_server(token=TOKEN, config={"ports_domain": DOMAIN})


def key_of(app):
    r = srv.post("/v1/keys", {"app_id": app})
    h.eq(r.status, 201, "a key of app %s" % app, r.describe())
    return r.get("key") or "", r.get("key_id") or ""


KA, KA_ID = key_of("app-a")
KB, _ = key_of("app-b")


def sandbox(key):
    r = srv.post("/e2b/v2/sandboxes", {"timeout": 300, "secure": True}, headers={"X-API-Key": key}, token=None)
    h.eq(r.status, 201, "an E2B sandbox", r.describe())
    return r.get("sandboxID") or "", r.get("envdAccessToken") or ""


A, TA = sandbox(TOKEN)       # the admin's box: a key-less token
A2, TA2 = sandbox(KA)        # app A's box: a token bound to KA
B, TB = sandbox(KB)          # app B's box


def host(box):
    return "49983-%s.%s:%d" % (box, DOMAIN, srv.port)


def sign(path, op, user, tok, exp=None):
    raw = "%s:%s:%s:%s" % (path, op, user, tok)
    if exp is not None:
        raw += ":%d" % exp
    return "v1_" + base64.b64encode(hashlib.sha256(raw.encode()).digest()).decode().rstrip("=")


def signed(path, op, tok, user=None, exp=None):
    q = {"path": path}
    if user is not None:
        q["username"] = user
    q["signature"] = sign(path, op, user or "", tok, exp)
    if exp is not None:
        q["signature_expiration"] = str(exp)
    return q


def put(box, q, body, headers=None):
    hdr = {"Host": host(box), "Content-Type": "application/octet-stream"}
    hdr.update(headers or {})
    return srv.request("POST", "/files", body=body, headers=hdr, token=None, query=q)


def get(box, q, headers=None):
    hdr = {"Host": host(box)}
    hdr.update(headers or {})
    return srv.request("GET", "/files", headers=hdr, token=None, query=q)


# What works: the box's own signed URLs, on its host name
body = b"signed upload %d\n" % os.getpid()
r = put(A, signed("/tmp/a.txt", "write", TA), body)
h.eq(r.status, 200, "a signed upload URL of box A on A's host: 200", r.describe())
r = get(A, signed("/tmp/a.txt", "read", TA))
h.ok(r.status == 200 and r.body == body, "the signed download URL reads it back", r.describe())
later = int(time.time()) + 120
r = get(A, signed("/tmp/a.txt", "read", TA, user="user", exp=later))
h.ok(r.status == 200 and r.body == body, "with a username and an expiration to come: 200", r.describe())
r = get(A, {"path": "/tmp/a.txt"}, headers={"X-Access-Token": TA})
h.ok(r.status == 200 and r.body == body, "the access token on the host name: 200", r.describe())
r = get(A, signed("/tmp/a.txt", "read", TA), headers={"X-Access-Token": ""})
h.ok(r.status == 200 and r.body == body, "a signed URL with an empty X-Access-Token (none, as in envd)",
     r.describe())
r = get(A, signed("/tmp/a.txt", "read", TA), headers={"X-Access-Token": TB})
h.eq(r.status, 401, "a good signature with a wrong X-Access-Token: the token is checked, 401", r.describe())
r = srv.request("GET", "/e2b/envd/files", headers={"E2b-Sandbox-Id": A}, token=None,
                query=signed("/tmp/a.txt", "read", TA))
h.ok(r.status == 200 and r.body == body, "a signed URL on /e2b/envd with E2b-Sandbox-Id: 200", r.describe())
r = put(A2, signed("/tmp/k.txt", "write", TA2), b"key-bound")
h.eq(r.status, 200, "a URL signed with a key-bound token (app A's box): 200", r.describe())

# 1. box A's signed URL on box B's host
r = get(B, signed("/tmp/a.txt", "read", TA))
h.eq(r.status, 401, "box A's signed download URL on box B's host: 401", r.describe())
r = put(B, signed("/tmp/evil.txt", "write", TA), b"x")
h.eq(r.status, 401, "box A's signed upload URL on box B's host: 401", r.describe())

# 2. the write operation with a read signature
q = signed("/tmp/a.txt", "read", TA)
r = put(A, q, b"overwritten")
h.eq(r.status, 401, "a read signature used to upload: 401", r.describe())
h.ok(get(A, signed("/tmp/a.txt", "read", TA)).body == body, "... and the file is unchanged")
r = get(A, signed("/tmp/a.txt", "write", TA))
h.eq(r.status, 401, "a write signature used to download: 401", r.describe())

# 3. an expired signature (and a malformed expiration)
past = int(time.time()) - 5
r = get(A, signed("/tmp/a.txt", "read", TA, exp=past))
h.eq(r.status, 401, "an expired signature: 401", r.describe())
q = signed("/tmp/a.txt", "read", TA, exp=past)
q["signature_expiration"] = str(later)
r = get(A, q)
h.eq(r.status, 401, "an expired signature with its expiration moved on: 401", r.describe())
q = signed("/tmp/a.txt", "read", TA)
q["signature_expiration"] = "soon"
r = get(A, q)
h.eq(r.status, 400, "a malformed signature_expiration: 400", r.describe())
q = signed("/tmp/a.txt", "read", TA, exp=later)
del q["signature_expiration"]
r = get(A, q)
h.eq(r.status, 401, "a signature with an expiration, sent without it: 401", r.describe())

# 4. a signature for another path or another user; a tampered path
q = signed("/tmp/other.txt", "read", TA)
q["path"] = "/tmp/a.txt"
r = get(A, q)
h.eq(r.status, 401, "a signature for another path: 401", r.describe())
q = signed("/tmp/a.txt", "read", TA, user="user")
q["username"] = "root"
r = get(A, q)
h.eq(r.status, 401, "a signature for another user: 401", r.describe())
q = signed("/tmp/a.txt", "read", TA)
del q["path"]
q = dict(q, path="/tmp/../etc/passwd")
r = get(A, q)
h.eq(r.status, 401, "a tampered path: 401", r.describe())
q = signed("/tmp/up.txt", "write", TA)
q["path"] = "/etc/profile.d/evil.sh"
r = put(A, q, b"echo owned")
h.eq(r.status, 401, "an upload URL with its path tampered: 401", r.describe())
r = get(A, {"path": "/tmp/a.txt", "signature": "v1_" + "A" * 43})
h.eq(r.status, 401, "a made-up signature: 401", r.describe())
r = get(A, {"path": "/tmp/a.txt", "signature": sign("/tmp/a.txt", "read", "", TA)[3:]})
h.eq(r.status, 401, "a signature without its v1_ prefix: 401", r.describe())

# 5. a signature made with another box's token, on this box
r = get(A, signed("/tmp/a.txt", "read", TB))
h.eq(r.status, 401, "box A's file with a URL signed by box B's token: 401", r.describe())

# 6. a host naming an unknown box, or another app's box
r = get("nosuchboxnosuchbox00", signed("/tmp/a.txt", "read", TA))
h.eq(r.status, 401, "a host naming an unknown box: 401", r.describe())
r = get(B, {"path": "/tmp/a.txt"}, headers={"X-API-Key": KA})
h.eq(r.status, 401, "app B's box's host with app A's key: 401", r.describe())
r = get(B, {"path": "/tmp/a.txt"}, headers={"X-Access-Token": TA2})
h.eq(r.status, 401, "app B's box's host with app A's box's token: 401", r.describe())
r = srv.request("POST", "/filesystem.Filesystem/ListDir", body={"path": "/"}, token=None,
                headers={"Host": host(B), "X-Access-Token": TA2, "X-API-Key": KA})
h.eq(r.status, 401, "an RPC on app B's box's host with app A's token and key: 401", r.describe())
r = srv.request("GET", "/health", headers={"Host": host(B), "X-Access-Token": TA}, token=None)
h.eq(r.status, 502, "/health on box B's host with box A's token: not running (502)", r.describe())
r = srv.request("GET", "/health", headers={"Host": host(A), "X-Access-Token": TA}, token=None)
h.eq(r.status, 204, "/health on box A's host with its token: 204", r.describe())

# 7. the host and E2b-Sandbox-Id naming two boxes: the host is not overridden
r = get(B, {"path": "/tmp/a.txt"}, headers={"X-Access-Token": TA, "E2b-Sandbox-Id": A})
h.eq(r.status, 400, "box B's host with E2b-Sandbox-Id of box A (and A's token): 400", r.describe())

# 8. the control plane is not reachable through an envd host
r = srv.request("GET", "/e2b/sandboxes/" + B, headers={"Host": host(B), "X-API-Key": KA}, token=None)
h.eq(r.status, 404, "/e2b/sandboxes on an envd host: no such route (404)", r.describe())

# 9. a key-bound signature dies with its key
r = srv.request("DELETE", "/v1/keys/" + KA_ID)
h.eq(r.status, 200, "app A's key deleted", r.describe())
r = get(A2, signed("/tmp/k.txt", "read", TA2))
h.eq(r.status, 401, "a URL signed with the deleted key's token: 401", r.describe())

for box in (A, A2, B):
    srv.request("DELETE", "/v1/sandboxes/" + box)
h.done()
