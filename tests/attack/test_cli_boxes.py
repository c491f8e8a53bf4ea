#!/usr/bin/env python3
"""Attacks on boxes made with the CLI (docs/security.md "Box ids and boxes
of the CLI"). A box `agentbox create` makes has no app: it is the admin's.
The boxes here are made by the CLI while a server runs on the same data
folder, so the server has no record of them yet; an API key then tries to
reach one through every door that names a box by id. Each check passes only
when the attack fails:
- a create by the box's id (POST /v1/sandboxes {"id"}) does not adopt it;
- the tool routes (POST /v1/tools/{name} {"sandbox_id"}) do not acquire it;
- GET, exec, files, the port route, the E2B and the OpenSandbox fronts do
  not find it;
- it is in no list of the key's; it stays the admin's (no app) with its
  files, and the admin still uses it."""
import os
import secrets
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
KEY = "key-a-" + secrets.token_hex(8)
h = abserver.ServerHarness(budget=200)
srv = h.start_server(name="cliboxes", token=TOKEN,
                     config={"idle_pause": "1h", "idle_stop": "2h",
                             "api_keys": [{"key": KEY, "app_id": "appa"}]})

SECRET = "CLI-SECRET-" + secrets.token_hex(6)


def cli_create(box):
    r = h.cli("create", "--id", box, timeout=60)
    h.ok(r.rc == 0, "the CLI makes box %s while the server runs" % box, r.describe())


def not_reached(r, what, box):
    """The key's request must fail, and must not show the box's secret."""
    h.ok(r.status in (401, 403, 404, 409) and SECRET not in r.text,
         "%s: the API key does not reach the CLI's box %s" % (what, box), r.describe())


def owner(box):
    r = srv.get("/v1/sandboxes/" + box)
    return (r.status, r.get("app_id") if r.status == 200 else None)


def box_ids(r):
    j = r.json
    if isinstance(j, dict):
        for k in ("sandboxes", "items", "boxes"):
            if isinstance(j.get(k), list):
                j = j[k]
                break
    if not isinstance(j, list):
        return []
    return [b.get("id") or b.get("sandboxID") or b.get("sandboxId") for b in j if isinstance(b, dict)]


# ---- 1. create by the CLI box's id ----------------------------------------------

B1 = "cli-own-" + secrets.token_hex(3)
cli_create(B1)
r = srv.post("/v1/sandboxes", {"id": B1}, token=KEY)
h.ok(r.status not in (200, 201), "an API key's create with the id of a CLI box does not adopt it",
     r.describe())
h.eq(owner(B1), (200, None), "the CLI box is recorded as the admin's (no app)")
r = srv.exec(B1, "echo %s > /workspace/secret; cat /workspace/secret" % SECRET)
h.ok(r.status == 200 and SECRET in (r.get("stdout") or ""), "the admin uses the CLI box", r.describe())
r = srv.get("/v1/sandboxes/" + B1, token=KEY)
not_reached(r, "GET after the create", B1)
r = srv.exec(B1, "cat /workspace/secret", token=KEY)
not_reached(r, "exec after the create", B1)
r = srv.post("/v1/sandboxes", {"id": B1}, token=KEY)
not_reached(r, "a second create", B1)
h.eq(owner(B1), (200, None), "the CLI box is still the admin's")

# ---- 2. every other door, before the server has any record of the box ------------

B2 = "cli-two-" + secrets.token_hex(3)
cli_create(B2)
for field in ("id", "sandbox_id"):
    r = srv.post("/v1/tools/bash", {field: B2, "command": "cat /workspace/secret; echo hi"}, token=KEY)
    h.ok(r.get("sandbox_id") != B2 and SECRET not in r.text,
         "POST /v1/tools/bash with %s: the API key does not reach the CLI's box %s" % (field, B2),
         r.describe())
doors = [
    ("POST /v1/sandboxes/{id}/tools/bash",
     lambda: srv.post("/v1/sandboxes/%s/tools/bash" % B2, {"args": {"command": "echo hi"}}, token=KEY)),
    ("GET /v1/sandboxes/{id}", lambda: srv.get("/v1/sandboxes/" + B2, token=KEY)),
    ("POST /v1/sandboxes/{id}/exec", lambda: srv.exec(B2, "echo hi", token=KEY)),
    ("GET /v1/sandboxes/{id}/files", lambda: srv.get("/v1/sandboxes/%s/files" % B2, token=KEY,
                                                     query={"path": "/workspace"})),
    ("POST /v1/sandboxes/{id}/start", lambda: srv.post("/v1/sandboxes/%s/start" % B2, token=KEY)),
    ("the port route", lambda: srv.get("/v1/sandboxes/%s/ports/8000/" % B2, token=KEY)),
    ("E2B GET /e2b/sandboxes/{id}",
     lambda: srv.get("/e2b/sandboxes/" + B2, token=None, headers={"X-API-Key": KEY})),
    ("E2B connect", lambda: srv.post("/e2b/sandboxes/%s/connect" % B2, {"timeout": 60}, token=None,
                                     headers={"X-API-Key": KEY})),
    ("OpenSandbox GET /opensandbox/v1/sandboxes/{id}",
     lambda: srv.get("/opensandbox/v1/sandboxes/" + B2, token=None,
                     headers={"OPEN-SANDBOX-API-KEY": KEY})),
    ("OpenSandbox resume",
     lambda: srv.post("/opensandbox/v1/sandboxes/%s/resume" % B2, {}, token=None,
                      headers={"OPEN-SANDBOX-API-KEY": KEY})),
]
for what, door in doors:
    not_reached(door(), what, B2)
r = srv.post("/v1/sandboxes", {"id": B2}, token=KEY)
h.ok(r.status not in (200, 201), "after all that, a create by its id still does not adopt it", r.describe())
st = owner(B2)
h.ok(st in ((200, None), (404, None)), "the second CLI box is the admin's or still unrecorded (%s)" % (st,))

# ---- 3. the key's lists --------------------------------------------------------------

for what, r in (("GET /v1/sandboxes", srv.get("/v1/sandboxes", token=KEY)),
                ("E2B GET /e2b/v2/sandboxes",
                 srv.get("/e2b/v2/sandboxes", token=None, headers={"X-API-Key": KEY})),
                ("OpenSandbox GET /opensandbox/v1/sandboxes",
                 srv.get("/opensandbox/v1/sandboxes", token=None, headers={"OPEN-SANDBOX-API-KEY": KEY}))):
    ids = box_ids(r)
    h.ok(r.status == 200 and B1 not in ids and B2 not in ids, "%s of the key lists no CLI box" % what,
         r.describe())
r = srv.get("/v1/sandboxes")
h.ok(B1 in box_ids(r), "the admin's list has the CLI box", r.describe())
h.eq(h.cli_status(B1), "running", "the CLI box is still there")
h.done()
