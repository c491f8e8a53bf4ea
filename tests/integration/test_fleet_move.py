#!/usr/bin/env python3
"""Moving a stopped native box to another node (docs/fleet.md, "Moving a
box"): three nodes on 127.0.0.1-3 sharing the suite's PostgreSQL.

- A stopped box with files on n1 moves to n2 (asked through n3): its disk is
  copied (sparse), verified and adopted; it starts on n2 with its files and
  their owners intact, and n1 has no copy left.
- Every refusal: no node (400), an unknown node (404), the same node (200,
  nothing done), a running or paused box (409 "stop it first"), a box of
  another backend (501), a draining node (409), a down node (503), a target
  with too little disk (507, before any byte is copied), another app's key
  (404).
- kill -9 of the owner mid-copy, and of the target mid-copy (the owner
  sends slowly: AGENTBOX_TEST_MOVE_CHUNK_DELAY_MS, a test-only knob): the box
  stays usable on exactly one node with its files, and the half copy is
  removed (by the target as the copy breaks, or at its start).
- kill -9 of the target, and of the owner, after the store names the target
  and before it took the box up (AGENTBOX_TEST_MOVE_SWITCH_DELAY_MS): the
  target takes it up (at its start, or by itself), the owner's old copy goes
  (by its sweep, or at its start); the box is usable on the target.
- A delete of the box on the target between the store's switch and the
  adoption: no record and no copy on either node is left; and an owner
  killed after the switch, whose box is deleted on the target while it is
  down, removes its old copy at its start instead of taking it up again."""
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import abfleet  # noqa: E402
import abtest  # noqa: E402

h = abserver.ServerHarness(budget=240)
mroot = os.path.join(h.root, "mock")
os.makedirs(mroot, exist_ok=True)
expect = os.path.join(mroot, "expect.json")
with open(expect, "w") as f:
    json.dump({"commands": [{"command": "true", "stdout": ""}]}, f)
os.chmod(expect, 0o644)

F = abfleet.Fleet(h, n=3, name="fleetmove",
                  config={"idle_pause": "1h", "idle_stop": "2h", "mock_expect": expect,
                          "mock_log": os.path.join(mroot, "calls.jsonl")})
mounted = []


def has_box(node, box):
    return os.path.isdir(os.path.join(node.data, "boxes", box))


def incoming(node, box):
    return os.path.exists(os.path.join(node.data, "incoming", box))


def nodes_state(via):
    r = via.get("/v1/nodes")
    return {n["id"]: n["state"] for n in r.get("nodes") or []}


def settle():
    """Waits until the store has every node up, and a heartbeat more: each
    node's view of the others is its last heartbeat's."""
    abserver.wait_for(lambda: set(nodes_state(F.nodes[0]).values()) == {"up"}, timeout=20)
    time.sleep(1.0)


def make_box(via, key, name, mib):
    """A stopped box with a text file, a file of mib MiB of random bytes, and a
    file owned by a user of the box; returns (id, the big file's sha256)."""
    r = via.post("/v1/sandboxes", {"app_id": "mvapp", "user_id": "u", "chat_id": name}, token=key)
    h.eq(r.status, 201, "box %s made on %s" % (name, via.name), r.describe())
    b = r.get("id") or "none"
    r = via.exec(b, "echo hello-%s > /workspace/note.txt && head -c %dM /dev/urandom > /workspace/big "
                 "&& mkdir -p /workspace/own && chown 1234:1234 /workspace/own && sha256sum /workspace/big"
                 % (name, mib), token=key)
    sha = (r.get("stdout") or "").split(" ")[0]
    h.ok(r.status == 200 and len(sha) == 64, "... with files written", r.describe())
    r = via.post("/v1/sandboxes/%s/stop" % b, {}, token=key)
    h.eq(r.status, 200, "... and stopped", r.describe())
    return b, sha


def check_files(via, key, b, name, sha, what):
    r = via.post("/v1/sandboxes/%s/start" % b, {}, token=key)
    h.eq(r.status, 200, "%s: the box starts" % what, r.describe())
    r = via.exec(b, "cat /workspace/note.txt; sha256sum /workspace/big | cut -d' ' -f1; "
                 "stat -c %u:%g /workspace/own", token=key)
    h.eq((r.status, r.get("stdout")), (200, "hello-%s\n%s\n1234:1234\n" % (name, sha)),
         "%s: its files are intact (their owners as the box sees them too)" % what, r.describe())
    r = via.post("/v1/sandboxes/%s/stop" % b, {}, token=key)
    h.eq(r.status, 200, "%s: stopped again" % what, r.describe())


try:
    n1, n2, n3 = F.nodes
    K = n1.post("/v1/keys", {"app_id": "mvapp"}).get("key") or "none"
    KO = n1.post("/v1/keys", {"app_id": "othapp"}).get("key") or "none"
    B, SHA = make_box(n1, K, "one", 8)

    # ---- the refusals ----------------------------------------------------------------------------
    r = n2.post("/v1/sandboxes/%s/move" % B, {}, token=K)
    h.eq(r.status, 400, "a move without a node: 400", r.describe())
    r = n2.post("/v1/sandboxes/%s/move" % B, {"node": "n9"}, token=K)
    h.eq(r.status, 404, "a move to an unknown node: 404", r.describe())
    r = n2.post("/v1/sandboxes/%s/move" % B, {"node": "n1"}, token=K)
    h.eq((r.status, r.get("moved"), r.get("node")), (200, False, "n1"),
         "a move to the node it is on: 200, nothing done", r.describe())
    r = n2.post("/v1/sandboxes/%s/move" % B, {"node": "n3"}, token=KO)
    h.eq(r.status, 404, "another app's key cannot move the box: 404", r.describe())

    r = n1.post("/v1/sandboxes", {"app_id": "mvapp", "user_id": "u", "chat_id": "run"}, token=K)
    R = r.get("id") or "none"
    r = n3.post("/v1/sandboxes/%s/move" % R, {"node": "n2"}, token=K)
    h.eq(r.status, 409, "a running box does not move: 409", r.describe())
    h.contains(r.err_message or "", "stop it first", "... saying to stop it first")
    r = n1.post("/v1/sandboxes/%s/pause" % R, {}, token=K)
    h.eq(r.status, 200, "the box paused", r.describe())
    r = n3.post("/v1/sandboxes/%s/move" % R, {"node": "n2"}, token=K)
    h.eq(r.status, 409, "a paused box does not move either: 409", r.describe())
    h.contains(r.err_message or "", "stop it first", "... saying to stop it first")
    n1.delete("/v1/sandboxes/%s" % R, token=K)

    r = n1.post("/v1/sandboxes", {"app_id": "mvapp", "user_id": "u", "chat_id": "mock", "backend": "mock"},
                token=K)
    M = r.get("id") or "none"
    h.eq(r.status, 201, "a box on the mock backend", r.describe())
    n1.post("/v1/sandboxes/%s/stop" % M, {}, token=K)
    r = n2.post("/v1/sandboxes/%s/move" % M, {"node": "n3"}, token=K)
    h.eq(r.status, 501, "a box not on the native backend does not move: 501", r.describe())
    h.contains(r.err_message or "", "native", "... said plainly")

    r = n1.post("/v1/nodes/n3/drain")
    h.eq(r.status, 200, "n3 drains", r.describe())
    r = n2.post("/v1/sandboxes/%s/move" % B, {"node": "n3"}, token=K)
    h.eq(r.status, 409, "a move to a draining node: 409", r.describe())
    h.contains(r.err_message or "", "draining", "... saying it drains")
    n1.post("/v1/nodes/n3/undrain")

    n3.kill9()
    h.ok(abserver.wait_for(lambda: nodes_state(n1).get("n3") == "down", timeout=10), "n3 killed: down")
    r = n2.post("/v1/sandboxes/%s/move" % B, {"node": "n3"}, token=K)
    h.eq(r.status, 503, "a move to a down node: 503", r.describe())
    h.contains(r.err_message or "", "down", "... saying it is down")

    # n3 comes back on a small disk: too little room for the box
    small = n3.data
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=200m,mode=0700", "tmpfs", small], check=True)
    mounted.append(small)
    why = n3.start(new_port=False)
    h.ok(not why, "n3 back, its data folder on a 200 MiB disk", why)
    h.ok(abserver.wait_for(lambda: nodes_state(n1).get("n3") == "up", timeout=10), "... up")
    time.sleep(1.0)  # n1's view of the nodes is its last heartbeat's
    r = n2.post("/v1/sandboxes/%s/move" % B, {"node": "n3"}, token=K)
    h.eq(r.status, 507, "a move to a node without room: 507", r.describe())
    h.ok(not incoming(n3, B) and not has_box(n3, B), "... refused before any byte was copied")
    h.eq((n2.box(B) or {}).get("node"), "n1", "... and the box stays on n1")

    # ---- the move ------------------------------------------------------------------------------
    t0 = time.monotonic()
    r = n3.post("/v1/sandboxes/%s/move" % B, {"node": "n2"}, token=K, timeout=120)
    took = time.monotonic() - t0
    h.eq((r.status, r.get("moved"), r.get("node"), r.get("from")), (200, True, "n2", "n1"),
         "box moved from n1 to n2, asked through n3 (%.1f s, %s bytes sent)" % (took, r.get("bytes")),
         r.describe())
    h.ok(0 < (r.get("bytes") or 0) < 200 << 20, "... sending the disk's data, not its holes",
         str(r.get("bytes")))
    h.ok(has_box(n2, B) and not has_box(n1, B) and not incoming(n2, B),
         "... n2 has it, n1 has no copy left")
    h.eq((n1.box(B) or {}).get("node"), "n2", "... and the store names n2")
    check_files(n1, K, B, "one", SHA, "moved to n2, used through n1")
    env = {k: v for k, v in os.environ.items() if k not in abtest._SCRUBBED_ENV}
    env.update(AGENTBOX_TOKEN=abfleet.TOKEN, AGENTBOX_URL=n3.url)
    res = abtest._run([h.bin, "move", B, "--node", "n1"], 120, env=env)
    h.ok(res.rc == 0 and "moved from node n2 to node n1" in res.out,
         "... and back to n1 with `agentbox move ID --node n1` (through n3)", res.describe())
    res = abtest._run([h.bin, "move", B, "--node", "n9"], 60, env=env)
    h.ok(res.rc == 1 and "404" in res.err, "`agentbox move` to an unknown node fails, saying why",
         res.describe())
    check_files(n2, K, B, "one", SHA, "back on n1")
    h.ok(has_box(n1, B) and not has_box(n2, B), "... n1 has it again, n2 has none")

    # ---- kill -9 of a node mid-copy -------------------------------------------------------------
    n1.stop()
    n1.extra_env["AGENTBOX_TEST_MOVE_CHUNK_DELAY_MS"] = "150"
    why = n1.start(new_port=False)
    h.ok(not why, "n1 restarted sending slowly (150 ms per MiB)", why)
    settle()
    Z, ZSHA = make_box(n1, K, "zed", 24)
    result = {}

    def move_in_background(node, target):
        result.clear()
        box = Z

        def run():
            result["r"] = node.post("/v1/sandboxes/%s/move" % box, {"node": target}, token=K,
                                    timeout=120)
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    t = move_in_background(n1, "n2")
    h.ok(abserver.wait_for(lambda: incoming(n2, Z), timeout=20), "a slow move of Z to n2 begins")
    time.sleep(1.0)
    n1.kill9()
    t.join(30)
    h.ok(abserver.wait_for(lambda: not incoming(n2, Z), timeout=10),
         "the owner killed mid-copy: the target drops its half copy", str(os.listdir(os.path.join(n2.data, "incoming"))))
    n1.extra_env.pop("AGENTBOX_TEST_MOVE_CHUNK_DELAY_MS")
    why = n1.start(new_port=False)
    h.ok(not why, "n1 back", why)
    settle()
    h.eq((n2.box(Z) or {}).get("node"), "n1", "... the store still names n1")
    h.ok(has_box(n1, Z) and not has_box(n2, Z), "... which alone has the box")
    check_files(n2, K, Z, "zed", ZSHA, "after the owner's kill")

    n2.stop()
    n1.stop()
    n1.extra_env["AGENTBOX_TEST_MOVE_CHUNK_DELAY_MS"] = "150"
    h.ok(not n1.start(new_port=False) and not n2.start(new_port=False), "n1 sending slowly again")
    settle()
    t = move_in_background(n1, "n2")
    h.ok(abserver.wait_for(lambda: incoming(n2, Z), timeout=20), "a slow move of Z to n2 begins")
    time.sleep(1.0)
    n2.kill9()
    t.join(60)
    rr = result.get("r")
    h.ok(rr is not None and rr.status >= 500, "the target killed mid-copy: the move fails",
         rr.describe() if rr else "no answer")
    h.ok(incoming(n2, Z), "... leaving a half copy on n2's disk")
    why = n2.start(new_port=False)
    h.ok(not why, "n2 back", why)
    h.ok(not incoming(n2, Z) and not has_box(n2, Z), "... it removed the half copy at its start")
    settle()
    h.eq((n3.box(Z) or {}).get("node"), "n1", "... the store still names n1")
    n1.stop()
    n1.extra_env.pop("AGENTBOX_TEST_MOVE_CHUNK_DELAY_MS")
    h.ok(not n1.start(new_port=False), "n1 at full speed")
    settle()
    check_files(n3, K, Z, "zed", ZSHA, "after the target's kill")
    r = n3.post("/v1/sandboxes/%s/move" % Z, {"node": "n2"}, token=K, timeout=120)
    h.eq((r.status, r.get("node")), (200, "n2"), "... and it moves when asked again", r.describe())
    check_files(n3, K, Z, "zed", ZSHA, "Z on n2")

    # ---- kill -9 between the store's switch and the adoption -------------------------------------
    n1.stop()
    n1.extra_env["AGENTBOX_TEST_MOVE_SWITCH_DELAY_MS"] = "4000"
    h.ok(not n1.start(new_port=False), "n1 restarted pausing 4 s after the store's switch")
    settle()
    W, WSHA = make_box(n1, K, "wee", 1)

    def owner(b):
        return (n3.box(b) or {}).get("node")

    Z = W
    t = move_in_background(n1, "n2")
    h.ok(abserver.wait_for(lambda: owner(W) == "n2", timeout=30), "a move of W to n2: the store names n2")
    n2.kill9()
    t.join(60)
    rr = result.get("r")
    h.ok(rr is not None and rr.status == 503 and "n2" in (rr.err_message or ""),
         "the target killed after the switch: the move answers 503, naming it", rr.describe() if rr else "")
    # n2's own sweep (every heartbeat) may have taken it up in the moment
    # between the switch and the kill: then it is in place already
    h.ok(incoming(n2, W) != has_box(n2, W),
         "... its complete copy waits in incoming/ (or n2 took it up just before it was killed)",
         [incoming(n2, W), has_box(n2, W)])
    h.ok(abserver.wait_for(lambda: not has_box(n1, W), timeout=20),
         "... n1 removes its old copy (the store gives the box to n2)")
    h.ok(not n2.start(new_port=False), "n2 back")
    h.ok(has_box(n2, W) and not incoming(n2, W), "... it took the box up at its start")
    settle()
    check_files(n3, K, W, "wee", WSHA, "W after the target's kill")

    def owner_killed_after_switch(b):
        """Moves b from n1 to n2 and kills n1 -9 in its pause after the
        store's switch: n2 takes the box up by itself."""
        global Z
        Z = b
        t = move_in_background(n1, "n2")
        h.ok(abserver.wait_for(lambda: owner(b) == "n2", timeout=60),
             "a move of %s to n2: the store names n2" % b)
        n1.kill9()
        t.join(30)
        h.ok(abserver.wait_for(lambda: has_box(n2, b) and not incoming(n2, b), timeout=10),
             "the owner killed after the switch: n2 takes %s up by itself" % b)

    owner_killed_after_switch(B)
    check_files(n3, K, B, "one", SHA, "B while n1 is down")
    h.ok(has_box(n1, B), "... n1's old copy is still on its disk while it is down")
    n1.extra_env.pop("AGENTBOX_TEST_MOVE_SWITCH_DELAY_MS")
    h.ok(not n1.start(new_port=False), "n1 back")
    h.ok(not has_box(n1, B), "... it removed its old copy at its start")
    settle()
    h.eq(owner(B), "n2", "... and the store still names n2")

    # ---- a delete of a box whose move is between the store's switch and the adoption ------------
    n1.stop()
    n1.extra_env["AGENTBOX_TEST_MOVE_SWITCH_DELAY_MS"] = "4000"
    h.ok(not n1.start(new_port=False), "n1 restarted pausing 4 s after the store's switch again")
    settle()

    def gone(b):
        return n3.get("/v1/sandboxes/%s" % b, token=K).status == 404

    V, _ = make_box(n1, K, "vee", 1)
    Z = V
    t = move_in_background(n1, "n2")
    h.ok(abserver.wait_for(lambda: owner(V) == "n2", timeout=30), "a move of V to n2: the store names n2")
    d = n2.delete("/v1/sandboxes/%s" % V, token=K)
    h.ok(d.status in (200, 202, 204), "V deleted through n2 before the owner asked n2 to take it up",
         d.describe())
    t.join(60)
    rr = result.get("r")
    h.ok(rr is not None and (rr.status == 200 or (rr.status == 404 and "deleted" in (rr.err_message or ""))),
         "the move answers (200, or 404: deleted while it moved)", rr.describe() if rr else "no answer")
    h.ok(abserver.wait_for(lambda: gone(V) and not has_box(n1, V) and not has_box(n2, V) and
                           not incoming(n2, V), timeout=20),
         "... no record, and no copy on either node (nor in n2's incoming/)",
         [gone(V), has_box(n1, V), has_box(n2, V), incoming(n2, V)])

    V2, _ = make_box(n1, K, "vee2", 1)
    owner_killed_after_switch(V2)
    d = n2.delete("/v1/sandboxes/%s" % V2, token=K)
    h.ok(d.status in (200, 202, 204), "... and V2 is deleted through n2 while n1 is down", d.describe())
    h.ok(abserver.wait_for(lambda: gone(V2) and not has_box(n2, V2), timeout=20), "... gone from n2")
    h.ok(has_box(n1, V2), "... n1's old copy is still on its disk while it is down")
    n1.extra_env.pop("AGENTBOX_TEST_MOVE_SWITCH_DELAY_MS")
    h.ok(not n1.start(new_port=False), "n1 back")
    h.ok(not has_box(n1, V2), "... it removed its old copy at its start (its folder says it left)")
    h.ok(gone(V2), "... and the deleted box did not come back (no record)",
         n3.get("/v1/sandboxes/%s" % V2, token=K).describe())
    settle()
finally:
    F.close()
    for m in mounted:
        subprocess.run(["umount", "-l", m])
h.done()
