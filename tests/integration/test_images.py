#!/usr/bin/env python3
"""Boxes from OCI images, end to end: a real registry on loopback (Debian's
docker-registry, tests/lib/registry.py) holds images made here (busybox-static
and files of our own, several layers, one deleting a file of the layer below
and one making a directory opaque); `agentbox serve` pulls them (plain,
SSE progress, or at create), boxes run from them with the image's env and
working directory, whiteouts honoured and the host's /usr absent; two boxes
share one copy of each layer and neither can change what the other sees;
removal and GC keep what a box uses and collect the rest; the CLI's image
verbs and create --image; and bad input changes nothing: an unknown tag, a
registry that is down or answers garbage, a blob whose digest does not match,
an image for another architecture, a bad reference, wrong credentials."""
import atexit
import io
import json
import os
import shutil
import sys
import tarfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import registry  # noqa: E402

h = abserver.ServerHarness(budget=240)
# A sanitized build's agentbox-init is dynamically linked: it starts only in
# boxes with the host's libraries, so boxes of images are left to the normal
# build there (the store, pulls and the API still run).
BOXES = abserver.abtest.init_is_static()
SKIP_WHY = "agentbox-init is dynamically linked (sanitized build): it cannot start in an image's root"
why = registry.missing()
if why:
    h.skip_all(why)
if not os.path.exists("/bin/busybox"):
    h.skip_all("busybox-static is not installed (scripts/deps.sh installs it)")

reg = registry.Registry(h.root)
reg.__enter__()
atexit.register(lambda: reg.__exit__(None, None, None))
R = reg.host


# ---- images made here -----------------------------------------------------------------------

def tar_layer(entries):
    """entries: list of (name, kind, data/target, mode); kind: f d l h c."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, kind, data, mode in entries:
            ti = tarfile.TarInfo(name)
            ti.mode = mode
            ti.mtime = 1700000000
            if kind == "d":
                ti.type = tarfile.DIRTYPE
                t.addfile(ti)
            elif kind == "l":
                ti.type = tarfile.SYMTYPE
                ti.linkname = data
                t.addfile(ti)
            else:
                data = data.encode() if isinstance(data, str) else data
                ti.size = len(data)
                t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


with open("/bin/busybox", "rb") as f:
    BUSYBOX = f.read()
APPLETS = ["sh", "ls", "cat", "echo", "env", "id", "pwd", "rm", "mkdir", "touch", "test", "wc", "sleep",
           "grep", "find", "head", "stat", "mount", "true", "false", "printf", "sort"]
BASE = tar_layer(
    [("bin", "d", None, 0o755), ("bin/busybox", "f", BUSYBOX, 0o755)] +
    [("bin/" + a, "l", "busybox", 0o777) for a in APPLETS] +
    [("etc", "d", None, 0o755),
     ("etc/passwd", "f", "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\n", 0o644),
     ("etc/group", "f", "root:x:0:\napp:x:1000:\n", 0o644),
     ("data", "d", None, 0o755), ("data/a", "f", "from the base\n", 0o644)])
ADD = tar_layer([("etc/motd", "f", "hello from the image\n", 0o644),
                 ("data/b", "f", "b\n", 0o644),
                 ("opt", "d", None, 0o755), ("opt/tool", "d", None, 0o755),
                 ("opt/tool/x", "f", "old x\n", 0o644)])
DEL = tar_layer([("data/.wh.a", "f", b"", 0o644),
                 ("opt/tool/.wh..wh..opq", "f", b"", 0o644),
                 ("opt/tool/y", "f", "new y\n", 0o644)])
CONFIG = {"config": {"Env": ["PATH=/bin", "FOO=image", "BAR=image"], "WorkingDir": "/data",
                     "Cmd": ["sh"]}}

d1 = registry.push_image(R, "tools/bb", "1", [BASE, ADD, DEL], CONFIG, media="oci", compression="gzip")
d2 = registry.push_image(R, "tools/bb", "zstd", [BASE, ADD, DEL], CONFIG, media="docker",
                         compression="zstd")
d3 = registry.push_image(R, "tools/bb", "plain", [BASE, ADD], CONFIG, media="oci", compression="none")
arm = registry.push_image(R, "tools/bb", "armonly", [BASE], dict(CONFIG, architecture="arm64"))
registry.push_index(R, "tools/bb", "multi", [(arm, arm.size, "linux", "arm64"), (d1, d1.size, "linux", "amd64")])
registry.push_index(R, "tools/bb", "armindex", [(arm, arm.size, "linux", "arm64")])
h.ok(True, "a registry on %s with images made here (3 layers: base, additions, deletions)" % R)

TOKEN = "admin-token-images-%d-0123456789" % os.getpid()
srv = h.start_server(token=TOKEN, config={
    "limits": {"disk": "64M", "memory": "256M", "timeout": "30s"},
})
DATA = srv.data
LAYERS = os.path.join(DATA, "images", "layers")
REF = "%s/tools/bb:1" % R


def layer_dirs():
    return sorted(os.listdir(LAYERS)) if os.path.isdir(LAYERS) else []


def images():
    r = srv.get("/v1/images")
    return r.get("images") or []


def sh(box, cmd, **kw):
    r = srv.exec(box, cmd, **kw)
    return r


def out(r):
    return (r.get("stdout") or "").strip()


def check_error(r, status, code, what):
    h.eq((r.status, r.err_code), (status, code), "%s: %d %s" % (what, status, code), r.describe())


# ---- pull ------------------------------------------------------------------------------------

r = srv.post("/v1/images", {"ref": REF})
h.eq(r.status, 200, "POST /v1/images pulls %s" % REF, r.describe())
img = r.json or {}
h.eq((img.get("layers"), img.get("names"), img.get("architecture")), (3, [REF], "amd64"),
     "... three layers, named by the canonical reference, amd64", r.text)
h.ok((img.get("id") or "").startswith("sha256:") and d1 in (img.get("digests") or []),
     "... its id is a sha256 digest and it remembers the manifest digest", r.text)
h.eq(img.get("config", {}).get("workdir"), "/data", "... its config shows the working directory", r.text)
h.eq(len(layer_dirs()), 3, "... three layer directories in the store", layer_dirs())
h.not_contains(r.text, DATA, "... no host path in the answer")

r = srv.get("/v1/images/" + REF)
h.eq((r.status, r.get("id")), (200, img.get("id")), "GET /v1/images/REF (slashes and all)", r.describe())
r = srv.get("/v1/images/" + img.get("id", "x"))
h.eq(r.status, 200, "GET /v1/images/ID", r.describe())
r = srv.post("/v1/images", {"ref": REF})
h.eq((r.status, len(layer_dirs())), (200, 3), "pulling it again: 200, nothing new unpacked", r.describe())

# ---- a box from it ---------------------------------------------------------------------------
if BOXES:

    r = srv.post("/v1/sandboxes", {"id": "img1", "image": REF, "env": {"BAR": "box"}})
    h.eq(r.status, 201, "create a box with image %s" % REF, r.describe())
    h.eq((r.get("image") or {}).get("ref"), REF, "... the box shows its image", r.text)
    r = sh("img1", "cat /etc/motd")
    h.eq(out(r), "hello from the image", "a file of the image's second layer", r.describe())
    r = sh("img1", "ls /data")
    h.eq(out(r), "b", "a whiteout of the third layer hides /data/a of the first", r.describe())
    r = sh("img1", "ls /opt/tool")
    h.eq(out(r), "y", "an opaque directory hides what the layers below had in it", r.describe())
    r = sh("img1", "echo $FOO $BAR; pwd")
    h.eq(out(r).split(), ["image", "box", "/data"],
         "the image's Env and WorkingDir apply; the box's env wins over the image's", r.describe())
    r = sh("img1", "echo $FOO", env={"FOO": "exec"})
    h.eq(out(r), "exec", "an exec's own env wins over both", r.describe())
    r = sh("img1", "test -e /usr/bin/python3 || test -e /usr/lib/x86_64-linux-gnu; echo $?")
    h.eq(out(r), "1", "the host's /usr is not in the box", r.describe())
    r = sh("img1", "cat /etc/hostname; test -d /workspace && test -d /mnt/user-data/outputs && echo dirs")
    h.eq(out(r).split(), ["img1", "dirs"], "the box's own hostname, /workspace and the DeerFlow paths", r.describe())
    r = srv.post("/v1/sandboxes/img1/exec", {"argv": ["/bin/busybox", "echo", "argv works"]})
    h.eq(out(r), "argv works", "an argv exec in an image box", r.describe())

    r = srv.put("/v1/sandboxes/img1/files", b"file api\n", query={"path": "/workspace/f.txt"})
    h.ok(r.status in (200, 201), "PUT a file into the image box", r.describe())
    r = srv.get("/v1/sandboxes/img1/files", query={"path": "/workspace/f.txt"})
    h.eq(r.body, b"file api\n", "... and read it back", r.describe())
    r = srv.post("/v1/sandboxes/img1/tools/grep", {"args": {"pattern": "hello", "path": "/etc"}})
    h.contains(json.dumps(r.json), "motd", "the grep tool in an image box", r.describe())
    r = srv.post("/v1/sandboxes/img1/tools/bash", {"args": {"command": "echo tool $FOO"}})
    h.contains(json.dumps(r.json), "tool image", "the bash tool runs with the image's shell and env", r.describe())

    # ---- two boxes share the layers; neither changes what the other sees -------------------------

    r = srv.post("/v1/sandboxes", {"id": "img2", "image": REF})
    h.eq(r.status, 201, "a second box from the same image", r.describe())
    h.eq(len(layer_dirs()), 3, "... still one copy of each layer on disk", layer_dirs())
    r = sh("img1", "echo changed > /etc/motd; rm /data/b; echo new > /data/new; echo ok")
    h.eq(out(r), "ok", "box 1 changes files of the image", r.describe())
    r = sh("img2", "cat /etc/motd; ls /data")
    h.eq(out(r).split("\n"), ["hello from the image", "b"], "... box 2 sees the image as it was", r.describe())
    r = sh("img1", "cat /etc/motd; ls /data")
    h.eq(out(r).split("\n"), ["changed", "new"], "... box 1 keeps its own changes", r.describe())
    motd = [os.path.join(LAYERS, d, "fs", "etc", "motd") for d in layer_dirs()
            if os.path.exists(os.path.join(LAYERS, d, "fs", "etc", "motd"))]
    h.eq([open(p).read() for p in motd], ["hello from the image\n"], "... and the layer on the host is unchanged",
         motd)
    r = sh("img1", "mount -o remount,rw / 2>&1; echo x > /proc/self/root/etc/motd2 && echo wrote")
    h.eq(os.path.exists(os.path.join(LAYERS, motd[0].split("/")[-4], "fs", "etc", "motd2")) if motd else True,
         False, "a box cannot write into a shared layer", r.describe())

    # stop and start: files kept, image still applies
    r = srv.post("/v1/sandboxes/img1/stop")
    h.eq(r.status, 200, "stop the image box", r.describe())
    r = sh("img1", "cat /etc/motd; echo $FOO")
    h.eq(out(r).split("\n"), ["changed", "image"], "after stop and start: its changes kept, the image's env applies",
         r.describe())

else:
    h.skip("boxes from images", SKIP_WHY)
# ---- pulls at create, other media, SSE progress ------------------------------------------------

if BOXES:
    r = srv.post("/v1/sandboxes", {"id": "img3", "image": "%s/tools/bb:zstd" % R})
    h.eq(r.status, 201, "a create with an image not in the store pulls it (zstd layers, Docker types)",
         r.describe())
    r = sh("img3", "ls /data /opt/tool")
    h.contains(out(r), "y", "... and the box runs from it", r.describe())
    r = srv.post("/v1/sandboxes", {"id": "img4", "image": "%s/tools/bb:multi" % R})
    h.eq(r.status, 201, "an index: its linux/amd64 entry is used", r.describe())

else:
    srv.post("/v1/images", {"ref": "%s/tools/bb:zstd" % R})
    h.skip("creates that pull their image", SKIP_WHY)
s = srv.sse("/v1/images", method="POST", body={"ref": "%s/tools/bb:plain" % R})
evs = s.collect(until=lambda e: e.type in ("done", "error"), timeout=60)
s.close()
types = [e.type for e in evs]
h.ok("progress" in types and types[-1:] == ["done"], "pull with Accept: text/event-stream: progress events, "
     "then done", types)
phases = [json.loads(e.data).get("phase") for e in evs if e.type == "progress"]
h.ok("resolve" in phases and ("unpack" in phases or "exists" in phases), "... resolve and layer phases", phases)

# ---- bad input changes nothing -----------------------------------------------------------------

before_imgs = sorted(i["id"] for i in images())
before_layers = layer_dirs()


def unchanged(what):
    h.eq((sorted(i["id"] for i in images()), layer_dirs()), (before_imgs, before_layers),
         "%s: nothing added to the store" % what)
    tmp = os.path.join(DATA, "images", "tmp")
    h.eq(os.listdir(tmp) if os.path.isdir(tmp) else [], [], "%s: nothing left in the store's tmp" % what)


r = srv.post("/v1/images", {"ref": "%s/tools/bb:nosuchtag" % R})
check_error(r, 404, "not_found", "pull of an unknown tag")
r = srv.post("/v1/images", {"ref": "%s/no/such:1" % R})
check_error(r, 404, "not_found", "pull of an unknown repository")
r = srv.post("/v1/sandboxes", {"id": "bad1", "image": "%s/tools/bb:nosuchtag" % R})
check_error(r, 404, "not_found", "create with an unknown tag")
h.eq(srv.get("/v1/sandboxes/bad1").status, 404, "... no box was made")
r = srv.post("/v1/images", {"ref": "%s/tools/bb:armonly" % R})
check_error(r, 501, "unsupported", "an image for arm64")
r = srv.post("/v1/images", {"ref": "%s/tools/bb:armindex" % R})
h.ok(r.status in (404, 501), "an index with only linux/arm64 is refused", r.describe())
h.contains(r.err_message or "", "arm64", "... naming the platform it has", r.describe())
with registry.closed_port() as down:
    r = srv.post("/v1/images", {"ref": "%s/tools/bb:1" % down})
check_error(r, 503, "unavailable", "a registry that is down")
with registry.AuthProxy(R, None, None, mode="garbage") as px:
    r = srv.post("/v1/images", {"ref": "%s/tools/bb:1" % px.host})
    check_error(r, 503, "unavailable", "a registry answering garbage")
d5 = registry.push_image(R, "tools/other", "1", [tar_layer([("x", "f", "only here\n", 0o644)])], CONFIG)
with registry.AuthProxy(R, None, None, mode="bad_digest") as px:
    r = srv.post("/v1/images", {"ref": "%s/tools/other:1" % px.host})
    check_error(r, 503, "unavailable", "a blob whose digest does not match")
for bad in ("UPPER/case", "a//b", "x:", ":tag", "a@sha256:123"):
    r = srv.post("/v1/images", {"ref": bad})
    check_error(r, 400, "invalid_argument", "a bad reference %r" % bad)
r = srv.post("/v1/sandboxes", {"id": "bad2", "image": "UPPER/case"})
check_error(r, 400, "invalid_argument", "create with a bad reference")
unchanged("the failed pulls")

# ---- import over HTTP, metrics ------------------------------------------------------------------

import imagelib  # noqa: E402
arch = os.path.join(h.root, "saved.tar")
imagelib.write_docker_save(arch, [{"layers": [BASE], "config": imagelib.config(env=["PATH=/bin"]),
                                   "tags": ["imported/bb:1"]}])
with open(arch, "rb") as f:
    saved = f.read()
r = srv.post("/v1/images/import", saved, headers={"Content-Type": "application/x-tar"})
h.eq(r.status, 201, "POST /v1/images/import of a docker save archive", r.describe())
h.eq([i.get("names") for i in (r.get("images") or [])], [["docker.io/imported/bb:1"]],
     "... named by its RepoTags", r.text)
r = srv.post("/v1/images/import", b"not a tar at all", headers={"Content-Type": "application/x-tar"})
h.eq(r.status, 400, "an import of garbage is 400", r.describe())
r = srv.delete("/v1/images/imported/bb:1")
h.eq(r.status, 200, "... and the imported image is removed again", r.describe())
m = abserver.parse_metrics(srv.get("/metrics").text)
h.ok((abserver.metric_sum(m, "agentbox_lifecycle_ops_total", op="image_pull", result="ok") or 0) >= 3,
     "/metrics counts pulls", None)
h.ok((abserver.metric_sum(m, "agentbox_lifecycle_ops_total", op="image_pull", result="error") or 0) >= 3,
     "... and failed pulls", None)
h.ok((abserver.metric_sum(m, "agentbox_images") or 0) >= 2, "... and shows the store's images", None)

# ---- auth -------------------------------------------------------------------------------------

with registry.AuthProxy(R, "robot", "s3cret") as px:
    srv2 = h.start_server(name="auth", data=h.new_data_dir("data2"), config={
        "limits": {"disk": "64M", "memory": "256M"},
        "registries": [{"host": px.host, "username": "robot", "password": "s3cret"}]})
    r = srv2.post("/v1/images", {"ref": "%s/tools/bb:1" % px.host})
    h.eq(r.status, 200, "a pull through token auth with the configured credentials", r.describe())
    h.ok(px.token_requests >= 1, "... a token was asked for", px.token_requests)
    srv2.stop()
with registry.AuthProxy(R, "robot", "other") as px:
    srv3 = h.start_server(name="auth2", data=h.new_data_dir("data3"), config={
        "registries": [{"host": px.host, "username": "robot", "password": "wrong"}]})
    r = srv3.post("/v1/images", {"ref": "%s/tools/bb:1" % px.host})
    check_error(r, 403, "permission_denied", "wrong registry credentials")
    h.not_contains(r.text, "wrong", "... the password is not in the answer")
    srv3.stop()

# ---- removal and GC ---------------------------------------------------------------------------

plain = "%s/tools/bb:plain" % R
r = srv.delete("/v1/images/" + plain)
h.eq(r.status, 200, "DELETE an image no box uses", r.describe())
h.eq(srv.get("/v1/images/" + plain).status, 404, "... it is gone")
r = srv.delete("/v1/images/" + REF)
h.eq(r.status, 200, "DELETE the image boxes img1 and img2 use", r.describe())
if BOXES:
    r = sh("img2", "cat /etc/motd")
    h.eq(out(r), "hello from the image", "... the boxes still run from it", r.describe())
    r = srv.post("/v1/sandboxes/img2/stop")
    r = sh("img2", "ls /data")
    h.eq(out(r), "b", "... and start again from it", r.describe())
else:
    h.skip("boxes run from a removed image", SKIP_WHY)
for b in ("img1", "img2", "img3", "img4"):
    srv.delete("/v1/sandboxes/" + b)
abserver.wait_for(lambda: all(srv.get("/v1/sandboxes/" + b).status == 404 for b in ("img1", "img2", "img3", "img4")),
                  timeout=30)
remaining = [i for i in images() if REF in (i.get("names") or [])]
h.eq(remaining, [], "the removed image is not listed once its boxes are deleted")
r = srv.get("/v1/images")
used = sum(i.get("layers", 0) for i in r.get("images") or [])
h.ok(len(layer_dirs()) <= used, "GC left no layer that no image uses (%d dirs, %d layers in images)"
     % (len(layer_dirs()), used), layer_dirs())

# ---- the CLI ----------------------------------------------------------------------------------

srv.stop()
res = h.run("image", "ls")
h.eq(res.rc, 0, "agentbox image ls", res.describe())
h.contains(res.out, "tools/bb:zstd", "... lists the images of the store", res.describe())
res = h.run("image", "pull", REF)
h.eq(res.rc, 0, "agentbox image pull", res.describe())
if BOXES:
    res = h.run("create", "--image", REF, "--disk", "64M", "--memory", "256M")
    h.eq(res.rc, 0, "agentbox create --image", res.describe())
    cid = res.out.strip()
    res = h.run("exec", cid, "--", "cat /etc/motd; ls /data")
    h.eq(res.out.split("\n")[:2], ["hello from the image", "b"], "agentbox exec in it", res.describe())
else:
    h.skip("agentbox create --image", SKIP_WHY)
res = h.run("image", "pull", "%s/tools/bb:nosuchtag" % R)
h.eq(res.rc, 125, "agentbox image pull of an unknown tag fails with 125", res.describe())
h.contains(res.err, "not found", "... saying not found", res.describe())
if BOXES:
    res = h.run("rm", cid)
    h.eq(res.rc, 0, "agentbox rm of the image box", res.describe())
else:
    pass
res = h.run("image", "rm", REF)
h.eq(res.rc, 0, "agentbox image rm", res.describe())
res = h.run("image", "ls", "--json")
names = [n for i in json.loads(res.out or "[]") for n in i.get("names", [])]
h.not_contains(names, REF, "... the image is gone", res.describe())

h.done()
