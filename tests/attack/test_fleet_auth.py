#!/usr/bin/env python3
"""Attacks on a fleet's node-to-node trust (docs/fleet.md); each check
passes only when the attack fails. Three nodes on 127.0.0.1-3 share the
suite's PostgreSQL (AGENTBOX_TEST_PG_URL; skipped without it).

- A client forges the fleet's identity headers (X-Agentbox-Fleet-App,
  -Key, -Admin): to the owner of a box and to a node that forwards, with
  no credential and with another app's key. Must hold: they count for
  nothing without the fleet secret (401 without a credential; the key's
  own app otherwise), and a forwarding node never passes a client's copies
  on.
- A node-to-node call without the secret, and with a wrong one. Must hold:
  401 (with the right secret the same call works, so the check can fail).
- App A reaches app B's box through a node that does not own it: get,
  exec, files, a terminal, a port, stop, delete. Must hold: 404 each, and
  B's box and files are untouched.
- A forwarded request is never forwarded again (no loops): a call with the
  right secret to a node that does not own the box is answered there."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import abfleet  # noqa: E402
import wsclient  # noqa: E402

h = abserver.ServerHarness(budget=150)
F = abfleet.Fleet(h, name="fleetauth")
try:
    n1, n2, n3 = F.nodes
    KA, KB, BB = F.two_apps()

    # ---- forged identity headers ------------------------------------------------------------
    FORGED = {"X-Agentbox-Fleet-App": "appb", "X-Agentbox-Fleet-Admin": "1",
              "X-Agentbox-Fleet-From": "n2"}
    for node in (n1, n2):
        r = node.get("/v1/sandboxes/%s" % BB, token=None, headers=FORGED)
        h.eq(r.status, 401, "forged fleet identity without a credential on %s: 401" % node.name, r.describe())
        r = node.get("/v1/sandboxes/%s" % BB, token=KA, headers=FORGED)
        h.eq(r.status, 404, "app A's key with a forged identity of app B on %s: 404" % node.name, r.describe())
        r = node.get("/v1/keys", token=KA, headers=FORGED)
        h.eq(r.status, 403, "... and of the admin on %s: still app A (403)" % node.name, r.describe())
        r = node.get("/v1/sandboxes", token=KA, headers=FORGED)
        h.eq([b.get("id") for b in r.get("sandboxes") or []], [], "... lists none of B's boxes on %s" % node.name,
             r.describe())
    r = n2.get("/v1/sandboxes/%s/ports/8000/x" % BB, token=KA, headers=FORGED)
    h.eq(r.status, 404, "... nor reaches B's port through n2", r.describe())

    # ---- node-to-node calls without / with a wrong secret -------------------------------------------
    N2N = {"X-Agentbox-Fleet-Admin": "1", "X-Agentbox-Fleet-From": "n2"}
    r = n1.get("/v1/keys", token=None, headers=N2N)
    h.eq(r.status, 401, "a node-to-node call without the fleet secret: 401", r.describe())
    bad = dict(N2N, **{"X-Agentbox-Fleet-Secret": abfleet.SECRET[:-1] + "x"})
    r = n1.get("/v1/keys", token=None, headers=bad)
    h.eq(r.status, 401, "... with a wrong secret: 401", r.describe())
    h.contains(r.err_message or "", "fleet secret", "... saying so")
    r = n1.get("/v1/keys", token=None, headers=dict(bad, **{"X-Agentbox-Fleet-Secret": ""}))
    h.eq(r.status, 401, "... with an empty one: 401", r.describe())
    good = dict(N2N, **{"X-Agentbox-Fleet-Secret": abfleet.SECRET})
    r = n1.get("/v1/keys", token=None, headers=good)
    h.eq(r.status, 200, "(with the right secret the same call works)", r.describe())
    solo = h.start_server(name="solo", data=h.new_data_dir("solo"), token=abfleet.TOKEN)
    r = solo.get("/v1/keys", token=None, headers=good)
    h.eq(r.status, 401, "a fleet secret sent to a server outside any fleet: 401", r.describe())
    solo.stop()

    # ---- app A at app B's box through a non-owner node -----------------------------------------------
    P = "/v1/sandboxes/%s" % BB
    tries = [
        ("GET the box", lambda: n2.get(P, token=KA)),
        ("exec", lambda: n2.exec(BB, "cat /workspace/b.txt", token=KA)),
        ("read a file", lambda: n3.get(n3.file_path(BB, "/workspace/b.txt"), token=KA)),
        ("write a file", lambda: n3.put(n3.file_path(BB, "/workspace/pwn.txt"), b"x", token=KA)),
        ("open a terminal", lambda: n2.post(P + "/terminals", {}, token=KA)),
        ("a port", lambda: n3.get(P + "/ports/8000/x", token=KA)),
        ("stop", lambda: n2.post(P + "/stop", {}, token=KA)),
        ("delete", lambda: n3.delete(P, token=KA)),
    ]
    for what, call in tries:
        r = call()
        h.eq(r.status, 404, "app A: %s of B's box through a non-owner node: 404" % what, r.describe())
    ws = wsclient.connect(n2, P + "/terminals/t_0123456789abcdef", token=KA)
    h.ok(ws.status != 101, "app A: a terminal WebSocket of B's box through n2 is refused", ws.head)
    r = n1.exec(BB, "cat /workspace/b.txt; ls /workspace", token=KB)
    h.eq((r.status, r.get("stdout")), (200, "b-secret\nb.txt\n"), "B's box is untouched, running", r.describe())

    # ---- no loops -------------------------------------------------------------------------------------
    fwd = {"X-Agentbox-Fleet-Secret": abfleet.SECRET, "X-Agentbox-Fleet-App": "appb",
           "X-Agentbox-Fleet-From": "n3"}
    r = n2.exec(BB, "true", token=None, headers=fwd)
    h.eq(r.status, 503, "a forwarded call to a node that does not own the box is answered there", r.describe())
    h.contains(r.err_message or "", "n1", "... naming the owner")
finally:
    F.close()
h.done()
