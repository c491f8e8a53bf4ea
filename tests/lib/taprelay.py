"""Relays the TAP lines of a script in another language (a node script
driving an SDK: tests/e2b, tests/opensandbox, tests/mcp, tests/console) as a
Python test file's own checks: each "ok N - name" / "not ok N - name" line
(with its "# detail" lines) becomes one h.ok ("ok N - name # SKIP why" one
h.skip), each "Bail out!" a failure, each "# timing:" line is printed; then
one check that the script ran at least min_checks checks and exited 0. Not a
test itself."""
import os
import shutil
import subprocess
import sys

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def relay(h, argv, env, cwd, label="SDK", timeout=200, min_checks=1, srv=None):
    """Runs argv (timeout seconds, times the harness's slowness) and relays
    its TAP lines as h's checks, each named "LABEL: name"; a failure's
    diagnostics carry the script's stderr, and srv's log when srv is given."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout * h.slow, env=env, cwd=cwd)
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
            good, diag, name = pending
            if " # SKIP " in name:
                name, reason = name.split(" # SKIP ", 1)
                h.skip("%s: %s" % (label, name), reason)
            else:
                h.ok(good, "%s: %s" % (label, name), "\n".join(diag) + ("\nnode stderr:\n" + err[-1500:] if not good else ""))
            pending = None
        if line.startswith("ok ") or line.startswith("not ok "):
            pending = (line.startswith("ok "), [], line.split(" - ", 1)[1] if " - " in line else line)
            n += 1
        elif line.startswith("Bail out!"):
            h.ok(False, "%s: %s" % (label, line), "node stderr:\n" + err[-3000:])
    script = os.path.basename(argv[1] if len(argv) > 1 else argv[0])
    h.ok(rc == 0 and n >= min_checks, "%s: %s ran %d checks and exited 0" % (label, script, n),
         "exit %s\nstdout tail:\n%s\nstderr:\n%s%s"
         % (rc, out[-2000:], err[-3000:], "\nserver log:\n" + srv.log()[-3000:] if srv else ""))
    return n


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


E2B_DIR = os.path.join(ROOT, "tests", "e2b")
# The E2B SDKs tests/e2b/package.json pins, driven side by side: 2.51.0 and
# 2.45.0 (an npm alias); a script picks one by E2B_SDK_MODULE.
E2B_SDKS = ("e2b", "e2b-2.45.0")


def need_e2b_sdks(h):
    """node and both E2B SDKs (installing them with scripts/npm-deps.sh
    when missing), or the file is skipped. Returns node's path."""
    node = shutil.which("node")
    if not node:
        h.skip_all("node is not installed (scripts/npm-deps.sh installs it)")

    def have():
        return all(os.path.isdir(os.path.join(E2B_DIR, "node_modules", s)) for s in E2B_SDKS)
    if not have():
        subprocess.run([os.path.join(ROOT, "scripts", "npm-deps.sh")], capture_output=True, timeout=300)
    if not have():
        h.skip_all("the e2b SDKs (2.51.0, 2.45.0) are not installed and scripts/npm-deps.sh could not "
                   "install them (offline?)")
    return node


def relay_e2b_sdks(h, node, script, srv, token, timeout=150, min_checks=1, **extra_env):
    """Runs tests/e2b/SCRIPT once with each of E2B_SDKS against srv (E2B's
    API and envd URLs on it, token as the API key, E2B's key form check off,
    extra_env added) and relays its TAP, labelled with the SDK."""
    for sdk in E2B_SDKS:
        env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
        env.update({"E2B_API_URL": srv.url + "/e2b", "E2B_SANDBOX_URL": srv.url + "/e2b/envd",
                    "E2B_API_KEY": token, "E2B_SDK_MODULE": sdk, "E2B_VALIDATE_API_KEY": "false"}, **extra_env)
        relay(h, [node, os.path.join(E2B_DIR, script)], env, E2B_DIR, label=sdk, timeout=timeout,
              min_checks=min_checks)
