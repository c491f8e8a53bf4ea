#!/usr/bin/env python3
"""Compatibility suite of the in-box Python runner (runners/python/runner.py).

The test is the host: it starts the runner as a local process (no server, no
box), speaks the JSON-lines protocol of runners/README.md, answers the
runner's http lines itself with canned responses and kills a runner that
overruns its deadline. Python 3 stdlib only; prints TAP.

This file also holds the small host and TAP helpers that test_js_runner.py
imports (RunnerHost, Tap, run_all).
"""

import base64
import concurrent.futures
import hashlib
import hmac
import json
import math
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, '..', '..'))
PY_RUNNER = os.path.join(REPO, 'runners', 'python', 'runner.py')


# ---- TAP -------------------------------------------------------------------------

class Tap(object):
    """TAP in the style of tests/lib/abtest.py: 'ok N - name', diagnostics
    on stderr, the plan at the end, exit 1 when anything failed."""

    def __init__(self):
        self.n = 0
        self.failed = 0

    def _line(self, good, name, directive=''):
        self.n += 1
        name = ' '.join(str(name).split()).replace('#', '\\#')
        sys.stdout.write('%s %d - %s%s\n' % ('ok' if good else 'not ok', self.n, name, directive))
        sys.stdout.flush()

    def diag(self, msg):
        sys.stdout.flush()
        text = str(msg)
        if len(text) > 4000:
            text = text[:4000] + '...'
        sys.stderr.write(''.join('# %s\n' % l for l in text.splitlines() or ['']))
        sys.stderr.flush()

    def ok(self, cond, name, diag=None):
        good = bool(cond)
        self._line(good, name)
        if not good:
            self.failed += 1
            if callable(diag):
                try:
                    diag = diag()
                except Exception as e:  # pragma: no cover
                    diag = 'diag failed: %r' % e
            self.diag('Failed test %d - %s%s' % (self.n, name, ('\n' + str(diag)) if diag else ''))
        return good

    def eq(self, got, want, name, diag=None):
        return self.ok(got == want, name, lambda: 'got:  %r\nwant: %r%s' % (got, want, ('\n' + diag) if diag else ''))

    def contains(self, hay, needle, name):
        return self.ok(hay is not None and needle in hay, name, lambda: 'missing %r in %r' % (needle, hay))

    def skip(self, name, reason):
        self._line(True, name, ' # SKIP ' + ' '.join(str(reason).split()))

    def skip_all(self, reason):
        sys.stdout.write('1..0 # SKIP %s\n' % ' '.join(str(reason).split()))
        sys.stdout.flush()
        sys.exit(0)

    def done(self):
        if self.n == 0:
            self.ok(False, 'the file ran at least one test')
        sys.stdout.write('1..%d\n' % self.n)
        sys.stdout.flush()
        sys.exit(1 if self.failed else 0)


# ---- the host ----------------------------------------------------------------------

class Outcome(object):
    """What one run produced."""

    def __init__(self):
        self.ready = None          # the first line, parsed
        self.lines = []            # every stdout line, raw
        self.http = []             # the runner's http requests, in order
        self.result = None         # the "result" object
        self.rc = None
        self.stderr = ''
        self.timed_out = False     # the host had to kill it
        self.protocol_errors = []  # lines that were no protocol line
        self.elapsed = 0.0
        self.pid = None

    @property
    def success(self):
        return bool(self.result and self.result.get('success'))

    @property
    def ret(self):
        return ((self.result or {}).get('data') or {}).get('codeReturn')

    @property
    def log(self):
        return ((self.result or {}).get('data') or {}).get('log')

    @property
    def message(self):
        return (self.result or {}).get('message')

    def describe(self):
        return 'result=%r\nhttp=%r\nrc=%r timed_out=%r protocol_errors=%r\nstderr=%s' % (
            self.result, self.http, self.rc, self.timed_out, self.protocol_errors, self.stderr[-2000:])


def canned_http(req, n, out=None):
    """The default answer to the n-th (0-based) http line: JSON echoing the request."""
    body = json.dumps({'n': n, 'url': req.get('url'), 'method': req.get('method'),
                       'body': req.get('body'), 'headers': req.get('headers')})
    return {'http_result': {'status': 200, 'statusText': 'OK',
                            'headers': {'content-type': 'application/json', 'x-n': str(n)}, 'data': body}}


class RunnerHost(object):
    """Starts runner processes (argv + [--uid UID]) and drives one run each."""

    def __init__(self, argv, env=None):
        self.argv = list(argv)
        self.env = dict(os.environ if env is None else env)

    def run(self, code, variables=None, limits=None, max_requests=30, on_http=None, deadline=20.0,
            uid=None, env=None, raw_request=None):
        out = Outcome()
        argv = self.argv + (['--uid', str(uid)] if uid is not None else [])
        e = dict(self.env)
        if env:
            e.update(env)
        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=e, start_new_session=True, cwd=REPO)
        out.pid = p.pid
        end = t0 + deadline
        buf = b''
        errbuf = []
        sent = False
        try:
            fds = [p.stdout, p.stderr]
            while fds:
                left = end - time.monotonic()
                if left <= 0:
                    out.timed_out = True
                    break
                r, _, _ = select.select(fds, [], [], left)
                for f in r:
                    chunk = os.read(f.fileno(), 65536)
                    if not chunk:
                        fds.remove(f)
                        continue
                    if f is p.stderr:
                        errbuf.append(chunk)
                        continue
                    buf += chunk
                    while b'\n' in buf:
                        line, buf = buf.split(b'\n', 1)
                        out.lines.append(line)
                        try:
                            msg = json.loads(line)
                        except ValueError:
                            out.protocol_errors.append(line)
                            continue
                        if out.ready is None:
                            out.ready = msg
                            req = raw_request if raw_request is not None else {
                                'code': code, 'variables': {} if variables is None else variables,
                                'limits': limits or {'timeoutMs': 10000, 'memoryMB': 64, 'diskMB': 10},
                                'maxRequests': max_requests}
                            data = req if isinstance(req, bytes) else (json.dumps(req) + '\n').encode()
                            p.stdin.write(data)
                            p.stdin.flush()
                            sent = True
                        elif isinstance(msg, dict) and 'http' in msg and out.result is None:
                            out.http.append(msg['http'])
                            reply = (on_http or canned_http)(msg['http'], len(out.http) - 1, out)
                            p.stdin.write((json.dumps(reply) + '\n').encode())
                            p.stdin.flush()
                        elif isinstance(msg, dict) and 'result' in msg and out.result is None:
                            out.result = msg['result']
                        else:
                            out.protocol_errors.append(line)
            if buf:
                out.protocol_errors.append(buf)
        except (BrokenPipeError, OSError) as ex:
            out.protocol_errors.append(('host: %r' % ex).encode())
        finally:
            if out.timed_out:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
            try:
                out.rc = p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                out.rc = p.wait()
            for f in (p.stdin, p.stdout, p.stderr):
                try:
                    f.close()
                except OSError:
                    pass
        out.stderr = b''.join(errbuf).decode('utf-8', 'replace')
        out.elapsed = time.monotonic() - t0
        out.sent = sent
        return out


def _adapt(on_http):
    if on_http is None:
        return None

    def f(req, n, out):
        try:
            return on_http(req, n, out)
        except TypeError:
            return on_http(req, n)
    return f


def run_all(host, cases, workers=6):
    """cases: list of (name, kwargs); returns {name: Outcome}, run concurrently."""
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as ex:
        futs = {}
        for name, kw in cases:
            kw = dict(kw)
            if 'on_http' in kw:
                kw['on_http'] = _adapt(kw['on_http'])
            futs[ex.submit(host.run, **kw)] = name
        for fut in concurrent.futures.as_completed(futs):
            results[futs[fut]] = fut.result()
    return results


def proc_status(pid):
    d = {}
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            k, _, v = line.partition(':')
            d[k] = v.strip()
    return d


def proc_limits(pid):
    d = {}
    with open('/proc/%d/limits' % pid) as f:
        for line in f.readlines()[1:]:
            name = line[:26].strip()
            rest = line[26:].split()
            d[name] = rest[0]
    return d


def unused_uid():
    """A uid/gid no account and no file of ours uses (for --uid)."""
    return 61000 + (os.getpid() % 3000)


def common_protocol_checks(tap, outs, label):
    """Every run: first line exactly {"ready":true}, only protocol lines, exit 0."""
    bad_ready = [n for n, o in outs.items() if o.lines[:1] != [b'{"ready":true}']]
    tap.eq(bad_ready, [], '%s: every run starts with exactly {"ready":true}' % label)
    noise = dict((n, o.protocol_errors) for n, o in outs.items() if o.protocol_errors)
    tap.eq(noise, {}, '%s: stdout carries protocol lines only' % label)
    killed = sorted(n for n, o in outs.items() if o.timed_out and not n.startswith('host-kill'))
    tap.eq(killed, [], '%s: every run answered before the host deadline' % label)
    rcs = dict((n, o.rc) for n, o in outs.items() if not o.timed_out and o.rc != 0)
    tap.eq(rcs, {}, '%s: the runner exits 0 after its result' % label)
    noresult = sorted(n for n, o in outs.items() if o.result is None and not o.timed_out)
    tap.eq(noresult, [], '%s: every run wrote one result line' % label,
           '\n'.join('%s: %s' % (n, outs[n].describe()) for n in noresult))


# ---- the Python suite --------------------------------------------------------------

BLOCKED_25 = ['os', 'sys', 'subprocess', 'shutil', 'socket', 'ctypes', 'multiprocessing', 'threading',
              'pickle', 'importlib', 'code', 'codeop', 'compile', 'compileall', 'signal', 'resource', 'gc',
              'inspect', 'tempfile', 'pathlib', 'io', 'fileinput', 'urllib', 'http', 'requests', 'httpx',
              'aiohttp']


def py_cases(tmp_root, sync):
    """sync(name) -> on_http callback that records /proc facts at the sync point."""
    L = {'timeoutMs': 10000, 'memoryMB': 64, 'diskMB': 10}
    c = []

    def add(name, code, **kw):
        c.append((name, dict(code=code, **kw)))

    # calling conventions
    add('main-noargs', 'def main():\n    return {"ok": True}')
    add('main-variables', 'def main(variables):\n    return {"name": variables["name"], "age": variables["age"]}',
        variables={'name': 'FastGPT', 'age': 3})
    add('main-ab', 'def main(a, b):\n    return {"sum": a + b}', variables={'a': 10, 'b': 20})
    add('main-abc', 'def main(a, b, c):\n    return {"result": a * b + c}', variables={'a': 3, 'b': 4, 'c': 5})
    add('main-default', 'def main(name, greeting="Hello"):\n    return {"msg": f"{greeting}, {name}!"}',
        variables={'name': 'World', 'x': 1})
    add('main-missing', 'def main(a, b, c):\n    return 1', variables={'a': 1, 'b': 2})
    add('globals', 'prefix = name + "_suffix"\ndef main(name, age):\n    return {"result": prefix, "name": name, '
        '"age": age}', variables={'name': 'hello', 'age': 18})
    add('globals-noargs', 'def main():\n    return {"name": name, "age": age, "v": variables["age"]}',
        variables={'name': 'test', 'age': 25})
    add('unicode', 'def main():\n    return {"t": text + "！", "n": len(text)}', variables={'text': '你好世界'})
    add('main-one-param', 'def main(text):\n    return text', variables={'text': 'x', 'y': 2})
    # return values
    add('returns', 'import datetime\ndef main():\n    return {"none": None, "nan": float("nan"), "inf": float("inf"), '
        '"tuple": (1, 2), "set": {3}, "date": datetime.date(2024, 1, 2), "bytes": b"ab", "nested": '
        '{"l": [None, True, 1.5]}, 7: "int key"}')
    add('return-none', 'def main():\n    pass')
    add('return-list', 'def main(variables):\n    return [variables["a"], variables["b"], variables["a"] + '
        'variables["b"]]', variables={'a': 1, 'b': 2})
    add('return-object', 'class P:\n    def __str__(self):\n        return "P!"\ndef main():\n    return P()')
    # log
    add('log', 'def main(variables):\n    print("debug step 1")\n    print("processing", variables["name"], 3)\n'
        '    print({"k": 1})\n    print("a", "b", sep="-")\n    return {"done": True}', variables={'name': 'test'})
    add('log-stdout', 'import pprint\ndef main():\n    pprint.pprint([1, 2])\n    return 1')
    add('log-empty', 'def main():\n    return 1')
    # helpers
    add('count-token', 'def main():\n    return [count_token("abcde"), system_helper.count_token("abcd"), '
        'count_token(""), SystemHelper.count_token(12345), system_helper.countToken("a" * 9)]')
    add('base64', 'def main():\n    return [str_to_base64("hello"), system_helper.str_to_base64("你好", '
        '"data:text/plain;base64,"), SystemHelper.strToBase64("x", "p:")]')
    add('hmac', 'def main():\n    return [create_hmac("sha256", "secret-key"), system_helper.create_hmac("sha1", '
        '"k/+="), SystemHelper.createHmac("md5", "abc")]')
    add('delay-ok', 'import time\ndef main():\n    t = time.time()\n    delay(200)\n    system_helper.delay(0)\n'
        '    return time.time() - t')
    add('delay-limit', 'def main():\n    system_helper.delay(20000)\n    return 1')
    add('delay-limit-global', 'def main():\n    delay(10001)')
    # fs helpers
    add('fs', 'def main():\n    fs = system_helper.fs\n    fs.write_file("a.txt", "hello")\n    fs.mkdir("d/e")\n'
        '    fs.write_file("d/e/f.txt", "deep")\n    return {"read": fs.read_file("a.txt"), "deep": '
        'fs.read_file("d/e/f.txt"), "ls": fs.readdir("."), "lsd": fs.readdir("d"), "ex": fs.exists("a.txt"), '
        '"nex": fs.exists("nope"), "tmp": fs.tmp_dir}')
    add('fs-open', 'def main():\n    with open("o.txt", "w") as f:\n        f.write("via open")\n'
        '    return [open("o.txt").read(), system_helper.fs.read_file("o.txt")]')
    for i, (expr) in enumerate([
            'system_helper.fs.read_file("../../etc/passwd")',
            'system_helper.fs.read_file("/etc/passwd")',
            'system_helper.fs.write_file("../../../tmp/evil.txt", "hacked")',
            'system_helper.fs.readdir("..")',
            'system_helper.fs.exists("../x")',
            'system_helper.fs.mkdir("a/../../b")',
            'open("/etc/passwd").read()',
            'open("../../../etc/hostname").read()',
            'open(0).read()']):
        add('fs-escape-%d' % i, 'def main():\n    return %s' % expr)
    add('fs-symlink', 'def main():\n    t = system_helper.fs.tmp_dir\n    http_request("http://sync/" + t)\n'
        '    out = {}\n    for p in ["link/passwd", "plink", "sub/up/passwd"]:\n        try:\n'
        '            out[p] = system_helper.fs.read_file(p)\n        except Exception as e:\n'
        '            out[p] = "ERR " + str(e)\n    for p in ["link/new.txt", "plink"]:\n        try:\n'
        '            system_helper.fs.write_file(p, "x")\n            out["w:" + p] = "written"\n'
        '        except Exception as e:\n            out["w:" + p] = "ERR " + str(e)\n'
        '    try:\n        out["open"] = open("plink").read()\n    except Exception as e:\n'
        '        out["open"] = "ERR " + str(e)\n    return out', on_http=sync('fs-symlink'))
    add('disk-quota', 'def main():\n    chunk = "x" * (512 * 1024)\n    system_helper.fs.write_file("a.txt", chunk)\n'
        '    system_helper.fs.write_file("b.txt", chunk)\n    system_helper.fs.write_file("c.txt", chunk)\n'
        '    return 1', limits={'timeoutMs': 10000, 'memoryMB': 64, 'diskMB': 1})
    # http
    add('http', 'def main():\n    r = http_request("https://api.example.com/x?y=1", method="post", headers='
        '{"X-A": "1"}, body={"k": [1, "二"]}, timeout=3)\n    r2 = system_helper.http_request('
        '"http://example.com/", {"method": "PUT", "body": "raw", "timeout": 60, "headers": {"Content-Type": '
        '"text/plain"}})\n    r3 = SystemHelper.httpRequest("http://example.com/g")\n'
        '    return {"r": r, "r2": r2, "r3": r3, "parsed": json.loads(r["data"])}')
    add('http-error', 'def main():\n    try:\n        http_request("http://10.0.0.1/")\n    except Exception as e:\n'
        '        return {"err": str(e), "type": type(e).__name__}',
        on_http=lambda req, n: {'http_error': 'Request to private/internal network is not allowed'})
    add('http-cap', 'def main():\n    n = 0\n    try:\n        for i in range(10):\n'
        '            http_request("http://example.com/%d" % i)\n            n += 1\n    except Exception as e:\n'
        '        return {"n": n, "err": str(e)}\n    return {"n": n}', max_requests=3)
    add('http-cap-default', 'def main():\n    n = 0\n    try:\n        for i in range(40):\n'
        '            http_request("http://example.com/%d" % i)\n            n += 1\n    except Exception as e:\n'
        '        return {"n": n, "err": str(e)}\n    return {"n": n}')
    add('http-uncaught', 'def main():\n    http_request("http://169.254.169.254/")',
        on_http=lambda req, n: {'http_error': 'Request to private/internal network is not allowed'})
    # messages
    add('empty', '')
    add('blank', '   \n\t\n')
    add('no-main', 'x = 1\ndef helper():\n    return 1')
    add('raise', 'def main():\n    raise ValueError("boom")')
    add('sysexit', 'def main():\n    raise SystemExit(3)')
    add('syntax', 'def main(:\n    return 1')
    add('timeout', 'def main():\n    while True:\n        pass', limits={'timeoutMs': 1000, 'memoryMB': 64,
                                                                       'diskMB': 10})
    add('timeout-sleep', 'import time\ndef main():\n    time.sleep(30)', limits={'timeoutMs': 800, 'memoryMB': 64,
                                                                                'diskMB': 10})
    # module policy
    add('import-os', 'import os\ndef main():\n    return {"cwd": os.getcwd()}')
    add('import-from-sys', 'from sys import path\ndef main():\n    return {"path": path}')
    add('import-os-path', 'import os.path\ndef main():\n    return 1')
    add('import-in-main', 'def main():\n    import subprocess\n    return 1')
    add('import-all-25', 'def main():\n    out = {}\n    for m in %r:\n        try:\n            __import__(m)\n'
        '            out[m] = "IMPORTED"\n        except ImportError as e:\n            out[m] = str(e)\n'
        '    return out' % (BLOCKED_25,))
    bypasses = {
        'exec': 'exec("import os")',
        'exec-globals': 'exec("import os", {})',
        'eval': 'eval("__import__(\'os\')")',
        'dunder-import': '__import__("subprocess")',
        'importlib': '__import__("importlib").import_module("os")',
        'import-importlib': 'exec("import importlib\\nimportlib.import_module(\'os\')")',
        'builtins-module': '__import__("builtins").__import__("os")',
        'builtins-dict': '__builtins__["__import__"]("socket")',
        'compile-exec': 'exec(compile("import ctypes", "x.py", "exec"))',
        'loader': '__loader__.load_module("posix")',
        'input': 'input()',
    }
    for k, expr in sorted(bypasses.items()):
        add('bypass-' + k, 'def main():\n    %s\n    return "ESCAPED"' % expr)
    add('builtins-overwrite', 'import builtins\nbuiltins.__import__ = lambda *a, **k: None\n'
        'def main():\n    import os\n    return "ESCAPED"')
    add('allowed-modules', 'import json, math, re, datetime, hashlib, hmac, base64, random, time, collections, '
        'itertools, functools, uuid, string, decimal, statistics\nfrom urllib.parse import quote\n'
        'import urllib.parse\nfrom datetime import datetime as dt, timedelta\n'
        'def main(variables):\n    d = dt.strptime("2024-01-01", "%Y-%m-%d")\n    return {"sqrt": math.sqrt(16), '
        '"re": re.findall(r"\\d+", "abc123def456"), "next": (d + timedelta(days=1)).strftime("%Y-%m-%d"), '
        '"weekday": d.strftime("%A"), "md5": hashlib.md5(b"a").hexdigest(), "q": quote("a b"), '
        '"q2": urllib.parse.urlencode({"a": 1}), "uuid": len(str(uuid.uuid4())), "json": json.dumps('
        '{"key": "value"}), "dec": str(decimal.Decimal("1.1") + decimal.Decimal("2.2")), '
        '"mean": statistics.mean([1, 2, 3]), "cnt": dict(collections.Counter("aab"))}')
    add('stdlib-internal', 'import shlex\nimport email.utils\nimport logging\ndef main():\n'
        '    return [shlex.split("a \'b c\'"), email.utils.quote("x"), logging.getLevelName(10)]')
    # limits
    add('mem-small', 'def main():\n    b = bytearray(20 * 1024 * 1024)\n    return len(b)')
    add('mem-big', 'def main():\n    b = bytearray(400 * 1024 * 1024)\n    return len(b)')
    add('fsize', 'def main():\n    with open("big.bin", "w") as f:\n        f.write("x" * (3 * 1024 * 1024))\n'
        '    return "WROTE"', limits={'timeoutMs': 10000, 'memoryMB': 64, 'diskMB': 1})
    add('rlimits', 'def main():\n    http_request("http://sync/")\n    return 1',
        limits={'timeoutMs': 2500, 'memoryMB': 100, 'diskMB': 7}, on_http=sync('rlimits'))
    # environment and temp dir
    add('tmpdir', 'def main():\n    http_request("http://sync/" + system_helper.fs.tmp_dir)\n'
        '    return system_helper.fs.tmp_dir', env={'TMPDIR': tmp_root, 'SECRET_TOKEN': 'hunter2'},
        on_http=sync('tmpdir'))
    add('tmpdir-2', 'def main():\n    return system_helper.fs.tmp_dir', env={'TMPDIR': tmp_root})
    if os.geteuid() == 0:
        add('uid', 'def main():\n    system_helper.fs.write_file("mine.txt", "x")\n'
            '    http_request("http://sync/" + system_helper.fs.tmp_dir)\n    return system_helper.fs.read_file('
            '"mine.txt")', uid=unused_uid(), env={'TMPDIR': tmp_root}, on_http=sync('uid'))
    # legacy FastGPT snippets
    add('legacy-filter', 'def main(variables):\n    items = variables["items"]\n'
        '    filtered = [x for x in items if x["score"] >= 60]\n    return {"passed": len(filtered), '
        '"total": len(items)}', variables={'items': [{'name': 'A', 'score': 80}, {'name': 'B', 'score': 45},
                                                      {'name': 'C', 'score': 90}, {'name': 'D', 'score': 55}]})
    add('legacy-helper-fn', 'def calculate_tax(amount, rate):\n    return round(amount * rate, 2)\n\n'
        'def main(variables):\n    amount = variables["amount"]\n    tax = calculate_tax(amount, 0.13)\n'
        '    return {"amount": amount, "tax": tax, "total": amount + tax}', variables={'amount': 100})
    return c


def ref_hmac_py(alg, secret, ts):
    sig = hmac.new(secret.encode(), (ts + '\n' + secret).encode(), alg).digest()
    return urllib.parse.quote(base64.b64encode(sig).decode())


def make_sync(facts):
    """The callback used at sync points: the runner is blocked waiting for
    the answer, so its /proc and temp dir can be inspected, and files planted."""
    def sync(name):
        def cb(req, n, out):
            f = facts.setdefault(name, {})
            try:
                f['status'] = proc_status(out.pid)
                f['limits'] = proc_limits(out.pid)
            except OSError as e:
                f['proc_error'] = str(e)
            path = urllib.parse.urlparse(req['url']).path
            if path and path != '/':
                f['tmp'] = path
                try:
                    st = os.stat(path)
                    f['tmp_mode'] = st.st_mode & 0o7777
                    f['tmp_uid'] = st.st_uid
                    f['tmp_gid'] = st.st_gid
                    mine = os.path.join(path, 'mine.txt')
                    if os.path.exists(mine):
                        f['mine_uid'] = os.stat(mine).st_uid
                except OSError as e:
                    f['stat_error'] = str(e)
                if name == 'fs-symlink':
                    os.symlink('/etc', os.path.join(path, 'link'))
                    os.symlink('/etc/passwd', os.path.join(path, 'plink'))
                    os.mkdir(os.path.join(path, 'sub'))
                    os.symlink('../..', os.path.join(path, 'sub', 'up'))
            return canned_http(req, n)
        return cb
    return sync


def main():
    tap = Tap()
    if not os.path.exists(PY_RUNNER):
        tap.skip_all('runners/python/runner.py missing')
    t_start = time.monotonic()
    tmp_root = tempfile.mkdtemp(prefix='runner-test-')
    os.chmod(tmp_root, 0o755)
    facts = {}
    # Every run's temp dir under tmp_root, removed at the end.
    host = RunnerHost([sys.executable, PY_RUNNER], env=dict(os.environ, TMPDIR=tmp_root))
    cases = py_cases(tmp_root, make_sync(facts))
    outs = run_all(host, cases)
    o = outs

    common_protocol_checks(tap, outs, 'python')

    # calling conventions
    tap.eq(o['main-noargs'].ret, {'ok': True}, 'main() with no parameters')
    tap.eq(o['main-variables'].ret, {'name': 'FastGPT', 'age': 3}, 'main(variables) gets the variables dict')
    tap.eq(o['main-ab'].ret, {'sum': 30}, 'main(a, b) gets variables by parameter name')
    tap.eq(o['main-abc'].ret, {'result': 17}, 'main(a, b, c) gets three variables by name')
    tap.eq(o['main-default'].ret, {'msg': 'Hello, World!'}, 'main(name, greeting="Hello") keeps the default')
    tap.eq(o['main-missing'].result, {'success': False, 'message': "Missing required argument: 'c'"},
           "missing variable: Missing required argument: 'c'")
    tap.eq(o['globals'].ret, {'result': 'hello_suffix', 'name': 'hello', 'age': 18},
           'variables are globals at module level')
    tap.eq(o['globals-noargs'].ret, {'name': 'test', 'age': 25, 'v': 25}, 'variables are globals inside main()')
    tap.eq(o['main-one-param'].ret, {'text': 'x', 'y': 2}, 'one parameter, whatever its name, gets the dict (seed)')
    tap.eq(o['unicode'].ret, {'t': '你好世界！', 'n': 4}, 'unicode variables round-trip')

    # return values
    tap.eq(o['returns'].ret, {'none': None, 'nan': None, 'inf': None, 'tuple': [1, 2], 'set': '{3}',
                              'date': '2024-01-02', 'bytes': "b'ab'", 'nested': {'l': [None, True, 1.5]},
                              '7': 'int key'},
           'None -> null, NaN/Infinity -> null, non-JSON values stringified', o['returns'].describe())
    tap.eq(o['return-none'].result, {'success': True, 'data': {'codeReturn': None, 'log': ''}},
           'main returning nothing -> codeReturn null')
    tap.eq(o['return-list'].ret, [1, 2, 3], 'a list is returned as it is')
    tap.eq(o['return-object'].ret, 'P!', 'an object is returned as str()')

    # log
    tap.eq(o['log'].log, "debug step 1\nprocessing test 3\n{'k': 1}\na-b", 'print() output is captured in log')
    tap.eq(o['log'].ret, {'done': True}, 'print() does not affect the return value')
    tap.eq(o['log-stdout'].log, '[1, 2]', 'writes to sys.stdout by the stdlib go into log too')
    tap.eq(o['log-empty'].log, '', 'log is "" without output')

    # helpers
    tap.eq(o['count-token'].ret, [2, 1, 0, 2, 3], 'count_token = ceil(len/4) (global, system_helper, SystemHelper)')
    tap.eq(o['base64'].ret, [base64.b64encode(b'hello').decode(),
                             'data:text/plain;base64,' + base64.b64encode('你好'.encode()).decode(),
                             'p:eA=='], 'str_to_base64(text, prefix)')
    h = o['hmac'].ret or [{}, {}, {}]
    now_ms = time.time() * 1000
    good = True
    why = []
    for (alg, secret), got in zip([('sha256', 'secret-key'), ('sha1', 'k/+='), ('md5', 'abc')], h):
        ts = got.get('timestamp', '')
        if not (isinstance(ts, str) and ts.isdigit() and abs(int(ts) - now_ms) < 120000):
            good = False
            why.append('bad timestamp %r' % ts)
            continue
        want = ref_hmac_py(alg, secret, ts)
        if got.get('sign') != want or set(got) != {'timestamp', 'sign'}:
            good = False
            why.append('%s: got %r want %r' % (alg, got, want))
    tap.ok(good, 'create_hmac(alg, secret) = {timestamp, sign=quote(b64(HMAC(secret, ts+"\\n"+secret)))}',
           '\n'.join(why) + '\n' + o['hmac'].describe())
    tap.ok(o['delay-ok'].success and 0.18 <= (o['delay-ok'].ret or 0) < 3, 'delay(200) sleeps about 200 ms',
           o['delay-ok'].describe())
    tap.eq(o['delay-limit'].message, 'Delay must be <= 10000ms', 'system_helper.delay(20000): Delay must be <= 10000ms')
    tap.eq(o['delay-limit-global'].message, 'Delay must be <= 10000ms', 'delay(10001) (global): the same message')

    # fs
    r = o['fs'].ret or {}
    tap.eq({k: r.get(k) for k in ('read', 'deep', 'ls', 'lsd', 'ex', 'nex')},
           {'read': 'hello', 'deep': 'deep', 'ls': ['a.txt', 'd'], 'lsd': ['e'], 'ex': True, 'nex': False},
           'fs write_file/read_file/mkdir/readdir/exists', o['fs'].describe())
    tap.ok(isinstance(r.get('tmp'), str) and os.path.basename(r['tmp']).startswith('sandbox_'),
           'fs.tmp_dir is the run\'s own sandbox_ temp dir')
    tap.eq(o['fs-open'].ret, ['via open', 'via open'], 'open() works inside the temp dir (relative paths)')
    for i in range(9):
        tap.eq(o['fs-escape-%d' % i].message, 'Path traversal not allowed',
               'fs escape %d refused: %s' % (i, cases_by_name(cases, 'fs-escape-%d' % i).split('return ')[1]))
    tap.eq(o['fs-symlink'].ret, {
        'link/passwd': 'ERR Path traversal not allowed', 'plink': 'ERR Path traversal not allowed',
        'sub/up/passwd': 'ERR Path traversal not allowed', 'w:link/new.txt': 'ERR Path traversal not allowed',
        'w:plink': 'ERR Path traversal not allowed', 'open': 'ERR Path traversal not allowed'},
        'symlinks out of the temp dir (dir, file, ../..) cannot be read or written', o['fs-symlink'].describe())
    tap.eq(o['disk-quota'].message, 'Disk quota exceeded: 1MB limit', 'fs quota: Disk quota exceeded: 1MB limit')

    # http
    hr = o['http']
    reqs = hr.http
    tap.eq(len(reqs), 3, 'three http_request calls -> three http lines')
    if len(reqs) == 3:
        tap.eq(reqs[0], {'url': 'https://api.example.com/x?y=1', 'method': 'POST',
                         'headers': {'X-A': '1', 'Content-Type': 'application/json'},
                         'body': json.dumps({'k': [1, '二']}, ensure_ascii=False), 'timeout': 3000},
               'http line: method upper-cased, dict body as JSON + Content-Type, timeout s -> ms')
        tap.eq(reqs[1], {'url': 'http://example.com/', 'method': 'PUT', 'headers': {'Content-Type': 'text/plain'},
                         'body': 'raw', 'timeout': 10000}, 'http line: options dict form, timeout clamped to 10 s')
        tap.eq(reqs[2], {'url': 'http://example.com/g', 'method': 'GET', 'headers': {}, 'body': None,
                         'timeout': 10000}, 'http line: defaults (GET, no body: null, 10 s)')
    r = hr.ret or {}
    want0 = canned_http(reqs[0], 0)['http_result'] if reqs else None
    tap.eq(r.get('r'), want0, 'http_request returns {status, statusText, headers, data} as the host sent them')
    tap.eq((r.get('parsed') or {}).get('n'), 0, 'data is the response text (json.loads works on it)')
    tap.eq((r.get('r3') or {}).get('headers', {}).get('x-n'), '2', 'answers are matched to requests in order')
    tap.eq(o['http-error'].ret, {'err': 'Request to private/internal network is not allowed',
                                 'type': 'RuntimeError'}, 'http_error -> an exception with the host\'s message')
    tap.eq(o['http-uncaught'].message, 'Request to private/internal network is not allowed',
           'an uncaught http_error is the run\'s message')
    tap.eq(o['http-cap'].ret, {'n': 3, 'err': 'Request limit exceeded: max 3 requests per execution'},
           'maxRequests=3: the 4th request fails')
    tap.eq(len(o['http-cap'].http), 3, 'maxRequests=3: the host saw 3 http lines')
    tap.eq(o['http-cap-default'].ret, {'n': 30, 'err': 'Request limit exceeded: max 30 requests per execution'},
           'default cap: 30 requests per run')

    # messages
    tap.eq(o['empty'].result, {'success': False, 'message': 'Code cannot be empty'}, 'empty code: Code cannot be empty')
    tap.eq(o['blank'].message, 'Code cannot be empty', 'whitespace-only code: Code cannot be empty')
    tap.eq(o['no-main'].message, "No 'main' function defined", "No 'main' function defined")
    tap.eq(o['raise'].message, 'boom', 'an exception\'s message is the run\'s message')
    tap.ok(o['sysexit'].result and not o['sysexit'].success and o['sysexit'].rc == 0,
           'SystemExit in user code is a failed run, not an early exit', o['sysexit'].describe())
    tap.ok(not o['syntax'].success and 'syntax' in (o['syntax'].message or '').lower(),
           'a syntax error is a failed run with the error', o['syntax'].describe())
    tap.eq(o['timeout'].message, 'Script execution timed out after 1000ms',
           'busy loop: Script execution timed out after 1000ms')
    tap.ok(o['timeout'].elapsed < 5, 'the runner ends a busy loop at its timeout (%.1fs)' % o['timeout'].elapsed)
    tap.eq(o['timeout-sleep'].message, 'Script execution timed out after 800ms', 'sleep: timed out after 800ms')

    # module policy
    tap.eq(o['import-os'].message, "Module 'os' is not allowed in sandbox", "import os: Module 'os' is not allowed in sandbox")
    tap.eq(o['import-from-sys'].message, "Module 'sys' is not allowed in sandbox", 'from sys import path refused')
    tap.eq(o['import-os-path'].message, "Module 'os.path' is not allowed in sandbox", 'import os.path refused')
    tap.eq(o['import-in-main'].message, "Module 'subprocess' is not allowed in sandbox", 'import inside main refused')
    want = dict((m, "Module '%s' is not allowed in sandbox" % m) for m in BLOCKED_25)
    tap.eq(o['import-all-25'].ret, want, 'all %d blocked modules refused with the message' % len(BLOCKED_25),
           o['import-all-25'].describe())
    bmods = {'exec': 'os', 'exec-globals': 'os', 'eval': 'os', 'dunder-import': 'subprocess', 'importlib': 'importlib',
             'import-importlib': 'importlib', 'builtins-module': 'os', 'builtins-dict': 'socket',
             'compile-exec': 'ctypes'}
    for k, m in sorted(bmods.items()):
        tap.eq(o['bypass-' + k].message, "Module '%s' is not allowed in sandbox" % m,
               'bypass %s refused' % cases_by_name(cases, 'bypass-' + k).split('\n')[1].strip())
    tap.ok(not o['bypass-loader'].success and 'ESCAPED' not in json.dumps(o['bypass-loader'].result),
           '__loader__.load_module("posix") is not available', o['bypass-loader'].describe())
    tap.ok(not o['bypass-input'].success, 'input() is not available (stdin is the protocol)')
    tap.eq(o['builtins-overwrite'].message, "Module 'os' is not allowed in sandbox",
           'builtins.__import__ = ... cannot replace the import check')
    r = o['allowed-modules'].ret or {}
    tap.eq(r, {'sqrt': 4.0, 're': ['123', '456'], 'next': '2024-01-02', 'weekday': 'Monday',
               'md5': hashlib.md5(b'a').hexdigest(), 'q': 'a%20b', 'q2': 'a=1', 'uuid': 36,
               'json': '{"key": "value"}', 'dec': '3.3', 'mean': 2, 'cnt': {'a': 2, 'b': 1}},
           'allowed modules import and work (json, math, re, datetime, hashlib, urllib.parse, ...)',
           o['allowed-modules'].describe())
    tap.eq(o['stdlib-internal'].ret, [['a', 'b c'], 'x', 'DEBUG'],
           'stdlib modules importing os/sys/socket internally still work (frame check)',
           o['stdlib-internal'].describe())

    # limits
    tap.eq(o['mem-small'].ret, 20 * 1024 * 1024, 'memoryMB=64: a 20 MB allocation works')
    tap.ok(not o['mem-big'].success, 'memoryMB=64: a 400 MB allocation fails (RLIMIT_AS)', o['mem-big'].describe())
    tap.ok(not o['fsize'].success and o['fsize'].rc == 0 and 'WROTE' not in json.dumps(o['fsize'].result),
           'diskMB=1: writing 3 MB fails (RLIMIT_FSIZE) and the runner still answers', o['fsize'].describe())
    lim = facts.get('rlimits', {}).get('limits', {})
    tap.eq(lim.get('Max cpu time'), str(math.ceil(2500 / 1000) + 1), 'RLIMIT_CPU = ceil(timeoutMs/1000)+1', repr(facts))
    tap.eq(lim.get('Max file size'), str(7 * 1024 * 1024), 'RLIMIT_FSIZE = diskMB')
    asz = lim.get('Max address space', '0')
    tap.ok(asz.isdigit() and 100 * 1024 * 1024 < int(asz) < 2048 * 1024 * 1024,
           'RLIMIT_AS = memoryMB plus interpreter headroom (%s)' % asz)

    # temp dir, environment, uid
    f = facts.get('tmpdir', {})
    tap.ok(o['tmpdir'].ret and o['tmpdir'].ret.startswith(os.path.realpath(tmp_root) + '/sandbox_'),
           'the temp dir is made under $TMPDIR', o['tmpdir'].describe())
    tap.eq(f.get('tmp_mode'), 0o700, 'the temp dir has mode 0700')
    tap.ok(o['tmpdir'].ret != o['tmpdir-2'].ret, 'two runs get two temp dirs')
    if os.geteuid() == 0:
        u = unused_uid()
        f = facts.get('uid', {})
        st = f.get('status', {})
        tap.eq(o['uid'].ret, 'x', '--uid run works')
        tap.eq((st.get('Uid', '').split() or [''])[:4], [str(u)] * 4, '--uid: real/effective/saved/fs uid dropped',
               repr(f))
        tap.eq((st.get('Gid', '').split() or [''])[:4], [str(u)] * 4, '--uid: gid dropped too')
        tap.eq(st.get('Groups', None), '', '--uid: no supplementary groups')
        tap.eq((f.get('tmp_uid'), f.get('tmp_gid'), f.get('tmp_mode')), (u, u, 0o700),
               '--uid: the temp dir is chowned to UID, mode 0700')
        tap.eq(f.get('mine_uid'), u, '--uid: files the run writes belong to UID')
    else:
        tap.skip('--uid drops privileges', 'not root')

    # legacy
    tap.eq(o['legacy-filter'].ret, {'passed': 2, 'total': 4}, 'legacy snippet: data filter')
    tap.eq(o['legacy-helper-fn'].ret, {'amount': 100, 'tax': 13, 'total': 113}, 'legacy snippet: helper + main')

    # raw protocol edge cases (sequential, few)
    out = host.run(None, raw_request=b'not json\n')
    tap.ok(out.result and not out.result.get('success') and out.rc == 0,
           'a malformed request line gets a failed result, exit 0', out.describe())
    out = host.run(None, raw_request={'code': 'def main():\n    return variables', 'limits': {}})
    tap.eq(out.ret, {}, 'variables and limits may be omitted')

    check_worker_mode(tap, cases, outs, tmp_root)

    elapsed = time.monotonic() - t_start
    tap.ok(elapsed < 60, 'the suite ran in under 60 s (%.1fs)' % elapsed)
    try:
        import shutil
        shutil.rmtree(tmp_root, ignore_errors=True)
    except Exception:
        pass
    tap.done()


def check_worker_mode(tap, cases, outs, tmp_root):
    """Every case once more in warm workers (runner.py --worker): the same
    result as one process per run, except where a run reports its own
    process, paths or times."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from js_worker_host import WorkerHost
    host = WorkerHost([sys.executable, PY_RUNNER], env=dict(os.environ, TMPDIR=tmp_root))
    reuse = os.geteuid() != 0
    if os.geteuid() == 0 and stdlib_readable_as(unused_uid()):
        # as root, a worker without a uid of its own cannot tell its runs'
        # files from anyone's: it recycles after every run
        uid = unused_uid()
        cases = [(n, dict(kw, uid=kw.get('uid', uid))) for n, kw in cases]
        reuse = True
    w = run_all(host, cases)
    differ = []
    for name, _ in cases:
        a, b = outs[name].result, w[name].result
        if a != b and json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True):
            differ.append(name)
            print('# %s: one-shot %s, worker %s' % (name, json.dumps(a)[:300], json.dumps(b)[:300]))
    print('# worker mode: results that differ from one-shot: %s' % differ)
    tap.eq([n for n in differ if n not in WORKER_DIFFER_OK], [],
           'worker mode: the cases give the results of one-shot runs')
    if reuse:
        tap.ok(host.started < len(cases), 'worker mode: workers were reused (%d started for %d runs)'
               % (host.started, len(cases)))
    else:
        tap.skip('worker mode: workers were reused', "this interpreter's stdlib is root's only")
    rcs = host.close()
    tap.ok(rcs and all(rc == 0 for rc in rcs), 'worker mode: EOF on stdin: every idle worker exits 0',
           repr(rcs))


# Cases whose result names the run's own temp dir or time.
WORKER_DIFFER_OK = frozenset(['hmac', 'delay-ok', 'fs', 'tmpdir', 'tmpdir-2'])


def stdlib_readable_as(uid):
    """Whether uid can import from this interpreter's stdlib (a pyenv under
    /root is root's only)."""
    try:
        r = subprocess.run([sys.executable, '-c', 'import pprint, uuid, shlex'], preexec_fn=lambda: (
            os.setgroups([]), os.setgid(uid), os.setuid(uid)), stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, cwd='/')
    except OSError:
        return False
    return r.returncode == 0


def cases_by_name(cases, name):
    for n, kw in cases:
        if n == name:
            return kw.get('code') or ''
    return ''


if __name__ == '__main__':
    main()
