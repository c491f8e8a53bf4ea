#!/usr/bin/env python3
"""Pause and resume through the CLI: a paused box keeps its processes (a server
listening in the box, a counting loop) with their memory and gets no CPU;
`ls`/`inspect` say paused in every new process; resume, exec, cp and tool go
on with the same processes; pause of a stopped box is refused; stop, start and
rm of a paused box work and leave nothing behind."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abtest  # noqa: E402
from abtest import cgroup_dirs, cgroups_of  # noqa: E402

h = abtest.Harness()


def inspect(box):
    r = h.run("inspect", box)
    try:
        return json.loads(r.out)
    except ValueError:
        return {"unparsable": r.describe()}


def ls_table_status(box):
    for line in h.run("ls").out.splitlines():
        f = line.split()
        if f and f[0] == box:
            return f[1] if len(f) > 1 else ""
    return None


def pid_gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
        return s[s.rindex(")") + 2:][:1] in ("Z", "X")
    except (OSError, ValueError, TypeError):
        return True


def wait_for(pred, timeout=10.0, step=0.05):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > end:
            return v
        time.sleep(step)


def box_file(init_pid, rel):
    """A file of the box's /workspace read from the host through its init's root
    (no exec: that would resume the box)."""
    try:
        with open("/proc/%d/root/workspace/%s" % (init_pid, rel)) as f:
            return f.read().strip()
    except OSError as e:
        return "(unreadable: %s)" % e


def freezer_state(box):
    """freezer.state (v1) or cgroup.freeze (v2) of the box's cgroup, or None."""
    for d in cgroup_dirs(box, data=h.data):
        for f in ("freezer.state", "cgroup.freeze"):
            p = os.path.join(d, f)
            if os.path.exists(p):
                with open(p) as fh:
                    return fh.read().strip()
    return None


# A server and a counting loop, started before any pause. The counter is
# written by a shell loop; the server answers with a file naming its pid.
SERVER = ("cd /workspace && echo served > index.html && "
          "(nohup python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 & echo $! > server.pid) && "
          "(nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > c.tmp; mv c.tmp counter; done' >/dev/null 2>&1 &)")
FETCH = ("python3 -c \"import urllib.request as u; "
         "print(u.urlopen('http://127.0.0.1:8000/index.html', timeout=10).read().decode().strip())\"")

box = h.create(None, "--memory", "256M")
r = h.exec(box, SERVER)
h.eq(r.rc, 0, "a server and a counting loop start in the box", r.describe())
r = h.exec(box, "for i in $(seq 100); do %s 2>/dev/null && exit 0; sleep 0.1; done; exit 1" % FETCH)
h.eq((r.rc, r.out.strip()), (0, "served"), "the server answers in the box", r.describe())
server_pid = h.exec(box, "cat /workspace/server.pid").out.strip()

info = inspect(box)
init_pid = info.get("init_pid")
h.ok(isinstance(init_pid, int) and init_pid > 1, "inspect: init_pid", json.dumps(info))
init_pid = init_pid or 0
h.ok(wait_for(lambda: box_file(init_pid, "counter").isdigit()), "the counter is readable from the host")

# ---- pause --------------------------------------------------------------------

r = h.run("pause", box)
h.eq((r.rc, r.out.strip()), (0, box), "pause: exit 0, prints the id", r.describe())
h.eq(h.ls_status(box), "paused", "ls --json: paused (a new process reads it from the box's cgroup)")
h.eq(ls_table_status(box), "paused", "ls: paused")
h.ok(freezer_state(box) in ("FROZEN", "1"), "the box's cgroup is frozen", repr(freezer_state(box)))
info = inspect(box)
h.eq(info.get("status"), "paused", "inspect: status paused", json.dumps(info))
h.eq(info.get("init_pid"), init_pid, "inspect: the same init, alive while frozen", json.dumps(info))
cpu0 = (info.get("usage") or {}).get("cpu_usage_ns")
h.ok(isinstance(cpu0, int) and cpu0 > 0, "inspect: usage of a paused box is reported", json.dumps(info))
c0 = box_file(init_pid, "counter")
time.sleep(0.5)
h.eq(box_file(init_pid, "counter"), c0, "the counting loop does not count while paused")
cpu1 = (inspect(box).get("usage") or {}).get("cpu_usage_ns")
h.eq(cpu1, cpu0, "the box's CPU time does not advance while paused")
h.ok(not pid_gone(init_pid), "the paused init is not taken for dead")
r = h.run("pause", box)
h.eq(r.rc, 0, "pausing a paused box is a no-op", r.describe())
h.eq(h.ls_status(box), "paused", "... it stays paused")

# ---- resume -------------------------------------------------------------------

r = h.run("resume", box)
h.eq((r.rc, r.out.strip()), (0, box), "resume: exit 0, prints the id", r.describe())
h.eq(h.ls_status(box), "running", "ls --json: running after resume")
h.ok(wait_for(lambda: box_file(init_pid, "counter") != c0), "the same loop counts on after resume")
h.eq(inspect(box).get("init_pid"), init_pid, "the same init after resume")
r = h.exec(box, FETCH + " && cat /workspace/server.pid")
h.eq((r.rc, r.out.split()), (0, ["served", server_pid]),
     "the server started before the pause answers after the resume (same pid)", r.describe())
r = h.run("resume", box)
h.eq(r.rc, 0, "resuming a running box is a no-op", r.describe())

# ---- any use resumes ------------------------------------------------------------

h.run("pause", box)
r = h.exec(box, FETCH)
h.eq((r.rc, r.out.strip()), (0, "served"), "exec on a paused box resumes it and runs", r.describe())
h.eq(h.ls_status(box), "running", "... the box is running after that exec")

h.run("pause", box)
dst = os.path.join(h.root, "index.html")
r = h.run("cp", "%s:index.html" % box, dst)
h.eq(r.rc, 0, "cp out of a paused box resumes it", r.describe())
h.eq(open(dst).read().strip() if os.path.exists(dst) else None, "served", "... and copies the file")
h.eq(h.ls_status(box), "running", "... the box is running after cp")

h.run("pause", box)
r = h.run("tool", box, "read_file", '{"path": "index.html"}')
h.eq(r.rc, 0, "tool on a paused box resumes it", r.describe())
h.contains(r.out, "served", "... and the tool reads the file")

h.run("pause", box)
r = h.run("start", box)
h.eq(r.rc, 0, "start of a paused box resumes it", r.describe())
h.eq(h.ls_status(box), "running", "... running, with the same init")
h.eq(inspect(box).get("init_pid"), init_pid, "... (same init pid)")

# ---- stop and rm of a paused box ------------------------------------------------

cgs = cgroups_of(init_pid)
h.run("pause", box)
r = h.run("stop", box)
h.eq(r.rc, 0, "stop of a paused box", r.describe())
h.eq(h.ls_status(box), "stopped", "... it is stopped")
h.ok(wait_for(lambda: pid_gone(init_pid)), "... its init is gone")
h.eq(cgroup_dirs(box, cgs, data=h.data), [], "... and its cgroups are removed")
r = h.run("pause", box)
h.eq(r.rc, 125, "pause of a stopped box is refused", r.describe())
h.contains(r.err, "not running", "... saying the box is not running")
r = h.run("resume", box)
h.eq(r.rc, 125, "resume of a stopped box is refused", r.describe())
r = h.run("start", box)
h.eq(r.rc, 0, "start after stopping a paused box", r.describe())
r = h.exec(box, "cat /workspace/index.html")
h.eq((r.rc, r.out.strip()), (0, "served"), "the files outlived the stop", r.describe())

info = inspect(box)
init2 = info.get("init_pid") or 0
cgs = cgroups_of(init2)
h.exec(box, "(nohup sleep 1000 >/dev/null 2>&1 &)")
h.run("pause", box)
h.eq(h.ls_status(box), "paused", "paused again before rm")
r = h.rm(box)
h.eq(r.rc, 0, "rm of a paused box", r.describe())
h.eq(h.ls_status(box), None, "... it is gone from ls")
h.ok(wait_for(lambda: pid_gone(init2)), "... its init is gone")
h.eq(cgroup_dirs(box, cgs, data=h.data), [], "... and its cgroups are removed")

r = h.run("pause", "no-such-box")
h.eq(r.rc, 125, "pause of a missing box fails", r.describe())
r = h.run("pause", "--help")
h.eq(r.rc, 0, "pause --help", r.describe())
h.contains(h.run("--help").out, "pause ID", "agentbox --help lists pause")
h.contains(h.run("--help").out, "resume ID", "agentbox --help lists resume")

h.done()
