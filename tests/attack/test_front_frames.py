#!/usr/bin/env python3
"""Attacks with malformed and oversized bodies on the fronts' parsers of
network input: multipart/form-data uploads (E2B envd's POST /files,
OpenSandbox execd's files/upload) and Connect envelopes (envd's streaming
calls process.Process/Start, Connect, StreamInput and
filesystem.Filesystem/WatchDir): no boundary, a boundary too long, bodies
cut short, parts without headers, a part count past the parser's table,
bodies past max_upload / max_body, an
envelope whose length runs past the body, a length of 4 GiB, a compressed
or unknown flag, trailing bytes, an empty stream, nested JSON thousands
deep, a message that is not an object. Each attack passes only when it
fails: the answer is a 4xx (never a 5xx, a hang or a dropped connection
without an answer), within seconds; no command of a malformed Start runs
and no file of a malformed upload is written, neither whole nor in part;
the server stays up and serves the box afterwards. A server started with
small limits (max_body 64K, max_upload 256K) keeps the oversized bodies
cheap."""
import json
import os
import secrets
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import abserver  # noqa: E402

TOKEN = "tok-" + secrets.token_hex(8)
h = abserver.ServerHarness(budget=200)
srv = h.start_server(name="frontframes", token=TOKEN, config={
    "idle_pause": "1h", "idle_stop": "2h", "max_body": "64K", "max_upload": "256K"})
r = srv.post("/e2b/v2/sandboxes", {"templateID": "base", "timeout": 600}, headers={"X-API-Key": TOKEN}, token=None)
h.eq(r.status, 201, "an E2B sandbox (its box serves the OpenSandbox front's execd too)", r.describe())
BOX, ETOK = r.get("sandboxID") or "none", r.get("envdAccessToken") or "none"
ENVD = {"E2b-Sandbox-Id": BOX, "X-Access-Token": ETOK}
EX = "/opensandbox/execd/" + BOX
N = [0]


def marker():
    N[0] += 1
    return "/workspace/frame-%d" % N[0]


def rejected(r, what, codes=None):
    ok = r.status != -1 and 400 <= r.status < 500 and (codes is None or r.status in codes)
    h.ok(ok and r.elapsed < 10, "%s: refused with a 4xx%s (%s, %.1fs)" % (
        what, "" if codes is None else " " + "/".join(map(str, codes)), r.status, r.elapsed), r.describe())


def frames(body):
    out = []
    while len(body) >= 5:
        n = struct.unpack(">I", body[1:5])[0]
        try:
            out.append((body[0], json.loads(body[5:5 + n])))
        except ValueError:
            out.append((body[0], None))
        body = body[5 + n:]
    return out, body


def stream_rejected(r, what, codes=None):
    """A streaming call refused: a 4xx, or (Connect's way for a stream) 200
    with one end-of-stream envelope that carries an error and nothing else."""
    if r.status == 200 and codes is None:
        fs, rest = frames(r.body)
        ok = (len(fs) == 1 and fs[0][0] & 2 and isinstance(fs[0][1], dict) and
              isinstance(fs[0][1].get("error"), dict) and fs[0][1]["error"].get("code") and not rest)
        h.ok(ok and r.elapsed < 10, "%s: refused (200 with one end envelope holding an error, %.1fs)" % (
            what, r.elapsed), "%r" % r.body[:500])
        return
    rejected(r, what, codes)


def alive(what):
    r = srv.get("/health")
    h.eq(r.status, 200, "the server is up after %s" % what, r.describe())


def absent(paths, what):
    cmd = "for p in %s; do [ -e $p ] && echo FOUND $p; done; true" % " ".join(paths)
    r = srv.post("/v1/sandboxes/%s/exec" % BOX, {"command": cmd})
    h.ok(r.status == 200 and "FOUND" not in (r.get("stdout") or ""), "%s: nothing was written or run" % what,
         r.describe())


# ---- multipart: envd /files and execd files/upload ------------------------------------------------
def envd_upload(body, ctype):
    return srv.request("POST", "/e2b/envd/files", body=body, token=None, headers=dict(ENVD, **{"Content-Type": ctype}))


def execd_upload(body, ctype):
    return srv.request("POST", EX + "/files/upload", body=body, headers={"Content-Type": ctype})


def envd_part(path, data=b"x", b="B1"):
    return (b"--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n\r\n"
            % (b.encode(), path.encode())) + data + b"\r\n"


def execd_parts(path, data=b"x", b="B1"):
    return (b"--%s\r\nContent-Disposition: form-data; name=\"metadata\"\r\n\r\n{\"path\":\"%s\"}\r\n"
            b"--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\r\n"
            % (b.encode(), path.encode(), b.encode())) + data + b"\r\n"


written = []
for name, up, part in (("envd /files", envd_upload, envd_part), ("execd files/upload", execd_upload, execd_parts)):
    p = [marker() for _ in range(8)]
    written += p
    cases = [
        ("no boundary", part(p[0]) + b"--B1--\r\n", "multipart/form-data"),
        ("an empty boundary", part(p[1]) + b"--B1--\r\n", "multipart/form-data; boundary="),
        ("a boundary of 300 bytes", part(p[2], b="Q" * 300) + b"--" + b"Q" * 300 + b"--\r\n",
         "multipart/form-data; boundary=" + "Q" * 300),
        ("a body cut in a part's data", part(p[3])[:-4], "multipart/form-data; boundary=B1"),
        ("a part whose headers never end", b"--B1\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\""
         % p[4].encode(), "multipart/form-data; boundary=B1"),
        ("a delimiter not followed by CRLF", b"--B1XX" + part(p[5])[4:] + b"--B1--", "multipart/form-data; boundary=B1"),
        ("garbage", os.urandom(4096), "multipart/form-data; boundary=B1"),
    ]
    for what, body, ctype in cases:
        r = up(body, ctype)
        if name.startswith("execd") and what in ("a body cut in a part's data",
                                                  "a delimiter not followed by CRLF", "garbage"):
            # execd's parser finds no complete file part: nothing to write
            # (OpenSandbox answers 200 for an upload without files)
            h.ok(r.status in (200, 400) and r.elapsed < 10, "%s, %s: no 5xx (%d)" % (name, what, r.status),
                 r.describe())
        else:
            rejected(r, "%s, %s" % (name, what))
    alive(name + "'s malformed bodies")
    # many parts: more than execd's table (64) and envd's files in one call
    body = b"".join(part("/workspace/many-%d" % i) for i in range(300)) + b"--B1--\r\n"
    r = up(body, "multipart/form-data; boundary=B1")
    h.ok(r.status != -1 and r.status < 500 and r.elapsed < 20, "%s, 300 parts: answered, no 5xx (%d, %.1fs)" % (
        name, r.status, r.elapsed), r.describe())
    # past max_upload: with a Content-Length the answer comes before the body
    big = part(p[6], b"z" * (300 << 10)) + b"--B1--\r\n"
    rejected(up(big, "multipart/form-data; boundary=B1"), "%s, a body past max_upload" % name, (413,))
    alive(name + "'s oversized bodies")
absent(written, "the malformed and oversized uploads")


# ---- Connect envelopes ---------------------------------------------------------------------------
def env(obj, flags=0, raw=None):
    b = raw if raw is not None else json.dumps(obj).encode()
    return struct.pack(">BI", flags, len(b)) + b


def stream(method, body, ctype="application/connect+json"):
    return srv.request("POST", "/e2b/envd/" + method, body=body, token=None, timeout=15,
                       headers=dict(ENVD, **{"Content-Type": ctype}))


def start_msg(path):
    return {"process": {"cmd": "/bin/bash", "args": ["-c", "touch " + path]}}


started = []
for method in ("process.Process/Start", "process.Process/Connect", "filesystem.Filesystem/WatchDir"):
    p = [marker() for _ in range(9)]
    started += p
    msg = start_msg
    if method.endswith("Connect"):
        def msg(_):
            return {"process": {"pid": 999999}}
    elif method.endswith("WatchDir"):
        def msg(_):
            return {"path": "/workspace"}
    good = env(msg(p[0]))
    cases = [
        ("a length past the body", good[:5] + good[5:-3], None),
        ("a length of 4 GiB - 1", struct.pack(">BI", 0, 0xFFFFFFFF) + good[5:], None),
        ("only 3 bytes of the 5-byte prefix", good[:3], None),
        ("a compressed envelope", env(msg(p[1]), flags=1), None),
        ("a message that is not JSON", env(None, raw=b"{not json"), None),
        ("a message that is an array", env(None, raw=b"[1,2,3]"), None),
        ("JSON nested 30000 deep", env(None, raw=b"[" * 30000 + b"]" * 30000), None),
        ("a message past max_body", env({"process": {"cmd": "/bin/true", "args": ["y" * (80 << 10)]}}), (413,)),
    ]
    for what, body, codes in cases:
        stream_rejected(stream(method, body), "envd %s, %s" % (method, what), codes)
    alive("envd %s's malformed envelopes" % method)
absent(started, "the malformed Start envelopes")

# client streams: StreamInput takes a sequence of envelopes
for what, body in (
        ("an envelope cut short", env({"start": {"process": {"pid": 1}}}) + env({"data": {}})[:-2]),
        ("a length of 4 GiB - 1", env({"start": {"process": {"pid": 1}}}) + struct.pack(">BI", 0, 0xFFFFFFFF)),
        ("a compressed envelope", env({"start": {"process": {"pid": 1}}}, flags=1)),
        ("a message that is not JSON", env(None, raw=b"\xff\xfe")),
        ("a message past max_body", env({"data": {"input": {"stdin": "A" * (80 << 10)}}}))):
    r = stream("process.Process/StreamInput", body)
    rejected(r, "envd StreamInput, %s" % what)
alive("StreamInput's malformed streams")

# unary calls: bare JSON, and an enveloped body where JSON is due
for what, body, ctype in (("JSON nested 30000 deep", b"[" * 30000 + b"]" * 30000, "application/json"),
                          ("not an object", b"\"a string\"", "application/json"),
                          ("an envelope where JSON is due", env({"path": "/"}), "application/json"),
                          ("a body past max_body", json.dumps({"path": "a" * (80 << 10)}).encode(),
                           "application/json")):
    rejected(stream("filesystem.Filesystem/Stat", body, ctype), "envd Stat (unary), %s" % what)

# ---- afterwards the box is served as before ----------------------------------------------------------
r = srv.request("POST", "/e2b/envd/files?path=/workspace/after.txt", body=b"fine", token=None,
                headers=dict(ENVD, **{"Content-Type": "application/octet-stream"}))
h.eq(r.status, 200, "control: a well-formed envd upload works afterwards", r.describe())
up = execd_parts("/workspace/after2.txt", b"fine") + b"--B1--\r\n"
r = execd_upload(up, "multipart/form-data; boundary=B1")
h.eq(r.status, 200, "control: a well-formed execd upload works afterwards", r.describe())
r = stream("process.Process/Start", env({"process": {"cmd": "/bin/bash", "args": ["-c", "cat /workspace/after*.txt"]}}))
h.ok(r.status == 200 and b"end" in r.body, "control: a well-formed Start runs afterwards", r.describe())
h.done()
