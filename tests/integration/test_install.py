#!/usr/bin/env python3
"""An installed agentbox works from where `meson install` put it: the build
is installed with DESTDIR into this file's temp dir (nothing else is
copied), and the installed `agentbox serve` (bin/agentbox, which hands serve
to libexec/agentbox/agentbox-full) runs on a temp data folder and a free
port: it finds agentbox-init and the code runner's files relative to
itself, makes a box, runs an exec in it and Python (and, when the runner's
JS dependencies were installed, JS) snippets, and deletes the box. The
installed runners folder holds runners/js/node_modules when the build tree
had it (scripts/npm-deps.sh). A binary whose parts are missing says where it
looked. The systemd unit (contrib/agentbox.service, and the installed copy
with its ExecStart pointed at the prefix) passes `systemd-analyze verify`."""
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import abtest  # noqa: E402

REPO = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
h = abserver.ServerHarness(budget=250)
BUILD = os.path.dirname(os.path.realpath(h.bin))
# What a developer's shell or meson's test environment points at the build
# tree must not help the installed binary.
for var in ("AGENTBOX_INIT", "AGENTBOX_RUNNERS"):
    os.environ.pop(var, None)


def run(argv, timeout=120, env=None):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        return -9, e.stdout or "", (e.stderr or "") + "\n[timed out]"


if not shutil.which("meson"):
    h.skip_all("meson is not installed")

# ---- meson install into DESTDIR -------------------------------------------------------
dest = os.path.join(h.root, "dest")
rc, out, err = run(["meson", "install", "-C", BUILD, "--no-rebuild", "--quiet", "--destdir", dest], timeout=180)
if rc != 0:
    h.bail_out("meson install --destdir failed (%s): %s" % (rc, (err or out)[-500:]))
h.ok(True, "meson install --destdir %s" % dest)
rc, out, err = run(["meson", "introspect", "--installed", BUILD])
installed = json.loads(out) if rc == 0 else {}


def staged(build_name):
    """The staged path of a build output (by its name in the build dir)."""
    for src, dst in installed.items():
        if os.path.basename(src) == build_name and os.path.dirname(os.path.realpath(src)) == BUILD:
            return dest + dst
    return None


agentbox = staged("agentbox")
full = staged("agentbox-full")
init = staged("agentbox-init")
for name, path in (("agentbox", agentbox), ("agentbox-full", full), ("agentbox-init", init)):
    h.ok(path and os.access(path, os.X_OK), "%s is installed (%s)" % (name, path))
if not (agentbox and full and init):
    h.bail_out("the installed binaries are missing")
prefix_share = os.path.join(os.path.dirname(os.path.dirname(agentbox)), "share", "agentbox")
runners = os.path.join(prefix_share, "runners")
h.ok(os.path.isfile(os.path.join(runners, "python", "runner.py")) and
     os.path.isfile(os.path.join(runners, "js", "runner.js")),
     "the runners are installed in share/agentbox/runners")
h.ok(os.path.isfile(os.path.join(prefix_share, "config.example.yaml")), "the sample config is installed")
bun_rel = os.path.join("js", "node_modules", "@oven", "bun-linux-x64", "bin", "bun")
tree_has_bun = os.access(os.path.join(REPO, "runners", bun_rel), os.X_OK)
if tree_has_bun:
    h.ok(os.access(os.path.join(runners, bun_rel), os.X_OK),
         "runners/js/node_modules is installed with it (Bun executable)")
else:
    h.skip("runners/js/node_modules is installed with it",
           "runners/js/node_modules is not in the build tree (run scripts/npm-deps.sh)")
h.ok(not os.path.realpath(agentbox).startswith(BUILD + "/"), "the binary under test is outside the build tree")

# ---- the installed server -----------------------------------------------------------------
h.bin = agentbox  # the harness's CLI calls and cleanup use the installed binary too
S = h.start_server()
r = S.get("/health")
h.eq(r.status, 200, "the installed agentbox serve answers /health", r.describe())
h.eq(os.path.realpath("/proc/%d/exe" % S.proc.pid), os.path.realpath(full),
     "serve runs in the installed agentbox-full")
r = S.post("/v1/sandboxes", {"id": "inst-1"})
h.ok(r.status in (200, 201), "a box is created", r.describe())
r = S.post("/v1/sandboxes/inst-1/exec", {"command": "echo hello from $(hostname); id -u"})
h.eq(r.get("stdout"), "hello from inst-1\n0\n", "an exec runs in the box", r.describe())
h.eq(r.get("exit_code"), 0, "... and exits 0", r.describe())

r = S.post("/sandbox/python", {"code": "def main(a, b):\n    return {'twice': a * b}\n",
                                "variables": {"a": 21, "b": 2}},
           timeout=120)
h.eq((r.get("data") or {}).get("codeReturn"), {"twice": 42},
     "a Python snippet runs with the installed runners", r.describe())
if tree_has_bun:
    r = S.post("/sandbox/js", {"code": "const _ = require('lodash');\n"
                                       "function main({a}) { return {sum: _.sum([a, 1])}; }\n",
                               "variables": {"a": 41}}, timeout=120)
    h.eq((r.get("data") or {}).get("codeReturn"), {"sum": 42},
         "a JS snippet runs (Bun and lodash from the installed node_modules)", r.describe())
else:
    h.skip("a JS snippet runs with the installed runners",
           "runners/js/node_modules is not installed (scripts/npm-deps.sh installs Bun and the modules)")

r = S.delete("/v1/sandboxes/inst-1")
h.ok(r.status in (200, 202, 204), "the box is deleted", r.describe())
gone = None
for _ in range(100):
    r = S.get("/v1/sandboxes/inst-1")
    if r.status == 404:
        gone = True
        break
    time.sleep(0.1)
h.ok(gone, "... and is gone", r.describe())
S.stop()

# The installed sample config is one the server takes (--listen and --data
# given as flags, as the unit gives --data).
srv = h.server(defaults=False, name="sample", args=["--config", os.path.join(prefix_share, "config.example.yaml")])
why = srv.start()
h.ok(why is None, "the installed sample config starts the server", why)
srv.stop()

# ---- parts missing: the error names where it looked ----------------------------------------
lonely = os.path.join(h.root, "lonely", "bin")
os.makedirs(lonely)
shutil.copy2(agentbox, lonely)
rc, out, err = run([os.path.join(lonely, "agentbox"), "--data", os.path.join(h.root, "d2"), "ls"], timeout=30)
if os.access("/usr/local/libexec/agentbox/agentbox-full", os.X_OK):
    h.skip("a lone bin/agentbox fails naming where it looked",
           "an agentbox-full is installed in /usr/local/libexec/agentbox on this host (the last place looked)")
else:
    h.ne(rc, 0, "a lone bin/agentbox without libexec/agentbox fails", err)
    h.contains(err, os.path.join(os.path.dirname(lonely), "libexec", "agentbox", "agentbox-full"),
               "... naming where it looked for agentbox-full")
os.makedirs(os.path.join(os.path.dirname(lonely), "libexec", "agentbox"))
shutil.copy2(full, os.path.join(os.path.dirname(lonely), "libexec", "agentbox"))
rc, out, err = run([os.path.join(lonely, "agentbox"), "--data", os.path.join(h.root, "d2"), "ls"], timeout=30)
looked = os.path.join(os.path.dirname(lonely), "libexec", "agentbox", "agentbox-init")
if os.access("/usr/local/libexec/agentbox/agentbox-init", os.X_OK):
    h.skip("without agentbox-init the CLI fails naming where it looked",
           "an agentbox-init is installed in /usr/local/libexec/agentbox on this host (the last place looked)")
else:
    h.ne(rc, 0, "without agentbox-init the CLI fails", err)
    h.contains(err, looked, "... naming where it looked for agentbox-init")

# ---- the systemd unit -----------------------------------------------------------------------
analyze = shutil.which("systemd-analyze")
units = [("contrib/agentbox.service", os.path.join(REPO, "contrib", "agentbox.service"))]
unit = staged("agentbox.service")
h.ok(unit and os.path.isfile(unit), "the systemd unit is installed (%s)" % unit)
if unit:
    units.append(("the installed unit", unit))
for what, path in units:
    with open(path) as f:
        text = f.read()
    execs = [ln.split("=", 1)[1].split()[0] for ln in text.splitlines() if ln.startswith("ExecStart=")]
    h.eq(len(execs), 1, "%s has one ExecStart" % what)
    if what != "contrib/agentbox.service":
        h.eq(dest + execs[0], agentbox, "%s starts the installed agentbox" % what)
    if not analyze:
        h.skip("systemd-analyze verify %s" % what, "systemd-analyze is not installed (scripts/deps.sh installs systemd)")
        continue
    # verify checks that ExecStart exists: point it at the staged binary.
    udir = os.path.join(h.root, "unit-%d" % len(what))
    os.makedirs(udir)
    checked = os.path.join(udir, "agentbox.service")
    with open(checked, "w") as f:
        f.write(text.replace("ExecStart=" + execs[0], "ExecStart=" + agentbox))
    rc, out, err = run([analyze, "verify", checked], timeout=60)
    h.eq((rc, [ln for ln in (out + err).splitlines() if "agentbox.service" in ln]), (0, []),
         "systemd-analyze verify %s: no error, no warning" % what, out + err)
# Control: verify does catch a broken unit.
if analyze:
    bad = os.path.join(h.root, "bad", "agentbox.service")
    os.makedirs(os.path.dirname(bad))
    with open(bad, "w") as f:
        f.write("[Service]\nExecStart=%s serve\nKillMode=sometimes\n" % agentbox)
    rc, out, err = run([analyze, "verify", bad], timeout=60)
    h.ok(rc != 0 or "agentbox.service" in out + err, "control: systemd-analyze verify reports a bad unit",
         out + err)
h.done()
