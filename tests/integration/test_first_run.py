"""A newcomer's first E2B or OpenSandbox call (docs/compat-e2b.md,
docs/compat-opensandbox.md: "A first run").

Both SDKs refuse to start without an API key, and a server started by
./scripts/run.sh has no token. Such a server answers loopback clients only
and takes each of them for its admin; it now also takes any key the SDKs
send (X-API-Key, OPEN-SANDBOX-API-KEY, Authorization: Bearer) that is no
one's as that admin, while a key of the config or the store still acts as
its own app (and sees only that app's boxes). Checked over plain HTTP, then
with the real SDKs (tests/e2b/first_run.mjs, tests/opensandbox/first_run.mjs)
and a made-up key. A foreign Host is still refused with a key."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
E2B_DIR = os.path.join(ROOT, "tests", "e2b")
OSB_DIR = os.path.join(ROOT, "tests", "opensandbox")
MADE_UP = "my-first-key-%d" % os.getpid()
APP_KEY = "app-key-%d-0123456789abcdef" % os.getpid()

h = abserver.ServerHarness(budget=200)
srv = h.start_server(config={"api_keys": [{"key": APP_KEY, "app_id": "appk"}]})

# ---- plain HTTP: each way the SDKs send a key -------------------------------------------
for what, method, path, hdrs in (
        ("E2B X-API-Key", "GET", "/e2b/v2/sandboxes", {"X-API-Key": MADE_UP}),
        ("OPEN-SANDBOX-API-KEY", "GET", "/opensandbox/v1/sandboxes", {"OPEN-SANDBOX-API-KEY": MADE_UP}),
        ("Authorization: Bearer on REST", "GET", "/v1/sandboxes", {"Authorization": "Bearer " + MADE_UP}),
        ("Authorization: Bearer on OpenSandbox", "GET", "/opensandbox/v1/sandboxes",
         {"Authorization": "Bearer " + MADE_UP})):
    r = srv.request(method, path, headers=hdrs, token=None)
    h.eq(r.status, 200, "a made-up key (%s) from loopback on a token-less server: 200" % what, r.describe())

# a made-up key is the admin: its box is the admin's (no app)
r = srv.post("/e2b/v2/sandboxes", {"templateID": "base", "timeout": 120}, headers={"X-API-Key": MADE_UP}, token=None)
h.eq(r.status, 201, "E2B create with a made-up key: 201", r.describe())
admin_box = r.get("sandboxID")

# a config key still acts as its app: it does not see the admin's box, the admin sees its box
r = srv.post("/e2b/v2/sandboxes", {"templateID": "base", "timeout": 120}, headers={"X-API-Key": APP_KEY}, token=None)
h.eq(r.status, 201, "E2B create with the config key of app appk: 201", r.describe())
app_box = r.get("sandboxID")
r = srv.request("GET", "/e2b/v2/sandboxes", headers={"X-API-Key": APP_KEY}, token=None)
ids = [s.get("sandboxID") for s in (r.json or []) if isinstance(s, dict)]
h.ok(r.status == 200 and app_box in ids and admin_box not in ids,
     "the app's key lists its own box only, not the made-up key's (the admin's)", r.describe())
r = srv.request("GET", "/e2b/sandboxes/%s" % admin_box, headers={"X-API-Key": APP_KEY}, token=None)
h.eq(r.status, 404, "the app's key cannot see the admin's box", r.describe())
r = srv.request("GET", "/v1/sandboxes", headers={"Authorization": "Bearer " + MADE_UP}, token=None)
ids = [s.get("id") for s in (r.get("sandboxes") or []) if isinstance(s, dict)]
h.ok(r.status == 200 and admin_box in ids and app_box in ids, "the made-up key (the admin) sees both boxes",
     r.describe())
for b in (admin_box, app_box):
    srv.request("DELETE", "/e2b/sandboxes/%s" % b, headers={"X-API-Key": MADE_UP}, token=None)

# what a token-less server refuses still holds with a key
r = srv.request("GET", "/e2b/v2/sandboxes", headers={"X-API-Key": MADE_UP, "Host": "evil.example:80"}, token=None)
h.eq(r.status, 403, "a made-up key with a foreign Host (DNS rebinding): still 403", r.describe())
r = srv.request("GET", "/v1/sandboxes", headers={"Authorization": "Basic " + MADE_UP}, token=None)
h.eq(r.status, 401, "a malformed Authorization (Basic) is still 401", r.describe())

# a server with a token: a made-up key is refused as before
tsrv = h.start_server(token="first-run-admin-token-%d" % os.getpid(), name="with-token")
r = tsrv.request("GET", "/e2b/v2/sandboxes", headers={"X-API-Key": MADE_UP}, token=None)
h.eq(r.status, 401, "a server with a token: a made-up key is 401", r.describe())
r = tsrv.request("GET", "/opensandbox/v1/sandboxes", headers={"OPEN-SANDBOX-API-KEY": MADE_UP}, token=None)
h.eq(r.status, 401, "a server with a token: a made-up OPEN-SANDBOX-API-KEY is 401", r.describe())


# ---- the real SDKs with a made-up key ------------------------------------------------------
def relay(label, argv, env, cwd):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120 * h.slow, env=env, cwd=cwd)
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        rc = "timeout"
    lines = out.splitlines()
    n = 0
    for i, line in enumerate(lines):
        if line.startswith("ok ") or line.startswith("not ok "):
            n += 1
            diag = [x[2:] for x in lines[i + 1:i + 31] if x.startswith("# ")]
            h.ok(line.startswith("ok "), "%s: %s" % (label, line.split(" - ", 1)[-1]),
                 "\n".join(diag) + "\nnode stderr:\n" + err[-1500:])
    h.ok(rc == 0 and n >= 3, "%s: ran %d checks and exited 0" % (label, n),
         "exit %s\nstdout:\n%s\nstderr:\n%s" % (rc, out[-2000:], err[-2000:]))


node = shutil.which("node")
if not node:
    h.skip("the SDKs with a made-up key", "node is not installed (scripts/npm-deps.sh installs it)")
else:
    if not os.path.isdir(os.path.join(E2B_DIR, "node_modules", "e2b")):
        h.skip("E2B's SDK with a made-up key", "the e2b SDK is not installed (scripts/npm-deps.sh)")
    else:
        # SDK 2.45 checks a key's form before sending it: a made-up key in E2B's form
        for sdk, key in (("e2b", MADE_UP), ("e2b-2.45.0", "e2b_" + "0123456789abcdef" * 2 + "01234567")):
            if not os.path.isdir(os.path.join(E2B_DIR, "node_modules", sdk)):
                continue
            env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
            env.update({"E2B_API_URL": srv.url + "/e2b", "E2B_SANDBOX_URL": srv.url + "/e2b/envd",
                        "E2B_API_KEY": key, "E2B_SDK_MODULE": sdk})
            relay("E2B SDK %s" % sdk, [node, os.path.join(E2B_DIR, "first_run.mjs")], env, E2B_DIR)
    if not os.path.isdir(os.path.join(OSB_DIR, "node_modules", "@alibaba-group", "opensandbox")):
        h.skip("the OpenSandbox SDK with a made-up key", "the SDK is not installed (scripts/npm-deps.sh)")
    else:
        env = dict(os.environ, OPENSANDBOX_DISABLE_METRICS="1")
        relay("OpenSandbox SDK", [node, os.path.join(OSB_DIR, "first_run.mjs"), srv.url, MADE_UP], env, OSB_DIR)

h.done()
