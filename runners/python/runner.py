#!/usr/bin/env python3
# -*- coding: utf-8 -*-
"""agentbox in-box Python snippet runner (FastGPT sandbox v5 compatible).

One process runs one snippet. The protocol (JSON lines on stdin/stdout) and
the policies are described in runners/README.md. In short:

    host starts:  python3 runner.py [--uid UID]
    runner:       {"ready":true}
    host:         {"code":..., "variables":{...}, "limits":{...}, "maxRequests":30}
    runner:       {"http":{...}}            (0..maxRequests times, each answered by
    host:         {"http_result":{...}}      the host with one line)
                  or {"http_error":"..."}
    runner:       {"result":{"success":true,"data":{"codeReturn":...,"log":"..."}}}
                  or {"result":{"success":false,"message":"..."}}

stdout carries protocol lines only: print() and anything user code writes to
sys.stdout go into "log". The module policy here is compatibility with
FastGPT; the real boundary is the box the host runs this process in.
"""

# ---- everything user code may use is imported now, before the import hook
# ---- is installed and before privileges are dropped (a warm process).
# Only what the runner itself needs is imported ahead: every warm process pays
# for its imports, and a snippet's own imports load what it uses.
import base64
import builtins
import datetime
import hashlib
import hmac
import io
import json
import math
import os
import re
import resource
import shutil
import signal
import sys
import sysconfig
import tempfile
import time
import urllib.parse

try:
    import _strptime  # noqa: F401  (datetime.strptime imports it lazily)
except ImportError:  # pragma: no cover
    pass

# Python modules user code may not import (FastGPT's list of 25).
BLOCKED_MODULES = frozenset([
    'os', 'sys', 'subprocess', 'shutil', 'socket', 'ctypes',
    'multiprocessing', 'threading', 'pickle', 'importlib',
    'code', 'codeop', 'compile', 'compileall',
    'signal', 'resource', 'gc', 'inspect',
    'tempfile', 'pathlib', 'io', 'fileinput',
    'urllib', 'http', 'requests', 'httpx', 'aiohttp',
])
# urllib.parse is the one piece of urllib FastGPT snippets use; it has no I/O.
ALLOWED_SUBMODULES = frozenset(['urllib.parse'])

DEFAULT_MAX_REQUESTS = 30
MAX_DELAY_MS = 10000
MAX_HTTP_TIMEOUT_MS = 10000
# Virtual memory kept for the interpreter over memoryMB (RLIMIT_AS counts the
# whole address space: the interpreter, its libraries and preloaded modules).
AS_HEADROOM_MB = 64

_real_stdout_fd = 1
_PAGE_SIZE = os.sysconf('SC_PAGE_SIZE')
# The runner's own JSON, taken before any snippet runs: a snippet that
# replaces json.dumps/loads changes its own module, not the protocol.
_dumps = json.dumps
_loads = json.loads
_stdin = sys.stdin.buffer
_writing = False
_finished = False
_tmpdir = None


# ---- protocol ---------------------------------------------------------------

def _write_line(obj):
    """Writes one protocol line to the real stdout (fd 1), unbuffered."""
    global _writing
    data = (_dumps(obj, ensure_ascii=True, separators=(',', ':')) + '\n').encode('ascii')
    _writing = True
    try:
        view = memoryview(data)
        while view:
            n = os.write(_real_stdout_fd, view)
            view = view[n:]
    finally:
        _writing = False


def _read_line():
    global _stdin
    if _stdin is None:  # a worker's run: its socket pair, opened on first use
        _stdin = os.fdopen(0, 'rb', closefd=False)
    line = _stdin.readline()
    if not line:
        raise EOFError('the host closed stdin')
    return _loads(line.decode('utf-8', errors='replace'))


def _finish(result):
    """Writes the result line and exits 0 (never returns)."""
    global _finished
    if not _finished:
        _finished = True
        try:
            _write_line({'result': result})
        except Exception:  # pragma: no cover - stdout is gone
            pass
        if _tmpdir:
            shutil.rmtree(_tmpdir, ignore_errors=True)
    os._exit(0)


def _fail(message):
    _finish({'success': False, 'message': str(message)})


def _child_failed(e):
    """In a forked child whose set-up or run raised e: answers `Runner error`
    when it still can, then exits 1 (never returns)."""
    try:
        _fail('Runner error: %s' % e)
    except BaseException:  # noqa: B902 - a child must never return to its parent's loop
        pass
    os._exit(1)


def _jsonable(value, _depth=0):
    """A copy of value that json.dumps accepts: non-finite floats become
    null (as in JS), keys become strings, anything else non-JSON is str()."""
    if _depth > 200:
        return str(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                k = _dumps(k) if isinstance(k, (bool, int, float)) or k is None else str(k)
            out[k] = _jsonable(v, _depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [_jsonable(v, _depth + 1) for v in value]
    return str(value)


def _encode_return(value):
    """value as it goes into the result: JSON values as they are, anything
    else made JSON (NaN/Infinity -> null, other objects -> str())."""
    try:
        _dumps(value, allow_nan=False)
        return value
    except (TypeError, ValueError, RecursionError):
        return _jsonable(value)


# ---- arguments, temp dir, privileges -----------------------------------------

def _parse_uid(argv):
    uid = None
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == '--uid' and i + 1 < len(argv):
            uid = int(argv[i + 1])
            i += 2
            continue
        if a.startswith('--uid='):
            uid = int(a.split('=', 1)[1])
        i += 1
    return uid


def _make_tmpdir(uid):
    base = os.environ.get('TMPDIR') or '/tmp'
    if not os.path.isdir(base):
        base = '/tmp'
    tmpdir = os.path.realpath(tempfile.mkdtemp(prefix='sandbox_', dir=base))
    os.chmod(tmpdir, 0o700)
    if uid is not None and os.geteuid() == 0:
        os.chown(tmpdir, uid, uid)
    return tmpdir


def _setup_process(uid, tmpdir=None):
    """The run's temp dir (made here unless given), privileges dropped to
    uid, cwd, environment."""
    if tmpdir is None:
        tmpdir = _make_tmpdir(uid)
    if uid is not None and os.geteuid() == 0:
        # POSIX message queues outlive their process and cannot be listed
        # without an mqueue mount, so no sweep could find them: a run may
        # create none (the kernel charges a queue to this limit).
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))
        # what it writes past its temp dir is its own, even while it runs
        os.umask(0o077)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    os.chdir(tmpdir)
    keep = ('PATH', 'LANG', 'LC_ALL', 'TZ', 'HOME')
    for k in list(os.environ):
        if k not in keep:
            del os.environ[k]
    os.environ['TMPDIR'] = tmpdir
    os.environ['SANDBOX_TMPDIR'] = tmpdir
    # Exceeding RLIMIT_FSIZE makes the write fail (EFBIG) instead of killing.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    return tmpdir


def _vm_size_bytes():
    """The address space mapped now (/proc/self/statm's first field: raw
    reads, no file object: a run pays for every page it touches)."""
    try:
        fd = os.open('/proc/self/statm', os.O_RDONLY | os.O_CLOEXEC)
        try:
            return int(os.read(fd, 256).split(None, 1)[0]) * _PAGE_SIZE
        finally:
            os.close(fd)
    except (OSError, ValueError, IndexError):
        return 0


def _apply_limits(limits):
    def num(key, default):
        v = limits.get(key, default) if isinstance(limits, dict) else default
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else default

    timeout_ms = num('timeoutMs', 10000)
    memory_mb = num('memoryMB', 64)
    disk_mb = num('diskMB', 10)

    def setlim(which, value):
        value = int(value)
        try:
            soft, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass

    # memoryMB for user data on top of what the interpreter already maps.
    base = max(_vm_size_bytes(), 0)
    setlim(resource.RLIMIT_AS, base + (memory_mb + AS_HEADROOM_MB) * 1024 * 1024)
    setlim(resource.RLIMIT_FSIZE, disk_mb * 1024 * 1024)
    setlim(resource.RLIMIT_CPU, math.ceil(timeout_ms / 1000) + 1)
    return timeout_ms, memory_mb, disk_mb


# ---- import policy -------------------------------------------------------------

_TRUSTED = None


def _trusted_prefixes():
    """The stdlib's own directories (computed before privileges are dropped:
    sysconfig may load more of the stdlib the first time)."""
    global _TRUSTED
    if _TRUSTED is not None:
        return _TRUSTED
    out = []
    for key in ('stdlib', 'platstdlib', 'purelib', 'platlib'):
        p = sysconfig.get_path(key)
        if p:
            out.append(os.path.realpath(p) + os.sep)
            out.append(p + os.sep)
    _TRUSTED = tuple(set(out))
    return _TRUSTED


def _make_import_hook(original_import):
    trusted = _trusted_prefixes()
    self_file = os.path.realpath(__file__)
    blocked = BLOCKED_MODULES
    allowed_sub = ALLOWED_SUBMODULES
    getframe = sys._getframe

    def trusted_caller(depth):
        # The frame that executed the import statement (or called
        # __import__): user code (compiled as <user_code>, or exec/eval'd as
        # <string>) is refused; the stdlib, site-packages, frozen importlib
        # and this runner may import what they need.
        try:
            f = getframe(depth)
        except ValueError:
            return False
        name = f.f_code.co_filename or ''
        if name.startswith('<frozen '):
            return True
        if name == self_file:
            return True
        return name.startswith(trusted)

    def safe_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and isinstance(name, str):
            top = name.split('.')[0]
            if top in blocked and not trusted_caller(2):
                ok = name in allowed_sub or (
                    top == 'urllib' and not name.count('.') and fromlist and
                    all(x == 'parse' for x in fromlist))
                if not ok:
                    raise ImportError("Module '%s' is not allowed in sandbox" % name)
            if top == 'builtins' and not trusted_caller(2):
                return _builtins_proxy
        return original_import(name, globals, locals, fromlist, level)

    return safe_import


class _BuiltinsProxy(object):
    """What `import builtins` gives user code: the real module's attributes,
    except that __import__ is the safe one and cannot be replaced."""
    __slots__ = ()

    def __getattribute__(self, name):
        if name == '__import__':
            return _user_builtins['__import__']
        if name in _user_builtins:
            return _user_builtins[name]
        return getattr(builtins, name)

    def __setattr__(self, name, value):
        if name in ('__import__', 'open', 'input'):
            return
        setattr(builtins, name, value)

    def __dir__(self):
        return dir(builtins)


_builtins_proxy = _BuiltinsProxy()
_user_builtins = {}


def _fill_user_builtins():
    """The builtins a run's code sees (the real ones but those that read a
    terminal or exit), made once: a worker fills them before it forks its
    runs, so a run does not touch (and copy, page by page, out of the shared
    fork) every builtin object to build them again. Returns the dict; a run
    then sets its own __import__, print and open in its copy."""
    ub = _user_builtins
    if not ub:
        for name in dir(builtins):
            ub[name] = getattr(builtins, name)
        for name in ('input', 'breakpoint', 'help', 'exit', 'quit', 'copyright', 'credits',
                     'license', '__loader__', '__spec__'):
            ub.pop(name, None)
    return ub


# ---- helpers --------------------------------------------------------------------

class _SandboxFs(object):
    """system_helper.fs: files in the run's own temp dir only."""

    def __init__(self, tmpdir, disk_limit_mb):
        self._tmpdir = tmpdir
        self._disk_limit_mb = disk_limit_mb
        self._disk_limit = int(disk_limit_mb * 1024 * 1024)
        self._sizes = {}

    def _safe_path(self, path):
        if isinstance(path, bytes):
            path = path.decode('utf-8', errors='replace')
        if not isinstance(path, str):
            raise TypeError('path must be a string')
        if '\x00' in path:
            raise PermissionError('Path traversal not allowed')
        joined = os.path.normpath(os.path.join(self._tmpdir, path))
        real = os.path.realpath(joined)
        for p in (joined, real):
            if p != self._tmpdir and not p.startswith(self._tmpdir + os.sep):
                raise PermissionError('Path traversal not allowed')
        return real

    def write_file(self, path, content):
        safe = self._safe_path(path)
        if isinstance(content, str):
            data = content.encode('utf-8')
        elif isinstance(content, (bytes, bytearray)):
            data = bytes(content)
        else:
            data = str(content).encode('utf-8')
        old = self._sizes.get(safe, 0)
        if sum(self._sizes.values()) - old + len(data) > self._disk_limit:
            raise IOError('Disk quota exceeded: %sMB limit' % _fmt_num(self._disk_limit_mb))
        parent = os.path.dirname(safe)
        if not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)
        self._safe_path(os.path.relpath(parent, self._tmpdir))
        fd = os.open(safe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, 'wb') as f:
            f.write(data)
        self._sizes[safe] = len(data)

    def read_file(self, path):
        safe = self._safe_path(path)
        fd = os.open(safe, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, 'r', encoding='utf-8') as f:
            return f.read()

    def readdir(self, path='.'):
        return sorted(os.listdir(self._safe_path(path)))

    def mkdir(self, path):
        os.makedirs(self._safe_path(path), exist_ok=True)

    def exists(self, path):
        return os.path.exists(self._safe_path(path))

    @property
    def tmp_dir(self):
        return self._tmpdir

    # camelCase aliases, as in the JS helper
    writeFile = write_file
    readFile = read_file

    @property
    def tmpDir(self):
        return self._tmpdir


def _fmt_num(n):
    return str(int(n)) if float(n).is_integer() else str(n)


class _SystemHelper(object):
    def __init__(self, fs, max_requests):
        self.fs = fs
        self._max_requests = max_requests
        self._request_count = 0

    def count_token(self, text=''):
        if not isinstance(text, str):
            text = str(text)
        return math.ceil(len(text) / 4)

    def str_to_base64(self, text, prefix=''):
        if not isinstance(text, str):
            text = str(text)
        return (prefix or '') + base64.b64encode(text.encode('utf-8')).decode('ascii')

    def create_hmac(self, algorithm, secret):
        timestamp = str(int(time.time() * 1000))
        string_to_sign = timestamp + '\n' + secret
        h = hmac.new(secret.encode('utf-8'), string_to_sign.encode('utf-8'), algorithm)
        sign = urllib.parse.quote(base64.b64encode(h.digest()).decode('ascii'))
        return {'timestamp': timestamp, 'sign': sign}

    def delay(self, ms):
        if ms > MAX_DELAY_MS:
            raise ValueError('Delay must be <= %dms' % MAX_DELAY_MS)
        if ms > 0:
            time.sleep(ms / 1000)

    def http_request(self, url, method=None, headers=None, body=None, timeout=None, **kw):
        """http_request(url, method='GET', headers=None, body=None, timeout=None)
        or http_request(url, {"method":..., "headers":..., "body":..., "timeout":...}).
        timeout is in seconds (as in FastGPT's Python helper), at most 10."""
        if isinstance(method, dict):
            opts = method
            method = opts.get('method')
            headers = opts.get('headers', headers)
            body = opts.get('body', body)
            timeout = opts.get('timeout', timeout)
        if 'data' in kw and body is None:
            body = kw.pop('data')
        if 'json' in kw and body is None:
            body = kw.pop('json')
        self._request_count += 1
        if self._request_count > self._max_requests:
            raise RuntimeError('Request limit exceeded: max %d requests per execution' % self._max_requests)
        if not isinstance(url, str):
            raise TypeError('url must be a string')
        method = (method or 'GET')
        if not isinstance(method, str):
            raise TypeError('method must be a string')
        hdrs = {}
        for k, v in (headers or {}).items():
            hdrs[str(k)] = str(v)
        data = None
        if body is not None:
            if isinstance(body, str):
                data = body
            elif isinstance(body, (bytes, bytearray)):
                data = bytes(body).decode('utf-8', errors='replace')
            else:
                data = _dumps(_encode_return(body), ensure_ascii=False)
                if not any(k.lower() == 'content-type' for k in hdrs):
                    hdrs['Content-Type'] = 'application/json'
        if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and timeout > 0:
            timeout_ms = min(int(timeout * 1000), MAX_HTTP_TIMEOUT_MS)
        else:
            timeout_ms = MAX_HTTP_TIMEOUT_MS
        _write_line({'http': {'url': url, 'method': method.upper(), 'headers': hdrs,
                              'body': data, 'timeout': timeout_ms}})
        reply = _read_line()
        if not isinstance(reply, dict):
            raise RuntimeError('HTTP request failed: bad reply from the host')
        if 'http_error' in reply:
            raise RuntimeError(str(reply['http_error']))
        res = reply.get('http_result')
        if not isinstance(res, dict):
            raise RuntimeError('HTTP request failed: bad reply from the host')
        return {
            'status': res.get('status'),
            'statusText': res.get('statusText', ''),
            'headers': res.get('headers') or {},
            'data': res.get('data', ''),
        }

    # camelCase aliases, as in the JS helper
    countToken = count_token
    strToBase64 = str_to_base64
    createHmac = create_hmac
    httpRequest = http_request


# ---- log capture -------------------------------------------------------------------

class _LogWriter(io.TextIOBase):
    """sys.stdout while user code runs: everything written goes into log."""

    def __init__(self, sink):
        self._sink = sink

    def writable(self):
        return True

    def write(self, s):
        if not isinstance(s, str):
            s = str(s)
        self._sink.append(s)
        return len(s)

    def flush(self):
        pass

    def isatty(self):
        return False


def _make_print(sink):
    def print(*args, sep=' ', end='\n', file=None, flush=False):  # noqa: A001
        sink.append((sep if sep is not None else ' ').join(str(a) for a in args) +
                    (end if end is not None else '\n'))
    return print


def _make_open(tmpdir, original_open):
    def open(file, mode='r', *args, **kwargs):  # noqa: A001
        if isinstance(file, bool) or not isinstance(file, (str, bytes, os.PathLike)):
            raise PermissionError('Path traversal not allowed')
        p = os.fsdecode(file)
        joined = os.path.normpath(os.path.join(tmpdir, p))
        real = os.path.realpath(joined)
        for q in (joined, real):
            if q != tmpdir and not q.startswith(tmpdir + os.sep):
                raise PermissionError('Path traversal not allowed')
        return original_open(real, mode, *args, **kwargs)
    return open


# ---- the run -------------------------------------------------------------------------

def _on_timeout(timeout_ms):
    def handler(signum, frame):
        if _writing:
            return  # the host's own timer ends the process
        _fail('Script execution timed out after %sms' % _fmt_num(timeout_ms))
    return handler


class _Param(object):
    """What _call_main needs of a parameter (inspect.Parameter's shape, without
    importing inspect in every warm process: it costs ~7 ms)."""
    POSITIONAL_OR_KEYWORD, VAR_POSITIONAL, KEYWORD_ONLY, VAR_KEYWORD = range(4)
    empty = object()

    def __init__(self, name, kind, default):
        self.name, self.kind, self.default = name, kind, default


def _params_of(fn):
    code = getattr(fn, '__code__', None)
    if code is None:
        raise TypeError('main has no code object')  # a callable object: main(variables)
    n = code.co_argcount
    defaults = fn.__defaults__ or ()
    first_default = n - len(defaults)
    params = [_Param(nm, _Param.POSITIONAL_OR_KEYWORD,
                     defaults[i - first_default] if i >= first_default else _Param.empty)
              for i, nm in enumerate(code.co_varnames[:n])]
    if code.co_flags & 0x04:  # CO_VARARGS
        params.append(_Param(code.co_varnames[n + code.co_kwonlyargcount], _Param.VAR_POSITIONAL,
                             _Param.empty))
    return params


def _call_main(user_main, variables):
    try:
        params = _params_of(user_main)
    except (TypeError, ValueError):
        return user_main(variables)
    if len(params) == 0:
        return user_main()
    if len(params) == 1:
        return user_main(variables)
    args = []
    for p in params:
        if p.kind in (_Param.VAR_POSITIONAL, _Param.VAR_KEYWORD):
            break
        if p.name in variables:
            args.append(variables[p.name])
        elif p.default is not _Param.empty:
            break
        else:
            raise TypeError("Missing required argument: '%s'" % p.name)
    return user_main(*args)


_original_open = builtins.open
_safe_import = None


def _install_import_hook():
    global _safe_import
    if _safe_import is None:
        _safe_import = _make_import_hook(builtins.__import__)
        builtins.__import__ = _safe_import


def _serve_run(tmpdir):
    """Everything after the set-up: ready line, the request, the run, the
    result (never returns)."""
    _install_import_hook()
    _write_line({'ready': True})
    try:
        req = _read_line()
    except Exception as e:
        _fail('Invalid request: %s' % e)
    _run_request(req, tmpdir)


def _run_request(req, tmpdir):
    """Runs one request line (a dict, else a failure) in this process, which
    is the run's own: writes the result and exits (never returns)."""
    original_open = _original_open
    safe_import = _safe_import
    if isinstance(req, str):
        _fail(req)
    if not isinstance(req, dict):
        _fail('Invalid request: not an object')

    code = req.get('code')
    variables = req.get('variables')
    if variables is None:
        variables = {}
    max_requests = req.get('maxRequests', DEFAULT_MAX_REQUESTS)
    if not isinstance(max_requests, int) or isinstance(max_requests, bool) or max_requests < 0:
        max_requests = DEFAULT_MAX_REQUESTS
    timeout_ms, memory_mb, disk_mb = _apply_limits(req.get('limits') or {})

    if not isinstance(code, str) or not code.strip():
        _fail('Code cannot be empty')
    if not isinstance(variables, dict):
        _fail('Invalid request: variables must be an object')

    signal.signal(signal.SIGALRM, _on_timeout(timeout_ms))
    signal.setitimer(signal.ITIMER_REAL, max(timeout_ms, 1) / 1000.0)

    helper = _SystemHelper(_SandboxFs(tmpdir, disk_mb), max_requests)
    log = []

    ub = _fill_user_builtins()
    ub['__import__'] = safe_import
    ub['print'] = _make_print(log)
    ub['open'] = _make_open(tmpdir, original_open)

    g = {
        '__builtins__': ub,
        '__name__': '__main__',
        'variables': variables,
        'system_helper': helper,
        'SystemHelper': helper,
        'count_token': helper.count_token,
        'str_to_base64': helper.str_to_base64,
        'create_hmac': helper.create_hmac,
        'delay': helper.delay,
        'http_request': helper.http_request,
        'json': json,
        'math': math,
        'time': time,
    }
    for k, v in variables.items():
        if isinstance(k, str) and k.isidentifier():
            g[k] = v

    saved_stdout = sys.stdout
    sys.stdout = _LogWriter(log)
    try:
        compiled = compile(code, '<user_code>', 'exec')
        exec(compiled, g)
        user_main = g.get('main')
        if user_main is None or not callable(user_main):
            raise RuntimeError("No 'main' function defined")
        ret = _call_main(user_main, variables)
    except MemoryError:
        sys.stdout = saved_stdout
        _fail('Memory limit exceeded')
    except RecursionError as e:
        sys.stdout = saved_stdout
        _fail(str(e) or 'maximum recursion depth exceeded')
    except BaseException as e:  # SystemExit included: the runner reports, not exits
        sys.stdout = saved_stdout
        msg = str(e)
        _fail(msg if msg else type(e).__name__)
    sys.stdout = saved_stdout
    signal.setitimer(signal.ITIMER_REAL, 0)

    text = ''.join(log)
    if text.endswith('\n'):
        text = text[:-1]
    try:
        out = _encode_return(ret)
    except Exception as e:  # pragma: no cover
        _fail(str(e))
    _finish({'success': True, 'data': {'codeReturn': out, 'log': text}})


# ---- the zygote --------------------------------------------------------------------
# `runner.py --zygote --js-runtime BUN --js-runner RUNNER_JS`: a long-lived
# parent (root in the box) that has imported everything a run needs and never
# runs user code. It listens on a unix socket in a fresh 0700 directory and
# writes {"zygote":{"socket":PATH}}. Each connection is one run: the host
# writes {"uid":U,"lang":"python"|"js"}; the zygote forks, and the child (a
# fresh process with the parent's imports) speaks the run protocol on the
# connection: {"pid":N}, then waits for {"attached":...} (the host has moved
# it into the run's cgroup), makes its temp dir, drops to uid U and either
# runs the Python snippet or execs the JS runtime with the connection as its
# stdin/stdout. See runners/README.md.

# Modules snippets commonly import: loaded once here, free in every child.
# Not logging: it imports threading, and both register handlers that run in
# every child a worker forks (threading's _after_fork, logging's lock
# re-init): ~0.5 ms of CPU and ~70-150 page faults added to every run,
# against a few ms once for the rare snippet that imports logging.
ZYGOTE_PRELOAD = (
    'collections', 'decimal', 'statistics', 'random', 'string', 'itertools', 'functools',
    'operator', 'copy', 'bisect', 'heapq', 'fractions', 'textwrap', 'unicodedata', 'uuid',
    'typing', 'dataclasses', 'enum', 'html', 'calendar', 'csv', 'difflib', 'pprint', 'zlib',
    'struct', 'array', 'numbers', 'cmath', 'email.utils', 'secrets', 'ipaddress',
    'zoneinfo', 'traceback', 'weakref', 'contextlib', 'abc', 'locale', 'gzip', 'binascii',
    'quopri', 'html.parser', 'xml.etree.ElementTree', 'urllib.parse',
    'ctypes',  # the worker's prctl (never importable by snippets: the import hook)
)
HELLO_MAX = 4096

# Where a run's uid can write besides its own temp dir: the box's shared
# temp places (the runner box's /workspace and every other directory are not
# writable to run uids; tests/attack/test_runner_leftovers.py looks for any
# other). After a run ends the sweep removes what its uid left there.
SHARED_WRITABLE = ('/tmp', '/var/tmp', '/dev/shm')
SWEEP_MAX_ENTRIES = 200000  # entries looked at per pass of a sweep
SWEEP_MAX_PASSES = 50       # passes, while a pass stopped at that many
SWEEP_MAX_DEPTH = 64        # directories of other owners walked into


def _zygote_arg(argv, name):
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _zygote_child(conn, hello, tmpdir, js_argv):
    """In the forked child: never returns."""
    global _stdin, _tmpdir
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        fd = conn.detach()
        os.dup2(fd, 0)
        os.dup2(fd, 1)
        if fd > 2:
            os.close(fd)
        _stdin = os.fdopen(0, 'rb', closefd=False)
        _write_line({'pid': os.getpid()})
        reply = _read_line()
        if not isinstance(reply, dict) or 'attached' not in reply:
            os._exit(2)
        uid = hello['uid']
        if hello.get('worker') is True and hello['lang'] == 'python':
            _worker_prepare()
        _tmpdir = _setup_process(uid, tmpdir)
        worker = hello.get('worker') is True
        max_runs = hello.get('maxRuns')
        if not isinstance(max_runs, int) or isinstance(max_runs, bool) or max_runs < 1:
            max_runs = DEFAULT_MAX_RUNS
        if hello['lang'] == 'js':
            _tmpdir = None  # the JS runner removes it
            argv = js_argv + (['--worker', '--tmpdir-root', tmpdir, '--max-runs', str(max_runs)]
                              if worker else ['--tmpdir', tmpdir])
            os.execve(js_argv[0], argv, dict(os.environ))
        if worker:
            _tmpdir = None  # the host's {"ended":UID} removes it
            _worker(tmpdir, max_runs)
            os._exit(0)
        _serve_run(tmpdir)
    except BaseException as e:  # noqa: B902 - a child must never return to the zygote
        _child_failed(e)
    os._exit(1)


# ---- worker mode ----------------------------------------------------------------
# `runner.py --worker [--uid UID] [--max-runs N]`, or a zygote child asked
# with {"worker":true}: a warm parent that serves many runs of one app and
# never runs user code itself. Each run is a fork of the parent's clean state
# (fresh globals, builtins and module table: nothing a run changes survives
# it) speaking the protocol through the parent over a socket pair of its own,
# so only the parent ever writes on the host's connection. The parent is not
# dumpable (a run of the same uid cannot ptrace it or read its memory) and is
# the child subreaper of its runs: a process a run leaves behind becomes its
# child, which it notices. After each run it writes {"ready":true}, or
# {"recycle":"<reason>"} and exits 0 (runners/README.md lists the reasons).

DEFAULT_MAX_RUNS = 100
RUN_EXIT_GRACE_S = 2.0
RUN_LINE_MAX = 64 << 20  # a result line (codeReturn + log), as the host takes
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36


RUN_DIR_NAME = 'sandbox_run'  # every run's temp dir, made anew under the worker's dir
# A shared temp place whose directory has not changed since a scan found
# nothing of the worker's uid there has nothing new: creating, removing or
# renaming an entry updates the directory's mtime. A scan is trusted only
# when it began this long after that mtime, so a later change cannot carry
# the same (coarse-grained) timestamp.
MTIME_SETTLED_NS = 100 * 1000 * 1000
READY_LINE = b'{"ready":true}\n'

_libc = None
_select = None
_socket = None
_clean_places = {}  # place -> (st_dev, st_ino, st_mtime_ns, st_ctime_ns) when last found clean


def _worker_prepare():
    """Loads what the worker needs before it drops its privileges (libc for
    prctl: the uid may not read the interpreter's extension modules)."""
    global _libc, _select, _socket
    import ctypes
    import select
    import socket
    _libc = ctypes.CDLL(None, use_errno=True)
    _select, _socket = select, socket


def _prctl(option, value):
    import ctypes
    return _libc.prctl(option, ctypes.c_ulong(value), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0))


def _int_arg(argv, name, default):
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return int(argv[i + 1])
        if a.startswith(name + '='):
            return int(a.split('=', 1)[1])
    return default


def _place_left(place, uid, root):
    """The first entry of uid at the top of place (other than root), or
    None. A place whose directory is as it was when last found clean is not
    read again (MTIME_SETTLED_NS)."""
    began = time.time_ns()
    try:
        st = os.stat(place)
    except OSError:
        return None
    key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    if _clean_places.get(place) == key:
        return None
    try:
        with os.scandir(place) as it:
            for e in it:
                if e.path == root:
                    continue
                try:
                    if e.stat(follow_symlinks=False).st_uid == uid:
                        return e.path
                except OSError:
                    continue
    except OSError:
        return None
    if began - max(st.st_mtime_ns, st.st_ctime_ns) >= MTIME_SETTLED_NS:
        _clean_places[place] = key
    return None


def _ipc_any():
    """Whether any System V IPC object exists in the box (raw reads of
    /proc/sysvipc/*: a header line and nothing else when there is none)."""
    for kind in ('shm', 'sem', 'msg'):
        try:
            fd = os.open('/proc/sysvipc/' + kind, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            data = b''
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            return True  # unreadable: let the full look decide
        finally:
            os.close(fd)
        if data.count(b'\n') > 1:
            return True
    return False


def _leftovers(uid, root):
    """Why the worker cannot take another run: what its runs left outside
    their temp dirs (entries of uid at the top of the shared temp places
    other than the worker's own root, anything in root, System V IPC of
    uid), or None. Top levels only: cheap enough for every run."""
    for place in SHARED_WRITABLE:
        left = _place_left(place, uid, root)
        if left:
            return 'a run left %s' % left
    try:
        if os.listdir(root):
            return 'a run left files in the worker dir'
    except OSError:
        return 'the worker dir is gone'
    if _ipc_any() and uid in _ipc_uids():
        return 'a run left System V IPC objects'
    return None


def _strays():
    """Reaps exited strays; True when a process a run left is still alive
    (the parent is their subreaper: every orphan of a run is its child)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def _send_all(fd, data):
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _run_end(ctl, seconds):
    """The template's word that the run has ended (it has reaped it): b'0',
    or b'1' when another child of its is alive (a process the run left);
    b'' when the template is gone; None when nothing came within seconds."""
    r, _, _ = _select.select([ctl], [], [], seconds)
    if not r:
        return None
    try:
        return ctl.recv(8)
    except OSError:
        return b''


def _fork_run(run_dir, ctl):
    """The next run, made ahead of its request (its fork is then off the
    request's path): a new directory at the worker's one run path (the
    environment, TMPDIR, was set for it once; the last run's went after its
    end), a socket pair, the template's fork. The run waits for its request
    line. Returns (the worker's end of the run's socket, the run's pidfd),
    or the message of a failure (the run dir)."""
    try:
        os.mkdir(run_dir, 0o700)
        os.chmod(run_dir, 0o700)
    except OSError as e:
        return 'Runner error: the run dir: %s' % e
    mine, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        _socket.send_fds(ctl, [b'r'], [theirs.fileno()])
        _, fds, _, _ = _socket.recv_fds(ctl, 32, 1)  # the run's pidfd: signals reach it alone
        return mine, fds[0]
    except (OSError, IndexError):
        os._exit(1)  # the template is gone: the host ends this worker
    finally:
        theirs.close()


def _relay_run(line, run, run_dir, ctl):
    """Gives the run (_fork_run's) its request line, relays its protocol
    lines, waits for its end. Returns (result or None, why the worker must
    recycle or None, host gone)."""
    select = _select
    if isinstance(run, str):
        result = {'success': False, 'message': run}
        _write_line({'result': result})
        return result, 'no run dir', False
    mine, pidfd = run
    try:
        _send_all(mine.fileno(), line)  # the run reads its request first
    except OSError:
        pass  # the run is gone: its end comes from its socket
    sock = mine.fileno()
    result, why, host_gone = None, None, False
    end = None  # the template's word on the run's end: b'0', b'1' (strays), b'' (it is gone)
    buf_run, scanned = bytearray(), 0
    try:
        open_run = True
        while open_run and result is None:
            if end is None:
                r, _, _ = select.select([sock, 0, ctl], [], [])
            else:  # the run has ended: what it wrote before, and no more
                r, _, _ = select.select([sock], [], [], 0)
                if not r:
                    break
            if ctl in r:
                end = _run_end(ctl, 0)
                if not end:
                    why = 'the worker\'s template is gone'
                    break
                continue
            if 0 in r:
                data = os.read(0, 65536)
                if not data:
                    host_gone = True
                    break
                try:
                    _send_all(sock, data)  # the host's answers to the run's requests
                except OSError:
                    pass  # the run is gone: its end comes from its socket
            if sock in r:
                data = os.read(sock, 262144)
                if not data:
                    open_run = False
                buf_run += data
                start = 0
                while result is None:
                    nl = buf_run.find(b'\n', max(start, scanned))
                    if nl < 0:
                        scanned = len(buf_run)
                        break
                    one = bytes(buf_run[start:nl + 1])
                    start = nl + 1
                    try:
                        msg = _loads(one.decode('utf-8'))
                    except ValueError:
                        continue  # not a protocol line (a shell's echo): dropped, as the host does
                    if isinstance(msg, dict) and 'result' in msg:
                        result = msg['result']
                        _send_all(_real_stdout_fd, one)
                    elif isinstance(msg, dict) and 'http' in msg:
                        _send_all(_real_stdout_fd, one)
                del buf_run[:start]
                scanned = max(0, scanned - start)
                if len(buf_run) > RUN_LINE_MAX:
                    why = 'a run wrote a line too long'
                    break
                if buf_run and result is not None:
                    why = 'a run wrote after its result'
    finally:
        mine.close()
    if host_gone or why or result is None:
        _kill_run(pidfd)
    if end is None:
        end = _run_end(ctl, RUN_EXIT_GRACE_S)
        if end is None:
            _kill_run(pidfd)
            why = why or 'a run did not exit after its result'
            end = _run_end(ctl, RUN_EXIT_GRACE_S)
    os.close(pidfd)
    if not end:
        why = why or 'the worker\'s template is gone'
    elif end != b'0':
        why = why or 'a run left a process'
    if result is None and not why:
        why = 'a run ended without a result'
    try:
        os.rmdir(run_dir)  # most runs leave it empty
    except FileNotFoundError:
        pass
    except OSError:
        shutil.rmtree(run_dir, ignore_errors=True)  # what stays makes the worker recycle
    return result, why, host_gone


def _kill_run(pidfd):
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except OSError:
        pass


def _template(ctl, run_dir):
    """The worker's clean state, forked once before its first run: it forks
    every run and does nothing else, so the pages a run copies out of it are
    only those the run itself touches (the relay, which touches many, runs
    in the worker, which never forks a run). For b'r' and a socket it forks
    the run and answers with a pidfd of it (the worker's way to kill it,
    never another process); once the run has exited it reaps it and says
    whether any other child of its is alive (b'1': it is the runs' child
    subreaper, so that is a process a run left). Never returns."""
    select = _select
    try:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
        null = os.open('/dev/null', os.O_RDWR)
        os.dup2(null, 0)  # the host's connection is the worker's alone
        os.dup2(null, 1)
        os.close(null)
        run_pid, run_fd = 0, -1
        while True:
            if run_fd >= 0:
                r, _, _ = select.select([ctl, run_fd], [], [])
                if run_fd in r:  # the run has exited
                    try:
                        os.waitpid(run_pid, 0)
                    except ChildProcessError:
                        pass
                    os.close(run_fd)
                    run_fd = -1
                    ctl.send(b'1' if _strays() else b'0')
                    continue
            msg, fds, _, _ = _socket.recv_fds(ctl, 16, 1)
            if msg != b'r' or len(fds) != 1 or run_fd >= 0:
                break  # the worker is gone (EOF) or speaks nonsense
            pid = os.fork()
            if pid == 0:
                _run_child(fds[0], run_dir, ctl)
            os.close(fds[0])
            run_pid, run_fd = pid, os.pidfd_open(pid)
            _socket.send_fds(ctl, [b'%d' % pid], [run_fd])
    except BaseException:  # noqa: B902 - the template must never return to the loop
        pass
    os._exit(0)


def _read_request():
    """The request line on fd 0 with raw reads (no buffered file object: a
    run pays for every page it touches). Nothing follows it until the run
    writes an http line, so nothing past it is read."""
    data = os.read(0, 65536)
    if data.endswith(b'\n') or not data:
        if not data:
            raise EOFError('the worker closed the run\'s socket')
        return data
    chunks = [data]
    while True:
        data = os.read(0, 1 << 20)
        if not data:
            raise EOFError('the worker closed the run\'s socket')
        chunks.append(data)
        if data.endswith(b'\n'):
            return b''.join(chunks)


def _run_child(fd, run_dir, ctl):
    """A run, in a fork of the template: as little as can be done here
    (every page it touches is copied out of the template's): SIGCHLD is
    already the default, the environment already names run_dir, the request
    is read from the run's socket. Never returns."""
    global _stdin
    try:
        os.close(ctl.detach())  # the run cannot speak to the template
        os.dup2(fd, 0)
        os.dup2(fd, 1)
        os.close(fd)
        _stdin = None
        os.chdir(run_dir)
        try:
            req = _loads(_read_request().decode('utf-8', errors='replace'))
        except Exception as e:
            _fail('Invalid request: %s' % e)
        _run_request(req, run_dir)
    except BaseException as e:  # noqa: B902 - a run must never return to the loop
        _child_failed(e)
    os._exit(1)


def _worker(root, max_runs):
    """The worker's loop, until EOF on stdin or a recycle. The process has
    dropped to its uid and made root, its temp dir, already."""
    uid = os.getuid()
    _prctl(PR_SET_DUMPABLE, 0)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # Everything the worker holds now goes to the collector's permanent
    # generation: a run's collections then never walk (and so never copy,
    # page by page, out of the shared fork) the worker's own objects.
    _install_import_hook()
    _fill_user_builtins()
    import gc
    gc.collect()
    gc.freeze()
    # every run's temp dir has this one path: its environment is set here,
    # once, for every fork
    run_dir = os.path.join(root, RUN_DIR_NAME)
    os.environ['TMPDIR'] = run_dir
    os.environ['SANDBOX_TMPDIR'] = run_dir
    ctl, ctl_t = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    if os.fork() == 0:
        ctl.close()
        _template(ctl_t, run_dir)
    ctl_t.close()
    limited = ('Script execution timed out after', 'Memory limit exceeded')
    runs = 0
    while True:
        _send_all(_real_stdout_fd, READY_LINE)
        run = _fork_run(run_dir, ctl)
        line = _stdin.readline()
        if not line:
            return
        result, why, host_gone = _relay_run(line, run, run_dir, ctl)
        if host_gone:
            return
        runs += 1
        if why is None and isinstance(result, dict) and not result.get('success'):
            msg = str(result.get('message', ''))
            if msg.startswith(limited):
                why = 'a run hit a limit'
        if why is None:
            why = _leftovers(uid, root)
        if why is None and runs >= max_runs:
            why = 'served %d runs' % runs
        if why is not None:
            _write_line({'recycle': why})
            return


def _owned_paths(uid):
    """The topmost entries owned by uid under the shared writable places,
    as far as uid can read them, and whether the walk stopped at
    SWEEP_MAX_ENTRIES (then there may be more)."""
    import stat as st_mod
    found = []
    budget = SWEEP_MAX_ENTRIES
    stack = [(p, 0) for p in SHARED_WRITABLE]
    while stack and budget > 0:
        d, depth = stack.pop()
        try:
            with os.scandir(d) as it:
                entries = list(it)
        except OSError:
            continue
        for e in entries:
            budget -= 1
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_uid == uid:
                found.append(e.path)
            elif st_mod.S_ISDIR(st.st_mode) and depth < SWEEP_MAX_DEPTH:
                stack.append((e.path, depth + 1))
    return found, budget <= 0


def _remove_owned(paths):
    """Removes paths (files or trees of the caller), whatever their modes."""
    def fix(func, path, _exc):
        # a directory the run made unreadable or unwritable: its owner may
        # change that
        try:
            os.chmod(os.path.dirname(path), 0o700)
            if os.path.isdir(path) and not os.path.islink(path):
                os.chmod(path, 0o700)
            func(path)
        except OSError:
            pass
    left = []
    for p in paths:
        try:
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
                shutil.rmtree(p, onerror=fix)
            else:
                os.unlink(p)
        except (OSError, RecursionError):
            pass
        if os.path.lexists(p):
            left.append(p)
    if left:
        # deeper than Python recurses: the tools take any depth
        import subprocess
        subprocess.run(['chmod', '-R', 'u+rwx', '--'] + left, stderr=subprocess.DEVNULL,
                       check=False)
        subprocess.run(['rm', '-rf', '--'] + left, stderr=subprocess.DEVNULL, check=False)


def _ipc_table(kind):
    """The rows of /proc/sysvipc/KIND as dicts (column name -> text), and
    the name of its id column."""
    try:
        with open('/proc/sysvipc/' + kind) as f:
            lines = f.read().splitlines()
    except OSError:
        return [], None
    if not lines:
        return [], None
    cols = lines[0].split()
    return [dict(zip(cols, line.split())) for line in lines[1:]], cols[1]


def _ipc_uids():
    uids = set()
    for kind in ('shm', 'sem', 'msg'):
        rows, _ = _ipc_table(kind)
        for row in rows:
            for k in ('uid', 'cuid'):
                try:
                    uids.add(int(row[k]))
                except (KeyError, ValueError):
                    pass
    return uids


def _sweep_ipc(uid):
    """Removes the System V shared memory segments, semaphore sets and
    message queues uid made or owns (the caller is uid: IPC_RMID needs the
    owner or the creator). ctypes is loaded only when there is one."""
    mine = []
    for kind in ('shm', 'sem', 'msg'):
        rows, id_col = _ipc_table(kind)
        for row in rows:
            try:
                if uid in (int(row['uid']), int(row['cuid'])):
                    mine.append((kind, int(row[id_col])))
            except (KeyError, ValueError):
                continue
    if not mine:
        return
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    ipc_rmid = 0
    for kind, ipc_id in mine:
        if kind == 'shm':
            libc.shmctl(ipc_id, ipc_rmid, None)
        elif kind == 'sem':
            libc.semctl(ipc_id, 0, ipc_rmid)
        else:
            libc.msgctl(ipc_id, ipc_rmid, None)


def _sweep(uid):
    """Forks a child that becomes uid and removes everything uid left behind:
    its entries in the shared writable places and its System V IPC objects.
    As uid it can remove only what the run itself could have removed, so a
    link another run plants cannot turn the sweep against anything else.
    Returns the child's pid (0 when the fork failed)."""
    try:
        pid = os.fork()
    except OSError:
        return 0
    if pid:
        return pid
    try:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        os.chdir('/')
        for _ in range(SWEEP_MAX_PASSES):
            found, more = _owned_paths(uid)
            _remove_owned(found)
            if not more:
                break
        _sweep_ipc(uid)
    except BaseException:  # noqa: B902 - a child must never return to the zygote
        pass
    os._exit(0)


def _needs_sweep(uid):
    """Whether uid left anything for _sweep to remove. The zygote looks as
    root (lstat only, no link followed, nothing changed), which sees at least
    what uid itself can: when it finds nothing, neither would the sweep, and
    the fork of a sweep child is spared (most runs leave nothing outside
    their temp dir)."""
    found, more = _owned_paths(uid)
    return bool(found) or more or uid in _ipc_uids()


def _live_uids():
    """The real uids of the box's processes (a run of an earlier zygote may
    still be going: the host ends and sweeps it)."""
    uids = set()
    for name in os.listdir('/proc'):
        if not name.isdigit():
            continue
        try:
            with open('/proc/%s/status' % name) as f:
                for line in f:
                    if line.startswith('Uid:'):
                        uids.add(int(line.split()[1]))
                        break
        except (OSError, ValueError, IndexError):
            continue
    return uids


def _sweep_all():
    """At start: what runs of an earlier zygote (a server restart, a crash)
    left, for every uid but root's and those with a live process; waits for
    the sweeps."""
    uids = _ipc_uids()
    for place in SHARED_WRITABLE:
        try:
            with os.scandir(place) as it:
                for e in it:
                    try:
                        uids.add(e.stat(follow_symlinks=False).st_uid)
                    except OSError:
                        pass
        except OSError:
            pass
    uids.discard(0)
    uids -= _live_uids()
    for uid in sorted(uids):
        pid = _sweep(uid)
        if pid:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass


def _remove_dead_zygote_dirs(base):
    """Socket directories of earlier zygotes (killed before they could
    remove theirs) whose socket no longer answers."""
    import socket
    try:
        entries = list(os.scandir(base))
    except OSError:
        return
    for e in entries:
        try:
            if (not e.name.startswith('agentbox-zygote-') or not e.is_dir(follow_symlinks=False) or
                    e.stat(follow_symlinks=False).st_uid != 0):
                continue
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(os.path.join(e.path, 'sock'))
                continue  # a live zygote
            except (ConnectionRefusedError, FileNotFoundError):
                pass
            finally:
                s.close()
            shutil.rmtree(e.path, ignore_errors=True)
        except OSError:
            continue


def _zygote(argv):
    import select
    import socket
    for name in ZYGOTE_PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass
    _trusted_prefixes()
    # What the preloads made goes to the collector's permanent generation
    # here, once: a worker's own collection before it serves (_worker) then
    # walks only what it made itself, instead of touching, and copying out
    # of this process page by page, every object of the preloads.
    import gc
    gc.collect()
    gc.freeze()
    js_argv = [_zygote_arg(argv, '--js-runtime'), _zygote_arg(argv, '--js-runner')]
    if not all(js_argv):
        js_argv = None
    base = os.environ.get('TMPDIR') or '/tmp'
    _sweep_all()
    _remove_dead_zygote_dirs(base)
    sockdir = tempfile.mkdtemp(prefix='agentbox-zygote-', dir=base)
    os.chmod(sockdir, 0o700)
    path = os.path.join(sockdir, 'sock')
    ls = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    ls.bind(path)
    os.chmod(path, 0o600)
    ls.listen(256)
    # Children are reaped by the kernel; the host learns of their end from the
    # connection and from their cgroup.
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    _write_line({'zygote': {'socket': path, 'pid': os.getpid()}})
    dirs = {}  # uid -> the temp dir of its run
    inbuf = b''
    try:
        while True:
            r, _, _ = select.select([ls, 0], [], [])
            if 0 in r:
                # {"ended": UID}: the host has ended the run's processes; its
                # temp dir goes (a killed run could not remove it itself), and
                # the sweep removes whatever else the uid left.
                data = os.read(0, 65536)
                if not data:
                    break  # the host is gone
                inbuf += data
                while b'\n' in inbuf:
                    line, inbuf = inbuf.split(b'\n', 1)
                    try:
                        ended = json.loads(line.decode('utf-8')).get('ended')
                    except (ValueError, AttributeError, TypeError):
                        ended = None
                    if (not isinstance(ended, int) or isinstance(ended, bool) or
                            not 0 < ended < 2 ** 31):
                        continue
                    d = dirs.pop(ended, None)
                    if d:
                        shutil.rmtree(d, ignore_errors=True)
                    if _needs_sweep(ended):
                        _sweep(ended)
            if ls not in r:
                continue
            try:
                conn, _ = ls.accept()
            except OSError:
                continue
            try:
                conn.settimeout(5)
                buf = b''
                while b'\n' not in buf and len(buf) < HELLO_MAX:
                    chunk = conn.recv(HELLO_MAX)
                    if not chunk:
                        break
                    buf += chunk
                hello = json.loads(buf.split(b'\n', 1)[0].decode('utf-8'))
                uid = hello.get('uid')
                lang = hello.get('lang')
                if (not isinstance(uid, int) or isinstance(uid, bool) or not 0 < uid < 2 ** 31 or
                        lang not in ('python', 'js') or (lang == 'js' and not js_argv)):
                    raise ValueError('bad hello')
                conn.settimeout(None)
            except (OSError, ValueError, AttributeError):
                conn.close()
                continue
            try:
                tmpdir = _make_tmpdir(uid)
            except OSError:
                conn.close()
                continue
            old = dirs.pop(uid, None)
            if old:
                shutil.rmtree(old, ignore_errors=True)
            dirs[uid] = tmpdir
            pid = os.fork()
            if pid == 0:
                ls.close()
                _zygote_child(conn, hello, tmpdir, js_argv)
            conn.close()
    finally:
        try:
            os.unlink(path)
            os.rmdir(sockdir)
        except OSError:
            pass


def main():
    global _tmpdir
    if '--zygote' in sys.argv:
        _zygote(sys.argv)
        return
    uid = _parse_uid(sys.argv)
    _trusted_prefixes()
    if '--worker' in sys.argv:
        _worker_prepare()
    tmpdir = _tmpdir = _setup_process(uid)
    if '--worker' in sys.argv:
        _tmpdir = None
        try:
            _worker(tmpdir, max(1, _int_arg(sys.argv, '--max-runs', DEFAULT_MAX_RUNS)))
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
        os._exit(0)
    _serve_run(tmpdir)


if __name__ == '__main__':
    try:
        main()
    except SystemExit:
        raise
    except BaseException as e:  # the runner itself failed: still answer
        _fail('Runner error: %s' % e)
