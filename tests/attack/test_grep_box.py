#!/usr/bin/env python3
"""grep is the box's work: a pattern that backtracks on every line (a ReDoS)
must cost the box, not the server. Each check passes only when the attack
fails:

- the server process spends (almost) no CPU on a search that runs for
  seconds, and the box's cgroup is charged for it;
- the search's deadline (tools.grep_timeout) holds inside one file: a single
  file whose search would take a minute ends at the deadline;
- a client that hangs up stops the search: neither the server nor the box
  keeps burning CPU for an answer nobody reads.

On a server that runs the regex itself, the server's CPU rises by the
search's time, the deadline is checked between files only, and the search
goes on after its client left."""
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

TIMEOUT_S = 4
h = abserver.ServerHarness(budget=170)
S = h.start_server(config={"tools": {"grep_timeout": "%ds" % TIMEOUT_S}})

# Each line makes PCRE2 backtrack to its match limit (tens of ms a line):
# "^(\w+\s?)*$" against "aaa...a!" has no required literal to reject it fast.
PATTERN = r"^(\w+\s?)*$"
r = S.post("/v1/sandboxes", {"id": "redos"})
h.eq(r.status, 201, "a box", r.describe())
r = S.exec("redos", "python3 -c \"import sys; open(sys.argv[1],'w').write(('a'*1500+'!\\n')*int(sys.argv[2]))\" "
           "/workspace/few.txt 40 && python3 -c \"import sys; open(sys.argv[1],'w').write(('a'*1500+'!\\n')*int(sys.argv[2]))\" "
           "/workspace/many.txt 650 && echo ok")
h.eq((r.status, (r.get("stdout") or "").strip()), (200, "ok"), "files whose lines backtrack", r.describe())


def server_cpu_s():
    with open("/proc/%d/stat" % S.proc.pid) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def box_cpu_ns():
    b = S.get("/v1/sandboxes/redos")
    return (b.get("stats") or {}).get("cpu_usage_ns")


def grep(path, timeout=120):
    return S.post("/v1/sandboxes/redos/tools/grep", {"args": {"pattern": PATTERN, "path": path}},
                  timeout=timeout)


# 1. The server does not pay for the regex; the box does.
cpu0, box0, t0 = server_cpu_s(), box_cpu_ns(), time.monotonic()
r = grep("/workspace/few.txt")
wall = time.monotonic() - t0
cpu = server_cpu_s() - cpu0
box1 = box_cpu_ns()
h.eq(r.status, 200, "grep answers", r.describe())
h.ok("No matches found" in (r.get("output") or ""), "grep searched the file (no line matches)", r.describe())
h.ok(wall > 0.4, "the search took a while (%.2f s): the pattern backtracks" % wall)
h.ok(cpu < max(0.25, 0.2 * wall),
     "the server spent %.2f s of CPU on a %.2f s search (the regex runs in the box)" % (cpu, wall))
if box0 is not None and box1 is not None:
    boxcpu = (box1 - box0) / 1e9
    h.ok(boxcpu > 0.2 and boxcpu > 4 * cpu,
         "the box's cgroup was charged %.2f s of CPU for it (the server %.2f s)" % (boxcpu, cpu))
else:
    h.skip("the box's cgroup was charged for it", "no cpu_usage_ns in the box's stats")

# 2. The deadline holds inside one file (many.txt, under grep_file_max, alone
# takes ~20 s).
t0 = time.monotonic()
r = grep("/workspace/many.txt")
wall = time.monotonic() - t0
out = r.get("output") or ""
h.eq(r.status, 200, "grep of one huge file answers", r.describe())
h.ok(wall < TIMEOUT_S + 6, "it ended after %.1f s (deadline %d s, inside one file)" % (wall, TIMEOUT_S))
h.ok("stopped after %d s" % TIMEOUT_S in out, "and says it stopped at the deadline", out[:300])


def box_session_burn(window=0.8):
    """The most CPU seconds any ab-session process of the box used in `window`
    (the probe's own session is idle)."""
    probe = ("python3 -c \"import os,time\n"
             "def snap():\n"
             "  d={}\n"
             "  for p in os.listdir('/proc'):\n"
             "    try:\n"
             "      s=open('/proc/%%s/stat'%%p).read()\n"
             "    except Exception:\n"
             "      continue\n"
             "    if '(ab-session)' in s:\n"
             "      f=s.rsplit(')',1)[1].split(); d[p]=int(f[11])+int(f[12])\n"
             "  return d\n"
             "a=snap(); time.sleep(%s); b=snap()\n"
             "print(max([b[p]-a.get(p,b[p]) for p in b]+[0])/os.sysconf('SC_CLK_TCK'))\"" % window)
    r = S.exec("redos", probe)
    try:
        return float((r.get("stdout") or "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        h.diag("probe failed: %s" % r.describe())
        return None


# 3. A client that hangs up stops the search (in the server and in the box).
body = json.dumps({"args": {"pattern": PATTERN, "path": "/workspace/many.txt"}}).encode()
req = (b"POST /v1/sandboxes/redos/tools/grep HTTP/1.1\r\nHost: 127.0.0.1\r\n"
       b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)) + body
sk = socket.create_connection((S.host, S.port), timeout=10)
sk.sendall(req)
time.sleep(1.0)
burn_before = box_session_burn(0.5)
sk.close()
time.sleep(0.7)
cpu0, t0 = server_cpu_s(), time.monotonic()
burn = box_session_burn(0.8)
time.sleep(max(0.0, 2.0 - (time.monotonic() - t0)))
cpu = server_cpu_s() - cpu0
h.ok(cpu < 0.15, "after the client hung up the server spent %.2f s of CPU in %.1f s"
     % (cpu, time.monotonic() - t0))
h.ok(burn is not None and burn < 0.3,
     "after the client hung up no process of the box searches on (%s s of CPU in 0.8 s; "
     "before the hang-up: %s s in 0.5 s)" % (burn, burn_before))

# The box still serves a normal grep.
r = S.exec("redos", "printf 'alpha\\nbeta\\n' > /workspace/ok.txt")
r = S.post("/v1/sandboxes/redos/tools/grep", {"args": {"pattern": "bet", "path": "/workspace/ok.txt"}})
h.eq((r.status, r.get("output")), (200, "Found 1 matches under /workspace/ok.txt\n/workspace/ok.txt:2: beta"),
     "a plain grep still works", r.describe())
h.done()
