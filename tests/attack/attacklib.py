"""Helpers shared by the attack tests (tests/attack/test_*.py).

Not a test itself (it is not listed in tests/meson.build). Every attack test
imports it first: it puts tests/lib on sys.path, so `abtest` imports too.

The rule of the suite: a test passes only when the attack fails, and it must
be able to fail. So the helpers here make it easy to
- plant a marker with random content on the HOST (and remove it afterwards),
- run a shell command or a whole Python script inside a box with a bound,
- run the same probe on the host, to show that it is not broken by itself.
"""

import base64
import hashlib
import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abtest  # noqa: E402,F401  (re-exported for the tests)

# The Python that the box runs is the host base's /usr/bin/python3; probes run
# on the host with the same interpreter, so that both sides behave alike.
HOST_PY = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def token(n=12):
    return secrets.token_hex(n)


def bexec(h, box, cmd, t=20, input=None, env=None, cwd=None):
    """Runs one bash command line in the box with an exec timeout of t seconds
    (and a harness timeout a bit longer). Returns abtest.Result."""
    args = ["exec", "--timeout", "%gs" % t]
    if cwd:
        args += ["-w", cwd]
    if input is not None:
        args.append("-i")
    args += [box, "--", cmd]
    return h.run(*args, timeout=t + 20, input=input, env=env)


def py_cmd(script, *args):
    """A bash command line that runs `script` with python3 (base64-wrapped, so
    no quoting problems), with the given arguments."""
    b64 = base64.b64encode(script.encode()).decode()
    return 'python3 -c "$(echo %s | base64 -d)"%s' % (b64, "".join(" " + shlex.quote(str(a)) for a in args))


def bpy(h, box, script, *args, t=20):
    """Runs a Python script inside the box. Returns abtest.Result."""
    return bexec(h, box, py_cmd(script, *args), t=t)


def hpy(script, *args, t=20):
    """Runs the same kind of script on the host (as root, outside any box).
    Returns (rc, out, err)."""
    try:
        p = subprocess.run([HOST_PY, "-c", script] + [str(a) for a in args], capture_output=True,
                           text=True, timeout=t)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        return -9, e.stdout or "", (e.stderr or "") + "\n[host probe timed out]"


def last_json(out):
    """The last line of out that parses as a JSON object, or {}."""
    for line in reversed((out or "").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return {}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def inspect(h, box):
    """`agentbox inspect` as a dict ({} when it fails)."""
    r = h.run("inspect", box, timeout=20)
    if r.rc != 0:
        return {}
    try:
        return json.loads(r.out)
    except ValueError:
        return {}


class Planted:
    """Files and directories planted on the host, removed by cleanup() (also
    registered with atexit by the tests through try/finally)."""

    def __init__(self):
        self.paths = []  # (path, is_dir_we_created)

    def file(self, path, content, mode=0o644):
        d = os.path.dirname(path)
        if not os.path.isdir(d):
            self.dir(d)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        try:
            os.write(fd, content.encode() if isinstance(content, str) else content)
        finally:
            os.close(fd)
        os.chmod(path, mode)
        self.paths.append((path, False))
        return path

    def dir(self, path, mode=0o755):
        parent = os.path.dirname(path)
        if parent and not os.path.isdir(parent):
            self.dir(parent, mode)
        os.mkdir(path, mode)
        self.paths.append((path, True))
        return path

    def cleanup(self):
        problems = []
        for path, is_dir in reversed(self.paths):
            try:
                if is_dir:
                    shutil.rmtree(path)
                elif os.path.lexists(path):
                    os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as e:
                problems.append("%s: %s" % (path, e))
        self.paths = []
        return problems


def sweep_stale(patterns, max_age=3600):
    """Removes host markers that a killed run of a test left behind (meson's
    timeout ends a test with SIGKILL, which skips its finally). Only paths
    older than max_age seconds: a concurrent run's markers are left alone."""
    import glob
    import time
    now = time.time()
    for pat in patterns:
        for p in glob.glob(pat):
            try:
                if now - os.lstat(p).st_mtime < max_age:
                    continue
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    os.unlink(p)
            except OSError:
                pass


# Every call of OpenSandbox's execd API, for tenancy attacks: (method, path
# under the execd route, body, content type or None). cid and sid are the
# victim's background command and session; a call that works leaves pwn (a
# file or folder) in the box.
def osb_execd_calls(cid, sid, pwn):
    mp = "multipart/form-data; boundary=XyZ"
    upload = ('--XyZ\r\nContent-Disposition: form-data; name="metadata"\r\n\r\n{"path":"%s"}\r\n'
              '--XyZ\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n\r\npwned\r\n--XyZ--\r\n'
              % pwn).encode()
    return [
        ("GET", "/ping", None, None),
        ("POST", "/command", {"command": "touch " + pwn}, None),
        ("POST", "/command", {"command": "touch " + pwn, "background": True}, None),
        ("DELETE", "/command?id=" + cid, None, None),
        ("GET", "/command/status/" + cid, None, None),
        ("GET", "/command/%s/logs" % cid, None, None),
        ("POST", "/session", {}, None),
        ("POST", "/session/%s/run" % sid, {"command": "touch " + pwn}, None),
        ("DELETE", "/session/" + sid, None, None),
        ("GET", "/files/info?path=/workspace/keep", None, None),
        ("GET", "/files/search?path=/workspace&pattern=*", None, None),
        ("GET", "/files/download?path=/etc/hostname", None, None),
        ("POST", "/files/permissions", {"/workspace/keep": {"mode": 777}}, None),
        ("POST", "/files/mv", [{"src": "/workspace/keep", "dest": pwn}], None),
        ("POST", "/files/replace", {"/etc/hostname": {"old": "a", "new": "b"}}, None),
        ("POST", "/files/upload", upload, mp),
        ("DELETE", "/files?path=/workspace/keep", None, None),
        ("POST", "/directories", {pwn: {"mode": 755}}, None),
        ("DELETE", "/directories?path=/workspace/keep", None, None),
        ("GET", "/directories/list?path=/workspace", None, None),
        ("GET", "/metrics", None, None),
        ("GET", "/metrics/watch", None, None),
    ]
