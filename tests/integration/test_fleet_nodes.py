#!/usr/bin/env python3
"""Nodes of a fleet (docs/fleet.md): three servers on 127.0.0.1-3 sharing
the suite's PostgreSQL register themselves and heartbeat their capacity;
GET /v1/nodes (admin only) lists them up, draining or down; a node killed
with -9 reads down after down_after and up again when it returns; its boxes
read "unavailable" naming it meanwhile; `agentbox nodes` lists them from the
store. Without fleet: settings a server lists no nodes and keeps SQLite; bad
fleet settings stop the server with a message naming the key."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import abfleet  # noqa: E402
import abtest  # noqa: E402

h = abserver.ServerHarness(budget=150)

# ---- without fleet: the single server of today -------------------------------
solo = h.start_server(name="solo", data=h.new_data_dir("solo"))
r = solo.get("/v1/nodes")
h.eq((r.status, r.get("fleet"), r.get("nodes")), (200, False, []),
     "a server without fleet: settings lists no nodes", r.describe())
h.eq((solo.health() or {}).get("store"), "sqlite", "... and keeps its SQLite store")
r = solo.post("/v1/nodes/n1/drain")
h.eq(r.status, 404, "... and has no node to drain", r.describe())
solo.stop()

F = abfleet.Fleet(h, name="fleetnodes")
try:
    n1, n2, n3 = F.nodes

    # ---- settings checked at the start ----------------------------------------
    bad = h.server(name="bad", data=h.new_data_dir("bad"), token=abfleet.TOKEN,
                   config={"fleet": {"node": "nx", "url": "http://127.0.0.9:1",
                                     "secret_file": F.secret_file}})
    bad.expect_exit = True
    why = bad.start(timeout=10)
    h.ok(why and "exited" in why, "a fleet node on SQLite does not start", why)
    h.contains(bad.log(), "postgres", "... saying a fleet shares a PostgreSQL store")
    loose = os.path.join(h.root, "loose.secret")
    with open(loose, "w") as f:
        f.write(abfleet.SECRET + "\n")
    os.chmod(loose, 0o644)
    bad2 = h.server(name="bad2", data=h.new_data_dir("bad2"), token=abfleet.TOKEN,
                    config={"store": F.store_url,
                            "fleet": {"node": "nx", "url": "http://127.0.0.9:1",
                                      "secret_file": loose}})
    bad2.expect_exit = True
    why = bad2.start(timeout=10)
    h.ok(why and "exited" in why, "a secret file every user can read is refused", why)
    h.contains(bad2.log(), "readable by every user", "... saying why")
    h.not_contains(bad2.log(), abfleet.SECRET, "... and the secret is never logged")
    h.not_contains(n1.log(), abfleet.SECRET, "a node's log holds no secret")

    # ---- the list -------------------------------------------------------------
    def nodes(via, **kw):
        r = via.get("/v1/nodes", **kw)
        return r, {n["id"]: n for n in (r.get("nodes") or [])}

    r, ns = nodes(n2)
    h.eq((r.status, r.get("fleet"), r.get("node")), (200, True, "n2"), "GET /v1/nodes on n2", r.describe())
    h.eq(sorted(ns), ["n1", "n2", "n3"], "... lists the three nodes")
    h.eq([ns[k]["state"] for k in sorted(ns)], ["up"] * 3, "... all up")
    h.eq(ns.get("n3", {}).get("url"), "http://127.0.0.3:%d" % F.port, "... with the URL each is reached at")
    h.ok(all(ns[k]["memory"]["total"] > 0 and ns[k]["disk"]["available"] > 0 for k in ns),
         "... and each one's memory and disk", json.dumps(ns)[:400])
    h.eq([ns[k]["self"] for k in sorted(ns)], [False, True, False], "... n2 says which is itself")

    r = n1.post("/v1/keys", {"app_id": "nodesapp"})
    key = r.get("key") or "none"
    r, _ = nodes(n1, token=key)
    h.eq(r.status, 403, "an API key may not list nodes", r.describe())
    r = n1.post("/v1/nodes/n3/drain", token=key)
    h.eq(r.status, 403, "... nor drain one", r.describe())
    r, _ = nodes(n1, token=None)
    h.eq(r.status, 401, "no token: 401", r.describe())

    # ---- capacity: a box on n1 counts on n1 -------------------------------------
    r = n1.post("/v1/sandboxes", {"app_id": "nodesapp", "user_id": "u", "chat_id": "c"})
    h.eq((r.status, r.get("node")), (201, "n1"), "a box made through n1 is n1's", r.describe())
    bid = r.get("id")
    r = n2.post("/v1/sandboxes", {"app_id": "nodesapp", "user_id": "u", "chat_id": "c2"})
    h.eq((r.status, r.get("node")), (201, "n2"), "another box on n2", r.describe())
    other = r.get("id")
    ok = abserver.wait_for(lambda: nodes(n3)[1].get("n1", {}).get("running") == 1, timeout=10)
    h.ok(ok, "n1's heartbeat counts its running box", json.dumps(nodes(n3)[1].get("n1")))
    r = n2.get("/v1/sandboxes")
    h.eq([(b.get("id"), b.get("node"), b.get("status")) for b in r.get("sandboxes") or []],
         [(bid, "n1", "running"), (other, "n2", "running")], "n2 lists both boxes with their nodes",
         r.describe())

    # ---- drain --------------------------------------------------------------------
    r = n2.post("/v1/nodes/n3/drain")
    h.eq((r.status, r.get("state")), (200, "draining"), "drain n3 through n2", r.describe())
    h.eq(nodes(n1)[1]["n3"]["state"], "draining", "... n1 sees it draining")
    r = n1.post("/v1/nodes/n3/undrain")
    h.eq((r.status, r.get("state")), (200, "up"), "undrain it", r.describe())
    r = n1.post("/v1/nodes/nope/drain")
    h.eq(r.status, 404, "draining a node the fleet does not have: 404", r.describe())

    # ---- the CLI ------------------------------------------------------------------
    env = {k: v for k, v in os.environ.items() if k not in abtest._SCRUBBED_ENV}
    res = abtest._run([h.bin, "nodes", "--store", F.store_url, "--json"], 30, env=env)
    try:
        cli = {n["id"]: n["state"] for n in json.loads(res.out)["nodes"]}
    except (ValueError, KeyError, TypeError):
        cli = None
    h.eq(cli, {"n1": "up", "n2": "up", "n3": "up"}, "agentbox nodes --json lists them", res.describe())
    res = abtest._run([h.bin, "nodes", "--store", F.store_url], 30, env=env)
    h.ok(res.rc == 0 and "n3" in res.out and "STATE" in res.out, "agentbox nodes prints a table",
         res.describe())

    # ---- a node goes down and comes back ---------------------------------------------
    n1.kill9()
    ok = abserver.wait_for(lambda: nodes(n2)[1].get("n1", {}).get("state") == "down", timeout=10)
    h.ok(ok, "n1 killed with -9 reads down after down_after", json.dumps(nodes(n2)[1].get("n1")))
    r = n3.get("/v1/sandboxes")
    b = [x for x in r.get("sandboxes") or [] if x.get("id") == bid]
    h.eq(b and b[0].get("status"), "unavailable", "its box lists as unavailable", r.describe())
    h.contains(b and b[0].get("error") or "", "n1", "... naming the node")
    r = n3.get("/v1/sandboxes/%s" % bid)
    h.eq((r.status, r.err_code), (503, "unavailable"), "a request for it is 503", r.describe())
    h.contains(r.err_message or "", "node n1 is down", "... naming the node")
    r = n2.exec(bid, "true")
    h.eq(r.status, 503, "... an exec too", r.describe())
    r = n3.exec(other, "echo still-here")
    h.eq((r.status, r.get("stdout")), (200, "still-here\n"), "n2's box is unaffected, used through n3",
         r.describe())
    why = n1.start(new_port=False)
    h.ok(not why, "n1 starts again", why)
    ok = abserver.wait_for(lambda: nodes(n2)[1].get("n1", {}).get("state") == "up", timeout=10)
    h.ok(ok, "... and reads up")
    ok = abserver.wait_for(lambda: (n3.box(bid) or {}).get("status") == "running" and
                           n2.exec(bid, "true").status == 200, timeout=10)
    h.ok(ok, "... and its box is running again", str(n3.box(bid)))
    r = n1.delete("/v1/sandboxes/%s" % bid)
    h.eq(r.status, 202, "delete the box through its node", r.describe())
    n2.delete("/v1/sandboxes/%s" % other)
finally:
    F.close()
h.done()
