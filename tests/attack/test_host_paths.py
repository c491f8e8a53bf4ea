#!/usr/bin/env python3
"""Attacks that look for the host's paths from inside a box: the mount
tables (/proc/self/mountinfo, mounts, mountstats, of every process), the loop
device's backing file (/sys/block/loopN/loop/backing_file, LOOP_GET_STATUS64
on a device node made by hand, a sysfs mounted by hand), cgroups, init's
command line, environment and links, unix sockets, /etc/hostname and
/etc/hosts.

A box must show only its own view: nothing may name the data folder, the
test's temp dir, the checkout, /var/lib/agentbox or the host's hostname.
Controls run the same probes on the host, where the box's disk image path
and the host's hostname are found, so the probes and the needles work.
"""
import ctypes
import json
import os
import re
import socket
import stat

import attacklib as al
from attacklib import abtest

h = abtest.Harness()
REPO = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
HOSTNAME = socket.gethostname()

# Inside the box: every file and link that could name a host path, read
# into one JSON object (errors as errno numbers only, so an error text can
# never smuggle a path into the result or hide one).
PROBE = r'''
import ctypes, fcntl, glob, json, os, stat, sys
out = {}
def rd(p):
    try:
        with open(p, "rb") as f:
            out[p] = f.read(1 << 20).decode("utf-8", "replace")
    except OSError as e:
        out[p] = "ERR %d" % e.errno
def rl(p):
    try:
        out["readlink " + p] = os.readlink(p)
    except OSError as e:
        out["readlink " + p] = "ERR %d" % e.errno
for p in ["/proc/self/mountinfo", "/proc/self/mounts", "/proc/mounts", "/proc/self/mountstats",
          "/proc/1/mountinfo", "/proc/1/mounts", "/proc/1/mountstats", "/etc/mtab",
          "/proc/self/cgroup", "/proc/1/cgroup", "/proc/self/environ", "/proc/1/environ",
          "/proc/1/cmdline", "/proc/self/maps", "/proc/1/maps", "/proc/net/unix",
          "/proc/swaps", "/proc/partitions", "/etc/hostname", "/etc/hosts",
          "/proc/sys/kernel/hostname"]:
    rd(p)
for pat in ["/proc/[0-9]*/mountinfo", "/sys/block/*/loop/backing_file",
            "/sys/class/block/*/loop/backing_file",
            "/sys/devices/virtual/block/*/loop/backing_file"]:
    for p in glob.glob(pat):
        rd(p)
for p in ["/proc/1/exe", "/proc/1/cwd", "/proc/1/root", "/proc/self/exe", "/proc/self/cwd"]:
    rl(p)
for d in ["/proc/1/fd", "/proc/self/fd"]:
    try:
        for n in os.listdir(d):
            rl(d + "/" + n)
    except OSError:
        pass
# The box's own disk device, from its /workspace mount line.
dev = None
for line in out.get("/proc/self/mountinfo", "").splitlines():
    f = line.split()
    if len(f) > 4 and f[4] == "/workspace":
        dev = [int(x) for x in f[2].split(":")]
out["dev"] = dev
# A node of that device, made by hand, asked for its backing file.
LOOP_GET_STATUS64 = 0x4C05
for d in ["/tmp", "/workspace", "/dev/shm", "/run", "/var/tmp"]:
    p = d + "/.ab-loop"
    try:
        os.mknod(p, stat.S_IFBLK | 0o600, os.makedev(dev[0], dev[1]))
    except (OSError, TypeError) as e:
        out["mknod " + d] = "ERR %d" % getattr(e, "errno", 0)
        continue
    try:
        fd = os.open(p, os.O_RDONLY)
        buf = bytearray(232)
        fcntl.ioctl(fd, LOOP_GET_STATUS64, buf)
        out["loopinfo " + d] = bytes(buf).decode("latin-1")
        os.close(fd)
    except OSError as e:
        out["loopinfo " + d] = "ERR %d" % e.errno
    os.unlink(p)
# sysfs mounted by hand (needs CAP_SYS_ADMIN, which a box never has).
libc = ctypes.CDLL(None, use_errno=True)
os.makedirs("/tmp/.ab-sys", exist_ok=True)
if libc.mount(b"sysfs", b"/tmp/.ab-sys", b"sysfs", 0, None) == 0:
    out["sysfs mount"] = "mounted"
    for p in glob.glob("/tmp/.ab-sys/block/*/loop/backing_file"):
        rd(p)
else:
    out["sysfs mount"] = "ERR %d" % ctypes.get_errno()
print(json.dumps(out))
'''


def needles(box):
    """The host strings no box may show: (label, string)."""
    data = os.path.realpath(h.data)
    n = [("the data folder", data), ("the test's temp dir", os.path.realpath(h.root)),
         ("the box's disk image", os.path.join(data, "boxes", box, "disk.img")),
         ("the checkout", REPO), ("/var/lib/agentbox", "/var/lib/agentbox")]
    return [(what, s) for what, s in n if len(s) > 4]


def hostname_re():
    return re.compile(r"(?<![A-Za-z0-9_.-])%s(?![A-Za-z0-9_-])" % re.escape(HOSTNAME))


def skills_line(key, line):
    """A mount table line of the skills binds (checked apart, at the end)."""
    f = line.split()
    if "mountinfo" in key:
        return len(f) > 4 and f[4] in ("/mnt/skills", "/skills")
    if "mountstats" in key:
        return " on /mnt/skills " in line or " on /skills " in line
    return len(f) > 1 and f[1] in ("/mnt/skills", "/skills")


def leaks(found, pairs, skip_skills):
    """[(key, what)] of every needle found in the probe's output."""
    hits = []
    for key, text in sorted(found.items()):
        if not isinstance(text, str):
            continue
        for line in text.splitlines():
            if skip_skills and skills_line(key, line):
                continue
            for what, s in pairs:
                if s in line:
                    hits.append((key, what, line[:300]))
    return hits


box = h.create(None, "--disk", "64M", "--memory", "256M", "--pids", "128")
info = al.inspect(h, box)
init_pid = info.get("init_pid")
h.ok(init_pid, "inspect reports the box's init pid", repr(info))
pairs = needles(box)

# Controls on the host: the needles are real and the probe finds them.
loop_dev = None
for p in os.listdir("/sys/block"):
    try:
        with open("/sys/block/%s/loop/backing_file" % p) as f:
            if f.read().strip() == os.path.join(os.path.realpath(h.data), "boxes", box, "disk.img"):
                loop_dev = p
    except OSError:
        pass
h.ok(loop_dev, "control: on the host, /sys/block/loopN/loop/backing_file names the box's disk image")
with open("/proc/%d/mountinfo" % init_pid) as f:
    host_view = f.read()
h.ok(any("/mnt/skills" in ln for ln in host_view.splitlines()),
     "control: the host reads the box's mount table through /proc/PID/mountinfo", host_view)

r = al.bpy(h, box, PROBE, t=30)
found = al.last_json(r.out)
h.ok(found.get("/proc/self/mountinfo", "ERR").count("\n") > 5,
     "the probe ran in the box and read its mount table", r.describe())
h.ok(found.get("dev"), "the probe found the box's disk device in its mount table",
     found.get("/proc/self/mountinfo"))

hits = leaks(found, pairs, skip_skills=True)
h.eq(hits, [], "no host path (data folder, temp dir, disk image, checkout, /var/lib/agentbox) "
     "appears in anything the box can read")
for key in ("/proc/self/mountinfo", "/proc/1/mountinfo", "/proc/mounts"):
    lines = found.get(key, "").splitlines()
    h.ok(lines and all(not ln.startswith("ERR") for ln in lines),
         "%s is readable (the check above read a real table)" % key)
    h.not_contains(found.get(key), "lowerdir=/", "%s: no overlay layer is named by a host path" % key)
# Overlays name their layers inside the box directory only.
h.contains(found.get("/proc/self/mountinfo"), "upperdir=disk/layers/root/upper",
           "the root overlay's layers are named relative to the box")

for key in sorted(found):
    if "backing_file" in key:
        h.ok(found[key].startswith("ERR"), "%s is not readable in the box" % key, found[key])
h.ok(str(found.get("sysfs mount", "")).startswith("ERR"),
     "mounting sysfs in the box fails", found.get("sysfs mount"))
for d in ["/tmp", "/workspace", "/dev/shm", "/run", "/var/tmp"]:
    got = found.get("loopinfo " + d, found.get("mknod " + d))
    h.ok(str(got).startswith("ERR"),
         "a hand-made node of the box's disk in %s cannot be asked for its backing file" % d,
         repr(got))

# The hostname: the box's own name everywhere, the host's nowhere.
h.eq(found.get("/proc/sys/kernel/hostname", "").strip(), box, "the kernel's hostname is the box id")
h.eq(found.get("/etc/hostname", "").strip(), box, "/etc/hostname names the box")
h.contains(found.get("/etc/hosts"), box, "/etc/hosts names the box")
if HOSTNAME in ("", "localhost", box):
    h.skip("the host's hostname appears nowhere in the box",
           "the host's hostname (%r) is not distinctive" % HOSTNAME)
else:
    rx = hostname_re()
    named = [k for k, v in sorted(found.items()) if isinstance(v, str) and rx.search(v)]
    h.eq(named, [], "the host's hostname (%s) appears nowhere in the box" % HOSTNAME)

# A box whose /etc/hosts was changed keeps its change over a restart.
r = al.bexec(h, box, "echo '10.0.0.1 mine' >> /etc/hosts")
h.eq(r.rc, 0, "the box may edit its /etc/hosts", r.describe())
h.run("stop", box, timeout=30)
h.run("start", box, timeout=30)
r = al.bexec(h, box, "cat /etc/hosts /proc/self/mountinfo")
h.contains(r.out, "10.0.0.1 mine", "its edit survives a restart", r.describe())
h.eq(leaks({"mountinfo after restart": r.out}, pairs, skip_skills=True), [],
     "no host path after a restart either")

# The skills binds: the skills folder is a file system of its own
# (DATA/skills.img), so the root field (4th column) of its binds is "/" of
# that file system, not the folder's path in a host file system. (With the
# skills folder a plain host directory, this check fails: the root field was
# ".../data/skills".)
skill_hits = [x for x in leaks(found, pairs, skip_skills=False) if x not in hits]
h.eq(skill_hits, [], "the skills binds name no host path in the mount tables")
skill_roots = sorted((ln.split()[4], ln.split()[3])
                     for ln in found.get("/proc/self/mountinfo", "").splitlines()
                     if skills_line("mountinfo", ln))
h.eq(skill_roots, [("/mnt/skills", "/"), ("/skills", "/")],
     "the box sees /mnt/skills and /skills as binds of the root of the skills file system")
h.ok(not any(ln.split()[4].startswith(("/mnt/skills/", "/skills/")) and ln.split()[3] != "/"
             for ln in found.get("/proc/self/mountinfo", "").splitlines() if len(ln.split()) > 4),
     "nothing mounted below them names a path either")
h.done()
