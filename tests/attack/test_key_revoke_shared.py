#!/usr/bin/env python3
"""Streams end when their key does, also on the other servers of a shared
store (issue 24, item 4). The check passes only when the attack fails.

Two servers share one PostgreSQL database (AGENTBOX_TEST_PG_URL, from
scripts/pg.sh; skipped without it; a database of its own, dropped at the
end). The holder of a leaked key keeps an event stream open on server 2;
the admin deletes the key on server 1. Must hold: server 2 closes the stream
within its key check interval (2 s) and a little; a stream of another key
lives on. Until this was fixed the stream stayed open. The same for an E2B
envd process stream on server 2, opened with the envdAccessToken the leaked
key got there: it ends, and the token is 401 afterwards."""
import os
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import rawstream  # noqa: E402
from rawstream import closed_by_server  # noqa: E402

admin_url = os.environ.get("AGENTBOX_TEST_PG_URL")
h = abserver.ServerHarness(budget=90)
if not admin_url:
    h.skip_all("AGENTBOX_TEST_PG_URL is not set (scripts/test.sh starts PostgreSQL with scripts/pg.sh)")

END_WITHIN = 5.0  # the check runs every 2 s; a loaded machine gets some slack
db = "agentbox_keyrevoke_%d" % os.getpid()


def psql(sql):
    return subprocess.run(["psql", admin_url, "-v", "ON_ERROR_STOP=1", "-qAtc", sql],
                          capture_output=True, text=True, timeout=30)


def event_stream(srv, token):
    return rawstream.open_stream(srv, "GET", "/v1/events", token)


r = psql("CREATE DATABASE %s" % db)
if r.returncode != 0:
    h.bail_out("cannot create a test database: %s" % r.stderr.strip())
u = urllib.parse.urlsplit(admin_url)
store_url = urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + db, u.query, u.fragment))
TOKEN = "revoke-admin-token-0123456789"
try:
    S1 = h.start_server(config={"store": store_url}, name="pg1", token=TOKEN)
    S2 = h.start_server(config={"store": store_url}, name="pg2", token=TOKEN)
    keys = {}
    for name in ("leaked", "kept"):
        r = S1.post("/v1/keys", {"app_id": "appa", "name": name})
        h.eq(r.status, 201, "a key %s on server 1" % name, r.describe())
        keys[name] = (r.get("key") or "none", r.get("key_id") or "none")
    leaked, st = event_stream(S2, keys["leaked"][0])
    h.eq(st, 200, "the leaked key opens an event stream on server 2", "status %d" % st)
    kept, st = event_stream(S2, keys["kept"][0])
    h.eq(st, 200, "the other key opens one too", "status %d" % st)
    h.ok(not closed_by_server(leaked, 0.1), "control: the stream is open before the delete")
    # an E2B envd stream on server 2, by the envdAccessToken the leaked key got there
    r = S2.post("/e2b/sandboxes", {"templateID": "base", "timeout": 600},
                headers={"X-API-Key": keys["leaked"][0]}, token=None)
    h.eq(r.status, 201, "the leaked key makes an E2B sandbox on server 2", r.describe())
    ebox, etok = r.get("sandboxID") or "none", r.get("envdAccessToken") or "none"
    envd, st = rawstream.open_envd_stream(S2, ebox, etok, "process.Process/Start",
                                          {"process": {"cmd": "/bin/sleep", "args": ["120"]}})
    h.eq(st, 200, "its token opens an envd process stream on server 2", "status %d" % st)

    r = S1.delete("/v1/keys/%s" % keys["leaked"][1])
    h.eq(r.status, 200, "the admin deletes the leaked key on server 1", r.describe())
    h.ok(closed_by_server(leaked, END_WITHIN),
         "server 2 ends the deleted key's event stream within %gs" % END_WITHIN)
    h.ok(closed_by_server(envd, END_WITHIN),
         "server 2 ends the envd stream of the deleted key's token within %gs" % END_WITHIN)
    h.ok(not closed_by_server(kept, 0.1), "the other key's stream on server 2 lives on")
    r = S2.request("POST", "/e2b/envd/filesystem.Filesystem/Stat", body={"path": "/workspace"}, token=None,
                   headers={"E2b-Sandbox-Id": ebox, "X-Access-Token": etok})
    h.eq(r.status, 401, "the deleted key's envd token opens nothing new on server 2", r.describe())
    envd.close()
    S2.delete("/e2b/sandboxes/" + ebox)
    r = S2.get("/v1/events", token=keys["leaked"][0], timeout=5)
    h.eq(r.status, 401, "the deleted key opens nothing new on server 2", r.describe())
    leaked.close()
    kept.close()
finally:
    for s in h.servers:
        s.stop()
    r = psql("DROP DATABASE IF EXISTS %s WITH (FORCE)" % db)
    if r.returncode != 0:
        h.diag("could not drop %s: %s" % (db, r.stderr.strip()))
h.done()
