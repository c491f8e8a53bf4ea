#!/usr/bin/env python3
"""Attacks on box ids between apps (docs/security.md "Box ids and boxes of
the CLI"). An app's API key tries to take, block or be handed the box that
another app's keys or thread ids lead to. Each check passes only when the
attack fails:
- keys an old scheme confused ((a, x-y, c) and (a-x, y, c)) are two boxes;
- an app cannot make a box at the id another app's keys or thread id
  derive (by the current scheme or by the first one), so that app is not
  blocked (409) and the admin acquiring its keys is not handed the
  squatter's box;
- a thread id is per app: two apps with one thread id get two boxes, and
  neither reaches the other's files;
- the same through the MCP tool route (sandbox_create), and the fronts'
  creates (E2B, OpenSandbox) never land on a box of another app."""
import os
import re
import secrets
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
from abserver import chat_box_id, legacy_chat_box_id, legacy_thread_box_id, thread_box_id  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
KEYS = {app: "key-%s-%s" % (app, secrets.token_hex(8)) for app in ("a", "a-x", "appa", "appb")}
h = abserver.ServerHarness(budget=200)
srv = h.start_server(name="boxids", token=TOKEN,
                     config={"idle_pause": "1h", "idle_stop": "2h",
                             "api_keys": [{"key": k, "app_id": app} for app, k in KEYS.items()]})
SECRET = "IDS-SECRET-" + secrets.token_hex(6)


def acquire(app, body):
    return srv.post("/v1/sandboxes", body, token=KEYS[app])


def mine(r, app, what):
    """The answer is a box of app (made or found), not a refusal nor another's box."""
    h.ok(r.status in (200, 201) and r.get("app_id") == app, "%s: app %s gets a box of its own" % (what, app),
         r.describe())
    return r.get("id") if r.status in (200, 201) else None


def plant(box):
    r = srv.exec(box, "echo %s > /workspace/secret" % SECRET)
    h.ok(r.status == 200 and r.get("exit_code") == 0, "plant a secret in %s" % box, r.describe())


def unseen(box, app, what):
    r = srv.exec(box, "cat /workspace/secret 2>/dev/null; true", token=KEYS[app])
    h.ok(r.status != 200 or SECRET not in (r.get("stdout") or ""), "%s: no secret of another app" % what,
         r.describe())


# ---- 1. keys the first scheme confused -----------------------------------------------------

ia = mine(acquire("a", {"user_id": "x-y", "chat_id": "c"}), "a", "(a, x-y, c)")
if ia:
    plant(ia)
r = acquire("a-x", {"user_id": "y", "chat_id": "c"})
ib = mine(r, "a-x", "(a-x, y, c), which the first scheme gave the same id")
h.ok(ia and ib and ia != ib, "(a, x-y, c) and (a-x, y, c) are two boxes", r.describe())
if ib:
    unseen(ib, "a-x", "(a-x, y, c)")

# ---- 2. taking the id another app's keys derive ----------------------------------------------

for scheme, bid in (("the current scheme", chat_box_id("appb", "u1", "c1")),
                    ("the first scheme", legacy_chat_box_id("appb", "u1", "c1"))):
    r = acquire("appa", {"id": bid})
    h.ok(r.status not in (200, 201), "appa cannot make a box at the id %s gives appb's keys" % scheme,
         r.describe())
    if r.status in (200, 201):
        plant(bid)
r = acquire("appb", {"user_id": "u1", "chat_id": "c1"})
ib = mine(r, "appb", "appb's keys after appa tried their ids")
if ib:
    unseen(ib, "appb", "appb's box of its keys")

# the admin acquires appb's keys: it must be handed appb's box, never appa's
for scheme, bid in (("the current scheme", chat_box_id("appb", "u2", "c2")),
                    ("the first scheme", legacy_chat_box_id("appb", "u2", "c2"))):
    acquire("appa", {"id": bid})
r = srv.post("/v1/sandboxes", {"app_id": "appb", "user_id": "u2", "chat_id": "c2"})
h.ok(r.status in (200, 201) and r.get("app_id") == "appb" and r.get("user_id") == "u2" and
     r.get("chat_id") == "c2", "the admin acquiring appb's keys gets appb's box", r.describe())
r = srv.get("/v1/sandboxes", token=KEYS["appa"])
h.ok(r.status == 200 and not any(b.get("id") in (chat_box_id("appb", "u2", "c2"),
                                                 legacy_chat_box_id("appb", "u2", "c2"))
                                 for b in (r.json if isinstance(r.json, list) else r.get("sandboxes") or [])),
     "appa owns no box at the ids of appb's keys", r.describe())

# ---- 3. thread ids ---------------------------------------------------------------------------

ta = mine(acquire("appa", {"thread_id": "shared-thread"}), "appa", "appa's thread shared-thread")
if ta:
    plant(ta)
r = acquire("appb", {"thread_id": "shared-thread"})
tb = mine(r, "appb", "appb's thread of the same name")
h.ok(ta and tb and ta != tb, "one thread id of two apps is two boxes", r.describe())
if tb:
    unseen(tb, "appb", "appb's thread box")
for scheme, bid in (("the current scheme", thread_box_id("t-b", "appb")),
                    ("the first scheme", legacy_thread_box_id("t-b"))):
    r = acquire("appa", {"id": bid})
    h.ok(r.status not in (200, 201), "appa cannot make a box at the id %s gives appb's thread" % scheme,
         r.describe())
mine(acquire("appb", {"thread_id": "t-b"}), "appb", "appb's thread t-b after appa tried its ids")
r = srv.post("/v1/sandboxes", {"thread_id": "t-b"})
h.ok(r.status in (200, 201) and r.get("app_id") is None, "the admin's thread t-b is the admin's own box",
     r.describe())

# ---- 4. the MCP tools' create, and the fronts ------------------------------------------------

ACCEPT = {"Accept": "application/json, text/event-stream"}
r = srv.post("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                 "clientInfo": {"name": "test_box_ids", "version": "1"}}},
             headers=ACCEPT, token=KEYS["appa"])
sid = r.header("Mcp-Session-Id")
h.ok(r.status == 200 and sid, "appa opens an MCP session", r.describe())
hdrs = dict(ACCEPT, **{"Mcp-Session-Id": sid or ""})
bid = legacy_chat_box_id("appb", "u3", "c3")
r = srv.post("/mcp", {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "sandbox_create", "arguments": {"id": bid}}},
             headers=hdrs, token=KEYS["appa"])
res = r.get("result") or {}
h.ok(r.status == 200 and (res.get("isError") or "error" in r.json), "MCP sandbox_create at appb's id is refused",
     r.describe())
mine(acquire("appb", {"user_id": "u3", "chat_id": "c3"}), "appb", "appb's keys after appa's MCP create")

r = srv.post("/e2b/sandboxes", {"templateID": "base", "timeout": 60}, token=None,
             headers={"X-API-Key": KEYS["appa"]})
e2b = r.get("sandboxID")
h.ok(r.status in (200, 201) and e2b and not re.match(r"^[0-9a-f]{16}$", e2b),
     "an E2B create gets an id outside the derived ids' shape", r.describe())
r = srv.post("/opensandbox/v1/sandboxes", {"image": {"uri": "base"}, "timeout": 60,
                                           "resourceLimits": {}, "entrypoint": ["sleep", "infinity"]},
             token=None, headers={"OPEN-SANDBOX-API-KEY": KEYS["appa"]})
osb = r.get("id")
h.ok(r.status in (200, 201, 202) and osb and not re.match(r"^[0-9a-f]{16}$", osb),
     "an OpenSandbox create gets an id outside the derived ids' shape", r.describe())
h.done()
