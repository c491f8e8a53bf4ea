#!/usr/bin/env python3
"""The JS runner's warm worker alone (runners/js/runner.js --worker, issue 29),
beside a bare interpreter start per run.

    python3 bench/js_worker.py [--runs 1000] [--starts 30] [--runtime bun|node|both]

Drives one worker over a pipe with RUNS runs of
`function main(v){return v.a+v.b}` (each: run line -> result -> ready) and
prints the median and p95 latency per run and the worker's CPU per run
(user+system time of the process over all runs / RUNS, from /proc). Beside
it: STARTS times `RUNTIME -e` of the same sum (a bare interpreter start per
run) and STARTS one-shot runs of runner.js (a process per run, as before the
worker), their median wall time and CPU per run (children's rusage).
No box, no server: the cost of the runtime only. Python 3 stdlib only.
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
RUNNER = os.path.join(REPO, 'runners', 'js', os.environ.get('RJ', 'runner.js'))
BUN_PKG = os.path.join(REPO, 'runners', 'js', 'node_modules', '@oven', 'bun-linux-x64', 'bin', 'bun')
CODE = 'function main(v){return v.a+v.b}'
TICK = os.sysconf('SC_CLK_TCK')


def proc_cpu(pid):
    with open('/proc/%d/stat' % pid) as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def bench_worker(rt, runs, tmpdir=None):
    env = dict(os.environ, TMPDIR=tmpdir) if tmpdir else None
    p = subprocess.Popen([rt, RUNNER, '--worker', '--max-runs', str(runs + 100)], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, cwd=REPO, env=env)
    assert json.loads(p.stdout.readline()) == {'ready': True}
    line = (json.dumps({'code': CODE, 'variables': {'a': 1, 'b': 2}}) + '\n').encode()
    # a few runs to warm the JIT, not counted
    for _ in range(20):
        p.stdin.write(line)
        p.stdin.flush()
        p.stdout.readline()
        p.stdout.readline()
    cpu0 = proc_cpu(p.pid)
    lat = []
    for _ in range(runs):
        t = time.perf_counter()
        p.stdin.write(line)
        p.stdin.flush()
        res = json.loads(p.stdout.readline())
        after = json.loads(p.stdout.readline())
        lat.append(time.perf_counter() - t)
        if res != {'result': {'success': True, 'data': {'codeReturn': 3, 'log': ''}}} or after != {'ready': True}:
            sys.exit('unexpected answer: %r %r' % (res, after))
    cpu = (proc_cpu(p.pid) - cpu0) / runs
    p.stdin.close()
    p.wait()
    return statistics.median(lat) * 1000, pct(lat, 0.95) * 1000, cpu * 1000


def bench_starts(argv, n, stdin=None):
    lat, cpu = [], []
    for _ in range(n):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(argv, input=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO, check=True)
        lat.append(time.perf_counter() - t)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
    return statistics.median(lat) * 1000, statistics.median(cpu) * 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--runs', type=int, default=1000)
    ap.add_argument('--starts', type=int, default=30)
    ap.add_argument('--runtime', choices=['bun', 'node', 'both'], default='both')
    ap.add_argument('--tmpdir', default='/dev/shm' if os.path.isdir('/dev/shm') else None,
                    help='where the worker makes its run dirs ($TMPDIR; default /dev/shm: a tmpfs, as a box\'s /tmp)')
    a = ap.parse_args()
    rts = []
    bun = BUN_PKG if os.access(BUN_PKG, os.X_OK) else shutil.which('bun')
    if a.runtime in ('bun', 'both') and bun:
        rts.append(('bun', bun))
    if a.runtime in ('node', 'both') and shutil.which('node'):
        rts.append(('node', shutil.which('node')))
    if not rts:
        sys.exit('no runtime (bun: scripts/npm-deps.sh; node: apt)')
    print('load average: %s; run dirs under %s' % (' '.join(open('/proc/loadavg').read().split()[:3]),
                                                 a.tmpdir or '$TMPDIR'))
    print('%-6s %-34s %10s %10s %12s' % ('', '', 'p50 ms', 'p95 ms', 'CPU ms/run'))
    oneshot_in = (json.dumps({'code': CODE, 'variables': {'a': 1, 'b': 2}}) + '\n').encode()
    for name, rt in rts:
        p50, p95, cpu = bench_worker(rt, a.runs, a.tmpdir)
        e50, ecpu = bench_starts([rt, '-e', 'console.log(1+2)'], a.starts)
        o50, ocpu = bench_starts([rt, RUNNER], a.starts, stdin=oneshot_in)
        print('%-6s %-34s %10.3f %10.3f %12.3f' % (name, 'worker, %d runs' % a.runs, p50, p95, cpu))
        print('%-6s %-34s %10.3f %10s %12.3f' % (name, '`%s -e` per run, %d' % (name, a.starts), e50, '', ecpu))
        print('%-6s %-34s %10.3f %10s %12.3f' % (name, 'one-shot runner.js per run, %d' % a.starts, o50, '', ocpu))
        print('%-6s %-34s %10.3fx %9s %11.3fx' % (name, 'worker / bare start', p50 / e50, '', cpu / ecpu))


if __name__ == '__main__':
    main()
