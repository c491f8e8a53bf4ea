#!/usr/bin/env python3
"""Attacks through the mock backend (docs/security.md "The mock backend"),
on a server that offers mock boxes beside native ones (mock_expect set) to
apps with API keys. The mock keeps a box's files in the server's own memory
and serves its files without any box around them, so:
- an app must not grow the server's memory without bound: an upload over
  the mock's 64 MiB per box is refused (even where the box's disk limit is
  larger) and nothing of it is kept;
- no path of a file call reaches the host: reads of /etc/passwd,
  /proc/self/environ or ../ paths find nothing of the host's, a write to an
  absolute host path creates nothing on the host;
- another app's mock box is not reachable by its id.
Before the mock backend existed this server does not start (mock_expect is
an unknown key), so the test fails there."""
import json
import os
import secrets
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

MIB = 1 << 20
KEY_A, KEY_B = "ka-" + secrets.token_hex(12), "kb-" + secrets.token_hex(12)
h = abserver.ServerHarness(budget=120)
expect = os.path.join(h.root, "expect.json")
with open(expect, "w") as f:
    json.dump({"commands": [{"command": "true"}]}, f)
srv = h.start_server(name="mockatk", token="admin-" + secrets.token_hex(8), config={
    "mock_expect": expect,
    "limits": {"disk": "1G", "memory": "256M", "timeout": "60s"},
    "api_keys": [{"key": KEY_A, "app_id": "appa"}, {"key": KEY_B, "app_id": "appb"}]})

r = srv.post("/v1/sandboxes", {"backend": "mock", "mode": "session"}, token=KEY_A)
h.eq(r.status, 201, "app A makes a mock box", r.describe())
h.eq((r.json or {}).get("provider") and (r.json or {}).get("backend_id") is not None, True,
     "... recorded", r.describe())
BOX = (r.json or {}).get("id", "none")

# ---- memory: one box's files are bounded ---------------------------------------------------

r = srv.put(srv.file_path(BOX, "big.bin"), bytes(65 * MIB), token=KEY_A, timeout=120)
h.ok(r.status in (413, 429, 507), "an upload of 65 MiB into a mock box with a 1 GiB disk is refused",
     r.describe())
r = srv.get(srv.file_path(BOX, "big.bin"), token=KEY_A)
h.eq(r.status, 404, "... and nothing of it is kept", r.describe())
r = srv.put(srv.file_path(BOX, "ok.bin"), bytes(8 * MIB), token=KEY_A, timeout=60)
h.ok(r.status in (200, 201), "an 8 MiB upload still works", r.describe())

# ---- paths: nothing of the host ------------------------------------------------------------

host_marker = "/tmp/abmock-" + secrets.token_hex(8)
for p in ("/etc/passwd", "../../../../etc/passwd", "/proc/self/environ", "/etc/hostname"):
    r = srv.get(srv.file_path(BOX, p), token=KEY_A)
    h.eq(r.status, 404, "read %s: nothing (the mock box has no host files)" % p, r.describe())
    h.ok(b"root:" not in r.body and b"AGENTBOX" not in r.body, "... and no host content in the answer")
r = srv.post("/v1/sandboxes/%s/tools/read_file" % BOX, {"path": "/etc/passwd"}, token=KEY_A)
h.ok("root:" not in ((r.json or {}).get("output") or ""), "tool read_file /etc/passwd: no host content",
     r.describe())
r = srv.put(srv.file_path(BOX, host_marker), b"planted", token=KEY_A)
h.ok(r.status in (200, 201), "write %s inside the mock box" % host_marker, r.describe())
h.ok(not os.path.exists(host_marker), "... creates nothing on the host")
if os.path.exists(host_marker):
    os.unlink(host_marker)

# ---- apps: B cannot reach A's mock box -----------------------------------------------------

r = srv.get("/v1/sandboxes/%s" % BOX, token=KEY_B)
h.eq(r.status, 404, "app B: A's mock box by id: 404", r.describe())
r = srv.get(srv.file_path(BOX, "ok.bin"), token=KEY_B)
h.eq(r.status, 404, "app B: A's file: 404", r.describe())
r = srv.exec(BOX, "true", token=KEY_B)
h.eq(r.status, 404, "app B: exec in A's box: 404", r.describe())

r = srv.delete("/v1/sandboxes/%s" % BOX, token=KEY_A)
h.ok(r.status in (200, 202, 204), "app A deletes its box", r.describe())
h.done()
