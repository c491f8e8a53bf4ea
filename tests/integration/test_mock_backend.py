#!/usr/bin/env python3
"""The mock backend for users' own tests (docs/backends.md "The mock
backend"): a server with `backend: mock`, run as `nobody` (no root, no
cgroups, no namespaces), creates boxes in memory, answers execs from the
expectations file (exact and regex matches, stdout/stderr, exit codes,
delays and timeouts; an unmatched command exits 127 with a message; a
rewritten file is read again), keeps files in memory behind the files API
and the tools, keeps boxes and files across a clean restart, and logs
every call. The Python example of docs/backends.md
runs against it as written, and so do the E2B and OpenSandbox SDKs. A malformed expectations file stops the
server at start, naming the rule. A native server with mock_expect offers
mock boxes beside native ones, chosen per box."""
import json
import os
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = os.path.join(HERE, "..", "..", "docs", "backends.md")
NOBODY = 65534

h = abserver.ServerHarness(budget=120)
if os.geteuid() != 0:
    h.skip_all("needs root to start the server as nobody (setpriv)")
if subprocess.run(["sh", "-c", "command -v setpriv"], capture_output=True).returncode != 0:
    h.skip_all("no setpriv (util-linux) to run the server as nobody")

# a folder nobody may use: its data, expectations and config
os.chmod(h.root, 0o711)
mroot = os.path.join(h.root, "mock")
os.mkdir(mroot)
os.chmod(mroot, 0o777)
data = os.path.join(mroot, "data")
expect = os.path.join(mroot, "expect.json")
calls_log = os.path.join(mroot, "calls.jsonl")

RULES = {"commands": [
    {"command": "ls", "stdout": "file1.txt\nfile2.txt\n"},
    {"regex": "^go test( .*)?$", "stdout": "PASS\nok\n", "delay_ms": 300},
    {"command": "make", "stderr": "no rule\n", "exit_code": 2},
    {"command": "echo hi", "stdout": "hi\n"},
    {"command": "serve", "stdout": "up\n", "delay_ms": 600000},
]}


def write_rules(rules):
    tmp = expect + ".tmp"
    with open(tmp, "w") as f:
        json.dump(rules, f)
    os.chmod(tmp, 0o644)
    os.rename(tmp, expect)


def calls():
    try:
        with open(calls_log) as f:
            return [json.loads(line) for line in f if line.strip()]
    except OSError:
        return []


write_rules(RULES)
srv = h.server(config={"backend": "mock", "mock_expect": expect, "mock_log": calls_log},
               name="mock", data=data)
os.chmod(srv.config_path, 0o644)
_argv = srv.argv
srv.argv = lambda: ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups"] + _argv()
why = srv.start()
if why:
    h.bail_server(srv, why)

# ---- 1. it runs as nobody --------------------------------------------------------------

with open("/proc/%d/status" % srv.proc.pid) as f:
    uids = re.search(r"^Uid:\s+(\d+)\s+(\d+)", f.read(), re.M)
h.eq(uids and (int(uids.group(1)), int(uids.group(2))), (NOBODY, NOBODY),
     "the server runs as nobody (real and effective uid)")

r = srv.post("/v1/sandboxes", {"mode": "session"})
h.eq(r.status, 201, "create a box", r.describe())
h.eq((r.json or {}).get("provider"), "mock", "... on the mock backend", r.describe())
h.eq((r.json or {}).get("status"), "running", "... running", r.describe())
box = (r.json or {}).get("id", "none")
bid = (r.json or {}).get("backend_id", "none")


def ex(body, **kw):
    r = srv.post("/v1/sandboxes/%s/exec" % box, body, **kw)
    return r, (r.json or {})


# ---- 2. execs ----------------------------------------------------------------------------

r, j = ex({"command": "ls"})
h.eq((r.status, j.get("exit_code"), j.get("stdout")), (200, 0, "file1.txt\nfile2.txt\n"),
     "an exact match: its stdout, exit 0", r.describe())
t0 = time.monotonic()
r, j = ex({"command": "go test ./pkg/..."})
took = time.monotonic() - t0
h.eq((j.get("exit_code"), j.get("stdout")), (0, "PASS\nok\n"), "a regex match", r.describe())
h.ok(took >= 0.3, "... answered after its delay (%.2fs)" % took)
r, j = ex({"command": "go test", "timeout_s": 0.1})
h.eq((j.get("exit_code"), j.get("timed_out")), (124, True),
     "a delay over the exec's timeout: timed out, 124", r.describe())
r, j = ex({"command": "make"})
h.eq((j.get("exit_code"), j.get("stderr")), (2, "no rule\n"), "an exit code and stderr", r.describe())
r, j = ex({"command": "rm -rf /"})
h.eq(j.get("exit_code"), 127, "an unmatched command: exit 127", r.describe())
h.contains(j.get("stderr", ""), "no expectation matches this command: rm -rf /",
           "... with a message naming it", r.describe())
r, j = ex({"argv": ["echo", "hi"]})
h.eq(j.get("stdout"), "hi\n", "argv is matched as its words joined by spaces", r.describe())
time.sleep(1.1)  # a new mtime
write_rules({"commands": [{"command": "ls", "stdout": "changed\n"}]})
r, j = ex({"command": "ls"})
h.eq(j.get("stdout"), "changed\n", "a rewritten expectations file is read again", r.describe())
write_rules(RULES)

# ---- 3. files and tools ------------------------------------------------------------------

r = srv.put("/v1/sandboxes/%s/files?path=src/hello.py" % box, b"print('hi')\nhello world\n")
h.ok(r.status in (200, 201), "upload a file", r.describe())
r = srv.get("/v1/sandboxes/%s/files?path=/workspace/src/hello.py" % box)
h.eq((r.status, r.body), (200, b"print('hi')\nhello world\n"), "download it", r.describe())
r = srv.get("/v1/sandboxes/%s/files?path=/workspace" % box)
names = [e.get("name") for e in (r.json or {}).get("entries", [])]
h.eq(names, ["src"], "list /workspace", r.describe())
r = srv.get("/v1/sandboxes/%s/files?path=nope.txt" % box)
h.eq(r.status, 404, "a missing file: 404", r.describe())
r = srv.get("/v1/sandboxes/%s/files?path=../../etc/passwd" % box)
h.eq(r.status, 404, "a path climbing out stays in the box (nothing there): 404", r.describe())


def tool(name, args):
    r = srv.post("/v1/sandboxes/%s/tools/%s" % (box, name), args)
    return r, (r.json or {}).get("output", "")


r, out = tool("write_file", {"path": "/workspace/notes.md", "content": "TODO: tests\n"})
h.eq(r.status, 200, "tool write_file", r.describe())
r, out = tool("read_file", {"path": "/workspace/notes.md"})
h.contains(out, "TODO: tests", "tool read_file reads it", r.describe())
r, out = tool("ls", {"path": "/workspace"})
h.contains(out, "/workspace/notes.md", "tool ls lists it", r.describe())
r, out = tool("glob", {"pattern": "**/*.py", "path": "/workspace"})
h.contains(out, "/workspace/src/hello.py", "tool glob finds src/hello.py", r.describe())
r, out = tool("grep", {"pattern": "hello", "path": "/workspace"})
h.contains(out, "/workspace/src/hello.py:2", "tool grep finds the line", r.describe())
r = srv.delete("/v1/sandboxes/%s/files?path=/workspace/notes.md" % box)
h.ok(r.status in (200, 204), "delete a file", r.describe())
r = srv.get("/v1/sandboxes/%s/files?path=/workspace/notes.md" % box)
h.eq(r.status, 404, "... gone", r.describe())

# ---- 4. life cycle -----------------------------------------------------------------------

r = srv.post("/v1/sandboxes/%s/stop" % box, {})
h.eq(r.status, 200, "stop", r.describe())
r = srv.post("/v1/sandboxes/%s/start" % box, {})
h.eq(r.status, 200, "start", r.describe())
r = srv.get("/v1/sandboxes/%s/files?path=/workspace/src/hello.py" % box)
h.eq(r.status, 200, "its files outlived the stop", r.describe())

# ---- 4b. a clean restart keeps the boxes and their files --------------------------------

# a background command (OpenSandbox's, held by the box's "init") lives on over the restart
r = srv.post("/opensandbox/execd/%s/command" % box, {"command": "serve", "background": True})
bg = re.search(rb'"type":"init","text":"([^"]+)"', r.body or b"")
h.ok(r.status == 200 and bg, "start a background command that runs on (OpenSandbox's execd)",
     r.describe())
bg = bg.group(1).decode() if bg else "none"
why = srv.restart()
h.ok(not why, "restart the server (SIGTERM, start)", why)
r = srv.get("/v1/sandboxes/%s" % box)
h.eq((r.status, (r.json or {}).get("status")), (200, "running"), "the box is still there, running",
     r.describe())
r = srv.get("/v1/sandboxes/%s/files?path=/workspace/src/hello.py" % box)
h.eq((r.status, r.body), (200, b"print('hi')\nhello world\n"), "... with its files", r.describe())
r, j = ex({"command": "ls"})
h.eq(j.get("stdout"), "file1.txt\nfile2.txt\n", "... and answers execs", r.describe())
r = srv.get("/opensandbox/execd/%s/command/status/%s" % (box, bg))
h.eq((r.status, (r.json or {}).get("running")), (200, True),
     "... its background command still runs", r.describe())
r = srv.request("DELETE", "/opensandbox/execd/%s/command" % box, query={"id": bg})
r2 = srv.get("/opensandbox/execd/%s/command/status/%s" % (box, bg))
h.eq((r.status, (r2.json or {}).get("running"), (r2.json or {}).get("exit_code")), (200, False, 137),
     "... interrupted: it ends with 137", r.describe() + r2.describe())
h.ok(not os.path.exists(os.path.join(data, "mock-state.json")),
     "the kept state was read and removed (a crash later cannot resurrect deleted boxes)")

# ---- 5. the calls log --------------------------------------------------------------------

mine = [c for c in calls() if c.get("box") == bid]
ops = [c["op"] for c in mine]
h.ok("create" in ops and "stop" in ops and "start" in ops, "the log has the life cycle", ops)
execs = [(c["command"], c["matched"], c["exit_code"]) for c in mine if c["op"] == "exec"]
h.eq(execs[:6], [("ls", 0, 0), ("go test ./pkg/...", 1, 0), ("go test", 1, 124), ("make", 2, 2),
                 ("rm -rf /", None, 127), ("echo hi", 3, 0)],
     "... every exec with the rule it matched and its exit code", execs)
h.ok(any(c["op"] == "write" and c["path"] == "/workspace/src/hello.py" for c in mine),
     "... the upload", ops)
h.ok(any(c["op"] == "delete" and c["path"] == "/workspace/notes.md" for c in mine),
     "... the delete", ops)

# ---- 6. the documented example runs as written -------------------------------------------

with open(DOCS) as f:
    doc = f.read()
m = re.search(r"<!-- mock-example -->\s*```python\n(.*?)```", doc, re.S)
h.ok(m, "docs/backends.md has the example")
if m:
    ex_path = os.path.join(mroot, "test_agent.py")
    with open(ex_path, "w") as f:
        f.write(m.group(1))
    env = dict(os.environ, AGENTBOX_URL=srv.url, AGENTBOX_MOCK_LOG=calls_log)
    p = subprocess.run([sys.executable, ex_path], capture_output=True, text=True, env=env, timeout=60)
    h.eq((p.returncode, p.stdout.strip()), (0, "ok"), "the example passes against the mock server",
         p.stderr[-2000:])

# ---- 6b. what the mock cannot do says so ------------------------------------------------

r = srv.post("/sandbox/python", {"code": "def main():\n    return 1\n"}, token=None)
h.eq(r.status, 501, "the code runner on a mock-only server: 501", r.describe())
h.contains((r.json or {}).get("message", ""), "mock backend has no connect_unix", "... saying why",
           r.describe())

r = srv.delete("/v1/sandboxes/%s" % box)
h.ok(r.status in (200, 202, 204), "delete the box", r.describe())
h.ok(abserver.wait_for(lambda: srv.get("/v1/sandboxes/%s" % box).status == 404),
     "... it is gone")
h.ok(any(c.get("box") == bid and c["op"] == "destroy" for c in calls()), "... the log has its destroy")
srv.stop()

# ---- 7. a malformed expectations file stops the server at start ---------------------------

with open(expect, "w") as f:
    f.write('{"commands": [{"command": "ls", "regex": "^ls$"}]}')
bad = h.server(config={"backend": "mock", "mock_expect": expect, "mock_log": calls_log},
               name="mock-bad", data=data)
bad.expect_exit = True
why = bad.start(timeout=10)
h.ok(why and "exited" in why, "a server with a malformed expectations file does not start", why)
h.contains(bad.log(), "commands[0]", "... and says which rule", bad.log()[-500:])

# ---- 8. mock beside native: chosen per box ----------------------------------------------

write_rules(RULES)
nat = h.start_server(config={"mock_expect": expect, "mock_log": calls_log}, name="native")
r = nat.post("/v1/sandboxes", {"id": "mk-side", "backend": "mock"})
h.eq(r.status, 201, "a native server with mock_expect: create with backend mock", r.describe())
r = nat.post("/v1/sandboxes/mk-side/exec", {"command": "ls"})
h.eq((r.json or {}).get("stdout"), "file1.txt\nfile2.txt\n", "... answered by the mock", r.describe())
r = nat.post("/v1/sandboxes", {"id": "mk-nat"})
h.eq(r.status, 201, "... a box without backend: native", r.describe())
r = nat.post("/v1/sandboxes/mk-nat/exec", {"command": "echo real"})
h.eq((r.json or {}).get("stdout"), "real\n", "... runs for real", r.describe())
for b in ("mk-side", "mk-nat"):
    nat.delete("/v1/sandboxes/%s" % b)
    h.ok(abserver.wait_for(lambda: nat.get("/v1/sandboxes/%s" % b).status == 404), "delete %s" % b)
r = nat.post("/v1/sandboxes", {"backend": "kube"})
h.eq(r.status, 400, "an unknown backend: 400", r.describe())
h.contains((r.json or {}).get("error", {}).get("message", ""), "native, mock",
           "... naming the ones the server has", r.describe())

# ---- 9. the E2B and OpenSandbox SDKs against a mock server ------------------------------

node = shutil.which("node")
E2B_SMOKE = r"""
import { Sandbox } from 'e2b';
const s = await Sandbox.create({ apiKey: process.env.SDK_KEY });
const out = {};
try {
  out.ls = (await s.commands.run('ls')).stdout;
  try { await s.commands.run('whoami'); } catch (e) { out.unmatched = e.exitCode; }
  await s.files.write('/workspace/x.txt', 'hello');
  out.read = await s.files.read('/workspace/x.txt');
  const bg = await s.commands.run('go test ./...', { background: true });
  out.listed = (await s.commands.list()).some((p) => p.pid === bg.pid);
  out.bg = (await bg.wait()).stdout;
  const slow = await s.commands.run('serve', { background: true });
  out.killed = await slow.kill();
  try { await slow.wait(); } catch (e) { out.killed_exit = e.exitCode; }
  out.gone = !(await s.commands.list()).some((p) => p.pid === slow.pid);
} finally { await s.kill(); }
console.log(JSON.stringify(out));
"""
OSB_SMOKE = r"""
import { ConnectionConfig, Sandbox } from "@alibaba-group/opensandbox";
const conn = new ConnectionConfig({ domain: process.env.SDK_URL + "/opensandbox",
                                    apiKey: process.env.SDK_KEY, requestTimeoutSeconds: 60 });
const s = await Sandbox.create({ connectionConfig: conn, image: "base", timeoutSeconds: 600 });
const out = {};
try {
  out.ls = (await s.commands.run("ls")).logs.stdout.map((m) => `${m.text}\n`).join(""); // an event a line
  out.unmatched = (await s.commands.run("whoami")).exitCode;
  await s.files.writeFiles([{ path: "/workspace/x.txt", data: "hello" }]);
  out.read = await s.files.readFile("/workspace/x.txt");
  const bg = await s.commands.run("go test ./...", { background: true });
  let st;
  for (let i = 0; i < 100 && (!st || st.running); i++) {
    if (st) await new Promise((r) => setTimeout(r, 100));
    st = await s.commands.getCommandStatus(bg.id);
  }
  out.bg_exit = st.exitCode;
  out.bg_logs = (await s.commands.getBackgroundCommandLogs(bg.id)).content;
  const slow = await s.commands.run("serve", { background: true });
  await s.commands.interrupt(slow.id);
  st = await s.commands.getCommandStatus(slow.id);
  for (let i = 0; i < 100 && st.running; i++) {
    await new Promise((r) => setTimeout(r, 100));
    st = await s.commands.getCommandStatus(slow.id);
  }
  out.interrupted = st.running === false;
  out.interrupted_exit = st.exitCode;
} finally { await s.kill(); }
console.log(JSON.stringify(out));
"""


def sdk_smoke(name, sdk_dir, package, script_text, extra=None, extra_what=""):
    extra = extra or {}
    mods = os.path.join(HERE, "..", sdk_dir, "node_modules")
    if not node or not os.path.isdir(os.path.join(mods, package)):
        h.skip("%s's SDK against the mock" % name, "no node or no tests/%s/node_modules (scripts/npm-deps.sh)"
               % sdk_dir)
        return
    tok = "tok-" + os.urandom(8).hex()
    srv2 = h.start_server(config={"backend": "mock", "mock_expect": expect, "mock_log": calls_log},
                          name="mock-" + sdk_dir, data=os.path.join(mroot, "data-" + sdk_dir), token=tok)
    d = os.path.join(mroot, sdk_dir)
    os.mkdir(d)
    os.symlink(os.path.realpath(mods), os.path.join(d, "node_modules"))
    with open(os.path.join(d, "smoke.mjs"), "w") as f:
        f.write(script_text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
    env.update({"E2B_API_URL": srv2.url + "/e2b", "E2B_SANDBOX_URL": srv2.url + "/e2b/envd",
                "SDK_URL": srv2.url, "SDK_KEY": tok, "OPENSANDBOX_DISABLE_METRICS": "1"})
    p = subprocess.run([node, "smoke.mjs"], capture_output=True, text=True, env=env, timeout=120, cwd=d)
    try:
        got = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        got = None
    want = {"ls": "file1.txt\nfile2.txt\n", "unmatched": 127, "read": "hello"}
    want.update(extra)
    h.eq(got, want,
         "%s's SDK: commands.run answered by the expectations, an unmatched command exits 127, "
         "files written and read%s" % (name, extra_what), p.stdout[-1000:] + p.stderr[-2000:])
    srv2.stop()


sdk_smoke("E2B", "e2b", "e2b", E2B_SMOKE,
          # the front's kill is a close (TERM_CLOSE): the stream ends without an exit code, as on
          # a native box, and wait() throws with -1
          {"listed": True, "bg": "PASS\nok\n", "killed": True, "killed_exit": -1, "gone": True},
          "; a background command listed and waited for, another killed and gone")
sdk_smoke("OpenSandbox", "opensandbox", "@alibaba-group/opensandbox", OSB_SMOKE,
          {"bg_exit": 0, "bg_logs": "PASS\nok\n", "interrupted": True, "interrupted_exit": 137},
          "; a background command's status and logs, another interrupted (137)")

h.done()
