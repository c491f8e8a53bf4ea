#!/usr/bin/env python3
"""Attacks through system calls the box must not have (python3 ctypes inside
the box, x86_64 numbers).

One probe script runs every call in a forked child (so a call that changes the
process, or a SIGSYS, cannot spoil the next one) and prints one JSON object:
name -> "OK", an errno name, or "SIG<n>" when the child was killed. The same
script runs on the host as root, outside any box: a probe whose host result
shows it works (or fails differently) cannot pass by accident in the box.
Probes that would change the host (reboot, pivot_root, iopl, vhangup, ...) run
only in the box.
"""
import json
import os
import platform
import re

import attacklib as al
from attacklib import abtest

h = abtest.Harness()
if platform.machine() != "x86_64":
    h.skip_all("the probes use x86_64 system call numbers and machine code")

PROBE = r'''
import ctypes, errno, json, os, pty, select, signal, socket, struct, sys, time
IN_BOX = sys.argv[1] == "box"
TMP = sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
P = ctypes.c_void_p
def sc(nr, *args):
    a = [ctypes.c_long(x) if isinstance(x, int) else x for x in args]
    rv = libc.syscall(ctypes.c_long(nr), *a)
    if rv < 0:
        raise OSError(ctypes.get_errno(), "")
    return rv

def run(fn):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            res = fn()
            res = "OK" if res is None or isinstance(res, int) else str(res)
        except OSError as e:
            res = errno.errorcode.get(e.errno, "E%d" % e.errno)
        except BaseException as e:
            res = "EXC:" + type(e).__name__
        os.write(w, res.encode())
        os._exit(0)
    os.close(w)
    deadline = time.time() + 10
    out = b""
    while time.time() < deadline:
        rl, _, _ = select.select([r], [], [], 0.2)
        if rl:
            chunk = os.read(r, 200)
            if not chunk:
                break
            out += chunk
    os.close(r)
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
    _, st = os.waitpid(pid, 0)
    if os.WIFSIGNALED(st) and os.WTERMSIG(st) != signal.SIGKILL:
        return "SIG%d" % os.WTERMSIG(st)
    return out.decode() or "NORESULT"

res = {}
def probe(name, fn, box_only=False):
    if box_only and not IN_BOX:
        return
    res[name] = run(fn)

# --- kernel attack surface
def io_uring():
    params = ctypes.create_string_buffer(120)
    fd = sc(425, 4, params)
    os.close(fd)
probe("io_uring_setup", io_uring)
probe("io_uring_enter", lambda: sc(426, 12345, 0, 0, 0, 0, 0))
probe("keyctl", lambda: sc(250, 0, -3, 1))                       # KEYCTL_GET_KEYRING_ID, session, create
probe("add_key", lambda: sc(248, b"user", b"abtest", b"x", 1, -2)) # into the process keyring
probe("request_key", lambda: sc(249, b"user", b"abtest-none", None, 0))
def bpf_map():
    attr = struct.pack("IIII", 2, 4, 4, 1) + b"\0" * 112       # BPF_MAP_TYPE_ARRAY
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = sc(321, 0, buf, len(attr))                               # BPF_MAP_CREATE
    os.close(fd)
probe("bpf", bpf_map)
def perf():
    flags = 1 | (1 << 5) | (1 << 6)                               # disabled, exclude_kernel, exclude_hv
    attr = struct.pack("IIQQQQQ", 1, 128, 1, 0, 0, 0, flags) + b"\0" * (128 - 48)
    buf = ctypes.create_string_buffer(attr, 128)
    fd = sc(298, buf, 0, -1, -1, 0)                               # software task-clock, self
    os.close(fd)
probe("perf_event_open", perf)
def uffd():
    fd = sc(323, os.O_CLOEXEC | 1)                                # UFFD_USER_MODE_ONLY
    os.close(fd)
probe("userfaultfd", uffd)

# --- mounts
probe("fsopen", lambda: os.close(sc(430, b"tmpfs", 1)))
probe("open_tree", lambda: os.close(sc(428, -100, b"/", 1 | 0o2000000)))  # OPEN_TREE_CLONE|CLOEXEC
probe("move_mount", lambda: sc(429, -1, b"", -100, b"/tmp", 4))
probe("fsmount", lambda: sc(432, -1, 0, 0))
probe("mount_setattr", lambda: sc(442, -1, b"", 0x1000, None, 0))
probe("mount", lambda: sc(165, b"none", TMP.encode(), b"tmpfs", 0, None), box_only=True)
probe("umount_tmp", lambda: sc(166, b"/tmp", 2), box_only=True)        # MNT_DETACH
probe("umount_workspace", lambda: sc(166, b"/workspace", 2), box_only=True)
probe("pivot_root", lambda: sc(155, b".", b"."), box_only=True)

# --- namespaces
NS = {"user": 0x10000000, "mnt": 0x00020000, "net": 0x40000000, "pid": 0x20000000,
      "uts": 0x04000000, "ipc": 0x08000000, "cgroup": 0x02000000, "time": 0x00000080}
for n, flag in NS.items():
    probe("unshare_" + n, lambda flag=flag: sc(272, flag))
probe("unshare_files", lambda: sc(272, 0x400))                      # benign: CLONE_FILES
def clone_newuser():
    rv = sc(56, 0x10000000 | signal.SIGCHLD, 0, 0, 0, 0)
    if rv == 0:
        os._exit(0)
    os.waitpid(rv, 0)
probe("clone_newuser", clone_newuser)
probe("clone3", lambda: sc(435, None, 0))
def setns():
    fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    sc(308, fd, 0x40000000)
probe("setns", setns)
def setns_init():
    fd = os.open("/proc/1/ns/mnt", os.O_RDONLY)
    sc(308, fd, 0)
probe("setns_init_mnt", setns_init, box_only=True)

# --- machine administration
probe("init_module", lambda: sc(175, None, 0, b""))
probe("finit_module", lambda: sc(313, -1, b"", 0))
probe("delete_module", lambda: sc(176, b"abtest_no_such_module", os.O_NONBLOCK))
probe("kexec_load", lambda: sc(246, 0, 0, None, 3 << 16))          # wrong arch: EINVAL on a host that has kexec
probe("kexec_file_load", lambda: sc(320, -1, -1, 0, None, 0))
probe("reboot_badmagic", lambda: sc(169, 0, 0, 0x4321FEDC, None))
probe("reboot", lambda: sc(169, 0xfee1dead, 672274793, 0x4321FEDC, None), box_only=True)  # POWER_OFF
probe("swapon", lambda: sc(167, b"/nonexistent-abtest", 0))
probe("acct", lambda: sc(163, None), box_only=True)
probe("iopl", lambda: sc(172, 3), box_only=True)
probe("ioperm", lambda: sc(173, 0x80, 1, 1), box_only=True)
probe("vhangup", lambda: sc(153), box_only=True)
probe("quotactl", lambda: sc(179, 0x800002, b"/workspace", 0, None), box_only=True)  # Q_GETINFO-ish
probe("syslog", lambda: sc(103, 10, None, 0))                       # SYSLOG_ACTION_SIZE_BUFFER
probe("settimeofday_null", lambda: sc(164, None, None))
def clock_set():
    ts = (ctypes.c_long * 2)(int(time.time()), 0)
    sc(227, 0, ts)
probe("clock_settime", clock_set, box_only=True)
probe("personality_norandom", lambda: sc(135, 0x0040000))
probe("personality_query", lambda: sc(135, 0xffffffff))
def n2h():
    buf = ctypes.create_string_buffer(128 + 8)
    struct.pack_into("I", buf, 0, 128)
    mid = ctypes.c_int()
    sc(303, -100, b"/etc/passwd", buf, ctypes.byref(mid), 0)
probe("name_to_handle_at", n2h)
def obh():
    buf = ctypes.create_string_buffer(struct.pack("Ii", 8, 1) + b"\0" * 8)
    fd = sc(304, -100, buf, 0)
    os.close(fd)
probe("open_by_handle_at", obh)
probe("kcmp", lambda: sc(312, os.getpid(), os.getpid(), 0, 0, 0))
def getfd():
    pfd = os.pidfd_open(os.getpid())
    os.close(sc(438, pfd, 0, 0))
probe("pidfd_getfd", getfd)
probe("ptrace_traceme", lambda: sc(101, 0, 0, 0, 0))

# --- terminals
def tiocsti(req):
    def f():
        m, s = pty.openpty()
        c = ctypes.c_char(b"x")
        if libc.ioctl(s, ctypes.c_ulong(req), ctypes.byref(c)) < 0:
            raise OSError(ctypes.get_errno(), "")
        os.set_blocking(m, False)
        got = os.read(m, 10)                                      # the echo of the injected key
        return "OK"
    return f
probe("tiocsti", tiocsti(0x5412))
probe("tiocsti_highbits", tiocsti(0x100005412))
def tioclinux():
    m, s = pty.openpty()
    c = ctypes.c_char(b"\x0b")                                    # TIOCL_GETSHIFTSTATE
    if libc.ioctl(s, ctypes.c_ulong(0x541C), ctypes.byref(c)) < 0:
        raise OSError(ctypes.get_errno(), "")
probe("tioclinux", tioclinux)

# --- device nodes
probe("mknod_block", lambda: os.mknod(TMP + "/blk", 0o60600, os.makedev(8, 0)))
probe("mknod_char_mem", lambda: os.mknod(TMP + "/mem", 0o20600, os.makedev(1, 1)))
probe("mknod_fifo", lambda: os.mknod(TMP + "/fifo", 0o10600))     # benign

# --- other ABIs: i386 int $0x80 and x32
def machine(code):
    def f():
        import mmap
        m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
        m.write(code)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        fn = ctypes.CFUNCTYPE(ctypes.c_long)(addr)
        return "RET:%d" % fn()
    return f
# mov eax, 20 (i386 getpid); int 0x80; ret
probe("int80_getpid", machine(b"\xb8\x14\x00\x00\x00\xcd\x80\xc3"))
# mov eax, 0x40000027 (x32 getpid); syscall; ret
probe("x32_getpid", machine(b"\xb8\x27\x00\x00\x40\x0f\x05\xc3"))
# control: native getpid the same way (mov eax, 39; syscall; ret)
probe("native_getpid", machine(b"\xb8\x27\x00\x00\x00\x0f\x05\xc3"))

print(json.dumps(res))
'''

tmp_host = os.path.join(h.root, "probe-tmp")
os.mkdir(tmp_host)
hrc, hout, herr = al.hpy(PROBE, "host", tmp_host, t=120)
host = al.last_json(hout)
h.ok(host, "control: the probe script runs on the host", "rc %s\n%s\n%s" % (hrc, hout, herr))

box = h.create(None, "--disk", "64M", "--memory", "256M", "--pids", "64")
init_pid = al.inspect(h, box).get("init_pid")
r = al.bexec(h, box, "mkdir -p /tmp/probe && " + al.py_cmd(PROBE, "box", "/tmp/probe"), t=120)
inbox = al.last_json(r.out)
h.ok(inbox, "the probe script runs in the box", r.describe())


def blocked(name, why, host_want=None):
    """The call must not succeed in the box. host_want: "OK" = the same probe
    succeeds on the host; "differs" = the host gets another result than the box."""
    got = inbox.get(name)
    # an errno or a fatal signal; "EXC:..." or "NORESULT" would be a broken probe
    h.ok(got is not None and re.fullmatch(r"E[A-Z0-9]+|SIG\d+", got) is not None,
         "%s fails in the box (%s): %s" % (name, why, got),
         "box: %r, host: %r" % (got, host.get(name)))
    if host_want == "OK":
        h.eq(host.get(name), "OK", "control: %s works on the host" % name)
    elif host_want == "differs":
        h.ok(host.get(name) not in (None, got), "control: %s fails differently on the host (%s)" % (name, host.get(name)),
             "box: %r, host: %r" % (got, host.get(name)))


blocked("io_uring_setup", "io_uring", "OK")
blocked("io_uring_enter", "io_uring", "differs")
blocked("keyctl", "keyrings", "OK")
blocked("add_key", "keyrings", "OK")
blocked("request_key", "keyrings", "differs")
blocked("bpf", "eBPF map", "OK")
blocked("perf_event_open", "perf, own task, user space only", "OK")
blocked("userfaultfd", "user-mode-only userfaultfd", "OK")

blocked("fsopen", "new mount API", "OK")
blocked("open_tree", "detached mount of /", "OK")
blocked("move_mount", "mount API", "differs")
blocked("fsmount", "mount API", "differs")
blocked("mount_setattr", "mount API", "differs")
blocked("mount", "mount(2) of a tmpfs")
blocked("umount_tmp", "umount2 /tmp")
blocked("umount_workspace", "umount2 /workspace")
blocked("pivot_root", "pivot_root")
r = al.bexec(h, box, "mount -t tmpfs none /mnt; echo rc=$?; awk '$5 == \"/workspace\"' /proc/self/mountinfo | wc -l; "
                     "awk '$5 == \"/tmp\"' /proc/self/mountinfo | wc -l")
h.contains(r.out, "rc=32", "`mount -t tmpfs none /mnt` fails in the box", r.describe())
h.ok(r.out.split()[-2:] == ["1", "1"] if r.out else False, "after the umount attempts /workspace and /tmp are still mounted",
     r.describe())

for n in ("user", "mnt", "net", "pid", "uts", "ipc", "cgroup", "time"):
    blocked("unshare_" + n, "new %s namespace" % n, "OK")
h.eq(inbox.get("unshare_files"), "OK", "control: unshare(CLONE_FILES) (no namespace) works in the box")
blocked("clone_newuser", "clone(CLONE_NEWUSER)", "OK")
h.eq(inbox.get("clone3"), "ENOSYS", "clone3 returns ENOSYS in the box (its flags are out of seccomp's reach)")
h.ok(host.get("clone3") not in (None, "ENOSYS"), "control: clone3 exists on the host (%s)" % host.get("clone3"))
blocked("setns", "setns into a namespace", "OK")
blocked("setns_init_mnt", "setns into init's mount namespace")
r = al.bexec(h, box, "unshare -U true; echo u=$?; unshare -n true; echo n=$?; unshare -m true; echo m=$?; "
                     "unshare -r true; echo r=$?; nsenter -t 1 -m true; echo ns=$?")
h.ok(all(("%s=0" % k) not in r.out for k in ("u", "n", "m", "r", "ns")),
     "unshare -U / -n / -m / -r and nsenter all fail in the box", r.describe())

blocked("init_module", "load a kernel module", "differs")
blocked("finit_module", "load a kernel module", "differs")
blocked("delete_module", "unload a kernel module", "differs")
blocked("kexec_load", "kexec", "differs")
blocked("kexec_file_load", "kexec", "differs")
blocked("reboot_badmagic", "reboot", "differs")
blocked("reboot", "reboot(POWER_OFF)")
blocked("swapon", "swapon", "differs")
blocked("acct", "process accounting")
blocked("iopl", "I/O privilege level")
blocked("ioperm", "I/O port access")
blocked("vhangup", "hang up the terminal")
blocked("quotactl", "quotactl")
blocked("syslog", "kernel log", "OK")
blocked("settimeofday_null", "settimeofday", "OK")
blocked("clock_settime", "set the clock")
r = al.bexec(h, box, "date -s @0; echo rc=$?; echo year=$(date +%Y)")
h.ok("rc=0" not in r.out and "year=1970" not in r.out and "year=" in r.out,
     "`date -s` fails in the box and the clock is unchanged", r.describe())
blocked("personality_norandom", "personality(ADDR_NO_RANDOMIZE)", "OK")
h.eq(inbox.get("personality_query"), "OK", "control: personality(0xffffffff) (a query) works in the box")
blocked("name_to_handle_at", "file handles", "OK")
blocked("open_by_handle_at", "open by handle (shocker)", "differs")
blocked("kcmp", "kcmp", "OK")
blocked("pidfd_getfd", "steal a file descriptor", "OK")
blocked("ptrace_traceme", "ptrace", "OK")

blocked("tiocsti", "TIOCSTI", "OK")
blocked("tiocsti_highbits", "TIOCSTI with high bits set in the request", "OK")
blocked("tioclinux", "TIOCLINUX", "differs")

blocked("mknod_block", "block device node", "OK")
blocked("mknod_char_mem", "character device node", "OK")
h.eq(inbox.get("mknod_fifo"), "OK", "control: mknod of a FIFO works in the box")

h.ok(str(host.get("native_getpid", "")).startswith("RET:"),
     "control: the machine-code probe runs on the host (native)", json.dumps(host))
h.ok(str(inbox.get("native_getpid", "")).startswith("RET:"), "control: the machine-code probe runs in the box (native)",
     json.dumps(inbox))
if str(host.get("int80_getpid", "")).startswith("RET:"):
    h.eq(inbox.get("int80_getpid"), "SIG31", "an i386 system call (int 0x80) kills the process with SIGSYS")
else:
    # A kernel built without IA32 emulation (or booted with it off) answers
    # int 0x80 with SIGSEGV on the host too: the seccomp filter never sees the
    # call. What still must hold: the call does not run in the box.
    h.ok(not str(inbox.get("int80_getpid", "")).startswith("RET:"),
         "an i386 system call (int 0x80) does not run in the box (this kernel has no i386 calls: "
         "host %s, box %s)" % (host.get("int80_getpid"), inbox.get("int80_getpid")))
h.eq(inbox.get("x32_getpid"), "SIG31", "an x32 system call kills the process with SIGSYS")

info = al.inspect(h, box)
h.eq(info.get("init_pid"), init_pid, "after all probes (reboot included) the box's init is the same process",
     json.dumps(info))
r = al.bexec(h, box, "echo alive")
h.contains(r.out, "alive", "after all probes the box still runs commands", r.describe())
h.done()
