#!/usr/bin/env python3
"""The layers of src/ are visible in its folders: a folder includes headers
only of its own folder and of folders below it (docs/architecture.md).
The fronts (src/fronts/NAME, one folder each) stand side by side with
agentbox's own API (src/rest): none of them includes another, and the HTTP
layer (src/http) includes only base.
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
    "http": 1,      # the HTTP machinery: connections, workers, WebSocket, messages,
                    # Connect RPC, request checks (base only: it names no front)
    "config": 6,    # the service's settings
    "kit": 7,       # what every front uses: the server's request life cycle, route
                    # tables, the caller and auth, responses, uploads
    "rest": 8,      # agentbox's own routes, MCP, the console
    "fronts": 8,    # fronts/NAME: a compatible API (E2B, OpenSandbox), one folder each
    "cli": 9,       # the command line: wires REST and the fronts to the server
}

# Folders that hold one layer per subfolder (fronts/e2b, fronts/opensandbox):
# each subfolder is a layer of the parent's rank, a peer of the others.
GROUPS = ("fronts",)


def layer_of(path):
    """The layer a folder or an include names: "kit", "fronts/e2b"."""
    parts = path.split("/")
    if parts[0] in GROUPS and len(parts) > 1:
        return parts[0] + "/" + parts[1]
    return parts[0]


def rank_of(layer):
    return RANK.get(layer.split("/", 1)[0])

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
                rel = os.path.relpath(f, src)
                me = layer_of(os.path.dirname(rel))
                if me in GROUPS:
                    bad.append("%s: a file of %s/ belongs in a folder of its own (%s/NAME/)"
                               % (rel, me, me))
                    continue
                with open(f, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                for inc in INCLUDE.findall(text):
                    if "/" not in inc:
                        continue  # same-folder include ("landlock.h")
                    target = layer_of(inc)
                    if rank_of(target) is None:
                        bad.append('%s includes "%s": no such layer' % (rel, inc))
                    elif target != me and rank_of(target) >= rank_of(me):
                        bad.append('%s includes "%s": %s (layer %d) may not use %s (layer %d)'
                                   % (rel, inc, me, rank_of(me), target, rank_of(target)))
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
        os.makedirs(os.path.join(t, "kit"))
        with open(os.path.join(t, "base", "x.c"), "w") as fh:
            fh.write('#include "kit/server.h"\n')
        with open(os.path.join(t, "kit", "y.c"), "w") as fh:
            fh.write('#include "base/x.h"\n')
        got = violations(t)
        ok = len(got) == 1 and "base/x.c" in got[0]
    print("%s 2 - an upward include (base -> kit) is reported" % ("ok" if ok else "not ok"))

    # Fronts are peers of each other and of REST: a front including another
    # front or REST, or REST including a front, is reported; a front using
    # its own folder and the kit is not.
    with tempfile.TemporaryDirectory() as t:
        files = {
            "fronts/a/x.c": '#include "fronts/b/y.h"\n',           # bad: front -> front
            "fronts/a/y.c": '#include "rest/rest.h"\n',            # bad: front -> rest
            "rest/z.c": '#include "fronts/a/x.h"\n',               # bad: rest -> front
            "http/w.c": '#include "kit/server.h"\n',               # bad: http -> kit
            "fronts/b/y.c": '#include "fronts/b/y.h"\n#include "kit/server.h"\n',  # fine
            "kit/server.c": '#include "http/conn.h"\n',            # fine
        }
        for rel, text in files.items():
            os.makedirs(os.path.join(t, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(t, rel), "w") as fh:
                fh.write(text)
        got = violations(t)
        want = ["fronts/a/x.c", "fronts/a/y.c", "http/w.c", "rest/z.c"]
        ok3 = sorted(g.split(" ", 1)[0] for g in got) == want
        for g in got:
            print("#   (throwaway tree) " + g)
    print("%s 3 - fronts include neither each other nor rest, rest no front, http only base"
          % ("ok" if ok3 else "not ok"))
    return 0 if not bad and ok and ok3 else 1


if __name__ == "__main__":
    sys.exit(main())
