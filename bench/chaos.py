#!/usr/bin/env python3
"""chaos.py - a chaos soak of `agentbox serve` (bench/chaos.sh runs it; not in
the suite; docs/testing.md, "Chaos soak").

Many clients drive a mixed workload at one server (creates, execs, file
writes and deletes, tool calls, stops, starts, pauses, resumes, deletes,
code-runner snippets) while a killer thread SIGKILLs the server at random
moments and restarts it on the same port. Every client owns its boxes and
records what the server acknowledged: a file write or delete answered 2xx
is the file's state until a later acknowledged one; a request that got no
answer (the server died under it) may or may not have happened, so its
outcome joins the file's possible states until the next acknowledged one.
At the end, after one more kill and restart, it checks:

  - every box is running, paused or stopped (none stuck in creating,
    deleting or error), every acknowledged create exists, every
    acknowledged delete is gone;
  - every file is as last acknowledged (or one of the unanswered
    writes after it);
  - the store agrees with the disk (records = DATA/boxes/*);
  - nothing leaked: loop devices backed by the data folder only for running
    or paused boxes, cgroups only for running or paused boxes, uid-range
    claims only for existing boxes, veth pairs only for running full-network
    boxes, the iptables rules not duplicated by restarts;
  - and after every box is deleted: no loop device, cgroup, uid claim, veth
    or box folder is left.

It runs in a network namespace of its own (full network mode's veth pairs
and iptables rules stay in it), on loopback only. Output is TAP plus a
summary; the exit status is 0 when every check passed.

    bench/chaos.sh [--minutes M] [--clients N] [--seed S]
"""

import argparse
import ctypes
import glob
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
import abserver  # noqa: E402

CLONE_NEWNET = 0x40000000
UID_RANGES = os.environ.get("AGENTBOX_UID_RANGES_DIR", "/var/lib/agentbox/uid-ranges")

ap = argparse.ArgumentParser(description="chaos soak of agentbox serve")
ap.add_argument("--minutes", type=float, default=8.0, help="workload time (default 8)")
ap.add_argument("--clients", type=int, default=6, help="client threads (default 6)")
ap.add_argument("--boxes", type=int, default=3, help="live boxes per client at most (default 3)")
ap.add_argument("--kill-every", type=float, nargs=2, default=(6.0, 25.0), metavar=("MIN", "MAX"),
                help="seconds between SIGKILLs, uniform (default 6 25)")
ap.add_argument("--seed", type=int, default=None)
ap.add_argument("--no-netns", action="store_true", help="stay in the caller's network namespace "
                "(no full-network boxes then)")
args = ap.parse_args()
seed = args.seed if args.seed is not None else random.randrange(1 << 30)

netns = False
if not args.no_netns and os.geteuid() == 0:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) == 0:
        netns = subprocess.run(["ip", "link", "set", "lo", "up"]).returncode == 0

budget = args.minutes * 60 + 600
h = abserver.ServerHarness(budget=budget, name="chaos")
h.diag("seed %d, %g minutes, %d clients, network namespace of its own: %s" % (
    seed, args.minutes, args.clients, netns))
config = {
    "limits": {"disk": "64M", "memory": "256M", "timeout": "30s"},
    "idle_pause": "0", "idle_stop": "0",   # boxes stay as the clients leave them
    "network_full": netns,
}
S = h.start_server(config=config)
DATA = os.path.realpath(S.data)
CG_PARENT = abserver.cgroup_parent(DATA)

lock = threading.Lock()
anomalies = []        # unexpected answers during the run (not failures by themselves)
counts = {}           # op -> {status: n}
kills = [0]
runner_fails = []     # runs answered {"success": false} (a run cut by a kill may say so)
stop_flag = threading.Event()
down = threading.Event()  # set while the killer restarts the server


def note(op, status):
    with lock:
        c = counts.setdefault(op, {})
        c[status] = c.get(status, 0) + 1


def anomaly(msg):
    with lock:
        anomalies.append("%.1fs %s" % (time.monotonic() - T0, msg))


ABSENT = None  # a file's state: its content (bytes), or ABSENT


class FileModel:
    def __init__(self):
        self.acked = ABSENT
        self.maybe = []  # outcomes of unanswered requests after the acknowledged one

    def ack(self, v):
        self.acked = v
        self.maybe = []

    def unsure(self, v):
        self.maybe.append(v)

    def allowed(self):
        return [self.acked] + self.maybe


class BoxModel:
    def __init__(self, box_id, net):
        self.id = box_id
        self.net = net
        self.state = "maybe"  # "yes" (acknowledged), "maybe", "deleted" (acknowledged), "maybe-deleted"
        self.files = {}


def is_ok(r):
    return 200 <= r.status < 300


def lost(r):
    return r.status == -1  # no answer: the server died (or was down)


class Client(threading.Thread):
    def __init__(self, k):
        super().__init__(daemon=True)
        self.k = k
        self.rng = random.Random(seed * 1000 + k)
        self.boxes = {}
        self.n = 0

    def live(self):
        return [b for b in self.boxes.values() if b.state in ("yes", "maybe")]

    def req(self, op, method, path, body=None, timeout=60, box=None):
        r = S.request(method, path, body, timeout=timeout)
        note(op, r.status)
        if r.status >= 500 and r.status != 503:
            anomaly("%s %s %s -> %d %s" % (op, method, path, r.status, r.text[:200]))
        if lost(r):
            time.sleep(0.3)
        if box and r.status == 404 and r.err_code == "not_found" and "no box" in r.text:
            if box.state == "yes":
                anomaly("%s %s: 404 for an acknowledged box: %s" % (op, box.id, r.text[:200]))
            elif box.state == "maybe":
                box.state = "maybe-deleted"  # its create never got an answer: gone (or never made)
        return r

    def run(self):
        while not stop_flag.is_set():
            try:
                self.step()
            except Exception as e:  # a bug in the soak itself: report and go on
                anomaly("client %d: %s: %s" % (self.k, type(e).__name__, e))
                time.sleep(0.5)

    def step(self):
        rng = self.rng
        live = self.live()
        if not live or (len(live) < args.boxes and rng.random() < 0.15):
            return self.create()
        b = rng.choice(live)
        op = rng.choices(
            ["write", "write_tool", "delete_file", "exec", "check_file", "bash", "stop", "start",
             "pause", "resume", "delete", "runner"],
            [20, 8, 5, 10, 10, 5, 4, 4, 4, 4, 2, 4])[0]
        getattr(self, "op_" + op)(b)

    def create(self):
        self.n += 1
        box_id = "ch%d-%d" % (self.k, self.n)
        net = "full" if (netns and self.k == 0 and self.n % 2 == 0) else "none"
        b = BoxModel(box_id, net)
        self.boxes[box_id] = b
        body = {"id": box_id}
        if net == "full":
            body["network"] = {"mode": "full"}
        r = self.req("create", "POST", "/v1/sandboxes", body)
        if r.status in (200, 201):
            b.state = "yes"
        elif not lost(r):
            b.state = "maybe"  # refused: it may exist from an earlier unanswered try (never here)
            if r.status != 503:
                anomaly("create %s -> %d %s" % (box_id, r.status, r.text[:200]))

    def fpath(self, b):
        return "/workspace/f%d.txt" % self.rng.randrange(4)

    def file_req(self, b, method, path, body=None, op="write"):
        q = urllib.parse.urlencode({"path": path})
        return self.req(op, method, "/v1/sandboxes/%s/files?%s" % (b.id, q), body, box=b)

    def content(self):
        return ("%d-%d-%s\n" % (self.k, self.rng.randrange(1 << 30), "x" * self.rng.randrange(200))).encode()

    def op_write(self, b):
        p, v = self.fpath(b), self.content()
        f = b.files.setdefault(p, FileModel())
        r = self.file_req(b, "PUT", p, v)
        if is_ok(r):
            f.ack(v)
        elif lost(r):
            f.unsure(v)

    def op_write_tool(self, b):
        p, v = self.fpath(b), self.content()
        f = b.files.setdefault(p, FileModel())
        r = self.req("write_file", "POST", "/v1/sandboxes/%s/tools/write_file" % b.id,
                     {"args": {"path": p, "content": v.decode()}}, box=b)
        if r.status == 200 and isinstance(r.json, dict) and r.json.get("is_error") is False:
            f.ack(v)
        elif lost(r) or r.status == 200:
            f.unsure(v)  # an is_error answer may still have written

    def op_delete_file(self, b):
        p = self.fpath(b)
        f = b.files.setdefault(p, FileModel())
        r = self.file_req(b, "DELETE", p, op="delete_file")
        if is_ok(r) or r.status == 404:
            f.ack(ABSENT)
        elif lost(r):
            f.unsure(ABSENT)

    def op_exec(self, b):
        """cat of a file whose state is certain: the answer must match."""
        sure = [(p, f) for p, f in b.files.items() if not f.maybe]
        if not sure:
            return self.op_bash(b)
        p, f = self.rng.choice(sure)
        r = self.req("exec", "POST", "/v1/sandboxes/%s/exec" % b.id,
                     {"command": "cat %s 2>/dev/null || echo ABSENT" % p}, box=b)
        if r.status == 200 and isinstance(r.json, dict) and b.state == "yes" and not f.maybe:
            got = r.json.get("stdout", "").encode()
            want = b"ABSENT\n" if f.acked is ABSENT else f.acked
            if got != want:
                anomaly("exec cat %s in %s: %r, acknowledged %r" % (p, b.id, got[:80], want[:80]))

    def op_check_file(self, b):
        sure = [(p, f) for p, f in b.files.items() if not f.maybe]
        if not sure or b.state != "yes":
            return
        p, f = self.rng.choice(sure)
        r = self.file_req(b, "GET", p, op="read")
        if r.status in (200, 404) and not f.maybe:
            got = r.body if r.status == 200 else ABSENT
            if got != f.acked:
                anomaly("GET %s in %s: %r, acknowledged %r" % (p, b.id, got and got[:80], f.acked and f.acked[:80]))

    def op_bash(self, b):
        r = self.req("bash", "POST", "/v1/sandboxes/%s/tools/bash" % b.id,
                     {"args": {"command": "echo $((6*7)); ls /workspace | wc -l"}}, box=b)
        if r.status == 200 and isinstance(r.json, dict) and "42" not in str(r.json.get("output")):
            anomaly("bash in %s: %r" % (b.id, r.json))

    def lifecycle(self, b, what):
        r = self.req(what, "POST", "/v1/sandboxes/%s/%s" % (b.id, what), {}, box=b)
        if not (is_ok(r) or lost(r) or r.status in (404, 409, 503)):
            anomaly("%s %s -> %d %s" % (what, b.id, r.status, r.text[:200]))

    def op_stop(self, b):
        self.lifecycle(b, "stop")

    def op_start(self, b):
        self.lifecycle(b, "start")

    def op_pause(self, b):
        self.lifecycle(b, "pause")

    def op_resume(self, b):
        self.lifecycle(b, "resume")

    def op_delete(self, b):
        r = self.req("delete", "DELETE", "/v1/sandboxes/%s" % b.id, box=b)
        if is_ok(r):
            b.state = "deleted"
        elif lost(r):
            b.state = "maybe-deleted"

    def op_runner(self, b):
        if self.rng.random() < 0.5:
            body = {"code": "def main(v):\n    return {'y': v['a'] * 2}\n", "variables": {"a": self.k}}
            r = self.req("runner", "POST", "/sandbox/python", body)
        else:
            body = {"code": "function main({a}) { return {y: a * 2} }", "variables": {"a": self.k}}
            r = self.req("runner", "POST", "/sandbox/js", body)
        if r.status == 200 and isinstance(r.json, dict) and r.json.get("success") is True:
            if (r.json.get("data") or {}).get("codeReturn") != {"y": self.k * 2}:
                anomaly("runner answered %r" % r.json)
        elif r.status == 200:
            with lock:
                runner_fails.append(str(r.json)[:160])


def iptables_lines():
    out = []
    for t in ("filter", "nat"):
        p = subprocess.run(["iptables-save", "-t", t], capture_output=True, text=True)
        out += [l for l in p.stdout.splitlines() if "AGENTBOX" in l and not l.startswith(":")]
    return sorted(out)


def veths():
    p = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True)
    return sorted(set(re.findall(r"^\d+: (abnet\d+)", p.stdout, re.M)))


def killer():
    rng = random.Random(seed)
    while not stop_flag.wait(rng.uniform(*args.kill_every)):
        S.kill9()
        kills[0] += 1
        time.sleep(rng.uniform(0, 1.0))
        why = S.start(new_port=False)
        if why:
            anomaly("restart #%d failed: %s" % (kills[0], why))
            time.sleep(2)
            why = S.start(new_port=False)
            if why:
                anomaly("restart #%d failed twice: %s" % (kills[0], why))


# ---- the run ------------------------------------------------------------------

T0 = time.monotonic()
ipt0 = iptables_lines()
clients = [Client(k) for k in range(args.clients)]
for c in clients:
    c.start()
kt = threading.Thread(target=killer, daemon=True)
kt.start()
time.sleep(args.minutes * 60)
stop_flag.set()
kt.join()
for c in clients:
    c.join(timeout=120)
h.ok(not any(c.is_alive() for c in clients), "every client finished its last request")

# One more crash and recovery, then the checks. A minute of quiet first: the
# backend gives back claims of boxes that do not exist only when they are a
# minute old (younger ones may be creates in progress).
time.sleep(61)
S.kill9()
kills[0] += 1
why = S.start(new_port=False)
if why:
    h.bail_server(S, why)
h.diag("workload done after %.0fs: %d SIGKILLs" % (time.monotonic() - T0, kills[0]))

boxes = {}
for c in clients:
    boxes.update(c.boxes)


def records():
    lst = S.list()
    return None if lst is None else {b["id"]: b for b in lst}


# Deletes are asynchronous: wait until none is in progress.
recs = None
for _ in range(120):
    recs = records()
    if recs is not None and not any(b["status"] in ("creating", "deleting") for b in recs.values()):
        break
    time.sleep(1)
h.ok(recs is not None, "GET /v1/sandboxes answers after the last restart")
recs = recs or {}

bad = {i: b["status"] for i, b in recs.items() if b["status"] not in ("running", "paused", "stopped")}
h.ok(not bad, "every box is running, paused or stopped (%d boxes)" % len(recs), "not so: %r" % bad)

missing = [b.id for b in boxes.values() if b.state == "yes" and b.id not in recs]
h.ok(not missing, "every acknowledged create exists", "missing: %r" % missing)
undead = [b.id for b in boxes.values() if b.state == "deleted" and b.id in recs]
h.ok(not undead, "every acknowledged delete is gone", "still there: %r" % undead)
strangers = [i for i in recs if i not in boxes]
h.ok(not strangers, "no box the clients never asked for", "strangers: %r" % strangers)

# Files as last acknowledged (reading a stopped box's file starts it).
wrong, checked = [], 0
for b in boxes.values():
    if b.id not in recs:
        continue
    for p, f in sorted(b.files.items()):
        q = urllib.parse.urlencode({"path": p})
        r = S.get("/v1/sandboxes/%s/files?%s" % (b.id, q), timeout=60)
        if r.status not in (200, 404):
            wrong.append("%s:%s -> %d %s" % (b.id, p, r.status, r.text[:120]))
            continue
        got = r.body if r.status == 200 else ABSENT
        checked += 1
        if got not in f.allowed():
            wrong.append("%s:%s = %r, acknowledged %r (or one of %d unanswered)" % (
                b.id, p, got and got[:60], f.acked and f.acked[:60], len(f.maybe)))
h.ok(not wrong, "every file is as last acknowledged (%d files)" % checked, "\n".join(wrong[:20]))

# The store agrees with the disk.
recs = records() or {}
dirs = {os.path.basename(d) for d in glob.glob(os.path.join(DATA, "boxes", "*")) if os.path.isdir(d)}
system = {d for d in dirs if d.startswith("sys-")}
dirs -= system
h.ok(dirs == set(recs), "the store agrees with the disk: box folders = records (%d)" % len(dirs),
     "folders without a record: %r; records without a folder: %r" % (sorted(dirs - set(recs)),
                                                                   sorted(set(recs) - dirs)))


def loops():
    """{loop device: box id} of loop devices backed by files of the data folder."""
    out = {}
    for f in glob.glob("/sys/block/loop*/loop/backing_file"):
        try:
            with open(f) as fh:
                back = fh.read().strip()
        except OSError:
            continue
        if back.startswith(DATA + "/"):
            rel = back[len(DATA) + 1:].split("/")
            out[f.split("/")[3]] = rel[1] if rel[0] == "boxes" and len(rel) > 2 else "/".join(rel)
    return out


def cgroups():
    return sorted({os.path.basename(d) for d in abserver.cgroup_children(CG_PARENT)})


def uid_claims():
    out = {}
    for f in glob.glob(os.path.join(UID_RANGES, "*")):
        try:
            with open(f) as fh:
                p = fh.read().strip()
        except OSError:
            continue
        if p.startswith(DATA + "/"):
            out[os.path.basename(f)] = os.path.basename(p)
    return out


def check_leaks(when, alive, existing, full_alive):
    lp = loops()
    extra = {d: i for d, i in lp.items() if i not in alive}
    h.ok(not extra, "%s: loop devices only for running or paused boxes (%d)" % (when, len(lp)),
         "extra: %r" % extra)
    cg = [c for c in cgroups() if c not in alive]
    h.ok(not cg, "%s: cgroups only for running or paused boxes" % when, "extra: %r" % cg)
    uc = {s: i for s, i in uid_claims().items() if i not in existing}
    h.ok(not uc, "%s: uid-range claims only for existing boxes" % when, "extra: %r" % uc)
    if netns:
        v = veths()
        h.ok(len(v) <= full_alive, "%s: veth pairs only for running full-network boxes (%d, %d boxes)" % (
            when, len(v), full_alive), "veths: %r" % v)
        ipt = iptables_lines()
        h.ok(ipt == ipt0 or not ipt0, "%s: the iptables rules are the first start's, not duplicated (%d)" % (
            when, len(ipt)), "now:\n%s\nat the start:\n%s" % ("\n".join(ipt), "\n".join(ipt0)))


recs = records() or {}
alive = {i for i, b in recs.items() if b["status"] in ("running", "paused")} | system
full_alive = sum(1 for i in alive if i in boxes and boxes[i].net == "full")
check_leaks("live", alive, set(recs) | system, full_alive)

# Delete everything; then nothing may be left.
for i in recs:
    S.delete("/v1/sandboxes/%s" % i)
gone = False
for _ in range(120):
    left = records()
    if left == {}:
        gone = True
        break
    time.sleep(1)
h.ok(gone, "every box is deleted after DELETE", "left: %r" % (left and sorted(left)))
for _ in range(20):  # the last folders go after the record
    left_dirs = [d for d in glob.glob(os.path.join(DATA, "boxes", "*")) if not os.path.basename(d).startswith("sys-")]
    if not left_dirs:
        break
    time.sleep(0.5)
h.ok(not left_dirs, "no box folder left", "left: %r" % left_dirs)
check_leaks("after deleting every box", system, system, 0)

# ---- summary --------------------------------------------------------------------
total = sum(sum(v.values()) for v in counts.values())
lost_n = sum(v.get(-1, 0) for v in counts.values())
h.diag("requests: %d (%d unanswered: the server was killed under them or was down), SIGKILLs: %d, "
       "boxes created: %d" % (total, lost_n, kills[0], sum(c.n for c in clients)))
for op in sorted(counts):
    h.diag("  %-12s %s" % (op, " ".join("%s:%d" % (k, v) for k, v in sorted(counts[op].items()))))
if runner_fails:
    h.diag("runner runs answered success=false: %d, e.g. %s" % (len(runner_fails), runner_fails[:3]))
h.ok(not anomalies, "no unexpected answer during the run (%d)" % len(anomalies), "\n".join(anomalies[:40]))
summary = {"seed": seed, "minutes": args.minutes, "clients": args.clients, "kills": kills[0],
           "requests": total, "unanswered": lost_n, "boxes": sum(c.n for c in clients),
           "files_checked": checked, "anomalies": len(anomalies), "counts": counts}
h.diag("summary " + json.dumps(summary, sort_keys=True))
h.done()
