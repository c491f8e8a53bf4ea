#!/usr/bin/env python3
"""create --rootfs DIR: the box runs on DIR (read-only) instead of the host
base, its writes land in its own layer, and DIR is never modified."""
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import abtest  # noqa: E402

h = abtest.Harness()
root = tempfile.mkdtemp(prefix="abtest-rootfs-", dir="/var/tmp")
try:
    # A rootfs made of hard links to the host's /usr (fast, same filesystem)
    # plus a private /etc with a marker the host's /etc does not have.
    subprocess.run(["cp", "-al", "/usr", os.path.join(root, "usr")], check=True)
    subprocess.run(["cp", "-a", "/etc", os.path.join(root, "etc")], check=True)
    for link in ("bin", "sbin", "lib", "lib64"):
        if os.path.exists("/usr/" + link):
            os.symlink("usr/" + link, os.path.join(root, link))
    marker = "rootfs-marker-%d" % os.getpid()
    with open(os.path.join(root, "etc", "abtest-rootfs-marker"), "w") as f:
        f.write(marker + "\n")
    before = sorted(os.listdir(os.path.join(root, "usr", "local", "bin")))

    r = h.run("create", "--rootfs", "relative/dir", "--disk", "32M")
    h.ok(r.rc in (2, 125), "a relative --rootfs is refused", r.describe())
    h.contains(r.err, "rootfs", "the message names the rootfs")

    box = h.create(None, "--rootfs", root, "--disk", "64M", "--memory", "256M")
    r = h.exec(box, "cat /etc/abtest-rootfs-marker")
    h.eq(r.out.strip(), marker, "the box sees the given rootfs, not the host's /etc", r.describe())
    r = h.exec(box, "echo 'echo tool-ok' > /usr/local/bin/abtool && chmod +x /usr/local/bin/abtool && abtool")
    h.eq(r.out.strip(), "tool-ok", "the box writes into its rootfs view", r.describe())
    h.eq(sorted(os.listdir(os.path.join(root, "usr", "local", "bin"))), before,
         "the rootfs directory itself is unchanged")
    h.eq(h.run("stop", box).rc, 0, "stop")
    h.eq(h.run("start", box).rc, 0, "start")
    r = h.exec(box, "abtool; ls /workspace >/dev/null && echo ws-ok")
    h.eq(r.out.split(), ["tool-ok", "ws-ok"], "its changes persist across stop/start; /workspace exists",
         r.describe())
    info = h.run("inspect", box)
    h.contains(info.out, root, "inspect shows the rootfs")
finally:
    shutil.rmtree(root, ignore_errors=True)
h.done()
