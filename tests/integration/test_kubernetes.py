#!/usr/bin/env python3
"""The kubernetes backend against the cluster's own failures, on the stand-in
cluster (tests/k8s): a pod that cannot be scheduled, an image that cannot be
pulled, a claim that does not bind (each: a clear error quoting the pod's
events, and no object left), a pod killed from outside (reads stopped, the
next exec starts it, files kept), the API server restarted while a create
waits on its watch, the agentbox server restarted (boxes adopted, files
kept), a delete that leaves no object, every object sent valid against the
Kubernetes OpenAPI schema, and the deploy kit (contrib/kubernetes) accepted
by kubectl apply --dry-run=client. A box of an image with a WorkingDir and a
User (made on the suite's Docker engine) runs its commands there and as that
user, as a box of an image does on the other backends."""
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse

os.environ["AGENTBOX_TEST_BACKEND"] = "kubernetes"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
from abserver import wait_for  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

h = abserver.ServerHarness(budget=400)
cl = h.cluster
if getattr(cl, "real", False):
    h.skip_all("the stand-in cluster's own checks (it kills containers, restarts its API server and "
               "reaches pod IPs from the test host); not run against AGENTBOX_TEST_KUBECONFIG")
base = json.loads(os.environ["AGENTBOX_KUBERNETES"])


def server(name, **over):
    """A server whose kubernetes settings are the harness's with over."""
    s = dict(base, **over)
    return h.start_server(name=name, env={"AGENTBOX_KUBERNETES": json.dumps(s)})


def objects(box):
    return h.k8s_objects(box)


srv = server("main", egress_proxy={"selector": {"app": "agentbox-egress"}, "port": 3128})

# ---- a box works, and delete leaves nothing --------------------------------

r = srv.post("/v1/sandboxes", {"id": "k-ok", "backend": "kubernetes"})
h.eq((r.status, r.get("status"), r.get("provider")), (201, "running", "kubernetes"),
     "a box made with backend kubernetes runs", r.describe())
objs = objects("k-ok")
h.eq(objs, ["networkpolicies/ab-k-ok", "persistentvolumeclaims/ab-k-ok", "pods/ab-k-ok",
            "secrets/ab-k-ok"],
     "its objects: pod, Secret, claim and (network none) a NetworkPolicy", repr(objs))
pol = cl.api.must("GET", "/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies/ab-k-ok"
                  % cl.namespace)
h.eq((pol["spec"].get("policyTypes"), pol["spec"].get("egress")), (["Egress"], []),
     "network none: the policy denies all egress", json.dumps(pol["spec"]))
pod = cl.api.must("GET", "/api/v1/namespaces/%s/pods/ab-k-ok" % cl.namespace)
h.eq(pod["spec"].get("automountServiceAccountToken"), False,
     "the pod gets no service account token")
vols = {v["name"]: v for v in pod["spec"]["volumes"]}
h.eq(vols.get("agentbox-secret", {}).get("secret", {}).get("secretName"), "ab-k-ok",
     "the pod mounts its own box's Secret only")
r = srv.post("/v1/sandboxes", {"id": "k-allow", "network": {"mode": "allowlist",
                                                          "allow": ["example.com"]}})
h.eq(r.status, 201, "a box with network allowlist", r.describe())
pol = cl.api.must("GET", "/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies/ab-k-allow"
                  % cl.namespace)
h.eq(pol["spec"].get("egress"),
     [{"to": [{"podSelector": {"matchLabels": {"app": "agentbox-egress"}}}],
       "ports": [{"protocol": "TCP", "port": 3128}]}],
     "network allowlist: egress only to the egress proxy's pods and port", json.dumps(pol["spec"]))
h.eq(pol["spec"].get("podSelector"), {"matchLabels": {"agentbox.dev/box": "k-allow"}},
     "... for this box's pod only")
polpath = "/apis/networking.k8s.io/v1/namespaces/%s/networkpolicies/ab-k-allow" % cl.namespace
uid0 = pol["metadata"]["uid"]
r = srv.put("/v1/sandboxes/k-allow/network", {"mode": "none"})
h.eq(r.status, 200, "PUT network none on the allowlist box", r.describe())
pol = cl.api.must("GET", polpath)
h.eq((pol["spec"].get("egress"), pol["metadata"]["uid"]), ([], uid0),
     "the box's policy is changed in place to deny all egress", json.dumps(pol))
r = srv.put("/v1/sandboxes/k-allow/network", {"mode": "full"})
if r.status == 200:
    st, _ = cl.api.request("GET", polpath)
    h.eq(st, 404, "network full: the policy is gone")
    r = srv.put("/v1/sandboxes/k-allow/network", {"mode": "none"})
    st, pol = cl.api.request("GET", polpath)
    h.eq((st, (pol or {}).get("spec", {}).get("egress") if st == 200 else None), (200, []),
         "back to none: a deny-all policy again", repr(pol))
else:
    h.skip("network full: the policy is gone", "this server refuses full network (%d)" % r.status)
r = srv.delete("/v1/sandboxes/k-allow")
h.ok(r.status in (200, 202, 204), "delete k-allow", r.describe())
r = srv.exec("k-ok", "echo kept > /workspace/k.txt; echo ok")
h.eq((r.status, r.get("stdout")), (200, "ok\n"), "exec in the pod", r.describe())

# ---- a pod killed from outside ----------------------------------------------

cl.kill_container("ab-k-ok", container="box")
h.ok(wait_for(lambda: srv.get("/v1/sandboxes/k-ok").get("status") == "stopped", timeout=30),
     "a pod whose box container was killed from outside reads stopped",
     lambda: srv.get("/v1/sandboxes/k-ok").describe())
r = srv.exec("k-ok", "cat /workspace/k.txt")
h.eq((r.status, r.get("stdout")), (200, "kept\n"), "the next exec starts a new pod, files kept",
     r.describe())
h.eq(srv.get("/v1/sandboxes/k-ok").get("status"), "running", "... and the box runs again")

# ---- pause is a stop on this backend ------------------------------------------
# (serve_pause@kubernetes checks the rest of what pause is here)

PROBE = "cat /workspace/k.txt; grep -qas '9876[5]' /proc/[0-9]*/cmdline && echo alive || echo gone"
r = srv.exec("k-ok", "(nohup sleep 98765 >/dev/null 2>&1 &); sleep 0.2; " + PROBE)
h.eq(r.get("stdout"), "kept\nalive\n", "control: a background process runs in the box", r.describe())
r = srv.post("/v1/sandboxes/k-ok/pause")
h.eq((r.status, r.get("status")), (200, "paused"), "POST /pause answers the box, paused", r.describe())
h.ok(wait_for(lambda: "pods/ab-k-ok" not in objects("k-ok"), 30), "pause deletes the pod, as a stop does",
     lambda: repr(objects("k-ok")))
h.ok("persistentvolumeclaims/ab-k-ok" in objects("k-ok"), "... and keeps the claim", repr(objects("k-ok")))
h.eq(srv.get("/v1/sandboxes/k-ok").get("status"), "paused", "the server shows the box paused")
r = srv.exec("k-ok", PROBE)
h.eq((r.status, r.get("stdout")), (200, "kept\ngone\n"),
     "an exec resumes it on a new pod: the files are kept, the processes are not (no freeze)", r.describe())
h.eq(srv.get("/v1/sandboxes/k-ok").get("status"), "running", "... and the box runs again")

# ---- the API server restarts while a create waits on its watch ----------------


# (the restart runs on the main thread: the stand-in's processes die with
# the thread that started them)
res = {}
t = threading.Thread(target=lambda: res.update(r=srv.post("/v1/sandboxes", {"id": "k-restart"},
                                                          timeout=120)))
t.start()
time.sleep(0.4)
cl.restart_apiserver()
t.join()
r = res["r"]
h.eq((r.status, r.get("status")), (201, "running"),
     "a create whose watch the API server's restart cut still ends running", r.describe())
r = srv.exec("k-restart", "echo alive")
h.eq(r.get("stdout"), "alive\n", "... and runs commands", r.describe())

# ---- an image's WorkingDir and User ------------------------------------------
# The server cannot read an image the cluster pulls: the pod's image probe (an init container of
# the box's image, started as the image says) tells them, as image_config does on the other backends.

sys.path.insert(0, os.path.join(ROOT, "tests", "k8s"))
import cluster as k8s_cluster  # noqa: E402
import dockerapi  # noqa: E402

dk = dockerapi.Docker(k8s_cluster.docker_host())
USER_IMG = "agentbox-test/k8s-user-image:%d" % os.getpid()
cid = dk.create("k8s-user-image-%d" % os.getpid(), {"Image": base["image"], "Cmd": ["mkdir", "-p", "/srv/app"]})
dk.start(cid)
dk.call("POST", "/containers/%s/wait" % cid, timeout=60)
repo, tag = USER_IMG.rsplit(":", 1)
dk.call("POST", "/commit?" + urllib.parse.urlencode(
    [("container", cid), ("repo", repo), ("tag", tag), ("changes", "WORKDIR /srv/app"),
     ("changes", "USER www-data")]))
dk.remove(cid)
r = srv.post("/v1/sandboxes", {"id": "k-img", "image": USER_IMG})
h.eq((r.status, r.get("status")), (201, "running"), "a box of an image with WORKDIR /srv/app and USER www-data",
     r.describe())
WHO = "pwd; id -un; touch /workspace/mine && stat -c %U /workspace/mine"
r = srv.exec("k-img", WHO)
h.eq((r.get("exit_code"), r.get("stdout")), (0, "/srv/app\nwww-data\nwww-data\n"),
     "its commands run in the image's WorkingDir as its User, who owns /workspace", r.describe())
r = srv.post("/v1/sandboxes/k-img/exec", {"command": "id -un; pwd", "user": "root", "cwd": "/tmp"})
h.eq(r.get("stdout"), "root\n/tmp\n", "an exec's own user and cwd win", r.describe())
r = srv.exec("k-ok", "pwd; id -un")
h.eq(r.get("stdout"), "/workspace\nroot\n", "control: a box of an image without them runs in /workspace as root",
     r.describe())


def init_containers(box):
    p = cl.api.must("GET", "/api/v1/namespaces/%s/pods/ab-%s" % (cl.namespace, box))
    return [c["name"] for c in p["spec"].get("initContainers", [])]


h.eq(init_containers("k-img"), ["agentbox-init", "agentbox-image"],
     "its first pod ran the image probe as an init container")
r = srv.post("/v1/sandboxes/k-img/stop")
h.eq(r.status, 200, "stop the image's box", r.describe())
r = srv.exec("k-img", "pwd; id -un")
h.eq(r.get("stdout"), "/srv/app\nwww-data\n", "... on its next pod too", r.describe())
h.eq(init_containers("k-img"), ["agentbox-init"], "... which runs no probe (the record keeps what it told)")

# ---- the agentbox server restarts: boxes adopted, files kept ---------------

srv.stop()
srv.start()
h.eq(srv.get("/v1/sandboxes/k-ok").get("status"), "running", "after a server restart the box is adopted")
r = srv.exec("k-ok", "cat /workspace/k.txt")
h.eq(r.get("stdout"), "kept\n", "... with its files", r.describe())
r = srv.exec("k-img", "pwd; id -un")
h.eq(r.get("stdout"), "/srv/app\nwww-data\n", "... and the image's box keeps its WorkingDir and User",
     r.describe())

# ---- stop keeps the claim, start makes a new pod ---------------------------

r = srv.post("/v1/sandboxes/k-ok/stop")
h.eq(r.status, 200, "stop", r.describe())
h.eq([o for o in objects("k-ok") if o.startswith("pods/")], [], "stop deletes the pod")
h.ok("persistentvolumeclaims/ab-k-ok" in objects("k-ok"), "... and keeps the claim")
r = srv.post("/v1/sandboxes/k-ok/start")
h.eq(r.status, 200, "start", r.describe())
h.eq(srv.exec("k-ok", "cat /workspace/k.txt").get("stdout"), "kept\n", "start: files kept")

# ---- delete leaves nothing ---------------------------------------------------

for b in ("k-ok", "k-restart", "k-img"):
    r = srv.delete("/v1/sandboxes/" + b)
    h.ok(r.status in (200, 202, 204), "delete %s" % b, r.describe())
h.ok(wait_for(lambda: objects("k-ok") == [] and objects("k-restart") == [] and objects("k-img") == [],
              timeout=60),
     "delete leaves no object of the boxes (listed by label)",
     lambda: repr(objects("k-ok") + objects("k-restart") + objects("k-img")))
dk.call("DELETE", "/images/" + urllib.parse.quote(USER_IMG, safe=""), params={"force": "1"}, ok=None)

# ---- failures: a clear error, nothing left ----------------------------------


def failing_create(srv2, box, want, what, body=None):
    t0 = time.monotonic()
    r = srv2.post("/v1/sandboxes", dict({"id": box}, **(body or {})), timeout=120)
    dt = time.monotonic() - t0
    h.ok(r.status >= 400, "%s: create fails (%.1fs)" % (what, dt), r.describe())
    msg = json.dumps(r.json) if r.json is not None else r.text
    h.ok(any(w in msg for w in want), "%s: the error says why (%s)" % (what, " or ".join(want)), msg)
    h.ok(wait_for(lambda: objects(box) == [], timeout=60), "%s: no object is left" % what,
         lambda: repr(objects(box)))


failing_create(srv, "k-noimage", ["ErrImage", "ImagePull", "ErrImageNeverPull"], "an image that cannot be pulled",
               {"image": "agentbox-test/no-such-image:1"})
srv.stop()

s2 = server("unsched", node_selector={"agentbox.dev/no-such-node": "true"}, ready_timeout="6s")
failing_create(s2, "k-unsched", ["FailedScheduling", "not ready within"], "a pod no node can take")
s2.stop()

s3 = server("nopvc", storage_class="no-such-class", ready_timeout="6s")
failing_create(s3, "k-nopvc", ["no-such-class", "Pending", "ProvisioningFailed"],
               "a claim that does not bind")
s3.stop()

# ---- a create whose process died ------------------------------------------------
# A create killed midway (the CLI's process gone) before its pod got Ready is
# half made at once: error, delete it; not "creating" for ten minutes. The
# box is made whole, then put back as a killed create leaves it: record state
# "creating", its creator a process that has ended, no pod.

r = h.run("create", "--id", "k-half")
h.eq(r.rc, 0, "k-half made through the CLI", r.describe())
h.track("k-half")
dead = subprocess.Popen(["true"])
dead.wait()
with open("/proc/sys/kernel/random/boot_id") as f:
    boot = f.read().strip()
sec = "/api/v1/namespaces/%s/secrets/ab-k-half" % cl.namespace
cl.api.must("PATCH", sec, {"metadata": {"annotations": {
    "agentbox.dev/state": "creating", "agentbox.dev/creator": "%s/%d/1" % (boot, dead.pid)}}},
    ctype="application/merge-patch+json")
cl.api.request("DELETE", "/api/v1/namespaces/%s/pods/ab-k-half" % cl.namespace, {"gracePeriodSeconds": 0})
wait_for(lambda: cl.api.request("GET", "/api/v1/namespaces/%s/pods/ab-k-half" % cl.namespace)[0] == 404, 30)
r = h.run("inspect", "k-half")
info = json.loads(r.out or "{}") if r.rc == 0 else {}
h.eq((info.get("status"), "a create that did not finish" in (info.get("error") or "")), ("error", True),
     "a create whose process died and left no pod reads as half made at once", r.describe())
r = h.run("rm", "k-half")
h.eq(r.rc, 0, "... and deletes", r.describe())
h.ok(wait_for(lambda: h.k8s_objects("k-half") == [], 30), "... leaving nothing in the cluster",
     repr(h.k8s_objects("k-half")))

# ---- what was sent, and the deploy kit ---------------------------------------

try:
    cl.validate_recorded()
    h.ok(True, "every object the backend sent is valid against the Kubernetes OpenAPI schema")
except Exception as e:  # SchemaError, or the validator could not run
    h.ok(False, "every object the backend sent is valid against the Kubernetes OpenAPI schema", str(e))

kubectl = shutil.which("kubectl")
if kubectl:
    r = subprocess.run([kubectl, "--kubeconfig", cl.kubeconfig, "apply", "--dry-run=client", "-f",
                        os.path.join(ROOT, "contrib", "kubernetes")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    h.eq(r.returncode, 0, "contrib/kubernetes passes kubectl apply --dry-run=client", r.stdout)
    h.ok("deployment.apps/agentbox created (dry run)" in r.stdout,
         "... the Deployment among them", r.stdout)
else:
    h.skip("contrib/kubernetes passes kubectl apply --dry-run=client", "kubectl is not installed")

h.done()
