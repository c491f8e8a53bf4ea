#!/usr/bin/env python3
"""`agentbox tool ID NAME ARGS`: the agent tools from the command line, the
same code REST and MCP use. Output formats (write_file "OK", read_file, grep
lines, bash's "Exit Code: N"), arguments from stdin with `-`, exit 1 when the
tool reports an error, 125 for an unknown tool, 2 for arguments that are not
a JSON object."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abtest  # noqa: E402

h = abtest.Harness()
box = h.create(None, "--disk", "64M")

r = h.run("tool", box, "write_file", json.dumps({"path": "notes/a.txt", "content": "alpha\nbeta\n"}))
h.eq((r.rc, r.out), (0, "OK\n"), "write_file answers OK (parents made)", r.describe())
r = h.exec(box, "cat /workspace/notes/a.txt")
h.eq(r.out, "alpha\nbeta\n", "... and the file is in the box")
r = h.run("tool", box, "read_file", json.dumps({"path": "notes/a.txt", "start_line": 2, "end_line": 2}))
h.eq((r.rc, r.out), (0, "beta\n"), "read_file with a line range", r.describe())
r = h.run("tool", box, "grep", json.dumps({"pattern": "ALPHA", "path": "/workspace"}))
h.eq(r.rc, 0, "grep runs", r.describe())
h.ok("/workspace/notes/a.txt:1: alpha" in r.out, "grep is case-insensitive by default, path:line: text", r.out)
r = h.run("tool", box, "bash", "-", input=json.dumps({"command": "echo out; echo err >&2; exit 3"}))
h.eq((r.rc, r.out), (0, "out\n\nStd Error:\nerr\n\nExit Code: 3\n"), "bash with args on stdin: DeerFlow's format",
     r.describe())
r = h.run("tool", box, "read_file", json.dumps({"path": "missing.txt"}))
h.eq(r.rc, 1, "a tool error exits 1", r.describe())
h.ok("not found" in r.out.lower(), "... and says what went wrong", r.out)
r = h.run("tool", box, "no_such_tool", "{}")
h.eq(r.rc, 125, "an unknown tool exits 125", r.describe())
r = h.run("tool", box, "read_file", "[1, 2]")
h.eq(r.rc, 2, "arguments that are not a JSON object exit 2", r.describe())
r = h.run("tool", "no-such-box", "ls", "{}")
h.eq(r.rc, 125, "an unknown box exits 125", r.describe())
h.done()
