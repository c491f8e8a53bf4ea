#!/usr/bin/env python3
"""DeerFlow's front (docs/compat-deerflow.md) driven as DeerFlow drives it:
its provisioner client (docker/provisioner's routes with X-API-Key: create,
idempotent create, get, list, delete) and its AioSandbox client on the
sandbox_url it was handed, with no credential of its own (GET /v1/sandbox,
the persistent shell: exec in a session, exec_dir, async exec + view + wait,
no_change_timeout, hard_timeout, kill, write; sessions create/list/delete;
/v1/bash/exec with a per-call env and max_output_length; file read with line
ranges, write utf-8/base64/append, list, find, grep, replace, download),
AIO's envelope and error shapes for bad input, a session that outlives a
server restart, and the cleanup."""
import base64
import json
import os
import secrets
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
KEY = "key-a-" + secrets.token_hex(8)
h = abserver.ServerHarness(budget=240)
srv = h.start_server(name="deerflow", token=TOKEN, config={
    "idle_pause": "1h", "idle_stop": "2h", "api_keys": [{"key": KEY, "app_id": "appa"}]})
PK = {"X-API-Key": KEY}


def prov(method, path, body=None, headers=PK):
    return srv.request(method, "/deerflow" + path, body=body, headers=headers, token=None)


# ---- the provisioner ------------------------------------------------------------------
r = prov("GET", "/health", headers=None)
h.ok(r.status == 200 and r.json == {"status": "ok"}, "GET /health without a key", r.describe())
r = prov("POST", "/api/sandboxes", {"sandbox_id": "abc123", "thread_id": "t1", "user_id": "u1"}, headers=None)
h.eq(r.status, 401, "POST /api/sandboxes without X-API-Key is refused", r.describe())

SID = secrets.token_hex(8)  # DeerFlow: sha256(user:thread)[:16]
body = {"sandbox_id": SID, "thread_id": "thread-1", "user_id": "user-1",
        "include_legacy_skills": False, "provision_lark_cli_runtime": False,
        "provision_lark_cli_broker": False}
r = prov("POST", "/api/sandboxes", body)
h.eq(r.status, 200, "POST /api/sandboxes makes a sandbox", r.describe())
info = r.json or {}
URL = info.get("sandbox_url", "")
h.ok(info.get("sandbox_id") == SID and info.get("status") == "Running"
     and URL.startswith("http://") and "/deerflow/aio/" in URL,
     "the answer: sandbox_id, status Running, a sandbox_url of this server", r.describe())
r = prov("POST", "/api/sandboxes", body)
h.ok(r.status == 200 and r.get("sandbox_url") == URL, "a second create is the same sandbox (idempotent)",
     r.describe())
r = prov("GET", "/api/sandboxes/" + SID)
h.ok(r.status == 200 and r.get("sandbox_url") == URL and r.get("status") == "Running",
     "GET /api/sandboxes/{id}", r.describe())
r = prov("GET", "/api/sandboxes/" + "f" * 16)
h.ok(r.status == 404 and "not found" in (r.get("detail") or ""), "an unknown sandbox: 404 {detail}",
     r.describe())
r = prov("GET", "/api/sandboxes")
h.ok(r.status == 200 and r.get("count") == 1 and [s.get("sandbox_id") for s in r.get("sandboxes", [])] == [SID],
     "GET /api/sandboxes lists it", r.describe())
for bad, what in (({"thread_id": "x"}, "no sandbox_id"), ({"sandbox_id": "../x"}, "a sandbox_id with '/'"),
                  ({"sandbox_id": "ok", "thread_id": "a b"}, "a thread_id with a space"),
                  ({"sandbox_id": "ok", "extra_mounts": [{"host_path": "rel", "container_path": "/mnt/x"}]},
                   "a relative host_path"),
                  ({"sandbox_id": "ok", "extra_mounts": [{"host_path": "/x", "container_path": "/mnt/x"}] * 11},
                   "eleven extra mounts")):
    r = prov("POST", "/api/sandboxes", bad)
    h.ok(r.status == 422 and r.get("detail"), "create with %s: 422 {detail}" % what, r.describe())
r = prov("POST", "/api/sandboxes", {"sandbox_id": "hostmnt", "extra_mounts": [
    {"host_path": "/etc", "container_path": "/mnt/skills/custom", "read_only": True}]})
h.ok(r.status == 403 and "host" in (r.get("detail") or "").lower(),
     "an app's extra_mount of a host directory is refused clearly (403)", r.describe())

# extra_mounts: the app's named volume, shared by two sandboxes (one read-only)
DOCKER = os.environ.get("AGENTBOX_TEST_BACKEND") == "docker"
K8S = os.environ.get("AGENTBOX_TEST_BACKEND") == "kubernetes"
if DOCKER:  # a Docker box mounts no named volume (docs/docker.md): 501 there
    h.skip("extra_mounts as named volumes", "the Docker backend mounts no named volumes")
elif K8S:  # neither does a pod (docs/kubernetes.md, "Limits"): 501 naming the backend
    VOL = "dfvol" + secrets.token_hex(3)
    r = srv.request("POST", "/v1/volumes", body={"name": VOL, "size_mib": 64}, headers=PK, token=None)
    h.eq(r.status, 201, "a named volume of the app (the server's host keeps it)", r.describe())
    r = prov("POST", "/api/sandboxes", {"sandbox_id": "volk", "extra_mounts": [
        {"host_path": "volume:" + VOL, "container_path": "/mnt/shared"}]})
    h.ok(r.status == 501 and "kubernetes" in (r.get("detail") or ""),
         "a sandbox with an extra_mount volume: 501 naming the backend", r.describe())
    h.ok(abserver.wait_for(lambda: srv.request("DELETE", "/v1/volumes/" + VOL, headers=PK, token=None).status == 200,
                           timeout=30), "the volume goes: no sandbox was made with it")
else:
    VOL = "dfvol" + secrets.token_hex(3)
    r = srv.request("POST", "/v1/volumes", body={"name": VOL, "size_mib": 64}, headers=PK, token=None)
    h.eq(r.status, 201, "a named volume of the app", r.describe())
    vsb = []
    for n, ro in (("volw", False), ("volr", True)):
        r = prov("POST", "/api/sandboxes", {"sandbox_id": n, "extra_mounts": [
            {"host_path": "volume:" + VOL, "container_path": "/mnt/shared", "read_only": ro}]})
        h.eq(r.status, 200, "a sandbox with extra_mount volume:%s (read_only %s)" % (VOL, ro), r.describe())
        vsb.append(urllib.parse.urlparse(r.get("sandbox_url") or "http://x/none").path)
    r = srv.request("POST", vsb[0] + "/v1/file/write", body={"file": "/mnt/shared/note.txt", "content": "shared"},
                    token=None)
    h.eq(r.status, 200, "one sandbox writes into the volume", r.describe())
    r = srv.request("POST", vsb[1] + "/v1/file/read", body={"file": "/mnt/shared/note.txt"}, token=None)
    h.eq(((r.json or {}).get("data") or {}).get("content"), "shared", "the other reads it", r.describe())
    r = srv.request("POST", vsb[1] + "/v1/file/write", body={"file": "/mnt/shared/x", "content": "no"}, token=None)
    h.ok(r.status in (403, 400) and ((r.json or {}).get("data") or {}).get("error_type") in ("permission_denied",
                                                                                           "invalid_argument"),
         "the read-only mount refuses a write", r.describe())
    r = prov("POST", "/api/sandboxes", {"sandbox_id": "volx", "extra_mounts": [
        {"host_path": "volume:nosuchvol", "container_path": "/mnt/shared"}]})
    h.eq(r.status, 404, "a volume that does not exist: 404", r.describe())
    for n in ("volw", "volr"):
        prov("DELETE", "/api/sandboxes/" + n)
    h.ok(abserver.wait_for(lambda: srv.request("DELETE", "/v1/volumes/" + VOL, headers=PK, token=None).status == 200,
                           timeout=30), "the volume goes once its sandboxes are deleted")

# ---- the AIO routes, as DeerFlow's AioSandbox client calls them ---------------------------
BASE = urllib.parse.urlparse(URL).path


def aio(method, path, body=None, query=None, base=None, headers=None):
    return srv.request(method, (base or BASE) + path, body=body, token=None, headers=headers, query=query)


def data(r):
    j = r.json or {}
    return j.get("data") if isinstance(j, dict) else None


def enveloped(r):
    j = r.json
    return isinstance(j, dict) and "success" in j and "message" in j and "data" in j


r = aio("GET", "/v1/sandbox")
h.ok(r.status == 200 and r.get("success") is True and r.get("home_dir") and r.get("version"),
     "GET /v1/sandbox: the context (home_dir, version) without any key", r.describe())
sysenv = (r.get("detail") or {}).get("system") or {}
h.ok(all(k in sysenv for k in ("os", "os_version", "arch", "user", "home_dir", "timezone", "occupied_ports"))
     and set((r.get("detail") or {}).get("runtime") or {}) == {"python", "nodejs"},
     "GET /v1/sandbox: detail with every field AIO's schema requires", r.describe())

r = aio("POST", "/v1/shell/exec", {"command": "echo hello; export KEEP=kept; cd /tmp",
                                    "no_change_timeout": 600})
d = data(r) or {}
h.ok(r.status == 200 and r.get("success") is True and d.get("status") == "completed"
     and d.get("output", "").strip() == "hello" and d.get("exit_code") == 0 and d.get("session_id"),
     "shell exec without id: completed, output, exit_code 0", r.describe())
r = aio("POST", "/v1/shell/exec", {"command": "echo $KEEP; pwd; false"})
d = data(r) or {}
h.ok(d.get("output", "").split() == ["kept", "/tmp"] and d.get("exit_code") == 1,
     "the shell persists: variables and the directory; exit code 1", r.describe())

S = "sess-" + secrets.token_hex(4)
r = aio("POST", "/v1/shell/sessions/create", {"id": S, "exec_dir": "/workspace"})
h.ok(r.status == 200 and (data(r) or {}).get("session_id") == S
     and (data(r) or {}).get("working_dir") == "/workspace", "sessions/create {id, exec_dir}", r.describe())
r = aio("POST", "/v1/shell/exec", {"id": S, "command": "pwd; echo $KEEP"})
h.eq(((data(r) or {}).get("output") or "").split(), ["/workspace"], "a session of its own: its dir, not the other's variables",
     r.describe())
r = aio("POST", "/v1/shell/exec", {"id": S, "command": "pwd", "exec_dir": "/etc"})
h.eq(((data(r) or {}).get("output") or "").strip(), "/etc", "exec_dir for one command", r.describe())
r = aio("POST", "/v1/shell/exec", {"id": S, "command": "pwd", "exec_dir": "/nonexistent", "strict": True})
h.ok(r.status == 400 and r.get("success") is False, "strict exec_dir that does not exist: 400", r.describe())
r = aio("GET", "/v1/shell/sessions")
info = ((data(r) or {}).get("sessions") or {}).get(S) or {}
h.ok(r.status == 200 and info.get("working_dir") == "/workspace" and info.get("status") == "ready"
     and all(k in info for k in ("created_at", "last_used_at", "age_seconds")),
     "GET /v1/shell/sessions lists it (ShellSessionInfo)", r.describe())

# async + view + wait
r = aio("POST", "/v1/shell/exec", {"id": S, "command": "echo one; sleep 1; echo two", "async_mode": True})
h.ok((data(r) or {}).get("status") == "running", "async exec: running at once", r.describe())
r = aio("POST", "/v1/shell/exec", {"id": S, "command": "echo x"})
h.ok(r.status == 409 and r.get("success") is False, "a second command while one runs: 409", r.describe())
r = aio("POST", "/v1/shell/view", {"id": S})
h.ok(r.status == 200 and (data(r) or {}).get("status") in ("running", "completed"), "view while it runs",
     r.describe())
r = aio("POST", "/v1/shell/wait", {"id": S, "seconds": 20})
h.eq((data(r) or {}).get("status"), "completed", "wait until it ends", r.describe())
r = aio("POST", "/v1/shell/view", {"id": S})
d = data(r) or {}
h.ok(d.get("output", "").split() == ["one", "two"] and d.get("exit_code") == 0 and d.get("status") == "completed",
     "view: the whole output and the exit code", r.describe())

# two execs at once on one session: one runs, the other is 409
import threading  # noqa: E402
got = []
ths = [threading.Thread(target=lambda: got.append(aio("POST", "/v1/shell/exec", {"id": S, "command": "sleep 1"}).status))
       for _ in range(2)]
[t.start() for t in ths]
[t.join() for t in ths]
h.eq(sorted(got), [200, 409], "two execs at once in one session: one runs, one is 409", str(got))

# output beyond what is kept: AIO's cut (30000 characters, head and tail)
r = aio("POST", "/v1/shell/exec", {"id": S, "command": "seq 1 40000"})
out = (data(r) or {}).get("output") or ""
h.ok(out.startswith("1\n2\n3\n") and out.rstrip().endswith("39999\n40000") and "truncated" in out
     and len(out) < 30200, "a long output: head and tail, cut to 30000 characters", out[:80] + " ... " + out[-80:])
r = aio("POST", "/v1/shell/exec", {"id": S, "command": "seq 1 40000", "truncate": False})
h.eq(len(((data(r) or {}).get("output") or "").split()), 40000, "truncate: false gives all of it", r.describe()[:300])
r = aio("POST", "/v1/shell/exec", {"id": S, "command": "seq 1 40000; sleep 1", "async_mode": True})
aio("POST", "/v1/shell/wait", {"id": S, "seconds": 20})
r = aio("POST", "/v1/shell/view", {"id": S})
out = (data(r) or {}).get("output") or ""
h.ok((data(r) or {}).get("status") == "completed" and out.rstrip().endswith("40000") and 1000 < len(out) < 30200,
     "view of a long output: the end of what init kept", out[:80] + " ... " + out[-80:])

# timeouts
t0 = time.time()
r = aio("POST", "/v1/shell/exec", {"id": S, "command": "echo start; sleep 30", "no_change_timeout": 1})
d = data(r) or {}
h.ok(d.get("status") == "no_change_timeout" and "start" in d.get("output", "") and time.time() - t0 < 10,
     "no_change_timeout: returns with the output so far", r.describe())
r = aio("POST", "/v1/shell/kill", {"id": S})
h.eq((data(r) or {}).get("status"), "terminated", "kill: terminated", r.describe())
r = aio("POST", "/v1/shell/view", {"id": S})
h.eq((data(r) or {}).get("status"), "terminated", "view after kill: terminated", r.describe())
t0 = time.time()
r = aio("POST", "/v1/shell/exec", {"id": S, "command": "echo tick; sleep 30; echo never", "hard_timeout": 1})
d = data(r) or {}
h.ok(d.get("status") == "hard_timeout" and "never" not in d.get("output", "") and time.time() - t0 < 10,
     "hard_timeout: the command is stopped", r.describe())
r = aio("POST", "/v1/shell/exec", {"id": S, "command": "echo alive"})
h.eq(((data(r) or {}).get("output") or "").strip(), "alive", "the session goes on after a hard_timeout",
     r.describe())
r = aio("POST", "/v1/shell/exec", {"id": S, "command": "sleep 0.3; echo waited", "timeout": 0.1})
h.eq((data(r) or {}).get("status"), "running", "timeout: running status, the command goes on", r.describe())
r = aio("POST", "/v1/shell/wait", {"id": S, "seconds": 10})
r = aio("POST", "/v1/shell/exec", {"id": S, "command": "read -r line; echo got:$line", "async_mode": True})
r = aio("POST", "/v1/shell/write", {"id": S, "input": "typed", "press_enter": True})
h.eq(r.status, 200, "write: input to the running command", r.describe())
aio("POST", "/v1/shell/wait", {"id": S, "seconds": 10})
r = aio("POST", "/v1/shell/view", {"id": S})
h.ok("got:typed" in ((data(r) or {}).get("output") or ""), "the command read the input", r.describe())
r = aio("POST", "/v1/shell/exec", {"id": S, "command": "exit 3"})
r = aio("POST", "/v1/shell/exec", {"id": S, "command": "echo reborn"})
h.eq(((data(r) or {}).get("output") or "").strip(), "reborn", "an `exit` in a session: the next command gets a new shell",
     r.describe())

# bash/exec with a per-call env
r = aio("POST", "/v1/bash/exec", {"command": "echo $SECRET_X; echo err >&2; exit 4", "env": {"SECRET_X": "s3cr3t"},
                                  "hard_timeout": 60})
d = data(r) or {}
h.ok(d.get("stdout", "").strip() == "s3cr3t" and d.get("stderr", "").strip() == "err" and d.get("exit_code") == 4
     and d.get("status") == "completed" and d.get("session_id") and d.get("command_id"),
     "bash/exec: env, stdout, stderr, exit_code", r.describe())
r = aio("POST", "/v1/shell/exec", {"command": "echo [$SECRET_X]"})
h.eq(((data(r) or {}).get("output") or "").strip(), "[]", "the env of bash/exec does not persist", r.describe())
r = aio("POST", "/v1/bash/exec", {"command": "head -c 5000 /dev/zero | tr '\\0' a", "max_output_length": 100})
out = (data(r) or {}).get("stdout", "")
h.ok(len(out) < 200 and "truncated" in out and out.startswith("a" * 40) and out.endswith("a" * 40),
     "bash/exec: max_output_length cuts the middle", r.describe())
r = aio("POST", "/v1/bash/exec", {"command": "sleep 10", "hard_timeout": 1})
h.eq((data(r) or {}).get("status"), "timed_out", "bash/exec: hard_timeout", r.describe())

# files
r = aio("POST", "/v1/file/write", {"file": "/mnt/user-data/workspace/a/b.txt", "content": "l0\nl1\nneedle l2\nl3\n"})
h.ok(r.status == 200 and (data(r) or {}).get("bytes_written") == 19, "file/write makes parents", r.describe())
r = aio("POST", "/v1/file/write", {"file": "/mnt/user-data/workspace/a/b.txt", "content": "l4\n", "append": True})
r = aio("POST", "/v1/file/read", {"file": "/mnt/user-data/workspace/a/b.txt"})
h.eq((data(r) or {}).get("content"), "l0\nl1\nneedle l2\nl3\nl4\n", "file/read: append worked", r.describe())
r = aio("POST", "/v1/file/read", {"file": "/mnt/user-data/workspace/a/b.txt", "start_line": 1, "end_line": 3})
h.eq((data(r) or {}).get("content"), "l1\nneedle l2\n", "file/read: start_line (0-based) to end_line (exclusive)",
     r.describe())
blob = bytes(range(256))
r = aio("POST", "/v1/file/write", {"file": "/mnt/user-data/outputs/bin.dat",
                                   "content": base64.b64encode(blob).decode(), "encoding": "base64"})
h.eq((data(r) or {}).get("bytes_written"), 256, "file/write base64", r.describe())
r = aio("GET", "/v1/file/download", query={"path": "/mnt/user-data/outputs/bin.dat"})
h.ok(r.status == 200 and r.body == blob and "attachment" in (r.header("Content-Disposition") or ""),
     "file/download: the bytes", r.describe())
r = aio("POST", "/v1/file/write", {"file": "/mnt/user-data/workspace/a/.hidden.py", "content": "needle = 1\n"})
r = aio("POST", "/v1/file/list", {"path": "/mnt/user-data/workspace", "recursive": True, "show_hidden": False})
d = data(r) or {}
paths = sorted(f.get("path") for f in d.get("files", []))
h.eq(paths, ["/mnt/user-data/workspace/a", "/mnt/user-data/workspace/a/b.txt"],
     "file/list recursive without hidden files", r.describe())
f = [x for x in d.get("files", []) if x.get("name") == "b.txt"]
h.ok(f and f[0].get("is_directory") is False and f[0].get("size") == 22 and f[0].get("modified_time"),
     "file/list: FileInfo fields", r.describe())
r = aio("POST", "/v1/file/find", {"path": "/mnt/user-data/workspace", "glob": "*.py"})
h.eq((data(r) or {}).get("files"), ["/mnt/user-data/workspace/a/.hidden.py"], "file/find by glob", r.describe())
r = aio("POST", "/v1/file/grep", {"path": "/mnt/user-data/workspace", "pattern": "NEEDLE", "case_insensitive": True,
                                  "fixed_strings": True, "max_results": 400, "max_file_size": "1M", "recursive": True})
d = data(r) or {}
got = sorted((m.get("file"), m.get("line_number"), m.get("line_content")) for m in d.get("matches", []))
h.eq(got, [("/mnt/user-data/workspace/a/.hidden.py", 1, "needle = 1"),
           ("/mnt/user-data/workspace/a/b.txt", 3, "needle l2")], "file/grep: matches", r.describe())
h.ok(d.get("truncated") is False and d.get("match_count") == 2, "file/grep: counts", r.describe())
r = aio("POST", "/v1/file/grep", {"path": "/mnt/user-data/workspace", "pattern": "l", "max_results": 2})
h.ok(len((data(r) or {}).get("matches", [])) == 2 and (data(r) or {}).get("truncated") is True,
     "file/grep: max_results truncates", r.describe())
r = aio("POST", "/v1/file/replace", {"file": "/mnt/user-data/workspace/a/b.txt", "old_str": "l", "new_str": "L"})
h.eq((data(r) or {}).get("replaced_count"), 6, "file/replace: every occurrence", r.describe())

# bad input: AIO's envelope, the right status
for method, path, b, q, want, what in (
        ("POST", "/v1/file/read", {"file": "/nope/none"}, None, 404, "a missing file"),
        ("POST", "/v1/file/read", {"file": "relative.txt"}, None, 422, "a relative path"),
        ("POST", "/v1/file/read", {"file": "/mnt/user-data"}, None, 400, "a directory"),
        ("POST", "/v1/file/read", {}, None, 422, "no file"),
        ("POST", "/v1/file/write", {"file": "/tmp/x", "content": "!!", "encoding": "base64"}, None, 422, "bad base64"),
        ("POST", "/v1/file/write", {"file": "/tmp/x", "content": 5}, None, 422, "content not a string"),
        ("POST", "/v1/file/grep", {"path": "/tmp", "pattern": "("}, None, 400, "a bad regex"),
        ("POST", "/v1/file/list", {"path": "/nope"}, None, 404, "listing a missing directory"),
        ("GET", "/v1/file/download", None, {"path": "/nope"}, 404, "downloading a missing file"),
        ("GET", "/v1/file/download", None, None, 422, "download without path"),
        ("POST", "/v1/shell/exec", {}, None, 422, "exec without command"),
        ("POST", "/v1/shell/exec", {"command": "true", "id": "../x"}, None, 422, "a session id with '/'"),
        ("POST", "/v1/shell/exec", {"command": "true", "timeout": "soon"}, None, 422, "timeout not a number"),
        ("POST", "/v1/shell/view", {"id": "nosuch"}, None, 404, "view of a missing session"),
        ("POST", "/v1/shell/kill", {}, None, 422, "kill without id"),
        ("DELETE", "/v1/shell/sessions/nosuch", None, None, 404, "delete of a missing session"),
        ("POST", "/v1/bash/exec", {"command": "true", "env": {"A B": "x"}}, None, 422, "a bad env name"),
        ("POST", "/v1/nothing", {}, None, 404, "an unknown route"),
        ("GET", "/v1/shell/exec", None, None, 405, "a wrong method")):
    r = aio(method, path, b, query=q)
    ok = r.status == want and enveloped(r) and r.get("success") is False and r.get("message")
    h.ok(ok, "bad input, %s: %d in AIO's envelope" % (what, want), r.describe())
r = aio("POST", "/v1/file/read", {"file": "/nope/none"})
d = data(r) or {}
h.ok(d.get("error_type") == "not_found" and d.get("operation") == "read" and d.get("path") == "/nope/none"
     and "retryable" in d, "a file error's data: FileOperationError", r.describe())
r = srv.request("POST", BASE + "/v1/file/read", body=b"{not json", token=None,
                headers={"Content-Type": "application/json"})
h.ok(r.status == 422 and enveloped(r), "a body that is not JSON: 422", r.describe())

# ---- a session outlives a server restart ------------------------------------------------
r = aio("POST", "/v1/shell/exec", {"id": S, "command": "export SURVIVE=yes; cd /mnt/user-data"})
held = []
t = threading.Thread(target=lambda: held.append(aio("POST", "/v1/shell/exec",
                                                    {"id": S, "command": "sleep 3; echo after-restart"})))
t.start()
time.sleep(1.0)
srv.restart()
t.join()
# the handler gives up within a tick and answers `running`; the server's stop may
# close the connection before that answer is written (the kit's stop, not the front's)
h.ok(held and ((held[0].status == 200 and (data(held[0]) or {}).get("status") == "running")
               or held[0].status == -1),
     "a synchronous exec when the server stops: `running` or a closed connection, not a hang",
     held[0].describe() if held else "no answer")
BASE2 = BASE
r = aio("POST", "/v1/shell/wait", {"id": S, "seconds": 20})
h.eq((data(r) or {}).get("status"), "completed", "after a restart: wait for the command started before", r.describe())
r = aio("POST", "/v1/shell/view", {"id": S})
h.ok("after-restart" in ((data(r) or {}).get("output") or ""), "after a restart: its output", r.describe())
r = aio("POST", "/v1/shell/exec", {"id": S, "command": "echo $SURVIVE; pwd"})
h.eq(((data(r) or {}).get("output") or "").split(), ["yes", "/mnt/user-data"],
     "after a restart: the session's shell kept its state", r.describe())
r = prov("GET", "/api/sandboxes/" + SID)
h.ok(r.status == 200 and r.get("sandbox_url", "").endswith(BASE.split("/aio/")[1]),
     "after a restart: the same sandbox_url", r.describe())

# ---- cleanup -------------------------------------------------------------------------------
r = aio("DELETE", "/v1/shell/sessions/" + S)
h.eq(r.status, 200, "DELETE /v1/shell/sessions/{id}", r.describe())
r = aio("POST", "/v1/shell/view", {"id": S})
h.eq(r.status, 404, "the session is gone", r.describe())
aio("POST", "/v1/shell/sessions/create", {"id": "extra1"})
r = aio("DELETE", "/v1/shell/sessions")
h.ok(r.status == 200 and (data(r) or {}).get("closed") == 2, "DELETE /v1/shell/sessions: every session",
     r.describe())
r = aio("GET", "/v1/shell/sessions")
h.eq((data(r) or {}).get("sessions"), {}, "no sessions left", r.describe())
made = [aio("POST", "/v1/shell/sessions/create", {"id": "many%d" % i}).status for i in range(9)]
h.eq(made, [200] * 8 + [429], "at most 8 shell sessions per sandbox: the 9th is 429", str(made))
aio("DELETE", "/v1/shell/sessions")
r = prov("DELETE", "/api/sandboxes/" + SID)
h.ok(r.status == 200 and r.json == {"ok": True, "sandbox_id": SID}, "DELETE /api/sandboxes/{id}", r.describe())
r = prov("GET", "/api/sandboxes/" + SID)
h.eq(r.status, 404, "the sandbox is gone", r.describe())
r = aio("GET", "/v1/sandbox")
h.ok(r.status in (401, 404) and enveloped(r), "its URL no longer answers", r.describe())
r = prov("DELETE", "/api/sandboxes/" + SID)
h.ok(r.status == 200 and r.get("ok") is True, "deleting it again answers ok, as DeerFlow's provisioner",
     r.describe())

# ---- another prefix (deerflow_prefix), the same server stopped first -----------------------
srv.stop()
HOSTDIR = os.path.join(h.root, "hostdir")
os.makedirs(HOSTDIR)
with open(os.path.join(HOSTDIR, "data.txt"), "w") as f:
    f.write("from the host")
srv2 = h.start_server(name="deerflow2", token=TOKEN, data=srv.data, config={
    "idle_pause": "1h", "idle_stop": "2h", "deerflow_prefix": "sandbox/df", "host_mount_prefixes": [HOSTDIR],
    "api_keys": [{"key": KEY, "app_id": "appa"}]})
r = srv2.request("POST", "/sandbox/df/api/sandboxes", body={"sandbox_id": "other"}, headers=PK, token=None)
u2 = urllib.parse.urlparse(r.get("sandbox_url") or "http://x/none").path
h.ok(r.status == 200 and u2.startswith("/sandbox/df/aio/"), "deerflow_prefix moves the routes", r.describe())
r = srv2.request("GET", u2 + "/v1/sandbox", token=None)
h.eq(r.status, 200, "the AIO routes under the new prefix", r.describe())
r = srv2.request("GET", "/deerflow/health", token=None)
h.ok(r.status in (401, 404), "the old prefix is free", r.describe())
srv2.request("DELETE", "/sandbox/df/api/sandboxes/other", headers=PK, token=None)
mnt = [{"host_path": HOSTDIR, "container_path": "/mnt/host", "read_only": True}]
r = srv2.request("POST", "/sandbox/df/api/sandboxes", body={"sandbox_id": "hostmnt", "extra_mounts": mnt},
                 headers=PK, token=None)
h.ok(r.status == 403 and "admin" in (r.get("detail") or ""), "an app's host directory mount: 403 even under "
     "host_mount_prefixes", r.describe())
r = srv2.request("POST", "/sandbox/df/api/sandboxes", body={"sandbox_id": "hostmnt", "extra_mounts": mnt})
u3 = urllib.parse.urlparse(r.get("sandbox_url") or "http://x/none").path
if K8S:  # a pod runs on a node of the cluster, not on the server's host
    h.ok(r.status == 501 and "kubernetes" in (r.get("detail") or ""),
         "the admin's host directory mount: 501 naming the kubernetes backend", r.describe())
else:
    h.eq(r.status, 200, "the admin's host directory mount under host_mount_prefixes", r.describe())
    r = srv2.request("POST", u3 + "/v1/file/read", body={"file": "/mnt/host/data.txt"}, token=None)
    h.eq(((r.json or {}).get("data") or {}).get("content"), "from the host", "the box reads the host directory",
         r.describe())
r = srv2.request("POST", "/sandbox/df/api/sandboxes", body={"sandbox_id": "hostmnt2", "extra_mounts": [
    {"host_path": "/etc", "container_path": "/mnt/etc", "read_only": True}]})
h.eq(r.status, 403, "the admin's host mount outside host_mount_prefixes: 403", r.describe())
srv2.request("DELETE", "/sandbox/df/api/sandboxes/hostmnt")
h.done()
