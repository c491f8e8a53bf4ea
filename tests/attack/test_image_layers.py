#!/usr/bin/env python3
"""Attacks through image layers, end to end: hostile layers are pushed to a
registry on loopback and `agentbox serve` pulls them. Each attack passes
only when it fails: an absolute path, "..", a write through a symlink of the
layer, a hard link to a host file, device nodes, a setuid file, a
decompression bomb; then, from inside a box of an image: writing into the
shared layers, and finding the store's host paths."""
import atexit
import gzip
import hashlib
import io
import json
import os
import stat
import sys
import tarfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import registry  # noqa: E402

h = abserver.ServerHarness(budget=200)
why = registry.missing()
if why:
    h.skip_all(why)
if not os.path.exists("/bin/busybox"):
    h.skip_all("busybox-static is not installed (scripts/deps.sh installs it)")
reg = registry.Registry(h.root)
reg.__enter__()
atexit.register(lambda: reg.__exit__(None, None, None))
R = reg.host
PID = os.getpid()
SENTINEL = os.path.join(h.root, "sentinel")
os.mkdir(SENTINEL)


def layer(entries):
    """entries: TarInfo-ish tuples (name, type, data|linkname, mode, extra dict)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for e in entries:
            name, kind, data, mode = e[:4]
            extra = e[4] if len(e) > 4 else {}
            ti = tarfile.TarInfo(name)
            ti.mode = mode
            ti.mtime = 1700000000
            for k, v in extra.items():
                setattr(ti, k, v)
            if kind == "f":
                data = data.encode() if isinstance(data, str) else data
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
                continue
            ti.type = {"d": tarfile.DIRTYPE, "l": tarfile.SYMTYPE, "h": tarfile.LNKTYPE,
                       "c": tarfile.CHRTYPE, "b": tarfile.BLKTYPE, "p": tarfile.FIFOTYPE}[kind]
            if kind in ("l", "h"):
                ti.linkname = data
            t.addfile(ti)
    return buf.getvalue()


with open("/bin/busybox", "rb") as f:
    BUSYBOX = f.read()
BASE = layer([("bin", "d", None, 0o755), ("bin/busybox", "f", BUSYBOX, 0o755)] +
             [("bin/" + a, "l", "busybox", 0o777) for a in ("sh", "ls", "cat", "stat", "echo", "test", "grep")])
CONFIG = {"config": {"Env": ["PATH=/bin"]}}


def push(tag, top, base=True):
    return registry.push_image(R, "attack/img", tag, ([BASE] if base else []) + [top], CONFIG)


srv = h.start_server(config={"limits": {"disk": "64M", "memory": "256M", "timeout": "30s"},
                             "image_max_layer": "32M"})
DATA = srv.data
TMP = os.path.join(DATA, "images", "tmp")


def pull(tag):
    return srv.post("/v1/images", {"ref": "%s/attack/img:%s" % (R, tag)})


def refused(r, what, mention=None):
    h.ok(r.status in (400, 413, 503) and r.err_code is not None, "%s: the pull is refused" % what, r.describe())
    if mention:
        h.contains(r.err_message or "", mention, "%s: the error names %r" % (what, mention), r.describe())
    h.eq(os.listdir(TMP) if os.path.isdir(TMP) else [], [], "%s: nothing left in the store's tmp" % what)


# absolute and ".." names
victim = os.path.join(SENTINEL, "abs-%d" % PID)
push("abs", layer([(victim, "f", "pwned\n", 0o644)]))
refused(pull("abs"), "a layer with an absolute path", "abs-%d" % PID)
h.ok(not os.path.exists(victim), "... nothing was written at the absolute path on the host")
dotdot = "../../../../../../../../.." + SENTINEL + "/dotdot-%d" % PID
push("dotdot", layer([(dotdot, "f", "pwned\n", 0o644)]))
refused(pull("dotdot"), "a layer with '..'")
h.eq(os.listdir(SENTINEL), [], "... nothing was written outside the layer")

# a symlink of the layer, then a file written through it
push("symlink", layer([("escape", "l", SENTINEL, 0o777), ("escape/pwned", "f", "pwned\n", 0o644)]))
r = pull("symlink")
h.eq(os.listdir(SENTINEL), [], "a file written through a symlink of the layer does not land on the host",
     r.describe())
push("symlink2", layer([("up", "l", "../../../../../../../..", 0o777),
                        ("up" + SENTINEL + "/pwned2", "f", "pwned\n", 0o644)]))
r = pull("symlink2")
h.eq(os.listdir(SENTINEL), [], "... nor through a symlink to '..'", r.describe())

# a hard link to a host file
push("hardlink", layer([("shadow", "h", "/etc/shadow", 0o644)]))
r = pull("hardlink")
h.ok(r.status != 200, "a hard link to /etc/shadow is refused", r.describe())
links = []
for root, dirs, files in os.walk(os.path.join(DATA, "images")):
    for f in files:
        try:
            st = os.lstat(os.path.join(root, f))
        except OSError:
            continue
        if st.st_ino == os.stat("/etc/shadow").st_ino and st.st_dev == os.stat("/etc/shadow").st_dev:
            links.append(os.path.join(root, f))
h.eq(links, [], "... and no link to it is anywhere in the store")
push("hardlink2", layer([("h", "h", "../../../../../../etc/passwd", 0o644)]))
r = pull("hardlink2")
h.ok(r.status != 200, "a hard link out of the layer with '..' is refused", r.describe())

# device nodes, fifos, setuid
push("devices", layer([("mem", "c", None, 0o666, {"devmajor": 1, "devminor": 1}),
                       ("disk", "b", None, 0o666, {"devmajor": 8, "devminor": 0}),
                       ("fifo", "p", None, 0o666),
                       ("bin/suid", "f", BUSYBOX, 0o4755)]))
r = pull("devices")
h.eq(r.status, 200, "a layer with device nodes and a setuid file is pulled", r.describe())

nodes = []
for root_, _, files in os.walk(os.path.join(DATA, "images", "layers")):
    for f in files:
        st = os.lstat(os.path.join(root_, f))
        if (stat.S_ISCHR(st.st_mode) and st.st_rdev != 0) or stat.S_ISBLK(st.st_mode) or stat.S_ISFIFO(st.st_mode):
            nodes.append(os.path.join(root_, f))
h.eq(nodes, [], "no device node or fifo of the layer is in the store (only 0/0 whiteouts)")
if abserver.abtest.init_is_static():
    r = srv.post("/v1/sandboxes", {"id": "dev1", "image": "%s/attack/img:devices" % R})
    h.eq(r.status, 201, "... a box runs from it", r.describe())
    r = srv.exec("dev1", "test -e /mem || test -e /disk || test -e /fifo; echo $?")
    h.eq((r.get("stdout") or "").strip(), "1", "the device nodes and the fifo were left out", r.describe())
    r = srv.exec("dev1", "grep ' / / ' /proc/self/mountinfo")
    h.contains(r.get("stdout") or "", "nosuid", "the box's root is mounted nosuid: a setuid file gives nothing",
               r.describe())
    h.contains(r.get("stdout") or "", "nodev", "... and nodev", r.describe())

    # from inside: the shared layers
    r = srv.exec("dev1", "echo x > /bin/busybox; echo x > /newfile; cat /proc/self/mountinfo")
    h.not_contains(r.get("stdout") or "", os.path.join(DATA, "images"),
                   "the box's mountinfo shows no host path of the image store", r.describe())
    h.contains(r.get("stdout") or "", "lowerdir=mask/skel:lower/l1:lower/l0",
               "... its layers appear by names relative to the box", r.describe())
    layers = os.path.join(DATA, "images", "layers")
    found = [os.path.join(root, f) for root, _, files in os.walk(layers) for f in files if f == "newfile"]
    h.eq(found, [], "a write in the box lands in its own layer, not a shared one")
    bb = [os.path.join(root, f) for root, _, files in os.walk(layers) for f in files if f == "busybox"]
    h.ok(bb and all(os.path.getsize(p) == len(BUSYBOX) for p in bb), "the shared busybox is unchanged", bb)
    r = srv.exec("dev1", "for d in /proc/1/root /proc/self/root; do ls $d/../../.. 2>/dev/null; done | "
                         "grep -c images")
    h.eq((r.get("stdout") or "0").strip(), "0", "the store is not reachable from the box", r.describe())
else:
    h.skip("attacks from inside a box of an image",
           "agentbox-init is dynamically linked (sanitized build): it cannot start in an image's root")

# a decompression bomb
bomb = gzip.compress(layer([("zeros", "f", bytes(96 << 20), 0o644)]), 9)
h.ok(len(bomb) < (1 << 20), "a gzip layer of %d KiB that unpacks to 96 MiB" % (len(bomb) >> 10))
digest = registry.push_blob(R, "attack/img", bomb)
raw = layer([("zeros", "f", bytes(96 << 20), 0o644)])
cfg = {"architecture": "amd64", "os": "linux", "config": {}, "rootfs": {"type": "layers",
       "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]}}
cblob = json.dumps(cfg).encode()
cdig = registry.push_blob(R, "attack/img", cblob)
man = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                  "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cdig,
                             "size": len(cblob)},
                  "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest,
                              "size": len(bomb)}]}).encode()
registry.push_manifest(R, "attack/img", "bomb", man, "application/vnd.oci.image.manifest.v1+json")
r = pull("bomb")
refused(r, "a decompression bomb (96 MiB with image_max_layer 32M)")
h.eq(r.err_code, "limit_exceeded", "... as a limit", r.describe())

h.done()
