'use strict';
/*
 * agentbox in-box JS snippet runner (FastGPT sandbox v5 compatible).
 * Runs on Bun (preferred) and on Node 20 (fallback).
 *
 * Without --worker one process runs one snippet. The protocol (JSON lines on stdin/stdout)
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
 * --worker (below, "worker mode"): one process serves many runs, each in a
 * fresh realm, and after each result writes {"ready":true} or
 * {"recycle":"<reason>"} (then exits 0).
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
const _chdir = process.chdir.bind(process);
const _origGetProto = Object.getPrototypeOf;
// The runner's own JSON, taken before any snippet runs: a snippet that
// replaces JSON.stringify/parse changes its own globals, not the protocol.
const _stringify = JSON.stringify;
const _parse = JSON.parse;
const _Buffer = Buffer;

const ALLOWED_MODULES = ['lodash', 'dayjs', 'moment', 'uuid', 'crypto-js', 'qs', 'url', 'querystring'];
const DEFAULT_MAX_REQUESTS = 30;
const MAX_DELAY_MS = 10000;
const MAX_HTTP_TIMEOUT_MS = 10000;
const DEFAULT_MAX_RUNS = 100;

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

// The next line of fd 0 already read, parsed; undefined when none is whole yet.
function _takeLine() {
  const nl = _stdinBuf.indexOf(10);
  if (nl < 0) return undefined;
  const line = _stdinBuf.subarray(0, nl).toString('utf8');
  _stdinBuf = _stdinBuf.subarray(nl + 1);
  return _parse(line);
}

// Appends n bytes read into chunk (0: the host closed stdin).
function _gotStdin(chunk, n) {
  if (n === 0) throw Object.assign(new Error('the host closed stdin'), { eof: true });
  const got = chunk.subarray(0, n);
  _stdinBuf = _stdinBuf.length ? _Buffer.concat([_stdinBuf, got]) : _Buffer.from(got);
}

let _readChunk = null; // one buffer for every read (a worker reads many lines)
function _stdinChunk() {
  return _readChunk || (_readChunk = _Buffer.allocUnsafe(65536));
}

// One line from fd 0, read synchronously: the answer to an http line, which the
// host sends as soon as it has it (the protocol is strictly request/answer, so
// nothing else can arrive meanwhile). Node makes a socket stdin non-blocking:
// then it polls, backing off to 16 ms.
function _readLine() {
  const chunk = _stdinChunk();
  let wait = 1;
  for (;;) {
    const line = _takeLine();
    if (line !== undefined) return line;
    let n;
    try {
      n = _fs.readSync(0, chunk, 0, chunk.length, null);
    } catch (e) {
      if (e && e.code === 'EAGAIN') {
        _sleepMs(wait);
        wait = Math.min(wait * 2, 16);
        continue;
      }
      if (e && e.code === 'EOF') n = 0;
      else throw e;
    }
    _gotStdin(chunk, n);
  }
}

// The next request line, waited for in the event loop (the read runs on the
// runtime's thread pool). An idle process must not wait in a synchronous read:
// its JS thread then blocks inside the VM, and once Bun's garbage collector
// wants the heap (a few seconds after the last run) it signals that thread
// (tgkill SIGPWR) every millisecond to reach a safepoint it never reaches until
// the next request comes: ~35-50 ms of CPU a second per idle worker.
function _nextRequest() {
  const chunk = _stdinChunk();
  return new Promise((resolve, reject) => {
    let wait = 1;
    const step = () => {
      try {
        const line = _takeLine();
        if (line !== undefined) return resolve(line);
      } catch (e) {
        return reject(e);
      }
      _fs.read(0, chunk, 0, chunk.length, null, (e, n) => {
        if (e && e.code === 'EAGAIN') {
          setTimeout(step, wait);
          wait = Math.min(wait * 2, 16);
          return;
        }
        try {
          if (e && e.code !== 'EOF') throw e;
          _gotStdin(chunk, e ? 0 : n);
        } catch (e2) {
          return reject(e2);
        }
        wait = 1;
        step();
      });
    };
    step();
  });
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
// --worker: worker mode (below); --tmpdir-root DIR: the zygote dropped to the
// run's uid already, run dirs go under DIR; --max-runs N: recycle after N runs.
function _parseArgs(argv) {
  let uid = null;
  let tmpdir = null;
  let tmpdirRoot = null;
  let worker = false;
  let maxRuns = DEFAULT_MAX_RUNS;
  for (let i = 2; i < argv.length; i++) {
    if (argv[i] === '--uid' && i + 1 < argv.length) {
      uid = parseInt(argv[++i], 10);
    } else if (argv[i].startsWith('--uid=')) {
      uid = parseInt(argv[i].slice(6), 10);
    } else if (argv[i] === '--tmpdir' && i + 1 < argv.length) {
      tmpdir = argv[++i];
    } else if (argv[i] === '--tmpdir-root' && i + 1 < argv.length) {
      tmpdirRoot = argv[++i];
    } else if (argv[i] === '--worker') {
      worker = true;
    } else if (argv[i] === '--max-runs' && i + 1 < argv.length) {
      const n = parseInt(argv[++i], 10);
      if (Number.isInteger(n) && n > 0) maxRuns = n;
    }
  }
  return { uid: Number.isInteger(uid) && uid >= 0 ? uid : null, tmpdir, tmpdirRoot, worker, maxRuns };
}

// Drops to UID (when root and asked) and scrubs the environment, keeping
// PATH, LANG, LC_ALL, TZ, HOME and NODE_ENV.
function _dropAndScrub(uid) {
  if (uid !== null && typeof process.geteuid === 'function' && process.geteuid() === 0) {
    process.setgroups([]);
    process.setgid(uid);
    process.setuid(uid);
    if (process.getuid() !== uid || process.getgid() !== uid) throw new Error('could not drop privileges');
  }
  const keep = ['PATH', 'LANG', 'LC_ALL', 'TZ', 'HOME', 'NODE_ENV'];
  for (const k of Object.keys(process.env)) {
    if (!keep.includes(k)) delete process.env[k];
  }
}

// The base for temp dirs: $TMPDIR when it is a directory, else /tmp.
function _tmpBase() {
  const base = process.env.TMPDIR || '/tmp';
  try {
    if (_fs.statSync(base).isDirectory()) return base;
  } catch (e) {}
  return '/tmp';
}

// A fresh sandbox_* dir under base, mode 0700, its real path.
function _makeTmpdir(base) {
  const dir = _fs.realpathSync(_fs.mkdtempSync(_path.join(base, 'sandbox_')));
  _fs.chmodSync(dir, 0o700);
  return dir;
}

function _setupProcess(uid) {
  const dir = _makeTmpdir(_tmpBase());
  if (uid !== null && typeof process.geteuid === 'function' && process.geteuid() === 0) _fs.chownSync(dir, uid, uid);
  _dropAndScrub(uid);
  process.chdir(dir);
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
    httpSync(url, opts = {}) {
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
    async httpRequest(url, opts = {}) {
      return SystemHelper.httpSync(url, opts);
    },
    fs: fsHelper,
  };
  // Synchronous, for the worker's bridge; not one of the snippet's helpers.
  Object.defineProperty(SystemHelper, 'httpSync', { enumerable: false });
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

// run: a worker's run, whose realm an inspect could hand objects of the
// worker (a custom inspect function gets its options and inspect).
function _formatLogArg(a, run) {
  if (typeof a === 'object' && a !== null) {
    try {
      const s = _stringify(a);
      if (s !== undefined) return s;
    } catch (e) {
      /* circular or BigInt inside */
    }
    if (run) run.touched = true;
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

// An exception's message as the run's message (a thrown non-Error: its string).
function _errMessage(err) {
  try {
    return String(err && typeof err === 'object' && 'message' in err ? err.message : err);
  } catch (e) {
    return 'Error';
  }
}

function _jsonReplacer(key, value) {
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'function' || typeof value === 'symbol') return String(value);
  return value;
}

// ---- worker mode: many runs per process, each in a fresh realm ------------------------
// `runner.js --worker`: after {"ready":true} every run line is answered by one
// {"result":...} line (and the http lines between), then {"ready":true} (the
// worker takes another run) or {"recycle":"<reason>"} and exit 0. Each run gets
// a new vm context (a realm of its own: its own Object, Function, Array, ...),
// its own temp dir, helpers, console, timers and `process` stand-in; the
// allowed modules are evaluated inside that realm when the run requires them.
// The realm reaches the worker only through a bridge of functions that take and
// return primitives (values of the realm go out, none of the worker's come in,
// errors are re-made in the realm). The few objects of the worker's realm a run
// can reach (URL, Buffer, TextEncoder, ... and the url/querystring modules) are
// snapshotted: any change to them, or to the worker's intrinsics, recycles.

// Runs INSIDE each run's realm (its source is compiled once and evaluated in
// every new context): it may use only its arguments and the realm's globals.
// cfg is a JSON string; bridge and outer hold the worker's functions and
// objects, kept in closures the snippet cannot reach.
function _realmSetup(bridge, outer, cfgText) {
  'use strict';
  const G = globalThis;
  const cfg = JSON.parse(cfgText);
  const RError = Error;
  const RTypeError = TypeError;
  const RPromise = Promise;
  const RMap = Map;
  const RString = String;
  const RNumber = Number;
  const RBigInt = BigInt;
  const RUint8Array = Uint8Array;
  const RRegExp = RegExp;
  const OrigFunction = Function;
  const origEval = eval;
  const apply = Reflect.apply;
  const defineProperty = Object.defineProperty;
  const freeze = Object.freeze;
  const keys = Object.keys;
  const getProto = Object.getPrototypeOf;
  const reflectGetProto = Reflect.getPrototypeOf;
  const jsonParse = JSON.parse;
  const ceil = Math.ceil;
  const floor = Math.floor;
  const promiseThen = RPromise.prototype.then;
  const promiseResolve = RPromise.resolve.bind(RPromise);
  const mapGet = RMap.prototype.get;
  const mapSet = RMap.prototype.set;
  const mapHas = RMap.prototype.has;
  const mapDelete = RMap.prototype.delete;
  const regexExec = RRegExp.prototype.exec;
  const strEndsWith = RString.prototype.endsWith;
  const strLastIndexOf = RString.prototype.lastIndexOf;
  const strSlice = RString.prototype.slice;
  const arrIncludes = Array.prototype.includes;
  const importRe = new RRegExp(cfg.importRe);

  function messageOf(e) {
    try {
      return RString(e && typeof e === 'object' && 'message' in e ? e.message : e);
    } catch (e2) {
      return 'Error';
    }
  }
  // Calls a bridge function; its exceptions become this realm's Errors.
  function call(f, ...args) {
    try {
      return apply(f, undefined, args);
    } catch (e) {
      throw new RError(messageOf(e));
    }
  }
  function callJson(f, ...args) {
    const r = apply(call, undefined, [f, ...args]);
    return r === undefined ? undefined : jsonParse(r);
  }
  function checkNoImport(src) {
    const m = apply(regexExec, importRe, [src]);
    if (m) {
      throw new RError(m[3] !== undefined ? "Module '" + m[3] + "' is not allowed in sandbox"
        : 'Dynamic import is not allowed in sandbox');
    }
  }

  // -- timers: every one is the worker's, so the run's teardown can cancel it
  const timers = new RMap();
  let nextTimer = 0;
  function Timeout(id) {
    this.id = id;
  }
  Timeout.prototype.ref = function () { return this; };
  Timeout.prototype.unref = function () { return this; };
  Timeout.prototype.hasRef = function () { return true; };
  Timeout.prototype[Symbol.toPrimitive] = function () { return this.id; };
  function addTimer(kind, fn, ms, args) {
    if (typeof fn !== 'function') throw new RTypeError('The "callback" argument must be of type function');
    const id = ++nextTimer;
    apply(mapSet, timers, [id, { fn, args, kind }]);
    let delay = RNumber(ms);
    if (!(delay >= 1)) delay = kind === 'immediate' ? 0 : 1;
    call(bridge.timer, id, kind, floor(delay));
    return kind === 'immediate' ? id : new Timeout(id);
  }
  function clearTimer(t) {
    const id = t instanceof Timeout ? t.id : RNumber(t);
    if (apply(mapHas, timers, [id])) {
      apply(mapDelete, timers, [id]);
      call(bridge.clearTimer, id);
    }
  }
  function fire(id) {
    const t = apply(mapGet, timers, [id]);
    if (!t) return;
    if (t.kind !== 'interval') apply(mapDelete, timers, [id]);
    apply(t.fn, undefined, t.args);
  }
  function queueMicrotask(fn) {
    if (typeof fn !== 'function') throw new RTypeError('The "callback" argument must be of type function');
    apply(promiseThen, promiseResolve(), [() => fn()]);
  }

  // -- console, process
  const log = (...args) => call(bridge.log, ...args);
  const consoleObj = {
    log, info: log, warn: log, error: log, debug: log, trace: log, dir: (a) => log(a), table: (a) => log(a),
  };
  function writer(fd) {
    const write = (chunk, enc, cb) => {
      call(bridge.write, RString(chunk));
      if (typeof enc === 'function') enc();
      else if (typeof cb === 'function') cb();
      return true;
    };
    return freeze({ write, end: write, fd, isTTY: false, columns: 80 });
  }
  function hrtime(prev) {
    const ns = call(bridge.hrtime);
    let sec = floor(ns / 1e9);
    let nsec = ns - sec * 1e9;
    if (prev) {
      sec -= prev[0];
      nsec -= prev[1];
      if (nsec < 0) {
        sec--;
        nsec += 1e9;
      }
    }
    return [sec, nsec];
  }
  hrtime.bigint = () => RBigInt(call(bridge.hrtime));
  const noop = function () { return proc; };
  const proc = {
    env: freeze(cfg.env),
    argv: cfg.argv,
    execArgv: [],
    platform: cfg.platform,
    arch: cfg.arch,
    version: cfg.version,
    versions: freeze(cfg.versions),
    release: freeze(cfg.release),
    pid: cfg.pid,
    ppid: cfg.ppid,
    title: cfg.title,
    exitCode: undefined,
    stdout: writer(1),
    stderr: writer(2),
    cwd: () => cfg.tmpdir,
    getuid: () => cfg.uid,
    geteuid: () => cfg.uid,
    getgid: () => cfg.gid,
    getegid: () => cfg.gid,
    hrtime,
    uptime: () => call(bridge.uptime),
    memoryUsage: () => callJson(bridge.memoryUsage),
    nextTick: (fn, ...args) => queueMicrotask(() => apply(fn, undefined, args)),
    exit: (code) => call(bridge.exit, RNumber(code) || 0),
    emitWarning: () => {},
    on: noop, once: noop, off: noop, addListener: noop, removeListener: noop, removeAllListeners: noop,
    emit: () => false,
    listeners: () => [],
  };
  proc.process = proc;

  // -- helpers: the worker's (fs confined to the run's dir, http through the host)
  const fsHelper = {
    writeFile: (p, c) => callJson(bridge.fs, 'writeFile', p, c),
    readFile: (p) => callJson(bridge.fs, 'readFile', p),
    readdir: (p = '.') => callJson(bridge.fs, 'readdir', p),
    mkdir: (p) => callJson(bridge.fs, 'mkdir', p),
    exists: (p) => callJson(bridge.fs, 'exists', p),
    get tmpDir() { return cfg.tmpdir; },
  };
  fsHelper.write_file = fsHelper.writeFile;
  fsHelper.read_file = fsHelper.readFile;
  defineProperty(fsHelper, 'tmp_dir', { get: () => cfg.tmpdir, enumerable: false });
  const SystemHelper = {
    countToken: (text) => ceil((typeof text === 'string' ? text : RString(text)).length / 4),
    strToBase64: (str, prefix = '') => (prefix || '') + call(bridge.base64, RString(str)),
    createHmac: (algorithm, secret) => callJson(bridge.hmac, algorithm, secret),
    delay(ms) {
      if (ms > cfg.maxDelay) throw new RError('Delay must be <= ' + cfg.maxDelay + 'ms');
      return new RPromise((resolve) => addTimer('timeout', resolve, ms, []));
    },
    async httpRequest(url, opts = {}) {
      return callJson(bridge.http, url, opts);
    },
    fs: fsHelper,
  };
  SystemHelper.count_token = SystemHelper.countToken;
  SystemHelper.str_to_base64 = SystemHelper.strToBase64;
  SystemHelper.create_hmac = SystemHelper.createHmac;
  SystemHelper.http_request = SystemHelper.httpRequest;

  // -- require: the allow-list; modules evaluated in this realm, cached per run
  const modules = new RMap();
  const randomBytes = (n) => {
    const hex = call(bridge.random, n);
    const a = new RUint8Array(n);
    for (let i = 0; i < n; i++) a[i] = parseInt(apply(strSlice, hex, [2 * i, 2 * i + 2]), 16);
    return a;
  };
  const cryptoShim = freeze({
    randomFillSync(buf) {
      const bytes = randomBytes(buf.byteLength);
      new RUint8Array(buf.buffer, buf.byteOffset, buf.byteLength).set(bytes);
      return buf;
    },
    getRandomValues(buf) {
      return cryptoShim.randomFillSync(buf);
    },
    randomUUID: () => call(bridge.uuid),
  });
  const utilShim = freeze({ inspect: (v) => RString(v) });
  function load(file) {
    if (apply(mapHas, modules, [file])) return apply(mapGet, modules, [file]).exports;
    const module = { exports: {}, id: file, filename: file, loaded: false };
    apply(mapSet, modules, [file, module]);
    const dir = apply(strSlice, file, [0, apply(strLastIndexOf, file, ['/'])]);
    const fn = call(bridge.compile, file);
    const req = (name) => {
      name = RString(name);
      if (name === 'crypto' || name === 'node:crypto') return cryptoShim;
      if (name === 'util' || name === 'node:util') return utilShim;
      return load(call(bridge.resolve, name, dir));
    };
    apply(fn, module.exports, [module.exports, req, module, file, dir]);
    module.loaded = true;
    return module.exports;
  }
  function require(name) {
    if (typeof name !== 'string' || !apply(arrIncludes, cfg.allowed, [name])) {
      throw new RError("Module '" + RString(name) + "' is not allowed in sandbox");
    }
    if (name === 'url' || name === 'querystring') {
      touch();
      if (!apply(mapHas, modules, [name])) {
        const m = outer.builtins[name];
        const copy = {};
        for (const k of keys(m)) copy[k] = m[k];
        apply(mapSet, modules, [name, { exports: copy }]);
      }
      return apply(mapGet, modules, [name]).exports;
    }
    return load(call(bridge.resolve, name, cfg.modulesDir));
  }

  // -- the realm's globals
  // The worker's own objects (URL, Buffer, ...): a run that reaches one has its
  // worker's intrinsics checked after it (bridge.touch).
  let touched = false;
  const touch = () => {
    if (!touched) {
      touched = true;
      call(bridge.touch);
    }
  };
  for (const name of keys(outer.globals)) {
    const v = outer.globals[name];
    defineProperty(G, name, {
      configurable: true,
      enumerable: false,
      get() {
        touch();
        return v;
      },
      set(x) {
        defineProperty(G, name, { value: x, writable: true, configurable: true, enumerable: false });
      },
    });
  }
  G.console = consoleObj;
  G.process = proc;
  G.global = G;
  G.crypto = cryptoShim;
  G.performance = freeze({ now: () => call(bridge.now), timeOrigin: cfg.timeOrigin });
  G.setTimeout = (fn, ms, ...args) => addTimer('timeout', fn, ms, args);
  G.setInterval = (fn, ms, ...args) => addTimer('interval', fn, ms, args);
  G.setImmediate = (fn, ...args) => addTimer('immediate', fn, 0, args);
  G.clearTimeout = clearTimer;
  G.clearInterval = clearTimer;
  G.clearImmediate = clearTimer;
  G.queueMicrotask = queueMicrotask;

  // -- the shims of the one-shot mode, on this realm's own intrinsics
  const SafeFunction = function Function() {
    throw new RError('Function constructor is not allowed in sandbox');
  };
  SafeFunction.prototype = OrigFunction.prototype;
  const fnProtos = [OrigFunction.prototype, getProto(async function () {}), getProto(function* () {}),
    getProto(async function* () {})];
  for (const p of fnProtos) {
    defineProperty(p, 'constructor', { value: SafeFunction, writable: false, configurable: false });
  }
  G.Function = SafeFunction;
  G.eval = function (src) {
    if (typeof src === 'string') checkNoImport(src);
    return origEval(src);
  };
  const hidden = (p) => fnProtos[0] === p || fnProtos[1] === p || fnProtos[2] === p || fnProtos[3] === p;
  Object.getPrototypeOf = function getPrototypeOf(obj) {
    const p = getProto(obj);
    return hidden(p) ? Object.create(null) : p;
  };
  Reflect.getPrototypeOf = function getPrototypeOf(obj) {
    const p = reflectGetProto(obj);
    return hidden(p) ? Object.create(null) : p;
  };
  Object.setPrototypeOf = () => false;
  Reflect.setPrototypeOf = () => false;
  delete RError.prepareStackTrace;
  delete RError.captureStackTrace;
  for (const name of ['WebAssembly', 'require', 'module', 'exports']) {
    defineProperty(G, name, { value: undefined, writable: false, configurable: false });
  }

  // The run: entered through a global the worker calls once, with the vm's
  // timeout around the synchronous part (top level and main up to its first await).
  defineProperty(G, '__agentbox_go__', {
    configurable: true,
    enumerable: false,
    value: function go() {
      delete G.__agentbox_go__;
      const done = (v) => call(bridge.done, v);
      const failed = (e) => call(bridge.fail, messageOf(e));
      try {
        checkNoImport(cfg.code);
        const userFn = new OrigFunction('require', 'console', 'SystemHelper', 'countToken', 'strToBase64',
          'createHmac', 'delay', 'httpRequest', 'variables',
          cfg.code + "\n;return typeof main === 'function' ? main : undefined;");
        const main = userFn(require, consoleObj, SystemHelper, SystemHelper.countToken, SystemHelper.strToBase64,
          SystemHelper.createHmac, SystemHelper.delay, SystemHelper.httpRequest, cfg.variables);
        if (typeof main !== 'function') throw new RError("No 'main' function defined");
        apply(promiseThen, promiseResolve(main(cfg.variables)), [done, failed]);
      } catch (e) {
        failed(e);
      }
    },
  });
  return { fire };
}

// -- the worker's side ------------------------------------------------------------------
const _w = {
  vm: null,
  setupScript: null, // _realmSetup compiled once
  goScript: null, // calls the realm's __agentbox_go__
  scripts: new Map(), // module file -> vm.Script of its CommonJS wrapper
  modulesDir: _path.join(__dirname, 'node_modules'),
  root: null, // where run dirs are made
  ownRoot: null, // the worker's own dir of run dirs (--uid without the zygote)
  uid: 0,
  gid: 0,
  t0: 0,
  globals: null, // the worker's objects a realm gets (URL, Buffer, ...)
  builtins: null, // url, querystring
  snapshot: null, // _integritySnapshot() after set-up
  watch: null, // _leftoverWatch
  run: null, // the current run
};

// The objects of the worker's realm a run is given (URL, Buffer, ... and the
// url/querystring modules), with their functions' prototypes: frozen, once, so
// no run can change them for the next.
function _freezeExposed() {
  const seen = new Set();
  const freeze = (o) => {
    if (((typeof o !== 'object' && typeof o !== 'function') || o === null) || seen.has(o)) return;
    seen.add(o);
    Object.freeze(o);
    if (typeof o === 'function' && o.prototype && typeof o.prototype === 'object') freeze(o.prototype);
  };
  for (const v of Object.values(_w.globals)) freeze(v);
  for (const m of Object.values(_w.builtins)) {
    freeze(m);
    for (const v of Object.values(m)) freeze(v);
  }
}

// The intrinsics of the worker's realm a run can still reach through the
// exposed objects (their prototype chains, what their methods return or
// throw) or that the worker relies on: snapshotted, checked after each run.
function _integrityRoots() {
  const P = Object.getPrototypeOf;
  const roots = [Object, Function, Array, Error, TypeError, RangeError, SyntaxError, URIError, ArrayBuffer,
    Uint8Array, P(Uint8Array), P(async function () {}), P(function* () {}), P(async function* () {}),
    P([][Symbol.iterator]()), P(P([][Symbol.iterator]())), JSON, Promise, String, Number, Boolean, Symbol];
  const all = [];
  for (const r of roots) {
    all.push(r);
    if (typeof r === 'function' && r.prototype && typeof r.prototype === 'object') all.push(r.prototype);
  }
  return all;
}

// [object, prototype, extensible, keys, descriptor fields...] of every root:
// compared after each run, a difference means the run reached the worker.
function _integritySnapshot(objs) {
  const snap = [];
  for (const o of objs) {
    const ks = Reflect.ownKeys(o);
    const vals = [];
    for (const k of ks) {
      const d = Reflect.getOwnPropertyDescriptor(o, k);
      vals.push(d.value, d.get, d.set, d.writable, d.enumerable, d.configurable);
    }
    snap.push({ o, proto: _origGetProto(o), ext: Object.isExtensible(o), ks, vals });
  }
  return snap;
}

function _integrityChanged(snap) {
  for (const s of snap) {
    if (_origGetProto(s.o) !== s.proto || Object.isExtensible(s.o) !== s.ext) return true;
    const ks = Reflect.ownKeys(s.o);
    if (ks.length !== s.ks.length) return true;
    for (let i = 0, j = 0; i < ks.length; i++, j += 6) {
      if (ks[i] !== s.ks[i]) return true;
      const d = Reflect.getOwnPropertyDescriptor(s.o, ks[i]);
      if (!d) return true;
      const v = s.vals;
      if (d.value !== v[j] && !(d.value !== d.value && v[j] !== v[j])) return true;
      if (d.get !== v[j + 1] || d.set !== v[j + 2] || d.writable !== v[j + 3] || d.enumerable !== v[j + 4] ||
        d.configurable !== v[j + 5]) return true;
    }
  }
  return false;
}

// Files and IPC objects a run leaves outside its temp dir. The top levels of
// /tmp, /var/tmp and /dev/shm are listed only when their mtime moved (a new
// entry changes it); System V IPC objects are listed in /proc/sysvipc.
const _LEFTOVER_DIRS = ['/tmp', '/var/tmp', '/dev/shm'];
const _SYSVIPC = ['/proc/sysvipc/shm', '/proc/sysvipc/sem', '/proc/sysvipc/msg'];

function _dirState(dir) {
  try {
    const st = _fs.statSync(dir);
    return { mtime: st.mtimeMs, names: null };
  } catch (e) {
    return null;
  }
}

function _ipcOwned(uid) {
  const ids = [];
  for (const f of _SYSVIPC) {
    let text;
    try {
      text = _fs.readFileSync(f, 'latin1');
    } catch (e) {
      continue;
    }
    const lines = text.split('\n');
    const head = lines[0].trim().split(/\s+/);
    const cu = head.indexOf('uid');
    const cc = head.indexOf('cuid');
    for (let i = 1; i < lines.length; i++) {
      const c = lines[i].trim().split(/\s+/);
      if (c.length > 1 && (Number(c[cu]) === uid || Number(c[cc]) === uid)) ids.push(f + ':' + c[1]);
    }
  }
  return ids.sort().join(',');
}

function _leftoverWatchStart(uid) {
  const dirs = {};
  for (const d of _LEFTOVER_DIRS) {
    const st = _dirState(d);
    if (st) dirs[d] = st;
  }
  return { uid, dirs, ipc: _ipcOwned(uid) };
}

// The names in dir owned by uid, but for skip.
function _ownedNames(dir, uid, skip) {
  const out = new Set();
  let names;
  try {
    names = _fs.readdirSync(dir);
  } catch (e) {
    return out;
  }
  for (const n of names) {
    const p = _path.join(dir, n);
    if (p === skip) continue;
    try {
      if (_fs.lstatSync(p).uid === uid) out.add(n);
    } catch (e) {}
  }
  return out;
}

// Before a run: remember what the uid owns where a run could leave something.
function _leftoverBefore(watch, skip) {
  if (watch.uid === 0) return;
  for (const [d, st] of Object.entries(watch.dirs)) {
    const now = _dirState(d);
    if (!now) continue;
    if (st.names === null || now.mtime !== st.mtime) {
      st.names = _ownedNames(d, watch.uid, skip);
      st.mtime = now.mtime;
    }
  }
}

// After a run: true when the uid owns something new there (skip: the run's dir).
function _leftoverAfter(watch, skip) {
  if (watch.uid === 0) return false; // root owns too much else to tell (a test set-up, not the box's)
  for (const [d, st] of Object.entries(watch.dirs)) {
    const now = _dirState(d);
    if (!now || now.mtime === st.mtime) continue;
    const names = _ownedNames(d, watch.uid, skip);
    st.mtime = now.mtime;
    let grew = false;
    for (const n of names) if (!st.names.has(n)) grew = true;
    st.names = names;
    if (grew) return true;
  }
  return _ipcOwned(watch.uid) !== watch.ipc;
}

// The bridge of one run: the realm's only way into the worker. Every function
// takes and returns primitives (or the realm's own values); after the run's
// result a call marks the run as still alive, which recycles.
function _makeBridge(run) {
  const live = () => {
    if (run.done) {
      run.late = true;
      return false;
    }
    return true;
  };
  const helpers = run.helpers;
  return {
    log(...args) {
      if (live()) run.logs.push(args.map((a) => _formatLogArg(a, run)).join(' '));
    },
    write(chunk) {
      if (live()) run.logs.push(String(chunk).replace(/\n$/, ''));
    },
    fs(op, p, content) {
      if (!live()) throw new Error('the run has ended');
      return _limited(run, () => {
        const r = helpers.fs[op](p, content);
        return r === undefined ? undefined : _stringify(r);
      });
    },
    touch() {
      run.touched = true;
    },
    base64: (s) => helpers.strToBase64(s),
    hmac: (alg, secret) => _stringify(helpers.createHmac(alg, secret)),
    http(url, opts) {
      if (!live()) throw new Error('the run has ended');
      return _limited(run, () => _stringify(helpers.httpSync(url, opts)));
    },
    random: (n) => _crypto().randomBytes(Math.max(0, Math.min(Number(n) || 0, 65536))).toString('hex'),
    uuid: () => _crypto().randomUUID(),
    hrtime: () => Number(_realProcess.hrtime.bigint()),
    now: () => performance.now(),
    uptime: () => _realProcess.uptime(),
    memoryUsage: () => _stringify(_realProcess.memoryUsage()),
    exit: () => _exit(0), // as in the one-shot mode: the process ends without a result
    timer(id, kind, ms) {
      if (!live()) return;
      const fire = () => {
        if (kind !== 'interval') run.timers.delete(id);
        if (run.done) return;
        try {
          run.realm.fire(id);
        } catch (e) {
          _workerFinish(run, { success: false, message: _errMessage(e) }, 'uncaught exception');
        }
      };
      const h = kind === 'immediate' ? setImmediate(fire) : kind === 'interval' ? setInterval(fire, ms)
        : setTimeout(fire, ms);
      run.timers.set(id, { kind, h });
    },
    clearTimer(id) {
      _cancelTimer(run, id);
    },
    compile(file) {
      if (!live()) throw new Error('the run has ended');
      let s = _w.scripts.get(file);
      if (!s) {
        let src = _fs.readFileSync(file, 'utf8');
        if (file.endsWith('.json')) src = 'module.exports = ' + src;
        else if (src.startsWith('#!')) src = '//' + src;
        s = new _w.vm.Script('(function (exports, require, module, __filename, __dirname) {' + src + '\n})',
          { filename: file });
        _w.scripts.set(file, s);
      }
      return s.runInContext(run.ctx);
    },
    resolve(name, fromDir) {
      let file;
      try {
        file = _realRequire.resolve(String(name), { paths: [String(fromDir)] });
      } catch (e) {
        throw new Error("Cannot find module '" + name + "'");
      }
      // An ES module (Node 20's "module-sync" condition picks one where Bun
      // takes the CommonJS file): the package's CommonJS main instead.
      if (file.endsWith('.mjs')) file = _cjsMain(file);
      if (!file.startsWith(_w.modulesDir + '/')) throw new Error("Cannot find module '" + name + "'");
      return file;
    },
    done(value) {
      if (run.done) return void (run.late = true);
      let codeReturn;
      try {
        const s = _stringify(value === undefined ? null : value, _jsonReplacer);
        codeReturn = s === undefined ? null : _parse(s);
      } catch (err) {
        _workerFinish(run, { success: false, message: _errMessage(err) }, null);
        return;
      }
      _workerFinish(run, { success: true, data: { codeReturn, log: run.logs.join('\n') } }, null);
    },
    fail(message) {
      if (run.done) return void (run.late = true);
      _workerFinish(run, { success: false, message: String(message) }, null);
    },
  };
}

// The CommonJS entry ("main", else index.js) of the package file belongs to.
function _cjsMain(file) {
  for (let dir = _path.dirname(file); dir.startsWith(_w.modulesDir + '/'); dir = _path.dirname(dir)) {
    let pkg;
    try {
      pkg = _parse(_fs.readFileSync(_path.join(dir, 'package.json'), 'utf8'));
    } catch (e) {
      continue;
    }
    const main = typeof pkg.main === 'string' && !pkg.main.endsWith('.mjs') ? pkg.main : 'index.js';
    return _realRequire.resolve(_path.join(dir, main));
  }
  throw new Error("Cannot find module '" + file + "'");
}

// Runs a helper for the run; a limit it hits (disk quota, request count)
// recycles the worker after the run, whether or not the snippet catches it.
function _limited(run, f) {
  try {
    return f();
  } catch (e) {
    const m = _errMessage(e);
    if (m.startsWith('Disk quota exceeded') || m.startsWith('Request limit exceeded')) run.limit = true;
    throw e;
  }
}

function _cancelTimer(run, id) {
  const t = run.timers.get(id);
  if (!t) return;
  run.timers.delete(id);
  if (t.kind === 'immediate') clearImmediate(t.h);
  else if (t.kind === 'interval') clearInterval(t.h);
  else clearTimeout(t.h);
}

// Writes the run's one result line; the teardown follows once the microtasks
// queued so far have run. recycle: a reason the worker must not be reused.
function _workerFinish(run, result, recycle) {
  if (run.done) return;
  run.done = true;
  if (recycle && !run.recycle) run.recycle = recycle;
  if (run.deadline) clearTimeout(run.deadline);
  _writeLine({ result });
  setImmediate(() => _workerTeardown(run));
}

function _workerTeardown(run) {
  for (const id of Array.from(run.timers.keys())) _cancelTimer(run, id);
  if (!run.recycle && run.limit) run.recycle = 'limit';
  if (!run.recycle && run.late) run.recycle = 'the run was still active after its result';
  if (!run.recycle && _leftoverAfter(_w.watch, run.tmpdir)) run.recycle = 'the run left files or IPC objects';
  if (!run.recycle && (run.touched || run.late) && _integrityChanged(_w.snapshot)) {
    run.recycle = "the run changed the worker's objects";
  }
  try {
    _chdir(_w.root);
  } catch (e) {}
  try {
    _fs.rmdirSync(run.tmpdir); // most runs write nothing: the cheap way first
  } catch (e) {
    try {
      _fs.rmSync(run.tmpdir, { recursive: true, force: true });
    } catch (e2) {
      if (!run.recycle) run.recycle = 'the run dir could not be removed';
    }
  }
  run.realm = null;
  run.ctx = null;
  _w.run = null;
  run.resolve(run.recycle);
}

// One run line: its result is written; resolves to a recycle reason or null.
function _workerRun(req) {
  return new Promise((resolve) => {
    const limits = req.limits && typeof req.limits === 'object' ? req.limits : {};
    const num = (v, d) => (typeof v === 'number' && v > 0 ? v : d);
    const timeoutMs = num(limits.timeoutMs, 10000);
    const diskMB = num(limits.diskMB, 10);
    let maxRequests = req.maxRequests;
    if (!Number.isInteger(maxRequests) || maxRequests < 0) maxRequests = DEFAULT_MAX_REQUESTS;
    const variables = req.variables == null ? {} : req.variables;
    if (typeof req.code !== 'string' || req.code.trim() === '') {
      _writeLine({ result: { success: false, message: 'Code cannot be empty' } });
      return resolve(null);
    }
    if (typeof variables !== 'object' || Array.isArray(variables)) {
      _writeLine({ result: { success: false, message: 'Invalid request: variables must be an object' } });
      return resolve(null);
    }
    // the root is a real path already, and mkdtemp makes the dir 0700
    const tmpdir = _fs.mkdtempSync(_path.join(_w.root, 'sandbox_'));
    _leftoverBefore(_w.watch, tmpdir);
    _chdir(tmpdir);
    const run = { done: false, late: false, touched: false, limit: false, recycle: null, logs: [], timers: new Map(), tmpdir, resolve,
      helpers: _makeHelpers(tmpdir, diskMB, maxRequests), ctx: null, realm: null, deadline: null };
    _w.run = run;
    const env = Object.assign({}, _realProcess.env, { TMPDIR: tmpdir, SANDBOX_TMPDIR: tmpdir });
    const cfg = _stringify({
      code: req.code, variables, tmpdir, env, uid: _w.uid, gid: _w.gid, allowed: ALLOWED_MODULES,
      importRe: _IMPORT_RE.source, modulesDir: _w.modulesDir, maxDelay: MAX_DELAY_MS,
      argv: [_realProcess.argv[0], 'main.js'], platform: _realProcess.platform, arch: _realProcess.arch,
      version: _realProcess.version, versions: _realProcess.versions, release: { name: _realProcess.release.name },
      pid: _realProcess.pid, ppid: _realProcess.ppid, title: _isBun ? 'bun' : 'node',
      timeOrigin: performance.timeOrigin,
    });
    run.deadline = setTimeout(() => {
      _workerFinish(run, { success: false, message: 'Script execution timed out after ' + _fmtNum(timeoutMs) + 'ms' },
        'timeout');
    }, timeoutMs);
    try {
      // From a null-prototype object: with {} the realm's global would fall back on
      // the worker's Object.prototype (globalThis.constructor, __proto__).
      run.ctx = _w.vm.createContext(Object.create(null));
      const setup = _w.setupScript.runInContext(run.ctx);
      run.realm = setup(_makeBridge(run), { globals: _w.globals, builtins: _w.builtins }, cfg);
      _w.goScript.runInContext(run.ctx, { timeout: timeoutMs });
    } catch (e) {
      // the vm's timeout (a busy synchronous part), or a failure of the set-up
      if (/timed out/i.test(_errMessage(e)) && !run.done) {
        _workerFinish(run, { success: false, message: 'Script execution timed out after ' + _fmtNum(timeoutMs) + 'ms' },
          'timeout');
      } else {
        _workerFinish(run, { success: false, message: 'Runner error: ' + _errMessage(e) }, 'runner error');
      }
    }
  });
}

function _workerExit() {
  if (_w.ownRoot) {
    try {
      _fs.rmSync(_w.ownRoot, { recursive: true, force: true });
    } catch (e) {}
  }
  _exit(0);
}

async function _workerMain(args) {
  _w.t0 = Date.now();
  if (args.tmpdirRoot) {
    _w.root = _fs.realpathSync(args.tmpdirRoot);
    _dropAndScrub(null); // the zygote's child dropped privileges and scrubbed already
  } else if (args.uid !== null && _realProcess.geteuid() === 0) {
    // Run dirs are made after the drop: under a dir of the worker's own, made
    // (as for a one-shot run) before it, and removed when the worker ends.
    _w.root = _w.ownRoot = _makeTmpdir(_tmpBase());
    _fs.chownSync(_w.root, args.uid, args.uid);
    _dropAndScrub(args.uid);
  } else {
    _w.root = _fs.realpathSync(_tmpBase());
    _dropAndScrub(args.uid);
  }
  _w.uid = _realProcess.getuid();
  _w.gid = _realProcess.getgid();
  _w.vm = _realRequire('vm');
  _w.builtins = { url: _realRequire('url'), querystring: _realRequire('querystring') };
  _w.globals = { URL, URLSearchParams, TextEncoder, TextDecoder, Buffer, atob, btoa, structuredClone };
  _w.setupScript = new _w.vm.Script('(' + _realmSetup.toString() + ')', { filename: 'agentbox-realm.js' });
  _w.goScript = new _w.vm.Script('__agentbox_go__()', { filename: 'agentbox-go.js' });
  _realProcess.on('unhandledRejection', () => {}); // a run's rejected promises end with its realm
  _realProcess.on('uncaughtException', (e) => {
    if (_w.run) _workerFinish(_w.run, { success: false, message: _errMessage(e) }, 'uncaught exception');
  });
  _installShims();
  _freezeExposed();
  _w.snapshot = _integritySnapshot(_integrityRoots());
  _w.watch = _leftoverWatchStart(_w.uid);
  _writeLine({ ready: true });
  for (let runs = 1; ; runs++) {
    let req;
    try {
      req = await _nextRequest();
    } catch (e) {
      if (e && e.eof) _workerExit();
      _writeLine({ result: { success: false, message: 'Invalid request: ' + _errMessage(e) } });
      _writeLine({ ready: true });
      continue;
    }
    let recycle;
    if (!req || typeof req !== 'object' || Array.isArray(req)) {
      _writeLine({ result: { success: false, message: 'Invalid request: not an object' } });
      recycle = null;
    } else {
      recycle = await _workerRun(req);
    }
    if (!recycle && runs >= args.maxRuns) recycle = 'max-runs';
    if (recycle) {
      _writeLine({ recycle });
      _workerExit();
    }
    _writeLine({ ready: true });
  }
}

// ---- the run ------------------------------------------------------------------------------
async function _run() {
  const args = _parseArgs(process.argv);
  const tmpdir = (_tmpdir = args.tmpdir ? args.tmpdir : _setupProcess(args.uid));
  _installShims();
  _writeLine({ ready: true });

  let req;
  try {
    req = await _nextRequest();
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
    logs.push(args.map((a) => _formatLogArg(a)).join(' '));
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
    _fail(_errMessage(err));
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

if (_parseArgs(process.argv).worker) {
  _workerMain(_parseArgs(process.argv)).catch((e) => {
    try {
      _writeLine({ recycle: 'runner error: ' + _errMessage(e) });
    } catch (e2) {}
    _exit(0);
  });
} else {
  _run().catch((e) => _fail('Runner error: ' + (e && e.message ? e.message : String(e))));
}
