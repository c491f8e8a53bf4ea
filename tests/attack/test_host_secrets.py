#!/usr/bin/env python3
"""Attacks on root-only host files through the shared layers of a host-base
box (docs/security.md, "Root-only host files"). The layers (/usr, /etc,
var/lib/{dpkg,apt,ucf}, var/cache/{apt,debconf}) map host root to box root,
which holds CAP_DAC_OVERRIDE over them: file modes alone keep nothing from a
box. Passes only when
- no host file of a shared layer that has no read bit for others (and no
  directory without r or x for others) can be read or listed in a box: the
  test walks the host's shared paths for such entries, plants its own (a
  0600 file in /var/cache/debconf, a 0640 one in /var/lib/dpkg, a 0700
  directory in /usr/share, a 0600 file in /etc) and tries every one from a
  box in one exec, also after a chmod (box root owns them) that would copy
  them up readable;
- the host-revealing /proc files (diskstats, config.gz, timer_list, ...) are
  empty or unreadable in the box, though the host's are not.
The boxes are made through each front: /v1, E2B (/e2b/v2/sandboxes,
template "base") and OpenSandbox (/opensandbox/v1/sandboxes, image "base").
Controls: on the host each entry exists; in the box, world-readable files
next to them are read."""
import json
import os
import shutil
import stat

import attacklib as al
import abserver

SHARED = ["usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "var/lib/dpkg",
          "var/lib/apt", "var/lib/ucf", "var/cache/apt", "var/cache/debconf"]
MAX_ENTRIES = 2000  # the walk lists at most this many (the planted ones first)
PROC = ["/proc/diskstats", "/proc/config.gz", "/proc/timer_list", "/proc/sched_debug"]

h = abserver.ServerHarness(budget=180)
tok = al.token()
planted = []  # (path, is_dir)


def plant_file(path, mode, content):
    with open(path, "w") as f:
        f.write(content)
    os.chmod(path, mode)
    planted.append((path, False))


def plant_dir(path):
    os.mkdir(path, 0o700)
    os.chmod(path, 0o700)
    with open(os.path.join(path, "inner"), "w") as f:
        f.write(tok)
    os.chmod(os.path.join(path, "inner"), 0o644)
    planted.append((path, True))


def unreadable(st):
    if stat.S_ISLNK(st.st_mode):
        return False
    if stat.S_ISDIR(st.st_mode):
        return not (st.st_mode & stat.S_IROTH and st.st_mode & stat.S_IXOTH)
    return not st.st_mode & stat.S_IROTH


def walk_host():
    """Every entry of the shared paths that others may not read; unreadable
    directories are listed, not entered."""
    found = []
    for top in SHARED:
        p = "/" + top
        if os.path.islink(p) or not os.path.isdir(p):
            continue
        if unreadable(os.lstat(p)):
            found.append(p)
            continue
        for root, dirs, files in os.walk(p):
            keep = []
            for name in dirs:
                full = os.path.join(root, name)
                try:
                    st = os.lstat(full)
                except OSError:
                    continue
                if unreadable(st):
                    found.append(full)
                elif not stat.S_ISLNK(st.st_mode):
                    keep.append(name)
            dirs[:] = keep
            for name in files:
                full = os.path.join(root, name)
                try:
                    st = os.lstat(full)
                except OSError:
                    continue
                if unreadable(st) and (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                    found.append(full)
    return found


# In the box: try each path (read a file, list a directory and read inside
# it), then chmod it (box root owns it) and try again. One JSON line out.
PROBE = r'''
import json, os, sys
paths = json.loads(sys.argv[1])
out = {}
def attempt(p):
    try:
        if os.path.isdir(p):
            names = os.listdir(p)
            got = "LIST %d" % len(names)
            for n in names[:3]:
                q = os.path.join(p, n)
                if os.path.isfile(q):
                    with open(q, "rb") as f:
                        f.read(16)
                    got += " READ"
            return got
        with open(p, "rb") as f:
            f.read(16)
        return "READ"
    except OSError as e:
        return "ERR %d" % e.errno
for p in paths["secret"]:
    r = attempt(p)
    if r.startswith("ERR"):
        try:
            os.chmod(p, 0o755 if os.path.isdir(p) else 0o644)
            r2 = attempt(p)
            if not r2.startswith("ERR"):
                r = "AFTER CHMOD " + r2
        except OSError:
            pass
    out[p] = r
for p in paths["control"] + paths["proc"]:
    try:
        with open(p, "rb") as f:
            out[p] = "SIZE %d" % len(f.read(1 << 16))
    except OSError as e:
        out[p] = "ERR %d" % e.errno
print(json.dumps(out))
'''

box = None
try:
    plant_file("/var/cache/debconf/ab-secret-%s.dat" % tok, 0o600, tok)
    plant_file("/var/lib/dpkg/ab-secret-%s" % tok, 0o640, tok)
    plant_file("/etc/ab-secret-%s" % tok, 0o600, tok)
    plant_dir("/usr/share/ab-secret-%s" % tok)
    found = walk_host()
    mine = [p for p, _ in planted]
    h.ok(all(p in found for p in mine), "control: the host walk finds the planted entries",
         repr(mine))
    others = [p for p in found if p not in mine]
    secrets = mine + others[:MAX_ENTRIES - len(mine)]
    h.diag("%d root-only entries in the shared layers (%d tried), e.g. %s" %
           (len(found), len(secrets), others[:8]))
    controls = [p for p in ["/var/cache/debconf/config.dat", "/var/lib/dpkg/status", "/etc/passwd",
                            "/usr/share/dict/words", "/usr/bin/env"] if os.path.isfile(p)
                and os.stat(p).st_mode & stat.S_IROTH]
    proc = []
    for p in PROC:
        try:
            with open(p, "rb") as f:
                if f.read(64):
                    proc.append(p)
        except OSError:
            pass
    h.ok(proc, "control: the host has host-revealing /proc files with content", repr(proc))

    srv = h.start_server(config={"limits": {"disk": "64M", "memory": "256M", "timeout": "60s"}})
    boxes = []
    r = srv.post("/v1/sandboxes", {"id": "v1box"})
    h.eq(r.status, 201, "a box through /v1", r.describe())
    boxes.append(("v1", "v1box"))
    r = srv.post("/e2b/v2/sandboxes", {"templateID": "base", "timeout": 120})
    h.ok(r.status in (200, 201) and isinstance(r.json, dict) and r.json.get("sandboxID"),
         "a box through E2B", r.describe())
    if isinstance(r.json, dict) and r.json.get("sandboxID"):
        boxes.append(("e2b", r.json["sandboxID"]))
    r = srv.post("/opensandbox/v1/sandboxes",
                 {"image": {"uri": "base"}, "entrypoint": ["sleep", "infinity"],
                  "resourceLimits": {}, "timeout": 120})
    h.ok(r.status in (200, 201, 202) and isinstance(r.json, dict) and r.json.get("id"),
         "a box through OpenSandbox", r.describe())
    if isinstance(r.json, dict) and r.json.get("id"):
        boxes.append(("opensandbox", r.json["id"]))
    arg = json.dumps({"secret": secrets, "control": controls, "proc": proc})
    for front, box in boxes:
        r = srv.exec(box, al.py_cmd(PROBE, arg), timeout_s=60)
        got = al.last_json((r.json or {}).get("stdout") if isinstance(r.json, dict) else "")
        h.ok(got, "%s: the probe ran in the box" % front, r.describe())
        read = sorted("%s: %s" % (p, got.get(p)) for p in secrets
                      if not str(got.get(p, "ERR")).startswith("ERR"))
        h.eq(read, [], "%s: no root-only host file or directory of a shared layer is readable "
             "in the box" % front)
        for p in mine:
            h.ok(str(got.get(p, "")).startswith("ERR"), "%s: planted %s is out of reach" % (front, p),
                 got.get(p))
        h.eq([p for p in controls if not str(got.get(p, "")).startswith("SIZE")], [],
             "%s: control: world-readable files of the same layers are read in the box" % front)
        h.eq([p for p in proc if got.get(p) != "SIZE 0" and not str(got.get(p)).startswith("ERR")],
             [], "%s: host-revealing /proc files are empty or unreadable in the box" % front)
    for p, _ in planted:
        h.ok(os.path.exists(p) and not (os.stat(p).st_mode & stat.S_IROTH),
             "%s is untouched on the host" % p)
finally:
    for p, is_dir in planted:
        if is_dir:
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                os.unlink(p)
            except OSError:
                pass

h.done()
