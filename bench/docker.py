#!/usr/bin/env python3
"""bench/docker.py - the Docker backend (docs/backends.md) against the native
one and against plain Docker, side by side in one run, on one engine.

    sudo python3 bench/docker.py              # ~3 min; BUILD=build N=10

Starts the private dockerd of scripts/dockerd.sh (own socket and data root)
with the tests' Debian image (tests/lib/debianroot.py), and `agentbox serve`
(temp data dir) with docker_host pointing at it. Then N rounds each,
interleaved, of:

  create   POST /v1/sandboxes (native; "backend": "docker" with the Debian
           image) until the box runs, vs `docker run -d --network none IMG
           sleep infinity`;
  exec     an argv exec of `true` in a running box, vs `docker exec C true`;
  stop+start  POST .../stop then .../start, vs `docker stop -t 0` + `docker start`;

and, once, the idle memory of 10 idle boxes of each kind: the proportional
set size (PSS, /proc/PID/smaps_rollup) of every process in each box's PID
namespace plus, for containers, the containerd shim that keeps each one.
Prints medians (and p90) in ms and ratios against the native backend."""
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
sys.path.insert(0, HERE)
import debianroot  # noqa: E402
from images import free_port, pct  # noqa: E402  (bench/images.py)

BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
N = int(os.environ.get("N", "10"))
IDLE = int(os.environ.get("IDLE", "10"))
BIN = os.path.join(BUILD, "agentbox")


class Srv:
    def __init__(self, port):
        self.port = port

    def req(self, method, path, body=None, timeout=300):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        r = c.getresponse()
        raw = r.read()
        c.close()
        if r.status >= 300:
            raise RuntimeError("%s %s: %d %s" % (method, path, r.status, raw[:300]))
        return json.loads(raw) if raw else None


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000.0


def pid_ns(pid):
    try:
        return os.readlink("/proc/%d/ns/pid" % pid)
    except OSError:
        return None


def pss_kib(pid):
    try:
        with open("/proc/%d/smaps_rollup" % pid) as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def box_pss(init_pid, with_shim):
    """KiB: PSS of every process in init_pid's PID namespace (+ its parent shim)."""
    ns = pid_ns(init_pid)
    total = 0
    for d in os.listdir("/proc"):
        if d.isdigit() and pid_ns(int(d)) == ns:
            total += pss_kib(int(d))
    if with_shim:
        with open("/proc/%d/stat" % init_pid) as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        with open("/proc/%d/comm" % ppid) as f:
            if "shim" in f.read():
                total += pss_kib(ppid)
    return total


def main():
    if os.geteuid() != 0:
        sys.exit("bench/docker.py needs root (boxes, dockerd)")
    r = subprocess.run([os.path.join(ROOT, "scripts", "dockerd.sh")], capture_output=True, text=True)
    host = (r.stdout.strip().splitlines() or [""])[-1].split("=", 1)[-1]
    if r.returncode != 0 or not host.startswith("unix://"):
        sys.exit("scripts/dockerd.sh failed: %s" % (r.stderr or r.stdout)[-500:])
    image = debianroot.docker_image(host)
    docker = ["docker", "-H", host]
    if not shutil.which("docker"):
        sys.exit("no docker CLI (Debian's docker.io has one)")
    work = tempfile.mkdtemp(prefix="agentbox-dockerbench.", dir="/var/tmp")
    cfg = os.path.join(work, "config.yaml")
    with open(cfg, "w") as f:
        f.write("limits:\n  disk: 256M\n  memory: 256M\nidle_stop: 1h\nidle_pause: 1h\n"
                "sample_interval: 0\ndocker_host: %s\ndocker_image: %s\n" % (host, image))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTBOX_TOKEN", "AGENTBOX_DATA")}
    env.setdefault("AGENTBOX_INIT", os.path.join(BUILD, "agentbox-init"))
    p = subprocess.Popen([BIN, "serve", "--listen", "127.0.0.1:%d" % port, "--data", os.path.join(work, "data"),
                          "--config", cfg], stderr=open(os.path.join(work, "server.log"), "wb"), env=env)
    srv = Srv(port)
    plain = []
    boxes = []
    try:
        for _ in range(200):
            try:
                srv.req("GET", "/health", timeout=2)
                break
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.05)
        res = {k: [] for k in ("create", "exec", "stopstart")}
        kinds = ("native", "docker", "plain")
        for k in res:
            res[k] = {kind: [] for kind in kinds}
        for i in range(N):
            for kind in kinds:
                name = "b%s%d" % (kind[0], i)
                if kind == "plain":
                    cname = "agentbox-bench-%d" % i
                    res["create"][kind].append(timed(lambda: subprocess.run(
                        docker + ["run", "-d", "--name", cname, "--network", "none", image, "sleep", "infinity"],
                        check=True, capture_output=True)))
                    plain.append(cname)
                    res["exec"][kind].append(timed(lambda: subprocess.run(
                        docker + ["exec", cname, "true"], check=True, capture_output=True)))
                    res["stopstart"][kind].append(timed(lambda: (
                        subprocess.run(docker + ["stop", "-t", "0", cname], check=True, capture_output=True),
                        subprocess.run(docker + ["start", cname], check=True, capture_output=True))))
                    continue
                body = {"id": name}
                if kind == "docker":
                    body["backend"] = "docker"
                res["create"][kind].append(timed(lambda: srv.req("POST", "/v1/sandboxes", body)))
                boxes.append(name)
                res["exec"][kind].append(timed(lambda: srv.req(
                    "POST", "/v1/sandboxes/%s/exec" % name, {"argv": ["true"]})))
                res["stopstart"][kind].append(timed(lambda: (
                    srv.req("POST", "/v1/sandboxes/%s/stop" % name, {}),
                    srv.req("POST", "/v1/sandboxes/%s/start" % name, {}))))
        print("bench/docker.py: N=%d rounds, interleaved; ms (median / p90)" % N)
        print("%-12s %18s %18s %18s %12s %12s" % ("", "native", "docker backend", "docker CLI",
                                                   "dk/native", "plain/dkb"))
        for k, v in res.items():
            med = {kind: statistics.median(v[kind]) for kind in kinds}
            print("%-12s %18s %18s %18s %11.1fx %11.2fx" % (
                k, *("%.1f / %.1f" % (med[kind], pct(v[kind], 90)) for kind in kinds),
                med["docker"] / med["native"], med["plain"] / med["docker"]))
        # idle memory
        mem = {}
        for kind in ("native", "docker"):
            for i in range(IDLE):
                name = "idle%s%d" % (kind[0], i)
                body = {"id": name, "backend": kind}
                srv.req("POST", "/v1/sandboxes", body)
                boxes.append(name)
            time.sleep(2)
            tot = 0
            for i in range(IDLE):
                name = "idle%s%d" % (kind[0], i)
                r = subprocess.run([BIN, "--data", os.path.join(work, "data"), "ls", "--json"],
                                   capture_output=True, text=True, env=dict(env, AGENTBOX_DOCKER_HOST=host))
                info = {b["id"]: b for b in json.loads(r.stdout)}
                tot += box_pss(info[name]["init_pid"], kind == "docker")
            mem[kind] = tot / IDLE
        tot = 0
        for c in plain[:IDLE]:
            pid = int(subprocess.run(docker + ["inspect", "-f", "{{.State.Pid}}", c], capture_output=True,
                                     text=True).stdout)
            tot += box_pss(pid, True)
        mem["plain"] = tot / max(1, min(IDLE, len(plain)))
        print("idle memory per box (PSS of its processes, + the shim for containers), %d boxes each:" % IDLE)
        for kind in ("native", "docker", "plain"):
            print("  %-15s %8.0f KiB" % ({"docker": "docker backend", "plain": "docker CLI (sleep)"}.get(kind, kind),
                                         mem[kind]))
    finally:
        for b in boxes:
            try:
                srv.req("DELETE", "/v1/sandboxes/%s" % b)
            except Exception:  # noqa: BLE001 - best effort
                pass
        for c in plain:
            subprocess.run(docker + ["rm", "-f", c], capture_output=True)
        time.sleep(2)
        p.terminate()
        p.wait(30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
