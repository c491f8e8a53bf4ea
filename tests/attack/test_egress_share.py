#!/usr/bin/env python3
"""Fair shares of the egress proxy (issue 24, item 6). The check passes only
when the attack fails.

The attack: app A makes 16 allowlist boxes and has each open 300 connections
to its proxy (127.0.0.1:3128) at the same moment, sending nothing. The proxy
holds every connection it accepts for up to its head timeout (10 s), with a
thread each; it serves 256 per box and 4096 in all. Until this was fixed,
A's 16 boxes took all 4096 and app B's box could not get a single answer
from the proxy until A let go.

Must hold: while A holds all it can, B's box is answered by the proxy at
once (here: a 403 for a host its rules do not list, which the proxy decides
before any lookup). A gets no more than network_proxy_max_per_app (default
1024) at once: a further box of A waits too.

Nothing here can send a packet off this machine: the test moves itself (and
so the server and its boxes) into network and mount namespaces of its own
first, with loopback only; no connection leaves the proxy (nothing is
allowed, nothing is looked up)."""
import ctypes
import os
import subprocess
import sys
import time

# ---- our own network and mount namespaces, before any thread exists --------------
CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
_isolated = os.geteuid() == 0 and _libc.unshare(CLONE_NEWNS | CLONE_NEWNET) == 0
if _isolated:
    _isolated = subprocess.run(["mount", "--make-rprivate", "/"]).returncode == 0 and \
        subprocess.run(["ip", "link", "set", "lo", "up"]).returncode == 0

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
from attacklib import py_cmd  # noqa: E402

h = abserver.ServerHarness(budget=200)
if not _isolated:
    h.skip_all("needs root to make its own network and mount namespaces (nothing may leave the machine)")

N_A = 16      # A's boxes: 16 x 256 (the proxy's cap per box) = 4096, the proxy's cap in all
PER_BOX = 300  # connections each of A's boxes opens

S = h.start_server(config={"idle_pause": "1h", "idle_stop": "2h"})
POLICY = {"mode": "allowlist", "allow": ["allowed.test"]}


def make_box(app, chat):
    r = S.post("/v1/sandboxes", {"app_id": app, "user_id": "u", "chat_id": chat, "network": POLICY})
    h.eq(r.status, 201, "an allowlist box of %s" % app, r.describe())
    return r.get("id") or "none"


A = [make_box("appa", "a%d" % i) for i in range(N_A)]
A_IDLE = make_box("appa", "idle")  # A's box that holds nothing
B = make_box("appb", "b")

PROBE = r'''
import socket, sys, time
t0 = time.monotonic()
s = socket.create_connection(("127.0.0.1", 3128), timeout=2)
s.settimeout(float(sys.argv[1]))
s.sendall(b"CONNECT unlisted.test:443 HTTP/1.1\r\nHost: unlisted.test:443\r\n\r\n")
try:
    d = s.recv(200)
except socket.timeout:
    d = b"TIMEOUT"
print("PROBE %r %.2f" % (d.split(b"\r\n")[0], time.monotonic() - t0))
'''

# control: B's proxy answers while nobody else uses the proxy
r = S.exec(B, py_cmd(PROBE, 5), timeout_s=15)
h.ok("403" in (r.get("stdout") or ""), "control: app B's box is answered by its proxy (403 unlisted)",
     r.describe())

# A's boxes all open PER_BOX connections at START and hold them, sending nothing.
HOLD = r'''
import socket, sys, time
start, n = float(sys.argv[1]), int(sys.argv[2])
time.sleep(max(0, start - time.time()))
socks = []
for _ in range(n):
    s = socket.socket()
    s.setblocking(False)
    s.connect_ex(("127.0.0.1", 3128))
    socks.append(s)
time.sleep(12)
'''
start = time.time() + 6.0  # room for 16 execs on a loaded machine
for box in A:
    r = S.exec(box, "setsid nohup %s >/dev/null 2>&1 </dev/null &" % py_cmd(HOLD, "%.3f" % start, PER_BOX))
    h.eq(r.get("exit_code"), 0, "box %s of app A starts holding proxy connections" % box, r.describe())
left = start - time.time()
h.ok(left > 0.5, "A's boxes were all told before their start", "%.2fs left" % left)
time.sleep(max(0, left) + 2.0)  # A's connections are accepted (all the proxy gives it)

# The attack: is B's box still answered while A holds all it can (A's hold lasts 10 s, the
# proxy's head timeout, from the start)?
r = S.exec(B, py_cmd(PROBE, 4), timeout_s=15)
out = r.get("stdout") or ""
h.ok(time.time() - start < 9.5, "the probe ran while A held its connections",
     "%.1fs after A's start" % (time.time() - start))
h.ok("403" in out, "app B's box is answered by the proxy while app A holds all the tunnels it can",
     r.describe())
# and A is at its cap: its own idle box waits like the rest of A's connections
r = S.exec(A_IDLE, py_cmd(PROBE, 2), timeout_s=15)
h.ok("TIMEOUT" in (r.get("stdout") or ""), "app A at its cap gets no more tunnels, from any of its boxes",
     r.describe())
h.done()
