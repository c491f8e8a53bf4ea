#!/usr/bin/env python3
"""exec semantics end to end: background processes don't block an exec and keep
running; timeouts kill the whole process tree (daemons included) and leave the
box alive; output caps truncate with a marker; signal exit codes; large stdin;
concurrent execs in one box."""
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abtest  # noqa: E402

h = abtest.Harness()

# Lists every process of the box as "PID<TAB>ARGS" from /proc (does not rely on ps).
# A process may end while it is listed: its /proc entry is skipped, quietly.
PROCS = r"""for d in /proc/[0-9]*; do a=$(tr '\0' ' ' 2>/dev/null < $d/cmdline) && printf '%s\t%s\n' "${d#/proc/}" "$a"; done 2>/dev/null; exit 0"""


def procs(box):
    """[(pid, args)] of the processes in the box, or None if the listing failed."""
    r = h.exec(box, PROCS, timeout=30)
    if r.rc != 0:
        h.diag("process listing failed: " + r.describe())
        return None
    out = []
    for line in r.out.splitlines():
        pid, _, args = line.partition("\t")
        out.append((pid, args.strip()))
    return out


def running(box, args):
    """Pids of box processes whose command line is exactly `args`."""
    ps = procs(box) or []
    return [p for p, a in ps if a == args]


def wait_gone(box, args, timeout=5.0):
    end = time.monotonic() + timeout
    while True:
        left = running(box, args)
        if not left or time.monotonic() > end:
            return left
        time.sleep(0.2)


def wait_running(box, args, timeout=5.0):
    """running(), given the time for a command started with `&` to exec: the
    shell that forked it may have answered before the child's execve."""
    end = time.monotonic() + timeout
    while True:
        pids = running(box, args)
        if pids or time.monotonic() > end:
            return pids
        time.sleep(0.1)


def timed(*args, **kw):
    t0 = time.monotonic()
    r = h.run(*args, **kw)
    return r, time.monotonic() - t0


def init_pid(box):
    r = h.run("inspect", box)
    try:
        j = json.loads(r.out)
        return j.get("status"), j.get("init_pid")
    except ValueError:
        return None, None


box = h.create(None, "--memory", "256M", "--pids", "256", "--disk", "64M")
status0, pid0 = init_pid(box)

# ---- background processes ------------------------------------------------------

r, dt = timed("exec", box, "--", "sleep 300 & echo started", timeout=60)
h.eq((r.rc, r.out), (0, "started\n"), "exec of 'sleep 300 &' exits 0 with its output", r.describe())
h.ok(dt < 20, "... and returns quickly (%.1fs), not after the background sleep" % dt)
h.ok(wait_running(box, "sleep 300"), "a later exec sees the background 'sleep 300' still running",
     lambda: repr(procs(box)))

r, dt = timed("exec", box, "--", "nohup sleep 301 >/dev/null 2>&1 &", timeout=60)
h.eq(r.rc, 0, "exec of 'nohup sleep 301 >/dev/null 2>&1 &' exits 0", r.describe())
h.ok(dt < 20, "... and returns quickly (%.1fs)" % dt)
h.ok(wait_running(box, "sleep 301"), "a later exec sees the nohup'd sleep still running",
     lambda: repr(procs(box)))

r, dt = timed("exec", box, "--",
              "(while true; do echo x; date +%s%N > /tmp/tick; sleep 0.1; done) & echo $! > /tmp/printer.pid; "
              "echo launched", timeout=60)
h.ok(r.rc == 0 and "launched" in r.out.splitlines(),
     "exec starting a background process that keeps printing exits 0 with its output", r.describe())
h.ok(dt < 20, "... and returns quickly (%.1fs) although the printer keeps its stdout open" % dt)
r = h.exec(box, "kill -0 $(cat /tmp/printer.pid) && echo alive")
h.eq(r.out, "alive\n", "a later exec sees the printing background process alive", r.describe())
# Polled for up to 15 s (a loaded host may run the loop slowly); a printer
# blocked on a full pipe, or killed by SIGPIPE, never advances. What it saw
# goes to stderr for the log.
r = h.exec(box, "a=$(cat /tmp/tick); for i in $(seq 75); do sleep 0.2; b=$(cat /tmp/tick); "
                "[ \"$a\" != \"$b\" ] && break; done; echo \"tick $a -> $b\" >&2; "
                "ps -eo pid,stat,cmd >&2; "
                "[ \"$a\" != \"$b\" ] && kill -0 $(cat /tmp/printer.pid) && echo still-ticking")
h.eq(r.out, "still-ticking\n", "... and it keeps running (its loop still advances, not blocked on a full pipe)",
     r.describe())
r = h.exec(box, "kill $(cat /tmp/printer.pid); echo ok")
h.eq(r.out, "ok\n", "the printer can be killed from a later exec", r.describe())

# ---- timeouts -------------------------------------------------------------------

r, dt = timed("exec", "--timeout", "1s", box, "--", "sleep 100 & sleep 100", timeout=60)
h.eq(r.rc, 124, "exec --timeout 1s of 'sleep 100 & sleep 100' exits 124", r.describe())
h.ok(dt < 20, "... within 20 s (%.1fs)" % dt)
h.contains(r.err, "timed out", "... and says it timed out on stderr")
h.eq(wait_gone(box, "sleep 100"), [], "no 'sleep 100' (foreground or background) remains after the timeout")

r, dt = timed("exec", "--timeout", "1s", box, "--", "setsid sleep 200 & sleep 100", timeout=60)
h.eq(r.rc, 124, "exec --timeout 1s with a setsid'd background sleep exits 124", r.describe())
h.ok(dt < 20, "... within 20 s (%.1fs)" % dt)
h.eq(wait_gone(box, "sleep 200"), [], "the setsid'd 'sleep 200' (own session) is killed too")

r, dt = timed("exec", "--timeout", "1s", box, "--",
              "(setsid sleep 201 >/dev/null 2>&1 </dev/null &); (nohup setsid sleep 202 >/dev/null 2>&1 &); "
              "sleep 100", timeout=60)
h.eq(r.rc, 124, "exec --timeout 1s with double-forked daemons exits 124", r.describe())
h.ok(dt < 20, "... within 20 s (%.1fs)" % dt)
h.eq(wait_gone(box, "sleep 201") + wait_gone(box, "sleep 202"), [],
     "double-forked, reparented daemons started by the timed-out command are killed")
h.ok(running(box, "sleep 300") and running(box, "sleep 301"),
     "background processes of earlier (finished) execs are not killed by a later exec's timeout",
     lambda: repr(procs(box)))

r, dt = timed("exec", "--timeout", "1s", box, "--", "trap '' TERM INT HUP; sleep 100", timeout=60)
h.eq(r.rc, 124, "a command ignoring SIGTERM/SIGINT/SIGHUP still times out with 124", r.describe())
h.ok(dt < 20, "... within 20 s (%.1fs)" % dt)

r, dt = timed("exec", "--timeout", "500ms", box, "--", "echo partial; sleep 100", timeout=60)
h.eq((r.rc, r.out), (124, "partial\n"), "output printed before a timeout is delivered", r.describe())

r = h.run("exec", "--timeout", "10s", box, "--", "sleep 0.2; echo in-time")
h.eq((r.rc, r.out), (0, "in-time\n"), "a command that finishes before --timeout exits normally", r.describe())

r = h.exec(box, "echo alive")
h.eq((r.rc, r.out), (0, "alive\n"), "the box survives the timeouts (exec works)", r.describe())
status, pid = init_pid(box)
h.eq((status, pid), ("running", pid0), "the box is still running with the same init after the timeouts")

# ---- exit codes --------------------------------------------------------------------

r = h.run("exec", box, "--", "kill -9 $$")
h.eq(r.rc, 137, "a command killed by SIGKILL (kill -9 $$) exits 137", r.describe())
r = h.run("exec", box, "--", "kill -TERM $$")
h.eq(r.rc, 143, "a command killed by SIGTERM exits 143", r.describe())
r = h.exec(box, "kill -9 $$")
h.eq(r.rc, 137, "an inner bash killed by SIGKILL exits 137", r.describe())
for code in (1, 2, 42, 126, 127, 255):
    r = h.run("exec", box, "--", "exit %d" % code)
    h.eq(r.rc, code, "exit %d is passed through" % code, r.describe())
r = h.run("exec", box, "--", "no-such-command-xyz")
h.eq(r.rc, 127, "a missing command exits 127", r.describe())
h.contains(r.err, "no-such-command-xyz", "... and bash's message names it")

# ---- stdin -------------------------------------------------------------------------

data = os.urandom(2 * 1024 * 1024)
r, dt = timed("exec", "-i", box, "--", "wc -c", input=data, timeout=60)
h.eq((r.rc, r.out.strip()), (0, str(len(data))), "2 MiB through -i arrive complete (wc -c)", r.describe())
r = h.run("exec", "-i", box, "--", "sha256sum", input=data, timeout=60)
h.eq(r.out.split()[:1], [hashlib.sha256(data).hexdigest()], "2 MiB through -i arrive byte-identical (sha256)",
     r.describe())
r = h.run("exec", "-i", box, "--", "head -c 10 >/dev/null; echo read-ten", input=data, timeout=60)
h.eq((r.rc, r.out), (0, "read-ten\n"), "a command reading only part of a large stdin still completes",
     r.describe())
r = h.run("exec", "-i", box, "--", "cat > /workspace/stdin.bin && sha256sum /workspace/stdin.bin",
          input=data, timeout=60)
h.eq(r.out.split()[:1], [hashlib.sha256(data).hexdigest()], "stdin can be written to a file in the box",
     r.describe())

# ---- binary output, long command lines, clients that go away -------------------------

r = h.run("exec", box, "--", "for i in $(seq 0 255); do printf \"\\\\$(printf %03o $i)\"; done", text=False)
h.eq(r.out, bytes(range(256)), "stdout carries all 256 byte values unchanged", r.describe())
long_word = "x" * 100000
r = h.run("exec", box, "--", "echo %s | wc -c" % long_word)
h.eq((r.rc, r.out.strip()), (0, str(len(long_word) + 1)), "a 100 KB command line runs", r.describe()[:500])

# A CLI killed mid-exec: the command's process tree must not be left running.
r = h.run("exec", box, "--", "sleep 123 & sleep 124", timeout=1.5)
h.ok(r.timed_out, "an exec CLI killed mid-command (SIGKILL to its process group)", r.describe())
h.eq(wait_gone(box, "sleep 124", 10) + wait_gone(box, "sleep 123", 10), [],
     "... the command it ran (and its background child) is killed in the box")

# A reader that goes away (agentbox exec ... | head -c 5) ends the exec.
t0 = time.monotonic()
p = subprocess.Popen(["sh", "-c", '"$0" --data "$1" exec "$2" -- yes | head -c 5', h.bin, h.data, box],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
try:
    pout, perr = p.communicate(timeout=60)
except subprocess.TimeoutExpired:
    os.killpg(p.pid, signal.SIGKILL)
    pout, perr = p.communicate()
dt = time.monotonic() - t0
h.eq(pout, b"y\ny\ny", "exec ... -- yes | head -c 5 gives the first bytes", perr.decode(errors="replace"))
h.ok(dt < 20, "... and ends quickly once the reader is gone (%.1fs)" % dt)
h.eq(wait_gone(box, "yes", 10), [], "... and 'yes' is no longer running in the box")

# ---- concurrent execs in one box ----------------------------------------------------

results = {}


def worker(i):
    ch = "abcdefghij"[i]
    results[i] = h.run("exec", "-e", "N=%d" % i, box, "--",
                       "echo start-$N; : > /tmp/par-$N.s; head -c 100000 /dev/zero | tr '\\0' %s; echo; "
                       # a barrier: wait (up to 30 s) until all ten have started
                       "i=0; while [ $(ls /tmp/par-*.s | wc -l) -lt 10 ] && [ $i -lt 600 ]; do "
                       "sleep 0.05; i=$((i+1)); done; ls /tmp/par-*.s | wc -l > /tmp/par-$N.n; "
                       "echo end-$N" % ch,
                       timeout=60)


t0 = time.monotonic()
threads = [threading.Thread(target=worker, args=(i,)) for i in range(10)]
for t in threads:
    t.start()
for t in threads:
    t.join()
dt = time.monotonic() - t0
good = 0
bad = []
for i in range(10):
    ch = "abcdefghij"[i]
    want = "start-%d\n%s\nend-%d\n" % (i, ch * 100000, i)
    r = results.get(i)
    if r is not None and r.rc == 0 and r.out == want:
        good += 1
    else:
        bad.append(r.describe()[:500] if r is not None else "exec %d: no result" % i)
h.eq(good, 10, "10 concurrent execs in one box each return exactly their own output", "\n".join(bad))
# In parallel: each exec waited at a barrier until all ten had started;
# run one after another, none would have seen the others (whatever the load).
st = h.run("exec", box, "--", "cat /tmp/par-*.n")
seen = [int(x) for x in st.out.split()]
h.ok(len(seen) == 10 and all(x == 10 for x in seen),
     "... and they run in parallel: each saw all ten started (%.1fs in all)" % dt, st.describe())

# ---- output cap -----------------------------------------------------------------------

cap = 64 * 1024
capbox = h.create(None, "--output-cap", "64K", "--timeout", "3s", "--memory", "128M", "--disk", "32M")
marker_re = re.compile(r"\n?\[agentbox: output truncated after (\d+) bytes\]\n?")

r = h.run("exec", capbox, "--", "yes | head -c 1M", timeout=60, text=False)
out = r.out.decode("latin-1")
err = r.err.decode("utf-8", "replace")
h.eq(r.rc, 0, "a command whose output is truncated still exits 0", r.describe())
h.ok(len(out) <= cap + 100, "stdout is cut to the 64K cap plus a marker (%d bytes)" % len(out))
h.contains(out, "[agentbox: output truncated after", "the truncation marker is in stdout")
h.contains(err.lower(), "truncat", "the CLI says on stderr that output was truncated", err)
m = marker_re.search(out)
kept = out[:m.start()] if m else out
h.ok(len(kept) >= cap - 4096 and re.fullmatch(r"(y\n)*y?", kept) is not None,
     "what is kept is the start of the output, about 64K of it (%d bytes)" % len(kept))
h.ok(m is not None and int(m.group(1)) == len(kept),
     "the marker states how many bytes were kept",
     "marker: %r, kept %d" % (m.group(0) if m else None, len(kept)))

r = h.run("exec", capbox, "--", "head -c 65536 /dev/zero | tr '\\0' z", timeout=60)
h.ok(r.rc == 0 and r.out == "z" * cap and "truncat" not in r.err.lower(),
     "output of exactly the cap (64K) is delivered whole, without a marker",
     "rc %s, %d bytes out, stderr %r, tail %r" % (r.rc, len(r.out), r.err[:300], r.out[-80:]))
r = h.run("exec", capbox, "--", "head -c 65537 /dev/zero | tr '\\0' z", timeout=60)
h.ok(r.out.startswith("z" * cap) and "[agentbox: output truncated after" in r.out[cap:],
     "one byte over the cap is truncated, with the marker",
     "%d bytes out, tail %r" % (len(r.out), r.out[-120:]))

r = h.run("exec", capbox, "--", "head -c 5M /dev/zero | tr '\\0' e >&2; echo after-flood", timeout=60, text=False)
out = r.out.decode("latin-1")
err = r.err.decode("latin-1")
h.eq((r.rc, out), (0, "after-flood\n"),
     "the command keeps running past the cap (stdout after a stderr flood is intact)", r.describe())
h.ok(len(err) <= cap + 300, "stderr is cut to the cap too (%d bytes)" % len(err))
h.contains(err, "[agentbox: output truncated after", "the marker is in stderr")

r, dt = timed("exec", capbox, "--", "sleep 60", timeout=60)
h.eq(r.rc, 124, "the box's --timeout 3s applies when exec has no --timeout", r.describe())
h.ok(dt < 20, "... within 20 s (%.1fs)" % dt)
r, dt = timed("exec", "--timeout", "6s", capbox, "--", "sleep 4; echo done", timeout=60)
h.eq((r.rc, r.out), (0, "done\n"), "exec --timeout overrides the box's default timeout", r.describe())

# Moving a file into another directory is everyday work (apt's lists/partial,
# pip's and git's temp files): Landlock's "refer" right must be granted, or
# rename(2) answers EXDEV (found with apt in allowlist mode).
RENAME = ("import os\n"
          "for base in ('/tmp', '/workspace', '/var/tmp'):\n"
          "    os.makedirs(base + '/mv/partial', exist_ok=True)\n"
          "    open(base + '/mv/partial/f', 'w').write('x')\n"
          "    os.rename(base + '/mv/partial/f', base + '/mv/f')\n"
          "    os.link(base + '/mv/f', base + '/mv/partial/hard')\n"
          "    os.rename(base + '/mv/partial', base + '/moved-dir')\n"
          "print('ok')\n")
r = h.exec(box, "python3 -c \"$(echo %s | base64 -d)\"" % __import__("base64").b64encode(RENAME.encode()).decode())
h.eq(r.out.strip(), "ok", "rename and link across directories work in /tmp, /workspace, /var/tmp", r.describe())
r = h.exec(box, "mknod /tmp/abdev c 1 3 2>&1; echo rc=$?")
h.ok("rc=0" not in r.out, "... while device nodes still cannot be made", r.describe())

h.done()
