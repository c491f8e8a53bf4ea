#!/usr/bin/env python3
"""Three nodes as one service (docs/fleet.md): three servers on
127.0.0.1-3 sharing the suite's PostgreSQL. A quota of 3 boxes holds under
creates racing on all three nodes (the count and the record are one step
for the fleet); concurrent acquires of one app's keys through all three
nodes make exactly one box, the others get it (a stopped one is started by
its node); GET /v1/sandboxes on any node lists every node's boxes; one
/v1/events stream on any node carries the events of all nodes, each naming
its node; an app's exec rate holds across its boxes' nodes (each node takes
its share: its running boxes of the app over the fleet's)."""
import json
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import abfleet  # noqa: E402

h = abserver.ServerHarness(budget=200)
F = abfleet.Fleet(h, name="fleetsvc", config={"quotas": {"apps": {"qapp": {"max_boxes": 3},
                                                                 "rapp": {"exec_rate": 0.2, "exec_burst": 4}}}})


def race(calls):
    res = [None] * len(calls)

    def run(i, fn):
        res[i] = fn()

    ts = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(calls)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    return res


try:
    n1, n2, n3 = F.nodes
    KQ = n1.post("/v1/keys", {"app_id": "qapp"}).get("key") or "none"
    KA = n1.post("/v1/keys", {"app_id": "acqapp"}).get("key") or "none"

    # ---- a quota of 3 under racing creates on three nodes --------------------------------------
    calls = [(lambda s=s, i=i: s.post("/v1/sandboxes", {"app_id": "qapp", "user_id": "u", "chat_id": "q%d" % i},
                                      token=KQ, timeout=90))
             for i, s in enumerate([n1, n2, n3] * 3)]
    res = race(calls)
    made = [r for r in res if r.status == 201]
    h.eq(len(made), 3, "9 creates racing on 3 nodes for an app with max_boxes 3: 3 made",
         "\n".join(r.describe()[:200] for r in res))
    h.eq(sorted(r.status for r in res if r.status != 201), [429] * 6, "... the other 6 refused with 429")
    h.ok(all(r.err_code == "quota_exceeded" for r in res if r.status == 429), "... as quota_exceeded")
    r = n2.get("/v1/sandboxes", token=KQ)
    h.eq(len(r.get("sandboxes") or []), 3, "the app has 3 boxes, listed through any node", r.describe())
    nodes = sorted(set(b.get("node") for b in r.get("sandboxes") or []))
    h.diag("the 3 boxes are on %s" % nodes)

    # ---- one box per keys through three nodes ------------------------------------------------------
    keys = {"app_id": "acqapp", "user_id": "u", "chat_id": "one"}
    res = race([(lambda s=s: s.post("/v1/sandboxes", keys, token=KA, timeout=90)) for s in [n1, n2, n3] * 4])
    h.eq(sorted(r.status for r in res), [200] * 11 + [201], "12 acquires of one key on 3 nodes: one 201",
         "\n".join(r.describe()[:200] for r in res if r.status not in (200, 201)))
    ids = sorted(set(r.get("id") for r in res))
    h.eq(len(ids), 1, "... one box id", repr(ids))
    owner = set(r.get("node") for r in res)
    h.eq(len(owner), 1, "... on one node", repr(owner))
    BID = ids[0]
    owner = owner.pop()
    other = [s for s in F.nodes if s.name != owner][0]
    r = other.post("/v1/sandboxes/%s/stop" % BID, {}, token=KA)
    h.eq((r.status, r.get("status")), (200, "stopped"), "stop it through a node that does not own it",
         r.describe())
    r = other.post("/v1/sandboxes", keys, token=KA)
    h.eq((r.status, r.get("status"), r.get("id")), (200, "running", BID),
         "an acquire through that node starts it on its own node", r.describe())
    r = other.exec(BID, "echo ok", token=KA)
    h.eq(r.get("stdout"), "ok\n", "... and it runs there", r.describe())

    # ---- the fleet's events on one stream ------------------------------------------------------------
    ev = n3.sse("/v1/events")
    h.eq(ev.status, 200, "GET /v1/events on n3", ev.describe())
    made = {}
    for s in (n1, n2):
        r = s.post("/v1/sandboxes", {"app_id": "evapp", "user_id": "u", "chat_id": s.name})
        made[r.get("id")] = s.name
    seen = {}

    def both(e):
        if e.type == "box.created":
            d = json.loads(e.data)
            if d.get("box_id") in made:
                seen[d["box_id"]] = d.get("node")
        return len(seen) == 2

    ev.collect(until=both, timeout=15)
    h.eq(seen, made, "n3's stream carries the box.created events of n1 and n2, each naming its node")
    ev.close()
    r = n3.sse("/v1/events", token=KA)
    got = r.collect(timeout=2)
    h.ok(not any((json.loads(e.data).get("app_id") == "evapp") for e in got if e.data and e.data.startswith("{")),
         "... an API key's stream on n3 carries none of another app's")
    r.close()

    # ---- the exec rate, fleet-wide -----------------------------------------------------------------
    KR = n1.post("/v1/keys", {"app_id": "rapp"}).get("key") or "none"
    rb = [s.post("/v1/sandboxes", {"app_id": "rapp", "user_id": "u", "chat_id": s.name}, token=KR).get("id")
          for s in (n1, n2)]
    got = [n3.exec(b, "true", token=KR).status for _ in range(8) for b in rb]
    h.ok(3 <= got.count(200) <= 5 and got.count(200) + got.count(429) == len(got),
         "an app with a burst of 4 execs and boxes on two nodes: 4 of 16 run fleet-wide, not 4 per node",
         repr(got))
    r = n1.delete("/v1/sandboxes?app_id=rapp", token=KR)
    h.eq((r.status, sorted(r.get("deleting") or [])), (202, sorted(rb)), "delete its boxes by app (both nodes')",
         r.describe())
    h.ok(abserver.wait_for(lambda: not n3.get("/v1/sandboxes", token=KR).get("sandboxes"), timeout=30),
         "... and they are gone")

    # ---- the fleet's list ------------------------------------------------------------------------------
    for s in F.nodes:
        r = s.get("/v1/sandboxes")
        h.eq(len(r.get("sandboxes") or []), 6, "%s lists every node's 6 boxes" % s.name, r.describe())
finally:
    F.close()
h.done()
