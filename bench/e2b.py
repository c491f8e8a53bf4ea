#!/usr/bin/env python3
"""bench/e2b.py - E2B's SDK against agentbox vs agentbox's own REST API.

    sudo python3 bench/e2b.py            # ~1 min; BUILD=build N=20 WARMUP=2

Starts `agentbox serve` (a token, a temp data folder under /var/tmp) and runs
tests/e2b/bench.mjs in one node process, which alternates N times (after
WARMUP untimed rounds):

  e2b   Sandbox.create() + sandbox.commands.run('echo hi') through the real
        `e2b` npm package (tests/e2b, scripts/npm-deps.sh installs it), with
        E2B_API_URL=URL/e2b, E2B_SANDBOX_URL=URL/e2b/envd, E2B_API_KEY=token
  rest  POST /v1/sandboxes + POST /v1/sandboxes/{id}/exec {"command": "echo hi"}
        through fetch, the same HTTP client

Each box is deleted after its round (untimed). Prints the median and p90 of
create, first command and their sum for both, and the ratio e2b / rest.
Everything is removed at the end."""
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
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.realpath(os.path.join(HERE, ".."))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
N = int(os.environ.get("N", "20"))
WARMUP = int(os.environ.get("WARMUP", "2"))
BIN = os.path.join(BUILD, "agentbox")
E2B_DIR = os.path.join(ROOT, "tests", "e2b")
TOKEN = "bench-e2b-token-0123456789abcdef"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p / 100))]


def main():
    if os.geteuid() != 0:
        sys.exit("bench/e2b.py: run as root (agentbox serve makes boxes)")
    node = shutil.which("node")
    if not node:
        sys.exit("bench/e2b.py: node is not installed (scripts/npm-deps.sh installs it)")
    if not os.path.isdir(os.path.join(E2B_DIR, "node_modules", "e2b")):
        subprocess.run([os.path.join(ROOT, "scripts", "npm-deps.sh")], check=True)
    tmp = tempfile.mkdtemp(prefix="agentbox-bench-e2b.", dir="/var/tmp")
    data = os.path.join(tmp, "data")
    log = os.path.join(tmp, "server.log")
    port = free_port()
    url = "http://127.0.0.1:%d" % port
    env = dict(os.environ, AGENTBOX_TOKEN=TOKEN)
    env.setdefault("AGENTBOX_INIT", os.path.join(BUILD, "agentbox-init"))
    with open(log, "wb") as lf:
        srv = subprocess.Popen([BIN, "serve", "--listen", "127.0.0.1:%d" % port, "--data", data],
                               stdout=lf, stderr=lf, env=env)
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(url + "/health", timeout=1).read()
                break
            except OSError:
                time.sleep(0.05)
        else:
            sys.exit("bench/e2b.py: the server did not come up (see %s)" % log)
        cenv = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
        cenv.update(E2B_API_URL=url + "/e2b", E2B_SANDBOX_URL=url + "/e2b/envd", E2B_API_KEY=TOKEN)
        p = subprocess.run([node, os.path.join(E2B_DIR, "bench.mjs"), url, TOKEN, str(N), str(WARMUP)],
                           cwd=E2B_DIR, env=cenv, capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            sys.exit("bench/e2b.py: bench.mjs failed:\n%s\n%s" % (p.stdout[-2000:], p.stderr[-3000:]))
        res = json.loads(p.stdout.strip().splitlines()[-1])
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(timeout=15)
        except subprocess.TimeoutExpired:
            srv.kill()
        out = subprocess.run([BIN, "--data", data, "ls", "--json"], capture_output=True, text=True).stdout
        try:
            ids = [b["id"] for b in json.loads(out)]
        except ValueError:
            ids = []
        if ids:
            subprocess.run([BIN, "--data", data, "rm"] + ids, capture_output=True)
        # the skills disk stays mounted in the host's namespace (docs/architecture.md)
        subprocess.run(["umount", "-l", os.path.join(data, "skills")], capture_output=True)
        subprocess.run(["rm", "-rf", "--one-file-system", tmp])

    print("E2B SDK %s vs agentbox REST, %d rounds each (median / p90, ms)" % (
        json.load(open(os.path.join(E2B_DIR, "node_modules", "e2b", "package.json")))["version"], N))
    print("%-34s %16s %16s %8s" % ("", "E2B SDK", "agentbox REST", "ratio"))
    for key, what in (("create", "Sandbox.create / POST sandboxes"), ("run", "first command (echo hi)"),
                      ("total", "create + first command")):
        e, r = res["e2b"][key], res["rest"][key]
        me, mr = statistics.median(e), statistics.median(r)
        print("%-34s %7.1f / %6.1f %7.1f / %6.1f %7.2fx" % (what, me, pct(e, 90), mr, pct(r, 90), me / mr))


if __name__ == "__main__":
    main()
