#!/usr/bin/env python3
"""Attacks on the exec quota through the fronts' long-lived commands. Each
check passes only when the attack fails: an app whose exec quota is spent
(exec_rate with a small burst) cannot go on running commands by starting
them as E2B PTYs (`process.Process/Start` with `pty`) or E2B background
processes, or by typing them into an OpenSandbox session
(`/session/{sid}/run`), or as OpenSandbox background commands: every user's
command goes through the manager's door, which admits it against the app's
quota and records it (an `exec` event and an audit row) before it runs.
Before, PTYs and session runs skipped the door: unlimited, unaudited."""
import http.client
import json
import os
import secrets
import struct
import sys
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
h = abserver.ServerHarness(budget=150)
# exec_rate 0.001/s: the burst (4) is all the app gets during the test
srv = h.start_server(name="fquota", token=TOKEN,
                     config={"quotas": {"apps": {"qapp": {"exec_rate": 0.001, "exec_burst": 4}}}})
r = srv.post("/v1/keys", {"app_id": "qapp"})
h.eq(r.status, 201, "a key of the app with an exec quota", r.describe())
KEY = r.get("key") or "none"


def connect_start(envd, msg):
    """Starts a process over the Connect protocol: its first frame (start or end), as JSON."""
    u = urllib.parse.urlsplit(srv.url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    body = json.dumps(msg).encode()
    try:
        c.request("POST", "/e2b/envd/process.Process/Start", body=struct.pack(">BI", 0, len(body)) + body,
                  headers=dict(envd, **{"Content-Type": "application/connect+json",
                                        "Connect-Protocol-Version": "1"}))
        resp = c.getresponse()
        head = resp.read(5)
        if len(head) < 5:
            return {"http": resp.status}
        flags, n = struct.unpack(">BI", head)
        frame = json.loads(resp.read(n) or b"{}")
        frame["_flags"] = flags
        return frame
    finally:
        c.close()


def started(frame):
    return bool(((frame or {}).get("event") or {}).get("start"))


# ---- E2B: PTYs and background processes past the quota ----------------------------
r = srv.post("/e2b/v2/sandboxes", {"timeout": 300}, headers={"X-API-Key": KEY}, token=None)
h.eq(r.status, 201, "an E2B sandbox of the app", r.describe())
ENVD = {"E2b-Sandbox-Id": r.get("sandboxID") or "", "X-Access-Token": r.get("envdAccessToken") or ""}
pty = {"process": {"cmd": "/bin/sh", "args": ["-c", "sleep 60"]}, "pty": {"size": {"cols": 80, "rows": 24}}}
frames = [connect_start(ENVD, pty) for _ in range(8)]
n_pty = sum(started(f) for f in frames)
h.ok(n_pty <= 4, "E2B PTYs past the app's exec burst (4) are refused: %d of 8 started" % n_pty,
     json.dumps(frames)[:1500])
refused = [f for f in frames if not started(f)]
h.ok(refused and all((f.get("error") or {}).get("code") == "resource_exhausted" for f in refused),
     "... with resource_exhausted", json.dumps(refused)[:800])
bg = {"process": {"cmd": "/bin/sh", "args": ["-c", "sleep 60"]}}
f = connect_start(ENVD, bg)
h.ok(not started(f), "an E2B background process past the quota is refused before it starts (no start event)", json.dumps(f))

# ---- OpenSandbox: session runs and background commands past the quota --------------
r = srv.post("/opensandbox/v1/sandboxes", {"image": {"uri": "base"}, "timeout": 300,
                                          "resourceLimits": {}, "entrypoint": ["sleep", "infinity"]},
             headers={"OPEN-SANDBOX-API-KEY": KEY}, token=None)
h.ok(r.status in (200, 201, 202), "an OpenSandbox sandbox of the app", r.describe())
box = r.get("id") or "none"
OSB = {"OPEN-SANDBOX-API-KEY": KEY}
E = "/opensandbox/execd/%s" % box
r = srv.post(E + "/session", {"cwd": "/tmp"}, headers=OSB, token=None)
h.eq(r.status, 200, "an OpenSandbox session", r.describe())
sid = r.get("session_id") or "none"
codes = []
for i in range(6):
    r = srv.post(E + "/session/%s/run" % sid, {"command": "echo run-%d" % i}, headers=OSB, token=None)
    codes.append((r.status, r.err_code, (r.body or b"")[:200]))
ran = sum(1 for c in codes if c[0] == 200)
h.ok(ran < 6 and all(c[0] in (200, 429) for c in codes),
     "session runs past the app's exec quota are refused (%d of 6 ran)" % ran, repr(codes))
r = srv.post(E + "/command", {"command": "sleep 60", "background": True}, headers=OSB, token=None)
h.eq(r.status, 429, "an OpenSandbox background command past the quota is refused", r.describe())
h.done()
