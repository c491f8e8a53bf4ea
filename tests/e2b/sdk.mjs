// E2B's JS SDK (the npm package `e2b`, pinned in package.json) driving
// agentbox's E2B front, unchanged: pointed at the server by E2B_API_URL,
// E2B_SANDBOX_URL and E2B_API_KEY (set by tests/integration/test_e2b_sdk.py).
// Prints TAP ("ok - name" / "not ok - name" + "# detail" lines); the Python
// wrapper relays each line as one of its tests.
//
//   node sdk.mjs SERVER_URL ADMIN_TOKEN PORTS_DOMAIN
import http from 'node:http';
import { finish, ok, restApi, sleep, step, thrown } from './tap.mjs';
// E2B_SDK_MODULE names the SDK: "e2b" (2.51.0, the default) or "e2b-2.45.0"
// (an npm alias of 2.45.0; tests/e2b/package.json).
const { AuthenticationError, CommandExitError, NotFoundError, Sandbox, TimeoutError } = await import(
  process.env.E2B_SDK_MODULE || 'e2b'
);

const [server, adminToken, portsDomain] = process.argv.slice(2);
const api = restApi(server, adminToken);

// ---- create, info, list ------------------------------------------------------------
const tag = `t${process.pid}`;
const sbx = await step('Sandbox.create', () =>
  Sandbox.create({ metadata: { suite: tag, kind: 'main' }, envs: { E2B_TEST_VAR: 'v42' }, timeoutMs: 600_000 }),
);
if (!sbx) {
  console.log('Bail out! no sandbox');
  process.exit(1);
}
ok(/^[a-z0-9]{20}$/.test(sbx.sandboxId), 'create: a sandbox id', sbx.sandboxId);

await step('getInfo', async () => {
  const info = await sbx.getInfo();
  ok(info.sandboxId === sbx.sandboxId && info.state === 'running', 'getInfo: the sandbox, running', info);
  ok(info.metadata.suite === tag && info.metadata.kind === 'main', 'getInfo: the metadata given at create', info);
  ok(info.templateId === 'base', 'getInfo: templateId base (the host base)', info);
  const left = info.endAt.getTime() - Date.now();
  ok(left > 500_000 && left <= 601_000, 'getInfo: endAt is the timeout from now', { left });
});

await step('Sandbox.list', async () => {
  const p = Sandbox.list({ query: { metadata: { suite: tag } } });
  const items = await p.nextItems();
  ok(items.length === 1 && items[0].sandboxId === sbx.sandboxId, 'list with a metadata filter: our sandbox', items);
  const none = await Sandbox.list({ query: { metadata: { suite: 'no-such-suite' } } }).nextItems();
  ok(none.length === 0, 'list: a metadata filter matching nothing gives nothing', none);
  const running = await Sandbox.list({ query: { state: ['running'], metadata: { suite: tag } } }).nextItems();
  ok(running.length === 1, 'list with state [running]', running);
  const base = await Sandbox.list({ query: { template: 'base', metadata: { suite: tag } } }).nextItems();
  const other = await Sandbox.list({ query: { template: 'no-such-template', metadata: { suite: tag } } }).nextItems();
  ok(base.length === 1 && other.length === 0, 'list with a template filter', { base, other });
  const before = await Sandbox.list({ query: { startedAfter: new Date(Date.now() - 3600_000), metadata: { suite: tag } } }).nextItems();
  const future = await Sandbox.list({ query: { startedAfter: new Date(Date.now() + 60_000), metadata: { suite: tag } } }).nextItems();
  ok(before.length === 1 && future.length === 0, 'list with startedAfter', { before, future });
  const paused = await Sandbox.list({ query: { state: ['paused'], metadata: { suite: tag } } }).nextItems();
  ok(paused.length === 0, 'list with state [paused]: none yet', paused);
});

// ---- commands -------------------------------------------------------------------------
await step('commands.run', async () => {
  const r = await sbx.commands.run('echo hi; echo oops >&2; echo "$E2B_TEST_VAR"');
  ok(r.exitCode === 0 && r.stdout === 'hi\nv42\n' && r.stderr === 'oops\n',
    'run: exit code, stdout, stderr, the envs given at create', r);
  const r2 = await sbx.commands.run('echo "$X-$(pwd)"', { envs: { X: 'y' }, cwd: '/tmp' });
  ok(r2.stdout === 'y-/tmp\n', 'run: envs and cwd of the call', r2);
  const who = await sbx.commands.run('id -un', { user: 'nobody' });
  const root = await sbx.commands.run('id -un', { user: 'root' });
  const dflt = await sbx.commands.run('id -un; pwd');
  ok(who.stdout === 'nobody\n' && root.stdout === 'root\n' && dflt.stdout === 'user\n/home/user\n',
    'run: the user option (nobody, root), the default user and cwd', [who.stdout, root.stdout, dflt.stdout]);
});

await step('command not found', async () => {
  const e = await thrown(() => sbx.commands.run('no-such-command-e2b'));
  ok(e instanceof CommandExitError && e.exitCode === 127 && /not found/.test(e.stderr),
    'a missing command: CommandExitError with exit code 127', e && { name: e.name, exitCode: e.exitCode, stderr: e.stderr });
  const e2 = await thrown(() => sbx.commands.run('exit 3'));
  ok(e2 instanceof CommandExitError && e2.exitCode === 3, 'exit 3: CommandExitError 3', e2 && e2.message);
});

await step('command timeout', async () => {
  const t0 = Date.now();
  const e = await thrown(() => sbx.commands.run('sleep 30', { timeoutMs: 1000 }));
  const dt = Date.now() - t0;
  ok(e instanceof TimeoutError && dt < 10_000, 'timeoutMs: a longer command is a TimeoutError', e && `${e.name}: ${e.message} after ${dt} ms`);
  await sleep(300);
  const procs = await sbx.commands.list();
  ok(!procs.some((p) => p.args.join(' ').includes('sleep 30')), 'the timed-out command was killed', procs);
});

await step('streaming output', async () => {
  const seen = [];
  const t0 = Date.now();
  const r = await sbx.commands.run('for i in 1 2 3; do echo line$i; sleep 0.5; done', {
    onStdout: (d) => seen.push([Date.now() - t0, d]),
  });
  const end = Date.now() - t0;
  ok(r.stdout === 'line1\nline2\nline3\n', 'streamed command: all of stdout', r);
  ok(seen.length >= 2 && seen[0][1].startsWith('line1'), 'onStdout: one callback per chunk', seen);
  ok(seen.length > 0 && seen[0][0] < end - 700, 'onStdout: the first line arrives while the command runs', { seen, end });
  const errs = [];
  await sbx.commands.run('echo e1 >&2', { onStderr: (d) => errs.push(d) });
  ok(errs.join('') === 'e1\n', 'onStderr', errs);
});

await step('concurrent commands', async () => {
  const runs = await Promise.all(Array.from({ length: 20 }, (_, i) =>
    sbx.commands.run(`sleep 0.$((RANDOM % 5)); echo job-${i}; echo err-${i} >&2`)));
  ok(runs.every((r, i) => r.stdout === `job-${i}\n` && r.stderr === `err-${i}\n` && r.exitCode === 0),
    '20 commands at once: each gets its own output', runs.map((r) => r.stdout + r.stderr));
  const bg = await Promise.all(Array.from({ length: 10 }, () => sbx.commands.run('sleep 30', { background: true })));
  const pids = new Set(bg.map((h) => h.pid));
  const listed = await sbx.commands.list();
  ok(pids.size === 10 && bg.every((h) => listed.some((p) => p.pid === h.pid)), '10 background commands: 10 pids, all listed', { pids: [...pids], listed: listed.length });
  await Promise.all(bg.map((h) => h.kill()));
  await Promise.all(bg.map((h) => h.wait().catch(() => null)));
  const after = await sbx.commands.list();
  ok(!after.some((p) => pids.has(p.pid)), 'all killed', after);
});

await step('stdin', async () => {
  const h = await sbx.commands.run('cat', { background: true, stdin: true });
  await h.sendStdin('hello ');
  await sbx.commands.sendStdin(h.pid, 'stdin\n');
  await sbx.commands.closeStdin(h.pid);
  const r = await h.wait();
  ok(r.stdout === 'hello stdin\n', 'sendStdin twice, closeStdin: cat echoes it and ends', r);
});

await step('background, list, connect, kill', async () => {
  const h = await sbx.commands.run('echo started; sleep 1; echo later; sleep 100', { background: true });
  ok(Number.isInteger(h.pid) && h.pid > 1, 'background: a pid', h.pid);
  const procs = await sbx.commands.list();
  const me = procs.find((p) => p.pid === h.pid);
  ok(me && me.cmd === '/bin/bash' && me.args.includes('-c'), 'commands.list: the process, its cmd and args', procs);
  const inbox = await sbx.commands.run(`kill -0 ${h.pid} && cat /proc/${h.pid}/cmdline | tr '\\0' ' '`);
  ok(inbox.stdout.includes('sleep 100'), 'the pid is the process pid in the sandbox', inbox);
  const out = [];
  const c = await sbx.commands.connect(h.pid, { onStdout: (d) => out.push(d) });
  await sleep(1500);
  ok(out.join('').includes('later'), 'commands.connect: output produced after connecting', out);
  ok(await sbx.commands.kill(h.pid), 'commands.kill: true for a running process');
  const e = await thrown(() => h.wait());
  ok(e instanceof CommandExitError, 'a killed process: wait() throws CommandExitError', e && e.message);
  await thrown(() => c.wait());
  await sleep(200);
  const after = await sbx.commands.list();
  ok(!after.some((p) => p.pid === h.pid), 'killed: gone from commands.list', after);
  ok((await sbx.commands.kill(h.pid)) === false, 'commands.kill of a gone pid: false');
  const t = await sbx.commands.run('trap "echo term; exit 0" TERM; echo ready; while :; do sleep 0.1; done',
    { background: true });
  await sleep(500);
  // SIGTERM through the Connect API (the SDK itself only sends SIGKILL)
  const res = await fetch(`${server}/e2b/envd/process.Process/SendSignal`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': sbx.envdAccessToken },
    body: JSON.stringify({ process: { pid: t.pid }, signal: 'SIGNAL_SIGTERM' }),
  });
  ok(res.status === 200, 'SendSignal SIGTERM: 200', await res.text());
  const tr = await t.wait().catch((err) => err);
  ok(tr && tr.stdout && tr.stdout.includes('term'), 'SIGTERM reaches the process (its trap runs)', tr && tr.stdout);
});

await step('tags (Connect RPC, as envd clients other than the SDK use them)', async () => {
  const hdrs = { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': sbx.envdAccessToken };
  const msg = Buffer.from(JSON.stringify({ process: { cmd: '/bin/sh', args: ['-c', 'sleep 30'] }, tag: 'job-7' }));
  const head = Buffer.alloc(5);
  head.writeUInt32BE(msg.length, 1);
  const ctl = new AbortController();
  const res = await fetch(`${server}/e2b/envd/process.Process/Start`, {
    method: 'POST', signal: ctl.signal,
    headers: { ...hdrs, 'Content-Type': 'application/connect+json', 'Connect-Protocol-Version': '1' },
    body: Buffer.concat([head, msg]),
  });
  const reader = res.body.getReader();
  const first = await reader.read();
  const buf = Buffer.from(first.value);
  const start = JSON.parse(buf.subarray(5, 5 + buf.readUInt32BE(1)).toString());
  ok(res.headers.get('content-type') === 'application/connect+json' && buf[0] === 0 && start.event.start.pid > 0,
    'Start (server streaming): an envelope with the start event first', start);
  const procs = await sbx.commands.list();
  ok(procs.some((p) => p.tag === 'job-7' && p.pid === start.event.start.pid), 'List shows the tag', procs);
  const sig = await fetch(`${server}/e2b/envd/process.Process/SendSignal`, {
    method: 'POST', headers: { ...hdrs, 'Content-Type': 'application/json' },
    body: JSON.stringify({ process: { tag: 'job-7' }, signal: 'SIGNAL_SIGKILL' }),
  });
  ok(sig.status === 200, 'SendSignal by tag', await sig.text());
  let rest = Buffer.alloc(0);
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    rest = Buffer.concat([rest, Buffer.from(value)]);
  }
  const frames = [];
  for (let o = 0; o + 5 <= rest.length; o += 5 + rest.readUInt32BE(o + 1))
    frames.push([rest[o], JSON.parse(rest.subarray(o + 5, o + 5 + rest.readUInt32BE(o + 1)).toString())]);
  const last = frames[frames.length - 1];
  ok(frames.some(([, f]) => f.event && f.event.end) && last && last[0] === 2 && JSON.stringify(last[1]) === '{}',
    'the stream ends with an end event, then the end-of-stream envelope', frames);
  const bad = await fetch(`${server}/e2b/envd/process.Process/SendInput`, {
    method: 'POST', headers: { ...hdrs, 'Content-Type': 'application/json' },
    body: JSON.stringify({ process: { pid: 999999 }, input: { stdin: 'eA==' } }),
  });
  const badj = await bad.json();
  ok(bad.status === 404 && badj.code === 'not_found', 'unary error: HTTP 404 with a Connect error body', badj);
});

await step('pty', async () => {
  const chunks = [];
  const dec = new TextDecoder();
  const term = await sbx.pty.create({ cols: 100, rows: 30, onData: (d) => chunks.push(dec.decode(d)) });
  ok(Number.isInteger(term.pid) && term.pid > 0, 'pty.create: a pid', term.pid);
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size; echo pty-$((6*7))\n'));
  for (let i = 0; i < 50 && !chunks.join('').includes('pty-42'); i++) await sleep(100);
  ok(chunks.join('').includes('pty-42'), 'pty.sendInput: the shell runs it, output as onData', chunks.join(''));
  ok(chunks.join('').includes('30 100'), 'the PTY has the size given', chunks.join(''));
  await sbx.pty.resize(term.pid, { cols: 120, rows: 40 });
  await sbx.pty.sendInput(term.pid, new TextEncoder().encode('stty size\n'));
  for (let i = 0; i < 50 && !chunks.join('').includes('40 120'); i++) await sleep(100);
  ok(chunks.join('').includes('40 120'), 'pty.resize', chunks.join('').slice(-300));
  ok((await sbx.commands.list()).some((p) => p.pid === term.pid), 'the PTY is in commands.list');
  ok(await sbx.pty.kill(term.pid), 'pty.kill');
  const e = await thrown(() => term.wait());
  ok(e instanceof CommandExitError, 'a killed PTY: wait() throws CommandExitError', e && e.message);
  const t2 = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} });
  await sbx.pty.sendInput(t2.pid, new TextEncoder().encode('exit 5\n'));
  const e2 = await thrown(() => t2.wait());
  ok(e2 instanceof CommandExitError && e2.exitCode === 5, 'a PTY whose shell exits 5: exit code 5', e2 && e2.message);
});

// ---- files -------------------------------------------------------------------------
await step('files', async () => {
  const w = await sbx.files.write('/home/user/dir/a.txt', 'alpha\n');
  ok(w.path === '/home/user/dir/a.txt' && w.name === 'a.txt', 'files.write: entry info', w);
  ok((await sbx.files.read('/home/user/dir/a.txt')) === 'alpha\n', 'files.read: the content');
  const bytes = await sbx.files.read('/home/user/dir/a.txt', { format: 'bytes' });
  ok(bytes instanceof Uint8Array && bytes.length === 6, 'files.read bytes', bytes);
  const multi = await sbx.files.write([
    { path: '/home/user/dir/b.txt', data: 'beta' },
    { path: '/home/user/dir/sub/c.bin', data: new Uint8Array([0, 1, 2, 255]) },
  ]);
  ok(Array.isArray(multi) && multi.length === 2, 'files.write of several files (one multipart request)', multi);
  const c = await sbx.files.read('/home/user/dir/sub/c.bin', { format: 'bytes' });
  ok(c.length === 4 && c[3] === 255, 'binary content kept', Array.from(c));
  const rel = await sbx.commands.run('cat dir/b.txt');
  ok(rel.stdout === 'beta', 'a command in /home/user reads what files.write put there', rel);
  const list = await sbx.files.list('/home/user/dir');
  const names = list.map((e) => `${e.name}:${e.type}`).sort();
  ok(JSON.stringify(names) === JSON.stringify(['a.txt:file', 'b.txt:file', 'sub:dir']), 'files.list', list);
  const a = list.find((e) => e.name === 'a.txt');
  ok(a && a.size === 6 && a.path === '/home/user/dir/a.txt' && a.modifiedTime instanceof Date &&
    Math.abs(a.modifiedTime.getTime() - Date.now()) < 120_000 && /^-rw/.test(a.permissions), 'files.list: size, path, mtime, permissions', a);
  const deep = await sbx.files.list('/home/user/dir', { depth: 2 });
  ok(deep.some((e) => e.path === '/home/user/dir/sub/c.bin'), 'files.list depth 2', deep.map((e) => e.path));
  ok(await sbx.files.exists('/home/user/dir/a.txt'), 'files.exists: true');
  ok(!(await sbx.files.exists('/home/user/dir/nope')), 'files.exists: false');
  const info = await sbx.files.getInfo('/home/user/dir');
  ok(info.type === 'dir' && info.name === 'dir', 'files.getInfo of a directory', info);
  const mv = await sbx.files.rename('/home/user/dir/a.txt', '/home/user/dir/renamed.txt');
  ok(mv.path === '/home/user/dir/renamed.txt', 'files.rename: the new entry', mv);
  ok(!(await sbx.files.exists('/home/user/dir/a.txt')) && (await sbx.files.read('/home/user/dir/renamed.txt')) === 'alpha\n',
    'files.rename: moved');
  ok(await sbx.files.makeDir('/home/user/dir/new/deeper'), 'files.makeDir: true for a new one');
  ok((await sbx.files.makeDir('/home/user/dir/new/deeper')) === false, 'files.makeDir: false when it exists');
  await sbx.files.remove('/home/user/dir/sub');
  ok(!(await sbx.files.exists('/home/user/dir/sub')), 'files.remove of a directory tree');
  const e = await thrown(() => sbx.files.read('/home/user/dir/missing.txt'));
  ok(e instanceof NotFoundError, 'files.read of a missing file: NotFoundError', e && `${e.name}: ${e.message}`);
  const e2 = await thrown(() => sbx.files.list('/home/user/nodir'));
  ok(e2 instanceof NotFoundError, 'files.list of a missing directory: NotFoundError', e2 && `${e2.name}: ${e2.message}`);
  const streamed = await sbx.files.write('/home/user/streamed.txt', new Blob(['from a stream']).stream());
  ok(streamed.path === '/home/user/streamed.txt' && (await sbx.files.read('/home/user/streamed.txt')) === 'from a stream',
    'files.write of a ReadableStream (an octet-stream upload)', streamed);
  const gz = await sbx.files.write('/home/user/gz.txt', 'zipped', { gzip: true });
  ok(gz.path === '/home/user/gz.txt' && (await sbx.files.read('/home/user/gz.txt')) === 'zipped',
    'a gzip upload lands inflated', gz);
  const big = 'x'.repeat(3 << 20);
  await sbx.files.write('/home/user/big.txt', big);
  ok((await sbx.files.read('/home/user/big.txt')).length === big.length, 'a 3 MiB file round trip');
});

await step('watchDir', async () => {
  await sbx.files.makeDir('/home/user/w');
  await sbx.files.write('/home/user/w/old.txt', '1');
  const events = [];
  const handle = await sbx.files.watchDir('/home/user/w', (ev) => events.push(ev), { timeoutMs: 0 });
  await sbx.files.write('/home/user/w/new.txt', 'n');
  await sleep(600);
  await sbx.commands.run('echo more >> /home/user/w/old.txt');
  await sleep(600);
  await sbx.files.remove('/home/user/w/new.txt');
  await sleep(800);
  await handle.stop();
  const has = (name, type) => events.some((e) => e.name === name && e.type === type);
  ok(has('new.txt', 'create'), 'watchDir: create', events);
  ok(has('old.txt', 'write'), 'watchDir: write', events);
  ok(has('new.txt', 'remove'), 'watchDir: remove', events);
  ok(!events.some((e) => e.name === 'old.txt' && e.type === 'create'), 'watchDir: what existed before is no event', events);
  const rec = [];
  const h2 = await sbx.files.watchDir('/home/user/w', (ev) => rec.push(ev), { recursive: true, timeoutMs: 0 });
  await sbx.files.write('/home/user/w/d/e/f.txt', 'deep');
  await sleep(800);
  await h2.stop();
  ok(rec.some((e) => e.name === 'd/e/f.txt' && e.type === 'create'), 'watchDir recursive: a file deep down', rec);
  const e = await thrown(() => sbx.files.watchDir('/home/user/nodir', () => {}));
  ok(e instanceof NotFoundError, 'watchDir of a missing directory: NotFoundError', e && `${e.name}: ${e.message}`);
});

await step('fork', async () => {
  await sbx.files.write('/home/user/forked.txt', 'from the source');
  const [f] = await sbx.fork({ count: 1 });
  ok(f instanceof Sandbox && f.sandboxId !== sbx.sandboxId, 'sandbox.fork: a new sandbox', f && (f.message || f.sandboxId));
  if (f instanceof Sandbox) {
    ok((await f.files.read('/home/user/forked.txt')) === 'from the source', 'the fork has the files');
    const info = await f.getInfo();
    ok(info.metadata.suite === tag, 'the fork keeps the metadata', info.metadata);
    ok(await f.kill(), 'the fork is killed on its own');
  }
  ok(await sbx.isRunning(), 'the source still runs (isRunning)');
});

// ---- a dev server in the box, through the port route and getHost ------------------
await step('dev server', async () => {
  await sbx.files.write('/home/user/site/index.html', 'served-by-box');
  const srv = await sbx.commands.run('cd /home/user/site && exec python3 -m http.server 8000', { background: true, timeoutMs: 0 });
  let body = '';
  for (let i = 0; i < 50 && !body.includes('served-by-box'); i++) {
    await sleep(200);
    const r = await fetch(`${server}/v1/sandboxes/${sbx.sandboxId}/ports/8000/index.html`, {
      headers: { 'X-API-Key': adminToken },
    }).catch(() => null);
    body = r && r.ok ? await r.text() : '';
  }
  ok(body === 'served-by-box', 'a server in the box answers through /v1/sandboxes/{id}/ports/8000/', body);
  const host = sbx.getHost(8000);
  ok(host === `8000-${sbx.sandboxId}.${portsDomain}`, 'getHost(8000): PORT-ID.ports_domain', host);
  const url = new URL(server);
  const got = await new Promise((resolve) => {
    const req = http.request({ host: url.hostname, port: url.port, path: '/index.html',
      headers: { Host: `${host}:${url.port}`, 'X-API-Key': adminToken } }, (res) => {
      let d = '';
      res.on('data', (c) => (d += c));
      res.on('end', () => resolve(`${res.statusCode} ${d}`));
    });
    req.on('error', (e) => resolve(String(e)));
    req.end();
  });
  ok(got === '200 served-by-box', 'and by host name: the getHost(8000) name reaches it', got);
  await srv.kill();
});

// ---- timeout, pause, connect ---------------------------------------------------------
await step('setTimeout', async () => {
  await sbx.setTimeout(120_000);
  const info = await sbx.getInfo();
  const left = info.endAt.getTime() - Date.now();
  ok(left > 100_000 && left <= 122_000, 'setTimeout: endAt moves to now + timeout', { left });
  await sbx.setTimeout(600_000);
});

await step('pause and connect', async () => {
  await sbx.files.write('/home/user/keep.txt', 'kept across pause');
  await sbx.commands.run('echo proc-state > /tmp/in-memory-fs.txt');
  const ticker = await sbx.commands.run('i=0; while :; do i=$((i+1)); echo $i > /tmp/ticks; sleep 0.1; done',
    { background: true, timeoutMs: 0 });
  await sleep(500);
  const before = Number((await sbx.commands.run('cat /tmp/ticks')).stdout);
  ok(await sbx.pause(), 'pause: true (with a background process running)');
  await sleep(1500); /* 15 ticks, were it not frozen */
  const info = await Sandbox.getInfo(sbx.sandboxId);
  ok(info.state === 'paused', 'getInfo after pause: paused', info);
  const listed = await Sandbox.list({ query: { state: ['paused'], metadata: { suite: tag } } }).nextItems();
  ok(listed.length === 1, 'list state [paused]: the paused sandbox', listed);
  ok((await Sandbox.pause(sbx.sandboxId)) === false, 'pause of a paused sandbox: false');
  const again = await Sandbox.connect(sbx.sandboxId);
  ok((await Sandbox.getInfo(sbx.sandboxId)).state === 'running', 'Sandbox.connect resumes it');
  ok((await again.files.read('/home/user/keep.txt')) === 'kept across pause', 'the files are kept');
  const r = await again.commands.run('cat /tmp/in-memory-fs.txt');
  ok(r.stdout === 'proc-state\n', 'pause keeps the running box (its tmpfs) as it was', r);
  const atResume = Number((await again.commands.run('cat /tmp/ticks')).stdout);
  await sleep(800);
  const later = Number((await again.commands.run('cat /tmp/ticks')).stdout);
  ok(atResume - before < 8, 'the background process was frozen while paused', { before, atResume });
  ok(later > atResume, 'and goes on after the resume', { atResume, later });
  ok((await again.commands.list()).some((p) => p.pid === ticker.pid), 'it is still in commands.list');
  await again.commands.kill(ticker.pid);
});

// ---- errors and auth ---------------------------------------------------------------
await step('errors', async () => {
  const e = await thrown(() => Sandbox.connect('nosuchsandbox0000000'));
  ok(e instanceof NotFoundError, 'connect to an unknown sandbox: NotFoundError', e && `${e.name}: ${e.message}`);
  const e2 = await thrown(() => Sandbox.getInfo('nosuchsandbox0000000'));
  ok(e2 instanceof NotFoundError, 'getInfo of an unknown sandbox: NotFoundError', e2 && `${e2.name}: ${e2.message}`);
  ok((await Sandbox.kill('nosuchsandbox0000000')) === false, 'kill of an unknown sandbox: false');
  const e3 = await thrown(() => Sandbox.create({ apiKey: 'wrong-key' }));
  ok(e3 instanceof AuthenticationError, 'a wrong API key: AuthenticationError', e3 && `${e3.name}: ${e3.message}`);
  const e4 = await thrown(() => Sandbox.list({ apiKey: 'wrong-key' }).nextItems());
  ok(e4 instanceof AuthenticationError, 'list with a wrong key: AuthenticationError', e4 && `${e4.name}: ${e4.message}`);
  const forged = await Sandbox.connect(sbx.sandboxId);
  const forgedSbx = new Sandbox({ ...forged.connectionConfig, sandboxId: sbx.sandboxId, envdAccessToken: 'f'.repeat(64), envdVersion: '0.6.3' });
  const e5 = await thrown(() => forgedSbx.commands.run('true'));
  ok(e5 instanceof AuthenticationError, 'envd with a wrong access token: AuthenticationError', e5 && `${e5.name}: ${e5.message}`);
  const e6 = await thrown(() => forgedSbx.files.read('/home/user/keep.txt'));
  ok(e6 instanceof AuthenticationError, '/files with a wrong access token: AuthenticationError', e6 && `${e6.name}: ${e6.message}`);
});

await step('app-scoped API key', async () => {
  const res = await api('POST', '/v1/keys', { app_id: `app-${tag}` });
  const key = (await res.json()).key;
  ok(res.status === 201 && typeof key === 'string', 'POST /v1/keys with the admin token: an app key', key);
  const mine = await Sandbox.create({ apiKey: key, metadata: { suite: tag, kind: 'app' } });
  const seen = await Sandbox.list({ apiKey: key }).nextItems();
  ok(seen.length === 1 && seen[0].sandboxId === mine.sandboxId, 'the app key lists only its own sandbox', seen.map((s) => s.sandboxId));
  const pager = Sandbox.list({ query: { metadata: { suite: tag } }, limit: 1 });
  const page1 = await pager.nextItems();
  const more = pager.hasNext;
  const page2 = more ? await pager.nextItems() : [];
  ok(page1.length === 1 && more && page2.length === 1 && !pager.hasNext && page1[0].sandboxId === mine.sandboxId &&
    page2[0].sandboxId === sbx.sandboxId, 'list with limit 1: two pages, newest first (x-next-token)',
  { page1: page1.map((s) => s.sandboxId), page2: page2.map((s) => s.sandboxId), more });
  const all = await Sandbox.list({ query: { metadata: { suite: tag } } }).nextItems();
  ok(all.length === 2, 'the admin token lists both', all.map((s) => s.sandboxId));
  const e = await thrown(() => Sandbox.getInfo(sbx.sandboxId, { apiKey: key }));
  ok(e instanceof NotFoundError, "another app's sandbox is NotFound to the key", e && `${e.name}: ${e.message}`);
  ok((await Sandbox.kill(sbx.sandboxId, { apiKey: key })) === false, "the key cannot kill another app's sandbox");
  const r = await mine.commands.run('echo from-app');
  ok(r.stdout === 'from-app\n', "the app's sandbox runs commands", r);
  ok(await mine.kill(), "the key kills its own sandbox");
});

// A sandbox's envdAccessToken fetched with an API key is bound to that key:
// deleting the key ends the command and watch streams the SDK holds, and
// the SDK's next envd call is an AuthenticationError.
await step('a deleted API key ends its envd streams', async () => {
  const res = await api('POST', '/v1/keys', { app_id: `app-${tag}` });
  const { key, key_id: keyId } = await res.json();
  const mine = await Sandbox.create({ apiKey: key, metadata: { suite: tag, kind: 'revoked' } });
  const r = await mine.commands.run('echo keyed');
  ok(r.stdout === 'keyed\n', "a key's sandbox runs commands with the key-bound token", r);
  const cmd = await mine.commands.run('sleep 100', { background: true });
  let watchEnded = false;
  const watch = await mine.files.watchDir('/home/user', () => {}, {
    timeoutMs: 0,
    onExit: () => {
      watchEnded = true;
    },
  });
  const del = await api('DELETE', `/v1/keys/${keyId}`);
  ok(del.status === 200, 'the admin deletes the key', del.status);
  const t0 = Date.now();
  const ended = await Promise.race([cmd.wait().then(() => 'exited', () => 'ended'), sleep(5000).then(() => 'open')]);
  ok(ended !== 'open', "the key's command stream ends within 5 s of the delete", ended);
  while (!watchEnded && Date.now() - t0 < 5000) await sleep(100);
  ok(watchEnded, "the key's watch ends within 5 s of the delete");
  const e = await thrown(() => mine.commands.run('true'));
  ok(e instanceof AuthenticationError, "the deleted key's token: AuthenticationError", e && `${e.name}: ${e.message}`);
  await watch.stop().catch(() => null);
  ok(await Sandbox.kill(mine.sandboxId), 'the admin kills the sandbox');
});

// ---- kill ------------------------------------------------------------------------------
await step('kill', async () => {
  ok(await sbx.kill(), 'kill: true');
  const e = await thrown(() => Sandbox.getInfo(sbx.sandboxId));
  ok(e instanceof NotFoundError, 'getInfo after kill: NotFoundError', e && `${e.name}: ${e.message}`);
  const e2 = await thrown(() => sbx.commands.run('true'));
  ok(e2 !== null, 'a command after kill fails', e2 && `${e2.name}: ${e2.message}`);
  ok((await sbx.isRunning()) === false, 'isRunning after kill: false');
});

finish();
