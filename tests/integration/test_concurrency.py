#!/usr/bin/env python3
"""Many CLI processes on one data dir at once: 20 boxes created in parallel,
each execs, ls sees all of them, parallel stop/start, parallel rm, and nothing
is left behind (boxes, trash, mounts, loop devices, cgroups)."""
import glob
import json
import os
import secrets
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abtest  # noqa: E402
from abtest import cgroup_dirs, cgroups_of  # noqa: E402

h = abtest.Harness()
N = 20

# The harness's own bookkeeping (create/rm tracking) is not thread-safe, so the
# parallel CLI calls below run the binary directly; the boxes are registered
# with the harness from this thread, before they exist, so that they are
# removed even if this file dies half way.
ENV = {k: v for k, v in os.environ.items() if k not in ("AGENTBOX_DATA", "AGENTBOX_TOKEN", "AGENTBOX_LISTEN")}


def cli(*args, timeout=90, input=None):
    argv = [h.bin, "--data", h.data] + [str(a) for a in args]
    try:
        p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, timeout=timeout,
                           input=input, start_new_session=True, text=True)
        return abtest.Result(p.returncode, p.stdout, p.stderr, False, argv)
    except subprocess.TimeoutExpired as e:
        return abtest.Result(-9, str(e.stdout or ""), str(e.stderr or ""), True, argv)


def parallel(fn, items):
    """Runs fn(item) for all items at once; returns {item: result}, elapsed seconds."""
    res = {}

    def run(it):
        try:
            res[it] = fn(it)
        except Exception as e:  # noqa: BLE001 - reported as a failed result
            res[it] = abtest.Result(-1, "", "exception: %r" % e, False, ())

    threads = [threading.Thread(target=run, args=(it,)) for it in items]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return res, time.monotonic() - t0


def failures(res, ok):
    return "\n".join(r.describe()[:600] for it, r in sorted(res.items()) if not ok(it, r))


def ls_json():
    r = h.run("ls", "--json")
    try:
        return json.loads(r.out)
    except ValueError:
        h.diag("ls --json: " + r.describe())
        return None


seen_cgroups = []


def leftovers():
    """Loop devices and mounts of the boxes (the data folder's skills disk,
    mounted on the host by design, is not one)."""
    left = []
    skills = " %s " % os.path.join(os.path.realpath(h.data), "skills")
    r = subprocess.run(["losetup", "-a"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    left += ["loop: " + l for l in r.stdout.splitlines() if h.root in l and "/skills.img" not in l]
    for mi in glob.glob("/proc/[0-9]*/mountinfo"):
        try:
            with open(mi, encoding="utf-8", errors="replace") as f:
                left += ["%s: %s" % (mi, l.strip()) for l in f
                         if h.root in abtest._unescape_mountinfo(l) and skills not in l]
        except OSError:
            pass
    for box in ids:
        left += ["cgroup: " + d for d in cgroup_dirs(box, seen_cgroups, data=h.data)]
    return left


tag = secrets.token_hex(2)
ids = ["c%02d-%s" % (i, tag) for i in range(N)]
for box in ids:
    h.track(box)

# ---- create 20 at once ----------------------------------------------------------

res, dt = parallel(lambda box: cli("create", "--id", box, "--disk", "32M", "--memory", "128M", "--pids", "64"),
                   ids)
h.diag("%d parallel creates took %.1fs" % (N, dt))
ok_create = lambda box, r: r.rc == 0 and r.out.strip() == box  # noqa: E731
h.eq(sum(ok_create(b, r) for b, r in res.items()), N, "%d boxes created in parallel all succeed" % N,
     failures(res, ok_create))

lst = ls_json() or []
mine = {b["id"]: b.get("status") for b in lst if b.get("id") in ids}
h.eq(len(mine), N, "ls lists all %d boxes" % N, json.dumps(lst)[:3000])
h.eq(sorted(s for s in mine.values() if s != "running"), [], "ls shows every box running")
plain = h.run("ls").out
h.eq(sum(1 for l in plain.splitlines() if l.split()[:2] in ([b, "running"] for b in ids)), N,
     "the ls table shows %d running boxes" % N, plain)

for b in lst:
    if b.get("id") in ids and isinstance(b.get("init_pid"), int):
        seen_cgroups += cgroups_of(b["init_pid"])
h.ok(len(seen_cgroups) >= N, "every box runs in cgroups of its own", repr(seen_cgroups[:10]))

uids = {}
for box in ids:
    try:
        with open(os.path.join(h.data, "boxes", box, "config.json")) as f:
            uids[box] = json.load(f).get("uid_base")
    except (OSError, ValueError) as e:
        uids[box] = "unreadable: %s" % e
h.eq(len(set(uids.values())), N, "every box got its own uid range (uid_base) despite parallel creates",
     json.dumps(uids))

# ---- exec in all at once ----------------------------------------------------------

res, dt = parallel(lambda box: cli("exec", "-e", "WANT=" + box, box, "--",
                                   'echo "$(uname -n) $WANT $(cat /proc/sys/kernel/hostname)"'), ids)
ok_exec = lambda box, r: r.rc == 0 and r.out == "%s %s %s\n" % (box, box, box)  # noqa: E731
h.eq(sum(ok_exec(b, r) for b, r in res.items()), N, "a parallel exec in each box prints that box's id",
     failures(res, ok_exec))

res, dt = parallel(lambda box: cli("exec", box, "--", "echo %s > /workspace/mine.txt && cat /workspace/mine.txt" % box),
                   ids)
ok_ws = lambda box, r: r.rc == 0 and r.out == box + "\n"  # noqa: E731
h.eq(sum(ok_ws(b, r) for b, r in res.items()), N, "parallel writes go to each box's own workspace",
     failures(res, ok_ws))

# ---- stop and start half of them at once, while the other half execs -------------

half = ids[: N // 2]
others = ids[N // 2:]
res, dt = parallel(lambda box: cli("stop", box) if box in half else cli("exec", box, "--", "sleep 0.5; echo busy"),
                   ids)
ok_mixed = lambda box, r: r.rc == 0 and (box in half or r.out == "busy\n")  # noqa: E731
h.eq(sum(ok_mixed(b, r) for b, r in res.items()), N, "10 parallel stops while 10 other boxes exec all succeed",
     failures(res, ok_mixed))
lst = ls_json() or []
st = {b["id"]: b.get("status") for b in lst if b.get("id") in ids}
h.eq(sorted(b for b in half if st.get(b) != "stopped"), [], "the stopped half is listed stopped")
h.eq(sorted(b for b in others if st.get(b) != "running"), [], "the other half is still running")
res, dt = parallel(lambda box: cli("start", box), half)
h.eq(sum(r.rc == 0 for r in res.values()), len(half), "10 parallel starts succeed",
     failures(res, lambda b, r: r.rc == 0))
res, dt = parallel(lambda box: cli("exec", box, "--", "cat /workspace/mine.txt"), ids)
h.eq(sum(ok_ws(b, r) for b, r in res.items()), N, "every box still has its own file after the restarts",
     failures(res, ok_ws))

# ---- races on one id ---------------------------------------------------------------

same = "same-%s" % tag
h.track(same)
res, dt = parallel(lambda i: cli("create", "--id", same, "--disk", "32M", "--memory", "128M"), range(8))
wins = [r for r in res.values() if r.rc == 0]
losses = [r for r in res.values() if r.rc != 0]
h.eq(len(wins), 1, "8 parallel creates of one id: exactly one succeeds", failures(res, lambda i, r: False))
h.ok(all(r.rc == 125 and "already exists" in r.err for r in losses),
     "... the other 7 fail with 125 'already exists'", failures(res, lambda i, r: r.rc == 0))
r = h.exec(same, "echo works")
h.eq(r.out, "works\n", "... and the box that was made works", r.describe())

r = h.run("stop", same)
res, dt = parallel(lambda i: cli("start", same), range(6))
h.eq(sum(r.rc == 0 for r in res.values()), 6, "6 parallel starts of one stopped box all succeed",
     failures(res, lambda i, r: r.rc == 0))
try:
    same_pid = json.loads(h.run("inspect", same).out).get("init_pid")
except ValueError:
    same_pid = None
same_cg = cgroups_of(same_pid) if isinstance(same_pid, int) else []
seen_cgroups += same_cg
def pid1s(procs_file):
    """How many processes of a cgroup are PID 1 of their pid namespace (a box's
    init). Other processes (the init's short-lived helpers) do not count."""
    n = 0
    with open(procs_file) as f:
        for pid in f.read().split():
            try:
                with open("/proc/%s/status" % pid) as st:
                    nspid = [l.split()[1:] for l in st if l.startswith("NSpid:")]
            except OSError:
                continue
            n += bool(nspid and nspid[0] and nspid[0][-1] == "1")
    return n


nprocs = set()
for d in same_cg:
    try:
        nprocs.add(pid1s(os.path.join(d, "cgroup.procs")))
    except OSError as e:
        nprocs.add("unreadable: %r" % e)
h.eq(sorted(nprocs, key=str), [1], "... and exactly one init runs in the box's cgroups", repr(same_cg))
r = h.exec(same, "echo works")
h.eq(r.out, "works\n", "... and the box works", r.describe())

res, dt = parallel(lambda i: cli("rm", same), range(6))
h.eq(sum(r.rc == 0 for r in res.values()), 1, "6 parallel rms of one box: exactly one succeeds",
     failures(res, lambda i, r: False))
h.ok(all(r.rc == 125 for r in res.values() if r.rc != 0), "... the others exit 125 (no such box)",
     failures(res, lambda i, r: r.rc in (0, 125)))
if any(r.rc == 0 for r in res.values()):
    h._note(("rm", same))
h.ok(not os.path.exists(os.path.join(h.data, "boxes", same)), "... and the box is gone")
ids.append(same)  # checked for leftovers below

# ---- rm all at once -------------------------------------------------------------------

res, dt = parallel(lambda box: cli("rm", box), ids[:N])
h.diag("%d parallel rms took %.1fs" % (N, dt))
ok_rm = lambda box, r: r.rc == 0  # noqa: E731
h.eq(sum(ok_rm(b, r) for b, r in res.items()), N, "%d parallel rms all succeed" % N, failures(res, ok_rm))
for box, r in res.items():
    if r.rc == 0:
        h._note(("rm", box))  # tell the harness it is gone (same as its own rm would)

h.eq(ls_json(), [], "ls --json is empty afterwards")
h.eq([l for l in h.run("ls").out.splitlines()[1:] if l.strip()], [], "the ls table is empty afterwards")
h.eq(sorted(os.listdir(os.path.join(h.data, "boxes"))), [], "DATA/boxes is empty")
h.eq(sorted(os.listdir(os.path.join(h.data, "trash"))), [], "DATA/trash is empty")
left = leftovers()
end = time.monotonic() + 5
while left and time.monotonic() < end:
    time.sleep(0.2)
    left = leftovers()
h.eq(left, [], "no loop devices, mounts or cgroups of the boxes are left")

h.done()
