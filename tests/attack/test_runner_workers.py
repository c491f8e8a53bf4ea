#!/usr/bin/env python3
"""Attacks on the code runner's warm workers (runners/README.md, "Worker
mode"): a worker serves many runs of ONE app, each in a fresh context. The
snippets get past the module policy on purpose (random._os: the policy is
compatibility, not the boundary) and then go for other runs: app A's runs
cannot see, read or kill app B's (different workers, different uids); what
one run changes in the interpreter (module attributes, builtins, the
environment) never reaches the next run of its own worker; a run that
leaves a daemon or a file makes its worker recycle, and the next run sees
neither; a run that kills its own worker fails cleanly and the next run
works. Each check passes only when the attack fails."""
import json
import os
import secrets
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

IDLE_S = 4  # an idle worker of an app ends after this (AGENTBOX_RUNNER_IDLE_S)
TOKEN = "tok-" + secrets.token_hex(8)
KEY_A = "key-a-" + secrets.token_hex(8)
KEY_B = "key-b-" + secrets.token_hex(8)
h = abserver.ServerHarness(budget=150)
S = h.start_server(name="runnerworkers", token=TOKEN,
                   env={"AGENTBOX_RUNNER_WARM": "2", "SANDBOX_MAX_CONCURRENCY": "4",
                        "AGENTBOX_RUNNER_IDLE_S": str(IDLE_S)},
                   config={"api_keys": [{"key": KEY_A, "app_id": "appa"},
                                        {"key": KEY_B, "app_id": "appb"}]})
BYPASS = "import random\ndef _os():\n    return random._os\n"
# the uids of the runner box's processes, read from /proc (open() is the run's dir only)
UIDS = ("def _uids():\n    o = _os()\n    out = set()\n    for p in o.listdir('/proc'):\n"
        "        if not p.isdigit():\n            continue\n        try:\n"
        "            fd = o.open('/proc/%s/status' % p, o.O_RDONLY)\n"
        "            t = o.read(fd, 4096).decode()\n            o.close(fd)\n"
        "        except OSError:\n            continue\n"
        "        out.update(int(l.split()[1]) for l in t.splitlines() if l.startswith('Uid:'))\n"
        "    return sorted(out)\n")
WHO = BYPASS + ("def main():\n    o = _os()\n    return {'uid': o.getuid(), 'ppid': o.getppid(), "
                "'cwd': o.getcwd()}\n")


def py(key, code, limits=None):
    body = {"code": code}
    if limits:
        body["limits"] = limits
    return S.post("/sandbox/python", body, headers={"Authorization": "Bearer " + key}, token=None,
                  timeout=60)


def ret(r):
    return (r.get("data") or {}).get("codeReturn") if isinstance(r.json, dict) else None


def who(key):
    r = py(key, WHO)
    return ret(r) or {}, r


# ---- the caller's app --------------------------------------------------------------------
r = S.post("/v1/keys", {"app_id": "appc"})
h.eq(r.status, 201, "a stored key of app appc", r.describe())
KEY_C = r.get("key") or "none"
c1, r = who(KEY_C)
h.ok(isinstance(c1.get("uid"), int), "a stored API key runs code", r.describe()[:300])
c1_at = time.monotonic()
r = py("key-nobody-" + secrets.token_hex(4), "def main():\n    return 7\n")
h.eq(r.status, 401, "an unknown key is refused", r.describe()[:300])

# ---- one worker per app: runs of A share it, B never does --------------------------------
a1, r = who(KEY_A)
h.ok(isinstance(a1.get("uid"), int), "app A runs", r.describe()[:300])
a2, r = who(KEY_A)
h.eq(a2.get("uid"), a1.get("uid"), "app A's next run is served by its warm worker (same uid)",
     r.describe()[:300])
b1, r = who(KEY_B)
h.ok(isinstance(b1.get("uid"), int) and b1.get("uid") != a1.get("uid"),
     "app B's run has another uid than app A's", "A %s B %s" % (a1, b1))
h.ok(b1.get("ppid") != a1.get("ppid"), "app B's run is another worker's", "A %s B %s" % (a1, b1))
t1, r = who(TOKEN)
h.ok(t1.get("uid") not in (a1.get("uid"), b1.get("uid")), "the admin token is an app of its own",
     "admin %s A %s B %s" % (t1, a1, b1))

# ---- A goes for B ---------------------------------------------------------------------------
bsecret = "B-SECRET-" + secrets.token_hex(8)
r = py(KEY_B, BYPASS + "def main():\n    o = _os()\n    root = o.path.dirname(o.getcwd())\n"
       "    with open('mine.txt', 'w') as f:\n        f.write(%r)\n    return root\n" % bsecret)
broot = ret(r) or "/nonexistent"
h.ok(broot.startswith("/tmp/"), "app B's run knows its worker's dir", r.describe()[:300])
r = py(KEY_A, BYPASS + "def main():\n    o = _os()\n    out = []\n"
       "    for p in (%r, '/tmp'):\n        try:\n            out.append(sorted(o.listdir(p)))\n"
       "        except OSError as e:\n            out.append('denied')\n"
       "    found = o.popen('grep -rs %s /tmp /var/tmp /dev/shm 2>/dev/null | head -3').read()\n"
       "    return [out[0], found]\n" % (broot, bsecret))
got = ret(r) or ["?", "?"]
h.eq(got[0], "denied", "app A cannot list app B's worker dir", r.describe()[:300])
h.ok(bsecret not in json.dumps(got), "app A finds nothing of app B's files", r.describe()[:300])
r = py(KEY_A, BYPASS + "def main():\n    o = _os()\n    try:\n        o.kill(%d, 9)\n        return 'killed'\n"
       "    except OSError as e:\n        return 'refused'\n" % int(b1.get("ppid") or 1))
h.eq(ret(r), "refused", "app A cannot kill app B's worker", r.describe()[:300])
r = py(KEY_A, BYPASS + "def main():\n    o = _os()\n    try:\n"
       "        return len(open('/proc/%d/mem', 'rb').read(1))\n    except OSError:\n        return 'refused'\n"
       % int(b1.get("ppid") or 1))
h.eq(ret(r), "refused", "app A cannot read app B's worker's memory", r.describe()[:300])
b2, r = who(KEY_B)
h.eq((b2.get("uid"), b2.get("ppid")), (b1.get("uid"), b1.get("ppid")),
     "app B's worker lives on, untouched", "before %s after %s" % (b1, b2))

# ---- nothing of a run reaches the next run of its own worker -----------------------------
mark = "MARK-" + secrets.token_hex(6)
r = py(KEY_A, BYPASS + "import json, builtins\nLEFT = 1\n"
       "def main():\n    o = _os()\n    json.MARK = %r\n    json.dumps = lambda *a, **k: %r\n"
       "    random.random = lambda: 4\n    o.environ['MARK'] = %r\n"
       "    __builtins__['len'] = lambda x: 42\n    return o.getuid()\n" % (mark, mark, mark))
u_a = ret(r)
h.ok(isinstance(u_a, int), "app A's run changes its interpreter", r.describe()[:300])
r = py(KEY_A, BYPASS + "import json\ndef main():\n    o = _os()\n"
       "    return [o.getuid(), getattr(json, 'MARK', None), json.dumps([1]), random.random() < 1, "
       "o.environ.get('MARK'), len('ab'), 'LEFT' in globals()]\n")
h.eq(ret(r), [u_a, None, "[1]", True, None, 2, False],
     "the next run of the same worker sees none of it", r.describe()[:300])
r = py(KEY_A, BYPASS + "def main():\n    o = _os()\n    o.setsid()\n    return o.getuid()\n")
h.eq(ret(r), u_a, "a run changes its process (a new session)", r.describe()[:300])
a3, r = who(KEY_A)
h.eq(a3.get("uid"), u_a, "... which ends with it: the worker goes on", r.describe()[:300])

# ---- a daemon left behind: the worker recycles, the daemon dies ----------------------------
spy = "/tmp/spy-" + secrets.token_hex(4)
r = py(KEY_A, BYPASS + "def main():\n    o = _os()\n    o.system('(setsid sh -c \"while :; do date >> %s; "
       "sleep 0.1; done\" &) ; echo started')\n    return o.getuid()\n" % spy)
u_d = ret(r)
h.ok(isinstance(u_d, int), "app A's run leaves a daemon behind", r.describe()[:300])
time.sleep(0.5)
a4, r = who(KEY_A)
h.ok(isinstance(a4.get("uid"), int) and a4.get("uid") != u_d,
     "the next run is another worker's (the daemon's recycled)", "%s then %s" % (u_d, a4))
r = py(KEY_A, BYPASS + UIDS + ("def main():\n    o = _os()\n    import time\n"
                               "    n1 = o.path.exists(%r)\n    time.sleep(0.5)\n"
                               "    u = _uids()\n    return [n1, o.path.exists(%r), %d in u, o.getuid() in u]\n")
       % (spy, spy, int(u_d or 0)))
h.eq(ret(r), [False, False, False, True], "the daemon and its file are gone (no process of its uid)",
     r.describe()[:300])

# ---- a file left behind: the worker recycles, the next run sees nothing --------------------
left = "/tmp/left-" + secrets.token_hex(4)
r = py(KEY_A, BYPASS + "def main():\n    o = _os()\n    o.close(o.open(%r, o.O_CREAT | o.O_WRONLY, 0o600))\n"
       "    return o.getuid()\n"
       % left)
u_left = ret(r)
h.ok(isinstance(u_left, int), "app A's run leaves a file in /tmp", r.describe()[:300])
time.sleep(0.5)  # the sweep follows the worker's end, just after the answer (docs/security.md)
r = py(KEY_A, BYPASS + "def main():\n    o = _os()\n    return [o.getuid(), o.path.exists(%r)]\n" % left)
got = ret(r) or [None, None]
h.ok(got[0] != u_left and got[1] is False, "the next run is another worker's and sees no file",
     r.describe()[:300])

# ---- a run that kills its own worker --------------------------------------------------------
r = py(KEY_A, BYPASS + "def main():\n    o = _os()\n    o.kill(o.getppid(), 9)\n    import time\n"
       "    time.sleep(5)\n    return 'survived'\n")
h.ok(r.status == 200 and r.get("success") is False, "a run that kills its worker fails cleanly",
     r.describe()[:300])
r = py(KEY_A, "def main():\n    return 'next'\n")
h.eq(ret(r), "next", "... and the next run works", r.describe()[:300])

# ---- a run that times out: its worker is gone, the next works ------------------------------
a5, r = who(KEY_A)
r = py(KEY_A, "def main():\n    while True:\n        pass\n", limits={"timeoutMs": 800})
h.eq(r.get("message"), "Script execution timed out after 800ms", "a run times out", r.describe()[:300])
a6, r = who(KEY_A)
h.ok(isinstance(a6.get("uid"), int) and a6.get("uid") != a5.get("uid"),
     "the next run is another worker's", "%s then %s" % (a5, a6))

# ---- per-run memory limits on a worker's reused cgroup --------------------------------------
big = "def main():\n    b = bytearray(150 << 20)\n    return len(b) >> 20\n"
r = py(KEY_B, big, limits={"memoryMB": 220})
h.eq(ret(r), 150, "a run with memoryMB 220 may take 150 MB (the worker's limit is raised)", r.describe()[:300])
r = py(KEY_B, big, limits={"memoryMB": 64})
h.eq((r.get("success"), r.get("message")), (False, "Memory limit exceeded"),
     "the next run with memoryMB 64 may not (the limit is lowered again)", r.describe()[:300])
r = py(KEY_B, "def main():\n    return len(bytearray(8 << 20))\n")
h.eq(ret(r), 8 << 20, "the run after it works", r.describe()[:300])

# ---- JS: a run's globals never reach the next run, of its app or another ---------------------
def js(key, code):
    return S.post("/sandbox/js", {"code": code}, headers={"Authorization": "Bearer " + key}, token=None,
                  timeout=60)


r = js(KEY_A, "globalThis.LEAK = 'a'; Object.prototype.polluted = 1; Array.prototype.map = () => 'x';"
              " function main() { return 1 }")
h.eq(ret(r), 1, "JS: app A's run sets globals and pollutes prototypes", r.describe()[:300])
for key, who_ in ((KEY_A, "app A's next JS run"), (KEY_B, "app B's JS run")):
    r = js(key, "function main() { return [typeof LEAK, ({}).polluted === undefined, [1].map(x => x + 1)] }")
    h.eq(ret(r), ["undefined", True, [2]], who_ + " sees none of it", r.describe()[:300])

# ---- an idle worker of an app ends after AGENTBOX_RUNNER_IDLE_S -----------------------------
time.sleep(max(0.0, c1_at + IDLE_S + 1.5 - time.monotonic()))
r = py(TOKEN, BYPASS + UIDS + "def main():\n    return [_uids(), _os().getuid()]\n")
got = ret(r) or [[], None]
h.ok(got[1] in got[0] and c1.get("uid") not in got[0],
     "app C's worker, idle for %d s, has ended" % IDLE_S, "C %s, uids %s" % (c1, got))
h.done()
