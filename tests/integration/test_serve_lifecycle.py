#!/usr/bin/env python3
"""The lifecycle manager of `agentbox serve`, over HTTP: 20 concurrent
acquires of the same keys make one box (one 201), also from two server
processes on one data dir and database; long execs block neither other
boxes nor /health, and an async delete answers at once meanwhile; idle stop
(idle_stop 2s, 4s on the stand-in cluster; reaper 500ms) stops a box that is idle and no box that is
active, and the next exec resumes it with its files; the warm pool fills,
serves an acquire (backend_id pool-...) and refills; max_running stops the
least recently active box (with idle pause off; with it on, the box is
paused instead: test_serve_pause.py); ttl_s deletes a box. The CLI (`agentbox ls
--json`) confirms each state on the backend."""
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
from abserver import chat_box_id, thread_box_id, wait_for  # noqa: E402

h = abserver.ServerHarness(budget=115)


def parallel(fns):
    """Runs every fn at once (released together by a barrier); returns their results in order."""
    res = [None] * len(fns)
    barrier = threading.Barrier(len(fns))

    def run(i, fn):
        try:
            barrier.wait(10)
        except threading.BrokenBarrierError:
            pass
        try:
            res[i] = fn()
        except Exception as e:  # noqa: BLE001 - reported by the checks
            res[i] = e

    ts = [threading.Thread(target=run, args=(i, fn), daemon=True) for i, fn in enumerate(fns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    return res


def statuses(rs):
    return sorted(getattr(r, "status", -2) for r in rs)


def cli_ids(data):
    return sorted(h.cli_boxes(data) or {})


# ==== 1. concurrent acquires, two servers, long operations ================================

S1 = h.start_server(name="main")
keys = {"app_id": "capp", "user_id": "u1", "chat_id": "c1"}
CID = chat_box_id("capp", "u1", "c1")
rs = parallel([lambda: S1.post("/v1/sandboxes", keys, timeout=60) for _ in range(20)])
h.eq(statuses(rs), [200] * 19 + [201], "20 concurrent acquires with the same keys: one 201, nineteen 200",
     "\n".join(getattr(r, "describe", lambda: repr(r))()[:300] for r in rs
               if getattr(r, "status", 0) not in (200, 201)))
h.eq(sorted(set(r.get("id") for r in rs if hasattr(r, "get"))), [CID], "... all answer the same box")
h.eq(sorted(set(r.get("status") for r in rs if hasattr(r, "get"))), ["running"], "... running in every answer")
h.eq(cli_ids(h.data), [CID], "... and the backend has exactly that one box (agentbox ls --json)")
h.eq([b.get("id") for b in (S1.list() or [])], [CID], "... and the server lists exactly one box")

TID = thread_box_id("conc-thread")
rs = parallel([lambda: S1.post("/v1/exec", {"thread_id": "conc-thread", "command": "echo hi"}, timeout=60)
               for _ in range(20)])
h.eq(sorted((getattr(r, "status", None), r.get("sandbox_id") if hasattr(r, "get") else None,
             r.get("stdout") if hasattr(r, "get") else None) for r in rs), [(200, TID, "hi\n")] * 20,
     "20 concurrent /v1/exec with the same thread_id all run, in one box")
h.eq(cli_ids(h.data), sorted([CID, TID]), "... the backend has one box more")

rs = parallel([lambda i=i: S1.post("/v1/sandboxes", {"id": "many-%d" % i}, timeout=60) for i in range(10)])
h.eq(statuses(rs), [201] * 10, "10 concurrent creates of different ids all answer 201")
h.eq(len([b for b in cli_ids(h.data) if b.startswith("many-")]), 10, "... and make 10 boxes")

S2 = h.start_server(name="second")  # same data dir and database
keys2 = {"app_id": "capp", "user_id": "u2", "chat_id": "c2"}
CID2 = chat_box_id("capp", "u2", "c2")
rs = parallel([lambda s=s: s.post("/v1/sandboxes", keys2, timeout=60) for s in [S1, S2] * 10])
h.eq(statuses(rs), [200] * 19 + [201], "two servers on one database, 20 concurrent acquires: one 201",
     "\n".join(r.describe()[:300] for r in rs if hasattr(r, "describe") and r.status not in (200, 201)))
h.eq(sorted(set(r.get("id") for r in rs if hasattr(r, "get"))), [CID2], "... all the same box")
h.eq(len([b for b in cli_ids(h.data) if b == CID2]), 1, "... which exists once in the backend")
h.eq(len(S2.list({"app_id": "capp"}) or []), 2, "the second server sees the same boxes")
r = S2.exec(CID, "echo via-second")
h.eq((r.status, r.get("stdout")), (200, "via-second\n"), "the second server execs in a box the first one made",
     r.describe())
b1, b2 = S1.box(CID2) or {}, S2.box(CID2) or {}
h.eq(b1.get("created_at"), b2.get("created_at"), "both servers answer the same record")
S2.stop()

# Long execs in some boxes do not block anything else. (Boxes are made at
# once where their order does not matter: a pod takes seconds to start.)
parallel([lambda b=b: S1.post("/v1/sandboxes", {"id": b}, timeout=60)
          for b in ["long-%d" % i for i in range(4)] + ["quick", "doomed"]])
long_res = [None] * 4


def long_exec(i):
    t0 = time.monotonic()
    r = S1.exec("long-%d" % i, "sleep 6; echo done-%d" % i, http_timeout=30)
    long_res[i] = (r, time.monotonic() - t0)


lts = [threading.Thread(target=long_exec, args=(i,), daemon=True) for i in range(4)]
for t in lts:
    t.start()
time.sleep(1.0)
timings = {}
for what, fn in (("GET /health", lambda: S1.get("/health", token=None)),
                 ("GET /v1/sandboxes", lambda: S1.get("/v1/sandboxes")),
                 ("GET a box", lambda: S1.get("/v1/sandboxes/quick")),
                 ("exec in another box", lambda: S1.exec("quick", "echo quick")),
                 ("create a box", lambda: S1.post("/v1/sandboxes", {"id": "made-during"})),
                 ("DELETE a box", lambda: S1.delete("/v1/sandboxes/doomed")),
                 ("GET /metrics", lambda: S1.get("/metrics"))):
    t0 = time.monotonic()
    r = fn()
    # No clock limit (the host may be loaded): what proves "not blocked" is
    # that the answer came while all four 6 s execs were still outstanding.
    timings[what] = (r.status, time.monotonic() - t0, sum(1 for t in lts if t.is_alive()))
for what, (status, el, alive) in timings.items():
    h.ok(status in (200, 201, 202) and alive == 4,
         "while 4 boxes run long execs, %s answers before any of them ends (%s, %.2fs, %d running)"
         % (what, status, el, alive))
h.ok(wait_for(lambda: S1.status_of("doomed") is None, 4), "the async delete finishes while the long execs run")
h.ok(any(t.is_alive() for t in lts), "... (they were still running then)")
h.ok(wait_for(lambda: "doomed" not in (h.cli_boxes() or {"doomed": 1}), 5), "... and the box left the backend")
for t in lts:
    t.join(30)
h.eq([(r.status, r.get("stdout")) if r else None for r, _ in [x or (None, 0) for x in long_res]],
     [(200, "done-%d\n" % i) for i in range(4)], "the long execs finish normally")
h.ok(all(x and x[1] < 6 + 4 * h.slow for x in long_res), "... in parallel, not one after another (%s)"
     % ", ".join("%.1fs" % x[1] for x in long_res if x),
     "duration_ms as the server measured: %s" % [x[0].get("duration_ms") for x in long_res if x])

# Stop and delete of a box in the middle of an exec: answered at once, the exec ends early.
busy_res = {}


def busy_exec(box):
    t0 = time.monotonic()
    r = S1.exec(box, "echo begun; sleep 30", http_timeout=40)
    busy_res[box] = (r, time.monotonic() - t0)


parallel([lambda b=b: S1.post("/v1/sandboxes", {"id": b}, timeout=60) for b in ("stop-busy", "del-busy")])
bts = [threading.Thread(target=busy_exec, args=(b,), daemon=True) for b in ("stop-busy", "del-busy")]
for t in bts:
    t.start()
time.sleep(1.0)
t0 = time.monotonic()
r = S1.post("/v1/sandboxes/stop-busy/stop")
el = time.monotonic() - t0
h.eq((r.status, r.get("status")), (200, "stopped"), "stop of a box running a 30 s exec answers 200, stopped",
     r.describe())
h.ok("stop-busy" not in busy_res or busy_res["stop-busy"][1] < 25,
     "... without waiting for the exec to run its 30 s (%.1fs)" % el)
h.eq(h.cli_status("stop-busy"), "stopped", "... and the backend box is stopped")
t0 = time.monotonic()
r = S1.delete("/v1/sandboxes/del-busy")
el = time.monotonic() - t0
h.eq(r.status, 202, "DELETE of a box running a 30 s exec answers 202", r.describe())
h.ok("del-busy" not in busy_res or busy_res["del-busy"][1] < 25,
     "... without waiting for the exec to run its 30 s (%.2fs)" % el)
h.ok(wait_for(lambda: S1.status_of("del-busy") is None, 10), "... and the box disappears while its exec ran")
h.ok(wait_for(lambda: "del-busy" not in (h.cli_boxes() or {"del-busy": 1}), 5), "... also from the backend")
for t in bts:
    t.join(35)
h.ok(all(busy_res.get(b) and busy_res[b][1] < 20 for b in ("stop-busy", "del-busy")),
     "the interrupted execs returned early", repr({b: (v[0].status, v[0].get("exit_code"), round(v[1], 1))
                                                  for b, v in busy_res.items()}))
r = S1.exec("stop-busy", "echo back")
h.eq(r.get("stdout"), "back\n", "the stopped box resumes on the next exec", r.describe())
S1.stop()

# ==== 2. idle stop and transparent resume ===============================================

D = h.new_data_dir("data-idle")
# A pod's start (the idle box's resume below) takes a second or more on the
# stand-in cluster under load: the busy boxes get more idle time there.
IDLE_S = 4 if h.backend == "kubernetes" else 2
SI = h.start_server(name="idle", data=D, config={"idle_stop": "%ds" % IDLE_S, "reaper_interval": "500ms"})
evs = SI.sse("/v1/events?types=box.stopped,box.started")
parallel([lambda b=b: SI.post("/v1/sandboxes", b, timeout=60)
          for b in ({"id": "idle-1"}, {"id": "never", "idle_stop_s": -1}, {"id": "busy"}, {"id": "filebusy"})])
SI.put(SI.file_path("filebusy", "x.txt"), b"x")
r = SI.exec("idle-1", "echo idle-data > /workspace/f.txt; mkdir -p /usr/local/idle; echo up > /usr/local/idle/u")
h.eq(r.get("exit_code"), 0, "wrote files in the box that will go idle", r.describe())
# Keep two boxes busy (execs, file reads, each from a thread of its own with
# 0.3 s pauses, so a slow answer of one does not starve the other) until the
# idle one has been stopped and at least 3 s (idle_stop + margin) have passed.
keep_busy = threading.Event()


def busy_loop(fn):
    while not keep_busy.is_set():
        fn()
        keep_busy.wait(0.3)


busy_threads = [threading.Thread(target=busy_loop, args=(fn,), daemon=True)
                for fn in (lambda: SI.exec("busy", "true"),
                           lambda: SI.get(SI.file_path("filebusy", "x.txt")))]
for t in busy_threads:
    t.start()
t_idle = time.monotonic()
idle_seen = None
while time.monotonic() - t_idle < 5 * IDLE_S:
    if idle_seen is None and SI.status_of("idle-1") == "stopped":
        idle_seen = time.monotonic() - t_idle
    if idle_seen is not None and time.monotonic() - t_idle >= IDLE_S + 1.0:
        break
    time.sleep(0.3)
busy_status, filebusy_status = SI.status_of("busy"), SI.status_of("filebusy")
h.ok(idle_seen is not None, "the idle box is stopped (idle_stop %ds)" % IDLE_S, SI.status_of("idle-1"))
h.ok(idle_seen is None or idle_seen >= IDLE_S - 0.5,
     "... not before it was idle for %d s (%.1fs)" % (IDLE_S, idle_seen or 0))
h.eq(h.cli_status("idle-1", D), "stopped", "... and the backend shows it stopped (agentbox ls --json)")
h.eq(busy_status, "running", "a box with an exec every 0.3 s stays running")
h.eq(filebusy_status, "running", "a box with a file read every 0.3 s stays running")
h.eq(SI.status_of("never"), "running", "a box with idle_stop_s -1 stays running")
h.eq(h.cli_status("never", D), "running", "... also in the backend")
t0 = time.monotonic()
# (a pod keeps only its claim's files across a stop: /usr/local is the image's)
r = SI.exec("idle-1", "cat /workspace/f.txt" + ("" if h.backend == "kubernetes" else " /usr/local/idle/u"))
h.diag("exec resuming an idle-stopped box took %.3fs" % (time.monotonic() - t0))
h.eq((r.status, r.get("stdout")), (200, "idle-data\n" + ("" if h.backend == "kubernetes" else "up\n")),
     "an exec resumes the idle-stopped box with its files",
     r.describe())
h.eq((SI.status_of("idle-1"), h.cli_status("idle-1", D)), ("running", "running"), "... which runs again")
ev = evs.collect(until=lambda e: e.type == "box.started" and (e.json or {}).get("box_id") == "idle-1", timeout=5)
evs.close()
keep_busy.set()
for t in busy_threads:
    t.join(30)
st = [e for e in ev if e.type == "box.stopped" and (e.json or {}).get("box_id") == "idle-1"]
h.eq(((st[0].json or {}).get("data") or {}).get("reason") if st else None, "idle",
     "event box.stopped with reason idle", repr(ev))
h.ok(not [e for e in ev if e.type == "box.stopped" and (e.json or {}).get("box_id") in ("busy", "never")],
     "no stop event for the active and the never-idle box", repr(ev))
h.ok(wait_for(lambda: SI.status_of("busy") == "stopped", 3 * IDLE_S),
     "the busy box is idle-stopped once activity ends")
SI.stop()

# ==== 3. the warm pool ======================================================================

D = h.new_data_dir("data-pool")
SP = h.start_server(name="pool", data=D, config={"pool_size": 2, "reaper_interval": "500ms"})
h.ok(wait_for(lambda: (SP.health() or {}).get("pool") == {"size": 2, "target": 2}, 15),
     "/health shows the pool filled: size 2, target 2", repr(SP.health()))
pool = sorted(b for b, e in (h.cli_boxes(D) or {}).items() if b.startswith("pool-") and e.get("status") == "running")
h.eq(len(pool), 2, "the backend runs two pool-... boxes", repr(h.cli_boxes(D)))
h.eq(SP.list(), [], "pool boxes are not listed by GET /v1/sandboxes")
m = SP.metrics() or []
h.eq((abserver.metric_sum(m, "agentbox_pool_size"), abserver.metric_sum(m, "agentbox_pool_target")), (2.0, 2.0),
     "/metrics: agentbox_pool_size 2, agentbox_pool_target 2")
t0 = time.monotonic()
r = SP.post("/v1/sandboxes", {"app_id": "papp", "user_id": "u", "chat_id": "c"})
el = time.monotonic() - t0
PID = chat_box_id("papp", "u", "c")
h.eq((r.status, r.get("id"), r.get("status")), (201, PID, "running"), "an acquire of new keys answers 201",
     r.describe())
h.ok(str(r.get("backend_id")).startswith("pool-") and r.get("backend_id") in pool,
     "... served from the pool (backend_id is one of the pool boxes)", r.text)
h.diag("acquire from the pool took %.4fs" % el)
pb = r.get("backend_id")
r = SP.exec(PID, "echo pooled > /workspace/p.txt; cat /workspace/p.txt")
h.eq(r.get("stdout"), "pooled\n", "the pooled box runs commands", r.describe())
h.ok(wait_for(lambda: (SP.health() or {}).get("pool", {}).get("size") == 2, 10), "the pool refills to 2",
     repr(SP.health()))
seen_at_refill = {b: e.get("status") for b, e in (h.cli_boxes(D) or {}).items()}
h.ok(wait_for(lambda: [b for b, e in (h.cli_boxes(D) or {}).items()
                       if b.startswith("pool-") and e.get("status") == "running" and b not in pool], 5),
     "... with a new pool box running in the backend",
     "backend when /health said 2: %r; now: %r" % (seen_at_refill, {b: e.get("status") for b, e in
                                                                   (h.cli_boxes(D) or {}).items()}))
if not all(v == "running" for v in seen_at_refill.values()):
    h.diag("when /health said the pool had 2 boxes the backend had: %r" % seen_at_refill)
cb = h.cli_boxes(D) or {}
h.eq(len([b for b in cb if b.startswith("pool-")]), 3, "... (3 pool-... backend boxes: the claimed one + 2 warm)",
     repr(sorted(cb)))
h.eq([(b.get("id"), b.get("backend_id")) for b in (SP.list() or [])], [(PID, pb)],
     "the list shows the claimed box under its id, with its pool backend_id")
r = SP.post("/v1/sandboxes/%s/stop" % PID)
h.eq((r.status, h.cli_status(pb, D)), (200, "stopped"), "the claimed box stops (its backend box too)")
r = SP.exec(PID, "cat /workspace/p.txt")
h.eq(r.get("stdout"), "pooled\n", "... and resumes with its files", r.describe())
r = SP.post("/v1/sandboxes", {"app_id": "papp", "user_id": "u", "chat_id": "c"})
h.eq((r.status, r.get("backend_id")), (200, pb), "acquiring the same keys again gives the same box", r.describe())
r = SP.delete("/v1/sandboxes/" + PID)
h.eq(r.status, 202, "the claimed box can be deleted", r.describe())
h.ok(wait_for(lambda: pb not in (h.cli_boxes(D) or {pb: 1}), 10), "... and its pool-... backend box goes")
SP.stop()

# ==== 4. max_running: least recently active is stopped ========================================

D = h.new_data_dir("data-lru")
SL = h.start_server(name="lru", data=D, config={"max_running": 2, "reaper_interval": "500ms", "idle_pause": 0})
evs = SL.sse("/v1/events?types=box.stopped")
SL.post("/v1/sandboxes", {"id": "lru-a"})
time.sleep(0.05)
SL.post("/v1/sandboxes", {"id": "lru-b"})
time.sleep(0.05)
SL.exec("lru-a", "echo a > /workspace/a.txt")  # a is now more recent than b
time.sleep(0.05)
r = SL.post("/v1/sandboxes", {"id": "lru-c"})
h.eq(r.status, 201, "a third box is created over max_running 2", r.describe())


def running():
    return sorted(b.get("id") for b in (SL.list({"status": "running"}) or []))


h.ok(wait_for(lambda: running() == ["lru-a", "lru-c"], 6), "the least recently active box (b) is stopped; a and c run",
     repr(running()))
h.eq(h.cli_status("lru-b", D), "stopped", "... the backend shows b stopped")
ev = evs.collect(until=lambda e: (e.json or {}).get("box_id") == "lru-b", timeout=3)
h.ok([e for e in ev if (e.json or {}).get("box_id") == "lru-b" and
      ((e.json or {}).get("data") or {}).get("reason") == "lru"], "event box.stopped with reason lru", repr(ev))
r = SL.exec("lru-b", "echo b-back")
h.eq(r.get("stdout"), "b-back\n", "an exec resumes b", r.describe())
h.ok(wait_for(lambda: running() == ["lru-b", "lru-c"], 6), "... and now a (least recent) is stopped instead",
     repr(running()))
h.eq(SL.exec("lru-a", "cat /workspace/a.txt").get("stdout"), "a\n", "a resumes later with its file")
h.ok(wait_for(lambda: len(running()) <= 2, 6), "running boxes settle at the cap", repr(running()))
evs.close()
SL.stop()

# ==== 5. ttl ====================================================================================

D = h.new_data_dir("data-ttl")
ST = h.start_server(name="ttl", data=D, config={"reaper_interval": "500ms"})
t0 = time.monotonic()  # the TTL counts from the create, so from before it is asked for
r = ST.post("/v1/sandboxes", {"id": "ttl-2", "ttl_s": 2})
h.eq((r.status, r.get("ttl_s")), (201, 2), "a box with ttl_s 2 is made", r.describe())
ST.post("/v1/sandboxes", {"id": "no-ttl"})
ST.exec("ttl-2", "true")
h.ok(wait_for(lambda: ST.status_of("ttl-2") is None, 8), "the ttl_s 2 box is deleted (404)")
el = time.monotonic() - t0
h.ok(el >= 1.9, "... not before its TTL (%.1fs after the create was asked for)" % el)
h.ok(wait_for(lambda: "ttl-2" not in (h.cli_boxes(D) or {"ttl-2": 1}), 5), "... and it left the backend")
h.eq(ST.status_of("no-ttl"), "running", "a box without ttl stays")
ST.stop()

h.done()
