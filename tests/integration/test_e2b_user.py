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

h = abserver.ServerHarness(budget=240)
node = taprelay.need_e2b_sdks(h)

TOKEN = "e2b-user-token-%s-0123456789" % os.getpid()
srv = h.start_server(token=TOKEN)

# a box as one made before E2B's account: /home/user a link to /workspace
legacy = srv.post("/v1/sandboxes", {}).get("id") or ""
r = srv.post("/v1/sandboxes/%s/exec" % legacy, {"command": "mkdir -p /home && ln -s /workspace /home/user"})
h.ok(r.status == 200 and r.get("exit_code") == 0, "an older box: /home/user a link to /workspace", r.describe())

taprelay.relay_e2b_sdks(h, node, "user.mjs", srv, TOKEN, min_checks=39, LEGACY_BOX=legacy)
h.done()
