#!/usr/bin/env python3
"""Pause and resume over HTTP, with real boxes: a server listening in the box
and a counting loop started before a pause are still there and answering
after the resume; a paused box gets no CPU (its cgroup's CPU time stands
still); exec, files and tools on a paused box resume it transparently;
/health, /metrics, list filters and /v1/events show "paused"; kill -9 of the
server while a box is paused, restart: still paused, then resumes with its
processes; stop and delete of a paused box; the idle policy pauses an idle
box, then stops it (idle_pause then idle_stop, counted from the last use);
the running-box cap pauses the least recently active box.

On the kubernetes backend pause is a stop (docs/kubernetes.md: a pod cannot
be frozen): the checks of a freeze (the same processes after a resume, no
CPU while paused, the box's files read through its init's /proc root) become
checks of what that backend promises instead: the pod goes and the claim
stays while paused, the box reads as paused (to the server after a restart
and to the CLI), a use starts a new pod with the files and without the
processes."""
import os
import secrets
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
from abserver import metric_sum, wait_for  # noqa: E402
from abtest import cgroup_dirs, cgroups_of  # noqa: E402

h = abserver.ServerHarness(budget=150)
K8S = h.backend == "kubernetes"
# The idle policy is tested on a second server; this one never idles a box out.
srv = h.start_server(name="pause", config={"idle_pause": "1h", "idle_stop": "2h"})

# The stand-in cluster's pods share the host's loopback: a port of its own there.
PORT = abserver.free_port() if K8S else 8000
SERVER = ("cd /workspace && echo served > index.html && "
          "(nohup python3 -m http.server %d --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > server.pid) && "
          "(nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > c.tmp; mv c.tmp counter; done' >/dev/null 2>&1 &)"
          % PORT)
FETCH = ("python3 -c \"import urllib.request as u; "
         "print(u.urlopen('http://127.0.0.1:%d/index.html', timeout=10).read().decode().strip())\"" % PORT)
# A use that needs the box's files only (on kubernetes the server does not outlive a pause).
USE = "cat /workspace/index.html" if K8S else FETCH


def init_pid(box):
    e = (h.cli_boxes() or {}).get(box) or {}
    return e.get("init_pid") or 0


def box_file(pid, rel):
    """A file of the box read from the host through its init's root: no request
    that would resume the box."""
    try:
        with open("/proc/%d/root/workspace/%s" % (pid, rel)) as f:
            return f.read().strip()
    except OSError as e:
        return "(unreadable: %s)" % e


def pid_gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return True


def cpu_ns(box):
    return ((srv.box(box) or {}).get("stats") or {}).get("cpu_usage_ns")


def health_count(state):
    return ((srv.health() or {}).get("boxes") or {}).get(state)


def standing_still(pid):
    """The counting loop's file does not change over half a second."""
    c0 = box_file(pid, "counter")
    time.sleep(0.5)
    c1 = box_file(pid, "counter")
    return c0 == c1 and c0.isdigit(), (c0, c1)


def counting(pid):
    c0 = box_file(pid, "counter")
    return wait_for(lambda: box_file(pid, "counter") not in (c0, "") and box_file(pid, "counter").isdigit(), 10, 0.05)


def pod_of(box):
    return [n for n in h.k8s_objects(box) if n.startswith("pods/")]


def counter_by_exec(box):
    return (srv.exec(box, "cat /workspace/counter 2>/dev/null").get("stdout") or "").strip()


def counting_by_exec(box):
    """The loop counts (the counter read through exec, which runs the box)."""
    c0 = counter_by_exec(box)
    return wait_for(lambda: counter_by_exec(box) not in (c0, ""), 10, 0.1)


def processes_gone(box):
    """A pod made anew: the server and the loop started before are not in it."""
    c0 = counter_by_exec(box)
    time.sleep(0.5)
    r = srv.exec(box, FETCH)
    return r.get("exit_code") != 0 and counter_by_exec(box) == c0, (c0, r.get("exit_code"))


# ---- a box with a server and a loop ----------------------------------------------------

B = "sp-%s" % secrets.token_hex(3)  # unique: cgroup_dirs() looks in every agentbox parent
r = srv.post("/v1/sandboxes", {"id": B})
h.eq(r.status, 201, "create %s" % B, r.describe())
h.eq(r.get("idle_pause_s"), 3600, "the record shows the effective idle_pause_s", r.describe())
r = srv.exec(B, SERVER)
h.eq(r.get("exit_code"), 0, "a server and a counting loop start in the box", r.describe())
r = srv.exec(B, "for i in $(seq 100); do %s 2>/dev/null && exit 0; sleep 0.1; done; exit 1" % FETCH)
h.eq((r.get("exit_code"), r.get("stdout")), (0, "served\n"), "the server answers in the box", r.describe())
server_pid = srv.exec(B, "cat /workspace/server.pid").get("stdout", "").strip()
pid = init_pid(B)
if K8S:
    h.eq(pid, 0, "a pod's box has no init pid on this host (from the CLI)")
    h.eq(pod_of(B), ["pods/ab-%s" % B], "the box is a pod")
    h.ok(counting_by_exec(B), "the loop counts")
else:
    h.ok(pid > 1, "the box's init pid (from the CLI)", repr(pid))
    h.ok(counting(pid), "the loop counts")

events = srv.sse("/v1/events")

# ---- pause ------------------------------------------------------------------------------

r = srv.post("/v1/sandboxes/%s/pause" % B)
h.eq((r.status, r.get("status")), (200, "paused"), "POST /pause answers the box, paused", r.describe())
h.eq(srv.status_of(B), "paused", "GET shows paused")
h.eq((h.cli_boxes() or {}).get(B, {}).get("status"), "paused", "the backend (CLI) agrees: paused")
if K8S:
    h.eq(pod_of(B), [], "pause is a stop: the pod is gone")
    h.ok("persistentvolumeclaims/ab-%s" % B in h.k8s_objects(B), "... its claim (the files) stays")
    h.eq(cpu_ns(B), None, "a paused box shows no usage (it has no pod)")
else:
    still, seen = standing_still(pid)
    h.ok(still, "the loop stands still while paused", repr(seen))
    c0 = cpu_ns(B)
    time.sleep(0.5)
    c1 = cpu_ns(B)
    h.ok(isinstance(c0, int) and c0 > 0 and c0 == c1,
         "a paused box uses no CPU (its cgroup's CPU time does not advance)", repr((c0, c1)))
lst = srv.list({"status": "paused"}) or []
h.eq([b.get("id") for b in lst], [B], "GET /v1/sandboxes?status=paused lists it")
h.eq(health_count("paused"), 1, "/health counts one paused box")
h.eq(metric_sum(srv.metrics() or [], "agentbox_boxes", state="paused"), 1,
     "/metrics: agentbox_boxes{state=\"paused\"} 1")
got = events.collect(lambda e: e.type == "box.paused", timeout=5)
ev = [e for e in got if e.type == "box.paused"]
h.ok(ev and (ev[0].json or {}).get("box_id") == B and ((ev[0].json or {}).get("data") or {}).get("reason") == "api",
     "/v1/events: box.paused with reason api", repr(got[-3:]))
r = srv.post("/v1/sandboxes/%s/pause" % B)
h.eq((r.status, r.get("status")), (200, "paused"), "pausing a paused box answers 200", r.describe())

# ---- resume -----------------------------------------------------------------------------

r = srv.post("/v1/sandboxes/%s/resume" % B)
h.eq((r.status, r.get("status")), (200, "running"), "POST /resume answers the box, running", r.describe())
if K8S:
    h.eq(pod_of(B), ["pods/ab-%s" % B], "resume is a start: a new pod")
else:
    h.ok(counting(pid), "the same loop counts on")
got = events.collect(lambda e: e.type == "box.resumed", timeout=5)
h.ok(any(e.type == "box.resumed" for e in got), "/v1/events: box.resumed", repr(got[-3:]))
if K8S:
    gone, seen = processes_gone(B)
    h.ok(gone, "... without the server and the loop started before the pause", repr(seen))
    r = srv.exec(B, "cat /workspace/index.html /workspace/server.pid")
    h.eq((r.get("exit_code"), (r.get("stdout") or "").split()), (0, ["served", server_pid]),
         "... with the files written before the pause", r.describe())
else:
    r = srv.exec(B, FETCH + " && cat /workspace/server.pid")
    h.eq((r.get("exit_code"), (r.get("stdout") or "").split()), (0, ["served", server_pid]),
         "the server started before the pause answers after the resume (same pid)", r.describe())
    h.eq(init_pid(B), pid, "the same init")
r = srv.post("/v1/sandboxes/%s/resume" % B)
h.eq((r.status, r.get("status")), (200, "running"), "resuming a running box answers 200", r.describe())
m = srv.metrics() or []
h.ok(metric_sum(m, "agentbox_lifecycle_ops_total", op="pause", result="ok") >= 1 and
     metric_sum(m, "agentbox_lifecycle_ops_total", op="resume", result="ok") >= 1,
     "/metrics counts pause and resume operations")

# ---- any use resumes ----------------------------------------------------------------------

srv.post("/v1/sandboxes/%s/pause" % B)
r = srv.exec(B, USE)
h.eq((r.get("exit_code"), r.get("stdout")), (0, "served\n"), "exec on a paused box resumes it and runs",
     r.describe())
h.eq(srv.status_of(B), "running", "... the box is running after that exec")
got = events.collect(lambda e: e.type == "box.resumed", timeout=5)
ev = [e for e in got if e.type == "box.resumed"]
h.ok(ev and ((ev[-1].json or {}).get("data") or {}).get("reason") == "use",
     "... box.resumed with reason use", repr(got[-3:]))

srv.post("/v1/sandboxes/%s/pause" % B)
r = srv.get(srv.file_path(B, "/workspace/index.html"))
h.eq((r.status, r.body), (200, b"served\n"), "a file read on a paused box resumes it", r.describe())
h.eq(srv.status_of(B), "running", "... running after the read")

srv.post("/v1/sandboxes/%s/pause" % B)
r = srv.post("/v1/sandboxes/%s/tools/bash" % B, {"args": {"command": "cat /workspace/index.html"}})
h.ok(r.status == 200 and "served" in (r.get("output") or ""), "a tool call on a paused box resumes it",
     r.describe())
h.eq(srv.status_of(B), "running", "... running after the tool call")

# A use in flight: a pause would freeze it, so it is refused.
slow = {}
t = threading.Thread(target=lambda: slow.setdefault("r", srv.exec(B, "sleep 2; echo done")))
t.start()
busy = wait_for(lambda: (srv.health() or {}).get("execs_in_flight", 0) >= 1, 5, 0.05)
r = srv.post("/v1/sandboxes/%s/pause" % B)
h.ok(busy and r.status == 409 and r.err_code == "conflict",
     "pause while an exec runs is 409 conflict", r.describe())
t.join(30)
h.eq((slow.get("r").get("stdout") if slow.get("r") else None), "done\n", "... and the exec finishes")

r = srv.post("/v1/sandboxes/nope/pause")
h.eq(r.status, 404, "pause of a missing box is 404", r.describe())

# ---- kill -9 of the server while paused ---------------------------------------------------------

r = srv.post("/v1/sandboxes/%s/pause" % B)
h.eq(r.get("status"), "paused", "paused before the crash", r.describe())
events.close()
srv.kill9()
why = srv.start()
if why:
    h.bail_server(srv, "restart: %s" % why)
h.eq(srv.status_of(B), "paused", "after kill -9 and a restart the box is still paused")
if K8S:
    h.eq(pod_of(B), [], "... and has no pod (the restart made none)")
else:
    h.eq(init_pid(B), pid, "... with the same init (not taken for dead)")
    still, seen = standing_still(pid)
    h.ok(still, "... and its loop still stands still", repr(seen))
h.eq(health_count("paused"), 1, "... /health counts it paused")
if K8S:
    r = srv.exec(B, USE)
    h.eq((r.get("exit_code"), r.get("stdout")), (0, "served\n"), "then an exec resumes it (a new pod)",
         r.describe())
    h.eq(srv.status_of(B), "running", "... and it runs")
else:
    r = srv.exec(B, FETCH + " && cat /workspace/server.pid")
    h.eq((r.get("exit_code"), (r.get("stdout") or "").split()), (0, ["served", server_pid]),
         "then an exec resumes it: the same server answers", r.describe())
    h.ok(counting(pid), "... and the loop counts again")

# ---- stop and delete of a paused box -------------------------------------------------------

cgs = cgroups_of(pid)
srv.post("/v1/sandboxes/%s/pause" % B)
r = srv.post("/v1/sandboxes/%s/stop" % B)
h.eq((r.status, r.get("status")), (200, "stopped"), "stop of a paused box", r.describe())
if K8S:
    h.eq((h.cli_boxes() or {}).get(B, {}).get("status"), "stopped", "... the backend (CLI) says stopped, "
         "not paused")
else:
    h.ok(wait_for(lambda: pid_gone(pid), 10), "... its init is gone")
    h.eq(cgroup_dirs(B, cgs), [], "... its cgroups are removed")
r = srv.post("/v1/sandboxes/%s/pause" % B)
h.eq((r.status, r.err_code), (409, "conflict"), "pause of a stopped box is 409", r.describe())
r = srv.post("/v1/sandboxes/%s/resume" % B)
h.eq((r.status, r.err_code), (409, "conflict"), "resume of a stopped box is 409", r.describe())
r = srv.post("/v1/sandboxes/%s/start" % B)
h.eq(r.get("status"), "running", "start again", r.describe())
r = srv.get(srv.file_path(B, "/workspace/index.html"))
h.eq(r.body, b"served\n", "the files outlived stopping a paused box")

pid2 = init_pid(B)
cgs = cgroups_of(pid2)
srv.post("/v1/sandboxes/%s/pause" % B)
h.eq(srv.status_of(B), "paused", "paused before delete")
r = srv.delete("/v1/sandboxes/%s" % B)
h.eq(r.status, 202, "delete of a paused box is accepted", r.describe())
h.ok(wait_for(lambda: srv.get("/v1/sandboxes/%s" % B).status == 404, 15), "... the box goes")
if K8S:
    h.ok(wait_for(lambda: not h.k8s_objects(B), 15), "... with every object of it in the cluster",
         repr(h.k8s_objects(B)))
else:
    h.ok(wait_for(lambda: pid_gone(pid2), 10), "... its init is gone")
    h.eq(cgroup_dirs(B, cgs), [], "... its cgroups are removed")
h.ok(B not in (h.cli_boxes() or {}), "... and the backend has no such box")

# ---- the idle policy -------------------------------------------------------------------------

D2 = h.new_data_dir("idle")
S2 = h.start_server(name="idle", data=D2,
                    config={"idle_pause": "1s", "idle_stop": "5s", "reaper_interval": "200ms"})
for body in ({"id": "ip1"}, {"id": "ip-never", "idle_pause_s": -1}):
    r = S2.post("/v1/sandboxes", body)
    h.eq(r.status, 201, "idle server: create %s" % body["id"], r.describe())
r = S2.exec("ip1", "(nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > counter; sleep 0.01; done' "
            ">/dev/null 2>&1 &)")
h.eq(r.get("exit_code"), 0, "a loop starts in ip1", r.describe())
seen = []


def status_seen():
    s = S2.status_of("ip1")
    if not seen or seen[-1] != s:
        seen.append(s)
    return s


h.ok(wait_for(lambda: status_seen() == "paused", 10, 0.1), "idle 1 s: the box is paused", repr(seen))
h.eq(S2.status_of("ip-never"), "running", "a box with idle_pause_s -1 stays running")
pid3 = ((h.cli_boxes(D2) or {}).get("ip1") or {}).get("init_pid") or 0
# (the loop truncates the file before each write: a read may fall in between)
r = S2.exec("ip1", "for i in 1 2 3 4 5 6 7 8; do c=$(cat /workspace/counter); [ -n \"$c\" ] && break; "
            "sleep 0.05; done; echo $c")
# (on kubernetes the loop died with the pod, maybe between truncating and writing the file)
h.ok(r.get("exit_code") == 0 and (K8S or (r.get("stdout") or "").strip().isdigit()),
     "exec resumes the idle-paused box", r.describe())
h.eq(S2.status_of("ip1"), "running", "... it runs again (the exec was a use)")
h.ok(wait_for(lambda: status_seen() == "paused", 10, 0.1), "idle again: paused again", repr(seen))
h.ok(wait_for(lambda: status_seen() == "stopped", 15, 0.1), "idle 5 s: the paused box is stopped", repr(seen))
h.eq(seen[-3:], ["running", "paused", "stopped"], "the tiers in order: running, paused, stopped", repr(seen))
if K8S:
    h.ok(wait_for(lambda: not pod_of("ip1"), 10), "... its pod is gone")
else:
    h.ok(wait_for(lambda: pid_gone(pid3), 10), "... its processes are gone")
h.ok(wait_for(lambda: S2.status_of("ip-never") == "stopped", 15, 0.1),
     "the box that never pauses is stopped at idle_stop all the same")
m = S2.metrics() or []
h.ok(metric_sum(m, "agentbox_lifecycle_ops_total", op="idle_pause", result="ok") >= 2,
     "/metrics counts idle pauses")

S2.stop()

# ---- the running-box cap pauses rather than stops --------------------------------------------

D3 = h.new_data_dir("cap")
S3 = h.start_server(name="cap", data=D3, config={"max_running": 1, "reaper_interval": "200ms"})
S3.post("/v1/sandboxes", {"id": "cap-a"})
S3.exec("cap-a", "echo a > /workspace/a.txt")
r = S3.post("/v1/sandboxes", {"id": "cap-b"})
h.eq(r.status, 201, "cap 1: a second box is made", r.describe())
h.ok(wait_for(lambda: S3.status_of("cap-a") == "paused", 5, 0.1),
     "cap 1: the least recently active box is paused (not stopped)", S3.status_of("cap-a"))
h.eq(S3.status_of("cap-b"), "running", "... the new one runs")
r = S3.exec("cap-a", "cat /workspace/a.txt")
h.eq(r.get("stdout"), "a\n", "an exec resumes the paused box", r.describe())
h.ok(wait_for(lambda: S3.status_of("cap-b") == "paused", 5, 0.1),
     "... and the cap pauses the other one (paused boxes do not count)", S3.status_of("cap-b"))
m = S3.metrics() or []
h.ok(metric_sum(m, "agentbox_lifecycle_ops_total", op="lru_pause", result="ok") >= 2,
     "/metrics counts lru pauses")

h.done()
