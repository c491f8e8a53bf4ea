#!/usr/bin/env python3
"""Boxes on two backends under one server (issue 13): a server with the
native engine as its default and a Docker engine beside it (docker_host)
makes a box where "backend" says, records it (provider), lists both, runs
them with their own software (the Docker box from its image, the native
one on the host base), keeps the Docker box's files over stop/start,
finds both again after kill -9 of the server, and deletes each from its
own engine (the container goes). --backend docker makes Docker the
default; an unknown backend, or docker on a server without an engine, is
a 400 that creates nothing; a bad `backend:` in the config stops the
server at start with the key's name."""
import json
import os
import subprocess
import sys
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import debianroot  # noqa: E402
from abserver import wait_for  # noqa: E402

h = abserver.ServerHarness(budget=400)
HOST = os.environ.get("AGENTBOX_TEST_DOCKER_HOST", "")
if not HOST:
    h.skip_all("no AGENTBOX_TEST_DOCKER_HOST: scripts/dockerd.sh starts a Docker engine for the tests "
               "(scripts/test.sh exports it)")
import abtest  # noqa: E402

if not abtest.init_is_static():
    h.skip_all("agentbox-init is dynamically linked (sanitized build): it cannot be a container's PID 1")
try:
    IMAGE = debianroot.docker_image(HOST)
except (RuntimeError, OSError) as e:
    h.skip_all("no Debian image for the Docker engine: %s" % e)


def containers(box, data=None):
    """Boxes of the engine's containers (all states) labelled for box of data
    (default: the first server's data folder)."""
    f = {"label": ["agentbox.box=%s" % box, "agentbox.data_dir=%s" % os.path.realpath(data or h.data)]}
    st, out = debianroot._docker(HOST, "GET", "/containers/json?all=1&filters=" +
                                 urllib.parse.quote(json.dumps(f)), timeout=30)
    if st != 200:
        return None
    return sorted(c["Labels"].get("agentbox.box", "") for c in json.loads(out))


def sh(srv, box, cmd, **kw):
    r = srv.exec(box, cmd, http_timeout=120, **kw)
    return r, (r.json or {}).get("stdout", "") if r.status == 200 else ""


# ==== 1. native default, Docker beside it ===============================================

S = h.start_server(config={"docker_host": HOST, "docker_image": IMAGE, "idle_pause": 0, "idle_stop": 0})
r = S.post("/v1/sandboxes", {"id": "dk1", "backend": "docker"}, timeout=180)
h.eq(r.status, 201, "create with backend docker: 201", r.describe())
h.eq((r.json or {}).get("provider"), "docker", "... its record says provider docker", r.describe())
r = S.post("/v1/sandboxes", {"id": "nt1"}, timeout=60)
h.eq(r.status, 201, "create without backend: 201", r.describe())
h.eq((r.json or {}).get("provider"), "native", "... on the default, native", r.describe())

r, out = sh(S, "dk1", ". /etc/os-release; echo $ID; cat /proc/1/comm")
h.eq(r.status, 200, "exec in the Docker box", r.describe())
h.contains(out, "debian", "... runs the image's software (its /etc/os-release)", r.describe())
h.contains(out, "agentbox-init", "... under agentbox-init as PID 1", r.describe())
h.eq(containers("dk1"), ["dk1"], "the engine has one container labelled for the box")
h.eq(containers("nt1"), [], "... and none for the native box")

r = S.get("/v1/sandboxes")
prov = {b["id"]: b.get("provider") for b in (r.json or {}).get("sandboxes", [])}
h.eq(prov, {"dk1": "docker", "nt1": "native"}, "the list shows both, each with its provider", r.describe())

# files on the Docker box, over stop and start
r = S.put("/v1/sandboxes/dk1/files?path=/workspace/keep.txt", b"kept\n")
h.ok(r.status in (200, 201, 204), "write /workspace/keep.txt in the Docker box", r.describe())
r = S.post("/v1/sandboxes/dk1/stop", {}, timeout=120)
h.eq(r.status, 200, "stop the Docker box", r.describe())
h.eq(S.status_of("dk1"), "stopped", "... stopped")
r = S.post("/v1/sandboxes/dk1/start", {}, timeout=120)
h.eq(r.status, 200, "start it again", r.describe())
r, out = sh(S, "dk1", "cat /workspace/keep.txt /mnt/user-data/workspace/keep.txt")
h.eq(out, "kept\nkept\n", "its file is kept, at /workspace and /mnt/user-data/workspace", r.describe())

# ==== 2. bad input changes nothing ======================================================

before = sorted(prov)
r = S.post("/v1/sandboxes", {"id": "bad1", "backend": "podman"})
h.eq(r.status, 400, "backend podman: 400", r.describe())
h.contains(r.err_message or "", "docker", "... naming the backends this server has", r.describe())
r = S.post("/v1/sandboxes", {"id": "bad2", "backend": "docker", "volumes": [{"name": "v", "path": "/v"}]})
h.ok(r.status in (400, 404, 501), "a volume on a Docker box is refused", r.describe())
r = S.post("/v1/sandboxes", {"id": "bad3", "backend": "docker", "image": "agentbox-test/nosuch:1"},
           timeout=180)
h.ok(r.status >= 400, "an image the engine cannot get: an error", r.describe())
h.ok("nosuch" in (r.err_message or ""), "... naming the image", r.describe())
r = S.get("/v1/sandboxes")
h.eq(sorted(b["id"] for b in (r.json or {}).get("sandboxes", [])), before, "... and no box was recorded",
     r.describe())
h.eq(containers("bad3"), [], "... nor left in the engine")

# ==== 3. kill -9 of the server: both found again ========================================

S.kill9()
why = S.start()
h.ok(why is None, "the server comes back after kill -9", why)
r = S.get("/v1/sandboxes")
got = {b["id"]: (b.get("provider"), b.get("status")) for b in (r.json or {}).get("sandboxes", [])}
h.eq(got, {"dk1": ("docker", "running"), "nt1": ("native", "running")},
     "both boxes are known, running, each on its backend", r.describe())
r, out = sh(S, "dk1", "cat /workspace/keep.txt")
h.eq(out, "kept\n", "the Docker box answers after the restart", r.describe())
r, out = sh(S, "nt1", "echo native")
h.eq(out, "native\n", "so does the native one", r.describe())

r = S.delete("/v1/sandboxes/dk1", timeout=120)
h.ok(r.status in (200, 202, 204), "delete the Docker box", r.describe())
h.ok(wait_for(lambda: S.get("/v1/sandboxes/dk1").status == 404, timeout=60), "... it is gone")
h.ok(wait_for(lambda: containers("dk1") == [], timeout=30), "... and so is its container",
     lambda: repr(containers("dk1")))
h.ok(not os.path.exists(os.path.join(h.data, "docker", "dk1")), "... and its folder under DATA/docker")
r = S.delete("/v1/sandboxes/nt1", timeout=60)
h.ok(r.status in (200, 202, 204), "delete the native box", r.describe())
S.stop()

# ==== 4. Docker as the default; a server without an engine ==============================

d2 = h.new_data_dir("dockerdefault")
S2 = h.start_server(name="dockerdefault", data=d2, args=["--backend", "docker"],
                    config={"docker_host": HOST, "docker_image": IMAGE, "idle_pause": 0, "idle_stop": 0})
r = S2.post("/v1/sandboxes", {"id": "dk2"}, timeout=180)
h.eq((r.json or {}).get("provider"), "docker", "--backend docker: a box without backend is a Docker box",
     r.describe())
r = S2.post("/v1/sandboxes", {"id": "nt2", "backend": "native"}, timeout=60)
h.eq((r.json or {}).get("provider"), "native", "... and backend native still gives a native one", r.describe())
h.eq(containers("nt2", d2), [], "... with no container")
# named volumes on a server whose backend is several: the first's table, called
# with its own handle (the multi backend's handle once crashed it: SIGSEGV)
r = S2.post("/v1/volumes", {"name": "mvol", "size_mib": 16})
h.eq(r.status, 201, "POST /v1/volumes on a server of several backends", r.describe())
r = S2.get("/v1/volumes")
h.ok(r.status == 200 and [v.get("name") for v in r.get("volumes", [])] == ["mvol"], "... listed", r.describe())
h.eq(S2.delete("/v1/volumes/mvol").status, 200, "... and deleted")
for b in ("dk2", "nt2"):
    S2.delete("/v1/sandboxes/" + b, timeout=120)
h.ok(wait_for(lambda: containers("dk2", d2) == [], timeout=60), "deleted boxes leave no container")
S2.stop()

d3 = h.new_data_dir("nodocker")
env3 = {"AGENTBOX_BACKEND": "", "AGENTBOX_DOCKER_HOST": ""}
S3 = h.start_server(name="nodocker", data=d3, env=env3)
r = S3.post("/v1/sandboxes", {"id": "dk3", "backend": "docker"})
h.eq(r.status, 400, "a server without an engine: backend docker is a 400", r.describe())
h.eq(S3.get("/v1/sandboxes/dk3").status, 404, "... and no box")
S3.stop()

bad = os.path.join(h.root, "bad.yaml")
with open(bad, "w") as f:
    f.write("backend: podman\n")
p = subprocess.run([h.bin, "serve", "--data", h.new_data_dir("badcfg"), "--config", bad,
                    "--listen", "127.0.0.1:%d" % abserver.free_port()],
                   capture_output=True, text=True, timeout=60, env=dict(os.environ, **env3))
h.ne(p.returncode, 0, "backend: podman in the config: the server does not start")
h.contains(p.stderr, "backend", "... and says which key is wrong", p.stderr)

h.done()
