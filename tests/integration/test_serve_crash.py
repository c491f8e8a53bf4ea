#!/usr/bin/env python3
"""kill -9 of `agentbox serve` at spread-out moments (idle, during a running
exec, right after an acquire was sent, right after a delete was accepted,
with a box's init killed while the server was down), then a restart on the
same data dir. Each time: every box is found again with the status it really
has (running boxes still running with the same init and usable, a box whose
init died is stopped and resumes), every workspace file written before the
kill is there, and the server's boxes and the backend's (`agentbox ls
--json`, DATA/boxes) are the same set - no box that one side does not know."""
import json
import os
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
from abserver import chat_box_id, thread_box_id, wait_for  # noqa: E402

h = abserver.ServerHarness(budget=115)
srv = h.start_server(name="crash")
files = {}   # box id -> {path: bytes} written before some kill
expect = {}  # box id -> "running" | "stopped"
round_no = [0]


def put_file(box, content):
    n = sum(len(v) for v in files.values())
    path = "/workspace/k%d.txt" % n
    r = srv.put(srv.file_path(box, path), content)
    if h.ok(r.status == 201, "wrote %s in %s" % (path, box), r.describe()):
        files.setdefault(box, {})[path] = content
    r = srv.exec(box, "printf '%%s' %s > /workspace/e%d.txt && sync" % (content.decode(), n))
    if h.ok(r.get("exit_code") == 0, "wrote /workspace/e%d.txt in %s by exec" % (n, box), r.describe()):
        files[box]["/workspace/e%d.txt" % n] = content


def pid_gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def init_pids():
    return {b: e.get("init_pid") for b, e in (h.cli_boxes() or {}).items() if e.get("status") == "running"}


def restart(what):
    why = srv.start()
    if why:
        h.bail_server(srv, "restart after %s: %s" % (what, why))


def settled():
    """The server's boxes once none is creating (or deleting) any more; None if it never settles."""
    last = [None]

    def ok():
        v = srv.list()
        last[0] = v
        return v is not None and all(b.get("status") not in ("creating", "deleting") for b in v)

    wait_for(ok, 5, 0.2)
    return last[0]


def verify(what, pids_before=None):
    """Checks the state after a restart against `expect`, `files` and the backend."""
    boxes = settled()
    h.ok(boxes is not None, "%s: the server lists its boxes" % what)
    boxes = {b.get("id"): b for b in boxes or []}
    got = {b: (boxes.get(b) or {}).get("status") for b in expect}
    h.eq(got, expect, "%s: every box is found with its status" % what)
    cli = h.cli_boxes() or {}
    backend = {b.get("backend_id"): b.get("status") for b in boxes.values()}
    h.eq({k: (cli.get(k) or {}).get("status") for k in backend}, backend,
         "%s: the backend (agentbox ls --json) agrees on each box's status" % what)
    h.eq(sorted(set(cli) - set(backend)), [], "%s: the backend has no box the server does not know" % what)
    h.eq(h.box_dirs(), sorted(cli), "%s: %s holds exactly the backend's boxes"
         % (what, {"native": "DATA/boxes", "docker": "DATA/docker"}.get(h.backend, "the cluster's claims")))
    if pids_before:
        now = init_pids()
        kept = {b: now.get(b) for b in pids_before if expect.get(b) == "running"}
        h.eq(kept, {b: pids_before[b] for b in kept}, "%s: running boxes kept running (same init pid)" % what)
    for box, fs in sorted(files.items()):
        if expect.get(box) != "running":
            continue
        bad = []
        for path, content in sorted(fs.items()):
            r = srv.get(srv.file_path(box, path))
            if r.status != 200 or r.body != content:
                bad.append("%s: %s %r" % (path, r.status, r.body[:100]))
        h.eq(bad, [], "%s: all %d files written in %s before are there" % (what, len(fs), box))
        r = srv.exec(box, "echo alive")
        h.eq(r.get("stdout"), "alive\n", "%s: %s runs commands" % (what, box), r.describe())
    return boxes


# ---- boxes in every state ----------------------------------------------------------------

CA = chat_box_id("crash", "u1", "c1")
CB = thread_box_id("crash-thread")
for body, bid in (({"app_id": "crash", "user_id": "u1", "chat_id": "c1"}, CA), ({"thread_id": "crash-thread"}, CB),
                  ({"id": "crash-c"}, "crash-c"), ({"id": "crash-d"}, "crash-d")):
    r = srv.post("/v1/sandboxes", body)
    h.eq((r.status, r.get("id")), (201, bid), "created %s" % bid, r.describe())
    expect[bid] = "running"
    put_file(bid, ("first-%s" % bid).encode())
r = srv.post("/v1/sandboxes/crash-c/stop")
h.eq(r.get("status"), "stopped", "crash-c is stopped before the crashes", r.describe())
expect["crash-c"] = "stopped"

# ---- 1. kill -9 while idle -----------------------------------------------------------------

pids = init_pids()
srv.kill9()
restart("kill while idle")
verify("kill while idle", pids)
r = srv.post("/v1/sandboxes", {"app_id": "crash", "user_id": "u1", "chat_id": "c1"})
h.eq((r.status, r.get("id")), (200, CA), "after the restart the same keys acquire the same box (200)", r.describe())

# ---- 2. kill -9 during a running exec ----------------------------------------------------------

put_file(CA, b"before-exec-kill")
s = srv.sse("/v1/sandboxes/%s/exec" % CA, method="POST",
            body={"command": "echo x > /workspace/during.txt; echo started; sleep 20"})
first = s.next(10)
h.ok(first is not None and first.type == "stdout", "a long exec is streaming", s.describe())
pids = init_pids()
srv.kill9()
s.close()
restart("kill during an exec")
verify("kill during an exec", pids)
r = srv.exec(CA, "cat /workspace/during.txt")
h.eq(r.get("stdout"), "x\n", "what the interrupted exec wrote is there", r.describe())

# ---- 3. a box's init dies while the server is down ----------------------------------------------

put_file("crash-d", b"before-init-kill")
pids = init_pids()
srv.kill9()
dpid = pids.get("crash-d")
if h.backend == "kubernetes":  # (no host pid: init is killed in its pod, which then fails)
    h.cluster.kill_container("ab-crash-d")
    h.ok(wait_for(lambda: h.cluster.api.must("GET", "/api/v1/namespaces/%s/pods/ab-crash-d" % h.cluster.namespace)
                  ["status"].get("phase") == "Failed", 15), "crash-d's init killed in its pod: the pod failed")
elif h.ok(isinstance(dpid, int) and dpid > 0, "crash-d has an init pid", repr(pids)):
    os.kill(dpid, signal.SIGKILL)
    wait_for(lambda: pid_gone(dpid), 5)
expect["crash-d"] = "stopped"
restart("kill with a dead init")
pids.pop("crash-d", None)
verify("kill with a dead init", pids)
r = srv.exec("crash-d", "cat %s" % " ".join(sorted(files["crash-d"])))
h.eq((r.status, r.get("stdout")), (200, "".join(v.decode() for _, v in sorted(files["crash-d"].items()))),
     "the box whose init died resumes on exec with all its files", r.describe())
expect["crash-d"] = "running"
h.eq(h.cli_status("crash-d"), "running", "... and runs again in the backend")

# ---- 4. kill -9 right after an acquire was sent ------------------------------------------------


def send_only(method, path, body):
    data = json.dumps(body).encode()
    c = socket.create_connection((srv.host, srv.port), timeout=5)
    c.sendall(b"%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
              % (method.encode(), path.encode(), len(data)) + data)
    return c


for i, d in enumerate((0.0, 0.002, 0.005, 0.01, 0.02, 0.05, 0.15)):
    keys = {"app_id": "crash", "user_id": "acq", "chat_id": "c%d" % i}
    bid = chat_box_id("crash", "acq", "c%d" % i)
    pids = init_pids()
    try:
        c = send_only("POST", "/v1/sandboxes", keys)
    except OSError as e:
        h.ok(False, "kill %gs after an acquire: the server takes the request" % d, "%s%s" % (e, srv.death_note()))
        c = None
    time.sleep(d)
    srv.kill9()
    if c is not None:
        c.close()
    restart("kill %gs after an acquire" % d)
    what = "kill %gs after an acquire" % d
    boxes = verify(what, pids)
    known = boxes.get(bid)
    h.ok(known is None or known.get("status") in ("running", "stopped"),
         "%s: the new box is absent or running/stopped (%s)" % (what, (known or {}).get("status")))
    r = srv.post("/v1/sandboxes", keys, timeout=8)  # a create takes ~50 ms
    h.eq((r.status, r.get("id"), r.get("status")), (200 if known else 201, bid, "running"),
         "%s: acquiring the keys again gives one running box (%s)" % (what, "existed" if known else "new"),
         r.describe())
    if r.status in (200, 201):
        expect[bid] = "running"
    r = srv.exec(bid, "echo ok-%d" % i)
    h.eq(r.get("stdout"), "ok-%d\n" % i, "%s: the box runs commands" % what, r.describe())

# ---- 5. kill -9 right after a delete was accepted ----------------------------------------------

r = srv.post("/v1/sandboxes", {"id": "crash-del"})
h.eq(r.status, 201, "created crash-del", r.describe())
r = srv.delete("/v1/sandboxes/crash-del")
h.eq(r.status, 202, "DELETE crash-del answers 202", r.describe())
srv.kill9()
restart("kill after a delete")
h.ok(wait_for(lambda: srv.status_of("crash-del") is None, 15), "the accepted delete completes after the restart")
h.ok(wait_for(lambda: "crash-del" not in (h.cli_boxes() or {"crash-del": 1}), 10), "... also in the backend")
verify("kill after a delete", init_pids())

# ---- 6. a stopped box stays stopped and resumes --------------------------------------------------

r = srv.post("/v1/sandboxes/crash-c/start")
h.eq(r.get("status"), "running", "crash-c, stopped through every crash, starts", r.describe())
fs = files.get("crash-c", {})
r = srv.exec("crash-c", "cat %s" % " ".join(sorted(fs)))
h.eq(r.get("stdout"), "".join(v.decode() for _, v in sorted(fs.items())), "... with its files", r.describe())

on_term, rc = srv.stop()
h.eq((on_term, rc), (True, 0), "the server exits 0 on SIGTERM")
h.done()
