#!/usr/bin/env python3
"""`agentbox exec` does each piece of its work once (issue 29: a CLI exec is
run in loops, and its cost beside `nsenter` is its own work). Under strace,
an exec in a running box made by `agentbox create`:
- reads the box's config.json once (one look at the box, not two);
- connects to the box's init once, and does not look for agentbox-init
  (only a start needs it);
- opens and makes nothing under /sys/fs/cgroup (a running box is not read
  from its cgroup: the paused marker says when it may be frozen);
- takes the store's write lock once: the activity and the audit row go in
  one transaction, and opening a database at the latest schema writes
  nothing (SQLite's WAL write lock is byte 120 of the -shm file, a fixed
  place of its file format; another connection keeps the store open, as a
  server does, so that the exec does not rebuild the WAL's index);
- does not checkpoint while another process (a server) has the store
  open, and with none keeps the WAL short (the process that finds 100
  frames empties it), where before it grew with every exec and made every
  exec read all of it;
and still records what an exec records: the audit row, the box's activity.
Native backend only (the files and cgroups are the native backend's)."""
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abtest  # noqa: E402

h = abtest.Harness()
if not h.native:
    h.skip_all("the native backend's files and cgroups")
box = h.create()
r = h.run("exec", box, "--", "true", "x")
h.eq(r.rc, 0, "a first exec (the store learns the box of `agentbox create`)", r.describe())


def wal_frames():
    """Frames in the store's WAL file (by its size), 0 when there is none."""
    path = os.path.join(h.data, "agentbox.db")
    with open(path, "rb") as f:
        head = f.read(18)
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    try:
        size = os.stat(path + "-wal").st_size
    except FileNotFoundError:
        return 0
    return max(0, size - 32) // (page + 24)


def audit_count(command):
    db = sqlite3.connect("file:%s?mode=ro" % os.path.join(h.data, "agentbox.db"), uri=True,
                         timeout=10)
    try:
        return db.execute("SELECT COUNT(*) FROM exec_audit WHERE box_id = ? AND command = ?",
                          (box, command)).fetchone()[0]
    finally:
        db.close()


def store_row(command):
    """(audit rows of command, the box's last_active_at) from the data folder's store."""
    db = sqlite3.connect("file:%s?mode=ro" % os.path.join(h.data, "agentbox.db"), uri=True,
                         timeout=10)
    try:
        n = db.execute("SELECT COUNT(*) FROM exec_audit WHERE box_id = ? AND command = ?",
                       (box, command)).fetchone()[0]
        at = db.execute("SELECT last_active_at FROM boxes WHERE id = ?", (box,)).fetchone()[0]
        return n, at
    finally:
        db.close()


strace = shutil.which("strace")
word = "w%d" % os.getpid()
command = "echo hi " + word
n0, at0 = store_row(command)
if not strace:
    h.skip("the exec's system calls", "strace is not installed")
else:
    log = os.path.join(h.root, "strace.log")
    time.sleep(0.01)  # last_active_at is in ms: let it move
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTBOX_DATA", "AGENTBOX_STORE")}
    # A sanitized build: LeakSanitizer cannot run under ptrace.
    env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
    # Another connection has the store open, as a server would: the exec is
    # not the first one and does not rebuild the WAL's index (a recovery
    # that takes the write lock too).
    keep = sqlite3.connect(os.path.join(h.data, "agentbox.db"), timeout=10)
    keep.execute("SELECT COUNT(*) FROM boxes").fetchone()
    # Execs while it is open fill the WAL past what an exec alone on the
    # store would empty (100 frames): with another process on it, it leaves
    # the WAL to that process (no checkpoint, no sync in the exec).
    for _ in range(80):
        if wal_frames() >= 110:
            break
        h.run("exec", box, "--", "true", "fill")
    filled = wal_frames()
    h.ok(filled >= 100, "execs while another connection is open fill the WAL (%d frames)" % filled)
    p = subprocess.run([strace, "-f", "-qq", "-o", log, "-e",
                        "trace=open,openat,mkdir,mkdirat,fcntl,connect,fsync,fdatasync",
                        h.bin, "--data", h.data, "exec", box, "--", "echo", "hi", word],
                       capture_output=True, text=True, timeout=60, env=env)
    h.eq((p.returncode, p.stdout), (0, "hi %s\n" % word), "the exec under strace runs", p.stderr[-2000:])
    keep.close()
    with open(log) as f:
        calls = f.read().splitlines()
    config = [c for c in calls if re.search(r'open(at)?\(.*config\.json"', c)]
    h.eq(len(config), 1, "the box's config.json is read once", "\n".join(config))
    cg = [c for c in calls if "/sys/fs/cgroup" in c]
    h.eq(cg, [], "nothing under /sys/fs/cgroup is opened or made for an exec in a running box")
    inits = [c for c in calls if re.search(r'connect\(.*init\.sock"', c)]
    h.eq(len(inits), 1, "one connection to the box's init", "\n".join(inits))
    syncs = [c for c in calls if re.search(r"\bf(data)?sync\(", c)]
    h.eq(syncs, [], "no sync (no checkpoint) while another process has the store open")
    wlock = [c for c in calls if re.search(r"F_SETLKW?, \{l_type=F_WRLCK, l_whence=SEEK_SET, l_start=120, l_len=1\}", c)]
    h.eq(len(wlock), 1, "the store's write lock is taken once (one transaction: activity and audit row)",
         "\n".join(wlock))
n1, at1 = store_row(command)
if strace:
    h.eq(n1, n0 + 1, "the exec has its audit row")
    h.ok(at1 is not None and at0 is not None and at1 > at0, "the exec marks the box active",
         "last_active_at %r -> %r" % (at0, at1))

# What only a start needs is looked for only by a start: an exec in a
# running box does not look for agentbox-init.
r = h.run("exec", box, "--", "echo", "no-init", env={"AGENTBOX_INIT": "/nonexistent/agentbox-init"})
h.eq((r.rc, r.out), (0, "no-init\n"), "an exec in a running box needs no agentbox-init", r.describe())

# No other process on the store (no server): each exec's process rebuilds
# SQLite's WAL index from the whole WAL, so the execs keep it short: the one
# that finds 100 frames or more empties it as it closes the store. Before,
# it grew by every exec's frames, never restarted (each process's first
# connection starts with nothing checkpointed), and past 1,000 frames every
# exec also checkpointed all of it.
most, n_alone = 0, 30
for i in range(n_alone):
    r = h.run("exec", box, "--", "true", "alone")
    if r.rc != 0:
        h.diag("exec %d: %s" % (i, r.describe()))
    most = max(most, wal_frames())
h.ok(most <= 100 + 20, "with no other process on the store, the WAL stays short (at most %d frames)" % most)
h.eq(audit_count("true alone"), n_alone, "... and every exec's audit row is kept")
h.done()
