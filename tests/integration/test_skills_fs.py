#!/usr/bin/env python3
"""The skills folder on a file system of its own (native/skillsfs.h), against
the real `agentbox serve`: DATA/skills is one mount of DATA/skills.img on the
host (never two, also after restarts, a kill -9 and CLI calls on the same
data folder); skills installed before a restart are there after it; a running
box sees a live install and a replace at once, and its mount table shows the
root of the skills file system, not a host path; the staging area is hidden
from boxes; a full skills disk answers 507 and the installed version stays; a
plain DATA/skills of an older data folder is moved into a new image, with
modes and contents; the states a crash during that move leaves (and a real
kill -9 in the middle of moving 100 skills) are finished at the next start
with no skill lost; an image left unmounted (a host reboot) is mounted again."""
import ctypes
import hashlib
import io
import os
import sys
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=240)
TOKEN = "admin-token-skillsfs-%d-0123456789" % os.getpid()
ZIP_HDR = {"Content-Type": "application/zip"}
CFG = {"limits": {"disk": "64M", "memory": "256M", "timeout": "30s"}, "skills_disk": "32M",
       "max_upload": 64 * 1024 * 1024}


def skill_md(name, desc="a test skill"):
    return "---\nname: %s\ndescription: %s\n---\n# %s\n" % (name, desc, name)


def zip_bytes(files):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as z:
        for name, data in files.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o100755 if name.endswith(".sh") else 0o100644) << 16
            z.writestr(info, data)
    return buf.getvalue()


def mounts_at(path):
    """Lines of the host's mountinfo whose mount point is path."""
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return [ln for ln in f if ln.split()[4] == path]


def one_image_mount(data, what):
    m = mounts_at(os.path.join(data, "skills"))
    h.eq(len(m), 1, "%s: DATA/skills is mounted exactly once on the host" % what, "".join(m))
    h.ok(m and " - ext4 /dev/loop" in m[0], "%s: ... an ext4 file system on a loop device" % what, "".join(m))


def detach(path):
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.umount2(os.path.realpath(path).encode(), 2) == 0  # MNT_DETACH


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def listed(srv):
    r = srv.get("/v1/skills")
    return sorted(s.get("name") for s in (r.get("skills") or []))


# ---- a new data folder: the image is made and mounted ----------------------------------------

srv = h.start_server(token=TOKEN, config=CFG)
DATA = srv.data
SKILLS = os.path.join(DATA, "skills")
h.ok(os.path.isfile(os.path.join(DATA, "skills.img")), "a new data folder gets DATA/skills.img")
h.eq(os.path.getsize(os.path.join(DATA, "skills.img")), 32 << 20, "... of skills_disk's size (32M)")
one_image_mount(DATA, "first start")
h.eq(sorted(os.listdir(SKILLS)), [".staging"], "the new file system holds only the staging area (no lost+found)")
h.eq(listed(srv), [], "no skills yet")

r = srv.put("/v1/skills/alpha", zip_bytes({"SKILL.md": skill_md("alpha", "version one"),
                                            "scripts/run.sh": "#!/bin/sh\necho alpha\n"}), headers=ZIP_HDR)
h.eq(r.status, 201, "PUT /v1/skills/alpha installs it", r.describe())
B = "skillsfs-box"
r = srv.post("/v1/sandboxes", {"id": B})
h.eq(r.status, 201, "create a box", r.describe())
r = srv.exec(B, "cat /mnt/skills/alpha/SKILL.md; sh /skills/alpha/scripts/run.sh")
h.eq(r.get("stdout"), skill_md("alpha", "version one") + "alpha\n", "the box reads the skill and runs its script",
     r.describe())
r = srv.exec(B, "awk '$5 == \"/mnt/skills\" || $5 == \"/skills\" {print $4, $5}' /proc/self/mountinfo | sort")
h.eq(r.get("stdout"), "/ /mnt/skills\n/ /skills\n",
     "the box's mount table shows the root of the skills file system, not a host path", r.describe())
h.not_contains(srv.exec(B, "cat /proc/self/mountinfo").get("stdout") or "", os.path.realpath(DATA),
               "the data folder's path is nowhere in the box's mount table")
r = srv.exec(B, "ls -A /mnt/skills/.staging /skills/.staging | grep -v : | grep -c . ; "
                "touch /mnt/skills/.staging/x")
h.eq((r.get("stdout") or "").split("\n")[0], "0", "the staging area is empty in the box", r.describe())
h.ne(r.get("exit_code"), 0, "... and cannot be written", r.describe())

# live: an install and a replace while the box runs
r = srv.put("/v1/skills/beta", zip_bytes({"SKILL.md": skill_md("beta")}), headers=ZIP_HDR)
h.eq(r.status, 201, "install beta while the box runs", r.describe())
r = srv.put("/v1/skills/alpha", zip_bytes({"SKILL.md": skill_md("alpha", "version two")}), headers=ZIP_HDR)
h.eq((r.status, r.get("replaced")), (200, True), "replace alpha while the box runs", r.describe())
r = srv.exec(B, "ls /mnt/skills; grep description /skills/alpha/SKILL.md; ls /skills/alpha")
h.eq(r.get("stdout"), "alpha\nbeta\ndescription: version two\nSKILL.md\n",
     "the running box sees the new skill and the new version at once", r.describe())

# ---- restarts, a kill -9 and CLI calls: still one mount, the skills stay ----------------------

why = srv.restart()
h.ok(not why, "the server restarts", why)
one_image_mount(DATA, "after a restart")
h.eq(listed(srv), ["alpha", "beta"], "skills installed before the restart are listed after it")
r = srv.exec(B, "grep description /mnt/skills/alpha/SKILL.md; ls /mnt/skills")
h.eq(r.get("stdout"), "description: version two\nalpha\nbeta\n", "... and the box still sees them", r.describe())
srv.kill9()
r = h.cli("ls", data=DATA)
h.eq(r.rc, 0, "the CLI opens the data folder while no server runs", r.describe())
why = srv.start()
h.ok(not why, "the server starts after a kill -9", why)
r = h.cli("ls", data=DATA)
h.eq(r.rc, 0, "the CLI opens the data folder while the server runs", r.describe())
one_image_mount(DATA, "after kill -9, CLI calls and a start")

# unmounted on the host while a box still holds it: the next start mounts the loop device
# the box holds (one file system, never a second mount of the image)
srv.stop()
h.ok(detach(SKILLS), "(the test unmounts DATA/skills on the host; the box keeps its binds)")
h.eq(mounts_at(SKILLS), [], "DATA/skills is no mount now")
why = srv.start()
h.ok(not why, "the server starts", why)
one_image_mount(DATA, "after the unmount")
h.eq(listed(srv), ["alpha", "beta"], "the skills are back")
r = srv.put("/v1/skills/gamma", zip_bytes({"SKILL.md": skill_md("gamma")}), headers=ZIP_HDR)
h.eq(r.status, 201, "install gamma", r.describe())
r = srv.exec(B, "ls /mnt/skills")
h.eq(r.get("stdout"), "alpha\nbeta\ngamma\n", "the box that outlived the mount sees it: one file system",
     r.describe())

# a host reboot: nothing attached, the next start mounts the image again
srv.stop()
r = h.cli("stop", B, data=DATA)
h.ok(detach(SKILLS), "(the test unmounts DATA/skills, as a reboot would)")
why = srv.start()
h.ok(not why, "the server starts", why)
one_image_mount(DATA, "after a reboot")
h.eq(listed(srv), ["alpha", "beta", "gamma"], "the skills are back")

# ---- a full skills disk: 507, the installed version stays ---------------------------------------

big1 = os.urandom(12 << 20)
r = srv.put("/v1/skills/big", zip_bytes({"SKILL.md": skill_md("big", "v1"), "data.bin": big1}), headers=ZIP_HDR)
h.eq(r.status, 201, "a 12 MiB skill fits in the 32M skills disk", r.describe())
r = srv.put("/v1/skills/big", zip_bytes({"SKILL.md": skill_md("big", "v2"), "data.bin": os.urandom(12 << 20),
                                          "more.bin": os.urandom(12 << 20)}), headers=ZIP_HDR)
h.eq(r.status, 507, "a new version that does not fit answers 507 (insufficient storage)", r.describe())
h.contains(r.err_message or "", "No space left", "... saying the disk is full", r.describe())
with open(os.path.join(SKILLS, "big", "SKILL.md")) as f:
    h.contains(f.read(), "description: v1", "the installed version stays")
h.eq(hashlib.sha256(open(os.path.join(SKILLS, "big", "data.bin"), "rb").read()).hexdigest(),
     hashlib.sha256(big1).hexdigest(), "... whole")
h.eq(os.listdir(os.path.join(SKILLS, ".staging")), [], "nothing is left in the staging area")
r = srv.put("/v1/skills/big", zip_bytes({"SKILL.md": skill_md("big", "v3")}), headers=ZIP_HDR)
h.eq((r.status, r.get("replaced")), (200, True), "a version that fits installs afterwards", r.describe())
h.eq(listed(srv), ["alpha", "beta", "big", "gamma"], "and the others are untouched")
srv.stop()

# ---- an older data folder: a plain DATA/skills is moved into a new image ----------------------

OLD = h.new_data_dir("olddata")
os.makedirs(os.path.join(OLD, "skills", "legacy", "scripts"))
with open(os.path.join(OLD, "skills", "legacy", "SKILL.md"), "w") as f:
    f.write(skill_md("legacy"))
with open(os.path.join(OLD, "skills", "legacy", "scripts", "go.sh"), "w") as f:
    f.write("#!/bin/sh\necho legacy\n")
os.chmod(os.path.join(OLD, "skills", "legacy", "scripts", "go.sh"), 0o705)
os.makedirs(os.path.join(OLD, ".skills-staging", "junk.1.2.3"))
want = sha(os.path.join(OLD, "skills", "legacy", "SKILL.md"))
srv2 = h.start_server(token=TOKEN, config=CFG, data=OLD, name="old")
one_image_mount(OLD, "migration")
h.eq(listed(srv2), ["legacy"], "the plain folder's skill is listed from the new file system")
h.eq(sha(os.path.join(OLD, "skills", "legacy", "SKILL.md")), want, "... with its contents")
h.eq(os.stat(os.path.join(OLD, "skills", "legacy", "scripts", "go.sh")).st_mode & 0o7777, 0o705,
     "... and its modes")
left = [n for n in os.listdir(OLD) if n.startswith(".skills")]
h.eq(left, [".skills.lock"], "the old folder and the old staging area are gone", repr(left))
r = srv2.post("/v1/sandboxes", {"id": "oldbox"})
h.eq(r.status, 201, "a box on the migrated data folder", r.describe())
r = srv2.exec("oldbox", "sh /mnt/skills/legacy/scripts/go.sh; "
                        "awk '$5 == \"/mnt/skills\" {print $4}' /proc/self/mountinfo")
h.eq(r.get("stdout"), "legacy\n/\n", "... runs the migrated skill from the new file system", r.describe())
srv2.stop()
h.cli("stop", "oldbox", data=OLD)

# ---- crash states of a migration, made by hand, are finished at the next start ----------------
# The image exists, the plain folder was renamed aside (.skills-old.*) and one of its skills was
# already copied in (with a half copy of another left in .staging by a dead process); and,
# after a reboot, a skill put by hand into the unmounted mount point.
h.ok(detach(os.path.join(OLD, "skills")), "(unmount, as a crash and a reboot would leave it)")
aside = os.path.join(OLD, ".skills-old.crashtest")
for name in ("legacy", "second", "third"):
    os.makedirs(os.path.join(aside, name))
    with open(os.path.join(aside, name, "SKILL.md"), "w") as f:
        f.write(skill_md(name, "from the old folder"))
os.makedirs(os.path.join(OLD, "skills", "byhand"))
with open(os.path.join(OLD, "skills", "byhand", "SKILL.md"), "w") as f:
    f.write(skill_md("byhand"))
why = srv2.start()
h.ok(not why, "the server starts on the crash state", why)
one_image_mount(OLD, "after the crash state")
h.eq(listed(srv2), ["byhand", "legacy", "second", "third"],
     "every skill is there: those in the image, those left aside, the one put by hand")
with open(os.path.join(OLD, "skills", "legacy", "SKILL.md")) as f:
    h.eq(f.read(), skill_md("legacy"), "a skill already in the image keeps the image's version")
h.eq([n for n in os.listdir(OLD) if n.startswith(".skills-old")], [], "the folders set aside are gone")
srv2.stop()

# ---- kill -9 while moving 100 skills -------------------------------------------------------------

K = h.new_data_dir("killdata")
names = ["s%03d" % i for i in range(100)]
hashes = {}
for n in names:
    os.makedirs(os.path.join(K, "skills", n))
    with open(os.path.join(K, "skills", n, "SKILL.md"), "w") as f:
        f.write(skill_md(n))
    blob = os.urandom(512 << 10)
    with open(os.path.join(K, "skills", n, "blob"), "wb") as f:
        f.write(blob)
    hashes[n] = hashlib.sha256(blob).hexdigest()


def copied():
    try:
        return len(os.listdir(os.path.join(K, "skills"))) if os.path.ismount(os.path.join(K, "skills")) else 0
    except OSError:
        return 0


srv3 = h.server(token=TOKEN, config=dict(CFG, skills_disk="128M"), data=K, name="kill")
srv3.spawn()
abserver.wait_for(lambda: copied() >= 6, timeout=30, step=0.001)
srv3.kill9()
state = sorted(os.listdir(K))
n_in = copied()
h.ok(any(x.startswith(".skills-old.") for x in state) and 0 < n_in < 100,
     "the server was killed while it moved the skills (%d of 100 in the image)" % n_in, repr(state))
why = srv3.start()
h.ok(not why, "the server starts after the kill", why)
one_image_mount(K, "after a kill -9 mid-migration")
h.eq(listed(srv3), names, "all 100 skills are there")
bad = [n for n in names if sha(os.path.join(K, "skills", n, "blob")) != hashes[n]]
h.eq(bad, [], "... each whole")
h.eq([n for n in os.listdir(K) if n.startswith(".skills-old")], [], "nothing is left aside")
h.eq(os.listdir(os.path.join(K, "skills", ".staging")), [], "nor in the staging area")
srv3.stop()
h.done()
