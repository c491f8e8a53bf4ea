// A newcomer's first E2B call: E2B's JS SDK (unchanged) with a made-up
// E2B_API_KEY against a server without a token (tests/integration/
// test_first_run.py). The SDK refuses to start without a key; a token-less
// server takes any key from a loopback client as its admin. Prints TAP.
//
//   node first_run.mjs   (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY set)
// E2B_SDK_MODULE: the SDK, "e2b" (2.51.0) or "e2b-2.45.0" (tests/e2b/package.json)
const { Sandbox } = await import(process.env.E2B_SDK_MODULE || 'e2b');

let n = 0;
let failed = 0;
function ok(cond, name, detail) {
  n++;
  if (!cond) failed++;
  console.log(`${cond ? 'ok' : 'not ok'} ${n} - ${name}`);
  if (!cond && detail !== undefined) {
    const text = typeof detail === 'string' ? detail : JSON.stringify(detail, null, 1);
    for (const l of String(text).split('\n').slice(0, 30)) console.log(`# ${l}`);
  }
}

let sbx;
try {
  sbx = await Sandbox.create('base', { timeoutMs: 120000 });
  ok(typeof sbx.sandboxId === 'string' && sbx.sandboxId.length > 0, 'Sandbox.create with a made-up key');
} catch (e) {
  ok(false, 'Sandbox.create with a made-up key', `${e && e.name}: ${e && e.message}`);
  console.log(`1..${n}`);
  process.exit(1);
}
try {
  const r = await sbx.commands.run('echo first-run');
  ok(r.stdout === 'first-run\n' && r.exitCode === 0, 'commands.run in the sandbox', r);
  await sbx.files.write('/tmp/hello.txt', 'hi');
  ok((await sbx.files.read('/tmp/hello.txt')) === 'hi', 'files.write then files.read');
  const list = await Sandbox.list();
  const items = typeof list.nextItems === 'function' ? await list.nextItems() : list;
  ok(Array.isArray(items) && items.some((s) => s.sandboxId === sbx.sandboxId), 'Sandbox.list shows it', items);
} catch (e) {
  ok(false, 'the sandbox answers the SDK', `${e && e.name}: ${e && e.message}`);
}
try {
  await sbx.kill();
  ok(true, 'kill');
} catch (e) {
  ok(false, 'kill', `${e && e.name}: ${e && e.message}`);
}
console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
