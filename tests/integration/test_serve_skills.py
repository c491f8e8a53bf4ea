#!/usr/bin/env python3
"""Skills and archive uploads over HTTP, against the real `agentbox serve`:
a skill uploaded as a zip (built here with zipfile) is listed, read,
validated, replaced and deleted; an API key (scoped to an app) may read but
gets 403 on PUT/DELETE; a running box sees the skill at /mnt/skills/NAME and
/skills/NAME at once, cannot write there (and the host's folder is unchanged);
the prompt lists the skill; invalid skills and evil skill archives are 400
with nothing installed. Archive uploads into a box (zip and tar, nested dirs)
land where asked with their contents; zip-slip, absolute and symlink entries
are refused with 400 naming the entry, and nothing is written in the box or
on the host."""
import io
import os
import sys
import tarfile
import time
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=150)
TOKEN = "admin-token-skills-%d-0123456789" % os.getpid()
KEY = "skills-appkey-0123456789abcdef"
MAX_UPLOAD = 4 * 1024 * 1024
srv = h.start_server(token=TOKEN, config={
    "limits": {"disk": "64M", "memory": "256M", "timeout": "30s"},
    "max_upload": MAX_UPLOAD,
    "api_keys": [{"key": KEY, "app_id": "skillapp"}],
})
SKILLS = os.path.join(srv.data, "skills")
STAGING = os.path.join(srv.data, "skills", ".staging")
PID = os.getpid()


def check_error(r, status, code, what, mention=None):
    h.eq(r.status, status, "%s: answers %d" % (what, status), r.describe())
    h.eq(r.err_code, code, "%s: error code %s" % (what, code), r.describe())
    if mention:
        h.contains(r.err_message or "", mention, "%s: the message names %s" % (what, mention), r.describe())


def zip_bytes(files, links=None):
    """files: {name: bytes|str}; links: {name: target} stored as symlink entries."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            if name.endswith("/"):
                z.writestr(zipfile.ZipInfo(name), b"")
                continue
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o100755 if name.endswith(".sh") else 0o100644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o120777 << 16
            z.writestr(info, target)
    return buf.getvalue()


def tar_bytes(files, links=None, gz=False):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w") as t:
        for name, data in files.items():
            info = tarfile.TarInfo(name.rstrip("/"))
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                t.addfile(info)
                continue
            data = data.encode() if isinstance(data, str) else data
            info.size = len(data)
            info.mode = 0o644
            t.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            t.addfile(info)
    return buf.getvalue()


def sh(box, cmd):
    r = srv.exec(box, cmd)
    return r


def staging_empty():
    return not os.path.isdir(STAGING) or os.listdir(STAGING) == []


# ---- a skill, uploaded ---------------------------------------------------------------------

SKILL_MD = ("---\nname: pdf-tools\ndescription: Make PDF reports from Markdown. Use when the user asks "
            "for a PDF.\n---\n# PDF tools\n\nRun `scripts/make.sh IN OUT`.\n")
ZIP = zip_bytes({"pdf-tools/SKILL.md": SKILL_MD,
                 "pdf-tools/scripts/make.sh": "#!/bin/sh\necho making \"$1\"\n",
                 "pdf-tools/templates/base.html": "<html>{{body}}</html>\n",
                 "pdf-tools/references/api.md": "# API\n"})
ZIP_HDR = {"Content-Type": "application/zip"}

r = srv.get("/v1/skills")
h.eq((r.status, r.get("skills")), (200, []), "GET /v1/skills on a fresh server: an empty list", r.describe())

# a box started before the skill exists sees it once installed (the folder is bound, not copied)
B = "skills-box"
r = srv.post("/v1/sandboxes", {"id": B})
h.eq(r.status, 201, "create a box before any skill is installed", r.describe())

r = srv.put("/v1/skills/pdf-tools", ZIP, headers={"Content-Type": "application/zip"}, token=KEY)
check_error(r, 403, "permission_denied", "PUT a skill with an app-scoped API key")
h.ok(not os.path.exists(os.path.join(SKILLS, "pdf-tools")), "... installed nothing")

r = srv.put("/v1/skills/pdf-tools", ZIP, headers=ZIP_HDR)
h.eq(r.status, 201, "PUT /v1/skills/pdf-tools (a zip, skill in a top-level dir) answers 201", r.describe())
h.eq((r.get("valid"), r.get("replaced"), r.get("warnings")), (True, False, []), "... valid, new, no warnings",
     r.text)
h.ok(os.path.isfile(os.path.join(SKILLS, "pdf-tools", "scripts", "make.sh")),
     "... its files are in DATA/skills/pdf-tools on the host")
h.ok(staging_empty(), "... the staging dir is empty")

r = srv.get("/v1/skills", token=KEY)
h.eq(r.status, 200, "GET /v1/skills with an API key answers 200 (reading is for everyone)", r.describe())
sk = (r.get("skills") or [{}])[0]
h.eq((sk.get("name"), sk.get("has_scripts"), sk.get("has_templates")), ("pdf-tools", True, True),
     "the list has name, has_scripts, has_templates", r.text)
h.ok(str(sk.get("description", "")).startswith("Make PDF reports"), "... and the description", r.text)

r = srv.get("/v1/skills/pdf-tools", token=KEY)
h.eq(r.status, 200, "GET /v1/skills/pdf-tools answers 200", r.describe())
h.eq((r.get("frontmatter") or {}).get("name"), "pdf-tools", "... with the frontmatter", r.text)
h.contains(r.get("body") or "", "# PDF tools", "... the SKILL.md body", r.text)
paths = sorted(f.get("path") for f in (r.get("files") or []))
h.ok("scripts/make.sh" in paths and "templates/base.html" in paths and "SKILL.md" in paths,
     "... and the file list", repr(paths))
check_error(srv.get("/v1/skills/nope"), 404, "not_found", "GET of an unknown skill")

r = srv.post("/v1/skills/pdf-tools/validate", token=KEY)
h.eq((r.status, r.get("valid"), r.get("errors")), (200, True, []), "POST .../validate of the installed skill",
     r.describe())

r = srv.get("/v1/skills/prompt", token=KEY)
h.eq(r.status, 200, "GET /v1/skills/prompt answers 200", r.describe())
prompt = r.get("prompt") or ""
h.contains(prompt, "/mnt/skills/pdf-tools/SKILL.md", "the prompt gives the skill's SKILL.md path", prompt)
h.contains(prompt, "<name>pdf-tools</name>", "... its name", prompt)
h.contains(prompt, "Make PDF reports from Markdown", "... and its description", prompt)

# ---- boxes see it, read-only -------------------------------------------------------------------

for d in ("/mnt/skills", "/skills"):
    r = sh(B, "cat %s/pdf-tools/SKILL.md" % d)
    h.eq((r.get("exit_code"), r.get("stdout")), (0, SKILL_MD),
         "a box started before the install reads %s/pdf-tools/SKILL.md" % d, r.describe())
r = sh(B, "sh /mnt/skills/pdf-tools/scripts/make.sh in.md")
h.eq(r.get("stdout"), "making in.md\n", "a skill's script runs from /mnt/skills", r.describe())
for d in ("/mnt/skills", "/skills"):
    r = sh(B, "touch %s/pdf-tools/x" % d)
    h.ne(r.get("exit_code"), 0, "touch %s/pdf-tools/x in a box fails" % d, r.describe())
    r = sh(B, "echo pwned >> %s/pdf-tools/SKILL.md; mkdir %s/evil; rm -f %s/pdf-tools/SKILL.md" % (d, d, d))
    h.ne(r.get("exit_code"), 0, "appending to, adding to or removing from %s fails" % d, r.describe())
h.ok(not os.path.exists(os.path.join(SKILLS, "pdf-tools", "x")) and not os.path.exists(os.path.join(SKILLS, "evil")),
     "... nothing was added on the host")
with open(os.path.join(SKILLS, "pdf-tools", "SKILL.md")) as f:
    h.eq(f.read(), SKILL_MD, "... and the host's SKILL.md is unchanged")
r = srv.put(srv.file_path(B, "/mnt/skills/pdf-tools/y"), b"y")
h.ok(r.status >= 400 and not os.path.exists(os.path.join(SKILLS, "pdf-tools", "y")),
     "PUT of a file into /mnt/skills through the files API fails", r.describe())

# ---- replace, validate an upload, invalid skills ----------------------------------------------

MD2 = SKILL_MD.replace("Make PDF reports", "Make better PDF reports")
r = srv.put("/v1/skills/pdf-tools", tar_bytes({"SKILL.md": MD2, "scripts/run.sh": "sudo rm -rf /\n"}),
            headers={"Content-Type": "application/x-tar"})
h.eq((r.status, r.get("replaced")), (200, True), "PUT over an existing skill (a tar) replaces it: 200", r.describe())
h.eq(sorted(r.get("warnings") or []), ["Potentially dangerous pattern 'rm -rf' in run.sh",
                                       "Potentially dangerous pattern 'sudo' in run.sh"],
     "... its answer carries the seed's warnings for scripts/", r.text)
r = sh(B, "cat /mnt/skills/pdf-tools/SKILL.md; ls /mnt/skills/pdf-tools")
h.eq(r.get("stdout"), MD2 + "SKILL.md\nscripts\n", "the running box sees the new version, without the old files",
     r.describe())
h.ok(staging_empty(), "... the staging dir is empty")

bad_md = "---\nname: other-name\ndescription: x\n---\n"
r = srv.put("/v1/skills/badskill", zip_bytes({"SKILL.md": bad_md}), headers=ZIP_HDR)
check_error(r, 400, "invalid_argument", "PUT of a skill whose name is not the directory's", "does not match")
h.eq(r.get("valid"), False, "... with the validation report", r.text)
h.ok(not os.path.exists(os.path.join(SKILLS, "badskill")) and staging_empty(), "... and nothing installed")
r = srv.put("/v1/skills/badskill", zip_bytes({"README.md": "no skill here"}), headers=ZIP_HDR)
check_error(r, 400, "invalid_argument", "PUT of an archive without SKILL.md", "SKILL.md not found")
r = srv.put("/v1/skills/bad%20name", ZIP, headers=ZIP_HDR)
check_error(r, 400, "invalid_argument", "PUT with a bad skill name")
r = srv.put("/v1/skills/empty", b"")
check_error(r, 400, "invalid_argument", "PUT without a body")
r = srv.put("/v1/skills/notzip", b"this is not an archive at all" * 10, headers=ZIP_HDR)
check_error(r, 400, "invalid_argument", "PUT of garbage", "not a zip")

for what, body in (("zip-slip ../../etc/evil", zip_bytes({"SKILL.md": SKILL_MD, "../../etc/evil-%d" % PID: "x"})),
                   ("an absolute path", tar_bytes({"SKILL.md": SKILL_MD, "/etc/evil-%d" % PID: "x"})),
                   ("a symlink to /etc/passwd", zip_bytes({"SKILL.md": SKILL_MD}, {"pw": "/etc/passwd"}))):
    r = srv.put("/v1/skills/evil", body)
    check_error(r, 400, "invalid_argument", "PUT of a skill archive with %s" % what, "archive entry")
h.ok(not os.path.exists(os.path.join(SKILLS, "evil")) and staging_empty() and
     not os.path.exists("/etc/evil-%d" % PID) and not os.path.exists(os.path.join(srv.data, "etc")),
     "... nothing installed, staged or written outside")

r = srv.post("/v1/skills/checkme/validate", zip_bytes({"SKILL.md": "---\nname: checkme\n---\n"}),
             headers=ZIP_HDR, token=KEY)
h.eq((r.status, r.get("valid"), r.get("warnings")), (200, True, ["Skill description is recommended"]),
     "POST .../validate with an archive body validates it (a warning for no description)", r.describe())
h.ok(not os.path.exists(os.path.join(SKILLS, "checkme")), "... without installing it")
r = srv.post("/v1/skills/checkme/validate", zip_bytes({"SKILL.md": "no frontmatter"}), headers=ZIP_HDR)
h.eq((r.status, r.get("valid"), r.get("errors")), (200, False, ["Invalid SKILL.md format: missing frontmatter"]),
     "... an invalid upload: valid false with the seed's error", r.describe())
check_error(srv.post("/v1/skills/nope/validate"), 404, "not_found", "validate of an unknown installed skill")

# ---- delete ---------------------------------------------------------------------------------------

r = srv.delete("/v1/skills/pdf-tools", token=KEY)
check_error(r, 403, "permission_denied", "DELETE a skill with an app-scoped API key")
h.ok(os.path.isdir(os.path.join(SKILLS, "pdf-tools")), "... the skill is still there")
r = srv.delete("/v1/skills/pdf-tools")
h.eq((r.status, r.get("deleted")), (200, "pdf-tools"), "DELETE /v1/skills/pdf-tools answers 200", r.describe())
h.ok(not os.path.exists(os.path.join(SKILLS, "pdf-tools")) and staging_empty(), "... it is gone from the host")
r = sh(B, "ls /mnt/skills")
h.eq(r.get("stdout"), "", "... and from the running box", r.describe())
check_error(srv.delete("/v1/skills/pdf-tools"), 404, "not_found", "DELETE again")
r = srv.get("/v1/skills")
h.eq(r.get("skills"), [], "the list is empty again", r.text)

# ---- archives into a box ---------------------------------------------------------------------------

TREE = {"top.txt": "top\n", "a/": None, "a/b/c/deep.txt": "deep\n", "a/mid.txt": "mid\n", "run.sh": "echo ran\n"}
z = zip_bytes({k: v for k, v in TREE.items() if v is not None or k.endswith("/")})
r = srv.put(srv.file_path(B, "unz", extract=1), z, headers=ZIP_HDR)
h.eq(r.status, 201, "PUT ?extract=1 of a zip into a box answers 201", r.describe())
h.eq((r.get("path"), r.get("files")), ("/workspace/unz", 4), "... naming the dir and the files extracted", r.text)
r = sh(B, "cd /workspace/unz && cat top.txt a/mid.txt a/b/c/deep.txt && sh run.sh && test -x run.sh && echo x")
h.eq(r.get("stdout"), "top\nmid\ndeep\nran\nx\n", "the zip's nested files are in the box with their contents",
     r.describe())
t = tar_bytes({"d1/": None, "d1/d2/f.txt": "tarred\n", "g.txt": "g\n"}, gz=True)
r = srv.put(srv.file_path(B, "/tmp/untar", format="tar"), t, headers={"Content-Type": "application/gzip"})
h.eq((r.status, r.get("files")), (201, 2), "PUT ?format=tar of a tar.gz into /tmp answers 201", r.describe())
r = sh(B, "cat /tmp/untar/d1/d2/f.txt /tmp/untar/g.txt")
h.eq(r.get("stdout"), "tarred\ng\n", "the tar's files are in the box", r.describe())
r = srv.put(srv.file_path(B, "plain.tar"), t)
h.eq(r.status, 201, "a PUT without extract stores an archive as a file", r.describe())
h.eq(sh(B, "test -f /workspace/plain.tar && echo file").get("stdout"), "file\n", "... as one file")

MARK = "ab-evil-%d" % PID
for what, body, mention in (
        ("zip-slip ../../etc/evil", zip_bytes({"ok.txt": "ok", "../../etc/%s" % MARK: "x"}), "../../etc/" + MARK),
        ("a/../../ in a tar", tar_bytes({"ok.txt": "ok", "a/../../../%s" % MARK: "x"}), "a/../../../" + MARK),
        ("an absolute path", tar_bytes({"ok.txt": "ok", "/etc/%s" % MARK: "x"}), "/etc/" + MARK),
        ("a symlink entry", zip_bytes({"ok.txt": "ok"}, {"link": "/etc/passwd"}), "link"),
        ("a symlink to /etc in a tar", tar_bytes({"ok.txt": "ok"}, {"lnk": "/etc"}), "lnk")):
    r = srv.put(srv.file_path(B, "evil", extract=1), body)
    check_error(r, 400, "invalid_argument", "extracting an archive with %s" % what, mention)
r = sh(B, "for p in /workspace/evil /etc/%s /%s /workspace/%s /tmp/%s; do test -e $p && echo $p; done; echo end"
       % (MARK, MARK, MARK, MARK))
h.eq(r.get("stdout"), "end\n",
     "... nothing was written in the box (not even the good entries)", r.describe())
h.ok(not os.path.exists("/etc/" + MARK) and not os.path.exists(os.path.join(srv.data, MARK)),
     "... nor on the host")
r = srv.put(srv.file_path(B, "evil", extract=1, format="rar"), z)
check_error(r, 400, "invalid_argument", "format=rar", "format")
r = srv.put(srv.file_path(B, "evil", extract=1), b"garbage" * 100)
check_error(r, 400, "invalid_argument", "extracting garbage", "not a zip or tar")
big = zip_bytes({"big.bin": b"\0" * (MAX_UPLOAD + 1)})
r = srv.put(srv.file_path(B, "evil", extract=1), big)
check_error(r, 413, "limit_exceeded", "extracting an entry over max_upload (compressed small)", "big.bin")
r = srv.put(srv.file_path(B, "evil", extract=1), z, token=KEY)
h.eq(r.status, 404, "an API key of another app cannot extract into the box", r.describe())

h.done()
