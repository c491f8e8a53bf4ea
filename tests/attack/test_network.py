#!/usr/bin/env python3
"""Attacks on the network boundary of a box in the default mode (none:
loopback only).

Nothing here sends a packet off this machine: the box only looks at its
interfaces and routes, and tries to reach servers that this test starts on
the HOST's own loopback (TCP on 127.0.0.1 and ::1, an abstract unix socket, a
unix socket in the host's /tmp). Each host server is first reached from the
host itself (control), and counts every connection it accepts.
"""
import os
import socket
import threading

import attacklib as al
from attacklib import abtest

h = abtest.Harness()
al.sweep_stale(["/tmp/abtest-net-*.sock"])
TOKEN = "ABTESTNET" + al.token(12)
servers = []
accepted = {}


def serve(name, sock):
    sock.listen(16)
    sock.settimeout(0.5)
    accepted[name] = 0
    servers.append(sock)

    def loop():
        while True:
            try:
                c, _ = sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            accepted[name] += 1
            try:
                c.sendall((TOKEN + "-" + name + "\n").encode())
            finally:
                c.close()
    threading.Thread(target=loop, daemon=True).start()


def tcp(family, host):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, 0))
    return s


try:
    t4 = tcp(socket.AF_INET, "127.0.0.1")
    port4 = t4.getsockname()[1]
    serve("tcp4", t4)
    port6 = None
    try:
        t6 = tcp(socket.AF_INET6, "::1")
        port6 = t6.getsockname()[1]
        serve("tcp6", t6)
    except OSError:
        pass
    abstract = "\0abtest-net-" + al.token(6)
    ua = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ua.bind(abstract)
    serve("abstract", ua)
    upath = "/tmp/abtest-net-%s.sock" % al.token(6)
    up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    up.bind(upath)
    serve("unixpath", up)

    # ---- controls: the host reaches its own servers ------------------------------------
    def host_connect(fam, addr):
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(3)
        try:
            s.connect(addr)
            return s.recv(200).decode()
        finally:
            s.close()

    got = [host_connect(socket.AF_INET, ("127.0.0.1", port4)), host_connect(socket.AF_UNIX, abstract),
           host_connect(socket.AF_UNIX, upath)]
    if port6:
        got.append(host_connect(socket.AF_INET6, ("::1", port6)))
    h.ok(all(TOKEN in g for g in got), "control: the host reaches its own loopback servers", repr(got))
    base = dict(accepted)

    box = h.create(None, "--disk", "64M", "--memory", "256M", "--pids", "64")

    # ---- 1. interfaces and routes -------------------------------------------------------
    r = al.bexec(h, box, "echo '== dev'; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; "
                         "echo '== route'; tail -n +2 /proc/net/route; echo '== route6'; cat /proc/net/ipv6_route; "
                         "echo '== ip'; ip -o link 2>&1; ip route 2>&1; ip -6 route 2>&1; echo '== end'")
    out = r.out

    def sec(name):
        return out.split("== " + name + "\n", 1)[-1].split("== ", 1)[0].strip().splitlines() if "== " + name in out else None

    with open("/proc/net/dev") as f:
        host_ifs = [ln.split(":")[0].strip() for ln in f.readlines()[2:]]
    h.ok(len(host_ifs) > 1, "control: the host has interfaces besides lo (%s)" % ", ".join(host_ifs))
    h.eq(sec("dev"), ["lo"], "the box has exactly one interface, lo", r.describe())
    h.eq(sec("route"), [], "the box's IPv4 routing table is empty (no default route)", r.describe())
    v6 = sec("route6") or []
    # ::/0 entries flagged RTF_REJECT (0x200) are the kernel's "unreachable" placeholders
    h.ok(not any(f[0] == "0" * 32 and f[1] == "00" and not int(f[8], 16) & 0x200
                 for f in (ln.split() for ln in v6) if len(f) >= 10),
         "the box has no IPv6 default route", "\n".join(v6))
    h.ok(sec("ip") is not None and "LOOPBACK,UP" in out, "control: lo is up in the box", out)

    # ---- 2. the host's loopback servers ---------------------------------------------------------
    probe = r'''
import errno, socket, sys
port4, port6, abstract, upath = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
targets = [("tcp4", socket.AF_INET, ("127.0.0.1", port4)), ("abstract", socket.AF_UNIX, "\0" + abstract),
           ("unixpath", socket.AF_UNIX, upath), ("tcp4-any", socket.AF_INET, ("0.0.0.0", port4)),
           ("tcp4-127.1.2.3", socket.AF_INET, ("127.1.2.3", port4))]
if port6:
    targets.append(("tcp6", socket.AF_INET6, ("::1", port6)))
for name, fam, addr in targets:
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(addr)
        print(name, "CONNECTED", s.recv(200).decode().strip())
    except OSError as e:
        print(name, "FAILED", errno.errorcode.get(e.errno, e.errno))
    finally:
        s.close()
# control: the box's own loopback works
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
c = socket.create_connection(srv.getsockname(), 3)
a, _ = srv.accept()
a.sendall(b"box-loopback-ok")
print("control", c.recv(100).decode())
'''
    r = al.bpy(h, box, probe, port4, port6 or 0, abstract[1:], upath, t=30)
    h.contains(r.out, "control box-loopback-ok", "control: TCP over the box's own loopback works", r.describe())
    lines = {ln.split()[0]: ln for ln in r.out.splitlines() if ln.split()}
    for name in ["tcp4", "tcp4-any", "tcp4-127.1.2.3"] + (["tcp6"] if port6 else []):
        h.ok("FAILED" in lines.get(name, ""), "the box cannot connect to a TCP server on the host's loopback (%s)" % name,
             r.describe())
    h.ok("FAILED" in lines.get("abstract", ""), "the box cannot connect to the host's abstract unix socket",
         r.describe())
    h.ok("FAILED" in lines.get("unixpath", ""), "the box cannot connect to a unix socket in the host's /tmp",
         r.describe())
    h.not_contains(r.out, TOKEN, "no host server's token reached the box")
    h.eq(accepted, base, "the host servers accepted no connection from the box")

    # ---- 3. the box cannot give itself a way out -------------------------------------------------------
    r = al.bexec(h, box, "ip link add abtest0 type dummy 2>&1; echo dummy=$?; ip link add veth-abt type veth peer name veth-abt1"
                         " 2>&1; echo veth=$?; ip route add default dev lo 2>&1; echo route=$?; ip link show; "
                         "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    h.diag("box root's own network namespace: %s" % " ".join(r.out.split()))
    h.ok("veth-abt1" not in " ".join(host_ifs) and not os.path.exists("/sys/class/net/veth-abt1"),
         "a veth pair made in the box has no end on the host", r.describe())
    h.ok(not os.path.exists("/sys/class/net/abtest0"), "interfaces made in the box do not appear on the host")
finally:
    for s in servers:
        try:
            s.close()
        except OSError:
            pass
    try:
        os.unlink(upath)
    except (OSError, NameError):
        pass

h.done()
