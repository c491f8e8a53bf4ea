#!/usr/bin/env python3
"""The OpenSandbox front where execd and OpenSandbox's server have edges a
program may rely on (tests/opensandbox/edges.mjs, through the JS SDK and
plain fetch): output events one per line without the line's end (a last
line without one at the end, long lines in 64 KiB pieces, characters never
split, bytes that are not UTF-8 as U+FFFD), no execution_complete after an
error (foreground commands and session runs), X-Request-ID echoed (or
made) on every answer of the front, errors too, and execd's endpoint
ending in /44772 (the old route kept). Skipped (77) only when node is
missing."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import taprelay  # noqa: E402

OSB_DIR = os.path.join(taprelay.ROOT, "tests", "opensandbox")
node = taprelay.find_node()
h = abserver.ServerHarness(budget=120)
have_sdk = taprelay.ensure_sdk(h, os.path.join(OSB_DIR, "node_modules", "@alibaba-group", "opensandbox"),
                              "the OpenSandbox SDK (tests/opensandbox)")

TOKEN = "osb-edges-token-%s-0123456789" % os.getpid()
srv = h.start_server(token=TOKEN)
if have_sdk:
    taprelay.relay(h, [node, os.path.join(OSB_DIR, "edges.mjs"), srv.url, TOKEN],
                   dict(os.environ, OPENSANDBOX_DISABLE_METRICS="1"), OSB_DIR, label="edges", timeout=100, srv=srv)
h.done()
