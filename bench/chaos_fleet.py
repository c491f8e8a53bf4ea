#!/usr/bin/env python3
"""chaos_fleet.py - the chaos soak's fleet mode (bench/chaos.sh --fleet;
docs/fleet.md): three nodes on 127.0.0.1-3 sharing a PostgreSQL database of
their own (AGENTBOX_TEST_PG_URL, from scripts/pg.sh). Clients create boxes,
write files, exec, and stop boxes and move them to random nodes, through
random nodes while a killer SIGKILLs a random
node at random moments and starts it again. Every client records what the
fleet acknowledged: a box made (201), a file written (2xx), a box deleted
(202); a request that got no answer (its node died under it) may or may not
have happened. At the end, with every node up again, it checks:

  - no box lost: every acknowledged create is in the store and answers
    through every node, with its files as last acknowledged (or one of the
    unanswered writes after it); every acknowledged delete is gone;
  - none owned twice: every box folder is on exactly one node's disk;
  - the store agrees with every node's disks: the boxes the store gives
    node N are the folders in N's data folder, and no more.

Output is TAP; the exit status is 0 when every check passed.

    bench/chaos.sh --fleet [--minutes M] [--clients N] [--seed S]
"""
import argparse
import glob
import os
import random
import sys
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "lib"))
import abserver  # noqa: E402
import abfleet  # noqa: E402

ap = argparse.ArgumentParser(description="chaos soak of a three-node fleet")
ap.add_argument("--fleet", action="store_true", help="(chaos.sh's switch to this mode)")
ap.add_argument("--minutes", type=float, default=4.0, help="workload time (default 4)")
ap.add_argument("--clients", type=int, default=6, help="client threads (default 6)")
ap.add_argument("--kill-every", type=float, nargs=2, default=(5.0, 15.0), metavar=("MIN", "MAX"))
ap.add_argument("--seed", type=int, default=None)
args = ap.parse_args()
seed = args.seed if args.seed is not None else random.randrange(1 << 30)

h = abserver.ServerHarness(budget=args.minutes * 60 + 600, name="chaos_fleet")
h.diag("seed %d, %g minutes, %d clients" % (seed, args.minutes, args.clients))
F = abfleet.Fleet(h, name="chaos", config={"idle_pause": "0", "idle_stop": "0",
                                           "limits": {"disk": "64M", "memory": "256M", "timeout": "30s"}},
                  heartbeat="500ms", down_after="2s", placement="spread")
lock = threading.Lock()
stop = threading.Event()
kills = [0]
counts = {}


def note(op, status):
    with lock:
        c = counts.setdefault(op, {})
        c[status] = c.get(status, 0) + 1


class Box:
    def __init__(self, bid):
        self.id = bid
        self.state = "yes"       # "yes", "deleted", "maybe-deleted"
        self.acked = None        # the file's acknowledged content (None: never written)
        self.maybe = []          # unanswered writes after it


class Client(threading.Thread):
    def __init__(self, k):
        super().__init__(daemon=True)
        self.rng = random.Random(seed * 100 + k)
        self.k = k
        self.boxes = {}

    def node(self):
        return self.rng.choice(F.nodes)

    def run(self):
        n = 0
        while not stop.is_set():
            live = [b for b in self.boxes.values() if b.state == "yes"]
            op = self.rng.choice(["create"] * (3 if len(live) < 3 else 0) + ["write"] * 4 + ["exec"] * 3 +
                                 ["delete"] * (1 if live else 0) + ["move"] * (1 if live else 0)) \
                if live else "create"
            s = self.node()
            if op == "create":
                n += 1
                r = s.post("/v1/sandboxes", {"app_id": "chaos", "user_id": "c%d" % self.k,
                                             "chat_id": "b%d" % n}, timeout=60)
                note(op, r.status)
                if r.status == 201:
                    self.boxes[r.get("id")] = Box(r.get("id"))
                continue
            b = self.rng.choice(live)
            if op == "write":
                v = ("%d-%d" % (self.k, self.rng.randrange(1 << 30))).encode()
                r = s.put(s.file_path(b.id, "/workspace/f.txt"), v, timeout=60)
                note(op, r.status)
                if 200 <= r.status < 300:
                    b.acked, b.maybe = v, []
                elif r.status < 0:
                    b.maybe.append(v)
            elif op == "exec":
                r = s.exec(b.id, "true", http_timeout=60)
                note(op, r.status)
            elif op == "move":
                # a stopped box moves to a random node (its own: nothing done);
                # its next use starts it there
                r = s.post("/v1/sandboxes/%s/stop" % b.id, {}, timeout=60)
                note("stop", r.status)
                if r.status == 200:
                    r = s.post("/v1/sandboxes/%s/move" % b.id, {"node": self.node().name}, timeout=120)
                    note(op, r.status)
            else:
                r = s.delete("/v1/sandboxes/%s" % b.id, timeout=60)
                note(op, r.status)
                if r.status == 202:
                    b.state = "deleted"
                elif r.status < 0:
                    b.state = "maybe-deleted"
            time.sleep(self.rng.uniform(0, 0.2))


def killer():
    rng = random.Random(seed)
    while not stop.wait(rng.uniform(*args.kill_every)):
        s = rng.choice(F.nodes)
        s.kill9()
        kills[0] += 1
        time.sleep(rng.uniform(0.5, 3.0))
        why = s.start(new_port=False)
        if why:
            h.diag("restart of %s failed: %s" % (s.name, why))


try:
    clients = [Client(k) for k in range(args.clients)]
    for c in clients:
        c.start()
    kt = threading.Thread(target=killer, daemon=True)
    kt.start()
    time.sleep(args.minutes * 60)
    stop.set()
    kt.join()
    for c in clients:
        c.join(120)
    for s in F.nodes:
        if not s.alive():
            why = s.start(new_port=False)
            if why:
                h.bail_server(s, why)
    h.diag("workload done: %d SIGKILLs; answers %r" % (kills[0], counts))
    ok = abserver.wait_for(lambda: all(n["state"] == "up" for n in F.nodes[0].get("/v1/nodes").get("nodes") or []),
                           timeout=30)
    h.ok(ok, "every node is up again")

    def records():
        lst = F.nodes[0].get("/v1/sandboxes", timeout=60).get("sandboxes")
        return None if lst is None else {b["id"]: b for b in lst}

    recs = None
    for _ in range(120):
        recs = records()
        if recs is not None and not any(b["status"] in ("creating", "deleting") for b in recs.values()):
            break
        time.sleep(1)
    recs = recs or {}
    boxes = {}
    for c in clients:
        boxes.update(c.boxes)
    missing = [b.id for b in boxes.values() if b.state == "yes" and b.id not in recs]
    h.ok(not missing, "no box lost: every acknowledged create exists (%d boxes)" % len(recs), repr(missing))
    undead = [b.id for b in boxes.values() if b.state == "deleted" and b.id in recs]
    h.ok(not undead, "every acknowledged delete is gone", repr(undead))
    bad = {i: b["status"] for i, b in recs.items() if b["status"] not in ("running", "paused", "stopped")}
    h.ok(not bad, "every box is running, paused or stopped", repr(bad))

    wrong = []
    for b in boxes.values():
        if b.id not in recs or b.acked is None:
            continue
        s = random.Random(b.id).choice(F.nodes)
        r = s.get(s.file_path(b.id, "/workspace/f.txt"), timeout=60)
        if r.status != 200 or r.body not in [b.acked] + b.maybe:
            wrong.append("%s via %s: %d %r (acknowledged %r)" % (b.id, s.name, r.status, r.body[:40], b.acked))
    h.ok(not wrong, "every file is as last acknowledged, read through a random node", "\n".join(wrong[:20]))

    on_disk = {}
    for s in F.nodes:
        for d in glob.glob(os.path.join(s.data, "boxes", "*")):
            name = os.path.basename(d)
            if os.path.isdir(d) and not name.startswith("sys-"):
                on_disk.setdefault(name, []).append(s.name)
    twice = {i: n for i, n in on_disk.items() if len(n) > 1}
    h.ok(not twice, "no box is on two nodes' disks", repr(twice))
    disagree = []
    for i, b in recs.items():
        if on_disk.get(i) != [b.get("node")]:
            disagree.append("%s: store says %s, disks %s" % (i, b.get("node"), on_disk.get(i)))
    for i, n in on_disk.items():
        if i not in recs:
            disagree.append("%s: on %s's disk, not in the store" % (i, n))
    h.ok(not disagree, "the store agrees with every node's disks", "\n".join(disagree[:20]))
finally:
    F.close()
h.done()
