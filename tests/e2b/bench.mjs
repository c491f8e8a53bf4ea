// The client side of bench/e2b.py: N rounds, each timing, from this one node
// process,
//   e2b:  Sandbox.create() + commands.run('echo hi') through E2B's SDK
//         (E2B_API_URL / E2B_SANDBOX_URL / E2B_API_KEY point it at agentbox)
//   rest: POST /v1/sandboxes + POST /v1/sandboxes/{id}/exec {"command": "echo hi"}
//         through agentbox's own REST API (fetch, the same HTTP client)
// with the two alternating, after WARMUP untimed rounds; deletes are untimed.
// Prints one JSON line: {"e2b": {"create": [...], "run": [...], "total": [...]},
// "rest": {...}} in milliseconds.
//
//   node bench.mjs SERVER_URL TOKEN N [WARMUP]
// E2B_SDK_MODULE: the SDK, "e2b" (2.51.0) or "e2b-2.45.0" (tests/e2b/package.json)
const { Sandbox } = await import(process.env.E2B_SDK_MODULE || 'e2b');

const [server, token, nArg, warmArg] = process.argv.slice(2);
const N = Number(nArg || 20);
const WARMUP = Number(warmArg || 2);
const hdr = { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' };
const out = { e2b: { create: [], run: [], total: [] }, rest: { create: [], run: [], total: [] } };
const now = () => Number(process.hrtime.bigint()) / 1e6;

async function viaE2b(keep) {
  const t0 = now();
  const sbx = await Sandbox.create();
  const t1 = now();
  const r = await sbx.commands.run('echo hi');
  const t2 = now();
  if (r.stdout !== 'hi\n') throw new Error(`e2b: unexpected output ${JSON.stringify(r)}`);
  await sbx.kill();
  if (keep) {
    out.e2b.create.push(t1 - t0);
    out.e2b.run.push(t2 - t1);
    out.e2b.total.push(t2 - t0);
  }
}

let seq = 0;
async function viaRest(keep) {
  const id = `bench-${process.pid}-${seq++}`;
  const t0 = now();
  const c = await fetch(`${server}/v1/sandboxes`, { method: 'POST', headers: hdr, body: JSON.stringify({ id }) });
  if (c.status !== 201) throw new Error(`rest create: ${c.status} ${await c.text()}`);
  await c.arrayBuffer();
  const t1 = now();
  const e = await fetch(`${server}/v1/sandboxes/${id}/exec`, {
    method: 'POST', headers: hdr, body: JSON.stringify({ command: 'echo hi' }),
  });
  const j = await e.json();
  const t2 = now();
  if (j.stdout !== 'hi\n') throw new Error(`rest: unexpected output ${JSON.stringify(j)}`);
  await (await fetch(`${server}/v1/sandboxes/${id}`, { method: 'DELETE', headers: hdr })).arrayBuffer();
  if (keep) {
    out.rest.create.push(t1 - t0);
    out.rest.run.push(t2 - t1);
    out.rest.total.push(t2 - t0);
  }
}

for (let i = 0; i < WARMUP + N; i++) {
  const keep = i >= WARMUP;
  if (i % 2) {
    await viaRest(keep);
    await viaE2b(keep);
  } else {
    await viaE2b(keep);
    await viaRest(keep);
  }
}
console.log(JSON.stringify(out));
