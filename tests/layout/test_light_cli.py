#!/usr/bin/env python3
"""The light CLI stays light: `agentbox` (src/cli/front.c) runs an exec
itself, and the dynamic loader's work on each exec grows with every shared
library it loads (a normal build links it statically: it needs none; a
sanitized one dynamically). This test reads the NEEDED entries of the built
binary (AGENTBOX_BIN, else AB_BUILD_DIR/agentbox) and fails when one appears
that is not in LIGHT below; it also checks that the configurations the light
binary cannot serve (Docker, mock, PostgreSQL) are handed to agentbox-full
rather than failing in light.c's stand-ins. Prints TAP."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

# What an exec needs: libc, JSON, the SQLite store and the seccomp filter of
# a box's processes. A sanitized build adds the sanitizers' runtimes.
LIGHT = {"libc", "ld-linux-x86-64", "ld-linux-aarch64", "libm", "libjansson", "libseccomp",
         "libsqlite3"}
SANITIZERS = {"libasan", "libubsan", "libstdc++", "libgcc_s"}
# Everything it loads, its libraries' own dependencies included.
MAX_LOADED = 12


def binary():
    b = os.environ.get("AGENTBOX_BIN")
    if b:
        return b
    d = os.environ.get("AB_BUILD_DIR")
    return os.path.join(d, "agentbox") if d else None


def mounts_under(path):
    found = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4]
            if mp == path or mp.startswith(path + "/"):
                found.append(mp)
    return sorted(found, key=lambda m: -m.count("/"))


def stem(soname):
    return re.sub(r"\.so(\..*)?$", "", soname)


def main():
    b = binary()
    print("1..3")
    if not b or not os.access(b, os.X_OK):
        print("ok 1 - # SKIP no agentbox binary (AGENTBOX_BIN or AB_BUILD_DIR)")
        print("ok 2 - # SKIP")
        print("ok 3 - # SKIP")
        return 0
    fails = 0
    out = subprocess.run(["readelf", "-d", b], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    extra = sorted(n for n in needed if stem(n) not in LIGHT | SANITIZERS)
    if extra:
        fails += 1
        print("not ok 1 - agentbox needs only %s" % ", ".join(sorted(LIGHT)))
        print("# also needs: %s" % ", ".join(extra))
        print("# link what pulls them into agentbox-full only (meson.build, src/cli/light.c)")
    elif not needed:
        print("ok 1 - agentbox needs no shared library (statically linked)")
    else:
        print("ok 1 - agentbox needs only: %s" % ", ".join(needed))
    ldd = subprocess.run(["ldd", b], capture_output=True, text=True).stdout
    loaded = [ln for ln in ldd.splitlines()
              if ln.strip() and "linux-vdso" not in ln and "statically linked" not in ln]
    sanitized = any(stem(n) in SANITIZERS for n in needed)
    if len(loaded) > MAX_LOADED and not sanitized:
        fails += 1
        print("not ok 2 - agentbox loads %d libraries (at most %d)" % (len(loaded), MAX_LOADED))
        for ln in loaded:
            print("# " + ln.strip())
    else:
        print("ok 2 - agentbox loads %d libraries in all" % len(loaded))
    # The stand-ins of light.c answer "agentbox-full has it": an exec in a
    # configuration that needs them must go to agentbox-full before any open.
    # A copy of the binary beside a stand-in agentbox-full shows which ran.
    bad = []
    tmp = tempfile.mkdtemp(prefix="ab-light-")
    try:
        light = os.path.join(tmp, "agentbox")
        shutil.copy(b, light)
        full = os.path.join(tmp, "agentbox-full")
        with open(full, "w") as f:
            f.write("#!/bin/sh\necho FULL \"$@\"\n")
        os.chmod(full, 0o755)
        data = os.path.join(tmp, "data")
        for env in ({"AGENTBOX_BACKEND": "docker"},
                    {"AGENTBOX_DOCKER_HOST": "unix:///nonexistent.sock"},
                    {"AGENTBOX_BACKEND": "mock"},
                    {"AGENTBOX_MOCK_EXPECT": "/nonexistent.json"},
                    {"AGENTBOX_STORE": "postgres://127.0.0.1:1/none"}):
            e = dict(os.environ, **env)
            r = subprocess.run([light, "--data", data, "exec", "nosuchbox", "--", "true"], env=e,
                               capture_output=True, text=True, timeout=30)
            if not r.stdout.startswith("FULL --data %s exec nosuchbox -- true" % data):
                bad.append("%s: rc %d %s %s" % (env, r.returncode, r.stdout.strip()[:100],
                                                r.stderr.strip()[:200]))
    finally:
        # A light binary that served one of them itself has mounted the skills
        # disk of the data folder (a failure above): take it down before the
        # folder goes.
        for mp in mounts_under(tmp):
            subprocess.run(["umount", "-l", mp], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    if bad:
        fails += 1
        print("not ok 3 - configurations light.c cannot serve go to agentbox-full")
        for x in bad:
            print("# " + x)
    else:
        print("ok 3 - Docker, mock and PostgreSQL configurations go to agentbox-full")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
