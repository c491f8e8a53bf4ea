#!/usr/bin/env python3
"""Attacks on the host's resources from one box with small limits
(--memory 128M --pids 64 --disk 64M --cpus 0.5): fork bomb, memory bomb,
tmpfs fill, disk fill (workspace and the upper layer), output flood, CPU
burn, file descriptors. Each attack must be contained by the box's limits,
leave the host responsive, and leave the box usable afterwards.
"""
import json
import os
import subprocess
import threading
import time

import attacklib as al
from attacklib import abtest

abtest.host_exclusive("resources")  # it reads host-wide memory: never beside its twin
h = abtest.Harness()
MEM_MIB, PIDS, DISK_MIB, CPUS = 128, 64, 64, 0.5
box = h.create(None, "--memory", "%dM" % MEM_MIB, "--pids", str(PIDS), "--disk", "%dM" % DISK_MIB,
               "--cpus", str(CPUS), "--timeout", "30s")
info0 = al.inspect(h, box)
init_pid = info0.get("init_pid")
h.ok(init_pid, "the box runs", json.dumps(info0))


def usage():
    return al.inspect(h, box).get("usage", {})


def meminfo(key="MemAvailable"):
    with open("/proc/meminfo") as f:
        for ln in f:
            if ln.startswith(key + ":"):
                return int(ln.split()[1]) * 1024
    return 0


def box_ok(what, tries=20):
    """The box runs a fresh command (retrying while the kernel reaps the last attack)."""
    r = None
    for _ in range(tries):
        r = al.bexec(h, box, "echo box-ok-$((6*7))", t=10)
        if "box-ok-42" in r.out:
            break
        time.sleep(0.5)
    h.contains(r.out, "box-ok-42", "after the %s the box runs a new command" % what, r.describe())
    h.eq(al.inspect(h, box).get("init_pid"), init_pid, "after the %s the box's init is the same process" % what)


# ---- 1. fork bomb (the exec stays until its timeout) -------------------------------------------
res = {}


def bomb():
    res["r"] = h.run("exec", "--timeout", "5s", box, "--", ":(){ :|:& };:; sleep 60", timeout=40)


t = threading.Thread(target=bomb)
t0 = time.time()
t.start()
peak = 0
lat = []
while t.is_alive() and time.time() - t0 < 40:
    s = time.time()
    subprocess.run(["/bin/true"], timeout=30)
    lat.append(time.time() - s)
    peak = max(peak, usage().get("pids", 0))
    time.sleep(0.3)
t.join(45)
r = res.get("r")
h.ok(r is not None and r.rc == 124 and time.time() - t0 < 30,
     "the fork bomb's exec ends with 124 (its timeout fires) within 30 s", r.describe() if r else "no result")
h.ok(lat and max(lat) < 2.0, "the host stays responsive during the fork bomb (slowest fork+exec %.3f s)" % max(lat or [0]))
h.ok(0 < peak <= PIDS, "the box never holds more than --pids %d processes (peak %d)" % (PIDS, peak))
box_ok("fork bomb")
h.ok(usage().get("pids", 99) <= 5, "the fork bomb's processes are gone afterwards (%s)" % usage().get("pids"))

# ---- 2. memory bomb -----------------------------------------------------------------------------
r = al.bpy(h, box, "b = bytearray(32 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('small-ok')")
h.contains(r.out, "small-ok", "control: 32 MiB can be allocated in the box", r.describe())
avail0 = meminfo()
bomb_py = r'''
chunks = []
for i in range(4 * %d // 16):
    chunks.append(b"\x01" * (16 << 20))       # bytes are written, so the pages are real
print("allocated", len(chunks) * 16, "MiB")
''' % MEM_MIB
r = al.bpy(h, box, bomb_py, t=60)
h.ok(r.rc == 137 or "MemoryError" in r.err, "a 4x --memory allocation is killed in the box (exit 137 or MemoryError)",
     r.describe())
h.not_contains(r.out, "allocated", "the memory bomb never finishes its allocation")
u = usage()
h.ok(u.get("memory_bytes", 1 << 62) <= MEM_MIB << 20, "box memory usage stays under the limit (%s)" % u.get("memory_bytes"))
h.ok(meminfo() > avail0 - (256 << 20), "the host's available memory did not drop by more than 256 MiB")
box_ok("memory bomb")

# ---- 3. tmpfs fill (memory in disguise) -------------------------------------------------------------
# tmpfs pages can't be swapped or dropped: the box's memory limit must count them.
avail0 = meminfo()
r = al.bexec(h, box, "for d in /tmp /dev/shm /run; do dd if=/dev/zero of=$d/fill bs=1M count=%d; done; echo filled"
             % (4 * MEM_MIB), t=60)
h.ok("filled" not in r.out or "No space left" in r.err or r.rc == 137,
     "writing 4x --memory into /tmp, /dev/shm and /run stops (ENOSPC or the OOM killer)", r.describe())
u = usage()
h.ok(u.get("memory_bytes", 1 << 62) <= MEM_MIB << 20,
     "tmpfs data stays within the box's memory limit (%s bytes charged)" % u.get("memory_bytes"))
h.ok(meminfo() > avail0 - ((MEM_MIB + 64) << 20),
     "the host's available memory dropped by at most --memory + 64 MiB (%d MiB)" % ((avail0 - meminfo()) >> 20))
al.bexec(h, box, "rm -f /tmp/fill /dev/shm/fill /run/fill", t=20)
box_ok("tmpfs fill")

# ---- 4. disk fill: /workspace, then the upper layer -------------------------------------------------------
def data_bytes():
    """Disk space allocated under the test's data folder (st_blocks, so sparse
    files count for what they hold). Other tests running at the same time do
    not move it, unlike the host file system's free space."""
    n = 0
    for root, dirs, files in os.walk(h.data, onerror=lambda e: None):
        for f in files:
            try:
                n += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return n


used0 = data_bytes()
for where in ("/workspace/fill", "/usr/local/fill"):
    r = al.bexec(h, box, "dd if=/dev/zero of=%s bs=1M count=%d; echo rc=$?; sync; stat -c %%s %s"
                 % (where, 4 * DISK_MIB, where), t=60)
    size = int(r.out.split()[-1]) if r.out.split() and r.out.split()[-1].isdigit() else -1
    h.ok("No space left" in r.err and "rc=0" not in r.out, "dd of 4x --disk into %s stops with ENOSPC" % where,
         r.describe())
    h.ok(0 < size <= DISK_MIB << 20, "%s holds at most --disk %d MiB (%d bytes)" % (where, DISK_MIB, size))
    grew = data_bytes() - used0
    h.ok(grew < 70 << 20, "the data folder on the host grew by less than 70 MiB (%d MiB)" % (grew >> 20))
    r = al.bexec(h, box, "rm -f %s && echo after > /workspace/after && cat /workspace/after" % where)
    h.contains(r.out, "after", "after deleting %s the box can write again" % where, r.describe())
img = os.path.join(h.data, "boxes", box, "disk.img")
if os.path.exists(img):
    h.ok(os.stat(img).st_size <= (DISK_MIB + 1) << 20, "the disk image's size is the limit (%d bytes)" % os.stat(img).st_size)
else:
    h.skip("the disk image's size is the limit", "no %s" % img)
r = al.bexec(h, box, "mkdir -p /workspace/many && cd /workspace/many && for i in $(seq 1 30000); do : > f$i || "
                     "{ echo stopped at $i; break; }; done 2>/dev/null; ls | wc -l; cd / && rm -rf /workspace/many; echo done",
             t=60)
h.contains(r.out, "done", "creating files until the inodes run out ends (bounded by the box's own file system)",
           r.describe())
box_ok("disk fill")

# ---- 5. output flood -------------------------------------------------------------------------------------
t0 = time.time()
p = subprocess.run([h.bin, "--data", h.data, "exec", "--timeout", "30s", box, "--", "yes | head -c 50M; yes | head -c 50M >&2"],
                   capture_output=True, timeout=60)
dt = time.time() - t0
h.ok(len(p.stdout) <= 2 << 20, "50 MiB on stdout reach the CLI as at most 2 MiB (%d bytes)" % len(p.stdout))
h.ok(len(p.stderr) <= 3 << 20, "50 MiB on stderr reach the CLI as at most 3 MiB (%d bytes)" % len(p.stderr))
h.ok(b"truncated" in p.stdout[-200:] or b"truncated" in p.stderr,
     "the output carries the truncation marker", repr(p.stdout[-200:]) + repr(p.stderr[-300:]))
h.ok(dt < 30, "the flood is handled in %.1f s" % dt)

# ---- 6. CPU -----------------------------------------------------------------------------------------------
c0 = usage().get("cpu_usage_ns", 0)
t0 = time.time()
r = al.bexec(h, box, "for i in 1 2 3; do timeout 2 sh -c 'while :; do :; done' & done; wait; echo burned", t=20)
wall = time.time() - t0
cpu = (usage().get("cpu_usage_ns", 0) - c0) / 1e9
h.contains(r.out, "burned", "the CPU burn ran", r.describe())
h.ok(cpu >= 0.3, "control: the burn consumed CPU at all (%.2f s)" % cpu)
h.ok(cpu <= 1.5, "three busy loops for 2 s under --cpus %.1f use at most ~1.5 s of CPU (%.2f s in %.1f s)"
     % (CPUS, cpu, wall))

# ---- 7. file descriptors and rlimits -----------------------------------------------------------------------
r = al.bpy(h, box, r'''
import os, resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
fds = []
try:
    while len(fds) < 1 << 20:
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as e:
    print("stopped", len(fds), e.errno)
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard * 4, hard * 4))
    print("RAISED")
except (OSError, ValueError) as e:
    print("raise-failed", e)
print("hard", hard)
''')
h.contains(r.out, "stopped", "opening files stops at RLIMIT_NOFILE", r.describe())
h.not_contains(r.out, "RAISED", "box root cannot raise its hard RLIMIT_NOFILE", r.describe())
box_ok("fd exhaustion")

# ---- 8. a process swarm left behind by an exec -------------------------------------------------------
# The classic `:(){ :|:& };:` backgrounds its first call and exits, so its
# exec returns 0 at once and no timeout ever fires (section 1 keeps the exec
# alive to test the timeout). Whether the bomb then dies out by itself is
# luck; a loop that keeps starting long-lived children is not: it takes every
# pid of the box and keeps them. The box must stay usable (or get rid of it) anyway.
t0 = time.time()
r = h.run("exec", "--timeout", "5s", box, "--", "nohup bash -c 'while :; do sleep 1000 & done' >/dev/null 2>&1 & echo started",
          timeout=40)
h.ok(not r.timed_out and "started" in r.out and time.time() - t0 < 30, "the swarm's exec returns at once", r.describe())
lat = []
peak = 0
for _ in range(10):
    s0 = time.time()
    subprocess.run(["/bin/true"], timeout=30)
    lat.append(time.time() - s0)
    peak = max(peak, usage().get("pids", 0))
    time.sleep(0.2)
h.ok(max(lat) < 2.0, "the host stays responsive while the swarm runs (slowest fork+exec %.3f s)" % max(lat))
h.ok(0 < peak <= PIDS, "the swarm holds at most --pids %d processes (peak %d)" % (PIDS, peak))
r = None
deadline = time.time() + 10
while time.time() < deadline:
    r = al.bexec(h, box, "echo box-ok-$((6*7))", t=5)
    if "box-ok-42" in r.out:
        break
    time.sleep(0.5)
h.contains(r.out, "box-ok-42", "while processes left behind by an exec hold every pid, the box still runs a new command "
           "within 10 s", r.describe() + "\nbox pids: %s" % usage().get("pids"))
h.done()
