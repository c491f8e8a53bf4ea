#!/usr/bin/env python3
"""The stand-in model server (tests/llm/standin.py) against the official
`openai` npm client (tests/llm/fidelity.mjs): its streaming helper must
parse every scripted stream and assemble the same content and tool calls
the agent loop's tests rely on (one call, a call split over many chunks,
parallel calls), the usage chunk included; the error scripts must reach
the client as API errors with their status and message. Skipped (77)
without node or tests/llm/node_modules (scripts/npm-deps.sh)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
LLM = os.path.join(HERE, "..", "llm")
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, LLM)
import abtest  # noqa: E402
import standin  # noqa: E402

h = abtest.Harness(need_root=False, timeout=60)
if not shutil.which("node") or not os.path.isdir(os.path.join(LLM, "node_modules", "openai")):
    h.skip_all("node or tests/llm/node_modules/openai is missing: run scripts/npm-deps.sh")
tmp = tempfile.mkdtemp(prefix="standin-")
model = standin.start(os.path.join(tmp, "record.jsonl"))
SCENARIOS = ["text", "tool", "tools", "split", "parallel", "skill", "loop", "error500", "error401"]
p = subprocess.run(["node", os.path.join(LLM, "fidelity.mjs"), model.base_url()] + SCENARIOS,
                   capture_output=True, text=True, timeout=60)
h.eq(p.returncode, 0, "fidelity.mjs ran", p.stderr[-2000:])
got = {}
for line in p.stdout.splitlines():
    try:
        o = json.loads(line)
        got[o["scenario"]] = o
    except (ValueError, KeyError):
        h.diag("not a result line: %r" % line)

for name in SCENARIOS[:7]:
    r = got.get(name, {})
    h.ok(r.get("ok"), "the openai client parses the %s stream" % name, json.dumps(r)[:1500])
    h.ok(isinstance(r.get("usage"), dict) and r["usage"].get("total_tokens", 0) > 0,
         "%s: the usage chunk is read" % name, json.dumps(r)[:500])

t = got.get("text", {})
h.eq((t.get("content"), t.get("deltas"), t.get("finish_reason")),
     ("Hello from the stand-in.", "Hello from the stand-in.", "stop"), "text: content and finish")
t = got.get("tool", {})
h.eq([(c["id"], c["type"], c["name"], c["arguments"].get("command")) for c in t.get("tool_calls", [])],
     [("call_one", "function", "bash", "echo hi-from-box")], "tool: one whole call")
h.eq(t.get("finish_reason"), "tool_calls", "tool: finish_reason tool_calls")
t = got.get("split", {})
h.eq([(c["id"], c["name"], c["arguments"].get("command")) for c in t.get("tool_calls", [])],
     [("call_split", "bash", "echo split-args-ok")], "split: the pieces assemble into one call")
t = got.get("parallel", {})
h.eq([(c["id"], c["arguments"].get("command")) for c in t.get("tool_calls", [])],
     [("call_p0", "echo par-zero"), ("call_p1", "echo par-one")],
     "parallel: two calls assembled by index from interleaved pieces")
t = got.get("skill", {})
h.eq([(c["name"], c["arguments"].get("path")) for c in t.get("tool_calls", [])],
     [("read_file", "/mnt/skills/demo/SKILL.md")], "skill: a read_file call")
t = got.get("error500", {})
h.eq((t.get("ok"), t.get("status")), (False, 500), "error500: an API error with status 500",
     json.dumps(t))
h.contains(t.get("error", ""), "the model is overloaded", "error500: its message")
t = got.get("error401", {})
h.eq((t.get("ok"), t.get("status")), (False, 401), "error401: an API error with status 401",
     json.dumps(t))
rec = [r for r in model.records() if "headers" in r]
h.ok(rec and all({k.lower(): v for k, v in r["headers"].items()}.get("authorization")
                == "Bearer sk-fidelity" for r in rec),
     "the client sent its key as the stand-in expects (Authorization: Bearer)")
model.shutdown()
shutil.rmtree(tmp, ignore_errors=True)
h.done()
