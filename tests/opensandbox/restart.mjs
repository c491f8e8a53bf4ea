// The OpenSandbox JS SDK across a restart of the server
// (tests/integration/test_state_restart.py): background commands and
// sessions live in the box's init, so their status, logs and exit codes,
// and a session's shell state, are there after the restart.
// Prints TAP; the "before" phase prints its state as one "# state: JSON" line.
//
//   node restart.mjs before URL ADMIN_TOKEN
//   node restart.mjs after URL ADMIN_TOKEN STATE_JSON
import { ConnectionConfig, Sandbox } from "@alibaba-group/opensandbox";

const [phase, url, token, stateJson] = process.argv.slice(2);
process.env.OPENSANDBOX_DISABLE_METRICS = "1";
let n = 0;
function ok(cond, name, diag) {
  n++;
  console.log(`${cond ? "ok" : "not ok"} ${n} - ${name}`);
  if (!cond && diag !== undefined) {
    const text = typeof diag === "string" ? diag : JSON.stringify(diag, null, 1);
    for (const l of String(text).split("\n").slice(0, 30)) console.log(`# ${l}`);
  }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const connectionConfig = new ConnectionConfig({ domain: `${url}/opensandbox`, apiKey: token, requestTimeoutSeconds: 60 });
const out = (ex) => ex.logs.stdout.map((m) => `${m.text}\n`).join(""); // an event a line

try {
  if (phase === "before") {
    const sbx = await Sandbox.create({ connectionConfig, image: "base", timeoutSeconds: 600 });
    const long = await sbx.commands.run("echo one; sleep 4; echo two; sleep 600", { background: true });
    const short = await sbx.commands.run("sleep 3; echo done; exit 3", { background: true });
    const sid = await sbx.commands.createSession({ workingDirectory: "/tmp" });
    const ex = await sbx.commands.runInSession(sid, "export KEEP=kept; cd /etc; f() { echo fn; }");
    ok(long.id && short.id && sid && ex.exitCode === 0, "two background commands and a session with state",
      { long: long.id, short: short.id, sid, ex });
    console.log(`# state: ${JSON.stringify({ id: sbx.id, long: long.id, short: short.id, sid })}`);
  } else {
    const st = JSON.parse(stateJson);
    const sbx = await Sandbox.connect({ sandboxId: st.id, connectionConfig });
    let s = await sbx.commands.getCommandStatus(st.long);
    ok(s.running === true && s.content.includes("echo one"), "after the restart: the long command runs", s);
    let logs = null;
    for (let i = 0; i < 100; i++) {
      logs = await sbx.commands.getBackgroundCommandLogs(st.long);
      if (logs.content.includes("two")) break;
      await sleep(100);
    }
    ok(logs.content === "one\ntwo\n" && logs.cursor === 2, "its logs: before the restart and after", logs);
    for (let i = 0; i < 100; i++) {
      s = await sbx.commands.getCommandStatus(st.short);
      if (!s.running) break;
      await sleep(100);
    }
    ok(s.running === false && s.exitCode === 3 && s.finishedAt instanceof Date,
      "the short command ended during or after the restart: exit code 3", s);
    logs = await sbx.commands.getBackgroundCommandLogs(st.short);
    ok(logs.content === "done\n", "its logs", logs);
    const ex = await sbx.commands.runInSession(st.sid, "echo $KEEP; pwd; f");
    ok(out(ex) === "kept\n/etc\nfn\n" && ex.exitCode === 0, "the session's shell kept its state", ex);
    await sbx.commands.interrupt(st.long);
    for (let i = 0; i < 50; i++) {
      s = await sbx.commands.getCommandStatus(st.long);
      if (!s.running) break;
      await sleep(100);
    }
    ok(s.running === false && s.exitCode !== 0, "interrupt after the restart ends it", s);
    await sbx.kill();
  }
} catch (e) {
  ok(false, `phase ${phase}`, `${e?.name}: ${e?.message} status=${e?.statusCode}\n${e?.stack}`);
}
console.log(`1..${n}`);
process.exit(0); // the streams of the processes left running would keep node alive
