"""Runs a node script that prints TAP (the SDK-driven tests under
tests/<front>/*.mjs) and relays each of its checks as a check of the Python
test that runs it (abtest's harness h), with the script's diagnostics, its
stderr and the server's log when a check fails. Not a test itself."""
import os
import shutil
import subprocess
import sys

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def find_node():
    """node's path; when there is none, the test is skipped (exit 77)."""
    node = shutil.which("node")
    if not node:
        print("1..0 # SKIP node is not installed (scripts/npm-deps.sh installs it)")
        sys.exit(77)
    return node


def ensure_sdk(h, sdk, what):
    """Checks that the SDK folder sdk is there, running scripts/npm-deps.sh
    once when it is not; True when it is."""
    if not os.path.isdir(sdk):
        subprocess.run([os.path.join(ROOT, "scripts", "npm-deps.sh")], capture_output=True, timeout=300)
    h.ok(os.path.isdir(sdk), "%s is installed (scripts/npm-deps.sh)" % what)
    return os.path.isdir(sdk)


def run(h, node, script, args, cwd, env, timeout, label, srv=None):
    """Runs `node script args...` in cwd; each `ok`/`not ok` line becomes
    one h.ok named label + its name; `# timing:` lines are printed. Ends with
    a check that the script ran some checks and exited 0."""
    try:
        p = subprocess.run([node, script] + list(args), capture_output=True, text=True, timeout=timeout,
                           env=env, cwd=cwd)
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
        rc = "timeout"
    n = 0
    pending = None
    for line in out.splitlines() + [""]:
        if line.startswith("# timing:"):
            print(line)
            continue
        if line.startswith("# ") and pending:
            pending[1].append(line[2:])
            continue
        if pending:
            h.ok(pending[0], pending[2], "\n".join(pending[1]) + ("\nnode stderr:\n" + err[-1500:] if not pending[0] else ""))
            pending = None
        if line.startswith("ok ") or line.startswith("not ok "):
            name = line.split(" - ", 1)[1] if " - " in line else line
            pending = (line.startswith("ok "), [], label + name)
            n += 1
        elif line.startswith("Bail out!"):
            h.ok(False, label + line, "node stderr:\n" + err[-3000:])
    h.ok(rc == 0 and n > 0, "%s%s ran %d checks and exited 0" % (label, script.rsplit("/", 1)[-1], n),
         "exit %s\nstdout tail:\n%s\nstderr:\n%s\nserver log:\n%s"
         % (rc, out[-1500:], err[-3000:], srv.log()[-3000:] if srv else ""))
    return n
