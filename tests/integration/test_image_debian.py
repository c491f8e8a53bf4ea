#!/usr/bin/env python3
"""A real distribution as an image: a Debian bookworm root made with
mmdebstrap (minbase plus python3 and procps) from Debian's own mirror, wrapped
as a one-layer `docker save` archive, imported with `agentbox image import`
and run: bash, python3, dpkg and apt of the image (not the host's), its
/etc/os-release, a package database that the box changes in its own layer
only. The root is built once per machine and kept in
/var/cache/agentbox-tests (it takes minutes: the mirror, then dpkg)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abtest  # noqa: E402
import debianroot  # noqa: E402
import imagelib  # noqa: E402

h = abtest.Harness(timeout=120)
if not abtest.init_is_static():
    h.skip_all("agentbox-init is dynamically linked (sanitized build): it cannot start in an image's root")
try:
    ROOTFS = debianroot.rootfs()
except RuntimeError as e:
    h.skip_all(str(e))
if debianroot.rootfs.built_in is not None:
    h.diag("mmdebstrap built the root in %.0f s" % debianroot.rootfs.built_in)

with open(ROOTFS, "rb") as f:
    rootfs = f.read()
archive = os.path.join(h.root, "debian.tar")
imagelib.write_docker_save(archive, [{
    "layers": [rootfs],
    "config": imagelib.config(env=["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                   "LANG=C.UTF-8"], cmd=["bash"]),
    "tags": ["agentbox-test/debian:bookworm"]}])
h.ok(True, "a docker save archive of a Debian root (%d MiB)" % (len(rootfs) >> 20))

r = h.run("image", "import", archive, timeout=300)
h.eq(r.rc, 0, "agentbox image import of it", r.describe())
h.contains(r.out, "docker.io/agentbox-test/debian:bookworm", "... named by its RepoTags, canonicalised",
           r.describe())
box = h.create(None, "--image", "agentbox-test/debian:bookworm", "--disk", "256M", "--memory", "512M")


def sh(cmd):
    return h.run("exec", box, "--", cmd, timeout=60)


r = sh(". /etc/os-release; echo $ID $VERSION_CODENAME")
h.eq(r.out.strip(), "debian bookworm", "the box runs the image's Debian", r.describe())
r = sh("echo $BASH_VERSION; python3 -c 'import sys; print(sys.version_info[:2])'")
lines = r.out.strip().split("\n")
h.ok(len(lines) == 2 and lines[0].startswith("5.2") and lines[1] == "(3, 11)",
     "bash and python3 of the image run (bash 5.2, python 3.11)", r.describe())
r = sh("dpkg-query -W -f '${Package}\\n' | wc -l; command -v apt-get")
h.ok(r.rc == 0 and int((r.out.split() or ["0"])[0]) > 50 and "/usr/bin/apt-get" in r.out,
     "its package database and apt are there", r.describe())
r = sh("test -e /usr/bin/meson || test -e /usr/bin/gcc; echo $?")
h.eq(r.out.strip(), "1", "none of the host's own tools are in the box", r.describe())
r = sh("echo $LANG; cd /workspace && echo ok > f && cat f")
h.eq(r.out.split(), ["C.UTF-8", "ok"], "the image's env applies; /workspace is the box's", r.describe())
r = sh("dpkg --remove --force-depends python3-minimal >/dev/null 2>&1; command -v python3 || echo gone")
h.eq(r.out.strip(), "gone", "the box removes a package of the image", r.describe())
box2 = h.create(None, "--image", "agentbox-test/debian:bookworm", "--disk", "256M", "--memory", "512M")
r = h.run("exec", box2, "--", "command -v python3", timeout=60)
h.eq(r.out.strip(), "/usr/bin/python3", "... another box of the image still has it (the layer is shared, "
     "not changed)", r.describe())
h.eq(h.run("rm", box, box2).rc, 0, "rm both boxes")
r = h.run("image", "rm", "agentbox-test/debian:bookworm")
h.eq(r.rc, 0, "image rm", r.describe())
layers = os.path.join(h.data, "images", "layers")
h.eq(os.listdir(layers) if os.path.isdir(layers) else [], [], "... and GC removed its layer")
h.done()
