#!/usr/bin/env python3
"""Auth of `agentbox serve`: the admin token (AGENTBOX_TOKEN or the config
file), 401 without it or with a wrong one (and nothing happens), /health open;
API keys made by the admin via /v1/keys and given in the config file, each
scoped to one app: it lists only its app's boxes, gets 404 on other apps'
boxes (and cannot touch them), 403 on /v1/keys, its acquires are forced to
its app, it sees only its app's events; deleting a key revokes it; secrets
are stored hashed. Without a token the server stays on loopback and says so;
a non-loopback --listen without a token is refused."""
import glob
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
from abserver import chat_box_id, thread_box_id  # noqa: E402

h = abserver.ServerHarness(budget=110)
TOKEN = "admin-token-%s-0123456789" % os.getpid()
CFG_KEY = "cfgkey-app2-0123456789abcdef"
srv = h.start_server(token=TOKEN, config={"api_keys": [{"key": CFG_KEY, "app_id": "app2"}]})


def check_error(r, status, code, what):
    h.eq(r.status, status, "%s: answers %d" % (what, status), r.describe())
    h.eq(r.err_code, code, "%s: error code %s" % (what, code), r.describe())


def ids(boxes):
    return sorted(b.get("id") for b in boxes) if isinstance(boxes, list) else "(not a list)"


# ---- the admin token --------------------------------------------------------------

r = srv.get("/health", token=None)
h.eq(r.status, 200, "GET /health needs no token", r.describe())
for what, tok in (("no Authorization header", None), ("a wrong token", "wrong-token-0123456789"),
                  ("the token with a suffix", TOKEN + "x"), ("a prefix of the token", TOKEN[:-1]),
                  ("an empty bearer", "")):
    r = srv.get("/v1/sandboxes", token=tok)
    check_error(r, 401, "unauthorized", "GET /v1/sandboxes with %s" % what)
r = srv.get("/v1/sandboxes", headers={"Authorization": "Basic " + TOKEN})
check_error(r, 401, "unauthorized", "GET /v1/sandboxes with the token as Basic auth")
r = srv.get("/v1/sandboxes", headers={"Authorization": TOKEN})
check_error(r, 401, "unauthorized", "GET /v1/sandboxes with the bare token (no Bearer)")
for method, path in (("GET", "/metrics"), ("GET", "/v1/keys"), ("POST", "/v1/exec"), ("GET", "/v1/events"),
                     ("GET", "/v1/sandboxes/x"), ("DELETE", "/v1/sandboxes?app_id=app1")):
    r = srv.request(method, path, body={"command": "true", "app_id": "a", "user_id": "u", "chat_id": "c"}
                    if method == "POST" else None, token=None, timeout=10)
    h.eq(r.status, 401, "%s %s without a token answers 401" % (method, path), r.describe())
r = srv.post("/v1/sandboxes", {"id": "noauth-box"}, token=None)
check_error(r, 401, "unauthorized", "create without a token")
r = srv.post("/v1/exec", {"app_id": "noauth", "user_id": "u", "chat_id": "c", "command": "true"},
             token="bad-0123456789")
check_error(r, 401, "unauthorized", "/v1/exec with a wrong token")
h.eq(srv.get("/v1/sandboxes/noauth-box").status, 404, "... the refused create made no box")
h.eq(srv.get("/v1/sandboxes/" + chat_box_id("noauth", "u", "c")).status, 404, "... the refused exec made no box")
h.eq(sorted(h.cli_boxes() or {}), [], "... and the backend has no box at all (agentbox ls --json)")

r = srv.get("/v1/sandboxes")
h.eq(r.status, 200, "GET /v1/sandboxes with the admin token answers 200", r.describe())
r = srv.get("/metrics")
h.eq(r.status, 200, "GET /metrics with the admin token answers 200", r.describe())

# ---- boxes of two apps and none ------------------------------------------------------

A1 = chat_box_id("app1", "u1", "c1")
A1b = chat_box_id("app1", "u2", "c9")
A2 = chat_box_id("app2", "u1", "c1")
for keys in (("app1", "u1", "c1"), ("app1", "u2", "c9"), ("app2", "u1", "c1")):
    r = srv.post("/v1/sandboxes", dict(zip(("app_id", "user_id", "chat_id"), keys)))
    h.eq(r.status, 201, "admin creates %s/%s/%s" % keys, r.describe())
r = srv.post("/v1/sandboxes", {"id": "adm-x"})
h.eq(r.status, 201, "admin creates an app-less box", r.describe())
srv.exec(A2, "echo app2-secret > /workspace/s.txt")

# ---- API keys ----------------------------------------------------------------------------

r = srv.post("/v1/keys", {"app_id": "app1", "name": "ci"})
h.eq(r.status, 201, "POST /v1/keys answers 201", r.describe())
K1 = r.get("key") or ""
K1_ID = r.get("key_id") or ""
h.eq((r.get("app_id"), r.get("name")), ("app1", "ci"), "... with app_id and name", r.text)
h.ok(isinstance(K1, str) and len(K1) >= 16 and K1_ID and K1_ID != K1, "... a secret key (>= 16 chars) and a key_id",
     r.text)
r = srv.post("/v1/keys", {"app_id": "app1"})
h.eq(r.status, 201, "a second key for app1 (no name)", r.describe())
K1B_ID = r.get("key_id")
r = srv.get("/v1/keys")
keys = {k.get("key_id"): k for k in (r.get("keys") or []) if isinstance(k, dict)}
h.eq(r.status, 200, "GET /v1/keys answers 200", r.describe())
h.ok(K1_ID in keys and K1B_ID in keys, "... listing the new keys", r.text)
k = keys.get(K1_ID) or {}
h.eq((k.get("app_id"), k.get("name")), ("app1", "ci"), "... with app_id and name", r.text)
h.ok(isinstance(k.get("created_at"), int) and abs(k.get("created_at") - abserver.now_ms()) < 120000,
     "... and created_at in ms", r.text)
h.not_contains(r.text, K1, "the listing never shows a secret")
check_error(srv.post("/v1/keys", {"name": "x"}), 400, "invalid_argument", "POST /v1/keys without app_id")
r = srv.get("/v1/keys")
h.eq(len(r.get("keys") or []), len(keys), "... made no key")


def db_files():
    return [f for f in glob.glob(os.path.join(h.data, "*")) if os.path.isfile(f)]


found = [f for f in db_files() if K1.encode() in open(f, "rb").read()] if K1 else ["(no key)"]
h.eq(found, [], "the secret is in no file of the data dir (only its sha256 is stored)")

# ---- a scoped key --------------------------------------------------------------------------

r = srv.get("/v1/sandboxes", token=K1)
h.eq(r.status, 200, "the app1 key lists boxes", r.describe())
h.eq(ids(r.get("sandboxes")), sorted([A1, A1b]), "... and sees only app1's boxes")
r = srv.get("/v1/sandboxes?app_id=app2", token=K1)
h.ok(r.status == 403 or (r.status == 200 and r.get("sandboxes") == []),
     "listing app2 with the app1 key shows nothing of app2", r.describe())
r = srv.get("/v1/sandboxes/" + A1, token=K1)
h.eq((r.status, r.get("id")), (200, A1), "the app1 key gets its box", r.describe())
r = srv.exec(A1, "echo mine", token=K1)
h.eq((r.status, r.get("stdout")), (200, "mine\n"), "the app1 key execs in its box", r.describe())

for what, r in (("GET", srv.get("/v1/sandboxes/" + A2, token=K1)),
                ("GET of the app-less box", srv.get("/v1/sandboxes/adm-x", token=K1)),
                ("exec", srv.post("/v1/sandboxes/%s/exec" % A2, {"command": "echo pwned > /workspace/s.txt"},
                                  token=K1)),
                ("stop", srv.post("/v1/sandboxes/%s/stop" % A2, token=K1)),
                ("start", srv.post("/v1/sandboxes/%s/start" % A2, token=K1)),
                ("file GET", srv.get(srv.file_path(A2, "s.txt"), token=K1)),
                ("file PUT", srv.put(srv.file_path(A2, "s.txt"), b"pwned", token=K1)),
                ("file DELETE", srv.delete(srv.file_path(A2, "s.txt"), token=K1)),
                ("DELETE", srv.delete("/v1/sandboxes/" + A2, token=K1))):
    check_error(r, 404, "not_found", "app1 key, %s on app2's box" % what)
r = srv.delete("/v1/sandboxes?app_id=app2", token=K1)
h.ok(r.status in (403, 404) or (r.status == 202 and r.get("deleting") == []),
     "app1 key, DELETE ?app_id=app2 deletes nothing (403, or 202 with an empty list)", r.describe())
time.sleep(0.5)
b2 = srv.box(A2) or {}
h.eq(b2.get("status"), "running", "app2's box is still there and running")
r = srv.get(srv.file_path(A2, "s.txt"))
h.eq(r.body, b"app2-secret\n", "... with its file unchanged")
r = srv.exec(A2, "echo ok", token=CFG_KEY)
h.eq((r.status, r.get("stdout")), (200, "ok\n"), "the config file's app2 key execs in app2's box", r.describe())
r = srv.get("/v1/sandboxes", token=CFG_KEY)
h.eq(ids(r.get("sandboxes")), [A2], "the config key sees only app2's boxes", r.describe())

for method, path, body in (("GET", "/v1/keys", None), ("POST", "/v1/keys", {"app_id": "app1"}),
                           ("DELETE", "/v1/keys/" + str(K1B_ID), None)):
    check_error(srv.request(method, path, body, token=K1), 403, "permission_denied", "app1 key, %s %s" % (method, path))
check_error(srv.post("/v1/keys", {"app_id": "app2"}, token=CFG_KEY), 403, "permission_denied", "config key, POST /v1/keys")
h.ok(K1B_ID in [k.get("key_id") for k in (srv.get("/v1/keys").get("keys") or [])],
     "the refused key DELETE deleted nothing")

# Acquires are forced to the key's app.
r = srv.post("/v1/sandboxes", {"app_id": "app1", "user_id": "u5", "chat_id": "c5"}, token=K1)
h.eq((r.status, r.get("id"), r.get("app_id")), (201, chat_box_id("app1", "u5", "c5"), "app1"),
     "the app1 key acquires for app1", r.describe())
r = srv.post("/v1/sandboxes", {"app_id": "app2", "user_id": "u5", "chat_id": "c5"}, token=K1)
check_error(r, 403, "permission_denied", "the app1 key acquiring for app2")
h.eq(srv.get("/v1/sandboxes/" + chat_box_id("app2", "u5", "c5")).status, 404, "... made no app2 box")
r = srv.post("/v1/exec", {"app_id": "app2", "user_id": "u1", "chat_id": "c1", "command": "echo pwned"}, token=K1)
check_error(r, 403, "permission_denied", "the app1 key /v1/exec for app2's keys")
r = srv.post("/v1/sandboxes", {"thread_id": "t-k1"}, token=K1)
h.eq((r.status, r.get("id"), r.get("app_id")), (201, thread_box_id("t-k1", "app1"), "app1"),
     "a thread acquire by the app1 key belongs to app1", r.describe())
r = srv.post("/v1/sandboxes", {"id": "k1-explicit"}, token=K1)
h.eq((r.status, r.get("app_id")), (201, "app1"), "an explicit-id create by the app1 key belongs to app1",
     r.describe())
r = srv.post("/v1/sandboxes", {"user_id": "u6", "chat_id": "c6"}, token=K1)
h.eq((r.status, r.get("id"), r.get("app_id")), (201, chat_box_id("app1", "u6", "c6"), "app1"),
     "user_id+chat_id without app_id by the app1 key: app_id is forced to app1", r.describe())
r = srv.post("/v1/sandboxes", {"id": "k2-box"}, token=CFG_KEY)
h.eq((r.status, r.get("app_id")), (201, "app2"), "the config key creates an explicit-id box for app2",
     r.describe())
r = srv.post("/v1/sandboxes", {"id": "k2-box"}, token=K1)
check_error(r, 409, "conflict", "the app1 key acquiring an explicit id that belongs to app2")
h.eq((srv.box("k2-box") or {}).get("app_id"), "app2", "... the box still belongs to app2")
r = srv.post("/v1/sandboxes", {"id": "adm-x"}, token=K1)
h.ok(r.status in (404, 409), "the app1 key acquiring the admin's app-less box is refused", r.describe())
h.eq(ids(srv.list({"app_id": "app1"})), sorted([A1, A1b, chat_box_id("app1", "u5", "c5"), thread_box_id("t-k1", "app1"),
                                                "k1-explicit", chat_box_id("app1", "u6", "c6")]),
     "admin view: app1 has exactly the boxes made for it")

# Events of a scoped key: only its app.
ev1 = srv.sse("/v1/events", token=K1)
h.eq(ev1.status, 200, "the app1 key subscribes to events", ev1.describe())
time.sleep(0.2)
srv.exec(A2, "echo app2-event")
srv.exec(A1, "echo app1-event", token=K1)
evs = ev1.collect(until=lambda e: e.type == "exec" and ((e.json or {}).get("data") or {}).get("command") ==
                  "echo app1-event", timeout=10)
evs += ev1.drain(0.5, 2)
ev1.close()
h.ok(any(e.type == "exec" and (e.json or {}).get("box_id") == A1 for e in evs), "... sees its own exec event",
     repr(evs))
h.eq([e for e in evs if (e.json or {}).get("app_id") != "app1"], [], "... and no event of another app")

# Revoking a key.
r = srv.delete("/v1/keys/" + K1_ID)
h.eq((r.status, r.get("deleted")), (200, K1_ID), "DELETE /v1/keys/ID answers 200 {\"deleted\": id}", r.describe())
check_error(srv.get("/v1/sandboxes", token=K1), 401, "unauthorized", "the deleted key")
h.ok(K1_ID not in [k.get("key_id") for k in (srv.get("/v1/keys").get("keys") or [])], "... is no longer listed")
check_error(srv.delete("/v1/keys/" + K1_ID), 404, "not_found", "DELETE of a deleted key")

# Keys survive a restart (they live in the store).
r = srv.post("/v1/keys", {"app_id": "app1", "name": "persist"})
K3 = r.get("key") or "(none)"
srv.stop()
why = srv.start()
if why:
    h.bail_server(srv, why)
r = srv.get("/v1/sandboxes", token=K3)
h.eq((r.status, ids(r.get("sandboxes"))), (200, ids(srv.list({"app_id": "app1"}))),
     "a key made by the API still works after a restart (sees app1's boxes)", r.describe())
r = srv.get("/v1/sandboxes", token=CFG_KEY)
h.eq(r.status, 200, "the config key works after a restart", r.describe())
srv.stop()

# ---- the token from the config file --------------------------------------------------------

CFG_TOKEN = "config-token-0123456789abcdef"
srv2 = h.start_server(config={"token": CFG_TOKEN}, name="cfgtoken", data=h.new_data_dir("data-cfgtoken"))
h.eq(srv2.get("/v1/sandboxes", token=None).status, 401, "token from the config file: 401 without it")
h.eq(srv2.get("/v1/sandboxes", token="wrong-0123456789abcdef").status, 401, "... 401 with a wrong one")
h.eq(srv2.get("/v1/sandboxes", token=CFG_TOKEN).status, 200, "... 200 with it")
h.eq(srv2.get("/health", token=None).status, 200, "... /health stays open")
srv2.stop()

# ---- no token: loopback only ---------------------------------------------------------------

srv3 = h.start_server(name="open", data=h.new_data_dir("data-open"))
r = srv3.get("/v1/sandboxes", token=None)
h.eq(r.status, 200, "without a token the API is open on loopback", r.describe())
log = srv3.log().lower()
h.ok("token" in log and ("loopback" in log or "open" in log or "no auth" in log),
     "the server says at start that it runs open, loopback only", srv3.log()[-1500:])
srv3.stop()


def refused(config, what):
    s = h.server(config=config, name="refuse-%d" % len(h.servers), data=h.new_data_dir("data-r%d" % len(h.servers)))
    s.listen_host = "0.0.0.0"
    s.expect_exit = True
    s.spawn()
    port = s.port
    try:
        rc = s.proc.wait(15)
    except subprocess.TimeoutExpired:
        rc = None
    log = s.log()
    h.ok(rc is not None and rc != 0, "%s: serve exits non-zero" % what, "rc=%r\n%s" % (rc, log[-1500:]))
    h.contains(log, "AGENTBOX_TOKEN", "%s: the message mentions AGENTBOX_TOKEN" % what, log[-1500:])
    c = socket.socket()
    c.settimeout(1)
    try:
        listening = c.connect_ex(("127.0.0.1", port)) == 0
    finally:
        c.close()
    h.ok(not listening, "%s: nothing listens on the port" % what)
    if rc is None:
        s.stop()


refused({}, "--listen 0.0.0.0:PORT without a token")
s = h.server(config={"listen": "0.0.0.0:%d" % abserver.free_port()}, name="refuse-cfg",
             data=h.new_data_dir("data-refuse-cfg"))
s.argv = lambda: [h.bin, "serve", "--data", s.data, "--config", s.config_path]
s.expect_exit = True
s.spawn()
try:
    rc = s.proc.wait(15)
except subprocess.TimeoutExpired:
    rc = None
    s.stop()
h.ok(rc is not None and rc != 0, "listen: 0.0.0.0:PORT in the config without a token: serve exits non-zero",
     s.log()[-1500:])
h.contains(s.log(), "AGENTBOX_TOKEN", "... the message mentions AGENTBOX_TOKEN")

# With a token a non-loopback listen is fine.
s = h.server(token=TOKEN, name="any-with-token", data=h.new_data_dir("data-any"), listen_host="0.0.0.0")
why = s.start()
h.ok(why is None, "--listen 0.0.0.0:PORT with a token comes up", why)
if why is None:
    h.eq(s.get("/v1/sandboxes", token=None).status, 401, "... and wants the token")
    s.stop()

# ---- config checks ---------------------------------------------------------------------------

for what, cfg in (("an API key shorter than 16 characters", {"api_keys": [{"key": "short", "app_id": "app1"}]}),
                  ("an unknown config key", {"no_such_setting": 5}),
                  ("a bad duration", {"idle_stop": "soon"})):
    s = h.server(token=TOKEN, config=cfg, name="badcfg-%d" % len(h.servers),
                 data=h.new_data_dir("data-badcfg-%d" % len(h.servers)))
    s.expect_exit = True
    s.spawn()
    try:
        rc = s.proc.wait(15)
    except subprocess.TimeoutExpired:
        rc = None
        s.stop()
    h.ok(rc is not None and rc != 0, "a config with %s is refused at start" % what, s.log()[-1000:])
    word = {"an API key shorter than 16 characters": "key", "an unknown config key": "no_such_setting",
            "a bad duration": "idle_stop"}[what]
    h.contains(s.log(), word, "... naming %s" % word)

h.done()
