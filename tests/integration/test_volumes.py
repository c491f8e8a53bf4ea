#!/usr/bin/env python3
"""Named volumes, host mounts, readonly_paths and blocked_paths against the
real `agentbox serve`: a volume made over HTTP is mounted in two boxes (one
read-only) that see each other's writes with the same owners; the read-only
one cannot write; the volume is mounted once on the host however many boxes
use it; it outlives both boxes (a third sees the files), survives a kill -9
of the server and a "reboot" (its host mount gone) with boxes starting again
with it; its size is a real limit (ENOSPC in the box); DELETE answers 409
naming the boxes while one exists, then 200 and the image is gone. Host
directories: refused for an API key, outside the config's prefixes and
through a symlink out of a prefix; read-only and read-write under an allowed
prefix (files written by the box are not owned by host root). readonly_paths
and blocked_paths apply at every start. Bad input is 400/404 with nothing
created."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=240)
TOKEN = "admin-token-volumes-%d-0123456789" % os.getpid()
KEY = "volumes-appkey-0123456789abcdef"
SHARE = os.path.join(h.root, "share")
OUTSIDE = os.path.join(h.root, "outside")
for d in (SHARE, OUTSIDE, os.path.join(SHARE, "ro"), os.path.join(SHARE, "rw")):
    os.makedirs(d, exist_ok=True)
with open(os.path.join(SHARE, "ro", "hello.txt"), "w") as f:
    f.write("from the host\n")
with open(os.path.join(OUTSIDE, "secret.txt"), "w") as f:
    f.write("not for boxes\n")
os.chmod(os.path.join(SHARE, "rw"), 0o777)
os.symlink(OUTSIDE, os.path.join(SHARE, "link-out"))

srv = h.start_server(token=TOKEN, config={
    "limits": {"disk": "64M", "memory": "256M", "timeout": "60s"},
    "api_keys": [{"key": KEY, "app_id": "volapp"}],
    "host_mount_prefixes": [SHARE],
})
VOLS = os.path.join(srv.data, "volumes")


def check_error(r, status, code, what, mention=None):
    h.eq(r.status, status, "%s: answers %d" % (what, status), r.describe())
    h.eq(r.err_code, code, "%s: error code %s" % (what, code), r.describe())
    if mention:
        h.contains(r.err_message or "", mention, "%s: the message names %s" % (what, mention),
                   r.describe())


def sh(box, cmd, **kw):
    r = srv.exec(box, cmd, **kw)
    return r, (r.json or {}) if isinstance(r.json, dict) else {}


def host_mounts_of(path):
    """Lines of the host's mountinfo whose mount point is path."""
    with open("/proc/self/mountinfo") as f:
        return [ln for ln in f if ln.split()[4] == path]


def loops_of(image):
    out = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if "(%s)" % image in ln]


def gone(box):
    return abserver.wait_for(lambda: srv.status_of(box) is None, timeout=30 * h.slow)


# ---- create, list, get -------------------------------------------------------

r = srv.post("/v1/volumes", {"name": "shared", "size_mib": 24})
h.eq(r.status, 201, "POST /v1/volumes answers 201", r.describe())
h.eq((r.get("name"), r.get("size_mib"), r.get("boxes")), ("shared", 24, []),
     "the new volume: its name, size and no boxes", r.describe())
check_error(srv.post("/v1/volumes", {"name": "shared"}), 409, "conflict", "a second create of one name",
            "shared")
r = srv.post("/v1/volumes", {"name": "dflt"})
h.eq((r.status, r.get("size_mib")), (201, 64), "size_mib defaults to the default box disk (64 MiB)",
     r.describe())
for bad in ("Bad", "-x", "a/b", "", "x" * 64, "..", "a b"):
    check_error(srv.post("/v1/volumes", {"name": bad}), 400, "invalid_argument",
                "a volume named %r" % bad)
h.ok(not os.path.exists(os.path.join(VOLS, "Bad")), "a bad name leaves nothing in the data folder")
check_error(srv.post("/v1/volumes", {"name": "v", "size_mib": 0}), 400, "invalid_argument",
            "size_mib 0")
check_error(srv.post("/v1/volumes", {"name": "v", "colour": "red"}), 400, "invalid_argument",
            "an unknown field")
r = srv.get("/v1/volumes")
names = [v.get("name") for v in (r.get("volumes") or [])]
h.eq(names, ["dflt", "shared"], "GET /v1/volumes lists both, sorted", r.describe())
r = srv.get("/v1/volumes/shared")
h.eq((r.status, r.get("size_mib")), (200, 24), "GET /v1/volumes/shared", r.describe())
check_error(srv.get("/v1/volumes/nope"), 404, "not_found", "GET of an unknown volume")
h.ok(os.path.isfile(os.path.join(VOLS, "shared", "disk.img")), "the volume has its own disk image")
h.eq(host_mounts_of(os.path.join(VOLS, "shared", "mnt")), [],
     "a volume no box uses is not mounted yet")
# an API key sees only its app's volumes
r = srv.post("/v1/volumes", {"name": "appvol", "size_mib": 16}, token=KEY)
h.eq((r.status, r.get("app_id")), (201, "volapp"), "an API key makes a volume of its app", r.describe())
r = srv.get("/v1/volumes", token=KEY)
h.eq([v.get("name") for v in (r.get("volumes") or [])], ["appvol"],
     "an API key lists only its app's volumes", r.describe())
check_error(srv.get("/v1/volumes/shared", token=KEY), 404, "not_found",
            "an API key asking for the admin's volume")
check_error(srv.delete("/v1/volumes/shared", token=KEY), 404, "not_found",
            "an API key deleting the admin's volume")
check_error(srv.post("/v1/sandboxes", {"id": "keybox", "volumes": [{"name": "shared", "path": "/v"}]},
                     token=KEY), 404, "not_found", "an API key mounting the admin's volume")
h.eq(srv.delete("/v1/volumes/appvol", token=KEY).status, 200, "an API key deletes its own volume")

# ---- two boxes share it -------------------------------------------------------

r = srv.post("/v1/sandboxes", {"id": "vw", "volumes": [{"name": "shared", "path": "/mnt/data"}]})
h.eq(r.status, 201, "a box with the volume read-write", r.describe())
h.eq(r.get("volumes"), [{"name": "shared", "path": "/mnt/data", "read_only": False}],
     "the box shows its volume", r.describe())
r = srv.post("/v1/sandboxes", {"id": "vr", "volumes": [{"name": "shared", "path": "/workspace/data",
                                                           "read_only": True}]})
h.eq(r.status, 201, "a box with the volume read-only, inside /workspace", r.describe())

r, j = sh("vw", "echo one > /mnt/data/a && mkdir /mnt/data/d && chown 1234:2345 /mnt/data/a && "
                "stat -c '%u:%g' /mnt/data/a /mnt/data/d")
h.eq((j.get("exit_code"), j.get("stdout")), (0, "1234:2345\n0:0\n"),
     "box root writes as box root and can give files to any box uid", r.describe())
r, j = sh("vr", "cat /workspace/data/a; stat -c '%u:%g' /workspace/data/a /workspace/data/d")
h.eq(j.get("stdout"), "one\n1234:2345\n0:0\n", "the other box reads it with the same owners",
     r.describe())
r, j = sh("vr", "echo x > /workspace/data/b; touch /workspace/data/a; rm -f /workspace/data/a; "
                "ls /workspace/data")
h.eq(j.get("stdout"), "a\nd\nlost+found\n", "the read-only box cannot write, change or remove",
     r.describe())
h.contains(j.get("stderr", ""), "Read-only file system", "its writes fail with EROFS", r.describe())
r, j = sh("vw", "echo two >> /mnt/data/a; cat /mnt/data/a")
r2, j2 = sh("vr", "cat /workspace/data/a")
h.eq(j2.get("stdout"), "one\ntwo\n", "a write of one box is seen by the other at once", r2.describe())
on_host = os.path.join(VOLS, "shared", "mnt", "a")
st = os.stat(on_host)
h.eq((st.st_uid, st.st_gid), (1234, 2345),
     "on the volume the file keeps the box-side owner (not a host range)")
mnt = os.path.join(VOLS, "shared", "mnt")
h.eq(len(host_mounts_of(mnt)), 1, "the volume is mounted once on the host for two boxes")
h.eq(len(loops_of(os.path.join(VOLS, "shared", "disk.img"))), 1, "through one loop device")
r = srv.get("/v1/volumes/shared")
h.eq(r.get("boxes"), ["vr", "vw"], "the volume names the boxes that use it", r.describe())
h.ok((r.get("used_bytes") or 0) > 0, "and how much of it is used", r.describe())

# ---- its size is a limit ---------------------------------------------------------

r, j = sh("vw", "dd if=/dev/zero of=/mnt/data/big bs=1M count=40 2>&1; s=$?; rm -f /mnt/data/big; exit $s")
h.ne(j.get("exit_code"), 0, "writing past size_mib fails", r.describe())
h.contains(j.get("stdout", ""), "No space left on device", "with ENOSPC in the box", r.describe())
r, j = sh("vw", "df -m /workspace | tail -1")
h.ok(j.get("exit_code") == 0, "the box's own disk is untouched by the volume's limit", r.describe())

# ---- DELETE while used -----------------------------------------------------------------

r = srv.delete("/v1/volumes/shared")
check_error(r, 409, "conflict", "DELETE of a volume two boxes use", "vr")
h.contains(r.err_message or "", "vw", "the message names both boxes", r.describe())
h.ok(os.path.exists(os.path.join(VOLS, "shared", "disk.img")), "the image is still there")

# ---- readonly_paths, blocked_paths, host mounts ----------------------------------------------

r = srv.post("/v1/sandboxes", {
    "id": "paths",
    "readonly_paths": ["/etc", "/usr", "/proc", "/opt/missing"],
    "blocked_paths": ["/home", "/etc/hostname", "/sys"],
    "mounts": [{"host_path": os.path.join(SHARE, "ro"), "path": "/srv/ro", "read_only": True},
               {"host_path": os.path.join(SHARE, "rw"), "path": "/workspace/rw"}],
})
h.eq(r.status, 201, "a box with readonly_paths, blocked_paths and host mounts", r.describe())
h.eq((r.get("readonly_paths"), r.get("blocked_paths")),
     (["/etc", "/usr", "/proc", "/opt/missing"], ["/home", "/etc/hostname", "/sys"]),
     "the box shows its paths", r.describe())


def check_paths(when):
    r, j = sh("paths", "touch /etc/x; echo y > /usr/y; ls -A /home; cat /etc/hostname; "
                       "echo z > /etc/hostname; cat /etc/hostname; mkdir /home/q; ls /etc/passwd")
    h.eq(j.get("stdout"), "/etc/passwd\n",
         "%s: /etc and /usr are read-only, /home is empty, /etc/hostname reads empty" % when,
         r.describe())
    err = j.get("stderr", "")
    # (a hidden file is /dev/null: what is written to it goes nowhere)
    h.eq(err.count("Read-only file system"), 3, "%s: each write fails with EROFS" % when, r.describe())
    r, j = sh("paths", "mount -o remount,rw /etc 2>&1; umount /home 2>&1; touch /etc/x 2>&1; "
                       "ls -A /home")
    h.not_contains(j.get("stdout", ""), "\n\n", "%s: the box cannot undo them" % when, r.describe())
    h.contains(j.get("stdout", ""), "touch: cannot touch '/etc/x'",
               "%s: /etc stays read-only after remount/umount attempts" % when, r.describe())
    r, j = sh("paths", "cat /srv/ro/hello.txt; touch /srv/ro/n; echo w > /workspace/rw/w.txt && "
                       "cat /workspace/rw/w.txt")
    h.eq(j.get("stdout"), "from the host\nw\n",
         "%s: host directories: read-only one readable, read-write one writable" % when,
         r.describe())
    h.contains(j.get("stderr", ""), "Read-only file system",
               "%s: the read-only host directory refuses writes" % when, r.describe())


check_paths("at create")
w = os.path.join(SHARE, "rw", "w.txt")
h.ok(os.path.exists(w), "the box's file is in the host directory")
h.ne(os.stat(w).st_uid if os.path.exists(w) else 0, 0,
     "it is not owned by host root (host mounts are not idmapped)")
h.eq(sorted(os.listdir(os.path.join(SHARE, "ro"))), ["hello.txt"], "the read-only host directory is unchanged")
r = srv.post("/v1/sandboxes/paths/stop")
r = srv.post("/v1/sandboxes/paths/start")
h.eq(r.status, 200, "the box starts again", r.describe())
check_paths("after a restart")

check_error(srv.post("/v1/sandboxes", {"id": "hk", "mounts": [{"host_path": os.path.join(SHARE, "ro"),
                                                                "path": "/h"}]}, token=KEY),
            403, "permission_denied", "a host mount with an API key")
check_error(srv.post("/v1/sandboxes", {"id": "ho", "mounts": [{"host_path": OUTSIDE, "path": "/h"}]}),
            403, "permission_denied", "a host directory outside the prefixes", "host_mount_prefixes")
check_error(srv.post("/v1/sandboxes", {"id": "hl", "mounts": [
    {"host_path": os.path.join(SHARE, "link-out"), "path": "/h"}]}),
            403, "permission_denied", "a symlink in a prefix that points out of it", OUTSIDE)
check_error(srv.post("/v1/sandboxes", {"id": "hm", "mounts": [
    {"host_path": os.path.join(SHARE, "nope"), "path": "/h"}]}),
            400, "invalid_argument", "a host directory that does not exist")
check_error(srv.post("/v1/sandboxes", {"id": "hr", "mounts": [{"host_path": "share/ro", "path": "/h"}]}),
            400, "invalid_argument", "a relative host_path")
for bid in ("hk", "ho", "hl", "hm", "hr"):
    h.eq(srv.status_of(bid), None, "refused box %s was not created" % bid)

# ---- bad input ---------------------------------------------------------------------------

bad = [
    ({"volumes": [{"name": "nope", "path": "/v"}]}, 404, "not_found", "an unknown volume"),
    ({"volumes": [{"name": "Bad!", "path": "/v"}]}, 400, "invalid_argument", "a bad volume name"),
    ({"volumes": [{"name": "shared", "path": "../x"}]}, 400, "invalid_argument", "path ../x"),
    ({"volumes": [{"name": "shared", "path": "x"}]}, 400, "invalid_argument", "a relative path"),
    ({"volumes": [{"name": "shared", "path": "/proc/x"}]}, 400, "invalid_argument", "path /proc/x"),
    ({"volumes": [{"name": "shared", "path": "/dev"}]}, 400, "invalid_argument", "path /dev"),
    ({"volumes": [{"name": "shared", "path": "/"}]}, 400, "invalid_argument", "path /"),
    ({"volumes": [{"name": "shared", "path": "/workspace"}]}, 400, "invalid_argument",
     "path /workspace itself"),
    ({"volumes": [{"name": "shared", "path": "/a/"}]}, 400, "invalid_argument", "a trailing slash"),
    ({"volumes": [{"name": "shared", "path": "/v"}, {"name": "dflt", "path": "/v"}]}, 400,
     "invalid_argument", "two volumes on one path"),
    ({"volumes": [{"name": "shared", "path": "/v", "mode": "rw"}]}, 400, "invalid_argument",
     "an unknown field of a volume"),
    ({"volumes": "shared"}, 400, "invalid_argument", "volumes not a list"),
    ({"readonly_paths": ["etc"]}, 400, "invalid_argument", "a relative readonly path"),
    ({"blocked_paths": ["/sys/kernel"]}, 400, "invalid_argument", "a blocked path in /sys"),
    ({"blocked_paths": [1]}, 400, "invalid_argument", "a blocked path that is not a string"),
]
for i, (body, status, code, what) in enumerate(bad):
    bid = "bad%d" % i
    body = dict(body, id=bid)
    check_error(srv.post("/v1/sandboxes", body), status, code, what)
    h.eq(srv.status_of(bid), None, "%s: nothing was created" % what)
h.eq(sorted(os.listdir(os.path.join(srv.data, "boxes"))), ["paths", "vr", "vw"],
     "no refused box left anything in the data folder")

# ---- restart of the server: kill -9, start; a "reboot" of the host mount ------------------------

srv.kill9()
why = srv.start()
h.ok(not why, "the server starts again after kill -9", why)
r, j = sh("vr", "cat /workspace/data/a")
h.eq(j.get("stdout"), "one\ntwo\n", "a box still running sees the volume", r.describe())
for b in ("vw", "vr"):
    srv.post("/v1/sandboxes/%s/stop" % b)
# as after a reboot: nothing holds the volume's file system any more
subprocess.run(["umount", mnt], capture_output=True)
h.eq(host_mounts_of(mnt), [], "the volume's host mount is gone (as after a reboot)")
for b in ("vw", "vr"):
    r = srv.post("/v1/sandboxes/%s/start" % b)
    h.eq(r.status, 200, "box %s starts again" % b, r.describe())
r, j = sh("vw", "cat /mnt/data/a && echo three >> /mnt/data/a")
r2, j2 = sh("vr", "cat /workspace/data/a; touch /workspace/data/x 2>/dev/null || echo ro")
h.eq((j.get("stdout"), j2.get("stdout")), ("one\ntwo\n", "one\ntwo\nthree\nro\n"),
     "both see the volume again, still shared, still read-only for one", r2.describe())
h.eq(len(host_mounts_of(mnt)), 1, "the volume was mounted again, once")
h.eq(len(loops_of(os.path.join(VOLS, "shared", "disk.img"))), 1, "through one loop device")

# ---- the volume outlives its boxes ----------------------------------------------------------------

for b in ("vw", "vr"):
    h.eq(srv.delete("/v1/sandboxes/%s" % b).status, 202, "DELETE box %s" % b)
h.ok(gone("vw") and gone("vr"), "both boxes are gone")
r = srv.post("/v1/sandboxes", {"id": "third", "volumes": [{"name": "shared", "path": "/opt/v"}]})
h.eq(r.status, 201, "a third box with the volume", r.describe())
r, j = sh("third", "cat /opt/v/a; stat -c %u /opt/v/a")
h.eq(j.get("stdout"), "one\ntwo\nthree\n1234\n", "it sees the files (and owners) the others left",
     r.describe())
check_error(srv.delete("/v1/volumes/shared"), 409, "conflict", "DELETE while the third box exists",
            "third")
srv.post("/v1/sandboxes/third/stop")
check_error(srv.delete("/v1/volumes/shared"), 409, "conflict", "DELETE while a stopped box uses it",
            "third")
srv.delete("/v1/sandboxes/third")
h.ok(gone("third"), "the third box is gone")
r = srv.delete("/v1/volumes/shared")
h.eq(r.status, 200, "DELETE once no box uses it", r.describe())
h.ok(not os.path.exists(os.path.join(VOLS, "shared")), "its directory and image are gone")
h.eq(host_mounts_of(mnt), [], "and its host mount")
h.eq(loops_of(os.path.join(VOLS, "shared", "disk.img")), [], "and its loop device")
check_error(srv.get("/v1/volumes/shared"), 404, "not_found", "GET after DELETE")
check_error(srv.delete("/v1/volumes/shared"), 404, "not_found", "DELETE after DELETE")
h.eq(srv.delete("/v1/volumes/dflt").status, 200, "DELETE of a volume never used")

# ---- the CLI ---------------------------------------------------------------------------------------

srv.stop()
r = h.cli("volume", "create", "clivol", "--size", "16")
h.eq(r.rc, 0, "agentbox volume create", r.describe())
r = h.cli("create", "--id", "clibox", "--volume", "clivol:/mnt/c")
h.eq(r.rc, 0, "agentbox create --volume NAME:PATH", r.describe())
r = h.cli("exec", "clibox", "--", "sh", "-c", "echo cli > /mnt/c/f && cat /mnt/c/f")
h.eq((r.rc, r.out), (0, "cli\n"), "the CLI's box writes to its volume", r.describe())
r = h.cli("stop", "clibox")
r2 = h.cli("start", "clibox")
r3 = h.cli("exec", "clibox", "--", "cat", "/mnt/c/f")
h.eq((r.rc, r2.rc, r3.rc, r3.out), (0, 0, 0, "cli\n"), "agentbox stop + start: the volume is back",
     r3.describe())
r = h.cli("create", "--id", "clibox2", "--volume", "clivol:/mnt/c:ro")
r2 = h.cli("exec", "clibox2", "--", "sh", "-c", "cat /mnt/c/f; touch /mnt/c/g")
h.eq((r.rc, r2.rc, r2.out), (0, 1, "cli\n"), "--volume NAME:PATH:ro is read-only", r2.describe())
r = h.cli("volume", "ls")
h.contains(r.out, "clivol", "agentbox volume ls lists it", r.describe())
r = h.cli("volume", "rm", "clivol")
h.ne(r.rc, 0, "agentbox volume rm refuses a volume in use", r.describe())
h.contains(r.err, "clibox", "naming the box", r.describe())
r = h.cli("create", "--id", "clibad", "--volume", "nope:/x")
h.ne(r.rc, 0, "agentbox create --volume of an unknown volume fails", r.describe())
for b in ("clibox", "clibox2"):
    h.cli("rm", b)
r = h.cli("volume", "rm", "clivol")
h.eq(r.rc, 0, "agentbox volume rm once unused", r.describe())
h.ok(not os.path.exists(os.path.join(VOLS, "clivol")), "its image is gone")

# ---- kill -9 at any moment of a create: a volume is whole or absent -------------------------------

import json  # noqa: E402
import time  # noqa: E402

env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTBOX_") or k == "AGENTBOX_INIT"}
for i, delay in enumerate([0.0, 0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15]):
    p = subprocess.Popen([h.bin, "--data", h.data, "volume", "create", "crash%d" % i, "--size", "24"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    time.sleep(delay)
    p.kill()
    p.wait()
r = h.cli("volume", "ls", "--json")
listed = [json.loads(ln) for ln in r.out.splitlines() if ln.strip()]
whole = all(os.path.getsize(os.path.join(VOLS, v["name"], "disk.img")) == 24 * 1024 * 1024 and
            os.path.isfile(os.path.join(VOLS, v["name"], "volume.json")) for v in listed)
h.ok(r.rc == 0 and whole, "after kill -9 of creates, every listed volume is whole (%d of 8)" % len(listed),
     r.describe())
h.ok(all(not n.startswith("crash") or n in [v["name"] for v in listed] for n in os.listdir(VOLS)),
     "and nothing half-made has a volume's name", repr(os.listdir(VOLS)))
for v in listed:
    h.eq(h.cli("volume", "rm", v["name"]).rc, 0, "a volume a killed create made is removed (%s)" % v["name"])

# leave no mount behind, whatever failed above
for name in (os.listdir(VOLS) if os.path.isdir(VOLS) else []):
    subprocess.run(["umount", "-l", os.path.join(VOLS, name, "mnt")], capture_output=True)
h.done()
