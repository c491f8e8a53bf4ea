#!/usr/bin/env python3
"""The fast exec path over HTTP keeps what every exec promises. A connection
to a box's init carries the next exec when the last one left nothing behind
(init's session answers EXIT with AGAIN, the server keeps the connection):
consecutive execs run in the same session (the parent of the command), yet
each starts clean (its own env, cwd, umask and timeout; a profile's umask does
not leak into an argv exec); an exec that leaves a process running, times
out or is cut short is served by a fresh session next; a stop and start, a
pause and resume, and a restart of the server all leave exec working (a kept
connection to a session that is gone is never used); activity, the audit row
and the "exec" event are still recorded for every exec; a shell string that
is exactly `true`, `:` or `false` answers as bash would."""
import os
import sqlite3
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
from abserver import wait_for  # noqa: E402

h = abserver.ServerHarness(budget=150)
srv = h.start_server(name="reuse", config={"limits": {"disk": "64M", "memory": "128M", "timeout": "60s"}})
B = "reuse-%d" % os.getpid()
r = srv.post("/v1/sandboxes", {"id": B})
h.eq(r.status, 201, "box created", r.describe())


def ex(body, **kw):
    r = srv.post("/v1/sandboxes/%s/exec" % B, body, **kw)
    j = r.json if r.status == 200 and isinstance(r.json, dict) else {}
    return r, j


# The parent of an argv exec's command is the session that started it.
PPID = {"argv": ["sh", "-c", "echo $PPID"]}


def session():
    r, j = ex(PPID)
    return j.get("stdout", "").strip() if j.get("exit_code") == 0 else "(%s)" % r.describe()


s1 = session()
s2 = session()
s3 = session()
h.ok(s1.isdigit() and s1 == s2 == s3,
     "consecutive execs that leave nothing behind run in one session (%s %s %s)" % (s1, s2, s3))

# ---- each exec starts clean -------------------------------------------------
r, j = ex({"argv": ["sh", "-c", "echo $ABX_ONE; pwd; umask"], "env": {"ABX_ONE": "1"}, "cwd": "/tmp"})
h.eq(j.get("stdout"), "1\n/tmp\n0022\n", "an exec with env and cwd", r.describe())
r, j = ex({"argv": ["sh", "-c", "echo ${ABX_ONE-unset}; pwd; echo $PPID"]})
out = j.get("stdout", "").split("\n")
h.eq(out[:2], ["unset", "/workspace"], "the next exec in the same session sees neither", r.describe())
h.eq(out[2:3], [s1], "... (the same session served it)")

# A login profile's umask applies to shell strings, never to an argv exec after one.
r, j = ex({"command": "printf 'umask 077\\nexport ABX_PROFILE=yes\\n' > ~/.profile"})
h.eq(j.get("exit_code"), 0, "a ~/.profile that sets umask 077", r.describe())
r, j = ex({"command": "touch /tmp/abx-shell && stat -c %a /tmp/abx-shell && echo $ABX_PROFILE"})
h.eq(j.get("stdout"), "600\nyes\n", "a shell string runs with the profile's umask and env", r.describe())
r, j = ex({"argv": ["sh", "-c", "umask; echo ${ABX_PROFILE-unset}; echo $PPID"]})
out = j.get("stdout", "").split("\n")
h.eq(out[:2], ["0022", "unset"], "an argv exec after it: the base umask and env, not the profile's",
     r.describe())
r, j = ex({"command": "rm -f ~/.profile /tmp/abx-shell"})
h.eq(j.get("exit_code"), 0, "profile removed", r.describe())

# ---- what must not reuse ------------------------------------------------------
before = session()
r, j = ex({"argv": ["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $! > /tmp/abx-bg; echo started"]})
h.eq(j.get("stdout"), "started\n", "an exec that leaves a background process", r.describe())
after = session()
h.ok(after.isdigit() and after != before,
     "... the next exec gets a new session (%s, was %s)" % (after, before))
r, j = ex({"argv": ["sh", "-c", "kill -0 $(cat /tmp/abx-bg) && echo alive"]})
h.eq(j.get("stdout"), "alive\n", "... and the background process still runs", r.describe())
ex({"argv": ["sh", "-c", "kill $(cat /tmp/abx-bg); rm -f /tmp/abx-bg"]})

r, j = ex({"argv": ["sleep", "5"], "timeout_s": 0.3})
h.ok(j.get("timed_out") is True and j.get("exit_code") == 124, "a timed-out exec: 124", r.describe())
r, j = ex({"argv": ["sh", "-c", "echo ok"]})
h.eq((j.get("exit_code"), j.get("stdout")), (0, "ok\n"), "... the next exec runs", r.describe())

r, j = ex({"argv": ["sh", "-c", "exit 7"]})
h.eq(j.get("exit_code"), 7, "exit codes come through a kept session", r.describe())
r, j = ex({"argv": ["sh", "-c", "cat; echo; echo err >&2"], "stdin": "in-data"})
h.eq((j.get("stdout"), j.get("stderr")), ("in-data\n", "err\n"), "stdin, stdout and stderr", r.describe())
r, j = ex({"argv": ["no-such-program-abx"]})
h.eq(j.get("exit_code"), 127, "a missing program: 127", r.describe())
h.eq(session(), session(), "and the session is kept again after all of them")

# ---- a kept connection never outlives its session ------------------------------
s_before = session()
for step, path in (("stop", "stop"), ("start", "start")):
    r = srv.post("/v1/sandboxes/%s/%s" % (B, path), {})
    h.ok(r.status in (200, 202, 204), "%s the box" % step, r.describe())
r, j = ex(PPID)
h.eq(j.get("exit_code"), 0, "exec after a stop and start (the kept connection is dropped)", r.describe())
r = srv.post("/v1/sandboxes/%s/pause" % B, {})
h.ok(r.status in (200, 202, 204), "pause the box", r.describe())
r, j = ex(PPID, timeout=60)
h.eq(j.get("exit_code"), 0, "exec on the paused box resumes it and runs", r.describe())
h.eq(srv.status_of(B), "running", "... the box runs")

# The box's init restarted under the server (its init killed): a kept
# connection hangs up, so the next exec connects anew (the box starts again).
kept = session()
ipid = (h.cli_boxes() or {}).get(B, {}).get("init_pid") or 0
if ipid:
    os.kill(ipid, 9)
    wait_for(lambda: not os.path.exists("/proc/%d/stat" % ipid) or
             open("/proc/%d/stat" % ipid).read().rsplit(")", 1)[1].split()[0] in ("Z", "X"), 10)
    r, j = ex(PPID, timeout=60)
    h.eq(j.get("exit_code"), 0, "exec after the box's init was killed runs (box started again)",
         r.describe())
else:
    h.ok(False, "the box's init pid is known", repr(h.cli_boxes()))

srv.restart()
r, j = ex(PPID)
h.eq(j.get("exit_code"), 0, "exec after a server restart", r.describe())

# ---- every exec is still recorded -----------------------------------------------
events = srv.sse("/v1/events?types=exec")
n0 = sqlite3.connect(os.path.join(srv.data, "agentbox.db")).execute(
    "SELECT COUNT(*) FROM exec_audit WHERE box_id = ?", (B,)).fetchone()[0]
t0 = srv.box(B).get("last_active_at") or 0
for i in range(3):
    ex({"argv": ["echo", "rec-%d" % i]})


def audit_rows():
    return sqlite3.connect(os.path.join(srv.data, "agentbox.db")).execute(
        "SELECT COUNT(*) FROM exec_audit WHERE box_id = ?", (B,)).fetchone()[0]


# The row is written once the answer is sent: read straight from the file, it may trail.
wait_for(lambda: audit_rows() - n0 >= 3, 10)
h.eq(audit_rows() - n0, 3, "three execs, three audit rows")
seen = []
end = time.monotonic() + 10
while time.monotonic() < end and len(seen) < 3:
    ev = events.next(0.5)
    if ev is not None and "rec-" in ev.data:
        seen.append(ev.data)
h.eq(len(seen), 3, "... and three exec events", repr(seen))
time.sleep(0.01)
t1 = srv.box(B).get("last_active_at") or 0
h.ok(t1 > t0, "... and the box's activity moved on (%s -> %s)" % (t0, t1))
events.close()

# ---- builtins: what bash answers, on a kept session ------------------------------------------------
for cmd, code in (("true", 0), (":", 0), ("false", 1), ("true x", 0), ("false; true", 0)):
    r, j = ex({"command": cmd})
    h.eq((j.get("exit_code"), j.get("stdout"), j.get("stderr")), (code, "", ""),
         "command %r: exit %d, no output" % (cmd, code), r.describe())
r, j = ex({"command": "true", "env": {"SHELLOPTS": "xtrace"}})
h.eq((j.get("exit_code"), j.get("stderr")), (0, "+ true\n"), "true with SHELLOPTS=xtrace: bash traces it",
     r.describe())

r = srv.delete("/v1/sandboxes/%s" % B)
h.ok(r.status in (200, 202, 204), "box deleted", r.describe())
h.done()
