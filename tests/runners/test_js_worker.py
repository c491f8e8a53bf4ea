#!/usr/bin/env python3
"""The JS runner's worker mode (runners/js/runner.js --worker, issue 29):
every run in a fresh realm, nothing of one run seen by the next, escapes
of the realm refused or recycled, recycling on leftovers and after
--max-runs. On Bun and on Node.

The test is the host (tests/runners/js_worker_host.py): it drives workers
over pipes, run after run in the same process. Each check runs its runs in
ONE worker and fails when the second run sees the first, unless the worker
recycled in between (then the next run starts in a new process).

`--naive` runs the same checks against tests/runners/js_worker_naive.js, a
worker that shares one realm between runs: those checks must fail there
(that is how they were shown able to fail). Python 3 stdlib only; TAP.
"""

import ctypes
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_python_runner import REPO, Tap, unused_uid  # noqa: E402
from js_worker_host import WorkerHost  # noqa: E402

JS_DIR = os.path.join(REPO, 'runners', 'js')
JS_RUNNER = os.environ.get('AGENTBOX_JS_RUNNER') or os.path.join(JS_DIR, 'runner.js')  # another runner.js to try
NAIVE = os.path.join(REPO, 'tests', 'runners', 'js_worker_naive.js')
BUN_PKG = os.path.join(JS_DIR, 'node_modules', '@oven', 'bun-linux-x64', 'bin', 'bun')


class Seq(object):
    """Runs in sequence in one worker; after a recycle, the next run gets a new one."""

    def __init__(self, host):
        self.host = host
        self.w = None
        self.outs = []

    def run(self, code, uid=None, **kw):
        if self.w is None or self.w.dead:
            self.w = self.host.new_worker(uid)
        o = self.host.run(code, worker=self.w, **kw)
        self.outs.append(o)
        return o

    def close(self):
        if self.w is not None and not self.w.dead:
            self.w.p.stdin.close()
            self.w.wait()


def pair(host, first, second, **kw):
    """Run first, then second, in one worker (a new one if the first recycled)."""
    s = Seq(host)
    a = s.run(first, **kw)
    b = s.run(second, **kw)
    s.close()
    return a, b


def desc(*outs):
    return '\n---\n'.join('after=%r pid=%r\n%s' % (getattr(o, 'after', None), o.pid, o.describe()) for o in outs)


ESCAPES = {
    'this-ctor': 'return this.constructor.constructor("return process")()',
    'proto-ctor': 'return ({}).__proto__.constructor.constructor("return process")()',
    'helper-error': 'try { SystemHelper.fs.readFile("/etc/passwd") } catch (e) { '
                    'return e.constructor.constructor("return process")() }',
    'helper-error-proto': 'try { SystemHelper.fs.readFile("../x") } catch (e) { '
                          'return Object.getPrototypeOf(e).constructor.constructor("return process")() }',
    'http-error': 'try { await httpRequest("http://e/") } catch (e) { '
                  'return e.constructor.constructor("return process")() }',
    'host-url-error': 'try { new URL("::bad") } catch (e) { return e.constructor.constructor("return process")() }',
    'host-fn-ctor': 'return URL.constructor("return process")()',
    'host-fn-proto': 'return Object.getPrototypeOf(Buffer.from("x")).constructor.constructor("return process")()',
    'host-fn-getproto': 'return Object.getPrototypeOf(URL).constructor("return process")()',
    'module-fn': 'return require("url").parse.constructor("return process")()',
    'helper-fn': 'return SystemHelper.fs.readFile.constructor("return process")()',
    'console-fn': 'return console.log.constructor("return process")()',
    'timer-fn': 'return setTimeout.constructor("return process")()',
    'process-ctor': 'return process.constructor.constructor("return process")()',
    'async-ctor': 'return (async () => {}).constructor("return process")()',
    'lodash-template': 'return require("lodash").template("<%= process %>")()',
    'timer-this': 'return await new Promise((r) => setTimeout(function () { r(this) }, 1))',
    'stack-frames': 'Error.prepareStackTrace = (e, cs) => cs; const cs = await new Promise((r) => setTimeout(() => '
                    'r(new Error().stack), 1)); for (const c of Array.isArray(cs) ? cs : []) { for (const x of '
                    '[c.getThis && c.getThis(), c.getFunction && c.getFunction()]) { if (x) { try { const p = '
                    'x.constructor.constructor("return process")(); if (p) return p } catch (e) {} } } } return null',
    'inspect-custom': 'let got = null; const o = {[Symbol.for("nodejs.util.inspect.custom")](d, opts, insp) { '
                      'got = [opts, insp]; return "x" }}; o.self = o; console.log(o); for (const x of got || []) { '
                      'if (x) { try { const p = x.constructor.constructor("return process")(); if (p) return p } '
                      'catch (e) {} } } return null',
    'callback-caller': 'return await new Promise((r) => setTimeout(function f() { r(f.caller) }, 1))',
}


def check_escapes(tap, L, host):
    """An escape's success: an object of the worker's realm that is a process
    (not the run's own stand-in) or the worker's global object."""
    # The run's own process is a plain object of its realm; the worker's (or any
    # real one) is not, nor is any global object but the run's own.
    probe = ('async function main() { const p = await (async () => { %s })(); '
             'return p && typeof p === "object" && ((typeof p.cwd === "function" && (p !== process || '
             'Object.getPrototypeOf(p) !== Object.prototype)) || (typeof p.setTimeout === "function" && '
             'p !== globalThis)) ? "ESCAPED" : "no: " + typeof p }')
    for name, body in sorted(ESCAPES.items()):
        s = Seq(host)
        o = s.run(probe % body, on_http=lambda req, n, out: {'http_error': 'refused'})
        nxt = s.run('function main() { return [typeof process.binding, typeof process.dlopen, '
                    'Object.getPrototypeOf(process) === Object.prototype] }')
        s.close()
        tap.ok(o.result is not None and o.ret != 'ESCAPED', L + 'escape %s: refused or harmless' % name, desc(o))
        tap.eq(nxt.ret, ['undefined', 'undefined', True],
               L + 'escape %s: the next run still has its own process stand-in' % name, desc(o, nxt))


def check_runtime(tap, label, argv, tmp_root, naive):
    L = label + ': '
    env = dict(os.environ, TMPDIR=tmp_root)
    host = WorkerHost(argv, env=env)

    # A global of run 1 is absent in run 2.
    a, b = pair(host, 'globalThis.leak = 42; var leakVar = 1; function main() { return 1 }',
                'function main() { return [typeof leak, typeof globalThis.leakVar, typeof leakVar] }')
    tap.eq(b.ret, ['undefined', 'undefined', 'undefined'], L + 'a global set by run 1 is absent in run 2', desc(a, b))
    tap.ok((a.after == {'ready': True} and b.pid == a.pid), L + 'run 2 ran in the same worker', desc(a, b))

    # Patched builtins of run 1 are not seen by run 2.
    a, b = pair(host, 'Array.prototype.map = function () { return "patched" }; Object.prototype.polluted = 1; '
                'String.prototype.trim = () => "T"; Math.max = () => -1; function main() { return 1 }',
                'async function main() { await delay(1); return {map: [1, 2].map((x) => x * 2), '
                'json: JSON.stringify({a: 1}), polluted: ({}).polluted === undefined, trim: " a ".trim(), '
                'max: Math.max(1, 2)} }')
    tap.eq(b.ret, {'map': [2, 4], 'json': '{"a":1}', 'polluted': True, 'trim': 'a', 'max': 2},
           L + 'builtins patched by run 1 (Array.prototype.map, Object.prototype, String.prototype.trim, '
           'Math.max) are intact in run 2', desc(a, b))
    a, b = pair(host, 'JSON.stringify = () => "\\"x\\""; JSON.parse = () => 0; Promise.prototype.then = '
                'function () { return 7 }; function main() { return {a: 1} }',
                'async function main() { await delay(1); return {map: [1, 2].map((x) => x * 2), '
                'json: JSON.stringify({a: 1}), polluted: ({}).polluted === undefined, trim: " a ".trim(), '
                'max: Math.max(1, 2)} }')
    tap.eq((a.ret, b.ret), ({'a': 1}, {'map': [2, 4], 'json': '{"a":1}', 'polluted': True, 'trim': 'a', 'max': 2}),
           L + 'JSON and Promise.prototype.then patched by run 1: its result is right, run 2 unaffected', desc(a, b))

    # A mutated allowed module of run 1 is not seen by run 2 (own copy per run, or a recycle).
    a, b = pair(host, 'const _ = require("lodash"); _.map = () => "evil"; _.VERSION = "evil"; '
                'const d = require("dayjs"); d.prototype.format = () => "evil"; d.extend((o, c) => { '
                'c.prototype.evil = 1 }); require("url").parse = () => "evil"; require("querystring").stringify = '
                '() => "evil"; function main() { return 1 }',
                'const _ = require("lodash"); const d = require("dayjs"); function main() { return [_.map([1], '
                '(x) => x + 1), _.VERSION, d("2024-01-01").format("YYYY"), typeof d().evil, require("url")'
                '.parse("http://h:8/").port, require("querystring").stringify({a: 1})] }')
    tap.eq(b.ret, [[2], '4.17.21', '2024', 'undefined', '8', 'a=1'],
           L + 'allowed modules mutated by run 1 (lodash, dayjs, url, querystring) are intact in run 2', desc(a, b))

    # Objects of the worker's realm a run reaches (URL, Buffer): changed -> recycle (or not seen).
    a, b = pair(host, 'URL.prototype.evil = 1; Buffer.prototype.toString = () => "evil"; '
                'Object.getPrototypeOf(Object.getPrototypeOf(Buffer.from(""))).polluted = 1; function main() { '
                'return 1 }', 'function main() { return [typeof new URL("http://x/").evil, Buffer.from("ok")'
                '.toString(), typeof Buffer.from("").polluted] }')
    tap.eq(b.ret, ['undefined', 'ok', 'undefined'], L + 'changes to the worker\'s URL/Buffer are not seen by run 2',
           desc(a, b))
    tap.ok(a.after == {'recycle': "the run changed the worker's objects"},
           L + 'a run that changes an object of the worker recycles it', desc(a))

    # The realm's global object: its constructor and prototype are the realm's own
    # (a vm context's global falls back on the worker's Object.prototype unless made
    # from a null-prototype object), so run 1 cannot change what run 2 reaches.
    a, b = pair(host, 'function main() { for (const p of [globalThis.constructor && globalThis.constructor.prototype, '
                'Object.getPrototypeOf(globalThis), (() => { try { return globalThis.__proto__ } catch (e) { '
                'return null } })()]) { if (p) p.agentboxLeak = 1 } return 1 }',
                'function main() { return [Buffer.from("x").toJSON().agentboxLeak, new URL("http://x/").agentboxLeak, '
                '({}).agentboxLeak] }')
    tap.eq(b.ret, [None, None, None], L + 'the global object of run 1 leads to nothing run 2 reaches', desc(a, b))

    # console.log of a value JSON cannot take is inspected by the worker, which hands a
    # custom inspect function objects of its own: a change through them recycles.
    s = Seq(host)
    a = s.run('function main() { let got = null; const o = {[Symbol.for("nodejs.util.inspect.custom")](d, opts) { '
              'got = opts; return "x" }}; o.self = o; console.log(o); const t = got && typeof got === "object" && '
              '(Object.getPrototypeOf(got) || (typeof got.stylize === "function" && Object.getPrototypeOf('
              'got.stylize))); if (t) t.agentboxPolluted = 1; return !!t }')
    s.close()
    tap.ok(a.ret is False or a.after == {'recycle': "the run changed the worker's objects"},
           L + 'the worker\'s objects reached through a custom inspect function: changed -> recycle', desc(a))

    # A timer left pending by run 1 never fires into run 2.
    a, b = pair(host, 'function main() { setTimeout(() => httpRequest("http://leak-t/"), 200); setInterval(() => '
                'httpRequest("http://leak-i/"), 30); setImmediate(() => httpRequest("http://leak-m/")); return 1 }',
                'async function main() { await delay(500); console.log("run2"); return 2 }')
    tap.eq((b.ret, b.log, b.http, b.protocol_errors), (2, 'run2', [], []),
           L + 'timers left pending by run 1 never fire into run 2', desc(a, b))
    tap.ok(a.after == {'ready': True}, L + 'the pending timers were cancelled (no recycle needed)', desc(a))

    # Something of the run still active after its result: recycle.
    a, b = pair(host, 'async function main() { (async () => { for (let i = 0; i < 20; i++) await null; '
                'await httpRequest("http://late/") })(); return 1 }',
                'async function main() { await delay(50); return 2 }')
    tap.ok(a.after == {'recycle': 'the run was still active after its result'},
           L + 'a run still active after its result recycles the worker', desc(a))
    tap.eq((a.ret, b.ret, b.http), (1, 2, []), L + '... and its late request reaches no run', desc(a, b))

    # Each run has its own temp dir, removed after it.
    a, b = pair(host, 'function main() { SystemHelper.fs.writeFile("f.txt", "x"); return SystemHelper.fs.tmpDir }',
                'function main() { return [SystemHelper.fs.tmpDir, SystemHelper.fs.exists("f.txt"), '
                'process.env.TMPDIR === SystemHelper.fs.tmpDir, process.cwd() === SystemHelper.fs.tmpDir] }')
    d1 = a.ret or ''
    tap.ok(b.ret and b.ret[0] != d1 and b.ret[1:] == [False, True, True] and not os.path.exists(d1),
           L + 'every run gets a fresh temp dir (its cwd and $TMPDIR), removed after it', desc(a, b))

    check_escapes(tap, L, host)

    # --tmpdir-root DIR (the zygote's form): run dirs under DIR, not $TMPDIR.
    root2 = tempfile.mkdtemp(prefix='root2-', dir=tmp_root)
    rh = WorkerHost(argv, env=env, extra=['--tmpdir-root', root2])
    o = rh.run('function main() { return [SystemHelper.fs.tmpDir, process.cwd()] }')
    rh.close()
    t = (o.ret or [''])[0]
    tap.ok(t.startswith(os.path.realpath(root2) + '/sandbox_') and o.ret[1] == t and os.listdir(root2) == [],
           L + '--tmpdir-root DIR: the run dir is made under DIR and removed after the run', desc(o))

    # After N runs: recycle.
    mh = WorkerHost(argv, env=env, extra=['--max-runs', '3'])
    s = Seq(mh)
    outs = [s.run('function main(v) { return v.i }', variables={'i': i}) for i in range(3)]
    s.close()
    tap.eq([(o.ret, o.after) for o in outs], [(0, {'ready': True}), (1, {'ready': True}), (2, {'recycle': 'max-runs'})],
           L + '--max-runs 3: the third run recycles the worker', desc(*outs))
    tap.ok((len({o.pid for o in outs}) == 1 and outs[2].rc == 0),
           L + '--max-runs: one process for the three runs, exit 0 after the recycle', desc(*outs))

    if os.geteuid() != 0:
        tap.skip(L + 'files left outside the temp dir recycle the worker', 'not root (needs --uid)')
        return
    # Files (or IPC objects) of the run's uid outside its temp dir: recycle.
    uid = unused_uid()
    uh = WorkerHost(argv, env=env)
    planted = []

    def plant(where):
        def cb(req, n, out):
            p = os.path.join(where, 'agentbox-js-worker-test-%d-%d' % (os.getpid(), len(planted)))
            with open(p, 'w') as f:
                f.write('x')
            os.chown(p, uid, uid)
            planted.append(p)
            return {'http_result': {'status': 200, 'statusText': 'OK', 'headers': {}, 'data': ''}}
        return cb
    code = 'async function main() { await httpRequest("http://sync/"); return process.getuid() }'
    try:
        for where in ('/tmp', '/dev/shm', '/var/tmp'):
            if not os.path.isdir(where):
                continue
            s = Seq(uh)
            clean = s.run('function main() { return process.getuid() }', uid=uid)
            left = s.run(code, uid=uid, on_http=plant(where))
            s.close()
            tap.eq(clean.after, {'ready': True}, L + 'a clean run (--uid) does not recycle', desc(clean))
            tap.ok((left.ret == uid and left.after == {'recycle': 'the run left files or IPC objects'}),
                   L + 'a file of the run\'s uid left in %s recycles the worker' % where, desc(left))
        s = Seq(uh)
        left = s.run(code, uid=uid, on_http=ipc_plant(uid, planted))
        s.close()
        tap.ok(left.after == {'recycle': 'the run left files or IPC objects'},
               L + 'a System V shared memory segment of the run\'s uid recycles the worker', desc(left))
    finally:
        for p in planted:
            if isinstance(p, int):
                ctypes.CDLL(None, use_errno=True).shmctl(p, 0, None)  # IPC_RMID
            else:
                os.unlink(p)


def ipc_plant(uid, planted):
    """An http callback that makes a SysV shm segment owned by uid (a child as uid creates it)."""
    def cb(req, n, out):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.setgid(uid)
                os.setuid(uid)
                shmid = ctypes.CDLL(None).shmget(0, 4096, 0o1600)  # IPC_PRIVATE, IPC_CREAT|0600
                os.write(w, str(shmid).encode())
            finally:
                os._exit(0)
        os.close(w)
        os.waitpid(pid, 0)
        shmid = int(os.read(r, 64) or b'-1')
        os.close(r)
        if shmid >= 0:
            planted.append(shmid)
        return {'http_result': {'status': 200, 'statusText': 'OK', 'headers': {}, 'data': ''}}
    return cb


def main():
    tap = Tap()
    naive = '--naive' in sys.argv
    if not os.path.isdir(os.path.join(JS_DIR, 'node_modules', 'lodash')):
        tap.skip_all('runners/js/node_modules not installed (scripts/npm-deps.sh installs it)')
    t0 = time.monotonic()
    bun = BUN_PKG if os.access(BUN_PKG, os.X_OK) else shutil.which('bun')
    node = shutil.which('node')
    tmp_root = tempfile.mkdtemp(prefix='runner-worker-test-')
    os.chmod(tmp_root, 0o755)
    script = NAIVE if naive else JS_RUNNER
    try:
        for label, rt in (('bun', bun), ('node', node)):
            if rt:
                check_runtime(tap, label, [rt, script], tmp_root, naive)
            else:
                tap.skip(label + ' runtime', label + ' is not installed')
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    elapsed = time.monotonic() - t0
    tap.ok(elapsed < 60, 'the suite ran in under 60 s (%.1fs)' % elapsed)
    tap.done()


if __name__ == '__main__':
    main()
