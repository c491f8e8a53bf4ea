#!/usr/bin/env python3
"""Attacks across apps on the sessions/chat and DeerFlow (AIO) fronts
through fleet nodes that do not own the boxes (docs/fleet.md); each check
passes only when the attack fails. Three nodes on 127.0.0.1-3 share the
suite's PostgreSQL (AGENTBOX_TEST_PG_URL; skipped without it); app A's
thread box and DeerFlow sandbox live on n1, app B calls n2 and n3.

- B chats in, downloads from, uploads to and deletes A's thread by its id.
  Must hold: 404 each; A's box, file and history untouched.
- B opens a thread of the same id. Must hold: it is B's own (its own box),
  A's file is not in it.
- B forges the fleet's identity headers (X-Agentbox-Fleet-App: A) with its
  own key, or a wrong fleet secret. Must hold: B is B (404), a wrong secret
  is 401.
- B uses A's sandbox URL: with B's key, with B's own sandbox's token, with
  no token; B deletes A's sandbox by its id. Must hold: 401 or 404, A's
  sandbox still runs commands through every node."""
import json
import os
import secrets
import sys
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "llm"))
import abserver  # noqa: E402
import abfleet  # noqa: E402
import standin  # noqa: E402

h = abserver.ServerHarness(budget=150)
KA = "fft-key-a-" + secrets.token_hex(8)
KB = "fft-key-b-" + secrets.token_hex(8)
model = standin.start(os.path.join(h.data, "..", "standin-fft-%d.jsonl" % os.getpid()))
F = abfleet.Fleet(h, name="fleetfronttenancy", config={
    "idle_pause": "1h", "idle_stop": "2h",
    "limits": {"disk": "64M", "memory": "256M", "timeout": "30s"},
    "api_keys": [{"key": KA, "app_id": "ffta"}, {"key": KB, "app_id": "fftb"}],
    "llm": {"base_url": model.base_url(), "model": "standin-model", "max_steps": 4, "timeout": "60s"}})


def upload(node, thread, name, data, key):
    b = "fftb" + secrets.token_hex(6)
    body = ("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n\r\n" % (b, name)).encode() \
        + data + ("\r\n--%s--\r\n" % b).encode()
    return node.post("/api/files/%s/upload" % thread, body, token=key,
                     headers={"Content-Type": "multipart/form-data; boundary=%s" % b})


def boxes(key):
    r = F.nodes[0].get("/v1/sandboxes", token=key)
    j = r.json
    return j.get("sandboxes", []) if isinstance(j, dict) else (j or [])


try:
    n1, n2, n3 = F.nodes
    T = "thread-" + secrets.token_hex(4)
    r = n1.post("/api/sessions", {"thread_id": T}, token=KA)
    h.eq(r.status, 201, "A's thread", r.describe())
    r = upload(n1, T, "a.txt", b"a-secret\n", KA)
    h.eq(r.status, 201, "A's file in its thread's box on n1", r.describe())
    abox = [b for b in boxes(KA) if b.get("thread_id") == T]
    h.eq([b.get("node") for b in abox], ["n1"], "A's thread box lives on n1", repr(abox))
    ABOX = abox[0].get("id") if abox else "none"

    # ---- B on A's thread through n2 and n3 -----------------------------------------------------
    r = n2.post("/api/chat/%s" % T, {"message": "hi [[text]]"}, token=KB)
    h.eq(r.status, 404, "B's chat in A's thread through n2 is 404", r.describe())
    r = n3.get("/api/files/%s/download" % T, token=KB, query={"path": "uploads/a.txt"})
    h.ok(r.status == 404 and b"a-secret" not in r.body, "B's download from A's thread through n3 is 404",
         r.describe())
    r = upload(n3, T, "b.txt", b"from b\n", KB)
    h.eq(r.status, 404, "B's upload into A's thread through n3 is 404", r.describe())
    r = n2.request("DELETE", "/api/sessions/%s" % T, token=KB)
    h.eq(r.status, 404, "B's delete of A's thread through n2 is 404", r.describe())

    # forged identity with B's own key, and a wrong fleet secret
    r = n2.post("/api/chat/%s" % T, {"message": "hi [[text]]"}, token=KB,
                headers={"X-Agentbox-Fleet-App": "ffta", "X-Agentbox-Fleet-Admin": "1"})
    h.eq(r.status, 404, "B with forged fleet headers (app A) through n2 is still B: 404", r.describe())
    r = n3.get("/api/files/%s/download" % T, token=KB, query={"path": "uploads/a.txt"},
               headers={"X-Agentbox-Fleet-Secret": "wrong-" + "x" * 40, "X-Agentbox-Fleet-App": "ffta"})
    h.ok(r.status == 401 and b"a-secret" not in r.body, "a wrong fleet secret is 401", r.describe())

    # B's own thread of the same id is B's
    r = n2.post("/api/sessions", {"thread_id": T}, token=KB)
    h.eq(r.status, 201, "B opens a thread of the same id through n2", r.describe())
    r = upload(n2, T, "b.txt", b"from b\n", KB)
    h.eq(r.status, 201, "B's upload into its own thread through n2", r.describe())
    bbox = [b for b in boxes(KB) if b.get("thread_id") == T]
    h.ok(len(bbox) == 1 and bbox[0].get("id") != ABOX, "B's thread has a box of its own", repr(bbox))
    r = n3.get("/api/files/%s/download" % T, token=KB, query={"path": "uploads/a.txt"})
    h.ok(r.status != 200 and b"a-secret" not in r.body, "A's file is not in B's thread", r.describe())

    r = n3.get("/api/files/%s/download" % T, token=KA, query={"path": "uploads/a.txt"})
    h.eq((r.status, r.body), (200, b"a-secret\n"), "A's file is untouched (through n3)", r.describe())
    r = n3.get("/v1/sandboxes/%s" % ABOX, token=KA)
    h.eq((r.status, r.get("node")), (200, "n1"), "A's box is still on n1", r.describe())

    # ---- DeerFlow: B on A's sandbox --------------------------------------------------------------
    SA, SB = secrets.token_hex(8), secrets.token_hex(8)
    r = n1.request("POST", "/deerflow/api/sandboxes", body={"sandbox_id": SA}, headers={"X-API-Key": KA},
                   token=None)
    h.eq(r.status, 200, "A's DeerFlow sandbox on n1", r.describe())
    URL_A = urllib.parse.urlparse(r.get("sandbox_url") or "").path
    r = n1.request("POST", "/deerflow/api/sandboxes", body={"sandbox_id": SB}, headers={"X-API-Key": KB},
                   token=None)
    h.eq(r.status, 200, "B's DeerFlow sandbox on n1", r.describe())
    URL_B = urllib.parse.urlparse(r.get("sandbox_url") or "").path
    cap_a, cap_b = URL_A.rsplit("/", 1)[-1], URL_B.rsplit("/", 1)[-1]
    id_a, tok_b = cap_a.split(".")[0], cap_b.split(".", 1)[-1]
    prefix = URL_A[:-len(cap_a)]
    CMD = {"command": "echo pwned > /tmp/pwned; echo ran"}

    r = n2.request("POST", prefix + id_a + "/v1/shell/exec", body=CMD, headers={"X-API-Key": KB}, token=None)
    h.ok(r.status in (401, 404) and "ran" not in r.text, "B's key on A's sandbox (no token) through n2",
         r.describe())
    r = n3.request("POST", prefix + id_a + "." + tok_b + "/v1/shell/exec", body=CMD, token=None)
    h.ok(r.status in (401, 404) and "ran" not in r.text, "B's sandbox token on A's sandbox through n3",
         r.describe())
    r = n2.request("POST", prefix + id_a + "." + "0" * 32 + "/v1/shell/exec", body=CMD,
                   headers={"X-API-Key": KB}, token=None)
    h.ok(r.status in (401, 404) and "ran" not in r.text, "a wrong token with B's key on A's sandbox through n2",
         r.describe())
    r = n2.request("POST", prefix + id_a + "/v1/shell/exec", body=CMD, token=None,
                   headers={"X-API-Key": KB, "X-Agentbox-Fleet-App": "ffta"})
    h.ok(r.status in (401, 404) and "ran" not in r.text, "... with forged fleet headers", r.describe())
    r = n3.request("DELETE", "/deerflow/api/sandboxes/" + SA, headers={"X-API-Key": KB}, token=None)
    h.ok(r.status in (200, 404), "B's delete of A's sandbox id through n3 touches no sandbox of A", r.describe())
    r = n2.request("POST", URL_A + "/v1/shell/exec", body={"command": "ls /tmp; echo alive"}, token=None)
    out = json.dumps(r.json)
    h.ok(r.status == 200 and "alive" in out and "pwned" not in out,
         "A's sandbox still runs (through n2), with nothing of B's in it", r.describe())
    r = n3.get("/v1/sandboxes/%s" % id_a, token=KA)
    h.eq((r.status, r.get("node")), (200, "n1"), "A's sandbox box is still on n1", r.describe())
finally:
    F.close()
h.done()
