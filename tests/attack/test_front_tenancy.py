#!/usr/bin/env python3
"""Attacks on tenancy through the E2B and OpenSandbox fronts: app B, with
its own valid API key, goes for app A's box through every route of both
fronts (the route table in src/api/server.c and the OpenSandbox front's
own routing: lifecycle, egress, execd), by id, with A's envd access token
paired with B's box and B's token paired with A's, and through the execd
URL the endpoint route hands out. Each attack passes only when it fails:
B's calls are answered 404 (existence not told: the same answer as for an
id that does not exist) or 401 for a token that is not the box's, and A's
box is unchanged afterwards: still running, its files and metadata as A
left them, its background command, logs and session still A's, no command
of B ran in it (a marker file B tries to make never appears)."""
import json
import os
import secrets
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import attacklib  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
KEY_A = "key-a-" + secrets.token_hex(8)
KEY_B = "key-b-" + secrets.token_hex(8)
PWN = "/tmp/pwned-" + secrets.token_hex(4)
h = abserver.ServerHarness(budget=200)
srv = h.start_server(name="fronttenancy", token=TOKEN, config={
    "idle_pause": "1h", "idle_stop": "2h",
    "api_keys": [{"key": KEY_A, "app_id": "appa"}, {"key": KEY_B, "app_id": "appb"}]})

E2B_A = {"X-API-Key": KEY_A}
E2B_B = {"X-API-Key": KEY_B}
OSB_A = {"OPEN-SANDBOX-API-KEY": KEY_A}
OSB_B = {"OPEN-SANDBOX-API-KEY": KEY_B}


def call(method, path, body=None, headers=None):
    return srv.request(method, path, body=body, headers=headers, token=None)


# ---- A's boxes (one per front) and B's own, with some state to protect --------------
r = call("POST", "/e2b/v2/sandboxes", {"templateID": "base", "timeout": 600, "metadata": {"owner": "a"}}, E2B_A)
h.eq(r.status, 201, "app A: an E2B sandbox", r.describe())
EA, TA = r.get("sandboxID") or "none", r.get("envdAccessToken") or "none"
r = call("POST", "/e2b/v2/sandboxes", {"templateID": "base", "timeout": 600}, E2B_B)
h.eq(r.status, 201, "app B: an E2B sandbox of its own", r.describe())
EB, TB = r.get("sandboxID") or "none", r.get("envdAccessToken") or "none"
r = call("POST", "/opensandbox/v1/sandboxes", {"image": {"uri": "base"}, "entrypoint": ["tail", "-f", "/dev/null"],
                                               "timeout": 600, "metadata": {"owner": "a"},
                                               "resourceLimits": {"cpu": "1", "memory": "256Mi"}}, OSB_A)
h.eq(r.status, 202, "app A: an OpenSandbox sandbox", r.describe())
OA = r.get("id") or "none"
abserver.wait_for(lambda: call("GET", "/opensandbox/v1/sandboxes/" + OA, None, OSB_A).get("status", {}).get("state")
                  == "Running", timeout=30)

EXA = "/opensandbox/execd/" + OA
r = call("POST", EXA + "/command", {"command": "echo a-secret-output; sleep 300", "background": True}, OSB_A)
CID = ""
for line in r.text.splitlines():
    if line.startswith("data:"):
        CID = (json.loads(line[5:]).get("text") or "") if line[5:].strip().startswith("{") else CID
h.ok(r.status == 200 and CID.startswith("cmd-"), "app A: a background command", r.describe())
r = call("POST", EXA + "/session", {}, OSB_A)
SID = r.get("session_id") or "none"
h.ok(r.status == 200 and SID != "none", "app A: a session", r.describe())
for box, tok in ((EA, TA),):
    r = call("POST", "/e2b/envd/filesystem.Filesystem/MakeDir", {"path": "/workspace/keep"},
             {"E2b-Sandbox-Id": box, "X-Access-Token": tok, "Content-Type": "application/json"})
h.eq(r.status, 200, "app A: a directory in its E2B box", r.describe())
r = call("POST", EXA + "/directories", {"/workspace/keep": {"mode": 755}}, OSB_A)
h.eq(r.status, 200, "app A: a directory in its OpenSandbox box", r.describe())


def refused(r, what, ok=(404,)):
    h.ok(r.status in ok, "app B: %s -> %s (got %d)" % (what, "/".join(map(str, ok)), r.status),
         r.describe())


# ---- E2B control plane: every route of the table, A's id, B's key ---------------------
for method, path, body in (
        ("GET", "/e2b/sandboxes/%s", None),
        ("POST", "/e2b/sandboxes/%s/timeout", {"timeout": 1}),
        ("POST", "/e2b/sandboxes/%s/pause", {}),
        ("POST", "/e2b/sandboxes/%s/resume", {"timeout": 5}),
        ("POST", "/e2b/v2/sandboxes/%s/connect", {"timeout": 5}),
        ("POST", "/e2b/sandboxes/%s/connect", {"timeout": 5}),  # SDK 2.45's path
        ("GET", "/e2b/sandboxes/%s/metrics", None),
        ("POST", "/e2b/sandboxes/%s/fork", {}),
        ("POST", "/e2b/sandboxes/%s/snapshots", {}),
        ("PUT", "/e2b/sandboxes/%s/network", {"allowOut": ["example.com"]}),
        ("DELETE", "/e2b/sandboxes/%s", None)):
    for box in (EA, OA):
        r = call(method, path % box, body, E2B_B)
        refused(r, "E2B %s %s of A's box" % (method, path.replace("%s", "{id}")))
        h.ok("envdAccessToken" not in r.text or TA not in r.text, "no envd token of A's box in the answer",
             r.describe())
for lst in ("/e2b/v2/sandboxes", "/e2b/sandboxes"):
    r = call("GET", lst, None, E2B_B)
    h.ok(r.status == 200 and EA not in r.text and OA not in r.text, "app B: %s does not list A's boxes" % lst,
         r.describe())

# ---- envd: tokens and ids crossed ----------------------------------------------------------
def envd(method, path, body, box, tok, ctype="application/json"):
    hdr = {"E2b-Sandbox-Id": box, "X-Access-Token": tok}
    if body is not None:
        hdr["Content-Type"] = ctype
    return call(method, path, body, hdr)


def envelope(obj, flags=0):
    b = json.dumps(obj).encode()
    return struct.pack(">BI", flags, len(b)) + b


ENVD_CALLS = [
    ("GET", "/e2b/envd/files?path=/workspace/keep", None, None),
    ("POST", "/e2b/envd/files?path=" + PWN, b"x", "application/octet-stream"),
    ("GET", "/e2b/envd/health", None, None),
]
for m in ("Stat", "ListDir", "MakeDir", "Move", "Remove", "CreateWatcher", "GetWatcherEvents",
          "RemoveWatcher"):
    ENVD_CALLS.append(("POST", "/e2b/envd/filesystem.Filesystem/" + m,
                       {"path": PWN, "source": "/workspace/keep", "destination": PWN, "watcherId": "w"},
                       "application/json"))
ENVD_CALLS.append(("POST", "/e2b/envd/filesystem.Filesystem/WatchDir", envelope({"path": "/workspace"}),
                   "application/connect+json"))
for m in ("List", "SendInput", "SendSignal", "CloseStdin", "Update"):
    ENVD_CALLS.append(("POST", "/e2b/envd/process.Process/" + m,
                       {"process": {"pid": 1}, "signal": "SIGNAL_SIGKILL"}, "application/json"))
for m in ("Start", "Connect"):
    ENVD_CALLS.append(("POST", "/e2b/envd/process.Process/" + m,
                       envelope({"process": {"cmd": "/bin/bash", "args": ["-c", "touch " + PWN], "pid": 1}}),
                       "application/connect+json"))
ENVD_CALLS.append(("POST", "/e2b/envd/process.Process/StreamInput",
                   envelope({"start": {"process": {"pid": 1}}}) + envelope({}, 2), "application/connect+json"))
for method, path, body, ctype in ENVD_CALLS:
    for box, tok, what in ((EA, TB, "A's id with B's envd token"), (EB, TA, "B's id with A's envd token"),
                           (OA, TB, "A's OpenSandbox box with B's token"), (EA, "", "A's id, no token"),
                           (EA, TA[:-1] + ("0" if TA[-1] != "0" else "1"), "A's id, a forged token")):
        r = envd(method, path, body, box, tok, ctype)
        ok = (401, 502) if path.endswith("/health") else (401,)
        refused(r, "envd %s %s with %s" % (method, path.split("?")[0], what), ok)

# ---- OpenSandbox lifecycle and egress ---------------------------------------------------------
for method, path, body in (
        ("GET", "/opensandbox/v1/sandboxes/%s", None),
        ("POST", "/opensandbox/v1/sandboxes/%s/pause", {}),
        ("POST", "/opensandbox/v1/sandboxes/%s/resume", {}),
        ("POST", "/opensandbox/v1/sandboxes/%s/renew-expiration", {"expiresAt": "2099-01-01T00:00:00Z"}),
        ("PATCH", "/opensandbox/v1/sandboxes/%s/metadata", {"owner": "b"}),
        ("GET", "/opensandbox/v1/sandboxes/%s/endpoints/44772", None),
        ("GET", "/opensandbox/v1/sandboxes/%s/endpoints/8080", None),
        ("POST", "/opensandbox/v1/sandboxes/%s/snapshots", {"name": "steal"}),
        ("GET", "/opensandbox/egress/%s/policy", None),
        ("PATCH", "/opensandbox/egress/%s/policy", {"defaultAction": "allow"}),
        ("DELETE", "/opensandbox/egress/%s/policy", {}),
        ("DELETE", "/opensandbox/v1/sandboxes/%s", None)):
    for box in (OA, EA):
        for hdr, how in ((OSB_B, "OPEN-SANDBOX-API-KEY"), ({"Authorization": "Bearer " + KEY_B}, "Bearer")):
            r = call(method, path % box, body, hdr)
            refused(r, "OpenSandbox %s %s of A's box (%s)" % (method, path.replace("%s", "{id}"), how))
r = call("GET", "/opensandbox/v1/sandboxes", None, OSB_B)
h.ok(r.status == 200 and OA not in r.text and EA not in r.text, "app B: the OpenSandbox list shows no box of A",
     r.describe())
r = call("GET", "/opensandbox/v1/snapshots", None, OSB_B)
h.ok(r.status == 200 and OA not in r.text, "app B: the snapshot list shows nothing of A's box", r.describe())

# ---- execd: every route, A's box, B's key (the execd URL the endpoint route gives A) -------------
r = call("GET", "/opensandbox/v1/sandboxes/%s/endpoints/44772" % OA, None, OSB_A)
ep = r.get("endpoint") or ""
h.ok(r.status == 200 and OA in ep, "app A: its execd endpoint", r.describe())
EXECD = attacklib.osb_execd_calls(CID, SID, PWN)
for method, sub, body, ctype in EXECD:
    for box in (OA, EA):
        hdr = dict(OSB_B)
        if ctype:
            hdr["Content-Type"] = ctype
        r = call(method, "/opensandbox/execd/%s%s" % (box, sub), body, hdr)
        refused(r, "execd %s %s of A's box" % (method, sub.split("?")[0]))
        h.ok("a-secret-output" not in r.text, "no output of A's command in the answer", r.describe())
# B's own box does not reach A's command or session either
r = call("POST", "/opensandbox/v1/sandboxes", {"image": {"uri": "base"}, "entrypoint": ["tail", "-f", "/dev/null"],
                                               "timeout": 600}, OSB_B)
OB = r.get("id") or "none"
abserver.wait_for(lambda: call("GET", "/opensandbox/v1/sandboxes/" + OB, None, OSB_B).get("status", {}).get("state")
                  == "Running", timeout=30)
for method, sub, body in (("GET", "/command/status/" + CID, None), ("GET", "/command/%s/logs" % CID, None),
                          ("DELETE", "/command?id=" + CID, None),
                          ("POST", "/session/%s/run" % SID, {"command": "touch " + PWN}),
                          ("DELETE", "/session/" + SID, None)):
    r = call(method, "/opensandbox/execd/%s%s" % (OB, sub), body, OSB_B)
    refused(r, "execd %s %s of A's command or session through B's own box" % (method, sub.split("?")[0]))
    h.ok("a-secret-output" not in r.text, "no output of A's command in the answer", r.describe())

# ---- A's boxes are unchanged -----------------------------------------------------------------
for box in (EA, OA):
    r = srv.get("/v1/sandboxes/" + box)
    h.ok(r.status == 200 and r.get("status") == "running" and r.get("app_id") == "appa",
         "A's box %s still runs and is still app A's" % box, r.describe())
    h.ok((r.get("metadata") or {}).get("owner") == "a", "A's box metadata is A's", r.describe())
    r = srv.post("/v1/sandboxes/%s/exec" % box, {"command": "ls -d /workspace/keep; ls %s 2>&1" % PWN})
    h.ok(r.status == 200 and "/workspace/keep" in (r.get("stdout") or "") and
         "No such file" in (r.get("stdout") or ""),
         "A's files are intact and no command, upload or move of B made %s" % PWN, r.describe())
r = call("GET", EXA + "/command/status/" + CID, None, OSB_A)
h.ok(r.status == 200 and r.get("running") is True, "A's background command still runs", r.describe())
r = call("GET", EXA + "/command/%s/logs" % CID, None, OSB_A)
h.ok(r.status == 200 and "a-secret-output" in r.text, "A still reads its command's logs", r.describe())
r = call("POST", EXA + "/session/%s/run" % SID, {"command": "echo still-mine"}, OSB_A)
h.ok(r.status == 200 and "still-mine" in r.text, "A's session still runs A's commands", r.describe())
r = call("GET", "/e2b/sandboxes/" + EA, None, E2B_A)
h.ok(r.status == 200 and r.get("state") == "running", "A's E2B sandbox is running (not paused by B)", r.describe())
h.done()
