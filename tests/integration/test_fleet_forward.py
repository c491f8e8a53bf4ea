#!/usr/bin/env python3
"""Any node answers for any box (docs/fleet.md): a three-node fleet on
127.0.0.1-3 sharing the suite's PostgreSQL; boxes live on n1 and every
public route is used through n2 or n3, which forward to n1 and stream the
answer back: JSON, an exec's event stream, an upload and a download
(1 MiB, byte for byte), a terminal over WebSocket, a box's port (HTTP and a
WebSocket echo), the E2B front (control plane and envd) and the OpenSandbox
front (lifecycle and execd), MCP tool calls (an agent tool, stop, delete),
a delete by keys, /v1/exec and /v1/tools by keys, the lifecycle (stop, start) and the delete.
The app's API key made on one node works on all of them."""
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import abfleet  # noqa: E402
import wsclient  # noqa: E402

LIB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib")
h = abserver.ServerHarness(budget=200)
F = abfleet.Fleet(h, name="fleetfwd", config={"idle_pause": "1h", "idle_stop": "2h"})
try:
    n1, n2, n3 = F.nodes
    r = n1.post("/v1/keys", {"app_id": "fwdapp"})
    h.eq(r.status, 201, "an API key made through n1", r.describe())
    KEY = r.get("key") or "none"

    r = n1.post("/v1/sandboxes", {"app_id": "fwdapp", "user_id": "u", "chat_id": "c"}, token=KEY)
    h.eq((r.status, r.get("node")), (201, "n1"), "a box made through n1 lives on n1", r.describe())
    B = r.get("id") or "none"

    # ---- JSON -------------------------------------------------------------------------------
    r = n2.get("/v1/sandboxes/%s" % B, token=KEY)
    h.eq((r.status, r.get("id"), r.get("node")), (200, B, "n1"), "GET the box through n2", r.describe())
    r = n2.exec(B, "echo from-$(hostname)", token=KEY)
    h.eq((r.status, r.get("stdout")), (200, "from-%s\n" % B), "exec through n2 runs on n1", r.describe())
    r = n3.post("/v1/sandboxes/%s/tools/bash" % B, {"command": "echo tool"}, token=KEY)
    h.eq(r.status, 200, "an agent tool through n3", r.describe())
    h.contains(r.text, "tool", "... with its output")

    keys = {"app_id": "fwdapp", "user_id": "u", "chat_id": "c"}
    r = n3.post("/v1/exec", dict(keys, command="echo one-call-$(hostname)"), token=KEY)
    h.eq((r.status, r.get("stdout"), r.get("sandbox_id")), (200, "one-call-%s\n" % B, B),
         "POST /v1/exec with the keys of n1's box through n3 runs on n1", r.describe())
    r = n2.post("/v1/tools/bash", dict(keys, command="echo tool-call"), token=KEY)
    h.ok(r.status == 200 and "tool-call" in r.text, "POST /v1/tools/bash with its keys through n2", r.describe())

    # ---- an exec's event stream -----------------------------------------------------------------
    s = n3.sse("/v1/sandboxes/%s/exec" % B, method="POST", token=KEY,
               body={"command": "for i in 1 2 3; do echo line$i; sleep 0.2; done"})
    evs = s.collect(until=lambda e: e.type == "exit", timeout=15)
    out = "".join(json.loads(e.data).get("data", "") for e in evs if e.type == "stdout")
    h.eq((s.status, out), (200, "line1\nline2\nline3\n"), "an exec's SSE stream through n3", s.describe())
    h.eq(evs and evs[-1].type, "exit", "... ends with its exit event")
    gaps = [b.t - a.t for a, b in zip(evs, evs[1:])]
    h.ok(len(evs) >= 3 and max(gaps[:2] or [0]) > 0.1, "... streamed as the lines come, not at the end",
         repr([(e.type, round(e.t, 2)) for e in evs]))

    # ---- upload and download ------------------------------------------------------------------
    blob = os.urandom(1 << 20)
    r = n2.put(n2.file_path(B, "/workspace/blob.bin"), blob, token=KEY)
    h.ok(r.status in (200, 201), "a 1 MiB upload through n2", r.describe())
    r = n1.exec(B, "sha256sum /workspace/blob.bin", token=KEY)
    h.eq((r.get("stdout") or "").split(" ")[0], hashlib.sha256(blob).hexdigest(), "... arrives on n1 whole")
    r = n3.get(n3.file_path(B, "/workspace/blob.bin"), token=KEY)
    h.ok(r.status == 200 and r.body == blob, "the download through n3 is byte for byte", r.describe())

    # ---- a terminal over WebSocket --------------------------------------------------------------
    r = n3.post("/v1/sandboxes/%s/terminals" % B, {}, token=KEY)
    h.eq(r.status, 201, "a terminal opened through n3", r.describe())
    tid = r.get("id") or "none"
    ws = wsclient.connect(n2, "/v1/sandboxes/%s/terminals/%s" % (B, tid), token=KEY)
    h.eq(ws.status, 101, "... attached over WebSocket through n2", ws.head)
    ws.send_binary(b"echo $((40+2))-fleet\n")
    got = ws.read_until(lambda o: b"42-fleet" in o)
    h.ok(b"42-fleet" in got, "... typed input runs and its output comes back", repr(got[-200:]))
    ws.close()
    ws2 = wsclient.connect(n3, "/v1/sandboxes/%s/terminals/%s" % (B, tid), token=None,
                           protocols=["agentbox.terminal.v1", "bearer." + KEY])
    h.eq(ws2.status, 101, "... and with the browser's subprotocol token through n3", ws2.head)
    ws2.close()

    # ---- a port -----------------------------------------------------------------------------------
    with open(os.path.join(LIB, "boxhttp.py"), "rb") as f:
        n1.put(n1.file_path(B, "/workspace/boxhttp.py"), f.read(), token=KEY)
    n1.exec(B, "setsid nohup python3 /workspace/boxhttp.py 8000 >/tmp/srv.log 2>&1 </dev/null &", token=KEY)
    P = "/v1/sandboxes/%s/ports/8000" % B
    up = abserver.wait_for(lambda: n1.get(P + "/echo", token=KEY, timeout=5).status == 200, timeout=20)
    h.ok(up, "a server in the box answers on n1")
    r = n2.get(P + "/echo/x?y=1", token=KEY)
    h.eq(r.status, 200, "its port through n2", r.describe())
    h.eq((r.json or {}).get("target"), "/echo/x?y=1", "... with the request's target", r.describe())
    h.not_contains(r.text, abfleet.SECRET, "... and the box never sees the fleet secret")
    h.not_contains(r.text.lower(), "x-agentbox-fleet", "... nor the fleet's headers")
    r = n3.get(P + "/echo", token=None)
    h.eq(r.status, 401, "a private port without a credential through n3: 401", r.describe())
    wp = wsclient.connect(n3, P + "/ws", token=KEY)
    h.eq(wp.status, 101, "a WebSocket to the box's port through n3", wp.head)
    if wp.status == 101:
        wp.send_binary(b"ping-fleet")
        got = wp.read_until(lambda o: b"ping-fleet" in o)
        h.ok(b"ping-fleet" in got, "... echoes", repr(got[-100:]))
        wp.close()

    # ---- the E2B front ----------------------------------------------------------------------------
    r = n1.post("/e2b/sandboxes", {"templateID": "base", "timeout": 120}, token=None, headers={"X-API-Key": KEY})
    h.ok(r.status in (200, 201), "an E2B sandbox made through n1", r.describe())
    E, ET = r.get("sandboxID") or "none", r.get("envdAccessToken") or "none"
    r = n2.get("/e2b/sandboxes/%s" % E, token=None, headers={"X-API-Key": KEY})
    h.eq((r.status, r.get("sandboxID")), (200, E), "... GET through n2", r.describe())
    r = n3.post("/e2b/envd/filesystem.Filesystem/MakeDir", {"path": "/workspace/e2bdir"}, token=None,
                headers={"E2b-Sandbox-Id": E, "X-Access-Token": ET})
    h.eq(r.status, 200, "... an envd call through n3", r.describe())
    r = n1.exec(E, "test -d /workspace/e2bdir && echo yes", token=KEY)
    h.eq(r.get("stdout"), "yes\n", "... made the directory on n1", r.describe())
    r = n2.delete("/e2b/sandboxes/%s" % E, token=None, headers={"X-API-Key": KEY})
    h.ok(r.status in (200, 204), "... killed through n2", r.describe())

    # ---- the OpenSandbox front --------------------------------------------------------------------
    OH = {"OPEN-SANDBOX-API-KEY": KEY}
    r = n1.post("/opensandbox/v1/sandboxes", {"image": {"uri": "base"}, "timeout": 120, "resourceLimits": {},
                                               "entrypoint": ["sleep", "infinity"]}, token=None, headers=OH)
    h.ok(r.status in (200, 201, 202), "an OpenSandbox sandbox made through n1", r.describe())
    O = r.get("id") or "none"
    ok = abserver.wait_for(lambda: (n2.get("/opensandbox/v1/sandboxes/%s" % O, token=None, headers=OH).json
                                    or {}).get("status", {}).get("state") == "Running", timeout=20)
    h.ok(ok, "... reads Running through n2")
    s = n3.sse("/opensandbox/execd/%s/command" % O, method="POST", token=None, headers=OH,
               body={"command": "echo osb-fleet"})
    evs = s.collect(until=lambda e: "execution_complete" in (e.data or ""), timeout=15)
    h.ok(s.status == 200 and any("osb-fleet" in (e.data or "") for e in evs),
         "... an execd command through n3 streams its output", s.describe())
    r = n2.delete("/opensandbox/v1/sandboxes/%s" % O, token=None, headers=OH)
    h.ok(r.status in (200, 204), "... deleted through n2", r.describe())

    # ---- MCP ----------------------------------------------------------------------------------------
    ACC = {"Accept": "application/json, text/event-stream"}
    r = n3.post("/mcp", {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "fleet", "version": "1"}}}, headers=ACC, token=KEY)
    sid = r.header("Mcp-Session-Id")
    h.ok(r.status == 200 and sid, "MCP initialize on n3", r.describe())
    hdr = dict(ACC, **{"Mcp-Session-Id": sid or ""})
    r = n3.post("/mcp", {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                         "params": {"name": "bash", "arguments": {"sandbox_id": B, "command": "echo mcp-$(hostname)"}}},
                headers=hdr, token=KEY)
    res = r.get("result") or {}
    text = "".join(c.get("text", "") for c in res.get("content") or [])
    h.ok(r.status == 200 and not res.get("isError") and "mcp-%s" % B in text,
         "an MCP tool call on n3 about n1's box runs on n1", r.describe())
    r = n2.post("/v1/sandboxes", {"app_id": "fwdapp", "user_id": "u", "chat_id": "mcp"}, token=KEY)
    M = r.get("id") or "none"
    r = n1.post("/v1/sandboxes", {"app_id": "fwdapp", "user_id": "u", "chat_id": "mcp-stop"}, token=KEY)
    M1 = r.get("id") or "none"
    r = n3.post("/mcp", {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                         "params": {"name": "sandbox_stop", "arguments": {"sandbox_id": M1}}}, headers=hdr, token=KEY)
    h.ok(r.status == 200 and not (r.get("result") or {}).get("isError"), "MCP sandbox_stop on n3 of n1's box",
         r.describe())
    h.eq((n1.box(M1, token=KEY) or {}).get("status"), "stopped", "... stopped it on n1")
    r = n3.post("/mcp", {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                         "params": {"name": "sandbox_delete", "arguments": {"sandbox_id": M}}}, headers=hdr, token=KEY)
    h.ok(r.status == 200 and not (r.get("result") or {}).get("isError"), "MCP sandbox_delete on n3 of n2's box",
         r.describe())
    h.ok(abserver.wait_for(lambda: n2.get("/v1/sandboxes/%s" % M, token=KEY).status == 404, timeout=20),
         "... deleted it on n2")
    r = n3.delete("/v1/sandboxes?app_id=fwdapp&user_id=u&chat_id=mcp-stop", token=KEY)
    h.eq((r.status, r.get("deleting")), (202, [M1]), "DELETE by keys on n3 deletes n1's box", r.describe())

    # ---- lifecycle and delete ---------------------------------------------------------------------
    r = n2.post("/v1/sandboxes/%s/stop" % B, {}, token=KEY)
    h.eq((r.status, r.get("status")), (200, "stopped"), "stop through n2", r.describe())
    r = n3.post("/v1/sandboxes/%s/start" % B, {}, token=KEY)
    h.eq((r.status, r.get("status")), (200, "running"), "start through n3", r.describe())
    r = n3.exec(B, "cat /workspace/blob.bin | wc -c", token=KEY)
    h.eq(r.get("stdout"), "%d\n" % (1 << 20), "its files are kept", r.describe())
    r = n3.delete("/v1/sandboxes/%s" % B, token=KEY)
    h.eq(r.status, 202, "delete through n3", r.describe())
    h.ok(abserver.wait_for(lambda: n2.get("/v1/sandboxes/%s" % B, token=KEY).status == 404, timeout=20),
         "... and it is gone for every node")
finally:
    F.close()
h.done()
