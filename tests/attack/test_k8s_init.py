#!/usr/bin/env python3
"""Attacks on the TCP door of a pod's agentbox-init (kubernetes backend, on
the stand-in cluster). Each passes only when the attack fails:
- a client without any secret speaks the init protocol to box B's pod
  address: it must get no answer (a PING, a forged EXEC that would write a
  marker);
- box A's root reads its own init secret (mounted in its pod) and uses it
  against box B's init: the handshake must fail and no command may run in B;
- the same two with PORT (init's relay to a port on its pod's loopback):
  box B's loopback server must see no connection;
- a control: the same client code with A's secret against A's own init is
  accepted, and its PORT reaches A's own server (so the attacks above are
  not failing for a broken client).
"""
import base64
import hashlib
import hmac
import os
import secrets
import socket
import struct
import sys
import time

os.environ["AGENTBOX_TEST_BACKEND"] = "kubernetes"
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abtest  # noqa: E402

PORT = 7433
h = abtest.Harness(need_root=True)
cl = h.cluster
if getattr(cl, "real", False):
    h.skip_all("the stand-in cluster's own checks (it kills containers, restarts its API server and "
               "reaches pod IPs from the test host); not run against AGENTBOX_TEST_KUBECONFIG")


def pod_ip(box):
    p = cl.api.must("GET", "/api/v1/namespaces/%s/pods/ab-%s" % (cl.namespace, box))
    return p["status"]["podIP"]


def frame(ftype, fields):
    """An init protocol frame: u32 type | u32 len | fields (u32 tag | u32 len | value)."""
    payload = b"".join(struct.pack("<II", t, len(v)) + v for t, v in fields)
    return struct.pack("<II", ftype, len(payload)) + payload


def mac(secret, label, nc, ns):
    return hmac.new(secret, label + b"\0" + nc + ns, hashlib.sha256).digest()


def recv_n(s, n):
    out = b""
    while len(out) < n:
        b = s.recv(n - len(out))
        if not b:
            break
        out += b
    return out


def handshake(ip, secret):
    """Runs the client's side of the handshake (docs/protocol.md) with
    secret; returns (accepted, why, socket)."""
    s = socket.create_connection((ip, PORT), timeout=5)
    nc = secrets.token_bytes(32)
    s.sendall(b"ABH1" + nc)
    ch = recv_n(s, 68)
    if len(ch) != 68 or ch[:4] != b"ABH1":
        return False, "no challenge (%r)" % ch[:8], s
    ns = ch[4:36]
    init_ok = hmac.compare_digest(ch[36:], mac(secret, b"agentbox-init tcp v1 init", nc, ns))
    # an attacker sends its proof whatever the challenge's MAC says
    s.sendall(mac(secret, b"agentbox-init tcp v1 client", nc, ns))
    acc = recv_n(s, 4)
    return acc == b"ABOK", "init's MAC %s, answer %r" % ("valid" if init_ok else "invalid", acc), s


def answer_of(s, t=3):
    s.settimeout(t)
    try:
        return recv_n(s, 8)
    except (socket.timeout, OSError) as e:
        return repr(e).encode()


def port_frame(port):
    """PORT (type 44) with PORT (tag 110) and TIMEOUT_MS (tag 6)."""
    return frame(44, [(110, struct.pack("<I", port)), (6, struct.pack("<I", 3000))])


a, b = "atk-a-" + secrets.token_hex(3), "atk-b-" + secrets.token_hex(3)
for box in (a, b):
    h.create(box, timeout=120)
ip_a, ip_b = pod_ip(a), pod_ip(b)
h.diag("pods: %s at %s, %s at %s" % (a, ip_a, b, ip_b))

# A server on each box's loopback that counts its connections (the stand-in's pods share the
# host's loopback: a port each).
SERVE = ("nohup python3 -c 'import socket\ns = socket.socket(); s.setsockopt(socket.SOL_SOCKET, "
         "socket.SO_REUSEADDR, 1)\ns.bind((\"127.0.0.1\", %d)); s.listen(8)\nwhile True:\n"
         "    c, _ = s.accept(); open(\"/workspace/hits\", \"a\").write(\"hit\\n\"); "
         "c.sendall(b\"%s\"); c.close()' >/dev/null 2>&1 & sleep 1; echo up")
PORT_A = 20000 + secrets.randbelow(20000)
PORT_B = PORT_A + 1
for box, port in ((a, PORT_A), (b, PORT_B)):
    r = h.run("exec", box, "--", SERVE % (port, "served-by-" + box))
    h.eq(r.out, "up\n", "a loopback server in %s" % box, r.describe())

# ---- no secret at all ---------------------------------------------------------

s = socket.create_connection((ip_b, PORT), timeout=5)
s.sendall(frame(1, []) + b"\0" * 64)  # a PING (type 1) padded past the HELLO's size
got = answer_of(s)
h.ok(got == b"" or got.startswith(b"ConnectionResetError"),
     "a PING without a handshake is met with a silent close (no frame)", repr(got))
s.close()

marker = "/workspace/forged-" + secrets.token_hex(4)
s = socket.create_connection((ip_b, PORT), timeout=5)
# EXEC (type 2) with COMMAND (tag 1): `touch MARKER`, sent raw
s.sendall(frame(2, [(1, ("touch %s" % marker).encode() + b"\0")]))
answer_of(s)
s.close()
r = h.run("exec", b, "--", "test -e %s && echo present || echo absent" % marker)
h.eq(r.out, "absent\n", "an EXEC sent without a handshake runs nothing in box B", r.describe())

s = socket.create_connection((ip_b, PORT), timeout=5)
s.sendall(port_frame(PORT_B) + b"\0" * 64)
got = answer_of(s)
h.ok(got == b"" or got.startswith(b"ConnectionResetError"),
     "a PORT without a handshake is met with a silent close (no frame)", repr(got))
s.close()

# ---- box A's own secret, read inside A, against B's init ---------------------

r = h.run("exec", a, "--", "base64 -w0 /.agentbox/secret/init-secret")
h.eq(r.rc, 0, "box A's root can read its own init secret (the attacker's starting point)",
     r.describe())
key_a = base64.b64decode(r.out.strip() or "")
h.eq(len(key_a), 32, "... 32 bytes")

ok, why, s = handshake(ip_b, key_a)
h.ok(not ok, "A's secret against B's init: refused", why)
if ok:
    s.sendall(frame(2, [(1, ("touch %s" % marker).encode() + b"\0")]))
    answer_of(s)
s.close()
r = h.run("exec", b, "--", "test -e %s && echo present || echo absent" % marker)
h.eq(r.out, "absent\n", "... and nothing ran in box B", r.describe())

ok, why, s = handshake(ip_b, key_a)
if ok:
    s.sendall(port_frame(PORT_B))
    answer_of(s)
s.close()
time.sleep(0.5)
r = h.run("exec", b, "--", "cat /workspace/hits 2>/dev/null | wc -l")
h.eq(r.out.strip(), "0", "A's secret against B's init: no PORT connection reached B's loopback server",
     r.describe())

ok_a, why_a, s = handshake(ip_a, key_a)
h.ok(ok_a, "control: the same client with A's secret is accepted by A's init", why_a)
if ok_a:
    s.sendall(port_frame(PORT_A))
    head = answer_of(s)
    body = answer_of(s) if head[:4] == struct.pack("<I", 0x200) else b""
h.ok(ok_a and head[:4] == struct.pack("<I", 0x200) and body.startswith(b"served-b"),
     "control: ... and its PORT reaches A's own loopback server", repr((head, body)))
s.close()

h.done()
