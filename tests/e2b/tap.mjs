// TAP for the SDK-driven scripts of tests/e2b (sdk.mjs, edges.mjs): each
// check prints "ok N - name" or "not ok N - name" with its detail as "# "
// lines, which the Python wrappers (tests/lib/taprelay.py) relay as their
// own checks.
export const tap = { n: 0, failed: 0 };

export function ok(cond, name, detail) {
  tap.n++;
  if (cond) {
    console.log(`ok ${tap.n} - ${name}`);
  } else {
    tap.failed++;
    console.log(`not ok ${tap.n} - ${name}`);
    if (detail !== undefined) {
      const text = typeof detail === 'string' ? detail : JSON.stringify(detail, null, 1);
      for (const line of String(text).split('\n').slice(0, 30)) console.log(`# ${line}`);
    }
  }
  return cond;
}

// Runs f; a throw is one failed check named `name`.
export async function step(name, f) {
  try {
    return await f();
  } catch (e) {
    ok(false, name, `${e && e.name}: ${e && e.message}\n${e && e.stack}`);
    return undefined;
  }
}

// The error f throws (or null).
export async function thrown(f) {
  try {
    await f();
    return null;
  } catch (e) {
    return e;
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Prints the plan and exits 1 when a check failed.
export function finish() {
  console.log(`1..${tap.n}`);
  process.exit(tap.failed ? 1 : 0);
}

// agentbox's own REST API of server with a bearer token (the admin's by
// default): api(method, path, body?, token?) -> fetch's Response.
export function restApi(server, adminToken) {
  return (method, path, body, token = adminToken) =>
    fetch(server + path, {
      method,
      headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
}
