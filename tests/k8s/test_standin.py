#!/usr/bin/env python3
"""test_standin - the stand-in Kubernetes cluster (tests/k8s) checked by real
clients that nobody here wrote: Debian's kubectl and python3-kubernetes.

One cluster for the whole file (API server + kubelet on the private Docker
engine of scripts/dockerd.sh, AGENTBOX_TEST_DOCKER_HOST). Prints TAP; skips
with the reason when Docker, kubectl or python3-kubernetes is missing.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import ssl
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cluster  # noqa: E402
import kclient  # noqa: E402

IMAGE = "agentbox-test/busybox:latest"


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def ok(self, cond, name, diag=None):
        self.n += 1
        print("%sok %d - %s" % ("" if cond else "not ", self.n, name), flush=True)
        if not cond:
            self.failed += 1
            if diag is not None:
                for line in str(diag).splitlines()[:40]:
                    print("#   " + line, flush=True)
        return cond

    def eq(self, got, want, name):
        return self.ok(got == want, name, "got %r, want %r" % (got, want))

    def done(self):
        print("1..%d" % self.n, flush=True)
        sys.exit(1 if self.failed else 0)


def skip_all(reason):
    print("1..0 # SKIP " + reason, flush=True)
    sys.exit(0)


t = Tap()


def kubectl(c, *args, kubeconfig=None, stdin=None, check=False):
    r = subprocess.run(["kubectl", "--kubeconfig", kubeconfig or c.kubeconfig, "--request-timeout=30s", *args],
                       input=stdin.encode() if stdin else None, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=90)
    out, err = r.stdout.decode(), r.stderr.decode()
    if check and r.returncode != 0:
        raise RuntimeError("kubectl %s: %s" % (" ".join(args), err))
    return r.returncode, out, err


def kubectl_minor():
    r = subprocess.run(["kubectl", "version", "--client", "-o", "json"], stdout=subprocess.PIPE,
                       stderr=subprocess.DEVNULL, timeout=30)
    return int(json.loads(r.stdout)["clientVersion"]["minor"].rstrip("+"))


def pod(name, cmd, labels=None, **spec_extra):
    c = {"name": "main", "image": IMAGE, "command": ["sh", "-c", cmd]}
    c.update(spec_extra.pop("container", {}))
    spec = {"containers": [c], "restartPolicy": "Never", "terminationGracePeriodSeconds": 1}
    spec.update(spec_extra)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def wait_pod(c, name, pred, timeout=30, ns="default"):
    def check():
        st, p = c.api.request("GET", kclient.pod_path(ns, name))
        return p if st == 200 and pred(p) else None
    return c.wait(check, timeout, "pod %s" % name)


def events_for(c, name, ns="default"):
    lst = c.api.must("GET", "/api/v1/namespaces/%s/events" % ns,
                     params={"fieldSelector": "involvedObject.name=" + name})
    return [(e["reason"], e["message"]) for e in lst["items"]]


def test_kubectl_basics(c):
    rc, out, err = kubectl(c, "version", "-o", "json")
    t.ok(rc == 0 and json.loads(out)["serverVersion"]["major"] == "1", "kubectl version reads /version", err)
    rc, out, err = kubectl(c, "api-resources")
    t.ok(rc == 0 and "networkpolicies" in out and "persistentvolumeclaims" in out and "deployments" in out,
         "kubectl api-resources lists the served resources from discovery", err)
    rc, out, err = kubectl(c, "create", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1", "labels": {"app": "a", "tier": "x"}},
         "data": {"k": "v"}}))
    t.ok(rc == 0 and "configmap/cm1 created" in out, "kubectl create -f makes a ConfigMap", err)
    kubectl(c, "create", "-f", "-", check=True, stdin=json.dumps(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm2"}, "data": {"k": "v"}}))
    kubectl(c, "label", "configmap", "cm2", "app=b", check=True)
    rc, out, err = kubectl(c, "get", "configmaps", "-l", "app in (a,b)", "-o", "name")
    t.eq(sorted(out.split()), ["configmap/cm1", "configmap/cm2"], "kubectl get -l 'app in (a,b)'")
    rc, out, err = kubectl(c, "get", "configmaps", "-l", "app!=a,app", "-o", "name")
    t.eq(out.split(), ["configmap/cm2"], "kubectl get -l 'app!=a,app'")
    rc, out, err = kubectl(c, "get", "configmaps", "-l", "!tier", "-o", "name")
    t.ok("configmap/cm2" in out and "configmap/cm1" not in out, "kubectl get -l '!tier'", out + err)
    rc, out, err = kubectl(c, "get", "configmap", "nope")
    t.ok(rc != 0 and 'Error from server (NotFound): configmaps "nope" not found' in err,
         "kubectl shows a 404 as NotFound", err)
    rc, out, err = kubectl(c, "create", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1"}}))
    t.ok(rc != 0 and 'Error from server (AlreadyExists)' in err and 'configmaps "cm1" already exists' in err,
         "kubectl shows a 409 as AlreadyExists", err)
    rc, out, err = kubectl(c, "create", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "Bad_Name"}}))
    t.ok(rc != 0 and "is invalid" in err and "RFC 1123" in err, "kubectl shows a 422 for a bad name", err)
    rc, out, err = kubectl(c, "create", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "empty"}, "spec": {"containers": []}}))
    t.ok(rc != 0 and "spec.containers: Required value" in err, "a pod without containers is 422 Invalid", err)
    rc, out, err = kubectl(c, "create", "-f", "-", stdin=json.dumps(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "typo-strict"},
         "spec": {"containers": [{"name": "c", "image": IMAGE, "imag": "x"}]}}))
    if kubectl_minor() >= 27:  # kubectl asks for fieldValidation=Strict by default
        t.ok(rc != 0 and 'strict decoding error: unknown field "spec.containers[0].imag"' in err,
             "kubectl (fieldValidation=Strict): an unknown field is refused", err)
    else:  # older kubectl asks for nothing: Warn
        got = c.api.must("GET", kclient.pod_path("default", "typo-strict"))
        t.ok(rc == 0 and 'Warning: unknown field "spec.containers[0].imag"' in err and
             "imag" not in got["spec"]["containers"][0], "kubectl (before 1.27, no fieldValidation): the "
             "unknown field dropped, kubectl prints the Warning", (err, got["spec"]))
        c.api.must("DELETE", kclient.pod_path("default", "typo-strict"))
    conn = c.api.conn()
    conn.request("POST", "/api/v1/namespaces/default/configmaps", headers=c.api.headers("application/json"),
                 body=json.dumps({"metadata": {"name": "typo-warn"}, "dat": {"a": "b"}}).encode())
    r = conn.getresponse()
    made = json.loads(r.read())
    warning = r.getheader("Warning", "")
    conn.close()
    t.ok(r.status == 201 and "dat" not in made and 'unknown field \\"dat\\"' in warning,
         "no fieldValidation (Warn): the unknown field is dropped with a Warning header", (r.status, made, warning))
    st, body = c.api.request("POST", kclient.pod_path("default"), {"metadata": {"name": "typo-type"}, "spec": {
        "containers": [{"name": "c", "image": IMAGE, "ports": [{"containerPort": "eighty"}]}]}})
    t.ok(st == 400 and body["reason"] == "BadRequest" and "cannot be handled as a Pod" in body["message"],
         "a value of the wrong type: 400 BadRequest", body)
    rc, out, err = kubectl(c, "get", "configmaps", "-o", "name", kubeconfig=c.kubeconfig_cert)
    t.ok(rc == 0 and "configmap/cm1" in out, "kubectl with a client certificate (kubeconfig-cert)", err)
    ctx = ssl.create_default_context(cafile=c.ca)
    try:
        urllib.request.urlopen(c.server + "/api/v1/namespaces/default/configmaps", context=ctx, timeout=10)
        code, body = 200, {}
    except urllib.error.HTTPError as e:
        code, body = e.code, json.loads(e.read())
    t.ok(code == 401 and body.get("kind") == "Status" and body.get("reason") == "Unauthorized",
         "no token and no certificate: 401 Status", (code, body))
    conn = c.api.conn()
    hdr = c.api.headers("application/json")
    conn.request("POST", "/api/v1/namespaces/default/nosuchthings", body=b'{"a": 1}', headers=hdr)
    r1 = conn.getresponse()
    r1.read()
    conn.request("GET", "/api/v1/namespaces/default/configmaps/cm1", headers=hdr)
    r2 = conn.getresponse()
    t.ok(r1.status == 404 and r2.status == 200 and json.loads(r2.read())["metadata"]["name"] == "cm1",
         "keep-alive: a request answered with an error before its body was used leaves the connection usable")
    conn.close()
    seen = subprocess.Popen(["kubectl", "--kubeconfig", c.kubeconfig, "get", "configmaps", "--watch-only",
                             "--request-timeout=4s", "-o", "name"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(1.5)
    kubectl(c, "label", "configmap", "cm1", "watched=yes", check=True)
    out, err = seen.communicate(timeout=20)
    t.ok(b"configmap/cm1" in out, "kubectl get --watch-only sees a change", (out, err))
    rc, out, err = kubectl(c, "delete", "configmap", "cm1", "cm2", "typo-warn")
    t.ok(rc == 0 and 'configmap "cm1" deleted' in out, "kubectl delete", err)


def test_python_client(c):
    from kubernetes import client, config, watch
    from kubernetes.client.rest import ApiException
    api = client.CoreV1Api(config.new_client_from_config(config_file=c.kubeconfig))

    def status_of(fn, *a, **kw):
        try:
            fn(*a, **kw)
            return 200, None
        except ApiException as e:
            return e.status, json.loads(e.body)
    sec = client.V1Secret(metadata=client.V1ObjectMeta(name="s1", labels={"box": "1"}), string_data={"a": "b"})
    made = api.create_namespaced_secret("default", sec)
    t.ok(made.data == {"a": "Yg=="} and made.metadata.uid and int(made.metadata.resource_version) > 0,
         "python: create a Secret (stringData folded into data, uid and resourceVersion set)")
    code, body = status_of(api.create_namespaced_secret, "default", sec)
    t.ok(code == 409 and body["reason"] == "AlreadyExists", "python: ApiException 409 AlreadyExists", body)
    code, body = status_of(api.read_namespaced_secret, "nope", "default")
    t.ok(code == 404 and body["reason"] == "NotFound" and body["details"]["name"] == "nope",
         "python: ApiException 404 NotFound with details", body)
    bad = client.V1Secret(metadata=client.V1ObjectMeta(name="s2", labels={"bad key!": "x"}))
    code, body = status_of(api.create_namespaced_secret, "default", bad)
    t.ok(code == 422 and body["reason"] == "Invalid" and body["details"]["causes"][0]["field"] == "metadata.labels",
         "python: ApiException 422 Invalid with causes for a bad label", body)
    cur = api.read_namespaced_secret("s1", "default")
    stale = cur.metadata.resource_version
    cur.metadata.labels["v"] = "2"
    api.replace_namespaced_secret("s1", "default", cur)
    cur.metadata.resource_version = stale
    code, body = status_of(api.replace_namespaced_secret, "s1", "default", cur)
    t.ok(code == 409 and body["reason"] == "Conflict", "python: PUT with a stale resourceVersion is 409 Conflict",
         body)
    api.patch_namespaced_secret("s1", "default", {"metadata": {"labels": {"v": "3"}}})
    t.eq(api.read_namespaced_secret("s1", "default").metadata.labels, {"box": "1", "v": "3"},
         "python: strategic merge patch of labels")
    lst = api.list_namespaced_secret("default", label_selector="box=1")
    t.eq([s.metadata.name for s in lst.items], ["s1"], "python: list with a label selector")
    # limit/continue
    for i in range(5):
        api.create_namespaced_config_map("default", client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="page-%d" % i, labels={"page": "y"})))
    names, token = [], None
    while True:
        page = api.list_namespaced_config_map("default", label_selector="page=y", limit=2, _continue=token)
        names += [m.metadata.name for m in page.items]
        token = page.metadata._continue
        if not token:
            break
    t.eq(names, ["page-%d" % i for i in range(5)], "python: list in pages with limit/continue")
    # watch: events after a resourceVersion, then 410 after compaction and a re-list
    rv = api.list_namespaced_config_map("default").metadata.resource_version
    got = []

    def watcher():
        w = watch.Watch()
        for ev in w.stream(api.list_namespaced_config_map, "default", resource_version=rv,
                           label_selector="page=y", timeout_seconds=10):
            got.append((ev["type"], ev["object"].metadata.name))
            if len(got) == 3:
                w.stop()
    th = threading.Thread(target=watcher)
    th.start()
    time.sleep(0.5)
    api.patch_namespaced_config_map("page-0", "default", {"data": {"x": "1"}})
    api.delete_namespaced_config_map("page-1", "default")
    api.patch_namespaced_config_map("page-2", "default", {"metadata": {"labels": {"page": "n"}}})
    th.join(15)
    t.eq(got, [("MODIFIED", "page-0"), ("DELETED", "page-1"), ("DELETED", "page-2")],
         "python: watch from a resourceVersion (a label change out of the selector reads as DELETED)")
    c.compact()
    code, body = None, None
    try:
        for ev in watch.Watch().stream(api.list_namespaced_config_map, "default", resource_version=rv,
                                       timeout_seconds=5):
            pass
    except ApiException as e:
        code = e.status
        body = e
    t.ok(code == 410, "python: a watch from a compacted resourceVersion raises 410 Gone", body)
    relist = api.list_namespaced_config_map("default", label_selector="page=y")
    seen = []
    w = watch.Watch()
    for ev in w.stream(api.list_namespaced_config_map, "default", label_selector="page=y",
                       resource_version=relist.metadata.resource_version, timeout_seconds=5):
        seen.append((ev["type"], ev["object"].metadata.name))
        w.stop()
    t.ok(seen == [] or all(s[0] != "ERROR" for s in seen), "python: after 410, re-list and watch again", seen)
    api.delete_collection_namespaced_config_map("default", label_selector="page")


def test_raw_watch_410(c):
    rv = c.api.must("GET", "/api/v1/namespaces/default/secrets")["metadata"]["resourceVersion"]
    c.api.must("POST", "/api/v1/namespaces/default/secrets", {"metadata": {"name": "w1"}})
    c.compact()
    evs = list(c.api.watch("/api/v1/namespaces/default/secrets", {"resourceVersion": rv, "timeoutSeconds": "3"}))
    t.ok(len(evs) == 1 and evs[0]["type"] == "ERROR" and evs[0]["object"]["code"] == 410 and
         evs[0]["object"]["reason"] == "Expired", "a watch from before the compaction: ERROR event, 410 Expired",
         evs)
    rv2 = c.api.must("GET", "/api/v1/namespaces/default/secrets")["metadata"]["resourceVersion"]
    evs = []

    def w():
        for ev in c.api.watch("/api/v1/namespaces/default/secrets",
                              {"resourceVersion": rv2, "timeoutSeconds": "3", "allowWatchBookmarks": "true"}):
            evs.append(ev)
    th = threading.Thread(target=w)
    th.start()
    time.sleep(0.3)
    c.api.must("DELETE", "/api/v1/namespaces/default/secrets/w1")
    th.join(10)
    types = [e["type"] for e in evs]
    t.ok(types[:1] == ["DELETED"] and "BOOKMARK" in types, "watch: DELETED, then BOOKMARKs, until timeoutSeconds",
         types)


def test_pod_ready(c):
    p = pod("web", "echo hello; exec httpd -f -p $(POD_IP):8080", labels={"app": "web"},
            container={"env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                               {"name": "GREETING", "value": "hi from $(POD_IP)"}],
                       "readinessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1}})
    rc, out, err = kubectl(c, "apply", "-f", "-", stdin=json.dumps(p))
    t.ok(rc == 0, "kubectl apply a pod", err)
    rc, out, err = kubectl(c, "wait", "--for=condition=Ready", "pod/web", "--timeout=40s")
    t.ok(rc == 0, "kubectl wait --for=condition=Ready: the kubelet runs the pod to Ready", err)
    got = c.api.must("GET", kclient.pod_path("default", "web"))
    ip = got["status"].get("podIP", "")
    t.ok(ip.startswith("127.%d." % c.ip_octet) and got["status"]["phase"] == "Running",
         "status.podIP is the pod's own loopback address, phase Running", got["status"])
    try:
        body = urllib.request.urlopen("http://%s:8080/" % ip, timeout=5).status
    except urllib.error.HTTPError as e:
        body = e.code
    except OSError as e:
        body = e
    t.ok(body in (200, 404), "the pod's server answers on its pod IP", body)
    rc, out, err = kubectl(c, "logs", "web")
    t.ok(rc == 0 and "hello" in out, "kubectl logs", err)
    follow = subprocess.Popen(["kubectl", "--kubeconfig", c.kubeconfig, "logs", "-f", "web"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = follow.stdout.readline()
    t.eq(first, b"hello\n", "kubectl logs -f streams the output")
    conds = {x["type"]: x["status"] for x in got["status"]["conditions"]}
    t.ok(conds.get("Ready") == "True" and conds.get("PodScheduled") == "True" and
         conds.get("Initialized") == "True", "conditions Ready/PodScheduled/Initialized", conds)
    reasons = [r for r, _ in events_for(c, "web")]
    t.ok(all(x in reasons for x in ("Scheduled", "Pulled", "Created", "Started")),
         "events Scheduled, Pulled, Created, Started", reasons)
    # killed from outside, restartPolicy Never: Failed with the exit code
    c.kill_container("web")
    got = wait_pod(c, "web", lambda p: p["status"]["phase"] == "Failed")
    try:
        follow.wait(10)
    except subprocess.TimeoutExpired:
        follow.kill()
    t.ok(follow.returncode == 0, "and ends when the container does", follow.returncode)
    term = got["status"]["containerStatuses"][0]["state"].get("terminated", {})
    t.ok(term.get("exitCode") == 137 and term.get("reason") == "Error",
         "a container killed from outside: terminated 137, pod Failed (restartPolicy Never)", got["status"])
    rc, out, err = kubectl(c, "delete", "pod", "web")
    t.ok(rc == 0 and not c.leftovers(), "delete: the pod goes and nothing is left on the engine",
         (err, c.leftovers()))


def test_security_and_limits(c):
    sc = {"capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False}
    c.api.must("POST", kclient.pod_path("default"), pod(
        "locked", "grep CapEff /proc/self/status; touch /x 2>/dev/null || echo read-only; exec sleep 100",
        container={"securityContext": sc, "resources": {"limits": {"cpu": "250m", "memory": "64Mi"}}}))
    got = wait_pod(c, "locked", lambda p: p["status"]["phase"] == "Running")
    c.wait(lambda: "read-only" in kubectl(c, "logs", "locked")[1], 10, "the pod's output")
    out = kubectl(c, "logs", "locked")[1]
    t.ok("CapEff:\t0000000000000000" in out and "read-only" in out,
         "securityContext: capabilities dropped, read-only root filesystem", out)
    info = c.docker.inspect(c.pod_containers(got["metadata"]["uid"])[0]["Id"])
    hc = info["HostConfig"]
    t.ok(hc["NanoCpus"] == 250000000 and hc["Memory"] == 64 * 2 ** 20 and hc["NetworkMode"] == "host",
         "limits: cpu 250m -> NanoCpus, memory 64Mi -> Memory; host network", hc)
    t.ok(got["status"]["qosClass"] == "Guaranteed" and
         got["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "250m", "memory": "64Mi"},
         "requests default to the limits; qosClass Guaranteed", got)
    rc, out, err = kubectl(c, "get", "pods", "locked", "-o", "wide")
    t.ok(rc == 0 and "1/1" in out and "Running" in out and got["status"]["podIP"] in out and
         "standin-node" in out, "kubectl get pods -o wide shows READY, STATUS, IP and NODE", out + err)
    rc, out, err = kubectl(c, "delete", "pod", "locked")
    t.ok("Killing" in [r for r, _ in events_for(c, "locked")], "deletion: a Killing event")
    st, body = c.api.request("POST", kclient.pod_path("default"), pod("gv", "true", runtimeClassName="gvisor"))
    t.ok(st == 403 and 'RuntimeClass "gvisor" not found' in body["message"],
         "a pod naming a RuntimeClass that does not exist: 403 Forbidden", body)
    c.api.must("POST", "/apis/node.k8s.io/v1/runtimeclasses", {"metadata": {"name": "plain"}, "handler": "runc"})
    c.api.must("POST", kclient.pod_path("default"), pod("rc", "exec sleep 100", runtimeClassName="plain"))
    wait_pod(c, "rc", lambda p: p["status"]["phase"] == "Running")
    t.ok(True, "a pod of an existing RuntimeClass (handler runc) runs")
    c.api.must("DELETE", kclient.pod_path("default", "rc"), params={"gracePeriodSeconds": "0"})


def test_failures(c):
    c.api.must("POST", kclient.pod_path("default"), pod("picky", "sleep 1", nodeSelector={"disk": "ssd"}))
    got = wait_pod(c, "picky", lambda p: any(x["type"] == "PodScheduled" and x.get("reason") == "Unschedulable"
                                             for x in p["status"].get("conditions") or []))
    t.ok(not got["spec"].get("nodeName") and got["status"]["phase"] == "Pending",
         "a nodeSelector no node matches: Pending, PodScheduled=False Unschedulable", got["status"])
    t.ok("FailedScheduling" in [r for r, _ in events_for(c, "picky")], "event FailedScheduling")
    rc, out, err = kubectl(c, "get", "events", "--field-selector", "involvedObject.name=picky,type=Warning",
                           "-o", "jsonpath={.items[*].reason}")
    t.eq(out.split(), ["FailedScheduling"], "kubectl get events --field-selector involvedObject.name=,type=")
    rc, out, err = kubectl(c, "get", "pods", "--field-selector", "status.phase=Pending", "-o", "name")
    t.ok("pod/picky" in out.split(), "kubectl get pods --field-selector status.phase=Pending", out + err)
    rc, out, err = kubectl(c, "taint", "nodes", "standin-node", "dedicated=boxes:NoSchedule")
    t.ok(rc == 0, "kubectl taint a node", err)
    c.api.must("POST", kclient.pod_path("default"), pod("untolerated", "sleep 1"))
    tol = [{"key": "dedicated", "operator": "Equal", "value": "boxes", "effect": "NoSchedule"}]
    c.api.must("POST", kclient.pod_path("default"), pod("tolerated", "exec sleep 100", tolerations=tol))
    got = wait_pod(c, "untolerated", lambda p: any(x.get("reason") == "Unschedulable"
                                                   for x in p["status"].get("conditions") or []))
    t.ok("untolerated taint {dedicated: boxes}" in got["status"]["conditions"][0]["message"],
         "a pod without the toleration: Unschedulable, the taint named", got["status"])
    got = wait_pod(c, "tolerated", lambda p: p["status"]["phase"] == "Running")
    t.ok(got["spec"]["nodeName"] == "standin-node", "a pod with the toleration runs")
    kubectl(c, "taint", "nodes", "standin-node", "dedicated-", check=True)
    wait_pod(c, "untolerated", lambda p: p["spec"].get("nodeName"))
    t.ok(True, "once the taint is gone the pending pod is scheduled")
    for name in ("untolerated", "tolerated"):
        c.api.must("DELETE", kclient.pod_path("default", name), params={"gracePeriodSeconds": "0"})
    c.api.must("POST", kclient.pod_path("default"), pod("noimage", "true", container={"image": "no/such:1"}))
    got = wait_pod(c, "noimage", lambda p: (p["status"].get("containerStatuses") or [{}])[0].get(
        "state", {}).get("waiting", {}).get("reason") in ("ErrImagePull", "ImagePullBackOff"))
    t.ok(True, "an image missing from the engine: waiting ErrImagePull/ImagePullBackOff")
    wait_pod(c, "noimage", lambda p: p["status"]["containerStatuses"][0]["state"].get("waiting", {}).get(
        "reason") == "ImagePullBackOff")
    t.ok(True, "then ImagePullBackOff")
    c.api.must("POST", kclient.pod_path("default"), pod("nomount", "true", volumes=[
        {"name": "s", "secret": {"secretName": "no-such-secret"}}], container={
        "volumeMounts": [{"name": "s", "mountPath": "/s"}]}))
    c.wait(lambda: "FailedMount" in [r for r, _ in events_for(c, "nomount")], 20, "FailedMount")
    got = wait_pod(c, "nomount", lambda p: p["status"].get("containerStatuses"))
    t.ok(got["status"]["phase"] == "Pending" and got["status"]["containerStatuses"][0]["state"]["waiting"][
        "reason"] == "ContainerCreating", "a secret volume whose Secret is missing: FailedMount, ContainerCreating",
        got["status"])
    c.api.must("DELETE", kclient.pod_path("default", "nomount"))
    c.api.must("POST", kclient.pod_path("default"), pod("never", "true", container={
        "image": "no/such:1", "imagePullPolicy": "Never"}))
    wait_pod(c, "never", lambda p: (p["status"].get("containerStatuses") or [{}])[0].get(
        "state", {}).get("waiting", {}).get("reason") == "ErrImageNeverPull")
    t.ok(True, "imagePullPolicy Never and no image: ErrImageNeverPull")
    c.api.must("DELETE", kclient.pod_path("default", "never"))
    c.api.must("POST", "/api/v1/namespaces/default/persistentvolumeclaims", {
        "metadata": {"name": "nobind"}, "spec": {"storageClassName": "fast", "accessModes": ["ReadWriteOnce"],
                                                 "resources": {"requests": {"storage": "1Gi"}}}})
    c.wait(lambda: "ProvisioningFailed" in [r for r, _ in events_for(c, "nobind")], 10, "ProvisioningFailed")
    got = c.api.must("GET", "/api/v1/namespaces/default/persistentvolumeclaims/nobind")
    t.eq(got["status"]["phase"], "Pending", "a PVC of an unknown storage class stays Pending (ProvisioningFailed)")
    time.sleep(1.5)
    counts = [e["count"] for e in c.api.must("GET", "/api/v1/namespaces/default/events", params={
        "fieldSelector": "involvedObject.name=nobind,reason=ProvisioningFailed"})["items"]]
    t.ok(counts and max(counts) <= 2, "the controller's repeated event is rate-limited (it once spun)", counts)
    oom = pod("oom", "head -c 200000000 /dev/zero | tail > /dev/null",
              container={"resources": {"limits": {"memory": "16Mi", "cpu": "500m"}}})
    c.api.must("POST", kclient.pod_path("default"), oom)
    got = wait_pod(c, "oom", lambda p: p["status"]["phase"] in ("Failed", "Succeeded"))
    term = got["status"]["containerStatuses"][0]["state"].get("terminated", {})
    t.ok(term.get("reason") == "OOMKilled" and got["status"]["phase"] == "Failed",
         "a container over its memory limit: terminated OOMKilled", got["status"])
    for name in ("picky", "noimage", "oom"):
        c.api.must("DELETE", kclient.pod_path("default", name))
    c.api.must("DELETE", "/api/v1/namespaces/default/persistentvolumeclaims/nobind")


def test_gc_and_restart(c):
    owner = c.api.must("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "owner"}})
    c.api.must("POST", "/api/v1/namespaces/default/secrets", {"metadata": {"name": "dep", "ownerReferences": [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner["metadata"]["uid"]}]}})
    rc, out, err = kubectl(c, "delete", "configmap", "owner")
    c.wait(lambda: c.api.request("GET", "/api/v1/namespaces/default/secrets/dep")[0] == 404, 10,
           "the dependent to go")
    t.ok(True, "ownerReferences: the dependent is garbage-collected after its owner")
    keep = c.api.must("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "keep"}})
    rv = int(keep["metadata"]["resourceVersion"])
    c.restart_apiserver()
    got = c.api.must("GET", "/api/v1/namespaces/default/configmaps/keep")
    t.ok(got["metadata"]["uid"] == keep["metadata"]["uid"], "an API server restart keeps the objects")
    nxt = c.api.must("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "after"}})
    t.ok(int(nxt["metadata"]["resourceVersion"]) > rv, "and the resourceVersion counter")
    rc, out, err = kubectl(c, "get", "configmap", "keep", "-o", "name")
    t.eq(out.strip(), "configmap/keep", "kubectl reads it after the restart")


def test_pod_features(c):
    """Init container, emptyDir, PVC, secret volume items/modes, env and
    envFrom, downward API, $(VAR), workingDir, runAsUser, an exec probe."""
    api = c.api
    api.must("POST", "/api/v1/namespaces/default/secrets", {"metadata": {"name": "cfg"}, "stringData": {
        "a": "secret-a", "b": "secret-b"}})
    api.must("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "envs"},
                                                               "data": {"X": "from-cm"}})
    api.must("POST", "/api/v1/namespaces/default/persistentvolumeclaims", {
        "metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
                                               "resources": {"requests": {"storage": "1Gi"}}}})
    pvc = c.wait(lambda: (lambda p: p if p["status"].get("phase") == "Bound" else None)(
        api.must("GET", "/api/v1/namespaces/default/persistentvolumeclaims/data")), 10, "the PVC to bind")
    t.ok(pvc["spec"]["storageClassName"] == "standard" and pvc["spec"]["volumeName"].startswith("pvc-") and
         "kubernetes.io/pvc-protection" in pvc["metadata"]["finalizers"],
         "a PVC of the default class binds (volumeName, pvc-protection finalizer)", pvc)
    main = "cat /work/init.txt /secrets/renamed; echo; stat -c %a /secrets/renamed; " \
           "echo X=$X S=$FROM_SECRET G=$GREETING; pwd; id -u; exec sleep 100"
    spec = {
        "initContainers": [{"name": "init", "image": IMAGE, "command": ["sh", "-c", "echo from-init > "
                                                                         "/work/init.txt; echo kept > /data/p.txt"],
                            "volumeMounts": [{"name": "work", "mountPath": "/work"},
                                             {"name": "data", "mountPath": "/data"}]}],
        "containers": [{"name": "main", "image": IMAGE, "command": ["sh", "-c"], "args": [main],
                        "workingDir": "/work",
                        "env": [{"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                                {"name": "GREETING", "value": "hi-$(NAME)"},
                                {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "cfg", "key": "b"}}}],
                        "envFrom": [{"configMapRef": {"name": "envs"}}],
                        "securityContext": {"runAsUser": 1234},
                        "volumeMounts": [{"name": "work", "mountPath": "/work"},
                                         {"name": "sec", "mountPath": "/secrets"}],
                        "readinessProbe": {"exec": {"command": ["test", "-f", "/work/init.txt"]},
                                           "periodSeconds": 1}}],
        "volumes": [{"name": "work", "emptyDir": {}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "sec", "secret": {"secretName": "cfg", "defaultMode": 0o400,
                                               "items": [{"key": "a", "path": "renamed", "mode": 0o444}]}}],
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 1}
    api.must("POST", kclient.pod_path("default"), {"metadata": {"name": "feat"}, "spec": spec})
    rc, out, err = kubectl(c, "wait", "--for=condition=Ready", "pod/feat", "--timeout=40s")
    t.ok(rc == 0, "a pod with an init container, volumes and an exec readiness probe gets Ready", err)
    got = api.must("GET", kclient.pod_path("default", "feat"))
    init = (got["status"].get("initContainerStatuses") or [{}])[0]
    t.ok(init.get("state", {}).get("terminated", {}).get("reason") == "Completed",
         "the init container ran to Completed first", got["status"])
    rc, out, err = kubectl(c, "logs", "feat")
    lines = out.split("\n")
    t.ok(lines[:3] == ["from-init", "secret-a", "444"], "emptyDir shared with the init container; secret item "
         "file with its mode", out)
    t.ok("X=from-cm S=secret-b G=hi-feat" in out, "envFrom configMap, secretKeyRef, $(VAR) of a fieldRef", out)
    t.ok("/work\n1234" in out, "workingDir and runAsUser", out)
    pv = api.must("GET", "/api/v1/persistentvolumes/" + pvc["spec"]["volumeName"])
    path = pv["spec"]["hostPath"]["path"]
    with open(os.path.join(path, "p.txt")) as f:
        t.eq(f.read(), "kept\n", "the PVC is the PV's host dir")
    api.must("DELETE", "/api/v1/namespaces/default/persistentvolumeclaims/data")
    time.sleep(1)
    st, got = api.request("GET", "/api/v1/namespaces/default/persistentvolumeclaims/data")
    t.ok(st == 200 and got["metadata"].get("deletionTimestamp"),
         "a PVC in use stays Terminating (pvc-protection)", got)
    kubectl(c, "delete", "pod", "feat", "--wait=true", check=True)
    c.wait(lambda: api.request("GET", "/api/v1/namespaces/default/persistentvolumeclaims/data")[0] == 404, 15,
           "the PVC to go")
    c.wait(lambda: not os.path.exists(path), 10, "the volume to be deleted")
    t.ok(True, "once the pod is gone, the PVC goes, and its volume (reclaim policy Delete)")


def test_restart_policy(c):
    c.api.must("POST", kclient.pod_path("default"), pod("crash", "echo run; exit 3", restartPolicy="OnFailure"))
    got = wait_pod(c, "crash", lambda p: (p["status"].get("containerStatuses") or [{}])[0].get(
        "restartCount", 0) >= 2, timeout=40)
    cs = got["status"]["containerStatuses"][0]
    t.ok(got["status"]["phase"] == "Running" and cs["lastState"].get("terminated", {}).get("exitCode") == 3,
         "restartPolicy OnFailure: restarted, lastState terminated with exit code 3", got["status"])
    wait_pod(c, "crash", lambda p: p["status"]["containerStatuses"][0]["state"].get("waiting", {}).get(
        "reason") == "CrashLoopBackOff", timeout=20)
    t.ok("BackOff" in [r for r, _ in events_for(c, "crash")], "CrashLoopBackOff and a BackOff event")
    c.api.must("DELETE", kclient.pod_path("default", "crash"), params={"gracePeriodSeconds": "0"})
    c.api.must("POST", kclient.pod_path("default"), pod("ok", "exit 0", restartPolicy="OnFailure"))
    got = wait_pod(c, "ok", lambda p: p["status"]["phase"] == "Succeeded")
    t.eq(got["status"]["containerStatuses"][0]["state"]["terminated"]["reason"], "Completed",
         "restartPolicy OnFailure, exit 0: Succeeded, Completed")
    c.api.must("DELETE", kclient.pod_path("default", "ok"))


def test_patches_and_names(c):
    made = c.api.must("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"generateName": "gen-"}})
    name = made["metadata"]["name"]
    t.ok(name.startswith("gen-") and len(name) == 9, "generateName: a random suffix", name)
    rc, out, err = kubectl(c, "patch", "configmap", name, "--type=json",
                           "-p", '[{"op":"add","path":"/data","value":{"a":"1"}}]')
    rc2, out2, err2 = kubectl(c, "patch", "configmap", name, "--type=merge", "-p", '{"data":{"b":"2","a":null}}')
    got = c.api.must("GET", "/api/v1/namespaces/default/configmaps/" + name)
    t.ok(rc == 0 and rc2 == 0 and got["data"] == {"b": "2"}, "kubectl patch --type=json and --type=merge",
         (err, err2, got))
    kubectl(c, "patch", "configmap", name, "-p", '{"metadata":{"finalizers":["test/a"]}}', check=True)
    kubectl(c, "patch", "configmap", name, "-p", '{"metadata":{"finalizers":["test/b"]}}', check=True)
    fins = c.api.must("GET", "/api/v1/namespaces/default/configmaps/" + name)["metadata"].get("finalizers")
    kubectl(c, "patch", "configmap", name, "-p",
            '{"metadata":{"$deleteFromPrimitiveList/finalizers":["test/a","test/b"]}}', check=True)
    after = c.api.must("GET", "/api/v1/namespaces/default/configmaps/" + name)["metadata"].get("finalizers")
    t.ok(fins == ["test/a", "test/b"] and not after,
         "strategic merge patch: finalizers merge, $deleteFromPrimitiveList removes", (fins, after))
    st, body = c.api.request("POST", "/api/v1/namespaces/default/configmaps", b"{not json")
    t.ok(st == 400 and body["reason"] == "BadRequest", "bad JSON: 400 BadRequest", body)
    st, body = c.api.request("POST", "/api/v1/namespaces/default/configmaps",
                             {"kind": "Pod", "metadata": {"name": "k"}})
    t.ok(st == 400 and body["kind"] == "Status", "a kind that is not the URL's: 400", body)
    st, body = c.api.request("POST", "/api/v1/namespaces/nowhere/configmaps", {"metadata": {"name": "k"}})
    t.ok(st == 404 and 'namespaces "nowhere" not found' in body["message"], "a missing namespace: 404", body)
    c.api.must("POST", "/api/v1/namespaces", {"metadata": {"name": "scratch"}})
    c.api.must("POST", "/api/v1/namespaces/scratch/configmaps", {"metadata": {"name": "in"}})
    rc, out, err = kubectl(c, "delete", "namespace", "scratch", "--timeout=20s")
    t.ok(rc == 0 and c.api.request("GET", "/api/v1/namespaces/scratch/configmaps/in")[0] == 404,
         "deleting a namespace deletes what is in it, then the namespace", err)
    owner = c.api.must("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "fg"}})
    c.api.must("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "fg-dep", "finalizers": [
        "test/hold"], "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "fg",
                                           "uid": owner["metadata"]["uid"], "blockOwnerDeletion": True}]}})
    c.api.must("DELETE", "/api/v1/namespaces/default/configmaps/fg", {"propagationPolicy": "Foreground"})
    time.sleep(1)
    st, got = c.api.request("GET", "/api/v1/namespaces/default/configmaps/fg")
    t.ok(st == 200 and "foregroundDeletion" in got["metadata"].get("finalizers", []),
         "Foreground deletion: the owner waits for its dependents", got)
    c.api.must("PATCH", "/api/v1/namespaces/default/configmaps/fg-dep", {"metadata": {"finalizers": None}},
               ctype="application/merge-patch+json")
    c.wait(lambda: c.api.request("GET", "/api/v1/namespaces/default/configmaps/fg")[0] == 404, 10, "the owner")
    t.ok(True, "and goes once they are gone")


# A 410 Gone from the client (its status, or the watch's ERROR event quoted
# in its message) - not the digits 410 in a resourceVersion of a URL.
GONE = re.compile(r"(?<![=\d])410(?!\d)|Expired")


def gone(e):
    return getattr(e, "status", None) == 410 or bool(GONE.search(repr(e)))


def test_restart_mid_watch(c):
    from kubernetes import client, config, watch
    api = client.CoreV1Api(config.new_client_from_config(config_file=c.kubeconfig))
    rv = api.list_namespaced_config_map("default").metadata.resource_version
    seen, errors = [], []

    def watcher():
        nonlocal rv
        end = time.monotonic() + 30
        while time.monotonic() < end and len(seen) < 2:
            try:
                for ev in watch.Watch().stream(api.list_namespaced_config_map, "default", resource_version=rv,
                                               label_selector="mid=watch", timeout_seconds=10):
                    rv = ev["object"].metadata.resource_version
                    seen.append(ev["object"].metadata.name)
                    if len(seen) == 2:
                        return
            except Exception as e:  # the connection cut by the restart: watch again from rv
                errors.append(repr(e))
                if gone(e):
                    return
                time.sleep(0.2)
    th = threading.Thread(target=watcher)
    th.start()
    time.sleep(0.5)
    api.create_namespaced_config_map("default", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="mid-before", labels={"mid": "watch"})))
    time.sleep(0.5)
    c.restart_apiserver()
    api.create_namespaced_config_map("default", client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name="mid-after", labels={"mid": "watch"})))
    th.join(40)
    t.eq(seen, ["mid-before", "mid-after"], "an API server restart mid-watch: the client watches again from its "
         "resourceVersion and misses nothing (history kept)")
    t.ok(not any(GONE.search(e) for e in errors), "no 410 after a restart", errors)
    c.api.must("POST", kclient.pod_path("default"), pod("late", "exec sleep 100"))
    wait_pod(c, "late", lambda p: p["status"]["phase"] == "Running")
    t.ok(True, "the kubelet reconnects after the restart and runs new pods")
    c.api.must("DELETE", kclient.pod_path("default", "late"), params={"gracePeriodSeconds": "0"})


def test_kubelet_restart_and_eviction(c):
    c.api.must("POST", kclient.pod_path("default"), pod("adopt", "exec sleep 100"))
    got = wait_pod(c, "adopt", lambda p: p["status"]["phase"] == "Running")
    uid = got["metadata"]["uid"]
    before = [x["Id"] for x in c.pod_containers(uid)]
    stray = c.docker.create("k8s-standin-stray-" + c.id, {
        "Image": IMAGE, "Cmd": ["sleep", "100"],
        "Labels": {cluster.CLUSTER_LABEL: c.id, "io.kubernetes.pod.uid": "no-such-pod"}})
    c.restart_kubelet()
    c.wait(lambda: c.docker.inspect(stray) is None, 20, "the stray container to be removed")
    t.ok(True, "a restarted kubelet removes containers of pods that do not exist")
    time.sleep(1)
    after = [x["Id"] for x in c.pod_containers(uid)]
    got = c.api.must("GET", kclient.pod_path("default", "adopt"))
    t.ok(after == before and got["status"]["phase"] == "Running",
         "and takes over the running containers of its pods", (before, after, got["status"]))
    c.evict_pod("adopt")
    got = wait_pod(c, "adopt", lambda p: p["status"]["phase"] == "Failed")
    t.ok(got["status"].get("reason") == "Evicted" and not c.pod_containers(uid),
         "node-pressure eviction: containers killed, phase Failed, reason Evicted", got["status"])
    c.api.must("DELETE", kclient.pod_path("default", "adopt"))
    from kubernetes import client, config
    api = client.CoreV1Api(config.new_client_from_config(config_file=c.kubeconfig))
    c.api.must("POST", kclient.pod_path("default"), pod("evict2", "exec sleep 100"))
    wait_pod(c, "evict2", lambda p: p["status"]["phase"] == "Running")
    api.create_namespaced_pod_eviction("evict2", "default", client.V1Eviction(
        metadata=client.V1ObjectMeta(name="evict2", namespace="default"),
        delete_options=client.V1DeleteOptions(grace_period_seconds=0)))
    c.wait(lambda: c.api.request("GET", kclient.pod_path("default", "evict2"))[0] == 404, 15, "evict2 to go")
    t.ok(True, "python: the policy/v1 Eviction subresource deletes the pod")


def test_bad_input(c):
    """Random selectors, bodies and patches: each answered with a Status
    (never 500) and the server still serving."""
    import random
    rnd = random.Random(26)
    conn = c.api.conn()
    hdr = c.api.headers("application/json")
    codes = {}

    def call(method, path, body=None, ctype="application/json"):
        h = dict(hdr, **{"Content-Type": ctype})
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read()
        codes.setdefault(r.status, data[:200])
        return r.status
    alphabet = "ab=!,() in notin !=x-_./"
    for _ in range(50):
        sel_ = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(1, 14)))
        call("GET", "/api/v1/namespaces/default/configmaps?" + urllib.parse.urlencode({"labelSelector": sel_}))
        call("GET", "/api/v1/namespaces/default/pods?" + urllib.parse.urlencode({"fieldSelector": sel_}))
    pieces = ['{', '}', '[', ']', '"metadata"', ':', '"name"', '"x"', ',', '1', 'null', '"labels"', '{"a":1}',
              '"data"', '"spec"', '"containers"', '[]', 'true']
    for _ in range(40):
        body = "".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 12))).encode()
        call("POST", "/api/v1/namespaces/default/configmaps", body)
        call("POST", kclient.pod_path("default"), body)
    c.api.must("POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "patchme"}})
    for _ in range(40):
        body = "".join(rnd.choice(pieces + ['"op"', '"add"', '"path"', '"/data"', '"value"'])
                       for _ in range(rnd.randint(1, 12))).encode()
        ctype = rnd.choice(["application/merge-patch+json", "application/strategic-merge-patch+json",
                            "application/json-patch+json"])
        call("PATCH", "/api/v1/namespaces/default/configmaps/patchme", body, ctype)
    conn.close()
    t.ok(500 not in codes and set(codes) <= {200, 201, 400, 404, 409, 415, 422},
         "random selectors, bodies and patches: Status answers, never 500",
         {k: v for k, v in codes.items()})
    st, _ = c.api.request("GET", "/api/v1/namespaces/default/configmaps/patchme")
    t.eq(st, 200, "and the server still serves")
    st, lst = c.api.request("GET", "/api/v1/namespaces/default/configmaps")
    for cm in lst["items"]:
        if cm["metadata"]["name"] not in ("kube-root-ca.crt",):
            c.api.request("DELETE", "/api/v1/namespaces/default/configmaps/" + cm["metadata"]["name"])


MANIFEST = """
apiVersion: v1
kind: ServiceAccount
metadata: {name: agentbox, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: agentbox, namespace: default}
rules:
- apiGroups: [""]
  resources: [pods, persistentvolumeclaims, secrets]
  verbs: [get, list, watch, create, delete]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: agentbox, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: agentbox}
subjects: [{kind: ServiceAccount, name: agentbox, namespace: default}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: agentbox, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: agentbox}}
  template:
    metadata: {labels: {app: agentbox}}
    spec:
      serviceAccountName: agentbox
      containers: [{name: server, image: agentbox:latest, ports: [{containerPort: 8080}]}]
---
apiVersion: v1
kind: Service
metadata: {name: agentbox, namespace: default}
spec:
  selector: {app: agentbox}
  ports: [{port: 80, targetPort: 8080}]
"""


def test_dry_run(c):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(MANIFEST)
    rc, out, err = kubectl(c, "apply", "--dry-run=client", "-f", f.name)
    os.unlink(f.name)
    t.ok(rc == 0 and all(x in out for x in ("serviceaccount/agentbox created (dry run)",
                                             "role.rbac.authorization.k8s.io/agentbox created (dry run)",
                                             "deployment.apps/agentbox created (dry run)",
                                             "service/agentbox created (dry run)")),
         "kubectl apply --dry-run=client of a Deployment/Role/RoleBinding/ServiceAccount/Service", out + err)


def test_schema(c):
    records = c.recorded()
    typos = [r for r in records if r["object"]["metadata"].get("name", "").startswith("typo-")]
    n = c.validate_recorded([r for r in records if r not in typos])
    t.ok(n > 10, "every object written in this file matches the Kubernetes OpenAPI schema (%d)" % n)
    try:
        c.validate_recorded(typos)
        caught = None
    except cluster.SchemaError as e:
        caught = str(e)
    t.ok(caught and 'unknown field "dat"' in caught, "validate_recorded() reports the fields the server dropped",
         caught)
    bad = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
           "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": "eighty"}]}]}}
    try:
        c.validate_recorded([{"object": bad}])
        caught = None
    except cluster.SchemaError as e:
        caught = str(e)
    t.ok(caught and "containerPort" in caught, "the validator catches a bad object", caught)
    typo = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
            "spec": {"containers": [{"name": "c", "image": "i", "volumeMount": []}]}}
    try:
        c.validate_recorded([{"object": typo}])
        caught = None
    except cluster.SchemaError as e:
        caught = str(e)
    t.ok(caught and 'unknown field "volumeMount"' in caught,
         "and a field the schema does not have (a real server would drop it)", caught)


def main():
    why = cluster.available()
    if why:
        skip_all(why)
    if shutil.which("kubectl") is None:
        skip_all("kubectl is not installed (scripts/deps.sh: kubernetes-client)")
    try:
        import kubernetes  # noqa: F401
    except ImportError:
        # Debian's python3-kubernetes is in Debian's python; the suite's
        # python3 may be another one (pyenv): run under Debian's then.
        deb = "/usr/bin/python3"
        if os.path.realpath(sys.executable) != os.path.realpath(deb) and os.path.exists(deb) and \
                subprocess.run([deb, "-c", "import kubernetes"], stderr=subprocess.DEVNULL).returncode == 0:
            os.execv(deb, [deb] + sys.argv)
        skip_all("python3-kubernetes is not installed (scripts/deps.sh)")
    why = cluster.validator_ready()
    if why:
        skip_all(why)
    c = cluster.Cluster()
    try:
        t0 = time.monotonic()
        c.start()
        print("# cluster start: %.1f s" % (time.monotonic() - t0), flush=True)
        for fn in (test_kubectl_basics, test_python_client, test_raw_watch_410, test_pod_ready,
                   test_security_and_limits, test_failures,
                   test_pod_features, test_restart_policy, test_patches_and_names, test_gc_and_restart,
                   test_restart_mid_watch, test_kubelet_restart_and_eviction, test_bad_input, test_dry_run,
                   test_schema):
            t0 = time.monotonic()
            try:
                fn(c)
                print("# %s: %.1f s" % (fn.__name__, time.monotonic() - t0), flush=True)
            except Exception:
                t.ok(False, "%s raised" % fn.__name__, traceback.format_exc())
    finally:
        c.stop()
    t.ok(not c.leftovers(), "stop() leaves no container of the cluster on the engine", c.leftovers())
    t.done()


if __name__ == "__main__":
    main()
