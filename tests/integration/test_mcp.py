#!/usr/bin/env python3
"""The agent tools over REST and the MCP server, against the real binary.

REST: GET /v1/tools (schemas), GET /v1/tools/prompt, POST
/v1/sandboxes/{id}/tools/{name} with {"args": ...} or the args inline (the box
env reaches bash), POST /v1/tools/{name} acquiring by keys; 404 for an unknown
tool or box, 400 naming a bad argument, 401 without the token.

MCP over HTTP (POST /mcp), checked here directly: protocol version
negotiation, Mcp-Session-Id issued at initialize and required after it (400
without, 404 unknown, bound to the identity that made it, ended by DELETE),
202 for notifications, ping, tools/list (the lifecycle tools plus every agent
tool), -32601, -32700, -32600, an unknown tool in tools/call, a bad
MCP-Protocol-Version, GET 405, 401 without the token.

MCP on stdio (`agentbox mcp`): answers in order, only JSON-RPC on stdout, exit
0 at the end of stdin.

Then the official TypeScript SDK (tests/mcp/client.mjs) as the client, over
stdio and over Streamable HTTP; its TAP lines are relayed. Without node, or
when scripts/npm-deps.sh cannot install the SDK, those are skipped."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import abtest  # noqa: E402
import taprelay  # noqa: E402

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
MCP_DIR = os.path.join(ROOT, "tests", "mcp")

h = abserver.ServerHarness(budget=170)
TOKEN = "mcp-admin-token-%s-0123456789" % os.getpid()
APP_KEY = "mcp-app-key-0123456789abcdef"
srv = h.start_server(token=TOKEN, config={"api_keys": [{"key": APP_KEY, "app_id": "app2"}]})


def check_error(r, status, code, what, mention=None):
    h.eq(r.status, status, "%s: answers %d" % (what, status), r.describe())
    h.eq(r.err_code, code, "%s: error code %s" % (what, code), r.describe())
    if mention:
        h.contains(r.err_message, mention, "%s: the message names %s" % (what, mention), r.describe())


# ---- REST: tools ------------------------------------------------------------------

r = srv.get("/v1/tools")
tools = r.get("tools")
h.ok(r.status == 200 and isinstance(tools, list) and tools, "GET /v1/tools lists the tools", r.describe())
tool_names = []
for t in tools or []:
    f = t.get("function") if isinstance(t, dict) else None
    if t.get("type") != "function" or not isinstance(f, dict) or not isinstance(f.get("name"), str) \
            or not isinstance(f.get("parameters"), dict):
        h.ok(False, "GET /v1/tools: every entry is an OpenAI function schema", json.dumps(t)[:800])
        break
    tool_names.append(f["name"])
for want in ("bash", "ls", "glob", "grep", "read_file", "write_file", "str_replace"):
    h.ok(want in tool_names, "GET /v1/tools has %s" % want, tool_names)
r = srv.get("/v1/tools/prompt")
h.ok(r.status == 200 and isinstance(r.get("prompt"), str) and r.get("prompt").strip(),
     "GET /v1/tools/prompt gives {\"prompt\": text}", r.describe())
check_error(srv.get("/v1/tools", token=None), 401, "unauthorized", "GET /v1/tools without the token")

r = srv.post("/v1/sandboxes", {"app_id": "app1", "user_id": "u1", "chat_id": "tools", "env": {"MCP_FOO": "bar42"}})
h.eq(r.status, 201, "create a box for the tool routes", r.describe())
box = r.get("id")

r = srv.post("/v1/sandboxes/%s/tools/bash" % box, {"args": {"command": "echo hi-$MCP_FOO"}})
h.ok(r.status == 200 and r.get("is_error") is False and "hi-bar42" in (r.get("output") or ""),
     "POST /v1/sandboxes/{id}/tools/bash {args}: output, is_error false, the box env", r.describe())
r = srv.post("/v1/sandboxes/%s/tools/bash" % box, {"command": "echo inline"})
h.ok(r.status == 200 and "inline" in (r.get("output") or ""), "the args may be the body itself", r.describe())
r = srv.post("/v1/sandboxes/%s/tools/write_file" % box, {"args": {"path": "/workspace/t/a.txt", "content": "abc\n"}})
h.ok(r.status == 200 and r.get("is_error") is False, "write_file", r.describe())
r = srv.post("/v1/sandboxes/%s/tools/read_file" % box, {"args": {"path": "/workspace/t/a.txt"}})
h.ok(r.status == 200 and "abc" in (r.get("output") or ""), "read_file gives the content back", r.describe())
r = srv.post("/v1/sandboxes/%s/tools/read_file" % box, {"args": {"path": "/workspace/t/missing.txt"}})
h.ok(r.status == 200 and r.get("is_error") is True, "read_file of a missing file is an is_error result",
     r.describe())
check_error(srv.post("/v1/sandboxes/%s/tools/no_such_tool" % box, {"args": {}}), 404, "not_found",
            "an unknown tool", "no_such_tool")
check_error(srv.post("/v1/sandboxes/%s/tools/bash" % box, {"args": {}}), 400, "invalid_argument",
            "bash without command", "command")
check_error(srv.post("/v1/sandboxes/%s/tools/bash" % box, {"args": "echo"}), 400, "invalid_argument",
            "args not an object", "args")
check_error(srv.post("/v1/sandboxes/nosuchbox0000000/tools/bash", {"args": {"command": "true"}}), 404,
            "not_found", "an unknown box")
check_error(srv.post("/v1/sandboxes/%s/tools/bash" % box, {"args": {"command": "true"}}, token=None), 401,
            "unauthorized", "a tool call without the token")
check_error(srv.post("/v1/sandboxes/%s/tools/bash" % box, {"args": {"command": "true"}}, token=APP_KEY), 404,
            "not_found", "another app's key on the box")

keys = {"app_id": "app1", "user_id": "u1", "chat_id": "by-keys"}
r = srv.post("/v1/tools/write_file", dict(keys, args={"path": "k.txt", "content": "by keys\n"}))
h.ok(r.status == 200 and r.get("sandbox_id") == abserver.chat_box_id(*keys.values()) and
     r.get("is_error") is False, "POST /v1/tools/write_file acquires the box of the keys", r.describe())
r = srv.post("/v1/tools/read_file", dict(keys, path="k.txt"))
h.ok(r.status == 200 and "by keys" in (r.get("output") or ""),
     "POST /v1/tools/read_file with the args inline, same box", r.describe())
never = {"app_id": "app1", "user_id": "u1", "chat_id": "never"}
check_error(srv.post("/v1/tools/no_such_tool", never), 404, "not_found", "POST /v1/tools/ an unknown tool")
h.eq(srv.status_of(abserver.chat_box_id("app1", "u1", "never")), None, "an unknown tool acquires no box")

# ---- MCP over HTTP ------------------------------------------------------------------

ACCEPT = {"Accept": "application/json, text/event-stream"}


def rpc(body, sid=None, token=abserver._DEFAULT, version=None):
    hdrs = dict(ACCEPT)
    if sid:
        hdrs["Mcp-Session-Id"] = sid
    if version:
        hdrs["MCP-Protocol-Version"] = version
    return srv.post("/mcp", body, headers=hdrs, token=token)


def init_body(version, id=1):
    return {"jsonrpc": "2.0", "id": id, "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {},
                       "clientInfo": {"name": "test_mcp.py", "version": "1"}}}


def rpc_error_code(r):
    e = r.get("error")
    return e.get("code") if isinstance(e, dict) else None


r = rpc(init_body("2025-06-18"), token=None)
h.eq(r.status, 401, "POST /mcp without the token: 401", r.describe())
for want, got in (("2025-06-18", "2025-06-18"), ("2025-03-26", "2025-03-26"), ("2024-11-05", "2024-11-05"),
                  ("2031-01-01", "2025-06-18")):
    r = rpc(init_body(want, 7))
    res = r.get("result") or {}
    h.ok(r.status == 200 and r.get("id") == 7 and res.get("protocolVersion") == got,
         "initialize asking %s gets %s" % (want, got), r.describe())
h.ok((r.header("Content-Type") or "").startswith("application/json"), "answers are application/json", r.describe())
res = r.get("result") or {}
h.ok(isinstance(res.get("capabilities"), dict) and "tools" in res["capabilities"] and
     res.get("serverInfo", {}).get("name") == "agentbox", "initialize: capabilities.tools, serverInfo agentbox",
     r.describe())
sid = r.header("Mcp-Session-Id")
h.ok(sid and all(0x21 <= ord(c) <= 0x7e for c in sid), "initialize issues an Mcp-Session-Id", r.describe())

r = rpc({"jsonrpc": "2.0", "method": "notifications/initialized"}, sid)
h.ok(r.status == 202 and not r.body, "a notification is answered 202 with no body", r.describe())
r = rpc({"jsonrpc": "2.0", "id": "p", "method": "ping"}, sid, version="2025-06-18")
h.ok(r.status == 200 and r.get("id") == "p" and r.get("result") == {}, "ping -> {}", r.describe())
r = rpc({"jsonrpc": "2.0", "id": 3, "method": "no/such/method"}, sid)
h.ok(rpc_error_code(r) == -32601 and r.get("id") == 3, "an unknown method -> -32601", r.describe())
r = srv.post("/mcp", b'{"jsonrpc": "2.0", "id": 4, "method": ', headers=dict(ACCEPT, **{"Mcp-Session-Id": sid}))
h.ok(rpc_error_code(r) == -32700 and r.get("id", "absent") is None, "bad JSON -> -32700 with id null",
     r.describe())
r = rpc({"id": 5, "method": "ping"}, sid)
h.ok(rpc_error_code(r) == -32600, "no \"jsonrpc\": \"2.0\" -> -32600", r.describe())
r = rpc({"jsonrpc": "2.0", "id": 6, "method": "ping"})
h.eq(r.status, 400, "a request without Mcp-Session-Id after initialize: 400", r.describe())
r = rpc({"jsonrpc": "2.0", "id": 6, "method": "ping"}, "0" * 32)
h.eq(r.status, 404, "an unknown Mcp-Session-Id: 404", r.describe())
r = rpc({"jsonrpc": "2.0", "id": 6, "method": "ping"}, sid, token=APP_KEY)
h.eq(r.status, 404, "a session is bound to who made it (another key: 404)", r.describe())
r = rpc({"jsonrpc": "2.0", "id": 6, "method": "ping"}, sid, version="1999-01-01")
h.eq(r.status, 400, "an unsupported MCP-Protocol-Version header: 400", r.describe())

r = rpc({"jsonrpc": "2.0", "id": 8, "method": "tools/list"}, sid)
mcp_tools = (r.get("result") or {}).get("tools") or []
mcp_names = [t.get("name") for t in mcp_tools if isinstance(t, dict)]
for want in ["sandbox_create", "sandbox_list", "sandbox_stop", "sandbox_delete"] + tool_names:
    h.ok(want in mcp_names, "tools/list has %s" % want, mcp_names)
h.ok(all(isinstance(t.get("inputSchema"), dict) and t["inputSchema"].get("type") == "object" for t in mcp_tools),
     "every tool has an object inputSchema", r.describe())
bash = next((t for t in mcp_tools if t.get("name") == "bash"), {})
props = bash.get("inputSchema", {}).get("properties", {})
h.ok(all(k in props for k in ("sandbox_id", "app_id", "user_id", "chat_id", "thread_id")),
     "agent tools take sandbox_id or keys", json.dumps(bash)[:1500])

r = rpc({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "no_such_tool", "arguments": {}}}, sid)
h.ok(rpc_error_code(r) == -32602 or (r.get("result") or {}).get("isError") is True,
     "tools/call of an unknown tool: -32602 (or an isError result)", r.describe())
r = rpc({"jsonrpc": "2.0", "id": 10, "method": "tools/call",
         "params": {"name": "bash", "arguments": {"sandbox_id": box, "command": "echo via-mcp-$MCP_FOO"}}}, sid)
res = r.get("result") or {}
content = res.get("content") or [{}]
h.ok(res.get("isError") is False and content[0].get("type") == "text" and "via-mcp-bar42" in content[0].get("text", ""),
     "tools/call bash: {content: [{type: text, text}], isError: false}", r.describe())
r = rpc({"jsonrpc": "2.0", "id": 11, "method": "tools/call",
         "params": {"name": "bash", "arguments": {"sandbox_id": box}}}, sid)
res = r.get("result") or {}
h.ok(res.get("isError") is True and "command" in json.dumps(res), "tools/call with a bad argument: isError naming it",
     r.describe())
r = rpc({"jsonrpc": "2.0", "id": 12, "method": "tools/call",
         "params": {"name": "sandbox_stop", "arguments": {"sandbox_id": box}}}, sid)
h.ok((r.get("result") or {}).get("isError") is False and srv.status_of(box) == "stopped",
     "tools/call sandbox_stop stops the box", r.describe())
r = rpc({"jsonrpc": "2.0", "id": 13, "method": "tools/call",
         "params": {"name": "read_file", "arguments": {"sandbox_id": box, "path": "/workspace/t/a.txt"}}}, sid)
h.ok("abc" in json.dumps(r.get("result")), "a tool call resumes a stopped box", r.describe())
r = rpc([{"jsonrpc": "2.0", "id": 14, "method": "ping"}, {"jsonrpc": "2.0", "method": "notifications/x"}], sid)
h.ok(isinstance(r.json, list) and len(r.json) == 1 and r.json[0].get("id") == 14, "a batch gets one answer per request",
     r.describe())

r = srv.get("/mcp", headers={"Accept": "text/event-stream"})
h.eq(r.status, 405, "GET /mcp: 405 (no server-initiated stream)", r.describe())
r = srv.delete("/mcp", headers={"Mcp-Session-Id": sid})
h.ok(r.status in (200, 204), "DELETE /mcp ends the session", r.describe())
r = rpc({"jsonrpc": "2.0", "id": 15, "method": "ping"}, sid)
h.eq(r.status, 404, "the ended session is gone: 404", r.describe())

r = rpc(init_body("2025-06-18"), token=APP_KEY)
app_sid = r.header("Mcp-Session-Id")
r = rpc({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
         "params": {"name": "bash", "arguments": {"sandbox_id": box, "command": "true"}}}, app_sid, token=APP_KEY)
res = r.get("result") or {}
h.ok(res.get("isError") is True and "not_found" in json.dumps(res),
     "an app key's MCP session cannot use another app's box", r.describe())

# ---- MCP on stdio -------------------------------------------------------------------

stdio_data = h.new_data_dir("stdio-raw")
env = {k: v for k, v in os.environ.items() if k not in abtest._SCRUBBED_ENV}
lines = [json.dumps(init_body("2025-03-26", 1)), json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
         "", "{oops", json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
         json.dumps({"jsonrpc": "2.0", "id": 3, "method": "ping"})]
try:
    p = subprocess.run([h.bin, "--data", stdio_data, "mcp", "--config", srv.config_path],
                       input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=60 * h.slow, env=env)
    out, err, rc = p.stdout, p.stderr, p.returncode
except subprocess.TimeoutExpired as e:
    out, err, rc = e.stdout or "", e.stderr or "", "timeout"
answers = []
for line in out.splitlines():
    try:
        answers.append(json.loads(line))
    except ValueError:
        answers.append({"unparsable": line})
diag = "exit %s\nstdout:\n%s\nstderr:\n%s" % (rc, out[-2000:], err[-2000:])
h.eq(rc, 0, "agentbox mcp exits 0 when stdin ends", diag)
h.eq([a.get("id", "-") for a in answers], [1, None, 2, 3],
     "stdio: one answer a request, in order (parse error with id null), nothing for notifications", diag)
if len(answers) == 4:
    h.eq(answers[0].get("result", {}).get("protocolVersion"), "2025-03-26", "stdio: initialize negotiates", diag)
    h.eq(answers[1].get("error", {}).get("code"), -32700, "stdio: bad JSON -> -32700", diag)
    h.ok(len(answers[2].get("result", {}).get("tools", [])) == len(mcp_names), "stdio: the same tools as HTTP", diag)

# ---- the official TypeScript SDK ------------------------------------------------------


node = shutil.which("node")
if not node:
    h.skip("SDK over HTTP and stdio", "node is not installed (scripts/npm-deps.sh installs it)")
else:
    if not os.path.isdir(os.path.join(MCP_DIR, "node_modules", "@modelcontextprotocol", "sdk")):
        subprocess.run([os.path.join(ROOT, "scripts", "npm-deps.sh")], capture_output=True, timeout=300)
    if not os.path.isdir(os.path.join(MCP_DIR, "node_modules", "@modelcontextprotocol", "sdk")):
        h.skip("SDK over HTTP and stdio", "@modelcontextprotocol/sdk is not installed and scripts/npm-deps.sh "
               "could not install it (offline?)")
    else:
        taprelay.relay(h, [node, os.path.join(MCP_DIR, "client.mjs"), "http", srv.url, TOKEN], env, MCP_DIR,
                       label="SDK http", timeout=150)
        taprelay.relay(h, [node, os.path.join(MCP_DIR, "client.mjs"), "stdio", h.bin, h.new_data_dir("stdio-sdk"),
                           srv.config_path], env, MCP_DIR, label="SDK stdio", timeout=150)

# ---- tool limits from the config file -----------------------------------------------
small = h.start_server(name="small-tools", data=h.new_data_dir("small-tools"), token=TOKEN,
                       config={"tools": {"bash_output_max": 100, "write_file_max": "1K"}})
r = small.post("/v1/tools/bash", {"thread_id": "limits", "command": "head -c 600 /dev/zero | tr '\\0' x"})
out = r.get("output") or ""
h.ok(r.status == 200 and "middle truncated" in out and len(out) < 300,
     "tools.bash_output_max from the config truncates bash output", r.describe()[:600])
r = small.post("/v1/tools/write_file", {"thread_id": "limits", "path": "big.txt", "content": "y" * 2000})
h.ok(r.status == 200 and r.get("is_error") is True, "tools.write_file_max from the config refuses a bigger write",
     r.describe()[:600])
small.stop()

h.done()
