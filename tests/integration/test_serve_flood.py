#!/usr/bin/env python3
"""Connection floods against `agentbox serve` (loopback addresses stand in for
clients): from 127.0.0.2, 200 idle event-stream (SSE) clients and 2,000
connections that send a partial request head and then one header line every
half second. While they are open, /health and an exec from 127.0.0.1 still
answer; the slow connections are closed at the head deadline (set short
here), not before it, however they trickle; 127.0.0.2 is refused a
connection past its per-address cap while 127.0.0.1 still gets in; the 201st
stream of 127.0.0.2 is refused 429 (per-address stream cap) and a stream past
the server's stream cap 503; the idle streams still receive events; streams
whose clients hang up are released. /metrics counts all of it."""
import os
import resource
import select
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
from abserver import metric_sum, wait_for  # noqa: E402

N_SLOW = 2000
N_SSE = 200
OTHER_STREAMS = 10  # streams from 127.0.0.3 before the server's stream cap
CAP = 50            # the per-address cap of the second server

h = abserver.ServerHarness(budget=240)
# Long enough to open the whole flood before its first connections expire.
HEAD_TIMEOUT_S = 8.0 * h.slow

soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
need = N_SLOW + N_SSE + 200
if hard != resource.RLIM_INFINITY and hard < need:
    h.skip_all("this test needs %d open files, the hard limit is %d" % (need, hard))
want = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))

S = h.start_server(config={
    "head_timeout": "%gs" % HEAD_TIMEOUT_S,
    "max_connections": 6000,
    "max_connections_per_address": N_SLOW + N_SSE + 100,
    "max_streams": N_SSE + OTHER_STREAMS,
    "max_streams_per_address": N_SSE,
})
PORT = S.port


def connect_from(src, timeout=10.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((src, 0))
    s.connect(("127.0.0.1", PORT))
    return s


def read_head(s, timeout=30.0):
    """Reads until the end of a response head (and a little of the body); b'' on EOF/reset."""
    s.settimeout(timeout)
    got = b""
    end = time.monotonic() + timeout
    while b"\r\n\r\n" not in got and time.monotonic() < end:
        try:
            chunk = s.recv(4096)
        except (socket.timeout, OSError):
            break
        if not chunk:
            break
        got += chunk
    return got


def open_sse(src):
    """An event stream from src: (socket, first bytes of the answer)."""
    s = connect_from(src)
    s.sendall(b"GET /v1/events HTTP/1.1\r\nHost: localhost\r\n\r\n")
    return s, read_head(s)


def metrics():
    return S.metrics() or []


def metric(name, **labels):
    return metric_sum(metrics(), name, **labels)


# ---- before the flood: a box to exec in -------------------------------------
r = S.post("/v1/sandboxes", {"id": "calm"})
h.eq(r.status, 201, "a box to exec in during the flood", r.describe())

# ---- 200 idle event streams from 127.0.0.2 -------------------------------------
sse = []
bad = []
for i in range(N_SSE):
    s, head = open_sse("127.0.0.2")
    if head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head:
        sse.append(s)
    else:
        bad.append(head[:200])
        s.close()
h.eq(len(sse), N_SSE, "%d event streams from 127.0.0.2 are accepted" % N_SSE, bad[:3])

s, head = open_sse("127.0.0.2")
h.ok(head.startswith(b"HTTP/1.1 429") and b'"too_many_requests"' in head,
     "the next stream from 127.0.0.2 is refused 429 too_many_requests (per-address stream cap)",
     head[:400])
s.close()

# ---- 2,000 slow heads from 127.0.0.2 ---------------------------------------------
slow = []  # [socket, opened_at, closed_at or None]
for i in range(N_SLOW):
    try:
        t0 = time.monotonic()  # before connect: the server's clock for it starts later
        s = connect_from("127.0.0.2")
        s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")
        s.setblocking(False)
        slow.append([s, t0, None])
    except OSError as e:
        h.ok(False, "slow connection %d opens" % i, str(e))
        break
h.eq(len(slow), N_SLOW, "%d slow-head connections open from 127.0.0.2" % N_SLOW)
slow_lock = threading.Lock()
stop_trickle = threading.Event()


def mark_closed(entry):
    if entry[2] is None:
        entry[2] = time.monotonic()


def trickle():
    """One more header line on every open slow connection every 0.5 s."""
    n = 0
    while not stop_trickle.is_set():
        n += 1
        line = b"X-Trickle-%d: %d\r\n" % (n, n)
        with slow_lock:
            for e in slow:
                if e[2] is not None:
                    continue
                try:
                    e[0].send(line)
                except BlockingIOError:
                    pass
                except OSError:
                    mark_closed(e)
        stop_trickle.wait(0.5)


def watch_closes():
    """Notes when the server closes each slow connection (EOF or reset)."""
    while not stop_trickle.is_set():
        with slow_lock:
            live = [e for e in slow if e[2] is None]
        if not live:
            return
        for i in range(0, len(live), 500):
            part = live[i:i + 500]
            try:
                rd, _, _ = select.select([e[0] for e in part], [], [], 0.05)
            except (OSError, ValueError):
                rd = []
            ready = set(rd)
            for e in part:
                if e[0] not in ready:
                    continue
                try:
                    data = e[0].recv(4096)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    with slow_lock:
                        mark_closed(e)
                else:
                    e.append(data)  # an answer to a head never completed: should not happen


trickler = threading.Thread(target=trickle, daemon=True)
watcher = threading.Thread(target=watch_closes, daemon=True)
trickler.start()
watcher.start()

# ---- while the flood is open: the server answers others --------------------------
ok = wait_for(lambda: (metric("agentbox_http_connections") or 0) >= N_SLOW + N_SSE, 30)
h.ok(ok, "the server holds the %d connections of 127.0.0.2 (agentbox_http_connections)" % (N_SLOW + N_SSE),
     "connections: %s" % metric("agentbox_http_connections"))

r = S.get("/health", token=None, timeout=60)
h.eq(r.status, 200, "during the flood, /health from 127.0.0.1 answers", r.describe())
r = S.exec("calm", "echo still-here", http_timeout=60)
h.eq((r.status, r.get("stdout")), (200, "still-here\n"), "during the flood, an exec from 127.0.0.1 answers",
     r.describe())

# ---- the head deadline ------------------------------------------------------------
ok = wait_for(lambda: all(e[2] is not None for e in slow), 60 + HEAD_TIMEOUT_S, step=0.25)
closed = [e for e in slow if e[2] is not None]
h.ok(ok, "every slow connection is closed by the server although it kept trickling (%d of %d)"
     % (len(closed), len(slow)))
early = [e[2] - e[1] for e in closed if e[2] - e[1] < HEAD_TIMEOUT_S]
h.eq(early, [], "none is closed before the head deadline of %gs" % HEAD_TIMEOUT_S)
answered = [e[3][:100] for e in slow if len(e) > 3]
h.eq(answered, [], "none got an answer (their heads never completed)")
h.ok((metric("agentbox_http_head_deadline_closed_total") or 0) >= N_SLOW,
     "/metrics counts them (agentbox_http_head_deadline_closed_total >= %d)" % N_SLOW)
stop_trickle.set()
trickler.join(5)
for e in slow:
    e[0].close()

# ---- the server's stream cap ------------------------------------------------------
others = []
for i in range(OTHER_STREAMS):
    s, head = open_sse("127.0.0.3")
    if head.startswith(b"HTTP/1.1 200"):
        others.append(s)
    else:
        s.close()
h.eq(len(others), OTHER_STREAMS, "127.0.0.3 opens %d streams (up to max_streams)" % OTHER_STREAMS)
s, head = open_sse("127.0.0.3")
h.ok(head.startswith(b"HTTP/1.1 503") and b'"unavailable"' in head,
     "a stream past max_streams is refused 503 unavailable", head[:400])
s.close()
h.eq(metric("agentbox_http_streams"), float(N_SSE + OTHER_STREAMS), "/metrics: agentbox_http_streams")
h.ok((metric("agentbox_http_refused_total", reason="streams") or 0) >= 1
     and (metric("agentbox_http_refused_total", reason="streams_per_address") or 0) >= 1,
     "/metrics counts the refused streams")

# ---- the idle streams still work: an event reaches them -----------------------------
for s in sse[:20]:
    s.setblocking(True)
    s.settimeout(0.2)
    try:
        while s.recv(65536):
            pass
    except (socket.timeout, OSError):
        pass
r = S.exec("calm", "true")
h.eq(r.status, 200, "an exec (it emits an event)")
got = 0
for s in sse[:20]:
    s.settimeout(15)
    buf = b""
    end = time.monotonic() + 15
    while b"event:" not in buf and time.monotonic() < end:
        try:
            chunk = s.recv(65536)
        except (socket.timeout, OSError):
            break
        if not chunk:
            break
        buf += chunk
    got += b"event:" in buf
h.eq(got, 20, "the parked event streams wake and deliver the event (20 of them read)")

# ---- hung-up streams are released -----------------------------------------------------
for s in sse + others:
    s.close()
ok = wait_for(lambda: metric("agentbox_http_streams") == 0, 30)
h.ok(ok, "streams whose clients hung up are released (agentbox_http_streams back to 0)",
     "streams: %s" % metric("agentbox_http_streams"))
r = S.get("/health", token=None)
h.eq(r.status, 200, "the server answers after the flood")

# ---- the per-address connection cap (a second server, a long deadline) ----------------
S2 = h.start_server(name="capped", config={"head_timeout": "120s", "max_connections_per_address": CAP})
PORT = S2.port
held = []
for i in range(CAP):
    s = connect_from("127.0.0.4")
    s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n")  # a head never completed
    held.append(s)
ok = wait_for(lambda: metric_sum(S2.metrics() or [], "agentbox_http_connections") == CAP + 1, 30)
h.ok(ok, "127.0.0.4 holds %d connections, its cap (and /metrics asked from 127.0.0.1 makes one more)" % CAP)
try:
    s = connect_from("127.0.0.4")
    s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
    head = read_head(s, 10)
    s.close()
except OSError:
    head = b""
h.ok(not head.startswith(b"HTTP/"), "a connection from 127.0.0.4 past its cap is refused (closed, no answer)",
     head[:200])
r = S2.get("/health", token=None, timeout=60)
h.eq(r.status, 200, "... while 127.0.0.1 still gets in", r.describe())
s = connect_from("127.0.0.5")
s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
head = read_head(s, 30)
s.close()
h.ok(head.startswith(b"HTTP/1.1 200"), "... and so does 127.0.0.5", head[:200])
h.ok((metric_sum(S2.metrics() or [], "agentbox_http_refused_total", reason="connections_per_address") or 0) >= 1,
     "/metrics counts the refusal (agentbox_http_refused_total{reason=connections_per_address})")
held[0].close()
ok = wait_for(lambda: metric_sum(S2.metrics() or [], "agentbox_http_connections") == CAP, 30)
s = connect_from("127.0.0.4")
s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
head = read_head(s, 30)
s.close()
h.ok(ok and head.startswith(b"HTTP/1.1 200"), "once one of them closes, 127.0.0.4 gets in again", head[:200])
for s in held:
    s.close()
h.done()
