// A newcomer's first OpenSandbox call: the OpenSandbox JS SDK (unchanged)
// with a made-up API key against a server without a token (tests/
// integration/test_first_run.py). The SDK refuses to start without a key; a
// token-less server takes any key from a loopback client as its admin.
// Prints TAP.
//
//   node first_run.mjs URL KEY
import { ConnectionConfig, Sandbox } from '@alibaba-group/opensandbox';

const [url, key] = process.argv.slice(2);
process.env.OPENSANDBOX_DISABLE_METRICS = '1';
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
const errText = (e) => `${e?.name}: ${e?.message} status=${e?.statusCode}`;

const connectionConfig = new ConnectionConfig({ domain: `${url}/opensandbox`, apiKey: key, requestTimeoutSeconds: 60 });
let sbx;
try {
  sbx = await Sandbox.create({ connectionConfig, image: 'base', timeoutSeconds: 120 });
  ok(typeof sbx.id === 'string' && sbx.id.length > 0, 'Sandbox.create with a made-up key');
} catch (e) {
  ok(false, 'Sandbox.create with a made-up key', errText(e));
  console.log(`1..${n}`);
  process.exit(1);
}
try {
  const ex = await sbx.commands.run('echo first-run');
  const out = ex.logs.stdout.map((m) => `${m.text}\n`).join(''); // an event a line
  ok(out === 'first-run\n' && ex.exitCode === 0, 'commands.run in the sandbox', ex);
  await sbx.files.writeFiles([{ path: '/tmp/hello.txt', data: 'hi' }]);
  ok((await sbx.files.readFile('/tmp/hello.txt')) === 'hi', 'files.writeFiles then files.readFile');
} catch (e) {
  ok(false, 'the sandbox answers the SDK', errText(e));
}
try {
  await sbx.kill();
  ok(true, 'kill');
} catch (e) {
  ok(false, 'kill', errText(e));
}
console.log(`1..${n}`);
process.exit(failed ? 1 : 0);
