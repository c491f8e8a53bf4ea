#!/usr/bin/env python3
"""Attacks on a volume's sub_path (OpenSandbox's subPath). A box that
mounts the whole volume plants symlinks in it (absolute, relative ones
climbing out, one deep inside) and another box asks for a sub_path through
them, with folders to make beyond them, hoping that the server (root on
the host) mounts, or makes folders in, something outside the volume. Each
attack passes only when it fails: the box is refused (400, or a create
that fails without mounting anything), no folder appears on the host
outside the volume, and no file of the host is visible in any box. Also
refused up front: absolute sub_paths, '..' names, and a sub_path that is a
file. A symlink that stays inside the volume works (not an escape), so the
refusals are not those of a feature that is missing."""
import os
import secrets
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=150)
srv = h.start_server(config={"limits": {"disk": "64M", "memory": "256M", "timeout": "60s"}})
TAG = "subpath-escape-" + secrets.token_hex(4)
OUTSIDE = "/tmp/" + TAG  # a folder the attack tries to make on the host
HOST_MARK = "/tmp/%s-mark" % TAG
with open(HOST_MARK, "w") as f:
    f.write("host-secret\n")


def sh(box, cmd):
    r = srv.exec(box, cmd)
    j = r.json if isinstance(r.json, dict) else {}
    return r, (j.get("stdout") or ""), j.get("exit_code")


h.eq(srv.post("/v1/volumes", {"name": "vx", "size_mib": 16}).status, 201, "volume vx")
r = srv.post("/v1/sandboxes", {"id": "planter", "volumes": [{"name": "vx", "path": "/vol"}]})
h.eq(r.status, 201, "the planter box mounts the whole volume", r.describe())
r, out, rc = sh("planter", "set -e; mkdir -p /vol/proj/a /vol/deep/er; echo in-a > /vol/proj/a/f; "
                           "ln -s / /vol/abs; ln -s /tmp /vol/abstmp; ln -s ../../../../../../.. /vol/up; "
                           "ln -s ../../../../../../../tmp /vol/deep/er/uptmp; ln -s proj /vol/inside; "
                           "echo x > /vol/afile")
h.eq(rc, 0, "it plants symlinks out of the volume (absolute and climbing) and one inside", r.describe())

made = []
for i, sub in enumerate(("abs/tmp/%s" % TAG, "abstmp/%s" % TAG, "up/tmp/%s" % TAG, "deep/er/uptmp/%s" % TAG,
                         "abs", "up", "abstmp", "deep/er/uptmp", "afile", "afile/x")):
    bid = "esc%d" % i
    r = srv.post("/v1/sandboxes", {"id": bid, "volumes": [{"name": "vx", "path": "/data", "sub_path": sub}]})
    h.ok(r.status == 400, "sub_path %r through a planted link: refused (got %d)"
         % (sub, r.status), r.describe())
    h.ok(not os.path.exists(OUTSIDE), "no folder %s was made on the host" % OUTSIDE)
    if r.status == 201:
        made.append(bid)
        r, out, rc = sh(bid, "cat /data/%s-mark /data/tmp/%s-mark 2>/dev/null; ls /data" % (TAG, TAG))
        h.ok("host-secret" not in out, "the box sees no file of the host", r.describe())

for sub in ("/tmp", "/", "../..", "proj/../../..", "..", "proj/.."):
    r = srv.post("/v1/sandboxes", {"id": "bad", "volumes": [{"name": "vx", "path": "/data", "sub_path": sub}]})
    h.eq(r.status, 400, "sub_path %r is refused up front" % sub, r.describe())
h.eq(srv.status_of("bad"), None, "no box was made for them")

# a link that stays inside the volume is no escape: it works
r = srv.post("/v1/sandboxes", {"id": "inside", "volumes": [{"name": "vx", "path": "/data", "sub_path": "inside/a"}]})
h.eq(r.status, 201, "sub_path through a link inside the volume works", r.describe())
r, out, rc = sh("inside", "cat /data/f")
h.eq(out, "in-a\n", "it mounts that folder of the volume", r.describe())

# the planter swaps a folder for a link out between starts: the next start is refused too
r = srv.post("/v1/sandboxes", {"id": "swap", "volumes": [{"name": "vx", "path": "/data", "sub_path": "deep/er"}]})
h.eq(r.status, 201, "a box mounts deep/er", r.describe())
h.eq(srv.post("/v1/sandboxes/swap/stop").status, 200, "it stops")
r, out, rc = sh("planter", "rm -rf /vol/deep && ln -s / /vol/deep")
h.eq(rc, 0, "the planter makes deep a link to /", r.describe())
r = srv.post("/v1/sandboxes/swap/start")
h.ok(r.status != 200, "the start through the swapped link is refused (got %d)" % r.status, r.describe())
h.ok(not os.path.exists("/er") and not os.path.exists(OUTSIDE), "nothing was made at /er on the host")

for b in ["planter", "inside", "swap"] + made:
    srv.delete("/v1/sandboxes/%s" % b)
for b in ["planter", "inside", "swap"] + made:
    abserver.wait_for(lambda: srv.status_of(b) is None, timeout=30 * h.slow)
for i in range(10):
    srv.delete("/v1/sandboxes/esc%d" % i)
h.eq(srv.delete("/v1/volumes/vx").status, 200, "the volume is deleted at the end")
VOLS = os.path.join(srv.data, "volumes")
for name in (os.listdir(VOLS) if os.path.isdir(VOLS) else []):
    os.system("umount -l '%s' 2>/dev/null" % os.path.join(VOLS, name, "mnt"))
os.unlink(HOST_MARK)
h.done()
