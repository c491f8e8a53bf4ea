#!/usr/bin/env python3
"""Smoke test of the agentbox CLI: help, version, unknown subcommand."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abtest  # noqa: E402

h = abtest.Harness(need_root=False)

rc, out, err = h.run("--help", data=False)
h.eq(rc, 0, "--help exits 0", err)
h.contains(out, "create", "--help on stdout lists the create command")
for verb in ("exec", "rm", "ls"):
    h.ok(re.search(r"\b%s\b" % verb, out), "--help lists the %s command" % verb, "stdout: %r" % out)

rc, out, err = h.run("--version", data=False)
h.eq(rc, 0, "--version exits 0", err)
h.ok(re.search(r"\d+\.\d+\.\d+", out), "--version prints a version number", "stdout: %r" % out)
want = os.environ.get("AGENTBOX_PROJECT_VERSION")
if want:
    h.contains(out, want, "--version prints the project's version (%s)" % want)
else:
    h.skip("--version prints the project's version", "AGENTBOX_PROJECT_VERSION not set (not run by meson)")

rc, out, err = h.run("frobnicate-xyzzy")
h.ne(rc, 0, "an unknown subcommand exits non-zero")
h.ok(err.strip(), "an unknown subcommand prints a message on stderr", "stderr was empty")
h.contains(err, "frobnicate-xyzzy", "the message names the unknown subcommand")
h.eq(out, "", "an unknown subcommand prints nothing on stdout")

h.done()
