#!/usr/bin/env python3
"""Sessions and chat (POST /api/sessions, POST /api/chat/{thread}, files,
DELETE) against the real `agentbox serve` and the stand-in model server
(tests/llm/standin.py): each scripted conversation end to end (text, one
tool call, several in a row, a call split over many chunks, parallel
calls, a skill read on demand), the tool results sent back to the model as
it expects, max_steps, the deadline, a model error as an error event, one
running chat per thread (409), the client's hang-up closing the model
request, the history continuing after a server restart, and the API key
sent in the Authorization header only: never in an event, the server's log
or the store."""
import io
import json
import os
import sys
import time
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "llm"))
import abserver  # noqa: E402
import standin  # noqa: E402

h = abserver.ServerHarness(budget=170)
TOKEN = "admin-token-chat-%d-0123456789" % os.getpid()
KEY_A = "chat-appkey-a-0123456789abcdef"
KEY_B = "chat-appkey-b-0123456789abcdef"
LLM_KEY = "sk-standin-SECRET-%d-zyxwvu" % os.getpid()
model = standin.start(os.path.join(h.data, "..", "standin-%d.jsonl" % os.getpid()))
CONFIG = {
    "limits": {"disk": "64M", "memory": "256M", "timeout": "30s"},
    "api_keys": [{"key": KEY_A, "app_id": "chat-a"}, {"key": KEY_B, "app_id": "chat-b"}],
    "llm": {"base_url": model.base_url(), "model": "standin-model",
            "max_steps": 4, "timeout": "60s",
            "apps": {"chat-b": {"timeout": "2s", "max_steps": 2}}},
}
# The key from the environment (AGENTBOX_LLM_API_KEY): it must not reach the boxes.
srv = h.start_server(token=TOKEN, config=CONFIG, env={"AGENTBOX_LLM_API_KEY": LLM_KEY})


def new_session(key=KEY_A, **body):
    r = srv.post("/api/sessions", body, token=key)
    h.eq(r.status, 201, "POST /api/sessions answers 201", r.describe())
    return (r.json or {}).get("thread_id")


def chat(thread, message, key=KEY_A, timeout=40):
    """The events of one turn, up to its done event: [(type, data)]."""
    s = srv.sse("/api/chat/%s" % thread, method="POST", body={"message": message}, token=key)
    if s.status != 200:
        h.diag(s.describe())
        return s, []
    evs = s.collect(until=lambda e: e.type == "done", timeout=timeout)
    s.close()
    return s, [(e.type, json.loads(e.data)) for e in evs]


def of(evs, kind):
    return [d for t, d in evs if t == kind]


def text_of(evs):
    return "".join(d["delta"] for d in of(evs, "text"))


def records(scenario):
    return [r for r in model.records() if r.get("scenario") == scenario and "body" in r]


thread = new_session()
h.ok(isinstance(thread, str) and thread, "a session has a thread id", repr(thread))

# ---- text only ----
s, evs = chat(thread, "say hello [[text]]")
h.eq(s.content_type.split(";")[0], "text/event-stream", "the chat answers an event stream", s.describe())
h.eq(text_of(evs), "Hello from the stand-in.", "text deltas arrive as the model streams them", repr(evs))
h.ok(len(of(evs, "text")) >= 2, "several text events (the model's pieces)", repr(evs))
done = (of(evs, "done") or [{}])[-1]
h.eq(done.get("stop"), "stop", "done: the model stopped", repr(done))
h.ok(done.get("usage", {}).get("total_tokens", 0) > 0, "done carries the usage", repr(done))
req = records("text")[-1]
h.eq(req["headers"].get("Authorization"), "Bearer " + LLM_KEY, "the key goes in the Authorization header")
h.not_contains(json.dumps(req["body"]), LLM_KEY, "the key is not in the request's body")
h.eq(req["body"].get("stream"), True, "the request streams")
h.eq(req["body"].get("stream_options"), {"include_usage": True}, "the request asks for the usage")
h.eq(req["body"].get("model"), "standin-model", "the configured model is asked")
names = sorted(t["function"]["name"] for t in req["body"].get("tools", []))
h.ok("bash" in names and "read_file" in names, "the box's tools are offered", repr(names))
sysmsg = req["body"]["messages"][0]
h.eq(sysmsg.get("role"), "system", "the first message is the system prompt")

statuses, prev = [], None
for i in range(15):  # the next message as soon as "done" arrives is never 409
    s = srv.sse("/api/chat/%s" % thread, method="POST", body={"message": "quick %d [[text]]" % i},
                token=KEY_A)
    statuses.append(s.status)
    if prev:
        prev.close()
    s.collect(until=lambda e: e.type == "done", timeout=10)
    prev = s
prev.close()
h.eq(statuses, [200] * 15, "a thread takes its next message as soon as done arrives", repr(statuses))

# ---- one tool call ----
_, evs = chat(thread, "run something [[tool]]")
calls, results = of(evs, "tool_call"), of(evs, "tool_result")
h.eq([c["name"] for c in calls], ["bash"], "one tool call event", repr(evs))
h.eq((calls or [{}])[0].get("arguments", {}).get("command"), "echo hi-from-box",
     "the call's arguments are an object", repr(calls))
h.contains((results or [{}])[0].get("output", ""), "hi-from-box", "the tool ran in the box", repr(results))
h.contains(text_of(evs), "hi-from-box", "the model's answer after the result", repr(evs))
second = [r for r in records("tool") if r["step"] == 1][-1]["body"]["messages"]
asst = [m for m in second if m.get("role") == "assistant" and m.get("tool_calls")][-1]
h.eq(asst["tool_calls"][0]["id"], "call_one", "the assistant's call is sent back with its id")
h.eq(json.loads(asst["tool_calls"][0]["function"]["arguments"])["command"], "echo hi-from-box",
     "... and its arguments")
tool_msg = [m for m in second if m.get("role") == "tool"][-1]
h.eq(tool_msg.get("tool_call_id"), "call_one", "the tool message answers the call's id")
h.contains(tool_msg.get("content", ""), "hi-from-box", "the tool message carries the output")

# ---- a model that does not stream ----
_, evs = chat(thread, "whole [[nostream]]")
h.eq([c["name"] for c in of(evs, "tool_call")], ["bash"], "a whole (not streamed) answer's call runs",
     repr(evs))
h.contains(text_of(evs), "hi-from-box", "and its text arrives as one piece", repr(evs))
h.eq((of(evs, "done") or [{}])[-1].get("usage", {}).get("total_tokens"), 20,
     "its usage is counted", repr(evs))

# ---- several tools in a row, and the file they wrote ----
_, evs = chat(thread, "two steps [[tools]]")
h.eq([c["name"] for c in of(evs, "tool_call")], ["bash", "write_file"], "two calls, in order", repr(evs))
h.eq((of(evs, "done") or [{}])[-1].get("steps"), 3, "three model calls", repr(evs))
r = srv.get("/api/files/%s/download" % thread, token=KEY_A, query={"path": "outputs/note.txt"})
h.eq((r.status, r.body), (200, b"written by the agent\n"), "the file the agent wrote downloads", r.describe())

# ---- a call split over many chunks ----
_, evs = chat(thread, "split [[split]]")
calls = of(evs, "tool_call")
h.eq([(c["id"], c["name"]) for c in calls], [("call_split", "bash")], "the split call is assembled",
     repr(evs))
h.eq((calls or [{}])[0].get("arguments", {}).get("command"), "echo split-args-ok",
     "its arguments, one character a chunk, are whole", repr(calls))
h.contains(text_of(evs), "split-args-ok", "and it ran", repr(evs))

# ---- parallel calls ----
_, evs = chat(thread, "both [[parallel]]")
calls, results = of(evs, "tool_call"), of(evs, "tool_result")
h.eq([c["id"] for c in calls], ["call_p0", "call_p1"], "two parallel calls", repr(evs))
h.eq([c["arguments"].get("command") for c in calls], ["echo par-zero", "echo par-one"],
     "their interleaved pieces are assembled by index", repr(calls))
h.eq([r["output"].strip() for r in results], ["par-zero", "par-one"], "both ran", repr(results))
back = [r for r in records("parallel") if r["step"] == 2]
h.ok(back, "the stand-in got both results back in one request", repr(records("parallel")))
if back:
    tools = [m for m in back[-1]["body"]["messages"] if m.get("role") == "tool"][-2:]
    h.eq([m["tool_call_id"] for m in tools], ["call_p0", "call_p1"], "one tool message per call")

# ---- calls the loop refuses ----
_, evs = chat(thread, "bad calls [[badcalls]]")
calls, results = of(evs, "tool_call"), of(evs, "tool_result")
h.eq([(c["name"], c["arguments"]) for c in calls], [("bash", None), ("format_host_disk", {})],
     "calls with bad JSON (arguments null) and an unknown tool are reported", repr(evs))
h.eq([r["is_error"] for r in results], [True, True], "both answer with an error", repr(results))
h.contains(json.dumps(results), "not a JSON object", "naming the bad arguments", repr(results))
h.contains(json.dumps(results), "no tool", "and the unknown tool", repr(results))
h.eq(text_of(evs), "Recovered.", "the model goes on after them", repr(evs))

# ---- a skill read on demand ----
buf = io.BytesIO()
with zipfile.ZipFile(buf, "w") as z:
    z.writestr("SKILL.md", "---\nname: demo\ndescription: A demo skill for the chat test.\n---\n"
               "# Demo\nSay the word pineapple-%d.\n" % os.getpid())
r = srv.post("/api/admin/skills/demo", buf.getvalue(), headers={"Content-Type": "application/zip"})
h.eq(r.status, 201, "the admin uploads a skill at /api/admin/skills/demo", r.describe())
r = srv.get("/api/admin/skills")
h.ok(any(s.get("name") == "demo" for s in (r.json or {}).get("skills", [])), "it is listed", r.describe())


def form(fields, files):
    """A multipart/form-data body: fields {name: value}, files [(filename, bytes)]."""
    b = "f0rmb0undary%d" % os.getpid()
    out = b""
    for k, v in fields.items():
        out += ("--%s\r\nContent-Disposition: form-data; name=\"%s\"\r\n\r\n%s\r\n" % (b, k, v)).encode()
    for name, data in files:
        out += ("--%s\r\nContent-Disposition: form-data; name=\"files\"; filename=\"%s\"\r\n"
                "Content-Type: application/octet-stream\r\n\r\n" % (b, name)).encode() + data + b"\r\n"
    return out + ("--%s--\r\n" % b).encode(), {"Content-Type": "multipart/form-data; boundary=%s" % b}


body, hdr = form({"skill_name": "formskill"},
                 [("SKILL.md", b"---\nname: formskill\ndescription: Uploaded as a form.\n---\n# F\n"),
                  ("scripts/helper.sh", b"echo helper\n")])
r = srv.post("/api/admin/skills", body, headers=hdr)
h.eq((r.status, (r.json or {}).get("skill"), (r.json or {}).get("status"), (r.json or {}).get("files")),
     (201, "formskill", "created", 2), "a skill uploaded as a form (skill_name and its files) installs",
     r.describe())
r = srv.get("/v1/skills/formskill")
h.ok(r.status == 200 and (r.json or {}).get("has_scripts"), "with its scripts/ folder", r.describe())
body, hdr = form({"skill_name": "evilform"},
                 [("SKILL.md", b"---\nname: evilform\ndescription: x\n---\n"), ("../../escape.sh", b"x")])
r = srv.post("/api/admin/skills", body, headers=hdr)
h.eq(r.status, 400, "a file path with .. is refused", r.describe())
h.ok(srv.get("/v1/skills/evilform").status == 404, "and nothing is installed")
h.ok(not os.path.exists(os.path.join(srv.data, "escape.sh")), "nor written outside")
body, hdr = form({"skill_name": "noskillmd"}, [("README.md", b"no SKILL.md")])
r = srv.post("/api/admin/skills", body, headers=hdr)
h.eq(r.status, 400, "a form without SKILL.md is refused with the validation report", r.describe())
h.contains(json.dumps(r.json), "SKILL.md not found", "naming the missing SKILL.md", r.describe())
body, hdr = form({}, [("SKILL.md", b"---\nname: x\n---\n")])
r = srv.post("/api/admin/skills", body, headers=hdr)
h.eq(r.status, 400, "a form without skill_name is 400", r.describe())
_, evs = chat(thread, "use the skill [[skill]]")
h.contains(json.dumps(of(evs, "tool_result")), "pineapple-%d" % os.getpid(),
           "the model read SKILL.md through read_file", repr(evs))
first = [r for r in records("skill") if r["step"] == 0][-1]["body"]["messages"][0]["content"]
h.contains(first, "A demo skill for the chat test.", "the system prompt lists the skill's description")
h.not_contains(first, "pineapple", "but not its body (progressive loading)")

# ---- max_steps ----
_, evs = chat(thread, "forever [[loop]]")
done = (of(evs, "done") or [{}])[-1]
h.eq((done.get("stop"), done.get("steps")), ("max_steps", 4), "max_steps ends the turn", repr(evs))
h.eq(len(of(evs, "tool_result")), 4, "every call got its result", repr(evs))

# ---- model errors ----
_, evs = chat(thread, "fail [[error500]]")
err = (of(evs, "error") or [{}])[-1]
h.eq(err.get("status"), 500, "a model error is an error event with its status", repr(evs))
h.contains(err.get("message", ""), "the model is overloaded", "... and its message", repr(evs))
h.eq((of(evs, "done") or [{}])[-1].get("stop"), "error", "done says error", repr(evs))
_, evs = chat(thread, "bad key [[error401]]")
err = (of(evs, "error") or [{}])[-1]
h.eq(err.get("status"), 401, "a 401 of the model is reported", repr(evs))
h.contains(err.get("message", ""), "Incorrect API key provided", "with the model's message", repr(evs))
h.not_contains(json.dumps(evs), LLM_KEY, "the key the model echoed is not in the events")

# ---- one running chat per thread, and the hang-up ----
slow = srv.sse("/api/chat/%s" % thread, method="POST", body={"message": "think [[slow]]"}, token=KEY_A)
h.eq(slow.status, 200, "a slow chat starts", slow.describe())
first_ev = slow.next(10)
h.ok(first_ev is not None and first_ev.type == "text", "its first piece arrives", repr(first_ev))
r = srv.post("/api/chat/%s" % thread, {"message": "me too [[text]]"}, token=KEY_A)
h.eq(r.status, 409, "a second chat on the same thread is 409 while one runs", r.describe())
other = new_session()
_, evs = chat(other, "meanwhile [[text]]")
h.eq(text_of(evs), "Hello from the stand-in.", "another thread chats meanwhile", repr(evs))
t0 = time.monotonic()
slow.close()
closed = abserver.wait_for(lambda: any(r.get("closed") and r.get("scenario") == "slow"
                                       for r in model.records()), timeout=10)
h.ok(closed, "the client's hang-up closes the model request (the stand-in saw it)",
     repr(model.records()[-3:]))
h.ok(time.monotonic() - t0 < 6, "within seconds (%.1fs)" % (time.monotonic() - t0))
_, evs = chat(thread, "again [[text]]")
h.eq(text_of(evs), "Hello from the stand-in.", "the thread takes a new chat after the hang-up", repr(evs))

# ---- a hang-up while a tool runs ends the tool too ----
long = srv.sse("/api/chat/%s" % thread, method="POST", body={"message": "nap [[sleep]]"}, token=KEY_A)
ev = long.collect(until=lambda e: e.type == "tool_call", timeout=10)
h.ok(ev and ev[-1].type == "tool_call", "a chat runs sleep 30 in the box", repr(ev))
time.sleep(0.5)
t0 = time.monotonic()
long.close()
free = abserver.wait_for(lambda: srv.post("/api/chat/%s" % thread, {"message": "free? [[text]]"},
                                          token=KEY_A).status == 200, timeout=10)
r = srv.post("/api/chat/%s" % thread, {"message": "free? [[text]]"}, token=KEY_A)
h.ok(free and time.monotonic() - t0 < 6,
     "hanging up ends the running command: the thread is free in %.1fs, not 30" % (time.monotonic() - t0),
     r.describe())

# ---- the deadline (app chat-b: timeout 2s, max_steps 2) ----
tb = new_session(KEY_B)
t0 = time.monotonic()
_, evs = chat(tb, "think [[slow]]", key=KEY_B)
err = (of(evs, "error") or [{}])[-1]
h.eq(err.get("code"), "timeout", "past the app's deadline the turn ends with a timeout error", repr(evs))
h.ok(time.monotonic() - t0 < 8, "soon after the 2 s deadline (%.1fs)" % (time.monotonic() - t0))
t0 = time.monotonic()
_, evs = chat(tb, "nap [[sleep]]", key=KEY_B)
h.ok(time.monotonic() - t0 < 8, "the deadline also cuts a running command short (%.1fs, not 30)"
     % (time.monotonic() - t0), repr(evs))
h.eq((of(evs, "error") or [{}])[-1].get("code"), "timeout", "and the turn ends with a timeout", repr(evs))
_, evs = chat(tb, "forever [[loop]]", key=KEY_B)
h.eq((of(evs, "done") or [{}])[-1].get("steps"), 2, "the app's own max_steps", repr(evs))

# ---- bad input ----
for body, what in (({}, "no message"), ({"message": ""}, "an empty message"),
                   ({"message": 3}, "a message that is not a string"),
                   ({"message": "x", "extra": 1}, "an unknown field")):
    r = srv.post("/api/chat/%s" % thread, body, token=KEY_A)
    h.eq(r.status, 400, "chat with %s is 400" % what, r.describe())
r = srv.post("/api/chat/no-such-thread", {"message": "hi"}, token=KEY_A)
h.eq(r.status, 404, "chat on an unknown thread is 404", r.describe())
r = srv.post("/api/chat/bad%20id", {"message": "hi"}, token=KEY_A)
h.eq(r.status, 400, "a bad thread id is 400", r.describe())
r = srv.post("/api/sessions", {"thread_id": thread}, token=KEY_A)
h.eq(r.status, 409, "a session that exists is 409", r.describe())
r = srv.post("/api/sessions", {"thread_id": "../x"}, token=KEY_A)
h.eq(r.status, 400, "a thread id with a slash is 400", r.describe())

# ---- uploads ----
boundary = "chatb0undary"
body = ("--%s\r\nContent-Disposition: form-data; name=\"file\"; filename=\"hello.txt\"\r\n"
        "Content-Type: text/plain\r\n\r\nuploaded-content\r\n--%s--\r\n" % (boundary, boundary)).encode()
r = srv.post("/api/files/%s/upload" % thread, body, token=KEY_A,
             headers={"Content-Type": "multipart/form-data; boundary=%s" % boundary})
h.eq(r.status, 201, "a multipart upload is 201", r.describe())
h.eq([f.get("path") for f in (r.json or {}).get("files", [])], ["/mnt/user-data/uploads/hello.txt"],
     "into /mnt/user-data/uploads", r.describe())
r = srv.get("/api/files/%s/download" % thread, token=KEY_A, query={"path": "uploads/hello.txt"})
h.eq((r.status, r.body), (200, b"uploaded-content"), "and downloads back", r.describe())
r = srv.get("/api/files/%s/download" % thread, token=KEY_A)
h.eq(r.status, 400, "a download without path is 400", r.describe())
r = srv.get("/api/files/%s/download" % thread, token=KEY_A, query={"path": "uploads/none"})
h.eq(r.status, 404, "a missing file is 404", r.describe())
r = srv.post("/api/files/%s/upload" % thread, b"plain", token=KEY_A,
             headers={"Content-Type": "text/plain"})
h.eq(r.status, 400, "an upload that is not multipart is 400", r.describe())

# ---- history across a restart ----
hist = new_session()
chat(hist, "first question [[recall]]")
chat(hist, "second question [[recall]]")
busy = new_session()
slow = srv.sse("/api/chat/%s" % busy, method="POST", body={"message": "think [[slow]]"}, token=KEY_A)
h.ok(slow.next(10) is not None, "a slow chat runs while the server is told to stop", slow.describe())
t0 = time.monotonic()
srv.restart()
h.ok(time.monotonic() - t0 < 15, "the server stops with a chat running (%.1fs)" % (time.monotonic() - t0))
h.ok(abserver.wait_for(lambda: slow.ended, timeout=5), "the chat's stream ends with the server")
slow.close()
_, evs = chat(hist, "third question [[recall]]")
h.contains(text_of(evs), "I was sent 3 user messages; the first: first question",
           "the history continues after a restart", repr(evs))

# ---- the key is never written down, nor seen in a box ----
r = srv.exec(abserver.thread_box_id(hist, "chat-a"),
             "env; tr '\\0' '\\n' < /proc/1/environ; cat /proc/self/environ", token=KEY_A)
h.eq(r.status, 200, "a command runs in the thread's box", r.describe())
h.contains(r.text, "PATH=", "and shows its environment", r.describe())
h.not_contains(r.text, LLM_KEY, "the key is not in the environment of the box's processes")
log = srv.log()
h.not_contains(log, LLM_KEY, "the key is not in the server's log")
found = []
for root, _, files in os.walk(srv.data):
    for f in files:
        p = os.path.join(root, f)
        try:
            with open(p, "rb") as fh:
                if LLM_KEY.encode() in fh.read():
                    found.append(p)
        except OSError:
            pass
h.eq(found, [], "the key is in no file of the data folder (store, logs)")

# ---- delete ----
r = srv.delete("/api/sessions/%s" % thread, token=KEY_A)
h.eq(r.status, 200, "DELETE /api/sessions/{thread} is 200", r.describe())
h.eq(len((r.json or {}).get("boxes", [])), 1, "its box is deleted", r.describe())
r = srv.post("/api/chat/%s" % thread, {"message": "hi"}, token=KEY_A)
h.eq(r.status, 404, "the deleted thread is gone", r.describe())
r = srv.delete("/api/sessions/%s" % thread, token=KEY_A)
h.eq(r.status, 404, "deleting it again is 404", r.describe())
h.done()
