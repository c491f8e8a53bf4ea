#!/usr/bin/env python3
"""bench/term.py - terminals (issue 15) through `agentbox serve` on loopback.

    sudo python3 bench/term.py                 # ~1 min; BUILD=build N=300 to change

Starts a server on a free port with a temp data dir, makes one box, then:
  1. floor: GET /health on one keep-alive connection (the HTTP round trip);
  2. exec of `true` and GET .../terminals (a list: one request to the box's
     init, like an exec); POST .../terminals (argv: cat) - opening a
     terminal, then DELETE;
  3. WebSocket attach: TCP connect + upgrade until the 101 is read;
  4. keystroke round trip: one byte over the WebSocket through `cat` on the
     pty (stty raw -echo, so the byte comes back from cat, not the line
     discipline) and back to the client;
  5. output throughput: 64 MiB from `head -c` on the pty to a WebSocket client.
Prints medians and p99 in ms and the ratios to the floor. Everything is
removed at the end (the box with `agentbox rm`, the temp dir)."""
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
import wsclient  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
N = int(os.environ.get("N", "300"))
BIN = os.path.join(BUILD, "agentbox")


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
    host = "127.0.0.1"
    token = None

    def __init__(self, port):
        self.port = port
        self.conn = http.client.HTTPConnection(self.host, port, timeout=60)

    def req(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        self.conn.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        r = self.conn.getresponse()
        raw = r.read()
        return r.status, (json.loads(raw) if raw else None)


def main():
    if os.geteuid() != 0:
        sys.exit("bench/term.py needs root (boxes)")
    tmp = tempfile.mkdtemp(prefix="agentbox-term.", dir="/var/tmp")
    data = os.path.join(tmp, "data")
    cfg = os.path.join(tmp, "config.yaml")
    with open(cfg, "w") as f:
        f.write("limits:\n  disk: 256M\n  memory: 512M\nidle_stop: 1h\nidle_pause: 1h\nsample_interval: 0\n")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTBOX_TOKEN", "AGENTBOX_DATA")}
    env.setdefault("AGENTBOX_INIT", os.path.join(BUILD, "agentbox-init"))
    proc = subprocess.Popen([BIN, "serve", "--listen", "127.0.0.1:%d" % port, "--data", data, "--config", cfg],
                            stderr=open(os.path.join(tmp, "server.log"), "wb"), env=env)
    box = "bench-term"
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        s = Srv(port)
        st, b = s.req("POST", "/v1/sandboxes", {"id": box})
        assert st in (200, 201), (st, b)
        T = "/v1/sandboxes/%s/terminals" % box

        health = []
        for _ in range(N):
            t0 = time.perf_counter()
            s.req("GET", "/health")
            health.append((time.perf_counter() - t0) * 1000)

        execs = []
        for _ in range(N // 3):
            t0 = time.perf_counter()
            st, e = s.req("POST", "/v1/sandboxes/%s/exec" % box, {"command": "true"})
            execs.append((time.perf_counter() - t0) * 1000)
            assert st == 200, (st, e)

        lists = []
        for _ in range(N // 3):
            t0 = time.perf_counter()
            st, e = s.req("GET", T)
            lists.append((time.perf_counter() - t0) * 1000)
            assert st == 200, (st, e)

        opens = []
        for _ in range(N // 3):
            t0 = time.perf_counter()
            st, t = s.req("POST", T, {"argv": ["cat"]})
            opens.append((time.perf_counter() - t0) * 1000)
            assert st == 201, (st, t)
            s.req("DELETE", "%s/%s" % (T, t["id"]))

        st, t = s.req("POST", T, {"argv": ["sh", "-c", "stty raw -echo; exec cat"]})
        tid = t["id"]
        time.sleep(0.3)
        attaches = []
        for _ in range(N // 3):
            t0 = time.perf_counter()
            w = wsclient.connect(s, "%s/%s" % (T, tid), token=None)
            attaches.append((time.perf_counter() - t0) * 1000)
            assert w.status == 101, w.head
            w.close()

        w = wsclient.connect(s, "%s/%s" % (T, tid), token=None)
        w.pump(0.3)
        rtt = []
        for i in range(N):
            c = bytes([97 + i % 26])
            n0 = len(w.output)
            t0 = time.perf_counter()
            w.send_binary(c)
            while len(w.output) <= n0:
                w.pump(5)
            rtt.append((time.perf_counter() - t0) * 1000)
        w.close()

        MB = 64
        st, t = s.req("POST", T, {"argv": ["sh", "-c", "stty raw -echo; sleep 0.5; head -c %dM /dev/zero; sleep 600" % MB]})
        w = wsclient.connect(s, "%s/%s" % (T, t["id"]), token=None)
        t0 = time.perf_counter()
        w.read_until(lambda o: len(o) >= MB << 20, timeout=120)
        term_secs = time.perf_counter() - t0 - 0.0
        got = len(w.output)
        w.close()

        fl = statistics.median(health)
        print("terminals on loopback, N=%d (medians; p99 in brackets), ms" % N)
        print("  floor GET /health (keep-alive)      %7.3f [%7.3f]" % (fl, pct(health, 99)))
        print("  exec of true (POST .../exec)        %7.3f [%7.3f]  %5.1fx floor" % (
            statistics.median(execs), pct(execs, 99), statistics.median(execs) / fl))
        print("  GET .../terminals (list)            %7.3f [%7.3f]  %5.1fx floor" % (
            statistics.median(lists), pct(lists, 99), statistics.median(lists) / fl))
        print("  POST .../terminals (open cat)       %7.3f [%7.3f]  %5.1fx floor" % (
            statistics.median(opens), pct(opens, 99), statistics.median(opens) / fl))
        print("  WebSocket attach (connect to 101)   %7.3f [%7.3f]  %5.1fx floor" % (
            statistics.median(attaches), pct(attaches, 99), statistics.median(attaches) / fl))
        print("  keystroke round trip (through cat)  %7.3f [%7.3f]  %5.1fx floor" % (
            statistics.median(rtt), pct(rtt, 99), statistics.median(rtt) / fl))
        print("  output %d MiB over the WebSocket    %7.1f MiB/s (%d bytes)" % (MB, got / term_secs / 2**20, got))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
        subprocess.run([BIN, "--data", data, "rm", box], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
