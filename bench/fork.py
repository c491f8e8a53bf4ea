#!/usr/bin/env python3
"""bench/fork.py - forks and snapshots of a box holding FILES_MIB MiB of files.

    sudo python3 bench/fork.py                 # ~1 min; BUILD=build N=10 FILES_MIB=100
    sudo DATA_FS=btrfs python3 bench/fork.py   # the data folder on a loop-mounted btrfs
                                               # (reflinks: FICLONE), needs btrfs-progs

Starts `agentbox serve` on a temp data folder under /var/tmp (DATA_FS=btrfs:
on a 4 GiB sparse btrfs image mounted there instead), and a loopback
registry with a busybox image (tests/lib/registry.py). Then:

  1. create a box on the host base, write FILES_MIB MiB (1 MiB files of
     random bytes) into /workspace and a file into /etc;
     N times: POST /v1/sandboxes/{id}/fork (timed: the whole request, the
     new box running), the disk copy alone and how long the source was
     frozen (the server's "box disk copied" log line: freeze + syncfs +
     clone/copy + thaw, then the copy's fsync), then DELETE the fork and
     wait until it is gone (untimed);
  2. the same for a box of the busybox image (its fork includes the owner
     shift of the copy at its first start);
  3. N times: POST /v1/sandboxes/{id}/snapshot of the image box (timed),
     then the image removed again (untimed);
  4. for scale: N creates of a host-base box (POST /v1/sandboxes).

Prints medians (and p90) in ms, and how the disk was copied (reflink or
copy). Everything is removed at the end."""
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
import imagelib  # noqa: E402
import registry  # noqa: E402

ROOT = os.path.join(HERE, "..")
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
N = int(os.environ.get("N", "10"))
FILES_MIB = int(os.environ.get("FILES_MIB", "100"))
DATA_FS = os.environ.get("DATA_FS", "")
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
    def __init__(self, port, log):
        self.port = port
        self.log = log

    def req(self, method, path, body=None, timeout=300):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data, headers={"Content-Type": "application/json"} if data else {})
        r = c.getresponse()
        raw = r.read()
        c.close()
        return r.status, (json.loads(raw) if raw else None)

    def must(self, method, path, body=None, want=(200, 201, 202)):
        st, j = self.req(method, path, body)
        if st not in want:
            sys.exit("%s %s -> %d %s (see %s)" % (method, path, st, j, self.log))
        return j

    def gone(self, box):
        for _ in range(600):
            if self.req("GET", "/v1/sandboxes/" + box)[0] == 404:
                return
            time.sleep(0.02)
        sys.exit("box %s was not deleted" % box)

    def copied(self, box):
        """(ms, frozen ms, how) of the server's "box disk copied" line for box."""
        with open(self.log) as f:
            for line in f:
                if '"box disk copied"' in line and '"box":"%s"' % box in line:
                    j = json.loads(line)
                    return float(j["ms"]), float(j["frozen_ms"]), j["how"]
        return None, None, None


def fill(srv, box, cmd_head):
    cmd = ("i=0; while [ $i -lt %d ]; do %s -c 1048576 /dev/urandom > /workspace/f$i; i=$((i+1)); done; "
           "echo etc > /etc/x; sync; echo ok" % (FILES_MIB, cmd_head))
    j = srv.must("POST", "/v1/sandboxes/%s/exec" % box, {"command": cmd, "timeout_s": 600})
    if (j.get("stdout") or "").strip() != "ok":
        sys.exit("filling %s failed: %s" % (box, j))


def fork_rounds(srv, src, tag):
    total, copy, frozen, how = [], [], [], set()
    for i in range(N):
        nid = "%s-f%d" % (tag, i)
        t0 = time.perf_counter()
        srv.must("POST", "/v1/sandboxes/%s/fork" % src, {"id": nid}, want=(201,))
        total.append((time.perf_counter() - t0) * 1e3)
        ms, fz, h = srv.copied(nid)
        if ms is not None:
            copy.append(ms)
            frozen.append(fz)
            how.add(h)
        j = srv.must("POST", "/v1/sandboxes/%s/exec" % nid, {"command": "cat /etc/x; ls /workspace | wc -l"})
        if (j.get("stdout") or "").split() != ["etc", str(FILES_MIB)]:
            sys.exit("fork %s lacks the files: %s" % (nid, j))
        srv.must("DELETE", "/v1/sandboxes/" + nid)
        srv.gone(nid)
    return total, copy, how, frozen


def mount_btrfs(work):
    img = os.path.join(work, "btrfs.img")
    mnt = os.path.join(work, "btrfs")
    os.mkdir(mnt)
    with open(img, "wb") as f:
        f.truncate(4 << 30)
    subprocess.run(["mkfs.btrfs", "-q", img], check=True)
    subprocess.run(["mount", "-o", "loop", img, mnt], check=True)
    return mnt


def main():
    if os.geteuid() != 0:
        sys.exit("bench/fork.py needs root")
    why = registry.missing()
    if why:
        sys.exit("bench/fork.py: " + why)
    work = tempfile.mkdtemp(prefix="agentbox-fork.", dir="/var/tmp")
    procs, mnt = [], None
    try:
        base = work
        if DATA_FS == "btrfs":
            mnt = base = mount_btrfs(work)
        reg = registry.Registry(work)
        reg.__enter__()
        spec = {"bin/busybox": imagelib.file(open("/bin/busybox", "rb").read(), 0o755)}
        for a in ("sh", "head", "ls", "wc", "cat", "sync", "true"):
            spec["bin/" + a] = imagelib.symlink("busybox")
        registry.push_image(reg.host, "bench/bb", "1", [imagelib.layer_tar(spec)],
                            {"config": {"Env": ["PATH=/bin"]}})
        ref = "%s/bench/bb:1" % reg.host
        data = os.path.join(base, "data")
        cfg = os.path.join(work, "config.yaml")
        with open(cfg, "w") as f:
            f.write("limits:\n  disk: %dM\n  memory: 256M\nidle_stop: 1h\nidle_pause: 1h\n"
                    "sample_interval: 0\n" % (FILES_MIB * 2 + 128))
        port = free_port()
        log = os.path.join(work, "server.log")
        env = {k: v for k, v in os.environ.items() if k not in ("AGENTBOX_TOKEN", "AGENTBOX_DATA")}
        env.setdefault("AGENTBOX_INIT", os.path.join(BUILD, "agentbox-init"))
        p = subprocess.Popen([BIN, "serve", "--listen", "127.0.0.1:%d" % port, "--data", data, "--config", cfg],
                             stderr=open(log, "wb"), env=env)
        procs.append(p)
        srv = Srv(port, log)
        for _ in range(200):
            try:
                if srv.req("GET", "/health")[0] == 200:
                    break
            except OSError:
                time.sleep(0.05)

        srv.must("POST", "/v1/sandboxes", {"id": "src"})
        fill(srv, "src", "head")
        hb = fork_rounds(srv, "src", "hb")
        srv.must("POST", "/v1/sandboxes", {"id": "isrc", "image": ref})
        fill(srv, "isrc", "head")
        ib = fork_rounds(srv, "isrc", "ib")
        snap = []
        for i in range(N):
            t0 = time.perf_counter()
            srv.must("POST", "/v1/sandboxes/isrc/snapshot", {"name": "bench/snap:%d" % i}, want=(201,))
            snap.append((time.perf_counter() - t0) * 1e3)
            srv.must("DELETE", "/v1/images/bench/snap:%d" % i)
        create = []
        for i in range(N):
            t0 = time.perf_counter()
            srv.must("POST", "/v1/sandboxes", {"id": "c%d" % i}, want=(201,))
            create.append((time.perf_counter() - t0) * 1e3)
            srv.must("DELETE", "/v1/sandboxes/c%d" % i)
            srv.gone("c%d" % i)

        fs = subprocess.run(["stat", "-f", "-c", "%T", data], capture_output=True, text=True).stdout.strip()
        print("data folder on %s; box with %d MiB of files; N=%d; medians (p90) in ms" % (fs, FILES_MIB, N))
        rows = [("fork, host-base box (POST .../fork, new box running)", hb[0]),
                ("  of which the disk copy (%s, synced)" % "/".join(sorted(hb[2])), hb[1]),
                ("  the source frozen (freeze, syncfs, copy, thaw)", hb[3]),
                ("fork, image box", ib[0]),
                ("  of which the disk copy (%s, synced)" % "/".join(sorted(ib[2])), ib[1]),
                ("  the source frozen", ib[3]),
                ("snapshot, image box (POST .../snapshot)", snap),
                ("create, host-base box (POST /v1/sandboxes), for scale", create)]
        for name, v in rows:
            if v:
                print("  %-58s %8.1f (%.1f)" % (name, statistics.median(v), pct(v, 90)))
    finally:
        for p in procs:
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        try:
            reg.__exit__(None, None, None)
        except Exception:
            pass
        subprocess.run([BIN, "--data", os.path.join(mnt or work, "data"), "ls", "--json"],
                       capture_output=True)
        out = subprocess.run([BIN, "--data", os.path.join(mnt or work, "data"), "ls", "--json"],
                             capture_output=True, text=True).stdout
        try:
            ids = [b["id"] for b in json.loads(out)]
        except ValueError:
            ids = []
        if ids:
            subprocess.run([BIN, "--data", os.path.join(mnt or work, "data"), "rm"] + ids,
                           capture_output=True)
        if mnt:
            subprocess.run(["umount", mnt])
        subprocess.run(["rm", "-rf", "--one-file-system", work])


if __name__ == "__main__":
    main()
