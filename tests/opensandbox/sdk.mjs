// The OpenSandbox JS SDK (@alibaba-group/opensandbox, unchanged) against
// agentbox's OpenSandbox front. Prints TAP; every check is one ok/not ok.
// usage: node sdk.mjs URL ADMIN_TOKEN [IMAGE: a reference of the server's image store]
import {
  ConnectionConfig,
  Sandbox,
  SandboxApiException,
  SandboxManager,
} from "@alibaba-group/opensandbox";
import { args, done, ok } from "./tap.mjs";

const [url, token, imageRef] = args("sdk.mjs", "URL ADMIN_TOKEN [IMAGE]");

function errText(e) {
  return `${e?.name}: ${e?.message} status=${e?.statusCode} code=${e?.error?.code}`;
}
async function throwsApi(fn, status, name) {
  try {
    await fn();
    ok(false, name, "no error thrown");
  } catch (e) {
    ok(e instanceof SandboxApiException && e.statusCode === status, name, errText(e));
  }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(pred, ms = 10000, step = 100) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const v = await pred();
    if (v) return v;
    await sleep(step);
  }
  return null;
}

const domain = `${url}/opensandbox`;
const conn = (apiKey) => new ConnectionConfig({ domain, apiKey, requestTimeoutSeconds: 60 });
const admin = conn(token);
// execd sends one event per line without its end (tests/opensandbox/edges.mjs
// checks the events themselves): the lines, each with its end again
const out = (ex) => ex.logs.stdout.map((m) => `${m.text}\n`).join("");
const err = (ex) => ex.logs.stderr.map((m) => `${m.text}\n`).join("");

// ---- create ----------------------------------------------------------------------
let t0 = Date.now();
const sbx = await Sandbox.create({
  connectionConfig: admin,
  image: "base",
  env: { FOO: "bar" },
  metadata: { suite: "osb-sdk" },
  resource: { cpu: "500m", memory: "512Mi" },
  timeoutSeconds: 600,
});
const createMs = Date.now() - t0;
ok(typeof sbx.id === "string" && sbx.id.length > 0, `Sandbox.create returns a sandbox (${createMs} ms with its health check)`);
console.log(`# timing: Sandbox.create (with its health check) ${createMs} ms`);
let info = await sbx.getInfo();
ok(info.status.state === "Running", "getInfo: state Running", info);
ok(info.metadata?.suite === "osb-sdk" && !Object.keys(info.metadata).some((k) => k.startsWith("opensandbox.io/")),
  "getInfo: the metadata given, no reserved keys", info.metadata);
ok(info.image?.uri === "base", "getInfo: image.uri as given", info.image);
ok(info.expiresAt instanceof Date && Math.abs(info.expiresAt - info.createdAt - 600000) < 2000,
  "getInfo: expiresAt is createdAt + timeout", { c: info.createdAt, e: info.expiresAt });
ok(Array.isArray(info.entrypoint) && info.entrypoint[0] === "tail", "getInfo: the entrypoint echoed", info.entrypoint);
ok(await sbx.isHealthy(), "isHealthy (execd ping) is true");

// ---- commands --------------------------------------------------------------------
t0 = Date.now();
let ex = await sbx.commands.run("echo hello; echo oops >&2");
const firstRunMs = Date.now() - t0;
ok(out(ex) === "hello\n" && err(ex) === "oops\n" && ex.exitCode === 0,
  `commands.run: stdout, stderr and exit code 0 (${firstRunMs} ms)`, ex);
console.log(`# timing: first commands.run ${firstRunMs} ms`);
ok(typeof ex.id === "string" && ex.id.startsWith("cmd-"), "commands.run: the execution has an id", ex.id);
ex = await sbx.commands.run("echo $FOO-$X; pwd", { envs: { X: "y" }, workingDirectory: "/tmp" });
ok(out(ex) === "bar-y\n/tmp\n", "commands.run: the box env, envs and workingDirectory", ex);
ex = await sbx.commands.run("exit 3");
ok(ex.exitCode === 3 && ex.error?.name === "CommandExecError", "commands.run: a failing command's exit code", ex);
ex = await sbx.commands.run("no-such-command-xyz");
ok(ex.exitCode === 127 && /not found/.test(err(ex)), "commands.run: command not found is exit 127 with stderr", ex);
t0 = Date.now();
ex = await sbx.commands.run("sleep 10", { timeoutSeconds: 1 });
let took = Date.now() - t0;
ok(ex.exitCode !== 0 && ex.error?.name === "TimeoutError" && took < 5000,
  `commands.run: timeoutSeconds kills the command (${took} ms)`, ex);
ex = await sbx.commands.run("id -u", { uid: 1000 });
ok(out(ex) === "1000\n", "commands.run: uid runs as that user", ex);

// streaming: output arrives while the command runs, in order
const arrivals = [];
t0 = Date.now();
ex = await sbx.commands.run("for i in 1 2 3; do echo tick$i; sleep 0.4; done", {}, {
  onStdout: (m) => arrivals.push([m.text, Date.now() - t0]),
});
const doneAt = Date.now() - t0;
const ticks = arrivals.map((a) => a[0]).join("|");
ok(ticks === "tick1|tick2|tick3", "streaming: stdout lines in order", arrivals);
ok(arrivals.length >= 3 && arrivals[0][1] < doneAt - 700,
  `streaming: the first line arrives ${arrivals[0]?.[1]} ms in, the command ends at ${doneAt} ms`, arrivals);

// background: status and logs
ex = await sbx.commands.run("echo bg-start; sleep 1; echo bg-end; exit 4", { background: true });
const bgId = ex.id;
ok(typeof bgId === "string" && ex.exitCode === undefined, "background: run returns at once with an id", ex);
let st = await sbx.commands.getCommandStatus(bgId);
ok(st.running === true && st.exitCode === null && st.content.includes("bg-start"), "background: status running", st);
st = await until(async () => {
  const s = await sbx.commands.getCommandStatus(bgId);
  return s.running ? null : s;
});
ok(st && st.exitCode === 4 && st.finishedAt instanceof Date, "background: status after the end: exit code 4", st);
let logs = await sbx.commands.getBackgroundCommandLogs(bgId);
ok(logs.content === "bg-start\nbg-end\n" && logs.cursor === 2, "background: logs and tail cursor", logs);
logs = await sbx.commands.getBackgroundCommandLogs(bgId, 1);
ok(logs.content === "bg-end\n", "background: logs after cursor 1", logs);

// interrupt
ex = await sbx.commands.run("sleep 30; echo never", { background: true });
t0 = Date.now();
await sbx.commands.interrupt(ex.id);
st = await until(async () => {
  const s = await sbx.commands.getCommandStatus(ex.id);
  return s.running ? null : s;
}, 5000);
ok(st && !st.running && st.exitCode !== 0 && Date.now() - t0 < 5000, "interrupt: the background command ends", st);
ex = await sbx.commands.run("pgrep -x sleep || echo none");
ok(out(ex).trim() === "none", "interrupt: its process is gone", ex);
await throwsApi(() => sbx.commands.getCommandStatus("cmd-nosuch"), 404, "getCommandStatus: unknown id is a 404");

// a foreground command interrupted by its id, and one whose client goes away
let fgId = null;
t0 = Date.now();
const fgRun = sbx.commands.run("sleep 30", {}, { onInit: (i) => { fgId = i.id; } });
await until(async () => fgId, 5000, 20);
await sleep(200);
await sbx.commands.interrupt(fgId);
ex = await fgRun;
ok(ex.exitCode === 137 && ex.error?.name === "Interrupted" && Date.now() - t0 < 5000,
  "interrupt: a foreground command ends with exit 137", ex);
// (the SDK's AbortSignal stops nothing once the stream's headers arrived: its
// fetch wrapper drops the listener then; so the client going away is a plain
// fetch of the same execd route, closed after the first event)
const execdBase = `http://${(await sbx.getEndpoint(44772)).endpoint}`;
const ac = new AbortController();
const resp = await fetch(`${execdBase}/command`, {
  method: "POST", signal: ac.signal,
  headers: { "OPEN-SANDBOX-API-KEY": token, "content-type": "application/json", accept: "text/event-stream" },
  body: JSON.stringify({ command: "sleep 31", background: false }),
});
const rd = resp.body.getReader();
const first = new TextDecoder().decode((await rd.read()).value);
ok(resp.status === 200 && first.includes('"init"'), "a raw POST /command streams its init event", first);
// (the init event may come before the command's process has started: a
// loaded host can take a moment to exec it)
let seen = null;
const running = await until(async () => {
  seen = await sbx.commands.run("pgrep -x sleep || echo none");
  return out(seen).trim() !== "none";
}, 5000, 100);
ok(running, "the command runs while its client reads", seen);
ac.abort();
const reaped = await until(async () => {
  const r = await sbx.commands.run("pgrep -x sleep || echo none");
  return out(r).trim() === "none";
}, 5000, 200);
ok(reaped, "a foreground command whose client went away is killed");

// a silent foreground command gets ping events (15 s apart), awaited before the pause below
const pings = [];
const silent = sbx.commands.run("sleep 16; echo awake", {}, {
  onEvent: (ev) => { if (ev.type === "ping") pings.push(Date.now()); },
});

// ---- sessions: a shell that lives between runs -------------------------------------
const sid = await sbx.commands.createSession({ workingDirectory: "/tmp" });
ok(typeof sid === "string" && sid.length > 0, "createSession returns an id", sid);
ex = await sbx.commands.runInSession(sid, "pwd; export A=1; B=2; cd /etc; f() { echo fn; }; alias ll='echo ll'");
ok(out(ex) === "/tmp\n" && ex.exitCode === 0, "runInSession: starts in the session's directory", ex);
ex = await sbx.commands.runInSession(sid, "echo $A$B; pwd; f");
ok(out(ex) === "12\n/etc\nfn\n", "runInSession: variables, the directory and functions persist", ex);
ex = await sbx.commands.runInSession(sid, "C=3; false");
ok(ex.exitCode === 1 && ex.error?.name === "CommandExecError", "runInSession: a failing run's exit code", ex);
ex = await sbx.commands.runInSession(sid, "echo $C; echo err >&2", { workingDirectory: "/" });
ok(out(ex) === "3\nerr\n", "runInSession: state kept; stderr comes on the same terminal", ex);
ex = await sbx.commands.runInSession(sid, "pwd; set -o pipefail; sleep 300 & echo $! > /tmp/bgpid");
ok(out(ex) === "/\n" && ex.exitCode === 0, "runInSession: a run's workingDirectory becomes the session's", ex);
ex = await sbx.commands.runInSession(sid, "set -o | grep -w pipefail; jobs -p | wc -l; kill %1 && echo killed");
ok(/pipefail\s+on/.test(out(ex)) && /\n1\nkilled\n$/.test(out(ex)),
  "runInSession: options and background jobs live on in the shell", ex);
t0 = Date.now();
ex = await sbx.commands.runInSession(sid, "sleep 20", { timeoutSeconds: 1 });
took = Date.now() - t0;
ok(ex.error?.name === "TimeoutError" && ex.exitCode === 130 && took < 5000,
  `runInSession: timeoutSeconds interrupts the run (${took} ms)`, ex);
let sInit = null;
const sRun = sbx.commands.runInSession(sid, "sleep 20; echo never", {}, { onInit: (i) => { sInit = i.id; } });
await until(async () => sInit, 5000, 20);
await sleep(200);
await sbx.commands.interrupt(sInit);
ex = await sRun;
ok(ex.error?.name === "Interrupted" && !out(ex).includes("never"), "interrupt: a session's run", ex);
ex = await sbx.commands.runInSession(sid, "echo $A; exit 7");
ok(out(ex) === "1\n" && ex.exitCode === 7, "runInSession: exit ends the shell with its code", ex);
ex = await sbx.commands.runInSession(sid, "echo ${A:-fresh}; pwd");
ok(out(ex) === "fresh\n/tmp\n", "runInSession: after an exit the session has a fresh shell", ex);
const sid2 = await sbx.commands.createSession();
ex = await sbx.commands.runInSession(sid2, "echo ${B:-unset}; pwd");
ok(out(ex) === "unset\n/workspace\n", "sessions are apart from each other", ex);
await sbx.commands.deleteSession(sid);
await throwsApi(() => sbx.commands.runInSession(sid, "true"), 404, "deleteSession: the session is gone (404)");
ex = await sbx.commands.runInSession(sid2, "sleep 301 &");
// (polled: under load the job's fork may not have exec'd sleep yet)
ex = await sbx.commands.run("for i in $(seq 1 50); do pgrep -f 'sleep 30[1]' >/dev/null && " +
  "{ echo running; break; }; sleep 0.1; done");
ok(out(ex) === "running\n", "a session's background job runs after its run", ex);
await sbx.commands.deleteSession(sid2);
ex = await sbx.commands.run("sleep 0.3; pgrep -f 'sleep 30[1]' || echo none");
ok(out(ex).trim() === "none", "deleteSession: its shell and its processes are gone", ex);

// ---- egress policy (the SDK's egress sidecar calls) ---------------------------------
let pol = await sbx.getEgressPolicy();
ok(pol.defaultAction === "deny" && pol.egress.length === 0, "getEgressPolicy: no network by default", pol);
await sbx.patchEgressRules([{ action: "allow", target: "example.com" }, { action: "allow", target: "pypi.org" }]);
pol = await sbx.getEgressPolicy();
ok(pol.defaultAction === "deny" && pol.egress.map((r) => r.target).sort().join() === "example.com,pypi.org",
  "patchEgressRules: allow rules added", pol);
await sbx.deleteEgressRules(["example.com"]);
pol = await sbx.getEgressPolicy();
ok(pol.egress.length === 1 && pol.egress[0].target === "pypi.org" && pol.egress[0].action === "allow",
  "deleteEgressRules: the rule removed", pol);
await sbx.deleteEgressRules(["pypi.org"]);

// ---- what agentbox does not offer, said in the SDK's shapes ----------------------------
const caps = await sbx.isolation.capabilities();
ok(caps.available === false, "isolation.capabilities: not available", caps);
await throwsApi(() => SandboxManager.create({ connectionConfig: admin }).createSnapshot(sbx.id), 501,
  "createSnapshot of a box on the host base: 501 API_NOT_SUPPORTED");

// ---- files -----------------------------------------------------------------------
await sbx.files.writeFiles([{ path: "/workspace/a.txt", data: "hello world", mode: 640 }]);
ok((await sbx.files.readFile("/workspace/a.txt")) === "hello world", "writeFiles + readFile");
let fi = (await sbx.files.getFileInfo(["/workspace/a.txt"]))["/workspace/a.txt"];
ok(fi && fi.type === "file" && fi.size === 11 && fi.mode === 640 && fi.owner === "root" && fi.modifiedAt instanceof Date,
  "getFileInfo: type, size, mode, owner, times", fi);
await sbx.files.replaceContents([{ path: "/workspace/a.txt", oldContent: "world", newContent: "there" }]);
ok((await sbx.files.readFile("/workspace/a.txt")) === "hello there", "replaceContents");
const rep = await sbx.files.replaceContentsDetailed([{ path: "/workspace/a.txt", oldContent: "l", newContent: "L" }]);
ok(rep.length === 1 && rep[0].replacedCount === 2, "replaceContentsDetailed counts", rep);
ok((await sbx.files.readFile("/workspace/a.txt", { range: "bytes=0-4" })) === "heLLo", "readFile with a range");
await sbx.files.writeFiles([{ path: "/workspace/sub/deep/b.md", data: "# b" }]);
let found = await sbx.files.search({ path: "/workspace", pattern: "*.md" });
ok(found.length === 1 && found[0].path === "/workspace/sub/deep/b.md", "search: a glob over the tree", found);
found = await sbx.files.search({ path: "/workspace", pattern: "*.txt" });
ok(found.some((f) => f.path === "/workspace/a.txt"), "search: *.txt finds a.txt", found);
await sbx.files.moveFiles([{ src: "/workspace/a.txt", dest: "/workspace/c.txt" }]);
ok((await sbx.files.readFile("/workspace/c.txt")) === "heLLo there", "moveFiles: the file at its new path");
await throwsApi(() => sbx.files.getFileInfo(["/workspace/a.txt"]), 404, "moveFiles: the old path is gone (404)");
await sbx.files.setPermissions([{ path: "/workspace/c.txt", mode: 600, owner: "nobody" }]);
fi = (await sbx.files.getFileInfo(["/workspace/c.txt"]))["/workspace/c.txt"];
ok(fi.mode === 600 && fi.owner === "nobody", "setPermissions: mode and owner", fi);
await sbx.files.deleteFiles(["/workspace/c.txt"]);
await throwsApi(() => sbx.files.readFile("/workspace/c.txt"), 404, "deleteFiles: the file is gone (404)");
const bytes = Uint8Array.from({ length: 256 }, (_, i) => i);
await sbx.files.writeFiles([{ path: "/workspace/bin.dat", data: bytes }]);
const back = await sbx.files.readBytes("/workspace/bin.dat");
ok(back.length === 256 && back.every((b, i) => b === i), "binary bytes round-trip", back.length);
// streams both ways
const chunks = ["stream", "ed ", "upload\n"];
await sbx.files.writeFiles([{ path: "/workspace/streamed.txt", data: new ReadableStream({
  pull(c) { const x = chunks.shift(); if (x) c.enqueue(new TextEncoder().encode(x)); else c.close(); },
}) }]);
let streamed = "";
for await (const part of sbx.files.readBytesStream("/workspace/streamed.txt")) streamed += new TextDecoder().decode(part);
ok(streamed === "streamed upload\n", "writeFiles from a stream + readBytesStream", streamed);
ok((await sbx.files.readFile("/workspace/streamed.txt", { offset: 9, limit: 6 })) === "upload",
  "readFile with offset and limit");
// directories
await sbx.files.createDirectories([{ path: "/workspace/d1/d2", mode: 700 }]);
let ls = await sbx.files.listDirectory({ path: "/workspace/d1" });
ok(ls.length === 1 && ls[0].path === "/workspace/d1/d2" && ls[0].type === "directory" && ls[0].mode === 700,
  "createDirectories + listDirectory", ls);
await sbx.files.deleteDirectories(["/workspace/d1"]);
ls = await sbx.files.listDirectory({ path: "/workspace" });
ok(!ls.some((f) => f.path.startsWith("/workspace/d1")), "deleteDirectories", ls.map((f) => f.path));
await throwsApi(() => sbx.files.listDirectory({ path: "/workspace/nope" }), 404, "listDirectory: missing dir is a 404");

// ---- metrics ---------------------------------------------------------------------
const m = await sbx.getMetrics();
ok(m.cpuCount === 0.5 && m.memoryTotalMiB === 512 && m.memoryUsedMiB > 0 && m.timestamp > 0,
  "getMetrics: the box's cpu and memory limits and use", m);

ex = await silent;
ok(pings.length >= 1 && out(ex) === "awake\n" && ex.exitCode === 0,
  `a silent foreground stream gets ping events (${pings.length}) and then its output`, { pings, ex });

// GET /metrics/watch (execd's streamed form; this SDK does not call it): a sample a second
{
  const ac2 = new AbortController();
  const w = await fetch(`http://${(await sbx.getEndpoint(44772)).endpoint}/metrics/watch`,
    { headers: { "OPEN-SANDBOX-API-KEY": token }, signal: ac2.signal });
  const rdw = w.body.getReader();
  let txt = "";
  const tw = Date.now();
  while ((txt.match(/^data: /gm) || []).length < 2 && Date.now() - tw < 5000)
    txt += new TextDecoder().decode((await rdw.read()).value);
  ac2.abort();
  const samples = txt.split("\n").filter((l) => l.startsWith("data: ")).map((l) => JSON.parse(l.slice(6)));
  ok(w.status === 200 && samples.length >= 2 && samples[0].cpu_count === 0.5 && samples[1].timestamp > samples[0].timestamp,
    "metrics/watch streams samples", txt.slice(0, 300));
}

// ---- pause / resume, files kept ---------------------------------------------------
await sbx.files.writeFiles([{ path: "/workspace/keep.txt", data: "kept" }]);
await sbx.pause();
info = await sbx.getInfo();
ok(info.status.state === "Paused", "pause: state Paused", info.status);
const resumed = await sbx.resume();
info = await resumed.getInfo();
ok(info.status.state === "Running", "resume: state Running", info.status);
ok((await resumed.files.readFile("/workspace/keep.txt")) === "kept", "resume: the files are kept");

// a box agentbox stopped (idle stop, or its own API) shows as Paused and resumes with its files
await resumed.files.writeFiles([{ path: "/workspace/stopped.txt", data: "still here" }]);
let rs = await fetch(`${url}/v1/sandboxes/${sbx.id}/stop`, {
  method: "POST", headers: { authorization: `Bearer ${token}` },
});
ok(rs.status === 200, "agentbox's own API stops the box", rs.status);
info = await resumed.getInfo();
ok(info.status.state === "Paused" && info.status.reason === "stopped", "a stopped box is Paused (reason stopped)", info.status);
const restarted = await Sandbox.resume({ sandboxId: sbx.id, connectionConfig: admin });
ok((await restarted.getInfo()).status.state === "Running", "resume starts a stopped box");
ok((await restarted.files.readFile("/workspace/stopped.txt")) === "still here", "a stopped box resumes with its files");
await restarted.close();

// ---- renew -----------------------------------------------------------------------
const ren = await resumed.renew(3600);
info = await resumed.getInfo();
ok(ren.expiresAt instanceof Date && Math.abs(ren.expiresAt - (Date.now() + 3600000)) < 5000 &&
   Math.abs(info.expiresAt - ren.expiresAt) < 1000, "renew: a new expiresAt, kept", { ren, info: info.expiresAt });

// timeout: the box is deleted when it expires; renew keeps one alive
const shortLived = await Sandbox.create({ connectionConfig: admin, image: "base", timeoutSeconds: 2 });
const kept = await Sandbox.create({ connectionConfig: admin, image: "base", timeoutSeconds: 2 });
await kept.renew(120);
const expired = await until(async () => {
  try {
    await shortLived.getInfo();
    return null;
  } catch (e) {
    return e instanceof SandboxApiException && e.statusCode === 404;
  }
}, 10000, 250);
ok(expired, "timeout: the box is gone once it expires");
info = await kept.getInfo();
ok(info.status.state === "Running", "renew: a renewed box outlives its first timeout", info.status);
await kept.kill();
await shortLived.close();
await kept.close();

// ---- endpoints and a dev server ------------------------------------------------------
const ep = await resumed.getEndpoint(44772);
ok(ep.endpoint.endsWith(`/opensandbox/v1/sandboxes/${sbx.id}/proxy/44772`), "getEndpoint(execd): this server's execd route, ending with /44772", ep);
await resumed.files.writeFiles([{ path: "/workspace/site/index.html", data: "<h1>from the box</h1>" }]);
const dev = await resumed.commands.run("exec python3 -m http.server 8000 --bind 127.0.0.1",
  { background: true, workingDirectory: "/workspace/site" });
const pep = await resumed.getEndpoint(8000);
const purl = await resumed.getEndpointUrl(8000);
ok(purl.includes(`/v1/sandboxes/${sbx.id}/ports/8000`), "getEndpointUrl(8000): the port route", purl);
const page = await until(async () => {
  try {
    const r = await fetch(`${purl}/index.html`, { headers: pep.headers ?? {} });
    return r.status === 200 ? await r.text() : null;
  } catch {
    return null;
  }
}, 15000, 250);
ok(page === "<h1>from the box</h1>", "a dev server in the box answers through its endpoint", page);
const noauth = await fetch(`${purl}/index.html`).catch((e) => ({ status: String(e) }));
ok(noauth.status === 401, "the port endpoint needs the key (401 without its headers)", noauth.status);
await resumed.commands.interrupt(dev.id);

// ---- list ------------------------------------------------------------------------
const mgr = SandboxManager.create({ connectionConfig: admin });
let list = await mgr.listSandboxInfos({ metadata: { suite: "osb-sdk" } });
ok(list.items.length === 1 && list.items[0].id === sbx.id && list.pagination.totalItems === 1,
  "listSandboxInfos: by metadata", list);
list = await mgr.listSandboxInfos({ states: ["Paused"], metadata: { suite: "osb-sdk" } });
ok(list.items.length === 0, "listSandboxInfos: by state (none Paused)", list);
list = await mgr.listSandboxInfos({ states: ["Paused", "Running"], metadata: { suite: "osb-sdk" } });
ok(list.items.length === 1, "listSandboxInfos: states are ORed", list);
const extra = await Sandbox.create({ connectionConfig: admin, image: "base", metadata: { suite: "osb-sdk" } });
const p1 = await mgr.listSandboxInfos({ metadata: { suite: "osb-sdk" }, page: 1, pageSize: 1 });
const p2 = await mgr.listSandboxInfos({ metadata: { suite: "osb-sdk" }, page: 2, pageSize: 1 });
const p3 = await mgr.listSandboxInfos({ metadata: { suite: "osb-sdk" }, page: 3, pageSize: 1 });
ok(p1.items.length === 1 && p2.items.length === 1 && p3.items.length === 0 && p1.items[0].id !== p2.items[0].id &&
   p1.pagination.totalItems === 2 && p1.pagination.totalPages === 2 && p1.pagination.hasNextPage &&
   !p2.pagination.hasNextPage, "listSandboxInfos: pagination", { p1: p1.pagination, p2: p2.pagination });
await extra.kill();
await extra.close();
const patched = await mgr.patchSandboxMetadata(sbx.id, { extra: "1", suite: null });
ok(patched.metadata.extra === "1" && !("suite" in patched.metadata), "patchSandboxMetadata merges", patched.metadata);

// ---- errors ----------------------------------------------------------------------
await throwsApi(() => mgr.getSandboxInfo("no-such-box"), 404, "unknown sandbox: SandboxApiException 404");
await throwsApi(() => Sandbox.connect({ sandboxId: "no-such-box", connectionConfig: admin }), 404,
  "Sandbox.connect to an unknown sandbox: SandboxApiException 404");
const bad = SandboxManager.create({ connectionConfig: conn("wrong-key") });
await throwsApi(() => bad.listSandboxInfos({}), 401, "a wrong key: SandboxApiException 401");
await throwsApi(() => Sandbox.create({ connectionConfig: conn("wrong-key"), image: "base" }), 401,
  "Sandbox.create with a wrong key: SandboxApiException 401");
await bad.close();
await throwsApi(() => Sandbox.create({ connectionConfig: admin, image: "base", resource: { cpu: "lots" } }), 400,
  "a bad resource quantity: SandboxApiException 400");
try {
  await Sandbox.create({ connectionConfig: admin, image: "no-such-image-xyz:1" });
  ok(false, "an image agentbox cannot find or pull: an SDK error", "created");
} catch (e) {
  ok(e instanceof SandboxApiException && e.statusCode >= 400 && /no-such-image-xyz/.test(e.message),
    "an image agentbox cannot find or pull: SandboxApiException naming it", errText(e));
}
await throwsApi(() => sbx.credentialVault.get(), 501, "credentialVault: 501 API_NOT_SUPPORTED");

// a box whose stat is broken: file info never runs the box's tools (it is
// the init's STAT, through the manager's file door), owner and group named
const odd = await Sandbox.create({ connectionConfig: admin, image: "base",
  env: { PATH: "/workspace/bin:/usr/local/bin:/usr/bin:/bin" } });
await odd.files.writeFiles([{ path: "/workspace/bin/stat", data: "#!/bin/sh\nexit 1\n", mode: 755 },
  { path: "/workspace/f.txt", data: "12345", mode: 604 }]);
fi = (await odd.files.getFileInfo(["/workspace/f.txt"]))["/workspace/f.txt"];
ok(fi && fi.type === "file" && fi.size === 5 && fi.mode === 604 && fi.owner === "root" && fi.group === "root",
  "getFileInfo without a usable stat: from the init, owner and group by name", fi);
ls = await odd.files.listDirectory({ path: "/workspace" });
ok(ls.some((f) => f.path === "/workspace/bin" && f.type === "directory"), "listDirectory without a usable stat", ls);
await odd.kill();

// a pvc volume is an agentbox named volume, made at its first use and shared
const vol = { name: "data", pvc: { claimName: `osbvol${process.pid}`, storage: "64Mi" }, mountPath: "/data", readOnly: false };
const v1 = await Sandbox.create({ connectionConfig: admin, image: "base", volumes: [vol] });
await v1.files.writeFiles([{ path: "/data/shared.txt", data: "on the volume" }]);
const v2 = await Sandbox.create({ connectionConfig: admin, image: "base",
  volumes: [{ ...vol, readOnly: true }] });
ok((await v2.files.readFile("/data/shared.txt")) === "on the volume", "a pvc volume is shared between sandboxes");
ex = await v2.commands.run("touch /data/x");
ok(ex.exitCode !== 0, "readOnly mounts the volume read-only", ex);
await v1.kill();
await v2.kill();
const volGone = await until(async () => {
  const r = await fetch(`${url}/v1/volumes/${vol.pvc.claimName}`, {
    method: "DELETE", headers: { authorization: `Bearer ${token}` },
  });
  return r.status < 300 ? true : null;
}, 10000, 200);
ok(volGone, "the volume is deleted once its sandboxes are (agentbox's own API)");
await throwsApi(() => Sandbox.create({ connectionConfig: admin, image: "base",
  volumes: [{ name: "n", pvc: { claimName: "osb-none", createIfNotExists: false }, mountPath: "/n", readOnly: false }] }),
  404, "a pvc volume that does not exist with createIfNotExists false: 404");

// a sandbox from an image of agentbox's image store
if (imageRef) {
  const ib = await Sandbox.create({ connectionConfig: admin, image: imageRef });
  info = await ib.getInfo();
  ok(info.image?.uri === imageRef, "an image of the store: getInfo names it", info.image);
  ex = await ib.commands.run("ls /bin/busybox && cat /etc/passwd | head -1");
  ok(ex.exitCode === 0 && out(ex).startsWith("/bin/busybox\n"), "an image of the store: its files (busybox)", ex);
  ex = await ib.commands.run("test -e /usr/bin/python3 && echo host || echo image");
  ok(out(ex) === "image\n", "an image of the store: not the host base", ex);
  await ib.files.writeFiles([{ path: "/workspace/in-image.txt", data: "x" }]);
  fi = (await ib.files.getFileInfo(["/workspace/in-image.txt"]))["/workspace/in-image.txt"];
  ok(fi && fi.size === 1, "an image of the store: files (its busybox has no stat: the init's lstat)", fi);
  // snapshots: images of the store made from the box
  const smgr = SandboxManager.create({ connectionConfig: admin });
  const snap = await smgr.createSnapshot(ib.id, { name: "v1" });
  ok(snap.id.startsWith("sha256:") && snap.sandboxId === ib.id && snap.name === "v1" &&
     snap.status.state === "Ready" && snap.createdAt instanceof Date, "createSnapshot", snap);
  const got = await smgr.getSnapshot(snap.id);
  ok(got.id === snap.id && got.sandboxId === ib.id, "getSnapshot", got);
  let sl = await smgr.listSnapshots({ sandboxId: ib.id });
  ok(sl.items.length === 1 && sl.items[0].id === snap.id && sl.pagination.totalItems === 1, "listSnapshots by sandbox", sl);
  const restored = await Sandbox.create({ connectionConfig: admin, snapshotId: snap.id });
  ok((await restored.files.readFile("/workspace/in-image.txt")) === "x", "a sandbox from a snapshot has its files");
  const keyS = await fetch(`${url}/v1/keys`, { method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ app_id: "osb-snap-other" }) }).then((r) => r.json());
  const other = SandboxManager.create({ connectionConfig: conn(keyS.key) });
  await throwsApi(() => other.getSnapshot(snap.id), 404, "another app's key: the snapshot is a 404");
  sl = await other.listSnapshots({});
  ok(sl.items.length === 0, "another app's key lists none of it", sl.items);
  await throwsApi(() => Sandbox.create({ connectionConfig: conn(keyS.key), snapshotId: snap.id }), 404,
    "another app's key cannot start a sandbox from it");
  await restored.kill();
  await smgr.deleteSnapshot(snap.id);
  await throwsApi(() => smgr.getSnapshot(snap.id), 404, "deleteSnapshot: gone (404)");
  // a snapshot made with an app's key: that app's own (agentbox's private image)
  const keyO = await fetch(`${url}/v1/keys`, { method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ app_id: "osb-snap-own" }) }).then((r) => r.json());
  const own = SandboxManager.create({ connectionConfig: conn(keyO.key) });
  const ob = await Sandbox.create({ connectionConfig: conn(keyO.key), image: imageRef });
  await ob.files.writeFiles([{ path: "/workspace/own.txt", data: "own" }]);
  const osnap = await own.createSnapshot(ob.id, { name: "v2" });
  ok(osnap.sandboxId === ob.id && osnap.name === "v2", "an app's key: createSnapshot", osnap);
  sl = await own.listSnapshots({ sandboxId: ob.id });
  ok(sl.items.length === 1 && sl.items[0].id === osnap.id && sl.items[0].name === "v2",
     "... its listSnapshots has it", sl.items);
  const oback = await Sandbox.create({ connectionConfig: conn(keyO.key), snapshotId: osnap.id });
  ok((await oback.files.readFile("/workspace/own.txt")) === "own", "... a sandbox from it has its files");
  await throwsApi(() => other.getSnapshot(osnap.id), 404, "... another app's key: a 404");
  const imgs = await fetch(`${url}/v1/images`, { headers: { authorization: `Bearer ${keyS.key}` } })
    .then((r) => r.json());
  ok(!imgs.images.some((i) => i.id === osnap.id), "... nor in its /v1/images", imgs.images.map((i) => i.id));
  await oback.kill();
  await own.deleteSnapshot(osnap.id);
  await throwsApi(() => own.getSnapshot(osnap.id), 404, "... deleteSnapshot: gone (404)");
  await ob.kill();
  await own.close();
  await other.close();
  await smgr.close();
  await ib.kill();
}

// ---- app-scoped keys ----------------------------------------------------------------
async function newKey(app) {
  const r = await fetch(`${url}/v1/keys`, {
    method: "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    body: JSON.stringify({ app_id: app }),
  });
  return (await r.json()).key;
}
const keyA = await newKey("osb-app-a"), keyB = await newKey("osb-app-b");
const sa = await Sandbox.create({ connectionConfig: conn(keyA), image: "base", metadata: { who: "a" } });
ex = await sa.commands.run("echo from-a");
ok(out(ex) === "from-a\n", "an app key creates and runs in its box", ex);
const ma = SandboxManager.create({ connectionConfig: conn(keyA) });
const mb = SandboxManager.create({ connectionConfig: conn(keyB) });
list = await ma.listSandboxInfos({});
ok(list.items.length === 1 && list.items[0].id === sa.id, "app key A lists only its box", list.items.map((i) => i.id));
list = await mb.listSandboxInfos({});
ok(list.items.length === 0, "app key B sees none of A's boxes", list.items.map((i) => i.id));
await throwsApi(() => mb.getSandboxInfo(sa.id), 404, "app key B: A's box is a 404");
await throwsApi(() => ma.getSandboxInfo(sbx.id), 404, "app key A: the admin's box is a 404");
const sbB = await Sandbox.connect({ sandboxId: sa.id, connectionConfig: conn(keyB), skipHealthCheck: true })
  .catch((e) => e);
ok(sbB instanceof SandboxApiException && sbB.statusCode === 404, "app key B cannot connect to A's box", errText(sbB));
await sa.kill();
await ma.close();
await mb.close();

// ---- the calls FastGPT's adapter makes (its opensandbox provider) ----------------------
// create: a lookup by its session metadata, then Sandbox.create; exec with
// handlers; stop: pause and poll until Paused; ensureRunning again: lookup,
// Sandbox.resume; delete: kill and poll until the sandbox is gone (404).
const sessionId = `fastgpt-${process.pid}`;
let found0 = await mgr.listSandboxInfos({ metadata: { sessionId }, pageSize: 100 });
ok(found0.items.length === 0, "FastGPT: no sandbox for a new session", found0);
const fg = await Sandbox.create({
  connectionConfig: admin, image: "base:latest", timeoutSeconds: null,
  resource: { cpu: "1", memory: "1024Mi" }, metadata: { sessionId },
});
let outs = "";
ex = await fg.commands.run("echo fastgpt-ok", { workingDirectory: "/workspace" },
  { skipAccumulation: true, onStdout: (m) => { outs += m.text; } });
ok(outs === "fastgpt-ok" && ex.exitCode === 0, "FastGPT: execute with handlers", { outs, ex });
info = await fg.getInfo();
ok(info.expiresAt === null || info.expiresAt === undefined, "FastGPT: timeoutSeconds null means no expiry", info);
await fg.pause();
const paused = await until(async () => ((await fg.getInfo()).status.state === "Paused" ? true : null));
ok(paused, "FastGPT: stop = pause, polled until Paused");
found0 = await mgr.listSandboxInfos({ metadata: { sessionId }, pageSize: 100 });
ok(found0.items.length === 1 && found0.items[0].status.state === "Paused", "FastGPT: found by session, Paused", found0);
const fg2 = await Sandbox.resume({ sandboxId: found0.items[0].id, connectionConfig: admin });
ex = await fg2.commands.run("echo again");
ok(out(ex) === "again\n", "FastGPT: Sandbox.resume then execute", ex);
await fg2.kill();
const gone = await until(async () => {
  try {
    await fg2.getInfo();
    return null;
  } catch (e) {
    return e instanceof SandboxApiException && e.statusCode === 404;
  }
});
ok(gone, "FastGPT: delete = kill, polled until 404");

// ---- delete ----------------------------------------------------------------------
await resumed.kill();
await throwsApi(() => mgr.getSandboxInfo(sbx.id), 404, "kill: the sandbox is gone (404)");
await mgr.close();
await sbx.close();
await resumed.close();
done();
