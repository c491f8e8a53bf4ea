// console.mjs - drives the web console in headless Chromium (Debian's, through
// puppeteer-core from console/node_modules) and prints TAP; run by
// test_console.py, which starts the server and prepares the files.
//
//   node console.mjs CONFIG.json
// CONFIG: {base, token, app_key, shots, work, chromium, files: {...}}
import {createRequire} from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import crypto from 'node:crypto';

const cfg = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const require = createRequire(path.join(cfg.console_dir, 'package.json'));
const puppeteer = require('puppeteer-core');

let n = 0, failed = 0;
function ok(cond, name, diag) {
  n++;
  console.log(`${cond ? 'ok' : 'not ok'} ${n} - ${name}`);
  if (!cond) {
    failed++;
    if (diag !== undefined) for (const l of String(diag).split('\n').slice(0, 40)) console.log('# ' + l);
  }
  return !!cond;
}
function skip(name, why) { n++; console.log(`ok ${n} - ${name} # SKIP ${why}`); }
const sleep = ms => new Promise(r => setTimeout(r, ms));

async function apiCall(method, p, body, headers) {
  const h = {...(cfg.token ? {Authorization: 'Bearer ' + cfg.token} : {}), ...(headers || {})};
  if (body !== undefined && !(body instanceof Uint8Array) && typeof body !== 'string') {
    body = JSON.stringify(body);
    h['Content-Type'] = 'application/json';
  }
  const r = await fetch(cfg.base + p, {method, headers: h, body});
  const buf = Buffer.from(await r.arrayBuffer());
  let json = null;
  try { json = JSON.parse(buf.toString('utf8')); } catch (_) { /* not JSON */ }
  return {status: r.status, headers: r.headers, buf, json};
}

async function waitFile(dir, name, ms) {
  const p = path.join(dir, name);
  for (let t = 0; t < ms; t += 100) {
    if (fs.existsSync(p) && !fs.existsSync(p + '.crdownload')) {
      await sleep(100);
      return fs.readFileSync(p);
    }
    await sleep(100);
  }
  return null;
}

const shot = async (page, name) => {
  await page.screenshot({path: path.join(cfg.shots, name + '.png'), fullPage: true});
};

const browser = await puppeteer.launch({
  executablePath: cfg.chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run',
         '--disable-extensions', '--font-render-hinting=none'],
  defaultViewport: {width: 1280, height: 900},
  protocolTimeout: 60000,
});
let page;
try {
  page = await browser.newPage();
  page.setDefaultTimeout(20000);
  const urls = [];
  const pageErrors = [];
  page.on('request', r => urls.push(r.url()));
  page.on('pageerror', e => pageErrors.push(String(e)));
  page.on('dialog', d => d.accept());
  await page.evaluateOnNewDocument(() => {
    window.__csp = [];
    document.addEventListener('securitypolicyviolation',
      e => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI + ' ' + (e.sample || '')));
  });
  const dl = path.join(cfg.work, 'downloads');
  fs.mkdirSync(dl, {recursive: true});
  const cdp = await browser.target().createCDPSession();
  await cdp.send('Browser.setDownloadBehavior', {behavior: 'allow', downloadPath: dl});

  // ---- the page and its headers --------------------------------------------
  const resp = await page.goto(cfg.base + '/', {waitUntil: 'networkidle0'});
  const hd = resp.headers();
  const csp = hd['content-security-policy'] || '';
  ok(resp.status() === 200, 'GET / answers 200', resp.status());
  ok(/default-src 'self'/.test(csp) && /frame-ancestors 'none'/.test(csp) && !/unsafe-inline/.test(csp),
     "the console's CSP: default-src 'self', frame-ancestors 'none', no unsafe-inline", csp);
  ok(hd['x-content-type-options'] === 'nosniff', 'X-Content-Type-Options: nosniff', JSON.stringify(hd));

  // ---- login ----------------------------------------------------------------
  await page.waitForSelector('form.login input[type=password]');
  await shot(page, 'login');
  if (cfg.token) {
    await page.type('form.login input', 'wrong-token');
    await page.click('form.login button[type=submit]');
    await page.waitForFunction(() => document.querySelector('form.login .error')?.textContent.includes('refused'));
    ok(true, 'a wrong token is refused on the login form');
    await page.$eval('form.login input', el => { el.value = ''; });
  } else {
    // without a token the server takes any key from loopback as its admin
    // (docs/api.md, the SDKs' first run): there is no wrong token to refuse
    ok(true, 'no token on the server: no wrong token to refuse');
  }
  await page.type('form.login input', cfg.token);
  await page.click('form.login button[type=submit]');
  await page.waitForSelector('table#boxes');
  const stored = await page.evaluate(() => ({s: sessionStorage.getItem('agentbox.token'), l: localStorage.length,
                                             who: document.getElementById('who').textContent}));
  ok(stored.s === cfg.token && stored.l === 0, 'the token is kept in sessionStorage (nothing in localStorage)', JSON.stringify(stored));
  ok(stored.who.includes('admin'), 'the header says who is logged in (admin)', stored.who);

  // ---- create a box ---------------------------------------------------------
  await page.type('form.create input[name=app_id]', 'consoleapp');
  await page.type('form.create input[name=user_id]', 'u1');
  await page.type('form.create input[name=chat_id]', 'c1');
  await page.click('form.create button[type=submit]');
  await page.waitForFunction(() => location.hash.startsWith('#/box/'), {timeout: 60000});
  const boxId = decodeURIComponent(await page.evaluate(() => location.hash.slice(6)));
  // docs/api.md, "Box ids": sha256 of a tag and the keys as netstrings, 16 hex digits
  const ns = (...parts) => parts.map(p => Buffer.byteLength(p) + ':' + p + ',').join('');
  const want = crypto.createHash('sha256').update('agentbox-keys-v2,' + ns('consoleapp', 'u1', 'c1'))
    .digest('hex').slice(0, 16);
  ok(boxId === want, 'creating a box from the form opens its page (id from app/user/chat)', boxId + ' vs ' + want);
  await page.waitForFunction(() => document.querySelector('#box-state')?.textContent === 'running');
  ok(true, 'the box page shows the box running');

  // files the browser will list: one with markup as its name, one to preview
  const evil = '<img src=x onerror=window.__xss=1>';
  let r = await apiCall('PUT', `/v1/sandboxes/${boxId}/files?path=` + encodeURIComponent('/workspace/' + evil), 'x');
  ok(r.status === 201, 'a file named ' + evil + ' is written through the API', r.status + ' ' + r.buf);
  r = await apiCall('PUT', `/v1/sandboxes/${boxId}/files?path=/workspace/hello.txt`, 'hello <b>console</b>\n');
  r = await apiCall('POST', `/v1/sandboxes/${boxId}/exec`, {command: 'echo from-api-exec'});
  ok(r.status === 200 && r.json.stdout === 'from-api-exec\n', 'an exec through the API', r.status + ' ' + r.buf);
  const cspBefore = await page.evaluate(() => window.__csp);
  ok(cspBefore.length === 0, 'no CSP violation on the login, boxes and box pages', cspBefore.join('\n'));
  await page.reload({waitUntil: 'networkidle2'});

  // ---- exec history and events ----------------------------------------------
  await page.waitForFunction(() => document.querySelector('#execs')?.textContent.includes('echo from-api-exec'));
  ok(true, 'the exec history (GET .../execs) lists the exec');
  r = await apiCall('POST', `/v1/sandboxes/${boxId}/exec`, {command: 'echo live-event-exec'});
  await page.waitForFunction(() => document.querySelector('#events')?.textContent.includes('live-event-exec'))
    .then(() => ok(true, 'the events list shows a new exec live (SSE read with fetch)'),
          e => ok(false, 'the events list shows a new exec live (SSE read with fetch)', e));

  // ---- files ------------------------------------------------------------------
  await page.waitForFunction(() => [...document.querySelectorAll('#files button.name')].some(b => b.textContent === 'hello.txt'));
  const xss = await page.evaluate(name => ({
    shown: [...document.querySelectorAll('#files button.name')].some(b => b.textContent === name),
    imgs: document.querySelectorAll('#files img, main img').length,
    ran: window.__xss,
  }), evil);
  ok(xss.shown, 'the file named like markup is listed with its name as text', JSON.stringify(xss));
  ok(xss.imgs === 0 && xss.ran === undefined, 'no element made from it and no script ran', JSON.stringify(xss));

  const up = await page.$('#upload-input');
  await up.uploadFile(cfg.files.upload);
  await page.click('#upload-btn');
  const upName = path.basename(cfg.files.upload);
  await page.waitForFunction(n => [...document.querySelectorAll('#files button.name')].some(b => b.textContent === n), {}, upName)
    .then(() => ok(true, 'an uploaded file appears in the listing'),
          e => ok(false, 'an uploaded file appears in the listing', e));
  r = await apiCall('GET', `/v1/sandboxes/${boxId}/files?path=/workspace/${upName}`);
  const orig = fs.readFileSync(cfg.files.upload);
  ok(r.status === 200 && Buffer.compare(r.buf, orig) === 0, 'the upload reached the box byte for byte', r.status);
  await page.click(`#files button[aria-label="Download ${upName}"]`);
  const got = await waitFile(dl, upName, 20000);
  ok(got && Buffer.compare(got, orig) === 0, 'the file downloads back byte-identical',
     got ? `${got.length} bytes vs ${orig.length}` : 'no download');
  await page.click('#zip-btn');
  const zip = await waitFile(dl, 'workspace.zip', 20000);
  ok(zip && zip.subarray(0, 2).toString() === 'PK', 'the folder downloads as a zip', zip ? zip.subarray(0, 8) : 'no download');
  await page.evaluate(() => [...document.querySelectorAll('#files button.name')].find(b => b.textContent === 'hello.txt').click());
  await page.waitForFunction(() => document.querySelector('#preview pre')?.textContent === 'hello <b>console</b>\n')
    .then(() => ok(true, 'a text file previews as text'), e => ok(false, 'a text file previews as text', e));
  ok(await page.evaluate(() => document.querySelectorAll('#preview b').length === 0), 'the preview made no element from the markup in the file');

  // ---- actions and the network policy (before a terminal is attached: an
  // attached terminal is a use of the box, and a box in use is not paused) ------------------------------------------------
  await page.click('button[data-op="pause"]');
  await page.waitForFunction(() => document.querySelector('#box-state')?.textContent === 'paused')
    .then(() => ok(true, 'Pause pauses the box'),
          async e => ok(false, 'Pause pauses the box', e + '\n' + await page.evaluate(() =>
            document.querySelector('#toast').textContent + '\n' + document.querySelector('#events').textContent)));
  r = await apiCall('GET', `/v1/sandboxes/${boxId}`);
  ok(r.json?.status === 'paused', 'the API sees it paused', r.buf);
  await page.click('button[data-op="resume"]');
  await page.waitForFunction(() => document.querySelector('#box-state')?.textContent === 'running')
    .then(() => ok(true, 'Resume resumes it'), e => ok(false, 'Resume resumes it', e));
  await page.select('form.network select[name=mode]', 'allowlist');
  await page.type('form.network textarea[name=allow]', 'example.com\n*.example.org');
  await page.click('form.network button[type=submit]');
  let pol = null;
  for (let i = 0; i < 50; i++) {
    r = await apiCall('GET', `/v1/sandboxes/${boxId}/network`);
    pol = r.json;
    if (pol && pol.mode === 'allowlist') break;
    await sleep(100);
  }
  ok(pol && pol.mode === 'allowlist' && JSON.stringify(pol.allow) === '["example.com","*.example.org"]',
     'the network form sets the box policy', JSON.stringify(pol));

  // ---- the terminal -----------------------------------------------------------
  r = await apiCall('GET', `/v1/sandboxes/${boxId}/terminals`);
  const noRoute = r.status === 404 && /no route/.test(r.json?.error?.message || '');
  if (noRoute) {
    skip('typing echo hi in the terminal shows hi',
         'the server has no terminal API: GET /v1/sandboxes/{id}/terminals answered 404 "no route" (the term branch is not merged)');
  } else {
    await page.click('#term-new');
    await page.waitForSelector('#term .xterm-helper-textarea');
    await page.waitForFunction(() => document.querySelector('#term-status')?.textContent.startsWith('Connected'), {timeout: 30000})
      .then(() => ok(true, 'the terminal connects over a WebSocket (token as a subprotocol)'),
            async e => ok(false, 'the terminal connects over a WebSocket (token as a subprotocol)',
                          e + '\n' + await page.evaluate(() => document.querySelector('#term-status')?.textContent)));
    await sleep(500);
    await page.focus('#term .xterm-helper-textarea');
    await page.keyboard.type('echo hi\n', {delay: 20});
    const lines = () => [...document.querySelectorAll('#term .xterm-rows > div')].map(d => d.textContent.trimEnd());
    await page.waitForFunction(`(${lines})().includes('hi')`, {timeout: 20000})
      .then(() => ok(true, 'typing echo hi in the terminal shows hi'),
            async e => ok(false, 'typing echo hi in the terminal shows hi', e + '\n' + (await page.evaluate(lines)).join('\n')));
    const rowH = await page.evaluate(() => document.querySelector('#term .xterm-rows > div')?.getBoundingClientRect().height || 0);
    ok(rowH > 5, "xterm.js's styles apply under the CSP (rows have a height)", rowH);
  }
  await shot(page, 'box');


  // ---- skills -------------------------------------------------------------------
  await page.goto(cfg.base + '/#/skills', {waitUntil: 'networkidle2'});
  await page.waitForSelector('table#skills');
  const name = await page.$('form.skill-upload input[name=name]');
  const arch = await page.$('form.skill-upload input[type=file]');
  await name.type('bad-skill');
  await arch.uploadFile(cfg.files.bad_skill);
  await page.click('#skill-validate');
  await page.waitForSelector('#skill-valid');
  let rep = await page.$eval('#skill-report', el => el.textContent);
  ok(rep.startsWith('Not valid') && /another-name/.test(rep), 'a skill whose name does not match: the validation shows why', rep);
  await name.click({clickCount: 3});
  await page.keyboard.press('Backspace');
  await name.type('console-skill');
  await arch.uploadFile(cfg.files.good_skill);
  await page.click('#skill-validate');
  await page.waitForFunction(() => document.querySelector('#skill-valid')?.textContent.startsWith('Valid'))
    .then(() => ok(true, 'a good skill validates'), async e => ok(false, 'a good skill validates', await page.$eval('#skill-report', el => el.textContent)));
  await page.click('#skill-install');
  await page.waitForSelector('#skills tr[data-name="console-skill"]')
    .then(() => ok(true, 'installing it lists it'), e => ok(false, 'installing it lists it', e));
  await shot(page, 'skills');

  // ---- playground ---------------------------------------------------------------
  await page.goto(cfg.base + '/#/playground', {waitUntil: 'networkidle2'});
  await page.waitForSelector('#pg-code');
  await page.$eval('#pg-code', el => { el.value = 'def main(a, b):\n    print("py", a * b)\n    return {"product": a * b, "n": len([a, b])}\n'; });
  await page.$eval('#pg-vars', el => { el.value = '{"a": 6, "b": 7}'; });
  await page.click('#pg-run');
  await page.waitForSelector('#pg-return, #pg-error', {timeout: 60000});
  const ret = await page.evaluate(() => ({ret: document.querySelector('#pg-return')?.textContent, log: document.querySelector('#pg-log')?.textContent,
                                          err: document.querySelector('#pg-error')?.textContent}));
  let parsed = null;
  try { parsed = JSON.parse(ret.ret); } catch (_) { /* shown below */ }
  ok(parsed && parsed.product === 42 && parsed.n === 2 && /py 42/.test(ret.log || ''), 'a Python snippet runs in the playground', JSON.stringify(ret));
  await shot(page, 'playground');

  // ---- chat (the stand-in model: a bash call, then text quoting its output) ---------
  await page.goto(cfg.base + '/#/chat', {waitUntil: 'networkidle2'});
  await page.waitForSelector('#chat-input');
  await page.type('#chat-input', 'run it [[tool]]');
  await page.click('#chat-send');
  await page.waitForFunction(() => /Ended: stop/.test(document.querySelector('#chat-usage')?.textContent || ''),
                             {timeout: 60000}).catch(() => {});
  const chat = await page.evaluate(() => ({log: document.querySelector('#chat-log')?.textContent || '',
                                           usage: document.querySelector('#chat-usage')?.textContent || ''}));
  ok(/Tool bash/.test(chat.log) && /The box said: hi-from-box/.test(chat.log) && /Ended: stop/.test(chat.usage),
     'the chat page shows the tool call, the answer and the usage', JSON.stringify(chat));
  await shot(page, 'chat');

  // ---- server -------------------------------------------------------------------
  await page.goto(cfg.base + '/#/server', {waitUntil: 'networkidle2'});
  await page.waitForFunction(() => document.querySelectorAll('#charts svg polyline').length >= 4 &&
                                   document.querySelector('#health')?.textContent.includes('ok'), {timeout: 30000})
    .then(() => ok(true, 'the server page shows health and metric charts'), e => ok(false, 'the server page shows health and metric charts', e));
  await sleep(4500); // a few samples, so the charts have lines
  await shot(page, 'server');

  // ---- the boxes list ------------------------------------------------------------
  await page.goto(cfg.base + '/#/boxes', {waitUntil: 'networkidle2'});
  await page.waitForFunction(id => document.querySelector(`#boxes tr[data-id="${id}"]`)?.textContent.includes('MiB'), {}, boxId)
    .then(() => ok(true, 'the boxes list shows the box with its usage'), e => ok(false, 'the boxes list shows the box with its usage', e));
  await sleep(4500); // one refresh more: the CPU column has two samples
  await shot(page, 'boxes');
  await page.type('form.filters input[name=app_id]', 'no-such-app');
  await page.waitForFunction(() => !document.querySelector('#boxes tbody tr[data-id]'))
    .then(() => ok(true, 'the app filter hides boxes of other apps'), e => ok(false, 'the app filter hides boxes of other apps', e));
  await page.$eval('form.filters input[name=app_id]', el => { el.value = ''; });
  await page.type('form.filters input[name=app_id]', 'consoleapp');
  await page.waitForFunction(id => document.querySelector(`#boxes tr[data-id="${id}"]`), {}, boxId)
    .then(() => ok(true, 'filtering by its app shows the box'), e => ok(false, 'filtering by its app shows the box', e));
  await page.$eval('form.filters input[name=app_id]', el => { el.value = ''; el.dispatchEvent(new Event('input', {bubbles: true})); });

  // ---- delete from the box page -------------------------------------------------------
  await page.goto(cfg.base + '/#/box/' + boxId, {waitUntil: 'networkidle2'});
  await page.waitForFunction(() => document.querySelector('#box-state')?.textContent === 'running');
  const cspBox = await page.evaluate(() => window.__csp);
  await page.evaluate(() => [...document.querySelectorAll('.actions button')].find(b => b.textContent === 'Delete').click());
  await page.waitForFunction(() => location.hash === '#/boxes');
  r = await apiCall('GET', `/v1/sandboxes/${boxId}`);
  ok(r.status === 404 || r.json?.status === 'deleting', 'Delete (confirmed) deletes the box and goes back to the list', r.status + ' ' + r.buf);

  const cspAll = cspBox.concat(await page.evaluate(() => window.__csp));
  ok(cspAll.length === 0, 'no CSP violation on the skills, playground, server and boxes pages (nor the terminal)', cspAll.join('\n'));
  ok(pageErrors.length === 0, 'no uncaught script error', pageErrors.join('\n'));
  const leaked = urls.filter(u => (cfg.token && u.includes(cfg.token)) || u.includes(cfg.app_key));
  ok(leaked.length === 0, 'no request URL carries the token', leaked.join('\n'));

  // ---- an app-scoped API key sees its app only --------------------------------------
  const keep = (await apiCall('POST', '/v1/sandboxes', {app_id: 'consoleapp', user_id: 'u1', chat_id: 'keep'})).json?.id;
  const other = (await apiCall('POST', '/v1/sandboxes', {app_id: 'otherapp', user_id: 'u1', chat_id: 'c1'})).json?.id;
  await page.click('#logout');
  await page.waitForSelector('form.login input[type=password]');
  await page.type('form.login input', cfg.app_key);
  await page.click('form.login button[type=submit]');
  await page.waitForSelector('table#boxes');
  await page.waitForFunction(id => document.querySelector(`#boxes tr[data-id="${id}"]`), {}, other).catch(() => {});
  const seen = await page.evaluate(() => ({rows: [...document.querySelectorAll('#boxes tbody tr[data-id]')].map(t => t.dataset.id),
                                           who: document.getElementById('who').textContent}));
  ok(keep && other && !seen.rows.includes(keep) && seen.rows.includes(other) && seen.who.includes('API key'),
     "an API key sees its app's box, not another app's", JSON.stringify({keep, other, seen}));
} catch (e) {
  ok(false, 'the browser run ended early', e && e.stack ? e.stack : e);
  if (page) await shot(page, 'failure').catch(() => {});
} finally {
  await browser.close();
}
console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
