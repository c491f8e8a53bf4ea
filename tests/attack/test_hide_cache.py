#!/usr/bin/env python3
"""Attacks on the persisted walk of root-only host files (docs/security.md,
"Root-only host files"): a start that does not watch the host (the CLI's
create) starts from DATA/hide.cache and trusts every directory whose
(dev, ino, mtime, ctime) did not change since. Passes only when what was made
root-only on the host *after* the cache was written is out of reach in a box
the CLI starts afterwards:
- a 0600 file new in /etc, a 0640 one in /var/lib/dpkg, a 0600 one two
  levels down in a directory of /usr/share that existed (and was trusted)
  when the cache was written;
- a directory of /usr/share, world-readable when the cache was written,
  chmod'ed 0700 since (its ctime, not its parent's mtime, changes);
- the same after the cache was replaced by garbage;
- a world-readable file of a trusted directory chmod'ed 0600 in place (no
  directory changes: the one thing the cache cannot see) while a server runs
  on the same data folder: the server's watch sees it, walks again at its
  next start and rewrites the cache, so the CLI's next box hides it too;
and the cache itself is 0600 in the data folder. Each is tried by reading
it, then after a chmod from box root (which owns it in the box) that would
copy it up readable. Controls: the entries exist on the host, and the box
started before the change read the then world-readable files."""
import json
import os
import shutil
import stat
import time

import attacklib as al
import abserver

h = abserver.ServerHarness(budget=150, timeout=120)
tok = al.token()
made = []  # host paths to remove, deepest last

PROBE = r'''
import json, os, sys
out = {}
def attempt(p):
    try:
        if os.path.isdir(p):
            got = "LIST %d" % len(os.listdir(p))
            for n in os.listdir(p):
                q = os.path.join(p, n)
                if os.path.isfile(q):
                    with open(q, "rb") as f:
                        got += " READ " + f.read(64).decode(errors="replace")
            return got
        with open(p, "rb") as f:
            return "READ " + f.read(64).decode(errors="replace")
    except OSError as e:
        return "ERR %d" % e.errno
for p in json.loads(sys.argv[1]):
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
print(json.dumps(out))
'''


def probe(box, paths):
    r = al.bpy(h, box, PROBE, json.dumps(paths), t=30)
    return al.last_json(r.out) or {"probe failed": r.describe()}


def write(path, mode, content):
    with open(path, "w") as f:
        f.write(content)
    os.chmod(path, mode)
    made.append(path)


try:
    d1 = "/usr/share/ab-hidecache-%s" % tok          # opened now, closed later
    d2 = "/usr/share/ab-hidecache2-%s" % tok         # gets a secret two levels down
    os.mkdir(d1, 0o755)
    made.append(d1)
    write(d1 + "/open.txt", 0o644, "open-" + tok)
    os.mkdir(d2, 0o755)
    made.append(d2)
    os.mkdir(d2 + "/sub", 0o755)
    write(d2 + "/sub/ok.txt", 0o644, "ok-" + tok)
    inplace = d2 + "/sub/inplace.txt"
    write(inplace, 0o644, "inplace-" + tok)
    # Directories changed within 2 s of a walk are never trusted: let these
    # age so that the cache does trust them.
    time.sleep(3)

    a = h.create()
    cache = os.path.join(h.data, "hide.cache")
    st = os.stat(cache) if os.path.exists(cache) else None
    h.ok(st and stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == 0,
         "the CLI's start persisted the walk, root's and 0600", repr(st))
    got = probe(a, [d1, d2 + "/sub/ok.txt"])
    h.ok(str(got.get(d1, "")).startswith("LIST") and "open-" + tok in got.get(d1, ""),
         "control: before the change the box lists and reads the open directory", repr(got))

    secrets = ["/etc/ab-hidecache-%s" % tok, "/var/lib/dpkg/ab-hidecache-%s" % tok,
               d2 + "/sub/new-%s.key" % tok]
    write(secrets[0], 0o600, "etc-" + tok)
    write(secrets[1], 0o640, "dpkg-" + tok)
    write(secrets[2], 0o600, "deep-" + tok)
    os.chmod(d1, 0o700)
    secrets.append(d1)
    h.ok(all(os.path.exists(p) for p in secrets), "control: the secrets exist on the host")

    for round_, prep in (("after the cache was written", None),
                         ("after the cache was replaced by garbage", b"abhide\n\0garbage")):
        if prep is not None:
            with open(cache, "wb") as f:
                f.write(prep)
        b = h.create()
        got = probe(b, secrets + [d2 + "/sub/ok.txt"])
        h.ok(str(got.get(d2 + "/sub/ok.txt", "")).startswith("READ ok-"),
             "%s: control: a world-readable file next to them is read" % round_, repr(got))
        read = sorted("%s: %s" % (p, got.get(p)) for p in secrets
                      if not str(got.get(p, "ERR")).startswith("ERR"))
        h.eq(read, [], "%s: no secret made root-only on the host since is readable in a box the "
             "CLI starts" % round_)
        h.rm(b)

    # Let the directories changed above age past 2 s and have the CLI persist
    # a walk that trusts them: only the server can then tell of the chmod.
    time.sleep(3)
    h.rm(h.create())
    srv = h.start_server(config={"limits": {"disk": "64M", "memory": "256M", "timeout": "60s"}})
    r = srv.post("/v1/sandboxes", {"id": "srvbox1"})
    h.eq(r.status, 201, "server: a box (its first walk, watched from then on)", r.describe())
    os.chmod(inplace, 0o600)
    secrets.append(inplace)
    r = srv.post("/v1/sandboxes", {"id": "srvbox2"})
    h.eq(r.status, 201, "server: another box after the chmod (walks again)", r.describe())
    b = h.create()
    got = probe(b, [inplace, d2 + "/sub/ok.txt"])
    h.ok(str(got.get(d2 + "/sub/ok.txt", "")).startswith("READ ok-"),
         "server: control: its world-readable neighbour is read", repr(got))
    h.ok(str(got.get(inplace, "")).startswith("ERR"),
         "server: a file chmod'ed 0600 in place is out of reach in the CLI's next box", repr(got))
    for p in secrets:
        h.ok(not os.stat(p).st_mode & stat.S_IROTH, "%s is untouched on the host" % p)
finally:
    for p in reversed(made):
        if os.path.isdir(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                os.unlink(p)
            except OSError:
                pass

h.done()
