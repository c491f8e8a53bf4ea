"""abtest - a small TAP harness for agentbox end-to-end and attack tests.

Python 3 standard library only. A test file drives the real `agentbox` CLI
(the binary in $AGENTBOX_BIN, set by meson) against a fresh data directory of
its own and prints TAP, which meson reads (protocol 'tap'):

    import os, sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
    import abtest

    h = abtest.Harness()                  # not root: "1..0 # SKIP why", exit 0
    box = h.create()                      # a box with a fresh id, removed at the end
    rc, out, err = h.exec(box, "echo hi > /workspace/f; cat /workspace/f")
    h.eq(rc, 0, "exec exits 0")
    h.contains(out, "hi", "exec sees its own file")
    h.done()                              # cleanup, "1..N", exit 0 or 1

Guarantees:
- One data dir per test file, /var/tmp/abtest-NAME-XXXX/data. At the end
  every box the harness knows of is removed with `agentbox rm`, leftover
  mounts under the dir are detached and the dir is deleted; that happens
  on done(), on an uncaught exception, on SIGTERM/SIGINT and at exit.
  Cleanup problems (rm failed, mounts left behind) are reported as failed
  tests: they are real leaks.
- A file killed outright (meson's timeout ends with SIGKILL) leaves its dir
  behind with a record of its boxes; the next Harness, or
  `python3 abtest.py --sweep` (run by scripts/test.sh), removes it.
- Every CLI call has a timeout (default 60 s); on expiry the call's process
  group is killed and the Result has timed_out=True and rc=-9.
- An uncaught exception becomes a failed test with its traceback.

Environment: AGENTBOX_BIN (the CLI; default <repo>/build/agentbox),
ABTEST_KEEP=1 keeps the data dir (for debugging; boxes are still removed
unless ABTEST_KEEP=boxes), ABTEST_VERBOSE=1 prints every command as a TAP
comment.
"""

import atexit
import ctypes
import fcntl
import glob
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import traceback

TMP_ROOT = "/var/tmp"
DIR_PREFIX = "abtest-"
DEFAULT_TIMEOUT = 60.0
# The backend the suite's boxes run on: "native", or "docker" for the runs of
# the backend-neutral suites on a Docker engine (tests/meson.build, suite
# "docker"): the harness then points the CLI and every server it starts at
# AGENTBOX_TEST_DOCKER_HOST (scripts/dockerd.sh) with a Debian image; or
# "kubernetes": the harness starts the stand-in cluster (tests/k8s/cluster.py,
# pods on that same engine) and points the servers at it (AGENTBOX_KUBERNETES).
BACKEND = os.environ.get("AGENTBOX_TEST_BACKEND", "native")
CLEANUP_TIMEOUT = 30.0
DIAG_MAX = 4000
ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")

# Variables that would point the CLI at a developer's real server or data.
_SCRUBBED_ENV = ("AGENTBOX_DATA", "AGENTBOX_TOKEN", "AGENTBOX_LISTEN")


class Result(tuple):
    """(rc, stdout, stderr) of one CLI call; also .rc .out .err .timed_out .argv."""

    def __new__(cls, rc, out, err, timed_out=False, argv=()):
        self = tuple.__new__(cls, (rc, out, err))
        self.timed_out = timed_out
        self.argv = tuple(argv)
        return self

    rc = property(lambda self: self[0])
    out = property(lambda self: self[1])
    err = property(lambda self: self[2])

    def describe(self):
        cmd = " ".join(_quote(a) for a in self.argv)
        what = "timed out" if self.timed_out else "exited %s" % self.rc
        return "`%s` %s\nstdout: %s\nstderr: %s" % (cmd, what, _clip(self.out), _clip(self.err))


class CommandFailed(AssertionError):
    """A helper's precondition failed (e.g. create); carries the Result."""

    def __init__(self, result):
        super().__init__(result.describe())
        self.result = result


class _Killed(BaseException):
    pass


def _quote(s):
    s = str(s)
    if s and re.fullmatch(r"[A-Za-z0-9_@%+=:,./-]+", s):
        return s
    return "'" + s.replace("'", "'\\''") + "'"


def _clip(s, n=DIAG_MAX):
    if isinstance(s, bytes):
        s = s.decode("utf-8", "replace")
    s = str(s)
    return s if len(s) <= n else s[:n] + "... [%d more chars]" % (len(s) - n)


def _caller():
    """' (at FILE line N)' of the innermost frame outside this module."""
    for fr in reversed(traceback.extract_stack()):
        if os.path.abspath(fr.filename) != os.path.abspath(__file__):
            return " (at %s line %d)" % (os.path.basename(fr.filename), fr.lineno)
    return ""


def _repo_root():
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def default_bin():
    return os.environ.get("AGENTBOX_BIN") or os.path.join(_repo_root(), "build", "agentbox")


_libc = None


def _prctl_pdeathsig():
    # Runs in the child between fork and exec: own process group (so a
    # timeout kills the whole call), and die with the harness.
    os.setpgid(0, 0)
    if _libc is not None:
        _libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


def _run(argv, timeout, input=None, env=None, text=True):
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            _libc = False
    if isinstance(input, str):
        input = input.encode()
    try:
        p = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            preexec_fn=_prctl_pdeathsig,
        )
    except OSError as e:
        msg = "abtest: cannot run %s: %s" % (argv[0], e)
        return Result(127, "" if text else b"", msg if text else msg.encode(), False, argv)
    timed_out = False
    try:
        out, err = p.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _killpg(p.pid)
        try:
            # A process that escaped the group may still hold the pipes.
            out, err = p.communicate(timeout=5)
        except subprocess.TimeoutExpired as e:
            out, err = e.output or b"", e.stderr or b""
            for f in (p.stdout, p.stderr):
                f.close()
        p.wait()
        err = (err or b"") + (b"\n[abtest: killed after %gs timeout]" % timeout)
    except BaseException:
        _killpg(p.pid)
        p.wait()
        raise
    rc = -9 if timed_out else p.returncode
    if text:
        out = out.decode("utf-8", "replace")
        err = err.decode("utf-8", "replace")
    return Result(rc, out, err, timed_out, argv)


def _killpg(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


class RealCluster:
    """A real cluster for the kubernetes runs (AGENTBOX_TEST_KUBECONFIG), in
    place of the stand-in: .api (tests/k8s/kclient.py), .namespace,
    .kubeconfig; .real is True, so suites that need the stand-in's own
    controls (killing containers, restarting the API server, reaching pod
    IPs from the test host) skip. A YAML kubeconfig is turned into JSON for
    kclient by `kubectl config view --raw --flatten -o json`."""
    real = True

    def __init__(self, kubeconfig, namespace=None):
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path.insert(0, os.path.join(os.path.dirname(here), "k8s"))
        import kclient
        self.kubeconfig = kubeconfig
        path = kubeconfig
        try:
            with open(kubeconfig) as f:
                json.load(f)
        except ValueError:
            out = subprocess.run(["kubectl", "config", "view", "--raw", "--flatten", "-o", "json"],
                                 env=dict(os.environ, KUBECONFIG=kubeconfig), check=True,
                                 capture_output=True, timeout=60).stdout
            fd, path = tempfile.mkstemp(prefix="kubeconfig-", suffix=".json", dir=TMP_ROOT)
            with os.fdopen(fd, "wb") as f:
                f.write(out)
        self.api = kclient.Client(path)
        self.namespace = namespace or self.api.namespace

    def stop(self):
        pass


def kubernetes_init_image(host):
    """The init carrier image of this build's agentbox-init on the Docker
    engine at host (scripts/k8s-images.sh --init-only, made when missing or
    older than the binary); returns its name."""
    init = os.environ.get("AGENTBOX_INIT", "")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    tag = "test-%d" % int(os.stat(init).st_mtime)
    name = "agentbox/init:%s" % tag
    import debianroot
    import urllib.parse
    st, _ = debianroot._docker(host, "GET", "/images/%s/json" % urllib.parse.quote(name, safe=""))
    if st == 200:
        return name
    out = tempfile.mkdtemp(prefix="k8s-images-", dir=TMP_ROOT)
    try:
        subprocess.run([os.path.join(root, "scripts", "k8s-images.sh"), "--init-only", "--tag", tag,
                        "--build", os.path.dirname(init), "--out", out],
                       env=dict(os.environ, DOCKER_HOST=host), check=True, timeout=120,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return name


def init_is_static(path=None):
    """True when agentbox-init (AGENTBOX_INIT, or path) is a static binary.
    A sanitized build links it dynamically: it then starts only in boxes whose
    root has the host's libraries (the host base), not in boxes of an image."""
    path = path or os.environ.get("AGENTBOX_INIT", "")
    try:
        with open(path, "rb") as f:
            hdr = f.read(64)
            if hdr[:4] != b"\x7fELF" or hdr[4] != 2:
                return False
            phoff = int.from_bytes(hdr[32:40], "little")
            phentsize = int.from_bytes(hdr[54:56], "little")
            phnum = int.from_bytes(hdr[56:58], "little")
            f.seek(phoff)
            ph = f.read(phentsize * phnum)
    except OSError:
        return False
    for i in range(phnum):
        if int.from_bytes(ph[i * phentsize:i * phentsize + 4], "little") == 3:  # PT_INTERP
            return False
    return True


def _unescape_mountinfo(s):
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)


def mounts_under(path):
    """Mount points at or below path in our mount namespace, deepest first."""
    path = os.path.realpath(path)
    found = []
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                mp = _unescape_mountinfo(line.split()[4])
                if mp == path or mp.startswith(path + "/"):
                    found.append(mp)
    except OSError:
        pass
    return sorted(set(found), key=lambda m: (-m.count("/"), m))


def _detach(mp):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(mp.encode(), 2) != 0:  # MNT_DETACH
        return os.strerror(ctypes.get_errno())
    return None


def cgroups_of(pid):
    """The cgroup directories process pid is in (each v1 controller, v2), roots excepted."""
    dirs = set()
    try:
        with open("/proc/%d/cgroup" % pid) as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                if path in ("", "/"):
                    continue
                names = [c.replace("name=", "") for c in ctrls.split(",")] if ctrls else ["unified", ""]
                for c in names:
                    d = os.path.normpath("/sys/fs/cgroup/%s/%s" % (c, path))
                    if os.path.isdir(d):
                        dirs.add(d)
    except (OSError, ValueError, TypeError):
        pass
    return sorted(dirs)


_exclusive = []


def host_exclusive(name):
    """Waits until no other test process holds NAME on this host, then holds
    it until this process exits (an flock on /run/lock). For a test that
    must not run beside another run of itself: scripts/test.sh runs a test
    file in both of its lanes (./build and the ASan run), and meson's
    is_parallel: false only keeps a run's own tests apart."""
    os.makedirs("/run/lock", exist_ok=True)
    fd = os.open("/run/lock/agentbox-test-%s.lock" % name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    _exclusive.append(fd)


def cgroup_parent(data_dir):
    """The cgroup parent the native backend uses for boxes of data_dir
    (agentbox-%08x of an FNV-1a hash of its realpath, see backend/native.c)."""
    h = 1469598103934665603
    for c in os.path.realpath(data_dir).encode():
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return "agentbox-%08x" % ((h ^ (h >> 32)) & 0xFFFFFFFF)


def cgroup_dirs(box, known=(), data=None):
    """Cgroup dirs of box that exist: those it was seen in, plus PARENT/ID in
    every hierarchy, PARENT being data's (cgroup_parent) or, without data,
    any agentbox* (then a box of the same id in another data folder, such as
    the same test's run in the other lane of scripts/test.sh, counts too)."""
    parent = cgroup_parent(data) if data else "agentbox*"
    found = set(d for d in known if os.path.isdir(d))
    found.update(glob.glob("/sys/fs/cgroup/*/%s/%s" % (parent, box)))
    found.update(glob.glob("/sys/fs/cgroup/%s/%s" % (parent, box)))
    return sorted(found)


def _cleanup_dir(root, binary, boxes, keep_dir=False, keep_boxes=False):
    """Remove the boxes (confirmed ones must go cleanly), leftover mounts and root.
    Returns a list of problems."""
    problems = []
    data = os.path.join(root, "data")
    if not keep_boxes:
        for box, confirmed in reversed(list(boxes.items())):
            r = _run([binary, "--data", data, "rm", box], CLEANUP_TIMEOUT)
            if r.rc != 0 and confirmed:
                problems.append("agentbox rm %s at cleanup: %s" % (box, r.describe()))
    if keep_dir or keep_boxes:
        return problems
    # A data folder's skills disk (DATA/skills.img at DATA/skills) stays
    # mounted on the host by design: detach it, it is no leak.
    left = []
    for mp in mounts_under(root):
        if os.path.basename(mp) == "skills" and \
                os.path.isfile(os.path.join(os.path.dirname(mp), "skills.img")):
            while _detach(mp) is None and mp in mounts_under(mp):
                pass
        else:
            left.append(mp)
    if left:
        problems.append("mounts left under %s after every box was removed: %s" % (root, ", ".join(left)))
        for mp in left:
            why = _detach(mp)
            if why:
                problems.append("umount -l %s: %s" % (mp, why))
    r = _run(["rm", "-rf", "--one-file-system", "--", root], CLEANUP_TIMEOUT)
    if r.rc != 0 or os.path.exists(root):
        problems.append("removing %s: %s" % (root, r.describe()))
    return problems


def sweep(binary=None, verbose=False):
    """Remove the data dirs of harnesses that died without cleaning up.
    A live harness holds an flock on its harness.lock, so a lock we can take
    belongs to a dead one. Returns the number of dirs swept."""
    binary = binary or default_bin()
    n = 0
    for d in sorted(glob.glob(os.path.join(TMP_ROOT, DIR_PREFIX + "*"))):
        try:
            st = os.lstat(d)
        except OSError:
            continue
        if not os.path.isdir(d) or os.path.islink(d) or st.st_uid != os.geteuid():
            continue
        state = os.path.join(d, "harness.json")
        if not os.path.exists(state):
            continue  # not yet locked by its owner, or not ours
        try:
            lockfd = os.open(os.path.join(d, "harness.lock"), os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(lockfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its harness is alive
            try:
                with open(state, encoding="utf-8") as f:
                    info = json.load(f)
            except (OSError, ValueError):
                info = {}
            b = binary if os.access(binary, os.X_OK) else info.get("bin", binary)
            problems = _cleanup_dir(d, b, dict(info.get("boxes", {})))
            n += 1
            if verbose:
                print("abtest: swept %s%s" % (d, (": " + "; ".join(problems)) if problems else ""))
        finally:
            os.close(lockfd)
    return n


class Harness:
    """One per test file. See the module docstring."""

    def __init__(self, need_root=True, timeout=DEFAULT_TIMEOUT, name=None):
        self.n = 0
        self.failed = 0
        self.timeout = timeout
        self.name = name or os.path.splitext(os.path.basename(sys.argv[0] or "test"))[0]
        self.bin = default_bin()
        self.root = self.data = None
        self._boxes = {}  # id -> confirmed (created successfully)
        self._finished = False
        self._done_called = False
        self._lockfd = None
        self._seq = 0
        self._verbose = os.environ.get("ABTEST_VERBOSE", "") not in ("", "0")
        keep = os.environ.get("ABTEST_KEEP", "")
        self._keep_dir = keep not in ("", "0")
        self._keep_boxes = keep == "boxes"

        sys.excepthook = self._excepthook
        atexit.register(self._atexit)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

        if need_root and os.geteuid() != 0:
            self.skip_all("needs root (boxes need namespaces, mounts and cgroups)")
        if not os.access(self.bin, os.X_OK):
            self.bail_out("AGENTBOX_BIN %s is not an executable (build first, or run via meson test)" % self.bin)

        self.backend = BACKEND
        self.native = BACKEND == "native"
        if BACKEND == "docker":
            self._use_docker()
        if BACKEND == "kubernetes":
            self._use_kubernetes()
        sweep(self.bin)
        self.root = tempfile.mkdtemp(prefix="%s%s-" % (DIR_PREFIX, re.sub(r"[^A-Za-z0-9_-]", "_", self.name)),
                                     dir=TMP_ROOT)
        self._lockfd = os.open(os.path.join(self.root, "harness.lock"),
                               os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._lockfd, fcntl.LOCK_EX)
        self.data = os.path.join(self.root, "data")
        os.mkdir(self.data, 0o700)
        self._save()

    def _use_docker(self):
        host = os.environ.get("AGENTBOX_TEST_DOCKER_HOST", "")
        if not host:
            self.skip_all("AGENTBOX_TEST_BACKEND=docker without AGENTBOX_TEST_DOCKER_HOST: "
                          "scripts/dockerd.sh starts a Docker engine for the tests")
        if not init_is_static():
            self.skip_all("agentbox-init is dynamically linked (sanitized build): it cannot be PID 1 "
                          "of a container's root")
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import debianroot
        try:
            image = debianroot.docker_image(host)
        except (RuntimeError, OSError) as e:
            self.skip_all("no Debian image for the Docker engine at %s: %s" % (host, e))
        os.environ.update({"AGENTBOX_BACKEND": "docker", "AGENTBOX_DOCKER_HOST": host,
                           "AGENTBOX_DOCKER_IMAGE": image})

    def _use_kubernetes(self):
        """The stand-in cluster, one per test process, its pods on the private
        Docker engine; the init carrier image built from this build's init.
        With AGENTBOX_TEST_KUBECONFIG, that real cluster instead."""
        if os.environ.get("AGENTBOX_TEST_KUBECONFIG"):
            return self._use_real_cluster(os.environ["AGENTBOX_TEST_KUBECONFIG"])
        if not init_is_static():
            self.skip_all("agentbox-init is dynamically linked (sanitized build): it cannot run in a "
                          "pod's image")
        here = os.path.dirname(os.path.abspath(__file__))
        k8s = os.path.join(os.path.dirname(here), "k8s")
        if not os.path.exists(os.path.join(k8s, "cluster.py")):
            self.skip_all("no stand-in cluster (tests/k8s/cluster.py)")
        sys.path.insert(0, k8s)
        sys.path.insert(0, here)
        import cluster
        import debianroot
        why = cluster.available()
        if why:
            self.skip_all("no stand-in cluster: %s" % why)
        host = cluster.docker_host()
        try:
            image = debianroot.docker_image(host)
            init_image = kubernetes_init_image(host)
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            self.skip_all("no images for the stand-in cluster: %s" % e)
        self.cluster = cluster.Cluster()
        self.cluster.start()
        settings = {"kubeconfig": self.cluster.kubeconfig, "image": image, "init_image": init_image,
                    "image_pull_policy": "Never", "ready_timeout": "60s", "workspace_size": "1G"}
        os.environ.update({"AGENTBOX_BACKEND": "kubernetes",
                           "AGENTBOX_KUBERNETES": json.dumps(settings)})

    def _use_real_cluster(self, kubeconfig):
        """A real cluster (docs/testing.md): its kubeconfig, the namespace of
        AGENTBOX_TEST_K8S_NAMESPACE (else the context's), the images of
        AGENTBOX_TEST_K8S_INIT_IMAGE and AGENTBOX_TEST_K8S_BOX_IMAGE, which
        its nodes must be able to pull (scripts/k8s-images.sh builds the init
        carrier; push it to a registry the cluster reads)."""
        init_image = os.environ.get("AGENTBOX_TEST_K8S_INIT_IMAGE", "")
        image = os.environ.get("AGENTBOX_TEST_K8S_BOX_IMAGE", "")
        if not init_image or not image:
            self.skip_all("AGENTBOX_TEST_KUBECONFIG needs AGENTBOX_TEST_K8S_INIT_IMAGE and "
                          "AGENTBOX_TEST_K8S_BOX_IMAGE (images the cluster can pull)")
        self.cluster = RealCluster(kubeconfig, os.environ.get("AGENTBOX_TEST_K8S_NAMESPACE") or None)
        settings = {"kubeconfig": os.path.abspath(kubeconfig), "namespace": self.cluster.namespace,
                    "image": image, "init_image": init_image, "ready_timeout": "300s",
                    "workspace_size": "1G"}
        os.environ.update({"AGENTBOX_BACKEND": "kubernetes",
                           "AGENTBOX_KUBERNETES": json.dumps(settings)})

    def k8s_objects(self, box=None, label=None):
        """Names ("kind/name") of the stand-in cluster's objects agentbox made
        (of box, when given): pods, secrets, claims and policies; with label,
        "kind/VALUE" of that label instead of the name."""
        sel = "app.kubernetes.io/managed-by=agentbox"
        if box:
            sel += ",agentbox.dev/box=%s" % box
        out = []
        import urllib.parse
        for kind, base in (("pods", "/api/v1"), ("secrets", "/api/v1"),
                           ("persistentvolumeclaims", "/api/v1"),
                           ("networkpolicies", "/apis/networking.k8s.io/v1")):
            lst = self.cluster.api.must("GET", "%s/namespaces/%s/%s?labelSelector=%s" % (
                base, self.cluster.namespace, kind, urllib.parse.quote(sel)))
            out += ["%s/%s" % (kind, (i["metadata"].get("labels") or {}).get(label, "") if label
                               else i["metadata"]["name"]) for i in lst.get("items", [])]
        return sorted(out)

    def box_dirs(self, data=None):
        """Names of the boxes the backend keeps folders for in data (default:
        the harness's): DATA/boxes on native, DATA/docker on Docker runs; on
        Kubernetes runs (no folders: the cluster holds them) the boxes that
        have a claim in the test's cluster."""
        if BACKEND == "kubernetes":
            return sorted({n.split("/", 1)[1] for n in self.k8s_objects(label="agentbox.dev/box")
                           if n.startswith("persistentvolumeclaims/")})
        d = os.path.join(data or self.data, "boxes" if self.native else "docker")
        return sorted(n for n in os.listdir(d) if not n.startswith(".")) if os.path.isdir(d) else []

    def leftovers(self, box, data=None):
        """What of box is still on the host (its folder; on Docker runs its
        container too): [] once it is wholly gone."""
        left = [n for n in self.box_dirs(data) if n == box]
        if BACKEND == "docker":
            left += self.containers(box, data) or []
        if BACKEND == "kubernetes":
            left += self.k8s_objects(box)
        return left

    def containers(self, box, data=None):
        """Names of the Docker engine's containers (any state) labelled for box
        of data (default: the harness's data folder), or None when this is no
        Docker run or the engine did not answer."""
        host = os.environ.get("AGENTBOX_DOCKER_HOST", "")
        if BACKEND != "docker" or not host:
            return None
        import debianroot
        import urllib.parse
        f = json.dumps({"label": ["agentbox.box=%s" % box,
                                  "agentbox.data_dir=%s" % os.path.realpath(data or self.data)]})
        try:
            st, out = debianroot._docker(host, "GET", "/containers/json?all=1&filters=" + urllib.parse.quote(f),
                                         timeout=30)
        except OSError:
            return None
        if st != 200:
            return None
        return sorted(n.lstrip("/") for c in json.loads(out) for n in c.get("Names") or [])

    # ---- TAP output -------------------------------------------------------

    def _print(self, s):
        sys.stdout.write(s + "\n")
        sys.stdout.flush()

    def diag(self, msg):
        """A TAP comment, every line prefixed with '# ', on stderr: meson's
        --print-errorlogs shows a failed test's stderr, not its TAP stream."""
        text = "".join("# %s\n" % line for line in _clip(msg).splitlines() or [""])
        sys.stdout.flush()
        sys.stderr.write(text)
        sys.stderr.flush()

    def _line(self, good, name, directive=""):
        self.n += 1
        name = " ".join(str(name).split()).replace("#", "\\#")
        self._print("%s %d - %s%s" % ("ok" if good else "not ok", self.n, name, directive))
        return name

    def ok(self, cond, name, diag=None):
        """Records one test; returns bool(cond). diag (str or callable) is printed on failure."""
        good = bool(cond)
        name = self._line(good, name)
        if not good:
            self.failed += 1
            if callable(diag):
                diag = diag()
            self.diag("Failed test %d - %s%s%s" % (self.n, name, _caller(), ("\n" + str(diag)) if diag else ""))
        return good

    def eq(self, got, want, name, diag=None):
        return self.ok(got == want, name,
                       lambda: "got:  %r\nwant: %r%s" % (got, want, ("\n" + diag) if diag else ""))

    def ne(self, got, unwanted, name, diag=None):
        return self.ok(got != unwanted, name,
                       lambda: "got %r, which it must not be%s" % (got, ("\n" + diag) if diag else ""))

    def contains(self, haystack, needle, name, diag=None):
        return self.ok(haystack is not None and needle in haystack, name,
                       lambda: "missing: %r\nin:      %s%s" % (needle, _clip(repr(haystack)),
                                                               ("\n" + diag) if diag else ""))

    def not_contains(self, haystack, needle, name, diag=None):
        return self.ok(haystack is not None and needle not in haystack, name,
                       lambda: "unwanted: %r\nin:       %s%s" % (needle, _clip(repr(haystack)),
                                                                ("\n" + diag) if diag else ""))

    def skip(self, name, reason):
        """One skipped test."""
        self._line(True, name, " # SKIP " + " ".join(str(reason).split()))

    def skip_all(self, reason):
        """Skips the whole file (before any test ran): '1..0 # SKIP why', exit 0
        (meson's TAP protocol reads the plan; it would call exit 77 an ERROR)."""
        reason = " ".join(str(reason).split())
        if self.n:
            self.diag("skip_all after %d tests: %s" % (self.n, reason))
            self.done()
        self._finished = True
        self._cleanup()
        self._print("1..0 # SKIP " + reason)
        self._exit(0)

    def bail_out(self, reason):
        """Stops the file as broken: 'Bail out!', exit 1."""
        self._finished = True
        self._cleanup()
        self._print("Bail out! " + " ".join(str(reason).split()))
        self._exit(1)

    def done(self):
        """Cleans up, prints the plan and exits (1 if anything failed)."""
        self._done_called = True
        self._finish()
        self._exit(1 if self.failed else 0)

    # ---- the CLI ------------------------------------------------------------

    def run(self, *args, timeout=None, input=None, env=None, data=True, text=True):
        """Runs `agentbox [--data DIR] ARGS...`; returns Result (rc, out, err).
        env: extra variables over the harness's environment. Boxes made or
        removed through run("create"/"rm", ...) are tracked for cleanup too."""
        argv = [self.bin] + (["--data", self.data] if data else []) + [str(a) for a in args]
        e = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
        if env:
            e.update(env)
        if self._verbose:
            self.diag("$ " + " ".join(_quote(a) for a in argv))
        r = _run(argv, self.timeout if timeout is None else timeout, input, e, text)
        if r.timed_out:
            self.diag("abtest: %s" % r.describe())
        if data and r.rc == 0 and args:
            self._note(args)
        return r

    def _note(self, args):
        verb, rest = str(args[0]), [str(a) for a in args[1:]]
        if verb == "create":
            for i, a in enumerate(rest):
                if a == "--id" and i + 1 < len(rest):
                    self.track(rest[i + 1])
                elif a.startswith("--id="):
                    self.track(a[5:])
        elif verb == "rm":
            for a in rest:
                self._boxes.pop(a, None)
            self._save()

    def ls_status(self, box):
        """Status of box per `ls --json`; None when it is not listed."""
        r = self.run("ls", "--json")
        try:
            for b in json.loads(r.out):
                if b.get("id") == box:
                    return b.get("status")
        except ValueError:
            return "unparsable ls --json: " + r.describe()
        return None

    def create(self, id=None, *args, check=True, timeout=None):
        """Creates a box (id: given, or a fresh one chosen here); returns its id.
        Raises CommandFailed if it fails and check is true, else returns None."""
        if id is None:
            self._seq += 1
            id = "t%d-%s" % (self._seq, secrets.token_hex(3))
        self._boxes.setdefault(id, False)  # rm it at the end even if create half-failed
        self._save()
        r = self.run("create", "--id", id, *args, timeout=timeout)
        if r.rc == 0:
            return id
        if check:
            raise CommandFailed(r)
        return None

    def exec(self, id, cmd, timeout=None, input=None, env=None, text=True):
        """Runs `agentbox exec ID -- bash -c CMD`; returns Result (rc, out, err)."""
        return self.run("exec", id, "--", "bash", "-c", cmd, timeout=timeout, input=input, env=env, text=text)

    def rm(self, id, timeout=None):
        """Runs `agentbox rm ID`; returns Result. The box is no longer cleaned up once removed."""
        return self.run("rm", id, timeout=timeout)

    def track(self, id):
        """Have the harness remove a box made by other means at the end."""
        self._boxes[id] = True
        self._save()

    # ---- life cycle -----------------------------------------------------------

    def _save(self):
        if not self.root:
            return
        path = os.path.join(self.root, "harness.json")
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"pid": os.getpid(), "bin": self.bin, "script": sys.argv[0],
                       "boxes": self._boxes}, f)
        os.replace(tmp, path)

    def _cleanup(self):
        if not self.root:
            return []
        root, self.root = self.root, None
        problems = _cleanup_dir(root, self.bin, self._boxes, self._keep_dir, self._keep_boxes)
        # the stand-in cluster goes after the boxes (their rm needs it): an
        # exit through os._exit would skip its own atexit stop
        cl = getattr(self, "cluster", None)
        if cl is not None:
            self.cluster = None
            try:
                cl.stop()
            except Exception as e:  # noqa: BLE001 (cleanup goes on)
                problems.append("stopping the stand-in cluster: %s" % e)
        if self._keep_dir:
            self.diag("abtest: kept %s (ABTEST_KEEP)" % root)
        if self._lockfd is not None:
            os.close(self._lockfd)
            self._lockfd = None
        return problems

    def _finish(self):
        if self._finished:
            return
        self._finished = True
        if self.n == 0:
            self.ok(False, "the file ran at least one test")
        for p in self._cleanup():
            self.ok(False, "cleanup", p)
        self._print("1..%d" % self.n)

    def _exit(self, code):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def _excepthook(self, etype, value, tb):
        text = "".join(traceback.format_exception(etype, value, tb))
        if self._finished:
            sys.stderr.write(text)
        else:
            if issubclass(etype, _Killed):
                self.ok(False, str(value))
            else:
                self.ok(False, "uncaught %s: %s" % (etype.__name__, str(value).splitlines()[0] if str(value) else ""),
                        text)
            self._finish()
        self._exit(1)

    def _on_signal(self, signum, frame):
        # Ignore repeats so that cleanup runs to its end if it has time.
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        raise _Killed("killed by %s (a meson timeout?)" % signal.Signals(signum).name)

    def _atexit(self):
        if self._finished:
            return
        # The script ended (or called sys.exit) without done().
        self._finish()
        if self.failed:
            self._exit(1)


def _main(argv):
    if len(argv) >= 2 and argv[1] == "--sweep":
        n = sweep(argv[2] if len(argv) > 2 else None, verbose=True)
        if n:
            print("abtest: swept %d stale test data dir%s" % (n, "" if n == 1 else "s"))
        return 0
    sys.stderr.write("usage: abtest.py --sweep [AGENTBOX_BIN]   (the module is imported by tests)\n")
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
