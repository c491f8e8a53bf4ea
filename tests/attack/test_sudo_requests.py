#!/usr/bin/env python3
"""Attacks on the box's sudo socket with hand-made requests (proto/sudo.h,
docs/security.md "sudo in a box"), sent by `user` (who may sudo) from
inside the box: fds that would let init's root act beyond the three streams
it hands on (an O_PATH or directory fd as stdin, a block device, too many
fds, none), malformed requests (bad magic, a field twice, an unknown field,
an entry not NAME=VALUE, no cwd, cut short, garbage) and an oversized one
(past 160 KiB), and connections left idle. Each must be refused with a
message and run nothing (the command of each would make a marker as root),
and init must live on: sudo and execs still work afterwards. A well-formed
request by the same caller does run, so the test can fail."""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attacklib  # noqa: E402
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=120)
TOKEN = "sudo-requests-token-%d-0123456789abcdef" % os.getpid()
srv = h.start_server(token=TOKEN)
r = srv.post("/e2b/v2/sandboxes", {"timeout": 300}, headers={"X-API-Key": TOKEN}, token=None)
h.eq(r.status, 201, "an E2B sandbox", r.describe())
BOX = r.get("sandboxID") or ""


def run(cmd, user="user", t=40):
    r = srv.post("/v1/sandboxes/%s/exec" % BOX, {"command": cmd, "timeout_s": t, "user": user})
    if r.status != 200:
        return -1, "", r.describe()
    return r.get("exit_code"), r.get("stdout") or "", r.get("stderr") or ""


PROBE = r'''
import array, json, os, socket, time

def ask(req, fds=(0, 1, 2), stream=False):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(15)
    s.connect("\0agentbox-sudo")
    anc = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else []
    try:
        s.sendmsg([req], anc)
        a = s.recv(4096).decode(errors="replace").rstrip("\0")
    except OSError as e:
        a = "error: " + e.strerror
    s.close()
    return a

def req(marker, *fields):
    return b"absudo1\0" + b"".join(f + b"\0" for f in fields) if fields else b"absudo1\0"

def cmd(marker):
    return [b"f", b"d/", b"atouch", b"a/root/" + marker.encode()]

res = {}
res["good"] = ask(req("good", *cmd("good")))
opath = os.open("/", os.O_PATH)
res["opath"] = ask(req("o", *cmd("opath")), fds=(opath, 1, 2))
d = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
res["dir"] = ask(req("d", *cmd("dir")), fds=(0, d, 2))
try:
    blk = os.open("/dev/null", os.O_RDONLY)
except OSError:
    blk = 0
res["five"] = ask(req("5", *cmd("five")), fds=(0, 1, 2, d, opath))
res["none"] = ask(req("n", *cmd("none")), fds=())
res["two"] = ask(req("2", *cmd("two")), fds=(0, 1))
bad = {
    "magic": b"absudo9\0f\0d/\0atouch\0a/root/magic\0",
    "twice": b"absudo1\0f\0d/\0d/\0atouch\0a/root/twice\0",
    "unknown": b"absudo1\0f\0d/\0zx\0atouch\0a/root/unknown\0",
    "env": b"absudo1\0f\0d/\0eNOEQUALS\0atouch\0a/root/env\0",
    "nocwd": b"absudo1\0f\0atouch\0a/root/nocwd\0",
    "cut": b"absudo1\0f\0d/\0atouch\0a/root/cut",
    "flags": b"absudo1\0fEEx\0d/\0atouch\0a/root/flags\0",
    "relcwd": b"absudo1\0f\0dtmp\0atouch\0a/root/relcwd\0",
    "empty": b"",
    "garbage": os.urandom(2000),
    "big": b"absudo1\0f\0d/\0atouch\0a/root/big\0" + b"eX=" + b"y" * (180 << 10) + b"\0",
    "huge": b"absudo1\0f\0d/\0atouch\0a/root/huge\0" + b"eX=" + b"y" * (4 << 20) + b"\0",
}
for k, v in bad.items():
    res[k] = ask(v)
# connections that never send: init must not wait on them forever
idle = []
for i in range(8):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect("\0agentbox-sudo")
    idle.append(s)
res["after_idle"] = ask(req("idle", *cmd("after_idle")))
print(json.dumps(res))
'''
rc, out, err = run(attacklib.py_cmd(PROBE))
res = json.loads(out) if rc == 0 and out.startswith("{") else {}
h.ok(res.get("good") == "x0", "a well-formed request by user runs (the path the attacks take)", (rc, out, err))
for k in ("opath", "dir", "five", "none", "two"):
    h.ok(res.get(k, "").startswith("m") and "fd" in res.get(k, "") or "stdin" in res.get(k, ""),
         "fds: %s refused with a message" % k, res.get(k))
for k in ("magic", "twice", "unknown", "env", "nocwd", "cut", "flags", "relcwd", "empty", "garbage", "big"):
    h.ok(res.get(k, "").startswith("m"), "request: %s refused with a message" % k, res.get(k))
h.ok(res.get("huge", "").startswith(("m", "error")) and res.get("huge") != "x0",
     "a 4 MiB request: refused (by init, or the kernel will not carry it)", res.get("huge"))
h.ok("too large" in res.get("big", ""), "the oversized request: 'request too large'", res.get("big"))
h.ok(res.get("after_idle") == "x0", "idle connections do not stop the next request", res.get("after_idle"))

rc, out, err = run("ls /root", user="root")
made = set(out.split())
h.ok("good" in made and "after_idle" in made, "the good requests made their markers", out)
leaked = made - {"good", "after_idle"}
h.ok(not leaked, "no refused request ran anything", sorted(leaked))
rc, out, err = run("sudo id -u")
h.ok(rc == 0 and out == "0\n", "init lives on: sudo still works", (rc, out, err))
rc, out, err = run("echo alive", user="root")
h.ok(rc == 0 and out == "alive\n", "and so do execs", (rc, out, err))
h.done()
