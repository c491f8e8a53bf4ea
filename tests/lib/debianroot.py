"""A Debian bookworm root (minbase plus python3 and procps) made once per
machine with mmdebstrap from Debian's mirror and kept in
/var/cache/agentbox-tests: the image_debian test imports it as an agentbox
image, the Docker-backend runs of the suites as a Docker image
(docker_image()). Building takes minutes (the mirror, then dpkg); a lock
makes concurrent tests wait for one build instead of starting several."""
import fcntl
import os
import subprocess
import time
import urllib.parse

CACHE = "/var/cache/agentbox-tests"
ROOTFS = os.path.join(CACHE, "debian-bookworm-py3.tar")
DOCKER_IMAGE = "agentbox-test/debian:bookworm"


def rootfs():
    """The tarball's path, built when missing. Raises RuntimeError with the
    reason when it cannot be built (no mmdebstrap, no mirror)."""
    if os.path.exists(ROOTFS):
        return ROOTFS
    os.makedirs(CACHE, exist_ok=True)
    with open(os.path.join(CACHE, ".debian.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(ROOTFS):
            return ROOTFS
        if subprocess.run(["sh", "-c", "command -v mmdebstrap"], capture_output=True).returncode != 0:
            raise RuntimeError("mmdebstrap is not installed (scripts/deps.sh installs it)")
        tmp = ROOTFS + ".new.%d" % os.getpid()
        t0 = time.time()
        r = subprocess.run(["mmdebstrap", "--quiet", "--format=tar", "--variant=minbase", "--include=python3,procps",
                            "bookworm", tmp], capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise RuntimeError("mmdebstrap could not build a Debian root (is Debian's mirror reachable?): %s"
                               % " ".join((r.stderr or "").split()[-30:]))
        os.rename(tmp, ROOTFS)
        rootfs.built_in = time.time() - t0
    return ROOTFS


rootfs.built_in = None


def _docker(host, method, path, body=None, ctype=None, timeout=600):
    """One Docker Engine API call on the unix socket of host (unix:///...);
    returns (status, bytes)."""
    import http.client
    import socket

    class Conn(http.client.HTTPConnection):
        def connect(self):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(host[len("unix://"):])

    c = Conn("docker", timeout=timeout)
    headers = {"Content-Type": ctype} if ctype else {}
    c.request(method, path, body=body, headers=headers)
    resp = c.getresponse()
    data = resp.read()
    c.close()
    return resp.status, data


def docker_image(host):
    """Makes sure the Docker engine at host has DOCKER_IMAGE (imported from
    the Debian root, with a PATH); returns its name. Raises RuntimeError."""
    st, _ = _docker(host, "GET", "/images/%s/json" % urllib.parse.quote(DOCKER_IMAGE, safe=""))
    if st == 200:
        return DOCKER_IMAGE
    path = rootfs()
    changes = urllib.parse.urlencode([
        ("fromSrc", "-"), ("repo", DOCKER_IMAGE.split(":")[0]), ("tag", DOCKER_IMAGE.split(":")[1]),
        ("changes", 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'),
        ("changes", "ENV LANG=C.UTF-8"), ("changes", 'CMD ["bash"]')])
    with open(path, "rb") as f:
        st, out = _docker(host, "POST", "/images/create?" + changes, body=f, ctype="application/x-tar")
    if st != 200 or b'"error"' in out:
        raise RuntimeError("docker import of %s failed (%d): %s" % (path, st, out[-300:]))
    return DOCKER_IMAGE


if __name__ == "__main__":
    import sys
    if len(sys.argv) > 1 and sys.argv[1] == "--docker":
        print(docker_image(sys.argv[2]))
    else:
        print(rootfs())
