#!/usr/bin/env python3
"""The layers of src/ are visible in its folders: a folder includes headers
only of its own folder and of folders below it (docs/architecture.md).
The fronts (src/fronts/NAME, one folder each) stand side by side with
agentbox's own API (src/rest): none of them includes another, and the HTTP
layer (src/http) includes only base.
Prints TAP. Run from anywhere: the tree is found relative to this file."""
import os
import re
import subprocess
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
    "fleet": 5,     # several servers as one service: nodes, heartbeats
    "http": 1,      # the HTTP machinery: connections, workers, WebSocket, messages,
                    # Connect RPC, request checks (base only: it names no front)
    "config": 6,
    "agent": 6,     # the agent loop and its model client (chat completions over libcurl)    # the service's settings
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
                    if (target == "backend" and folder != "backend"
                            and inc not in BACKEND_PUBLIC):
                        bad.append('%s includes "%s": only backend/backend.h is public'
                                   % (os.path.relpath(f, src), inc))
                    if rank_of(target) is None:
                        bad.append('%s includes "%s": no such layer' % (rel, inc))
                    elif target != me and rank_of(target) >= rank_of(me):
                        bad.append('%s includes "%s": %s (layer %d) may not use %s (layer %d)'
                                   % (rel, inc, me, rank_of(me), target, rank_of(target)))
    return bad


def layers_in(src):
    """Every layer folder under src: "base", ..., "fronts/e2b"."""
    out = []
    for folder in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, folder)):
            continue
        if folder in GROUPS:
            out += [folder + "/" + sub for sub in sorted(os.listdir(os.path.join(src, folder)))
                    if os.path.isdir(os.path.join(src, folder, sub))]
        else:
            out.append(folder)
    return out


def object_layer(name, layers):
    """The layer of a meson object file ("src_fronts_e2b_routes.c.o"): the
    longest layer whose folder, with '/' as '_', starts its name."""
    best = None
    for lay in layers:
        pre = "src_" + lay.replace("/", "_") + "_"
        if name.startswith(pre) and (best is None or len(lay) > len(best)):
            best = lay
    return best


def nm_symbols(path):
    """(defined global symbols, undefined symbols) of an object file."""
    out = subprocess.run(["nm", "-g", path], capture_output=True, text=True, check=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            undefined.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDRBVW":
            defined.add(parts[2])
    return defined, undefined


def link_violations(objdir, layers):
    """Calls across layers in the built library: an object of layer F may
    use a function or data of layer G only when G == F or G is below F.
    (An include check alone misses a prototype in a low header whose body
    sits in a higher folder.)"""
    owner, uses = {}, {}
    for name in sorted(os.listdir(objdir)):
        if not name.endswith(".o"):
            continue
        lay = object_layer(name, layers)
        if lay is None:
            continue
        d, u = nm_symbols(os.path.join(objdir, name))
        for sym in d:
            owner[sym] = lay
        uses[name] = (lay, u)
    bad = []
    for name, (lay, u) in sorted(uses.items()):
        for sym in sorted(u):
            other = owner.get(sym)
            if other and other != lay and rank_of(other) >= rank_of(lay):
                bad.append("%s uses %s of %s: %s (layer %d) may not use %s (layer %d)"
                           % (name, sym, other, lay, rank_of(lay), other, rank_of(other)))
    return bad


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    src = os.path.normpath(os.path.join(here, "..", "..", "src"))
    print("1..6")
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

    # The same rule at link time, on the library meson built (AB_BUILD_DIR):
    # what each layer's objects call.
    # It must be able to fail: a front calling REST (two tiny objects).
    with tempfile.TemporaryDirectory() as t:
        srcs = {"src_rest_a.c": "int rest_fn(void);\nint rest_fn(void) { return 1; }\n",
                "src_fronts_e2b_b.c": "int rest_fn(void);\nint front_fn(void);\n"
                                      "int front_fn(void) { return rest_fn(); }\n"}
        for name, text in srcs.items():
            with open(os.path.join(t, name), "w") as fh:
                fh.write(text)
            subprocess.run(["cc", "-c", "-o", os.path.join(t, name + ".o"),
                            os.path.join(t, name)], check=True)
        got = link_violations(t, ["rest", "fronts/e2b"])
        ok5 = len(got) == 1 and "rest_fn" in got[0] and "fronts/e2b" in got[0]
    print("%s 4 - a front calling REST's function is reported at link time"
          % ("ok" if ok5 else "not ok"))

    build = os.environ.get("AB_BUILD_DIR")
    objdir = os.path.join(build, "libagentbox.a.p") if build else None
    if not objdir or not os.path.isdir(objdir):
        print("ok 5 - # SKIP no build to read (AB_BUILD_DIR)")
        ok4 = True
    else:
        got = link_violations(objdir, layers_in(src))
        for g in got:
            print("# " + g)
        ok4 = not got
        print("%s 5 - the built library's layers call only their own layer and those below"
              % ("ok" if ok4 else "not ok"))

    # ... and so is a layer above reaching one backend's private header.
    with tempfile.TemporaryDirectory() as t:
        os.makedirs(os.path.join(t, "core"))
        os.makedirs(os.path.join(t, "backend"))
        with open(os.path.join(t, "core", "x.c"), "w") as fh:
            fh.write('#include "backend/backend.h"\n#include "backend/docker_api.h"\n')
        with open(os.path.join(t, "backend", "y.c"), "w") as fh:
            fh.write('#include "backend/docker_api.h"\n')
        got = violations(t)
        ok6 = len(got) == 1 and "core/x.c" in got[0] and "docker_api.h" in got[0]
    print("%s 6 - a backend's private header used above src/backend is reported"
          % ("ok" if ok6 else "not ok"))
    return 0 if not bad and ok and ok3 and ok4 and ok5 and ok6 else 1


if __name__ == "__main__":
    sys.exit(main())
