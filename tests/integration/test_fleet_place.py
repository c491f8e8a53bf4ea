#!/usr/bin/env python3
"""Placement in a fleet (docs/fleet.md): with placement spread a new box
goes to a live node with room, the better of two sampled (fewer running
boxes): creates through one node spread over the fleet; POST
/v1/nodes/{id}/drain stops placing on a node (a create through a draining
node goes elsewhere; every node draining: 503), undrain places there again;
a box that exists is acquired where it is, never placed anew; racing
acquires of new keys through every node, each placing it, make one box."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import abfleet  # noqa: E402

h = abserver.ServerHarness(budget=200)
F = abfleet.Fleet(h, name="fleetplace", placement="spread")
try:
    n1, n2, n3 = F.nodes
    where = []
    for i in range(6):
        r = n1.post("/v1/sandboxes", {})
        h.eq(r.status, 201, "create %d through n1" % (i + 1), r.describe())
        where.append(r.get("node"))
        time.sleep(0.5)  # a heartbeat, so the next pick sees this box counted
    h.ok(len(set(where)) >= 2, "creates through n1 spread over the fleet", repr(where))
    h.diag("placed on %s" % where)

    r = n1.post("/v1/nodes/n2/drain")
    h.eq(r.status, 200, "drain n2", r.describe())
    r = n1.post("/v1/nodes/n3/drain")
    h.eq(r.status, 200, "drain n3", r.describe())
    time.sleep(0.8)  # every node's view of the nodes is a heartbeat old
    got = [n2.post("/v1/sandboxes", {}) for _ in range(3)]
    h.eq([(r.status, r.get("node")) for r in got], [(201, "n1")] * 3,
         "with n2 and n3 draining, creates through n2 all go to n1", "\n".join(r.describe() for r in got))
    r = n1.post("/v1/nodes/n1/drain")
    time.sleep(0.8)
    r = n3.post("/v1/sandboxes", {})
    h.eq((r.status, r.err_code), (503, "unavailable"), "every node draining: a create is 503", r.describe())
    h.contains(r.err_message or "", "draining", "... saying why")
    for n in ("n1", "n2", "n3"):
        n1.post("/v1/nodes/%s/undrain" % n)
    time.sleep(0.8)
    r = n3.post("/v1/sandboxes", {})
    h.eq(r.status, 201, "undrained: creates are placed again", r.describe())

    keys = {"app_id": "placeapp", "user_id": "u", "chat_id": "c"}
    r = n1.post("/v1/sandboxes", keys)
    h.eq(r.status, 201, "a box of keys", r.describe())
    home, bid = r.get("node"), r.get("id")
    for s in F.nodes:
        r = s.post("/v1/sandboxes", keys)
        h.eq((r.status, r.get("id"), r.get("node")), (200, bid, home),
             "acquiring it through %s finds it on %s" % (s.name, home), r.describe())

    # racing acquires of new keys, each node placing them: still one box
    import threading
    keys2 = {"app_id": "placeapp", "user_id": "u", "chat_id": "race"}
    res = [None] * 9

    def acq(i):
        res[i] = F.nodes[i % 3].post("/v1/sandboxes", keys2, timeout=90)

    ts = [threading.Thread(target=acq, args=(i,)) for i in range(9)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    h.eq(sorted(r.status for r in res), [200] * 8 + [201], "9 racing acquires of new keys, placed: one 201",
         "\n".join(r.describe()[:200] for r in res))
    h.eq(len(set(r.get("id") for r in res)), 1, "... one box")
    h.eq(len(set(r.get("node") for r in res)), 1, "... on one node")
finally:
    F.close()
h.done()
