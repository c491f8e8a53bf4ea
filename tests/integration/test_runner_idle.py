#!/usr/bin/env python3
"""Idle means asleep: the code runner's warm workers (runners/README.md,
"Worker mode") served through `agentbox serve`, in its system box, use no CPU
while they wait for the next run. A JS worker that had served runs and sat idle
for a few seconds used ~35-50 ms of CPU a second (it waited for the next run in
a synchronous read, inside the VM, and Bun's garbage collector signalled it
every millisecond to reach a safepoint), so 11 idle workers kept the box at
0.3-0.5 CPU with no requests. The check reads each worker's utime+stime from
/proc/PID/stat (the box's processes are visible from the host) every second
for IDLE_S seconds once the workers are idle: an asleep worker is busy in at
most the second or two of its one collection, a spinning one in every second
from the spin's start on."""
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

SETTLE_S = 6
IDLE_S = 12  # the spin began 3-10 s after the last run and went on until the next
BUSY_MS = 20  # a second in which a worker used this much CPU is a busy second
MAX_BUSY = 3  # asleep: at most the one collection a worker makes once idle (30-60 ms)
RUNS = 12
TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")

h = abserver.ServerHarness(budget=150)
STOKEN = "sandbox-token-%d-idle" % os.getpid()
S = h.start_server(env={"SANDBOX_TOKEN": STOKEN, "AGENTBOX_RUNNER_WARM": "2",
                        "AGENTBOX_RUNNER_IDLE_S": "120"})
AUTH = {"Authorization": "Bearer " + STOKEN}
# Each run leaves garbage behind, so the collector has work once the worker idles.
CODE = {"js": "function main(v) { const g = []; for (let i = 0; i < 20000; i++) g.push({i, s: 'x' + i});"
              " return v.a + v.b }",
        "python": "def main(a, b):\n    return a + b\n"}


def run(lang):
    return S.post("/sandbox/" + lang, {"code": CODE[lang], "variables": {"a": 1, "b": 2}},
                  headers=AUTH, token=None, timeout=300)


def pid_ns(pid):
    try:
        return os.readlink("/proc/%d/ns/pid" % pid)
    except OSError:
        return None


def box_pid_nses():
    """The pid namespace of this server's system box (its init pid is in the
    server's log: `agentbox ls` does not list system boxes)."""
    pids = re.findall(r'"msg":"box started","box":"sys-runner","init_pid":"(\d+)"', S.log())
    return {pid_ns(int(p)) for p in pids[-1:]} - {None}


def workers(lang, nses):
    """{pid: cmdline} of the warm processes of lang in the given pid namespaces
    (each runs as its run's uid: JS's run runner.js, Python's are forks of the
    root zygote, runner.py --zygote)."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                argv = [a.decode("utf-8", "replace") for a in f.read().split(b"\0")]
        except OSError:
            continue
        if lang == "js":
            mine = len(argv) > 1 and argv[1].endswith("/runner.js")
        else:
            mine = "--zygote" in argv and any(a.endswith("/runner.py") for a in argv)
        if mine and pid_ns(int(p)) in nses and uid(int(p)) not in (None, 0):
            out[int(p)] = " ".join(argv)
    return out


def uid(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            return int(next(l for l in f if l.startswith("Uid:")).split()[1])
    except (OSError, StopIteration, ValueError):
        return None


def cpu_ms(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(st[11]) + int(st[12])) * TICK_MS


for lang in ("js", "python"):
    for i in range(RUNS):
        r = run(lang)
        if i == 0:
            h.eq((r.status, (r.get("data") or {}).get("codeReturn")), (200, 3), "%s: a run answers" % lang,
                 r.describe()[:300])
nses = box_pid_nses()
h.ok(nses, "the server's system box is found", repr(nses))
time.sleep(SETTLE_S)
ws_of = {lang: workers(lang, nses) for lang in ("js", "python")}
pids = [p for ws in ws_of.values() for p in ws]
busy = {p: 0 for p in pids}  # busy seconds
total = {p: 0.0 for p in pids}
last = {p: cpu_ms(p) for p in pids}
for _ in range(IDLE_S):
    time.sleep(1)
    for p in pids:
        now = cpu_ms(p)
        if now is None or last[p] is None:
            continue
        busy[p] += now - last[p] >= BUSY_MS
        total[p] += now - last[p]
        last[p] = now
for lang, ws in ws_of.items():
    h.ok(ws, "%s: the warm workers are found in the box" % lang, repr(ws))
    h.ok(ws and all(busy[p] <= MAX_BUSY for p in ws),
         "%s: an idle worker sleeps (at most %d of %d s with >= %d ms of CPU)"
         % (lang, MAX_BUSY, IDLE_S, BUSY_MS),
         "busy seconds per worker: %r; ms in %d s: %r" % ({p: busy[p] for p in ws}, IDLE_S,
                                                        {p: total[p] for p in ws}))
r = run("js")
h.eq((r.get("data") or {}).get("codeReturn"), 3, "js: a run after the idle time answers", r.describe()[:300])
h.done()
