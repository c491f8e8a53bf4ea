#!/usr/bin/env python3
"""Attacks on the exec quota through the fronts' terminals. Each check passes
only when the attack fails.

An app whose key allows one exec at a time holds that exec with a long
command, then tries to run more commands anyway through the E2B and
OpenSandbox fronts' terminal-backed ways of running one:
- an E2B PTY (envd's process.Start with "pty") must be refused while the
  app's one exec runs, and its command must never run;
- a command run in an OpenSandbox bash session must be refused (429) and
  never run.
Both once skipped the manager's exec door: no quota, no audit, no event.
The fronts' own file work is no user's exec and must not be refused for
the quota: OpenSandbox's file info and chmod still answer while the slot
is held (they once ran as execs of the app's)."""
import json
import os
import secrets
import struct
import sys
import threading
import time
import http.client

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
from abserver import wait_for  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
h = abserver.ServerHarness(budget=150)
srv = h.start_server(name="quotafronts", token=TOKEN,
                     config={"idle_pause": "1h", "idle_stop": "2h",
                             "quotas": {"apps": {"qf": {"max_execs": 1}}}})

r = srv.post("/v1/keys", {"app_id": "qf"})
h.eq(r.status, 201, "a key of app qf (allowed one exec at a time)", r.describe())
KEY = r.get("key") or "none"

r = srv.post("/e2b/v2/sandboxes", {"timeout": 300}, headers={"X-API-Key": KEY}, token=None)
h.eq(r.status, 201, "an E2B sandbox of app qf", r.describe())
eb, etok = r.get("sandboxID") or "none", r.get("envdAccessToken") or ""
r = srv.post("/opensandbox/v1/sandboxes", {"image": {"uri": "base"}, "timeout": 300, "resourceLimits": {},
                                            "entrypoint": ["sleep", "infinity"]},
             headers={"OPEN-SANDBOX-API-KEY": KEY}, token=None)
h.ok(r.status in (200, 201, 202) and r.get("id"), "an OpenSandbox sandbox of app qf", r.describe())
ob = r.get("id") or "none"
OKEY = {"OPEN-SANDBOX-API-KEY": KEY}
EX = "/opensandbox/execd/%s" % ob
r = srv.post(EX + "/session", {}, headers=OKEY, token=None)
sess = r.get("session_id") or "none"
h.ok(r.status == 200 and r.get("session_id"), "an OpenSandbox session", r.describe())
srv.post(EX + "/command", {"command": "touch /workspace/f"}, headers=OKEY, token=None)


def exists(box, path):
    return srv.exec(box, "test -e %s && echo yes || echo no" % path).get("stdout") == "yes\n"


def hold(box, secs):
    """Runs a long exec of app qf in box on a thread; returns it once the
    app's one exec is in flight."""
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", srv.exec(box, "sleep %d" % secs, token=KEY)))
    t.start()
    busy = wait_for(lambda: 'agentbox_app_execs_in_flight{app="qf"} 1' in (srv.get("/metrics").text or ""),
                    10, 0.05)
    h.ok(busy, "app qf's one exec is in flight", srv.get("/metrics").text[-400:] if not busy else "")
    return t


def envelope(obj, flags=0):
    b = json.dumps(obj).encode()
    return struct.pack(">BI", flags, len(b)) + b


def pty_start(command):
    """process.Start with a PTY; the frames of its stream."""
    c = http.client.HTTPConnection(srv.host, srv.port, timeout=30)
    c.request("POST", "/e2b/envd/process.Process/Start",
              body=envelope({"process": {"cmd": "/bin/sh", "args": ["-c", command]},
                             "pty": {"size": {"cols": 80, "rows": 24}}}),
              headers={"E2b-Sandbox-Id": eb, "X-Access-Token": etok, "Content-Type": "application/connect+json"})
    resp = c.getresponse()
    frames = [resp.status]
    while True:
        head = resp.read(5)
        if len(head) < 5:
            break
        frames.append(json.loads(resp.read(struct.unpack(">I", head[1:5])[0]) or b"{}"))
        if head[0] & 2:
            break
    c.close()
    return frames


# ---- an E2B PTY while the app's one exec runs -------------------------------------------
t = hold(eb, 5)
frames = pty_start("touch /workspace/pty-ran")
ended_with_error = bool(frames) and isinstance(frames[-1], dict) and (frames[-1].get("error") or {}).get("code") \
    == "resource_exhausted"
h.ok(ended_with_error, "E2B PTY over the app's exec quota: refused (resource_exhausted)", frames)
t.join()
time.sleep(0.5)
h.ok(not exists(eb, "/workspace/pty-ran"), "... and its command never ran")

# ---- an OpenSandbox session's run while the app's one exec runs -------------------------
t = hold(ob, 5)
r = srv.post(EX + "/session/%s/run" % sess, {"command": "touch /workspace/sess-ran"}, headers=OKEY, token=None)
h.eq(r.status, 429, "OpenSandbox session run over the app's exec quota: 429", r.describe())
# file work of the front is no exec of the app's: not refused for the quota
r = srv.get(EX + "/files/info", headers=OKEY, token=None, query={"path": "/workspace/f"})
h.eq(r.status, 200, "OpenSandbox file info while the slot is held: 200 (no exec)", r.describe())
r = srv.post(EX + "/files/permissions", {"/workspace/f": {"mode": 600}}, headers=OKEY, token=None)
h.eq(r.status, 200, "OpenSandbox chmod while the slot is held: 200 (no exec)", r.describe())
t.join()
time.sleep(0.5)
h.ok(not exists(ob, "/workspace/sess-ran"), "... and the session's command never ran")

h.done()
