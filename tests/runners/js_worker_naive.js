'use strict';
/*
 * A deliberately naive JS worker for test_js_worker.py --naive: it speaks the
 * worker protocol of runners/js/runner.js --worker but runs every snippet in
 * ONE shared realm (new Function in the worker's own global scope, the real
 * require, timers and process), never recycles, and keeps no run's dir
 * apart. test_js_worker.py run against it must fail: that shows its
 * fresh-context tests can fail. Not used by the product.
 */
const fs = require('fs');
const path = require('path');

let buf = Buffer.alloc(0);
function readLine() {
  const chunk = Buffer.alloc(65536);
  for (;;) {
    const nl = buf.indexOf(10);
    if (nl >= 0) {
      const line = buf.subarray(0, nl).toString();
      buf = buf.subarray(nl + 1);
      return JSON.parse(line);
    }
    const n = fs.readSync(0, chunk, 0, chunk.length, null);
    if (n === 0) process.exit(0);
    buf = Buffer.concat([buf, chunk.subarray(0, n)]);
  }
}
const out = (o) => fs.writeSync(1, JSON.stringify(o) + '\n');
const tmp = fs.mkdtempSync(path.join(process.env.TMPDIR || '/tmp', 'sandbox_'));

async function main() {
  out({ ready: true });
  for (;;) {
    const req = readLine();
    const logs = [];
    const log = (...a) => logs.push(a.map((x) => (typeof x === 'object' ? JSON.stringify(x) : String(x))).join(' '));
    const SystemHelper = {
      fs: {
        tmpDir: tmp,
        writeFile: (p, c) => fs.writeFileSync(path.join(tmp, p), c),
        readFile: (p) => fs.readFileSync(path.join(tmp, p), 'utf8'),
      },
      delay: (ms) => new Promise((r) => setTimeout(r, ms)),
      async httpRequest(url) {
        out({ http: { url, method: 'GET', headers: {}, body: null, timeout: 10000 } });
        return readLine().http_result;
      },
    };
    let result;
    try {
      const fn = new Function('require', 'console', 'SystemHelper', 'delay', 'httpRequest', 'variables',
        req.code + "\n;return typeof main === 'function' ? main : undefined;");
      const m = fn(require, { log, info: log, error: log }, SystemHelper, SystemHelper.delay,
        SystemHelper.httpRequest, req.variables || {});
      const v = await m(req.variables || {});
      result = { success: true, data: { codeReturn: v === undefined ? null : v, log: logs.join('\n') } };
    } catch (e) {
      result = { success: false, message: String(e && e.message) };
    }
    out({ result });
    out({ ready: true });
  }
}
main();
