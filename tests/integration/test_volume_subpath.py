#!/usr/bin/env python3
"""A volume's sub_path (OpenSandbox's subPath of a pvc volume): the box
sees that folder of the volume at its mount path, not the volume's root;
a missing folder is made (as Kubernetes makes a subPath), owned by the
box's root; the sub_path is kept in the box's spec, so a stop and start
(and a restart of the server) mount the same folder; bad sub_paths are
refused with 400 before any box is made; the OpenSandbox front passes a
pvc volume's subPath on (and a host volume's, joined to its path)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=150)
TOKEN = "subpath-token-%d-0123456789" % os.getpid()
HOSTDIR = os.path.join(h.root, "hostshare")
os.makedirs(os.path.join(HOSTDIR, "inner"))
with open(os.path.join(HOSTDIR, "inner", "host-file"), "w") as f:
    f.write("from-the-host\n")
srv = h.start_server(token=TOKEN, config={"limits": {"disk": "64M", "memory": "256M", "timeout": "60s"},
                                          "host_mount_prefixes": [HOSTDIR]})


def sh(box, cmd):
    r = srv.exec(box, cmd)
    j = r.json if isinstance(r.json, dict) else {}
    return r, (j.get("stdout") or ""), j.get("exit_code")


h.eq(srv.post("/v1/volumes", {"name": "shared", "size_mib": 16}).status, 201, "volume shared")
r = srv.post("/v1/sandboxes", {"id": "root", "volumes": [{"name": "shared", "path": "/vol"}]})
h.eq(r.status, 201, "box root mounts the whole volume", r.describe())
r, out, rc = sh("root", "mkdir -p /vol/proj/a && echo in-a > /vol/proj/a/f && echo at-root > /vol/top")
h.eq(rc, 0, "root writes proj/a/f and top", r.describe())

# ---- the folder, not the root -----------------------------------------------------------
r = srv.post("/v1/sandboxes", {"id": "sub", "volumes": [{"name": "shared", "path": "/data", "sub_path": "proj/a"}]})
h.eq(r.status, 201, "box sub mounts sub_path proj/a", r.describe())
r, out, rc = sh("sub", "ls -A /data; cat /data/f; test -e /data/top && echo ROOT-VISIBLE")
h.ok(out.split() == ["f", "in-a"], "the box sees the folder's files, not the volume's root", r.describe())
r, out, rc = sh("sub", "echo from-sub > /data/g")
r, out, rc = sh("root", "cat /vol/proj/a/g")
h.eq(out, "from-sub\n", "what the box writes lands in that folder of the volume", r.describe())
r = srv.get("/v1/sandboxes/sub")
h.ok(r.status == 200 and "proj/a" in r.text, "the box's spec keeps the sub_path", r.describe())

# ---- a missing folder is made ---------------------------------------------------------------
r = srv.post("/v1/sandboxes", {"id": "fresh", "volumes": [{"name": "shared", "path": "/data",
                                                            "sub_path": "new/deeper/dir"}]})
h.eq(r.status, 201, "a sub_path that does not exist yet: the box is made", r.describe())
r, out, rc = sh("fresh", "ls -A /data | wc -l; stat -c %U /data; touch /data/ok && echo writable")
h.eq(out.split(), ["0", "root", "writable"], "the folder was made, empty, owned by the box's root, writable",
     r.describe())
r, out, rc = sh("root", "ls -d /vol/new/deeper/dir && ls /vol/new/deeper/dir")
h.ok(rc == 0 and "ok" in out, "it is that folder of the volume", r.describe())

# ---- a stop and start, and a restart of the server, mount the same folder ------------------
h.eq(srv.post("/v1/sandboxes/sub/stop").status, 200, "sub stops")
h.eq(srv.post("/v1/sandboxes/sub/start").status, 200, "sub starts again")
r, out, rc = sh("sub", "ls /data | tr '\\n' ' '")
h.eq(out.strip(), "f g", "after a start: the same folder", r.describe())
srv.restart()
r, out, rc = sh("sub", "ls /data | tr '\\n' ' '")
h.eq(out.strip(), "f g", "after a restart of the server: the same folder", r.describe())

# ---- bad sub_paths: 400, no box -------------------------------------------------------------
for bad in ("/proj", "../x", "proj/../../x", "proj/./a", "proj//a", "proj/", ".", "", "a" * 1100):
    r = srv.post("/v1/sandboxes", {"id": "bad", "volumes": [{"name": "shared", "path": "/data", "sub_path": bad}]})
    h.eq(r.status, 400, "sub_path %r is refused" % bad[:20], r.describe())
h.eq(srv.get("/v1/sandboxes/bad").status, 404, "no box was made for them")
r = srv.post("/v1/sandboxes", {"id": "bad", "mounts": [{"host_path": HOSTDIR, "path": "/h", "sub_path": "inner"}]})
h.eq(r.status, 400, "sub_path on a host mount is an unknown field (the front joins it)", r.describe())

# ---- the OpenSandbox front ------------------------------------------------------------------
OSB = {"OPEN-SANDBOX-API-KEY": TOKEN}


def osb_create(volumes):
    return srv.request("POST", "/opensandbox/v1/sandboxes", body={
        "image": {"uri": "base"}, "entrypoint": ["tail", "-f", "/dev/null"], "timeout": 600,
        "volumes": volumes}, headers=OSB, token=None)


r = osb_create([{"name": "pv", "pvc": {"claimName": "shared"}, "mountPath": "/mnt/pv", "subPath": "proj/a"}])
h.eq(r.status, 202, "OpenSandbox: a pvc volume with subPath", r.describe())
oid = r.get("id") or "none"
r, out, rc = sh(oid, "ls /mnt/pv | tr '\\n' ' '")
h.eq(out.strip(), "f g", "OpenSandbox: the box sees subPath's folder, not the volume's root", r.describe())
r = osb_create([{"name": "hv", "host": {"path": HOSTDIR}, "mountPath": "/mnt/h", "subPath": "inner"}])
h.eq(r.status, 202, "OpenSandbox: a host volume with subPath", r.describe())
hid = r.get("id") or "none"
r, out, rc = sh(hid, "cat /mnt/h/host-file")
h.eq(out, "from-the-host\n", "OpenSandbox: a host volume's subPath is that folder of it", r.describe())
for bad in ("../etc", "/etc", "a/../.."):
    r = osb_create([{"name": "pv", "pvc": {"claimName": "shared"}, "mountPath": "/mnt/pv", "subPath": bad}])
    h.ok(r.status == 400 and r.get("code") == "SANDBOX::INVALID_ARGUMENT",
         "OpenSandbox: subPath %r is refused (400)" % bad, r.describe())

# ---- the end: boxes, then the volume ------------------------------------------------------
BOXES = ["root", "sub", "fresh", oid, hid]
for b in BOXES:
    srv.delete("/v1/sandboxes/%s" % b)
for b in BOXES:
    abserver.wait_for(lambda: srv.status_of(b) is None, timeout=30 * h.slow)
r = srv.delete("/v1/volumes/shared")
h.eq(r.status, 200, "the volume is deleted at the end", r.describe())
VOLS = os.path.join(srv.data, "volumes")
for name in (os.listdir(VOLS) if os.path.isdir(VOLS) else []):
    os.system("umount -l '%s' 2>/dev/null" % os.path.join(VOLS, name, "mnt"))
h.done()
