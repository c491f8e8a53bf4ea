"""The E2B front (docs/compat-e2b.md) driven by E2B's own JS SDK, unchanged.

tests/e2b/sdk.mjs runs the real `e2b` npm package, 2.51.0 and then 2.45.0 (pinned by
tests/e2b/package-lock.json, installed by scripts/npm-deps.sh) against a
server started here with E2B_API_URL=URL/e2b, E2B_SANDBOX_URL=URL/e2b/envd
and E2B_API_KEY=the admin token; its TAP lines are relayed as this file's
tests: create, info, list with filters; commands (foreground, background
with pids, stdin, streaming output that arrives while the command runs,
connect, kill, SIGTERM, a missing command as CommandExitError 127, a
timeout as TimeoutError); files (write, read, list, rename, makeDir,
remove, several files in one upload, binary); watchDir; a dev server in the
box through the port route and getHost(); setTimeout; pause and connect
with the files kept; errors as the SDK's own types (NotFoundError,
AuthenticationError); an app-scoped API key that sees only its sandboxes.

Then, here, over plain HTTP: the Connect protocol's edges (missing
headers, a bad token, unknown methods), a sandbox whose envd access token
still works after a restart of the server, and autoPause: a sandbox whose
timeout runs out is paused, not deleted, and a connect brings it back.

Without node the file is skipped; without the SDK installed (and no way to
install it) too."""
import base64
import http.client
import json
import os
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import imagelib  # noqa: E402
import registry  # noqa: E402
import taprelay  # noqa: E402

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
E2B_DIR = os.path.join(ROOT, "tests", "e2b")
DOMAIN = "e2b.test"
SDKS = taprelay.E2B_SDKS

h = abserver.ServerHarness(budget=280)
node = taprelay.need_e2b_sdks(h)

TOKEN = "e2b-admin-token-%s-0123456789" % os.getpid()
srv = h.start_server(token=TOKEN, config={"ports_domain": DOMAIN, "reaper_interval": "500ms"})

# A server without boxes lists none (the list's sort once got a NULL array:
# undefined behaviour, found by fuzz_http).
r = srv.request("GET", "/e2b/v2/sandboxes", headers={"X-API-Key": TOKEN}, token=None)
h.ok(r.status == 200 and r.json == [], "list on a server without sandboxes: 200 []", r.describe())


env = {k: v for k, v in os.environ.items() if not k.startswith("E2B_")}
env.update({"E2B_API_URL": srv.url + "/e2b", "E2B_SANDBOX_URL": srv.url + "/e2b/envd", "E2B_API_KEY": TOKEN,
            "E2B_VALIDATE_API_KEY": "false"})  # SDK 2.45 wants e2b_ + hex keys otherwise
for sdk in SDKS:  # both SDKs the project pins, against the same server
    env["E2B_SDK_MODULE"] = sdk
    taprelay.relay(h, [node, os.path.join(E2B_DIR, "sdk.mjs"), srv.url, TOKEN, DOMAIN], env, E2B_DIR,
                   label=sdk, timeout=200, min_checks=80)

# ---- the Connect protocol and the control plane over plain HTTP ------------------------
KEY = {"X-API-Key": TOKEN}
r = srv.post("/e2b/v2/sandboxes", {"templateID": "base", "timeout": 600, "metadata": {"t": "raw"}},
             headers=KEY, token=None)
h.eq(r.status, 201, "POST /e2b/v2/sandboxes with X-API-Key: 201", r.describe())
sid, tok = r.get("sandboxID"), r.get("envdAccessToken")
h.ok(isinstance(tok, str) and len(tok) == 64 and r.get("envdVersion") == "0.6.4" and r.get("domain") == DOMAIN,
     "the create answer: envdAccessToken, envdVersion, domain (ports_domain)", r.describe())
ENVD = {"E2b-Sandbox-Id": sid or "", "X-Access-Token": tok or ""}


def rpc(method, body, headers=ENVD, raw=None):
    hdr = dict(headers)
    hdr["Content-Type"] = "application/json"
    return srv.request("POST", "/e2b/envd/" + method, body=raw if raw is not None else body, headers=hdr, token=None)


r = rpc("process.Process/List", {})
h.ok(r.status == 200 and r.get("processes") == [], "List: 200 {processes: []}", r.describe())
h.ok((r.header("Content-Type") or "").startswith("application/json"), "unary answers are application/json",
     r.describe())
r = rpc("process.Process/List", {}, headers={"E2b-Sandbox-Id": sid})
h.ok(r.status == 401 and r.get("code") == "unauthenticated", "no X-Access-Token: 401 unauthenticated", r.describe())
r = rpc("process.Process/List", {}, headers={"E2b-Sandbox-Id": sid, "X-Access-Token": "0" * 64})
h.ok(r.status == 401 and r.get("code") == "unauthenticated", "a wrong token: 401 unauthenticated", r.describe())
r = rpc("process.Process/List", {}, headers={"X-Access-Token": tok})
h.ok(r.status == 400 and r.get("code") == "invalid_argument", "no E2b-Sandbox-Id: 400", r.describe())
other = srv.post("/e2b/v2/sandboxes", {}, headers=KEY, token=None).get("sandboxID")
r = rpc("process.Process/List", {}, headers={"E2b-Sandbox-Id": other or "", "X-Access-Token": tok})
h.ok(r.status == 401, "one sandbox's token does not open another", r.describe())
r = rpc("process.Process/NoSuchMethod", {})
h.ok(r.status == 501 and r.get("code") == "unimplemented", "an unknown method: 501 unimplemented", r.describe())
r = rpc("filesystem.Filesystem/Stat", None, raw=b"{not json")
h.ok(r.status == 400 and r.get("code") == "invalid_argument", "bad JSON: 400 invalid_argument", r.describe())
r = rpc("filesystem.Filesystem/Stat", {"path": "/nope/x"})
h.ok(r.status == 404 and r.get("code") == "not_found", "Stat of a missing path: 404 not_found", r.describe())
r = rpc("filesystem.Filesystem/Stat", {"path": "/home/user"})
h.ok(r.status == 200 and (r.get("entry") or {}).get("type") == "FILE_TYPE_DIRECTORY" and
     not (r.get("entry") or {}).get("symlinkTarget") and (r.get("entry") or {}).get("owner") == "user",
     "Stat /home/user: a directory of user's own (E2B's account), enums as names", r.describe())
r = srv.request("GET", "/e2b/envd/health", headers=ENVD, token=None)
h.eq(r.status, 204, "GET /e2b/envd/health: 204", r.describe())
r = srv.get("/e2b/sandboxes/nosuchsandbox0000000", headers=KEY, token=None)
h.ok(r.status == 404 and r.get("code") == 404 and r.get("message"), "an unknown sandbox: 404 {code, message}",
     r.describe())
r = srv.get("/e2b/v2/sandboxes", headers={"X-API-Key": "wrong"}, token=None)
h.eq(r.status, 401, "a wrong X-API-Key: 401", r.describe())
r = srv.get("/e2b/snapshots", headers=KEY, token=None)
h.eq(r.status, 501, "a call agentbox does not serve: 501", r.describe())
r = srv.get("/v1/sandboxes/%s" % sid)
h.ok(r.status == 200 and r.get("idle_stop_s") == -1 and r.get("idle_pause_s") == -1 and r.get("metadata") == {"t": "raw"},
     "an E2B sandbox is an agentbox box that never idles out (its timeout is its life)", r.describe())

# ---- StreamInput (a client stream; the JS SDK has no call for it) ------------------------
def envelope(obj, flags=0):
    b = json.dumps(obj).encode()
    return struct.pack(">BI", flags, len(b)) + b


def read_frames(resp):
    frames = []
    while True:
        head = resp.read(5)
        if len(head) < 5:
            return frames
        frames.append((head[0], json.loads(resp.read(struct.unpack(">I", head[1:5])[0]))))
        if head[0] & 2:
            return frames


c = http.client.HTTPConnection(srv.host, srv.port, timeout=20)
c.request("POST", "/e2b/envd/process.Process/Start",
          body=envelope({"process": {"cmd": "/bin/cat"}, "stdin": True, "tag": "cat-1"}),
          headers=dict(ENVD, **{"Content-Type": "application/connect+json"}))
resp = c.getresponse()
head = resp.read(5)
start = json.loads(resp.read(struct.unpack(">I", head[1:5])[0])) if len(head) == 5 else {}
pid = start.get("event", {}).get("start", {}).get("pid")
body = (envelope({"start": {"process": {"tag": "cat-1"}}}) +
        envelope({"data": {"input": {"stdin": "c3RyZWFtZWQg"}}}) +  # "streamed "
        envelope({"data": {"input": {"stdin": "aW5wdXQK"}}}) +  # "input\n"
        envelope({}, 2))
r = srv.request("POST", "/e2b/envd/process.Process/StreamInput", body=body, token=None,
                headers=dict(ENVD, **{"Content-Type": "application/connect+json"}))
h.ok(r.status == 200 and r.body.endswith(envelope({}, 2)), "StreamInput: 200, a message and the end envelope",
     r.describe())
r = rpc("process.Process/CloseStdin", {"process": {"pid": pid}})
h.eq(r.status, 200, "CloseStdin", r.describe())
frames = read_frames(resp)
c.close()
out = b"".join(base64.b64decode(f.get("event", {}).get("data", {}).get("stdout", ""))
               for _, f in frames)
ends = [f["event"]["end"] for _, f in frames if "end" in f.get("event", {})]
h.ok(out == b"streamed input\n" and ends and ends[0].get("exitCode", 0) == 0 and frames[-1] == (2, {}),
     "the stream input reached cat, which ended at the closed stdin", frames)

# ---- templateID names an image (a busybox image from a registry on loopback) --------------
why = registry.missing() or (None if os.path.exists(imagelib.BUSYBOX) else "busybox-static is not installed") \
    or (None if abserver.abtest.init_is_static() else "agentbox-init is dynamically linked (sanitized build)")
if why:
    h.skip("templateID: a box of an image", why)
else:
    with registry.Registry(h.root) as reg:
        with open(imagelib.BUSYBOX, "rb") as f:
            spec = {"bin/busybox": imagelib.file(f.read(), 0o755), "etc/passwd": imagelib.PASSWD,
                    "etc/group": imagelib.GROUP, "tmp": imagelib.directory(0o1777)}
        for tool in ("sh", "cat", "echo", "printf", "mkdir", "ln", "ls", "kill"):
            spec["bin/" + tool] = imagelib.symlink("busybox")
        spec["bin/bash"] = imagelib.file('#!/bin/sh\nexec /bin/sh "$@"\n', 0o755)  # the SDK runs bash -l -c
        registry.push_image(reg.host, "e2b/bb", "1", [imagelib.layer_tar(spec)],
                            imagelib.config(env=["PATH=/bin", "FROM_IMAGE=yes"]))
        tpl = "%s/e2b/bb:1" % reg.host
        r = srv.post("/e2b/v2/sandboxes", {"templateID": tpl, "timeout": 120}, headers=KEY, token=None)
        ib, itok = r.get("sandboxID"), r.get("envdAccessToken")
        h.ok(r.status == 201 and r.get("templateID") == tpl, "create with templateID = an image reference: 201",
             r.describe())
        h.eq((srv.get("/v1/sandboxes/%s" % ib).get("image") or {}).get("ref"), tpl,
             "the box is made from that image (pulled at create)")
        IENVD = {"E2b-Sandbox-Id": ib or "", "X-Access-Token": itok or ""}
        c = http.client.HTTPConnection(srv.host, srv.port, timeout=30)
        c.request("POST", "/e2b/envd/process.Process/Start",
                  body=envelope({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo $FROM_IMAGE; ls /home"]}}),
                  headers=dict(IENVD, **{"Content-Type": "application/connect+json"}))
        frames = read_frames(c.getresponse())
        c.close()
        out = b"".join(base64.b64decode(f.get("event", {}).get("data", {}).get("stdout", "")) for _, f in frames)
        pid = next((f["event"]["start"]["pid"] for _, f in frames if "start" in f.get("event", {})), 0)
        h.ok(out.startswith(b"yes\n") and b"user" in out and 0 < pid < (1 << 22),
             "a command in the image's box: its env, its own pid, /home/user made", (out, frames))
        srv.delete("/e2b/sandboxes/%s" % ib, headers=KEY, token=None)

        # createSnapshot with an app's key: a templateID for that app only
        akey = {a: {"X-API-Key": srv.post("/v1/keys", {"app_id": a}).get("key") or ""} for a in ("e2b-a", "e2b-b")}
        r = srv.post("/e2b/v2/sandboxes", {"templateID": tpl, "timeout": 120}, headers=akey["e2b-a"], token=None)
        ab = r.get("sandboxID")
        srv.exec(ab, "echo mine > /workspace/mine")
        snapname = "%s/e2b/snap:1" % reg.host
        r = srv.post("/e2b/sandboxes/%s/snapshots" % ab, {"name": snapname}, headers=akey["e2b-a"], token=None)
        h.eq((r.status, r.get("snapshotID")), (201, snapname), "createSnapshot with app e2b-a's key: 201",
             r.describe())
        r = srv.post("/e2b/v2/sandboxes", {"templateID": snapname, "timeout": 120}, headers=akey["e2b-a"],
                     token=None)
        h.eq(r.status, 201, "... app e2b-a makes a sandbox of it (templateID)", r.describe())
        h.eq((srv.exec(r.get("sandboxID"), "cat /workspace/mine").get("stdout") or "").strip(), "mine",
             "... with the snapshot's files")
        r = srv.post("/e2b/v2/sandboxes", {"templateID": snapname, "timeout": 120}, headers=akey["e2b-b"],
                     token=None)
        h.ok(r.status != 201 and not r.get("sandboxID"), "app e2b-b cannot make a sandbox of it", r.describe())

# ---- the watcher API (CreateWatcher / GetWatcherEvents / RemoveWatcher) ----------------
r = rpc("filesystem.Filesystem/CreateWatcher", {"path": "/home/user", "recursive": True})
wid = r.get("watcherId")
h.ok(r.status == 200 and isinstance(wid, str) and wid, "CreateWatcher: a watcherId", r.describe())
rpc("filesystem.Filesystem/MakeDir", {"path": "/home/user/wdir/sub"})
time.sleep(0.8)
r = rpc("filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
evs = r.get("events") or []
h.ok(r.status == 200 and {"name": "wdir", "type": "EVENT_TYPE_CREATE"} in evs and
     {"name": "wdir/sub", "type": "EVENT_TYPE_CREATE"} in evs,
     "GetWatcherEvents: the creates since the watcher was made (recursive)", r.describe())
r = rpc("filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
h.ok(r.status == 200 and not r.get("events"), "GetWatcherEvents again: nothing new", r.describe())
r = rpc("filesystem.Filesystem/RemoveWatcher", {"watcherId": wid})
h.eq(r.status, 200, "RemoveWatcher", r.describe())
r = rpc("filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid})
h.ok(r.status == 404 and r.get("code") == "not_found", "a removed watcher is not_found", r.describe())
r = rpc("filesystem.Filesystem/GetWatcherEvents", {"watcherId": wid}, headers={"E2b-Sandbox-Id": other or "",
        "X-Access-Token": "x"})
h.eq(r.status, 401, "the watcher API checks the access token too", r.describe())

# ---- the access token survives a restart --------------------------------------------------
r = rpc("filesystem.Filesystem/MakeDir", {"path": "/home/user/before-restart"})
h.eq(r.status, 200, "MakeDir before the restart", r.describe())
# a command and a PTY running (their streams open) when the server stops
streams = []
for extra in ({}, {"pty": {"size": {"cols": 80, "rows": 24}}}):
    body = json.dumps(dict({"process": {"cmd": "/bin/sh", "args": ["-c", "sleep 600"]}}, **extra)).encode()
    c = http.client.HTTPConnection(srv.host, srv.port, timeout=20)
    c.request("POST", "/e2b/envd/process.Process/Start", body=struct.pack(">BI", 0, len(body)) + body,
              headers=dict(ENVD, **{"Content-Type": "application/connect+json"}))
    resp = c.getresponse()
    head = resp.read(5)
    first = json.loads(resp.read(struct.unpack(">I", head[1:5])[0])) if len(head) == 5 else {}
    h.ok(resp.status == 200 and first.get("event", {}).get("start", {}).get("pid"),
         "a running %s before the stop" % ("PTY" if extra else "command"), first)
    streams.append(c)
t0 = time.monotonic()
ok_stop, rc = srv.stop()
h.ok(ok_stop and rc == 0 and time.monotonic() - t0 < 8,
     "the server stops cleanly (exit 0) with E2B processes running", "rc=%s after %.1fs" % (rc, time.monotonic() - t0))
for c in streams:
    c.close()
srv.start()
r = rpc("filesystem.Filesystem/Stat", {"path": "/home/user/before-restart"})
h.ok(r.status == 200, "after a restart of the server the same access token works", r.describe())

# ---- autoPause: the timeout pauses instead of deleting ----------------------------------------
r = srv.post("/e2b/v2/sandboxes", {"timeout": 2, "autoPause": True}, headers=KEY, token=None)
ap = r.get("sandboxID")
h.eq(r.status, 201, "create with autoPause and a 2 s timeout", r.describe())
r = srv.post("/e2b/v2/sandboxes", {"timeout": 2}, headers=KEY, token=None)
gone = r.get("sandboxID")
state = abserver.wait_for(lambda: (srv.get("/e2b/sandboxes/%s" % ap, headers=KEY, token=None).get("state") == "paused"),
                          timeout=15 * h.slow)
h.ok(state, "autoPause: at its timeout the sandbox is paused", srv.get("/e2b/sandboxes/%s" % ap, headers=KEY,
                                                                      token=None).describe())
h.ok(abserver.wait_for(lambda: srv.get("/e2b/sandboxes/%s" % gone, headers=KEY, token=None).status == 404,
                       timeout=15 * h.slow), "without autoPause the timeout kills the sandbox")
r = srv.post("/e2b/v2/sandboxes/%s/connect" % ap, {"timeout": 60}, headers=KEY, token=None)
h.ok(r.status == 201 and r.get("sandboxID") == ap, "connect resumes the auto-paused sandbox: 201", r.describe())
time.sleep(3)
r = srv.get("/e2b/sandboxes/%s" % ap, headers=KEY, token=None)
h.ok(r.status == 200 and r.get("state") == "running", "with its new timeout it keeps running", r.describe())

# ---- a stopped box (idle stop, /v1 stop) is "paused" to E2B, and connect starts it ------
r = srv.post("/v1/sandboxes/%s/stop" % other, {})
h.eq(r.status, 200, "POST /v1/sandboxes/{id}/stop of an E2B sandbox", r.describe())
r = srv.get("/e2b/sandboxes/%s" % other, headers=KEY, token=None)
h.ok(r.status == 200 and r.get("state") == "paused", "a stopped box is paused to E2B", r.describe())
r = srv.post("/e2b/v2/sandboxes/%s/connect" % other, {"timeout": 60}, headers=KEY, token=None)
h.ok(r.status == 201 and srv.get("/v1/sandboxes/%s" % other).get("status") == "running",
     "connect starts a stopped box: 201, running", r.describe())
r = srv.get("/e2b/sandboxes/%s/metrics" % other, headers=KEY, token=None)
samples = r.json if r.status == 200 else None
m = samples[0] if isinstance(samples, list) and samples else {}
h.ok(m.get("memUsed", 0) > 0 and m.get("diskTotal", 0) > 0 and 0 <= m.get("cpuUsedPct", -1) <= 100,
     "metrics: one sample with memory, disk and CPU", r.describe())

for b in (sid, other, ap):
    if b:
        srv.delete("/e2b/sandboxes/%s" % b, headers=KEY, token=None)
h.done()
