// E2B's JS SDK across a restart of the server (tests/integration/test_state_restart.py):
// processes live in the box's init, so what was started before the restart
// is listed, connected to (its output so far, then on), fed and killed after it.
// Prints TAP; the "before" phase prints its state as one "# state: JSON" line.
//
//   node restart.mjs before SERVER_URL
//   node restart.mjs after SERVER_URL STATE_JSON
// (E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY are set by the test)
// E2B_SDK_MODULE: the SDK, "e2b" (2.51.0) or "e2b-2.45.0" (tests/e2b/package.json)
const { CommandExitError, Sandbox } = await import(process.env.E2B_SDK_MODULE || 'e2b');

const [phase, , stateJson] = process.argv.slice(2);
let n = 0;
function ok(cond, name, detail) {
  n++;
  console.log(`${cond ? 'ok' : 'not ok'} ${n} - ${name}`);
  if (!cond && detail !== undefined) {
    const text = typeof detail === 'string' ? detail : JSON.stringify(detail, null, 1);
    for (const line of String(text).split('\n').slice(0, 30)) console.log(`# ${line}`);
  }
  return cond;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

try {
  if (phase === 'before') {
    const sbx = await Sandbox.create({ timeoutMs: 600_000 });
    ok(typeof sbx.sandboxId === 'string', 'a sandbox', sbx.sandboxId);
    const long = await sbx.commands.run('echo before-restart; sleep 4; echo after-restart; sleep 600',
      { background: true, timeoutMs: 0 });
    const fed = await sbx.commands.run('read x; echo got-$x; exit 7', { background: true, stdin: true, timeoutMs: 0 });
    ok(long.pid > 1 && fed.pid > 1, 'two background processes', [long.pid, fed.pid]);
    await sleep(500);
    console.log(`# state: ${JSON.stringify({ sandboxId: sbx.sandboxId, token: sbx.envdAccessToken, long: long.pid, fed: fed.pid })}`);
  } else {
    const st = JSON.parse(stateJson);
    const sbx = await Sandbox.connect(st.sandboxId);
    const procs = await sbx.commands.list();
    ok(procs.some((p) => p.pid === st.long) && procs.some((p) => p.pid === st.fed),
      'after the restart: both processes are listed', procs);
    const out = [];
    const h = await sbx.commands.connect(st.long, { onStdout: (d) => out.push(d) });
    for (let i = 0; i < 100 && !out.join('').includes('after-restart'); i++) await sleep(100);
    ok(out.join('').includes('before-restart') && out.join('').includes('after-restart'),
      'connect: its output from before the restart, and after', out.join(''));
    ok(await sbx.commands.kill(st.long), 'kill: true for the process started before the restart');
    const e = await h.wait().catch((err) => err);
    ok(e instanceof CommandExitError, 'killed: wait() throws CommandExitError', e && e.message);
    await sleep(300);
    ok(!(await sbx.commands.list()).some((p) => p.pid === st.long), 'killed: gone from the list');
    const f = await sbx.commands.connect(st.fed);
    await sbx.commands.sendStdin(st.fed, 'abc\n');
    const r = await f.wait().catch((err) => err);
    ok(r instanceof CommandExitError && r.exitCode === 7 && r.stdout.includes('got-abc'),
      'stdin after the restart reaches it; its exit code 7 arrives', r && { exitCode: r.exitCode, stdout: r.stdout });
    await sbx.kill();
  }
} catch (e) {
  ok(false, `phase ${phase}`, `${e && e.name}: ${e && e.message}\n${e && e.stack}`);
}
console.log(`1..${n}`);
process.exit(0); // the streams of the processes left running would keep node alive
