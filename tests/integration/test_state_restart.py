#!/usr/bin/env python3
"""What the E2B and OpenSandbox fronts start lives in the box, not the server.

Both SDKs, unchanged, start long commands (E2B background processes, one
waiting for stdin; OpenSandbox background commands and a session with shell
state), then the server is stopped and started again (SIGTERM, a new port),
and the SDKs reconnect: the E2B processes are listed, connected to (their
output from before the restart and after), fed and killed, and one's exit
code arrives; the OpenSandbox commands' status, logs and exit codes are
there, the session's shell kept its variables, directory and functions,
and an interrupt after the restart ends a command (tests/e2b/restart.mjs,
tests/opensandbox/restart.mjs). The server is stopped while streams are in
flight (an E2B Connect, an OpenSandbox foreground command and a session
run): it must stop at once and cleanly (with ASan: no use after free of the
manager by the fronts' threads). A box whose init runs a background command
is busy: it is not paused for idleness while the command runs, and is once
it ended. Every command the SDKs started (E2B processes, OpenSandbox
background commands and session runs) went through the manager's door: a
row of the exec audit (exit code -1: it runs on) and an `exec` event with
`background: true`. Skipped (77) without node or the SDKs."""
import http.client
import json
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
E2B_DIR = os.path.join(ROOT, "tests", "e2b")
OSB_DIR = os.path.join(ROOT, "tests", "opensandbox")

node = shutil.which("node")
if not node:
    print("1..0 # SKIP node is not installed (scripts/npm-deps.sh installs it)")
    sys.exit(77)
h = abserver.ServerHarness(budget=200)
have_e2b = os.path.isdir(os.path.join(E2B_DIR, "node_modules", "e2b"))
have_osb = os.path.isdir(os.path.join(OSB_DIR, "node_modules", "@alibaba-group", "opensandbox"))
if not have_e2b and not have_osb:
    h.skip_all("neither SDK is installed (scripts/npm-deps.sh installs them)")

TOKEN = "state-admin-token-%s-0123456789" % os.getpid()
srv = h.start_server(token=TOKEN)


def run(what, cwd, argv, env):
    """Runs one phase of an SDK script, relays its TAP lines; returns its state line's JSON."""
    try:
        p = subprocess.run([node] + argv, capture_output=True, text=True, timeout=120 * h.slow, env=env, cwd=cwd)
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        rc = "timeout"
    state, n, pending = None, 0, None
    for line in out.splitlines() + [""]:
        if line.startswith("# state: "):
            state = json.loads(line[len("# state: "):])
            continue
        if line.startswith("# ") and pending:
            pending[1].append(line[2:])
            continue
        if pending:
            h.ok(pending[0], pending[2], "\n".join(pending[1]) + ("\nnode stderr:\n" + err[-1500:]
                                                                   if not pending[0] else ""))
            pending = None
        if line.startswith("ok ") or line.startswith("not ok "):
            pending = (line.startswith("ok "), [], "%s: %s" % (what, line.split(" - ", 1)[-1]))
            n += 1
    h.ok(rc == 0 and n > 0, "%s: ran %d checks and exited 0" % (what, n),
         "exit %s\nstdout:\n%s\nstderr:\n%s\nserver log:\n%s" % (rc, out[-1500:], err[-2000:], srv.log()[-2000:]))
    return state


# both E2B SDKs the project pins (2.51.0, 2.45.0 by an npm alias), each with its own sandbox
E2B_SDKS = [s for s in ("e2b", "e2b-2.45.0") if os.path.isdir(os.path.join(E2B_DIR, "node_modules", s))]


def e2b_env(sdk):
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env.update({"E2B_API_URL": srv.url + "/e2b", "E2B_SANDBOX_URL": srv.url + "/e2b/envd", "E2B_API_KEY": TOKEN,
                "E2B_SDK_MODULE": sdk, "E2B_VALIDATE_API_KEY": "false"})
    return env


osb_env = dict(os.environ, OPENSANDBOX_DISABLE_METRICS="1")
e2b_states = {}
osb_state = None
for sdk in E2B_SDKS if have_e2b else ():
    e2b_states[sdk] = run("E2B %s before" % sdk, E2B_DIR, [os.path.join(E2B_DIR, "restart.mjs"), "before", srv.url],
                          e2b_env(sdk))
    h.ok(e2b_states[sdk] is not None, "E2B %s: the state of the first phase" % sdk)
e2b_state = e2b_states.get("e2b") or next(iter(e2b_states.values()), None)  # the one followed below
if have_osb:
    osb_state = run("OpenSandbox before", OSB_DIR,
                    [os.path.join(OSB_DIR, "restart.mjs"), "before", srv.url, TOKEN], osb_env)
    h.ok(osb_state is not None, "OpenSandbox: the state of the first phase")

# The door: audit rows and exec events of the commands the SDKs started.
def audit_rows():
    try:
        with sqlite3.connect(os.path.join(srv.data, "agentbox.db"), timeout=5) as c:
            return c.execute("SELECT command, exit_code FROM exec_audit").fetchall()
    except sqlite3.Error as e:
        h.diag("audit read: %s" % e)
        return []


events = srv.sse("/v1/events?types=exec&after=0")
seen = []
end = time.monotonic() + 5
while time.monotonic() < end:
    ev = events.next(0.5)
    if ev is None:
        if events.ended or len(seen) >= 5:
            break
        continue
    try:
        seen.append(json.loads(ev.data).get("data") or {})
    except ValueError:
        pass
events.close()
wanted = []
if e2b_state:
    wanted += ["echo before-restart", "read x; echo got-"]
if osb_state:
    wanted += ["echo one; sleep 4", "sleep 3; echo done", "export KEEP=kept"]
rows = audit_rows()
for w in wanted:
    h.ok(any(w in (c or "") and code == -1 for c, code in rows),
         "the door: an audit row (exit code -1) for `%s`" % w, repr(rows)[:1500])
    h.ok(any(w in (d.get("command") or "") and d.get("background") is True and d.get("process_id")
             for d in seen), "the door: an exec event (background, process_id) for `%s`" % w,
         json.dumps(seen)[:1500])

# Streams in flight while the server stops.
streams = []


def open_stream(path, body, headers):
    u = urllib.parse.urlsplit(srv.url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.request("POST", path, body=body, headers=headers)
    resp = c.getresponse()
    streams.append(c)
    return resp.status


if e2b_state:
    msg = json.dumps({"process": {"pid": e2b_state["long"]}}).encode()
    st = open_stream("/e2b/envd/process.Process/Connect", struct.pack(">BI", 0, len(msg)) + msg,
                     {"Content-Type": "application/connect+json", "Connect-Protocol-Version": "1",
                      "E2b-Sandbox-Id": e2b_state["sandboxId"], "X-Access-Token": e2b_state.get("token", "")})
    h.eq(st, 200, "an E2B Connect stream follows a process while the server stops")
if osb_state:
    AUTH = {"Authorization": "Bearer " + TOKEN, "Content-Type": "application/json"}
    E = "/opensandbox/execd/%s" % osb_state["id"]
    st = open_stream(E + "/command", json.dumps({"command": "sleep 30; echo never"}), AUTH)
    h.eq(st, 200, "an OpenSandbox foreground command streams while the server stops")
    r = srv.post(E + "/session", {"cwd": "/tmp"}, headers=AUTH, token=None)
    sid2 = r.get("session_id") or "none"
    st = open_stream(E + "/session/%s/run" % sid2, json.dumps({"command": "sleep 30"}), AUTH)
    h.eq(st, 200, "an OpenSandbox session run streams while the server stops")
t0 = time.monotonic()
stopped, rc = srv.stop()
dt = time.monotonic() - t0
h.ok(stopped and rc == 0 and dt < 15 * h.slow,
     "the server stops on SIGTERM while the commands run and streams are followed (exit %s, %.1f s)" % (rc, dt))
for c in streams:
    c.close()
err = srv.start()
h.ok(err is None, "the server starts again", err or "")

for sdk, state in e2b_states.items():
    if state:
        run("E2B %s after" % sdk, E2B_DIR,
            [os.path.join(E2B_DIR, "restart.mjs"), "after", srv.url, json.dumps(state)], e2b_env(sdk))
if osb_state:
    run("OpenSandbox after", OSB_DIR,
        [os.path.join(OSB_DIR, "restart.mjs"), "after", srv.url, TOKEN, json.dumps(osb_state)], osb_env)

# ---- a running background command keeps its box from idling out ------------------------
srv2 = h.start_server(name="idle", token=TOKEN, config={"idle_pause": "1s", "reaper_interval": "200ms"})
AUTH = {"Authorization": "Bearer " + TOKEN}
r = srv2.post("/opensandbox/v1/sandboxes", {"image": {"uri": "base"}, "timeout": 300, "resourceLimits": {},
                                           "entrypoint": ["sleep", "infinity"]}, headers=AUTH, token=None)
box = r.get("id") or "none"
r = srv2.post("/opensandbox/execd/%s/command" % box, {"command": "sleep 4; echo done", "background": True},
              headers=AUTH, token=None)
h.eq(r.status, 200, "a background command in a box that idles out after 1 s", r.describe())
time.sleep(2.5)
h.eq(srv2.get("/v1/sandboxes/%s" % box).get("status"), "running",
     "2.5 s later, while the command runs, the box is not paused")
paused = abserver.wait_for(lambda: srv2.get("/v1/sandboxes/%s" % box).get("status") == "paused", 15, 0.2)
h.ok(paused, "once the command ended, the box idles out (paused)",
     srv2.get("/v1/sandboxes/%s" % box).describe())
h.done()
