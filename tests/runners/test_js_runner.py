#!/usr/bin/env python3
"""Compatibility suite of the in-box JS runner (runners/js/runner.js), run
once on Bun (runners/js/node_modules/@oven/bun-linux-x64, or bun on PATH) and
once on Node.

The test is the host: it starts the runner as a local process (no server, no
box), speaks the JSON-lines protocol of runners/README.md, answers the
runner's http lines itself and kills a runner that overruns its deadline.
Python 3 stdlib only; prints TAP. The host helpers live in
test_python_runner.py.
"""

import base64
import hashlib
import hmac
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_python_runner import (REPO, RunnerHost, Tap, canned_http, common_protocol_checks,  # noqa: E402
                                make_sync, run_all, unused_uid)
from js_worker_host import WorkerHost  # noqa: E402

JS_DIR = os.path.join(REPO, 'runners', 'js')
JS_RUNNER = os.path.join(JS_DIR, 'runner.js')
BUN_PKG = os.path.join(JS_DIR, 'node_modules', '@oven', 'bun-linux-x64', 'bin', 'bun')
ALLOWED = ['lodash', 'dayjs', 'moment', 'uuid', 'crypto-js', 'qs', 'url', 'querystring']


def encode_uri_component(s):
    return urllib.parse.quote(s, safe="-_.!~*'()")


def ref_hmac_js(alg, secret, ts):
    sig = hmac.new(secret.encode(), (ts + '\n' + secret).encode(), alg).digest()
    return encode_uri_component(base64.b64encode(sig).decode())


def js_cases(tmp_root, sync):
    c = []

    def add(name, code, **kw):
        c.append((name, dict(code=code, **kw)))

    # calling conventions, return values, log
    add('main-variables', 'function main(variables) { return variables.a + variables.b }', variables={'a': 1, 'b': 2})
    add('main-destructure', 'function main({name, age}) { return {name, age, next: age + 1} }',
        variables={'name': 'x', 'age': 3})
    add('async-main', 'async function main({a}) { await delay(10); return {a: a * 2} }', variables={'a': 21})
    add('arrow-main', 'const main = async (v) => ({keys: Object.keys(v).sort()})', variables={'b': 1, 'a': 2})
    add('returns', 'function main() { return {u: undefined, n: null, big: 12345678901234567890n, arr: [undefined, 1], '
        'd: new Date(0), nan: NaN, s: "你好", nested: {x: [1, {y: true}]}} }')
    add('return-undefined', 'function main() {}')
    add('return-string', 'async function main() { return "plain" }')
    add('log', 'function main() { console.log("hi", 1, true); console.log({a: 1}, [1, 2], null, undefined); '
        'console.info("info"); console.warn("warn"); console.error("err"); return 1 }')
    add('log-stdout', 'function main() { process.stdout.write("direct\\n"); return 1 }')
    add('log-circular', 'function main() { const a = {}; a.self = a; console.log(a); return 1 }')
    add('return-circular', 'function main() { const a = {}; a.self = a; return a }')
    # helpers
    add('count-token', 'function main() { return [countToken("abcde"), SystemHelper.countToken("abcd"), '
        'countToken(""), countToken(12345)] }')
    add('base64', 'function main() { return [strToBase64("hello"), SystemHelper.strToBase64("你好", '
        '"data:text/plain;base64,"), strToBase64("x", "p:")] }')
    add('hmac', 'function main() { return [createHmac("sha256", "secret-key"), SystemHelper.createHmac("sha1", '
        '"k/+="), createHmac("md5", "abc")] }')
    add('delay-ok', 'async function main() { const t = Date.now(); await delay(200); await SystemHelper.delay(0); '
        'return Date.now() - t }')
    add('delay-limit', 'async function main() { await SystemHelper.delay(20000); return 1 }')
    add('delay-limit-global', 'async function main() { await delay(10001) }')
    # fs
    add('fs', 'function main() { const fs = SystemHelper.fs; fs.writeFile("a.txt", "hello"); fs.mkdir("d/e"); '
        'fs.writeFile("d/e/f.txt", "deep"); return {read: fs.readFile("a.txt"), deep: fs.readFile("d/e/f.txt"), '
        'ls: fs.readdir("."), lsd: fs.readdir("d"), ex: fs.exists("a.txt"), nex: fs.exists("nope"), '
        'tmp: fs.tmpDir} }')
    escapes = ['SystemHelper.fs.readFile("../../etc/passwd")', 'SystemHelper.fs.readFile("/etc/passwd")',
               'SystemHelper.fs.writeFile("../../../tmp/evil.txt", "hacked")', 'SystemHelper.fs.readdir("..")',
               'SystemHelper.fs.exists("../x")', 'SystemHelper.fs.mkdir("a/../../b")']
    for i, e in enumerate(escapes):
        add('fs-escape-%d' % i, 'function main() { return %s }' % e)
    add('fs-symlink', 'async function main() { const fs = SystemHelper.fs; await httpRequest("http://sync" + '
        'fs.tmpDir); const out = {}; for (const p of ["link/passwd", "plink", "sub/up/passwd"]) { try { out[p] = '
        'fs.readFile(p) } catch (e) { out[p] = "ERR " + e.message } } for (const p of ["link/new.txt", "plink"]) '
        '{ try { fs.writeFile(p, "x"); out["w:" + p] = "written" } catch (e) { out["w:" + p] = "ERR " + e.message '
        '} } return out }', on_http=sync('fs-symlink'))
    add('disk-quota', 'function main() { const c = "x".repeat(512 * 1024); SystemHelper.fs.writeFile("a.txt", c); '
        'SystemHelper.fs.writeFile("b.txt", c); SystemHelper.fs.writeFile("c.txt", c); return 1 }',
        limits={'timeoutMs': 10000, 'memoryMB': 64, 'diskMB': 1})
    # http
    add('http', 'async function main() { const r = await httpRequest("https://api.example.com/x?y=1", {method: '
        '"post", headers: {"X-A": 1}, body: {k: [1, "二"]}, timeout: 3000}); const r2 = await '
        'SystemHelper.httpRequest("http://example.com/", {method: "PUT", body: "raw", timeout: 60000, headers: '
        '{"content-type": "text/plain"}}); const r3 = await httpRequest("http://example.com/g"); '
        'return {r, r2, r3, parsed: JSON.parse(r.data)} }')
    add('http-error', 'async function main() { try { await httpRequest("http://10.0.0.1/") } catch (e) { '
        'return {err: e.message, isError: e instanceof Error} } }',
        on_http=lambda req, n: {'http_error': 'Request to private/internal network is not allowed'})
    add('http-cap', 'async function main() { let n = 0; try { for (let i = 0; i < 10; i++) { await '
        'httpRequest("http://example.com/" + i); n++ } } catch (e) { return {n, err: e.message} } return {n} }',
        max_requests=3)
    add('http-cap-default', 'async function main() { let n = 0; try { for (let i = 0; i < 40; i++) { await '
        'httpRequest("http://example.com/" + i); n++ } } catch (e) { return {n, err: e.message} } return {n} }')
    add('http-parallel', 'async function main() { const rs = await Promise.all([1, 2, 3].map((i) => '
        'httpRequest("http://example.com/" + i))); return rs.map((r) => JSON.parse(r.data).url) }')
    # messages
    add('empty', '')
    add('blank', '  \n\t ')
    add('no-main', 'const x = 1; function helper() { return 1 }')
    add('throw', 'function main() { throw new Error("boom") }')
    add('throw-string', 'async function main() { throw "plain string" }')
    add('syntax', 'function main( { return 1 }')
    add('timeout-pending', 'async function main() { await new Promise(() => {}) }',
        limits={'timeoutMs': 700, 'memoryMB': 64, 'diskMB': 10})
    add('host-kill-busy', 'function main() { for (;;) {} }', limits={'timeoutMs': 500, 'memoryMB': 64,
                                                                       'diskMB': 10}, deadline=2.0)
    # modules
    add('modules', 'const _ = require("lodash"); const dayjs = require("dayjs"); const moment = require("moment"); '
        'const {v4, validate} = require("uuid"); const CryptoJS = require("crypto-js"); const qs = require("qs"); '
        'const url = require("url"); const querystring = require("querystring");\n'
        'function main() { return {sum: _.sum([1, 2, 3]), chunk: _.chunk([1, 2, 3, 4], 2), merged: _.merge({a: '
        '{b: 1}}, {a: {c: 2}}), clone: _.cloneDeep({a: [1, {b: 2}]}), plain: _.isPlainObject({}), d: '
        'dayjs("2024-01-01").add(1, "day").format("YYYY-MM-DD"), m: moment("2024-01-01").format("dddd"), '
        'u: validate(v4()), md5: CryptoJS.MD5("a").toString(), sha: CryptoJS.HmacSHA256("m", "k").toString(), '
        'aes: CryptoJS.AES.decrypt(CryptoJS.AES.encrypt("secret", "pw").toString(), "pw").toString(CryptoJS.enc.Utf8), '
        'q: qs.stringify({a: {b: 1}}), qp: qs.parse("a[b]=1&c=2"), u2: new url.URL("http://x/y?z=1").searchParams'
        '.get("z"), parsed: url.parse("http://h:8/p?q=1").port, qs2: querystring.stringify({a: 1, b: "x y"})} }')
    for i, m in enumerate(['fs', 'child_process', 'net', 'http', 'os', 'path', 'node:fs', 'bun:ffi', 'vm',
                           'worker_threads', '../runner.js', 'lodash/fp']):
        add('require-%d' % i, 'function main() { require(%s); return "LOADED" }' % json.dumps(m))
    bypasses = {
        'constructor': 'return ({}).constructor.constructor("return process")()',
        'fn-ctor-require': 'return Function("return require")()("child_process")',
        'async-ctor': 'return (async function(){}).constructor("return process")',
        'gen-ctor': 'return (function*(){}).constructor("return process")().next()',
        'proto-ctor': 'return Object.getPrototypeOf(function(){}).constructor("return 1")()',
        'dunder-proto': 'return main.__proto__.constructor("return 1")()',
        'dynamic-import': 'return typeof (await import("child_process")).execSync',
        'dynamic-import-var': 'const m = "fs"; return typeof (await import(m))',
        'eval-import': 'return typeof (await eval("imp" + "ort(\'fs\')"))',
        'process-binding': 'return process.binding("spawn_sync")',
        'process-dlopen': 'return process.dlopen({}, "/lib/x.so")',
        'get-builtin': 'return process.getBuiltinModule("child_process")',
        'main-module': 'return process.mainModule.require("child_process")',
        'require-main': 'return require.main.require("child_process")',
        'require-cache': 'return Object.keys(require.cache)',
        'bun-spawn': 'return Bun.spawn(["id"])',
        'bun-shell': 'return Bun.$`id`',
        'bun-write': 'return Bun.write("/tmp/x", "y")',
        'bun-serve': 'return Bun.serve({port: 0, fetch() {}})',
        'bun-file': 'return Bun.file("/etc/passwd").text()',
        'fetch': 'return fetch("http://127.0.0.1/")',
        'xhr': 'return new XMLHttpRequest()',
        'websocket': 'return new WebSocket("ws://127.0.0.1/")',
        'worker': 'return new Worker("data:,1")',
    }
    for k, body in sorted(bypasses.items()):
        add('bypass-' + k, 'async function main() { %s }' % body)
    add('globals-gone', 'function main() { return [typeof fetch, typeof XMLHttpRequest, typeof WebSocket, '
        'typeof process.binding, typeof process.dlopen, typeof process.getBuiltinModule, typeof globalThis.require, '
        'typeof Function.prototype.constructor("")] }')
    add('env', 'function main() { return {secret: process.env.SECRET_TOKEN === undefined, frozen: '
        'Object.isFrozen(process.env)} }', env={'SECRET_TOKEN': 'hunter2'})
    # temp dir, uid
    add('tmpdir', 'async function main() { await httpRequest("http://sync" + SystemHelper.fs.tmpDir); '
        'return SystemHelper.fs.tmpDir }', env={'TMPDIR': tmp_root}, on_http=sync('tmpdir'))
    add('tmpdir-2', 'function main() { return SystemHelper.fs.tmpDir }', env={'TMPDIR': tmp_root})
    if os.geteuid() == 0:
        add('uid', 'async function main() { SystemHelper.fs.writeFile("mine.txt", "x"); await httpRequest("http://sync"'
            ' + SystemHelper.fs.tmpDir); return [process.getuid(), process.getgid(), SystemHelper.fs.readFile('
            '"mine.txt")] }', uid=unused_uid(), env={'TMPDIR': tmp_root}, on_http=sync('uid'))
    # legacy FastGPT snippets
    add('legacy-filter', 'function main({items}) { const passed = items.filter((x) => x.score >= 60); '
        'return {passed: passed.length, total: items.length} }',
        variables={'items': [{'score': 80}, {'score': 45}, {'score': 90}]})
    return c


def check_runtime(tap, label, argv, tmp_root, worker=False):
    """The suite on one runtime, one process per run or (worker) in warm workers."""
    facts = {}
    # Every run's temp dir under tmp_root, removed at the end (a runner
    # killed by the host cannot remove its own).
    env = dict(os.environ, TMPDIR=tmp_root)
    host = WorkerHost(argv, env=env) if worker else RunnerHost(argv, env=env)
    cases = js_cases(tmp_root, make_sync(facts))
    o = run_all(host, cases, workers=6)
    L = label + ': '
    common_protocol_checks(tap, o, label)

    tap.eq(o['main-variables'].ret, 3, L + 'main(variables)')
    tap.eq(o['main-destructure'].ret, {'name': 'x', 'age': 3, 'next': 4}, L + 'main({a, b}) destructuring')
    tap.eq(o['async-main'].ret, {'a': 42}, L + 'async main is awaited')
    tap.eq(o['arrow-main'].ret, {'keys': ['a', 'b']}, L + 'const main = async (v) => ... works')
    tap.eq(o['returns'].ret, {'n': None, 'big': '12345678901234567890', 'arr': [None, 1],
                              'd': '1970-01-01T00:00:00.000Z', 'nan': None, 's': '你好',
                              'nested': {'x': [1, {'y': True}]}},
           L + 'undefined dropped/null, BigInt stringified, Date as ISO, NaN null', o['returns'].describe())
    tap.eq(o['return-undefined'].result, {'success': True, 'data': {'codeReturn': None, 'log': ''}},
           L + 'main returning undefined -> codeReturn null')
    tap.eq(o['return-string'].ret, 'plain', L + 'a string is returned as it is')
    tap.eq(o['log'].log, 'hi 1 true\n{"a":1} [1,2] null undefined\ninfo\nwarn\nerr',
           L + 'console.log/info/warn/error go into log, objects as JSON', o['log'].describe())
    tap.eq(o['log-stdout'].log, 'direct', L + 'process.stdout.write goes into log, not onto the protocol')
    tap.ok(o['log-circular'].success and 'self' in (o['log-circular'].log or ''),
           L + 'console.log of a circular object does not fail the run', o['log-circular'].describe())
    tap.ok(not o['return-circular'].success and ('circular' in (o['return-circular'].message or '').lower() or
                                                 'cyclic' in (o['return-circular'].message or '').lower()),
           L + 'returning a circular object is a failed run', o['return-circular'].describe())

    tap.eq(o['count-token'].ret, [2, 1, 0, 2], L + 'countToken = ceil(len/4) (global and SystemHelper)')
    tap.eq(o['base64'].ret, [base64.b64encode(b'hello').decode(),
                             'data:text/plain;base64,' + base64.b64encode('你好'.encode()).decode(), 'p:eA=='],
           L + 'strToBase64(str, prefix)')
    now_ms = time.time() * 1000
    why = []
    h = o['hmac'].ret or [{}, {}, {}]
    for (alg, secret), got in zip([('sha256', 'secret-key'), ('sha1', 'k/+='), ('md5', 'abc')], h):
        ts = got.get('timestamp', '')
        if not (isinstance(ts, str) and ts.isdigit() and abs(int(ts) - now_ms) < 120000):
            why.append('bad timestamp %r' % ts)
        elif got != {'timestamp': ts, 'sign': ref_hmac_js(alg, secret, ts)}:
            why.append('%s: got %r want %r' % (alg, got, ref_hmac_js(alg, secret, ts)))
    tap.ok(len(h) == 3 and not why,
           L + 'createHmac(alg, secret) = {timestamp, sign=encodeURIComponent(b64(HMAC(secret, ts+"\\n"+secret)))}',
           '\n'.join(why) + '\n' + o['hmac'].describe())
    tap.ok(o['delay-ok'].success and 180 <= (o['delay-ok'].ret or 0) < 3000, L + 'delay(200) waits about 200 ms',
           o['delay-ok'].describe())
    tap.eq(o['delay-limit'].message, 'Delay must be <= 10000ms', L + 'SystemHelper.delay(20000): Delay must be <= 10000ms')
    tap.eq(o['delay-limit-global'].message, 'Delay must be <= 10000ms', L + 'delay(10001): the same message')

    r = o['fs'].ret or {}
    tap.eq({k: r.get(k) for k in ('read', 'deep', 'ls', 'lsd', 'ex', 'nex')},
           {'read': 'hello', 'deep': 'deep', 'ls': ['a.txt', 'd'], 'lsd': ['e'], 'ex': True, 'nex': False},
           L + 'fs writeFile/readFile/mkdir/readdir/exists', o['fs'].describe())
    tap.ok(isinstance(r.get('tmp'), str) and os.path.basename(r['tmp']).startswith('sandbox_'),
           L + 'fs.tmpDir is the run\'s own sandbox_ temp dir')
    for i in range(6):
        tap.eq(o['fs-escape-%d' % i].message, 'Path traversal not allowed', L + 'fs escape %d refused' % i)
    e = 'ERR Path traversal not allowed'
    tap.eq(o['fs-symlink'].ret, {'link/passwd': e, 'plink': e, 'sub/up/passwd': e, 'w:link/new.txt': e, 'w:plink': e},
           L + 'symlinks out of the temp dir (dir, file, ../..) cannot be read or written', o['fs-symlink'].describe())
    tap.eq(o['disk-quota'].message, 'Disk quota exceeded: 1MB limit', L + 'fs quota: Disk quota exceeded: 1MB limit')

    reqs = o['http'].http
    tap.eq(len(reqs), 3, L + 'three httpRequest calls -> three http lines')
    if len(reqs) == 3:
        tap.eq(reqs[0], {'url': 'https://api.example.com/x?y=1', 'method': 'POST',
                         'headers': {'X-A': '1', 'Content-Type': 'application/json'},
                         'body': json.dumps({'k': [1, '二']}, ensure_ascii=False, separators=(',', ':')),
                         'timeout': 3000}, L + 'http line: method upper-cased, object body as JSON + Content-Type')
        tap.eq(reqs[1], {'url': 'http://example.com/', 'method': 'PUT', 'headers': {'content-type': 'text/plain'},
                         'body': 'raw', 'timeout': 10000}, L + 'http line: string body, timeout clamped to 10000 ms')
        tap.eq(reqs[2], {'url': 'http://example.com/g', 'method': 'GET', 'headers': {}, 'body': None,
                         'timeout': 10000}, L + 'http line: defaults (GET, body null, 10000 ms)')
    r = o['http'].ret or {}
    tap.eq(r.get('r'), canned_http(reqs[0], 0)['http_result'] if reqs else None,
           L + 'httpRequest resolves to {status, statusText, headers, data}')
    tap.eq((r.get('parsed') or {}).get('n'), 0, L + 'data is the response text (JSON.parse works on it)')
    tap.eq(o['http-error'].ret, {'err': 'Request to private/internal network is not allowed', 'isError': True},
           L + 'http_error -> a rejected promise with an Error of the host\'s message')
    tap.eq(o['http-cap'].ret, {'n': 3, 'err': 'Request limit exceeded: max 3 requests per execution'},
           L + 'maxRequests=3: the 4th request fails')
    tap.eq(len(o['http-cap'].http), 3, L + 'maxRequests=3: the host saw 3 http lines')
    tap.eq(o['http-cap-default'].ret, {'n': 30, 'err': 'Request limit exceeded: max 30 requests per execution'},
           L + 'default cap: 30 requests per run')
    tap.eq(o['http-parallel'].ret, ['http://example.com/1', 'http://example.com/2', 'http://example.com/3'],
           L + 'concurrent httpRequest calls are serialised and each gets its own answer')

    tap.eq(o['empty'].result, {'success': False, 'message': 'Code cannot be empty'}, L + 'Code cannot be empty')
    tap.eq(o['blank'].message, 'Code cannot be empty', L + 'whitespace-only code: Code cannot be empty')
    tap.eq(o['no-main'].message, "No 'main' function defined", L + "No 'main' function defined")
    tap.eq(o['throw'].message, 'boom', L + 'a thrown Error\'s message is the run\'s message')
    tap.eq(o['throw-string'].message, 'plain string', L + 'a thrown string is the message')
    tap.ok(o['syntax'].result and not o['syntax'].success, L + 'a syntax error is a failed run', o['syntax'].describe())
    tap.eq(o['timeout-pending'].message, 'Script execution timed out after 700ms',
           L + 'a never-settling main: Script execution timed out after 700ms')
    hk = o['host-kill-busy']
    if worker:
        # The vm's timeout stops the synchronous part; the worker answers and recycles.
        tap.ok((hk.message == 'Script execution timed out after 500ms' and hk.after == {'recycle': 'timeout'})
               or (hk.timed_out and hk.result is None), L + 'a busy main: timed out, the worker recycles',
               hk.describe())
        tap.eq(o['timeout-pending'].after, {'recycle': 'timeout'}, L + 'a timed-out run recycles its worker')
    else:
        tap.ok(hk.timed_out and hk.result is None and hk.rc is not None,
               L + 'a busy loop is left to the host, which kills the process tree', hk.describe())

    r = o['modules'].ret or {}
    tap.eq(r, {'sum': 6, 'chunk': [[1, 2], [3, 4]], 'merged': {'a': {'b': 1, 'c': 2}}, 'clone': {'a': [1, {'b': 2}]},
               'plain': True, 'd': '2024-01-02', 'm': 'Monday', 'u': True,
               'md5': hashlib.md5(b'a').hexdigest(), 'sha': hmac.new(b'k', b'm', 'sha256').hexdigest(),
               'aes': 'secret', 'q': 'a%5Bb%5D=1', 'qp': {'a': {'b': '1'}, 'c': '2'}, 'u2': '1', 'parsed': '8',
               'qs2': 'a=1&b=x%20y'},
           L + 'all 8 allowed modules load and work after the shims', o['modules'].describe())
    for i, m in enumerate(['fs', 'child_process', 'net', 'http', 'os', 'path', 'node:fs', 'bun:ffi', 'vm',
                           'worker_threads', '../runner.js', 'lodash/fp']):
        tap.eq(o['require-%d' % i].message, "Module '%s' is not allowed in sandbox" % m,
               L + "require('%s'): Module '%s' is not allowed in sandbox" % (m, m))
    fn_msg = 'Function constructor is not allowed in sandbox'
    for k in ('constructor', 'fn-ctor-require', 'async-ctor', 'gen-ctor', 'dunder-proto'):
        tap.eq(o['bypass-' + k].message, fn_msg, L + 'bypass %s: %s' % (k, fn_msg))
    tap.ok(not o['bypass-proto-ctor'].success, L + 'Object.getPrototypeOf(fn).constructor cannot build functions',
           o['bypass-proto-ctor'].describe())
    tap.eq(o['bypass-dynamic-import'].message, "Module 'child_process' is not allowed in sandbox",
           L + "import('child_process') refused")
    tap.eq(o['bypass-dynamic-import-var'].message, 'Dynamic import is not allowed in sandbox',
           L + 'import(variable) refused')
    tap.eq(o['bypass-eval-import'].message, "Module 'fs' is not allowed in sandbox", L + 'eval("import(...)") refused')
    for k in ('process-binding', 'process-dlopen', 'get-builtin', 'main-module', 'require-main', 'require-cache',
              'bun-spawn', 'bun-shell', 'bun-write', 'bun-serve', 'bun-file', 'fetch', 'xhr', 'websocket', 'worker'):
        out = o['bypass-' + k]
        tap.ok(out.result is not None and not out.success, L + 'bypass %s fails' % k, out.describe())
    tap.eq(o['globals-gone'].ret is None and o['globals-gone'].message, fn_msg,
           L + 'Function.prototype.constructor is the refusing stub')
    tap.eq(o['env'].ret, {'secret': True, 'frozen': True}, L + 'process.env is scrubbed and frozen')

    tap.ok((o['tmpdir'].ret or '').startswith(os.path.realpath(tmp_root) + '/sandbox_'),
           L + 'the temp dir is made under $TMPDIR', o['tmpdir'].describe())
    tap.eq(facts.get('tmpdir', {}).get('tmp_mode'), 0o700, L + 'the temp dir has mode 0700')
    tap.ok(o['tmpdir'].ret != o['tmpdir-2'].ret, L + 'two runs get two temp dirs')
    if os.geteuid() == 0:
        u = unused_uid()
        f = facts.get('uid', {})
        st = f.get('status', {})
        tap.eq(o['uid'].ret, [u, u, 'x'], L + '--uid: user code runs as UID', o['uid'].describe())
        tap.eq((st.get('Uid', '').split() or [''])[:4], [str(u)] * 4, L + '--uid: real/effective/saved/fs uid dropped',
               repr(f))
        tap.eq((st.get('Gid', '').split() or [''])[:4], [str(u)] * 4, L + '--uid: gid dropped too')
        tap.eq(st.get('Groups', None), '', L + '--uid: no supplementary groups')
        tap.eq((f.get('tmp_uid'), f.get('tmp_gid'), f.get('tmp_mode')), (u, u, 0o700),
               L + '--uid: the temp dir is chowned to UID, mode 0700')
        tap.eq(f.get('mine_uid'), u, L + '--uid: files the run writes belong to UID')
    else:
        tap.skip(L + '--uid drops privileges', 'not root')
    tap.eq(o['legacy-filter'].ret, {'passed': 2, 'total': 3}, L + 'legacy snippet: data filter')

    out = host.run(None, raw_request=b'not json\n')
    tap.ok(out.result and not out.result.get('success') and out.rc == 0,
           L + 'a malformed request line gets a failed result, exit 0', out.describe())
    out = host.run(None, raw_request={'code': 'function main(v) { return v }'})
    tap.eq(out.ret, {}, L + 'variables and limits may be omitted')
    if worker:
        # Only runs that timed out (or ran busy) or hit a limit recycle; the others reuse their worker.
        limited = [o['disk-quota'], o['http-cap'], o['http-cap-default']]
        tap.eq([x.after for x in limited], [{'recycle': 'limit'}] * 3,
               L + 'a run that hit a limit (disk quota, request count) recycles its worker')
        bad = [(r, c[:60]) for r, c in host.recycled if r not in ('timeout', 'limit')]
        tap.eq(bad, [], L + 'no other run recycled its worker')
        tap.ok(host.started < len(cases),
               L + 'workers were reused (%d started for %d runs)' % (host.started, len(cases)))
        rcs = host.close()
        tap.ok(rcs and all(rc == 0 for rc in rcs), L + 'EOF on stdin: every idle worker exits 0', repr(rcs))


def main():
    tap = Tap()
    if not os.path.isdir(os.path.join(JS_DIR, 'node_modules', 'lodash')):
        tap.skip_all('runners/js/node_modules not installed (scripts/npm-deps.sh installs it)')
    t0 = time.monotonic()
    bun = BUN_PKG if os.access(BUN_PKG, os.X_OK) else shutil.which('bun')
    node = shutil.which('node')
    if not bun and not node:
        tap.skip_all('neither bun nor node is installed')
    tmp_root = tempfile.mkdtemp(prefix='runner-test-')
    os.chmod(tmp_root, 0o755)
    try:
        if bun:
            check_runtime(tap, 'bun', [bun, JS_RUNNER], tmp_root)
            check_runtime(tap, 'bun worker', [bun, JS_RUNNER], tmp_root, worker=True)
        else:
            tap.skip('bun runtime', 'bun is not installed (npm package @oven/bun-linux-x64)')
        if node:
            check_runtime(tap, 'node', [node, JS_RUNNER], tmp_root)
            check_runtime(tap, 'node worker', [node, JS_RUNNER], tmp_root, worker=True)
        else:
            tap.skip('node runtime', 'node is not installed')
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    elapsed = time.monotonic() - t0
    tap.ok(elapsed < 60, 'the suite ran in under 60 s (%.1fs)' % elapsed)
    tap.done()


if __name__ == '__main__':
    main()
