#!/usr/bin/env python3
"""E2B envd streams end when the API key that opened them is deleted (issue
24, item 4; docs/security.md, "E2B access tokens"). Each check passes only
when the attack fails.

The attack: an app's API key leaks. Its holder, speaking the E2B SDK's
protocol as raw HTTP, makes a sandbox through /e2b with the key (X-API-Key),
takes the envdAccessToken of the answer, and opens envd streams with it: a
process's output (process.Process/Start, Connect streaming) and a watch of a
directory (filesystem.Filesystem/WatchDir). The admin deletes the key
(DELETE /v1/keys/ID). envd calls are authorised by the access token, not by
the key: until this was fixed, the streams lived on, and the token kept
opening the box, for as long as the holder liked.

Must hold: both streams end within a few seconds of the delete; a new envd
call with the token is 401 (and /health says "not running"); the token of
the deleted key altered to carry another key's id, or stripped of its key
id, opens nothing; the token the app's other key got, and the admin's
(key-less) token, open the box still, and the streams opened with the
other key's token live on."""
import os
import re
import secrets
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import rawstream  # noqa: E402
from rawstream import closed_by_server  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
END_WITHIN = 3.0  # seconds from the delete's answer to every stream's end

h = abserver.ServerHarness(budget=120)
srv = h.start_server(name="envdkey", token=TOKEN, config={"idle_pause": "1h", "idle_stop": "2h"})

keys = {}
for name in ("leaked", "kept"):
    r = srv.post("/v1/keys", {"app_id": "appa", "name": name})
    h.eq(r.status, 201, "a key %s for appa" % name, r.describe())
    keys[name] = (r.get("key") or "none", r.get("key_id") or "none")
LEAKED, LEAKED_ID = keys["leaked"]
KEPT, KEPT_ID = keys["kept"]


def e2b(method, path, key, body=None):
    """A control-plane call as the E2B SDK makes it: the key in X-API-Key."""
    return srv.request(method, "/e2b" + path, body=body, headers={"X-API-Key": key}, token=None)


r = e2b("POST", "/sandboxes", LEAKED, {"templateID": "base", "timeout": 600})
h.eq(r.status, 201, "the leaked key makes an E2B sandbox", r.describe())
BOX = r.get("sandboxID") or "none"
T_LEAKED = r.get("envdAccessToken") or "none"
r = e2b("GET", "/sandboxes/" + BOX, LEAKED)
h.eq((r.status, r.get("envdAccessToken")), (200, T_LEAKED),
     "GET /e2b/sandboxes/{id} with the leaked key answers the same token", r.describe())
r = e2b("GET", "/sandboxes/" + BOX, KEPT)
h.eq(r.status, 200, "the app's other key sees the sandbox", r.describe())
T_KEPT = r.get("envdAccessToken") or "none"
r = srv.get("/e2b/sandboxes/" + BOX)
h.eq(r.status, 200, "the admin sees the sandbox", r.describe())
T_ADMIN = r.get("envdAccessToken") or "none"
h.ok(re.fullmatch(r"[0-9a-f]{64}", T_ADMIN) is not None,
     "the admin's token is bound to no key (64 hex digits, as before)", T_ADMIN)


def envd(tok, method, body):
    hdr = {"E2b-Sandbox-Id": BOX, "X-Access-Token": tok, "Content-Type": "application/json"}
    return srv.request("POST", "/e2b/envd/" + method, body=body, headers=hdr, token=None)


def stat(tok):
    return envd(tok, "filesystem.Filesystem/Stat", {"path": "/workspace"})


def health(tok):
    hdr = {"E2b-Sandbox-Id": BOX, "X-Access-Token": tok}
    return srv.request("GET", "/e2b/envd/health", headers=hdr, token=None)


for what, tok in (("the leaked key's", T_LEAKED), ("the other key's", T_KEPT), ("the admin's", T_ADMIN)):
    r = stat(tok)
    h.eq(r.status, 200, "control: %s token opens the sandbox" % what, r.describe())


# ---- envd streams on raw sockets: "ended" is the server closing the connection ----------------


def open_envd_stream(tok, method, msg):
    return rawstream.open_envd_stream(srv, BOX, tok, method, msg)


def open_streams(tok, tag):
    out = []
    s, st = open_envd_stream(tok, "process.Process/Start",
                             {"process": {"cmd": "/bin/sleep", "args": ["120"]}, "tag": tag})
    h.eq(st, 200, "a process stream opens (%s)" % tag, "status %d" % st)
    out.append(("a process stream (process.Process/Start)", s))
    s, st = open_envd_stream(tok, "filesystem.Filesystem/WatchDir",
                             {"path": "/workspace", "recursive": False})
    h.eq(st, 200, "a watch stream opens (%s)" % tag, "status %d" % st)
    out.append(("a directory watch (filesystem.Filesystem/WatchDir)", s))
    return out


leaked = open_streams(T_LEAKED, "leaked")
kept = open_streams(T_KEPT, "kept")
time.sleep(0.5)
for name, s in leaked + kept:
    h.ok(not closed_by_server(s, 0.05), "control: %s is open before the delete" % name)

r = srv.delete("/v1/keys/%s" % LEAKED_ID)
h.eq(r.status, 200, "the admin deletes the leaked key", r.describe())
t0 = time.monotonic()
for name, s in leaked:
    left = max(0.05, END_WITHIN - (time.monotonic() - t0))
    h.ok(closed_by_server(s, left),
         "%s opened with the deleted key's token ends within %gs" % (name, END_WITHIN))
for name, s in kept:
    h.ok(not closed_by_server(s, 0.05), "%s opened with the other key's token lives on" % name)

# ---- the token opens nothing new -----------------------------------------------------------------

r = stat(T_LEAKED)
h.eq(r.status, 401, "a new envd call with the deleted key's token: 401", r.describe())
r = envd(T_LEAKED, "process.Process/List", {})
h.eq(r.status, 401, "... nor lists the box's processes", r.describe())
r = srv.request("GET", "/e2b/envd/files?path=/etc/hostname", token=None,
                headers={"E2b-Sandbox-Id": BOX, "X-Access-Token": T_LEAKED})
h.eq(r.status, 401, "... nor reads a file (/files)", r.describe())
s, st = open_envd_stream(T_LEAKED, "filesystem.Filesystem/WatchDir", {"path": "/workspace"})
h.eq(st, 401, "... nor opens a new watch", "status %d" % st)
s.close()
r = health(T_LEAKED)
h.eq(r.status, 502, "envd /health with the deleted key's token: not running", r.describe())

# A token of key K must not become one of key K2 (nor a key-less one) by editing it.
mac = T_LEAKED.rsplit(".", 1)[-1]
for what, forged in (("carrying the other key's id", KEPT_ID + "." + mac),
                     ("stripped of its key id", mac),
                     ("with the MAC of the other key's token", LEAKED_ID + "." + T_KEPT.rsplit(".", 1)[-1])):
    r = stat(forged)
    h.eq(r.status, 401, "the deleted key's token %s: 401" % what, r.describe())

r = stat(T_KEPT)
h.eq(r.status, 200, "the other key's token still opens the box", r.describe())
r = stat(T_ADMIN)
h.eq(r.status, 200, "the admin's token still opens the box", r.describe())

for _, s in leaked + kept:
    s.close()
srv.delete("/e2b/sandboxes/" + BOX)
h.done()
