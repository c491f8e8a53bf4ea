"""A test host for the JS runner's worker mode (runner.js --worker, issue 29).

WorkerHost.run() has RunnerHost.run()'s signature and returns the same
Outcome, but runs the case in a warm worker: a pool of worker processes
(one pool per uid and environment) takes runs one at a time; after each
result the worker answers {"ready":true} (back into the pool) or
{"recycle":"..."} and exits. Outcome.after is that line (parsed),
Outcome.lines starts with the ready line the run was sent after, and
Outcome.rc is 0 for a worker that goes on (its exit status once it ended).
Python 3 stdlib only.
"""

import json
import os
import select
import signal
import subprocess
import threading
import time

from test_python_runner import REPO, Outcome, canned_http


class Worker(object):
    """One worker process and its stdout buffer."""

    def __init__(self, argv, env):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=env, start_new_session=True, cwd=REPO)
        self.buf = b''
        self.err = []
        self.ready_line = None
        self.runs = 0
        self.dead = False

    def send(self, obj):
        data = obj if isinstance(obj, bytes) else (json.dumps(obj) + '\n').encode()
        self.p.stdin.write(data)
        self.p.stdin.flush()

    def line(self, end):
        """The next stdout line (bytes), None at EOF or at the deadline ('timeout')."""
        fds = [self.p.stdout, self.p.stderr]
        while b'\n' not in self.buf:
            left = end - time.monotonic()
            if left <= 0:
                return 'timeout'
            r, _, _ = select.select(fds, [], [], left)
            for f in r:
                chunk = os.read(f.fileno(), 65536)
                if f is self.p.stderr:
                    if chunk:
                        self.err.append(chunk)
                    else:
                        fds.remove(f)
                    continue
                if not chunk:
                    return None
                self.buf += chunk
        line, self.buf = self.buf.split(b'\n', 1)
        return line

    def kill(self):
        self.dead = True
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except OSError:
            pass
        return self.wait()

    def wait(self):
        self.dead = True
        try:
            rc = self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            rc = self.p.wait()
        for f in (self.p.stdin, self.p.stdout, self.p.stderr):
            try:
                f.close()
            except OSError:
                pass
        return rc

    def stderr(self):
        return b''.join(self.err).decode('utf-8', 'replace')


class WorkerHost(object):
    """Runs cases in warm workers (argv + ['--worker'] + [--uid UID] + extra)."""

    def __init__(self, argv, env=None, extra=None):
        self.argv = list(argv) + ['--worker'] + list(extra or [])
        self.env = dict(os.environ if env is None else env)
        self.idle = {}
        self.lock = threading.Lock()
        self.started = 0
        self.recycled = []  # (reason, case name or None)

    def _take(self, key, uid, env):
        with self.lock:
            pool = self.idle.setdefault(key, [])
            if pool:
                return pool.pop()
        return self.new_worker(uid, env)

    def new_worker(self, uid=None, env=None):
        """A worker of this host's own (not pooled): pass it to run(worker=...)."""
        with self.lock:
            self.started += 1
        argv = self.argv + (['--uid', str(uid)] if uid is not None else [])
        e = dict(self.env)
        e.update(env or {})
        return Worker(argv, e)

    def close(self):
        """Closes every idle worker's stdin: each must exit 0 at once."""
        rcs = []
        with self.lock:
            pools, self.idle = self.idle, {}
        for pool in pools.values():
            for w in pool:
                w.p.stdin.close()
                rcs.append(w.wait())
        return rcs

    def run(self, code, variables=None, limits=None, max_requests=30, on_http=None, deadline=20.0,
            uid=None, env=None, raw_request=None, worker=None):
        """One run; worker: run it in this Worker (else one from the pool)."""
        out = Outcome()
        e = dict(self.env)
        if env:
            e.update(env)
        key = (uid, tuple(sorted(e.items())))
        w = worker or self._take(key, uid, e)
        out.pid = w.p.pid
        out.worker = w
        out.after = None
        t0 = time.monotonic()
        end = t0 + deadline
        try:
            if w.ready_line is None:
                ln = w.line(end)
                if ln == 'timeout' or ln is None:
                    out.timed_out = ln == 'timeout'
                    raise EOFError
                w.ready_line = ln
            out.lines.append(w.ready_line)
            out.ready = json.loads(w.ready_line)
            req = raw_request if raw_request is not None else {
                'code': code, 'variables': {} if variables is None else variables,
                'limits': limits or {'timeoutMs': 10000, 'memoryMB': 64, 'diskMB': 10},
                'maxRequests': max_requests}
            w.send(req)
            out.sent = True
            while True:
                ln = w.line(end)
                if ln == 'timeout':
                    out.timed_out = True
                    break
                if ln is None:
                    break
                out.lines.append(ln)
                try:
                    msg = json.loads(ln)
                except ValueError:
                    out.protocol_errors.append(ln)
                    continue
                if isinstance(msg, dict) and 'http' in msg and out.result is None:
                    out.http.append(msg['http'])
                    w.send((on_http or canned_http)(msg['http'], len(out.http) - 1, out))
                elif isinstance(msg, dict) and 'result' in msg and out.result is None:
                    out.result = msg['result']
                elif out.result is not None and isinstance(msg, dict) and ('ready' in msg or 'recycle' in msg):
                    out.after = msg
                    break
                else:
                    out.protocol_errors.append(ln)
        except EOFError:
            pass
        except (BrokenPipeError, OSError) as ex:
            out.protocol_errors.append(('host: %r' % ex).encode())
        w.runs += 1
        w.ready_line = None
        if out.after == {'ready': True} and worker is None:
            out.lines.pop()
            out.rc = 0
            w.ready_line = b'{"ready":true}'
            with self.lock:
                self.idle.setdefault(key, []).append(w)
        elif out.after == {'ready': True}:
            out.lines.pop()
            out.rc = 0
            w.ready_line = b'{"ready":true}'
        else:
            if out.after is not None:
                out.lines.pop()
                with self.lock:
                    self.recycled.append((out.after.get('recycle'), code))
            out.rc = w.kill() if out.timed_out else w.wait()
        out.stderr = w.stderr()
        out.elapsed = time.monotonic() - t0
        return out
