#!/usr/bin/env python3
"""bench/kubernetes.py - the kubernetes backend beside the Docker backend,
measured in one run by one server (docs/kubernetes.md).

    sudo bench/kubernetes.sh            # ~1 min; BUILD=build N=5

Starts the private dockerd (scripts/dockerd.sh), the stand-in cluster
(tests/k8s/cluster.py: its kubelet runs pods on that same engine) and one
`agentbox serve` with both backends. Then N rounds, interleaved, per backend:
create (POST /v1/sandboxes until running), first exec (the first `true`),
exec (the median of 10 more), port GET (the median of 10 GETs of a small
page through /v1/sandboxes/ID/ports/PORT/ from a server on the box's
loopback: on kubernetes through the pod's init's PORT relay), stop, start
(until running). Prints medians in ms. Which parts are the stand-in's: on kubernetes, create and start include
the stand-in API server (Python, HTTPS), its scheduler and its kubelet's
polling of Docker (containers start through the same engine as the Docker
backend's); exec goes straight to init over TCP with the handshake, no
stand-in in the path.

One run on the shared 2-core test machine (N=3, 2026-11-29, loaded by other
work: not final), medians in ms; kubernetes' create includes the pod's image
probe (an init container of the box's image) and reading what it told:
               docker   kubernetes
  create        284.6        576.1
  first exec      3.8          2.7
  exec            2.3          2.2
  port GET        2.7          2.1
  stop           59.1         84.6
  start         221.8        379.4"""
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
sys.path.insert(0, os.path.join(ROOT, "tests", "k8s"))
sys.path.insert(0, HERE)
import debianroot  # noqa: E402
from images import free_port  # noqa: E402

BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
N = int(os.environ.get("N", "5"))


def call(port, method, path, body=None, timeout=180):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, body=json.dumps(body) if body is not None else None,
              headers={"Content-Type": "application/json"} if body is not None else {})
    r = c.getresponse()
    out = r.read()
    c.close()
    return r.status, (json.loads(out) if out[:1] in (b"{", b"[") else out)


def ms(f):
    t0 = time.monotonic()
    r = f()
    return (time.monotonic() - t0) * 1000, r


def main():
    host = subprocess.run([os.path.join(ROOT, "scripts", "dockerd.sh")], stdout=subprocess.PIPE,
                          text=True, check=True).stdout.strip().splitlines()[-1].split("=", 1)[1]
    os.environ["AGENTBOX_TEST_DOCKER_HOST"] = host
    os.environ.setdefault("AGENTBOX_INIT", os.path.join(BUILD, "agentbox-init"))
    import abtest
    import cluster
    image = debianroot.docker_image(host)
    init_image = abtest.kubernetes_init_image(host)
    cl = cluster.Cluster()
    cl.start()
    data = tempfile.mkdtemp(prefix="bench-k8s-", dir="/var/tmp")
    port = free_port()
    settings = {"kubeconfig": cl.kubeconfig, "image": image, "init_image": init_image,
                "image_pull_policy": "Never", "ready_timeout": "60s"}
    env = dict(os.environ, AGENTBOX_DOCKER_HOST=host, AGENTBOX_DOCKER_IMAGE=image,
               AGENTBOX_KUBERNETES=json.dumps(settings), AGENTBOX_LOG="warn")
    srv = subprocess.Popen([os.path.join(BUILD, "agentbox"), "serve", "--listen",
                            "127.0.0.1:%d" % port, "--data", data], env=env)
    try:
        for _ in range(100):
            try:
                if call(port, "GET", "/health")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        rows = ("create", "first exec", "exec", "port GET", "stop", "start")
        res = {b: {k: [] for k in rows} for b in ("docker", "kubernetes")}
        for i in range(N):
            for b in ("docker", "kubernetes"):
                box = "bench-%s-%d" % (b[0], i)
                t, (st, _) = ms(lambda: call(port, "POST", "/v1/sandboxes", {"id": box, "backend": b}))
                assert st == 201, (b, st)
                res[b]["create"].append(t)
                ex = lambda: call(port, "POST", "/v1/sandboxes/%s/exec" % box, {"argv": ["true"]})
                res[b]["first exec"].append(ms(ex)[0])
                res[b]["exec"].append(statistics.median(ms(ex)[0] for _ in range(10)))
                # (the stand-in's pods share the host's loopback: a free port of it)
                pp = free_port()
                call(port, "POST", "/v1/sandboxes/%s/exec" % box,
                     {"command": "cd /tmp && echo hi > index.html && (nohup python3 -m http.server %d "
                                 "--bind 127.0.0.1 >/dev/null 2>&1 &)" % pp})
                get = lambda: call(port, "GET", "/v1/sandboxes/%s/ports/%d/index.html" % (box, pp))
                for _ in range(100):
                    if get()[0] == 200:
                        break
                    time.sleep(0.1)
                res[b]["port GET"].append(statistics.median(ms(get)[0] for _ in range(10)))
                res[b]["stop"].append(ms(lambda: call(port, "POST", "/v1/sandboxes/%s/stop" % box))[0])
                res[b]["start"].append(ms(lambda: call(port, "POST", "/v1/sandboxes/%s/start" % box))[0])
                call(port, "DELETE", "/v1/sandboxes/%s" % box)
        print("medians of %d rounds, ms (kubernetes on the stand-in cluster: see the header)" % N)
        print("%-12s %10s %12s" % ("", "docker", "kubernetes"))
        for k in rows:
            print("%-12s %10.1f %12.1f" % (k, statistics.median(res["docker"][k]),
                                           statistics.median(res["kubernetes"][k])))
    finally:
        srv.terminate()
        srv.wait(30)
        cl.stop()
        # the native backend mounts the skills disk at DATA/skills
        subprocess.run(["umount", "-l", os.path.join(data, "skills")], stderr=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", data])


if __name__ == "__main__":
    main()
