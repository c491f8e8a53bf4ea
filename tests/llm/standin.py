#!/usr/bin/env python3
"""A stand-in for an OpenAI-compatible model server, for the tests of the
agent loop (POST /api/chat): POST /v1/chat/completions answers with a
scripted conversation, streamed as chat-completion chunks over SSE ending
with `data: [DONE]` (with a usage chunk when stream_options.include_usage
asks for it), or with an error status and an {"error": {...}} body.

The script is picked by a marker in the newest user message, "[[NAME]]";
the step within it is the number of tool messages after that user message,
so the stand-in keeps no state between requests:

  text      two text pieces, then stop
  tool      one bash call (echo) then, after its result, text quoting it
  tools     a bash call, then a write_file call, then text (three steps)
  split     one bash call whose arguments arrive over many chunks, one
            character at a time (the id and name come first, as OpenAI sends them)
  parallel  two calls in one answer (index 0 and 1), their pieces interleaved
  skill     a read_file of /mnt/skills/demo/SKILL.md, then text
  nostream  the tool script answered as one JSON chat completion, not
            streamed (a server that ignores "stream": true)
  badcalls  two calls the loop must refuse: arguments that are not JSON, and a
            tool that does not exist; then text
  sleep     a bash call of `sleep 30` (for deadlines and hang-ups during a tool)
  loop      a bash call every step (never stops by itself: max_steps)
  recall    text naming how many user messages it was sent (the history)
  error401  HTTP 401 whose message echoes the request's key (as OpenAI's
            "Incorrect API key provided: ..." does)
  error500  HTTP 500 {"error": {"message": "the model is overloaded"}}
  slow      a text piece, then a piece every 0.2 s for 60 s (a client that
            hangs up is recorded as "closed")

Every request is recorded as one JSON line in the record file: {"headers",
"body", "scenario", "step"} and, when the client hung up mid-stream,
{"closed": true, "scenario"}. Run it as a program (it prints its port) or
start() it in a test."""
import http.server
import json
import os
import sys
import threading
import time

MARK = "[["


def scenario_of(messages):
    user_idx = None
    for i, m in enumerate(messages):
        if m.get("role") == "user":
            user_idx = i
    if user_idx is None:
        return "text", 0
    content = messages[user_idx].get("content") or ""
    name = "text"
    if MARK in content:
        name = content.split(MARK, 1)[1].split("]]", 1)[0]
    step = sum(1 for m in messages[user_idx + 1:] if m.get("role") == "tool")
    return name, step


def chunk(delta=None, finish=None, usage=None, choices=True):
    c = {"id": "chatcmpl-standin", "object": "chat.completion.chunk", "created": int(time.time()),
         "model": "standin"}
    c["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else []
    if usage is not None:
        c["usage"] = usage
    return c


def call_piece(index, id=None, name=None, args=None):
    p = {"index": index}
    if id is not None:
        p["id"] = id
        p["type"] = "function"
    fn = {}
    if name is not None:
        fn["name"] = name
    if args is not None:
        fn["arguments"] = args
    if fn:
        p["function"] = fn
    return p


def whole_call(index, id, name, args):
    return chunk({"tool_calls": [call_piece(index, id, name, json.dumps(args))]})


def text_chunks(*pieces):
    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": p}) for p in pieces]
    out.append(chunk(finish="stop"))
    return out


def last_tool_content(messages):
    for m in reversed(messages):
        if m.get("role") == "tool":
            return m.get("content") or ""
    return ""


def script(name, step, messages):
    """The chunks of one answer (a list), or (status, body) for an error."""
    if name == "text":
        return text_chunks("Hello", " from the stand-in.")
    if name == "recall":
        users = [m.get("content") for m in messages if m.get("role") == "user"]
        return text_chunks("I was sent %d user messages; the first: %s" % (len(users), users[0]))
    if name == "tool":
        if step == 0:
            return [chunk({"role": "assistant", "content": None}),
                    whole_call(0, "call_one", "bash", {"command": "echo hi-from-box",
                                                       "description": "say hi"}),
                    chunk(finish="tool_calls")]
        return text_chunks("The box said: ", last_tool_content(messages).strip())
    if name == "tools":
        if step == 0:
            return [whole_call(0, "call_a", "bash", {"command": "echo first-step",
                                                     "description": "first"}),
                    chunk(finish="tool_calls")]
        if step == 1:
            return [whole_call(0, "call_b", "write_file",
                               {"path": "/mnt/user-data/outputs/note.txt",
                                "content": "written by the agent\n", "description": "write"}),
                    chunk(finish="tool_calls")]
        return text_chunks("Two tools ran.")
    if name == "split":
        if step == 0:
            args = json.dumps({"command": "echo split-args-ok", "description": "split"})
            out = [chunk({"role": "assistant"}),
                   chunk({"tool_calls": [call_piece(0, id="call_split", name="bash")]}),
                   chunk({"tool_calls": [call_piece(0, args="")]})]
            out += [chunk({"tool_calls": [call_piece(0, args=ch)]}) for ch in args]
            out.append(chunk(finish="tool_calls"))
            return out
        return text_chunks("Split call done: ", last_tool_content(messages).strip())
    if name == "parallel":
        if step == 0:
            a = json.dumps({"command": "echo par-zero", "description": "zero"})
            b = json.dumps({"command": "echo par-one", "description": "one"})
            out = [chunk({"tool_calls": [call_piece(0, "call_p0", "bash", ""),
                                         call_piece(1, "call_p1", "bash", "")]})]
            half_a, half_b = len(a) // 2, len(b) // 2
            out.append(chunk({"tool_calls": [call_piece(1, args=b[:half_b])]}))
            out.append(chunk({"tool_calls": [call_piece(0, args=a[:half_a])]}))
            out.append(chunk({"tool_calls": [call_piece(0, args=a[half_a:]),
                                             call_piece(1, args=b[half_b:])]}))
            out.append(chunk(finish="tool_calls"))
            return out
        return text_chunks("Both ran.")
    if name == "skill":
        if step == 0:
            return [whole_call(0, "call_skill", "read_file",
                               {"path": "/mnt/skills/demo/SKILL.md", "description": "load"}),
                    chunk(finish="tool_calls")]
        return text_chunks("Skill read.")
    if name == "badcalls":
        if step == 0:
            return [chunk({"tool_calls": [call_piece(0, "call_badjson", "bash", "{not json"),
                                          call_piece(1, "call_unknown", "format_host_disk", "{}")]}),
                    chunk(finish="tool_calls")]
        return text_chunks("Recovered.")
    if name == "sleep":
        if step == 0:
            return [whole_call(0, "call_sleep", "bash", {"command": "sleep 30; echo late",
                                                         "description": "a long command"}),
                    chunk(finish="tool_calls")]
        return text_chunks("Slept: ", last_tool_content(messages).strip()[:200])
    if name == "loop":
        return [whole_call(0, "call_loop_%d" % step, "bash",
                           {"command": "echo step-%d" % step, "description": "loop"}),
                chunk(finish="tool_calls")]
    if name == "error500":
        return (500, {"error": {"message": "the model is overloaded", "type": "server_error"}})
    return (400, {"error": {"message": "unknown scenario %s" % name, "type": "invalid_request"}})


def whole_completion(chunks):
    """The chunks of a script as one non-streamed chat completion."""
    msg, calls, finish = {"role": "assistant", "content": None}, {}, None
    for c in chunks:
        for ch in c["choices"]:
            d = ch["delta"]
            if d.get("content"):
                msg["content"] = (msg["content"] or "") + d["content"]
            for tc in d.get("tool_calls") or []:
                cur = calls.setdefault(tc["index"], {"id": None, "type": "function",
                                                     "function": {"name": "", "arguments": ""}})
                cur["id"] = tc.get("id") or cur["id"]
                fn = tc.get("function") or {}
                cur["function"]["name"] = fn.get("name") or cur["function"]["name"]
                cur["function"]["arguments"] += fn.get("arguments") or ""
            finish = ch.get("finish_reason") or finish
    if calls:
        msg["tool_calls"] = [calls[i] for i in sorted(calls)]
    return {"id": "chatcmpl-standin", "object": "chat.completion", "model": "standin",
            "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def record(self, obj):
        with self.server.lock:
            with open(self.server.record_path, "a") as f:
                f.write(json.dumps(obj) + "\n")

    def send_json(self, status, obj):
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_event(self, obj):
        data = obj if isinstance(obj, str) else json.dumps(obj)
        self.wfile.write(b"data: " + data.encode() + b"\n\n")
        self.wfile.flush()

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(n)
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            return self.send_json(404, {"error": {"message": "no route %s" % self.path}})
        try:
            body = json.loads(raw)
        except ValueError:
            return self.send_json(400, {"error": {"message": "the body is not JSON"}})
        messages = body.get("messages") or []
        name, step = scenario_of(messages)
        self.record({"headers": dict(self.headers.items()), "body": body, "scenario": name,
                     "step": step})
        if name == "error401":
            auth = self.headers.get("Authorization", "")
            return self.send_json(401, {"error": {
                "message": "Incorrect API key provided: %s. You can find your API key at "
                           "https://platform.example/account/api-keys." % auth[7:],
                "type": "invalid_request_error", "code": "invalid_api_key"}})
        if name == "nostream":
            return self.send_json(200, whole_completion(script("tool", step, messages)))
        out = None if name == "slow" else script(name, step, messages)
        if isinstance(out, tuple):  # an error status, before any stream starts
            return self.send_json(out[0], out[1])
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            if name == "slow":
                self.send_event(chunk({"role": "assistant", "content": "thinking"}))
                end = time.monotonic() + 60
                while time.monotonic() < end:
                    time.sleep(0.2)
                    self.send_event(chunk({"content": "."}))
                self.send_event(chunk(finish="stop"))
                self.send_event("[DONE]")
                return
            # The first delta names the role, as OpenAI's streams do.
            out[0]["choices"][0]["delta"].setdefault("role", "assistant")
            for c in out:
                self.send_event(c)
            if (body.get("stream_options") or {}).get("include_usage"):
                self.send_event(chunk(usage={"prompt_tokens": 10 + len(messages),
                                             "completion_tokens": 5, "total_tokens": 15 + len(messages)},
                                      choices=False))
            self.send_event("[DONE]")
        except (BrokenPipeError, ConnectionResetError):
            self.record({"closed": True, "scenario": name})


class StandIn(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, record_path, port=0):
        self.record_path = record_path
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", port), Handler)

    @property
    def port(self):
        return self.server_address[1]

    def base_url(self):
        return "http://127.0.0.1:%d/v1" % self.port

    def records(self):
        try:
            with open(self.record_path) as f:
                return [json.loads(line) for line in f if line.strip()]
        except FileNotFoundError:
            return []


def start(record_path):
    srv = StandIn(record_path)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


if __name__ == "__main__":
    rec = sys.argv[1] if len(sys.argv) > 1 else os.devnull
    srv = StandIn(rec, int(sys.argv[2]) if len(sys.argv) > 2 else 0)
    print(srv.port, flush=True)
    srv.serve_forever()
