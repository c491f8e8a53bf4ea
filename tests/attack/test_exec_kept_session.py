#!/usr/bin/env python3
"""Attacks on the kept connections to boxes' inits (a connection carries the
next exec once an exec left nothing behind). Each check passes only when the
attack fails: app B, which has a box of its own, runs commands right after app
A's execs left A's session waiting, and must land in its own box every time
(never in A's kept session: A's files and environment stay out of reach);
B's exec on A's box is refused as if the box did not exist, with A's session
kept; and a command in A's box that tries to keep its session busy for the
next caller (a process that outlives it, writing into the session's pipes
later) makes the next exec use a fresh session that sees none of its
output."""
import os
import secrets
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
h = abserver.ServerHarness(budget=120)
srv = h.start_server(name="kept", token=TOKEN, config={"limits": {"disk": "64M", "memory": "128M"}})
keys = {}
for app in ("appa", "appb"):
    r = srv.post("/v1/keys", {"app_id": app})
    h.eq(r.status, 201, "a key of %s" % app, r.describe())
    keys[app] = r.get("key") or "none"
A, B = "kept-a-%d" % os.getpid(), "kept-b-%d" % os.getpid()
for app, box in (("appa", A), ("appb", B)):
    r = srv.post("/v1/sandboxes", {"id": box}, token=keys[app])
    h.eq(r.status, 201, "%s's box" % app, r.describe())


def ex(app, box, body):
    r = srv.post("/v1/sandboxes/%s/exec" % box, body, token=keys[app])
    return r, (r.json if r.status == 200 and isinstance(r.json, dict) else {})


SECRET = secrets.token_hex(8)
r, j = ex("appa", A, {"argv": ["sh", "-c", "echo %s > /tmp/a-secret; echo $PPID" % SECRET]})
h.eq(j.get("exit_code"), 0, "app A writes a secret into its box", r.describe())
a_session = j.get("stdout", "").strip()

for i in range(5):
    ex("appa", A, {"argv": ["true"]})  # A's session is kept, waiting
    r, j = ex("appb", B, {"argv": ["sh", "-c", "cat /tmp/a-secret 2>&1; echo ${ABX_A-none}"]})
    h.ok(j.get("exit_code") == 0 and SECRET not in j.get("stdout", "") and
         j.get("stdout", "").endswith("none\n"),
         "B's exec %d right after A's runs in B's box, not in A's kept session" % i, r.describe())

r, j = ex("appb", A, {"argv": ["cat", "/tmp/a-secret"]})
h.eq(r.status, 404, "B's exec on A's box: 404, as for no box", r.describe())
r, j = ex("appa", A, {"argv": ["sh", "-c", "echo $PPID"]})
h.eq(j.get("stdout", "").strip(), a_session, "A's session is still A's (kept across B's attempts)",
     r.describe())

# A command that leaves a writer on the session's pipes: the next exec must not
# get a session that still carries it (its late output would reach the next caller).
r, j = ex("appa", A, {"argv": ["sh", "-c", "(sleep 1; echo LATE-OUTPUT; echo LATE-ERR >&2) & echo spawned"]})
h.eq(j.get("stdout"), "spawned\n", "a command that leaves a late writer on its pipes", r.describe())
time.sleep(1.5)
r, j = ex("appa", A, {"argv": ["sh", "-c", "echo next; echo $PPID"]})
out = j.get("stdout", "")
h.ok("LATE" not in out and "LATE" not in j.get("stderr", "") and out.startswith("next\n"),
     "the next exec sees none of the late output", r.describe())
h.ok(out.split("\n")[1:2] != [a_session], "... and ran in a fresh session", repr(out))

for app, box in (("appa", A), ("appb", B)):
    srv.delete("/v1/sandboxes/%s" % box, token=keys[app])
h.done()
