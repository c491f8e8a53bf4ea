#!/usr/bin/env python3
"""A box's whole life through the CLI: create -> exec -> cp in and out -> writes
in every writable place -> stop -> start -> rm, checking at each step what a
user relies on (output, exit codes, env, cwd, stdin, files kept, /tmp emptied,
skills read-only, nothing left on the host after rm)."""
import glob
import hashlib
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abtest  # noqa: E402
from abtest import cgroup_dirs, cgroups_of  # noqa: E402

h = abtest.Harness()


# ---- helpers ---------------------------------------------------------------

def inspect(box):
    r = h.run("inspect", box)
    if r.rc != 0:
        return None, r
    try:
        return json.loads(r.out), r
    except ValueError:
        return None, r


def ls_table_status(box):
    """Status column of box in the plain `ls` table, or None."""
    r = h.run("ls")
    for line in r.out.splitlines():
        f = line.split()
        if f and f[0] == box:
            return f[1] if len(f) > 1 else ""
    return None


def sha(b):
    return hashlib.sha256(b).hexdigest()


def box_sha(box, path):
    r = h.exec(box, "sha256sum %s" % path)
    return r.out.split()[0] if r.rc == 0 and r.out.split() else "(sha256sum failed: %s)" % r.describe()


def loop_devices_for(path):
    r = subprocess.run(["losetup", "-a"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return [l for l in r.stdout.splitlines() if path in l]


def mounts_referencing(path):
    """Lines of any process's mountinfo that mention path (the host's own and every
    box's: a leaked mount namespace would still show the data dir's disk)."""
    found = []
    for mi in glob.glob("/proc/[0-9]*/mountinfo"):
        try:
            with open(mi, encoding="utf-8", errors="replace") as f:
                for line in f:
                    if path in abtest._unescape_mountinfo(line):
                        found.append("%s: %s" % (mi, line.strip()))
        except OSError:
            pass
    return found


def settle(fn, timeout=5.0, step=0.1):
    """Polls fn until it returns something empty (teardown may lag a little); returns its last value."""
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if not v or time.monotonic() > end:
            return v
        time.sleep(step)


def pid_gone(pid):
    """True if pid does not exist or is a zombie (reaping it is up to the host's init)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
        return s[s.rindex(")") + 2:][:1] in ("Z", "X")
    except (OSError, ValueError, TypeError):
        return True


def wait_for(pred, timeout=5.0, step=0.1):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > end:
            return v
        time.sleep(step)


def walk_files(root):
    """{relative path: sha256} of every regular file, plus the set of dirs."""
    files, dirs = {}, set()
    for d, dn, fn in os.walk(root):
        rel = os.path.relpath(d, root)
        dirs.add(rel)
        for f in fn:
            with open(os.path.join(d, f), "rb") as fh:
                files[os.path.normpath(os.path.join(rel, f))] = sha(fh.read())
    return files, dirs


# ---- host-side fixtures -----------------------------------------------------

skill_text = "---\nname: demo\ndescription: a demo skill for the lifecycle test\n---\n# Demo\nDo nothing.\n"
os.makedirs(os.path.join(h.data, "skills", "demo"))
with open(os.path.join(h.data, "skills", "demo", "SKILL.md"), "w") as f:
    f.write(skill_text)

host = os.path.join(h.root, "host")
os.makedirs(host)
all256 = bytes(range(256)) * 4
big = os.urandom(5 * 1024 * 1024)
with open(os.path.join(host, "all256.bin"), "wb") as f:
    f.write(all256)
with open(os.path.join(host, "big.bin"), "wb") as f:
    f.write(big)
with open(os.path.join(host, "run.sh"), "w") as f:
    f.write("#!/bin/sh\necho ran-from-cp\n")
os.chmod(os.path.join(host, "run.sh"), 0o755)
tree = os.path.join(host, "tree")
for d in ("sub/deeper", "empty"):
    os.makedirs(os.path.join(tree, d))
tree_content = {
    "a.txt": b"alpha\n",
    "sub/b.bin": bytes(range(256)),
    "sub/deeper/c.txt": b"gamma " * 1000,
    "sub/deeper/with space.txt": b"spaces in names\n",
}
for rel, data in tree_content.items():
    with open(os.path.join(tree, rel), "wb") as f:
        f.write(data)

# ---- create ------------------------------------------------------------------

t0 = time.monotonic()
box = h.create(None, "--cpus", "1", "--memory", "256M", "--pids", "128", "--disk", "64M",
               "--timeout", "45s", "--output-cap", "8M")
h.diag("create took %.2fs" % (time.monotonic() - t0))
h.eq(h.ls_status(box), "running", "a new box is listed as running by ls --json")
h.eq(ls_table_status(box), "running", "a new box is listed as running by ls")

info, r = inspect(box)
h.ok(info is not None, "inspect prints JSON", r.describe())
info = info or {}
h.eq(info.get("id"), box, "inspect: id")
h.eq(info.get("status"), "running", "inspect: status running")
lim = info.get("limits") or {}
h.eq(lim.get("cpus"), 1, "inspect: limits.cpus as given")
h.eq(lim.get("memory_mib"), 256, "inspect: limits.memory_mib as given")
h.eq(lim.get("pids"), 128, "inspect: limits.pids as given")
if h.native or lim.get("disk_mib"):
    h.eq(lim.get("disk_mib"), 64, "inspect: limits.disk_mib as given")
else:
    h.skip("inspect: limits.disk_mib as given", "this Docker engine's storage driver cannot limit a "
           "container's disk (overlay2 over ext4): the box reports no disk limit")
h.eq(lim.get("timeout_s"), 45, "inspect: limits.timeout_s as given")
h.eq(lim.get("output_cap"), 8 * 1024 * 1024, "inspect: limits.output_cap as given")
# A pod's init runs on a node of the cluster: no host pid, no stats, no
# host folders (skills), and only the claim's paths outlive the pod.
k8s = h.backend == "kubernetes"
pid1 = info.get("init_pid")
if k8s:
    h.ok(not pid1, "inspect: no init_pid (the pod's init is not a process of this host)",
         repr(pid1))
    h.eq([o for o in h.k8s_objects(box) if o.startswith("pods/")], ["pods/ab-" + box],
         "the cluster has the box's pod (control)")
else:
    h.ok(isinstance(pid1, int) and pid1 > 1 and os.path.exists("/proc/%d" % pid1),
         "inspect: init_pid is a live host process", repr(pid1))
cg1 = cgroups_of(pid1) if isinstance(pid1, int) else []
if h.native:
    h.ok(cg1 and all(os.path.basename(d) == box for d in cg1),
         "the init runs in cgroups of the box's own (named after its id)", repr(cg1))
    # A control for the leak checks below: they look for the data dir in losetup -a.
    h.ok(loop_devices_for(os.path.join(h.data, "boxes", box, "disk.img")),
         "while the box runs its disk.img is attached to a loop device (control for the leak checks)",
         lambda: subprocess.run(["losetup", "-a"], stdout=subprocess.PIPE, text=True).stdout)
elif not k8s:
    h.ok(cg1, "the init runs in cgroups of its container", repr(cg1))
    h.eq(len(h.containers(box) or []), 1, "the engine has the box's container (control)")
usage = info.get("usage") or {}
for k in ("memory_bytes", "pids", "cpu_usage_ns", "disk_used_bytes", "disk_limit_bytes"):
    h.ok(isinstance(usage.get(k), int), "inspect: usage.%s is a number" % k, json.dumps(info))
if not k8s:
    h.ok(usage.get("pids", 0) >= 1, "inspect: usage.pids counts the init", json.dumps(usage))
dl = usage.get("disk_limit_bytes", 0)
if h.native or dl:
    h.ok(40 << 20 <= dl <= 64 << 20, "inspect: usage.disk_limit_bytes matches --disk 64M", repr(dl))

# ---- exec --------------------------------------------------------------------

r = h.run("exec", box, "--", "echo to-out; echo to-err >&2")
h.eq((r.rc, r.out, r.err), (0, "to-out\n", "to-err\n"), "exec: stdout and stderr kept apart, exit 0")
r = h.run("exec", box, "--", "echo before; exit 3")
h.eq((r.rc, r.out), (3, "before\n"), "exec: exit code 3 is passed through", r.describe())
r = h.run("exec", box, "--", "printf", "%s|", "a b", "it's", "$HOME", "*")
h.eq((r.rc, r.out), (0, "a b|it's|$HOME|*|"), "exec: several args are passed as words, unexpanded",
     r.describe())
r = h.run("exec", "-e", "FOO=bar", "-e", "SPACED=a  b", "-e", "EMPTY=", box, "--",
          'echo "$FOO|$SPACED|${EMPTY-unset}|$HOME"')
h.eq(r.out, "bar|a  b||/workspace\n", "exec -e: variables reach the command (and HOME is /workspace)",
     r.describe())
r = h.run("exec", box, "--", "pwd")
h.eq(r.out, "/workspace\n", "exec: default cwd is /workspace", r.describe())
r = h.run("exec", "-w", "/mnt/user-data/outputs", box, "--", "pwd")
h.eq(r.out, "/mnt/user-data/outputs\n", "exec -w: cwd is honoured", r.describe())
r = h.run("exec", "-w", "/tmp", box, "--", "pwd")
h.eq(r.out, "/tmp\n", "exec -w /tmp", r.describe())
r = h.run("exec", "-i", box, "--", "cat; echo; echo done", input="line one\nline two")
h.eq(r.out, "line one\nline two\ndone\n", "exec -i: stdin reaches the command", r.describe())
r = h.run("exec", box, "--", "cat; echo eof-seen", timeout=20)
h.eq((r.rc, r.out), (0, "eof-seen\n"), "exec without -i: the command's stdin is at EOF", r.describe())
# The pod asks for the box id as its hostname; the stand-in kubelet (host
# network mode) names the host after the pod instead.
r = h.run("exec", box, "--", "uname -n; cat /proc/sys/kernel/hostname")
if k8s:
    h.ok(r.out in ("%s\n%s\n" % (box, box), "ab-%s\nab-%s\n" % (box, box)),
         "hostname inside is the box id (or, on the stand-in, the pod's name)", r.describe())
else:
    h.eq(r.out, "%s\n%s\n" % (box, box), "hostname inside is the box id", r.describe())
r = h.run("exec", box, "--", "id -u; echo $USER")
h.eq(r.out, "0\nroot\n", "the command runs as root inside", r.describe())

# ---- box layout ----------------------------------------------------------------

r = h.exec(box, "stat -c %d:%i /workspace /mnt/user-data/workspace")
lines = r.out.split()
h.ok(r.rc == 0 and len(lines) == 2 and lines[0] == lines[1],
     "/workspace and /mnt/user-data/workspace are the same directory (dev:ino)", r.describe())
r = h.exec(box, "echo same > /workspace/same.txt && cat /mnt/user-data/workspace/same.txt")
h.eq(r.out, "same\n", "a file written in /workspace is in /mnt/user-data/workspace", r.describe())
r = h.exec(box, "test -d /mnt/user-data/uploads && test -d /mnt/user-data/outputs && echo ok")
h.eq(r.out, "ok\n", "/mnt/user-data/uploads and /mnt/user-data/outputs exist", r.describe())

for d in () if k8s else ("/mnt/skills", "/skills"):
    r = h.exec(box, "cat %s/demo/SKILL.md" % d)
    h.eq(r.out, skill_text, "the host's DATA/skills/demo/SKILL.md reads back at %s/demo/SKILL.md" % d,
         r.describe())
    r = h.exec(box, "echo x > %s/demo/new.txt" % d)
    h.ne(r.rc, 0, "creating a file under %s fails" % d)
    h.contains(r.err.lower(), "read-only", "... with 'Read-only file system' (%s)" % d, r.describe())
    r = h.exec(box, "echo x >> %s/demo/SKILL.md" % d)
    h.ne(r.rc, 0, "appending to %s/demo/SKILL.md fails" % d)
    r = h.exec(box, "rm -f %s/demo/SKILL.md; mkdir %s/evil" % (d, d))
    h.ne(r.rc, 0, "removing a skill file or making a dir under %s fails" % d)
with open(os.path.join(h.data, "skills", "demo", "SKILL.md")) as f:
    h.eq(f.read(), skill_text, "the host's skill file is unchanged")
h.eq(sorted(os.listdir(os.path.join(h.data, "skills", "demo"))), ["SKILL.md"],
     "nothing was added to the host's skills dir")

# ---- cp in -----------------------------------------------------------------------

r = h.run("cp", os.path.join(host, "all256.bin"), "%s:all256.bin" % box)
h.eq(r.rc, 0, "cp a binary file into the box (relative path)", r.describe())
h.eq(box_sha(box, "/workspace/all256.bin"), sha(all256),
     "the file with all 256 byte values arrives byte-identical in /workspace")
t0 = time.monotonic()
r = h.run("cp", os.path.join(host, "big.bin"), "%s:/workspace/big.bin" % box)
h.eq(r.rc, 0, "cp a 5 MiB file into the box (absolute path)", r.describe())
h.diag("cp of 5 MiB in took %.2fs" % (time.monotonic() - t0))
h.eq(box_sha(box, "/workspace/big.bin"), sha(big), "the 5 MiB file arrives byte-identical")
r = h.run("cp", os.path.join(host, "all256.bin"), "%s:/mnt/user-data/uploads" % box)
h.eq(r.rc, 0, "cp a file into an existing box directory", r.describe())
h.eq(box_sha(box, "/mnt/user-data/uploads/all256.bin"), sha(all256),
     "cp into a directory keeps the file's name (uploads/all256.bin)")
r = h.run("cp", os.path.join(host, "run.sh"), "%s:run.sh" % box)
r2 = h.exec(box, "./run.sh")
h.eq(r2.out, "ran-from-cp\n", "an executable file keeps its mode through cp", r.describe() + "\n" + r2.describe())
r = h.run("cp", tree, "%s:tree" % box)
h.eq(r.rc, 0, "cp a directory tree into the box", r.describe())
r = h.exec(box, "cd /workspace/tree && find . -type f -print0 | sort -z | xargs -0 sha256sum; "
                "find . -type d | sort")
want_lines = sorted("%s  ./%s" % (sha(d), p) for p, d in tree_content.items())
want_dirs = [".", "./empty", "./sub", "./sub/deeper"]
got = r.out.splitlines()
h.eq(sorted(l for l in got if "  ./" in l), want_lines, "every file of the tree arrives byte-identical",
     r.describe())
h.eq(sorted(l for l in got if "  ./" not in l), want_dirs, "every directory (also an empty one) arrives",
     r.describe())

# ---- cp out ----------------------------------------------------------------------

out = os.path.join(h.root, "out")
os.makedirs(out)
r = h.exec(box, "head -c 3145728 /dev/urandom > /workspace/gen.bin && sha256sum /workspace/gen.bin")
gen_sha = r.out.split()[0] if r.out.split() else "?"
for src, dst, want in (("all256.bin", "all256.bin", sha(all256)),
                       ("/workspace/big.bin", "big.bin", sha(big)),
                       ("gen.bin", "gen.bin", gen_sha)):
    r = h.run("cp", "%s:%s" % (box, src), os.path.join(out, dst))
    h.eq(r.rc, 0, "cp %s out of the box" % src, r.describe())
    try:
        with open(os.path.join(out, dst), "rb") as f:
            got = sha(f.read())
    except OSError as e:
        got = str(e)
    h.eq(got, want, "%s comes out byte-identical" % src)
r = h.run("cp", "%s:all256.bin" % box, out + "/renamed.bin")
h.ok(r.rc == 0 and os.path.isfile(out + "/renamed.bin") and open(out + "/renamed.bin", "rb").read() == all256,
     "cp out to a new host path writes the file under that name", r.describe())
os.makedirs(out + "/dir", exist_ok=True)
r = h.run("cp", "%s:all256.bin" % box, out + "/dir")
h.ok(r.rc == 0 and os.path.isfile(out + "/dir/all256.bin"),
     "cp out into an existing host dir keeps the file's name", r.describe())
r = h.run("cp", "%s:tree" % box, os.path.join(out, "tree"))
h.eq(r.rc, 0, "cp a directory tree out of the box", r.describe())
got_files, got_dirs = walk_files(os.path.join(out, "tree")) if os.path.isdir(os.path.join(out, "tree")) \
    else ({}, set())
want_files, want_dirs2 = walk_files(tree)
h.eq(got_files, want_files, "the tree comes back out byte-identical")
h.eq(got_dirs, want_dirs2, "the tree comes back out with all its directories")

# ---- writes in every writable place --------------------------------------------

tool = "abtool-%s" % box
r = h.exec(box, "set -e; echo kept-ws > /workspace/ws.txt; "
                "printf '#!/bin/sh\\necho hello-from-usr-local\\n' > /usr/local/bin/%s; "
                "chmod +x /usr/local/bin/%s; echo kept-out > /mnt/user-data/outputs/o.txt; "
                "echo gone > /tmp/t.txt; mkdir -p /workspace/deep/er && echo x > /workspace/deep/er/f"
           % (tool, tool))
h.eq(r.rc, 0, "writes in /workspace, /usr/local/bin, outputs and /tmp succeed", r.describe())
r = h.run("exec", box, "--", tool)
h.eq(r.out, "hello-from-usr-local\n", "a script written to /usr/local/bin runs via PATH", r.describe())
h.ok(not os.path.exists("/usr/local/bin/" + tool), "the script is not on the host's /usr/local/bin")

# ---- stop ------------------------------------------------------------------------

r = h.run("stop", box)
h.eq(r.rc, 0, "stop exits 0", r.describe())
h.eq(h.ls_status(box), "stopped", "ls --json shows the box stopped")
h.eq(ls_table_status(box), "stopped", "ls shows the box stopped")
info, r = inspect(box)
h.eq((info or {}).get("status"), "stopped", "inspect shows the box stopped", r.describe())
h.ok("init_pid" not in (info or {}), "inspect of a stopped box has no init_pid", r.out)
h.ok(wait_for(lambda: pid_gone(pid1)), "the old init process is gone (or a zombie awaiting the host's init)")
h.eq(settle(lambda: cgroup_dirs(box, cg1, data=h.data)), [],
     "the box's cgroups are removed on stop")
if h.native:
    h.ok(not os.path.exists(os.path.join(h.data, "boxes", box, "state.json")),
         "state.json is gone after stop")
    h.eq(settle(lambda: loop_devices_for(os.path.join(h.data, "boxes"))), [],
         "the box's loop device is detached on stop")
    h.ok(os.path.isfile(os.path.join(h.data, "boxes", box, "disk.img")), "the disk image is kept on stop")

r = h.run("exec", box, "--", "echo should-not-run")
h.eq(r.rc, 125, "exec in a stopped box exits 125", r.describe())
h.contains(r.err, "stopped", "... saying the box is stopped")
h.not_contains(r.out, "should-not-run", "... and the command did not run")
h.eq(h.ls_status(box), "stopped", "exec in a stopped box does not start it")
r = h.run("cp", os.path.join(host, "all256.bin"), "%s:x.bin" % box)
h.eq(r.rc, 125, "cp into a stopped box exits 125", r.describe())
h.eq(h.ls_status(box), "stopped", "cp into a stopped box does not start it")
r = h.run("stop", box)
h.eq(r.rc, 0, "stop of a stopped box is fine (idempotent)", r.describe())

# ---- start -----------------------------------------------------------------------

t0 = time.monotonic()
r = h.run("start", box)
h.eq(r.rc, 0, "start exits 0", r.describe())
h.diag("start took %.2fs" % (time.monotonic() - t0))
h.eq(h.ls_status(box), "running", "the box is running again")
info, r = inspect(box)
if not k8s:
    h.ne((info or {}).get("init_pid"), pid1, "a new init runs the restarted box", r.describe())
    cg2 = cgroups_of((info or {}).get("init_pid"))
    h.ok(cg2, "the restarted init runs in the box's cgroups again", repr(cg2))
r = h.run("start", box)
h.eq(r.rc, 0, "start of a running box is fine (idempotent)", r.describe())
info2, r = inspect(box)
h.eq((info2 or {}).get("init_pid"), (info or {}).get("init_pid"),
     "start of a running box keeps its init", r.describe())

r = h.exec(box, "cat /workspace/ws.txt /mnt/user-data/outputs/o.txt /workspace/deep/er/f")
h.eq(r.out, "kept-ws\nkept-out\nx\n", "workspace and outputs files survive stop/start", r.describe())
if not k8s:
    r = h.run("exec", box, "--", tool)
    h.eq(r.out, "hello-from-usr-local\n", "the /usr/local/bin script (upper layer) survives stop/start",
         r.describe())
h.eq(box_sha(box, "/workspace/big.bin"), sha(big), "the 5 MiB file survives stop/start")
h.eq(box_sha(box, "/mnt/user-data/uploads/all256.bin"), sha(all256), "the uploaded file survives stop/start")
r = h.exec(box, "ls -A /tmp")
h.eq((r.rc, r.out), (0, ""), "/tmp is empty after a restart", r.describe())
if not k8s:
    r = h.exec(box, "cat /skills/demo/SKILL.md")
    h.eq(r.out, skill_text, "skills are there after a restart")
r = h.run("exec", box, "--", "uname -n")
h.ok(r.out == box + "\n" or (k8s and r.out == "ab-%s\n" % box),
     "hostname is still the box id after a restart", r.describe())

# ---- rm ------------------------------------------------------------------------

r = h.rm(box)
h.eq(r.rc, 0, "rm exits 0", r.describe())
h.eq(h.ls_status(box), None, "the box is gone from ls --json")
h.not_contains(h.run("ls").out, box, "the box is gone from ls")
if h.native:
    h.ok(not os.path.exists(os.path.join(h.data, "boxes", box)), "DATA/boxes/ID is gone")
    trash = os.path.join(h.data, "trash")
    h.eq(os.listdir(trash) if os.path.isdir(trash) else [], [], "DATA/trash is empty")
elif k8s:
    h.eq(settle(lambda: h.k8s_objects(box)), [],
         "the box's pod, secret, claim and policy are gone from the cluster")
else:
    h.eq(h.containers(box), [], "the box's container is gone")
    h.ok(not os.path.exists(os.path.join(h.data, "docker", box)), "DATA/docker/ID is gone")
# (the skills folder's own disk, DATA/skills.img, stays mounted on the host)
h.eq(settle(lambda: loop_devices_for(os.path.join(h.data, "boxes"))), [],
     "no loop device references a box's disk (losetup -a)")
h.eq(settle(lambda: [m for m in mounts_referencing(h.root)
                     if " %s " % os.path.join(os.path.realpath(h.data), "skills") not in m]), [],
     "no mount of any process references the data dir (but the skills disk's, on the host)")
h.eq(settle(lambda: cgroup_dirs(box, cg1 + (cg2 if not k8s else []), data=h.data)), [],
     "no cgroup of the box is left (/sys/fs/cgroup/*/PARENT/ID)")
r = h.run("inspect", box)
h.eq(r.rc, 125, "inspect of the removed box exits 125", r.describe())
h.contains(r.err, box, "... naming the box")
r = h.run("rm", box)
h.eq(r.rc, 125, "rm of a removed box exits 125", r.describe())

h.done()
