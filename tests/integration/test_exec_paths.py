#!/usr/bin/env python3
"""One exec door: every way of running a command in a box is recorded the same
way. Against the real `agentbox serve`: a REST exec (the reference), a REST
exec of an argv, the bash and sandbox_shell tools over REST, the bash tool
over MCP (/mcp) and an OpenSandbox command each show up as an `exec` event
on /v1/events, in the exec counter of /metrics and as a row of the store's
exec audit table, with the box's env. The commands the box's init holds (an
E2B process and PTY, a command run in an OpenSandbox session) are recorded
once at their start: one `exec` event (background, with its process id) and
one audit row (exit code -1), no exec metric. The fronts' internal work is
no exec: OpenSandbox's file info, listing and chmod, and E2B's home link,
add neither events, nor audit rows, nor execs (they are file operations:
agentbox_file_ops_total). The CLI (`agentbox exec`, one word = shell
string, several = argv;
`agentbox tool ... bash`) runs in its own process: its execs are rows of the
same audit table (its events and metrics are its own process's, gone with
it), and it works on a box the server made as well as on one of `agentbox
create`, which then becomes known to the server."""
import base64
import http.client
import json
import os
import sqlite3
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
from abserver import wait_for  # noqa: E402

h = abserver.ServerHarness(budget=180)
TOKEN = "exec-paths-token-%d-0123456789" % os.getpid()
S = h.start_server(token=TOKEN, config={"limits": {"disk": "64M", "memory": "128M", "timeout": "60s"}})
DB = os.path.join(S.data, "agentbox.db")

events = S.sse("/v1/events?types=exec")
seen = []


def pull(pred, timeout=10):
    end = time.monotonic() + timeout
    while time.monotonic() < end and not pred():
        ev = events.next(min(0.5, max(0.0, end - time.monotonic())))
        if ev is None:
            if events.ended:
                break
            continue
        try:
            seen.append(json.loads(ev.data))
        except ValueError:
            pass


def exec_events(box, command):
    return [e.get("data") or {} for e in seen
            if e.get("box_id") == box and (e.get("data") or {}).get("command") == command]


def audit(box, command):
    """Audit rows (command, exit_code) of box with this command text."""
    try:
        c = sqlite3.connect("file:%s?mode=ro" % DB, uri=True, timeout=5)
        try:
            return c.execute("SELECT command, exit_code, stdout_bytes FROM exec_audit WHERE box_id = ? AND command = ?",
                             (box, command)).fetchall()
        finally:
            c.close()
    except sqlite3.Error as e:
        h.diag("audit read: %s" % e)
        return []


def events_like(box, marker):
    return [e.get("data") or {} for e in seen
            if e.get("box_id") == box and marker in (e.get("data") or {}).get("command", "")]


def audit_like(box, marker):
    try:
        c = sqlite3.connect("file:%s?mode=ro" % DB, uri=True, timeout=5)
        try:
            return c.execute("SELECT command, exit_code FROM exec_audit WHERE box_id = ? AND instr(command, ?) > 0",
                             (box, marker)).fetchall()
        finally:
            c.close()
    except sqlite3.Error as e:
        h.diag("audit read: %s" % e)
        return []


def recorded_like(box, marker, what, exit_code, before):
    """As recorded, for a command whose text holds marker (a front may wrap it)."""
    pull(lambda: events_like(box, marker))
    ev = events_like(box, marker)
    h.ok(len(ev) == 1 and ev[0].get("exit_code") == exit_code,
         "%s: one exec event with its command and exit code %d" % (what, exit_code), json.dumps(seen[-5:]))
    h.ok(wait_for(lambda: len(audit_like(box, marker)) == 1, 10, 0.1),
         "%s: one row in the store's exec audit" % what, repr(audit_like(box, marker)))
    h.ok(wait_for(lambda: execs_total() - before == 1, 5, 0.1), "%s: agentbox_execs_total went up by 1" % what,
         "%s - %s" % (execs_total(), before))


def started_like(box, marker, what, before):
    """As recorded, for a user's command the box's init holds (ab_manager_cmd_start /
    _cmd_record): one exec event at its start, background with its process id, one audit
    row (exit code -1: it runs on), and no exec metric (the server does not see its end)."""
    pull(lambda: events_like(box, marker))
    ev = events_like(box, marker)
    h.ok(len(ev) == 1 and ev[0].get("background") is True and ev[0].get("process_id"),
         "%s: one exec event at its start (background, process_id)" % what, json.dumps(seen[-5:]))
    h.ok(wait_for(lambda: [row[1] for row in audit_like(box, marker)] == [-1], 10, 0.1),
         "%s: one row in the store's exec audit (exit code -1)" % what, repr(audit_like(box, marker)))
    pull(lambda: False, 0.3)
    h.eq(execs_total(), before, "%s: no exec metric (it runs on in the box)" % what)
    h.eq(len(events_like(box, marker)), 1, "%s: still one exec event after its end" % what)


def file_ops_total():
    return abserver.metric_sum(S.metrics() or [], "agentbox_file_ops_total") or 0


def execs_total():
    return abserver.metric_sum(S.metrics() or [], "agentbox_execs_total") or 0


def recorded(box, command, what, exit_code=0, counted=None, before=None):
    """The exec of `command` in box is an exec event, an audit row and (when
    counted) one more in agentbox_execs_total than `before`."""
    pull(lambda: exec_events(box, command))
    ev = exec_events(box, command)
    h.ok(len(ev) == 1 and ev[0].get("exit_code") == exit_code,
         "%s: one exec event with its command and exit code %d" % (what, exit_code), json.dumps(seen[-5:]))
    h.ok(wait_for(lambda: len(audit(box, command)) == 1, 10, 0.1),
         "%s: one row in the store's exec audit" % what, repr(audit(box, command)))
    if counted:
        h.eq(execs_total() - before, counted, "%s: agentbox_execs_total went up by %d" % (what, counted))
    return ev[0] if ev else {}


h.eq(events.status, 200, "GET /v1/events?types=exec answers 200", events.describe())
r = S.post("/v1/sandboxes", {"id": "paths", "env": {"BOXVAR": "from-box"}})
h.eq(r.status, 201, "a box with env BOXVAR", r.describe())

# ---- the reference: a REST exec ----------------------------------------------------------
n0 = execs_total()
r = S.exec("paths", "echo rest $BOXVAR")
h.eq((r.status, r.get("stdout")), (200, "rest from-box\n"), "REST exec runs with the box env", r.describe())
recorded("paths", "echo rest $BOXVAR", "REST exec", counted=1, before=n0)

# ---- REST exec of an argv -----------------------------------------------------------------
n0 = execs_total()
r = S.post("/v1/sandboxes/paths/exec", {"argv": ["sh", "-c", "echo argv $BOXVAR", "it's"]})
h.eq((r.status, r.get("stdout")), (200, "argv from-box\n"), "REST argv exec runs with the box env", r.describe())
ev = recorded("paths", "sh -c 'echo argv $BOXVAR' 'it'\\''s'", "REST argv exec", counted=1, before=n0)
h.eq(ev.get("argv"), ["sh", "-c", "echo argv $BOXVAR", "it's"], "REST argv exec: the event carries the argv",
     json.dumps(ev))

# ---- the bash and sandbox_shell tools over REST ------------------------------------------
n0 = execs_total()
r = S.post("/v1/sandboxes/paths/tools/bash", {"args": {"command": "echo tool $BOXVAR; exit 3"}})
h.ok(r.status == 200 and "tool from-box" in (r.get("output") or "") and "Exit Code: 3" in (r.get("output") or ""),
     "REST bash tool runs with the box env", r.describe())
recorded("paths", "echo tool $BOXVAR; exit 3", "REST bash tool", exit_code=3, counted=1, before=n0)
n0 = execs_total()
r = S.post("/v1/sandboxes/paths/tools/sandbox_shell", {"command": "echo shell $BOXVAR"})
h.ok(r.status == 200 and "shell from-box" in (r.get("output") or ""), "REST sandbox_shell tool runs",
     r.describe())
recorded("paths", "echo shell $BOXVAR", "REST sandbox_shell tool", counted=1, before=n0)

f0 = file_ops_total()
r = S.post("/v1/sandboxes/paths/tools/read_file", {"args": {"path": "/workspace/nothing-here"}})
h.eq(r.status, 200, "REST read_file tool of a missing file answers", r.describe())
h.ok(file_ops_total() > f0, "... through the manager's file doors (agentbox_file_ops_total)",
     "%s -> %s" % (f0, file_ops_total()))

# ---- the bash tool over MCP ---------------------------------------------------------------
ACCEPT = {"Accept": "application/json, text/event-stream"}
r = S.post("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "test_exec_paths.py", "version": "1"}}}, headers=ACCEPT)
sid = r.header("Mcp-Session-Id", "")
hdrs = dict(ACCEPT)
if sid:
    hdrs["Mcp-Session-Id"] = sid
S.post("/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=hdrs)
n0 = execs_total()
r = S.post("/mcp", {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "bash", "arguments": {"sandbox_id": "paths", "command": "echo mcp $BOXVAR"}}},
           headers=hdrs)
res = (r.json or {}).get("result") or {}
h.ok(r.status == 200 and "mcp from-box" in json.dumps(res) and res.get("isError") is False,
     "MCP bash tool runs with the box env", r.describe())
recorded("paths", "echo mcp $BOXVAR", "MCP bash tool", counted=1, before=n0)

# ---- the E2B front: a process and a PTY ---------------------------------------------------
KEY = {"X-API-Key": TOKEN}
r = S.post("/e2b/v2/sandboxes", {"timeout": 300, "envVars": {"BOXVAR": "from-e2b"}}, headers=KEY, token=None)
eb, etok = r.get("sandboxID"), r.get("envdAccessToken")
h.eq(r.status, 201, "an E2B sandbox", r.describe())
ENVD = {"E2b-Sandbox-Id": eb or "", "X-Access-Token": etok or "", "Content-Type": "application/connect+json"}


def envelope(obj, flags=0):
    b = json.dumps(obj).encode()
    return struct.pack(">BI", flags, len(b)) + b


def envd_start(body):
    c = http.client.HTTPConnection(S.host, S.port, timeout=30)
    c.request("POST", "/e2b/envd/process.Process/Start", body=envelope(body), headers=ENVD)
    resp = c.getresponse()
    frames = []
    while True:
        head = resp.read(5)
        if len(head) < 5:
            break
        frames.append(json.loads(resp.read(struct.unpack(">I", head[1:5])[0])))
        if head[0] & 2:
            break
    c.close()
    ends = [f["event"]["end"] for f in frames if "end" in f.get("event", {})]
    out = b"".join(base64.b64decode((f.get("event", {}).get("data") or {}).get(k, ""))
                   for f in frames for k in ("stdout", "pty"))
    return (ends[0] if ends else {}), out, frames


pull(lambda: False, 0.3)
n0 = execs_total()
end, out, frames = envd_start({"process": {"cmd": "/bin/sh", "args": ["-c", "echo e2bproc $BOXVAR; exit 4"]}})
h.ok(end.get("exitCode") == 4 and b"e2bproc from-e2b" in out, "E2B process runs with the box env", frames)
started_like(eb, "echo e2bproc $BOXVAR; exit 4", "E2B process", n0)
n0 = execs_total()
end, out, frames = envd_start({"process": {"cmd": "/bin/sh", "args": ["-c", "echo e2bpty $BOXVAR; exit 5"]},
                               "pty": {"size": {"cols": 80, "rows": 24}}})
h.ok(end.get("exitCode") == 5 and b"e2bpty from-e2b" in out, "E2B PTY runs with the box env", frames)
started_like(eb, "echo e2bpty $BOXVAR; exit 5", "E2B PTY", n0)
pull(lambda: False, 0.5)
h.eq([e for e in seen if e.get("box_id") == eb and "/home/user" in (e.get("data") or {}).get("command", "")], [],
     "E2B's home link is no exec of the user's")
h.eq([row for row in audit_like(eb, "/home") if "ln -s" in row[0]], [], "... and no row of the exec audit")

# ---- the OpenSandbox front: a command, a session's run; files are no execs ----------------
OKEY = {"OPEN-SANDBOX-API-KEY": TOKEN}
r = S.post("/opensandbox/v1/sandboxes", {"image": {"uri": "base"}, "timeout": 300, "resourceLimits": {}, "entrypoint": ["sleep", "inf"],
                                          "env": {"BOXVAR": "from-osb"}}, headers=OKEY, token=None)
ob = r.get("id")
h.eq(r.status, 202, "an OpenSandbox sandbox", r.describe())
EX = "/opensandbox/execd/%s" % ob
n0 = execs_total()
r = S.post(EX + "/command", {"command": "echo osbcmd $BOXVAR; exit 6"}, headers=OKEY, token=None)
h.ok(r.status == 200 and b"osbcmd from-osb" in r.body, "OpenSandbox command runs with the box env", r.describe())
recorded_like(ob, "echo osbcmd $BOXVAR; exit 6", "OpenSandbox command", 6, n0)
r = S.post(EX + "/session", {}, headers=OKEY, token=None)
sess = r.get("session_id")
h.ok(r.status == 200 and sess, "an OpenSandbox session", r.describe())
n0 = execs_total()
r = S.post(EX + "/session/%s/run" % sess, {"command": "echo osbsess $BOXVAR; false"}, headers=OKEY, token=None)
h.ok(r.status == 200 and b"osbsess from-osb" in r.body, "a command in the OpenSandbox session runs", r.describe())
started_like(ob, "echo osbsess $BOXVAR; false", "OpenSandbox session run", n0)

pull(lambda: False, 0.3)
n_seen, n0, f0 = len(seen), execs_total(), file_ops_total()
r = S.post(EX + "/files/permissions", {"/workspace/permfile": {"mode": 600}}, headers=OKEY, token=None)
h.eq(r.status, 404, "OpenSandbox chmod of a missing file: 404", r.describe())
S.post(EX + "/command", {"command": "touch /workspace/permfile"}, headers=OKEY, token=None)
pull(lambda: False, 0.5)
n_seen, n0 = len(seen), execs_total()
r = S.post(EX + "/files/permissions", {"/workspace/permfile": {"mode": 640, "owner": "root", "group": "0"}},
           headers=OKEY, token=None)
h.eq(r.status, 200, "OpenSandbox chmod and chown", r.describe())
r = S.get(EX + "/files/info", headers=OKEY, token=None, query={"path": "/workspace/permfile"})
info = (r.json or {}).get("/workspace/permfile") or {}
h.ok(r.status == 200 and info.get("mode") == 640 and info.get("owner") == "root" and info.get("group") == "root"
     and info.get("type") == "file", "OpenSandbox file info: the new mode, owner and group by name", r.describe())
r = S.get(EX + "/directories/list", headers=OKEY, token=None, query={"path": "/workspace"})
h.ok(r.status == 200 and any(i.get("path") == "/workspace/permfile" and i.get("owner") == "root"
                             for i in (r.json or [])), "OpenSandbox listing: FileInfo with owner names",
     r.describe())
pull(lambda: False, 0.8)
h.eq([e for e in seen[n_seen:] if e.get("box_id") == ob], [], "OpenSandbox chmod, file info, listing: no exec event")
h.eq(execs_total(), n0, "... and no exec counted")
h.ok(file_ops_total() - f0 >= 4, "... but file operations (agentbox_file_ops_total)",
     "%s -> %s" % (f0, file_ops_total()))

# ---- the CLI --------------------------------------------------------------------------------
r = h.cli("exec", "paths", "--", "echo cli $BOXVAR")
h.eq((r.rc, r.out), (0, "cli from-box\n"), "CLI exec of a shell string: the box env, through bash", r.describe())
h.ok(wait_for(lambda: len(audit("paths", "echo cli $BOXVAR")) == 1, 10, 0.1),
     "CLI exec: one row in the store's exec audit", repr(audit("paths", "echo cli $BOXVAR")))
r = h.cli("exec", "paths", "--", "printf", "%s|", "a b", "$BOXVAR")
h.eq((r.rc, r.out), (0, "a b|$BOXVAR|"), "CLI exec of several words: an argv, no shell", r.describe())
h.eq(len(audit("paths", "printf '%s|' 'a b' '$BOXVAR'")), 1, "CLI argv exec: one audit row, quoted as a shell would")
r = h.cli("exec", "paths", "--", "ab-no-such-program", "x")
h.eq(r.rc, 127, "CLI argv exec of a missing program exits 127", r.describe())
h.ok("ab-no-such-program: command not found" in r.err, "... saying so on stderr", r.describe())
r = h.cli("tool", "paths", "bash", json.dumps({"command": "echo clitool $BOXVAR"}))
h.ok(r.rc == 0 and "clitool from-box" in r.out, "CLI bash tool runs with the box env", r.describe())
h.eq(len(audit("paths", "echo clitool $BOXVAR")), 1, "CLI bash tool: one audit row")
pull(lambda: False, 0.5)
h.eq([e for e in seen if (e.get("data") or {}).get("command", "").startswith(("echo cli", "printf"))], [],
     "CLI execs are not events of the server (another process ran them)")

# A box of `agentbox create`, unknown to the server: a CLI exec records it.
r = h.cli("create", "--id", "clibox", "--disk", "64M")
h.eq(r.rc, 0, "agentbox create --id clibox", r.describe())
h.eq(S.get("/v1/sandboxes/clibox").status, 404, "the server does not know a box of agentbox create yet")
r = h.cli("exec", "clibox", "--", "true")
h.eq(r.rc, 0, "CLI exec in that box", r.describe())
h.eq(len(audit("clibox", "true")), 1, "... is an audit row")
b = S.box("clibox") or {}
h.eq((b.get("id"), b.get("status")), ("clibox", "running"), "... and the box is in the store: the server sees it",
     json.dumps(b))
r = S.exec("clibox", "echo via server")
h.eq((r.status, r.get("stdout")), (200, "via server\n"), "the server can exec in it", r.describe())
r = h.cli("rm", "clibox")
h.eq(r.rc, 0, "agentbox rm clibox", r.describe())
h.eq(S.get("/v1/sandboxes/clibox").status, 404, "agentbox rm removes its record too")

h.done()
