#!/usr/bin/env python3
"""Every route of docs/api.md against the real `agentbox serve`, over HTTP:
create/acquire by each key kind (sha256-derived ids, 201 vs 200), list with
each filter, get with stats, stop/start keeping files, exec as JSON (output,
exit codes, timeout, truncation, env, cwd, stdin, invalid UTF-8) and as SSE
(chunks before the end, then exit), /v1/exec in session and task mode, files
(GET/PUT/DELETE, listings, depth, zip with links kept as links), delete by
id/chat/app/thread, events (types, box_id, after= and Last-Event-ID),
/health, /metrics, and the error contract (400 naming the problem, 404, 405
with Allow, 413, 501, 503), where bad input changes nothing."""
import hashlib
import http.client
import io
import json
import os
import re
import stat
import sys
import time
import zipfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
from abserver import chat_box_id, thread_box_id, wait_for  # noqa: E402

h = abserver.ServerHarness(budget=110)
MAX_BODY = 256 * 1024
MAX_UPLOAD = 1024 * 1024
srv = h.start_server(config={
    "limits": {"disk": "64M", "memory": "256M", "timeout": "30s"},
    "max_body": MAX_BODY,
    "max_upload": MAX_UPLOAD,
    "sample_interval": "1s",
})
VERSION = os.environ.get("AGENTBOX_PROJECT_VERSION")
ID_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
MiB = 1024 * 1024
BOX_KEYS = ("id", "status", "mode", "provider", "backend_id", "app_id", "user_id", "chat_id", "thread_id",
            "created_at", "last_active_at", "idle_stop_s", "ttl_s", "limits", "network", "env", "metadata",
            "error")
STATS_KEYS = ("memory_bytes", "memory_limit", "pids", "cpu_usage_ns", "disk_used_bytes", "disk_limit_bytes",
              "oom_kills")


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def check_error(r, status, code, what, mention=None):
    """The error contract: status, {"error": {"code", "message"}}, message naming `mention`."""
    h.eq(r.status, status, "%s: answers %d" % (what, status), r.describe())
    h.ok(r.err_code == code and r.err_message,
         "%s: body is {\"error\": {\"code\": \"%s\", \"message\": ...}}" % (what, code), r.describe())
    if mention:
        h.contains(r.err_message.lower(), mention.lower(), "%s: the message names %s" % (what, mention),
                   r.describe())


def sh(box, cmd, **kw):
    """Exec via the API; returns the response (200 expected)."""
    return srv.exec(box, cmd, **kw)


def filt_ids(q):
    v = srv.list(q)
    return sorted(b.get("id") for b in v) if v is not None else "(not a list)"


def procs_left(box, pattern, timeout=5):
    """Command lines matching pattern still in the box after waiting up to timeout."""
    wait_for(lambda: not box_procs(box, pattern), timeout, 0.2)
    return box_procs(box, pattern)


def box_procs(box, pattern):
    """Command lines inside the box matching a regex (read from the box's /proc)."""
    r = sh(box, "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done")
    return [l for l in r.get("stdout", "").splitlines() if re.search(pattern, l)]


cli_before = h.cli_boxes()

# ---- events subscriber from the start -------------------------------------------

ev_all = srv.sse("/v1/events")
h.eq(ev_all.status, 200, "GET /v1/events answers 200", ev_all.describe())
h.ok(ev_all.content_type.startswith("text/event-stream"), "GET /v1/events is text/event-stream",
     ev_all.describe())

# ---- /health ----------------------------------------------------------------------

r = srv.get("/health", token=None)
hj = r.json if isinstance(r.json, dict) else {}
h.eq(r.status, 200, "GET /health answers 200", r.describe())
h.ok(r.header("Content-Type", "").startswith("application/json"), "/health is application/json", r.describe())
h.eq(hj.get("status"), "ok", "/health status is ok", r.text)
if VERSION:
    h.eq(hj.get("version"), VERSION, "/health version is the project version", r.text)
h.ok(isinstance(hj.get("uptime_s"), (int, float)) and 0 <= hj.get("uptime_s") < 60, "/health uptime_s is small",
     r.text)
h.eq(hj.get("store"), "sqlite", "/health store is sqlite (the default)", r.text)
h.ok(isinstance(hj.get("boxes"), dict), "/health boxes is an object", r.text)
h.eq(hj.get("pool"), {"size": 0, "target": 0}, "/health pool is {size 0, target 0} without a pool", r.text)

# ---- create / acquire ---------------------------------------------------------------

created = []  # ids in creation order


def check_box(b, what):
    b = b if isinstance(b, dict) else {}
    missing = [k for k in BOX_KEYS if k not in b]
    h.eq(missing, [], "%s: the box has every documented field" % what, json.dumps(b))
    h.ok(is_int(b.get("created_at")) and abs(b.get("created_at", 0) - abserver.now_ms()) < 120000,
         "%s: created_at is unix milliseconds (now)" % what, json.dumps(b))
    h.ok(is_int(b.get("last_active_at")) and b.get("last_active_at", 0) >= b.get("created_at", 0),
         "%s: last_active_at is ms and not before created_at" % what, json.dumps(b))


t0 = time.monotonic()
r = srv.post("/v1/sandboxes", {"app_id": "app1", "user_id": "u1", "chat_id": "c1"})
A = chat_box_id("app1", "u1", "c1")
h.diag("create took %.3fs" % (time.monotonic() - t0))
h.eq(r.status, 201, "create by app/user/chat answers 201", r.describe())
h.ok(r.header("Content-Type", "").startswith("application/json"), "create answers application/json",
     r.describe())
a = r.json if isinstance(r.json, dict) else {}
h.eq(a.get("id"), A, "id is the keys' id (docs/api.md, Box ids)", r.text)
created.append(A)
check_box(a, "create by chat")
h.eq((a.get("status"), a.get("mode"), a.get("provider"), a.get("backend_id")), ("running", "session", h.backend, A),
     "new box: running, session, %s, backend_id = id" % h.backend, r.text)
h.eq((a.get("app_id"), a.get("user_id"), a.get("chat_id"), a.get("thread_id")), ("app1", "u1", "c1", None),
     "new box carries its keys (thread_id null)", r.text)
h.eq(a.get("limits"), {"cpus": 1, "memory_mib": 256, "pids": 512, "disk_mib": 64, "timeout_s": 30},
     "new box has the server's default limits from the config", r.text)
h.eq((a.get("network"), a.get("env"), a.get("metadata"), a.get("error")), ({"mode": "none", "allow": [], "deny": []}, {}, {}, None),
     "new box: network none, empty env and metadata, no error", r.text)
h.ok(is_int(a.get("idle_stop_s")) and is_int(a.get("ttl_s")), "idle_stop_s and ttl_s are integers", r.text)
cb = (h.cli_boxes() or {}).get(A) or {}
h.eq(cb.get("status"), "running", "agentbox ls --json shows the new box running", json.dumps(cb))
# (a Docker engine on overlay2 over ext4 cannot limit a container's disk: it says 0, no limit;
# a pod's disk is its claim's size and its ephemeral-storage limit)
h.eq(((cb.get("limits") or {}).get("disk_mib"), (cb.get("limits") or {}).get("memory_mib")), (0 if h.backend == "docker" else 64, 256),
     "the backend box really has disk 64M and memory 256M (agentbox ls --json)", json.dumps(cb))

r2 = srv.post("/v1/sandboxes", {"app_id": "app1", "user_id": "u1", "chat_id": "c1",
                                "limits": {"memory_mib": 512}, "metadata": {"x": 1}})
h.eq(r2.status, 200, "acquire with the same keys answers 200", r2.describe())
h.eq((r2.get("id"), r2.get("created_at"), r2.get("status")), (A, a.get("created_at"), "running"),
     "... the same box (same id and created_at), running", r2.text)
h.eq(((r2.get("limits") or {}).get("memory_mib"), r2.get("metadata")), (256, {}),
     "... and the other fields of the request are ignored", r2.text)
h.eq(sorted(set(h.cli_boxes() or {}) - set(cli_before or {})), [A], "the backend has exactly one new box")

A2 = chat_box_id("app1", "u1", "c2")
A3 = chat_box_id("app1", "u3", "c1")
B = chat_box_id("app2", "u2", "c1")
for keys, bid in ((("app1", "u1", "c2"), A2), (("app1", "u3", "c1"), A3), (("app2", "u2", "c1"), B)):
    r = srv.post("/v1/sandboxes", dict(zip(("app_id", "user_id", "chat_id"), keys)))
    h.eq((r.status, r.get("id")), (201, bid), "create %s/%s/%s: 201 with its sha256 id" % keys, r.describe())
    created.append(bid)

r = srv.post("/v1/sandboxes", {"thread_id": "thread-xyz"})
T = thread_box_id("thread-xyz")
h.eq(r.status, 201, "create by thread_id answers 201", r.describe())
h.eq(r.get("id"), T, "id is the thread's id (docs/api.md, Box ids)", r.text)
h.eq((r.get("thread_id"), r.get("app_id"), r.get("status")), ("thread-xyz", None, "running"),
     "thread box carries thread_id, no app_id, running", r.text)
created.append(T)
r = srv.post("/v1/sandboxes", {"thread_id": "thread-xyz"})
h.eq((r.status, r.get("id")), (200, T), "acquire by the same thread_id answers 200, same box", r.describe())

E = "my-box_1"
r = srv.post("/v1/sandboxes", {"id": E})
h.eq((r.status, r.get("id"), r.get("backend_id")), (201, E, E), "create with an explicit id answers 201",
     r.describe())
created.append(E)
r = srv.post("/v1/sandboxes", {"id": E})
h.eq((r.status, r.get("id")), (200, E), "acquire of the explicit id again answers 200", r.describe())
L63 = "l" + "0123456789" * 6 + "ab"
r = srv.post("/v1/sandboxes", {"id": L63})
h.eq((r.status, r.get("id")), (201, L63), "an explicit id of 63 characters is accepted", r.describe())
created.append(L63)

rids = []
for i in range(2):
    r = srv.post("/v1/sandboxes", {})
    rid = r.get("id") or ""
    h.eq(r.status, 201, "create with no keys #%d answers 201" % (i + 1), r.describe())
    h.ok(ID_RE.match(rid) and not rid.startswith("pool-"), "... with a valid random id (%r)" % rid, r.text)
    rids.append(rid)
    created.append(rid)
h.ne(rids[0], rids[1], "two creates without keys make two different boxes")

# A request as curl -d sends it (form content type): a server without a token refuses
# it on a JSON route (a web page could post it to another site without asking first);
# with Content-Type: application/json, or none, the same body works.
r = srv.post("/v1/sandboxes", b'{"id":"curl-style"}', headers={"Content-Type": "application/x-www-form-urlencoded"})
h.eq((r.status, r.err_code), (415, "unsupported_media_type"),
     "a body sent as curl -d sends it (form content type): 415 without a token", r.describe())
h.contains(r.err_message or "", "application/json", "... saying what to send", r.describe())
r = srv.post("/v1/sandboxes", b'{"id":"curl-style"}', headers={"Content-Type": "application/json"})
h.eq((r.status, r.get("id")), (201, "curl-style"), "... as application/json it works", r.describe())
created.append("curl-style")

O = "opts-1"
meta = {"k": [1, 2, {"x": "y"}], "n": None, "u": "\u00e9\u4e2d"}
r = srv.post("/v1/sandboxes", {"id": O, "limits": {"memory_mib": 128, "disk_mib": 32, "pids": 64, "timeout_s": 2},
                               "env": {"FOO": "bar", "SP": "a b"}, "metadata": meta, "idle_stop_s": -1,
                               "ttl_s": 0})
h.eq(r.status, 201, "create with limits, env, metadata, idle_stop_s answers 201", r.describe())
created.append(O)
ol = r.get("limits") or {}
h.eq((ol.get("memory_mib"), ol.get("disk_mib"), ol.get("pids"), ol.get("timeout_s"), ol.get("cpus")),
     (128, 32, 64, 2, 1), "limits as given; missing ones (cpus) take the server default", r.text)
h.eq(r.get("env"), {"FOO": "bar", "SP": "a b"}, "env is stored and returned", r.text)
h.eq(r.get("metadata"), meta, "metadata round-trips exactly (nested, null, unicode)", r.text)
h.eq(r.get("idle_stop_s"), -1, "idle_stop_s -1 (never) is stored", r.text)
cb = (h.cli_boxes() or {}).get(O) or {}
h.eq(((cb.get("limits") or {}).get("memory_mib"), (cb.get("limits") or {}).get("disk_mib"),
      (cb.get("limits") or {}).get("pids")), (128, 0 if h.backend == "docker" else 32, 64),
     "the backend box really has memory 128M, disk 32M, pids 64 (agentbox ls --json)", json.dumps(cb))

# ---- bad creates: 4xx, and nothing changes ------------------------------------------

ids_before = [b.get("id") for b in (srv.list() or [])]
cli_ids_before = sorted(h.cli_boxes() or {})
bad = [
    ("malformed JSON", b'{"app_id": "app1", "user_id": ', 400, "invalid_argument", "json"),
    ("trailing garbage after the JSON", b'{"id": "bad-0"} xyz', 400, "invalid_argument", None),
    ("a JSON array instead of an object", b'[1, 2]', 400, "invalid_argument", None),
    ("id with capitals and !", {"id": "Bad_ID!"}, 400, "invalid_argument", "id"),
    ("id of 64 characters", {"id": "x" * 64}, 400, "invalid_argument", "id"),
    ("id starting with pool-", {"id": "pool-mine"}, 400, "invalid_argument", "id"),
    ("id that is a number", {"id": 123}, 400, "invalid_argument", "id"),
    ("app_id and user_id without chat_id", {"app_id": "app9", "user_id": "u9"}, 400, "invalid_argument", "chat_id"),
    ("two kinds of keys (id and thread_id)", {"id": "bad-2", "thread_id": "t9"}, 400, "invalid_argument", None),
    ("limits.memory_mib a string", {"id": "bad-3", "limits": {"memory_mib": "lots"}}, 400, "invalid_argument",
     "memory_mib"),
    ("limits.memory_mib negative", {"id": "bad-4", "limits": {"memory_mib": -5}}, 400, "invalid_argument", "memory_mib"),
    ("limits not an object", {"id": "bad-5", "limits": "big"}, 400, "invalid_argument", "limits"),
    ("mode unknown", {"id": "bad-6", "mode": "forever"}, 400, "invalid_argument", "mode"),
    ("metadata not an object", {"id": "bad-7", "metadata": "text"}, 400, "invalid_argument", "metadata"),
    ("env value not a string", {"id": "bad-8", "env": {"A": 1}}, 400, "invalid_argument", "env"),
    ("idle_stop_s a string", {"id": "bad-9", "idle_stop_s": "soon"}, 400, "invalid_argument", "idle_stop_s"),
    ("ttl_s negative", {"id": "bad-10", "ttl_s": -3}, 400, "invalid_argument", "ttl_s"),
    ("network mode full (network_full: false)", {"id": "bad-11", "network": {"mode": "full"}}, 501, "unsupported",
     "full"),
    ("network mode unknown", {"id": "bad-11", "network": {"mode": "sideways"}}, 400, "invalid_argument",
     "network.mode"),
    ("network rule not a host", {"id": "bad-11", "network": {"allow": ["a b"]}}, 400, "invalid_argument",
     "network.allow"),
    ("mounts (no host_mount_prefixes in the config)",
     {"id": "bad-12", "mounts": [{"host_path": "/etc", "path": "/mnt/etc", "read_only": True}]}, 403,
     "permission_denied", "host_mount_prefixes"),
    ("body over max_body", {"id": "bad-13", "metadata": {"pad": "x" * (MAX_BODY + 4096)}}, 413, "limit_exceeded", None),
]
for what, body, status, code, mention in bad:
    r = srv.post("/v1/sandboxes", body)
    check_error(r, status, code, "create with " + what, mention)
h.eq([b.get("id") for b in (srv.list() or [])], ids_before, "after the refused creates the box list is unchanged")
h.eq(sorted(h.cli_boxes() or {}), cli_ids_before, "... and the backend has no new box (agentbox ls --json)")
h.eq(filt_ids({"app_id": "app9"}), [], "... no box of the half-keyed app9 was made")
for i in (2, 3, 11, 12, 13):
    h.eq(srv.get("/v1/sandboxes/bad-%d" % i).status, 404, "... GET bad-%d (refused) is 404" % i)

# ---- task box made by POST (destroyed after its first exec) ----------------------

K = "task-box-1"
r = srv.post("/v1/sandboxes", {"id": K, "mode": "task"})
h.eq((r.status, r.get("mode")), (201, "task"), "create with mode task answers 201, mode task", r.describe())
created.append(K)

# ---- list and filters -----------------------------------------------------------------

lst = srv.list()
h.ok(lst is not None, "GET /v1/sandboxes answers {\"sandboxes\": [...]}")
lst = lst or []
ids = [b.get("id") for b in lst]
h.eq([i for i in ids if i in created], created, "the list has every box, in creation order", json.dumps(ids))
cats = [b.get("created_at", 0) for b in lst]
h.eq(cats, sorted(cats), "the list is ordered by created_at")
for b in lst:
    if b.get("id") == A:
        check_box(b, "a listed box")


filt = filt_ids
h.eq(filt({"app_id": "app1"}), sorted([A, A2, A3]), "filter app_id=app1")
h.eq(filt({"app_id": "app1", "user_id": "u1"}), sorted([A, A2]), "filter app_id=app1&user_id=u1")
h.eq(filt({"user_id": "u3"}), [A3], "filter user_id=u3")
h.eq(filt({"chat_id": "c1"}), sorted([A, A3, B]), "filter chat_id=c1")
h.eq(filt({"app_id": "app1", "chat_id": "c1"}), sorted([A, A3]), "filter app_id=app1&chat_id=c1")
h.eq(filt({"thread_id": "thread-xyz"}), [T], "filter thread_id")
h.eq(filt({"mode": "task"}), [K], "filter mode=task")
h.ok(A in filt({"mode": "session"}) and K not in filt({"mode": "session"}), "filter mode=session")
h.eq(filt({"app_id": "nobody"}), [], "a filter that matches nothing gives an empty list")
r = srv.post("/v1/sandboxes/%s/stop" % A2)
h.eq(filt({"status": "stopped"}), [A2], "filter status=stopped")
h.ok(A2 not in filt({"status": "running"}) and A in filt({"status": "running"}), "filter status=running")
check_error(srv.get("/v1/sandboxes?status=sleeping"), 400, "invalid_argument", "filter status=sleeping (bad value)",
            "status")
check_error(srv.get("/v1/sandboxes?mode=bogus"), 400, "invalid_argument", "filter mode=bogus (bad value)", "mode")

# ---- get ------------------------------------------------------------------------------------

r = srv.get("/v1/sandboxes/" + A)
h.eq((r.status, r.get("id"), r.get("status")), (200, A, "running"), "GET a running box", r.describe())
st = r.get("stats") or {}
h.eq(sorted(k for k in STATS_KEYS if is_int(st.get(k))), sorted(STATS_KEYS),
     "a running box has stats with every documented counter as an integer", r.text)
h.eq(st.get("memory_limit"), 256 * MiB, "stats.memory_limit is the box's 256 MiB", r.text)
if h.native:
    h.ok(40 * MiB <= (st.get("disk_limit_bytes") or 0) <= 64 * MiB, "stats.disk_limit_bytes matches disk 64M", r.text)
if h.backend != "kubernetes":  # a pod's usage is the cluster's: zeros here
    h.ok((st.get("pids") or 0) >= 1, "stats.pids counts the init", r.text)
r = srv.get("/v1/sandboxes/" + A2)
h.eq((r.status, r.get("status")), (200, "stopped"), "GET a stopped box", r.describe())
h.ok(not r.get("stats"), "a stopped box has no stats", r.text)
check_error(srv.get("/v1/sandboxes/nosuchbox42"), 404, "not_found", "GET an unknown box", "nosuchbox42")

# ---- exec (JSON) ---------------------------------------------------------------------------

m0 = srv.metrics() or []
r = sh(A, "echo out; echo err >&2; exit 3")
h.eq(r.status, 200, "exec answers 200", r.describe())
h.eq((r.get("stdout"), r.get("stderr"), r.get("exit_code"), r.get("timed_out"), r.get("truncated")),
     ("out\n", "err\n", 3, False, False), "exec: stdout, stderr apart, exit code 3, not timed out", r.text)
h.ok(is_int(r.get("duration_ms")) and 0 <= r.get("duration_ms") < 10000, "exec: duration_ms is set", r.text)
r = sh(A, "true")
h.eq((r.get("exit_code"), r.get("stdout"), r.get("stderr")), (0, "", ""), "exec true: exit 0, no output", r.text)
r = sh(A, "shopt -q login_shell && echo login; echo $0")
h.eq(r.get("stdout"), "login\nbash\n", "the command runs as bash -lc (a login bash)", r.text)
r = sh(A, "pwd; echo $HOME")
h.eq(r.get("stdout"), "/workspace\n/workspace\n", "default cwd and HOME are /workspace", r.text)
r = sh(A, "pwd", cwd="/tmp")
h.eq(r.get("stdout"), "/tmp\n", "cwd is honoured", r.text)
r = sh(A, "mkdir -p /workspace/src && cd /workspace/src && pwd")
r = sh(A, "pwd", cwd="/workspace/src")
h.eq(r.get("stdout"), "/workspace/src\n", "cwd /workspace/src is honoured", r.text)
r = sh(A, 'echo "$K|$EMPTY|${UNSET-unset}"', env={"K": "V v", "EMPTY": ""})
h.eq(r.get("stdout"), "V v||unset\n", "env reaches the command", r.text)
r = sh(O, 'echo "$FOO|$SP|$K"', env={"K": "x"})
h.eq(r.get("stdout"), "bar|a b|x\n", "the box's env is added to every exec (with the call's env)", r.text)
r = sh(A, "cat; echo; echo done", stdin="line1\nline2 \u00e9")
h.eq(r.get("stdout"), "line1\nline2 \u00e9\ndone\n", "stdin reaches the command", r.text)
t0 = time.monotonic()
r = sh(A, "cat; echo eof-seen", http_timeout=20)
h.eq((r.get("exit_code"), r.get("stdout")), (0, "eof-seen\n"), "without stdin the command reads EOF", r.describe())
r = sh(A, "kill -TERM $$")
h.eq(r.get("exit_code"), 143, "a command killed by SIGTERM exits 128+15", r.text)
r = sh(A, "kill -KILL $$")
h.eq(r.get("exit_code"), 137, "a command killed by SIGKILL exits 128+9", r.text)

t0 = time.monotonic()
r = sh(A, "sleep 301 & sleep 302 & echo started; wait", timeout_s=1)
el = time.monotonic() - t0
h.eq((r.status, r.get("timed_out"), r.get("exit_code")), (200, True, 124),
     "a command past timeout_s: 200 with timed_out true and exit code 124", r.describe())
h.contains(r.get("stdout") or "", "started", "... with the output it made before", r.text)
h.ok(el < 8 * h.slow, "... answered soon after the 1 s timeout (%.1fs)" % el)
h.eq(procs_left(A, r"slee[p] 30[12]"), [],
     "... and its whole process tree (background sleeps too) was killed")
t0 = time.monotonic()
r = sh(O, "sleep 20; echo no")
el = time.monotonic() - t0
h.eq((r.get("timed_out"), r.get("exit_code"), r.get("stdout")), (True, 124, ""),
     "without timeout_s the box's limits.timeout_s (2 s) applies", r.describe())
h.ok(el < 10 * h.slow, "... answered after about 2 s (%.1fs)" % el)

r = sh(A, "head -c 3000000 /dev/zero | tr '\\0' a; echo small >&2", http_timeout=60)
so = r.get("stdout") or ""
h.eq((r.status, r.get("truncated"), r.get("exit_code")), (200, True, 0),
     "3 MB of output: truncated true, exit 0", r.describe())
h.ok(512 * 1024 <= len(so.encode()) <= 2 * MiB, "... the kept stdout is capped (%d bytes)" % len(so.encode()))
h.ok(so.startswith("aaaa"), "... and starts with the real output")
last = so.rstrip("\n").rsplit("\n", 1)[-1]
h.ok(last.strip("a") != "" and "truncat" in last.lower(), "... and ends with a marker line saying so",
     repr(last[-200:]))
h.eq(r.get("stderr"), "small\n", "... the other stream is kept whole")

r = sh(A, "printf 'a\\377b'; printf 'x\\300\\377y' >&2")
h.eq(r.status, 200, "exec with invalid UTF-8 output answers 200", r.describe())
h.eq(r.get("stdout"), "a\ufffdb", "an invalid byte on stdout becomes U+FFFD", r.text)
se = r.get("stderr") or ""
h.ok(se.startswith("x") and se.endswith("y") and "\ufffd" in se and set(se[1:-1]) == {"\ufffd"},
     "invalid bytes on stderr become U+FFFD", repr(se))
try:
    r.body.decode("utf-8", "strict")
    valid = True
except UnicodeDecodeError:
    valid = False
h.ok(valid, "the answer body is valid UTF-8")

la0 = (srv.box(A) or {}).get("last_active_at", 0)
time.sleep(0.05)
sh(A, "true")
la1 = (srv.box(A) or {}).get("last_active_at", 0)
h.ok(la1 > la0, "an exec moves last_active_at forward (%s -> %s)" % (la0, la1))

check_error(srv.post("/v1/sandboxes/%s/exec" % A, {}), 400, "invalid_argument", "exec without command", "command")
check_error(srv.post("/v1/sandboxes/%s/exec" % A, {"command": 5}), 400, "invalid_argument", "exec with a numeric command",
            "command")
check_error(srv.post("/v1/sandboxes/%s/exec" % A, {"command": "true", "timeout_s": -1}), 400, "invalid_argument",
            "exec with timeout_s -1", "timeout_s")
check_error(srv.post("/v1/sandboxes/%s/exec" % A, {"command": "true", "env": {"A": 2}}), 400, "invalid_argument",
            "exec with a numeric env value", "env")
check_error(srv.post("/v1/sandboxes/%s/exec" % A, b'{"command": "touch /workspace/nope",'), 400, "invalid_argument",
            "exec with malformed JSON", "json")
check_error(srv.post("/v1/sandboxes/%s/exec" % A,
                     {"command": "touch /workspace/big-stdin", "stdin": "x" * (MAX_BODY + 1)}),
            413, "limit_exceeded", "exec with a body over max_body")
r = sh(A, "ls /workspace/nope /workspace/big-stdin 2>&1 | wc -l; test -e /workspace/nope || test -e "
          "/workspace/big-stdin || echo none")
h.eq((r.get("stdout") or "").split()[-1:], ["none"], "the refused execs did not run", r.text)
check_error(srv.exec("nosuchbox42", "true"), 404, "not_found", "exec in an unknown box", "nosuchbox42")

# ---- exec of an argv (no shell) ---------------------------------------------------------------

def ax(box, argv, **kw):
    body = {"argv": argv}
    body.update(kw)
    return srv.post("/v1/sandboxes/%s/exec" % box, body)


r = ax(A, ["printf", "%s|", "a b", "it's", "$HOME", "*", "$(id)", "", "`id`"])
h.eq((r.status, r.get("exit_code"), r.get("stdout")), (200, 0, "a b|it's|$HOME|*|$(id)||`id`|"),
     "argv exec: words reach the program literally (no splitting, quoting, expansion, globs)", r.describe())
r = ax(A, ["sh", "-c", 'echo "$K|${SHLVL-unset}"; pwd -P; cat /proc/$PPID/comm'], env={"K": "V v"},
       cwd="/workspace/src")
out = (r.get("stdout") or "").splitlines()
h.eq(out[:2], ["V v|unset", "/workspace/src"], "argv exec: env and cwd apply; no outer bash set SHLVL",
     r.describe())
h.ok(len(out) == 3 and out[2] != "bash", "argv exec: the program's parent is not a shell (%r)" % out[2:], r.text)
r = ax(O, ["sh", "-c", 'echo "$FOO|$SP"'])
h.eq(r.get("stdout"), "bar|a b\n", "argv exec gets the box's env too", r.text)
r = ax(A, ["cat"], stdin="from stdin")
h.eq(r.get("stdout"), "from stdin", "argv exec reads stdin", r.text)
r = ax(A, ["ab-no-such-program", "x"])
h.eq((r.status, r.get("exit_code")), (200, 127), "argv exec of a missing program: 200 with exit code 127",
     r.describe())
h.contains(r.get("stderr") or "", "ab-no-such-program: command not found", "... and says so on stderr", r.text)
r = ax(A, ["sh", "-c", "sleep 304 & sleep 305"], timeout_s=1)
h.eq((r.get("timed_out"), r.get("exit_code")), (True, 124), "argv exec past timeout_s: timed_out, 124",
     r.describe())
h.eq(procs_left(A, r"slee[p] 30[45]"), [], "... and its whole process tree was killed")
for body, what, mention in (({"command": "true", "argv": ["true"]}, "exec with command and argv", "not both"),
                            ({"argv": []}, "exec with an empty argv", "argv"),
                            ({"argv": "true"}, "exec with a string argv", "argv"),
                            ({"argv": ["true", 1]}, "exec with a number in argv", "argv[1]"),
                            ({"argv": ["true", "a\u0000b"]}, "exec with a NUL in an argv word", "u0000"),
                            ({"argv": [""]}, "exec with an empty argv[0]", "argv[0]")):
    check_error(srv.post("/v1/sandboxes/%s/exec" % A, body), 400, "invalid_argument", what, mention)
r = srv.post("/v1/exec", {"app_id": "app1", "user_id": "u1", "chat_id": "c1", "argv": ["pwd"], "cwd": "src"})
h.eq((r.status, r.get("sandbox_id"), r.get("stdout")), (200, A, "/workspace/src\n"),
     "/v1/exec with argv runs in the keys' box",
     r.describe())
check_error(srv.post("/v1/exec", {"app_id": "app1", "user_id": "u1", "chat_id": "c1", "argv": ["true"],
                                  "command": "true"}), 400, "invalid_argument", "/v1/exec with command and argv",
            "not both")
s = srv.sse("/v1/sandboxes/%s/exec" % A, method="POST", body={"argv": ["sh", "-c", "echo out; echo err >&2; exit 3"]})
evs = s.collect(until=lambda e: e.type in ("exit", "error"), timeout=15)
s.close()
h.eq(("".join((e.json or {}).get("data", "") for e in evs if e.type == "stdout"),
      "".join((e.json or {}).get("data", "") for e in evs if e.type == "stderr"),
      [(e.json or {}).get("exit_code") for e in evs if e.type == "exit"]),
     ("out\n", "err\n", [3]), "argv exec streams over SSE: stdout, stderr, then exit", repr(evs))

m1 = srv.metrics() or []

# ---- exec streaming (SSE) ---------------------------------------------------------------

s = srv.sse("/v1/sandboxes/%s/exec" % A, method="POST",
            body={"command": "for i in 1 2 3; do echo $i; sleep 1; done; echo e >&2; exit 5"})
h.eq(s.status, 200, "exec with Accept: text/event-stream answers 200", s.describe())
h.ok(s.content_type.startswith("text/event-stream"), "... as text/event-stream", s.describe())
evs = s.collect(until=lambda e: e.type in ("exit", "error"), timeout=15)
s.close()
outs = [e for e in evs if e.type == "stdout"]
errs = [e for e in evs if e.type == "stderr"]
ex = [e for e in evs if e.type == "exit"]
h.eq("".join((e.json or {}).get("data", "") for e in outs), "1\n2\n3\n", "stdout chunks carry the output in order",
     repr(evs))
h.eq("".join((e.json or {}).get("data", "") for e in errs), "e\n", "stderr chunks carry stderr", repr(evs))
h.ok(outs and outs[0].t - s.t0 < 1.5 * h.slow, "the first chunk arrives while the command still runs (%.2fs)"
     % ((outs[0].t - s.t0) if outs else -1))
h.eq(len(ex), 1, "one exit event", repr(evs))
h.ok(evs and evs[-1].type == "exit", "the exit event comes last", repr(evs))
xj = ex[0].json if ex else {}
h.eq(((xj or {}).get("exit_code"), (xj or {}).get("timed_out"), (xj or {}).get("truncated")), (5, False, False),
     "exit event: exit_code 5, not timed out, not truncated", repr(ex))
h.ok(is_int((xj or {}).get("duration_ms")) and xj.get("duration_ms") >= 2500, "exit event: duration_ms >= 2.5 s",
     repr(ex))
h.ok(ex and outs and ex[0].t - outs[0].t > 1.5, "the exit event arrives seconds after the first chunk")

s = srv.sse("/v1/sandboxes/%s/exec" % A, method="POST", body={"command": "sleep 10", "timeout_s": 1})
evs = s.collect(until=lambda e: e.type in ("exit", "error"), timeout=10)
s.close()
xj = evs[-1].json if evs and evs[-1].type == "exit" else {}
h.eq(((xj or {}).get("timed_out"), (xj or {}).get("exit_code")), (True, 124),
     "streamed exec past its timeout: exit event with timed_out and 124", repr(evs))

s = srv.sse("/v1/sandboxes/%s/exec" % A, method="POST", body={"command": "echo go; sleep 303; echo never"})
first = s.next(5)
h.ok(first is not None and first.type == "stdout", "a streamed long command sends its first chunk",
     s.describe())
h.ok(box_procs(A, r"^slee[p] 303"), "... while its sleep runs in the box (control)")
s.close()
h.eq(procs_left(A, r"slee[p] 303", 6), [],
     "closing the stream kills the command (within 6 s)")

s = srv.sse("/v1/sandboxes/nosuchbox42/exec", method="POST", body={"command": "true"})
h.eq(s.status, 404, "streamed exec in an unknown box answers 404", s.describe())
h.eq(((s.json or {}).get("error") or {}).get("code"), "not_found", "... with a not_found error body",
     s.describe())

# ---- stop / start ---------------------------------------------------------------------------

r = sh(E, "echo kept > /workspace/keep.txt; echo tmp > /tmp/t.txt; echo $$")
r = srv.post("/v1/sandboxes/%s/stop" % E)
h.eq((r.status, r.get("id"), r.get("status")), (200, E, "stopped"), "stop answers 200 with the stopped box",
     r.describe())
h.eq(h.cli_status(E), "stopped", "agentbox ls --json shows the box stopped")
r = srv.post("/v1/sandboxes/%s/stop" % E)
h.eq((r.status, r.get("status")), (200, "stopped"), "stop of a stopped box answers 200 (idempotent)", r.describe())
r = srv.post("/v1/sandboxes/%s/start" % E)
h.eq((r.status, r.get("status")), (200, "running"), "start answers 200 with the running box", r.describe())
h.eq(h.cli_status(E), "running", "agentbox ls --json shows the box running again")
r = srv.post("/v1/sandboxes/%s/start" % E)
h.eq((r.status, r.get("status")), (200, "running"), "start of a running box answers 200 (idempotent)",
     r.describe())
r = sh(E, "cat /workspace/keep.txt; ls /tmp")
h.eq(r.get("stdout"), "kept\n", "after stop/start the workspace file is kept (and /tmp is fresh)", r.text)
check_error(srv.post("/v1/sandboxes/nosuchbox42/stop"), 404, "not_found", "stop of an unknown box")
check_error(srv.post("/v1/sandboxes/nosuchbox42/start"), 404, "not_found", "start of an unknown box")
# A stopped box is resumed by an exec.
srv.post("/v1/sandboxes/%s/stop" % E)
r = sh(E, "cat /workspace/keep.txt")
h.eq((r.status, r.get("stdout")), (200, "kept\n"), "exec in a stopped box resumes it, files kept", r.describe())
h.eq(srv.status_of(E), "running", "... and the box is running afterwards")

# ---- /v1/exec -------------------------------------------------------------------------------

r = srv.post("/v1/exec", {"app_id": "app1", "user_id": "u1", "chat_id": "c1",
                          "command": "pwd; echo v1 > /workspace/v1.txt"})
h.eq((r.status, r.get("sandbox_id"), r.get("stdout"), r.get("exit_code")), (200, A, "/workspace\n", 0),
     "/v1/exec with existing keys runs in that box (sandbox_id = its id)", r.describe())
r = srv.post("/v1/exec", {"app_id": "app1", "user_id": "u1", "chat_id": "c1", "command": "cat v1.txt"})
h.eq(r.get("stdout"), "v1\n", "/v1/exec session box keeps its files across calls", r.text)
V = chat_box_id("app3", "u1", "c1")
r = srv.post("/v1/exec", {"app_id": "app3", "user_id": "u1", "chat_id": "c1", "command": "echo new",
                          "env": {"Q": "1"}})
h.eq((r.status, r.get("sandbox_id"), r.get("stdout")), (200, V, "new\n"), "/v1/exec with new keys makes the box",
     r.describe())
h.eq(srv.status_of(V), "running", "... which then exists and runs")
TK = thread_box_id("task-thread-1")
r = srv.post("/v1/exec", {"thread_id": "task-thread-1", "mode": "task", "command": "echo $((6*7))"})
h.eq((r.status, r.get("sandbox_id"), r.get("stdout"), r.get("exit_code")), (200, TK, "42\n", 0),
     "/v1/exec in task mode runs the command", r.describe())
h.eq(wait_for(lambda: srv.status_of(TK) is None, 10), True, "... and the task box is gone afterwards (404)")
h.eq(wait_for(lambda: TK not in (h.cli_boxes() or {TK: 1}), 10), True,
     "... also from the backend (agentbox ls --json)")
h.eq(h.leftovers(TK), [], "... with its disk")
TK2 = thread_box_id("task-thread-2")
r = srv.post("/v1/exec", {"thread_id": "task-thread-2", "mode": "task", "command": "exit 7"})
h.eq((r.status, r.get("exit_code")), (200, 7), "/v1/exec task mode with a failing command: its exit code",
     r.describe())
h.eq(wait_for(lambda: srv.status_of(TK2) is None, 10), True, "... and that task box is gone too")
r = sh(K, "echo once")
h.eq(r.get("stdout"), "once\n", "exec in a task box made by POST /v1/sandboxes runs", r.describe())
h.eq(wait_for(lambda: srv.status_of(K) is None, 10), True, "... and the task box is gone after that first exec")
created.remove(K)
Z = chat_box_id("app9", "u1", "c1")
check_error(srv.post("/v1/exec", {"app_id": "app9", "user_id": "u1", "chat_id": "c1"}), 400, "invalid_argument",
            "/v1/exec without command", "command")
h.eq(srv.status_of(Z), None, "... made no box")
check_error(srv.post("/v1/exec", {"app_id": "app9", "user_id": "u1", "command": "true"}), 400, "invalid_argument",
            "/v1/exec with keys missing chat_id", "chat_id")

# ---- files ------------------------------------------------------------------------------------

F = "files-1"
r = srv.post("/v1/sandboxes", {"id": F})
h.eq(r.status, 201, "create the files box", r.describe())
created.append(F)
data = bytes(range(256)) * 4
r = srv.put(srv.file_path(F, "src/hello.bin"), data)
h.eq(r.status, 201, "PUT a file answers 201 (parents made)", r.describe())
h.eq(r.get("size"), len(data), "... with its size", r.text)
h.ok(str(r.get("path", "")).endswith("src/hello.bin"), "... and its path", r.text)
r = srv.get(srv.file_path(F, "src/hello.bin"))
h.eq((r.status, r.body), (200, data), "GET the file returns its bytes", r.describe())
h.ok(r.header("Content-Type", "").startswith("application/octet-stream"), "... as application/octet-stream",
     r.describe())
r = srv.get(srv.file_path(F, "/workspace/src/hello.bin"))
h.eq(r.body, data, "an absolute /workspace path names the same file")
r = sh(F, "sha256sum /workspace/src/hello.bin")
h.eq((r.get("stdout") or " ").split()[0], hashlib.sha256(data).hexdigest(), "the file is really in the box")
big = os.urandom(900 * 1024)
r = srv.put(srv.file_path(F, "src/hello.bin"), big)
h.eq(r.status, 201, "PUT over an existing file answers 201", r.describe())
h.eq(srv.get(srv.file_path(F, "src/hello.bin")).body, big, "... and GET returns the new content (900 KiB)")
r = srv.put(srv.file_path(F, "/tmp/up.txt"), b"tmpdata")
h.eq(r.status, 201, "PUT outside /workspace (to /tmp)", r.describe())
h.eq(sh(F, "cat /tmp/up.txt").get("stdout"), "tmpdata", "... lands there in the box")

status, head, body, err = srv.raw(("PUT %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n"
                                   "Content-Type: application/octet-stream\r\n\r\n"
                                   % (srv.file_path(F, "huge.bin"), MAX_UPLOAD * 4)).encode(), timeout=5)
h.eq(status, 413, "PUT with Content-Length over max_upload is refused with 413 before the body is sent",
     "%s\n%s\nerror: %s" % (head, body[:500], err))
r = srv.put(srv.file_path(F, "huge2.bin"), b"z" * (MAX_UPLOAD + 1))
check_error(r, 413, "limit_exceeded", "PUT of max_upload + 1 bytes")
r = sh(F, "ls /workspace")
h.eq(r.get("stdout"), "src\n", "the refused uploads left nothing in the workspace", r.text)

r = sh(F, "set -e; cd /workspace; mkdir -p d/sub/deeper d/empty; printf 12 > d/a.txt; printf 123 > d/sub/b.txt; "
          "printf 1234 > d/sub/deeper/c.txt; ln -s /etc/shadow d/link; ln -s /etc d/etcdir; chmod 640 d/a.txt; "
          "ln -s /etc/passwd d/sub/pwlink")
h.eq(r.get("exit_code"), 0, "made a tree with files, dirs and symlinks", r.describe())
r = srv.get(srv.file_path(F, "d"))
h.eq(r.status, 200, "GET a directory answers 200", r.describe())
h.ok(r.header("Content-Type", "").startswith("application/json"), "... with a JSON listing", r.describe())
ents = {e.get("name"): e for e in (r.get("entries") or []) if isinstance(e, dict)}
h.eq(sorted(ents), ["a.txt", "empty", "etcdir", "link", "sub"], "the listing has the directory's entries",
     r.text)
h.ok(str(r.get("path", "")).rstrip("/").endswith("d"), "the listing says its path", r.text)
h.eq({n: e.get("type") for n, e in ents.items()},
     {"a.txt": "file", "empty": "dir", "etcdir": "symlink", "link": "symlink", "sub": "dir"},
     "entry types: file, dir, symlink")
ae = ents.get("a.txt", {})
h.eq(ae.get("size"), 2, "a file entry has its size", json.dumps(ae))
h.ok(is_int(ae.get("mtime")) and is_int(ae.get("mode")), "a file entry has mtime and mode", json.dumps(ae))
h.eq((ae.get("mode") or 0) & 0o777, 0o640, "the mode carries the permission bits", json.dumps(ae))
h.ok(str(ae.get("path", "")).endswith("d/a.txt"), "an entry's path is its full path", json.dumps(ae))
h.eq((ents.get("link") or {}).get("link"), "/etc/shadow", "a symlink entry says where it points")
r2 = srv.get(srv.file_path(F, "d", depth=2))
p2 = sorted(str(e.get("path", "")).split("/d/", 1)[-1] for e in (r2.get("entries") or []))
h.eq(p2, ["a.txt", "empty", "etcdir", "link", "sub", "sub/b.txt", "sub/deeper", "sub/pwlink"],
     "depth=2 lists two levels",
     r2.describe())
r3 = srv.get(srv.file_path(F, "d", depth=3))
p3 = sorted(str(e.get("path", "")).split("/d/", 1)[-1] for e in (r3.get("entries") or []))
h.ok("sub/deeper/c.txt" in p3, "depth=3 reaches the third level", r3.describe())
h.ok(not any(p.startswith("etcdir/") for p in p2 + p3), "deep listings do not follow a symlink to /etc", repr(p3))
for bad_depth in ("0", "33", "abc"):
    check_error(srv.get(srv.file_path(F, "d", depth=bad_depth)), 400, "invalid_argument", "listing with depth=%s" % bad_depth,
                "depth")

r = srv.get(srv.file_path(F, "d", format="zip"))
h.eq(r.status, 200, "GET a directory with format=zip answers 200", r.describe())
try:
    zf = zipfile.ZipFile(io.BytesIO(r.body))
    infos = {}
    for zi in zf.infolist():
        name = zi.filename
        name = name[2:] if name.startswith("./") else name
        name = name[2:] if name.startswith("d/") else name
        infos[name] = zi
    zip_ok = True
except zipfile.BadZipFile as e:
    zf, infos, zip_ok = None, {}, False
    h.diag("not a zip: %s" % e)
h.ok(zip_ok, "the zip opens with Python's zipfile")
want = {"a.txt": b"12", "sub/b.txt": b"123", "sub/deeper/c.txt": b"1234"}
got = {n: zf.read(infos[n]) for n in want if n in infos} if zf else {}
h.eq(got, want, "the zip holds every file with its content", repr(sorted(infos)))
li = infos.get("link")
h.ok(li is not None and stat.S_ISLNK(li.external_attr >> 16), "the symlink is stored as a link (S_IFLNK)",
     repr(sorted(infos)))
h.eq(zf.read(li) if (zf and li) else None, b"/etc/shadow", "... whose content is its target, not a file's bytes")
h.ok(not any(n.startswith("etcdir/") for n in infos), "the link to /etc is not followed", repr(sorted(infos)))
pw = infos.get("sub/pwlink")
h.ok(pw is not None and stat.S_ISLNK(pw.external_attr >> 16) and zf.read(pw) == b"/etc/passwd",
     "a link to an existing file (/etc/passwd) is stored as a link too, not as the file", repr(sorted(infos)))
try:
    shadow = open("/etc/shadow", "rb").read()
except OSError:
    shadow = None
leaked = [n for n in infos if shadow and zf.read(infos[n]) == shadow]
h.eq(leaked, [], "no zip entry holds the host's /etc/shadow")
r = srv.get(srv.file_path(F, "/workspace", format="zip"))
try:
    names = zipfile.ZipFile(io.BytesIO(r.body)).namelist()
except zipfile.BadZipFile:
    names = []
h.ok(any(n.endswith("src/hello.bin") for n in names) and any(n.endswith("d/sub/deeper/c.txt") for n in names),
     "a zip of /workspace holds the whole workspace", repr(names[:20]))

r = srv.get(srv.file_path(F, "d/link"))
h.ok(r.status in (400, 404) and (shadow is None or r.body != shadow), "GET through a workspace link to "
     "/etc/shadow is refused and never returns the host's file", r.describe())
r = srv.get(srv.file_path(F, "../../../../../../etc/shadow"))
# (a Debian image has an /etc/shadow of its own: the box's may be read, never the host's)
h.ok((r.status in (400, 404) or not h.native) and (shadow is None or r.body != shadow),
     "GET of ../../etc/shadow stays inside the box", r.describe())
r = srv.put(srv.file_path(F, "d/etcdir/abserver-escape-%d" % os.getpid()), b"x")
h.ok(not os.path.exists("/etc/abserver-escape-%d" % os.getpid()), "PUT through a workspace link to /etc does not "
     "write the host's /etc", r.describe())
check_error(srv.get(srv.file_path(F, "nope.txt")), 404, "not_found", "GET of a missing file")
check_error(srv.get("/v1/sandboxes/%s/files" % F), 400, "invalid_argument", "files without path", "path")
check_error(srv.get(srv.file_path("nosuchbox42", "x")), 404, "not_found", "files of an unknown box")

r = srv.delete(srv.file_path(F, "d/a.txt"))
h.eq(r.status, 200, "DELETE a file answers 200", r.describe())
h.ok(str(r.get("deleted", "")).endswith("d/a.txt"), "... with {\"deleted\": path}", r.text)
h.eq(srv.get(srv.file_path(F, "d/a.txt")).status, 404, "... and the file is gone")
r = srv.delete(srv.file_path(F, "d/link"))
h.eq(r.status, 200, "DELETE a symlink answers 200", r.describe())
h.eq(sh(F, "test -L /workspace/d/link || echo gone; test -d /etc && echo etc-ok").get("stdout"),
     "gone\netc-ok\n", "... the link went, not its target")
check_error(srv.delete(srv.file_path(F, "d/sub")), 409, "conflict", "DELETE a non-empty dir without recursive")
h.eq(sh(F, "cat /workspace/d/sub/b.txt").get("stdout"), "123", "... changed nothing")
r = srv.delete(srv.file_path(F, "d/empty"))
h.eq(r.status, 200, "DELETE an empty dir answers 200", r.describe())
r = srv.delete(srv.file_path(F, "d/sub", recursive=1))
h.eq(r.status, 200, "DELETE a non-empty dir with recursive=1 answers 200", r.describe())
h.eq(sh(F, "ls -A /workspace/d").get("stdout"), "etcdir\n", "... and the tree is gone")
check_error(srv.delete(srv.file_path(F, "d/nope")), 404, "not_found", "DELETE a missing file")

# A full disk: 507 (native: a Docker box's disk is the engine's, unlimited here).
if h.native:
    # A full disk: 507. Box O has a 32 MiB disk.
    r = sh(O, "dd if=/dev/zero of=/workspace/fill bs=1M count=64 2>&1; sync; df -k /workspace | tail -1", http_timeout=30)
    h.contains(r.get("stdout") or "", "No space left", "filling the 32 MiB disk of a box runs out of space (control)",
               r.describe())
    # The server's writer may use blocks ext4 reserves for root that the box's user cannot: keep writing.
    puts, blobs = [], {}
    for i in range(8):
        blob = os.urandom(MAX_UPLOAD)
        r = srv.put(srv.file_path(O, "more%d.bin" % i), blob)
        puts.append(r)
        if r.status != 201:
            break
        blobs["more%d.bin" % i] = blob
    h.diag("%d uploads of 1 MiB were accepted before the disk was full" % len(blobs))
    check_error(puts[-1], 507, "limit_exceeded", "PUT into a box whose disk is full")
    bad = [n for n, blob in sorted(blobs.items()) if srv.get(srv.file_path(O, n)).body != blob]
    h.eq(bad, [], "every upload answered 201 on the nearly full disk reads back whole")
    r = sh(O, "rm -f /workspace/fill /workspace/more*.bin; echo freed")
    h.eq(r.get("stdout"), "freed\n", "... and after freeing space the box works", r.describe())
    h.eq(srv.put(srv.file_path(O, "more.bin"), b"ok").status, 201, "... and PUT works again")

srv.post("/v1/sandboxes/%s/stop" % F)
r = srv.get(srv.file_path(F, "src/hello.bin"))
h.eq((r.status, r.body == big), (200, True), "GET a file of a stopped box resumes it and returns the file",
     r.describe())
h.eq(srv.status_of(F), "running", "... and the box runs again")

# ---- events --------------------------------------------------------------------------------

s_types = srv.sse("/v1/events?types=exec,box.stopped")
s_box = srv.sse("/v1/events?box_id=" + E)
h.eq((s_types.status, s_box.status), (200, 200), "filtered event streams answer 200")
time.sleep(0.2)
sh(A, "echo events-marker-1")
sh(E, "echo on-E")
srv.post("/v1/sandboxes/%s/stop" % E)
srv.post("/v1/sandboxes/%s/start" % E)
tev = s_types.collect(until=lambda e: e.type == "box.stopped", timeout=10) + s_types.drain(0.5, 3)
bev = s_box.collect(until=lambda e: e.type == "box.started", timeout=10)
s_types.close()
s_box.close()
h.ok(tev and set(e.type for e in tev) == {"exec", "box.stopped"}, "types=exec,box.stopped gives those types only",
     repr(tev))
h.ok(bev and all((e.json or {}).get("box_id") == E for e in bev), "box_id= gives that box's events only",
     repr(bev))
h.ok(any(e.type == "exec" for e in bev) and any(e.type == "box.started" for e in bev),
     "... its exec and lifecycle events", repr(bev))

seen_marker = []


def _upto_marker(e):
    if e.type == "exec" and ((e.json or {}).get("data") or {}).get("command") == "echo on-E":
        seen_marker.append(e)
    return bool(seen_marker) and e.type == "box.started" and (e.json or {}).get("box_id") == E


evs = ev_all.collect(until=_upto_marker, timeout=15)
h.ok(evs, "the stream opened at the start has events")
bad_frame = [e for e in evs if not isinstance(e.json, dict) or e.json.get("type") != e.type or
             str(e.json.get("seq")) != str(e.id) or not is_int(e.json.get("time"))]
h.eq(bad_frame, [], "every event has id = seq, event = type, and a time")
seqs = [e.json.get("seq") for e in evs if isinstance(e.json, dict)]
h.ok(seqs == sorted(seqs) and len(set(seqs)) == len(seqs), "sequence numbers increase", repr(seqs[:50]))


def find(evs, type, box=None, **data):
    return [e for e in evs if e.type == type and (box is None or (e.json or {}).get("box_id") == box)
            and all(((e.json or {}).get("data") or {}).get(k) == v for k, v in data.items())]


h.ok(find(evs, "box.created", A), "box.created for the first box", repr(evs[:10]))
ce = find(evs, "box.created", A)
h.eq((ce[0].json or {}).get("app_id") if ce else None, "app1", "... carrying its app_id")
xm = find(evs, "exec", A, command="echo events-marker-1")
h.eq(len(xm), 1, "one exec event for the command", repr(find(evs, "exec", A)[-5:]))
xd = (xm[0].json or {}).get("data", {}) if xm else {}
h.eq((xd.get("exit_code"), xd.get("timed_out"), xd.get("stdout_bytes"), xd.get("stderr_bytes")),
     (0, False, len("events-marker-1\n"), 0), "exec event: exit_code, timed_out, stdout/stderr bytes", json.dumps(xd))
h.ok(is_int(xd.get("duration_ms")), "exec event: duration_ms", json.dumps(xd))
h.ok(find(evs, "exec", A, exit_code=3, stderr_bytes=4), "the exit-3 exec has its event (exit_code 3, stderr 4 B)")
h.ok(find(evs, "box.stopped", E, reason="api"), "box.stopped with reason api after POST stop")
h.ok(find(evs, "box.started", E), "box.started after POST start")
res = [e for e in evs if e.type == "resource"]
rd = ((res[-1].json or {}).get("data") or {}) if res else {}
h.ok(res, "resource samples arrive (sample_interval 1s)")
h.eq(sorted(k for k in ("cpu_pct", "memory_bytes", "memory_limit", "memory_pct", "pids", "disk_used_bytes",
                        "disk_limit_bytes", "disk_pct") if k in rd),
     sorted(("cpu_pct", "memory_bytes", "memory_limit", "memory_pct", "pids", "disk_used_bytes", "disk_limit_bytes",
             "disk_pct")), "a resource event has every documented field", json.dumps(rd))

if xm:
    n = xm[0].json["seq"]
    s = srv.sse("/v1/events?after=%d" % n)
    e1 = s.next(5)
    s.close()
    h.eq((e1.json or {}).get("seq") if e1 else None, n + 1, "after=SEQ resumes with the next event", s.describe())
    s = srv.sse("/v1/events", headers={"Last-Event-ID": str(n)})
    e1 = s.next(5)
    s.close()
    h.eq((e1.json or {}).get("seq") if e1 else None, n + 1, "Last-Event-ID resumes with the next event",
         s.describe())

# ---- metrics --------------------------------------------------------------------------------

r = srv.get("/metrics")
h.eq(r.status, 200, "GET /metrics answers 200", r.describe())
h.ok(r.header("Content-Type", "").startswith("text/plain"), "/metrics is text/plain", r.describe())
m2 = abserver.parse_metrics(r.text)
h.eq([l for n, l, v in m2 if n == "!unparsable"], [], "every /metrics line parses as Prometheus text")
names = set(n for n, l, v in m2)
for want in ("agentbox_boxes", "agentbox_execs_total", "agentbox_exec_duration_seconds_bucket",
             "agentbox_exec_duration_seconds_sum", "agentbox_exec_duration_seconds_count", "agentbox_execs_in_flight",
             "agentbox_http_requests_total", "agentbox_errors_total", "agentbox_lifecycle_ops_total",
             "agentbox_pool_size", "agentbox_pool_target", "agentbox_sse_subscribers", "agentbox_uptime_seconds",
             "agentbox_build_info"):
    h.ok(want in names, "/metrics has %s" % want)
if VERSION:
    h.ok(any(n == "agentbox_build_info" and l.get("version") == VERSION for n, l, v in m2),
         "agentbox_build_info carries the version")
ms = abserver.metric_sum
ok0, ok1 = ms(m0, "agentbox_execs_total", outcome="ok") or 0, ms(m1, "agentbox_execs_total", outcome="ok") or 0
er0, er1 = ms(m0, "agentbox_execs_total", outcome="error") or 0, ms(m1, "agentbox_execs_total", outcome="error") or 0
to0, to1 = (ms(m0, "agentbox_execs_total", outcome="timeout") or 0,
            ms(m1, "agentbox_execs_total", outcome="timeout") or 0)
h.ok(ok1 - ok0 >= 8, "execs_total{outcome=ok} moved with the successful execs (%s -> %s)" % (ok0, ok1))
h.ok(er1 - er0 >= 3, "execs_total{outcome=error} moved with the failing execs (%s -> %s)" % (er0, er1))
h.ok(to1 - to0 >= 2, "execs_total{outcome=timeout} moved with the timed out execs (%s -> %s)" % (to0, to1))
c0 = ms(m0, "agentbox_exec_duration_seconds_count") or 0
c1 = ms(m1, "agentbox_exec_duration_seconds_count") or 0
h.ok(c1 - c0 >= 13, "the exec latency histogram counted the execs (%s -> %s)" % (c0, c1))
n404 = ms(m2, "agentbox_http_requests_total", code="404") or 0
nf = ms(m2, "agentbox_errors_total", code="not_found") or 0
srv.get("/v1/sandboxes/nosuchbox43")
m3 = srv.metrics() or []
h.eq((ms(m3, "agentbox_http_requests_total", code="404") or 0) - n404, 1,
     "http_requests_total{code=404} counts a 404")
h.eq((ms(m3, "agentbox_errors_total", code="not_found") or 0) - nf, 1, "errors_total{code=not_found} counts it")
running = len(srv.list({"status": "running"}) or [])
h.eq(ms(m3, "agentbox_boxes", state="running"), float(running), "agentbox_boxes{state=running} = running boxes "
     "listed (%d)" % running)
h.eq(((srv.health() or {}).get("boxes") or {}).get("running"), running, "/health boxes.running agrees")
h.eq(ms(m3, "agentbox_execs_in_flight"), 0.0, "no exec in flight now")

# ---- several requests on one keep-alive connection -------------------------------------------

conn = http.client.HTTPConnection(srv.host, srv.port, timeout=10)
got = []
try:
    for path in ("/health", "/v1/sandboxes", "/v1/sandboxes/" + A, "/v1/sandboxes/nosuchbox42", "/health"):
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        got.append((path, resp.status, bool(json.loads(body or b"null"))))
except (OSError, http.client.HTTPException, ValueError) as e:
    got.append(("error", repr(e)))
finally:
    conn.close()
h.eq([g[1] if len(g) == 3 else g for g in got], [200, 200, 200, 404, 200],
     "five requests on one keep-alive connection are all answered", repr(got))

# ---- routes and methods ---------------------------------------------------------------------


def allow_set(r):
    return set(x.strip().upper() for x in r.header("Allow", "").split(",") if x.strip())


for path in ("/v1/nope", "/nope", "/v1/sandboxes/%s/nope" % A, "/v2/sandboxes"):
    check_error(srv.get(path), 404, "not_found", "GET %s (unknown route)" % path)
for method, path, need in (("DELETE", "/health", {"GET"}), ("PUT", "/v1/sandboxes", {"GET", "POST", "DELETE"}),
                           ("PATCH", "/v1/sandboxes/" + A, {"GET", "DELETE"}),
                           ("GET", "/v1/sandboxes/%s/exec" % A, {"POST"}),
                           ("GET", "/v1/sandboxes/%s/stop" % A, {"POST"}),
                           ("POST", "/v1/sandboxes/%s/files?path=x" % A, {"GET", "PUT", "DELETE"}),
                           ("GET", "/v1/exec", {"POST"}), ("POST", "/metrics", {"GET"})):
    r = srv.request(method, path)
    check_error(r, 405, "method_not_allowed", "%s %s (wrong method)" % (method, path))
    h.ok(need <= allow_set(r) and "PATCH" not in allow_set(r), "... Allow lists %s" % ", ".join(sorted(need)),
         r.describe())
h.eq(srv.status_of(A), "running", "the wrong-method requests changed nothing")

# ---- 503: a box that cannot be made available ----------------------------------------------

X = "broken-1"
r = srv.post("/v1/sandboxes", {"id": X})
created.append(X)
srv.post("/v1/sandboxes/%s/stop" % X)
img = os.path.join(h.data, "boxes", r.get("backend_id") or X, "disk.img")
if os.path.isfile(img):
    os.truncate(img, 0)
    r = sh(X, "echo should-not-run")
    h.eq(r.status, 503, "exec in a box that cannot start answers 503", r.describe())
    h.eq((r.get("exit_code"), r.get("stdout")), (-1, ""), "... with exit_code -1 and empty stdout", r.text)
    h.ok(r.get("stderr"), "... the reason in stderr", r.text)
    h.eq(r.err_code, "unavailable", "... and an error object (unavailable)", r.text)
    r = srv.post("/v1/exec", {"id": X, "command": "echo should-not-run"})
    h.eq((r.status, r.get("exit_code")), (503, -1), "/v1/exec on that box: 503 with exit_code -1", r.describe())
else:
    h.skip("503 on a box that cannot start", "no disk image at %s" % img)

# ---- delete ---------------------------------------------------------------------------------


def gone(ids, timeout=15):
    return wait_for(lambda: all(srv.status_of(i) is None for i in ids), timeout)


t0 = time.monotonic()
r = srv.delete("/v1/sandboxes/" + E)
el = time.monotonic() - t0
h.eq((r.status, r.get("deleting")), (202, [E]), "DELETE a box answers 202 {\"deleting\": [id]}", r.describe())
h.ok(el < 2 * h.slow, "... at once (%.2fs)" % el)
h.ok(srv.status_of(E) in ("deleting", None), "... then the box is deleting or gone")
r2 = srv.post("/v1/sandboxes/%s/stop" % E)
h.ok(r2.status in (409, 404), "stop of a box being deleted is 409 (or 404 once gone)", r2.describe())
h.ok(gone([E]), "the deleted box disappears (GET 404)")
h.ok(wait_for(lambda: E not in (h.cli_boxes() or {E: 1}), 10), "... and from the backend (agentbox ls --json)")
h.eq(h.leftovers(E), [], "... with its disk")
check_error(srv.delete("/v1/sandboxes/" + E), 404, "not_found", "DELETE of a deleted box")
check_error(srv.delete("/v1/sandboxes/nosuchbox42"), 404, "not_found", "DELETE of an unknown box")

before = sorted(b.get("id") for b in (srv.list() or []))
check_error(srv.delete("/v1/sandboxes?chat_id=c1"), 400, "invalid_argument", "DELETE by chat without app_id", "app_id")
check_error(srv.delete("/v1/sandboxes"), 400, "invalid_argument", "DELETE /v1/sandboxes without a filter", "app_id")
h.eq(sorted(b.get("id") for b in (srv.list() or [])), before, "... deleted nothing")
r = srv.delete("/v1/sandboxes?app_id=app1&chat_id=c1")
h.eq((r.status, sorted(r.get("deleting") or [])), (202, sorted([A, A3])),
     "DELETE ?app_id=app1&chat_id=c1 answers 202 with that chat's boxes", r.describe())
h.ok(gone([A, A3]), "... which disappear")
h.eq(srv.status_of(A2), "stopped", "... while the app's other chat stays")
r = srv.delete("/v1/sandboxes?app_id=app1&user_id=u1&chat_id=c2")
h.eq((r.status, r.get("deleting")), (202, [A2]), "DELETE ?app_id&user_id&chat_id answers 202 with that box",
     r.describe())
h.ok(gone([A2]), "... which disappears")
r = srv.delete("/v1/sandboxes?app_id=app2")
h.eq((r.status, r.get("deleting")), (202, [B]), "DELETE ?app_id=app2 answers 202 with the app's boxes",
     r.describe())
h.ok(gone([B]), "... which disappear")
r = srv.delete("/v1/sandboxes?thread_id=thread-xyz")
h.eq((r.status, r.get("deleting")), (202, [T]), "DELETE ?thread_id= answers 202 with the thread's box",
     r.describe())
h.ok(gone([T]), "... which disappears")
r = srv.delete("/v1/sandboxes?app_id=nobody")
h.eq((r.status, r.get("deleting")), (202, []), "DELETE by an app with no boxes: 202 with an empty list",
     r.describe())
h.eq(srv.status_of(O), "running", "boxes of no deleted app are untouched")
r = srv.delete("/v1/sandboxes/" + X)
h.eq(r.status, 202, "DELETE of the box that cannot start answers 202", r.describe())
h.ok(gone([X]), "... and it disappears too")
dl = ev_all.collect(until=lambda e: e.type == "box.deleted" and (e.json or {}).get("box_id") == E, timeout=10)
dg, dd = find(dl, "box.deleting", E), find(dl, "box.deleted", E)
h.ok(dg and dd and dg[0].json["seq"] < dd[0].json["seq"], "events: box.deleting then box.deleted",
     repr([e for e in dl if e.type != "resource"][:20]))

# ---- logs -------------------------------------------------------------------------------------

ev_all.close()
lines = [l for l in srv.log().splitlines() if l.strip() and not l.startswith("==== ")]
notjson = []
for l in lines:
    try:
        if not isinstance(json.loads(l), dict):
            notjson.append(l)
    except ValueError:
        notjson.append(l)
h.ok(lines, "the server logs on stderr")
h.eq(notjson[:5], [], "every stderr line is a JSON object (structured logs)")

h.done()
