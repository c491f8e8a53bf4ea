#!/usr/bin/env python3
"""Attacks through the E2B front's gzip-encoded uploads (POST /e2b/envd/files
with Content-Encoding: gzip, docs/compat-e2b.md): a gzip bomb (a few KiB that
inflate to many MiB) must stop at max_upload (413) and leave no file in the
box; corrupt or cut-short gzip is 400 and writes nothing; another box's
access token is refused from the head (401) before any of the body is
inflated. What a caller may do still works: a gzip upload lands inflated,
several gzip members make one file, and the spool's share is given back
(uploads after a bomb work)."""
import gzip
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

MIB = 1 << 20
h = abserver.ServerHarness(budget=120)
TOKEN = "e2b-gzip-token-%d-0123456789abcdef" % os.getpid()
srv = h.start_server(token=TOKEN, config={"max_upload": "4MiB", "tmp_max": "16MiB"})
KEY = {"X-API-Key": TOKEN}


def sandbox():
    r = srv.post("/e2b/v2/sandboxes", {"timeout": 300}, headers=KEY, token=None)
    h.eq(r.status, 201, "an E2B sandbox", r.describe())
    return r.get("sandboxID") or "", r.get("envdAccessToken") or ""


A, TA = sandbox()
B, TB = sandbox()


def upload(box, tok, path, body, enc="gzip"):
    hdr = {"E2b-Sandbox-Id": box, "X-Access-Token": tok, "Content-Type": "application/octet-stream"}
    if enc:
        hdr["Content-Encoding"] = enc
    return srv.request("POST", "/e2b/envd/files", body=body, headers=hdr, token=None, query={"path": path})


def read(box, tok, path):
    return srv.request("GET", "/e2b/envd/files", headers={"E2b-Sandbox-Id": box, "X-Access-Token": tok},
                       token=None, query={"path": path})


def absent(path, what):
    r = read(A, TA, path)
    h.eq(r.status, 404, "%s: no file %s in the box" % (what, path), r.describe())


text = ("gzip upload %d\n" % os.getpid()).encode() * 100
r = upload(A, TA, "/tmp/plain.txt", gzip.compress(text))
h.eq(r.status, 200, "a gzip upload: 200", r.describe())
r = read(A, TA, "/tmp/plain.txt")
h.ok(r.status == 200 and r.body == text, "the file holds the inflated bytes", r.describe())

r = upload(A, TA, "/tmp/two.txt", gzip.compress(b"first,") + gzip.compress(b"second"))
h.ok(r.status == 200 and read(A, TA, "/tmp/two.txt").body == b"first,second",
     "two gzip members make one file", r.describe())

bomb = gzip.compress(bytes(64 * MIB), compresslevel=9)
h.ok(len(bomb) < 256 << 10, "the bomb is small (%d bytes for 64 MiB)" % len(bomb))
r = upload(A, TA, "/tmp/bomb.bin", bomb)
h.eq(r.status, 413, "a gzip bomb (64 MiB inflated, max_upload 4 MiB): 413", r.describe())
h.ok("max_upload" in (r.get("message") or ""), "the answer names the bound", r.describe())
absent("/tmp/bomb.bin", "the bomb")
r = upload(A, TA, "/tmp/bomb.bin", gzip.compress(bytes(4 * MIB + 1)))
h.eq(r.status, 413, "one byte past max_upload once inflated: 413", r.describe())
r = upload(A, TA, "/tmp/edge.bin", gzip.compress(bytes(4 * MIB)))
h.eq(r.status, 200, "exactly max_upload once inflated: 200", r.describe())

for i in range(6):  # 6 bombs x 4 MiB spooled > tmp_max 16 MiB: each gives its share back
    r = upload(A, TA, "/tmp/bomb%d.bin" % i, bomb)
    if r.status != 413:
        break
h.eq(r.status, 413, "bomb after bomb: each 413 (the spool's share is released)", r.describe())
r = upload(A, TA, "/tmp/after.txt", gzip.compress(b"after"))
h.ok(r.status == 200 and read(A, TA, "/tmp/after.txt").body == b"after", "an upload after the bombs works",
     r.describe())

r = upload(A, TA, "/tmp/corrupt.bin", b"\x1f\x8b\x08\x00" + os.urandom(200))
h.eq(r.status, 400, "corrupt gzip: 400", r.describe())
absent("/tmp/corrupt.bin", "corrupt gzip")
whole = gzip.compress(os.urandom(50000))
r = upload(A, TA, "/tmp/short.bin", whole[: len(whole) // 2])
h.eq(r.status, 400, "gzip cut short: 400", r.describe())
absent("/tmp/short.bin", "gzip cut short")
r = upload(A, TA, "/tmp/notgz.txt", b"plain text, not gzip")
h.eq(r.status, 400, "a body that is not gzip under Content-Encoding: gzip: 400", r.describe())
r = upload(A, TA, "/tmp/br.txt", b"x", enc="br")
h.eq(r.status, 415, "another Content-Encoding: 415", r.describe())

r = upload(B, TA, "/tmp/cross.txt", bomb)
h.eq(r.status, 401, "box B with box A's token: 401 from the head", r.describe())
r = read(B, TB, "/tmp/cross.txt")
h.eq(r.status, 404, "nothing written in box B", r.describe())

for b in (A, B):
    srv.request("DELETE", "/e2b/sandboxes/" + b, headers=KEY, token=None)
h.done()
