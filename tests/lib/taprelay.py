"""Relays the TAP lines of a script in another language (a node script
driving an SDK) as a Python test file's own checks: each "ok N - name" /
"not ok N - name" line (with its "# detail" lines) becomes one h.ok, each
"Bail out!" a failure; then one check that the script ran at least
min_checks checks and exited 0."""
import subprocess


def relay(h, argv, env, cwd, label="SDK", timeout=200, min_checks=1):
    """Runs argv (timeout seconds, times the harness's slowness) and relays
    its TAP lines as h's checks, each named "LABEL: name"."""
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
        if line.startswith("# ") and pending:
            pending[1].append(line[2:])
            continue
        if pending:
            h.ok(pending[0], pending[2], "\n".join(pending[1]) + ("\nnode stderr:\n" + err[-1500:] if not pending[0] else ""))
            pending = None
        if line.startswith("ok ") or line.startswith("not ok "):
            name = line.split(" - ", 1)[1] if " - " in line else line
            pending = (line.startswith("ok "), [], "%s: %s" % (label, name))
            n += 1
        elif line.startswith("Bail out!"):
            h.ok(False, "%s: %s" % (label, line), "node stderr:\n" + err[-3000:])
    h.ok(rc == 0 and n >= min_checks, "%s: %s ran %d checks and exited 0" % (label, argv[1] if len(argv) > 1 else argv[0], n),
         "exit %s\nstdout tail:\n%s\nstderr:\n%s" % (rc, out[-2000:], err[-3000:]))
    return n
