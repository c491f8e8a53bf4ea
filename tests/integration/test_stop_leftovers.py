#!/usr/bin/env python3
"""What a stopped server leaves on the host for its data folder (issue 29).

- A clean stop (SIGTERM) of `agentbox serve` that has run the code runner
  stops its system box (no process left in its cgroup, no cgroup) and
  unmounts the skills disk: no mount under DATA in any mount namespace and
  no loop device backed by a file of DATA.
- The next start takes both up again: the runner answers, skills mounted.
- While a server runs, `agentbox cleanup` refuses (exit 125) and changes
  nothing.
- After kill -9 of the server, `agentbox cleanup` leaves the same nothing.
- A user's box that runs keeps the skills disk mounted at a stop (it shares
  it); once it is gone, `agentbox cleanup` unmounts it.
- `agentbox ls` (a CLI verb that starts no box) mounts nothing.
"""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import abtest  # noqa: E402

h = abserver.ServerHarness(budget=170)
if not h.native:
    h.skip_all("the skills disk and system boxes are the native backend's")
S = h.start_server(env={"AGENTBOX_RUNNER_WARM": "1"})
DATA = os.path.realpath(S.data)
SYSBOX = "sys-runner"


def run_python():
    return S.post("/sandbox/python", {"code": "def main():\n    return 6 * 7\n"}, token=None, timeout=90)


def mounts_of_data():
    """Mount points under DATA in every mount namespace of the host."""
    seen, found = set(), []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            ns = os.readlink("/proc/%s/ns/mnt" % p)
            if ns in seen:
                continue
            seen.add(ns)
            with open("/proc/%s/mountinfo" % p, encoding="utf-8", errors="replace") as f:
                for line in f:
                    mp = abtest._unescape_mountinfo(line.split()[4])
                    if mp == DATA or mp.startswith(DATA + "/"):
                        found.append("%s (pid %s)" % (mp, p))
        except OSError:
            continue
    return found


def loops_of_data():
    found = []
    for d in os.listdir("/sys/block"):
        try:
            with open("/sys/block/%s/loop/backing_file" % d) as f:
                b = f.read().strip()
        except OSError:
            continue
        if b.startswith(DATA + "/"):
            found.append("%s: %s" % (d, b))
    return found


def sysbox_left():
    """Cgroup dirs of this data folder's system box and the processes in them
    (other tests' servers running at the same time have system boxes of the
    same name under their own cgroup parents)."""
    parent = abserver.cgroup_parent(DATA)
    dirs = sorted(d for d in abtest.cgroup_dirs(SYSBOX) if os.path.basename(os.path.dirname(d)) == parent)
    procs = []
    for d in dirs:
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                procs += f.read().split()
        except OSError:
            pass
    return dirs, procs


def nothing_left(what):
    # The loop device detaches once its last mount is gone: give the kernel a moment.
    abserver.wait_for(lambda: not mounts_of_data() and not loops_of_data() and not any(sysbox_left()),
                      timeout=10)
    h.eq(mounts_of_data(), [], "%s: no mount under DATA in any mount namespace" % what)
    h.eq(loops_of_data(), [], "%s: no loop device backed by a file of DATA" % what)
    dirs, procs = sysbox_left()
    for pid in sorted(set(procs)):  # what they are, should any be left (seen once under load)
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open("/proc/%s/stat" % pid) as f:
                st = f.read().rsplit(")", 1)[1].split()
            h.diag("left: pid %s state %s ppid %s start %s: %s" % (pid, st[0], st[1], st[19], cmd))
        except OSError as e:
            h.diag("left: pid %s: %s" % (pid, e))
    h.eq(procs, [], "%s: no process of the system box" % what)
    h.eq(dirs, [], "%s: no cgroup of the system box" % what)


def skills_mounted():
    return any(m.startswith(DATA + "/skills ") for m in mounts_of_data())


def cleanup(*extra):
    return subprocess.run([h.bin, "--data", DATA, "cleanup"] + list(extra), capture_output=True,
                          text=True, timeout=60)


# ---- a clean stop --------------------------------------------------------------------------
r = run_python()
h.eq((r.status, (r.get("data") or {}).get("codeReturn")), (200, 42), "the runner answers", r.describe())
h.ok(skills_mounted(), "the skills disk is mounted while the server runs", "\n".join(mounts_of_data()))
h.ok(any(sysbox_left()), "the system box runs", str(sysbox_left()))

c = cleanup()
h.eq(c.returncode, 125, "cleanup refuses while a server runs on DATA", c.stdout + c.stderr)
h.contains(c.stderr, "a server is running", "cleanup says why", c.stderr)
h.ok(skills_mounted() and any(sysbox_left()), "a refused cleanup changed nothing")
r = run_python()
h.eq(r.status, 200, "the runner still answers after the refused cleanup", r.describe())

clean, rc = S.stop()
h.ok(clean and rc == 0, "the server exits 0 on SIGTERM", "rc %s" % rc)
nothing_left("after a clean stop")

# ---- the next start takes them up again ---------------------------------------------------
msg = S.start()
h.ok(msg is None, "the server starts again", msg)
h.ok(skills_mounted(), "the skills disk is mounted again at start", "\n".join(mounts_of_data()))
r = run_python()
h.eq((r.status, (r.get("data") or {}).get("codeReturn")), (200, 42), "the runner answers after the restart",
     r.describe())
r = S.post("/sandbox/python", {"code": "def main():\n    return sorted(__import__('json').loads('[3,1]'))\n"},
           token=None, timeout=90)
h.eq((r.get("data") or {}).get("codeReturn"), [1, 3], "a second run after the restart", r.describe())

# ---- kill -9, then cleanup -----------------------------------------------------------------
S.kill9()
h.ok(skills_mounted() and any(sysbox_left()), "kill -9 leaves the skills disk and the system box",
     "%s %s" % (mounts_of_data(), sysbox_left()))
c = cleanup("--help")
h.eq(c.returncode, 0, "cleanup --help exits 0", c.stderr)
h.contains(c.stdout, "killed", "cleanup --help says what it is for", c.stdout)
c = cleanup()
h.eq(c.returncode, 0, "cleanup after kill -9 exits 0", c.stdout + c.stderr)
h.contains(c.stdout, "1 system box stopped", "cleanup reports the system box", c.stdout)
h.contains(c.stdout, "skills disk unmounted", "cleanup reports the skills disk", c.stdout)
nothing_left("after kill -9 and cleanup")
c = cleanup()
h.eq(c.returncode, 0, "a second cleanup has nothing to do and exits 0", c.stdout + c.stderr)
h.contains(c.stdout, "0 system boxes stopped", "and says so", c.stdout)

# ---- a user's box holds the skills disk ------------------------------------------------------
msg = S.start()
h.ok(msg is None, "the server starts after the cleanup", msg)
r = run_python()
h.eq(r.status, 200, "the runner answers after the cleanup", r.describe())
r = S.post("/v1/sandboxes", {}, timeout=60)
box = (r.json or {}).get("id") if r.status in (200, 201) and isinstance(r.json, dict) else None
h.ok(box, "a user's box is made", r.describe())
if box:
    h.track(box)
clean, rc = S.stop()
h.ok(clean and rc == 0, "the server with a running box exits 0 on SIGTERM", "rc %s" % rc)
h.ok(skills_mounted(), "a running box keeps the skills disk mounted at a stop", "\n".join(mounts_of_data()))
h.eq(sysbox_left()[1], [], "the system box is stopped all the same")
if box:
    rm = h.rm(box)
    h.eq(rm.rc, 0, "the box is deleted", rm.describe())
c = cleanup()
h.eq(c.returncode, 0, "cleanup once the box is gone exits 0", c.stdout + c.stderr)
h.contains(c.stdout, "skills disk unmounted", "cleanup unmounts the skills disk then", c.stdout)
nothing_left("after the box is gone and cleanup")

# ---- the CLI's own verbs mount nothing they do not need -----------------------------------
r = subprocess.run([h.bin, "--data", DATA, "ls"], capture_output=True, text=True, timeout=60)
h.eq(r.returncode, 0, "agentbox ls exits 0", r.stderr)
nothing_left("after agentbox ls")
h.done()
