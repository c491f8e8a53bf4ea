"""A server stopped (SIGTERM) while commands stream through every front
exits cleanly: exit 0, quickly, with no sanitizer report (under ASan: the
threads that run the fronts' execs end before the manager they use is
freed).

One server, one box; then at once: a REST exec stream, an OpenSandbox
foreground command stream, an OpenSandbox background command, six
OpenSandbox session runs (each thread notices the stop at its own time,
some late in it), a metrics watch, an E2B process stream
(process.Process/Start), an E2B PTY and an E2B WatchDir stream. Once each
has shown it is running, SIGTERM: the server must exit 0 before its
watchdog (10 s, which exits without freeing anything) and log neither
"exiting anyway" nor "threads still running"; every stream must end. Then
the same data dir serves again: the commands whose client was the stream
(REST exec, OpenSandbox's foreground command) are gone, those that live in
the box's init (an OpenSandbox background command, an E2B process) run on,
and the box still runs commands."""
import base64
import http.client
import json
import os
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=150)
TOKEN = "stop-admin-token-%d-0123456789" % os.getpid()
srv = h.start_server(token=TOKEN, config={"max_streams": 64, "max_streams_per_address": 64})
AUTH = {"Authorization": "Bearer " + TOKEN}
LONG = "for i in $(seq 1 600); do echo tick$i; sleep 0.1; done"
SESSIONS = 6

r = srv.post("/e2b/v2/sandboxes", {"templateID": "base", "timeout": 600}, headers={"X-API-Key": TOKEN}, token=None)
h.eq(r.status, 201, "an E2B sandbox (also the box of the other fronts)", r.describe())
sid, etok = r.get("sandboxID") or "", r.get("envdAccessToken") or ""
ENVD = {"E2b-Sandbox-Id": sid, "X-Access-Token": etok}


class Stream:
    """A streaming request read on a thread of its own: .got (bytes so far),
    .ended (the server closed it), .error."""

    def __init__(self, name, method, path, body=b"", headers=None):
        self.name, self.got, self.ended, self.error = name, b"", False, None
        self.status = None
        self.c = http.client.HTTPConnection(srv.host, srv.port, timeout=60)
        try:
            self.c.request(method, path, body=body, headers=headers or {})
            self.resp = self.c.getresponse()
            self.status = self.resp.status
        except (OSError, http.client.HTTPException) as e:
            self.error = "%s: %s" % (type(e).__name__, e)
            self.ended = True
            return
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        try:
            while True:
                b = self.resp.read1(65536) if hasattr(self.resp, "read1") else self.resp.read(1)
                if not b:
                    break
                self.got += b
        except (OSError, http.client.HTTPException, ValueError) as e:
            self.error = str(e)
        self.ended = True


def envelope(obj, flags=0):
    b = json.dumps(obj).encode()
    return struct.pack(">BI", flags, len(b)) + b


def js(obj):
    return json.dumps(obj).encode()


JSON = dict(AUTH, **{"Content-Type": "application/json"})
SSE = dict(JSON, Accept="text/event-stream")
CONNECT = dict(ENVD, **{"Content-Type": "application/connect+json"})
EX = "/opensandbox/execd/%s" % sid

# several session runs: their threads notice the stop at different times
# (each polls its stream every 200 ms), some late in the stop
sessions = []
for i in range(SESSIONS):
    r = srv.post(EX + "/session", {})
    sessions.append(r.get("session_id") or "")
h.ok(all(sessions), "%d OpenSandbox sessions" % SESSIONS, r.describe())
r = srv.post(EX + "/command", {"command": "sleep 300; : osb-bg", "background": True})
h.eq(r.status, 200, "an OpenSandbox background command", r.describe())

streams = [
    Stream("REST exec stream", "POST", "/v1/sandboxes/%s/exec" % sid, js({"command": LONG + "; : rest"}), SSE),
    Stream("OpenSandbox command stream", "POST", EX + "/command", js({"command": LONG + "; : osb-fg"}), SSE),
] + [
    Stream("OpenSandbox session run %d" % i, "POST", EX + "/session/%s/run" % sess, js({"command": LONG}), SSE)
    for i, sess in enumerate(sessions)
] + [
    Stream("OpenSandbox metrics watch", "GET", EX + "/metrics/watch", b"", AUTH),
    Stream("E2B process stream", "POST", "/e2b/envd/process.Process/Start",
           envelope({"process": {"cmd": "/bin/bash", "args": ["-c", LONG + "; : e2b-proc"]}}), CONNECT),
    Stream("E2B PTY", "POST", "/e2b/envd/process.Process/Start",
           envelope({"process": {"cmd": "/bin/bash", "args": ["-c", LONG]},
                     "pty": {"size": {"cols": 80, "rows": 24}}}), CONNECT),
    Stream("E2B WatchDir", "POST", "/e2b/envd/filesystem.Filesystem/WatchDir",
           envelope({"path": "/tmp", "recursive": False}), CONNECT),
]
for s in streams:
    h.ok(s.status == 200, "%s: 200" % s.name, "status %s error %s got %r" % (s.status, s.error, s.got[:500]))

# each is running: some output (the watch: its first event; the PTY: bytes)
def running(s):
    if s.name == "E2B WatchDir":
        return len(s.got) >= 5
    if s.name == "OpenSandbox metrics watch":
        return b"data:" in s.got
    if s.name == "E2B PTY":
        return len(s.got) > 200
    if s.name == "E2B process stream":
        return base64.b64encode(b"tick2")[:4] in s.got or len(s.got) > 300
    return b"tick2" in s.got


abserver.wait_for(lambda: all(running(s) for s in streams), timeout=20 * h.slow)
for s in streams:
    h.ok(running(s), "%s: running before the stop" % s.name, "got %r" % s.got[-500:])

t0 = time.monotonic()
stopped, rc = srv.stop(timeout=15)
took = time.monotonic() - t0
log = srv.log()
h.ok(stopped and rc == 0, "SIGTERM while every front streams: exit 0 (%.1fs)" % took,
     "rc=%s\n%s" % (rc, log[-3000:]))
h.ok(took < 9, "the stop ends every stream and thread before serve's watchdog (%.1fs < 9s)" % took, log[-2000:])
h.ok("exiting anyway" not in log and "threads still running" not in log,
     "no thread outlived the stop (the log has no watchdog or leftover-thread line)", log[-2000:])
for marker in ("AddressSanitizer", "LeakSanitizer", "runtime error:", "ThreadSanitizer"):
    h.ok(marker not in log, "no %s report in the server's log" % marker.rstrip(":"), log[-3000:])
abserver.wait_for(lambda: all(s.ended for s in streams), timeout=5)
for s in streams:
    h.ok(s.ended, "%s: ended with the server" % s.name)
    s.c.close()
srv.bad_stops.clear()  # judged above, with the log

srv.start()
r = srv.post("/v1/sandboxes/%s/exec" % sid, {"command": "sleep 0.5; ps -eo args"})
ps = r.get("stdout") or ""
h.ok(r.status == 200 and "; : rest" not in ps and "; : osb-fg" not in ps,
     "the commands whose client was a stream ended with it (REST exec, OpenSandbox foreground)",
     r.describe())
h.ok(r.status == 200 and "osb-bg" in ps and "e2b-proc" in ps,
     "the commands that live in the box's init run on (OpenSandbox background, E2B process)",
     r.describe())
r = srv.post("/v1/sandboxes/%s/exec" % sid, {"command": "echo after"})
h.ok(r.status == 200 and "after" in (r.get("stdout") or ""), "the box runs commands after the restart",
     r.describe())
h.done()
