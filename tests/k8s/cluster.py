"""cluster - start the stand-in Kubernetes cluster (tests/k8s/apiserver.py and
tests/k8s/kubelet.py) for a test, stdlib only.

    import cluster
    c = cluster.Cluster()          # needs AGENTBOX_TEST_DOCKER_HOST (scripts/dockerd.sh)
    c.start()
    c.kubeconfig                   # kubeconfig with the bearer token
    c.kubeconfig_cert              # kubeconfig with a client certificate
    c.token, c.ca, c.server, c.namespace
    c.api                          # a kclient.Client (token) for the test's own calls
    c.restart_apiserver()          # SIGTERM, start again on the same port and state
    c.compact()                    # drop the watch history: older watches get 410 Gone
    c.kill_container(pod)          # docker kill a pod's container from outside
    c.evict_pod(pod)               # the kubelet evicts it (node pressure): Failed/Evicted
    c.restart_kubelet()            # stop and start the kubelet (it adopts running containers)
    c.leftovers()                  # this cluster's containers still on the engine
    c.validate_recorded()          # every object written, checked against the OpenAPI schema
    c.stop()                       # stop both, remove every container this cluster made

Each Cluster has its own state dir (certificates, kubeconfigs, state.json,
volumes), its own 127.N.0.0/16 pod IP range (N picked per cluster so that
parallel test files do not collide) and a label value on its containers;
stop() runs at exit too. available() says why one cannot run.

By hand, or for a script that shares one cluster between test files:

    python3 tests/k8s/cluster.py up --state-dir /tmp/k8s    # prints KUBECONFIG=... lines
    python3 tests/k8s/cluster.py down --state-dir /tmp/k8s  # stops it, removes its containers
"""

import argparse
import atexit
import ctypes
import fcntl
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dockerapi  # noqa: E402
import kclient  # noqa: E402

CLUSTER_LABEL = "k8s-standin.cluster"
TMP_ROOT = "/var/tmp"
DIR_PREFIX = "k8s-standin-"


def docker_host():
    return os.environ.get("AGENTBOX_TEST_DOCKER_HOST") or os.environ.get("DOCKER_HOST", "")


def available():
    """None if a cluster can start here, else the reason it cannot."""
    host = docker_host()
    if not host:
        return "no Docker engine: AGENTBOX_TEST_DOCKER_HOST is not set (scripts/dockerd.sh)"
    if not host.startswith("unix://") or not os.path.exists(host[7:]):
        return "the Docker engine %s is not reachable" % host
    try:
        dockerapi.Docker(host).call("GET", "/_ping", timeout=5)
    except (OSError, dockerapi.DockerError) as e:
        return "the Docker engine %s does not answer: %s" % (host, e)
    if shutil.which("openssl") is None:
        return "openssl is not installed"
    return None


def held(path):
    """Whether a live process holds the flock on path (a cluster's owner
    holds STATE/lock while it lives; pids are no proof across PID
    namespaces)."""
    try:
        with open(path) as f:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
    except FileNotFoundError:
        return False
    except OSError:
        return True


def sweep():
    """Remove what clusters of killed tests left: state dirs whose owner and
    processes are gone (their containers too). Dirs of `cluster.py up` stay."""
    for name in os.listdir(TMP_ROOT):
        d = os.path.join(TMP_ROOT, name)
        if not name.startswith(DIR_PREFIX) or not os.path.isdir(d) or name == DIR_PREFIX + "ips":
            continue
        try:
            with open(os.path.join(d, "cluster.json")) as f:
                st = json.load(f)
        except (OSError, ValueError):
            if not held(os.path.join(d, "lock")) and time.time() - os.stat(d).st_mtime > 3600:
                shutil.rmtree(d, ignore_errors=True)  # never started, an hour ago
            continue
        if not st.get("tied") or held(os.path.join(d, "lock")):
            continue
        try:
            docker = dockerapi.Docker(docker_host())
            for ct in docker.containers("%s=%s" % (CLUSTER_LABEL, st["id"])):
                docker.remove(ct["Id"])
        except (OSError, ValueError, dockerapi.DockerError):
            continue
        shutil.rmtree(d, ignore_errors=True)


def claim_ip_octet():
    """A second octet for this cluster's pod IPs (127.N.x.y) that no other
    live cluster on this machine holds: an flock on a file per octet, held
    until the process ends."""
    d = os.path.join(TMP_ROOT, DIR_PREFIX + "ips")
    os.makedirs(d, exist_ok=True)
    octets = list(range(100, 251))
    random.shuffle(octets)
    for n in octets:
        f = open(os.path.join(d, "%d.lock" % n), "w")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return n, f
        except OSError:
            f.close()
    raise RuntimeError("no free pod IP range: 151 stand-in clusters running?")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    def __init__(self, state_dir=None, node_labels=None, node_taints=None, history=1000, backoff=0.5,
                 bookmark_interval=2.0, namespace="default", verbose=False, tie_to_parent=True):
        self.own_dir = state_dir is None
        if self.own_dir:
            sweep()
        self.dir = state_dir or tempfile.mkdtemp(prefix=DIR_PREFIX, dir=TMP_ROOT)
        os.makedirs(self.dir, exist_ok=True)
        # held while this process lives: sweep() leaves the dir alone
        self.lock = open(os.path.join(self.dir, "lock"), "w")
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise RuntimeError("the state dir %s is in use by another cluster" % self.dir)
        self.id = "c" + os.urandom(5).hex()
        self.port = None
        self.node_labels = node_labels or {}
        self.node_taints = node_taints or []
        self.history, self.backoff, self.bookmark_interval = history, backoff, bookmark_interval
        self.namespace = namespace
        self.verbose = verbose
        self.ip_octet, self.ip_lock = claim_ip_octet()
        # Children die with this process (SIGKILL by a test timeout): the
        # API server is SIGTERMed, the kubelet removes the cluster's
        # containers first (SIGUSR1). `cluster.py up` leaves them running.
        self.tie_to_parent = tie_to_parent
        self.apiserver = None
        self.kubelet = None
        self.docker = dockerapi.Docker(docker_host())
        atexit.register(self.stop)

    @property
    def kubeconfig(self):
        return os.path.join(self.dir, "kubeconfig")

    @property
    def kubeconfig_cert(self):
        return os.path.join(self.dir, "kubeconfig-cert")

    @property
    def ca(self):
        return os.path.join(self.dir, "pki", "ca.crt")

    @property
    def server(self):
        return "https://127.0.0.1:%d" % self.port

    @property
    def token(self):
        with open(os.path.join(self.dir, "token")) as f:
            return f.read().strip()

    def start(self):
        self.port = self.port or free_port()
        self.start_apiserver()
        self.api = kclient.Client(self.kubeconfig)
        self.start_kubelet()
        self.wait(lambda: self.node_ready(), 30, "the stand-in node to be Ready")
        self.save()
        return self

    def _spawn(self, argv, log, death_signal=signal.SIGTERM):
        out = open(os.path.join(self.dir, log), "ab")
        tie = self.tie_to_parent

        def child():
            if tie:
                ctypes.CDLL(None, use_errno=True).prctl(1, int(death_signal))  # PR_SET_PDEATHSIG
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=out, start_new_session=True,
                                preexec_fn=child)

    def start_apiserver(self):
        os.makedirs(self.dir, exist_ok=True)
        argv = [sys.executable, os.path.join(HERE, "apiserver.py"), "--state-dir", self.dir,
                "--port", str(self.port), "--history", str(self.history), "--namespace", self.namespace,
                "--bookmark-interval", str(self.bookmark_interval), "--docker-host", docker_host()]
        if self.verbose:
            argv.append("--verbose")
        for attempt in range(50):
            self.apiserver = self._spawn(argv, "apiserver.log")
            line = self.apiserver.stdout.readline().decode()
            if line.startswith("READY"):
                return
            self.apiserver.wait()
            time.sleep(0.1)  # the port may still be held by the process before
        raise RuntimeError("the stand-in API server did not start; see %s/apiserver.log" % self.dir)

    @staticmethod
    def _end(proc):
        if proc and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop_apiserver(self):
        self._end(self.apiserver)
        self.apiserver = None

    def restart_apiserver(self):
        """Stop the API server (state saved, watches cut) and start it again on
        the same port with the same state."""
        self.stop_apiserver()
        self.start_apiserver()

    def start_kubelet(self):
        argv = [sys.executable, os.path.join(HERE, "kubelet.py"), "--kubeconfig", self.kubeconfig,
                "--state-dir", os.path.join(self.dir, "kubelet"), "--docker-host", docker_host(),
                "--cluster", self.id, "--ip-octet", str(self.ip_octet), "--log-dir",
                os.path.join(self.dir, "logs"), "--backoff", str(self.backoff)]
        for k, v in self.node_labels.items():
            argv += ["--label", "%s=%s" % (k, v)]
        for t in self.node_taints:
            argv += ["--taint", t]
        self.kubelet = self._spawn(argv, "kubelet.log", signal.SIGUSR1)
        if not self.kubelet.stdout.readline().startswith(b"READY"):
            raise RuntimeError("the stand-in kubelet did not start; see %s/kubelet.log" % self.dir)

    def stop_kubelet(self):
        self._end(self.kubelet)
        self.kubelet = None

    def node_ready(self):
        st, node = self.api.request("GET", "/api/v1/nodes/standin-node")
        return st == 200 and any(c["type"] == "Ready" and c["status"] == "True"
                                 for c in node.get("status", {}).get("conditions") or [])

    def wait(self, pred, timeout, what):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                v = pred()
                if v:
                    return v
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError("timed out waiting for " + what)

    def compact(self):
        """Drop the API server's watch history: a watch or continue from any
        resourceVersion before now gets 410 Gone."""
        return self.api.must("POST", "/_standin/compact", {})

    def pod_containers(self, pod_uid):
        return self.docker.containers("io.kubernetes.pod.uid=" + pod_uid)

    def kill_container(self, pod, container=None, namespace=None, signal_name="SIGKILL"):
        """docker kill a running container of a pod, as an outside kill (or an
        OOM) would."""
        p = self.api.must("GET", kclient.pod_path(namespace or self.namespace, pod))
        name = container or p["spec"]["containers"][0]["name"]
        for c in self.pod_containers(p["metadata"]["uid"]):
            if c["Labels"].get("io.kubernetes.container.name") == name and c["State"] == "running":
                self.docker.kill(c["Id"], signal_name)
                return c["Id"]
        raise LookupError("pod %s has no running container %s" % (pod, name))

    def evict_pod(self, pod, message="The node was low on resource: memory.", namespace=None):
        """Have the kubelet evict a pod as under node pressure: containers
        killed, phase Failed, reason Evicted, the object left in place (an
        API-initiated eviction is POST pods/NAME/eviction instead)."""
        import kubelet
        self.api.must("PATCH", kclient.pod_path(namespace or self.namespace, pod),
                      {"metadata": {"annotations": {kubelet.EVICT_ANNOTATION: message}}},
                      ctype="application/merge-patch+json")

    def restart_kubelet(self):
        """Stop the kubelet and start it again: it takes over the running
        containers of its pods and removes those of pods that went meanwhile."""
        self.stop_kubelet()
        self.start_kubelet()

    def leftovers(self):
        """This cluster's containers still on the engine (names)."""
        return [c["Names"][0].lstrip("/") for c in self.docker.containers("%s=%s" % (CLUSTER_LABEL, self.id))]

    def recorded(self):
        path = os.path.join(self.dir, "recorded.jsonl")
        if not os.path.exists(path):
            return []
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]

    def validate_recorded(self, records=None):
        """Check every object written to the stand-in against the Kubernetes
        OpenAPI schema (tests/k8s/validate.mjs on the kubernetes-models npm
        package); raise SchemaError listing the invalid ones."""
        records = self.recorded() if records is None else records
        dropped = ["%s %s: %s" % (r["object"].get("kind"), r["object"].get("metadata", {}).get("name"),
                                  ", ".join(r["warnings"])) for r in records if r.get("warnings")]
        if dropped:
            raise SchemaError("%d write(s) carried fields the schema does not have (the API server dropped "
                              "them, as a real one does):\n  %s" % (len(dropped), "\n  ".join(dropped[:20])))
        return validate_objects([r["object"] for r in records])

    def stop(self):
        self.stop_kubelet()
        self.stop_apiserver()
        for c in self.docker.containers("%s=%s" % (CLUSTER_LABEL, self.id)) if self.port else []:
            self.docker.remove(c["Id"])
        if self.own_dir and os.environ.get("K8S_STANDIN_KEEP") != "1":
            shutil.rmtree(self.dir, ignore_errors=True)


    def save(self):
        """Write STATE/cluster.json: what `cluster.py down` needs to stop
        this cluster from another process, and sweep() to clean up after a
        test that was killed (owner: the test's pid; none for `up`)."""
        with open(os.path.join(self.dir, "cluster.json"), "w") as f:
            json.dump({"id": self.id, "port": self.port, "ip_octet": self.ip_octet,
                       "tied": self.tie_to_parent,
                       "pids": [p.pid for p in (self.apiserver, self.kubelet) if p]}, f)


class SchemaError(Exception):
    pass


def validator_ready():
    """None if the schema validator can run, else why not."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not os.path.isdir(os.path.join(HERE, "node_modules", "kubernetes-models")):
        return "tests/k8s/node_modules is missing (scripts/npm-deps.sh)"
    return None


def validate_objects(objs):
    why = validator_ready()
    if why:
        raise SchemaError("cannot validate: " + why)
    r = subprocess.run(["node", os.path.join(HERE, "validate.mjs")], input=json.dumps(objs).encode(),
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    if r.returncode not in (0, 1):
        raise SchemaError("validate.mjs failed: %s" % r.stderr.decode(errors="replace"))
    bad = json.loads(r.stdout)
    if bad:
        raise SchemaError("%d object(s) do not match the Kubernetes OpenAPI schema:\n%s" % (
            len(bad), "\n".join("  %s %s: %s" % (b["kind"], b["name"], b["errors"]) for b in bad[:20])))
    return len(objs)


def cli():
    ap = argparse.ArgumentParser(description="Start or stop a stand-in Kubernetes cluster (API server + "
                                 "kubelet on AGENTBOX_TEST_DOCKER_HOST or DOCKER_HOST) in the background.")
    ap.add_argument("verb", choices=["up", "down"])
    ap.add_argument("--state-dir", required=True, help="the cluster's state dir (made by up, removed by down)")
    ap.add_argument("--label", action="append", default=[], help="KEY=VALUE node label (up)")
    ap.add_argument("--taint", action="append", default=[], help="KEY[=VALUE]:EFFECT node taint (up)")
    args = ap.parse_args()
    d = os.path.abspath(args.state_dir)
    if args.verb == "up":
        why = available()
        if why:
            sys.exit("cluster.py: " + why)
        c = Cluster(state_dir=d, node_labels=dict(x.split("=", 1) for x in args.label), node_taints=args.taint,
                    tie_to_parent=False)
        try:
            c.start()
        except Exception:
            c.stop()
            raise
        c.save()
        atexit.unregister(c.stop)
        print("KUBECONFIG=%s" % c.kubeconfig)
        print("K8S_STANDIN_SERVER=%s" % c.server)
        print("K8S_STANDIN_TOKEN=%s" % c.token)
        print("K8S_STANDIN_CA=%s" % c.ca)
        print("K8S_STANDIN_DIR=%s" % d)
        return
    path = os.path.join(d, "cluster.json")
    if not os.path.exists(path):
        sys.exit("cluster.py: no cluster in %s" % d)
    with open(path) as f:
        st = json.load(f)
    for pid in st["pids"]:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for _ in range(50):
        if not any(os.path.exists("/proc/%d" % p) for p in st["pids"]):
            break
        time.sleep(0.1)
    docker = dockerapi.Docker(docker_host())
    for ct in docker.containers("%s=%s" % (CLUSTER_LABEL, st["id"])):
        docker.remove(ct["Id"])
    shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    cli()
