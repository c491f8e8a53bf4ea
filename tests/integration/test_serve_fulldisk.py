#!/usr/bin/env python3
"""A full disk, on a data folder of its own: a 300 MB ext4 image this test
makes and loop-mounts (never the host's disk). Admission control refuses a
create with 507 insufficient_storage once the promised-but-unused space
passes disk_overcommit_ratio times the free space; when the host's
filesystem fills up, a box writing into it gets ENOSPC from its own
filesystem (the guard's balloon), its disk stays read-write, the store's
database stays intact (PRAGMA integrity_check), the server keeps answering,
and once space is freed, boxes write and creates work again."""
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

# Two of these at once (the ./build and ASan lanes of scripts/test.sh) fill
# nested loop filesystems together and slow each other's writeback until the
# guard's rounds fall behind the writes: one at a time.
abserver.abtest.host_exclusive("fulldisk")
h = abserver.ServerHarness(budget=220)
if not shutil.which("mkfs.ext4"):
    h.skip_all("mkfs.ext4 is not installed")

# The data folder's own filesystem, outside the harness's dir (whose mounts
# must all be gone at cleanup, before this one can be unmounted).
base = tempfile.mkdtemp(prefix="abtest-fulldisk-", dir="/var/tmp")
img, mnt = os.path.join(base, "host.img"), os.path.join(base, "mnt")
os.mkdir(mnt)
with open(img, "wb") as f:
    f.truncate(300 * 1024 * 1024)
# -m 0: no blocks reserved for root (the server and the loop devices write as
# root and would otherwise still find room on a "full" filesystem)
subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", img], check=True)
subprocess.run(["mount", "-o", "loop", img, mnt], check=True)
data = os.path.join(mnt, "data")
os.makedirs(data, 0o700)
h.data_dirs.append(data)
_cleanup = h._cleanup


def cleanup():
    problems = _cleanup()  # servers stopped, boxes removed, then the filesystem goes
    # The kernel lets go of a box disk's loop device (and so of its file on
    # this filesystem) a moment after its last close: a busy filesystem is
    # retried for 10 s before it counts as held.
    for _ in range(100):
        if subprocess.run(["umount", mnt], stderr=subprocess.DEVNULL).returncode == 0:
            break
        time.sleep(0.1)
    else:
        holders = subprocess.run("losetup -a | grep -F %s; fuser -vm %s" % (mnt, mnt), shell=True,
                                 capture_output=True, text=True)
        subprocess.run(["umount", "-l", mnt])
        problems.append("the test's filesystem was still busy 10 s after cleanup: %s%s"
                        % (holders.stdout, holders.stderr))
    shutil.rmtree(base, ignore_errors=True)
    return problems


h._cleanup = cleanup

srv = h.start_server(data=data, config={
    "limits": {"disk": "96M", "memory": "256M", "timeout": "120s"},
    "disk_overcommit_ratio": 1.5,
    "disk_reserve": "32M",
    "disk_watch_interval": "200ms",
    "skills_disk": "16M",
})


def host_free():
    st = os.statvfs(mnt)
    return st.f_bavail * st.f_frsize


def metric(name):
    m = re.search(r"^%s (\d+)" % name, srv.get("/metrics").text or "", re.M)
    return int(m.group(1)) if m else -1


def wait_for(cond, what, timeout=30):
    end = time.time() + timeout * h.slow
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.1)
    h.ok(False, "waited for %s" % what)
    return False


def integrity(what):
    db = sqlite3.connect("file:%s?mode=ro" % os.path.join(data, "agentbox.db"), uri=True, timeout=10)
    try:
        res = db.execute("PRAGMA integrity_check").fetchall()
    except sqlite3.Error as e:
        res = [(str(e),)]
    db.close()
    h.eq(res, [("ok",)], "the store's database is intact (%s)" % what)


# ---- admission: promised-but-unused space against the free space ------------------

made, refusal = [], None
for i in range(8):
    r = srv.post("/v1/sandboxes", {"id": "fill%d" % i})
    if r.status != 201:
        refusal = (r, "fill%d" % i)
        break
    made.append(r.get("id"))
h.ok(1 <= len(made) <= 5, "some 96 MiB boxes are admitted on a ~250 MB filesystem (%d)" % len(made))
h.ok(refusal is not None, "then a create is refused")
if refusal:
    r, rid = refusal
    h.eq(r.status, 507, "... with 507", r.describe())
    h.eq(r.err_code, "insufficient_storage", "... code insufficient_storage", r.describe())
    h.ok("disk_overcommit_ratio" in (r.err_message or ""), "... naming disk_overcommit_ratio", r.err_message)
    h.eq(srv.get("/v1/sandboxes/" + rid).status, 404, "... and the refused box does not exist")
h.ok(metric("agentbox_disk_refused_total") >= 1, "/metrics counts the refusal")

# keep one box, give the others back
box = made[0] if made else None
for b in made[1:]:
    srv.delete("/v1/sandboxes/" + b)
wait_for(lambda: len(srv.list()) == 1, "the other boxes to be deleted")
r = srv.post("/v1/sandboxes", {"id": "again"})
h.eq(r.status, 201, "after deletes, a create is admitted again", r.describe())
srv.delete("/v1/sandboxes/again")
wait_for(lambda: len(srv.list()) == 1, "that box to be deleted")

# ---- the host fills up: the box gets ENOSPC, its disk stays writable -------------

filler = os.path.join(mnt, "filler")
subprocess.run(["fallocate", "-l", str(max(host_free() - 60 * 1024 * 1024, 0)), filler], check=True)
wait_for(lambda: metric("agentbox_disk_balloon_bytes") > 0, "the guard to hold space back from the box")
r = srv.exec(box, "dd if=/dev/urandom of=/workspace/big bs=1M count=200 conv=fsync; echo dd=$?; "
             "touch /workspace/after && echo touched; grep ' /workspace ' /proc/mounts",
             timeout_s=120, http_timeout=150)
out = (r.json or {}).get("stdout", "") + (r.json or {}).get("stderr", "")
h.ok("No space left on device" in out, "writing past the host's space: the box gets ENOSPC", out)
h.ok("dd=1" in out, "... dd fails", out)
h.ok("touched" in out, "... and its disk is still writable", out)
h.ok(re.search(r" rw[ ,]", out), "... mounted read-write", out)
h.ok(host_free() > 0, "the host's filesystem kept free space (%d bytes)" % host_free())
integrity("the box filled its share")

# a restarted server finds the balloon the box's init still holds
h.ok(srv.restart() is None, "the server restarts")
wait_for(lambda: metric("agentbox_disk_balloon_bytes") > 0, "the new server to see the box's balloon")
r = srv.exec(box, "rm -f /workspace/big; sync; dd if=/dev/zero of=/workspace/big2 bs=1M count=200 conv=fsync; "
             "echo dd=$?; grep ' /workspace ' /proc/mounts", timeout_s=120, http_timeout=150)
out = (r.json or {}).get("stdout", "") + (r.json or {}).get("stderr", "")
h.ok("No space left on device" in out and re.search(r" rw[ ,]", out),
     "after the restart the box still gets ENOSPC, its disk read-write", out)
h.ok(host_free() > 0, "... and the host kept free space")

# fill the rest of the host too: the server keeps answering
filler2 = os.path.join(mnt, "filler2")
subprocess.run(["fallocate", "-l", str(max(host_free() - 4096, 4096)), filler2])
rounds = metric("agentbox_disk_guard_rounds_total")
wait_for(lambda: metric("agentbox_disk_guard_rounds_total") >= rounds + 2, "two rounds of the guard")
h.ok(srv.health() is not None, "with the host full: /health answers")
h.eq(srv.get("/v1/sandboxes/" + box).status, 200, "... a box can be read")
h.eq(len(srv.list()), 1, "... boxes can be listed")
r = srv.post("/v1/sandboxes", {"id": "nospace"})
h.eq((r.status, r.err_code), (507, "insufficient_storage"), "... a create is refused with 507", r.describe())
seen = set()
for i in range(40):  # the database's own writes: made while the WAL has room, then refused
    r = srv.post("/v1/keys", {"app_id": "full", "name": "k%d-%s" % (i, "x" * 2000)})
    seen.add((r.status, r.err_code if r.status != 201 else None))
    if r.status != 201:
        break
h.diag("writes to the store with the host full: %s" % sorted(seen, key=str))
h.ok(seen <= {(201, None), (507, "insufficient_storage")},
     "... store writes are made or refused with 507 insufficient_storage, nothing else", seen)
r = srv.exec(box, "echo x > /workspace/small; echo rc=$?; touch /workspace/after2; "
             "grep ' /workspace ' /proc/mounts")
out = (r.json or {}).get("stdout", "") + (r.json or {}).get("stderr", "")
h.ok(re.search(r" rw[ ,]", out), "... the box's disk is still read-write", out)
integrity("the host is full")

# ---- space comes back ----------------------------------------------------------

os.unlink(filler)
os.unlink(filler2)
wait_for(lambda: metric("agentbox_disk_balloon_bytes") == 0, "the guard to let go")
r = srv.exec(box, "rm -f /workspace/big && dd if=/dev/zero of=/workspace/big bs=1M count=40 conv=fsync "
             "&& echo wrote; grep ' /workspace ' /proc/mounts", timeout_s=120, http_timeout=150)
out = (r.json or {}).get("stdout", "")
h.ok("wrote" in out and re.search(r" rw[ ,]", out), "after space is freed the box writes again", r.describe())
r = srv.post("/v1/sandboxes", {"id": "after"})
h.eq(r.status, 201, "... and creates work again", r.describe())
r = srv.post("/v1/keys", {"app_id": "full", "name": "after"})
h.eq(r.status, 201, "... and the store takes writes again", r.describe())
integrity("space came back")
h.done()
