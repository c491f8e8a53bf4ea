// TAP for the SDK-driven scripts of this folder (sdk.mjs, edges.mjs): each
// check is one ok/not ok line, a failed one followed by its diagnostic as
// "# " lines; done() prints the plan and exits 1 when a check failed.
let n = 0;
let failed = 0;

export function ok(cond, name, diag) {
  n++;
  if (!cond) failed++;
  console.log(`${cond ? "ok" : "not ok"} ${n} - ${name}`);
  if (!cond && diag !== undefined) {
    const text = typeof diag === "string" ? diag : JSON.stringify(diag, null, 1);
    for (const l of String(text).split("\n").slice(0, 30)) console.log(`# ${l}`);
  }
}

// The script's arguments (URL, ADMIN_TOKEN, then optional ones); bails out
// with usage when the first two are missing.
export function args(script, usage = "URL ADMIN_TOKEN") {
  const a = process.argv.slice(2);
  if (!a[0] || !a[1]) {
    console.log(`Bail out! usage: node ${script} ${usage}`);
    process.exit(2);
  }
  process.env.OPENSANDBOX_DISABLE_METRICS = "1";
  return a;
}

export function done() {
  console.log(`1..${n}`);
  process.exit(failed ? 1 : 0);
}
