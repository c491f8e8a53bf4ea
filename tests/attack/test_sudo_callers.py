#!/usr/bin/env python3
"""Attacks on who may use a box's sudo (docs/security.md, "sudo in a box"):
the box's init runs a command as root only for root and the box's account
`user`. An account made in the box without that right (eve, uid 1500) and a
uid with no account are refused, through the sudo command and through a
hand-made request on the socket; a process of another box reaches its own
init only (it cannot read what this box's root keeps); a user of the host
that is not root cannot reach the socket (it is abstract: it exists only
in the box's network namespace, which such a user cannot enter). What
`user` may do works, so the test can fail."""
import json
import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attacklib  # noqa: E402
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=120)
TOKEN = "sudo-callers-token-%d-0123456789abcdef" % os.getpid()
srv = h.start_server(token=TOKEN)
KEY = {"X-API-Key": TOKEN}


def sandbox():
    r = srv.post("/e2b/v2/sandboxes", {"timeout": 300}, headers=KEY, token=None)
    h.eq(r.status, 201, "an E2B sandbox", r.describe())
    return r.get("sandboxID") or ""


def run(box, cmd, user=None):
    body = {"command": cmd, "timeout_s": 20}
    if user:
        body["user"] = user
    r = srv.post("/v1/sandboxes/%s/exec" % box, body)
    if r.status != 200:
        return -1, "", r.describe()
    return r.get("exit_code"), r.get("stdout") or "", r.get("stderr") or ""


A, B = sandbox(), sandbox()
SECRET = attacklib.token()

rc, out, err = run(A, "sudo id -u", user="user")
h.ok(rc == 0 and out == "0\n", "user's sudo runs as root (what the attacks must not get)", (rc, out, err))

rc, out, err = run(A, "echo 'eve:x:1500:1500::/tmp:/bin/sh' >> /etc/passwd && "
                      "echo 'eve:x:1500:' >> /etc/group && umask 077 && echo %s > /root/secret" % SECRET)
h.eq(rc, 0, "root of box A makes eve (no sudo right) and a secret only root reads", (rc, out, err))

for who in ("eve", "1500"):
    for cmd in ("sudo id -u", "sudo -u user id -u", "sudo -n cat /root/secret", "sudo -i id -u"):
        rc, out, err = run(A, cmd, user=who)
        h.ok(rc == 1 and "0" not in out.split() and SECRET not in out and "sudoers" in err,
             "%s: `%s` is refused" % (who, cmd), (rc, out, err))

# a hand-made request on the socket, as eve: refused, nothing runs
PROBE = r'''
import json, os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect("\0agentbox-sudo")
req = b"absudo1\0f\0d/\0atouch\0a/root/by-eve\0"
s.sendmsg([req], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, bytes(memoryview(__import__("array").array("i", [0, 1, 2]))))])
print(json.dumps(s.recv(1024).decode(errors="replace")))
'''
rc, out, err = run(A, attacklib.py_cmd(PROBE), user="eve")
h.ok(rc == 0 and "not in the sudoers" in out, "eve's own request on the socket: refused", (rc, out, err))
rc, out, err = run(A, "test -e /root/by-eve && echo made || echo none")
h.eq(out, "none\n", "... and nothing ran as root")

# another box: its sudo reaches its own init, never A's
rc, out, err = run(B, "sudo cat /root/secret; sudo ls /root", user="user")
h.ok(SECRET not in out, "box B's sudo cannot read box A's root's secret", (rc, out, err))
rc, out, err = run(B, "sudo id -u", user="user")
h.ok(rc == 0 and out == "0\n", "box B's own sudo works (its own init)", (rc, out, err))


# the host: the socket is in the box's network namespace only
def box_inits():
    mine = os.readlink("/proc/self/ns/net")
    pids = []
    for p in os.listdir("/proc"):
        try:
            if not p.isdigit() or os.readlink("/proc/%s/ns/net" % p) == mine:
                continue
            nspid = [ln for ln in open("/proc/%s/status" % p) if ln.startswith("NSpid:")]
            if nspid and nspid[0].split()[-1] == "1":  # a box's PID 1: its init
                pids.append(int(p))
        except OSError:
            pass
    return pids


inits = box_inits()
h.ok(len(inits) >= 2, "the boxes' inits are found on the host", inits)
HOST_PROBE = r'''
import json, os, socket, sys
os.setgroups([]); os.setgid(65534); os.setuid(65534)
res = {}
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
try:
    s.connect("\0agentbox-sudo"); res["connect"] = "connected"
except OSError as e:
    res["connect"] = e.strerror
for pid in sys.argv[1:]:
    try:
        fd = os.open("/proc/%s/ns/net" % pid, os.O_RDONLY); os.setns(fd, 0); res[pid] = "entered"
    except OSError as e:
        res[pid] = e.strerror
print(json.dumps(res))
'''
if os.geteuid() == 0:
    p = subprocess.run([attacklib.HOST_PY, "-c", HOST_PROBE] + [str(x) for x in inits], capture_output=True,
                       text=True, timeout=20)
    res = json.loads(p.stdout or "{}")
    h.ok(res.get("connect") not in (None, "connected"), "a host user (nobody) cannot reach a sudo socket", res)
    h.ok(all(res.get(str(x)) not in (None, "entered") for x in inits),
         "nor enter a box's network namespace to reach one", res)
else:
    h.ok(True, "not root: the host-user probe needs root to become nobody (skipped)")

h.done()
