"""abserver - end-to-end tests of `agentbox serve` over real HTTP.

Builds on abtest (TAP output, temp dirs, cleanup). Python 3 stdlib only.

    import os, sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
    import abserver

    h = abserver.ServerHarness(budget=110)   # not root: skip; over budget: fails and cleans up
    srv = h.start_server(config={"limits": {"disk": "64M"}})   # bails out if it does not come up
    r = srv.post("/v1/sandboxes", {"app_id": "a", "user_id": "u", "chat_id": "c"})
    h.eq(r.status, 201, "create answers 201", r.describe())
    h.done()

What it guarantees:
- Every server runs `agentbox serve --listen 127.0.0.1:PORT --data DIR
  --config FILE` on a free loopback port, with a YAML config written here,
  AGENTBOX_INIT passed through and AGENTBOX_TOKEN only when asked for. Its
  stderr goes to a log file; a failed check shows what the servers logged
  since the previous failure.
- start_server waits for GET /health to answer 200; when the process exits
  first or /health never answers, the file bails out with the command, the
  exit status and the server's stderr.
- At the end (done(), exception, signal, or the file's time budget running
  out) every server gets SIGTERM, then SIGKILL after 10 s; every box the CLI
  (`agentbox --data DIR ls --json`) still lists in any of the file's data dirs
  is removed with `agentbox rm`; then no mount may be left under the file's
  dir and no cgroup under the data dirs' cgroup parents. Leaks, a server that
  died on its own (a crash, a sanitizer report) and a SIGTERM not answered by
  a clean exit 0 are failed tests named "cleanup".
- With a sanitized (ASan) binary, h.slow is 3 (else 1): the budget and the
  tests' latency limits are multiplied by it.
- Every HTTP call has a timeout; a connection error or timeout is a Response
  with status -1 (and .error) rather than an exception, so a broken server
  fails checks instead of stopping the file.
"""

import glob
import hashlib
import http.client
import json
import os
import queue
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.parse

import abtest
from abtest import _Killed, _clip, _quote

SERVER_START_TIMEOUT = 20.0
SERVER_STOP_TIMEOUT = 10.0
HTTP_TIMEOUT = 30.0
LOG_DIAG_MAX = 1500

_DEFAULT = object()  # "use the server's token"

# Config written when a test gives none of these: small disks keep tests fast.
DEFAULT_CONFIG = {
    "limits": {"disk": "64M", "memory": "256M", "timeout": "60s"},
    # full network mode installs iptables rules in the server's network
    # namespace: only tests that run in a namespace of their own turn it on
    "network_full": False,
}

_PLAIN_RE = re.compile(r"^[A-Za-z0-9_./@+-][A-Za-z0-9_./@:+-]*$")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null", "~"}


# ---- small helpers ----------------------------------------------------------

def _netstrings(*parts):
    return "".join("%d:%s," % (len(p.encode()), p) for p in parts)


def chat_box_id(app_id, user_id, chat_id):
    """The id docs/api.md gives {app_id, user_id, chat_id}."""
    s = "agentbox-keys-v2," + _netstrings(app_id, user_id, chat_id)
    return hashlib.sha256(s.encode()).hexdigest()[:16]


def thread_box_id(thread_id, app_id=None):
    """The id docs/api.md gives {thread_id} of app_id (None: the admin's, no app)."""
    if app_id is None:
        s = "agentbox-thread-v2-admin," + _netstrings(thread_id)
    else:
        s = "agentbox-thread-v2," + _netstrings(app_id, thread_id)
    return hashlib.sha256(s.encode()).hexdigest()[:16]


def legacy_chat_box_id(app_id, user_id, chat_id):
    """The id of the first scheme (boxes made before it changed)."""
    return hashlib.sha256(("%s-%s-%s" % (app_id, user_id, chat_id)).encode()).hexdigest()[:16]


def legacy_thread_box_id(thread_id):
    """The first scheme's id of {thread_id}, whatever the app."""
    return hashlib.sha256(thread_id.encode()).hexdigest()[:16]


def now_ms():
    return int(time.time() * 1000)


def wait_for(pred, timeout=10.0, step=0.1):
    """Polls pred until it returns something true or timeout passes; returns its last value."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= end:
            return v
        time.sleep(step)


def free_port(hosts=("127.0.0.1",)):
    """A port nothing listens on at any of hosts (a fleet's nodes share one
    port on 127.0.0.1-3: a port free on the first may be another test's on
    the second)."""
    for _ in range(100):
        socks = []
        try:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind((hosts[0], 0))
            port = s.getsockname()[1]
            for host in hosts[1:]:
                t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                socks.append(t)
                t.bind((host, port))
            return port
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no port free on all of %s" % (hosts,))


cgroup_parent = abtest.cgroup_parent


def cgroup_children(parent):
    """Box cgroup dirs under parent in any hierarchy."""
    found = set()
    for pat in ("/sys/fs/cgroup/*/%s/*" % parent, "/sys/fs/cgroup/%s/*" % parent):
        for d in glob.glob(pat):
            if os.path.isdir(d):
                found.add(d)
    return sorted(found)


def yaml_scalar(v):
    if v is None:
        return "null"
    if v is True or v is False:
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    s = str(v)
    if _PLAIN_RE.match(s) and s.lower() not in _YAML_WORDS:
        return s
    return json.dumps(s)


def to_yaml(obj, indent=0):
    """Block-style YAML for dicts/lists of scalars, dicts and lists."""
    pad = "  " * indent
    lines = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and v:
                lines.append("%s%s:" % (pad, k))
                lines.append(to_yaml(v, indent + 1))
            elif isinstance(v, dict):
                lines.append("%s%s: {}" % (pad, k))
            elif isinstance(v, list):
                lines.append("%s%s: []" % (pad, k))
            else:
                lines.append("%s%s: %s" % (pad, k, yaml_scalar(v)))
    elif isinstance(obj, list):
        for v in obj:
            if isinstance(v, dict) and v:
                sub = to_yaml(v, indent + 1).splitlines()
                lines.append("%s- %s" % (pad, sub[0].lstrip()))
                lines.extend(sub[1:])
            else:
                lines.append("%s- %s" % (pad, yaml_scalar(v)))
    else:
        lines.append(pad + yaml_scalar(obj))
    return "\n".join(lines)


def parse_metrics(text):
    """Prometheus text -> list of (name, {label: value}, float)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?$', line)
        if not m:
            out.append(("!unparsable", {"line": line}, float("nan")))
            continue
        labels = {}
        if m.group(3):
            for lm in re.finditer(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', m.group(3)):
                labels[lm.group(1)] = lm.group(2)
        try:
            val = float(m.group(4))
        except ValueError:
            val = float("nan")
        out.append((m.group(1), labels, val))
    return out


def metric_sum(samples, name, **labels):
    """Sum of the samples named name whose labels include labels; None if none match."""
    vals = [v for n, l, v in samples if n == name and all(l.get(k) == str(x) for k, x in labels.items())]
    return sum(vals) if vals else None


# ---- HTTP -------------------------------------------------------------------

class Response:
    """One HTTP answer. status is -1 when the request failed (.error says why)."""

    def __init__(self, method, path, status=-1, reason="", headers=None, body=b"", error=None, elapsed=0.0):
        self.method, self.path = method, path
        self.status, self.reason = status, reason
        self.headers = headers  # http.client.HTTPMessage or None
        self.body = body or b""
        self.error = error
        self.elapsed = elapsed
        self._json = _DEFAULT

    def header(self, name, default=None):
        if self.headers is None:
            return default
        return self.headers.get(name, default)

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    @property
    def json(self):
        """The body parsed as JSON, or None."""
        if self._json is _DEFAULT:
            try:
                self._json = json.loads(self.body.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                self._json = None
        return self._json

    def get(self, key, default=None):
        """json[key] when the body is a JSON object."""
        j = self.json
        return j.get(key, default) if isinstance(j, dict) else default

    @property
    def err_code(self):
        e = self.get("error")
        return e.get("code") if isinstance(e, dict) else None

    @property
    def err_message(self):
        e = self.get("error")
        m = e.get("message") if isinstance(e, dict) else None
        return m if isinstance(m, str) else ""

    def describe(self):
        if self.status == -1:
            return "%s %s -> no answer: %s (after %.2fs)" % (self.method, self.path, self.error, self.elapsed)
        hdrs = "".join("  %s: %s\n" % kv for kv in (self.headers.items() if self.headers else []))
        return "%s %s -> %d %s (%.3fs)\n%sbody: %s" % (self.method, self.path, self.status, self.reason,
                                                        self.elapsed, hdrs, _clip(self.text, 1500))


class Event:
    """One server-sent event: type (event:), id, data (text), json (data parsed), t (arrival, monotonic)."""

    def __init__(self, type, id, data, t):
        self.type, self.id, self.data, self.t = type, id, data, t
        try:
            self.json = json.loads(data)
        except ValueError:
            self.json = None

    def __repr__(self):
        return "Event(%s, id=%s, %s)" % (self.type, self.id, _clip(self.data, 300))


class SSE:
    """A streaming request. If the answer is 200 text/event-stream, a thread
    parses events into a queue; next(timeout) returns one (or None).
    Otherwise .status/.body hold the (error) answer."""

    def __init__(self, server, method, path, body=None, headers=None, token=_DEFAULT, timeout=HTTP_TIMEOUT):
        self.method, self.path = method, path
        self.status, self.headers, self.body, self.error = -1, None, b"", None
        self.events, self.comments = [], []
        self.t0 = time.monotonic()
        self._q = queue.Queue()
        self._conn = None
        self._resp = None
        self._closed = False
        self.ended = False  # the server closed the stream
        hdrs = {"Accept": "text/event-stream"}
        hdrs.update(headers or {})
        try:
            self._conn = http.client.HTTPConnection(server.host, server.port, timeout=timeout)
            data, hdrs = server._encode(body, hdrs, token)
            self._conn.request(method, path, body=data, headers=hdrs)
            self._resp = self._conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            self.error = "%s: %s" % (type(e).__name__, e)
            self.close()
            return
        self.status = self._resp.status
        self.headers = self._resp.headers
        ctype = self._resp.getheader("Content-Type", "")
        if self.status != 200 or not ctype.startswith("text/event-stream"):
            try:
                self.body = self._resp.read()
            except (OSError, http.client.HTTPException) as e:
                self.error = str(e)
            self.close()
            return
        # The reader blocks in recv; its timeout is the stream's whole life.
        if self._conn.sock is not None:
            self._conn.sock.settimeout(max(timeout, 120.0))
        self._thread = threading.Thread(target=self._reader, daemon=True)
        self._thread.start()

    @property
    def json(self):
        try:
            return json.loads(self.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return None

    @property
    def content_type(self):
        return self.headers.get("Content-Type", "") if self.headers is not None else ""

    def _reader(self):
        ev_type, ev_id, data = None, None, []
        try:
            while True:
                line = self._resp.readline()
                if not line:
                    break
                line = line.decode("utf-8", "replace").rstrip("\r\n")
                if line == "":
                    if data or ev_type:
                        self._q.put(Event(ev_type or "message", ev_id, "\n".join(data), time.monotonic()))
                    ev_type, data = None, []
                    continue
                if line.startswith(":"):
                    self.comments.append((time.monotonic(), line[1:].strip()))
                    continue
                field, _, value = line.partition(":")
                if value.startswith(" "):
                    value = value[1:]
                if field == "event":
                    ev_type = value
                elif field == "data":
                    data.append(value)
                elif field == "id":
                    ev_id = value
        except Exception:  # noqa: BLE001 - any end of the stream (also close() from another thread)
            pass
        self.ended = True
        self._q.put(None)

    def next(self, timeout=10.0):
        """The next event, or None on timeout or end of stream."""
        if self._resp is None or self.status != 200:
            return None
        try:
            ev = self._q.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
        if ev is None:
            self._q.put(None)  # stay at end
            return None
        self.events.append(ev)
        return ev

    def collect(self, until=None, timeout=10.0):
        """Events until until(event) is true (that event included), the
        stream ends, or timeout passes. Returns those events."""
        got = []
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0:
                break
            ev = self.next(left)
            if ev is None:
                break
            got.append(ev)
            if until is not None and until(ev):
                break
        return got

    def drain(self, quiet=0.5, timeout=10.0):
        """Events until none arrives for `quiet` seconds."""
        got = []
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            ev = self.next(min(quiet, end - time.monotonic()))
            if ev is None:
                break
            got.append(ev)
        return got

    def close(self):
        """Closes the connection for real (the server sees the client go)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._conn is not None and self._conn.sock is not None:
                self._conn.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        t = getattr(self, "_thread", None)
        if t is not None and t is not threading.current_thread():
            t.join(5)  # the reader sees EOF; then its file object can go
        for obj in (self._resp, self._conn):
            try:
                if obj is not None:
                    obj.close()
            except Exception:  # noqa: BLE001 - closing what may be half-closed
                pass

    def describe(self):
        if self.status == -1:
            return "%s %s (SSE) -> no answer: %s" % (self.method, self.path, self.error)
        return "%s %s (SSE) -> %d %s; events: %s; body: %s" % (
            self.method, self.path, self.status, self.content_type,
            _clip(repr(self.events), 2000), _clip(self.body.decode("utf-8", "replace"), 800))


# ---- one server process -------------------------------------------------------

class Server:
    """One `agentbox serve` process (see ServerHarness.start_server)."""

    def __init__(self, h, name, data, config, token, env, listen_host, args):
        self.h = h
        self.name = name
        self.data = data
        self.config = config
        self.token = token
        self.extra_env = dict(env or {})
        self.listen_host = listen_host
        self.extra_args = list(args or ())
        self.host = "127.0.0.1"
        self.port = None
        self.proc = None
        self.starts = 0
        self.log_path = os.path.join(h.root, "%s.log" % name)
        self.config_path = os.path.join(h.root, "%s.yaml" % name)
        self._log_shown = 0
        self.exit_note = None  # how the last process ended, when the test ended it
        self.expect_exit = False  # True for servers a test expects to exit on their own
        self.bad_stops = []  # SIGTERMs not answered by a clean exit 0 (a sanitizer report, a hang)
        with open(self.config_path, "w", encoding="utf-8") as f:
            f.write(to_yaml(config) + "\n")

    @property
    def url(self):
        return "http://%s:%s" % (self.host, self.port)

    def argv(self):
        return [self.h.bin, "serve", "--listen", "%s:%d" % (self.listen_host, self.port),
                "--data", self.data, "--config", self.config_path] + self.extra_args

    def env(self):
        e = {k: v for k, v in os.environ.items() if k not in abtest._SCRUBBED_ENV}
        if self.token:
            e["AGENTBOX_TOKEN"] = self.token
        e.update(self.extra_env)
        return e

    def spawn(self, new_port=True):
        """Starts the process (not waiting for it to answer)."""
        if new_port or self.port is None:
            self.port = free_port()
        argv = self.argv()
        with open(self.log_path, "ab") as log:
            log.write(("\n==== start #%d: %s\n" % (self.starts + 1, " ".join(_quote(a) for a in argv))).encode())
            log.flush()
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=self.env(),
                                         preexec_fn=_server_preexec)
        self.starts += 1
        self.exit_note = None
        return self.proc

    def start(self, timeout=SERVER_START_TIMEOUT, new_port=True):
        """Spawns and waits for GET /health = 200. Returns None, or a message why not."""
        self.spawn(new_port)
        end = time.monotonic() + timeout
        last = None
        while time.monotonic() < end:
            rc = self.proc.poll()
            if rc is not None:
                return "`%s` exited with status %s before /health answered" % (
                    " ".join(_quote(a) for a in self.argv()), rc)
            r = self.request("GET", "/health", token=None, timeout=2.0)
            if r.status == 200:
                return None
            last = r
            time.sleep(0.05)
        return "`%s` did not answer GET /health with 200 within %gs; last: %s" % (
            " ".join(_quote(a) for a in self.argv()), timeout, last.describe() if last else "-")

    def death_note(self):
        """' (the server process has exited: ...)' when it died on its own, else ''."""
        if self.proc is None or self.exit_note:
            return ""
        rc = self.proc.poll()
        if rc is None:
            return ""
        how = "killed by %s" % signal.Signals(-rc).name if rc < 0 and -rc in signal.valid_signals() \
            else "status %d" % rc
        return " (the server process has exited: %s)" % how

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        """SIGKILL to the server process only (its boxes live on)."""
        if self.proc is None:
            return
        try:
            os.kill(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        self.exit_note = "killed with SIGKILL by the test"
        self._log_marker("killed with SIGKILL by the test")

    def stop(self, timeout=SERVER_STOP_TIMEOUT):
        """SIGTERM, then SIGKILL after timeout. Returns (exited_on_sigterm, returncode)."""
        if self.proc is None or self.proc.poll() is not None:
            return True, (self.proc.returncode if self.proc else None)
        try:
            os.kill(self.proc.pid, signal.SIGTERM)
        except OSError:
            pass
        try:
            rc = self.proc.wait(timeout)
            self.exit_note = "exited %s after SIGTERM" % rc
            self._log_marker(self.exit_note)
            if rc != 0:
                self.bad_stops.append("start #%d exited with status %s after SIGTERM" % (self.starts, rc))
            return True, rc
        except subprocess.TimeoutExpired:
            try:
                os.kill(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()
            self.exit_note = "SIGKILLed: still running %gs after SIGTERM" % timeout
            self._log_marker(self.exit_note)
            self.bad_stops.append("start #%d was still running %gs after SIGTERM" % (self.starts, timeout))
            return False, self.proc.returncode

    def restart(self, timeout=SERVER_START_TIMEOUT, new_port=True):
        if self.alive():
            self.stop()
        return self.start(timeout, new_port)

    def _log_marker(self, text):
        try:
            with open(self.log_path, "ab") as log:
                log.write(("==== %s\n" % text).encode())
        except OSError:
            pass

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_since_shown(self):
        text = self.log()
        new = text[self._log_shown:]
        self._log_shown = len(text)
        return new

    # ---- requests ---------------------------------------------------------

    def _encode(self, body, headers, token):
        hdrs = dict(headers or {})
        tok = self.token if token is _DEFAULT else token
        if tok and not any(k.lower() == "authorization" for k in hdrs):
            hdrs["Authorization"] = "Bearer %s" % tok
        if body is None:
            data = None
        elif isinstance(body, bytes):
            data = body
        elif isinstance(body, str):
            data = body.encode("utf-8")
        else:
            data = json.dumps(body).encode("utf-8")
            hdrs.setdefault("Content-Type", "application/json")
        return data, hdrs

    def request(self, method, path, body=None, headers=None, token=_DEFAULT, timeout=HTTP_TIMEOUT, query=None):
        """One request on a fresh connection. body: dict/list (sent as JSON),
        str or bytes. token: _DEFAULT = the server's token, None = no
        Authorization header, a string = that bearer token."""
        if query:
            path = path + ("&" if "?" in path else "?") + urllib.parse.urlencode(query)
        data, hdrs = self._encode(body, headers, token)
        t0 = time.monotonic()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            try:
                conn.request(method, path, body=data, headers=hdrs)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the server may answer (413) without reading the whole body
            resp = conn.getresponse()
            raw = resp.read()
            r = Response(method, path, resp.status, resp.reason, resp.headers, raw, None, time.monotonic() - t0)
        except (OSError, http.client.HTTPException) as e:
            r = Response(method, path, error="%s: %s%s" % (type(e).__name__, e, self.death_note()),
                         elapsed=time.monotonic() - t0)
        finally:
            conn.close()
        self.h._note_response(self, r)
        return r

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def put(self, path, body=None, **kw):
        return self.request("PUT", path, body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def sse(self, path, method="GET", body=None, headers=None, token=_DEFAULT, timeout=HTTP_TIMEOUT):
        return SSE(self, method, path, body, headers, token, timeout)

    def raw(self, data, timeout=10.0, send_timeout=None, shut_write=False):
        """Sends raw bytes on a new connection and returns (status, head, body bytes, error).
        Tolerates the server closing early (it may answer before reading the body)."""
        s = socket.create_connection((self.host, self.port), timeout=send_timeout or timeout)
        err = None
        got = b""
        try:
            try:
                s.sendall(data)
                if shut_write:
                    s.shutdown(socket.SHUT_WR)
            except OSError as e:
                err = "send: %s" % e
            s.settimeout(timeout)
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                try:
                    chunk = s.recv(65536)
                except socket.timeout:
                    break
                except OSError as e:
                    err = (err + "; " if err else "") + "recv: %s" % e
                    break
                if not chunk:
                    break
                got += chunk
                if _complete_http(got):
                    break
        finally:
            s.close()
        return _parse_raw(got) + (err,)

    # ---- conveniences -------------------------------------------------------

    def box(self, box_id, **kw):
        """GET /v1/sandboxes/ID -> the box dict, or None (404 or error)."""
        r = self.get("/v1/sandboxes/%s" % box_id, **kw)
        return r.json if r.status == 200 and isinstance(r.json, dict) else None

    def status_of(self, box_id, **kw):
        r = self.get("/v1/sandboxes/%s" % box_id, **kw)
        if r.status == 404:
            return None
        return r.get("status", "(GET answered %s)" % r.status)

    def list(self, query=None, **kw):
        """GET /v1/sandboxes -> list of boxes, or None when the answer is not {"sandboxes": [...]}."""
        r = self.get("/v1/sandboxes", query=query, **kw)
        v = r.get("sandboxes")
        return v if r.status == 200 and isinstance(v, list) else None

    def exec(self, box_id, command, token=_DEFAULT, headers=None, http_timeout=HTTP_TIMEOUT, **fields):
        """POST /v1/sandboxes/ID/exec with {"command": command, **fields}."""
        body = {"command": command}
        body.update(fields)
        return self.post("/v1/sandboxes/%s/exec" % box_id, body, token=token, headers=headers, timeout=http_timeout)

    def file_path(self, box_id, path, **q):
        q = dict(path=path, **q)
        return "/v1/sandboxes/%s/files?%s" % (box_id, urllib.parse.urlencode(q))

    def health(self):
        r = self.get("/health", token=None, timeout=5)
        return r.json if r.status == 200 and isinstance(r.json, dict) else None

    def metrics(self):
        r = self.get("/metrics")
        return parse_metrics(r.text) if r.status == 200 else None


def _complete_http(buf):
    head, sep, body = buf.partition(b"\r\n\r\n")
    if not sep:
        return False
    m = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
    if m:
        return len(body) >= int(m.group(1))
    if re.search(rb"(?im)^transfer-encoding:\s*chunked", head):
        return body.endswith(b"0\r\n\r\n")
    return False


def _parse_raw(buf):
    head, _, body = buf.partition(b"\r\n\r\n")
    m = re.match(rb"HTTP/\d\.\d (\d{3})", head)
    return (int(m.group(1)) if m else -1, head.decode("latin-1"), body)


def _sanitized(binary):
    """True if binary is built with AddressSanitizer (slower: budgets grow)."""
    try:
        with open(binary, "rb") as f:
            return b"__asan_init" in f.read()
    except OSError:
        return False


def _server_preexec():
    # Own process group (so a stray signal to ours does not hit it) and die
    # with the test (meson's SIGKILL): the server must not outlive its test.
    os.setpgid(0, 0)
    if abtest._libc is None:
        try:
            import ctypes
            abtest._libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            abtest._libc = False
    if abtest._libc:
        abtest._libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


# ---- the harness --------------------------------------------------------------

class ServerHarness(abtest.Harness):
    """abtest.Harness plus servers. budget: seconds the whole file may take
    (SIGALRM then fails the file and cleans up)."""

    def __init__(self, budget=110, **kw):
        self.servers = []
        self.data_dirs = []
        self._lock = threading.RLock()
        self._cg_seen = set()
        super().__init__(**kw)
        self.data_dirs.append(self.data)
        # Sanitized builds run several times slower: budgets and latency
        # limits grow like meson's timeout multiplier for the ASan run.
        self.slow = 3 if _sanitized(self.bin) else 1
        budget *= self.slow
        self.budget = budget
        signal.signal(signal.SIGALRM, self._on_alarm)
        signal.alarm(int(budget))

    def _on_alarm(self, signum, frame):
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM):
            signal.signal(sig, signal.SIG_IGN)
        raise _Killed("the file ran over its %ss time budget (a request or wait hung?)" % self.budget)

    # ---- servers --------------------------------------------------------------

    def new_data_dir(self, name):
        """Another data dir under the file's dir, cleaned up like the first."""
        d = os.path.join(self.root, name)
        os.makedirs(d, 0o700)
        self.data_dirs.append(d)
        return d

    def server(self, config=None, token=None, name=None, data=None, env=None, listen_host="127.0.0.1",
               args=(), defaults=True):
        """A Server object (not started). config: dict written as YAML;
        DEFAULT_CONFIG's keys are added unless given (defaults=False: none)."""
        cfg = {}
        if defaults:
            cfg.update(json.loads(json.dumps(DEFAULT_CONFIG)))
        cfg.update(config or {})
        name = name or "server%d" % (len(self.servers) + 1)
        srv = Server(self, name, data or self.data, cfg, token, env, listen_host, args)
        self.servers.append(srv)
        return srv

    def start_server(self, config=None, token=None, name=None, data=None, env=None, listen_host="127.0.0.1",
                     args=(), defaults=True, timeout=SERVER_START_TIMEOUT):
        """Starts a server and waits until /health answers; bails out (with its
        log) when it does not come up."""
        srv = self.server(config, token, name, data, env, listen_host, args, defaults)
        why = srv.start(timeout)
        if why:
            self.bail_server(srv, why)
        return srv

    def bail_server(self, srv, why):
        self.diag("agentbox serve did not come up: %s\nconfig %s:\n%s\nserver stderr:\n%s" % (
            why, srv.config_path, to_yaml(srv.config), _clip(srv.log()[-3000:], 3000)))
        self.bail_out("agentbox serve did not come up (%s)" % why.split("\n")[0][:300])

    def _note_response(self, srv, r):
        """Boxes seen in answers are recorded (as unconfirmed) so that a file
        killed outright still has them in harness.json for the sweep."""
        if srv.data != self.data or not isinstance(r.json, dict):
            return
        boxes = []
        if isinstance(r.json.get("backend_id"), str):
            boxes.append(r.json["backend_id"])
        for b in r.json.get("sandboxes") or []:
            if isinstance(b, dict) and isinstance(b.get("backend_id"), str):
                boxes.append(b["backend_id"])
        new = [b for b in boxes if abtest.ID_RE.match(b) and b not in self._boxes]
        if new:
            with self._lock:
                for b in new:
                    self._boxes.setdefault(b, False)
                self._save()

    # ---- the CLI view ----------------------------------------------------------

    def cli_boxes(self, data=None):
        """{id: entry} from `agentbox --data DIR ls --json`, or None if it failed."""
        r = abtest._run([self.bin, "--data", data or self.data, "ls", "--json"], 30,
                        env={k: v for k, v in os.environ.items() if k not in abtest._SCRUBBED_ENV})
        try:
            boxes = {b["id"]: b for b in json.loads(r.out)}
        except (ValueError, TypeError, KeyError):
            self.diag("abserver: ls --json failed: %s" % r.describe())
            return None
        for b in boxes.values():
            pid = b.get("init_pid")
            if isinstance(pid, int):
                self._cg_seen.update(abtest.cgroups_of(pid))
        return boxes

    def cli_status(self, box, data=None):
        boxes = self.cli_boxes(data)
        if boxes is None:
            return "(ls --json failed)"
        b = boxes.get(box)
        return b.get("status") if b else None

    def cli(self, *args, data=None, timeout=60):
        """Runs the CLI on a data dir (default: the main one) without tracking."""
        return abtest._run([self.bin, "--data", data or self.data] + [str(a) for a in args], timeout,
                           env={k: v for k, v in os.environ.items() if k not in abtest._SCRUBBED_ENV})

    # ---- reporting -------------------------------------------------------------

    def ok(self, cond, name, diag=None):
        if cond or not self.servers:
            return super().ok(cond, name, diag)
        orig = diag

        def full():
            base = orig() if callable(orig) else orig
            base = _clip(str(base), 2400) if base else ""
            logs = []
            for s in self.servers:
                new = s.log_since_shown()
                if new.strip():
                    logs.append("server %s stderr (new):\n%s" % (s.name, new[-LOG_DIAG_MAX:]))
            return "\n".join([x for x in [base] + logs if x])

        return super().ok(cond, name, full)

    # ---- cleanup ---------------------------------------------------------------

    def _cleanup(self):
        if not self.root:
            return []
        signal.alarm(0)
        problems = []
        for s in self.servers:
            died = s.death_note()
            if died and s.expect_exit is False:
                problems.append("server %s died while in use%s\n%s" % (s.name, died, s.log()[-1500:]))
            if s.alive():
                s.stop()
            if s.bad_stops:
                problems.append("server %s did not stop cleanly on SIGTERM: %s\n%s" % (
                    s.name, "; ".join(s.bad_stops), s.log()[-1500:]))
        if self.failed:
            for s in self.servers:  # one diag each: diag() clips long texts
                self.diag("server %s log tail (%s):\n%s" % (s.name, s.log_path, s.log()[-3000:]))
        parents = [cgroup_parent(d) for d in self.data_dirs]
        keep_boxes = self._keep_boxes
        for d in self.data_dirs:
            boxes = self.cli_boxes(d) if not keep_boxes else {}
            if boxes is None:
                problems.append("agentbox ls --json on %s failed at cleanup" % d)
                continue
            if d == self.data:
                for b in boxes:
                    self._boxes[b] = True  # listed: rm must work
                continue
            for b in boxes:
                r = self.cli("rm", b, data=d, timeout=abtest.CLEANUP_TIMEOUT)
                if r.rc != 0:
                    problems.append("agentbox rm %s at cleanup: %s" % (b, r.describe()))
        problems += super()._cleanup()
        # a data folder outside the harness's dir: its skills disk too (abtest detaches
        # those under the dir)
        for d in self.data_dirs:
            sk = os.path.realpath(os.path.join(d, "skills"))
            if os.path.isfile(os.path.join(d, "skills.img")):
                while sk in abtest.mounts_under(sk) and abtest._detach(sk) is None:
                    pass
        if not keep_boxes:
            left = sorted(set(sum((cgroup_children(p) for p in parents), [])) |
                          set(d for d in self._cg_seen if os.path.isdir(d)))
            if left:
                problems.append("cgroups left after every box was removed: %s" % ", ".join(left))
                for d in left:
                    try:
                        os.rmdir(d)
                    except OSError:
                        pass
        return problems
