#!/usr/bin/env python3
"""bench/images.py - boxes from images (docs/images.md) against Docker, side by
side in one run, on one loopback registry.

    sudo python3 bench/images.py              # ~3 min; BUILD=build N=10 LAYER_MIB=10

Starts Debian's docker-registry on loopback (tests/lib/registry.py) and pushes
one image made here: busybox-static, then three layers of LAYER_MIB MiB of
random bytes each (gzip; Docker's media types, so that both clients read
it). Starts `agentbox serve` (temp data dir) and a private dockerd (own
socket and data root, no bridge, no iptables; bench/lib.sh does the same
for the shell benchmarks). Then, N rounds each, interleaved:

  1. create + first exec from a cached image: POST /v1/sandboxes {"image"}
     + an argv exec of `true`, vs `docker run --rm --network none IMG true`;
  2. pull of the 4-layer image from the registry: POST /v1/images after the
     image and its layers were removed (DELETE + GC), vs `docker pull` after
     `docker rmi`.

Prints medians (and p90) in ms and the ratio docker/agentbox. Docker's column
is left empty with a note when dockerd cannot start here. Everything is
removed at the end."""
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
import registry  # noqa: E402

ROOT = os.path.join(HERE, "..")
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
N = int(os.environ.get("N", "10"))
LAYER_MIB = int(os.environ.get("LAYER_MIB", "10"))
BIN = os.path.join(BUILD, "agentbox")
notes = []


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p / 100))]


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
        return r.status, (json.loads(raw) if raw else None)


def busybox_layer():
    entries = {"bin/busybox": open("/bin/busybox", "rb").read()}
    tar = registry.tar_of(entries)
    # symlinks for the applets the rounds use
    import io
    import tarfile
    buf = io.BytesIO(tar)
    out = io.BytesIO()
    with tarfile.open(fileobj=buf) as src, tarfile.open(fileobj=out, mode="w") as dst:
        for m in src.getmembers():
            f = src.extractfile(m)
            if m.name == "bin/busybox":
                m.mode = 0o755
            dst.addfile(m, f)
        for a in ("sh", "true", "ls"):
            ti = tarfile.TarInfo("bin/" + a)
            ti.type = tarfile.SYMTYPE
            ti.linkname = "busybox"
            dst.addfile(ti)
    return out.getvalue()


def start_dockerd(work):
    if not shutil.which("dockerd"):
        r = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "docker.io"],
                           capture_output=True, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        if r.returncode != 0:
            notes.append("apt-get install docker.io failed: Docker column skipped")
            return None, None
    d = os.path.join(work, "docker")
    os.makedirs(d)
    sock = os.path.join(d, "docker.sock")
    p = subprocess.Popen(["dockerd", "--data-root", d + "/root", "--exec-root", d + "/exec", "-H", "unix://" + sock,
                          "--pidfile", d + "/docker.pid", "--iptables=false", "--ip-masq=false", "--bridge=none",
                          "--exec-opt", "native.cgroupdriver=cgroupfs"],
                         stdout=open(d + "/dockerd.log", "wb"), stderr=subprocess.STDOUT)
    cli = ["docker", "-H", "unix://" + sock]
    for _ in range(300):
        if subprocess.run(cli + ["info"], capture_output=True).returncode == 0:
            return p, cli
        if p.poll() is not None:
            break
        time.sleep(0.1)
    notes.append("dockerd did not come up: Docker column skipped (%s)" %
                 open(d + "/dockerd.log").read()[-300:].replace("\n", " "))
    p.kill()
    return None, None


def timed(fn):
    t0 = time.perf_counter()
    ok = fn()
    return (time.perf_counter() - t0) * 1000.0, ok


def main():
    if os.geteuid() != 0:
        sys.exit("bench/images.py needs root (boxes, dockerd)")
    why = registry.missing()
    if why:
        sys.exit("bench/images.py: " + why)
    work = tempfile.mkdtemp(prefix="agentbox-images.", dir="/var/tmp")
    procs = []
    try:
        reg = registry.Registry(work)
        reg.__enter__()
        layers = [busybox_layer()] + [registry.tar_of({"data/blob%d" % i: os.urandom(LAYER_MIB << 20)})
                                      for i in range(3)]
        registry.push_image(reg.host, "bench/img", "1", layers, {"config": {"Env": ["PATH=/bin"]}},
                            media="docker", compression="gzip")
        ref = "%s/bench/img:1" % reg.host
        data = os.path.join(work, "data")
        cfg = os.path.join(work, "config.yaml")
        with open(cfg, "w") as f:
            f.write("limits:\n  disk: 256M\n  memory: 256M\nidle_stop: 1h\nidle_pause: 1h\n"
                    "sample_interval: 0\n")
        port = free_port()
        env = {k: v for k, v in os.environ.items() if k not in ("AGENTBOX_TOKEN", "AGENTBOX_DATA")}
        env.setdefault("AGENTBOX_INIT", os.path.join(BUILD, "agentbox-init"))
        p = subprocess.Popen([BIN, "serve", "--listen", "127.0.0.1:%d" % port, "--data", data, "--config", cfg],
                             stderr=open(os.path.join(work, "server.log"), "wb"), env=env)
        procs.append(p)
        srv = Srv(port)
        for _ in range(200):
            try:
                if srv.req("GET", "/health")[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)
        dockerd, docker = start_dockerd(work)
        if dockerd:
            procs.append(dockerd)

        st, _ = srv.req("POST", "/v1/images", {"ref": ref})
        if st != 200:
            sys.exit("agentbox could not pull %s (%d): see %s/server.log" % (ref, st, work))
        if docker and subprocess.run(docker + ["pull", "-q", ref], capture_output=True).returncode != 0:
            notes.append("docker pull %s failed: Docker column skipped" % ref)
            docker = None

        res = {k: [] for k in ("ab_create", "dk_run", "ab_pull", "dk_pull")}
        for i in range(N):
            bid = "bench%d" % i

            def ab_create():
                s1, _ = srv.req("POST", "/v1/sandboxes", {"id": bid, "image": ref})
                s2, j = srv.req("POST", "/v1/sandboxes/%s/exec" % bid, {"argv": ["true"]})
                return s1 == 201 and s2 == 200 and j.get("exit_code") == 0
            ms, ok = timed(ab_create)
            if ok:
                res["ab_create"].append(ms)
            srv.req("DELETE", "/v1/sandboxes/%s" % bid)
            if docker:
                ms, ok = timed(lambda: subprocess.run(docker + ["run", "--rm", "--network", "none", ref, "true"],
                                                      capture_output=True).returncode == 0)
                if ok:
                    res["dk_run"].append(ms)
        # pulls: everything of the image removed first
        for i in range(N):
            for _ in range(100):
                st, j = srv.req("GET", "/v1/sandboxes")
                if not j.get("sandboxes"):
                    break
                time.sleep(0.1)
            srv.req("DELETE", "/v1/images/" + ref)
            ms, ok = timed(lambda: srv.req("POST", "/v1/images", {"ref": ref})[0] == 200)
            if ok:
                res["ab_pull"].append(ms)
            if docker:
                subprocess.run(docker + ["rmi", "-f", ref], capture_output=True)
                ms, ok = timed(lambda: subprocess.run(docker + ["pull", "-q", ref],
                                                      capture_output=True).returncode == 0)
                if ok:
                    res["dk_pull"].append(ms)

        def cell(v):
            return "%8.1f (p90 %7.1f)" % (statistics.median(v), pct(v, 90)) if v else "%21s" % "-"

        def ratio(a, b):
            return "%6.2fx" % (statistics.median(b) / statistics.median(a)) if a and b else "     -"
        print("\nbench/images.py: N=%d, image of 4 layers (busybox + 3 x %d MiB), registry %s" %
              (N, LAYER_MIB, reg.host))
        print("%-44s %21s %21s %8s" % ("scenario (ms)", "agentbox", "docker", "dk/ab"))
        print("%-44s %s %s %s" % ("create + first exec, cached image", cell(res["ab_create"]),
                                  cell(res["dk_run"]), ratio(res["ab_create"], res["dk_run"])))
        print("%-44s %s %s %s" % ("pull, 4 layers, from the loopback registry", cell(res["ab_pull"]),
                                  cell(res["dk_pull"]), ratio(res["ab_pull"], res["dk_pull"])))
        for n in notes:
            print("note: " + n)
        print("load average: %s" % open("/proc/loadavg").read().split()[:3])
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        try:
            reg.__exit__(None, None, None)
        except Exception:
            pass
        subprocess.run([BIN, "--data", os.path.join(work, "data"), "rm"] +
                       [b["id"] for b in json.loads(subprocess.run([BIN, "--data", os.path.join(work, "data"),
                                                                     "ls", "--json"], capture_output=True,
                                                                    text=True).stdout or "[]")],
                       capture_output=True)
        subprocess.run(["umount", "-R", "-l", os.path.join(work, "docker")], capture_output=True)
        if not os.environ.get("KEEP"):
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
