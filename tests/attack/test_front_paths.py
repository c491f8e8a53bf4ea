#!/usr/bin/env python3
"""Attacks on the host's files through every file call of the E2B and
OpenSandbox fronts: paths that try to leave the box. A secret is planted on
the host (in the test's temp dir, which no box mounts); then every file
call of both fronts (envd's /files GET and POST, octet-stream and
multipart; Filesystem Stat, ListDir, MakeDir, Move, Remove, WatchDir,
CreateWatcher; execd's files info, search, download, permissions, mv,
replace, upload, delete, directories create, list, delete) is given the
host path absolute, behind ../ runs, behind /workspace/../.., through
/proc/1/root, /proc/self/root and /proc/1/cwd, and through symlinks made in
the box that point at the host path and its folder. Each attack passes
only when it fails: no answer carries the secret or lists its name, and
afterwards the host's secret has its content and mode 0600, its folder
holds nothing new, and nothing on the host was moved, removed or chmod'ed.
(The same paths may well exist inside the box, where a write may land: a
box's own files are its own.)"""
import json
import os
import secrets
import struct
import sys
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
M = "ABTESTSECRET-" + secrets.token_hex(12)
h = abserver.ServerHarness(budget=200)
HOSTDIR = os.path.join(h.root, "hostonly-" + secrets.token_hex(4))
os.mkdir(HOSTDIR, 0o755)
HOSTP = os.path.join(HOSTDIR, "secret-" + secrets.token_hex(4))
with open(HOSTP, "w") as f:
    f.write(M + "\n")
os.chmod(HOSTP, 0o600)
SECRET_NAME = os.path.basename(HOSTP)
srv = h.start_server(name="frontpaths", token=TOKEN, config={"idle_pause": "1h", "idle_stop": "2h"})

r = srv.post("/e2b/v2/sandboxes", {"templateID": "base", "timeout": 600}, headers={"X-API-Key": TOKEN}, token=None)
h.eq(r.status, 201, "an E2B sandbox (its box serves the OpenSandbox front's execd too)", r.describe())
BOX, ETOK = r.get("sandboxID") or "none", r.get("envdAccessToken") or "none"
r = srv.post("/v1/sandboxes/%s/exec" % BOX, {"command": "mkdir -p /workspace/d && echo mine > /workspace/d/own && "
                                                       "ln -s %s /workspace/link && ln -s %s /workspace/dirlink && "
                                                       "ln -s / /workspace/rootlink" % (HOSTP, HOSTDIR)})
h.eq(r.status, 200, "symlinks in the box to the host's secret, its folder and /", r.describe())

UP = "/".join([".."] * 12)
READ_PATHS = [HOSTP, UP + HOSTP, "/workspace/" + UP + HOSTP, "/proc/1/root" + HOSTP, "/proc/self/root" + HOSTP,
              "/proc/1/cwd/" + UP + HOSTP, "/workspace/link", "/workspace/dirlink/" + SECRET_NAME,
              "/workspace/rootlink" + HOSTP, "/proc/1/root/workspace/link", "workspace/../" + UP + HOSTP]
DIR_PATHS = [HOSTDIR, UP + HOSTDIR, "/proc/1/root" + HOSTDIR, "/workspace/dirlink", "/workspace/rootlink" + HOSTDIR]
ENVD = {"E2b-Sandbox-Id": BOX, "X-Access-Token": ETOK}
EX = "/opensandbox/execd/" + BOX
q = urllib.parse.quote


def envelope(obj, flags=0):
    b = json.dumps(obj).encode()
    return struct.pack(">BI", flags, len(b)) + b


def rpc(method, body):
    return srv.request("POST", "/e2b/envd/" + method, body=body, token=None,
                       headers=dict(ENVD, **{"Content-Type": "application/json"}))


def clean(r, what, listing=False):
    """No secret in the answer (a listing: not even its name; other answers
    may echo the path asked for, which holds the name)."""
    leaked = M in r.text or (listing and SECRET_NAME in r.text)
    h.ok(not leaked and r.status != -1, "%s: no secret%s in the answer (%d)" % (
        what, " and no secret's name" if listing else "", r.status), r.describe())


# controls: the same calls do read the box's own files (so a refusal above means something)
r = srv.request("GET", "/e2b/envd/files?path=/workspace/d/own", headers=ENVD, token=None)
h.ok(r.status == 200 and r.text == "mine\n", "control: envd GET /files reads the box's own file", r.describe())
r = srv.get(EX + "/files/download?path=/workspace/d/own")
h.ok(r.status == 200 and r.text == "mine\n", "control: execd files/download reads the box's own file", r.describe())
r = rpc("filesystem.Filesystem/ListDir", {"path": "/workspace/d"})
h.ok(r.status == 200 and "own" in r.text, "control: envd ListDir lists the box's own folder", r.describe())

# ---- reads ------------------------------------------------------------------------------------
for p in READ_PATHS:
    clean(srv.request("GET", "/e2b/envd/files?path=" + q(p), headers=ENVD, token=None), "envd GET /files %s" % p)
    clean(rpc("filesystem.Filesystem/Stat", {"path": p}), "envd Stat %s" % p)
    clean(srv.get(EX + "/files/info?path=" + q(p)), "execd files/info %s" % p)
    clean(srv.get(EX + "/files/download?path=" + q(p)), "execd files/download %s" % p)
    clean(srv.post(EX + "/files/replace", {p: {"old": "ABTEST", "new": "PWNED"}}), "execd files/replace %s" % p)
for p in DIR_PATHS:
    clean(rpc("filesystem.Filesystem/ListDir", {"path": p, "depth": 3}), "envd ListDir %s" % p, listing=True)
    clean(srv.get(EX + "/directories/list?path=" + q(p)), "execd directories/list %s" % p, listing=True)
    clean(srv.get(EX + "/files/search?path=%s&pattern=*" % q(p)), "execd files/search %s" % p, listing=True)
    clean(rpc("filesystem.Filesystem/CreateWatcher", {"path": p}), "envd CreateWatcher %s" % p, listing=True)
    r = srv.request("POST", "/e2b/envd/filesystem.Filesystem/WatchDir", body=envelope({"path": p}), token=None,
                    headers=dict(ENVD, **{"Content-Type": "application/connect+json"}), timeout=5)
    h.ok(M not in r.text and SECRET_NAME not in r.text, "envd WatchDir %s: nothing of the host's folder" % p,
         r.describe())

# ---- writes, moves, removes, modes -------------------------------------------------------------
for i, d in enumerate(DIR_PATHS):
    new = "%s/new%d" % (d, i)
    clean(srv.request("POST", "/e2b/envd/files?path=" + q(new), body=b"pwned", token=None,
                      headers=dict(ENVD, **{"Content-Type": "application/octet-stream"})), "envd POST /files %s" % new)
    mp = ('--B0\r\nContent-Disposition: form-data; name="file"; filename="%s/mp%d"\r\n\r\npwned\r\n--B0--\r\n'
          % (d, i)).encode()
    clean(srv.request("POST", "/e2b/envd/files", body=mp, token=None,
                      headers=dict(ENVD, **{"Content-Type": "multipart/form-data; boundary=B0"})),
          "envd POST /files multipart %s/mp%d" % (d, i))
    clean(rpc("filesystem.Filesystem/MakeDir", {"path": "%s/dir%d" % (d, i)}), "envd MakeDir in %s" % d)
    clean(rpc("filesystem.Filesystem/Move", {"source": "/workspace/d/own", "destination": "%s/mv%d" % (d, i)}),
          "envd Move into %s" % d)
    srv.post("/v1/sandboxes/%s/exec" % BOX, {"command": "mkdir -p /workspace/d; echo mine > /workspace/d/own"})
    up = ('--XyZ\r\nContent-Disposition: form-data; name="metadata"\r\n\r\n{"path":"%s/up%d"}\r\n'
          '--XyZ\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n\r\npwned\r\n--XyZ--\r\n'
          % (d, i)).encode()
    clean(srv.request("POST", EX + "/files/upload", body=up,
                      headers={"Content-Type": "multipart/form-data; boundary=XyZ"}), "execd upload into %s" % d)
    clean(srv.post(EX + "/directories", {"%s/mk%d" % (d, i): {"mode": 755}}), "execd directories into %s" % d)
    clean(srv.post(EX + "/files/mv", [{"src": "/workspace/d/own", "dest": "%s/emv%d" % (d, i)}]),
          "execd files/mv into %s" % d)
    srv.post("/v1/sandboxes/%s/exec" % BOX, {"command": "mkdir -p /workspace/d; echo mine > /workspace/d/own"})
for i, p in enumerate(READ_PATHS):
    clean(rpc("filesystem.Filesystem/Move", {"source": p, "destination": "/workspace/stolen%d" % i}),
          "envd Move %s into the box" % p)
    clean(srv.post(EX + "/files/mv", [{"src": p, "dest": "/workspace/estolen%d" % i}]),
          "execd files/mv %s into the box" % p)
    clean(srv.post(EX + "/files/permissions", {p: {"mode": 777}}), "execd files/permissions %s" % p)
    clean(srv.post(EX + "/files/permissions", {p: {"mode": 644, "owner": "nobody"}}),
          "execd files/permissions owner %s" % p)
r = srv.post("/v1/sandboxes/%s/exec" % BOX, {"command": "cat /workspace/stolen* /workspace/estolen* 2>/dev/null; true"})
h.ok(r.status == 200 and M not in (r.get("stdout") or ""), "nothing moved into the box holds the host's secret",
     r.describe())
for p in READ_PATHS:
    clean(rpc("filesystem.Filesystem/Remove", {"path": p}), "envd Remove %s" % p)
    clean(srv.request("DELETE", EX + "/files?path=" + q(p)), "execd DELETE files %s" % p)
for p in DIR_PATHS:
    clean(rpc("filesystem.Filesystem/Remove", {"path": p}), "envd Remove %s" % p)
    clean(srv.request("DELETE", EX + "/directories?path=" + q(p)), "execd DELETE directories %s" % p)

# ---- the host is untouched ----------------------------------------------------------------------
h.ok(os.path.isfile(HOSTP) and open(HOSTP).read() == M + "\n", "the host's secret is still there, unchanged")
h.eq(os.stat(HOSTP).st_mode & 0o7777, 0o600, "the host's secret's mode is unchanged")
h.eq(os.stat(HOSTP).st_uid, 0, "the host's secret's owner is unchanged")
h.eq(sorted(os.listdir(HOSTDIR)), [SECRET_NAME], "nothing was written, made or moved into the host's folder")
h.eq(os.stat(HOSTDIR).st_mode & 0o7777, 0o755, "the host's folder's mode is unchanged")
h.done()
