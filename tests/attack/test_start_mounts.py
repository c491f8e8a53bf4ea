#!/usr/bin/env python3
"""Attacks on the mounts of a box's start (docs/security.md, "Mounts at start"):
the root of a box is its own writable layer, kept across stops, and every
start mounts the shared host layers, the disk binds, /tmp, /run, /dev and
/proc under it. Passes only when none of those mounts follows a symlink the
box left:
- a shared host path the host lacks (libx32, var/lib/ucf, ...) is a symlink
  the box made (to its own /etc, and to /etc by an absolute path); the host
  then gets that path and the box restarts: the layer is at its own path (a
  directory now), never on the box's /etc;
- a symlink at /tmp and /run in the box's layer (planted on the stopped
  box's disk, as an attacker with the layer would; boxes made through /v1,
  E2B and OpenSandbox, started again by an exec): /tmp and /run are tmpfs
  at their paths, the box's /etc is untouched;
- a symlink higher up a mount path (/mnt): the start fails with an error
  that names the path and says a symlink is in the way, and names no host
  path."""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

SHARED = ["libx32", "lib32", "lib64", "var/lib/ucf", "var/cache/debconf", "var/lib/apt"]

h = abserver.ServerHarness(budget=180)
srv = h.start_server(config={"limits": {"disk": "64M", "memory": "256M", "timeout": "60s"}})
MARK = "start-mounts-%d" % os.getpid()


def sh(box, cmd):
    r = srv.exec(box, cmd)
    j = r.json if isinstance(r.json, dict) else {}
    return r, j


def restart(box):
    h.eq(srv.post("/v1/sandboxes/%s/stop" % box).status, 200, "%s stops" % box)
    return srv.post("/v1/sandboxes/%s/start" % box)


def box_dir(box):
    for root, dirs, _ in os.walk(srv.data):
        if os.path.basename(root) == box and "disk.img" in os.listdir(root):
            return root
        if root.count(os.sep) - srv.data.count(os.sep) > 3:
            dirs[:] = []
    return None


def with_disk(box, fn):
    """Mounts the stopped box's disk on the host and calls fn(mount point)."""
    d = box_dir(box)
    h.ok(d is not None, "the box's directory is found", srv.data)
    mnt = tempfile.mkdtemp(prefix="ab-start-mounts-")
    try:
        subprocess.run(["mount", "-o", "loop", os.path.join(d, "disk.img"), mnt], check=True)
        try:
            fn(mnt)
        finally:
            subprocess.run(["umount", mnt], check=True)
    finally:
        os.rmdir(mnt)


# ---- a shared host path that appears on the host after the box planted a link there -----------

missing = [p for p in SHARED if not os.path.lexists("/" + p) and os.path.isdir("/" + os.path.dirname(p))]


def shared_path_appears(path):
    made = []
    try:
        for bid, target in (("rel", os.path.relpath("/etc", os.path.dirname(path))), ("abs", "/etc")):
            r = srv.post("/v1/sandboxes", {"id": bid})
            h.eq(r.status, 201, "box %s" % bid, r.describe())
            r, j = sh(bid, "set -e; ln -s %s %s; ls -ld %s" % (target, path, path))
            h.eq(j.get("exit_code"), 0, "%s: the box links %s to %s (the host has no %s)" %
                 (bid, path, target, path), r.describe())
            h.eq(srv.post("/v1/sandboxes/%s/stop" % bid).status, 200, "%s stops" % bid)
        # The host gets the path (as a package that brings it would).
        os.mkdir(path)
        made.append(path)
        with open(os.path.join(path, MARK), "w") as f:
            f.write("layer\n")
        for bid in ("rel", "abs"):
            r = srv.post("/v1/sandboxes/%s/start" % bid)
            h.eq(r.status, 200, "%s starts again" % bid, r.describe())
            r, j = sh(bid, "test -L %s && echo link || echo dir; cat %s/%s; ls /etc | grep -c %s; "
                           "test -s /etc/passwd && echo passwd" % (path, path, MARK, MARK))
            h.eq(j.get("stdout"), "dir\nlayer\n0\npasswd\n",
                 "%s: the layer is at %s (a directory now), the box's /etc is its own" % (bid, path),
                 r.describe())
            r, j = sh(bid, "awk '{print $5}' /proc/self/mountinfo | sort | uniq -c | "
                           "awk '$1 > 1 && $2 != \"/\" {print}'; grep -c ' /etc ' /proc/self/mountinfo")
            h.eq(j.get("stdout"), "1\n", "%s: no mount point twice, /etc mounted once" % bid,
                 r.describe())
    finally:
        for p in made:
            try:
                os.unlink(os.path.join(p, MARK))
            except OSError:
                pass
            os.rmdir(p)


if missing:
    shared_path_appears("/" + missing[0])
else:
    h.skip("a shared host path appears later", "every shared host path exists on this host")

# ---- /tmp: a symlink in the box's own layer ------------------------------------------------------

def plant_tmp(mnt):
    upper = os.path.join(mnt, "layers", "root", "upper")
    h.ok(os.path.isdir(upper), "the root layer's upper is on the disk")
    os.symlink("etc", os.path.join(upper, "tmp"))
    os.symlink("/etc", os.path.join(upper, "run"))


def tmp_attack(front, bid):
    r, j = sh(bid, "echo mine > /etc/%s" % MARK)
    h.eq(j.get("exit_code"), 0, "%s: the box writes its own /etc file" % front, r.describe())
    h.eq(srv.post("/v1/sandboxes/%s/stop" % bid).status, 200, "%s: the box stops" % front)
    with_disk(bid, plant_tmp)
    # Started again by an exec (a stopped box is started first), as any front's would.
    r, j = sh(bid, "cat /etc/%s; test -s /etc/passwd && echo passwd; test -L /tmp || echo tmpdir; "
                   "test -L /run || echo rundir; awk '$5 == \"/tmp\" || $5 == \"/run\" || "
                   "$5 == \"/etc\" {for (i = 7; i < NF; i++) if ($i == \"-\") "
                   "{print $5, $(i + 1); break}}' /proc/self/mountinfo | sort" % MARK)
    h.eq(j.get("stdout"), "mine\npasswd\ntmpdir\nrundir\n/etc overlay\n/run tmpfs\n/tmp tmpfs\n",
         "%s: /tmp and /run are tmpfs at their own paths; the box's /etc is untouched" % front,
         r.describe())


r = srv.post("/v1/sandboxes", {"id": "tmp"})
h.eq(r.status, 201, "box tmp through /v1", r.describe())
tmp_attack("v1", "tmp")
r = srv.post("/e2b/v2/sandboxes", {"templateID": "base", "timeout": 120})
bid = r.json.get("sandboxID") if isinstance(r.json, dict) else None
h.ok(r.status in (200, 201) and bid, "a box through E2B", r.describe())
if bid:
    tmp_attack("e2b", bid)
r = srv.post("/opensandbox/v1/sandboxes", {"image": {"uri": "base"}, "entrypoint": ["sleep", "infinity"],
                                           "resourceLimits": {}, "timeout": 120})
bid = r.json.get("id") if isinstance(r.json, dict) else None
h.ok(r.status in (200, 201, 202) and bid, "a box through OpenSandbox", r.describe())
if bid:
    tmp_attack("opensandbox", bid)

# ---- a symlink higher up a mount path: the start fails, naming the path ----------------------

r = srv.post("/v1/sandboxes", {"id": "mnt"})
h.eq(r.status, 201, "box mnt", r.describe())
h.eq(srv.post("/v1/sandboxes/mnt/stop").status, 200, "mnt stops")


def plant_mnt(mnt):
    upper = os.path.join(mnt, "layers", "root", "upper")
    os.symlink("/", os.path.join(upper, "mnt"))


with_disk("mnt", plant_mnt)
r = srv.post("/v1/sandboxes/mnt/start")
h.ok(r.status >= 400, "mnt does not start through a symlink at /mnt", r.describe())
h.eq(srv.status_of("mnt"), "stopped", "mnt stays stopped")
msg = r.err_message or ""
h.contains(msg, "/mnt/user-data", "the error names the mount path", r.describe())
h.contains(msg, "symlink", "the error says a symlink is in the way", r.describe())
h.not_contains(msg, srv.data, "the error names no host path", r.describe())
h.ok(not os.path.exists("/user-data"), "nothing was made on the host's /")

h.done()
