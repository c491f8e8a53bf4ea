#!/usr/bin/env python3
"""Attacks on DeerFlow's front (docs/compat-deerflow.md): app B, with its
own valid API key and its own sandbox, goes for app A's sandbox through
every provisioner route (A's sandbox id with B's key), every AIO route of
A's box (B's sandbox token on A's box id, a made-up token, no token with
B's key in X-API-Key or Authorization), the credential checked from the
head before any body (a request with a huge Content-Length is refused
without its body being sent), and paths that try to leave the box (a
symlink to /, the host's data folder, '..'). Each attack passes only when
it fails: B is answered 401/404 (or, for the provisioner's create, given
a box of its own), and A's sandbox is unchanged afterwards: its session
still holds A's variable, its file A's content, no marker of B's."""
import os
import secrets
import socket
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
KEY_A = "key-a-" + secrets.token_hex(8)
KEY_B = "key-b-" + secrets.token_hex(8)
h = abserver.ServerHarness(budget=200)
srv = h.start_server(name="deerflowtenancy", token=TOKEN, config={
    "idle_pause": "1h", "idle_stop": "2h",
    "api_keys": [{"key": KEY_A, "app_id": "appa"}, {"key": KEY_B, "app_id": "appb"}]})
PA, PB = {"X-API-Key": KEY_A}, {"X-API-Key": KEY_B}
MARK = "/tmp/pwned-" + secrets.token_hex(4)


def call(method, path, body=None, headers=None, query=None):
    return srv.request(method, path, body=body, headers=headers, token=None, query=query)


def data(r):
    j = r.json
    return (j.get("data") if isinstance(j, dict) else None) or {}


# ---- A's sandbox, with state to protect; B's own --------------------------------------
SA = secrets.token_hex(8)
r = call("POST", "/deerflow/api/sandboxes", {"sandbox_id": SA, "thread_id": "ta", "user_id": "ua"}, PA)
h.eq(r.status, 200, "app A: a sandbox", r.describe())
UA = urllib.parse.urlparse(r.get("sandbox_url") or "http://x/none").path
SB = secrets.token_hex(8)
r = call("POST", "/deerflow/api/sandboxes", {"sandbox_id": SB}, PB)
h.eq(r.status, 200, "app B: a sandbox of its own", r.describe())
UB = urllib.parse.urlparse(r.get("sandbox_url") or "http://x/none").path
BOX_A, TOK_A = UA.rsplit("/", 1)[1].split(".")
BOX_B, TOK_B = UB.rsplit("/", 1)[1].split(".")
r = call("POST", UA + "/v1/shell/exec", {"id": "keep", "command": "export SECRET_A=a-secret"})
h.eq(data(r).get("status"), "completed", "app A: a session with a variable", r.describe())
r = call("POST", UA + "/v1/file/write", {"file": "/workspace/a.txt", "content": "A's file"})
h.eq(r.status, 200, "app A: a file", r.describe())


def refused(r, what, ok=(401, 404)):
    h.ok(r.status in ok, "app B: %s -> %s (got %d)" % (what, "/".join(map(str, ok)), r.status), r.describe())


# ---- the provisioner: A's sandbox id with B's key --------------------------------------
refused(call("GET", "/deerflow/api/sandboxes/" + SA, None, PB), "GET A's sandbox", (404,))
r = call("GET", "/deerflow/api/sandboxes", None, PB)
h.ok(r.status == 200 and [s.get("sandbox_id") for s in r.get("sandboxes", [])] == [SB],
     "app B's list shows only its own sandbox", r.describe())
r = call("DELETE", "/deerflow/api/sandboxes/" + SA, None, PB)
h.eq(r.status, 200, "app B: DELETE of A's sandbox id answers as for a missing one", r.describe())
r = call("POST", "/deerflow/api/sandboxes", {"sandbox_id": SA}, PB)
UB2 = urllib.parse.urlparse(r.get("sandbox_url") or "http://x/none").path
h.ok(r.status == 200 and UB2.rsplit("/", 1)[1].split(".")[0] != BOX_A,
     "app B: creating A's sandbox id gives B a box of its own, not A's", r.describe())
r = call("GET", "/deerflow/api/sandboxes/" + SA, None, PA)
h.ok(r.status == 200 and urllib.parse.urlparse(r.get("sandbox_url", "")).path == UA,
     "A's sandbox is still A's, at the same URL", r.describe())

# ---- every AIO route of A's box, with the wrong credentials ------------------------------
CALLS = [
    ("GET", "/v1/sandbox", None, None),
    ("POST", "/v1/shell/exec", {"id": "keep", "command": "touch " + MARK}, None),
    ("POST", "/v1/shell/exec", {"command": "touch " + MARK, "async_mode": True}, None),
    ("POST", "/v1/shell/view", {"id": "keep"}, None),
    ("POST", "/v1/shell/wait", {"id": "keep", "seconds": 1}, None),
    ("POST", "/v1/shell/kill", {"id": "keep"}, None),
    ("POST", "/v1/shell/write", {"id": "keep", "input": "touch " + MARK, "press_enter": True}, None),
    ("POST", "/v1/shell/sessions/create", {"id": "evil"}, None),
    ("GET", "/v1/shell/sessions", None, None),
    ("DELETE", "/v1/shell/sessions/keep", None, None),
    ("DELETE", "/v1/shell/sessions", None, None),
    ("POST", "/v1/bash/exec", {"command": "touch " + MARK}, None),
    ("POST", "/v1/file/read", {"file": "/workspace/a.txt"}, None),
    ("POST", "/v1/file/write", {"file": "/workspace/a.txt", "content": "B was here"}, None),
    ("POST", "/v1/file/replace", {"file": "/workspace/a.txt", "old_str": "A", "new_str": "B"}, None),
    ("POST", "/v1/file/list", {"path": "/workspace"}, None),
    ("POST", "/v1/file/find", {"path": "/workspace", "glob": "*"}, None),
    ("POST", "/v1/file/grep", {"path": "/workspace", "pattern": "A"}, None),
    ("GET", "/v1/file/download", None, {"path": "/workspace/a.txt"}),
]
FAKE = secrets.token_hex(16)
for base, hdrs, how in (
        ("/deerflow/aio/%s.%s" % (BOX_A, TOK_B), None, "B's token on A's box"),
        ("/deerflow/aio/%s.%s" % (BOX_A, FAKE), None, "a made-up token on A's box"),
        ("/deerflow/aio/%s.%s" % (BOX_A, TOK_B), PB, "B's token and key on A's box"),
        ("/deerflow/aio/%s" % BOX_A, PB, "no token, B's key in X-API-Key"),
        ("/deerflow/aio/%s" % BOX_A, {"Authorization": "Bearer " + KEY_B}, "no token, B's key as a bearer"),
        ("/deerflow/aio/%s" % BOX_A, None, "no token, no key"),
        ("/deerflow/aio/%s.%s" % (BOX_B, TOK_A), None, "A's token on B's box id")):
    for method, path, body, q in CALLS:
        refused(call(method, base + path, body, hdrs, q), "%s %s with %s" % (method, path, how))

# ---- the credential is read from the head, before any body ------------------------------
for target, how in (("/deerflow/aio/%s.%s/v1/file/write" % (BOX_A, FAKE), "a made-up token"),
                    ("/deerflow/api/sandboxes", "no key")):
    head = ("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Content-Length: 500000000\r\n\r\n" % target).encode()
    t0 = time.monotonic()
    s = socket.create_connection((srv.host, srv.port), timeout=10)
    try:
        s.sendall(head)
        got = s.recv(4096).decode("latin-1", "replace")
    except OSError as e:
        got = "error: %s" % e
    finally:
        s.close()
    h.ok(got.startswith("HTTP/1.1 401") and time.monotonic() - t0 < 5,
         "%s with a 500 MB body announced: 401 before the body" % how, got[:200])

# ---- paths that try to leave A's own box (A's own token: the box is A's) ----------------
r = call("POST", UA + "/v1/shell/exec", {"command": "ln -sfn / /workspace/up; ln -sfn /proc/1/root /workspace/p1"})
host_name = open("/etc/hostname").read().strip() if os.path.exists("/etc/hostname") else None
for path in ("/workspace/up/etc/hostname", "/workspace/p1/etc/hostname", "/workspace/../../../etc/hostname"):
    r = call("POST", UA + "/v1/file/read", {"file": path})
    content = (data(r).get("content") or "").strip()
    h.ok(r.status != 200 or (content and content != host_name),
         "read %s stays in the box (not the host's hostname)" % path, r.describe())
r = call("POST", UA + "/v1/file/read", {"file": os.path.join(srv.data, "agentbox.db")})
h.ok(r.status == 404, "the host's data folder is not in the box", r.describe())
r = call("GET", UA + "/v1/file/download", query={"path": os.path.join(srv.data, "agentbox.db")})
h.eq(r.status, 404, "nor downloadable", r.describe())
r = call("POST", UA + "/v1/shell/exec", {"id": "a'b;touch " + MARK, "command": "true"})
h.eq(r.status, 422, "a session id with shell characters is refused", r.describe())
r = call("POST", UA + "/v1/file/list", {"path": "/workspace/up/", "recursive": False})
h.ok(r.status in (200, 404) and not any(f.get("name") == os.path.basename(srv.data) for f in data(r).get("files", [])),
     "a listing through a symlink to / lists the box's root", r.describe())

# ---- A's sandbox afterwards ---------------------------------------------------------------
r = call("POST", UA + "/v1/shell/exec", {"id": "keep", "command": "echo $SECRET_A; ls %s 2>&1" % MARK})
out = data(r).get("output") or ""
h.ok(out.startswith("a-secret") and "No such file" in out, "A's session still holds its variable; no marker of B",
     r.describe())
r = call("POST", UA + "/v1/file/read", {"file": "/workspace/a.txt"})
h.eq(data(r).get("content"), "A's file", "A's file is as A left it", r.describe())
r = call("GET", UA + "/v1/shell/sessions")
h.eq(sorted(data(r).get("sessions", {})), ["default", "keep"], "A's sessions: none of B's", r.describe())
h.ok(not os.path.exists(MARK), "no marker on the host either")
h.done()
