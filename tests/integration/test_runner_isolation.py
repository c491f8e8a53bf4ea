#!/usr/bin/env python3
"""The code runner's zygote and per-run cgroups (issue 5), over HTTP with the
real server: every run's process is a fork of one pre-imported parent
(runners/python/runner.py --zygote) that never runs user code, in a cgroup of
its own (memoryMB + headroom).

- memory: a JS snippet allocating far more than memoryMB, and a Python one
  whose memory RLIMIT_AS does not see (tmpfs files in its temp dir), are
  killed by their run's cgroup and answer "Memory limit exceeded"; the server
  answers normal runs afterwards;
- two concurrent runs: neither can read the other's temp files, signal it, or
  read its memory; neither can signal or read the zygote (root in the box);
- what a run changes in its interpreter (builtins, stdlib modules, module
  attributes, JS prototypes) is gone in the next run.

Runs wait on each other through marker files, never on the clock."""
import json
import os
import secrets
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=170)
S = h.start_server(env={"AGENTBOX_RUNNER_WARM": "2"})


def run(lang, code, variables=None, limits=None, timeout=90):
    body = {"code": code}
    if variables is not None:
        body["variables"] = variables
    if limits is not None:
        body["limits"] = limits
    return S.post("/sandbox/" + lang, body, token=None, timeout=timeout)


def ret(r):
    return (r.get("data") or {}).get("codeReturn")


# os past the module policy (compatibility, not the boundary): the attacks
# below use it the way a hostile snippet would.
OS = "def _os():\n    import random\n    return random._os\n"

# ---- memory: the run's cgroup ----------------------------------------------------------
r = run("js", "function main() { const a = []; for (;;) a.push(new Array(1e6).fill(7)); }",
        limits={"memoryMB": 32, "timeoutMs": 20000})
h.eq((r.status, r.get("success"), r.get("message")), (200, False, "Memory limit exceeded"),
     "js: allocating far more than memoryMB=32 -> 'Memory limit exceeded'", r.describe()[:600])
r = run("js", "function main(v) { return v.a * 2 }", {"a": 21})
h.eq(ret(r), 42, "js: the next run works", r.describe()[:300])

# tmpfs pages (the temp dir is on the box's /tmp) are charged to the run's
# cgroup but are no address space: only the cgroup stops this one. 20 files
# of 8 MB each (diskMB=10 allows each) = 160 MB > 32 + headroom.
r = run("python", "def main():\n    chunk = 'x' * (8 << 20)\n    for i in range(20):\n"
                  "        with open('f%d.txt' % i, 'w') as f:\n            f.write(chunk)\n    return 'wrote all'\n",
        limits={"memoryMB": 32, "diskMB": 10, "timeoutMs": 20000})
h.eq((r.status, r.get("success"), r.get("message")), (200, False, "Memory limit exceeded"),
     "python: 160 MB of tmpfs files with memoryMB=32 -> 'Memory limit exceeded' (the cgroup)",
     r.describe()[:600])
r = run("python", "def main():\n    b = bytearray(1 << 30)\n    return len(b)\n", limits={"memoryMB": 32})
h.eq((r.get("success"), r.get("message")), (False, "Memory limit exceeded"),
     "python: a 1 GiB bytearray -> 'Memory limit exceeded'", r.describe()[:600])
r = run("python", "def main():\n    b = bytearray(40 << 20)\n    return len(b)\n", limits={"memoryMB": 64})
h.eq(ret(r), 40 << 20, "python: 40 MB within memoryMB=64 works", r.describe()[:300])
r = run("python", "def main(a, b):\n    return a + b\n", {"a": 1, "b": 2})
h.eq(ret(r), 3, "python: the next run works", r.describe()[:300])

# ---- two runs at once --------------------------------------------------------------------
tok = secrets.token_hex(8)
A_READY = "/tmp/a-ready-" + tok
B_DONE = "/tmp/b-done-" + tok
A_SAW = "/tmp/a-saw-" + tok  # B stays until A saw B_DONE: a run's files go when it ends

# A: writes a secret in its temp dir, says where and who it is, then waits
# (alive, its dir present) until B is done.
CODE_A = OS + """
def main():
    o = _os()
    system_helper.fs.write_file('secret.txt', 'SECRET-%s')
    fd = o.open('%s.tmp', o.O_WRONLY | o.O_CREAT, 0o644)
    o.fchmod(fd, 0o644)  # a run's umask is 077: B may read this one
    o.write(fd, json.dumps({'dir': system_helper.fs.tmp_dir, 'pid': o.getpid(),
                            'uid': o.getuid()}).encode())
    o.close(fd)
    o.rename('%s.tmp', '%s')
    for i in range(400):
        if o.path.exists('%s'):
            o.close(o.open('%s', o.O_WRONLY | o.O_CREAT, 0o644))
            return {'waited': True, 'secret': system_helper.fs.read_file('secret.txt')}
        time.sleep(0.05)
    return {'waited': False}
""" % (tok, A_READY, A_READY, A_READY, B_DONE, A_SAW)

# B: waits for A, then goes for A's files, A's process and the zygote.
CODE_B = OS + """
def main():
    o = _os()
    out = {}
    for i in range(400):
        if o.path.exists('%s'):
            break
        time.sleep(0.05)
    try:
        a = json.loads(open_any('%s'))
    except Exception as e:
        a = {}
    out['saw_a'] = bool(a)
    out['me'] = {'pid': o.getpid(), 'uid': o.getuid()}
    def attempt(name, fn):
        try:
            out[name] = 'OK: %%r' %% (fn(),)
        except Exception as e:
            out[name] = 'ERR %%s' %% type(e).__name__
    d = a.get('dir', '/nonexistent')
    attempt('list_a_dir', lambda: o.listdir(d))
    attempt('read_a_secret', lambda: open_any(d + '/secret.txt'))
    pid = a.get('pid', 0)
    attempt('signal_a', lambda: o.kill(pid, 0))
    attempt('read_a_mem', lambda: open_any('/proc/%%d/mem' %% pid, 1))
    attempt('read_a_environ', lambda: open_any('/proc/%%d/environ' %% pid))
    z = 0
    for p in o.listdir('/proc'):
        if p.isdigit():
            try:
                cmd = open_any('/proc/%%s/cmdline' %% p)
            except Exception:
                continue
            # its children were forked with the same command line: the
            # zygote is the one that stays root
            if '--zygote' in cmd and o.stat('/proc/' + p).st_uid == 0:
                z = int(p)
    out['zygote_found'] = z > 0
    out['zygote_uid'] = o.stat('/proc/%%d' %% z).st_uid if z else None
    attempt('signal_zygote', lambda: o.kill(z, 0))
    attempt('kill_zygote', lambda: o.kill(z, 9))
    attempt('read_zygote_mem', lambda: open_any('/proc/%%d/mem' %% z, 1))
    attempt('read_zygote_environ', lambda: open_any('/proc/%%d/environ' %% z))
    fd = o.open('%s', o.O_WRONLY | o.O_CREAT, 0o644)
    o.close(fd)
    for i in range(200):
        if o.path.exists('%s'):
            break
        time.sleep(0.05)
    return out

def open_any(path, n=-1):
    o = _os()
    fd = o.open(path, o.O_RDONLY)
    try:
        return o.read(fd, 1 << 20 if n < 0 else n).decode('utf-8', 'replace')
    finally:
        o.close(fd)
""" % (A_READY, A_READY, B_DONE, A_SAW)

res = {}


def go(name, lang, code):
    res[name] = run(lang, code, limits={"timeoutMs": 30000}, timeout=120)


ta = threading.Thread(target=go, args=("a", "python", CODE_A))
tb = threading.Thread(target=go, args=("b", "python", CODE_B))
ta.start()
tb.start()
ta.join(150)
tb.join(150)
ra, rb = res.get("a"), res.get("b")
a_out = ret(ra) if ra else None
b_out = ret(rb) if rb else {}
b_out = b_out or {}
h.eq(a_out, {"waited": True, "secret": "SECRET-" + tok},
     "A ran alongside B to the end (B never killed it) and kept its secret",
     ra.describe()[:600] if ra else "no answer")
h.ok(b_out.get("saw_a") is True, "B ran while A was alive (it read A's ready file)",
     rb.describe()[:1500] if rb else "no answer")
for k in ("list_a_dir", "read_a_secret", "signal_a", "read_a_mem", "read_a_environ"):
    h.ok(str(b_out.get(k, "")).startswith("ERR "), "B cannot %s: %s" % (k.replace("_", " "), b_out.get(k)),
         rb.describe()[:1500] if rb else "")
h.ok("SECRET-" + tok not in json.dumps(b_out), "B saw nothing of A's secret")
h.ok(b_out.get("zygote_found") is True and b_out.get("zygote_uid") == 0,
     "B sees the zygote (root in the box) in the box's /proc", json.dumps(b_out))
for k in ("signal_zygote", "kill_zygote", "read_zygote_mem", "read_zygote_environ"):
    h.ok(str(b_out.get(k, "")).startswith("ERR "), "B cannot %s: %s" % (k.replace("_", " "), b_out.get(k)),
         json.dumps(b_out))
me = b_out.get("me") or {}
h.ok(me.get("uid") not in (None, 0) and me.get("pid"), "B runs as a uid of its own (%s)" % me.get("uid"))
r = run("python", "def main():\n    return 'zygote alive'\n")
h.eq(ret(r), "zygote alive", "runs still work after B's attempts on the zygote", r.describe()[:300])

# ---- what a run changes stays in its process ---------------------------------------------
r = run("python", OS + """
import builtins, json, math, collections, string
def main():
    builtins.len = lambda x: 42
    builtins.MARK = 'left-behind'
    json.dumps = lambda *a, **k: 'patched'
    math.pi = 3
    collections.Counter = None
    string.ascii_letters = 'x'
    _os().environ['LEFT'] = 'behind'
    import random
    random.random = lambda: 0.5
    return [hasattr(builtins, 'MARK'), math.pi, json.dumps(1)]
""")
h.eq(ret(r), [True, 3, "patched"], "python: a run patches builtins, stdlib modules and os.environ",
     r.describe()[:600])
for i in range(3):
    r = run("python", OS + """
import builtins, json, math, collections, string, random
def main():
    return {'len': len([1, 2]), 'mark': hasattr(builtins, 'MARK'), 'dumps': json.dumps({'a': 1}),
            'pi': math.pi > 3.14, 'counter': collections.Counter('aab')['a'], 'letters': len(string.ascii_letters),
            'env': _os().environ.get('LEFT'), 'random': random.random() != 0.5}
""")
    h.eq(ret(r), {"len": 2, "mark": False, "dumps": '{"a": 1}', "pi": True, "counter": 2, "letters": 52,
                  "env": None, "random": True},
         "python: run %d after the patching one sees clean state" % (i + 1), r.describe()[:600])
r = run("js", "function main() { Array.prototype.push = function () { return -1 }; "
              "globalThis.LEFT = 'behind'; JSON.stringify = () => 'patched'; return [].push(1) }")
h.eq(ret(r), -1, "js: a run patches Array.prototype, JSON and globalThis", r.describe()[:300])
r = run("js", "function main() { const a = []; return [a.push(1), typeof globalThis.LEFT, JSON.stringify({a: 1})] }")
h.eq(ret(r), [1, "undefined", '{"a":1}'], "js: the next run sees clean state", r.describe()[:300])
h.done()
