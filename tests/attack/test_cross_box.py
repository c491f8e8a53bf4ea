#!/usr/bin/env python3
"""Attacks from one box (B) on another (A): find A's files, see or signal A's
processes, reach A's loopback servers, abstract sockets and SysV IPC, and
harm A by being stopped or destroyed. Every probe B runs, A runs too, on its
own things: A must find them, so B's empty result means isolation, not a
broken probe. Last, the host uids behind the boxes' root must not overlap -
within one data dir, and across two agentbox data dirs on the same host.
"""
import json
import os
import time

import attacklib as al
from attacklib import abtest

h = abtest.Harness()
# The stand-in cluster (tests/k8s) runs every pod in the host's network namespace (host network
# mode, a loopback address per pod): the boxes share a loopback there, which a real cluster's pods
# never do. Only the checks of that are skipped on it.
STANDIN = h.backend == "kubernetes" and not os.environ.get("AGENTBOX_TEST_KUBECONFIG")
SHARED_NET = "the stand-in cluster's pods share the host's network namespace (host network mode)"
R = al.token(6)
S = "ABTESTXBOX" + al.token(16)
PORT = 20000 + int.from_bytes(os.urandom(2), "big") % 20000
SHMKEY = 0x5A000000 + int.from_bytes(os.urandom(2), "big")
MARK = "abtest-xbox-" + R
data2 = None
c_box = None

a = h.create(None, "--disk", "64M", "--memory", "256M", "--pids", "128")
b = h.create(None, "--disk", "64M", "--memory", "256M", "--pids", "128")

try:
    # ---- A plants its secrets, a process, a server, an abstract socket, SysV IPC --------------
    plant = r'''
set -e
for d in /workspace /tmp /usr/local /root /dev/shm /var/tmp /run /etc; do echo "%(S)s" > $d/secret-%(R)s; done
nohup bash -c 'exec -a %(MARK)s sleep 1000' >/dev/null 2>&1 &
nohup python3 -c '
import os, socket, threading, time
def serve(s):
    while True:
        c, _ = s.accept()
        c.sendall(b"%(S)s-tcp\n")
        c.close()
t = socket.socket(); t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind(("127.0.0.1", %(PORT)d)); t.listen(8)
u = socket.socket(socket.AF_UNIX); u.bind("\0abtest-%(R)s"); u.listen(8)
for s in (t, u):
    threading.Thread(target=serve, args=(s,), daemon=True).start()
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print("shmid", libc.shmget(%(SHMKEY)d, 4096, 0o1666), flush=True)
time.sleep(1000)
' >/tmp/server.log 2>&1 &
sleep 1
cat /tmp/server.log
echo planted
''' % {"S": S, "R": R, "MARK": MARK, "PORT": PORT, "SHMKEY": SHMKEY}
    r = al.bexec(h, a, plant, t=30)
    h.contains(r.out, "planted", "box A planted its secrets and started its processes", r.describe())

    # The same probe for both boxes.
    probe = r'''
echo "== files"
find / -path /proc -prune -o -name "secret-%(R)s" -print 2>/dev/null
grep -rsF -l "%(S)s" /workspace /tmp /root /dev/shm /var/tmp /run /etc /mnt /home /srv /usr/local/secret-%(R)s 2>/dev/null
echo "== procs"
for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $f; echo; done | grep -F "%(MARK)s" | grep -v grep
echo "== net"
python3 -c '
import socket
for fam, addr in ((socket.AF_INET, ("127.0.0.1", %(PORT)d)), (socket.AF_UNIX, "\0abtest-%(R)s")):
    s = socket.socket(fam)
    s.settimeout(3)
    try:
        s.connect(addr)
        print("CONNECTED", fam, s.recv(200).decode().strip())
    except OSError as e:
        print("REFUSED", fam, e.errno)
'
echo "== ipc"
grep -i "%(SHMHEX)s" /proc/sysvipc/shm | head -3
echo "== end"
''' % {"S": S, "R": R, "MARK": MARK, "PORT": PORT, "SHMHEX": "%d" % SHMKEY}

    ra = al.bexec(h, a, probe, t=60)
    rb = al.bexec(h, b, probe, t=60)
    h.ok("== end" in ra.out and "== end" in rb.out, "the probe ran in both boxes", ra.describe() + "\n" + rb.describe())

    def section(out, name):
        return out.split("== " + name, 1)[-1].split("\n== ", 1)[0] if "== " + name in out else ""

    h.contains(section(ra.out, "files"), "/root/secret-" + R, "control: A finds its own secret files", ra.describe())
    h.contains(section(ra.out, "procs"), MARK, "control: A sees its own marked process")
    h.contains(section(ra.out, "net"), S + "-tcp", "control: A connects to its own loopback TCP server")
    h.ok(section(ra.out, "net").count("CONNECTED") == 2, "control: A connects to its own abstract unix socket",
         section(ra.out, "net"))
    h.ok(section(ra.out, "ipc").strip(), "control: A sees its own SysV shared memory segment", ra.describe())

    h.eq(section(rb.out, "files").strip(), "", "B finds none of A's secret files (/workspace /tmp /usr/local /root "
         "/dev/shm /var/tmp /run /etc)", rb.describe())
    if STANDIN:  # (what B's network probe read from A's server is the skipped check below)
        h.not_contains(rb.out.replace(section(rb.out, "net"), ""), S,
                       "A's secret content appears nowhere in B but through the shared loopback")
    else:
        h.not_contains(rb.out, S, "A's secret content appears nowhere in B")
    h.eq(section(rb.out, "procs").strip(), "", "B cannot see A's processes")
    if STANDIN:
        h.skip("B cannot reach A's loopback TCP server nor its abstract unix socket", SHARED_NET)
    else:
        h.ok("CONNECTED" not in section(rb.out, "net") and section(rb.out, "net").count("REFUSED") == 2,
             "B cannot reach A's loopback TCP server nor its abstract unix socket", section(rb.out, "net"))
    h.eq(section(rb.out, "ipc").strip(), "", "B cannot see A's SysV shared memory")

    # B can use the same port for itself: its loopback is its own.
    if STANDIN:
        h.skip("B binds the same loopback port as A (separate network namespaces)", SHARED_NET)
    else:
        r = al.bpy(h, b, "import socket\ns = socket.socket()\ns.bind(('127.0.0.1', %d))\ns.listen(1)\nprint('BOUND')"
                   % PORT)
        h.contains(r.out, "BOUND", "B binds the same loopback port as A (separate network namespaces)",
                   r.describe())

    # ---- B lashes out ------------------------------------------------------------------------------
    al.bexec(h, b, "kill -9 -1; pkill -9 -f %s; pkill -9 sleep; pkill -9 python3" % MARK, t=10)
    r = al.bexec(h, a, "ps -eo args | grep -F %s | grep -v grep | head -1; cat /tmp/server.log" % MARK)
    h.contains(r.out, MARK, "A's process survives kill -9 -1 and pkill in B", r.describe())

    # ---- uids ----------------------------------------------------------------------------------------------
    def host_uid(box, data=None):
        args = ["inspect", box]
        rr = h.run(*args) if data is None else h.run("--data", data, *args, data=False)
        try:
            pid = json.loads(rr.out)["init_pid"]
            with open("/proc/%d/status" % pid) as f:
                return int([ln for ln in f if ln.startswith("Uid:")][0].split()[1])
        except (ValueError, KeyError, OSError, IndexError):
            return None

    # (native only: a Docker box's root is the host's uid 0, without a user
    # namespace per box; docs/backends.md says so)
    if h.native:
        ua, ub = host_uid(a), host_uid(b)
        h.ok(ua and ub and ua >= 65536 and ub >= 65536, "both boxes' root runs as an unprivileged host uid (%s, %s)" % (ua, ub))
        h.ok(ua and ub and abs(ua - ub) >= 65536, "A's and B's uid ranges do not overlap (%s vs %s)" % (ua, ub))
        data2 = os.path.join(h.root, "data2")
        os.mkdir(data2, 0o700)
        c_box = "c-" + R
        rr = h.run("--data", data2, "create", "--id", c_box, "--disk", "64M", data=False, timeout=60)
        uc = host_uid(c_box, data2)
        h.ok(rr.rc == 0 and uc, "a box in a second data dir on the same host starts", rr.describe())
        h.ok(ua and uc and abs(ua - uc) >= 65536,
             "boxes of two agentbox data dirs on one host get disjoint host uid ranges (A %s vs C %s)" % (ua, uc))
    elif h.backend == "kubernetes":
        h.skip("boxes' root runs as disjoint unprivileged host uids",
               "a pod's init runs as root of its node (runAsUser 0, docs/kubernetes.md), in the "
               "container runtime's user namespace if the cluster gives it one")
    else:
        h.skip("boxes' root runs as disjoint unprivileged host uids",
               "the Docker backend runs a container's root as host uid 0 (docs/backends.md)")

    # ---- stopping and destroying B leaves A alone -------------------------------------------------------------
    before = al.bexec(h, a, "cat /workspace/secret-%s /usr/local/secret-%s /root/secret-%s" % (R, R, R)).out
    r = h.run("stop", b)
    h.eq(r.rc, 0, "B stops", r.describe())
    r = h.rm(b)
    h.eq(r.rc, 0, "B is destroyed", r.describe())
    r = al.bexec(h, a, "ps -eo args | grep -F %s | grep -v grep | head -1; cat /workspace/secret-%s /usr/local/secret-%s "
                       "/root/secret-%s" % (MARK, R, R, R))
    h.contains(r.out, MARK, "A's process survives B's stop and destruction", r.describe())
    h.ok(before.count(S) == 3 and r.out.count(S) == 3, "A's files are intact after B is destroyed", r.describe())
    r = al.bpy(h, a, "import socket\ns = socket.create_connection(('127.0.0.1', %d), 3)\nprint(s.recv(200).decode())" % PORT)
    h.contains(r.out, S + "-tcp", "A's server still answers after B is gone", r.describe())
finally:
    if c_box and data2:
        h.run("--data", data2, "rm", c_box, data=False, timeout=30)

h.done()
