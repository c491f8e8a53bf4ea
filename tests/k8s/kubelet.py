#!/usr/bin/env python3
"""kubelet.py - the stand-in kubelet: runs the pods scheduled to its node on
a Docker engine, talking to the API server only through the API, like a real
kubelet (register the Node, list+watch its pods, write pod status through
the status subresource, post Events, delete the pod object with grace 0
once its containers are gone).

Each pod runs in host network mode with a loopback address of its own,
127.N.x.y (N from --ip-octet, x.y from a counter kept in the state dir),
reported as status.podIP: a process in the pod binds its listening sockets
to that address. Every container carries the labels io.kubernetes.pod.uid,
io.kubernetes.container.name and k8s-standin.cluster=CLUSTER; containers of
pods that no longer exist are removed at start and every few seconds.

Never pulls an image: one missing from the engine is ErrImagePull, then
ImagePullBackOff, as on a node that cannot reach the registry.

    DOCKER_HOST=unix:///run/agentbox-test-docker.sock python3 kubelet.py \\
        --kubeconfig STATE/kubeconfig --state-dir STATE/kubelet --cluster ID
"""

import argparse
import base64
import datetime
import json
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dockerapi  # noqa: E402
import kclient  # noqa: E402
from apiserver import parse_quantity  # noqa: E402
from kclient import ApiCallError  # noqa: E402

CLUSTER_LABEL = "k8s-standin.cluster"
# A test's way to make the kubelet evict a pod as under node pressure
# (cluster.Cluster.evict_pod): the annotation's value is the message.
EVICT_ANNOTATION = "k8s-standin.agentbox.dev/evict"
VAR_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_.\-]*)\)|\$\$")


def now_ts():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def expand(s, env):
    """$(VAR) from env, $$ -> $, unknown references left as they are."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return VAR_REF.sub(sub, s)


class PodFailure(Exception):
    """Setting the pod up failed in a way an Event reports (FailedMount...)."""

    def __init__(self, reason, message):
        super().__init__(message)
        self.reason, self.message = reason, message


class Kubelet:
    def __init__(self, args):
        self.args = args
        self.api = kclient.Client(args.kubeconfig)
        self.docker = dockerapi.Docker(args.docker_host)
        self.node = args.node_name
        self.lock = threading.Lock()
        self.workers = {}  # uid -> PodWorker
        os.makedirs(args.state_dir, exist_ok=True)
        self.ip_path = os.path.join(args.state_dir, "ips.json")
        self.ips = {"next": 1, "pods": {}}
        if os.path.exists(self.ip_path):
            with open(self.ip_path) as f:
                self.ips = json.load(f)
        self.stopping = False
        self.sweeping = False

    # -- node --
    def register_node(self):
        labels = {"kubernetes.io/hostname": self.node, "kubernetes.io/os": "linux",
                  "kubernetes.io/arch": "amd64"}
        labels.update(self.args.label)
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.node, "labels": labels},
                "spec": {"taints": self.args.taint} if self.args.taint else {}}
        st, out = self.api.request("POST", "/api/v1/nodes", node)
        if st == 409:
            # registered before: add our labels, leave taints as others set them
            self.api.must("PATCH", "/api/v1/nodes/" + self.node, {"metadata": {"labels": labels}},
                          ctype="application/merge-patch+json")
        elif st != 201:
            raise ApiCallError(st, out)
        t = now_ts()
        status = {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                  "message": "kubelet is posting ready status", "lastHeartbeatTime": t,
                                  "lastTransitionTime": t}],
                  "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                                {"type": "Hostname", "address": self.node}],
                  "capacity": {"cpu": str(os.cpu_count()), "memory": "16Gi", "pods": "110"},
                  "allocatable": {"cpu": str(os.cpu_count()), "memory": "16Gi", "pods": "110"},
                  "nodeInfo": {"kubeletVersion": "v1.32.0-standin", "containerRuntimeVersion": "docker://standin",
                               "operatingSystem": "linux", "architecture": "amd64", "osImage": "stand-in",
                               "kernelVersion": os.uname().release, "kubeProxyVersion": "",
                               "machineID": "", "systemUUID": "", "bootID": ""}}
        self.api.must("PATCH", "/api/v1/nodes/%s/status" % self.node, {"status": status},
                      ctype="application/merge-patch+json")

    # -- pod IPs --
    def pod_ip(self, uid):
        with self.lock:
            ip = self.ips["pods"].get(uid)
            if ip is None:
                n = self.ips["next"]
                while (n & 255) in (0, 255):
                    n += 1
                self.ips["next"] = n + 1
                ip = "127.%d.%d.%d" % (self.args.ip_octet, (n >> 8) & 255, n & 255)
                self.ips["pods"][uid] = ip
                self.save_ips()
            return ip

    def release_ip(self, uid):
        with self.lock:
            if self.ips["pods"].pop(uid, None) is not None:
                self.save_ips()

    def save_ips(self):
        with open(self.ip_path + ".tmp", "w") as f:
            json.dump(self.ips, f)
        os.replace(self.ip_path + ".tmp", self.ip_path)

    # -- pods --
    def sweep_orphans(self, live_uids):
        for c in self.docker.containers("%s=%s" % (CLUSTER_LABEL, self.args.cluster)):
            uid = c["Labels"].get("io.kubernetes.pod.uid")
            with self.lock:
                known = uid in self.workers
            if uid not in live_uids and not known:
                self.docker.remove(c["Id"])
        for uid in list(self.ips["pods"]):
            with self.lock:
                known = uid in self.workers
            if uid not in live_uids and not known:
                self.release_ip(uid)
                shutil.rmtree(os.path.join(self.args.state_dir, "pods", uid), ignore_errors=True)

    def sweep_loop(self):
        """Every 10 s: containers of this cluster that no pod worker owns
        (their pod went while this kubelet was away, or a worker died) go."""
        while True:
            time.sleep(10)
            try:
                self.sweep_orphans(set())
            except (OSError, dockerapi.DockerError) as e:
                print("kubelet: sweep: %s" % e, file=sys.stderr, flush=True)

    def on_pod(self, etype, pod):
        uid = pod["metadata"]["uid"]
        with self.lock:
            w = self.workers.get(uid)
            if w is None:
                if etype == "DELETED":
                    w = None
                else:
                    w = self.workers[uid] = PodWorker(self, pod)
                    threading.Thread(target=w.run, daemon=True).start()
                    return
        if w is not None:
            w.update(pod, etype == "DELETED")

    def run(self):
        while True:
            try:
                self.register_node()
                break
            except (OSError, ApiCallError) as e:
                print("kubelet: registering the node: %s" % e, file=sys.stderr, flush=True)
                time.sleep(0.5)
        path = "/api/v1/pods"
        sel = {"fieldSelector": "spec.nodeName=" + self.node}
        last_sweep = 0
        while not self.stopping:
            try:
                lst = self.api.must("GET", path, params=sel)
                live = set()
                for pod in lst["items"]:
                    live.add(pod["metadata"]["uid"])
                    self.on_pod("ADDED", pod)
                with self.lock:
                    gone = [w for uid, w in self.workers.items() if uid not in live]
                for w in gone:
                    w.update(w.pod, True)
                self.sweep_orphans(live)
                if not self.sweeping:
                    self.sweeping = True
                    threading.Thread(target=self.sweep_loop, daemon=True).start()
                rv = lst["metadata"]["resourceVersion"]
                while not self.stopping:
                    params = dict(sel, resourceVersion=rv, allowWatchBookmarks="true", timeoutSeconds="60")
                    expired = False
                    for ev in self.api.watch(path, params, timeout=90):
                        if ev["type"] == "ERROR":
                            expired = True
                            break
                        rv = ev["object"]["metadata"]["resourceVersion"]
                        if ev["type"] in ("ADDED", "MODIFIED", "DELETED"):
                            self.on_pod(ev["type"], ev["object"])
                    if expired:
                        break
                    if time.monotonic() - last_sweep > 10:
                        last_sweep = time.monotonic()
                        self.register_node()
            except (OSError, ApiCallError, ValueError) as e:
                print("kubelet: watch: %s; listing again" % e, file=sys.stderr, flush=True)
                time.sleep(0.3)


class PodWorker:
    """Runs one pod: its volumes, init containers, containers, probes and status."""

    def __init__(self, kubelet, pod):
        self.k = kubelet
        self.api, self.docker, self.args = kubelet.api, kubelet.docker, kubelet.args
        self.pod = pod
        self.deleted = False
        self.cond = threading.Condition()
        md = pod["metadata"]
        self.uid, self.ns, self.name = md["uid"], md["namespace"], md["name"]
        self.dir = os.path.join(self.args.state_dir, "pods", self.uid)
        self.ip = None
        self.cs = {}  # container name -> dict(id, attempt, restarts, state, last, ready, backoff_until, ...)
        self.init_done = 0
        self.failed = False
        self.sent_events = {}
        self.last_status = None
        self.volumes = None
        self.start_time = None
        self.frozen = False
        self.evicted = None

    def update(self, pod, deleted):
        with self.cond:
            self.pod = pod
            self.deleted = self.deleted or deleted
            self.cond.notify_all()

    # -- helpers --
    def event(self, etype, reason, message):
        key = (reason, message)
        n = self.sent_events.get(key, 0) + 1
        self.sent_events[key] = n
        if n > 1 and n % 10:
            return  # repeated events are counted by the real recorder; post the first and every 10th
        t = now_ts()
        md = self.pod["metadata"]
        body = {"apiVersion": "v1", "kind": "Event",
                "metadata": {"name": "%s.%x" % (self.name, time.time_ns()), "namespace": self.ns},
                "involvedObject": {"kind": "Pod", "namespace": self.ns, "name": self.name, "uid": self.uid,
                                   "apiVersion": "v1", "resourceVersion": md.get("resourceVersion", "")},
                "reason": reason, "message": message, "type": etype, "count": n,
                "source": {"component": "kubelet", "host": self.k.node},
                "firstTimestamp": t, "lastTimestamp": t, "reportingComponent": "kubelet",
                "reportingInstance": self.k.node}
        try:
            self.api.request("POST", "/api/v1/namespaces/%s/events" % self.ns, body)
        except OSError:
            pass

    def labels(self, cname):
        return {"io.kubernetes.pod.uid": self.uid, "io.kubernetes.pod.name": self.name,
                "io.kubernetes.pod.namespace": self.ns, "io.kubernetes.container.name": cname,
                CLUSTER_LABEL: self.args.cluster}

    # -- volumes --
    def setup_volumes(self):
        vols = {}
        os.makedirs(self.dir, exist_ok=True)
        for v in self.pod["spec"].get("volumes") or []:
            name = v["name"]
            local = os.path.join(self.dir, "volumes", name)
            if "emptyDir" in v:
                os.makedirs(local, exist_ok=True)
                os.chmod(local, 0o777)
                vols[name] = (local, False)
            elif "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"]["claimName"]
                st, pvc = self.api.request("GET", "/api/v1/namespaces/%s/persistentvolumeclaims/%s"
                                           % (self.ns, claim))
                if st != 200 or not pvc.get("spec", {}).get("volumeName"):
                    raise PodFailure("FailedMount", 'persistentvolumeclaim "%s" not found or not bound' % claim)
                st, pv = self.api.request("GET", "/api/v1/persistentvolumes/" + pvc["spec"]["volumeName"])
                path = (pv.get("spec", {}).get("hostPath") or {}).get("path") if st == 200 else None
                if not path:
                    raise PodFailure("FailedMount", "volume %s has no host path" % pvc["spec"]["volumeName"])
                vols[name] = (path, bool(v["persistentVolumeClaim"].get("readOnly")))
            elif "secret" in v or "configMap" in v:
                is_secret = "secret" in v
                src = v["secret"] if is_secret else v["configMap"]
                oname = src.get("secretName") if is_secret else src.get("name")
                kind = "secrets" if is_secret else "configmaps"
                st, obj = self.api.request("GET", "/api/v1/namespaces/%s/%s/%s" % (self.ns, kind, oname))
                if st != 200:
                    if src.get("optional"):
                        obj = {}
                    else:
                        raise PodFailure("FailedMount", 'MountVolume.SetUp failed for volume "%s" : %s "%s" '
                                         'not found' % (name, kind[:-1], oname))
                data = {}
                for k, val in (obj.get("data") or {}).items():
                    data[k] = base64.b64decode(val) if is_secret else val.encode()
                for k, val in (obj.get("binaryData") or {}).items():
                    data[k] = base64.b64decode(val)
                shutil.rmtree(local, ignore_errors=True)
                os.makedirs(local)
                os.chmod(local, 0o755)
                mode = src.get("defaultMode", 0o644)
                items = src.get("items")
                files = [(it["key"], it["path"], it.get("mode", mode)) for it in items] if items else \
                    [(k, k, mode) for k in data]
                for key, rel, fmode in files:
                    if key not in data:
                        raise PodFailure("FailedMount", 'MountVolume.SetUp failed for volume "%s" : '
                                         'couldn\'t find key %s in %s %s/%s' % (name, key, kind[:-1],
                                                                                  self.ns, oname))
                    if rel.startswith("/") or ".." in rel.split("/"):
                        raise PodFailure("FailedMount", "invalid path %r" % rel)
                    dst = os.path.join(local, rel)
                    os.makedirs(os.path.dirname(dst), exist_ok=True)
                    with open(dst, "wb") as f:
                        f.write(data[key])
                    os.chmod(dst, fmode)
                vols[name] = (local, True)
            elif "hostPath" in v:
                vols[name] = (v["hostPath"]["path"], False)
            else:
                raise PodFailure("FailedMount", "volume %s: a type the stand-in kubelet does not mount" % name)
        self.volumes = vols

    # -- env --
    def resolve_env(self, c):
        env = {}
        for ef in c.get("envFrom") or []:
            prefix = ef.get("prefix", "")
            for kind, key in (("secrets", "secretRef"), ("configmaps", "configMapRef")):
                if key not in ef:
                    continue
                st, obj = self.api.request("GET", "/api/v1/namespaces/%s/%s/%s" % (self.ns, kind,
                                                                                    ef[key]["name"]))
                if st != 200:
                    if ef[key].get("optional"):
                        continue
                    raise PodFailure("CreateContainerConfigError", '%s "%s" not found' % (kind[:-1],
                                                                                         ef[key]["name"]))
                for k, val in (obj.get("data") or {}).items():
                    env[prefix + k] = base64.b64decode(val).decode(errors="replace") if kind == "secrets" \
                        else val
        for e in c.get("env") or []:
            if "valueFrom" in e:
                vf = e["valueFrom"]
                if "fieldRef" in vf:
                    fp = vf["fieldRef"]["fieldPath"]
                    md, spec = self.pod["metadata"], self.pod["spec"]
                    vals = {"metadata.name": md["name"], "metadata.namespace": md["namespace"],
                            "metadata.uid": md["uid"], "status.podIP": self.ip, "status.podIPs": self.ip,
                            "status.hostIP": "127.0.0.1", "status.hostIPs": "127.0.0.1",
                            "spec.nodeName": spec.get("nodeName", ""),
                            "spec.serviceAccountName": spec.get("serviceAccountName", "")}
                    m = re.match(r"metadata\.(labels|annotations)\['(.+)'\]$", fp)
                    if m:
                        env[e["name"]] = (md.get(m.group(1)) or {}).get(m.group(2), "")
                    elif fp in vals:
                        env[e["name"]] = vals[fp]
                    else:
                        raise PodFailure("CreateContainerConfigError", "unsupported fieldPath %s" % fp)
                elif "secretKeyRef" in vf or "configMapKeyRef" in vf:
                    is_secret = "secretKeyRef" in vf
                    ref = vf["secretKeyRef" if is_secret else "configMapKeyRef"]
                    kind = "secrets" if is_secret else "configmaps"
                    st, obj = self.api.request("GET", "/api/v1/namespaces/%s/%s/%s" % (self.ns, kind, ref["name"]))
                    data = obj.get("data") or {} if st == 200 else {}
                    if ref["key"] not in data:
                        if ref.get("optional"):
                            continue
                        raise PodFailure("CreateContainerConfigError", "couldn't find key %s in %s %s/%s"
                                         % (ref["key"], kind[:-1], self.ns, ref["name"]))
                    v = data[ref["key"]]
                    env[e["name"]] = base64.b64decode(v).decode(errors="replace") if is_secret else v
                elif "resourceFieldRef" in vf:
                    rf = vf["resourceFieldRef"]
                    q = ((c.get("resources") or {}).get("limits") or {}).get(rf["resource"].split(".", 1)[1], "0")
                    env[e["name"]] = str(int(parse_quantity(q) or 0))
            else:
                env[e["name"]] = expand(e.get("value", ""), env)
        return env

    # -- containers --
    def container_config(self, c, attempt):
        env = self.resolve_env(c)
        cfg = {"Image": c["image"], "Env": ["%s=%s" % kv for kv in env.items()], "Labels": self.labels(c["name"]),
               "Hostname": self.name[:63]}
        if c.get("command"):
            cfg["Entrypoint"] = [expand(a, env) for a in c["command"]]
            cfg["Cmd"] = [expand(a, env) for a in c.get("args") or []]
        elif c.get("args"):
            cfg["Cmd"] = [expand(a, env) for a in c["args"]]
        if c.get("workingDir"):
            cfg["WorkingDir"] = c["workingDir"]
        psc = self.pod["spec"].get("securityContext") or {}
        sc = c.get("securityContext") or {}
        uid = sc.get("runAsUser", psc.get("runAsUser"))
        gid = sc.get("runAsGroup", psc.get("runAsGroup"))
        if uid is not None:
            cfg["User"] = str(uid) + (":%d" % gid if gid is not None else "")
        caps = sc.get("capabilities") or {}
        hc = {"NetworkMode": "host", "Binds": [], "Privileged": bool(sc.get("privileged")),
              "CapAdd": caps.get("add") or None, "CapDrop": caps.get("drop") or None,
              "ReadonlyRootfs": bool(sc.get("readOnlyRootFilesystem"))}
        if psc.get("supplementalGroups"):
            hc["GroupAdd"] = [str(g) for g in psc["supplementalGroups"]]
        if sc.get("allowPrivilegeEscalation") is False:
            hc["SecurityOpt"] = ["no-new-privileges"]
        lim = (c.get("resources") or {}).get("limits") or {}
        if "cpu" in lim:
            hc["NanoCpus"] = int(parse_quantity(lim["cpu"]) * 1e9)
        if "memory" in lim:
            hc["Memory"] = int(parse_quantity(lim["memory"]))
            hc["MemorySwap"] = hc["Memory"]
        for m in c.get("volumeMounts") or []:
            src, ro = self.volumes[m["name"]]
            if m.get("subPath"):
                src = os.path.join(src, m["subPath"])
                os.makedirs(src, exist_ok=True)
            hc["Binds"].append("%s:%s%s" % (src, m["mountPath"], ":ro" if (ro or m.get("readOnly")) else ""))
        rc = self.pod["spec"].get("runtimeClassName")
        if rc:
            st, obj = self.api.request("GET", "/apis/node.k8s.io/v1/runtimeclasses/" + rc)
            if st != 200:
                raise PodFailure("CreateContainerConfigError", 'RuntimeClass "%s" not found' % rc)
            if obj.get("handler") not in ("runc", ""):
                hc["Runtime"] = obj["handler"]  # an OCI runtime the engine knows by that name
        cfg["HostConfig"] = hc
        return cfg

    def start_container(self, c, st):
        """Create and start c; st is its record in self.cs. False if it cannot start yet."""
        if not self.docker.image_exists(c["image"]):
            if c.get("imagePullPolicy") == "Never":
                msg = 'Container image "%s" is not present with pull policy of Never' % c["image"]
                if st.get("state", {}).get("waiting", {}).get("reason") != "ErrImageNeverPull":
                    self.event("Warning", "ErrImageNeverPull", msg)
                    self.event("Warning", "Failed", "Error: ErrImageNeverPull")
                st["state"] = {"waiting": {"reason": "ErrImageNeverPull", "message": msg}}
                st["backoff_until"] = time.monotonic() + self.backoff(2)
                return False
            first = st.get("pull_failures", 0) == 0
            st["pull_failures"] = st.get("pull_failures", 0) + 1
            st["backoff_until"] = time.monotonic() + self.backoff(st["pull_failures"])
            msg = 'Failed to pull image "%s": the stand-in kubelet never pulls and the image is not ' \
                  'in the engine' % c["image"]
            if first:
                self.event("Normal", "Pulling", 'Pulling image "%s"' % c["image"])
                self.event("Warning", "Failed", msg)
                self.event("Warning", "Failed", "Error: ErrImagePull")
                st["state"] = {"waiting": {"reason": "ErrImagePull", "message": msg}}
            else:
                self.event("Normal", "BackOff", 'Back-off pulling image "%s"' % c["image"])
                self.event("Warning", "Failed", "Error: ImagePullBackOff")
                st["state"] = {"waiting": {"reason": "ImagePullBackOff",
                                           "message": 'Back-off pulling image "%s"' % c["image"]}}
            return False
        if st.get("pull_failures") or not st.get("pulled"):
            self.event("Normal", "Pulled", 'Container image "%s" already present on machine' % c["image"])
            st["pulled"] = True
            st.pop("pull_failures", None)
        try:
            cfg = self.container_config(c, st["attempt"])
        except PodFailure as e:
            st["state"] = {"waiting": {"reason": e.reason, "message": e.message}}
            self.event("Warning", "Failed", "Error: " + e.message)
            st["backoff_until"] = time.monotonic() + self.backoff(1)
            return False
        name = "k8s_%s_%s_%s_%s_%d" % (c["name"], self.name, self.ns, self.uid, st["attempt"])
        try:
            cid = self.docker.create(name, cfg)
            self.event("Normal", "Created", "Created container %s" % c["name"])
            st["id"] = cid
            self.docker.start(cid)
        except dockerapi.DockerError as e:
            st["state"] = {"waiting": {"reason": "CreateContainerError" if "id" not in st else
                                       "RunContainerError", "message": e.message}}
            self.event("Warning", "Failed", "Error: %s" % e.message)
            st["backoff_until"] = time.monotonic() + self.backoff(1)
            return False
        self.event("Normal", "Started", "Started container %s" % c["name"])
        info = self.docker.inspect(cid)
        st["image_id"] = "docker://" + (info or {}).get("Image", "")
        st["state"] = {"running": {"startedAt": (info or {}).get("State", {}).get("StartedAt", now_ts())[:19] + "Z"}}
        st["started"] = time.monotonic()
        st["ready"] = False
        st["probe_ok"] = None
        return True

    def backoff(self, n):
        return min(self.args.backoff * (2 ** max(n - 1, 0)), self.args.backoff * 16)

    def poll_container(self, c, st, cname=None):
        """Refresh st from Docker; True if the container has just ended."""
        cname = c["name"] if c else cname
        info = self.docker.inspect(st["id"]) if st.get("id") else None
        if info is None:
            if "running" in st.get("state", {}):
                st["state"] = {"terminated": {"exitCode": 137, "reason": "Error", "message":
                                              "the container disappeared from the engine",
                                              "startedAt": st["state"]["running"]["startedAt"],
                                              "finishedAt": now_ts()}}
                st.pop("id", None)
                return True
            return False
        s = info["State"]
        if s.get("Running"):
            return False
        if "terminated" in st.get("state", {}) and st.get("ended_id") == st["id"]:
            return False
        code = s.get("ExitCode", 0)
        reason = "OOMKilled" if s.get("OOMKilled") else ("Completed" if code == 0 else "Error")
        st["state"] = {"terminated": {"exitCode": code, "reason": reason, "containerID": "docker://" + st["id"],
                                      "startedAt": s.get("StartedAt", "")[:19] + "Z",
                                      "finishedAt": s.get("FinishedAt", "")[:19] + "Z"}}
        st["ended_id"] = st["id"]
        st["ready"] = False
        self.save_log(cname, st["id"])
        return True

    def save_log(self, cname, cid):
        if not self.args.log_dir:
            return
        try:
            data = self.docker.logs(cid)
            os.makedirs(self.args.log_dir, exist_ok=True)
            with open(os.path.join(self.args.log_dir, "%s_%s.log" % (self.uid, cname)), "wb") as f:
                f.write(data)
        except (OSError, dockerapi.DockerError):
            pass

    def should_restart(self, st, policy):
        t = st.get("state", {}).get("terminated")
        if t is None:
            return False
        return policy == "Always" or (policy == "OnFailure" and t["exitCode"] != 0)

    def restart_later(self, c, st):
        """Schedule c's restart after a back-off (CrashLoopBackOff meanwhile)."""
        st["restarts"] += 1
        st["last"] = st["state"]
        old = st.pop("id", None)
        if old:
            self.docker.remove(old)
        st["attempt"] += 1
        if st["restarts"] > 1:
            delay = self.backoff(st["restarts"] - 1)
            st["backoff_until"] = time.monotonic() + delay
            st["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off %ds restarting failed "
                                       "container=%s pod=%s_%s(%s)" % (delay, c["name"], self.name, self.ns,
                                                                      self.uid)}}
            self.event("Warning", "BackOff", "Back-off restarting failed container %s in pod %s_%s(%s)"
                       % (c["name"], self.name, self.ns, self.uid))

    def probe(self, c, st):
        p = c.get("readinessProbe")
        if not p:
            st["ready"] = "running" in st.get("state", {})
            return
        if "running" not in st.get("state", {}):
            st["ready"] = False
            return
        nowm = time.monotonic()
        if nowm - st["started"] < p.get("initialDelaySeconds", 0):
            return
        if nowm - st.get("probed", 0) < p.get("periodSeconds", 10):
            return
        st["probed"] = nowm
        ok = False
        timeout = p.get("timeoutSeconds", 1)
        try:
            if "tcpSocket" in p:
                port = self.port_number(c, p["tcpSocket"]["port"])
                with socket.create_connection((p["tcpSocket"].get("host") or self.ip, port), timeout=timeout):
                    ok = True
            elif "exec" in p:
                ok = self.docker.exec(st["id"], p["exec"]["command"], timeout=timeout + 5) == 0
            elif "httpGet" in p:
                import http.client
                hg = p["httpGet"]
                conn = http.client.HTTPConnection(hg.get("host") or self.ip, self.port_number(c, hg["port"]),
                                                  timeout=timeout)
                conn.request("GET", hg.get("path", "/"))
                ok = 200 <= conn.getresponse().status < 400
                conn.close()
        except (OSError, dockerapi.DockerError, ValueError):
            ok = False
        if ok:
            st["fails"] = 0
            st["ready"] = True
        else:
            st["fails"] = st.get("fails", 0) + 1
            if st["fails"] >= p.get("failureThreshold", 3) or not st.get("ready"):
                if st.get("ready") or st.get("fails") == 1:
                    self.event("Warning", "Unhealthy", "Readiness probe failed")
                st["ready"] = False

    def port_number(self, c, port):
        if isinstance(port, int) or str(port).isdigit():
            return int(port)
        for p in c.get("ports") or []:
            if p.get("name") == port:
                return p["containerPort"]
        raise ValueError("no port named %s" % port)

    # -- the pod --
    def adopt(self):
        """After a kubelet restart: restart counts and last states from the
        status this kubelet wrote before, and the pod's running containers
        taken over (others removed)."""
        for cst in (self.pod.get("status") or {}).get("containerStatuses") or []:
            st = self.cs.get(cst.get("name"))
            if st is not None:
                st["restarts"] = cst.get("restartCount", 0)
                st["attempt"] = st["restarts"] + 1
                if cst.get("lastState"):
                    st["last"] = cst["lastState"]
        for cont in self.docker.containers("io.kubernetes.pod.uid=" + self.uid):
            cname = cont["Labels"].get("io.kubernetes.container.name")
            st = self.cs.get(cname)
            if st is None or cont["State"] != "running":
                self.docker.remove(cont["Id"])
                continue
            info = self.docker.inspect(cont["Id"]) or {}
            st["id"] = cont["Id"]
            st["state"] = {"running": {"startedAt": info.get("State", {}).get("StartedAt", now_ts())[:19] + "Z"}}
            st["started"] = time.monotonic()
            st["pulled"] = True

    def evict(self, message):
        """Node-pressure eviction: kill the containers at once, the pod Failed
        with reason Evicted (the object stays until someone deletes it)."""
        self.event("Warning", "Evicted", message)
        for name, st in self.cs.items():
            if st.get("id"):
                self.event("Normal", "Killing", "Stopping container %s" % name)
                self.docker.stop(st["id"], 0)
                self.poll_container(None, st, name)
                self.docker.remove(st.pop("id"))
        self.terminal = "Failed"
        self.evicted = message

    def run(self):
        try:
            self.main()
        except Exception:
            traceback.print_exc()
        finally:
            with self.k.lock:
                self.k.workers.pop(self.uid, None)

    def main(self):
        spec = self.pod["spec"]
        inits = spec.get("initContainers") or []
        conts = spec.get("containers") or []
        for c in inits + conts:
            self.cs[c["name"]] = {"attempt": 0, "restarts": 0, "state": {"waiting": {"reason": "PodInitializing"
                                                                                     if c in conts and inits
                                                                                     else "ContainerCreating"}},
                                  "ready": False}
        self.ip = self.k.pod_ip(self.uid)
        st0 = self.pod.get("status") or {}
        self.start_time = st0.get("startTime") or now_ts()
        if st0.get("phase") in ("Succeeded", "Failed"):
            # ended before this kubelet started: its status stays as written
            self.failed = st0["phase"] == "Failed"
            self.init_done = len(inits)
            self.terminal = st0["phase"]
            self.frozen = True
        else:
            self.terminal = None
            self.adopt()
            if any(s.get("id") for s in self.cs.values()):
                self.init_done = len(inits)
        while True:
            with self.cond:
                pod, deleted = self.pod, self.deleted
            if deleted or pod["metadata"].get("deletionTimestamp"):
                return self.teardown(pod, deleted)
            evict = (pod["metadata"].get("annotations") or {}).get(EVICT_ANNOTATION)
            if evict and self.terminal is None:
                self.evict(evict)
            pause = self.args.sync_period
            if self.terminal is None:
                try:
                    if self.volumes is None:
                        self.setup_volumes()
                    self.step(pod, inits, conts)
                except PodFailure as e:
                    self.event("Warning", e.reason, e.message)
                    pause = self.backoff(2)
                except (OSError, dockerapi.DockerError, ApiCallError) as e:
                    print("kubelet: pod %s/%s: %s" % (self.ns, self.name, e), file=sys.stderr, flush=True)
                    pause = 0.5
            self.write_status(pod, inits, conts)
            with self.cond:
                if not self.deleted and not self.pod["metadata"].get("deletionTimestamp"):
                    self.cond.wait(pause)

    def step(self, pod, inits, conts):
        policy = pod["spec"].get("restartPolicy", "Always")
        nowm = time.monotonic()
        # init containers, one at a time
        while self.init_done < len(inits):
            c = inits[self.init_done]
            st = self.cs[c["name"]]
            if not st.get("id"):
                if nowm < st.get("backoff_until", 0):
                    return
                if not self.start_container(c, st):
                    return
            if not self.poll_container(c, st):
                return
            if st["state"]["terminated"]["exitCode"] == 0:
                self.docker.remove(st.pop("id"))
                self.init_done += 1
                continue
            if policy == "Never":
                self.failed = True
                self.terminal = "Failed"
                return
            self.restart_later(c, st)
            return
        for c in conts:
            st = self.cs[c["name"]]
            if st.get("id"):
                if self.poll_container(c, st) and self.should_restart(st, policy):
                    self.restart_later(c, st)
            elif "terminated" not in st["state"] or self.should_restart(st, policy):
                if nowm >= st.get("backoff_until", 0):
                    self.start_container(c, st)
            self.probe(c, st)
        states = [self.cs[c["name"]]["state"] for c in conts]
        if all("terminated" in s for s in states) and not any(
                self.should_restart(self.cs[c["name"]], policy) for c in conts):
            self.terminal = "Succeeded" if all(s["terminated"]["exitCode"] == 0 for s in states) else "Failed"
            for c in conts:
                st = self.cs[c["name"]]
                if st.get("id"):
                    self.docker.remove(st.pop("id"))

    def container_status(self, c, init):
        st = self.cs[c["name"]]
        out = {"name": c["name"], "image": c["image"], "imageID": st.get("image_id", ""),
               "restartCount": st["restarts"],
               "ready": bool(st.get("ready")) if not init else "terminated" in st["state"] and
               st["state"]["terminated"]["exitCode"] == 0,
               "started": "running" in st["state"], "state": st["state"]}
        if st.get("id"):
            out["containerID"] = "docker://" + st["id"]
        elif "terminated" in st["state"] and st["state"]["terminated"].get("containerID"):
            out["containerID"] = st["state"]["terminated"]["containerID"]
        if st.get("last"):
            out["lastState"] = st["last"]
        else:
            out["lastState"] = {}
        return out

    def build_status(self, pod, inits, conts):
        old = pod.get("status") or {}
        cstat = [self.container_status(c, False) for c in conts]
        istat = [self.container_status(c, True) for c in inits]
        initialized = self.init_done >= len(inits)
        if self.terminal:
            phase = self.terminal
        elif not initialized:
            phase = "Pending"
        elif any("running" in s["state"] for s in cstat) or any(
                self.cs[c["name"]]["restarts"] for c in conts):
            phase = "Running"
        else:
            phase = "Pending"
        ready = initialized and all(s["ready"] for s in cstat) and phase == "Running"
        t = now_ts()

        def cond(ctype, ok, reason=None):
            prev = next((c for c in old.get("conditions") or [] if c["type"] == ctype), None)
            status = "True" if ok else "False"
            c = {"type": ctype, "status": status, "lastProbeTime": None,
                 "lastTransitionTime": prev["lastTransitionTime"] if prev and prev["status"] == status else t}
            if reason and not ok:
                c["reason"] = reason
            return c
        conds = [cond("PodReadyToStartContainers", True), cond("Initialized", initialized, "ContainersNotInitialized"),
                 cond("Ready", ready, "PodCompleted" if self.terminal else "ContainersNotReady"),
                 cond("ContainersReady", ready, "PodCompleted" if self.terminal else "ContainersNotReady"),
                 cond("PodScheduled", True)]
        st = {"phase": phase, "conditions": conds, "hostIP": "127.0.0.1", "hostIPs": [{"ip": "127.0.0.1"}],
              "podIP": self.ip, "podIPs": [{"ip": self.ip}], "startTime": self.start_time,
              "containerStatuses": cstat, "qosClass": old.get("qosClass", "BestEffort")}
        if inits:
            st["initContainerStatuses"] = istat
        if self.evicted:
            st.update({"reason": "Evicted", "message": self.evicted})
            conds.append(cond("DisruptionTarget", True))
            conds[-1].update({"reason": "TerminationByKubelet", "message": self.evicted})
        return st

    def write_status(self, pod, inits, conts):
        if self.frozen:
            return
        st = self.build_status(pod, inits, conts)
        cmp = json.dumps(st, sort_keys=True)
        if cmp == self.last_status:
            return
        body = {"status": st}
        try:
            code, out = self.api.request("PATCH", kclient.pod_path(self.ns, self.name, "status"), body,
                                         ctype="application/merge-patch+json")
        except OSError:
            return  # the API server is away; the next pass writes it again
        if code == 200:
            self.last_status = cmp

    def teardown(self, pod, deleted):
        grace = pod["metadata"].get("deletionGracePeriodSeconds")
        if grace is None:
            grace = pod["spec"].get("terminationGracePeriodSeconds", 30)
        threads = []
        for name, st in self.cs.items():
            if st.get("id"):
                if "running" in st["state"]:
                    self.event("Normal", "Killing", "Stopping container %s" % name)
                cid = st["id"]
                t = threading.Thread(target=self.docker.stop, args=(cid, grace), daemon=True)
                t.start()
                threads.append((t, cid, name))
        for t, cid, name in threads:
            t.join()
            self.save_log(name, cid)
            self.docker.remove(cid)
        for cont in self.docker.containers("io.kubernetes.pod.uid=" + self.uid):
            self.docker.remove(cont["Id"])
        shutil.rmtree(self.dir, ignore_errors=True)
        self.k.release_ip(self.uid)
        if not deleted:
            body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                    "preconditions": {"uid": self.uid}}
            for _ in range(50):
                try:
                    code, _ = self.api.request("DELETE", kclient.pod_path(self.ns, self.name), body)
                    if code in (200, 404, 409):
                        break
                except OSError:
                    pass
                time.sleep(0.3)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kubeconfig", required=True)
    ap.add_argument("--state-dir", required=True, help="pod dirs (emptyDir, secret volumes) and pod IPs")
    ap.add_argument("--docker-host", default=os.environ.get("DOCKER_HOST", ""),
                    help="unix:///path of the Docker engine (default: $DOCKER_HOST)")
    ap.add_argument("--cluster", required=True, help="label value marking this stand-in's containers")
    ap.add_argument("--node-name", default="standin-node")
    ap.add_argument("--label", action="append", default=[], help="KEY=VALUE node label (repeatable)")
    ap.add_argument("--taint", action="append", default=[], help="KEY[=VALUE]:EFFECT node taint (repeatable)")
    ap.add_argument("--ip-octet", type=int, default=100, help="pod IPs are 127.N.x.y")
    ap.add_argument("--log-dir", default="", help="where container logs go for the API server's pods/log")
    ap.add_argument("--backoff", type=float, default=1.0, help="first restart/pull back-off, seconds")
    ap.add_argument("--sync-period", type=float, default=0.5, help="seconds between a pod's syncs")
    args = ap.parse_args()
    if not args.docker_host:
        ap.error("no Docker engine: set --docker-host or DOCKER_HOST")
    args.label = dict(x.split("=", 1) for x in args.label)
    taints = []
    for t in args.taint:
        kv, _, effect = t.rpartition(":")
        k, _, v = kv.partition("=")
        taints.append({"key": k, "value": v, "effect": effect} if v else {"key": k, "effect": effect})
    args.taint = taints
    if not 1 <= args.ip_octet <= 254:
        ap.error("--ip-octet must be 1..254")
    k = Kubelet(args)
    signal.signal(signal.SIGTERM, lambda s, f: os._exit(0))

    def remove_all(signum, frame):
        # the harness that started us is gone: take the cluster's containers along
        try:
            for c in k.docker.containers("%s=%s" % (CLUSTER_LABEL, args.cluster)):
                k.docker.remove(c["Id"])
        finally:
            os._exit(0)
    signal.signal(signal.SIGUSR1, remove_all)
    print("READY kubelet %s" % args.node_name, flush=True)
    k.run()


if __name__ == "__main__":
    main()
