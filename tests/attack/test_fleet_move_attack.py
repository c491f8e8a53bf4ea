#!/usr/bin/env python3
"""Attacks on moving boxes between fleet nodes (docs/fleet.md, "Moving a
box"); each check passes only when the attack fails. Three nodes on
127.0.0.1-3 share the suite's PostgreSQL (AGENTBOX_TEST_PG_URL; skipped
without it).

- App A's key moves app B's stopped box, through its owner and through
  another node. Must hold: 404, and the box stays B's, on its node, whole.
- The node-to-node calls of a move (receive, the disk's pull, commit,
  abort) with an app key, with the admin token, with no credential, with
  forged fleet identity headers, with a wrong secret. Must hold: 401 each.
- With the fleet's secret, crafted calls: a receive naming a path outside
  the data folder as the box, a receive of B's box with settings naming
  another box, a receive of B's box with a made-up ticket, a pull of B's
  disk with a made-up ticket, a commit of B's box to a node the store does
  not name. Must hold: refused (400, 404 or 409), nothing staged or adopted
  on the target, the store's owner unchanged."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import abfleet  # noqa: E402

h = abserver.ServerHarness(budget=150)
F = abfleet.Fleet(h, name="fleetmoveatk", config={"idle_pause": "1h", "idle_stop": "2h"})


def staged(node):
    d = os.path.join(node.data, "incoming")
    return sorted(os.listdir(d)) if os.path.isdir(d) else []


try:
    n1, n2, n3 = F.nodes
    KA, KB, BB = F.two_apps()
    r = n1.post("/v1/sandboxes/%s/stop" % BB, {}, token=KB)
    h.eq(r.status, 200, "... stopped", r.describe())

    def intact(what):
        b = n3.box(BB) or {}
        h.eq((b.get("node"), b.get("app_id")), ("n1", "appb"), "%s: B's box is still B's, on n1" % what,
             json.dumps(b)[:300])
        h.ok(os.path.isdir(os.path.join(n1.data, "boxes", BB)) and
             not os.path.exists(os.path.join(n2.data, "boxes", BB)) and not staged(n2),
             "%s: ... its disk only on n1, nothing staged on n2" % what, str(staged(n2)))

    # ---- another app's key --------------------------------------------------------------------
    for via in (n1, n2):
        r = via.post("/v1/sandboxes/%s/move" % BB, {"node": "n2"}, token=KA)
        h.eq(r.status, 404, "app A moves B's box through %s: 404" % via.name, r.describe())
    intact("after app A's moves")

    # ---- the node-to-node calls without the fleet's secret --------------------------------------
    recv = {"box": BB, "backend_id": BB, "from": "n1", "ticket": "0" * 32, "config": "{}",
            "size": 1 << 20, "data": 0}
    calls = [
        ("receive", lambda **kw: n2.post("/v1/fleet/moves", recv, **kw)),
        ("pull the disk", lambda **kw: n1.get("/v1/fleet/moves/%s/disk?box=%s" % ("0" * 32, BB), **kw)),
        ("commit", lambda **kw: n2.post("/v1/fleet/moves/%s/commit?box=%s" % (BB, BB), {}, **kw)),
        ("abort", lambda **kw: n1.post("/v1/fleet/moves/%s/abort?box=%s" % (BB, BB), {}, **kw)),
    ]
    forged = {"X-Agentbox-Fleet-App": "appb", "X-Agentbox-Fleet-Admin": "1", "X-Agentbox-Fleet-From": "n1"}
    wrong = dict(forged, **{"X-Agentbox-Fleet-Secret": abfleet.SECRET[:-1] + "x"})
    for what, call in calls:
        for who, kw in (("an app key", {"token": KA}), ("the box owner's key", {"token": KB}),
                        ("the admin token", {}), ("no credential", {"token": None}),
                        ("forged fleet headers", {"token": None, "headers": forged}),
                        ("a wrong fleet secret", {"token": None, "headers": wrong})):
            r = call(**kw)
            h.eq(r.status, 401, "%s of a move with %s: 401" % (what, who), r.describe())
    intact("after the calls without the secret")

    # ---- crafted calls with the secret ------------------------------------------------------------
    N2N = {"X-Agentbox-Fleet-Secret": abfleet.SECRET, "X-Agentbox-Fleet-From": "n2"}
    for bad in ("../../etc", "..", "a/b", "/tmp/x"):
        r = n2.post("/v1/fleet/moves", dict(recv, backend_id=bad), token=None, headers=N2N)
        h.eq(r.status, 400, "a receive naming %r as the box's folder: 400" % bad, r.describe())
        r = n2.post("/v1/fleet/moves", dict(recv, box=bad), token=None, headers=N2N)
        h.eq(r.status, 400, "a receive naming %r as the box: 400" % bad, r.describe())
    other = json.dumps({"id": "someoneelse", "limits": {}, "uid_base": 1048576, "created_at": 1})
    r = n2.post("/v1/fleet/moves", dict(recv, config=other), token=None, headers=N2N)
    h.eq(r.status, 400, "a receive of B's box with settings of another box: 400", r.describe())
    r = n2.post("/v1/fleet/moves", recv, token=None, headers=N2N)
    h.eq(r.status, 400, "a receive with settings that are no box's: 400", r.describe())
    mine = json.dumps({"id": BB, "limits": {}, "uid_base": 1048576, "created_at": 1})
    r = n2.post("/v1/fleet/moves", dict(recv, config=mine), token=None, headers=N2N)
    h.eq(r.status, 409, "a receive of B's box with a made-up ticket: the owner sends nothing (409)",
         r.describe())
    r = n2.post("/v1/fleet/moves", dict(recv, **{"from": "n3"}), token=None, headers=N2N)
    h.eq(r.status, 409, "a receive of B's box from a node that does not own it: 409", r.describe())
    r = n1.get("/v1/fleet/moves/%s/disk?box=%s" % ("0" * 32, BB), token=None, headers=N2N)
    h.eq(r.status, 404, "a pull of B's disk with a made-up ticket: 404", r.describe())
    h.ok(b"ABMOVE1" not in (r.body or b""), "... and no byte of it")
    r = n2.post("/v1/fleet/moves/%s/commit?box=%s" % (BB, BB), {}, token=None, headers=N2N)
    h.eq(r.status, 409, "a commit of B's box on a node the store does not name: 409", r.describe())
    r = n1.post("/v1/fleet/moves/%s/abort?box=%s" % (BB, BB), {}, token=None, headers=N2N)
    h.eq(r.status, 409, "an abort on the box's owner keeps its copy: 409", r.describe())
    intact("after the crafted calls")

    r = n2.post("/v1/sandboxes/%s/start" % BB, {}, token=KB)
    h.eq(r.status, 200, "B starts its box", r.describe())
    r = n2.exec(BB, "cat /workspace/b.txt", token=KB)
    h.eq((r.status, r.get("stdout")), (200, "b-secret\n"), "... its file untouched", r.describe())
finally:
    F.close()
h.done()
