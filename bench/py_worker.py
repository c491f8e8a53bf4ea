#!/usr/bin/env python3
"""The Python runner's warm worker alone (runners/python/runner.py, worker
mode through the zygote, issue 29), beside a bare interpreter start per run.

    sudo python3 bench/py_worker.py [--runs 1000] [--starts 30] [--pause-ms 0] [--python /usr/bin/python3]
    sudo PY_RUNNER=/other/runner.py python3 bench/py_worker.py   # another runner.py

Starts `runner.py --zygote` as the server does (root, `python3 -S -u`),
asks it for one worker of uid 65534 (`{"worker":true}`; `{"attached":false}`:
no cgroup here), warms it with 20 runs, then drives RUNS runs of
`def main(a, b): return a + b` with {"a":1,"b":2} (each: run line -> result
-> ready; --pause-ms between a ready and the next run line, as a client's
round trip through the server would leave) and prints the median and p95
latency per run (run line -> result), the CPU per run and
the page faults per run of the worker and its children (the template and
the runs it forked: utime+stime and minflt from /proc, the runs' through the
template's cutime/cstime). Beside it: STARTS times `PYTHON -c` evaluating the
same sum and printing the same JSON (a bare interpreter start per run), its
median wall time and CPU per run (children's rusage), and the ratio.

As root it re-runs itself in a private mount namespace with fresh tmpfs on
/tmp, /var/tmp and /dev/shm (the worker scans those after each run, as in
the code runner's box), so the host's own temp files do not count. No box,
no server: the cost of the runner only. Python 3 stdlib only.
"""

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
RUNNER = os.environ.get('PY_RUNNER') or os.path.join(REPO, 'runners', 'python', 'runner.py')
CODE = 'def main(a, b):\n    return a + b'
BARE = ("import json\nv = json.loads('{\"a\":1,\"b\":2}')\ndef main(a, b):\n    return a + b\n"
        "print(json.dumps({'success': True, 'data': {'codeReturn': main(**v), 'log': ''}}, "
        "separators=(',', ':')))")
TICK = os.sysconf('SC_CLK_TCK')
PRIVATE = 'PY_WORKER_BENCH_PRIVATE'


def private_tmp():
    """Re-runs this script with private tmpfs temp places (root only)."""
    if os.geteuid() != 0 or os.environ.get(PRIVATE):
        return
    mounts = ' && '.join('mount -t tmpfs -o mode=1777,size=256m tmpfs %s' % p
                         for p in ('/tmp', '/var/tmp', '/dev/shm'))
    cmd = '%s && exec "$0" "$@"' % mounts
    os.environ[PRIVATE] = '1'
    os.execvp('unshare', ['unshare', '-m', '--propagation', 'private', 'sh', '-c', cmd,
                          sys.executable] + sys.argv)


def proc_stat(pid):
    """(own CPU s, reaped children's CPU s, own minflt, children's minflt)."""
    with open('/proc/%d/stat' % pid) as f:
        x = f.read().rsplit(')', 1)[1].split()
    return ((int(x[11]) + int(x[12])) / TICK, (int(x[13]) + int(x[14])) / TICK, int(x[7]), int(x[8]))


def tree_stat(pid):
    """CPU seconds and page faults of pid and its live children (and what
    they reaped)."""
    own = proc_stat(pid)
    cpu, flt = own[0] + own[1], own[2] + own[3]
    try:
        with open('/proc/%d/task/%d/children' % (pid, pid)) as f:
            kids = f.read().split()
    except OSError:
        kids = []
    for k in kids:
        try:
            s = proc_stat(int(k))
        except OSError:
            continue
        cpu += s[0] + s[1]
        flt += s[2] + s[3]
    return cpu, flt


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def bench_worker(python, runs, pause_s):
    zyg = subprocess.Popen([python, '-S', '-u', RUNNER, '--zygote'], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, env=dict(os.environ, TMPDIR='/tmp'))
    try:
        sock_path = json.loads(zyg.stdout.readline())['zygote']['socket']
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(sock_path)
        s.sendall(json.dumps({'uid': 65534, 'lang': 'python', 'worker': True,
                              'maxRuns': runs + 100}).encode() + b'\n')
        f = s.makefile('rb')
        pid = json.loads(f.readline())['pid']
        s.sendall(b'{"attached":false}\n')
        if json.loads(f.readline()) != {'ready': True}:
            sys.exit('py_worker: the worker did not become ready')
        line = (json.dumps({'code': CODE, 'variables': {'a': 1, 'b': 2}}) + '\n').encode()

        def one():
            t = time.perf_counter()
            s.sendall(line)
            r = json.loads(f.readline())
            took = (time.perf_counter() - t) * 1000
            if not r.get('result', {}).get('success'):
                sys.exit('py_worker: a run failed: %s' % r)
            after = json.loads(f.readline())
            if after != {'ready': True}:
                sys.exit('py_worker: the worker recycled: %s' % after)
            if pause_s:
                time.sleep(pause_s)
            return took

        for _ in range(20):
            one()
        cpu0, flt0 = tree_stat(pid)
        lat = []
        for _ in range(runs):
            lat.append(one())
        cpu1, flt1 = tree_stat(pid)
        s.close()
        return lat, (cpu1 - cpu0) * 1000 / runs, (flt1 - flt0) / runs
    finally:
        zyg.stdin.close()
        zyg.wait()


def bench_bare(python, starts):
    lat = []
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range(starts):
        t = time.perf_counter()
        out = subprocess.run([python, '-c', BARE], stdout=subprocess.PIPE, check=True).stdout
        lat.append((time.perf_counter() - t) * 1000)
        if b'"codeReturn":3' not in out:
            sys.exit('py_worker: python -c printed %r' % out)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1000 / starts
    return lat, cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--runs', type=int, default=1000)
    ap.add_argument('--starts', type=int, default=30)
    ap.add_argument('--pause-ms', type=float, default=0)
    ap.add_argument('--python', default='/usr/bin/python3' if os.path.exists('/usr/bin/python3')
                    else sys.executable)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit('py_worker: needs root (the zygote drops each worker to its own uid)')
    private_tmp()
    with open('/proc/loadavg') as f:
        print('load %s; %s' % (' '.join(f.read().split()[:3]),
                               subprocess.run([a.python, '-V'], stdout=subprocess.PIPE,
                                              text=True).stdout.strip()))
    lat, cpu, flt = bench_worker(a.python, a.runs, a.pause_ms / 1000)
    print('worker (zygote, uid 65534): %d runs  p50 %.2f ms  p95 %.2f ms  CPU/run %.2f ms  '
          'page faults/run %.0f' % (a.runs, statistics.median(lat), pct(lat, 0.95), cpu, flt))
    blat, bcpu = bench_bare(a.python, a.starts)
    print('python3 -c per run:         %d runs  p50 %.2f ms  p95 %.2f ms  CPU/run %.2f ms'
          % (a.starts, statistics.median(blat), pct(blat, 0.95), bcpu))
    print('worker CPU per run / python3 -c CPU per run: %.2f' % (cpu / bcpu if bcpu else 0))


if __name__ == '__main__':
    main()
