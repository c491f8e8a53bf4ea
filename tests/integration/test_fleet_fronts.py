#!/usr/bin/env python3
"""The sessions/chat and DeerFlow (AIO) fronts in a fleet (docs/fleet.md): a
three-node fleet on 127.0.0.1-3 sharing the suite's PostgreSQL; a thread's
box and a DeerFlow sandbox live on n1 and are used through n2 and n3, which
forward to n1 and stream the answer back: a chat turn (the stand-in model of
tests/llm) with a tool call in the box, its SSE streamed as it comes, the
thread's upload and download, one turn per thread across nodes (a second chat
through another node is 409), a thread's delete; DeerFlow's provisioner and
the AIO calls it makes (shell exec waiting for its command, sessions, files,
a download) through a node that does not own the box, and its delete."""
import json
import os
import secrets
import sys
import threading
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "llm"))
import abserver  # noqa: E402
import abfleet  # noqa: E402
import standin  # noqa: E402

h = abserver.ServerHarness(budget=200)
KEY = "fronts-key-a-" + secrets.token_hex(8)
model = standin.start(os.path.join(h.data, "..", "standin-fleet-%d.jsonl" % os.getpid()))
F = abfleet.Fleet(h, name="fleetfronts", config={
    "idle_pause": "1h", "idle_stop": "2h",
    "limits": {"disk": "64M", "memory": "256M", "timeout": "30s"},
    "api_keys": [{"key": KEY, "app_id": "frontsa"}],
    "llm": {"base_url": model.base_url(), "model": "standin-model", "max_steps": 4, "timeout": "60s"}})


def multipart(name, data):
    b = "fleetbnd" + secrets.token_hex(6)
    body = ("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n"
            "Content-Type: application/octet-stream\r\n\r\n" % (b, name)).encode() + data + \
        ("\r\n--%s--\r\n" % b).encode()
    return body, {"Content-Type": "multipart/form-data; boundary=%s" % b}


def chat_stream(node, thread, message):
    return node.sse("/api/chat/%s" % thread, method="POST", body={"message": message}, token=KEY)


def box_of_thread(thread, prefix=""):
    r = F.nodes[0].get("/v1/sandboxes", token=KEY)
    for b in (r.json or {}).get("sandboxes", []) if isinstance(r.json, dict) else (r.json or []):
        if b.get("thread_id") == prefix + thread:
            return b
    return {}


try:
    n1, n2, n3 = F.nodes

    # ---- sessions and chat ------------------------------------------------------------------
    r = n2.post("/api/sessions", {}, token=KEY)
    h.eq(r.status, 201, "a session made through n2", r.describe())
    T = r.get("thread_id") or "none"
    blob = os.urandom(200 << 10)
    body, hdrs = multipart("data.bin", blob)
    r = n1.post("/api/files/%s/upload" % T, body, token=KEY, headers=hdrs)
    h.eq(r.status, 201, "an upload through n1 makes the thread's box there", r.describe())
    box = box_of_thread(T)
    h.eq(box.get("node"), "n1", "the thread's box lives on n1 (made on the node asked)", repr(box))

    r = n3.get("/api/files/%s/download" % T, token=KEY, query={"path": "uploads/data.bin"})
    h.ok(r.status == 200 and r.body == blob, "the download through n3 is the file uploaded on n1, byte for byte",
         r.describe())
    body, hdrs = multipart("second.txt", b"sent through n3\n")
    r = n3.post("/api/files/%s/upload" % T, body, token=KEY, headers=hdrs)
    h.eq(r.status, 201, "an upload through n3", r.describe())
    r = n1.get("/api/files/%s/download" % T, token=KEY, query={"path": "uploads/second.txt"})
    h.eq((r.status, r.body), (200, b"sent through n3\n"), "... is in n1's box", r.describe())

    s = chat_stream(n2, T, "run a command [[tool]]")
    evs = s.collect(until=lambda e: e.type == "done", timeout=40)
    s.close()
    h.eq(s.status, 200, "a chat turn through n2", s.describe())
    kinds = [e.type for e in evs]
    h.ok("tool_call" in kinds and "tool_result" in kinds, "... runs its tool call in the box", repr(kinds))
    h.eq(kinds[-1:], ["done"], "... and ends with its done event", repr(kinds))
    h.eq(box_of_thread(T).get("node"), "n1", "the thread's box is still n1's alone", repr(box_of_thread(T)))

    # one turn per thread across nodes: a long turn through n2, a second through n3 and n1
    s = chat_stream(n2, T, "a long one [[slow]]")
    h.eq(s.status, 200, "a long turn through n2", s.describe())
    first = s.collect(until=lambda e: e.type == "text", timeout=20)
    h.ok(any(e.type == "text" for e in first), "... streams its first text as it comes", repr(first))
    r = n3.post("/api/chat/%s" % T, {"message": "meanwhile [[text]]"}, token=KEY)
    h.eq(r.status, 409, "a second chat on the thread through n3 is 409", r.describe())
    r = n1.post("/api/chat/%s" % T, {"message": "meanwhile [[text]]"}, token=KEY)
    h.eq(r.status, 409, "... and through n1, the owner", r.describe())
    s.close()  # the hang-up ends the turn on n1

    def next_turn():
        t = chat_stream(n3, T, "again [[text]]")
        if t.status != 200:
            t.close()
            return None
        got = t.collect(until=lambda e: e.type == "done", timeout=30)
        t.close()
        return got
    got = None
    deadline = time.time() + 30
    while time.time() < deadline and got is None:
        got = next_turn()
        if got is None:
            time.sleep(0.3)
    h.ok(got and got[-1].type == "done", "after the hang-up through n2, the next turn goes through n3",
         repr(got))

    r = n3.request("DELETE", "/api/sessions/%s" % T, token=KEY)
    h.ok(r.status == 200 and box.get("id") in (r.get("boxes") or []),
         "DELETE of the thread through n3 deletes n1's box", r.describe())
    h.ok(abserver.wait_for(lambda: n1.get("/v1/sandboxes/%s" % box.get("id"), token=KEY).status == 404,
                           timeout=20), "... it is gone on n1")

    # a new thread's first chats through two nodes at once: one box, one turn at a time
    r = n1.post("/api/sessions", {}, token=KEY)
    T2 = r.get("thread_id") or "none"
    answers = []

    def racer(node):
        t = chat_stream(node, T2, "race [[text]]")
        got = t.collect(until=lambda e: e.type == "done", timeout=30) if t.status == 200 else []
        answers.append((node.host, t.status, [e.type for e in got][-1:]))
        t.close()
    ths = [threading.Thread(target=racer, args=(n,)) for n in (n2, n3)]
    for t in ths:
        t.start()
    for t in ths:
        t.join(60)
    h.ok(len(answers) == 2 and all(a[1] == 409 or (a[1] == 200 and a[2] == ["done"]) for a in answers)
         and any(a[1] == 200 for a in answers),
         "first chats of a new thread racing through n2 and n3: each a whole turn or 409", repr(answers))
    r = n1.get("/v1/sandboxes", token=KEY)
    mine = [b for b in (r.json or {}).get("sandboxes", []) if b.get("thread_id") == T2]
    h.eq(len(mine), 1, "... and the thread has one box", repr(mine))
    r = n2.post("/api/chat/%s" % T2, {"message": "after [[text]]"}, token=KEY)
    h.eq(r.status, 200, "the thread's next chat through n2", r.describe())

    # ---- DeerFlow's provisioner and AIO calls ------------------------------------------------
    PK = {"X-API-Key": KEY}
    SID = secrets.token_hex(8)
    r = n1.request("POST", "/deerflow/api/sandboxes", body={"sandbox_id": SID, "thread_id": "th1",
                                                           "user_id": "u1"}, headers=PK, token=None)
    h.eq(r.status, 200, "a DeerFlow sandbox made through n1", r.describe())
    URL = r.get("sandbox_url") or ""
    sbox = box_of_thread(SID, prefix="deerflow:")
    h.eq(sbox.get("node"), "n1", "... lives on n1", repr(sbox))
    r = n2.request("POST", "/deerflow/api/sandboxes", body={"sandbox_id": SID}, headers=PK, token=None)
    h.ok(r.status == 200 and urllib.parse.urlparse(r.get("sandbox_url") or "").path ==
         urllib.parse.urlparse(URL).path, "a create of the same sandbox through n2 is the same sandbox",
         r.describe())
    r = n3.request("GET", "/deerflow/api/sandboxes/" + SID, headers=PK, token=None)
    h.eq((r.status, r.get("sandbox_id")), (200, SID), "GET the sandbox through n3", r.describe())
    BASE = urllib.parse.urlparse(URL).path

    def aio(node, method, path, body=None, query=None):
        return node.request(method, BASE + path, body=body, token=None, query=query)

    def data(r):
        j = r.json or {}
        return j.get("data") if isinstance(j, dict) else None

    r = aio(n2, "GET", "/v1/sandbox")
    h.eq(r.status, 200, "AIO's context through n2", r.describe())
    t0 = time.time()
    r = aio(n2, "POST", "/v1/shell/exec", {"command": "sleep 1; echo from-$(hostname); export KEEP=kept"})
    out = (data(r) or {}).get("output") or ""
    h.ok(r.status == 200 and ("from-%s" % sbox.get("id")) in out and time.time() - t0 >= 0.9,
         "a synchronous shell exec through n2 waits for its command and runs on n1", r.describe())
    r = aio(n3, "POST", "/v1/shell/exec", {"command": "echo $KEEP"})
    h.ok(r.status == 200 and "kept" in ((data(r) or {}).get("output") or ""),
         "the shell session continues through n3", r.describe())
    S = "fleet-" + secrets.token_hex(4)
    r = aio(n3, "POST", "/v1/shell/sessions/create", {"id": S, "exec_dir": "/tmp"})
    h.eq(r.status, 200, "a shell session made through n3", r.describe())
    r = aio(n2, "POST", "/v1/shell/exec", {"id": S, "command": "pwd"})
    h.ok(r.status == 200 and "/tmp" in ((data(r) or {}).get("output") or ""), "... used through n2",
         r.describe())
    r = aio(n2, "POST", "/v1/file/write", {"file": "/mnt/user-data/workspace/fleet.txt",
                                          "content": "written through n2\n"})
    h.eq(r.status, 200, "a file written through n2", r.describe())
    r = aio(n3, "POST", "/v1/file/read", {"file": "/mnt/user-data/workspace/fleet.txt"})
    h.ok(r.status == 200 and "written through n2" in json.dumps(data(r)), "... read through n3", r.describe())
    r = aio(n1, "POST", "/v1/file/list", {"path": "/mnt/user-data/workspace"})
    h.ok(r.status == 200 and "fleet.txt" in json.dumps(data(r)), "... listed on n1, the owner", r.describe())
    r = aio(n3, "GET", "/v1/file/download", query={"path": "/mnt/user-data/workspace/fleet.txt"})
    h.eq((r.status, r.body), (200, b"written through n2\n"), "a download through n3", r.describe())
    r = aio(n2, "POST", "/v1/bash/exec", {"command": "echo bash-$(hostname)"})
    h.ok(r.status == 200 and ("bash-%s" % sbox.get("id")) in json.dumps(data(r)),
         "a bash exec through n2 runs on n1", r.describe())

    r = n3.request("DELETE", "/deerflow/api/sandboxes/" + SID, headers=PK, token=None)
    h.eq((r.status, r.get("ok")), (200, True), "DELETE of the sandbox through n3", r.describe())
    h.ok(abserver.wait_for(lambda: n1.get("/v1/sandboxes/%s" % sbox.get("id"), token=KEY).status == 404,
                           timeout=20), "... deletes n1's box")
    r = aio(n2, "POST", "/v1/shell/exec", {"command": "true"})
    h.ok(r.status in (401, 404), "its sandbox URL answers no more through n2", r.describe())
finally:
    F.close()
h.done()
