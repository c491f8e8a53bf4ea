// The edges where OpenSandbox's own execd and server behave in a way a
// program may rely on, driven through the SDK (@alibaba-group/opensandbox,
// unchanged) and plain fetch: output events one per line, no completion
// after an error, X-Request-ID on every answer, execd's endpoint ending in
// /44772. Prints TAP.
// usage: node edges.mjs URL ADMIN_TOKEN
import { ConnectionConfig, Sandbox } from "@alibaba-group/opensandbox";
import { args, done, ok } from "./tap.mjs";

const [url, token] = args("edges.mjs");

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const texts = (msgs) => msgs.map((m) => m.text);

const connectionConfig = new ConnectionConfig({ domain: `${url}/opensandbox`, apiKey: token, requestTimeoutSeconds: 60 });
const sbx = await Sandbox.create({ connectionConfig, image: "base", timeoutSeconds: 600 });
ok(typeof sbx.id === "string", "Sandbox.create (through the execd endpoint it is given)");

// ---- endpoints: execd's ends with /44772, the egress sidecar's with /18080 ------------
const ep = await sbx.getEndpoint(44772);
ok(!ep.endpoint.includes("://") && ep.endpoint.endsWith("/44772"), "execd's endpoint ends with /44772", ep);
const eg = await sbx.getEndpoint(18080);
ok(eg.endpoint.endsWith("/18080"), "the egress endpoint ends with /18080", eg);
const pol = await sbx.getEgressPolicy();
ok(pol && typeof pol.defaultAction === "string", "getEgressPolicy through the /18080 endpoint", pol);
let res = await fetch(`${url}/opensandbox/execd/${sbx.id}/ping`, { headers: { "OPEN-SANDBOX-API-KEY": token } });
ok(res.status === 200, "the old execd route still answers", res.status);
res = await fetch(`http://${ep.endpoint}/ping`, { headers: { "OPEN-SANDBOX-API-KEY": token } });
ok(res.status === 200, "ping at the endpoint given", res.status);

// ---- output: one event per line, without its end ----------------------------------
let ex = await sbx.commands.run("echo one; echo two; echo three >&2");
ok(same(texts(ex.logs.stdout), ["one", "two"]) && same(texts(ex.logs.stderr), ["three"]),
  "stdout and stderr: one event per line, no newline", ex.logs);
ex = await sbx.commands.run("printf 'a\\n\\nb\\n'");
ok(same(texts(ex.logs.stdout), ["a", "\n", "b"]), "an empty line is an event of its own (\"\\n\")", ex.logs);
ex = await sbx.commands.run("printf 'c\\r\\nd\\re\\n'");
ok(same(texts(ex.logs.stdout), ["c", "d", "e"]), "\\r\\n is one line end; \\r ends a line", ex.logs);
ex = await sbx.commands.run("printf 'first\\nno-end'; sleep 0.3; printf ' still'");
ok(same(texts(ex.logs.stdout), ["first", "no-end still"]) && ex.exitCode === 0,
  "a last line without its end comes whole when the command ends", ex.logs);
ex = await sbx.commands.run("printf 'x\\344\\270'; sleep 0.3; printf '\\255y\\n'");
ok(same(texts(ex.logs.stdout), ["x\u4e2dy"]), "a character split between two writes arrives whole", ex.logs);
ex = await sbx.commands.run("printf 'a\\377b\\n'");
ok(same(texts(ex.logs.stdout), ["a\ufffdb"]), "a byte that is not UTF-8 becomes U+FFFD", ex.logs);
ex = await sbx.commands.run("head -c 150000 /dev/zero | tr '\\0' z; echo; echo after");
const long = texts(ex.logs.stdout);
ok(long.length === 4 && long.slice(0, 3).join("") === "z".repeat(150000) && long[0].length === 65536 &&
  long[3] === "after", "a line longer than 64 KiB comes in 64 KiB pieces",
  long.map((t) => t.length));
const arrivals = [];
const t0 = Date.now();
await sbx.commands.run("echo early; sleep 1.5; echo late", {}, { onStdout: (m) => arrivals.push([m.text, Date.now() - t0]) });
ok(arrivals.length === 2 && arrivals[0][0] === "early" && arrivals[1][1] - arrivals[0][1] > 1000,
  "a line is sent when it ends, while the command runs", arrivals);

// ---- after an error, no completion ------------------------------------------------
let completes = 0;
ex = await sbx.commands.run("echo before; exit 3", {}, { onExecutionComplete: () => completes++ });
ok(ex.exitCode === 3 && ex.error?.name === "CommandExecError" && !ex.complete && completes === 0 &&
  same(texts(ex.logs.stdout), ["before"]), "a failed command: error, no execution_complete", ex);
ex = await sbx.commands.run("sleep 10", { timeoutSeconds: 1 });
ok(ex.error?.name === "TimeoutError" && !ex.complete, "a timed-out command: error, no execution_complete", ex);
ex = await sbx.commands.run("true");
ok(ex.exitCode === 0 && ex.complete && !ex.error, "a command that succeeds: execution_complete, no error", ex);

const sid = await sbx.commands.createSession();
ex = await sbx.commands.runInSession(sid, "echo s1; echo; echo s2 >&2");
ok(same(texts(ex.logs.stdout), ["s1", "s2"]) && ex.complete && !ex.error,
  "a session run: one event per line, empty lines not sent (as execd's bash sessions)", ex.logs);
ex = await sbx.commands.runInSession(sid, "printf 'partial'");
ok(same(texts(ex.logs.stdout), ["partial"]), "a session run: a last line without its end", ex.logs);
ex = await sbx.commands.runInSession(sid, "false");
ok(ex.error?.name === "CommandExecError" && ex.exitCode === 1 && !ex.complete,
  "a session run that fails: error, no execution_complete", ex);
ex = await sbx.commands.runInSession(sid, "sleep 10", { timeoutSeconds: 1 });
ok(ex.error && !ex.complete, "a session run that times out: error, no execution_complete", ex);

// ---- X-Request-ID on every answer ---------------------------------------------------
const hdr = (extra) => ({ "OPEN-SANDBOX-API-KEY": token, ...extra });
const HEX32 = /^[0-9a-f]{32}$/;
const rid = (r) => r.headers.get("x-request-id");
res = await fetch(`${url}/opensandbox/v1/sandboxes/${sbx.id}`, { headers: hdr({ "X-Request-ID": "trace-abc-1" }) });
ok(res.status === 200 && rid(res) === "trace-abc-1", "lifecycle: X-Request-ID echoed", [res.status, rid(res)]);
res = await fetch(`${url}/opensandbox/v1/sandboxes/${sbx.id}`, { headers: hdr({}) });
ok(HEX32.test(rid(res) ?? ""), "lifecycle: an X-Request-ID made when the client sent none", rid(res));
const other = await fetch(`${url}/opensandbox/v1/sandboxes/${sbx.id}`, { headers: hdr({}) });
ok(rid(other) !== rid(res), "each answer gets its own id", [rid(res), rid(other)]);
res = await fetch(`${url}/opensandbox/v1/sandboxes/osb-0000000000000000`, { headers: hdr({ "X-Request-ID": "r-404" }) });
ok(res.status === 404 && rid(res) === "r-404", "an error answer (404) carries it", [res.status, rid(res)]);
res = await fetch(`${url}/opensandbox/v1/sandboxes`, { headers: { "OPEN-SANDBOX-API-KEY": "wrong", "X-Request-ID": "r-401" } });
ok(res.status === 401 && rid(res) === "r-401", "a refused key's answer (401) carries it", [res.status, rid(res)]);
res = await fetch(`${url}/opensandbox/v1/sandboxes/${sbx.id}`, { method: "PUT", headers: hdr({ "X-Request-ID": "r-405" }) });
ok(res.status === 405 && rid(res) === "r-405", "a method not allowed (405) carries it", [res.status, rid(res)]);
res = await fetch(`http://${ep.endpoint}/files/info?path=/nope`, { headers: hdr({ "X-Request-ID": "r-execd" }) });
ok(res.status === 404 && rid(res) === "r-execd", "execd's answers carry it", [res.status, rid(res)]);
res = await fetch(`http://${ep.endpoint}/command`, {
  method: "POST", headers: hdr({ "X-Request-ID": "r-sse", "content-type": "application/json" }),
  body: JSON.stringify({ command: "true" }),
});
await res.text();
ok(res.status === 200 && rid(res) === "r-sse", "an event stream's answer carries it", [res.status, rid(res)]);
res = await fetch(`${url}/opensandbox/v1/sandboxes/${sbx.id}`, { headers: hdr({ "X-Request-ID": "x".repeat(300) }) });
ok(HEX32.test(rid(res) ?? ""), "an id over 256 characters is replaced by one of ours", rid(res)?.length);
res = await fetch(`${url}/v1/sandboxes`, { headers: { Authorization: `Bearer ${token}`, "X-Request-ID": "r-rest" } });
ok(rid(res) === null, "agentbox's own API is left as it is", rid(res));

await sbx.kill();
done();
