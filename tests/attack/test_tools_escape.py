#!/usr/bin/env python3
"""Attacks through the agent tools, the file API and archives, against a real
server and real boxes. Each check passes only when the attack fails.

A canary file with random content is put on the host (in /tmp, in the
server's data folder, and in the skills folder's parent); symlinks in the
workspace point at those host paths, at /etc/shadow, at /proc/1/root/..., at
the box's own init socket path on the host; every tool (read_file, grep,
glob, ls, write_file, str_replace, bash, sandbox_shell) and the files API
then try to read or write through them. The host canaries must never show up
in an answer and the host files must stay unchanged. A zip-slip archive and
an archive with a symlink entry are refused with nothing written. A box
trying to write into /mnt/skills fails, and the skill on the host stays
unchanged."""
import io
import os
import secrets
import sys
import tarfile
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=110)
TOKEN = "attack-token-%s-0123456789" % os.getpid()
S = h.start_server(token=TOKEN)

secret = "CANARY-" + secrets.token_hex(16)
canaries = []
for d in ("/tmp", S.data, os.path.dirname(S.data)):
    p = os.path.join(d, "agentbox-canary-%s.txt" % secrets.token_hex(4))
    with open(p, "w") as f:
        f.write(secret + "\n")
    canaries.append(p)
shadow_before = open("/etc/shadow", "rb").read() if os.path.exists("/etc/shadow") else None
passwd_before = open("/etc/passwd", "rb").read()

r = S.post("/v1/sandboxes", {"id": "victim"})
h.eq(r.status, 201, "a box", r.describe())
BOX = "victim"

# Links to host paths (and tricks) inside the workspace.
links = {
    "l_canary_tmp": canaries[0],
    "l_canary_data": canaries[1],
    "l_canary_parent": canaries[2],
    "l_shadow": "/etc/shadow",
    "l_proc_root": "/proc/1/root" + canaries[0],
    "l_proc_self_root": "/proc/self/root" + canaries[1],
    "l_dotdot": "../../../../../../../.." + canaries[0],
    "l_dir_data": S.data,
    "l_dir_tmp": "/tmp",
}
cmd = "mkdir -p /workspace/trap && cd /workspace/trap && " + " && ".join(
    "ln -sfn '%s' '%s'" % (t, n) for n, t in links.items())
r = S.exec(BOX, cmd)
h.eq((r.status, r.get("exit_code")), (200, 0), "symlinks to host paths made in the workspace", r.describe())


def tool(name, **args):
    return S.post("/v1/sandboxes/%s/tools/%s" % (BOX, name), {"args": args})


for name in links:
    p = "/workspace/trap/" + name
    for what, r in (("read_file", tool("read_file", path=p)),
                    ("grep", tool("grep", pattern="CANARY", path=p)),
                    ("ls", tool("ls", path=p)),
                    ("glob", tool("glob", pattern="**/*canary*", path=p)),
                    ("files GET", S.get(S.file_path(BOX, p))),
                    ("zip download", S.get(S.file_path(BOX, p, format="zip")))):
        h.ok(r.status in (200, 400, 404, 409) and secret not in (r.text or ""),
             "%s through %s reveals no host canary" % (what, name), r.describe()[:600])
r = tool("grep", pattern="CANARY-", path="/workspace")
h.ok(secret not in (r.text or ""), "grep over the whole workspace (links inside) finds no host canary",
     r.describe()[:600])
r = tool("grep", pattern="CANARY-", path="/")
h.ok(secret not in (r.text or ""), "grep over the box's / finds no host canary", r.describe()[:600])
r = tool("bash", command="cat /workspace/trap/* 2>&1; cat %s 2>&1; ls -la %s 2>&1" % (
    " ".join(canaries), os.path.dirname(S.data)))
h.ok(secret not in (r.text or ""), "bash reading the host paths finds nothing", r.describe()[:600])
r = tool("sandbox_shell", command="find / -xdev -name 'agentbox-canary-*' 2>/dev/null | head")
h.ok(r.status == 200 and "agentbox-canary-" not in (r.text or ""), "sandbox_shell cannot find the canaries",
     r.describe()[:600])

# Writes through links must not reach the host.
for name, target in (("l_canary_tmp", canaries[0]), ("l_canary_data", canaries[1]),
                     ("l_proc_root", canaries[0])):
    p = "/workspace/trap/" + name
    tool("write_file", path=p, content="OVERWRITTEN\n")
    tool("write_file", path=p, content="APPENDED\n", append=True)
    tool("str_replace", path=p, old_str="CANARY", new_str="PWNED")
    S.put(S.file_path(BOX, p), b"PUT-OVER\n")
    with open(target) as f:
        h.eq(f.read(), secret + "\n", "write_file/str_replace/PUT through %s leave the host file as it was" % name)
for name in ("l_shadow",):
    p = "/workspace/trap/" + name
    tool("write_file", path=p, content="root::0:0::/:/bin/sh\n")
    tool("str_replace", path=p, old_str="root", new_str="toor")
if shadow_before is not None:
    h.ok(open("/etc/shadow", "rb").read() == shadow_before, "/etc/shadow on the host is unchanged")
tool("write_file", path="/etc/passwd", content="evil::0:0::/:/bin/sh\n", append=True)
h.ok(open("/etc/passwd", "rb").read() == passwd_before, "append to the box's /etc/passwd leaves the host's alone")
r = tool("write_file", path="/workspace/trap/l_dir_tmp/agentbox-escaped.txt", content="x")
h.ok(not os.path.exists("/tmp/agentbox-escaped.txt"), "write_file through a link to /tmp does not land on the host",
     r.describe()[:400])
r = tool("write_file", path="/workspace/trap/l_dir_data/boxes/escaped.txt", content="x")
h.ok(not os.path.exists(os.path.join(S.data, "boxes", "escaped.txt")),
     "write_file through a link to the data folder does not land on the host", r.describe()[:400])

# Malicious archives into the box.
def zip_bytes(entries, links=()):
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w") as z:
        for n, data in entries:
            z.writestr(n, data)
        for n, target in links:
            zi = zipfile.ZipInfo(n)
            zi.external_attr = (0o120777 << 16)
            z.writestr(zi, target)
    return b.getvalue()


def tar_bytes(entries, links=()):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w") as t:
        for n, data in entries:
            ti = tarfile.TarInfo(n)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))
        for n, target in links:
            ti = tarfile.TarInfo(n)
            ti.type = tarfile.SYMTYPE
            ti.linkname = target
            t.addfile(ti)
    return b.getvalue()


evil = [
    ("zip-slip ../", zip_bytes([("ok.txt", b"fine"), ("../../../../tmp/agentbox-slip.txt", b"slipped")])),
    ("zip absolute path", zip_bytes([("/tmp/agentbox-slip.txt", b"slipped")])),
    ("zip symlink entry", zip_bytes([("ok.txt", b"fine")], links=[("link", canaries[0])])),
    ("tar ../", tar_bytes([("a/../../../../tmp/agentbox-slip.txt", b"slipped")])),
    ("tar symlink then write through it", tar_bytes([("d/f", b"x")], links=[("d/l", "/tmp")])),
]
for what, data in evil:
    r = S.put(S.file_path(BOX, "/workspace/up-%d" % len(what), extract=1), data)
    h.eq(r.status, 400, "%s: refused with 400" % what, r.describe()[:500])
    r2 = S.exec(BOX, "ls -A /workspace/up-%d 2>/dev/null | wc -l; ls /tmp/agentbox-slip.txt 2>/dev/null" % len(what))
    h.eq((r2.get("stdout") or "").strip(), "0", "%s: nothing written in the box" % what, r2.describe()[:300])
h.ok(not os.path.exists("/tmp/agentbox-slip.txt"), "no archive entry landed on the host")

# A skill a box tries to change.
skill_zip = zip_bytes([("SKILL.md", b"---\nname: safe-skill\ndescription: a test skill\n---\n# Safe\n"),
                       ("scripts/run.sh", b"echo ok\n")])
r = S.put("/v1/skills/safe-skill", skill_zip, headers={"Content-Type": "application/zip"})
h.ok(r.status in (200, 201), "a skill installed by the admin", r.describe()[:400])
skill_md = os.path.join(S.data, "skills", "safe-skill", "SKILL.md")
before = open(skill_md, "rb").read() if os.path.exists(skill_md) else None
for how, r in (
        ("bash", S.exec(BOX, "echo pwned > /mnt/skills/safe-skill/SKILL.md; echo pwned > /skills/safe-skill/x; "
                             "rm -rf /mnt/skills/safe-skill; mount -o remount,rw /mnt/skills; "
                             "echo pwned >> /mnt/skills/safe-skill/scripts/run.sh")),
        ("write_file", tool("write_file", path="/mnt/skills/safe-skill/SKILL.md", content="pwned")),
        ("str_replace", tool("str_replace", path="/mnt/skills/safe-skill/SKILL.md", old_str="Safe",
                             new_str="Pwned")),
        ("files PUT", S.put(S.file_path(BOX, "/mnt/skills/safe-skill/SKILL.md"), b"pwned")),
        ("files DELETE", S.delete(S.file_path(BOX, "/mnt/skills/safe-skill", recursive=1)))):
    now = open(skill_md, "rb").read() if os.path.exists(skill_md) else None
    h.ok(before is not None and now == before, "a box changing the skill with %s leaves it unchanged" % how,
         r.describe()[:400])
h.ok(not os.path.exists(os.path.join(S.data, "skills", "safe-skill", "x")), "no file added to the skill")

for p in canaries:
    os.unlink(p)
h.done()
