#!/usr/bin/env python3
"""`agentbox serve --store postgres://...` against the real PostgreSQL server
that scripts/pg.sh starts on loopback (AGENTBOX_TEST_PG_URL; skipped without
it): /health names the store; two servers on one data dir and one database
make exactly one box for concurrent acquires of the same keys; API keys made
on one server work on the other; kill -9 of a server and a restart find the
box and its files again. Each run uses a database of its own, dropped at the
end."""
import os
import subprocess
import sys
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
from abserver import chat_box_id  # noqa: E402

admin_url = os.environ.get("AGENTBOX_TEST_PG_URL")
h = abserver.ServerHarness(budget=110)
if not admin_url:
    h.skip_all("AGENTBOX_TEST_PG_URL is not set (scripts/test.sh starts PostgreSQL with scripts/pg.sh)")

db = "agentbox_e2e_%d" % os.getpid()


def psql(sql):
    return subprocess.run(["psql", admin_url, "-v", "ON_ERROR_STOP=1", "-qAtc", sql],
                          capture_output=True, text=True, timeout=30)


r = psql("CREATE DATABASE %s" % db)
if r.returncode != 0:
    h.bail_out("cannot create a test database: %s" % r.stderr.strip())
u = urllib.parse.urlsplit(admin_url)
store_url = urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + db, u.query, u.fragment))

try:
    cfg = {"store": store_url}
    S1 = h.start_server(config=cfg, name="pg1", token="e2e-admin-token-0123456789")
    hl = S1.health() or {}
    h.eq(hl.get("store"), "postgres", "/health says the store is postgres", str(hl))

    S2 = h.start_server(config=cfg, name="pg2", token="e2e-admin-token-0123456789")
    keys = {"app_id": "pgapp", "user_id": "u", "chat_id": "c"}
    CID = chat_box_id("pgapp", "u", "c")
    import threading

    res = []
    lock = threading.Lock()

    def acquire(s):
        r = s.post("/v1/sandboxes", keys, timeout=60)
        with lock:
            res.append(r)

    ts = [threading.Thread(target=acquire, args=(s,)) for s in [S1, S2] * 6]
    for t in ts:
        t.start()
    for t in ts:
        t.join(90)
    h.eq(sorted(r.status for r in res), [200] * 11 + [201], "12 concurrent acquires on two servers: one 201",
         "\n".join(r.describe()[:300] for r in res if r.status not in (200, 201)))
    h.eq(sorted(set(r.get("id") for r in res)), [CID], "... one box id")
    h.eq([b for b in (h.cli_boxes() or {})], [CID], "... and one box in the backend")

    r = S1.exec(CID, "echo kept > /workspace/kept.txt")
    h.eq(r.status, 200, "write a file through server 1", r.describe())
    r = S2.exec(CID, "cat /workspace/kept.txt")
    h.eq((r.status, r.get("stdout")), (200, "kept\n"), "read it through server 2", r.describe())

    r = S1.post("/v1/keys", {"app_id": "pgapp"})
    h.eq(r.status, 201, "an API key made on server 1", r.describe())
    key = r.get("key") if r.status == 201 else "none"
    r = S2.get("/v1/sandboxes", token=key)
    h.eq((r.status, [b.get("id") for b in (r.get("sandboxes") or [])]), (200, [CID]),
         "... works on server 2 and sees its app's box", r.describe())

    S1.kill9()
    S2.stop()
    S1.restart()
    b = S1.box(CID) or {}
    h.eq(b.get("status"), "running", "after kill -9 and a restart the box is found running", str(b))
    r = S1.exec(CID, "cat /workspace/kept.txt")
    h.eq((r.status, r.get("stdout")), (200, "kept\n"), "... with its files", r.describe())
    r = S1.delete("/v1/sandboxes/%s" % CID)
    h.eq(r.status, 202, "delete it", r.describe())
    h.ok(abserver.wait_for(lambda: S1.get("/v1/sandboxes/%s" % CID).status == 404, timeout=20),
         "... and it is gone from the database")
finally:
    for s in h.servers:
        s.stop()
    r = psql("DROP DATABASE IF EXISTS %s WITH (FORCE)" % db)
    if r.returncode != 0:
        h.diag("could not drop %s: %s" % (db, r.stderr.strip()))
h.done()
