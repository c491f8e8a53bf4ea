#!/usr/bin/env python3
"""Per-app quotas of `agentbox serve`: max_boxes, max_running, max_disk,
max_execs and exec_rate from the config (a default for every app, overrides
per app) and per API key (POST /v1/keys {"quotas"}); over a quota the answer
is 429 quota_exceeded naming the quota, its limit and the use, and nothing is
made; concurrent creates never pass a limit; POST /v1/exec refused by an exec
quota leaves no box; GET /v1/keys/{id} shows a key's quotas and its app's
use; /metrics shows use and refusals per app."""
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
from abserver import chat_box_id  # noqa: E402

h = abserver.ServerHarness(budget=170)
TOKEN = "admin-token-%s-0123456789" % os.getpid()
srv = h.start_server(token=TOKEN, config={
    "quotas": {
        "max_boxes": 50,
        "apps": {
            "qa": {"max_boxes": 2},
            "qc": {"max_boxes": 3},
            "qd": {"max_disk": "100M"},
            "qr": {"max_running": 1},
        },
    },
})


def refused(r, quota, what, limit=None):
    h.eq(r.status, 429, "%s: answers 429" % what, r.describe())
    h.eq(r.err_code, "quota_exceeded", "%s: code quota_exceeded" % what, r.describe())
    msg = r.err_message or ""
    h.ok(quota in msg, "%s: the message names %s" % (what, quota), msg)
    if limit is not None:
        h.ok(re.search(r"\b%s\b" % re.escape(str(limit)), msg), "%s: the message gives the limit %s" %
             (what, limit), msg)


def create(app, chat, token=abserver._DEFAULT, **extra):
    body = {"app_id": app, "user_id": "u", "chat_id": chat}
    body.update(extra)
    return srv.post("/v1/sandboxes", body, token=token)


# ---- max_boxes: the admin names the app ---------------------------------------------

for i in range(2):
    r = create("qa", "c%d" % i)
    h.eq(r.status, 201, "app qa: box %d of 2 is made" % (i + 1), r.describe())
r = create("qa", "c2")
refused(r, "max_boxes", "app qa: a third box", 2)
h.ok("has 2" in (r.err_message or ""), "... the message gives the use (2)", r.err_message)
h.eq(srv.get("/v1/sandboxes/" + chat_box_id("qa", "u", "c2")).status, 404, "... and no box was made")
h.eq(len(srv.list({"app_id": "qa"})), 2, "... app qa has 2 boxes")
r = create("qa", "c0")
h.eq(r.status, 200, "acquiring an existing box of a full app still works", r.describe())
r = create("other", "c0")
h.eq(r.status, 201, "another app is not held back by qa's quota", r.describe())

# the same quota through MCP's sandbox_create
ACCEPT = {"Accept": "application/json, text/event-stream"}
r = srv.post("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "test_serve_quota.py", "version": "1"}}}, headers=ACCEPT)
sid = r.header("Mcp-Session-Id")
r = srv.post("/mcp", {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "sandbox_create",
                                 "arguments": {"app_id": "qa", "user_id": "u", "chat_id": "mcp"}}},
             headers=dict(ACCEPT, **{"Mcp-Session-Id": sid or ""}))
res = r.get("result") or {}
text = ((res.get("content") or [{}])[0] or {}).get("text", "")
h.ok(res.get("isError") is True and text.startswith("quota_exceeded") and "max_boxes" in text,
     "MCP sandbox_create for the full app: an error result naming quota_exceeded and max_boxes", r.describe())
h.eq(srv.get("/v1/sandboxes/" + chat_box_id("qa", "u", "mcp")).status, 404, "... and no box was made")

# ---- concurrent creates never pass max_boxes -----------------------------------------

results = []
lock = threading.Lock()


def racer(i):
    r = create("qc", "race%d" % i)
    with lock:
        results.append(r.status)


threads = [threading.Thread(target=racer, args=(i,)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
h.eq(sorted(results), [201] * 3 + [429] * 5, "8 concurrent creates for app qc (max_boxes 3): 3 made, 5 refused")
h.eq(len(srv.list({"app_id": "qc"})), 3, "... and app qc has exactly 3 boxes")

# ---- max_disk: the sum of the disk limits ------------------------------------------

r = create("qd", "d1")
h.eq(r.status, 201, "app qd (max_disk 100M): a 64 MiB box is made", r.describe())
r = create("qd", "d2")
refused(r, "max_disk_mib", "app qd: a second 64 MiB box (128 > 100 MiB)", 100)
r = create("qd", "d3", limits={"disk_mib": 32})
h.eq(r.status, 201, "... a 32 MiB box still fits (96 MiB)", r.describe())

# ---- max_running: create, start and stop ---------------------------------------------

r = create("qr", "r1")
h.eq(r.status, 201, "app qr (max_running 1): the first box runs", r.describe())
b1 = r.get("id")
refused(create("qr", "r2"), "max_running", "app qr: a second running box", 1)
h.eq(srv.post("/v1/sandboxes/%s/stop" % b1).status, 200, "the first box is stopped")
r = create("qr", "r2")
h.eq(r.status, 201, "... then a second box can run", r.describe())
r = srv.post("/v1/sandboxes/%s/start" % b1)
refused(r, "max_running", "starting the first box again")
h.eq(srv.status_of(b1), "stopped", "... it stays stopped")
r = srv.exec(b1, "true")
refused(r, "max_running", "an exec in the stopped box (it would start it)")

# ---- per-key quotas: POST /v1/keys {"quotas"}, GET /v1/keys/{id} ---------------------

r = srv.post("/v1/keys", {"app_id": "qk", "name": "limited",
                          "quotas": {"max_execs": 1, "exec_rate": 0.01, "exec_burst": 3}})
h.eq(r.status, 201, "a key with quotas of its own is made", r.describe())
key, kid = r.get("key"), r.get("key_id")
h.eq((r.get("quotas") or {}).get("max_execs"), 1, "... its answer shows its quotas", r.describe())
r = srv.post("/v1/keys", {"app_id": "qk", "quotas": {"max_execs": -1}})
h.eq(r.status, 400, "a negative quota is refused", r.describe())
r = srv.post("/v1/keys", {"app_id": "qk", "quotas": {"max_boxess": 1}})
h.eq(r.status, 400, "an unknown quota is refused", r.describe())

r = srv.post("/v1/sandboxes", {"user_id": "u", "chat_id": "k1"}, token=key)
h.eq(r.status, 201, "the key makes a box of its app", r.describe())
kb = r.get("id")

# max_execs 1: a long exec holds the one slot
slow = {}


def slow_exec():
    slow["r"] = srv.exec(kb, "sleep 4; echo slept", token=key)


t = threading.Thread(target=slow_exec)
t.start()
busy = False
for _ in range(400):
    if re.search(r'agentbox_app_execs_in_flight\{app="qk"\} 1\b', srv.get("/metrics").text or ""):
        busy = True
        break
    time.sleep(0.05)
h.ok(busy, "/metrics shows the key's app with one exec in flight")
r = srv.exec(kb, "echo second", token=key)
refused(r, "max_execs", "the key: a second exec while one runs", 1)
t.join()
h.eq((slow.get("r").json or {}).get("stdout"), "slept\n", "... the first exec ran to its end",
     slow.get("r").describe() if slow.get("r") else "")

# exec_rate 0.01/s with a burst of 3: the slow exec and the refused one... the
# refused one took no token; one more passes, then the bucket is empty
r = srv.exec(kb, "echo two", token=key)
h.eq(r.status, 200, "the key: an exec within the burst runs", r.describe())
r = srv.exec(kb, "echo three", token=key)
h.eq(r.status, 200, "the key: the third exec of the burst runs", r.describe())
r = srv.exec(kb, "echo four", token=key)
refused(r, "exec_rate", "the key: an exec past the burst")
r = srv.exec(kb, "echo five", token=key, headers={"Accept": "text/event-stream"})
refused(r, "exec_rate", "the key: a streamed (SSE) exec past the burst")
r = srv.post("/v1/exec", {"user_id": "u", "chat_id": "new-chat", "command": "true"}, token=key)
refused(r, "exec_rate", "the key: POST /v1/exec past the rate")
h.eq(srv.get("/v1/sandboxes/" + chat_box_id("qk", "u", "new-chat")).status, 404,
     "... and the refused /v1/exec made no box")
r = srv.exec(kb, "echo admin")
h.eq(r.status, 200, "the admin's exec in the box counts against the app, not the key's own bucket",
     r.describe())

r = srv.get("/v1/keys/" + kid)
h.eq(r.status, 200, "GET /v1/keys/{id} answers", r.describe())
j = r.json or {}
h.eq((j.get("quotas") or {}).get("exec_burst"), 3, "... it shows the key's own quotas", r.describe())
eff = j.get("effective_quotas") or {}
h.eq((eff.get("max_boxes"), eff.get("max_execs")), (50, 1),
     "... the effective quotas (the server's default under the key's)", r.describe())
use = j.get("usage") or {}
h.eq(use.get("boxes"), 1, "... its app's boxes", r.describe())
h.ok((use.get("rejected") or {}).get("exec_rate", 0) >= 2, "... and the refusals by quota", r.describe())
h.eq(srv.get("/v1/keys/k_nosuchkey").status, 404, "GET /v1/keys/{unknown id} answers 404")
h.eq(srv.get("/v1/keys/" + kid, token=key).status, 403, "a key cannot read keys")

# ---- /metrics ------------------------------------------------------------------------

m = srv.get("/metrics").text or ""
h.ok('agentbox_app_boxes{app="qa"} 2' in m, "/metrics: boxes of app qa", m[-2000:])
h.ok('agentbox_app_running{app="qr"} 1' in m, "/metrics: running boxes of app qr")
h.ok('agentbox_app_disk_limit_bytes{app="qd"} %d' % (96 * 1024 * 1024) in m, "/metrics: disk of app qd")
h.ok(re.search(r'agentbox_quota_rejections_total\{app="qc",quota="max_boxes"\} 5\b', m),
     "/metrics: refusals of app qc by max_boxes")
h.ok(re.search(r"agentbox_disk_free_bytes \d+", m), "/metrics: the data folder's free space")
h.done()
