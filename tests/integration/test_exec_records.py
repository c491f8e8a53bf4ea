#!/usr/bin/env python3
"""What an HTTP exec records is there for whoever asks next, however the
server spreads the work: the exec's audit row and its box's activity are
written by the worker that ran the exec while the answer goes out, and the
connection's next request is read only once they are (so a client that asks
right after its exec, on the same keep-alive connection, always sees them);
an SSE reader of /v1/events that waits on the bus (parked, no event for it
yet) gets the exec's event at once, not at its next keepalive (15 s), now
that the bus wakes the connection table only while such a reader waits."""
import http.client
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

h = abserver.ServerHarness(budget=120)
srv = h.start_server(name="records", config={"limits": {"disk": "64M", "memory": "128M", "timeout": "60s"}})
B = "records-%d" % os.getpid()
r = srv.post("/v1/sandboxes", {"id": B})
h.eq(r.status, 201, "box created", r.describe())

host, port = srv.url.split("//", 1)[1].rsplit(":", 1)
conn = http.client.HTTPConnection(host, int(port), timeout=30)


def call(method, path, body=None):
    """One request on the kept connection: (status, parsed JSON or None)."""
    data, hdrs = srv._encode(body, None, abserver._DEFAULT)
    conn.request(method, path, body=data, headers=hdrs)
    resp = conn.getresponse()
    raw = resp.read()
    try:
        return resp.status, json.loads(raw)
    except ValueError:
        return resp.status, None


# ---- the audit row and the activity, right after the answer, same connection --
ROUNDS = 40
missing, stale, bad = [], [], []
last = 0
for i in range(ROUNDS):
    cmd = "echo rec-%d" % i
    st, j = call("POST", "/v1/sandboxes/%s/exec" % B, {"command": cmd})
    if st != 200 or not j or j.get("exit_code") != 0:
        bad.append((i, st, j))
        continue
    st, j = call("GET", "/v1/sandboxes/%s/execs?limit=1" % B)
    rows = (j or {}).get("execs") or []
    if st != 200 or not rows or rows[0].get("command") != cmd:
        missing.append((i, st, rows[:1]))
    st, j = call("GET", "/v1/sandboxes/%s" % B)
    la = (j or {}).get("last_active_at") or 0
    if st != 200 or la < last:
        stale.append((i, la, last))
    last = la
h.eq(bad, [], "%d execs on one keep-alive connection answered" % ROUNDS)
h.eq(missing, [], "each exec's audit row is listed by the request right after it, on the same connection")
h.eq(stale, [], "... and the box's last_active_at never goes back")
st, j = call("GET", "/v1/sandboxes/%s" % B)
h.ok(st == 200 and (j or {}).get("last_active_at", 0) >= last > 0, "last_active_at is the latest exec's")
conn.close()

# ---- a parked SSE reader of the bus gets the exec's event at once ------------------
events = srv.sse("/v1/events?types=exec")
h.eq(events.status, 200, "the event stream opens", events.describe())
events.drain(quiet=0.5, timeout=5)
late = []
for i in range(3):
    time.sleep(1.0)  # the reader has seen everything: it waits on the bus (parked)
    t0 = time.time()
    r = srv.post("/v1/sandboxes/%s/exec" % B, {"argv": ["true"]})
    ev = events.next(timeout=3.0)
    took = time.time() - t0
    if r.status != 200 or ev is None or ev.type != "exec" or took > 3.0:
        late.append((i, r.status, getattr(ev, "type", None), round(took, 2)))
h.eq(late, [], "an exec's event reaches a parked SSE reader within 3 s (keepalive is 15 s), 3 times")
events.close()

h.done()
