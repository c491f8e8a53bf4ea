#!/usr/bin/env python3
"""Bad input is refused clearly and changes nothing: unknown boxes, invalid
ids, invalid limits, a missing working directory, usage errors and the typos
a user is likely to make."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abtest  # noqa: E402

h = abtest.Harness()
boxes_dir = os.path.join(h.data, "boxes")


def box_dirs():
    return sorted(os.listdir(boxes_dir)) if os.path.isdir(boxes_dir) else []


def data_entries():
    return sorted(os.listdir(h.data))


host = os.path.join(h.root, "host")
os.makedirs(host)
hostfile = os.path.join(host, "file.txt")
with open(hostfile, "w") as f:
    f.write("host file\n")

# ---- unknown box ----------------------------------------------------------------

h.run("ls")  # sets up the data dir
before = data_entries()
ghost = "nosuchbox42"
for args in (("exec", ghost, "--", "true"), ("stop", ghost), ("start", ghost), ("rm", ghost),
             ("inspect", ghost), ("cp", hostfile, ghost + ":x.txt"),
             ("cp", ghost + ":/etc/hostname", os.path.join(host, "out.txt"))):
    r = h.run(*args)
    what = " ".join(a if a != hostfile else "FILE" for a in args[:3])
    h.eq(r.rc, 125, "%s: unknown box exits 125" % what, r.describe())
    h.contains(r.err, ghost, "%s: the message names the id" % what)
    h.eq(r.out, "", "%s: nothing on stdout" % what)
h.ok(not os.path.exists(os.path.join(host, "out.txt")), "cp out of an unknown box creates no host file")
h.eq(box_dirs(), [], "nothing was created under DATA/boxes by operations on an unknown box")
h.eq(data_entries(), before, "nothing new in the data dir")

# ---- invalid ids ---------------------------------------------------------------------

victim = os.path.join(h.data, "victim")
os.makedirs(victim)
with open(os.path.join(victim, "keep"), "w") as f:
    f.write("keep\n")
bad_ids = ["Bad", "a/b", "../x", "-x", "a" * 70, "", "_x", "a b", "x.y", "../victim", ".", ".."]
for bad in bad_ids:
    shown = bad if len(bad) < 20 else "%d chars" % len(bad)
    r = h.run("create", "--id", bad, "--disk", "32M", "--memory", "128M")
    h.ok(r.rc in (2, 125), "create --id %r is rejected (exit %s)" % (shown, r.rc), r.describe())
    h.ok("a-z" in r.err and ("63" in r.err or "64" in r.err),
         "create --id %r: the message says what a valid id looks like" % shown, r.describe())
    h.eq(box_dirs(), [], "create --id %r: nothing created under DATA/boxes" % shown)
h.eq(data_entries(), before + ["victim"], "invalid ids created nothing anywhere in the data dir")
for verb in (("exec", "--", "true"), ("inspect",), ("stop",), ("start",), ("rm",)):
    for bad in ("../victim", "Bad", "a/b"):
        args = (verb[0], bad) + verb[1:]
        r = h.run(*args)
        h.ok(r.rc in (2, 125) and "a-z" in r.err, "%s %s is rejected as an invalid id" % (verb[0], bad),
             r.describe())
h.ok(os.path.isfile(os.path.join(victim, "keep")), "`rm ../victim` did not touch DATA/victim")
r = h.run("cp", hostfile, "../victim:keep")
h.ne(r.rc, 0, "cp to '../victim:keep' fails", r.describe())
with open(os.path.join(victim, "keep")) as f:
    h.eq(f.read(), "keep\n", "... and DATA/victim/keep is unchanged")

# ---- invalid limits ---------------------------------------------------------------------

limit_cases = [
    (("--memory", "1M"), "memory"),
    (("--memory", "banana"), "memory"),
    (("--memory", "-5M"), "memory"),
    (("--memory", "99999999G"), "memory"),
    (("--pids", "1"), "pids"),
    (("--pids", "banana"), "pids"),
    (("--disk", "1M"), "disk"),
    (("--disk", "banana"), "disk"),
    (("--cpus", "0"), "cpus"),
    (("--cpus", "-1"), "cpus"),
    (("--cpus", "nan"), "cpus"),
    (("--cpus", "banana"), "cpus"),
    (("--timeout", "0"), "timeout"),
    (("--timeout", "banana"), "timeout"),
    (("--timeout", "-1s"), "timeout"),
    (("--output-cap", "10"), "output"),
    (("--output-cap", "banana"), "output"),
]
for i, (args, field) in enumerate(limit_cases):
    box = "lim%d" % i
    r = h.run("create", "--id", box, *args)
    what = "create %s" % " ".join(args)
    h.ok(r.rc in (2, 125), "%s is rejected (exit %s)" % (what, r.rc), r.describe())
    h.contains(r.err.lower(), field, "%s: the message names the field '%s'" % (what, field))
    if args[1] == "banana":
        h.contains(r.err, args[1], "%s: the message shows the bad value" % what)
    h.eq(box_dirs(), [], "%s: nothing created under DATA/boxes" % what)
    h.eq(abtest.cgroup_dirs(box, data=h.data), [],
         "%s: no cgroup created" % what)

# ---- a real box for the exec checks ------------------------------------------------------

box = h.create(None, "--disk", "32M", "--memory", "128M")
r = h.run("exec", "-w", "/nope", box, "--", "touch /workspace/marker")
h.ne(r.rc, 0, "exec -w /nope fails", r.describe())
h.contains(r.err, "/nope", "... with a message naming the path")
r2 = h.exec(box, "test -e /workspace/marker && echo ran || echo not-ran")
h.eq(r2.out, "not-ran\n", "... and the command did not run", r.describe())
h.exec(box, "echo x > /workspace/plain.txt")
r = h.run("exec", "-w", "/workspace/plain.txt", box, "--", "touch /workspace/marker2")
h.ne(r.rc, 0, "exec -w on a file (not a directory) fails", r.describe())
h.contains(r.err, "plain.txt", "... naming the path")
r2 = h.exec(box, "test -e /workspace/marker2 && echo ran || echo not-ran")
h.eq(r2.out, "not-ran\n", "... and the command did not run")

for args, name in ((("exec", box), "exec ID (no command)"),
                   (("exec", box, "--"), "exec ID -- (no command)"),
                   (("exec",), "exec (nothing)"),
                   (("exec", "--timeout", "0", box, "--", "true"), "exec --timeout 0"),
                   (("exec", "-e", "NOEQUALS", box, "--", "true"), "exec -e without ="),
                   (("exec", "-e", "=v", box, "--", "true"), "exec -e with an empty name"),
                   (("exec", "--bogus", box, "--", "true"), "exec --bogus"),
                   (("frobnicate",), "unknown verb"),
                   ((box,), "agentbox ID (box id as the verb)"),
                   ((box, "ls"), "agentbox ID ls"),
                   ((box, "echo", "hi"), "agentbox ID CMD"),
                   (("cp", hostfile, os.path.join(host, "copy.txt")), "cp with neither side a box"),
                   (("cp", box + ":a", box + ":b"), "cp with both sides a box"),
                   (("cp", hostfile), "cp with one argument"),
                   (("cp",), "cp with no argument"),
                   (("rm",), "rm with no id"),
                   (("stop",), "stop with no id"),
                   (("start",), "start with no id"),
                   (("inspect",), "inspect with no id"),
                   (("inspect", box, box), "inspect with two ids"),
                   (("ls", "extra"), "ls with an extra argument"),
                   (("create", box), "create ID (positional id, not --id)"),
                   (("create", "--memory"), "create --memory without a value"),
                   (("--data",), "--data without a value"),
                   ((), "no command at all")):
    r = h.run(*args)
    h.eq(r.rc, 2, "%s: usage error, exit 2" % name, r.describe())
    h.ok(r.err.strip(), "%s: a message on stderr" % name, r.describe())
h.ok(not os.path.exists(os.path.join(host, "copy.txt")), "cp with neither side a box copied nothing")
r = h.run(box)
h.contains(r.err, box, "`agentbox ID`: the message names what was typed")
r = h.run("frobnicate")
h.contains(r.err, "frobnicate", "unknown verb: the message names it")
r = h.run("exec", box)
h.contains(r.err, "command", "exec ID without a command: the message says a command is missing")
h.eq(box_dirs(), [box], "usage errors created no boxes")

r = h.run("exec", "--timeout", "banana", box, "--", "true")
h.ok(r.rc in (2, 125), "exec --timeout banana is rejected", r.describe())
h.contains(r.err, "banana", "... showing the bad value")

r = h.run("cp", os.path.join(host, "no-such-file"), box + ":x")
h.eq(r.rc, 125, "cp of a missing host file exits 125", r.describe())
h.contains(r.err, "no-such-file", "... naming the file")
r = h.run("cp", box + ":/no/such/file", os.path.join(host, "got.txt"))
h.eq(r.rc, 125, "cp of a missing box path exits 125", r.describe())
h.contains(r.err, "/no/such/file", "... naming the path")
h.ok(not os.path.exists(os.path.join(host, "got.txt")), "... and creates no host file")

r = h.run("exec", box, "--", "echo still-fine")
h.eq((r.rc, r.out), (0, "still-fine\n"), "after all that, the box works")

h.done()
