#!/usr/bin/env python3
"""A box whose image has no bash (a busybox rootfs, as alpine or busybox
images): a shell command line runs with `/bin/sh -lc`; with no shell at all
it is refused with a clear error while programs given as argv still run; a
shell installed later is used at the next exec."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import abtest  # noqa: E402

h = abtest.Harness()
BUSYBOX = "/bin/busybox"
if not os.access(BUSYBOX, os.X_OK):
    h.skip_all("no %s (the busybox-static package)" % BUSYBOX)
if not abtest.init_is_static():
    h.skip_all("agentbox-init is dynamically linked (sanitized build): it cannot start in a busybox root")
root = tempfile.mkdtemp(prefix="abtest-bbroot-", dir="/var/tmp")
try:
    for d in ("bin", "etc", "root", "tmp"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    shutil.copy2(BUSYBOX, os.path.join(root, "bin", "busybox"))
    for applet in ("sh", "echo", "cat", "id", "ls", "readlink", "rm", "ln", "true"):
        os.symlink("busybox", os.path.join(root, "bin", applet))
    with open(os.path.join(root, "etc", "passwd"), "w") as f:
        f.write("root:x:0:0:root:/root:/bin/sh\n")
    with open(os.path.join(root, "etc", "group"), "w") as f:
        f.write("root:x:0:\n")
    with open(os.path.join(root, "etc", "profile"), "w") as f:
        f.write("export FROM_PROFILE=yes\n")

    box = h.create(None, "--rootfs", root, "--disk", "32M", "--memory", "128M")

    def sh(cmd):
        """A shell command line: one word after --."""
        return h.run("exec", box, "--", cmd)

    r = sh('echo "$0 $FROM_PROFILE $SHELL"; readlink /proc/$$/exe; true')
    h.eq(r.out, "sh yes /bin/sh\n/bin/busybox\n",
         "no /bin/bash: a command line runs in /bin/sh as a login shell (/etc/profile read)",
         r.describe())
    r = h.run("exec", box, "--", "echo", "argv", "words")
    h.eq((r.rc, r.out), (0, "argv words\n"), "an argv exec runs", r.describe())

    r = h.run("exec", box, "--", "rm", "/bin/sh")
    h.eq(r.rc, 0, "the box removes its /bin/sh", r.describe())
    r = sh("echo should-not-run")
    h.ok(r.rc != 0, "no shell at all: a command line fails", r.describe())
    h.contains(r.err, "no shell (/bin/bash or /bin/sh)", "... saying the image has no shell")
    h.contains(r.err, "argv", "... and what to do instead")
    h.not_contains(r.out, "should-not-run", "... and nothing ran")
    r = h.run("exec", box, "--", "echo", "argv", "still")
    h.eq((r.rc, r.out), (0, "argv still\n"), "no shell: argv execs still run", r.describe())

    r = h.run("exec", box, "--", "ln", "-s", "busybox", "/bin/sh")
    h.eq(r.rc, 0, "the box installs a /bin/sh again", r.describe())
    r = sh("echo back; true")
    h.eq((r.rc, r.out), (0, "back\n"), "the next command line finds it", r.describe())
finally:
    shutil.rmtree(root, ignore_errors=True)
h.done()
