#!/usr/bin/env python3
"""Terminals over HTTP and WebSocket (docs/api.md "Terminals"), with real
boxes: open a terminal, attach over WebSocket with the Authorization header
and with the subprotocol form, type and see the output; resize (control
message and REST) and check `stty size`; a second client sees the history
from the ring buffer and both see new output; disconnect and reattach; a
signal reaches the foreground job; the exit code arrives as a message and a
close 1000; several terminals per box and the cap; DELETE closes attached
clients with 1001; argv, env and cwd; a terminal survives a restart of the
server; a box's stop ends its terminals (1001) and a stopped box lists none
without being started; bad requests."""
import os
import secrets
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import wsclient  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
h = abserver.ServerHarness(budget=200)
srv = h.start_server(name="term", token=TOKEN,
                     config={"idle_pause": "1h", "idle_stop": "2h", "reaper_interval": "200ms"})

B = "tm-%s" % secrets.token_hex(3)
r = srv.post("/v1/sandboxes", {"id": B, "env": {"BOXVAR": "from-the-box"}})
h.eq(r.status, 201, "create %s" % B, r.describe())
T = "/v1/sandboxes/%s/terminals" % B

# ---- open ---------------------------------------------------------------------------------

r = srv.post(T, {})
h.eq(r.status, 201, "POST .../terminals answers 201", r.describe())
t = r.json or {}
tid = t.get("id") or ""
h.ok(tid.startswith("t_") and len(tid) > 4, "the id is t_<hex>", repr(t))
h.eq((t.get("sandbox_id"), t.get("cols"), t.get("rows"), t.get("running"), t.get("exit_code")),
     (B, 80, 24, True, None), "defaults: 80x24, running, no exit code", repr(t))
h.ok(t.get("argv") in (["bash", "-l"], ["/bin/sh", "-l"]), "the default argv is the login shell",
     repr(t.get("argv")))
h.ok(isinstance(t.get("created_at"), str) and t["created_at"].endswith("Z"), "created_at is RFC 3339",
     repr(t.get("created_at")))
r = srv.get("%s/%s" % (T, tid))
h.eq((r.status, r.get("id"), r.get("running")), (200, tid, True), "GET .../terminals/{tid}", r.describe())
r = srv.get(T)
h.eq([x.get("id") for x in r.get("terminals") or []], [tid], "GET .../terminals lists it", r.describe())

# ---- attach (Authorization header) ----------------------------------------------------------

ws1 = wsclient.connect(srv, "%s/%s" % (T, tid))
h.eq(ws1.status, 101, "WebSocket with Authorization: 101", ws1.head)
h.ok(ws1.accept_ok(), "Sec-WebSocket-Accept is right", ws1.head)
h.ok("sec-websocket-protocol" not in ws1.headers, "no subprotocol answered when none was offered", ws1.head)
ws1.send_binary(b"echo $((40+2))-$BOXVAR\n")
out = ws1.read_until(lambda o: b"42-from-the-box" in o)
h.ok(b"42-from-the-box" in out, "typed input runs; output arrives (the box env is there)", repr(out[-300:]))

# ---- attach (subprotocol auth) --------------------------------------------------------------

bad = wsclient.connect(srv, "%s/%s" % (T, tid), token=None,
                       protocols=["agentbox.terminal.v1", "bearer.wrong-token"])
h.eq(bad.status, 401, "a wrong token in the subprotocol: 401", bad.head)
bad.drop()
bad = wsclient.connect(srv, "%s/%s" % (T, tid), token=None)
h.eq(bad.status, 401, "no token at all: 401", bad.head)
bad.drop()
ws2 = wsclient.connect(srv, "%s/%s" % (T, tid), token=None,
                       protocols=["agentbox.terminal.v1", "bearer." + TOKEN])
h.eq(ws2.status, 101, "WebSocket with the token as a subprotocol: 101", ws2.head)
h.eq(ws2.headers.get("sec-websocket-protocol"), "agentbox.terminal.v1",
     "the server answers the terminal subprotocol (never the bearer one)", ws2.head)
out2 = ws2.read_until(lambda o: b"42-from-the-box" in o)
h.ok(b"42-from-the-box" in out2, "a second client first gets the history (ring buffer)", repr(out2[-300:]))
ws2.send_binary(b"echo second-$((6*7))\n")
h.ok(b"second-42" in ws2.read_until(lambda o: b"second-42" in o), "input from the second client runs")
h.ok(b"second-42" in ws1.read_until(lambda o: b"second-42" in o), "... and the first client sees its output too")

# ---- resize -------------------------------------------------------------------------------

ws1.send_json({"type": "resize", "cols": 100, "rows": 40})
time.sleep(0.2)
ws1.send_binary(b"stty size\n")
h.ok(b"40 100" in ws1.read_until(lambda o: b"40 100" in o), "resize message: stty size says 40 100",
     repr(ws1.output[-200:]))
r = srv.post("%s/%s/resize" % (T, tid), {"cols": 120, "rows": 30})
h.eq(r.status, 204, "POST .../resize answers 204", r.describe())
ws1.send_binary(b"stty size\n")
h.ok(b"30 120" in ws1.read_until(lambda o: b"30 120" in o), "REST resize: stty size says 30 120")
r = srv.get("%s/%s" % (T, tid))
h.eq((r.get("cols"), r.get("rows")), (120, 30), "GET shows the new size", r.describe())

# ---- signal ---------------------------------------------------------------------------------

ws1.send_binary(b"sleep 307; echo slept-$((1+1))\n")
abserver.wait_for(lambda: srv.exec(B, "ps -eo args | grep -c '^sleep 307$' || true").get("stdout") == "1\n",
                  timeout=30, step=0.2)
ws1.send_json({"type": "signal", "signal": "INT"})
ws1.send_binary(b"echo after-$((2+3))\n")
out = ws1.read_until(lambda o: b"after-5" in o, timeout=15)
h.ok(b"after-5" in out and b"slept-2" not in out, "a signal message interrupts the foreground job",
     repr(out[-300:]))

# ---- disconnect and reattach --------------------------------------------------------------

ws2.drop()
ws1.close()
time.sleep(0.3)
r = srv.get("%s/%s" % (T, tid))
h.eq((r.status, r.get("running")), (200, True), "the terminal outlives its clients", r.describe())
ws3 = wsclient.connect(srv, "%s/%s" % (T, tid))
out = ws3.read_until(lambda o: b"after-5" in o)
h.ok(b"after-5" in out, "reattach: the recent history comes first", repr(out[-200:]))

# ---- exit -----------------------------------------------------------------------------------

ws3.send_binary(b"exit 7\n")
code = ws3.wait_close(15)
h.eq(code, 1000, "the process exits: close 1000", repr((ws3.close_code, ws3.texts)))
h.ok({"type": "exit", "exit_code": 7} in ws3.texts, "an exit message with the exit code comes first",
     repr(ws3.texts))
r = srv.get("%s/%s" % (T, tid))
h.eq((r.get("running"), r.get("exit_code")), (False, 7), "GET: not running, exit_code 7", r.describe())
ws4 = wsclient.connect(srv, "%s/%s" % (T, tid))
h.eq(ws4.status, 101, "an exited terminal can still be attached", ws4.head)
h.eq(ws4.wait_close(10), 1000, "... it replays, sends the exit and closes", repr(ws4.texts))
h.ok({"type": "exit", "exit_code": 7} in ws4.texts and b"after-5" in ws4.output,
     "... with the history and the exit code", repr((ws4.texts, ws4.output[-100:])))

# ---- argv, env, cwd ----------------------------------------------------------------------------

r = srv.post(T, {"argv": ["sh", "-c", "echo v=$FOO; pwd; tty; echo $TERM; sleep 600"],
                 "env": {"FOO": "bar"}, "cwd": "/tmp", "cols": 50, "rows": 10})
h.eq(r.status, 201, "open with argv, env, cwd, size", r.describe())
t2 = r.get("id")
h.eq((r.get("argv"), r.get("cols"), r.get("rows")), (["sh", "-c", "echo v=$FOO; pwd; tty; echo $TERM; sleep 600"], 50, 10),
     "argv and size as given", r.describe())
ws = wsclient.connect(srv, "%s/%s" % (T, t2))
out = ws.read_until(lambda o: b"xterm" in o)
h.ok(b"v=bar" in out and b"/tmp" in out and b"/dev/pts/" in out and b"xterm-256color" in out,
     "the program sees env, cwd, a pty and TERM=xterm-256color", repr(out))

# ---- several terminals, the cap, DELETE ------------------------------------------------------

ids = [t2]
for i in range(20):
    r = srv.post(T, {"argv": ["sleep", "600"]})
    if r.status != 201:
        break
    ids.append(r.get("id"))
h.eq(len(ids), 16, "16 terminals run at once in a box", repr(len(ids)))
h.eq((r.status, r.err_code), (409, "conflict"), "the 17th is refused (409)", r.describe())
lst = srv.get(T).get("terminals") or []
h.ok(set(ids) <= {x.get("id") for x in lst}, "the list shows all of them", repr(len(lst)))

r = srv.delete("%s/%s" % (T, t2))
h.eq(r.status, 204, "DELETE a terminal: 204", r.describe())
h.eq(ws.wait_close(10), 1001, "the attached client gets close 1001", repr((ws.close_code, ws.texts)))
h.eq(srv.get("%s/%s" % (T, t2)).status, 404, "GET a deleted terminal: 404")
h.eq(srv.delete("%s/%s" % (T, t2)).status, 404, "DELETE it again: 404")
for x in ids[1:]:
    srv.delete("%s/%s" % (T, x))
# SIGKILL is sent before DELETE answers; a killed process may still show for
# a moment while it exits
for _ in range(50):
    r = srv.exec(B, "ps -eo args | grep -c '^sleep 600' || true")
    if (r.get("stdout") or "").strip() == "0":
        break
    time.sleep(0.1)
h.eq((r.get("stdout") or "").strip(), "0", "DELETE kills the terminals' processes", r.describe())

# ---- bad requests -----------------------------------------------------------------------------

for body, status, what in (({"cols": 0}, 400, "cols 0"), ({"rows": 5000}, 400, "rows 5000"),
                           ({"argv": []}, 400, "an empty argv"), ({"argv": [""]}, 400, "an empty program"),
                           ({"argv": "bash"}, 400, "argv not a list"), ({"shell": "x"}, 400, "an unknown field"),
                           ({"cwd": "/nonexistent"}, 404, "a missing cwd"),
                           ({"env": {"A": 1}}, 400, "a non-string env value")):
    r = srv.post(T, body)
    h.eq(r.status, status, "open with %s: %d" % (what, status), r.describe())
h.eq(srv.get("%s/t_0123456789abcdef" % T).status, 404, "an unknown terminal id: 404")
h.eq(srv.post("%s/t_0123456789abcdef/resize" % T, {"cols": 10, "rows": 10}).status, 404,
     "resize of an unknown terminal: 404")
h.eq(srv.post("%s/%s/resize" % (T, ids[1] if len(ids) > 1 else "x"), {"cols": 10}).status, 400,
     "resize without rows: 400")
st, head, body, err = srv.raw(("GET %s/%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nUpgrade: websocket\r\n"
                               "Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n" % (T, tid, TOKEN)).encode())
h.eq(st, 400, "an upgrade without Sec-WebSocket-Key: 400", head)
st, head, body, err = srv.raw(("GET %s/%s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nUpgrade: websocket\r\n"
                               "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                               "Sec-WebSocket-Version: 8\r\n\r\n" % (T, tid, TOKEN)).encode())
h.eq(st, 426, "an unsupported WebSocket version: 426", head)
ws = wsclient.connect(srv, "%s/t_0123456789abcdef" % T)
h.eq(ws.status, 404, "a WebSocket to an unknown terminal: 404 before any upgrade", ws.head)
ws.drop()

# ---- protocol errors on the WebSocket -----------------------------------------------------------

r = srv.post(T, {"argv": ["cat"]})
tc = r.get("id")
ws = wsclient.connect(srv, "%s/%s" % (T, tc))
ws.send_frame(2, b"unmasked\n", mask=False)
h.eq(ws.wait_close(10), 1002, "an unmasked client frame: close 1002", repr(ws.close_code))
ws = wsclient.connect(srv, "%s/%s" % (T, tc))
ws.send_frame(2, b"frag-", fin=False)
ws.send_frame(9, b"ping!")
ws.send_frame(0, b"ment\n", fin=True)
out = ws.read_until(lambda o: b"frag-ment" in o)
h.ok(b"frag-ment" in out, "a fragmented message with a ping between its fragments arrives whole",
     repr(out))
try:
    ws.send_frame(2, b"x" * (2 << 20))
except OSError:
    pass  # the server may close before it has read it all
h.eq(ws.wait_close(10), 1009, "a message over 1 MiB: close 1009", repr(ws.close_code))
r = srv.get("%s/%s" % (T, tc))
h.eq(r.get("running"), True, "the terminal lives on after its clients broke the protocol", r.describe())

# ---- the server restarts; the box's init keeps the terminal -----------------------------------------

ws = wsclient.connect(srv, "%s/%s" % (T, tc))
ws.send_binary(b"before-restart\n")
ws.read_until(lambda o: o.count(b"before-restart") >= 2)
srv.restart()  # with the client attached: the server must still stop cleanly (exit 0)
h.eq(ws.wait_close(5), 1001, "a server that stops sends attached clients close 1001", repr(ws.close_code))
ws.drop()
r = srv.get("%s/%s" % (T, tc))
h.eq((r.status, r.get("running")), (200, True), "after a server restart the terminal still runs", r.describe())
ws = wsclient.connect(srv, "%s/%s" % (T, tc))
out = ws.read_until(lambda o: b"before-restart" in o)
h.ok(b"before-restart" in out, "... and its history is there", repr(out))
ws.send_binary(b"after-restart\n")
h.ok(b"after-restart" in ws.read_until(lambda o: o.count(b"after-restart") >= 2), "... and it takes input")

# ---- the box stops: its terminals end ---------------------------------------------------------------

r = srv.post("/v1/sandboxes/%s/stop" % B)
h.eq(r.status, 200, "stop the box", r.describe())
h.eq(ws.wait_close(15), 1001, "an attached client gets close 1001 when the box stops", repr(ws.close_code))
r = srv.get(T)
h.eq((r.status, r.get("terminals")), (200, []), "a stopped box lists no terminals", r.describe())
h.eq(srv.status_of(B), "stopped", "... and listing did not start it")
h.eq(srv.get("%s/%s" % (T, tc)).status, 404, "a terminal of a stopped box: 404")
r = srv.post(T, {"argv": ["sh", "-c", "echo started; sleep 600"]})
h.eq(r.status, 201, "opening a terminal starts the box again, like an exec", r.describe())
h.eq(srv.status_of(B), "running", "... it runs")

# ---- an attached terminal keeps its box from idling out ------------------------------------------

I = "ti-%s" % secrets.token_hex(3)
r = srv.post("/v1/sandboxes", {"id": I, "idle_stop_s": 2, "idle_pause_s": -1})
h.eq(r.status, 201, "a box that idles out after 2 s", r.describe())
TI = "/v1/sandboxes/%s/terminals" % I
r = srv.post(TI, {"argv": ["cat"]})
h.eq(r.status, 201, "a terminal in it", r.describe())
ti = r.get("id")
ws = wsclient.connect(srv, "%s/%s" % (TI, ti))
h.eq(ws.status, 101, "attached", ws.head)
for _ in range(8):  # 4 s: twice its idle time, with nothing typed
    ws.pump(0.5)
h.eq(srv.status_of(I), "running", "while a client is attached the box does not idle out")
h.eq(abserver.metric_sum(srv.metrics() or [], "agentbox_execs_in_flight"), 0,
     "an attached terminal is not counted as an exec in flight")
ws.close()
h.eq(abserver.wait_for(lambda: srv.status_of(I) == "stopped", timeout=30), True,
     "once the client is gone, the box idles out (stopped)")
r = srv.get(TI)
h.eq(r.get("terminals"), [], "... and its terminal went with it", r.describe())

h.done()
