#!/usr/bin/env python3
"""The layers of src/ are visible in its folders: a folder includes headers
only of its own folder and of folders below it (docs/architecture.md).
Prints TAP. Run from anywhere: the tree is found relative to this file."""
import os
import re
import sys
import tempfile

# Lower number = lower layer. A file in folder F may include "G/x.h" only
# when G == F or RANK[G] < RANK[F].
RANK = {
    "base": 0,      # errors, logs, allocation, ids, limits, events, metrics, buffers
    "proto": 1,     # the host<->init protocol: codec and the host's client
    "native": 1,    # how a native box is made
    "store": 1,     # durable records
    "skills": 1,    # skills folder, safe archives
    "image": 1,     # the image store: references, registry pulls, layers
    "init": 2,      # agentbox-init (links base and proto only)
    "net": 2,       # a box's network
    "backend": 3,   # the backend interface and its implementations
    "core": 4,      # the sandbox manager
    "tools": 5,     # agent tools (reach boxes through the manager)
    "runners": 5,   # the code runner
    "config": 6,    # the service's settings
    "api": 7,       # HTTP, MCP, the fronts
    "cli": 8,       # the command line
}

# Headers of one backend (docker_api.h, backend_int.h) are private to
# src/backend: every layer above reaches backends through backend.h only, so
# core names no backend (backend.h's optional ops say what one can do).
BACKEND_PUBLIC = {"backend/backend.h"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def violations(src):
    bad = []
    for folder in sorted(os.listdir(src)):
        path = os.path.join(src, folder)
        if not os.path.isdir(path):
            continue
        if folder not in RANK:
            bad.append("%s/: folder has no layer (add it to RANK in %s)" % (folder, __file__))
            continue
        for root, _, files in os.walk(path):
            for name in sorted(files):
                if not name.endswith((".c", ".h")):
                    continue
                f = os.path.join(root, name)
                with open(f, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                for inc in INCLUDE.findall(text):
                    if "/" not in inc:
                        continue  # same-folder include ("landlock.h")
                    target = inc.split("/", 1)[0]
                    rel = os.path.relpath(f, src)
                    if (target == "backend" and folder != "backend"
                            and inc not in BACKEND_PUBLIC):
                        bad.append('%s includes "%s": only backend/backend.h is public'
                                   % (os.path.relpath(f, src), inc))
                    if target not in RANK:
                        bad.append('%s includes "%s": no such layer' % (rel, inc))
                    elif target != folder and RANK[target] >= RANK[folder]:
                        bad.append('%s includes "%s": %s (layer %d) may not use %s (layer %d)'
                                   % (rel, inc, folder, RANK[folder], target, RANK[target]))
    return bad


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.normpath(os.path.join(here, "..", "..", "src"))
    print("1..3")
    bad = violations(src)
    for b in bad:
        print("# " + b)
    print("%s 1 - src/ folders include only their own layer and those below" %
          ("ok" if not bad else "not ok"))

    # The check itself must be able to fail: an upward include in a
    # throwaway tree is reported.
    with tempfile.TemporaryDirectory() as t:
        os.makedirs(os.path.join(t, "base"))
        os.makedirs(os.path.join(t, "api"))
        with open(os.path.join(t, "base", "x.c"), "w") as fh:
            fh.write('#include "api/server.h"\n')
        with open(os.path.join(t, "api", "y.c"), "w") as fh:
            fh.write('#include "base/x.h"\n')
        got = violations(t)
        ok = len(got) == 1 and "base/x.c" in got[0]
    print("%s 2 - an upward include (base -> api) is reported" % ("ok" if ok else "not ok"))

    # ... and so is a layer above reaching one backend's private header.
    with tempfile.TemporaryDirectory() as t:
        os.makedirs(os.path.join(t, "core"))
        os.makedirs(os.path.join(t, "backend"))
        with open(os.path.join(t, "core", "x.c"), "w") as fh:
            fh.write('#include "backend/backend.h"\n#include "backend/docker_api.h"\n')
        with open(os.path.join(t, "backend", "y.c"), "w") as fh:
            fh.write('#include "backend/docker_api.h"\n')
        got = violations(t)
        ok3 = len(got) == 1 and "core/x.c" in got[0] and "docker_api.h" in got[0]
    print("%s 3 - a backend's private header used above src/backend is reported"
          % ("ok" if ok3 else "not ok"))
    return 0 if not bad and ok and ok3 else 1


if __name__ == "__main__":
    sys.exit(main())
