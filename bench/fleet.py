#!/usr/bin/env python3
"""bench/fleet.py - a fleet's costs in one run (docs/fleet.md): three
`agentbox serve` on 127.0.0.1-3 (placement local) sharing one PostgreSQL
database (AGENTBOX_STORE's server, else scripts/pg.sh's; a database of its
own, dropped at the end):

  1. exec of {"argv": ["true"]} in one box, N times on one keep-alive
     connection through its owner, then through another node (forwarded):
     p50 and p90 of each, and the forwarding's cost (the difference);
  2. creates per second with one, two and three nodes: CLIENTS threads make
     BOXES boxes round-robin over the first k nodes (each makes its own), the
     rate is boxes / wall time; the boxes are deleted after each step (each
     node made and deleted one box first: its disk template, not timed).

Run as root (native boxes): sudo bench/fleet.sh. Knobs: BUILD (default
build), N (200), BOXES (12), CLIENTS (6), PORT (free)."""
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
BIN = os.path.join(BUILD, "agentbox")
N = int(os.environ.get("N", "200"))
BOXES = int(os.environ.get("BOXES", "12"))
CLIENTS = int(os.environ.get("CLIENTS", "6"))
TOKEN = "bench-fleet-token-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def psql(url, sql):
    return subprocess.run(["psql", url, "-qAtc", sql], capture_output=True, text=True, timeout=60)


class Node:
    def __init__(self, host, port):
        self.host, self.port = host, port
        self.conn = None

    def req(self, method, path, body=None, keep=False):
        c = self.conn if keep and self.conn else http.client.HTTPConnection(self.host, self.port, timeout=120)
        if keep:
            self.conn = c
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data, headers={"Authorization": "Bearer " + TOKEN,
                                                     "Content-Type": "application/json"})
        r = c.getresponse()
        out = r.read()
        if not keep:
            c.close()
        return r.status, (json.loads(out) if out else None)


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))]


def exec_series(node, box):
    path = "/v1/sandboxes/%s/exec" % box
    for _ in range(20):
        node.req("POST", path, {"argv": ["true"]}, keep=True)
    t = []
    for _ in range(N):
        t0 = time.perf_counter()
        st, _ = node.req("POST", path, {"argv": ["true"]}, keep=True)
        t.append((time.perf_counter() - t0) * 1000)
        assert st == 200, st
    node.conn.close()
    node.conn = None
    return statistics.median(t), pct(t, 0.9)


def creates(nodes, k):
    made, lock = [], threading.Lock()
    todo = list(range(BOXES))

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop()
            st, j = nodes[i % k].req("POST", "/v1/sandboxes", {})
            with lock:
                made.append((st, j and j.get("id"), nodes[i % k]))

    t0 = time.perf_counter()
    ts = [threading.Thread(target=worker) for _ in range(CLIENTS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    dt = time.perf_counter() - t0
    ok = sum(1 for st, _, _ in made if st == 201)
    for st, bid, n in made:
        if bid:
            n.req("DELETE", "/v1/sandboxes/%s" % bid)
    # deletions run on in the background: the next step starts on a quiet fleet
    for _ in range(600):
        if not (nodes[0].req("GET", "/v1/sandboxes")[1] or {}).get("sandboxes"):
            break
        time.sleep(0.1)
    return ok, dt


def main():
    if os.geteuid() != 0:
        sys.exit("bench/fleet.py: run as root (native boxes need it)")
    admin = os.environ.get("AGENTBOX_STORE")
    if not admin:
        admin = subprocess.run([os.path.join(ROOT, "scripts", "pg.sh")], capture_output=True, text=True,
                               check=True).stdout.strip().splitlines()[-1]
    db = "agentbox_bench_fleet_%d" % os.getpid()
    r = psql(admin, "CREATE DATABASE %s" % db)
    if r.returncode:
        sys.exit("cannot create a database: " + r.stderr)
    u = urllib.parse.urlsplit(admin)
    store = urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + db, u.query, u.fragment))
    tmp = tempfile.mkdtemp(prefix="agentbox-bench-fleet.")
    port = int(os.environ.get("PORT") or free_port())
    secret = os.path.join(tmp, "secret")
    with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(os.urandom(32).hex() + "\n")
    procs, nodes = [], []
    try:
        for i in (1, 2, 3):
            host = "127.0.0.%d" % i
            cfg = os.path.join(tmp, "n%d.yaml" % i)
            with open(cfg, "w") as f:
                f.write("listen: %s:%d\ndata_dir: %s/n%d\nstore: %s\nidle_pause: 0\nidle_stop: 0\n"
                        "sample_interval: 0\nlimits:\n  disk: 64M\nfleet:\n  node: n%d\n"
                        "  url: http://%s:%d\n  secret_file: %s\n  placement: local\n"
                        % (host, port, tmp, i, store, i, host, port, secret))
            log = open(os.path.join(tmp, "n%d.log" % i), "w")
            procs.append(subprocess.Popen([BIN, "serve", "--config", cfg], stdout=log, stderr=log,
                                          env=dict(os.environ, AGENTBOX_TOKEN=TOKEN)))
            nodes.append(Node(host, port))
        for n in nodes:
            for _ in range(200):
                try:
                    if n.req("GET", "/health")[0] == 200:
                        break
                except OSError:
                    time.sleep(0.05)
        st, j = nodes[0].req("POST", "/v1/sandboxes", {})
        box = j["id"]
        own = exec_series(nodes[0], box)
        fwd = exec_series(nodes[1], box)
        print("exec true, owner n1:        p50 %.2f ms  p90 %.2f ms  (N=%d)" % (own[0], own[1], N))
        print("exec true, through n2:      p50 %.2f ms  p90 %.2f ms  (forwarding +%.2f ms at p50)"
              % (fwd[0], fwd[1], fwd[0] - own[0]))
        nodes[0].req("DELETE", "/v1/sandboxes/%s" % box)
        for n in nodes:  # each node's first box makes its disk template: not timed
            st, j = n.req("POST", "/v1/sandboxes", {})
            n.req("DELETE", "/v1/sandboxes/%s" % j["id"])
        for k in (1, 2, 3):
            ok, dt = creates(nodes, k)
            print("creates, %d node%s:          %5.1f boxes/s  (%d of %d made in %.2f s, %d clients)"
                  % (k, "" if k == 1 else "s", ok / dt, ok, BOXES, dt, CLIENTS))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run(["sh", "-c", "grep -o ' %s/[^ ]*' /proc/mounts | sort -r | xargs -r -n1 umount"
                        % tmp], check=False)
        if not os.environ.get("KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)
        psql(admin, "DROP DATABASE IF EXISTS %s WITH (FORCE)" % db)


main()
