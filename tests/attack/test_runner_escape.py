#!/usr/bin/env python3
"""Attacks on the code runner (POST /sandbox/python, /sandbox/js) that get
past the module policy on purpose (it is compatibility, not the boundary) and
then go for the host: read host files and the server's data, reach a host
socket, fork and memory bombs, a daemon left behind to spy on later runs,
huge output. Each check passes only when the attack fails; afterwards the
runner must still answer normal requests."""
import json
import os
import secrets
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=170)
S = h.start_server(env={"AGENTBOX_RUNNER_WARM": "2"})

secret = "RUNNER-CANARY-" + secrets.token_hex(12)
canaries = []
for d in ("/tmp", S.data):
    p = os.path.join(d, "runner-canary-%s.txt" % secrets.token_hex(4))
    with open(p, "w") as f:
        f.write(secret)
    canaries.append(p)


def py(code, limits=None, timeout=90):
    body = {"code": code}
    if limits:
        body["limits"] = limits
    return S.post("/sandbox/python", body, token=None, timeout=timeout)


def js(code, limits=None, timeout=90):
    body = {"code": code}
    if limits:
        body["limits"] = limits
    return S.post("/sandbox/js", body, token=None, timeout=timeout)


# os through the policy's back door (the box, not the policy, is the boundary)
BYPASS = """
def _os():
    import random
    o = getattr(random, '_os', None)
    if o is not None:
        return o
    for c in ().__class__.__base__.__subclasses__():
        if c.__name__ == '_wrap_close':
            g = c.__init__.__globals__
            class O: pass
            o = O()
            o.popen = g['popen']; o.system = g['system']; o.fork = g['fork']
            return o
    raise RuntimeError('no way around the policy')
"""

r = py(BYPASS + "def main():\n    return _os().popen('echo bypass-works').read()\n")
bypassed = (r.get("data") or {}).get("codeReturn") == "bypass-works\n"
h.diag("module policy bypass %s (the box is the boundary either way)" % ("worked" if bypassed else "failed"))

# ---- host files ---------------------------------------------------------------------------
cmd = "cat %s /proc/1/root%s 2>&1; ls -la %s 2>&1; cat /etc/shadow 2>&1 | head -3" % (
    " ".join(canaries), canaries[0], os.path.dirname(S.data))
r = py(BYPASS + "def main():\n    return _os().popen(%r).read()\n" % cmd)
h.ok(secret not in json.dumps(r.json), "python: no host canary readable through a shell", r.describe()[:600])
r = js("function main() { try { return require('child_process').execSync('cat %s').toString() }"
       " catch (e) { return String(e) } }" % canaries[0])
h.ok(secret not in json.dumps(r.json), "js: child_process stays out of reach", r.describe()[:400])
r = js("function main() { try { return (function(){}).constructor('return process')().mainModule"
       ".require('fs').readFileSync(%s, 'utf8') } catch (e) { return String(e) } }" % json.dumps(canaries[0]))
h.ok(secret not in json.dumps(r.json), "js: a constructor escape reads no host file", r.describe()[:400])
r = js("function main() { try { return Bun.file(%s).text() } catch (e) { return String(e) } }"
       % json.dumps(canaries[0]))
h.ok(secret not in json.dumps(r.json), "js: Bun.file reads no host file", r.describe()[:400])

# ---- host network -------------------------------------------------------------------------
ls = socket.socket()
ls.bind(("0.0.0.0", 0))
ls.listen(5)
ls.settimeout(0.3)
port = ls.getsockname()[1]
r = py(BYPASS + "def main():\n    return _os().popen('exec 3<>/dev/tcp/127.0.0.1/%d && echo connected "
                "|| echo refused; (exec 3<>/dev/tcp/10.0.0.1/%d) 2>&1 | head -1').read()\n" % (port, port),
       limits={"timeoutMs": 8000})
h.ok("connected" not in json.dumps(r.json), "python: a shell in the runner box reaches no host socket",
     r.describe()[:400])
# Bun.fetch is read-only in Bun (the runner cannot blank it): the box is what stops it
r = js("async function main() { const f = (typeof Bun !== 'undefined' && Bun.fetch) || globalThis.fetch;"
       " if (!f) return 'no fetch'; try { const x = await f('http://127.0.0.1:%d/'); return 'status ' + x.status }"
       " catch (e) { return 'error ' + e } }" % port, limits={"timeoutMs": 8000})
h.ok("status" not in json.dumps(r.json), "js: Bun.fetch reaches no host socket", r.describe()[:400])
try:
    c, _ = ls.accept()
    c.close()
    h.ok(False, "the host listener saw no connection")
except socket.timeout:
    h.ok(True, "the host listener saw no connection")
ls.close()

# ---- bombs --------------------------------------------------------------------------------
t0 = time.monotonic()
r = py(BYPASS + "def main():\n    o = _os()\n    o.system('for i in $(seq 5000); do (sleep 30 &) ; done 2>/dev/null')\n"
                "    return 'bombed'\n", limits={"timeoutMs": 5000})
h.ok(time.monotonic() - t0 < 30, "python: a process bomb ends within its timeout", r.describe()[:300])
r = py("def main():\n    b = bytearray(1 << 30)\n    return len(b)\n")
h.eq(r.get("success"), False, "python: a 1 GiB allocation fails (memory limit)", r.describe()[:300])
r = js("function main() { const a = []; for (;;) a.push(new Array(1e6).fill(7)); }", limits={"timeoutMs": 4000})
h.eq(r.get("success"), False, "js: a memory bomb fails", r.describe()[:300])
r = py("def main():\n    print('x' * (200 << 20))\n    return 1\n", limits={"timeoutMs": 8000})
h.ok(r.status == 200, "python: 200 MB of output does not take the server down", r.describe()[:300])

# ---- a daemon left behind ------------------------------------------------------------------
r = py(BYPASS + "def main():\n    _os().system('(setsid sh -c \"while :; do cat /tmp/*/secret.txt "
                ">> /tmp/stolen.txt 2>/dev/null; sleep 0.1; done\" &) ; echo started')\n    return 1\n")
h.eq(r.get("success"), True, "python: a snippet leaves a spying daemon behind", r.describe()[:300])
time.sleep(0.5)
r = py("def main():\n    system_helper.fs.write_file('secret.txt', 'victim-data')\n    import time\n"
       "    time.sleep(1)\n    return system_helper.fs.tmp_dir\n")
h.eq(r.get("success"), True, "a later run writes its secret", r.describe()[:300])
time.sleep(0.5)
r = py(BYPASS + "def main():\n    return _os().popen('cat /tmp/stolen.txt 2>&1; ps -eo user,args | grep "
                "-c \"[s]ecret.txt\"').read()\n")
out = json.dumps(r.json)
h.ok("victim-data" not in out, "the daemon stole nothing from the later run", r.describe()[:400])
lines = ((r.get("data") or {}).get("codeReturn") or "").strip().splitlines()
h.ok(bool(lines) and lines[-1].strip() == "0", "the daemon was killed after its run ended", r.describe()[:400])

# ---- still healthy -------------------------------------------------------------------------
r = S.post("/sandbox/python", {"code": "def main(a, b):\n    return a + b\n", "variables": {"a": 1, "b": 2}},
           token=None)
h.eq((r.status, (r.get("data") or {}).get("codeReturn")), (200, 3), "python runs after the attacks",
     r.describe()[:300])
r = S.post("/sandbox/js", {"code": "function main(v) { return v.a + v.b }", "variables": {"a": 1, "b": 2}},
           token=None)
h.eq((r.status, (r.get("data") or {}).get("codeReturn")), (200, 3), "js runs after the attacks",
     r.describe()[:300])
for p in canaries:
    os.unlink(p)
h.done()
