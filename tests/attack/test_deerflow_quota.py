#!/usr/bin/env python3
"""Attacks on the exec quota through DeerFlow's front. Each check passes
only when the attack fails.

An app whose key allows one exec at a time holds that exec with a long
command, then tries to run more commands anyway through the AIO routes of
its DeerFlow sandbox: a command in a shell session (typed into a shell the
box's init keeps, not run by the exec door itself) and /v1/bash/exec must
both be refused (429 in AIO's envelope) and never run. The front's own
file calls are no user's exec and still answer while the slot is held.
Once the slot is free, a session's command runs again and is audited."""
import os
import secrets
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
from abserver import wait_for  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
h = abserver.ServerHarness(budget=120)
srv = h.start_server(name="deerflowquota", token=TOKEN,
                     config={"idle_pause": "1h", "idle_stop": "2h",
                             "quotas": {"apps": {"dq": {"max_execs": 1}}}})
r = srv.post("/v1/keys", {"app_id": "dq"})
h.eq(r.status, 201, "a key of app dq (allowed one exec at a time)", r.describe())
KEY = r.get("key") or "none"
r = srv.request("POST", "/deerflow/api/sandboxes", body={"sandbox_id": "quota1"}, headers={"X-API-Key": KEY},
                token=None)
h.eq(r.status, 200, "a DeerFlow sandbox of app dq", r.describe())
BASE = urllib.parse.urlparse(r.get("sandbox_url") or "http://x/none").path
BOX = BASE.rsplit("/", 1)[1].split(".")[0]


def aio(path, body):
    return srv.request("POST", BASE + path, body=body, token=None)


# the one exec: a REST exec of the app that runs a while
held = {}
t = threading.Thread(target=lambda: held.setdefault("r", srv.request(
    "POST", "/v1/sandboxes/%s/exec" % BOX, body={"command": "sleep 4"}, headers={"X-API-Key": KEY}, token=None,
    timeout=30)))
t.start()
time.sleep(1.0)
MARK = "/workspace/ran-" + secrets.token_hex(4)
r = aio("/v1/shell/exec", {"id": "s1", "command": "touch " + MARK})
h.ok(r.status == 429 and r.get("success") is False, "a session's command while the app's one exec runs: 429",
     r.describe())
r = aio("/v1/bash/exec", {"command": "touch " + MARK})
h.ok(r.status == 429 and r.get("success") is False, "/v1/bash/exec while the app's one exec runs: 429",
     r.describe())
r = aio("/v1/file/list", {"path": "/workspace"})
h.eq(r.status, 200, "file calls are no exec: they still answer", r.describe())
t.join()
h.eq(held["r"].status, 200, "the held exec ended", held["r"].describe())
r = aio("/v1/shell/exec", {"id": "s1", "command": "ls " + MARK + " 2>&1; echo done"})
out = ((r.json or {}).get("data") or {}).get("output") or ""
h.ok(r.status == 200 and "No such file" in out and out.strip().endswith("done"),
     "the refused commands never ran; with the slot free a command runs", r.describe())
r = srv.get("/v1/sandboxes/%s/execs" % BOX)
cmds = [e.get("command") for e in (r.get("execs") or [])]
h.ok(any("echo done" in (c or "") for c in cmds), "the session's command is in the exec audit", r.describe())
h.done()
