#!/usr/bin/env python3
"""The web console's routes over HTTP (the browser test is tests/console):
/ and /console/NAME are served from the binary with their Content-Type, a
strong ETag (304 on If-None-Match), Cache-Control: no-cache, the strict
Content-Security-Policy and nosniff, without a token; unknown names are 404,
other methods 405. The API routes the console added: GET
/v1/sandboxes/{id}/execs (the exec audit, newest first, limit, scoped to the
key's app) and GET /v1/sandboxes?stats=1."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=110)
TOKEN = "console-admin-token-%d-0123456789" % os.getpid()
APP_KEY = "console-app-key-0123456789abcdef"
srv = h.start_server(token=TOKEN, config={"api_keys": [{"key": APP_KEY, "app_id": "otherapp"}]})

# ---- static files, over plain HTTP ---------------------------------------------------
r = srv.get("/", token=None)
h.eq(r.status, 200, "GET / answers 200 without a token", r.describe())
h.ok((r.header("Content-Type") or "").startswith("text/html"), "GET / is text/html", r.describe())
csp = r.header("Content-Security-Policy") or ""
for part in ("default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'",
             "object-src 'none'"):
    h.contains(csp, part, "the console's CSP has %s" % part, r.describe())
h.not_contains(csp, "unsafe-inline", "the CSP allows no inline script or style", csp)
h.eq(r.header("X-Content-Type-Options"), "nosniff", "X-Content-Type-Options: nosniff", r.describe())
h.not_contains(r.text, "<script>", "index.html has no inline script", r.text[:2000])
h.not_contains(r.text, "style=", "index.html has no inline style", r.text[:2000])
etag = r.header("ETag")
h.ok(etag and etag.startswith('"') and etag.endswith('"'), "GET / has a strong ETag", r.describe())
r2 = srv.get("/", token=None, headers={"If-None-Match": etag or '"x"'})
h.ok(r2.status == 304 and not r2.body and r2.header("ETag") == etag, "If-None-Match with it answers 304, no body",
     r2.describe())
r2 = srv.get("/", token=None, headers={"If-None-Match": '"0000000000000000"'})
h.eq(r2.status, 200, "another ETag answers 200", r2.describe())
r = srv.get("/console/app.mjs", token=None)
h.ok(r.status == 200 and (r.header("Content-Type") or "").startswith("text/javascript"),
     "a module is text/javascript", r.describe())
h.ok(r.header("Cache-Control") == "no-cache" and r.header("Content-Security-Policy") == csp,
     "assets are revalidated (no-cache) and carry the same CSP", r.describe())
r = srv.get("/console/style.css", token=None)
h.ok(r.status == 200 and (r.header("Content-Type") or "").startswith("text/css"), "style.css is text/css", r.describe())
r = srv.get("/console/xterm.mjs", token=None)
h.ok(r.status == 200 and b"Terminal" in r.body, "xterm.js is built into the binary (console/node_modules at build time)",
     "%s: run scripts/npm-deps.sh, then rebuild" % r.describe()[:300])
r = srv.get("/console/nope.js", token=None)
h.eq(r.status, 404, "an unknown console file is 404", r.describe())
r = srv.get("/console/..%2fapi.mjs", token=None)
h.eq(r.status, 404, "a console name with a slash is 404", r.describe())
r = srv.post("/", {}, token=None)
h.eq(r.status, 405, "POST / is 405", r.describe())

# ---- the API routes the console added ---------------------------------------------------
r = srv.post("/v1/sandboxes", {"app_id": "a1", "user_id": "u", "chat_id": "execs"})
box = r.get("id")
h.eq(r.status, 201, "a box for the exec history", r.describe())
for cmd in ("echo one", "exit 3"):
    srv.exec(box, cmd)
r = abserver.wait_for(lambda: (lambda x: x if x.status == 200 and len(x.get("execs") or []) >= 2 else None)(
    srv.get("/v1/sandboxes/%s/execs" % box)), timeout=10) or srv.get("/v1/sandboxes/%s/execs" % box)
ex = r.get("execs") or []
h.ok(r.status == 200 and len(ex) >= 2 and ex[0].get("command") == "exit 3" and ex[0].get("exit_code") == 3
     and ex[1].get("command") == "echo one" and ex[1].get("stdout_bytes") == 4,
     "GET .../execs lists the box's execs, newest first, with exit code and sizes", r.describe())
r = srv.get("/v1/sandboxes/%s/execs" % box, query={"limit": "1"})
h.ok(r.status == 200 and len(r.get("execs") or []) == 1, "?limit=1 gives one", r.describe())
r = srv.get("/v1/sandboxes/%s/execs" % box, query={"limit": "0"})
h.eq(r.status, 400, "?limit=0 is 400", r.describe())
r = srv.get("/v1/sandboxes/%s/execs" % box, token=APP_KEY)
h.eq(r.status, 404, "an API key of another app gets 404 for the box's execs", r.describe())
r = srv.get("/v1/sandboxes/nobox/execs")
h.eq(r.status, 404, "execs of an unknown box: 404", r.describe())
r = srv.get("/v1/sandboxes", query={"stats": "1", "app_id": "a1"})
b = (r.get("sandboxes") or [{}])[0]
st = b.get("stats") or {}
h.ok(r.status == 200 and st.get("memory_limit", 0) > 0 and "cpu_usage_ns" in st and "disk_used_bytes" in st,
     "GET /v1/sandboxes?stats=1 adds stats to running boxes", r.describe())
r = srv.get("/v1/sandboxes", query={"app_id": "a1"})
h.ok(r.status == 200 and "stats" not in ((r.get("sandboxes") or [{}])[0]), "without stats=1 the list has none",
     r.describe())

h.done()
