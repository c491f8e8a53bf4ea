#!/usr/bin/env python3
"""Attacks on the process boundary: see, signal, trace or take over processes
outside the box (or the box's own init), and reach the kernel through /proc,
/sys and the kernel log.

Host processes used as targets are started by this test with a random marker
in their argv, and one of them runs under the box's own host uid (so only the
pid namespace and Landlock's signal scope stand between it and the box).
Every blocked probe has a control that shows the probe itself works.
"""
import json
import os
import signal
import socket
import subprocess
import time

import attacklib as al
from attacklib import abtest

h = abtest.Harness()
MARK = "abtest-hostproc-" + al.token(8)
procs = []


def host_sleeper(argv0, uid=None):
    def pre():
        os.setsid()
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
    p = subprocess.Popen([argv0, "1000"], executable="/bin/sleep", preexec_fn=pre,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs.append(p)
    return p


def alive(p):
    if p.poll() is not None:
        return False
    try:
        with open("/proc/%d/stat" % p.pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


try:
    box = h.create(None, "--disk", "64M", "--memory", "256M", "--pids", "128")
    info = al.inspect(h, box)
    init_pid = info.get("init_pid")
    h.ok(init_pid, "inspect reports the box's init pid", repr(info))
    with open("/proc/%d/status" % init_pid) as f:
        box_uid = int([ln for ln in f if ln.startswith("Uid:")][0].split()[1])
    h.ok(box_uid >= 65536, "the box's init runs under an unprivileged host uid (%d)" % box_uid)

    root_proc = host_sleeper(MARK + "-root")
    same_uid_proc = host_sleeper(MARK + "-sameuid", uid=box_uid)
    time.sleep(0.2)
    h.ok(alive(root_proc) and alive(same_uid_proc), "control: the host target processes run",
         "root: %s, same uid: %s" % (root_proc.poll(), same_uid_proc.poll()))

    # ---- 1. host processes are invisible ------------------------------------------
    r = al.bexec(h, box, "(exec -a %s-boxown sleep 30) & sleep 0.3; ps -eo pid,user,args; "
                         "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done; ls /proc | grep -c '^[0-9]'; "
                         "kill %%1" % MARK)
    h.contains(r.out, MARK + "-boxown", "control: the box sees its own marked process", r.describe())
    h.not_contains(r.out, MARK + "-root", "a host root process is invisible in the box (ps, /proc/*/cmdline)")
    h.not_contains(r.out, MARK + "-sameuid", "a host process with the box's own uid is invisible in the box")
    nums = [int(x) for x in r.out.split() if x.isdigit()]
    h.ok(nums and nums[-1] < 30, "the box's /proc lists only a handful of processes (%s)" % (nums[-1:] or "?"))
    r = al.bexec(h, box, "for p in %d %d %d; do cat /proc/$p/cmdline 2>/dev/null | tr '\\0' ' '; done; echo"
                 % (root_proc.pid, same_uid_proc.pid, os.getpid()))
    h.not_contains(r.out, MARK, "the host pids of the targets do not lead to them in the box's /proc")

    # ---- 2. signals to host pids ----------------------------------------------------------
    sig_probe = r'''
import errno, json, os, signal, sys, ctypes
res = {}
for name, pid in (("root", int(sys.argv[1])), ("sameuid", int(sys.argv[2]))):
    for sig in (0, signal.SIGKILL):
        try:
            os.kill(pid, sig)
            res["%s/%d" % (name, sig)] = "OK"
        except OSError as e:
            res["%s/%d" % (name, sig)] = errno.errorcode[e.errno]
    try:
        fd = os.pidfd_open(pid)
        res[name + "/pidfd"] = "OK"
        signal.pidfd_send_signal(fd, signal.SIGKILL)
        res[name + "/pidfd_kill"] = "OK"
    except OSError as e:
        res.setdefault(name + "/pidfd", errno.errorcode[e.errno])
print(json.dumps(res))
'''
    r = al.bpy(h, box, sig_probe, root_proc.pid, same_uid_proc.pid)
    res = al.last_json(r.out)
    h.eq(len(res), 6, "control: the signal probe ran all its calls", r.describe())
    # broadcast: every process the box may signal (this also ends the exec itself)
    al.bexec(h, box, "kill -9 -1; python3 -c 'import os, signal; os.kill(-1, signal.SIGKILL)'", t=10)
    time.sleep(0.3)
    h.ok(alive(root_proc), "kill -9 of a host root process's pid from the box: the process survives")
    h.ok(alive(same_uid_proc), "kill -9 / pidfd / kill(-1) at a host process running as the box's uid: it survives")
    h.ok(all(v != "OK" for v in res.values()), "no signal or pidfd call reached a host pid", json.dumps(res))
    r = al.bexec(h, box, "echo still-here")
    h.contains(r.out, "still-here", "the box still runs commands after kill -9 -1 inside it", r.describe())

    # ---- 3. ptrace ----------------------------------------------------------------------------
    ptrace_probe = r'''
import ctypes, errno, json, os, signal, subprocess, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
child = subprocess.Popen(["sleep", "30"])
time.sleep(0.1)
res = {}
def attach(pid):
    rv = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH
    if rv == 0:
        os.waitpid(pid, 0) if pid == child.pid else None
        libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
        return "OK"
    return errno.errorcode.get(ctypes.get_errno(), "?")
res["child"] = attach(child.pid)
if len(sys.argv) > 1:
    res["init"] = attach(1)
    rv = libc.ptrace(0x4206, 1, None, None)  # PTRACE_SEIZE
    res["seize_init"] = "OK" if rv == 0 else errno.errorcode.get(ctypes.get_errno(), "?")
# process_vm_readv on the child
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
buf = ctypes.create_string_buffer(8)
local = iovec(ctypes.cast(buf, ctypes.c_void_p), 8)
remote = iovec(ctypes.c_void_p(0x400000), 8)
rv = libc.syscall(310, child.pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
res["process_vm_readv"] = "OK" if rv >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
child.kill()
print(json.dumps(res))
'''
    hrc, hout, herr = al.hpy(ptrace_probe)
    hres = al.last_json(hout)
    h.eq(hres.get("child"), "OK", "control: the ptrace probe attaches to its child on the host", hout + herr)
    r = al.bpy(h, box, ptrace_probe, "in-box")
    res = al.last_json(r.out)
    h.ok(res.get("child") not in (None, "OK"), "PTRACE_ATTACH to a process of the box fails", r.describe())
    h.ok(res.get("init") not in (None, "OK") and res.get("seize_init") not in (None, "OK"),
         "PTRACE_ATTACH / PTRACE_SEIZE of the box's init fails", r.describe())
    h.ok(res.get("process_vm_readv") not in (None, "OK"), "process_vm_readv on a box process fails", r.describe())
    r = al.bexec(h, box, "strace -f -o /dev/null true; echo rc=$?")
    h.ok("rc=0" not in r.out, "strace does not work in the box", r.describe())

    # ---- 4. /proc/PID/mem: the other way into the init ---------------------------------------------
    mem_probe = r'''
import errno, json, os
res = {}
# control: a process may always write its own memory
fd = os.open("/proc/self/mem", os.O_RDWR)
res["self"] = "OK"
os.close(fd)
for target in ("1", "1/task/1"):
    try:
        fd = os.open("/proc/%s/mem" % target, os.O_RDWR)
    except OSError as e:
        res[target] = "open:" + errno.errorcode[e.errno]
        continue
    try:
        maps = open("/proc/1/maps").read().splitlines()
        lo = int(maps[0].split("-")[0], 16)
        b = os.pread(fd, 16, lo)
        os.pwrite(fd, b, lo)      # writes back what is there: proves write access, changes nothing
        res[target] = "WRITTEN"
    except OSError as e:
        res[target] = "rw:" + errno.errorcode[e.errno]
    os.close(fd)
for f in ("environ", "maps", "fd/0"):
    try:
        if f.startswith("fd"):
            os.readlink("/proc/1/" + f)
        else:
            open("/proc/1/" + f, "rb").read(16)
        res[f] = "OK"
    except OSError as e:
        res[f] = errno.errorcode[e.errno]
print(json.dumps(res))
'''
    r = al.bpy(h, box, mem_probe)
    res = al.last_json(r.out)
    h.eq(res.get("self"), "OK", "control: /proc/self/mem opens read-write in the box", r.describe())
    h.ok(res.get("1", "WRITTEN") != "WRITTEN" and res.get("1", "").startswith("open:"),
         "box root cannot open its init's /proc/1/mem for writing (a way around the ptrace filter)",
         json.dumps(res))
    h.ok(res.get("environ") != "OK" and res.get("fd/0") != "OK",
         "box root cannot read its init's environment or file descriptors", json.dumps(res))

    # ---- 5. /proc/sys ---------------------------------------------------------------------------
    host_hostname = socket.gethostname()
    with open("/proc/sys/kernel/core_pattern") as f:
        core_pattern = f.read()
    with open("/proc/sys/kernel/hostname") as f:
        proc_hostname = f.read()
    evil = "|/tmp/abtest-pwn-%s %%p" % al.token(4)
    r = al.bexec(h, box, "echo 'atk-%s' > /proc/sys/kernel/hostname; echo hn=$?; echo '%s' > /proc/sys/kernel/core_pattern;"
                         " echo cp=$?; echo 1 > /proc/sys/vm/drop_caches; echo dc=$?; echo 0 > /proc/sys/kernel/randomize_va_space;"
                         " echo aslr=$?; cat /proc/sys/kernel/core_pattern; echo done" % (al.token(3), evil))
    h.contains(r.out, "done", "the /proc/sys probe ran", r.describe())
    with open("/proc/sys/kernel/core_pattern") as f:
        cp_now = f.read()
    h.eq(cp_now, core_pattern, "a write to /proc/sys/kernel/core_pattern in the box leaves the host's unchanged",
         r.describe())
    if cp_now != core_pattern:
        with open("/proc/sys/kernel/core_pattern", "w") as f:
            f.write(core_pattern)
    h.contains(r.out, "cp=1", "the write to core_pattern fails in the box", r.describe())
    with open("/proc/sys/kernel/randomize_va_space") as f:
        aslr = f.read().strip()
    h.ne(aslr, "0", "the box cannot switch off the host's ASLR through /proc/sys")
    h.contains(r.out, "aslr=1", "the write to randomize_va_space fails in the box", r.describe())
    with open("/proc/sys/kernel/hostname") as f:
        h.eq(f.read(), proc_hostname, "a write to /proc/sys/kernel/hostname in the box leaves the host's unchanged")

    # ---- 6. /proc/kcore, /proc/sysrq-trigger, /proc/kmsg ---------------------------------------------
    kprobe = r'''
import errno, json, os
res = {}
def try_open(p, flags):
    try:
        fd = os.open(p, flags)
    except OSError as e:
        return "open:" + errno.errorcode[e.errno]
    try:
        if flags == os.O_RDONLY:
            data = os.read(fd, 64)
            return "READ:%d" % len(data)
        # 'h' (help) is the one harmless sysrq command: it only logs the list
        os.write(fd, b"h")
        return "WRITTEN"
    except OSError as e:
        return "io:" + errno.errorcode[e.errno]
    finally:
        os.close(fd)
res["kcore"] = try_open("/proc/kcore", os.O_RDONLY)
res["kmsg"] = try_open("/proc/kmsg", os.O_RDONLY | os.O_NONBLOCK) if os.path.exists("/proc/kmsg") else "absent"
res["devkmsg"] = try_open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK) if os.path.exists("/dev/kmsg") else "absent"
res["sysrq"] = try_open("/proc/sysrq-trigger", os.O_WRONLY)
res["devmem"] = try_open("/dev/mem", os.O_RDONLY) if os.path.exists("/dev/mem") else "absent"
res["control"] = try_open("/proc/self/status", os.O_RDONLY)
print(json.dumps(res))
'''
    r = al.bpy(h, box, kprobe)
    res = al.last_json(r.out)
    h.ok(str(res.get("control", "")).startswith("READ:"), "control: the probe reads /proc/self/status", r.describe())
    h.ok(not str(res.get("kcore", "READ")).startswith("READ"), "/proc/kcore is unreadable in the box", json.dumps(res))
    h.ok(res.get("sysrq", "WRITTEN") != "WRITTEN", "/proc/sysrq-trigger is not writable in the box", json.dumps(res))
    h.ok(not str(res.get("kmsg")).startswith("READ") and not str(res.get("devkmsg")).startswith("READ")
         and not str(res.get("devmem")).startswith("READ"),
         "/proc/kmsg, /dev/kmsg and /dev/mem give nothing in the box", json.dumps(res))

    # ---- 7. /sys ---------------------------------------------------------------------------------
    r = al.bexec(h, box, "ls -A /sys | wc -l; ls /sys/fs/cgroup /sys/class/net /sys/kernel /sys/firmware 2>&1 | "
                         "grep -vc 'No such file'; echo done")
    lines = r.out.split()
    h.ok(os.path.isdir("/sys/kernel"), "control: the host has /sys/kernel")
    h.ok(len(lines) >= 2 and lines[0] == "0", "/sys is empty in the box", r.describe())
    h.ok(len(lines) >= 2 and lines[1] == "0", "no /sys/fs/cgroup, /sys/class/net, /sys/kernel in the box "
                                               "(so no cgroup limit can be lifted)", r.describe())

    # ---- 8. the kernel log ----------------------------------------------------------------------------
    hlog = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=20)
    h.ok(hlog.returncode == 0 and hlog.stdout.strip(), "control: dmesg works on the host")
    host_lines = [ln for ln in hlog.stdout.splitlines()[-50:] if len(ln) > 20]
    r = al.bexec(h, box, "dmesg 2>&1 | tail -n 50; echo rc=${PIPESTATUS[0]}; " + al.py_cmd(
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nbuf = ctypes.create_string_buffer(4096)\n"
        "print('klogctl', libc.klogctl(3, buf, 4096), ctypes.get_errno())\n"))
    h.ok("rc=0" not in r.out, "dmesg fails in the box", r.describe())
    h.ok(not any(ln in r.out for ln in host_lines), "no line of the host's kernel log shows up in the box",
         r.describe())
    h.contains(r.out, "klogctl -1", "syslog(2) (klogctl READ_ALL) fails in the box", r.describe())

    # ---- 9. the hostname ------------------------------------------------------------------------------
    new = "atk-" + al.token(4)
    r = al.bexec(h, box, "hostname; hostname %s; echo rc=$?; hostname; python3 -c 'import socket; "
                         "socket.sethostname(\"%s-py\")'; hostname" % (new, new))
    h.contains(r.out.splitlines()[0] if r.out else "", box, "control: the box's hostname is its id (own UTS namespace)",
               r.describe())
    h.eq(socket.gethostname(), host_hostname, "sethostname in the box leaves the host's hostname unchanged",
         r.describe())

    # ---- 10. the box's own init stays in charge -------------------------------------------------------------
    r = al.bexec(h, box, "kill -9 1; kill -STOP 1; kill -SEGV 1; echo sent")
    time.sleep(0.3)
    info2 = al.inspect(h, box)
    h.eq(info2.get("init_pid"), init_pid, "kill -9 / -STOP / -SEGV 1 inside the box: its init survives",
         json.dumps(info2))
    r = al.bexec(h, box, "echo after-kill-1")
    h.contains(r.out, "after-kill-1", "... and still serves commands", r.describe())

    # ---- 11. the operator's terminal ---------------------------------------------------------------------
    # A box created and used from an interactive terminal must not reach that
    # terminal through /dev/tty (reading it steals the operator's keystrokes).
    if os.access("/usr/bin/script", os.X_OK):
        tty_box = "tty-" + al.token(3)
        tmark = "ABTESTTTY" + al.token(8)
        p = subprocess.run(["/usr/bin/script", "-qec", "%s --data %s create --id %s --disk 64M --pids 64 && tty"
                            % (h.bin, h.data, tty_box), "/dev/null"], capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL)
        if p.returncode == 0:
            h.track(tty_box)
        h.ok(p.returncode == 0 and "/dev/pts/" in p.stdout, "control: a box is created from a terminal", p.stdout + p.stderr)
        p = subprocess.run(["/usr/bin/script", "-qec", "%s --data %s exec %s -- 'echo %s > /dev/tty; echo rc=$?; "
                            "for f in /proc/1/fd/*; do readlink $f; done; ls -l /proc/self/fd/'"
                            % (h.bin, h.data, tty_box, tmark), "/dev/null"], capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)
        h.contains(p.stdout, "rc=", "the terminal probe ran", p.stdout + p.stderr)
        h.not_contains(p.stdout, tmark, "the box cannot write to the operator's terminal through /dev/tty",
                       p.stdout)
        h.not_contains(p.stdout, "/dev/pts/", "no fd of the box points at the operator's terminal", p.stdout)
    else:
        h.skip("the box cannot reach the operator's terminal", "no /usr/bin/script")
finally:
    for p in procs:
        try:
            p.kill()
            p.wait(5)
        except Exception:
            pass

h.done()
