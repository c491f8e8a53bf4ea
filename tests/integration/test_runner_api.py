#!/usr/bin/env python3
"""The FastGPT-compatible code runner of `agentbox serve` (seed 003) over
HTTP, with the real warm runner processes in the server's system box:
POST /sandbox/python and /sandbox/js (results, log, messages, limits
clamped, timeout kills the run), GET /sandbox/modules, /health concurrency,
SANDBOX_TOKEN auth (missing 401, malformed 400, wrong 401), excess requests
queued not refused, runs isolated from each other (one run's temp files are
invisible to the next, a run cannot read another's dir), no network from a
snippet (sockets refused by the box, httpRequest to loopback refused by the
server), and httpRequest reaching a test host this file makes in its own
network namespace at a documentation address (203.0.113.0/24)."""
import json
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=170)
STOKEN = "sandbox-token-%d-abcdef" % os.getpid()
S = h.start_server(env={"SANDBOX_TOKEN": STOKEN, "SANDBOX_MAX_CONCURRENCY": "3",
                        "AGENTBOX_RUNNER_WARM": "2"})
AUTH = {"Authorization": "Bearer " + STOKEN}


def run(lang, code, variables=None, limits=None, headers=AUTH, timeout=90):
    body = {"code": code}
    if variables is not None:
        body["variables"] = variables
    if limits is not None:
        body["limits"] = limits
    return S.post("/sandbox/" + lang, body, headers=headers, token=None, timeout=timeout)


# ---- auth -----------------------------------------------------------------------------
r = run("python", "def main():\n    return 1\n", headers={})
h.eq(r.status, 401, "no Authorization header: 401", r.describe())
r = run("python", "def main():\n    return 1\n", headers={"Authorization": "Token " + STOKEN})
h.eq(r.status, 400, "a malformed Authorization header: 400", r.describe())
r = run("python", "def main():\n    return 1\n", headers={"Authorization": "Bearer wrong"})
h.eq(r.status, 401, "a wrong token: 401", r.describe())
r = S.get("/health", token=None)
h.eq(r.status, 200, "/health needs no auth", r.describe())

# ---- python -----------------------------------------------------------------------------
r = run("python", "def main(a, b):\n    print('adding', a, b)\n    return {'sum': a + b}\n", {"a": 2, "b": 40})
h.eq(r.status, 200, "python: 200", r.describe())
h.eq(r.get("success"), True, "python: success", r.describe())
d = r.get("data") or {}
h.eq(d.get("codeReturn"), {"sum": 42}, "python: main(a, b) by parameter names", r.describe())
h.ok("adding 2 40" in (d.get("log") or ""), "python: print goes to log", r.describe())
r = run("python", "def main(variables):\n    return variables['x'] * 2\n", {"x": 21})
h.eq((r.get("data") or {}).get("codeReturn"), 42, "python: main(variables)", r.describe())
r = run("python", "def main():\n    return None\n")
h.ok(r.get("success") is True and (r.get("data") or {}).get("codeReturn") is None, "python: None -> null",
     r.describe())
r = run("python", "import decimal, statistics, collections\ndef main():\n"
                  "    return [str(decimal.Decimal(1) / 4), statistics.mean([1, 2, 3]), "
                  "collections.Counter('aab')['a']]\n")
h.eq((r.get("data") or {}).get("codeReturn"), ["0.25", 2, 2], "python: stdlib modules load on demand",
     r.describe())
r = run("python", "x = 1\n")
h.eq((r.get("success"), r.get("message")), (False, "No 'main' function defined"), "python: no main", r.describe())
r = run("python", "   \n")
h.eq((r.status, r.get("success"), r.get("message")), (200, False, "Code cannot be empty"), "empty code",
     r.describe())
r = run("python", "import os\ndef main():\n    return os.getcwd()\n")
h.eq((r.get("success"), r.get("message")), (False, "Module 'os' is not allowed in sandbox"),
     "python: import os refused with the seed's message", r.describe())
r = run("python", "def main(a, c):\n    return c\n", {"a": 1})
h.eq(r.get("message"), "Missing required argument: 'c'", "python: missing argument message", r.describe())
t0 = time.monotonic()
r = run("python", "def main():\n    while True:\n        pass\n", limits={"timeoutMs": 1500})
dt = time.monotonic() - t0
h.eq((r.get("success"), r.get("message")), (False, "Script execution timed out after 1500ms"),
     "python: an endless loop times out with the seed's message", r.describe())
h.ok(dt < 10, "... promptly (%.1fs)" % dt)
r = run("python", "def main():\n    return 1\n", limits={"timeoutMs": 10 ** 9})
h.eq(r.get("success"), True, "python: a huge timeout is clamped, not refused", r.describe())
r = S.post("/sandbox/python", {"code": 12}, headers=AUTH, token=None)
h.eq(r.status, 400, "code that is not a string: 400", r.describe())
h.ok((r.get("message") or "").startswith("Invalid request: "), "... 'Invalid request: <reason>'", r.describe())
r = S.post("/sandbox/python", b"{not json", headers=dict(AUTH, **{"Content-Type": "application/json"}),
           token=None)
h.eq(r.status, 400, "malformed JSON: 400", r.describe())

# ---- js ----------------------------------------------------------------------------------
r = run("js", "function main(v) { console.log('hi', v.a); return {twice: v.a * 2}; }", {"a": 21})
h.eq(r.status, 200, "js: 200", r.describe())
h.eq((r.get("data") or {}).get("codeReturn"), {"twice": 42}, "js: main(variables)", r.describe())
h.ok("hi 21" in ((r.get("data") or {}).get("log") or ""), "js: console.log goes to log", r.describe())
r = run("js", "const cp = require('child_process'); function main() { return 1 }")
h.eq((r.get("success"), r.get("message")), (False, "Module 'child_process' is not allowed in sandbox"),
     "js: require of a module outside the allow-list refused", r.describe())
r = run("js", "function main() { return require('lodash').chunk([1,2,3,4], 2) }")
h.eq((r.get("data") or {}).get("codeReturn"), [[1, 2], [3, 4]], "js: an allowed module works (lodash)",
     r.describe())
r = run("js", "function main() { while (true) {} }", limits={"timeoutMs": 1500})
h.eq(r.get("message"), "Script execution timed out after 1500ms", "js: an endless loop times out", r.describe())

# ---- modules, health ---------------------------------------------------------------------
r = S.get("/sandbox/modules", headers=AUTH, token=None)
mods = (r.get("data") or {})
h.ok(r.status == 200 and "lodash" in (mods.get("js") or []), "GET /sandbox/modules lists the JS allow-list",
     r.describe())
hl = S.health() or {}
c = hl.get("concurrency") or {}
h.eq(c.get("max"), 3, "/health shows the concurrency limit", json.dumps(hl))

# ---- concurrency: more than max are queued, not refused ------------------------------------
res = [None] * 8


def one(i):
    res[i] = run("python", "import time\ndef main():\n    time.sleep(0.5)\n    return %d\n" % i)


ts = [threading.Thread(target=one, args=(i,)) for i in range(8)]
for t in ts:
    t.start()
for t in ts:
    t.join(120)
h.eq([(r.status, (r.get("data") or {}).get("codeReturn")) for r in res], [(200, i) for i in range(8)],
     "8 concurrent runs with max 3: all answered in order of their own results")

# ---- isolation between runs ----------------------------------------------------------------
r = run("python", "def main():\n    system_helper.fs.write_file('secret.txt', 'run-one')\n"
                  "    return system_helper.fs.tmp_dir\n")
first_dir = (r.get("data") or {}).get("codeReturn")
h.ok(r.get("success") is True and isinstance(first_dir, str), "a run writes a file in its temp dir", r.describe())
r = run("js", "function main() { const fs = require('fs'); return 1 }")
h.eq(r.get("success"), False, "js: require('fs') refused", r.describe())
r = run("python", "def main(d):\n    try:\n        return open(d + '/secret.txt').read()\n"
                  "    except Exception as e:\n        return 'refused: ' + type(e).__name__\n", {"d": first_dir or "/x"})
h.ok(r.get("success") is False or "run-one" not in json.dumps(r.json),
     "a later run cannot read the earlier run's file", r.describe())

# ---- network ---------------------------------------------------------------------------------
lsock = socket.socket()
lsock.bind(("127.0.0.1", 0))
lsock.listen(5)
lsock.settimeout(0.2)
lport = lsock.getsockname()[1]
r = run("python", "def main():\n    return system_helper.http_request('http://127.0.0.1:%d/')\n" % lport)
h.eq(r.get("success"), False, "httpRequest to loopback is refused", r.describe())
r = run("js", "async function main() { return await SystemHelper.httpRequest('http://169.254.169.254/latest/') }")
h.eq(r.get("success"), False, "httpRequest to the metadata address is refused", r.describe())
try:
    conn, _ = lsock.accept()
    conn.close()
    h.ok(False, "the loopback server saw no connection")
except socket.timeout:
    h.ok(True, "the loopback server saw no connection")
lsock.close()

# A test host in a network namespace of our own, at a documentation address.
tag = "%x" % (os.getpid() & 0xffff)
ns, va, vb = "abrt-" + tag, "abra" + tag, "abrb" + tag
srv_proc = None


def sh(*args):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30)


try:
    ok = all(sh(*c).returncode == 0 for c in (
        ("ip", "netns", "add", ns),
        ("ip", "link", "add", va, "type", "veth", "peer", "name", vb),
        ("ip", "link", "set", vb, "netns", ns),
        ("ip", "addr", "add", "203.0.113.1/24", "dev", va),
        ("ip", "link", "set", va, "up"),
        ("ip", "netns", "exec", ns, "ip", "addr", "add", "203.0.113.10/24", "dev", vb),
        ("ip", "netns", "exec", ns, "ip", "link", "set", vb, "up"),
        ("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")))
    if not ok:
        h.skip("httpRequest to a test host", "cannot make a network namespace here")
    else:
        webroot = h.new_data_dir("web")
        with open(os.path.join(webroot, "hello.json"), "w") as f:
            f.write('{"hello": "world"}')
        srv_proc = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-m", "http.server", "18123",
                                     "--bind", "203.0.113.10", "--directory", webroot],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        up = abserver.wait_for(lambda: sh("ip", "netns", "exec", ns, "sh", "-c",
                                          "exec 3<>/dev/tcp/203.0.113.10/18123").returncode == 0
                               if os.path.exists("/bin/sh") else True, timeout=10)
        r = run("python", "def main():\n    r = system_helper.http_request('http://203.0.113.10:18123/hello.json')\n"
                          "    return {'status': r['status'], 'data': r['data']}\n")
        got = (r.get("data") or {}).get("codeReturn") or {}
        h.eq(got.get("status"), 200, "python httpRequest reaches the test host (203.0.113.10)", r.describe())
        h.ok("world" in json.dumps(got.get("data")), "... and gets its body", r.describe())
        r = run("js", "async function main() { const r = await SystemHelper.httpRequest("
                      "'http://203.0.113.10:18123/hello.json'); return r.status }")
        h.eq((r.get("data") or {}).get("codeReturn"), 200, "js httpRequest reaches the test host", r.describe())
finally:
    if srv_proc:
        srv_proc.kill()
        srv_proc.wait()
    sh("ip", "link", "del", va)
    sh("ip", "netns", "del", ns)

# ---- the runner's box is the manager's: its execs go through the one exec path ---------------
import sqlite3  # noqa: E402
db = sqlite3.connect(os.path.join(S.data, "agentbox.db"))
rows = db.execute("SELECT command, exit_code FROM exec_audit WHERE box_id = 'sys-runner'").fetchall()
db.close()
h.ok(any("tar -xf" in c for c, _ in rows),
     "the runner's install exec in its system box has an audit row", repr(rows[:5]))
m = S.get("/metrics")
h.ok(abserver.metric_sum(abserver.parse_metrics(m.text), "agentbox_execs_total") >= len(rows) > 0,
     "the runner's execs are counted in agentbox_execs_total", m.text[:400])
r = S.get("/v1/sandboxes")
h.ok(r.status == 200 and all(b.get("id") != "sys-runner" for b in r.get("sandboxes") or []),
     "the system box is not listed", r.describe())
r = S.get("/v1/sandboxes/sys-runner")
h.eq(r.status, 404, "nor reachable through the API", r.describe())
h.done()
