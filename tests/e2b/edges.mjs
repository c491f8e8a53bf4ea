// The edges where a program written against E2B meets agentbox's E2B front
// (docs/compat-e2b.md), driven by E2B's JS SDK: the package named by
// E2B_SDK_MODULE ("e2b" = 2.51.0, "e2b-2.45.0" = 2.45.0, both in
// package.json), pointed at the server by E2B_API_URL, E2B_SANDBOX_URL and
// E2B_API_KEY (set by tests/integration/test_e2b_edges.py). Prints TAP.
//
//   node edges.mjs SERVER_URL ADMIN_TOKEN
import { finish, ok, restApi, sleep, step, thrown } from './tap.mjs';

const sdkName = process.env.E2B_SDK_MODULE || 'e2b';
const { AuthenticationError, NotFoundError, Sandbox, SandboxNotFoundError, TimeoutError } = await import(sdkName);

const [server, adminToken] = process.argv.slice(2);
const api = restApi(server, adminToken);

const sbx = await step('Sandbox.create', () => Sandbox.create({ timeoutMs: 600_000 }));
if (!sbx) {
  console.log('Bail out! no sandbox');
  process.exit(1);
}

// ---- connect --------------------------------------------------------------------------
await step('connect', async () => {
  const e = await thrown(() => Sandbox.connect('nosuchsandbox0000000'));
  ok(e instanceof SandboxNotFoundError || (e instanceof NotFoundError && /not found/i.test(e.message)),
    'connect to a missing sandbox: SandboxNotFoundError (E2B\'s {code, message} 404)', e && `${e.name}: ${e.message}`);
  const before = (await sbx.getInfo()).endAt.getTime();
  const again = await Sandbox.connect(sbx.sandboxId, { timeoutMs: 30_000 });
  const after = (await again.getInfo()).endAt.getTime();
  ok(Math.abs(after - before) < 2000 && after - Date.now() > 500_000,
    'connect with a shorter timeout keeps the longer one (it only extends)', { before, after });
  await Sandbox.connect(sbx.sandboxId, { timeoutMs: 900_000 });
  const longer = (await sbx.getInfo()).endAt.getTime();
  ok(longer - Date.now() > 850_000, 'connect with a longer timeout extends it', { longer, now: Date.now() });
});

await step('isRunning after pause', async () => {
  const p = await Sandbox.create({ timeoutMs: 120_000 });
  ok(await p.isRunning(), 'isRunning: true while it runs');
  await p.pause();
  ok((await p.isRunning()) === false, 'isRunning: false right after pause()');
  const back = await Sandbox.connect(p.sandboxId);
  ok(await back.isRunning(), 'isRunning: true again after connect');
  await back.kill();
});

// ---- home ------------------------------------------------------------------------------
await step('home', async () => {
  const w = await sbx.files.write('test_write.txt', 'hello');
  ok(w.path === '/home/user/test_write.txt', 'a relative path resolves in /home/user (the entry says so)', w);
  ok((await sbx.files.read('/home/user/test_write.txt')) === 'hello', 'and the file is there');
  const r = await sbx.commands.run('pwd; cat test_write.txt; echo "$HOME"');
  ok(r.stdout === '/home/user\nhello/home/user\n', 'commands start in /home/user, HOME there', r.stdout);
  const h2 = await sbx.commands.run('echo "$HOME"; pwd', { envs: { HOME: '/tmp' }, cwd: 'sub/..' });
  ok(h2.stdout === '/tmp\n/home/user\n', 'envs override HOME; a relative cwd is in /home/user', h2.stdout);
  const ents = await sbx.files.list('.');
  const e = ents.find((x) => x.name === 'test_write.txt');
  ok(e && e.path === '/home/user/test_write.txt', 'files.list(".") lists /home/user with paths under it', ents);
  await sbx.commands.run('touch /tmp/by-nobody', { user: 'nobody' });
  const nob = await sbx.files.getInfo('/tmp/by-nobody');
  const mine = await sbx.files.getInfo('/tmp');
  ok(nob.owner === 'nobody' && mine.owner === 'root', 'entries show their owner by the box\'s names', [nob, mine]);
  const listed = (await sbx.files.list('/tmp')).find((x) => x.name === 'by-nobody');
  ok(listed && listed.owner === 'nobody' && listed.group === 'nogroup', 'and so does files.list', listed);
  const info = await sbx.files.getInfo('test_write.txt');
  ok(info.path === '/home/user/test_write.txt', 'getInfo of a relative path: under /home/user', info);
});

// ---- files ----------------------------------------------------------------------------
await step('files edges', async () => {
  const big = 'gzip me '.repeat(20000);
  const gz = await sbx.files.write('/tmp/gz.txt', big, { gzip: true });
  ok(gz.path === '/tmp/gz.txt' && (await sbx.files.read('/tmp/gz.txt')) === big,
    'files.write with gzip: true lands inflated', gz);
  const meta = { owner: 'ann', 'x-tag': 'a b!' };
  const mw = await sbx.files.write('/tmp/md/m.txt', 'with metadata', { metadata: meta });
  const same = (m) => m && JSON.stringify(m, Object.keys(m).sort()) === JSON.stringify(meta, Object.keys(meta).sort());
  ok(same(mw.metadata), 'files.write with metadata: the answer carries it', mw);
  ok(same((await sbx.files.getInfo('/tmp/md/m.txt')).metadata), 'getInfo returns the metadata');
  const ml = (await sbx.files.list('/tmp/md')).find((x) => x.name === 'm.txt');
  ok(ml && same(ml.metadata), 'files.list returns the metadata', ml);
  await sbx.files.rename('/tmp/md', '/tmp/md2');
  ok(same((await sbx.files.getInfo('/tmp/md2/m.txt')).metadata), 'a rename (of its folder) carries it along');
  await sbx.files.write('/tmp/md2/m.txt', 'rewritten');
  ok((await sbx.files.getInfo('/tmp/md2/m.txt')).metadata === undefined, 'a write without metadata: none');
  await sbx.files.write('/tmp/md2/n.txt', 'x', { metadata: { k: 'v' } });
  await sbx.files.remove('/tmp/md2');
  await sbx.files.write('/tmp/md2/n.txt', 'y');
  ok((await sbx.files.getInfo('/tmp/md2/n.txt')).metadata === undefined, 'a removal drops it');
  await sbx.files.remove('/tmp/no-such-file-here');
  ok(true, 'remove of a missing file succeeds');
  await sbx.commands.run('mkdir -p /tmp/lk/sub && echo x > /tmp/lk/sub/f && ln -sfn sub/f /tmp/lk/rel && ln -sfn ../lk/sub/./f /tmp/lk/up');
  const ents = await sbx.files.list('/tmp/lk');
  const rel = ents.find((x) => x.name === 'rel');
  const up = ents.find((x) => x.name === 'up');
  ok(rel && rel.symlinkTarget === '/tmp/lk/sub/f' && up && up.symlinkTarget === '/tmp/lk/sub/f',
    'a symlink\'s info carries its absolute target', ents);
});

// ---- watches: inotify in the box ------------------------------------------------------------
await step('watchDir', async () => {
  await sbx.files.makeDir('/tmp/wd');
  await sbx.files.write('/tmp/wd/before.txt', 'b');
  const evs = [];
  const h = await sbx.files.watchDir('/tmp/wd', (ev) => evs.push(ev), { timeoutMs: 0, recursive: true });
  await sbx.files.write('/tmp/wd/new.txt', 'content');
  await sbx.commands.run('echo 1 >> /tmp/wd/before.txt; echo 2 >> /tmp/wd/before.txt; mv /tmp/wd/before.txt /tmp/wd/after.txt; mkdir -p /tmp/wd/sub/deeper; echo x > /tmp/wd/sub/deeper/f.txt; chmod 600 /tmp/wd/after.txt');
  await sleep(600);
  await sbx.commands.run('echo y > /tmp/wd/sub/deeper/g.txt; rm /tmp/wd/new.txt');
  await sleep(600);
  await h.stop();
  const has = (name, type) => evs.some((e) => e.name === name && e.type === type);
  ok(has('new.txt', 'create') && has('new.txt', 'write'), 'a file written with content: create and write', evs);
  ok(!evs.some((e) => e.name.includes('.abtmp')), 'no temp names in events', evs);
  // (inotify folds identical events not yet read into one, as under E2B)
  ok(has('before.txt', 'write'), 'appends: write', evs);
  ok(has('before.txt', 'rename') && has('after.txt', 'create'), 'a rename: rename of the old name, create of the new', evs);
  ok(has('after.txt', 'chmod'), 'chmod', evs);
  ok(has('sub/deeper/f.txt', 'create'), 'recursive: a file in a folder made while watching', evs);
  ok(has('sub/deeper/g.txt', 'create') && has('sub/deeper/g.txt', 'write'), 'recursive: the new folder is watched', evs);
  ok(has('new.txt', 'remove'), 'remove', evs);
});

// ---- a sandbox killed while a command streams -------------------------------------------
await step('killed while streaming', async () => {
  const k = await Sandbox.create({ timeoutMs: 120_000 });
  const out = [];
  const run = k.commands.run('echo up; sleep 60', { onStdout: (d) => out.push(d) }).then((r) => r, (e) => e);
  for (let i = 0; i < 50 && !out.length; i++) await sleep(100);
  await Sandbox.kill(k.sandboxId);
  const t0 = Date.now();
  const r = await Promise.race([run, sleep(15_000).then(() => 'hung')]);
  ok(r instanceof TimeoutError, 'a sandbox killed while a command streams: the run raises TimeoutError',
    r && (r.name ? `${r.name}: ${r.message} exitCode=${r.exitCode}` : r));
  ok(Date.now() - t0 < 10_000, 'the stream ends soon after the kill', Date.now() - t0);
});

// ---- setTimeout ends the sandbox on time --------------------------------------------------
await step('setTimeout', async () => {
  const s = await Sandbox.create({ timeoutMs: 120_000 });
  const t0 = Date.now();
  await s.setTimeout(5000);
  let gone = 0;
  for (let i = 0; i < 200; i++) {
    if (!(await s.isRunning())) {
      gone = Date.now() - t0;
      break;
    }
    await sleep(100);
  }
  // the timeout counts in whole seconds from the box's start: up to 1 s late
  ok(gone >= 4500 && gone < 7000, 'setTimeout(5000): the sandbox ends at about 5 s', { gone });
  const e = await thrown(() => s.getInfo());
  ok(e instanceof NotFoundError || e instanceof SandboxNotFoundError, 'then it is gone (NotFoundError)', e && e.message);
});

// ---- keys in E2B's form ---------------------------------------------------------------------
await step('e2b keys', async () => {
  const res = await api('POST', '/v1/keys', { app_id: `e2bkeys${process.pid}`, name: 'sdk', format: 'e2b' });
  const key = await res.json();
  ok(res.status === 201 && /^e2b_[0-9a-f]{40}$/.test(key.key), 'POST /v1/keys {format: "e2b"}: an e2b_ + hex key', key);
  const mine = await Sandbox.create({ apiKey: key.key, timeoutMs: 60_000, validateApiKey: true });
  const listed = await Sandbox.list({ apiKey: key.key, validateApiKey: true }).nextItems();
  ok(listed.length === 1 && listed[0].sandboxId === mine.sandboxId, 'the SDK takes it: a sandbox of the key\'s app', listed);
  await Sandbox.kill(mine.sandboxId, { apiKey: key.key });
  const plain = await (await api('POST', '/v1/keys', { app_id: `e2bkeys${process.pid}`, name: 'plain' })).json();
  const e = await thrown(() => Sandbox.list({ apiKey: plain.key, validateApiKey: true }).nextItems());
  if (sdkName === 'e2b-2.45.0')
    ok(e instanceof AuthenticationError && /e2b_/.test(e.message),
      'SDK 2.45 refuses an agentbox-form key itself (E2B_VALIDATE_API_KEY=false lifts it)',
      e && `${e.name}: ${e.message}`);
  else
    ok(e === null, 'SDK 2.51 checks no key form: an agentbox-form key works', e && `${e.name}: ${e.message}`);
  const bad = await api('POST', '/v1/keys', { app_id: 'x', format: 'other' });
  ok(bad.status === 400, 'format: another value is 400', await bad.text());
});

await sbx.kill();
finish();
