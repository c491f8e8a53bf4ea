#!/usr/bin/env python3
"""Resource samples, alerts and the alert webhook of `agentbox serve`: with
sample_interval 500ms a running box gets `resource` events whose numbers come
from its cgroup and disk; a box that fills most of its memory or disk limit
raises one `alert` event per crossing (not one per sample), which is also
POSTed as JSON to a webhook server this test runs on loopback; an idle box
raises none. The exec audit of the store shows in `exec` events."""
import http.server
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
from abserver import wait_for  # noqa: E402

h = abserver.ServerHarness(budget=110)

# ---- a webhook receiver on loopback ---------------------------------------------------------
posts = []
posts_lock = threading.Lock()


class Hook(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        with posts_lock:
            posts.append((self.path, self.headers.get("Content-Type"), body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *a):
        pass


hook = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
threading.Thread(target=hook.serve_forever, daemon=True).start()
hook_url = "http://127.0.0.1:%d/alerts" % hook.server_address[1]

S = h.start_server(config={
    "limits": {"disk": "64M", "memory": "64M", "timeout": "60s"},
    "sample_interval": "500ms",
    "alert_memory_pct": 60,
    "alert_disk_pct": 50,
    "webhook_url": hook_url,
})

events = S.sse("/v1/events?types=resource,alert,exec")
seen = []  # every event so far, as (type, parsed data)


def pull(pred, timeout):
    """Collects events until pred(seen) is true or timeout; returns what came in this call."""
    new = []
    end = time.monotonic() + timeout
    while time.monotonic() < end and not pred(seen):
        ev = events.next(min(0.5, max(0.0, end - time.monotonic())))
        if ev is None:
            if events.ended:
                break
            continue
        try:
            d = json.loads(ev.data)
        except ValueError:
            d = {"unparsed": ev.data}
        seen.append((ev.type, d))
        new.append((ev.type, d))
    return new


def alerts_of(evs, metric, box=None):
    return [d for t, d in evs if t == "alert" and (d.get("data") or {}).get("metric") == metric
            and (box is None or d.get("box_id") == box)]
h.eq(events.status, 200, "GET /v1/events answers 200", events.describe())

r = S.post("/v1/sandboxes", {"id": "calm"})
h.eq(r.status, 201, "a calm box", r.describe())
r = S.post("/v1/sandboxes", {"id": "hungry", "metadata": {"who": "test"}})
h.eq(r.status, 201, "a hungry box", r.describe())

# ---- resource samples ---------------------------------------------------------------------
pull(lambda evs: {d.get("box_id") for t, d in evs if t == "resource"} >= {"calm", "hungry"}, 15)
res = [d for t, d in seen if t == "resource"]
h.ok(any(d.get("box_id") == "calm" for d in res), "resource events come for a running box")
calm = [d.get("data") or {} for d in res if d.get("box_id") == "calm"]
if calm:
    d = calm[-1]
    h.eq(d.get("memory_limit"), 64 * 2**20, "memory_limit is the box's limit (64 MiB)", json.dumps(d))
    h.ok(0 < (d.get("memory_bytes") or 0) < 64 * 2**20, "memory_bytes is real and under the limit", json.dumps(d))
    if h.native:  # (a Docker box has no disk of its own to measure here)
        h.ok(0 < (d.get("disk_limit_bytes") or 0) <= 64 * 2**20, "disk_limit_bytes comes from the box's disk",
             json.dumps(d))
    h.ok((d.get("pids") or 0) >= 1, "pids counts the box's init", json.dumps(d))
    for k in ("cpu_pct", "memory_pct", "disk_pct", "disk_used_bytes"):
        h.ok(isinstance(d.get(k), (int, float)), "resource data has %s" % k, json.dumps(d))

# ---- memory alert -------------------------------------------------------------------------
# Hold ~48 MiB of the 64 MiB limit (75% > 60%) for a few samples, in the background.
r = S.exec("hungry", "nohup python3 -c 'import time; b = bytearray(48 << 20); "
           "[b.__setitem__(i, 1) for i in range(0, len(b), 4096)]; time.sleep(4)' >/dev/null 2>&1 &")
h.eq(r.status, 200, "start a memory hog in the background", r.describe())
pull(lambda evs: alerts_of(evs, "memory"), 15)
mem = alerts_of(seen, "memory")
h.eq(len(mem), 1, "one memory alert event for the crossing", "\n".join(json.dumps(d) for d in mem))
if mem:
    d = mem[0]
    h.eq(d.get("box_id"), "hungry", "... for the hungry box", json.dumps(d))
    h.ok((d.get("data") or {}).get("value_pct", 0) >= 60, "... with the measured value over the threshold",
         json.dumps(d))
    h.eq((d.get("data") or {}).get("threshold_pct"), 60, "... and the threshold", json.dumps(d))
# A few more samples while it stays high: no second alert.
more = pull(lambda evs: False, 2.0)
h.eq(len(alerts_of(more, "memory")), 0, "no repeated memory alert while the box stays over the threshold")

ok = wait_for(lambda: any(json.loads(b).get("data", {}).get("metric") == "memory" for _, _, b in list(posts)),
              timeout=10)
h.ok(ok, "the memory alert is POSTed to the webhook")
with posts_lock:
    mine = [(p, ct, json.loads(b)) for p, ct, b in posts]
if mine:
    p, ct, body = [m for m in mine if m[2].get("data", {}).get("metric") == "memory"][0] if ok else mine[0]
    h.eq(p, "/alerts", "... to the configured path")
    h.ok((ct or "").startswith("application/json"), "... as JSON", ct)
    h.eq((body.get("type"), body.get("box_id")), ("alert", "hungry"), "... naming the box", json.dumps(body))

# ---- disk alert ---------------------------------------------------------------------------
if h.native:  # (disk alerts need a disk limit: a Docker box has none here)
    r = S.exec("hungry", "head -c 40M /dev/zero > /workspace/big && sync")
    h.eq(r.status, 200, "fill most of the 64 MiB disk", r.describe())
    pull(lambda evs: alerts_of(evs, "disk"), 15)
    disk = alerts_of(seen, "disk")
    h.eq([d.get("box_id") for d in disk], ["hungry"], "one disk alert for the hungry box")
    h.ok(wait_for(lambda: any(json.loads(b).get("data", {}).get("metric") == "disk" for _, _, b in list(posts)),
                  timeout=10), "the disk alert is POSTed to the webhook")

h.eq([d for t, d in seen if t == "alert" and d.get("box_id") == "calm"], [], "the calm box raised no alert")

# ---- exec events and the audit ------------------------------------------------------------
r = S.exec("calm", "echo audited; exit 3")
pull(lambda evs: any(t == "exec" and (d.get("data") or {}).get("exit_code") == 3 for t, d in evs), 10)
ex = [d.get("data") or {} for t, d in seen if t == "exec" and d.get("box_id") == "calm"]
h.ok(any(d.get("command") == "echo audited; exit 3" and d.get("exit_code") == 3 and d.get("stdout_bytes") == 8
         for d in ex), "an exec event carries command, exit code and output bytes", json.dumps(ex))

# metrics saw the operations
m = S.metrics() or {}
h.ok((abserver.metric_sum(m, "agentbox_execs_total") or 0) >= (3 if h.native else 2),
     "agentbox_execs_total counts the execs")
h.ok((abserver.metric_sum(m, "agentbox_sse_subscribers") or 0) >= 1, "agentbox_sse_subscribers counts the stream")

events.close()
hook.shutdown()
h.done()
