#!/usr/bin/env python3
"""An attack on the host's disk through the upload spool (DATA/tmp; docs/security.md
"Archive uploads and the host's disk"). Every upload is spooled there before its
handler runs, up to max_upload (1 GiB by default) each; with no global cap, a few
clients holding uploads open could fill the host's disk. The server's default
cap (tmp_max, 4 GiB) must hold, with no configuration:
- while four uploads that declare 1 GiB each are held open, a fifth is answered
  503 at once (before its body is read), and so are a chunked one and one
  through the OpenSandbox front's file upload;
- once they end, their share of the spool is released and uploads work again."""
import os
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

GIB = 1 << 30
h = abserver.ServerHarness(budget=120)
srv = h.start_server(name="spool", config={"idle_pause": "1h", "idle_stop": "2h"})
BOX = "spool"
r = srv.post("/v1/sandboxes", {"id": BOX})
h.eq(r.status, 201, "a box is made", r.describe())
PATH = srv.file_path(BOX, "held.bin")
AUTH = "Authorization: Bearer %s\r\n" % srv.token if srv.token else ""


def head(length=None, chunked=False):
    return ("PUT %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%s%s\r\n" % (
        PATH, AUTH, "Transfer-Encoding: chunked\r\n" if chunked else "Content-Length: %d\r\n" % length)).encode()


def held_upload():
    """A connection that starts a 1 GiB upload and sends only its first KiB."""
    s = socket.create_connection((srv.host, srv.port), timeout=10)
    s.sendall(head(GIB) + bytes(1024))
    return s


def answer_of(s, wait=5.0):
    """The status of the answer on s within wait seconds, or None."""
    s.settimeout(wait)
    data = b""
    try:
        while b"\r\n" not in data:
            got = s.recv(4096)
            if not got:
                break
            data += got
    except OSError:
        pass
    line = data.split(b"\r\n", 1)[0].split()
    return int(line[1]) if len(line) > 1 and line[1].isdigit() else None


held = [held_upload() for _ in range(4)]
time.sleep(0.5)  # the server has taken their heads
for s in held:
    s.setblocking(False)
    try:
        early = s.recv(4096)
    except BlockingIOError:
        early = b""
    h.eq(early, b"", "a held 1 GiB upload is taken (no early answer)")

fifth = socket.create_connection((srv.host, srv.port), timeout=10)
fifth.sendall(head(GIB) + bytes(1024))
h.eq(answer_of(fifth), 503, "with 4 GiB of uploads held, a fifth 1 GiB upload is answered 503 at once")
fifth.close()

# the fronts' uploads share the same spool: OpenSandbox's file upload
osb = socket.create_connection((srv.host, srv.port), timeout=10)
osb.sendall(("POST /opensandbox/execd/%s/files/upload HTTP/1.1\r\nHost: 127.0.0.1\r\n%s"
             "Content-Type: multipart/form-data; boundary=x\r\nContent-Length: %d\r\n\r\n" % (
                 BOX, AUTH, GIB)).encode() + bytes(1024))
h.eq(answer_of(osb), 503, "... and so is an OpenSandbox file upload of 1 GiB")
osb.close()

ch = socket.create_connection((srv.host, srv.port), timeout=10)
ch.sendall(head(chunked=True) + b"400\r\n" + bytes(1024) + b"\r\n0\r\n\r\n")
h.eq(answer_of(ch), 503, "... and so is a chunked upload")
ch.close()

for s in held:
    s.close()
time.sleep(0.5)
ok = False
for _ in range(20):
    r = srv.put(srv.file_path(BOX, "after.txt"), b"hello\n")
    if r.status == 201:
        ok = True
        break
    time.sleep(0.25)
h.ok(ok, "once the held uploads end, their spool is released and an upload is stored (201)", r.describe())
h.done()
