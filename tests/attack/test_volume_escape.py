#!/usr/bin/env python3
"""Attacks on volume mounts. Passes only when every attack fails:
- a box replaces its volume's mount point (in its own writable layer) by a
  symlink to /etc, or to /proc/1/root/etc, and restarts: the volume is
  mounted at the intended path only, never on /etc of the box or of the host;
- a symlink planted higher up the mount path makes the start fail, with
  nothing mounted anywhere else;
- a box cannot reach a volume it did not mount (another box's);
- a box cannot unmount or remount rw a read-only volume;
- mount paths that try to escape ("/..", "/mnt/../..", "//etc", ...) are
  refused and nothing is created."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=180)
srv = h.start_server(config={"limits": {"disk": "64M", "memory": "256M", "timeout": "60s"}})
VOLS = os.path.join(srv.data, "volumes")
MARK = "vol-escape-marker-%d" % os.getpid()


def sh(box, cmd):
    r = srv.exec(box, cmd)
    j = r.json if isinstance(r.json, dict) else {}
    return r, j


def host_mountinfo():
    with open("/proc/self/mountinfo") as f:
        return f.read()


def mount_points_under(prefix):
    return [ln.split()[4] for ln in host_mountinfo().splitlines()
            if ln.split()[4] == prefix or ln.split()[4].startswith(prefix + "/")]


etc_mounts_before = mount_points_under("/etc")
h.eq(srv.post("/v1/volumes", {"name": "va", "size_mib": 16}).status, 201, "volume va")
h.eq(srv.post("/v1/volumes", {"name": "vb", "size_mib": 16}).status, 201, "volume vb")

r = srv.post("/v1/sandboxes", {"id": "a", "volumes": [{"name": "va", "path": "/opt/data/vol"},
                                                        {"name": "va", "path": "/opt/d2/v2"}]})
h.eq(r.status, 201, "box a mounts va twice", r.describe())
r, j = sh("a", "echo secret > /opt/data/vol/%s && ls /opt/d2/v2" % MARK)
h.eq(sorted((j.get("stdout") or "").split()), sorted([MARK, "lost+found"]), "a writes its marker into va", r.describe())

# ---- symlinks at the mount points, planted in a's own layer ---------------------------------

r, j = sh("a", "set -e; mv /opt/data /opt/data.old; mkdir /opt/data; ln -s /etc /opt/data/vol; "
               "mv /opt/d2 /opt/d2.old; mkdir /opt/d2; ln -s /proc/1/root/etc /opt/d2/v2; "
               "ls -l /opt/data/vol /opt/d2/v2")
h.eq(j.get("exit_code"), 0, "a replaces both mount points by symlinks (to /etc, /proc/1/root/etc)",
     r.describe())
h.eq(srv.post("/v1/sandboxes/a/stop").status, 200, "a stops")
r = srv.post("/v1/sandboxes/a/start")
h.eq(r.status, 200, "a starts again", r.describe())
r, j = sh("a", "ls /etc | grep -c %s; cat /opt/data/vol/%s /opt/d2/v2/%s; "
               "test -L /opt/data/vol || echo dir; test -L /opt/d2/v2 || echo dir" % (MARK, MARK, MARK))
h.eq(j.get("stdout"), "0\nsecret\nsecret\ndir\ndir\n",
     "the volume is at the intended paths again (directories), not on the box's /etc",
     r.describe())
r, j = sh("a", "grep -c ' /etc ' /proc/self/mountinfo; grep ' /opt/' /proc/self/mountinfo | "
               "awk '{print $5}' | sort")
h.eq(j.get("stdout"), "1\n/opt/d2/v2\n/opt/data/vol\n",
     "in a's mount table: /etc only once (its own layer), the volume only at its paths",
     r.describe())
h.ok(not os.path.exists(os.path.join("/etc", MARK)), "the host's /etc has no marker")
h.eq(mount_points_under("/etc"), etc_mounts_before, "nothing new is mounted on the host's /etc")

# ---- a symlink higher up the path ------------------------------------------------------------------

r = srv.post("/v1/sandboxes", {"id": "c", "volumes": [{"name": "vb", "path": "/opt/x/vol"}]})
h.eq(r.status, 201, "box c mounts vb at /opt/x/vol", r.describe())
r, j = sh("c", "set -e; mv /opt/x /opt/x.old; ln -s /etc /opt/x; ls -ld /opt/x")
h.eq(j.get("exit_code"), 0, "c replaces /opt/x by a symlink to /etc", r.describe())
srv.post("/v1/sandboxes/c/stop")
r = srv.post("/v1/sandboxes/c/start")
h.ok(r.status >= 400, "c does not start through a symlink in its mount path", r.describe())
h.contains(r.err_message or "", "symlink", "the error says a symlink is in the way", r.describe())
h.eq(mount_points_under("/etc"), etc_mounts_before, "nothing is mounted on the host's /etc")
h.ok(not os.path.exists("/etc/vol"), "no /etc/vol was made on the host")

# ---- another box's volume ---------------------------------------------------------------------------

r = srv.post("/v1/sandboxes", {"id": "b", "volumes": [{"name": "vb", "path": "/mnt/mine"}]})
h.eq(r.status, 201, "box b mounts only vb", r.describe())
r, j = sh("b", "find / -path /proc -prune -o -path /sys -prune -o -name '%s' -print 2>/dev/null; "
               "grep -c idmapped /proc/self/mountinfo; ls /proc | grep -c '^[0-9]'" % MARK)
out = (j.get("stdout") or "").splitlines()
h.eq(out[:1], ["1"], "b finds no trace of a's volume (and has one idmapped volume mount)",
     r.describe())
r, j = sh("b", "ls /proc/*/root/opt/data/vol/%s 2>&1; cat /proc/1/root/opt/data/vol/%s 2>&1" % (MARK, MARK))
h.not_contains(j.get("stdout", ""), "secret", "nor through /proc/*/root", r.describe())
vb_mnt = os.path.join(VOLS, "vb", "mnt")
r, j = sh("b", "mount -t ext4 /dev/loop0 /mnt/x 2>&1; ls %s 2>&1; ls /mnt" % vb_mnt)
h.not_contains(j.get("stdout", ""), "lost+found\nmine", "nor through the host's paths", r.describe())

# ---- read-only stays read-only ------------------------------------------------------------------------

r = srv.post("/v1/sandboxes", {"id": "ro", "volumes": [{"name": "va", "path": "/ro", "read_only": True}]})
h.eq(r.status, 201, "box ro mounts va read-only", r.describe())
r, j = sh("ro", "mount -o remount,rw /ro 2>&1; umount /ro 2>&1; umount -l /ro 2>&1; "
                "touch /ro/x 2>&1; cat /ro/%s" % MARK)
h.contains(j.get("stdout", ""), "touch: cannot touch '/ro/x': Read-only file system",
           "remount and umount do not make the volume writable", r.describe())
h.contains(j.get("stdout", ""), "secret", "and it is still mounted", r.describe())

# ---- paths that try to escape --------------------------------------------------------------------------

for i, path in enumerate(["/..", "/mnt/../..", "/mnt/./x", "//etc", "/mnt//x", "/proc/1/root",
                          "/sys/fs", "/dev/shm", "/mnt/user-data/workspace", "..", "mnt", "/"]):
    bid = "esc%d" % i
    r = srv.post("/v1/sandboxes", {"id": bid, "volumes": [{"name": "va", "path": path}]})
    h.eq((r.status, r.err_code), (400, "invalid_argument"), "volume path %r is refused" % path,
         r.describe())
    h.eq(srv.status_of(bid), None, "%r: no box was made" % path)
    if path == "/mnt/user-data/workspace":
        continue  # a fine read-only path
    for field in ("readonly_paths", "blocked_paths"):
        r = srv.post("/v1/sandboxes", {"id": bid, field: [path]})
        h.eq(r.status, 400, "%s %r is refused" % (field, path), r.describe())
        h.eq(srv.status_of(bid), None, "%s %r: no box was made" % (field, path))

for b in ("a", "b", "c", "ro"):
    srv.delete("/v1/sandboxes/%s" % b)
for b in ("a", "b", "c", "ro"):
    abserver.wait_for(lambda: srv.status_of(b) is None, timeout=30 * h.slow)
for v in ("va", "vb"):
    r = srv.delete("/v1/volumes/%s" % v)
    h.eq(r.status, 200, "volume %s is deleted at the end" % v, r.describe())
for name in (os.listdir(VOLS) if os.path.isdir(VOLS) else []):
    os.system("umount -l '%s' 2>/dev/null" % os.path.join(VOLS, name, "mnt"))
h.done()
