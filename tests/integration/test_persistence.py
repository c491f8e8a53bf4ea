#!/usr/bin/env python3
"""Boxes outlive the CLI and their own init: a box runs on after the CLI that
made it exits; an init killed from the host is reported stopped and the box
comes back with its files; a second create with the same id is refused and
leaves the first alone; package-install-like changes persist in their box only."""
import glob
import json
import os
import signal
import sys
import threading
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
        return {"_error": r.describe()}


def ls_table_status(box):
    for line in h.run("ls").out.splitlines():
        f = line.split()
        if f and f[0] == box:
            return f[1] if len(f) > 1 else ""
    return None


def ppid_of(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
        return int(s[s.rindex(")") + 2:].split()[1])
    except (OSError, ValueError):
        return None


def pid_gone(pid, timeout=10.0):
    """True once pid no longer exists or is a zombie (its reaping is up to the host's init)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open("/proc/%d/stat" % pid) as f:
                s = f.read()
            if s[s.rindex(")") + 2:].startswith("Z"):
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


# The python the box sees (the host's base) and its /usr/local site dir.
SITE = "$(python3 -c 'import sys; print(\"/usr/local/lib/python%d.%d/dist-packages\" % sys.version_info[:2])')"

a = h.create(None, "--memory", "256M", "--disk", "64M", "--pids", "128")
b = h.create(None, "--memory", "256M", "--disk", "64M", "--pids", "128")

# ---- the box outlives the CLI that made it --------------------------------------

info = inspect(a)
pid = info.get("init_pid")
h.eq(info.get("status"), "running", "after the creating CLI exited the box is running", json.dumps(info))
h.ok(isinstance(pid, int) and os.path.exists("/proc/%d" % pid), "its init process is alive", repr(pid))
pp = ppid_of(pid) if isinstance(pid, int) else None
h.ok(pp is not None and pp != os.getpid(), "the init is not a child of the test (it was reparented)", repr(pp))
r = h.exec(a, "echo from-a-later-cli; echo $$ > /tmp/shell.pid")
h.eq((r.rc, r.out), (0, "from-a-later-cli\n"), "a separate CLI process execs in the box", r.describe())

# A CLI killed in the middle of an exec must not take the box with it.
r = h.run("exec", a, "--", "sleep 30", timeout=1.5)
h.ok(r.timed_out, "an exec CLI killed mid-command (SIGKILL to its process group)", r.describe())
h.eq(inspect(a).get("init_pid"), pid, "... leaves the box running with the same init")
r = h.exec(a, "echo ok")
h.eq(r.out, "ok\n", "... and the next exec works", r.describe())

# ---- package-install-like changes ---------------------------------------------------

r = h.exec(a, "set -e; echo persisted > /workspace/keep.txt; echo out > /mnt/user-data/outputs/report.txt; "
              "printf '#!/bin/sh\\necho mytool-1.0\\n' > /usr/local/bin/mytool; chmod 755 /usr/local/bin/mytool; "
              "d=%s; mkdir -p $d/abpkg; echo 'VERSION = \"4.2\"' > $d/abpkg/__init__.py; "
              "mkdir -p /etc/abconf && echo conf > /etc/abconf/x; rm -f /etc/motd" % SITE)
h.eq(r.rc, 0, "installing a tool, a python package and config in box A succeeds", r.describe())


def check_a(when):
    r = h.exec(a, "cat /workspace/keep.txt /mnt/user-data/outputs/report.txt /etc/abconf/x")
    h.eq(r.out, "persisted\nout\nconf\n", "%s: workspace, outputs and /etc files are there" % when, r.describe())
    r = h.run("exec", a, "--", "mytool")
    h.eq(r.out, "mytool-1.0\n", "%s: /usr/local/bin/mytool runs via PATH" % when, r.describe())
    r = h.run("exec", a, "--", "cd / && python3 -c 'import abpkg; print(abpkg.VERSION)'")
    h.eq(r.out, "4.2\n", "%s: the package in /usr/local/lib/python3*/dist-packages imports" % when,
         r.describe())
    r = h.exec(a, "test -e /etc/motd && echo present || echo deleted")
    h.eq(r.out, "deleted\n", "%s: a file deleted from the base stays deleted (whiteout)" % when, r.describe())


check_a("in box A")
r = h.run("exec", b, "--", "ls /workspace; command -v mytool || echo no-mytool; "
                           "cd / && python3 -c 'import abpkg' 2>/dev/null || echo no-abpkg; "
                           "ls /etc/abconf 2>/dev/null || echo no-conf; ls /mnt/user-data/outputs")
h.eq(r.out, "no-mytool\nno-abpkg\nno-conf\n", "none of box A's changes are visible in box B", r.describe())
h.ok(not os.path.exists("/usr/local/bin/mytool"), "mytool is not on the host")
h.ok(not glob.glob("/usr/local/lib/python3*/dist-packages/abpkg"), "abpkg is not on the host")
h.ok(not os.path.exists("/etc/abconf"), "/etc/abconf is not on the host")

r = h.run("stop", a)
h.eq(r.rc, 0, "stop box A", r.describe())
h.eq(h.ls_status(b), "running", "stopping A leaves B running")
r = h.run("start", a)
h.eq(r.rc, 0, "start box A", r.describe())
check_a("after stop/start")

# ---- stop while an exec runs ----------------------------------------------------------

held = {}


def long_exec():
    t0 = time.monotonic()
    held["r"] = h.run("exec", a, "--", "echo begun; sleep 60; echo never", timeout=60)
    held["dt"] = time.monotonic() - t0


th = threading.Thread(target=long_exec)
th.start()
time.sleep(1.0)
t0 = time.monotonic()
r = h.run("stop", a, timeout=30)
stop_dt = time.monotonic() - t0
th.join(60)
h.eq(r.rc, 0, "stop while an exec is running succeeds", r.describe())
h.ok(stop_dt < 15, "... promptly (%.1fs)" % stop_dt)
er = held.get("r")
h.ok(er is not None and not er.timed_out and held.get("dt", 99) < 20,
     "the running exec returns when its box is stopped (%.1fs)" % held.get("dt", -1),
     er.describe() if er is not None else "no result")
h.ok(er is not None and er.rc != 0 and "never" not in er.out,
     "... with a failure exit code, not a normal finish", er.describe() if er is not None else "")
h.eq(h.ls_status(a), "stopped", "the box is stopped")
r = h.run("start", a)
h.eq(r.rc, 0, "and starts again", r.describe())
check_a("after a stop during an exec")

# ---- the init killed from the host ----------------------------------------------------

pid = inspect(a).get("init_pid")
if h.ok(isinstance(pid, int) and pid > 1, "inspect gives the init pid", repr(pid)):
    cg = cgroups_of(pid)
    os.kill(pid, signal.SIGKILL)
    h.ok(pid_gone(pid), "kill -9 of the init from the host ends it")
    h.eq(h.ls_status(a), "stopped", "ls --json reports the box stopped after its init died")
    h.eq(ls_table_status(a), "stopped", "ls reports it stopped")
    info = inspect(a)
    h.eq(info.get("status"), "stopped", "inspect reports it stopped", json.dumps(info))
    h.ok("init_pid" not in info, "inspect of the dead box shows no init_pid", json.dumps(info))
    h.ok(not os.path.exists(os.path.join(h.data, "boxes", a, "state.json")),
         "state.json is gone once the dead init was noticed")
    h.eq(cgroup_dirs(a, cg, data=h.data), [], "the dead box's cgroups are cleaned up")
    r = h.run("exec", a, "--", "echo x")
    h.eq(r.rc, 125, "exec into the dead box exits 125", r.describe())
    h.contains(r.err, "stopped", "... saying it is stopped")
    h.eq(h.ls_status(b), "running", "box B is unaffected by A's death")
    r = h.run("start", a)
    h.eq(r.rc, 0, "start brings the box back", r.describe())
    h.eq(h.ls_status(a), "running", "it is running again")
    check_a("after kill -9 of init and start")

# ---- the same id twice ------------------------------------------------------------------

cfg_path = os.path.join(h.data, "boxes", a, "config.json")
with open(cfg_path, "rb") as f:
    cfg_before = f.read()
pid_before = inspect(a).get("init_pid")
r = h.run("create", "--id", a, "--memory", "128M", "--disk", "32M")
h.eq(r.rc, 125, "create with the id of a running box exits 125", r.describe())
h.contains(r.err, "already exists", "... saying it already exists")
h.contains(r.err, a, "... naming the id")
with open(cfg_path, "rb") as f:
    h.eq(f.read(), cfg_before, "the first box's config.json is untouched")
info = inspect(a)
h.eq((info.get("status"), info.get("init_pid")), ("running", pid_before),
     "the first box keeps running with the same init")
h.eq((info.get("limits") or {}).get("memory_mib"), 256, "the first box keeps its limits")
check_a("after a conflicting create")

r = h.run("stop", a)
r = h.run("create", "--id", a)
h.eq(r.rc, 125, "create with the id of a stopped box exits 125 too", r.describe())
h.contains(r.err, "already exists", "... saying it already exists")
h.eq(h.ls_status(a), "stopped", "the stopped box stays stopped (a conflicting create does not start it)")
r = h.run("start", a)
r = h.exec(a, "cat /workspace/keep.txt")
h.eq(r.out, "persisted\n", "its files are still there", r.describe())

# ---- boxes are independent ----------------------------------------------------------------

r = h.rm(b)
h.eq(r.rc, 0, "rm box B", r.describe())
check_a("after B was removed")

h.done()
