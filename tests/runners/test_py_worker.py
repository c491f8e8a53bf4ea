#!/usr/bin/env python3
"""The Python runner's worker mode as the server starts it (issue 29):
runner.py --zygote, a worker of one uid through its socket, run after run.

What the worker's cheaper runs must keep: every run's temp dir is new and
empty (one path per worker, made anew), whatever a run leaves outside it
makes the worker recycle even when the worker skips reading an unchanged
shared temp place, the runs' random numbers differ, the run's parent is the
worker's template (not the process that speaks to the host) and neither
can be read by a run, a run that kills the template or leaves a daemon ends
its worker, a malformed run line and an httpRequest still work.

As root (the zygote drops each worker to its uid) in a private mount
namespace with fresh tmpfs on /tmp, /var/tmp and /dev/shm, so the scans see
only this test's files. Python 3 stdlib only; TAP; exit 77 when not root.
"""

import json
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_python_runner import REPO, Tap, unused_uid  # noqa: E402

PY_RUNNER = os.environ.get('AGENTBOX_PY_RUNNER') or os.path.join(REPO, 'runners', 'python', 'runner.py')
PYTHON = '/usr/bin/python3' if os.path.exists('/usr/bin/python3') else sys.executable
PRIVATE = 'AB_TEST_PY_WORKER_PRIVATE'
BYPASS = 'import random\n_os = random._os\n'  # past the module policy, on purpose
DEADLINE_S = 20


def private_tmp():
    if os.environ.get(PRIVATE):
        return
    mounts = ' && '.join('mount -t tmpfs -o mode=1777,size=64m tmpfs %s' % p
                         for p in ('/tmp', '/var/tmp', '/dev/shm'))
    os.environ[PRIVATE] = '1'
    os.execvp('unshare', ['unshare', '-m', '--propagation', 'private', 'sh', '-c',
                          mounts + ' && exec "$0" "$@"', sys.executable] + sys.argv)


class Worker(object):
    """One worker of the zygote: its connection and its pid."""

    def __init__(self, zygote_sock, uid):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(DEADLINE_S)
        self.s.connect(zygote_sock)
        self.s.sendall(json.dumps({'uid': uid, 'lang': 'python', 'worker': True,
                                   'maxRuns': 100}).encode() + b'\n')
        self.f = self.s.makefile('rb')
        self.pid = json.loads(self.f.readline())['pid']
        self.s.sendall(b'{"attached":false}\n')
        first = self.f.readline()
        assert json.loads(first) == {'ready': True}, first
        self.gone = False

    def line(self):
        try:
            raw = self.f.readline()
        except OSError:
            raw = b''
        if not raw:
            self.gone = True
            return None
        return json.loads(raw)

    def run(self, code, variables=None, raw=None, on_http=None):
        """(result or None, the line after it: {"ready"}, {"recycle"} or None at EOF)."""
        line = raw if raw is not None else (json.dumps({'code': code, 'variables': variables or {}})
                                            + '\n').encode()
        self.s.sendall(line)
        while True:
            msg = self.line()
            if msg is None:
                return None, None
            if 'http' in msg and on_http:
                self.s.sendall((json.dumps(on_http(msg['http'])) + '\n').encode())
                continue
            if 'result' in msg:
                return msg['result'], self.line()
            return None, msg

    def close(self):
        self.s.close()


def ret(result):
    return ((result or {}).get('data') or {}).get('codeReturn')


def main():
    tap = Tap()
    if os.geteuid() != 0:
        print('1..0 # SKIP needs root (the zygote drops each worker to its own uid)')
        sys.exit(77)  # skipped
    private_tmp()
    zyg = subprocess.Popen([PYTHON, '-S', '-u', PY_RUNNER, '--zygote'], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, env=dict(os.environ, TMPDIR='/tmp'))
    try:
        first = zyg.stdout.readline()
        try:
            zsock = json.loads(first)['zygote']['socket']
        except (ValueError, KeyError, TypeError):
            tap.ok(False, 'the zygote starts', 'its first line: %r' % first)
            tap.done()
        checks(tap, zsock, unused_uid())
    finally:
        zyg.stdin.close()
        zyg.wait(timeout=30)
    tap.done()


def checks(tap, zsock, uid):
    # ---- the temp dir: one path per worker, a new empty dir every run ----------------------
    w = Worker(zsock, uid)
    r1, a1 = w.run(BYPASS + 'def main():\n    system_helper.fs.write_file("mine.txt", "x")\n'
                   '    st = _os.stat(".")\n'
                   '    return [system_helper.fs.tmp_dir, _os.getcwd(), _os.environ["TMPDIR"], '
                   'st.st_mode & 0o7777, st.st_uid]\n')
    r2, a2 = w.run(BYPASS + 'def main():\n    st = _os.stat(".")\n'
                   '    return [system_helper.fs.tmp_dir, system_helper.fs.readdir("."), '
                   'st.st_mode & 0o7777, st.st_ino]\n')
    t1, t2 = ret(r1) or [None] * 5, ret(r2) or [None] * 4
    tap.ok(a1 == {'ready': True} and a2 == {'ready': True}, 'two clean runs: the worker goes on',
           '%r %r' % (a1, a2))
    tap.ok(isinstance(t1[0], str) and os.path.basename(t1[0]).startswith('sandbox_') and
           t1[0] == t1[1] == t1[2], "a run's temp dir is its cwd and its TMPDIR", repr(t1))
    tap.eq((t1[3], t1[4]), (0o700, uid), "a run's temp dir is 0700 and the worker's uid's")
    tap.eq(t2[0], t1[0], "a worker's runs have one temp dir path (its environment is set once)")
    tap.eq((t2[1], t2[2]), ([], 0o700), 'the next run finds it new and empty')

    # a run leaves a tree its worker cannot remove at once: the next run still finds its
    # dir empty (in this worker, or in the next one after a recycle)
    r, a = w.run(BYPASS + 'def main():\n    _os.makedirs("d/e")\n'
                 '    open("d/e/f", "w").write("x")\n    _os.chmod("d", 0)\n    return 1\n')
    if a != {'ready': True}:
        w.close()
        w = Worker(zsock, uid)
    r, a = w.run('def main():\n    return system_helper.fs.readdir(".")\n')
    tap.eq(ret(r), [], 'after a run that left a locked tree in its dir, the next run finds it empty')
    w.close()

    # ---- leftovers in the shared temp places, after scans that found them clean ------------
    for place in ('/tmp', '/dev/shm'):
        w = Worker(zsock, uid)
        time.sleep(0.3)  # the places' mtimes are old: a clean scan is remembered
        clean = [w.run('def main():\n    return 1\n')[1] for _ in range(3)]
        name = '%s/left-%d' % (place, os.getpid())
        r, a = w.run(BYPASS + 'def main():\n    _os.close(_os.open(%r, _os.O_CREAT | _os.O_WRONLY))\n'
                     '    return 1\n' % name)
        tap.ok(clean == [{'ready': True}] * 3 and ret(r) == 1 and
               (a or {}).get('recycle') == 'a run left %s' % name,
               'a file left at the top of %s after clean runs: the worker recycles' % place,
               '%r %r %r' % (clean, r, a))
        w.close()
        try:
            os.unlink(name)
        except OSError:
            pass

    # ---- random numbers differ between runs (each fork reseeds) ------------------------------
    w = Worker(zsock, uid)
    seeded = 'import random\ndef main():\n    random.seed(7)\n    return random.getrandbits(64)\n'
    draw = 'import random\ndef main():\n    return random.getrandbits(64)\n'
    vals = [ret(w.run(draw)[0]) for _ in range(3)]
    s7 = ret(w.run(seeded)[0])
    after = ret(w.run(draw)[0])
    tap.ok(all(isinstance(v, int) for v in vals) and len(set(vals)) == 3,
           "a worker's runs draw different random numbers", repr(vals))
    tap.ok(isinstance(after, int) and after != s7 and after not in vals,
           "a run's random.seed does not reach the next run", '%r %r' % (s7, after))

    # ---- the run's parent is the template; neither it nor the worker can be read ------------
    r, a = w.run(BYPASS + 'def main():\n    pp = _os.getppid()\n    out = [pp]\n'
                 '    for pid in (pp, %d):\n'
                 '        try:\n            fd = _os.open("/proc/%%d/mem" %% pid, _os.O_RDONLY)\n'
                 '            out.append("read")\n        except OSError:\n'
                 '            out.append("refused")\n    return out\n' % w.pid)
    got = ret(r) or [None, None, None]
    tap.ok(isinstance(got[0], int) and got[0] != w.pid,
           "a run's parent is the worker's template, not the worker", '%r, worker %d' % (got, w.pid))
    tap.eq(got[1:], ['refused', 'refused'], 'a run cannot open the memory of its template or worker')

    # ---- a malformed run line, an httpRequest ------------------------------------------------
    r, a = w.run(None, raw=b'{"code": \n')
    tap.ok(r and r.get('success') is False and str(r.get('message', '')).startswith('Invalid request')
           and a == {'ready': True}, 'a malformed run line: Invalid request, the worker goes on',
           '%r %r' % (r, a))

    def answer(h):
        return {'http_result': {'status': 201, 'statusText': 'Created', 'headers': {},
                                'data': h.get('url', '')}}
    r, a = w.run('def main():\n    a = http_request("http://example.test/a")\n'
                 '    b = http_request("http://example.test/b")\n    return [a["status"], a["data"], b["data"]]\n',
                 on_http=answer)
    tap.eq(ret(r), [201, 'http://example.test/a', 'http://example.test/b'],
           'two httpRequests of a run are answered in order')
    tap.eq(a, {'ready': True}, '... and the worker goes on')

    # ---- a run that kills its template; a run that leaves a daemon ------------------------
    r, a = w.run(BYPASS + 'def main():\n    _os.kill(_os.getppid(), 9)\n    import time\n'
                 '    time.sleep(2)\n    return "survived"\n')
    tap.ok(ret(r) != 'survived' and (a is None or 'recycle' in a),
           'a run that kills its template does not finish, and its worker ends', '%r %r' % (r, a))
    w.close()
    w = Worker(zsock, uid + 1)
    r, a = w.run(BYPASS + 'def main():\n    _os.system("(sleep 30 &) ; true")\n    return 1\n')
    tap.ok(ret(r) == 1 and (a or {}).get('recycle') == 'a run left a process',
           'a run that leaves a daemon: its worker recycles', '%r %r' % (r, a))
    w.close()
    subprocess.run(['pkill', '-KILL', '-U', str(uid + 1)], check=False)
    subprocess.run(['pkill', '-KILL', '-U', str(uid)], check=False)


if __name__ == '__main__':
    main()
