#!/usr/bin/env python3
"""The web console in a real browser: Debian's Chromium, headless, driven by
puppeteer-core (console/node_modules) through console.mjs, against a real
`agentbox serve` with an admin token and an app-scoped API key.

Here: / and /console/* are served from the binary with Content-Type, ETag
(304 on If-None-Match), the CSP and nosniff; an unknown console file is 404;
GET /v1/sandboxes/{id}/execs and GET /v1/sandboxes?stats=1.

In the browser (console.mjs, its TAP lines relayed): log in (a wrong token is
refused; the token stays in sessionStorage), create a box from the form, see
its exec history and its events live, a file named like markup listed as text
(no element made, no script run), upload a file and see it listed, download it
back byte-identical, download the folder as a zip, preview a text file, type
`echo hi` in the terminal and see `hi` (skipped, naming the missing route, when
the server has no terminal API), validate a bad and a good skill and install
the good one, run a Python snippet in the playground, see the server's charts,
no CSP violation and no token in any URL, an API key of another app not seeing
the box. Screenshots of every page go to meson-logs/console/ (or
$AGENTBOX_CONSOLE_SHOTS).

Skipped when Chromium or puppeteer-core is missing (scripts/browser-deps.sh
and scripts/npm-deps.sh install them)."""
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CONSOLE_DIR = os.path.join(ROOT, "console")
CHROMIUM = os.environ.get("AGENTBOX_CHROMIUM", "/usr/bin/chromium")

h = abserver.ServerHarness(budget=280)
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

# ---- the browser -------------------------------------------------------------------------
node = shutil.which("node")
pptr = os.path.join(CONSOLE_DIR, "node_modules", "puppeteer-core", "package.json")
why = None
if not node:
    why = "node is not installed (scripts/npm-deps.sh installs it)"
elif not os.path.exists(pptr):
    why = "puppeteer-core is not installed in console/node_modules (run scripts/npm-deps.sh)"
elif not os.access(CHROMIUM, os.X_OK):
    why = "%s is not installed (run scripts/browser-deps.sh)" % CHROMIUM
if why:
    h.skip("the console in a browser", why)
    h.done()

shots = os.environ.get("AGENTBOX_CONSOLE_SHOTS") or os.path.join(h.root, "shots")
os.makedirs(shots, exist_ok=True)
for old in os.listdir(shots):  # the previous run's
    if old.endswith(".png"):
        os.unlink(os.path.join(shots, old))
work = os.path.join(h.root, "browser")
os.makedirs(work)


def zip_bytes(files):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            z.writestr(name, data)
    return buf.getvalue()


paths = {"upload": os.path.join(work, "upload.bin"), "good_skill": os.path.join(work, "console-skill.zip"),
         "bad_skill": os.path.join(work, "bad-skill.zip")}
with open(paths["upload"], "wb") as f:
    f.write(bytes(range(256)) * 64 + os.urandom(3000) + b"\r\n\x00end")
with open(paths["good_skill"], "wb") as f:
    f.write(zip_bytes({"console-skill/SKILL.md": "---\nname: console-skill\ndescription: Made by the console test.\n---\n# Hi\n",
                       "console-skill/scripts/run.sh": "#!/bin/sh\necho run\n"}))
with open(paths["bad_skill"], "wb") as f:
    f.write(zip_bytes({"bad-skill/SKILL.md": "---\nname: another-name\ndescription: The name does not match.\n---\n"}))
cfg = {"base": srv.url, "token": TOKEN, "app_key": APP_KEY, "shots": shots, "work": work, "chromium": CHROMIUM,
       "console_dir": CONSOLE_DIR, "files": paths}
cfg_path = os.path.join(work, "config.json")
with open(cfg_path, "w") as f:
    json.dump(cfg, f)

env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBOX_TOKEN")}
env["HOME"] = work  # Chromium's profile and crash dirs
try:
    p = subprocess.run([node, os.path.join(os.path.dirname(os.path.abspath(__file__)), "console.mjs"), cfg_path],
                       capture_output=True, text=True, timeout=200 * h.slow, env=env, cwd=work)
    out, err, rc = p.stdout, p.stderr, p.returncode
except subprocess.TimeoutExpired as e:
    out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
    rc = "timeout"

n = 0
pending = None
for line in out.splitlines() + [""]:
    if line.startswith("# ") and pending:
        pending[1].append(line[2:])
        continue
    if pending:
        good, diag, name = pending
        if " # SKIP " in name:
            name, reason = name.split(" # SKIP ", 1)
            h.skip("browser: " + name, reason)
        else:
            h.ok(good, "browser: " + name, "\n".join(diag) + ("\nnode stderr:\n" + err[-1500:] if not good else ""))
        pending = None
    if line.startswith("ok ") or line.startswith("not ok "):
        pending = (line.startswith("ok "), [], line.split(" - ", 1)[1] if " - " in line else line)
        n += 1
h.ok(rc == 0 and n > 0, "console.mjs ran %d tests and exited 0" % n,
     "exit %s\nstdout:\n%s\nstderr:\n%s" % (rc, out[-2000:], err[-3000:]))
h.diag("screenshots: %s" % shots)
h.done()
