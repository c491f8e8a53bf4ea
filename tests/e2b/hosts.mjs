// E2B's SDK with envd on per-sandbox host names, as E2B serves it: no
// E2B_SANDBOX_URL, so the SDK talks to https://49983-ID.DOMAIN:PORT for each
// sandbox (E2B_DOMAIN = the server's ports_domain, "DOMAIN:PORT"). This
// process resolves *.DOMAIN to 127.0.0.1 itself (dns.lookup, nothing of the
// host's) and terminates TLS on PORT with the wildcard certificate the
// Python wrapper made (NODE_EXTRA_CA_CERTS trusts it), passing the bytes on
// to the agentbox server. Checks the SDK's ordinary calls through the host
// names, then uploadUrl / downloadUrl (signed with the sandbox's access
// token, with and without an expiration) used by plain fetch, and what they
// must not open. Set by tests/integration/test_e2b_hosts.py:
//
//   node hosts.mjs SERVER_URL ADMIN_TOKEN
//   env: E2B_SDK_MODULE, E2B_API_URL, E2B_API_KEY, E2B_DOMAIN,
//        AB_TLS_KEY, AB_TLS_CERT (PEM files), NODE_EXTRA_CA_CERTS
import dns from 'node:dns';
import fs from 'node:fs';
import net from 'node:net';
import tls from 'node:tls';
import { finish, ok, step } from './tap.mjs';

const [server] = process.argv.slice(2);
const [domainName, tlsPort] = process.env.E2B_DOMAIN.split(':');
const backend = new URL(server);

// *.DOMAIN is this machine, for this process only
const realLookup = dns.lookup;
dns.lookup = function lookup(host, opts, cb) {
  if (typeof opts === 'function') {
    cb = opts;
    opts = {};
  } else if (typeof opts === 'number') {
    opts = { family: opts };
  }
  if (typeof host === 'string' && host.toLowerCase().endsWith(`.${domainName}`)) {
    const all = opts && opts.all;
    process.nextTick(() => (all ? cb(null, [{ address: '127.0.0.1', family: 4 }]) : cb(null, '127.0.0.1', 4)));
    return {};
  }
  return realLookup.call(this, host, opts, cb);
};

// the TLS-terminating proxy in front of the server (what nginx or caddy is
// in a deployment): the Host header goes through unchanged
const front = tls.createServer(
  { key: fs.readFileSync(process.env.AB_TLS_KEY), cert: fs.readFileSync(process.env.AB_TLS_CERT) },
  (sock) => {
    const up = net.connect(Number(backend.port), backend.hostname);
    sock.pipe(up);
    up.pipe(sock);
    const end = () => {
      sock.destroy();
      up.destroy();
    };
    sock.on('error', end);
    up.on('error', end);
    sock.on('close', end);
    up.on('close', end);
  },
);
await new Promise((res, rej) => front.listen(Number(tlsPort), '127.0.0.1', res).on('error', rej));

const sdkName = process.env.E2B_SDK_MODULE || 'e2b';
const { Sandbox } = await import(sdkName);

const sbx = await step('Sandbox.create (secure)', () => Sandbox.create({ secure: true, timeoutMs: 300_000 }));
if (!sbx) {
  console.log('Bail out! no sandbox');
  front.close();
  process.exit(1);
}
const envdHost = `49983-${sbx.sandboxId}.${domainName}:${tlsPort}`;

await step('the SDK through the host name', async () => {
  ok(!process.env.E2B_SANDBOX_URL, 'E2B_SANDBOX_URL is not set');
  ok(typeof sbx.envdAccessToken === 'string' && sbx.envdAccessToken.length >= 64,
    'the create answer carries envdAccessToken', sbx.envdAccessToken);
  ok(sbx.getHost(49983) === envdHost, 'getHost(49983) is 49983-ID.DOMAIN:PORT', sbx.getHost(49983));
  ok(await sbx.isRunning(), 'isRunning (GET /health on the host name)');
  const r = await sbx.commands.run('echo "$((6*7))"');
  ok(r.exitCode === 0 && r.stdout === '42\n', 'commands.run', r);
  const w = await sbx.files.write('hosts.txt', 'by host name');
  ok(w.path === '/home/user/hosts.txt', 'files.write', w);
  ok((await sbx.files.read('/home/user/hosts.txt')) === 'by host name', 'files.read');
  const ents = await sbx.files.list('/home/user');
  ok(ents.some((e) => e.name === 'hosts.txt'), 'files.list', ents);
  ok(await sbx.files.exists('hosts.txt'), 'files.exists');
  const h = await sbx.commands.run('sleep 0.2; echo bg', { background: true });
  const done = await h.wait();
  ok(done.stdout === 'bg\n', 'a background command and its wait', done);
  const again = await Sandbox.connect(sbx.sandboxId);
  ok((await again.files.read('hosts.txt')) === 'by host name', 'Sandbox.connect: the same host name works');
});

const text = `uploaded by a signed URL ${process.pid}\n`;

await step('uploadUrl / downloadUrl without expiration', async () => {
  const up = await sbx.uploadUrl('/home/user/signed.txt');
  const u = new URL(up);
  ok(u.protocol === 'https:' && u.host === envdHost && u.pathname === '/files', 'uploadUrl is on the host name', up);
  ok((u.searchParams.get('signature') || '').startsWith('v1_') && !u.searchParams.has('signature_expiration'),
    'uploadUrl is signed, with no expiration', up);
  const form = new FormData();
  form.append('file', new Blob([text]), 'signed.txt');
  const res = await fetch(up, { method: 'POST', body: form });
  ok(res.status === 200, 'a plain fetch POSTs the file to uploadUrl: 200', `${res.status} ${await res.text()}`);
  const down = await sbx.downloadUrl('/home/user/signed.txt');
  const got = await fetch(down);
  const body = await got.text();
  ok(got.status === 200 && body === text, 'a plain fetch GETs it back from downloadUrl', `${got.status} ${body}`);
  ok((await sbx.files.read('/home/user/signed.txt')) === text, 'the SDK reads what the signed URL wrote');
  const asWrite = await fetch(up);
  ok(asWrite.status === 401, 'the upload URL does not download (another operation): 401', asWrite.status);
});

await step('uploadUrl / downloadUrl with useSignatureExpiration', async () => {
  const up = await sbx.uploadUrl('rel.txt', { useSignatureExpiration: 60 });
  ok(new URL(up).searchParams.has('signature_expiration'), 'the URL has signature_expiration', up);
  const res = await fetch(up, { method: 'POST', body: 'relative', headers: { 'Content-Type': 'application/octet-stream' } });
  ok(res.status === 200, 'an octet-stream upload to a relative path, expiring in 60 s: 200', `${res.status} ${await res.text()}`);
  const down = await sbx.downloadUrl('rel.txt', { useSignatureExpiration: 60 });
  const got = await fetch(down);
  const body = await got.text();
  ok(got.status === 200 && body === 'relative', 'downloadUrl with an expiration reads it', `${got.status} ${body}`);
  ok((await sbx.files.read('/home/user/rel.txt')) === 'relative', 'the file is in /home/user');
  const gone = await sbx.downloadUrl('rel.txt', { useSignatureExpiration: -5 });
  const old = await fetch(gone);
  ok(old.status === 401, 'a downloadUrl that has expired: 401', `${old.status} ${await old.text()}`);
  const other = await sbx.uploadUrl('/home/user/a.txt', { user: 'root' });
  const o = new URL(other);
  o.searchParams.set('path', '/home/user/b.txt');
  const moved = await fetch(o, { method: 'POST', body: 'x', headers: { 'Content-Type': 'application/octet-stream' } });
  ok(moved.status === 401, 'an uploadUrl with its path changed: 401', moved.status);
});

await step('uploadUrl without a path (the form names the file)', async () => {
  const up = await sbx.uploadUrl();
  const form = new FormData();
  form.append('file', new Blob(['unnamed']), 'named-by-form.txt');
  const res = await fetch(up, { method: 'POST', body: form });
  ok(res.status === 200, 'a multipart upload to uploadUrl(): 200', `${res.status} ${await res.text()}`);
  ok((await sbx.files.read('/home/user/named-by-form.txt')) === 'unnamed', 'the file lands under /home/user');
});

await step('a signed URL of another sandbox', async () => {
  const b = await Sandbox.create({ secure: true, timeoutMs: 120_000 });
  await b.files.write('/home/user/b-secret.txt', 'b');
  const mine = new URL(await sbx.downloadUrl('/home/user/b-secret.txt'));
  mine.host = `49983-${b.sandboxId}.${domainName}:${tlsPort}`;
  const res = await fetch(mine);
  ok(res.status === 401, "sandbox A's downloadUrl on sandbox B's host name: 401", res.status);
  await b.kill();
});

await sbx.kill();
front.close();
finish();
