#!/usr/bin/env python3
"""The OpenSandbox JS SDK (@alibaba-group/opensandbox, pinned in
tests/opensandbox/package-lock.json) drives agentbox's OpenSandbox front
unchanged: tests/opensandbox/sdk.mjs runs against a server started here and
its TAP lines are relayed as this file's tests. It covers create, commands
(foreground, streaming, background with status and logs, interrupt,
timeouts, command not found), files and directories, metrics, pause and
resume with the files kept, renew, endpoints (execd and a dev server in the
box through the port route), list and metadata, the SDK's own errors
(unknown sandbox, wrong key), app-scoped keys, and the calls FastGPT's
adapter makes in its opensandbox mode. Skipped (77) only when node is
missing; when the SDK is not installed, scripts/npm-deps.sh installs it."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import imagelib  # noqa: E402
import taprelay  # noqa: E402

OSB_DIR = os.path.join(taprelay.ROOT, "tests", "opensandbox")
node = taprelay.find_node()
h = abserver.ServerHarness(budget=240)
have_sdk = taprelay.ensure_sdk(h, os.path.join(OSB_DIR, "node_modules", "@alibaba-group", "opensandbox"),
                              "the OpenSandbox SDK (tests/opensandbox)")

TOKEN = "osb-admin-token-%s-0123456789" % os.getpid()
srv = h.start_server(token=TOKEN, config={"reaper_interval": "500ms"})  # TTL checks

# An image of agentbox's image store for the SDK's image field: busybox,
# imported as a docker save archive (tests/lib/imagelib.py).
IMAGE = ""
if not abserver.abtest.init_is_static():
    h.skip("an image of the store (boxes from images, snapshots)",
           "agentbox-init is dynamically linked (sanitized build): it cannot start in an image's root")
elif os.path.exists(imagelib.BUSYBOX):
    arch = os.path.join(h.root, "bb.tar")
    imagelib.write_docker_save(arch, [{"layers": [imagelib.busybox_layer()],
                                       "config": imagelib.config(env=["PATH=/bin"]),
                                       "tags": ["osb/bb:1"]}])
    with open(arch, "rb") as f:
        r = srv.post("/v1/images/import", f.read(), headers={"Content-Type": "application/x-tar"})
    h.eq(r.status, 201, "an image imported into the store for the SDK (osb/bb:1)", r.describe())
    IMAGE = "osb/bb:1" if r.status == 201 else ""
else:
    h.skip("an image of the store", "no %s on this host to build one from" % imagelib.BUSYBOX)

if have_sdk:
    taprelay.relay(h, [node, os.path.join(OSB_DIR, "sdk.mjs"), srv.url, TOKEN, IMAGE],
                   dict(os.environ, OPENSANDBOX_DISABLE_METRICS="1"), OSB_DIR, label="SDK", timeout=200, srv=srv)
h.done()
