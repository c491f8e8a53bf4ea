#!/usr/bin/env python3
"""Attacks on E2B's envd access tokens (docs/security.md, "E2B access
tokens"). A token opens one box: the creation it was issued for (not any box
that later has the same id), only while that box exists, and acts as the
box's app. Each check passes only when the attack fails:
- an app's key does not get another app's box (nor its envdAccessToken)
  from GET /e2b/sandboxes/{id}, and one box's token opens no other box;
- a token of a deleted box opens nothing (401, not a call on a missing box);
- app A keeps the token of a box whose id comes from a thread_id, deletes
  the box; app B makes a box of the same thread (an id of B's), and a box
  of an explicit id A used before (explicit ids are first-come across
  apps): A's old tokens must not read B's files nor run commands there;
- the same within one app: a box re-made with the same id is not opened by
  the first one's token;
- the token of a live box still works after a restart (nothing lost), and
  a forged or truncated token is refused;
- envd's /health tells whether a box runs only to the holder of its token
  (without it: 502 as for an unknown id, so it is no oracle of which ids
  exist)."""
import os
import secrets
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
KEY_A = "key-a-" + secrets.token_hex(8)
KEY_B = "key-b-" + secrets.token_hex(8)
h = abserver.ServerHarness(budget=150)
srv = h.start_server(name="e2btok", token=TOKEN, config={
    "idle_pause": "1h", "idle_stop": "2h",
    "api_keys": [{"key": KEY_A, "app_id": "appa"}, {"key": KEY_B, "app_id": "appb"}]})


def envd(box, tok, method, body):
    hdr = {"E2b-Sandbox-Id": box, "X-Access-Token": tok, "Content-Type": "application/json"}
    return srv.request("POST", "/e2b/envd/" + method, body=body, headers=hdr, token=None)


def envd_read(box, tok, path):
    hdr = {"E2b-Sandbox-Id": box, "X-Access-Token": tok}
    return srv.request("GET", "/e2b/envd/files?path=" + path, headers=hdr, token=None)


def e2b_token(box, key):
    r = srv.get("/e2b/sandboxes/" + box, token=key)
    return r, r.get("envdAccessToken") if isinstance(r.json, dict) else None


def health(box, tok=None):
    hdr = {"E2b-Sandbox-Id": box}
    if tok:
        hdr["X-Access-Token"] = tok
    return srv.request("GET", "/e2b/envd/health", headers=hdr, token=None)


def stat_ok(box, tok):
    return envd(box, tok, "filesystem.Filesystem/Stat", {"path": "/workspace"})


# ---- a box of app A through the E2B front ------------------------------------------------------

r = srv.post("/e2b/sandboxes", {"templateID": "base", "timeout": 600}, token=KEY_A)
h.eq(r.status, 201, "app A makes an E2B sandbox", r.describe())
SA, TA = r.get("sandboxID") or "none", r.get("envdAccessToken") or "none"
r = stat_ok(SA, TA)
h.eq(r.status, 200, "its token opens it (the attacks below can fail)", r.describe())

r, tok = e2b_token(SA, KEY_B)
h.eq(r.status, 404, "app B's key: GET /e2b/sandboxes/{A's box} is not found", r.describe())
h.ok(tok is None and TA.encode() not in (r.body or b""), "... and gives no envdAccessToken", r.describe())
r, tok = e2b_token(SA, KEY_A)
h.eq(tok, TA, "app A's key gets the same token again", r.describe())

r = srv.post("/e2b/sandboxes", {"templateID": "base", "timeout": 600}, token=KEY_B)
h.eq(r.status, 201, "app B makes an E2B sandbox", r.describe())
SB, TSB = r.get("sandboxID") or "none", r.get("envdAccessToken") or "none"
r = stat_ok(SB, TSB)
h.eq(r.status, 200, "B's token opens B's sandbox", r.describe())
r = stat_ok(SB, TA)
h.eq(r.status, 401, "A's token with B's sandbox id: 401", r.describe())
r = stat_ok(SA, TA[:-1])
h.eq(r.status, 401, "a truncated token: 401", r.describe())
r = stat_ok(SA, "0" * 64)
h.eq(r.status, 401, "a forged token: 401", r.describe())
r = health(SA, TA)
h.eq(r.status, 204, "envd /health with the box's token: running", r.describe())
r = health("nosuchbox" + secrets.token_hex(4))
h.eq(r.status, 502, "envd /health of an unknown id: 502", r.describe())
r = health(SA)
h.eq(r.status, 502, "envd /health of A's box without its token: 502 as for an unknown id (no oracle)",
     r.describe())
r = health(SA, TSB)
h.eq(r.status, 502, "... and with another box's token", r.describe())

# ---- a token outlives nothing: restart keeps it, delete ends it --------------------------------

why = srv.restart()
if why:
    h.bail_server(srv, why)
r = stat_ok(SA, TA)
h.eq(r.status, 200, "after a restart the live box's token still opens it", r.describe())
r = srv.delete("/e2b/sandboxes/" + SA, token=KEY_A)
h.eq(r.status, 204, "app A kills its sandbox", r.describe())
r = stat_ok(SA, TA)
h.eq(r.status, 401, "the deleted box's token: 401 (not a call on a missing box)", r.describe())
r = health(SA, TA)
h.eq(r.status, 502, "envd /health with the deleted box's token: not running", r.describe())

# ---- the same thread, another app ---------------------------------------------------------------
# A thread's box id is per app (docs/api.md): app B's box of A's thread has an
# id of its own, and A's token of its box opens neither B's box nor, once the
# box is deleted, anything.

THREAD = "thread-" + secrets.token_hex(6)
X = abserver.thread_box_id(THREAD, "appa")
r = srv.post("/v1/sandboxes", {"thread_id": THREAD}, token=KEY_A)
h.eq((r.status, r.get("id")), (201, X), "app A makes the box of a thread", r.describe())
r, TX = e2b_token(X, KEY_A)
h.ok(r.status == 200 and isinstance(TX, str), "app A takes its envd access token", r.describe())
TX = TX or "none"
r = envd_read(X, TX, "/etc/hostname")
h.eq(r.status, 200, "the token reads A's box", r.describe())
r = srv.delete("/v1/sandboxes/" + X, token=KEY_A)
h.ok(r.status in (200, 202, 204), "app A deletes the box", r.describe())

XB = abserver.thread_box_id(THREAD, "appb")
r = srv.post("/v1/sandboxes", {"thread_id": THREAD}, token=KEY_B)
h.eq((r.status, r.get("id")), (201, XB), "app B makes a box of the same thread: an id of B's", r.describe())
SECRET = "B-SECRET-" + secrets.token_hex(8)
r = srv.put(srv.file_path(XB, "/workspace/secret.txt"), SECRET, token=KEY_B)
h.ok(r.status in (200, 201, 204), "app B keeps a secret in it", r.describe())

for box in (X, XB):
    r = envd_read(box, TX, "/workspace/secret.txt")
    h.eq(r.status, 401, "A's old token does not read %s" % box, r.describe())
    h.ok(SECRET.encode() not in (r.body or b""), "... and B's secret does not leak", r.describe())
    r = stat_ok(box, TX)
    h.eq(r.status, 401, "... nor stat in it", r.describe())
    r = envd(box, TX, "process.Process/List", {})
    h.eq(r.status, 401, "... nor list its processes", r.describe())
    marker = "/workspace/pwned-" + secrets.token_hex(4)
    r = envd(box, TX, "filesystem.Filesystem/MakeDir", {"path": marker})
    h.eq(r.status, 401, "... nor make a directory in it", r.describe())
r = srv.exec(XB, "ls /workspace | grep -c pwned || true", token=KEY_B)
h.eq((r.get("stdout") or "").strip(), "0", "B's box is untouched", r.describe())

r, TB = e2b_token(XB, KEY_B)
h.ok(isinstance(TB, str) and TB != TX, "B's own token of its box is another one", r.describe())
r = envd_read(XB, TB or "none", "/workspace/secret.txt")
h.eq((r.status, r.body), (200, SECRET.encode()), "B's own token reads its box", r.describe())
X = XB

# ---- one id, two apps: an explicit id is first-come across apps -----------------------------------

Y = "shared-" + secrets.token_hex(5)
r = srv.post("/v1/sandboxes", {"id": Y}, token=KEY_A)
h.eq((r.status, r.get("id")), (201, Y), "app A makes a box with an explicit id", r.describe())
r, TY = e2b_token(Y, KEY_A)
h.ok(r.status == 200 and isinstance(TY, str), "app A takes its envd access token", r.describe())
TY = TY or "none"
r = srv.delete("/v1/sandboxes/" + Y, token=KEY_A)
h.ok(r.status in (200, 202, 204), "app A deletes the box", r.describe())
# a delete is asynchronous: the id is free once the box is gone
abserver.wait_for(lambda: srv.get("/v1/sandboxes/" + Y).status == 404, timeout=30)
r = srv.post("/v1/sandboxes", {"id": Y}, token=KEY_B)
h.eq((r.status, r.get("id")), (201, Y), "app B makes a box of the same id", r.describe())
SECRET_Y = "B-SECRET-" + secrets.token_hex(8)
r = srv.put(srv.file_path(Y, "/workspace/secret.txt"), SECRET_Y, token=KEY_B)
h.ok(r.status in (200, 201, 204), "app B keeps a secret in it", r.describe())
r = envd_read(Y, TY, "/workspace/secret.txt")
h.eq(r.status, 401, "A's old token does not read B's box of the same id", r.describe())
h.ok(SECRET_Y.encode() not in (r.body or b""), "... and B's secret does not leak", r.describe())
marker = "/workspace/pwned-" + secrets.token_hex(4)
r = envd(Y, TY, "filesystem.Filesystem/MakeDir", {"path": marker})
h.eq(r.status, 401, "... nor make a directory in it", r.describe())
r = srv.exec(Y, "test -e %s && echo PWNED || echo clean" % marker, token=KEY_B)
h.eq((r.get("stdout") or "").strip(), "clean", "B's box of that id is untouched", r.describe())
srv.delete("/v1/sandboxes/" + Y, token=KEY_B)

# ---- an id made again within one app -------------------------------------------------------------

r = srv.delete("/v1/sandboxes/" + X, token=KEY_B)
h.ok(r.status in (200, 202, 204), "app B deletes the box", r.describe())
r = srv.post("/v1/sandboxes", {"thread_id": THREAD}, token=KEY_B)
h.eq((r.status, r.get("id")), (201, X), "app B makes the box of the thread again", r.describe())
r = stat_ok(X, TB or "none")
h.eq(r.status, 401, "the first box's token does not open the second (same id, same app)", r.describe())
r, TB2 = e2b_token(X, KEY_B)
h.ok(isinstance(TB2, str) and TB2 != TB, "the new box has a token of its own", r.describe())
r = stat_ok(X, TB2 or "none")
h.eq(r.status, 200, "... which opens it", r.describe())

srv.delete("/v1/sandboxes/" + X, token=KEY_B)
srv.delete("/e2b/sandboxes/" + SB, token=KEY_B)
h.done()
