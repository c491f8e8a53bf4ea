#!/usr/bin/env python3
"""The CLI's terminals, driven through a real pseudo-terminal as a person's
terminal would: `agentbox exec -it ID -- bash` runs an interactive shell in
the box with the local terminal in raw mode (^C reaches the box's
foreground job, not the CLI), the window size at start and after a resize
(SIGWINCH), the exit code passed through, the local terminal restored;
`exec -t` without -i; `--timeout` with -t; `agentbox attach ID TID` to a
terminal made through the API, with its history, and Ctrl-P Ctrl-Q to
detach while the terminal goes on."""
import fcntl
import os
import secrets
import select
import sqlite3
import struct
import subprocess
import sys
import termios
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402
import abtest  # noqa: E402

h = abserver.ServerHarness(budget=150)
srv = h.start_server(name="cliterm")


class Pty:
    """A process on a new pseudo-terminal whose master end we hold."""

    def __init__(self, args, cols=111, rows=33):
        self.master, slave = os.openpty()
        self.set_size(cols, rows, fd=slave)
        env = {k: v for k, v in os.environ.items() if k not in abtest._SCRUBBED_ENV}
        env["TERM"] = "xterm"

        def ctty():
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.p = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                                  preexec_fn=ctty, env=env, close_fds=True)
        self.slave = slave  # kept open to read its termios
        self.out = b""

    def set_size(self, cols, rows, fd=None):
        fcntl.ioctl(self.master if fd is None else fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def send(self, b):
        os.write(self.master, b)

    def read_until(self, needle, timeout=15):
        end = time.monotonic() + timeout
        while needle not in self.out and time.monotonic() < end:
            r, _, _ = select.select([self.master], [], [], 0.2)
            if r:
                try:
                    d = os.read(self.master, 65536)
                except OSError:
                    break
                if not d:
                    break
                self.out += d
        return needle in self.out

    def raw(self):
        """True when the local terminal is in raw mode (no ICANON, no ISIG, no ECHO)."""
        lflag = termios.tcgetattr(self.slave)[3]
        return not (lflag & (termios.ICANON | termios.ISIG | termios.ECHO))

    def wait(self, timeout=20):
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = None
        self.read_until(b"\x00never", 0.3)
        return rc

    def close(self):
        for fd in (self.master, self.slave):
            try:
                os.close(fd)
            except OSError:
                pass


B = "ct-%s" % secrets.token_hex(3)
r = srv.post("/v1/sandboxes", {"id": B})
h.eq(r.status, 201, "create %s" % B, r.describe())
CLI = [h.bin, "--data", h.data]

# ---- exec -it: an interactive shell ---------------------------------------------------------

t = Pty(CLI + ["exec", "-it", B, "--", "bash"], cols=111, rows=33)
h.ok(t.read_until(b"# "), "exec -it: the box's shell prompts", repr(t.out[-300:]))
t.send(b"echo ready-$((6*7))\r")
h.ok(t.read_until(b"ready-42"), "exec -it: typed input runs in the box", repr(t.out[-300:]))
h.ok(t.raw(), "the local terminal is in raw mode while attached")
t.send(b"stty size\r")
h.ok(t.read_until(b"33 111"), "the box's terminal has the local window size (33 111)", repr(t.out[-200:]))
t.set_size(90, 40)  # the kernel sends SIGWINCH to the CLI (the foreground job)
for _ in range(10):  # (the CLI handles the signal when it is scheduled)
    t.send(b"stty size\r")
    if t.read_until(b"40 90", 2):
        break
h.ok(b"40 90" in t.out, "after a resize (SIGWINCH) the box's terminal follows (40 90)", repr(t.out[-200:]))
t.send(b"sleep 107; echo not-interrupted\r")
abserver.wait_for(lambda: srv.exec(B, "ps -eo args | grep -c '^sleep 107$' || true").get("stdout") == "1\n",
                  timeout=30, step=0.2)
t.send(b"\x03")  # ^C: in raw mode a byte for the box, not a SIGINT for the CLI
t.send(b"echo after-$((2+3))\r")
h.ok(t.read_until(b"after-5"), "^C interrupts the box's foreground job and the shell goes on",
     repr(t.out[-300:]))
h.ok(t.p.poll() is None, "... and the CLI is still running")
t.send(b"exit 5\r")
rc = t.wait()
h.eq(rc, 5, "the shell's exit code is the CLI's exit code", repr(t.out[-300:]))
h.ok(not t.raw(), "the local terminal is restored after the exit")
t.close()
r = srv.get("/v1/sandboxes/%s/terminals" % B)
h.eq(r.get("terminals"), [], "exec -t's terminal is closed when the command ends", r.describe())

# ---- exec -t without -i, and --timeout ---------------------------------------------------------

r = h.run("exec", "-t", B, "--", "sh", "-c", "tty; exit 3", timeout=60)
h.eq(r.rc, 3, "exec -t (no -i): exit code passed through", r.describe())
h.ok("/dev/pts/" in r.out, "exec -t: the command runs on a pty", r.describe())
c = sqlite3.connect("file:%s?mode=ro" % os.path.join(h.data, "agentbox.db"), uri=True, timeout=5)
rows = c.execute("SELECT command, exit_code FROM exec_audit WHERE box_id = ? ORDER BY started_at", (B,)).fetchall()
c.close()
h.ok(("bash -lc bash", 5) in rows and ("sh -c 'tty; exit 3'", 3) in rows,
     "exec -t sessions are in the exec audit with their exit codes", repr(rows))
r = h.run("exec", "-t", "--timeout", "1s", B, "--", "sleep 100", timeout=60)
h.eq(r.rc, 124, "exec -t --timeout 1s: 124", r.describe())
X = "cx-%s" % secrets.token_hex(3)
r = h.run("create", "--id", X, "--timeout", "2s", "--disk", "64M", timeout=120)
h.eq(r.rc, 0, "a box whose commands time out after 2 s", r.describe())
r = h.run("exec", X, "--", "sleep 3; echo survived", timeout=60)
h.eq(r.rc, 124, "control: without -t the box's timeout applies", r.describe())
r = h.run("exec", "-t", X, "--", "sleep 3; echo survived", timeout=60)
h.eq(r.rc, 0, "with -t it does not (a session, not a command)", r.describe())
h.ok("survived" in r.out, "... the program ran to its end", r.describe())
r = h.run("exec", "--timeout", "5s", B, "--", "test -t 1 && echo tty || echo notty", timeout=60)
h.eq((r.rc, r.out), (0, "notty\n"), "exec without -t still has no terminal", r.describe())
r = h.run("exec", "--help", timeout=30)
h.ok("-t, --tty" in r.out and "--timeout DURATION" in r.out and "-t, --timeout" not in r.out,
     "exec --help: -t is --tty, the timeout is --timeout only", r.describe())

# ---- attach to a terminal made through the API ----------------------------------------------------

r = srv.post("/v1/sandboxes/%s/terminals" % B, {"argv": ["bash", "--norc", "-i"]})
h.eq(r.status, 201, "a terminal opened through the API", r.describe())
tid = r.get("id")
ws_out = b""
a = Pty(CLI + ["attach", B, tid])
h.ok(a.read_until(b"# "), "attach: the terminal's prompt shows", repr(a.out[-300:]))
a.send(b"echo attached-$((1+1))\r")
h.ok(a.read_until(b"attached-2"), "attach: input runs, output shows", repr(a.out[-300:]))
a.send(b"\x10\x11")  # Ctrl-P Ctrl-Q
rc = a.wait()
h.eq(rc, 0, "Ctrl-P Ctrl-Q detaches with exit 0", repr(a.out[-300:]))
h.ok(b"detached" in a.out, "... and says so", repr(a.out[-200:]))
a.close()
r = srv.get("/v1/sandboxes/%s/terminals/%s" % (B, tid))
h.eq(r.get("running"), True, "the terminal goes on after a detach", r.describe())
a = Pty(CLI + ["attach", B, tid])
h.ok(a.read_until(b"attached-2"), "attach again: the history comes first", repr(a.out[-300:]))
a.send(b"exit 9\r")
h.eq(a.wait(), 9, "attach exits with the terminal's exit code", repr(a.out[-300:]))
a.close()
r = h.run("attach", B, "t_0123456789abcdef", timeout=30)
h.eq(r.rc, 125, "attach to an unknown terminal: 125", r.describe())
h.ok("no terminal" in r.err or "no such terminal" in r.err, "... saying so", r.describe())

h.done()
