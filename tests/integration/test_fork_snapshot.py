#!/usr/bin/env python3
"""Forks and snapshots, end to end over `agentbox serve`.

Fork (POST /v1/sandboxes/{id}/fork): of a running host-base box and of an
image box; the new box has the files (workspace and outside it), owners of a
non-root box user kept, both boxes keep running and neither sees the other's
later changes; the fork survives stop/start; "box.created" with
"forked_from". Snapshot (POST /v1/sandboxes/{id}/snapshot): of an image box
-> a new image in GET /v1/images -> a box made from it has the files (root
and workspace), a deleted file stays deleted (whiteout), a directory made
anew hides what the image had in it (opaque) -> the original is unchanged.
An image's own /workspace is copied into a new box's workspace. A host-base
box answers 501; bad input (unknown box, bad name, taken id) changes
nothing."""
import atexit
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import imagelib  # noqa: E402
import registry  # noqa: E402

h = abserver.ServerHarness(budget=240)
# A sanitized build's agentbox-init is dynamically linked: it cannot start in
# an image's root, so the image-box half runs in the normal build only.
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

APPLETS = ["sh", "ls", "cat", "echo", "rm", "mkdir", "stat", "test", "chown", "touch", "id",
           "sort", "tr", "true"]
base = {"bin/busybox": imagelib.file(open("/bin/busybox", "rb").read(), 0o755),
        "etc/passwd": imagelib.PASSWD, "etc/group": imagelib.GROUP}
for a in APPLETS:
    base["bin/" + a] = imagelib.symlink("busybox")
BASE = imagelib.layer_tar(base)
ADD = imagelib.layer_tar({
    "data/a": "a\n", "data/b": "b\n",
    "opt/tool/x": "x\n",
    "workspace/seed.txt": imagelib.file("from the image\n", 0o644, 1000, 1000),
})
CHANGE = imagelib.layer_tar({"data/a": imagelib.WHITEOUT, "opt/tool": imagelib.OPAQUE,
                             "opt/tool/y": "y\n"})
CONFIG = {"config": {"Env": ["PATH=/bin"], "WorkingDir": "/workspace"}}
registry.push_image(R, "tools/fs", "1", [BASE, ADD, CHANGE], CONFIG)
REF = "%s/tools/fs:1" % R

TOKEN = "admin-token-fork-%d-0123456789" % os.getpid()
srv = h.start_server(token=TOKEN, config={
    "limits": {"disk": "64M", "memory": "256M", "timeout": "30s"},
    "quotas": {"apps": {"qa": {"max_boxes": 1}}},
})


def out(r):
    return (r.get("stdout") or "").strip()


def sh(box, cmd):
    return srv.exec(box, cmd)


def check_error(r, status, code, what):
    h.eq((r.status, r.err_code), (status, code), "%s: %d %s" % (what, status, code), r.describe())


def images():
    return sorted(i["id"] for i in (srv.get("/v1/images").get("images") or []))


def box_ids():
    return sorted(b["id"] for b in (srv.list() or []))


events = srv.sse("/v1/events?types=box.created")

# ---- fork of a running box on the host base --------------------------------------------------

r = srv.post("/v1/sandboxes", {"id": "hb"})
h.eq(r.status, 201, "create a host-base box", r.describe())
r = sh("hb", "echo w > /workspace/w.txt; echo etc > /etc/x; mkdir -p /workspace/d/e; "
             "echo deep > /workspace/d/e/f; echo bob > /workspace/bob; chown 1234:1234 /workspace/bob; "
             "ln /workspace/w.txt /workspace/w.link; echo ok")
h.eq(out(r), "ok", "... files in and outside /workspace, one owned by uid 1234, a hard link", r.describe())

t0 = time.monotonic()
r = srv.post("/v1/sandboxes/hb/fork", {"id": "hbf"})
h.eq(r.status, 201, "POST /v1/sandboxes/hb/fork -> 201", r.describe())
h.eq((r.get("id"), r.get("status")), ("hbf", "running"), "... the new box, running", r.text)
r = sh("hbf", "cat /workspace/w.txt /etc/x /workspace/d/e/f; stat -c %u:%g /workspace/bob; "
              "stat -c %h /workspace/w.txt")
h.eq(out(r).split("\n"), ["w", "etc", "deep", "1234:1234", "2"],
     "the fork has the files, the owner of uid 1234's file, the hard link", r.describe())
ev = events.collect(until=lambda e: e.type == "box.created" and "hbf" in e.data, timeout=10)
data = [json.loads(e.data) for e in ev if e.type == "box.created" and "hbf" in e.data]
h.eq([(d.get("data") or {}).get("forked_from") for d in data], ["hb"],
     "a box.created event with forked_from", [e.data for e in ev])

r = sh("hbf", "echo changed > /workspace/w.txt; rm /etc/x; echo new > /workspace/n; echo ok")
h.eq(out(r), "ok", "the fork changes and deletes files", r.describe())
r = sh("hb", "cat /workspace/w.txt /etc/x; test -e /workspace/n || echo none")
h.eq(out(r).split("\n"), ["w", "etc", "none"], "... the original is untouched", r.describe())
r = sh("hb", "rm /workspace/bob; echo x > /etc/x2; echo ok")
r = sh("hbf", "cat /workspace/bob; test -e /etc/x2 || echo none")
h.eq(out(r).split("\n"), ["bob", "none"], "... and the original's later changes do not reach the fork",
     r.describe())
h.eq((srv.status_of("hb"), srv.status_of("hbf")), ("running", "running"), "both keep running")

r = srv.post("/v1/sandboxes/hbf/stop")
h.eq(r.status, 200, "stop the fork", r.describe())
r = srv.post("/v1/sandboxes/hbf/start")
r = sh("hbf", "cat /workspace/w.txt; stat -c %u /workspace/bob; id -u")
h.eq(out(r).split("\n"), ["changed", "1234", "0"], "the fork after stop and start: files and owners kept",
     r.describe())

# a stopped source: nothing to freeze
srv.post("/v1/sandboxes/hb/stop")
r = srv.post("/v1/sandboxes/hb/fork", {"id": "hbf2"})
h.eq(r.status, 201, "fork of a stopped box", r.describe())
r = sh("hbf2", "cat /workspace/w.txt /etc/x2")
h.eq(out(r).split("\n"), ["w", "x"], "... has its files", r.describe())
h.eq(srv.status_of("hb"), "stopped", "... and the source stays stopped")

# ---- image boxes: the image's /workspace, fork ---------------------------------------------------
if BOXES:

    r = srv.post("/v1/sandboxes", {"id": "ib", "image": REF})
    h.eq(r.status, 201, "create a box of image %s" % REF, r.describe())
    r = sh("ib", "cat /workspace/seed.txt; stat -c %u /workspace/seed.txt")
    h.eq(out(r).split("\n"), ["from the image", "1000"],
         "the image's /workspace is in the new box's workspace, owners kept", r.describe())
    r = sh("ib", "echo w2 > /workspace/w2; echo y > /etc/y; rm /data/b; "
                 "rm -r /opt/tool; mkdir /opt/tool; echo z > /opt/tool/z; "
                 "echo app > /data/app; chown 1000:1000 /data/app; echo ok")
    h.eq(out(r), "ok", "the image box changes files: adds, deletes, a directory made anew", r.describe())
    r = srv.post("/v1/sandboxes/ib/fork", {"id": "ibf"})
    h.eq(r.status, 201, "fork of the image box", r.describe())
    h.eq((r.get("image") or {}).get("ref"), REF, "... the fork shows the same image", r.text)
    r = sh("ibf", "cat /workspace/w2 /etc/y /workspace/seed.txt; ls /data; ls /opt/tool; stat -c %u /data/app")
    h.eq(out(r).split("\n"), ["w2", "y", "from the image", "app", "z", "1000"],
         "... with the files, the deletions and owners of the original", r.describe())

    # ---- snapshot -------------------------------------------------------------------------------------

    before = images()
    r = srv.post("/v1/sandboxes/ib/snapshot", {"name": "myenv:1"})
    h.eq(r.status, 201, "POST /v1/sandboxes/ib/snapshot {name: myenv:1} -> 201", r.describe())
    snap = r.json or {}
    h.eq((snap.get("names"), snap.get("layers"), snap.get("source")),
         (["docker.io/library/myenv:1"], 4, "snapshot"),
         "... a new image: the canonical name, the image's 3 layers plus one", r.text)
    h.ok(snap.get("id") not in before and snap.get("id") in images(), "GET /v1/images lists it", images())
    h.eq(srv.status_of("ib"), "running", "the snapshotted box keeps running")

    r = srv.post("/v1/sandboxes", {"id": "fromsnap", "image": "myenv:1"})
    h.eq(r.status, 201, "create a box with image myenv:1", r.describe())
    r = sh("fromsnap", "cat /workspace/w2 /workspace/seed.txt /etc/y; stat -c %u /data/app")
    h.eq(out(r).split("\n"), ["w2", "from the image", "y", "1000"],
         "the new box has the snapshot's workspace and root files, owners kept", r.describe())
    r = sh("fromsnap", "ls /data; echo --; ls /opt/tool")
    h.eq(out(r).split("\n"), ["app", "--", "z"],
         "a deleted file stays deleted, a directory made anew hides the image's (whiteout, opaque)",
         r.describe())
    r = sh("ib", "ls /data; cat /workspace/w2")
    h.eq(out(r).split("\n"), ["app", "w2"], "the original box is unchanged", r.describe())
    r = sh("fromsnap", "echo more > /workspace/w2; echo ok")
    r = sh("ib", "cat /workspace/w2")
    h.eq(out(r), "w2", "... and a box of its snapshot changes nothing of it", r.describe())

    # ---- a snapshot made with an API key is its app's own image -------------------------------------
    keys = {}
    for app in ("acme", "other"):
        r = srv.post("/v1/keys", {"app_id": app})
        keys[app] = r.get("key")
    r = srv.post("/v1/sandboxes", {"user_id": "u", "chat_id": "snap", "image": REF}, token=keys["acme"])
    h.eq(r.status, 201, "app acme makes a box of the image", r.describe())
    ab = r.get("id")
    sh(ab, "echo secret-of-acme > /workspace/secret")
    # (named in the test's registry: a pull of it by another app fails at once, offline)
    PRIV = "%s/acme/priv:1" % R
    r = srv.post("/v1/sandboxes/%s/snapshot" % ab, {"name": PRIV}, token=keys["acme"])
    priv = r.json or {}
    h.eq((r.status, priv.get("names")), (201, [PRIV]),
         "acme snapshots it as .../acme/priv:1 and sees the name as it gave it", r.describe())
    pid = priv.get("id")
    listed = {i["id"]: i for i in srv.get("/v1/images", token=keys["acme"]).get("images") or []}
    h.eq((listed.get(pid) or {}).get("names"), [PRIV], "acme's image list has it")
    listed = [i["id"] for i in srv.get("/v1/images", token=keys["other"]).get("images") or []]
    h.ok(pid and pid not in listed and snap.get("id") in listed,
         "app other's list has the shared snapshot, not acme's", listed)
    for q in (PRIV, pid, "@acme/" + PRIV):
        r = srv.get("/v1/images/%s" % q, token=keys["other"])
        check_error(r, 404, "not_found", "app other's GET /v1/images/%s" % q)
    for n, q in enumerate((PRIV, pid)):
        r = srv.post("/v1/sandboxes", {"user_id": "u", "chat_id": "steal%d" % n, "image": q},
                     token=keys["other"])
        h.ok(r.status != 201 and not r.get("id"), "app other cannot make a box of acme's image (%s)" % q,
             r.describe())
    r = srv.post("/v1/sandboxes/%s/snapshot" % ab, {"name": "myenv:1"}, token=keys["acme"])
    h.eq(r.status, 201, "acme names a snapshot myenv:1 too, a name the admin's snapshot has", r.describe())
    own = r.get("id") if r.status == 201 else None
    r = srv.get("/v1/images/myenv:1", token=keys["other"])
    h.eq(r.get("id"), snap.get("id"), "... for app other myenv:1 is still the admin's image", r.describe())
    r = srv.get("/v1/images/myenv:1", token=keys["acme"])
    h.ok(r.status == 200 and own and r.get("id") == own != snap.get("id"), "... for acme it is its own",
         r.describe())
    r = srv.post("/v1/sandboxes", {"user_id": "u", "chat_id": "fromsnap", "image": PRIV},
                 token=keys["acme"])
    h.eq(r.status, 201, "acme makes a box of its image", r.describe())
    r = sh(r.get("id"), "cat /workspace/secret")
    h.eq(out(r), "secret-of-acme", "... with the snapshot's files", r.describe())
    admin = {i["id"]: i for i in srv.get("/v1/images").get("images") or []}
    # Both snapshots are of the same files; their configs carry the second they were made
    # in, so they are one image or two (when a second boundary fell between them).
    seen = [admin.get(i) or {} for i in sorted({pid, own})]
    h.eq((sorted(n for i in seen for n in i.get("names") or []),
          sorted({a for i in seen for a in i.get("apps") or []})),
         (sorted(["@acme/" + PRIV, "@acme/docker.io/library/myenv:1"]), ["acme"]),
         "the admin sees acme's snapshots (one image or two), their names as stored and whose")
else:
    h.skip('boxes of images: their /workspace, forks and snapshots', SKIP_WHY)

# ---- what is refused ---------------------------------------------------------------------------

imgs, boxes = images(), box_ids()
r = srv.post("/v1/sandboxes/hbf/snapshot", {"name": "hostbase:1"})
check_error(r, 501, "unsupported", "snapshot of a host-base box")
h.contains(r.err_message or "", "fork works for every box", "... saying what works instead", r.describe())
r = srv.post("/v1/sandboxes/nosuch/snapshot", {"name": "x:1"})
check_error(r, 404, "not_found", "snapshot of an unknown box")
r = srv.post("/v1/sandboxes/nosuch/fork", {})
check_error(r, 404, "not_found", "fork of an unknown box")
if BOXES:
    for bad in ("UPPER:1", "a//b", "", "x@sha256:" + "0" * 64):
        r = srv.post("/v1/sandboxes/ib/snapshot", {"name": bad})
        check_error(r, 400, "invalid_argument", "snapshot named %r" % bad)
    r = srv.post("/v1/sandboxes/ib/snapshot", {"name": "ok:1", "extra": 1})
    check_error(r, 400, "invalid_argument", "snapshot with an unknown field")
    r = srv.post("/v1/sandboxes/hb/fork", {"id": "ib"})
    check_error(r, 409, "conflict", "fork into an id that exists")
    r = srv.post("/v1/sandboxes/hb/fork", {"id": "Bad Id"})
    check_error(r, 400, "invalid_argument", "fork with a bad id")
    r = srv.post("/v1/sandboxes/ib/fork", {"image": REF})
    check_error(r, 400, "invalid_argument", "fork with an image")
else:
    h.skip('snapshot names and fork refusals on an image box', SKIP_WHY)
r = srv.post("/v1/sandboxes", {"id": "gone"})
h.eq(r.status, 201, "a box to delete", r.describe())
r = srv.delete("/v1/sandboxes/gone")
r2 = srv.post("/v1/sandboxes/gone/fork", {"id": "gonef"})
h.ok(r.status == 202 and r2.status in (404, 409), "a fork of a box being deleted: 409 (404 once it is gone)",
     r2.describe())
h.eq(srv.status_of("gonef"), None, "... and no fork was made")
# (the delete is asynchronous: let it end before the counts below are taken)
abserver.wait_for(lambda: srv.status_of("gone") is None, 15)
m = srv.metrics() or []
forks = abserver.metric_sum(m, "agentbox_lifecycle_ops_total", op="fork", result="ok")
snaps = abserver.metric_sum(m, "agentbox_lifecycle_ops_total", op="snapshot", result="ok")
h.ok((forks or 0) >= (3 if BOXES else 2) and (snaps or 0) >= (1 if BOXES else 0),
     "forks and snapshots are counted in /metrics",
     (forks, snaps))
r = srv.post("/v1/sandboxes", {"app_id": "qa", "user_id": "u", "chat_id": "c"})
h.eq(r.status, 201, "a box of app qa (max_boxes 1)", r.describe())
qa = r.get("id")
imgs, boxes = images(), box_ids()
r = srv.post("/v1/sandboxes/%s/fork" % qa, {})
check_error(r, 429, "quota_exceeded", "a fork past the app's max_boxes (a fork counts as a create)")
h.eq((images(), box_ids()), (imgs, boxes), "bad input made no image and no box")
tmp = os.path.join(srv.data, "images", "tmp")
h.eq(os.listdir(tmp) if os.path.isdir(tmp) else [], [], "nothing left in the image store's tmp")

events.close()

# ---- the CLI: agentbox fork -------------------------------------------------------------------

srv.stop()
if BOXES:
    res = h.run("--data", srv.data, "fork", "ib", "--id", "clif", data=False)
    h.eq((res.rc, res.out.strip()), (0, "clif"), "agentbox fork ib --id clif", res.describe())
    res = h.run("--data", srv.data, "exec", "clif", "--", "cat /workspace/w2; stat -c %u /data/app", data=False)
    h.eq(res.out.split(), ["w2", "1000"], "... the CLI's fork has the files and owners", res.describe())
else:
    res = h.run("--data", srv.data, "fork", "hb", "--id", "clif", data=False)
    h.eq((res.rc, res.out.strip()), (0, "clif"), "agentbox fork hb --id clif", res.describe())
res = h.run("--data", srv.data, "fork", "nosuch", data=False)
h.eq(res.rc, 125, "agentbox fork of an unknown box fails with 125", res.describe())
res = h.run("--data", srv.data, "rm", "clif", data=False)
h.eq(res.rc, 0, "agentbox rm of the CLI's fork", res.describe())
h.done()
