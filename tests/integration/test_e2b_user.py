"""E2B's account `user` and its sudo (docs/compat-e2b.md, "Users"), driven
by both E2B JS SDKs the project pins (tests/e2b/user.mjs): commands and file
calls run as `user` (uid 1000, home /home/user, a folder of its own), root
on request, files written through envd are the call's user's, and `sudo`
(the box's init running the command) in the forms people type, also in a
PTY. A box as made before E2B's account (a /home/user link to /workspace)
keeps running E2B calls as root.

Without node or the SDKs installed (and no way to install them) the file is
skipped."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import taprelay  # noqa: E402

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
E2B_DIR = os.path.join(ROOT, "tests", "e2b")

h = abserver.ServerHarness(budget=240)
node = taprelay.need_e2b_sdks(h)

TOKEN = "e2b-user-token-%s-0123456789" % os.getpid()
srv = h.start_server(token=TOKEN)

# a box as one made before E2B's account: /home/user a link to /workspace
legacy = srv.post("/v1/sandboxes", {}).get("id") or ""
r = srv.post("/v1/sandboxes/%s/exec" % legacy, {"command": "mkdir -p /home && ln -s /workspace /home/user"})
h.ok(r.status == 200 and r.get("exit_code") == 0, "an older box: /home/user a link to /workspace", r.describe())

for sdk in taprelay.E2B_SDKS:
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env.update({"E2B_API_URL": srv.url + "/e2b", "E2B_SANDBOX_URL": srv.url + "/e2b/envd", "E2B_API_KEY": TOKEN,
                "E2B_SDK_MODULE": sdk, "E2B_VALIDATE_API_KEY": "false", "LEGACY_BOX": legacy})
    taprelay.relay(h, [node, os.path.join(E2B_DIR, "user.mjs")], env, E2B_DIR, label=sdk, timeout=150,
                   min_checks=34)

h.done()
