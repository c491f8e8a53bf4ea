'use strict';
/*
 * agentbox in-box JS snippet runner (FastGPT sandbox v5 compatible).
 * Runs on Bun (preferred) and on Node 20 (fallback).
 *
 * One process runs one snippet. The protocol (JSON lines on stdin/stdout)
 * and the policies are described in runners/README.md. In short:
 *
 *   host starts:  bun runner.js [--uid UID]        (or: node runner.js ...)
 *   runner:       {"ready":true}
 *   host:         {"code":..., "variables":{...}, "limits":{...}, "maxRequests":30}
 *   runner:       {"http":{...}}                   (0..maxRequests times, each
 *   host:         {"http_result":{...}} or {"http_error":"..."}   answered)
 *   runner:       {"result":{"success":true,"data":{"codeReturn":...,"log":"..."}}}
 *                 or {"result":{"success":false,"message":"..."}}
 *
 * stdout carries protocol lines only: console.* output goes into "log". The
 * module policy and the shims below are compatibility with FastGPT; the real
 * boundary is the box the host runs this process in.
 */

// ---- what the runner itself needs, taken before any shim ----------------------
// crypto and util load on first use (each cost Bun ~10 ms of start-up).
const _fs = require('fs');
const _path = require('path');
const _isBun = typeof globalThis.Bun !== 'undefined';
const _realProcess = process;
const _BunInspect = _isBun ? globalThis.Bun.inspect : null;
let _cryptoMod = null;
function _crypto() {
  if (!_cryptoMod) _cryptoMod = _realRequire('crypto');
  return _cryptoMod;
}
function _inspect(a) {
  return _BunInspect ? _BunInspect(a, { depth: 4 }) : _realRequire('util').inspect(a, { depth: 4 });
}
const _OriginalFunction = Function;
const _exit = process.exit.bind(process);
// The runner's own JSON, taken before any snippet runs: a snippet that
// replaces JSON.stringify/parse changes its own globals, not the protocol.
const _stringify = JSON.stringify;
const _parse = JSON.parse;
const _Buffer = Buffer;

const ALLOWED_MODULES = ['lodash', 'dayjs', 'moment', 'uuid', 'crypto-js', 'qs', 'url', 'querystring'];
const DEFAULT_MAX_REQUESTS = 30;
const MAX_DELAY_MS = 10000;
const MAX_HTTP_TIMEOUT_MS = 10000;

// The allowed modules are loaded when a snippet first requires one: loading all
// six up front was most of a warm process's start-up (~100 ms of CPU), paid
// by every run. Resolved next to this file (runners/js/node_modules).
const _realRequire = require;
const _moduleCache = Object.create(null);
function _loadAllowed(name) {
  if (!(name in _moduleCache)) {
    try {
      _moduleCache[name] = _realRequire(name);
    } catch (e) {
      _moduleCache[name] = undefined; // reported as "Cannot find module"
    }
  }
  return _moduleCache[name];
}

// ---- protocol -------------------------------------------------------------------
let _stdinBuf = _Buffer.alloc(0);
let _finished = false;
let _tmpdir = null;

function _sleepMs(ms) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

function _writeAll(fd, str) {
  let buf = _Buffer.from(str, 'utf8');
  while (buf.length > 0) {
    let n;
    try {
      n = _fs.writeSync(fd, buf, 0, buf.length);
    } catch (e) {
      if (e && e.code === 'EAGAIN') {
        _sleepMs(1);
        continue;
      }
      throw e;
    }
    buf = buf.subarray(n);
  }
}

function _writeLine(obj) {
  _writeAll(1, _stringify(obj) + '\n');
}

// One line from fd 0, read synchronously (the protocol is strictly
// request/answer, so nothing else can arrive meanwhile).
function _readLine() {
  const chunk = _Buffer.alloc(65536);
  for (;;) {
    const nl = _stdinBuf.indexOf(10);
    if (nl >= 0) {
      const line = _stdinBuf.subarray(0, nl).toString('utf8');
      _stdinBuf = _stdinBuf.subarray(nl + 1);
      return _parse(line);
    }
    let n;
    try {
      n = _fs.readSync(0, chunk, 0, chunk.length, null);
    } catch (e) {
      if (e && e.code === 'EAGAIN') {
        _sleepMs(1);
        continue;
      }
      if (e && e.code === 'EOF') n = 0;
      else throw e;
    }
    if (n === 0) throw new Error('the host closed stdin');
    _stdinBuf = _Buffer.concat([_stdinBuf, chunk.subarray(0, n)]);
  }
}

function _finish(result) {
  if (!_finished) {
    _finished = true;
    try {
      _writeLine({ result });
    } catch (e) {
      /* stdout is gone */
    }
    if (_tmpdir) {
      try {
        _fs.rmSync(_tmpdir, { recursive: true, force: true });
      } catch (e) {}
    }
  }
  _exit(0);
}

function _fail(message) {
  _finish({ success: false, message: String(message) });
}

function _fmtNum(n) {
  return String(n);
}

// ---- arguments, temp dir, privileges ------------------------------------------------
// --uid UID: make the temp dir and drop to UID here. --tmpdir DIR: the zygote
// (python/runner.py --zygote) did all that before it exec'd this runner: DIR
// is the run's temp dir (the cwd, $TMPDIR), privileges are dropped, the
// environment is scrubbed.
function _parseArgs(argv) {
  let uid = null;
  let tmpdir = null;
  for (let i = 2; i < argv.length; i++) {
    if (argv[i] === '--uid' && i + 1 < argv.length) {
      uid = parseInt(argv[++i], 10);
    } else if (argv[i].startsWith('--uid=')) {
      uid = parseInt(argv[i].slice(6), 10);
    } else if (argv[i] === '--tmpdir' && i + 1 < argv.length) {
      tmpdir = argv[++i];
    }
  }
  return { uid: Number.isInteger(uid) && uid >= 0 ? uid : null, tmpdir };
}

function _setupProcess(uid) {
  let base = process.env.TMPDIR || '/tmp';
  try {
    if (!_fs.statSync(base).isDirectory()) base = '/tmp';
  } catch (e) {
    base = '/tmp';
  }
  const dir = _fs.realpathSync(_fs.mkdtempSync(_path.join(base, 'sandbox_')));
  _fs.chmodSync(dir, 0o700);
  if (uid !== null && typeof process.geteuid === 'function' && process.geteuid() === 0) {
    _fs.chownSync(dir, uid, uid);
    process.setgroups([]);
    process.setgid(uid);
    process.setuid(uid);
    if (process.getuid() !== uid || process.getgid() !== uid) throw new Error('could not drop privileges');
  }
  process.chdir(dir);
  const keep = ['PATH', 'LANG', 'LC_ALL', 'TZ', 'HOME', 'NODE_ENV'];
  for (const k of Object.keys(process.env)) {
    if (!keep.includes(k)) delete process.env[k];
  }
  process.env.TMPDIR = dir;
  process.env.SANDBOX_TMPDIR = dir;
  return dir;
}

// Whatever a snippet writes to process.stdout/stderr goes into the run's log.
const _logs = [];
function _capture(chunk, enc, cb) {
  _logs.push(String(chunk).replace(/\n$/, ''));
  if (typeof enc === 'function') enc();
  else if (typeof cb === 'function') cb();
  return true;
}

// ---- shims (FastGPT's, and a few more) -----------------------------------------------
function _installShims() {
  if (_isBun) {
    // Bun makes process.stdout/stderr (node streams, ~15 ms of start-up) the
    // first time anything touches them, even a defineProperty or delete.
    // Snippets see a process object of their own instead: it inherits from the
    // real one and has plain writers into the log as stdout and stderr.
    const own = Object.create(process);
    for (const name of ['stdout', 'stderr']) {
      const w = { write: _capture, end: _capture, fd: name === 'stdout' ? 1 : 2, isTTY: false, columns: 80 };
      Object.defineProperty(own, name, { value: w, writable: false, configurable: false, enumerable: true });
    }
    try {
      Object.defineProperty(globalThis, 'process', { value: own, writable: false, configurable: false });
    } catch (e) {}
  } else {
    // Node makes them lazily too: make them now, their write is replaced in _run.
    void process.stdout;
    void process.stderr;
  }
  const _SafeFunction = function Function() {
    throw new Error('Function constructor is not allowed in sandbox');
  };
  _SafeFunction.prototype = _OriginalFunction.prototype;
  const fnProtos = [
    _OriginalFunction.prototype,
    Object.getPrototypeOf(async function () {}),
    Object.getPrototypeOf(function* () {}),
    Object.getPrototypeOf(async function* () {}),
  ];
  for (const proto of fnProtos) {
    try {
      Object.defineProperty(proto, 'constructor', { value: _SafeFunction, writable: false, configurable: false });
    } catch (e) {
      /* already locked */
    }
  }
  globalThis.Function = _SafeFunction;

  // eval stays, but what it evaluates is checked for import() too (so eval
  // is always an indirect, global-scope eval).
  const _origEval = globalThis.eval;
  globalThis.eval = function (src) {
    if (typeof src === 'string') _checkNoImport(src);
    return _origEval(src);
  };

  // Prototype walks cannot reach the function prototypes (and the original
  // constructor through them); prototypes cannot be swapped.
  const _origGetProto = Object.getPrototypeOf;
  const _origReflectGetProto = Reflect.getPrototypeOf;
  const blocked = new Set(fnProtos);
  Object.getPrototypeOf = function getPrototypeOf(obj) {
    const p = _origGetProto(obj);
    return blocked.has(p) ? Object.create(null) : p;
  };
  Reflect.getPrototypeOf = function getPrototypeOf(obj) {
    const p = _origReflectGetProto(obj);
    return blocked.has(p) ? Object.create(null) : p;
  };
  Object.setPrototypeOf = () => false;
  Reflect.setPrototypeOf = () => false;
  try {
    delete Error.prepareStackTrace;
  } catch (e) {}
  try {
    delete Error.captureStackTrace;
  } catch (e) {}

  // No network, workers or eval-by-another-name from the global scope.
  for (const name of ['fetch', 'XMLHttpRequest', 'WebSocket', 'EventSource', 'Worker', 'SharedWorker',
    'Request', 'Response', 'Headers', 'navigator', 'require', 'module', 'exports', '__filename', '__dirname',
    'Bun$', 'importScripts', 'WebAssembly']) {
    try {
      Object.defineProperty(globalThis, name, { value: undefined, writable: false, configurable: false });
    } catch (e) {
      try {
        globalThis[name] = undefined;
      } catch (e2) {}
    }
  }

  if (typeof globalThis.Bun !== 'undefined') {
    const dangerous = ['$', 'FFI', 'connect', 'dns', 'embeddedFiles', 'fetch', 'file', 'listen', 'mmap',
      'openInEditor', 'plugin', 'serve', 'spawn', 'spawnSync', 'udpSocket', 'write', 'sql', 'postgres', 'SQL',
      'S3Client', 's3', 'RedisClient', 'redis', 'secrets', 'Terminal', 'unsafe', 'stdin', 'stdout', 'stderr',
      'build', 'Transpiler', 'registerMacro', 'generateHeapSnapshot', 'shrink', 'which', 'resolve',
      'resolveSync', 'FileSystemRouter', 'Glob', 'main', 'gc', 'jest', 'CSRF', 'Cookie', 'CookieMap',
      'readableStreamToArray', 'argv', 'env', 'cwd', 'origin'];
    // Some of these (sql above all: ~5 ms of CPU, then $, RedisClient) are
    // lazy: Bun loads their client the first time the property is read or
    // (re)defined. A plain assignment first replaces the value without loading
    // it; the defineProperty then only locks the undefined in place.
    for (const api of dangerous) {
      try {
        globalThis.Bun[api] = undefined;
      } catch (e) {}
      try {
        Object.defineProperty(globalThis.Bun, api, { value: undefined, writable: false, configurable: false });
      } catch (e) {}
    }
  }

  const dangerousProcess = ['binding', '_linkedBinding', 'dlopen', 'getBuiltinModule', 'moduleLoadList',
    '_channel', 'channel', 'send', 'abort', 'chdir', 'umask', 'setuid', 'setgid', 'seteuid',
    'setegid', 'setgroups', 'initgroups', 'kill', '_kill', 'execve', 'execPath', 'execArgv', 'argv0',
    'config', 'mainModule', 'report', 'permission', '_debugProcess', '_debugEnd', '_startProfilerIdleNotifier',
    '_stopProfilerIdleNotifier', '_getActiveHandles', '_getActiveRequests', 'openStdin', '_rawDebug',
    'loadEnvFile'];
  const procs = globalThis.process === _realProcess ? [_realProcess] : [_realProcess, globalThis.process];
  for (const proc of procs) {
    for (const api of dangerousProcess) {
      try {
        Object.defineProperty(proc, api, { value: undefined, writable: false, configurable: false });
      } catch (e) {
        try {
          proc[api] = undefined;
        } catch (e2) {}
      }
    }
  }
  try {
    Object.freeze(process.env);
  } catch (e) {
    // Node's process.env cannot be frozen: a frozen copy replaces it.
    try {
      const copy = Object.freeze(Object.assign({}, process.env));
      Object.defineProperty(process, 'env', { value: copy, writable: false, configurable: false });
    } catch (e2) {}
  }
}

// ---- helpers ---------------------------------------------------------------------------
function _makeHelpers(tmpdir, diskMB, maxRequests) {
  const diskLimit = diskMB * 1024 * 1024;
  const sizes = new Map();
  let requestCount = 0;

  function inside(p) {
    return p === tmpdir || p.startsWith(tmpdir + _path.sep);
  }
  // Paths are relative to the run's temp dir; ../ and symlinks cannot leave it.
  function safePath(userPath) {
    if (typeof userPath !== 'string') userPath = String(userPath);
    if (userPath.includes('\0')) throw new Error('Path traversal not allowed');
    const resolved = _path.resolve(tmpdir, userPath);
    if (!inside(resolved)) throw new Error('Path traversal not allowed');
    // The deepest existing ancestor, with its symlinks resolved, must be inside.
    let probe = resolved;
    for (;;) {
      let real = null;
      try {
        real = _fs.realpathSync(probe);
      } catch (e) {
        const parent = _path.dirname(probe);
        if (parent === probe) break;
        probe = parent;
        continue;
      }
      if (!inside(real)) throw new Error('Path traversal not allowed');
      return probe === resolved ? real : _path.join(real, _path.relative(probe, resolved));
    }
    throw new Error('Path traversal not allowed');
  }

  const fsHelper = {
    writeFile(path, content) {
      const safe = safePath(path);
      const data = typeof content === 'string' || _Buffer.isBuffer(content) ? content : String(content);
      const bytes = _Buffer.byteLength(data, 'utf8');
      const old = sizes.get(safe) || 0;
      let used = 0;
      for (const v of sizes.values()) used += v;
      if (used - old + bytes > diskLimit) throw new Error('Disk quota exceeded: ' + _fmtNum(diskMB) + 'MB limit');
      const dir = _path.dirname(safe);
      if (!_fs.existsSync(dir)) _fs.mkdirSync(dir, { recursive: true });
      safePath(_path.relative(tmpdir, dir));
      const fd = _fs.openSync(safe, _fs.constants.O_WRONLY | _fs.constants.O_CREAT | _fs.constants.O_TRUNC |
        _fs.constants.O_NOFOLLOW, 0o600);
      try {
        _fs.writeSync(fd, typeof data === 'string' ? _Buffer.from(data, 'utf8') : data);
      } finally {
        _fs.closeSync(fd);
      }
      sizes.set(safe, bytes);
    },
    readFile(path) {
      const safe = safePath(path);
      const fd = _fs.openSync(safe, _fs.constants.O_RDONLY | _fs.constants.O_NOFOLLOW);
      try {
        return _fs.readFileSync(fd, 'utf8');
      } finally {
        _fs.closeSync(fd);
      }
    },
    readdir(path = '.') {
      return _fs.readdirSync(safePath(path)).sort();
    },
    mkdir(path) {
      _fs.mkdirSync(safePath(path), { recursive: true });
    },
    exists(path) {
      return _fs.existsSync(safePath(path));
    },
    get tmpDir() {
      return tmpdir;
    },
  };
  // snake_case aliases, as in the Python helper
  fsHelper.write_file = fsHelper.writeFile;
  fsHelper.read_file = fsHelper.readFile;
  Object.defineProperty(fsHelper, 'tmp_dir', { get: () => tmpdir, enumerable: false });

  const SystemHelper = {
    countToken(text) {
      if (typeof text !== 'string') text = String(text);
      return Math.ceil(text.length / 4);
    },
    strToBase64(str, prefix = '') {
      return (prefix || '') + _Buffer.from(String(str), 'utf8').toString('base64');
    },
    createHmac(algorithm, secret) {
      const timestamp = Date.now().toString();
      const stringToSign = timestamp + '\n' + secret;
      const hmac = _crypto().createHmac(algorithm, secret);
      hmac.update(stringToSign, 'utf8');
      return { timestamp, sign: encodeURIComponent(hmac.digest('base64')) };
    },
    delay(ms) {
      if (ms > MAX_DELAY_MS) throw new Error('Delay must be <= ' + MAX_DELAY_MS + 'ms');
      return new Promise((resolve) => setTimeout(resolve, ms));
    },
    async httpRequest(url, opts = {}) {
      if (++requestCount > maxRequests) {
        throw new Error('Request limit exceeded: max ' + maxRequests + ' requests per execution');
      }
      opts = opts || {};
      const method = String(opts.method || 'GET').toUpperCase();
      const headers = {};
      for (const [k, v] of Object.entries(opts.headers || {})) headers[k] = String(v);
      const body =
        opts.body != null ? (typeof opts.body === 'string' ? opts.body : _stringify(opts.body)) : null;
      if (body != null && !Object.keys(headers).some((k) => k.toLowerCase() === 'content-type')) {
        headers['Content-Type'] = 'application/json';
      }
      const t = Number(opts.timeout);
      const timeout = t > 0 ? Math.min(Math.floor(t), MAX_HTTP_TIMEOUT_MS) : MAX_HTTP_TIMEOUT_MS;
      _writeLine({ http: { url: String(url), method, headers, body, timeout } });
      const reply = _readLine();
      if (reply && Object.prototype.hasOwnProperty.call(reply, 'http_error')) {
        throw new Error(String(reply.http_error));
      }
      const res = reply && reply.http_result;
      if (!res || typeof res !== 'object') throw new Error('HTTP request failed: bad reply from the host');
      return {
        status: res.status,
        statusText: res.statusText == null ? '' : res.statusText,
        headers: res.headers || {},
        data: res.data == null ? '' : res.data,
      };
    },
    fs: fsHelper,
  };
  // snake_case aliases, as in the Python helper
  SystemHelper.count_token = SystemHelper.countToken;
  SystemHelper.str_to_base64 = SystemHelper.strToBase64;
  SystemHelper.create_hmac = SystemHelper.createHmac;
  SystemHelper.http_request = SystemHelper.httpRequest;
  return SystemHelper;
}

// import() would load any module: refused in the source and in eval'd text.
const _IMPORT_RE = /(^|[^.\w$])import\s*(?:\/\*[\s\S]*?\*\/\s*|\/\/[^\n]*\n\s*)*\(\s*(?:(['"`])([^'"`]*)\2)?/;

function _checkNoImport(src) {
  const m = _IMPORT_RE.exec(src);
  if (m) {
    throw new Error(m[3] !== undefined ? "Module '" + m[3] + "' is not allowed in sandbox"
      : 'Dynamic import is not allowed in sandbox');
  }
}

function _safeRequire(name) {
  if (typeof name !== 'string' || !ALLOWED_MODULES.includes(name)) {
    throw new Error("Module '" + String(name) + "' is not allowed in sandbox");
  }
  const m = _loadAllowed(name);
  if (m === undefined) throw new Error("Cannot find module '" + name + "'");
  return m;
}

function _formatLogArg(a) {
  if (typeof a === 'object' && a !== null) {
    try {
      const s = _stringify(a);
      if (s !== undefined) return s;
    } catch (e) {
      /* circular or BigInt inside */
    }
    try {
      return _inspect(a);
    } catch (e) {
      return String(a);
    }
  }
  if (typeof a === 'object') return 'null';
  try {
    return String(a);
  } catch (e) {
    return Object.prototype.toString.call(a);
  }
}

function _jsonReplacer(key, value) {
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'function' || typeof value === 'symbol') return String(value);
  return value;
}

// ---- the run ------------------------------------------------------------------------------
async function _run() {
  const args = _parseArgs(process.argv);
  const tmpdir = (_tmpdir = args.tmpdir ? args.tmpdir : _setupProcess(args.uid));
  _installShims();
  _writeLine({ ready: true });

  let req;
  try {
    req = _readLine();
  } catch (e) {
    _fail('Invalid request: ' + (e && e.message));
  }
  if (!req || typeof req !== 'object') _fail('Invalid request: not an object');

  const code = req.code;
  let variables = req.variables == null ? {} : req.variables;
  const limits = req.limits && typeof req.limits === 'object' ? req.limits : {};
  const num = (v, d) => (typeof v === 'number' && v > 0 ? v : d);
  const timeoutMs = num(limits.timeoutMs, 10000);
  const diskMB = num(limits.diskMB, 10);
  let maxRequests = req.maxRequests;
  if (!Number.isInteger(maxRequests) || maxRequests < 0) maxRequests = DEFAULT_MAX_REQUESTS;

  if (typeof code !== 'string' || code.trim() === '') _fail('Code cannot be empty');
  if (typeof variables !== 'object' || Array.isArray(variables)) {
    _fail('Invalid request: variables must be an object');
  }

  // The host kills the process at the deadline too; this answers for code
  // that waits on something that never comes (the event loop stays alive).
  setTimeout(() => _fail('Script execution timed out after ' + _fmtNum(timeoutMs) + 'ms'), timeoutMs);

  const SystemHelper = _makeHelpers(tmpdir, diskMB, maxRequests);
  const logs = _logs;
  const logFn = (...args) => {
    logs.push(args.map(_formatLogArg).join(' '));
  };
  const safeConsole = {
    log: logFn, info: logFn, warn: logFn, error: logFn, debug: logFn, trace: logFn,
    dir: (a) => logFn(a), table: (a) => logFn(a),
  };
  // Anything else that writes to the process's stdout/stderr goes to the log.
  try {
    if (process.stdout.write !== _capture) process.stdout.write = _capture;
    if (process.stderr.write !== _capture) process.stderr.write = _capture;
  } catch (e) {}
  try {
    globalThis.console = safeConsole;
  } catch (e) {}

  let result;
  try {
    _checkNoImport(code);
    const userFn = new _OriginalFunction(
      'require', 'console', 'SystemHelper',
      'countToken', 'strToBase64', 'createHmac', 'delay', 'httpRequest',
      'variables',
      code + "\n;return typeof main === 'function' ? main : undefined;"
    );
    const main = userFn(
      _safeRequire, safeConsole, SystemHelper,
      SystemHelper.countToken, SystemHelper.strToBase64, SystemHelper.createHmac,
      SystemHelper.delay, SystemHelper.httpRequest,
      variables
    );
    if (typeof main !== 'function') throw new Error("No 'main' function defined");
    result = await main(variables);
  } catch (err) {
    let msg;
    try {
      msg = err && typeof err === 'object' && 'message' in err ? err.message : String(err);
    } catch (e) {
      msg = 'Error';
    }
    _fail(msg);
    return;
  }

  let codeReturn;
  try {
    const s = _stringify(result === undefined ? null : result, _jsonReplacer);
    codeReturn = s === undefined ? null : _parse(s);
  } catch (err) {
    _fail(err && err.message ? err.message : String(err));
    return;
  }
  _finish({ success: true, data: { codeReturn, log: logs.join('\n') } });
}

_run().catch((e) => _fail('Runner error: ' + (e && e.message ? e.message : String(e))));
