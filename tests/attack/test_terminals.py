#!/usr/bin/env python3
"""Attacks through terminals. Each check passes only when the attack fails:
- TIOCSTI (pushing bytes into a terminal's input) stays blocked on a box's
  terminal, as it is for every process of a box; TIOCLINUX too;
- a terminal id of one box used under another box's URL is not found (404),
  over REST and WebSocket; an API key of one app cannot see, open, attach to
  (either auth form), resize or delete terminals of another app's box;
- the ring buffer is bounded: 10 MB of output with nobody attached leaves
  the box's terminal keeper small, and a later attach replays at most the
  ring (64 KiB), ending with the newest bytes;
- output is passed on as bytes: escape sequences, NUL and invalid UTF-8 reach
  the WebSocket client unchanged, in binary frames, and the server neither
  interprets nor rewrites them; a text frame that is not UTF-8 closes the
  WebSocket (1007) and the terminal lives on;
- a WebSocket from a web page of another origin is refused, token or not
  (WebSockets are not bound by CORS)."""
import os
import re
import secrets
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import wsclient  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
h = abserver.ServerHarness(budget=200)
srv = h.start_server(name="termattack", token=TOKEN, config={"idle_pause": "1h", "idle_stop": "2h"})

# Two apps, a box each, and a key for each app.
keys = {}
for app in ("appA", "appB"):
    r = srv.post("/v1/keys", {"app_id": app})
    h.eq(r.status, 201, "a key for %s" % app, r.describe())
    keys[app] = r.get("key") or "none"
boxes = {}
for app in ("appA", "appB"):
    r = srv.post("/v1/sandboxes", {"app_id": app, "user_id": "u", "chat_id": "c"}, token=keys[app])
    h.ok(r.status in (200, 201), "a box of %s" % app, r.describe())
    boxes[app] = r.get("id") or "none"
A, B = boxes["appA"], boxes["appB"]


def T(box, tid=None, tail=""):
    return "/v1/sandboxes/%s/terminals%s%s" % (box, "/" + tid if tid else "", tail)


r = srv.post(T(A), {"argv": ["bash", "--norc", "-i"]}, token=keys["appA"])
h.eq(r.status, 201, "appA opens a terminal in its box", r.describe())
ta = r.get("id") or "t_none"
r = srv.post(T(B), {"argv": ["bash", "--norc", "-i"]}, token=keys["appB"])
h.eq(r.status, 201, "appB opens a terminal in its box", r.describe())
tb = r.get("id") or "t_none"

# ---- TIOCSTI and TIOCLINUX on a terminal -----------------------------------------------------

PROBE = (b"python3 -c \"import fcntl,termios,errno\n"
         b"for n,req,arg in (('STI',termios.TIOCSTI,b'x'),('LINUX',0x541C,b'\\\\x00')):\n"
         b"  try: fcntl.ioctl(0,req,arg); print('PROBE-'+n+'-ALLOWED')\n"
         b"  except OSError as e: print('PROBE-'+n+'-'+errno.errorcode.get(e.errno,str(e.errno)))\n\"\n")
ws = wsclient.connect(srv, T(A, ta), token=keys["appA"])
h.eq(ws.status, 101, "appA attaches to its terminal", ws.head)
ws.send_binary(b"tty\n")
ws.read_until(lambda o: b"/dev/pts/" in o)
ws.send_binary(PROBE)
out = ws.read_until(lambda o: re.search(rb"PROBE-LINUX-[A-Z]+", o) is not None)
sti = re.search(rb"PROBE-STI-([A-Z]+)", out)
lin = re.search(rb"PROBE-LINUX-([A-Z]+)", out)
h.ok(b"/dev/pts/" in out, "control: stdin of the shell is the terminal", repr(out[-300:]))
h.ok(sti is not None and sti.group(1) != b"ALLOWED", "TIOCSTI on the terminal is refused",
     repr(out[-400:]))
h.ok(lin is not None and lin.group(1) != b"ALLOWED", "TIOCLINUX on the terminal is refused",
     repr(out[-400:]))
ws.close()

# ---- another box's terminal -----------------------------------------------------------------------

for tok, what in ((TOKEN, "the admin"), (keys["appA"], "appA's key")):
    r = srv.get(T(A, tb), token=tok)
    h.eq(r.status, 404, "%s: box B's terminal id under box A's URL: 404" % what, r.describe())
    for method, tail, body in (("DELETE", "", None), ("POST", "/resize", {"cols": 10, "rows": 10})):
        r = srv.request(method, T(A, tb, tail), body, token=tok)
        h.eq(r.status, 404, "%s: %s %s of box B's terminal under box A: 404" % (what, method, tail or "/"),
             r.describe())
    w = wsclient.connect(srv, T(A, tb), token=tok)
    h.eq(w.status, 404, "%s: a WebSocket to box B's terminal under box A: 404" % what, w.head)
    w.drop()

K = keys["appA"]
r = srv.get(T(B), token=K)
h.eq(r.status, 404, "appA's key cannot list appB's box's terminals", r.describe())
r = srv.get(T(B, tb), token=K)
h.eq(r.status, 404, "appA's key cannot read appB's terminal", r.describe())
r = srv.post(T(B), {}, token=K)
h.eq(r.status, 404, "appA's key cannot open a terminal in appB's box", r.describe())
r = srv.post(T(B, tb, "/resize"), {"cols": 10, "rows": 10}, token=K)
h.eq(r.status, 404, "appA's key cannot resize appB's terminal", r.describe())
r = srv.delete(T(B, tb), token=K)
h.eq(r.status, 404, "appA's key cannot delete appB's terminal", r.describe())
w = wsclient.connect(srv, T(B, tb), token=K)
h.eq(w.status, 404, "appA's key (header) cannot attach to appB's terminal", w.head)
w.drop()
w = wsclient.connect(srv, T(B, tb), token=None, protocols=["agentbox.terminal.v1", "bearer." + K])
h.eq(w.status, 404, "appA's key (subprotocol) cannot attach to appB's terminal", w.head)
w.drop()
w = wsclient.connect(srv, T(B, tb), token=None, protocols=["bearer." + TOKEN])
h.eq(w.status, 401, "a bearer subprotocol without agentbox.terminal.v1 is not a token", w.head)
w.drop()
r = srv.get(T(B, tb), token=keys["appB"])
h.eq((r.status, r.get("running")), (200, True), "control: appB's terminal is untouched", r.describe())

# A web page of another origin (WebSockets are not bound by CORS), even with a valid token.
w = wsclient.connect(srv, T(B, tb), token=keys["appB"], headers={"Origin": "http://evil.example"})
h.eq(w.status, 403, "a WebSocket from another origin is refused (403)", w.head)
w.drop()
w = wsclient.connect(srv, T(B, tb), token=keys["appB"],
                     headers={"Origin": "http://127.0.0.1:%d.evil.example" % srv.port})
h.eq(w.status, 403, "... also one whose origin only starts like the server's", w.head)
w.drop()
w = wsclient.connect(srv, T(B, tb), token=keys["appB"], headers={"Origin": "http://127.0.0.1:%d" % srv.port})
h.eq(w.status, 101, "control: the server's own origin (the console) attaches", w.head)
w.close()
for bad in ("..", "t_..%2f..", "t_" + "0" * 200):
    r = srv.get(T(A, bad))
    h.eq(r.status, 404, "a malformed terminal id %r: 404" % bad[:20], r.describe())
r = srv.get(T(A, "t_%00x"))  # a control character in a target: 400 before routing
h.eq(r.status, 400, "a terminal id with an escaped NUL: 400", r.describe())

# ---- the ring buffer is bounded -----------------------------------------------------------------------


def keeper_of(box):
    """(pid, VmRSS kB, VmHWM kB) of the box's terminal keeper, found on the host."""
    init = ((h.cli_boxes() or {}).get(box) or {}).get("init_pid") or 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/status" % d) as f:
                st = f.read()
        except OSError:
            continue
        name = re.search(r"^Name:\s*(\S+)", st, re.M)
        ppid = re.search(r"^PPid:\s*(\d+)", st, re.M)
        if name and name.group(1) == "ab-terms" and ppid and int(ppid.group(1)) == init:
            rss = re.search(r"^VmRSS:\s*(\d+)", st, re.M)
            hwm = re.search(r"^VmHWM:\s*(\d+)", st, re.M)
            return int(d), int(rss.group(1)) if rss else None, int(hwm.group(1)) if hwm else None
    return None, None, None


FLOOD = ("head -c 10000000 /dev/urandom | base64 -w 0; printf 'END-OF-FLOOD'; "
         "touch /tmp/flood.done; sleep 600")
r = srv.post(T(A), {"argv": ["sh", "-c", FLOOD]}, token=K)
h.eq(r.status, 201, "a terminal that writes ~13 MB with nobody attached", r.describe())
tf = r.get("id") or "t_none"
done = abserver.wait_for(lambda: srv.exec(A, "test -e /tmp/flood.done && echo yes").get("stdout") == "yes\n",
                         timeout=120 * h.slow, step=0.5)
h.ok(done, "the flood finished")
pid, rss, hwm = keeper_of(A)
h.ok(pid is not None, "the box's terminal keeper is found on the host", repr((pid, rss, hwm)))
h.ok(hwm is not None and hwm < 16 * 1024, "the keeper never held more than 16 MB (VmHWM %s kB)" % hwm,
     repr((pid, rss, hwm)))
w = wsclient.connect(srv, T(A, tf), token=K)
out = w.read_until(lambda o: o.endswith(b"END-OF-FLOOD"), timeout=15)
time.sleep(0.5)
w.pump(0.5)
out = w.output
h.ok(0 < len(out) <= 65536, "the replay is at most the ring buffer (64 KiB): %d bytes" % len(out))
h.ok(out.endswith(b"END-OF-FLOOD"), "... and holds the newest output", repr(out[-60:]))
w.close()
srv.delete(T(A, tf), token=K)

# ---- bytes stay bytes ---------------------------------------------------------------------------------------

SEQ = (b"\x1b]0;owned-title\x07\x1b[2J\x1b[31mred\x1b[0m\x1b[6n\x1bP+q544e\x1b\\"
       b"\x00\xff\xfe\xc3\x28\xf0\x9f\x98\x80-end")
printf = "".join("\\%03o" % c for c in SEQ)
r = srv.post(T(A), {"argv": ["sh", "-c", "stty raw -echo; printf '%s'; sleep 600" % printf]}, token=K)
h.eq(r.status, 201, "a terminal that prints escape sequences and invalid UTF-8", r.describe())
te = r.get("id") or "t_none"
w = wsclient.connect(srv, T(A, te), token=K)
out = w.read_until(lambda o: o.endswith(b"-end"), timeout=15)
h.eq(out, SEQ, "the client gets exactly the bytes the program wrote", repr(out))
h.eq(w.texts, [], "... in binary frames only (no text frame was made of them)", repr(w.texts))
w.send_frame(1, b"\xff\xfe not utf-8")
h.eq(w.wait_close(10), 1007, "a text frame that is not UTF-8: close 1007", repr(w.close_code))
r = srv.get(T(A, te), token=K)
h.eq((r.status, r.get("running")), (200, True), "the terminal lives on", r.describe())
r = srv.get(T(A), token=K)
h.eq(r.status, 200, "listing stays valid JSON with such a terminal", r.describe())

h.done()
