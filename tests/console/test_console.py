#!/usr/bin/env python3
"""The web console in a real browser: Debian's Chromium, headless, driven by
puppeteer-core (console/node_modules) through console.mjs, against a real
`agentbox serve` with an admin token and an app-scoped API key.

The console's routes over plain HTTP (static files, CSP, ETag, the exec
history and stats in the list) are tested by integration/test_serve_console.py,
which also runs under ASan. In the browser (console.mjs, its TAP lines relayed): log in (a wrong token is
refused; the token stays in sessionStorage), create a box from the form, see
its exec history and its events live, a file named like markup listed as text
(no element made, no script run), upload a file and see it listed, download it
back byte-identical, download the folder as a zip, preview a text file, type
`echo hi` in the terminal and see `hi` (skipped, naming the missing route, when
the server has no terminal API), validate a bad and a good skill and install
the good one, run a Python snippet in the playground, chat with the agent
(the stand-in model of tests/llm: a tool call and its result shown), see the server's charts,
no CSP violation and no token in any URL, an API key of another app not seeing
the box. Screenshots of every page go to meson-logs/console/ (or
$AGENTBOX_CONSOLE_SHOTS). The same run follows against a server without a
token (an empty token on the login form): that server refuses other sites'
pages (Host, Origin, Sec-Fetch-Site, content types; docs/security.md), and
its own console, same-origin, must not notice.

Skipped when Chromium or puppeteer-core is missing (scripts/browser-deps.sh
and scripts/npm-deps.sh install them)."""
import io
import json
import os
import shutil
import sys
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "llm"))
import abserver  # noqa: E402
import standin  # noqa: E402
import taprelay  # noqa: E402

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
CONSOLE_DIR = os.path.join(ROOT, "console")
CHROMIUM = os.environ.get("AGENTBOX_CHROMIUM", "/usr/bin/chromium")

h = abserver.ServerHarness(budget=280)
TOKEN = "console-admin-token-%d-0123456789" % os.getpid()
APP_KEY = "console-app-key-0123456789abcdef"
model = standin.start(os.path.join(h.root, "standin.jsonl"))  # the chat page's model
CONFIG = {"api_keys": [{"key": APP_KEY, "app_id": "otherapp"}],
          "llm": {"base_url": model.base_url(), "api_key": "sk-console"}}
srv = h.start_server(token=TOKEN, config=CONFIG)

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
def run_browser(srv, token, label, shots):
    """Runs console.mjs against srv, logging in with token; relays its TAP
    lines as "LABEL: name"."""
    os.makedirs(shots, exist_ok=True)
    for old in os.listdir(shots):  # the previous run's
        if old.endswith(".png"):
            os.unlink(os.path.join(shots, old))
    cfg = {"base": srv.url, "token": token, "app_key": APP_KEY, "shots": shots, "work": work,
           "chromium": CHROMIUM, "console_dir": CONSOLE_DIR, "files": paths}
    cfg_path = os.path.join(work, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBOX_TOKEN")}
    env["HOME"] = work  # Chromium's profile and crash dirs
    taprelay.relay(h, [node, os.path.join(os.path.dirname(os.path.abspath(__file__)), "console.mjs"), cfg_path],
                   env, work, label=label, timeout=200)

run_browser(srv, TOKEN, "browser", shots)
# A server without a token, on a data folder of its own: the console logs in
# with an empty token.
srv.stop()
open_srv = h.start_server(name="notoken", token=None, config=CONFIG, data=h.new_data_dir("notoken"))
run_browser(open_srv, "", "browser (no token)", os.path.join(shots, "no-token"))
h.diag("screenshots: %s" % shots)
h.done()
